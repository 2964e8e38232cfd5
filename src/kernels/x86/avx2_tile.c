/* AVX2 tiles (kernels-impl.h, rl__tile8 and rl__rtile; q4_K, q6_K, q4_1):
 * the packers, the resident groups' conversions, dot_row, and the dot
 * leaves instantiated from tile-impl.h (RL_TILE_VNNI 0): 8 interleaved
 * weight rows (one per int32 lane) against up to RL_TILE8_T tokens.
 *
 * q4_K: for each group of 4 elements the packed ymm holds 4 weight bytes
 * (0..15) of each of the 8 rows; the token's 4 activation bytes are
 * broadcast, so vpmaddubsw gives each row's two pair sums as int16.  The 8
 * groups of a 32-element sub-block are added in int16 (at most
 * 8 * 2 * 15 * 127 = 30480, no overflow), then one vpmaddwd by the rows'
 * sub-block scales makes int32 lanes.  Per 256 multiply-adds of a row and
 * token that is 8 vpmaddubsw + 8 vpaddw + 1/8 of a vpmaddwd per lane --
 * fewer instructions than the vpmaddubsw + vpmaddwd + vpaddd chain of the
 * row-at-a-time leaves.  The float work per super-block (lane = row) is
 * ref/ref_tile.c's twin's, so the two agree bit for bit. */
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "kernels/x86/avx2-impl.h"

#define RL_TILE_VNNI 0
#include "kernels/x86/tile-impl.h"

/* rl__pack_q4_K_x8 / rl__pack_q5_K_x8 (ref/ref_tile.c) with the codes
 * moved by vector shuffles: each 32-element chunk of the 8 rows is
 * unpacked to bytes (q5_K: with its high bit, as avx2_dot4.c's leaf) and
 * its 8 x 8 groups of 4 bytes transposed.  The same bytes (tested). */
static inline void rl__pack_k4_x8_avx2(void *dst, const void *w, size_t row_size, int64_t n_cols,
                                       const bool five) {
    rl__q4k_x8 *o = dst;
    const __m256i m4 = _mm256_set1_epi8(0x0F), m16 = _mm256_set1_epi8(0x10);
    const size_t bs = five ? sizeof(rl_block_q5_K) : sizeof(rl_block_q4_K);
    for (int64_t i = 0; i < n_cols / RL_QK_K; i++, o++) {
        const uint8_t *qs[8], *qh[8];
        for (int r = 0; r < 8; r++) {
            const uint8_t *blk = (const uint8_t *)w + r * row_size + (size_t)i * bs;
            const rl_block_q4_K *b4 = (const rl_block_q4_K *)blk;
            const rl_block_q5_K *b5 = (const rl_block_q5_K *)blk;
            qs[r] = five ? b5->qs : b4->qs;
            qh[r] = five ? b5->qh : NULL;
            o->d[r] = rl__f16c(five ? b5->d : b4->d);
            o->dmin[r] = rl__f16c(five ? b5->dmin : b4->dmin);
            int sc[8], mn[8];
            for (int j = 0; j < 8; j++)
                rl_scale_min_k4(five ? b5->scales : b4->scales, j, &sc[j], &mn[j]);
            for (int j = 0; j < 8; j++) o->sc[j][2 * r] = o->sc[j][2 * r + 1] = (int16_t)sc[j];
            for (int p = 0; p < 4; p++) {
                o->mn[p][2 * r] = (int16_t)mn[2 * p];
                o->mn[p][2 * r + 1] = (int16_t)mn[2 * p + 1];
            }
        }
        for (int j = 0; j < 4; j++) {
            __m256i lo[8], hi[8];
            for (int r = 0; r < 8; r++) {
                const __m256i qb = _mm256_loadu_si256((const __m256i *)(qs[r] + 32 * j));
                lo[r] = _mm256_and_si256(qb, m4);                       /* elements 64j + l */
                hi[r] = _mm256_and_si256(_mm256_srli_epi16(qb, 4), m4); /* 64j + 32 + l */
                if (five) { /* bit 2j of qh[l] is element 64j + l's, bit 2j + 1 64j + 32 + l's */
                    const __m256i hb = _mm256_loadu_si256((const __m256i *)qh[r]);
                    lo[r] = _mm256_or_si256(
                        lo[r],
                        _mm256_and_si256(_mm256_slli_epi16(_mm256_srli_epi16(hb, 2 * j), 4), m16));
                    hi[r] = _mm256_or_si256(
                        hi[r], _mm256_and_si256(
                                   _mm256_slli_epi16(_mm256_srli_epi16(hb, 2 * j + 1), 4), m16));
                }
            }
            rl__tr8x8(lo);
            rl__tr8x8(hi);
            for (int g = 0; g < 8; g++) {
                _mm256_storeu_si256((__m256i *)o->q[16 * j + g], lo[g]);
                _mm256_storeu_si256((__m256i *)o->q[16 * j + 8 + g], hi[g]);
            }
        }
    }
}
static void rl__pack_q4_K_x8_avx2(void *dst, const void *w, size_t row_size, int64_t n_cols) {
    rl__pack_k4_x8_avx2(dst, w, row_size, n_cols, false);
}
static void rl__pack_q5_K_x8_avx2(void *dst, const void *w, size_t row_size, int64_t n_cols) {
    rl__pack_k4_x8_avx2(dst, w, row_size, n_cols, true);
}

/* rl__pack_q6_K_x8 with the codes unpacked as avx2_dot4.c's q6_K leaf
 * does (chunk 4h + kk = elements 128h + 32kk ..) and transposed. */
static void rl__pack_q6_K_x8_avx2(void *dst, const void *w, size_t row_size, int64_t n_cols) {
    rl__q6k_x8 *o = dst;
    const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
    for (int64_t i = 0; i < n_cols / RL_QK_K; i++, o++) {
        const rl_block_q6_K *b[8];
        for (int r = 0; r < 8; r++) {
            b[r] = (const rl_block_q6_K *)((const uint8_t *)w + r * row_size) + i;
            o->d[r] = rl__f16c(b[r]->d);
            rl__q6k_x8_scales(o, r, b[r]->scales);
        }
        for (int h = 0; h < 2; h++) {
            __m256i q[4][8];
            for (int r = 0; r < 8; r++) {
                const uint8_t *ql = b[r]->ql + 64 * h, *qh = b[r]->qh + 32 * h;
                __m256i l0 = _mm256_loadu_si256((const __m256i *)ql);
                __m256i l1 = _mm256_loadu_si256((const __m256i *)(ql + 32));
                __m256i hb = _mm256_loadu_si256((const __m256i *)qh);
                q[0][r] = _mm256_or_si256(_mm256_and_si256(l0, m4),
                                          _mm256_and_si256(_mm256_slli_epi16(hb, 4), m30));
                q[1][r] = _mm256_or_si256(_mm256_and_si256(l1, m4),
                                          _mm256_and_si256(_mm256_slli_epi16(hb, 2), m30));
                q[2][r] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                                          _mm256_and_si256(hb, m30));
                q[3][r] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                                          _mm256_and_si256(_mm256_srli_epi16(hb, 2), m30));
            }
            for (int kk = 0; kk < 4; kk++) {
                rl__tr8x8(q[kk]);
                for (int g = 0; g < 8; g++)
                    _mm256_storeu_si256((__m256i *)o->q[8 * (4 * h + kk) + g], q[kk][g]);
            }
        }
    }
}

/* rl__pack_q3_K_x8 with the codes unpacked as avx2_dot4.c's q3_K leaf does
 * (chunk 4h + j = elements 128h + 32j ..: the two low bits of qs, the
 * hmask bit at bit 2, + 28 = q3 + 32) and transposed as q6_K's. */
