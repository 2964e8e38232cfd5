/* A worker rank of the MPI pipeline (dist.h, ranks 1..K-1): waits for
 * rank 0's configuration, loads its stage of the model, runs the K
 * calibration's forwards in step with rank 0 when K pages are quantized,
 * builds its KV pages with rank 0's block geometry, then serves micro-
 * batches until the end: receive from rank - 1, replay the block ops, run
 * its layers, hand the hidden state to rank + 1 (the last rank: the
 * final hidden rows of the tokens that want logits back to rank 0).
 *
 * Invariants: every block id a batch names is held by the op stream (the
 * worker checks, so a desynchronized pool ends the job instead of
 * computing on another sequence's pages); the worker allocates only when
 * a message outgrows its buffers (the first steps).
 */
#include "dist/dist-impl.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/threadpool.h"
#include "model/kcal.h"
#include "tokenizer/tokenizer.h"

typedef struct worker {
    rl__dist *d;
    rl_model *m;
    rl_threadpool *tp;
    rl_kv_pool *pool; /* NULL until CFG_POOL */
    int32_t *meta;
    int meta_cap;
    float *x_in, *x_out, *back;
    int x_cap;
    bool *want, *prompt;
    const int32_t *tables[RL_DIST_SEQ_MAX];
} worker;

/* Parses w->meta[0 .. n) into *b (pointing into it); false if malformed. */
static bool parse_batch(worker *w, int n, rl_batch *b) {
    const int32_t *h = w->meta;
    int32_t nops = h[H_NOPS], nt = h[H_NTOK], ns = h[H_NSEQ], nbt = h[H_NBT];
    if (nops < 0 || nt < 1 || nt > w->d->max_batch || ns < 1 || ns > RL_DIST_SEQ_MAX || nbt < 0 ||
        (int64_t)H_N + 3 * (int64_t)nops + 4 * (int64_t)nt + ns + nbt != n)
        return false;
    const int32_t *p = h + H_N + 3 * nops;
    memset(b, 0, sizeof *b);
    b->n_tok = nt;
    b->token = p;
    b->pos = p + nt;
    b->seq = p + 2 * nt;
    for (int32_t i = 0; i < nt; i++) {
        w->want[i] = (p[3 * nt + i] & 1) != 0;
        w->prompt[i] = (p[3 * nt + i] & 2) != 0;
    }
    b->want_logits = w->want;
    b->prompt = w->prompt;
    b->n_seq = ns;
    b->n_blocks = p + 4 * nt;
    b->n_vocab_out = h[H_NVOUT];
    const int32_t *t = p + 4 * nt + ns;
    int64_t used = 0;
    for (int32_t s = 0; s < ns; s++) {
        if (b->n_blocks[s] < 0 || used + b->n_blocks[s] > nbt) return false;
        w->tables[s] = t + used;
        used += b->n_blocks[s];
    }
    b->block_tables = w->tables;
    return used == nbt;
}

/* Every block the batch names must be held (the null block is padding). */
static void check_blocks(worker *w, const rl_batch *b) {
    const int32_t *t = b->block_tables[0];
    int32_t total = 0;
    for (int32_t s = 0; s < b->n_seq; s++) total += b->n_blocks[s];
    for (int32_t i = 0; i < total; i++)
        if (t[i] < 0 || t[i] >= w->d->n_blocks || (t[i] > 0 && w->d->mirror[t[i]] <= 0))
            rl__dist_fatal(w->d, "a batch names a block the op stream does not hold");
}

static void send(worker *w, const void *buf, int n, MPI_Datatype type, int esize, int dst,
                 int tag) {
    int rc = MPI_Send(buf, n, type, dst, tag, MPI_COMM_WORLD);
    rl__dist_check(w->d, rc, "MPI_Send", dst);
    w->d->bytes_sent += (uint64_t)n * (uint64_t)esize;
}

/* Receives and handles one message from rank - 1 with KV kv (the pool's,
 * or the K calibration's own; check: verify its blocks against the op
 * stream).  Returns its type. */
static int32_t handle(worker *w, const rl_kv_layer *kv, bool check) {
    rl__dist *d = w->d;
    int prev = d->rank - 1, next = d->rank + 1 < d->size ? d->rank + 1 : -1;
    int n = rl__dist_recv(d, (void **)&w->meta, &w->meta_cap, MPI_INT32_T, sizeof(int32_t), prev,
                          TAG_META);
    if (n < H_N || w->meta[H_NOPS] < 0 || (int64_t)H_N + 3 * (int64_t)w->meta[H_NOPS] > n)
        rl__dist_fatal(d, "malformed message");
    int32_t type = w->meta[H_TYPE];
    if (w->meta[H_NOPS] > 0) {
        if (!w->pool) rl__dist_fatal(d, "block ops before the KV pool");
        rl__dist_apply_ops(d, w->meta + H_N, w->meta[H_NOPS], w->pool);
    }
    if (type != MSG_STEP) {
        if (type != MSG_OPS && type != MSG_END) rl__dist_fatal(d, "unknown message type");
        if (next > 0) send(w, w->meta, n, MPI_INT32_T, 4, next, TAG_META);
        return type;
    }
    rl_batch b;
    if (!parse_batch(w, n, &b)) rl__dist_fatal(d, "malformed batch");
    if (check) check_blocks(w, &b);
    int E = d->n_embd, nx = b.n_tok * E;
    int got = rl__dist_recv(d, (void **)&w->x_in, &w->x_cap, MPI_FLOAT, sizeof(float), prev, TAG_X);
    if (got != nx) rl__dist_fatal(d, "hidden state of the wrong size");
    rl_err err = {0};
    double t0 = rl_time_s();
    if (rl_model_forward_stage(w->m, &b, kv, w->x_in, w->x_out, w->tp, &err))
        rl__dist_fatal(d, err.msg);
    d->compute_s += rl_time_s() - t0;
    d->steps++;
    d->tokens += (uint64_t)b.n_tok;
    if (next > 0) {
        send(w, w->meta, n, MPI_INT32_T, 4, next, TAG_META);
        send(w, w->x_out, nx, MPI_FLOAT, 4, next, TAG_X);
        return type;
    }
    int32_t r = 0;
    for (int32_t i = 0; i < b.n_tok; i++)
        if (b.want_logits[i])
            memcpy(w->back + (size_t)r++ * E, w->x_out + (size_t)i * E, (size_t)E * sizeof(float));
    send(w, w->back, r * E, MPI_FLOAT, 4, 0, TAG_BACK);
    return type;
}

