/* AVX512-VNNI leaves of the tiles (kernels-impl.h, rl__tile8 dots and
 * rl__rtile dots; q4_K, q6_K, q4_1): tile-impl.h's templates with vpdpbusd
 * summing each row's byte products into its int32 lane (one uop for
 * vpmaddubsw + vpaddw; the scale by vpmulld per sub-block).  The sums are
 * exact, so these are the AVX2 leaves' and the scalar twins' bits
 * (test_kernels_tile.c runs every table).  The packers, the conversions of
 * resident groups and dot_row stay the AVX2 table's.  Compiled with
 * -mavx512f -mavx512bw -mavx512vl -mavx512vnni (Makefile) and reached only
 * through the "avx512vnni" table. */
#define RL_TILE_VNNI 1
#include "kernels/x86/tile-impl.h"

#include <stddef.h>

/* ---- pair leaves (kernels-impl.h, rl__tile16_fn) ----
 * Two groups of 8 rows in the 16 lanes of a zmm register: each weight
 * vector is group A's 32 bytes below group B's (the same offsets in both),
 * each scale and float vector likewise, so lane r < 8 runs the 8-row leaf's
 * operations for row r of A and lane 8 + r for row r of B.  The integer
 * sums are exact (the same int32 per lane in any order), the float steps
 * are the 8-row leaf's, so every lane is that leaf's bits.  vpdpbusd on
 * zmm does twice the multiply-adds per instruction of the 8-row leaves,
 * and the weights' unpacking is shared by up to RL_TILE16_T tokens. */
/* q4_K's scales: the products of 16 elements (4 groups of 4) sum to at
 * most 16 * 15 * 127 = 30480, which fits int16, so a half sub-block's
 * scale multiply-add is one vpdpwssd against (scale, 0) int16 pairs (the
 * sum's high half, 0 or -1, meets the 0) instead of vpmulld + vpaddd. */

/* 4 activation bytes broadcast to every int32 lane. */
RL_TILE_AI __m512i rl__z_bcast(const void *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

/* acc + w (unsigned bytes) . the 4 signed bytes at p in every lane:
 * vpdpbusd with the bytes as its broadcast memory operand ({1to16}), one
 * fused uop where the intrinsic on rl__z_bcast compiles (GCC 12) to a
 * separate vpbroadcastd; the same instruction, so the same sums. */
RL_TILE_AI __m512i rl__z_dpb(__m512i acc, __m512i w, const void *p) {
    __asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*(const int32_t *)p));
    return acc;
}

/* The pair leaf of type TY at T = n_x (1..RL_TILE16_T). */
#define RL_TILE16_INST(TY)                                                                         \
    static void rl__tile16_##TY##_vnni(int64_t n_cols, float *s, size_t ss, const void *g0,        \
                                       size_t gs, const void *vx, size_t xs, int n_x) {            \
        switch (n_x) {                                                                             \
        case 8:                                                                                    \
            rl__tile16_##TY##_T(n_cols, s, ss, g0, gs, vx, xs, 8);                                 \
            break;                                                                                 \
        case 7:                                                                                    \
            rl__tile16_##TY##_T(n_cols, s, ss, g0, gs, vx, xs, 7);                                 \
            break;                                                                                 \
        case 6:                                                                                    \
            rl__tile16_##TY##_T(n_cols, s, ss, g0, gs, vx, xs, 6);                                 \
            break;                                                                                 \
        case 5:                                                                                    \
            rl__tile16_##TY##_T(n_cols, s, ss, g0, gs, vx, xs, 5);                                 \
            break;                                                                                 \
        case 4:                                                                                    \
            rl__tile16_##TY##_T(n_cols, s, ss, g0, gs, vx, xs, 4);                                 \
            break;                                                                                 \
        case 3:                                                                                    \
            rl__tile16_##TY##_T(n_cols, s, ss, g0, gs, vx, xs, 3);                                 \
            break;                                                                                 \
        case 2:                                                                                    \
            rl__tile16_##TY##_T(n_cols, s, ss, g0, gs, vx, xs, 2);                                 \
            break;                                                                                 \
        default:                                                                                   \
            rl__tile16_##TY##_T(n_cols, s, ss, g0, gs, vx, xs, 1);                                 \
            break;                                                                                 \
        }                                                                                          \
    }

/* q4_K float step (rl__q4k_fstep's lanes): mn[q] are the pair's min
 * vectors (int16 pairs: lanes 2r, 2r + 1 = the mins of sub-blocks 2q,
 * 2q + 1), each against the token's q8_K sums of those two sub-blocks as
 * an int16 pair (|sum| <= 32 * 127: exact), formed in vectors. */
RL_TILE_AI void rl__q4k_fstep16(__m512 *acc, const __m512i *sumi, const __m512i *mn, __m512 d,
                                __m512 dmin, const rl_block_q8_K *const *x, const int T) {
    _Pragma("GCC unroll 8") for (int k = 0; k < T; k++) {
        _Alignas(32) int32_t pq[8];
        const __m256i b32 = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)x[k]->bsums),
                                              _mm256_set1_epi16(1));
        /* per 128-bit half: pairs (0,1) (2,3) | (4,5) (6,7) at int32 lanes 0, 1 | 4, 5 */
        _mm256_store_si256((__m256i *)pq, _mm256_packs_epi32(b32, b32));
        __m512i msum = _mm512_dpwssd_epi32(_mm512_setzero_si512(), mn[0], _mm512_set1_epi32(pq[0]));
        msum = _mm512_dpwssd_epi32(msum, mn[1], _mm512_set1_epi32(pq[1]));
        msum = _mm512_dpwssd_epi32(msum, mn[2], _mm512_set1_epi32(pq[4]));
        msum = _mm512_dpwssd_epi32(msum, mn[3], _mm512_set1_epi32(pq[5]));
        const __m512 dx = _mm512_set1_ps(x[k]->d);
        acc[k] = _mm512_fmadd_ps(_mm512_mul_ps(d, dx), _mm512_cvtepi32_ps(sumi[k]), acc[k]);
        acc[k] = _mm512_fnmadd_ps(_mm512_mul_ps(dmin, dx), _mm512_cvtepi32_ps(msum), acc[k]);
    }
}

