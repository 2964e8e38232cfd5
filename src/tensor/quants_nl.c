/* redline codebook quants: scalar reference dequantize and quantize for
 * the formats whose 4-bit codes index a fixed non-linear table instead of
 * an integer grid: iq4_nl (32-element blocks, fp16 scale), iq4_xs (256-
 * element super-blocks of eight 32-element sub-blocks with 6-bit scales)
 * and mxfp4 (32 e2m1 codes, one e8m0 power-of-two scale).
 *
 * Layouts: tensor.h (rl_block_iq4_nl, rl_block_iq4_xs, rl_block_mxfp4).
 * Dequantize formulas and their float evaluation order (bit-exact with the
 * gguf package; no FMA contraction under -std=c11):
 *   iq4_nl: d * kv[q]            iq4_xs: (d * (ls - 32)) * kv[q]
 *   mxfp4:  2^(e-128) * mv[q]    (exact: a power of two times an integer)
 *
 * Quantizers (simple but correct, no importance weights):
 *   iq4_nl: the scale search of iq4nl_fit (31 candidate scales, each
 *     refitted by least squares, the smallest squared error kept).  The
 *     KV-page quantizer of src/kernels (rl__quant_iq4_nl_kv) is this
 *     function, so pages and weights use one algorithm.
 *   iq4_xs: iq4nl_fit per sub-block (scale unrounded), then the fp16
 *     super-block scale d that maps the largest sub-block scale to -32 or
 *     to +31 (whichever gives the smaller error), 6-bit scales rounded from
 *     it, and codes re-chosen as the nearest entries for the stored scale.
 *   mxfp4: the exponent e0 = floor(log2 amax) - 2 + 127 (the OCP
 *     conversion: amax lands in [4, 8) of the doubled table, so values up
 *     to 1.5 * 2^floor(log2 amax) are on the grid) and e0 + 1 (no
 *     clipping), whichever gives the smaller squared error; codes are the
 *     nearest entries, ties to the even code (OCP round-to-nearest-even).
 */
#include "tensor/tensor-impl.h"

#include "base/base.h"

#include <float.h>
#include <math.h>
#include <string.h>

#define FP16(h) rl_fp16_to_f32(h)

const int8_t rl_iq4nl_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                    1,    13,   25,  38,  53,  69,  89,  113};
const int8_t rl_mxfp4_values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

/* ---------------- dequantize ---------------- */

void rl__iq4_nl_to_float(const void *x, float *y, int64_t n) {
    RL_ASSERT(n % RL_QK4_NL == 0);
    const rl_block_iq4_nl *b = x;
    for (int64_t i = 0; i < n / RL_QK4_NL; i++, y += RL_QK4_NL) {
        const float d = FP16(b[i].d);
        for (int j = 0; j < 16; j++) {
            y[j] = d * (float)rl_iq4nl_values[b[i].qs[j] & 0x0f];
            y[j + 16] = d * (float)rl_iq4nl_values[b[i].qs[j] >> 4];
        }
    }
}

/* The 6-bit scale (0..63, biased by 32) of sub-block ib. */
static inline int iq4xs_scale(const rl_block_iq4_xs *b, int ib) {
    return ((b->scales_l[ib / 2] >> (4 * (ib % 2))) & 0x0f) | ((b->scales_h >> (2 * ib)) & 3) << 4;
}

void rl__iq4_xs_to_float(const void *x, float *y, int64_t n) {
    RL_ASSERT(n % RL_QK_K == 0);
    const rl_block_iq4_xs *b = x;
    for (int64_t i = 0; i < n / RL_QK_K; i++) {
        const float d = FP16(b[i].d);
        for (int ib = 0; ib < RL_QK_K / 32; ib++, y += 32) {
            const float dl = d * (float)(iq4xs_scale(&b[i], ib) - 32);
            const uint8_t *q = b[i].qs + 16 * ib;
            for (int j = 0; j < 16; j++) {
                y[j] = dl * (float)rl_iq4nl_values[q[j] & 0x0f];
                y[j + 16] = dl * (float)rl_iq4nl_values[q[j] >> 4];
            }
        }
    }
}

