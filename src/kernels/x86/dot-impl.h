/* The quantized vec-dot code shared by the AVX2 table (avx2_dot4.c) and
 * the AVX512-VNNI table (vnni_dot.c): weight-block unpackers and scale
 * loads, and the templates of the 32-element block types (q4_0, q5_0,
 * q8_0 against q8_0; q4_1 against q8_1), which differ between the tiers
 * only in the int8 multiply-add (RL_DOT_MADD, below).  Each tier file
 * includes this once, compiled with its own flags (Makefile), so the
 * AVX-512 encodings stay in the VNNI objects; the K-quant templates (whose
 * data layout differs: ymm vs zmm) stay in the tier files. */
#ifndef RL_KERNELS_X86_DOT_IMPL_H
#define RL_KERNELS_X86_DOT_IMPL_H

#include <string.h>

#include "kernels/x86/avx2-impl.h"

#define RL_AI static inline __attribute__((always_inline))
/* Token and sub-block loops must be unrolled so accumulators stay in
 * registers. */
#define RL_UNROLL _Pragma("GCC unroll 8")

static inline float rl__f16(rl_fp16 h) { return _cvtsh_ss(h); }

/* The first 4 fp16 values at p as floats (one vcvtph2ps from memory; reads
 * 8 bytes, which every 32-element block has after its scale). */
RL_AI __m128 rl__h4(const void *p) { return _mm_cvtph_ps(_mm_loadl_epi64((const __m128i *)p)); }

/* 16 bytes of packed nibbles -> 32 bytes, low nibbles then high nibbles
 * (same result as rl__nibbles32, one uop fewer). */
RL_AI __m256i rl__nib32(const uint8_t *p) {
    __m256i b = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)p));
    b = _mm256_srlv_epi64(b, _mm256_set_epi64x(4, 4, 0, 0));
    return _mm256_and_si256(b, _mm256_set1_epi8(0x0F));
}

/* Activation block i of token k (rows xs bytes apart; the templates name
 * their activation pointer vx and row stride xs). */
#define XB(type, k, i) (((const type *)((const uint8_t *)vx + (size_t)(k) * xs))[i])

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
RL_AI __m256i rl__w_q8_0(const rl_block_q8_0 *b) { return _mm256_loadu_si256((const __m256i *)b->qs); }

/* ======================= 32-element block templates =======================
 * Written once, compiled per tier: the includer defines, before including
 * this header,
 *   RL_TMAX            the largest token tile T of the rl__dotT_* templates;
 *   RL_DOT_MADD(u, s)  the int8 multiply-add: unsigned bytes u (0..128) x
 *                      signed bytes s (-127..127) -> 8 int32 lanes, lane l
 *                      the sum of the 4 byte products 4l..4l+3 (AVX2:
 *                      vpmaddubsw + vpmaddwd with ones, never saturating at
 *                      these ranges; AVX512-VNNI: vpdpbusd into zero; the
 *                      same exact integers);
 *   RL_RMAX (optional) the largest row count R of the rl__dotR_* (several
 *                      rows, one token) templates, generated only then.
 * Everything else a token sees (scale products, int->float conversions,
 * FMAs into the same accumulators, the horizontal sums) is this code in
 * both tiers, so the tiers agree bit for bit.  Reduction order: see
 * avx2_dot4.c. */
#if !defined(RL_TMAX) || !defined(RL_DOT_MADD)
#error "define RL_TMAX and RL_DOT_MADD before including kernels/x86/dot-impl.h"
#endif

/* Block i of a signed-weight type (q4_0, q5_0, q8_0) against q8_0
 * activations, fused into acc[k] for the T tokens. */
