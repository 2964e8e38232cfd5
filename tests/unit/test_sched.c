/* Scheduler tests: src/sched/ driven over a real (tiny) KV pool with no
 * model.  A small simulator plays the engine's part the way
 * src/engine/engine.c does: rl_sched_admissible then rl_sched_add on
 * submit; each step rl_sched_step, then rl_sched_commit (the forward's K/V
 * is now stored), then for every request whose known tokens are all
 * computed one generated token is appended, and a request that reached its
 * max_new is rl_sched_remove'd.
 *
 * Each step is recorded as "A7 B1": the requests scheduled, in batch order,
 * with their step_n; a run of steps joins them with '|'.  The tests assert
 * those traces exactly (admission order by priority then arrival, which
 * request is preempted, where a preempted one resumes, static batches,
 * chunk sizes), the exact block ids and counts at chosen points, and that
 * after every scenario every block is back in the pool (pool invariants
 * checked after every step). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "kv/kv.h"
#include "sched/sched.h"

#define MAX_TOK  64
#define MAX_SEQS 8
#define BS       4 /* tokens per KV block in every test */

/* A request as the engine holds one: the scheduler's part first, so a
 * plan entry converts back (as engine.c does with its ereq). */
typedef struct sreq {
    rl_sched_req b;
    char name;
    int32_t max_new, n_gen;
    bool done;
    int32_t toks[MAX_TOK];
} sreq;

typedef struct sim {
    rl_kv_pool *pool;
    rl_sched *s;
    rl_sched_config cfg;
    rl_sched_req *plan[MAX_SEQS];
    char step[256]; /* trace of the last step */
    char run[2048]; /* trace of the last sim_run */
} sim;

static void pool_ok(rl_kv_pool *p) {
    rl_err err = {0};
    if (!rl_kv_pool_check(p, &err)) fail_msg("%s", err.msg);
}

/* A pool of n_usable blocks of BS tokens (2 layers, 1 KV head of 8). */
static void sim_init(sim *m, int32_t n_usable, rl_sched_config cfg) {
    memset(m, 0, sizeof *m);
    rl_kv_config kc = {.n_layer = 2,
                       .n_kv_head = 1,
                       .head_dim = 8,
                       .block_size = BS,
                       .k_type = RL_TYPE_F16,
                       .v_type = RL_TYPE_F16,
                       .n_blocks = n_usable + 1};
    rl_err err = {0};
    assert_int_equal(rl_kv_pool_new(&kc, &m->pool, &err), RL_OK);
    assert_int_equal(rl_kv_pool_stats(m->pool).n_blocks, n_usable);
    assert_true(cfg.max_seqs <= MAX_SEQS);
    m->cfg = cfg;
    assert_int_equal(rl_sched_new(&cfg, m->pool, &m->s, &err), RL_OK);
}

/* Every request finished, every block back in the pool (refcount 0; a
 * block with a registered prefix hash stays cached, the rest are plain). */
static void sim_free(sim *m) {
    rl_sched_stats ss = rl_sched_stats_of(m->s);
    assert_int_equal(ss.n_running, 0);
    assert_int_equal(ss.n_waiting, 0);
    rl_kv_stats ks = rl_kv_pool_stats(m->pool);
    assert_int_equal(ks.n_used, 0);
    assert_int_equal(ks.n_free + ks.n_cached, ks.n_blocks);
    if (!m->cfg.prefix_cache) assert_int_equal(ks.n_free, ks.n_blocks);
    assert_int_equal(rl_kv_pool_available(m->pool), ks.n_blocks);
    pool_ok(m->pool);
    rl_sched_free(m->s);
    rl_kv_pool_free(m->pool);
}

