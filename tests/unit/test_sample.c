/* Unit tests for src/sample: the sampler chain on small hand-made
 * distributions with exact expected results, statistical checks with fixed
 * seeds (deterministic), and a brute-force reference (full sort) that the
 * partial-selection chain must match on larger vocabularies with ties. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "base/rng.h"
#include "sample/sample.h"

static rl_sampler *new_ok(const rl_sample_params *p, int32_t n_vocab) {
    rl_err err;
    rl_sampler *s = rl_sampler_new(p, n_vocab, &err);
    if (!s) fail_msg("rl_sampler_new: %s", err.msg);
    return s;
}

/* rl_sampler_sample adjusts its input in place: sample a copy so a test
 * can reuse one logits array. */
static int32_t sample_copy(rl_sampler *s, const float *logits, rl_sample_result *res) {
    static float buf[1 << 16];
    int32_t n = rl_sampler_n_vocab(s);
    assert_true(n <= (int32_t)(sizeof buf / sizeof buf[0]));
    memcpy(buf, logits, sizeof *buf * (size_t)n);
    return rl_sampler_sample(s, buf, res);
}

/* Logits whose softmax is exactly `probs` (up to float rounding). */
static void logits_from_probs(const double *probs, float *out, int n) {
    for (int i = 0; i < n; i++) out[i] = probs[i] > 0 ? (float)log(probs[i]) : -INFINITY;
}

/* Chi-square statistic of counts against expected probabilities over the
 * tokens with probs > 0; asserts no count lands where probs == 0.  Returns
 * the statistic and the degrees of freedom. */
static double chi_square(const long *counts, const float *probs, int n, long total, int *df) {
    double chi2 = 0;
    int k = 0;
    for (int i = 0; i < n; i++) {
        if (probs[i] <= 0) {
            assert_int_equal(counts[i], 0);
            continue;
        }
        double e = probs[i] * (double)total;
        chi2 += (counts[i] - e) * (counts[i] - e) / e;
        k++;
    }
    *df = k - 1;
    return chi2;
}

/* A loose upper bound on the chi-square quantile: the statistic's mean is
 * df and its sd sqrt(2 df); df + 6 sd + 10 is beyond p = 1e-5 for every
 * df used here.  Seeds are fixed, so these tests are deterministic; the
 * bound only has to be honest, not tight. */
static double chi2_bound(int df) {
    return df + 6.0 * sqrt(2.0 * df) + 10.0;
}

/* ---------------------------------------------------------------- greedy */

static void test_greedy_argmax_tie_lowest_id(void **state) {
    (void)state;
    rl_sample_params p = rl_sample_params_default();
    p.temperature = 0;
    p.n_logprobs = 4;
    rl_sampler *s = new_ok(&p, 5);
    const float logits[5] = {1.0f, 3.0f, -2.0f, 3.0f, 2.0f};
    rl_rng before = rl_sampler_get_rng(s);
    rl_sample_result res;
    assert_int_equal(sample_copy(s, logits, &res), 1);
    assert_int_equal(res.id, 1);
    /* greedy draws nothing from the rng */
    rl_rng after = rl_sampler_get_rng(s);
    assert_memory_equal(&before, &after, sizeof before);
    /* top list: value desc, ties by id asc */
    assert_int_equal(res.n_top, 4);
    assert_int_equal(res.top_id[0], 1);
    assert_int_equal(res.top_id[1], 3);
    assert_int_equal(res.top_id[2], 4);
    assert_int_equal(res.top_id[3], 0);
    double lse = log(exp(1) + 2 * exp(3) + exp(-2) + exp(2));
    assert_float_equal(res.logprob, 3 - lse, 1e-5);
    assert_float_equal(res.top_logprob[2], 2 - lse, 1e-5);
    float probs[5];
    rl_sampler_dist(s, logits, probs);
    for (int i = 0; i < 5; i++) assert_float_equal(probs[i], i == 1 ? 1.0f : 0.0f, 0);
    rl_sampler_free(s);
}

/* no_logprob skips the softmax: the same pick (greedy and drawn, the same
 * rng use), the logprob NaN and no alternatives; with n_logprobs > 0 the
 * logprobs are still reported. */
