/* redline 32-element block quants: scalar reference dequantize (to_float)
 * and quantize (from_float) for q4_0, q4_1, q5_0, q5_1, q8_0, q8_1 (the
 * codebook formats iq4_nl, iq4_xs, mxfp4 are in quants_nl.c).
 *
 * Layouts (GGUF, little-endian; element j of a 32-element block):
 *   q4_0/q4_1:        j < 16 in the low nibble of qs[j], j >= 16 in the
 *                     high nibble of qs[j-16];
 *   q5_0/q5_1:        the same four low bits, plus bit j of the 32-bit
 *                     little-endian qh as bit 4;
 *   q8_0/q8_1:        qs[j] is a signed byte.
 * Dequantize formulas and their float evaluation order (this order is what
 * makes us bit-exact with other implementations; no FMA contraction here,
 * -std=c11 turns it off):
 *   q4_0: d * (q - 8)         q4_1: d * q + m
 *   q5_0: d * (q - 16)        q5_1: d * q + m
 *   q8_0, q8_1: d * q
 *
 * Quantizers are "simple but correct": the stored fp16 scale is chosen
 * with directed rounding so the quantization grid always covers the
 * block, and the codes are computed from the stored (rounded) scale, so
 * error bounds hold against what is really stored (see each function).
 */
#include "tensor/tensor-impl.h"

#include "base/base.h"

#include <math.h>
#include <string.h>

#define FP16(h) rl_fp16_to_f32(h)

/* round half away from zero, returning an int (inputs are small) */
static inline int round_int(float v) {
    return (int)lroundf(v);
}
static inline int clampi(int v, int lo, int hi) {
    return v < lo ? lo : v > hi ? hi : v;
}

/* ---------------- dequantize ---------------- */

void rl__q4_0_to_float(const void *x, float *y, int64_t n) {
    RL_ASSERT(n % RL_QK4_0 == 0);
    const rl_block_q4_0 *b = x;
    for (int64_t i = 0; i < n / RL_QK4_0; i++, y += RL_QK4_0) {
        const float d = FP16(b[i].d);
        for (int j = 0; j < 16; j++) {
            y[j] = d * (float)((b[i].qs[j] & 0x0f) - 8);
            y[j + 16] = d * (float)((b[i].qs[j] >> 4) - 8);
        }
    }
}

void rl__q4_1_to_float(const void *x, float *y, int64_t n) {
    RL_ASSERT(n % RL_QK4_1 == 0);
    const rl_block_q4_1 *b = x;
    for (int64_t i = 0; i < n / RL_QK4_1; i++, y += RL_QK4_1) {
        const float d = FP16(b[i].d), m = FP16(b[i].m);
        for (int j = 0; j < 16; j++) {
            y[j] = d * (float)(b[i].qs[j] & 0x0f) + m;
            y[j + 16] = d * (float)(b[i].qs[j] >> 4) + m;
        }
    }
}

static inline uint32_t load_qh(const uint8_t qh[4]) {
    return (uint32_t)qh[0] | (uint32_t)qh[1] << 8 | (uint32_t)qh[2] << 16 | (uint32_t)qh[3] << 24;
}

void rl__q5_0_to_float(const void *x, float *y, int64_t n) {
    RL_ASSERT(n % RL_QK5_0 == 0);
    const rl_block_q5_0 *b = x;
    for (int64_t i = 0; i < n / RL_QK5_0; i++, y += RL_QK5_0) {
        const float d = FP16(b[i].d);
        const uint32_t qh = load_qh(b[i].qh);
        for (int j = 0; j < 16; j++) {
            int q0 = (b[i].qs[j] & 0x0f) | (int)((qh >> j) & 1u) << 4;
            int q1 = (b[i].qs[j] >> 4) | (int)((qh >> (j + 16)) & 1u) << 4;
            y[j] = d * (float)(q0 - 16);
            y[j + 16] = d * (float)(q1 - 16);
        }
    }
}

void rl__q5_1_to_float(const void *x, float *y, int64_t n) {
    RL_ASSERT(n % RL_QK5_1 == 0);
    const rl_block_q5_1 *b = x;
    for (int64_t i = 0; i < n / RL_QK5_1; i++, y += RL_QK5_1) {
        const float d = FP16(b[i].d), m = FP16(b[i].m);
        const uint32_t qh = load_qh(b[i].qh);
        for (int j = 0; j < 16; j++) {
            int q0 = (b[i].qs[j] & 0x0f) | (int)((qh >> j) & 1u) << 4;
            int q1 = (b[i].qs[j] >> 4) | (int)((qh >> (j + 16)) & 1u) << 4;
            y[j] = d * (float)q0 + m;
            y[j + 16] = d * (float)q1 + m;
        }
    }
}

