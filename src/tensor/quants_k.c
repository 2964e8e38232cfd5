/* redline K-quants: scalar reference dequantize and quantize for the
 * 256-element super-block formats q2_K, q3_K, q4_K, q5_K, q6_K and q8_K.
 *
 * Element order inside a super-block (e = 0..255), as in GGUF files:
 *   q2_K: e = 128*n + 32*j + l  ->  bits 2j..2j+1 of qs[32n + l];
 *         sub-block e/16 has scales[e/16] = (min << 4) | scale;
 *         x = (d*scale)*q - (dmin*min).
 *   q3_K: low 2 bits as q2_K; bit (4n + j) of hmask[l] is the high bit,
 *         q = low - (high ? 0 : 4); 16 six-bit scales packed in 12 bytes:
 *         scale i has low nibble in scales[i % 8] (>> 4 when i >= 8) and
 *         high 2 bits at scales[8 + i % 4] >> 2*(i / 4); x = (d*(s-32))*q.
 *   q4_K: sub-block s = 0..7 (32 elements): element l of sub-block s is
 *         nibble (s & 1) of qs[32*(s/2) + l]; 8 six-bit scales and mins in
 *         12 bytes (see rl_scale_min_k4 in tensor.h); x = (d*sc)*q - (dmin*m).
 *   q5_K: as q4_K plus bit s of qh[l] as bit 4.
 *   q6_K: e = 128*n + 32*k + l: low nibble (k >> 1) of ql[64n + 32*(k&1)
 *         + l], high 2 bits at qh[32n + l] >> 2k; q = u - 32; int8 scale
 *         per 16; x = (d*sc)*q.
 *   q8_K: float d, int8 qs, bsums[i] = sum of qs[16i..16i+15]; x = d*q.
 *
 * Quantizers (simple but correct, not llama.cpp's search-based ones):
 * per-sub-block min/max (or absmax), super-block scales rounded UP to fp16
 * and sub-block codes rounded UP, so each sub-block's grid covers its data;
 * codes are then computed from the stored, rounded values.  Error bounds
 * are stated at asym_superblock / sym_superblock.
 */
#include "tensor/tensor-impl.h"

#include "base/base.h"

#include <math.h>
#include <string.h>

#define FP16(h) rl_fp16_to_f32(h)

static inline int clampi(int v, int lo, int hi) {
    return v < lo ? lo : v > hi ? hi : v;
}

/* ---------------- dequantize ---------------- */

void rl__q2_K_to_float(const void *x, float *y, int64_t n) {
    RL_ASSERT(n % RL_QK_K == 0);
    const rl_block_q2_K *b = x;
    for (int64_t i = 0; i < n / RL_QK_K; i++, y += RL_QK_K) {
        const float d = FP16(b[i].d), dmin = FP16(b[i].dmin);
        for (int e = 0; e < RL_QK_K; e++) {
            const int nn = e / 128, j = (e % 128) / 32, l = e % 32;
            const uint8_t s = b[i].scales[e / 16];
            const float dl = d * (float)(s & 0x0f), ml = dmin * (float)(s >> 4);
            y[e] = dl * (float)((b[i].qs[32 * nn + l] >> (2 * j)) & 3) - ml;
        }
    }
}

static inline int q3_scale(const uint8_t s[12], int i) {
    int lo = (i < 8 ? s[i] : s[i - 8] >> 4) & 0x0f;
    int hi = (s[8 + i % 4] >> (2 * (i / 4))) & 3;
    return (lo | hi << 4) - 32;
}

void rl__q3_K_to_float(const void *x, float *y, int64_t n) {
    RL_ASSERT(n % RL_QK_K == 0);
    const rl_block_q3_K *b = x;
    for (int64_t i = 0; i < n / RL_QK_K; i++, y += RL_QK_K) {
        const float d = FP16(b[i].d);
        float dl[16];
        for (int k = 0; k < 16; k++) dl[k] = d * (float)q3_scale(b[i].scales, k);
        for (int e = 0; e < RL_QK_K; e++) {
            const int nn = e / 128, j = (e % 128) / 32, l = e % 32;
            int q = (b[i].qs[32 * nn + l] >> (2 * j)) & 3;
            if (!((b[i].hmask[l] >> (4 * nn + j)) & 1)) q -= 4;
            y[e] = dl[e / 16] * (float)q;
        }
    }
}

static void pack_scale_min_k4(const int sc[8], const int m[8], uint8_t s[12]) {
    for (int j = 0; j < 4; j++) {
        s[j] = (uint8_t)((sc[j] & 63) | (sc[j + 4] >> 4) << 6);
        s[j + 4] = (uint8_t)((m[j] & 63) | (m[j + 4] >> 4) << 6);
        s[j + 8] = (uint8_t)((sc[j + 4] & 0x0f) | (m[j + 4] & 0x0f) << 4);
    }
}

