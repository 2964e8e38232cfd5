/* redline speculative decoding (L7): drafters and the verifier.
 *
 * A drafter proposes k tokens to follow a sequence; the target model
 * scores them all in one forward (they ride in the batch as extra
 * positions) and rl_spec_verify keeps the longest acceptable prefix plus
 * one token of the target's own.  With temperature 0 the result is token
 * for token what plain decoding gives (the same batch-invariant logits
 * rows and the same argmax); with sampling, the rejection rule of
 * Leviathan et al. / Chen et al. keeps the output distribution equal to
 * the target's.
 *
 * Drafters:
 *   - n-gram / prompt lookup (rl_spec_ngram): the continuation of the most
 *     recent earlier occurrence of the sequence's last n tokens; needs no
 *     model.
 *   - a draft model sharing the target's vocabulary (rl_spec_draft_*):
 *     its own paged KV, greedy proposals (a deterministic drafter, so the
 *     verifier treats its distribution as a point mass), optionally over a
 *     restricted head (the first n_vocab_draft ids) to make steps cheaper.
 *
 * Planning (rl_spec_planner): which decoding sequences draft how many
 * tokens in a step, from which drafter, under the cost model; testable
 * without a model (n-gram and grammar-forced drafts need none).
 */
#ifndef RL_SPEC_H
#define RL_SPEC_H

#include <stdint.h>

#include "base/base.h"
#include "base/threadpool.h"
#include "grammar/grammar.h"
#include "kv/kv.h"
#include "model/model.h"
#include "sample/sample.h"
#include "sched/sched.h"

/* Proposes up to k tokens for toks[0..n): for g = ngram_max down to
 * max(ngram_min, 2), finds the latest earlier occurrence of the last g
 * tokens and copies what followed it; failing that, the latest earlier
 * occurrence of the g tokens before the last one followed by a different
 * token (one token substituted: a renamed identifier, a fixed typo) and
 * copies what followed that token; failing that (ngram_min 1), the last
 * token alone.  Returns the number proposed (0..k). */
int32_t rl_spec_ngram(const int32_t *toks, int32_t n, int32_t k, int32_t ngram_min,
                      int32_t ngram_max, int32_t *out);

/* Verifies draft[0..k) against the target's logits rows[k+1][n_vocab]
 * (row i scores the token after draft[i-1]; row 0 the token after the last
 * accepted one).  q (may be NULL) is the drafter's distribution
 * q[k][n_vocab]; NULL means a deterministic drafter (point mass on each
 * draft token).  Writes the emitted tokens to out (accepted drafts then one
 * token from the target) and returns how many (1..k+1), or 0 when the
 * target bans every token.  rl_sampler_accept is called for each emitted
 * token, so penalties see the right history row by row.  res[0..ret) gets
 * each emitted token's result when greedy (logprobs); with sampling only
 * the id and the log-probability under the sampling distribution.
 * rows are modified; scratch holds 2 * n_vocab floats. */
int32_t rl_spec_verify(rl_sampler *s, float *rows, int32_t n_vocab, const int32_t *draft, int32_t k,
                       const float *q, float *scratch, rl_sample_result *res, int32_t *out);

/* ---- draft-length policy (policy.c) ---- */
#define RL_SPEC_COST_N 64

/* Online cost model: fwd[n] = seconds of a target forward of n decode
 * tokens, draft[n] = seconds of one draft forward over n sequences (moving
 * averages; 0 = not observed yet).  Unobserved sizes are extrapolated with
 * the prior shape T(n)/T(1) = 1 + slope * (n - 1) and a draft forward is
 * draft_ratio target forwards until one is timed. */
typedef struct rl_spec_cost {
    double fwd[RL_SPEC_COST_N + 1];
    double draft[RL_SPEC_COST_N + 1];
    float slope, draft_ratio;
} rl_spec_cost;

void rl_spec_cost_init(rl_spec_cost *c, float slope, float draft_ratio);
void rl_spec_cost_add_fwd(rl_spec_cost *c, int32_t n_tok, double s);
void rl_spec_cost_add_draft(rl_spec_cost *c, int32_t n_seq, double s);
double rl_spec_cost_fwd(const rl_spec_cost *c, int32_t n_tok);
double rl_spec_cost_draft(const rl_spec_cost *c, int32_t n_seq);

/* Expected tokens a verification of k drafts emits at per-token acceptance
 * a: (1 - a^(k+1)) / (1 - a); 1 for k = 0. */
double rl_spec_expected_tokens(double a, int32_t k);

/* The draft length for one step: n_dec sequences decode, n_spec of them
 * speculate with acceptance estimates a[0..n_spec); uses_draft: a draft
 * model runs k forwards.  Returns the k in [0, k_max] that maximizes
 * expected tokens per second under c (0 = speculation does not pay). */
