/* Iteration-level scheduler (see sched.h for the policy).
 *
 * Queues are arrays of request pointers: `running` in admission order
 * (index 0 = oldest admitted, the last one is preempted first), `waiting`
 * sorted by (priority desc, arrival asc).  A preempted request keeps its
 * arrival number, so it goes back ahead of everything that came after it.
 */
#include "sched/sched.h"

#include <string.h>

#include "base/buf.h"

struct rl_sched {
    rl_sched_config cfg;
    rl_kv_pool *pool;
    int32_t pool_blocks; /* usable blocks; fixed at creation, read by other threads */
    int32_t block_size;
    rl_sched_req **running, **waiting;
    int32_t n_running, n_waiting, cap;
    uint64_t next_arrival;
    uint64_t n_preemptions, n_steps;
};

rl_status rl_sched_new(const rl_sched_config *cfg, rl_kv_pool *pool, rl_sched **out, rl_err *err) {
    *out = NULL;
    if (cfg->max_batch_tokens <= 0 || cfg->max_seqs <= 0)
        return rl_err_set(err, RL_ERR_INVALID,
                          "sched: max_batch_tokens %d and max_seqs %d must be positive",
                          cfg->max_batch_tokens, cfg->max_seqs);
    rl_sched *s = rl_calloc(1, sizeof *s);
    if (!s) return rl_err_set(err, RL_ERR_NOMEM, "sched: out of memory");
    s->cfg = *cfg;
    s->pool = pool;
    s->pool_blocks = rl_kv_pool_stats(pool).n_blocks;
    s->block_size = rl_kv_pool_config(pool)->block_size;
    *out = s;
    return RL_OK;
}

void rl_sched_free(rl_sched *s) {
    if (!s) return;
    rl_free(s->running);
    rl_free(s->waiting);
    rl_free(s);
}

const rl_sched_config *rl_sched_config_of(const rl_sched *s) {
    return &s->cfg;
}

rl_sched_stats rl_sched_stats_of(const rl_sched *s) {
    rl_sched_stats st = {.n_running = s->n_running,
                         .n_waiting = s->n_waiting,
                         .n_preemptions = s->n_preemptions,
                         .n_steps = s->n_steps};
    return st;
}

rl_status rl_sched_admissible(const rl_sched *s, const rl_sched_req *r, rl_err *err) {
    /* called from submitting threads: reads only fields fixed at creation */
    int64_t blocks = ((int64_t)r->max_total + s->block_size - 1) / s->block_size;
    int64_t have = s->pool_blocks;
    if (blocks > have)
        return rl_err_set(err, RL_ERR_LIMIT,
                          "request needs up to %d tokens of KV cache (%lld blocks) but the whole "
                          "cache holds %lld blocks of %d tokens",
                          r->max_total, (long long)blocks, (long long)have, s->block_size);
    if (!s->cfg.chunked_prefill && r->n_tokens > s->cfg.max_batch_tokens)
        return rl_err_set(err, RL_ERR_LIMIT,
                          "prompt of %d tokens exceeds the batch budget of %d tokens and chunked "
                          "prefill is off",
                          r->n_tokens, s->cfg.max_batch_tokens);
    return RL_OK;
}

static bool ensure_cap(rl_sched *s, int32_t need) {
    int32_t rcap = s->cap; /* running and waiting share s->cap */
    if (rl_grow_i32((void **)&s->running, &rcap, need, sizeof *s->running) ||
        rl_grow_i32((void **)&s->waiting, &s->cap, need, sizeof *s->waiting))
        return false;
    return true;
}

/* true if a goes before b in the waiting queue */
static bool wait_before(const rl_sched_req *a, const rl_sched_req *b) {
    if (a->priority != b->priority) return a->priority > b->priority;
    return a->arrival < b->arrival;
}

static void waiting_insert(rl_sched *s, rl_sched_req *r) {
    int32_t i = s->n_waiting;
    while (i > 0 && wait_before(r, s->waiting[i - 1])) {
        s->waiting[i] = s->waiting[i - 1];
        i--;
    }
    s->waiting[i] = r;
    s->n_waiting++;
    r->state = RL_SCHED_WAITING;
}

rl_status rl_sched_add(rl_sched *s, rl_sched_req *r) {
    if (!ensure_cap(s, s->n_running + s->n_waiting + 1)) return RL_ERR_NOMEM;
    r->arrival = s->next_arrival++;
    r->n_computed = 0;
    r->step_n = 0;
    waiting_insert(s, r);
    return RL_OK;
}

static void remove_at(rl_sched_req **arr, int32_t *n, int32_t i) {
    memmove(arr + i, arr + i + 1, (size_t)(*n - i - 1) * sizeof *arr);
    (*n)--;
}

