/* Sampler chain: parameter validation, penalties, greedy, top-k,
 * temperature, top-p, min-p, the draw, and logprobs.  See sample.h for the
 * chain's order and contract.
 *
 * Invariants:
 *   - after rl_sampler_new nothing allocates: `cand` and `work` (n_vocab
 *     entries each) are the per-token scratch, the penalty tables are
 *     sized penalty_last_n;
 *   - candidates are ordered by the total order `before` (value desc, id
 *     asc), so every selection and sort has one answer;
 *   - pen_ids/pen_cnt always describe the distinct tokens of the history
 *     window when pen_dirty is false.
 *
 * Top-p uses a probability normaliser Z taken over the top-k set, and
 * min-p runs before it as a filter: min-p keeps p >= min_p * p_max, a
 * prefix of the sorted order that does not depend on renormalisation, and
 * top-p keeps the shortest sorted prefix with mass >= top_p under Z.  The
 * intersection of two prefixes is the shorter one, so filtering first
 * gives exactly "top-p then min-p" on fewer tokens.  The top-p prefix is
 * found by a weighted quickselect, so the kept set is never sorted; the
 * draw walks it in its (deterministic) partition order. */
#include "sample/sample.h"

#include <float.h>
#include <math.h>
#include <string.h>

typedef struct rl__cand {
    float v; /* logit, later unnormalised probability */
    int32_t id;
} rl__cand;

struct rl_sampler {
    rl_sample_params p; /* p.logit_bias points at `bias` */
    int32_t n_vocab;
    rl_rng rng;
    rl_logit_bias *bias; /* [p.n_logit_bias], owned */
    int32_t *hist;       /* ring [p.penalty_last_n] */
    int32_t hist_n;      /* filled entries, <= penalty_last_n */
    int32_t hist_head;   /* next write position */
    int32_t *pen_ids;    /* [penalty_last_n] distinct tokens in the window, ascending */
    int32_t *pen_cnt;    /* [penalty_last_n] their counts */
    int32_t n_pen;
    bool pen_dirty;
    bool pen_active; /* some penalty differs from neutral */
    rl__cand *cand;  /* [n_vocab] scratch: candidates */
    float *work;     /* [n_vocab] scratch: adjusted logits for rl_sampler_dist */
};

/* ---------------------------------------------------------------- params */

rl_sample_params rl_sample_params_default(void) {
    rl_sample_params p;
    memset(&p, 0, sizeof p);
    p.temperature = 1.0f;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.repeat_penalty = 1.0f;
    p.presence_penalty = 0.0f;
    p.frequency_penalty = 0.0f;
    p.penalty_last_n = 64;
    p.seed = 0;
    p.n_logprobs = 0;
    p.logit_bias = NULL;
    p.n_logit_bias = 0;
    return p;
}

