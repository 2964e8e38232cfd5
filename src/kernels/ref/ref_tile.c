/* Fast many-token tiles (kernels-impl.h, rl__tile8): the packer shared by
 * every table, and the scalar twin of each tile dot.  The twin does the
 * integer work in any order (it is exact) and the float work in exactly
 * the AVX2 leaf's per-lane order:
 *   per super-block i and row r, with dx = the token's q8_K scale:
 *     acc_r = fma(d_r * dx, (float)sumi_r, acc_r)
 *     acc_r = fma(-(dmin_r * dx), (float)msum_r, acc_r)
 *   sumi_r = sum_b sc_b * sum_{e in b} q_e * x_e, msum_r = sum_b m_b * bsum32_b,
 * so both agree bit for bit (test_kernels_tile.c).  Against vec_dot the
 * only difference is float rounding: vec_dot keeps 8 partial lanes per
 * super-block and sums them at the end. */
#include <math.h>
#include <string.h>

#include "kernels/kernels-impl.h"

/* Code of element e (0..255) of a q4_K super-block, 0..15, of a q5_K one,
 * 0..31, and of a q6_K one, 0..63 (the packers' and the in-place twins'
 * one reading). */
static int q4k_code(const rl_block_q4_K *b, int e) {
    uint8_t v = b->qs[(e / 64) * 32 + e % 32];
    return (e % 64) >= 32 ? v >> 4 : v & 15;
}
static int q5k_code(const rl_block_q5_K *b, int e) {
    uint8_t v = b->qs[(e / 64) * 32 + e % 32];
    int lo = (e % 64) >= 32 ? v >> 4 : v & 15;
    return lo | ((b->qh[e % 32] >> (e / 32)) & 1) << 4;
}
static int q6k_code(const rl_block_q6_K *b, int e) {
    int h = e / 128, m = e % 128;
    uint8_t lb = b->ql[h * 64 + m % 64];
    int lo = m >= 64 ? lb >> 4 : lb & 0xF;
    int hi = (b->qh[h * 32 + m % 32] >> (2 * (m / 32))) & 3;
    return lo | hi << 4;
}

/* Row r's scales in the packed tiles: q4_K's 8 sub-block scales and mins
 * decoded from its 12 packed bytes, q6_K's 16 widened (rl__q4k_x8,
 * rl__q6k_x8). */
static void q4k_x8_scales(rl__q4k_x8 *o, int r, const uint8_t scales[12]) {
    int sc[8], mn[8];
    for (int j = 0; j < 8; j++) rl_scale_min_k4(scales, j, &sc[j], &mn[j]);
    for (int j = 0; j < 8; j++) o->sc[j][2 * r] = o->sc[j][2 * r + 1] = (int16_t)sc[j];
    for (int p = 0; p < 4; p++) {
        o->mn[p][2 * r] = (int16_t)mn[2 * p];
        o->mn[p][2 * r + 1] = (int16_t)mn[2 * p + 1];
    }
}
void rl__q6k_x8_scales(rl__q6k_x8 *o, int r, const int8_t scales[16]) {
    for (int j = 0; j < 16; j++) o->sc[j][2 * r] = o->sc[j][2 * r + 1] = scales[j];
    for (int p = 0; p < 8; p++) {
        o->scp[p][2 * r] = scales[2 * p];
        o->scp[p][2 * r + 1] = scales[2 * p + 1];
    }
}

/* q4_K, or q5_K (five: the q4_K tile with codes 0..31, the same scales and
 * mins; its dot is q4_K's). */
static void rl__pack_k4_x8(void *dst, const void *w, size_t row_size, int64_t n_cols, bool five) {
    rl__q4k_x8 *o = dst;
    const size_t bs = five ? sizeof(rl_block_q5_K) : sizeof(rl_block_q4_K);
    for (int64_t i = 0; i < n_cols / RL_QK_K; i++, o++) {
        for (int r = 0; r < 8; r++) {
            const uint8_t *blk = (const uint8_t *)w + r * row_size + (size_t)i * bs;
            const rl_block_q4_K *b4 = (const rl_block_q4_K *)blk;
            const rl_block_q5_K *b5 = (const rl_block_q5_K *)blk;
            o->d[r] = rl_fp16_to_f32(five ? b5->d : b4->d);
            o->dmin[r] = rl_fp16_to_f32(five ? b5->dmin : b4->dmin);
            q4k_x8_scales(o, r, five ? b5->scales : b4->scales);
            for (int e = 0; e < RL_QK_K; e++)
                o->q[e / 4][4 * r + e % 4] = (uint8_t)(five ? q5k_code(b5, e) : q4k_code(b4, e));
        }
    }
}
void rl__pack_q4_K_x8(void *dst, const void *w, size_t row_size, int64_t n_cols) {
    rl__pack_k4_x8(dst, w, row_size, n_cols, false);
}
void rl__pack_q5_K_x8(void *dst, const void *w, size_t row_size, int64_t n_cols) {
    rl__pack_k4_x8(dst, w, row_size, n_cols, true);
}

static void rl__tile8_q4_K_ref(int64_t n_cols, float *s, size_t ss, const void *packed,
                               const void *vx, size_t xs, int n_x) {
    for (int k = 0; k < n_x; k++) {
        const rl_block_q8_K *x = (const rl_block_q8_K *)((const uint8_t *)vx + (size_t)k * xs);
        float acc[8] = {0};
        const rl__q4k_x8 *p = packed;
        for (int64_t i = 0; i < n_cols / RL_QK_K; i++, p++) {
            for (int r = 0; r < 8; r++) {
                int32_t sumi = 0, msum = 0;
                for (int b = 0; b < 8; b++) {
                    int32_t t = 0;
                    for (int e = 32 * b; e < 32 * b + 32; e++)
                        t += p->q[e / 4][4 * r + e % 4] * x[i].qs[e];
                    sumi += p->sc[b][2 * r] * t;
                }
                for (int q = 0; q < 4; q++)
                    msum += p->mn[q][2 * r] * rl__q8k_bsum32(&x[i], 2 * q) +
                            p->mn[q][2 * r + 1] * rl__q8k_bsum32(&x[i], 2 * q + 1);
                acc[r] = fmaf(p->d[r] * x[i].d, (float)sumi, acc[r]);
                acc[r] = fmaf(-(p->dmin[r] * x[i].d), (float)msum, acc[r]);
            }
        }
        for (int r = 0; r < 8; r++) s[(size_t)k * ss + (size_t)r] = acc[r];
    }
}