/* q6_K float step (rl__q6k_fstep's lanes). */
RL_TILE_AI void rl__q6k_fstep16(__m512 *acc, const __m512i *sumi, const __m512i *scp, __m512 d,
                                const rl_block_q8_K *const *x, const int T) {
    _Pragma("GCC unroll 8") for (int k = 0; k < T; k++) {
        __m512i corr = _mm512_setzero_si512();
        _Pragma("GCC unroll 8") for (int q = 0; q < 8; q++) {
            uint32_t bp;
            memcpy(&bp, &x[k]->bsums[2 * q], 4);
            corr = _mm512_dpwssd_epi32(corr, scp[q], _mm512_set1_epi32((int)bp));
        }
        const __m512i tot = _mm512_sub_epi32(sumi[k], _mm512_slli_epi32(corr, 5));
        acc[k] = _mm512_fmadd_ps(_mm512_mul_ps(d, _mm512_set1_ps(x[k]->d)), _mm512_cvtepi32_ps(tot),
                                 acc[k]);
    }
}

/* q4_1 float step (rl__q41_fstep1's lanes; VNNI sums are int32 already)
 * for token scales dx, sx. */
RL_TILE_AI __m512 rl__q41_fstep16(__m512 acc, __m512i sum, __m512 d, __m512 m, float dx, float sx) {
    acc = _mm512_fmadd_ps(_mm512_mul_ps(d, _mm512_set1_ps(dx)), _mm512_cvtepi32_ps(sum), acc);
    return _mm512_fmadd_ps(m, _mm512_set1_ps(sx), acc);
}

#define RL_Z_STORE(s, ss, acc, T)                                                                  \
    _Pragma("GCC unroll 8") for (int k = 0; k < (T); k++)                                          \
        _mm512_storeu_ps((s) + (size_t)k * (ss), (acc)[k])

#define RL_Z_XROWS(x, TYPE, vx, xs, i, T)                                                          \
    _Pragma("GCC unroll 8") for (int k = 0; k < (T); k++) x[k] =                                   \
        (const TYPE *)((const uint8_t *)(vx) + (size_t)k * (xs)) + (i)

/* Packed pairs (rl__tile8.dot16): two packed groups interleaved 32 bytes
 * at a time (kernels-impl.h), so each field of the packed type TY is one
 * 64-byte load: group A's 32 bytes, then B's. */
#define RL_ZF(p, TY, F) _mm512_loadu_si512((const uint8_t *)(p) + 2 * __builtin_offsetof(TY, F))

/* The packed pair leaf of type TY at T = n_x (1..RL_TILE16_T).  It does
 * not prefetch the next pair (rl__pf): measured on Zen 3's AVX2 table
 * only, not yet on an AVX-512 machine. */
#define RL_TILE16P_INST(TY)                                                                        \
    static void rl__tile16p_##TY##_vnni(int64_t n_cols, float *s, size_t ss, const void *pp,       \
                                        const void *vx, size_t xs, int n_x, rl__pf *pf) {          \
        (void)pf;                                                                                  \
        switch (n_x) {                                                                             \
        case 8:                                                                                    \
            rl__tile16p_##TY##_T(n_cols, s, ss, pp, vx, xs, 8);                                    \
            break;                                                                                 \
        case 7:                                                                                    \
            rl__tile16p_##TY##_T(n_cols, s, ss, pp, vx, xs, 7);                                    \
            break;                                                                                 \
        case 6:                                                                                    \
            rl__tile16p_##TY##_T(n_cols, s, ss, pp, vx, xs, 6);                                    \
            break;                                                                                 \
        case 5:                                                                                    \
            rl__tile16p_##TY##_T(n_cols, s, ss, pp, vx, xs, 5);                                    \
            break;                                                                                 \
        case 4:                                                                                    \
            rl__tile16p_##TY##_T(n_cols, s, ss, pp, vx, xs, 4);                                    \
            break;                                                                                 \
        case 3:                                                                                    \
            rl__tile16p_##TY##_T(n_cols, s, ss, pp, vx, xs, 3);                                    \
            break;                                                                                 \
        case 2:                                                                                    \
            rl__tile16p_##TY##_T(n_cols, s, ss, pp, vx, xs, 2);                                    \
            break;                                                                                 \
        default:                                                                                   \
            rl__tile16p_##TY##_T(n_cols, s, ss, pp, vx, xs, 1);                                    \
            break;                                                                                 \
        }                                                                                          \
    }

/* q4_K and q5_K pairs: vpdpwssd reads each int32 sum of G groups as an
 * int16, so G * 4 * 15 * 127 (q4_K, G 4: 30480) or G * 4 * 31 * 127
 * (q5_K, G 2: 31496) must stay below 32768. */
