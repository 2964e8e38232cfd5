/* redline model: loading (hyperparameters, tensor binding and validation,
 * scratch sizing) and the accessors; the forward driver is forward.c.
 *
 * Load order: common hyperparameters -> arch hyperparameters -> global
 * tensors -> per-layer tensors (arch bind_layer) -> per-layer attention
 * setup -> scratch.  Every failure names the key or tensor at fault and
 * frees everything built so far.
 */
#include "model/model-impl.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/buf.h"

static const rl__arch *const archs[] = {&rl__arch_llama,   &rl__arch_qwen2,      &rl__arch_qwen3,
                                        &rl__arch_phi3,    &rl__arch_gemma2,     &rl__arch_gemma3,
                                        &rl__arch_granite, &rl__arch_qwen3moe,   &rl__arch_qwen2moe,
                                        &rl__arch_olmoe,   &rl__arch_granitemoe, &rl__arch_gptoss,
                                        &rl__arch_bert};
#define N_ARCHS (sizeof archs / sizeof archs[0])

/* ---------------------------------------------------------------- helpers */

static rl_status hp_key(const rl_model *m, const char *key, char *buf, size_t cap) {
    int n = snprintf(buf, cap, "%s.%s", m->arch_name, key);
    return (n > 0 && (size_t)n < cap) ? RL_OK : RL_ERR_INVALID;
}

rl_status rl__hp_i32(rl_model *m, const char *key, bool required, int64_t def, int64_t lo,
                     int64_t hi, int32_t *out, rl_err *err) {
    char k[128];
    if (hp_key(m, key, k, sizeof k)) return rl_err_set(err, RL_ERR_INVALID, "key too long");
    if (required && rl_gguf_find_key(m->gguf, k) < 0)
        return rl_err_set(err, RL_ERR_FORMAT, "missing hyperparameter '%s'", k);
    int64_t v;
    rl_status st = rl_gguf_get_i64(m->gguf, k, def, &v, err);
    if (st) return st;
    if (v < lo || v > hi)
        return rl_err_set(err, RL_ERR_FORMAT,
                          "hyperparameter '%s' = %lld out of range [%lld, %lld]", k, (long long)v,
                          (long long)lo, (long long)hi);
    *out = (int32_t)v;
    return RL_OK;
}

rl_status rl__hp_f32(rl_model *m, const char *key, double def, double lo, double hi, float *out,
                     rl_err *err) {
    char k[128];
    if (hp_key(m, key, k, sizeof k)) return rl_err_set(err, RL_ERR_INVALID, "key too long");
    double v;
    rl_status st = rl_gguf_get_f64(m->gguf, k, def, &v, err);
    if (st) return st;
    if (!isfinite(v) || v < lo || v > hi)
        return rl_err_set(err, RL_ERR_FORMAT, "hyperparameter '%s' = %g out of range [%g, %g]", k,
                          v, lo, hi);
    *out = (float)v;
    return RL_OK;
}

rl_status rl__hp_f32_req(rl_model *m, const char *key, double lo, double hi, float *out,
                         rl_err *err) {
    char k[128];
    if (hp_key(m, key, k, sizeof k)) return rl_err_set(err, RL_ERR_INVALID, "key too long");
    if (rl_gguf_find_key(m->gguf, k) < 0)
        return rl_err_set(err, RL_ERR_FORMAT, "missing hyperparameter '%s'", k);
    return rl__hp_f32(m, key, 0.0, lo, hi, out, err);
}

rl_status rl__hp_gemma_query_scale(rl_model *m, int32_t n_layer_27b, rl_err *err) {
    rl_hparams *hp = &m->hp;
    int32_t def = hp->n_layer == n_layer_27b ? hp->n_embd / hp->n_head : hp->head_dim, qpas;
    rl_status st =
        rl__hp_i32(m, "attention.query_pre_attn_scalar", false, def, 1, 1 << 20, &qpas, err);
    if (st) return st;
    hp->attn_scale = 1.0f / sqrtf((float)qpas);
    return RL_OK;
}

rl_status rl__hp_bool(rl_model *m, const char *key, bool def, bool *out, rl_err *err) {
    char k[128];
    if (hp_key(m, key, k, sizeof k)) return rl_err_set(err, RL_ERR_INVALID, "key too long");
    return rl_gguf_get_bool(m->gguf, k, def, out, err);
}

/* Records that tensor t is used by the model (see check_all_used). */
static void mark_used(rl_model *m, const rl_gguf_tensor *t) {
    const rl_gguf_tensor *t0 = rl_gguf_tensor_at(m->gguf, 0);
    int64_t i = t0 ? (int64_t)(t - t0) : -1;
    if (m->t_used && rl_gguf_tensor_at(m->gguf, i) == t) m->t_used[i] = 1;
}

static void shape_str(const rl_gguf_tensor *t, char *buf, size_t cap) {
    int n = snprintf(buf, cap, "[");
    for (uint32_t d = 0; d < t->n_dims && n > 0 && (size_t)n < cap; d++)
        n += snprintf(buf + n, cap - (size_t)n, d ? ", %lld" : "%lld", (long long)t->ne[d]);
    if (n > 0 && (size_t)n < cap) snprintf(buf + n, cap - (size_t)n, "]");
}

void *rl__model_own_alloc(rl_model *m, size_t bytes) {
    if (rl_grow_i32((void **)&m->owned, &m->cap_owned, m->n_owned + 1, sizeof *m->owned))
        return NULL;
    void *p = rl_malloc(bytes ? bytes : 1);
    if (p) m->owned[m->n_owned++] = p;
    return p;
}

