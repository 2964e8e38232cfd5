/* AVX2/FMA/F16C attention leaves over runs of KV rows (twins of
 * ref/ref_kvq.c) for f32, f16, q8_0, q8_64, q4_0 and iq4_nl pages.
 *
 * q . k: f32/f16 rows repeat dot_f32/dot_f16 of avx2.c exactly (two
 * 8-lane accumulators over 16-element steps); q8_0/q4_0 rows take the
 * q8_0-quantized query, form each block's exact int32 sum with
 * maddubs/madd and accumulate d_k*d_q*sum in 8 float lanes, so they differ
 * from the reference only by float summation order.
 * v accumulation: dims outer, rows inner, with 32 accumulator lanes in
 * registers; each element does acc = fma(w[r]*d, code, acc) in row order
 * (f32/f16: fma(w[r], x, acc), the same as axpy_f32/axpy_f16), so the
 * result equals n single-row calls and differs from the reference only by
 * the fused multiply-add.  Quantized pages are never expanded to memory.
 */
#include <math.h>

#include "kernels/x86/avx2-impl.h"

#define ROW(base, r, stride) ((const uint8_t *)(base) + (size_t)(r) * (stride))

static inline float rl__h2f(rl_fp16 h) {
    return _cvtsh_ss(h);
}

/* q8_0 (qk = 32) and q8_64 (qk = 64) rows: blocks of an fp16 scale and qk
 * int8 codes.  Scale and codes of page block pb of a row: */
static inline float rl__q8_d(const uint8_t *row, int pb, int qk) {
    return rl__h2f(*(const rl_fp16 *)(const void *)(row + (size_t)pb * (size_t)(2 + qk)));
}
static inline const int8_t *rl__q8_qs(const uint8_t *row, int pb, int qk) {
    return (const int8_t *)(row + (size_t)pb * (size_t)(2 + qk) + 2);
}

/* Per page block: its scale read once, then each of its 32-element parts
 * against query block pb * (qk/32) + part. */
static inline __attribute__((always_inline)) void
rl__kq_q8(const void *q, const void *k, size_t stride, int n, int hd, float *s, int qk) {
    const rl_block_q8_0 *x = q;
    const int per = qk / RL_QK8_0;
    for (int r = 0; r < n; r++) {
        const uint8_t *row = ROW(k, r, stride);
        __m256 acc = _mm256_setzero_ps();
        for (int pb = 0; pb < hd / qk; pb++) {
            const float dk = rl__q8_d(row, pb, qk);
            const int8_t *c = rl__q8_qs(row, pb, qk);
            for (int p = 0; p < per; p++) {
                const rl_block_q8_0 *xb = &x[pb * per + p];
                __m256 d = _mm256_set1_ps(dk * rl__h2f(xb->d));
                __m256i qw = _mm256_loadu_si256((const __m256i *)(c + p * RL_QK8_0));
                __m256i qx = _mm256_loadu_si256((const __m256i *)xb->qs);
                acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(rl__mul_sum_i8(qw, qx)), acc);
            }
        }
        s[r] = rl__hsum_ps(acc);
    }
}

static void rl__kq_q8_0_avx2(const void *q, const void *k, size_t stride, int n, int hd, float *s) {
    rl__kq_q8(q, k, stride, n, hd, s, RL_QK8_0);
}
static void rl__kq_q8_64_avx2(const void *q, const void *k, size_t stride, int n, int hd,
                              float *s) {
    rl__kq_q8(q, k, stride, n, hd, s, RL_QK8_64);
}

static void rl__kq_q4_0_avx2(const void *q, const void *k, size_t stride, int n, int hd, float *s) {
    const rl_block_q8_0 *x = q;
    const int nb = hd / RL_QK4_0;
    const __m256i off = _mm256_set1_epi8(8);
    for (int r = 0; r < n; r++) {
        const rl_block_q4_0 *w = (const rl_block_q4_0 *)ROW(k, r, stride);
        __m256 acc = _mm256_setzero_ps();
        for (int b = 0; b < nb; b++) {
            __m256 d = _mm256_set1_ps(rl__h2f(w[b].d) * rl__h2f(x[b].d));
            __m256i qw = _mm256_sub_epi8(rl__nibbles32(w[b].qs), off);
            __m256i qx = _mm256_loadu_si256((const __m256i *)x[b].qs);
            acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(rl__mul_sum_i8(qw, qx)), acc);
        }
        s[r] = rl__hsum_ps(acc);
    }
}

/* 8 int8 at p -> 8 float lanes. */
static inline __m256 rl__i8x8_ps(__m128i v) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v));
}

/* a0..a3 += wd * the 32 int8 codes lo (0..15) and hi (16..31) as floats:
 * the V-row accumulation step shared by the q8_0, q4_0 and iq4_nl leaves. */
static inline __attribute__((always_inline)) void
rl__fma_codes32(__m256 wd, __m128i lo, __m128i hi, __m256 *a0, __m256 *a1, __m256 *a2, __m256 *a3) {
    *a0 = _mm256_fmadd_ps(wd, rl__i8x8_ps(lo), *a0);
    *a1 = _mm256_fmadd_ps(wd, rl__i8x8_ps(_mm_unpackhi_epi64(lo, lo)), *a1);
    *a2 = _mm256_fmadd_ps(wd, rl__i8x8_ps(hi), *a2);
    *a3 = _mm256_fmadd_ps(wd, rl__i8x8_ps(_mm_unpackhi_epi64(hi, hi)), *a3);
}

static inline __m256 rl__ld_f32(const float *p) {
    return _mm256_loadu_ps(p);
}
static inline __m256 rl__ld_f16(const rl_fp16 *p) {
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}
static inline float rl__f32_at(const float *p) {
    return *p;
}
static inline float rl__f16_at(const rl_fp16 *p) {
    return _cvtsh_ss(*p);
}

/* acc[0..hd) += sum_r w[r] * V[r][0..hd) for float rows of type T, loaded 8 at a time by LD and
 * one at a time (the tail) by AT: 32 columns in four registers over all rows, then 8, then 1. */
