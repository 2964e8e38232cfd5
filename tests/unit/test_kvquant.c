/* KV-cache quantization tests: q8_0 / q4_0 pages for K and V (chosen
 * separately), stored once by rl_kv_store and read in place by
 * rl_attention.
 *
 * What is checked, under each available implementation (ref, avx2):
 *   - leaves: kq_rows / v_rows AVX2 against the reference twins, and a run
 *     of n rows bit-identical to n single-row calls;
 *   - rl_kv_store writes exactly the reference quantizer's blocks, and the
 *     per-element error is within the format bound (q8_0: |d|/2 plus the
 *     fp16 rounding of d, q4_0: |d|, f16: 2^-11|x| + 2^-25);
 *   - attention for every K/V combination of {f16, q8_0, q4_0} (and f32),
 *     GQA / MQA, windows, softcap, odd block sizes, shuffled block ids:
 *     (a) against a double oracle on the dequantized pages, bound from the
 *         query's q8_0 rounding only, and
 *     (b) against a double oracle on the original f32 K/V, bound from the
 *         page format's error bound;
 *   - batch invariance: each token alone, single-threaded, bit-identical to
 *     the 5-token, 2-thread call;
 *   - AVX2 attention vs reference attention on the same quantized pages;
 *   - copying whole blocks (prefix caching, copy-on-write, swap-in) to other
 *     block ids leaves attention bit-identical.
 *
 * Attention bound.  Per query head, let D be the largest error of a scaled
 * score over the attended positions:
 *   D = scale * max_p [ sum_i |q_i| ek_i + sum_i |k_i| eq_i + sum_i ek_i eq_i ]
 *       + 1e-5 * scale * max_p sum_i |q_i||k_i|        (float summation)
 * with ek_i the K element error bound (0 in (a)) and eq_i the q8_0 query
 * error bound amax_b (1/254 + 2^-11) (0 when K is f16/f32).  Softmax weights
 * then move by at most e^{2D} - 1 in L1 (soft-capping is 1-Lipschitz), so
 *   |out - oracle| <= (e^{2D} - 1) max|v| + max ev + 1e-4 max|v|
 * with ev the V element error bound (0 in (a)).
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels-impl.h"
#include "ktest.h"

#define KT_SEED 0x2545F4914F6CDD1Dull /* the data these tests were written against */

static const rl_type kv_types[] = {RL_TYPE_F16, RL_TYPE_Q8_0, RL_TYPE_Q4_0};
#define N_KV_TYPES 3

static bool is_q(rl_type t) { return t == RL_TYPE_Q8_0 || t == RL_TYPE_Q4_0; }

/* Element error bound of a page format for a row x, written to e[hd]. */
static void elem_bound(rl_type t, const float *x, const void *row, int hd, float *e) {
    for (int i = 0; i < hd; i++) {
        if (t == RL_TYPE_F32) e[i] = 0.0f;
        else if (t == RL_TYPE_F16) e[i] = ldexpf(fabsf(x[i]), -11) + ldexpf(1.0f, -25); /* subnormals */
        else if (t == RL_TYPE_Q8_0) {
            float d = fabsf(rl_fp16_to_f32(((const rl_block_q8_0 *)row)[i / 32].d));
            e[i] = d * 0.5f + d * 128.0f * ldexpf(1.0f, -10); /* code x fp16 rounding of d */
        } else {
            e[i] = fabsf(rl_fp16_to_f32(((const rl_block_q4_0 *)row)[i / 32].d)) * 1.0001f;
        }
    }
}

/* ---------------- leaves ---------------- */

