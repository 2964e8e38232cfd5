/* The engine (L8): the step loop schedule -> forward -> sample -> update,
 * and the thread-safe request interface of include/redline.h.
 *
 * Threads: callers submit, cancel and take events under `mu`; the step
 * loop (rl_engine_step, on the engine thread or the caller's) is the only
 * code that touches the scheduler, the KV pool, the model and the
 * samplers, so those need no lock.  New requests wait in an inbox until the
 * next step picks them up; cancellation sets a flag the next step acts on.
 *
 * Per-step buffers (batch arrays, logits rows) are sized once at creation;
 * per-request memory (token array, sampler, event queue) at submit.
 */
#include "redline.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine/engine-impl.h"
#include "model/kcal.h"

/* ---- parameters ---- */
void rl_engine_params_default(rl_engine_params *p) {
    memset(p, 0, sizeof *p);
    p->block_size = 16;
    p->max_batch_tokens = 256;
    p->max_seqs = 32;
    p->max_waiting = 1024;
    p->prefix_cache = true;
    p->chunked_prefill = true;
    p->cache_type_k = "f16";
    p->cache_type_v = "f16";
    p->draft_max = 5;
    p->draft_n_vocab = 32768; /* see docs/PERFORMANCE.md, speculative decoding */
    p->spec_max_batch = 4;
    p->ngram_min = 1;
    p->ngram_max = 3;
}

void rl_gen_params_default(rl_gen_params *p) {
    memset(p, 0, sizeof *p);
    p->sample = rl_sample_params_default();
    p->max_tokens = 128;
}

/* ---- event queues (under e->mu) ---- */
static void push_event(rl_engine *e, ereq *r, const rl_event *ev) {
    if (r->ev_n == r->ev_cap) {
        int32_t nc = r->ev_cap ? r->ev_cap * 2 : 16;
        rl_event *q = rl_malloc((size_t)nc * sizeof *q);
        if (!q) return; /* out of memory: drop (the DONE event has a reserved slot) */
        for (int32_t i = 0; i < r->ev_n; i++) q[i] = r->ev[(r->ev_head + i) % r->ev_cap];
        rl_free(r->ev);
        r->ev = q;
        r->ev_head = 0;
        r->ev_cap = nc;
    }
    r->ev[(r->ev_head + r->ev_n) % r->ev_cap] = *ev;
    r->ev_n++;
    pthread_cond_broadcast(&e->ev_cond);
}

static double now_s(void) { return rl_time_s(); }

/* ---- request lifetime ---- */
static void ereq_free(ereq *r) {
    rl_gmatch_free(r->gm);
    rl_gmatch_free(r->gm_scratch);
    rl_grammar_free(r->grammar);
    rl_free(r->base.tokens);
    rl_sampler_free(r->sampler);
    rl_detok_free(&r->detok);
    rl_free(r->ev);
    rl_free(r);
}

static ereq *find_req(rl_engine *e, uint64_t id) {
    for (ereq *r = e->reqs; r; r = r->next)
        if (r->base.id == id) return r;
    return NULL;
}

static void unlink_req(rl_engine *e, ereq *r) {
    for (ereq **p = &e->reqs; *p; p = &(*p)->next)
        if (*p == r) {
            *p = r->next;
            return;
        }
}

/* Ends request r (engine thread): frees its KV, queues the DONE event. */
static void finish_code(rl_engine *e, ereq *r, rl_finish_reason why, rl_status code, const char *msg) {
    if (r->finished) return;
    if (r->base.state != RL_SCHED_NEW) rl_sched_remove(e->sched, &r->base);
    if (r->has_draft_seq) {
        rl_spec_draft_seq_free(e->draft, &r->draft_seq);
        r->has_draft_seq = false;
    }
    r->finished = true;
    rl_event ev;
    memset(&ev, 0, sizeof ev);
    ev.kind = RL_EV_DONE;
    ev.token = -1;
    ev.finish = why;
    ev.n_prompt = r->base.n_prompt;
    ev.n_cached = r->base.n_cached;
    ev.n_generated = r->n_generated;
    ev.t_first_token_s = r->t_first > 0 ? r->t_first - r->t_submit : 0;
    ev.t_total_s = now_s() - r->t_submit;
    ev.error_code = code;
    if (msg) snprintf(ev.error, sizeof ev.error, "%s", msg);
    pthread_mutex_lock(&e->mu);
    e->st_finished++;
    push_event(e, r, &ev);
    pthread_mutex_unlock(&e->mu);
}

static void finish(rl_engine *e, ereq *r, rl_finish_reason why, const char *msg) {
    finish_code(e, r, why, why == RL_FINISH_ERROR ? RL_ERR_INVALID : RL_OK, msg);
}

/* Ends r with the error in err, its code included (for errors of the
 * request's own making, e.g. its grammar; a failed forward is finish()). */
static void fail(rl_engine *e, ereq *r, const rl_err *err) {
    finish_code(e, r, RL_FINISH_ERROR, err->code, err->msg);
}

static void update_stats(rl_engine *e);

/* ---- creation ---- */
static rl_status parse_cache_type(const char *s, rl_type *t, const char *which, rl_err *err) {
    if (!s || !*s) s = "f16";
    if (!rl_type_from_name(s, t) || !rl_kv_type_known(*t))
        return rl_err_set(err, RL_ERR_UNSUPPORTED,
                          "%s: cache type '%s' is not supported (f16, f32, q8_0, q8_64, q4_0, iq4_nl)",
                          which, s);
    return RL_OK;
}