#define RL_V_FLOAT_AVX2(NAME, T, LD, AT)                                                           \
    static void NAME(float *acc, const void *v, size_t stride, const float *w, int n, int hd) {    \
        int i = 0;                                                                                 \
        for (; i + 32 <= hd; i += 32) {                                                            \
            __m256 a0 = _mm256_loadu_ps(acc + i), a1 = _mm256_loadu_ps(acc + i + 8);               \
            __m256 a2 = _mm256_loadu_ps(acc + i + 16), a3 = _mm256_loadu_ps(acc + i + 24);         \
            for (int r = 0; r < n; r++) {                                                          \
                const T *x = (const T *)ROW(v, r, stride) + i;                                     \
                __m256 wr = _mm256_set1_ps(w[r]);                                                  \
                a0 = _mm256_fmadd_ps(wr, LD(x), a0);                                               \
                a1 = _mm256_fmadd_ps(wr, LD(x + 8), a1);                                           \
                a2 = _mm256_fmadd_ps(wr, LD(x + 16), a2);                                          \
                a3 = _mm256_fmadd_ps(wr, LD(x + 24), a3);                                          \
            }                                                                                      \
            _mm256_storeu_ps(acc + i, a0);                                                         \
            _mm256_storeu_ps(acc + i + 8, a1);                                                     \
            _mm256_storeu_ps(acc + i + 16, a2);                                                    \
            _mm256_storeu_ps(acc + i + 24, a3);                                                    \
        }                                                                                          \
        for (; i + 8 <= hd; i += 8) {                                                              \
            __m256 a0 = _mm256_loadu_ps(acc + i);                                                  \
            for (int r = 0; r < n; r++)                                                            \
                a0 = _mm256_fmadd_ps(_mm256_set1_ps(w[r]), LD((const T *)ROW(v, r, stride) + i),   \
                                     a0);                                                          \
            _mm256_storeu_ps(acc + i, a0);                                                         \
        }                                                                                          \
        for (; i < hd; i++)                                                                        \
            for (int r = 0; r < n; r++) acc[i] += w[r] * AT((const T *)ROW(v, r, stride) + i);     \
    }

RL_V_FLOAT_AVX2(rl__v_f32_avx2, float, rl__ld_f32, rl__f32_at)
RL_V_FLOAT_AVX2(rl__v_f16_avx2, rl_fp16, rl__ld_f16, rl__f16_at)

/* lane i = rl__hsum_ps(a_i), for 8 vectors at once: the same additions
 * (lanes l + l+4, then + l+2, then + l+1), transposed, so the same bits.
 * Halves paired as (a0,a4), (a1,a5), ...; then pairs within 128 bits. */
static inline __m256 rl__hsum8_ps(__m256 a0, __m256 a1, __m256 a2, __m256 a3, __m256 a4, __m256 a5,
                                  __m256 a6, __m256 a7) {
#define RL_H4(x, y)                                                                                \
    _mm256_add_ps(_mm256_permute2f128_ps(x, y, 0x20), _mm256_permute2f128_ps(x, y, 0x31))
#define RL_H2(x, y, lo, hi) _mm256_add_ps(_mm256_shuffle_ps(x, y, lo), _mm256_shuffle_ps(x, y, hi))
    /* c0 = [a0: l+l4 for l < 4 | a4: ...], c1 = [a1 | a5], c2 = [a2 | a6], c3 = [a3 | a7] */
    __m256 c0 = RL_H4(a0, a4), c1 = RL_H4(a1, a5), c2 = RL_H4(a2, a6), c3 = RL_H4(a3, a7);
    /* e = [a0: +l2, a1: +l2 | a4, a5], f = [a2, a3 | a6, a7] (two lanes each) */
    __m256 e = RL_H2(c0, c1, 0x44, 0xEE), f = RL_H2(c2, c3, 0x44, 0xEE);
    return RL_H2(e, f, 0x88, 0xDD); /* + l1: [a0, a1, a2, a3 | a4, a5, a6, a7] */
#undef RL_H4
#undef RL_H2
}

/* Scores of G heads x KR keys (lane j * KR + key, rl__hsum8_ps) into s:
 * head j's keys r.. at s + j * ss + r. */
static inline __attribute__((always_inline)) void
rl__kq_store8(float *s, size_t ss, int r, __m256 h, const int G, const int KR) {
    if (KR == 8) {
        _mm256_storeu_ps(s + r, h);
    } else if (KR == 4) {
        _mm_storeu_ps(s + r, _mm256_castps256_ps128(h));
        if (G > 1) _mm_storeu_ps(s + ss + r, _mm256_extractf128_ps(h, 1));
    } else {
        const __m128 lo = _mm256_castps256_ps128(h), hi = _mm256_extractf128_ps(h, 1);
        _mm_storel_pi((__m64 *)(void *)(s + r), lo);
        if (G > 1) _mm_storeh_pi((__m64 *)(void *)(s + ss + r), lo);
        if (G > 2) _mm_storel_pi((__m64 *)(void *)(s + 2 * ss + r), hi);
        if (G > 3) _mm_storeh_pi((__m64 *)(void *)(s + 3 * ss + r), hi);
    }
}

/* Grouped leaves (kq_rows_g, v_rows_g): up to 4 heads per pass over the
 * rows, each row loaded and widened once for them; per head the one-head
 * leaves' operations exactly (kq: the two 16-step accumulators, the 8-step
 * and scalar tails; v: each element's fma chain in row order, which does
 * not depend on how columns are blocked; the scalar tail unfused, as
 * there).
 * kq, hd a multiple of 8: G heads against KB key rows at once (each query
 * and key chunk loaded once for the G x KB scores' accumulator pairs, 12
 * at most), NP such passes, and the 8 scores' horizontal sums together
 * (rl__hsum8_ps; lane j * NP * KB + key: a head's keys side by side).
 * Heads go 3 at a time (2 key rows a pass), a last 4, 2 or 1 as 4 x 1
 * x 2, 2 x 2 x 2, 1 x 4 x 2; leftover keys and other hd one at a time.
 * The one-head kq_rows is the heads-of-1 pass. */
/* One 8-element chunk at i of NAME##_P into its accumulators acc: each
 * query chunk loaded once for the KB key rows b[]. */
#define RL_KQ_STEP(acc, i, LD)                                                                     \
    do {                                                                                           \
        __m256 kb[4];                                                                              \
        _Pragma("GCC unroll 4") for (int u = 0; u < KB; u++) kb[u] = LD(b[u] + (i));               \
        _Pragma("GCC unroll 4") for (int j = 0; j < G; j++) {                                      \
            const __m256 x = _mm256_loadu_ps(q + j * hd + (i));                                    \
            _Pragma("GCC unroll 4") for (int u = 0; u < KB; u++) acc[j * KB + u] =                 \
                _mm256_fmadd_ps(x, kb[u], acc[j * KB + u]);                                        \
        }                                                                                          \
    } while (0)