/* q6_K: the -32 offset folded through the bsums,
 * sumi = sum_b sc_b (sum q x) - 32 sum_b sc_b bsum_b (16-element
 * sub-blocks b), then acc = fma(d * dx, (float)sumi, acc). */
void rl__pack_q6_K_x8(void *dst, const void *w, size_t row_size, int64_t n_cols) {
    rl__q6k_x8 *o = dst;
    for (int64_t i = 0; i < n_cols / RL_QK_K; i++, o++) {
        for (int r = 0; r < 8; r++) {
            const rl_block_q6_K *b = (const rl_block_q6_K *)((const uint8_t *)w + r * row_size) + i;
            o->d[r] = rl_fp16_to_f32(b->d);
            rl__q6k_x8_scales(o, r, b->scales);
            for (int e = 0; e < RL_QK_K; e++) o->q[e / 4][4 * r + e % 4] = (uint8_t)q6k_code(b, e);
        }
    }
}

void rl__pack_q3_K_x8(void *dst, const void *w, size_t row_size, int64_t n_cols) {
    rl__q6k_x8 *o = dst;
    for (int64_t i = 0; i < n_cols / RL_QK_K; i++, o++) {
        for (int r = 0; r < 8; r++) {
            const rl_block_q3_K *b = (const rl_block_q3_K *)((const uint8_t *)w + r * row_size) + i;
            int8_t sc[16];
            for (int j = 0; j < 16; j++) sc[j] = (int8_t)rl__q3_K_scale(b->scales, j);
            o->d[r] = rl_fp16_to_f32(b->d);
            rl__q6k_x8_scales(o, r, sc);
            for (int e = 0; e < RL_QK_K; e++)
                o->q[e / 4][4 * r + e % 4] = (uint8_t)(rl__q3_K_code(b, e) + 32);
        }
    }
}

static void rl__tile8_q6_K_ref(int64_t n_cols, float *s, size_t ss, const void *packed,
                               const void *vx, size_t xs, int n_x) {
    for (int k = 0; k < n_x; k++) {
        const rl_block_q8_K *x = (const rl_block_q8_K *)((const uint8_t *)vx + (size_t)k * xs);
        float acc[8] = {0};
        const rl__q6k_x8 *p = packed;
        for (int64_t i = 0; i < n_cols / RL_QK_K; i++, p++) {
            for (int r = 0; r < 8; r++) {
                int32_t sumi = 0, corr = 0;
                for (int b = 0; b < 16; b++) {
                    int32_t t = 0;
                    for (int e = 16 * b; e < 16 * b + 16; e++)
                        t += p->q[e / 4][4 * r + e % 4] * x[i].qs[e];
                    sumi += p->sc[b][2 * r] * t;
                    corr += p->sc[b][2 * r] * x[i].bsums[b];
                }
                acc[r] = fmaf(p->d[r] * x[i].d, (float)(sumi - 32 * corr), acc[r]);
            }
        }
        for (int r = 0; r < 8; r++) s[(size_t)k * ss + (size_t)r] = acc[r];
    }
}

/* The tiles' reduction for one weight row in the matrix's own layout
 * (rl__tile8.dot_row): the same integers and the same float operations per
 * super-block as the tile dot's lane of that row, without packing. */
/* q4_K or q5_K (five): the blocks share d, dmin and the packed scales. */
static inline void rl__tile_row_k4_ref(int64_t n_cols, float *s, size_t ss, const void *vw,
                                       const void *vx, size_t xs, int n_x, bool five) {
    const size_t bs = five ? sizeof(rl_block_q5_K) : sizeof(rl_block_q4_K);
    for (int k = 0; k < n_x; k++) {
        const rl_block_q8_K *x = (const rl_block_q8_K *)((const uint8_t *)vx + (size_t)k * xs);
        float acc = 0.0f;
        for (int64_t i = 0; i < n_cols / RL_QK_K; i++) {
            const rl_block_q4_K *w4 = (const rl_block_q4_K *)((const uint8_t *)vw + (size_t)i * bs);
            const rl_block_q5_K *w5 = (const rl_block_q5_K *)w4;
            const uint8_t *scales = five ? w5->scales : w4->scales;
            int32_t sumi = 0, msum = 0;
            for (int b = 0; b < 8; b++) {
                int sc, mn;
                rl_scale_min_k4(scales, b, &sc, &mn);
                int32_t t = 0;
                for (int e = 32 * b; e < 32 * b + 32; e++)
                    t += (five ? q5k_code(w5, e) : q4k_code(w4, e)) * x[i].qs[e];
                sumi += sc * t;
                msum += mn * rl__q8k_bsum32(&x[i], b);
            }
            const rl_fp16 d = five ? w5->d : w4->d, dmin = five ? w5->dmin : w4->dmin;
            acc = fmaf(rl_fp16_to_f32(d) * x[i].d, (float)sumi, acc);
            acc = fmaf(-(rl_fp16_to_f32(dmin) * x[i].d), (float)msum, acc);
        }
        s[(size_t)k * ss] = acc;
    }
}
static void rl__tile_row_q4_K_ref(int64_t n_cols, float *s, size_t ss, const void *vw,
                                  const void *vx, size_t xs, int n_x) {
    rl__tile_row_k4_ref(n_cols, s, ss, vw, vx, xs, n_x, false);
}
static void rl__tile_row_q5_K_ref(int64_t n_cols, float *s, size_t ss, const void *vw,
                                  const void *vx, size_t xs, int n_x) {
    rl__tile_row_k4_ref(n_cols, s, ss, vw, vx, xs, n_x, true);
}

/* q6_K's dot_row, or q3_K's (three: the q6_K tile's operations on the
 * codes q3 + 32 and the scales as int8, rl__pack_q3_K_x8). */
