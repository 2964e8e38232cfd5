/* Mixture-of-experts checks.
 *
 * The expert-grouped FFN (model/moe.c, rl__moe_ffn) against a naive
 * per-token twin written here (float64 router softmax/sigmoid, top-k by
 * sorting, each selected expert's FFN per token): softmax and sigmoid
 * gating, with and without renormalisation, a weight scale, a shared
 * expert with its sigmoid gate; the grouped call on a batch is
 * bit-identical to the same call one token at a time (batch invariance);
 * experts no token selected are never read (their weights are poisoned
 * with NaN and the result does not change) and the number of experts run
 * is the number of distinct selections (k at batch 1); gpt-oss's routing
 * (softmax over the k selected logits) and clamped SwiGLU; attention sinks
 * against a naive softmax over [scores, sink].
 *
 * MoE files (qwen3moe, qwen2moe, llama with experts, olmoe, granitemoe)
 * written with the gguf writer: they load, the forward is batch-invariant
 * (one prefill = single steps = two interleaved sequences) with tokens
 * selecting different experts, and bad hyperparameters and tensors are
 * refused with errors naming the field (k > n_expert, k < 1, a missing
 * expert_count, an expert tensor of the wrong shape, a router whose row
 * count differs from expert_count, granitemoe's unsupported shared expert);
 * the active bytes per decoded token (rl_model_active_bytes_of) of three
 * of them against counts made by hand.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/threadpool.h"
#include "gguf/gguf.h"
#include "kv/seqkv.h"
#include "mtest.h"
#include "model/model-impl.h"

/* ------------------------------------------------ grouped FFN vs twin */

enum { NE = 8, E = 64, F = 32, FS = 48, NT = 13 };

static float frand(uint32_t *s) {
    *s = *s * 1664525u + 1013904223u;
    return ((float)(*s >> 8) / 16777216.0f) * 2.0f - 1.0f;
}

static rl_mat f32_mat(float *data, int64_t rows, int64_t cols) {
    rl_mat w = {RL_TYPE_F32, rows, cols, (size_t)cols * sizeof(float), data, RL_MAT_ROWS};
    return w;
}

typedef struct weights {
    float router[NE * E], gate[NE * F * E], up[NE * F * E], down[NE * E * F];
    float sg[FS * E], su[FS * E], sd[E * FS], sgi[E];
} weights;

static void fill(float *p, size_t n, float scale, uint32_t *s) {
    for (size_t i = 0; i < n; i++) p[i] = frand(s) * scale;
}

static rl__moe_w bind(weights *W, bool shared) {
    rl__moe_w w = {0};
    w.router = f32_mat(W->router, NE, E);
    w.gate = f32_mat(W->gate, NE * F, E);
    w.up = f32_mat(W->up, NE * F, E);
    w.down = f32_mat(W->down, NE * E, F);
    if (shared) {
        w.sh_gate = f32_mat(W->sg, FS, E);
        w.sh_up = f32_mat(W->su, FS, E);
        w.sh_down = f32_mat(W->sd, E, FS);
        w.sh_gate_inp = W->sgi;
    }
    return w;
}

static double dotd(const float *a, const float *b, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += (double)a[i] * b[i];
    return s;
}

/* o[E] += wt * down(act(gate x) * up x) for one token, in double. */
static bool g_oai; /* gpt-oss's clamped SwiGLU instead of SiLU */
static void naive_expert(const float *g, const float *u, const float *d, int64_t ff, const float *x,
                         double wt, double *o) {
    double h[FS > F ? FS : F];
    for (int64_t r = 0; r < ff; r++) {
        double a = dotd(g + r * E, x, E), b = dotd(u + r * E, x, E);
        if (g_oai) {
            a = a < 7.0 ? a : 7.0;
            b = b < -7.0 ? -7.0 : b > 7.0 ? 7.0 : b;
            h[r] = a / (1.0 + exp(-1.702 * a)) * (b + 1.0);
        } else {
            h[r] = a / (1.0 + exp(-a)) * b;
        }
    }
    for (int64_t c = 0; c < E; c++) {
        double s = 0;
        for (int64_t r = 0; r < ff; r++) s += (double)d[c * ff + r] * h[r];
        o[c] += wt * s;
    }
}

