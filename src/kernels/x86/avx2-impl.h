/* Shared AVX2/FMA/F16C helpers for src/kernels/x86/ (compiled with
 * -mavx2 -mfma -mf16c; only reached through the dispatch table when the
 * CPU reports those features). */
#ifndef RL_KERNELS_AVX2_IMPL_H
#define RL_KERNELS_AVX2_IMPL_H

#include <immintrin.h>

#include "kernels/kernels-impl.h"

/* Decode (one token) streams each weight byte once from DRAM, and one core
 * cannot keep enough misses in flight on its own to reach the DRAM rate
 * (the L2 streamer alone gave 7-8 GB/s per core on Ice Lake-SP), so the
 * row-major matmul leaves (avx2_dot4.c, vnni_dot.c, dot-impl.h) prefetch
 * RL_PF_DIST bytes ahead into L2 at every token count: RL_PF3 (three lines)
 * per K-quant super-block (144 or 210 bytes), RL_PF1 per pair of 32-element
 * blocks (36-68 bytes).  3072 measured best among 512..4096 (kbench
 * 4096x4096 from DRAM, 1 and 2 threads: q4_K +25%, q6_K +15%, 32-element
 * types +10-30%).  With 2-8 tokens a call the rows are still read from DRAM
 * (an MoE expert with a few tokens, a small batch, a head per 8 tokens):
 * prefetching only at one token left 4-sequence decode 1.5-3.4x slower on
 * gpt-oss's MXFP4 experts and Qwen2.5-0.5B's q5_0/q8_0 rows.  A prefetch
 * past the end of the matrix is harmless (prefetches do not fault). */
#ifndef RL_PF_DIST
#define RL_PF_DIST 3072
#endif
/* rl_f32_to_fp16(f)'s bits by F16C: both round to nearest even, to
 * subnormal halves and to Inf alike; a NaN goes through the scalar code,
 * whose payload rule vcvtps2ph does not follow (it sets the quiet bit). */
static inline rl_fp16 rl__to_f16c(float f) {
    if (f != f) return rl_f32_to_fp16(f);
    return (rl_fp16)_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);
}

#define RL_PF1(p) _mm_prefetch((const char *)(p) + RL_PF_DIST, _MM_HINT_T1)
#define RL_PF3(p)                                                                                  \
    do {                                                                                           \
        const char *pf_ = (const char *)(p) + RL_PF_DIST;                                          \
        _mm_prefetch(pf_, _MM_HINT_T1);                                                            \
        _mm_prefetch(pf_ + 64, _MM_HINT_T1);                                                       \
        _mm_prefetch(pf_ + 128, _MM_HINT_T1);                                                      \
    } while (0)

static inline float rl__hsum_ps(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline int rl__hsum_epi32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtsi128_si32(s);
}

/* out[j] = the sum of v[j]'s 8 int32 lanes, for 8 vectors at once (exact:
 * the integer sums of the dot_row leaves). */
static inline void rl__hsum8_epi32(const __m256i v[8], int32_t out[8]) {
    const __m256i a =
        _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
    const __m256i b =
        _mm256_hadd_epi32(_mm256_hadd_epi32(v[4], v[5]), _mm256_hadd_epi32(v[6], v[7]));
    _mm_storeu_si128((__m128i *)out,
                     _mm_add_epi32(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1)));
    _mm_storeu_si128((__m128i *)(out + 4),
                     _mm_add_epi32(_mm256_castsi256_si128(b), _mm256_extracti128_si256(b, 1)));
}

/* exp(x) for float lanes: Cody-Waite range reduction and a degree-6
 * polynomial; max relative error about 2 ulp on [-87.3, 88.3]; inputs are
 * clamped to that range (so tiny results come out as ~1e-38, not 0). */
static inline __m256 rl__exp_ps(__m256 x) {
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.3f)), _mm256_set1_ps(88.3f));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500E-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507E-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073E-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894E-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459E-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201E-1f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    __m256i e =
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

/* Signed int8 x signed int8 -> 8 int32 lanes of pairwise-summed products.
 * x may contain -128 (|x| is read as unsigned 128); y must lie in
 * [-127, 127] (our activation quantizers guarantee it). */
static inline __m256i rl__mul_sum_i8(__m256i x, __m256i y) {
    __m256i ax = _mm256_sign_epi8(x, x);
    __m256i sy = _mm256_sign_epi8(y, x);
    return _mm256_madd_epi16(_mm256_maddubs_epi16(ax, sy), _mm256_set1_epi16(1));
}

/* Unsigned (0..127) x signed int8 -> 8 int32 lanes. */
static inline __m256i rl__mul_sum_u8i8(__m256i u, __m256i y) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, y), _mm256_set1_epi16(1));
}

