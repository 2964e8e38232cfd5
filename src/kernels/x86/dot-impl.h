/* The quantized vec-dot code shared by the AVX2 table (avx2_dot4.c) and
 * the AVX512-VNNI table (vnni_dot.c): weight-block unpackers and scale
 * loads, and the templates that differ between the tiers only in their
 * integer multiply-adds (RL_DOT_MADD, RL_DOT_MADDW, below): the 32-element
 * block types (q4_0, q5_0, q8_0, iq4_nl, mxfp4 against q8_0; q4_1, q5_1
 * against q8_1) and the ymm K-quant templates (q2_K, q3_K, q5_K, iq4_xs
 * against q8_K).  Each tier file includes this once, compiled with its own flags
 * (Makefile), so the AVX-512 encodings stay in the VNNI objects; the
 * q4_K/q6_K templates, whose data layout differs between the tiers (ymm vs
 * zmm), stay in the tier files. */
#ifndef RL_KERNELS_X86_DOT_IMPL_H
#define RL_KERNELS_X86_DOT_IMPL_H

#include <string.h>

#include "kernels/x86/avx2-impl.h"

#define RL_AI static inline __attribute__((always_inline))
/* Token and sub-block loops must be unrolled so accumulators stay in
 * registers. */
#define RL_UNROLL _Pragma("GCC unroll 8")

static inline float rl__f16(rl_fp16 h) {
    return _cvtsh_ss(h);
}

/* The first 4 fp16 values at p as floats (one vcvtph2ps from memory; reads
 * 8 bytes, which every 32-element block has after its scale). */
RL_AI __m128 rl__h4(const void *p) {
    return _mm_cvtph_ps(_mm_loadl_epi64((const __m128i *)p));
}

/* 16 bytes of packed nibbles -> 32 bytes, low nibbles then high nibbles
 * (same result as rl__nibbles32, one uop fewer). */
RL_AI __m256i rl__nib32(const uint8_t *p) {
    __m256i b = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)p));
    b = _mm256_srlv_epi64(b, _mm256_set_epi64x(4, 4, 0, 0));
    return _mm256_and_si256(b, _mm256_set1_epi8(0x0F));
}

/* Activation block i of token k (rows xs bytes apart; the templates name
 * their activation pointer vx and row stride xs). */
#define XB(type, k, i) (((const type *)((const uint8_t *)vx + (size_t)(k)*xs))[i])

/* Weight unpackers: 32 int8 values of block i, signed (for the sign trick
 * of the signed-weight types). */
RL_AI __m256i rl__w_q4_0(const rl_block_q4_0 *b) {
    return _mm256_sub_epi8(rl__nib32(b->qs), _mm256_set1_epi8(8));
}
RL_AI __m256i rl__w_q5_0(const rl_block_q5_0 *b) {
    uint32_t qh;
    memcpy(&qh, b->qh, 4);
    /* q - 16 = nibble | 0xF0 (as int8) where the 5th bit is clear */
    __m256i hi = _mm256_andnot_si256(rl__bits32(qh), _mm256_set1_epi8((char)0xF0));
    return _mm256_or_si256(rl__nib32(b->qs), hi);
}
RL_AI __m256i rl__w_q8_0(const rl_block_q8_0 *b) {
    return _mm256_loadu_si256((const __m256i *)b->qs);
}
/* Codebook types: the nibbles index a 16-entry int8 table (vpshufb). */
RL_AI __m256i rl__iq4nl_tbl(void) {
    return _mm256_setr_epi8(-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89,
                            113, -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69,
                            89, 113);
}
RL_AI __m256i rl__w_iq4_nl(const rl_block_iq4_nl *b) {
    return _mm256_shuffle_epi8(rl__iq4nl_tbl(), rl__nib32(b->qs));
}
RL_AI __m256i rl__w_mxfp4(const rl_block_mxfp4 *b) {
    const __m256i tbl = _mm256_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12, 0,
                                         1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);
    return _mm256_shuffle_epi8(tbl, rl__nib32(b->qs));
}
/* Unsigned weights of the affine types (q4_1: 0..15, q5_1: 0..31). */
RL_AI __m256i rl__w_q4_1(const rl_block_q4_1 *b) {
    return rl__nib32(b->qs);
}
RL_AI __m256i rl__w_q5_1(const rl_block_q5_1 *b) {
    uint32_t qh;
    memcpy(&qh, b->qh, 4);
    return _mm256_or_si256(rl__nib32(b->qs),
                           _mm256_and_si256(rl__bits32(qh), _mm256_set1_epi8(0x10)));
}

/* Weight scales of the signed types as lane 0 of an __m128: the fp16 d
 * (one vcvtph2ps, lanes 1-3 are whatever follows it), or mxfp4's e8m0
 * exponent as 2^(e-128) (rl_e8m0_half_to_f32, bit for bit). */
#define RL_WS_F16(b) rl__h4(&(b)->d)
RL_AI __m128 rl__ws_e8m0(const rl_block_mxfp4 *b) {
    const uint32_t e = b->e;
    const uint32_t bits = e < 2 ? 0x00200000u << e : (e - 1) << 23;
    return _mm_castsi128_ps(_mm_cvtsi32_si128((int)bits));
}

