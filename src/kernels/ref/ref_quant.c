/* Scalar reference kernels for matmul: the activation quantizers (q8_0,
 * q8_1, q8_K) and one vec-dot per weight type against its paired
 * activation type (matmul.c's rl__act_type: q8_0 for q4_0, q5_0, q8_0,
 * iq4_nl, mxfp4; q8_1 for q4_1, q5_1; q8_K for the K-quants and iq4_xs).  These are the oracles the
 * AVX2 kernels are tested against, so they are written for clarity, not speed.
 *
 * Conventions (fixed, because SIMD twins reproduce them):
 *   - activation quantization is symmetric: d = amax/127, q = rint(x/d)
 *     computed as rint(x * (1/d)) in float, rounding to nearest-even;
 *   - each block's integer sum is exact (int32); blocks are combined in
 *     float, sequentially, in block order.
 */
#include <math.h>
#include <string.h>

#include "kernels/kernels-impl.h"

#define F16(h) rl_fp16_to_f32(h)

/* ---------------- activation quantizers ---------------- */

static float rl__amax(const float *x, int n) {
    float a = 0.0f;
    for (int j = 0; j < n; j++) {
        float v = fabsf(x[j]);
        if (v > a) a = v;
    }
    return a;
}

static void rl__to_f16_ref(rl_fp16 *y, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = rl_f32_to_fp16(x[i]);
}

void rl__quant_q8_0_ref(const float *x, void *vy, int64_t n) {
    rl_block_q8_0 *y = vy;
    for (int64_t i = 0; i < n / RL_QK8_0; i++) {
        const float *xb = x + i * RL_QK8_0;
        float d = rl__amax(xb, RL_QK8_0) / 127.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = rl_f32_to_fp16(d);
        for (int j = 0; j < RL_QK8_0; j++) y[i].qs[j] = (int8_t)nearbyintf(xb[j] * id);
    }
}

void rl__quant_q8_1_ref(const float *x, void *vy, int64_t n) {
    rl_block_q8_1 *y = vy;
    for (int64_t i = 0; i < n / RL_QK8_1; i++) {
        const float *xb = x + i * RL_QK8_1;
        float d = rl__amax(xb, RL_QK8_1) / 127.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        int sum = 0;
        for (int j = 0; j < RL_QK8_1; j++) {
            int q = (int)nearbyintf(xb[j] * id);
            y[i].qs[j] = (int8_t)q;
            sum += q;
        }
        y[i].d = rl_f32_to_fp16(d);
        y[i].s = rl_f32_to_fp16(d * (float)sum);
    }
}

void rl__quant_q8_K_ref(const float *x, void *vy, int64_t n) {
    rl_block_q8_K *y = vy;
    for (int64_t i = 0; i < n / RL_QK_K; i++) {
        const float *xb = x + i * RL_QK_K;
        float d = rl__amax(xb, RL_QK_K) / 127.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = d;
        for (int g = 0; g < RL_QK_K / 16; g++) {
            int s = 0;
            for (int j = 0; j < 16; j++) {
                int q = (int)nearbyintf(xb[g * 16 + j] * id);
                y[i].qs[g * 16 + j] = (int8_t)q;
                s += q;
            }
            y[i].bsums[g] = (int16_t)s;
        }
    }
}

/* ---------------- float weights (x is f32) ---------------- */

static void rl__dot_f32_ref(int64_t n, float *s, const void *w, const void *x) {
    const float *a = w, *b = x;
    float sum = 0.0f;
    for (int64_t i = 0; i < n; i++) sum += a[i] * b[i];
    *s = sum;
}

static void rl__dot_f16w_ref(int64_t n, float *s, const void *w, const void *x) {
    const rl_fp16 *a = w;
    const float *b = x;
    float sum = 0.0f;
    for (int64_t i = 0; i < n; i++) sum += F16(a[i]) * b[i];
    *s = sum;
}

static void rl__dot_bf16w_ref(int64_t n, float *s, const void *w, const void *x) {
    const rl_bf16 *a = w;
    const float *b = x;
    float sum = 0.0f;
    for (int64_t i = 0; i < n; i++) sum += rl_bf16_to_f32(a[i]) * b[i];
    *s = sum;
}

/* ---------------- 32-element block types ---------------- */

static void rl__dot_q4_0_ref(int64_t n, float *s, const void *vw, const void *vx) {
    const rl_block_q4_0 *w = vw;
    const rl_block_q8_0 *x = vx;
    float sum = 0.0f;
    for (int64_t i = 0; i < n / RL_QK8_0; i++) {
        int sumi = 0;
        for (int j = 0; j < 16; j++) {
            sumi += ((w[i].qs[j] & 0xF) - 8) * x[i].qs[j];
            sumi += ((w[i].qs[j] >> 4) - 8) * x[i].qs[j + 16];
        }
        sum += (float)sumi * (F16(w[i].d) * F16(x[i].d));
    }
    *s = sum;
}