/* 16 bytes of packed nibbles -> 32 bytes: low nibbles then high nibbles. */
static inline __m256i rl__nibbles32(const uint8_t *p) {
    __m128i t = _mm_loadu_si128((const __m128i *)p);
    __m256i b = _mm256_set_m128i(_mm_srli_epi16(t, 4), t);
    return _mm256_and_si256(b, _mm256_set1_epi8(0x0F));
}

/* 32 bits -> 32 bytes, 0xFF where the bit is set. */
static inline __m256i rl__bits32(uint32_t x) {
    const __m256i shuf = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202,
                                           0x0101010101010101, 0x0000000000000000);
    __m256i b = _mm256_shuffle_epi8(_mm256_set1_epi32((int)x), shuf);
    b = _mm256_or_si256(b, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));
    return _mm256_cmpeq_epi8(b, _mm256_set1_epi64x(-1));
}

void rl__avx2_fill_quant(rl__ktab *t);

/* (the resident q4_K tiles' scale decoding: tile-impl.h, amx_tile.c) */
/* Bytes j0, j1 of each row's 4 (row r at 4r..4r+3 of v) widened to int16
 * lanes 2r, 2r + 1. */
static inline __attribute__((always_inline)) __m256i rl__r8_pick(__m256i v, int j0, int j1) {
    const __m256i idx = _mm256_setr_epi8(
        (char)j0, (char)j1, (char)(4 + j0), (char)(4 + j1), (char)(8 + j0), (char)(8 + j1),
        (char)(12 + j0), (char)(12 + j1), -1, -1, -1, -1, -1, -1, -1, -1, (char)j0, (char)j1,
        (char)(4 + j0), (char)(4 + j1), (char)(8 + j0), (char)(8 + j1), (char)(12 + j0),
        (char)(12 + j1), -1, -1, -1, -1, -1, -1, -1, -1);
    const __m256i b =
        _mm256_permute4x64_epi64(_mm256_shuffle_epi8(v, idx), _MM_SHUFFLE(3, 1, 2, 0));
    return _mm256_cvtepu8_epi16(_mm256_castsi256_si128(b));
}

/* The 8 rows' packed 6-bit scales of one super-block (a resident q4_K or
 * q5_K block's sa, sb and sc: 96 bytes at s) decoded into the packed
 * tile's int16 vectors (rl__q4k_x8's sc and mn): vector j of sc at scb + j
 * * us, of mn at mnb + j * us. */
static inline __attribute__((always_inline)) void rl__k4r8_scales(const uint8_t *s, uint8_t *scb,
                                                                  uint8_t *mnb, size_t us) {
    const __m256i m4 = _mm256_set1_epi8(15), m63 = _mm256_set1_epi8(63), m3 = _mm256_set1_epi8(3);
    const __m256i A = _mm256_loadu_si256((const __m256i *)s);
    const __m256i B = _mm256_loadu_si256((const __m256i *)(s + 32));
    const __m256i C = _mm256_loadu_si256((const __m256i *)(s + 64));
    const __m256i slo = _mm256_and_si256(A, m63), mlo = _mm256_and_si256(B, m63);
    const __m256i shi =
        _mm256_or_si256(_mm256_and_si256(C, m4),
                        _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(A, 6), m3), 4));
    const __m256i mhi =
        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(C, 4), m4),
                        _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(B, 6), m3), 4));
    _Pragma("GCC unroll 4") for (int j = 0; j < 4; j++) {
        _mm256_storeu_si256((__m256i *)(scb + j * us), rl__r8_pick(slo, j, j));
        _mm256_storeu_si256((__m256i *)(scb + (4 + j) * us), rl__r8_pick(shi, j, j));
    }
    _mm256_storeu_si256((__m256i *)mnb, rl__r8_pick(mlo, 0, 1));
    _mm256_storeu_si256((__m256i *)(mnb + us), rl__r8_pick(mlo, 2, 3));
    _mm256_storeu_si256((__m256i *)(mnb + 2 * us), rl__r8_pick(mhi, 0, 1));
    _mm256_storeu_si256((__m256i *)(mnb + 3 * us), rl__r8_pick(mhi, 2, 3));
}
_Static_assert(offsetof(rl__q4k_r8, sb) == offsetof(rl__q4k_r8, sa) + 32 &&
                   offsetof(rl__q4k_r8, sc) == offsetof(rl__q4k_r8, sa) + 64 &&
                   offsetof(rl__q5k_r8, sb) == offsetof(rl__q5k_r8, sa) + 32 &&
                   offsetof(rl__q5k_r8, sc) == offsetof(rl__q5k_r8, sa) + 64,
               "resident q4_K and q5_K scales: 96 bytes in a row");