static void rl__pack_q3_K_x8_avx2(void *dst, const void *w, size_t row_size, int64_t n_cols) {
    rl__q6k_x8 *o = dst;
    const __m256i m3 = _mm256_set1_epi8(3), m4 = _mm256_set1_epi8(4), c28 = _mm256_set1_epi8(28);
    for (int64_t i = 0; i < n_cols / RL_QK_K; i++, o++) {
        const rl_block_q3_K *b[8];
        for (int r = 0; r < 8; r++) {
            b[r] = (const rl_block_q3_K *)((const uint8_t *)w + r * row_size) + i;
            int8_t sc[16];
            for (int j = 0; j < 16; j++) sc[j] = (int8_t)rl__q3_K_scale(b[r]->scales, j);
            o->d[r] = rl__f16c(b[r]->d);
            rl__q6k_x8_scales(o, r, sc);
        }
        for (int h = 0; h < 2; h++) {
            __m256i q[4][8];
            for (int r = 0; r < 8; r++) {
                const __m256i qb = _mm256_loadu_si256((const __m256i *)(b[r]->qs + 32 * h));
                const __m256i hm = _mm256_loadu_si256((const __m256i *)b[r]->hmask);
                for (int j = 0; j < 4; j++) {
                    const __m256i hi = _mm256_and_si256(
                        _mm256_slli_epi16(_mm256_srli_epi16(hm, 4 * h + j), 2), m4);
                    q[j][r] = _mm256_add_epi8(
                        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(qb, 2 * j), m3), hi),
                        c28);
                }
            }
            for (int j = 0; j < 4; j++) {
                rl__tr8x8(q[j]);
                for (int g = 0; g < 8; g++)
                    _mm256_storeu_si256((__m256i *)o->q[8 * (4 * h + j) + g], q[j][g]);
            }
        }
    }
}

/* mxfp4's codebook (rl_mxfp4_values) for vpshufb. */
static inline __m256i rl__mxfp4_tbl(void) {
    return _mm256_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12, 0, 1, 2, 3, 4,
                            6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);
}
/* rl__pack_mxfp4_x8: each row's block looked up (32 signed bytes) and the
 * 8 rows transposed in groups of 4 bytes.  The same bytes (tested). */
static void rl__pack_mxfp4_x8_avx2(void *dst, const void *w, size_t row_size, int64_t n_cols) {
    rl__mxfp4_x8 *o = dst;
    const __m256i tbl = rl__mxfp4_tbl();
    for (int64_t i = 0; i < n_cols / 32; i++, o++) {
        __m256i q[8];
        for (int r = 0; r < 8; r++) {
            const rl_block_mxfp4 *b =
                (const rl_block_mxfp4 *)((const uint8_t *)w + r * row_size) + i;
            /* 8 row streams from DRAM: each row RL_PF_DIST ahead, every 4
             * blocks (68 bytes, about a line) */
            if (i % 4 == 0) RL_PF1(b);
            o->d[r] = rl_e8m0_half_to_f32(b->e);
            q[r] = _mm256_shuffle_epi8(tbl, rl__nibbles32(b->qs));
        }
        rl__tr8x8(q);
        for (int g = 0; g < 8; g++) _mm256_storeu_si256((__m256i *)o->q[g], q[g]);
    }
}
/* mxfp4's dot_row: one row in place, the twin's float order per block; the
 * integer sums of two blocks and T tokens reduced together. */
RL_TILE_AI void rl__tile_row_mxfp4_T(int64_t n_cols, float *s, size_t ss, const void *vw,
                                     const void *vx, size_t xs, const int T) {
    const rl_block_mxfp4 *w = vw;
    const __m256i tbl = rl__mxfp4_tbl();
    const rl_block_q8_0 *x[RL_TILE8_T];
    float acc[RL_TILE8_T];
    _Pragma("GCC unroll 4") for (int k = 0; k < T; k++) {
        x[k] = (const rl_block_q8_0 *)((const uint8_t *)vx + (size_t)k * xs);
        acc[k] = 0.0f;
    }
    const int64_t nb = n_cols / 32;
    for (int64_t i = 0; i < nb; i += 2) {
        RL_PF1(&w[i]); /* see avx2-impl.h */
        const int nblk = nb - i < 2 ? 1 : 2;
        __m256i v[8];
        int32_t t[8];
        _Pragma("GCC unroll 2") for (int b = 0; b < 2; b++) {
            const __m256i q = _mm256_shuffle_epi8(tbl, rl__nibbles32(w[i + (b < nblk ? b : 0)].qs));
            const __m256i a = _mm256_abs_epi8(q);
            _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) v[2 * k + b] =
                k < T && b < nblk
                    ? rl__mul_sum_u8i8(
                          a,
                          _mm256_sign_epi8(_mm256_loadu_si256((const __m256i *)x[k][i + b].qs), q))
                    : _mm256_setzero_si256();
        }
        rl__hsum8_epi32(v, t);
        for (int b = 0; b < nblk; b++) {
            const float dw = rl_e8m0_half_to_f32(w[i + b].e);
            _Pragma("GCC unroll 4") for (int k = 0; k < T; k++) acc[k] =
                fmaf(dw * rl__f16c(x[k][i + b].d), (float)t[2 * k + b], acc[k]);
        }
    }
    _Pragma("GCC unroll 4") for (int k = 0; k < T; k++) s[(size_t)k * ss] = acc[k];
}
static void rl__tile_row_mxfp4_avx2(int64_t n_cols, float *s, size_t ss, const void *vw,
                                    const void *vx, size_t xs, int n_x) {
    if (n_x == 4)
        rl__tile_row_mxfp4_T(n_cols, s, ss, vw, vx, xs, 4);
    else if (n_x == 3)
        rl__tile_row_mxfp4_T(n_cols, s, ss, vw, vx, xs, 3);
    else if (n_x == 2)
        rl__tile_row_mxfp4_T(n_cols, s, ss, vw, vx, xs, 2);
    else
        rl__tile_row_mxfp4_T(n_cols, s, ss, vw, vx, xs, 1);
}

/* rl__pack_q4_1_x8 (ref/ref_tile.c) by vector shuffles, as q4_K's: each
 * block's nibbles unpacked to 32 bytes per row, the 8 x 8 groups of 4
 * bytes transposed.  The same bytes (tested). */
static void rl__pack_q4_1_x8_avx2(void *dst, const void *w, size_t row_size, int64_t n_cols) {
    rl__q41_x8 *o = dst;
    for (int64_t i = 0; i < n_cols / 32; i++, o++) {
        __m256i q[8];
        for (int r = 0; r < 8; r++) {
            const rl_block_q4_1 *b = (const rl_block_q4_1 *)((const uint8_t *)w + r * row_size) + i;
            o->d[r] = rl__f16c(b->d);
            o->m[r] = rl__f16c(b->m);
            q[r] = rl__nibbles32(b->qs); /* elements 0..31 */
        }
        rl__tr8x8(q);
        for (int g = 0; g < 8; g++) _mm256_storeu_si256((__m256i *)o->q[g], q[g]);
    }
}

/* q4_1's dot_row: one row in place, the twin's float order per block. */
static void rl__tile_row_q4_1_avx2(int64_t n_cols, float *s, size_t ss, const void *vw,
                                   const void *vx, size_t xs, int n_x) {
    const rl_block_q4_1 *w = vw;
    for (int k = 0; k < n_x; k++) {
        const rl_block_q8_1 *x = (const rl_block_q8_1 *)((const uint8_t *)vx + (size_t)k * xs);
        float acc = 0.0f;
        for (int64_t i = 0; i < n_cols / 32; i++) {
            const __m256i qx = _mm256_loadu_si256((const __m256i *)x[i].qs);
            const float sumi = (float)rl__hsum_epi32(rl__mul_sum_u8i8(rl__nibbles32(w[i].qs), qx));
            acc = fmaf(rl__f16c(w[i].d) * rl__f16c(x[i].d), sumi, acc);
            acc = fmaf(rl__f16c(w[i].m), rl__f16c(x[i].s), acc);
        }
        s[(size_t)k * ss] = acc;
    }
}

/* Resident groups into the packed tiles (rl__rtile.to_tile; the ref
 * twins' bytes, tested): nibble planes split by mask and shift, the
 * scales widened as the resident leaves do. */
