/* redline model: the gemma2 architecture (Gemma 2 2B/9B/27B).
 *
 * As gemma3 (embeddings times sqrt(n_embd), sandwich norms, GELU-tanh
 * gated FFN, NEOX RoPE; rl__layer_sandwich) without the per-head q/k
 * norms, and with, as llama.cpp reads the arch:
 *   - attention logit soft-capping: scores = cap * tanh(s / cap), cap =
 *     attn_logit_softcapping (default 50);
 *   - final logit soft-capping, final_logit_softcapping (default 30);
 *   - sliding-window attention (attention.sliding_window, default 4096) on
 *     the even layers (llama.cpp's swa pattern 2: layer il is local iff
 *     il % 2 < 1), full attention on the odd ones; one rope base for all;
 *   - query scale 1/sqrt(query_pre_attn_scalar): head_dim (key_length), or
 *     n_embd/n_head for the 46-layer 27B model (GGUF omits the key).
 */
#include "model/model-impl.h"

#include <math.h>

static rl_status gemma2_hparams(rl_model *m, rl_err *err) {
    rl_hparams *hp = &m->hp;
    rl_status st;
    hp->rope_mode = RL_ROPE_NEOX;
    hp->act = RL__ACT_GELU_TANH;
    hp->embd_scale = sqrtf((float)hp->n_embd);
    hp->swa_pattern = 2;
    if ((st = rl__hp_f32(m, "attention.layer_norm_rms_epsilon", 1e-6, 1e-12, 0.1, &hp->eps, err)) ||
        (st = rl__hp_f32(m, "attn_logit_softcapping", 50.0, 0.0, 1e6, &hp->attn_softcap, err)) ||
        (st = rl__hp_f32(m, "final_logit_softcapping", 30.0, 0.0, 1e6, &hp->final_softcap, err)) ||
        (st = rl__hp_i32(m, "attention.sliding_window", false, 4096, 0, 1 << 24,
                         &hp->sliding_window, err)))
        return st;
    return rl__hp_gemma_query_scale(m, 46, err);
}

static rl_status gemma2_bind_layer(rl_model *m, int32_t il, rl_err *err) {
    rl_status st = rl__bind_layer_common(m, il, err);
    return st ? st : rl__bind_post_norms(m, il, err);
}

const rl__arch rl__arch_gemma2 = {
    .name = "gemma2",
    .hparams = gemma2_hparams,
    .bind_layer = gemma2_bind_layer,
    .layer = rl__layer_sandwich,
};
