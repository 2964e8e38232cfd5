/* redline model: the forward driver -- batch validation, sorting by
 * sequence, embedding, the layers (all, or a pipeline stage's range), the
 * output head on the rows that want logits, and rl_model_embed's pooling.
 *
 * Invariants: nothing is computed for a batch that fails validation; no
 * allocation (all scratch was sized at load for max_batch tokens); a
 * token's result does not depend on the other tokens of its batch.
 */
#include "model/model-impl.h"

#include <math.h>
#include <string.h>

int32_t rl_batch_n_logits(const rl_batch *b) {
    if (!b || b->n_tok <= 0) return 0;
    if (!b->want_logits) return 1;
    int32_t n = 0;
    for (int32_t i = 0; i < b->n_tok; i++) n += b->want_logits[i] ? 1 : 0;
    return n;
}

static rl_status check_batch(const rl_model *m, const rl_batch *b, const rl_kv_layer *kv,
                             rl_err *err) {
    if (!b || !kv) return rl_err_set(err, RL_ERR_INVALID, "forward: NULL batch or KV layers");
    if (b->n_tok < 1)
        return rl_err_set(err, RL_ERR_INVALID, "forward: empty batch (n_tok = %d)", (int)b->n_tok);
    if (b->n_tok > m->max_batch)
        return rl_err_set(err, RL_ERR_LIMIT, "forward: n_tok %d exceeds max_batch %d",
                          (int)b->n_tok, (int)m->max_batch);
    if (!b->token || !b->pos || !b->seq || b->n_seq < 1 || !b->block_tables || !b->n_blocks)
        return rl_err_set(err, RL_ERR_INVALID, "forward: batch arrays missing or n_seq < 1");
    if (b->n_vocab_out < 0 || b->n_vocab_out > m->hp.n_vocab)
        return rl_err_set(err, RL_ERR_INVALID, "forward: n_vocab_out %d outside [0, %d]",
                          (int)b->n_vocab_out, (int)m->hp.n_vocab);
    for (int32_t il = 0; il < m->l1 - m->l0; il++) {
        const rl_kv_layer *L = &kv[il];
        if (L->n_kv_head != m->hp.n_kv_head || L->head_dim != m->hp.head_dim || L->block_size < 1 ||
            !L->k_base || !L->v_base || L->block_size != kv[0].block_size)
            return rl_err_set(err, RL_ERR_INVALID,
                              "forward: kv layer %d shape (%d heads x %d, block %d) does not match "
                              "the model (%d heads x %d)",
                              (int)il, (int)L->n_kv_head, (int)L->head_dim, (int)L->block_size,
                              (int)m->hp.n_kv_head, (int)m->hp.head_dim);
    }
    int32_t bs = kv[0].block_size;
    for (int32_t i = 0; i < b->n_tok; i++) {
        if (b->token[i] < 0 || b->token[i] >= m->hp.n_vocab)
            return rl_err_set(err, RL_ERR_RANGE, "forward: token[%d] = %d out of range [0, %d)",
                              (int)i, (int)b->token[i], (int)m->hp.n_vocab);
        int32_t s = b->seq[i];
        if (s < 0 || s >= b->n_seq)
            return rl_err_set(err, RL_ERR_INVALID, "forward: seq[%d] = %d out of range [0, %d)",
                              (int)i, (int)s, (int)b->n_seq);
        if (!b->block_tables[s] || b->n_blocks[s] < 0)
            return rl_err_set(err, RL_ERR_INVALID, "forward: sequence %d has no block table",
                              (int)s);
        if (b->pos[i] < 0 || b->pos[i] / bs >= b->n_blocks[s])
            return rl_err_set(err, RL_ERR_RANGE,
                              "forward: pos[%d] = %d outside sequence %d's %d blocks of %d", (int)i,
                              (int)b->pos[i], (int)s, (int)b->n_blocks[s], (int)bs);
    }
    return RL_OK;
}

