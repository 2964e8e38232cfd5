/* Speculative decoding units: the n-gram drafter, and the verifier's
 * losslessness on a case small enough to enumerate — a 6-token vocabulary
 * where the emitted token's empirical distribution must match the target's
 * exactly (chi-square), whatever the draft proposes and whatever its own
 * distribution q is, including a vocabulary-restricted draft whose q is
 * zero outside its head.  Then the draft-length policy (expected tokens,
 * the cost model, the batch crossover), the draft planner without a model
 * (probe order, the batch limit, fixed lengths and their caps,
 * grammar-forced drafts, trimming what a step did not cover) and, on the
 * real default model (models/smollm2-135m.gguf or $REDLINE_MODEL), the
 * restricted output head of the forward and a restricted draft model's
 * proposals. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <string.h>

#include <stdlib.h>

#include "kv/seqkv.h"
#include "spec/spec.h"

#define V 6

static void test_ngram(void **state) {
    (void)state;
    int32_t t[] = {1, 2, 3, 4, 5, 9, 1, 2, 3};
    int32_t out[8];
    /* suffix "1 2 3" occurred at 0: continuation 4 5 9 1 ... */
    assert_int_equal(rl_spec_ngram(t, 9, 3, 1, 3, out), 3);
    assert_int_equal(out[0], 4);
    assert_int_equal(out[1], 5);
    assert_int_equal(out[2], 9);
    /* the continuation stops at the end of the known tokens */
    int32_t u[] = {7, 8, 7};
    assert_int_equal(rl_spec_ngram(u, 3, 4, 1, 3, out), 2);
    assert_int_equal(out[0], 8);
    assert_int_equal(out[1], 7);
    /* nothing to match */
    int32_t w[] = {1, 2, 3};
    assert_int_equal(rl_spec_ngram(w, 3, 4, 1, 3, out), 0);
    /* one token substituted: "1 2 [3 -> 7]" continues after the 3 */
    int32_t y[] = {1, 2, 3, 4, 5, 6, 1, 2, 7};
    assert_int_equal(rl_spec_ngram(y, 9, 3, 1, 3, out), 3);
    assert_int_equal(out[0], 4);
    assert_int_equal(out[1], 5);
    assert_int_equal(out[2], 6);
    /* ... preferred to a 1-gram match of the new token (the 7 at 0) */
    int32_t z[] = {7, 9, 1, 2, 3, 4, 1, 2, 7};
    assert_int_equal(rl_spec_ngram(z, 9, 2, 1, 3, out), 2);
    assert_int_equal(out[0], 4);
    assert_int_equal(out[1], 1);
    /* with ngram_max 1 there is no context to substitute in */
    assert_int_equal(rl_spec_ngram(y, 9, 3, 1, 1, out), 0);
    /* latest occurrence wins */
    int32_t x[] = {5, 1, 5, 2, 5};
    assert_int_equal(rl_spec_ngram(x, 5, 1, 1, 1, out), 1);
    assert_int_equal(out[0], 2);
}

static double chi2(const long *counts, const double *p, long n) {
    double c = 0;
    for (int v = 0; v < V; v++) {
        double e = p[v] * (double)n;
        if (e > 0)
            c += ((double)counts[v] - e) * ((double)counts[v] - e) / e;
        else if (counts[v])
            return INFINITY;
    }
    return c;
}

/* Target logits -> sampler distribution (temperature 1, no truncation). */
static void target_probs(const float *logits, double *p) {
    double m = logits[0], z = 0;
    for (int v = 1; v < V; v++) m = logits[v] > m ? logits[v] : m;
    for (int v = 0; v < V; v++) z += exp(logits[v] - m);
    for (int v = 0; v < V; v++) p[v] = exp(logits[v] - m) / z;
}