/* The twin: per token, router, gating, top-k by sorting, each expert. */
static void naive_ffn(const rl__moe_cfg *c, const weights *W, bool shared, const float *x,
                      int32_t n, float *out, int *used /* [NE] set when selected */) {
    for (int32_t t = 0; t < n; t++) {
        const float *xt = x + (size_t)t * E;
        double p[NE], mx = -1e300, sum = 0;
        int idx[NE];
        for (int e = 0; e < NE; e++) {
            p[e] = dotd(W->router + e * E, xt, E);
            mx = p[e] > mx ? p[e] : mx;
            idx[e] = e;
        }
        if (c->gating != RL__MOE_GATING_SOFTMAX_WEIGHT) {
            for (int e = 0; e < NE; e++) {
                p[e] =
                    c->gating == RL__MOE_GATING_SIGMOID ? 1.0 / (1.0 + exp(-p[e])) : exp(p[e] - mx);
                sum += p[e];
            }
            if (c->gating == RL__MOE_GATING_SOFTMAX)
                for (int e = 0; e < NE; e++) p[e] /= sum;
        }
        for (int i = 0; i < NE; i++) /* insertion sort, descending */
            for (int j = i; j > 0 && p[idx[j]] > p[idx[j - 1]]; j--) {
                int tmp = idx[j];
                idx[j] = idx[j - 1];
                idx[j - 1] = tmp;
            }
        double wsum = 0, o[E] = {0};
        if (c->gating == RL__MOE_GATING_SOFTMAX_WEIGHT) { /* softmax over the k logits */
            double top = p[idx[0]], z = 0;
            for (int j = 0; j < c->n_used; j++) z += exp(p[idx[j]] - top);
            for (int j = 0; j < c->n_used; j++) p[idx[j]] = exp(p[idx[j]] - top) / z;
        }
        for (int j = 0; j < c->n_used; j++) wsum += p[idx[j]];
        for (int j = 0; j < c->n_used; j++) {
            int e = idx[j];
            double wt = p[e] / (c->norm_w ? wsum : 1.0) * c->w_scale;
            used[e] = 1;
            naive_expert(W->gate + (size_t)e * F * E, W->up + (size_t)e * F * E,
                         W->down + (size_t)e * E * F, F, xt, wt, o);
        }
        if (shared) {
            double z = dotd(W->sgi, xt, E);
            naive_expert(W->sg, W->su, W->sd, FS, xt, 1.0 / (1.0 + exp(-z)), o);
        }
        for (int d = 0; d < E; d++) out[(size_t)t * E + d] = (float)o[d];
    }
}

