/* redline model: the gemma3 architecture (Gemma 3 text decoders).
 *
 * Differences from llama:
 *   - token embeddings scaled by sqrt(n_embd);
 *   - per-head RMSNorm of q and k (attn_q_norm / attn_k_norm, [head_dim]);
 *   - "sandwich" norms: post_attention_norm and post_ffw_norm on each
 *     block's output before the residual add (rl__layer_sandwich, shared
 *     with gemma2);
 *   - GELU (tanh approximation) gated FFN; RoPE in the NEOX layout;
 *   - sliding-window attention on every layer but each swa_pattern-th
 *     (5 local : 1 global), local layers with rope base 10000
 *     (rope.freq_base_swa) and no rope scaling, global layers with
 *     rope.freq_base (default 1e6);
 *   - query scale 1/sqrt(query_pre_attn_scalar), which GGUF files usually
 *     omit: head_dim, or n_embd/n_head for the 62-layer 27B model.
 * Norm weights are used as stored (x * w): the GGUF converter has already
 * folded Gemma's (1 + w) convention into them (checked against the NumPy
 * reference, which was checked against transformers).
 */
#include "model/model-impl.h"

#include <math.h>

static rl_status gemma3_hparams(rl_model *m, rl_err *err) {
    rl_hparams *hp = &m->hp;
    rl_status st;
    hp->rope_mode = RL_ROPE_NEOX;
    hp->act = RL__ACT_GELU_TANH;
    hp->embd_scale = sqrtf((float)hp->n_embd);
    hp->rope_freq_scale_local = 1.0f;
    if ((st = rl__hp_f32(m, "attention.layer_norm_rms_epsilon", 1e-6, 1e-12, 0.1, &hp->eps, err)) ||
        (st = rl__hp_f32(m, "rope.freq_base", 1e6, 1.0, 1e12, &hp->rope_base, err)) ||
        (st = rl__hp_f32(m, "rope.freq_base_swa", 10000.0, 1.0, 1e12, &hp->rope_base_local, err)) ||
        (st = rl__hp_i32(m, "attention.sliding_window", false, 0, 0, 1 << 24, &hp->sliding_window,
                         err)) ||
        (st = rl__hp_i32(m, "attention.sliding_window_pattern", false, 6, 1, 1024, &hp->swa_pattern,
                         err)))
        return st;
    return rl__hp_gemma_query_scale(m, 62, err);
}

static rl_status gemma3_bind_layer(rl_model *m, int32_t il, rl_err *err) {
    rl_status st;
    if ((st = rl__bind_layer_common(m, il, err)) || (st = rl__bind_qk_norm(m, il, err))) return st;
    return rl__bind_post_norms(m, il, err);
}

const rl__arch rl__arch_gemma3 = {
    .name = "gemma3",
    .hparams = gemma3_hparams,
    .bind_layer = gemma3_bind_layer,
    .layer = rl__layer_sandwich,
};