/* prompt NULL: tokens name*100 + i (distinct per request). */
static void req_init(sreq *r, char name, int32_t priority, const int32_t *prompt, int32_t n_prompt,
                     int32_t max_new) {
    memset(r, 0, sizeof *r);
    assert_true(n_prompt + max_new <= MAX_TOK);
    r->name = name;
    r->max_new = max_new;
    for (int32_t i = 0; i < n_prompt; i++) r->toks[i] = prompt ? prompt[i] : name * 100 + i;
    r->b.tokens = r->toks;
    r->b.n_prompt = r->b.n_tokens = n_prompt;
    r->b.max_total = n_prompt + max_new;
    r->b.priority = priority;
    rl_kv_seq_init(&r->b.kv, 0);
}

/* The engine's submit: admissible, then queued. */
static void sim_add(sim *m, sreq *r) {
    rl_err err = {0};
    if (rl_sched_admissible(m->s, &r->b, &err) != RL_OK) fail_msg("%c: %s", r->name, err.msg);
    assert_int_equal(rl_sched_add(m->s, &r->b), RL_OK);
    assert_int_equal(r->b.state, RL_SCHED_WAITING);
}

/* One engine step; returns its trace ("" when nothing was scheduled). */
static const char *sim_step(sim *m) {
    int32_t n = rl_sched_step(m->s, m->plan);
    assert_true(n >= 0 && n <= m->cfg.max_seqs);
    size_t at = 0;
    int32_t n_tok = 0;
    m->step[0] = '\0';
    for (int32_t i = 0; i < n; i++) {
        rl_sched_req *b = m->plan[i];
        assert_int_equal(b->state, RL_SCHED_RUNNING);
        assert_true(b->step_n > 0);
        assert_true(b->n_computed + b->step_n <= b->n_tokens);
        /* KV is reserved for every token of the step */
        assert_true(b->kv.n_blocks * BS >= b->n_computed + b->step_n);
        n_tok += b->step_n;
        at += (size_t)snprintf(m->step + at, sizeof m->step - at, "%s%c%d", i ? " " : "",
                               ((sreq *)b)->name, b->step_n);
        assert_true(at < sizeof m->step);
    }
    assert_true(n_tok <= m->cfg.max_batch_tokens);
    rl_sched_commit(m->s, m->plan, n);
    for (int32_t i = 0; i < n; i++) {
        sreq *r = (sreq *)m->plan[i];
        assert_int_equal(r->b.step_n, 0);
        if (r->b.n_computed != r->b.n_tokens) continue; /* mid-prefill chunk */
        /* "sample": a token that no prompt uses */
        r->toks[r->b.n_tokens++] = 10000 + r->name * 100 + r->n_gen;
        if (++r->n_gen >= r->max_new) {
            rl_sched_remove(m->s, &r->b);
            assert_int_equal(r->b.state, RL_SCHED_DONE);
            assert_int_equal(r->b.kv.n_blocks, 0);
            r->done = true;
        }
    }
    pool_ok(m->pool);
    return m->step;
}

/* Steps until both queues are empty (at most max_steps); returns the
 * steps' traces joined with '|'. */
static const char *sim_run(sim *m, int max_steps) {
    size_t at = 0;
    m->run[0] = '\0';
    for (int i = 0;; i++) {
        rl_sched_stats ss = rl_sched_stats_of(m->s);
        if (ss.n_running == 0 && ss.n_waiting == 0) break;
        if (i == max_steps)
            fail_msg("still %d running, %d waiting after %d steps: %s", ss.n_running, ss.n_waiting,
                     max_steps, m->run);
        const char *t = sim_step(m);
        at += (size_t)snprintf(m->run + at, sizeof m->run - at, "%s%s", i ? "|" : "", t);
        assert_true(at < sizeof m->run);
    }
    return m->run;
}

static rl_sched_config cfg_default(int32_t budget, int32_t max_seqs) {
    rl_sched_config c = {.max_batch_tokens = budget, .max_seqs = max_seqs, .chunked_prefill = true};
    return c;
}

/* Waiting requests are admitted by priority (higher first), then arrival;
 * a later arrival of higher priority goes ahead of everything waiting but
 * does not displace a running request. */