/* Validation mode: replaces w's data by a dequantized copy in m->dequant. */
static rl_status dequant_mat(rl_model *m, const char *name, rl_mat *w, rl_err *err) {
    if (w->type == m->dequant_type) return RL_OK;
    const rl_type_traits *tr = rl_type_get(w->type);
    size_t out_row = rl_type_row_size(m->dequant_type, w->n_cols), bytes;
    if (!tr || !tr->to_float)
        return rl_err_set(err, RL_ERR_UNSUPPORTED, "tensor '%s' (%s) cannot be dequantized", name,
                          rl_type_name(w->type));
    if (!rl_mul_size(out_row, (size_t)w->n_rows, &bytes))
        return rl_err_set(err, RL_ERR_LIMIT, "tensor '%s' too large to dequantize", name);
    uint8_t *dst = rl__model_own_alloc(m, bytes);
    float *row = rl_malloc((size_t)w->n_cols * sizeof(float));
    if (!dst || !row) {
        rl_free(row);
        return rl_err_set(err, RL_ERR_NOMEM, "out of memory dequantizing '%s'", name);
    }
    for (int64_t r = 0; r < w->n_rows; r++) {
        const uint8_t *src = (const uint8_t *)w->data + (size_t)r * w->row_size;
        float *o = m->dequant_type == RL_TYPE_F32 ? (float *)(dst + (size_t)r * out_row) : row;
        tr->to_float(src, o, w->n_cols);
        if (m->dequant_type == RL_TYPE_F16) {
            rl_fp16 *h = (rl_fp16 *)(dst + (size_t)r * out_row);
            for (int64_t c = 0; c < w->n_cols; c++) h[c] = rl_f32_to_fp16(row[c]);
        }
    }
    rl_free(row);
    w->type = m->dequant_type;
    w->row_size = out_row;
    w->data = dst;
    return RL_OK;
}

/* rl__bind_mat / rl__bind_mat3: n_mat stacked [n_rows][n_cols] matrices
 * (ne[2] = n_mat; 1 for a plain matrix) bound as one of n_mat*n_rows rows. */
static rl_status bind_mat_n(rl_model *m, const char *name, int64_t n_rows, int64_t n_cols,
                            int64_t n_mat, bool required, rl_mat *out, rl_err *err) {
    memset(out, 0, sizeof *out);
    const rl_gguf_tensor *t = rl_gguf_find_tensor(m->gguf, name);
    if (!t) {
        if (!required) return RL_OK;
        return rl_err_set(err, RL_ERR_FORMAT, "missing tensor '%s' (expected shape [%lld, %lld])",
                          name, (long long)n_cols, (long long)n_rows);
    }
    mark_used(m, t);
    if (t->ne[0] != n_cols || t->ne[1] != n_rows || t->ne[2] != n_mat || t->ne[3] != 1) {
        char s[96];
        shape_str(t, s, sizeof s);
        if (n_mat != 1)
            return rl_err_set(err, RL_ERR_FORMAT,
                              "tensor '%s' has shape %s, expected [%lld, %lld, %lld]", name, s,
                              (long long)n_cols, (long long)n_rows, (long long)n_mat);
        return rl_err_set(err, RL_ERR_FORMAT, "tensor '%s' has shape %s, expected [%lld, %lld]",
                          name, s, (long long)n_cols, (long long)n_rows);
    }
    if (!rl_matmul_supports(t->type))
        return rl_err_set(err, RL_ERR_UNSUPPORTED,
                          "tensor '%s' has type %s, not supported by matmul", name,
                          rl_type_name(t->type));
    if (!t->data) return rl_err_set(err, RL_ERR_FORMAT, "tensor '%s' has no data", name);
    out->type = t->type;
    out->n_rows = n_rows * n_mat;
    out->n_cols = n_cols;
    out->row_size = rl_type_row_size(t->type, n_cols);
    out->data = t->data;
    if (out->row_size == 0)
        return rl_err_set(err, RL_ERR_FORMAT,
                          "tensor '%s': row of %lld not a whole number of %s blocks", name,
                          (long long)n_cols, rl_type_name(t->type));
    m->weight_bytes += t->nbytes;
    return m->dequant ? dequant_mat(m, name, out, err) : RL_OK;
}

rl_status rl__bind_mat(rl_model *m, const char *name, int64_t n_rows, int64_t n_cols, bool required,
                       rl_mat *out, rl_err *err) {
    return bind_mat_n(m, name, n_rows, n_cols, 1, required, out, err);
}

rl_status rl__bind_mat3(rl_model *m, const char *name, int64_t n_rows, int64_t n_cols,
                        int64_t n_mat, bool required, rl_mat *out, rl_err *err) {
    return bind_mat_n(m, name, n_rows, n_cols, n_mat, required, out, err);
}

/* rl__bind_vec (n1 = 0: a vector of n0, whatever its dims) / rl__bind_vec2
 * (n1 > 0: ne = [n0, n1]). */
static rl_status bind_vec_n(rl_model *m, const char *name, int64_t n0, int64_t n1, bool required,
                            const float **out, rl_err *err) {
    int64_t n = n1 > 0 ? n0 * n1 : n0;
    *out = NULL;
    const rl_gguf_tensor *t = rl_gguf_find_tensor(m->gguf, name);
    if (!t) {
        if (!required) return RL_OK;
        return rl_err_set(err, RL_ERR_FORMAT, "missing tensor '%s' (expected shape [%lld])", name,
                          (long long)n);
    }
    mark_used(m, t);
    if (t->n_elements != n || t->ne[0] != n0 || (n1 > 0 && t->ne[1] != n1)) {
        char s[96];
        shape_str(t, s, sizeof s);
        if (n1 > 0)
            return rl_err_set(err, RL_ERR_FORMAT, "tensor '%s' has shape %s, expected [%lld, %lld]",
                              name, s, (long long)n0, (long long)n1);
        return rl_err_set(err, RL_ERR_FORMAT, "tensor '%s' has shape %s, expected [%lld]", name, s,
                          (long long)n);
    }
    if (!t->data) return rl_err_set(err, RL_ERR_FORMAT, "tensor '%s' has no data", name);
    m->weight_bytes += t->nbytes;
    /* always a copy of its own: the forward never reads the file's pages
     * for a vector (each read of a norm would map the file pages around it
     * again, next to matrices whose pages the resident tiles released) */
    const rl_type_traits *tr = rl_type_get(t->type);
    if (!tr || !tr->to_float || n % tr->blck_size != 0)
        return rl_err_set(err, RL_ERR_UNSUPPORTED, "tensor '%s' has type %s, cannot convert to f32",
                          name, rl_type_name(t->type));
    float *buf = rl__model_own_alloc(m, (size_t)n * sizeof(float));
    if (!buf) return rl_err_set(err, RL_ERR_NOMEM, "out of memory converting '%s'", name);
    if (t->type == RL_TYPE_F32)
        memcpy(buf, t->data, (size_t)n * sizeof(float));
    else
        tr->to_float(t->data, buf, n);
    *out = buf;
    return RL_OK;
}

