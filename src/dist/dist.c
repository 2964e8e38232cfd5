/* The MPI pipeline (dist.h): start-up, rank 0's side (the engine's hooks:
 * the forward that runs a batch through every stage, the block-op log)
 * and the code both sides share (receiving, the block-op mirror, the
 * report).  Built only with `make MPI=1`.
 *
 * Rank 0's forward (rl_dist_forward), per call: the batch is cut into n_micro contiguous
 * token ranges (a sequence's tokens stay in position order, so a later
 * micro-batch's attention finds the earlier one's K/V on every stage, and
 * batch-invariant kernels make the logits bit-identical to one forward);
 * for each, rank 0 runs its layers and posts the description and hidden
 * state to rank 1 without waiting, so rank 1 starts on micro-batch 0
 * while rank 0 computes micro-batch 1; then rank 0 takes the final hidden
 * rows back from rank K-1 in order and applies the head.
 *
 * Invariants: MPI is called only from the thread that steps the engine,
 * the one that creates and frees it, and main, never two at once
 * (MPI_THREAD_SERIALIZED); every isend of a forward completes before it
 * returns; block ops are sent in the order the pool made them, ahead of
 * any batch that relies on them.
 */
#include "dist/dist-impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sched.h>

#include "base/env.h"
#include "base/buf.h"
#include "tensor/tensor.h"

/* ------------------------------------------------------------ shared */

void rl__dist_check(const rl__dist *d, int rc, const char *what, int peer) {
    if (rc == MPI_SUCCESS) return;
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    fprintf(stderr,
            "redline pipeline: rank %d: %s with rank %d failed: %s (a rank died or the network "
            "failed); ending the job\n",
            d->rank, what, peer, msg);
    MPI_Abort(MPI_COMM_WORLD, 1);
    exit(1);
}

_Noreturn void rl__dist_fatal(const rl__dist *d, const char *msg) {
    fprintf(stderr, "redline pipeline: rank %d: %s; ending the job\n", d->rank, msg);
    MPI_Abort(MPI_COMM_WORLD, 1);
    exit(1);
}

static void nap(int *idle) {
    /* a reply is usually a step away: yield for a while, then 50 us sleeps
     * (about 20 ms of them), then 1 ms ones, so an idle rank costs no core */
    int n = ++*idle;
    if (n < 200) {
        sched_yield();
        return;
    }
    struct timespec ts = {0, n < 600 ? 50000 : 1000000};
    nanosleep(&ts, NULL);
}

int rl__dist_recv(rl__dist *d, void **buf, int *cap, MPI_Datatype type, size_t esize, int src,
                  int tag) {
    double t0 = rl_time_s();
    MPI_Status s;
    int flag = 0, idle = 0, rc;
    for (;;) {
        rc = MPI_Iprobe(src, tag, MPI_COMM_WORLD, &flag, &s);
        rl__dist_check(d, rc, "MPI_Iprobe", src);
        if (flag) break;
        if (d->rank == 0 && d->step_timeout_s > 0 && rl_time_s() - t0 > d->step_timeout_s) {
            char msg[200];
            snprintf(msg, sizeof msg,
                     "no result from rank %d for %.0f s (--pp-timeout): a rank of the pipeline "
                     "is hung or far too slow",
                     src, d->step_timeout_s);
            rl__dist_fatal(d, msg);
        }
        if (d->rank > 0 && tag != TAG_CFG) { /* rank 0 may have given up */
            rc = MPI_Iprobe(0, TAG_CFG, MPI_COMM_WORLD, &flag, &s);
            rl__dist_check(d, rc, "MPI_Iprobe", 0);
            if (flag) {
                rl__dist_cfg c;
                MPI_Recv(&c, (int)sizeof c, MPI_BYTE, 0, TAG_CFG, MPI_COMM_WORLD,
                         MPI_STATUS_IGNORE);
                if (c.kind != CFG_END) rl__dist_fatal(d, "unexpected configuration message");
                MPI_Finalize();
                exit(0);
            }
        }
        nap(&idle);
    }
    int n = 0;
    MPI_Get_count(&s, type, &n);
    if (n > *cap) {
        if (esize == 0) rl__dist_fatal(d, "message larger than expected");
        int32_t c = *cap;
        if (rl_grow_i32(buf, &c, n, esize)) rl__dist_fatal(d, "out of memory for a message");
        *cap = c;
    }
    rc = MPI_Recv(*buf, n, type, src, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    rl__dist_check(d, rc, "MPI_Recv", src);
    d->wait_s += rl_time_s() - t0;
    return n;
}

void rl__dist_apply_ops(rl__dist *d, const int32_t *ops, int32_t n, rl_kv_pool *pool) {
    for (int32_t i = 0; i < n; i++) {
        int32_t op = ops[3 * i], a = ops[3 * i + 1], b = ops[3 * i + 2];
        if (a <= 0 || a >= d->n_blocks || (op == RL_KV_OP_COPY && (b < 0 || b >= d->n_blocks)))
            rl__dist_fatal(d, "block op names a block outside the pool");
        switch (op) {
        case RL_KV_OP_ALLOC:
            if (d->mirror[a] != 0) d->mirror_bad = true;
            d->mirror[a] = 1;
            break;
        case RL_KV_OP_REF:
            d->mirror[a]++;
            break;
        case RL_KV_OP_UNREF:
            if (d->mirror[a] <= 0)
                d->mirror_bad = true;
            else
                d->mirror[a]--;
            break;
        case RL_KV_OP_COPY:
            if (pool) rl_kv_block_copy(pool, a, b);
            break;
        default:
            rl__dist_fatal(d, "unknown block op");
        }
        if (d->mirror_bad) rl__dist_fatal(d, "block ops contradict the block refcounts");
    }
}

int32_t rl__dist_held(const rl__dist *d) {
    int32_t n = 0;
    for (int32_t i = 1; i < d->n_blocks; i++) n += d->mirror[i] > 0;
    return n;
}

static double rss_mib(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    double kb = 0;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "VmHWM:", 6))
            kb = atof(line + 6); /* peak: rank 0 reports after the model is freed */
    if (f) fclose(f);
    return kb / 1024.0;
}

