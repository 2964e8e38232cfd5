/* Model loading and forward checks on small synthetic GGUF files made with
 * the gguf writer: hyperparameter validation (head counts, layer count,
 * missing keys), tensor validation (missing, wrong shape, arch-specific
 * tensors), batch validation in forward (token range, max batch, duplicate
 * positions, positions beyond the block table), allocation failure during
 * load, and the forward's batch invariance (one prefill = single steps =
 * two interleaved sequences) on a tiny random file of every architecture
 * (llama, qwen2, qwen3, phi3, gemma2, gemma3, granite); the new metadata
 * (rope.scaling.type, granite's multipliers) and tensors (rope_freqs,
 * fused phi3 matrices) and a tensor no architecture uses. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv/seqkv.h"
#include "mtest.h"
#include "gguf/gguf.h"
#include "model/model.h"

typedef struct spec {
    const char *arch;
    int64_t n_layer, n_head, n_kv, n_embd, n_ff, n_vocab;
    const char *skip;      /* tensor to leave out */
    const char *bad_shape; /* tensor whose last dim gets +1 */
    bool no_head_count;
    const char *extra;    /* an extra [n_embd] tensor of this name */
    const char *scaling;  /* rope.scaling.type, or NULL */
    bool rope_freqs;      /* write rope_freqs.weight [head_dim/2] */
    bool no_granite_keys; /* leave out granite.logit_scale */
    const char *fkey;     /* "<arch>.<fkey>" = fval (f32) instead of the default */
    float fval;
    rl_type wtype; /* the layers' matrices (f32 or a quantized type; ffn_down q6_K) */
} spec;

static spec base_spec(const char *arch) {
    spec s = {arch,  2,    4,    2,     32,    64,   64,   NULL,       NULL,
              false, NULL, NULL, false, false, NULL, 0.0f, RL_TYPE_F32};
    return s;
}

static bool is(const spec *s, const char *arch) {
    return !strcmp(s->arch, arch);
}

/* the largest tensor: the quantized spec's ffn matrices, 256 x 512 */
static float g_data[256 * 512];
/* quantized copies of g_data, borrowed by the writer until build() ends */
static void *g_qbuf[64];
static int g_nq;

static void add_t(rl_gguf_writer *w, const spec *s, const char *name, int64_t ne0, int64_t ne1) {
    if (s->skip && !strcmp(s->skip, name)) return;
    if (s->bad_shape && !strcmp(s->bad_shape, name)) {
        if (ne1 > 1)
            ne1++;
        else
            ne0++;
    }
    int64_t ne[2] = {ne0, ne1};
    if (s->wtype != RL_TYPE_F32 && ne1 > 1 && !strncmp(name, "blk.", 4)) {
        rl_type t = strstr(name, "ffn_down") ? RL_TYPE_Q6_K : s->wtype;
        size_t rs = rl_type_row_size(t, ne0);
        assert_true(g_nq < 64);
        uint8_t *q = g_qbuf[g_nq++] = malloc(rs * (size_t)ne1);
        assert_non_null(q);
        for (int64_t r = 0; r < ne1; r++)
            rl_type_get(t)->from_float(g_data + (r * 13 % 97) * 16, q + (size_t)r * rs, ne0);
        assert_int_equal(rl_gguf_writer_tensor(w, name, t, 2, ne, q), RL_OK);
        return;
    }
    assert_int_equal(rl_gguf_writer_tensor(w, name, RL_TYPE_F32, ne1 > 1 ? 2 : 1, ne, g_data),
                     RL_OK);
}

