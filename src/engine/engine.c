/* The engine (L8): creation and the step loop.  One step (rl_engine_step):
 *
 *   take inbox (requests.c) -> plan drafts (spec/plan.c) -> schedule
 *   -> trim drafts -> build the batch -> forward -> sample, or verify
 *   drafts -> update each sequence (output.c: text, stop strings, end)
 *
 * Threads: callers submit, cancel and take events under `mu`
 * (requests.c); the step loop (rl_engine_step, on the engine thread or the
 * caller's) is the only code that touches the scheduler, the KV pool, the
 * model, the samplers and the draft planner, so those need no lock.  New
 * requests wait in an inbox until the next step picks them up; a
 * cancellation puts the request on a cancel list the next step acts on.
 *
 * Per-step buffers (batch arrays, logits rows) are sized once at creation,
 * in one arena; per-request memory (token array, sampler, event queue) at
 * submit.  The step allocates nothing.
 */
#include "redline.h"

#include <pthread.h>
#include <string.h>
#include <unistd.h>

#include "engine/engine-impl.h"
#include "model/kcal.h"

/* The default KV budget holds every sequence's full context where that
 * costs at most this much (engine: rl_engine_new). */
#define RL_KV_DEFAULT_FULL_BYTES ((size_t)512 << 20)

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

static double now_s(void) {
    return rl_time_s();
}

static void finish(rl_engine *e, ereq *r, rl_finish_reason why, const char *msg) {
    rl__engine_finish(e, r, why, why == RL_FINISH_ERROR ? RL_ERR_INVALID : RL_OK, msg);
}

/* Ends r with the error in err, its code included (for errors of the
 * request's own making, e.g. its grammar; a failed forward is finish()). */
static void fail(rl_engine *e, ereq *r, const rl_err *err) {
    rl__engine_finish(e, r, RL_FINISH_ERROR, err->code, err->msg);
}

static void update_stats(rl_engine *e);

/* ---- creation ---- */

/* rl_engine_set_hooks (under g_hooks_mu): the hooks and whether an engine
 * has taken them. */
static pthread_mutex_t g_hooks_mu = PTHREAD_MUTEX_INITIALIZER;
static rl_engine_hooks g_hooks;
static bool g_hooks_set, g_hooks_taken;

void rl_engine_set_hooks(const rl_engine_hooks *h) {
    pthread_mutex_lock(&g_hooks_mu);
    g_hooks_set = h != NULL;
    g_hooks_taken = false;
    if (h) g_hooks = *h;
    pthread_mutex_unlock(&g_hooks_mu);
}

/* Copies the process's hooks into e (false: they are taken already). */
static bool take_hooks(rl_engine *e) {
    bool ok = true;
    pthread_mutex_lock(&g_hooks_mu);
    if (g_hooks_set) {
        ok = !g_hooks_taken;
        g_hooks_taken = true;
        e->hooks = g_hooks;
        e->hooked = ok;
    }
    pthread_mutex_unlock(&g_hooks_mu);
    if (!e->hooks.forward) e->hooks.forward = rl_model_forward_plain;
    return ok;
}

/* The buffers sized at creation, from one arena (called twice: measure,
 * then carve; see base/arena.h). */
static void carve(rl_engine *e, rl_arena *a) {
    size_t mb = (size_t)e->params.max_batch_tokens, ms = (size_t)e->params.max_seqs;
    size_t dm = (size_t)e->params.draft_max + 1;
    e->plan = rl_arena_alloc(a, ms, sizeof *e->plan);
    e->b_token = rl_arena_alloc(a, mb, sizeof *e->b_token);
    e->b_pos = rl_arena_alloc(a, mb, sizeof *e->b_pos);
    e->b_seq = rl_arena_alloc(a, mb, sizeof *e->b_seq);
    e->b_want = rl_arena_alloc(a, mb, sizeof *e->b_want);
    e->b_prompt = rl_arena_alloc(a, mb, sizeof *e->b_prompt);
    e->b_tables = rl_arena_alloc(a, ms, sizeof *e->b_tables);
    e->b_nblocks = rl_arena_alloc(a, ms, sizeof *e->b_nblocks);
    e->logits = rl_arena_alloc(a, (size_t)e->n_logit_rows * (size_t)e->n_vocab, sizeof *e->logits);
    e->verify_scratch = rl_arena_alloc(a, 2 * (size_t)e->n_vocab, sizeof *e->verify_scratch);
    e->verify_res = rl_arena_alloc(a, dm, sizeof *e->verify_res);
    e->verify_out = rl_arena_alloc(a, dm, sizeof *e->verify_out);
    e->by_id = rl_arena_alloc(a, (size_t)e->id_mask + 1, sizeof *e->by_id);
}