/* Sorts batch indices by (seq, pos) into m->order (insertion sort: batches
 * arrive grouped and ordered, so this is linear in practice) and splits
 * the sorted order into per-sequence runs. */
static rl_status sort_batch(rl_model *m, const rl_batch *b, rl__fwd *f, rl_err *err) {
    int32_t n = b->n_tok, *ord = m->order;
    for (int32_t i = 0; i < n; i++) {
        int32_t j = i, si = b->seq[i], pi = b->pos[i];
        while (j > 0) {
            int32_t o = ord[j - 1];
            if (b->seq[o] < si || (b->seq[o] == si && b->pos[o] < pi)) break;
            if (b->seq[o] == si && b->pos[o] == pi)
                return rl_err_set(err, RL_ERR_INVALID,
                                  "forward: tokens %d and %d share sequence %d position %d", (int)o,
                                  (int)i, (int)si, (int)pi);
            ord[j] = o;
            j--;
        }
        ord[j] = i;
    }
    f->n_run = 0;
    for (int32_t j = 0; j < n; j++) {
        int32_t o = ord[j];
        m->tok_s[j] = b->token[o];
        m->pos_s[j] = b->pos[o];
        m->bt_s[j] = b->block_tables[b->seq[o]];
        if (b->prompt) m->fast_s[j] = b->prompt[o];
        if (j == 0 || b->seq[o] != b->seq[ord[j - 1]]) m->run_start[f->n_run++] = j;
    }
    m->run_start[f->n_run] = n;
    f->n = n;
    f->pos = m->pos_s;
    f->bt = m->bt_s;
    f->run_start = m->run_start;
    f->fast = b->prompt ? m->fast_s : NULL;
    return RL_OK;
}

/* The common part of every forward: checks and sorts b into *f, fills m->x
 * with the embedded tokens (x_in NULL) or x_in's rows (batch order), runs
 * the layers [l0, l1) and leaves m->slot_of set: m->x holds the final
 * hidden states of the sorted batch after. */
static rl_status run_layers(rl_model *m, const rl_batch *b, const rl_kv_layer *kv_layers,
                            const float *x_in, rl_threadpool *tp, rl__fwd *f, rl_err *err) {
    rl_status st = check_batch(m, b, kv_layers, err);
    if (st) return st;
    *f = (rl__fwd){0};
    f->kv = kv_layers;
    if (m->l0 > 0) { /* the arch code indexes KV by layer: place the stage's at l0.. */
        memcpy(m->kv_stage + m->l0, kv_layers, (size_t)(m->l1 - m->l0) * sizeof *kv_layers);
        f->kv = m->kv_stage;
    }
    f->tp = tp;
    if ((st = sort_batch(m, b, f, err))) return st;
    f->attn_pos = f->pos;
    if (!m->hp.causal) {
        for (int32_t r = 0; r < f->n_run; r++)
            for (int32_t j = f->run_start[r]; j < f->run_start[r + 1]; j++)
                m->attn_pos[j] = f->pos[f->run_start[r + 1] - 1];
        f->attn_pos = m->attn_pos;
    }
    const rl_hparams *hp = &m->hp;
    const int64_t E = hp->n_embd;
    for (int32_t j = 0; j < f->n; j++) {
        float *row = m->x + (size_t)j * E;
        if (x_in) {
            memcpy(row, x_in + (size_t)m->order[j] * E, (size_t)E * sizeof *row);
            continue;
        }
        rl_get_row(&m->tok_embd, m->tok_s[j], row);
        if (hp->embd_scale != 1.0f)
            for (int64_t d = 0; d < E; d++) row[d] *= hp->embd_scale;
    }
    if (m->arch->embed && !x_in) m->arch->embed(m, f);
    for (int32_t il = m->l0; il < m->l1; il++) m->arch->layer(m, f, il);
    for (int32_t j = 0; j < f->n; j++) m->slot_of[m->order[j]] = j;
    return RL_OK;
}

