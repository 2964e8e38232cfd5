/* Engine tests on the real default model (models/smollm2-135m.gguf, or
 * $REDLINE_MODEL): batch invariance (alone vs mixed, chunked vs not, prefix
 * hit vs miss, preempted vs not), every KV block back in the pool after
 * finish, cancel and preemption, oversubscription, seeded sampling
 * independent of companions, the queue limit, cancellation racing the
 * engine thread from several client threads, and clear errors for bad
 * requests. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "redline.h"
#include "engine/engine.h"
#include "grammar/grammar.h"
#include "tokenizer/tokenizer.h"

#define N_PROMPTS 16
#define GEN       16

static const char *model_path(void) {
    const char *m = getenv("REDLINE_MODEL");
    return m && *m ? m : "models/smollm2-135m.gguf";
}

static const char *texts[N_PROMPTS] = {
    "The capital of France is",
    "def fibonacci(n):\n    ",
    "Once upon a time, in a small village,",
    "The three primary colors are",
    "To make a cup of tea, first",
    "Water boils at a temperature of",
    "The quick brown fox",
    "In 1969, astronauts landed on",
    "A list of prime numbers: 2, 3, 5,",
    "SELECT name FROM users WHERE",
    "The mitochondria is the",
    "My favourite programming language is",
    "Photosynthesis converts sunlight into",
    "The largest ocean on Earth is the",
    "import numpy as np\nx = np.",
    "Dear hiring manager, I am writing to",
};

typedef struct run_result {
    int32_t toks[N_PROMPTS][GEN + 1];
    int32_t n[N_PROMPTS];
    int32_t cached[N_PROMPTS];
} run_result;

/* REDLINE_QUICK=1 (the sanitizer run) uses 4 prompts instead of 16, 8 tokens each instead of 16 */
static int g_np = N_PROMPTS;
static int g_gen = GEN; /* tokens generated per request */
static rl_spec_mode g_spec = RL_SPEC_NONE;
static const char *g_draft = NULL;
static int32_t g_draft_vocab = 0; /* restricted draft head (0 = full) */
static bool g_fixed = false;      /* draft draft_max tokens, no cost model */

static rl_engine *make_engine(int32_t max_batch, int32_t max_seqs, size_t kv_mem, bool prefix) {
    rl_engine_params p;
    rl_engine_params_default(&p);
    p.draft_model_path = g_draft;
    p.draft_n_vocab = g_draft_vocab;
    p.draft_fixed = g_fixed;
    p.spec_max_batch = 16;
    p.model_path = model_path();
    p.n_threads = 2;
    p.max_batch_tokens = max_batch;
    p.max_seqs = max_seqs;
    p.kv_mem_bytes = kv_mem;
    p.n_ctx = 512;
    p.prefix_cache = prefix;
    rl_engine *e = NULL;
    rl_err err = {0};
    if (rl_engine_new(&p, &e, &err)) fail_msg("engine: %s", err.msg);
    return e;
}

static int32_t encode(rl_engine *e, const char *text, const char *prefix, int32_t *out,
                      int32_t cap) {
    char buf[2048];
    snprintf(buf, sizeof buf, "%s%s", prefix ? prefix : "", text);
    int32_t *ids = NULL;
    size_t n = 0;
    rl_err err = {0};
    if (rl_tokenizer_encode(rl_engine_tokenizer(e), buf, strlen(buf), RL_TOK_ADD_SPECIAL, &ids, &n,
                            &err))
        fail_msg("encode: %s", err.msg);
    assert_true((int32_t)n <= cap);
    memcpy(out, ids, n * sizeof *ids);
    rl_free(ids);
    return (int32_t)n;
}

/* Submits prompts [first, first+count) (all at once), steps to completion,
 * collects tokens.  temp > 0 uses seed 1000+i. */
