/* Kernel tests for the many-token paths: the compute-peak probes (each
 * leaf's checksum equals the scalar model's, so it did exactly the
 * multiply-adds it reports) and the register-blocked tile leaves
 * (vec_dot_tile: R weight rows x T tokens), each bit-identical to the
 * 1-token leaf of its table per (row, token), and the matmul driver's tile
 * path bit-identical to one token at a time. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels-impl.h"
#include "ktest.h"

static void test_peak_counts(void **state) {
    (void)state;
    const int64_t iters[] = {1, 7, 1000};
    int n_run = 0;
    for (int k = 0; k < RL_PEAK_COUNT; k++) {
        if (!rl_peak_available((rl_peak_kind)k)) {
            assert_int_equal(rl_peak_run((rl_peak_kind)k, 10, NULL), 0);
            continue;
        }
        for (size_t i = 0; i < sizeof iters / sizeof iters[0]; i++) {
            uint32_t c = 0;
            uint64_t n = rl_peak_run((rl_peak_kind)k, iters[i], &c);
            const uint64_t per = k == RL_PEAK_I8_AVX2   ? RL_PEAK_I8_ACC * 32
                                 : k == RL_PEAK_I8_VNNI ? RL_PEAK_VNNI_ACC * 64
                                 : k == RL_PEAK_I8_AMX  ? 4 * 16 * 16 * 64
                                                        : RL_PEAK_F32_ACC * 8;
            assert_int_equal(n, per * (uint64_t)iters[i]);
            if (!rl_peak_check((rl_peak_kind)k, iters[i], c))
                fail_msg("%s n_iter %lld: checksum %u, scalar model %u", rl_peak_name(k),
                         (long long)iters[i], c, rl__peak_expect(k, iters[i]));
            /* a different step count must not pass (the check can fail) */
            assert_false(rl_peak_check((rl_peak_kind)k, iters[i] + 1, c));
            n_run++;
        }
    }
    assert_int_equal(rl_peak_run(RL_PEAK_I8_AVX2, 0, NULL), 0);
    if (rl__kernels_avx2()) assert_true(n_run >= 6);
}

/* The weight types with fast tiles. */
static const rl_type k_tile_types[] = {RL_TYPE_Q4_K, RL_TYPE_Q6_K, RL_TYPE_Q4_1,  RL_TYPE_Q5_K,
                                       RL_TYPE_Q3_K, RL_TYPE_Q2_K, RL_TYPE_MXFP4, RL_TYPE_IQ4_XS};
#define N_TILE_TYPES 8

/* Quantizes n activations into ty's activation type (q8_K or q8_1). */
static void act_quant(rl_type ty, const float *x, void *xq, int64_t n) {
    if (rl__act_type(ty) == RL_TYPE_Q8_1)
        rl__quant_q8_1_ref(x, xq, n);
    else if (rl__act_type(ty) == RL_TYPE_Q8_0)
        rl__quant_q8_0_ref(x, xq, n);
    else
        rl__quant_q8_K_ref(x, xq, n);
}

/* The q8_0 resident tiles' reduction (kernels-impl.h, rl__q80_r8) on an
 * original row and a q8_0 token, written here from the layout's contract:
 * per block the exact integer dot, then one fused multiply-add. */
static float twin_q8_0(const void *wrow, const void *xrow, int64_t cols) {
    const rl_block_q8_0 *w = wrow, *x = xrow;
    float acc = 0.0f;
    for (int64_t i = 0; i < cols / 32; i++) {
        int32_t sumi = 0;
        for (int j = 0; j < 32; j++) sumi += w[i].qs[j] * x[i].qs[j];
        acc = fmaf(rl_fp16_to_f32(w[i].d) * rl_fp16_to_f32(x[i].d), (float)sumi, acc);
    }
    return acc;
}

/* The twin of the resident tiles of q8_0 activations with code sums
 * (q5_0: rl__q50_r8, q4_0: rl__q40_r8, iq4_nl: q4_0's layout, mxfp4:
 * rl__mxfp4_r8), from the original rows: per block the exact sum of value
 * x (q5_0: code + 16 fifth bit - 16, q4_0: code - 8, iq4_nl and mxfp4: the
 * codebook's value), then acc = fma(d dx, sumi, acc) (mxfp4: d = 2^(e -
 * 128) from its exponent byte). */
static float twin_nib(rl_type ty, const void *wrow, const void *xrow, int64_t cols) {
    const size_t bs = rl_type_row_size(ty, 32);
    const rl_block_q8_0 *x = xrow;
    float acc = 0.0f;
    for (int64_t i = 0; i < cols / 32; i++) {
        const uint8_t *b = (const uint8_t *)wrow + (size_t)i * bs;
        const uint8_t *qs = b + bs - 16; /* the nibbles end every block */
        uint32_t qh = 0;
        if (ty == RL_TYPE_Q5_0)
            memcpy(&qh, ((const rl_block_q5_0 *)b)->qh, 4); /* (little-endian) */
        int32_t sumi = 0;
        for (int e = 0; e < 32; e++) {
            const int nib = e < 16 ? qs[e] & 15 : qs[e - 16] >> 4;
            const int v = ty == RL_TYPE_Q5_0    ? nib + (int)((qh >> e) & 1) * 16 - 16
                          : ty == RL_TYPE_Q4_0  ? nib - 8
                          : ty == RL_TYPE_MXFP4 ? rl_mxfp4_values[nib]
                                                : rl_iq4nl_values[nib];
            sumi += v * x[i].qs[e];
        }
        rl_fp16 d;
        memcpy(&d, b, sizeof d);
        const float dw = ty == RL_TYPE_MXFP4 ? ldexpf(1.0f, b[0] - 128) : rl_fp16_to_f32(d);
        acc = fmaf(dw * rl_fp16_to_f32(x[i].d), (float)sumi, acc);
    }
    return acc;
}

/* q5_1's resident tile's twin (rl__q51_r8): per block the exact sum of
 * code x, then q4_1's acc = fma(d dx, sumi, acc), fma(m, sx, acc). */
static float twin_q5_1(const void *wrow, const void *xrow, int64_t cols) {
    const rl_block_q5_1 *w = wrow;
    const rl_block_q8_1 *x = xrow;
    float acc = 0.0f;
    for (int64_t i = 0; i < cols / 32; i++) {
        const uint32_t qh = (uint32_t)w[i].qh[0] | (uint32_t)w[i].qh[1] << 8 |
                            (uint32_t)w[i].qh[2] << 16 | (uint32_t)w[i].qh[3] << 24;
        int32_t sumi = 0;
        for (int j = 0; j < 16; j++) {
            sumi += ((w[i].qs[j] & 15) + (int)((qh >> j) & 1) * 16) * x[i].qs[j];
            sumi += ((w[i].qs[j] >> 4) + (int)((qh >> (16 + j)) & 1) * 16) * x[i].qs[16 + j];
        }
        acc = fmaf(rl_fp16_to_f32(w[i].d) * rl_fp16_to_f32(x[i].d), (float)sumi, acc);
        acc = fmaf(rl_fp16_to_f32(w[i].m), rl_fp16_to_f32(x[i].s), acc);
    }
    return acc;
}

/* Packed bytes of cols columns of 8 rows. */
static size_t packed_size(const rl__tile8 *tl, int64_t cols) {
    return tl->block_size * (size_t)cols / RL_QK_K;
}

