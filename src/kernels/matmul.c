/* rl_matmul driver: y[n_tok][n_rows] = x[n_tok][n_cols] · wᵀ.
 *
 * Phase 1 quantizes the n_tok activation rows into the activation type
 * paired with w->type (q8_0 / q8_1 / q8_K) in the caller's scratch, tokens
 * split over threads.  Phase 2 hands out chunks of weight rows through an
 * atomic counter; a thread computes every token against its chunk (the
 * weight rows stay in cache while the tokens stream past).
 *
 * Tokens go in tiles of 8 (the table's vec_dot8), then 4 (vec_dot4), then
 * one at a time, using each tile variant the table has (weights are
 * unpacked once per tile); every variant is bit-identical to vec_dot per
 * token, so the tiling never changes a result.  For few tokens
 * (verification batches, 1 < n_tok < 16) a remainder of 6-7 tokens after
 * the 8-tiles, or of 3 after the 4-tiles, runs as one tile padded with
 * copies of the last activation row (the scratch has RL_MM_PAD_ROWS spare
 * rows), its padding results dropped: one tile pass costs less than 3
 * single-token passes (Qwen2.5-1.5B, one forward of 3 positions: 2.02x a
 * 1-position forward, 4 positions: 1.69x; docs/PERFORMANCE.md).
 *
 * Batch invariance: y[t][r] is exactly vec_dot(w row r, xq row t), and
 * vec_dot's reduction order depends only on n_cols, so the result does not
 * depend on n_tok, the chunking, the thread count, or whether the matrix
 * went alone (rl_matmul) or in a group (rl_matmul_multi: the activation
 * quantization is a pure function of the input row, and the group's row
 * chunks only change which thread computes a row).
 *
 * Fast tokens (rl_matmul_ex's fast[], kernels.h): on a weight type with
 * tiles (q3_K, q4_K, q5_K, q6_K, q4_1) the marked tokens take the tiles' reduction on every
 * row.  With RL_MATMUL_FAST_MIN_TOK or more of them a chunk's rows go 8 at
 * a time: packed into the thread's buffer (g_tile_buf), then every marked
 * token runs against them, RL_TILE8_T tokens per call (the chunk size is
 * then a multiple of 8 rows); rows past the last multiple of 8, and every
 * row when fewer tokens are marked, run the same reduction in place
 * (dot_row), bit for bit the same.  Runs of unmarked tokens take the
 * default path above, so their results are rl_matmul's.
 *
 * Resident matrices (layout RL_MAT_R8, rl_mat_make_resident: repacked once
 * at load into the table's interleaved layout, same bytes): chunks are whole
 * groups of 8 rows, and every token, marked or not, takes the rtile leaf
 * RL_TILE8_T tokens at a time, the tiles' reduction, so the result of a
 * token does not depend on the token count, batch 1 included.
 *
 * Also here: rl__act_type (the activation type each weight type pairs
 * with) and rl_get_row (one weight row dequantized, for embeddings).
 */
#include <stdatomic.h>
#include <string.h>

#include "kernels/kernels-impl.h"

rl_type rl__act_type(rl_type t) {
    switch (t) {
    case RL_TYPE_F32:
    case RL_TYPE_F16:
    case RL_TYPE_BF16:
        return RL_TYPE_F32;
    case RL_TYPE_Q4_0:
    case RL_TYPE_Q5_0:
    case RL_TYPE_Q8_0:
    case RL_TYPE_IQ4_NL:
    case RL_TYPE_MXFP4:
        return RL_TYPE_Q8_0;
    case RL_TYPE_Q4_1:
    case RL_TYPE_Q5_1:
        return RL_TYPE_Q8_1;
    case RL_TYPE_Q2_K:
    case RL_TYPE_Q3_K:
    case RL_TYPE_Q4_K:
    case RL_TYPE_Q5_K:
    case RL_TYPE_Q6_K:
    case RL_TYPE_IQ4_XS:
        return RL_TYPE_Q8_K;
    default:
        return RL_TYPE_COUNT;
    }
}

void rl_get_row(const rl_mat *w, int64_t row, float *out) {
    RL_ASSERT(row >= 0 && row < w->n_rows);
    const uint8_t *src = (const uint8_t *)w->data + (size_t)row * w->row_size;
    if (w->layout == RL_MAT_R8) { /* block by block out of its group */
        const rl_type_traits *tr = rl_type_get(w->type);
        const rl__rtile *rt = &rl__kernels()->rtile[w->type];
        RL_ASSERT(tr && tr->to_float && rt->unpack_block && tr->type_size <= 256);
        const uint8_t *group = (const uint8_t *)w->data + (size_t)(row & ~7) * w->row_size;
        _Alignas(16) uint8_t blk[256];
        for (int64_t i = 0; i < w->n_cols / tr->blck_size; i++) {
            rt->unpack_block(blk, group, (int)(row & 7), i);
            tr->to_float(blk, out + i * tr->blck_size, tr->blck_size);
        }
        return;
    }
    if (w->type == RL_TYPE_F32) {
        memcpy(out, src, (size_t)w->n_cols * sizeof(float));
        return;
    }
    const rl_type_traits *tr = rl_type_get(w->type);
    RL_ASSERT(tr && tr->to_float);
    tr->to_float(src, out, w->n_cols);
}

/* Bytes of one resident group of 8 rows of w (rl__rtile.block_bytes). */
static size_t rl__r8_group_bytes(const rl__rtile *rt, const rl_mat *w) {
    const rl_type_traits *tr = rl_type_get(w->type);
    const size_t bb = rt->block_bytes ? rt->block_bytes : 8 * tr->type_size;
    return (size_t)(w->n_cols / tr->blck_size) * bb;
}

size_t rl_mat_resident_bytes(const rl_mat *w) {
    const rl__rtile *rt = &rl__kernels()->rtile[w->type];
    if (!rt->make || !rt->dot || !rt->repack || w->layout != RL_MAT_ROWS || w->n_rows <= 0 ||
        w->n_rows % 8 != 0 || !rl_matmul_fast_tiles())
        return 0;
    return (size_t)(w->n_rows / 8) * rl__r8_group_bytes(rt, w);
}