static void rl__tile_row_k6_ref(int64_t n_cols, float *s, size_t ss, const void *vw, const void *vx,
                                size_t xs, int n_x, bool three) {
    const size_t bs = three ? sizeof(rl_block_q3_K) : sizeof(rl_block_q6_K);
    for (int k = 0; k < n_x; k++) {
        const rl_block_q8_K *x = (const rl_block_q8_K *)((const uint8_t *)vx + (size_t)k * xs);
        float acc = 0.0f;
        for (int64_t i = 0; i < n_cols / RL_QK_K; i++) {
            const void *blk = (const uint8_t *)vw + (size_t)i * bs;
            const rl_block_q3_K *b3 = blk;
            const rl_block_q6_K *b6 = blk;
            int32_t sumi = 0, corr = 0;
            for (int b = 0; b < 16; b++) {
                const int sc = three ? rl__q3_K_scale(b3->scales, b) : b6->scales[b];
                int32_t t = 0;
                for (int e = 16 * b; e < 16 * b + 16; e++)
                    t += (three ? rl__q3_K_code(b3, e) + 32 : q6k_code(b6, e)) * x[i].qs[e];
                sumi += sc * t;
                corr += sc * x[i].bsums[b];
            }
            const rl_fp16 d = three ? b3->d : b6->d;
            acc = fmaf(rl_fp16_to_f32(d) * x[i].d, (float)(sumi - 32 * corr), acc);
        }
        s[(size_t)k * ss] = acc;
    }
}
static void rl__tile_row_q6_K_ref(int64_t n_cols, float *s, size_t ss, const void *vw,
                                  const void *vx, size_t xs, int n_x) {
    rl__tile_row_k6_ref(n_cols, s, ss, vw, vx, xs, n_x, false);
}
static void rl__tile_row_q3_K_ref(int64_t n_cols, float *s, size_t ss, const void *vw,
                                  const void *vx, size_t xs, int n_x) {
    rl__tile_row_k6_ref(n_cols, s, ss, vw, vx, xs, n_x, true);
}

/* q4_1 (32-element blocks; element e of a block: low nibble of qs[e] for
 * e < 16, high nibble of qs[e - 16]). */
static int q41_code(const rl_block_q4_1 *b, int e) {
    return e < 16 ? b->qs[e] & 15 : b->qs[e - 16] >> 4;
}

void rl__pack_q4_1_x8(void *dst, const void *w, size_t row_size, int64_t n_cols) {
    rl__q41_x8 *o = dst;
    for (int64_t i = 0; i < n_cols / 32; i++, o++)
        for (int r = 0; r < 8; r++) {
            const rl_block_q4_1 *b = (const rl_block_q4_1 *)((const uint8_t *)w + r * row_size) + i;
            o->d[r] = rl_fp16_to_f32(b->d);
            o->m[r] = rl_fp16_to_f32(b->m);
            for (int e = 0; e < 32; e++) o->q[e / 4][4 * r + e % 4] = (uint8_t)q41_code(b, e);
        }
}

static void rl__tile8_q4_1_ref(int64_t n_cols, float *s, size_t ss, const void *packed,
                               const void *vx, size_t xs, int n_x) {
    for (int k = 0; k < n_x; k++) {
        const rl_block_q8_1 *x = (const rl_block_q8_1 *)((const uint8_t *)vx + (size_t)k * xs);
        float acc[8] = {0};
        const rl__q41_x8 *p = packed;
        for (int64_t i = 0; i < n_cols / 32; i++, p++) {
            const float dx = rl_fp16_to_f32(x[i].d), sx = rl_fp16_to_f32(x[i].s);
            for (int r = 0; r < 8; r++) {
                int32_t sumi = 0;
                for (int e = 0; e < 32; e++) sumi += p->q[e / 4][4 * r + e % 4] * x[i].qs[e];
                acc[r] = fmaf(p->d[r] * dx, (float)sumi, acc[r]);
                acc[r] = fmaf(p->m[r], sx, acc[r]);
            }
        }
        for (int r = 0; r < 8; r++) s[(size_t)k * ss + (size_t)r] = acc[r];
    }
}

static void rl__tile_row_q4_1_ref(int64_t n_cols, float *s, size_t ss, const void *vw,
                                  const void *vx, size_t xs, int n_x) {
    const rl_block_q4_1 *w = vw;
    for (int k = 0; k < n_x; k++) {
        const rl_block_q8_1 *x = (const rl_block_q8_1 *)((const uint8_t *)vx + (size_t)k * xs);
        float acc = 0.0f;
        for (int64_t i = 0; i < n_cols / 32; i++) {
            int32_t sumi = 0;
            for (int e = 0; e < 32; e++) sumi += q41_code(&w[i], e) * x[i].qs[e];
            acc = fmaf(rl_fp16_to_f32(w[i].d) * rl_fp16_to_f32(x[i].d), (float)sumi, acc);
            acc = fmaf(rl_fp16_to_f32(w[i].m), rl_fp16_to_f32(x[i].s), acc);
        }
        s[(size_t)k * ss] = acc;
    }
}

/* q4_1 resident tile (kernels-impl.h, rl__q41_r8): 4-byte groups of the 8
 * rows' qs transposed, the scales kept in fp16. */
static void rl__repack_q4_1_r8(void *dst, const void *w, size_t row_size, int64_t n_cols) {
    rl__q41_r8 *o = dst;
    for (int64_t i = 0; i < n_cols / 32; i++, o++)
        for (int r = 0; r < 8; r++) {
            const rl_block_q4_1 *b = (const rl_block_q4_1 *)((const uint8_t *)w + r * row_size) + i;
            o->d[r] = b->d;
            o->m[r] = b->m;
            rl__r8_put_qs(o->q, r, b->qs);
        }
}

static void rl__unpack_block_q4_1_r8(void *dst, const void *group, int r, int64_t i) {
    const rl__q41_r8 *p = (const rl__q41_r8 *)group + i;
    rl_block_q4_1 *b = dst;
    b->d = p->d[r];
    b->m = p->m[r];
    rl__r8_get_qs(b->qs, p->q, r);
}

/* Nibble planes: code group v (low nibbles) and v + 4 (high). */
static void rl__to_tile_q4_1_r8(void *dst, const void *group, int64_t n_cols) {
    const rl__q41_r8 *p = group;
    rl__q41_x8 *o = dst;
    for (int64_t i = 0; i < n_cols / 32; i++, p++, o++) {
        for (int r = 0; r < 8; r++) {
            o->d[r] = rl_fp16_to_f32(p->d[r]);
            o->m[r] = rl_fp16_to_f32(p->m[r]);
        }
        for (int v = 0; v < 4; v++)
            for (int l = 0; l < 32; l++) {
                o->q[v][l] = p->q[v][l] & 15;
                o->q[v + 4][l] = p->q[v][l] >> 4;
            }
    }
}