rl_status rl_sample_params_validate(const rl_sample_params *p, int32_t n_vocab, rl_err *err) {
    if (!p) return rl_err_set(err, RL_ERR_INVALID, "sample params: NULL");
    if (n_vocab <= 0)
        return rl_err_set(err, RL_ERR_INVALID, "n_vocab: must be > 0, got %d", (int)n_vocab);
    if (!isfinite(p->temperature) || p->temperature < 0)
        return rl_err_set(err, RL_ERR_INVALID, "temperature: must be a finite number >= 0, got %g",
                          (double)p->temperature);
    if (p->top_k < 0)
        return rl_err_set(err, RL_ERR_INVALID, "top_k: must be >= 0 (0 = off), got %d",
                          (int)p->top_k);
    if (!(p->top_p > 0 && p->top_p <= 1))
        return rl_err_set(err, RL_ERR_INVALID, "top_p: must be in (0, 1], got %g",
                          (double)p->top_p);
    if (!(p->min_p >= 0 && p->min_p <= 1))
        return rl_err_set(err, RL_ERR_INVALID, "min_p: must be in [0, 1], got %g",
                          (double)p->min_p);
    if (!isfinite(p->repeat_penalty) || p->repeat_penalty <= 0)
        return rl_err_set(err, RL_ERR_INVALID,
                          "repeat_penalty: must be a finite number > 0 (1 = off), got %g",
                          (double)p->repeat_penalty);
    if (!isfinite(p->presence_penalty))
        return rl_err_set(err, RL_ERR_INVALID, "presence_penalty: must be finite, got %g",
                          (double)p->presence_penalty);
    if (!isfinite(p->frequency_penalty))
        return rl_err_set(err, RL_ERR_INVALID, "frequency_penalty: must be finite, got %g",
                          (double)p->frequency_penalty);
    if (p->penalty_last_n < 0 || p->penalty_last_n > RL_SAMPLE_MAX_PENALTY_LAST_N)
        return rl_err_set(err, RL_ERR_INVALID, "penalty_last_n: must be in [0, %d], got %d",
                          RL_SAMPLE_MAX_PENALTY_LAST_N, (int)p->penalty_last_n);
    if (p->n_logprobs < 0 || p->n_logprobs > RL_SAMPLE_MAX_LOGPROBS)
        return rl_err_set(err, RL_ERR_INVALID, "n_logprobs: must be in [0, %d], got %d",
                          RL_SAMPLE_MAX_LOGPROBS, (int)p->n_logprobs);
    if (p->n_logit_bias < 0 || p->n_logit_bias > n_vocab)
        return rl_err_set(err, RL_ERR_INVALID, "logit_bias: count must be in [0, %d], got %d",
                          (int)n_vocab, (int)p->n_logit_bias);
    if (p->n_logit_bias > 0 && !p->logit_bias)
        return rl_err_set(err, RL_ERR_INVALID, "logit_bias: %d entries but no array",
                          (int)p->n_logit_bias);
    for (int32_t i = 0; i < p->n_logit_bias; i++) {
        const rl_logit_bias *b = &p->logit_bias[i];
        if (b->id < 0 || b->id >= n_vocab)
            return rl_err_set(err, RL_ERR_RANGE,
                              "logit_bias[%d].id: token id %d out of range [0, %d)", (int)i,
                              (int)b->id, (int)n_vocab);
        /* -inf is the documented way to ban a token; +inf or NaN would
         * poison the softmax */
        if (isnan(b->bias) || b->bias == INFINITY)
            return rl_err_set(err, RL_ERR_INVALID,
                              "logit_bias[%d].bias: must be finite or -inf, got %g", (int)i,
                              (double)b->bias);
    }
    return RL_OK;
}

/* --------------------------------------------------------- sampler state */

static void sampler_init_state(rl_sampler *s) {
    rl_rng_seed(&s->rng, s->p.seed);
    s->hist_n = 0;
    s->hist_head = 0;
    s->n_pen = 0;
    s->pen_dirty = false;
}

rl_sampler *rl_sampler_new(const rl_sample_params *p, int32_t n_vocab, rl_err *err) {
    if (rl_sample_params_validate(p, n_vocab, err) != RL_OK) return NULL;
    rl_sampler *s = rl_calloc(1, sizeof *s);
    if (!s) goto nomem;
    s->p = *p;
    s->n_vocab = n_vocab;
    s->cand = rl_calloc((size_t)n_vocab, sizeof *s->cand);
    s->work = rl_calloc((size_t)n_vocab, sizeof *s->work);
    if (!s->cand || !s->work) goto nomem;
    if (p->n_logit_bias > 0) {
        s->bias = rl_calloc((size_t)p->n_logit_bias, sizeof *s->bias);
        if (!s->bias) goto nomem;
        memcpy(s->bias, p->logit_bias, (size_t)p->n_logit_bias * sizeof *s->bias);
    }
    s->p.logit_bias = s->bias;
    int32_t L = p->penalty_last_n;
    if (L > 0) {
        s->hist = rl_calloc((size_t)L, sizeof *s->hist);
        s->pen_ids = rl_calloc((size_t)L, sizeof *s->pen_ids);
        s->pen_cnt = rl_calloc((size_t)L, sizeof *s->pen_cnt);
        if (!s->hist || !s->pen_ids || !s->pen_cnt) goto nomem;
    }
    s->pen_active = L > 0 && (p->repeat_penalty != 1.0f || p->presence_penalty != 0.0f ||
                              p->frequency_penalty != 0.0f);
    sampler_init_state(s);
    rl_err_clear(err);
    return s;
nomem:
    rl_sampler_free(s);
    rl_err_set(err, RL_ERR_NOMEM, "sampler: out of memory (n_vocab %d)", (int)n_vocab);
    return NULL;
}

void rl_sampler_free(rl_sampler *s) {
    if (!s) return;
    rl_free(s->cand);
    rl_free(s->work);
    rl_free(s->bias);
    rl_free(s->hist);
    rl_free(s->pen_ids);
    rl_free(s->pen_cnt);
    rl_free(s);
}