static void test_priority_order(void **state) {
    (void)state;
    /* enough sequence slots: one step admits all, in queue order */
    sim m;
    sim_init(&m, 16, cfg_default(64, 8));
    sreq r[5];
    const int32_t prio[5] = {0, 5, 0, 5, -1};
    for (int i = 0; i < 5; i++) {
        req_init(&r[i], (char)('A' + i), prio[i], NULL, 3, 2);
        sim_add(&m, &r[i]);
    }
    assert_string_equal(sim_step(&m), "B3 D3 A3 C3 E3");
    assert_string_equal(sim_run(&m, 10), "B1 D1 A1 C1 E1");
    sim_free(&m);

    /* one slot: requests run one after another in that order */
    sim_init(&m, 16, cfg_default(64, 1));
    for (int i = 0; i < 5; i++) {
        req_init(&r[i], (char)('A' + i), prio[i], NULL, 3, 2);
        sim_add(&m, &r[i]);
    }
    assert_string_equal(sim_step(&m), "B3");
    sreq f;
    req_init(&f, 'F', 9, NULL, 3, 2);
    sim_add(&m, &f);
    assert_string_equal(sim_run(&m, 20), "B1|F3|F1|D3|D1|A3|A1|C3|C1|E3|E1");
    assert_int_equal(rl_sched_stats_of(m.s).n_preemptions, 0);
    sim_free(&m);
}

/* When a running request needs a block and none is left, the most recently
 * admitted running request is preempted (its blocks freed, n_computed back
 * to 0) and the allocation retried; older requests keep running. */
static void test_preempt_youngest(void **state) {
    (void)state;
    sim m;
    sim_init(&m, 6, cfg_default(32, 4));
    sreq a, b, c;
    req_init(&a, 'A', 0, NULL, 7, 8); /* 15 tokens at most: 4 blocks */
    req_init(&b, 'B', 0, NULL, 7, 8);
    req_init(&c, 'C', 0, NULL, 7, 8);
    sim_add(&m, &a);
    sim_add(&m, &b);
    sim_add(&m, &c);
    assert_string_equal(sim_step(&m), "A7 B7 C7");
    assert_int_equal(a.b.kv.n_blocks, 2);
    assert_int_equal(a.b.kv.blocks[0], 1);
    assert_int_equal(a.b.kv.blocks[1], 2);
    assert_int_equal(b.b.kv.blocks[0], 3);
    assert_int_equal(b.b.kv.blocks[1], 4);
    assert_int_equal(c.b.kv.blocks[0], 5);
    assert_int_equal(c.b.kv.blocks[1], 6);
    assert_int_equal(rl_kv_pool_available(m.pool), 0);
    /* 8 tokens known each: still 2 blocks */
    assert_string_equal(sim_step(&m), "A1 B1 C1");
    /* the 9th token needs a third block for each: C, the youngest, gives
     * way; A and B take its blocks (freed last-first: 6, then 5) */
    assert_string_equal(sim_step(&m), "A1 B1");
    assert_int_equal(c.b.state, RL_SCHED_WAITING);
    assert_int_equal(c.b.n_computed, 0);
    assert_int_equal(c.b.kv.n_blocks, 0);
    assert_int_equal(c.b.n_preempted, 1);
    assert_int_equal(c.b.n_tokens, 9); /* its generated tokens are kept */
    assert_int_equal(a.b.n_preempted, 0);
    assert_int_equal(b.b.n_preempted, 0);
    assert_int_equal(a.b.kv.n_blocks, 3);
    assert_int_equal(a.b.kv.blocks[2], 6);
    assert_int_equal(b.b.kv.n_blocks, 3);
    assert_int_equal(b.b.kv.blocks[2], 5);
    rl_sched_stats ss = rl_sched_stats_of(m.s);
    assert_int_equal(ss.n_running, 2);
    assert_int_equal(ss.n_waiting, 1);
    assert_int_equal(ss.n_preemptions, 1);
    /* at 13 tokens A needs a fourth block: now B is the youngest running;
     * B resumes (recomputing its 13 tokens) before C, which came later */
    assert_string_equal(sim_run(&m, 30), "A1 B1|A1 B1|A1 B1|A1|A1|B13|B1|C9|C1|C1|C1|C1|C1");
    assert_int_equal(a.b.n_preempted, 0);
    assert_int_equal(b.b.n_preempted, 1);
    assert_int_equal(c.b.n_preempted, 1);
    assert_int_equal(rl_sched_stats_of(m.s).n_preemptions, 2);
    assert_true(a.done && b.done && c.done);
    sim_free(&m);

    /* the request that runs out is itself the youngest: it gives way, the
     * older one (which needs nothing this step) keeps its blocks */
    sim_init(&m, 4, cfg_default(32, 4));
    req_init(&a, 'A', 0, NULL, 7, 4);
    req_init(&b, 'B', 0, NULL, 8, 4);
    sim_add(&m, &a);
    sim_add(&m, &b);
    assert_string_equal(sim_step(&m), "A7 B8");
    assert_string_equal(sim_step(&m), "A1"); /* B's 9th token: no block */
    assert_int_equal(b.b.state, RL_SCHED_WAITING);
    assert_int_equal(b.b.n_preempted, 1);
    assert_int_equal(a.b.n_preempted, 0);
    assert_int_equal(a.b.kv.n_blocks, 2);
    assert_string_equal(sim_run(&m, 20), "A1|A1|B9|B1|B1");
    sim_free(&m);
}

