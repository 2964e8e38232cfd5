/* Sampling (L6): turns one row of logits into one token id.
 *
 * A pure function of (logits, parameters, rng state, token history); no
 * model needed, so everything here is testable on hand-made distributions.
 *
 * The chain, in order (each stage documented at its function in sample.c):
 *   1. logit bias:     x[id] += bias                    (-inf bans a token)
 *   2. penalties over the last `penalty_last_n` accepted tokens:
 *        repetition (CTRL / llama.cpp): x > 0 ? x / rp : x * rp, once per
 *          distinct token in the window;
 *        presence / frequency (OpenAI): x -= presence * [count > 0]
 *                                               + frequency * count;
 *   3. temperature == 0: greedy argmax (ties -> lowest id), O(n_vocab), no
 *      sort, no rng draw;
 *   4. otherwise: top-k -> temperature -> softmax -> top-p -> min-p ->
 *      one draw from the rng over the kept set.
 * The logits after stages 1-2 are "the model's distribution" for logprobs.
 *
 * Tie rule everywhere (greedy, top-k boundary, top-p order, top-n
 * logprobs): larger value first, then lower token id.  This makes every
 * stage deterministic.
 *
 * Tokens whose adjusted logit is -inf or NaN are never chosen.  +inf
 * logits (a broken model) are treated as FLT_MAX.
 *
 * Cost: a few O(n_vocab) passes per sample and no full sort: greedy is one
 * argmax pass; small top-k is a bounded heap over the logits, large top-k
 * a quickselect; top-p is a weighted quickselect (average O(n)); min-p a
 * filter.  No allocation after rl_sampler_new; scratch is 12 bytes per
 * vocabulary entry (3 MiB for a 262,144-token vocabulary).
 *
 * Threading: an rl_sampler belongs to one request; not thread-safe. */
#ifndef RL_SAMPLE_H
#define RL_SAMPLE_H

#include <stdbool.h>
#include <stdint.h>

#include "base/base.h"
#include "base/rng.h"
#include "redline-types.h"

#define RL_SAMPLE_MAX_LOGPROBS       20        /* OpenAI's top_logprobs bound */
#define RL_SAMPLE_MAX_PENALTY_LAST_N (1 << 20) /* bounds history memory */

/* rl_logit_bias, rl_sample_params, rl_sample_params_default and
 * rl_sample_params_validate are public: defined in include/redline-types.h. */

/* Result of one draw.  Logprobs are log-softmax of the logits after bias
 * and penalties but BEFORE temperature / truncation: the model's own
 * distribution, as the OpenAI API reports it (a greedy or top-k pick still
 * gets its true probability, never 0 = log 1). */
typedef struct rl_sample_result {
    int32_t id;    /* chosen token, -1 when every token is banned */
    float logprob; /* of id; -inf when id == -1 */
    int32_t n_top; /* min(n_logprobs, number of tokens with finite logit) */
    int32_t top_id[RL_SAMPLE_MAX_LOGPROBS]; /* best first (tie rule above) */
    float top_logprob[RL_SAMPLE_MAX_LOGPROBS];
} rl_sample_result;

typedef struct rl_sampler rl_sampler;

/* Validates *p, then allocates a sampler for n_vocab tokens: scratch
 * buffers, a history ring of penalty_last_n tokens, a copy of the logit
 * bias list, and an rng seeded from p->seed.  NULL on failure with *err
 * filled (RL_ERR_INVALID / RL_ERR_RANGE / RL_ERR_NOMEM).  Caller frees
 * with rl_sampler_free. */
rl_sampler *rl_sampler_new(const rl_sample_params *p, int32_t n_vocab, rl_err *err);
void rl_sampler_free(rl_sampler *s); /* NULL is a no-op */

/* Copies parameters, history and rng state into a new sampler (caller
 * frees).  NULL on allocation failure. */
rl_sampler *rl_sampler_clone(const rl_sampler *s, rl_err *err);

/* Forgets the token history and reseeds the rng from params.seed. */
void rl_sampler_reset(rl_sampler *s);

/* Appends `token` to the penalty history (the oldest falls out after
 * penalty_last_n).  The engine calls this for each generated token, and
 * may call it for prompt tokens too (llama.cpp does).  RL_ERR_RANGE, and
 * nothing recorded, when token is outside [0, n_vocab). */
rl_status rl_sampler_accept(rl_sampler *s, int32_t token);

/* Snapshot / restore of the rng (preemption + recompute, speculative
 * rollback).  History is restored by re-accepting the tokens. */
rl_rng rl_sampler_get_rng(const rl_sampler *s);
void rl_sampler_set_rng(rl_sampler *s, const rl_rng *rng);

const rl_sample_params *rl_sampler_params(const rl_sampler *s); /* bias list owned by s */
int32_t rl_sampler_n_vocab(const rl_sampler *s);

/* Applies stages 1-2 (logit bias, penalties) to logits[n_vocab] in place. */
void rl_sampler_apply_penalties(rl_sampler *s, float *logits);

/* Runs the whole chain on logits[n_vocab] and returns the chosen id; -1
 * when no token has a finite adjusted logit.  logits is MODIFIED: on
 * return it holds the adjusted logits (after stages 1-2), so do not feed
 * the same buffer twice.  Draws exactly one rng value when temperature > 0
 * and a token is available, none when greedy.  `res` may be NULL; filling
 * it costs one extra O(n_vocab) pass (log-sum-exp) and the top-n
 * selection. */
int32_t rl_sampler_sample(rl_sampler *s, float *logits, rl_sample_result *res);

/* The exact distribution rl_sampler_sample draws from (same state, same
 * logits): probs_out[n_vocab]
 * gets the renormalised probability of each kept token and 0 elsewhere
 * (one-hot at the argmax when greedy; all zeros when every token is
 * banned).  logits is left unchanged; does not touch the rng.  For the
 * speculative verifier. */
void rl_sampler_dist(rl_sampler *s, const float *logits, float *probs_out);

/* One draw from an arbitrary non-negative vector probs[n_vocab] (need not
 * sum to 1: it is normalised by its sum; NaN and negative entries count
 * as 0).  Returns -1 if the total is 0 or not finite.  Draws one rng
 * value otherwise.  For the verifier's residual distribution. */
int32_t rl_sampler_sample_from(rl_sampler *s, const float *probs);

#endif