#define RL_KQ_G_AVX2(NAME, T, LD, AT)                                                              \
    /* v[j * KB + u] = s0 + s1 of head j against row r + u (before the horizontal sum) */          \
    static inline __attribute__((always_inline)) void NAME##_P(                                    \
        const float *q, const void *k, size_t stride, int r, int hd, __m256 *v, const int G,       \
        const int KB) {                                                                            \
        __m256 s0[12], s1[12];                                                                     \
        const T *b[4];                                                                             \
        _Pragma("GCC unroll 4") for (int u = 0; u < KB; u++) b[u] =                                \
            (const T *)ROW(k, r + u, stride);                                                      \
        _Pragma("GCC unroll 12") for (int l = 0; l < G * KB; l++) s0[l] = s1[l] =                  \
            _mm256_setzero_ps();                                                                   \
        int i = 0;                                                                                 \
        for (; i + 16 <= hd; i += 16) {                                                            \
            RL_KQ_STEP(s0, i, LD);                                                                 \
            RL_KQ_STEP(s1, i + 8, LD);                                                             \
        }                                                                                          \
        if (i + 8 <= hd) RL_KQ_STEP(s0, i, LD);                                                    \
        _Pragma("GCC unroll 12") for (int l = 0; l < G * KB; l++) v[l] =                           \
            _mm256_add_ps(s0[l], s1[l]);                                                           \
    }                                                                                              \
    /* G heads from q against rows r0..n-1, NP x KB rows a horizontal sum */                       \
    static inline __attribute__((always_inline)) int NAME##_B(                                     \
        const float *q, const void *k, size_t stride, int r, int n, int hd, float *s, size_t ss,   \
        const int G, const int KB, const int NP) {                                                 \
        const int KR = NP * KB; /* keys a head per sum: 2, 4 or 8 */                               \
        for (; r + KR <= n; r += KR) {                                                             \
            __m256 v[8], t[12];                                                                    \
            _Pragma("GCC unroll 2") for (int p = 0; p < NP; p++) {                                 \
                NAME##_P(q, k, stride, r + p * KB, hd, t, G, KB);                                  \
                _Pragma("GCC unroll 4") for (int j = 0; j < G; j++)                                \
                    _Pragma("GCC unroll 4") for (int u = 0; u < KB; u++) v[j * KR + p * KB + u] =  \
                        t[j * KB + u];                                                             \
            }                                                                                      \
            _Pragma("GCC unroll 8") for (int l = G * KR; l < 8; l++) v[l] = _mm256_setzero_ps();   \
            const __m256 h = rl__hsum8_ps(v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]);         \
            rl__kq_store8(s, ss, r, h, G, KR);                                                     \
        }                                                                                          \
        return r;                                                                                  \
    }                                                                                              \
    /* G heads, one key row at a time from r (any hd: the 8-step and scalar tails) */              \
    static inline __attribute__((always_inline)) void NAME##_1(                                    \
        const float *q, const void *k, size_t stride, int r, int n, int hd, float *s, size_t ss,   \
        const int G) {                                                                             \
        for (; r < n; r++) {                                                                       \
            const T *b = (const T *)ROW(k, r, stride);                                             \
            __m256 s0[4], s1[4];                                                                   \
            _Pragma("GCC unroll 4") for (int j = 0; j < G; j++) s0[j] = s1[j] =                    \
                _mm256_setzero_ps();                                                               \
            int i = 0;                                                                             \
            for (; i + 16 <= hd; i += 16) {                                                        \
                const __m256 b0 = LD(b + i), b1 = LD(b + i + 8);                                   \
                _Pragma("GCC unroll 4") for (int j = 0; j < G; j++) {                              \
                    s0[j] = _mm256_fmadd_ps(_mm256_loadu_ps(q + j * hd + i), b0, s0[j]);           \
                    s1[j] = _mm256_fmadd_ps(_mm256_loadu_ps(q + j * hd + i + 8), b1, s1[j]);       \
                }                                                                                  \
            }                                                                                      \
            for (; i + 8 <= hd; i += 8) {                                                          \
                const __m256 b0 = LD(b + i);                                                       \
                _Pragma("GCC unroll 4") for (int j = 0; j < G; j++) s0[j] =                        \
                    _mm256_fmadd_ps(_mm256_loadu_ps(q + j * hd + i), b0, s0[j]);                   \
            }                                                                                      \
            _Pragma("GCC unroll 4") for (int j = 0; j < G; j++) {                                  \
                float acc = rl__hsum_ps(_mm256_add_ps(s0[j], s1[j]));                              \
                for (int e = i; e < hd; e++) acc += q[j * hd + e] * AT(b + e);                     \
                s[(size_t)j * ss + r] = acc;                                                       \
            }                                                                                      \
        }                                                                                          \
    }                                                                                              \
    static inline __attribute__((always_inline)) void NAME##_G(                                    \
        const float *q, const void *k, size_t stride, int n, int hd, float *s, size_t ss,          \
        const int G, const int KB, const int NP) {                                                 \
        const int r = hd % 8 ? 0 : NAME##_B(q, k, stride, 0, n, hd, s, ss, G, KB, NP);             \
        NAME##_1(q, k, stride, r, n, hd, s, ss, G);                                                \
    }                                                                                              \
    static void NAME(const float *q, const void *k, size_t stride, int n, int hd, int g, float *s, \
                     size_t ss) {                                                                  \
        for (int j0 = 0; j0 < g;) {                                                                \
            const float *qj = q + (size_t)j0 * hd;                                                 \
            float *sj = s + (size_t)j0 * ss;                                                       \
            switch (g - j0) {                                                                      \
            case 1:                                                                                \
                NAME##_G(qj, k, stride, n, hd, sj, ss, 1, 4, 2);                                   \
                j0 += 1;                                                                           \
                break;                                                                             \
            case 2:                                                                                \
                NAME##_G(qj, k, stride, n, hd, sj, ss, 2, 2, 2);                                   \
                j0 += 2;                                                                           \
                break;                                                                             \
            case 4:                                                                                \
                NAME##_G(qj, k, stride, n, hd, sj, ss, 4, 1, 2);                                   \
                j0 += 4;                                                                           \
                break;                                                                             \
            default:                                                                               \
                NAME##_G(qj, k, stride, n, hd, sj, ss, 3, 2, 1);                                   \
                j0 += 3;                                                                           \
                break;                                                                             \
            }                                                                                      \
        }                                                                                          \
    }