static void test_no_logprob(void **state) {
    (void)state;
    const float logits[5] = {1.0f, 3.0f, -2.0f, 3.5f, 2.0f};
    for (int drawn = 0; drawn < 2; drawn++) {
        rl_sample_params p = rl_sample_params_default();
        p.temperature = drawn ? 0.8f : 0.0f;
        p.seed = 7;
        rl_sampler *a = new_ok(&p, 5);
        p.no_logprob = true;
        rl_sampler *b = new_ok(&p, 5);
        p.n_logprobs = 2;
        rl_sampler *c = new_ok(&p, 5);
        for (int i = 0; i < 20; i++) {
            rl_sample_result ra, rb, rc;
            int32_t ia = sample_copy(a, logits, &ra), ib = sample_copy(b, logits, &rb),
                    ic = sample_copy(c, logits, &rc);
            assert_int_equal(ia, ib);
            assert_int_equal(ia, ic);
            assert_true(isnan(rb.logprob));
            assert_int_equal(rb.n_top, 0);
            assert_false(isnan(ra.logprob));
            assert_float_equal(rc.logprob, ra.logprob, 0);
            assert_int_equal(rc.n_top, 2);
            assert_int_equal(rc.top_id[0], 3);
        }
        rl_sampler_free(a);
        rl_sampler_free(b);
        rl_sampler_free(c);
    }
}

static void test_top_k1_equals_greedy(void **state) {
    (void)state;
    rl_sample_params g = rl_sample_params_default(), k1 = g;
    g.temperature = 0;
    k1.temperature = 1.3f;
    k1.top_k = 1;
    k1.seed = 77;
    enum { N = 300 };
    rl_sampler *sg = new_ok(&g, N), *sk = new_ok(&k1, N);
    rl_rng gen;
    rl_rng_seed(&gen, 1);
    float logits[N];
    for (int iter = 0; iter < 200; iter++) {
        /* coarse values so ties at the top are common */
        for (int i = 0; i < N; i++) logits[i] = (float)rl_rng_below(&gen, 20) * 0.5f;
        int32_t a = sample_copy(sg, logits, NULL);
        int32_t b = sample_copy(sk, logits, NULL);
        assert_int_equal(a, b);
        for (int i = 0; i < a; i++) assert_true(logits[i] < logits[a]);
    }
    rl_sampler_free(sg);
    rl_sampler_free(sk);
}

/* ----------------------------------------------------- top-p, min-p, temp */

static const double P4[4] = {0.5, 0.3, 0.15, 0.05};

static void dist_with(rl_sample_params p, const float *logits, int n, float *out) {
    rl_sampler *s = new_ok(&p, n);
    rl_sampler_dist(s, logits, out);
    rl_sampler_free(s);
}

static void test_top_p(void **state) {
    (void)state;
    float logits[4], d[4];
    logits_from_probs(P4, logits, 4);
    rl_sample_params p = rl_sample_params_default();
    /* top_p = 1 keeps everything: the plain softmax */
    dist_with(p, logits, 4, d);
    for (int i = 0; i < 4; i++) assert_float_equal(d[i], P4[i], 1e-6);
    /* tiny top_p keeps only the max */
    p.top_p = 1e-6f;
    dist_with(p, logits, 4, d);
    assert_float_equal(d[0], 1.0, 0);
    for (int i = 1; i < 4; i++) assert_float_equal(d[i], 0.0, 0);
    /* 0.75: 0.5 < 0.75 <= 0.8 -> {0, 1} renormalised */
    p.top_p = 0.75f;
    dist_with(p, logits, 4, d);
    assert_float_equal(d[0], 0.625, 1e-6);
    assert_float_equal(d[1], 0.375, 1e-6);
    assert_float_equal(d[2], 0.0, 0);
    assert_float_equal(d[3], 0.0, 0);
    /* 0.9: 0.8 < 0.9 <= 0.95 -> {0, 1, 2} */
    p.top_p = 0.9f;
    dist_with(p, logits, 4, d);
    assert_float_equal(d[2], 0.15 / 0.95, 1e-6);
    assert_float_equal(d[3], 0.0, 0);
}

static void test_min_p(void **state) {
    (void)state;
    float logits[4], d[4];
    logits_from_probs(P4, logits, 4);
    rl_sample_params p = rl_sample_params_default();
    /* threshold 0.2 * 0.5 = 0.1 keeps {0, 1, 2} */
    p.min_p = 0.2f;
    dist_with(p, logits, 4, d);
    assert_float_equal(d[0], 0.5 / 0.95, 1e-6);
    assert_float_equal(d[1], 0.3 / 0.95, 1e-6);
    assert_float_equal(d[2], 0.15 / 0.95, 1e-6);
    assert_float_equal(d[3], 0.0, 0);
    /* threshold 0.175 keeps {0, 1} */
    p.min_p = 0.35f;
    dist_with(p, logits, 4, d);
    assert_float_equal(d[0], 0.625, 1e-6);
    assert_float_equal(d[2], 0.0, 0);
    /* top-p and min-p together: the shorter of the two prefixes */
    p.min_p = 0.2f;
    p.top_p = 0.75f;
    dist_with(p, logits, 4, d);
    assert_float_equal(d[0], 0.625, 1e-6);
    assert_float_equal(d[2], 0.0, 0);
    /* min_p = 1 keeps only the max */
    p.min_p = 1.0f;
    p.top_p = 1.0f;
    dist_with(p, logits, 4, d);
    assert_float_equal(d[0], 1.0, 0);
}