void rl__q4_K_to_float(const void *x, float *y, int64_t n) {
    RL_ASSERT(n % RL_QK_K == 0);
    const rl_block_q4_K *b = x;
    for (int64_t i = 0; i < n / RL_QK_K; i++, y += RL_QK_K) {
        const float d = FP16(b[i].d), dmin = FP16(b[i].dmin);
        for (int s = 0; s < 8; s++) {
            int sc, m;
            rl_scale_min_k4(b[i].scales, s, &sc, &m);
            const float d1 = d * (float)sc, m1 = dmin * (float)m;
            const uint8_t *q = b[i].qs + 32 * (s / 2);
            const int sh = 4 * (s & 1);
            for (int l = 0; l < 32; l++) y[32 * s + l] = d1 * (float)((q[l] >> sh) & 0x0f) - m1;
        }
    }
}

void rl__q5_K_to_float(const void *x, float *y, int64_t n) {
    RL_ASSERT(n % RL_QK_K == 0);
    const rl_block_q5_K *b = x;
    for (int64_t i = 0; i < n / RL_QK_K; i++, y += RL_QK_K) {
        const float d = FP16(b[i].d), dmin = FP16(b[i].dmin);
        for (int s = 0; s < 8; s++) {
            int sc, m;
            rl_scale_min_k4(b[i].scales, s, &sc, &m);
            const float d1 = d * (float)sc, m1 = dmin * (float)m;
            const uint8_t *q = b[i].qs + 32 * (s / 2);
            const int sh = 4 * (s & 1);
            for (int l = 0; l < 32; l++) {
                int v = ((q[l] >> sh) & 0x0f) | ((b[i].qh[l] >> s) & 1) << 4;
                y[32 * s + l] = d1 * (float)v - m1;
            }
        }
    }
}

void rl__q6_K_to_float(const void *x, float *y, int64_t n) {
    RL_ASSERT(n % RL_QK_K == 0);
    const rl_block_q6_K *b = x;
    for (int64_t i = 0; i < n / RL_QK_K; i++, y += RL_QK_K) {
        const float d = FP16(b[i].d);
        for (int e = 0; e < RL_QK_K; e++) {
            const int nn = e / 128, k = (e % 128) / 32, l = e % 32;
            int lo = (b[i].ql[64 * nn + 32 * (k & 1) + l] >> (4 * (k >> 1))) & 0x0f;
            int hi = (b[i].qh[32 * nn + l] >> (2 * k)) & 3;
            const float dl = d * (float)b[i].scales[e / 16];
            y[e] = dl * (float)((lo | hi << 4) - 32);
        }
    }
}

void rl__q8_K_to_float(const void *x, float *y, int64_t n) {
    RL_ASSERT(n % RL_QK_K == 0);
    const rl_block_q8_K *b = x;
    for (int64_t i = 0; i < n / RL_QK_K; i++, y += RL_QK_K)
        for (int e = 0; e < RL_QK_K; e++) y[e] = b[i].d * (float)b[i].qs[e];
}

/* ---------------- quantize ---------------- */

/* Affine super-block (q2_K: 16 x 16, qmax 3, scmax 15; q4_K/q5_K: 8 x 32,
 * qmax 15/31, scmax 63).  For sub-block j with mn_j = min(0, min x) and
 * mx_j = max x:
 *   dmin = max_j(-mn_j)/scmax rounded up to fp16, m_j = ceil(-mn_j/dmin),
 *   o_j = dmin*m_j (>= -mn_j: the grid starts at or below the data);
 *   scale_j = (mx_j + o_j)/qmax, d = max_j scale_j/scmax rounded up,
 *   sc_j = ceil(scale_j/d), s_j = d*sc_j (>= scale_j: the grid reaches mx_j);
 *   q = round((x + o_j)/s_j) in [0, qmax].
 * Bound: |x - (s_j*q - o_j)| <= s_j/2
 *        <= ((mx_j - mn_j) + dmin)/(2*qmax) + d/2   (plus float rounding). */
