/* AVX512-VNNI vec-dots on quantized weights: 1-, 4- and 8-token variants
 * (and 2-row variants for the 32-element types) generated from one
 * always-inline template per type, for the "avx512vnni" table (the AVX2
 * table with these matmul leaves in place of avx2_dot4.c's).  The
 * 32-element types (q4_0, q4_1, q5_0, q5_1, q8_0, iq4_nl, mxfp4) and
 * q2_K, q3_K, q5_K, iq4_xs use the templates the AVX2 table uses (dot-impl.h),
 * with vpdpbusd as their int8 and vpdpwssd as their int16 multiply-add;
 * the q4_K and q6_K templates are this file's own (zmm layout).  Compiled with -mavx512f -mavx512bw
 * -mavx512vl -mavx512vnni (Makefile), and reached only through that table, which dispatch.c builds
 * only when CPUID and XCR0 report the features.
 *
 * Bit-identity with the AVX2 table (tested in test_kernels.c): every float
 * operation a token sees is the one avx2_dot4.c applies, on the same
 * values, in the same order (same accumulators, same lane layout, same
 * horizontal sums).  Only the integer block sums are computed differently,
 * and those are exact:
 *   - vpdpbusd(0, u, s) lane l = sum of the 4 byte products 4l..4l+3, which
 *     is what vpmaddubsw (no saturation: |u| <= 128, |s| <= 127, so a pair
 *     is at most 32512) followed by vpmaddwd with ones gives;
 *   - vpdpwssd(acc, p, sc) = acc + vpmaddwd(p, sc), one uop instead of two;
 *   - the K-quant templates work on zmm registers holding two 32-byte
 *     chunks side by side (low half = the chunk the AVX2 code handles in
 *     one step, high half = the next one); the two halves are added (exact
 *     int32) before the int->float conversion, giving the AVX2 lanes.
 * So within this table vec_dot4/vec_dot8 equal vec_dot per token, and the
 * table as a whole equals the AVX2 table bit for bit.
 *
 * Why it is faster: vpdpbusd/vpdpwssd fuse two multiply uops (or a
 * multiply and an add) into one; zmm integer multiplies issue on two ports
 * on this core class (Ice Lake-SP), doubling the K-quant integer rate; 32
 * vector registers allow an 8-token tile without spills, halving the
 * per-token cost of unpacking weights.
 */
#include "kernels/x86/avx2-impl.h"

#define RL_TMAX 8 /* largest token tile */
#define RL_RMAX 2 /* rows of the one-token multi-row leaves (vec_dot2r) */
/* the int8 multiply-add of the shared templates: vpdpbusd into zero */
#define RL_DOT_MADD(u, s) _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s)
/* and their int16 multiply-add: vpdpwssd */
#define RL_DOT_MADDW(a, p, s) _mm256_dpwssd_epi32(a, p, s)
#include "kernels/x86/dot-impl.h"

/* ---------------- K-quants ---------------- */

/* Low + high 256-bit halves of an int32 zmm (exact). */
RL_AI __m256i rl__fold(__m512i v) {
    return _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1));
}

/* The 8 6-bit scales and mins of a q4_K super-block as int16
 * (rl__k4_scales, dot-impl.h): *sc = sc0..sc7 in the low 128 bits, *mins =
 * [m0 m0 m1 m1 .. m7 m7] to pair with the sixteen q8_K bsums. */
RL_AI void rl__q4k_scales(const uint8_t *q, __m128i *sc, __m256i *mins) {
    __m256i s2;
    rl__k4_scales(q, &s2, mins);
    *sc = _mm256_castsi256_si128(s2);
}

/* q4_K: per 64 elements j (sub-blocks 2j, 2j+1), one zmm holds the 32
 * weight bytes' low nibbles (sub-block 2j, pairs with y[64j..64j+31]) in
 * its low half and high nibbles (2j+1, y[64j+32..64j+63]) in its high half,
 * so the 64 activation bytes load as one zmm; the scale vector holds sc[2j]
 * in the low half and sc[2j+1] in the high half. */