void rl__dist_note_model(rl__dist *d, const rl_model *m) {
    rl_model_layer_range(m, &d->l0, &d->l1, &d->has_io);
    d->weight_bytes = rl_model_weight_bytes(m);
}

bool rl__dist_report(const rl__dist *d) {
    int32_t held = rl__dist_held(d);
    fprintf(stderr,
            "redline pipeline: rank %d/%d layers [%d, %d)%s: %llu micro-batches, %llu tokens, "
            "compute %.3f s, wait %.3f s, sent %llu bytes (%.0f per token), weights %.1f MiB, "
            "peak rss %.1f MiB; kv blocks held at exit: %d of %d\n",
            d->rank, d->size, (int)d->l0, (int)d->l1, d->has_io ? " + embeddings and head" : "",
            (unsigned long long)d->steps, (unsigned long long)d->tokens, d->compute_s, d->wait_s,
            (unsigned long long)d->bytes_sent,
            d->tokens ? (double)d->bytes_sent / (double)d->tokens : 0.0,
            (double)d->weight_bytes / 1048576.0, rss_mib(), (int)held,
            d->n_blocks > 0 ? (int)d->n_blocks - 1 : 0);
    return held == 0 && !d->mirror_bad;
}

/* ------------------------------------------------------------ rank 0 */

typedef struct pipe0 {
    rl__dist d;
    rl_model *m; /* the engine's, borrowed between on_model and on_free */
    bool started, pooled, ended, failed;
    int32_t ops[3 * RL_DIST_OPS_CAP], n_ops;
    int32_t *meta[RL_DIST_MICRO_MAX];
    int32_t meta_cap[RL_DIST_MICRO_MAX];
    float *x;     /* [max_batch][n_embd] rank 0's stage output */
    float *back;  /* [max_batch][n_embd] final hidden rows from rank K-1 */
    int back_cap; /* floats */
    bool *want0;  /* [max_batch] want_logits for a batch that has none */
} pipe0;

static pipe0 g_p;

/* Fills p->meta[c] with the description of tokens [i0, i1) of b (none
 * for OPS/END) and the logged ops when with_ops; returns its length. */