rl_status rl__bind_vec(rl_model *m, const char *name, int64_t n, bool required, const float **out,
                       rl_err *err) {
    return bind_vec_n(m, name, n, 0, required, out, err);
}

rl_status rl__bind_vec2(rl_model *m, const char *name, int64_t n0, int64_t n1, bool required,
                        const float **out, rl_err *err) {
    return bind_vec_n(m, name, n0, n1, required, out, err);
}

rl_status rl__bind_layer_mat(rl_model *m, int32_t il, const char *suffix, int64_t n_rows,
                             int64_t n_cols, bool required, rl_mat *out, rl_err *err) {
    char nm[96];
    snprintf(nm, sizeof nm, "blk.%d.%s", (int)il, suffix);
    return rl__bind_mat(m, nm, n_rows, n_cols, required, out, err);
}

rl_status rl__bind_layer_vec(rl_model *m, int32_t il, const char *suffix, int64_t n, bool required,
                             const float **out, rl_err *err) {
    char nm[96];
    snprintf(nm, sizeof nm, "blk.%d.%s", (int)il, suffix);
    return rl__bind_vec(m, nm, n, required, out, err);
}

rl_status rl__bind_layer_attn(rl_model *m, int32_t il, rl_err *err) {
    const rl_hparams *hp = &m->hp;
    rl_layer *L = &m->layers[il];
    int64_t nq = (int64_t)hp->n_head * hp->head_dim, nkv = (int64_t)hp->n_kv_head * hp->head_dim;
    rl_status st;
    if ((st =
             rl__bind_layer_vec(m, il, "attn_norm.weight", hp->n_embd, true, &L->attn_norm, err)) ||
        (st = rl__bind_layer_mat(m, il, "attn_q.weight", nq, hp->n_embd, true, &L->wq, err)) ||
        (st = rl__bind_layer_mat(m, il, "attn_k.weight", nkv, hp->n_embd, true, &L->wk, err)) ||
        (st = rl__bind_layer_mat(m, il, "attn_v.weight", nkv, hp->n_embd, true, &L->wv, err)) ||
        (st = rl__bind_layer_mat(m, il, "attn_output.weight", hp->n_embd, nq, true, &L->wo, err)))
        return st;
    return RL_OK;
}

rl_status rl__bind_layer_common(rl_model *m, int32_t il, rl_err *err) {
    const rl_hparams *hp = &m->hp;
    rl_layer *L = &m->layers[il];
    rl_status st;
    if ((st = rl__bind_layer_attn(m, il, err)) ||
        (st = rl__bind_layer_vec(m, il, "ffn_norm.weight", hp->n_embd, true, &L->ffn_norm, err)))
        return st;
    if (hp->moe.n_expert > 0) return rl__bind_moe(m, il, true, err); /* experts instead */
    if ((st = rl__bind_layer_mat(m, il, "ffn_gate.weight", hp->n_ff, hp->n_embd, true, &L->w_gate,
                                 err)) ||
        (st = rl__bind_layer_mat(m, il, "ffn_up.weight", hp->n_ff, hp->n_embd, true, &L->w_up,
                                 err)) ||
        (st = rl__bind_layer_mat(m, il, "ffn_down.weight", hp->n_embd, hp->n_ff, true, &L->w_down,
                                 err)))
        return st;
    return RL_OK;
}

rl_status rl__bind_qkv_bias(rl_model *m, int32_t il, bool required, rl_err *err) {
    rl_layer *L = &m->layers[il];
    int64_t nq = (int64_t)m->hp.n_head * m->hp.head_dim;
    int64_t nkv = (int64_t)m->hp.n_kv_head * m->hp.head_dim;
    rl_status st;
    if ((st = rl__bind_layer_vec(m, il, "attn_q.bias", nq, required, &L->bq, err)) ||
        (st = rl__bind_layer_vec(m, il, "attn_k.bias", nkv, required, &L->bk, err)) ||
        (st = rl__bind_layer_vec(m, il, "attn_v.bias", nkv, required, &L->bv, err)))
        return st;
    return RL_OK;
}

rl_status rl__bind_qk_norm(rl_model *m, int32_t il, rl_err *err) {
    rl_layer *L = &m->layers[il];
    rl_status st =
        rl__bind_layer_vec(m, il, "attn_q_norm.weight", m->hp.head_dim, true, &L->q_norm, err);
    if (st) return st;
    return rl__bind_layer_vec(m, il, "attn_k_norm.weight", m->hp.head_dim, true, &L->k_norm, err);
}

rl_status rl__bind_post_norms(rl_model *m, int32_t il, rl_err *err) {
    rl_layer *L = &m->layers[il];
    rl_status st = rl__bind_layer_vec(m, il, "post_attention_norm.weight", m->hp.n_embd, true,
                                      &L->post_attn_norm, err);
    if (st) return st;
    return rl__bind_layer_vec(m, il, "post_ffw_norm.weight", m->hp.n_embd, true, &L->post_ffn_norm,
                              err);
}

rl_mat rl__mat_rows(const rl_mat *w, int64_t r0, int64_t n) {
    RL_ASSERT(r0 >= 0 && n >= 0 && r0 + n <= w->n_rows);
    RL_ASSERT(w->layout == RL_MAT_ROWS || (r0 % 8 == 0 && n % 8 == 0));
    rl_mat v = *w;
    v.n_rows = n;
    v.data = (const uint8_t *)w->data + (size_t)r0 * w->row_size;
    return v;
}