static void rl__rtile_q4_1_ref(int64_t n_cols, float *s, size_t ss, const void *group,
                               const void *vx, size_t xs, int n_x) {
    for (int k = 0; k < n_x; k++) {
        const rl_block_q8_1 *x = (const rl_block_q8_1 *)((const uint8_t *)vx + (size_t)k * xs);
        float acc[8] = {0};
        const rl__q41_r8 *p = group;
        for (int64_t i = 0; i < n_cols / 32; i++, p++) {
            const float dx = rl_fp16_to_f32(x[i].d), sx = rl_fp16_to_f32(x[i].s);
            for (int r = 0; r < 8; r++) {
                int32_t sumi = 0;
                for (int j = 0; j < 16; j++) {
                    const int b = p->q[j / 4][4 * r + j % 4];
                    sumi += (b & 15) * x[i].qs[j] + (b >> 4) * x[i].qs[j + 16];
                }
                acc[r] = fmaf(rl_fp16_to_f32(p->d[r]) * dx, (float)sumi, acc[r]);
                acc[r] = fmaf(rl_fp16_to_f32(p->m[r]), sx, acc[r]);
            }
        }
        for (int r = 0; r < 8; r++) s[(size_t)k * ss + (size_t)r] = acc[r];
    }
}

/* The q4_K and q5_K resident blocks (kernels-impl.h, rl__q4k_r8 and
 * rl__q5k_r8: q5_K's is q4_K's with the fifth bits, hb), as one view. */
typedef struct k4r8 {
    rl_fp16 *d, *dmin;
    uint8_t *sa, *sb, *sc;
    uint8_t (*hb)[32]; /* NULL: q4_K */
    uint8_t (*q)[32];
} k4r8;
static k4r8 k4r8_at(const void *group, int64_t i, bool five) {
    if (five) {
        rl__q5k_r8 *p = (rl__q5k_r8 *)group + i;
        return (k4r8){p->d, p->dmin, p->sa, p->sb, p->sc, p->hb, p->q};
    }
    rl__q4k_r8 *p = (rl__q4k_r8 *)group + i;
    return (k4r8){p->d, p->dmin, p->sa, p->sb, p->sc, NULL, p->q};
}

/* Row r's 12 packed scale bytes from a resident block. */
static void k4r8_scales(k4r8 p, int r, uint8_t out[12]) {
    memcpy(out, p.sa + 4 * r, 4);
    memcpy(out + 4, p.sb + 4 * r, 4);
    memcpy(out + 8, p.sc + 4 * r, 4);
}

/* Code of element e of row r: 0..15 (q4_K), 0..31 (q5_K). */
static int k4r8_code(k4r8 p, int r, int e) {
    const int b = e / 32, l = 4 * r + e % 4, g = e % 32 / 4;
    const int byte = p.q[8 * (b / 2) + g][l];
    const int lo = b % 2 ? byte >> 4 : byte & 15;
    return p.hb ? lo | ((p.hb[b][l] >> g) & 1) << 4 : lo;
}

/* Bit 8i + j of x to bit 8j + i (an 8 x 8 bit matrix, byte = row,
 * transposed by three rounds of swaps). */
static uint64_t bits8x8_transpose(uint64_t x) {
    uint64_t t = (x ^ (x >> 7)) & 0x00AA00AA00AA00AAull;
    x ^= t ^ (t << 7);
    t = (x ^ (x >> 14)) & 0x0000CCCC0000CCCCull;
    x ^= t ^ (t << 14);
    t = (x ^ (x >> 28)) & 0x00000000F0F0F0F0ull;
    return x ^ t ^ (t << 28);
}

/* a = c (f = 1: packing) or c = a (f = 0: unpacking) */
#define RL_MV(a, c) (f ? (void)((a) = (c)) : (void)((c) = (a)))

static inline void mv4(uint8_t *a, uint8_t *c, int f) {
    memcpy(f ? a : c, f ? c : a, 4);
}

/* Row r of resident block p from (f = 1) or to (f = 0) file block w, a
 * q4_K block or (p.hb) a q5_K one. */
static inline __attribute__((always_inline)) void k4r8_move(k4r8 p, void *w, int r, int f) {
    rl_block_q4_K *b4 = w;
    rl_block_q5_K *b5 = w;
    rl_fp16 *d = p.hb ? &b5->d : &b4->d, *dmin = p.hb ? &b5->dmin : &b4->dmin;
    uint8_t *scales = p.hb ? b5->scales : b4->scales, *qs = p.hb ? b5->qs : b4->qs;
    RL_MV(p.d[r], *d);
    RL_MV(p.dmin[r], *dmin);
    mv4(p.sa + 4 * r, scales, f);
    mv4(p.sb + 4 * r, scales + 4, f);
    mv4(p.sc + 4 * r, scales + 8, f);
    for (int v = 0; v < 32; v++) mv4(&p.q[v][4 * r], qs + 4 * v, f);
    if (!p.hb) return;
    /* per c, the 8 x 8 bits transposed: bit b of qh[4g + c] <-> bit g of
     * hb[b][4r + c] (the same swap both ways) */
    for (int c = 0; c < 4; c++) {
        uint64_t x = 0;
        for (int g = 0; g < 8; g++)
            x |= (uint64_t)(f ? b5->qh[4 * g + c] : p.hb[g][4 * r + c]) << (8 * g);
        x = bits8x8_transpose(x);
        for (int b = 0; b < 8; b++)
            *(f ? &p.hb[b][4 * r + c] : &b5->qh[4 * b + c]) = (uint8_t)(x >> (8 * b));
    }
}

static void rl__repack_k4_r8(void *dst, const void *w, size_t row_size, int64_t n_cols, bool five) {
    const size_t bs = five ? sizeof(rl_block_q5_K) : sizeof(rl_block_q4_K);
    for (int64_t i = 0; i < n_cols / RL_QK_K; i++)
        for (int r = 0; r < 8; r++)
            k4r8_move(k4r8_at(dst, i, five), (uint8_t *)w + r * row_size + (size_t)i * bs, r, 1);
}
static void rl__repack_q4_K_r8(void *dst, const void *w, size_t row_size, int64_t n_cols) {
    rl__repack_k4_r8(dst, w, row_size, n_cols, false);
}
static void rl__repack_q5_K_r8(void *dst, const void *w, size_t row_size, int64_t n_cols) {
    rl__repack_k4_r8(dst, w, row_size, n_cols, true);
}
static void rl__unpack_block_q4_K_r8(void *dst, const void *group, int r, int64_t i) {
    k4r8_move(k4r8_at(group, i, false), dst, r, 0);
}
static void rl__unpack_block_q5_K_r8(void *dst, const void *group, int r, int64_t i) {
    k4r8_move(k4r8_at(group, i, true), dst, r, 0);
}