/* Random rows of type t (magnitudes varying per 32) quantized by the traits. */
static void *make_w(rl_type t, int64_t rows, int64_t cols, size_t *row_size) {
    const rl_type_traits *tr = rl_type_get(t);
    *row_size = rl_type_row_size(t, cols);
    uint8_t *w = malloc(*row_size * (size_t)rows);
    float *src = malloc(sizeof(float) * (size_t)cols);
    assert_non_null(w);
    assert_non_null(src);
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t c = 0; c < cols; c++)
            src[c] = rnd_gauss() * (0.2f + (float)((c / 32 + r) % 5) * 0.3f);
        tr->from_float(src, w + (size_t)r * *row_size, cols);
        /* files quantized elsewhere carry negative q6_K sub-block scales
         * (llama.cpp's quantizer signs them): negate some (a valid block) */
        if (t == RL_TYPE_Q6_K)
            for (int64_t i = 0; i < cols / RL_QK_K; i++) {
                rl_block_q6_K *b = (rl_block_q6_K *)(w + (size_t)r * *row_size) + i;
                for (int j = 0; j < 16; j++)
                    if ((j + r + i) % 3 == 0 && b->scales[j] > -128)
                        b->scales[j] = (int8_t)-b->scales[j];
            }
    }
    free(src);
    return w;
}

static float *make_x(int64_t n) {
    float *x = malloc(sizeof(float) * (size_t)n);
    assert_non_null(x);
    for (int64_t i = 0; i < n; i++) x[i] = rnd_gauss() * (1.0f + (float)((i / 64) % 3));
    return x;
}

/* sum_e |w_e| |x_e| over a row and a q8_K token (dequantized): the scale
 * of the bound between two summation orders. */
static double abs_dot(rl_type t, const void *wrow, const void *vxq, int64_t cols) {
    double s = 0;
    if (t == RL_TYPE_Q4_1) { /* sum (|d q| + |m|) |x|: both parts are summed apart */
        const rl_block_q4_1 *w = wrow;
        const rl_block_q8_1 *x = vxq;
        for (int64_t e = 0; e < cols; e++) {
            const rl_block_q4_1 *b = &w[e / 32];
            int j = (int)(e % 32), q = j < 16 ? b->qs[j] & 15 : b->qs[j - 16] >> 4;
            double xe = (double)rl_fp16_to_f32(x[e / 32].d) * x[e / 32].qs[j];
            s += (fabs((double)rl_fp16_to_f32(b->d) * q) + fabs((double)rl_fp16_to_f32(b->m))) *
                 fabs(xe);
        }
        return s;
    }
    float *wd = malloc(sizeof(float) * (size_t)cols);
    if (rl__act_type(t) == RL_TYPE_Q8_0) { /* (mxfp4) */
        const rl_block_q8_0 *x = vxq;
        rl_type_get(t)->to_float(wrow, wd, cols);
        for (int64_t e = 0; e < cols; e++)
            s += fabs((double)wd[e] * rl_fp16_to_f32(x[e / 32].d) * x[e / 32].qs[e % 32]);
        free(wd);
        return s;
    }
    const rl_block_q8_K *xq = vxq;
    rl_type_get(t)->to_float(wrow, wd, cols);
    for (int64_t e = 0; e < cols; e++)
        s += fabs((double)wd[e] * (double)xq[e / RL_QK_K].d * xq[e / RL_QK_K].qs[e % RL_QK_K]);
    free(wd);
    return s;
}

/* The AVX2 packer and tile8 leaf equal their scalar twins bit for bit
 * (1..4 tokens), and both are within float rounding of vec_dot: |tile - vec_dot| <=
 * 2^-20 * sum|w||x| (each of the <= 2 * n/256 + 8 float roundings of
 * either order is at most 2^-24 of a partial sum bounded by sum|w||x|). */
static void test_tile8_leaves(void **state) {
    (void)state;
    const rl__ktab *ref = rl__kernels_ref(), *avx = rl__kernels_avx2();
    const int64_t colss[3] = {256, 512, 2304};
    for (int ci = 0; ci < 3 * N_TILE_TYPES; ci++) {
        const rl_type ty = k_tile_types[ci / 3];
        const int64_t cols = colss[ci % 3], rows = 8, n_x = 4;
        size_t rs;
        uint8_t *w = make_w(ty, rows, cols, &rs);
        float *x = make_x(cols * n_x);
        const size_t xrow = rl_type_row_size(rl__act_type(ty), cols);
        uint8_t *xq = malloc(xrow * (size_t)n_x);
        for (int64_t k = 0; k < n_x; k++) act_quant(ty, x + k * cols, xq + k * xrow, cols);
        const rl__tile8 *tl = &ref->tile8[ty];
        assert_non_null(tl->pack);
        assert_non_null(tl->dot);
        void *packed = malloc(packed_size(tl, cols));
        tl->pack(packed, w, rs, cols);
        if (avx) { /* the AVX2 packer writes the same bytes */
            void *p2 = malloc(packed_size(tl, cols));
            assert_int_equal(avx->tile8[ty].block_size, tl->block_size);
            avx->tile8[ty].pack(p2, w, rs, cols);
            assert_memory_equal(packed, p2, packed_size(tl, cols));
            free(p2);
        }
        float sr[4][8], sa[4][8];
        for (int nx = 1; nx <= 4; nx++) {
            memset(sr, 0, sizeof sr);
            memset(sa, 0xff, sizeof sa);
            tl->dot(cols, &sr[0][0], 8, packed, xq, xrow, nx);
            if (avx) {
                avx->tile8[ty].dot(cols, &sa[0][0], 8, packed, xq, xrow, nx);
                for (int k = 0; k < nx; k++) assert_memory_equal(sr[k], sa[k], sizeof sr[k]);
            }
            /* dot_row (unpacked, one row at a time) gives each row's lane */
            for (int ti = 0; ti < 2; ti++) {
                const rl__ktab *kt = ti ? avx : ref;
                if (!kt) continue;
                assert_non_null(kt->tile8[ty].dot_row);
                for (int r = 0; r < 8; r++) {
                    float sd[4];
                    memset(sd, 0xff, sizeof sd);
                    kt->tile8[ty].dot_row(cols, sd, 1, w + (size_t)r * rs, xq, xrow, nx);
                    for (int k = 0; k < nx; k++)
                        if (memcmp(&sd[k], &sr[k][r], sizeof sd[k]))
                            fail_msg("%s %s dot_row cols %d row %d tok %d: %.9g, tile lane %.9g",
                                     kt->name, rl_type_name(ty), (int)cols, r, k, sd[k], sr[k][r]);
                }
            }
        }
        for (int k = 0; k < 4; k++)
            for (int r = 0; r < 8; r++) {
                float v;
                ref->vec_dot[ty](cols, &v, w + (size_t)r * rs, xq + (size_t)k * xrow);
                double bound = ldexp(
                    abs_dot(ty, w + (size_t)r * rs, (const void *)(xq + k * xrow), cols), -20);
                if (fabs((double)v - sr[k][r]) > bound)
                    fail_msg("%s cols %d row %d tok %d: tile %.9g vec_dot %.9g bound %.3g",
                             rl_type_name(ty), (int)cols, r, k, sr[k][r], v, bound);
            }
        free(packed);
        free(xq);
        free(x);
        free(w);
    }
}

static void run_mm(const rl_mat *w, const float *x, float *y, int64_t n_tok, const bool *fast,
                   rl_threadpool *tp) {
    void *scr = malloc(rl_matmul_scratch_size(w, n_tok) + 1);
    rl_matmul_ex(w, x, y, n_tok, fast, scr, tp);
    free(scr);
}

/* rl_matmul_ex with tokens marked fast: an unmarked token's row is
 * bit-identical to rl_matmul's; a marked token's row is bit-identical to
 * the scalar twin's dot_row on that row and token, whatever the number of
 * marked tokens (packed above RL_MATMUL_FAST_MIN_TOK, in place below), the
 * runs around it, the row's place in an 8-group (37 rows: the last 5 are
 * never packed) or the thread count; and within the leaf bound of the
 * default.  The switch off sends every token down the default path. */