RL_TILE_AI void rl__tile16p_k4_T(int64_t n_cols, float *s, size_t ss, const void *pp,
                                 const void *vx, size_t xs, const int T, const int G) {
    __m512 acc[RL_TILE16_T];
    _Pragma("GCC unroll 8") for (int k = 0; k < T; k++) acc[k] = _mm512_setzero_ps();
    const uint8_t *p = pp;
    for (int64_t i = 0; i < n_cols / RL_QK_K; i++, p += 2 * sizeof(rl__q4k_x8)) {
        const rl_block_q8_K *x[RL_TILE16_T];
        __m512i sumi[RL_TILE16_T];
        RL_Z_XROWS(x, rl_block_q8_K, vx, xs, i, T);
        _Pragma("GCC unroll 8") for (int k = 0; k < T; k++) sumi[k] = _mm512_setzero_si512();
        for (int sb = 0; sb < 8; sb++) {
            /* the scale is 6 bits: (sc, 0) as int16 pairs, for vpdpwssd */
            const __m512i sc = _mm512_srai_epi32(RL_ZF(p, rl__q4k_x8, sc[sb]), 16);
            _Pragma("GCC unroll 4") for (int g0 = 0; g0 < 8; g0 += G) {
                __m512i s32[RL_TILE16_T];
                _Pragma("GCC unroll 8") for (int k = 0; k < T; k++) s32[k] = _mm512_setzero_si512();
                _Pragma("GCC unroll 4") for (int g = g0; g < g0 + G; g++) {
                    const __m512i wq = RL_ZF(p, rl__q4k_x8, q[8 * sb + g]);
                    _Pragma("GCC unroll 8") for (int k = 0; k < T; k++) s32[k] =
                        rl__z_dpb(s32[k], wq, x[k]->qs + 32 * sb + 4 * g);
                }
                _Pragma("GCC unroll 8") for (int k = 0; k < T; k++) sumi[k] =
                    _mm512_dpwssd_epi32(sumi[k], s32[k], sc);
            }
        }
        __m512i mn[4];
        _Pragma("GCC unroll 4") for (int q = 0; q < 4; q++) mn[q] = RL_ZF(p, rl__q4k_x8, mn[q]);
        rl__q4k_fstep16(acc, sumi, mn, _mm512_castsi512_ps(RL_ZF(p, rl__q4k_x8, d)),
                        _mm512_castsi512_ps(RL_ZF(p, rl__q4k_x8, dmin)), x, T);
    }
    RL_Z_STORE(s, ss, acc, T);
}
RL_TILE_AI void rl__tile16p_q4_K_T(int64_t n_cols, float *s, size_t ss, const void *pp,
                                   const void *vx, size_t xs, const int T) {
    rl__tile16p_k4_T(n_cols, s, ss, pp, vx, xs, T, 4);
}
RL_TILE_AI void rl__tile16p_q5_K_T(int64_t n_cols, float *s, size_t ss, const void *pp,
                                   const void *vx, size_t xs, const int T) {
    rl__tile16p_k4_T(n_cols, s, ss, pp, vx, xs, T, 2);
}
RL_TILE16P_INST(q4_K)
RL_TILE16P_INST(q5_K)

RL_TILE_AI void rl__tile16p_q6_K_T(int64_t n_cols, float *s, size_t ss, const void *pp,
                                   const void *vx, size_t xs, const int T) {
    __m512 acc[RL_TILE16_T];
    _Pragma("GCC unroll 8") for (int k = 0; k < T; k++) acc[k] = _mm512_setzero_ps();
    const uint8_t *p = pp;
    for (int64_t i = 0; i < n_cols / RL_QK_K; i++, p += 2 * sizeof(rl__q6k_x8)) {
        const rl_block_q8_K *x[RL_TILE16_T];
        __m512i sumi[RL_TILE16_T];
        RL_Z_XROWS(x, rl_block_q8_K, vx, xs, i, T);
        _Pragma("GCC unroll 8") for (int k = 0; k < T; k++) sumi[k] = _mm512_setzero_si512();
        for (int sb = 0; sb < 16; sb++) {
            const __m512i sc = _mm512_srai_epi32(RL_ZF(p, rl__q6k_x8, sc[sb]), 16);
            const __m512i w0 = RL_ZF(p, rl__q6k_x8, q[4 * sb]);
            const __m512i w1 = RL_ZF(p, rl__q6k_x8, q[4 * sb + 1]);
            const __m512i w2 = RL_ZF(p, rl__q6k_x8, q[4 * sb + 2]);
            const __m512i w3 = RL_ZF(p, rl__q6k_x8, q[4 * sb + 3]);
            _Pragma("GCC unroll 8") for (int k = 0; k < T; k++) {
                const int8_t *xq = x[k]->qs + 16 * sb;
                __m512i s32 = rl__z_dpb(_mm512_setzero_si512(), w0, xq);
                s32 = rl__z_dpb(s32, w1, xq + 4);
                s32 = rl__z_dpb(s32, w2, xq + 8);
                s32 = rl__z_dpb(s32, w3, xq + 12);
                sumi[k] = _mm512_add_epi32(sumi[k], _mm512_mullo_epi32(s32, sc));
            }
        }
        __m512i scp[8];
        _Pragma("GCC unroll 8") for (int q = 0; q < 8; q++) scp[q] = RL_ZF(p, rl__q6k_x8, scp[q]);
        rl__q6k_fstep16(acc, sumi, scp, _mm512_castsi512_ps(RL_ZF(p, rl__q6k_x8, d)), x, T);
    }
    RL_Z_STORE(s, ss, acc, T);
}
RL_TILE16P_INST(q6_K)