rl_status rl_engine_new(const rl_engine_params *p, rl_engine **out, rl_err *err) {
    *out = NULL;
    rl_engine_params d;
    rl_engine_params_default(&d);
    if (!p) p = &d;
    if (p->max_batch_tokens <= 0 || p->max_seqs <= 0 || p->block_size <= 0 || p->n_threads < 0 ||
        p->max_batch_tokens > 65536 || p->max_seqs > 4096 || p->draft_max < 0 ||
        p->draft_max > 32 || p->spec_max_batch < 0 || p->ngram_min < 1 ||
        p->ngram_max < p->ngram_min || p->weights < 0 || p->weights > 2)
        return rl_err_set(err, RL_ERR_INVALID,
                          "engine: max_batch_tokens %d, max_seqs %d, block_size %d, threads %d out of range",
                          p->max_batch_tokens, p->max_seqs, p->block_size, p->n_threads);
    if (p->draft_n_vocab < 0)
        return rl_err_set(err, RL_ERR_INVALID, "engine: draft_n_vocab %d < 0", (int)p->draft_n_vocab);
    rl_type kt, vt;
    rl_status s;
    if ((s = parse_cache_type(p->cache_type_k, &kt, "cache-type-k", err))) return s;
    if ((s = parse_cache_type(p->cache_type_v, &vt, "cache-type-v", err))) return s;
    rl_engine *e = rl_calloc(1, sizeof *e);
    if (!e) return rl_err_set(err, RL_ERR_NOMEM, "engine: out of memory");
    e->params = *p;
    e->params.naive = p->naive;
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->work_cond, NULL);
    pthread_cond_init(&e->ev_cond, NULL);
    e->next_id = 1;

    rl_model_opts mo = {.max_batch = p->max_batch_tokens, .weights = (rl_model_weights)p->weights};
    if ((s = rl_model_load(p->model_path, &mo, &e->model, err))) goto fail;
    if ((s = rl_tokenizer_load(rl_model_gguf(e->model), &e->tok, err))) goto fail;
    e->n_vocab = rl_model_n_vocab(e->model);
    int32_t n_ctx = p->n_ctx > 0 ? p->n_ctx : rl_model_n_ctx_train(e->model);
    if (p->n_ctx <= 0 && n_ctx > 4096) n_ctx = 4096;
    if (n_ctx <= 0)
        n_ctx = 4096;
    e->n_ctx = n_ctx;

    int n_threads = p->n_threads > 0 ? p->n_threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (n_threads < 1) n_threads = 1;
    e->tp = rl_threadpool_new(n_threads);
    if (!e->tp) {
        s = rl_err_set(err, RL_ERR_NOMEM, "engine: cannot start %d threads", n_threads);
        goto fail;
    }

    /* quantized K pages store k - the calibrated mean key (docs/KVQUANT.md) */
    if (rl_kv_type_quantized(kt) && (s = rl_model_calibrate_k(e->model, e->tok, e->tp, err))) goto fail;

    rl_model_kv_shape ks = rl_model_kv_shape_of(e->model);
    rl_kv_config kc = {.n_layer = ks.n_layer, .n_kv_head = ks.n_kv_head, .head_dim = ks.head_dim,
                       .block_size = p->block_size, .k_type = kt, .v_type = vt,
                       .mem_bytes = p->kv_mem_bytes};
    if (!kc.mem_bytes) {
        int32_t seqs = p->max_seqs / 4 > 4 ? p->max_seqs / 4 : 4;
        size_t blocks = (size_t)seqs * (size_t)((n_ctx + p->block_size - 1) / p->block_size) + 1;
        kc.mem_bytes = blocks * rl_kv_block_bytes(&kc);
    }
    if ((s = rl_kv_pool_new(&kc, &e->pool, err))) goto fail;
    e->kv_bytes_per_token = rl_kv_block_bytes(&kc) / (size_t)p->block_size;

    rl_sched_config sc = {.max_batch_tokens = p->max_batch_tokens, .max_seqs = p->max_seqs,
                          .chunked_prefill = p->chunked_prefill && !p->naive,
                          .prefix_cache = p->prefix_cache && !p->naive,
                          .reserve_full = p->naive, .static_batching = p->naive || p->static_batches};
    if ((s = rl_sched_new(&sc, e->pool, &e->sched, err))) goto fail;

    if (p->draft_model_path &&
        (s = rl_spec_draft_new(p->draft_model_path, e->n_vocab, p->draft_n_vocab, p->max_seqs, n_ctx,
                               p->max_batch_tokens, &e->draft, err)))
        goto fail;

    size_t mb = (size_t)p->max_batch_tokens, ms = (size_t)p->max_seqs;
    size_t dm = (size_t)p->draft_max + 1;
    int32_t spec_seqs = p->spec_max_batch < p->max_seqs ? p->spec_max_batch : p->max_seqs;
    /* extra logits rows for draft positions: model/n-gram drafts for up to
     * spec_max_batch sequences plus grammar-forced tokens for any sequence
     * (spec_prepare caps the drafts of a step to what is here) */
    e->n_logit_rows = p->max_seqs + spec_seqs * p->draft_max + 2 * p->max_seqs;
    e->spec_reqs = rl_calloc(ms, sizeof *e->spec_reqs);
    e->spec_kbuf = rl_calloc(ms, sizeof *e->spec_kbuf);
    e->spec_out = rl_calloc(ms, sizeof *e->spec_out);
    e->spec_dseqs = rl_calloc(ms, sizeof *e->spec_dseqs);
    e->spec_toks = rl_calloc(ms, sizeof *e->spec_toks);
    e->spec_ntoks = rl_calloc(ms, sizeof *e->spec_ntoks);
    e->spec_dk = rl_calloc(ms, sizeof *e->spec_dk);
    e->spec_dout = rl_calloc(ms, sizeof *e->spec_dout);
    e->spec_acc = rl_calloc(ms, sizeof *e->spec_acc);
    /* priors until steps are timed: a verification of n positions costs
     * 1 + 0.3 (n - 1) single steps, a draft step 0.4 of a target step
     * (measured on Qwen2.5 1.5B / 0.5B, docs/PERFORMANCE.md) */
    rl_spec_cost_init(&e->cost, 0.3f, 0.4f);
    e->verify_scratch = rl_calloc(2 * (size_t)e->n_vocab, sizeof(float));
    e->verify_res = rl_calloc(dm, sizeof *e->verify_res);
    e->verify_out = rl_calloc(dm, sizeof *e->verify_out);
    if (!e->spec_reqs || !e->spec_kbuf || !e->spec_out || !e->spec_dseqs || !e->spec_toks ||
        !e->spec_ntoks || !e->spec_dk || !e->spec_dout || !e->spec_acc || !e->verify_scratch || !e->verify_res || !e->verify_out) {
        s = rl_err_set(err, RL_ERR_NOMEM, "engine: out of memory for speculation buffers");
        goto fail;
    }
    for (size_t i = 0; i < ms; i++)
        if (!(e->spec_out[i] = rl_calloc(dm, sizeof(int32_t)))) {
            s = rl_err_set(err, RL_ERR_NOMEM, "engine: out of memory for speculation buffers");
            goto fail;
        }
    e->plan = rl_calloc(ms, sizeof *e->plan);
    e->b_token = rl_calloc(mb, sizeof(int32_t));
    e->b_pos = rl_calloc(mb, sizeof(int32_t));
    e->b_seq = rl_calloc(mb, sizeof(int32_t));
    e->b_want = rl_calloc(mb, sizeof(bool));
    e->b_tables = rl_calloc(ms, sizeof(int32_t *));
    e->b_nblocks = rl_calloc(ms, sizeof(int32_t));
    e->logits = rl_calloc((size_t)e->n_logit_rows * (size_t)e->n_vocab, sizeof(float));
    if (!e->plan || !e->b_token || !e->b_pos || !e->b_seq || !e->b_want || !e->b_tables ||
        !e->b_nblocks || !e->logits) {
        s = rl_err_set(err, RL_ERR_NOMEM, "engine: out of memory for step buffers");
        goto fail;
    }
    update_stats(e);
    *out = e;
    return RL_OK;
