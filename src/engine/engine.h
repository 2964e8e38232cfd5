/* In-tree access to an engine's internals (L8), for the library's own
 * tools and tests (bench/ablation, tests/tools, tests/unit) and for
 * src/engine/api.c.  Embedders use include/redline.h only; nothing here is
 * part of the public API.
 */
#ifndef RL_ENGINE_ENGINE_H
#define RL_ENGINE_ENGINE_H

#include "redline.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

struct rl_kv_pool; /* kv/kv.h */

/* The loaded model and tokenizer: borrowed until rl_engine_free.  The
 * model's forward pass must not run while the engine steps. */
struct rl_model *rl_engine_model(rl_engine *e);
const struct rl_tokenizer *rl_engine_tokenizer(rl_engine *e);

/* Pipeline hooks (src/dist/ installs them; the engine does not know MPI).
 * With hooks set, the engine loads its model as pipeline stage `stage` of
 * `n_stages` (rl_model_opts), runs every forward -- the steps' and the K
 * calibration's -- through forward(ud, ...), and calls the may-be-NULL
 * slots at their points: on_model after the model is loaded (before the K
 * calibration), on_pool once the KV pool exists, on_free at the end of
 * rl_engine_free (also after a failed rl_engine_new; every other resource
 * is gone by then).  Called on the thread that creates / frees the engine,
 * forward on the step thread. */
typedef struct rl_engine_hooks {
    int32_t stage, n_stages;
    rl_model_forward_fn forward; /* required */
    void *ud;
    rl_status (*on_model)(void *ud, const rl_engine_params *p, struct rl_model *m, rl_err *err);
    rl_status (*on_pool)(void *ud, struct rl_kv_pool *pool, rl_err *err);
    void (*on_free)(void *ud);
} rl_engine_hooks;
/* Process-wide: the next rl_engine_new uses h (copied; NULL = none).  Only
 * one engine may be created while hooks are set (a pipeline serves one
 * engine); a second rl_engine_new fails. */
void rl_engine_set_hooks(const rl_engine_hooks *h);

#endif
