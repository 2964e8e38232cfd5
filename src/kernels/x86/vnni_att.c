/* AVX-512 grouped attention leaves (kernels-impl.h kq_rows_g, v_rows_g) for
 * f32 and f16 pages, for the "avx512vnni" table: many query rows against
 * each K/V row (a GQA group's heads of several prompt tokens, attention.c
 * rl__att_group), the same bits as the AVX2 leaves.
 *
 * kq: the AVX2 leaf sums a head's products in two 8-lane accumulators (s0
 * over elements i..i+7, s1 over i+8..i+15 of every 16), then
 * rl__hsum_ps(s0 + s1).  Here one 16-lane accumulator holds both (lanes
 * 0-7 = s0, 8-15 = s1: the same fused multiply-adds per lane), its halves
 * are added as s0 + s1, and the horizontal sums of 16 (row, key) pairs are
 * one transposed tree of rl__hsum_ps's additions (rl__va_hsum16).  Blocks
 * of 4 rows x 4 keys keep 16 accumulators in registers, each key widened
 * once for 4 rows and each query chunk loaded once for 4 keys.
 * v: the AVX2 leaf's per-element chains (acc += w[r] * v_r[i], rows in
 * order) in 16-lane registers, up to 8 query rows a pass over the V rows,
 * each row widened once for them.
 * Head sizes that are not a multiple of 16 (the AVX2 leaves' 8-wide and
 * scalar tails) go to the AVX2 leaves.  Compiled with the VNNI flags
 * (Makefile) and reached only through that table. */
#include <immintrin.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kernels/kernels-impl.h"

#define RL_VA_AI                   static inline __attribute__((always_inline))
#define RL_VA_ROW(base, r, stride) ((const uint8_t *)(base) + (size_t)(r) * (stride))

typedef void (*rl__kq_g_fn)(const float *q, const void *k, size_t stride, int n, int hd, int g,
                            float *s, size_t ss);
typedef void (*rl__v_g_fn)(float *acc, const void *v, size_t stride, const float *w, size_t ws,
                           int n, int hd, int g);
/* the AVX2 leaves, for head sizes not a multiple of 16 (set once, in the
 * table's build under pthread_once) */
static rl__kq_g_fn g_kq_avx2[2];
static rl__v_g_fn g_v_avx2[2];

RL_VA_AI __m512 rl__va_ld_f32(const float *p) {
    return _mm512_loadu_ps(p);
}
RL_VA_AI __m512 rl__va_ld_f16(const rl_fp16 *p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
}

/* s0 + s1 of the AVX2 leaf: the low 8 lanes plus the high 8 */
RL_VA_AI __m256 rl__va_fold(__m512 a) {
    return _mm256_add_ps(_mm512_castps512_ps256(a),
                         _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1)));
}