RL_TILE_AI void rl__tile16p_q4_1_T(int64_t n_cols, float *s, size_t ss, const void *pp,
                                   const void *vx, size_t xs, const int T) {
    __m512 acc[RL_TILE16_T];
    _Pragma("GCC unroll 8") for (int k = 0; k < T; k++) acc[k] = _mm512_setzero_ps();
    const uint8_t *p = pp;
    for (int64_t i = 0; i < n_cols / 32; i++, p += 2 * sizeof(rl__q41_x8)) {
        const rl_block_q8_1 *x[RL_TILE16_T];
        __m512i s32[RL_TILE16_T];
        RL_Z_XROWS(x, rl_block_q8_1, vx, xs, i, T);
        _Pragma("GCC unroll 8") for (int k = 0; k < T; k++) s32[k] = _mm512_setzero_si512();
        _Pragma("GCC unroll 8") for (int g = 0; g < 8; g++) {
            const __m512i wq = RL_ZF(p, rl__q41_x8, q[g]);
            _Pragma("GCC unroll 8") for (int k = 0; k < T; k++) s32[k] =
                rl__z_dpb(s32[k], wq, x[k]->qs + 4 * g);
        }
        const __m512 d = _mm512_castsi512_ps(RL_ZF(p, rl__q41_x8, d)),
                     m = _mm512_castsi512_ps(RL_ZF(p, rl__q41_x8, m));
        _Pragma("GCC unroll 8") for (int k = 0; k < T; k++) acc[k] =
            rl__q41_fstep16(acc[k], s32[k], d, m, rl__f16c(x[k]->d), rl__f16c(x[k]->s));
    }
    RL_Z_STORE(s, ss, acc, T);
}
RL_TILE16P_INST(q4_1)

/* The same leaf on the activations' float-scale form (rl__q81f, written by
 * x_prep for resident q4_1 matrices): the scales it converts per block and
 * token above arrive as floats, exactly those values, so the same bits. */
RL_TILE_AI void rl__tile16p_q4_1f_T(int64_t n_cols, float *s, size_t ss, const void *pp,
                                    const void *vx, size_t xs, const int T) {
    __m512 acc[RL_TILE16_T];
    _Pragma("GCC unroll 8") for (int k = 0; k < T; k++) acc[k] = _mm512_setzero_ps();
    const uint8_t *p = pp;
    for (int64_t i = 0; i < n_cols / 32; i++, p += 2 * sizeof(rl__q41_x8)) {
        const rl__q81f *x[RL_TILE16_T];
        __m512i s32[RL_TILE16_T];
        RL_Z_XROWS(x, rl__q81f, vx, xs, i, T);
        _Pragma("GCC unroll 8") for (int k = 0; k < T; k++) s32[k] = _mm512_setzero_si512();
        _Pragma("GCC unroll 8") for (int g = 0; g < 8; g++) {
            const __m512i wq = RL_ZF(p, rl__q41_x8, q[g]);
            _Pragma("GCC unroll 8") for (int k = 0; k < T; k++) s32[k] =
                rl__z_dpb(s32[k], wq, x[k]->qs + 4 * g);
        }
        const __m512 d = _mm512_castsi512_ps(RL_ZF(p, rl__q41_x8, d)),
                     m = _mm512_castsi512_ps(RL_ZF(p, rl__q41_x8, m));
        _Pragma("GCC unroll 8") for (int k = 0; k < T; k++) acc[k] =
            rl__q41_fstep16(acc[k], s32[k], d, m, x[k]->d, x[k]->s);
    }
    RL_Z_STORE(s, ss, acc, T);
}
RL_TILE16P_INST(q4_1f)

/* Resident pairs (rl__rtile.dot16): group B at g0 + gs, each vector the
 * two groups' 32 bytes at the same offset, joined in a register. */
/* Resident q4_1 pair (two rl__q41_r8): the low and high nibbles of each
 * weight vector are groups v and v + 4 of the packed tile. */
RL_TILE_AI void rl__tile16_q4_1r8_T(int64_t n_cols, float *s, size_t ss, const void *g0, size_t gs,
                                    const void *vx, size_t xs, const int T) {
    __m512 acc[RL_TILE16_T];
    _Pragma("GCC unroll 8") for (int k = 0; k < T; k++) acc[k] = _mm512_setzero_ps();
    const rl__q41_r8 *a = g0, *b = (const rl__q41_r8 *)((const uint8_t *)g0 + gs);
    const __m512i m4 = _mm512_set1_epi8(15);
    for (int64_t i = 0; i < n_cols / 32; i++, a++, b++) {
        RL_PF3(a);
        RL_PF3(b);
        const rl__q81f *x[RL_TILE16_T];
        __m512i s32[RL_TILE16_T];
        RL_Z_XROWS(x, rl__q81f, vx, xs, i, T);
        _Pragma("GCC unroll 8") for (int k = 0; k < T; k++) s32[k] = _mm512_setzero_si512();
        _Pragma("GCC unroll 4") for (int v = 0; v < 4; v++) {
            const __m512i raw = rl__z_load2(a->q[v], b->q[v]);
            const __m512i lo = _mm512_and_si512(raw, m4);
            const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(raw, 4), m4);
            _Pragma("GCC unroll 8") for (int k = 0; k < T; k++) {
                s32[k] = rl__z_dpb(s32[k], lo, x[k]->qs + 4 * v);
                s32[k] = rl__z_dpb(s32[k], hi, x[k]->qs + 16 + 4 * v);
            }
        }
        const __m512 d = rl__z_cvtph2(a->d, b->d), m = rl__z_cvtph2(a->m, b->m);
        _Pragma("GCC unroll 8") for (int k = 0; k < T; k++) acc[k] =
            rl__q41_fstep16(acc[k], s32[k], d, m, x[k]->d, x[k]->s);
    }
    RL_Z_STORE(s, ss, acc, T);
}
RL_TILE16_INST(q4_1r8)

