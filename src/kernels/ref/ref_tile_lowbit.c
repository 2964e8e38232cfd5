/* The fast many-token tiles of the low-bit and codebook types (kernels-impl.h:
 * rl__q2k_x8, rl__iq4xs_x8, rl__mxfp4_x8): each type's packer, scalar twin
 * and dot_row (and mxfp4's resident tile, rl__mxfp4_r8), with the integer work in any order (exact)
 * and the float work in the AVX2 leaf's per-lane order, as ref_tile.c's K-quant twins. */
#include <math.h>
#include <string.h>

#include "kernels/kernels-impl.h"

static int q2k_code(const rl_block_q2_K *b, int e) {
    return (b->qs[(e / 128) * 32 + e % 32] >> (2 * ((e % 128) / 32))) & 3;
}

/* q2_K: the scales (low nibbles) lane-doubled, the mins (high nibbles) in
 * pairs, the codes as bytes 0..3 (rl__q2k_x8). */
void rl__q2k_x8_scales(rl__q2k_x8 *o, int r, const uint8_t scales[16]) {
    for (int j = 0; j < 16; j++) o->sc[j][2 * r] = o->sc[j][2 * r + 1] = scales[j] & 15;
    for (int p = 0; p < 8; p++) {
        o->mn[p][2 * r] = scales[2 * p] >> 4;
        o->mn[p][2 * r + 1] = scales[2 * p + 1] >> 4;
    }
}
void rl__pack_q2_K_x8(void *dst, const void *w, size_t row_size, int64_t n_cols) {
    rl__q2k_x8 *o = dst;
    for (int64_t i = 0; i < n_cols / RL_QK_K; i++, o++) {
        for (int r = 0; r < 8; r++) {
            const rl_block_q2_K *b = (const rl_block_q2_K *)((const uint8_t *)w + r * row_size) + i;
            o->d[r] = rl_fp16_to_f32(b->d);
            o->dmin[r] = rl_fp16_to_f32(b->dmin);
            rl__q2k_x8_scales(o, r, b->scales);
            for (int e = 0; e < RL_QK_K; e++) o->q[e / 4][4 * r + e % 4] = (uint8_t)q2k_code(b, e);
        }
    }
}

/* q2_K's twin: per super-block and row the exact sumi and msum, then q4_K's
 * two fused multiply-adds. */
static void rl__tile8_q2_K_ref(int64_t n_cols, float *s, size_t ss, const void *packed,
                               const void *vx, size_t xs, int n_x) {
    for (int k = 0; k < n_x; k++) {
        const rl_block_q8_K *x = (const rl_block_q8_K *)((const uint8_t *)vx + (size_t)k * xs);
        float acc[8] = {0};
        const rl__q2k_x8 *p = packed;
        for (int64_t i = 0; i < n_cols / RL_QK_K; i++, p++) {
            for (int r = 0; r < 8; r++) {
                int32_t sumi = 0, msum = 0;
                for (int b = 0; b < 16; b++) {
                    int32_t t = 0;
                    for (int e = 16 * b; e < 16 * b + 16; e++)
                        t += p->q[e / 4][4 * r + e % 4] * x[i].qs[e];
                    sumi += p->sc[b][2 * r] * t;
                    msum += p->mn[b / 2][2 * r + b % 2] * x[i].bsums[b];
                }
                acc[r] = fmaf(p->d[r] * x[i].d, (float)sumi, acc[r]);
                acc[r] = fmaf(-(p->dmin[r] * x[i].d), (float)msum, acc[r]);
            }
        }
        for (int r = 0; r < 8; r++) s[(size_t)k * ss + (size_t)r] = acc[r];
    }
}

