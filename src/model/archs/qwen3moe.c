/* redline model: the qwen3moe architecture (Qwen3-30B-A3B, Qwen3-235B-A22B).
 * The qwen3 decoder (per-head Q/K RMSNorm, NEOX RoPE, head_dim from
 * attention.key_length, epsilon 1e-6 by default) with a routed FFN in every
 * layer: expert_count experts of expert_feed_forward_length rows (default
 * feed_forward_length / expert_used_count, as llama.cpp), softmax gating,
 * top-k weights renormalised to sum 1 (moe.c). */
#include "model/model-impl.h"

static rl_status qwen3moe_hparams(rl_model *m, rl_err *err) {
    m->hp.rope_mode = RL_ROPE_NEOX;
    m->hp.act = RL__ACT_SILU;
    rl_status st =
        rl__hp_f32(m, "attention.layer_norm_rms_epsilon", 1e-6, 1e-12, 0.1, &m->hp.eps, err);
    return st ? st : rl__hparams_moe(m, true, true, RL__MOE_GATING_SOFTMAX, true, err);
}

static rl_status qwen3moe_bind_layer(rl_model *m, int32_t il, rl_err *err) {
    rl_status st = rl__bind_layer_common(m, il, err);
    return st ? st : rl__bind_qk_norm(m, il, err);
}

const rl__arch rl__arch_qwen3moe = {
    .name = "qwen3moe",
    .hparams = qwen3moe_hparams,
    .bind_layer = qwen3moe_bind_layer,
    .layer = rl__layer_prenorm,
};