static int build_meta(pipe0 *p, int c, int32_t type, const rl_batch *b, const bool *want,
                      int32_t i0, int32_t i1, bool with_ops) {
    int32_t smin = 0, smax = -1, nbt = 0, nt = i1 - i0;
    for (int32_t i = i0; i < i1; i++) {
        if (smax < 0 || b->seq[i] < smin) smin = b->seq[i];
        if (b->seq[i] > smax) smax = b->seq[i];
    }
    int32_t ns = smax - smin + 1, nops = with_ops ? p->n_ops : 0;
    for (int32_t s = smin; s <= smax; s++) nbt += b->n_blocks[s];
    int32_t need = H_N + 3 * nops + 4 * nt + ns + nbt;
    if (rl_grow_i32((void **)&p->meta[c], &p->meta_cap[c], need, sizeof(int32_t)))
        rl__dist_fatal(&p->d, "out of memory for a message");
    int32_t *w = p->meta[c];
    w[H_TYPE] = type;
    w[H_NOPS] = nops;
    w[H_NTOK] = nt;
    w[H_NSEQ] = ns;
    w[H_NVOUT] = b ? b->n_vocab_out : 0;
    w[H_NBT] = nbt;
    w += H_N;
    memcpy(w, p->ops, (size_t)nops * 3 * sizeof(int32_t));
    w += 3 * nops;
    if (with_ops) p->n_ops = 0;
    for (int32_t i = i0; i < i1; i++) {
        w[i - i0] = b->token[i];
        w[nt + i - i0] = b->pos[i];
        w[2 * nt + i - i0] = b->seq[i] - smin;
        /* bit 0: want logits, bit 1: a prompt token (rl_batch.prompt) */
        w[3 * nt + i - i0] = want[i] | (b->prompt && b->prompt[i]) << 1;
    }
    w += 4 * nt;
    for (int32_t s = smin; s <= smax; s++) *w++ = b->n_blocks[s];
    for (int32_t s = smin; s <= smax; s++) {
        memcpy(w, b->block_tables[s], (size_t)b->n_blocks[s] * sizeof(int32_t));
        w += b->n_blocks[s];
    }
    return need;
}

/* Sends the logged ops down the chain now (the log is full, or the end). */
static void send_ops(pipe0 *p, int32_t type) {
    static const rl_batch none = {0};
    int n = build_meta(p, 0, type, &none, NULL, 0, 0, true);
    int rc = MPI_Send(p->meta[0], n, MPI_INT32_T, 1, TAG_META, MPI_COMM_WORLD);
    rl__dist_check(&p->d, rc, "MPI_Send", 1);
    p->d.bytes_sent += (uint64_t)n * 4;
}

static void observe(void *ud, rl_kv_op op, int32_t a, int32_t b) {
    pipe0 *p = ud;
    if (p->n_ops == RL_DIST_OPS_CAP) send_ops(p, MSG_OPS);
    int32_t *o = p->ops + 3 * p->n_ops++;
    o[0] = (int32_t)op;
    o[1] = a;
    o[2] = b;
    rl__dist_apply_ops(&p->d, o, 1, NULL);
}

static rl_batch sub_batch(const rl_batch *b, const bool *want, int32_t i0, int32_t i1) {
    rl_batch s = *b;
    s.n_tok = i1 - i0;
    s.token = b->token + i0;
    s.pos = b->pos + i0;
    s.seq = b->seq + i0;
    s.want_logits = want + i0;
    s.prompt = b->prompt ? b->prompt + i0 : NULL;
    return s;
}

