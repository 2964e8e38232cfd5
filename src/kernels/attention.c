/* rl_attention driver: causal (optionally sliding-window, soft-capped)
 * attention of one sequence's query tokens over its paged K/V, whose pages
 * may be f32, f16, q8_0, q8_64, q4_0 or iq4_nl (K and V chosen separately).
 *
 * Work items are (token, head) pairs handed out by an atomic counter.  Each
 * item runs an online softmax over positions [lo, pos[t]] in tiles of
 * RL_ATT_TILE positions aligned to absolute positions (tile k covers
 * [k*TILE, k*TILE+TILE-1]); per tile: scores, tile max, one rescale of the
 * accumulator if the running max grew, then V accumulation in position
 * order.  Within a tile the leaves (kq_rows, v_rows) run over the stretches
 * of consecutive slots of one KV block.
 *
 * Quantized pages are read in place: for q8_0/q4_0 K the query head is
 * quantized once per item to q8_0 blocks and scored with integer block dot
 * products; q8_0/q4_0 V rows are dequantized in registers while they are
 * accumulated.  No dequantized copy of the cache is ever made.
 *
 * Rotated pages (rl_kv_layer.k_rot / v_rot, resolved by rl_kv_rot_resolve;
 * by default the quantized ones): rl_kv_store wrote H k and H v.  The item's query head
 * is rotated once (H q, before its q8_0 quantization), and the finished
 * output head (acc / sum) is rotated back with the same H.
 * Shifted K pages (rl_kv_layer.k_shift, quantized K only) hold k - mu; the
 * item computes q . mu once (float, the unrotated query) and adds it to
 * each raw score before scaling, so scores are q . k again.
 *
 * The arithmetic for an item depends only on q, pos[t], the window, the
 * block size and the stored K/V, so results are invariant to n_tok and
 * thread count.
 */
#include <math.h>
#include <stdatomic.h>

#include "base/env.h"
#include "kernels/kernels-impl.h"

#define RL_ATT_TILE   32
#define RL_ATT_MAX_HD 512
#define RL_ATT_GHD    256 /* largest head size of a grouped item */
#define RL_ATT_ROWS   16  /* most query rows (tokens x heads) of a grouped item */

#include <string.h>

/* Query precision for q8_0/q4_0 K pages: "q8" (default, integer dots) or
 * "f32" (RL_KVQ_QUERY=f32: float query, codes widened in registers). */
static bool rl__kvq_float_query(void) {
    static _Atomic int v = -1; /* racing first calls compute the same value */
    int x = atomic_load_explicit(&v, memory_order_relaxed);
    if (x < 0) {
        const char *e = rl_env(RL_ENV_KVQ_QUERY);
        x = e && strcmp(e, "f32") == 0;
        atomic_store_explicit(&v, x, memory_order_relaxed);
    }
    return x == 1;
}

static _Atomic bool g_att_grouped = true;
void rl_attention_set_grouped(bool on) {
    atomic_store(&g_att_grouped, on);
}

typedef struct rl__att_ctx {
    const rl_attn_args *a; /* the runs; items numbered run after run */
    int64_t n_items;
    const rl__ktab *kt;
    size_t k_row, v_row;
    bool k_quant; /* K pages are q8_0/q4_0/iq4_nl: score with a q8_0 query */
    bool kqf;     /* K pages are quantized: score with the f32 query (kqf_rows) */
    bool k_rot;   /* K rows are stored Hadamard-rotated: rotate the query head */
    bool v_rot;   /* V rows are stored rotated: rotate the output head back */
    bool k_shift; /* K rows are stored minus kv->k_shift: add q . k_shift back */
    bool k_scale; /* K rows are stored times kv->k_scale: divide the query by it */
    int gs;       /* query heads per item: 1, or a GQA group's share (rl__att_group) */
    int tq;       /* tokens per grouped item (consecutive tokens of a run) */
    _Atomic int64_t next;
} rl__att_ctx;

