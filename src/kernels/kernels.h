/* redline compute kernels (L3).  One dispatch point (dispatch.c) picks the
 * AVX2/FMA/F16C variant or the scalar reference at start-up from the CPU's
 * features; every SIMD kernel has a reference twin in ref/ and a test
 * against it with a stated error bound.
 *
 * Where each part lives: dispatch.c (implementation choice, the
 * elementwise kernels and rl_wht), matmul.c (rl_matmul*, rl_get_row),
 * rope.c (RoPE), kvpage.c (KV page types, rotation/shift/scale predicates,
 * rl_kv_store), attention.c (rl_attention*), peak.c (rl_peak_*: compute-peak
 * probes, leaves x86/avx2_peak.c, x86/vnni_peak.c); the leaves of each
 * table in ref/ and x86/ (the opt-in fast many-token tiles: ref/ref_tile.c,
 * x86/avx2_tile.c).
 *
 * Shapes use row-major C notation: x[n_tok][n] means n_tok rows of n floats.
 */
#ifndef RL_KERNELS_H
#define RL_KERNELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/base.h"
#include "base/threadpool.h"
#include "tensor/tensor.h"

/* Selects the implementation.  RL_KERNELS_AUTO = best the CPU supports. */
typedef enum rl_kernels_impl {
    RL_KERNELS_AUTO = 0,
    RL_KERNELS_REF = 1,
    RL_KERNELS_AVX2 = 2,
    RL_KERNELS_AVX512VNNI = 3, /* AVX2 table with AVX512-VNNI matmul leaves */
    RL_KERNELS_AMX = 4,        /* AVX512-VNNI table with AMX leaves for many tokens */
} rl_kernels_impl;
/* Call once at start-up (idempotent).  Returns the implementation chosen;
 * asking for one the CPU lacks falls back to the next lower one
 * (AMX -> AVX512VNNI -> AVX2 -> REF).  Under AUTO the environment variable
 * RL_KERNELS=ref|avx2|avx512vnni|amx caps the choice. */
rl_kernels_impl rl_kernels_init(rl_kernels_impl want);
const char *rl_kernels_impl_name(void);

/* A weight matrix w[n_rows][n_cols] stored row-major in `type`'s packing
 * (each row n_cols elements = row_size bytes).  Borrowed (usually mmapped). */
typedef enum rl_mat_layout {
    RL_MAT_ROWS = 0, /* row after row, as in the file */
    RL_MAT_R8 = 1,   /* resident tiles: 8 rows interleaved (rl_mat_make_resident) */
} rl_mat_layout;
typedef struct rl_mat {
    rl_type type;
    int64_t n_rows;  /* output features */
    int64_t n_cols;  /* input features (ne[0] in GGUF) */
    size_t row_size; /* bytes per row (an RL_MAT_R8 group of 8 rows is 8 * row_size) */
    const void *data;
    rl_mat_layout layout;
} rl_mat;

/* Resident tiles: the weights repacked once at load, so that every token
 * (batch 1 and batches of any size, prompt or generated) runs one
 * register-blocked kernel over 8 interleaved rows, with no per-step repack
 * and no second copy.  rl_mat_resident_bytes(w) is the bytes the repacked
 * matrix takes (its n_rows * row_size, the same as the file's; q8_0 36
 * bytes a row and block instead of 34: each row's code sum beside it), or 0
 * when w cannot be made resident (the active table makes no resident tiles
 * of its type, n_rows is no multiple of 8, it is already resident, or the
 * fast tiles are switched off); rl_mat_make_resident(w, dst) writes w's rows
 * into dst and points w at them (layout RL_MAT_R8, row_size the resident
 * rows' stride).  The caller owns dst, and may then release w's former
 * pages (n_rows * its former row_size bytes).  On a resident matrix every token
 * takes the tiles' reduction (the fast flags do not matter); rl_get_row
 * reads it too.  A view of rows [r0, r0 + n) keeps the layout when r0 is a
 * multiple of 8 (n need not be: the last group's extra rows are computed
 * and dropped). */
