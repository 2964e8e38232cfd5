/* redline model: mixture-of-experts FFN -- the router (softmax or sigmoid
 * gating, top-k, optional renormalisation and scale), the expert-grouped
 * matmul, the optional shared expert, and the MoE hyperparameters and
 * tensors (3-D expert tensors bound as views of the mapping).
 *
 * The grouped matmul: per call the tokens are grouped by the experts they
 * selected; each selected expert's rows of the batch are gathered into one
 * contiguous block and run through rl_matmul once (gate and up in one
 * rl_matmul_multi, then down), so each selected expert's weights stream
 * once per step and experts no token selected are never read.  Decode at
 * batch 1 reads k experts per layer; a prefill chunk reads each expert once.
 * rl_model_active_bytes_of counts those bytes per decoded token from the
 * tensor sizes (the active-bytes roofline of `redline bench`).
 *
 * Invariants:
 *   - every output row depends only on its own input row: the router and
 *     expert matmuls are batch-invariant (rl_matmul), the routing is per
 *     token, and a token's expert outputs are added in ascending expert
 *     order whatever its companions selected;
 *   - no allocation on the step path: rl__moe_scratch is sized at load for
 *     max_batch tokens (a token selects an expert at most once, so one
 *     expert's group never exceeds the batch).
 */
#include "model/model-impl.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* ------------------------------------------------------------- scratch */

rl_status rl__moe_scratch_init(rl__moe_scratch *s, const rl__moe_cfg *c, int32_t max_batch,
                               rl_err *err) {
    memset(s, 0, sizeof *s);
    size_t B = (size_t)max_batch, k = (size_t)c->n_used, E = (size_t)c->n_embd;
    size_t F = (size_t)(c->n_ff_exp > c->n_ff_sh ? c->n_ff_exp : c->n_ff_sh);
    s->max_batch = max_batch;
    s->logits = rl_calloc(B * (size_t)c->n_expert, sizeof(float));
    s->sel = rl_calloc(B * k, sizeof(int32_t));
    s->wts = rl_calloc(B * k, sizeof(float));
    s->cnt = rl_calloc((size_t)c->n_expert, sizeof(int32_t));
    s->off = rl_calloc((size_t)c->n_expert + 1, sizeof(int32_t));
    s->tok = rl_calloc(B * k, sizeof(int32_t));
    s->tw = rl_calloc(B * k, sizeof(float));
    s->xg = rl_calloc(B * E, sizeof(float));
    s->g = rl_calloc(B * F, sizeof(float));
    s->u = rl_calloc(B * F, sizeof(float));
    s->yg = rl_calloc(B * E, sizeof(float));
    s->fg = rl_calloc(B, sizeof(bool));
    if (!s->fg || !s->logits || !s->sel || !s->wts || !s->cnt || !s->off || !s->tok || !s->tw ||
        !s->xg || !s->g || !s->u || !s->yg) {
        rl__moe_scratch_free(s);
        return rl_err_set(err, RL_ERR_NOMEM, "out of memory for the MoE scratch");
    }
    return RL_OK;
}

void rl__moe_scratch_free(rl__moe_scratch *s) {
    void *p[] = {s->logits, s->sel, s->wts, s->cnt, s->off, s->tok,
                 s->tw,     s->xg,  s->g,   s->u,   s->yg,  s->fg};
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++) rl_free(p[i]);
    memset(s, 0, sizeof *s);
}

static size_t max_sz(size_t a, size_t b) {
    return a > b ? a : b;
}

size_t rl__moe_mm_scratch_size(const rl__moe_cfg *c, const rl__moe_w *w, int32_t max_batch) {
    size_t s = rl_matmul_scratch_size(&w->router, max_batch);
    const rl_mat *ms[] = {&w->gate, &w->up, &w->down, &w->sh_gate, &w->sh_up, &w->sh_down};
    for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++)
        if (ms[i]->data) s = max_sz(s, rl_matmul_scratch_size(ms[i], max_batch));
    (void)c;
    return s;
}

/* -------------------------------------------------------------- routing */