static void test_matmul_fast_tokens(void **state) {
    (void)state;
    rl_kernels_impl impls[KT_MAX_IMPLS];
    int ni = kt_impls(impls);
    rl_threadpool *tp2 = rl_threadpool_new(2);
    assert_non_null(tp2);
    const rl__ktab *ref = rl__kernels_ref();
    /* token counts: few, the packing threshold, more; masks: all, none,
     * alternating runs of 3 (fast first), only the last token */
    const int64_t ntoks[4] = {5, RL_MATMUL_FAST_MIN_TOK, RL_MATMUL_FAST_MIN_TOK + 7, 150};
    for (int ii = 0; ii < ni * N_TILE_TYPES; ii++) {
        rl_kernels_init(impls[ii / N_TILE_TYPES]);
        const rl_type ty = k_tile_types[ii % N_TILE_TYPES];
        const int64_t rows = 37, cols = 512;
        size_t rs;
        uint8_t *wd = make_w(ty, rows, cols, &rs);
        rl_mat w = {.type = ty, .n_rows = rows, .n_cols = cols, .row_size = rs, .data = wd};
        const size_t xrow = rl_type_row_size(rl__act_type(ty), cols);
        for (int ti = 0; ti < 4; ti++) {
            const int64_t n_tok = ntoks[ti];
            float *x = make_x(cols * n_tok);
            uint8_t *xq = malloc(xrow * (size_t)n_tok);
            for (int64_t t = 0; t < n_tok; t++)
                act_quant(ty, x + t * cols, xq + (size_t)t * xrow, cols);
            const size_t ny = sizeof(float) * (size_t)(rows * n_tok);
            float *y0 = malloc(ny), *y1 = malloc(ny), *y2 = malloc(ny);
            bool *fast = malloc((size_t)n_tok);
            run_mm(&w, x, y0, n_tok, NULL, NULL);
            int n_diff = 0;
            for (int mi = 0; mi < 4; mi++) {
                for (int64_t t = 0; t < n_tok; t++)
                    fast[t] = mi == 0   ? true
                              : mi == 1 ? false
                              : mi == 2 ? (t / 3) % 2 == 0
                                        : t == n_tok - 1;
                run_mm(&w, x, y1, n_tok, fast, NULL);
                run_mm(&w, x, y2, n_tok, fast, tp2);
                assert_memory_equal(y1, y2, ny);
                for (int64_t t = 0; t < n_tok; t++)
                    for (int64_t r = 0; r < rows; r++) {
                        float a = y0[t * rows + r], b = y1[t * rows + r], e;
                        if (!fast[t]) {
                            assert_memory_equal(&a, &b, sizeof a);
                            continue;
                        }
                        ref->tile8[ty].dot_row(cols, &e, 1, wd + (size_t)r * rs,
                                               xq + (size_t)t * xrow, xrow, 1);
                        if (memcmp(&e, &b, sizeof e))
                            fail_msg("%s %s n_tok %d mask %d row %d tok %d: %.9g, twin %.9g",
                                     rl_kernels_impl_name(), rl_type_name(ty), (int)n_tok, mi,
                                     (int)r, (int)t, b, e);
                        double bound = ldexp(
                            abs_dot(ty, wd + (size_t)r * rs, (const void *)(xq + t * xrow), cols),
                            -20);
                        if (fabs((double)a - b) > bound)
                            fail_msg("%s n_tok %d row %d tok %d: fast %.9g default %.9g",
                                     rl_type_name(ty), (int)n_tok, (int)r, (int)t, b, a);
                        n_diff += a != b;
                    }
            }
            /* the tiles ran: their rounding differs somewhere (but the
             * scalar mxfp4 vec_dot is the twin's block order, a product
             * t * (d dx) then an add per block, and at these sizes the
             * product is exact, so the fma gives the same bits) */
            if (n_diff == 0 && !(ty == RL_TYPE_MXFP4 && impls[ii / N_TILE_TYPES] == RL_KERNELS_REF))
                fail_msg("%s %s n_tok %d: the fast path gave the default's bits",
                         rl_kernels_impl_name(), rl_type_name(ty), (int)n_tok);
            for (int64_t t = 0; t < n_tok; t++) fast[t] = true;
            rl_matmul_set_fast_tiles(false);
            run_mm(&w, x, y1, n_tok, fast, NULL);
            rl_matmul_set_fast_tiles(true);
            assert_memory_equal(y0, y1, ny);
            free(fast);
            free(xq);
            free(x);
            free(y0);
            free(y1);
            free(y2);
        }
        free(wd);
    }
    rl_threadpool_free(tp2);
    rl_kernels_init(RL_KERNELS_AUTO);
}

static float twin_of(rl_type ty, const void *wrow, const void *xrow, int64_t cols) {
    return ty == RL_TYPE_Q8_0   ? twin_q8_0(wrow, xrow, cols)
           : ty == RL_TYPE_Q5_1 ? twin_q5_1(wrow, xrow, cols)
                                : twin_nib(ty, wrow, xrow, cols);
}

/* A resident leaf (rl__rtile.dot) called directly on repacked groups of w
 * and 3 tokens in its x_prep form: every (row, token) the twin's bits. */
static void resident_leaf_vs_twin(const rl__rtile *rt, rl_type ty, const uint8_t *wd, size_t rs,
                                  int64_t rows, int64_t cols) {
    const size_t bb = rt->block_bytes ? rt->block_bytes : 8 * rl_type_get(ty)->type_size;
    const size_t gb = (size_t)(cols / 32) * bb, xrow = rl_type_row_size(rl__act_type(ty), cols);
    const size_t xprow = (size_t)(cols / 32) * rt->x_block;
    uint8_t *g = malloc(gb), *xq = malloc(3 * xrow), *xp = malloc(3 * xprow);
    float *x = make_x(cols * 3);
    assert_true(g && xq && xp && rt->x_prep);
    for (int t = 0; t < 3; t++) {
        act_quant(ty, x + t * cols, xq + (size_t)t * xrow, cols);
        rt->x_prep(xp + (size_t)t * xprow, xq + (size_t)t * xrow, cols / 32);
    }
    for (int64_t r0 = 0; r0 + 8 <= rows; r0 += 8) {
        float y[3][8];
        rt->repack(g, wd + (size_t)r0 * rs, rs, cols);
        rt->dot(cols, &y[0][0], 8, g, xp, xprow, 3);
        for (int t = 0; t < 3; t++)
            for (int r = 0; r < 8; r++) {
                const float e =
                    twin_of(ty, wd + (size_t)(r0 + r) * rs, xq + (size_t)t * xrow, cols);
                if (memcmp(&e, &y[t][r], sizeof e))
                    fail_msg("%s %s resident leaf row %d tok %d: %.9g, twin %.9g",
                             rl_kernels_impl_name(), rl_type_name(ty), (int)(r0 + r), t, y[t][r],
                             e);
            }
    }
    free(g);
    free(xq);
    free(xp);
    free(x);
}

/* Resident tiles (rl_mat_make_resident): the repacked matrix takes the
 * file's bytes, each row reads back as it was (rl_get_row), and rl_matmul
 * on it gives every (row, token) bit for bit the scalar twin's tile
 * reduction on the original row (dot_row), whatever the token count (1 for
 * decode, a few for verification, many for a prompt), the thread count and
 * the table: so a token's result never depends on what shares its step.
 * A view of its first rows that ends inside a group (a restricted head)
 * gives those rows' values.
 * Matrices that cannot be resident are refused (rows no multiple of 8, a
 * type without a resident tile, the tiles switched off, already resident).
 * Each table's conversion of a group to the packed tile (to_tile) writes
 * the packer's bytes on the original rows, and its conversion of two
 * groups to a packed pair (to_pair) the two to_tile results interleaved. */