/* To the packed tile (rl__q4k_x8): element e of row r at q[e / 4][4r + e % 4]. */
static void rl__to_tile_k4_r8(void *dst, const void *group, int64_t n_cols, bool five) {
    rl__q4k_x8 *o = dst;
    for (int64_t i = 0; i < n_cols / RL_QK_K; i++, o++) {
        const k4r8 p = k4r8_at(group, i, five);
        for (int r = 0; r < 8; r++) {
            o->d[r] = rl_fp16_to_f32(p.d[r]);
            o->dmin[r] = rl_fp16_to_f32(p.dmin[r]);
            uint8_t scales[12];
            k4r8_scales(p, r, scales);
            q4k_x8_scales(o, r, scales);
            for (int e = 0; e < RL_QK_K; e++)
                o->q[e / 4][4 * r + e % 4] = (uint8_t)k4r8_code(p, r, e);
        }
    }
}
static void rl__to_tile_q4_K_r8(void *dst, const void *group, int64_t n_cols) {
    rl__to_tile_k4_r8(dst, group, n_cols, false);
}
static void rl__to_tile_q5_K_r8(void *dst, const void *group, int64_t n_cols) {
    rl__to_tile_k4_r8(dst, group, n_cols, true);
}

static void rl__rtile_k4_ref(int64_t n_cols, float *s, size_t ss, const void *group, const void *vx,
                             size_t xs, int n_x, bool five) {
    for (int k = 0; k < n_x; k++) {
        const rl_block_q8_K *x = (const rl_block_q8_K *)((const uint8_t *)vx + (size_t)k * xs);
        float acc[8] = {0};
        for (int64_t i = 0; i < n_cols / RL_QK_K; i++) {
            const k4r8 p = k4r8_at(group, i, five);
            for (int r = 0; r < 8; r++) {
                uint8_t scales[12];
                k4r8_scales(p, r, scales);
                int32_t sumi = 0, msum = 0;
                for (int b = 0; b < 8; b++) {
                    int sc, mn;
                    rl_scale_min_k4(scales, b, &sc, &mn);
                    int32_t t = 0;
                    for (int e = 32 * b; e < 32 * b + 32; e++) t += k4r8_code(p, r, e) * x[i].qs[e];
                    sumi += sc * t;
                    msum += mn * rl__q8k_bsum32(&x[i], b);
                }
                acc[r] = fmaf(rl_fp16_to_f32(p.d[r]) * x[i].d, (float)sumi, acc[r]);
                acc[r] = fmaf(-(rl_fp16_to_f32(p.dmin[r]) * x[i].d), (float)msum, acc[r]);
            }
        }
        for (int r = 0; r < 8; r++) s[(size_t)k * ss + (size_t)r] = acc[r];
    }
}
static void rl__rtile_q4_K_ref(int64_t n_cols, float *s, size_t ss, const void *group,
                               const void *vx, size_t xs, int n_x) {
    rl__rtile_k4_ref(n_cols, s, ss, group, vx, xs, n_x, false);
}
static void rl__rtile_q5_K_ref(int64_t n_cols, float *s, size_t ss, const void *group,
                               const void *vx, size_t xs, int n_x) {
    rl__rtile_k4_ref(n_cols, s, ss, group, vx, xs, n_x, true);
}

/* q6_K resident tile (kernels-impl.h, rl__q6k_r8); f = 1 packs, 0 unpacks
 * row r of super-block p. */
static void q6k_r8_move(rl__q6k_r8 *p, rl_block_q6_K *b, int r, int f) {
    RL_MV(p->d[r], b->d);
    for (int j = 0; j < 16; j++) RL_MV(p->sc[j][r], b->scales[j]);
    for (int h = 0; h < 2; h++)
        for (int t = 0; t < 32; t++) {
            RL_MV(p->ql[h][t / 4][4 * r + t % 4], b->ql[64 * h + t]);
            RL_MV(p->ql[h][8 + t / 4][4 * r + t % 4], b->ql[64 * h + 32 + t]);
            RL_MV(p->qh[h][t / 4][4 * r + t % 4], b->qh[32 * h + t]);
        }
#undef RL_MV
}

static void rl__repack_q6_K_r8(void *dst, const void *w, size_t row_size, int64_t n_cols) {
    rl__q6k_r8 *o = dst;
    for (int64_t i = 0; i < n_cols / RL_QK_K; i++, o++)
        for (int r = 0; r < 8; r++)
            q6k_r8_move(o, (rl_block_q6_K *)((uint8_t *)(uintptr_t)w + r * row_size) + i, r, 1);
}

static void rl__unpack_block_q6_K_r8(void *dst, const void *group, int r, int64_t i) {
    q6k_r8_move((rl__q6k_r8 *)(uintptr_t)group + i, dst, r, 0);
}

/* Code (0..63) of element e of row r. */
static int q6k_r8_code(const rl__q6k_r8 *p, int r, int e) {
    const int h = e / 128, o = (e % 128) / 32, t = e % 32;
    const int lb = p->ql[h][8 * (o & 1) + t / 4][4 * r + t % 4];
    const int hb = p->qh[h][t / 4][4 * r + t % 4];
    return (o < 2 ? lb & 15 : lb >> 4) | ((hb >> (2 * o)) & 3) << 4;
}

/* Code group 32h + 8o + g of the packed tile: rl__q6k_r8's group g of
 * quadrant o of half h. */
static void rl__to_tile_q6_K_r8(void *dst, const void *group, int64_t n_cols) {
    const rl__q6k_r8 *p = group;
    rl__q6k_x8 *o = dst;
    for (int64_t i = 0; i < n_cols / RL_QK_K; i++, p++, o++) {
        for (int r = 0; r < 8; r++) {
            o->d[r] = rl_fp16_to_f32(p->d[r]);
            int8_t scales[16];
            for (int j = 0; j < 16; j++) scales[j] = p->sc[j][r];
            rl__q6k_x8_scales(o, r, scales);
        }
        for (int h = 0; h < 2; h++)
            for (int q = 0; q < 4; q++)
                for (int g = 0; g < 8; g++)
                    for (int l = 0; l < 32; l++) {
                        const int lb = p->ql[h][8 * (q & 1) + g][l], hb = p->qh[h][g][l];
                        o->q[32 * h + 8 * q + g][l] =
                            (uint8_t)((q < 2 ? lb & 15 : lb >> 4) | ((hb >> (2 * q)) & 3) << 4);
                    }
    }
}