rl_status rl_dist_forward(void *ud, rl_model *m, const rl_batch *b, const rl_kv_layer *kv,
                          float *logits, rl_threadpool *tp, rl_err *err) {
    pipe0 *p = ud;
    rl__dist *d = &p->d;
    if (!b || b->n_tok < 1 || b->n_tok > d->max_batch || b->n_seq < 1 || b->n_seq > RL_DIST_SEQ_MAX)
        return rl_err_set(err, RL_ERR_INVALID, "pipeline: batch of %d tokens, %d sequences",
                          b ? (int)b->n_tok : 0, b ? (int)b->n_seq : 0);
    int32_t n = b->n_tok, E = d->n_embd, last = d->size - 1;
    const bool *want = b->want_logits;
    if (!want) { /* only the last token (rl_batch's rule), made explicit per micro-batch */
        memset(p->want0, 0, (size_t)n);
        p->want0[n - 1] = true;
        want = p->want0;
    }
    int M = d->n_micro < n ? d->n_micro : n;
    int32_t V = b->n_vocab_out > 0 ? b->n_vocab_out : rl_model_n_vocab(m);
    MPI_Request req[2 * RL_DIST_MICRO_MAX];
    int nreq = 0, rc;
    for (int c = 0; c < M; c++) {
        int32_t i0 = (int32_t)((int64_t)c * n / M), i1 = (int32_t)((int64_t)(c + 1) * n / M);
        rl_batch sb = sub_batch(b, want, i0, i1);
        double t0 = rl_time_s();
        rl_status st = rl_model_forward_stage(m, &sb, kv, NULL, p->x + (size_t)i0 * E, tp, err);
        d->compute_s += rl_time_s() - t0;
        if (st && c == 0) return st; /* nothing sent: the step fails as in one process */
        if (st) rl__dist_fatal(d, err->msg);
        int len = build_meta(p, c, MSG_STEP, b, want, i0, i1, c == 0);
        rc = MPI_Isend(p->meta[c], len, MPI_INT32_T, 1, TAG_META, MPI_COMM_WORLD, &req[nreq++]);
        rl__dist_check(d, rc, "MPI_Isend", 1);
        rc = MPI_Isend(p->x + (size_t)i0 * E, (i1 - i0) * E, MPI_FLOAT, 1, TAG_X, MPI_COMM_WORLD,
                       &req[nreq++]);
        rl__dist_check(d, rc, "MPI_Isend", 1);
        d->bytes_sent += (uint64_t)len * 4 + (uint64_t)(i1 - i0) * E * 4;
        d->steps++;
    }
    int32_t row = 0;
    for (int c = 0; c < M; c++) {
        int32_t i0 = (int32_t)((int64_t)c * n / M), i1 = (int32_t)((int64_t)(c + 1) * n / M);
        rl_batch sb = sub_batch(b, want, i0, i1);
        int32_t nw = rl_batch_n_logits(&sb);
        int got = rl__dist_recv(d, (void **)&p->back, &p->back_cap, MPI_FLOAT, sizeof(float), last,
                                TAG_BACK);
        if (got != nw * E) rl__dist_fatal(d, "the last stage returned the wrong number of rows");
        if (nw == 0) continue;
        double t0 = rl_time_s();
        rl_status st =
            rl_model_forward_head(m, &sb, p->back, logits + (size_t)row * (size_t)V, tp, err);
        d->compute_s += rl_time_s() - t0;
        if (st) rl__dist_fatal(d, err->msg);
        row += nw;
    }
    rc = MPI_Waitall(nreq, req, MPI_STATUSES_IGNORE);
    rl__dist_check(d, rc, "MPI_Waitall", 1);
    d->tokens += (uint64_t)n;
    return RL_OK;
}

static void send_cfg(pipe0 *p, const rl__dist_cfg *c) {
    for (int r = 1; r < p->d.size; r++) {
        int rc = MPI_Send(c, (int)sizeof *c, MPI_BYTE, r, TAG_CFG, MPI_COMM_WORLD);
        rl__dist_check(&p->d, rc, "MPI_Send", r);
    }
}

rl_status rl_dist_on_model(void *ud, const rl_engine_params *ep, rl_model *m, rl_err *err) {
    pipe0 *p = ud;
    rl__dist_cfg c;
    memset(&c, 0, sizeof c);
    c.kind = CFG_START;
    c.max_batch = ep->max_batch_tokens;
    c.n_ctx = ep->n_ctx;
    c.weights = ep->weights;
    c.n_threads = ep->n_threads;
    rl_type kt;
    const char *ks = ep->cache_type_k && *ep->cache_type_k ? ep->cache_type_k : "f16";
    c.k_quant = rl_type_from_name(ks, &kt) && rl_kv_type_quantized(kt);
    if (strlen(ep->model_path) >= sizeof c.model_path)
        return rl_err_set(err, RL_ERR_LIMIT, "pipeline: model path too long");
    strcpy(c.model_path, ep->model_path);
    p->m = m;
    rl__dist_note_model(&p->d, m);
    p->d.n_embd = rl_model_n_embd(m);
    p->d.max_batch = ep->max_batch_tokens;
    size_t rows = (size_t)p->d.max_batch * (size_t)p->d.n_embd;
    p->x = rl_calloc(rows, sizeof(float));
    p->want0 = rl_calloc((size_t)p->d.max_batch, 1);
    if (!p->x || !p->want0) return rl_err_set(err, RL_ERR_NOMEM, "pipeline: out of memory");
    send_cfg(p, &c);
    p->started = true;
    return RL_OK;
}

rl_status rl_dist_on_pool(void *ud, rl_kv_pool *pool, rl_err *err) {
    pipe0 *p = ud;
    rl__dist_cfg c;
    memset(&c, 0, sizeof c);
    c.kind = CFG_POOL;
    c.kv = *rl_kv_pool_config(pool);
    c.n_blocks = rl_kv_pool_stats(pool).n_blocks + 1; /* with the null block */
    p->d.n_blocks = c.n_blocks;
    p->d.mirror = rl_calloc((size_t)c.n_blocks, sizeof(int32_t));
    if (!p->d.mirror) return rl_err_set(err, RL_ERR_NOMEM, "pipeline: out of memory");
    send_cfg(p, &c);
    p->pooled = true;
    rl_kv_pool_set_observer(pool, observe, p);
    return RL_OK;
}

