/* redline model internals: the model struct, the architecture vtable and
 * the shared blocks.  Only src/model/ files include this.
 *
 * Activations inside a forward are row-major [n][width] buffers in the
 * order of the sorted batch (grouped by sequence, then position), so each
 * sequence's tokens are one contiguous run for the attention kernel.
 */
#ifndef RL_MODEL_IMPL_H
#define RL_MODEL_IMPL_H

#include "model/model.h"

#define RL_MODEL_MAX_LAYERS 512
#define RL_MODEL_MAX_DIM    (1 << 20) /* bound on n_embd, n_ff, n_vocab rows etc. */
#define RL_MODEL_MAX_HEADS  1024

/* FFN activations; SWIGLU_OAI (gpt-oss experts): min(g, 7) * sigmoid(1.702
 * min(g, 7)) * (clamp(u, -7, 7) + 1). */
typedef enum rl__act {
    RL__ACT_SILU = 0,
    RL__ACT_GELU_TANH = 1,
    RL__ACT_SWIGLU_OAI = 2,
} rl__act;

/* ---- mixture of experts (moe.c) ---- */
#define RL_MOE_MAX_EXPERTS 512

/* Router gating: probabilities from the router logits (llama.cpp's
 * expert_gating_func numbering). */
typedef enum rl__moe_gating {
    RL__MOE_GATING_SOFTMAX = 1,
    RL__MOE_GATING_SIGMOID = 2,
    /* top-k on the raw logits, weights = softmax over the k selected (gpt-oss) */
    RL__MOE_GATING_SOFTMAX_WEIGHT = 3,
} rl__moe_gating;

/* Shape and routing rule of a routed FFN.  n_expert 0 = a dense model. */
typedef struct rl__moe_cfg {
    int32_t n_expert; /* expert_count, in [1, RL_MOE_MAX_EXPERTS] */
    int32_t n_used;   /* expert_used_count k, in [1, n_expert] */
    int32_t n_embd;
    int32_t n_ff_exp; /* rows of each expert's gate/up */
    int32_t n_ff_sh;  /* rows of the shared expert's gate/up; 0 = none */
    rl__moe_gating gating;
    bool norm_w;   /* divide the k selected weights by their sum */
    float w_scale; /* multiplier on the selected weights (1 = none) */
    rl__act act;
} rl__moe_cfg;

/* Weights of one MoE layer: views into the mapping (never copied).  The
 * 3-D expert tensors are bound as one matrix of n_expert stacked blocks;
 * expert e of `gate` is rows [e*n_ff_exp, (e+1)*n_ff_exp) (rl__mat_rows). */
typedef struct rl__moe_w {
    rl_mat router;            /* [n_expert][n_embd] ffn_gate_inp */
    rl_mat gate;              /* [n_expert*n_ff_exp][n_embd] ffn_gate_exps */
    rl_mat up;                /* [n_expert*n_ff_exp][n_embd] ffn_up_exps */
    rl_mat down;              /* [n_expert*n_embd][n_ff_exp] ffn_down_exps */
    rl_mat sh_gate, sh_up;    /* [n_ff_sh][n_embd] shared expert, data NULL = none */
    rl_mat sh_down;           /* [n_embd][n_ff_sh] */
    const float *sh_gate_inp; /* [n_embd] sigmoid gate of the shared expert, or NULL */
    const float *router_b;    /* [n_expert] router bias, or NULL (gpt-oss, also the rest) */
    const float *gate_b;      /* [n_expert*n_ff_exp] expert biases, or NULL */
    const float *up_b;        /* [n_expert*n_ff_exp] */
    const float *down_b;      /* [n_expert*n_embd] */
} rl__moe_w;

/* Step scratch of the routed FFN, sized once for max_batch tokens
 * (rl__moe_scratch_init); the step path never allocates. */
typedef struct rl__moe_scratch {
    int32_t max_batch;
    float *logits;    /* [max_batch][n_expert] router logits, then probabilities */
    int32_t *sel;     /* [max_batch][k] selected experts, best first */
    float *wts;       /* [max_batch][k] their weights */
    int32_t *cnt;     /* [n_expert] tokens per expert this step */
    int32_t *off;     /* [n_expert+1] start of each expert's group in tok/tw */
    int32_t *tok;     /* [max_batch*k] token of each (expert, token) pair, grouped */
    float *tw;        /* [max_batch*k] its weight */
    float *xg;        /* [max_batch][n_embd] gathered activations of one expert */
    float *g, *u;     /* [max_batch][max(n_ff_exp, n_ff_sh)] */
    float *yg;        /* [max_batch][n_embd] one expert's outputs */
    bool *fg;         /* [max_batch] prompt flags of one expert's gathered tokens */
    int32_t n_active; /* experts run by the last call (tests) */
} rl__moe_scratch;

