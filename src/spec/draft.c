/* Draft-model drafter (see spec.h): a second, smaller model of the same
 * vocabulary with its own paged KV pool.  Proposals are greedy and batched
 * across sequences: one catch-up forward (chunked by the batch budget) for
 * the tokens each sequence's draft has not seen yet, then one single-token
 * forward per draft position for all sequences still drafting.
 *
 * With a restricted head (n_vocab_draft < n_vocab) every forward scores
 * only token ids [0, n_vocab_draft): the output projection, a quarter to a
 * third of a small model's weights, shrinks in proportion, and proposals
 * stay within those ids.  The verifier needs nothing else: a greedy draft
 * is a point mass wherever it lies. */
#include "spec/spec.h"

#include <string.h>

struct rl_spec_draft {
    rl_model *m;
    rl_kv_pool *pool;
    rl_threadpool *tp;
    int32_t n_vocab, max_seqs, max_batch, n_ctx;
    int32_t n_out;                  /* logits per row: ids [0, n_out) are proposed */
    int64_t n_step;                 /* decode-like forwards (<= 2 tokens a sequence) */
    double step_s;                  /* and their time */
    float *logits;                  /* [max_seqs][n_out] */
    int32_t *b_tok, *b_pos, *b_seq; /* [max_batch] */
    bool *b_want, *b_prompt;        /* [max_batch] */
    const int32_t **tables;         /* [max_seqs] */
    int32_t *nblocks;
    int32_t *which; /* [max_seqs] batch seq -> caller index */
};

rl_status rl_spec_draft_new(const char *path, int32_t n_vocab_target, int32_t n_vocab_draft,
                            int32_t max_seqs, int32_t n_ctx, int32_t max_batch, rl_spec_draft **out,
                            rl_err *err) {
    *out = NULL;
    if (n_vocab_draft < 0)
        return rl_err_set(err, RL_ERR_INVALID, "draft model: draft vocabulary %d < 0",
                          (int)n_vocab_draft);
    rl_spec_draft *d = rl_calloc(1, sizeof *d);
    if (!d) return rl_err_set(err, RL_ERR_NOMEM, "draft: out of memory");
    rl_model_opts mo = {.max_batch = max_batch};
    rl_status s = rl_model_load(path, &mo, &d->m, err);
    if (s) {
        rl_err_prefix(err, "draft model");
        rl_spec_draft_free(d);
        return s;
    }
    d->n_vocab = rl_model_n_vocab(d->m);
    if (d->n_vocab != n_vocab_target) {
        s = rl_err_set(err, RL_ERR_INVALID,
                       "draft model: vocabulary of %d tokens differs from the target's %d",
                       d->n_vocab, n_vocab_target);
        rl_spec_draft_free(d);
        return s;
    }
    d->n_out = n_vocab_draft > 0 && n_vocab_draft < d->n_vocab ? n_vocab_draft : d->n_vocab;
    d->max_seqs = max_seqs;
    d->max_batch = max_batch;
    d->n_ctx = n_ctx;
    rl_model_kv_shape ks = rl_model_kv_shape_of(d->m);
    rl_kv_config kc = {.n_layer = ks.n_layer,
                       .n_kv_head = ks.n_kv_head,
                       .head_dim = ks.head_dim,
                       .block_size = 16,
                       .k_type = RL_TYPE_F16,
                       .v_type = RL_TYPE_F16};
    /* room for every sequence at full context, capped at 1 GiB */
    size_t want = (size_t)max_seqs * (size_t)((n_ctx + 15) / 16 + 1) * rl_kv_block_bytes(&kc);
    kc.mem_bytes = want < ((size_t)1 << 30) ? want : ((size_t)1 << 30);
    if ((s = rl_kv_pool_new(&kc, &d->pool, err))) {
        rl_spec_draft_free(d);
        return s;
    }
    size_t mb = (size_t)max_batch, ms = (size_t)max_seqs;
    d->logits = rl_calloc(ms * (size_t)d->n_out, sizeof(float));
    d->b_tok = rl_calloc(mb, sizeof(int32_t));
    d->b_pos = rl_calloc(mb, sizeof(int32_t));
    d->b_seq = rl_calloc(mb, sizeof(int32_t));
    d->b_want = rl_calloc(mb, sizeof(bool));
    d->b_prompt = rl_calloc(mb, sizeof(bool));
    d->tables = rl_calloc(ms, sizeof(int32_t *));
    d->nblocks = rl_calloc(ms, sizeof(int32_t));
    d->which = rl_calloc(ms, sizeof(int32_t));
    if (!d->logits || !d->b_tok || !d->b_pos || !d->b_seq || !d->b_want || !d->b_prompt ||
        !d->tables || !d->nblocks || !d->which) {
        rl_spec_draft_free(d);
        return rl_err_set(err, RL_ERR_NOMEM, "draft: out of memory for step buffers");
    }
    *out = d;
    return RL_OK;
}

void rl_spec_draft_free(rl_spec_draft *d) {
    if (!d) return;
    rl_kv_pool_free(d->pool);
    rl_model_free(d->m);
    rl_free(d->logits);
    rl_free(d->b_tok);
    rl_free(d->b_pos);
    rl_free(d->b_seq);
    rl_free(d->b_want);
    rl_free(d->b_prompt);
    rl_free(d->tables);
    rl_free(d->nblocks);
    rl_free(d->which);
    rl_free(d);
}

size_t rl_spec_draft_weight_bytes(const rl_spec_draft *d) {
    return rl_model_weight_bytes(d->m);
}
int32_t rl_spec_draft_n_vocab(const rl_spec_draft *d) {
    return d->n_out;
}