rl_sampler *rl_sampler_clone(const rl_sampler *s, rl_err *err) {
    RL_ASSERT(s);
    rl_sampler *c = rl_sampler_new(&s->p, s->n_vocab, err);
    if (!c) return NULL;
    c->rng = s->rng;
    if (s->p.penalty_last_n > 0)
        memcpy(c->hist, s->hist, (size_t)s->p.penalty_last_n * sizeof *c->hist);
    c->hist_n = s->hist_n;
    c->hist_head = s->hist_head;
    c->pen_dirty = true;
    return c;
}

void rl_sampler_reset(rl_sampler *s) {
    RL_ASSERT(s);
    sampler_init_state(s);
}

rl_status rl_sampler_accept(rl_sampler *s, int32_t token) {
    RL_ASSERT(s);
    if (token < 0 || token >= s->n_vocab) return RL_ERR_RANGE;
    int32_t L = s->p.penalty_last_n;
    if (L == 0) return RL_OK;
    s->hist[s->hist_head] = token;
    s->hist_head = s->hist_head + 1 == L ? 0 : s->hist_head + 1;
    if (s->hist_n < L) s->hist_n++;
    s->pen_dirty = true;
    return RL_OK;
}

rl_rng rl_sampler_get_rng(const rl_sampler *s) {
    return s->rng;
}
void rl_sampler_set_rng(rl_sampler *s, const rl_rng *rng) {
    s->rng = *rng;
}
const rl_sample_params *rl_sampler_params(const rl_sampler *s) {
    return &s->p;
}
int32_t rl_sampler_n_vocab(const rl_sampler *s) {
    return s->n_vocab;
}

/* ------------------------------------------------------------- penalties */

/* In-place heapsort of ints (ascending); used on the history window copy,
 * whose length is bounded by penalty_last_n. */
static void sift_i32(int32_t *a, int32_t root, int32_t n) {
    for (;;) {
        int32_t c = 2 * root + 1;
        if (c >= n) return;
        if (c + 1 < n && a[c + 1] > a[c]) c++;
        if (a[root] >= a[c]) return;
        int32_t t = a[root];
        a[root] = a[c];
        a[c] = t;
        root = c;
    }
}

static void sort_i32(int32_t *a, int32_t n) {
    for (int32_t i = n / 2 - 1; i >= 0; i--) sift_i32(a, i, n);
    for (int32_t end = n - 1; end > 0; end--) {
        int32_t t = a[0];
        a[0] = a[end];
        a[end] = t;
        sift_i32(a, 0, end);
    }
}

/* Rebuilds (pen_ids, pen_cnt) from the history ring: O(L log L), only when
 * a token was accepted since the last call. */
static void refresh_penalties(rl_sampler *s) {
    if (!s->pen_dirty) return;
    s->pen_dirty = false;
    int32_t n = s->hist_n;
    memcpy(s->pen_ids, s->hist, (size_t)n * sizeof *s->pen_ids);
    /* when the ring is not full its entries are [0, hist_n); when full all
     * L entries are live: either way the first hist_n slots are the window */
    sort_i32(s->pen_ids, n);
    int32_t m = 0;
    for (int32_t i = 0; i < n;) {
        int32_t j = i;
        while (j < n && s->pen_ids[j] == s->pen_ids[i]) j++;
        s->pen_ids[m] = s->pen_ids[i];
        s->pen_cnt[m] = j - i;
        m++;
        i = j;
    }
    s->n_pen = m;
}

static inline float penalize(const rl_sample_params *p, float x, int32_t cnt) {
    if (p->repeat_penalty != 1.0f) x = x > 0 ? x / p->repeat_penalty : x * p->repeat_penalty;
    x -= p->presence_penalty + p->frequency_penalty * (float)cnt;
    return x;
}

/* Stages 1-2 touch only the biased tokens and the distinct tokens of the
 * window: O(n_logit_bias + L). */
void rl_sampler_apply_penalties(rl_sampler *s, float *logits) {
    RL_ASSERT(s && logits);
    for (int32_t i = 0; i < s->p.n_logit_bias; i++) logits[s->bias[i].id] += s->bias[i].bias;
    if (!s->pen_active) return;
    refresh_penalties(s);
    for (int32_t i = 0; i < s->n_pen; i++) {
        int32_t t = s->pen_ids[i];
        logits[t] = penalize(&s->p, logits[t], s->pen_cnt[i]);
    }
}

/* ---------------------------------------------------- selection, sorting */

/* The total order: a comes before b. */
static inline bool before(rl__cand a, rl__cand b) {
    return a.v > b.v || (a.v == b.v && a.id < b.id);
}