static rl_status parse_cache_type(const char *s, rl_type *t, const char *which, rl_err *err) {
    if (!s || !*s) s = "f16";
    if (!rl_type_from_name(s, t) || !rl_kv_type_known(*t))
        return rl_err_set(
            err, RL_ERR_UNSUPPORTED,
            "%s: cache type '%s' is not supported (f16, f32, q8_0, q8_64, q4_0, iq4_nl)", which, s);
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
        return rl_err_set(
            err, RL_ERR_INVALID,
            "engine: max_batch_tokens %d, max_seqs %d, block_size %d, threads %d out of range",
            p->max_batch_tokens, p->max_seqs, p->block_size, p->n_threads);
    if (p->draft_n_vocab < 0)
        return rl_err_set(err, RL_ERR_INVALID, "engine: draft_n_vocab %d < 0",
                          (int)p->draft_n_vocab);
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
    if (!take_hooks(e)) {
        s = rl_err_set(err, RL_ERR_INVALID, "engine: a pipeline runs one engine per process");
        goto fail;
    }

    /* an encoder (bert) embeds a whole input in one forward: the model
     * gives it room for its full context (capped by -c) rather than one
     * step's token budget, in the one load */
    rl_model_opts mo = {.max_batch = p->max_batch_tokens,
                        .encoder_batch = p->n_ctx > 0 ? p->n_ctx : INT32_MAX,
                        .n_ctx = p->n_ctx > 0 ? p->n_ctx : 0, /* same default as below */
                        .weights = (rl_model_weights)p->weights,
                        .load_threads = p->n_threads, /* the step's threads repack */
                        .stage = e->hooks.stage,
                        .n_stages = e->hooks.n_stages};
    if ((s = rl_model_load(p->model_path, &mo, &e->model, err))) goto fail;
    if (e->hooked && e->hooks.on_model && (s = e->hooks.on_model(e->hooks.ud, p, e->model, err)))
        goto fail;
    if ((s = rl_tokenizer_load(rl_model_gguf(e->model), &e->tok, err))) goto fail;
    e->n_vocab = rl_model_n_vocab(e->model);
    int32_t n_ctx = p->n_ctx > 0 ? p->n_ctx : rl_model_n_ctx_train(e->model);
    if (p->n_ctx <= 0 && n_ctx > 4096) n_ctx = 4096;
    if (n_ctx <= 0) n_ctx = 4096;
    e->n_ctx = n_ctx;

    int n_threads = p->n_threads > 0 ? p->n_threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (n_threads < 1) n_threads = 1;
    e->tp = rl_threadpool_new(n_threads);
    if (!e->tp) {
        s = rl_err_set(err, RL_ERR_NOMEM, "engine: cannot start %d threads", n_threads);
        goto fail;
    }

    /* quantized K pages store k - the calibrated mean key (docs/KVQUANT.md) */
    if (rl_kv_type_quantized(kt) && rl_model_has_head(e->model) &&
        (s = rl_model_calibrate_k_with(e->model, e->tok, e->tp, e->hooks.forward, e->hooks.ud,
                                       err)))
        goto fail;

    rl_model_kv_shape ks = rl_model_kv_shape_of(e->model);
    rl_kv_config kc = {.n_layer = ks.n_layer,
                       .n_kv_head = ks.n_kv_head,
                       .head_dim = ks.head_dim,
                       .block_size = p->block_size,
                       .k_type = kt,
                       .v_type = vt,
                       .mem_bytes = p->kv_mem_bytes};
    if (!kc.mem_bytes) {
        /* a quarter of the sequences at full context (at least 4): paging
         * lets the rest share what short requests leave; but where every
         * sequence's full context costs little, all of it, so that -np
         * short contexts (say 32 x 256) run at once without preemption */
        const size_t bb = rl_kv_block_bytes(&kc);
        const size_t per_ctx = (size_t)((n_ctx + p->block_size - 1) / p->block_size);
        const int32_t q = p->max_seqs / 4 > 4 ? p->max_seqs / 4 : 4;
        const int32_t all = p->max_seqs > q ? p->max_seqs : q;
        size_t blocks = (size_t)q * per_ctx;
        const size_t full = (size_t)all * per_ctx;
        if (full > blocks) {
            const size_t cap = RL_KV_DEFAULT_FULL_BYTES / bb;
            blocks = full < cap ? full : blocks > cap ? blocks : cap;
        }
        kc.mem_bytes = (blocks + 1) * bb;
    }
    if ((s = rl_kv_pool_new(&kc, &e->pool, err))) goto fail;
    if (e->hooked && e->hooks.on_pool && (s = e->hooks.on_pool(e->hooks.ud, e->pool, err)))
        goto fail;
    e->kv_bytes_per_token = rl_kv_block_bytes(&kc) / (size_t)p->block_size;

    rl_sched_config sc = {.max_batch_tokens = p->max_batch_tokens,
                          .max_seqs = p->max_seqs,
                          .chunked_prefill = p->chunked_prefill && !p->naive,
                          .prefix_cache = p->prefix_cache && !p->naive,
                          .reserve_full = p->naive,
                          .static_batching = p->naive || p->static_batches};
    if ((s = rl_sched_new(&sc, e->pool, &e->sched, err))) goto fail;

    if (p->draft_model_path &&
        (s = rl_spec_draft_new(p->draft_model_path, e->n_vocab, p->draft_n_vocab, p->max_seqs,
                               n_ctx, p->max_batch_tokens, &e->draft, err)))
        goto fail;

    int32_t spec_seqs = p->spec_max_batch < p->max_seqs ? p->spec_max_batch : p->max_seqs;
    /* extra logits rows for draft positions: model/n-gram drafts for up to
     * spec_max_batch sequences plus grammar-forced tokens for any sequence
     * (the planner caps the drafts of a step to what is here) */
    e->n_logit_rows = p->max_seqs + spec_seqs * p->draft_max + 2 * p->max_seqs;
    rl_spec_planner_config pc = {.max_seqs = p->max_seqs,
                                 .draft_max = p->draft_max,
                                 .spec_max_batch = p->spec_max_batch,
                                 .max_rows = e->n_logit_rows - p->max_seqs,
                                 .draft_fixed = p->draft_fixed,
                                 .ngram_min = p->ngram_min,
                                 .ngram_max = p->ngram_max,
                                 .draft = e->draft};
    if ((s = rl_spec_planner_new(&pc, &e->spec, err))) goto fail;
    /* id buckets: about one per request the queue admits */
    int64_t live = (int64_t)p->max_waiting + p->max_seqs;
    e->id_mask = 15;
    while ((int64_t)e->id_mask + 1 < live && e->id_mask < 65535) e->id_mask = e->id_mask * 2 + 1;
    rl_arena_init(&e->arena);
    carve(e, &e->arena);
    if ((s = rl_arena_commit(&e->arena, err))) {
        rl_err_prefix(err, "engine: step buffers");
        goto fail;
    }
    carve(e, &e->arena);
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
    rl__engine_fail_embeds(e);
    rl__engine_free_requests(e);
    rl_sched_free(e->sched);
    rl_spec_planner_free(e->spec);
    rl_spec_draft_free(e->draft);
    rl_kv_pool_free(e->pool);
    rl_threadpool_free(e->tp);
    rl_vocab_trie_free(e->trie);
    rl_tokenizer_free(e->tok);
    rl_model_free(e->model);
    rl_arena_free(&e->arena);
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->work_cond);
    pthread_cond_destroy(&e->ev_cond);
    bool hooked = e->hooked;
    rl_engine_hooks h = e->hooks;
    rl_free(e);
    if (hooked && h.on_free) h.on_free(h.ud);
}