static void test_resident_tiles(void **state) {
    (void)state;
    rl_kernels_impl impls[KT_MAX_IMPLS];
    int ni = kt_impls(impls);
    rl_threadpool *tp2 = rl_threadpool_new(2);
    assert_non_null(tp2);
    const rl__ktab *ref = rl__kernels_ref();
    const int64_t colss[3] = {32, 576, 1536}, ntoks[6] = {1, 3, 6, 40, 64, 150};
    const rl_type tys[11] = {RL_TYPE_Q4_1,  RL_TYPE_Q4_K,   RL_TYPE_Q6_K,   RL_TYPE_Q8_0,
                             RL_TYPE_Q5_0,  RL_TYPE_Q4_0,   RL_TYPE_IQ4_NL, RL_TYPE_Q5_1,
                             RL_TYPE_MXFP4, RL_TYPE_IQ4_XS, RL_TYPE_Q5_K};
    for (int ii = 0; ii < ni * 33; ii++) {
        rl_kernels_init(impls[ii / 33]);
        const rl_type ty = tys[(ii % 33) / 3];
        const bool k_quant =
            ty == RL_TYPE_Q4_K || ty == RL_TYPE_Q6_K || ty == RL_TYPE_IQ4_XS || ty == RL_TYPE_Q5_K;
        const int64_t rows = 40, cols = k_quant ? 256 * colss[ii % 3] / 32 : colss[ii % 3];
        size_t rs;
        uint8_t *wd = make_w(ty, rows, cols, &rs);
        rl_mat w0 = {.type = ty, .n_rows = rows, .n_cols = cols, .row_size = rs, .data = wd};
        rl_mat w = w0, w5 = w0, wk = w0;
        w5.n_rows = 37;
        wk.type = RL_TYPE_Q3_K; /* no resident layout */
        assert_int_equal(rl_mat_resident_bytes(&w5), 0);
        assert_int_equal(rl_mat_resident_bytes(&wk), 0);
        rl_matmul_set_fast_tiles(false);
        assert_int_equal(rl_mat_resident_bytes(&w), 0);
        rl_matmul_set_fast_tiles(true);
        const rl__rtile *rt = &rl__kernels()->rtile[ty];
        /* q8_0 only where the table has fast leaves for it (36 bytes a row
         * and block: the code sums beside the file's 34) */
        const size_t rbytes =
            ty == RL_TYPE_Q8_0 ? (size_t)rows * (size_t)(cols / 32) * 36 : (size_t)rows * rs;
        if (!rt->make) {
            /* the types without a packed tile, and mxfp4 (the scalar
             * table packs it) */
            assert_true(!ref->tile8[ty].pack || ty == RL_TYPE_MXFP4);
            assert_int_equal(rl_mat_resident_bytes(&w), 0);
            /* the table's resident leaf still exists (a matrix made under
             * another table runs it): on the repacked groups and x_prep's
             * form, the twin's bits */
            resident_leaf_vs_twin(rt, ty, wd, rs, rows, cols);
            free(wd);
            continue;
        }
        assert_int_equal(rl_mat_resident_bytes(&w), rbytes);
        uint8_t *res = malloc(rbytes);
        assert_non_null(res);
        rl_mat_make_resident(&w, res);
        assert_int_equal(w.layout, RL_MAT_R8);
        assert_ptr_equal(w.data, res);
        assert_int_equal(w.row_size, rbytes / (size_t)rows);
        assert_int_equal(rl_mat_resident_bytes(&w), 0);
        { /* the groups split across 2 threads (the load's repack): the same bytes */
            rl_mat wt = w0;
            uint8_t *rt2 = malloc(rbytes);
            assert_non_null(rt2);
            rl_mat_make_resident_tp(&wt, rt2, tp2);
            assert_int_equal(wt.layout, RL_MAT_R8);
            assert_int_equal(wt.row_size, w.row_size);
            assert_memory_equal(rt2, res, rbytes);
            free(rt2);
        }
        /* many-token steps convert each group to the packed tile: the
         * packer's bytes on the original rows (q8_0, q5_0, q4_0 and iq4_nl
         * have no packed tile; mxfp4's resident leaf runs every step) */
        assert_true(rt->to_tile || !ref->tile8[ty].pack || ty == RL_TYPE_MXFP4);
        const size_t tb = (size_t)cols * ref->tile8[ty].block_size / RL_QK_K;
        uint8_t *t0 = malloc(tb + 1), *t1 = malloc(tb + 1);
        for (int64_t r = 0; rt->to_tile && r < rows; r += 8) {
            ref->tile8[ty].pack(t0, wd + (size_t)r * rs, rs, cols);
            memset(t1, 0xa5, tb);
            rt->to_tile(t1, res + (size_t)r * w.row_size, cols);
            if (memcmp(t0, t1, tb))
                fail_msg("%s %s cols %d group %d: to_tile differs from pack",
                         rl_kernels_impl_name(), rl_type_name(ty), (int)cols, (int)r);
        }
        /* and, where the table converts pairs in place (to_pair), two
         * groups into the packed pair: to_tile of each, interleaved 32
         * bytes at a time */
        for (int64_t r = 0; rt->to_pair && r + 16 <= rows; r += 16) {
            uint8_t *p0 = malloc(2 * tb), *p1 = malloc(2 * tb);
            assert_true(p0 && p1);
            for (int h = 0; h < 2; h++) {
                rt->to_tile(t0, res + (size_t)(r + 8 * h) * w.row_size, cols);
                for (size_t u = 0; u < tb / 32; u++) memcpy(p0 + 64 * u + 32 * h, t0 + 32 * u, 32);
            }
            memset(p1, 0xa5, 2 * tb);
            rt->to_pair(p1, res + (size_t)r * w.row_size, res + (size_t)(r + 8) * w.row_size, cols);
            if (memcmp(p0, p1, 2 * tb))
                fail_msg("%s %s cols %d groups %d, %d: to_pair differs from two to_tile",
                         rl_kernels_impl_name(), rl_type_name(ty), (int)cols, (int)r, (int)r + 8);
            free(p0);
            free(p1);
        }
        free(t0);
        free(t1);
        float *r0 = malloc(sizeof(float) * (size_t)cols),
              *r1 = malloc(sizeof(float) * (size_t)cols);
        for (int64_t r = 0; r < rows; r++) {
            rl_get_row(&w0, r, r0);
            rl_get_row(&w, r, r1);
            assert_memory_equal(r0, r1, sizeof(float) * (size_t)cols);
        }
        const size_t xrow = rl_type_row_size(rl__act_type(ty), cols);
        for (int ti = 0; ti < 6; ti++) {
            const int64_t n_tok = ntoks[ti];
            float *x = make_x(cols * n_tok);
            uint8_t *xq = malloc(xrow * (size_t)n_tok);
            for (int64_t t = 0; t < n_tok; t++)
                act_quant(ty, x + t * cols, xq + (size_t)t * xrow, cols);
            const size_t ny = sizeof(float) * (size_t)(rows * n_tok);
            float *y1 = malloc(ny), *y2 = malloc(ny);
            memset(y1, 0xff, ny);
            run_mm(&w, x, y1, n_tok, NULL, NULL);
            run_mm(&w, x, y2, n_tok, NULL, tp2);
            assert_memory_equal(y1, y2, ny);
            for (int64_t t = 0; t < n_tok; t++)
                for (int64_t r = 0; r < rows; r++) {
                    float e;
                    if (ty == RL_TYPE_Q8_0)
                        e = twin_q8_0(wd + (size_t)r * rs, xq + (size_t)t * xrow, cols);
                    else if (ty == RL_TYPE_Q5_0 || ty == RL_TYPE_Q4_0 || ty == RL_TYPE_IQ4_NL ||
                             ty == RL_TYPE_MXFP4)
                        e = twin_nib(ty, wd + (size_t)r * rs, xq + (size_t)t * xrow, cols);
                    else if (ty == RL_TYPE_Q5_1)
                        e = twin_q5_1(wd + (size_t)r * rs, xq + (size_t)t * xrow, cols);
                    else
                        ref->tile8[ty].dot_row(cols, &e, 1, wd + (size_t)r * rs,
                                               xq + (size_t)t * xrow, xrow, 1);
                    if (memcmp(&e, &y1[t * rows + r], sizeof e))
                        fail_msg("%s cols %d n_tok %d row %d tok %d: %.9g, twin %.9g",
                                 rl_kernels_impl_name(), (int)cols, (int)n_tok, (int)r, (int)t,
                                 y1[t * rows + r], e);
                }
            /* a view of the first rows ending inside a group (a restricted
             * head): the same values, at the view's row stride */
            rl_mat wv = w;
            wv.n_rows = rows - 3;
            const size_t nv = (size_t)wv.n_rows * (size_t)n_tok;
            float *yv = malloc(sizeof(float) * (nv + 1));
            yv[nv] = 12345.0f;
            run_mm(&wv, x, yv, n_tok, NULL, tp2);
            for (int64_t t = 0; t < n_tok; t++)
                assert_memory_equal(yv + t * wv.n_rows, y1 + t * rows, sizeof(float) * wv.n_rows);
            assert_true(yv[nv] == 12345.0f);
            free(yv);
            free(xq);
            free(x);
            free(y1);
            free(y2);
        }
        free(r0);
        free(r1);
        free(res);
        free(wd);
    }
    rl_threadpool_free(tp2);
    rl_kernels_init(RL_KERNELS_AUTO);
}