/* Row of KV head kvh, slot s of block b. */
static inline const void *rl__kv_row(const void *base, size_t block_bytes, size_t row_bytes,
                                     const rl_kv_layer *kv, int32_t b, int kvh, int32_t s) {
    return (const uint8_t *)base + (size_t)b * block_bytes +
           ((size_t)kvh * kv->block_size + s) * row_bytes;
}

/* Prefetches the K and V rows of head kvh at positions [p0, p1) (the
 * next tile): a decode step's items each read their sequence's pages
 * once, from memory, in stretches of one block's slots that the hardware
 * prefetchers do not run ahead of. */
static void rl__att_prefetch(const rl__att_ctx *c, const rl_attn_args *a, int kvh, int32_t p0,
                             int32_t p1) {
    const rl_kv_layer *kv = a->kv;
    const int bs = kv->block_size;
    for (int32_t pp = p0; pp < p1;) {
        int32_t s = pp % bs, n = bs - s < p1 - pp ? bs - s : p1 - pp;
        const int32_t b = a->block_table[pp / bs];
        const char *k = rl__kv_row(kv->k_base, kv->k_block_bytes, c->k_row, kv, b, kvh, s),
                   *v = rl__kv_row(kv->v_base, kv->v_block_bytes, c->v_row, kv, b, kvh, s);
        for (size_t o = 0; o < (size_t)n * c->k_row; o += 64) __builtin_prefetch(k + o, 0, 3);
        for (size_t o = 0; o < (size_t)n * c->v_row; o += 64) __builtin_prefetch(v + o, 0, 3);
        pp += n;
    }
}

/* One tile of an item's online softmax for one head: sc[0..n) raw scores
 * in, weights e^(s - m) out (position order); the running max m and sum
 * updated, acc[0..hd) rescaled when the max grows. */
static void rl__att_softmax_tile(const rl__ktab *kt, const rl_attn_args *a, float *sc, int32_t n,
                                 float qmu, float *acc, int hd, float *m, float *sum) {
    float mt = -INFINITY;
    if (a->softcap > 0.0f) {
        for (int32_t i = 0; i < n; i++) {
            float sv = (sc[i] + qmu) * a->scale;
            sv = a->softcap * tanhf(sv / a->softcap);
            sc[i] = sv;
            if (sv > mt) mt = sv;
        }
    } else {
        mt = kt->add_scale_max(sc, n, qmu, a->scale);
    }
    if (mt > *m) {
        if (*m != -INFINITY) {
            float r = expf(*m - mt);
            kt->scale(acc, r, hd);
            *sum *= r;
        }
        *m = mt;
    }
    *sum += kt->exp_sum(sc, n, *m);
}

/* out[0..hd) = acc / sum for head h (the sink, if any, in the denominator),
 * rotated back for rotated V pages (sum_p w_p H v_p; H H = I). */
static void rl__att_finish(const rl__att_ctx *c, const rl_attn_args *a, const float *acc, float m,
                           float sum, int h, float *out) {
    const int hd = a->kv->head_dim;
    float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
    if (a->sinks) { /* the sink joins the denominator: sum e^(s-M) + e^(sink-M) */
        float sk = a->sinks[h], mx = sk > m ? sk : m, r = expf(m - mx);
        inv = r / (sum * r + expf(sk - mx));
    }
    for (int i = 0; i < hd; i++) out[i] = acc[i] * inv;
    if (c->v_rot) c->kt->wht(out, hd);
}

/* The query rows of a grouped item as the leaves take them: f32 rows of
 * hd (f32/f16 pages, and quantized pages scored with the float query),
 * or q8_0 rows of hd / 32 blocks (quantized pages, c->k_quant); and each
 * row's q . k_shift (NULL: none). */
typedef struct rl__att_q {
    const float *f;
    const rl_block_q8_0 *qq;
    const float *mu;
} rl__att_q;