#define RL_V_G_AVX2(NAME, T, LD, AT)                                                               \
    static inline __attribute__((always_inline)) void NAME##_G(                                    \
        float *acc, const void *v, size_t stride, const float *w, size_t ws, int n, int hd,        \
        const int G) {                                                                             \
        const int NC = G == 4 ? 2 : 4; /* 8-column vectors a pass: 8 or 12 accumulators */         \
        int i = 0;                                                                                 \
        for (; i + 8 * NC <= hd; i += 8 * NC) {                                                    \
            __m256 a[4][4];                                                                        \
            _Pragma("GCC unroll 4") for (int j = 0; j < G; j++)                                    \
                _Pragma("GCC unroll 4") for (int c = 0; c < NC; c++) a[j][c] =                     \
                    _mm256_loadu_ps(acc + j * hd + i + 8 * c);                                     \
            for (int r = 0; r < n; r++) {                                                          \
                const T *x = (const T *)ROW(v, r, stride) + i;                                     \
                __m256 wr[4]; /* G weights, then one column vector at a time: 16 registers */      \
                _Pragma("GCC unroll 4") for (int j = 0; j < G; j++) wr[j] =                        \
                    _mm256_broadcast_ss(w + (size_t)j * ws + r);                                   \
                _Pragma("GCC unroll 4") for (int c = 0; c < NC; c++) {                             \
                    const __m256 xv = LD(x + 8 * c);                                               \
                    _Pragma("GCC unroll 4") for (int j = 0; j < G; j++) a[j][c] =                  \
                        _mm256_fmadd_ps(wr[j], xv, a[j][c]);                                       \
                }                                                                                  \
            }                                                                                      \
            _Pragma("GCC unroll 4") for (int j = 0; j < G; j++)                                    \
                _Pragma("GCC unroll 4") for (int c = 0; c < NC; c++)                               \
                    _mm256_storeu_ps(acc + j * hd + i + 8 * c, a[j][c]);                           \
        }                                                                                          \
        for (; i + 8 <= hd; i += 8) {                                                              \
            __m256 a0[4];                                                                          \
            _Pragma("GCC unroll 4") for (int j = 0; j < G; j++) a0[j] =                            \
                _mm256_loadu_ps(acc + j * hd + i);                                                 \
            for (int r = 0; r < n; r++) {                                                          \
                const __m256 v0 = LD((const T *)ROW(v, r, stride) + i);                            \
                _Pragma("GCC unroll 4") for (int j = 0; j < G; j++) a0[j] =                        \
                    _mm256_fmadd_ps(_mm256_broadcast_ss(w + (size_t)j * ws + r), v0, a0[j]);       \
            }                                                                                      \
            _Pragma("GCC unroll 4") for (int j = 0; j < G; j++)                                    \
                _mm256_storeu_ps(acc + j * hd + i, a0[j]);                                         \
        }                                                                                          \
        for (; i < hd; i++)                                                                        \
            for (int j = 0; j < G; j++)                                                            \
                for (int r = 0; r < n; r++)                                                        \
                    acc[j * hd + i] +=                                                             \
                        w[(size_t)j * ws + r] * AT((const T *)ROW(v, r, stride) + i);              \
    }                                                                                              \
    static void NAME(float *acc, const void *v, size_t stride, const float *w, size_t ws, int n,   \
                     int hd, int g) {                                                              \
        for (int j0 = 0; j0 < g; j0 += 4) {                                                        \
            float *aj = acc + (size_t)j0 * hd;                                                     \
            const float *wj = w + (size_t)j0 * ws;                                                 \
            switch (g - j0) {                                                                      \
            case 1:                                                                                \
                NAME##_G(aj, v, stride, wj, ws, n, hd, 1);                                         \
                break;                                                                             \
            case 2:                                                                                \
                NAME##_G(aj, v, stride, wj, ws, n, hd, 2);                                         \
                break;                                                                             \
            case 3:                                                                                \
                NAME##_G(aj, v, stride, wj, ws, n, hd, 3);                                         \
                break;                                                                             \
            default:                                                                               \
                NAME##_G(aj, v, stride, wj, ws, n, hd, 4);                                         \
                break;                                                                             \
            }                                                                                      \
        }                                                                                          \
    }

RL_KQ_G_AVX2(rl__kq_f32_g_avx2, float, rl__ld_f32, rl__f32_at)
RL_KQ_G_AVX2(rl__kq_f16_g_avx2, rl_fp16, rl__ld_f16, rl__f16_at)

/* The one-head leaves: the G = 1 pass (8 key rows to a horizontal sum). */
static void rl__kq_f32_avx2(const void *q, const void *k, size_t stride, int n, int hd, float *s) {
    rl__kq_f32_g_avx2_G(q, k, stride, n, hd, s, 0, 1, 4, 2);
}
static void rl__kq_f16_avx2(const void *q, const void *k, size_t stride, int n, int hd, float *s) {
    rl__kq_f16_g_avx2_G(q, k, stride, n, hd, s, 0, 1, 4, 2);
}
RL_V_G_AVX2(rl__v_f32_g_avx2, float, rl__ld_f32, rl__f32_at)
RL_V_G_AVX2(rl__v_f16_g_avx2, rl_fp16, rl__ld_f16, rl__f16_at)

/* Per page block: qk/8 accumulators in registers over all rows; each row's
 * w[r] * d once for the block. */
static inline __attribute__((always_inline)) void rl__v_q8(float *acc, const void *v, size_t stride,
                                                           const float *w, int n, int hd, int qk) {
    const int per = qk / RL_QK8_0;
    for (int pb = 0; pb < hd / qk; pb++) {
        float *y = acc + pb * qk;
        __m256 a[RL_QK8_64 / 8];
        for (int i = 0; i < qk / 8; i++) a[i] = _mm256_loadu_ps(y + 8 * i);
        for (int r = 0; r < n; r++) {
            const uint8_t *row = ROW(v, r, stride);
            __m256 wd = _mm256_set1_ps(w[r] * rl__q8_d(row, pb, qk));
            const int8_t *c = rl__q8_qs(row, pb, qk);
            for (int p = 0; p < per; p++) {
                __m256i q = _mm256_loadu_si256((const __m256i *)(c + p * RL_QK8_0));
                __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
                rl__fma_codes32(wd, lo, hi, &a[4 * p], &a[4 * p + 1], &a[4 * p + 2], &a[4 * p + 3]);
            }
        }
        for (int i = 0; i < qk / 8; i++) _mm256_storeu_ps(y + 8 * i, a[i]);
    }
}

static void rl__v_q8_0_avx2(float *acc, const void *v, size_t stride, const float *w, int n,
                            int hd) {
    rl__v_q8(acc, v, stride, w, n, hd, RL_QK8_0);
}
static void rl__v_q8_64_avx2(float *acc, const void *v, size_t stride, const float *w, int n,
                             int hd) {
    rl__v_q8(acc, v, stride, w, n, hd, RL_QK8_64);
}

/* 32-element block b of a quantized K/V page row for the grouped leaves:
 * its scale and its 32 signed codes (q8_0 and q8_64 with qk = 32 / 64: a
 * part of page block b / (qk / 32); q4_0 with qk = 0: the nibbles - 8;
 * iq4_nl with qk = -1: the nibbles' codebook values), the values the
 * one-head leaves compute with. */
static inline __m128i rl__iq4nl_tbl(void); /* the iq4_nl leaves' codebook, below */
static inline float rl__blk_d(const uint8_t *row, int b, int qk) {
    return qk > 0 ? rl__q8_d(row, b / (qk / RL_QK8_0), qk)
                  : rl__h2f(((const rl_block_q4_0 *)(const void *)row)[b].d);
}
static inline __m256i rl__blk_codes(const uint8_t *row, int b, int qk) {
    if (qk <= 0) {
        const __m256i nib = rl__nibbles32(((const rl_block_q4_0 *)(const void *)row)[b].qs);
        return qk == 0 ? _mm256_sub_epi8(nib, _mm256_set1_epi8(8))
                       : _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(rl__iq4nl_tbl()), nib);
    }
    return _mm256_loadu_si256((const __m256i *)(rl__q8_qs(row, b / (qk / RL_QK8_0), qk) +
                                                (b % (qk / RL_QK8_0)) * RL_QK8_0));
}

/* The grouped V leaf of the quantized pages (v_rows_g; qk as in
 * rl__blk_codes): up to 3 heads a pass, 32 columns at a time (12
 * accumulators), each row's scale read and codes widened once for them;
 * per element the one-head leaf's chain, acc = fma(w[r] * d, code, acc)
 * in row order: the same bits. */