static void test_temperature_scaling(void **state) {
    (void)state;
    const float logits[3] = {0.0f, 1.0f, -INFINITY};
    float d[3];
    rl_sample_params p = rl_sample_params_default();
    p.temperature = 0.5f; /* logits / 0.5 = {0, 2} */
    dist_with(p, logits, 3, d);
    assert_float_equal(d[1], exp(2) / (1 + exp(2)), 1e-6);
    assert_float_equal(d[0], 1 / (1 + exp(2)), 1e-6);
    assert_float_equal(d[2], 0.0, 0);
    p.temperature = 2.0f; /* {0, 0.5} */
    dist_with(p, logits, 3, d);
    assert_float_equal(d[1], exp(0.5) / (1 + exp(0.5)), 1e-6);
    /* a huge temperature flattens, a tiny one sharpens to the max */
    p.temperature = 1e6f;
    dist_with(p, logits, 3, d);
    assert_float_equal(d[0], 0.5, 1e-5);
    p.temperature = 1e-30f;
    dist_with(p, logits, 3, d);
    assert_float_equal(d[1], 1.0, 0);
    /* logprobs ignore temperature: they are the model's distribution */
    p.temperature = 0.5f;
    p.n_logprobs = 2;
    rl_sampler *s = new_ok(&p, 3);
    rl_sample_result res;
    sample_copy(s, logits, &res);
    assert_float_equal(res.top_logprob[0], 1 - log(1 + exp(1)), 1e-6);
    assert_float_equal(res.top_logprob[1], 0 - log(1 + exp(1)), 1e-6);
    rl_sampler_free(s);
}

static void test_uniform_chi_square(void **state) {
    (void)state;
    enum { N = 12, DRAWS = 100000 };
    float logits[N];
    for (int i = 0; i < N; i++) logits[i] = 0.25f;
    /* ban two tokens and cut with top-k: the kept set is 8 tokens */
    const rl_logit_bias bias[2] = {{3, -INFINITY}, {5, -INFINITY}};
    rl_sample_params p = rl_sample_params_default();
    p.top_k = 8;
    p.seed = 2024;
    p.logit_bias = bias;
    p.n_logit_bias = 2;
    rl_sampler *s = new_ok(&p, N);
    float d[N];
    rl_sampler_dist(s, logits, d);
    /* the tie rule picks the 8 lowest unbanned ids: 0 1 2 4 6 7 8 9 */
    const int kept[N] = {1, 1, 1, 0, 1, 0, 1, 1, 1, 1, 0, 0};
    for (int i = 0; i < N; i++) assert_float_equal(d[i], kept[i] ? 0.125 : 0.0, 1e-7);
    long counts[N] = {0};
    for (int i = 0; i < DRAWS; i++) counts[sample_copy(s, logits, NULL)]++;
    int df;
    double chi2 = chi_square(counts, d, N, DRAWS, &df);
    assert_int_equal(df, 7);
    assert_true(chi2 < 24.32); /* df 7, p = 0.001 */
    rl_sampler_free(s);
}

/* ------------------------------------------------------ penalties, bias */