static void rl__to_tile_q4_1_avx2(void *dst, const void *group, int64_t n_cols) {
    const rl__q41_r8 *p = group;
    rl__q41_x8 *o = dst;
    const __m256i m4 = _mm256_set1_epi8(15);
    for (int64_t i = 0; i < n_cols / 32; i++, p++, o++) {
        _mm256_storeu_ps(o->d, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p->d)));
        _mm256_storeu_ps(o->m, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p->m)));
        _Pragma("GCC unroll 4") for (int v = 0; v < 4; v++) {
            const __m256i b = _mm256_loadu_si256((const __m256i *)p->q[v]);
            _mm256_storeu_si256((__m256i *)o->q[v], _mm256_and_si256(b, m4));
            _mm256_storeu_si256((__m256i *)o->q[v + 4],
                                _mm256_and_si256(_mm256_srli_epi16(b, 4), m4));
        }
    }
}

/* The q4_K and q6_K conversions write each 32-byte unit u of a packed
 * block at b + u * us: us 32 gives the packed tile, us 64 one group of a
 * packed pair (the other group at b + 32), so a pair is converted in place
 * without a staging copy (rl__rtile.to_pair). */
#define RL_UST(b, us, u, v) _mm256_storeu_si256((__m256i *)((b) + (size_t)(u) * (us)), v)
/* the 32-byte unit where field F of packed block type X starts */
#define RL_UNIT(X, F) (offsetof(X, F) / 32)

RL_TILE_AI void rl__to_tile_q4_K_us(uint8_t *dst, const void *group, int64_t n_cols, size_t us) {
    const rl__q4k_r8 *p = group;
    const __m256i m4 = _mm256_set1_epi8(15);
    const size_t ub = sizeof(rl__q4k_x8) / 32; /* units a block */
    const size_t usc = RL_UNIT(rl__q4k_x8, sc), umn = RL_UNIT(rl__q4k_x8, mn),
                 uq = RL_UNIT(rl__q4k_x8, q);
    for (int64_t i = 0; i < n_cols / RL_QK_K; i++, p++) {
        uint8_t *b = dst + (size_t)i * ub * us;
        RL_UST(b, us, RL_UNIT(rl__q4k_x8, d),
               _mm256_castps_si256(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p->d))));
        RL_UST(b, us, RL_UNIT(rl__q4k_x8, dmin),
               _mm256_castps_si256(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p->dmin))));
        rl__q4kr8_scales(p, b + usc * us, b + umn * us, us);
        for (int j = 0; j < 4; j++) _Pragma("GCC unroll 8") for (int g = 0; g < 8; g++) {
                const __m256i v = _mm256_loadu_si256((const __m256i *)p->q[8 * j + g]);
                RL_UST(b, us, uq + 16 * j + g, _mm256_and_si256(v, m4));
                RL_UST(b, us, uq + 16 * j + 8 + g, _mm256_and_si256(_mm256_srli_epi16(v, 4), m4));
            }
    }
}

RL_TILE_AI void rl__to_tile_q6_K_us(uint8_t *dst, const void *group, int64_t n_cols, size_t us) {
    const rl__q6k_r8 *p = group;
    const __m256i m4 = _mm256_set1_epi8(15), m3 = _mm256_set1_epi8(3);
    const size_t ub = sizeof(rl__q6k_x8) / 32; /* units a block */
    const size_t usc = RL_UNIT(rl__q6k_x8, sc), uscp = RL_UNIT(rl__q6k_x8, scp),
                 uq = RL_UNIT(rl__q6k_x8, q);
    for (int64_t i = 0; i < n_cols / RL_QK_K; i++, p++) {
        uint8_t *b = dst + (size_t)i * ub * us;
        RL_UST(b, us, RL_UNIT(rl__q6k_x8, d),
               _mm256_castps_si256(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p->d))));
        for (int k = 0; k < 16; k++) RL_UST(b, us, usc + k, rl__r8_i8x2(p->sc[k], p->sc[k]));
        for (int q = 0; q < 8; q++)
            RL_UST(b, us, uscp + q, rl__r8_i8x2(p->sc[2 * q], p->sc[2 * q + 1]));
        for (int h = 0; h < 2; h++) _Pragma("GCC unroll 8") for (int g = 0; g < 8; g++) {
                const __m256i l0 = _mm256_loadu_si256((const __m256i *)p->ql[h][g]);
                const __m256i l1 = _mm256_loadu_si256((const __m256i *)p->ql[h][8 + g]);
                const __m256i hb = _mm256_loadu_si256((const __m256i *)p->qh[h][g]);
                const __m256i h0 = _mm256_slli_epi16(_mm256_and_si256(hb, m3), 4);
                const __m256i h1 =
                    _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 2), m3), 4);
                const __m256i h2 = _mm256_and_si256(hb, _mm256_set1_epi8(0x30));
                const __m256i h3 =
                    _mm256_and_si256(_mm256_srli_epi16(hb, 2), _mm256_set1_epi8(0x30));
                const size_t u = uq + 32 * h + g; /* q[32 h + g] */
                RL_UST(b, us, u, _mm256_or_si256(_mm256_and_si256(l0, m4), h0));
                RL_UST(b, us, u + 8, _mm256_or_si256(_mm256_and_si256(l1, m4), h1));
                RL_UST(b, us, u + 16,
                       _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), h2));
                RL_UST(b, us, u + 24,
                       _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4), h3));
            }
    }
}

static void rl__to_tile_q4_K_avx2(void *dst, const void *group, int64_t n_cols) {
    rl__to_tile_q4_K_us(dst, group, n_cols, 32);
}
static void rl__to_tile_q6_K_avx2(void *dst, const void *group, int64_t n_cols) {
    rl__to_tile_q6_K_us(dst, group, n_cols, 32);
}
/* iq4_xs: a resident group to the packed tile, the scales decoded as
 * the resident leaf does and each group's nibbles looked up into both
 * planes (the packer's bytes: test_resident_tiles). */
static void rl__to_tile_iq4_xs_avx2(void *dst, const void *group, int64_t n_cols) {
    const rl__iq4xs_r8 *p = group;
    rl__iq4xs_x8 *o = dst;
    const __m256i m4 = _mm256_set1_epi8(15);
    __m256i th, tl;
    rl__iq4xs_planes(&th, &tl);
    for (int64_t i = 0; i < n_cols / RL_QK_K; i++, p++, o++) {
        const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p->d));
        _mm256_storeu_ps(o->d, d);
        _mm256_storeu_ps(o->dmin, _mm256_mul_ps(d, _mm256_set1_ps(128.0f)));
        rl__iq4xsr8_scales(p, o->sc, o->mn);
        for (int b = 0; b < 8; b++) _Pragma("GCC unroll 8") for (int g = 0; g < 8; g++) {
                const __m256i raw = _mm256_loadu_si256((const __m256i *)p->q[4 * b + g % 4]);
                const __m256i nib = _mm256_and_si256(g < 4 ? raw : _mm256_srli_epi16(raw, 4), m4);
                _mm256_storeu_si256((__m256i *)o->q[16 * b + g], _mm256_shuffle_epi8(th, nib));
                _mm256_storeu_si256((__m256i *)o->q[16 * b + 8 + g], _mm256_shuffle_epi8(tl, nib));
            }
    }
}
static void rl__to_pair_q4_K_avx2(void *dst, const void *ga, const void *gb, int64_t n_cols) {
    rl__to_tile_q4_K_us(dst, ga, n_cols, 64);
    rl__to_tile_q4_K_us((uint8_t *)dst + 32, gb, n_cols, 64);
}
static void rl__to_pair_q6_K_avx2(void *dst, const void *ga, const void *gb, int64_t n_cols) {
    rl__to_tile_q6_K_us(dst, ga, n_cols, 64);
    rl__to_tile_q6_K_us((uint8_t *)dst + 32, gb, n_cols, 64);
}

