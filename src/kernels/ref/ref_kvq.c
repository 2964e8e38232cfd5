/* Scalar reference attention leaves over runs of KV rows, for every page
 * type the KV cache supports: f32, f16, q8_0, q4_0 and iq4_nl (the GGUF
 * block packings of src/tensor/tensor.h, 32 elements per block), q8_64
 * (q8_0 with 64-element blocks; the query stays q8_0 blocks of 32), the
 * iq4_nl KV quantizer, and the Walsh-Hadamard transform.  These are the
 * oracles for x86/avx2_kvq.c.
 *
 * Conventions (fixed, the AVX2 twins follow them up to float summation
 * order and fused multiply-adds):
 *   - q . k for quantized pages: the query is q8_0 (quantized once per
 *     attention item by quant_q8_0); per block the integer sum of
 *     products is exact (int32), scaled by d_k * d_q in float and added to
 *     the running float sum in block order;
 *   - v accumulation: per row and block wd = w[r] * d_v, then
 *     acc[i] += wd * code, rows in order.
 * f32/f16 leaves do exactly what the single-row dot_f16 / axpy_f16 leaves of
 * ref_ops.c do, row after row.
 */
#include <math.h>
#include <string.h>

#include "kernels/kernels-impl.h"

#define ROW(base, r, stride) ((const uint8_t *)(base) + (size_t)(r) * (stride))

static void rl__kq_f32_ref(const void *q, const void *k, size_t stride, int n, int hd, float *s) {
    const float *a = q;
    for (int r = 0; r < n; r++) {
        const float *b = (const float *)ROW(k, r, stride);
        float acc = 0.0f;
        for (int i = 0; i < hd; i++) acc += a[i] * b[i];
        s[r] = acc;
    }
}

static void rl__kq_f16_ref(const void *q, const void *k, size_t stride, int n, int hd, float *s) {
    const float *a = q;
    for (int r = 0; r < n; r++) {
        const rl_fp16 *b = (const rl_fp16 *)ROW(k, r, stride);
        float acc = 0.0f;
        for (int i = 0; i < hd; i++) acc += a[i] * rl_fp16_to_f32(b[i]);
        s[r] = acc;
    }
}

/* q8_0 (qk = 32) and q8_64 (qk = 64) rows: blocks of an fp16 scale and qk
 * int8 codes.  Scale and codes of page block pb of a row: */
static inline float q8_d(const uint8_t *row, int pb, int qk) {
    rl_fp16 h;
    memcpy(&h, row + (size_t)pb * (size_t)(2 + qk), sizeof h);
    return rl_fp16_to_f32(h);
}
static inline const int8_t *q8_qs(const uint8_t *row, int pb, int qk) {
    return (const int8_t *)(row + (size_t)pb * (size_t)(2 + qk) + 2);
}

/* Per 32-element query block b (page block b / (qk/32)), as q8_0. */
static inline void kq_q8_ref(const void *q, const void *k, size_t stride, int n, int hd, float *s,
                             int qk) {
    const rl_block_q8_0 *x = q;
    const int per = qk / RL_QK8_0;
    for (int r = 0; r < n; r++) {
        const uint8_t *row = ROW(k, r, stride);
        float acc = 0.0f;
        for (int b = 0; b < hd / RL_QK8_0; b++) {
            const int8_t *c = q8_qs(row, b / per, qk) + (b % per) * RL_QK8_0;
            int32_t isum = 0;
            for (int j = 0; j < RL_QK8_0; j++) isum += (int32_t)c[j] * x[b].qs[j];
            acc += q8_d(row, b / per, qk) * rl_fp16_to_f32(x[b].d) * (float)isum;
        }
        s[r] = acc;
    }
}