static void test_penalties_exact(void **state) {
    (void)state;
    rl_sample_params p = rl_sample_params_default();
    p.repeat_penalty = 2.0f;
    p.presence_penalty = 0.5f;
    p.frequency_penalty = 0.25f;
    p.penalty_last_n = 3;
    rl_sampler *s = new_ok(&p, 5);
    /* window after four accepts (last 3): {1, 0, 1}; token 3 fell out */
    assert_int_equal(rl_sampler_accept(s, 3), RL_OK);
    assert_int_equal(rl_sampler_accept(s, 1), RL_OK);
    assert_int_equal(rl_sampler_accept(s, 0), RL_OK);
    assert_int_equal(rl_sampler_accept(s, 1), RL_OK);
    assert_int_equal(rl_sampler_accept(s, 5), RL_ERR_RANGE);
    assert_int_equal(rl_sampler_accept(s, -1), RL_ERR_RANGE);
    float x[5] = {2.0f, -2.0f, 1.0f, 4.0f, 0.0f};
    rl_sampler_apply_penalties(s, x);
    assert_float_equal(x[0], 2.0 / 2 - 0.5 - 0.25 * 1, 1e-7);  /* 0.25 */
    assert_float_equal(x[1], -2.0 * 2 - 0.5 - 0.25 * 2, 1e-7); /* -5 */
    assert_float_equal(x[2], 1.0, 0);
    assert_float_equal(x[3], 4.0, 0);
    assert_float_equal(x[4], 0.0, 0);
    /* the sampler's logprobs use the same penalised logits */
    rl_sampler_free(s);
    p.n_logprobs = 5;
    p.temperature = 0;
    s = new_ok(&p, 5);
    rl_sampler_accept(s, 3);
    rl_sampler_accept(s, 1);
    rl_sampler_accept(s, 0);
    rl_sampler_accept(s, 1);
    const float orig[5] = {2.0f, -2.0f, 1.0f, 4.0f, 0.0f};
    rl_sample_result res;
    assert_int_equal(sample_copy(s, orig, &res), 3);
    double lse = log(exp(0.25) + exp(-5) + exp(1) + exp(4) + exp(0));
    assert_float_equal(res.logprob, 4 - lse, 1e-5);
    assert_int_equal(res.top_id[1], 2);
    assert_int_equal(res.top_id[2], 0);
    assert_float_equal(res.top_logprob[2], 0.25 - lse, 1e-5);
    assert_int_equal(res.top_id[4], 1);
    assert_float_equal(res.top_logprob[4], -5 - lse, 1e-5);
    /* rl_sampler_sample leaves the adjusted logits in its input */
    float z[5] = {2.0f, -2.0f, 1.0f, 4.0f, 0.0f};
    assert_int_equal(rl_sampler_sample(s, z, NULL), 3);
    assert_float_equal(z[0], 0.25, 1e-7);
    assert_float_equal(z[1], -5.0, 1e-7);
    /* reset forgets the history */
    rl_sampler_reset(s);
    float y[5] = {2.0f, -2.0f, 1.0f, 4.0f, 0.0f};
    rl_sampler_apply_penalties(s, y);
    assert_memory_equal(y, orig, sizeof y);
    rl_sampler_free(s);
}

static void test_repeat_penalty_flips_greedy(void **state) {
    (void)state;
    rl_sample_params p = rl_sample_params_default();
    p.temperature = 0;
    p.repeat_penalty = 1.5f;
    rl_sampler *s = new_ok(&p, 3);
    const float logits[3] = {3.0f, 2.5f, -1.0f};
    assert_int_equal(sample_copy(s, logits, NULL), 0);
    rl_sampler_accept(s, 0); /* 3 / 1.5 = 2 < 2.5 */
    assert_int_equal(sample_copy(s, logits, NULL), 1);
    rl_sampler_free(s);
}

static void test_logit_bias_bans(void **state) {
    (void)state;
    const float logits[4] = {5.0f, 4.0f, 1.0f, 0.0f};
    const rl_logit_bias bias[3] = {{0, -INFINITY}, {3, 2.0f}, {3, 1.5f}};
    rl_sample_params p = rl_sample_params_default();
    p.logit_bias = bias;
    p.n_logit_bias = 3;
    p.n_logprobs = 4;
    p.temperature = 0;
    rl_sampler *s = new_ok(&p, 4);
    rl_sample_result res;
    /* token 0 banned; token 3 gets +3.5 (duplicates add) -> 3.5 < 4 */
    assert_int_equal(sample_copy(s, logits, &res), 1);
    assert_int_equal(res.n_top, 3); /* the banned token is not an alternative */
    assert_int_equal(res.top_id[1], 3);
    rl_sampler_free(s);
    p.temperature = 1.0f;
    p.seed = 5;
    s = new_ok(&p, 4);
    float d[4];
    rl_sampler_dist(s, logits, d);
    assert_float_equal(d[0], 0.0, 0);
    double z = exp(4) + exp(1) + exp(3.5);
    assert_float_equal(d[3], exp(3.5) / z, 1e-6);
    for (int i = 0; i < 5000; i++) assert_int_not_equal(sample_copy(s, logits, NULL), 0);
    rl_sampler_free(s);
    /* everything banned: -1, no crash, empty distribution */
    const rl_logit_bias all[2] = {{0, -INFINITY}, {1, -INFINITY}};
    const float two[2] = {1.0f, 2.0f};
    p.logit_bias = all;
    p.n_logit_bias = 2;
    for (int t = 0; t < 2; t++) {
        p.temperature = t ? 1.0f : 0.0f;
        s = new_ok(&p, 2);
        assert_int_equal(sample_copy(s, two, &res), -1);
        assert_int_equal(res.id, -1);
        assert_int_equal(res.n_top, 0);
        assert_true(isinf(res.logprob) && res.logprob < 0);
        rl_sampler_dist(s, two, d);
        assert_float_equal(d[0] + d[1], 0.0, 0);
        rl_sampler_free(s);
    }
}