fail:
    rl_engine_free(e);
    return s;
}

void rl_engine_free(rl_engine *e) {
    if (!e) return;
    if (e->thread_started) {
        pthread_mutex_lock(&e->mu);
        e->stop = true;
        pthread_cond_broadcast(&e->work_cond);
        pthread_mutex_unlock(&e->mu);
        pthread_join(e->thread, NULL);
    }
    while (e->reqs) {
        ereq *r = e->reqs;
        e->reqs = r->next;
        if (e->sched && !r->finished && r->base.state != RL_SCHED_NEW)
            rl_sched_remove(e->sched, &r->base);
        if (r->has_draft_seq) rl_spec_draft_seq_free(e->draft, &r->draft_seq);
        ereq_free(r);
    }
    rl_sched_free(e->sched);
    rl_spec_draft_free(e->draft);
    rl_kv_pool_free(e->pool);
    rl_threadpool_free(e->tp);
    rl_vocab_trie_free(e->trie);
    rl_tokenizer_free(e->tok);
    rl_model_free(e->model);
    rl_free(e->plan);
    rl_free(e->b_token);
    rl_free(e->b_pos);
    rl_free(e->b_seq);
    rl_free(e->b_want);
    rl_free(e->b_tables);
    rl_free(e->b_nblocks);
    rl_free(e->logits);
    if (e->spec_out)
        for (int32_t i = 0; i < e->params.max_seqs; i++) rl_free(e->spec_out[i]);
    rl_free(e->spec_out);
    rl_free(e->spec_reqs);
    rl_free(e->spec_kbuf);
    rl_free(e->spec_dseqs);
    rl_free(e->spec_toks);
    rl_free(e->spec_ntoks);
    rl_free(e->spec_dk);
    rl_free(e->spec_dout);
    rl_free(e->spec_acc);
    rl_free(e->verify_scratch);
    rl_free(e->verify_res);
    rl_free(e->verify_out);
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->work_cond);
    pthread_cond_destroy(&e->ev_cond);
    rl_free(e);
}

struct rl_model *rl_engine_model(rl_engine *e) { return e->model; }
const struct rl_tokenizer *rl_engine_tokenizer(rl_engine *e) { return e->tok; }
int32_t rl_engine_n_ctx(const rl_engine *e) { return e->n_ctx; }