static void check_cfg(rl__moe_gating gating, bool norm_w, float w_scale, bool shared, int k) {
    static weights W, P;
    uint32_t seed = 12345u + (uint32_t)k * 7u + (shared ? 99u : 0u);
    fill(W.router, sizeof W.router / 4, 0.6f, &seed);
    fill(W.gate, sizeof W.gate / 4, 0.25f, &seed);
    fill(W.up, sizeof W.up / 4, 0.25f, &seed);
    fill(W.down, sizeof W.down / 4, 0.3f, &seed);
    fill(W.sg, sizeof W.sg / 4, 0.25f, &seed);
    fill(W.su, sizeof W.su / 4, 0.25f, &seed);
    fill(W.sd, sizeof W.sd / 4, 0.3f, &seed);
    fill(W.sgi, E, 0.3f, &seed);
    static float x[NT * E], out[NT * E], one[NT * E], ref[NT * E], pois[NT * E];
    fill(x, NT * E, 1.0f, &seed);
    rl__moe_cfg c = {.n_expert = NE,
                     .n_used = k,
                     .n_embd = E,
                     .n_ff_exp = F,
                     .n_ff_sh = shared ? FS : 0,
                     .gating = gating,
                     .norm_w = norm_w,
                     .w_scale = w_scale,
                     .act = g_oai ? RL__ACT_SWIGLU_OAI : RL__ACT_SILU};
    rl__moe_w w = bind(&W, shared);
    rl__moe_scratch s;
    rl_err err = {0};
    assert_int_equal(rl__moe_scratch_init(&s, &c, NT, &err), RL_OK);
    void *mm = malloc(rl__moe_mm_scratch_size(&c, &w, NT));
    rl_threadpool *tp = rl_threadpool_new(2);
    assert_non_null(tp);

    rl__moe_ffn(&c, &w, x, NULL, NT, out, &s, mm, tp);
    int used[NE] = {0}, n_used = 0;
    naive_ffn(&c, &W, shared, x, NT, ref, used);
    for (int e = 0; e < NE; e++) n_used += used[e];
    assert_int_equal(s.n_active, n_used);
    assert_true(n_used > k); /* the batch's tokens chose different experts */
    float md = 0, mx = 0;
    for (int i = 0; i < NT * E; i++) {
        md = fmaxf(md, fabsf(out[i] - ref[i]));
        mx = fmaxf(mx, fabsf(ref[i]));
    }
    if (md > 1e-5f * fmaxf(1.0f, mx)) fail_msg("grouped vs twin: max |d| %g (max %g)", md, mx);

    /* one token at a time (decode): bit-identical, k experts run */
    for (int t = 0; t < NT; t++) {
        rl__moe_ffn(&c, &w, x + t * E, NULL, 1, one + t * E, &s, mm, tp);
        assert_int_equal(s.n_active, k);
    }
    assert_memory_equal(out, one, sizeof out);

    /* experts nobody selected are never read: poison them */
    if (n_used < NE) {
        P = W;
        for (int e = 0; e < NE; e++) {
            if (used[e]) continue;
            for (int i = 0; i < F * E; i++) P.gate[e * F * E + i] = P.up[e * F * E + i] = NAN;
            for (int i = 0; i < E * F; i++) P.down[e * E * F + i] = NAN;
        }
        rl__moe_w wp = bind(&P, shared);
        rl__moe_ffn(&c, &wp, x, NULL, NT, pois, &s, mm, tp);
        assert_memory_equal(out, pois, sizeof out);
    }
    rl_threadpool_free(tp);
    free(mm);
    rl__moe_scratch_free(&s);
}

static void test_grouped_vs_twin(void **state) {
    (void)state;
    check_cfg(RL__MOE_GATING_SOFTMAX, true, 1.0f, false, 2);  /* mixtral, qwen3moe */
    check_cfg(RL__MOE_GATING_SOFTMAX, false, 1.0f, false, 3); /* olmoe */
    check_cfg(RL__MOE_GATING_SOFTMAX, false, 1.0f, true, 2);  /* qwen2moe */
    check_cfg(RL__MOE_GATING_SIGMOID, true, 2.5f, false, 2);  /* sigmoid + scale */
    check_cfg(RL__MOE_GATING_SIGMOID, false, 0.5f, true, 1);
    g_oai = true; /* gpt-oss: softmax over the selected logits, clamped SwiGLU */
    check_cfg(RL__MOE_GATING_SOFTMAX_WEIGHT, false, 1.0f, false, 2);
    check_cfg(RL__MOE_GATING_SOFTMAX_WEIGHT, false, 1.0f, false, 4);
    g_oai = false;
}

/* Attention sinks (gpt-oss): rl_attention with sinks[h] against a naive
 * softmax over [scores, sink] (f32 pages, one sequence, GQA 4/2). */
