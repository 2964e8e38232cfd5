/* redline model: the phi3 architecture (Phi-3 / Phi-3.5 mini and medium,
 * Phi-4 mini).
 *
 * A pre-norm llama-like decoder with fused projections, as the GGUF
 * converter writes them:
 *   - attn_qkv.weight [n_head*hd + 2*n_kv*hd][n_embd]: the q, k and v rows
 *     one after the other; bound as three row-range views of the one
 *     matrix (pointer offsets: rows are whole quant blocks), which the
 *     attention block runs as one matmul dispatch on one quantization of
 *     its input;
 *   - ffn_up.weight [2*n_ff][n_embd]: the gate rows then the up rows
 *     (SwiGLU: silu(gate) * up), views as well;
 *   - RoPE in the NEOX layout; LongRoPE (Phi-3.5, Phi-3-*-128k): per-pair
 *     frequency divisors rope_factors_short/long.weight, the long ones
 *     when the context the model runs with exceeds
 *     rope.scaling.original_context_length (as llama.cpp picks them), and
 *     rope.scaling.attn_factor on cos/sin;
 *   - attention.sliding_window (when set) on every layer, as Hugging
 *     Face's Phi3 applies it (hp.swa_pattern 0: all layers local).
 *     llama.cpp 0.3.16 ignores Phi-3 windows (its loader sets n_swa = 0,
 *     PR 13676); the two agree while the context stays within the window
 *     (Phi-3.5 and Phi-4 files set 262144, Phi-3-mini-4k 2047).
 */
#include "model/model-impl.h"

static rl_status phi3_hparams(rl_model *m, rl_err *err) {
    m->hp.rope_mode = RL_ROPE_NEOX;
    m->hp.act = RL__ACT_SILU;
    m->hp.swa_pattern = 0;
    rl_status st =
        rl__hp_i32(m, "attention.sliding_window", false, 0, 0, 1 << 30, &m->hp.sliding_window, err);
    return st ? st : rl__bind_rope_factors(m, true, err);
}

static rl_status phi3_bind_layer(rl_model *m, int32_t il, rl_err *err) {
    const rl_hparams *hp = &m->hp;
    rl_layer *L = &m->layers[il];
    int64_t nq = (int64_t)hp->n_head * hp->head_dim, nkv = (int64_t)hp->n_kv_head * hp->head_dim;
    rl_mat qkv, gu;
    rl_status st;
    if ((st =
             rl__bind_layer_vec(m, il, "attn_norm.weight", hp->n_embd, true, &L->attn_norm, err)) ||
        (st = rl__bind_layer_mat(m, il, "attn_qkv.weight", nq + 2 * nkv, hp->n_embd, true, &qkv,
                                 err)) ||
        (st = rl__bind_layer_mat(m, il, "attn_output.weight", hp->n_embd, nq, true, &L->wo, err)) ||
        (st = rl__bind_layer_vec(m, il, "ffn_norm.weight", hp->n_embd, true, &L->ffn_norm, err)) ||
        (st = rl__bind_layer_mat(m, il, "ffn_up.weight", 2 * (int64_t)hp->n_ff, hp->n_embd, true,
                                 &gu, err)) ||
        (st = rl__bind_layer_mat(m, il, "ffn_down.weight", hp->n_embd, hp->n_ff, true, &L->w_down,
                                 err)))
        return st;
    L->wq = rl__mat_rows(&qkv, 0, nq);
    L->wk = rl__mat_rows(&qkv, nq, nkv);
    L->wv = rl__mat_rows(&qkv, nq + nkv, nkv);
    L->w_gate = rl__mat_rows(&gu, 0, hp->n_ff);
    L->w_up = rl__mat_rows(&gu, hp->n_ff, hp->n_ff);
    return RL_OK;
}

const rl__arch rl__arch_phi3 = {
    .name = "phi3",
    .hparams = phi3_hparams,
    .bind_layer = phi3_bind_layer,
    .layer = rl__layer_prenorm,
};