static void rl__rtile_q6_K_ref(int64_t n_cols, float *s, size_t ss, const void *group,
                               const void *vx, size_t xs, int n_x) {
    for (int k = 0; k < n_x; k++) {
        const rl_block_q8_K *x = (const rl_block_q8_K *)((const uint8_t *)vx + (size_t)k * xs);
        float acc[8] = {0};
        const rl__q6k_r8 *p = group;
        for (int64_t i = 0; i < n_cols / RL_QK_K; i++, p++)
            for (int r = 0; r < 8; r++) {
                int32_t sumi = 0, corr = 0;
                for (int b = 0; b < 16; b++) {
                    int32_t t = 0;
                    for (int e = 16 * b; e < 16 * b + 16; e++)
                        t += q6k_r8_code(p, r, e) * x[i].qs[e];
                    sumi += p->sc[b][r] * t;
                    corr += p->sc[b][r] * x[i].bsums[b];
                }
                acc[r] = fmaf(rl_fp16_to_f32(p->d[r]) * x[i].d, (float)(sumi - 32 * corr), acc[r]);
            }
        for (int r = 0; r < 8; r++) s[(size_t)k * ss + (size_t)r] = acc[r];
    }
}

/* q5_0 resident tile (kernels-impl.h, rl__q50_r8): the qs transposed as
 * q4_1's, the fifth bits regrouped by element group. */
/* Row r's fifth bits (qh) into / out of hb (bit g of hb[4 r + c]: element
 * 4 g + c's), the q5_0 and q5_1 layouts. */
static void rl__r8_put_hb(uint8_t *hb, int r, const uint8_t *qhb) {
    const uint32_t qh =
        (uint32_t)qhb[0] | (uint32_t)qhb[1] << 8 | (uint32_t)qhb[2] << 16 | (uint32_t)qhb[3] << 24;
    for (int c = 0; c < 4; c++) {
        unsigned h = 0;
        for (int g = 0; g < 8; g++) h |= ((qh >> (4 * g + c)) & 1u) << g;
        hb[4 * r + c] = (uint8_t)h;
    }
}
static void rl__r8_get_hb(uint8_t *qhb, const uint8_t *hb, int r) {
    uint32_t qh = 0;
    for (int g = 0; g < 8; g++)
        for (int c = 0; c < 4; c++) qh |= (uint32_t)((hb[4 * r + c] >> g) & 1) << (4 * g + c);
    for (int k = 0; k < 4; k++) qhb[k] = (uint8_t)(qh >> (8 * k));
}

static void rl__repack_q5_0_r8(void *dst, const void *w, size_t row_size, int64_t n_cols) {
    rl__q50_r8 *o = dst;
    for (int64_t i = 0; i < n_cols / 32; i++, o++)
        for (int r = 0; r < 8; r++) {
            const rl_block_q5_0 *b = (const rl_block_q5_0 *)((const uint8_t *)w + r * row_size) + i;
            o->d[r] = b->d;
            rl__r8_put_qs(o->q, r, b->qs);
            rl__r8_put_hb(o->hb, r, b->qh);
        }
}

static void rl__unpack_block_q5_0_r8(void *dst, const void *group, int r, int64_t i) {
    const rl__q50_r8 *p = (const rl__q50_r8 *)group + i;
    rl_block_q5_0 *b = dst;
    b->d = p->d[r];
    rl__r8_get_hb(b->qh, p->hb, r);
    rl__r8_get_qs(b->qs, p->q, r);
}

/* q5_1 resident tile (kernels-impl.h, rl__q51_r8). */
static void rl__repack_q5_1_r8(void *dst, const void *w, size_t row_size, int64_t n_cols) {
    rl__q51_r8 *o = dst;
    for (int64_t i = 0; i < n_cols / 32; i++, o++)
        for (int r = 0; r < 8; r++) {
            const rl_block_q5_1 *b = (const rl_block_q5_1 *)((const uint8_t *)w + r * row_size) + i;
            o->d[r] = b->d;
            o->m[r] = b->m;
            rl__r8_put_qs(o->q, r, b->qs);
            rl__r8_put_hb(o->hb, r, b->qh);
        }
}

static void rl__unpack_block_q5_1_r8(void *dst, const void *group, int r, int64_t i) {
    const rl__q51_r8 *p = (const rl__q51_r8 *)group + i;
    rl_block_q5_1 *b = dst;
    b->d = p->d[r];
    b->m = p->m[r];
    rl__r8_get_hb(b->qh, p->hb, r);
    rl__r8_get_qs(b->qs, p->q, r);
}

/* The twin: per block sumi = sum code x, then q4_1's acc = fma(d dx, sumi,
 * acc), fma(m, sx, acc). */
static void rl__rtile_q5_1_ref(int64_t n_cols, float *s, size_t ss, const void *group,
                               const void *vx, size_t xs, int n_x) {
    for (int k = 0; k < n_x; k++) {
        const rl__q81f *x = (const rl__q81f *)((const uint8_t *)vx + (size_t)k * xs);
        float acc[8] = {0};
        const rl__q51_r8 *p = group;
        for (int64_t i = 0; i < n_cols / 32; i++, p++)
            for (int r = 0; r < 8; r++) {
                int32_t sumi = 0;
                for (int e = 0; e < 32; e++) {
                    const int g = e / 4, c = e % 4, b = p->q[g % 4][4 * r + c];
                    sumi += ((g < 4 ? b & 15 : b >> 4) | ((p->hb[4 * r + c] >> g) & 1) << 4) *
                            x[i].qs[e];
                }
                acc[r] = fmaf(rl_fp16_to_f32(p->d[r]) * x[i].d, (float)sumi, acc[r]);
                acc[r] = fmaf(rl_fp16_to_f32(p->m[r]), x[i].s, acc[r]);
            }
        for (int r = 0; r < 8; r++) s[(size_t)k * ss + (size_t)r] = acc[r];
    }
}

/* q4_0 resident tile (kernels-impl.h, rl__q40_r8). */
static void rl__repack_q4_0_r8(void *dst, const void *w, size_t row_size, int64_t n_cols) {
    rl__q40_r8 *o = dst;
    for (int64_t i = 0; i < n_cols / 32; i++, o++)
        for (int r = 0; r < 8; r++) {
            const rl_block_q4_0 *b = (const rl_block_q4_0 *)((const uint8_t *)w + r * row_size) + i;
            o->d[r] = b->d;
            rl__r8_put_qs(o->q, r, b->qs);
        }
}

static void rl__unpack_block_q4_0_r8(void *dst, const void *group, int r, int64_t i) {
    const rl__q40_r8 *p = (const rl__q40_r8 *)group + i;
    rl_block_q4_0 *b = dst;
    b->d = p->d[r];
    rl__r8_get_qs(b->qs, p->q, r);
}