/* Builds the GGUF bytes for spec s; caller frees *buf with rl_free. */
static void build(const spec *s, void **buf, size_t *size) {
    for (size_t i = 0; i < sizeof g_data / sizeof g_data[0]; i++)
        g_data[i] = 0.1f * sinf((float)i * 0.37f) + (i % 7 == 0 ? 0.05f : 0.0f);
    rl_gguf_writer *w = rl_gguf_writer_new();
    assert_non_null(w);
    char k[96];
    rl_gguf_writer_str(w, "general.architecture", s->arch, strlen(s->arch));
#define KV(key, v)                                                                                 \
    do {                                                                                           \
        snprintf(k, sizeof k, "%s." key, s->arch);                                                 \
        rl_gguf_writer_u32(w, k, (uint32_t)(v));                                                   \
    } while (0)
    KV("block_count", s->n_layer);
    KV("embedding_length", s->n_embd);
    KV("feed_forward_length", s->n_ff);
    if (!s->no_head_count) KV("attention.head_count", s->n_head);
    KV("attention.head_count_kv", s->n_kv);
    KV("context_length", 128);
#undef KV
    snprintf(k, sizeof k, "%s.attention.layer_norm_rms_epsilon", s->arch);
    rl_gguf_writer_f32(w, k, 1e-5f);
    if (is(s, "granite")) {
        const char *keys[] = {"embedding_scale", "residual_scale", "attention.scale",
                              "logit_scale"};
        const float vals[] = {12.0f, 0.22f, 0.125f, 4.0f};
        for (int i = 0; i < (s->no_granite_keys ? 3 : 4); i++) {
            if (s->fkey && !strcmp(s->fkey, keys[i])) continue;
            snprintf(k, sizeof k, "%s.%s", s->arch, keys[i]);
            rl_gguf_writer_f32(w, k, vals[i]);
        }
    }
    if (is(s, "phi3") || is(s, "gemma2")) {
        snprintf(k, sizeof k, "%s.attention.sliding_window", s->arch);
        rl_gguf_writer_u32(w, k, 5);
    }
    if (s->fkey) {
        snprintf(k, sizeof k, "%s.%s", s->arch, s->fkey);
        rl_gguf_writer_f32(w, k, s->fval);
    }
    if (s->scaling) {
        snprintf(k, sizeof k, "%s.rope.scaling.type", s->arch);
        rl_gguf_writer_str(w, k, s->scaling, strlen(s->scaling));
        if (!s->fkey || strcmp(s->fkey, "rope.scaling.factor")) {
            snprintf(k, sizeof k, "%s.rope.scaling.factor", s->arch);
            rl_gguf_writer_f32(w, k, 4.0f);
        }
        snprintf(k, sizeof k, "%s.rope.scaling.original_context_length", s->arch);
        rl_gguf_writer_u32(w, k, 32);
    }
    int64_t hd = s->n_head ? s->n_embd / s->n_head : 8;
    int64_t nq = s->n_head ? s->n_head * hd : s->n_embd, nkv = s->n_kv * hd;
    add_t(w, s, "token_embd.weight", s->n_embd, s->n_vocab);
    add_t(w, s, "output_norm.weight", s->n_embd, 1);
    if (s->extra) add_t(w, s, s->extra, s->n_embd, 1);
    if (s->rope_freqs) add_t(w, s, "rope_freqs.weight", hd / 2, 1);
    if (is(s, "phi3")) {
        add_t(w, s, "rope_factors_long.weight", hd / 2, 1);
        add_t(w, s, "rope_factors_short.weight", hd / 2, 1);
    }
    for (int64_t il = 0; il < s->n_layer && il < 4; il++) {
        char n[64];
#define T(suffix, a, b)                                                                            \
    do {                                                                                           \
        snprintf(n, sizeof n, "blk.%d." suffix, (int)il);                                          \
        add_t(w, s, n, a, b);                                                                      \
    } while (0)
        T("attn_norm.weight", s->n_embd, 1);
        if (is(s, "phi3")) { /* fused [q; k; v] and [gate; up] */
            T("attn_qkv.weight", s->n_embd, nq + 2 * nkv);
            T("ffn_up.weight", s->n_embd, 2 * s->n_ff);
        } else {
            T("attn_q.weight", s->n_embd, nq);
            T("attn_k.weight", s->n_embd, nkv);
            T("attn_v.weight", s->n_embd, nkv);
            T("ffn_gate.weight", s->n_embd, s->n_ff);
            T("ffn_up.weight", s->n_embd, s->n_ff);
        }
        T("attn_output.weight", nq, s->n_embd);
        T("ffn_norm.weight", s->n_embd, 1);
        T("ffn_down.weight", s->n_ff, s->n_embd);
        if (is(s, "qwen2")) {
            T("attn_q.bias", nq, 1);
            T("attn_k.bias", nkv, 1);
            T("attn_v.bias", nkv, 1);
        }
        if (is(s, "gemma3") || is(s, "qwen3")) {
            T("attn_q_norm.weight", hd, 1);
            T("attn_k_norm.weight", hd, 1);
        }
        if (is(s, "gemma3") || is(s, "gemma2")) {
            T("post_attention_norm.weight", s->n_embd, 1);
            T("post_ffw_norm.weight", s->n_embd, 1);
        }
#undef T
    }
    rl_err err;
    assert_int_equal(rl_gguf_writer_to_memory(w, buf, size, &err), RL_OK);
    rl_gguf_writer_free(w);
    while (g_nq > 0) free(g_qbuf[--g_nq]);
}