size_t rl_mat_resident_bytes(const rl_mat *w);
void rl_mat_make_resident(rl_mat *w, void *dst);
/* The same, its 8-row groups split across tp's threads (tp may be NULL):
 * the same bytes. */
void rl_mat_make_resident_tp(rl_mat *w, void *dst, rl_threadpool *tp);
/* True if an output head like w is worth making resident under the active
 * table: it has pair leaves (16 rows a zmm: the AVX512-VNNI table) for w's
 * resident layout, or 8-row leaves that decode one token as fast as the
 * per-row dots (q8_0 on the AVX2 table). */
bool rl_mat_resident_head(const rl_mat *w);

/* True if rl_matmul supports this weight type. */
bool rl_matmul_supports(rl_type t);
/* Bytes of scratch rl_matmul needs for n_tok input rows against w. */
size_t rl_matmul_scratch_size(const rl_mat *w, int64_t n_tok);
/* y[n_tok][w->n_rows] = x[n_tok][w->n_cols] · wᵀ.  Activations are quantized
 * once per call into the 8-bit block type that pairs with w->type (q8_0,
 * q8_1 or q8_K) in `scratch`, then integer dot products run on the packed
 * data; f32/f16/bf16 weights use float dot products.  Rows are split over
 * the pool's threads.  The reduction order of each output element is fixed
 * (independent of n_tok and of the thread count), so results are
 * batch-invariant. */
void rl_matmul(const rl_mat *w, const float *x, float *y, int64_t n_tok, void *scratch,
               rl_threadpool *tp);
/* Up to RL_MATMUL_MULTI_MAX matrices against the same input (q/k/v,
 * gate/up): ys[i][n_tok][ws[i]->n_rows] = x · ws[i]ᵀ for i < n_w, all with
 * the same n_cols.  When they pair with the same activation type, x is
 * quantized once and the rows of all matrices go out in one thread-pool
 * dispatch (one barrier instead of n_w); otherwise this is rl_matmul per
 * matrix.  Every y element is bit-identical to rl_matmul's.  scratch:
 * rl_matmul_scratch_size(ws[i], n_tok) bytes, the largest over i. */
#define RL_MATMUL_MULTI_MAX 4
void rl_matmul_multi(const rl_mat *const *ws, float *const *ys, int n_w, const float *x,
                     int64_t n_tok, void *scratch, rl_threadpool *tp);

/* The many-token path (fast tiles): rl_matmul_ex / rl_matmul_multi_ex take
 * fast[n_tok] (or NULL: none), marking the tokens that take it.  On a
 * weight type with tiles (q2_K, q3_K, q4_K, q5_K, q6_K, q4_1, iq4_xs, mxfp4) those tokens get the
 * tiles. reduction on every row: each super-block's integer sum converted once and fused into one
 * float accumulator per row (instead of vec_dot's 8 partial lanes), so their results are within
 * float rounding of the default path's, not bit-identical.  How it runs never changes a result:
 * with RL_MATMUL_FAST_MIN_TOK or more fast tokens (a type's own count where
 * its table sets one, rl__tile8.pack_min) the rows are repacked 8
 * at a time into a per-thread buffer (no extra resident weight memory) and
 * streamed past the tokens in an interleaved, register-blocked kernel;
 * with fewer, or rows past the last multiple of 8, the same reduction runs
 * on the rows in place (rl__tile8.dot_row).  So a token's result depends on
 * its own flag only: the caller marks tokens by role (prompt tokens, see
 * rl_batch.prompt), never by batch size, and batch invariance holds.  The
 * unmarked tokens take the default path (bit-identical to rl_matmul).  The
 * threshold: repacking a group costs about as much as 10-15 tokens of its
 * arithmetic (AVX2, Zen 3).  rl_matmul_set_fast_tiles(false) (a process-wide
 * switch, on by default; flip it only while no matmul runs) sends every
 * token down the default path, for comparisons. */