/* The rows from row r on. */
static rl__att_q rl__att_q_at(rl__att_q q, int r, int hd) {
    q.f += (size_t)r * hd;
    if (q.qq) q.qq += (size_t)r * (hd / RL_QK8_0);
    if (q.mu) q.mu += r;
    return q;
}

/* Tiles of positions [t0, hi] for R query rows that share KV head kvh,
 * continuing the rows' online softmax state: row r's query in q, scores
 * sc[r], accumulator acc + r * hd, max m[r], sum sum[r].  Each tile's K
 * and V rows are read from memory once for all R rows: by the grouped
 * leaves (kq_rows_g, v_rows_g; f32 query rows) where the page type has
 * them, else by the one-head leaves row after row over the tile's rows,
 * which the first row brought into L1.  Per row the steps are the one-head
 * item's (its leaf, rl__att_softmax_tile with its q . k_shift) in the same
 * order, so every row gets the bits of a one-head item over the same
 * tiles. */
static void rl__att_rows(const rl__att_ctx *c, const rl_attn_args *a, rl__att_q q, int R, int kvh,
                         int32_t t0, int32_t hi, float *acc, float (*sc)[RL_ATT_TILE], float *m,
                         float *sum) {
    const rl_kv_layer *kv = a->kv;
    const rl__ktab *kt = c->kt;
    const int hd = kv->head_dim, bs = kv->block_size;
    /* one row (a one-head item) takes the one-head leaves */
    void (*const kq_g)(const float *, const void *, size_t, int, int, int, float *, size_t) =
        q.qq || c->kqf || R == 1 ? NULL : kt->kq_rows_g[kv->k_type];
    void (*const kqq_g)(const rl_block_q8_0 *, const void *, size_t, int, int, int, float *,
                        size_t) = q.qq && R > 1 ? kt->kqq_rows_g[kv->k_type] : NULL;
    void (*const kq1)(const void *, const void *, size_t, int, int, float *) =
        c->kqf ? kt->kqf_rows[kv->k_type] : kt->kq_rows[kv->k_type];
    void (*const v_g)(float *, const void *, size_t, const float *, size_t, int, int, int) =
        R == 1 ? NULL : kt->v_rows_g[kv->v_type];
    while (t0 <= hi) {
        int32_t t1 = (t0 / RL_ATT_TILE + 1) * RL_ATT_TILE;
        if (t1 > hi + 1) t1 = hi + 1;
        rl__att_prefetch(c, a, kvh, t1, t1 + RL_ATT_TILE < hi + 1 ? t1 + RL_ATT_TILE : hi + 1);
        for (int32_t pp = t0; pp < t1;) {
            int32_t s = pp % bs, n = bs - s < t1 - pp ? bs - s : t1 - pp;
            const void *k = rl__kv_row(kv->k_base, kv->k_block_bytes, c->k_row, kv,
                                       a->block_table[pp / bs], kvh, s);
            if (kq_g)
                kq_g(q.f, k, c->k_row, n, hd, R, &sc[0][pp - t0], RL_ATT_TILE);
            else if (kqq_g)
                kqq_g(q.qq, k, c->k_row, n, hd, R, &sc[0][pp - t0], RL_ATT_TILE);
            else
                for (int j = 0; j < R; j++) {
                    const rl__att_q qj = rl__att_q_at(q, j, hd);
                    kq1(qj.qq ? (const void *)qj.qq : (const void *)qj.f, k, c->k_row, n, hd,
                        &sc[j][pp - t0]);
                }
            pp += n;
        }
        for (int j = 0; j < R; j++)
            rl__att_softmax_tile(kt, a, sc[j], t1 - t0, q.mu ? q.mu[j] : 0.0f, acc + (size_t)j * hd,
                                 hd, &m[j], &sum[j]);
        for (int32_t pp = t0; pp < t1;) {
            int32_t s = pp % bs, n = bs - s < t1 - pp ? bs - s : t1 - pp;
            const void *v = rl__kv_row(kv->v_base, kv->v_block_bytes, c->v_row, kv,
                                       a->block_table[pp / bs], kvh, s);
            if (v_g)
                v_g(acc, v, c->v_row, &sc[0][pp - t0], RL_ATT_TILE, n, hd, R);
            else
                for (int j = 0; j < R; j++)
                    kt->v_rows[kv->v_type](acc + (size_t)j * hd, v, c->v_row, &sc[j][pp - t0], n,
                                           hd);
            pp += n;
        }
        t0 = t1;
    }
}