bool rl_mat_resident_head(const rl_mat *w) {
    const rl__rtile *rt = &rl__kernels()->rtile[w->type];
    return rt->dot16 != NULL || rt->head;
}

typedef struct rl__repack_job {
    const rl__rtile *rt;
    const rl_mat *w;
    uint8_t *dst;
    size_t gb; /* bytes of a resident group */
} rl__repack_job;

/* This thread's contiguous share of the groups. */
static void rl__repack_task(void *p, int ith, int nth) {
    const rl__repack_job *j = p;
    const int64_t ng = j->w->n_rows / 8, g0 = ng * ith / nth, g1 = ng * (ith + 1) / nth;
    const uint8_t *src = j->w->data;
    for (int64_t g = g0; g < g1; g++)
        j->rt->repack(j->dst + (size_t)g * j->gb, src + (size_t)g * 8 * j->w->row_size,
                      j->w->row_size, j->w->n_cols);
}

void rl_mat_make_resident(rl_mat *w, void *dst) {
    rl_mat_make_resident_tp(w, dst, NULL);
}

void rl_mat_make_resident_tp(rl_mat *w, void *dst, rl_threadpool *tp) {
    RL_ASSERT(rl_mat_resident_bytes(w) > 0);
    const rl__rtile *rt = &rl__kernels()->rtile[w->type];
    const size_t gb = rl__r8_group_bytes(rt, w);
    rl__repack_job j = {rt, w, dst, gb};
    rl_threadpool_run(tp, rl__repack_task, &j);
    w->data = dst;
    w->layout = RL_MAT_R8;
    w->row_size = gb / 8; /* the resident rows' stride: groups at r * row_size */
}

bool rl_matmul_supports(rl_type t) {
    return rl__act_type(t) != RL_TYPE_COUNT && rl__kernels()->vec_dot[t] != NULL;
}

static size_t rl__act_row_size(const rl_mat *w) {
    rl_type at = rl__act_type(w->type);
    if (at == RL_TYPE_F32) return 0; /* x is used directly */
    return rl_type_row_size(at, w->n_cols);
}

#define RL_MM_PAD_ROWS 2 /* padding of a 6-token remainder to an 8-tile */

static _Atomic bool g_fast_tiles = true;
void rl_matmul_set_fast_tiles(bool on) {
    atomic_store(&g_fast_tiles, on);
}
bool rl_matmul_fast_tiles(void) {
    return atomic_load_explicit(&g_fast_tiles, memory_order_relaxed);
}

/* Per-thread buffer of one packed 8-row group: up to 64 super-blocks of
 * the largest packed type (16384 columns; iq4_xs's); wider matrices run the
 * tiles' reduction unpacked (dot_row). */
#define RL_TILE8_BUF (64 * sizeof(rl__iq4xs_x8))
_Static_assert(sizeof(rl__iq4xs_x8) >= sizeof(rl__q2k_x8) &&
                   sizeof(rl__iq4xs_x8) >= sizeof(rl__q6k_x8) &&
                   sizeof(rl__iq4xs_x8) >= sizeof(rl__q4k_x8),
               "RL_TILE8_BUF holds the largest packed block");
/* (twice that: the pair leaves' packed pairs) */
static _Thread_local _Alignas(64) uint8_t g_tile_buf[2 * RL_TILE8_BUF];

/* Bytes of one packed 8-row group of w (rl__tile8's layout). */
static size_t rl__mm_tile_bytes(const rl__ktab *kt, const rl_mat *w) {
    return (size_t)w->n_cols * kt->tile8[w->type].block_size / RL_QK_K;
}

/* Two groups of 8 rows of w as a packed pair (rl__tile16p_fn's layout) in
 * g_tile_buf: resident groups through the table's to_pair where it has
 * one; else block by block, each group packed (from the matrix's rows, or
 * converted from its resident layout) into a staging block, then the two
 * interleaved 32 bytes at a time.  ga, gb: the groups' first rows
 * (row-major) or the resident groups. */
static void rl__mm_pair_pack(const rl__ktab *kt, const rl_mat *w, const uint8_t *ga,
                             const uint8_t *gb, bool resident) {
    if (resident && kt->rtile[w->type].to_pair) { /* straight into the pair */
        kt->rtile[w->type].to_pair(g_tile_buf, ga, gb, w->n_cols);
        return;
    }
    const rl_type_traits *tr = rl_type_get(w->type);
    const int64_t bc = tr->blck_size;
    const size_t pb = kt->tile8[w->type].block_size * (size_t)bc / RL_QK_K;
    const size_t step = resident
                            ? rl__r8_group_bytes(&kt->rtile[w->type], w) / (size_t)(w->n_cols / bc)
                            : tr->type_size; /* one block of the group, or of a row */
    _Alignas(64) uint8_t sa[sizeof(rl__q6k_x8)], sb[sizeof(rl__q6k_x8)];
    RL_ASSERT(pb <= sizeof sa && pb % 32 == 0);
    uint8_t *o = g_tile_buf;
    for (int64_t i = 0; i < w->n_cols / bc; i++, o += 2 * pb) {
        if (resident) {
            kt->rtile[w->type].to_tile(sa, ga + (size_t)i * step, bc);
            kt->rtile[w->type].to_tile(sb, gb + (size_t)i * step, bc);
        } else {
            kt->tile8[w->type].pack(sa, ga + (size_t)i * step, w->row_size, bc);
            kt->tile8[w->type].pack(sb, gb + (size_t)i * step, w->row_size, bc);
        }
        for (size_t u = 0; u < pb / 32; u++) {
            memcpy(o + 64 * u, sa + 32 * u, 32);
            memcpy(o + 64 * u + 32, sb + 32 * u, 32);
        }
    }
}

/* True if the tokens marked fast take the tiles' reduction on w. */
static bool rl__mm_tiled(const rl__ktab *kt, const rl_mat *w) {
    const rl__tile8 *tl = &kt->tile8[w->type];
    return tl->dot && tl->dot_row && rl_matmul_fast_tiles();
}

