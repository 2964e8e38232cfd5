/* The tile leaves' templates (kernels-impl.h, rl__tile8 and rl__rtile):
 * 8 interleaved weight rows (one per int32 lane) against up to RL_TILE8_T
 * tokens, instantiated twice: by avx2_tile.c (RL_TILE_VNNI 0, the "_avx2"
 * leaves) and by vnni_tile.c (RL_TILE_VNNI 1, "_vnni", compiled with
 * AVX512VL/VNNI).  They differ only in how a group's integer products are
 * summed, and those sums are exact, so both are the scalar twins' bits:
 *   RL_TILE_VNNI 0: vpmaddubsw pair sums added in int16 (the bounds are
 *     noted per type), then vpmaddwd by the (lane-doubled) scales or ones;
 *   RL_TILE_VNNI 1: vpdpbusd sums the 4 products of each row into its
 *     int32 lane directly, then vpmulld by the scale (the int16 pair's
 *     high half, arithmetic-shifted: exact for signed and unsigned scales).
 * The float work per super-block (lane = row) is the twins' order. */
#ifndef RL_TILE_VNNI
#error "define RL_TILE_VNNI before including tile-impl.h"
#endif
#include <string.h>

#include "kernels/x86/avx2-impl.h"

#define RL_TCAT_(a, b, c) a##b##c
#define RL_TCAT(a, b, c)  RL_TCAT_(a, b, c)
#if RL_TILE_VNNI
#define RL_TILE_SUF _vnni
/* acc + the 4 byte products of each row, per int32 lane */
#define RL_TI_MAC(acc, w, x)  _mm256_dpbusd_epi32(acc, w, x)
#define RL_TI_SC(v)           _mm256_srai_epi32(v, 16)
#define RL_TI_SCALED(a, sc)   _mm256_mullo_epi32(a, sc)
#define RL_TI_SUM(a)          (a)
#define RL_TI_Q5K_G           8 /* int32 sums: a q5_K sub-block's 8 groups at once */
#define RL_TI_MACC(acc, w, x) RL_TI_MAC(acc, w, x)
#define RL_TI_KEEP(v)         (void)(v)
#else
#define RL_TILE_SUF           _avx2
/* acc + the pair sums of each row, per int16 lane (2r, 2r + 1) */
#define RL_TI_MAC(acc, w, x)  _mm256_add_epi16(acc, _mm256_maddubs_epi16(w, x))
/* The same, kept a chain in the source's order by an empty asm: in the
 * q4_1 and q8_0 leaves GCC otherwise reassociates the int16 adds of a
 * block into a tree, holds every product live at once and spills them to
 * the stack (q4_1 resident, 1536x576, 64 tokens, one thread: 1.21-1.34x;
 * the q4_K leaves measured the same or slower with it).  RL_TI_KEEP does
 * it for the q6_K resident leaf's int32 sums (576x1536, one thread: 2
 * tokens 1.25x, 4 tokens 1.11x, 1 token the same). */
static inline __m256i rl__ti_mac16(__m256i acc, __m256i w, __m256i x) {
    __m256i r = _mm256_add_epi16(acc, _mm256_maddubs_epi16(w, x));
    __asm__("" : "+x"(r));
    return r;
}
#define RL_TI_MACC(acc, w, x) rl__ti_mac16(acc, w, x)
#define RL_TI_KEEP(v)         __asm__("" : "+x"(v))
#define RL_TI_SC(v)           (v)
#define RL_TI_SCALED(a, sc)   _mm256_madd_epi16(a, sc)
#define RL_TI_SUM(a)          _mm256_madd_epi16(a, _mm256_set1_epi16(1))
#define RL_TI_Q5K_G           4 /* int16 sums: see rl__tile8_k4_T */
#endif

#define RL_TILE_AI static inline __attribute__((always_inline))

/* The rl__tile8 dot of type TY: its template at T = n_x (1..4). */
#define RL_TILE8_INST(TY)                                                                          \
    static void RL_TCAT(rl__tile8_, TY, RL_TILE_SUF)(int64_t n_cols, float *s, size_t ss,          \
                                                     const void *packed, const void *vx,           \
                                                     size_t xs, int n_x) {                         \
        if (n_x == 4)                                                                              \
            rl__tile8_##TY##_T(n_cols, s, ss, packed, vx, xs, 4);                                  \
        else if (n_x == 3)                                                                         \
            rl__tile8_##TY##_T(n_cols, s, ss, packed, vx, xs, 3);                                  \
        else if (n_x == 2)                                                                         \
            rl__tile8_##TY##_T(n_cols, s, ss, packed, vx, xs, 2);                                  \
        else                                                                                       \
            rl__tile8_##TY##_T(n_cols, s, ss, packed, vx, xs, 1);                                  \
    }

static inline float rl__f16c(rl_fp16 h) {
    return _cvtsh_ss(h);
}

/* Super-block i of the T tokens' q8_K rows (x[k]), their int32 sums zeroed:
 * the start of every K-quant leaf's super-block. */
RL_TILE_AI void rl__q8k_start(const rl_block_q8_K **x, __m256i *sumi, const void *vx, size_t xs,
                              int64_t i, const int T) {
    _Pragma("GCC unroll 4") for (int k = 0; k < T; k++) {
        x[k] = (const rl_block_q8_K *)((const uint8_t *)vx + (size_t)k * xs) + i;
        sumi[k] = _mm256_setzero_si256();
    }
}

/* The K-quant tiles' float step per super-block (packed and resident):
 * q4_K: the mins (int16 pairs mn[q], lanes 2r / 2r + 1) against the q8_K
 * pair bsums, then acc = fma(d dx, sumi, acc), fnma(dmin dx, msum, acc);
 * q6_K: the -32 offset through the bsums (scp), then one fma.  mn[q] (scp[q])
 * at mn + q * ms: ms 16 in a packed or resident block, 32 in a packed pair. */
RL_TILE_AI void rl__q4k_fstep(__m256 *acc, const __m256i *sumi, const int16_t *mn, int ms, __m256 d,
                              __m256 dmin, const rl_block_q8_K *const *x, const int T) {
    _Pragma("GCC unroll 4") for (int k = 0; k < T; k++) {
        /* the 8 pair bsums (rl__q8k_bsum32, |sum| <= 4096) as int16, pairs
         * 2q, 2q + 1 in 32-bit word q of bp (words 0, 1, 4, 5) */
        const __m256i b32 = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)x[k]->bsums),
                                              _mm256_set1_epi16(1));
        const __m256i bp = _mm256_packs_epi32(b32, b32);
        __m256i msum = _mm256_setzero_si256();
        _Pragma("GCC unroll 4") for (int q = 0; q < 4; q++) {
            msum = _mm256_add_epi32(
                msum,
                _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)(mn + q * ms)),
                                  _mm256_permutevar8x32_epi32(bp, _mm256_set1_epi32(q + (q & 2)))));
        }
        const __m256 dx = _mm256_set1_ps(x[k]->d);
        acc[k] = _mm256_fmadd_ps(_mm256_mul_ps(d, dx), _mm256_cvtepi32_ps(sumi[k]), acc[k]);
        acc[k] = _mm256_fnmadd_ps(_mm256_mul_ps(dmin, dx), _mm256_cvtepi32_ps(msum), acc[k]);
    }
}

/* Per row lane r: sum over the 16 q8_K bsums of v[b] bsum_b, v in int16
 * pairs (v + q * ms: lanes 2r, 2r + 1 = v[2q], v[2q + 1]); exact. */
