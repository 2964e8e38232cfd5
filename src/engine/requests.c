/* The engine's requests: submit, cancel and the event queues of
 * include/redline.h, the lists that hold requests (struct rl_engine), the
 * end of a request (rl__engine_finish) and the step's first stage, which
 * moves new and cancelled requests to the step loop.
 *
 * Locking: the id table, the inbox, the cancel list, the queue counters
 * and every request's event ring are under e->mu; the active list and
 * everything the scheduler sees are the step loop's alone.  A request is
 * freed only by rl_engine_next after its DONE event is taken (or by
 * rl_engine_free), so the step loop may hold a request until it queues
 * that event, and must not touch it after.
 *
 * Lists: by_id (hash on the sequential id, so buckets fill evenly) holds
 * every request from submit until its DONE is taken; the inbox (newest
 * first) those not yet handed to the scheduler; the cancel list (highest
 * id first) those cancelled and not yet finished; the active list
 * (newest first, the order the draft planner sees) those the scheduler
 * holds. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "engine/engine-impl.h"

static void ereq_free(ereq *r) {
    rl_gmatch_free(r->gm);
    rl_gmatch_free(r->gm_scratch);
    rl_grammar_free(r->grammar);
    rl_free(r->base.tokens);
    rl_sampler_free(r->sampler);
    rl_detok_free(&r->detok);
    rl_free(r->ev);
    pthread_cond_destroy(&r->ev_wait);
    rl_free(r);
}

/* ---- the request lists (see struct rl_engine) ---- */
static ereq *find_req(rl_engine *e, uint64_t id) { /* under mu */
    for (ereq *r = e->by_id[id & e->id_mask]; r; r = r->id_next)
        if (r->base.id == id) return r;
    return NULL;
}

static void forget_req(rl_engine *e, ereq *r) { /* under mu */
    for (ereq **p = &e->by_id[r->base.id & e->id_mask]; *p; p = &(*p)->id_next)
        if (*p == r) {
            *p = r->id_next;
            return;
        }
}

/* Puts r on the active list after pos (NULL: at the front). */
static void active_insert(rl_engine *e, ereq *pos, ereq *r) {
    ereq **next = pos ? &pos->anext : &e->active;
    r->aprev = pos;
    r->anext = *next;
    if (*next) (*next)->aprev = r;
    *next = r;
    r->in_active = true;
}

static void active_remove(rl_engine *e, ereq *r) {
    if (!r->in_active) return;
    if (r->aprev)
        r->aprev->anext = r->anext;
    else
        e->active = r->anext;
    if (r->anext) r->anext->aprev = r->aprev;
    r->in_active = false;
}

/* Ends request r (engine thread): frees its KV, queues the DONE event. */
void rl__engine_finish(rl_engine *e, ereq *r, rl_finish_reason why, rl_status code,
                       const char *msg) {
    if (r->finished) return;
    if (r->base.state != RL_SCHED_NEW) rl_sched_remove(e->sched, &r->base);
    active_remove(e, r);
    if (r->has_draft_seq) {
        rl_spec_draft_seq_free(e->draft, &r->draft_seq);
        r->has_draft_seq = false;
    }
    rl_event ev;
    memset(&ev, 0, sizeof ev);
    ev.kind = RL_EV_DONE;
    ev.token = -1;
    ev.finish = why;
    ev.n_prompt = r->base.n_prompt;
    ev.n_cached = r->base.n_cached;
    ev.n_generated = r->n_generated;
    ev.t_first_token_s = r->t_first > 0 ? r->t_first - r->t_submit : 0;
    ev.t_total_s = rl_time_s() - r->t_submit;
    ev.error_code = code;
    if (msg) snprintf(ev.error, sizeof ev.error, "%s", msg);
    pthread_mutex_lock(&e->mu);
    r->finished = true;
    e->n_queued--;
    if (r->cancel_listed) { /* cancelled meanwhile: off the list before DONE can free it */
        ereq **p = &e->cancels;
        while (*p != r) p = &(*p)->cancel_next;
        *p = r->cancel_next;
        r->cancel_listed = false;
    }
    e->st_finished++;
    rl__engine_push_event(e, r, &ev);
    pthread_mutex_unlock(&e->mu);
}