/* True if w's rows are packed 8 at a time for n_fast tiled tokens. */
static bool rl__mm_packs(const rl__ktab *kt, const rl_mat *w, int64_t n_fast) {
    const int min = kt->tile8[w->type].pack_min;
    return n_fast >= (min ? min : RL_MATMUL_FAST_MIN_TOK) && rl__mm_tiled(kt, w) &&
           rl__mm_tile_bytes(kt, w) <= RL_TILE8_BUF;
}

/* (then the activations in the resident leaves' own forms, rl__rtile.x_prep:
 * at most RL_X_PREP_MAX_BLOCK bytes a 32-element block, and at most
 * RL_MM_FORMS forms in one call: a q5_0 and a q8_0 matrix fused take two) */
#define RL_MM_FORMS 2
size_t rl_matmul_scratch_size(const rl_mat *w, int64_t n_tok) {
    size_t rs = rl__act_row_size(w), out, prep;
    if (n_tok < 0 || !rl_mul_size(rs, (size_t)n_tok + RL_MM_PAD_ROWS, &out)) return SIZE_MAX;
    const rl_type at = rl__act_type(w->type);
    /* the AMX leaves' form (rl__amx.x_prep), 64-byte aligned, where the
     * CPU has the AMX table */
    if (at == RL_TYPE_Q8_K && rl__kernels_amx()) {
        if (!rl_mul_size((size_t)w->n_cols / RL_QK_K * RL_AMX_XQ_BYTES, (size_t)n_tok, &prep) ||
            out + prep + 64 < out)
            return SIZE_MAX;
        out += prep + 64;
    }
    if (at == RL_TYPE_Q8_0 || at == RL_TYPE_Q8_1) {
        /* up to RL_MM_FORMS forms, each starting 64-byte aligned (float
         * fields) */
        if (!rl_mul_size((size_t)w->n_cols / 32 * RL_X_PREP_MAX_BLOCK,
                         (size_t)n_tok + RL_MM_PAD_ROWS, &prep) ||
            prep > (SIZE_MAX - out) / RL_MM_FORMS - 64)
            return SIZE_MAX;
        out += RL_MM_FORMS * (prep + 64);
    }
    return out;
}

/* One matmul call: n_w weight matrices (all with the same n_cols and the
 * same activation type) against one input.  Row chunks of all matrices are
 * numbered one after the other: matrix i owns chunks [chunk_end[i-1],
 * chunk_end[i]). */
typedef struct rl__mm_ctx {
    const rl_mat *w[RL_MATMUL_MULTI_MAX];
    float *y[RL_MATMUL_MULTI_MAX];
    int64_t chunk[RL_MATMUL_MULTI_MAX];     /* rows per chunk of matrix i */
    int64_t chunk_end[RL_MATMUL_MULTI_MAX]; /* cumulative chunk counts */
    bool tiled[RL_MATMUL_MULTI_MAX];        /* fast tokens take the tiles on matrix i */
    bool packs[RL_MATMUL_MULTI_MAX];        /* ... with its rows packed 8 at a time */
    bool r8[RL_MATMUL_MULTI_MAX];           /* matrix i is resident (RL_MAT_R8) */
    int n_w;
    const float *x;
    int64_t n_cols, n_tok;
    const bool *fast; /* [n_tok] or NULL */
    uint8_t *xq;
    uint8_t *xqp[RL_MM_FORMS]; /* xq in the resident leaves' forms (rl__rtile.x_prep) */
    size_t xqp_row[RL_MM_FORMS];
    void (*xqp_fn[RL_MM_FORMS])(void *dst, const void *src, int64_t n_blocks); /* their x_prep */
    int n_forms;
    int xform[RL_MATMUL_MULTI_MAX]; /* matrix i's form, or -1: xq as quantized */
    uint8_t *xam;                   /* xq in the AMX leaves' form (rl__amx.x_prep), or NULL */
    size_t xam_sb;                  /* ... bytes of one super-block of every token */
    void (*am_prep)(void *dst, size_t dst_stride, const void *src, int64_t n_blocks);
    size_t xq_row; /* bytes of an xq row */
    const rl__ktab *kt;
    rl__quant_fn quant;
    bool padded; /* xq rows n_tok .. n_tok+RL_MM_PAD_ROWS-1 repeat row n_tok-1 */
    _Atomic int64_t next;
} rl__mm_ctx;

/* Chunk rows when n_tok < 16 are at most this (rl__chunk_rows). */
#define RL_MM_FEW_MAX_ROWS 64

/* One tile (tile: the table's vec_dot4 or vec_dot8) starting at token t,
 * of which only n_real tokens exist: computed into a local buffer, the real
 * tokens' results copied out. */
static void rl__mm_padded_tile(const rl__mm_ctx *c, int i, int64_t r0, int64_t r1, int64_t t,
                               rl__vec_dot4_fn tile, int64_t n_real) {
    const rl_mat *w = c->w[i];
    const uint8_t *wd = w->data;
    const void *xr = c->xq + (size_t)t * c->xq_row;
    float tmp[8][RL_MM_FEW_MAX_ROWS];
    RL_ASSERT(r1 - r0 <= RL_MM_FEW_MAX_ROWS);
    for (int64_t r = r0; r < r1; r++)
        tile(w->n_cols, &tmp[0][r - r0], RL_MM_FEW_MAX_ROWS, wd + (size_t)r * w->row_size, xr,
             c->xq_row);
    for (int64_t j = 0; j < n_real; j++)
        memcpy(c->y[i] + (t + j) * w->n_rows + r0, tmp[j], sizeof(float) * (size_t)(r1 - r0));
}

/* Each thread quantizes a contiguous range of tokens, the split of the
 * model's per-token steps (the norm before a matmul wrote those rows from
 * this core). */
