/* AVX2 vec-dots on quantized weights, 1-token (decode) and 4-token
 * (prefill) variants generated from one always-inline template per type:
 * the 32-element types' templates and the q2_K, q3_K, q5_K, iq4_xs templates
 * are shared with the AVX512-VNNI table (dot-impl.h; here their int8
 * multiply-add is vpmaddubsw + vpmaddwd, their int16 one vpmaddwd +
 * vpaddd), the q4_K and q6_K templates are this file's.
 *
 * A template computes one weight row against T activation rows: each
 * weight block is loaded and unpacked once and used for the T tokens.  The
 * float operations applied for a token (the sequence of scale products,
 * int->float conversions and fused multiply-adds into that token's own
 * accumulators, then the horizontal sum) are written once and do not
 * depend on T; only the integer block sums, which are exact, are shared.
 * So vec_dot4 is bit-identical to four vec_dot calls and matmul results
 * are batch-invariant.
 *
 * Reduction orders (fixed for a given n):
 *   32-element blocks (q4_0, q4_1, q5_0, q5_1, q8_0, iq4_nl, mxfp4):
 *     block i's exact integer
 *     dot, as 8 int32 lanes, is scaled by dw*dx and fused into accumulator
 *     i % 2 (two independent chains hide the FMA latency); the result is
 *     hsum(acc0 + acc1) (+ the q4_1 min terms, summed in block order, again
 *     alternating two partial sums).
 *   q4_K: per 256 super-block, the 8 sub-block sums scaled by their 6-bit
 *     scales (exact int32 lanes) are fused with d*dx, then the min terms
 *     (mins x the q8_K 16-element sums, exact int32 lanes) are fused with
 *     -dmin*dx into the same accumulator; result hsum(acc).
 *   q6_K: per super-block sum((q - 32) * y * scale) computed exactly as
 *     sum(q * y * scale) - 32 * sum(scale * bsum) in int32 lanes, fused
 *     with d*dx; result hsum(acc).
 *   q2_K, q3_K, q5_K, iq4_xs (dot-impl.h): per super-block the exact scaled sum
 *     (q3_K's -4 offset and q2_K's minimums through the bsums), fused with
 *     d*dx (q2_K, q5_K: then the min terms with -dmin*dx); result hsum(acc).
 * The reference kernels sum in another (sequential) order; the difference
 * is float rounding only (test_kernels.c bounds it).
 */
#include <math.h>

#include "kernels/x86/avx2-impl.h"

#define RL_TMAX 4 /* largest token tile */
/* the int8 multiply-add of the shared templates: vpmaddubsw + vpmaddwd */
#define RL_DOT_MADD(u, s) rl__mul_sum_u8i8(u, s)
/* and their int16 multiply-add: vpmaddwd + vpaddd */
#define RL_DOT_MADDW(a, p, s) _mm256_add_epi32(a, _mm256_madd_epi16(p, s))
#include "kernels/x86/dot-impl.h"

/* ---------------- K-quants ---------------- */

/* TQ (a constant): the fast tiles' reduction instead (rl__tile8.dot_row):
 * each super-block's integer sums reduced to one int and fused into a
 * scalar accumulator with the tile's float operations. */
RL_AI void rl__dotTQ_q4_K(int64_t n, float *s, size_t ss, const void *vw, const void *vx, size_t xs,
                          const int T, const int TQ) {
    const rl_block_q4_K *w = vw;
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    __m256 acc[RL_TMAX];
    float acs[RL_TMAX];
    RL_UNROLL for (int k = 0; k < T; k++) {
        acc[k] = _mm256_setzero_ps();
        acs[k] = 0.0f;
    }
    for (int64_t i = 0; i < n / RL_QK_K; i++) {
        RL_PF3(&w[i]); /* see avx2-impl.h */
        __m256i scb, mins;
        rl__k4_scales(w[i].scales, &scb, &mins);
        const float dw = rl__f16(w[i].d), dmw = rl__f16(w[i].dmin);
        __m256i sumi[RL_TMAX];
        RL_UNROLL for (int k = 0; k < T; k++) sumi[k] = _mm256_setzero_si256();
        RL_UNROLL for (int j = 0; j < 4; j++) {
            __m256i qb = _mm256_loadu_si256((const __m256i *)(w[i].qs + 32 * j));
            __m256i lo = _mm256_and_si256(qb, m4);
            __m256i hi = _mm256_and_si256(_mm256_srli_epi16(qb, 4), m4);
            __m256i s0 =
                _mm256_shuffle_epi8(scb, _mm256_set1_epi16((short)(((4 * j + 1) << 8) | (4 * j))));
            __m256i s1 = _mm256_shuffle_epi8(
                scb, _mm256_set1_epi16((short)(((4 * j + 3) << 8) | (4 * j + 2))));
            RL_UNROLL for (int k = 0; k < T; k++) {
                const int8_t *y = XB(rl_block_q8_K, k, i).qs + 64 * j;
                __m256i y0 = _mm256_loadu_si256((const __m256i *)y);
                __m256i y1 = _mm256_loadu_si256((const __m256i *)(y + 32));
                __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, y0), s0);
                __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, y1), s1);
                sumi[k] = _mm256_add_epi32(sumi[k], _mm256_add_epi32(p0, p1));
            }
        }
        RL_UNROLL for (int k = 0; k < T; k++)
            rl__kend_min(&acc[k], &acs[k], &XB(rl_block_q8_K, k, i), sumi[k], mins, dw, dmw, TQ);
    }
    RL_UNROLL for (int k = 0; k < T; k++) s[k * ss] = TQ ? acs[k] : rl__hsum_ps(acc[k]);
}
RL_AI void rl__dotT_q4_K(int64_t n, float *s, size_t ss, const void *vw, const void *vx, size_t xs,
                         const int T) {
    rl__dotTQ_q4_K(n, s, ss, vw, vx, xs, T, 0);
}