/* The query head q of KV head kvh as a one-head item scores it (qr, and qq
 * for quantized K pages): divided by k_scale, rotated (Hq . Hk = q . k),
 * quantized; *qmu = q . k_shift (the part of every score the pages do not
 * hold), 0 without a shift.  Returns the f32 row the leaves read. */
static const float *rl__att_query(const rl__att_ctx *c, const rl_kv_layer *kv, int kvh,
                                  const float *q, float *qr, rl_block_q8_0 *qq, float *qmu) {
    const int hd = kv->head_dim;
    *qmu = 0.0f;
    if (c->k_shift) {
        const float *mu = kv->k_shift + (size_t)kvh * hd;
        for (int i = 0; i < hd; i++) *qmu += q[i] * mu[i];
    }
    if (c->k_scale) { /* (q/D).(D k) = q.k */
        const float *d = kv->k_scale + (size_t)kvh * hd;
        for (int i = 0; i < hd; i++) qr[i] = q[i] / d[i];
        q = qr;
    }
    if (c->k_rot) { /* (Hq).(Hk) = q.k */
        if (q != qr) memcpy(qr, q, (size_t)hd * sizeof(float));
        c->kt->wht(qr, hd);
        q = qr;
    }
    if (c->k_quant) c->kt->quant_q8_0(q, qq, hd); /* once per item, reused for every key */
    return q;
}

/* One item of c->gs query heads h0.. of tokens t .. t + nt - 1 that share
 * KV head kvh.  Tokens at consecutive positions with no window (a prompt
 * chunk) share the tiles every one of them covers whole: those run once
 * for all nt * gs rows (rl__att_rows), then each token's own last tiles for
 * its gs rows.  Tiles sit at absolute positions and each row's query is
 * prepared as a one-head item's (rl__att_query), so each row sees the
 * tiles, and the operations, of a one-head item: the same bits
 * (test_attention, test_kvquant). */
static void rl__att_group(const rl__att_ctx *c, const rl_attn_args *a, int t, int nt, int h0) {
    const rl_kv_layer *kv = a->kv;
    const int hd = kv->head_dim, g = c->gs, kvh = h0 / (a->n_head / kv->n_kv_head);
    _Alignas(64) float acc[RL_ATT_ROWS * RL_ATT_GHD], qb[RL_ATT_ROWS * RL_ATT_GHD],
        sc[RL_ATT_ROWS][RL_ATT_TILE];
    rl_block_q8_0 qq[RL_ATT_ROWS * (RL_ATT_GHD / RL_QK8_0)];
    float m[RL_ATT_ROWS], sum[RL_ATT_ROWS], qmu[RL_ATT_ROWS];
    bool joint = nt > 1 && a->window <= 0;
    for (int k = 1; joint && k < nt; k++) joint = a->pos[t + k] == a->pos[t] + k;
    if (!joint) {
        for (int k = 1; k < nt; k++) rl__att_group(c, a, t + k, 1, h0);
        nt = 1;
    }
    for (int k = 0; k < nt; k++) { /* the rows: token-major, heads h0.. within */
        const float *src = a->q + ((size_t)(t + k) * a->n_head + h0) * hd;
        for (int j = 0; j < g; j++) {
            const int r = k * g + j;
            float *qr = qb + (size_t)r * hd;
            const float *q = rl__att_query(c, kv, kvh, src + (size_t)j * hd, qr,
                                           qq + (size_t)r * (hd / RL_QK8_0), &qmu[r]);
            if (q != qr) memcpy(qr, q, sizeof(float) * (size_t)hd);
        }
    }
    const rl__att_q rows = {qb, c->k_quant ? qq : NULL, c->k_shift ? qmu : NULL};
    const int R = nt * g;
    for (int i = 0; i < R * hd; i++) acc[i] = 0.0f;
    for (int j = 0; j < R; j++) m[j] = -INFINITY, sum[j] = 0.0f;
    int32_t hi0 = a->pos[t];
    int32_t lo = a->window > 0 ? hi0 - a->window + 1 : 0;
    if (lo < 0) lo = 0;
    /* the whole tiles below every token's last position, all rows at once */
    int32_t common = nt > 1 ? (hi0 + 1) / RL_ATT_TILE * RL_ATT_TILE : lo;
    if (common > lo)
        rl__att_rows(c, a, rows, R, kvh, lo, common - 1, acc, sc, m, sum);
    else
        common = lo;
    for (int k = 0; k < nt; k++) {
        const int r0 = k * g;
        rl__att_rows(c, a, rl__att_q_at(rows, r0, hd), g, kvh, common, a->pos[t + k],
                     acc + (size_t)r0 * hd, &sc[r0], &m[r0], &sum[r0]);
        for (int j = 0; j < g; j++)
            rl__att_finish(c, a, acc + (size_t)(r0 + j) * hd, m[r0 + j], sum[r0 + j], h0 + j,
                           a->out + ((size_t)(t + k) * a->n_head + h0 + j) * hd);
    }
}