/* Packed pairs (rl__tile8.dot16, kernels-impl.h: two packed groups
 * interleaved 32 bytes at a time): 16 rows as two ymm registers against
 * up to RL_AVX2_PAIR_T tokens.  A token's 4 activation bytes, broadcast
 * once, feed both groups, so a group of 4 elements costs 2 weight loads
 * and T broadcasts for 2T vpmaddubsw where the 8-row leaf pays 1 + T for
 * T: the load ports, not the multipliers, bound that leaf on Zen 3.  Each
 * half is the 8-row leaf's integer sums and float step, so its lanes are
 * that leaf's bits (test_pair_leaves).  q4_K takes T = 4 through a
 * written-out sub-block (rl__ypair_q4_K_sub4: in C, GCC spills the int16
 * sums at T = 4, 0.87x of T = 2 end to end); against T = 2, with the
 * bsums' broadcast in vector code (rl__q4k_fstep), 32 tokens, Zen 3,
 * kbench -s: 1.06-1.10x; a last pass of fewer tokens runs in C.  q6_K takes
 * T = 4 (RL_AVX2_PAIR_T_Q6K): its int16 sums live two vpmaddubsw each, so
 * only the int32 sums are held across its inner step (written out at 4
 * tokens, rl__ypair_q6_K_sb4), and 4 tokens share each weight load (32 tokens, Zen 3, kbench
 * -s: 1.08x at 1536 x 8960, 1.10-1.14x at 1536 columns; T = 3 1.05x).  No packed q4_1 pair: SmolLM2
 * pp512 measured the same with and without; resident q4_1 groups have
 * their own pair leaf, with no conversion. */
#ifndef RL_AVX2_PAIR_T
#define RL_AVX2_PAIR_T 4
#endif
#ifndef RL_AVX2_PAIR_T_Q6K
#define RL_AVX2_PAIR_T_Q6K 4
#endif
_Static_assert(RL_AVX2_PAIR_T >= 1 && RL_AVX2_PAIR_T <= RL_TILE8_T, "pair leaf tokens");
_Static_assert(RL_AVX2_PAIR_T_Q6K >= 1 && RL_AVX2_PAIR_T_Q6K <= RL_TILE8_T, "pair leaf tokens");
/* field F of packed type TY, half h (0: group A, 1: B) of a packed pair */
#define RL_YF(p, TY, F, h) ((const uint8_t *)(p) + 2 * __builtin_offsetof(TY, F) + 32 * (h))
#define RL_YL(p, TY, F, h) _mm256_loadu_si256((const __m256i *)RL_YF(p, TY, F, h))

RL_TILE_AI __m256i rl__ybcast(const int8_t *q) {
    int32_t v;
    memcpy(&v, q, 4);
    return _mm256_set1_epi32(v);
}

/* Block i of the T tokens' q8_K rows, and the pair's int32 sums zeroed. */
RL_TILE_AI void rl__ypair_block(const rl_block_q8_K **x, __m256i sumi[2][RL_TILE8_T],
                                const void *vx, size_t xs, int64_t i, const int T) {
    _Pragma("GCC unroll 4") for (int k = 0; k < T; k++) {
        x[k] = (const rl_block_q8_K *)((const uint8_t *)vx + (size_t)k * xs) + i;
        sumi[0][k] = sumi[1][k] = _mm256_setzero_si256();
    }
}

/* The next pair's bytes (rl__pf), at the driver's rate: a pass of T tokens
 * fetches T * tok_bytes a block of columns (at most RL_AVX2_PF_MAX lines),
 * so a step's passes cover the pair whatever their count (32 tokens:
 * q4_K 5 lines a block and pass of 4 of the 36, q6_K 7 of 53; at a fixed
 * 4 lines, 8 passes of 4 tokens fetched 89% of a q4_K pair and 60% of a
 * q6_K one); RL_AVX2_PF_LINES without a rate.
 * Qwen2.5-Coder-1.5B, 32 sequences, Zen 3: the conversions to pairs went
 * from 13.0% of the step to 7.4% with the prefetch; into L1 (T0) as the
 * conversion reads it next; the rate against 4 lines, kbench, 32 tokens:
 * q6_K 1.07-1.11x with its written-out super-block, q4_K 1.00-1.01x; at
 * 16 tokens uncapped (9-14 lines) 0.97-0.99x, capped at 8 0.99-1.02x. */
#ifndef RL_AVX2_PF_LINES
#define RL_AVX2_PF_LINES 4
#endif
#ifndef RL_AVX2_PF_MAX
#define RL_AVX2_PF_MAX 8
#endif
/* A pair's float sums: zero, or (acc_in: rl__tile8.dot16a) those in s. */
RL_TILE_AI void rl__ypair_acc(__m256 acc[2][RL_TILE8_T], const float *s, size_t ss, bool acc_in,
                              const int T) {
    _Pragma("GCC unroll 4") for (int k = 0; k < T; k++) {
        acc[0][k] = acc_in ? _mm256_loadu_ps(s + (size_t)k * ss) : _mm256_setzero_ps();
        acc[1][k] = acc_in ? _mm256_loadu_ps(s + (size_t)k * ss + 8) : _mm256_setzero_ps();
    }
}

RL_TILE_AI void rl__ypf_step(rl__pf *pf, const int T) {
    if (!pf || pf->next >= pf->end) return;
    size_t n = pf->tok_bytes ? (T * pf->tok_bytes + 63) / 64 : RL_AVX2_PF_LINES;
    n = n < RL_AVX2_PF_MAX ? n : RL_AVX2_PF_MAX;
    for (size_t l = 0; l < n; l++) _mm_prefetch((const char *)pf->next + 64 * l, _MM_HINT_T0);
    pf->next += 64 * n;
}

/* One q4_K sub-block of a pair against 4 tokens, written out: at 4 tokens
 * GCC spills one of the 8 int16 sums and copies the others between
 * registers at every step (0.78x of 2 tokens with the int32 sums in
 * memory), so here every ymm register is named: the int16 sums in ymm0-7
 * (rows 0-7 then 8-15, tokens 0-3), the group's two weight vectors in
 * ymm8-9, the 4 tokens' broadcasts in ymm10-13, products in ymm14-15.
 * Each int16 sum is the C leaf's chain in its order (the first group's
 * product, then the 7 others added), and sumi[h][k] (memory, the register
 * file being full) gains vpmaddwd(sum, half h's scales) as in the C leaf,
 * so the bits are the same (test_pair_leaves, test_resident_tiles). */
#define RL_YQ4_LD(W, X)                                                                            \
    "vmovdqu " #W "(%[w]), %%ymm8\n\t"                                                             \
    "vmovdqu " #W "+32(%[w]), %%ymm9\n\t"                                                          \
    "vpbroadcastd " #X "(%[x0]), %%ymm10\n\t"                                                      \
    "vpbroadcastd " #X "(%[x1]), %%ymm11\n\t"                                                      \
    "vpbroadcastd " #X "(%[x2]), %%ymm12\n\t"                                                      \
    "vpbroadcastd " #X "(%[x3]), %%ymm13\n\t"
/* sum S = the product of weights H and broadcast X (first group; P
 * unused) */
#define RL_YQ4_P0(X, H, S, P) "vpmaddubsw %%ymm" #X ", %%ymm" #H ", %%ymm" #S "\n\t"
/* sum S += that product, through ymm P */
#define RL_YQ4_P(X, H, S, P)                                                                       \
    "vpmaddubsw %%ymm" #X ", %%ymm" #H ", %%ymm" #P "\n\t"                                         \
    "vpaddw %%ymm" #P ", %%ymm" #S ", %%ymm" #S "\n\t"
/* group g: weights at byte 64 g of the sub-block, activations at 4 g; OP
 * RL_YQ4_P0 for the first group, RL_YQ4_P for the others */
