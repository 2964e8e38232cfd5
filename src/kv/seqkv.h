/* A tiny contiguous KV cache for simple callers (the CLI tools, tests)
 * that run one or a few sequences without the paged block pool.
 *
 * Each of n_seq sequences gets ceil(n_ctx / block_size) blocks of its own;
 * sequence s's block table is s*nb, s*nb+1, ..., so every sequence is a
 * contiguous slice of each layer's K and V memory.  Bodies in seqkv.c.
 *
 * rl_seqkv_eval() runs a token span of one sequence through the model in
 * chunks of at most max_batch tokens and returns the logits of its last
 * token or of every token.  It checks that the span fits the context and
 * returns RL_ERR_RANGE naming the sizes otherwise.
 *
 * Ownership: every buffer below is owned by the rl_seqkv and freed by
 * rl_seqkv_free; the model is borrowed and must outlive the cache.
 */
#ifndef RL_KV_SEQKV_H
#define RL_KV_SEQKV_H

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"

typedef struct rl_seqkv {
    int32_t n_layer, n_ctx, n_seq, block_size, n_blocks_seq;
    rl_kv_layer *layers;    /* [n_layer] */
    int32_t *block_table;   /* [n_seq][n_blocks_seq] */
    const int32_t **tables; /* [n_seq] -> rows of block_table */
    int32_t *n_blocks;      /* [n_seq] */
    void *k_mem, *v_mem;    /* [n_layer][n_seq*n_blocks_seq] blocks */
    /* batch scratch: [max_batch] */
    int32_t *tok, *pos, *seq;
    bool *want, *prompt_s;
    int32_t max_batch;
    /* rl_seqkv_eval's tokens are prompt tokens (rl_batch.prompt: the
     * many-token matmul path); false (the default) = generated tokens */
    bool prompt;
} rl_seqkv;

/* Frees every buffer and zeroes *kv; NULL and a zeroed struct are no-ops. */
void rl_seqkv_free(rl_seqkv *kv);

/* K and V page types chosen separately: any type rl_kv_type_supported()
 * accepts for the model's head_dim (f16, f32, q8_0, q8_64, q4_0, iq4_nl).
 * block_size 0 = 16.  On error *kv is zeroed (safe to free). */
rl_status rl_seqkv_init_kv(rl_seqkv *kv, const rl_model *m, int32_t n_ctx, int32_t n_seq,
                           int32_t block_size, rl_type type, rl_type v_type, rl_err *err);

/* The same type for K and V. */
rl_status rl_seqkv_init(rl_seqkv *kv, const rl_model *m, int32_t n_ctx, int32_t n_seq,
                        int32_t block_size, rl_type type, rl_err *err);

/* Runs tokens[0..n) of sequence `seq` at positions pos0.. and writes the
 * logits of the last token (all_logits false: logits[n_vocab]) or of every
 * token (logits[n][n_vocab]).  logits may be NULL to only fill the cache. */
rl_status rl_seqkv_eval(rl_seqkv *kv, rl_model *m, int32_t seq, const int32_t *tokens, int32_t n,
                        int32_t pos0, bool all_logits, float *logits, rl_threadpool *tp,
                        rl_err *err);

#endif
