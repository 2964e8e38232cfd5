/* Draft planning (see spec.h, "draft planning"): which of a step's
 * decoding sequences draft, how many tokens, from which drafter.
 *
 * rl_spec_planner_run works in passes over the candidates, in the order
 * they were offered (the order decides who gets the last draft rows):
 *   1. filter: who may draft at all, and its cap (k_max);
 *   2. the drafters' shared length k from the cost model, or a probe;
 *   3. grammar-forced tokens (jump-forward) for constrained sequences;
 *   4. n-gram proposals; 5. draft-model proposals, batched in one call;
 *   6. the max_rows cap, first come first served.
 * A candidate that may not draft, or whose drafter proposes nothing, has
 * its acceptance estimate decayed toward the prior so it tries again later.
 *
 * Buffers are sized once at creation from one arena ([max_seqs] each,
 * drafts [max_seqs][draft_max + 1]); run allocates nothing. */
#include <string.h>

#include "base/arena.h"
#include "spec/spec.h"

/* Acceptance prior of a sequence that has not drafted yet. */
#define SPEC_PRIOR 0.6f
/* Steps without drafts after which one draft length is probed again. */
#define SPEC_IDLE_PROBE 32

struct rl_spec_planner {
    rl_spec_planner_config cfg;
    rl_arena arena;
    rl_spec_cand *cands; /* [max_seqs] this step's candidates */
    int32_t n_cands;
    int32_t *sel;  /* [max_seqs] indices of the candidates that may draft */
    int32_t *kbuf; /* [max_seqs] per selected: cap, then proposed count */
    bool *forced;  /* [max_seqs] per selected: its drafts are grammar-forced */
    int32_t *out;  /* [max_seqs][draft_max + 1] per selected: proposals */
    float *acc;    /* [max_seqs] acceptance estimates of the drafters */
    /* the draft model's batch, compacted */
    rl_spec_draft_seq **dseqs;
    const int32_t **dtoks;
    int32_t *dntoks, *dk;
    int32_t **dout;
    rl_spec_cost cost; /* online forward timings */
    int32_t idle;      /* steps since the policy last chose to draft */
    int32_t probe_k;   /* draft length of the last periodic probe */
    uint64_t n_forced;
};

static void carve(rl_spec_planner *p, rl_arena *a) {
    size_t ms = (size_t)p->cfg.max_seqs, dm = (size_t)p->cfg.draft_max + 1;
    p->cands = rl_arena_alloc(a, ms, sizeof *p->cands);
    p->sel = rl_arena_alloc(a, ms, sizeof *p->sel);
    p->kbuf = rl_arena_alloc(a, ms, sizeof *p->kbuf);
    p->forced = rl_arena_alloc(a, ms, sizeof *p->forced);
    p->out = rl_arena_alloc(a, ms * dm, sizeof *p->out);
    p->acc = rl_arena_alloc(a, ms, sizeof *p->acc);
    p->dseqs = rl_arena_alloc(a, ms, sizeof *p->dseqs);
    p->dtoks = rl_arena_alloc(a, ms, sizeof *p->dtoks);
    p->dntoks = rl_arena_alloc(a, ms, sizeof *p->dntoks);
    p->dk = rl_arena_alloc(a, ms, sizeof *p->dk);
    p->dout = rl_arena_alloc(a, ms, sizeof *p->dout);
}

rl_status rl_spec_planner_new(const rl_spec_planner_config *cfg, rl_spec_planner **out,
                              rl_err *err) {
    *out = NULL;
    if (cfg->max_seqs < 1 || cfg->max_seqs > 4096 || cfg->draft_max < 0 || cfg->draft_max > 32 ||
        cfg->spec_max_batch < 0 || cfg->max_rows < 0)
        return rl_err_set(err, RL_ERR_INVALID,
                          "spec planner: max_seqs %d, draft_max %d, spec_max_batch %d or max_rows "
                          "%d out of range",
                          cfg->max_seqs, cfg->draft_max, cfg->spec_max_batch, cfg->max_rows);
    rl_spec_planner *p = rl_calloc(1, sizeof *p);
    if (!p) return rl_err_set(err, RL_ERR_NOMEM, "spec planner: out of memory");
    p->cfg = *cfg;
    rl_arena_init(&p->arena);
    carve(p, &p->arena);
    rl_status s = rl_arena_commit(&p->arena, err);
    if (s) {
        rl_free(p);
        return rl_err_prefix(err, "spec planner");
    }
    carve(p, &p->arena);
    /* priors until steps are timed: a verification of n positions costs
     * 1 + 0.3 (n - 1) single steps, a draft step 0.4 of a target step
     * (measured on Qwen2.5 1.5B / 0.5B, docs/PERFORMANCE.md) */
    rl_spec_cost_init(&p->cost, 0.3f, 0.4f);
    *out = p;
    return RL_OK;
}