/* iq4_xs: sub-block b's scale ls - 32, and element e's v + 128. */
static int iq4xs_ls(const rl_block_iq4_xs *b, int ib) {
    return (((b->scales_l[ib / 2] >> (4 * (ib % 2))) & 15) | ((b->scales_h >> (2 * ib)) & 3) << 4) -
           32;
}
static int iq4xs_u(const rl_block_iq4_xs *b, int e) {
    const uint8_t q = b->qs[16 * (e / 32) + e % 16];
    return rl_iq4nl_values[(e % 32) < 16 ? q & 15 : q >> 4] + 128;
}
void rl__iq4xs_x8_scales(rl__iq4xs_x8 *o, int r, const rl_block_iq4_xs *b) {
    for (int j = 0; j < 8; j++) {
        const int ls = iq4xs_ls(b, j);
        o->sc[2 * j][2 * r] = o->sc[2 * j][2 * r + 1] = (int16_t)(16 * ls);
        o->sc[2 * j + 1][2 * r] = o->sc[2 * j + 1][2 * r + 1] = (int16_t)ls;
    }
    for (int p = 0; p < 4; p++) {
        o->mn[p][2 * r] = (int16_t)iq4xs_ls(b, 2 * p);
        o->mn[p][2 * r + 1] = (int16_t)iq4xs_ls(b, 2 * p + 1);
    }
}
void rl__pack_iq4_xs_x8(void *dst, const void *w, size_t row_size, int64_t n_cols) {
    rl__iq4xs_x8 *o = dst;
    for (int64_t i = 0; i < n_cols / RL_QK_K; i++, o++)
        for (int r = 0; r < 8; r++) {
            const rl_block_iq4_xs *b =
                (const rl_block_iq4_xs *)((const uint8_t *)w + r * row_size) + i;
            o->d[r] = rl_fp16_to_f32(b->d);
            o->dmin[r] = 128.0f * o->d[r];
            rl__iq4xs_x8_scales(o, r, b);
            for (int e = 0; e < RL_QK_K; e++) {
                const int u = iq4xs_u(b, e), g = 16 * (e / 32) + (e % 32) / 4;
                o->q[g][4 * r + e % 4] = (uint8_t)(u >> 4);
                o->q[g + 8][4 * r + e % 4] = (uint8_t)(u & 15);
            }
        }
}
/* iq4_xs's twin and dot_row: the exact sumi and msum, q4_K's two fused
 * multiply-adds (dmin = 128 d). */
static void rl__tile8_iq4_xs_ref(int64_t n_cols, float *s, size_t ss, const void *packed,
                                 const void *vx, size_t xs, int n_x) {
    for (int k = 0; k < n_x; k++) {
        const rl_block_q8_K *x = (const rl_block_q8_K *)((const uint8_t *)vx + (size_t)k * xs);
        float acc[8] = {0};
        const rl__iq4xs_x8 *p = packed;
        for (int64_t i = 0; i < n_cols / RL_QK_K; i++, p++)
            for (int r = 0; r < 8; r++) {
                int32_t sumi = 0, msum = 0;
                for (int e = 0; e < RL_QK_K; e++) {
                    const int b = e / 32, g = 16 * b + (e % 32) / 4;
                    sumi += (p->sc[2 * b][2 * r] * p->q[g][4 * r + e % 4] +
                             p->sc[2 * b + 1][2 * r] * p->q[g + 8][4 * r + e % 4]) *
                            x[i].qs[e];
                }
                for (int q = 0; q < 4; q++)
                    msum += p->mn[q][2 * r] * rl__q8k_bsum32(&x[i], 2 * q) +
                            p->mn[q][2 * r + 1] * rl__q8k_bsum32(&x[i], 2 * q + 1);
                acc[r] = fmaf(p->d[r] * x[i].d, (float)sumi, acc[r]);
                acc[r] = fmaf(-(p->dmin[r] * x[i].d), (float)msum, acc[r]);
            }
        for (int r = 0; r < 8; r++) s[(size_t)k * ss + (size_t)r] = acc[r];
    }
}
/* One super-block of iq4_xs's dot_row and resident twin: the exact sumi
 * and msum of row block w against x, then the two fused multiply-adds. */