struct rl_model *rl_engine_model(rl_engine *e) {
    return e->model;
}
const struct rl_tokenizer *rl_engine_tokenizer(rl_engine *e) {
    return e->tok;
}
int32_t rl_engine_n_ctx(const rl_engine *e) {
    return e->n_ctx;
}

/* ---- the step ---- */

/* Tokens r may still generate (its max_tokens and the context). */
static int32_t tokens_left(const rl_engine *e, const ereq *r) {
    int32_t left = r->max_new - r->n_generated;
    int32_t ctx_left = e->n_ctx - r->base.n_tokens;
    return ctx_left < left ? ctx_left : left;
}

/* Samples the next token of r from its logits row and updates r. */
static void sample_and_update(rl_engine *e, ereq *r, float *row) {
    rl_sample_result sr;
    rl_err gerr;
    if (rl__engine_think_due(r)) { /* the reasoning budget is spent: close the block */
        rl__engine_think_close(e, r);
        return;
    }
    if (r->gm && rl_gmatch_mask(r->gm, row, e->n_vocab, &gerr)) {
        fail(e, r, &gerr);
        return;
    }
    if (r->gm && rl_gmatch_must_close(r->gm, tokens_left(e, r))) {
        int32_t tok = rl_gmatch_close_pick(r->gm, r->gm_scratch, row, e->n_vocab);
        if (tok < 0) {
            finish(e, r, RL_FINISH_LENGTH, NULL);
            return;
        }
        memset(&sr, 0, sizeof sr);
        sr.id = tok;
        rl_sampler_accept(r->sampler, tok);
        if (rl_tokenizer_is_eog(e->tok, tok)) {
            rl__engine_flush_text(e, r, tok, &sr, true);
            finish(e, r, RL_FINISH_STOP, NULL);
            return;
        }
        rl__engine_emit_token(e, r, tok, &sr);
        return;
    }
    int32_t tok = rl_sampler_sample(r->sampler, row, &sr);
    if (tok < 0) {
        finish(e, r, RL_FINISH_ERROR, "every token is banned by logit_bias");
        return;
    }
    rl_sampler_accept(r->sampler, tok);
    rl__engine_emit_token(e, r, tok, &sr);
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
            if (rl_gmatch_mask(r->gm_scratch, rows + (size_t)i * (size_t)e->n_vocab, e->n_vocab,
                               &gerr)) {
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
        if (!rl__engine_emit_token(e, r, out[i], &e->verify_res[i])) return;
}

/* Before scheduling: offers every decoding request to the planner and
 * appends the drafts it gives them to their tokens (the planner keeps
 * them within max_total - 1 and the logits rows reserved for drafts). */
static void plan_drafts(rl_engine *e) {
    rl_spec_planner_begin(e->spec);
    for (ereq *r = e->active; r; r = r->anext) {
        rl_sched_req *b = &r->base;
        if (b->state != RL_SCHED_RUNNING || b->n_tokens - b->n_computed != 1) continue;
        rl_spec_cand *c = rl_spec_planner_add(e->spec);
        RL_ASSERT(c); /* at most max_seqs requests run */
        c->tokens = b->tokens;
        c->n_tokens = b->n_tokens;
        c->left = tokens_left(e, r);
        c->source = r->gp.spec == RL_SPEC_NGRAM   ? RL_SPEC_SRC_NGRAM
                    : r->gp.spec == RL_SPEC_DRAFT ? RL_SPEC_SRC_DRAFT
                                                  : RL_SPEC_SRC_NONE;
        /* no drafts that could run past a reasoning budget */
        c->no_spec = r->gp.sample.n_logprobs > 0 ||
                     (r->think == RL__THINK_IN &&
                      r->think_n + e->params.draft_max + 1 >= r->gp.think_budget);
        c->acc = &r->acc;
        c->gm = r->gm;
        c->dseq = &r->draft_seq;
        c->user = r;
    }
    int32_t n = rl_spec_planner_run(e->spec, e->tp);
    for (int32_t i = 0; i < n; i++) {
        const rl_spec_cand *c = rl_spec_planner_cand(e->spec, i);
        ereq *r = c->user;
        r->drafted = c->from_drafter;
        if (c->k <= 0) continue;
        memcpy(r->base.tokens + r->base.n_tokens, c->draft, (size_t)c->k * sizeof(int32_t));
        r->base.n_tokens += c->k;
        r->n_draft = c->k;
    }
}

/* After scheduling: drafts the step does not cover are withdrawn. */
static void trim_drafts(rl_engine *e) {
    int32_t n = rl_spec_planner_n_cands(e->spec);
    for (int32_t i = 0; i < n; i++) {
        ereq *r = rl_spec_planner_cand(e->spec, i)->user;
        if (r->n_draft > 0) r->n_draft = rl_spec_trim(&r->base, r->n_draft);
    }
}

static void update_stats(rl_engine *e) {
    rl_kv_stats ks = rl_kv_pool_stats(e->pool);
    rl_sched_stats ss = rl_sched_stats_of(e->sched);
    uint64_t live = 0;
    for (ereq *r = e->active; r; r = r->anext)
        if (r->base.state == RL_SCHED_RUNNING) live += (uint64_t)r->base.n_computed;
    pthread_mutex_lock(&e->mu);
    rl_engine_stats *s = &e->stats_snapshot;
    s->n_running = ss.n_running;
    s->n_waiting = ss.n_waiting + e->n_inbox;
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
    s->grammar_forced = rl_spec_planner_n_forced(e->spec);
    pthread_mutex_unlock(&e->mu);
}

/* The batch of the step's plan[0 .. n_plan): each request's scheduled
 * tokens, logits wanted from its last real token on (with its drafts) when
 * the step ends its prefill; *n_logits gets how many rows that is. */
static rl_batch build_batch(rl_engine *e, int32_t n_plan, int32_t *n_logits) {
    int32_t n_tok = 0;
    *n_logits = 0;
    for (int32_t i = 0; i < n_plan; i++) {
        ereq *r = (ereq *)e->plan[i];
        rl_sched_req *b = &r->base;
        if (!r->cached_counted) {
            r->cached_counted = true;
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
            e->b_prompt[n_tok] = b->n_computed + j < b->n_prompt; /* role, not batch */
            *n_logits += want;
            n_tok++;
        }
        e->b_tables[i] = b->kv.blocks;
        e->b_nblocks[i] = b->kv.n_blocks;
    }
    return (rl_batch){.n_tok = n_tok,
                      .token = e->b_token,
                      .pos = e->b_pos,
                      .seq = e->b_seq,
                      .want_logits = e->b_want,
                      .prompt = e->b_prompt,
                      .n_seq = n_plan,
                      .block_tables = (const int32_t *const *)e->b_tables,
                      .n_blocks = e->b_nblocks};
}

int32_t rl_engine_step(rl_engine *e) {
    rl__engine_take_inbox(e);
    int32_t n_embd_tok = rl__engine_run_embeds(e); /* embed.c */
    plan_drafts(e);
    int32_t n_plan = rl_sched_step(e->sched, e->plan);
    trim_drafts(e);
    if (n_plan == 0) {
        update_stats(e);
        return n_embd_tok;
    }
    double t0 = now_s();
    int32_t n_logits;
    rl_batch batch = build_batch(e, n_plan, &n_logits);
    rl_err err = {0};
    double tf = now_s();
    rl_status s = e->hooks.forward(e->hooks.ud, e->model, &batch, rl_kv_pool_layers(e->pool),
                                   e->logits, e->tp, &err);
    /* decode-only steps (every token wants logits) feed the cost model */
    if (!s && n_logits == batch.n_tok)
        rl_spec_planner_observe_fwd(e->spec, batch.n_tok, now_s() - tf);
    if (s) {
        /* A failed forward leaves the batch's requests unusable: end them
         * with the error rather than loop on it. */
        for (int32_t i = 0; i < n_plan; i++)
            finish(e, (ereq *)e->plan[i], RL_FINISH_ERROR, err.msg);
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
        if (r->n_draft > 0)
            verify_and_update(e, r, lr);
        else
            sample_and_update(e, r, lr);
    }
    e->busy_s += now_s() - t0;
    update_stats(e);
    return batch.n_tok;
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
            bool pending = e->inbox || e->cancels || e->embeds;
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