/* rl__hsum_ps (avx2-impl.h) of one vector: ((v0+v4)+(v2+v6))+((v1+v5)+(v3+v7)) */
RL_VA_AI float rl__va_hsum1(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* rl__hsum_ps(s0 + s1) of each of 16 accumulators (a[4j + kk]: row j, key
 * kk) as lane 4j + kk, each by the same additions on the same operands as
 * rl__va_hsum1(rl__va_fold(a)): the halves (low + high), then lanes lo+hi
 * of each half, then lanes 0+2 and 1+3, then those two -- for four
 * accumulators per instruction. */
RL_VA_AI __m512 rl__va_hsum16(const __m512 *a) {
    __m512 f[8], x[4], y[2];
    _Pragma("GCC unroll 8") for (int m = 0; m < 8; m++) /* [fold a[2m] | fold a[2m+1]] */
        f[m] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * m], a[2 * m + 1], 0x44),
                             _mm512_shuffle_f32x4(a[2 * m], a[2 * m + 1], 0xEE));
    _Pragma("GCC unroll 4") for (int p = 0; p < 4;
                                 p++) /* 128-bit block b: lo4 + hi4 of vector 4p + b */
        x[p] = _mm512_add_ps(_mm512_shuffle_f32x4(f[2 * p], f[2 * p + 1], 0x88),
                             _mm512_shuffle_f32x4(f[2 * p], f[2 * p + 1], 0xDD));
    _Pragma("GCC unroll 2") for (int q = 0; q < 2;
                                 q++) /* block b: lanes 0+2, 1+3 of vectors 8q + b, 8q + 4 + b */
        y[q] = _mm512_add_ps(_mm512_shuffle_ps(x[2 * q], x[2 * q + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm512_shuffle_ps(x[2 * q], x[2 * q + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    /* lane 4b + c: the sum of vector 4c + b */
    const __m512 z = _mm512_add_ps(_mm512_shuffle_ps(y[0], y[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                   _mm512_shuffle_ps(y[0], y[1], _MM_SHUFFLE(3, 1, 3, 1)));
    return _mm512_permutexvar_ps(
        _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), z);
}

/* kq for RB (1..4) rows from q and every key of [0, n): blocks of 4 keys,
 * then one key at a time. */
#define RL_VA_KQ(NAME, T, LD)                                                                      \
    RL_VA_AI void NAME##_rows(const float *q, const void *k, size_t stride, int n, int hd,         \
                              float *s, size_t ss, const int RB) {                                 \
        int r = 0;                                                                                 \
        for (; r + 4 <= n; r += 4) {                                                               \
            __m512 acc[16];                                                                        \
            _Pragma("GCC unroll 16") for (int a = 0; a < 16; a++) acc[a] = _mm512_setzero_ps();    \
            for (int i = 0; i < hd; i += 16) {                                                     \
                __m512 kv[4];                                                                      \
                _Pragma("GCC unroll 4") for (int kk = 0; kk < 4; kk++) kv[kk] =                    \
                    LD((const T *)RL_VA_ROW(k, r + kk, stride) + i);                               \
                _Pragma("GCC unroll 4") for (int j = 0; j < RB; j++) {                             \
                    const __m512 qv = _mm512_loadu_ps(q + (size_t)j * hd + i);                     \
                    _Pragma("GCC unroll 4") for (int kk = 0; kk < 4; kk++) acc[4 * j + kk] =       \
                        _mm512_fmadd_ps(qv, kv[kk], acc[4 * j + kk]);                              \
                }                                                                                  \
            }                                                                                      \
            _Alignas(64) float h[16]; /* row j's 4 scores at h + 4j */                             \
            _mm512_store_ps(h, rl__va_hsum16(acc));                                                \
            _Pragma("GCC unroll 4") for (int j = 0; j < RB; j++)                                   \
                memcpy(s + (size_t)j * ss + r, h + 4 * j, 4 * sizeof(float));                      \
        }                                                                                          \
        for (; r < n; r++) {                                                                       \
            const T *b = (const T *)RL_VA_ROW(k, r, stride);                                       \
            __m512 acc[4];                                                                         \
            _Pragma("GCC unroll 4") for (int j = 0; j < RB; j++) acc[j] = _mm512_setzero_ps();     \
            for (int i = 0; i < hd; i += 16) {                                                     \
                const __m512 kv = LD(b + i);                                                       \
                _Pragma("GCC unroll 4") for (int j = 0; j < RB; j++) acc[j] =                      \
                    _mm512_fmadd_ps(_mm512_loadu_ps(q + (size_t)j * hd + i), kv, acc[j]);          \
            }                                                                                      \
            _Pragma("GCC unroll 4") for (int j = 0; j < RB; j++) s[(size_t)j * ss + r] =           \
                rl__va_hsum1(rl__va_fold(acc[j]));                                                 \
        }                                                                                          \
    }                                                                                              \
    static void NAME(const float *q, const void *k, size_t stride, int n, int hd, int g, float *s, \
                     size_t ss) {                                                                  \
        if (hd % 16) {                                                                             \
            g_kq_avx2[sizeof(T) == 2](q, k, stride, n, hd, g, s, ss);                              \
            return;                                                                                \
        }                                                                                          \
        for (int j0 = 0; j0 < g; j0 += 4) {                                                        \
            const float *qj = q + (size_t)j0 * hd;                                                 \
            float *sj = s + (size_t)j0 * ss;                                                       \
            switch (g - j0) {                                                                      \
            case 1:                                                                                \
                NAME##_rows(qj, k, stride, n, hd, sj, ss, 1);                                      \
                break;                                                                             \
            case 2:                                                                                \
                NAME##_rows(qj, k, stride, n, hd, sj, ss, 2);                                      \
                break;                                                                             \
            case 3:                                                                                \
                NAME##_rows(qj, k, stride, n, hd, sj, ss, 3);                                      \
                break;                                                                             \
            default:                                                                               \
                NAME##_rows(qj, k, stride, n, hd, sj, ss, 4);                                      \
                break;                                                                             \
            }                                                                                      \
        }                                                                                          \
    }

/* v for RB (1..8) rows: 16 elements at a time, every V row in order. */
#define RL_VA_V(NAME, T, LD)                                                                       \
    RL_VA_AI void NAME##_rows(float *acc, const void *v, size_t stride, const float *w, size_t ws, \
                              int n, int hd, const int RB) {                                       \
        for (int i = 0; i < hd; i += 16) {                                                         \
            __m512 a[8];                                                                           \
            _Pragma("GCC unroll 8") for (int j = 0; j < RB; j++) a[j] =                            \
                _mm512_loadu_ps(acc + (size_t)j * hd + i);                                         \
            for (int r = 0; r < n; r++) {                                                          \
                const __m512 x = LD((const T *)RL_VA_ROW(v, r, stride) + i);                       \
                _Pragma("GCC unroll 8") for (int j = 0; j < RB; j++) a[j] =                        \
                    _mm512_fmadd_ps(_mm512_set1_ps(w[(size_t)j * ws + r]), x, a[j]);               \
            }                                                                                      \
            _Pragma("GCC unroll 8") for (int j = 0; j < RB; j++)                                   \
                _mm512_storeu_ps(acc + (size_t)j * hd + i, a[j]);                                  \
        }                                                                                          \
    }                                                                                              \
    static void NAME(float *acc, const void *v, size_t stride, const float *w, size_t ws, int n,   \
                     int hd, int g) {                                                              \
        if (hd % 16) {                                                                             \
            g_v_avx2[sizeof(T) == 2](acc, v, stride, w, ws, n, hd, g);                             \
            return;                                                                                \
        }                                                                                          \
        for (int j0 = 0; j0 < g; j0 += 8) {                                                        \
            float *aj = acc + (size_t)j0 * hd;                                                     \
            const float *wj = w + (size_t)j0 * ws;                                                 \
            switch (g - j0) {                                                                      \
            case 1:                                                                                \
                NAME##_rows(aj, v, stride, wj, ws, n, hd, 1);                                      \
                break;                                                                             \
            case 2:                                                                                \
                NAME##_rows(aj, v, stride, wj, ws, n, hd, 2);                                      \
                break;                                                                             \
            case 3:                                                                                \
                NAME##_rows(aj, v, stride, wj, ws, n, hd, 3);                                      \
                break;                                                                             \
            case 4:                                                                                \
                NAME##_rows(aj, v, stride, wj, ws, n, hd, 4);                                      \
                break;                                                                             \
            case 5:                                                                                \
                NAME##_rows(aj, v, stride, wj, ws, n, hd, 5);                                      \
                break;                                                                             \
            case 6:                                                                                \
                NAME##_rows(aj, v, stride, wj, ws, n, hd, 6);                                      \
                break;                                                                             \
            case 7:                                                                                \
                NAME##_rows(aj, v, stride, wj, ws, n, hd, 7);                                      \
                break;                                                                             \
            default:                                                                               \
                NAME##_rows(aj, v, stride, wj, ws, n, hd, 8);                                      \
                break;                                                                             \
            }                                                                                      \
        }                                                                                          \
    }

RL_VA_KQ(rl__kq_f32_g_vnni, float, rl__va_ld_f32)
RL_VA_KQ(rl__kq_f16_g_vnni, rl_fp16, rl__va_ld_f16)
RL_VA_V(rl__v_f32_g_vnni, float, rl__va_ld_f32)
RL_VA_V(rl__v_f16_g_vnni, rl_fp16, rl__va_ld_f16)

/* ---- exp_sum and silu_mul: the AVX2 leaves' lanes, 16 at a time ----
 * rl__exp_ps (avx2-impl.h) in 16 lanes: the same operations per lane, so
 * the same bits. */
RL_VA_AI __m512 rl__va_exp_ps(__m512 x) {
    x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.3f)), _mm512_set1_ps(88.3f));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500E-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507E-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073E-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894E-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459E-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201E-1f));
    p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    __m512i e =
        _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
    return _mm512_mul_ps(p, _mm512_castsi512_ps(e));
}