static void rl__mm_quant_task(void *p, int ith, int nth) {
    rl__mm_ctx *c = p;
    const int64_t per = (c->n_tok + nth - 1) / nth,
                  t0 = per * ith < c->n_tok ? per * ith : c->n_tok,
                  t1 = t0 + per < c->n_tok ? t0 + per : c->n_tok;
    for (int64_t t = t0; t < t1; t++) {
        c->quant(c->x + t * c->n_cols, c->xq + (size_t)t * c->xq_row, c->n_cols);
        for (int f = 0; f < c->n_forms; f++)
            c->xqp_fn[f](c->xqp[f] + (size_t)t * c->xqp_row[f], c->xq + (size_t)t * c->xq_row,
                         c->n_cols / 32);
        if (c->am_prep)
            c->am_prep(c->xam + (size_t)t * RL_AMX_XQ_BYTES, c->xam_sb,
                       c->xq + (size_t)t * c->xq_row, c->n_cols / RL_QK_K);
    }
}

/* The end of the run of tokens from t whose fast flag equals token t's. */
static int64_t rl__mm_run_end(const rl__mm_ctx *c, int64_t t) {
    if (!c->fast) return c->n_tok;
    int64_t e = t + 1;
    while (e < c->n_tok && c->fast[e] == c->fast[t]) e++;
    return e;
}

/* The default path: rows [r0, r1) of matrix i against tokens [t, t1). */
static void rl__mm_rows(const rl__mm_ctx *c, int i, int64_t r0, int64_t r1, int64_t t, int64_t t1) {
    const rl_mat *w = c->w[i];
    const uint8_t *wd = w->data;
    const rl__vec_dot_fn dot = c->kt->vec_dot[w->type];
    const rl__vec_dot4_fn dot4 = c->kt->vec_dot4[w->type];
    const rl__vec_dot8_fn dot8 = c->kt->vec_dot8[w->type];
    if (dot8) {
        for (; t + 8 <= t1; t += 8) {
            const void *xr = c->xq + (size_t)t * c->xq_row;
            float *yr = c->y[i] + t * w->n_rows;
            for (int64_t r = r0; r < r1; r++)
                dot8(w->n_cols, &yr[r], (size_t)w->n_rows, wd + (size_t)r * w->row_size, xr,
                     c->xq_row);
        }
    }
    /* 6-7 left: one padded 8-tile (the rows past t1 exist: later tokens or
     * the scratch's padding) */
    if (dot8 && c->padded && t1 - t >= 6) {
        rl__mm_padded_tile(c, i, r0, r1, t, dot8, t1 - t);
        t = t1;
    }
    if (dot4) {
        for (; t + 4 <= t1; t += 4) {
            const void *xr = c->xq + (size_t)t * c->xq_row;
            float *yr = c->y[i] + t * w->n_rows;
            for (int64_t r = r0; r < r1; r++)
                dot4(w->n_cols, &yr[r], (size_t)w->n_rows, wd + (size_t)r * w->row_size, xr,
                     c->xq_row);
        }
    }
    if (dot4 && c->padded && t1 - t == 3) { /* 3 left: one padded 4-tile */
        rl__mm_padded_tile(c, i, r0, r1, t, dot4, 3);
        t = t1;
    }
    const rl__vec_dot2r_fn dot2r = c->kt->vec_dot2r[w->type];
    for (; t < t1; t++) {
        const void *xr = c->xq + (size_t)t * c->xq_row;
        float *yr = c->y[i] + t * w->n_rows;
        int64_t r = r0;
        if (dot2r)
            for (; r + 2 <= r1; r += 2)
                dot2r(w->n_cols, &yr[r], wd + (size_t)r * w->row_size, w->row_size, xr);
        for (; r < r1; r++) dot(w->n_cols, &yr[r], wd + (size_t)r * w->row_size, xr);
    }
}

/* The tiles' reduction: rows [r0, r1) of matrix i against the fast run of
 * tokens [t0, t1), RL_TILE8_T at a time: from the 8 rows packed in
 * g_tile_buf (packed: r1 = r0 + 8; r1 = r0 + 16: two packed groups, run
 * by the pair leaf RL_TILE16_T at a time) or read in place. */
static void rl__mm_tile_rows(const rl__mm_ctx *c, int i, int64_t r0, int64_t r1, int64_t t0,
                             int64_t t1, bool packed) {
    const rl_mat *w = c->w[i];
    const rl__tile8 *tl = &c->kt->tile8[w->type];
    if (packed && r1 - r0 == 16) {
        for (int64_t t = t0; t < t1; t += RL_TILE16_T) {
            int nx = t1 - t < RL_TILE16_T ? (int)(t1 - t) : RL_TILE16_T;
            tl->dot16(w->n_cols, c->y[i] + t * w->n_rows + r0, (size_t)w->n_rows, g_tile_buf,
                      c->xq + (size_t)t * c->xq_row, c->xq_row, nx, NULL);
        }
        return;
    }
    for (int64_t t = t0; t < t1; t += RL_TILE8_T) {
        int nx = t1 - t < RL_TILE8_T ? (int)(t1 - t) : RL_TILE8_T;
        const void *xr = c->xq + (size_t)t * c->xq_row;
        float *yr = c->y[i] + t * w->n_rows;
        if (packed) {
            tl->dot(w->n_cols, yr + r0, (size_t)w->n_rows, g_tile_buf, xr, c->xq_row, nx);
            continue;
        }
        for (int64_t r = r0; r < r1; r++)
            tl->dot_row(w->n_cols, yr + r, (size_t)w->n_rows,
                        (const uint8_t *)w->data + (size_t)r * w->row_size, xr, c->xq_row, nx);
    }
}

/* A resident matrix: its groups of 8 rows in [r0, r1) against every token,
 * RL_TILE8_T at a time (the group stays in L1 while the tokens stream). */
/* With RL_MATMUL_FAST_MIN_TOK or more tokens a group is first converted to
 * the packed tile's layout (rl__rtile.to_tile) in the thread's buffer, so
 * the tokens do not each pay the resident layout's unpacking; the packed
 * tile's reduction is the same bits (test_kernels_tile.c).  With packed
 * pair leaves from RL_MM_PAIR_PACK_MIN tokens (Qwen2.5-1.5B, 32 sequences
 * decoding: ~8% faster converted on an AVX-512 Xeon, 16 ~15% slower; on
 * the AVX2 table, Zen 3, 1.08x). */