RL_TILE_AI __m256i rl__bsum16_dot(const int16_t *v, int ms, const rl_block_q8_K *x) {
    __m256i r = _mm256_setzero_si256();
    _Pragma("GCC unroll 8") for (int q = 0; q < 8; q++) {
        uint32_t bp;
        memcpy(&bp, &x->bsums[2 * q], 4);
        r = _mm256_add_epi32(r, _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)(v + q * ms)),
                                                  _mm256_set1_epi32((int)bp)));
    }
    return r;
}

RL_TILE_AI void rl__q6k_fstep(__m256 *acc, const __m256i *sumi, const int16_t *scp, int ms,
                              __m256 d, const rl_block_q8_K *const *x, const int T) {
    _Pragma("GCC unroll 4") for (int k = 0; k < T; k++) {
        const __m256i corr = rl__bsum16_dot(scp, ms, x[k]);
        const __m256i tot = _mm256_sub_epi32(sumi[k], _mm256_slli_epi32(corr, 5));
        acc[k] = _mm256_fmadd_ps(_mm256_mul_ps(d, _mm256_set1_ps(x[k]->d)), _mm256_cvtepi32_ps(tot),
                                 acc[k]);
    }
}

/* q2_K's float step per super-block: the mins (pairs mn[q], lanes 2r /
 * 2r + 1) against the 16 q8_K bsums in pairs, then q4_K's two fused
 * multiply-adds. */
RL_TILE_AI void rl__q2k_fstep(__m256 *acc, const __m256i *sumi, const int16_t *mn, __m256 d,
                              __m256 dmin, const rl_block_q8_K *const *x, const int T) {
    _Pragma("GCC unroll 4") for (int k = 0; k < T; k++) {
        const __m256i msum = rl__bsum16_dot(mn, 16, x[k]);
        const __m256 dx = _mm256_set1_ps(x[k]->d);
        acc[k] = _mm256_fmadd_ps(_mm256_mul_ps(d, dx), _mm256_cvtepi32_ps(sumi[k]), acc[k]);
        acc[k] = _mm256_fnmadd_ps(_mm256_mul_ps(dmin, dx), _mm256_cvtepi32_ps(msum), acc[k]);
    }
}

/* q2_K (rl__q2k_x8: codes 0..3): the 4 groups of a 16-element sub-block
 * add up before its scale step (in int16 on AVX2: 4 * 2 * 3 * 128 = 3072),
 * one vpmaddwd (vpmulld) by the scales per sub-block, then the mins and
 * the float step per super-block (rl__q2k_fstep).  AVX2 only: the
 * AVX512-VNNI table runs this leaf too (it inherits the AVX2 table's). */
#if !RL_TILE_VNNI
RL_TILE_AI void rl__tile8_q2_K_T(int64_t n_cols, float *s, size_t ss, const void *packed,
                                 const void *vx, size_t xs, const int T) {
    __m256 acc[RL_TILE8_T];
    _Pragma("GCC unroll 4") for (int k = 0; k < T; k++) acc[k] = _mm256_setzero_ps();
    const rl__q2k_x8 *p = packed;
    for (int64_t i = 0; i < n_cols / RL_QK_K; i++, p++) {
        const rl_block_q8_K *x[RL_TILE8_T];
        __m256i sumi[RL_TILE8_T];
        rl__q8k_start(x, sumi, vx, xs, i, T);
        for (int b = 0; b < 16; b++) {
            const __m256i sc = RL_TI_SC(_mm256_loadu_si256((const __m256i *)p->sc[b]));
            __m256i s16[RL_TILE8_T];
            _Pragma("GCC unroll 4") for (int k = 0; k < T; k++) s16[k] = _mm256_setzero_si256();
            _Pragma("GCC unroll 4") for (int g = 0; g < 4; g++) {
                const __m256i wq = _mm256_loadu_si256((const __m256i *)p->q[4 * b + g]);
                _Pragma("GCC unroll 4") for (int k = 0; k < T; k++) {
                    int32_t xv;
                    memcpy(&xv, x[k]->qs + 16 * b + 4 * g, 4);
                    s16[k] = RL_TI_MAC(s16[k], wq, _mm256_set1_epi32(xv));
                }
            }
            _Pragma("GCC unroll 4") for (int k = 0; k < T; k++) sumi[k] =
                _mm256_add_epi32(sumi[k], RL_TI_SCALED(s16[k], sc));
        }
        const __m256 d = _mm256_loadu_ps(p->d), dmin = _mm256_loadu_ps(p->dmin);
        rl__q2k_fstep(acc, sumi, &p->mn[0][0], d, dmin, x, T);
    }
    _Pragma("GCC unroll 4") for (int k = 0; k < T; k++)
        _mm256_storeu_ps(s + (size_t)k * ss, acc[k]);
}
RL_TILE8_INST(q2_K)

/* mxfp4 (rl__mxfp4_x8: the values v as signed bytes, |v| <= 12): per
 * group |v| against the token's bytes with v's signs (vpsignb), the 8
 * groups of a block added in int16 (8 * 2 * 12 * 127 = 24384; q8_0 codes
 * are within +-127), then one vpmaddwd by ones and the twin's fused
 * multiply-add per block.  AVX2 only, as q2_K's. */
RL_TILE_AI void rl__tile8_mxfp4_T(int64_t n_cols, float *s, size_t ss, const void *packed,
                                  const void *vx, size_t xs, const int T) {
    __m256 acc[RL_TILE8_T];
    _Pragma("GCC unroll 4") for (int k = 0; k < T; k++) acc[k] = _mm256_setzero_ps();
    const rl__mxfp4_x8 *p = packed;
    for (int64_t i = 0; i < n_cols / 32; i++, p++) {
        const rl_block_q8_0 *x[RL_TILE8_T];
        __m256i s16[RL_TILE8_T];
        _Pragma("GCC unroll 4") for (int k = 0; k < T; k++) {
            x[k] = (const rl_block_q8_0 *)((const uint8_t *)vx + (size_t)k * xs) + i;
            s16[k] = _mm256_setzero_si256();
        }
        _Pragma("GCC unroll 8") for (int g = 0; g < 8; g++) {
            const __m256i v = _mm256_loadu_si256((const __m256i *)p->q[g]);
            const __m256i a = _mm256_abs_epi8(v);
            _Pragma("GCC unroll 4") for (int k = 0; k < T; k++) {
                int32_t xv;
                memcpy(&xv, x[k]->qs + 4 * g, 4);
                s16[k] = RL_TI_MACC(s16[k], a, _mm256_sign_epi8(_mm256_set1_epi32(xv), v));
            }
        }
        const __m256 d = _mm256_loadu_ps(p->d);
        _Pragma("GCC unroll 4") for (int k = 0; k < T; k++) acc[k] =
            _mm256_fmadd_ps(_mm256_mul_ps(d, _mm256_set1_ps(rl__f16c(x[k]->d))),
                            _mm256_cvtepi32_ps(RL_TI_SUM(s16[k])), acc[k]);
    }
    _Pragma("GCC unroll 4") for (int k = 0; k < T; k++)
        _mm256_storeu_ps(s + (size_t)k * ss, acc[k]);
}
RL_TILE8_INST(mxfp4)

/* iq4_xs (rl__iq4xs_x8): per group, one broadcast of the token's bytes
 * against both nibble planes, each plane's 8 groups added in int16 (as
 * q4_K's, 30720), one vpmaddwd per plane by its scales, then q4_K's float
 * step.  AVX2 only, as q2_K's. */