static void test_top_k_more_than_finite(void **state) {
    (void)state;
    /* only 3 finite tokens but top_k 5 (heap path) and 0 (compaction path) */
    const float logits[8] = {-INFINITY, 1.0f, -INFINITY, 0.0f, -INFINITY, -1.0f, NAN, -INFINITY};
    const int32_t ks[2] = {5, 0};
    for (int t = 0; t < 2; t++) {
        rl_sample_params p = rl_sample_params_default();
        p.top_k = ks[t];
        float d[8];
        dist_with(p, logits, 8, d);
        double z = exp(1) + exp(0) + exp(-1);
        for (int i = 0; i < 8; i++) {
            double want = (i == 1 || i == 3 || i == 5) ? exp(logits[i]) / z : 0.0;
            assert_float_equal(d[i], want, 1e-6);
        }
    }
}

static void test_nan_logits_never_chosen(void **state) {
    (void)state;
    const float logits[4] = {NAN, 1.0f, INFINITY, NAN};
    rl_sample_params p = rl_sample_params_default();
    p.n_logprobs = 3;
    rl_sampler *s = new_ok(&p, 4);
    rl_sample_result res;
    for (int i = 0; i < 100; i++) assert_int_equal(sample_copy(s, logits, &res), 2);
    assert_int_equal(res.n_top, 2);
    assert_false(isnan(res.logprob));
    rl_sampler_free(s);
}

/* ---------------------------------------------------------- reproducible */

static void draw_seq(rl_sampler *s, const float *logits, int32_t *out, int n) {
    for (int i = 0; i < n; i++) out[i] = sample_copy(s, logits, NULL);
}

static void test_seeded_reproducibility(void **state) {
    (void)state;
    enum { N = 50, L = 200 };
    float logits[N];
    for (int i = 0; i < N; i++) logits[i] = (float)((i * 7) % 11) * 0.3f;
    rl_sample_params p = rl_sample_params_default();
    p.seed = 123;
    p.top_p = 0.95f;
    rl_sampler *a = new_ok(&p, N), *b = new_ok(&p, N);
    p.seed = 124;
    rl_sampler *c = new_ok(&p, N);
    int32_t sa[L], sb[L], sc[L];
    draw_seq(a, logits, sa, L);
    draw_seq(b, logits, sb, L);
    draw_seq(c, logits, sc, L);
    assert_memory_equal(sa, sb, sizeof sa);
    assert_memory_not_equal(sa, sc, sizeof sa);
    /* reset replays the seed */
    rl_sampler_reset(a);
    draw_seq(a, logits, sb, L);
    assert_memory_equal(sa, sb, sizeof sa);
    /* get/set rng: snapshot mid-stream, replay */
    rl_sampler_reset(a);
    draw_seq(a, logits, sb, 10);
    rl_rng snap = rl_sampler_get_rng(a);
    draw_seq(a, logits, sb, L - 10);
    rl_sampler_set_rng(c, &snap);
    draw_seq(c, logits, sc, L - 10);
    assert_memory_equal(sa + 10, sc, sizeof(int32_t) * (L - 10));
    /* clone copies rng and history */
    rl_sampler_reset(a);
    draw_seq(a, logits, sb, 10);
    rl_err err;
    rl_sampler *d = rl_sampler_clone(a, &err);
    assert_non_null(d);
    draw_seq(d, logits, sc, L - 10);
    assert_memory_equal(sa + 10, sc, sizeof(int32_t) * (L - 10));
    rl_sampler_free(a);
    rl_sampler_free(b);
    rl_sampler_free(c);
    rl_sampler_free(d);
}

static void test_clone_keeps_history(void **state) {
    (void)state;
    rl_sample_params p = rl_sample_params_default();
    p.repeat_penalty = 2.0f;
    p.penalty_last_n = 4;
    rl_sampler *s = new_ok(&p, 3);
    rl_sampler_accept(s, 2);
    rl_err err;
    rl_sampler *c = rl_sampler_clone(s, &err);
    assert_non_null(c);
    float x[3] = {1.0f, 1.0f, 1.0f};
    rl_sampler_apply_penalties(c, x);
    assert_float_equal(x[2], 0.5, 0);
    assert_float_equal(x[0], 1.0, 0);
    rl_sampler_free(s);
    rl_sampler_free(c);
}

/* -------------------------------------------- frequencies match the dist */

