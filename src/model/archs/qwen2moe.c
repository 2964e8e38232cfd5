/* redline model: the qwen2moe architecture (Qwen1.5-MoE-A2.7B,
 * Qwen2-57B-A14B).  The qwen2 decoder (NEOX RoPE, epsilon 1e-6 by default;
 * Q/K/V biases optional here, as llama.cpp loads them) with, in every layer:
 *   - a routed FFN: expert_count experts of expert_feed_forward_length rows
 *     (default feed_forward_length / expert_used_count), softmax gating,
 *     top-k weights NOT renormalised (llama.cpp's qwen2moe graph);
 *   - a shared expert ffn_{gate,up,down}_shexp of
 *     expert_shared_feed_forward_length rows (default feed_forward_length)
 *     that every token runs, scaled by sigmoid(x . ffn_gate_inp_shexp)
 *     ([n_embd]) and added to the routed output (moe.c). */
#include "model/model-impl.h"

static rl_status qwen2moe_hparams(rl_model *m, rl_err *err) {
    rl_hparams *hp = &m->hp;
    hp->rope_mode = RL_ROPE_NEOX;
    hp->act = RL__ACT_SILU;
    rl_status st;
    if ((st = rl__hp_f32(m, "attention.layer_norm_rms_epsilon", 1e-6, 1e-12, 0.1, &hp->eps, err)) ||
        (st = rl__hparams_moe(m, true, true, RL__MOE_GATING_SOFTMAX, false, err)))
        return st;
    int32_t sh;
    if ((st = rl__hp_i32(m, "expert_shared_feed_forward_length", false, 0, 0, RL_MODEL_MAX_DIM, &sh,
                         err)))
        return st;
    hp->moe.n_ff_sh = sh ? sh : hp->n_ff;
    return RL_OK;
}

static rl_status qwen2moe_bind_layer(rl_model *m, int32_t il, rl_err *err) {
    rl_status st = rl__bind_layer_common(m, il, err); /* with the shared expert and its gate */
    return st ? st : rl__bind_qkv_bias(m, il, false, err);
}

const rl__arch rl__arch_qwen2moe = {
    .name = "qwen2moe",
    .hparams = qwen2moe_hparams,
    .bind_layer = qwen2moe_bind_layer,
    .layer = rl__layer_prenorm,
};