/* Resident q4_K pair (two rl__q4k_r8): each group's scales decoded as the
 * 8-row leaf does (rl__q4kr8_scales), each weight vector read once for its
 * two sub-blocks (low nibbles 2j, high 2j + 1). */
RL_TILE_AI void rl__tile16_q4_Kr8_T(int64_t n_cols, float *s, size_t ss, const void *g0, size_t gs,
                                    const void *vx, size_t xs, const int T) {
    __m512 acc[RL_TILE16_T];
    _Pragma("GCC unroll 8") for (int k = 0; k < T; k++) acc[k] = _mm512_setzero_ps();
    const rl__q4k_r8 *a = g0, *b = (const rl__q4k_r8 *)((const uint8_t *)g0 + gs);
    const __m512i m4 = _mm512_set1_epi8(15);
    _Alignas(32) int16_t scA[8][16], mnA[4][16], scB[8][16], mnB[4][16];
    for (int64_t i = 0; i < n_cols / RL_QK_K; i++, a++, b++) {
        rl__q4kr8_scales(a, (uint8_t *)scA, (uint8_t *)mnA, 32);
        rl__q4kr8_scales(b, (uint8_t *)scB, (uint8_t *)mnB, 32);
        const rl_block_q8_K *x[RL_TILE16_T];
        __m512i sumi[RL_TILE16_T];
        RL_Z_XROWS(x, rl_block_q8_K, vx, xs, i, T);
        _Pragma("GCC unroll 8") for (int k = 0; k < T; k++) sumi[k] = _mm512_setzero_si512();
        for (int j = 0; j < 4; j++) {
            RL_PF3((const char *)a + 288 * j); /* 1152 bytes a group: 4.5 lines per j */
            RL_PF3((const char *)a + 288 * j + 192);
            RL_PF3((const char *)b + 288 * j);
            RL_PF3((const char *)b + 288 * j + 192);
            const __m512i sl = _mm512_srai_epi32(rl__z_load2(scA[2 * j], scB[2 * j]), 16);
            const __m512i sh = _mm512_srai_epi32(rl__z_load2(scA[2 * j + 1], scB[2 * j + 1]), 16);
            _Pragma("GCC unroll 2") for (int hf = 0; hf < 2; hf++) {
                __m512i slo[RL_TILE16_T], shi[RL_TILE16_T];
                _Pragma("GCC unroll 8") for (int k = 0; k < T; k++) {
                    slo[k] = _mm512_setzero_si512();
                    shi[k] = _mm512_setzero_si512();
                }
                _Pragma("GCC unroll 4") for (int g = 4 * hf; g < 4 * hf + 4; g++) {
                    const __m512i raw = rl__z_load2(a->q[8 * j + g], b->q[8 * j + g]);
                    const __m512i lo = _mm512_and_si512(raw, m4);
                    const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(raw, 4), m4);
                    _Pragma("GCC unroll 8") for (int k = 0; k < T; k++) {
                        const int8_t *xq = x[k]->qs + 64 * j + 4 * g;
                        slo[k] = rl__z_dpb(slo[k], lo, xq);
                        shi[k] = rl__z_dpb(shi[k], hi, xq + 32);
                    }
                }
                _Pragma("GCC unroll 8") for (int k = 0; k < T; k++) sumi[k] =
                    _mm512_dpwssd_epi32(_mm512_dpwssd_epi32(sumi[k], slo[k], sl), shi[k], sh);
            }
        }
        __m512i mn[4];
        _Pragma("GCC unroll 4") for (int q = 0; q < 4; q++) mn[q] = rl__z_load2(mnA[q], mnB[q]);
        rl__q4k_fstep16(acc, sumi, mn, rl__z_cvtph2(a->d, b->d), rl__z_cvtph2(a->dmin, b->dmin), x,
                        T);
    }
    RL_Z_STORE(s, ss, acc, T);
}
RL_TILE16_INST(q4_Kr8)

/* Resident q6_K pair (two rl__q6k_r8): codes assembled as the 8-row leaf
 * does, on both groups' bytes at once. */