int32_t rl_spec_choose_k(const rl_spec_cost *c, int32_t n_dec, const float *a, int32_t n_spec,
                         bool uses_draft, int32_t k_max);

/* A request's running acceptance: decayed counts of accepted drafts and
 * of drafts the verifier looked at (it stops at the first rejection). */
typedef struct rl_spec_acc {
    float succ, trials;
} rl_spec_acc;

void rl_spec_acc_update(rl_spec_acc *s, int32_t k, int32_t accepted);
/* A step without drafts: the estimate drifts back toward the prior, so a
 * request that stopped drafting tries again later. */
void rl_spec_acc_decay(rl_spec_acc *s);
/* (succ + 2 prior) / (trials + 2) */
float rl_spec_acc_rate(const rl_spec_acc *s, float prior);

/* ---- draft model ---- */
typedef struct rl_spec_draft rl_spec_draft;

/* Loads the draft model at `path` with room for max_seqs sequences of
 * n_ctx tokens in its own KV pool.  Its vocabulary must match n_vocab_target
 * (RL_ERR_INVALID otherwise).  n_vocab_draft > 0 restricts the draft's
 * head to token ids [0, n_vocab_draft) (see rl_batch.n_vocab_out): cheaper
 * steps, proposals only among those ids; 0 or >= n_vocab = the full head. */
rl_status rl_spec_draft_new(const char *path, int32_t n_vocab_target, int32_t n_vocab_draft,
                            int32_t max_seqs, int32_t n_ctx, int32_t max_batch, rl_spec_draft **out,
                            rl_err *err);
void rl_spec_draft_free(rl_spec_draft *d);
size_t rl_spec_draft_weight_bytes(const rl_spec_draft *d);
/* Token ids the draft scores (its restricted or full vocabulary). */
int32_t rl_spec_draft_n_vocab(const rl_spec_draft *d);
/* Seconds spent so far in decode-like draft forwards (at most 2 tokens a
 * sequence: the draft steps, not prompt catch-up), and (if n_step) how
 * many there were. */
double rl_spec_draft_step_s(const rl_spec_draft *d, int64_t *n_step);

/* One sequence's state in the draft model (its KV). */
typedef struct rl_spec_draft_seq {
    rl_kv_seq kv;
    int32_t n_computed; /* tokens with draft K/V stored */
    /* tokens below this are the request's prompt: the draft runs them as
     * prompt tokens (rl_batch.prompt), as the target does, so a model
     * drafting for itself stores the target's K/V bit for bit */
    int32_t n_prompt;
} rl_spec_draft_seq;

void rl_spec_draft_seq_init(rl_spec_draft_seq *s);
void rl_spec_draft_seq_free(rl_spec_draft *d, rl_spec_draft_seq *s);

/* Proposes k[i] greedy tokens for each of n sequences, batched across
 * sequences: seqs[i] has known tokens toks[i][0..n_toks[i]).  The draft
 * first catches up on tokens it has not seen, then runs max(k) single-token
 * steps.  out[i] receives k[i] tokens; k[i] may be lowered (to 0) when the
 * draft pool or context runs out.  Returns RL_OK or the forward's error. */
rl_status rl_spec_draft_propose(rl_spec_draft *d, rl_spec_draft_seq **seqs,
                                const int32_t *const *toks, const int32_t *n_toks, int32_t *k,
                                int32_t **out, int32_t n, rl_threadpool *tp, rl_err *err);
/* After verification: the sequence's first n_valid tokens are final;
 * drops draft K/V beyond them. */
void rl_spec_draft_rollback(rl_spec_draft *d, rl_spec_draft_seq *s, int32_t n_valid);

/* ---- draft planning (plan.c) ----
 * Per step, before scheduling, the caller offers every decoding sequence
 * (rl_spec_planner_begin, then rl_spec_planner_add for each, in a stable
 * order), and rl_spec_planner_run decides:
 *   - nothing drafts unless 1..spec_max_batch sequences decode and
 *     draft_max > 0 (many decoding sequences make a step compute-bound,
 *     and rejected drafts then waste what they cost);
 *   - a sequence drafts at most min(draft_max, left - 1) tokens, none when
 *     it asked for none (no drafter, no grammar), reports logprobs
 *     (no_spec), or its grammar is within 2 * RL_GRAMMAR_CLOSE_SLACK
 *     tokens of having to close;
 *   - the tokens its grammar forces (jump-forward) come first; a drafter
 *     (n-gram or the draft model, batched) fills in where the grammar
 *     forces nothing;
 *   - drafters share one length per step, k: draft_max with draft_fixed,
 *     else the cost model's choice (rl_spec_choose_k) after probes: every
 *     draft length not yet timed for this batch size, the shortest first,
 *     and one length in turn after 32 steps without drafts (probes are off
 *     with a draft model and more than one decoding sequence: catching the
 *     draft up costs more than a probe returns there);
 *   - at most max_rows draft tokens in all, first come first served.
 * The caller appends each candidate's drafts, schedules, then drops what
 * the step did not cover (rl_spec_trim), runs the forward (timing it into
 * rl_spec_planner_observe_fwd when every token wanted logits) and
 * verifies.  Engine-thread only, like the step loop. */

