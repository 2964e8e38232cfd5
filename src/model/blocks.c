/* redline model: blocks shared by the architectures -- self-attention over
 * paged KV (projections, optional biases and per-head q/k RMSNorm, RoPE,
 * KV store, attention per sequence run, output projection), the gated FFN,
 * row-wise norms and residual adds (optionally scaled), the pre-norm and
 * the sandwich-norm decoder layers.
 *
 * Per-token work between matmuls (biases, norms, rope, KV stores,
 * activations) is split over the thread pool by token ranges; each token
 * writes only its own rows and its own KV slot, so no synchronization is
 * needed inside a job.
 */
#include "model/kcal.h"
#include "model/model-impl.h"

#include <math.h>

typedef struct tok_job {
    rl_model *m;
    rl__fwd *f;
    int32_t il;
    const rl_kv_layer *kvl; /* attn_prep: the layer's KV view, K shift filled in */
} tok_job;

/* Runs a per-token job: on the pool when there are several tokens, inline
 * on the calling thread for one (decode: the other threads would have
 * nothing to do, and a pool dispatch costs a barrier). */
static void tok_run(rl__fwd *f, rl_task_fn fn, tok_job *J) {
    if (f->n == 1)
        fn(J, 0, 1);
    else
        rl_threadpool_run(f->tp, fn, J);
}

static void tok_range(int32_t n, int ith, int nth, int32_t *i0, int32_t *i1) {
    int32_t per = (n + nth - 1) / nth;
    *i0 = per * ith < n ? per * ith : n;
    *i1 = *i0 + per < n ? *i0 + per : n;
}

/* Biases, q/k norm, rope and KV store for this thread's tokens. */
static void attn_prep(void *ctx, int ith, int nth) {
    const tok_job *J = ctx;
    const rl_model *m = J->m;
    const rl_hparams *hp = &m->hp;
    const rl_layer *L = &m->layers[J->il];
    const int32_t hd = hp->head_dim;
    const int64_t nq = (int64_t)hp->n_head * hd, nkv = (int64_t)hp->n_kv_head * hd;
    int32_t i0, i1;
    tok_range(J->f->n, ith, nth, &i0, &i1);
    for (int32_t j = i0; j < i1; j++) {
        float *q = m->q + j * nq, *k = m->k + j * nkv, *v = m->v + j * nkv;
        if (L->bq) rl_add_scaled(q, L->bq, 1.0f, nq);
        if (L->bk) rl_add_scaled(k, L->bk, 1.0f, nkv);
        if (L->bv) rl_add_scaled(v, L->bv, 1.0f, nkv);
        if (L->q_norm && hp->qk_norm_full) { /* olmoe: over the whole projection */
            rl_rmsnorm(q, q, L->q_norm, nq, hp->eps);
            rl_rmsnorm(k, k, L->k_norm, nkv, hp->eps);
        } else {
            if (L->q_norm)
                for (int32_t h = 0; h < hp->n_head; h++)
                    rl_rmsnorm(q + h * hd, q + h * hd, L->q_norm, hd, hp->eps);
            if (L->k_norm)
                for (int32_t h = 0; h < hp->n_kv_head; h++)
                    rl_rmsnorm(k + h * hd, k + h * hd, L->k_norm, hd, hp->eps);
        }
        int32_t pos = J->f->pos[j];
        rl_rope_qk_ext(q, hp->n_head, k, hp->n_kv_head, hd, pos, &L->rope);
        rl_kv_store(J->kvl, J->f->bt[j], pos, k, v);
    }
}

void rl__block_attn(rl_model *m, rl__fwd *f, int32_t il, const float *in, float *out) {
    const rl_hparams *hp = &m->hp;
    const rl_layer *L = &m->layers[il];
    const int64_t nq = (int64_t)hp->n_head * hp->head_dim;
    /* q, k, v in one dispatch on one quantization of `in` (same results as
     * three rl_matmul calls) */
    const rl_mat *w3[3] = {&L->wq, &L->wk, &L->wv};
    float *y3[3] = {m->q, m->k, m->v};
    rl_matmul_multi_ex(w3, y3, 3, in, f->n, f->fast, m->mm_scratch, f->tp);
    /* quantized K pages store k - shift (kernels.h); stores and attention
     * use this one view */
    rl_kv_layer kvl = f->kv[il];
    if (!kvl.k_shift) kvl.k_shift = rl_model_k_shift(m, il);
    if (!kvl.k_scale) kvl.k_scale = rl_model_k_scale(m, il);
    tok_job J = {m, f, il, &kvl};
    tok_run(f, attn_prep, &J);
    if (m->kcal_sum) rl__kcal_accumulate(m, f, il); /* calibrating (kcal.c) */
    /* Every token of the batch is stored before any attends, so a run sees
     * its own earlier tokens whatever the thread split was.  All runs go
     * to the pool in one dispatch (a decode step has one run per sequence). */
    for (int32_t r = 0; r < f->n_run; r++) {
        int32_t s = f->run_start[r], e = f->run_start[r + 1];
        m->att_args[r] = (rl_attn_args){
            .q = m->q + s * nq,
            .out = m->att + s * nq,
            .n_tok = e - s,
            .n_head = hp->n_head,
            .pos = f->attn_pos + s,
            .block_table = f->bt[s],
            .kv = &kvl,
            .scale = hp->attn_scale,
            .window = L->window,
            .softcap = hp->attn_softcap,
            .sinks = L->attn_sinks,
        };
    }
    rl_attention_runs(m->att_args, f->n_run, f->tp);
    rl_matmul_ex(&L->wo, m->att, out, f->n, f->fast, m->mm_scratch, f->tp);
    if (L->bo)
        for (int32_t j = 0; j < f->n; j++)
            rl_add_scaled(out + (size_t)j * hp->n_embd, L->bo, 1.0f, hp->n_embd);
}

