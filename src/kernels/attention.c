/* rl_attention driver: causal (optionally sliding-window, soft-capped)
 * attention of one sequence's query tokens over its paged K/V.
 *
 * Work items are (token, head) pairs handed out by an atomic counter.  Each
 * item runs an online softmax over positions [lo, pos[t]] in tiles of
 * RL_ATT_TILE positions aligned to absolute positions (tile k covers
 * [k*TILE, k*TILE+TILE-1]); per tile: scores, tile max, one rescale of the
 * accumulator if the running max grew, then V accumulation in position
 * order.  The arithmetic for an item depends only on q, pos[t], the window
 * and the stored K/V, so results are invariant to n_tok and thread count.
 */
#include <math.h>
#include <stdatomic.h>

#include "kernels/kernels-impl.h"

#define RL_ATT_TILE 32
#define RL_ATT_MAX_HD 512

typedef struct rl__att_ctx {
    const rl_attn_args *a;
    const rl__ktab *kt;
    size_t k_row, v_row;
    _Atomic int64_t next;
} rl__att_ctx;

static inline const void *rl__kv_row(const void *base, size_t block_bytes, size_t row_bytes,
                                     const rl_kv_layer *kv, const int32_t *bt, int kvh,
                                     int32_t p) {
    int32_t b = bt[p / kv->block_size], s = p % kv->block_size;
    return (const uint8_t *)base + (size_t)b * block_bytes +
           ((size_t)kvh * kv->block_size + s) * row_bytes;
}

static void rl__att_task(void *p, int ith, int nth) {
    (void)ith;
    (void)nth;
    rl__att_ctx *c = p;
    const rl_attn_args *a = c->a;
    const rl_kv_layer *kv = a->kv;
    const rl__ktab *kt = c->kt;
    const int hd = kv->head_dim, group = a->n_head / kv->n_kv_head;
    const bool k16 = kv->k_type == RL_TYPE_F16, v16 = kv->v_type == RL_TYPE_F16;
    const int64_t n_items = (int64_t)a->n_tok * a->n_head;
    float acc[RL_ATT_MAX_HD], sc[RL_ATT_TILE];
    for (;;) {
        int64_t it = atomic_fetch_add_explicit(&c->next, 1, memory_order_relaxed);
        if (it >= n_items) break;
        int t = (int)(it / a->n_head), h = (int)(it % a->n_head), kvh = h / group;
        const float *q = a->q + ((size_t)t * a->n_head + h) * hd;
        float *out = a->out + ((size_t)t * a->n_head + h) * hd;
        int32_t hi = a->pos[t];
        int32_t lo = a->window > 0 ? hi - a->window + 1 : 0;
        if (lo < 0) lo = 0;
        for (int i = 0; i < hd; i++) acc[i] = 0.0f;
        float m = -INFINITY, sum = 0.0f;
        for (int32_t t0 = lo; t0 <= hi;) {
            int32_t t1 = (t0 / RL_ATT_TILE + 1) * RL_ATT_TILE; /* exclusive tile end */
            if (t1 > hi + 1) t1 = hi + 1;
            float mt = -INFINITY;
            for (int32_t pp = t0; pp < t1; pp++) {
                const void *kr = rl__kv_row(kv->k_base, kv->k_block_bytes, c->k_row, kv,
                                            a->block_table, kvh, pp);
                float s = (k16 ? kt->dot_f16(q, kr, hd) : kt->dot_f32(q, kr, hd)) * a->scale;
                if (a->softcap > 0.0f) s = a->softcap * tanhf(s / a->softcap);
                sc[pp - t0] = s;
                if (s > mt) mt = s;
            }
            if (mt > m) {
                if (m != -INFINITY) {
                    float r = expf(m - mt);
                    kt->scale(acc, r, hd);
                    sum *= r;
                }
                m = mt;
            }
            for (int32_t pp = t0; pp < t1; pp++) {
                float wgt = expf(sc[pp - t0] - m);
                sum += wgt;
                const void *vr = rl__kv_row(kv->v_base, kv->v_block_bytes, c->v_row, kv,
                                            a->block_table, kvh, pp);
                if (v16)
                    kt->axpy_f16(acc, vr, wgt, hd);
                else
                    kt->axpy_f32(acc, vr, wgt, hd);
            }
            t0 = t1;
        }
        float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
        for (int i = 0; i < hd; i++) out[i] = acc[i] * inv;
    }
}

void rl_attention(const rl_attn_args *a, rl_threadpool *tp) {
    const rl_kv_layer *kv = a->kv;
    RL_ASSERT(kv->head_dim > 0 && kv->head_dim <= RL_ATT_MAX_HD);
    RL_ASSERT(kv->n_kv_head > 0 && a->n_head % kv->n_kv_head == 0);
    RL_ASSERT((kv->k_type == RL_TYPE_F16 || kv->k_type == RL_TYPE_F32) &&
              (kv->v_type == RL_TYPE_F16 || kv->v_type == RL_TYPE_F32));
    if (a->n_tok <= 0) return;
    rl__att_ctx c = {.a = a, .kt = rl__kernels()};
    c.k_row = rl_type_row_size(kv->k_type, kv->head_dim);
    c.v_row = rl_type_row_size(kv->v_type, kv->head_dim);
    atomic_init(&c.next, 0);
    if (rl_threadpool_n_threads(tp) == 1)
        rl__att_task(&c, 0, 1);
    else
        rl_threadpool_run(tp, rl__att_task, &c);
}
