/* rl_matmul driver: y[n_tok][n_rows] = x[n_tok][n_cols] · wᵀ.
 *
 * Phase 1 quantizes the n_tok activation rows into the activation type
 * paired with w->type (q8_0 / q8_1 / q8_K) in the caller's scratch, tokens
 * split over threads.  Phase 2 hands out chunks of weight rows through an
 * atomic counter; a thread computes every token against its chunk (the
 * weight rows stay in cache while the tokens stream past).
 *
 * Groups of 4 tokens use the table's vec_dot4 when present (weights are
 * unpacked once for 4 tokens); it is bit-identical to vec_dot per token.
 *
 * Batch invariance: y[t][r] is exactly vec_dot(w row r, xq row t), and
 * vec_dot's reduction order depends only on n_cols, so the result does not
 * depend on n_tok, the chunking or the thread count.
 */
#include <stdatomic.h>

#include "kernels/kernels-impl.h"

bool rl_matmul_supports(rl_type t) {
    return rl__act_type(t) != RL_TYPE_COUNT && rl__kernels()->vec_dot[t] != NULL;
}

static size_t rl__act_row_size(const rl_mat *w) {
    rl_type at = rl__act_type(w->type);
    if (at == RL_TYPE_F32) return 0; /* x is used directly */
    return rl_type_row_size(at, w->n_cols);
}

size_t rl_matmul_scratch_size(const rl_mat *w, int64_t n_tok) {
    size_t rs = rl__act_row_size(w), out;
    if (!rl_mul_size(rs, (size_t)n_tok, &out)) return SIZE_MAX;
    return out;
}

typedef struct rl__mm_ctx {
    const rl_mat *w;
    const float *x;
    float *y;
    int64_t n_tok;
    uint8_t *xq;
    size_t xq_row;
    rl__vec_dot_fn dot;
    rl__vec_dot4_fn dot4; /* may be NULL */
    rl__quant_fn quant;
    int64_t chunk, n_chunks;
    _Atomic int64_t next;
} rl__mm_ctx;

static void rl__mm_quant_task(void *p, int ith, int nth) {
    rl__mm_ctx *c = p;
    for (int64_t t = ith; t < c->n_tok; t += nth)
        c->quant(c->x + t * c->w->n_cols, c->xq + (size_t)t * c->xq_row, c->w->n_cols);
}

static void rl__mm_task(void *p, int ith, int nth) {
    (void)ith;
    (void)nth;
    rl__mm_ctx *c = p;
    const rl_mat *w = c->w;
    const uint8_t *wd = w->data;
    for (;;) {
        int64_t ch = atomic_fetch_add_explicit(&c->next, 1, memory_order_relaxed);
        if (ch >= c->n_chunks) break;
        int64_t r0 = ch * c->chunk, r1 = r0 + c->chunk;
        if (r1 > w->n_rows) r1 = w->n_rows;
        int64_t t = 0;
        if (c->dot4) {
            for (; t + 4 <= c->n_tok; t += 4) {
                const void *xr = c->xq + (size_t)t * c->xq_row;
                float *yr = c->y + t * w->n_rows;
                for (int64_t r = r0; r < r1; r++)
                    c->dot4(w->n_cols, &yr[r], (size_t)w->n_rows, wd + (size_t)r * w->row_size, xr,
                            c->xq_row);
            }
        }
        for (; t < c->n_tok; t++) {
            const void *xr = c->xq + (size_t)t * c->xq_row;
            float *yr = c->y + t * w->n_rows;
            for (int64_t r = r0; r < r1; r++) c->dot(w->n_cols, &yr[r], wd + (size_t)r * w->row_size, xr);
        }
    }
}

void rl_matmul(const rl_mat *w, const float *x, float *y, int64_t n_tok, void *scratch,
               rl_threadpool *tp) {
    const rl__ktab *kt = rl__kernels();
    rl_type at = rl__act_type(w->type);
    RL_ASSERT(at != RL_TYPE_COUNT && kt->vec_dot[w->type]);
    if (n_tok <= 0 || w->n_rows <= 0) return;
    int nth = rl_threadpool_n_threads(tp);
    rl__mm_ctx c = {.w = w, .x = x, .y = y, .n_tok = n_tok, .dot = kt->vec_dot[w->type],
                     .dot4 = kt->vec_dot4[w->type]};
    if (at == RL_TYPE_F32) {
        c.xq = (uint8_t *)(uintptr_t)x;
        c.xq_row = (size_t)w->n_cols * sizeof(float);
    } else {
        RL_ASSERT(scratch);
        c.xq = scratch;
        c.xq_row = rl__act_row_size(w);
        RL_ASSERT(c.xq_row > 0);
        c.quant = at == RL_TYPE_Q8_0 ? kt->quant_q8_0 : at == RL_TYPE_Q8_1 ? kt->quant_q8_1 : kt->quant_q8_K;
        if (n_tok == 1 || nth == 1)
            rl__mm_quant_task(&c, 0, 1);
        else
            rl_threadpool_run(tp, rl__mm_quant_task, &c);
    }
    /* About 8 chunks per thread for balance, at most 64 rows per chunk. */
    int64_t chunk = w->n_rows / ((int64_t)nth * 8);
    if (chunk < 1) chunk = 1;
    if (chunk > 64) chunk = 64;
    c.chunk = chunk;
    c.n_chunks = (w->n_rows + chunk - 1) / chunk;
    atomic_init(&c.next, 0);
    if (nth == 1)
        rl__mm_task(&c, 0, 1);
    else
        rl_threadpool_run(tp, rl__mm_task, &c);
}