/* The AVX2 exp_sum: its 8-lane sum takes the 8-element chunks in order
 * (the low then the high half of each 16), then rl__hsum_ps, then the
 * scalar tail. */
static float rl__exp_sum_vnni(float *x, int64_t n, float m) {
    const __m512 mv = _mm512_set1_ps(m);
    __m256 sv = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 16) {
        const __mmask16 k = i + 16 <= n ? 0xFFFF : 0x00FF;
        const __m512 e = rl__va_exp_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + i), mv));
        _mm512_mask_storeu_ps(x + i, k, e);
        sv = _mm256_add_ps(sv, _mm512_castps512_ps256(e));
        if (k == 0xFFFF)
            sv =
                _mm256_add_ps(sv, _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(e), 1)));
        else
            i -= 8;
    }
    float s = rl__va_hsum1(sv);
    for (; i < n; i++) {
        x[i] = expf(x[i] - m);
        s += x[i];
    }
    return s;
}

/* The AVX2 silu_mul's lanes, 16 (or 8, masked) at a time; the scalar tail. */
static void rl__silu_mul_vnni(float *out, const float *g, const float *u, int64_t n) {
    const __m512 one = _mm512_set1_ps(1.0f), zero = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 16) {
        const __mmask16 k = i + 16 <= n ? 0xFFFF : 0x00FF;
        const __m512 x = _mm512_maskz_loadu_ps(k, g + i);
        const __m512 e = rl__va_exp_ps(_mm512_sub_ps(zero, x));
        const __m512 sg = _mm512_div_ps(x, _mm512_add_ps(one, e));
        _mm512_mask_storeu_ps(out + i, k, _mm512_mul_ps(sg, _mm512_maskz_loadu_ps(k, u + i)));
        if (k != 0xFFFF) i -= 8;
    }
    for (; i < n; i++) out[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

void rl__vnni_fill_att(rl__ktab *t) {
    t->exp_sum = rl__exp_sum_vnni;
    t->silu_mul = rl__silu_mul_vnni;
    g_kq_avx2[0] = t->kq_rows_g[RL_TYPE_F32];
    g_kq_avx2[1] = t->kq_rows_g[RL_TYPE_F16];
    g_v_avx2[0] = t->v_rows_g[RL_TYPE_F32];
    g_v_avx2[1] = t->v_rows_g[RL_TYPE_F16];
    if (!g_kq_avx2[0] || !g_kq_avx2[1] || !g_v_avx2[0] || !g_v_avx2[1]) return;
    t->kq_rows_g[RL_TYPE_F32] = rl__kq_f32_g_vnni;
    t->kq_rows_g[RL_TYPE_F16] = rl__kq_f16_g_vnni;
    t->v_rows_g[RL_TYPE_F32] = rl__v_f32_g_vnni;
    t->v_rows_g[RL_TYPE_F16] = rl__v_f16_g_vnni;
}