/* Scratch for up to max_batch tokens; 0 or an rl_status with err set. */
rl_status rl__moe_scratch_init(rl__moe_scratch *s, const rl__moe_cfg *c, int32_t max_batch,
                               rl_err *err);
void rl__moe_scratch_free(rl__moe_scratch *s);
/* Bytes of rl_matmul scratch rl__moe_ffn needs for max_batch tokens. */
size_t rl__moe_mm_scratch_size(const rl__moe_cfg *c, const rl__moe_w *w, int32_t max_batch);
/* Routing of n tokens from their router logits s->logits[n][n_expert]
 * (overwritten by the probabilities): top-k per token (ties to the lower
 * expert id), the weights (optionally renormalised, then scaled) in
 * s->sel / s->wts, and the grouping by expert in s->cnt / off / tok / tw
 * (each group in ascending token order). */
void rl__moe_route(const rl__moe_cfg *c, rl__moe_scratch *s, int32_t n);
/* out[n][n_embd] = the routed FFN of x[n][n_embd] (plus the shared expert
 * when w has one): router matmul, rl__moe_route, then for each expert that
 * at least one token selected: its tokens' rows gathered, gate/up in one
 * rl_matmul_multi, the activation, down, and the weighted rows added to
 * their tokens' outputs (in ascending expert order per token).  Each
 * selected expert's weights are streamed once per call; the others are not
 * read.  Every output row depends only on its own input row (rl_matmul is
 * batch-invariant; fast[n] or NULL: the tokens' rl_batch.prompt flags, which
 * follow each token into its experts' groups), so a token's result does not
 * depend on its companions.  mm_scratch: rl__moe_mm_scratch_size bytes. */
void rl__moe_ffn(const rl__moe_cfg *c, const rl__moe_w *w, const float *x, const bool *fast,
                 int32_t n, float *out, rl__moe_scratch *s, void *mm_scratch, rl_threadpool *tp);

/* rope.scaling.type (llama.cpp's names; absent = linear, as llama.cpp reads it). */
typedef enum rl__rope_scaling {
    RL__ROPE_SCALING_NONE = 0,
    RL__ROPE_SCALING_LINEAR = 1,
    RL__ROPE_SCALING_YARN = 2,
    RL__ROPE_SCALING_LONGROPE = 3,
} rl__rope_scaling;

typedef struct rl_hparams {
    int32_t n_vocab; /* rows of token_embd */
    int32_t n_ctx_train;
    int32_t n_ctx; /* context per sequence the model runs with (opts.n_ctx resolved) */
    int32_t n_embd;
    int32_t n_layer;
    int32_t n_head;
    int32_t n_kv_head;
    int32_t head_dim; /* key_length == value_length */
    int32_t n_ff;
    int32_t n_rot; /* rope dims, <= head_dim, even; 0 = no rope (granite, not finetuned) */
    float eps;
    float rope_base;             /* global layers */
    float rope_base_local;       /* sliding-window layers */
    float rope_freq_scale;       /* 1/factor (linear, YaRN), global layers */
    float rope_freq_scale_local; /* sliding-window layers (gemma3: 1) */
    rl_rope_mode rope_mode;
    rl__rope_scaling rope_scaling;
    int32_t n_ctx_orig;     /* rope.scaling.original_context_length (YaRN ramp, LongRoPE choice) */
    float rope_attn_factor; /* rope.scaling.attn_factor: magnitude of cos/sin (LongRoPE) */
    int32_t sliding_window; /* 0 = none */
    int32_t swa_pattern;    /* with a window: 0 = every layer local, else layer il is
                             * local iff il % p < p - 1 (llama.cpp's rule) */
    float attn_scale;       /* multiplier on q·k */
    float attn_softcap;     /* 0 = none */
    float final_softcap;    /* 0 = none */
    float embd_scale;       /* multiplier on token embeddings */
    float resid_scale; /* multiplier on each block's output before the residual add (granite) */
    float logit_mul;   /* multiplier on the logits (granite: 1/logit_scale) */
    rl__act act;
    bool causal;        /* false: a query attends to every token of its sequence
                         * (bert; <arch>.attention.causal) */
    rl_pooling pooling; /* <arch>.pooling_type (rl_model_embed) */
    bool qk_norm_full;  /* q/k RMSNorm over the whole projection, not per head (olmoe) */
    rl__moe_cfg moe;    /* routed FFN; moe.n_expert 0 = dense */
} rl_hparams;