static void rl__dot_q4_1_ref(int64_t n, float *s, const void *vw, const void *vx) {
    const rl_block_q4_1 *w = vw;
    const rl_block_q8_1 *x = vx;
    float sum = 0.0f;
    for (int64_t i = 0; i < n / RL_QK8_1; i++) {
        int sumi = 0;
        for (int j = 0; j < 16; j++) {
            sumi += (w[i].qs[j] & 0xF) * x[i].qs[j];
            sumi += (w[i].qs[j] >> 4) * x[i].qs[j + 16];
        }
        sum += (float)sumi * (F16(w[i].d) * F16(x[i].d)) + F16(w[i].m) * F16(x[i].s);
    }
    *s = sum;
}

static inline uint32_t rl__le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void rl__dot_q5_0_ref(int64_t n, float *s, const void *vw, const void *vx) {
    const rl_block_q5_0 *w = vw;
    const rl_block_q8_0 *x = vx;
    float sum = 0.0f;
    for (int64_t i = 0; i < n / RL_QK8_0; i++) {
        uint32_t qh = rl__le32(w[i].qh);
        int sumi = 0;
        for (int j = 0; j < 16; j++) {
            int q0 = (w[i].qs[j] & 0xF) | (int)((qh >> j) & 1) << 4;
            int q1 = (w[i].qs[j] >> 4) | (int)((qh >> (j + 16)) & 1) << 4;
            sumi += (q0 - 16) * x[i].qs[j] + (q1 - 16) * x[i].qs[j + 16];
        }
        sum += (float)sumi * (F16(w[i].d) * F16(x[i].d));
    }
    *s = sum;
}

static void rl__dot_q5_1_ref(int64_t n, float *s, const void *vw, const void *vx) {
    const rl_block_q5_1 *w = vw;
    const rl_block_q8_1 *x = vx;
    float sum = 0.0f;
    for (int64_t i = 0; i < n / RL_QK8_1; i++) {
        uint32_t qh = rl__le32(w[i].qh);
        int sumi = 0;
        for (int j = 0; j < 16; j++) {
            int q0 = (w[i].qs[j] & 0xF) | (int)((qh >> j) & 1) << 4;
            int q1 = (w[i].qs[j] >> 4) | (int)((qh >> (j + 16)) & 1) << 4;
            sumi += q0 * x[i].qs[j] + q1 * x[i].qs[j + 16];
        }
        sum += (float)sumi * (F16(w[i].d) * F16(x[i].d)) + F16(w[i].m) * F16(x[i].s);
    }
    *s = sum;
}

static void rl__dot_q8_0_ref(int64_t n, float *s, const void *vw, const void *vx) {
    const rl_block_q8_0 *w = vw;
    const rl_block_q8_0 *x = vx;
    float sum = 0.0f;
    for (int64_t i = 0; i < n / RL_QK8_0; i++) {
        int sumi = 0;
        for (int j = 0; j < RL_QK8_0; j++) sumi += w[i].qs[j] * x[i].qs[j];
        sum += (float)sumi * (F16(w[i].d) * F16(x[i].d));
    }
    *s = sum;
}

/* Codebook types against q8_0: the integer dot of the codebook values
 * (iq4_nl: rl_iq4nl_values; mxfp4: rl_mxfp4_values, twice the e2m1
 * values) with the activation codes, scaled by the weight scale (fp16 d;
 * mxfp4: 2^(e-128)) times the activation scale. */
static int rl__dot_nib_tbl(const int8_t *tbl, const uint8_t *qs, const int8_t *y) {
    int sumi = 0;
    for (int j = 0; j < 16; j++) sumi += tbl[qs[j] & 0xF] * y[j] + tbl[qs[j] >> 4] * y[j + 16];
    return sumi;
}

static void rl__dot_iq4_nl_ref(int64_t n, float *s, const void *vw, const void *vx) {
    const rl_block_iq4_nl *w = vw;
    const rl_block_q8_0 *x = vx;
    float sum = 0.0f;
    for (int64_t i = 0; i < n / RL_QK8_0; i++)
        sum +=
            (float)rl__dot_nib_tbl(rl_iq4nl_values, w[i].qs, x[i].qs) * (F16(w[i].d) * F16(x[i].d));
    *s = sum;
}

