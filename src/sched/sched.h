/* redline scheduler (L6): iteration-level scheduling over the paged KV pool.
 *
 * The scheduler tracks numbers, not phases (DESIGN.md §1): a request has
 * n_tokens known tokens (prompt + generated [+ drafts]) and n_computed of
 * them have K/V in the cache.  Each step it hands out a token budget:
 *   1. running requests, oldest admission first, each get
 *      min(n_tokens - n_computed, budget left) tokens (1 for a decode,
 *      more for a prefill chunk); when KV blocks run out, the most recently
 *      admitted running request is preempted (its blocks freed, n_computed
 *      reset to 0, back in the waiting queue with its arrival number: ahead
 *      of every later arrival of its priority) and the allocation retried;
 *   2. waiting requests (priority, then arrival order) are admitted while
 *      budget, sequence slots and blocks allow: their longest cached prefix
 *      is adopted first, then a first chunk is scheduled.
 * Prefill, chunked prefill, prefix hits, preemption and decode all fall
 * out of that rule.  Requests are owned by the caller (the engine); the
 * scheduler only links them into its queues and manages their KV.
 * Not thread-safe: the engine's step loop owns it.
 */
#ifndef RL_SCHED_H
#define RL_SCHED_H

#include <stdbool.h>
#include <stdint.h>

#include "base/base.h"
#include "kv/kv.h"

typedef enum rl_sched_state {
    RL_SCHED_NEW = 0,
    RL_SCHED_WAITING = 1,
    RL_SCHED_RUNNING = 2,
    RL_SCHED_DONE = 3,
} rl_sched_state;

typedef struct rl_sched_req {
    uint64_t id;
    int32_t priority; /* higher first; default 0 */
    uint64_t arrival; /* set by rl_sched_add: FCFS order */
    int32_t *tokens;  /* [cap] prompt then generated; owned by the caller */
    int32_t n_tokens; /* known tokens */
    int32_t n_prompt;
    int32_t max_total;   /* n_prompt + max new tokens: the most this request can need */
    int32_t n_computed;  /* tokens with K/V stored */
    int32_t n_cached;    /* prompt tokens served by the prefix cache at first admission */
    int32_t n_preempted; /* times preempted */
    rl_kv_seq kv;
    rl_sched_state state;
    bool admitted_once;
    /* filled by rl_sched_step for the step being built: */
    int32_t step_n; /* tokens scheduled from n_computed; 0 = not in this step */
} rl_sched_req;

typedef struct rl_sched_config {
    int32_t max_batch_tokens; /* token budget per step */
    int32_t max_seqs;         /* running sequences at most */
    bool chunked_prefill;     /* else a request's remaining tokens go in one step (unless
                               * they exceed max_batch_tokens: a preempted request's
                               * recompute is chunked anyway) */
    bool prefix_cache;        /* adopt cached prefixes on admission */
    /* Naive baseline (bench-serve --naive): reserve KV for max_total at
     * admission, and admit a new batch only when none is running. */
    bool reserve_full;
    bool static_batching;
} rl_sched_config;

typedef struct rl_sched rl_sched;

typedef struct rl_sched_stats {
    int32_t n_running, n_waiting;
    uint64_t n_preemptions;
    uint64_t n_steps;
} rl_sched_stats;

rl_status rl_sched_new(const rl_sched_config *cfg, rl_kv_pool *pool, rl_sched **out, rl_err *err);
void rl_sched_free(rl_sched *s);
const rl_sched_config *rl_sched_config_of(const rl_sched *s);

/* Checks that a request could ever run: max_total fits the pool and, when
 * chunking is off, its prompt fits one step.  RL_ERR_LIMIT otherwise, with
 * a message giving the numbers. */
rl_status rl_sched_admissible(const rl_sched *s, const rl_sched_req *r, rl_err *err);
/* Queues r (state NEW -> WAITING). */
rl_status rl_sched_add(rl_sched *s, rl_sched_req *r);
/* Removes r from whatever queue holds it and frees its KV (finish, cancel).
 * Full blocks it computed stay in the prefix cache. */
void rl_sched_remove(rl_sched *s, rl_sched_req *r);

/* Builds the next step.  Writes the scheduled requests, in batch order, to
 * out[0 .. return value) (out has room for max_seqs entries); each has
 * step_n > 0 and KV reserved for n_computed + step_n tokens. */
int32_t rl_sched_step(rl_sched *s, rl_sched_req **out);
/* After the forward: n_computed += step_n for each, KV commit (prefix
 * hashes of newly full blocks). */
void rl_sched_commit(rl_sched *s, rl_sched_req **reqs, int32_t n);
rl_sched_stats rl_sched_stats_of(const rl_sched *s);

#endif
