/* redline model: the bert architecture (BERT encoders for embeddings:
 * bge-small/base/large, all-MiniLM, e5), as llama.cpp's converter writes
 * and llama.cpp reads them.
 *
 *   x = LayerNorm(token_embd[t] + token_types[0] + position_embd[pos])
 *   per layer (post-norm):
 *     x = LayerNorm(x + attn_output(attn(x)) + bo)       attn_output_norm
 *     x = LayerNorm(x + down(gelu(up(x) + b_up)) + b_down) layer_output_norm
 *
 * Attention is non-causal (bert.attention.causal, false by default): every
 * token attends to every token of its sequence, so a sequence runs in one
 * forward (rl_model_embed).  Q/K/V carry biases; no RoPE (positions are the
 * learned table); scale 1/sqrt(head_dim).  Token types are all 0 ("sentence
 * A"), as llama.cpp feeds them.  GELU is the tanh form (ggml_gelu).
 * LayerNorm epsilon: bert.attention.layer_norm_epsilon (required).  There is
 * no output head: the last layer's output is the hidden state that
 * rl_model_embed pools (bert.pooling_type; bge: CLS).  Not supported: the
 * fused attn_qkv layout and the classifier tensors of rerankers (cls.*),
 * which the loader refuses as unused tensors.
 */
#include "model/model-impl.h"

#include <math.h>

static rl_status bert_hparams(rl_model *m, rl_err *err) {
    rl_hparams *hp = &m->hp;
    rl_status st;
    if ((st = rl__hp_f32_req(m, "attention.layer_norm_epsilon", 1e-20, 0.1, &hp->eps, err)) ||
        (st = rl__hp_bool(m, "attention.causal", false, &hp->causal, err)))
        return st;
    hp->n_rot = 0; /* learned positions */
    hp->act = RL__ACT_GELU_TANH;
    return RL_OK;
}

static rl_status bert_bind_globals(rl_model *m, rl_err *err) {
    const int64_t E = m->hp.n_embd;
    rl_status st;
    if ((st = rl__bind_mat(m, "position_embd.weight", m->hp.n_ctx_train, E, true, &m->pos_embd,
                           err)) ||
        (st = rl__bind_vec(m, "token_embd_norm.weight", E, true, &m->tok_norm, err)) ||
        (st = rl__bind_vec(m, "token_embd_norm.bias", E, true, &m->tok_norm_b, err)))
        return st;
    const rl_gguf_tensor *t = rl_gguf_find_tensor(m->gguf, "token_types.weight");
    if (!t) return RL_OK; /* optional, as in llama.cpp */
    if (t->n_dims != 2 || t->ne[1] < 1 || t->ne[1] > 64)
        return rl_err_set(err, RL_ERR_FORMAT,
                          "tensor 'token_types.weight' must be [%lld, n_types] with 1..64 types",
                          (long long)E);
    rl_mat types;
    if ((st = rl__bind_mat(m, "token_types.weight", t->ne[1], E, true, &types, err))) return st;
    float *row = rl__model_own_alloc(m, (size_t)E * sizeof(float));
    if (!row) return rl_err_set(err, RL_ERR_NOMEM, "out of memory for token_types");
    rl_get_row(&types, 0, row);
    m->type_embd0 = row;
    return RL_OK;
}