RL_TILE_AI void rl__tile8_iq4_xs_T(int64_t n_cols, float *s, size_t ss, const void *packed,
                                   const void *vx, size_t xs, const int T) {
    __m256 acc[RL_TILE8_T];
    _Pragma("GCC unroll 4") for (int k = 0; k < T; k++) acc[k] = _mm256_setzero_ps();
    const rl__iq4xs_x8 *p = packed;
    for (int64_t i = 0; i < n_cols / RL_QK_K; i++, p++) {
        const rl_block_q8_K *x[RL_TILE8_T];
        __m256i sumi[RL_TILE8_T];
        rl__q8k_start(x, sumi, vx, xs, i, T);
        for (int b = 0; b < 8; b++) {
            __m256i sh[RL_TILE8_T], sl[RL_TILE8_T];
            _Pragma("GCC unroll 4") for (int k = 0; k < T; k++) sh[k] = sl[k] =
                _mm256_setzero_si256();
            _Pragma("GCC unroll 8") for (int g = 0; g < 8; g++) {
                const __m256i wh = _mm256_loadu_si256((const __m256i *)p->q[16 * b + g]);
                const __m256i wl = _mm256_loadu_si256((const __m256i *)p->q[16 * b + 8 + g]);
                _Pragma("GCC unroll 4") for (int k = 0; k < T; k++) {
                    int32_t xv;
                    memcpy(&xv, x[k]->qs + 32 * b + 4 * g, 4);
                    const __m256i xb = _mm256_set1_epi32(xv);
                    sh[k] = RL_TI_MACC(sh[k], wh, xb);
                    sl[k] = RL_TI_MACC(sl[k], wl, xb);
                }
            }
            const __m256i ch = RL_TI_SC(_mm256_loadu_si256((const __m256i *)p->sc[2 * b]));
            const __m256i cl = RL_TI_SC(_mm256_loadu_si256((const __m256i *)p->sc[2 * b + 1]));
            _Pragma("GCC unroll 4") for (int k = 0; k < T; k++) sumi[k] = _mm256_add_epi32(
                sumi[k], _mm256_add_epi32(RL_TI_SCALED(sh[k], ch), RL_TI_SCALED(sl[k], cl)));
        }
        const __m256 d = _mm256_loadu_ps(p->d), dmin = _mm256_loadu_ps(p->dmin);
        rl__q4k_fstep(acc, sumi, &p->mn[0][0], 16, d, dmin, x, T);
    }
    _Pragma("GCC unroll 4") for (int k = 0; k < T; k++)
        _mm256_storeu_ps(s + (size_t)k * ss, acc[k]);
}
RL_TILE8_INST(iq4_xs)
#endif

/* q4_K and q5_K (rl__q4k_x8: codes 0..15, or 0..31 for q5_K): G groups of
 * 4 codes add up before the scale step; with AVX2's maddubs, in int16, a
 * lane gains 2 * 15 * 127 per group, so q4_K takes all 8 groups of a
 * sub-block (30480), q5_K 4 (4 * 2 * 31 * 127 = 31496); vpdpbusd's int32
 * sums take all 8 for both (RL_TI_Q5K_G). */
RL_TILE_AI void rl__tile8_k4_T(int64_t n_cols, float *s, size_t ss, const void *packed,
                               const void *vx, size_t xs, const int T, const int G) {
    __m256 acc[RL_TILE8_T];
    _Pragma("GCC unroll 4") for (int k = 0; k < T; k++) acc[k] = _mm256_setzero_ps();
    const rl__q4k_x8 *p = packed;
    for (int64_t i = 0; i < n_cols / RL_QK_K; i++, p++) {
        const rl_block_q8_K *x[RL_TILE8_T];
        __m256i sumi[RL_TILE8_T];
        rl__q8k_start(x, sumi, vx, xs, i, T);
        for (int b = 0; b < 8; b++) {
            const __m256i sc = RL_TI_SC(_mm256_loadu_si256((const __m256i *)p->sc[b]));
            _Pragma("GCC unroll 2") for (int g0 = 0; g0 < 8; g0 += G) {
                __m256i s16[RL_TILE8_T];
                _Pragma("GCC unroll 4") for (int k = 0; k < T; k++) s16[k] = _mm256_setzero_si256();
                _Pragma("GCC unroll 8") for (int g = g0; g < g0 + G; g++) {
                    const __m256i wq = _mm256_loadu_si256((const __m256i *)p->q[8 * b + g]);
                    _Pragma("GCC unroll 4") for (int k = 0; k < T; k++) {
                        int32_t xv;
                        memcpy(&xv, x[k]->qs + 32 * b + 4 * g, 4);
                        s16[k] = RL_TI_MAC(s16[k], wq, _mm256_set1_epi32(xv));
                    }
                }
                _Pragma("GCC unroll 4") for (int k = 0; k < T; k++) sumi[k] =
                    _mm256_add_epi32(sumi[k], RL_TI_SCALED(s16[k], sc));
            }
        }
        const __m256 d = _mm256_loadu_ps(p->d), dmin = _mm256_loadu_ps(p->dmin);
        rl__q4k_fstep(acc, sumi, &p->mn[0][0], 16, d, dmin, x, T);
    }
    _Pragma("GCC unroll 4") for (int k = 0; k < T; k++)
        _mm256_storeu_ps(s + (size_t)k * ss, acc[k]);
}

RL_TILE_AI void rl__tile8_q4_K_T(int64_t n_cols, float *s, size_t ss, const void *packed,
                                 const void *vx, size_t xs, const int T) {
    rl__tile8_k4_T(n_cols, s, ss, packed, vx, xs, T, 8);
}
RL_TILE_AI void rl__tile8_q5_K_T(int64_t n_cols, float *s, size_t ss, const void *packed,
                                 const void *vx, size_t xs, const int T) {
    rl__tile8_k4_T(n_cols, s, ss, packed, vx, xs, T, RL_TI_Q5K_G);
}
RL_TILE8_INST(q4_K)
RL_TILE8_INST(q5_K)
/* q6_K: as q4_K, but codes 0..63 so only two groups (8 elements) add in
 * int16 (2 * 2 * 63 * 127 = 32004), and 16-element sub-blocks: two
 * vpmaddwd per sub-block; the -32 offset through the bsums. */
RL_TILE_AI void rl__tile8_q6_K_T(int64_t n_cols, float *s, size_t ss, const void *packed,
                                 const void *vx, size_t xs, const int T) {
    __m256 acc[RL_TILE8_T];
    _Pragma("GCC unroll 4") for (int k = 0; k < T; k++) acc[k] = _mm256_setzero_ps();
    const rl__q6k_x8 *p = packed;
    for (int64_t i = 0; i < n_cols / RL_QK_K; i++, p++) {
        const rl_block_q8_K *x[RL_TILE8_T];
        __m256i sumi[RL_TILE8_T];
        rl__q8k_start(x, sumi, vx, xs, i, T);
        for (int b = 0; b < 16; b++) {
            const __m256i sc = RL_TI_SC(_mm256_loadu_si256((const __m256i *)p->sc[b]));
            _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++) {
                const __m256i w0 = _mm256_loadu_si256((const __m256i *)p->q[4 * b + 2 * h]);
                const __m256i w1 = _mm256_loadu_si256((const __m256i *)p->q[4 * b + 2 * h + 1]);
                _Pragma("GCC unroll 4") for (int k = 0; k < T; k++) {
                    int32_t x0, x1;
                    memcpy(&x0, x[k]->qs + 16 * b + 8 * h, 4);
                    memcpy(&x1, x[k]->qs + 16 * b + 8 * h + 4, 4);
                    const __m256i s16 =
                        RL_TI_MAC(RL_TI_MAC(_mm256_setzero_si256(), w0, _mm256_set1_epi32(x0)), w1,
                                  _mm256_set1_epi32(x1));
                    sumi[k] = _mm256_add_epi32(sumi[k], RL_TI_SCALED(s16, sc));
                }
            }
        }
        const __m256 d = _mm256_loadu_ps(p->d);
        rl__q6k_fstep(acc, sumi, &p->scp[0][0], 16, d, x, T);
    }
    _Pragma("GCC unroll 4") for (int k = 0; k < T; k++)
        _mm256_storeu_ps(s + (size_t)k * ss, acc[k]);
}