/* A preempted request keeps its arrival number: it is re-admitted ahead of
 * every later arrival of its priority, even one that would fit now (no
 * overtaking); a later arrival of higher priority still goes first. */
static void test_preempted_resumes_first(void **state) {
    (void)state;
    sim m;
    sim_init(&m, 4, cfg_default(32, 4));
    sreq a, b, c, h;
    req_init(&a, 'A', 0, NULL, 7, 6); /* 13 tokens at most: 4 blocks */
    req_init(&b, 'B', 0, NULL, 7, 5);
    sim_add(&m, &a);
    sim_add(&m, &b);
    assert_string_equal(sim_step(&m), "A7 B7");
    assert_string_equal(sim_step(&m), "A1 B1");
    /* C arrives after B, while no block is free */
    req_init(&c, 'C', 0, NULL, 3, 1);
    sim_add(&m, &c);
    assert_int_equal(rl_kv_pool_available(m.pool), 0);
    assert_string_equal(sim_step(&m), "A1"); /* A's 9th token: B preempted */
    assert_int_equal(b.b.state, RL_SCHED_WAITING);
    assert_int_equal(b.b.n_preempted, 1);
    /* C needs one block and one is free, but B (3 blocks) is ahead */
    assert_int_equal(rl_kv_pool_available(m.pool), 1);
    assert_int_equal(c.b.state, RL_SCHED_WAITING);
    assert_string_equal(sim_step(&m), "A1");
    assert_int_equal(c.b.state, RL_SCHED_WAITING);
    assert_int_equal(rl_sched_stats_of(m.s).n_waiting, 2);
    /* H arrives last with a higher priority: it takes the free block */
    req_init(&h, 'H', 1, NULL, 3, 1);
    sim_add(&m, &h);
    assert_string_equal(sim_step(&m), "A1 H3");
    assert_true(h.done);
    /* A finishes; then B (9 tokens known) before C */
    assert_string_equal(sim_run(&m, 20), "A1|B9 C3|B1|B1");
    assert_int_equal(b.b.n_tokens, 12);
    assert_int_equal(c.b.n_preempted, 0);
    assert_int_equal(rl_sched_stats_of(m.s).n_preemptions, 1);
    sim_free(&m);
}

/* static_batching: no admission while any request runs, even with free
 * slots, budget and blocks; without it the newcomer joins the next step. */