static inline __attribute__((always_inline)) void rl__v_q8_G(float *acc, const void *v,
                                                             size_t stride, const float *w,
                                                             size_t ws, int n, int hd, int qk,
                                                             const int G) {
    for (int c0 = 0; c0 < hd; c0 += RL_QK8_0) {
        __m256 a[3][4];
        _Pragma("GCC unroll 3") for (int j = 0; j < G; j++)
            _Pragma("GCC unroll 4") for (int i = 0; i < 4; i++) a[j][i] =
                _mm256_loadu_ps(acc + (size_t)j * hd + c0 + 8 * i);
        for (int r = 0; r < n; r++) {
            const uint8_t *row = ROW(v, r, stride);
            const float d = rl__blk_d(row, c0 / RL_QK8_0, qk);
            __m256 wd[3];
            _Pragma("GCC unroll 3") for (int j = 0; j < G; j++) wd[j] =
                _mm256_set1_ps(w[(size_t)j * ws + r] * d);
            const __m256i codes = rl__blk_codes(row, c0 / RL_QK8_0, qk);
            const __m128i lo = _mm256_castsi256_si128(codes),
                          hi = _mm256_extracti128_si256(codes, 1);
            _Pragma("GCC unroll 4") for (int i = 0; i < 4; i++) {
                const __m128i h = i < 2 ? lo : hi;
                const __m256 x = rl__i8x8_ps(i % 2 ? _mm_unpackhi_epi64(h, h) : h);
                _Pragma("GCC unroll 3") for (int j = 0; j < G; j++) a[j][i] =
                    _mm256_fmadd_ps(wd[j], x, a[j][i]);
            }
        }
        _Pragma("GCC unroll 3") for (int j = 0; j < G; j++)
            _Pragma("GCC unroll 4") for (int i = 0; i < 4; i++)
                _mm256_storeu_ps(acc + (size_t)j * hd + c0 + 8 * i, a[j][i]);
    }
}
#define RL_V_Q8_G_AVX2(NAME, QK)                                                                   \
    static void NAME(float *acc, const void *v, size_t stride, const float *w, size_t ws, int n,   \
                     int hd, int g) {                                                              \
        for (int j0 = 0; j0 < g; j0 += 3) {                                                        \
            float *aj = acc + (size_t)j0 * hd;                                                     \
            const float *wj = w + (size_t)j0 * ws;                                                 \
            if (g - j0 >= 3)                                                                       \
                rl__v_q8_G(aj, v, stride, wj, ws, n, hd, QK, 3);                                   \
            else if (g - j0 == 2)                                                                  \
                rl__v_q8_G(aj, v, stride, wj, ws, n, hd, QK, 2);                                   \
            else                                                                                   \
                rl__v_q8_G(aj, v, stride, wj, ws, n, hd, QK, 1);                                   \
        }                                                                                          \
    }
RL_V_Q8_G_AVX2(rl__v_q8_0_g_avx2, RL_QK8_0)
RL_V_Q8_G_AVX2(rl__v_q8_64_g_avx2, RL_QK8_64)
RL_V_Q8_G_AVX2(rl__v_q4_0_g_avx2, 0)
RL_V_Q8_G_AVX2(rl__v_iq4_nl_g_avx2, -1)

/* The grouped KQ leaf of the quantized pages (kqq_rows_g; qk as in
 * rl__blk_codes): G query rows against KB key rows at once (each key
 * block loaded once for G heads, each query block once for KB keys), the 8 scores' horizontal sums
 * together (rl__hsum8_ps; lane j * KB + u).  Per score the one-head leaf's steps: per 32-element
 * block the exact int32 sum, acc = fma(d_k * d_q, sum, acc) in block order, then rl__hsum_ps: the
 * same bits. */
static inline __attribute__((always_inline)) void rl__kqq_q8_P(const rl_block_q8_0 *x,
                                                               const void *k, size_t stride, int r,
                                                               int hd, int qk, __m256 *v,
                                                               const int G, const int KB) {
    const int nb = hd / RL_QK8_0;
    __m256 acc[8];
    _Pragma("GCC unroll 8") for (int l = 0; l < G * KB; l++) acc[l] = _mm256_setzero_ps();
    for (int b = 0; b < nb; b++) {
        __m256i kw[4], ax[4];
        float dk[4];
        _Pragma("GCC unroll 4") for (int u = 0; u < KB; u++) {
            const uint8_t *row = ROW(k, r + u, stride);
            dk[u] = rl__blk_d(row, b, qk);
            kw[u] = rl__blk_codes(row, b, qk);
            ax[u] = _mm256_sign_epi8(kw[u], kw[u]);
        }
        _Pragma("GCC unroll 4") for (int j = 0; j < G; j++) {
            const rl_block_q8_0 *xb = &x[(size_t)j * nb + b];
            const float dq = rl__h2f(xb->d);
            const __m256i qx = _mm256_loadu_si256((const __m256i *)xb->qs);
            _Pragma("GCC unroll 4") for (int u = 0; u < KB; u++) {
                const __m256i p = _mm256_madd_epi16(
                    _mm256_maddubs_epi16(ax[u], _mm256_sign_epi8(qx, kw[u])), _mm256_set1_epi16(1));
                acc[j * KB + u] = _mm256_fmadd_ps(_mm256_set1_ps(dk[u] * dq), _mm256_cvtepi32_ps(p),
                                                  acc[j * KB + u]);
            }
        }
    }
    _Pragma("GCC unroll 8") for (int l = 0; l < G * KB; l++) v[l] = acc[l];
}
static inline __attribute__((always_inline)) void rl__kqq_q8_G(const rl_block_q8_0 *x,
                                                               const void *k, size_t stride, int n,
                                                               int hd, int qk, float *s, size_t ss,
                                                               const int G) {
    const int KB = G == 1 ? 8 : G == 2 ? 4 : 2; /* key rows a horizontal sum */
    int r = 0;
    for (; r + KB <= n; r += KB) {
        __m256 v[8];
        rl__kqq_q8_P(x, k, stride, r, hd, qk, v, G, KB);
        _Pragma("GCC unroll 8") for (int l = G * KB; l < 8; l++) v[l] = _mm256_setzero_ps();
        const __m256 h = rl__hsum8_ps(v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]);
        rl__kq_store8(s, ss, r, h, G, KB);
    }
    for (; r < n; r++) {
        __m256 v[4];
        rl__kqq_q8_P(x, k, stride, r, hd, qk, v, G, 1);
        _Pragma("GCC unroll 4") for (int j = 0; j < G; j++) s[(size_t)j * ss + r] =
            rl__hsum_ps(v[j]);
    }
}
#define RL_KQQ_Q8_G_AVX2(NAME, QK)                                                                 \
    static void NAME(const rl_block_q8_0 *q, const void *k, size_t stride, int n, int hd, int g,   \
                     float *s, size_t ss) {                                                        \
        for (int j0 = 0; j0 < g;) {                                                                \
            const rl_block_q8_0 *qj = q + (size_t)j0 * (hd / RL_QK8_0);                            \
            float *sj = s + (size_t)j0 * ss;                                                       \
            const int G = g - j0 >= 4 ? 4 : g - j0;                                                \
            if (G == 4)                                                                            \
                rl__kqq_q8_G(qj, k, stride, n, hd, QK, sj, ss, 4);                                 \
            else if (G == 3)                                                                       \
                rl__kqq_q8_G(qj, k, stride, n, hd, QK, sj, ss, 3);                                 \
            else if (G == 2)                                                                       \
                rl__kqq_q8_G(qj, k, stride, n, hd, QK, sj, ss, 2);                                 \
            else                                                                                   \
                rl__kqq_q8_G(qj, k, stride, n, hd, QK, sj, ss, 1);                                 \
            j0 += G;                                                                               \
        }                                                                                          \
    }