typedef enum rl_spec_source {
    RL_SPEC_SRC_NONE = 0,  /* no drafter: grammar-forced drafts only */
    RL_SPEC_SRC_NGRAM = 1, /* n-gram lookup over its own tokens */
    RL_SPEC_SRC_DRAFT = 2, /* the planner's draft model */
} rl_spec_source;

typedef struct rl_spec_planner_config {
    int32_t max_seqs;       /* candidates per step at most (>= 1) */
    int32_t draft_max;      /* draft tokens per sequence at most (0..32; 0 = none) */
    int32_t spec_max_batch; /* drafts only while at most this many sequences decode */
    int32_t max_rows;       /* draft tokens per step at most (the logits rows for them) */
    bool draft_fixed;       /* drafters always draft draft_max (no cost model) */
    int32_t ngram_min, ngram_max;
    rl_spec_draft *draft; /* borrowed; NULL = no draft model (no RL_SPEC_SRC_DRAFT) */
} rl_spec_planner_config;

/* One decoding sequence offered for a step. */
typedef struct rl_spec_cand {
    /* in, set by the caller after rl_spec_planner_add */
    const int32_t *tokens; /* [n_tokens] its known tokens (borrowed for the step) */
    int32_t n_tokens;
    int32_t left; /* tokens it may still generate (length and context) */
    rl_spec_source source;
    bool no_spec;            /* must not draft this step (e.g. it reports logprobs) */
    rl_spec_acc *acc;        /* its drafter's running acceptance: read, and decayed
                                when it does not draft (borrowed; may be NULL with
                                RL_SPEC_SRC_NONE) */
    rl_gmatch *gm;           /* its grammar matcher or NULL: forced tokens */
    rl_spec_draft_seq *dseq; /* RL_SPEC_SRC_DRAFT: its draft-model state */
    void *user;              /* the caller's, untouched */
    /* out, set by rl_spec_planner_run */
    int32_t k;            /* draft tokens to append (0 = none) */
    const int32_t *draft; /* [k], planner-owned until the next begin */
    bool from_drafter;    /* the drafts are its drafter's (not grammar-forced):
                             their verification updates acc */
} rl_spec_cand;

typedef struct rl_spec_planner rl_spec_planner;

rl_status rl_spec_planner_new(const rl_spec_planner_config *cfg, rl_spec_planner **out,
                              rl_err *err);
void rl_spec_planner_free(rl_spec_planner *p); /* NULL ok */
/* Starts a step: forgets the last one's candidates. */
void rl_spec_planner_begin(rl_spec_planner *p);
/* A zeroed slot for the next decoding sequence (to be filled in), or NULL
 * when max_seqs are offered already.  Offer every decoding sequence, even
 * one that never drafts: they all count toward spec_max_batch and the
 * cost model's batch size. */
rl_spec_cand *rl_spec_planner_add(rl_spec_planner *p);
/* Decides the step's drafts (the draft model runs here, on tp); returns
 * the number of candidates offered, each now with k and draft set. */
int32_t rl_spec_planner_run(rl_spec_planner *p, rl_threadpool *tp);
/* The number of candidates offered this step, and candidate i of them. */
int32_t rl_spec_planner_n_cands(const rl_spec_planner *p);
rl_spec_cand *rl_spec_planner_cand(rl_spec_planner *p, int32_t i);
/* A target forward of n_tok decode tokens took `seconds` (feeds the cost model). */
void rl_spec_planner_observe_fwd(rl_spec_planner *p, int32_t n_tok, double seconds);
/* Grammar-forced draft tokens proposed so far (jump-forward). */
uint64_t rl_spec_planner_n_forced(const rl_spec_planner *p);
/* The planner's cost model (read-only view, for tests and stats). */
const rl_spec_cost *rl_spec_planner_cost(const rl_spec_planner *p);

/* After scheduling: r carries n_draft drafts at the end of its tokens;
 * those the step does not cover (the token budget cut it short, it was not
 * scheduled, or it was preempted) are dropped from r->n_tokens.  Returns
 * the drafts kept. */
int32_t rl_spec_trim(rl_sched_req *r, int32_t n_draft);

#endif
