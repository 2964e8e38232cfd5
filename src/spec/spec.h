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
 *     verifier treats its distribution as a point mass).
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
 * ngram_min, finds the latest earlier occurrence of the last g tokens and
 * copies what followed it.  Returns the number proposed (0..k). */
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

/* ---- draft model ---- */
typedef struct rl_spec_draft rl_spec_draft;

/* Loads the draft model at `path` with room for max_seqs sequences of
 * n_ctx tokens in its own KV pool.  Its vocabulary must match n_vocab_target
 * (RL_ERR_INVALID otherwise). */
rl_status rl_spec_draft_new(const char *path, int32_t n_vocab_target, int32_t max_seqs,
                            int32_t n_ctx, int32_t max_batch, rl_spec_draft **out, rl_err *err);
void rl_spec_draft_free(rl_spec_draft *d);
size_t rl_spec_draft_weight_bytes(const rl_spec_draft *d);

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