/* The twins of the resident tiles on the code-sum form (rl__q80s): per
 * block and row sumi = sum value x exactly (q4_0: code - 8, q5_0: code -
 * 16 with the fifth bit from hb, iq4_nl: the codebook's value), then acc =
 * fma(d dx, sumi, acc).  q5_0's groups are rl__q50_r8's, the others
 * rl__q40_r8's (the same nibble planes). */
static int rl__r8_value(rl_type ty, const void *blk, int r, int e) {
    const int g = e / 4, c = e % 4;
    if (ty == RL_TYPE_Q5_0) {
        const rl__q50_r8 *p = blk;
        const int b = p->q[g % 4][4 * r + c];
        return ((g < 4 ? b & 15 : b >> 4) | ((p->hb[4 * r + c] >> g) & 1) << 4) - 16;
    }
    const rl__q40_r8 *p = blk;
    const int b = p->q[g % 4][4 * r + c], nib = g < 4 ? b & 15 : b >> 4;
    return ty == RL_TYPE_IQ4_NL ? rl_iq4nl_values[nib] : nib - 8;
}
static void rl__rtile_q80s_ref(rl_type ty, int64_t n_cols, float *s, size_t ss, const void *group,
                               const void *vx, size_t xs, int n_x) {
    const size_t bb = ty == RL_TYPE_Q5_0 ? sizeof(rl__q50_r8) : sizeof(rl__q40_r8);
    for (int k = 0; k < n_x; k++) {
        const rl__q80s *x = (const rl__q80s *)((const uint8_t *)vx + (size_t)k * xs);
        float acc[8] = {0};
        for (int64_t i = 0; i < n_cols / 32; i++) {
            const void *blk = (const uint8_t *)group + (size_t)i * bb;
            const rl_fp16 *d = blk; /* d[8] leads both layouts */
            for (int r = 0; r < 8; r++) {
                int32_t sumi = 0;
                /* element e = 4 G + c of group G */
                for (int e = 0; e < 32; e++) sumi += rl__r8_value(ty, blk, r, e) * x[i].qs[e];
                acc[r] = fmaf(rl_fp16_to_f32(d[r]) * x[i].d, (float)sumi, acc[r]);
            }
        }
        for (int r = 0; r < 8; r++) s[(size_t)k * ss + (size_t)r] = acc[r];
    }
}
static void rl__rtile_q4_0_ref(int64_t n_cols, float *s, size_t ss, const void *group,
                               const void *vx, size_t xs, int n_x) {
    rl__rtile_q80s_ref(RL_TYPE_Q4_0, n_cols, s, ss, group, vx, xs, n_x);
}
static void rl__rtile_q5_0_ref(int64_t n_cols, float *s, size_t ss, const void *group,
                               const void *vx, size_t xs, int n_x) {
    rl__rtile_q80s_ref(RL_TYPE_Q5_0, n_cols, s, ss, group, vx, xs, n_x);
}
static void rl__rtile_iq4_nl_ref(int64_t n_cols, float *s, size_t ss, const void *group,
                                 const void *vx, size_t xs, int n_x) {
    rl__rtile_q80s_ref(RL_TYPE_IQ4_NL, n_cols, s, ss, group, vx, xs, n_x);
}

void rl__x_sum_q8_0(void *dst, const void *src, int64_t n_blocks) {
    for (int64_t b = 0; b < n_blocks; b++) {
        const rl_block_q8_0 *x = (const rl_block_q8_0 *)src + b;
        rl__q80s *o = (rl__q80s *)dst + b;
        int32_t sum = 0;
        for (int j = 0; j < 32; j++) sum += x->qs[j];
        o->d = rl_fp16_to_f32(x->d);
        o->s16 = 16 * sum;
        memcpy(o->qs, x->qs, sizeof o->qs);
    }
}

/* q8_0 resident tile (kernels-impl.h, rl__q80_r8): 4-byte groups of the
 * 8 rows' codes transposed, each row's code sum beside its scale. */
static void rl__repack_q8_0_r8(void *dst, const void *w, size_t row_size, int64_t n_cols) {
    rl__q80_r8 *o = dst;
    for (int64_t i = 0; i < n_cols / 32; i++, o++)
        for (int r = 0; r < 8; r++) {
            const rl_block_q8_0 *b = (const rl_block_q8_0 *)((const uint8_t *)w + r * row_size) + i;
            int sum = 0;
            o->d[r] = b->d;
            for (int j = 0; j < 32; j++) {
                o->q[j / 4][4 * r + j % 4] = b->qs[j];
                sum += b->qs[j];
            }
            o->sw[r] = (int16_t)sum;
        }
}

static void rl__unpack_block_q8_0_r8(void *dst, const void *group, int r, int64_t i) {
    const rl__q80_r8 *p = (const rl__q80_r8 *)group + i;
    rl_block_q8_0 *b = dst;
    b->d = p->d[r];
    for (int j = 0; j < 32; j++) b->qs[j] = p->q[j / 4][4 * r + j % 4];
}

void rl__x_offset_q8_0(void *dst, const void *src, int64_t n_blocks) {
    for (int64_t b = 0; b < n_blocks; b++) {
        const rl_block_q8_0 *x = (const rl_block_q8_0 *)src + b;
        rl__q80o *o = (rl__q80o *)dst + b;
        o->d = rl_fp16_to_f32(x->d);
        for (int j = 0; j < 32; j++) o->qs[j] = (uint8_t)x->qs[j] ^ 0x80;
    }
}

void rl__x_q8_1f(void *dst, const void *src, int64_t n_blocks) {
    for (int64_t b = 0; b < n_blocks; b++) {
        const rl_block_q8_1 *x = (const rl_block_q8_1 *)src + b;
        rl__q81f *o = (rl__q81f *)dst + b;
        o->d = rl_fp16_to_f32(x->d);
        o->s = rl_fp16_to_f32(x->s);
        memcpy(o->qs, x->qs, sizeof o->qs);
    }
}

void rl__x_nibbles_q8_0(void *dst, const void *src, int64_t n_blocks) {
    for (int64_t b = 0; b < n_blocks; b++) {
        const rl_block_q8_0 *x = (const rl_block_q8_0 *)src + b;
        rl__q80n *o = (rl__q80n *)dst + b;
        o->d = rl_fp16_to_f32(x->d);
        for (int j = 0; j < 32; j++) {
            const unsigned u = (uint8_t)x->qs[j] ^ 0x80u; /* x + 128 */
            o->lo[j] = (uint8_t)(u & 15);
            o->hi[j] = (uint8_t)(u >> 4);
        }
    }
}