static void test_frequencies_match_dist(void **state) {
    (void)state;
    enum { N = 40, DRAWS = 200000 };
    float logits[N];
    rl_rng gen;
    rl_rng_seed(&gen, 9);
    for (int i = 0; i < N; i++) logits[i] = (float)(rl_rng_f64(&gen) * 4.0 - 2.0);
    rl_sample_params p = rl_sample_params_default();
    p.top_k = 25;
    p.temperature = 0.8f;
    p.top_p = 0.9f;
    p.min_p = 0.05f;
    p.seed = 31337;
    rl_sampler *s = new_ok(&p, N);
    float d[N];
    rl_sampler_dist(s, logits, d);
    double sum = 0;
    int nz = 0;
    for (int i = 0; i < N; i++) {
        sum += d[i];
        nz += d[i] > 0;
    }
    assert_float_equal(sum, 1.0, 1e-6);
    assert_true(nz > 3 && nz < 25);
    long counts[N] = {0};
    for (int i = 0; i < DRAWS; i++) counts[sample_copy(s, logits, NULL)]++;
    int df;
    double chi2 = chi_square(counts, d, N, DRAWS, &df);
    assert_true(chi2 < chi2_bound(df));
    /* sample_from on the same vector draws the same distribution */
    memset(counts, 0, sizeof counts);
    for (int i = 0; i < DRAWS; i++) counts[rl_sampler_sample_from(s, d)]++;
    chi2 = chi_square(counts, d, N, DRAWS, &df);
    assert_true(chi2 < chi2_bound(df));
    rl_sampler_free(s);
}

static void test_sample_from(void **state) {
    (void)state;
    rl_sample_params p = rl_sample_params_default();
    p.seed = 3;
    rl_sampler *s = new_ok(&p, 4);
    /* unnormalised, with a negative and a NaN entry that count as 0 */
    const float q[4] = {-1.0f, 1.0f, NAN, 3.0f};
    long c[4] = {0};
    for (int i = 0; i < 40000; i++) c[rl_sampler_sample_from(s, q)]++;
    assert_int_equal(c[0], 0);
    assert_int_equal(c[2], 0);
    assert_true(c[1] > 9400 && c[1] < 10600); /* expect 10000, sd 87 */
    const float zero[4] = {0, 0, 0, 0};
    assert_int_equal(rl_sampler_sample_from(s, zero), -1);
    rl_sampler_free(s);
}

/* ------------------------------------------------------------- logprobs */

static void test_logprobs_sum_to_one(void **state) {
    (void)state;
    enum { N = 20 };
    float logits[N];
    rl_rng gen;
    rl_rng_seed(&gen, 17);
    for (int i = 0; i < N; i++) logits[i] = (float)(rl_rng_f64(&gen) * 20.0 - 10.0);
    rl_sample_params p = rl_sample_params_default();
    p.n_logprobs = RL_SAMPLE_MAX_LOGPROBS; /* = N: the whole vocabulary */
    p.temperature = 0.7f;
    p.top_k = 3;
    p.seed = 8;
    rl_sampler *s = new_ok(&p, N);
    rl_sample_result res;
    int32_t id = sample_copy(s, logits, &res);
    assert_int_equal(res.n_top, N);
    double sum = 0;
    int seen_chosen = 0;
    for (int i = 0; i < N; i++) {
        sum += exp(res.top_logprob[i]);
        if (i > 0) assert_true(res.top_logprob[i] <= res.top_logprob[i - 1]);
        if (res.top_id[i] == id) {
            seen_chosen = 1;
            assert_float_equal(res.top_logprob[i], res.logprob, 1e-6);
        }
    }
    assert_true(seen_chosen);
    assert_float_equal(sum, 1.0, 1e-5);
    rl_sampler_free(s);
}

/* --------------------------------------- brute-force reference comparison */

typedef struct ref_item {
    float v;
    int32_t id;
} ref_item;