void rl_spec_planner_free(rl_spec_planner *p) {
    if (!p) return;
    rl_arena_free(&p->arena);
    rl_free(p);
}

void rl_spec_planner_begin(rl_spec_planner *p) {
    p->n_cands = 0;
}

rl_spec_cand *rl_spec_planner_add(rl_spec_planner *p) {
    if (p->n_cands >= p->cfg.max_seqs) return NULL;
    rl_spec_cand *c = &p->cands[p->n_cands++];
    memset(c, 0, sizeof *c);
    return c;
}

int32_t rl_spec_planner_n_cands(const rl_spec_planner *p) {
    return p->n_cands;
}

rl_spec_cand *rl_spec_planner_cand(rl_spec_planner *p, int32_t i) {
    RL_ASSERT(i >= 0 && i < p->n_cands);
    return &p->cands[i];
}

void rl_spec_planner_observe_fwd(rl_spec_planner *p, int32_t n_tok, double seconds) {
    rl_spec_cost_add_fwd(&p->cost, n_tok, seconds);
}

uint64_t rl_spec_planner_n_forced(const rl_spec_planner *p) {
    return p->n_forced;
}
const rl_spec_cost *rl_spec_planner_cost(const rl_spec_planner *p) {
    return &p->cost;
}

static int32_t *proposal(rl_spec_planner *p, int32_t i) {
    return p->out + (size_t)i * (size_t)(p->cfg.draft_max + 1);
}

static void acc_decay(rl_spec_cand *c) {
    if (c->acc) rl_spec_acc_decay(c->acc);
}

/* The drafters' shared draft length for a step with n_dec decoding
 * sequences, n_pol of them drafting with acceptance p->acc[0 .. n_pol). */
static int32_t choose_k(rl_spec_planner *p, int32_t n_dec, int32_t n_pol, bool uses_draft) {
    const int32_t draft_max = p->cfg.draft_max;
    if (p->cfg.draft_fixed || n_pol == 0) return draft_max;
    int32_t k_pol = rl_spec_choose_k(&p->cost, n_dec, p->acc, n_pol, uses_draft, draft_max);
    /* probe: time every draft length once for this batch size (step cost
     * is not linear in positions: the matmuls work in tiles of 4 tokens, so
     * 4 positions can cost less than 3), the shortest unmeasured first,
     * before trusting extrapolated costs; and every SPEC_IDLE_PROBE steps
     * without drafts probe one length in turn, so stale timings and
     * acceptance estimates get renewed.  With a draft model, only for a
     * single decoding sequence: a probe makes the draft catch up on every
     * token it has not seen (whole prompts, at first) for every sequence,
     * which costs more than the probe can return once several sequences
     * decode (measured, 0.5B draft for the 1.5B target at batch 4:
     * 0.52-0.68x of no speculation with probes only; docs/PERFORMANCE.md).
     * The cost model can still choose k > 0 there from its estimates. */
    if (!(uses_draft && n_dec > 1)) {
        int32_t probe = 0; /* whatever the choice: an unmeasured length first */
        for (int32_t k = 1; k <= draft_max && !probe; k++)
            if (n_dec + k * n_pol <= RL_SPEC_COST_N && !(p->cost.fwd[n_dec + k * n_pol] > 0))
                probe = k;
        if (probe)
            k_pol = probe;
        else if (!k_pol && ++p->idle >= SPEC_IDLE_PROBE)
            k_pol = p->probe_k = p->probe_k % draft_max + 1;
    }
    if (k_pol > 0) p->idle = 0;
    return k_pol;
}

/* The draft model's proposals for the selected candidates that use it
 * (batched in one call), its step time into the cost model. */
static void propose_draft(rl_spec_planner *p, int32_t n_sel, int32_t k_pol, rl_threadpool *tp) {
    int32_t n = 0;
    for (int32_t i = 0; i < n_sel; i++) {
        rl_spec_cand *c = &p->cands[p->sel[i]];
        if (p->forced[i] || c->source != RL_SPEC_SRC_DRAFT) continue;
        p->dseqs[n] = c->dseq;
        p->dtoks[n] = c->tokens;
        p->dntoks[n] = c->n_tokens;
        p->dk[n] = p->kbuf[i] < k_pol ? p->kbuf[i] : k_pol;
        p->dout[n] = proposal(p, i);
        n++;
    }
    if (n == 0) return;
    RL_ASSERT(p->cfg.draft);
    rl_err err = {0};
    int64_t n0, n1;
    double t0 = rl_spec_draft_step_s(p->cfg.draft, &n0);
    if (rl_spec_draft_propose(p->cfg.draft, p->dseqs, p->dtoks, p->dntoks, p->dk, p->dout, n, tp,
                              &err) != RL_OK) {
        rl_log(RL_LOG_WARN, "draft model failed, speculation skipped: %s", err.msg);
        for (int32_t j = 0; j < n; j++) p->dk[j] = 0;
    }
    double t1 = rl_spec_draft_step_s(p->cfg.draft, &n1);
    if (n1 > n0) rl_spec_cost_add_draft(&p->cost, n, (t1 - t0) / (double)(n1 - n0));
    n = 0;
    for (int32_t i = 0; i < n_sel; i++)
        if (!p->forced[i] && p->cands[p->sel[i]].source == RL_SPEC_SRC_DRAFT)
            p->kbuf[i] = p->dk[n++];
}