rl_status rl__bind_rope_factors(rl_model *m, bool longrope, rl_err *err) {
    int64_t n = m->hp.n_rot / 2;
    rl_status st;
    if (!longrope) return rl__bind_vec(m, "rope_freqs.weight", n, false, &m->rope_freqs, err);
    if ((st = rl__bind_vec(m, "rope_factors_long.weight", n, false, &m->rope_long, err)) ||
        (st = rl__bind_vec(m, "rope_factors_short.weight", n, false, &m->rope_short, err)))
        return st;
    return RL_OK;
}

/* rope.scaling.* (llama.cpp's reading: an absent type is linear, the factor
 * falls back to the old rope.scale_linear key, 0 means none). */
static rl_status hparams_rope_scaling(rl_model *m, rl_err *err) {
    static const char *const names[] = {"none", "linear", "yarn", "longrope"};
    rl_hparams *hp = &m->hp;
    char k[128];
    rl_gguf_str stype;
    rl_status st;
    snprintf(k, sizeof k, "%s.rope.scaling.type", m->arch_name);
    if ((st = rl_gguf_get_str(m->gguf, k, &stype, err))) return st;
    hp->rope_scaling = RL__ROPE_SCALING_LINEAR;
    if (stype.ptr) {
        int found = -1;
        for (int i = 0; i < 4; i++)
            if (strlen(names[i]) == stype.len && !memcmp(names[i], stype.ptr, stype.len)) found = i;
        if (found < 0)
            return rl_err_set(err, RL_ERR_UNSUPPORTED,
                              "%s = '%.*s' not supported (none, linear, yarn, longrope)", k,
                              (int)(stype.len > 32 ? 32 : stype.len), stype.ptr);
        hp->rope_scaling = (rl__rope_scaling)found;
    }
    float factor;
    snprintf(k, sizeof k, "%s.rope.scaling.factor", m->arch_name);
    const char *fkey =
        rl_gguf_find_key(m->gguf, k) >= 0 ? "rope.scaling.factor" : "rope.scale_linear";
    if ((st = rl__hp_f32(m, fkey, 0.0, 0.0, 1e6, &factor, err)) ||
        (st = rl__hp_f32(m, "rope.scaling.attn_factor", 1.0, 1e-3, 1e3, &hp->rope_attn_factor,
                         err)) ||
        (st = rl__hp_i32(m, "rope.scaling.original_context_length", false, hp->n_ctx_train, 1,
                         1 << 24, &hp->n_ctx_orig, err)))
        return st;
    if (factor != 0.0f && factor < 1e-3f)
        return rl_err_set(err, RL_ERR_FORMAT,
                          "hyperparameter '%s.%s' = %g out of range [0.001, 1e6]", m->arch_name,
                          fkey, factor);
    hp->rope_freq_scale =
        factor == 0.0f || hp->rope_scaling == RL__ROPE_SCALING_NONE ? 1.0f : 1.0f / factor;
    if (hp->rope_scaling == RL__ROPE_SCALING_YARN && hp->rope_freq_scale > 1.0f)
        return rl_err_set(err, RL_ERR_FORMAT,
                          "%s.rope.scaling.factor = %g: YaRN needs a factor >= 1", m->arch_name,
                          factor);
    hp->rope_freq_scale_local = hp->rope_freq_scale;
    return RL_OK;
}

/* Hyperparameters every supported architecture shares. */
static rl_status hparams_common(rl_model *m, rl_err *err) {
    rl_hparams *hp = &m->hp;
    rl_status st;
    if ((st = rl__hp_i32(m, "embedding_length", true, 0, 1, RL_MODEL_MAX_DIM, &hp->n_embd, err)) ||
        (st = rl__hp_i32(m, "block_count", true, 0, 1, RL_MODEL_MAX_LAYERS, &hp->n_layer, err)) ||
        (st = rl__hp_i32(m, "attention.head_count", true, 0, 1, RL_MODEL_MAX_HEADS, &hp->n_head,
                         err)) ||
        (st = rl__hp_i32(m, "attention.head_count_kv", false, hp->n_head, 1, RL_MODEL_MAX_HEADS,
                         &hp->n_kv_head, err)) ||
        (st = rl__hp_i32(m, "feed_forward_length", true, 0, 1, RL_MODEL_MAX_DIM, &hp->n_ff, err)) ||
        (st = rl__hp_i32(m, "context_length", false, 2048, 1, 1 << 24, &hp->n_ctx_train, err)))
        return st;
    if (hp->n_head % hp->n_kv_head != 0)
        return rl_err_set(err, RL_ERR_FORMAT,
                          "%s.attention.head_count (%d) is not a multiple of head_count_kv (%d)",
                          m->arch_name, (int)hp->n_head, (int)hp->n_kv_head);
    /* the context this model runs with: the caller's, else the engine's
     * default (LongRoPE picks its factors by it) */
    if (hp->n_ctx <= 0) hp->n_ctx = hp->n_ctx_train < 4096 ? hp->n_ctx_train : 4096;
    char k[128];
    snprintf(k, sizeof k, "%s.attention.key_length", m->arch_name);
    if (rl_gguf_find_key(m->gguf, k) < 0 && hp->n_embd % hp->n_head != 0)
        return rl_err_set(err, RL_ERR_FORMAT,
                          "%s.embedding_length (%d) is not a multiple of attention.head_count (%d)",
                          m->arch_name, (int)hp->n_embd, (int)hp->n_head);
    int32_t vdim;
    if ((st = rl__hp_i32(m, "attention.key_length", false, hp->n_embd / hp->n_head, 2, 4096,
                         &hp->head_dim, err)) ||
        (st = rl__hp_i32(m, "attention.value_length", false, hp->head_dim, 1, 4096, &vdim, err)))
        return st;
    if (vdim != hp->head_dim)
        return rl_err_set(err, RL_ERR_UNSUPPORTED,
                          "%s.attention.value_length (%d) differs from key_length (%d)",
                          m->arch_name, (int)vdim, (int)hp->head_dim);
    if ((int64_t)hp->n_head * hp->head_dim > RL_MODEL_MAX_DIM)
        return rl_err_set(err, RL_ERR_FORMAT,
                          "%s.attention.head_count (%d) x key_length (%d) exceeds %d", m->arch_name,
                          (int)hp->n_head, (int)hp->head_dim, RL_MODEL_MAX_DIM);
    if ((st = rl__hp_i32(m, "rope.dimension_count", false, hp->head_dim, 2,
                         hp->head_dim < 1024 ? hp->head_dim : 1024, &hp->n_rot, err)))
        return st;
    if (hp->n_rot % 2)
        return rl_err_set(err, RL_ERR_FORMAT, "%s.rope.dimension_count (%d) must be even",
                          m->arch_name, (int)hp->n_rot);
    if ((st = rl__hp_f32(m, "attention.layer_norm_rms_epsilon", 1e-5, 1e-12, 0.1, &hp->eps, err)) ||
        (st = rl__hp_f32(m, "rope.freq_base", 10000.0, 1.0, 1e12, &hp->rope_base, err)) ||
        (st = rl__hp_f32(m, "attn_logit_softcapping", 0.0, 0.0, 1e6, &hp->attn_softcap, err)) ||
        (st = rl__hp_f32(m, "final_logit_softcapping", 0.0, 0.0, 1e6, &hp->final_softcap, err)))
        return st;
    hp->rope_base_local = hp->rope_base;
    if ((st = hparams_rope_scaling(m, err))) return st;
    hp->attn_scale = 1.0f / sqrtf((float)hp->head_dim);
    hp->embd_scale = 1.0f;
    hp->resid_scale = 1.0f;
    hp->logit_mul = 1.0f;
    hp->rope_mode = RL_ROPE_NORMAL;
    hp->act = RL__ACT_SILU;
    hp->causal = true;
    int32_t pool;
    if ((st = rl__hp_i32(m, "pooling_type", false, RL_POOLING_MEAN, 0, 3, &pool, err))) return st;
    hp->pooling = pool == 0 ? RL_POOLING_MEAN : (rl_pooling)pool;
    return RL_OK;
}