#define RL_MATMUL_FAST_MIN_TOK 64
void rl_matmul_ex(const rl_mat *w, const float *x, float *y, int64_t n_tok, const bool *fast,
                  void *scratch, rl_threadpool *tp);
void rl_matmul_multi_ex(const rl_mat *const *ws, float *const *ys, int n_w, const float *x,
                        int64_t n_tok, const bool *fast, void *scratch, rl_threadpool *tp);
void rl_matmul_set_fast_tiles(bool on);
bool rl_matmul_fast_tiles(void);

/* Matmul accounting, for `redline bench`: while on (a process-wide switch,
 * off by default), every top-level rl_matmul* call adds its wall time on
 * the calling thread (activation quantization, dispatch and the leaves)
 * and the multiply-adds it computes (n_rows x n_cols x n_tok per matrix).
 * rl_matmul_stats_take returns the sums since the last take and resets
 * them.  Off, a call pays one relaxed atomic load. */
typedef struct rl_matmul_stats {
    double seconds, madds;
    int64_t calls;
} rl_matmul_stats;
void rl_matmul_stats_enable(bool on);
rl_matmul_stats rl_matmul_stats_take(void);

/* Row of embedding: dequantize row `row` of w into out[w->n_cols]. */
void rl_get_row(const rl_mat *w, int64_t row, float *out);

/* ---- compute peaks (peak.c) ----
 * Probes of the arithmetic roofline of each kernel tier, for `redline
 * bench`: a long chain of the tier's multiply-add instruction with enough
 * independent accumulators to hide its latency.
 *   RL_PEAK_I8_AVX2: vpmaddubsw + vpmaddwd + vpaddd (u8 x s8, the AVX2
 *                    matmul leaves' int8 multiply-add), 32 per step;
 *   RL_PEAK_I8_VNNI: vpdpbusd on zmm, 64 per step;
 *   RL_PEAK_F32_FMA: vfmadd on ymm fp32, 8 per step;
 *   RL_PEAK_I8_AMX:  TDPBSUD on four 16x16 int32 tiles (s8 x u8, 64
 *                    columns), 65536 per step.
 * Counts are multiply-adds (one product added into an accumulator). */
typedef enum rl_peak_kind {
    RL_PEAK_I8_AVX2 = 0,
    RL_PEAK_I8_VNNI = 1,
    RL_PEAK_F32_FMA = 2,
    RL_PEAK_I8_AMX = 3,
    RL_PEAK_COUNT
} rl_peak_kind;
/* Short name ("int8-avx2", "int8-vnni", "fp32-fma", "int8-amx"). */
const char *rl_peak_name(rl_peak_kind k);
/* True if this CPU (and OS) runs kind k. */
bool rl_peak_available(rl_peak_kind k);
/* Runs n_iter steps of kind k on the calling thread; returns the number of
 * multiply-adds done (0 if the kind is unavailable or n_iter <= 0).  If
 * check is not NULL it receives a checksum of the accumulators, which
 * rl_peak_check verifies. */
uint64_t rl_peak_run(rl_peak_kind k, int64_t n_iter, uint32_t *check);
/* True if `check` is what rl_peak_run(k, n_iter) must produce (computed
 * by a scalar model of the same arithmetic; fp32 is exact only for
 * n_iter < 2^22). */
bool rl_peak_check(rl_peak_kind k, int64_t n_iter, uint32_t check);

/* ---- elementwise / normalization (one row of n) ---- */
/* out = x / rms(x) * w  (w may be NULL: no weight).  out may alias x. */
void rl_rmsnorm(float *out, const float *x, const float *w, int64_t n, float eps);
/* In-place softmax over n values. */
void rl_softmax(float *x, int64_t n);
/* out[i] = silu(gate[i]) * up[i] */
void rl_silu_mul(float *out, const float *gate, const float *up, int64_t n);
/* out[i] = gelu_tanh(gate[i]) * up[i] */
void rl_gelu_mul(float *out, const float *gate, const float *up, int64_t n);
/* x[i] += a * y[i]: the product and the sum each rounded (no fused
 * multiply-add), so every table gives the bits of the scalar loop; a = 1
 * is x[i] + y[i].  x and y do not overlap (a residual add). */