static void test_attention_sinks(void **state) {
    (void)state;
    enum { HD = 16, NH = 4, NKV = 2, BS = 4, NP = 11 };
    static float kbuf[3 * NKV * BS * HD], vbuf[3 * NKV * BS * HD];
    rl_kv_layer kv = {.k_type = RL_TYPE_F32,
                      .v_type = RL_TYPE_F32,
                      .n_kv_head = NKV,
                      .head_dim = HD,
                      .block_size = BS,
                      .k_base = kbuf,
                      .v_base = vbuf,
                      .k_block_bytes = NKV * BS * HD * sizeof(float),
                      .v_block_bytes = NKV * BS * HD * sizeof(float)};
    int32_t bt[3] = {2, 0, 1};
    static float K[NP][NKV * HD], V[NP][NKV * HD], q[NH * HD], out[NH * HD];
    uint32_t seed = 777u;
    for (int p = 0; p < NP; p++) {
        fill(K[p], NKV * HD, 1.0f, &seed);
        fill(V[p], NKV * HD, 1.0f, &seed);
        rl_kv_store(&kv, bt, p, K[p], V[p]);
    }
    fill(q, NH * HD, 1.0f, &seed);
    const float sinks[NH] = {-30.0f, 0.0f, 1.5f, 4.0f};
    int32_t pos = NP - 1;
    rl_attn_args a = {.q = q,
                      .out = out,
                      .n_tok = 1,
                      .n_head = NH,
                      .pos = &pos,
                      .block_table = bt,
                      .kv = &kv,
                      .scale = 0.25f,
                      .sinks = sinks};
    rl_attention(&a, NULL);
    for (int h = 0; h < NH; h++) {
        int kh = h / (NH / NKV);
        double s[NP], mx = sinks[h], den = 0, o[HD] = {0};
        for (int p = 0; p < NP; p++) {
            s[p] = dotd(q + h * HD, K[p] + kh * HD, HD) * 0.25;
            mx = s[p] > mx ? s[p] : mx;
        }
        for (int p = 0; p < NP; p++) den += exp(s[p] - mx);
        den += exp(sinks[h] - mx);
        for (int p = 0; p < NP; p++)
            for (int d = 0; d < HD; d++) o[d] += exp(s[p] - mx) / den * V[p][kh * HD + d];
        for (int d = 0; d < HD; d++)
            if (fabs(o[d] - out[h * HD + d]) > 1e-5)
                fail_msg("head %d dim %d: %g vs naive %g", h, d, out[h * HD + d], o[d]);
    }
    /* a sink far below every score changes nothing; a high one does */
    static float plain[NH * HD];
    a.out = plain;
    a.sinks = NULL;
    rl_attention(&a, NULL);
    for (int d = 0; d < HD; d++) assert_true(fabsf(plain[d] - out[d]) < 1e-6f);
    assert_true(fabsf(plain[3 * HD] - out[3 * HD]) > 1e-3f);
}

/* ------------------------------------------------------ MoE GGUF files */

typedef struct mspec {
    const char *arch;
    int64_t n_expert, n_used; /* < 0: key not written */
    const char *bad_shape;    /* tensor suffix whose last dim gets +1 */
    int64_t router_rows;      /* 0 = n_expert */
    int64_t shexp_ff;         /* granitemoe: expert_shared_feed_forward_length when > 0 */
    bool untied;              /* write output.weight */
} mspec;

enum { ME = 32, MF = 48, MV = 64, ML = 2 };
static float g_data[8 * MF * ME + 64];

static void add_t(rl_gguf_writer *w, const mspec *s, const char *name, int64_t ne0, int64_t ne1,
                  int64_t ne2) {
    const char *dot = strchr(name, '.');
    const char *suffix = dot && !strncmp(name, "blk.", 4) ? strchr(dot + 1, '.') + 1 : name;
    if (s->bad_shape && !strcmp(s->bad_shape, suffix)) {
        if (ne2 > 1)
            ne2++;
        else
            ne1++;
    }
    int64_t ne[3] = {ne0, ne1, ne2};
    uint32_t nd = ne2 > 1 ? 3 : ne1 > 1 ? 2 : 1;
    assert_int_equal(rl_gguf_writer_tensor(w, name, RL_TYPE_F32, nd, ne, g_data), RL_OK);
}

static bool is(const mspec *s, const char *a) {
    return !strcmp(s->arch, a);
}