/* The K calibration's forward on this stage: rank 0 runs the same
 * calibration, so the next messages are this batch's micro-batches. */
static rl_status calib_fwd(void *ud, rl_model *m, const rl_batch *b, const rl_kv_layer *kv,
                           float *logits, rl_threadpool *tp, rl_err *err) {
    (void)m;
    (void)logits;
    (void)tp;
    (void)err;
    worker *w = ud;
    for (int32_t done = 0; done < b->n_tok; done += w->meta[H_NTOK])
        if (handle(w, kv, false) != MSG_STEP)
            rl__dist_fatal(w->d, "K calibration out of step with rank 0");
    return RL_OK;
}

static void recv_cfg(rl__dist *d, rl__dist_cfg *c) {
    void *buf = c;
    int cap = (int)sizeof *c;
    if (rl__dist_recv(d, &buf, &cap, MPI_BYTE, 0, 0, TAG_CFG) != (int)sizeof *c)
        rl__dist_fatal(d, "malformed configuration message");
}

static int fail(worker *w, const char *what, const rl_err *err) {
    char msg[600];
    snprintf(msg, sizeof msg, "%s: %s", what, err->msg);
    rl__dist_fatal(w->d, msg);
}

int rl__dist_worker(rl__dist *d) {
    worker w = {.d = d};
    rl__dist_cfg c;
    rl_err err = {0};
    recv_cfg(d, &c);
    if (c.kind == CFG_END) return 0; /* rank 0 stopped before loading */
    if (c.kind != CFG_START) rl__dist_fatal(d, "expected the start configuration");
    rl_model_opts mo = {.max_batch = c.max_batch,
                        .n_ctx = c.n_ctx,
                        .weights = (rl_model_weights)c.weights,
                        .stage = d->rank,
                        .n_stages = d->size};
    if (rl_model_load(c.model_path, &mo, &w.m, &err)) return fail(&w, "loading the model", &err);
    int nt = c.n_threads > 0 ? c.n_threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
    w.tp = rl_threadpool_new(nt > 0 ? nt : 1);
    rl__dist_note_model(d, w.m);
    d->n_embd = rl_model_n_embd(w.m);
    d->max_batch = c.max_batch;
    size_t rows = (size_t)c.max_batch * (size_t)d->n_embd;
    w.x_cap = (int)rows;
    w.x_in = rl_calloc(rows, sizeof(float));
    w.x_out = rl_calloc(rows, sizeof(float));
    w.back = rl_calloc(rows, sizeof(float));
    w.want = rl_calloc((size_t)c.max_batch, 1);
    w.prompt = rl_calloc((size_t)c.max_batch, 1);
    if (!w.tp || !w.x_in || !w.x_out || !w.back || !w.want || !w.prompt)
        rl__dist_fatal(d, "out of memory for the stage's buffers");
    if (c.k_quant) { /* the same calibration as rank 0's, its forwards through the chain */
        rl_tokenizer *tok = NULL;
        if (rl_tokenizer_load(rl_model_gguf(w.m), &tok, &err) ||
            rl_model_calibrate_k_with(w.m, tok, w.tp, calib_fwd, &w, &err))
            return fail(&w, "K calibration", &err);
        rl_tokenizer_free(tok);
    }
    recv_cfg(d, &c);
    if (c.kind == CFG_END) return 0;
    if (c.kind != CFG_POOL) rl__dist_fatal(d, "expected the KV configuration");
    c.kv.n_layer = rl_model_kv_shape_of(w.m).n_layer;
    c.kv.n_blocks = c.n_blocks;
    if (rl_kv_pool_new(&c.kv, &w.pool, &err)) return fail(&w, "KV pages", &err);
    d->n_blocks = c.n_blocks;
    d->mirror = rl_calloc((size_t)c.n_blocks, sizeof(int32_t));
    if (!d->mirror) rl__dist_fatal(d, "out of memory");
    const rl_kv_layer *kv = rl_kv_pool_layers(w.pool);
    while (handle(&w, kv, true) != MSG_END) {
    }
    bool ok = rl__dist_report(d);
    rl_kv_pool_free(w.pool);
    rl_free(d->mirror);
    rl_free(w.meta);
    rl_free(w.x_in);
    rl_free(w.x_out);
    rl_free(w.back);
    rl_free(w.want);
    rl_free(w.prompt);
    rl_threadpool_free(w.tp);
    rl_model_free(w.m);
    return ok ? 0 : 1;
}
