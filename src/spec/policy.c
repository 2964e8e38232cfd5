/* Draft-length policy (see spec.h): per-request acceptance estimates and
 * an online cost model of target and draft forwards, combined by the
 * standard expectation of speculative decoding.
 *
 * With per-token acceptance a, a verification of k drafts emits
 * E(k) = (1 - a^(k+1)) / (1 - a) tokens (the accepted run plus the
 * target's own token).  A step in which n_dec sequences decode and n_spec
 * of them draft k tokens costs T(n_dec + k * n_spec) for the target plus
 * k draft forwards over n_spec sequences (none for n-gram drafts); the
 * policy picks the k in [0, k_max] with the most tokens per second.  k = 0
 * (plain decoding) wins by itself once extra positions cost as much as
 * they emit: the compute-bound crossover is measured, not configured.
 *
 * T(n) and D(n) are tables of exponential moving averages indexed by the
 * number of tokens (sequences for the draft).  An entry never observed is
 * interpolated or extrapolated linearly from observed ones; with a single
 * observation, scaled by the prior shape T(n) / T(1) = 1 + slope * (n - 1);
 * with nothing observed at all, the prior alone (only ratios matter for
 * the choice).  The caller probes k = 1 once per batch size whose k = 1
 * cost is unknown, so a pessimistic prior cannot lock speculation off. */
#include "spec/spec.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define EMA 0.3 /* weight of a new timing */

void rl_spec_cost_init(rl_spec_cost *c, float slope, float draft_ratio) {
    memset(c, 0, sizeof *c);
    c->slope = slope;
    c->draft_ratio = draft_ratio;
}

static void add(double *tab, int32_t n, double s) {
    if (n < 1 || n > RL_SPEC_COST_N || !(s > 0)) return;
    tab[n] = tab[n] > 0 ? tab[n] + EMA * (s - tab[n]) : s;
}

void rl_spec_cost_add_fwd(rl_spec_cost *c, int32_t n_tok, double s) {
    add(c->fwd, n_tok, s);
}
void rl_spec_cost_add_draft(rl_spec_cost *c, int32_t n_seq, double s) {
    add(c->draft, n_seq, s);
}

/* tab[n] when observed; else a line through the observed entries nearest
 * to n (interpolated between neighbours, extrapolated from the two nearest
 * on one side with a slope of at least 0), or with one observed entry the
 * prior shape through it.  False when nothing is observed. */
static bool estimate(const double *tab, int32_t n, float slope, double *out) {
    if (n >= 1 && n <= RL_SPEC_COST_N && tab[n] > 0) {
        *out = tab[n];
        return true;
    }
    int32_t lo = 0, lo2 = 0, hi = 0, hi2 = 0; /* nearest and second nearest each side */
    for (int32_t i = 1; i <= RL_SPEC_COST_N; i++) {
        if (!(tab[i] > 0)) continue;
        if (i < n) {
            lo2 = lo;
            lo = i;
        } else if (!hi) {
            hi = i;
        } else if (!hi2) {
            hi2 = i;
        }
    }
    int32_t a = 0, b = 0;
    if (lo && hi)
        a = lo, b = hi;
    else if (lo && lo2)
        a = lo2, b = lo;
    else if (hi && hi2)
        a = hi, b = hi2;
    if (a) {
        double d = (tab[b] - tab[a]) / (double)(b - a);
        if (d < 0) d = 0;
        double t = tab[a] + d * (double)(n - a);
        *out = t > 0 ? t : tab[a];
        return true;
    }
    int32_t one = lo ? lo : hi;
    if (!one) return false;
    *out = tab[one] * (1.0 + slope * (n - 1)) / (1.0 + slope * (one - 1));
    return true;
}

double rl_spec_cost_fwd(const rl_spec_cost *c, int32_t n_tok) {
    double t;
    if (n_tok < 1) n_tok = 1;
    if (estimate(c->fwd, n_tok, c->slope, &t)) return t;
    if (estimate(c->draft, n_tok, c->slope, &t)) return t / c->draft_ratio;
    return 1.0 + c->slope * (n_tok - 1);
}

double rl_spec_cost_draft(const rl_spec_cost *c, int32_t n_seq) {
    double t;
    if (n_seq < 1) n_seq = 1;
    if (estimate(c->draft, n_seq, c->slope, &t)) return t;
    return c->draft_ratio * rl_spec_cost_fwd(c, n_seq);
}

double rl_spec_expected_tokens(double a, int32_t k) {
    if (k <= 0) return 1.0;
    if (a >= 1.0) return (double)k + 1.0;
    if (a <= 0.0) return 1.0;
    return (1.0 - pow(a, k + 1)) / (1.0 - a);
}

int32_t rl_spec_choose_k(const rl_spec_cost *c, int32_t n_dec, const float *a, int32_t n_spec,
                         bool uses_draft, int32_t k_max) {
    if (n_spec <= 0 || k_max <= 0) return 0;
    if (n_dec < n_spec) n_dec = n_spec;
    int32_t best_k = 0;
    double best = 0;
    for (int32_t k = 0; k <= k_max; k++) {
        double tok = (double)(n_dec - n_spec);
        for (int32_t i = 0; i < n_spec; i++) tok += rl_spec_expected_tokens(a[i], k);
        double t = rl_spec_cost_fwd(c, n_dec + k * n_spec);
        if (uses_draft) t += (double)k * rl_spec_cost_draft(c, n_spec);
        double rate = tok / t;
        if (k == 0 || rate > best * 1.0001) { /* ties go to the shorter draft */
            best = rate;
            best_k = k;
        }
    }
    return best_k;
}

void rl_spec_acc_update(rl_spec_acc *s, int32_t k, int32_t accepted) {
    if (k <= 0) return;
    /* drafts are accepted in order: `accepted` successes, and one failure
     * unless the run reached the end */
    s->succ = 0.85f * s->succ + (float)accepted;
    s->trials = 0.85f * s->trials + (float)(accepted < k ? accepted + 1 : k);
}

void rl_spec_acc_decay(rl_spec_acc *s) {
    s->succ *= 0.95f;
    s->trials *= 0.95f;
}

float rl_spec_acc_rate(const rl_spec_acc *s, float prior) {
    return (s->succ + 2.f * prior) / (s->trials + 2.f);
}