void rl_add_scaled(float *x, const float *y, float a, int64_t n);

/* ---- RoPE (rope.c) ----
 * RoPE, in place, on x[n_head][head_dim] for position pos.  Rotates the
 * first n_rot dims of each head with theta_i = pos * base^(-2i/n_rot).
 * NORMAL pairs adjacent elements (2i, 2i+1) (llama in GGUF);
 * NEOX pairs (i, i + n_rot/2) (qwen2, gemma3). freq_scale multiplies pos
 * (linear scaling; 1 = none). */
typedef enum rl_rope_mode { RL_ROPE_NORMAL = 0, RL_ROPE_NEOX = 2 } rl_rope_mode;
void rl_rope(float *x, int n_head, int head_dim, int n_rot, int32_t pos, float base,
             float freq_scale, rl_rope_mode mode);
/* rl_rope on q[n_head] and k[n_kv_head] heads of one token, the angles
 * computed once for both (same results as two rl_rope calls). */
void rl_rope_qk(float *q, int n_head, float *k, int n_kv_head, int head_dim, int n_rot, int32_t pos,
                float base, float freq_scale, rl_rope_mode mode);

/* RoPE with the long-context adjustments, as llama.cpp's ggml_rope_ext
 * applies them.  For pair i < n_rot/2 at position pos:
 *   th_e = pos * base^(-2i/n_rot) / ff[i]   (ff = freq_factors; 1 if NULL)
 *   th   = freq_scale * th_e                (linear interpolation)
 *   YaRN (ext_factor != 0): mix = ext_factor * ramp(i), ramp 1 at or below
 *     corr_dims[0], 0 at or above corr_dims[1], linear between;
 *     th = th * (1 - mix) + th_e * mix
 *   mscale = attn_factor * (1 + 0.1 ln(1/freq_scale) if ext_factor != 0)
 *   the pair is rotated by th and multiplied by mscale (dims past n_rot are
 *   left as they are).
 * A plain configuration (freq_factors NULL, ext_factor 0, attn_factor 1)
 * is computed exactly as rl_rope_qk (bit-identical). */
typedef struct rl_rope_cfg {
    int n_rot; /* rotated dims per head, even, <= head_dim; 0 = no rope */
    rl_rope_mode mode;
    float base;                /* rope.freq_base */
    float freq_scale;          /* 1 / scaling factor (linear, YaRN); 1 = none */
    const float *freq_factors; /* [n_rot/2] divisors of the frequencies, or NULL; borrowed */
    float ext_factor;          /* YaRN extrapolation mix; 0 = off */
    float attn_factor;         /* magnitude multiplier on cos/sin; 1 = none */
    float corr_dims[2];        /* YaRN ramp ends (rl_rope_yarn_corr_dims) */
} rl_rope_cfg;
/* {n_rot, mode, base, freq_scale}, no factors, no YaRN, attn_factor 1. */
rl_rope_cfg rl_rope_cfg_plain(int n_rot, float base, float freq_scale, rl_rope_mode mode);
/* rl_rope_qk under configuration c. */
void rl_rope_qk_ext(float *q, int n_head, float *k, int n_kv_head, int head_dim, int32_t pos,
                    const rl_rope_cfg *c);
/* YaRN's ramp ends: the pair indices where a rotation makes beta_fast
 * (resp. beta_slow) turns over n_ctx_orig positions, floored (ceiled) and
 * clamped to [0, n_rot - 1]. */
void rl_rope_yarn_corr_dims(int n_rot, int n_ctx_orig, float base, float beta_fast, float beta_slow,
                            float dims[2]);