/* The integer sums at their extremes: rows whose codes sit at the top of
 * their range (every element 1.0 but one 0.0 per 32: q4_K 15, q5_K 31, q6_K
 * 63 - 32, q4_1 15, q2_K 3, iq4_xs 113 + 128 = 241, both nibble planes 15
 * and 1) against tokens of all 1.0 (every activation code 127).
 * On every table the fast path (packed tiles and their pairs at 67 tokens,
 * dot_row at 5), and a resident copy where the table makes the type
 * resident, equal the scalar twin bit for bit, so no leaf's int16 partial
 * sum overflows or saturates. */
static void test_tile_extremes(void **state) {
    (void)state;
    rl_kernels_impl impls[KT_MAX_IMPLS];
    int ni = kt_impls(impls);
    const rl__ktab *ref = rl__kernels_ref();
    const int64_t rows = 16, cols = 512, ntoks[2] = {5, RL_MATMUL_FAST_MIN_TOK + 3};
    for (int ii = 0; ii < ni * N_TILE_TYPES; ii++) {
        rl_kernels_init(impls[ii / N_TILE_TYPES]);
        const rl_type ty = k_tile_types[ii % N_TILE_TYPES];
        const size_t rs = rl_type_row_size(ty, cols),
                     xrow = rl_type_row_size(rl__act_type(ty), cols);
        uint8_t *wd = malloc(rs * (size_t)rows);
        float *src = malloc(sizeof(float) * (size_t)cols),
              *x = malloc(sizeof(float) * (size_t)cols * 100);
        uint8_t *xq = malloc(xrow);
        float *y = malloc(sizeof(float) * (size_t)(rows * 100));
        assert_true(wd && src && x && xq && y);
        for (int64_t c = 0; c < cols; c++) src[c] = c % 32 == 5 ? 0.0f : 1.0f;
        for (int64_t r = 0; r < rows; r++)
            rl_type_get(ty)->from_float(src, wd + (size_t)r * rs, cols);
        for (int64_t i = 0; i < cols * 100; i++) x[i] = 1.0f;
        act_quant(ty, x, xq, cols);
        rl_mat w = {.type = ty, .n_rows = rows, .n_cols = cols, .row_size = rs, .data = wd};
        /* and, where the table makes the type resident, a resident copy */
        rl_mat wr = w;
        const size_t rb = rl_mat_resident_bytes(&wr);
        uint8_t *res = rb ? malloc(rb) : NULL;
        if (rb) rl_mat_make_resident(&wr, res);
        for (int ti = 0; ti < 4; ti++) {
            const int64_t n_tok = ntoks[ti % 2];
            if (ti >= 2 && !rb) break;
            bool fast[100];
            for (int64_t t = 0; t < n_tok; t++) fast[t] = true;
            run_mm(ti < 2 ? &w : &wr, x, y, n_tok, fast, NULL);
            for (int64_t r = 0; r < rows; r++) {
                float e;
                ref->tile8[ty].dot_row(cols, &e, 1, wd + (size_t)r * rs, xq, xrow, 1);
                for (int64_t t = 0; t < n_tok; t++)
                    if (memcmp(&e, &y[t * rows + r], sizeof e))
                        fail_msg("%s %s%s n_tok %d row %d tok %d: %.9g, twin %.9g",
                                 rl_kernels_impl_name(), rl_type_name(ty),
                                 ti < 2 ? "" : " resident", (int)n_tok, (int)r, (int)t,
                                 y[t * rows + r], e);
            }
        }
        free(res);
        free(wd);
        free(src);
        free(x);
        free(xq);
        free(y);
    }
    rl_kernels_init(RL_KERNELS_AUTO);
}

/* Resident leaves at the ends of their integer range, against tokens of
 * all +127 and all -127 codes (x + 128 = 255 and 1: the AVX2 q8_0 leaf's
 * nibbles at their largest and smallest).  q8_0: rows of all +127 and of
 * all -127 codes, and rows of -128 (a file may hold it; the quantizer never
 * writes it).  mxfp4: rows of all +12, all -12, and +12 then -12 (its AVX2
 * leaf's split int16 sums at their largest), under the exponent bytes 0
 * and 1 (the subnormal scales), 2, 100, 127 and 160.  Through rl_matmul on
 * every table whose matrices of the type are resident, at 1, 4 and 37
 * tokens, each (row, token) is the twin's bits. */
static void test_resident_extremes(void **state) {
    (void)state;
    rl_kernels_impl impls[KT_MAX_IMPLS];
    int ni = kt_impls(impls);
    const int64_t rows = 24, cols = 512, ntoks[3] = {1, 4, 37};
    const rl_type tys[2] = {RL_TYPE_Q8_0, RL_TYPE_MXFP4};
    for (int ii = 0; ii < 2 * ni; ii++) {
        rl_kernels_init(impls[ii / 2]);
        const rl_type ty = tys[ii % 2];
        const size_t rs = rl_type_row_size(ty, cols), xrow = rl_type_row_size(RL_TYPE_Q8_0, cols);
        uint8_t *wd = malloc(rs * (size_t)rows), *xq = malloc(xrow * 37);
        float *x = malloc(sizeof(float) * (size_t)cols * 37),
              *y = malloc(sizeof(float) * (size_t)(rows * 37));
        assert_true(wd && xq && x && y);
        for (int64_t r = 0; r < rows; r++)
            for (int64_t i = 0; i < cols / 32; i++) {
                if (ty == RL_TYPE_MXFP4) {
                    rl_block_mxfp4 *b = (rl_block_mxfp4 *)(wd + (size_t)r * rs) + i;
                    const uint8_t es[6] = {0, 1, 2, 100, 127, 160};
                    b->e = es[(r / 3) % 6]; /* every row pattern under each */
                    memset(b->qs, r % 3 == 0 ? 0x77 : r % 3 == 1 ? 0xff : 0xf7, sizeof b->qs);
                    continue;
                }
                rl_block_q8_0 *b = (rl_block_q8_0 *)(wd + (size_t)r * rs) + i;
                b->d = rl_f32_to_fp16(0.01f * (float)(1 + r % 5));
                memset(b->qs, r % 3 == 0 ? 127 : r % 3 == 1 ? -127 : -128, sizeof b->qs);
            }
        for (int64_t t = 0; t < 37; t++)
            for (int64_t c = 0; c < cols; c++) x[t * cols + c] = t % 2 ? -1.0f : 1.0f;
        for (int64_t t = 0; t < 37; t++) act_quant(ty, x + t * cols, xq + (size_t)t * xrow, cols);
        rl_mat w = {.type = ty, .n_rows = rows, .n_cols = cols, .row_size = rs, .data = wd};
        const size_t rb = rl_mat_resident_bytes(&w);
        /* the AVX2 table makes both resident */
        if (strcmp(rl_kernels_impl_name(), "ref") != 0) assert_true(rb > 0);
        uint8_t *res = rb ? malloc(rb) : NULL;
        if (rb) rl_mat_make_resident(&w, res);
        for (int ti = 0; ti < 3 && rb; ti++) {
            const int64_t n_tok = ntoks[ti];
            run_mm(&w, x, y, n_tok, NULL, NULL);
            for (int64_t t = 0; t < n_tok; t++)
                for (int64_t r = 0; r < rows; r++) {
                    const float e = twin_of(ty, wd + (size_t)r * rs, xq + (size_t)t * xrow, cols);
                    if (memcmp(&e, &y[t * rows + r], sizeof e))
                        fail_msg("%s %s n_tok %d row %d tok %d: %.9g, twin %.9g",
                                 rl_kernels_impl_name(), rl_type_name(ty), (int)n_tok, (int)r,
                                 (int)t, y[t * rows + r], e);
                }
        }
        free(res);
        free(wd);
        free(xq);
        free(x);
        free(y);
    }
    rl_kernels_init(RL_KERNELS_AUTO);
}