static void rl__dot_mxfp4_ref(int64_t n, float *s, const void *vw, const void *vx) {
    const rl_block_mxfp4 *w = vw;
    const rl_block_q8_0 *x = vx;
    float sum = 0.0f;
    for (int64_t i = 0; i < n / RL_QK8_0; i++)
        sum += (float)rl__dot_nib_tbl(rl_mxfp4_values, w[i].qs, x[i].qs) *
               (rl_e8m0_half_to_f32(w[i].e) * F16(x[i].d));
    *s = sum;
}

/* ---------------- K-quants (x is q8_K) ----------------
 * Element e (0..255) of a super-block:
 *   q2_K: 2 bits at qs[(e/128)*32 + e%32] >> 2*((e%128)/32); scale/min byte e/16.
 *   q3_K: low 2 bits as q2_K; high bit = hmask[e%32] bit (e/32); 16 6-bit scales.
 *   q4_K: nibble of qs[(e/64)*32 + e%32], high nibble when (e%64) >= 32; sub-block e/32.
 *   q5_K: q4_K plus bit (e/32) of qh[e%32].
 *   q6_K: low 4 bits ql[(e/128)*64 + e%64] (high nibble when (e%128) >= 64),
 *         high 2 bits qh[(e/128)*32 + e%32] >> 2*((e%128)/32); scale e/16; q-32.
 */

static void rl__dot_q2_K_ref(int64_t n, float *s, const void *vw, const void *vx) {
    const rl_block_q2_K *w = vw;
    const rl_block_q8_K *x = vx;
    float sum = 0.0f;
    for (int64_t i = 0; i < n / RL_QK_K; i++) {
        int sumi = 0, summ = 0;
        for (int e = 0; e < RL_QK_K; e++) {
            int q = (w[i].qs[(e / 128) * 32 + e % 32] >> (2 * ((e % 128) / 32))) & 3;
            sumi += (w[i].scales[e / 16] & 0xF) * q * x[i].qs[e];
        }
        for (int g = 0; g < 16; g++) summ += (w[i].scales[g] >> 4) * x[i].bsums[g];
        sum += x[i].d * (F16(w[i].d) * (float)sumi - F16(w[i].dmin) * (float)summ);
    }
    *s = sum;
}

int rl__q3_K_scale(const uint8_t *sc, int j) {
    int lo = j < 8 ? (sc[j] & 0xF) : (sc[j - 8] >> 4);
    int hi = (sc[8 + j % 4] >> (2 * (j / 4))) & 3;
    return (lo | hi << 4) - 32;
}

int rl__q3_K_code(const rl_block_q3_K *b, int e) {
    int q = (b->qs[(e / 128) * 32 + e % 32] >> (2 * ((e % 128) / 32))) & 3;
    return (b->hmask[e % 32] >> (e / 32)) & 1 ? q : q - 4;
}

static void rl__dot_q3_K_ref(int64_t n, float *s, const void *vw, const void *vx) {
    const rl_block_q3_K *w = vw;
    const rl_block_q8_K *x = vx;
    float sum = 0.0f;
    for (int64_t i = 0; i < n / RL_QK_K; i++) {
        int sumi = 0;
        for (int g = 0; g < 16; g++) {
            int sg = 0;
            for (int e = g * 16; e < g * 16 + 16; e++) sg += rl__q3_K_code(&w[i], e) * x[i].qs[e];
            sumi += rl__q3_K_scale(w[i].scales, g) * sg;
        }
        sum += x[i].d * F16(w[i].d) * (float)sumi;
    }
    *s = sum;
}

static void rl__dot_q4_K_ref(int64_t n, float *s, const void *vw, const void *vx) {
    const rl_block_q4_K *w = vw;
    const rl_block_q8_K *x = vx;
    float sum = 0.0f;
    for (int64_t i = 0; i < n / RL_QK_K; i++) {
        int sumi = 0, summ = 0;
        for (int sb = 0; sb < 8; sb++) {
            int sc, m;
            rl_scale_min_k4(w[i].scales, sb, &sc, &m);
            int sq = 0;
            for (int e = sb * 32; e < sb * 32 + 32; e++) {
                uint8_t b = w[i].qs[(e / 64) * 32 + e % 32];
                int q = (e % 64) >= 32 ? b >> 4 : b & 0xF;
                sq += q * x[i].qs[e];
            }
            sumi += sc * sq;
            summ += m * (x[i].bsums[2 * sb] + x[i].bsums[2 * sb + 1]);
        }
        sum += x[i].d * (F16(w[i].d) * (float)sumi - F16(w[i].dmin) * (float)summ);
    }
    *s = sum;
}