static void build(const mspec *s, void **buf, size_t *size) {
    for (size_t i = 0; i < sizeof g_data / sizeof g_data[0]; i++)
        g_data[i] = 0.2f * sinf((float)i * 0.37f) + 0.1f * cosf((float)i * 1.91f);
    rl_gguf_writer *w = rl_gguf_writer_new();
    assert_non_null(w);
    char k[96];
    rl_gguf_writer_str(w, "general.architecture", s->arch, strlen(s->arch));
#define KV(key, v)                                                                                 \
    do {                                                                                           \
        snprintf(k, sizeof k, "%s." key, s->arch);                                                 \
        rl_gguf_writer_u32(w, k, (uint32_t)(v));                                                   \
    } while (0)
    KV("block_count", ML);
    KV("embedding_length", ME);
    KV("feed_forward_length", MF);
    KV("attention.head_count", 4);
    KV("attention.head_count_kv", is(s, "olmoe") ? 4 : 2);
    KV("context_length", 128);
    if (s->n_expert >= 0) KV("expert_count", s->n_expert);
    if (s->n_used >= 0) KV("expert_used_count", s->n_used);
    if (is(s, "qwen2moe")) KV("expert_shared_feed_forward_length", 40);
    if (s->shexp_ff > 0) KV("expert_shared_feed_forward_length", s->shexp_ff);
#undef KV
    if (is(s, "granitemoe")) {
        const char *keys[] = {"embedding_scale", "residual_scale", "attention.scale",
                              "logit_scale"};
        const float vals[] = {6.0f, 0.5f, 0.125f, 2.0f};
        for (int i = 0; i < 4; i++) {
            snprintf(k, sizeof k, "%s.%s", s->arch, keys[i]);
            rl_gguf_writer_f32(w, k, vals[i]);
        }
    }
    int64_t nexp = s->n_expert > 0 && s->n_expert <= 8 ? s->n_expert : 4, hd = ME / 4;
    int64_t nkv = (is(s, "olmoe") ? 4 : 2) * hd;
    int64_t ff = is(s, "qwen2moe") || is(s, "qwen3moe") ? MF / 2 : MF; /* default n_ff / k */
    add_t(w, s, "token_embd.weight", ME, MV, 1);
    add_t(w, s, "output_norm.weight", ME, 1, 1);
    if (s->untied) add_t(w, s, "output.weight", ME, MV, 1);
    for (int il = 0; il < ML; il++) {
        char n[64];
#define T(suffix, a, b, c)                                                                         \
    do {                                                                                           \
        snprintf(n, sizeof n, "blk.%d." suffix, il);                                               \
        add_t(w, s, n, a, b, c);                                                                   \
    } while (0)
        T("attn_norm.weight", ME, 1, 1);
        T("attn_q.weight", ME, ME, 1);
        T("attn_k.weight", ME, nkv, 1);
        T("attn_v.weight", ME, nkv, 1);
        T("attn_output.weight", ME, ME, 1);
        T("ffn_norm.weight", ME, 1, 1);
        T("ffn_gate_inp.weight", ME, s->router_rows ? s->router_rows : nexp, 1);
        T("ffn_gate_exps.weight", ME, ff, nexp);
        T("ffn_up_exps.weight", ME, ff, nexp);
        T("ffn_down_exps.weight", ff, ME, nexp);
        if (is(s, "qwen3moe")) {
            T("attn_q_norm.weight", hd, 1, 1);
            T("attn_k_norm.weight", hd, 1, 1);
        }
        if (is(s, "olmoe")) {
            T("attn_q_norm.weight", ME, 1, 1);
            T("attn_k_norm.weight", nkv, 1, 1);
        }
        if (is(s, "qwen2moe")) {
            T("ffn_gate_inp_shexp.weight", ME, 1, 1);
            T("ffn_gate_shexp.weight", ME, 40, 1);
            T("ffn_up_shexp.weight", ME, 40, 1);
            T("ffn_down_shexp.weight", 40, ME, 1);
        }
#undef T
    }
    rl_err err;
    assert_int_equal(rl_gguf_writer_to_memory(w, buf, size, &err), RL_OK);
    rl_gguf_writer_free(w);
}

static rl_status load(const mspec *s, const rl_model_opts *o, rl_model **out, void **buf,
                      rl_err *err) {
    size_t size;
    build(s, buf, &size);
    return mt_load_memory(*buf, size, o, out, err);
}

static mspec ok_spec(const char *arch) {
    mspec s = {arch, 4, 2, NULL, 0, 0, false};
    return s;
}

static float max_diff(const float *a, const float *b, size_t n) {
    float d = 0;
    for (size_t i = 0; i < n; i++) d = fmaxf(d, fabsf(a[i] - b[i]));
    return d;
}