typedef struct rl_layer {
    const float *attn_norm;      /* [n_embd] */
    rl_mat wq;                   /* [n_head*head_dim][n_embd]; phi3: rows of attn_qkv */
    rl_mat wk;                   /* [n_kv_head*head_dim][n_embd] */
    rl_mat wv;                   /* [n_kv_head*head_dim][n_embd] */
    rl_mat wo;                   /* [n_embd][n_head*head_dim] */
    const float *bq;             /* [n_head*head_dim] or NULL (qwen2) */
    const float *bk;             /* [n_kv_head*head_dim] or NULL */
    const float *bv;             /* [n_kv_head*head_dim] or NULL */
    const float *bo;             /* [n_embd] attn_output bias or NULL (gpt-oss) */
    const float *attn_sinks;     /* [n_head] attention-sink logits or NULL (gpt-oss) */
    const float *q_norm;         /* [head_dim] or NULL (gemma3, qwen3); olmoe: [n_head*head_dim] */
    const float *k_norm;         /* [head_dim] or NULL; olmoe: [n_kv_head*head_dim] */
    const float *k_cal;          /* [n_kv_head*head_dim] mean post-RoPE key, or NULL
                                  * (rl_model_calibrate_k_shift) */
    const float *k_cal_scale;    /* [n_kv_head*head_dim] K channel scale, or NULL */
    const float *post_attn_norm; /* [n_embd] or NULL (gemma2, gemma3) */
    const float *ffn_norm;       /* [n_embd] */
    rl_mat w_gate;               /* [n_ff][n_embd]; phi3: first half of ffn_up */
    rl_mat w_up;                 /* [n_ff][n_embd]; phi3: second half of ffn_up */
    rl_mat w_down;               /* [n_embd][n_ff] */
    const float *post_ffn_norm;  /* [n_embd] or NULL (gemma2, gemma3) */
    /* bert (post-norm encoder): attn_norm / ffn_norm hold attn_output_norm
     * and layer_output_norm, LayerNorms with these biases */
    const float *attn_norm_b; /* [n_embd] or NULL */
    const float *ffn_norm_b;  /* [n_embd] or NULL */
    const float *b_up;        /* [n_ff] ffn_up.bias or NULL */
    const float *b_down;      /* [n_embd] ffn_down.bias or NULL */
    rl__moe_w moe;            /* MoE layers (router.data set): replaces w_gate/up/down */
    /* per-layer attention setup, filled at load from the hyperparameters */
    rl_rope_cfg rope; /* base, scale and factors of this layer's RoPE */
    int32_t window;   /* 0 = full causal */
} rl_layer;

typedef struct rl__fwd rl__fwd;

/* Architecture vtable; every slot required unless marked may-be-NULL. */
typedef struct rl__arch {
    const char *name;
    /* Arch-specific hyperparameters and defaults, after the common ones
     * (rl__hparams_common) are read into m->hp. */
    rl_status (*hparams)(rl_model *m, rl_err *err);
    /* Binds and checks the tensors of layer il (rl__bind_*). */
    rl_status (*bind_layer)(rl_model *m, int32_t il, rl_err *err);
    /* Runs layer il on f->x in place. */
    void (*layer)(rl_model *m, rl__fwd *f, int32_t il);
    /* may-be-NULL: binds the tensors beside token_embd (NULL: output_norm
     * and the output head, tied when absent).  An encoder without a head
     * leaves m->output empty: rl_model_forward refuses it, rl_model_embed
     * runs it. */
    rl_status (*bind_globals)(rl_model *m, rl_err *err);
    /* may-be-NULL: finishes the input rows m->x[f->n][n_embd], which hold
     * the token embeddings times hp.embd_scale (bert: + position and token
     * type embeddings, LayerNorm). */
    void (*embed)(rl_model *m, rl__fwd *f);
} rl__arch;