/* Random rows of type t: n rows at stride, plus their dequantized values. */
static void *make_rows(rl_type t, int n, int hd, size_t *stride, float *deq) {
    size_t rb = rl_type_row_size(t, hd);
    *stride = rb + 8; /* a gap between rows: leaves must honour the stride */
    uint8_t *p = calloc((size_t)n, *stride);
    float *x = malloc(sizeof(float) * hd);
    const rl_type_traits *tr = rl_type_get(t);
    for (int r = 0; r < n; r++) {
        float sc = 0.2f + (rnd_unif() + 1.0f);
        for (int i = 0; i < hd; i++) x[i] = rnd_gauss() * sc * (i % 11 == 0 ? 3.0f : 1.0f);
        uint8_t *row = p + (size_t)r * *stride;
        if (t == RL_TYPE_F32) memcpy(row, x, sizeof(float) * hd);
        else tr->from_float(x, row, hd);
        if (t == RL_TYPE_F32) memcpy(deq + (size_t)r * hd, x, sizeof(float) * hd);
        else tr->to_float(row, deq + (size_t)r * hd, hd);
    }
    free(x);
    return p;
}

static void test_leaves(void **state) {
    (void)state;
    const rl__ktab *ref = rl__kernels_ref(), *avx = rl__kernels_avx2();
    const rl__ktab *tabs[2] = {ref, avx};
    const rl_type types[4] = {RL_TYPE_F32, RL_TYPE_F16, RL_TYPE_Q8_0, RL_TYPE_Q4_0};
    const int hds[3] = {64, 128, 256};
    for (int ti = 0; ti < 4; ti++)
        for (int hi = 0; hi < 3; hi++) {
            rl_type t = types[ti];
            int hd = hds[hi], n = 13;
            size_t stride;
            float *deq = malloc(sizeof(float) * n * hd);
            void *rows = make_rows(t, n, hd, &stride, deq);
            float q[256], w[13];
            for (int i = 0; i < hd; i++) q[i] = rnd_gauss();
            for (int r = 0; r < n; r++) w[r] = (rnd_unif() + 1.0f) * 0.5f;
            rl_block_q8_0 qq[8];
            rl__quant_q8_0_ref(q, qq, hd);
            float qd[256];
            rl_type_get(RL_TYPE_Q8_0)->to_float(qq, qd, hd);
            const float *qv = is_q(t) ? qd : q;
            const void *qarg = is_q(t) ? (const void *)qq : (const void *)q;
            float s[2][13], acc[2][256], acc1[256];
            for (int k = 0; k < 2; k++) {
                if (!tabs[k]) continue;
                assert_non_null(tabs[k]->kq_rows[t]);
                tabs[k]->kq_rows[t](qarg, rows, stride, n, hd, s[k]);
                for (int i = 0; i < hd; i++) acc[k][i] = acc1[i] = 0.25f * (float)i;
                tabs[k]->v_rows[t](acc[k], rows, stride, w, n, hd);
                /* one call over n rows == n single-row calls, bit for bit */
                for (int r = 0; r < n; r++) {
                    float s1;
                    tabs[k]->kq_rows[t](qarg, (const uint8_t *)rows + r * stride, stride, 1, hd, &s1);
                    assert_memory_equal(&s1, &s[k][r], sizeof s1);
                    tabs[k]->v_rows[t](acc1, (const uint8_t *)rows + r * stride, stride, &w[r], 1, hd);
                }
                assert_memory_equal(acc1, acc[k], sizeof(float) * hd);
                /* against a double oracle on the dequantized rows:
                 * 1e-5 * sum|q||k| and 1e-5 * (|acc0| + sum|w||v|) */
                for (int r = 0; r < n; r++) {
                    double d = 0, b = 0;
                    for (int i = 0; i < hd; i++) {
                        d += (double)qv[i] * deq[r * hd + i];
                        b += fabs((double)qv[i] * deq[r * hd + i]);
                    }
                    if (fabs(s[k][r] - d) > 1e-5 * b + 1e-30)
                        fail_msg("kq %s %s hd %d row %d: %g vs %g", tabs[k]->name, rl_type_name(t), hd, r,
                                 s[k][r], d);
                }
                for (int i = 0; i < hd; i++) {
                    double d = 0.25 * i, b = 0.25 * i;
                    for (int r = 0; r < n; r++) {
                        d += (double)w[r] * deq[r * hd + i];
                        b += fabs((double)w[r] * deq[r * hd + i]);
                    }
                    if (fabs(acc[k][i] - d) > 1e-5 * b + 1e-30)
                        fail_msg("v %s %s hd %d elem %d: %g vs %g", tabs[k]->name, rl_type_name(t), hd, i,
                                 acc[k][i], d);
                }
            }
            if (is_q(t)) {
                /* float-query leaves (RL_KVQ_QUERY=f32): against the oracle
                 * on the f32 query, 1e-5 * sum|q||k| */
                for (int k = 0; k < 2; k++) {
                    if (!tabs[k]) continue;
                    assert_non_null(tabs[k]->kqf_rows[t]);
                    tabs[k]->kqf_rows[t](q, rows, stride, n, hd, s[k]);
                    for (int r = 0; r < n; r++) {
                        double d = 0, b = 0;
                        for (int i = 0; i < hd; i++) {
                            d += (double)q[i] * deq[r * hd + i];
                            b += fabs((double)q[i] * deq[r * hd + i]);
                        }
                        if (fabs(s[k][r] - d) > 1e-5 * b + 1e-30)
                            fail_msg("kqf %s %s hd %d row %d: %g vs %g", tabs[k]->name, rl_type_name(t), hd, r,
                                     s[k][r], d);
                    }
                }
            }
            if (avx && (t == RL_TYPE_F16 || t == RL_TYPE_F32)) {
                /* f16/f32 runs repeat the single-row float leaves exactly */
                for (int r = 0; r < n; r++) {
                    const void *row = (const uint8_t *)rows + r * stride;
                    float d = t == RL_TYPE_F16 ? avx->dot_f16(q, row, hd) : avx->dot_f32(q, row, hd);
                    assert_memory_equal(&d, &s[1][r], sizeof d);
                }
            }
            free(rows);
            free(deq);
        }
}