static float iq4xs_step(const rl_block_iq4_xs *w, const rl_block_q8_K *x, float acc) {
    int32_t sumi = 0, msum = 0;
    for (int b = 0; b < 8; b++) {
        int32_t t = 0;
        for (int e = 32 * b; e < 32 * b + 32; e++) t += iq4xs_u(w, e) * x->qs[e];
        sumi += iq4xs_ls(w, b) * t;
        msum += iq4xs_ls(w, b) * rl__q8k_bsum32(x, b);
    }
    const float d = rl_fp16_to_f32(w->d);
    acc = fmaf(d * x->d, (float)sumi, acc);
    return fmaf(-(128.0f * d * x->d), (float)msum, acc);
}
static void rl__tile_row_iq4_xs_ref(int64_t n_cols, float *s, size_t ss, const void *vw,
                                    const void *vx, size_t xs, int n_x) {
    const rl_block_iq4_xs *w = vw;
    for (int k = 0; k < n_x; k++) {
        const rl_block_q8_K *x = (const rl_block_q8_K *)((const uint8_t *)vx + (size_t)k * xs);
        float acc = 0.0f;
        for (int64_t i = 0; i < n_cols / RL_QK_K; i++) acc = iq4xs_step(&w[i], &x[i], acc);
        s[(size_t)k * ss] = acc;
    }
}

/* iq4_xs resident tile (kernels-impl.h, rl__iq4xs_r8): each row's block
 * with its qs in q4_0's 4-byte groups per sub-block. */
static void rl__repack_iq4_xs_r8(void *dst, const void *w, size_t row_size, int64_t n_cols) {
    rl__iq4xs_r8 *o = dst;
    for (int64_t i = 0; i < n_cols / RL_QK_K; i++, o++)
        for (int r = 0; r < 8; r++) {
            const rl_block_iq4_xs *b =
                (const rl_block_iq4_xs *)((const uint8_t *)w + r * row_size) + i;
            o->d[r] = b->d;
            o->sh[r] = b->scales_h;
            memcpy(o->sl + 4 * r, b->scales_l, 4);
            for (int sb = 0; sb < 8; sb++) rl__r8_put_qs(o->q + 4 * sb, r, b->qs + 16 * sb);
        }
}
static void rl__unpack_block_iq4_xs_r8(void *dst, const void *group, int r, int64_t i) {
    const rl__iq4xs_r8 *p = (const rl__iq4xs_r8 *)group + i;
    rl_block_iq4_xs *b = dst;
    b->d = p->d[r];
    b->scales_h = p->sh[r];
    memcpy(b->scales_l, p->sl + 4 * r, 4);
    for (int sb = 0; sb < 8; sb++) rl__r8_get_qs(b->qs + 16 * sb, p->q + 4 * sb, r);
}
/* Its twin: each row's block read back, then dot_row's steps. */
static void rl__rtile_iq4_xs_ref(int64_t n_cols, float *s, size_t ss, const void *group,
                                 const void *vx, size_t xs, int n_x) {
    for (int k = 0; k < n_x; k++) {
        const rl_block_q8_K *x = (const rl_block_q8_K *)((const uint8_t *)vx + (size_t)k * xs);
        float acc[8] = {0};
        for (int64_t i = 0; i < n_cols / RL_QK_K; i++)
            for (int r = 0; r < 8; r++) {
                rl_block_iq4_xs b;
                rl__unpack_block_iq4_xs_r8(&b, group, r, i);
                acc[r] = iq4xs_step(&b, &x[i], acc[r]);
            }
        for (int r = 0; r < 8; r++) s[(size_t)k * ss + (size_t)r] = acc[r];
    }
}
/* The packed tile of a resident group: its rows read back, then packed. */
static void rl__to_tile_iq4_xs_r8(void *dst, const void *group, int64_t n_cols) {
    rl_block_iq4_xs b[8];
    for (int64_t i = 0; i < n_cols / RL_QK_K; i++) {
        for (int r = 0; r < 8; r++) rl__unpack_block_iq4_xs_r8(&b[r], group, r, i);
        rl__pack_iq4_xs_x8((rl__iq4xs_x8 *)dst + i, b, sizeof b[0], RL_QK_K);
    }
}

