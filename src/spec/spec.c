/* N-gram drafter and the speculative verifier (see spec.h). */
#include "spec/spec.h"

#include <math.h>
#include <string.h>

int32_t rl_spec_ngram(const int32_t *toks, int32_t n, int32_t k, int32_t ngram_min,
                      int32_t ngram_max, int32_t *out) {
    if (k <= 0 || ngram_min < 1) return 0;
    for (int32_t g = ngram_max; g >= ngram_min; g--) {
        if (g >= n) continue;
        const int32_t *suf = toks + n - g;
        /* latest j < n - g with toks[j .. j+g) == suffix */
        for (int32_t j = n - g - 1; j >= 0; j--) {
            if (toks[j] != suf[0] || memcmp(toks + j, suf, (size_t)g * sizeof *toks) != 0) continue;
            int32_t m = 0;
            while (m < k && j + g + m < n) {
                out[m] = toks[j + g + m];
                m++;
            }
            if (m > 0) return m;
        }
    }
    return 0;
}

int32_t rl_spec_verify(rl_sampler *s, float *rows, int32_t n_vocab, const int32_t *draft,
                       int32_t k, const float *q, float *scratch, rl_sample_result *res,
                       int32_t *out) {
    const rl_sample_params *sp = rl_sampler_params(s);
    const bool greedy = sp->temperature == 0.f;
    float *p = scratch, *resid = scratch + n_vocab;
    for (int32_t i = 0; i <= k; i++) {
        float *row = rows + (size_t)i * (size_t)n_vocab;
        int32_t tok;
        if (greedy || i == k) {
            /* plain decoding of this row: identical to the non-speculative
             * path (same logits, same sampler state) */
            tok = rl_sampler_sample(s, row, &res[i]);
            if (tok < 0) return i == 0 ? 0 : i;
            out[i] = tok;
            rl_sampler_accept(s, tok);
            if (i == k || tok != draft[i]) return i + 1;
            continue;
        }
        /* rejection sampling: accept draft d with probability
         * min(1, p(d) / q(d)), else draw from norm(max(0, p - q)) */
        rl_sampler_dist(s, row, p);
        int32_t d = draft[i];
        const float *qi = q ? q + (size_t)i * (size_t)n_vocab : NULL;
        float qd = qi ? qi[d] : 1.f;
        rl_rng rng = rl_sampler_get_rng(s);
        double u = rl_rng_f64(&rng);
        rl_sampler_set_rng(s, &rng);
        if (qd > 0.f && u < (double)p[d] / (double)qd) {
            tok = d;
        } else {
            for (int32_t v = 0; v < n_vocab; v++) {
                float qv = qi ? qi[v] : (v == d ? 1.f : 0.f);
                float r = p[v] - qv;
                resid[v] = r > 0.f ? r : 0.f;
            }
            tok = rl_sampler_sample_from(s, resid);
            if (tok < 0) tok = rl_sampler_sample_from(s, p); /* p == q: any draw from p */
            if (tok < 0) return i;
        }
        memset(&res[i], 0, sizeof res[i]);
        res[i].id = tok;
        res[i].logprob = p[tok] > 0.f ? logf(p[tok]) : -INFINITY;
        out[i] = tok;
        rl_sampler_accept(s, tok);
        if (tok != d) return i + 1;
    }
    return k + 1;
}