/* Global tensors: embeddings, final norm, output (tied if absent). */
static rl_status bind_globals(rl_model *m, rl_err *err) {
    const rl_gguf_tensor *t = rl_gguf_find_tensor(m->gguf, "token_embd.weight");
    if (!t)
        return rl_err_set(err, RL_ERR_FORMAT,
                          "missing tensor 'token_embd.weight' (expected shape [%d, n_vocab])",
                          (int)m->hp.n_embd);
    if (t->n_dims != 2 || t->ne[0] != m->hp.n_embd || t->ne[1] < 1 || t->ne[1] > (1 << 24)) {
        char s[96];
        shape_str(t, s, sizeof s);
        return rl_err_set(err, RL_ERR_FORMAT,
                          "tensor 'token_embd.weight' has shape %s, expected [%d, n_vocab]", s,
                          (int)m->hp.n_embd);
    }
    m->hp.n_vocab = (int32_t)t->ne[1];
    int32_t meta_vocab;
    rl_status st = rl__hp_i32(m, "vocab_size", false, m->hp.n_vocab, 1, 1 << 24, &meta_vocab, err);
    if (st) return st;
    if (meta_vocab != m->hp.n_vocab)
        return rl_err_set(err, RL_ERR_FORMAT,
                          "%s.vocab_size (%d) differs from token_embd rows (%d)", m->arch_name,
                          (int)meta_vocab, (int)m->hp.n_vocab);
    const rl_type_traits *tr = rl_type_get(t->type);
    if (!tr || !tr->to_float)
        return rl_err_set(err, RL_ERR_UNSUPPORTED, "tensor 'token_embd.weight' has type %s",
                          rl_type_name(t->type));
    if (!m->has_io) return RL_OK; /* a later pipeline stage: n_vocab from the header only */
    if ((st = rl__bind_mat(m, "token_embd.weight", m->hp.n_vocab, m->hp.n_embd, true, &m->tok_embd,
                           err)))
        return st;
    if (m->arch->bind_globals) return m->arch->bind_globals(m, err);
    if ((st = rl__bind_vec(m, "output_norm.weight", m->hp.n_embd, true, &m->output_norm, err)))
        return st;
    if ((st =
             rl__bind_mat(m, "output.weight", m->hp.n_vocab, m->hp.n_embd, false, &m->output, err)))
        return st;
    if (!m->output.data) m->output = m->tok_embd; /* tied embeddings */
    return RL_OK;
}

/* Every tensor of the file must be one the architecture uses (llama.cpp
 * refuses such files too): an unknown tensor is a feature redline would
 * silently skip, e.g. a bias the forward does not add. */
/* A pipeline stage leaves out the other stages' layers (blk.N.* with N
 * outside [l0, l1)) and, after stage 0, the embeddings and the head; the
 * stage holding them checks those. */
static bool other_stage_tensor(const rl_model *m, const char *name) {
    if (!m->has_io && (!strcmp(name, "token_embd.weight") || !strcmp(name, "output_norm.weight") ||
                       !strcmp(name, "output.weight")))
        return true;
    int il, len = 0;
    if (sscanf(name, "blk.%d.%n", &il, &len) == 1 && len > 0) return il < m->l0 || il >= m->l1;
    return false;
}

static rl_status check_all_used(rl_model *m, rl_err *err) {
    int64_t n = rl_gguf_n_tensors(m->gguf);
    for (int64_t i = 0; i < n; i++)
        if (!m->t_used[i] && !other_stage_tensor(m, rl_gguf_tensor_at(m->gguf, i)->name))
            return rl_err_set(err, RL_ERR_UNSUPPORTED,
                              "tensor '%s' is not used by the %s architecture (not supported)",
                              rl_gguf_tensor_at(m->gguf, i)->name, m->arch_name);
    return RL_OK;
}