/* Loads spec s; returns the status, the model in *out (or NULL). */
static rl_status load(const spec *s, const rl_model_opts *o, rl_model **out, void **buf,
                      rl_err *err) {
    size_t size;
    build(s, buf, &size);
    return mt_load_memory(*buf, size, o, out, err);
}

static void expect_error(const spec *s, rl_status want, const char *needle) {
    rl_model *m = NULL;
    void *buf = NULL;
    rl_err err = {0};
    rl_status st = load(s, NULL, &m, &buf, &err);
    if (st != want || !strstr(err.msg, needle))
        fail_msg("want status %d with '%s', got %d: '%s'", want, needle, st, err.msg);
    assert_null(m);
    rl_free(buf);
}

static void test_load_ok(void **state) {
    (void)state;
    const char *archs[] = {"llama", "qwen2", "qwen3", "phi3", "gemma2", "gemma3", "granite"};
    for (int a = 0; a < 7; a++) {
        spec s = base_spec(archs[a]);
        rl_model *m = NULL;
        void *buf = NULL;
        rl_err err = {0};
        if (load(&s, NULL, &m, &buf, &err)) fail_msg("%s: %s", archs[a], err.msg);
        assert_string_equal(rl_model_arch(m), archs[a]);
        assert_int_equal(rl_model_n_vocab(m), 64);
        assert_int_equal(rl_model_n_layer(m), 2);
        assert_int_equal(rl_model_n_head(m), 4);
        assert_int_equal(rl_model_n_kv_head(m), 2);
        assert_int_equal(rl_model_head_dim(m), 8);
        assert_int_equal(rl_model_n_ctx_train(m), 128);
        rl_model_kv_shape ks = rl_model_kv_shape_of(m);
        assert_int_equal(ks.n_layer, 2);
        assert_int_equal(ks.head_dim, 8);
        rl_model_free(m);
        rl_free(buf);
    }
}