RL_TILE_AI void rl__tile16_q6_Kr8_T(int64_t n_cols, float *s, size_t ss, const void *g0, size_t gs,
                                    const void *vx, size_t xs, const int T) {
    __m512 acc[RL_TILE16_T];
    _Pragma("GCC unroll 8") for (int k = 0; k < T; k++) acc[k] = _mm512_setzero_ps();
    const rl__q6k_r8 *a = g0, *b = (const rl__q6k_r8 *)((const uint8_t *)g0 + gs);
    const __m512i m4 = _mm512_set1_epi8(15), m3 = _mm512_set1_epi8(3);
    for (int64_t i = 0; i < n_cols / RL_QK_K; i++, a++, b++) {
        const rl_block_q8_K *x[RL_TILE16_T];
        __m512i sumi[RL_TILE16_T];
        RL_Z_XROWS(x, rl_block_q8_K, vx, xs, i, T);
        _Pragma("GCC unroll 8") for (int k = 0; k < T; k++) sumi[k] = _mm512_setzero_si512();
        for (int sb = 0; sb < 16; sb++) {
            const int h = sb / 8, o = (sb % 8) / 2, g0i = 4 * (sb % 2);
            RL_PF1((const char *)a + 105 * sb); /* 1680 bytes: 2 lines per sub-block */
            RL_PF1((const char *)a + 105 * sb + 64);
            RL_PF1((const char *)b + 105 * sb);
            RL_PF1((const char *)b + 105 * sb + 64);
            const __m512i sc = _mm512_srai_epi32(
                RL_Z2(rl__r8_i8x2(a->sc[sb], a->sc[sb]), rl__r8_i8x2(b->sc[sb], b->sc[sb])), 16);
            __m512i w[4];
            _Pragma("GCC unroll 4") for (int u = 0; u < 4; u++) {
                const int g = g0i + u;
                const __m512i lb =
                    rl__z_load2(a->ql[h][8 * (o & 1) + g], b->ql[h][8 * (o & 1) + g]);
                const __m512i hb = rl__z_load2(a->qh[h][g], b->qh[h][g]);
                const __m512i nib = _mm512_and_si512(o < 2 ? lb : _mm512_srli_epi16(lb, 4), m4);
                const __m512i hi = _mm512_slli_epi16(
                    _mm512_and_si512(_mm512_srl_epi16(hb, _mm_cvtsi32_si128(2 * o)), m3), 4);
                w[u] = _mm512_or_si512(nib, hi);
            }
            _Pragma("GCC unroll 8") for (int k = 0; k < T; k++) {
                const int8_t *xq = x[k]->qs + 128 * h + 32 * o + 4 * g0i;
                __m512i s32 = rl__z_dpb(_mm512_setzero_si512(), w[0], xq);
                s32 = rl__z_dpb(s32, w[1], xq + 4);
                s32 = rl__z_dpb(s32, w[2], xq + 8);
                s32 = rl__z_dpb(s32, w[3], xq + 12);
                sumi[k] = _mm512_add_epi32(sumi[k], _mm512_mullo_epi32(s32, sc));
            }
        }
        __m512i scp[8];
        _Pragma("GCC unroll 8") for (int q = 0; q < 8; q++) scp[q] =
            RL_Z2(rl__r8_i8x2(a->sc[2 * q], a->sc[2 * q + 1]),
                  rl__r8_i8x2(b->sc[2 * q], b->sc[2 * q + 1]));
        rl__q6k_fstep16(acc, sumi, scp, rl__z_cvtph2(a->d, b->d), x, T);
    }
    RL_Z_STORE(s, ss, acc, T);
}
RL_TILE16_INST(q6_Kr8)

/* q8_0 resident tiles (kernels-impl.h, rl__q80_r8): vpdpbusd of the
 * offset activation codes (unsigned, x + 128) by the signed weights, less
 * 128 times each row's code sum (exact), then the twin's one fused
 * multiply-add per block.  The 8-row leaf on ymm (the odd group of a
 * matrix), the pair leaf on zmm. */
RL_TILE_AI void rl__tile8_q8_0r8_T(int64_t n_cols, float *s, size_t ss, const void *group,
                                   const void *vx, size_t xs, const int T) {
    __m256 acc[RL_TILE8_T];
    _Pragma("GCC unroll 4") for (int k = 0; k < T; k++) acc[k] = _mm256_setzero_ps();
    const rl__q80_r8 *p = group;
    for (int64_t i = 0; i < n_cols / 32; i++, p++) {
        RL_PF3(p); /* 288 bytes a block: 4.5 lines */
        RL_PF3((const char *)p + 192);
        const rl__q80o *x[RL_TILE8_T];
        __m256i s32[RL_TILE8_T];
        /* the sums start at -128 * sw: the offset's share, exactly */
        const __m256i ncorr = _mm256_sub_epi32(
            _mm256_setzero_si256(),
            _mm256_slli_epi32(_mm256_cvtepi16_epi32(_mm_loadu_si128((const __m128i *)p->sw)), 7));
        _Pragma("GCC unroll 4") for (int k = 0; k < T; k++) {
            x[k] = (const rl__q80o *)((const uint8_t *)vx + (size_t)k * xs) + i;
            s32[k] = ncorr;
        }
        _Pragma("GCC unroll 8") for (int g = 0; g < 8; g++) {
            const __m256i wq = _mm256_loadu_si256((const __m256i *)p->q[g]);
            _Pragma("GCC unroll 4") for (int k = 0; k < T; k++) {
                int32_t xv;
                memcpy(&xv, x[k]->qs + 4 * g, 4);
                s32[k] = _mm256_dpbusd_epi32(s32[k], _mm256_set1_epi32(xv), wq);
            }
        }
        const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p->d));
        _Pragma("GCC unroll 4") for (int k = 0; k < T; k++) acc[k] = _mm256_fmadd_ps(
            _mm256_mul_ps(d, _mm256_set1_ps(x[k]->d)), _mm256_cvtepi32_ps(s32[k]), acc[k]);
    }
    _Pragma("GCC unroll 4") for (int k = 0; k < T; k++)
        _mm256_storeu_ps(s + (size_t)k * ss, acc[k]);
}
RL_TILE8_INST(q8_0r8)