extern const rl__arch rl__arch_llama;
extern const rl__arch rl__arch_qwen2;
extern const rl__arch rl__arch_qwen3;
extern const rl__arch rl__arch_phi3;
extern const rl__arch rl__arch_gemma2;
extern const rl__arch rl__arch_gemma3;
extern const rl__arch rl__arch_granite;
extern const rl__arch rl__arch_bert;
extern const rl__arch rl__arch_qwen3moe;
extern const rl__arch rl__arch_qwen2moe;
extern const rl__arch rl__arch_olmoe;
extern const rl__arch rl__arch_granitemoe;
extern const rl__arch rl__arch_gptoss;

struct rl_model {
    rl_gguf *gguf; /* owned */
    const rl__arch *arch;
    char arch_name[32];
    char name[128];
    rl_hparams hp;
    rl_mat tok_embd;          /* [n_vocab][n_embd] */
    const float *output_norm; /* [n_embd] */
    rl_mat output;            /* [n_vocab][n_embd] (tok_embd when tied) */
    rl_layer *layers;         /* [n_layer] */
    const float *rope_freqs;  /* [n_rot/2] rope_freqs.weight (Llama 3.1+) or NULL */
    const float *rope_long;   /* [n_rot/2] rope_factors_long.weight (LongRoPE) or NULL */
    const float *rope_short;  /* [n_rot/2] rope_factors_short.weight or NULL */
    rl_mat pos_embd;          /* [n_ctx_train][n_embd] position_embd.weight (bert) or empty */
    const float *type_embd0;  /* [n_embd] row 0 of token_types.weight (bert) or NULL */
    const float *tok_norm;    /* [n_embd] token_embd_norm.weight (bert) or NULL */
    const float *tok_norm_b;  /* [n_embd] token_embd_norm.bias */
    uint8_t *t_used;          /* [n_tensors] set when a tensor is bound (load only) */
    void **owned;             /* buffers converted at load (vectors, dequant) */
    int32_t n_owned, cap_owned;
    bool dequant;         /* opts.weights != STORED */
    rl_type dequant_type; /* then: F32 or F16 */
    size_t weight_bytes;

    /* scratch, sized for max_batch tokens at load */
    int32_t max_batch;
    float *x;         /* [max_batch][n_embd] residual stream */
    float *xn;        /* [max_batch][n_embd] normed input */
    float *tmp;       /* [max_batch][n_embd] block output */
    float *q;         /* [max_batch][n_head*head_dim] */
    float *k;         /* [max_batch][n_kv_head*head_dim] */
    float *v;         /* [max_batch][n_kv_head*head_dim] */
    float *att;       /* [max_batch][n_head*head_dim] */
    float *gate;      /* [max_batch][n_ff] */
    float *up;        /* [max_batch][n_ff] */
    void *mm_scratch; /* rl_matmul scratch, max over weights */
    size_t mm_scratch_size;
    int32_t *order;         /* [max_batch] batch index of sorted slot */
    int32_t *slot_of;       /* [max_batch] sorted slot of batch index */
    int32_t *tok_s, *pos_s; /* [max_batch] sorted token ids, positions */
    const int32_t **bt_s;   /* [max_batch] block table of sorted slot */
    int32_t *run_start;     /* [max_batch+1] sequence runs in sorted order */
    rl_attn_args *att_args; /* [max_batch] one per sequence run */
    int32_t *attn_pos;      /* [max_batch] non-causal: the last position of each
                             * token's run (rl__fwd.attn_pos) */
    double *pool_acc;       /* [n_embd] rl_model_embed's running sum */
    bool *fast_s;           /* [max_batch] rl_batch.prompt in sorted order */
    int32_t *emb_idx;       /* [2][max_batch] rl_model_embed's batch positions, seq ids */
    /* pipeline stage (opts.stage / n_stages): layers [l0, l1) are bound;
     * has_io: the embeddings and the head are (stage 0) */
    int32_t l0, l1;
    bool has_io;
    rl_kv_layer *kv_stage; /* [n_layer] a stage's kv_layers at their layer index (l0 > 0) */
    rl__moe_scratch moe_s; /* MoE layers' step scratch (hp.moe.n_expert > 0) */
    double *kcal_sum;      /* [3][n_layer][n_kv_head*head_dim] while calibrating:
                            * sums of k, k^2 and q^2 (q over the KV head's group) */
};