/* q8_0 and q8_64 blocks: fp16 d, then qk int8 codes; x = d * q. */
static void q8_blocks_to_float(const void *x, float *y, int64_t n, int qk) {
    RL_ASSERT(n % qk == 0);
    const uint8_t *p = x;
    for (int64_t i = 0; i < n / qk; i++, y += qk, p += 2 + (size_t)qk) {
        rl_fp16 dh;
        memcpy(&dh, p, sizeof dh);
        const float d = FP16(dh);
        const int8_t *qs = (const int8_t *)(p + 2);
        for (int j = 0; j < qk; j++) y[j] = d * (float)qs[j];
    }
}

void rl__q8_0_to_float(const void *x, float *y, int64_t n) {
    q8_blocks_to_float(x, y, n, RL_QK8_0);
}
void rl__q8_64_to_float(const void *x, float *y, int64_t n) {
    q8_blocks_to_float(x, y, n, RL_QK8_64);
}

void rl__q8_1_to_float(const void *x, float *y, int64_t n) {
    RL_ASSERT(n % RL_QK8_1 == 0);
    const rl_block_q8_1 *b = x;
    for (int64_t i = 0; i < n / RL_QK8_1; i++, y += RL_QK8_1) {
        const float d = FP16(b[i].d);
        for (int j = 0; j < RL_QK8_1; j++) y[j] = d * (float)b[i].qs[j];
    }
}

/* ---------------- quantize ---------------- */

/* Symmetric blocks (q4_0: nlo = 8, q5_0: nlo = 16): codes q in [-nlo, nlo-1]
 * with x ~ d*q.  d = -max/nlo where max is the element of largest magnitude
 * (so max itself maps exactly to -nlo), rounded away from zero in fp16 so
 * |x/d| <= nlo.  Codes are round(x/d) from the stored d, clamped.
 * Bound: |x - d*q| <= |d|/2 except for elements on the side opposite to
 * max beyond (nlo - 1/2)|d|, which clamp to nlo-1: there |x - d*q| <= |d|.
 * So |err| <= |d| always (plus float rounding of the product). */
static float sym_scale(const float *x, int nlo, rl_fp16 *dh) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < 32; j++) {
        if (fabsf(x[j]) > amax) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    }
    const float d = max / (float)-nlo;
    *dh = d >= 0.0f ? rl__fp16_round_up(d) : rl__fp16_round_down(d);
    return FP16(*dh);
}

void rl__q4_0_from_float(const float *x, void *y, int64_t n) {
    RL_ASSERT(n % RL_QK4_0 == 0);
    rl_block_q4_0 *b = y;
    for (int64_t i = 0; i < n / RL_QK4_0; i++, x += RL_QK4_0) {
        const float d = sym_scale(x, 8, &b[i].d);
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        for (int j = 0; j < 16; j++) {
            int q0 = clampi(round_int(x[j] * id), -8, 7) + 8;
            int q1 = clampi(round_int(x[j + 16] * id), -8, 7) + 8;
            b[i].qs[j] = (uint8_t)(q0 | q1 << 4);
        }
    }
}

void rl__q5_0_from_float(const float *x, void *y, int64_t n) {
    RL_ASSERT(n % RL_QK5_0 == 0);
    rl_block_q5_0 *b = y;
    for (int64_t i = 0; i < n / RL_QK5_0; i++, x += RL_QK5_0) {
        const float d = sym_scale(x, 16, &b[i].d);
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        uint32_t qh = 0;
        for (int j = 0; j < 16; j++) {
            int q0 = clampi(round_int(x[j] * id), -16, 15) + 16;
            int q1 = clampi(round_int(x[j + 16] * id), -16, 15) + 16;
            b[i].qs[j] = (uint8_t)((q0 & 0x0f) | (q1 & 0x0f) << 4);
            qh |= (uint32_t)(q0 >> 4) << j | (uint32_t)(q1 >> 4) << (j + 16);
        }
        for (int k = 0; k < 4; k++) b[i].qh[k] = (uint8_t)(qh >> (8 * k));
    }
}