static void run_batch(rl_engine *e, int first, int count, const char *prefix, float temp,
                      run_result *res) {
    uint64_t ids[N_PROMPTS];
    for (int i = first; i < first + count; i++) {
        int32_t prompt[512];
        int32_t n = encode(e, texts[i], prefix, prompt, 512);
        rl_gen_params gp;
        rl_gen_params_default(&gp);
        gp.max_tokens = g_gen;
        gp.ignore_eos = true;
        gp.sample.temperature = temp;
        gp.sample.seed = 1000 + (uint64_t)i;
        gp.spec = g_spec;
        rl_err err = {0};
        if (rl_engine_submit(e, prompt, n, &gp, &ids[i], &err)) fail_msg("submit: %s", err.msg);
        res->n[i] = 0;
    }
    int done = 0;
    while (done < count) {
        rl_engine_step(e);
        for (int i = first; i < first + count; i++) {
            rl_event ev;
            while (ids[i] && rl_engine_next(e, ids[i], &ev, 0) == RL_OK) {
                if (ev.kind == RL_EV_TOKEN && ev.token >= 0) res->toks[i][res->n[i]++] = ev.token;
                if (ev.kind == RL_EV_DONE) {
                    assert_int_equal(ev.finish, RL_FINISH_LENGTH);
                    res->cached[i] = ev.n_cached;
                    ids[i] = 0;
                    done++;
                }
            }
        }
    }
}

static void assert_same(const run_result *a, const run_result *b, const char *what) {
    for (int i = 0; i < g_np; i++) {
        if (a->n[i] != b->n[i])
            fail_msg("%s: prompt %d: %d vs %d tokens", what, i, a->n[i], b->n[i]);
        for (int j = 0; j < a->n[i]; j++)
            if (a->toks[i][j] != b->toks[i][j])
                fail_msg("%s: prompt %d differs at token %d (%d vs %d)", what, i, j, a->toks[i][j],
                         b->toks[i][j]);
    }
}

static void assert_pool_empty(rl_engine *e) {
    rl_engine_stats st = rl_engine_get_stats(e);
    if (st.n_running || st.n_waiting || st.kv_blocks_used)
        fprintf(stderr, "pool not empty: running %d waiting %d used %d steps %llu\n", st.n_running,
                st.n_waiting, st.kv_blocks_used, (unsigned long long)st.steps);
    assert_int_equal(st.n_running, 0);
    assert_int_equal(st.n_waiting, 0);
    assert_int_equal(st.kv_blocks_used, 0);
}

static run_result solo, mixed;

static void test_batch_invariance(void **state) {
    (void)state;
    rl_engine *e = make_engine(256, 32, 0, false);
    for (int i = 0; i < g_np; i++) run_batch(e, i, 1, NULL, 0.f, &solo); /* alone */
    for (int i = 0; i < g_np; i++) assert_int_equal(solo.n[i], g_gen);
    run_batch(e, 0, g_np, NULL, 0.f, &mixed); /* all 16 together */
    assert_same(&solo, &mixed, "alone vs mixed");
    assert_pool_empty(e);
    rl_engine_free(e);
    /* chunked prefill: a budget of 7 tokens per step splits every prompt */
    e = make_engine(7, 32, 0, false);
    run_result chunked;
    run_batch(e, 0, g_np, NULL, 0.f, &chunked);
    assert_same(&solo, &chunked, "chunked vs not");
    assert_pool_empty(e);
    rl_engine_free(e);
}

static void test_prefix_hits_same_output(void **state) {
    (void)state;
    const char *sys = "You are a helpful assistant who answers briefly and precisely. "
                      "Always think about the question before answering it. ";
    rl_engine *e = make_engine(256, 32, 0, true);
    run_result miss, hit;
    run_batch(e, 0, 1, sys, 0.f, &miss);        /* fills the cache */
    run_batch(e, 1, g_np - 1, sys, 0.f, &miss); /* mostly hits */
    run_batch(e, 0, g_np, sys, 0.f, &hit);      /* all hits */
    int hits = 0;
    for (int i = 0; i < g_np; i++) hits += hit.cached[i] > 0;
    assert_int_equal(hits, g_np);
    assert_same(&miss, &hit, "prefix hit vs miss");
    rl_engine *e2 = make_engine(256, 32, 0, false);
    run_result nocache;
    run_batch(e2, 0, g_np, sys, 0.f, &nocache);
    assert_same(&nocache, &hit, "prefix cache on vs off");
    rl_engine_stats st = rl_engine_get_stats(e);
    assert_true(st.prefix_hits > 0);
    assert_pool_empty(e);
    rl_engine_free(e);
    rl_engine_free(e2);
}