RL_KQQ_Q8_G_AVX2(rl__kqq_q8_0_g_avx2, RL_QK8_0)
RL_KQQ_Q8_G_AVX2(rl__kqq_q8_64_g_avx2, RL_QK8_64)
RL_KQQ_Q8_G_AVX2(rl__kqq_q4_0_g_avx2, 0)
RL_KQQ_Q8_G_AVX2(rl__kqq_iq4_nl_g_avx2, -1)

static void rl__v_q4_0_avx2(float *acc, const void *v, size_t stride, const float *w, int n,
                            int hd) {
    const __m128i m4 = _mm_set1_epi8(0x0F), off = _mm_set1_epi8(8);
    for (int b = 0; b < hd / RL_QK4_0; b++) {
        float *y = acc + b * RL_QK4_0;
        __m256 a0 = _mm256_loadu_ps(y), a1 = _mm256_loadu_ps(y + 8);
        __m256 a2 = _mm256_loadu_ps(y + 16), a3 = _mm256_loadu_ps(y + 24);
        for (int r = 0; r < n; r++) {
            const rl_block_q4_0 *x = (const rl_block_q4_0 *)ROW(v, r, stride) + b;
            __m256 wd = _mm256_set1_ps(w[r] * rl__h2f(x->d));
            __m128i t = _mm_loadu_si128((const __m128i *)x->qs);
            __m128i lo = _mm_sub_epi8(_mm_and_si128(t, m4), off); /* elems 0..15 */
            __m128i hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(t, 4), m4), off); /* 16..31 */
            rl__fma_codes32(wd, lo, hi, &a0, &a1, &a2, &a3);
        }
        _mm256_storeu_ps(y, a0);
        _mm256_storeu_ps(y + 8, a1);
        _mm256_storeu_ps(y + 16, a2);
        _mm256_storeu_ps(y + 24, a3);
    }
}

/* Float-query variants: q stays f32, K codes are widened to float in
 * registers; per block sum_i q_i*code_i in 8 lanes, then acc += d * that. */
static inline __m256 rl__blk_dot_f(const float *q, __m128i c0, __m128i c1, __m128i c2, __m128i c3) {
    __m256 t = _mm256_mul_ps(_mm256_loadu_ps(q), rl__i8x8_ps(c0));
    t = _mm256_fmadd_ps(_mm256_loadu_ps(q + 8), rl__i8x8_ps(c1), t);
    t = _mm256_fmadd_ps(_mm256_loadu_ps(q + 16), rl__i8x8_ps(c2), t);
    return _mm256_fmadd_ps(_mm256_loadu_ps(q + 24), rl__i8x8_ps(c3), t);
}

static inline __attribute__((always_inline)) void
rl__kqf_q8(const void *vq, const void *k, size_t stride, int n, int hd, float *s, int qk) {
    const float *q = vq;
    const int per = qk / RL_QK8_0;
    for (int r = 0; r < n; r++) {
        const uint8_t *row = ROW(k, r, stride);
        __m256 acc = _mm256_setzero_ps();
        for (int b = 0; b < hd / RL_QK8_0; b++) {
            __m256i c =
                _mm256_loadu_si256((const __m256i *)(rl__q8_qs(row, b / per, qk) + (b % per) * 32));
            __m128i lo = _mm256_castsi256_si128(c), hi = _mm256_extracti128_si256(c, 1);
            __m256 t = rl__blk_dot_f(q + b * 32, lo, _mm_unpackhi_epi64(lo, lo), hi,
                                     _mm_unpackhi_epi64(hi, hi));
            acc = _mm256_fmadd_ps(_mm256_set1_ps(rl__q8_d(row, b / per, qk)), t, acc);
        }
        s[r] = rl__hsum_ps(acc);
    }
}

static void rl__kqf_q8_0_avx2(const void *vq, const void *k, size_t stride, int n, int hd,
                              float *s) {
    rl__kqf_q8(vq, k, stride, n, hd, s, RL_QK8_0);
}
static void rl__kqf_q8_64_avx2(const void *vq, const void *k, size_t stride, int n, int hd,
                               float *s) {
    rl__kqf_q8(vq, k, stride, n, hd, s, RL_QK8_64);
}

static void rl__kqf_q4_0_avx2(const void *vq, const void *k, size_t stride, int n, int hd,
                              float *s) {
    const float *q = vq;
    const __m128i m4 = _mm_set1_epi8(0x0F), off = _mm_set1_epi8(8);
    for (int r = 0; r < n; r++) {
        const rl_block_q4_0 *w = (const rl_block_q4_0 *)ROW(k, r, stride);
        __m256 acc = _mm256_setzero_ps();
        for (int b = 0; b < hd / RL_QK4_0; b++) {
            __m128i t = _mm_loadu_si128((const __m128i *)w[b].qs);
            __m128i lo = _mm_sub_epi8(_mm_and_si128(t, m4), off);
            __m128i hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(t, 4), m4), off);
            __m256 x = rl__blk_dot_f(q + b * 32, lo, _mm_unpackhi_epi64(lo, lo), hi,
                                     _mm_unpackhi_epi64(hi, hi));
            acc = _mm256_fmadd_ps(_mm256_set1_ps(rl__h2f(w[b].d)), x, acc);
        }
        s[r] = rl__hsum_ps(acc);
    }
}

/* iq4_nl pages: the 4-bit codes index the int8 codebook with one byte
 * shuffle (the table in both 128-bit lanes); then exactly the q8_0 paths. */
static inline __m128i rl__iq4nl_tbl(void) {
    return _mm_loadu_si128((const __m128i *)rl__iq4nl_values);
}