/* ============================ templates ============================
 * Written once, compiled per tier: the includer defines, before including
 * this header,
 *   RL_TMAX            the largest token tile T of the rl__dotT_* templates;
 *   RL_DOT_MADD(u, s)  the int8 multiply-add: unsigned bytes u (0..128) x
 *                      signed bytes s (-127..127) -> 8 int32 lanes, lane l
 *                      the sum of the 4 byte products 4l..4l+3 (AVX2:
 *                      vpmaddubsw + vpmaddwd with ones, never saturating at
 *                      these ranges; AVX512-VNNI: vpdpbusd into zero; the
 *                      same exact integers);
 *   RL_DOT_MADDW(a, p, s)  a + the int16 multiply-add of p x s (8 int32
 *                      lanes, lane l = a_l + p_2l*s_2l + p_2l+1*s_2l+1;
 *                      AVX2: vpmaddwd + vpaddd; VNNI: vpdpwssd; exact at
 *                      the ranges used: |p| <= 32258, |s| <= 63);
 *   RL_RMAX (optional) the largest row count R of the rl__dotR_* (several
 *                      rows, one token) templates, generated only then.
 * Everything else a token sees (scale products, int->float conversions,
 * FMAs into the same accumulators, the horizontal sums) is this code in
 * both tiers, so the tiers agree bit for bit.  Reduction order: see
 * avx2_dot4.c. */
#if !defined(RL_TMAX) || !defined(RL_DOT_MADD) || !defined(RL_DOT_MADDW)
#error "define RL_TMAX, RL_DOT_MADD and RL_DOT_MADDW before including kernels/x86/dot-impl.h"
#endif

/* Block i of a signed-weight type (q4_0, q5_0, q8_0, iq4_nl, mxfp4)
 * against q8_0 activations, fused into acc[k] for the T tokens; WSCALE(b)
 * gives the weight scale in lane 0. */
#define RL_BLK_SIGNED(WTYPE, UNPACK, WSCALE, acc)                                                  \
    do {                                                                                           \
        const WTYPE *b_ = &w[i_];                                                                  \
        const __m128 dw = WSCALE(b_);                                                              \
        const __m256i qw = UNPACK(b_);                                                             \
        const __m256i aw = _mm256_sign_epi8(qw, qw);                                               \
        RL_UNROLL for (int k = 0; k < T; k++) {                                                    \
            const rl_block_q8_0 *x = &XB(rl_block_q8_0, k, i_);                                    \
            __m256i qx = _mm256_loadu_si256((const __m256i *)x->qs);                               \
            __m256i sum = RL_DOT_MADD(aw, _mm256_sign_epi8(qx, qw));                               \
            __m256 d = _mm256_broadcastss_ps(_mm_mul_ss(dw, rl__h4(&x->d)));                       \
            acc[k] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(sum), acc[k]);                          \
        }                                                                                          \
    } while (0)

#define RL_DOT_SIGNED(NAME, WTYPE, UNPACK, WSCALE)                                                 \
    RL_AI void NAME(int64_t n, float *s, size_t ss, const void *vw, const void *vx, size_t xs,     \
                    const int T) {                                                                 \
        const WTYPE *w = vw;                                                                       \
        __m256 acc0[RL_TMAX], acc1[RL_TMAX];                                                       \
        RL_UNROLL for (int k = 0; k < T; k++) acc0[k] = acc1[k] = _mm256_setzero_ps();             \
        const int64_t nb = n / 32;                                                                 \
        int64_t i_ = 0;                                                                            \
        for (; i_ + 2 <= nb; i_ += 2) {                                                            \
            RL_PF1(&w[i_]); /* see avx2-impl.h */                                                  \
            RL_BLK_SIGNED(WTYPE, UNPACK, WSCALE, acc0);                                            \
            i_++;                                                                                  \
            RL_BLK_SIGNED(WTYPE, UNPACK, WSCALE, acc1);                                            \
            i_--;                                                                                  \
        }                                                                                          \
        if (i_ < nb) RL_BLK_SIGNED(WTYPE, UNPACK, WSCALE, acc0);                                   \
        RL_UNROLL for (int k = 0; k < T; k++) s[k * ss] =                                          \
            rl__hsum_ps(_mm256_add_ps(acc0[k], acc1[k]));                                          \
    }

RL_DOT_SIGNED(rl__dotT_q4_0, rl_block_q4_0, rl__w_q4_0, RL_WS_F16)
RL_DOT_SIGNED(rl__dotT_q5_0, rl_block_q5_0, rl__w_q5_0, RL_WS_F16)
RL_DOT_SIGNED(rl__dotT_q8_0, rl_block_q8_0, rl__w_q8_0, RL_WS_F16)
RL_DOT_SIGNED(rl__dotT_iq4_nl, rl_block_iq4_nl, rl__w_iq4_nl, RL_WS_F16)
RL_DOT_SIGNED(rl__dotT_mxfp4, rl_block_mxfp4, rl__w_mxfp4, rl__ws_e8m0)

/* Block i of an affine type (q4_1, q5_1) against q8_1: d*dx*sum(q*y) +
 * m*s_x.  One multiply gives both products: lanes 0 and 1 of (d, m) *
 * (dx, s_x); the min terms are summed in lane 1 of summ (lanes 0, 2, 3 are
 * never read). */