static void run_case(const float *q /* [V] or NULL */, int32_t draft_tok, uint64_t seed) {
    rl_sample_params sp = rl_sample_params_default();
    sp.temperature = 1.f;
    sp.top_k = 0;
    sp.top_p = 1.f;
    sp.min_p = 0.f;
    sp.penalty_last_n = 0;
    sp.seed = seed;
    rl_err err = {0};
    rl_sampler *s = rl_sampler_new(&sp, V, &err);
    assert_non_null(s);
    const float logits[V] = {1.0f, 2.0f, 0.5f, -1.0f, 1.5f, 0.0f};
    double p[V];
    target_probs(logits, p);
    long counts[V] = {0};
    long n = 200000;
    rl_rng drng;
    rl_rng_seed(&drng, seed * 31 + 1);
    float rows[2 * V], scratch[2 * V];
    rl_sample_result res[2];
    int32_t out[2];
    for (long it = 0; it < n; it++) {
        memcpy(rows, logits, sizeof logits);
        memcpy(rows + V, logits, sizeof logits);
        /* the rule is lossless when the draft token is drawn from q */
        int32_t d = draft_tok;
        if (q) {
            double u = rl_rng_f64(&drng), acc = 0;
            for (d = 0; d < V - 1; d++) {
                acc += q[d];
                if (u < acc) break;
            }
        }
        int32_t got = rl_spec_verify(s, rows, V, &d, 1, q, scratch, res, out);
        assert_true(got >= 1 && got <= 2);
        counts[out[0]]++;
        /* penalties are off (penalty_last_n 0): history does not matter */
    }
    double c = chi2(counts, p, n);
    /* 5 degrees of freedom: P(chi2 > 25) ~ 1.4e-4 under the null */
    if (c > 25.0) fail_msg("chi2 %.2f for draft %d (q %s)", c, draft_tok, q ? "given" : "point");
    rl_sampler_free(s);
}

static void test_verify_lossless_point_mass(void **state) {
    (void)state;
    for (int32_t d = 0; d < V; d++) run_case(NULL, d, 77 + (uint64_t)d);
}

static void test_verify_lossless_with_q(void **state) {
    (void)state;
    const float q1[V] = {0.05f, 0.05f, 0.6f, 0.1f, 0.1f, 0.1f};   /* poor draft */
    const float q2[V] = {0.17f, 0.45f, 0.1f, 0.03f, 0.2f, 0.05f}; /* close draft */
    run_case(q1, 2, 5);
    run_case(q2, 1, 6);
    run_case(q2, 3, 7);
}

static void test_verify_greedy_exact(void **state) {
    (void)state;
    rl_sample_params sp = rl_sample_params_default();
    sp.temperature = 0.f;
    rl_err err = {0};
    rl_sampler *s = rl_sampler_new(&sp, V, &err);
    float rows[3 * V] = {0, 5, 0, 0, 0, 0, /* argmax 1 */
                         0, 0, 0, 7, 0, 0, /* argmax 3 */
                         9, 0, 0, 0, 0, 0};
    float scratch[2 * V];
    rl_sample_result res[3];
    int32_t out[3];
    int32_t draft[2] = {1, 4}; /* first right, second wrong */
    assert_int_equal(rl_spec_verify(s, rows, V, draft, 2, NULL, scratch, res, out), 2);
    assert_int_equal(out[0], 1);
    assert_int_equal(out[1], 3); /* the target's correction */
    float rows2[3 * V] = {0, 5, 0, 0, 0, 0, 0, 0, 0, 7, 0, 0, 9, 0, 0, 0, 0, 0};
    int32_t draft2[2] = {1, 3}; /* both right: bonus token from the last row */
    assert_int_equal(rl_spec_verify(s, rows2, V, draft2, 2, NULL, scratch, res, out), 3);
    assert_int_equal(out[2], 0);
    rl_sampler_free(s);
}

/* A draft restricted to ids [0, 4): its distribution q is the softmax of
 * its logits renormalized over the head, zero for ids 4 and 5, which the
 * target does give mass to.  The rule stays exact: the residual
 * max(0, p - q) carries all of p's mass outside the head. */
static void test_verify_lossless_restricted_q(void **state) {
    (void)state;
    const float dl[4] = {0.5f, 2.5f, 0.0f, -0.5f}; /* draft logits of the head */
    float q[V] = {0};
    double z = 0;
    for (int v = 0; v < 4; v++) z += exp(dl[v]);
    for (int v = 0; v < 4; v++) q[v] = (float)(exp(dl[v]) / z);
    run_case(q, 0, 11);
    /* a greedy restricted draft: point mass on its head argmax */
    run_case(NULL, 1, 12);
}