#define RL_YQ4_GROUP(W, X, OP)                                                                     \
    RL_YQ4_LD(W, X)                                                                                \
    OP(10, 8, 0, 14)                                                                               \
    OP(10, 9, 4, 15)                                                                               \
    OP(11, 8, 1, 14)                                                                               \
    OP(11, 9, 5, 15)                                                                               \
    OP(12, 8, 2, 14)                                                                               \
    OP(12, 9, 6, 15)                                                                               \
    OP(13, 8, 3, 14)                                                                               \
    OP(13, 9, 7, 15)
#define RL_YQ4_G0      RL_YQ4_GROUP(0, 0, RL_YQ4_P0)
#define RL_YQ4_G(W, X) RL_YQ4_GROUP(W, X, RL_YQ4_P)
/* the scales of both halves */
#define RL_YQ4_LDSC                                                                                \
    "vmovdqu (%[sc]), %%ymm8\n\t"                                                                  \
    "vmovdqu 32(%[sc]), %%ymm9\n\t"
/* sumi[h][k] (byte O of sumi) += vpmaddwd(sum S, scales SC) */
#define RL_YQ4_SC(S, SC, O)                                                                        \
    "vpmaddwd %%ymm" #SC ", %%ymm" #S ", %%ymm" #S "\n\t"                                          \
    "vpaddd " #O "(%[si]), %%ymm" #S ", %%ymm" #S "\n\t"                                           \
    "vmovdqu %%ymm" #S ", " #O "(%[si])\n\t"
#define RL_YQ4_SUB4                                                                                \
    RL_YQ4_G0                                                                                      \
    RL_YQ4_G(64, 4)                                                                                \
    RL_YQ4_G(128, 8)                                                                               \
    RL_YQ4_G(192, 12)                                                                              \
    RL_YQ4_G(256, 16)                                                                              \
    RL_YQ4_G(320, 20)                                                                              \
    RL_YQ4_G(384, 24)                                                                              \
    RL_YQ4_G(448, 28)                                                                              \
    RL_YQ4_LDSC                                                                                    \
    RL_YQ4_SC(0, 8, 0)                                                                             \
    RL_YQ4_SC(1, 8, 32)                                                                            \
    RL_YQ4_SC(2, 8, 64)                                                                            \
    RL_YQ4_SC(3, 8, 96)                                                                            \
    RL_YQ4_SC(4, 9, 128)                                                                           \
    RL_YQ4_SC(5, 9, 160)                                                                           \
    RL_YQ4_SC(6, 9, 192)                                                                           \
    RL_YQ4_SC(7, 9, 224)
/* w: the sub-block's 8 groups (rl__q4k_x8 q[8 b], pair-interleaved), sc:
 * its scales (sc[b], both halves), xk: token k's 32 activations */
RL_TILE_AI void rl__ypair_q4_K_sub4(const uint8_t *w, const uint8_t *sc, const int8_t *x0,
                                    const int8_t *x1, const int8_t *x2, const int8_t *x3,
                                    __m256i sumi[2][RL_TILE8_T]) {
    _Static_assert(RL_TILE8_T == 4, "sumi[h][k] at byte 32 (4 h + k)");
    __asm__ volatile(RL_YQ4_SUB4
                     :
                     : [w] "r"(w), [sc] "r"(sc), [x0] "r"(x0), [x1] "r"(x1), [x2] "r"(x2),
                       [x3] "r"(x3), [si] "r"(sumi)
                     : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8",
                       "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "memory");
}

RL_TILE_AI void rl__ypair_q4_K_T(int64_t n_cols, float *s, size_t ss, const void *pp, rl__pf *pf,
                                 bool acc_in, const void *vx, size_t xs, const int T) {
    __m256 acc[2][RL_TILE8_T];
    rl__ypair_acc(acc, s, ss, acc_in, T);
    const uint8_t *p = pp;
    for (int64_t i = 0; i < n_cols / RL_QK_K; i++, p += 2 * sizeof(rl__q4k_x8)) {
        const rl_block_q8_K *x[RL_TILE8_T];
        __m256i sumi[2][RL_TILE8_T];
        rl__ypair_block(x, sumi, vx, xs, i, T);
        rl__ypf_step(pf, T);
        for (int b = 0; b < 8; b++) {
            if (T == 4) {
                rl__ypair_q4_K_sub4(RL_YF(p, rl__q4k_x8, q[8 * b], 0),
                                    RL_YF(p, rl__q4k_x8, sc[b], 0), x[0]->qs + 32 * b,
                                    x[1]->qs + 32 * b, x[2]->qs + 32 * b, x[3]->qs + 32 * b, sumi);
                continue;
            }
            __m256i s16[2][RL_TILE8_T];
            _Pragma("GCC unroll 4") for (int k = 0; k < T; k++) s16[0][k] = s16[1][k] =
                _mm256_setzero_si256();
            _Pragma("GCC unroll 2") for (int g = 0; g < 8; g++) {
                const __m256i wa = RL_YL(p, rl__q4k_x8, q[8 * b + g], 0);
                const __m256i wb = RL_YL(p, rl__q4k_x8, q[8 * b + g], 1);
                _Pragma("GCC unroll 4") for (int k = 0; k < T; k++) {
                    const __m256i xb = rl__ybcast(x[k]->qs + 32 * b + 4 * g);
                    s16[0][k] = RL_TI_MAC(s16[0][k], wa, xb);
                    s16[1][k] = RL_TI_MAC(s16[1][k], wb, xb);
                }
            }
            _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++) {
                const __m256i sc = RL_YL(p, rl__q4k_x8, sc[b], h);
                _Pragma("GCC unroll 4") for (int k = 0; k < T; k++) sumi[h][k] =
                    _mm256_add_epi32(sumi[h][k], RL_TI_SCALED(s16[h][k], sc));
            }
        }
        _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++) {
            rl__q4k_fstep(acc[h], sumi[h], (const int16_t *)RL_YF(p, rl__q4k_x8, mn, h), 32,
                          _mm256_loadu_ps((const float *)RL_YF(p, rl__q4k_x8, d, h)),
                          _mm256_loadu_ps((const float *)RL_YF(p, rl__q4k_x8, dmin, h)), x, T);
        }
    }
    rl__tileg_store(s, ss, acc, T, 2);
}

/* A q6_K super-block of a pair against 4 tokens, written out as the q4_K
 * sub-block above (GCC keeps 5 of the 8 int32 sums on the stack at 4
 * tokens): the int32 sums in ymm0-7 (rows 0-7 then 8-15, tokens 0-3) for
 * the whole super-block, the weights of half a sub-block (both groups,
 * two vectors each) in ymm8-11, a token's two broadcasts in ymm12-13,
 * products in ymm14-15, the scales as vpmaddwd's memory operand.  The
 * integer sums are exact (|int16| <= 4 * 63 * 128), so the bits are the
 * C leaf's (test_pair_leaves, test_resident_tiles). */
#define RL_YQ6_TOK(X, K, KH)                                                                       \
    "vpbroadcastd " #X "(%[x" #K "]), %%ymm12\n\t"                                                 \
    "vpbroadcastd " #X "+4(%[x" #K "]), %%ymm13\n\t"                                               \
    "vpmaddubsw %%ymm12, %%ymm8, %%ymm14\n\t"                                                      \
    "vpmaddubsw %%ymm13, %%ymm9, %%ymm15\n\t"                                                      \
    "vpaddw %%ymm15, %%ymm14, %%ymm14\n\t"                                                         \
    "vpmaddwd (%[sc]), %%ymm14, %%ymm14\n\t"                                                       \
    "vpaddd %%ymm14, %%ymm" #K ", %%ymm" #K "\n\t"                                                 \
    "vpmaddubsw %%ymm12, %%ymm10, %%ymm14\n\t"                                                     \
    "vpmaddubsw %%ymm13, %%ymm11, %%ymm15\n\t"                                                     \
    "vpaddw %%ymm15, %%ymm14, %%ymm14\n\t"                                                         \
    "vpmaddwd 32(%[sc]), %%ymm14, %%ymm14\n\t"                                                     \
    "vpaddd %%ymm14, %%ymm" #KH ", %%ymm" #KH "\n\t"
