/* N-gram drafter and the speculative verifier (see spec.h). */
#include "spec/spec.h"

#include <math.h>
#include <string.h>

/* Latest j with toks[j .. j+g) == pat[0 .. g) and j + g < lim, or -1. */
static int32_t latest_match(const int32_t *toks, int32_t lim, const int32_t *pat, int32_t g) {
    for (int32_t j = lim - g - 1; j >= 0; j--)
        if (toks[j] == pat[0] && memcmp(toks + j, pat, (size_t)g * sizeof *toks) == 0) return j;
    return -1;
}

/* Copies up to k tokens from toks[from .. n) to out. */
static int32_t copy_from(const int32_t *toks, int32_t n, int32_t from, int32_t k, int32_t *out) {
    int32_t m = 0;
    while (m < k && from + m < n) {
        out[m] = toks[from + m];
        m++;
    }
    return m;
}

int32_t rl_spec_ngram(const int32_t *toks, int32_t n, int32_t k, int32_t ngram_min,
                      int32_t ngram_max, int32_t *out) {
    if (k <= 0 || ngram_min < 1) return 0;
    /* 1. the last g >= 2 tokens seen before: copy what followed them */
    for (int32_t g = ngram_max; g >= ngram_min && g >= 2; g--) {
        if (g >= n) continue;
        int32_t j = latest_match(toks, n, toks + n - g, g);
        if (j >= 0) return copy_from(toks, n, j + g, k, out);
    }
    /* 2. one token substituted (a renamed identifier, a fixed typo): the g
     * tokens before the last were seen before, followed by a different
     * token; continue after that one */
    for (int32_t g = ngram_max; g >= 2; g--) {
        if (g + 1 >= n) continue;
        const int32_t *ctx = toks + n - 1 - g;
        for (int32_t lim = n - 1, j; (j = latest_match(toks, lim, ctx, g)) >= 0; lim = j + g)
            if (toks[j + g] != toks[n - 1]) return copy_from(toks, n, j + g + 1, k, out);
    }
    /* 3. the last token alone */
    if (ngram_min <= 1 && n >= 2) {
        int32_t j = latest_match(toks, n, toks + n - 1, 1);
        if (j >= 0) return copy_from(toks, n, j + 1, k, out);
    }
    return 0;
}

int32_t rl_spec_verify(rl_sampler *s, float *rows, int32_t n_vocab, const int32_t *draft, int32_t k,
                       const float *q, float *scratch, rl_sample_result *res, int32_t *out) {
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