/* rl_engine_free's part (no thread runs): every request, finished or not. */
void rl__engine_free_requests(rl_engine *e) {
    for (uint64_t i = 0; e->by_id && i <= e->id_mask; i++)
        while (e->by_id[i]) {
            ereq *r = e->by_id[i];
            e->by_id[i] = r->id_next;
            if (e->sched && !r->finished && r->base.state != RL_SCHED_NEW)
                rl_sched_remove(e->sched, &r->base);
            if (r->has_draft_seq) rl_spec_draft_seq_free(e->draft, &r->draft_seq);
            ereq_free(r);
        }
}

/* The first stage of a step (engine thread): the inbox to the scheduler
 * (newest first, as submitted requests are queued) and the cancelled
 * requests ended (newest first). */
void rl__engine_take_inbox(rl_engine *e) {
    pthread_mutex_lock(&e->mu);
    ereq *in = e->inbox, *cancels = e->cancels;
    e->inbox = e->cancels = NULL;
    e->n_inbox = 0;
    ereq *last = NULL; /* the new requests go before the older active ones */
    for (ereq *r = in; r; r = r->inbox_next) {
        if (r->cancel) continue; /* never scheduled: ended below */
        rl_sched_add(e->sched, &r->base);
        e->st_prompt += (uint64_t)r->base.n_prompt;
        active_insert(e, last, r);
        last = r;
    }
    for (ereq *c = cancels; c; c = c->cancel_next) c->cancel_listed = false;
    pthread_mutex_unlock(&e->mu);
    /* act outside the lock (finish takes it); once DONE is queued another
     * thread may free c, so its link is read first */
    for (ereq *c = cancels, *next; c; c = next) {
        next = c->cancel_next;
        rl__engine_finish(e, c, RL_FINISH_CANCELLED, RL_OK, NULL);
    }
}

