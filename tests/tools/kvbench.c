/* kvbench: decode speed and memory of the KV cache by page type.
 *
 *   kvbench -m MODEL [-t THREADS] [--ctx 512,2048,4096]
 *           [--types f16/f16,q8_0/q8_0,q4_0/q4_0] [--reps N] [--budget-mib M]
 *
 * For each K/V type pair and context N: a one-sequence KV cache (blocks of
 * 16 slots) is filled to N tokens with random K/V rows through rl_kv_store
 * (so quantized pages are written exactly as the model writes them), then
 *   attn: rl_attention for one decode query at position N over every layer
 *         (the model's head shape), and
 *   step: one real decode step of the model at position N (rl_model_forward
 *         of one token: all matmuls + KV store + attention over N tokens)
 * are each repeated --reps times (the types interleaved within each
 * repetition, after two warm-up rounds); the median is reported as ms and
 * tok/s.
 * A page type may carry a rotation suffix: q4_0:n (no rotation), q4_0:h
 * (Walsh-Hadamard rotation); without one the layer's default applies
 * (rl_kv_rot_resolve: quantized pages rotated).
 * Also printed: KV bytes per token (all layers, K+V), and how many
 * sequences of N tokens fit a --budget-mib KV budget (whole 16-slot
 * blocks).  Output: one markdown table on stdout.  Timings are medians
 * because the machine may be shared.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv/seqkv.h"
#include "kernels/kernels.h"
#include "model/model.h"

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static float rnd(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    float s = 0;
    for (int i = 0; i < 4; i++) s += (float)((g_rng >> (16 * i)) & 0xFFFF) / 32768.0f - 1.0f;
    return s * 0.866f;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int main(int argc, char **argv) {
    const char *model = NULL, *ctx_s = "512,2048,4096", *types_s = "f16/f16,q8_0/q8_0,q4_0/q4_0";
    int threads = 2, reps = 7;
    double budget_mib = 1024;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool has = i + 1 < argc;
        if (!strcmp(a, "-m") && has)
            model = argv[++i];
        else if (!strcmp(a, "-t") && has)
            threads = atoi(argv[++i]);
        else if (!strcmp(a, "--ctx") && has)
            ctx_s = argv[++i];
        else if (!strcmp(a, "--types") && has)
            types_s = argv[++i];
        else if (!strcmp(a, "--reps") && has)
            reps = atoi(argv[++i]);
        else if (!strcmp(a, "--budget-mib") && has)
            budget_mib = atof(argv[++i]);
        else {
            fprintf(stderr, "kvbench: unknown or incomplete option '%s'\n", a);
            return 2;
        }
    }
    if (!model || threads < 1 || reps < 1 || reps > 1000) {
        fprintf(stderr, "usage: kvbench -m MODEL [-t N] [--ctx 512,2048] [--types "
                        "f16/f16,q4_0/q4_0] [--reps N]\n");
        return 2;
    }
    rl_kernels_init(RL_KERNELS_AUTO);
    rl_err err = {0};
    rl_model *m = NULL;
    rl_model_opts mo = {.max_batch = 1};
    if (rl_model_load(model, &mo, &m, &err)) {
        fprintf(stderr, "kvbench: %s\n", err.msg);
        return 1;
    }
    rl_model_kv_shape sh = rl_model_kv_shape_of(m);
    const int n_head = rl_model_n_head(m), hd = sh.head_dim, nkv = sh.n_kv_head;
    rl_threadpool *tp = threads > 1 ? rl_threadpool_new(threads) : NULL;
    float *k = malloc(sizeof(float) * nkv * hd), *v = malloc(sizeof(float) * nkv * hd);
    float *q = malloc(sizeof(float) * n_head * hd), *o = malloc(sizeof(float) * n_head * hd);
    float *lg = malloc(sizeof(float) * (size_t)rl_model_n_vocab(m));
    double *tm = malloc(sizeof(double) * (size_t)reps);
    for (int i = 0; i < n_head * hd; i++) q[i] = rnd();
    printf("model %s (%s): %d layers, %d/%d heads, head_dim %d; %d threads, kernels %s, median of "
           "%d\n\n",
           rl_model_name(m), rl_model_arch(m), sh.n_layer, n_head, nkv, hd, threads,
           rl_kernels_impl_name(), reps);
    printf("| K/V | ctx | KV bytes/token | vs f16 | seqs in %.0f MiB | attn ms (all layers) | step "
           "ms | "
           "decode tok/s |\n|---|---|---|---|---|---|---|---|\n",
           budget_mib);
    const size_t f16_tok = (size_t)sh.n_layer * nkv * 2 * rl_type_row_size(RL_TYPE_F16, hd);
    enum { MAX_T = 8 };
    rl_type kts[MAX_T], vts[MAX_T];
    rl_kv_rot krs[MAX_T], vrs[MAX_T];
    char names[MAX_T][40];
    int nt = 0;
    char types[256];
    snprintf(types, sizeof types, "%s", types_s);
    for (char *save1 = NULL, *tp_s = strtok_r(types, ",", &save1); tp_s && nt < MAX_T;
         tp_s = strtok_r(NULL, ",", &save1)) {
        char kn[16] = {0}, vn[16] = {0}, *slash = strchr(tp_s, '/');
        snprintf(vn, sizeof vn, "%s", slash ? slash + 1 : tp_s);
        snprintf(kn, sizeof kn, "%.*s", slash ? (int)(slash - tp_s) : (int)strlen(tp_s), tp_s);
        char *names2[2] = {kn, vn};
        rl_kv_rot *rots[2] = {&krs[nt], &vrs[nt]};
        for (int j = 0; j < 2; j++) { /* optional :n / :h rotation suffix */
            char *colon = strchr(names2[j], ':');
            *rots[j] = RL_KV_ROT_AUTO;
            if (colon) {
                *rots[j] = colon[1] == 'h' ? RL_KV_ROT_HADAMARD : RL_KV_ROT_NONE;
                *colon = 0;
            }
        }
        if (!rl_type_from_name(kn, &kts[nt]) || !rl_type_from_name(vn, &vts[nt])) {
            fprintf(stderr, "kvbench: bad type pair '%s'\n", tp_s);
            return 2;
        }
        bool kh = rl_kv_rot_resolve(kts[nt], hd, krs[nt]) == RL_KV_ROT_HADAMARD;
        bool vh = rl_kv_rot_resolve(vts[nt], hd, vrs[nt]) == RL_KV_ROT_HADAMARD;
        snprintf(names[nt], sizeof names[nt], "%s%s/%s%s", kn, kh ? "+H" : "", vn, vh ? "+H" : "");
        nt++;
    }
    double *ta = malloc(sizeof(double) * (size_t)reps * MAX_T),
           *ts = malloc(sizeof(double) * (size_t)reps * MAX_T);
    char ctxs[256];
    snprintf(ctxs, sizeof ctxs, "%s", ctx_s);
    for (char *save2 = NULL, *c_s = strtok_r(ctxs, ",", &save2); c_s;
         c_s = strtok_r(NULL, ",", &save2)) {
        int32_t n = atoi(c_s);
        if (n < 1) continue;
        rl_seqkv kv[MAX_T];
        for (int ti = 0; ti < nt; ti++) {
            if (rl_seqkv_init_kv(&kv[ti], m, n + 1, 1, 16, kts[ti], vts[ti], &err)) {
                fprintf(stderr, "kvbench: %s\n", err.msg);
                return 1;
            }
            for (int il = 0; il < sh.n_layer; il++) {
                kv[ti].layers[il].k_rot = krs[ti];
                kv[ti].layers[il].v_rot = vrs[ti];
            }
            g_rng = 0x9E3779B97F4A7C15ull; /* the same K/V values for every type */
            for (int il = 0; il < sh.n_layer; il++)
                for (int32_t p = 0; p < n; p++) {
                    for (int i = 0; i < nkv * hd; i++) {
                        k[i] = rnd();
                        v[i] = rnd();
                    }
                    rl_kv_store(&kv[ti].layers[il], kv[ti].tables[0], p, k, v);
                }
        }
        int32_t pos = n, tok = 1;
        /* types interleaved within each repetition, so load drift hits all alike */
        for (int r = -2; r < reps; r++) /* r < 0: warm-up */
            for (int ti = 0; ti < nt; ti++) {
                double t0 = rl_time_s();
                for (int il = 0; il < sh.n_layer; il++) {
                    rl_attn_args a = {.q = q,
                                      .out = o,
                                      .n_tok = 1,
                                      .n_head = n_head,
                                      .pos = &pos,
                                      .block_table = kv[ti].tables[0],
                                      .kv = &kv[ti].layers[il],
                                      .scale = 0.125f};
                    rl_attention(&a, tp);
                }
                double t1 = rl_time_s();
                if (rl_seqkv_eval(&kv[ti], m, 0, &tok, 1, n, false, lg, tp, &err)) {
                    fprintf(stderr, "kvbench: %s\n", err.msg);
                    return 1;
                }
                double t2 = rl_time_s();
                if (r >= 0) {
                    ta[ti * reps + r] = t1 - t0;
                    ts[ti * reps + r] = t2 - t1;
                }
            }
        for (int ti = 0; ti < nt; ti++) {
            double attn = median(ta + ti * reps, reps), step = median(ts + ti * reps, reps);
            size_t per_tok = (size_t)sh.n_layer * nkv *
                             (rl_type_row_size(kts[ti], hd) + rl_type_row_size(vts[ti], hd));
            double seq_bytes = (double)per_tok * (double)((n + 15) / 16 * 16);
            printf("| %s | %d | %zu | %.2fx | %d | %.2f | %.2f | %.1f |\n", names[ti], (int)n,
                   per_tok, (double)f16_tok / (double)per_tok,
                   (int)(budget_mib * 1048576.0 / seq_bytes), attn * 1e3, step * 1e3, 1.0 / step);
            rl_seqkv_free(&kv[ti]);
        }
        fflush(stdout);
    }
    free(ta);
    free(ts);
    free(k);
    free(v);
    free(q);
    free(o);
    free(lg);
    free(tm);
    rl_threadpool_free(tp);
    rl_model_free(m);
    return 0;
}
