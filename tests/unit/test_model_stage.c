/* Pipeline stages of the model (rl_model_opts.stage / n_stages) on the real
 * default model (models/smollm2-135m.gguf or $REDLINE_MODEL, 30 layers):
 * the layer split, that a stage binds only its tensors (weight bytes of the
 * stages add up to the whole model's), that a stage refuses
 * rl_model_forward, and that three stages chained (rl_model_forward_stage
 * with the hidden state handed on, then rl_model_forward_head on stage 0)
 * give logits bit-identical to rl_model_forward on the whole model, for a
 * two-sequence prefill and a decode step that reads the stages' KV. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kv/seqkv.h"
#include "model/model.h"

#define K 3

static const char *model_path(void) {
    const char *m = getenv("REDLINE_MODEL");
    return m && *m ? m : "models/smollm2-135m.gguf";
}

/* Runs batch b through the K stage models (each with its own KV) and the
 * head of stage 0 into logits. */
static void run_stages(rl_model **st, rl_seqkv *kv, const rl_batch *b, float *x0, float *x1,
                       float *logits) {
    rl_err err = {0};
    const float *in = NULL;
    float *bufs[2] = {x0, x1};
    for (int s = 0; s < K; s++) {
        float *out = bufs[s % 2];
        if (rl_model_forward_stage(st[s], b, kv[s].layers, in, out, NULL, &err))
            fail_msg("stage %d: %s", s, err.msg);
        in = out;
    }
    /* the head takes the rows that want logits, in batch order */
    int64_t E = rl_model_n_embd(st[0]);
    float *rows = bufs[K % 2];
    int32_t r = 0;
    for (int32_t i = 0; i < b->n_tok; i++)
        if (b->want_logits[i]) memmove(rows + r++ * E, in + i * E, (size_t)E * sizeof(float));
    if (rl_model_forward_head(st[0], b, rows, logits, NULL, &err)) fail_msg("head: %s", err.msg);
}

static void test_stages(void **state) {
    (void)state;
    if (access(model_path(), R_OK) != 0) skip();
    rl_err err = {0};
    rl_model *whole = NULL, *st[K] = {0};
    rl_model_opts o = {.max_batch = 32};
    if (rl_model_load(model_path(), &o, &whole, &err)) fail_msg("%s", err.msg);
    int32_t L = rl_model_n_layer(whole), prev = 0;
    size_t bytes = 0;
    for (int s = 0; s < K; s++) {
        rl_model_opts so = {.max_batch = 32, .stage = s, .n_stages = K};
        if (rl_model_load(model_path(), &so, &st[s], &err)) fail_msg("stage %d: %s", s, err.msg);
        int32_t l0, l1;
        bool io;
        rl_model_layer_range(st[s], &l0, &l1, &io);
        assert_int_equal(l0, prev);
        assert_int_equal(l1, (s + 1) * L / K);
        assert_int_equal(io, s == 0);
        assert_int_equal(rl_model_kv_shape_of(st[s]).n_layer, l1 - l0);
        prev = l1;
        bytes += rl_model_weight_bytes(st[s]);
    }
    assert_int_equal(prev, L);
    assert_true(bytes == rl_model_weight_bytes(whole));
    assert_true(rl_model_weight_bytes(st[1]) < rl_model_weight_bytes(whole) / 2);
    rl_model_opts bad = {.stage = K, .n_stages = K};
    rl_model *m = NULL;
    assert_int_equal(rl_model_load(model_path(), &bad, &m, &err), RL_ERR_INVALID);

    rl_seqkv kvw, kv[K];
    assert_int_equal(rl_seqkv_init(&kvw, whole, 64, 2, 16, RL_TYPE_F16, &err), RL_OK);
    for (int s = 0; s < K; s++)
        assert_int_equal(rl_seqkv_init(&kv[s], st[s], 64, 2, 16, RL_TYPE_F16, &err), RL_OK);

    enum { N = 11 };
    int32_t V = rl_model_n_vocab(whole), E = rl_model_n_embd(whole);
    int32_t tok[2 * N], pos[2 * N], seq[2 * N];
    bool want[2 * N];
    for (int i = 0; i < 2 * N; i++) { /* two prompts, interleaved */
        tok[i] = 100 + 37 * i % 5000;
        pos[i] = i / 2;
        seq[i] = i % 2;
        want[i] = i >= 2 * N - 2 || i == 3;
    }
    rl_batch b = {.n_tok = 2 * N,
                  .token = tok,
                  .pos = pos,
                  .seq = seq,
                  .want_logits = want,
                  .n_seq = 2,
                  .block_tables = kvw.tables,
                  .n_blocks = kvw.n_blocks};
    int32_t nl = rl_batch_n_logits(&b);
    float *lw = calloc((size_t)nl * V, sizeof(float)), *ls = calloc((size_t)nl * V, sizeof(float));
    float *x0 = calloc((size_t)2 * N * E, sizeof(float)), *x1 = calloc((size_t)2 * N * E, 4);
    assert_non_null(lw);
    assert_non_null(ls);
    assert_non_null(x0);
    assert_non_null(x1);
    assert_int_equal(rl_model_forward(st[1], &b, kv[1].layers, lw, NULL, &err), RL_ERR_INVALID);
    assert_int_equal(rl_model_forward(whole, &b, kvw.layers, lw, NULL, &err), RL_OK);
    run_stages(st, kv, &b, x0, x1, ls);
    assert_memory_equal(lw, ls, (size_t)nl * V * sizeof(float));

    /* a decode step of both sequences over the KV the stages wrote */
    int32_t dt[2] = {42, 4242}, dp[2] = {N, N}, ds[2] = {0, 1};
    bool dw[2] = {true, true};
    rl_batch d = {.n_tok = 2,
                  .token = dt,
                  .pos = dp,
                  .seq = ds,
                  .want_logits = dw,
                  .n_seq = 2,
                  .block_tables = kvw.tables,
                  .n_blocks = kvw.n_blocks};
    assert_int_equal(rl_model_forward(whole, &d, kvw.layers, lw, NULL, &err), RL_OK);
    run_stages(st, kv, &d, x0, x1, ls);
    assert_memory_equal(lw, ls, (size_t)2 * V * sizeof(float));

    free(lw);
    free(ls);
    free(x0);
    free(x1);
    rl_seqkv_free(&kvw);
    for (int s = 0; s < K; s++) {
        rl_seqkv_free(&kv[s]);
        rl_model_free(st[s]);
    }
    rl_model_free(whole);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_stages)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