/* half HH of a sub-block: weights at byte 128 HH, activations at 8 HH */
#define RL_YQ6_HALF(W, X)                                                                          \
    "vmovdqu " #W "(%[w]), %%ymm8\n\t"                                                             \
    "vmovdqu " #W "+64(%[w]), %%ymm9\n\t"                                                          \
    "vmovdqu " #W "+32(%[w]), %%ymm10\n\t"                                                         \
    "vmovdqu " #W "+96(%[w]), %%ymm11\n\t" RL_YQ6_TOK(X, 0, 4) RL_YQ6_TOK(X, 1, 5)                 \
        RL_YQ6_TOK(X, 2, 6) RL_YQ6_TOK(X, 3, 7)
/* the 8 int32 sums zeroed; stored to sumi[h][k] (byte 32 (4 h + k)) */
#define RL_YQ6_ZERO8                                                                               \
    "vpxor %%xmm0, %%xmm0, %%xmm0\n\t"                                                             \
    "vpxor %%xmm1, %%xmm1, %%xmm1\n\t"                                                             \
    "vpxor %%xmm2, %%xmm2, %%xmm2\n\t"                                                             \
    "vpxor %%xmm3, %%xmm3, %%xmm3\n\t"                                                             \
    "vpxor %%xmm4, %%xmm4, %%xmm4\n\t"                                                             \
    "vpxor %%xmm5, %%xmm5, %%xmm5\n\t"                                                             \
    "vpxor %%xmm6, %%xmm6, %%xmm6\n\t"                                                             \
    "vpxor %%xmm7, %%xmm7, %%xmm7\n\t"
#define RL_YQ6_ST8                                                                                 \
    "vmovdqu %%ymm0, 0(%[si])\n\t"                                                                 \
    "vmovdqu %%ymm1, 32(%[si])\n\t"                                                                \
    "vmovdqu %%ymm2, 64(%[si])\n\t"                                                                \
    "vmovdqu %%ymm3, 96(%[si])\n\t"                                                                \
    "vmovdqu %%ymm4, 128(%[si])\n\t"                                                               \
    "vmovdqu %%ymm5, 160(%[si])\n\t"                                                               \
    "vmovdqu %%ymm6, 192(%[si])\n\t"                                                               \
    "vmovdqu %%ymm7, 224(%[si])\n\t"
/* the next sub-block: codes 256 bytes on, scales 64, activations 16 */
#define RL_YQ6_NEXT                                                                                \
    "add $256, %[w]\n\t"                                                                           \
    "add $64, %[sc]\n\t"                                                                           \
    "add $16, %[x0]\n\t"                                                                           \
    "add $16, %[x1]\n\t"                                                                           \
    "add $16, %[x2]\n\t"                                                                           \
    "add $16, %[x3]\n\t"
#define RL_YQ6_SB4                                                                                 \
    RL_YQ6_ZERO8                                                                                   \
    "1:\n\t" RL_YQ6_HALF(0, 0) RL_YQ6_HALF(128, 8) RL_YQ6_NEXT "dec %[n]\n\t"                      \
                                                               "jnz 1b\n\t" RL_YQ6_ST8
/* w: the super-block's codes (rl__q6k_x8 q, pair-interleaved), sc: its
 * scales (sc, both halves), xk: token k's 256 activations; sumi[h][k] set */
RL_TILE_AI void rl__ypair_q6_K_sb4(const uint8_t *w, const uint8_t *sc, const int8_t *x0,
                                   const int8_t *x1, const int8_t *x2, const int8_t *x3,
                                   __m256i sumi[2][RL_TILE8_T]) {
    _Static_assert(RL_TILE8_T == 4, "sumi[h][k] at byte 32 (4 h + k)");
    int n = 16;
    __asm__ volatile(RL_YQ6_SB4
                     : [w] "+r"(w), [sc] "+r"(sc), [x0] "+r"(x0), [x1] "+r"(x1), [x2] "+r"(x2),
                       [x3] "+r"(x3), [n] "+r"(n)
                     : [si] "r"(sumi)
                     : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8",
                       "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "cc",
                       "memory");
}

RL_TILE_AI void rl__ypair_q6_K_T(int64_t n_cols, float *s, size_t ss, const void *pp, rl__pf *pf,
                                 bool acc_in, const void *vx, size_t xs, const int T) {
    __m256 acc[2][RL_TILE8_T];
    rl__ypair_acc(acc, s, ss, acc_in, T);
    const uint8_t *p = pp;
    for (int64_t i = 0; i < n_cols / RL_QK_K; i++, p += 2 * sizeof(rl__q6k_x8)) {
        const rl_block_q8_K *x[RL_TILE8_T];
        __m256i sumi[2][RL_TILE8_T];
        rl__ypair_block(x, sumi, vx, xs, i, T);
        rl__ypf_step(pf, T);
        if (T == 4)
            rl__ypair_q6_K_sb4(RL_YF(p, rl__q6k_x8, q[0], 0), RL_YF(p, rl__q6k_x8, sc[0], 0),
                               x[0]->qs, x[1]->qs, x[2]->qs, x[3]->qs, sumi);
        else
            for (int b = 0; b < 16; b++) {
                const __m256i scv[2] = {RL_YL(p, rl__q6k_x8, sc[b], 0),
                                        RL_YL(p, rl__q6k_x8, sc[b], 1)};
                _Pragma("GCC unroll 2") for (int hh = 0; hh < 2; hh++) {
                    __m256i w[2][2];
                    _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++) {
                        w[h][0] = RL_YL(p, rl__q6k_x8, q[4 * b + 2 * hh], h);
                        w[h][1] = RL_YL(p, rl__q6k_x8, q[4 * b + 2 * hh + 1], h);
                    }
                    _Pragma("GCC unroll 4") for (int k = 0; k < T; k++) {
                        const __m256i x0 = rl__ybcast(x[k]->qs + 16 * b + 8 * hh);
                        const __m256i x1 = rl__ybcast(x[k]->qs + 16 * b + 8 * hh + 4);
                        _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++) {
                            const __m256i s16 = RL_TI_MAC(
                                RL_TI_MAC(_mm256_setzero_si256(), w[h][0], x0), w[h][1], x1);
                            sumi[h][k] = _mm256_add_epi32(sumi[h][k], RL_TI_SCALED(s16, scv[h]));
                        }
                    }
                }
            }
        _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++) {
            rl__q6k_fstep(acc[h], sumi[h], (const int16_t *)RL_YF(p, rl__q6k_x8, scp, h), 32,
                          _mm256_loadu_ps((const float *)RL_YF(p, rl__q6k_x8, d, h)), x, T);
        }
    }
    rl__tileg_store(s, ss, acc, T, 2);
}

/* The passes of a pair leaf over n_x tokens, P at a time (the last pass
 * takes the rest): LEAF(n_cols, st, ss, <the groups' pointers>, xt, xs, T)
 * with T a constant. */
#define RL_YPASSES(LEAF, P, ...)                                                                   \
    for (int t = 0; t < n_x; t += (P)) {                                                           \
        const int n = n_x - t < (P) ? n_x - t : (P);                                               \
        float *st = s + (size_t)t * ss;                                                            \
        const void *xt = (const uint8_t *)vx + (size_t)t * xs;                                     \
        if (n == (P))                                                                              \
            LEAF(n_cols, st, ss, __VA_ARGS__, xt, xs, (P));                                        \
        else if (n == 3)                                                                           \
            LEAF(n_cols, st, ss, __VA_ARGS__, xt, xs, 3);                                          \
        else if (n == 2)                                                                           \
            LEAF(n_cols, st, ss, __VA_ARGS__, xt, xs, 2);                                          \
        else                                                                                       \
            LEAF(n_cols, st, ss, __VA_ARGS__, xt, xs, 1);                                          \
    }
/* rl__tile16p_fn of type TY: n_x (1..RL_TILE16_T) tokens, RL_AVX2_PAIR_T
 * at a time. */
