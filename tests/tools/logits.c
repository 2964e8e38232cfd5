/* logits: run a model on fixed token ids and print what the golden tests
 * compare with the NumPy reference (tests/reference/forward.py).
 *
 *   logits -m MODEL --tokens 1,2,3 [--greedy N] [--all] [--out F.npy]
 *          [-t THREADS] [-c CTX] [-b MAX_BATCH] [--kv f16|f32|q8_0|q8_64|q4_0|iq4_nl]
 *          [--kv-v TYPE (V pages; default: the --kv type)] [--ref]
 *          [--check-batch] [--exact]
 *
 * Prints one JSON line on stdout:
 *   {"arch", "n_vocab", "prompt_tokens", "greedy", "top5_last",
 *    "top5_last_logits", ["logits": [...] when --out is not given]}
 * --out writes the final-position logits (or, with --all, every prompt
 * position's) as a float32 .npy file.
 * --check-batch also runs the prompt (a) as one prefill batch, (b) as n
 * single-token steps, (c) twice in one batch as two interleaved sequences,
 * and adds "prefill_vs_step_max_abs" and "multiseq_max_abs" (max |diff|
 * over all positions' logits against (a)).
 * --exact dequantizes every weight to f32 at load and keeps KV in f32: the
 * float path that the reference is compared with to 1e-4 cosine.
 * Errors: one line on stderr, exit status 1.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv/seqkv.h"
#include "model/kcal.h"
#include "kernels/kernels.h"
#include "model/model.h"

static rl_type g_kv_v = RL_TYPE_COUNT; /* V page type (--kv-v), COUNT = as K */

static int die(const char *msg) {
    fprintf(stderr, "logits: %s\n", msg);
    return 1;
}

static int parse_tokens(const char *s, int32_t **out, int32_t *n) {
    int32_t cap = 16, cnt = 0;
    int32_t *t = malloc((size_t)cap * sizeof *t);
    if (!t) return -1;
    const char *p = s;
    while (*p) {
        while (*p == ' ' || *p == ',') p++;
        if (!*p) break;
        char *end;
        errno = 0;
        long long v = strtoll(p, &end, 10);
        if (end == p || errno || v < INT32_MIN || v > INT32_MAX) {
            free(t);
            return -1;
        }
        if (cnt == cap) {
            cap *= 2;
            int32_t *nt = realloc(t, (size_t)cap * sizeof *nt);
            if (!nt) {
                free(t);
                return -1;
            }
            t = nt;
        }
        t[cnt++] = (int32_t)v;
        p = end;
    }
    *out = t;
    *n = cnt;
    return 0;
}

static int write_npy(const char *path, const float *x, int64_t rows, int64_t cols, bool two_d) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    char hdr[128];
    int n;
    if (two_d)
        n = snprintf(hdr, sizeof hdr,
                     "{'descr': '<f4', 'fortran_order': False, 'shape': (%lld, %lld), }",
                     (long long)rows, (long long)cols);
    else
        n = snprintf(hdr, sizeof hdr,
                     "{'descr': '<f4', 'fortran_order': False, 'shape': (%lld,), }",
                     (long long)cols);
    int total = 10 + n + 1, pad = (64 - total % 64) % 64;
    unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, 0, 0};
    uint16_t hl = (uint16_t)(n + pad + 1);
    pre[8] = (unsigned char)(hl & 0xff);
    pre[9] = (unsigned char)(hl >> 8);
    fwrite(pre, 1, 10, f);
    fwrite(hdr, 1, (size_t)n, f);
    for (int i = 0; i < pad; i++) fputc(' ', f);
    fputc('\n', f);
    size_t cnt = (size_t)(rows * cols);
    int ok = fwrite(x, sizeof(float), cnt, f) == cnt;
    return (fclose(f) == 0 && ok) ? 0 : -1;
}