static const char *static_script(sim *m, bool static_batching) {
    rl_sched_config cfg = cfg_default(32, 4);
    cfg.static_batching = static_batching;
    sim_init(m, 16, cfg);
    sreq a, b, c;
    req_init(&a, 'A', 0, NULL, 3, 2);
    req_init(&b, 'B', 0, NULL, 3, 4);
    req_init(&c, 'C', 0, NULL, 3, 1);
    sim_add(m, &a);
    sim_add(m, &b);
    assert_string_equal(sim_step(m), "A3 B3");
    sim_add(m, &c);
    sim_run(m, 10);
    sim_free(m);
    return m->run;
}

static void test_static_batches(void **state) {
    (void)state;
    sim m;
    assert_string_equal(static_script(&m, true), "A1 B1|B1|B1|C3");
    assert_string_equal(static_script(&m, false), "A1 B1 C3|B1|B1");
}

/* reserve_full (the naive baseline, configured as the engine does for
 * naive: no chunking, no prefix cache, static batches): a request gets KV
 * for max_total at admission and never allocates again; a request whose
 * max_total does not fit the free blocks waits even though its prompt would. */
static void test_full_reservation(void **state) {
    (void)state;
    rl_sched_config naive = {.max_batch_tokens = 16,
                             .max_seqs = 4,
                             .chunked_prefill = false,
                             .prefix_cache = false,
                             .reserve_full = true,
                             .static_batching = true};
    sim m;
    sim_init(&m, 6, naive);
    sreq a, b;
    req_init(&a, 'A', 0, NULL, 5, 10); /* 15 tokens: 4 blocks */
    req_init(&b, 'B', 0, NULL, 3, 6);  /* 9 tokens: 3 blocks, 2 left */
    sim_add(&m, &a);
    sim_add(&m, &b);
    assert_string_equal(sim_step(&m), "A5");
    assert_int_equal(a.b.kv.n_blocks, 4);
    for (int i = 0; i < 4; i++) assert_int_equal(a.b.kv.blocks[i], 1 + i);
    assert_int_equal(b.b.state, RL_SCHED_WAITING);
    assert_int_equal(b.b.kv.n_blocks, 0);
    assert_int_equal(rl_kv_pool_stats(m.pool).n_used, 4);
    for (int i = 0; i < 9; i++) {
        assert_string_equal(sim_step(&m), "A1");
        if (!a.done) assert_int_equal(a.b.kv.n_blocks, 4);
        assert_int_equal(b.b.state, RL_SCHED_WAITING);
    }
    assert_true(a.done);
    /* B takes all of its 3 blocks at once: the 2 never used (5, 6), then
     * A's, freed last-first */
    assert_string_equal(sim_step(&m), "B3");
    assert_int_equal(b.b.kv.n_blocks, 3);
    assert_int_equal(b.b.kv.blocks[0], 5);
    assert_int_equal(b.b.kv.blocks[1], 6);
    assert_int_equal(b.b.kv.blocks[2], 4);
    assert_string_equal(sim_run(&m, 10), "B1|B1|B1|B1|B1");
    assert_int_equal(rl_sched_stats_of(m.s).n_preemptions, 0);
    sim_free(&m);

    /* the same two on demand: both start at once, 2 + 1 blocks */
    rl_sched_config paged = naive;
    paged.reserve_full = paged.static_batching = false;
    sim_init(&m, 6, paged);
    req_init(&a, 'A', 0, NULL, 5, 10);
    req_init(&b, 'B', 0, NULL, 3, 6);
    sim_add(&m, &a);
    sim_add(&m, &b);
    assert_string_equal(sim_step(&m), "A5 B3");
    assert_int_equal(a.b.kv.n_blocks, 2);
    assert_int_equal(b.b.kv.n_blocks, 1);
    sim_run(&m, 20);
    sim_free(&m);
}

/* Prefix cache: a request whose prompt starts with another's computed full
 * blocks adopts them (shared, refcount 2) and computes only the rest;
 * at least one token is always left to compute; blocks of finished
 * requests stay cached and are revived by a later match. */