#define RL_YPAIR_INST(TY, P)                                                                       \
    static void rl__tile16p_##TY##_avx2(int64_t n_cols, float *s, size_t ss, const void *pp,       \
                                        const void *vx, size_t xs, int n_x, rl__pf *pf) {          \
        RL_YPASSES(rl__ypair_##TY##_T, P, pp, pf, false)                                           \
    }                                                                                              \
    static void rl__tile16pa_##TY##_avx2(int64_t n_cols, float *s, size_t ss, const void *pp,      \
                                         const void *vx, size_t xs, int n_x, rl__pf *pf) {         \
        RL_YPASSES(rl__ypair_##TY##_T, P, pp, pf, true)                                            \
    }
RL_YPAIR_INST(q4_K, RL_AVX2_PAIR_T)
RL_YPAIR_INST(q6_K, RL_AVX2_PAIR_T_Q6K)

/* Resident pairs (rl__rtile.dot16): the one-group resident leaves of
 * tile-impl.h on two groups (B at g0 + gs) at once, 16 rows as two ymm
 * registers, each token's broadcast feeding both, so a weight vector costs
 * 2 loads and T broadcasts for 2T vpmaddubsw where the 8-row leaf pays 1 +
 * T for T; no conversion to a packed layout.  Each group's lanes are the
 * 8-row leaf's bits.  q4_1 and q4_0 only, 4 tokens a pass (a token's one
 * int16 sum per group in registers): q5_0 and q5_1 (two sums a token and
 * group, groups 0-3 and 4-7) fit only 2 tokens a pass, which decodes their
 * codes for half as many tokens as the 8-row leaf does (SmolLM2-135M
 * requantized, 32 sequences, Zen 3: q5_1 0.75-0.82x); iq4_nl (two sums)
 * and q8_0 (two vpmaddubsw a product) likewise stay 8-row leaves. */
#ifndef RL_AVX2_RPAIR_T
#define RL_AVX2_RPAIR_T 4
#endif
#ifndef RL_AVX2_RPAIR_MIN
#define RL_AVX2_RPAIR_MIN 8
#endif
#define RL_YRPAIR_T(TY, CALL)                                                                      \
    RL_TILE_AI void rl__ypair_##TY##_T(int64_t n_cols, float *s, size_t ss, const void *g0,        \
                                       size_t gs, const void *vx, size_t xs, const int T) {        \
        CALL;                                                                                      \
    }
RL_YRPAIR_T(q4_1r8, rl__tileg_q4_1r8_T(n_cols, s, ss, g0, gs, vx, xs, T, 2))
RL_YRPAIR_T(q4_0r8, rl__tile8_nib_T(n_cols, s, ss, g0, gs, vx, xs, T, 0, 2))

/* rl__tile16_fn of resident type TY: n_x (1..RL_TILE16_T) tokens, P at a
 * time. */
#define RL_YRPAIR_INST(TY, P)                                                                      \
    static void rl__tile16_##TY##_avx2(int64_t n_cols, float *s, size_t ss, const void *g0,        \
                                       size_t gs, const void *vx, size_t xs, int n_x) {            \
        RL_YPASSES(rl__ypair_##TY##_T, P, g0, gs)                                                  \
    }
RL_YRPAIR_INST(q4_1r8, RL_AVX2_RPAIR_T)
RL_YRPAIR_INST(q4_0r8, RL_AVX2_RPAIR_T)

/* q8_0 resident tile (kernels-impl.h, rl__q80_r8) on the activations as
 * nibbles (rl__q80n: x + 128 = 16 hi + lo): per group of 4 codes one
 * vpmaddubsw of lo and one of hi against the 8 rows' signed bytes, each
 * pair sum within 2 * 15 * 128, the 8 groups of a block added in int16
 * (8 * 3840 = 30720); then sumi = 16 H + L - 128 sw = sum w x exactly,
 * and the twin's acc = fma(d dx, sumi, acc).  Per 32 multiply-adds of a
 * row and token: 2 vpmaddubsw + 2 vpaddw, against the per-row leaf's
 * sign, vpmaddubsw, vpmaddwd and float step per 32. */
RL_TILE_AI void rl__tile8_q8_0r8_T(int64_t n_cols, float *s, size_t ss, const void *group,
                                   const void *vx, size_t xs, const int T) {
    __m256 acc[RL_TILE8_T];
    _Pragma("GCC unroll 4") for (int k = 0; k < T; k++) acc[k] = _mm256_setzero_ps();
    const rl__q80_r8 *p = group;
    for (int64_t i = 0; i < n_cols / 32; i++, p++) {
        RL_PF3(p); /* 288 bytes a block: 4.5 lines */
        RL_PF3((const char *)p + 192);
        const rl__q80n *x[RL_TILE8_T];
        __m256i sl[RL_TILE8_T], sh[RL_TILE8_T];
        _Pragma("GCC unroll 4") for (int k = 0; k < T; k++) {
            x[k] = (const rl__q80n *)((const uint8_t *)vx + (size_t)k * xs) + i;
            sl[k] = sh[k] = _mm256_setzero_si256();
        }
        _Pragma("GCC unroll 8") for (int g = 0; g < 8; g++) {
            const __m256i wq = _mm256_loadu_si256((const __m256i *)p->q[g]);
            _Pragma("GCC unroll 4") for (int k = 0; k < T; k++) {
                int32_t xl, xh;
                memcpy(&xl, x[k]->lo + 4 * g, 4);
                memcpy(&xh, x[k]->hi + 4 * g, 4);
                sl[k] = rl__ti_mac16(sl[k], _mm256_set1_epi32(xl), wq);
                sh[k] = rl__ti_mac16(sh[k], _mm256_set1_epi32(xh), wq);
            }
        }
        /* -128 sw: the offset's share, exactly */
        const __m256i ncorr = _mm256_sub_epi32(
            _mm256_setzero_si256(),
            _mm256_slli_epi32(_mm256_cvtepi16_epi32(_mm_loadu_si128((const __m128i *)p->sw)), 7));
        const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p->d));
        _Pragma("GCC unroll 4") for (int k = 0; k < T; k++) {
            const __m256i s32 = _mm256_add_epi32(rl__hl16_sum(sh[k], sl[k]), ncorr);
            acc[k] = rl__q80_fstep(acc[k], d, x[k]->d, s32);
        }
    }
    _Pragma("GCC unroll 4") for (int k = 0; k < T; k++)
        _mm256_storeu_ps(s + (size_t)k * ss, acc[k]);
}
RL_TILE8_INST(q8_0r8)