/* ---------------- attention fixture ---------------- */

typedef struct att_fix {
    rl_kv_layer kv;
    int32_t bt[160];
    int n_pos, nblk;
    float *kt, *vt; /* original f32 K/V [pos][nkv][hd] */
    float *kd, *vd; /* dequantized from the pages */
    float *ek, *ev; /* element error bounds of the page format */
} att_fix;

static void read_row(rl_type t, const void *row, float *out, int hd) {
    if (t == RL_TYPE_F32) memcpy(out, row, sizeof(float) * hd);
    else rl_type_get(t)->to_float(row, out, hd);
}

static const void *page_row(const att_fix *f, bool v, int p, int h) {
    const rl_kv_layer *kv = &f->kv;
    rl_type t = v ? kv->v_type : kv->k_type;
    size_t rb = rl_type_row_size(t, kv->head_dim), bb = v ? kv->v_block_bytes : kv->k_block_bytes;
    const uint8_t *base = v ? kv->v_base : kv->k_base;
    return base + (size_t)f->bt[p / kv->block_size] * bb +
           ((size_t)h * kv->block_size + p % kv->block_size) * rb;
}

static void att_fix_init(att_fix *f, rl_type kt, rl_type vt, int nkv, int hd, int bs, int n_pos) {
    int nblk = (n_pos + bs - 1) / bs + 3;
    assert_true(nblk <= 160);
    f->n_pos = n_pos;
    f->nblk = nblk;
    f->kv = (rl_kv_layer){.k_type = kt, .v_type = vt, .n_kv_head = nkv, .head_dim = hd, .block_size = bs};
    f->kv.k_block_bytes = (size_t)nkv * bs * rl_type_row_size(kt, hd);
    f->kv.v_block_bytes = (size_t)nkv * bs * rl_type_row_size(vt, hd);
    f->kv.k_base = calloc(nblk, f->kv.k_block_bytes);
    f->kv.v_base = calloc(nblk, f->kv.v_block_bytes);
    for (int i = 0; i < nblk; i++) f->bt[i] = i;
    for (int i = nblk - 1; i > 0; i--) { /* shuffled block ids */
        int j = (int)(rnd_u32() % (uint32_t)(i + 1));
        int32_t tmp = f->bt[i];
        f->bt[i] = f->bt[j];
        f->bt[j] = tmp;
    }
    size_t ne = (size_t)n_pos * nkv * hd;
    f->kt = malloc(sizeof(float) * ne);
    f->vt = malloc(sizeof(float) * ne);
    f->kd = malloc(sizeof(float) * ne);
    f->vd = malloc(sizeof(float) * ne);
    f->ek = malloc(sizeof(float) * ne);
    f->ev = malloc(sizeof(float) * ne);
    for (int p = 0; p < n_pos; p++) {
        float *k = f->kt + (size_t)p * nkv * hd, *v = f->vt + (size_t)p * nkv * hd;
        for (int h = 0; h < nkv; h++) {
            float sc = 0.3f + (rnd_unif() + 1.0f); /* per-row magnitude, outlier channels */
            for (int i = 0; i < hd; i++) {
                k[h * hd + i] = rnd_gauss() * sc * (i % 16 == 3 ? 4.0f : 1.0f);
                v[h * hd + i] = rnd_gauss() * sc;
            }
        }
        rl_kv_store(&f->kv, f->bt, p, k, v);
        for (int h = 0; h < nkv; h++) {
            size_t o = ((size_t)p * nkv + h) * hd;
            const void *kr = page_row(f, false, p, h), *vr = page_row(f, true, p, h);
            read_row(kt, kr, f->kd + o, hd);
            read_row(vt, vr, f->vd + o, hd);
            elem_bound(kt, f->kt + o, kr, hd, f->ek + o);
            elem_bound(vt, f->vt + o, vr, hd, f->ev + o);
            for (int i = 0; i < hd; i++) { /* the page format's contract */
                if (fabsf(f->kd[o + i] - f->kt[o + i]) > f->ek[o + i] + 1e-30f)
                    fail_msg("K %s elem err %g > %g", rl_type_name(kt), f->kd[o + i] - f->kt[o + i],
                             f->ek[o + i]);
                if (fabsf(f->vd[o + i] - f->vt[o + i]) > f->ev[o + i] + 1e-30f)
                    fail_msg("V %s elem err %g > %g", rl_type_name(vt), f->vd[o + i] - f->vt[o + i],
                             f->ev[o + i]);
            }
            /* stored bytes are exactly the reference quantizer's */
            if (is_q(kt)) {
                uint8_t buf[512];
                rl_type_get(kt)->from_float(f->kt + o, buf, hd);
                assert_memory_equal(buf, kr, rl_type_row_size(kt, hd));
            }
        }
    }
}