#ifndef RL_MM_PAIR_PACK_MIN
#define RL_MM_PAIR_PACK_MIN 32
#endif
static bool rl__mm_r8_packs(const rl__mm_ctx *c, const rl_mat *w) {
    const rl__tile8 *tl = &c->kt->tile8[w->type];
    const rl__rtile *rt = &c->kt->rtile[w->type];
    const int64_t min = rt->pack_min ? rt->pack_min
                        : tl->dot16  ? RL_MM_PAIR_PACK_MIN
                                     : RL_MATMUL_FAST_MIN_TOK;
    return c->n_tok >= min && tl->dot && rt->to_tile &&
           (size_t)w->n_cols * tl->block_size / RL_QK_K <= RL_TILE8_BUF;
}

/* The packed pair leaf a resident matrix's groups are converted for
 * (rl__mm_r8_packs), or NULL: they are not, or not in pairs. */
static rl__tile16p_fn rl__mm_r8_pdot16(const rl__mm_ctx *c, const rl_mat *w) {
    const rl__rtile *rt = &c->kt->rtile[w->type];
    if (!rl__mm_r8_packs(c, w)) return NULL;
    return rt->x_prep && rt->pdot16 ? rt->pdot16 : c->kt->tile8[w->type].dot16;
}

/* The resident pair leaf (rl__rtile.dot16) runs an unpacked step. */
static bool rl__mm_r8_pairs(const rl__ktab *kt, const rl_mat *w, int64_t n_tok) {
    const rl__rtile *rt = &kt->rtile[w->type];
    return rt->dot16 != NULL && n_tok >= rt->pair_min;
}

/* Resident pairs converted a block of columns at a time where the table's
 * pair leaf resumes from its sums (rl__tile8.dot16a): each block, about
 * RL_MM_PAIR_BLOCK bytes converted, is converted just before every token
 * runs on it, so the conversion writes L1 and the tokens' passes read it
 * there, where a whole row's pair (Qwen2.5-1.5B ffn_down, 8960 columns:
 * 175 KiB of q4_K) is written to L2 and streamed back by every pass.
 * Steps of up to RL_MM_PAIR_BLOCK_TOK tokens (batched decode): Qwen2.5-1.5B
 * pp512 at 2 threads read 0.95x in blocks in one run and 1.02x in another
 * (Zen 3), so prompts keep converting whole rows. */
#ifndef RL_MM_PAIR_BLOCK
#define RL_MM_PAIR_BLOCK 16384
#endif
#ifndef RL_MM_PAIR_BLOCK_TOK
#define RL_MM_PAIR_BLOCK_TOK 64
#endif
static void rl__mm_pair_blocks(const rl__mm_ctx *c, int i, int64_t r, const uint8_t *g, size_t gb,
                               const uint8_t *xb, size_t xs, rl__pf *pf) {
    const rl_mat *w = c->w[i];
    const rl__tile8 *tl = &c->kt->tile8[w->type];
    const int64_t nb = w->n_cols / RL_QK_K;
    const int64_t bb = RL_MM_PAIR_BLOCK / (2 * (int64_t)tl->block_size);
    const int64_t cb = bb > 0 ? bb : 1;                        /* super-blocks a block */
    const size_t gsb = gb / (size_t)nb, xsb = xs / (size_t)nb; /* bytes a super-block */
    for (int64_t b0 = 0; b0 < nb; b0 += cb) {
        const int64_t n = nb - b0 < cb ? nb - b0 : cb;
        const uint8_t *ga = g + (size_t)b0 * gsb;
        c->kt->rtile[w->type].to_pair(g_tile_buf, ga, ga + gb, n * RL_QK_K);
        const rl__tile16p_fn leaf = b0 ? tl->dot16a : tl->dot16;
        for (int64_t t = 0; t < c->n_tok; t += RL_TILE16_T) {
            int nx = c->n_tok - t < RL_TILE16_T ? (int)(c->n_tok - t) : RL_TILE16_T;
            leaf(n * RL_QK_K, c->y[i] + t * w->n_rows + r, (size_t)w->n_rows, g_tile_buf,
                 xb + (size_t)t * xs + (size_t)b0 * xsb, xs, nx, pf);
        }
    }
}

/* The unconverted resident leaves (pair or 8-row) on more tokens than this
 * run them in blocks of this many: every group of the chunk on one block
 * before the next, so a block's activation rows stay in L2 while the
 * chunk's groups pass, where one group at a time streamed all the rows (a
 * prompt of 512 on a 1536-column matrix: 983 KiB) back from L3 for every
 * group.  SmolLM2-135M (q4_1), Zen 3, 2 threads, 5 interleaved rounds:
 * pp512 1.17x (blocks of 32: 1.12x, 128: 1.08x), pp128 1.14x; one thread
 * 1.06x (docs/PERFORMANCE.md, the seventeenth stop). */
