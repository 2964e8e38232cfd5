/* redline model: the olmoe architecture (OLMoE-1B-7B).
 * A pre-norm decoder with NEOX RoPE and, as llama.cpp builds it:
 *   - RMSNorm of q and k over the whole projection (attn_q_norm
 *     [n_head*head_dim], attn_k_norm [n_kv_head*head_dim]) before RoPE,
 *     not per head as qwen3 does;
 *   - a routed FFN in every layer: expert_count experts of
 *     feed_forward_length rows, softmax gating, top-k weights not
 *     renormalised (moe.c). */
#include "model/model-impl.h"

static rl_status olmoe_hparams(rl_model *m, rl_err *err) {
    m->hp.rope_mode = RL_ROPE_NEOX;
    m->hp.act = RL__ACT_SILU;
    m->hp.qk_norm_full = true;
    return rl__hparams_moe(m, true, false, RL__MOE_GATING_SOFTMAX, false, err);
}

static rl_status olmoe_bind_layer(rl_model *m, int32_t il, rl_err *err) {
    const rl_hparams *hp = &m->hp;
    rl_layer *L = &m->layers[il];
    int64_t nq = (int64_t)hp->n_head * hp->head_dim, nkv = (int64_t)hp->n_kv_head * hp->head_dim;
    rl_status st;
    if ((st = rl__bind_layer_common(m, il, err)) ||
        (st = rl__bind_layer_vec(m, il, "attn_q_norm.weight", nq, true, &L->q_norm, err)) ||
        (st = rl__bind_layer_vec(m, il, "attn_k_norm.weight", nkv, true, &L->k_norm, err)))
        return st;
    return RL_OK;
}

const rl__arch rl__arch_olmoe = {
    .name = "olmoe",
    .hparams = olmoe_hparams,
    .bind_layer = olmoe_bind_layer,
    .layer = rl__layer_prenorm,
};
