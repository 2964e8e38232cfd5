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
 */
#ifndef RL_SPEC_H
#define RL_SPEC_H

#include <stdint.h>

#include "base/base.h"
#include "base/threadpool.h"
#include "kv/kv.h"
#include "model/model.h"
#include "sample/sample.h"

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
int32_t rl_spec_verify(rl_sampler *s, float *rows, int32_t n_vocab, const int32_t *draft,
                       int32_t k, const float *q, float *scratch, rl_sample_result *res,
                       int32_t *out);

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
                            int32_t max_seqs, int32_t n_ctx, int32_t max_batch,
                            rl_spec_draft **out, rl_err *err);
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

#endif
