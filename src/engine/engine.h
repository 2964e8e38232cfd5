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

/* The loaded model and tokenizer: borrowed until rl_engine_free.  The
 * model's forward pass must not run while the engine steps. */
struct rl_model *rl_engine_model(rl_engine *e);
const struct rl_tokenizer *rl_engine_tokenizer(rl_engine *e);

#endif