void rl__moe_route(const rl__moe_cfg *c, rl__moe_scratch *s, int32_t n) {
    const int32_t ne = c->n_expert, k = c->n_used;
    memset(s->cnt, 0, (size_t)ne * sizeof *s->cnt);
    for (int32_t t = 0; t < n; t++) {
        float *p = s->logits + (size_t)t * ne;
        if (c->gating == RL__MOE_GATING_SIGMOID)
            for (int32_t e = 0; e < ne; e++) p[e] = 1.0f / (1.0f + expf(-p[e]));
        else if (c->gating == RL__MOE_GATING_SOFTMAX)
            rl_softmax(p, ne);
        /* SOFTMAX_WEIGHT: select on the logits, softmax over the k below */
        int32_t *sel = s->sel + (size_t)t * k;
        float *w = s->wts + (size_t)t * k;
        /* top-k by repeated scans (k and n_expert are small); strict >
         * keeps the lower expert id on ties */
        float sum = 0.0f;
        for (int32_t j = 0; j < k; j++) {
            int32_t best = -1;
            for (int32_t e = 0; e < ne; e++) {
                bool taken = false;
                for (int32_t i = 0; i < j; i++) taken |= sel[i] == e;
                if (!taken && (best < 0 || p[e] > p[best])) best = e;
            }
            sel[j] = best;
            w[j] = p[best];
            sum += w[j];
            s->cnt[best]++;
        }
        if (c->gating == RL__MOE_GATING_SOFTMAX_WEIGHT) {
            rl_softmax(w, k); /* w[0] is the largest */
            sum = 1.0f;
        }
        for (int32_t j = 0; j < k; j++) {
            if (c->norm_w) w[j] /= sum;
            if (c->w_scale != 1.0f) w[j] *= c->w_scale;
        }
    }
    s->off[0] = 0;
    for (int32_t e = 0; e < ne; e++) s->off[e + 1] = s->off[e] + s->cnt[e];
    /* fill each group in ascending token order; cnt counts back up */
    memset(s->cnt, 0, (size_t)ne * sizeof *s->cnt);
    for (int32_t t = 0; t < n; t++)
        for (int32_t j = 0; j < k; j++) {
            int32_t e = s->sel[(size_t)t * k + j], r = s->off[e] + s->cnt[e]++;
            s->tok[r] = t;
            s->tw[r] = s->wts[(size_t)t * k + j];
        }
}

/* ------------------------------------------------------- grouped matmul */

typedef enum { JOB_GATHER, JOB_ACT, JOB_SCATTER } job_kind;

/* Row-parallel helper over one expert's group of `cnt` rows. */
typedef struct moe_job {
    job_kind kind;
    const rl__moe_cfg *c;
    const float *x;       /* gather: the layer input [n][n_embd] */
    float *out;           /* scatter: the layer output [n][n_embd] */
    const int32_t *tok;   /* the group's tokens */
    const float *tw;      /* their weights (NULL: 1, the shared expert's own gate) */
    const float *sh_g;    /* scatter of the shared expert: its gate vector, or NULL */
    const float *gb, *ub; /* act: the expert's gate / up biases [ff], or NULL */
    const float *db;      /* scatter: the expert's down bias [n_embd], or NULL */
    float *xg, *g, *u, *yg;
    int32_t cnt;
    int64_t ff;
} moe_job;