static void att_fix_free(att_fix *f) {
    free(f->kv.k_base);
    free(f->kv.v_base);
    free(f->kt);
    free(f->vt);
    free(f->kd);
    free(f->vd);
    free(f->ek);
    free(f->ev);
}

/* Double oracle on K/V arrays kk/vv for one token; writes out[n_head*hd] and
 * the per-element bound (see the file header) with element errors ek/ev
 * (NULL = 0).  k_quant: the kernel scores with a q8_0 query. */
static void oracle(const att_fix *f, const float *kk, const float *vv, const float *ek, const float *ev,
                   bool k_quant, const float *q, int n_head, int32_t pos, float scale, int window,
                   float softcap, double *out, double *bound) {
    int nkv = f->kv.n_kv_head, hd = f->kv.head_dim;
    double *s = malloc(sizeof(double) * (pos + 1));
    float eq[512];
    for (int h = 0; h < n_head; h++) {
        const float *qh = q + (size_t)h * hd;
        for (int b = 0; b < hd / 32 || (b == 0 && hd < 32); b++) {
            float am = 0;
            for (int i = b * 32; i < b * 32 + 32 && i < hd; i++) am = fmaxf(am, fabsf(qh[i]));
            for (int i = b * 32; i < b * 32 + 32 && i < hd; i++)
                eq[i] = k_quant ? am * (1.0f / 254.0f + 1.0f / 2048.0f) * 1.001f : 0.0f;
        }
        int kvh = h / (n_head / nkv);
        int lo = window > 0 ? pos - window + 1 : 0;
        if (lo < 0) lo = 0;
        double m = -1e300, z = 0, D = 0, vmax = 0, evmax = 0;
        for (int p = lo; p <= pos; p++) {
            size_t o = ((size_t)p * nkv + kvh) * hd;
            double d = 0, e = 0, a = 0;
            for (int i = 0; i < hd; i++) {
                double ki = kk[o + i], eki = ek ? ek[o + i] : 0.0;
                d += (double)qh[i] * ki;
                e += fabs(qh[i]) * eki + fabs(ki) * eq[i] + eki * eq[i];
                a += fabs(qh[i] * ki);
                vmax = fmax(vmax, fabs(vv[o + i]));
                if (ev) evmax = fmax(evmax, ev[o + i]);
            }
            D = fmax(D, scale * (e + 1e-5 * a));
            d *= scale;
            if (softcap > 0) d = softcap * tanh(d / softcap);
            s[p] = d;
            m = fmax(m, d);
        }
        for (int p = lo; p <= pos; p++) z += (s[p] = exp(s[p] - m));
        for (int i = 0; i < hd; i++) {
            double acc = 0;
            for (int p = lo; p <= pos; p++) acc += s[p] * vv[((size_t)p * nkv + kvh) * hd + i];
            out[h * hd + i] = acc / z;
            bound[h * hd + i] = (exp(2 * D) - 1) * vmax + evmax + 1e-4 * vmax;
        }
    }
    free(s);
}