/* logits_out[n_out][n_vocab_out] from the normed rows m->xn[n_out]. */
static void head_logits(rl_model *m, const rl_batch *b, int32_t n_out, float *logits_out,
                        rl_threadpool *tp) {
    const rl_hparams *hp = &m->hp;
    /* a restricted head is a view of the first rows: each row's dot
     * product is unchanged, only fewer rows are read.  The head takes the
     * per-token path for every row (prompt or not): a prefill wants one
     * row, for which packing the vocabulary's rows would cost more than it
     * saves. */
    rl_mat out = m->output;
    if (b->n_vocab_out > 0) out.n_rows = b->n_vocab_out;
    rl_matmul(&out, m->xn, logits_out, n_out, m->mm_scratch, tp);
    if (hp->logit_mul != 1.0f) {
        size_t total = (size_t)n_out * (size_t)out.n_rows;
        for (size_t i = 0; i < total; i++) logits_out[i] *= hp->logit_mul;
    }
    if (hp->final_softcap > 0.0f) {
        float c = hp->final_softcap;
        size_t total = (size_t)n_out * (size_t)out.n_rows;
        for (size_t i = 0; i < total; i++) logits_out[i] = c * tanhf(logits_out[i] / c);
    }
}

rl_status rl_model_forward(rl_model *m, const rl_batch *b, const rl_kv_layer *kv_layers,
                           float *logits_out, rl_threadpool *tp, rl_err *err) {
    if (m->l0 != 0 || m->l1 != m->hp.n_layer)
        return rl_err_set(err, RL_ERR_INVALID,
                          "forward: model holds layers [%d, %d) of %d only (a pipeline stage: "
                          "rl_model_forward_stage)",
                          (int)m->l0, (int)m->l1, (int)m->hp.n_layer);
    if (!m->output.data)
        return rl_err_set(err, RL_ERR_UNSUPPORTED,
                          "forward: the %s model has no output head (an embedding model)",
                          m->arch_name);
    if (b && !logits_out && rl_batch_n_logits(b) > 0)
        return rl_err_set(err, RL_ERR_INVALID, "forward: logits wanted but logits_out is NULL");
    rl__fwd f;
    rl_status st = run_layers(m, b, kv_layers, NULL, tp, &f, err);
    if (st) return st;

    /* Rows that want logits, in batch order. */
    const int64_t E = m->hp.n_embd;
    int32_t n_out = 0;
    for (int32_t i = 0; i < b->n_tok; i++) {
        bool want = b->want_logits ? b->want_logits[i] : (i == b->n_tok - 1);
        if (!want) continue;
        int32_t slot = m->slot_of[i];
        rl__norm_rows(m->xn + (size_t)n_out * E, m->x + (size_t)slot * E, m->output_norm, 1, E,
                      m->hp.eps);
        n_out++;
    }
    if (n_out == 0) return RL_OK;
    head_logits(m, b, n_out, logits_out, tp);
    return RL_OK;
}

rl_status rl_model_forward_plain(void *ud, rl_model *m, const rl_batch *b,
                                 const rl_kv_layer *kv_layers, float *logits_out, rl_threadpool *tp,
                                 rl_err *err) {
    (void)ud;
    return rl_model_forward(m, b, kv_layers, logits_out, tp, err);
}

rl_status rl_model_forward_stage(rl_model *m, const rl_batch *b, const rl_kv_layer *kv_layers,
                                 const float *x_in, float *x_out, rl_threadpool *tp, rl_err *err) {
    if (!x_in && !m->has_io)
        return rl_err_set(err, RL_ERR_INVALID,
                          "forward: stage at layer %d needs the hidden state (x_in)", (int)m->l0);
    if (!x_out) return rl_err_set(err, RL_ERR_INVALID, "forward: x_out is NULL");
    rl__fwd f;
    rl_status st = run_layers(m, b, kv_layers, x_in, tp, &f, err);
    if (st) return st;
    const int64_t E = m->hp.n_embd;
    for (int32_t i = 0; i < b->n_tok; i++)
        memcpy(x_out + (size_t)i * E, m->x + (size_t)m->slot_of[i] * E, (size_t)E * sizeof(float));
    return RL_OK;
}