static void check_invariance(const char *arch) {
    mspec s = ok_spec(arch);
    rl_model *m = NULL;
    void *buf = NULL;
    rl_err err = {0};
    enum { N = 12 };
    rl_model_opts o = {.max_batch = 2 * N};
    if (load(&s, &o, &m, &buf, &err)) fail_msg("%s: %s", arch, err.msg);
    assert_string_equal(rl_model_arch(m), arch);
    int32_t toks[N] = {1, 5, 9, 13, 2, 63, 0, 7, 7, 30, 31, 4};
    static float all[N * MV], step[N * MV], multi[2 * N * MV];
    rl_threadpool *tp = rl_threadpool_new(2);
    rl_seqkv kv;
    assert_int_equal(rl_seqkv_init(&kv, m, 32, 2, 4, RL_TYPE_F32, &err), RL_OK);
    assert_int_equal(rl_seqkv_eval(&kv, m, 0, toks, N, 0, true, all, tp, &err), RL_OK);
    if (m->moe_s.n_active <= 2) fail_msg("%s: only %d experts used", arch, m->moe_s.n_active);
    for (int i = 0; i < N; i++)
        assert_int_equal(rl_seqkv_eval(&kv, m, 1, toks + i, 1, i, false, step + i * MV, NULL, &err),
                         RL_OK);
    for (int i = 0; i < N * MV; i++) assert_true(isfinite(all[i]));
    if (max_diff(all, step, N * MV) != 0.0f) fail_msg("%s: prefill != steps", arch);
    int32_t bt[2 * N], bp[2 * N], bs[2 * N];
    bool want[2 * N];
    rl_batch b = mt_interleaved_batch(toks, N, &kv, bt, bp, bs, want);
    assert_int_equal(rl_model_forward(m, &b, kv.layers, multi, tp, &err), RL_OK);
    for (int j = 0; j < 2 * N; j++)
        if (max_diff(multi + j * MV, all + bp[j] * MV, MV) != 0.0f)
            fail_msg("%s: interleaved batch row %d differs", arch, j);
    rl_seqkv_free(&kv);
    rl_threadpool_free(tp);
    rl_model_free(m);
    rl_free(buf);
}

static void test_moe_archs(void **state) {
    (void)state;
    const char *archs[] = {"qwen3moe", "qwen2moe", "llama", "olmoe", "granitemoe"};
    for (int a = 0; a < 5; a++) check_invariance(archs[a]);
}

static void expect_error(const mspec *s, rl_status want, const char *needle) {
    rl_model *m = NULL;
    void *buf = NULL;
    rl_err err = {0};
    rl_status st = load(s, NULL, &m, &buf, &err);
    if (st != want || !strstr(err.msg, needle))
        fail_msg("%s: want status %d with '%s', got %d: '%s'", s->arch, want, needle, st, err.msg);
    assert_null(m);
    rl_free(buf);
}

static void test_moe_bad_input(void **state) {
    (void)state;
    mspec s = ok_spec("qwen3moe");
    s.n_used = 5;
    expect_error(&s, RL_ERR_FORMAT,
                 "'qwen3moe.expert_used_count' = 5 out of range [1, "
                 "qwen3moe.expert_count = 4]");
    s.n_used = 0;
    expect_error(&s, RL_ERR_FORMAT, "'qwen3moe.expert_used_count' = 0 out of range");
    s.n_used = -1;
    expect_error(&s, RL_ERR_FORMAT, "missing hyperparameter 'qwen3moe.expert_used_count'");
    s = ok_spec("olmoe");
    s.n_expert = -1;
    expect_error(&s, RL_ERR_FORMAT, "missing hyperparameter 'olmoe.expert_count'");
    s.n_expert = 0;
    expect_error(&s, RL_ERR_FORMAT, "'olmoe.expert_count' = 0 out of range [1, 512]");
    s.n_expert = 1000;
    expect_error(&s, RL_ERR_FORMAT, "'olmoe.expert_count' = 1000 out of range [1, 512]");
    s = ok_spec("llama");
    s.bad_shape = "ffn_up_exps.weight";
    expect_error(&s, RL_ERR_FORMAT,
                 "tensor 'blk.0.ffn_up_exps.weight' has shape [32, 48, 5], expected [32, 48, 4]");
    s.bad_shape = "ffn_down_exps.weight";
    expect_error(&s, RL_ERR_FORMAT, "'blk.0.ffn_down_exps.weight' has shape [48, 32, 5]");
    s = ok_spec("qwen2moe");
    s.router_rows = 6;
    expect_error(&s, RL_ERR_FORMAT,
                 "tensor 'blk.0.ffn_gate_inp.weight' has 6 router rows, expected "
                 "qwen2moe.expert_count = 4");
    s = ok_spec("granitemoe");
    s.shexp_ff = 16;
    expect_error(&s, RL_ERR_UNSUPPORTED, "granitemoe.expert_shared_feed_forward_length = 16");
    /* an expert tensor the dense llama does not use */
    s = ok_spec("llama");
    s.n_expert = -1;
    s.n_used = -1;
    expect_error(&s, RL_ERR_FORMAT, "missing tensor 'blk.0.ffn_gate.weight'");
}