typedef struct att_case {
    int n_head, nkv, hd, bs, window;
    float softcap;
} att_case;

static const att_case cases[] = {
    {9, 3, 64, 16, 0, 0.0f},      /* SmolLM2 shape, GQA 9/3 */
    {4, 1, 256, 8, 40, 0.0f},     /* MQA, sliding window (gemma3 local layers) */
    {8, 2, 128, 32, 0, 30.0f},    /* softcap */
    {6, 2, 64, 7, 20, 0.0f},      /* odd block size, window */
};
#define N_CASES (int)(sizeof cases / sizeof cases[0])

/* Runs one case; out_keep (may be NULL) receives the 5-token output. */
static void check_case(rl_type kt, rl_type vt, const att_case *c, rl_threadpool *tp, float *out_keep,
                       double *worst_a, double *worst_b) {
    att_fix f;
    const int n_pos = 150, n_tok = 5, nh = c->n_head, hd = c->hd;
    att_fix_init(&f, kt, vt, c->nkv, hd, c->bs, n_pos);
    int32_t pos[5] = {0, 31, 32, 97, 149};
    float *q = malloc(sizeof(float) * n_tok * nh * hd);
    for (int i = 0; i < n_tok * nh * hd; i++) q[i] = rnd_gauss() * 0.6f * (i % 7 == 0 ? 3.0f : 1.0f);
    float *out = malloc(sizeof(float) * n_tok * nh * hd), *out1 = malloc(sizeof(float) * nh * hd);
    double *ref = malloc(sizeof(double) * nh * hd), *bnd = malloc(sizeof(double) * nh * hd);
    rl_attn_args a = {.q = q, .out = out, .n_tok = n_tok, .n_head = nh, .pos = pos, .block_table = f.bt,
                      .kv = &f.kv, .scale = 1.0f / sqrtf((float)hd), .window = c->window,
                      .softcap = c->softcap};
    rl_attention(&a, tp);
    for (int t = 0; t < n_tok; t++) {
        const float *qt = q + (size_t)t * nh * hd, *ot = out + (size_t)t * nh * hd;
        for (int pass = 0; pass < 2; pass++) {
            /* pass 0: (a) dequantized pages; pass 1: (b) original f32 K/V */
            if (pass == 0)
                oracle(&f, f.kd, f.vd, NULL, NULL, is_q(kt), qt, nh, pos[t], a.scale, c->window, c->softcap,
                       ref, bnd);
            else
                oracle(&f, f.kt, f.vt, f.ek, f.ev, is_q(kt), qt, nh, pos[t], a.scale, c->window, c->softcap,
                       ref, bnd);
            for (int i = 0; i < nh * hd; i++) {
                double err = fabs(ot[i] - ref[i]);
                if (err > bnd[i])
                    fail_msg("attention %s K %s V %s (%d/%d hd %d) pass %d tok %d elem %d: got %g want %g "
                             "bound %g",
                             rl_kernels_impl_name(), rl_type_name(kt), rl_type_name(vt), nh, c->nkv, hd, pass,
                             t, i, ot[i], ref[i], bnd[i]);
                double *w = pass == 0 ? worst_a : worst_b;
                if (w && err > *w) *w = err;
            }
        }
        /* batch invariance: the same token alone, single-threaded */
        rl_attn_args a1 = a;
        a1.q = qt;
        a1.out = out1;
        a1.n_tok = 1;
        a1.pos = &pos[t];
        rl_attention(&a1, NULL);
        assert_memory_equal(out1, ot, sizeof(float) * nh * hd);
    }
    if (out_keep) memcpy(out_keep, out, sizeof(float) * n_tok * nh * hd);
    free(q);
    free(out);
    free(out1);
    free(ref);
    free(bnd);
    att_fix_free(&f);
}