/* RoPE of a layer (sliding-window layers use the local base and scale);
 * LongRoPE's long factors when the context exceeds the original one, as
 * llama.cpp picks them. */
static rl_rope_cfg layer_rope(const rl_model *m, bool swa) {
    const rl_hparams *hp = &m->hp;
    rl_rope_cfg c =
        rl_rope_cfg_plain(hp->n_rot, swa ? hp->rope_base_local : hp->rope_base,
                          swa ? hp->rope_freq_scale_local : hp->rope_freq_scale, hp->rope_mode);
    c.freq_factors = m->rope_freqs                ? m->rope_freqs
                     : hp->n_ctx > hp->n_ctx_orig ? m->rope_long
                                                  : m->rope_short;
    c.attn_factor = hp->rope_attn_factor;
    if (hp->rope_scaling == RL__ROPE_SCALING_YARN) {
        c.ext_factor = 1.0f; /* beta_fast 32, beta_slow 1: llama.cpp's defaults */
        rl_rope_yarn_corr_dims(hp->n_rot, hp->n_ctx_orig, c.base, 32.0f, 1.0f, c.corr_dims);
    }
    return c;
}

/* Resident tiles (kernels.h, rl_mat_make_resident): each layer matrix whose
 * type has them is repacked once into memory the model owns, then the
 * file's pages it came from are released, so resident memory stays one
 * copy.  Stacked experts only when every expert's rows are whole groups of
 * 8 (the forward takes views of them).  The head too where the table has
 * pair leaves for it: a tied embedding table then reads its rows from the
 * resident layout (rl_get_row), and a restricted head (rl_batch.n_vocab_out)
 * is a view of its first rows. */
static rl_status make_one_resident(rl_model *m, rl_mat *w, rl_threadpool *tp, rl_err *err) {
    size_t n = w->data ? rl_mat_resident_bytes(w) : 0;
    if (!n) return RL_OK;
    void *dst = rl__model_own_alloc(m, n);
    if (!dst) return rl_err_set(err, RL_ERR_NOMEM, "out of memory repacking weights");
    const void *src = w->data;
    const size_t n_src = (size_t)w->n_rows * w->row_size; /* (q8_0's layout is larger) */
    rl_mat_make_resident_tp(w, dst, tp);
    rl_gguf_release(m->gguf, src, n_src);
    return RL_OK;
}

static rl_status make_resident(rl_model *m, int32_t n_threads, rl_err *err) {
    rl_status st = RL_OK;
    if (n_threads <= 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        n_threads = n < 1 ? 1 : n > 64 ? 64 : (int32_t)n;
    }
    /* a matrix at a time, its groups across the threads; NULL: this thread */
    rl_threadpool *tp = n_threads > 1 ? rl_threadpool_new(n_threads) : NULL;
    for (int32_t il = m->l0; il < m->l1 && !st; il++) {
        rl_layer *L = &m->layers[il];
        rl_mat *ms[] = {&L->wq,       &L->wk,     &L->wv,          &L->wo,        &L->w_gate,
                        &L->w_up,     &L->w_down, &L->moe.sh_gate, &L->moe.sh_up, &L->moe.sh_down,
                        &L->moe.gate, &L->moe.up, &L->moe.down};
        size_t n = sizeof ms / sizeof ms[0];
        if (m->hp.moe.n_ff_exp % 8 != 0 || m->hp.n_embd % 8 != 0) n -= 3;
        for (size_t j = 0; j < n && !st; j++) st = make_one_resident(m, ms[j], tp, err);
    }
    /* the head only with the pair leaves or an 8-row leaf as fast at one
     * token as the per-row dots (rl_mat_resident_head): a resident head
     * is batch-invariant on the tiles, so many decoded tokens take them
     * (AVX2 q6_K or q4_K head: 32 sequences 1.2x, Qwen2.5-1.5B on Zen 3) */
    if (!st && m->output.data && rl_mat_resident_head(&m->output)) {
        const bool tied = m->output.data == m->tok_embd.data;
        st = make_one_resident(m, &m->output, tp, err);
        if (!st && tied) m->tok_embd = m->output;
    }
    rl_threadpool_free(tp);
    return st;
}

static size_t max_sz(size_t a, size_t b) {
    return a > b ? a : b;
}

static rl_status alloc_scratch(rl_model *m, rl_err *err) {
    const rl_hparams *hp = &m->hp;
    size_t B = (size_t)m->max_batch;
    size_t nq = (size_t)hp->n_head * hp->head_dim, nkv = (size_t)hp->n_kv_head * hp->head_dim;
    float **bufs[] = {&m->x, &m->xn, &m->tmp, &m->q, &m->k, &m->v, &m->att, &m->gate, &m->up};
    size_t widths[] = {hp->n_embd, hp->n_embd, hp->n_embd, nq, nkv, nkv, nq, hp->n_ff, hp->n_ff};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) {
        *bufs[i] = rl_calloc(B * widths[i], sizeof(float));
        if (!*bufs[i]) return rl_err_set(err, RL_ERR_NOMEM, "out of memory for activations");
    }
    size_t s = rl_matmul_scratch_size(&m->output, m->max_batch);
    s = max_sz(s, rl_matmul_scratch_size(&m->tok_embd, m->max_batch));
    for (int32_t il = 0; il < hp->n_layer; il++) {
        const rl_layer *L = &m->layers[il];
        const rl_mat *ms[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
        for (size_t j = 0; j < sizeof ms / sizeof ms[0]; j++)
            s = max_sz(s, rl_matmul_scratch_size(ms[j], m->max_batch));
    }
    if (hp->moe.n_expert > 0) {
        for (int32_t il = 0; il < hp->n_layer; il++)
            s = max_sz(s, rl__moe_mm_scratch_size(&hp->moe, &m->layers[il].moe, m->max_batch));
        rl_status st = rl__moe_scratch_init(&m->moe_s, &hp->moe, m->max_batch, err);
        if (st) return st;
    }
    m->mm_scratch_size = s;
    m->mm_scratch = rl_malloc(s ? s : 1);
    m->order = rl_calloc(B, sizeof(int32_t));
    m->slot_of = rl_calloc(B, sizeof(int32_t));
    m->tok_s = rl_calloc(B, sizeof(int32_t));
    m->pos_s = rl_calloc(B, sizeof(int32_t));
    m->bt_s = rl_calloc(B, sizeof(*m->bt_s));
    m->run_start = rl_calloc(B + 1, sizeof(int32_t));
    m->att_args = rl_calloc(B, sizeof *m->att_args);
    m->attn_pos = rl_calloc(B, sizeof(int32_t));
    m->pool_acc = rl_calloc((size_t)hp->n_embd, sizeof(double));
    m->emb_idx = rl_calloc(2 * B, sizeof(int32_t));
    m->fast_s = rl_calloc(B, sizeof(bool));
    if (!m->fast_s || !m->mm_scratch || !m->order || !m->slot_of || !m->tok_s || !m->pos_s ||
        !m->bt_s || !m->run_start || !m->att_args || !m->attn_pos || !m->pool_acc || !m->emb_idx)
        return rl_err_set(err, RL_ERR_NOMEM, "out of memory for scratch");
    return RL_OK;
}