/* rl_model_active_bytes_of on the files above (all F32: 4 bytes an
 * element; ME 32, MV 64, 2 layers, 4 experts of which 2 are used), each
 * figure counted by hand from build()'s tensor list. */
static void check_active(const mspec *s, size_t attn, size_t router, size_t experts, size_t dense,
                         size_t embd_row, size_t head) {
    rl_model *m = NULL;
    void *buf = NULL;
    rl_err err = {0};
    assert_int_equal(load(s, NULL, &m, &buf, &err), RL_OK);
    rl_model_active_bytes a = rl_model_active_bytes_of(m);
    if (a.attn != attn || a.router != router || a.experts != experts || a.dense != dense ||
        a.embd_row != embd_row || a.head != head)
        fail_msg("%s: attn %zu router %zu experts %zu dense %zu embd_row %zu head %zu", s->arch,
                 a.attn, a.router, a.experts, a.dense, a.embd_row, a.head);
    assert_int_equal(a.total, attn + router + experts + dense + embd_row + head);
    assert_int_equal(a.n_expert, 4);
    assert_int_equal(a.n_used, 2);
    rl_model_free(m);
    rl_free(buf);
}

static void test_active_bytes(void **state) {
    (void)state;
    /* qwen3moe, tied: head = token_embd 32x64 + output_norm 32; per layer
     * attention = attn_norm 32 + q 32x32 + k, v 32x16 + output 32x32 +
     * q/k norms 8 each; router 32x4; experts: gate, up 32x24x4 and down
     * 24x32x4, 2 of the 4 blocks of each; dense: ffn_norm 32 */
    mspec s = ok_spec("qwen3moe");
    size_t attn = 2 * 4 * (32 + 32 * 32 + 2 * 32 * 16 + 32 * 32 + 8 + 8);
    size_t experts = 2 * 4 * (3 * 32 * 24 * 4 / 4 * 2);
    check_active(&s, attn, 2 * 4 * 32 * 4, experts, 2 * 4 * 32, 0, 4 * (32 * 64 + 32));
    assert_int_equal(attn + experts, 24960 + 36864);
    /* qwen2moe: no q/k norms; dense adds the shared expert (gate, up 32x40,
     * down 40x32) and its gate 32 */
    s = ok_spec("qwen2moe");
    check_active(&s, 2 * 4 * (32 + 2 * 32 * 32 + 2 * 32 * 16), 2 * 4 * 32 * 4, experts,
                 2 * 4 * (32 + 32 + 3 * 32 * 40), 0, 4 * (32 * 64 + 32));
    /* llama with experts, untied: one embedding row 32, head = output 32x64
     * + output_norm; experts of 48 rows */
    s = ok_spec("llama");
    s.untied = true;
    check_active(&s, 2 * 4 * (32 + 2 * 32 * 32 + 2 * 32 * 16), 2 * 4 * 32 * 4,
                 2 * 4 * (3 * 32 * 48 * 2), 2 * 4 * 32, 4 * 32, 4 * (32 * 64 + 32));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_grouped_vs_twin), cmocka_unit_test(test_attention_sinks),
        cmocka_unit_test(test_moe_archs),       cmocka_unit_test(test_moe_bad_input),
        cmocka_unit_test(test_active_bytes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