static void ffn_act(void *ctx, int ith, int nth) {
    const tok_job *J = ctx;
    const rl_model *m = J->m;
    const int64_t nff = m->hp.n_ff;
    int32_t i0, i1;
    tok_range(J->f->n, ith, nth, &i0, &i1);
    for (int32_t j = i0; j < i1; j++) {
        float *g = m->gate + j * nff, *u = m->up + j * nff;
        if (m->hp.act == RL__ACT_GELU_TANH)
            rl_gelu_mul(g, g, u, nff);
        else
            rl_silu_mul(g, g, u, nff);
    }
}

void rl__block_ffn(rl_model *m, rl__fwd *f, int32_t il, const float *in, float *out) {
    const rl_layer *L = &m->layers[il];
    if (L->moe.router.data) {
        rl__block_moe(m, f, il, in, out); /* moe.c */
        return;
    }
    const rl_mat *w2[2] = {&L->w_gate, &L->w_up};
    float *y2[2] = {m->gate, m->up};
    rl_matmul_multi_ex(w2, y2, 2, in, f->n, f->fast, m->mm_scratch, f->tp);
    tok_job J = {m, f, il, NULL};
    tok_run(f, ffn_act, &J);
    rl_matmul_ex(&L->w_down, m->gate, out, f->n, f->fast, m->mm_scratch, f->tp);
}

void rl__norm_rows(float *y, const float *x, const float *w, int32_t n, int64_t d, float eps) {
    for (int32_t i = 0; i < n; i++) rl_rmsnorm(y + i * d, x + i * d, w, d, eps);
}

typedef struct resid_job {
    rl__fwd *f;
    float *x, *y, *xn;
    const float *post_w, *norm_w;
    int64_t d;
    float eps, y_scale;
} resid_job;

static void resid_task(void *ctx, int ith, int nth) {
    const resid_job *J = ctx;
    const int64_t d = J->d;
    int32_t i0, i1;
    tok_range(J->f->n, ith, nth, &i0, &i1);
    for (int32_t i = i0; i < i1; i++) {
        float *x = J->x + i * d;
        if (J->y) {
            float *y = J->y + i * d;
            if (J->post_w) rl_rmsnorm(y, y, J->post_w, d, J->eps);
            rl_add_scaled(x, y, J->y_scale, d); /* y_scale 1: x + y */
        }
        if (J->norm_w) rl_rmsnorm(J->xn + i * d, x, J->norm_w, d, J->eps);
    }
}

void rl__resid_norm(rl__fwd *f, float *y, const float *post_w, float y_scale, float *x, float *xn,
                    const float *norm_w, int64_t d, float eps) {
    resid_job J = {f, x, y, xn, post_w, norm_w, d, eps, y_scale};
    if (f->n == 1)
        resid_task(&J, 0, 1);
    else
        rl_threadpool_run(f->tp, resid_task, &J);
}

void rl__layer_prenorm(rl_model *m, rl__fwd *f, int32_t il) {
    const rl_hparams *hp = &m->hp;
    const rl_layer *L = &m->layers[il];
    const float s = hp->resid_scale;
    rl__resid_norm(f, NULL, NULL, 1.0f, m->x, m->xn, L->attn_norm, hp->n_embd, hp->eps);
    rl__block_attn(m, f, il, m->xn, m->tmp);
    rl__resid_norm(f, m->tmp, NULL, s, m->x, m->xn, L->ffn_norm, hp->n_embd, hp->eps);
    rl__block_ffn(m, f, il, m->xn, m->tmp);
    rl__resid_norm(f, m->tmp, NULL, s, m->x, NULL, NULL, hp->n_embd, hp->eps);
}

void rl__layer_sandwich(rl_model *m, rl__fwd *f, int32_t il) {
    const rl_hparams *hp = &m->hp;
    const rl_layer *L = &m->layers[il];
    const int64_t E = hp->n_embd;
    rl__resid_norm(f, NULL, NULL, 1.0f, m->x, m->xn, L->attn_norm, E, hp->eps);
    rl__block_attn(m, f, il, m->xn, m->tmp);
    rl__resid_norm(f, m->tmp, L->post_attn_norm, 1.0f, m->x, m->xn, L->ffn_norm, E, hp->eps);
    rl__block_ffn(m, f, il, m->xn, m->tmp);
    rl__resid_norm(f, m->tmp, L->post_ffn_norm, 1.0f, m->x, NULL, NULL, E, hp->eps);
}

void rl__layernorm_rows(float *y, const float *x, const float *w, const float *b, int32_t n,
                        int64_t d, float eps) {
    for (int32_t i = 0; i < n; i++) {
        const float *xr = x + i * d;
        float *yr = y + i * d;
        double sum = 0.0, sq = 0.0;
        for (int64_t c = 0; c < d; c++) sum += xr[c];
        double mean = sum / (double)d;
        for (int64_t c = 0; c < d; c++) sq += ((double)xr[c] - mean) * ((double)xr[c] - mean);
        float inv = (float)(1.0 / sqrt(sq / (double)d + (double)eps)), mf = (float)mean;
        for (int64_t c = 0; c < d; c++) {
            float v = (xr[c] - mf) * inv * w[c];
            yr[c] = b ? v + b[c] : v;
        }
    }
}