#ifndef RL_MM_R8_TOK_BLOCK
#define RL_MM_R8_TOK_BLOCK 64
#endif
static void rl__mm_r8_rows(const rl__mm_ctx *c, int i, int64_t r0, int64_t r1) {
    const rl_mat *w = c->w[i];
    const rl__rtile *rt = &c->kt->rtile[w->type];
    const bool packs = rl__mm_r8_packs(c, w);
    /* the packed tiles take the activations as quantized, but for a pair
     * leaf on the form (rt->pdot16) */
    const bool prep = rt->x_prep && (!packs || rt->pdot16);
    const rl__tile16p_fn pdot16 = rl__mm_r8_pdot16(c, w);
    const bool pairs = packs ? pdot16 != NULL : rl__mm_r8_pairs(c->kt, w, c->n_tok);
    const size_t gb = 8 * w->row_size;
    RL_ASSERT(!prep || c->xform[i] >= 0);
    const uint8_t *xb = prep ? c->xqp[c->xform[i]] : c->xq;
    const size_t xs = prep ? c->xqp_row[c->xform[i]] : c->xq_row;
    /* the AMX leaf on the first multiple of 16 tokens (its bits are the
     * pair leaf's), the pair leaves on the rest */
    const rl__amx *am = &c->kt->amx[w->type];
    const int64_t t_amx = am->dot16 && c->xam ? c->n_tok & ~(int64_t)15 : 0;
    if (t_amx && pairs && r1 - r0 >= 16)
        am->dot16(w->n_cols, c->y[i] + r0, (size_t)w->n_rows,
                  (const uint8_t *)w->data + (size_t)r0 * w->row_size, gb, (int)((r1 - r0) / 16),
                  c->xam, c->xam_sb, t_amx, g_tile_buf, sizeof g_tile_buf);
    /* (converted and not on a form: pdot16 is tile8's dot16) */
    const bool blocks = packs && !prep && !t_amx && c->n_tok <= RL_MM_PAIR_BLOCK_TOK &&
                        rt->to_pair && c->kt->tile8[w->type].dot16a;
    /* all tokens on a group before the next, or (unconverted leaves on many
     * tokens) RL_MM_R8_TOK_BLOCK tokens on every group before the next
     * block; with the AMX leaf, one block from t_amx */
    const int64_t tb_n =
        !packs && !t_amx && c->n_tok > RL_MM_R8_TOK_BLOCK ? RL_MM_R8_TOK_BLOCK : c->n_tok;
    for (int64_t tb = 0; tb < c->n_tok; tb += tb_n) {
        const int64_t te = c->n_tok - tb < tb_n ? c->n_tok : tb + tb_n;
        int64_t r = r0;
        /* pairs of groups on the pair leaves (the same bits as one at a time) */
        for (; pairs && r + 16 <= r1; r += 16) {
            const uint8_t *g = (const uint8_t *)w->data + (size_t)r * w->row_size;
            if (t_amx == c->n_tok) continue;
            /* the leaf prefetches the chunk's next pair as it computes */
            rl__pf pf = {g + 2 * gb, r + 32 <= r1 ? g + 4 * gb : g,
                         rl__pf_tok_bytes(2 * gb, w->n_cols, c->n_tok)};
            if (blocks) {
                rl__mm_pair_blocks(c, i, r, g, gb, xb, xs, &pf);
                continue;
            }
            if (packs) rl__mm_pair_pack(c->kt, w, g, g + gb, true);
            for (int64_t t = tb + t_amx; t < te; t += RL_TILE16_T) {
                int nx = te - t < RL_TILE16_T ? (int)(te - t) : RL_TILE16_T;
                float *y = c->y[i] + t * w->n_rows + r;
                const void *xr = xb + (size_t)t * xs;
                if (packs)
                    pdot16(w->n_cols, y, (size_t)w->n_rows, g_tile_buf, xr, xs, nx, &pf);
                else
                    rt->dot16(w->n_cols, y, (size_t)w->n_rows, g, gb, xr, xs, nx);
            }
        }
        for (; r < r1; r += 8) {
            const uint8_t *g = (const uint8_t *)w->data + (size_t)r * w->row_size;
            /* a view of a resident matrix's first rows (a restricted head)
             * can end inside a group: the whole group into tmp, its rows
             * copied */
            const int64_t nr = r1 - r < 8 ? r1 - r : 8;
            float tmp[RL_TILE8_T][8];
            if (packs) rt->to_tile(g_tile_buf, g, w->n_cols);
            for (int64_t t = tb; t < te; t += RL_TILE8_T) {
                int nx = te - t < RL_TILE8_T ? (int)(te - t) : RL_TILE8_T;
                float *y = c->y[i] + t * w->n_rows + r;
                float *o = nr == 8 ? y : &tmp[0][0];
                const size_t os = nr == 8 ? (size_t)w->n_rows : 8;
                if (packs) /* the packed 8-row leaf: the rows as quantized */
                    c->kt->tile8[w->type].dot(w->n_cols, o, os, g_tile_buf,
                                              c->xq + (size_t)t * c->xq_row, c->xq_row, nx);
                else
                    rt->dot(w->n_cols, o, os, g, xb + (size_t)t * xs, xs, nx);
                for (int k = 0; nr < 8 && k < nx; k++)
                    memcpy(y + (size_t)k * w->n_rows, tmp[k], sizeof(float) * (size_t)nr);
            }
        }
    }
}

static void rl__mm_task(void *p, int ith, int nth) {
    (void)ith;
    (void)nth;
    rl__mm_ctx *c = p;
    for (;;) {
        int64_t ch = atomic_fetch_add_explicit(&c->next, 1, memory_order_relaxed);
        if (ch >= c->chunk_end[c->n_w - 1]) break;
        int i = 0;
        while (ch >= c->chunk_end[i]) i++;
        const rl_mat *w = c->w[i];
        int64_t r0 = (ch - (i ? c->chunk_end[i - 1] : 0)) * c->chunk[i], r1 = r0 + c->chunk[i];
        if (r1 > w->n_rows) r1 = w->n_rows;
        if (c->r8[i]) {
            rl__mm_r8_rows(c, i, r0, r1);
            continue;
        }
        if (!c->tiled[i]) {
            rl__mm_rows(c, i, r0, r1, 0, c->n_tok);
            continue;
        }
        /* runs of tokens: fast ones take the tiles, the others the default */
        int64_t r = r0;
        if (c->packs[i]) {
            const uint8_t *wd = w->data;
            const rl__tile8 *tl = &c->kt->tile8[w->type];
            for (int n; r + 8 <= r1; r += n) {
                const uint8_t *g = wd + (size_t)r * w->row_size;
                n = tl->dot16 && r + 16 <= r1 ? 16 : 8; /* a pair of groups, or one */
                if (n == 16)
                    rl__mm_pair_pack(c->kt, w, g, g + 8 * w->row_size, false);
                else
                    tl->pack(g_tile_buf, g, w->row_size, w->n_cols);
                for (int64_t t = 0, e; t < c->n_tok; t = e) {
                    e = rl__mm_run_end(c, t);
                    if (c->fast[t]) rl__mm_tile_rows(c, i, r, r + n, t, e, true);
                }
            }
        }
        for (int64_t t = 0, e; t < c->n_tok; t = e) {
            e = rl__mm_run_end(c, t);
            if (c->fast[t])
                rl__mm_tile_rows(c, i, r, r1, t, e, false);
            else
                rl__mm_rows(c, i, r0, r1, t, e);
        }
    }
}