RL_AI void rl__dotT_q4_K(int64_t n, float *s, size_t ss, const void *vw, const void *vx, size_t xs,
                         const int T) {
    const rl_block_q4_K *w = vw;
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    const __m512i nshift = _mm512_set_epi64(4, 4, 4, 4, 0, 0, 0, 0);
    __m256 acc[RL_TMAX];
    RL_UNROLL for (int k = 0; k < T; k++) acc[k] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / RL_QK_K; i++) {
        RL_PF3(&w[i]); /* see avx2-impl.h */
        __m128i sc;
        __m256i mins;
        rl__q4k_scales(w[i].scales, &sc, &mins);
        const __m512i sc512 = _mm512_castsi128_si512(sc);
        const float dw = rl__f16(w[i].d), dmw = rl__f16(w[i].dmin);
        __m512i sumi[RL_TMAX];
        RL_UNROLL for (int k = 0; k < T; k++) sumi[k] = _mm512_setzero_si512();
        RL_UNROLL for (int j = 0; j < 4; j++) {
            __m512i qb =
                _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(w[i].qs + 32 * j)));
            __m512i q = _mm512_and_si512(_mm512_srlv_epi64(qb, nshift), m4);
            __m512i scj = _mm512_permutexvar_epi16(
                _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi16((short)(2 * j))),
                                   _mm256_set1_epi16((short)(2 * j + 1)), 1),
                sc512);
            RL_UNROLL for (int k = 0; k < T; k++) {
                const int8_t *y = XB(rl_block_q8_K, k, i).qs + 64 * j;
                __m512i yk = _mm512_loadu_si512((const void *)y);
                sumi[k] = _mm512_dpwssd_epi32(sumi[k], _mm512_maddubs_epi16(q, yk), scj);
            }
        }
        RL_UNROLL for (int k = 0; k < T; k++) acc[k] =
            rl__kfuse_min(acc[k], &XB(rl_block_q8_K, k, i), rl__fold(sumi[k]), mins, dw, dmw);
    }
    RL_UNROLL for (int k = 0; k < T; k++) s[k * ss] = rl__hsum_ps(acc[k]);
}

/* q6_K: per half h (128 elements), zmm A = [q0 | q1] (y[128h..128h+63])
 * and B = [q2 | q3] (y[128h+64..128h+127]) in the chunk numbering of
 * avx2_dot4.c; 128-bit lane L of A uses scale 8h+L, of B scale 8h+4+L
 * (16 elements each).  The -32 offset is folded in as in avx2_dot4.c:
 * sum(q*y*s) - 32*sum(s*bsum), exact int32. */
RL_AI void rl__dotT_q6_K(int64_t n, float *s, size_t ss, const void *vw, const void *vx, size_t xs,
                         const int T) {
    const rl_block_q6_K *w = vw;
    const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
    const __m512i lsh = _mm512_set_epi64(2, 2, 2, 2, 4, 4, 4, 4);
    const __m512i rsh = _mm512_set_epi64(2, 2, 2, 2, 0, 0, 0, 0);
    const __m512i lane =
        _mm512_set_epi64(0x0003000300030003ll, 0x0003000300030003ll, 0x0002000200020002ll,
                         0x0002000200020002ll, 0x0001000100010001ll, 0x0001000100010001ll, 0, 0);
    __m256 acc[RL_TMAX];
    RL_UNROLL for (int k = 0; k < T; k++) acc[k] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / RL_QK_K; i++) {
        RL_PF3(&w[i]); /* see avx2-impl.h */
        const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)w[i].scales));
        const __m512i sc512 = _mm512_castsi256_si512(sc16);
        __m512i sumi[RL_TMAX];
        RL_UNROLL for (int k = 0; k < T; k++) {
            __m256i b = _mm256_loadu_si256((const __m256i *)XB(rl_block_q8_K, k, i).bsums);
            __m256i corr = _mm256_sub_epi32(_mm256_setzero_si256(),
                                            _mm256_slli_epi32(_mm256_madd_epi16(b, sc16), 5));
            sumi[k] = _mm512_inserti64x4(_mm512_setzero_si512(), corr, 0);
        }
        RL_UNROLL for (int h = 0; h < 2; h++) {
            const __m512i l = _mm512_loadu_si512((const void *)(w[i].ql + 64 * h));
            const __m512i hb =
                _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(w[i].qh + 32 * h)));
            const __m512i qa = _mm512_or_si512(_mm512_and_si512(l, m4),
                                               _mm512_and_si512(_mm512_sllv_epi64(hb, lsh), m30));
            const __m512i qb = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l, 4), m4),
                                               _mm512_and_si512(_mm512_srlv_epi64(hb, rsh), m30));
            /* int16 element e (in 128-bit lane L = e / 8) of A takes scale
             * 8h + L, of B scale 8h + 4 + L */
            const __m512i ia = _mm512_add_epi16(lane, _mm512_set1_epi16((short)(8 * h)));
            const __m512i ib = _mm512_add_epi16(lane, _mm512_set1_epi16((short)(8 * h + 4)));
            const __m512i sca = _mm512_permutexvar_epi16(ia, sc512);
            const __m512i scb = _mm512_permutexvar_epi16(ib, sc512);
            RL_UNROLL for (int k = 0; k < T; k++) {
                const int8_t *y = XB(rl_block_q8_K, k, i).qs + 128 * h;
                __m512i ya = _mm512_loadu_si512((const void *)y);
                __m512i yb = _mm512_loadu_si512((const void *)(y + 64));
                sumi[k] = _mm512_dpwssd_epi32(sumi[k], _mm512_maddubs_epi16(qa, ya), sca);
                sumi[k] = _mm512_dpwssd_epi32(sumi[k], _mm512_maddubs_epi16(qb, yb), scb);
            }
        }
        const float dw = rl__f16(w[i].d);
        RL_UNROLL for (int k = 0; k < T; k++) acc[k] =
            rl__kfuse(acc[k], &XB(rl_block_q8_K, k, i), rl__fold(sumi[k]), dw);
    }
    RL_UNROLL for (int k = 0; k < T; k++) s[k * ss] = rl__hsum_ps(acc[k]);
}