static inline void cswap(rl__cand *a, rl__cand *b) {
    rl__cand t = *a;
    *a = *b;
    *b = t;
}

static void sift_cand(rl__cand *a, int32_t root, int32_t n) {
    for (;;) {
        int32_t c = 2 * root + 1;
        if (c >= n) return;
        if (c + 1 < n && before(a[c], a[c + 1])) c++; /* the later-ordered child */
        if (!before(a[root], a[c])) return;
        cswap(&a[root], &a[c]);
        root = c;
    }
}

/* Heapsort into `before` order: the O(n log n) fallback for degenerate
 * quicksort partitions. */
static void heapsort_cand(rl__cand *a, int32_t n) {
    for (int32_t i = n / 2 - 1; i >= 0; i--) sift_cand(a, i, n);
    for (int32_t end = n - 1; end > 0; end--) {
        cswap(&a[0], &a[end]);
        sift_cand(a, 0, end);
    }
}

/* Lomuto partition of [lo, hi) (hi - lo >= 3) around a median-of-three
 * pivot; returns the pivot's final index p: [lo, p) before it, (p, hi)
 * after.  Keys are distinct (ids), so no equal-key degeneration. */
static int32_t partition_cand(rl__cand *c, int32_t lo, int32_t hi) {
    int32_t mid = lo + (hi - lo) / 2, last = hi - 1;
    if (before(c[mid], c[lo])) cswap(&c[mid], &c[lo]);
    if (before(c[last], c[lo])) cswap(&c[last], &c[lo]);
    if (before(c[last], c[mid])) cswap(&c[last], &c[mid]);
    /* now c[lo] <= c[mid] <= c[last] in `before` order: median to last */
    cswap(&c[mid], &c[last]);
    rl__cand pivot = c[last];
    int32_t i = lo;
    for (int32_t j = lo; j < last; j++)
        if (before(c[j], pivot)) cswap(&c[i++], &c[j]);
    cswap(&c[i], &c[last]);
    return i;
}

static int32_t depth_limit(int32_t n) {
    int32_t d = 0;
    while (n > 1) {
        n >>= 1;
        d++;
    }
    return 2 * d + 4;
}

/* Rearranges [lo, hi) so that [lo, nth) holds the nth-lo first elements in
 * `before` order (unordered among themselves).  Average O(hi - lo);
 * degenerate inputs fall back to heapsort. */
static void select_cand(rl__cand *c, int32_t lo, int32_t hi, int32_t nth) {
    int32_t depth = depth_limit(hi - lo);
    while (hi - lo > 2) {
        if (nth <= lo || nth >= hi) return;
        if (depth-- == 0) {
            heapsort_cand(c + lo, hi - lo);
            return;
        }
        int32_t p = partition_cand(c, lo, hi);
        if (p == nth) return;
        if (p < nth)
            lo = p + 1;
        else
            hi = p;
    }
    if (hi - lo == 2 && before(c[lo + 1], c[lo])) cswap(&c[lo], &c[lo + 1]);
}

/* Sorts [lo, hi) into `before` order: introsort (quicksort, insertion
 * sort below 16, heapsort when too deep). */
static void sort_cand(rl__cand *c, int32_t lo, int32_t hi) {
    int32_t depth = depth_limit(hi - lo);
    while (hi - lo > 16) {
        if (depth-- == 0) {
            heapsort_cand(c + lo, hi - lo);
            return;
        }
        int32_t p = partition_cand(c, lo, hi);
        /* recurse on the smaller side, loop on the larger: O(log n) stack */
        if (p - lo < hi - p - 1) {
            sort_cand(c, lo, p);
            lo = p + 1;
        } else {
            sort_cand(c, p + 1, hi);
            hi = p;
        }
    }
    for (int32_t i = lo + 1; i < hi; i++) {
        rl__cand x = c[i];
        int32_t j = i;
        while (j > lo && before(x, c[j - 1])) {
            c[j] = c[j - 1];
            j--;
        }
        c[j] = x;
    }
}

/* ---------------------------------------------------------------- chain */

#define RL__HEAP_TOP_K_MAX 512 /* above this, compaction + quickselect is cheaper */

static inline float clamp_inf(float v) {
    return v > FLT_MAX ? FLT_MAX : v;
}

/* Greedy: first index of the largest adjusted logit, -1 if none is > -inf
 * (NaN never compares greater).  O(n), no sort. */