#define RL_BLK_AFFINE(UNPACK, acc, summ)                                                           \
    do {                                                                                           \
        const __m128 dmw = rl__h4(&w[i_].d);                                                       \
        const __m256i qw = UNPACK(&w[i_]);                                                         \
        RL_UNROLL for (int k = 0; k < T; k++) {                                                    \
            const rl_block_q8_1 *x = &XB(rl_block_q8_1, k, i_);                                    \
            __m128 p = _mm_mul_ps(dmw, rl__h4(&x->d));                                             \
            summ[k] = _mm_add_ps(summ[k], p);                                                      \
            __m256i qx = _mm256_loadu_si256((const __m256i *)x->qs);                               \
            __m256 d = _mm256_broadcastss_ps(p);                                                   \
            acc[k] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(RL_DOT_MADD(qw, qx)), acc[k]);          \
        }                                                                                          \
    } while (0)

#define RL_DOT_AFFINE(NAME, WTYPE, UNPACK)                                                         \
    RL_AI void NAME(int64_t n, float *s, size_t ss, const void *vw, const void *vx, size_t xs,     \
                    const int T) {                                                                 \
        const WTYPE *w = vw;                                                                       \
        __m256 acc0[RL_TMAX], acc1[RL_TMAX];                                                       \
        __m128 summ0[RL_TMAX], summ1[RL_TMAX];                                                     \
        RL_UNROLL for (int k = 0; k < T; k++) {                                                    \
            acc0[k] = acc1[k] = _mm256_setzero_ps();                                               \
            summ0[k] = summ1[k] = _mm_setzero_ps();                                                \
        }                                                                                          \
        const int64_t nb = n / 32;                                                                 \
        int64_t i_ = 0;                                                                            \
        for (; i_ + 2 <= nb; i_ += 2) {                                                            \
            RL_PF1(&w[i_]);                                                                        \
            RL_BLK_AFFINE(UNPACK, acc0, summ0);                                                    \
            i_++;                                                                                  \
            RL_BLK_AFFINE(UNPACK, acc1, summ1);                                                    \
            i_--;                                                                                  \
        }                                                                                          \
        if (i_ < nb) RL_BLK_AFFINE(UNPACK, acc0, summ0);                                           \
        RL_UNROLL for (int k = 0; k < T; k++) {                                                    \
            __m128 sm = _mm_add_ss(_mm_movehdup_ps(summ0[k]), _mm_movehdup_ps(summ1[k]));          \
            s[k * ss] = rl__hsum_ps(_mm256_add_ps(acc0[k], acc1[k])) + _mm_cvtss_f32(sm);          \
        }                                                                                          \
    }

RL_DOT_AFFINE(rl__dotT_q4_1, rl_block_q4_1, rl__w_q4_1)
RL_DOT_AFFINE(rl__dotT_q5_1, rl_block_q5_1, rl__w_q5_1)

/* ======================= ymm K-quant templates =======================
 * One weight row against T q8_K activation rows, one 256-element
 * super-block at a time: the block's exact integer sum, as 8 int32 lanes,
 * is built with RL_DOT_MADDW (int16 pair products x int16 sub-block
 * scales), converted once and fused with d*dx into acc[k]; result
 * hsum(acc).  Offsets and minimums are folded in through the q8_K bsums
 * (exact int32 lanes), so the weight codes stay unsigned for vpmaddubsw.
 *
 * The sub-block scales of 32 elements j = 0..3 of a 128-element half as
 * int16: scb holds scales 8h..8h+7 in both 128-bit lanes; chunk j uses
 * scale 8h+2j in lane 0 (its first 16 elements) and 8h+2j+1 in lane 1. */
RL_AI __m256i rl__kscale_pair(__m256i scb, int j) {
    return _mm256_shuffle_epi8(
        scb, _mm256_set_m128i(_mm_set1_epi16((short)(((4 * j + 3) << 8) | (4 * j + 2))),
                              _mm_set1_epi16((short)(((4 * j + 1) << 8) | (4 * j)))));
}
/* Half h (scales 8h..8h+7) of 16 int16 scales, in both 128-bit lanes. */
RL_AI __m256i rl__khalf(__m256i sc16, int h) {
    return _mm256_broadcastsi128_si256(h ? _mm256_extracti128_si256(sc16, 1)
                                         : _mm256_castsi256_si128(sc16));
}

/* acc + (dx*d) * sumi: the end of a super-block without minimums (q3_K,
 * q6_K, iq4_xs). */
RL_AI __m256 rl__kfuse(__m256 acc, const rl_block_q8_K *x, __m256i sumi, float dw) {
    return _mm256_fmadd_ps(_mm256_set1_ps(x->d * dw), _mm256_cvtepi32_ps(sumi), acc);
}

/* The 8 6-bit scales and mins of a q4_K/q5_K super-block as int16:
 * *sc = [sc0..sc7 | sc0..sc7] (both 128-bit lanes), *mins = each min
 * twice, [m0 m0 m1 m1 m2 m2 m3 m3 | m4 m4 .. m7 m7], to pair with the
 * sixteen 16-element sums of a q8_K block. */