static int ref_cmp(const void *a, const void *b) {
    const ref_item *x = a, *y = b;
    if (x->v != y->v) return x->v > y->v ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

/* The chain as specified, with a full sort: top-k, temperature, softmax
 * over the top-k set, top-p prefix, min-p, renormalise. */
static void ref_dist(const float *logits, int n, const rl_sample_params *p, float *out) {
    ref_item *it = malloc(sizeof *it * (size_t)n);
    assert_non_null(it);
    int m = 0;
    for (int i = 0; i < n; i++)
        if (logits[i] > -INFINITY) it[m++] = (ref_item){logits[i], i};
    qsort(it, (size_t)m, sizeof *it, ref_cmp);
    if (p->top_k > 0 && p->top_k < m) m = p->top_k;
    double z = 0;
    float *q = malloc(sizeof *q * (size_t)(m ? m : 1));
    assert_non_null(q);
    for (int i = 0; i < m; i++) {
        q[i] = expf((it[i].v - it[0].v) / p->temperature);
        z += q[i];
    }
    int keep = m;
    if (p->top_p < 1.0f) {
        double cum = 0;
        for (int i = 0; i < m; i++) {
            cum += q[i];
            if (cum >= (double)p->top_p * z) {
                keep = i + 1;
                break;
            }
        }
    }
    int kmin = 0;
    while (kmin < keep && q[kmin] >= p->min_p) kmin++;
    keep = kmin;
    double s = 0;
    for (int i = 0; i < keep; i++) s += q[i];
    memset(out, 0, sizeof *out * (size_t)n);
    for (int i = 0; i < keep; i++) out[it[i].id] = (float)(q[i] / s);
    free(q);
    free(it);
}

static void test_matches_reference_large(void **state) {
    (void)state;
    enum { N = 50000 };
    float *logits = malloc(sizeof *logits * N), *a = malloc(sizeof *a * N),
          *b = malloc(sizeof *b * N);
    assert_non_null(logits);
    assert_non_null(a);
    assert_non_null(b);
    rl_rng gen;
    rl_rng_seed(&gen, 4242);
    struct {
        int32_t top_k;
        float temp, top_p, min_p;
    } cfg[] = {
        {40, 0.8f, 0.95f, 0.0f},  {0, 1.0f, 0.95f, 0.0f},    {0, 1.5f, 0.99f, 0.0f},
        {0, 1.0f, 1.0f, 0.01f},   {5000, 2.0f, 0.9f, 0.02f}, {1, 1.0f, 0.5f, 0.0f},
        {0, 3.0f, 0.999f, 0.0f},  {100, 1.0f, 1.0f, 0.0f},   {0, 0.5f, 0.3f, 0.1f},
        {600, 1.0f, 0.97f, 0.0f}, {512, 1.2f, 1.0f, 0.0f},   {0, 1e-3f, 0.9f, 0.0f},
    };
    for (size_t c = 0; c < sizeof cfg / sizeof cfg[0]; c++) {
        /* quantised values: many exact ties, including at the cut points */
        for (int i = 0; i < N; i++) logits[i] = (float)rl_rng_below(&gen, 400) * 0.025f - 5.0f;
        logits[rl_rng_below(&gen, N)] = -INFINITY;
        rl_sample_params p = rl_sample_params_default();
        p.top_k = cfg[c].top_k;
        p.temperature = cfg[c].temp;
        p.top_p = cfg[c].top_p;
        p.min_p = cfg[c].min_p;
        rl_sampler *s = new_ok(&p, N);
        rl_sampler_dist(s, logits, a);
        ref_dist(logits, N, &p, b);
        int diff_support = 0;
        for (int i = 0; i < N; i++) {
            diff_support += (a[i] > 0) != (b[i] > 0);
            assert_float_equal(a[i], b[i], 1e-6 + 1e-4 * b[i]);
        }
        assert_int_equal(diff_support, 0);
        /* every sampled token lies in the support */
        for (int i = 0; i < 20; i++) assert_true(a[sample_copy(s, logits, NULL)] > 0);
        rl_sampler_free(s);
    }
    free(logits);
    free(a);
    free(b);
}

/* ------------------------------------------------------------ validation */

static void expect_invalid(rl_sample_params p, int32_t n_vocab, const char *needle) {
    rl_err err;
    rl_err_clear(&err);
    rl_status st = rl_sample_params_validate(&p, n_vocab, &err);
    assert_int_not_equal(st, RL_OK);
    assert_int_equal(err.code, st);
    if (!strstr(err.msg, needle)) fail_msg("message '%s' lacks '%s'", err.msg, needle);
    /* rl_sampler_new refuses the same parameters */
    assert_null(rl_sampler_new(&p, n_vocab, &err));
    if (!strstr(err.msg, needle)) fail_msg("message '%s' lacks '%s'", err.msg, needle);
}

static void test_validate(void **state) {
    (void)state;
    const rl_sample_params d = rl_sample_params_default();
    rl_err err;
    assert_int_equal(rl_sample_params_validate(&d, 10, &err), RL_OK);
    rl_sample_params p;
    p = d, p.temperature = NAN;
    expect_invalid(p, 10, "temperature: must be a finite number >= 0, got nan");
    p = d, p.temperature = -0.5f;
    expect_invalid(p, 10, "temperature: must be a finite number >= 0, got -0.5");
    p = d, p.temperature = INFINITY;
    expect_invalid(p, 10, "temperature");
    p = d, p.top_k = -1;
    expect_invalid(p, 10, "top_k");
    p = d, p.top_p = 0.0f;
    expect_invalid(p, 10, "top_p: must be in (0, 1], got 0");
    p = d, p.top_p = 1.5f;
    expect_invalid(p, 10, "top_p");
    p = d, p.top_p = NAN;
    expect_invalid(p, 10, "top_p");
    p = d, p.min_p = -0.1f;
    expect_invalid(p, 10, "min_p");
    p = d, p.min_p = NAN;
    expect_invalid(p, 10, "min_p");
    p = d, p.repeat_penalty = 0.0f;
    expect_invalid(p, 10, "repeat_penalty");
    p = d, p.repeat_penalty = NAN;
    expect_invalid(p, 10, "repeat_penalty");
    p = d, p.presence_penalty = NAN;
    expect_invalid(p, 10, "presence_penalty");
    p = d, p.frequency_penalty = -INFINITY;
    expect_invalid(p, 10, "frequency_penalty");
    p = d, p.penalty_last_n = -1;
    expect_invalid(p, 10, "penalty_last_n");
    p = d, p.n_logprobs = 21;
    expect_invalid(p, 10, "n_logprobs: must be in [0, 20], got 21");
    p = d, p.n_logprobs = -1;
    expect_invalid(p, 10, "n_logprobs");
    const rl_logit_bias bad_id[2] = {{1, 1.0f}, {10, 1.0f}};
    p = d, p.logit_bias = bad_id, p.n_logit_bias = 2;
    expect_invalid(p, 10, "logit_bias[1].id: token id 10 out of range [0, 10)");
    const rl_logit_bias neg_id[1] = {{-3, 1.0f}};
    p = d, p.logit_bias = neg_id, p.n_logit_bias = 1;
    expect_invalid(p, 10, "logit_bias[0].id");
    const rl_logit_bias nan_bias[1] = {{2, NAN}};
    p = d, p.logit_bias = nan_bias, p.n_logit_bias = 1;
    expect_invalid(p, 10, "logit_bias[0].bias");
    const rl_logit_bias pinf[1] = {{2, INFINITY}};
    p = d, p.logit_bias = pinf, p.n_logit_bias = 1;
    expect_invalid(p, 10, "logit_bias[0].bias");
    p = d, p.logit_bias = NULL, p.n_logit_bias = 3;
    expect_invalid(p, 10, "logit_bias");
    p = d;
    expect_invalid(p, 0, "n_vocab");
    /* boundary values that are valid */
    p = d, p.temperature = 0, p.top_p = 1, p.min_p = 1, p.top_k = 1000, p.n_logprobs = 20;
    assert_int_equal(rl_sample_params_validate(&p, 10, &err), RL_OK);
    const rl_logit_bias ban[1] = {{9, -INFINITY}};
    p = d, p.logit_bias = ban, p.n_logit_bias = 1;
    assert_int_equal(rl_sample_params_validate(&p, 10, &err), RL_OK);
}

static void test_alloc_failure(void **state) {
    (void)state;
    const rl_logit_bias bias[1] = {{1, 1.0f}};
    rl_sample_params p = rl_sample_params_default();
    p.logit_bias = bias;
    p.n_logit_bias = 1;
    int failures = 0;
    for (long k = 0; k < 10; k++) {
        rl_alloc_fail_after(k);
        rl_err err;
        rl_sampler *s = rl_sampler_new(&p, 100, &err);
        rl_alloc_fail_after(-1);
        if (!s) {
            assert_int_equal(err.code, RL_ERR_NOMEM);
            failures++;
        }
        rl_sampler_free(s);
    }
    assert_true(failures >= 5); /* sampler, cand, bias, 3 penalty tables */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy_argmax_tie_lowest_id),
        cmocka_unit_test(test_no_logprob),
        cmocka_unit_test(test_top_k1_equals_greedy),
        cmocka_unit_test(test_top_p),
        cmocka_unit_test(test_min_p),
        cmocka_unit_test(test_temperature_scaling),
        cmocka_unit_test(test_uniform_chi_square),
        cmocka_unit_test(test_penalties_exact),
        cmocka_unit_test(test_repeat_penalty_flips_greedy),
        cmocka_unit_test(test_logit_bias_bans),
        cmocka_unit_test(test_top_k_more_than_finite),
        cmocka_unit_test(test_nan_logits_never_chosen),
        cmocka_unit_test(test_seeded_reproducibility),
        cmocka_unit_test(test_clone_keeps_history),
        cmocka_unit_test(test_frequencies_match_dist),
        cmocka_unit_test(test_sample_from),
        cmocka_unit_test(test_logprobs_sum_to_one),
        cmocka_unit_test(test_matches_reference_large),
        cmocka_unit_test(test_validate),
        cmocka_unit_test(test_alloc_failure),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