static int32_t argmax_f32(const float *x, int32_t n) {
    int32_t best = -1;
    float bv = -INFINITY;
    for (int32_t i = 0; i < n; i++)
        if (x[i] > bv) {
            bv = x[i];
            best = i;
        }
    return best;
}

/* Fills res->top_* from the adjusted logits x and returns their
 * log-sum-exp (-inf when no token is finite).  Two passes over x; the
 * top-n list is an insertion-sorted array of at most 20. */
static double logprobs_f32(const rl_sampler *s, const float *x, rl_sample_result *res) {
    int32_t n = s->n_vocab, k = s->p.n_logprobs, nt = 0;
    rl__cand top[RL_SAMPLE_MAX_LOGPROBS];
    float m = -INFINITY;
    for (int32_t i = 0; i < n; i++) {
        if (!(x[i] > -INFINITY)) continue; /* -inf and NaN */
        rl__cand c = {clamp_inf(x[i]), i};
        if (c.v > m) m = c.v;
        if (k == 0 || (nt == k && !before(c, top[k - 1]))) continue;
        int32_t j = nt < k ? nt++ : k - 1;
        while (j > 0 && before(c, top[j - 1])) {
            top[j] = top[j - 1];
            j--;
        }
        top[j] = c;
    }
    res->n_top = nt;
    if (m == -INFINITY) return -INFINITY;
    double sum = 0;
    for (int32_t i = 0; i < n; i++)
        if (x[i] > -INFINITY) sum += expf(clamp_inf(x[i]) - m);
    double lse = (double)m + log(sum);
    for (int32_t j = 0; j < nt; j++) {
        res->top_id[j] = top[j].id;
        res->top_logprob[j] = (float)((double)top[j].v - lse);
    }
    return lse;
}

/* Top-k for small k straight from x: a heap of the k best seen so far,
 * rooted at the worst of them, in cand[0, k).  One read pass, O(n) when
 * most tokens lose to the root.  Returns the count (< k when fewer than k
 * tokens are finite). */
static int32_t heap_top_k(rl__cand *c, const float *x, int32_t n, int32_t k) {
    int32_t m = 0;
    for (int32_t i = 0; i < n; i++) {
        if (!(x[i] > -INFINITY)) continue;
        rl__cand e = {clamp_inf(x[i]), i};
        int32_t j;
        if (m < k) {
            /* sift up: the root holds the element ordered last */
            j = m++;
            while (j > 0 && before(c[(j - 1) / 2], e)) {
                c[j] = c[(j - 1) / 2];
                j = (j - 1) / 2;
            }
            c[j] = e;
        } else if (before(e, c[0])) {
            j = 0;
            for (;;) {
                int32_t ch = 2 * j + 1;
                if (ch >= m) break;
                if (ch + 1 < m && before(c[ch], c[ch + 1])) ch++;
                if (!before(e, c[ch])) break;
                c[j] = c[ch];
                j = ch;
            }
            c[j] = e;
        }
    }
    return m;
}

/* Top-p cut without a sort: a weighted quickselect for the shortest
 * prefix, in `before` order, of cand[0, m) whose mass reaches target.
 * Leaves that prefix (unordered) in cand[0, cut) and returns cut.
 * Average O(m); degenerate partitions fall back to sorting the rest. */
static int32_t top_p_cut(rl__cand *c, int32_t m, double target) {
    int32_t lo = 0, hi = m, depth = depth_limit(m);
    double cum = 0; /* mass of [0, lo), all kept, always < target */
    while (hi - lo > 16 && depth-- > 0) {
        int32_t p = partition_cand(c, lo, hi);
        double left = 0;
        for (int32_t i = lo; i < p; i++) left += c[i].v;
        if (cum + left >= target) {
            hi = p; /* the cut is inside the left part */
            continue;
        }
        cum += left + c[p].v;
        if (cum >= target) return p + 1;
        lo = p + 1;
    }
    sort_cand(c, lo, hi);
    for (int32_t i = lo; i < hi; i++) {
        cum += c[i].v;
        if (cum >= target) return i + 1;
    }
    return hi; /* rounding: keep the whole part known to reach the target */
}

/* Stochastic chain (temperature > 0) on the adjusted logits x.  Leaves
 * cand[0, m) = the kept set with unnormalised probabilities in .v,
 * returns m (0 if every token is banned); *total = their sum. */