static void test_expected_tokens(void **state) {
    (void)state;
    assert_true(fabs(rl_spec_expected_tokens(0.8, 0) - 1.0) < 1e-12);
    /* 1 + a + a^2 + a^3 */
    assert_true(fabs(rl_spec_expected_tokens(0.8, 3) - (1 + 0.8 + 0.64 + 0.512)) < 1e-9);
    assert_true(fabs(rl_spec_expected_tokens(1.0, 4) - 5.0) < 1e-12);
    assert_true(fabs(rl_spec_expected_tokens(0.0, 4) - 1.0) < 1e-12);
}

/* A target step of n tokens costs alpha + beta n (seconds, as if timed). */
static void fill_linear(rl_spec_cost *c, double alpha, double beta, int32_t n_max) {
    for (int32_t n = 1; n <= n_max; n++) rl_spec_cost_add_fwd(c, n, alpha + beta * n);
}

static void test_policy_choose_k(void **state) {
    (void)state;
    rl_spec_cost c;
    float a[16];
    for (int i = 0; i < 16; i++) a[i] = 0.8f;
    /* bandwidth-bound: extra positions nearly free -> the longest draft */
    rl_spec_cost_init(&c, 0.3f, 0.4f);
    fill_linear(&c, 0.070, 0.001, 64);
    assert_int_equal(rl_spec_choose_k(&c, 1, a, 1, false, 5), 5);
    /* with a draft costing 0.45 of a step the optimum is short; by hand:
     * E(k) / (1 + 0.45 k) at a = 0.8 peaks at k = 2 or 3 */
    rl_spec_cost_add_draft(&c, 1, 0.45 * 0.071);
    int32_t k = rl_spec_choose_k(&c, 1, a, 1, true, 5);
    assert_true(k >= 2 && k <= 3);
    /* each position as expensive as a whole step: never pays */
    rl_spec_cost_init(&c, 0.3f, 0.4f);
    fill_linear(&c, 0.0, 0.070, 64);
    assert_int_equal(rl_spec_choose_k(&c, 1, a, 1, false, 5), 0);
    /* the measured 2-core shape (75 ms + ~20 ms a position): n-gram pays
     * alone, not with 16 sequences in the batch (the crossover) */
    rl_spec_cost_init(&c, 0.3f, 0.4f);
    fill_linear(&c, 0.055, 0.020, 64);
    assert_true(rl_spec_choose_k(&c, 1, a, 1, false, 5) >= 2);
    assert_int_equal(rl_spec_choose_k(&c, 16, a, 16, false, 5), 0);
    /* nothing measured: the prior alone decides, and low acceptance
     * (0.1) never drafts */
    rl_spec_cost_init(&c, 0.3f, 0.4f);
    float lo[1] = {0.1f};
    assert_int_equal(rl_spec_choose_k(&c, 1, lo, 1, true, 5), 0);
}

static void test_cost_estimates(void **state) {
    (void)state;
    rl_spec_cost c;
    rl_spec_cost_init(&c, 0.5f, 0.4f);
    /* prior only: relative units */
    assert_true(fabs(rl_spec_cost_fwd(&c, 3) - 2.0) < 1e-9);
    assert_true(fabs(rl_spec_cost_draft(&c, 1) - 0.4) < 1e-6);
    /* one observation: the prior shape through it */
    rl_spec_cost_add_fwd(&c, 1, 0.1);
    assert_true(fabs(rl_spec_cost_fwd(&c, 3) - 0.2) < 1e-9);
    assert_true(fabs(rl_spec_cost_draft(&c, 1) - 0.04) < 1e-6);
    /* two observations: the line through them, interpolated and extrapolated */
    rl_spec_cost_add_fwd(&c, 5, 0.3);
    assert_true(fabs(rl_spec_cost_fwd(&c, 3) - 0.2) < 1e-9);
    assert_true(fabs(rl_spec_cost_fwd(&c, 9) - 0.5) < 1e-9);
    /* moving average: a new timing moves the entry by 0.3 of the gap */
    rl_spec_cost_add_fwd(&c, 1, 0.2);
    assert_true(fabs(rl_spec_cost_fwd(&c, 1) - 0.13) < 1e-9);
    /* acceptance: 3 of 4 accepted then a rejection at the first draft */
    rl_spec_acc s = {0};
    assert_true(fabs(rl_spec_acc_rate(&s, 0.6f) - 0.6f) < 1e-6);
    rl_spec_acc_update(&s, 4, 4);
    assert_true(rl_spec_acc_rate(&s, 0.6f) > 0.8f);
    for (int i = 0; i < 20; i++) rl_spec_acc_update(&s, 4, 0);
    assert_true(rl_spec_acc_rate(&s, 0.6f) < 0.2f);
    for (int i = 0; i < 200; i++) rl_spec_acc_decay(&s);
    assert_true(fabs(rl_spec_acc_rate(&s, 0.6f) - 0.6f) < 0.01f);
}