RL_TILE8_INST(q6_K)
/* q4_1's float step per block (the packed and the resident tile): the
 * int16 sums to int32 lanes, then the twin's two fused multiply-adds. */
RL_TILE_AI __m256 rl__q41_fstep32(__m256 acc, __m256i sumi, __m256 d, __m256 m, float dx,
                                  float sx) {
    acc = _mm256_fmadd_ps(_mm256_mul_ps(d, _mm256_set1_ps(dx)), _mm256_cvtepi32_ps(sumi), acc);
    return _mm256_fmadd_ps(m, _mm256_set1_ps(sx), acc);
}
RL_TILE_AI __m256 rl__q41_fstep1(__m256 acc, __m256i s16, __m256 d, __m256 m, float dx, float sx) {
    return rl__q41_fstep32(acc, RL_TI_SUM(s16), d, m, dx, sx);
}
RL_TILE_AI void rl__q41_fstep(__m256 *acc, const __m256i *s16, __m256 d, __m256 m,
                              const rl_block_q8_1 *const *x, const int T) {
    _Pragma("GCC unroll 4") for (int k = 0; k < T; k++) acc[k] =
        rl__q41_fstep1(acc[k], s16[k], d, m, rl__f16c(x[k]->d), rl__f16c(x[k]->s));
}
/* q4_1: per block, the 8 groups of 4 elements as in q4_K (8 x 2 x 15 x 128
 * = 30720 fits int16), one vpmaddwd by ones to int32 lanes, then the
 * twin's two fused multiply-adds per lane. */
RL_TILE_AI void rl__tile8_q4_1_T(int64_t n_cols, float *s, size_t ss, const void *packed,
                                 const void *vx, size_t xs, const int T) {
    __m256 acc[RL_TILE8_T];
    _Pragma("GCC unroll 4") for (int k = 0; k < T; k++) acc[k] = _mm256_setzero_ps();
    const rl__q41_x8 *p = packed;
    for (int64_t i = 0; i < n_cols / 32; i++, p++) {
        const rl_block_q8_1 *x[RL_TILE8_T];
        __m256i s16[RL_TILE8_T];
        _Pragma("GCC unroll 4") for (int k = 0; k < T; k++) {
            x[k] = (const rl_block_q8_1 *)((const uint8_t *)vx + (size_t)k * xs) + i;
            s16[k] = _mm256_setzero_si256();
        }
        _Pragma("GCC unroll 8") for (int g = 0; g < 8; g++) {
            const __m256i wq = _mm256_loadu_si256((const __m256i *)p->q[g]);
            _Pragma("GCC unroll 4") for (int k = 0; k < T; k++) {
                int32_t xv;
                memcpy(&xv, x[k]->qs + 4 * g, 4);
                s16[k] = RL_TI_MACC(s16[k], wq, _mm256_set1_epi32(xv));
            }
        }
        const __m256 d = _mm256_loadu_ps(p->d), m = _mm256_loadu_ps(p->m);
        rl__q41_fstep(acc, s16, d, m, x, T);
    }
    _Pragma("GCC unroll 4") for (int k = 0; k < T; k++)
        _mm256_storeu_ps(s + (size_t)k * ss, acc[k]);
}

RL_TILE8_INST(q4_1)
/* acc[h][k] of GN groups (rows 8h..8h + 7) and T tokens into s. */
RL_TILE_AI void rl__tileg_store(float *s, size_t ss, __m256 acc[2][RL_TILE8_T], const int T,
                                const int GN) {
    _Pragma("GCC unroll 4") for (int k = 0; k < T; k++)
        _Pragma("GCC unroll 2") for (int h = 0; h < GN; h++)
            _mm256_storeu_ps(s + (size_t)k * ss + 8 * h, acc[h][k]);
}
/* q4_1 resident tile (kernels-impl.h, rl__q41_r8), on the activations as
 * q8_1 rows with float scales (rl__rtile.x_prep, rl__q81f): each of the 4 weight
 * vectors gives groups v (low nibbles) and v + 4 (high nibbles), then the
 * packed tile's int16 sums, vpmaddwd and float steps: bit for bit
 * rl__tile8_q4_1_T on the same rows.  Batch 1 reads the group's bytes in
 * one stream, prefetched RL_PF_DIST ahead into L2 as the 1-token leaves do.
 * The resident 32-element leaves here run GN (1 or 2) groups at once, the
 * second at group + gs (rows 8..15 of s): one broadcast of a token's bytes
 * feeds both, and each group's lanes are the one-group leaf's bits (the
 * AVX2 table's resident pairs, rl__rtile.dot16). */
RL_TILE_AI void rl__tileg_q4_1r8_T(int64_t n_cols, float *s, size_t ss, const void *group,
                                   size_t gs, const void *vx, size_t xs, const int T,
                                   const int GN) {
    __m256 acc[2][RL_TILE8_T];
    _Pragma("GCC unroll 4") for (int k = 0; k < T; k++) acc[0][k] = acc[1][k] = _mm256_setzero_ps();
    const rl__q41_r8 *p[2] = {group, (const rl__q41_r8 *)((const uint8_t *)group + gs)};
    const __m256i m4 = _mm256_set1_epi8(15);
    for (int64_t i = 0; i < n_cols / 32; i++, p[0]++, p[1]++) {
        _Pragma("GCC unroll 2") for (int h = 0; h < GN; h++)
            RL_PF3(p[h]); /* 160 bytes a block: the 1-token leaves' distance (avx2-impl.h) */
        const rl__q81f *x[RL_TILE8_T];
        __m256i s16[2][RL_TILE8_T];
        _Pragma("GCC unroll 4") for (int k = 0; k < T; k++) {
            x[k] = (const rl__q81f *)((const uint8_t *)vx + (size_t)k * xs) + i;
            s16[0][k] = s16[1][k] = _mm256_setzero_si256();
        }
        _Pragma("GCC unroll 4") for (int v = 0; v < 4; v++) {
            __m256i lo[2], hi[2];
            _Pragma("GCC unroll 2") for (int h = 0; h < GN; h++) {
                const __m256i raw = _mm256_loadu_si256((const __m256i *)p[h]->q[v]);
                lo[h] = _mm256_and_si256(raw, m4);
                hi[h] = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
            }
            _Pragma("GCC unroll 4") for (int k = 0; k < T; k++) {
                int32_t xl, xh;
                memcpy(&xl, x[k]->qs + 4 * v, 4);
                memcpy(&xh, x[k]->qs + 16 + 4 * v, 4);
                const __m256i bl = _mm256_set1_epi32(xl), bh = _mm256_set1_epi32(xh);
                _Pragma("GCC unroll 2") for (int h = 0; h < GN; h++) {
                    s16[h][k] = RL_TI_MACC(s16[h][k], lo[h], bl);
                    s16[h][k] = RL_TI_MACC(s16[h][k], hi[h], bh);
                }
            }
        }
        _Pragma("GCC unroll 2") for (int h = 0; h < GN; h++) {
            const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p[h]->d));
            const __m256 m = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p[h]->m));
            _Pragma("GCC unroll 4") for (int k = 0; k < T; k++) acc[h][k] =
                rl__q41_fstep1(acc[h][k], s16[h][k], d, m, x[k]->d, x[k]->s);
        }
    }
    rl__tileg_store(s, ss, acc, T, GN);
}
RL_TILE_AI void rl__tile8_q4_1r8_T(int64_t n_cols, float *s, size_t ss, const void *group,
                                   const void *vx, size_t xs, const int T) {
    rl__tileg_q4_1r8_T(n_cols, s, ss, group, 0, vx, xs, T, 1);
}