RL_AI void rl__k4_scales(const uint8_t *q, __m256i *sc, __m256i *mins) {
    uint32_t u[3];
    memcpy(u, q, 12);
    uint32_t s_lo = u[0] & 0x3f3f3f3fu;
    uint32_t s_hi = (u[2] & 0x0f0f0f0fu) | ((u[0] >> 2) & 0x30303030u);
    uint32_t m_lo = u[1] & 0x3f3f3f3fu;
    uint32_t m_hi = ((u[2] >> 4) & 0x0f0f0f0fu) | ((u[1] >> 2) & 0x30303030u);
    __m256i v = _mm256_cvtepu8_epi16(_mm_set_epi32((int)m_hi, (int)m_lo, (int)s_hi, (int)s_lo));
    __m128i m16 = _mm256_extracti128_si256(v, 1);
    *sc = _mm256_broadcastsi128_si256(_mm256_castsi256_si128(v));
    *mins = _mm256_set_m128i(_mm_unpackhi_epi16(m16, m16), _mm_unpacklo_epi16(m16, m16));
}

/* acc + (dx*d) * sumi - (dx*dmin) * (bsums . mins): the end of a
 * super-block with minimums (q2_K, q4_K, q5_K; mins pairs with the sixteen
 * q8_K 16-element sums). */
RL_AI __m256 rl__kfuse_min(__m256 acc, const rl_block_q8_K *x, __m256i sumi, __m256i mins, float dw,
                           float dmw) {
    __m256i mk = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)x->bsums), mins);
    acc = _mm256_fmadd_ps(_mm256_set1_ps(x->d * dw), _mm256_cvtepi32_ps(sumi), acc);
    return _mm256_fnmadd_ps(_mm256_set1_ps(x->d * dmw), _mm256_cvtepi32_ps(mk), acc);
}

/* The end of a q4_K / q5_K super-block for one token: rl__kfuse_min into
 * the vec-dot's lanes, or (TQ) the fast tiles' reduction (rl__tile8.dot_row):
 * the integer sums reduced to one int each and fused into the scalar
 * accumulator with the tile's float operations. */
RL_AI void rl__kend_min(__m256 *acc, float *acs, const rl_block_q8_K *xk, __m256i sumi,
                        __m256i mins, float dw, float dmw, const int TQ) {
    if (TQ) {
        const __m256i b = _mm256_loadu_si256((const __m256i *)xk->bsums);
        const float isum = (float)rl__hsum_epi32(sumi);
        const float msum = (float)rl__hsum_epi32(_mm256_madd_epi16(b, mins));
        *acs = fmaf(dw * xk->d, isum, *acs);
        *acs = fmaf(-(dmw * xk->d), msum, *acs);
    } else {
        *acc = rl__kfuse_min(*acc, xk, sumi, mins, dw, dmw);
    }
}

/* The end of a q3_K / q6_K super-block for one token: rl__kfuse into the
 * vec-dot's lanes, or (TQ) the fast tiles' reduction (rl__tile8.dot_row):
 * the integer sums reduced to one int, fused into the scalar accumulator
 * as the tile does. */
RL_AI void rl__kend(__m256 *acc, float *acs, const rl_block_q8_K *xk, __m256i sumi, float dw,
                    const int TQ) {
    if (TQ)
        *acs = fmaf(dw * xk->d, (float)rl__hsum_epi32(sumi), *acs);
    else
        *acc = rl__kfuse(*acc, xk, sumi, dw);
}

/* The fast tiles' integers of a super-block for T tokens (rl__tile8.dot_row):
 * t[2k] = the sum of sumi[k]'s lanes, t[2k + 1] = that of token k's (vx)
 * bsums times m (int16 pairs), all 2T reduced at once (exact). */
RL_AI void rl__tq_sums(const __m256i *sumi, __m256i m, const void *vx, size_t xs, int64_t i,
                       const int T, int32_t t[8]) {
    __m256i v[8];
    RL_UNROLL for (int k = 0; k < 4; k++) {
        v[2 * k] = k < T ? sumi[k] : _mm256_setzero_si256();
        v[2 * k + 1] =
            k < T ? _mm256_madd_epi16(
                        _mm256_loadu_si256((const __m256i *)XB(rl_block_q8_K, k, i).bsums), m)
                  : _mm256_setzero_si256();
    }
    rl__hsum8_epi32(v, t);
}

/* q2_K: w = d*sc*q - dmin*m per 16 elements (q 0..3, sc and m 0..15):
 * sum_e w_e*y_e = d * sum(sc*q*y) - dmin * sum_g m_g * bsum_g.  TQ (a
 * constant): the fast tiles' reduction instead (rl__tile8.dot_row). */
