/* Embedding requests (rl_engine_embed): pooled, L2-normalised vectors of
 * token sequences, computed by the step loop between generation steps.
 *
 * A caller's job lives on its own stack: rl_engine_embed queues it on
 * e->embeds (under mu), wakes the step loop and waits on ev_cond until the
 * loop has run it.  Each step (rl__engine_run_embeds, engine thread) takes
 * the queue and runs every job as its own forward(s) through
 * rl_model_embed, with KV blocks borrowed from the engine's pool for the
 * duration of the job (never hashed into the prefix cache: an embedding
 * forward's K/V is not a generation's).  A job whose blocks the pool cannot
 * supply now (generation holds them) stays queued for a later step; one the
 * pool could never hold fails.  So embeddings share the engine's model,
 * threads and KV memory with generation and are served in the same loop,
 * but not inside the same forward batch as generated tokens (the forward
 * returns logits, not hidden states, for a mixed batch).
 *
 * Without a step thread (rl_engine_step driven by the caller) the caller
 * is the loop: rl_engine_embed runs the job at once in its thread.
 */
#include "redline.h"

#include <stdio.h>
#include <string.h>

#include "engine/engine-impl.h"

int32_t rl_engine_n_embd(const rl_engine *e) {
    return rl_model_n_embd(e->model);
}

int32_t rl_engine_embed_max_tokens(const rl_engine *e) {
    int32_t n = rl_model_embed_max_tokens(e->model);
    return n < e->n_ctx ? n : e->n_ctx;
}

const char *rl_engine_pooling(const rl_engine *e) {
    switch (rl_model_pooling(e->model)) {
    case RL_POOLING_CLS:
        return "cls";
    case RL_POOLING_LAST:
        return "last";
    default:
        return "mean";
    }
}

bool rl_engine_can_generate(const rl_engine *e) {
    return rl_model_has_head(e->model);
}

/* Runs job j (engine thread, or the caller without one).  False when the
 * pool cannot supply its blocks now (try again later). */
static bool run_job(rl_engine *e, rl__embed_job *j) {
    rl_kv_seq seq;
    rl_kv_seq_init(&seq, 0);
    rl_err err = {0};
    if (rl_kv_seq_reserve(e->pool, &seq, j->n)) {
        rl_kv_seq_free(e->pool, &seq);
        int32_t total = rl_kv_pool_stats(e->pool).n_blocks;
        if (rl_kv_seq_blocks_needed(e->pool, &seq, j->n) <= total) return false;
        j->st = RL_ERR_LIMIT;
        snprintf(j->msg, sizeof j->msg, "input: %d tokens need more KV blocks than the pool has",
                 (int)j->n);
        return true;
    }
    j->st = rl_model_embed(e->model, j->tokens, j->n, rl_kv_pool_layers(e->pool), seq.blocks,
                           seq.n_blocks, j->out, e->tp, &err);
    if (j->st) snprintf(j->msg, sizeof j->msg, "%s", err.msg);
    rl_kv_seq_free(e->pool, &seq);
    return true;
}

int32_t rl__engine_run_embeds(rl_engine *e) {
    pthread_mutex_lock(&e->mu);
    rl__embed_job *list = e->embeds;
    e->embeds = NULL;
    pthread_mutex_unlock(&e->mu);
    if (!list) return 0;
    int32_t n_tok = 0;
    rl__embed_job *keep = NULL, **tail = &keep;
    double t0 = rl_time_s();
    while (list) {
        rl__embed_job *j = list;
        list = j->next;
        if (!run_job(e, j)) { /* blocks busy: stays queued, in order */
            j->next = NULL;
            *tail = j;
            tail = &j->next;
            continue;
        }
        if (!j->st) n_tok += j->n;
        pthread_mutex_lock(&e->mu);
        j->done = true;
        pthread_cond_broadcast(&e->ev_cond);
        pthread_mutex_unlock(&e->mu);
    }
    e->busy_s += rl_time_s() - t0;
    e->st_prompt += (uint64_t)n_tok;
    if (keep) {
        pthread_mutex_lock(&e->mu);
        *tail = e->embeds; /* newer jobs after the older ones */
        e->embeds = keep;
        pthread_mutex_unlock(&e->mu);
    }
    return n_tok;
}

void rl__engine_fail_embeds(rl_engine *e) {
    pthread_mutex_lock(&e->mu);
    for (rl__embed_job *j = e->embeds; j; j = j->next) {
        j->st = RL_ERR_INVALID;
        snprintf(j->msg, sizeof j->msg, "engine: shutting down");
        j->done = true;
    }
    e->embeds = NULL;
    pthread_cond_broadcast(&e->ev_cond);
    pthread_mutex_unlock(&e->mu);
}

rl_status rl_engine_embed(rl_engine *e, const int32_t *tokens, int32_t n, float *out, rl_err *err) {
    int32_t max = rl_engine_embed_max_tokens(e);
    if (n <= 0 || !tokens) return rl_err_set(err, RL_ERR_RANGE, "input: must not be empty");
    if (n > max)
        return rl_err_set(err, RL_ERR_LIMIT,
                          "input: %d tokens exceed the %d this model embeds at once", (int)n,
                          (int)max);
    for (int32_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= e->n_vocab)
            return rl_err_set(err, RL_ERR_RANGE,
                              "input: token %d at index %d is outside the vocabulary [0, %d)",
                              (int)tokens[i], (int)i, (int)e->n_vocab);
    rl__embed_job j = {.tokens = tokens, .n = n, .out = out};
    if (!e->thread_started) {
        /* the caller drives the loop: nothing else runs the model now */
        if (!run_job(e, &j))
            return rl_err_set(err, RL_ERR_LIMIT, "input: the KV pool is busy (step the engine)");
    } else {
        pthread_mutex_lock(&e->mu);
        if (e->stop) {
            pthread_mutex_unlock(&e->mu);
            return rl_err_set(err, RL_ERR_INVALID, "engine: shutting down");
        }
        rl__embed_job **p = &e->embeds; /* FIFO */
        while (*p) p = &(*p)->next;
        *p = &j;
        pthread_cond_broadcast(&e->work_cond);
        while (!j.done) pthread_cond_wait(&e->ev_cond, &e->mu);
        pthread_mutex_unlock(&e->mu);
    }
    if (j.st) return rl_err_set(err, j.st, "%s", j.msg);
    return RL_OK;
}