static void asym_superblock(const float *x, int n_sub, int sub_len, int qmax, int scmax,
                            rl_fp16 *dh, rl_fp16 *dminh, int *sc, int *mc, uint8_t *q) {
    float mn[16], mx[16], off[16], scale[16];
    float max_off = 0.0f, max_scale = 0.0f;
    for (int j = 0; j < n_sub; j++) {
        const float *xs = x + j * sub_len;
        float lo = 0.0f, hi = xs[0];
        for (int l = 0; l < sub_len; l++) {
            lo = fminf(lo, xs[l]);
            hi = fmaxf(hi, xs[l]);
        }
        mn[j] = lo;
        mx[j] = hi;
        max_off = fmaxf(max_off, -lo);
    }
    *dminh = rl__fp16_round_up(max_off / (float)scmax);
    const float dmin = FP16(*dminh);
    for (int j = 0; j < n_sub; j++) {
        mc[j] = dmin > 0.0f ? clampi((int)ceilf(-mn[j] / dmin), 0, scmax) : 0;
        off[j] = dmin * (float)mc[j];
        scale[j] = fmaxf(0.0f, (mx[j] + off[j]) / (float)qmax);
        max_scale = fmaxf(max_scale, scale[j]);
    }
    *dh = rl__fp16_round_up(max_scale / (float)scmax);
    const float d = FP16(*dh);
    for (int j = 0; j < n_sub; j++) {
        sc[j] = d > 0.0f ? clampi((int)ceilf(scale[j] / d), 0, scmax) : 0;
        const float s = d * (float)sc[j];
        const float is = s > 0.0f ? 1.0f / s : 0.0f;
        for (int l = 0; l < sub_len; l++) {
            const float v = x[j * sub_len + l];
            q[j * sub_len + l] = (uint8_t)clampi((int)lroundf((v + off[j]) * is), 0, qmax);
        }
    }
}

/* Symmetric super-block (q3_K: qmax 3, scmax 31; q6_K: qmax 31, scmax 127;
 * both 16 x 16): scale_j = amax_j/qmax, d = max_j scale_j/scmax rounded up
 * to fp16, sc_j = ceil(scale_j/d), s_j = d*sc_j, q = round(x/s_j) in
 * [-qmax, qmax] (the format's extra negative code is unused).
 * Bound: |x - s_j*q| <= s_j/2 <= (amax_j/qmax + d)/2 (plus float rounding). */
static void sym_superblock(const float *x, int qmax, int scmax, rl_fp16 *dh, int *sc, int *q) {
    float scale[16], max_scale = 0.0f;
    for (int j = 0; j < 16; j++) {
        float amax = 0.0f;
        for (int l = 0; l < 16; l++) amax = fmaxf(amax, fabsf(x[16 * j + l]));
        scale[j] = amax / (float)qmax;
        max_scale = fmaxf(max_scale, scale[j]);
    }
    *dh = rl__fp16_round_up(max_scale / (float)scmax);
    const float d = FP16(*dh);
    for (int j = 0; j < 16; j++) {
        sc[j] = d > 0.0f ? clampi((int)ceilf(scale[j] / d), 0, scmax) : 0;
        const float s = d * (float)sc[j];
        const float is = s > 0.0f ? 1.0f / s : 0.0f;
        for (int l = 0; l < 16; l++)
            q[16 * j + l] = clampi((int)lroundf(x[16 * j + l] * is), -qmax, qmax);
    }
}

void rl__q2_K_from_float(const float *x, void *y, int64_t n) {
    RL_ASSERT(n % RL_QK_K == 0);
    rl_block_q2_K *b = y;
    for (int64_t i = 0; i < n / RL_QK_K; i++, x += RL_QK_K) {
        int sc[16], mc[16];
        uint8_t q[RL_QK_K];
        asym_superblock(x, 16, 16, 3, 15, &b[i].d, &b[i].dmin, sc, mc, q);
        for (int k = 0; k < 16; k++) b[i].scales[k] = (uint8_t)(sc[k] | mc[k] << 4);
        memset(b[i].qs, 0, sizeof b[i].qs);
        for (int e = 0; e < RL_QK_K; e++) {
            const int nn = e / 128, j = (e % 128) / 32, l = e % 32;
            b[i].qs[32 * nn + l] |= (uint8_t)(q[e] << (2 * j));
        }
    }
}