/* The twin: x's codes come offset by 128 (rl__x_offset_q8_0). */
static void rl__rtile_q8_0_ref(int64_t n_cols, float *s, size_t ss, const void *group,
                               const void *vx, size_t xs, int n_x) {
    for (int k = 0; k < n_x; k++) {
        const rl__q80o *x = (const rl__q80o *)((const uint8_t *)vx + (size_t)k * xs);
        float acc[8] = {0};
        const rl__q80_r8 *p = group;
        for (int64_t i = 0; i < n_cols / 32; i++, p++) {
            const float dx = x[i].d;
            for (int r = 0; r < 8; r++) {
                int32_t sumi = 0;
                for (int j = 0; j < 32; j++)
                    sumi += p->q[j / 4][4 * r + j % 4] * ((int)x[i].qs[j] - 128);
                acc[r] = fmaf(rl_fp16_to_f32(p->d[r]) * dx, (float)sumi, acc[r]);
            }
        }
        for (int r = 0; r < 8; r++) s[(size_t)k * ss + (size_t)r] = acc[r];
    }
}

void rl__ref_fill_tile_lowbit(rl__ktab *t);
void rl__ref_fill_tile(rl__ktab *t);
void rl__ref_fill_tile(rl__ktab *t) {
    t->tile8[RL_TYPE_Q4_K] = (rl__tile8){.pack = rl__pack_q4_K_x8,
                                         .dot = rl__tile8_q4_K_ref,
                                         .dot_row = rl__tile_row_q4_K_ref,
                                         .block_size = sizeof(rl__q4k_x8)};
    t->tile8[RL_TYPE_Q5_K] = (rl__tile8){.pack = rl__pack_q5_K_x8,
                                         .dot = rl__tile8_q4_K_ref,
                                         .dot_row = rl__tile_row_q5_K_ref,
                                         .block_size = sizeof(rl__q4k_x8)};
    t->tile8[RL_TYPE_Q6_K] = (rl__tile8){.pack = rl__pack_q6_K_x8,
                                         .dot = rl__tile8_q6_K_ref,
                                         .dot_row = rl__tile_row_q6_K_ref,
                                         .block_size = sizeof(rl__q6k_x8)};
    t->tile8[RL_TYPE_Q3_K] = (rl__tile8){.pack = rl__pack_q3_K_x8,
                                         .dot = rl__tile8_q6_K_ref,
                                         .dot_row = rl__tile_row_q3_K_ref,
                                         .block_size = sizeof(rl__q6k_x8)};
    rl__ref_fill_tile_lowbit(t);
    t->tile8[RL_TYPE_Q4_1] = (rl__tile8){.pack = rl__pack_q4_1_x8,
                                         .dot = rl__tile8_q4_1_ref,
                                         .dot_row = rl__tile_row_q4_1_ref,
                                         .block_size = 8 * sizeof(rl__q41_x8)};
    t->rtile[RL_TYPE_Q4_1] = (rl__rtile){.repack = rl__repack_q4_1_r8,
                                         .unpack_block = rl__unpack_block_q4_1_r8,
                                         .to_tile = rl__to_tile_q4_1_r8,
                                         .dot = rl__rtile_q4_1_ref,
                                         .make = true};
    t->rtile[RL_TYPE_Q4_K] = (rl__rtile){.repack = rl__repack_q4_K_r8,
                                         .unpack_block = rl__unpack_block_q4_K_r8,
                                         .to_tile = rl__to_tile_q4_K_r8,
                                         .dot = rl__rtile_q4_K_ref,
                                         .make = true};
    t->rtile[RL_TYPE_Q5_K] = (rl__rtile){.repack = rl__repack_q5_K_r8,
                                         .unpack_block = rl__unpack_block_q5_K_r8,
                                         .to_tile = rl__to_tile_q5_K_r8,
                                         .dot = rl__rtile_q5_K_ref,
                                         .make = true};
    t->rtile[RL_TYPE_Q6_K] = (rl__rtile){.repack = rl__repack_q6_K_r8,
                                         .unpack_block = rl__unpack_block_q6_K_r8,
                                         .to_tile = rl__to_tile_q6_K_r8,
                                         .dot = rl__rtile_q6_K_ref,
                                         .make = true};
    t->rtile[RL_TYPE_Q5_1] = (rl__rtile){.repack = rl__repack_q5_1_r8,
                                         .unpack_block = rl__unpack_block_q5_1_r8,
                                         .dot = rl__rtile_q5_1_ref,
                                         .x_prep = rl__x_q8_1f,
                                         .x_block = sizeof(rl__q81f)};
    /* q5_0, q4_0 and iq4_nl likewise (.make: the SIMD tables' 8-row
     * leaves; iq4_nl blocks are q4_0's bytes) */
    t->rtile[RL_TYPE_IQ4_NL] = (rl__rtile){.repack = rl__repack_q4_0_r8,
                                           .unpack_block = rl__unpack_block_q4_0_r8,
                                           .dot = rl__rtile_iq4_nl_ref,
                                           .x_prep = rl__x_sum_q8_0,
                                           .x_block = sizeof(rl__q80s)};
    t->rtile[RL_TYPE_Q4_0] = (rl__rtile){.repack = rl__repack_q4_0_r8,
                                         .unpack_block = rl__unpack_block_q4_0_r8,
                                         .dot = rl__rtile_q4_0_ref,
                                         .x_prep = rl__x_sum_q8_0,
                                         .x_block = sizeof(rl__q80s)};
    t->rtile[RL_TYPE_Q5_0] = (rl__rtile){.repack = rl__repack_q5_0_r8,
                                         .unpack_block = rl__unpack_block_q5_0_r8,
                                         .dot = rl__rtile_q5_0_ref,
                                         .x_prep = rl__x_sum_q8_0,
                                         .x_block = sizeof(rl__q80s)};
    /* q8_0: resident only where a table's leaves for it beat its per-token
     * ones (.make: the AVX512-VNNI table's pair leaves) */
    t->rtile[RL_TYPE_Q8_0] = (rl__rtile){.repack = rl__repack_q8_0_r8,
                                         .unpack_block = rl__unpack_block_q8_0_r8,
                                         .dot = rl__rtile_q8_0_ref,
                                         .block_bytes = sizeof(rl__q80_r8),
                                         .x_prep = rl__x_offset_q8_0,
                                         .x_block = sizeof(rl__q80o)};
}