/* ---- submit / cancel / next ---- */
rl_status rl_engine_submit(rl_engine *e, const int32_t *prompt, int32_t n_prompt,
                           const rl_gen_params *gp, uint64_t *id, rl_err *err) {
    rl_gen_params dg;
    rl_gen_params_default(&dg);
    if (!gp) gp = &dg;
    if (n_prompt <= 0 || !prompt) return rl_err_set(err, RL_ERR_RANGE, "prompt: must not be empty");
    for (int32_t i = 0; i < n_prompt; i++)
        if (prompt[i] < 0 || prompt[i] >= e->n_vocab)
            return rl_err_set(err, RL_ERR_RANGE, "prompt: token %d at index %d is outside the vocabulary [0, %d)",
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
            return rl_err_set(err, RL_ERR_INVALID,
                              "stop[%d]: must be 1..%d bytes of valid UTF-8", i, RL_MAX_STOP_LEN);
    }
    if (gp->spec != RL_SPEC_NONE && gp->spec != RL_SPEC_NGRAM && gp->spec != RL_SPEC_DRAFT)
        return rl_err_set(err, RL_ERR_INVALID, "spec: unknown speculation mode %d", (int)gp->spec);
    if (gp->spec == RL_SPEC_DRAFT && !e->draft)
        return rl_err_set(err, RL_ERR_INVALID, "spec: the engine has no draft model (-md)");
    int32_t max_new = gp->max_tokens > 0 ? gp->max_tokens : e->n_ctx - n_prompt;
    if (max_new > e->n_ctx - n_prompt) max_new = e->n_ctx - n_prompt;

    ereq *r = rl_calloc(1, sizeof *r);
    if (!r) return rl_err_set(err, RL_ERR_NOMEM, "engine: out of memory");
    r->gp = *gp;
    r->max_new = max_new;
    r->base.n_prompt = r->base.n_tokens = n_prompt;
    r->base.max_total = n_prompt + max_new;
    r->base.priority = gp->priority;
    rl_kv_seq_init(&r->base.kv, gp->cache_salt);
    /* drafts never push n_tokens past max_total - 1 (see spec_prepare) */
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
    memcpy(r->base.tokens, prompt, (size_t)n_prompt * sizeof(int32_t));
    for (int32_t i = 0; i < n_prompt; i++) rl_sampler_accept(r->sampler, prompt[i]);
    rl_detok_init(&r->detok, e->tok, RL_TOK_SKIP_SPECIAL);
    if ((s = rl_sched_admissible(e->sched, &r->base, err))) {
        ereq_free(r);
        return s;
    }
    r->t_submit = now_s();
    pthread_mutex_lock(&e->mu);
    int32_t queued = 0;
    for (ereq *q = e->reqs; q; q = q->next) queued += !q->finished;
    if (queued >= e->params.max_waiting + e->params.max_seqs) {
        pthread_mutex_unlock(&e->mu);
        ereq_free(r);
        return rl_err_set(err, RL_ERR_LIMIT, "engine: queue full (%d requests)", queued);
    }
    r->base.id = e->next_id++;
    r->next = e->reqs;
    e->reqs = r;
    r->in_inbox = true;
    *id = r->base.id;
    pthread_cond_broadcast(&e->work_cond);
    pthread_mutex_unlock(&e->mu);
    return RL_OK;
}

