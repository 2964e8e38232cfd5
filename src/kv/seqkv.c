/* The contiguous single-process KV cache of kv/seqkv.h: each sequence a
 * contiguous run of blocks, evaluated in chunks of the model's max_batch.
 * See seqkv.h for the contract. */
#include "kv/seqkv.h"

#include <stdlib.h>
#include <string.h>

void rl_seqkv_free(rl_seqkv *kv) {
    if (!kv) return;
    rl_free(kv->layers);
    rl_free(kv->block_table);
    rl_free((void *)kv->tables);
    rl_free(kv->n_blocks);
    rl_free(kv->k_mem);
    rl_free(kv->v_mem);
    rl_free(kv->tok);
    rl_free(kv->pos);
    rl_free(kv->seq);
    rl_free(kv->want);
    rl_free(kv->prompt_s);
    memset(kv, 0, sizeof *kv);
}

/* K and V page types chosen separately: any type rl_kv_type_supported()
 * accepts for the model's head_dim (f16, f32, q8_0, q8_64, q4_0, iq4_nl).
 * block_size 0 = 16. */
rl_status rl_seqkv_init_kv(rl_seqkv *kv, const rl_model *m, int32_t n_ctx, int32_t n_seq,
                           int32_t block_size, rl_type type, rl_type v_type, rl_err *err) {
    memset(kv, 0, sizeof *kv);
    if (n_ctx < 1)
        return rl_err_set(err, RL_ERR_INVALID, "context size %d must be >= 1", (int)n_ctx);
    if (n_seq < 1) return rl_err_set(err, RL_ERR_INVALID, "sequence count must be >= 1");
    if (block_size == 0) block_size = 16;
    rl_model_kv_shape s = rl_model_kv_shape_of(m);
    if (!rl_kv_type_supported(type, s.head_dim) || !rl_kv_type_supported(v_type, s.head_dim))
        return rl_err_set(err, RL_ERR_UNSUPPORTED, "KV types %s/%s not supported for head_dim %d",
                          rl_type_name(type), rl_type_name(v_type), (int)s.head_dim);
    kv->n_layer = s.n_layer;
    kv->n_ctx = n_ctx;
    kv->n_seq = n_seq;
    kv->block_size = block_size;
    kv->n_blocks_seq = (n_ctx + block_size - 1) / block_size;
    kv->max_batch = rl_model_max_batch(m);
    size_t row = rl_type_row_size(type, s.head_dim), v_row = rl_type_row_size(v_type, s.head_dim);
    size_t block_bytes = (size_t)s.n_kv_head * (size_t)block_size * row;
    size_t v_block_bytes = (size_t)s.n_kv_head * (size_t)block_size * v_row;
    size_t nb = (size_t)n_seq * (size_t)kv->n_blocks_seq, layer_bytes, total, v_layer_bytes,
           v_total;
    if (!rl_mul_size(block_bytes, nb, &layer_bytes) ||
        !rl_mul_size(layer_bytes, (size_t)s.n_layer, &total) ||
        !rl_mul_size(v_block_bytes, nb, &v_layer_bytes) ||
        !rl_mul_size(v_layer_bytes, (size_t)s.n_layer, &v_total))
        return rl_err_set(err, RL_ERR_LIMIT, "KV cache size overflows");
    kv->layers = rl_calloc((size_t)s.n_layer, sizeof *kv->layers);
    kv->block_table = rl_calloc(nb, sizeof(int32_t));
    kv->tables = rl_calloc((size_t)n_seq, sizeof *kv->tables);
    kv->n_blocks = rl_calloc((size_t)n_seq, sizeof(int32_t));
    kv->k_mem = rl_malloc(total ? total : 1);
    kv->v_mem = rl_malloc(v_total ? v_total : 1);
    kv->tok = rl_calloc((size_t)kv->max_batch, sizeof(int32_t));
    kv->pos = rl_calloc((size_t)kv->max_batch, sizeof(int32_t));
    kv->seq = rl_calloc((size_t)kv->max_batch, sizeof(int32_t));
    kv->want = rl_calloc((size_t)kv->max_batch, sizeof(bool));
    kv->prompt_s = rl_calloc((size_t)kv->max_batch, sizeof(bool));
    if (!kv->layers || !kv->block_table || !kv->tables || !kv->n_blocks || !kv->k_mem ||
        !kv->v_mem || !kv->tok || !kv->pos || !kv->seq || !kv->want || !kv->prompt_s) {
        rl_seqkv_free(kv);
        return rl_err_set(err, RL_ERR_NOMEM, "out of memory for a %d-token KV cache (%zu MiB)",
                          (int)n_ctx, (total + v_total) >> 20);
    }
    for (size_t b = 0; b < nb; b++) kv->block_table[b] = (int32_t)b;
    for (int32_t q = 0; q < n_seq; q++) {
        kv->tables[q] = kv->block_table + (size_t)q * kv->n_blocks_seq;
        kv->n_blocks[q] = kv->n_blocks_seq;
    }
    for (int32_t il = 0; il < s.n_layer; il++) {
        rl_kv_layer *L = &kv->layers[il];
        L->k_type = type;
        L->v_type = v_type;
        L->n_kv_head = s.n_kv_head;
        L->head_dim = s.head_dim;
        L->block_size = block_size;
        L->k_base = (char *)kv->k_mem + (size_t)il * layer_bytes;
        L->v_base = (char *)kv->v_mem + (size_t)il * v_layer_bytes;
        L->k_block_bytes = block_bytes;
        L->v_block_bytes = v_block_bytes;
    }
    return RL_OK;
}