RL_AI void rl__dotTQ_q2_K(int64_t n, float *s, size_t ss, const void *vw, const void *vx, size_t xs,
                          const int T, const int TQ) {
    const rl_block_q2_K *w = vw;
    const __m256i m3 = _mm256_set1_epi8(3), m4 = _mm256_set1_epi8(0x0F);
    __m256 acc[RL_TMAX];
    float acs[RL_TMAX];
    RL_UNROLL for (int k = 0; k < T; k++) {
        acc[k] = _mm256_setzero_ps();
        acs[k] = 0.0f;
    }
    for (int64_t i = 0; i < n / RL_QK_K; i++) {
        RL_PF3(&w[i]); /* see avx2-impl.h */
        const __m128i sb = _mm_loadu_si128((const __m128i *)w[i].scales);
        const __m256i sc16 = _mm256_cvtepu8_epi16(_mm_and_si128(sb, _mm256_castsi256_si128(m4)));
        const __m256i mins = _mm256_cvtepu8_epi16(
            _mm_srli_epi16(_mm_andnot_si128(_mm256_castsi256_si128(m4), sb), 4));
        __m256i sumi[RL_TMAX];
        RL_UNROLL for (int k = 0; k < T; k++) sumi[k] = _mm256_setzero_si256();
        RL_UNROLL for (int h = 0; h < 2; h++) {
            const __m256i qb = _mm256_loadu_si256((const __m256i *)(w[i].qs + 32 * h));
            const __m256i scb = rl__khalf(sc16, h);
            RL_UNROLL for (int j = 0; j < 4; j++) {
                const __m256i q = _mm256_and_si256(_mm256_srli_epi16(qb, 2 * j), m3);
                const __m256i scv = rl__kscale_pair(scb, j);
                RL_UNROLL for (int k = 0; k < T; k++) {
                    const int8_t *y = XB(rl_block_q8_K, k, i).qs + 128 * h + 32 * j;
                    __m256i yk = _mm256_loadu_si256((const __m256i *)y);
                    sumi[k] = RL_DOT_MADDW(sumi[k], _mm256_maddubs_epi16(q, yk), scv);
                }
            }
        }
        const float dw = rl__f16(w[i].d), dmw = rl__f16(w[i].dmin);
        if (TQ) { /* rl__kend_min's integers, the 2T sums at once */
            int32_t t[8];
            rl__tq_sums(sumi, mins, vx, xs, i, T, t);
            RL_UNROLL for (int k = 0; k < T; k++) {
                const float xd = XB(rl_block_q8_K, k, i).d;
                acs[k] = fmaf(dw * xd, (float)t[2 * k], acs[k]);
                acs[k] = fmaf(-(dmw * xd), (float)t[2 * k + 1], acs[k]);
            }
        } else {
            RL_UNROLL for (int k = 0; k < T; k++) acc[k] =
                rl__kfuse_min(acc[k], &XB(rl_block_q8_K, k, i), sumi[k], mins, dw, dmw);
        }
    }
    RL_UNROLL for (int k = 0; k < T; k++) s[k * ss] = TQ ? acs[k] : rl__hsum_ps(acc[k]);
}
RL_AI void rl__dotT_q2_K(int64_t n, float *s, size_t ss, const void *vw, const void *vx, size_t xs,
                         const int T) {
    rl__dotTQ_q2_K(n, s, ss, vw, vx, xs, T, 0);
}

/* The 16 6-bit scales of a q3_K super-block, minus 32, as int16 (scale j:
 * low 4 bits from byte j%8, high nibble when j >= 8; high 2 bits from
 * byte 8 + j%4, bits 2(j/4)..2(j/4)+1). */
RL_AI __m256i rl__q3k_scales(const uint8_t *q) {
    uint32_t u[3];
    memcpy(u, q, 12);
    const uint32_t m4 = 0x0f0f0f0fu, m2 = 0x03030303u;
    uint32_t s0 = (u[0] & m4) | (u[2] & m2) << 4;
    uint32_t s1 = (u[1] & m4) | ((u[2] >> 2) & m2) << 4;
    uint32_t s2 = ((u[0] >> 4) & m4) | ((u[2] >> 4) & m2) << 4;
    uint32_t s3 = ((u[1] >> 4) & m4) | ((u[2] >> 6) & m2) << 4;
    __m128i v = _mm_sub_epi8(_mm_set_epi32((int)s3, (int)s2, (int)s1, (int)s0), _mm_set1_epi8(32));
    return _mm256_cvtepi8_epi16(v);
}

/* q3_K: w = d*sc*(u - 4) per 16 elements, u = 2 low bits | hmask bit << 2
 * (0..7; the stored bit set means no -4), sc = 6-bit scale - 32:
 * sum_e w_e*y_e = d * (sum(sc*u*y) - 4 * sum_g sc_g * bsum_g).  TQ (a
 * constant): the fast tiles' reduction instead (rl__tile8.dot_row: q3_K
 * runs the q6_K tile, rl__pack_q3_K_x8), the same exact integer per
 * super-block fused into a scalar accumulator. */
RL_AI void rl__dotTQ_q3_K(int64_t n, float *s, size_t ss, const void *vw, const void *vx, size_t xs,
                          const int T, const int TQ) {
    const rl_block_q3_K *w = vw;
    const __m256i m3 = _mm256_set1_epi8(3), m4 = _mm256_set1_epi8(4);
    __m256 acc[RL_TMAX];
    float acs[RL_TMAX];
    RL_UNROLL for (int k = 0; k < T; k++) {
        acc[k] = _mm256_setzero_ps();
        acs[k] = 0.0f;
    }
    for (int64_t i = 0; i < n / RL_QK_K; i++) {
        RL_PF3(&w[i]);
        const __m256i sc16 = rl__q3k_scales(w[i].scales);
        const __m256i hm = _mm256_loadu_si256((const __m256i *)w[i].hmask);
        __m256i sumi[RL_TMAX];
        RL_UNROLL for (int k = 0; k < T; k++) {
            __m256i b = _mm256_loadu_si256((const __m256i *)XB(rl_block_q8_K, k, i).bsums);
            sumi[k] = _mm256_sub_epi32(_mm256_setzero_si256(),
                                       _mm256_slli_epi32(_mm256_madd_epi16(b, sc16), 2));
        }
        RL_UNROLL for (int h = 0; h < 2; h++) {
            const __m256i qb = _mm256_loadu_si256((const __m256i *)(w[i].qs + 32 * h));
            const __m256i scb = rl__khalf(sc16, h);
            RL_UNROLL for (int j = 0; j < 4; j++) {
                /* element 128h + 32j + l: hmask[l] bit 4h + j, moved to bit 2 */
                const __m256i hi =
                    _mm256_and_si256(_mm256_slli_epi16(_mm256_srli_epi16(hm, 4 * h + j), 2), m4);
                const __m256i q =
                    _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(qb, 2 * j), m3), hi);
                const __m256i scv = rl__kscale_pair(scb, j);
                RL_UNROLL for (int k = 0; k < T; k++) {
                    const int8_t *y = XB(rl_block_q8_K, k, i).qs + 128 * h + 32 * j;
                    __m256i yk = _mm256_loadu_si256((const __m256i *)y);
                    sumi[k] = RL_DOT_MADDW(sumi[k], _mm256_maddubs_epi16(q, yk), scv);
                }
            }
        }
        const float dw = rl__f16(w[i].d);
        RL_UNROLL for (int k = 0; k < T; k++)
            rl__kend(&acc[k], &acs[k], &XB(rl_block_q8_K, k, i), sumi[k], dw, TQ);
    }
    RL_UNROLL for (int k = 0; k < T; k++) s[k * ss] = TQ ? acs[k] : rl__hsum_ps(acc[k]);
}
RL_AI void rl__dotT_q3_K(int64_t n, float *s, size_t ss, const void *vw, const void *vx, size_t xs,
                         const int T) {
    rl__dotTQ_q3_K(n, s, ss, vw, vx, xs, T, 0);
}