static void rl__kq_q8_0_ref(const void *q, const void *k, size_t stride, int n, int hd, float *s) {
    kq_q8_ref(q, k, stride, n, hd, s, RL_QK8_0);
}
static void rl__kq_q8_64_ref(const void *q, const void *k, size_t stride, int n, int hd, float *s) {
    kq_q8_ref(q, k, stride, n, hd, s, RL_QK8_64);
}

static void rl__kq_q4_0_ref(const void *q, const void *k, size_t stride, int n, int hd, float *s) {
    const rl_block_q8_0 *x = q;
    for (int r = 0; r < n; r++) {
        const rl_block_q4_0 *w = (const rl_block_q4_0 *)ROW(k, r, stride);
        float acc = 0.0f;
        for (int b = 0; b < hd / RL_QK4_0; b++) {
            int32_t isum = 0;
            for (int j = 0; j < RL_QK4_0 / 2; j++) {
                isum += ((int32_t)(w[b].qs[j] & 0x0F) - 8) * x[b].qs[j];
                isum += ((int32_t)(w[b].qs[j] >> 4) - 8) * x[b].qs[j + 16];
            }
            acc += rl_fp16_to_f32(w[b].d) * rl_fp16_to_f32(x[b].d) * (float)isum;
        }
        s[r] = acc;
    }
}

static void rl__v_f32_ref(float *acc, const void *v, size_t stride, const float *w, int n, int hd) {
    for (int r = 0; r < n; r++) {
        const float *x = (const float *)ROW(v, r, stride);
        for (int i = 0; i < hd; i++) acc[i] += w[r] * x[i];
    }
}

static void rl__v_f16_ref(float *acc, const void *v, size_t stride, const float *w, int n, int hd) {
    for (int r = 0; r < n; r++) {
        const rl_fp16 *x = (const rl_fp16 *)ROW(v, r, stride);
        for (int i = 0; i < hd; i++) acc[i] += w[r] * rl_fp16_to_f32(x[i]);
    }
}

static inline void v_q8_ref(float *acc, const void *v, size_t stride, const float *w, int n, int hd,
                            int qk) {
    for (int r = 0; r < n; r++) {
        const uint8_t *row = ROW(v, r, stride);
        for (int b = 0; b < hd / qk; b++) {
            float wd = w[r] * q8_d(row, b, qk);
            const int8_t *c = q8_qs(row, b, qk);
            float *y = acc + b * qk;
            for (int j = 0; j < qk; j++) y[j] += wd * (float)c[j];
        }
    }
}

static void rl__v_q8_0_ref(float *acc, const void *v, size_t stride, const float *w, int n,
                           int hd) {
    v_q8_ref(acc, v, stride, w, n, hd, RL_QK8_0);
}
static void rl__v_q8_64_ref(float *acc, const void *v, size_t stride, const float *w, int n,
                            int hd) {
    v_q8_ref(acc, v, stride, w, n, hd, RL_QK8_64);
}

static void rl__v_q4_0_ref(float *acc, const void *v, size_t stride, const float *w, int n,
                           int hd) {
    for (int r = 0; r < n; r++) {
        const rl_block_q4_0 *x = (const rl_block_q4_0 *)ROW(v, r, stride);
        for (int b = 0; b < hd / RL_QK4_0; b++) {
            float wd = w[r] * rl_fp16_to_f32(x[b].d);
            float *y = acc + b * RL_QK4_0;
            for (int j = 0; j < RL_QK4_0 / 2; j++) {
                y[j] += wd * (float)((int)(x[b].qs[j] & 0x0F) - 8);
                y[j + 16] += wd * (float)((int)(x[b].qs[j] >> 4) - 8);
            }
        }
    }
}

/* Float-query variants for quantized K: s[r] = sum_b d_b * sum_i q_i*code_i. */
static inline void kqf_q8_ref(const void *vq, const void *k, size_t stride, int n, int hd, float *s,
                              int qk) {
    const float *q = vq;
    for (int r = 0; r < n; r++) {
        const uint8_t *row = ROW(k, r, stride);
        float acc = 0.0f;
        for (int b = 0; b < hd / qk; b++) {
            const int8_t *c = q8_qs(row, b, qk);
            float t = 0.0f;
            for (int j = 0; j < qk; j++) t += q[b * qk + j] * (float)c[j];
            acc += q8_d(row, b, qk) * t;
        }
        s[r] = acc;
    }
}