static int32_t argmax(const float *x, int32_t n) {
    int32_t b = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

static void top5(const float *x, int32_t n, int32_t *idx) {
    for (int k = 0; k < 5; k++) idx[k] = -1;
    for (int32_t i = 0; i < n; i++) {
        int k = 5;
        while (k > 0 && (idx[k - 1] < 0 || x[i] > x[idx[k - 1]])) k--;
        if (k >= 5) continue;
        memmove(idx + k + 1, idx + k, (size_t)(4 - k) * sizeof *idx);
        idx[k] = i;
    }
}

static float max_abs_diff(const float *a, const float *b, size_t n) {
    float d = 0;
    for (size_t i = 0; i < n; i++) {
        float e = fabsf(a[i] - b[i]);
        if (e > d || isnan(e)) d = isnan(e) ? INFINITY : e;
    }
    return d;
}

/* (b) and (c) of --check-batch; ref = all-position logits of one prefill. */
static rl_status check_batch(rl_model *m, const int32_t *tok, int32_t n, int32_t ctx, rl_type kvt,
                             const float *ref, rl_threadpool *tp, float *d_step, float *d_multi,
                             rl_err *err) {
    const size_t V = (size_t)rl_model_n_vocab(m);
    float *lg = malloc((size_t)n * V * sizeof(float));
    rl_seqkv kv;
    rl_status st = lg ? rl_seqkv_init_kv(&kv, m, ctx, 2, 0, kvt, g_kv_v, err)
                      : rl_err_set(err, RL_ERR_NOMEM, "out of memory");
    if (st) {
        free(lg);
        return st;
    }
    for (int32_t i = 0; i < n && !st; i++)
        st = rl_seqkv_eval(&kv, m, 0, tok + i, 1, i, false, lg + (size_t)i * V, tp, err);
    if (!st) *d_step = max_abs_diff(lg, ref, (size_t)n * V);
    /* Both sequences in one batch, interleaved: seq 1 then seq 0 per position,
     * in chunks that fit max_batch; compare sequence 0's logits. */
    int32_t mb = rl_model_max_batch(m) / 2;
    if (mb < 1) mb = 1;
    int32_t *bt = malloc(2 * (size_t)mb * 3 * sizeof(int32_t));
    bool *want = malloc(2 * (size_t)mb * sizeof(bool));
    float *lg2 = malloc(2 * (size_t)mb * V * sizeof(float));
    if (!st && (!bt || !want || !lg2)) st = rl_err_set(err, RL_ERR_NOMEM, "out of memory");
    for (int32_t i0 = 0; i0 < n && !st; i0 += mb) {
        int32_t nb = n - i0 < mb ? n - i0 : mb;
        int32_t *btok = bt, *bpos = bt + 2 * mb, *bseq = bt + 4 * mb;
        for (int32_t j = 0; j < nb; j++) {
            for (int r = 0; r < 2; r++) {
                btok[2 * j + r] = tok[i0 + j];
                bpos[2 * j + r] = i0 + j;
                bseq[2 * j + r] = 1 - r;
                want[2 * j + r] = true;
            }
        }
        rl_batch b = {.n_tok = 2 * nb,
                      .token = btok,
                      .pos = bpos,
                      .seq = bseq,
                      .want_logits = want,
                      .n_seq = 2,
                      .block_tables = kv.tables,
                      .n_blocks = kv.n_blocks};
        st = rl_model_forward(m, &b, kv.layers, lg2, tp, err);
        for (int32_t j = 0; j < nb && !st; j++)
            for (int r = 0; r < 2; r++) {
                float d =
                    max_abs_diff(lg2 + (size_t)(2 * j + r) * V, ref + (size_t)(i0 + j) * V, V);
                if (d > *d_multi) *d_multi = d;
            }
    }
    free(bt);
    free(want);
    free(lg2);
    free(lg);
    rl_seqkv_free(&kv);
    return st;
}

int main(int argc, char **argv) {
    const char *model = NULL, *tokens_s = NULL, *out = NULL, *kv_s = "f16", *kvv_s = NULL;
    int greedy = 0, threads = 1, ctx = -1, max_batch = 0;
    bool all = false, ref = false, check = false, exact = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool has = i + 1 < argc;
        if (!strcmp(a, "-m") && has)
            model = argv[++i];
        else if (!strcmp(a, "--tokens") && has)
            tokens_s = argv[++i];
        else if (!strcmp(a, "--greedy") && has)
            greedy = atoi(argv[++i]);
        else if (!strcmp(a, "--out") && has)
            out = argv[++i];
        else if (!strcmp(a, "-t") && has)
            threads = atoi(argv[++i]);
        else if (!strcmp(a, "-c") && has)
            ctx = atoi(argv[++i]);
        else if (!strcmp(a, "-b") && has)
            max_batch = atoi(argv[++i]);
        else if (!strcmp(a, "--kv") && has)
            kv_s = argv[++i];
        else if (!strcmp(a, "--kv-v") && has)
            kvv_s = argv[++i];
        else if (!strcmp(a, "--all"))
            all = true;
        else if (!strcmp(a, "--ref"))
            ref = true;
        else if (!strcmp(a, "--exact"))
            exact = true;
        else if (!strcmp(a, "--check-batch"))
            check = true;
        else {
            fprintf(stderr, "logits: unknown or incomplete option '%s'\n", a);
            return 2;
        }
    }
    if (!model || !tokens_s) return die("usage: logits -m MODEL --tokens 1,2,3 [options]");
    int32_t *tok = NULL, n = 0;
    if (parse_tokens(tokens_s, &tok, &n)) return die("bad --tokens value");
    if (n == 0) return die("empty prompt: --tokens has no ids");
    if (greedy < 0 || threads < 1) return die("--greedy must be >= 0 and -t >= 1");
    rl_type kvt;
    if (!rl_type_from_name(kv_s, &kvt) || !rl_kv_type_known(kvt))
        return die("--kv must be f16, f32, q8_0 or q4_0");
    if (!kvv_s)
        g_kv_v = kvt;
    else if (!rl_type_from_name(kvv_s, &g_kv_v) || !rl_kv_type_known(g_kv_v))
        return die("--kv-v must be f16, f32, q8_0 or q4_0");
    rl_kernels_init(ref ? RL_KERNELS_REF : RL_KERNELS_AUTO);

    rl_err err = {0};
    rl_model *m = NULL;
    /* -c is the context the model runs with (LongRoPE picks its factors by it) */
    rl_model_opts mo = {.max_batch = max_batch,
                        .n_ctx = ctx > 0 ? ctx : 0,
                        .weights = exact ? RL_MODEL_WEIGHTS_F32 : RL_MODEL_WEIGHTS_STORED};
    if (exact) kvt = g_kv_v = RL_TYPE_F32;
    if (rl_model_load(model, &mo, &m, &err)) return die(err.msg);
    const int32_t V = rl_model_n_vocab(m);
    if (ctx < 0) ctx = n + greedy; /* -c not given: just enough */
    rl_threadpool *tp = threads > 1 ? rl_threadpool_new(threads) : NULL;
    rl_seqkv kv;
    int rc = 1;
    float *lg = NULL, *step = NULL;
    int32_t *gen = NULL;
    rl_tokenizer *kt_tok = NULL; /* quantized K: the engine's calibrated shift */
    if (rl_kv_type_quantized(kvt) && (rl_tokenizer_load(rl_model_gguf(m), &kt_tok, &err) ||
                                      rl_model_calibrate_k(m, kt_tok, tp, &err))) {
        rl_tokenizer_free(kt_tok);
        rl_model_free(m);
        rl_threadpool_free(tp);
        free(tok);
        return die(err.msg);
    }
    rl_tokenizer_free(kt_tok);
    if (rl_seqkv_init_kv(&kv, m, ctx, 1, 0, kvt, g_kv_v, &err)) {
        rl_model_free(m);
        rl_threadpool_free(tp);
        free(tok);
        return die(err.msg);
    }
    bool want_all = all || check;
    lg = malloc((size_t)(want_all ? n : 1) * (size_t)V * sizeof(float));
    step = malloc((size_t)V * sizeof(float));
    gen = malloc((size_t)(greedy + 1) * sizeof(int32_t));
    if (!lg || !step || !gen) {
        die("out of memory");
        goto done;
    }
    if (rl_seqkv_eval(&kv, m, 0, tok, n, 0, want_all, lg, tp, &err)) {
        die(err.msg);
        goto done;
    }
    const float *last = want_all ? lg + (size_t)(n - 1) * V : lg;
    memcpy(step, last, (size_t)V * sizeof(float));
    for (int g = 0; g < greedy; g++) {
        gen[g] = argmax(step, V);
        if (g + 1 < greedy && rl_seqkv_eval(&kv, m, 0, &gen[g], 1, n + g, false, step, tp, &err)) {
            die(err.msg);
            goto done;
        }
    }
    float d_step = 0, d_multi = 0;
    if (check && check_batch(m, tok, n, ctx, kvt, lg, tp, &d_step, &d_multi, &err)) {
        die(err.msg);
        goto done;
    }
    if (out && write_npy(out, all ? lg : last, all ? n : 1, V, all)) {
        die("cannot write --out file");
        goto done;
    }
    int32_t t5[5];
    top5(last, V, t5);
    printf("{\"arch\": \"%s\", \"n_vocab\": %d, \"prompt_tokens\": [", rl_model_arch(m), (int)V);
    for (int32_t i = 0; i < n; i++) printf(i ? ", %d" : "%d", (int)tok[i]);
    printf("], \"greedy\": [");
    for (int g = 0; g < greedy; g++) printf(g ? ", %d" : "%d", (int)gen[g]);
    printf("], \"top5_last\": [");
    for (int k = 0; k < 5; k++) printf(k ? ", %d" : "%d", (int)t5[k]);
    printf("], \"top5_last_logits\": [");
    for (int k = 0; k < 5; k++) printf(k ? ", %.9g" : "%.9g", (double)last[t5[k]]);
    printf("]");
    if (check)
        printf(", \"prefill_vs_step_max_abs\": %.9g, \"multiseq_max_abs\": %.9g", (double)d_step,
               (double)d_multi);
    if (!out) {
        printf(", \"logits\": [");
        for (int32_t i = 0; i < V; i++) printf(i ? ", %.9g" : "%.9g", (double)last[i]);
        printf("]");
    }
    printf("}\n");
    rc = 0;
done:
    free(lg);
    free(step);
    free(gen);
    free(tok);
    rl_seqkv_free(&kv);
    rl_model_free(m);
    rl_threadpool_free(tp);
    return rc;
}