/* ---- draft planning (plan.c), without a model ---- */

/* n-gram continuation of "1..8 1 2 3" is 4 5 6 7 8 1 2 3 */
static const int32_t REP[] = {1, 2, 3, 4, 5, 6, 7, 8, 1, 2, 3};

static rl_spec_planner *planner(int32_t max_seqs, int32_t draft_max, int32_t spec_max_batch,
                                int32_t max_rows, bool fixed) {
    rl_spec_planner_config cfg = {.max_seqs = max_seqs,
                                  .draft_max = draft_max,
                                  .spec_max_batch = spec_max_batch,
                                  .max_rows = max_rows,
                                  .draft_fixed = fixed,
                                  .ngram_min = 1,
                                  .ngram_max = 3};
    rl_spec_planner *p = NULL;
    rl_err err = {0};
    if (rl_spec_planner_new(&cfg, &p, &err)) fail_msg("planner: %s", err.msg);
    return p;
}

static rl_spec_cand *offer(rl_spec_planner *p, rl_spec_source src, rl_spec_acc *acc, int32_t left) {
    rl_spec_cand *c = rl_spec_planner_add(p);
    assert_non_null(c);
    c->tokens = REP;
    c->n_tokens = 11;
    c->left = left;
    c->source = src;
    c->acc = acc;
    return c;
}

/* The cost model's probes: every draft length not yet timed for the batch
 * size first, shortest first (a length timed already is skipped); then,
 * with drafts that never pay (each position costs a whole step), no
 * drafts, except one length in turn every 32nd step. */
static void test_planner_probe_order(void **state) {
    (void)state;
    rl_spec_planner *p = planner(4, 4, 4, 100, false);
    rl_spec_planner_observe_fwd(p, 3, 3.0); /* k = 2 for one sequence: timed already */
    int32_t want[200], n_want = 0;
    want[n_want++] = 1;
    want[n_want++] = 3;
    want[n_want++] = 4;
    for (int32_t probe = 1; n_want < 200; probe = probe % 4 + 1) {
        for (int i = 0; i < 31 && n_want < 200; i++) want[n_want++] = 0;
        if (n_want < 200) want[n_want++] = probe;
    }
    rl_spec_acc acc = {0};
    for (int step = 0; step < 200; step++) {
        rl_spec_planner_begin(p);
        offer(p, RL_SPEC_SRC_NGRAM, &acc, 100);
        assert_int_equal(rl_spec_planner_run(p, NULL), 1);
        const rl_spec_cand *c = rl_spec_planner_cand(p, 0);
        if (c->k != want[step]) fail_msg("step %d: k %d, want %d", step, c->k, want[step]);
        assert_int_equal(c->from_drafter, c->k > 0);
        for (int32_t j = 0; j < c->k; j++) assert_int_equal(c->draft[j], 4 + j);
        /* the step's forward: 1 + k tokens at a full step each */
        rl_spec_planner_observe_fwd(p, 1 + c->k, 1.0 + c->k);
    }
    const rl_spec_cost *cost = rl_spec_planner_cost(p);
    for (int n = 1; n <= 5; n++) assert_true(cost->fwd[n] > 0);
    assert_true(cost->fwd[6] == 0);
    rl_spec_planner_free(p);
}

/* Two sequences: a probe of k positions each times n_dec + 2k tokens, so
 * the probes walk fwd[4], fwd[6], ... */