static void test_attention_all_types(void **state) {
    (void)state;
    rl_kernels_impl impls[2];
    int ni = n_impls(impls);
    rl_threadpool *tp = rl_threadpool_new(2);
    for (int ii = 0; ii < ni; ii++) {
        rl_kernels_init(impls[ii]);
        for (int ki = 0; ki < N_KV_TYPES; ki++)
            for (int vi = 0; vi < N_KV_TYPES; vi++) {
                double wa = 0, wb = 0;
                for (int ci = 0; ci < N_CASES; ci++)
                    check_case(kv_types[ki], kv_types[vi], &cases[ci], tp, NULL, &wa, &wb);
                print_message("  %-4s K %-5s V %-5s max|err| vs dequantized oracle %.2e, vs f32 oracle %.2e\n",
                              rl_kernels_impl_name(), rl_type_name(kv_types[ki]), rl_type_name(kv_types[vi]),
                              wa, wb);
            }
        /* f32 pages mixed with quantized ones */
        check_case(RL_TYPE_F32, RL_TYPE_Q4_0, &cases[0], tp, NULL, NULL, NULL);
        check_case(RL_TYPE_Q8_0, RL_TYPE_F32, &cases[2], NULL, NULL, NULL, NULL);
    }
    rl_threadpool_free(tp);
}

/* AVX2 and reference attention over the same quantized pages agree to
 * 1e-4 max|v| (same q8_0 query codes; only float order and fma differ). */
static void test_attention_avx2_vs_ref(void **state) {
    (void)state;
    if (!rl__kernels_avx2()) skip();
    const att_case *c = &cases[0];
    const int n = 5 * c->n_head * c->hd;
    float *o_ref = malloc(sizeof(float) * n), *o_avx = malloc(sizeof(float) * n);
    for (int ki = 0; ki < N_KV_TYPES; ki++)
        for (int vi = 0; vi < N_KV_TYPES; vi++) {
            uint64_t seed = kt_state();
            rl_kernels_init(RL_KERNELS_REF);
            check_case(kv_types[ki], kv_types[vi], c, NULL, o_ref, NULL, NULL);
            kt_seed(seed); /* same data */
            rl_kernels_init(RL_KERNELS_AVX2);
            check_case(kv_types[ki], kv_types[vi], c, NULL, o_avx, NULL, NULL);
            for (int i = 0; i < n; i++)
                if (fabsf(o_ref[i] - o_avx[i]) > 1e-4f * 8.0f) /* max|v| <= ~8 in the fixture */
                    fail_msg("avx2 vs ref K %s V %s elem %d: %g vs %g", rl_type_name(kv_types[ki]),
                             rl_type_name(kv_types[vi]), i, o_avx[i], o_ref[i]);
        }
    free(o_ref);
    free(o_avx);
}