RL_TILE8_INST(q4_1r8)

/* q5_0 resident tile (kernels-impl.h, rl__q50_r8) on the activations with
 * their code sums (rl__q80s): group G's codes are its nibbles (q4_1's
 * planes) or'ed with bit G of hb moved to bit 4 (an epi16 shift moves no
 * other byte's bit there), 0..31; groups 0-3 and 4-7 sum apart (AVX2: 4 x
 * 2 x 31 x 128 fits int16), then sumi = the two sums - 16 sum x, and the
 * twin's fma. */
/* The q8_0-activation leaves' float step (q5_0, q4_0, iq4_nl, and the
 * AVX2 q8_0 leaf): acc = fma(d dx, sumi, acc), the twins' order. */
RL_TILE_AI __m256 rl__q80_fstep(__m256 acc, __m256 d, float dx, __m256i sumi) {
    return _mm256_fmadd_ps(_mm256_mul_ps(d, _mm256_set1_ps(dx)), _mm256_cvtepi32_ps(sumi), acc);
}
/* 16 SH + SL as int32 lanes: the AVX2 leaves' sums of the high and low
 * nibbles of unsigned bytes too wide for one vpmaddubsw (q8_0's x + 128,
 * iq4_nl's codebook + 128). */
RL_TILE_AI __m256i rl__hl16_sum(__m256i sh, __m256i sl) {
    return _mm256_add_epi32(_mm256_madd_epi16(sh, _mm256_set1_epi16(16)),
                            _mm256_madd_epi16(sl, _mm256_set1_epi16(1)));
}
RL_TILE_AI __m256i rl__q50r8_codes(const __m256i *raw, __m256i hb, const int G) {
    const __m256i m4 = _mm256_set1_epi8(15), m16 = _mm256_set1_epi8(16);
    const __m256i nib = _mm256_and_si256(G < 4 ? raw[G] : _mm256_srli_epi16(raw[G - 4], 4), m4);
    const __m256i h = G < 4 ? _mm256_slli_epi16(hb, 4 - G) : _mm256_srli_epi16(hb, G - 4);
    return _mm256_or_si256(nib, _mm256_and_si256(h, m16));
}
/* q5_1 (ONE 1, rl__q51_r8, on the q8_1 rows with float scales, rl__q81f):
 * the same codes and sums, no offset, then q4_1's two fused multiply-adds
 * (rl__q41_fstep1's operations on the int32 sum). */
RL_TILE_AI void rl__tile8_q5r8_T(int64_t n_cols, float *s, size_t ss, const void *group,
                                 const void *vx, size_t xs, const int T, const int ONE) {
    __m256 acc[RL_TILE8_T];
    _Pragma("GCC unroll 4") for (int k = 0; k < T; k++) acc[k] = _mm256_setzero_ps();
    const size_t bb = ONE ? sizeof(rl__q51_r8) : sizeof(rl__q50_r8);
    const size_t ohb = ONE ? offsetof(rl__q51_r8, hb) : offsetof(rl__q50_r8, hb);
    const size_t oq = ONE ? offsetof(rl__q51_r8, q) : offsetof(rl__q50_r8, q);
    _Static_assert(offsetof(rl__q50_r8, d) == 0 && offsetof(rl__q51_r8, d) == 0, "d leads");
    for (int64_t i = 0; i < n_cols / 32; i++) {
        const uint8_t *p = (const uint8_t *)group + (size_t)i * bb;
        RL_PF3(p);                     /* 176 or 192 bytes a block */
        const rl__q80s *x[RL_TILE8_T]; /* (or rl__q81f: d and qs the same) */
        __m256i sa[RL_TILE8_T], sb[RL_TILE8_T];
        _Pragma("GCC unroll 4") for (int k = 0; k < T; k++) {
            x[k] = (const rl__q80s *)((const uint8_t *)vx + (size_t)k * xs) + i;
            sa[k] = sb[k] = _mm256_setzero_si256();
        }
        __m256i raw[4];
        _Pragma("GCC unroll 4") for (int v = 0; v < 4; v++) raw[v] =
            _mm256_loadu_si256((const __m256i *)(p + oq + 32 * v));
        const __m256i hb = _mm256_loadu_si256((const __m256i *)(p + ohb));
        _Pragma("GCC unroll 8") for (int G = 0; G < 8; G++) {
            const __m256i w = rl__q50r8_codes(raw, hb, G);
            _Pragma("GCC unroll 4") for (int k = 0; k < T; k++) {
                int32_t xv;
                memcpy(&xv, x[k]->qs + 4 * G, 4);
                if (G < 4)
                    sa[k] = RL_TI_MACC(sa[k], w, _mm256_set1_epi32(xv));
                else
                    sb[k] = RL_TI_MACC(sb[k], w, _mm256_set1_epi32(xv));
            }
        }
        const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
        const __m256 m =
            ONE ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + offsetof(rl__q51_r8, m))))
                : _mm256_setzero_ps();
        _Pragma("GCC unroll 4") for (int k = 0; k < T; k++) {
            const __m256i su = _mm256_add_epi32(RL_TI_SUM(sa[k]), RL_TI_SUM(sb[k]));
            if (ONE) {
                const rl__q81f *xf = (const rl__q81f *)x[k];
                acc[k] = rl__q41_fstep32(acc[k], su, d, m, xf->d, xf->s);
            } else {
                acc[k] = rl__q80_fstep(acc[k], d, x[k]->d,
                                       _mm256_sub_epi32(su, _mm256_set1_epi32(x[k]->s16)));
            }
        }
    }
    _Pragma("GCC unroll 4") for (int k = 0; k < T; k++)
        _mm256_storeu_ps(s + (size_t)k * ss, acc[k]);
}
RL_TILE_AI void rl__tile8_q5_0r8_T(int64_t n_cols, float *s, size_t ss, const void *group,
                                   const void *vx, size_t xs, const int T) {
    rl__tile8_q5r8_T(n_cols, s, ss, group, vx, xs, T, 0);
}
RL_TILE_AI void rl__tile8_q5_1r8_T(int64_t n_cols, float *s, size_t ss, const void *group,
                                   const void *vx, size_t xs, const int T) {
    rl__tile8_q5r8_T(n_cols, s, ss, group, vx, xs, T, 1);
}
RL_TILE8_INST(q5_0r8)
RL_TILE8_INST(q5_1r8)

/* q4_0, iq4_nl and mxfp4 resident tiles (kernels-impl.h, rl__q40_r8: q4_1's
 * nibble planes; rl__mxfp4_r8 the same with exponent bytes for scales).
 * q4_0 (NL 0): the codes 0..15 themselves (8 groups fit int16 on AVX2: 8 x
 * 2 x 15 x 128), sumi = sum code x - 8 sum x (half the form's 16 sum x).
 * iq4_nl (NL 1): each nibble looked up (vpshufb) in the codebook offset by
 * 128, u = value + 128 (1..241, unsigned), sumi = sum u x - 128 sum x;
 * vpdpbusd takes u whole, but AVX2's vpmaddubsw would saturate 241 x 128
 * pairs, so there u = 16 H + L, both looked up (0..15), and sumi = 16 SH +
 * SL - 128 sum x.  mxfp4 (NL 2): u = value + 16 (4..28) looked up, sumi =
 * sum u x - 16 sum x; on AVX2 groups 0-3 and 4-7 sum apart (4 x 2 x 28 x
 * 128 fits int16, 8 groups would not).  Then the twins' fma. */
