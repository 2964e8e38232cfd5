/* redline model (L4): hyperparameters, weights and the forward pass of a
 * decoder-only transformer loaded from a GGUF file.
 *
 * A model owns its GGUF reader (the mmap); weight matrices are rl_mat views
 * into the mapping and are never copied.  One architecture file per family
 * (archs/llama.c, qwen2.c, qwen3.c, phi3.c, gemma2.c, gemma3.c, granite.c,
 * and the mixture-of-experts qwen3moe.c, qwen2moe.c, olmoe.c, granitemoe.c,
 * gptoss.c;
 * llama.c also reads Mixtral) plugs into a small vtable;
 * the shared blocks (attention, FFN, norms) live in blocks.c, the routed
 * FFN and its expert-grouped matmul in moe.c; bert.c is an encoder without
 * an output head, for rl_model_embed.
 *
 * Forward: rl_model_forward() runs a batch of tokens that may belong to
 * several sequences.  The caller owns the KV memory (kv/ or a test helper)
 * and hands in one rl_kv_layer per layer plus, per sequence, a block table;
 * the model writes K/V of the batch's tokens into those blocks and attends
 * over them.  The model never allocates on this path: all scratch is sized
 * once at load for opts.max_batch tokens.
 *
 * Invariants:
 *   - every tensor a model uses was checked at load for presence, shape and
 *     type; every hyperparameter for range and consistency;
 *   - one forward at a time per model (the scratch is shared): callers that
 *     run several threads serialize calls or load the model twice;
 *   - results for a token do not depend on which other tokens share its
 *     batch (matmuls are batch-invariant, attention is per token).
 */
#ifndef RL_MODEL_H
#define RL_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "base/base.h"
#include "base/threadpool.h"
#include "gguf/gguf.h"
#include "kernels/kernels.h"

typedef struct rl_model rl_model; /* opaque */

/* How rl_model_embed pools a sequence's final hidden states into one
 * vector: <arch>.pooling_type, llama.cpp's values (0, "none", is read as
 * mean: the API returns one vector per input; 4, "rank", is refused). */
typedef enum rl_pooling {
    RL_POOLING_MEAN = 1,
    RL_POOLING_CLS = 2,  /* the first token's state */
    RL_POOLING_LAST = 3, /* the last token's state */
} rl_pooling;

/* Load progress: frac in [0, 1]; `what` is a short phase name. */
typedef void (*rl_model_progress_fn)(float frac, const char *what, void *ud);

/* Validation mode.  STORED: weights stay as stored in the file (mmapped).
 * F32 / F16: every weight matrix is dequantized into that type at load
 * (owned memory, 4 or 2 bytes per weight), so matmuls run in floating
 * point without 8-bit activation quantization.  The golden tests use F32
 * to check the architecture against the reference to cosine 1e-4, free of
 * the quantized-activation noise. */
typedef enum rl_model_weights {
    RL_MODEL_WEIGHTS_STORED = 0,
    RL_MODEL_WEIGHTS_F32 = 1,
    RL_MODEL_WEIGHTS_F16 = 2,
} rl_model_weights;

typedef struct rl_model_opts {
    int32_t max_batch;             /* tokens per forward call; 0 = 512 */
    int32_t encoder_batch;         /* a non-causal model (an encoder: bert) runs
                                    * max(max_batch, min(encoder_batch, n_ctx_train))
                                    * tokens per forward, so that one forward embeds a
                                    * whole input; 0 = max_batch.  Causal models ignore
                                    * it. */
    int32_t n_ctx;                 /* tokens per sequence the model will run with; picks
                                    * LongRoPE's long factors when above the original
                                    * context, as llama.cpp's -c does; 0 = min(train
                                    * context, 4096), the engine's default */
    bool prefault;                 /* touch every weight page at load */
    int32_t load_threads;          /* threads that repack the weights into their resident
                                    * layout at load; 0 = the online CPUs (at most 64) */
    rl_model_weights weights;      /* see rl_model_weights */
    rl_model_progress_fn progress; /* may be NULL */
    void *progress_ud;
    /* Pipeline stage (src/dist/): with n_stages > 1 only layers
     * [stage * n_layer / n_stages, (stage + 1) * n_layer / n_stages) are
     * bound (the other layers' pages are never read), and the token
     * embeddings, output norm and output projection only on stage 0 (which
     * embeds, and applies the head to what the last stage returns).  Such a
     * model runs rl_model_forward_stage / rl_model_forward_head, not
     * rl_model_forward.  0 or 1 = the whole model. */
    int32_t stage, n_stages;
} rl_model_opts;

/* Opens `path` (rl_gguf_open), reads and validates the hyperparameters and
 * every tensor, sizes the scratch.  opts may be NULL (defaults).  On error
 * *out is NULL and err names the bad key or tensor.  Free with
 * rl_model_free. */