/* q5_K: w = d*sc*q - dmin*m per 32 elements (q 0..31: the nibble of
 * q4_K's layout | bit e/32 of qh[e%32] << 4; sc, m 6-bit, rl_scale_min_k4):
 * sum_e w_e*y_e = d * sum(sc*q*y) - dmin * sum_g m_(g/2) * bsum_g. */
/* TQ (a constant): the fast tiles' reduction instead (rl__tile8.dot_row,
 * as avx2_dot4.c's q4_K): the super-block's integer sums reduced to one
 * int each and fused into a scalar accumulator with the tile's float
 * operations. */
RL_AI void rl__dotTQ_q5_K(int64_t n, float *s, size_t ss, const void *vw, const void *vx, size_t xs,
                          const int T, const int TQ) {
    const rl_block_q5_K *w = vw;
    const __m256i m4 = _mm256_set1_epi8(0x0F), m16 = _mm256_set1_epi8(0x10);
    __m256 acc[RL_TMAX];
    float acs[RL_TMAX];
    RL_UNROLL for (int k = 0; k < T; k++) {
        acc[k] = _mm256_setzero_ps();
        acs[k] = 0.0f;
    }
    for (int64_t i = 0; i < n / RL_QK_K; i++) {
        RL_PF3(&w[i]);
        __m256i scb, mins;
        rl__k4_scales(w[i].scales, &scb, &mins);
        const __m256i qh = _mm256_loadu_si256((const __m256i *)w[i].qh);
        __m256i sumi[RL_TMAX];
        RL_UNROLL for (int k = 0; k < T; k++) sumi[k] = _mm256_setzero_si256();
        RL_UNROLL for (int j = 0; j < 4; j++) {
            /* sub-block 2j: low nibbles, qh bit 2j; 2j+1: high nibbles, bit 2j+1 (moved to bit 4)
             */
            const __m256i qb = _mm256_loadu_si256((const __m256i *)(w[i].qs + 32 * j));
            const __m256i h0 = _mm256_slli_epi16(_mm256_srli_epi16(qh, 2 * j), 4);
            const __m256i h1 = _mm256_slli_epi16(_mm256_srli_epi16(qh, 2 * j + 1), 4);
            const __m256i lo = _mm256_or_si256(_mm256_and_si256(qb, m4), _mm256_and_si256(h0, m16));
            const __m256i hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(qb, 4), m4),
                                               _mm256_and_si256(h1, m16));
            const __m256i s0 = _mm256_shuffle_epi8(
                              scb, _mm256_set1_epi16((short)(((4 * j + 1) << 8) | (4 * j)))),
                          s1 = _mm256_shuffle_epi8(
                              scb, _mm256_set1_epi16((short)(((4 * j + 3) << 8) | (4 * j + 2))));
            RL_UNROLL for (int k = 0; k < T; k++) {
                const int8_t *y = XB(rl_block_q8_K, k, i).qs + 64 * j;
                __m256i y0 = _mm256_loadu_si256((const __m256i *)y);
                __m256i y1 = _mm256_loadu_si256((const __m256i *)(y + 32));
                sumi[k] = RL_DOT_MADDW(sumi[k], _mm256_maddubs_epi16(lo, y0), s0);
                sumi[k] = RL_DOT_MADDW(sumi[k], _mm256_maddubs_epi16(hi, y1), s1);
            }
        }
        const float dw = rl__f16(w[i].d), dmw = rl__f16(w[i].dmin);
        RL_UNROLL for (int k = 0; k < T; k++)
            rl__kend_min(&acc[k], &acs[k], &XB(rl_block_q8_K, k, i), sumi[k], mins, dw, dmw, TQ);
    }
    RL_UNROLL for (int k = 0; k < T; k++) s[k * ss] = TQ ? acs[k] : rl__hsum_ps(acc[k]);
}
RL_AI void rl__dotT_q5_K(int64_t n, float *s, size_t ss, const void *vw, const void *vx, size_t xs,
                         const int T) {
    rl__dotTQ_q5_K(n, s, ss, vw, vx, xs, T, 0);
}