static void test_planner_probe_two(void **state) {
    (void)state;
    rl_spec_planner *p = planner(4, 3, 4, 100, false);
    rl_spec_acc acc[2] = {{0}};
    for (int step = 0; step < 3; step++) {
        rl_spec_planner_begin(p);
        offer(p, RL_SPEC_SRC_NGRAM, &acc[0], 100);
        offer(p, RL_SPEC_SRC_NGRAM, &acc[1], 100);
        rl_spec_planner_run(p, NULL);
        assert_int_equal(rl_spec_planner_cand(p, 0)->k, step + 1);
        assert_int_equal(rl_spec_planner_cand(p, 1)->k, step + 1);
        assert_true(rl_spec_planner_cost(p)->fwd[2 + 2 * (step + 1)] == 0);
        rl_spec_planner_observe_fwd(p, 2 + 2 * (step + 1), 0.1);
    }
    rl_spec_planner_free(p);
}

/* More decoding sequences than spec_max_batch (plain ones count too): no
 * drafts at all, and the drafters' estimates decay toward the prior. */
static void test_planner_batch_limit(void **state) {
    (void)state;
    rl_spec_planner *p = planner(8, 4, 2, 100, true);
    rl_spec_acc a = {10.f, 10.f}, b = {10.f, 10.f};
    rl_spec_planner_begin(p);
    offer(p, RL_SPEC_SRC_NGRAM, &a, 100);
    offer(p, RL_SPEC_SRC_NONE, NULL, 100); /* plain decoding */
    offer(p, RL_SPEC_SRC_NGRAM, &b, 100);
    assert_int_equal(rl_spec_planner_run(p, NULL), 3);
    for (int i = 0; i < 3; i++) assert_int_equal(rl_spec_planner_cand(p, i)->k, 0);
    assert_true(fabsf(a.succ - 9.5f) < 1e-5f && fabsf(a.trials - 9.5f) < 1e-5f);
    assert_true(fabsf(b.succ - 9.5f) < 1e-5f);
    /* at the limit: drafts (fixed length), the plain one none */
    rl_spec_planner_begin(p);
    offer(p, RL_SPEC_SRC_NGRAM, &a, 100);
    offer(p, RL_SPEC_SRC_NONE, NULL, 100);
    rl_spec_planner_run(p, NULL);
    assert_int_equal(rl_spec_planner_cand(p, 0)->k, 4);
    assert_int_equal(rl_spec_planner_cand(p, 1)->k, 0);
    assert_true(fabsf(a.succ - 9.5f) < 1e-5f); /* drafting: no decay */
    rl_spec_planner_free(p);
    /* draft_max 0 or spec_max_batch 0: never */
    for (int v = 0; v < 2; v++) {
        p = v ? planner(8, 0, 4, 100, true) : planner(8, 4, 0, 100, true);
        rl_spec_planner_begin(p);
        offer(p, RL_SPEC_SRC_NGRAM, &a, 100);
        rl_spec_planner_run(p, NULL);
        assert_int_equal(rl_spec_planner_cand(p, 0)->k, 0);
        rl_spec_planner_free(p);
    }
    /* offers past max_seqs are refused */
    p = planner(2, 4, 4, 100, true);
    rl_spec_planner_begin(p);
    assert_non_null(rl_spec_planner_add(p));
    assert_non_null(rl_spec_planner_add(p));
    assert_null(rl_spec_planner_add(p));
    rl_spec_planner_free(p);
}

/* draft_fixed: draft_max whatever the cost model says, capped by the
 * tokens a sequence has left, by what the drafter finds, by no_spec, and
 * by the step's draft rows (first come first served). */