/* The engine is gone: the last ops and the end down the chain (or, before
 * the pool existed, the end to every worker), and the report. */
void rl_dist_on_free(void *ud) {
    pipe0 *p = ud;
    if (p->ended) return;
    p->ended = true;
    if (p->pooled) {
        send_ops(p, MSG_END);
    } else {
        rl__dist_cfg c;
        memset(&c, 0, sizeof c);
        c.kind = CFG_END;
        send_cfg(p, &c);
    }
    if (!rl__dist_report(&p->d)) p->failed = true;
    p->m = NULL;
}

/* ------------------------------------------------------------ start-up */

/* Removes `name VALUE` from argv; VALUE, or NULL when absent (borrowed
 * from argv). */
static const char *take_opt(int *argc, char **argv, const char *name) {
    for (int i = 1; i + 1 < *argc; i++) {
        if (strcmp(argv[i], name)) continue;
        const char *v = argv[i + 1];
        memmove(argv + i, argv + i + 2, (size_t)(*argc - i - 1) * sizeof *argv);
        *argc -= 2;
        return v;
    }
    return NULL;
}

bool rl_dist_main(int *argc, char **argv, int *exit_code) {
    const char *ns = rl_env(RL_ENV_OMPI_SIZE);
    if (!ns || atoi(ns) <= 1) return false;
    int provided = 0, rc = MPI_Init_thread(argc, &argv, MPI_THREAD_SERIALIZED, &provided);
    rl__dist *d = &g_p.d;
    if (rc != MPI_SUCCESS) {
        fprintf(stderr, "redline pipeline: MPI_Init_thread failed\n");
        *exit_code = 1;
        return true;
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &d->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &d->size);
    if (provided < MPI_THREAD_SERIALIZED)
        rl__dist_fatal(d, "this MPI does not provide MPI_THREAD_SERIALIZED");
    const char *micro = take_opt(argc, argv, "--pp-micro");
    const char *timeout = take_opt(argc, argv, "--pp-timeout");
    d->n_micro = micro ? atoi(micro) : d->size;
    char *end = NULL;
    d->step_timeout_s = timeout ? strtod(timeout, &end) : RL_DIST_TIMEOUT_DEFAULT;
    const char *bad = NULL;
    char why[120];
    if (d->n_micro < 1 || d->n_micro > RL_DIST_MICRO_MAX) {
        snprintf(why, sizeof why, "--pp-micro %d outside [1, %d]", d->n_micro, RL_DIST_MICRO_MAX);
        bad = why;
    } else if (timeout && (end == timeout || *end || !(d->step_timeout_s >= 0))) {
        snprintf(why, sizeof why, "--pp-timeout '%.40s' is not a number of seconds >= 0", timeout);
        bad = why;
    }
    if (bad) {
        if (d->rank == 0) fprintf(stderr, "redline: %s\n", bad);
        MPI_Finalize();
        *exit_code = 2;
        return true;
    }
    if (d->rank > 0) {
        *exit_code = rl__dist_worker(d);
        MPI_Finalize();
        return true;
    }
    const char *cmd = *argc > 1 ? argv[1] : "";
    if (strcmp(cmd, "run") && strcmp(cmd, "serve")) {
        fprintf(stderr,
                "redline: under mpirun (%d ranks) only `run` and `serve` run as a pipeline, "
                "not '%s'\n",
                d->size, cmd);
        *exit_code = rl_dist_finalize(2);
        return true;
    }
    return false;
}

int rl_dist_size(void) {
    return g_p.d.size > 1 ? g_p.d.size : 1;
}

void *rl_dist_ctx(void) {
    return &g_p;
}

int rl_dist_finalize(int exit_code) {
    pipe0 *p = &g_p;
    if (p->d.size <= 1) return exit_code;
    if (!p->ended) { /* no engine ended the workers: tell them */
        p->ended = true;
        rl__dist_cfg c;
        memset(&c, 0, sizeof c);
        c.kind = CFG_END;
        send_cfg(p, &c);
    }
    for (int c = 0; c < RL_DIST_MICRO_MAX; c++) rl_free(p->meta[c]);
    rl_free(p->x);
    rl_free(p->back);
    rl_free(p->want0);
    rl_free(p->d.mirror);
    MPI_Finalize();
    return p->failed && exit_code == 0 ? 1 : exit_code;
}
