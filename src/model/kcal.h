/* K calibration of quantized K pages (L4, src/model/kcal.c): the K shift
 * and the K channel scale every layer's quantized K pages are written and
 * read with (rl_kv_layer.k_shift / k_scale; docs/KVQUANT.md), found by
 * running a built-in text through the model once.
 *
 * Every user of quantized K pages calls rl_model_calibrate_k before
 * writing any (the engine at creation, `redline perplexity`, the logits
 * tool); the forward then fills in rl_model_k_shift / rl_model_k_scale for
 * the layers whose rl_kv_layer leaves them NULL.  f16/f32 pages ignore
 * both.
 */
#ifndef RL_MODEL_KCAL_H
#define RL_MODEL_KCAL_H

#include <stdbool.h>
#include <stdint.h>

#include "base/base.h"
#include "base/threadpool.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

/* Calibrates m's K shift (and, where it pays, K channel scale) on the
 * built-in text, tokenized with tok (the model's own tokenizer), unless
 * already done: rl_model_calibrate_k_shift on those ids with with_scale.
 * The environment variable RL_KV_KCAL=none skips it (the K bias, or
 * nothing, stays the shift: a measurement aid); RL_KV_KSCALE=none
 * calibrates the shift but no K channel scale (base/env.h). */
rl_status rl_model_calibrate_k(rl_model *m, const rl_tokenizer *tok, rl_threadpool *tp,
                               rl_err *err);

/* The same with the calibration's forwards run by fwd(ud, ...) (NULL =
 * rl_model_forward): the pipeline runs them through every stage
 * (src/dist/), each stage's layers calibrated where they live. */
rl_status rl_model_calibrate_k_with(rl_model *m, const rl_tokenizer *tok, rl_threadpool *tp,
                                    rl_model_forward_fn fwd, void *ud, rl_err *err);

/* K shift of quantized K pages.  A quantized K page stores k - s and the
 * attention adds q . s back, which is exact for any s; the quantization
 * error shrinks with |k - s|, so the best constant s is the mean key.
 * Without calibration s is the K bias (qwen2) or none.  This runs ids (one
 * sequence, any length; f32 KV of its own, discarded) through the model
 * and sets every layer's s to the mean post-RoPE key (bias included) over
 * those tokens but the first (position 0 is the attention sink, whose key
 * is atypical).  Deterministic for given ids; a second call is a no-op.
 * With with_scale it also fits, per KV head, a K channel scale
 * (rl_kv_layer.k_scale, rl_model_k_scale_fit) from the same pass's key and
 * query statistics, and keeps it only for heads where the predicted score
 * error drops at least RL_KV_KSCALE_MIN_GAIN-fold (layers with no such head
 * get none; docs/KVQUANT.md measures why smaller predicted gains are not
 * kept).  Call it before any quantized K page is written: pages written
 * with one shift/scale must be read with the same.  f16/f32 pages ignore
 * both. */
#define RL_KV_KSCALE_MIN_GAIN 3.0
rl_status rl_model_calibrate_k_shift(rl_model *m, const int32_t *ids, int32_t n, bool with_scale,
                                     rl_threadpool *tp, rl_err *err);
/* Whether rl_model_calibrate_k_shift has run on m. */
bool rl_model_k_calibrated(const rl_model *m);
/* Layer il's K shift for quantized K pages (calibrated mean, else the K
 * bias, else NULL); [n_kv_head*head_dim]. */
const float *rl_model_k_shift(const rl_model *m, int32_t il);
/* Layer il's calibrated K channel scale for quantized K pages, or NULL
 * (rl_kv_layer.k_scale). */
const float *rl_model_k_scale(const rl_model *m, int32_t il);

/* Fits one KV head's K channel scale D[hd] (rl_kv_layer.k_scale) from
 * calibration sums over n_k keys (sum_k, sum_k2: per channel, of k and
 * k^2) and n_q queries of the head's group (sum_q2: of q^2).  Model: the
 * quantizer's error in the stored (rotated) domain is isotropic with total
 * energy proportional to |D (k - mu)|^2, so a score's error variance is
 * proportional to sum_c rq_c^2 / D_c^2 * sum_c D_c^2 var_c (rq the RMS
 * query, var the key variance); D_c = sqrt(rq_c / sd_c) minimizes it
 * (Cauchy-Schwarz).  D is normalized to geometric mean 1.  Returns the
 * predicted error-variance reduction against D = 1 (>= 1). */
double rl_model_k_scale_fit(const double *sum_k, const double *sum_k2, const double *sum_q2,
                            double n_k, double n_q, int hd, float *D);

#endif