/* Without --kv-mem, a budget of every sequence at full context where it
 * costs little (here: 32 x 512 tokens of a small model, far under 512 MiB),
 * so -np short contexts never preempt each other; at least 4 contexts. */
static void test_default_kv_budget(void **state) {
    (void)state;
    const int32_t per_ctx = 512 / 16; /* make_engine: n_ctx 512, 16-token blocks */
    rl_engine *e = make_engine(256, 32, 0, false);
    rl_engine_stats st = rl_engine_get_stats(e);
    assert_int_equal(st.block_size, 16);
    assert_int_equal(st.kv_blocks_total, 32 * per_ctx);
    assert_true(st.kv_bytes_per_token * 32 * 512 < ((size_t)512 << 20));
    rl_engine_free(e);
    e = make_engine(256, 2, 0, false);
    assert_int_equal(rl_engine_get_stats(e).kv_blocks_total, 4 * per_ctx);
    rl_engine_free(e);
}

static void test_oversubscription_preempts(void **state) {
    (void)state;
    /* 16 requests of ~10 prompt + 24 generated tokens = 3 blocks each at
     * block size 16 -> 48 blocks wanted; give the pool 12 (a quarter). */
    rl_engine_params p;
    rl_engine_params_default(&p);
    p.model_path = model_path();
    rl_engine *probe = make_engine(16, 4, 0, false);
    size_t bpt = rl_engine_get_stats(probe).kv_bytes_per_token;
    rl_engine_free(probe);
    int32_t nb = g_np * 3 / 4; /* each request needs 2 blocks: a pool of 3/8 of the demand */
    rl_engine *e = make_engine(256, 32, bpt * 16 * (size_t)(nb + 1), false);
    assert_int_equal(rl_engine_get_stats(e).kv_blocks_total, nb);
    run_result over;
    run_batch(e, 0, g_np, NULL, 0.f, &over);
    assert_same(&solo, &over, "oversubscribed vs solo");
    rl_engine_stats st = rl_engine_get_stats(e);
    assert_true(st.preemptions > 0);
    assert_pool_empty(e);
    rl_engine_free(e);
}

static void test_seeded_sampling_independent_of_companions(void **state) {
    (void)state;
    rl_engine *e = make_engine(256, 32, 0, false);
    run_result a, b;
    run_batch(e, 3, 1, NULL, 0.9f, &a);
    run_batch(e, 0, g_np, NULL, 0.9f, &b);
    for (int j = 0; j < g_gen; j++) assert_int_equal(a.toks[3][j], b.toks[3][j]);
    rl_engine_free(e);
}