static void rl__kqf_q8_0_ref(const void *vq, const void *k, size_t stride, int n, int hd,
                             float *s) {
    kqf_q8_ref(vq, k, stride, n, hd, s, RL_QK8_0);
}
static void rl__kqf_q8_64_ref(const void *vq, const void *k, size_t stride, int n, int hd,
                              float *s) {
    kqf_q8_ref(vq, k, stride, n, hd, s, RL_QK8_64);
}

static void rl__kqf_q4_0_ref(const void *vq, const void *k, size_t stride, int n, int hd,
                             float *s) {
    const float *q = vq;
    for (int r = 0; r < n; r++) {
        const rl_block_q4_0 *w = (const rl_block_q4_0 *)ROW(k, r, stride);
        float acc = 0.0f;
        for (int b = 0; b < hd / RL_QK4_0; b++) {
            float t = 0.0f;
            for (int j = 0; j < 16; j++) t += q[b * 32 + j] * (float)((int)(w[b].qs[j] & 0x0F) - 8);
            for (int j = 0; j < 16; j++)
                t += q[b * 32 + 16 + j] * (float)((int)(w[b].qs[j] >> 4) - 8);
            acc += rl_fp16_to_f32(w[b].d) * t;
        }
        s[r] = acc;
    }
}

/* ---- iq4_nl pages: the GGUF iq4_nl block (fp16 d + 32 4-bit indices into
 * a fixed non-linear codebook, x = d * kvalues[code]; the same 18-byte
 * layout and nibble order as q4_0, so rl_block_q4_0 describes it). ---- */
/* KV-page quantizer for iq4_nl (n a multiple of 32): the weight quantizer
 * of src/tensor (rl_type_get(RL_TYPE_IQ4_NL)->from_float): per block, the
 * largest-magnitude value mx is mapped near either end of the codebook
 * (mx*id = -134..-119 or 106..120: 31 scales tried); for each, codes are the
 * nearest entries and d the least-squares scale for those codes
 * (sum x*v / sum v^2, rounded to fp16); the candidate with the smallest
 * squared error is kept.  Deterministic; the AVX2 twin (x86/avx2_kvq.c)
 * writes the same bytes, so pages do not depend on the active table. */
void rl__quant_iq4_nl_kv(const float *x, void *vy, int64_t n) {
    RL_ASSERT(n % 32 == 0);
    rl_type_get(RL_TYPE_IQ4_NL)->from_float(x, vy, n);
}

static void rl__kq_iq4_nl_ref(const void *q, const void *k, size_t stride, int n, int hd,
                              float *s) {
    const rl_block_q8_0 *x = q;
    const int8_t *v = rl__iq4nl_values;
    for (int r = 0; r < n; r++) {
        const rl_block_q4_0 *w = (const rl_block_q4_0 *)ROW(k, r, stride);
        float acc = 0.0f;
        for (int b = 0; b < hd / 32; b++) {
            int32_t isum = 0;
            for (int j = 0; j < 16; j++) {
                isum += (int32_t)v[w[b].qs[j] & 0x0F] * x[b].qs[j];
                isum += (int32_t)v[w[b].qs[j] >> 4] * x[b].qs[j + 16];
            }
            acc += rl_fp16_to_f32(w[b].d) * rl_fp16_to_f32(x[b].d) * (float)isum;
        }
        s[r] = acc;
    }
}