#define RL_BLK_SIGNED(WTYPE, UNPACK, acc)                                                          \
    do {                                                                                           \
        const WTYPE *b_ = &w[i_];                                                                  \
        const __m128 dw = rl__h4(&b_->d);                                                          \
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

#define RL_DOT_SIGNED(NAME, WTYPE, UNPACK)                                                         \
    RL_AI void NAME(int64_t n, float *s, size_t ss, const void *vw, const void *vx, size_t xs,     \
                    const int T) {                                                                 \
        const WTYPE *w = vw;                                                                       \
        __m256 acc0[RL_TMAX], acc1[RL_TMAX];                                                       \
        RL_UNROLL for (int k = 0; k < T; k++) acc0[k] = acc1[k] = _mm256_setzero_ps();             \
        const int64_t nb = n / 32;                                                                 \
        int64_t i_ = 0;                                                                            \
        for (; i_ + 2 <= nb; i_ += 2) {                                                            \
            if (T == 1) RL_PF1(&w[i_]); /* see avx2-impl.h */                                      \
            RL_BLK_SIGNED(WTYPE, UNPACK, acc0);                                                    \
            i_++;                                                                                  \
            RL_BLK_SIGNED(WTYPE, UNPACK, acc1);                                                    \
            i_--;                                                                                  \
        }                                                                                          \
        if (i_ < nb) RL_BLK_SIGNED(WTYPE, UNPACK, acc0);                                           \
        RL_UNROLL for (int k = 0; k < T; k++) s[k * ss] = rl__hsum_ps(_mm256_add_ps(acc0[k], acc1[k])); \
    }

RL_DOT_SIGNED(rl__dotT_q4_0, rl_block_q4_0, rl__w_q4_0)
RL_DOT_SIGNED(rl__dotT_q5_0, rl_block_q5_0, rl__w_q5_0)
RL_DOT_SIGNED(rl__dotT_q8_0, rl_block_q8_0, rl__w_q8_0)

/* Block i of q4_1 against q8_1: d*dx*sum(q*y) + m*s_x.  One multiply gives
 * both products: lanes 0 and 1 of (d, m) * (dx, s_x); the min terms are
 * summed in lane 1 of summ (lanes 0, 2, 3 are never read). */
#define RL_BLK_Q4_1(acc, summ)                                                                     \
    do {                                                                                           \
        const __m128 dmw = rl__h4(&w[i_].d);                                                       \
        const __m256i qw = rl__nib32(w[i_].qs);                                                    \
        RL_UNROLL for (int k = 0; k < T; k++) {                                                    \
            const rl_block_q8_1 *x = &XB(rl_block_q8_1, k, i_);                                    \
            __m128 p = _mm_mul_ps(dmw, rl__h4(&x->d));                                             \
            summ[k] = _mm_add_ps(summ[k], p);                                                      \
            __m256i qx = _mm256_loadu_si256((const __m256i *)x->qs);                               \
            __m256 d = _mm256_broadcastss_ps(p);                                                   \
            acc[k] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(RL_DOT_MADD(qw, qx)), acc[k]);          \
        }                                                                                          \
    } while (0)

RL_AI void rl__dotT_q4_1(int64_t n, float *s, size_t ss, const void *vw, const void *vx, size_t xs,
                         const int T) {
    const rl_block_q4_1 *w = vw;
    __m256 acc0[RL_TMAX], acc1[RL_TMAX];
    __m128 summ0[RL_TMAX], summ1[RL_TMAX];
    RL_UNROLL for (int k = 0; k < T; k++) {
        acc0[k] = acc1[k] = _mm256_setzero_ps();
        summ0[k] = summ1[k] = _mm_setzero_ps();
    }
    const int64_t nb = n / 32;
    int64_t i_ = 0;
    for (; i_ + 2 <= nb; i_ += 2) {
        if (T == 1) RL_PF1(&w[i_]);
        RL_BLK_Q4_1(acc0, summ0);
        i_++;
        RL_BLK_Q4_1(acc1, summ1);
        i_--;
    }
    if (i_ < nb) RL_BLK_Q4_1(acc0, summ0);
    RL_UNROLL for (int k = 0; k < T; k++) {
        __m128 sm = _mm_add_ss(_mm_movehdup_ps(summ0[k]), _mm_movehdup_ps(summ1[k]));
        s[k * ss] = rl__hsum_ps(_mm256_add_ps(acc0[k], acc1[k])) + _mm_cvtss_f32(sm);
    }
}

#ifdef RL_RMAX

/* R rows, one token (rl__vec_dot2r_fn at R = 2): RL_BLK_SIGNED at T = 1
 * for each row, the activation block loaded and its scale converted once. */
#define RL_BLK_SIGNED_R(WTYPE, UNPACK, acc)                                                        \
    do {                                                                                           \
        const rl_block_q8_0 *x = &((const rl_block_q8_0 *)vx)[i_];                                 \
        const __m256i qx = _mm256_loadu_si256((const __m256i *)x->qs);                             \
        const __m128 dx = rl__h4(&x->d);                                                           \
        RL_UNROLL for (int r = 0; r < R; r++) {                                                    \
            const WTYPE *b_ = &WR(WTYPE, r)[i_];                                                   \
            const __m256i qw = UNPACK(b_);                                                         \
            __m256i sum = RL_DOT_MADD(_mm256_sign_epi8(qw, qw), _mm256_sign_epi8(qx, qw));         \
            __m256 d = _mm256_broadcastss_ps(_mm_mul_ss(rl__h4(&b_->d), dx));                      \
            acc[r] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(sum), acc[r]);                          \
        }                                                                                          \
    } while (0)