/* Reads one byte per page of each weight so the first forward does not
 * page-fault; reports progress per layer. */
static void prefault(rl_model *m, const rl_model_opts *o) {
    volatile uint8_t sink = 0;
    int64_t n = rl_gguf_n_tensors(m->gguf);
    for (int64_t i = 0; i < n; i++) {
        const rl_gguf_tensor *t = rl_gguf_tensor_at(m->gguf, i);
        const uint8_t *p = t->data;
        if (!p || !m->t_used[i]) continue; /* a pipeline stage reads its own tensors only */
        for (size_t off = 0; off < t->nbytes; off += 4096) sink ^= p[off];
        if (o->progress && (i % 16 == 15 || i + 1 == n))
            o->progress(0.2f + 0.8f * (float)(i + 1) / (float)n, "reading weights", o->progress_ud);
    }
    (void)sink;
}

/* ----------------------------------------------------------------- load */

rl_status rl_model_load_gguf(rl_gguf *g, const rl_model_opts *opts, rl_model **out, rl_err *err) {
    rl_model_opts o = {0};
    if (opts) o = *opts;
    *out = NULL;
    if (!g) return rl_err_set(err, RL_ERR_INVALID, "model: no GGUF reader");
    if (o.max_batch == 0) o.max_batch = 512;
    if (o.max_batch < 1 || o.max_batch > (1 << 20)) {
        rl_gguf_close(g);
        return rl_err_set(err, RL_ERR_INVALID, "model: max_batch %d out of range [1, 1048576]",
                          (int)o.max_batch);
    }
    rl_model *m = rl_calloc(1, sizeof *m);
    if (!m) {
        rl_gguf_close(g);
        return rl_err_set(err, RL_ERR_NOMEM, "out of memory");
    }
    m->gguf = g;
    m->max_batch = o.max_batch;
    if (o.weights != RL_MODEL_WEIGHTS_STORED && o.weights != RL_MODEL_WEIGHTS_F32 &&
        o.weights != RL_MODEL_WEIGHTS_F16) {
        rl_model_free(m);
        return rl_err_set(err, RL_ERR_INVALID, "model: opts.weights %d unknown", (int)o.weights);
    }
    m->dequant = o.weights != RL_MODEL_WEIGHTS_STORED;
    m->dequant_type = o.weights == RL_MODEL_WEIGHTS_F16 ? RL_TYPE_F16 : RL_TYPE_F32;
    rl_status st;
    rl_gguf_str s;
    if ((st = rl_gguf_get_str(g, "general.architecture", &s, err))) goto fail;
    if (!s.ptr) {
        st = rl_err_set(err, RL_ERR_FORMAT, "missing key 'general.architecture'");
        goto fail;
    }
    for (size_t i = 0; i < N_ARCHS; i++)
        if (strlen(archs[i]->name) == s.len && !memcmp(archs[i]->name, s.ptr, s.len))
            m->arch = archs[i];
    if (!m->arch) {
        char list[256];
        size_t n = 0;
        for (size_t i = 0; i < N_ARCHS; i++)
            n += (size_t)snprintf(list + n, sizeof list - n, i ? ", %s" : "%s", archs[i]->name);
        st = rl_err_set(err, RL_ERR_UNSUPPORTED,
                        "general.architecture '%.*s' not supported (supported: %s)",
                        (int)(s.len > 64 ? 64 : s.len), s.ptr, list);
        goto fail;
    }
    snprintf(m->arch_name, sizeof m->arch_name, "%s", m->arch->name);
    if ((st = rl_gguf_get_str(g, "general.name", &s, err))) goto fail;
    if (s.ptr) snprintf(m->name, sizeof m->name, "%.*s", (int)(s.len > 127 ? 127 : s.len), s.ptr);

    m->t_used = rl_calloc((size_t)rl_gguf_n_tensors(g) + 1, 1);
    if (!m->t_used) {
        st = rl_err_set(err, RL_ERR_NOMEM, "out of memory");
        goto fail;
    }
    m->hp.n_ctx = o.n_ctx;
    if ((st = hparams_common(m, err)) || (st = m->arch->hparams(m, err))) goto fail;
    if (o.n_stages < 0 || o.n_stages > m->hp.n_layer || o.stage < 0 ||
        (o.n_stages > 1 && o.stage >= o.n_stages)) {
        st = rl_err_set(err, RL_ERR_INVALID,
                        "pipeline stage %d of %d: need 0 <= stage < n_stages <= "
                        "n_layer (%d)",
                        (int)o.stage, (int)o.n_stages, (int)m->hp.n_layer);
        goto fail;
    }
    if (o.n_stages > 1) {
        m->l0 = (int32_t)((int64_t)o.stage * m->hp.n_layer / o.n_stages);
        m->l1 = (int32_t)((int64_t)(o.stage + 1) * m->hp.n_layer / o.n_stages);
    } else {
        m->l0 = 0;
        m->l1 = m->hp.n_layer;
    }
    m->has_io = m->l0 == 0;
    if ((st = bind_globals(m, err))) goto fail;
    m->layers = rl_calloc((size_t)m->hp.n_layer, sizeof *m->layers);
    if (!m->layers) {
        st = rl_err_set(err, RL_ERR_NOMEM, "out of memory");
        goto fail;
    }
    m->kv_stage = rl_calloc((size_t)m->hp.n_layer, sizeof *m->kv_stage);
    if (!m->kv_stage) {
        st = rl_err_set(err, RL_ERR_NOMEM, "out of memory");
        goto fail;
    }
    for (int32_t il = m->l0; il < m->l1; il++) {
        if ((st = m->arch->bind_layer(m, il, err))) goto fail;
        rl_layer *L = &m->layers[il];
        /* llama.cpp's rule: pattern 0 = every layer local, else layer il
         * is local iff il % p < p - 1 (pattern 1: none) */
        bool swa = m->hp.sliding_window > 0 &&
                   (m->hp.swa_pattern == 0 || il % m->hp.swa_pattern < m->hp.swa_pattern - 1);
        L->window = swa ? m->hp.sliding_window : 0;
        L->rope = layer_rope(m, swa);
        if (o.progress)
            o.progress(0.2f * (float)(il + 1) / (float)m->hp.n_layer, "checking tensors",
                       o.progress_ud);
    }
    if ((st = check_all_used(m, err))) goto fail;
    if (!m->hp.causal && o.encoder_batch > m->max_batch) {
        int32_t nb = o.encoder_batch < m->hp.n_ctx_train ? o.encoder_batch : m->hp.n_ctx_train;
        if (nb > (1 << 20)) {
            st = rl_err_set(err, RL_ERR_INVALID,
                            "encoder batch %d (context_length) out of range [1, 1048576]", (int)nb);
            goto fail;
        }
        if (nb > m->max_batch) m->max_batch = nb;
    }
    if ((st = alloc_scratch(m, err))) goto fail;
    if (o.prefault) prefault(m, &o);
    /* after the prefault, which would read the released pages back in */
    if (!m->dequant && (st = make_resident(m, o.load_threads, err))) goto fail;
    rl_free(m->t_used);
    m->t_used = NULL;
    if (o.progress) o.progress(1.0f, "done", o.progress_ud);
    *out = m;
    return RL_OK;
fail:
    rl_err_prefix(err, "model");
    rl_model_free(m);
    return st;
}