/* State of one forward call. */
struct rl__fwd {
    int32_t n;                /* tokens */
    const int32_t *pos;       /* [n] sorted positions */
    const int32_t *const *bt; /* [n] block table per token */
    const int32_t *run_start; /* [n_run+1] */
    const int32_t *attn_pos;  /* [n] the position each query attends up to: f->pos
                               * (causal) or its run's last (non-causal) */
    int32_t n_run;
    const bool *fast;      /* [n] sorted rl_batch.prompt flags, or NULL */
    const rl_kv_layer *kv; /* [n_layer], entries [l0, l1) used */
    rl_threadpool *tp;
};

/* ---- load helpers (model.c) ---- */
/* Binds matrix `name` expecting ne = [n_cols, n_rows] and a type rl_matmul
 * supports.  Absent: error if required, else out->data = NULL. */
rl_status rl__bind_mat(rl_model *m, const char *name, int64_t n_rows, int64_t n_cols, bool required,
                       rl_mat *out, rl_err *err);
/* Binds a 1-D vector of n elements (converted to f32 if stored otherwise).
 * Absent: error if required, else *out = NULL. */
rl_status rl__bind_vec(rl_model *m, const char *name, int64_t n, bool required, const float **out,
                       rl_err *err);
/* Binds a 2-D tensor of ne = [n0, n1] (per-expert biases) as n0*n1 floats
 * (rl__bind_vec otherwise). */
rl_status rl__bind_vec2(rl_model *m, const char *name, int64_t n0, int64_t n1, bool required,
                        const float **out, rl_err *err);
/* Binds a 3-D tensor `name` of ne = [n_cols, n_rows, n_mat] (n_mat stacked
 * matrices, MoE experts) as one matrix of n_mat*n_rows rows.  Absent: error
 * if required, else out->data = NULL. */
rl_status rl__bind_mat3(rl_model *m, const char *name, int64_t n_rows, int64_t n_cols,
                        int64_t n_mat, bool required, rl_mat *out, rl_err *err);
/* Binds layer il's attn_norm and q/k/v/output projections. */
rl_status rl__bind_layer_attn(rl_model *m, int32_t il, rl_err *err);
/* Binds the tensors every pre-norm decoder layer has (rl__bind_layer_attn,
 * ffn_norm, the dense FFN or, with hp.moe.n_expert > 0, rl__bind_moe). */
rl_status rl__bind_layer_common(rl_model *m, int32_t il, rl_err *err);
/* Binds blk.il.<suffix> as a matrix / a vector (rl__bind_mat, rl__bind_vec). */
rl_status rl__bind_layer_mat(rl_model *m, int32_t il, const char *suffix, int64_t n_rows,
                             int64_t n_cols, bool required, rl_mat *out, rl_err *err);
rl_status rl__bind_layer_vec(rl_model *m, int32_t il, const char *suffix, int64_t n, bool required,
                             const float **out, rl_err *err);
/* The llama layer: rl__bind_layer_common plus optional Q/K/V biases
 * (archs/llama.c; granite's too). */
rl_status rl__bind_layer_llama(rl_model *m, int32_t il, rl_err *err);
/* Q/K/V biases (required: qwen2; optional: llama, granite, as llama.cpp). */
rl_status rl__bind_qkv_bias(rl_model *m, int32_t il, bool required, rl_err *err);
/* Per-head attn_q_norm / attn_k_norm [head_dim] of layer il (required:
 * qwen3, gemma3). */
rl_status rl__bind_qk_norm(rl_model *m, int32_t il, rl_err *err);
/* Gemma's post_attention_norm and post_ffw_norm of layer il (required). */
rl_status rl__bind_post_norms(rl_model *m, int32_t il, rl_err *err);
/* Rows [r0, r0 + n) of w as a matrix of its own: a pointer offset (rows of
 * every supported type are whole blocks).  Caller checks r0 + n <= n_rows. */
rl_mat rl__mat_rows(const rl_mat *w, int64_t r0, int64_t n);
/* Per-dimension rope factors, optional, [n_rot/2]: rope_freqs.weight and,
 * when longrope (phi3, or rope.scaling.type longrope), rope_factors_long /
 * rope_factors_short.weight instead (m->rope_*). */
rl_status rl__bind_rope_factors(rl_model *m, bool longrope, rl_err *err);
/* Required "<arch>.<key>" float in [lo, hi]. */
rl_status rl__hp_f32_req(rl_model *m, const char *key, double lo, double hi, float *out,
                         rl_err *err);
/* Gemma's query scale hp.attn_scale = 1/sqrt(query_pre_attn_scalar): the
 * key when the file has it, else n_embd/n_head for the 27B model (the one
 * with n_layer_27b layers), else head_dim -- llama.cpp's rule. */
