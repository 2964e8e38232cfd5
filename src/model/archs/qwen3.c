/* redline model: the qwen3 architecture (Qwen3 dense models).
 * As qwen2 without the Q/K/V biases, plus a per-head RMSNorm of q and k
 * (attn_q_norm / attn_k_norm, [head_dim], after the projections and before
 * RoPE), RoPE in the NEOX layout, head_dim from attention.key_length
 * (128 for every size, independent of n_embd/n_head), epsilon 1e-6 by
 * default; YaRN when rope.scaling.type says so (rope.scaling.* keys). */
#include "model/model-impl.h"

static rl_status qwen3_hparams(rl_model *m, rl_err *err) {
    m->hp.rope_mode = RL_ROPE_NEOX;
    m->hp.act = RL__ACT_SILU;
    return rl__hp_f32(m, "attention.layer_norm_rms_epsilon", 1e-6, 1e-12, 0.1, &m->hp.eps, err);
}

static rl_status qwen3_bind_layer(rl_model *m, int32_t il, rl_err *err) {
    rl_status st = rl__bind_layer_common(m, il, err);
    return st ? st : rl__bind_qk_norm(m, il, err);
}

const rl__arch rl__arch_qwen3 = {
    .name = "qwen3",
    .hparams = qwen3_hparams,
    .bind_layer = qwen3_bind_layer,
    .layer = rl__layer_prenorm,
};