void rl__mxfp4_to_float(const void *x, float *y, int64_t n) {
    RL_ASSERT(n % RL_QK_MXFP4 == 0);
    const rl_block_mxfp4 *b = x;
    for (int64_t i = 0; i < n / RL_QK_MXFP4; i++, y += RL_QK_MXFP4) {
        const float d = rl_e8m0_half_to_f32(b[i].e);
        for (int j = 0; j < 16; j++) {
            y[j] = d * (float)rl_mxfp4_values[b[i].qs[j] & 0x0f];
            y[j + 16] = d * (float)rl_mxfp4_values[b[i].qs[j] >> 4];
        }
    }
}

/* ---------------- quantize ---------------- */

/* Index of the iq4_nl codebook entry nearest to v (ties: the upper). */
static inline int iq4nl_nearest(float v) {
    const int8_t *k = rl_iq4nl_values;
    if (v <= k[0]) return 0;
    if (v >= k[15]) return 15;
    int lo = 0, hi = 15;
    while (hi - lo > 1) {
        int mid = (lo + hi) / 2;
        if (v < k[mid])
            hi = mid;
        else
            lo = mid;
    }
    return v - k[lo] < k[hi] - v ? lo : hi;
}

/* Scale search for one 32-element block: the element of largest magnitude
 * mx is mapped to 31 points near either end of the codebook (mx*id =
 * -134..-119 or 106..120); for each, the codes are the nearest entries and
 * d the least-squares scale for them (sum x*v / sum v^2, rounded to fp16
 * when round16); the d with the smallest squared error wins (the first on
 * ties).  Returns d (0 for an all-zero block) and the codes in q. */
static float iq4nl_fit(const float *x, bool round16, uint8_t q[32]) {
    const int8_t *k = rl_iq4nl_values;
    float amax = 0.0f, mx = 0.0f;
    for (int j = 0; j < 32; j++)
        if (fabsf(x[j]) > amax) amax = fabsf(x[j]), mx = x[j];
    memset(q, 0, 32);
    if (!(amax > 0.0f)) return 0.0f;
    float best_d = 0.0f, best_err = INFINITY;
    for (int it = -15; it <= 15; it++) {
        const float c = it <= 0 ? (float)k[0] - (float)it - 7.0f : (float)k[15] + (float)it - 8.0f;
        const float id = c / mx;
        uint8_t qt[32];
        float sxv = 0.0f, svv = 0.0f;
        for (int j = 0; j < 32; j++) {
            qt[j] = (uint8_t)iq4nl_nearest(x[j] * id);
            sxv += x[j] * (float)k[qt[j]];
            svv += (float)k[qt[j]] * (float)k[qt[j]];
        }
        float d = svv > 0.0f ? sxv / svv : 0.0f;
        if (round16) d = FP16(rl_f32_to_fp16(d)); /* the stored scale */
        float err = 0.0f;
        for (int j = 0; j < 32; j++) {
            const float e = x[j] - d * (float)k[qt[j]];
            err += e * e;
        }
        if (err < best_err) {
            best_err = err;
            best_d = d;
            memcpy(q, qt, 32);
        }
    }
    return best_d;
}

static void pack_nibbles16(const uint8_t q[32], uint8_t qs[16]) {
    for (int j = 0; j < 16; j++) qs[j] = (uint8_t)(q[j] | q[j + 16] << 4);
}

void rl__iq4_nl_from_float(const float *x, void *y, int64_t n) {
    RL_ASSERT(n % RL_QK4_NL == 0);
    rl_block_iq4_nl *b = y;
    for (int64_t i = 0; i < n / RL_QK4_NL; i++, x += RL_QK4_NL) {
        uint8_t q[32];
        b[i].d = rl_f32_to_fp16(iq4nl_fit(x, true, q));
        pack_nibbles16(q, b[i].qs);
    }
}

/* Codes of one iq4_xs sub-block for the stored scale dl (nearest entries;
 * any code for dl = 0), and their squared error. */
static float iq4xs_codes(const float *x, float dl, uint8_t q[32]) {
    float err = 0.0f;
    for (int j = 0; j < 32; j++) {
        q[j] = (uint8_t)(dl != 0.0f ? iq4nl_nearest(x[j] / dl) : 8);
        const float e = x[j] - dl * (float)rl_iq4nl_values[q[j]];
        err += e * e;
    }
    return err;
}

static inline int clampi(int v, int lo, int hi) {
    return v < lo ? lo : v > hi ? hi : v;
}