/* ---- submit / cancel / next ---- */
rl_status rl_engine_submit(rl_engine *e, const int32_t *prompt, int32_t n_prompt,
                           const rl_gen_params *gp, uint64_t *id, rl_err *err) {
    rl_gen_params dg;
    rl_gen_params_default(&dg);
    if (!gp) gp = &dg;
    if (n_prompt <= 0 || !prompt) return rl_err_set(err, RL_ERR_RANGE, "prompt: must not be empty");
    if (!rl_model_has_head(e->model))
        return rl_err_set(err, RL_ERR_UNSUPPORTED,
                          "model: the %s model is an embedding model (no output head): it "
                          "serves embeddings only",
                          rl_model_arch(e->model));
    for (int32_t i = 0; i < n_prompt; i++)
        if (prompt[i] < 0 || prompt[i] >= e->n_vocab)
            return rl_err_set(err, RL_ERR_RANGE,
                              "prompt: token %d at index %d is outside the vocabulary [0, %d)",
                              prompt[i], i, e->n_vocab);
    if (n_prompt >= e->n_ctx)
        return rl_err_set(err, RL_ERR_LIMIT,
                          "prompt: %d tokens leave no room to generate in a context of %d tokens",
                          n_prompt, e->n_ctx);
    rl_status s = rl_sample_params_validate(&gp->sample, e->n_vocab, err);
    if (s) return s;
    if (gp->n_stop < 0 || gp->n_stop > RL_MAX_STOP)
        return rl_err_set(err, RL_ERR_INVALID, "stop: at most %d stop strings", RL_MAX_STOP);
    for (int32_t i = 0; i < gp->n_stop; i++) {
        size_t l = strnlen(gp->stop[i], RL_MAX_STOP_LEN + 1);
        if (l == 0 || l > RL_MAX_STOP_LEN || !rl_utf8_valid(gp->stop[i], l))
            return rl_err_set(err, RL_ERR_INVALID, "stop[%d]: must be 1..%d bytes of valid UTF-8",
                              i, RL_MAX_STOP_LEN);
    }
    if (gp->spec != RL_SPEC_NONE && gp->spec != RL_SPEC_NGRAM && gp->spec != RL_SPEC_DRAFT)
        return rl_err_set(err, RL_ERR_INVALID, "spec: unknown speculation mode %d", (int)gp->spec);
    if (gp->spec == RL_SPEC_DRAFT && !e->draft)
        return rl_err_set(err, RL_ERR_INVALID, "spec: the engine has no draft model (-md)");
    size_t tcl = strnlen(gp->think_close, RL_MAX_STOP_LEN + 1);
    if (tcl > RL_MAX_STOP_LEN || (tcl && !rl_utf8_valid(gp->think_close, tcl)))
        return rl_err_set(err, RL_ERR_INVALID, "think_close: must be 0..%d bytes of valid UTF-8",
                          RL_MAX_STOP_LEN);
    if (tcl && gp->think_budget < 0)
        return rl_err_set(err, RL_ERR_INVALID, "think_budget: must be >= 0, got %d",
                          (int)gp->think_budget);
    int32_t max_new = gp->max_tokens > 0 ? gp->max_tokens : e->n_ctx - n_prompt;
    if (max_new > e->n_ctx - n_prompt) max_new = e->n_ctx - n_prompt;

    ereq *r = rl_calloc(1, sizeof *r);
    if (!r) return rl_err_set(err, RL_ERR_NOMEM, "engine: out of memory");
    if (pthread_cond_init(&r->ev_wait, NULL)) {
        rl_free(r);
        return rl_err_set(err, RL_ERR_NOMEM, "engine: out of memory");
    }
    r->gp = *gp;
    r->max_new = max_new;
    r->base.n_prompt = r->base.n_tokens = n_prompt;
    r->base.max_total = n_prompt + max_new;
    r->base.priority = gp->priority;
    rl_kv_seq_init(&r->base.kv, gp->cache_salt);
    /* drafts never push n_tokens past max_total - 1 (rl_spec_planner_run) */
    r->base.tokens = rl_malloc((size_t)r->base.max_total * sizeof(int32_t));
    r->sampler = rl_sampler_new(&gp->sample, e->n_vocab, err);
    if (!r->base.tokens || !r->sampler) {
        rl_status fs = r->sampler ? rl_err_set(err, RL_ERR_NOMEM, "engine: out of memory")
                                  : (err ? err->code : RL_ERR_NOMEM);
        ereq_free(r); /* after reading r->sampler: no use after free */
        return fs;
    }
    r->gp.grammar = NULL; /* the caller's reference is not ours */
    if (gp->grammar) {
        pthread_mutex_lock(&e->mu);
        if (!e->trie) e->trie = rl_vocab_trie_from_tokenizer(e->tok, err);
        rl_vocab_trie *trie = e->trie;
        pthread_mutex_unlock(&e->mu);
        r->grammar = rl_grammar_retain(gp->grammar);
        if (!trie || !(r->gm = rl_gmatch_new(r->grammar, trie, err)) ||
            !(r->gm_scratch = rl_gmatch_clone(r->gm, err))) {
            ereq_free(r);
            return err && err->code ? err->code : RL_ERR_NOMEM;
        }
    }
    if (gp->spec == RL_SPEC_DRAFT) { /* no draft K/V until its first proposal */
        rl_spec_draft_seq_init(&r->draft_seq);
        r->draft_seq.n_prompt = n_prompt; /* the draft marks the prompt as the target does */
        r->has_draft_seq = true;
    }
    if (tcl) { /* the close's tokens, control tokens ("</think>") included */
        int32_t *ti = NULL;
        size_t nt = 0;
        if ((s = rl_tokenizer_encode(e->tok, gp->think_close, tcl, RL_TOK_PARSE_SPECIAL, &ti, &nt,
                                     err))) {
            ereq_free(r);
            return s;
        }
        if (nt > sizeof r->think_ids / sizeof r->think_ids[0]) {
            rl_free(ti);
            ereq_free(r);
            return rl_err_set(err, RL_ERR_INVALID, "think_close: too many tokens");
        }
        memcpy(r->think_ids, ti, nt * sizeof *ti);
        r->n_think_ids = (int32_t)nt;
        rl_free(ti);
        r->think = gp->think_open ? RL__THINK_IN : RL__THINK_WAIT;
    }
    memcpy(r->base.tokens, prompt, (size_t)n_prompt * sizeof(int32_t));
    for (int32_t i = 0; i < n_prompt; i++) rl_sampler_accept(r->sampler, prompt[i]);
    rl_detok_init(&r->detok, e->tok, RL_TOK_SKIP_SPECIAL);
    if ((s = rl_sched_admissible(e->sched, &r->base, err))) {
        ereq_free(r);
        return s;
    }
    r->t_submit = rl_time_s();
    pthread_mutex_lock(&e->mu);
    int32_t queued = e->n_queued;
    if (queued >= e->params.max_waiting + e->params.max_seqs) {
        pthread_mutex_unlock(&e->mu);
        ereq_free(r);
        return rl_err_set(err, RL_ERR_LIMIT, "engine: queue full (%d requests)", queued);
    }
    r->base.id = e->next_id++;
    ereq **bucket = &e->by_id[r->base.id & e->id_mask];
    r->id_next = *bucket;
    *bucket = r;
    r->inbox_next = e->inbox;
    e->inbox = r;
    e->n_inbox++;
    e->n_queued++;
    *id = r->base.id;
    pthread_cond_broadcast(&e->work_cond);
    pthread_mutex_unlock(&e->mu);
    return RL_OK;
}