static void test_planner_fixed_caps(void **state) {
    (void)state;
    rl_spec_planner *p = planner(8, 4, 8, 5, true);
    for (int n = 1; n <= 64; n++) rl_spec_planner_observe_fwd(p, n, (double)n); /* never pays */
    rl_spec_acc acc[5] = {{0}};
    acc[3].succ = acc[3].trials = 4.f;
    rl_spec_planner_begin(p);
    offer(p, RL_SPEC_SRC_NGRAM, &acc[0], 3); /* 3 tokens left: 2 drafts */
    offer(p, RL_SPEC_SRC_NGRAM, &acc[1], 100)->no_spec = true;
    offer(p, RL_SPEC_SRC_NGRAM, &acc[2], 100); /* 3 rows left of 5 */
    offer(p, RL_SPEC_SRC_NGRAM, &acc[3], 100); /* no rows left */
    rl_spec_cand *c = offer(p, RL_SPEC_SRC_NGRAM, &acc[4], 100);
    static const int32_t short_rep[] = {1, 2, 3, 1, 2}; /* continuation 3 1 2 */
    c->tokens = short_rep;
    c->n_tokens = 5;
    rl_spec_planner_run(p, NULL);
    const int32_t want_k[5] = {2, 0, 3, 0, 0};
    for (int i = 0; i < 5; i++) assert_int_equal(rl_spec_planner_cand(p, i)->k, want_k[i]);
    assert_int_equal(rl_spec_planner_cand(p, 0)->draft[1], 5);
    assert_int_equal(rl_spec_planner_cand(p, 2)->draft[2], 6);
    assert_true(fabsf(acc[3].succ - 3.8f) < 1e-5f); /* its drafter's proposals found no row */
    /* with rows to spare, the short continuation gives 3 of the 4 */
    rl_spec_planner_free(p);
    p = planner(8, 4, 8, 100, true);
    rl_spec_planner_begin(p);
    c = offer(p, RL_SPEC_SRC_NGRAM, &acc[4], 100);
    c->tokens = short_rep;
    c->n_tokens = 5;
    rl_spec_planner_run(p, NULL);
    c = rl_spec_planner_cand(p, 0);
    assert_int_equal(c->k, 3);
    assert_int_equal(c->draft[0], 3);
    assert_int_equal(c->draft[1], 1);
    assert_int_equal(c->draft[2], 2);
    rl_spec_planner_free(p);
    rl_spec_planner_config bad = {.max_seqs = 0, .draft_max = 4};
    rl_err err = {0};
    assert_int_equal(rl_spec_planner_new(&bad, &p, &err), RL_ERR_INVALID);
    assert_null(p);
    assert_non_null(strstr(err.msg, "max_seqs 0"));
}

/* Grammar-forced tokens are drafts of their own (not the drafter's); where
 * the grammar forces nothing the drafter fills in; none near the closing
 * margin. */
static void test_planner_grammar(void **state) {
    (void)state;
    const char *pieces[] = {"{", "\"a\"", ":", " ", "1", "2", "}", "</s>"};
    size_t lens[8];
    uint8_t kinds[8] = {0};
    for (int i = 0; i < 8; i++) lens[i] = strlen(pieces[i]);
    kinds[7] = RL_VOCAB_EOG;
    rl_err err = {0};
    rl_vocab_trie *t = rl_vocab_trie_build(8, pieces, lens, kinds, &err);
    assert_non_null(t);
    const char *gtext = "root ::= \"{\\\"a\\\": \" [12]+ \"}\"";
    rl_grammar *g = rl_grammar_compile(gtext, strlen(gtext), &err);
    assert_non_null(g);
    rl_gmatch *start = rl_gmatch_new(g, t, &err), *mid = rl_gmatch_clone(start, &err);
    assert_int_equal(rl_gmatch_accept_bytes(mid, "{\"a\": 1", 7, &err), RL_OK);
    assert_int_equal(rl_gmatch_min_remaining(start), 8);
    rl_spec_planner *p = planner(8, 4, 8, 100, true);
    rl_spec_acc acc = {0};
    rl_spec_planner_begin(p);
    rl_spec_cand *c0 = offer(p, RL_SPEC_SRC_NONE, NULL, 100);
    c0->gm = start;
    rl_spec_cand *c1 = offer(p, RL_SPEC_SRC_NONE, NULL, 72); /* slack 64: closing soon */
    c1->gm = start;
    rl_spec_cand *c2 = offer(p, RL_SPEC_SRC_NGRAM, &acc, 100); /* nothing forced: n-gram */
    c2->gm = mid;
    rl_spec_cand *c3 = offer(p, RL_SPEC_SRC_NONE, NULL, 100); /* nothing forced, no drafter */
    c3->gm = mid;
    rl_spec_planner_run(p, NULL);
    c0 = rl_spec_planner_cand(p, 0);
    assert_int_equal(c0->k, 4);
    assert_false(c0->from_drafter);
    for (int j = 0; j < 4; j++) assert_int_equal(c0->draft[j], j); /* { "a" : space */
    assert_int_equal(rl_spec_planner_cand(p, 1)->k, 0);
    c2 = rl_spec_planner_cand(p, 2);
    assert_int_equal(c2->k, 4);
    assert_true(c2->from_drafter);
    assert_int_equal(c2->draft[0], 4);
    assert_int_equal(rl_spec_planner_cand(p, 3)->k, 0);
    assert_int_equal(rl_spec_planner_n_forced(p), 4);
    /* the planner does not advance the matchers */
    assert_int_equal(rl_gmatch_min_remaining(start), 8);
    rl_spec_planner_free(p);
    rl_gmatch_free(mid);
    rl_gmatch_free(start);
    rl_grammar_free(g);
    rl_vocab_trie_free(t);
}