static void test_bad_hparams(void **state) {
    (void)state;
    spec s = base_spec("llama");
    s.n_head = 0;
    expect_error(&s, RL_ERR_FORMAT, "llama.attention.head_count");
    s = base_spec("llama");
    s.n_kv = 3;
    expect_error(&s, RL_ERR_FORMAT, "not a multiple of head_count_kv");
    s = base_spec("llama");
    s.n_head = 5; /* 32 not divisible by 5 and no key_length */
    s.n_kv = 1;
    expect_error(&s, RL_ERR_FORMAT, "not a multiple of attention.head_count");
    s = base_spec("llama");
    s.no_head_count = true;
    expect_error(&s, RL_ERR_FORMAT, "missing hyperparameter 'llama.attention.head_count'");
    s = base_spec("llama");
    s.n_layer = 100000;
    expect_error(&s, RL_ERR_FORMAT, "llama.block_count");
    s = base_spec("mamba");
    expect_error(&s, RL_ERR_UNSUPPORTED, "general.architecture 'mamba'");
    expect_error(&s, RL_ERR_UNSUPPORTED,
                 "(supported: llama, qwen2, qwen3, phi3, gemma2, gemma3, granite, qwen3moe, "
                 "qwen2moe, olmoe, granitemoe, gpt-oss, bert)");
    s = base_spec("llama");
    s.scaling = "ntk-by-parts";
    expect_error(&s, RL_ERR_UNSUPPORTED, "llama.rope.scaling.type = 'ntk-by-parts' not supported");
    s = base_spec("granite");
    s.no_granite_keys = true;
    expect_error(&s, RL_ERR_FORMAT, "missing hyperparameter 'granite.logit_scale'");
    /* the new keys out of range, named */
    struct {
        const char *arch, *scaling, *key;
        float v;
        const char *needle;
    } bad[] = {
        {"granite", NULL, "logit_scale", 0.0f,
         "hyperparameter 'granite.logit_scale' = 0 out of range"},
        {"granite", NULL, "residual_scale", -1.0f, "'granite.residual_scale' = -1 out of range"},
        {"llama", NULL, "rope.scaling.factor", -2.0f,
         "'llama.rope.scaling.factor' = -2 out of range"},
        {"llama", "linear", "rope.scaling.factor", 1e-5f,
         "'llama.rope.scaling.factor' = 1e-05 out of range"},
        {"qwen3", "yarn", "rope.scaling.factor", 0.5f,
         "qwen3.rope.scaling.factor = 0.5: YaRN needs a factor >= 1"},
        {"phi3", "longrope", "rope.scaling.attn_factor", 0.0f,
         "'phi3.rope.scaling.attn_factor' = 0 out of range"},
        {"gemma2", NULL, "attn_logit_softcapping", -3.0f,
         "'gemma2.attn_logit_softcapping' = -3 out of range"},
        {"gemma2", NULL, "final_logit_softcapping", INFINITY,
         "'gemma2.final_logit_softcapping' = inf out of range"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        s = base_spec(bad[i].arch);
        s.scaling = bad[i].scaling;
        s.fkey = bad[i].key;
        s.fval = bad[i].v;
        expect_error(&s, RL_ERR_FORMAT, bad[i].needle);
    }
}

/* The newer metadata and tensors load: Llama 3.1 rope_freqs, YaRN and
 * LongRoPE scaling types, linear scaling; a model runs with each. */
static void test_rope_scaling_load(void **state) {
    (void)state;
    struct {
        const char *arch, *scaling;
        bool freqs;
    } cases[] = {{"llama", NULL, true},      {"llama", "yarn", false}, {"qwen3", "yarn", false},
                 {"llama", "linear", false}, {"llama", "none", false}, {"phi3", "longrope", false},
                 {"granite", NULL, true}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        spec s = base_spec(cases[c].arch);
        s.scaling = cases[c].scaling;
        s.rope_freqs = cases[c].freqs;
        rl_model *m = NULL;
        void *buf = NULL;
        rl_err err = {0};
        if (load(&s, NULL, &m, &buf, &err)) fail_msg("%s/%s: %s", s.arch, s.scaling, err.msg);
        rl_model_free(m);
        rl_free(buf);
    }
    /* llama with longrope reads the long/short factors, not rope_freqs */
    spec s = base_spec("llama");
    s.scaling = "longrope";
    s.rope_freqs = true;
    expect_error(&s, RL_ERR_UNSUPPORTED, "tensor 'rope_freqs.weight' is not used");
}

static void test_bad_tensors(void **state) {
    (void)state;
    spec s = base_spec("llama");
    s.skip = "blk.1.ffn_up.weight";
    expect_error(&s, RL_ERR_FORMAT, "missing tensor 'blk.1.ffn_up.weight'");
    s = base_spec("llama");
    s.skip = "token_embd.weight";
    expect_error(&s, RL_ERR_FORMAT, "missing tensor 'token_embd.weight'");
    s = base_spec("llama");
    s.bad_shape = "blk.0.attn_k.weight";
    expect_error(&s, RL_ERR_FORMAT, "tensor 'blk.0.attn_k.weight' has shape [32, 17]");
    s = base_spec("llama");
    s.bad_shape = "blk.1.attn_norm.weight";
    expect_error(&s, RL_ERR_FORMAT, "tensor 'blk.1.attn_norm.weight' has shape [33]");
    s = base_spec("qwen2");
    s.skip = "blk.0.attn_v.bias";
    expect_error(&s, RL_ERR_FORMAT, "missing tensor 'blk.0.attn_v.bias'");
    s = base_spec("gemma3");
    s.skip = "blk.1.attn_k_norm.weight";
    expect_error(&s, RL_ERR_FORMAT, "missing tensor 'blk.1.attn_k_norm.weight'");
    s = base_spec("llama");
    s.n_layer = 5; /* build() writes at most 4 layers */
    expect_error(&s, RL_ERR_FORMAT, "missing tensor 'blk.4.attn_norm.weight'");
    s = base_spec("llama");
    s.skip = "blk.0.attn_q.weight";
    expect_error(&s, RL_ERR_FORMAT,
                 "missing tensor 'blk.0.attn_q.weight' (expected shape [32, 32])");
    s = base_spec("qwen3");
    s.skip = "blk.1.attn_q_norm.weight";
    expect_error(&s, RL_ERR_FORMAT,
                 "missing tensor 'blk.1.attn_q_norm.weight' (expected shape [8])");
    s = base_spec("phi3");
    s.bad_shape = "blk.0.attn_qkv.weight";
    expect_error(&s, RL_ERR_FORMAT, "tensor 'blk.0.attn_qkv.weight' has shape [32, 65]");
    s = base_spec("phi3");
    s.bad_shape = "blk.1.ffn_up.weight";
    expect_error(&s, RL_ERR_FORMAT, "tensor 'blk.1.ffn_up.weight' has shape [32, 129]");
    s = base_spec("phi3");
    s.bad_shape = "rope_factors_long.weight";
    expect_error(&s, RL_ERR_FORMAT, "tensor 'rope_factors_long.weight' has shape [5]");
    s = base_spec("gemma2");
    s.skip = "blk.0.post_ffw_norm.weight";
    expect_error(&s, RL_ERR_FORMAT, "missing tensor 'blk.0.post_ffw_norm.weight'");
    s = base_spec("llama");
    s.rope_freqs = true;
    s.bad_shape = "rope_freqs.weight";
    expect_error(&s, RL_ERR_FORMAT, "tensor 'rope_freqs.weight' has shape [5]");
    /* a tensor the architecture would silently skip is refused, named */
    s = base_spec("gemma2");
    s.extra = "blk.0.attn_q_norm.weight";
    expect_error(&s, RL_ERR_UNSUPPORTED,
                 "tensor 'blk.0.attn_q_norm.weight' is not used by the gemma2 architecture");
}

static void test_alloc_failure(void **state) {
    (void)state;
    spec s = base_spec("gemma3");
    size_t size;
    void *buf;
    build(&s, &buf, &size);
    bool ok = false;
    for (long n = 0; n < 400 && !ok; n++) {
        rl_gguf *g = NULL;
        rl_err err = {0};
        if (rl_gguf_open_memory(buf, size, &g, &err)) continue; /* reader ran out */
        rl_model *m = NULL;
        rl_alloc_fail_after(n);
        rl_status st = rl_model_load_gguf(g, NULL, &m, &err);
        rl_alloc_fail_after(-1);
        if (st == RL_OK) {
            ok = true;
            rl_model_free(m);
        } else {
            assert_int_equal(st, RL_ERR_NOMEM);
            assert_null(m);
        }
    }
    assert_true(ok);
    rl_free(buf);
}

static float max_diff(const float *a, const float *b, size_t n) {
    float d = 0;
    for (size_t i = 0; i < n; i++) d = fmaxf(d, fabsf(a[i] - b[i]));
    return d;
}

static void check_invariance(const char *arch) {
    spec s = base_spec(arch);
    rl_model *m = NULL;
    void *buf = NULL;
    rl_err err = {0};
    rl_model_opts o = {.max_batch = 16};
    if (load(&s, &o, &m, &buf, &err)) fail_msg("%s", err.msg);
    enum { N = 12, V = 64 };
    int32_t toks[N] = {1, 5, 9, 13, 2, 63, 0, 7, 7, 30, 31, 4};
    static float all[N * V], step[N * V], multi[2 * N * V];
    rl_seqkv kv;
    assert_int_equal(rl_seqkv_init(&kv, m, 32, 2, 4, RL_TYPE_F32, &err), RL_OK);
    assert_int_equal(rl_seqkv_eval(&kv, m, 0, toks, N, 0, true, all, NULL, &err), RL_OK);
    for (int i = 0; i < N; i++)
        assert_int_equal(rl_seqkv_eval(&kv, m, 1, toks + i, 1, i, false, step + i * V, NULL, &err),
                         RL_OK);
    for (int i = 0; i < N * V; i++) assert_true(isfinite(all[i]));
    assert_true(max_diff(all, step, N * V) == 0.0f);
    /* both sequences interleaved in one batch, reversed order inside it */
    int32_t bt[2 * N], bp[2 * N], bs[2 * N];
    bool want[2 * N];
    rl_batch b = mt_interleaved_batch(toks, N, &kv, bt, bp, bs, want);
    assert_int_equal(rl_batch_n_logits(&b), 2 * N);
    assert_int_equal(rl_model_forward(m, &b, kv.layers, multi, NULL, &err), RL_ERR_LIMIT);
    rl_model_free(m);
    o.max_batch = 2 * N;
    rl_free(buf);
    if (load(&s, &o, &m, &buf, &err)) fail_msg("%s", err.msg);
    assert_int_equal(rl_model_forward(m, &b, kv.layers, multi, NULL, &err), RL_OK);
    for (int j = 0; j < 2 * N; j++)
        assert_true(max_diff(multi + j * V, all + bp[j] * V, V) == 0.0f);
    rl_seqkv_free(&kv);
    rl_model_free(m);
    rl_free(buf);
}

static void test_invariance(void **state) {
    (void)state;
    const char *archs[] = {"llama", "qwen2", "qwen3", "phi3", "gemma2", "gemma3", "granite"};
    for (int a = 0; a < 7; a++) check_invariance(archs[a]);
}

/* Sequences 0, 1, 2 of kv: the n-token prompt toks in one forward (one),
 * in chunks of c (chunked; the same bits is asserted), and unmarked as
 * prompt tokens (plain), logits of vocabulary v for every token. */
static void prompt_three_ways(rl_seqkv *kv, rl_model *m, const int32_t *toks, int n, int c, int v,
                              float *one, float *chunked, float *plain) {
    rl_err err = {0};
    kv->prompt = true;
    assert_int_equal(rl_seqkv_eval(kv, m, 0, toks, n, 0, true, one, NULL, &err), RL_OK);
    for (int i = 0; i < n; i += c)
        assert_int_equal(
            rl_seqkv_eval(kv, m, 1, toks + i, c, i, true, chunked + (size_t)i * v, NULL, &err),
            RL_OK);
    assert_memory_equal(one, chunked, sizeof(float) * (size_t)n * v);
    kv->prompt = false;
    assert_int_equal(rl_seqkv_eval(kv, m, 2, toks, n, 0, true, plain, NULL, &err), RL_OK);
}

/* Prompt tokens (rl_batch.prompt) on q4_K/q6_K weights take the tiles'
 * reduction: a prompt's logits are the same bits in one forward of 70
 * tokens and in chunks of 7; a generated token's are the same alone and
 * beside another sequence's 70-token prompt.  With the layer matrices
 * resident (the default) the role changes nothing: the same tokens
 * unmarked give the same bits.  With the tiles off at load (no resident
 * matrices, every token per-token) the prompt flags change nothing either,
 * and that path is within rounding of the tiles' (and differs somewhere). */
static void test_prompt_role_invariance(void **state) {
    (void)state;
    spec s = base_spec("llama");
    s.n_embd = 256;
    s.n_ff = 512;
    s.wtype = RL_TYPE_Q4_K;
    rl_model *m = NULL;
    void *buf = NULL;
    rl_err err = {0};
    enum { N = 70, C = 7, V = 64, B = N + 1 };
    rl_model_opts o = {.max_batch = B};
    if (load(&s, &o, &m, &buf, &err)) fail_msg("%s", err.msg);
    int32_t toks[B];
    for (int i = 0; i < B; i++) toks[i] = (i * 7 + 3) % V;
    static float one[N * V], chunked[N * V], plain[N * V], gen1[V], mixed[B * V];
    rl_seqkv kv;
    assert_int_equal(rl_seqkv_init(&kv, m, 2 * B, 3, 16, RL_TYPE_F32, &err), RL_OK);
    prompt_three_ways(&kv, m, toks, N, C, V, one, chunked, plain);
    assert_memory_equal(one, plain, sizeof one);
    {
        rl_matmul_set_fast_tiles(false);
        rl_model *m0 = NULL;
        void *buf0 = NULL;
        if (load(&s, &o, &m0, &buf0, &err)) fail_msg("%s", err.msg);
        rl_seqkv kv0;
        assert_int_equal(rl_seqkv_init(&kv0, m0, B, 3, 16, RL_TYPE_F32, &err), RL_OK);
        kv0.prompt = true;
        assert_int_equal(rl_seqkv_eval(&kv0, m0, 0, toks, N, 0, true, plain, NULL, &err), RL_OK);
        kv0.prompt = false;
        assert_int_equal(rl_seqkv_eval(&kv0, m0, 1, toks, N, 0, true, chunked, NULL, &err), RL_OK);
        rl_matmul_set_fast_tiles(true);
        assert_memory_equal(plain, chunked, sizeof plain);
        rl_seqkv_free(&kv0);
        rl_model_free(m0);
        rl_free(buf0);
    }
    float scale = 0;
    for (int i = 0; i < N * V; i++) scale = fmaxf(scale, fabsf(plain[i]));
    float d = max_diff(one, plain, N * V);
    assert_true(d > 0.0f);
    /* last-bit differences move some 8-bit activation roundings of the next
     * matmul (a step of amax/127): 2 layers measured 1.2e-3 of the largest
     * logit; a wrong reduction is off by the logits' own size */
    if (!(d < 1e-2f * scale))
        fail_msg("prompt vs per-token path: max diff %g, max logit %g", d, scale);
    /* sequence 0 generates token N alone; then sequence 1 generates it
     * while sequence 2 (its KV dropped: positions rewritten) prefills */
    assert_int_equal(rl_seqkv_eval(&kv, m, 0, toks + N, 1, N, false, gen1, NULL, &err), RL_OK);
    int32_t pos[B], seq[B];
    bool want[B], prompt[B];
    for (int i = 0; i < B; i++) {
        pos[i] = i < N ? i : N;
        seq[i] = i < N ? 2 : 1;
        want[i] = true;
        prompt[i] = i < N;
    }
    rl_batch b = {.n_tok = B,
                  .token = toks,
                  .pos = pos,
                  .seq = seq,
                  .want_logits = want,
                  .prompt = prompt,
                  .n_seq = 3,
                  .block_tables = kv.tables,
                  .n_blocks = kv.n_blocks};
    assert_int_equal(rl_model_forward(m, &b, kv.layers, mixed, NULL, &err), RL_OK);
    assert_memory_equal(mixed + N * V, gen1, sizeof gen1);
    assert_memory_equal(mixed, one, sizeof one);
    rl_seqkv_free(&kv);
    rl_model_free(m);
    rl_free(buf);
}

/* q3_K weights (a Q3_K_M-like file: q3_K layers, q6_K ffn_down), which have
 * packed tiles but no resident layout: a 70-token prompt (packed, 64 or
 * more fast tokens) and the same prompt in chunks of 7 (the reduction on
 * the rows in place, dot_row) give the same bits; unmarked, the same
 * tokens take the per-token dots, within rounding and not the same bits. */
static void test_prompt_tiles_q3_K(void **state) {
    (void)state;
    spec s = base_spec("llama");
    s.n_embd = 512; /* two super-blocks a row: the ref vec_dot rounds apart */
    s.n_ff = 512;
    s.wtype = RL_TYPE_Q3_K;
    rl_model *m = NULL;
    void *buf = NULL;
    rl_err err = {0};
    enum { N = 70, C = 7, V = 64 };
    rl_model_opts o = {.max_batch = N};
    if (load(&s, &o, &m, &buf, &err)) fail_msg("%s", err.msg);
    int32_t toks[N];
    for (int i = 0; i < N; i++) toks[i] = (i * 5 + 1) % V;
    static float one[N * V], chunked[N * V], plain[N * V];
    rl_seqkv kv;
    assert_int_equal(rl_seqkv_init(&kv, m, 3 * N, 3, 16, RL_TYPE_F32, &err), RL_OK);
    prompt_three_ways(&kv, m, toks, N, C, V, one, chunked, plain);
    float scale = 0;
    for (int i = 0; i < N * V; i++) scale = fmaxf(scale, fabsf(plain[i]));
    const float d = max_diff(one, plain, N * V);
    assert_true(d > 0.0f);
    if (!(d < 1e-2f * scale))
        fail_msg("q3_K prompt vs per-token path: max diff %g, max logit %g", d, scale);
    rl_seqkv_free(&kv);
    rl_model_free(m);
    rl_free(buf);
}

static void test_forward_errors(void **state) {
    (void)state;
    spec s = base_spec("llama");
    rl_model *m = NULL;
    void *buf = NULL;
    rl_err err = {0};
    rl_model_opts o = {.max_batch = 8};
    if (load(&s, &o, &m, &buf, &err)) fail_msg("%s", err.msg);
    rl_seqkv kv;
    assert_int_equal(rl_seqkv_init(&kv, m, 16, 1, 4, RL_TYPE_F16, &err), RL_OK);
    static float lg[8 * 64];
    int32_t tok[3] = {1, 64, 2}, pos[3] = {0, 1, 2}, seq[3] = {0, 0, 0};
    rl_batch b = {.n_tok = 3,
                  .token = tok,
                  .pos = pos,
                  .seq = seq,
                  .n_seq = 1,
                  .block_tables = kv.tables,
                  .n_blocks = kv.n_blocks};
    assert_int_equal(rl_model_forward(m, &b, kv.layers, lg, NULL, &err), RL_ERR_RANGE);
    assert_non_null(strstr(err.msg, "token[1] = 64 out of range"));
    tok[1] = 3;
    pos[2] = 1;
    assert_int_equal(rl_model_forward(m, &b, kv.layers, lg, NULL, &err), RL_ERR_INVALID);
    assert_non_null(strstr(err.msg, "share sequence 0 position 1"));
    pos[2] = 16; /* 4 blocks of 4 slots */
    assert_int_equal(rl_model_forward(m, &b, kv.layers, lg, NULL, &err), RL_ERR_RANGE);
    pos[2] = 2;
    seq[0] = 1;
    assert_int_equal(rl_model_forward(m, &b, kv.layers, lg, NULL, &err), RL_ERR_INVALID);
    seq[0] = 0;
    b.n_tok = 0;
    assert_int_equal(rl_model_forward(m, &b, kv.layers, lg, NULL, &err), RL_ERR_INVALID);
    b.n_tok = 3;
    rl_kv_layer bad = kv.layers[1];
    kv.layers[1].head_dim = 4;
    assert_int_equal(rl_model_forward(m, &b, kv.layers, lg, NULL, &err), RL_ERR_INVALID);
    kv.layers[1] = bad;
    assert_int_equal(rl_model_forward(m, &b, kv.layers, lg, NULL, &err), RL_OK);
    /* the helper's context checks */
    assert_int_equal(rl_seqkv_eval(&kv, m, 0, tok, 3, 14, false, lg, NULL, &err), RL_ERR_RANGE);
    assert_non_null(strstr(err.msg, "exceed the context size 16"));
    assert_int_equal(rl_seqkv_eval(&kv, m, 0, tok, 0, 0, false, lg, NULL, &err), RL_ERR_INVALID);
    rl_seqkv kv0;
    assert_int_equal(rl_seqkv_init(&kv0, m, 0, 1, 4, RL_TYPE_F16, &err), RL_ERR_INVALID);
    rl_seqkv_free(&kv);
    rl_model_free(m);
    rl_free(buf);
}

static void test_file_errors(void **state) {
    (void)state;
    rl_model *m = (rl_model *)1;
    rl_err err = {0};
    assert_int_not_equal(rl_model_load("/nonexistent/model.gguf", NULL, &m, &err), RL_OK);
    assert_null(m);
    rl_model_opts o = {.max_batch = -3};
    spec s = base_spec("llama");
    void *buf = NULL;
    assert_int_equal(load(&s, &o, &m, &buf, &err), RL_ERR_INVALID);
    assert_non_null(strstr(err.msg, "max_batch"));
    rl_free(buf);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_load_ok),           cmocka_unit_test(test_bad_hparams),
        cmocka_unit_test(test_bad_tensors),       cmocka_unit_test(test_alloc_failure),
        cmocka_unit_test(test_invariance),        cmocka_unit_test(test_prompt_role_invariance),
        cmocka_unit_test(test_prompt_tiles_q3_K), cmocka_unit_test(test_forward_errors),
        cmocka_unit_test(test_file_errors),       cmocka_unit_test(test_rope_scaling_load),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