static void rl__kqf_iq4_nl_ref(const void *vq, const void *k, size_t stride, int n, int hd,
                               float *s) {
    const float *q = vq;
    const int8_t *v = rl__iq4nl_values;
    for (int r = 0; r < n; r++) {
        const rl_block_q4_0 *w = (const rl_block_q4_0 *)ROW(k, r, stride);
        float acc = 0.0f;
        for (int b = 0; b < hd / 32; b++) {
            float t = 0.0f;
            for (int j = 0; j < 16; j++) t += q[b * 32 + j] * (float)v[w[b].qs[j] & 0x0F];
            for (int j = 0; j < 16; j++) t += q[b * 32 + 16 + j] * (float)v[w[b].qs[j] >> 4];
            acc += rl_fp16_to_f32(w[b].d) * t;
        }
        s[r] = acc;
    }
}

static void rl__v_iq4_nl_ref(float *acc, const void *vv, size_t stride, const float *w, int n,
                             int hd) {
    const int8_t *v = rl__iq4nl_values;
    for (int r = 0; r < n; r++) {
        const rl_block_q4_0 *x = (const rl_block_q4_0 *)ROW(vv, r, stride);
        for (int b = 0; b < hd / 32; b++) {
            float wd = w[r] * rl_fp16_to_f32(x[b].d);
            float *y = acc + b * 32;
            for (int j = 0; j < 16; j++) {
                y[j] += wd * (float)v[x[b].qs[j] & 0x0F];
                y[j + 16] += wd * (float)v[x[b].qs[j] >> 4];
            }
        }
    }
}

/* Fast Walsh-Hadamard transform, in place: log2(n) butterfly stages
 * (h = 1, 2, 4, ...; within a stage pairs (j, j+h) in increasing j), then
 * one multiply by 1/sqrt(n).  Every element sees a fixed sequence of float
 * additions/subtractions, so any implementation doing the same butterflies
 * (in any lane order) gives the same bits. */
static void rl__wht_ref(float *x, int n) {
    for (int h = 1; h < n; h *= 2)
        for (int i = 0; i < n; i += 2 * h)
            for (int j = i; j < i + h; j++) {
                float a = x[j], b = x[j + h];
                x[j] = a + b;
                x[j + h] = a - b;
            }
    const float c = 1.0f / sqrtf((float)n);
    for (int i = 0; i < n; i++) x[i] *= c;
}

/* The grouped leaves' twins: g calls of the one-head leaf. */
#define RL_KQ_G_REF(NAME, ONE)                                                                     \
    static void NAME(const float *q, const void *k, size_t stride, int n, int hd, int g, float *s, \
                     size_t ss) {                                                                  \
        for (int j = 0; j < g; j++) ONE(q + (size_t)j * hd, k, stride, n, hd, s + (size_t)j * ss); \
    }
#define RL_V_G_REF(NAME, ONE)                                                                      \
    static void NAME(float *acc, const void *v, size_t stride, const float *w, size_t ws, int n,   \
                     int hd, int g) {                                                              \
        for (int j = 0; j < g; j++)                                                                \
            ONE(acc + (size_t)j * hd, v, stride, w + (size_t)j * ws, n, hd);                       \
    }
RL_KQ_G_REF(rl__kq_f32_g_ref, rl__kq_f32_ref)
RL_KQ_G_REF(rl__kq_f16_g_ref, rl__kq_f16_ref)
RL_V_G_REF(rl__v_f32_g_ref, rl__v_f32_ref)
RL_V_G_REF(rl__v_f16_g_ref, rl__v_f16_ref)
RL_V_G_REF(rl__v_q8_0_g_ref, rl__v_q8_0_ref)
RL_V_G_REF(rl__v_q8_64_g_ref, rl__v_q8_64_ref)
RL_V_G_REF(rl__v_q4_0_g_ref, rl__v_q4_0_ref)
RL_V_G_REF(rl__v_iq4_nl_g_ref, rl__v_iq4_nl_ref)
/* kqq_rows_g's twins: g one-head calls on the q8_0 query rows */
#define RL_KQQ_G_REF(NAME, ONE)                                                                    \
    static void NAME(const rl_block_q8_0 *q, const void *k, size_t stride, int n, int hd, int g,   \
                     float *s, size_t ss) {                                                        \
        for (int j = 0; j < g; j++)                                                                \
            ONE(q + (size_t)j * (hd / RL_QK8_0), k, stride, n, hd, s + (size_t)j * ss);            \
    }