/* Affine blocks (q4_1: nmax = 15, q5_1: nmax = 31): x ~ d*q + m, q in
 * [0, nmax].  m = min rounded down to fp16 (so m <= every x), d =
 * (max - m)/nmax rounded up (so m + nmax*d >= every x): the grid covers the
 * block and codes round((x - m)/d) never need clamping.
 * Bound: |x - (d*q + m)| <= d/2 (plus float rounding, a few ulps of
 * max(|x|)). */
static void affine_scale(const float *x, int nmax, rl_fp16 *dh, rl_fp16 *mh, float *d, float *m) {
    float mn = x[0], mx = x[0];
    for (int j = 1; j < 32; j++) {
        if (x[j] < mn) mn = x[j];
        if (x[j] > mx) mx = x[j];
    }
    *mh = rl__fp16_round_down(mn);
    *m = FP16(*mh);
    *dh = rl__fp16_round_up((mx - *m) / (float)nmax);
    *d = FP16(*dh);
}

void rl__q4_1_from_float(const float *x, void *y, int64_t n) {
    RL_ASSERT(n % RL_QK4_1 == 0);
    rl_block_q4_1 *b = y;
    for (int64_t i = 0; i < n / RL_QK4_1; i++, x += RL_QK4_1) {
        float d, m;
        affine_scale(x, 15, &b[i].d, &b[i].m, &d, &m);
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        for (int j = 0; j < 16; j++) {
            int q0 = clampi(round_int((x[j] - m) * id), 0, 15);
            int q1 = clampi(round_int((x[j + 16] - m) * id), 0, 15);
            b[i].qs[j] = (uint8_t)(q0 | q1 << 4);
        }
    }
}

void rl__q5_1_from_float(const float *x, void *y, int64_t n) {
    RL_ASSERT(n % RL_QK5_1 == 0);
    rl_block_q5_1 *b = y;
    for (int64_t i = 0; i < n / RL_QK5_1; i++, x += RL_QK5_1) {
        float d, m;
        affine_scale(x, 31, &b[i].d, &b[i].m, &d, &m);
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        uint32_t qh = 0;
        for (int j = 0; j < 16; j++) {
            int q0 = clampi(round_int((x[j] - m) * id), 0, 31);
            int q1 = clampi(round_int((x[j + 16] - m) * id), 0, 31);
            b[i].qs[j] = (uint8_t)((q0 & 0x0f) | (q1 & 0x0f) << 4);
            qh |= (uint32_t)(q0 >> 4) << j | (uint32_t)(q1 >> 4) << (j + 16);
        }
        for (int k = 0; k < 4; k++) b[i].qh[k] = (uint8_t)(qh >> (8 * k));
    }
}

/* q8_0 / q8_1 / q8_64 (qk elements): d = amax/127 rounded up to fp16 (so
 * |x/d| <= 127), codes round(x/d) from the stored d.  Bound: |x - d*q| <=
 * d/2 (plus rounding).  q8_1 also stores s = d * sum(q) (fp16). */
static float q8_block(const float *x, int8_t *qs, rl_fp16 *dh, int qk) {
    float amax = 0.0f;
    for (int j = 0; j < qk; j++) amax = fmaxf(amax, fabsf(x[j]));
    *dh = rl__fp16_round_up(amax / 127.0f);
    const float d = FP16(*dh);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    int sum = 0;
    for (int j = 0; j < qk; j++) {
        qs[j] = (int8_t)clampi(round_int(x[j] * id), -127, 127);
        sum += qs[j];
    }
    return d * (float)sum;
}

void rl__q8_0_from_float(const float *x, void *y, int64_t n) {
    RL_ASSERT(n % RL_QK8_0 == 0);
    rl_block_q8_0 *b = y;
    for (int64_t i = 0; i < n / RL_QK8_0; i++, x += RL_QK8_0)
        (void)q8_block(x, b[i].qs, &b[i].d, RL_QK8_0);
}

void rl__q8_64_from_float(const float *x, void *y, int64_t n) {
    RL_ASSERT(n % RL_QK8_64 == 0);
    rl_block_q8_64 *b = y;
    for (int64_t i = 0; i < n / RL_QK8_64; i++, x += RL_QK8_64)
        (void)q8_block(x, b[i].qs, &b[i].d, RL_QK8_64);
}

void rl__q8_1_from_float(const float *x, void *y, int64_t n) {
    RL_ASSERT(n % RL_QK8_1 == 0);
    rl_block_q8_1 *b = y;
    for (int64_t i = 0; i < n / RL_QK8_1; i++, x += RL_QK8_1)
        b[i].s = rl_f32_to_fp16(q8_block(x, b[i].qs, &b[i].d, RL_QK8_1));
}