static void rl__att_task(void *p, int ith, int nth) {
    (void)ith;
    (void)nth;
    rl__att_ctx *c = p;
    const rl_attn_args *a = c->a; /* this thread's current run */
    int64_t run_base = 0;         /* its first item */
    const rl_kv_layer *kv = a->kv;
    const int hd = kv->head_dim, group = a->n_head / kv->n_kv_head;
    const int64_t n_items = c->n_items;
    float acc[RL_ATT_MAX_HD], sc[1][RL_ATT_TILE], qr[RL_ATT_MAX_HD];
    rl_block_q8_0 qq[RL_ATT_MAX_HD / RL_QK8_0];
    for (;;) {
        int64_t it = atomic_fetch_add_explicit(&c->next, 1, memory_order_relaxed);
        if (it >= n_items) break;
        const int per_tok = a->n_head / c->gs; /* items per token block */
        /* items only grow per thread */
        while (it >= run_base + (int64_t)((a->n_tok + c->tq - 1) / c->tq) * per_tok) {
            run_base += (int64_t)((a->n_tok + c->tq - 1) / c->tq) * per_tok;
            a++;
        }
        int t = (int)((it - run_base) / per_tok) * c->tq,
            h = (int)((it - run_base) % per_tok) * c->gs, kvh = h / group;
        if (c->gs > 1) {
            rl__att_group(c, a, t, a->n_tok - t < c->tq ? a->n_tok - t : c->tq, h);
            continue;
        }
        /* one head: the grouped item's steps for one row */
        float qmu;
        const float *q =
            rl__att_query(c, kv, kvh, a->q + ((size_t)t * a->n_head + h) * hd, qr, qq, &qmu);
        const rl__att_q row = {q, c->k_quant ? qq : NULL, c->k_shift ? &qmu : NULL};
        int32_t hi = a->pos[t];
        int32_t lo = a->window > 0 ? hi - a->window + 1 : 0;
        if (lo < 0) lo = 0;
        for (int i = 0; i < hd; i++) acc[i] = 0.0f;
        float m = -INFINITY, sum = 0.0f;
        rl__att_rows(c, a, row, 1, kvh, lo, hi, acc, sc, &m, &sum);
        rl__att_finish(c, a, acc, m, sum, h, a->out + ((size_t)t * a->n_head + h) * hd);
    }
}

void rl_attention(const rl_attn_args *a, rl_threadpool *tp) {
    rl_attention_runs(a, 1, tp);
}