/* ---- KV pages (kvpage.c) and attention (attention.c) ----
 * K and V for one layer live in fixed-size blocks of `block_size` token
 * slots.  A block holds, for each KV head, block_size rows of head_dim
 * elements: element (head h, slot s, dim d) of block b is at
 *   base + b * block_bytes + (h * block_size + s) * row_bytes  (row of head_dim)
 * where row_bytes = rl_type_row_size(type, head_dim) and
 * block_bytes = n_kv_head * block_size * row_bytes.
 * A sequence's token at position p lives in block block_table[p / block_size],
 * slot p % block_size.  A contiguous cache is the block table 0,1,2,...
 * Supported K/V types, chosen separately for K and V: RL_TYPE_F16,
 * RL_TYPE_F32, and the GGUF block formats RL_TYPE_Q8_0 (34 bytes per 32
 * elements: fp16 scale + 32 int8), RL_TYPE_Q4_0 (18 bytes per 32: fp16
 * scale + 32 4-bit codes, x = d*(q-8)) and RL_TYPE_IQ4_NL (18 bytes per 32:
 * fp16 scale + 32 4-bit indices into a fixed non-linear codebook), and
 * redline's RL_TYPE_Q8_64 (66 bytes per 64: q8_0 with twice the block, 1.94x
 * smaller than f16 instead of 1.88x); the block formats need head_dim a
 * multiple of their block (32; 64 for q8_64).  Each row is quantized
 * once, when rl_kv_store writes it (q8_0/q4_0: blockwise absmax, the
 * reference quantizers of src/tensor; iq4_nl: a least-squares scale
 * search), optionally after a Walsh-Hadamard rotation (rl_kv_rot), and
 * rl_attention reads the packed rows in place (docs/KVQUANT.md).  Whole
 * blocks can be copied bytewise (prefix caching, copy-on-write, swap). */
/* Rotation of the rows stored in K or V pages (docs/KVQUANT.md).
 * RL_KV_ROT_HADAMARD: each KV head row x is stored as H x, H the
 * orthonormal Walsh-Hadamard matrix of order head_dim (symmetric, H H = I;
 * head_dim a power of two).  For rotated K the query head is rotated the
 * same way before scoring ((Hq).(Hk) = q.k); for rotated V the attention
 * output of the head is rotated back (H sum_p w_p H v_p = sum_p w_p v_p).
 * Rotation spreads outlier channels over the whole head before blockwise
 * absmax quantization.
 * RL_KV_ROT_AUTO (0, what a zero-initialised layer gets) resolves per page
 * type with rl_kv_rot_resolve: Hadamard for the quantized pages (q8_0, q4_0,
 * iq4_nl), none for f32/f16 (and none when head_dim is not a power of
 * two).  The environment
 * variable RL_KVQ_ROT=none|hadamard overrides AUTO for quantized pages (a
 * measurement aid, read once). */
typedef enum rl_kv_rot {
    RL_KV_ROT_AUTO = 0,
    RL_KV_ROT_NONE = 1,
    RL_KV_ROT_HADAMARD = 2,
} rl_kv_rot;

typedef struct rl_kv_layer {
    rl_type k_type, v_type;
    int32_t n_kv_head, head_dim, block_size;
    void *k_base, *v_base; /* block 0 of this layer */
    size_t k_block_bytes, v_block_bytes;
    rl_kv_rot k_rot, v_rot; /* 0 = AUTO (see rl_kv_rot) */
    /* Optional K offset, [n_kv_head][head_dim] f32 (NULL = none), used only
     * for quantized K pages (q8_0/q4_0/iq4_nl): rl_kv_store stores
     * k - k_shift (then rotates and quantizes), and rl_attention adds
     * q . k_shift back to every score of the head (once per query item), so
     * scores equal q . k in real arithmetic, soft-capping included.  A fixed
     * per-channel offset (e.g. the K projection bias, which dominates some
     * qwen2 layers) then no longer spends the quantizer's range.  Must stay
     * the same for the lifetime of the pages. */
    const float *k_shift;
    /* Optional K channel scale, [n_kv_head][head_dim] f32 > 0 (NULL = none),
     * used only for quantized K pages: rl_kv_store stores D (k - k_shift)
     * (D = diag(k_scale), then rotates and quantizes) and rl_attention
     * scores with the query divided by D, so (q/D).(D k) = q . k exactly.
     * Moves quantization error away from the channels the queries weigh
     * most (docs/KVQUANT.md).  Must stay the same for the pages' life. */
    const float *k_scale;
} rl_kv_layer;