/* Drafts the step did not cover are dropped: a request of 10 computed
 * tokens, 1 to decode and 4 drafts (n_tokens 15). */
static void test_spec_trim(void **state) {
    (void)state;
    struct {
        int32_t step_n;
        rl_sched_state st;
        int32_t keep;
    } cases[] = {
        {5, RL_SCHED_RUNNING, 4}, /* all covered */
        {3, RL_SCHED_RUNNING, 2}, /* the token budget cut two */
        {1, RL_SCHED_RUNNING, 0}, /* only the real token */
        {0, RL_SCHED_RUNNING, 0}, /* not scheduled */
        {0, RL_SCHED_WAITING, 0}, /* preempted */
        {5, RL_SCHED_WAITING, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        rl_sched_req r;
        memset(&r, 0, sizeof r);
        r.n_computed = 10;
        r.n_tokens = 15;
        r.step_n = cases[i].step_n;
        r.state = cases[i].st;
        int32_t kept = rl_spec_trim(&r, 4);
        if (kept != cases[i].keep) fail_msg("case %zu: kept %d, want %d", i, kept, cases[i].keep);
        assert_int_equal(r.n_tokens, 11 + kept);
    }
    /* a preempted request restarts from 0: everything past the drafts' start goes */
    rl_sched_req r;
    memset(&r, 0, sizeof r);
    r.n_tokens = 15;
    r.state = RL_SCHED_WAITING;
    assert_int_equal(rl_spec_trim(&r, 4), 0);
    assert_int_equal(r.n_tokens, 11);
    /* no drafts: nothing to do */
    r.state = RL_SCHED_RUNNING;
    r.n_computed = 10;
    r.n_tokens = 11;
    r.step_n = 1;
    assert_int_equal(rl_spec_trim(&r, 0), 0);
    assert_int_equal(r.n_tokens, 11);
}

static const char *model_path(void) {
    const char *m = getenv("REDLINE_MODEL");
    return m && *m ? m : "models/smollm2-135m.gguf";
}

/* The restricted head is a view of the output matrix: its logits are the
 * full forward's first n columns, bit for bit, for every wanted row. */
static void test_forward_restricted_head(void **state) {
    (void)state;
    rl_err err = {0};
    rl_model *m;
    rl_model_opts mo = {.max_batch = 16};
    if (rl_model_load(model_path(), &mo, &m, &err)) fail_msg("load: %s", err.msg);
    int32_t nv = rl_model_n_vocab(m), nr = 4096;
    rl_seqkv kv;
    if (rl_seqkv_init(&kv, m, 64, 1, 16, RL_TYPE_F16, &err)) fail_msg("kv: %s", err.msg);
    int32_t tok[5] = {504, 3458, 314, 4649, 28}, pos[5] = {0, 1, 2, 3, 4}, seq[5] = {0};
    bool want[5] = {false, true, false, true, true};
    float *full = malloc((size_t)3 * (size_t)nv * sizeof(float));
    float *part = malloc((size_t)3 * (size_t)nr * sizeof(float));
    rl_batch b = {.n_tok = 5,
                  .token = tok,
                  .pos = pos,
                  .seq = seq,
                  .want_logits = want,
                  .n_seq = 1,
                  .block_tables = kv.tables,
                  .n_blocks = kv.n_blocks};
    assert_int_equal(rl_model_forward(m, &b, kv.layers, full, NULL, &err), RL_OK);
    b.n_vocab_out = nr;
    assert_int_equal(rl_model_forward(m, &b, kv.layers, part, NULL, &err), RL_OK);
    for (int r = 0; r < 3; r++)
        assert_memory_equal(part + (size_t)r * (size_t)nr, full + (size_t)r * (size_t)nv,
                            (size_t)nr * sizeof(float));
    b.n_vocab_out = nv + 1;
    assert_int_equal(rl_model_forward(m, &b, kv.layers, part, NULL, &err), RL_ERR_INVALID);
    assert_non_null(strstr(err.msg, "n_vocab_out"));
    free(full);
    free(part);
    rl_seqkv_free(&kv);
    rl_model_free(m);
}

/* A restricted draft model proposes only ids inside its head, and what it
 * proposes is the argmax over the head of the full model's logits. */
static void test_draft_restricted_proposals(void **state) {
    (void)state;
    rl_err err = {0};
    rl_spec_draft *d, *full;
    int32_t nv;
    {
        rl_model *m;
        if (rl_model_load(model_path(), NULL, &m, &err)) fail_msg("load: %s", err.msg);
        nv = rl_model_n_vocab(m);
        rl_model_free(m);
    }
    assert_int_equal(rl_spec_draft_new(model_path(), nv, 2048, 2, 128, 64, &d, &err), RL_OK);
    assert_int_equal(rl_spec_draft_n_vocab(d), 2048);
    assert_int_equal(rl_spec_draft_new(model_path(), nv, 0, 2, 128, 64, &full, &err), RL_OK);
    assert_int_equal(rl_spec_draft_n_vocab(full), nv);
    rl_spec_draft *bad = NULL;
    assert_int_equal(rl_spec_draft_new(model_path(), nv, -1, 2, 128, 64, &bad, &err),
                     RL_ERR_INVALID);
    assert_null(bad);
    rl_spec_draft_seq s0, s1;
    rl_spec_draft_seq_init(&s0);
    rl_spec_draft_seq_init(&s1);
    int32_t toks[2][24] = {{504, 3458, 314, 4649, 28, 198}, {1326, 314, 253, 1456, 30}};
    const int32_t *tp[2] = {toks[0], toks[1]};
    int32_t n_toks[2] = {6, 5}, k[2] = {4, 3}, o0[4], o1[4];
    int32_t *outs[2] = {o0, o1};
    rl_spec_draft_seq *seqs[2] = {&s0, &s1};
    assert_int_equal(rl_spec_draft_propose(d, seqs, tp, n_toks, k, outs, 2, NULL, &err), RL_OK);
    assert_int_equal(k[0], 4);
    assert_int_equal(k[1], 3);
    for (int j = 0; j < 4; j++) assert_true(o0[j] >= 0 && o0[j] < 2048);
    for (int j = 0; j < 3; j++) assert_true(o1[j] >= 0 && o1[j] < 2048);
    /* the draft's decode steps were timed */
    int64_t n_step = 0;
    assert_true(rl_spec_draft_step_s(d, &n_step) > 0);
    assert_int_equal(n_step, 3);
    /* rollback and re-propose the same prefix: the same proposals */
    int32_t again[4];
    int32_t *outs2[1] = {again};
    int32_t k2[1] = {4};
    rl_spec_draft_seq *one[1] = {&s0};
    rl_spec_draft_rollback(d, &s0, 3);
    assert_int_equal(rl_spec_draft_propose(d, one, tp, n_toks, k2, outs2, 1, NULL, &err), RL_OK);
    assert_memory_equal(again, o0, sizeof o0);
    rl_spec_draft_seq_free(d, &s0);
    rl_spec_draft_seq_free(d, &s1);
    rl_spec_draft_free(d);
    rl_spec_draft_free(full);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ngram),
        cmocka_unit_test(test_verify_greedy_exact),
        cmocka_unit_test(test_verify_lossless_point_mass),
        cmocka_unit_test(test_verify_lossless_with_q),
        cmocka_unit_test(test_verify_lossless_restricted_q),
        cmocka_unit_test(test_expected_tokens),
        cmocka_unit_test(test_cost_estimates),
        cmocka_unit_test(test_policy_choose_k),
        cmocka_unit_test(test_planner_probe_order),
        cmocka_unit_test(test_planner_probe_two),
        cmocka_unit_test(test_planner_batch_limit),
        cmocka_unit_test(test_planner_fixed_caps),
        cmocka_unit_test(test_planner_grammar),
        cmocka_unit_test(test_spec_trim),
        cmocka_unit_test(test_forward_restricted_head),
        cmocka_unit_test(test_draft_restricted_proposals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
