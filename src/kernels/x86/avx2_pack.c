/* AVX2 conversions into the packed tiles (kernels-impl.h, rl__tile8 and
 * rl__rtile) for the types without pair leaves on this table: the q2_K
 * and iq4_xs packers, and the resident q5_K group's conversion (to_tile).
 * Each writes the bytes of the scalar packer or conversion in ref/ (tested
 * in test_kernels_tile.c). */
#include <stddef.h>
#include <string.h>

#include "kernels/x86/avx2-impl.h"

/* rl__pack_q2_K_x8 with the codes moved by vector shuffles: the 32 codes
 * 128h + 32j .. of a row are bits 2j, 2j + 1 of its qs[32h ..] bytes, and
 * each such chunk of the 8 rows is transposed in groups of 4 bytes as
 * q4_K's.  The same bytes (tested).  Each of the 8 rows is prefetched
 * RL_PF_DIST ahead, as the per-row dots do (this packer, iq4_xs's and
 * mxfp4's read 8 streams at once from DRAM when a step has few tokens). */
void rl__pack_q2_K_x8_avx2(void *dst, const void *w, size_t row_size, int64_t n_cols) {
    rl__q2k_x8 *o = dst;
    const __m256i m3 = _mm256_set1_epi8(3);
    for (int64_t i = 0; i < n_cols / RL_QK_K; i++, o++) {
        const rl_block_q2_K *b[8];
        for (int r = 0; r < 8; r++) {
            b[r] = (const rl_block_q2_K *)((const uint8_t *)w + r * row_size) + i;
            RL_PF1(b[r]);
            RL_PF1((const uint8_t *)b[r] + 64);
            o->d[r] = _cvtsh_ss(b[r]->d);
            o->dmin[r] = _cvtsh_ss(b[r]->dmin);
            rl__q2k_x8_scales(o, r, b[r]->scales);
        }
        for (int h = 0; h < 2; h++)
            for (int j = 0; j < 4; j++) {
                __m256i q[8];
                for (int r = 0; r < 8; r++)
                    q[r] = _mm256_and_si256(
                        _mm256_srli_epi16(_mm256_loadu_si256((const __m256i *)(b[r]->qs + 32 * h)),
                                          2 * j),
                        m3);
                rl__tr8x8(q);
                for (int g = 0; g < 8; g++)
                    _mm256_storeu_si256((__m256i *)o->q[8 * (4 * h + j) + g], q[g]);
            }
    }
}

/* rl__pack_iq4_xs_x8: each row's sub-block looked up (v + 128 = v ^ 0x80
 * as bytes), split into its nibble planes, and each plane of the 8 rows
 * transposed in groups of 4 bytes.  The same bytes (tested). */
void rl__pack_iq4_xs_x8_avx2(void *dst, const void *w, size_t row_size, int64_t n_cols) {
    rl__iq4xs_x8 *o = dst;
    const __m256i tbl =
        _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)rl_iq4nl_values));
    const __m256i m4 = _mm256_set1_epi8(15), x80 = _mm256_set1_epi8((char)0x80);
    for (int64_t i = 0; i < n_cols / RL_QK_K; i++, o++) {
        const rl_block_iq4_xs *b[8];
        for (int r = 0; r < 8; r++) {
            b[r] = (const rl_block_iq4_xs *)((const uint8_t *)w + r * row_size) + i;
            RL_PF1(b[r]);
            RL_PF1((const uint8_t *)b[r] + 64);
            RL_PF1((const uint8_t *)b[r] + 128);
            o->d[r] = _cvtsh_ss(b[r]->d);
            o->dmin[r] = 128.0f * o->d[r];
            rl__iq4xs_x8_scales(o, r, b[r]);
        }
        for (int sb = 0; sb < 8; sb++) {
            __m256i h[8], l[8];
            for (int r = 0; r < 8; r++) {
                const __m256i u = _mm256_xor_si256(
                    _mm256_shuffle_epi8(tbl, rl__nibbles32(b[r]->qs + 16 * sb)), x80);
                h[r] = _mm256_and_si256(_mm256_srli_epi16(u, 4), m4);
                l[r] = _mm256_and_si256(u, m4);
            }
            rl__tr8x8(h);
            rl__tr8x8(l);
            for (int g = 0; g < 8; g++) {
                _mm256_storeu_si256((__m256i *)o->q[16 * sb + g], h[g]);
                _mm256_storeu_si256((__m256i *)o->q[16 * sb + 8 + g], l[g]);
            }
        }
    }
}

/* q5_K: a resident group to the packed tile (rl__q4k_x8 with codes
 * 0..31): per super-block the scales decoded as the leaf does, then each
 * sub-block's 8 code vectors (rl__q5kr8_code). */
void rl__to_tile_q5_K_avx2(void *dst, const void *group, int64_t n_cols) {
    const rl__q5k_r8 *p = group;
    rl__q4k_x8 *o = dst;
    for (int64_t i = 0; i < n_cols / RL_QK_K; i++, p++, o++) {
        _mm256_storeu_ps(o->d, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p->d)));
        _mm256_storeu_ps(o->dmin, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p->dmin)));
        rl__k4r8_scales(p->sa, (uint8_t *)o->sc, (uint8_t *)o->mn, 32);
        for (int b = 0; b < 8; b++) {
            const __m256i hv = _mm256_loadu_si256((const __m256i *)p->hb[b]);
            _Pragma("GCC unroll 8") for (int g = 0; g < 8; g++)
                _mm256_storeu_si256((__m256i *)o->q[8 * b + g], rl__q5kr8_code(p, hv, b, g));
        }
    }
}

/* rl__x_q8_1f with the scales widened by F16C (exact, as rl_fp16_to_f32) */
void rl__x_q8_1f_avx2(void *dst, const void *src, int64_t n_blocks) {
    const rl_block_q8_1 *x = src;
    rl__q81f *o = dst;
    for (int64_t b = 0; b < n_blocks; b++) {
        o[b].d = _cvtsh_ss(x[b].d);
        o[b].s = _cvtsh_ss(x[b].s);
        _mm256_storeu_si256((__m256i *)o[b].qs, _mm256_loadu_si256((const __m256i *)x[b].qs));
    }
}
