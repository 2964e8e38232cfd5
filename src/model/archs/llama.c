/* redline model: the llama architecture (Llama 2/3 style, SmolLM2).
 * Pre-norm decoder, RMSNorm, GQA attention with RoPE in the NORMAL
 * (adjacent pairs) layout -- the GGUF converter permutes Q/K rows for it --
 * and a SiLU-gated FFN.  Output tied to the embeddings when output.weight
 * is absent. */
#include "model/model-impl.h"

static rl_status llama_hparams(rl_model *m, rl_err *err) {
    m->hp.rope_mode = RL_ROPE_NORMAL;
    m->hp.act = RL__ACT_SILU;
    return RL_OK;
}

const rl__arch rl__arch_llama = {
    .name = "llama",
    .hparams = llama_hparams,
    .bind_layer = rl__bind_layer_common,
    .layer = rl__layer_prenorm,
};