void rl__iq4_xs_from_float(const float *x, void *y, int64_t n) {
    RL_ASSERT(n % RL_QK_K == 0);
    rl_block_iq4_xs *b = y;
    enum { NSUB = RL_QK_K / 32 };
    for (int64_t i = 0; i < n / RL_QK_K; i++, x += RL_QK_K) {
        float s[NSUB], smax = 0.0f;
        uint8_t q[RL_QK_K], qt[RL_QK_K];
        for (int ib = 0; ib < NSUB; ib++) {
            s[ib] = iq4nl_fit(x + 32 * ib, false, q + 32 * ib);
            if (fabsf(s[ib]) > fabsf(smax)) smax = s[ib];
        }
        /* two super-block scales: smax -> ls - 32 = -32, or = +31 */
        int best_ls[NSUB] = {0};
        float best_err = INFINITY;
        rl_fp16 best_dh = 0;
        for (int c = 0; c < 2 && smax != 0.0f; c++) {
            const rl_fp16 dh = rl_f32_to_fp16(smax / (c == 0 ? -32.0f : 31.0f));
            const float d = FP16(dh);
            if (d == 0.0f || !isfinite(d)) continue;
            int ls[NSUB];
            float err = 0.0f;
            for (int ib = 0; ib < NSUB; ib++) {
                ls[ib] = clampi((int)lroundf(s[ib] / d), -32, 31);
                err += iq4xs_codes(x + 32 * ib, d * (float)ls[ib], qt + 32 * ib);
            }
            if (err < best_err) {
                best_err = err;
                best_dh = dh;
                memcpy(best_ls, ls, sizeof ls);
                memcpy(q, qt, sizeof q);
            }
        }
        if (best_err == INFINITY)
            memset(q, 8, sizeof q); /* all-zero super-block (or no usable scale) */
        b[i].d = best_dh;
        b[i].scales_h = 0;
        memset(b[i].scales_l, 0, sizeof b[i].scales_l);
        for (int ib = 0; ib < NSUB; ib++) {
            const int u = best_ls[ib] + 32;
            b[i].scales_l[ib / 2] |= (uint8_t)((u & 0x0f) << (4 * (ib % 2)));
            b[i].scales_h |= (uint16_t)((u >> 4) << (2 * ib));
            pack_nibbles16(q + 32 * ib, b[i].qs + 16 * ib);
        }
    }
}

/* Nearest mxfp4 code to x for the scale d (a power of two): the magnitude
 * index in {0,1,2,3,4,6,8,12} with ties to the even index, plus the sign
 * bit 8 for negative nonzero results. */
static inline int mxfp4_nearest(float x, float d) {
    const float a = fabsf(x) / d; /* exact unless it overflows */
    int i = 0;
    while (i < 7) {
        const float mid = 0.5f * (float)(rl_mxfp4_values[i] + rl_mxfp4_values[i + 1]);
        if (a < mid || (a == mid && i % 2 == 0)) break;
        i++;
    }
    return i && x < 0.0f ? i | 8 : i;
}

void rl__mxfp4_from_float(const float *x, void *y, int64_t n) {
    RL_ASSERT(n % RL_QK_MXFP4 == 0);
    rl_block_mxfp4 *b = y;
    for (int64_t i = 0; i < n / RL_QK_MXFP4; i++, x += RL_QK_MXFP4) {
        float amax = 0.0f;
        for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[j]));
        uint8_t q[32] = {0};
        int best_e = 0;
        if (amax > 0.0f) {
            int ex = 0;
            if (amax <= FLT_MAX)
                (void)frexpf(amax, &ex); /* amax = m * 2^ex, m in [0.5, 1) */
            else
                ex = 130; /* Inf: the largest exponent */
            int e0 = ex - 1 - 2 + 127;
            e0 = e0 < 0 ? 0 : e0 > 254 ? 254 : e0;
            float best_err = INFINITY;
            for (int e = e0; e <= e0 + 1 && e <= 254; e++) {
                const float d = rl_e8m0_half_to_f32((uint8_t)e);
                uint8_t qt[32];
                float err = 0.0f;
                for (int j = 0; j < 32; j++) {
                    qt[j] = (uint8_t)mxfp4_nearest(x[j], d);
                    const float r = x[j] - d * (float)rl_mxfp4_values[qt[j]];
                    err += r * r;
                }
                if (err < best_err) {
                    best_err = err;
                    best_e = e;
                    memcpy(q, qt, sizeof q);
                }
            }
        }
        b[i].e = (uint8_t)best_e;
        pack_nibbles16(q, b[i].qs);
    }
}
