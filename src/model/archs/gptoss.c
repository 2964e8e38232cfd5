/* redline model: the gpt-oss architecture (gpt-oss-20b, gpt-oss-120b), as
 * llama.cpp's converter writes it and its graph reads it:
 *   - attention with biases on q, k, v and the output projection, NEOX
 *     RoPE (YaRN from rope.scaling.*), head_dim from attention.key_length,
 *     and per-head attention sinks (attn_sinks [n_head]: one extra softmax
 *     logit per head that carries no value);
 *   - alternating sliding-window layers: attention.sliding_window
 *     (required) on the even layers, full attention on the odd ones
 *     (llama.cpp's swa pattern 2);
 *   - the FFN input norm is named post_attention_norm;
 *   - a routed FFN in every layer (moe.c): the router with a bias,
 *     top-k on the raw logits and the weights a softmax over the k
 *     selected ones, experts of expert_feed_forward_length rows (required)
 *     with biases on gate, up and down (ffn_*_exps.bias), usually MXFP4,
 *     and the clamped SwiGLU min(g, 7) * sigmoid(1.702 min(g, 7)) *
 *     (clamp(u, -7, 7) + 1).
 * The output projection is its own tensor (not tied). */
#include "model/model-impl.h"

#include <stdio.h>

static rl_status gptoss_hparams(rl_model *m, rl_err *err) {
    rl_hparams *hp = &m->hp;
    hp->rope_mode = RL_ROPE_NEOX;
    hp->act = RL__ACT_SWIGLU_OAI;
    hp->swa_pattern = 2;
    rl_status st;
    int32_t ff_exp; /* required here (rl__hparams_moe reads it again) */
    if ((st = rl__hp_i32(m, "attention.sliding_window", true, 0, 1, 1 << 24, &hp->sliding_window,
                         err)) ||
        (st = rl__hp_i32(m, "expert_feed_forward_length", true, 0, 1, RL_MODEL_MAX_DIM, &ff_exp,
                         err)) ||
        (st = rl__hparams_moe(m, true, true, RL__MOE_GATING_SOFTMAX_WEIGHT, false, err)))
        return st;
    return RL_OK;
}

static rl_status gptoss_bind_layer(rl_model *m, int32_t il, rl_err *err) {
    const rl_hparams *hp = &m->hp;
    const rl__moe_cfg *c = &hp->moe;
    rl_layer *L = &m->layers[il];
    rl__moe_w *w = &L->moe;
    rl_status st;
    if ((st = rl__bind_layer_attn(m, il, err)) || (st = rl__bind_qkv_bias(m, il, true, err)) ||
        (st = rl__bind_layer_vec(m, il, "attn_output.bias", hp->n_embd, true, &L->bo, err)) ||
        (st = rl__bind_layer_vec(m, il, "attn_sinks.weight", hp->n_head, true, &L->attn_sinks,
                                 err)) ||
        (st = rl__bind_layer_vec(m, il, "post_attention_norm.weight", hp->n_embd, true,
                                 &L->ffn_norm, err)) ||
        (st = rl__bind_moe(m, il, false, err)) ||
        (st = rl__bind_layer_vec(m, il, "ffn_gate_inp.bias", c->n_expert, true, &w->router_b, err)))
        return st;
    char nm[96];
    const char *sfx[3] = {"ffn_gate_exps.bias", "ffn_up_exps.bias", "ffn_down_exps.bias"};
    const float **dst[3] = {&w->gate_b, &w->up_b, &w->down_b};
    const int64_t n0[3] = {c->n_ff_exp, c->n_ff_exp, c->n_embd};
    for (int i = 0; i < 3; i++) {
        snprintf(nm, sizeof nm, "blk.%d.%s", (int)il, sfx[i]);
        if ((st = rl__bind_vec2(m, nm, n0[i], c->n_expert, true, dst[i], err))) return st;
    }
    return RL_OK;
}

const rl__arch rl__arch_gptoss = {
    .name = "gpt-oss",
    .hparams = gptoss_hparams,
    .bind_layer = gptoss_bind_layer,
    .layer = rl__layer_prenorm,
};