rl_status rl_model_load(const char *path, const rl_model_opts *opts, rl_model **out, rl_err *err);
/* Same, over a GGUF reader the caller opened; the model takes ownership of
 * `g` (closes it on failure too).  Tests use it with rl_gguf_open_memory. */
rl_status rl_model_load_gguf(rl_gguf *g, const rl_model_opts *opts, rl_model **out, rl_err *err);
void rl_model_free(rl_model *m);

/* ---- accessors ---- */
const char *rl_model_arch(const rl_model *m); /* "llama", "qwen2", "qwen3", "phi3", "gemma2",
                                               * "gemma3", "granite", "qwen3moe", "qwen2moe",
                                               * "olmoe", "granitemoe", "gpt-oss", "bert" */
const char *rl_model_name(const rl_model *m); /* general.name or "" */
int32_t rl_model_n_vocab(const rl_model *m);
int32_t rl_model_n_ctx_train(const rl_model *m);
int32_t rl_model_n_layer(const rl_model *m);
int32_t rl_model_n_embd(const rl_model *m);
int32_t rl_model_n_head(const rl_model *m);
int32_t rl_model_n_kv_head(const rl_model *m);
int32_t rl_model_head_dim(const rl_model *m);
int32_t rl_model_max_batch(const rl_model *m);
size_t rl_model_weight_bytes(const rl_model *m); /* bytes of tensor data mapped */
/* Bytes of weights one decoded token reads (batch 1), from the file's
 * tensor sizes: the roofline of `redline bench`.  Every tensor of the file
 * by name: token_embd one row (ne[1] rows; the whole table, as the head,
 * when there is no output.weight), output.weight and output_norm the head,
 * blk.N.attn_* attention, blk.N.ffn_gate_inp(.weight/.bias) the router,
 * every blk.N.*_exps tensor n_used / n_expert of its bytes (k expert
 * blocks; the expert axis is the last), the rest (FFN norms, dense FFN,
 * the shared expert and its gate, rope factors) dense.  A dense model has
 * n_expert 0 and experts 0. */
typedef struct rl_model_active_bytes {
    size_t attn, router, experts, dense, embd_row, head;
    size_t total; /* the sum of the six */
    int32_t n_expert, n_used;
} rl_model_active_bytes;
rl_model_active_bytes rl_model_active_bytes_of(const rl_model *m);
/* The GGUF reader (for the tokenizer, templates); borrowed until free. */
const rl_gguf *rl_model_gguf(const rl_model *m);
rl_pooling rl_model_pooling(const rl_model *m);
/* False for an encoder without an output head (bert): no logits, only
 * rl_model_embed. */
bool rl_model_has_head(const rl_model *m);
/* The longest input rl_model_embed takes: n_ctx for a causal model (it
 * runs in chunks of max_batch tokens); min(max_batch, n_ctx_train) for a
 * non-causal one (the whole input in one forward; bert's position table
 * has n_ctx_train rows). */
int32_t rl_model_embed_max_tokens(const rl_model *m);

/* Layers [*l0, *l1) this model holds (the whole [0, n_layer) unless loaded
 * as a pipeline stage), and whether it holds the embeddings and the head. */
void rl_model_layer_range(const rl_model *m, int32_t *l0, int32_t *l1, bool *has_io);

/* What a caller needs to allocate KV blocks: n_layer rl_kv_layer, each with
 * n_kv_head heads of head_dim elements per token slot.  For a pipeline
 * stage n_layer is the stage's layer count and kv_layers[i] below is its
 * layer l0 + i. */
typedef struct rl_model_kv_shape {
    int32_t n_layer, n_kv_head, head_dim;
} rl_model_kv_shape;
rl_model_kv_shape rl_model_kv_shape_of(const rl_model *m);

/* A batch of tokens, possibly from several sequences.  All arrays are
 * borrowed for the call.
 *   token[i], pos[i], seq[i]: token id, its position in its sequence, and
 *     the sequence index in [0, n_seq).
 *   want_logits[i]: write logits for token i.  NULL = only the last token.
 *   block_tables[s][0 .. n_blocks[s]): KV block ids of sequence s; position
 *     p lives in block block_tables[s][p / block_size].
 *   n_vocab_out: logits for the first n_vocab_out token ids only (the
 *     output projection reads that many rows; 0 = all n_vocab).  Byte-level
 *     BPE ids are roughly frequency-ordered, so a draft model can score the
 *     common head of the vocabulary at a fraction of the cost; the values
 *     are bit-identical to the same columns of a full forward.
 * A query at position p attends to positions [0, p] (or the sliding
 * window) of its sequence; those not in this batch must have been written
 * by earlier forwards into the same blocks.  (seq, pos) pairs must be
 * unique within a batch. */