int32_t rl_spec_planner_run(rl_spec_planner *p, rl_threadpool *tp) {
    const rl_spec_planner_config *cfg = &p->cfg;
    const int32_t n_dec = p->n_cands;
    bool spec_ok = n_dec > 0 && n_dec <= cfg->spec_max_batch && cfg->draft_max > 0;
    int32_t n_sel = 0, n_pol = 0;
    bool uses_draft = false;
    /* 1. who may draft, and how many tokens at most */
    for (int32_t i = 0; i < n_dec; i++) {
        rl_spec_cand *c = &p->cands[i];
        c->k = 0;
        c->draft = NULL;
        c->from_drafter = false;
        if (!c->gm && c->source == RL_SPEC_SRC_NONE) continue;
        int64_t slack = c->gm ? rl_gmatch_slack(c->gm, c->left) : INT64_MAX;
        int32_t k = cfg->draft_max;
        if (k > c->left - 1) k = c->left - 1;
        if (!spec_ok || c->no_spec || k <= 0 ||
            slack <= 2 * RL_GRAMMAR_CLOSE_SLACK /* near the end: one token per step */) {
            acc_decay(c); /* no drafts: drift back toward the prior */
            continue;
        }
        if (c->source != RL_SPEC_SRC_NONE) {
            p->acc[n_pol++] = c->acc ? rl_spec_acc_rate(c->acc, SPEC_PRIOR) : SPEC_PRIOR;
            uses_draft |= c->source == RL_SPEC_SRC_DRAFT;
        }
        p->sel[n_sel] = i;
        p->kbuf[n_sel] = k;
        p->forced[n_sel] = false;
        n_sel++;
    }
    /* 2. one draft length for the step's drafters (their drafts share the
     * batch, so the step's cost depends on all of them) */
    int32_t k_pol = n_sel > 0 ? choose_k(p, n_dec, n_pol, uses_draft) : cfg->draft_max;
    /* 3. grammar jump-forward: the tokens the grammar forces */
    for (int32_t i = 0; i < n_sel; i++) {
        rl_spec_cand *c = &p->cands[p->sel[i]];
        if (!c->gm) continue;
        int f = rl_gmatch_forced(c->gm, proposal(p, i), cfg->draft_max);
        if (f > p->kbuf[i]) f = p->kbuf[i];
        if (f < 0) f = 0;
        if (f == 0 && c->source != RL_SPEC_SRC_NONE) continue; /* the drafter's turn */
        p->kbuf[i] = f;
        p->n_forced += (uint64_t)f;
        p->forced[i] = true;
    }
    /* 4. n-gram proposals */
    for (int32_t i = 0; i < n_sel; i++) {
        rl_spec_cand *c = &p->cands[p->sel[i]];
        if (p->forced[i] || c->source != RL_SPEC_SRC_NGRAM) continue;
        int32_t k = p->kbuf[i] < k_pol ? p->kbuf[i] : k_pol;
        p->kbuf[i] = rl_spec_ngram(c->tokens, c->n_tokens, k, cfg->ngram_min, cfg->ngram_max,
                                   proposal(p, i));
    }
    /* 5. draft-model proposals, batched */
    propose_draft(p, n_sel, k_pol, tp);
    /* 6. within the rows there are for drafts */
    int32_t rows_left = cfg->max_rows;
    for (int32_t i = 0; i < n_sel; i++) {
        rl_spec_cand *c = &p->cands[p->sel[i]];
        bool from_drafter = !p->forced[i] && c->source != RL_SPEC_SRC_NONE;
        int32_t k = p->kbuf[i];
        if (k > rows_left) k = rows_left;
        rows_left -= k > 0 ? k : 0;
        if (from_drafter && k <= 0) acc_decay(c);
        if (k <= 0) continue;
        c->k = k;
        c->draft = proposal(p, i);
        c->from_drafter = from_drafter;
    }
    return n_dec;
}

int32_t rl_spec_trim(rl_sched_req *r, int32_t n_draft) {
    int32_t covered = r->step_n > 0 ? r->n_computed + r->step_n : r->n_computed;
    int32_t excess = r->n_tokens - covered;
    if (r->step_n == 0 || r->state != RL_SCHED_RUNNING) excess = n_draft;
    if (excess > n_draft) excess = n_draft;
    if (excess > 0) {
        r->n_tokens -= excess;
        n_draft -= excess;
    }
    return n_draft;
}