/* mxfp4: the codebook values as signed bytes (rl__mxfp4_x8). */
static int mxfp4_value(const rl_block_mxfp4 *b, int e) {
    return rl_mxfp4_values[e < 16 ? b->qs[e] & 15 : b->qs[e - 16] >> 4];
}
void rl__pack_mxfp4_x8(void *dst, const void *w, size_t row_size, int64_t n_cols) {
    rl__mxfp4_x8 *o = dst;
    for (int64_t i = 0; i < n_cols / 32; i++, o++)
        for (int r = 0; r < 8; r++) {
            const rl_block_mxfp4 *b =
                (const rl_block_mxfp4 *)((const uint8_t *)w + r * row_size) + i;
            o->d[r] = rl_e8m0_half_to_f32(b->e);
            for (int e = 0; e < 32; e++) o->q[e / 4][4 * r + e % 4] = (int8_t)mxfp4_value(b, e);
        }
}
/* mxfp4's twin: per block and row the exact sum of v x, one fused
 * multiply-add. */
static void rl__tile8_mxfp4_ref(int64_t n_cols, float *s, size_t ss, const void *packed,
                                const void *vx, size_t xs, int n_x) {
    for (int k = 0; k < n_x; k++) {
        const rl_block_q8_0 *x = (const rl_block_q8_0 *)((const uint8_t *)vx + (size_t)k * xs);
        float acc[8] = {0};
        const rl__mxfp4_x8 *p = packed;
        for (int64_t i = 0; i < n_cols / 32; i++, p++)
            for (int r = 0; r < 8; r++) {
                int32_t t = 0;
                for (int e = 0; e < 32; e++) t += p->q[e / 4][4 * r + e % 4] * x[i].qs[e];
                acc[r] = fmaf(p->d[r] * rl_fp16_to_f32(x[i].d), (float)t, acc[r]);
            }
        for (int r = 0; r < 8; r++) s[(size_t)k * ss + (size_t)r] = acc[r];
    }
}
static void rl__tile_row_mxfp4_ref(int64_t n_cols, float *s, size_t ss, const void *vw,
                                   const void *vx, size_t xs, int n_x) {
    const rl_block_mxfp4 *w = vw;
    for (int k = 0; k < n_x; k++) {
        const rl_block_q8_0 *x = (const rl_block_q8_0 *)((const uint8_t *)vx + (size_t)k * xs);
        float acc = 0.0f;
        for (int64_t i = 0; i < n_cols / 32; i++) {
            int32_t t = 0;
            for (int e = 0; e < 32; e++) t += mxfp4_value(&w[i], e) * x[i].qs[e];
            acc = fmaf(rl_e8m0_half_to_f32(w[i].e) * rl_fp16_to_f32(x[i].d), (float)t, acc);
        }
        s[(size_t)k * ss] = acc;
    }
}

/* mxfp4 resident tile (kernels-impl.h, rl__mxfp4_r8): q4_0's nibble
 * groups with each row's exponent byte. */
static void rl__repack_mxfp4_r8(void *dst, const void *w, size_t row_size, int64_t n_cols) {
    rl__mxfp4_r8 *o = dst;
    for (int64_t i = 0; i < n_cols / 32; i++, o++)
        for (int r = 0; r < 8; r++) {
            const rl_block_mxfp4 *b =
                (const rl_block_mxfp4 *)((const uint8_t *)w + r * row_size) + i;
            o->e[r] = b->e;
            rl__r8_put_qs(o->q, r, b->qs);
        }
}
static void rl__unpack_block_mxfp4_r8(void *dst, const void *group, int r, int64_t i) {
    const rl__mxfp4_r8 *p = (const rl__mxfp4_r8 *)group + i;
    rl_block_mxfp4 *b = dst;
    b->e = p->e[r];
    rl__r8_get_qs(b->qs, p->q, r);
}
/* Its twin, on the activations with their code sums (rl__q80s): per block
 * and row the exact sum of value x, then the packed twin's fused
 * multiply-add. */