typedef struct rl_batch {
    int32_t n_tok;
    const int32_t *token;    /* [n_tok] */
    const int32_t *pos;      /* [n_tok] */
    const int32_t *seq;      /* [n_tok] */
    const bool *want_logits; /* [n_tok] or NULL */
    /* [n_tok] or NULL (none): true for a token of its sequence's prompt.
     * Prompt tokens take the many-token matmul path (kernels.h,
     * rl_matmul_ex: within float rounding of the per-token one), generated
     * tokens the per-token path; a token's result depends on its role, never
     * on the rest of the batch, so callers mark tokens by role (the engine:
     * positions below the request's prompt length). */
    const bool *prompt;
    int32_t n_seq;
    const int32_t *const *block_tables; /* [n_seq] -> [n_blocks[s]] */
    const int32_t *n_blocks;            /* [n_seq] */
    int32_t n_vocab_out;                /* 0 = n_vocab; else in [1, n_vocab] */
} rl_batch;

/* Number of rows rl_model_forward writes for batch b. */
int32_t rl_batch_n_logits(const rl_batch *b);

/* Runs the batch (RL_ERR_UNSUPPORTED for a model without a head).  kv_layers[n_layer] describes the
 * caller's KV memory (n_kv_head and head_dim must match rl_model_kv_shape_of).  logits_out receives
 * [rl_batch_n_logits(b)][n_vocab_out or n_vocab] floats, one row per token with want_logits set, in
 * batch order.  tp may be NULL (single thread). Errors (nothing is computed): RL_ERR_RANGE for a
 * token id outside [0, n_vocab) or a position beyond the sequence's blocks, RL_ERR_LIMIT for n_tok
 * > max_batch, RL_ERR_INVALID for other malformed batches (and an n_vocab_out outside [0,
 * n_vocab]). */
rl_status rl_model_forward(rl_model *m, const rl_batch *b, const rl_kv_layer *kv_layers,
                           float *logits_out, rl_threadpool *tp, rl_err *err);

/* The embedding of one sequence tokens[0..n): the model runs it from
 * position 0 (writing K/V into block_table[0..n_blocks) of kv_layers, which
 * the caller owns and may free after), pools the final hidden states (for
 * a decoder: after output_norm; for bert: the last layer's output) by
 * rl_model_pooling and L2-normalises into out[n_embd].  Errors (nothing
 * written): RL_ERR_RANGE for a token id outside [0, n_vocab) or n beyond
 * the blocks, RL_ERR_LIMIT for n > rl_model_embed_max_tokens,
 * RL_ERR_INVALID for n < 1. */
rl_status rl_model_embed(rl_model *m, const int32_t *tokens, int32_t n,
                         const rl_kv_layer *kv_layers, const int32_t *block_table, int32_t n_blocks,
                         float *out, rl_threadpool *tp, rl_err *err);

/* A forward in the shape of rl_model_forward with a context pointer: the
 * engine's and the K calibration's seam for running a batch somewhere else
 * (the pipeline over MPI, src/dist/).  rl_model_forward_plain adapts
 * rl_model_forward to it (ud unused). */
typedef rl_status (*rl_model_forward_fn)(void *ud, rl_model *m, const rl_batch *b,
                                         const rl_kv_layer *kv_layers, float *logits_out,
                                         rl_threadpool *tp, rl_err *err);
rl_status rl_model_forward_plain(void *ud, rl_model *m, const rl_batch *b,
                                 const rl_kv_layer *kv_layers, float *logits_out, rl_threadpool *tp,
                                 rl_err *err);

/* Pipeline stages.  rl_model_forward_stage runs the model's layers
 * [l0, l1) over batch b: x_in [n_tok][n_embd] is the hidden state entering
 * layer l0 in batch order (NULL on stage 0: the tokens are embedded), x_out
 * [n_tok][n_embd] receives the hidden state leaving layer l1 - 1, in batch
 * order.  kv_layers[l1 - l0].  Errors as rl_model_forward.
 * rl_model_forward_head applies the output norm and projection (stage 0's
 * model, which holds them) to x [rl_batch_n_logits(b)][n_embd], the final
 * hidden rows of the tokens with want_logits, in batch order, writing
 * logits_out as rl_model_forward does.  Stage forwards of every stage in
 * order and then the head give bit-identical logits to rl_model_forward on
 * the whole model (the same kernels on the same rows). */
rl_status rl_model_forward_stage(rl_model *m, const rl_batch *b, const rl_kv_layer *kv_layers,
                                 const float *x_in, float *x_out, rl_threadpool *tp, rl_err *err);
rl_status rl_model_forward_head(rl_model *m, const rl_batch *b, const float *x, float *logits_out,
                                rl_threadpool *tp, rl_err *err);

/* K calibration of quantized K pages (the K shift and channel scale the
 * forward applies): model/kcal.h. */

#endif