void rl_engine_cancel(rl_engine *e, uint64_t id) {
    pthread_mutex_lock(&e->mu);
    ereq *r = find_req(e, id);
    if (r && !r->cancel && !r->finished) {
        /* the cancel list is kept in id order, newest first, so a step
         * ends its cancellations in the same order whatever their timing */
        ereq **p = &e->cancels;
        while (*p && (*p)->base.id > id) p = &(*p)->cancel_next;
        r->cancel = true;
        r->cancel_next = *p;
        *p = r;
        r->cancel_listed = true;
    }
    pthread_cond_broadcast(&e->work_cond);
    pthread_mutex_unlock(&e->mu);
}

rl_status rl_engine_next(rl_engine *e, uint64_t id, rl_event *ev, int timeout_ms) {
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    if (timeout_ms > 0) {
        dl.tv_sec += timeout_ms / 1000;
        dl.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
        if (dl.tv_nsec >= 1000000000L) {
            dl.tv_sec++;
            dl.tv_nsec -= 1000000000L;
        }
    }
    pthread_mutex_lock(&e->mu);
    ereq *r;
    for (;;) {
        r = find_req(e, id);
        if (!r) {
            pthread_mutex_unlock(&e->mu);
            return RL_ERR_NOT_FOUND;
        }
        if (r->ev_n > 0) break;
        if (timeout_ms == 0 ||
            (timeout_ms > 0 && pthread_cond_timedwait(&r->ev_wait, &e->mu, &dl) != 0 &&
             r->ev_n == 0)) {
            pthread_mutex_unlock(&e->mu);
            return RL_ERR_LIMIT;
        }
        if (timeout_ms < 0) pthread_cond_wait(&r->ev_wait, &e->mu);
    }
    *ev = r->ev[r->ev_head];
    r->ev_head = (r->ev_head + 1) % r->ev_cap;
    r->ev_n--;
    if (ev->kind == RL_EV_DONE) {
        forget_req(e, r);
        ereq_free(r);
    }
    pthread_mutex_unlock(&e->mu);
    return RL_OK;
}

rl_engine_stats rl_engine_get_stats(rl_engine *e) {
    pthread_mutex_lock(&e->mu);
    rl_engine_stats s = e->stats_snapshot;
    s.requests_finished = e->st_finished;
    pthread_mutex_unlock(&e->mu);
    return s;
}