/* True if rl_kv_store / rl_attention apply kv->k_shift. */
bool rl_kv_k_shifted(const rl_kv_layer *kv);
/* True if rl_kv_store / rl_attention apply kv->k_scale. */
bool rl_kv_k_scaled(const rl_kv_layer *kv);

/* The rotation pages of type t with this head_dim actually get for the
 * requested r: RL_KV_ROT_NONE or RL_KV_ROT_HADAMARD (never AUTO).  An
 * explicit HADAMARD with head_dim not a power of two resolves to NONE. */
rl_kv_rot rl_kv_rot_resolve(rl_type t, int32_t head_dim, rl_kv_rot r);

/* In-place orthonormal fast Walsh-Hadamard transform of x[n], n a power of
 * two <= 512: x <- H x with H[i][j] = (-1)^popcount(i&j) / sqrt(n).  H is
 * its own inverse.  Bit-identical in every implementation (the same
 * butterflies in the same order, then one multiply by 1/sqrt(n)). */
void rl_wht(float *x, int n);

/* True if KV pages of type t with this head_dim are supported by
 * rl_kv_store and rl_attention. */
bool rl_kv_type_supported(rl_type t, int32_t head_dim);
/* True for the block-quantized page types (q8_0, q8_64, q4_0, iq4_nl). */
bool rl_kv_type_quantized(rl_type t);
/* True for every KV page type (f32, f16 and the quantized ones), whatever
 * the head_dim: for checking a user's choice before the model is known. */
bool rl_kv_type_known(rl_type t);

/* Stores k_row[n_kv_head][head_dim] and v_row (f32) for position pos,
 * converting (quantizing) each head's row to the layer's K/V type. */
void rl_kv_store(const rl_kv_layer *kv, const int32_t *block_table, int32_t pos, const float *k_row,
                 const float *v_row);

/* Attention for n_tok query tokens of ONE sequence:
 *   q[n_tok][n_head][head_dim] (already roped), query t at position pos[t];
 *   each query attends to positions [lo, pos[t]] of the sequence, where
 *   lo = max(0, pos[t] - window + 1) if window > 0 else 0 (sliding window);
 *   scores = (q·k) * scale, optionally soft-capped: cap * tanh(s / cap)
 *   when softcap > 0; online softmax; GQA: head h uses KV head
 *   h / (n_head / n_kv_head); sinks (gpt-oss): when set, head h's softmax
 *   also runs over one extra logit sinks[h] (not scaled) that carries no
 *   value, so the weights sum to less than 1.
 *   out[n_tok][n_head][head_dim].
 * The keys/values at those positions must already be stored. */
typedef struct rl_attn_args {
    const float *q;
    float *out;
    int32_t n_tok, n_head;
    const int32_t *pos;
    const int32_t *block_table;
    const rl_kv_layer *kv;
    float scale;
    int32_t window;     /* 0 = full causal */
    float softcap;      /* 0 = none */
    const float *sinks; /* [n_head] attention-sink logits, or NULL; borrowed */
} rl_attn_args;
void rl_attention(const rl_attn_args *a, rl_threadpool *tp);
/* rl_attention for n_runs sequences in one pool dispatch (same results as
 * one call per run); every run shares kv, n_head, scale, window, softcap
 * and sinks. */
void rl_attention_runs(const rl_attn_args *a, int32_t n_runs, rl_threadpool *tp);
/* Grouped-query items on (default) or off: heads sharing a KV head run as
 * one work item that reads each K/V row once (f32/f16 pages); the results
 * are the same bits either way.  Process-wide; flip it only while no
 * attention runs (tests and comparisons). */
void rl_attention_set_grouped(bool on);

#endif