static void test_cancel_returns_blocks(void **state) {
    (void)state;
    rl_engine *e = make_engine(256, 32, 0, true);
    rl_err err = {0};
    if (rl_engine_start(e, &err)) fail_msg("%s", err.msg);
    uint64_t ids[8];
    int32_t prompt[64];
    int32_t n = encode(e, texts[0], NULL, prompt, 64);
    for (int i = 0; i < 8; i++) {
        rl_gen_params gp;
        rl_gen_params_default(&gp);
        gp.max_tokens = 200;
        gp.ignore_eos = true;
        assert_int_equal(rl_engine_submit(e, prompt, n, &gp, &ids[i], &err), RL_OK);
    }
    /* let them run a little, then cancel all at different points */
    for (int i = 0; i < 8; i++) {
        rl_event ev;
        for (int k = 0; k < i; k++) rl_engine_next(e, ids[i], &ev, 5000);
        rl_engine_cancel(e, ids[i]);
    }
    for (int i = 0; i < 8; i++) {
        rl_event ev;
        for (;;) {
            assert_int_equal(rl_engine_next(e, ids[i], &ev, 10000), RL_OK);
            if (ev.kind == RL_EV_DONE) break;
        }
        assert_true(ev.finish == RL_FINISH_CANCELLED || ev.finish == RL_FINISH_LENGTH);
        assert_int_equal(rl_engine_next(e, ids[i], &ev, 0), RL_ERR_NOT_FOUND);
    }
    /* the stats snapshot is published at the end of each step: give the
     * step that sent the last DONE a moment to finish */
    for (int t = 0; t < 200; t++) {
        rl_engine_stats st = rl_engine_get_stats(e);
        if (!st.kv_blocks_used && !st.n_running && !st.n_waiting) break;
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    assert_pool_empty(e);
    rl_engine_free(e);
}

/* The queue limit counts requests not finished: a cancellation frees its
 * slot at the step that acts on it (not when its DONE is taken). */
static void test_queue_limit(void **state) {
    (void)state;
    rl_engine_params p;
    rl_engine_params_default(&p);
    p.model_path = model_path();
    p.n_threads = 2;
    p.max_batch_tokens = 64;
    p.max_seqs = 2;
    p.max_waiting = 2;
    p.n_ctx = 512;
    rl_engine *e = NULL;
    rl_err err = {0};
    if (rl_engine_new(&p, &e, &err)) fail_msg("engine: %s", err.msg);
    int32_t prompt[64];
    int32_t n = encode(e, texts[1], NULL, prompt, 64);
    rl_gen_params gp;
    rl_gen_params_default(&gp);
    gp.max_tokens = 4;
    gp.ignore_eos = true;
    uint64_t ids[5];
    for (int i = 0; i < 4; i++)
        assert_int_equal(rl_engine_submit(e, prompt, n, &gp, &ids[i], &err), RL_OK);
    assert_int_equal(rl_engine_submit(e, prompt, n, &gp, &ids[4], &err), RL_ERR_LIMIT);
    assert_non_null(strstr(err.msg, "queue full (4 requests)"));
    rl_engine_cancel(e, ids[3]);
    rl_engine_cancel(e, ids[3]); /* twice: one DONE */
    assert_int_equal(rl_engine_submit(e, prompt, n, &gp, &ids[4], &err), RL_ERR_LIMIT);
    rl_engine_step(e); /* acts on the cancellation */
    assert_int_equal(rl_engine_submit(e, prompt, n, &gp, &ids[4], &err), RL_OK);
    int done = 0, n_done[5] = {0};
    while (done < 5) {
        rl_engine_step(e);
        for (int i = 0; i < 5; i++) {
            rl_event ev;
            while (!n_done[i] && rl_engine_next(e, ids[i], &ev, 0) == RL_OK)
                if (ev.kind == RL_EV_DONE) {
                    assert_int_equal(ev.finish, i == 3 ? RL_FINISH_CANCELLED : RL_FINISH_LENGTH);
                    assert_int_equal(ev.n_generated, i == 3 ? 0 : 4);
                    n_done[i] = 1;
                    done++;
                }
        }
    }
    for (int i = 0; i < 5; i++)
        assert_int_equal(rl_engine_next(e, ids[i], &(rl_event){0}, 0), RL_ERR_NOT_FOUND);
    rl_engine_cancel(e, ids[0]); /* forgotten: nothing happens */
    assert_int_equal(rl_engine_step(e), 0);
    assert_int_equal(rl_engine_get_stats(e).requests_finished, 5);
    assert_pool_empty(e);
    rl_engine_free(e);
}

/* Clients on several threads submit, cancel (at once, while it runs, twice,
 * after its end) and drain while the engine thread steps: every request
 * ends exactly once, uncancelled ones at their length, and every block
 * returns. */
#define N_CLIENTS    4
#define N_PER_CLIENT 6
typedef struct client {
    rl_engine *e;
    int32_t prompt[64];
    int32_t n_prompt;
    int seed;
    int failures;
} client;

static void *client_run(void *arg) {
    client *c = arg;
    for (int j = 0; j < N_PER_CLIENT; j++) {
        rl_gen_params gp;
        rl_gen_params_default(&gp);
        gp.max_tokens = 3 + (j + c->seed) % 5;
        gp.ignore_eos = true;
        uint64_t id;
        rl_err err = {0};
        if (rl_engine_submit(c->e, c->prompt, c->n_prompt, &gp, &id, &err)) {
            c->failures++;
            continue;
        }
        int mode = (j + c->seed) % 4;
        rl_event ev;
        if (mode == 0) rl_engine_cancel(c->e, id); /* likely still in the inbox */
        int n_ev = 0, n_done = 0;
        rl_finish_reason why = RL_FINISH_NONE;
        int32_t n_gen = -1;
        while (rl_engine_next(c->e, id, &ev, 120000) == RL_OK) { /* slow under TSan */
            n_ev++;
            if (mode == 1 && n_ev == 2) {
                rl_engine_cancel(c->e, id);
                rl_engine_cancel(c->e, id);
            }
            if (ev.kind == RL_EV_DONE) {
                n_done++;
                why = ev.finish;
                n_gen = ev.n_generated;
                break;
            }
        }
        if (mode == 3) rl_engine_cancel(c->e, id); /* after its end: unknown */
        if (n_done != 1 || rl_engine_next(c->e, id, &ev, 0) != RL_ERR_NOT_FOUND) c->failures++;
        if (mode >= 2 && (why != RL_FINISH_LENGTH || n_gen != gp.max_tokens)) c->failures++;
        if (mode < 2 && why != RL_FINISH_CANCELLED && why != RL_FINISH_LENGTH) c->failures++;
    }
    return NULL;
}

static void test_concurrent_cancel(void **state) {
    (void)state;
    rl_engine *e = make_engine(64, 4, 0, true);
    rl_err err = {0};
    if (rl_engine_start(e, &err)) fail_msg("%s", err.msg);
    client cl[N_CLIENTS];
    pthread_t th[N_CLIENTS];
    for (int i = 0; i < N_CLIENTS; i++) {
        cl[i] = (client){.e = e, .seed = i};
        cl[i].n_prompt = encode(e, texts[i], NULL, cl[i].prompt, 64);
        assert_int_equal(pthread_create(&th[i], NULL, client_run, &cl[i]), 0);
    }
    for (int i = 0; i < N_CLIENTS; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(cl[i].failures, 0);
    }
    for (int t = 0; t < 200; t++) {
        rl_engine_stats st = rl_engine_get_stats(e);
        if (!st.kv_blocks_used && !st.n_running && !st.n_waiting) break;
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    assert_int_equal(rl_engine_get_stats(e).requests_finished, N_CLIENTS * N_PER_CLIENT);
    assert_pool_empty(e);
    rl_engine_free(e);
}

static void test_bad_requests(void **state) {
    (void)state;
    rl_engine *e = make_engine(64, 4, 0, false);
    rl_gen_params gp;
    rl_gen_params_default(&gp);
    uint64_t id;
    rl_err err = {0};
    int32_t good[3] = {1, 2, 3}, bad[2] = {1, 999999};
    assert_int_equal(rl_engine_submit(e, good, 0, &gp, &id, &err), RL_ERR_RANGE);
    assert_non_null(strstr(err.msg, "prompt"));
    assert_int_equal(rl_engine_submit(e, bad, 2, &gp, &id, &err), RL_ERR_RANGE);
    assert_non_null(strstr(err.msg, "999999"));
    int32_t *huge = calloc(600, sizeof *huge);
    assert_int_equal(rl_engine_submit(e, huge, 600, &gp, &id, &err), RL_ERR_LIMIT);
    free(huge);
    gp.sample.temperature = -1.f;
    assert_int_equal(rl_engine_submit(e, good, 3, &gp, &id, &err), RL_ERR_INVALID);
    assert_non_null(strstr(err.msg, "temperature"));
    rl_gen_params_default(&gp);
    gp.n_stop = 1;
    gp.stop[0][0] = 0;
    assert_int_equal(rl_engine_submit(e, good, 3, &gp, &id, &err), RL_ERR_INVALID);
    assert_non_null(strstr(err.msg, "stop"));
    assert_int_equal(rl_engine_next(e, 777, NULL, 0), RL_ERR_NOT_FOUND);
    rl_engine_free(e);

    rl_engine_params p;
    rl_engine_params_default(&p);
    p.model_path = "/nonexistent/model.gguf";
    rl_engine *e2 = NULL;
    assert_int_not_equal(rl_engine_new(&p, &e2, &err), RL_OK);
    assert_null(e2);
    assert_non_null(strstr(err.msg, "/nonexistent/model.gguf"));
}

/* Runs one request to its end; returns the number of tokens, in out. */
static int32_t run_one(rl_engine *e, const int32_t *prompt, int32_t n, const rl_gen_params *gp,
                       int32_t *out, int32_t cap) {
    uint64_t id;
    rl_err err = {0};
    if (rl_engine_submit(e, prompt, n, gp, &id, &err)) fail_msg("submit: %s", err.msg);
    int32_t k = 0;
    for (bool done = false; !done;) {
        rl_engine_step(e);
        rl_event ev;
        while (!done && rl_engine_next(e, id, &ev, 0) == RL_OK) {
            if (ev.kind == RL_EV_TOKEN && ev.token >= 0 && k < cap) out[k++] = ev.token;
            done = ev.kind == RL_EV_DONE;
        }
    }
    return k;
}

/* Reasoning budget: after think_budget tokens inside the block the close
 * text's tokens follow, then the model goes on (greedy: the same tokens as
 * unconstrained decoding up to the budget); with n-gram speculation the
 * close lands at the same place (no draft runs past the budget); budget 0
 * closes at once; a "</think>" the model writes ends the count; a
 * negative budget is refused. */
static void test_think_budget(void **state) {
    (void)state;
    rl_engine *e = make_engine(64, 4, 0, false);
    int32_t prompt[64], a[32], b[32], close[16];
    int32_t n = encode(e, "Question: what is 2+2?\n<think>\n", NULL, prompt, 64);
    const char *ct = "\n</think>\n\n";
    int32_t *ids = NULL;
    size_t nc = 0;
    rl_err err = {0};
    assert_int_equal(rl_tokenizer_encode(rl_engine_tokenizer(e), ct, strlen(ct),
                                         RL_TOK_PARSE_SPECIAL, &ids, &nc, &err),
                     RL_OK);
    assert_true(nc > 1 && nc < 16);
    memcpy(close, ids, nc * sizeof *ids);
    rl_free(ids);
    rl_gen_params gp;
    rl_gen_params_default(&gp);
    gp.max_tokens = 20;
    gp.ignore_eos = true;
    gp.sample.temperature = 0;
    assert_int_equal(run_one(e, prompt, n, &gp, a, 32), 20);
    for (int32_t budget = 0; budget <= 5; budget += 5)
        for (int spec = 0; spec < 2; spec++) {
            rl_gen_params g = gp;
            g.think_budget = budget;
            g.think_open = true;
            g.spec = spec ? RL_SPEC_NGRAM : RL_SPEC_NONE;
            snprintf(g.think_close, sizeof g.think_close, "%s", ct);
            assert_int_equal(run_one(e, prompt, n, &g, b, 32), 20);
            for (int32_t i = 0; i < budget; i++) assert_int_equal(b[i], a[i]);
            for (int32_t i = 0; i < (int32_t)nc; i++) assert_int_equal(b[budget + i], close[i]);
        }
    /* a close the model writes itself: nothing is forced after it */
    int32_t n2 = encode(e, "<think>\nok\n</think>\n\nThe answer:", NULL, prompt, 64);
    assert_int_equal(run_one(e, prompt, n2, &gp, a, 32), 20);
    rl_gen_params g = gp;
    g.think_budget = 0;
    snprintf(g.think_close, sizeof g.think_close, "%s", ct); /* waits for a <think> */
    assert_int_equal(run_one(e, prompt, n2, &g, b, 32), 20);
    assert_memory_equal(a, b, 20 * sizeof *a);
    g.think_budget = -1;
    uint64_t id;
    assert_int_equal(rl_engine_submit(e, prompt, n2, &g, &id, &err), RL_ERR_INVALID);
    assert_non_null(strstr(err.msg, "think_budget"));
    assert_pool_empty(e);
    rl_engine_free(e);
}

/* Speculative decoding, greedy: token-identical to plain decoding, for the
 * n-gram drafter (fixed draft length, then the cost model's) and for a
 * draft model (the model itself as its own draft: a same-vocabulary pair
 * that exercises the whole draft path), full and with a restricted head;
 * every KV block returns to the pool after the rollbacks. */
static void test_spec_greedy_identical(void **state) {
    (void)state;
    g_spec = RL_SPEC_NGRAM;
    g_fixed = true;
    rl_engine *e = make_engine(256, 32, 0, true);
    run_result r;
    run_batch(e, 0, g_np, NULL, 0.f, &r);
    assert_same(&solo, &r, "n-gram speculation vs plain");
    rl_engine_stats st = rl_engine_get_stats(e);
    assert_true(st.spec_verifies > 0);
    assert_pool_empty(e);
    rl_engine_free(e);
    g_fixed = false; /* the cost model picks k (0 included) */
    e = make_engine(256, 32, 0, true);
    run_batch(e, 0, g_np, NULL, 0.f, &r);
    assert_same(&solo, &r, "n-gram speculation (cost model) vs plain");
    assert_pool_empty(e);
    rl_engine_free(e);
    g_spec = RL_SPEC_DRAFT;
    g_draft = model_path();
    g_fixed = true;
    e = make_engine(256, 32, 0, true);
    run_batch(e, 0, 4, NULL, 0.f, &r);
    for (int i = 4; i < g_np; i++)
        r.n[i] = solo.n[i], memcpy(r.toks[i], solo.toks[i], sizeof r.toks[i]);
    assert_same(&solo, &r, "draft-model speculation vs plain");
    st = rl_engine_get_stats(e);
    /* the model drafting for itself is always right when greedy */
    assert_true(st.spec_proposed > 0);
    assert_int_equal(st.spec_accepted, st.spec_proposed);
    assert_pool_empty(e);
    rl_engine_free(e);
    /* restricted head: proposals only among the first 4096 ids, so some
     * are wrong; the output is still the plain one */
    g_draft_vocab = 4096;
    e = make_engine(256, 32, 0, true);
    run_batch(e, 0, g_np, NULL, 0.f, &r);
    assert_same(&solo, &r, "restricted draft-model speculation vs plain");
    st = rl_engine_get_stats(e);
    assert_true(st.spec_proposed > 0);
    assert_true(st.spec_accepted > 0);
    assert_pool_empty(e);
    rl_engine_free(e);
    g_draft_vocab = 0;
    g_fixed = false;
    g_spec = RL_SPEC_NONE;
    g_draft = NULL;
}

/* Grammar-constrained requests batched together (jump-forward drafts for
 * every sequence): all finish with complete output and every block returns. */
static void test_grammar_batch(void **state) {
    (void)state;
    rl_engine *e = make_engine(256, 8, 0, true);
    rl_err err = {0};
    const char *schema = "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},"
                         "\"b\":{\"type\":\"boolean\"}},\"required\":[\"a\",\"b\"]}";
    rl_grammar *g = rl_grammar_from_json_schema(schema, strlen(schema), &err);
    assert_non_null(g);
    uint64_t ids[12];
    for (int i = 0; i < 12; i++) {
        int32_t prompt[64];
        int32_t n = encode(e, texts[i], NULL, prompt, 64);
        rl_gen_params gp;
        rl_gen_params_default(&gp);
        gp.max_tokens = 120; /* room for drafts before the closing margin */
        gp.sample.temperature = 1.f;
        gp.sample.seed = (uint64_t)i;
        gp.grammar = g;
        assert_int_equal(rl_engine_submit(e, prompt, n, &gp, &ids[i], &err), RL_OK);
    }
    rl_grammar_free(g); /* the engine holds its own references */
    int done = 0;
    while (done < 12) {
        rl_engine_step(e);
        for (int i = 0; i < 12; i++) {
            rl_event ev;
            while (ids[i] && rl_engine_next(e, ids[i], &ev, 0) == RL_OK)
                if (ev.kind == RL_EV_DONE) {
                    assert_int_equal(ev.finish, RL_FINISH_STOP); /* closed before max_tokens */
                    ids[i] = 0;
                    done++;
                }
        }
    }
    assert_true(rl_engine_get_stats(e).grammar_forced > 0);
    assert_pool_empty(e);
    rl_engine_free(e);
}

int main(void) {
    FILE *f = fopen(model_path(), "rb");
    if (!f) {
        fprintf(stderr, "test_engine: model %s not found\n", model_path());
        return 1;
    }
    fclose(f);
    const char *quick = getenv("REDLINE_QUICK");
    if (quick && *quick == '1') g_np = 4, g_gen = GEN / 2;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_requests),
        cmocka_unit_test(test_batch_invariance),
        cmocka_unit_test(test_prefix_hits_same_output),
        cmocka_unit_test(test_default_kv_budget),
        cmocka_unit_test(test_oversubscription_preempts),
        cmocka_unit_test(test_seeded_sampling_independent_of_companions),
        cmocka_unit_test(test_cancel_returns_blocks),
        cmocka_unit_test(test_queue_limit),
        cmocka_unit_test(test_concurrent_cancel),
        cmocka_unit_test(test_spec_greedy_identical),
        cmocka_unit_test(test_grammar_batch),
        cmocka_unit_test(test_think_budget),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