RL_TILE_AI void rl__tile16_q8_0r8_T(int64_t n_cols, float *s, size_t ss, const void *g0, size_t gs,
                                    const void *vx, size_t xs, const int T) {
    __m512 acc[RL_TILE16_T];
    _Pragma("GCC unroll 8") for (int k = 0; k < T; k++) acc[k] = _mm512_setzero_ps();
    const rl__q80_r8 *a = g0, *b = (const rl__q80_r8 *)((const uint8_t *)g0 + gs);
    for (int64_t i = 0; i < n_cols / 32; i++, a++, b++) {
        RL_PF3(a); /* 288 bytes a block: 4.5 lines */
        RL_PF3((const char *)a + 192);
        RL_PF3(b);
        RL_PF3((const char *)b + 192);
        const rl__q80o *x[RL_TILE16_T];
        __m512i s32[RL_TILE16_T];
        RL_Z_XROWS(x, rl__q80o, vx, xs, i, T);
        const __m256i sw =
            _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)a->sw)),
                                    _mm_loadu_si128((const __m128i *)b->sw), 1);
        /* the sums start at -128 * sw: the offset's share, exactly */
        const __m512i ncorr = _mm512_sub_epi32(_mm512_setzero_si512(),
                                               _mm512_slli_epi32(_mm512_cvtepi16_epi32(sw), 7));
        _Pragma("GCC unroll 8") for (int k = 0; k < T; k++) s32[k] = ncorr;
        _Pragma("GCC unroll 8") for (int g = 0; g < 8; g++) {
            const __m512i wq = rl__z_load2(a->q[g], b->q[g]);
            _Pragma("GCC unroll 8") for (int k = 0; k < T; k++) s32[k] =
                _mm512_dpbusd_epi32(s32[k], rl__z_bcast(x[k]->qs + 4 * g), wq);
        }
        const __m512 d = rl__z_cvtph2(a->d, b->d);
        _Pragma("GCC unroll 8") for (int k = 0; k < T; k++) acc[k] = _mm512_fmadd_ps(
            _mm512_mul_ps(d, _mm512_set1_ps(x[k]->d)), _mm512_cvtepi32_ps(s32[k]), acc[k]);
    }
    RL_Z_STORE(s, ss, acc, T);
}
RL_TILE16_INST(q8_0r8)

/* Two resident groups straight into a packed pair (rl__rtile.to_pair): a
 * unit of the pair is group A's 32 bytes then B's, so one zmm register
 * holds both halves and one store writes them (the AVX2 conversion writes
 * each half apart); the same bytes (test_resident_tiles). */
#define RL_ZUNIT(X, F)  (offsetof(X, F) / 32)
#define RL_ZST(b, u, v) _mm512_storeu_si512((void *)((b) + (size_t)(u)*64), v)

static void rl__to_pair_q4_K_vnni(void *dst, const void *ga, const void *gb, int64_t n_cols) {
    const rl__q4k_r8 *pa = ga, *pb = gb;
    const __m512i m4 = _mm512_set1_epi8(15);
    const size_t ub = sizeof(rl__q4k_x8) / 32, uq = RL_ZUNIT(rl__q4k_x8, q);
    for (int64_t i = 0; i < n_cols / RL_QK_K; i++, pa++, pb++) {
        uint8_t *b = (uint8_t *)dst + (size_t)i * ub * 64;
        RL_ZST(b, RL_ZUNIT(rl__q4k_x8, d), _mm512_castps_si512(rl__z_cvtph2(pa->d, pb->d)));
        RL_ZST(b, RL_ZUNIT(rl__q4k_x8, dmin),
               _mm512_castps_si512(rl__z_cvtph2(pa->dmin, pb->dmin)));
        uint8_t *sc = b + RL_ZUNIT(rl__q4k_x8, sc) * 64, *mn = b + RL_ZUNIT(rl__q4k_x8, mn) * 64;
        rl__q4kr8_scales(pa, sc, mn, 64);
        rl__q4kr8_scales(pb, sc + 32, mn + 32, 64);
        for (int j = 0; j < 4; j++) _Pragma("GCC unroll 8") for (int g = 0; g < 8; g++) {
                const __m512i v = rl__z_load2(pa->q[8 * j + g], pb->q[8 * j + g]);
                RL_ZST(b, uq + 16 * j + g, _mm512_and_si512(v, m4));
                RL_ZST(b, uq + 16 * j + 8 + g, _mm512_and_si512(_mm512_srli_epi16(v, 4), m4));
            }
    }
}

static void rl__to_pair_q6_K_vnni(void *dst, const void *ga, const void *gb, int64_t n_cols) {
    const rl__q6k_r8 *pa = ga, *pb = gb;
    const __m512i m4 = _mm512_set1_epi8(15), m3 = _mm512_set1_epi8(3), m30 = _mm512_set1_epi8(0x30);
    const size_t ub = sizeof(rl__q6k_x8) / 32, usc = RL_ZUNIT(rl__q6k_x8, sc),
                 uscp = RL_ZUNIT(rl__q6k_x8, scp), uq = RL_ZUNIT(rl__q6k_x8, q);
    for (int64_t i = 0; i < n_cols / RL_QK_K; i++, pa++, pb++) {
        uint8_t *b = (uint8_t *)dst + (size_t)i * ub * 64;
        RL_ZST(b, RL_ZUNIT(rl__q6k_x8, d), _mm512_castps_si512(rl__z_cvtph2(pa->d, pb->d)));
        for (int k = 0; k < 16; k++)
            RL_ZST(b, usc + k,
                   RL_Z2(rl__r8_i8x2(pa->sc[k], pa->sc[k]), rl__r8_i8x2(pb->sc[k], pb->sc[k])));
        for (int q = 0; q < 8; q++)
            RL_ZST(b, uscp + q,
                   RL_Z2(rl__r8_i8x2(pa->sc[2 * q], pa->sc[2 * q + 1]),
                         rl__r8_i8x2(pb->sc[2 * q], pb->sc[2 * q + 1])));
        for (int h = 0; h < 2; h++) _Pragma("GCC unroll 8") for (int g = 0; g < 8; g++) {
                const __m512i l0 = rl__z_load2(pa->ql[h][g], pb->ql[h][g]);
                const __m512i l1 = rl__z_load2(pa->ql[h][8 + g], pb->ql[h][8 + g]);
                const __m512i hb = rl__z_load2(pa->qh[h][g], pb->qh[h][g]);
                const __m512i hs = _mm512_srli_epi16(hb, 2);
                const __m512i h0 = _mm512_slli_epi16(_mm512_and_si512(hb, m3), 4);
                const __m512i h1 = _mm512_slli_epi16(_mm512_and_si512(hs, m3), 4);
                const __m512i h2 = _mm512_and_si512(hb, m30), h3 = _mm512_and_si512(hs, m30);
                const size_t u = uq + 32 * h + g; /* q[32 h + g] */
                RL_ZST(b, u, _mm512_or_si512(_mm512_and_si512(l0, m4), h0));
                RL_ZST(b, u + 8, _mm512_or_si512(_mm512_and_si512(l1, m4), h1));
                RL_ZST(b, u + 16,
                       _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l0, 4), m4), h2));
                RL_ZST(b, u + 24,
                       _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l1, 4), m4), h3));
            }
    }
}