/* iq4_xs: w = d*(ls - 32)*v per 32 elements, v the iq4_nl codebook value
 * (signed, -127..113: the sign trick of the 32-element types, |v| x
 * sign(y, v) in vpmaddubsw, at most 2*127*127 per pair). */
RL_AI void rl__dotTQ_iq4_xs(int64_t n, float *s, size_t ss, const void *vw, const void *vx,
                            size_t xs, const int T, const int TQ) {
    const rl_block_iq4_xs *w = vw;
    const __m256i tbl = rl__iq4nl_tbl();
    __m256 acc[RL_TMAX];
    float acs[RL_TMAX];
    RL_UNROLL for (int k = 0; k < T; k++) {
        acc[k] = _mm256_setzero_ps();
        acs[k] = 0.0f;
    }
    for (int64_t i = 0; i < n / RL_QK_K; i++) {
        RL_PF3(&w[i]);
        uint32_t sl;
        memcpy(&sl, w[i].scales_l, 4);
        const uint32_t sh = w[i].scales_h;
        __m256i sumi[RL_TMAX];
        RL_UNROLL for (int k = 0; k < T; k++) sumi[k] = _mm256_setzero_si256();
        int lsv[8];
        RL_UNROLL for (int ib = 0; ib < RL_QK_K / 32; ib++) {
            const int ls = (int)(((sl >> (4 * ib)) & 0xF) | ((sh >> (2 * ib)) & 3) << 4) - 32;
            lsv[ib] = ls;
            const __m256i scv = _mm256_set1_epi16((short)ls);
            const __m256i qw = _mm256_shuffle_epi8(tbl, rl__nib32(w[i].qs + 16 * ib));
            const __m256i aw = _mm256_sign_epi8(qw, qw);
            RL_UNROLL for (int k = 0; k < T; k++) {
                const int8_t *y = XB(rl_block_q8_K, k, i).qs + 32 * ib;
                __m256i yk = _mm256_loadu_si256((const __m256i *)y);
                sumi[k] =
                    RL_DOT_MADDW(sumi[k], _mm256_maddubs_epi16(aw, _mm256_sign_epi8(yk, qw)), scv);
            }
        }
        const float dw = rl__f16(w[i].d);
        if (TQ) { /* the tile's integers: sum (ls - 32)(v + 128) x = S + 128 M, M */
            const __m256i lsd =
                _mm256_setr_epi16((short)lsv[0], (short)lsv[0], (short)lsv[1], (short)lsv[1],
                                  (short)lsv[2], (short)lsv[2], (short)lsv[3], (short)lsv[3],
                                  (short)lsv[4], (short)lsv[4], (short)lsv[5], (short)lsv[5],
                                  (short)lsv[6], (short)lsv[6], (short)lsv[7], (short)lsv[7]);
            int32_t t[8];
            rl__tq_sums(sumi, lsd, vx, xs, i, T, t);
            RL_UNROLL for (int k = 0; k < T; k++) {
                const float xd = XB(rl_block_q8_K, k, i).d;
                acs[k] = fmaf(dw * xd, (float)(t[2 * k] + 128 * t[2 * k + 1]), acs[k]);
                acs[k] = fmaf(-(128.0f * dw * xd), (float)t[2 * k + 1], acs[k]);
            }
        } else {
            RL_UNROLL for (int k = 0; k < T; k++) acc[k] =
                rl__kfuse(acc[k], &XB(rl_block_q8_K, k, i), sumi[k], dw);
        }
    }
    RL_UNROLL for (int k = 0; k < T; k++) s[k * ss] = TQ ? acs[k] : rl__hsum_ps(acc[k]);
}
RL_AI void rl__dotT_iq4_xs(int64_t n, float *s, size_t ss, const void *vw, const void *vx,
                           size_t xs, const int T) {
    rl__dotTQ_iq4_xs(n, s, ss, vw, vx, xs, T, 0);
}

#ifdef RL_RMAX

/* R rows, one token (rl__vec_dot2r_fn at R = 2): RL_BLK_SIGNED at T = 1
 * for each row, the activation block loaded and its scale converted once. */
#define RL_BLK_SIGNED_R(WTYPE, UNPACK, WSCALE, acc)                                                \
    do {                                                                                           \
        const rl_block_q8_0 *x = &((const rl_block_q8_0 *)vx)[i_];                                 \
        const __m256i qx = _mm256_loadu_si256((const __m256i *)x->qs);                             \
        const __m128 dx = rl__h4(&x->d);                                                           \
        RL_UNROLL for (int r = 0; r < R; r++) {                                                    \
            const WTYPE *b_ = &WR(WTYPE, r)[i_];                                                   \
            const __m256i qw = UNPACK(b_);                                                         \
            __m256i sum = RL_DOT_MADD(_mm256_sign_epi8(qw, qw), _mm256_sign_epi8(qx, qw));         \
            __m256 d = _mm256_broadcastss_ps(_mm_mul_ss(WSCALE(b_), dx));                          \
            acc[r] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(sum), acc[r]);                          \
        }                                                                                          \
    } while (0)

/* Row r of the R-row templates (rows wrs bytes apart from vw). */
#define WR(type, r) ((const type *)((const uint8_t *)vw + (size_t)(r)*wrs))