static void rl__kq_iq4_nl_avx2(const void *q, const void *k, size_t stride, int n, int hd,
                               float *s) {
    const rl_block_q8_0 *x = q;
    const int nb = hd / 32;
    const __m256i tbl = _mm256_broadcastsi128_si256(rl__iq4nl_tbl());
    for (int r = 0; r < n; r++) {
        const rl_block_q4_0 *w = (const rl_block_q4_0 *)ROW(k, r, stride);
        __m256 acc = _mm256_setzero_ps();
        for (int b = 0; b < nb; b++) {
            __m256 d = _mm256_set1_ps(rl__h2f(w[b].d) * rl__h2f(x[b].d));
            __m256i qw = _mm256_shuffle_epi8(tbl, rl__nibbles32(w[b].qs));
            __m256i qx = _mm256_loadu_si256((const __m256i *)x[b].qs);
            acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(rl__mul_sum_i8(qw, qx)), acc);
        }
        s[r] = rl__hsum_ps(acc);
    }
}

static void rl__kqf_iq4_nl_avx2(const void *vq, const void *k, size_t stride, int n, int hd,
                                float *s) {
    const float *q = vq;
    const __m128i m4 = _mm_set1_epi8(0x0F), tbl = rl__iq4nl_tbl();
    for (int r = 0; r < n; r++) {
        const rl_block_q4_0 *w = (const rl_block_q4_0 *)ROW(k, r, stride);
        __m256 acc = _mm256_setzero_ps();
        for (int b = 0; b < hd / 32; b++) {
            __m128i t = _mm_loadu_si128((const __m128i *)w[b].qs);
            __m128i lo = _mm_shuffle_epi8(tbl, _mm_and_si128(t, m4));
            __m128i hi = _mm_shuffle_epi8(tbl, _mm_and_si128(_mm_srli_epi16(t, 4), m4));
            __m256 x = rl__blk_dot_f(q + b * 32, lo, _mm_unpackhi_epi64(lo, lo), hi,
                                     _mm_unpackhi_epi64(hi, hi));
            acc = _mm256_fmadd_ps(_mm256_set1_ps(rl__h2f(w[b].d)), x, acc);
        }
        s[r] = rl__hsum_ps(acc);
    }
}

static void rl__v_iq4_nl_avx2(float *acc, const void *v, size_t stride, const float *w, int n,
                              int hd) {
    const __m128i m4 = _mm_set1_epi8(0x0F), tbl = rl__iq4nl_tbl();
    for (int b = 0; b < hd / 32; b++) {
        float *y = acc + b * 32;
        __m256 a0 = _mm256_loadu_ps(y), a1 = _mm256_loadu_ps(y + 8);
        __m256 a2 = _mm256_loadu_ps(y + 16), a3 = _mm256_loadu_ps(y + 24);
        for (int r = 0; r < n; r++) {
            const rl_block_q4_0 *x = (const rl_block_q4_0 *)ROW(v, r, stride) + b;
            __m256 wd = _mm256_set1_ps(w[r] * rl__h2f(x->d));
            __m128i t = _mm_loadu_si128((const __m128i *)x->qs);
            __m128i lo = _mm_shuffle_epi8(tbl, _mm_and_si128(t, m4)); /* elems 0..15 */
            __m128i hi =
                _mm_shuffle_epi8(tbl, _mm_and_si128(_mm_srli_epi16(t, 4), m4)); /* 16..31 */
            rl__fma_codes32(wd, lo, hi, &a0, &a1, &a2, &a3);
        }
        _mm256_storeu_ps(y, a0);
        _mm256_storeu_ps(y + 8, a1);
        _mm256_storeu_ps(y + 16, a2);
        _mm256_storeu_ps(y + 24, a3);
    }
}

/* Walsh-Hadamard transform, bit-identical to rl__wht_ref: the same
 * butterflies (x[j] = a + b, x[j+h] = a - b, a = x[j], b = x[j+h]) per
 * element, stage after stage, then x *= 1/sqrt(n).  Stages h = 1, 2, 4 run
 * inside one 8-lane register (partner lanes by permutes; a + b and b + a
 * are the same IEEE sum), h >= 8 on whole registers. */
static void rl__wht_avx2(float *x, int n) {
    if (n < 8) {
        rl__kernels_ref()->wht(x, n);
        return;
    }
    const __m256 odd1 = _mm256_castsi256_ps(_mm256_setr_epi32(0, -1, 0, -1, 0, -1, 0, -1));
    const __m256 odd2 = _mm256_castsi256_ps(_mm256_setr_epi32(0, 0, -1, -1, 0, 0, -1, -1));
    const __m256 odd4 = _mm256_castsi256_ps(_mm256_setr_epi32(0, 0, 0, 0, -1, -1, -1, -1));
    for (int i = 0; i < n; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i), s;
        s = _mm256_permute_ps(v, 0xB1); /* h = 1: lanes (0,1)(2,3).. swapped */
        v = _mm256_blendv_ps(_mm256_add_ps(v, s), _mm256_sub_ps(s, v), odd1);
        s = _mm256_permute_ps(v, 0x4E); /* h = 2 */
        v = _mm256_blendv_ps(_mm256_add_ps(v, s), _mm256_sub_ps(s, v), odd2);
        s = _mm256_permute2f128_ps(v, v, 1); /* h = 4 */
        v = _mm256_blendv_ps(_mm256_add_ps(v, s), _mm256_sub_ps(s, v), odd4);
        _mm256_storeu_ps(x + i, v);
    }
    for (int h = 8; h < n; h *= 2)
        for (int i = 0; i < n; i += 2 * h)
            for (int j = i; j < i + h; j += 8) {
                __m256 a = _mm256_loadu_ps(x + j), b = _mm256_loadu_ps(x + j + h);
                _mm256_storeu_ps(x + j, _mm256_add_ps(a, b));
                _mm256_storeu_ps(x + j + h, _mm256_sub_ps(a, b));
            }
    const __m256 c = _mm256_set1_ps(1.0f / sqrtf((float)n));
    for (int i = 0; i < n; i += 8)
        _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), c));
}

/* iq4_nl page quantizer, the twin of rl__quant_iq4_nl_kv: the 31 candidate
 * scales run 8 at a time, one lane each, and every lane does the scalar
 * code's float operations in the same order (nearest entry by counting
 * codebook entries <= x, then the same lo/hi comparison; sums over j in
 * order with separate multiply and add, no FMA; the fp16 scale rounding
 * and the first-minimum choice in candidate order are scalar), so the
 * stored bytes are identical. */