void rl_attention_runs(const rl_attn_args *a, int32_t n_runs, rl_threadpool *tp) {
    if (n_runs <= 0) return;
    const rl_kv_layer *kv = a->kv;
    RL_ASSERT(kv->head_dim > 0 && kv->head_dim <= RL_ATT_MAX_HD && kv->block_size > 0);
    RL_ASSERT(kv->n_kv_head > 0 && a->n_head % kv->n_kv_head == 0);
    RL_ASSERT(rl_kv_type_supported(kv->k_type, kv->head_dim) &&
              rl_kv_type_supported(kv->v_type, kv->head_dim));
    int64_t n_items = 0;
    for (int32_t r = 0; r < n_runs; r++) {
        RL_ASSERT(a[r].kv == kv && a[r].n_head == a->n_head && a[r].scale == a->scale &&
                  a[r].window == a->window && a[r].softcap == a->softcap &&
                  a[r].sinks == a->sinks && a[r].n_tok >= 0);
        n_items += (int64_t)a[r].n_tok * a[r].n_head;
    }
    if (n_items == 0) return;
    rl__att_ctx c = {.a = a, .n_items = n_items, .kt = rl__kernels()};
    c.k_row = rl_type_row_size(kv->k_type, kv->head_dim);
    c.v_row = rl_type_row_size(kv->v_type, kv->head_dim);
    c.k_quant = rl_kv_type_quantized(kv->k_type);
    if (c.k_quant && rl__kvq_float_query()) c.k_quant = false, c.kqf = true;
    c.k_rot = rl_kv_rot_resolve(kv->k_type, kv->head_dim, kv->k_rot) == RL_KV_ROT_HADAMARD;
    c.v_rot = rl_kv_rot_resolve(kv->v_type, kv->head_dim, kv->v_rot) == RL_KV_ROT_HADAMARD;
    c.k_shift = rl_kv_k_shifted(kv);
    c.k_scale = rl_kv_k_scaled(kv);
    /* GQA: heads that share a KV head in one item (rl__att_group): the
     * largest divisor of the group up to RL_ATT_GMAX that still leaves
     * every thread an item, so each K/V row is read once for those heads
     * (a long context's decode step reads its pages from memory: one head
     * an item read them once a head); the same bits either way. */
    c.gs = c.tq = 1;
    const int group = a->n_head / kv->n_kv_head, nth = rl_threadpool_n_threads(tp);
    if (atomic_load_explicit(&g_att_grouped, memory_order_relaxed) && group > 1 &&
        kv->head_dim <= RL_ATT_GHD) {
        for (int gs = group < RL_ATT_GMAX ? group : RL_ATT_GMAX; gs > 1 && c.gs == 1; gs--)
            if (group % gs == 0 && n_items / gs >= nth) c.gs = gs;
    }
    /* prompt chunks: up to RL_ATT_ROWS / gs consecutive tokens an item
     * (rl__att_group), as many as keep 4 items a thread */
    int64_t n_blk = 0;
    if (c.gs > 1) {
        int64_t max_tok = 0;
        for (int32_t r = 0; r < n_runs; r++) max_tok = a[r].n_tok > max_tok ? a[r].n_tok : max_tok;
        for (c.tq = RL_ATT_ROWS / c.gs; c.tq > 1; c.tq--) {
            n_blk = 0;
            for (int32_t r = 0; r < n_runs; r++) n_blk += (a[r].n_tok + c.tq - 1) / c.tq;
            if (max_tok >= 2 * c.tq && n_blk * (a->n_head / c.gs) >= 4 * (int64_t)nth) break;
        }
    }
    if (c.tq == 1) n_blk = n_items / a->n_head;
    c.n_items = n_blk * (a->n_head / c.gs);
    atomic_init(&c.next, 0);
    if (nth == 1)
        rl__att_task(&c, 0, 1);
    else
        rl_threadpool_run(tp, rl__att_task, &c);
}