void rl__q3_K_from_float(const float *x, void *y, int64_t n) {
    RL_ASSERT(n % RL_QK_K == 0);
    rl_block_q3_K *b = y;
    for (int64_t i = 0; i < n / RL_QK_K; i++, x += RL_QK_K) {
        int sc[16], q[RL_QK_K];
        sym_superblock(x, 3, 31, &b[i].d, sc, q);
        memset(b[i].scales, 0, sizeof b[i].scales);
        for (int k = 0; k < 16; k++) {
            const int v = sc[k] + 32; /* 6-bit biased */
            b[i].scales[k % 8] |= (uint8_t)((v & 0x0f) << (k < 8 ? 0 : 4));
            b[i].scales[8 + k % 4] |= (uint8_t)((v >> 4) << (2 * (k / 4)));
        }
        memset(b[i].qs, 0, sizeof b[i].qs);
        memset(b[i].hmask, 0, sizeof b[i].hmask);
        for (int e = 0; e < RL_QK_K; e++) {
            const int nn = e / 128, j = (e % 128) / 32, l = e % 32;
            const int u = q[e] + 4; /* 0..7 */
            b[i].qs[32 * nn + l] |= (uint8_t)((u & 3) << (2 * j));
            b[i].hmask[l] |= (uint8_t)((u >> 2) << (4 * nn + j));
        }
    }
}

void rl__q4_K_from_float(const float *x, void *y, int64_t n) {
    RL_ASSERT(n % RL_QK_K == 0);
    rl_block_q4_K *b = y;
    for (int64_t i = 0; i < n / RL_QK_K; i++, x += RL_QK_K) {
        int sc[8], mc[8];
        uint8_t q[RL_QK_K];
        asym_superblock(x, 8, 32, 15, 63, &b[i].d, &b[i].dmin, sc, mc, q);
        pack_scale_min_k4(sc, mc, b[i].scales);
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++)
                b[i].qs[32 * c + l] = (uint8_t)(q[64 * c + l] | q[64 * c + 32 + l] << 4);
    }
}

void rl__q5_K_from_float(const float *x, void *y, int64_t n) {
    RL_ASSERT(n % RL_QK_K == 0);
    rl_block_q5_K *b = y;
    for (int64_t i = 0; i < n / RL_QK_K; i++, x += RL_QK_K) {
        int sc[8], mc[8];
        uint8_t q[RL_QK_K];
        asym_superblock(x, 8, 32, 31, 63, &b[i].d, &b[i].dmin, sc, mc, q);
        pack_scale_min_k4(sc, mc, b[i].scales);
        memset(b[i].qh, 0, sizeof b[i].qh);
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++)
                b[i].qs[32 * c + l] =
                    (uint8_t)((q[64 * c + l] & 0x0f) | (q[64 * c + 32 + l] & 0x0f) << 4);
        for (int s = 0; s < 8; s++)
            for (int l = 0; l < 32; l++) b[i].qh[l] |= (uint8_t)((q[32 * s + l] >> 4) << s);
    }
}

void rl__q6_K_from_float(const float *x, void *y, int64_t n) {
    RL_ASSERT(n % RL_QK_K == 0);
    rl_block_q6_K *b = y;
    for (int64_t i = 0; i < n / RL_QK_K; i++, x += RL_QK_K) {
        int sc[16], q[RL_QK_K];
        sym_superblock(x, 31, 127, &b[i].d, sc, q);
        for (int k = 0; k < 16; k++) b[i].scales[k] = (int8_t)sc[k];
        memset(b[i].ql, 0, sizeof b[i].ql);
        memset(b[i].qh, 0, sizeof b[i].qh);
        for (int e = 0; e < RL_QK_K; e++) {
            const int nn = e / 128, k = (e % 128) / 32, l = e % 32;
            const int u = q[e] + 32; /* 0..63 */
            b[i].ql[64 * nn + 32 * (k & 1) + l] |= (uint8_t)((u & 0x0f) << (4 * (k >> 1)));
            b[i].qh[32 * nn + l] |= (uint8_t)((u >> 4) << (2 * k));
        }
    }
}

/* q8_K: float d = amax/127 (not rounded: it is stored as f32), codes
 * round(x/d) clamped to [-127, 127].  Bound: |x - d*q| <= d/2 (plus float
 * rounding).  bsums hold the exact integer sum of each 16 codes. */
void rl__q8_K_from_float(const float *x, void *y, int64_t n) {
    RL_ASSERT(n % RL_QK_K == 0);
    rl_block_q8_K *b = y;
    for (int64_t i = 0; i < n / RL_QK_K; i++, x += RL_QK_K) {
        float amax = 0.0f;
        for (int e = 0; e < RL_QK_K; e++) amax = fmaxf(amax, fabsf(x[e]));
        const float d = amax / 127.0f;
        const float id = d > 0.0f ? 1.0f / d : 0.0f;
        b[i].d = d;
        for (int k = 0; k < 16; k++) {
            int sum = 0;
            for (int l = 0; l < 16; l++) {
                const int v = clampi((int)lroundf(x[16 * k + l] * id), -127, 127);
                b[i].qs[16 * k + l] = (int8_t)v;
                sum += v;
            }
            b[i].bsums[k] = (int16_t)sum;
        }
    }
}