rl_status rl_model_forward_head(rl_model *m, const rl_batch *b, const float *x, float *logits_out,
                                rl_threadpool *tp, rl_err *err) {
    if (!m->has_io)
        return rl_err_set(err, RL_ERR_INVALID, "forward: this stage holds no output head");
    if (!b || b->n_tok < 1 || b->n_tok > m->max_batch || !x || !logits_out || b->n_vocab_out < 0 ||
        b->n_vocab_out > m->hp.n_vocab)
        return rl_err_set(err, RL_ERR_INVALID, "forward head: malformed batch or buffers");
    int32_t n_out = rl_batch_n_logits(b);
    const int64_t E = m->hp.n_embd;
    for (int32_t r = 0; r < n_out; r++)
        rl__norm_rows(m->xn + (size_t)r * E, x + (size_t)r * E, m->output_norm, 1, E, m->hp.eps);
    if (n_out > 0) head_logits(m, b, n_out, logits_out, tp);
    return RL_OK;
}

rl_status rl_model_embed(rl_model *m, const int32_t *tokens, int32_t n,
                         const rl_kv_layer *kv_layers, const int32_t *block_table, int32_t n_blocks,
                         float *out, rl_threadpool *tp, rl_err *err) {
    const rl_hparams *hp = &m->hp;
    const int64_t E = hp->n_embd;
    if (n < 1 || !tokens || !out)
        return rl_err_set(err, RL_ERR_INVALID, "embed: empty input (n = %d)", (int)n);
    int32_t max = rl_model_embed_max_tokens(m);
    if (n > max)
        return rl_err_set(err, RL_ERR_LIMIT, "embed: %d tokens exceed the %d this model takes",
                          (int)n, (int)max);
    /* causal: chunks of max_batch (each attends to the K/V of the ones
     * before); non-causal: one forward (n <= max_batch) */
    for (int64_t d = 0; d < E; d++) m->pool_acc[d] = 0.0;
    for (int32_t p0 = 0; p0 < n; p0 += m->max_batch) {
        int32_t nc = n - p0 < m->max_batch ? n - p0 : m->max_batch;
        int32_t *pos = m->emb_idx, *seq = m->emb_idx + m->max_batch;
        for (int32_t j = 0; j < nc; j++) {
            pos[j] = p0 + j;
            seq[j] = 0;
        }
        rl_batch b = {.n_tok = nc,
                      .token = tokens + p0,
                      .pos = pos,
                      .seq = seq,
                      .n_seq = 1,
                      .block_tables = &block_table,
                      .n_blocks = &n_blocks};
        rl__fwd f;
        rl_status st = run_layers(m, &b, kv_layers, NULL, tp, &f, err);
        if (st) return st;
        for (int32_t j = 0; j < nc; j++) {
            int32_t p = p0 + j;
            bool take = hp->pooling == RL_POOLING_MEAN ||
                        (hp->pooling == RL_POOLING_CLS && p == 0) ||
                        (hp->pooling == RL_POOLING_LAST && p == n - 1);
            if (!take) continue;
            float *row = m->x + (size_t)j * E;
            if (m->output_norm) {
                rl__norm_rows(m->xn, row, m->output_norm, 1, E, hp->eps);
                row = m->xn;
            }
            for (int64_t d = 0; d < E; d++) m->pool_acc[d] += row[d];
        }
    }
    double norm = 0.0, div = hp->pooling == RL_POOLING_MEAN ? (double)n : 1.0;
    for (int64_t d = 0; d < E; d++) {
        m->pool_acc[d] /= div;
        norm += m->pool_acc[d] * m->pool_acc[d];
    }
    norm = norm > 0.0 ? 1.0 / sqrt(norm) : 0.0;
    for (int64_t d = 0; d < E; d++) out[d] = (float)(m->pool_acc[d] * norm);
    return RL_OK;
}
