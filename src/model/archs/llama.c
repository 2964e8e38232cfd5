/* redline model: the llama architecture (Llama 2/3.x, SmolLM2, Mistral /
 * Mistral-Small / Devstral style files).
 * Pre-norm decoder, RMSNorm, GQA attention with RoPE in the NORMAL
 * (adjacent pairs) layout -- the GGUF converter permutes Q/K rows for it --
 * and a SiLU-gated FFN.  Output tied to the embeddings when output.weight
 * is absent.  As llama.cpp reads the arch:
 *   - head_dim from attention.key_length when present (Mistral Nemo: 128
 *     with n_embd/n_head = 160);
 *   - Llama 3.1+ rope scaling as rope_freqs.weight, per-pair divisors of
 *     the rope frequencies ([n_rot/2]); with rope.scaling.type longrope
 *     instead rope_factors_long/short.weight; YaRN from rope.scaling.*;
 *   - optional Q/K/V biases;
 *   - Mixtral: with llama.expert_count > 0 the FFN is routed (moe.c):
 *     ffn_gate_inp [n_expert][n_embd], ffn_{gate,up,down}_exps with
 *     feed_forward_length rows per expert, softmax gating, top-k weights
 *     renormalised to sum 1 (llama.cpp's reading of the arch). */
#include "model/model-impl.h"

static rl_status llama_hparams(rl_model *m, rl_err *err) {
    m->hp.rope_mode = RL_ROPE_NORMAL;
    m->hp.act = RL__ACT_SILU;
    rl_status st = rl__hparams_moe(m, false, false, RL__MOE_GATING_SOFTMAX, true, err);
    return st ? st : rl__bind_rope_factors(m, m->hp.rope_scaling == RL__ROPE_SCALING_LONGROPE, err);
}

rl_status rl__bind_layer_llama(rl_model *m, int32_t il, rl_err *err) {
    rl_status st = rl__bind_layer_common(m, il, err);
    return st ? st : rl__bind_qkv_bias(m, il, false, err);
}

const rl__arch rl__arch_llama = {
    .name = "llama",
    .hparams = llama_hparams,
    .bind_layer = rl__bind_layer_llama,
    .layer = rl__layer_prenorm,
};
