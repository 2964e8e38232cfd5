/* Helpers shared by the quantized vec-dot templates of the AVX2 table
 * (avx2_dot4.c) and the AVX512-VNNI table (vnni_dot.c): weight-block
 * unpackers and scale loads.  Each includer defines its own RL_TMAX (the
 * largest token tile) and block templates; these pieces are the same
 * instructions in both, so both tables unpack weights identically. */
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

#endif