void rl_sched_remove(rl_sched *s, rl_sched_req *r) {
    for (int32_t i = 0; i < s->n_running; i++)
        if (s->running[i] == r) {
            remove_at(s->running, &s->n_running, i);
            break;
        }
    for (int32_t i = 0; i < s->n_waiting; i++)
        if (s->waiting[i] == r) {
            remove_at(s->waiting, &s->n_waiting, i);
            break;
        }
    rl_kv_seq_free(s->pool, &r->kv);
    r->state = RL_SCHED_DONE;
    r->step_n = 0;
}

/* Frees the youngest running request's KV and puts it back in the queue. */
static void preempt_last(rl_sched *s) {
    rl_sched_req *v = s->running[--s->n_running];
    rl_kv_seq_free(s->pool, &v->kv);
    v->n_computed = 0;
    v->step_n = 0;
    v->n_preempted++;
    s->n_preemptions++;
    waiting_insert(s, v);
}

/* Tokens r takes from a step with `budget` left: all it has left, else a
 * budget-sized chunk if chunking is on, else none (it waits for a step
 * with room).  A remainder larger than the whole per-step budget is
 * chunked even with chunking off: admission checked the prompt against
 * the budget, but a preempted request recomputes its generated tokens too,
 * and would otherwise never run again (and block the queue behind it). */
static int32_t chunk_for(const rl_sched *s, const rl_sched_req *r, int32_t budget) {
    int32_t left = r->n_tokens - r->n_computed;
    if (left <= budget) return left;
    return s->cfg.chunked_prefill || left > s->cfg.max_batch_tokens ? budget : 0;
}

static int32_t reserve_target(const rl_sched *s, const rl_sched_req *r, int32_t n) {
    int32_t t = r->n_computed + n;
    if (s->cfg.reserve_full && r->max_total > t) t = r->max_total;
    return t;
}

int32_t rl_sched_step(rl_sched *s, rl_sched_req **out) {
    int32_t budget = s->cfg.max_batch_tokens, n_out = 0;
    /* 1. running requests, oldest first */
    for (int32_t i = 0; i < s->n_running && budget > 0; i++) {
        rl_sched_req *r = s->running[i];
        int32_t n = chunk_for(s, r, budget);
        if (n <= 0) continue;
        while (rl_kv_seq_reserve(s->pool, &r->kv, reserve_target(s, r, n)) != RL_OK) {
            if (s->n_running - 1 > i) {
                preempt_last(s); /* someone younger gives way */
            } else {
                /* r is the youngest: it gives way itself */
                preempt_last(s);
                n = 0;
                break;
            }
        }
        if (n <= 0) break; /* r was preempted: it was the last running */
        r->step_n = n;
        out[n_out++] = r;
        budget -= n;
    }
    /* 2. admissions */
    bool may_admit = !(s->cfg.static_batching && s->n_running > 0);
    while (may_admit && budget > 0 && s->n_waiting > 0 && s->n_running < s->cfg.max_seqs) {
        rl_sched_req *r = s->waiting[0];
        if (s->cfg.prefix_cache && r->n_computed == 0 && r->kv.n_blocks == 0) {
            int32_t hit =
                rl_kv_seq_match_prefix(s->pool, &r->kv, r->tokens, r->n_tokens, r->n_tokens - 1);
            r->n_computed = hit;
            if (!r->admitted_once) r->n_cached = hit < r->n_prompt ? hit : r->n_prompt;
        }
        int32_t n = chunk_for(s, r, budget);
        if (n <= 0 || rl_kv_seq_reserve(s->pool, &r->kv, reserve_target(s, r, n)) != RL_OK) {
            /* cannot start now: give back adopted prefix blocks so they are
             * not pinned while waiting */
            rl_kv_seq_free(s->pool, &r->kv);
            r->n_computed = 0;
            break;
        }
        remove_at(s->waiting, &s->n_waiting, 0);
        s->running[s->n_running++] = r;
        r->state = RL_SCHED_RUNNING;
        r->admitted_once = true;
        r->step_n = n;
        out[n_out++] = r;
        budget -= n;
    }
    if (n_out) s->n_steps++;
    return n_out;
}

void rl_sched_commit(rl_sched *s, rl_sched_req **reqs, int32_t n) {
    for (int32_t i = 0; i < n; i++) {
        rl_sched_req *r = reqs[i];
        r->n_computed += r->step_n;
        r->step_n = 0;
        if (s->cfg.prefix_cache)
            rl_kv_seq_commit(s->pool, &r->kv, r->tokens, r->n_computed);
        else
            r->kv.n_tokens = r->n_computed;
    }
}
