/* kvstats: how well 4-bit pages can hold a model's keys, per layer.
 *
 *   kvstats -m MODEL [-n TOKENS] [-t THREADS] [--type q4_0|iq4_nl|q8_0]
 *
 * Runs TOKENS (default 256) fixed pseudo-random token ids through the model
 * with f32 KV pages, then, per layer, over all stored K rows (post-RoPE):
 *   max|k|       largest key element;
 *   offset       share of the key energy in the per-channel mean over
 *                positions (sum_p |mean|^2 / sum_p |k_p|^2);
 *   err plain / rotated / rot+shift
 *                squared quantization error of the page type (default q4_0)
 *                relative to the energy of the centred keys (k_p - mean),
 *                i.e. relative to what attention can actually tell apart,
 *                for rows stored as they are, Walsh-Hadamard rotated, and
 *                rotated after subtracting the layer's K bias (the
 *                rl_kv_layer.k_shift the model sets; "-" without one).
 * Output: one markdown table on stdout (docs/KVQUANT.md).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv/seqkv.h"
#include "kernels/kernels-impl.h"
#include "model/model-impl.h"
#include "model/model.h"

static void quant_roundtrip(rl_type t, const float *x, float *y, int n) {
    uint8_t buf[2048];
    if (t == RL_TYPE_IQ4_NL)
        rl__quant_iq4_nl_kv(x, buf, n);
    else
        rl_type_get(t)->from_float(x, buf, n);
    rl_type_get(t)->to_float(buf, y, n);
}

int main(int argc, char **argv) {
    const char *model = NULL, *type_s = "q4_0";
    int n = 256, threads = 2;
    for (int i = 1; i < argc; i++) {
        bool has = i + 1 < argc;
        if (!strcmp(argv[i], "-m") && has)
            model = argv[++i];
        else if (!strcmp(argv[i], "-n") && has)
            n = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-t") && has)
            threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--type") && has)
            type_s = argv[++i];
        else {
            fprintf(stderr, "kvstats: unknown or incomplete option '%s'\n", argv[i]);
            return 2;
        }
    }
    rl_type qt;
    if (!model || n < 2 || threads < 1 || !rl_type_from_name(type_s, &qt) ||
        (qt != RL_TYPE_Q4_0 && qt != RL_TYPE_Q8_0 && qt != RL_TYPE_IQ4_NL)) {
        fprintf(stderr,
                "usage: kvstats -m MODEL [-n TOKENS] [-t THREADS] [--type q4_0|iq4_nl|q8_0]\n");
        return 2;
    }
    rl_kernels_init(RL_KERNELS_AUTO);
    rl_err err = {0};
    rl_model *m = NULL;
    rl_model_opts mo = {.max_batch = n};
    if (rl_model_load(model, &mo, &m, &err)) {
        fprintf(stderr, "kvstats: %s\n", err.msg);
        return 1;
    }
    rl_model_kv_shape sh = rl_model_kv_shape_of(m);
    const int hd = sh.head_dim, nkv = sh.n_kv_head, bs = 16;
    if (hd > 512 || (hd & (hd - 1)) || hd % 32) {
        fprintf(stderr, "kvstats: head_dim %d not supported\n", hd);
        return 1;
    }
    rl_seqkv kv;
    if (rl_seqkv_init_kv(&kv, m, n, 1, bs, RL_TYPE_F32, RL_TYPE_F32, &err)) {
        fprintf(stderr, "kvstats: %s\n", err.msg);
        return 1;
    }
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)n);
    int32_t nv = rl_model_n_vocab(m) > 5300 ? 5000 : rl_model_n_vocab(m) - 300;
    for (int i = 0; i < n; i++) tok[i] = 300 + (int32_t)(((int64_t)i * 7919) % nv);
    rl_threadpool *tp = threads > 1 ? rl_threadpool_new(threads) : NULL;
    if (rl_seqkv_eval(&kv, m, 0, tok, n, 0, false, NULL, tp, &err)) {
        fprintf(stderr, "kvstats: %s\n", err.msg);
        return 1;
    }
    printf("model %s: %d layers, %d KV heads, head_dim %d; %d tokens; page type %s\n\n",
           rl_model_name(m), sh.n_layer, nkv, hd, n, type_s);
    printf("| layer | max abs k | offset share | err plain | err rotated | err rot+shift |\n"
           "|---|---|---|---|---|---|\n");
    float *mu = malloc(sizeof(float) * (size_t)hd);
    for (int l = 0; l < sh.n_layer; l++) {
        const rl_kv_layer *L = &kv.layers[l];
        const float *bk = m->layers[l].bk;
        double e_mean = 0, e_tot = 0, cen = 0, maxabs = 0, qerr[3] = {0, 0, 0};
        for (int h = 0; h < nkv; h++) {
            for (int i = 0; i < hd; i++) mu[i] = 0;
            for (int p = 0; p < n; p++) {
                const float *k = (const float *)((const uint8_t *)L->k_base +
                                                 (size_t)kv.tables[0][p / bs] * L->k_block_bytes +
                                                 ((size_t)h * bs + p % bs) * hd * sizeof(float));
                for (int i = 0; i < hd; i++) mu[i] += k[i] / (float)n;
            }
            for (int i = 0; i < hd; i++) e_mean += (double)mu[i] * mu[i] * n;
            for (int p = 0; p < n; p++) {
                const float *k = (const float *)((const uint8_t *)L->k_base +
                                                 (size_t)kv.tables[0][p / bs] * L->k_block_bytes +
                                                 ((size_t)h * bs + p % bs) * hd * sizeof(float));
                float x[512], y[512];
                for (int i = 0; i < hd; i++) {
                    e_tot += (double)k[i] * k[i];
                    cen += (double)(k[i] - mu[i]) * (k[i] - mu[i]);
                    maxabs = fmax(maxabs, fabs(k[i]));
                }
                for (int v = 0; v < 3; v++) {
                    if (v == 2 && !bk) continue;
                    for (int i = 0; i < hd; i++) x[i] = k[i] - (v == 2 ? bk[h * hd + i] : 0.0f);
                    if (v > 0) rl_wht(x, hd);
                    quant_roundtrip(qt, x, y, hd);
                    for (int i = 0; i < hd; i++) qerr[v] += (double)(y[i] - x[i]) * (y[i] - x[i]);
                }
            }
        }
        char shifted[32] = "-";
        if (bk) snprintf(shifted, sizeof shifted, "%.4f", qerr[2] / cen);
        printf("| %d | %.1f | %.3f | %.4f | %.4f | %s |\n", l, maxabs, e_mean / e_tot,
               qerr[0] / cen, qerr[1] / cen, shifted);
    }
    free(mu);
    free(tok);
    rl_seqkv_free(&kv);
    rl_threadpool_free(tp);
    rl_model_free(m);
    return 0;
}