static rl_status bert_bind_layer(rl_model *m, int32_t il, rl_err *err) {
    const rl_hparams *hp = &m->hp;
    rl_layer *L = &m->layers[il];
    const int64_t E = hp->n_embd, nq = (int64_t)hp->n_head * hp->head_dim,
                  nkv = (int64_t)hp->n_kv_head * hp->head_dim;
    rl_status st;
    if ((st = rl__bind_layer_mat(m, il, "attn_q.weight", nq, E, true, &L->wq, err)) ||
        (st = rl__bind_layer_mat(m, il, "attn_k.weight", nkv, E, true, &L->wk, err)) ||
        (st = rl__bind_layer_mat(m, il, "attn_v.weight", nkv, E, true, &L->wv, err)) ||
        (st = rl__bind_qkv_bias(m, il, true, err)) ||
        (st = rl__bind_layer_mat(m, il, "attn_output.weight", E, nq, true, &L->wo, err)) ||
        (st = rl__bind_layer_vec(m, il, "attn_output.bias", E, true, &L->bo, err)) ||
        (st = rl__bind_layer_vec(m, il, "attn_output_norm.weight", E, true, &L->attn_norm, err)) ||
        (st = rl__bind_layer_vec(m, il, "attn_output_norm.bias", E, true, &L->attn_norm_b, err)) ||
        (st = rl__bind_layer_mat(m, il, "ffn_up.weight", hp->n_ff, E, true, &L->w_up, err)) ||
        (st = rl__bind_layer_vec(m, il, "ffn_up.bias", hp->n_ff, true, &L->b_up, err)) ||
        (st = rl__bind_layer_mat(m, il, "ffn_down.weight", E, hp->n_ff, true, &L->w_down, err)) ||
        (st = rl__bind_layer_vec(m, il, "ffn_down.bias", E, true, &L->b_down, err)) ||
        (st = rl__bind_layer_vec(m, il, "layer_output_norm.weight", E, true, &L->ffn_norm, err)) ||
        (st = rl__bind_layer_vec(m, il, "layer_output_norm.bias", E, true, &L->ffn_norm_b, err)))
        return st;
    return RL_OK;
}

static void bert_embed(rl_model *m, rl__fwd *f) {
    const int64_t E = m->hp.n_embd;
    float *pe = m->tmp; /* one row of scratch */
    for (int32_t j = 0; j < f->n; j++) {
        float *x = m->x + (size_t)j * E;
        /* positions beyond the table were refused (rl_model_embed_max_tokens) */
        RL_ASSERT(f->pos[j] < m->pos_embd.n_rows);
        rl_get_row(&m->pos_embd, f->pos[j], pe);
        for (int64_t d = 0; d < E; d++) x[d] += pe[d] + (m->type_embd0 ? m->type_embd0[d] : 0.0f);
    }
    rl__layernorm_rows(m->x, m->x, m->tok_norm, m->tok_norm_b, f->n, E, m->hp.eps);
}

/* ggml_gelu's tanh form */
static float gelu(float x) {
    return 0.5f * x * (1.0f + tanhf(0.7978845608f * x * (1.0f + 0.044715f * x * x)));
}

/* x[n][E] = LayerNorm(x + y + bias); bias may be NULL */
static void add_norm(float *x, float *y, const float *bias, const float *w, const float *b,
                     int32_t n, int64_t E, float eps) {
    for (int32_t j = 0; j < n; j++) {
        float *xr = x + (size_t)j * E, *yr = y + (size_t)j * E;
        for (int64_t d = 0; d < E; d++) xr[d] += yr[d] + (bias ? bias[d] : 0.0f);
    }
    rl__layernorm_rows(x, x, w, b, n, E, eps);
}

static void bert_layer(rl_model *m, rl__fwd *f, int32_t il) {
    const rl_hparams *hp = &m->hp;
    const rl_layer *L = &m->layers[il];
    const int64_t E = hp->n_embd, F = hp->n_ff;
    rl__block_attn(m, f, il, m->x, m->tmp); /* adds attn_output.bias (L->bo) */
    add_norm(m->x, m->tmp, NULL, L->attn_norm, L->attn_norm_b, f->n, E, hp->eps);
    rl_matmul(&L->w_up, m->x, m->up, f->n, m->mm_scratch, f->tp);
    for (int32_t j = 0; j < f->n; j++) {
        float *u = m->up + (size_t)j * F;
        for (int64_t c = 0; c < F; c++) u[c] = gelu(u[c] + L->b_up[c]);
    }
    rl_matmul(&L->w_down, m->up, m->tmp, f->n, m->mm_scratch, f->tp);
    add_norm(m->x, m->tmp, L->b_down, L->ffn_norm, L->ffn_norm_b, f->n, E, hp->eps);
}

const rl__arch rl__arch_bert = {
    .name = "bert",
    .hparams = bert_hparams,
    .bind_layer = bert_bind_layer,
    .layer = bert_layer,
    .bind_globals = bert_bind_globals,
    .embed = bert_embed,
};