/* Prefix caching, copy-on-write and swap copy whole blocks bytewise; with
 * quantized pages, the copy under new block ids must attend identically. */
static void test_block_copy(void **state) {
    (void)state;
    rl_kernels_init(RL_KERNELS_AUTO);
    for (int ki = 0; ki < N_KV_TYPES; ki++) {
        att_fix f;
        const int nkv = 3, hd = 64, bs = 16, n_pos = 100, nh = 9;
        att_fix_init(&f, kv_types[ki], kv_types[(ki + 1) % N_KV_TYPES], nkv, hd, bs, n_pos);
        int nb_used = (n_pos + bs - 1) / bs;
        uint8_t *k2 = calloc((size_t)nb_used, f.kv.k_block_bytes), *v2 = calloc((size_t)nb_used, f.kv.v_block_bytes);
        int32_t bt2[16];
        for (int b = 0; b < nb_used; b++) {
            bt2[b] = nb_used - 1 - b; /* reversed placement in a new pool */
            memcpy(k2 + (size_t)bt2[b] * f.kv.k_block_bytes,
                   (uint8_t *)f.kv.k_base + (size_t)f.bt[b] * f.kv.k_block_bytes, f.kv.k_block_bytes);
            memcpy(v2 + (size_t)bt2[b] * f.kv.v_block_bytes,
                   (uint8_t *)f.kv.v_base + (size_t)f.bt[b] * f.kv.v_block_bytes, f.kv.v_block_bytes);
        }
        rl_kv_layer kv2 = f.kv;
        kv2.k_base = k2;
        kv2.v_base = v2;
        float q[9 * 64], o1[9 * 64], o2[9 * 64];
        for (int i = 0; i < nh * hd; i++) q[i] = rnd_gauss();
        int32_t pos = n_pos - 1;
        rl_attn_args a = {.q = q, .out = o1, .n_tok = 1, .n_head = nh, .pos = &pos, .block_table = f.bt,
                          .kv = &f.kv, .scale = 0.125f};
        rl_attention(&a, NULL);
        a.out = o2;
        a.block_table = bt2;
        a.kv = &kv2;
        rl_attention(&a, NULL);
        assert_memory_equal(o1, o2, sizeof o1);
        free(k2);
        free(v2);
        att_fix_free(&f);
    }
}

static void test_supported(void **state) {
    (void)state;
    assert_true(rl_kv_type_supported(RL_TYPE_F16, 64));
    assert_true(rl_kv_type_supported(RL_TYPE_F32, 40));
    assert_true(rl_kv_type_supported(RL_TYPE_Q8_0, 64));
    assert_true(rl_kv_type_supported(RL_TYPE_Q4_0, 256));
    assert_false(rl_kv_type_supported(RL_TYPE_Q4_0, 48)); /* not a multiple of 32 */
    assert_false(rl_kv_type_supported(RL_TYPE_Q4_K, 256));
    assert_false(rl_kv_type_supported(RL_TYPE_Q8_0, 0));
    /* bytes per row: f16 128, q8_0 68, q4_0 36 for head_dim 64 */
    assert_int_equal(rl_type_row_size(RL_TYPE_F16, 64), 128);
    assert_int_equal(rl_type_row_size(RL_TYPE_Q8_0, 64), 68);
    assert_int_equal(rl_type_row_size(RL_TYPE_Q4_0, 64), 36);
}

int main(void) {
    kt_seed(KT_SEED);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_supported),
        cmocka_unit_test(test_leaves),
        cmocka_unit_test(test_attention_all_types),
        cmocka_unit_test(test_attention_avx2_vs_ref),
        cmocka_unit_test(test_block_copy),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