RL_TILE_AI __m256 rl__e8m0_half_ps(const uint8_t *e) {
    /* rl_e8m0_half_to_f32 on 8 bytes: exponent field e - 1, or for e = 0,
     * 1 the subnormals 2^-128, 2^-127 */
    const __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)e));
    const __m256i nrm = _mm256_slli_epi32(_mm256_sub_epi32(v, _mm256_set1_epi32(1)), 23);
    const __m256i sub = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), v);
    return _mm256_castsi256_ps(
        _mm256_blendv_epi8(nrm, sub, _mm256_cmpgt_epi32(_mm256_set1_epi32(2), v)));
}
RL_TILE_AI void rl__tile8_nib_T(int64_t n_cols, float *s, size_t ss, const void *group, size_t gs,
                                const void *vx, size_t xs, const int T, const int NL,
                                const int GN) {
    __m256 acc[2][RL_TILE8_T];
    _Pragma("GCC unroll 4") for (int k = 0; k < T; k++) acc[0][k] = acc[1][k] = _mm256_setzero_ps();
    /* d (fp16) or e (bytes) leads both layouts */
    const size_t bb = NL == 2 ? sizeof(rl__mxfp4_r8) : sizeof(rl__q40_r8);
    const size_t oq = NL == 2 ? offsetof(rl__mxfp4_r8, q) : offsetof(rl__q40_r8, q);
    const uint8_t *p[2] = {group, (const uint8_t *)group + gs};
    const __m256i m4 = _mm256_set1_epi8(15);
    const __m256i cb = _mm256_broadcastsi128_si256(
        _mm_loadu_si128((const __m128i *)(NL == 2 ? rl_mxfp4_values : rl__iq4nl_values)));
    const __m256i u = NL == 2 ? _mm256_add_epi8(cb, _mm256_set1_epi8(16))
                              : _mm256_xor_si256(cb, _mm256_set1_epi8((char)0x80));
    /* the codebook's tables: u whole (VNNI, mxfp4) or its low and high
     * nibbles */
    const __m256i tl = RL_TILE_VNNI || NL == 2 ? u : _mm256_and_si256(u, m4);
    const __m256i th = _mm256_and_si256(_mm256_srli_epi16(u, 4), m4);
    const int two = NL == 1 && !RL_TILE_VNNI;   /* AVX2 iq4_nl: two sums */
    const int split = NL == 2 && !RL_TILE_VNNI; /* AVX2 mxfp4: groups 4-7 in sh */
    for (int64_t i = 0; i < n_cols / 32; i++, p[0] += bb, p[1] += bb) {
        _Pragma("GCC unroll 2") for (int h = 0; h < GN; h++)
            RL_PF3(p[h]); /* 144 (mxfp4: 136) bytes a block */
        const rl__q80s *x[RL_TILE8_T];
        __m256i sl[2][RL_TILE8_T], sh[2][RL_TILE8_T];
        _Pragma("GCC unroll 4") for (int k = 0; k < T; k++) {
            x[k] = (const rl__q80s *)((const uint8_t *)vx + (size_t)k * xs) + i;
            sl[0][k] = sh[0][k] = sl[1][k] = sh[1][k] = _mm256_setzero_si256();
        }
        _Pragma("GCC unroll 8") for (int G = 0; G < 8; G++) {
            __m256i wl[2], wh[2];
            _Pragma("GCC unroll 2") for (int h = 0; h < GN; h++) {
                const __m256i raw = _mm256_loadu_si256((const __m256i *)(p[h] + oq + 32 * (G % 4)));
                const __m256i nib = _mm256_and_si256(G < 4 ? raw : _mm256_srli_epi16(raw, 4), m4);
                wl[h] = NL ? _mm256_shuffle_epi8(tl, nib) : nib;
                wh[h] = two ? _mm256_shuffle_epi8(th, nib) : nib;
            }
            _Pragma("GCC unroll 4") for (int k = 0; k < T; k++) {
                int32_t xv;
                memcpy(&xv, x[k]->qs + 4 * G, 4);
                const __m256i xb = _mm256_set1_epi32(xv);
                _Pragma("GCC unroll 2") for (int h = 0; h < GN; h++) {
                    if (split && G >= 4)
                        sh[h][k] = RL_TI_MACC(sh[h][k], wl[h], xb);
                    else
                        sl[h][k] = RL_TI_MACC(sl[h][k], wl[h], xb);
                    if (two) sh[h][k] = RL_TI_MACC(sh[h][k], wh[h], xb);
                }
            }
        }
        _Pragma("GCC unroll 2") for (int h = 0; h < GN; h++) {
            const __m256 d = NL == 2 ? rl__e8m0_half_ps(p[h])
                                     : _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p[h]));
            _Pragma("GCC unroll 4") for (int k = 0; k < T; k++) {
                const __m256i su = two ? rl__hl16_sum(sh[h][k], sl[h][k])
                                   : split
                                       ? _mm256_add_epi32(RL_TI_SUM(sl[h][k]), RL_TI_SUM(sh[h][k]))
                                       : RL_TI_SUM(sl[h][k]);
                const int32_t off = NL == 1   ? 8 * x[k]->s16 /* 128 sum x */
                                    : NL == 2 ? x[k]->s16     /* 16 sum x */
                                              : x[k]->s16 >> 1;
                const __m256i sumi = _mm256_sub_epi32(su, _mm256_set1_epi32(off));
                acc[h][k] = rl__q80_fstep(acc[h][k], d, x[k]->d, sumi);
            }
        }
    }
    rl__tileg_store(s, ss, acc, T, GN);
}
RL_TILE_AI void rl__tile8_q4_0r8_T(int64_t n_cols, float *s, size_t ss, const void *group,
                                   const void *vx, size_t xs, const int T) {
    rl__tile8_nib_T(n_cols, s, ss, group, 0, vx, xs, T, 0, 1);
}
RL_TILE_AI void rl__tile8_iq4_nlr8_T(int64_t n_cols, float *s, size_t ss, const void *group,
                                     const void *vx, size_t xs, const int T) {
    rl__tile8_nib_T(n_cols, s, ss, group, 0, vx, xs, T, 1, 1);
}
RL_TILE8_INST(q4_0r8)
RL_TILE8_INST(iq4_nlr8)
#if !RL_TILE_VNNI /* (the AVX512-VNNI table runs the AVX2 leaf) */
RL_TILE_AI void rl__tile8_mxfp4r8_T(int64_t n_cols, float *s, size_t ss, const void *group,
                                    const void *vx, size_t xs, const int T) {
    rl__tile8_nib_T(n_cols, s, ss, group, 0, vx, xs, T, 2, 1);
}
RL_TILE8_INST(mxfp4r8)
#endif

/* q4_K resident tile (kernels-impl.h, rl__q4k_r8): per super-block the 8
 * rows' packed 6-bit scales are decoded in registers into the packed
 * tile's int16 vectors (rl__q4k_x8's sc and mn, lane 2r / 2r + 1), kept on
 * the stack for the tokens; then rl__tile8_q4_K_T's integer and float
 * steps, the nibbles of sub-block 2j (low) and 2j + 1 (high) taken from the
 * same 8 vectors of chunk j.  FIVE: the q5_K resident tile (rl__q5k_r8),
 * the same steps on the codes with their fifth bits (rl__q5kr8_code: one
 * vector of bits a sub-block, moved to bit 4 per group), summed in int16
 * RL_TI_Q5K_G groups at a time as the packed q5_K tile's: its bits. */
