/* Speculative decoding units: the n-gram drafter, and the verifier's
 * losslessness on a case small enough to enumerate — a 6-token vocabulary
 * where the emitted token's empirical distribution must match the target's
 * exactly (chi-square), whatever the draft proposes and whatever its own
 * distribution q is. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <string.h>

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
    /* latest occurrence wins */
    int32_t x[] = {5, 1, 5, 2, 5};
    assert_int_equal(rl_spec_ngram(x, 5, 1, 1, 1, out), 1);
    assert_int_equal(out[0], 2);
}

static double chi2(const long *counts, const double *p, long n) {
    double c = 0;
    for (int v = 0; v < V; v++) {
        double e = p[v] * (double)n;
        if (e > 0) c += ((double)counts[v] - e) * ((double)counts[v] - e) / e;
        else if (counts[v]) return INFINITY;
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

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ngram),
        cmocka_unit_test(test_verify_greedy_exact),
        cmocka_unit_test(test_verify_lossless_point_mass),
        cmocka_unit_test(test_verify_lossless_with_q),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