/* The same type for K and V. */
rl_status rl_seqkv_init(rl_seqkv *kv, const rl_model *m, int32_t n_ctx, int32_t n_seq,
                        int32_t block_size, rl_type type, rl_err *err) {
    return rl_seqkv_init_kv(kv, m, n_ctx, n_seq, block_size, type, type, err);
}

/* Runs tokens[0..n) of sequence `seq` at positions pos0.. and writes the
 * logits of the last token (all_logits false: logits[n_vocab]) or of every
 * token (logits[n][n_vocab]).  logits may be NULL to only fill the cache. */
rl_status rl_seqkv_eval(rl_seqkv *kv, rl_model *m, int32_t seq, const int32_t *tokens, int32_t n,
                        int32_t pos0, bool all_logits, float *logits, rl_threadpool *tp,
                        rl_err *err) {
    if (n < 1) return rl_err_set(err, RL_ERR_INVALID, "empty prompt: no tokens to evaluate");
    if (seq < 0 || seq >= kv->n_seq)
        return rl_err_set(err, RL_ERR_INVALID, "sequence %d out of range", (int)seq);
    if (pos0 < 0 || (int64_t)pos0 + n > kv->n_ctx)
        return rl_err_set(err, RL_ERR_RANGE, "%d tokens at position %d exceed the context size %d",
                          (int)n, (int)pos0, (int)kv->n_ctx);
    const size_t V = (size_t)rl_model_n_vocab(m);
    for (int32_t i0 = 0; i0 < n; i0 += kv->max_batch) {
        int32_t nb = n - i0 < kv->max_batch ? n - i0 : kv->max_batch;
        for (int32_t j = 0; j < nb; j++) {
            kv->tok[j] = tokens[i0 + j];
            kv->pos[j] = pos0 + i0 + j;
            kv->seq[j] = seq;
            kv->want[j] = logits && (all_logits || i0 + j == n - 1);
            kv->prompt_s[j] = kv->prompt;
        }
        rl_batch b = {
            .n_tok = nb,
            .token = kv->tok,
            .pos = kv->pos,
            .seq = kv->seq,
            .want_logits = kv->want,
            .prompt = kv->prompt_s,
            .n_seq = kv->n_seq,
            .block_tables = kv->tables,
            .n_blocks = kv->n_blocks,
        };
        float *out = !logits ? NULL : all_logits ? logits + (size_t)i0 * V : logits;
        rl_status st = rl_model_forward(m, &b, kv->layers, out, tp, err);
        if (st) return st;
    }
    return RL_OK;
}