RL_TILE_AI void rl__tile8_k4r8_T(int64_t n_cols, float *s, size_t ss, const void *group,
                                 const void *vx, size_t xs, const int T, const bool FIVE) {
    __m256 acc[RL_TILE8_T];
    _Pragma("GCC unroll 4") for (int k = 0; k < T; k++) acc[k] = _mm256_setzero_ps();
    const size_t bb = FIVE ? sizeof(rl__q5k_r8) : sizeof(rl__q4k_r8); /* block bytes */
    const int G = FIVE ? RL_TI_Q5K_G : 8;                             /* groups summed in int16 */
    _Alignas(32) int16_t scv[8][16], mnv[4][16];
    for (int64_t i = 0; i < n_cols / RL_QK_K; i++) {
        const uint8_t *blk = (const uint8_t *)group + (size_t)i * bb;
        const rl__q4k_r8 *p4 = (const void *)blk;
        const rl__q5k_r8 *p5 = (const void *)blk;
        rl__k4r8_scales(FIVE ? p5->sa : p4->sa, (uint8_t *)scv, (uint8_t *)mnv, 32);
        const rl_block_q8_K *x[RL_TILE8_T];
        __m256i sumi[RL_TILE8_T];
        rl__q8k_start(x, sumi, vx, xs, i, T);
        for (int b = 0; b < 8; b++) {
            RL_PF3(blk + bb / 8 * b); /* 1152 or 1408 bytes: 3 lines per sub-block */
            const __m256i hv =
                FIVE ? _mm256_loadu_si256((const __m256i *)p5->hb[b]) : _mm256_setzero_si256();
            const __m256i sc = RL_TI_SC(_mm256_load_si256((const __m256i *)scv[b]));
            _Pragma("GCC unroll 2") for (int g0 = 0; g0 < 8; g0 += G) {
                __m256i s16[RL_TILE8_T];
                _Pragma("GCC unroll 4") for (int k = 0; k < T; k++) s16[k] = _mm256_setzero_si256();
                _Pragma("GCC unroll 8") for (int g = g0; g < g0 + G; g++) {
                    const __m256i wq =
                        FIVE ? rl__q5kr8_code(p5, hv, b, g) : rl__k4r8_nib(p4->q, b, g);
                    _Pragma("GCC unroll 4") for (int k = 0; k < T; k++) {
                        int32_t xv;
                        memcpy(&xv, x[k]->qs + 32 * b + 4 * g, 4);
                        s16[k] = RL_TI_MAC(s16[k], wq, _mm256_set1_epi32(xv));
                    }
                }
                _Pragma("GCC unroll 4") for (int k = 0; k < T; k++) sumi[k] =
                    _mm256_add_epi32(sumi[k], RL_TI_SCALED(s16[k], sc));
            }
        }
        const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(FIVE ? p5->d : p4->d)));
        const __m256 dmin =
            _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(FIVE ? p5->dmin : p4->dmin)));
        rl__q4k_fstep(acc, sumi, &mnv[0][0], 16, d, dmin, x, T);
    }
    _Pragma("GCC unroll 4") for (int k = 0; k < T; k++)
        _mm256_storeu_ps(s + (size_t)k * ss, acc[k]);
}
RL_TILE_AI void rl__tile8_q4_Kr8_T(int64_t n_cols, float *s, size_t ss, const void *group,
                                   const void *vx, size_t xs, const int T) {
    rl__tile8_k4r8_T(n_cols, s, ss, group, vx, xs, T, false);
}
RL_TILE8_INST(q4_Kr8)
#if !RL_TILE_VNNI /* (the AVX512-VNNI table runs the AVX2 leaf) */
RL_TILE_AI void rl__tile8_q5_Kr8_T(int64_t n_cols, float *s, size_t ss, const void *group,
                                   const void *vx, size_t xs, const int T) {
    rl__tile8_k4r8_T(n_cols, s, ss, group, vx, xs, T, true);
}
RL_TILE8_INST(q5_Kr8)
#endif

#if !RL_TILE_VNNI /* (the AVX512-VNNI table runs the AVX2 leaf) */
/* iq4_xs resident tile (kernels-impl.h, rl__iq4xs_r8): per super-block the
 * 8 rows' packed scales are decoded in registers into rl__iq4xs_x8's sc
 * (16 (ls - 32) for the h plane, ls - 32 for the l plane, lane-doubled)
 * and mn, kept on the stack for the tokens; per group the nibbles are
 * looked up (vpshufb) as both planes of v + 128, then rl__tile8_iq4_xs_T's
 * integer and float steps (dmin = 128 d, exact). */
/* The codebook's v + 128 as vpshufb tables of its high and low nibbles. */
RL_TILE_AI void rl__iq4xs_planes(__m256i *th, __m256i *tl) {
    const __m256i m4 = _mm256_set1_epi8(15);
    const __m256i u = _mm256_xor_si256(
        _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)rl__iq4nl_values)),
        _mm256_set1_epi8((char)0x80));
    *th = _mm256_and_si256(_mm256_srli_epi16(u, 4), m4);
    *tl = _mm256_and_si256(u, m4);
}
RL_TILE_AI __m256i rl__i32x2(__m256i v) { /* int32 lanes r to int16 lanes 2r, 2r + 1 */
    return _mm256_or_si256(_mm256_and_si256(v, _mm256_set1_epi32(0xffff)),
                           _mm256_slli_epi32(v, 16));
}
/* sc[2b] = 16 (ls - 32), sc[2b + 1] = ls - 32 and mn as rl__iq4xs_x8's */
RL_TILE_AI void rl__iq4xsr8_scales(const rl__iq4xs_r8 *p, int16_t (*sc)[16], int16_t (*mn)[16]) {
    const __m256i hi = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p->sh));
    const __m256i lo = _mm256_loadu_si256((const __m256i *)p->sl); /* row r's 4 bytes in lane r */
    __m256i ls[8];
    _Pragma("GCC unroll 8") for (int b = 0; b < 8; b++) {
        /* bits 4b..4b+3 of scales_l, bits 2b, 2b+1 of scales_h */
        const __m256i l4 = _mm256_and_si256(_mm256_srlv_epi32(lo, _mm256_set1_epi32(4 * b)),
                                            _mm256_set1_epi32(15));
        const __m256i h2 =
            _mm256_and_si256(_mm256_srlv_epi32(hi, _mm256_set1_epi32(2 * b)), _mm256_set1_epi32(3));
        ls[b] =
            _mm256_sub_epi32(_mm256_or_si256(l4, _mm256_slli_epi32(h2, 4)), _mm256_set1_epi32(32));
        _mm256_storeu_si256((__m256i *)sc[2 * b + 1], rl__i32x2(ls[b]));
        _mm256_storeu_si256((__m256i *)sc[2 * b], rl__i32x2(_mm256_slli_epi32(ls[b], 4)));
    }
    _Pragma("GCC unroll 4") for (int q = 0; q < 4; q++) _mm256_storeu_si256(
        (__m256i *)mn[q], _mm256_or_si256(_mm256_and_si256(ls[2 * q], _mm256_set1_epi32(0xffff)),
                                          _mm256_slli_epi32(ls[2 * q + 1], 16)));
}
RL_TILE_AI void rl__tile8_iq4_xsr8_T(int64_t n_cols, float *s, size_t ss, const void *group,
                                     const void *vx, size_t xs, const int T) {
    __m256 acc[RL_TILE8_T];
    _Pragma("GCC unroll 4") for (int k = 0; k < T; k++) acc[k] = _mm256_setzero_ps();
    const rl__iq4xs_r8 *p = group;
    const __m256i m4 = _mm256_set1_epi8(15);
    __m256i th, tl;
    rl__iq4xs_planes(&th, &tl);
    _Alignas(32) int16_t scv[16][16], mnv[4][16];
    for (int64_t i = 0; i < n_cols / RL_QK_K; i++, p++) {
        rl__iq4xsr8_scales(p, scv, mnv);
        const rl_block_q8_K *x[RL_TILE8_T];
        __m256i sumi[RL_TILE8_T];
        rl__q8k_start(x, sumi, vx, xs, i, T);
        for (int b = 0; b < 8; b++) {
            RL_PF3((const char *)p + 136 * b); /* 1088 bytes: 17 lines */
            __m256i sh[RL_TILE8_T], sl[RL_TILE8_T];
            _Pragma("GCC unroll 4") for (int k = 0; k < T; k++) sh[k] = sl[k] =
                _mm256_setzero_si256();
            _Pragma("GCC unroll 8") for (int g = 0; g < 8; g++) {
                const __m256i raw = _mm256_loadu_si256((const __m256i *)p->q[4 * b + g % 4]);
                const __m256i nib = _mm256_and_si256(g < 4 ? raw : _mm256_srli_epi16(raw, 4), m4);
                const __m256i wh = _mm256_shuffle_epi8(th, nib), wl = _mm256_shuffle_epi8(tl, nib);
                _Pragma("GCC unroll 4") for (int k = 0; k < T; k++) {
                    int32_t xv;
                    memcpy(&xv, x[k]->qs + 32 * b + 4 * g, 4);
                    const __m256i xb = _mm256_set1_epi32(xv);
                    sh[k] = RL_TI_MACC(sh[k], wh, xb);
                    sl[k] = RL_TI_MACC(sl[k], wl, xb);
                }
            }
            const __m256i ch = _mm256_load_si256((const __m256i *)scv[2 * b]);
            const __m256i cl = _mm256_load_si256((const __m256i *)scv[2 * b + 1]);
            _Pragma("GCC unroll 4") for (int k = 0; k < T; k++) sumi[k] = _mm256_add_epi32(
                sumi[k], _mm256_add_epi32(RL_TI_SCALED(sh[k], ch), RL_TI_SCALED(sl[k], cl)));
        }
        const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p->d));
        rl__q4k_fstep(acc, sumi, &mnv[0][0], 16, d, _mm256_mul_ps(d, _mm256_set1_ps(128.0f)), x, T);
    }
    _Pragma("GCC unroll 4") for (int k = 0; k < T; k++)
        _mm256_storeu_ps(s + (size_t)k * ss, acc[k]);
}
RL_TILE8_INST(iq4_xsr8)
#endif