/* Rows per chunk of w.  Few tokens (decode, short verification batches):
 * about 8 chunks per thread, at most 64 rows and 64 KiB of weights, so the
 * last chunk handed out -- the imbalance at the closing barrier -- is a few
 * microseconds of DRAM time even for the 5 KiB rows of a wide ffn_down.
 * Many tokens (prefill): every chunk streams all n_tok activation rows past
 * its weight rows, so chunks are as large as balance allows: with one
 * thread RL_MM_PREFILL_L2 bytes of weights (half this core class's L2, so
 * they stay cached while the tokens stream past), with more about
 * RL_MM_PREFILL_CPT chunks per thread under the same cap.  Qwen2.5-1.5B
 * pp512, 1 thread: 384-row chunks gave +7% cpu t/s over the former 64. */
#ifndef RL_MM_PREFILL_CPT
#define RL_MM_PREFILL_CPT 4
#endif
#ifndef RL_MM_PREFILL_L2
#define RL_MM_PREFILL_L2 (512 * 1024)
#endif
#define RL_MM_DECODE_BYTES (64 * 1024)
/* Resident groups converted to packed pairs (converts) finish each pair,
 * every token through it, before the next, so the cap above is not what
 * keeps them cached; a chunk's first pair is the one its leaf could not
 * prefetch (rl__pf), so such chunks take at least RL_MM_PAIR_CHUNK rows
 * (Qwen2.5-1.5B's ffn_down: 16 pairs where the cap gave 6.5, the half
 * group left to the 8-row leaf). */
#ifndef RL_MM_PAIR_CHUNK
#define RL_MM_PAIR_CHUNK 256
#endif
static int64_t rl__chunk_rows(const rl_mat *w, int64_t n_tok, int nth, bool converts) {
    int64_t chunk, max_rows;
    if (n_tok < 16) {
        chunk = w->n_rows / ((int64_t)nth * 8);
        max_rows = (int64_t)(RL_MM_DECODE_BYTES / w->row_size);
        if (max_rows > 64) max_rows = 64;
    } else {
        max_rows = (int64_t)(RL_MM_PREFILL_L2 / w->row_size);
        if (converts && max_rows < RL_MM_PAIR_CHUNK) max_rows = RL_MM_PAIR_CHUNK;
        chunk = nth == 1 ? max_rows : w->n_rows / ((int64_t)nth * RL_MM_PREFILL_CPT);
    }
    if (chunk > max_rows) chunk = max_rows;
    return chunk < 1 ? 1 : chunk;
}

