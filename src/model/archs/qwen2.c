/* redline model: the qwen2 architecture (Qwen2, Qwen2.5, Qwen2.5-Coder).
 * As llama, plus biases on the Q, K and V projections (required), RoPE in
 * the NEOX layout (pairs i, i + n_rot/2) and an epsilon of 1e-6 by
 * default. */
#include "model/model-impl.h"

static rl_status qwen2_hparams(rl_model *m, rl_err *err) {
    m->hp.rope_mode = RL_ROPE_NEOX;
    m->hp.act = RL__ACT_SILU;
    return rl__hp_f32(m, "attention.layer_norm_rms_epsilon", 1e-6, 1e-12, 0.1, &m->hp.eps, err);
}

static rl_status qwen2_bind_layer(rl_model *m, int32_t il, rl_err *err) {
    rl_status st = rl__bind_layer_common(m, il, err);
    return st ? st : rl__bind_qkv_bias(m, il, true, err);
}

const rl__arch rl__arch_qwen2 = {
    .name = "qwen2",
    .hparams = qwen2_hparams,
    .bind_layer = qwen2_bind_layer,
    .layer = rl__layer_prenorm,
};