static int32_t truncate_f32(rl_sampler *s, const float *x, double *total) {
    rl__cand *c = s->cand;
    const rl_sample_params *p = &s->p;
    const int32_t n = s->n_vocab;
    int32_t m = 0;
    *total = 0;
    if (p->top_k > 0 && p->top_k < n && p->top_k <= RL__HEAP_TOP_K_MAX) {
        m = heap_top_k(c, x, n, p->top_k);
    } else {
        for (int32_t i = 0; i < n; i++)
            if (x[i] > -INFINITY) {
                c[m].v = clamp_inf(x[i]);
                c[m].id = i;
                m++;
            }
        if (p->top_k > 0 && p->top_k < m) {
            select_cand(c, 0, m, p->top_k); /* O(m) partial selection */
            m = p->top_k;
        }
    }
    if (m == 0) return 0;
    /* temperature + softmax, unnormalised so the max maps to exactly 1 */
    float vmax = -INFINITY;
    for (int32_t i = 0; i < m; i++)
        if (c[i].v > vmax) vmax = c[i].v;
    double z = 0;
    const float t = p->temperature;
    for (int32_t i = 0; i < m; i++) {
        /* subtract first: x - max <= 0 cannot overflow for a tiny t */
        c[i].v = expf((c[i].v - vmax) / t);
        z += c[i].v;
    }
    /* min-p as a filter before top-p: equal to "top-p then min-p" (file
     * header); p_i / p_max is just v_i here */
    if (p->min_p > 0) {
        int32_t k = 0;
        for (int32_t i = 0; i < m; i++)
            if (c[i].v >= p->min_p) c[k++] = c[i];
        m = k;
    }
    if (p->top_p < 1.0f) m = top_p_cut(c, m, (double)p->top_p * z);
    double sum = 0;
    for (int32_t i = 0; i < m; i++) sum += c[i].v;
    *total = sum;
    return m;
}

/* Walks cand[0, m) until the running mass passes u * total. */
static int32_t draw_cand(rl_sampler *s, int32_t m, double total) {
    const rl__cand *c = s->cand;
    double u = rl_rng_f64(&s->rng) * total, acc = 0;
    int32_t last = c[0].id;
    for (int32_t i = 0; i < m; i++) {
        if (c[i].v <= 0) continue;
        acc += c[i].v;
        last = c[i].id;
        if (u < acc) return c[i].id;
    }
    return last; /* rounding: u landed on the very top of the mass */
}

int32_t rl_sampler_sample(rl_sampler *s, float *logits, rl_sample_result *res) {
    RL_ASSERT(s && logits);
    rl_sampler_apply_penalties(s, logits);
    double lse = 0;
    const bool lp = res && (!s->p.no_logprob || s->p.n_logprobs > 0);
    if (lp)
        lse = logprobs_f32(s, logits, res);
    else if (res)
        res->n_top = 0;
    int32_t id;
    if (s->p.temperature == 0) {
        id = argmax_f32(logits, s->n_vocab);
    } else {
        double total;
        int32_t m = truncate_f32(s, logits, &total);
        id = m > 0 ? draw_cand(s, m, total) : -1;
    }
    if (res) {
        res->id = id;
        res->logprob = !lp      ? NAN
                       : id < 0 ? -INFINITY
                                : (float)((double)clamp_inf(logits[id]) - lse);
    }
    return id;
}

void rl_sampler_dist(rl_sampler *s, const float *logits, float *probs_out) {
    RL_ASSERT(s && logits && probs_out);
    memcpy(s->work, logits, (size_t)s->n_vocab * sizeof *s->work);
    rl_sampler_apply_penalties(s, s->work);
    memset(probs_out, 0, (size_t)s->n_vocab * sizeof *probs_out);
    if (s->p.temperature == 0) {
        int32_t id = argmax_f32(s->work, s->n_vocab);
        if (id >= 0) probs_out[id] = 1.0f;
        return;
    }
    double total;
    int32_t m = truncate_f32(s, s->work, &total);
    for (int32_t i = 0; i < m; i++)
        probs_out[s->cand[i].id] = (float)((double)s->cand[i].v / total);
}

int32_t rl_sampler_sample_from(rl_sampler *s, const float *probs) {
    RL_ASSERT(s && probs);
    double total = 0;
    for (int32_t i = 0; i < s->n_vocab; i++)
        if (probs[i] > 0) total += probs[i];
    if (!(total > 0) || !isfinite(total)) return -1;
    double u = rl_rng_f64(&s->rng) * total, acc = 0;
    int32_t last = -1;
    for (int32_t i = 0; i < s->n_vocab; i++) {
        if (!(probs[i] > 0)) continue;
        acc += probs[i];
        last = i;
        if (u < acc) return i;
    }
    return last;
}
