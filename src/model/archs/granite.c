/* redline model: the granite architecture (IBM Granite 3.x dense).
 *
 * The llama decoder (NORMAL RoPE, SiLU-gated FFN, optional Q/K/V biases,
 * rope_freqs.weight when present) with four multipliers, required as
 * llama.cpp requires them:
 *   - granite.embedding_scale: token embeddings times it;
 *   - granite.residual_scale: each block's output times it before the
 *     residual add;
 *   - granite.attention.scale: the q·k multiplier (instead of
 *     1/sqrt(head_dim));
 *   - granite.logit_scale: the logits divided by it (times its inverse).
 * A zero multiplier means "none", as in llama.cpp (logit_scale excepted:
 * it must be positive).  rope.scaling.finetuned = false (default true)
 * turns RoPE off, as llama.cpp reads Granite files.
 */
#include "model/model-impl.h"

rl_status rl__hparams_granite(rl_model *m, rl_err *err) {
    rl_hparams *hp = &m->hp;
    float emb, res, att, logit;
    bool use_rope;
    rl_status st;
    hp->rope_mode = RL_ROPE_NORMAL;
    hp->act = RL__ACT_SILU;
    if ((st = rl__hp_f32_req(m, "embedding_scale", 0.0, 1e6, &emb, err)) ||
        (st = rl__hp_f32_req(m, "residual_scale", 0.0, 1e6, &res, err)) ||
        (st = rl__hp_f32_req(m, "attention.scale", 0.0, 1e6, &att, err)) ||
        (st = rl__hp_f32_req(m, "logit_scale", 1e-6, 1e6, &logit, err)) ||
        (st = rl__hp_bool(m, "rope.scaling.finetuned", true, &use_rope, err)))
        return st;
    if (emb != 0.0f) hp->embd_scale = emb;
    if (res != 0.0f) hp->resid_scale = res;
    if (att != 0.0f) hp->attn_scale = att;
    hp->logit_mul = 1.0f / logit;
    if ((st = rl__bind_rope_factors(m, hp->rope_scaling == RL__ROPE_SCALING_LONGROPE, err)))
        return st;
    if (!use_rope) hp->n_rot = 0;
    return RL_OK;
}

const rl__arch rl__arch_granite = {
    .name = "granite",
    .hparams = rl__hparams_granite,
    .bind_layer = rl__bind_layer_llama,
    .layer = rl__layer_prenorm,
};