double rl_spec_draft_step_s(const rl_spec_draft *d, int64_t *n_step) {
    if (n_step) *n_step = d->n_step;
    return d->step_s;
}

void rl_spec_draft_seq_init(rl_spec_draft_seq *s) {
    rl_kv_seq_init(&s->kv, 0);
    s->n_computed = 0;
    s->n_prompt = 0;
}

void rl_spec_draft_seq_free(rl_spec_draft *d, rl_spec_draft_seq *s) {
    rl_kv_seq_free(d->pool, &s->kv);
    s->n_computed = 0;
}

void rl_spec_draft_rollback(rl_spec_draft *d, rl_spec_draft_seq *s, int32_t n_valid) {
    if (s->n_computed > n_valid) {
        s->kv.n_tokens = s->n_computed; /* the draft pool keeps no prefix hashes */
        rl_kv_seq_truncate(d->pool, &s->kv, n_valid);
        s->n_computed = n_valid;
    }
}

static int32_t argmax(const float *x, int32_t n) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

/* Runs the batch assembled in d->b_* (n_tok tokens, n_seq sequences). */
static rl_status run(rl_spec_draft *d, int32_t n_tok, int32_t n_seq, rl_threadpool *tp,
                     rl_err *err) {
    rl_batch b = {.n_tok = n_tok,
                  .token = d->b_tok,
                  .pos = d->b_pos,
                  .seq = d->b_seq,
                  .want_logits = d->b_want,
                  .prompt = d->b_prompt,
                  .n_seq = n_seq,
                  .block_tables = (const int32_t *const *)d->tables,
                  .n_blocks = d->nblocks,
                  .n_vocab_out = d->n_out};
    double t0 = rl_time_s();
    rl_status s = rl_model_forward(d->m, &b, rl_kv_pool_layers(d->pool), d->logits, tp, err);
    if (n_tok <= 2 * n_seq) { /* a catch-up of a long prompt is not a draft step */
        d->step_s += rl_time_s() - t0;
        d->n_step++;
    }
    return s;
}

rl_status rl_spec_draft_propose(rl_spec_draft *d, rl_spec_draft_seq **seqs,
                                const int32_t *const *toks, const int32_t *n_toks, int32_t *k,
                                int32_t **out, int32_t n, rl_threadpool *tp, rl_err *err) {
    RL_ASSERT(n <= d->max_seqs);
    int32_t max_k = 0;
    /* make room: the draft stores K/V up to n_toks + k - 1 positions */
    for (int32_t i = 0; i < n; i++) {
        rl_spec_draft_seq *s = seqs[i];
        if (s->n_computed > n_toks[i]) rl_spec_draft_rollback(d, s, n_toks[i]);
        if (k[i] > 0 && (n_toks[i] + k[i] > d->n_ctx ||
                         rl_kv_seq_reserve(d->pool, &s->kv, n_toks[i] + k[i] - 1) != RL_OK))
            k[i] = 0;
        if (k[i] > max_k) max_k = k[i];
    }
    if (max_k == 0) return RL_OK;
    /* catch-up: every token the draft has not seen, chunked by max_batch;
     * the last token of each sequence yields its first draft */
    for (;;) {
        int32_t nt = 0, ns = 0;
        for (int32_t i = 0; i < n && nt < d->max_batch; i++) {
            rl_spec_draft_seq *s = seqs[i];
            if (k[i] <= 0 || s->n_computed >= n_toks[i]) continue;
            int32_t take = n_toks[i] - s->n_computed;
            if (take > d->max_batch - nt) take = d->max_batch - nt;
            for (int32_t j = 0; j < take; j++) {
                d->b_tok[nt] = toks[i][s->n_computed + j];
                d->b_pos[nt] = s->n_computed + j;
                d->b_seq[nt] = ns;
                d->b_want[nt] = s->n_computed + j == n_toks[i] - 1;
                d->b_prompt[nt] = s->n_computed + j < s->n_prompt; /* the target's role */
                nt++;
            }
            d->tables[ns] = s->kv.blocks;
            d->nblocks[ns] = s->kv.n_blocks;
            d->which[ns++] = i;
        }
        if (nt == 0) break;
        rl_status st = run(d, nt, ns, tp, err);
        if (st) return st;
        int32_t row = 0;
        for (int32_t q = 0; q < ns; q++) {
            int32_t i = d->which[q];
            rl_spec_draft_seq *s = seqs[i];
            int32_t took = 0;
            for (int32_t t = 0; t < nt; t++) took += d->b_seq[t] == q;
            s->n_computed += took;
            if (s->n_computed == n_toks[i])
                out[i][0] = argmax(d->logits + (size_t)row++ * (size_t)d->n_out, d->n_out);
        }
    }
    /* draft positions 1 .. k-1: one token per drafting sequence */
    for (int32_t j = 1; j < max_k; j++) {
        int32_t ns = 0;
        for (int32_t i = 0; i < n; i++) {
            if (k[i] <= j) continue;
            rl_spec_draft_seq *s = seqs[i];
            d->b_tok[ns] = out[i][j - 1];
            d->b_pos[ns] = n_toks[i] + j - 1;
            d->b_seq[ns] = ns;
            d->b_want[ns] = true;
            d->b_prompt[ns] = false;
            d->tables[ns] = s->kv.blocks;
            d->nblocks[ns] = s->kv.n_blocks;
            d->which[ns++] = i;
        }
        if (ns == 0) break;
        rl_status st = run(d, ns, ns, tp, err);
        if (st) return st;
        for (int32_t q = 0; q < ns; q++) {
            int32_t i = d->which[q];
            seqs[i]->n_computed++;
            out[i][j] = argmax(d->logits + (size_t)q * (size_t)d->n_out, d->n_out);
        }
    }
    return RL_OK;
}