static inline __attribute__((always_inline)) void
rl__q4kr8_scales(const rl__q4k_r8 *p, uint8_t *scb, uint8_t *mnb, size_t us) {
    rl__k4r8_scales(p->sa, scb, mnb, us);
}

/* Bytes a[i], b[i] (i < 8) interleaved and widened to int16 (lanes 2i,
 * 2i + 1; a == b: each byte lane-doubled): the resident q6_K tiles'
 * scales (tile-impl.h, amx_tile.c). */
static inline __attribute__((always_inline)) __m256i rl__r8_i8x2(const int8_t *a, const int8_t *b) {
    const __m128i va = _mm_loadl_epi64((const __m128i *)a),
                  vb = _mm_loadl_epi64((const __m128i *)b);
    return _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(va, vb));
}

/* 8x8 transpose of int32 lanes: v[r] lane g -> v[g] lane r. */
static inline __attribute__((always_inline)) void rl__tr8x8(__m256i v[8]) {
    __m256i a[8], b[8];
    for (int i = 0; i < 4; i++) {
        a[2 * i] = _mm256_unpacklo_epi32(v[2 * i], v[2 * i + 1]);
        a[2 * i + 1] = _mm256_unpackhi_epi32(v[2 * i], v[2 * i + 1]);
    }
    for (int i = 0; i < 2; i++) {
        b[4 * i + 0] = _mm256_unpacklo_epi64(a[4 * i + 0], a[4 * i + 2]);
        b[4 * i + 1] = _mm256_unpackhi_epi64(a[4 * i + 0], a[4 * i + 2]);
        b[4 * i + 2] = _mm256_unpacklo_epi64(a[4 * i + 1], a[4 * i + 3]);
        b[4 * i + 3] = _mm256_unpackhi_epi64(a[4 * i + 1], a[4 * i + 3]);
    }
    for (int i = 0; i < 4; i++) {
        v[i] = _mm256_permute2x128_si256(b[i], b[i + 4], 0x20);
        v[i + 4] = _mm256_permute2x128_si256(b[i], b[i + 4], 0x31);
    }
}

/* Code vector g (elements 32b + 4g .. + 3 of the 8 rows) of sub-block b
 * of a resident q4_K or q5_K block (q: its nibbles): the nibbles of chunk
 * b / 2, low for even b (q4_K's codes, 0..15). */
static inline __attribute__((always_inline)) __m256i rl__k4r8_nib(const uint8_t (*q)[32], int b,
                                                                  int g) {
    const __m256i raw = _mm256_loadu_si256((const __m256i *)q[8 * (b / 2) + g]);
    return _mm256_and_si256(b % 2 ? _mm256_srli_epi16(raw, 4) : raw, _mm256_set1_epi8(15));
}
/* The same of a q5_K block (0..31): the nibbles and, from hv = p->hb[b],
 * bit g of each byte moved to bit 4 (the leaf and its conversion to the
 * packed tile). */
static inline __attribute__((always_inline)) __m256i rl__q5kr8_code(const rl__q5k_r8 *p, __m256i hv,
                                                                    int b, int g) {
    const __m256i h = g < 4 ? _mm256_slli_epi16(hv, 4 - g) : _mm256_srli_epi16(hv, g - 4);
    return _mm256_or_si256(rl__k4r8_nib(p->q, b, g), _mm256_and_si256(h, _mm256_set1_epi8(16)));
}

/* The AVX2 conversions of avx2_pack.c (rl__tile8.pack, rl__rtile.to_tile). */
void rl__pack_q2_K_x8_avx2(void *dst, const void *w, size_t row_size, int64_t n_cols);
void rl__x_q8_1f_avx2(void *dst, const void *src, int64_t n_blocks);
void rl__pack_iq4_xs_x8_avx2(void *dst, const void *w, size_t row_size, int64_t n_cols);
void rl__to_tile_q5_K_avx2(void *dst, const void *group, int64_t n_cols);

#ifdef __AVX512F__
/* Pairs of resident groups in one zmm register (vnni_tile.c, amx_tile.c):
 * group A's 32 bytes below group B's. */
#define RL_Z2(a, b) _mm512_inserti64x4(_mm512_castsi256_si512(a), (b), 1)

static inline __attribute__((always_inline)) __m512i rl__z_load2(const void *a, const void *b) {
    return RL_Z2(_mm256_loadu_si256((const __m256i *)a), _mm256_loadu_si256((const __m256i *)b));
}

/* 8 fp16 of A and 8 of B widened to 16 float lanes. */
static inline __attribute__((always_inline)) __m512 rl__z_cvtph2(const rl_fp16 *a,
                                                                 const rl_fp16 *b) {
    const __m256i h =
        _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)a)),
                                _mm_loadu_si128((const __m128i *)b), 1);
    return _mm512_cvtph_ps(h);
}
#endif

#endif