RL_KQQ_G_REF(rl__kqq_q8_0_g_ref, rl__kq_q8_0_ref)
RL_KQQ_G_REF(rl__kqq_q8_64_g_ref, rl__kq_q8_64_ref)
RL_KQQ_G_REF(rl__kqq_q4_0_g_ref, rl__kq_q4_0_ref)
RL_KQQ_G_REF(rl__kqq_iq4_nl_g_ref, rl__kq_iq4_nl_ref)

void rl__ref_fill_kvq(rl__ktab *t) {
    t->wht = rl__wht_ref;
    t->quant_iq4_nl_kv = rl__quant_iq4_nl_kv;
    t->kqf_rows[RL_TYPE_IQ4_NL] = rl__kqf_iq4_nl_ref;
    t->kq_rows[RL_TYPE_IQ4_NL] = rl__kq_iq4_nl_ref;
    t->v_rows[RL_TYPE_IQ4_NL] = rl__v_iq4_nl_ref;
    t->kqf_rows[RL_TYPE_Q8_0] = rl__kqf_q8_0_ref;
    t->kqf_rows[RL_TYPE_Q8_64] = rl__kqf_q8_64_ref;
    t->kqf_rows[RL_TYPE_Q4_0] = rl__kqf_q4_0_ref;
    t->kq_rows[RL_TYPE_F32] = rl__kq_f32_ref;
    t->kq_rows[RL_TYPE_F16] = rl__kq_f16_ref;
    t->kq_rows[RL_TYPE_Q8_0] = rl__kq_q8_0_ref;
    t->kq_rows[RL_TYPE_Q8_64] = rl__kq_q8_64_ref;
    t->kq_rows[RL_TYPE_Q4_0] = rl__kq_q4_0_ref;
    t->v_rows[RL_TYPE_F32] = rl__v_f32_ref;
    t->v_rows[RL_TYPE_F16] = rl__v_f16_ref;
    t->v_rows[RL_TYPE_Q8_0] = rl__v_q8_0_ref;
    t->v_rows[RL_TYPE_Q8_64] = rl__v_q8_64_ref;
    t->v_rows[RL_TYPE_Q4_0] = rl__v_q4_0_ref;
    t->kq_rows_g[RL_TYPE_F32] = rl__kq_f32_g_ref;
    t->kq_rows_g[RL_TYPE_F16] = rl__kq_f16_g_ref;
    t->v_rows_g[RL_TYPE_F32] = rl__v_f32_g_ref;
    t->v_rows_g[RL_TYPE_F16] = rl__v_f16_g_ref;
    t->v_rows_g[RL_TYPE_Q8_0] = rl__v_q8_0_g_ref;
    t->v_rows_g[RL_TYPE_Q8_64] = rl__v_q8_64_g_ref;
    t->v_rows_g[RL_TYPE_Q4_0] = rl__v_q4_0_g_ref;
    t->v_rows_g[RL_TYPE_IQ4_NL] = rl__v_iq4_nl_g_ref;
    t->kqq_rows_g[RL_TYPE_Q8_0] = rl__kqq_q8_0_g_ref;
    t->kqq_rows_g[RL_TYPE_Q8_64] = rl__kqq_q8_64_g_ref;
    t->kqq_rows_g[RL_TYPE_Q4_0] = rl__kqq_q4_0_g_ref;
    t->kqq_rows_g[RL_TYPE_IQ4_NL] = rl__kqq_iq4_nl_g_ref;
}