void rl__vnni_fill_tile(rl__ktab *t) {
    t->tile8[RL_TYPE_Q4_1].dot = rl__tile8_q4_1_vnni;
    t->tile8[RL_TYPE_Q4_K].dot = rl__tile8_q4_K_vnni;
    t->tile8[RL_TYPE_Q6_K].dot = rl__tile8_q6_K_vnni;
    t->rtile[RL_TYPE_Q4_1].dot = rl__tile8_q4_1r8_vnni;
    t->rtile[RL_TYPE_Q4_K].dot = rl__tile8_q4_Kr8_vnni;
    t->rtile[RL_TYPE_Q6_K].dot = rl__tile8_q6_Kr8_vnni;
    t->tile8[RL_TYPE_Q4_1].dot16 = rl__tile16p_q4_1_vnni;
    t->tile8[RL_TYPE_Q4_K].dot16 = rl__tile16p_q4_K_vnni;
    t->tile8[RL_TYPE_Q6_K].dot16 = rl__tile16p_q6_K_vnni;
    t->tile8[RL_TYPE_Q3_K].dot = rl__tile8_q6_K_vnni; /* (q3_K packs into q6_K's tile) */
    t->tile8[RL_TYPE_Q3_K].dot16 = rl__tile16p_q6_K_vnni;
    t->tile8[RL_TYPE_Q5_K].dot = rl__tile8_q5_K_vnni;
    t->tile8[RL_TYPE_Q5_K].dot16 = rl__tile16p_q5_K_vnni;
    t->rtile[RL_TYPE_Q4_1].dot16 = rl__tile16_q4_1r8_vnni;
    /* (the AVX2 table's settings this one inherits: its pairs from 8
     * tokens, its resident q4_0 pair, its q4_1 pack_min and its pair
     * leaves that resume from s; this table's pairs run from one token,
     * it has no q4_0 pair, and its pair leaves start from zero, so its
     * pairs convert whole rows) */
    for (int ty = 0; ty < RL_TYPE_COUNT; ty++) t->tile8[ty].dot16a = NULL;
    t->rtile[RL_TYPE_Q4_1].pair_min = 0;
    t->rtile[RL_TYPE_Q4_0].dot16 = NULL;
    t->rtile[RL_TYPE_Q4_0].pair_min = 0;
    /* SmolLM2-135M, 2 threads, Xeon, without the conversion against with
     * it: 32 sequences 1.09-1.10x, 64 1.05x, prompts of 128 0.99x, 256
     * 0.96x, 512 0.94-0.98x */
    t->rtile[RL_TYPE_Q4_1].pack_min = 128;
    t->rtile[RL_TYPE_Q4_1].x_prep = rl__x_q8_1f_avx2;
    t->rtile[RL_TYPE_Q4_1].x_block = sizeof(rl__q81f);
    t->rtile[RL_TYPE_Q4_1].pdot16 = rl__tile16p_q4_1f_vnni;
    t->rtile[RL_TYPE_Q4_K].dot16 = rl__tile16_q4_Kr8_vnni;
    t->rtile[RL_TYPE_Q6_K].dot16 = rl__tile16_q6_Kr8_vnni;
    t->rtile[RL_TYPE_Q4_K].to_pair = rl__to_pair_q4_K_vnni;
    t->rtile[RL_TYPE_Q6_K].to_pair = rl__to_pair_q6_K_vnni;
    t->rtile[RL_TYPE_Q4_0].dot = rl__tile8_q4_0r8_vnni;
    t->rtile[RL_TYPE_IQ4_NL].dot = rl__tile8_iq4_nlr8_vnni;
    t->rtile[RL_TYPE_Q5_0].dot = rl__tile8_q5_0r8_vnni;
    t->rtile[RL_TYPE_Q5_1].dot = rl__tile8_q5_1r8_vnni;
    t->rtile[RL_TYPE_Q8_0].dot = rl__tile8_q8_0r8_vnni;
    t->rtile[RL_TYPE_Q8_0].dot16 = rl__tile16_q8_0r8_vnni;
    t->rtile[RL_TYPE_Q8_0].x_prep = rl__x_offset_q8_0; /* not the AVX2 table's nibbles */
    t->rtile[RL_TYPE_Q8_0].x_block = sizeof(rl__q80o);
    t->rtile[RL_TYPE_Q8_0].make = true;
}