static void rl__quant_iq4_nl_kv_avx2(const float *x, void *vy, int64_t n) {
    rl_block_q4_0 *y = vy;
    const int8_t *v = rl__iq4nl_values;
    float vf[16];
    for (int i = 0; i < 16; i++) vf[i] = (float)v[i];
    const __m256 tlo = _mm256_loadu_ps(vf), thi = _mm256_loadu_ps(vf + 8);
    const __m256i seven = _mm256_set1_epi32(7);
    for (int64_t b = 0; b < n / 32; b++, x += 32) {
        float mx, amax = rl__iq4nl_absmax(x, &mx);
        uint8_t best_q[32] = {0};
        float best_d = 0.0f;
        if (amax > 0.0f) {
            float best_err = INFINITY;
            for (int r = 0; r < 4; r++) { /* candidates it = 8r - 15 + lane */
                float num[8];
                for (int l = 0; l < 8; l++) num[l] = rl__iq4nl_cand(8 * r - 15 + l);
                const __m256 id = _mm256_div_ps(_mm256_loadu_ps(num), _mm256_set1_ps(mx));
                __m256i qv[32];
                __m256 sxv = _mm256_setzero_ps(), svv = _mm256_setzero_ps();
                for (int j = 0; j < 32; j++) {
                    const __m256 xj = _mm256_set1_ps(x[j]), xs = _mm256_mul_ps(xj, id);
                    __m256i lo = _mm256_setzero_si256();
                    for (int k = 1; k < 15; k++) /* lo = #{k in 1..14: v[k] <= xs} */
                        lo = _mm256_sub_epi32(lo, _mm256_castps_si256(_mm256_cmp_ps(
                                                      _mm256_set1_ps(vf[k]), xs, _CMP_LE_OQ)));
                    const __m256i hi = _mm256_add_epi32(lo, _mm256_set1_epi32(1));
                    const __m256 vlo = _mm256_blendv_ps(
                        _mm256_permutevar8x32_ps(tlo, lo), _mm256_permutevar8x32_ps(thi, lo),
                        _mm256_castsi256_ps(_mm256_cmpgt_epi32(lo, seven)));
                    const __m256 vhi = _mm256_blendv_ps(
                        _mm256_permutevar8x32_ps(tlo, hi), _mm256_permutevar8x32_ps(thi, hi),
                        _mm256_castsi256_ps(_mm256_cmpgt_epi32(hi, seven)));
                    /* lo if x - v[lo] < v[hi] - x, else hi */
                    const __m256 take_lo =
                        _mm256_cmp_ps(_mm256_sub_ps(xs, vlo), _mm256_sub_ps(vhi, xs), _CMP_LT_OQ);
                    const __m256 vq = _mm256_blendv_ps(vhi, vlo, take_lo);
                    qv[j] = _mm256_add_epi32(lo, _mm256_andnot_si256(_mm256_castps_si256(take_lo),
                                                                     _mm256_set1_epi32(1)));
                    sxv = _mm256_add_ps(sxv, _mm256_mul_ps(xj, vq));
                    svv = _mm256_add_ps(svv, _mm256_mul_ps(vq, vq));
                }
                float sx[8], sv[8], dl[8];
                _mm256_storeu_ps(sx, sxv);
                _mm256_storeu_ps(sv, svv);
                for (int l = 0; l < 8; l++) {
                    float d = sv[l] > 0.0f ? sx[l] / sv[l] : 0.0f;
                    dl[l] = rl_fp16_to_f32(rl_f32_to_fp16(d)); /* the stored scale */
                }
                const __m256 dv = _mm256_loadu_ps(dl);
                __m256 err = _mm256_setzero_ps();
                for (int j = 0; j < 32; j++) {
                    const __m256 vq = _mm256_blendv_ps(
                        _mm256_permutevar8x32_ps(tlo, qv[j]), _mm256_permutevar8x32_ps(thi, qv[j]),
                        _mm256_castsi256_ps(_mm256_cmpgt_epi32(qv[j], seven)));
                    const __m256 e = _mm256_sub_ps(_mm256_set1_ps(x[j]), _mm256_mul_ps(dv, vq));
                    err = _mm256_add_ps(err, _mm256_mul_ps(e, e));
                }
                float el[8];
                _mm256_storeu_ps(el, err);
                for (int l = 0; l < 8 && 8 * r - 15 + l <= 15; l++)
                    if (el[l] < best_err) {
                        best_err = el[l];
                        best_d = dl[l];
                        int32_t qs[8];
                        for (int j = 0; j < 32; j++) {
                            _mm256_storeu_si256((__m256i *)qs, qv[j]);
                            best_q[j] = (uint8_t)qs[l];
                        }
                    }
            }
        }
        rl__iq4nl_store(&y[b], best_d, best_q);
    }
}

void rl__avx2_fill_kvq(rl__ktab *t) {
    t->wht = rl__wht_avx2;
    t->quant_iq4_nl_kv = rl__quant_iq4_nl_kv_avx2;
    t->kqf_rows[RL_TYPE_IQ4_NL] = rl__kqf_iq4_nl_avx2;
    t->kq_rows[RL_TYPE_IQ4_NL] = rl__kq_iq4_nl_avx2;
    t->v_rows[RL_TYPE_IQ4_NL] = rl__v_iq4_nl_avx2;
    t->kqf_rows[RL_TYPE_Q8_0] = rl__kqf_q8_0_avx2;
    t->kqf_rows[RL_TYPE_Q8_64] = rl__kqf_q8_64_avx2;
    t->kqf_rows[RL_TYPE_Q4_0] = rl__kqf_q4_0_avx2;
    t->kq_rows[RL_TYPE_F32] = rl__kq_f32_avx2;
    t->kq_rows[RL_TYPE_F16] = rl__kq_f16_avx2;
    t->kq_rows[RL_TYPE_Q8_0] = rl__kq_q8_0_avx2;
    t->kq_rows[RL_TYPE_Q8_64] = rl__kq_q8_64_avx2;
    t->kq_rows[RL_TYPE_Q4_0] = rl__kq_q4_0_avx2;
    t->v_rows[RL_TYPE_F32] = rl__v_f32_avx2;
    t->v_rows[RL_TYPE_F16] = rl__v_f16_avx2;
    t->v_rows[RL_TYPE_Q8_0] = rl__v_q8_0_avx2;
    t->v_rows[RL_TYPE_Q8_64] = rl__v_q8_64_avx2;
    t->v_rows[RL_TYPE_Q4_0] = rl__v_q4_0_avx2;
    t->kq_rows_g[RL_TYPE_F32] = rl__kq_f32_g_avx2;
    t->kq_rows_g[RL_TYPE_F16] = rl__kq_f16_g_avx2;
    t->v_rows_g[RL_TYPE_F32] = rl__v_f32_g_avx2;
    t->v_rows_g[RL_TYPE_F16] = rl__v_f16_g_avx2;
    t->v_rows_g[RL_TYPE_Q8_0] = rl__v_q8_0_g_avx2;
    t->kqq_rows_g[RL_TYPE_Q8_0] = rl__kqq_q8_0_g_avx2;
    t->kqq_rows_g[RL_TYPE_Q8_64] = rl__kqq_q8_64_g_avx2;
    t->kqq_rows_g[RL_TYPE_Q4_0] = rl__kqq_q4_0_g_avx2;
    t->v_rows_g[RL_TYPE_Q4_0] = rl__v_q4_0_g_avx2;
    t->kqq_rows_g[RL_TYPE_IQ4_NL] = rl__kqq_iq4_nl_g_avx2;
    t->v_rows_g[RL_TYPE_IQ4_NL] = rl__v_iq4_nl_g_avx2;
    t->v_rows_g[RL_TYPE_Q8_64] = rl__v_q8_64_g_avx2;
}