static void rl__dot_q5_K_ref(int64_t n, float *s, const void *vw, const void *vx) {
    const rl_block_q5_K *w = vw;
    const rl_block_q8_K *x = vx;
    float sum = 0.0f;
    for (int64_t i = 0; i < n / RL_QK_K; i++) {
        int sumi = 0, summ = 0;
        for (int sb = 0; sb < 8; sb++) {
            int sc, m;
            rl_scale_min_k4(w[i].scales, sb, &sc, &m);
            int sq = 0;
            for (int e = sb * 32; e < sb * 32 + 32; e++) {
                uint8_t b = w[i].qs[(e / 64) * 32 + e % 32];
                int q = (e % 64) >= 32 ? b >> 4 : b & 0xF;
                q |= ((w[i].qh[e % 32] >> (e / 32)) & 1) << 4;
                sq += q * x[i].qs[e];
            }
            sumi += sc * sq;
            summ += m * (x[i].bsums[2 * sb] + x[i].bsums[2 * sb + 1]);
        }
        sum += x[i].d * (F16(w[i].d) * (float)sumi - F16(w[i].dmin) * (float)summ);
    }
    *s = sum;
}

static void rl__dot_q6_K_ref(int64_t n, float *s, const void *vw, const void *vx) {
    const rl_block_q6_K *w = vw;
    const rl_block_q8_K *x = vx;
    float sum = 0.0f;
    for (int64_t i = 0; i < n / RL_QK_K; i++) {
        int sumi = 0;
        for (int g = 0; g < 16; g++) {
            int sg = 0;
            for (int e = g * 16; e < g * 16 + 16; e++) {
                int h = e / 128, r = e % 128;
                uint8_t lb = w[i].ql[h * 64 + r % 64];
                int lo = r >= 64 ? lb >> 4 : lb & 0xF;
                int hi = (w[i].qh[h * 32 + r % 32] >> (2 * (r / 32))) & 3;
                sg += ((lo | hi << 4) - 32) * x[i].qs[e];
            }
            sumi += w[i].scales[g] * sg;
        }
        sum += x[i].d * F16(w[i].d) * (float)sumi;
    }
    *s = sum;
}

/* iq4_xs against q8_K: per super-block the exact sum over sub-blocks of
 * (6-bit scale - 32) * (codebook values . activation codes). */
static void rl__dot_iq4_xs_ref(int64_t n, float *s, const void *vw, const void *vx) {
    const rl_block_iq4_xs *w = vw;
    const rl_block_q8_K *x = vx;
    float sum = 0.0f;
    for (int64_t i = 0; i < n / RL_QK_K; i++) {
        int sumi = 0;
        for (int ib = 0; ib < RL_QK_K / 32; ib++) {
            int ls = ((w[i].scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF) |
                     ((w[i].scales_h >> (2 * ib)) & 3) << 4;
            sumi +=
                (ls - 32) * rl__dot_nib_tbl(rl_iq4nl_values, w[i].qs + 16 * ib, x[i].qs + 32 * ib);
        }
        sum += x[i].d * F16(w[i].d) * (float)sumi;
    }
    *s = sum;
}

void rl__ref_fill_quant(rl__ktab *t);
void rl__ref_fill_quant(rl__ktab *t) {
    t->vec_dot[RL_TYPE_F32] = rl__dot_f32_ref;
    t->vec_dot[RL_TYPE_F16] = rl__dot_f16w_ref;
    t->vec_dot[RL_TYPE_BF16] = rl__dot_bf16w_ref;
    t->vec_dot[RL_TYPE_Q4_0] = rl__dot_q4_0_ref;
    t->vec_dot[RL_TYPE_Q4_1] = rl__dot_q4_1_ref;
    t->vec_dot[RL_TYPE_Q5_0] = rl__dot_q5_0_ref;
    t->vec_dot[RL_TYPE_Q5_1] = rl__dot_q5_1_ref;
    t->vec_dot[RL_TYPE_Q8_0] = rl__dot_q8_0_ref;
    t->vec_dot[RL_TYPE_Q2_K] = rl__dot_q2_K_ref;
    t->vec_dot[RL_TYPE_Q3_K] = rl__dot_q3_K_ref;
    t->vec_dot[RL_TYPE_Q4_K] = rl__dot_q4_K_ref;
    t->vec_dot[RL_TYPE_Q5_K] = rl__dot_q5_K_ref;
    t->vec_dot[RL_TYPE_Q6_K] = rl__dot_q6_K_ref;
    t->vec_dot[RL_TYPE_IQ4_NL] = rl__dot_iq4_nl_ref;
    t->vec_dot[RL_TYPE_IQ4_XS] = rl__dot_iq4_xs_ref;
    t->vec_dot[RL_TYPE_MXFP4] = rl__dot_mxfp4_ref;
    t->quant_q8_0 = rl__quant_q8_0_ref;
    t->quant_q8_1 = rl__quant_q8_1_ref;
    t->quant_q8_K = rl__quant_q8_K_ref;
    t->to_f16 = rl__to_f16_ref;
}