/* One rl_matmul_multi call over resident matrices whose leaves take the
 * activations in different forms (q5_0's code sums, q8_0's offset or
 * nibbles, both q8_0 activations: a q5_0 wq fused with a q8_0 wv, as in
 * Qwen2.5-Coder-0.5B), a q4_0 one sharing q5_0's form, and a row-major
 * q4_0 one: each output is bit for bit the matrix's own rl_matmul, at 1, 5
 * and 40 tokens, on every table. */
static void test_matmul_multi_forms(void **state) {
    (void)state;
    rl_kernels_impl impls[KT_MAX_IMPLS];
    int ni = kt_impls(impls);
    const int64_t cols = 256, rows = 24, ntoks[3] = {1, 5, 40};
    const rl_type tys[4] = {RL_TYPE_Q5_0, RL_TYPE_Q8_0, RL_TYPE_Q4_0, RL_TYPE_Q4_0};
    for (int ii = 0; ii < ni; ii++) {
        rl_kernels_init(impls[ii]);
        rl_mat w[4];
        uint8_t *wd[4], *res[4] = {0};
        for (int j = 0; j < 4; j++) {
            size_t rs;
            wd[j] = make_w(tys[j], rows, cols, &rs);
            w[j] = (rl_mat){
                .type = tys[j], .n_rows = rows, .n_cols = cols, .row_size = rs, .data = wd[j]};
            const size_t rb = rl_mat_resident_bytes(&w[j]);
            if (rb && j < 3) {
                res[j] = malloc(rb);
                assert_non_null(res[j]);
                rl_mat_make_resident(&w[j], res[j]);
            }
        }
        const rl_mat *ws[4] = {&w[0], &w[1], &w[2], &w[3]};
        size_t scr = 0;
        for (int j = 0; j < 4; j++) {
            const size_t sj = rl_matmul_scratch_size(&w[j], 40);
            scr = sj > scr ? sj : scr;
        }
        uint8_t *sc = malloc(scr);
        float *x = make_x(cols * 40);
        float *y1 = malloc(sizeof(float) * 4 * rows * 40),
              *y2 = malloc(sizeof(float) * 4 * rows * 40);
        assert_true(sc && y1 && y2);
        for (int ti = 0; ti < 3; ti++) {
            const int64_t n_tok = ntoks[ti];
            float *ys[4] = {y1, y1 + rows * 40, y1 + 2 * rows * 40, y1 + 3 * rows * 40};
            rl_matmul_multi(ws, ys, 4, x, n_tok, sc, NULL);
            for (int j = 0; j < 4; j++) {
                rl_matmul(&w[j], x, y2, n_tok, sc, NULL);
                if (memcmp(ys[j], y2, sizeof(float) * (size_t)(rows * n_tok)))
                    fail_msg("%s %s n_tok %d: fused result differs from its own matmul",
                             rl_kernels_impl_name(), rl_type_name(tys[j]), (int)n_tok);
            }
        }
        for (int j = 0; j < 4; j++) {
            free(res[j]);
            free(wd[j]);
        }
        free(sc);
        free(x);
        free(y1);
        free(y2);
    }
    rl_kernels_init(RL_KERNELS_AUTO);
}

/* The pair leaves (rl__tile16_fn, rl__tile16p_fn: the AVX2 table's dot16
 * of the packed tiles and of resident q4_1 and q4_0, the AVX512-VNNI table's of the
 * packed and the resident tiles) give every lane bit for bit the 8-row leaf
 * of the same table on its group, at every token count 1..RL_TILE16_T (the
 * packed pair interleaved per block, the resident groups at any distance).
 * The scalar table leaves dot16 NULL, as the AVX2 table does for the other
 * resident groups. */
static void pair_leaves_check(const rl__ktab *kt, bool resident);
static void test_pair_leaves(void **state) {
    (void)state;
    const rl__ktab *ref = rl__kernels_ref(), *avx = rl__kernels_avx2(), *vn = rl__kernels_vnni();
    for (int ti = 0; ti < N_TILE_TYPES; ti++) {
        assert_null(ref->tile8[k_tile_types[ti]].dot16);
        assert_null(ref->rtile[k_tile_types[ti]].dot16);
        if (avx && k_tile_types[ti] != RL_TYPE_Q4_1)
            assert_null(avx->rtile[k_tile_types[ti]].dot16);
    }
    /* q8_0 takes two vpmaddubsw per product on AVX2 either way: a pair
     * measured slower (SmolLM2-135M's head, 32 sequences, 0.96x) */
    if (avx) assert_null(avx->rtile[RL_TYPE_Q8_0].dot16);
    if (avx)
        pair_leaves_check(avx, false);
    else
        print_message("no AVX2 on this CPU: its pair leaves not run\n");
    if (vn)
        pair_leaves_check(vn, true);
    else
        print_message("no AVX512-VNNI on this CPU: its pair leaves not run\n");
}