RL_AI void rl__dotTQ_q6_K(int64_t n, float *s, size_t ss, const void *vw, const void *vx, size_t xs,
                          const int T, const int TQ) {
    const rl_block_q6_K *w = vw;
    const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
    __m256 acc[RL_TMAX];
    float acs[RL_TMAX];
    RL_UNROLL for (int k = 0; k < T; k++) {
        acc[k] = _mm256_setzero_ps();
        acs[k] = 0.0f;
    }
    for (int64_t i = 0; i < n / RL_QK_K; i++) {
        RL_PF3(&w[i]);
        /* 16 int8 scales as int16; correction -32 * sum(scale * bsum) */
        const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)w[i].scales));
        __m256i sumi[RL_TMAX];
        RL_UNROLL for (int k = 0; k < T; k++) {
            __m256i b = _mm256_loadu_si256((const __m256i *)XB(rl_block_q8_K, k, i).bsums);
            sumi[k] = _mm256_sub_epi32(_mm256_setzero_si256(),
                                       _mm256_slli_epi32(_mm256_madd_epi16(b, sc16), 5));
        }
        RL_UNROLL for (int h = 0; h < 2; h++) {
            const uint8_t *ql = w[i].ql + 64 * h, *qh = w[i].qh + 32 * h;
            /* scales 8h..8h+7 in both lanes; chunk kk uses 8h+2kk (lane 0)
             * and 8h+2kk+1 (lane 1) */
            const __m256i scb = _mm256_broadcastsi128_si256(h ? _mm256_extracti128_si256(sc16, 1)
                                                              : _mm256_castsi256_si128(sc16));
            __m256i l0 = _mm256_loadu_si256((const __m256i *)ql);
            __m256i l1 = _mm256_loadu_si256((const __m256i *)(ql + 32));
            __m256i hb = _mm256_loadu_si256((const __m256i *)qh);
            __m256i q[4];
            q[0] = _mm256_or_si256(_mm256_and_si256(l0, m4),
                                   _mm256_and_si256(_mm256_slli_epi16(hb, 4), m30));
            q[1] = _mm256_or_si256(_mm256_and_si256(l1, m4),
                                   _mm256_and_si256(_mm256_slli_epi16(hb, 2), m30));
            q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                                   _mm256_and_si256(hb, m30));
            q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                                   _mm256_and_si256(_mm256_srli_epi16(hb, 2), m30));
            RL_UNROLL for (int kk = 0; kk < 4; kk++) {
                const __m256i scv = _mm256_shuffle_epi8(
                    scb,
                    _mm256_set_m128i(_mm_set1_epi16((short)(((4 * kk + 3) << 8) | (4 * kk + 2))),
                                     _mm_set1_epi16((short)(((4 * kk + 1) << 8) | (4 * kk)))));
                RL_UNROLL for (int k = 0; k < T; k++) {
                    const int8_t *y = XB(rl_block_q8_K, k, i).qs + 128 * h + 32 * kk;
                    __m256i yk = _mm256_loadu_si256((const __m256i *)y);
                    sumi[k] = _mm256_add_epi32(
                        sumi[k], _mm256_madd_epi16(_mm256_maddubs_epi16(q[kk], yk), scv));
                }
            }
        }
        const float dw = rl__f16(w[i].d);
        RL_UNROLL for (int k = 0; k < T; k++)
            rl__kend(&acc[k], &acs[k], &XB(rl_block_q8_K, k, i), sumi[k], dw, TQ);
    }
    RL_UNROLL for (int k = 0; k < T; k++) s[k * ss] = TQ ? acs[k] : rl__hsum_ps(acc[k]);
}
RL_AI void rl__dotT_q6_K(int64_t n, float *s, size_t ss, const void *vw, const void *vx, size_t xs,
                         const int T) {
    rl__dotTQ_q6_K(n, s, ss, vw, vx, xs, T, 0);
}