/* Row r of the R-row templates (rows wrs bytes apart from vw). */
#define WR(type, r) ((const type *)((const uint8_t *)vw + (size_t)(r) * wrs))

#define RL_DOT_SIGNED_R(NAME, WTYPE, UNPACK)                                                       \
    RL_AI void NAME(int64_t n, float *s, const void *vw, size_t wrs, const void *vx, const int R) { \
        __m256 acc0[RL_RMAX], acc1[RL_RMAX];                                                       \
        RL_UNROLL for (int r = 0; r < R; r++) acc0[r] = acc1[r] = _mm256_setzero_ps();             \
        const int64_t nb = n / 32;                                                                 \
        int64_t i_ = 0;                                                                            \
        for (; i_ + 2 <= nb; i_ += 2) {                                                            \
            RL_UNROLL for (int r = 0; r < R; r++) RL_PF1(&WR(WTYPE, r)[i_]);                       \
            RL_BLK_SIGNED_R(WTYPE, UNPACK, acc0);                                                  \
            i_++;                                                                                  \
            RL_BLK_SIGNED_R(WTYPE, UNPACK, acc1);                                                  \
            i_--;                                                                                  \
        }                                                                                          \
        if (i_ < nb) RL_BLK_SIGNED_R(WTYPE, UNPACK, acc0);                                         \
        RL_UNROLL for (int r = 0; r < R; r++) s[r] = rl__hsum_ps(_mm256_add_ps(acc0[r], acc1[r])); \
    }

RL_DOT_SIGNED_R(rl__dotR_q4_0, rl_block_q4_0, rl__w_q4_0)
RL_DOT_SIGNED_R(rl__dotR_q5_0, rl_block_q5_0, rl__w_q5_0)
RL_DOT_SIGNED_R(rl__dotR_q8_0, rl_block_q8_0, rl__w_q8_0)

/* R rows of q4_1, one token: RL_BLK_Q4_1 at T = 1 per row, the
 * activation block loaded and its scales converted once. */
#define RL_BLK_Q4_1_R(acc, summ)                                                                   \
    do {                                                                                           \
        const rl_block_q8_1 *x = &((const rl_block_q8_1 *)vx)[i_];                                 \
        const __m128 dx = rl__h4(&x->d);                                                           \
        const __m256i qx = _mm256_loadu_si256((const __m256i *)x->qs);                             \
        RL_UNROLL for (int r = 0; r < R; r++) {                                                    \
            const rl_block_q4_1 *b_ = &WR(rl_block_q4_1, r)[i_];                                   \
            __m128 p = _mm_mul_ps(rl__h4(&b_->d), dx);                                             \
            summ[r] = _mm_add_ps(summ[r], p);                                                      \
            __m256i sum = RL_DOT_MADD(rl__nib32(b_->qs), qx);                                      \
            acc[r] = _mm256_fmadd_ps(_mm256_broadcastss_ps(p), _mm256_cvtepi32_ps(sum), acc[r]);   \
        }                                                                                          \
    } while (0)

RL_AI void rl__dotR_q4_1(int64_t n, float *s, const void *vw, size_t wrs, const void *vx,
                          const int R) {
    __m256 acc0[RL_RMAX], acc1[RL_RMAX];
    __m128 summ0[RL_RMAX], summ1[RL_RMAX];
    RL_UNROLL for (int r = 0; r < R; r++) {
        acc0[r] = acc1[r] = _mm256_setzero_ps();
        summ0[r] = summ1[r] = _mm_setzero_ps();
    }
    const int64_t nb = n / 32;
    int64_t i_ = 0;
    for (; i_ + 2 <= nb; i_ += 2) {
        RL_UNROLL for (int r = 0; r < R; r++) RL_PF1(&WR(rl_block_q4_1, r)[i_]);
        RL_BLK_Q4_1_R(acc0, summ0);
        i_++;
        RL_BLK_Q4_1_R(acc1, summ1);
        i_--;
    }
    if (i_ < nb) RL_BLK_Q4_1_R(acc0, summ0);
    RL_UNROLL for (int r = 0; r < R; r++) {
        __m128 sm = _mm_add_ss(_mm_movehdup_ps(summ0[r]), _mm_movehdup_ps(summ1[r]));
        s[r] = rl__hsum_ps(_mm256_add_ps(acc0[r], acc1[r])) + _mm_cvtss_f32(sm);
    }
}

#endif /* RL_RMAX */

#endif