void rl_engine_cancel(rl_engine *e, uint64_t id) {
    pthread_mutex_lock(&e->mu);
    ereq *r = find_req(e, id);
    if (r) r->cancel = true;
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
            (timeout_ms > 0 && pthread_cond_timedwait(&e->ev_cond, &e->mu, &dl) != 0 && r->ev_n == 0)) {
            pthread_mutex_unlock(&e->mu);
            return RL_ERR_LIMIT;
        }
        if (timeout_ms < 0) pthread_cond_wait(&e->ev_cond, &e->mu);
    }
    *ev = r->ev[r->ev_head];
    r->ev_head = (r->ev_head + 1) % r->ev_cap;
    r->ev_n--;
    if (ev->kind == RL_EV_DONE) {
        unlink_req(e, r);
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

/* ---- the step ---- */

/* Emits the longest prefix of r's pending text that cannot be the start
 * of a stop string; on a stop-string match emits the text before it and
 * returns true.  With `all`, emits everything (end of request). */
static bool flush_text(rl_engine *e, ereq *r, int32_t token, const rl_sample_result *sr, bool all) {
    rl_detok *d = &r->detok;
    size_t emit = d->len, cut = d->len;
    bool stopped = false;
    for (int32_t i = 0; i < r->gp.n_stop; i++) {
        const char *hit = memmem(d->buf, d->len, r->gp.stop[i], strlen(r->gp.stop[i]));
        if (hit && (size_t)(hit - d->buf) < cut) {
            cut = (size_t)(hit - d->buf);
            stopped = true;
        }
    }
    if (stopped) emit = cut;
    else if (!all) {
        /* hold back a suffix that is a prefix of some stop string */
        for (int32_t i = 0; i < r->gp.n_stop; i++) {
            size_t sl = strlen(r->gp.stop[i]);
            for (size_t k = sl - 1 < d->len ? sl - 1 : d->len; k > 0; k--)
                if (!memcmp(d->buf + d->len - k, r->gp.stop[i], k)) {
                    if (d->len - k < emit) emit = d->len - k;
                    break;
                }
        }
    }
    bool first = true;
    size_t off = 0;
    pthread_mutex_lock(&e->mu);
    while (first || off < emit) {
        rl_event ev;
        memset(&ev, 0, sizeof ev);
        ev.kind = RL_EV_TOKEN;
        ev.token = first ? token : -1;
        if (first && sr) {
            ev.logprob = sr->logprob;
            ev.n_top = sr->n_top < RL_EV_MAX_TOP ? sr->n_top : RL_EV_MAX_TOP;
            for (int32_t k = 0; k < ev.n_top; k++) {
                ev.top_id[k] = sr->top_id[k];
                ev.top_logprob[k] = sr->top_logprob[k];
            }
        }
        size_t n = emit - off;
        if (n > RL_EV_TEXT_MAX) {
            n = RL_EV_TEXT_MAX;
            while (n > 0 && ((uint8_t)d->buf[off + n] & 0xC0) == 0x80) n--; /* char boundary */
        }
        memcpy(ev.text, d->buf + off, n);
        ev.text_len = (int32_t)n;
        off += n;
        if (token >= 0 || n > 0) push_event(e, r, &ev);
        first = false;
    }
    pthread_mutex_unlock(&e->mu);
    size_t keep = stopped ? 0 : d->len - emit;
    memmove(d->buf, d->buf + emit, keep);
    d->len = keep;
    if (d->buf) d->buf[keep] = 0;
    return stopped;
}

/* Appends token tok (already accepted by r's sampler) to r: text, stop
 * strings, end-of-generation and length limits.  Returns false when r
 * finished (r must not be touched by the caller's loop after that). */
static bool emit_token(rl_engine *e, ereq *r, int32_t tok, const rl_sample_result *sr) {
    if (r->t_first == 0) r->t_first = now_s();
    rl_err gerr;
    if (r->gm && !rl_tokenizer_is_eog(e->tok, tok) && rl_gmatch_accept_token(r->gm, tok, &gerr)) {
        fail(e, r, &gerr);
        return false;
    }
    r->n_generated++;
    e->st_gen++;
    bool eog = !r->gp.ignore_eos && rl_tokenizer_is_eog(e->tok, tok);
    if (eog) {
        flush_text(e, r, tok, sr, true);
        finish(e, r, RL_FINISH_STOP, NULL);
        return false;
    }
    rl_err derr;
    rl_detok_push(&r->detok, tok, NULL, &derr);
    r->base.tokens[r->base.n_tokens++] = tok;
    bool at_end = r->n_generated >= r->max_new || r->base.n_tokens >= e->n_ctx;
    if (at_end) rl_detok_flush(&r->detok, NULL, &derr);
    if (flush_text(e, r, tok, sr, at_end)) {
        finish(e, r, RL_FINISH_STOP, NULL);
        return false;
    }
    if (at_end) {
        finish(e, r, RL_FINISH_LENGTH, NULL);
        return false;
    }
    if (r->gm && rl_gmatch_is_done(r->gm)) { /* the grammar admits nothing more */
        rl_detok_flush(&r->detok, NULL, &derr);
        flush_text(e, r, -1, NULL, true);
        finish(e, r, RL_FINISH_STOP, NULL);
        return false;
    }
    return true;
}

/* True when r's token budget is about to run out before its grammar can
 * be completed: from then on the engine steers to the shortest complete
 * document instead of emitting truncated (invalid) JSON. */
/* Tokens r may still generate beyond what closing its grammar needs (the
 * bytes to the shortest complete document bound the tokens needed). */
static int64_t grammar_slack(const rl_engine *e, ereq *r) {
    int32_t left = r->max_new - r->n_generated;
    int32_t ctx_left = e->n_ctx - r->base.n_tokens;
    if (ctx_left < left) left = ctx_left;
    int64_t need = rl_gmatch_min_remaining(r->gm);
    return need >= 0 ? (int64_t)left - need : INT64_MAX;
}

/* Closing starts with a margin: one freely sampled token can raise the
 * bytes still needed (it may open an object or array), by at most its own
 * length, so closing begins while the slack still covers a long token. */
#define RL_GRAMMAR_CLOSE_SLACK 32
static bool grammar_must_close(const rl_engine *e, ereq *r) {
    return grammar_slack(e, r) <= RL_GRAMMAR_CLOSE_SLACK;
}

/* Closing mode: among allowed short tokens (<= 3 bytes) the one leaving the
 * fewest bytes to a complete document, the higher logit on ties; an
 * end-of-generation token as soon as the document is complete. */
static int32_t grammar_close_pick(rl_engine *e, ereq *r, const float *row) {
    bool acc = rl_gmatch_is_accepting(r->gm);
    int32_t best = -1;
    int64_t best_rem = INT64_MAX;
    rl_err err;
    for (int32_t t = 0; t < e->n_vocab; t++) {
        if (!(row[t] > -INFINITY)) continue;
        if (rl_tokenizer_is_eog(e->tok, t)) {
            if (acc) return t;
            continue;
        }
        size_t len;
        rl_tokenizer_piece(e->tok, t, &len);
        if (len == 0 || len > 3) continue;
        if (rl_gmatch_restore(r->gm_scratch, r->gm, &err) ||
            rl_gmatch_accept_token(r->gm_scratch, t, &err))
            continue;
        int64_t rem = rl_gmatch_min_remaining(r->gm_scratch);
        if (rem >= 0 && (rem < best_rem || (rem == best_rem && row[t] > row[best]))) {
            best = t;
            best_rem = rem;
        }
    }
    return best;
}

/* Samples the next token of r from its logits row and updates r. */
static void sample_and_update(rl_engine *e, ereq *r, float *row) {
    rl_sample_result sr;
    rl_err gerr;
    if (r->gm && rl_gmatch_mask(r->gm, row, e->n_vocab, &gerr)) {
        fail(e, r, &gerr);
        return;
    }
    if (r->gm && grammar_must_close(e, r)) {
        int32_t tok = grammar_close_pick(e, r, row);
        if (tok < 0) {
            finish(e, r, RL_FINISH_LENGTH, NULL);
            return;
        }
        memset(&sr, 0, sizeof sr);
        sr.id = tok;
        rl_sampler_accept(r->sampler, tok);
        if (rl_tokenizer_is_eog(e->tok, tok)) {
            flush_text(e, r, tok, &sr, true);
            finish(e, r, RL_FINISH_STOP, NULL);
            return;
        }
        emit_token(e, r, tok, &sr);
        return;
    }
    int32_t tok = rl_sampler_sample(r->sampler, row, &sr);
    if (tok < 0) {
        finish(e, r, RL_FINISH_ERROR, "every token is banned by logit_bias");
        return;
    }
    rl_sampler_accept(r->sampler, tok);
    emit_token(e, r, tok, &sr);
}

/* Verifies r's n_draft drafts against rows[n_draft+1] and emits the
 * accepted tokens plus the target's own next token. */
static void verify_and_update(rl_engine *e, ereq *r, float *rows) {
    rl_sched_req *b = &r->base;
    int32_t k = r->n_draft, base = b->n_tokens - k;
    int32_t *out = e->verify_out;
    if (r->gm) {
        /* mask each row with the grammar state it would see if the drafts
         * before it are accepted; a draft the grammar refuses ends the run */
        rl_err gerr;
        rl_gmatch_restore(r->gm_scratch, r->gm, &gerr);
        int32_t i = 0;
        for (;; i++) {
            if (rl_gmatch_mask(r->gm_scratch, rows + (size_t)i * (size_t)e->n_vocab, e->n_vocab, &gerr)) {
                /* row i is unmasked: nothing may be sampled from it */
                b->n_tokens = base;
                r->n_draft = 0;
                fail(e, r, &gerr);
                return;
            }
            if (i == k || rl_gmatch_accept_token(r->gm_scratch, b->tokens[base + i], &gerr)) break;
        }
        if (i < k) {
            b->n_tokens = base + i; /* drop refused drafts before verifying */
            k = i;
        }
    }
    int32_t n = rl_spec_verify(r->sampler, rows, e->n_vocab, b->tokens + base, k, NULL,
                               e->verify_scratch, e->verify_res, out);
    r->n_draft = 0;
    e->st_spec_verifies++;
    e->st_spec_proposed += (uint64_t)k;
    if (n == 0) {
        b->n_tokens = base;
        finish(e, r, RL_FINISH_ERROR, "every token is banned by logit_bias");
        return;
    }
    int32_t accepted = n - 1;
    e->st_spec_accepted += (uint64_t)accepted;
    if (r->drafted) rl_spec_acc_update(&r->acc, k, accepted);
    /* keep K/V of the accepted drafts, drop the rest */
    b->n_tokens = base;
    b->n_computed = base + accepted;
    rl_kv_seq_truncate(e->pool, &b->kv, base + accepted);
    if (r->has_draft_seq) rl_spec_draft_rollback(e->draft, &r->draft_seq, base + accepted);
    for (int32_t i = 0; i < n; i++)
        if (!emit_token(e, r, out[i], &e->verify_res[i])) return;
}

/* Acceptance prior of a request that has not drafted yet. */
#define SPEC_PRIOR 0.6f

/* Before scheduling: gives each decoding request that asked for
 * speculation up to k draft tokens, appended to its token list.  k comes
 * from the cost model (rl_spec_choose_k: the requests' running acceptance
 * against the measured cost of target and draft forwards), 0 when
 * speculation would not pay; draft_fixed forces draft_max.  Speculation
 * is off outright when more than spec_max_batch sequences decode. */
static int32_t spec_prepare(rl_engine *e) {
    int32_t n_dec = 0, n_spec = 0, n_draft_model = 0, n_pol = 0;
    bool uses_draft = false;
    pthread_mutex_lock(&e->mu);
    for (ereq *r = e->reqs; r; r = r->next)
        if (!r->finished && r->base.state == RL_SCHED_RUNNING &&
            r->base.n_tokens - r->base.n_computed == 1)
            n_dec++;
    /* drafts (model, n-gram, or grammar-forced jump-forward tokens) only
     * while the step is bandwidth-bound: with many sequences decoding, the
     * extra positions cost compute that rejected drafts waste (measured:
     * jump-forward at batch 16 cut constrained throughput to 0.79x of
     * unconstrained, 0.88x without it) */
    bool spec_ok = n_dec > 0 && n_dec <= e->params.spec_max_batch && e->params.draft_max > 0;
    for (ereq *r = e->reqs; r; r = r->next) {
        rl_sched_req *b = &r->base;
        r->drafted = false;
        if (r->finished || b->state != RL_SCHED_RUNNING || b->n_tokens - b->n_computed != 1)
            continue;
        if (!r->gm && r->gp.spec == RL_SPEC_NONE) continue;
        int64_t slack = r->gm ? grammar_slack(e, r) : INT64_MAX;
        int32_t k = e->params.draft_max;
        int32_t room = r->max_new - r->n_generated - 1;
        if (k > room) k = room;
        if (k > e->n_ctx - b->n_tokens - 1) k = e->n_ctx - b->n_tokens - 1;
        if (!spec_ok || n_spec >= e->params.max_seqs || r->gp.sample.n_logprobs > 0 || k <= 0 ||
            slack <= 2 * RL_GRAMMAR_CLOSE_SLACK /* near the end: one token per step */) {
            rl_spec_acc_decay(&r->acc); /* no drafts: drift back toward the prior */
            continue;
        }
        if (r->gp.spec != RL_SPEC_NONE) {
            e->spec_acc[n_pol++] = rl_spec_acc_rate(&r->acc, SPEC_PRIOR);
            uses_draft |= r->gp.spec == RL_SPEC_DRAFT;
        }
        e->spec_reqs[n_spec] = r;
        e->spec_kbuf[n_spec] = k;
        n_spec++;
    }
    pthread_mutex_unlock(&e->mu);
    /* one draft length for the step's drafters (their drafts share the
     * batch, so the step's cost depends on all of them) */
    int32_t k_pol = e->params.draft_max;
    if (!e->params.draft_fixed && n_pol > 0) {
        k_pol = rl_spec_choose_k(&e->cost, n_dec, e->spec_acc, n_pol, uses_draft,
                                 e->params.draft_max);
        /* probe: time every draft length once for this batch size (step
         * cost is not linear in positions: the matmuls work in tiles of 4
         * tokens, so 4 positions can cost less than 3), the shortest
         * unmeasured first, before trusting extrapolated costs; and every
         * 32 steps without drafts probe one length in turn, so stale
         * timings and acceptance estimates get renewed.  With a draft
         * model, only for a single decoding sequence: a probe makes the
         * draft catch up on every token it has not seen (whole prompts, at
         * first) for every sequence, which costs more than the probe can
         * return once several sequences decode (measured, 0.5B draft for
         * the 1.5B target at batch 4: 0.52-0.68x of no speculation with
         * probes only; docs/PERFORMANCE.md).  The cost model can still
         * choose k > 0 there from its estimates. */
        if (!(uses_draft && n_dec > 1)) {
            int32_t probe = 0; /* whatever the choice: an unmeasured length first */
            for (int32_t k = 1; k <= e->params.draft_max && !probe; k++)
                if (n_dec + k * n_pol <= RL_SPEC_COST_N && !(e->cost.fwd[n_dec + k * n_pol] > 0))
                    probe = k;
            if (probe)
                k_pol = probe;
            else if (!k_pol && ++e->spec_idle >= 32)
                k_pol = e->spec_probe_k = e->spec_probe_k % e->params.draft_max + 1;
        }
        if (k_pol > 0) e->spec_idle = 0;
    }
    /* grammar jump-forward: the tokens the grammar forces */
    for (int32_t i = 0; i < n_spec; i++) {
        ereq *r = e->spec_reqs[i];
        if (!r->gm) continue;
        int32_t kmax = e->spec_kbuf[i];
        int f = rl_gmatch_forced(r->gm, e->spec_out[i], e->params.draft_max > 0 ? e->params.draft_max : 4);
        if (f > kmax) f = kmax;
        if (f < 0) f = 0;
        if (f == 0 && r->gp.spec != RL_SPEC_NONE) continue; /* fall through to n-gram/draft */
        e->spec_kbuf[i] = f;
        e->st_forced += (uint64_t)f;
        r->n_draft = -1; /* mark: handled */
    }
    /* n-gram proposals */
    for (int32_t i = 0; i < n_spec; i++) {
        ereq *r = e->spec_reqs[i];
        if (r->n_draft < 0 || r->gp.spec != RL_SPEC_NGRAM) continue;
        int32_t k = e->spec_kbuf[i] < k_pol ? e->spec_kbuf[i] : k_pol;
        e->spec_kbuf[i] = rl_spec_ngram(r->base.tokens, r->base.n_tokens, k, e->params.ngram_min,
                                        e->params.ngram_max, e->spec_out[i]);
    }
    /* draft-model proposals, batched */
    for (int32_t i = 0; i < n_spec; i++) {
        ereq *r = e->spec_reqs[i];
        if (r->n_draft < 0 || r->gp.spec != RL_SPEC_DRAFT) continue;
        if (!r->has_draft_seq) {
            rl_spec_draft_seq_init(&r->draft_seq);
            r->has_draft_seq = true;
        }
        e->spec_dseqs[n_draft_model] = &r->draft_seq;
        e->spec_toks[n_draft_model] = r->base.tokens;
        e->spec_ntoks[n_draft_model] = r->base.n_tokens;
        e->spec_dk[n_draft_model] = e->spec_kbuf[i] < k_pol ? e->spec_kbuf[i] : k_pol;
        e->spec_dout[n_draft_model] = e->spec_out[i];
        n_draft_model++;
    }
    if (n_draft_model > 0) {
        int32_t *kk = e->spec_dk, q = n_draft_model;
        int32_t **outs = e->spec_dout;
        rl_err err = {0};
        int64_t n0, n1;
        double t0 = rl_spec_draft_step_s(e->draft, &n0);
        if (rl_spec_draft_propose(e->draft, e->spec_dseqs, e->spec_toks, e->spec_ntoks, kk, outs,
                                  n_draft_model, e->tp, &err) != RL_OK) {
            rl_log(RL_LOG_WARN, "draft model failed, speculation skipped: %s", err.msg);
            for (int32_t j = 0; j < q; j++) kk[j] = 0;
        }
        double t1 = rl_spec_draft_step_s(e->draft, &n1);
        if (n1 > n0) rl_spec_cost_add_draft(&e->cost, n_draft_model, (t1 - t0) / (double)(n1 - n0));
        q = 0;
        for (int32_t i = 0; i < n_spec; i++)
            if (e->spec_reqs[i]->n_draft >= 0 && e->spec_reqs[i]->gp.spec == RL_SPEC_DRAFT)
                e->spec_kbuf[i] = kk[q++];
    }
    /* append the drafts, within the logits rows there are for them */
    int32_t n_out = 0, rows_left = e->n_logit_rows - e->params.max_seqs;
    for (int32_t i = 0; i < n_spec; i++) {
        ereq *r = e->spec_reqs[i];
        bool from_drafter = r->n_draft >= 0 && r->gp.spec != RL_SPEC_NONE;
        r->n_draft = 0;
        int32_t k = e->spec_kbuf[i];
        if (!r->gm && r->gp.spec == RL_SPEC_NONE) k = 0;
        if (k > rows_left) k = rows_left;
        rows_left -= k > 0 ? k : 0;
        if (from_drafter && k <= 0) rl_spec_acc_decay(&r->acc);
        if (k <= 0) continue;
        r->drafted = from_drafter;
        memcpy(r->base.tokens + r->base.n_tokens, e->spec_out[i], (size_t)k * sizeof(int32_t));
        r->base.n_tokens += k;
        r->n_draft = k;
        e->spec_reqs[n_out++] = r;
    }
    return n_out;
}

/* After scheduling: drafts of a request the step did not fully cover (token
 * budget, or preempted) are withdrawn. */
static void spec_trim(rl_engine *e, int32_t n_spec) {
    for (int32_t i = 0; i < n_spec; i++) {
        ereq *r = e->spec_reqs[i];
        rl_sched_req *b = &r->base;
        int32_t covered = b->step_n > 0 ? b->n_computed + b->step_n : b->n_computed;
        int32_t excess = b->n_tokens - covered;
        if (b->step_n == 0 || b->state != RL_SCHED_RUNNING) excess = r->n_draft;
        if (excess > r->n_draft) excess = r->n_draft;
        if (excess > 0) {
            b->n_tokens -= excess;
            r->n_draft -= excess;
        }
    }
}

static void take_inbox(rl_engine *e) {
    pthread_mutex_lock(&e->mu);
    for (ereq *r = e->reqs; r; r = r->next) {
        if (r->in_inbox && !r->cancel) {
            r->in_inbox = false;
            rl_sched_add(e->sched, &r->base);
            e->st_prompt += (uint64_t)r->base.n_prompt;
        }
    }
    pthread_mutex_unlock(&e->mu);
    /* cancellations: collect under the lock, act outside it (finish locks) */
    for (;;) {
        ereq *c = NULL;
        pthread_mutex_lock(&e->mu);
        for (ereq *r = e->reqs; r; r = r->next)
            if (r->cancel && !r->finished) {
                c = r;
                break;
            }
        if (c) c->in_inbox = false;
        pthread_mutex_unlock(&e->mu);
        if (!c) break;
        finish(e, c, RL_FINISH_CANCELLED, NULL);
    }
}

static void update_stats(rl_engine *e) {
    rl_kv_stats ks = rl_kv_pool_stats(e->pool);
    rl_sched_stats ss = rl_sched_stats_of(e->sched);
    uint64_t live = 0;
    pthread_mutex_lock(&e->mu);
    for (ereq *r = e->reqs; r; r = r->next)
        if (!r->finished && r->base.state == RL_SCHED_RUNNING) live += (uint64_t)r->base.n_computed;
    rl_engine_stats *s = &e->stats_snapshot;
    s->n_running = ss.n_running;
    s->n_waiting = ss.n_waiting;
    for (ereq *r = e->reqs; r; r = r->next) s->n_waiting += r->in_inbox && !r->finished;
    s->kv_blocks_total = ks.n_blocks;
    s->kv_blocks_used = ks.n_used;
    s->kv_blocks_cached = ks.n_cached;
    s->block_size = e->params.block_size;
    s->kv_bytes_per_token = e->kv_bytes_per_token;
    s->live_tokens = live;
    s->prompt_tokens = e->st_prompt;
    s->generation_tokens = e->st_gen;
    s->cached_prompt_tokens = e->st_cached;
    s->prefix_queries = ks.prefix_queries;
    s->prefix_hits = ks.prefix_hits;
    s->preemptions = ss.n_preemptions;
    s->steps = ss.n_steps;
    s->busy_s = e->busy_s;
    s->spec_proposed = e->st_spec_proposed;
    s->spec_accepted = e->st_spec_accepted;
    s->spec_verifies = e->st_spec_verifies;
    s->grammar_forced = e->st_forced;
    pthread_mutex_unlock(&e->mu);
}

int32_t rl_engine_step(rl_engine *e) {
    take_inbox(e);
    int32_t n_spec = spec_prepare(e);
    int32_t n_plan = rl_sched_step(e->sched, e->plan);
    spec_trim(e, n_spec);
    if (n_plan == 0) {
        update_stats(e);
        return 0;
    }
    double t0 = now_s();
    int32_t n_tok = 0, n_logits = 0;
    for (int32_t i = 0; i < n_plan; i++) {
        ereq *r = (ereq *)e->plan[i];
        rl_sched_req *b = &r->base;
        if (!b->admitted_counted) {
            b->admitted_counted = true;
            e->st_cached += (uint64_t)b->n_cached;
        }
        bool last_chunk = b->n_computed + b->step_n == b->n_tokens;
        int32_t first_row = b->n_tokens - 1 - r->n_draft; /* position of the first logits row */
        for (int32_t j = 0; j < b->step_n; j++) {
            e->b_token[n_tok] = b->tokens[b->n_computed + j];
            e->b_pos[n_tok] = b->n_computed + j;
            e->b_seq[n_tok] = i;
            bool want = last_chunk && b->n_computed + j >= first_row;
            e->b_want[n_tok] = want;
            n_logits += want;
            n_tok++;
        }
        e->b_tables[i] = b->kv.blocks;
        e->b_nblocks[i] = b->kv.n_blocks;
    }
    rl_batch batch = {.n_tok = n_tok, .token = e->b_token, .pos = e->b_pos, .seq = e->b_seq,
                      .want_logits = e->b_want, .n_seq = n_plan,
                      .block_tables = (const int32_t *const *)e->b_tables, .n_blocks = e->b_nblocks};
    rl_err err = {0};
    double tf = now_s();
    rl_status s = rl_model_forward(e->model, &batch, rl_kv_pool_layers(e->pool), e->logits, e->tp, &err);
    /* decode-only steps (every token wants logits) feed the cost model */
    if (!s && n_logits == n_tok) rl_spec_cost_add_fwd(&e->cost, n_tok, now_s() - tf);
    if (s) {
        /* A failed forward leaves the batch's requests unusable: end them
         * with the error rather than loop on it. */
        for (int32_t i = 0; i < n_plan; i++) finish(e, (ereq *)e->plan[i], RL_FINISH_ERROR, err.msg);
        update_stats(e);
        return 0;
    }
    rl_sched_commit(e->sched, e->plan, n_plan);
    int32_t row = 0;
    for (int32_t i = 0; i < n_plan; i++) {
        ereq *r = (ereq *)e->plan[i];
        if (r->base.n_computed != r->base.n_tokens) continue; /* mid-prefill chunk */
        float *lr = e->logits + (size_t)row * (size_t)e->n_vocab;
        row += 1 + r->n_draft;
        if (r->n_draft > 0) verify_and_update(e, r, lr);
        else sample_and_update(e, r, lr);
    }
    e->busy_s += now_s() - t0;
    update_stats(e);
    return n_tok;
}

static void *engine_thread(void *arg) {
    rl_engine *e = arg;
    for (;;) {
        pthread_mutex_lock(&e->mu);
        bool stop = e->stop;
        pthread_mutex_unlock(&e->mu);
        if (stop) break;
        if (rl_engine_step(e) == 0) {
            pthread_mutex_lock(&e->mu);
            bool pending = false;
            for (ereq *r = e->reqs; r; r = r->next)
                if ((r->in_inbox || r->cancel) && !r->finished) pending = true;
            rl_sched_stats ss = rl_sched_stats_of(e->sched);
            if (!pending && !e->stop && ss.n_running == 0 && ss.n_waiting == 0)
                pthread_cond_wait(&e->work_cond, &e->mu);
            pthread_mutex_unlock(&e->mu);
        }
    }
    return NULL;
}

rl_status rl_engine_start(rl_engine *e, rl_err *err) {
    if (e->thread_started) return RL_OK;
    if (pthread_create(&e->thread, NULL, engine_thread, e) != 0)
        return rl_err_set(err, RL_ERR_NOMEM, "engine: cannot create the step thread");
    e->thread_started = true;
    return RL_OK;
}