/* ---------------- instantiations ---------------- */

#define RL_INST(TY)                                                                                \
    static void rl__dot_##TY##_avx2(int64_t n, float *s, const void *w, const void *x) {           \
        rl__dotT_##TY(n, s, 0, w, x, 0, 1);                                                        \
    }                                                                                              \
    static void rl__dot4_##TY##_avx2(int64_t n, float *s, size_t ss, const void *w, const void *x, \
                                     size_t xs) {                                                  \
        rl__dotT_##TY(n, s, ss, w, x, xs, 4);                                                      \
    }

RL_INST(q4_0)
RL_INST(q4_1)
RL_INST(q5_0)
RL_INST(q5_1)
RL_INST(q8_0)
RL_INST(iq4_nl)
RL_INST(mxfp4)
RL_INST(q2_K)
RL_INST(q3_K)
RL_INST(q4_K)
RL_INST(q5_K)
RL_INST(q6_K)
RL_INST(iq4_xs)

/* rl__tile8.dot_row: the TQ templates at T = n_x (1..4). */
#define RL_INST_ROW(TY)                                                                            \
    static void rl__tile_row_##TY##_avx2(int64_t n, float *s, size_t ss, const void *w,            \
                                         const void *x, size_t xs, int n_x) {                      \
        if (n_x == 4)                                                                              \
            rl__dotTQ_##TY(n, s, ss, w, x, xs, 4, 1);                                              \
        else if (n_x == 3)                                                                         \
            rl__dotTQ_##TY(n, s, ss, w, x, xs, 3, 1);                                              \
        else if (n_x == 2)                                                                         \
            rl__dotTQ_##TY(n, s, ss, w, x, xs, 2, 1);                                              \
        else                                                                                       \
            rl__dotTQ_##TY(n, s, ss, w, x, xs, 1, 1);                                              \
    }
RL_INST_ROW(q2_K)
RL_INST_ROW(iq4_xs)
RL_INST_ROW(q3_K)
RL_INST_ROW(q4_K)
RL_INST_ROW(q5_K)
RL_INST_ROW(q6_K)

void rl__avx2_fill_dot4(rl__ktab *t);
void rl__avx2_fill_dot4(rl__ktab *t) {
    t->tile8[RL_TYPE_Q2_K].dot_row = rl__tile_row_q2_K_avx2;
    t->tile8[RL_TYPE_IQ4_XS].dot_row = rl__tile_row_iq4_xs_avx2;
    t->tile8[RL_TYPE_Q3_K].dot_row = rl__tile_row_q3_K_avx2;
    t->tile8[RL_TYPE_Q4_K].dot_row = rl__tile_row_q4_K_avx2;
    t->tile8[RL_TYPE_Q5_K].dot_row = rl__tile_row_q5_K_avx2;
    t->tile8[RL_TYPE_Q6_K].dot_row = rl__tile_row_q6_K_avx2;
#define RL_SET(TY, E)                                                                              \
    t->vec_dot[E] = rl__dot_##TY##_avx2;                                                           \
    t->vec_dot4[E] = rl__dot4_##TY##_avx2;
    RL_SET(q4_0, RL_TYPE_Q4_0)
    RL_SET(q4_1, RL_TYPE_Q4_1)
    RL_SET(q5_0, RL_TYPE_Q5_0)
    RL_SET(q5_1, RL_TYPE_Q5_1)
    RL_SET(q8_0, RL_TYPE_Q8_0)
    RL_SET(iq4_nl, RL_TYPE_IQ4_NL)
    RL_SET(mxfp4, RL_TYPE_MXFP4)
    RL_SET(q2_K, RL_TYPE_Q2_K)
    RL_SET(q3_K, RL_TYPE_Q3_K)
    RL_SET(q4_K, RL_TYPE_Q4_K)
    RL_SET(q5_K, RL_TYPE_Q5_K)
    RL_SET(q6_K, RL_TYPE_Q6_K)
    RL_SET(iq4_xs, RL_TYPE_IQ4_XS)
#undef RL_SET
}