static void pair_leaves_check(const rl__ktab *kt, bool resident) {
    const int64_t colss[2] = {256, 2304};
    /* the tile types, then the types that are only resident (their pairs
     * checked where the table has them) */
    const rl_type res_only[5] = {RL_TYPE_Q8_0, RL_TYPE_Q5_0, RL_TYPE_Q4_0, RL_TYPE_IQ4_NL,
                                 RL_TYPE_Q5_1};
    for (int ci = 0; ci < 2 * (N_TILE_TYPES + 5); ci++) {
        const bool extra = ci / 2 >= N_TILE_TYPES;
        const rl_type ty = extra ? res_only[ci / 2 - N_TILE_TYPES] : k_tile_types[ci / 2];
        const int64_t cols = colss[ci % 2], n_x = RL_TILE16_T;
        const rl__tile8 *tl = &kt->tile8[ty];
        const rl__rtile *rt = &kt->rtile[ty];
        /* the AVX2 table has no packed q4_1 pair (measured no faster), nor
         * a q5_K one (its 8 groups would overflow int16); its resident q4_1
         * and q4_0 groups have one; q5_K has packed tiles only; q2_K,
         * mxfp4 and iq4_xs have the AVX2 8-row leaf only, on every table */
        const bool has_packed = !extra && ty != RL_TYPE_Q2_K && ty != RL_TYPE_MXFP4 &&
                                ty != RL_TYPE_IQ4_XS &&
                                (resident || (ty != RL_TYPE_Q4_1 && ty != RL_TYPE_Q5_K));
        if (!extra && !has_packed) assert_null(tl->dot16);
        /* resident pairs: the AVX2 table's q4_1, the AVX512-VNNI table's
         * q4_K, q6_K and q4_1; any other type's where the table has them
         * (q5_K, mxfp4 and iq4_xs have none: the VNNI table runs their
         * AVX2 8-row leaves) */
        const bool res_pairs = ty == RL_TYPE_Q4_1 ||
                               (!extra && resident && (ty == RL_TYPE_Q4_K || ty == RL_TYPE_Q6_K));
        const bool has_res = rt->repack && (res_pairs || rt->dot16 != NULL);
        if (!has_packed && !has_res) continue;
        size_t rs;
        uint8_t *w = make_w(ty, 16, cols, &rs);
        float *x = make_x(cols * n_x);
        const size_t xrow = rl_type_row_size(rl__act_type(ty), cols);
        uint8_t *xq = malloc(xrow * (size_t)n_x);
        for (int64_t k = 0; k < n_x; k++) act_quant(ty, x + k * cols, xq + k * xrow, cols);
        if (has_packed) assert_non_null(tl->dot16);
        /* the AVX2 table's q4_K and q6_K pairs run in blocks of columns;
         * the AVX512-VNNI table's pair leaves do not resume from s (the
         * AVX2 leaves it starts from must not run on its pairs) */
        if (kt == rl__kernels_avx2() && (ty == RL_TYPE_Q4_K || ty == RL_TYPE_Q6_K))
            assert_non_null(tl->dot16a);
        if (kt != rl__kernels_avx2()) assert_null(tl->dot16a);
        if (has_res) assert_non_null(rt->dot16);
        /* packed: each group packed, and the pair interleaved 32 bytes at
         * a time per block of columns (kernels-impl.h); resident: the
         * repacked rows (8 rows a group, adjacent, as in a matrix), B at a
         * distance of 3 groups */
        const size_t pb = has_packed ? packed_size(tl, cols) : 32, gb = 8 * rs;
        const size_t blk = tl->block_size * (size_t)rl_type_get(ty)->blck_size / RL_QK_K;
        /* a resident group's bytes (q8_0's blocks hold their code sums) */
        const size_t rgb =
            rt->block_bytes ? (size_t)(cols / rl_type_get(ty)->blck_size) * rt->block_bytes : gb;
        uint8_t *packed = malloc(2 * pb), *pair = malloc(2 * pb), *res = malloc(4 * rgb);
        if (has_packed) {
            tl->pack(packed, w, rs, cols);
            tl->pack(packed + pb, w + gb, rs, cols);
            for (size_t u = 0; u < pb / 32; u++) {
                const size_t b = u / (blk / 32), o = u % (blk / 32);
                memcpy(pair + 2 * blk * b + 64 * o, packed + 32 * u, 32);
                memcpy(pair + 2 * blk * b + 64 * o + 32, packed + pb + 32 * u, 32);
            }
        }
        if (has_res) {
            rt->repack(res, w, rs, cols);
            rt->repack(res + 3 * rgb, w + gb, rs, cols);
        }
        /* the resident leaves' activations in their own form (x_prep) */
        const size_t xprow = rt->x_prep ? (size_t)(cols / 32) * rt->x_block : xrow;
        uint8_t *xp = malloc(xprow * (size_t)n_x);
        assert_non_null(xp);
        for (int64_t k = 0; k < n_x; k++)
            if (rt->x_prep)
                rt->x_prep(xp + k * xprow, xq + k * xrow, cols / 32);
            else
                memcpy(xp + k * xprow, xq + k * xrow, xrow);
        for (int nx = 1; nx <= n_x; nx++) {
            float s16[RL_TILE16_T][16], s8[RL_TILE16_T][16];
            for (int kind = has_packed ? 0 : 1; kind < (has_res ? 2 : 1); kind++) {
                memset(s16, 0xff, sizeof s16);
                memset(s8, 0x7f, sizeof s8);
                if (kind == 0) {
                    /* with the next pair to prefetch (w: any readable
                     * bytes) and without: the same bits */
                    float s16n[RL_TILE16_T][16];
                    memset(s16n, 0xff, sizeof s16n);
                    rl__pf pf = {w, w + 2 * gb, 0};
                    tl->dot16(cols, &s16[0][0], 16, pair, xq, xrow, nx, &pf);
                    tl->dot16(cols, &s16n[0][0], 16, pair, xq, xrow, nx, NULL);
                    assert_memory_equal(s16, s16n, sizeof s16);
                    /* it moves toward the end, never back (AVX2: 4 lines
                     * a block of columns) */
                    assert_true(pf.next >= w && pf.next <= w + 2 * gb + 4096);
                    if (kt == rl__kernels_avx2()) assert_true(pf.next > w);
                    /* at the driver's rate for a step of 32 tokens (4
                     * calls of 8, one rl__pf): the same bits, and on the
                     * AVX2 table the whole pair fetched by the step's end */
                    if (nx == RL_TILE16_T) {
                        rl__pf pr = {w, w + 2 * gb, rl__pf_tok_bytes(2 * gb, cols, 32)};
                        for (int c = 0; c < 4; c++) {
                            memset(s16n, 0xff, sizeof s16n);
                            tl->dot16(cols, &s16n[0][0], 16, pair, xq, xrow, nx, &pr);
                            assert_memory_equal(s16, s16n, sizeof s16);
                        }
                        assert_true(pr.next <= w + 2 * gb + 4096);
                        if (kt == rl__kernels_avx2()) assert_true(pr.next >= w + 2 * gb);
                    }
                    /* resuming from the sums in s (dot16a): the columns in
                     * two calls, the first super-block then the rest, give
                     * one call's bits */
                    if (tl->dot16a && cols > RL_QK_K) {
                        const size_t xb = xrow / (size_t)(cols / RL_QK_K);
                        memset(s16n, 0xff, sizeof s16n);
                        tl->dot16(RL_QK_K, &s16n[0][0], 16, pair, xq, xrow, nx, NULL);
                        tl->dot16a(cols - RL_QK_K, &s16n[0][0], 16, pair + 2 * tl->block_size,
                                   xq + xb, xrow, nx, NULL);
                        assert_memory_equal(s16, s16n, sizeof s16);
                    }
                } else
                    rt->dot16(cols, &s16[0][0], 16, res, 3 * rgb, xp, xprow, nx);
                for (int t0 = 0; t0 < nx; t0 += RL_TILE8_T) {
                    int n4 = nx - t0 < RL_TILE8_T ? nx - t0 : RL_TILE8_T;
                    for (int gi = 0; gi < 2; gi++) {
                        if (kind == 0)
                            tl->dot(cols, &s8[t0][8 * gi], 16, packed + pb * gi,
                                    xq + (size_t)t0 * xrow, xrow, n4);
                        else
                            rt->dot(cols, &s8[t0][8 * gi], 16, res + 3 * rgb * gi,
                                    xp + (size_t)t0 * xprow, xprow, n4);
                    }
                }
                for (int k = 0; k < nx; k++)
                    if (memcmp(s16[k], s8[k], sizeof s16[k]))
                        for (int r = 0; r < 16; r++)
                            if (memcmp(&s16[k][r], &s8[k][r], sizeof(float)))
                                fail_msg(
                                    "%s %s cols %d n_x %d tok %d row %d: pair %.9g, 8-row %.9g",
                                    kind ? "resident" : "packed", rl_type_name(ty), (int)cols, nx,
                                    k, r, s16[k][r], s8[k][r]);
                /* the lanes past n_x are not written */
                for (int k = nx; k < RL_TILE16_T; k++) {
                    uint32_t u;
                    memcpy(&u, &s16[k][0], 4);
                    assert_int_equal(u, 0xffffffffu);
                }
            }
        }
        free(packed);
        free(pair);
        free(res);
        free(xp);
        free(xq);
        free(x);
        free(w);
    }
}

/* The AMX leaves (rl__amx, the "amx" table): every row of every pair is
 * bit for bit the VNNI pair leaf's (rl__rtile.dot16) on the same resident
 * groups, for 1 and several pairs, 16..544 tokens (the leaf's passes of
 * RL_AMX_TOK tokens and its single 16-token block), one and several
 * super-blocks, random rows and rows at the bounds of the split products
 * (q4_K: scales 63, codes 15; q6_K: scales -128 and 127, codes 0 and 63;
 * activations +-127).  Through rl_matmul, a resident
 * matrix under the AMX table gives the VNNI table's bits at token counts
 * that are and are not multiples of 16 (the tail tokens take the pair
 * leaf).  Skipped where the CPU or the OS gives no AMX. */