rl_status rl__hp_gemma_query_scale(rl_model *m, int32_t n_layer_27b, rl_err *err);
/* Reads "<arch>.<key>" as a bool (default def). */
rl_status rl__hp_bool(rl_model *m, const char *key, bool def, bool *out, rl_err *err);
/* Reads "<arch>.<key>" as an int / float with range checks. */
rl_status rl__hp_i32(rl_model *m, const char *key, bool required, int64_t def, int64_t lo,
                     int64_t hi, int32_t *out, rl_err *err);
rl_status rl__hp_f32(rl_model *m, const char *key, double def, double lo, double hi, float *out,
                     rl_err *err);

/* ---- MoE model glue (moe.c) ---- */
/* Reads "<arch>.expert_count" (required, or optional with 0 = dense),
 * expert_used_count and, when ff_exp_key, "<arch>.expert_feed_forward_length"
 * (default n_ff / k, as llama.cpp), and sets hp.moe with the arch's
 * routing rule; else moe.n_ff_exp = n_ff.  Errors name the key. */
rl_status rl__hparams_moe(rl_model *m, bool required, bool ff_exp_key, rl__moe_gating gating,
                          bool norm_w, rl_err *err);
/* Binds layer il's router and expert tensors (and the shared expert when
 * hp.moe.n_ff_sh > 0; with its sigmoid gate when sh_gate). */
rl_status rl__bind_moe(rl_model *m, int32_t il, bool sh_gate, rl_err *err);
/* out[n][n_embd] = layer il's MoE FFN of in (rl__moe_ffn on m's scratch). */
void rl__block_moe(rl_model *m, rl__fwd *f, int32_t il, const float *in, float *out);
/* Granite's multipliers and rope switch (archs/granite.c; granitemoe too). */
rl_status rl__hparams_granite(rl_model *m, rl_err *err);

/* ---- shared blocks (blocks.c) ---- */
/* out[n][n_embd] = self-attention of layer il over in[n][n_embd] (q/k/v
 * projections, biases, q/k norm, rope, KV store, attention, output). */
void rl__block_attn(rl_model *m, rl__fwd *f, int32_t il, const float *in, float *out);
/* out[n][n_embd] = down(act(gate(in)) * up(in)). */
void rl__block_ffn(rl_model *m, rl__fwd *f, int32_t il, const float *in, float *out);
/* y[i] = rmsnorm(x[i]) * w for n rows of width d; y may alias x. */
void rl__norm_rows(float *y, const float *x, const float *w, int32_t n, int64_t d, float eps);
/* Per token row i of f's batch (width d), on the pool when f->n > 1:
 * with y: y[i] = rmsnorm(y[i]) * post_w when post_w, then
 * x[i] += y_scale * y[i] (y_scale 1: a plain add);
 * with norm_w: xn[i] = rmsnorm(x[i]) * norm_w.  The residual step between
 * blocks, fused so each row is touched once and no thread waits. */
void rl__resid_norm(rl__fwd *f, float *y, const float *post_w, float y_scale, float *x, float *xn,
                    const float *norm_w, int64_t d, float eps);
/* The pre-norm decoder layer (llama, qwen2, qwen3, phi3, granite):
 *   x += s * attn(norm(x)); x += s * ffn(norm(x)), s = hp.resid_scale. */
void rl__layer_prenorm(rl_model *m, rl__fwd *f, int32_t il);
/* The "sandwich" layer (gemma2, gemma3):
 *   x += postnorm(attn(norm(x))); x += postnorm(ffn(norm(x))). */
void rl__layer_sandwich(rl_model *m, rl__fwd *f, int32_t il);

/* y[i] = layernorm(x[i]) * w + b for n rows of width d (b may be NULL);
 * y may alias x.  Statistics in double. */
void rl__layernorm_rows(float *y, const float *x, const float *w, const float *b, int32_t n,
                        int64_t d, float eps);

/* Allocates a buffer the model frees with itself; NULL on OOM (model.c). */
void *rl__model_own_alloc(rl_model *m, size_t bytes);
/* While m->kcal_sum is set (a calibration pass, kcal.c): adds layer il's
 * post-RoPE keys and queries of this forward (m->k, m->q; position 0 left
 * out) to the sums. */
void rl__kcal_accumulate(rl_model *m, const rl__fwd *f, int32_t il);

#endif