static void rl__matmul_multi(const rl_mat *const *ws, float *const *ys, int n_w, const float *x,
                             int64_t n_tok, const bool *fast, void *scratch, rl_threadpool *tp) {
    RL_ASSERT(n_w >= 1 && n_w <= RL_MATMUL_MULTI_MAX);
    const rl__ktab *kt = rl__kernels();
    rl_type at = rl__act_type(ws[0]->type);
    for (int i = 0; i < n_w; i++) {
        RL_ASSERT(rl__act_type(ws[i]->type) != RL_TYPE_COUNT && kt->vec_dot[ws[i]->type]);
        if (rl__act_type(ws[i]->type) != at || ws[i]->n_cols != ws[0]->n_cols) {
            /* different activation packing: one call per matrix */
            for (int j = 0; j < n_w; j++)
                rl__matmul_multi(&ws[j], &ys[j], 1, x, n_tok, fast, scratch, tp);
            return;
        }
    }
    if (n_tok <= 0) return;
    int nth = rl_threadpool_n_threads(tp);
    int64_t n_fast = 0;
    for (int64_t t = 0; fast && t < n_tok; t++) n_fast += fast[t];
    rl__mm_ctx c = {
        .n_w = n_w, .x = x, .n_cols = ws[0]->n_cols, .n_tok = n_tok, .fast = fast, .kt = kt};
    int64_t n_chunks = 0;
    for (int i = 0; i < n_w; i++) {
        c.w[i] = ws[i];
        c.y[i] = ys[i];
        c.r8[i] = ws[i]->layout == RL_MAT_R8;
        c.xform[i] = -1; /* (set below where a form is written) */
        RL_ASSERT(!c.r8[i] || kt->rtile[ws[i]->type].dot);
        c.tiled[i] = !c.r8[i] && n_fast > 0 && rl__mm_tiled(kt, ws[i]);
        c.packs[i] = !c.r8[i] && rl__mm_packs(kt, ws[i], n_fast);
        const bool converts = c.r8[i] && rl__mm_r8_pdot16(&c, ws[i]);
        int64_t chunk = rl__chunk_rows(ws[i], n_tok, nth, converts);
        if (c.packs[i] || c.r8[i]) chunk = (chunk + 7) & ~(int64_t)7;
        /* pair leaves: whole pairs of groups per chunk */
        if ((c.packs[i] && kt->tile8[ws[i]->type].dot16) || converts ||
            (c.r8[i] && rl__mm_r8_pairs(kt, ws[i], n_tok)))
            chunk = (chunk + 15) & ~(int64_t)15;
        c.chunk[i] = chunk;
        n_chunks += ws[i]->n_rows > 0 ? (ws[i]->n_rows + chunk - 1) / chunk : 0;
        c.chunk_end[i] = n_chunks;
    }
    if (n_chunks == 0) return;
    if (at == RL_TYPE_F32) {
        c.xq = (uint8_t *)(uintptr_t)x;
        c.xq_row = (size_t)c.n_cols * sizeof(float);
    } else {
        RL_ASSERT(scratch);
        c.xq = scratch;
        c.xq_row = rl__act_row_size(ws[0]);
        RL_ASSERT(c.xq_row > 0);
        c.quant = at == RL_TYPE_Q8_0   ? kt->quant_q8_0
                  : at == RL_TYPE_Q8_1 ? kt->quant_q8_1
                                       : kt->quant_q8_K;
        /* the AMX leaves' form of the rows, when a resident matrix takes
         * them (after the quantized rows and their padding) */
        for (int i = 0; i < n_w && n_tok >= RL_AMX_MIN_TOK; i++) {
            const rl__amx *am = &kt->amx[ws[i]->type];
            if (c.r8[i] && am->dot16 && kt->rtile[ws[i]->type].dot16) {
                const uintptr_t end =
                    (uintptr_t)(c.xq + (size_t)(n_tok + RL_MM_PAD_ROWS) * c.xq_row);
                c.xam = c.xq + (((end + 63) & ~(uintptr_t)63) - (uintptr_t)c.xq);
                c.xam_sb = (size_t)n_tok * RL_AMX_XQ_BYTES;
                c.am_prep = am->x_prep;
                break;
            }
        }
        /* a padded tile can follow (6-7 after 8-tiles, 3 after 4-tiles);
         * the scratch holds RL_MM_PAD_ROWS spare rows */
        c.padded = n_tok > 1 && n_tok < 16;
        /* each resident matrix's form (its type's leaves; a matrix
         * converted to the packed tile takes xq as it is), one per x_prep
         * (matrices of one activation type share it where their forms are
         * the same), after the quantized rows and their padding; written
         * token by token as the rows are quantized */
        const int64_t nb = c.n_cols / 32;
        uintptr_t end = (uintptr_t)(c.xq + (size_t)(n_tok + RL_MM_PAD_ROWS) * c.xq_row);
        for (int i = 0; i < n_w; i++) {
            const rl__rtile *rt = &kt->rtile[ws[i]->type];
            if (!(c.r8[i] && rt->x_prep && (rt->pdot16 || !rl__mm_r8_packs(&c, ws[i])))) continue;
            int f = 0;
            while (f < c.n_forms && c.xqp_fn[f] != rt->x_prep) f++;
            if (f == c.n_forms) {
                RL_ASSERT(c.n_forms < RL_MM_FORMS && rt->x_block <= RL_X_PREP_MAX_BLOCK);
                c.xqp_fn[c.n_forms++] = rt->x_prep;
                c.xqp[f] = c.xq + (((end + 63) & ~(uintptr_t)63) - (uintptr_t)c.xq);
                c.xqp_row[f] = (size_t)nb * rt->x_block;
                end = (uintptr_t)(c.xqp[f] + (size_t)(n_tok + RL_MM_PAD_ROWS) * c.xqp_row[f]);
                /* rows of whole blocks back to back in both */
                RL_ASSERT(c.xq_row == (size_t)nb * rl_type_row_size(at, 32));
            }
            c.xform[i] = f;
        }
        if (n_tok == 1 || nth == 1)
            rl__mm_quant_task(&c, 0, 1);
        else
            rl_threadpool_run(tp, rl__mm_quant_task, &c);
        for (int j = 0; c.padded && j < RL_MM_PAD_ROWS; j++) {
            const int64_t t = n_tok + j;
            memcpy(c.xq + (size_t)t * c.xq_row, c.xq + (size_t)(n_tok - 1) * c.xq_row, c.xq_row);
            for (int f = 0; f < c.n_forms; f++)
                c.xqp_fn[f](c.xqp[f] + (size_t)t * c.xqp_row[f], c.xq + (size_t)t * c.xq_row, nb);
        }
    }
    atomic_init(&c.next, 0);
    if (nth == 1)
        rl__mm_task(&c, 0, 1);
    else
        rl_threadpool_run(tp, rl__mm_task, &c);
}

static atomic_bool g_mm_stats_on;
static _Atomic uint64_t g_mm_ns, g_mm_madds, g_mm_calls;

void rl_matmul_stats_enable(bool on) {
    atomic_store(&g_mm_stats_on, on);
}

rl_matmul_stats rl_matmul_stats_take(void) {
    rl_matmul_stats s = {.seconds = (double)atomic_exchange(&g_mm_ns, 0) * 1e-9,
                         .madds = (double)atomic_exchange(&g_mm_madds, 0),
                         .calls = (int64_t)atomic_exchange(&g_mm_calls, 0)};
    return s;
}

void rl_matmul_multi_ex(const rl_mat *const *ws, float *const *ys, int n_w, const float *x,
                        int64_t n_tok, const bool *fast, void *scratch, rl_threadpool *tp) {
    if (!atomic_load_explicit(&g_mm_stats_on, memory_order_relaxed)) {
        rl__matmul_multi(ws, ys, n_w, x, n_tok, fast, scratch, tp);
        return;
    }
    const double t0 = rl_time_s();
    rl__matmul_multi(ws, ys, n_w, x, n_tok, fast, scratch, tp);
    const double dt = rl_time_s() - t0;
    uint64_t madds = 0;
    for (int i = 0; i < n_w && n_tok > 0; i++)
        madds += (uint64_t)ws[i]->n_rows * (uint64_t)ws[i]->n_cols * (uint64_t)n_tok;
    atomic_fetch_add(&g_mm_ns, (uint64_t)(dt * 1e9));
    atomic_fetch_add(&g_mm_madds, madds);
    atomic_fetch_add(&g_mm_calls, 1);
}

void rl_matmul_multi(const rl_mat *const *ws, float *const *ys, int n_w, const float *x,
                     int64_t n_tok, void *scratch, rl_threadpool *tp) {
    rl_matmul_multi_ex(ws, ys, n_w, x, n_tok, NULL, scratch, tp);
}

void rl_matmul_ex(const rl_mat *w, const float *x, float *y, int64_t n_tok, const bool *fast,
                  void *scratch, rl_threadpool *tp) {
    rl_matmul_multi_ex(&w, &y, 1, x, n_tok, fast, scratch, tp);
}

void rl_matmul(const rl_mat *w, const float *x, float *y, int64_t n_tok, void *scratch,
               rl_threadpool *tp) {
    rl_matmul_multi_ex(&w, &y, 1, x, n_tok, NULL, scratch, tp);
}