static void amx_leaf_check(const rl__ktab *am, const rl__ktab *vn, rl_type ty, int64_t cols,
                           int n_pairs, int64_t n_tok, bool extreme) {
    size_t rs;
    const int64_t rows = 16 * (int64_t)n_pairs;
    uint8_t *w = make_w(ty, rows, cols, &rs);
    float *x = make_x(cols * n_tok);
    if (extreme && ty == RL_TYPE_Q4_K) /* scales 63, codes 15 */
        for (int64_t r = 0; r < rows; r++)
            for (int64_t i = 0; i < cols / RL_QK_K; i++) {
                rl_block_q4_K *b = (rl_block_q4_K *)(w + (size_t)r * rs) + i;
                memset(b->scales, 0xff, sizeof b->scales);
                memset(b->qs, (r + i) % 2 ? 0xff : 0xf0, sizeof b->qs);
            }
    if (extreme && ty == RL_TYPE_Q6_K) /* scales -128 / 127, codes 0 / 63 */
        for (int64_t r = 0; r < rows; r++)
            for (int64_t i = 0; i < cols / RL_QK_K; i++) {
                rl_block_q6_K *b = (rl_block_q6_K *)(w + (size_t)r * rs) + i;
                memset(b->scales, r % 3 ? 0x80 : 0x7f, sizeof b->scales);
                memset(b->ql, (r + i) % 2 ? 0xff : 0x00, sizeof b->ql);
                memset(b->qh, (r + i) % 2 ? 0xff : 0x00, sizeof b->qh);
            }
    if (extreme) {
        for (int64_t k = 0; k < cols * n_tok; k++) x[k] = (k / cols) % 2 ? 3.0f : -3.0f;
    }
    const size_t xrow = rl_type_row_size(rl__act_type(ty), cols);
    uint8_t *xq = malloc(xrow * (size_t)n_tok);
    uint8_t *xa = aligned_alloc(64, (size_t)(cols / RL_QK_K) * (size_t)n_tok * RL_AMX_XQ_BYTES);
    uint8_t *res = malloc(rs * (size_t)rows);
    float *ya = malloc(sizeof(float) * (size_t)(rows * n_tok));
    float *yv = malloc(sizeof(float) * (size_t)(rows * n_tok));
    const size_t bb = 2 * 420 * 1024;
    void *buf = aligned_alloc(64, bb);
    assert_non_null(xq);
    assert_non_null(xa);
    assert_non_null(res);
    assert_non_null(ya);
    assert_non_null(yv);
    assert_non_null(buf);
    const rl__amx *ax = &am->amx[ty];
    const size_t xs = (size_t)n_tok * RL_AMX_XQ_BYTES;
    for (int64_t k = 0; k < n_tok; k++) {
        act_quant(ty, x + k * cols, xq + k * xrow, cols);
        ax->x_prep(xa + k * RL_AMX_XQ_BYTES, xs, xq + k * xrow, cols / RL_QK_K);
    }
    const size_t gb = 8 * rs;
    for (int64_t g = 0; g < rows / 8; g++) vn->rtile[ty].repack(res + g * gb, w + g * gb, rs, cols);
    memset(ya, 0xff, sizeof(float) * (size_t)(rows * n_tok));
    ax->dot16(cols, ya, (size_t)rows, res, gb, n_pairs, xa, xs, n_tok, buf, bb);
    for (int p = 0; p < n_pairs; p++)
        for (int64_t t = 0; t < n_tok; t += RL_TILE16_T) {
            const int nx = n_tok - t < RL_TILE16_T ? (int)(n_tok - t) : RL_TILE16_T;
            vn->rtile[ty].dot16(cols, yv + t * rows + 16 * p, (size_t)rows, res + 2 * p * gb, gb,
                                xq + t * xrow, xrow, nx);
        }
    for (int64_t i = 0; i < rows * n_tok; i++)
        if (memcmp(&ya[i], &yv[i], sizeof(float)))
            fail_msg("%s cols %d pairs %d n_tok %d%s: token %d row %d: amx %.9g, pair leaf %.9g",
                     rl_type_name(ty), (int)cols, n_pairs, (int)n_tok, extreme ? " (bounds)" : "",
                     (int)(i / rows), (int)(i % rows), ya[i], yv[i]);
    free(buf);
    free(yv);
    free(ya);
    free(res);
    free(xa);
    free(xq);
    free(x);
    free(w);
}

static void test_amx_leaves(void **state) {
    (void)state;
    const rl__ktab *am = rl__kernels_amx(), *vn = rl__kernels_vnni();
    for (int ti = 0; ti < N_TILE_TYPES; ti++) {
        assert_null(rl__kernels_ref()->amx[k_tile_types[ti]].dot16);
        if (vn) assert_null(vn->amx[k_tile_types[ti]].dot16);
    }
    if (!am) {
        print_message("no AMX on this CPU (or not granted by the OS): its leaves not run\n");
        return;
    }
    int n_types = 0;
    for (int ti = 0; ti < N_TILE_TYPES; ti++) {
        const rl_type ty = k_tile_types[ti];
        if (!am->amx[ty].dot16) continue;
        n_types++;
        assert_non_null(am->amx[ty].x_prep);
        amx_leaf_check(am, vn, ty, 256, 1, 16, false);
        amx_leaf_check(am, vn, ty, 2304, 3, 48, false);
        amx_leaf_check(am, vn, ty, 1024, 5, 544, false);
        amx_leaf_check(am, vn, ty, 512, 2, 64, true);
    }
    assert_true(n_types >= 1);
    /* the driver: a resident matrix, the AMX table against the VNNI table */
    const int64_t rows = 96, cols = 1536, ntoks[3] = {37, 64, 16};
    for (int ti = 0; ti < N_TILE_TYPES; ti++) {
        const rl_type ty = k_tile_types[ti];
        if (!am->amx[ty].dot16) continue;
        size_t rs;
        uint8_t *w = make_w(ty, rows, cols, &rs);
        float *x = make_x(cols * 64);
        rl_mat m = {.type = ty, .n_rows = rows, .n_cols = cols, .row_size = rs, .data = w};
        uint8_t *res = malloc(rl_mat_resident_bytes(&m));
        void *scratch = malloc(rl_matmul_scratch_size(&m, 64) + 64);
        float *ya = malloc(sizeof(float) * rows * 64), *yv = malloc(sizeof(float) * rows * 64);
        assert_non_null(res);
        assert_non_null(scratch);
        assert_non_null(ya);
        assert_non_null(yv);
        rl_mat_make_resident(&m, res);
        for (int ni = 0; ni < 3; ni++) {
            const int64_t n = ntoks[ni];
            assert_int_equal(rl_kernels_init(RL_KERNELS_AMX), RL_KERNELS_AMX);
            rl_matmul(&m, x, ya, n, scratch, NULL);
            assert_int_equal(rl_kernels_init(RL_KERNELS_AVX512VNNI), RL_KERNELS_AVX512VNNI);
            rl_matmul(&m, x, yv, n, scratch, NULL);
            for (int64_t i = 0; i < rows * n; i++)
                if (memcmp(&ya[i], &yv[i], sizeof(float)))
                    fail_msg("rl_matmul %s n_tok %d: token %d row %d: amx %.9g, vnni %.9g",
                             rl_type_name(ty), (int)n, (int)(i / rows), (int)(i % rows), ya[i],
                             yv[i]);
        }
        rl_kernels_init(RL_KERNELS_AUTO);
        free(yv);
        free(ya);
        free(scratch);
        free(res);
        free(x);
        free(w);
    }
}

int main(void) {
    kt_seed(0x243F6A8885A308D3ull);
    rl_kernels_init(RL_KERNELS_AUTO);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_peak_counts),        cmocka_unit_test(test_tile8_leaves),
        cmocka_unit_test(test_matmul_fast_tokens), cmocka_unit_test(test_resident_tiles),
        cmocka_unit_test(test_pair_leaves),        cmocka_unit_test(test_tile_extremes),
        cmocka_unit_test(test_amx_leaves),         cmocka_unit_test(test_resident_extremes),
        cmocka_unit_test(test_matmul_multi_forms),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