/* q6_K resident tile (kernels-impl.h, rl__q6k_r8): per half h and group
 * g the ql bytes ql[h][g], ql[h][8 + g] and the qh byte qh[h][g] are
 * loaded once and give the codes of all four quadrants o (low or high
 * nibble, qh bits 2o and 2o + 1 above it), as the per-token q6_K dot does;
 * groups g and g + 1 of a quadrant are summed in int16 (2 * 2 * 63 * 127
 * fits: one sub-block is groups 0..3 or 4..7), then rl__tile8_q6_K_T's
 * steps.  The scales are widened from int8 per super-block onto the stack
 * for the tokens (rl__r8_i8x2, avx2-impl.h). */

/* The codes of quadrant o (a constant) of one group: l0 = ql[h][g], l1 =
 * ql[h][8 + g], hb = qh[h][g]. */
RL_TILE_AI __m256i rl__q6r8_codes(__m256i l0, __m256i l1, __m256i hb, const int o) {
    const __m256i m4 = _mm256_set1_epi8(15), m30 = _mm256_set1_epi8(0x30);
    const __m256i l = o & 1 ? l1 : l0;
    const __m256i nib = _mm256_and_si256(o < 2 ? l : _mm256_srli_epi16(l, 4), m4);
    const __m256i hi = o == 0   ? _mm256_slli_epi16(hb, 4)
                       : o == 1 ? _mm256_slli_epi16(hb, 2)
                       : o == 2 ? hb
                                : _mm256_srli_epi16(hb, 2);
    return _mm256_or_si256(nib, _mm256_and_si256(hi, m30));
}

#ifndef RL_PF_DIST_Q6R8
#define RL_PF_DIST_Q6R8 RL_PF_DIST
#endif
#define RL_PF3_Q6R8(p) RL_PF3((const char *)(p) + (RL_PF_DIST_Q6R8 - RL_PF_DIST))
RL_TILE_AI void rl__tile8_q6_Kr8_T(int64_t n_cols, float *s, size_t ss, const void *group,
                                   const void *vx, size_t xs, const int T) {
    __m256 acc[RL_TILE8_T];
    _Pragma("GCC unroll 4") for (int k = 0; k < T; k++) acc[k] = _mm256_setzero_ps();
    const rl__q6k_r8 *p = group;
    _Alignas(32) int16_t scv[16][16], scp[8][16];
    for (int64_t i = 0; i < n_cols / RL_QK_K; i++, p++) {
        RL_PF3_Q6R8(p); /* 1680 bytes: 27 lines, 3 here and 3 per pair of groups */
        _Pragma("GCC unroll 16") for (int b = 0; b < 16; b++)
            _mm256_store_si256((__m256i *)scv[b], rl__r8_i8x2(p->sc[b], p->sc[b]));
        _Pragma("GCC unroll 8") for (int q = 0; q < 8; q++)
            _mm256_store_si256((__m256i *)scp[q], rl__r8_i8x2(p->sc[2 * q], p->sc[2 * q + 1]));
        const rl_block_q8_K *x[RL_TILE8_T];
        __m256i sumi[RL_TILE8_T];
        rl__q8k_start(x, sumi, vx, xs, i, T);
        for (int h = 0; h < 2; h++) {
            _Pragma("GCC unroll 4") for (int g = 0; g < 8; g += 2) {
                RL_PF3_Q6R8((const char *)p + 192 * (1 + 4 * h + g / 2));
                const __m256i a0 = _mm256_loadu_si256((const __m256i *)p->ql[h][g]);
                const __m256i a1 = _mm256_loadu_si256((const __m256i *)p->ql[h][8 + g]);
                const __m256i ah = _mm256_loadu_si256((const __m256i *)p->qh[h][g]);
                const __m256i b0 = _mm256_loadu_si256((const __m256i *)p->ql[h][g + 1]);
                const __m256i b1 = _mm256_loadu_si256((const __m256i *)p->ql[h][9 + g]);
                const __m256i bh = _mm256_loadu_si256((const __m256i *)p->qh[h][g + 1]);
                _Pragma("GCC unroll 4") for (int o = 0; o < 4; o++) {
                    const __m256i wa = rl__q6r8_codes(a0, a1, ah, o);
                    const __m256i wb = rl__q6r8_codes(b0, b1, bh, o);
                    const __m256i sc =
                        RL_TI_SC(_mm256_load_si256((const __m256i *)scv[8 * h + 2 * o + g / 4]));
                    _Pragma("GCC unroll 4") for (int k = 0; k < T; k++) {
                        const int8_t *xq = x[k]->qs + 128 * h + 32 * o + 4 * g;
                        int32_t x0, x1;
                        memcpy(&x0, xq, 4);
                        memcpy(&x1, xq + 4, 4);
                        const __m256i s16 =
                            RL_TI_MAC(RL_TI_MAC(_mm256_setzero_si256(), wa, _mm256_set1_epi32(x0)),
                                      wb, _mm256_set1_epi32(x1));
                        sumi[k] = _mm256_add_epi32(sumi[k], RL_TI_SCALED(s16, sc));
                        RL_TI_KEEP(sumi[k]);
                    }
                }
            }
        }
        const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p->d));
        rl__q6k_fstep(acc, sumi, &scp[0][0], 16, d, x, T);
    }
    _Pragma("GCC unroll 4") for (int k = 0; k < T; k++)
        _mm256_storeu_ps(s + (size_t)k * ss, acc[k]);
}

RL_TILE8_INST(q6_Kr8)