/* ---------------- instantiations ---------------- */

#define RL_VINST2R(TY)                                                                             \
    static void rl__dot2r_##TY##_vnni(int64_t n, float *s, const void *w, size_t ws,               \
                                      const void *x) {                                             \
        rl__dotR_##TY(n, s, w, ws, x, 2);                                                          \
    }
RL_VINST2R(q4_0)
RL_VINST2R(q4_1)
RL_VINST2R(q5_0)
RL_VINST2R(q5_1)
RL_VINST2R(q8_0)
RL_VINST2R(iq4_nl)
RL_VINST2R(mxfp4)

#define RL_VINST(TY)                                                                               \
    static void rl__dot_##TY##_vnni(int64_t n, float *s, const void *w, const void *x) {           \
        rl__dotT_##TY(n, s, 0, w, x, 0, 1);                                                        \
    }                                                                                              \
    static void rl__dot4_##TY##_vnni(int64_t n, float *s, size_t ss, const void *w, const void *x, \
                                     size_t xs) {                                                  \
        rl__dotT_##TY(n, s, ss, w, x, xs, 4);                                                      \
    }                                                                                              \
    static void rl__dot8_##TY##_vnni(int64_t n, float *s, size_t ss, const void *w, const void *x, \
                                     size_t xs) {                                                  \
        rl__dotT_##TY(n, s, ss, w, x, xs, 8);                                                      \
    }

RL_VINST(q4_0)
RL_VINST(q4_1)
RL_VINST(q5_0)
RL_VINST(q5_1)
RL_VINST(q8_0)
RL_VINST(iq4_nl)
RL_VINST(mxfp4)
RL_VINST(q2_K)
RL_VINST(q3_K)
RL_VINST(q4_K)
RL_VINST(q5_K)
RL_VINST(q6_K)
RL_VINST(iq4_xs)

void rl__vnni_fill(rl__ktab *t) {
#define RL_SET(TY, E)                                                                              \
    t->vec_dot[E] = rl__dot_##TY##_vnni;                                                           \
    t->vec_dot4[E] = rl__dot4_##TY##_vnni;                                                         \
    t->vec_dot8[E] = rl__dot8_##TY##_vnni;
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
    t->vec_dot2r[RL_TYPE_Q4_0] = rl__dot2r_q4_0_vnni;
    t->vec_dot2r[RL_TYPE_Q4_1] = rl__dot2r_q4_1_vnni;
    t->vec_dot2r[RL_TYPE_Q5_0] = rl__dot2r_q5_0_vnni;
    t->vec_dot2r[RL_TYPE_Q8_0] = rl__dot2r_q8_0_vnni;
    t->vec_dot2r[RL_TYPE_Q5_1] = rl__dot2r_q5_1_vnni;
    t->vec_dot2r[RL_TYPE_IQ4_NL] = rl__dot2r_iq4_nl_vnni;
    t->vec_dot2r[RL_TYPE_MXFP4] = rl__dot2r_mxfp4_vnni;
    rl__vnni_fill_tile(t);
    rl__vnni_fill_att(t);
    rl__vnni_fill_quant(t);
}
