/* K-shift calibration of a model for quantized K pages (see
 * rl_model_calibrate_k_shift): a fixed built-in text, tokenized with the
 * model's own tokenizer, run once through the model. */
#ifndef RL_ENGINE_KCAL_H
#define RL_ENGINE_KCAL_H

#include "base/threadpool.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

/* Calibrates m's K shift on the built-in text unless already done.  Every
 * user of quantized K pages calls it before writing any: the engine at
 * creation, `redline perplexity` and the ablation's quality pass.  The
 * environment variable RL_KV_KCAL=none skips it (the K bias, or nothing,
 * stays the shift: a measurement aid, docs/KVQUANT.md); RL_KV_KSCALE=none
 * calibrates the shift but no K channel scale. */
rl_status rl_kv_calibrate(rl_model *m, const rl_tokenizer *tok, rl_threadpool *tp, rl_err *err);

#endif