static void test_prefix_adoption(void **state) {
    (void)state;
    rl_sched_config cfg = cfg_default(32, 4);
    cfg.prefix_cache = true;
    sim m;
    sim_init(&m, 8, cfg);
    int32_t p[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    int32_t q[10] = {1, 2, 3, 4, 5, 6, 7, 8, 50, 51}; /* shares p's first 2 blocks */
    sreq a, b, c, d;
    req_init(&a, 'A', 0, p, 10, 3);
    sim_add(&m, &a);
    assert_string_equal(sim_step(&m), "A10");
    assert_int_equal(a.b.n_cached, 0);
    assert_int_equal(a.b.kv.n_blocks, 3);
    assert_int_equal(a.b.kv.n_hashed, 2); /* blocks 1, 2 are full */

    req_init(&b, 'B', 0, q, 10, 2);
    sim_add(&m, &b);
    assert_string_equal(sim_step(&m), "A1 B2");
    assert_int_equal(b.b.n_cached, 8);
    assert_int_equal(b.b.kv.n_blocks, 3);
    assert_int_equal(b.b.kv.blocks[0], 1);
    assert_int_equal(b.b.kv.blocks[1], 2);
    assert_int_equal(b.b.kv.blocks[2], 4);
    assert_int_equal(rl_kv_block_refcount(m.pool, 1), 2);
    assert_int_equal(rl_kv_block_refcount(m.pool, 2), 2);
    assert_int_equal(rl_kv_block_refcount(m.pool, 3), 1);
    assert_int_equal(rl_kv_block_refcount(m.pool, 4), 1);
    rl_kv_stats ks = rl_kv_pool_stats(m.pool);
    assert_int_equal(ks.n_used, 4);
    assert_int_equal(ks.prefix_hits, 2);

    /* C's whole 8-token prompt is cached, but one token must be computed
     * (for its logits): only the first block is adopted */
    req_init(&c, 'C', 0, p, 8, 1);
    sim_add(&m, &c);
    assert_string_equal(sim_step(&m), "A1 B1 C4");
    assert_true(a.done && b.done && c.done);
    assert_int_equal(c.b.n_cached, 4);
    /* everything returned: 1, 2 (the shared prefix) and 3 (A's third
     * block, full once A computed 12 tokens) stay cached */
    ks = rl_kv_pool_stats(m.pool);
    assert_int_equal(ks.n_used, 0);
    assert_int_equal(ks.n_cached, 3);
    assert_int_equal(ks.n_free, 5);

    /* a later request with A's prompt revives the cached prefix blocks */
    req_init(&d, 'D', 0, p, 10, 1);
    sim_add(&m, &d);
    assert_string_equal(sim_step(&m), "D2");
    assert_true(d.done);
    assert_int_equal(d.b.n_cached, 8);
    assert_int_equal(rl_kv_pool_stats(m.pool).n_evictions, 0);
    sim_free(&m);
}

/* A request is refused up front, with the sizes in the message, when its
 * max_total cannot fit the whole pool, or, with chunked prefill off, when
 * its prompt exceeds the token budget. */
static void test_admissible(void **state) {
    (void)state;
    rl_sched_config cfg = cfg_default(8, 4);
    cfg.chunked_prefill = false;
    sim m;
    sim_init(&m, 6, cfg); /* 24 tokens of KV */
    sreq r;
    rl_err err = {0};
    req_init(&r, 'A', 0, NULL, 8, 16); /* the budget exactly, the pool exactly */
    assert_int_equal(rl_sched_admissible(m.s, &r.b, &err), RL_OK);

    req_init(&r, 'A', 0, NULL, 9, 1);
    assert_int_equal(rl_sched_admissible(m.s, &r.b, &err), RL_ERR_LIMIT);
    assert_string_equal(err.msg, "prompt of 9 tokens exceeds the batch budget of 8 tokens and "
                                 "chunked prefill is off");

    memset(&err, 0, sizeof err);
    req_init(&r, 'A', 0, NULL, 8, 17);
    assert_int_equal(rl_sched_admissible(m.s, &r.b, &err), RL_ERR_LIMIT);
    assert_string_equal(err.msg, "request needs up to 25 tokens of KV cache (7 blocks) but the "
                                 "whole cache holds 6 blocks of 4 tokens");
    sim_free(&m);

    /* with chunking on, the long prompt is fine */
    sim_init(&m, 6, cfg_default(8, 4));
    req_init(&r, 'A', 0, NULL, 9, 1);
    assert_int_equal(rl_sched_admissible(m.s, &r.b, &err), RL_OK);
    sim_add(&m, &r);
    assert_string_equal(sim_run(&m, 5), "A8|A1");
    sim_free(&m);
}

/* Chunked prefill: a long prompt goes in budget-sized chunks, running
 * requests first; a newcomer's first chunk takes what the running ones
 * left of the budget. */
static void test_chunked_prefill(void **state) {
    (void)state;
    sim m;
    sim_init(&m, 16, cfg_default(8, 4));
    sreq a, b, c, d;
    req_init(&a, 'A', 0, NULL, 20, 2);
    req_init(&b, 'B', 0, NULL, 3, 1);
    sim_add(&m, &a);
    sim_add(&m, &b);
    assert_string_equal(sim_step(&m), "A8");
    assert_int_equal(a.b.n_computed, 8);
    assert_int_equal(a.b.kv.n_blocks, 2);
    assert_int_equal(b.b.state, RL_SCHED_WAITING); /* no budget left */
    assert_string_equal(sim_step(&m), "A8");
    assert_int_equal(a.b.kv.n_blocks, 4);
    assert_int_equal(a.n_gen, 0);
    assert_string_equal(sim_step(&m), "A4 B3");
    assert_int_equal(a.b.kv.n_blocks, 5);
    assert_int_equal(a.n_gen, 1);
    assert_string_equal(sim_run(&m, 5), "A1");

    req_init(&c, 'C', 0, NULL, 3, 4);
    sim_add(&m, &c);
    assert_string_equal(sim_step(&m), "C3");
    req_init(&d, 'D', 0, NULL, 20, 1);
    sim_add(&m, &d);
    assert_string_equal(sim_run(&m, 5), "C1 D7|C1 D7|C1 D6");
    sim_free(&m);
}

/* With chunked prefill off, a preempted request whose known tokens (prompt
 * plus generated) outgrew the token budget must still be resumed: its
 * tokens are recomputed in budget-sized chunks (it could never run in one
 * step again). */
static void test_preempted_beyond_budget_unchunked(void **state) {
    (void)state;
    rl_sched_config cfg = cfg_default(8, 4);
    cfg.chunked_prefill = false;
    sim m;
    sim_init(&m, 4, cfg);
    sreq a, b;
    req_init(&a, 'A', 0, NULL, 4, 8); /* 12 tokens: 3 blocks */
    req_init(&b, 'B', 0, NULL, 4, 8);
    sim_add(&m, &a);
    sim_add(&m, &b);
    assert_string_equal(sim_step(&m), "A4 B4");
    for (int i = 0; i < 4; i++) assert_string_equal(sim_step(&m), "A1 B1");
    /* A's 9th token: B (9 tokens known, more than the budget) gives way */
    assert_string_equal(sim_step(&m), "A1");
    assert_int_equal(b.b.n_preempted, 1);
    assert_int_equal(b.b.n_tokens, 9);
    assert_string_equal(sim_run(&m, 20), "A1|A1|B8|B1|B1|B1");
    assert_true(b.done);
    assert_int_equal(b.n_gen, 8);
    sim_free(&m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_priority_order),
        cmocka_unit_test(test_preempt_youngest),
        cmocka_unit_test(test_preempted_resumes_first),
        cmocka_unit_test(test_static_batches),
        cmocka_unit_test(test_full_reservation),
        cmocka_unit_test(test_prefix_adoption),
        cmocka_unit_test(test_admissible),
        cmocka_unit_test(test_chunked_prefill),
        cmocka_unit_test(test_preempted_beyond_budget_unchunked),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