static void rl__rtile_mxfp4_ref(int64_t n_cols, float *s, size_t ss, const void *group,
                                const void *vx, size_t xs, int n_x) {
    for (int k = 0; k < n_x; k++) {
        const rl__q80s *x = (const rl__q80s *)((const uint8_t *)vx + (size_t)k * xs);
        float acc[8] = {0};
        const rl__mxfp4_r8 *p = group;
        for (int64_t i = 0; i < n_cols / 32; i++, p++)
            for (int r = 0; r < 8; r++) {
                int32_t t = 0;
                for (int e = 0; e < 32; e++) {
                    const int b = p->q[(e % 16) / 4][4 * r + e % 4];
                    t += rl_mxfp4_values[e < 16 ? b & 15 : b >> 4] * x[i].qs[e];
                }
                acc[r] = fmaf(rl_e8m0_half_to_f32(p->e[r]) * x[i].d, (float)t, acc[r]);
            }
        for (int r = 0; r < 8; r++) s[(size_t)k * ss + (size_t)r] = acc[r];
    }
}

/* q2_K's dot_row: the twin's integers and float steps on one row. */
static void rl__tile_row_q2_K_ref(int64_t n_cols, float *s, size_t ss, const void *vw,
                                  const void *vx, size_t xs, int n_x) {
    for (int k = 0; k < n_x; k++) {
        const rl_block_q8_K *x = (const rl_block_q8_K *)((const uint8_t *)vx + (size_t)k * xs);
        const rl_block_q2_K *w = vw;
        float acc = 0.0f;
        for (int64_t i = 0; i < n_cols / RL_QK_K; i++) {
            int32_t sumi = 0, msum = 0;
            for (int b = 0; b < 16; b++) {
                int32_t t = 0;
                for (int e = 16 * b; e < 16 * b + 16; e++) t += q2k_code(&w[i], e) * x[i].qs[e];
                sumi += (w[i].scales[b] & 15) * t;
                msum += (w[i].scales[b] >> 4) * x[i].bsums[b];
            }
            acc = fmaf(rl_fp16_to_f32(w[i].d) * x[i].d, (float)sumi, acc);
            acc = fmaf(-(rl_fp16_to_f32(w[i].dmin) * x[i].d), (float)msum, acc);
        }
        s[(size_t)k * ss] = acc;
    }
}

void rl__ref_fill_tile_lowbit(rl__ktab *t);
void rl__ref_fill_tile_lowbit(rl__ktab *t) {
    t->tile8[RL_TYPE_Q2_K] = (rl__tile8){.pack = rl__pack_q2_K_x8,
                                         .dot = rl__tile8_q2_K_ref,
                                         .dot_row = rl__tile_row_q2_K_ref,
                                         .block_size = sizeof(rl__q2k_x8)};
    t->tile8[RL_TYPE_IQ4_XS] = (rl__tile8){.pack = rl__pack_iq4_xs_x8,
                                           .dot = rl__tile8_iq4_xs_ref,
                                           .dot_row = rl__tile_row_iq4_xs_ref,
                                           .block_size = sizeof(rl__iq4xs_x8)};
    t->tile8[RL_TYPE_MXFP4] = (rl__tile8){.pack = rl__pack_mxfp4_x8,
                                          .dot = rl__tile8_mxfp4_ref,
                                          .dot_row = rl__tile_row_mxfp4_ref,
                                          .block_size = 8 * sizeof(rl__mxfp4_x8)};
    t->rtile[RL_TYPE_IQ4_XS] = (rl__rtile){.repack = rl__repack_iq4_xs_r8,
                                           .unpack_block = rl__unpack_block_iq4_xs_r8,
                                           .to_tile = rl__to_tile_iq4_xs_r8,
                                           .dot = rl__rtile_iq4_xs_ref,
                                           .make = true};
    /* resident (.make) where a table's 8-row leaf is faster than packing
     * (the AVX2 table's), as q4_0's */
    t->rtile[RL_TYPE_MXFP4] = (rl__rtile){.repack = rl__repack_mxfp4_r8,
                                          .unpack_block = rl__unpack_block_mxfp4_r8,
                                          .dot = rl__rtile_mxfp4_ref,
                                          .x_prep = rl__x_sum_q8_0,
                                          .x_block = sizeof(rl__q80s)};
}