void rl__avx2_fill_tile(rl__ktab *t) {
    t->tile8[RL_TYPE_Q2_K].pack = rl__pack_q2_K_x8_avx2; /* no pair leaf */
    t->tile8[RL_TYPE_Q2_K].dot = rl__tile8_q2_K_avx2;
    t->tile8[RL_TYPE_IQ4_XS].pack = rl__pack_iq4_xs_x8_avx2; /* no pair leaf */
    t->tile8[RL_TYPE_IQ4_XS].dot = rl__tile8_iq4_xs_avx2;
    /* (mxfp4 and iq4_xs layer matrices are resident on this table, below:
     * these packed tiles serve the rest, a head or rows not in groups of
     * 8, and iq4_xs's conversion from 64 tokens) */
    t->tile8[RL_TYPE_MXFP4].pack = rl__pack_mxfp4_x8_avx2; /* no pair leaf */
    t->tile8[RL_TYPE_MXFP4].dot = rl__tile8_mxfp4_avx2;
    t->tile8[RL_TYPE_MXFP4].dot_row = rl__tile_row_mxfp4_avx2;
#ifndef RL_AVX2_MXFP4_PACK_MIN
#define RL_AVX2_MXFP4_PACK_MIN 1
#endif
#ifndef RL_AVX2_Q2K_PACK_MIN
#define RL_AVX2_Q2K_PACK_MIN 16
#endif
    t->tile8[RL_TYPE_MXFP4].pack_min = RL_AVX2_MXFP4_PACK_MIN;
    t->tile8[RL_TYPE_Q2_K].pack_min = RL_AVX2_Q2K_PACK_MIN;
#ifndef RL_AVX2_IQ4XS_PACK_MIN
#define RL_AVX2_IQ4XS_PACK_MIN 32
#endif
    t->tile8[RL_TYPE_IQ4_XS].pack_min = RL_AVX2_IQ4XS_PACK_MIN;
    t->tile8[RL_TYPE_Q4_1].pack = rl__pack_q4_1_x8_avx2;
    t->tile8[RL_TYPE_Q4_1].dot = rl__tile8_q4_1_avx2;
    t->tile8[RL_TYPE_Q4_1].dot_row = rl__tile_row_q4_1_avx2;
    t->tile8[RL_TYPE_Q6_K].pack = rl__pack_q6_K_x8_avx2;
    t->tile8[RL_TYPE_Q6_K].dot = rl__tile8_q6_K_avx2;
    t->tile8[RL_TYPE_Q4_K].pack = rl__pack_q4_K_x8_avx2;
    t->tile8[RL_TYPE_Q4_K].dot = rl__tile8_q4_K_avx2;
    t->tile8[RL_TYPE_Q4_K].dot16 = rl__tile16p_q4_K_avx2;
    t->tile8[RL_TYPE_Q4_K].dot16a = rl__tile16pa_q4_K_avx2;
    t->tile8[RL_TYPE_Q5_K].pack = rl__pack_q5_K_x8_avx2; /* no AVX2 pair leaf: */
    t->tile8[RL_TYPE_Q5_K].dot = rl__tile8_q5_K_avx2;    /* 8 groups overflow int16 */
    t->tile8[RL_TYPE_Q6_K].dot16 = rl__tile16p_q6_K_avx2;
    t->tile8[RL_TYPE_Q6_K].dot16a = rl__tile16pa_q6_K_avx2;
    t->tile8[RL_TYPE_Q3_K].pack = rl__pack_q3_K_x8_avx2; /* the q6_K tile (rl__pack_q3_K_x8) */
    t->tile8[RL_TYPE_Q3_K].dot = rl__tile8_q6_K_avx2;
    t->tile8[RL_TYPE_Q3_K].dot16 = rl__tile16p_q6_K_avx2;
    t->tile8[RL_TYPE_Q3_K].dot16a = rl__tile16pa_q6_K_avx2;
    t->rtile[RL_TYPE_Q4_1].dot = rl__tile8_q4_1r8_avx2;
    t->rtile[RL_TYPE_Q4_1].dot16 = rl__tile16_q4_1r8_avx2;
    t->rtile[RL_TYPE_Q4_1].x_prep = rl__x_q8_1f_avx2;
    t->rtile[RL_TYPE_Q4_1].x_block = sizeof(rl__q81f);
    t->rtile[RL_TYPE_Q4_1].pair_min = RL_AVX2_RPAIR_MIN;
    t->rtile[RL_TYPE_Q4_0].dot16 = rl__tile16_q4_0r8_avx2;
    t->rtile[RL_TYPE_Q4_0].pair_min = RL_AVX2_RPAIR_MIN;
    /* resident q4_1 never converts to the packed tile on this table (its
     * to_tile is the AVX512-VNNI table's, from 128 tokens): the pair leaf
     * runs prompts of every length (SmolLM2-135M, Zen 3, pp512 at one
     * thread 1.06-1.14x against converting from 64 tokens) */
    t->rtile[RL_TYPE_Q4_1].pack_min = INT_MAX;
    t->rtile[RL_TYPE_Q4_K].dot = rl__tile8_q4_Kr8_avx2;
    t->rtile[RL_TYPE_Q6_K].dot = rl__tile8_q6_Kr8_avx2;
    t->rtile[RL_TYPE_Q4_1].to_tile = rl__to_tile_q4_1_avx2;
    t->rtile[RL_TYPE_Q4_K].to_tile = rl__to_tile_q4_K_avx2;
    t->rtile[RL_TYPE_Q6_K].to_tile = rl__to_tile_q6_K_avx2;
    t->rtile[RL_TYPE_Q4_K].to_pair = rl__to_pair_q4_K_avx2;
    t->rtile[RL_TYPE_Q6_K].to_pair = rl__to_pair_q6_K_avx2;
    /* a q6_K head (Q4_K_M files) or a q4_K one (Q4_K_S): one token as fast
     * as the per-row dots, 32 sequences 1.2x (Qwen2.5-1.5B, Zen 3) */
    t->rtile[RL_TYPE_Q6_K].head = true;
    t->rtile[RL_TYPE_Q4_K].head = true;
    t->rtile[RL_TYPE_Q4_0].dot = rl__tile8_q4_0r8_avx2;
    t->rtile[RL_TYPE_IQ4_NL].dot = rl__tile8_iq4_nlr8_avx2;
    t->rtile[RL_TYPE_Q5_0].dot = rl__tile8_q5_0r8_avx2;
    t->rtile[RL_TYPE_Q5_1].dot = rl__tile8_q5_1r8_avx2;
    t->rtile[RL_TYPE_Q5_0].make = true;
    t->rtile[RL_TYPE_Q5_0].head = true;
    t->rtile[RL_TYPE_Q5_1].make = true;
    t->rtile[RL_TYPE_Q5_1].head = true;
    t->rtile[RL_TYPE_Q4_0].make = true;
    t->rtile[RL_TYPE_Q4_0].head = true;
    t->rtile[RL_TYPE_IQ4_NL].make = true;
    t->rtile[RL_TYPE_IQ4_NL].head = true;
    /* mxfp4 (gpt-oss's experts) and iq4_xs resident: short prompt chunks
     * do not pack, and decoded tokens take the 8-row leaves too (Zen 3,
     * Qwen2.5-Coder-1.5B requantized: docs/PERFORMANCE.md, fifteenth stop);
     * iq4_xs converts to its packed tile from 64 tokens (at 512 the
     * resident leaf alone read 0.80x of converting) */
    t->rtile[RL_TYPE_MXFP4].dot = rl__tile8_mxfp4r8_avx2;
    t->rtile[RL_TYPE_MXFP4].make = true;
    t->rtile[RL_TYPE_IQ4_XS].dot = rl__tile8_iq4_xsr8_avx2;
    t->rtile[RL_TYPE_IQ4_XS].to_tile = rl__to_tile_iq4_xs_avx2;
    t->rtile[RL_TYPE_IQ4_XS].make = true;
    /* q5_K resident (no pair leaf: 8 groups overflow int16), converted to
     * the packed tile from 16 tokens (Qwen2.5-Coder-1.5B requantized,
     * Zen 3: bd16 1.28x, pp24 1.17x, pp32 1.23x against from 64) */
#ifndef RL_AVX2_Q5K_PACK_MIN
#define RL_AVX2_Q5K_PACK_MIN 16
#endif
    t->rtile[RL_TYPE_Q5_K].dot = rl__tile8_q5_Kr8_avx2;
    t->rtile[RL_TYPE_Q5_K].to_tile = rl__to_tile_q5_K_avx2;
    t->rtile[RL_TYPE_Q5_K].pack_min = RL_AVX2_Q5K_PACK_MIN;
    t->rtile[RL_TYPE_Q8_0].dot = rl__tile8_q8_0r8_avx2;
    t->rtile[RL_TYPE_Q8_0].x_prep = rl__x_nibbles_q8_0;
    t->rtile[RL_TYPE_Q8_0].x_block = sizeof(rl__q80n);
    t->rtile[RL_TYPE_Q8_0].make = true;
    t->rtile[RL_TYPE_Q8_0].head = true;
    /* the same form for the types that inherit the scalar one (q5_1) */
    for (int ty = 0; ty < RL_TYPE_COUNT; ty++)
        if (t->rtile[ty].x_prep == rl__x_q8_1f) t->rtile[ty].x_prep = rl__x_q8_1f_avx2;
}