static float dot_f32(const float *a, const float *b, int64_t n) {
    float s = 0.0f;
    for (int64_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

static void moe_task(void *ctx, int ith, int nth) {
    const moe_job *J = ctx;
    const int64_t E = J->c->n_embd, F = J->ff;
    int32_t per = (J->cnt + nth - 1) / nth, r0 = per * ith, r1 = r0 + per;
    if (r1 > J->cnt) r1 = J->cnt;
    for (int32_t r = r0; r < r1; r++) {
        switch (J->kind) {
        case JOB_GATHER:
            memcpy(J->xg + r * E, J->x + (size_t)J->tok[r] * E, (size_t)E * sizeof(float));
            break;
        case JOB_ACT: {
            float *g = J->g + r * F, *u = J->u + r * F;
            if (J->gb)
                for (int64_t i = 0; i < F; i++) g[i] += J->gb[i];
            if (J->ub)
                for (int64_t i = 0; i < F; i++) u[i] += J->ub[i];
            if (J->c->act == RL__ACT_SWIGLU_OAI)
                for (int64_t i = 0; i < F; i++) {
                    float x = g[i] < 7.0f ? g[i] : 7.0f;
                    float y = u[i] < -7.0f ? -7.0f : u[i] > 7.0f ? 7.0f : u[i];
                    g[i] = x / (1.0f + expf(-1.702f * x)) * (y + 1.0f);
                }
            else if (J->c->act == RL__ACT_GELU_TANH)
                rl_gelu_mul(g, g, u, F);
            else
                rl_silu_mul(g, g, u, F);
            break;
        }
        case JOB_SCATTER: {
            int32_t t = J->tok ? J->tok[r] : r;
            float w = J->tw ? J->tw[r] : 1.0f;
            if (J->sh_g) w = 1.0f / (1.0f + expf(-dot_f32(J->x + (size_t)t * E, J->sh_g, E)));
            float *o = J->out + (size_t)t * E;
            const float *y = J->yg + r * E;
            if (J->db)
                for (int64_t d = 0; d < E; d++) o[d] += w * (y[d] + J->db[d]);
            else
                for (int64_t d = 0; d < E; d++) o[d] += w * y[d];
            break;
        }
        }
    }
}

/* Runs the job on the pool when the group is large enough to split. */
static void job_run(moe_job *J, rl_threadpool *tp) {
    if (J->cnt * (J->kind == JOB_ACT ? J->ff : J->c->n_embd) < 8192)
        moe_task(J, 0, 1);
    else
        rl_threadpool_run(tp, moe_task, J);
}

/* One FFN (gate, up, biases gb/ub or NULL, act, down) over `cnt` gathered
 * rows xin (their prompt flags fin, or NULL) into s->yg. */
static void ffn_rows(const rl__moe_cfg *c, const rl_mat *g, const rl_mat *u, const rl_mat *d,
                     const float *gb, const float *ub, const float *xin, const bool *fin,
                     int32_t cnt, rl__moe_scratch *s, void *mm, rl_threadpool *tp) {
    const rl_mat *w2[2] = {g, u};
    float *y2[2] = {s->g, s->u};
    rl_matmul_multi_ex(w2, y2, 2, xin, cnt, fin, mm, tp);
    moe_job J = {.kind = JOB_ACT,
                 .c = c,
                 .g = s->g,
                 .u = s->u,
                 .gb = gb,
                 .ub = ub,
                 .cnt = cnt,
                 .ff = g->n_rows};
    job_run(&J, tp);
    rl_matmul_ex(d, s->g, s->yg, cnt, fin, mm, tp);
}

void rl__moe_ffn(const rl__moe_cfg *c, const rl__moe_w *w, const float *x, const bool *fast,
                 int32_t n, float *out, rl__moe_scratch *s, void *mm_scratch, rl_threadpool *tp) {
    RL_ASSERT(n >= 1 && n <= s->max_batch);
    const int64_t E = c->n_embd, F = c->n_ff_exp;
    rl_matmul_ex(&w->router, x, s->logits, n, fast, mm_scratch, tp);
    if (w->router_b)
        for (int32_t t = 0; t < n; t++)
            for (int32_t e = 0; e < c->n_expert; e++)
                s->logits[(size_t)t * c->n_expert + e] += w->router_b[e];
    rl__moe_route(c, s, n);
    memset(out, 0, (size_t)n * (size_t)E * sizeof(float));
    s->n_active = 0;
    for (int32_t e = 0; e < c->n_expert; e++) {
        int32_t cnt = s->off[e + 1] - s->off[e];
        if (cnt == 0) continue; /* never touched */
        s->n_active++;
        const int32_t *tok = s->tok + s->off[e];
        /* every token selected e (always at decode): the input is already
         * the group, in order */
        const float *xin = x;
        const bool *fin = fast;
        if (cnt < n) {
            moe_job G = {.kind = JOB_GATHER, .c = c, .x = x, .tok = tok, .xg = s->xg, .cnt = cnt};
            job_run(&G, tp);
            xin = s->xg;
            if (fast)
                for (int32_t j = 0; j < cnt; j++) s->fg[j] = fast[tok[j]];
            fin = fast ? s->fg : NULL;
        }
        rl_mat ge = rl__mat_rows(&w->gate, (int64_t)e * F, F);
        rl_mat ue = rl__mat_rows(&w->up, (int64_t)e * F, F);
        rl_mat de = rl__mat_rows(&w->down, (int64_t)e * E, E);
        ffn_rows(c, &ge, &ue, &de, w->gate_b ? w->gate_b + (size_t)e * F : NULL,
                 w->up_b ? w->up_b + (size_t)e * F : NULL, xin, fin, cnt, s, mm_scratch, tp);
        moe_job S = {.kind = JOB_SCATTER,
                     .c = c,
                     .out = out,
                     .tok = tok,
                     .tw = s->tw + s->off[e],
                     .db = w->down_b ? w->down_b + (size_t)e * E : NULL,
                     .yg = s->yg,
                     .cnt = cnt};
        job_run(&S, tp);
    }
    if (w->sh_gate.data) { /* the shared expert: every token, gated by sigmoid(x . g) */
        ffn_rows(c, &w->sh_gate, &w->sh_up, &w->sh_down, NULL, NULL, x, fast, n, s, mm_scratch, tp);
        moe_job S = {.kind = JOB_SCATTER,
                     .c = c,
                     .x = x,
                     .out = out,
                     .sh_g = w->sh_gate_inp,
                     .yg = s->yg,
                     .cnt = n};
        job_run(&S, tp);
    }
}

/* ---------------------------------------------------------- model glue */

rl_status rl__hparams_moe(rl_model *m, bool required, bool ff_exp_key, rl__moe_gating gating,
                          bool norm_w, rl_err *err) {
    rl_hparams *hp = &m->hp;
    rl__moe_cfg *c = &hp->moe;
    memset(c, 0, sizeof *c);
    rl_status st = rl__hp_i32(m, "expert_count", required, 0, required ? 1 : 0, RL_MOE_MAX_EXPERTS,
                              &c->n_expert, err);
    if (st || c->n_expert == 0) return st;
    char k[96];
    snprintf(k, sizeof k, "%s.expert_used_count", m->arch_name);
    if (rl_gguf_find_key(m->gguf, k) < 0)
        return rl_err_set(err, RL_ERR_FORMAT, "missing hyperparameter '%s' (expert_count is %d)", k,
                          (int)c->n_expert);
    int64_t used;
    if ((st = rl_gguf_get_i64(m->gguf, k, 0, &used, err))) return st;
    if (used < 1 || used > c->n_expert)
        return rl_err_set(err, RL_ERR_FORMAT,
                          "hyperparameter '%s' = %lld out of range [1, %s.expert_count = %d]", k,
                          (long long)used, m->arch_name, (int)c->n_expert);
    c->n_used = (int32_t)used;
    c->n_embd = hp->n_embd;
    c->n_ff_exp = hp->n_ff;
    if (ff_exp_key && (st = rl__hp_i32(m, "expert_feed_forward_length", false, hp->n_ff / c->n_used,
                                       1, RL_MODEL_MAX_DIM, &c->n_ff_exp, err)))
        return st;
    if (c->n_ff_exp < 1)
        return rl_err_set(err, RL_ERR_FORMAT, "%s: expert feed-forward length is 0", m->arch_name);
    c->gating = gating;
    c->norm_w = norm_w;
    c->w_scale = 1.0f;
    c->act = hp->act;
    return RL_OK;
}

/* "blk.il.<suffix>" into nm. */
static const char *layer_name(char *nm, size_t cap, int32_t il, const char *suffix) {
    snprintf(nm, cap, "blk.%d.%s", (int)il, suffix);
    return nm;
}

rl_status rl__bind_moe(rl_model *m, int32_t il, bool sh_gate, rl_err *err) {
    const rl__moe_cfg *c = &m->hp.moe;
    rl__moe_w *w = &m->layers[il].moe;
    const int64_t E = c->n_embd, F = c->n_ff_exp, NE = c->n_expert;
    char nm[96];
    rl_status st;
    /* the router's row count is the expert count: say so when it differs */
    const rl_gguf_tensor *t =
        rl_gguf_find_tensor(m->gguf, layer_name(nm, sizeof nm, il, "ffn_gate_inp.weight"));
    if (t && t->n_dims == 2 && t->ne[0] == E && t->ne[1] != NE)
        return rl_err_set(err, RL_ERR_FORMAT,
                          "tensor '%s' has %lld router rows, expected %s.expert_count = %lld", nm,
                          (long long)t->ne[1], m->arch_name, (long long)NE);
    if ((st = rl__bind_mat(m, nm, NE, E, true, &w->router, err)) ||
        (st = rl__bind_mat3(m, layer_name(nm, sizeof nm, il, "ffn_gate_exps.weight"), F, E, NE,
                            true, &w->gate, err)) ||
        (st = rl__bind_mat3(m, layer_name(nm, sizeof nm, il, "ffn_up_exps.weight"), F, E, NE, true,
                            &w->up, err)) ||
        (st = rl__bind_mat3(m, layer_name(nm, sizeof nm, il, "ffn_down_exps.weight"), E, F, NE,
                            true, &w->down, err)))
        return st;
    if (c->n_ff_sh > 0) {
        const int64_t FS = c->n_ff_sh;
        if ((st = rl__bind_layer_mat(m, il, "ffn_gate_shexp.weight", FS, E, true, &w->sh_gate,
                                     err)) ||
            (st = rl__bind_layer_mat(m, il, "ffn_up_shexp.weight", FS, E, true, &w->sh_up, err)) ||
            (st =
                 rl__bind_layer_mat(m, il, "ffn_down_shexp.weight", E, FS, true, &w->sh_down, err)))
            return st;
        if (sh_gate && (st = rl__bind_layer_vec(m, il, "ffn_gate_inp_shexp.weight", E, true,
                                                &w->sh_gate_inp, err)))
            return st;
    }
    return RL_OK;
}

void rl__block_moe(rl_model *m, rl__fwd *f, int32_t il, const float *in, float *out) {
    rl__moe_ffn(&m->hp.moe, &m->layers[il].moe, in, f->fast, f->n, out, &m->moe_s, m->mm_scratch,
                f->tp);
}

/* ------------------------------------------------ active bytes (bench) */

static bool has_prefix(const char *s, const char *p) {
    return strncmp(s, p, strlen(p)) == 0;
}

rl_model_active_bytes rl_model_active_bytes_of(const rl_model *m) {
    rl_model_active_bytes a;
    memset(&a, 0, sizeof a);
    const rl__moe_cfg *c = &m->hp.moe;
    a.n_expert = c->n_expert;
    a.n_used = c->n_used;
    const rl_gguf *g = m->gguf;
    bool tied = rl_gguf_find_tensor(g, "output.weight") == NULL;
    for (int64_t i = 0; i < rl_gguf_n_tensors(g); i++) {
        const rl_gguf_tensor *t = rl_gguf_tensor_at(g, i);
        const char *nm = t->name;
        if (!strcmp(nm, "token_embd.weight")) {
            if (tied)
                a.head += t->nbytes;
            else if (t->n_dims >= 2 && t->ne[1] > 0)
                a.embd_row += t->nbytes / (size_t)t->ne[1];
            continue;
        }
        if (has_prefix(nm, "output.") || has_prefix(nm, "output_norm.")) {
            a.head += t->nbytes;
            continue;
        }
        const char *sfx = NULL;
        if (has_prefix(nm, "blk.")) {
            const char *dot = strchr(nm + 4, '.');
            sfx = dot ? dot + 1 : nm;
        }
        if (!sfx) {
            a.dense += t->nbytes;
        } else if (has_prefix(sfx, "attn_")) {
            a.attn += t->nbytes;
        } else if (!strcmp(sfx, "ffn_gate_inp.weight") || !strcmp(sfx, "ffn_gate_inp.bias")) {
            a.router += t->nbytes;
        } else if (strstr(sfx, "_exps.") && c->n_expert > 0 && t->n_dims >= 2 &&
                   t->ne[t->n_dims - 1] == c->n_expert) {
            a.experts += t->nbytes / (size_t)c->n_expert * (size_t)c->n_used;
        } else {
            a.dense += t->nbytes;
        }
    }
    a.total = a.attn + a.router + a.experts + a.dense + a.embd_row + a.head;
    return a;
}