#define RL_DOT_SIGNED_R(NAME, WTYPE, UNPACK, WSCALE)                                               \
    RL_AI void NAME(int64_t n, float *s, const void *vw, size_t wrs, const void *vx,               \
                    const int R) {                                                                 \
        __m256 acc0[RL_RMAX], acc1[RL_RMAX];                                                       \
        RL_UNROLL for (int r = 0; r < R; r++) acc0[r] = acc1[r] = _mm256_setzero_ps();             \
        const int64_t nb = n / 32;                                                                 \
        int64_t i_ = 0;                                                                            \
        for (; i_ + 2 <= nb; i_ += 2) {                                                            \
            RL_UNROLL for (int r = 0; r < R; r++) RL_PF1(&WR(WTYPE, r)[i_]);                       \
            RL_BLK_SIGNED_R(WTYPE, UNPACK, WSCALE, acc0);                                          \
            i_++;                                                                                  \
            RL_BLK_SIGNED_R(WTYPE, UNPACK, WSCALE, acc1);                                          \
            i_--;                                                                                  \
        }                                                                                          \
        if (i_ < nb) RL_BLK_SIGNED_R(WTYPE, UNPACK, WSCALE, acc0);                                 \
        RL_UNROLL for (int r = 0; r < R; r++) s[r] = rl__hsum_ps(_mm256_add_ps(acc0[r], acc1[r])); \
    }

RL_DOT_SIGNED_R(rl__dotR_q4_0, rl_block_q4_0, rl__w_q4_0, RL_WS_F16)
RL_DOT_SIGNED_R(rl__dotR_q5_0, rl_block_q5_0, rl__w_q5_0, RL_WS_F16)
RL_DOT_SIGNED_R(rl__dotR_q8_0, rl_block_q8_0, rl__w_q8_0, RL_WS_F16)
RL_DOT_SIGNED_R(rl__dotR_iq4_nl, rl_block_iq4_nl, rl__w_iq4_nl, RL_WS_F16)
RL_DOT_SIGNED_R(rl__dotR_mxfp4, rl_block_mxfp4, rl__w_mxfp4, rl__ws_e8m0)

/* R rows of an affine type, one token: RL_BLK_AFFINE at T = 1 per row,
 * the activation block loaded and its scales converted once. */
#define RL_BLK_AFFINE_R(WTYPE, UNPACK, acc, summ)                                                  \
    do {                                                                                           \
        const rl_block_q8_1 *x = &((const rl_block_q8_1 *)vx)[i_];                                 \
        const __m128 dx = rl__h4(&x->d);                                                           \
        const __m256i qx = _mm256_loadu_si256((const __m256i *)x->qs);                             \
        RL_UNROLL for (int r = 0; r < R; r++) {                                                    \
            const WTYPE *b_ = &WR(WTYPE, r)[i_];                                                   \
            __m128 p = _mm_mul_ps(rl__h4(&b_->d), dx);                                             \
            summ[r] = _mm_add_ps(summ[r], p);                                                      \
            __m256i sum = RL_DOT_MADD(UNPACK(b_), qx);                                             \
            acc[r] = _mm256_fmadd_ps(_mm256_broadcastss_ps(p), _mm256_cvtepi32_ps(sum), acc[r]);   \
        }                                                                                          \
    } while (0)

#define RL_DOT_AFFINE_R(NAME, WTYPE, UNPACK)                                                       \
    RL_AI void NAME(int64_t n, float *s, const void *vw, size_t wrs, const void *vx,               \
                    const int R) {                                                                 \
        __m256 acc0[RL_RMAX], acc1[RL_RMAX];                                                       \
        __m128 summ0[RL_RMAX], summ1[RL_RMAX];                                                     \
        RL_UNROLL for (int r = 0; r < R; r++) {                                                    \
            acc0[r] = acc1[r] = _mm256_setzero_ps();                                               \
            summ0[r] = summ1[r] = _mm_setzero_ps();                                                \
        }                                                                                          \
        const int64_t nb = n / 32;                                                                 \
        int64_t i_ = 0;                                                                            \
        for (; i_ + 2 <= nb; i_ += 2) {                                                            \
            RL_UNROLL for (int r = 0; r < R; r++) RL_PF1(&WR(WTYPE, r)[i_]);                       \
            RL_BLK_AFFINE_R(WTYPE, UNPACK, acc0, summ0);                                           \
            i_++;                                                                                  \
            RL_BLK_AFFINE_R(WTYPE, UNPACK, acc1, summ1);                                           \
            i_--;                                                                                  \
        }                                                                                          \
        if (i_ < nb) RL_BLK_AFFINE_R(WTYPE, UNPACK, acc0, summ0);                                  \
        RL_UNROLL for (int r = 0; r < R; r++) {                                                    \
            __m128 sm = _mm_add_ss(_mm_movehdup_ps(summ0[r]), _mm_movehdup_ps(summ1[r]));          \
            s[r] = rl__hsum_ps(_mm256_add_ps(acc0[r], acc1[r])) + _mm_cvtss_f32(sm);               \
        }                                                                                          \
    }

RL_DOT_AFFINE_R(rl__dotR_q4_1, rl_block_q4_1, rl__w_q4_1)
RL_DOT_AFFINE_R(rl__dotR_q5_1, rl_block_q5_1, rl__w_q5_1)

#endif /* RL_RMAX */

#endif