rl_status rl_model_load(const char *path, const rl_model_opts *opts, rl_model **out, rl_err *err) {
    *out = NULL;
    rl_gguf *g = NULL;
    rl_status st = rl_gguf_open(path, &g, err);
    if (st) return st;
    return rl_model_load_gguf(g, opts, out, err);
}

void rl_model_free(rl_model *m) {
    if (!m) return;
    for (int32_t i = 0; i < m->n_owned; i++) rl_free(m->owned[i]);
    rl_free(m->owned);
    rl_free(m->layers);
    rl_free(m->kv_stage);
    rl_free(m->t_used);
    float *bufs[] = {m->x, m->xn, m->tmp, m->q, m->k, m->v, m->att, m->gate, m->up};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) rl_free(bufs[i]);
    rl_free(m->mm_scratch);
    rl_free(m->order);
    rl_free(m->slot_of);
    rl_free(m->tok_s);
    rl_free(m->fast_s);
    rl_free(m->pos_s);
    rl_free((void *)m->bt_s);
    rl_free(m->run_start);
    rl_free(m->att_args);
    rl_free(m->attn_pos);
    rl_free(m->pool_acc);
    rl_free(m->emb_idx);
    rl__moe_scratch_free(&m->moe_s);
    rl_gguf_close(m->gguf);
    rl_free(m);
}

/* ------------------------------------------------------------ accessors */

const char *rl_model_arch(const rl_model *m) {
    return m->arch_name;
}
const char *rl_model_name(const rl_model *m) {
    return m->name;
}
int32_t rl_model_n_vocab(const rl_model *m) {
    return m->hp.n_vocab;
}
int32_t rl_model_n_ctx_train(const rl_model *m) {
    return m->hp.n_ctx_train;
}
int32_t rl_model_n_layer(const rl_model *m) {
    return m->hp.n_layer;
}
int32_t rl_model_n_embd(const rl_model *m) {
    return m->hp.n_embd;
}
int32_t rl_model_n_head(const rl_model *m) {
    return m->hp.n_head;
}
int32_t rl_model_n_kv_head(const rl_model *m) {
    return m->hp.n_kv_head;
}
int32_t rl_model_head_dim(const rl_model *m) {
    return m->hp.head_dim;
}
int32_t rl_model_max_batch(const rl_model *m) {
    return m->max_batch;
}
size_t rl_model_weight_bytes(const rl_model *m) {
    return m->weight_bytes;
}
const rl_gguf *rl_model_gguf(const rl_model *m) {
    return m->gguf;
}

rl_pooling rl_model_pooling(const rl_model *m) {
    return m->hp.pooling;
}
bool rl_model_has_head(const rl_model *m) {
    return m->output.data != NULL;
}
int32_t rl_model_embed_max_tokens(const rl_model *m) {
    int32_t n = m->hp.causal ? m->hp.n_ctx : m->max_batch;
    /* a position table has n_ctx_train rows */
    if ((m->pos_embd.data || !m->hp.causal) && n > m->hp.n_ctx_train) n = m->hp.n_ctx_train;
    return n;
}

rl_model_kv_shape rl_model_kv_shape_of(const rl_model *m) {
    rl_model_kv_shape s = {m->l1 - m->l0, m->hp.n_kv_head, m->hp.head_dim};
    return s;
}

void rl_model_layer_range(const rl_model *m, int32_t *l0, int32_t *l1, bool *has_io) {
    *l0 = m->l0;
    *l1 = m->l1;
    *has_io = m->has_io;
}
