/* KV-cache quantization tests: q8_0 / q4_0 / iq4_nl pages for K and V
 * (chosen separately), optionally Walsh-Hadamard rotated (the default for
 * all three), stored once by rl_kv_store and read in place by
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
 *     block ids leaves attention bit-identical;
 *   - rotation: rl_wht against the naive Hadamard matrix product, H(Hx) = x,
 *     AVX2 bit-identical to the reference; rotated pages checked in the page
 *     domain with the same bounds (see check_case_rot); rotated f32 pages
 *     equal unrotated ones up to float rounding; rotated q4_0 K scores are
 *     closer to exact than unrotated ones on keys with outlier channels;
 *   - iq4_nl: stored bytes are the KV quantizer's, per-block RMS error
 *     within its bound (IQ4_RMS_BOUND).
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
#include "kv/kv.h"
#include "model/kcal.h"
#include "ktest.h"

#define KT_SEED 0x2545F4914F6CDD1Dull /* the data these tests were written against */

static const rl_type kv_types[] = {RL_TYPE_F16, RL_TYPE_Q8_0, RL_TYPE_Q4_0, RL_TYPE_IQ4_NL,
                                   RL_TYPE_Q8_64};
#define N_KV_TYPES 5

static bool is_q(rl_type t) {
    return rl_kv_type_quantized(t);
}

/* The quantizer rl_kv_store uses for a page type. */
static void kv_quantize(rl_type t, const float *x, void *row, int hd) {
    if (t == RL_TYPE_IQ4_NL)
        rl__quant_iq4_nl_kv(x, row, hd);
    else
        rl_type_get(t)->from_float(x, row, hd);
}

/* iq4_nl (scale search): per 32-block, RMS error <= 0.112 amax.  The
 * search includes the scale amax/127 with nearest codes, whose error is at
 * most half the widest codebook gap seen from that scale (14/127 amax);
 * the least-squares refit only lowers the squared error, the fp16 rounding
 * of d adds < 2^-10 amax. */
#define IQ4_RMS_BOUND (14.0f / 127.0f + 1.0f / 1024.0f + 1e-4f)

/* Element error bound of a page format for a row x, written to e[hd]. */
static void elem_bound(rl_type t, const float *x, const void *row, int hd, float *e) {
    for (int i = 0; i < hd; i++) {
        if (t == RL_TYPE_F32)
            e[i] = 0.0f;
        else if (t == RL_TYPE_F16)
            e[i] = ldexpf(fabsf(x[i]), -11) + ldexpf(1.0f, -25); /* subnormals */
        else if (t == RL_TYPE_Q8_0 || t == RL_TYPE_Q8_64) {
            float d =
                fabsf(rl_fp16_to_f32(t == RL_TYPE_Q8_0 ? ((const rl_block_q8_0 *)row)[i / 32].d
                                                       : ((const rl_block_q8_64 *)row)[i / 64].d));
            e[i] = d * 0.5f + d * 128.0f * ldexpf(1.0f, -10); /* code x fp16 rounding of d */
        } else if (t == RL_TYPE_Q4_0) {
            e[i] = fabsf(rl_fp16_to_f32(((const rl_block_q4_0 *)row)[i / 32].d)) * 1.0001f;
        } else { /* iq4_nl: from the RMS bound, sqrt(32) * 0.112 amax */
            float am = 0;
            for (int j = i / 32 * 32; j < i / 32 * 32 + 32; j++) am = fmaxf(am, fabsf(x[j]));
            e[i] = sqrtf(32.0f) * IQ4_RMS_BOUND * am;
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
        if (t == RL_TYPE_F32)
            memcpy(row, x, sizeof(float) * hd);
        else
            kv_quantize(t, x, row, hd);
        if (t == RL_TYPE_F32)
            memcpy(deq + (size_t)r * hd, x, sizeof(float) * hd);
        else
            tr->to_float(row, deq + (size_t)r * hd, hd);
    }
    free(x);
    return p;
}

static void test_leaves(void **state) {
    (void)state;
    const rl__ktab *ref = rl__kernels_ref(), *avx = rl__kernels_avx2();
    const rl__ktab *tabs[2] = {ref, avx};
    const rl_type types[6] = {RL_TYPE_F32,  RL_TYPE_F16,    RL_TYPE_Q8_0,
                              RL_TYPE_Q4_0, RL_TYPE_IQ4_NL, RL_TYPE_Q8_64};
    const int hds[3] = {64, 128, 256};
    for (int ti = 0; ti < 6; ti++)
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
                    tabs[k]->kq_rows[t](qarg, (const uint8_t *)rows + r * stride, stride, 1, hd,
                                        &s1);
                    assert_memory_equal(&s1, &s[k][r], sizeof s1);
                    tabs[k]->v_rows[t](acc1, (const uint8_t *)rows + r * stride, stride, &w[r], 1,
                                       hd);
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
                        fail_msg("kq %s %s hd %d row %d: %g vs %g", tabs[k]->name, rl_type_name(t),
                                 hd, r, s[k][r], d);
                }
                for (int i = 0; i < hd; i++) {
                    double d = 0.25 * i, b = 0.25 * i;
                    for (int r = 0; r < n; r++) {
                        d += (double)w[r] * deq[r * hd + i];
                        b += fabs((double)w[r] * deq[r * hd + i]);
                    }
                    if (fabs(acc[k][i] - d) > 1e-5 * b + 1e-30)
                        fail_msg("v %s %s hd %d elem %d: %g vs %g", tabs[k]->name, rl_type_name(t),
                                 hd, i, acc[k][i], d);
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
                            fail_msg("kqf %s %s hd %d row %d: %g vs %g", tabs[k]->name,
                                     rl_type_name(t), hd, r, s[k][r], d);
                    }
                }
            }
            if (avx && (t == RL_TYPE_F16 || t == RL_TYPE_F32)) {
                /* f16/f32 runs repeat the single-row float leaves exactly */
                for (int r = 0; r < n; r++) {
                    const void *row = (const uint8_t *)rows + r * stride;
                    float d =
                        t == RL_TYPE_F16 ? avx->dot_f16(q, row, hd) : avx->dot_f32(q, row, hd);
                    assert_memory_equal(&d, &s[1][r], sizeof d);
                }
            }
            free(rows);
            free(deq);
        }
}

/* ---------------- attention fixture ---------------- */

/* K offset for the next fixtures (NULL = none): K rows are generated as
 * k + g_shift and the layer gets k_shift = g_shift (test_k_shift). */
static const float *g_shift;
static bool g_shift_off; /* keys get the offset, but the layer no k_shift */
/* K channel scale for the next fixtures (NULL = none): the layer gets
 * k_scale = g_scale (test_k_scale). */
static const float *g_scale;
/* Per-channel key standard deviation (NULL = the default pattern). */
static const float *g_kstd;

typedef struct att_fix {
    rl_kv_layer kv;
    bool k_rot, v_rot; /* pages hold Hadamard-rotated rows (resolved) */
    bool k_shift;      /* K pages hold k - k_shift (rl_kv_k_shifted) */
    bool k_scale;      /* ... times k_scale (rl_kv_k_scaled) */
    int32_t bt[160];
    int n_pos, nblk;
    float *kt, *vt; /* f32 K/V [pos][nkv][hd] as the pages see them: the
                     * original rows, or fl(H row) where rotated */
    float *kd, *vd; /* dequantized from the pages */
    float *ek, *ev; /* element error bounds of the page format */
} att_fix;

static void read_row(rl_type t, const void *row, float *out, int hd) {
    if (t == RL_TYPE_F32)
        memcpy(out, row, sizeof(float) * hd);
    else
        rl_type_get(t)->to_float(row, out, hd);
}

static const void *page_row(const att_fix *f, bool v, int p, int h) {
    const rl_kv_layer *kv = &f->kv;
    rl_type t = v ? kv->v_type : kv->k_type;
    size_t rb = rl_type_row_size(t, kv->head_dim), bb = v ? kv->v_block_bytes : kv->k_block_bytes;
    const uint8_t *base = v ? kv->v_base : kv->k_base;
    return base + (size_t)f->bt[p / kv->block_size] * bb +
           ((size_t)h * kv->block_size + p % kv->block_size) * rb;
}

static void att_fix_init_rot(att_fix *f, rl_type kt, rl_type vt, rl_kv_rot krot, rl_kv_rot vrot,
                             int nkv, int hd, int bs, int n_pos) {
    int nblk = (n_pos + bs - 1) / bs + 3;
    assert_true(nblk <= 160);
    f->n_pos = n_pos;
    f->nblk = nblk;
    f->kv = (rl_kv_layer){.k_type = kt,
                          .v_type = vt,
                          .n_kv_head = nkv,
                          .head_dim = hd,
                          .block_size = bs,
                          .k_rot = krot,
                          .v_rot = vrot,
                          .k_shift = g_shift_off ? NULL : g_shift,
                          .k_scale = g_scale};
    f->k_shift = rl_kv_k_shifted(&f->kv);
    f->k_scale = rl_kv_k_scaled(&f->kv);
    f->k_rot = rl_kv_rot_resolve(kt, hd, krot) == RL_KV_ROT_HADAMARD;
    f->v_rot = rl_kv_rot_resolve(vt, hd, vrot) == RL_KV_ROT_HADAMARD;
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
                k[h * hd + i] = rnd_gauss() * sc *
                                (g_kstd        ? g_kstd[h * hd + i]
                                 : i % 16 == 3 ? 4.0f
                                               : 1.0f);
                v[h * hd + i] = rnd_gauss() * sc;
            }
        }
        if (g_shift)
            for (int i = 0; i < nkv * hd; i++) k[i] += g_shift[i];
        rl_kv_store(&f->kv, f->bt, p, k, v);
        for (int h = 0; h < nkv; h++) { /* page-domain rows: what rl_kv_store quantized */
            if (f->k_shift)
                for (int i = 0; i < hd; i++) k[h * hd + i] -= g_shift[h * hd + i];
            if (f->k_scale)
                for (int i = 0; i < hd; i++) k[h * hd + i] *= g_scale[h * hd + i];
            if (f->k_rot) rl__kernels_ref()->wht(k + h * hd, hd);
            if (f->v_rot) rl__kernels_ref()->wht(v + h * hd, hd);
        }
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
                kv_quantize(kt, f->kt + o, buf, hd);
                assert_memory_equal(buf, kr, rl_type_row_size(kt, hd));
            }
            if (is_q(vt)) {
                uint8_t buf[512];
                kv_quantize(vt, f->vt + o, buf, hd);
                assert_memory_equal(buf, vr, rl_type_row_size(vt, hd));
            }
            /* iq4_nl's RMS contract per block */
            for (int w = 0; w < 2; w++) {
                rl_type t = w ? vt : kt;
                if (t != RL_TYPE_IQ4_NL) continue;
                const float *x = (w ? f->vt : f->kt) + o, *d = (w ? f->vd : f->kd) + o;
                for (int b = 0; b < hd / 32; b++) {
                    double se = 0, am = 0;
                    for (int j = b * 32; j < b * 32 + 32; j++) {
                        se += (double)(d[j] - x[j]) * (d[j] - x[j]);
                        am = fmax(am, fabs(x[j]));
                    }
                    if (sqrt(se / 32) > IQ4_RMS_BOUND * am)
                        fail_msg("iq4_nl block rms %g > %g", sqrt(se / 32), IQ4_RMS_BOUND * am);
                }
            }
        }
    }
}

/* Default rotation (AUTO: quantized pages rotated). */
static void att_fix_init(att_fix *f, rl_type kt, rl_type vt, int nkv, int hd, int bs, int n_pos) {
    att_fix_init_rot(f, kt, vt, RL_KV_ROT_AUTO, RL_KV_ROT_AUTO, nkv, hd, bs, n_pos);
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
 * (NULL = 0).  k_quant: the kernel scores with a q8_0 query.  off (NULL =
 * none): per head, off[2h] is added to every raw score (q . k_shift) and
 * off[2h+1] = sum |q_i k_shift_i| joins the float-summation term. */
static void oracle(const att_fix *f, const float *kk, const float *vv, const float *ek,
                   const float *ev, bool k_quant, const float *q, int n_head, int32_t pos,
                   float scale, int window, float softcap, const double *off, double *out,
                   double *bound) {
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
            if (off) d += off[2 * h], a += 4.0 * off[2 * h + 1]; /* q . mu in float: <= hd 2^-24 */
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
    {9, 3, 64, 16, 0, 0.0f},   /* SmolLM2 shape, GQA 9/3 */
    {4, 1, 256, 8, 40, 0.0f},  /* MQA, sliding window (gemma3 local layers) */
    {8, 2, 128, 32, 0, 30.0f}, /* softcap */
    {6, 2, 64, 7, 20, 0.0f},   /* odd block size, window */
};
#define N_CASES (int)(sizeof cases / sizeof cases[0])

/* y = H x in double, H[i][j] = (-1)^popcount(i&j) / sqrt(n) (the naive
 * matrix product: the oracle for rl_wht). */
static void hadamard_naive(const float *x, double *y, int n) {
    for (int i = 0; i < n; i++) {
        double a = 0;
        for (int j = 0; j < n; j++)
            a += (__builtin_popcount((unsigned)(i & j)) & 1) ? -(double)x[j] : x[j];
        y[i] = a / sqrt((double)n);
    }
}

/* Runs one case with the given rotations; out_keep (may be NULL) receives
 * the 5-token output.  Rotated pages are checked in the page domain: the
 * oracle gets the query heads as the kernel rotates them (fl(H q), the
 * same bits in every implementation) and the page-domain K/V; where V is
 * rotated, the kernel's output (rotated back in float) is rotated forward
 * again in double and compared with the page-domain oracle, the bound
 * growing by the float transform's rounding, (log2 n + 2) 2^-24 ||o||_1
 * with ||o||_1 <= sqrt(n) ||out||_2 (n = head_dim). */
static void check_case_rot(rl_type kt, rl_type vt, rl_kv_rot krot, rl_kv_rot vrot,
                           const att_case *c, rl_threadpool *tp, float *out_keep, double *worst_a,
                           double *worst_b) {
    att_fix f;
    const int n_pos = 150, n_tok = 5, nh = c->n_head, hd = c->hd;
    att_fix_init_rot(&f, kt, vt, krot, vrot, c->nkv, hd, c->bs, n_pos);
    float *qp = malloc(sizeof(float) * nh * hd);
    double *op = malloc(sizeof(double) * nh * hd), *rb = malloc(sizeof(double) * nh);
    double *off = malloc(sizeof(double) * 2 * nh);
    int32_t pos[5] = {0, 31, 32, 97, 149};
    float *q = malloc(sizeof(float) * n_tok * nh * hd);
    for (int i = 0; i < n_tok * nh * hd; i++)
        q[i] = rnd_gauss() * 0.6f * (i % 7 == 0 ? 3.0f : 1.0f);
    float *out = malloc(sizeof(float) * n_tok * nh * hd), *out1 = malloc(sizeof(float) * nh * hd);
    double *ref = malloc(sizeof(double) * nh * hd), *bnd = malloc(sizeof(double) * nh * hd);
    rl_attn_args a = {.q = q,
                      .out = out,
                      .n_tok = n_tok,
                      .n_head = nh,
                      .pos = pos,
                      .block_table = f.bt,
                      .kv = &f.kv,
                      .scale = 1.0f / sqrtf((float)hd),
                      .window = c->window,
                      .softcap = c->softcap};
    rl_attention(&a, tp);
    for (int t = 0; t < n_tok; t++) {
        const float *qt = q + (size_t)t * nh * hd, *ot = out + (size_t)t * nh * hd;
        memcpy(qp, qt, sizeof(float) * nh * hd);
        for (int h = 0; h < nh; h++) {
            const float *mu = f.k_shift ? g_shift + (size_t)(h / (nh / c->nkv)) * hd : NULL;
            off[2 * h] = off[2 * h + 1] = 0;
            for (int i = 0; mu && i < hd; i++) {
                off[2 * h] += (double)qt[h * hd + i] * mu[i];
                off[2 * h + 1] += fabs((double)qt[h * hd + i] * mu[i]);
            }
            if (f.k_scale) /* the kernel's query: fl(q / D), then rotated */
                for (int i = 0; i < hd; i++)
                    qp[h * hd + i] = qt[h * hd + i] / g_scale[(size_t)(h / (nh / c->nkv)) * hd + i];
            if (f.k_rot) rl__kernels_ref()->wht(qp + h * hd, hd);
            rb[h] = 0;
            if (f.v_rot) {
                hadamard_naive(ot + h * hd, op + h * hd, hd);
                double l2 = 0;
                for (int i = 0; i < hd; i++) l2 += (double)ot[h * hd + i] * ot[h * hd + i];
                rb[h] = (log2(hd) + 2) * ldexp(1.0, -24) * sqrt((double)hd) * sqrt(l2) * 1.01;
            } else {
                for (int i = 0; i < hd; i++) op[h * hd + i] = ot[h * hd + i];
            }
        }
        for (int pass = 0; pass < 2; pass++) {
            /* pass 0: (a) dequantized pages; pass 1: (b) original f32 K/V */
            if (pass == 0)
                oracle(&f, f.kd, f.vd, NULL, NULL, is_q(kt), qp, nh, pos[t], a.scale, c->window,
                       c->softcap, f.k_shift ? off : NULL, ref, bnd);
            else
                oracle(&f, f.kt, f.vt, f.ek, f.ev, is_q(kt), qp, nh, pos[t], a.scale, c->window,
                       c->softcap, f.k_shift ? off : NULL, ref, bnd);
            for (int i = 0; i < nh * hd; i++) {
                double err = fabs(op[i] - ref[i]);
                bnd[i] += rb[i / hd];
                if (err > bnd[i])
                    fail_msg("attention %s K %s V %s (%d/%d hd %d) pass %d tok %d elem %d: got %g "
                             "want %g "
                             "bound %g (rot K %d V %d)",
                             rl_kernels_impl_name(), rl_type_name(kt), rl_type_name(vt), nh, c->nkv,
                             hd, pass, t, i, op[i], ref[i], bnd[i], f.k_rot, f.v_rot);
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
    /* grouped items (a KV head's query heads in one item; its rows' query
     * transforms, shift and rotations) against one head an item, here and
     * over a prompt chunk */
    float *qc, *oc;
    int32_t cpos[37];
    kt_att_grouping(&a, tp, n_pos, 37, &qc, &oc, cpos);
    free(qc);
    free(oc);
    if (out_keep) memcpy(out_keep, out, sizeof(float) * n_tok * nh * hd);
    free(qp);
    free(op);
    free(rb);
    free(off);
    free(q);
    free(out);
    free(out1);
    free(ref);
    free(bnd);
    att_fix_free(&f);
}

static void check_case(rl_type kt, rl_type vt, const att_case *c, rl_threadpool *tp,
                       float *out_keep, double *worst_a, double *worst_b) {
    check_case_rot(kt, vt, RL_KV_ROT_AUTO, RL_KV_ROT_AUTO, c, tp, out_keep, worst_a, worst_b);
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
                print_message("  %-4s K %-5s V %-5s max|err| vs dequantized oracle %.2e, vs f32 "
                              "oracle %.2e\n",
                              rl_kernels_impl_name(), rl_type_name(kv_types[ki]),
                              rl_type_name(kv_types[vi]), wa, wb);
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
        uint8_t *k2 = calloc((size_t)nb_used, f.kv.k_block_bytes),
                *v2 = calloc((size_t)nb_used, f.kv.v_block_bytes);
        int32_t bt2[16];
        for (int b = 0; b < nb_used; b++) {
            bt2[b] = nb_used - 1 - b; /* reversed placement in a new pool */
            memcpy(k2 + (size_t)bt2[b] * f.kv.k_block_bytes,
                   (uint8_t *)f.kv.k_base + (size_t)f.bt[b] * f.kv.k_block_bytes,
                   f.kv.k_block_bytes);
            memcpy(v2 + (size_t)bt2[b] * f.kv.v_block_bytes,
                   (uint8_t *)f.kv.v_base + (size_t)f.bt[b] * f.kv.v_block_bytes,
                   f.kv.v_block_bytes);
        }
        rl_kv_layer kv2 = f.kv;
        kv2.k_base = k2;
        kv2.v_base = v2;
        float q[9 * 64], o1[9 * 64], o2[9 * 64];
        for (int i = 0; i < nh * hd; i++) q[i] = rnd_gauss();
        int32_t pos = n_pos - 1;
        rl_attn_args a = {.q = q,
                          .out = o1,
                          .n_tok = 1,
                          .n_head = nh,
                          .pos = &pos,
                          .block_table = f.bt,
                          .kv = &f.kv,
                          .scale = 0.125f};
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

/* ---------------- Hadamard rotation ---------------- */

/* rl_wht against the naive matrix product, per element within
 * g ||x||_1 / sqrt(n), g = (log2 n + 2) 2^-24 (log2 n butterfly stages, the
 * scale constant and the final multiply); H(Hx) = x within 2 g ||x||_1;
 * every implementation's leaf gives the same bits. */
static void test_wht(void **state) {
    (void)state;
    const rl__ktab *ref = rl__kernels_ref(), *avx = rl__kernels_avx2();
    float x[512], y[512], z[512], w[512];
    double yd[512];
    for (int n = 1; n <= 512; n *= 2)
        for (int rep = 0; rep < 3; rep++) {
            double l1 = 0;
            for (int i = 0; i < n; i++) {
                x[i] = rnd_gauss() * (i % 16 == 3 ? 20.0f : 1.0f) * (rep == 2 ? 1e-3f : 1.0f);
                l1 += fabs(x[i]);
            }
            double g = (log2(n) + 2) * ldexp(1.0, -24);
            memcpy(y, x, sizeof(float) * n);
            ref->wht(y, n);
            hadamard_naive(x, yd, n);
            for (int i = 0; i < n; i++)
                if (fabs(y[i] - yd[i]) > g * l1 / sqrt(n) * 1.01)
                    fail_msg("wht n %d elem %d: %g vs %g", n, i, y[i], yd[i]);
            memcpy(z, y, sizeof(float) * n);
            ref->wht(z, n);
            for (int i = 0; i < n; i++)
                if (fabs(z[i] - x[i]) > 2 * g * l1 * 1.01)
                    fail_msg("wht round trip n %d elem %d: %g vs %g", n, i, z[i], x[i]);
            if (avx) {
                memcpy(w, x, sizeof(float) * n);
                avx->wht(w, n);
                assert_memory_equal(w, y, sizeof(float) * n);
            }
            memcpy(w, x, sizeof(float) * n);
            rl_wht(w, n);
            assert_memory_equal(w, y, sizeof(float) * n);
        }
}

static void test_rot_resolve(void **state) {
    (void)state;
    assert_int_equal(rl_kv_rot_resolve(RL_TYPE_F16, 64, RL_KV_ROT_AUTO), RL_KV_ROT_NONE);
    assert_int_equal(rl_kv_rot_resolve(RL_TYPE_F32, 128, RL_KV_ROT_AUTO), RL_KV_ROT_NONE);
    assert_int_equal(rl_kv_rot_resolve(RL_TYPE_F16, 64, RL_KV_ROT_HADAMARD), RL_KV_ROT_HADAMARD);
    assert_int_equal(rl_kv_rot_resolve(RL_TYPE_Q4_0, 96, RL_KV_ROT_HADAMARD),
                     RL_KV_ROT_NONE); /* not 2^k */
    assert_int_equal(rl_kv_rot_resolve(RL_TYPE_Q4_0, 64, RL_KV_ROT_NONE), RL_KV_ROT_NONE);
    assert_int_equal(rl_kv_rot_resolve(RL_TYPE_Q8_0, 64, RL_KV_ROT_HADAMARD), RL_KV_ROT_HADAMARD);
    if (getenv("RL_KVQ_ROT")) return; /* the override changes AUTO for quantized pages */
    assert_int_equal(rl_kv_rot_resolve(RL_TYPE_Q4_0, 64, RL_KV_ROT_AUTO), RL_KV_ROT_HADAMARD);
    assert_int_equal(rl_kv_rot_resolve(RL_TYPE_Q4_0, 256, RL_KV_ROT_AUTO), RL_KV_ROT_HADAMARD);
    assert_int_equal(rl_kv_rot_resolve(RL_TYPE_Q8_0, 64, RL_KV_ROT_AUTO), RL_KV_ROT_HADAMARD);
    assert_int_equal(rl_kv_rot_resolve(RL_TYPE_IQ4_NL, 128, RL_KV_ROT_AUTO), RL_KV_ROT_HADAMARD);
}

/* Explicit rotations on every page type, full checks (bounds, batch
 * invariance): q8_0 and f16 rotated, q4_0 unrotated. */
static void test_attention_rotations(void **state) {
    (void)state;
    rl_kernels_impl impls[2];
    int ni = n_impls(impls);
    rl_threadpool *tp = rl_threadpool_new(2);
    const rl_kv_rot rots[3] = {RL_KV_ROT_NONE, RL_KV_ROT_HADAMARD, RL_KV_ROT_AUTO};
    for (int ii = 0; ii < ni; ii++) {
        rl_kernels_init(impls[ii]);
        for (int ki = 0; ki < N_KV_TYPES; ki++)
            for (int ri = 0; ri < 2; ri++) {
                rl_type kt = kv_types[ki], vt = kv_types[(ki + 1) % N_KV_TYPES];
                for (int ci = 0; ci < N_CASES; ci++)
                    check_case_rot(kt, vt, rots[ri], rots[1 - ri], &cases[ci], tp, NULL, NULL,
                                   NULL);
            }
        check_case_rot(RL_TYPE_Q4_0, RL_TYPE_Q4_0, RL_KV_ROT_NONE, RL_KV_ROT_NONE, &cases[1], tp,
                       NULL, NULL, NULL);
        (void)rots[2];
    }
    rl_kernels_init(RL_KERNELS_AUTO);
    rl_threadpool_free(tp);
}

/* Rotation is transparent: on f32 pages (no quantization), rotated K and V
 * give the unrotated result up to float rounding (|diff| <= 1e-5 max|v|:
 * the transforms of k, v, q and the output each add a few 2^-24 relative
 * terms, far below that). */
static void test_rotation_transparent(void **state) {
    (void)state;
    const att_case *c = &cases[0];
    const int nh = c->n_head, hd = c->hd, n_pos = 150;
    float *q = malloc(sizeof(float) * nh * hd), o[2][9 * 64];
    for (int r = 0; r < 2; r++) {
        kt_seed(KT_SEED ^ 7);
        att_fix f;
        rl_kv_rot rot = r ? RL_KV_ROT_HADAMARD : RL_KV_ROT_NONE;
        att_fix_init_rot(&f, RL_TYPE_F32, RL_TYPE_F32, rot, rot, c->nkv, hd, c->bs, n_pos);
        assert_true(f.k_rot == (r == 1) && f.v_rot == (r == 1));
        for (int i = 0; i < nh * hd; i++) q[i] = rnd_gauss();
        int32_t pos = n_pos - 1;
        rl_attn_args a = {.q = q,
                          .out = o[r],
                          .n_tok = 1,
                          .n_head = nh,
                          .pos = &pos,
                          .block_table = f.bt,
                          .kv = &f.kv,
                          .scale = 1.0f / sqrtf((float)hd)};
        rl_attention(&a, NULL);
        att_fix_free(&f);
    }
    for (int i = 0; i < nh * hd; i++)
        if (fabsf(o[0][i] - o[1][i]) > 1e-5f * 8.0f) /* max|v| <= ~8 in the fixture */
            fail_msg("rotated f32 attention elem %d: %g vs %g", i, o[1][i], o[0][i]);
    free(q);
}

/* Sum over the n_head query heads q[n_head][hd] and every stored position
 * of the squared score error of the fixture's K pages: (q'.(kd - kt))^2,
 * q' the query as the kernel scores it (divided by the K scale `scale`
 * [n_kv_head][hd] when not NULL, then rotated when the pages are). */
static double score_sq_err(const att_fix *f, const float *q, int n_head, const float *scale) {
    const int nkv = f->kv.n_kv_head, hd = f->kv.head_dim, group = n_head / nkv;
    double se = 0;
    for (int h = 0; h < n_head; h++) {
        float qh[512];
        for (int i = 0; i < hd; i++)
            qh[i] = scale ? q[h * hd + i] / scale[(h / group) * hd + i] : q[h * hd + i];
        if (f->k_rot) rl__kernels_ref()->wht(qh, hd);
        for (int p = 0; p < f->n_pos; p++) {
            size_t o = ((size_t)p * nkv + h / group) * hd;
            double d = 0;
            for (int i = 0; i < hd; i++) d += (double)qh[i] * (f->kd[o + i] - f->kt[o + i]);
            se += d * d;
        }
    }
    return se;
}

/* What the rotation is for: with outlier channels in K (every 16th channel
 * 4x, as in the fixture), q4_0 scores q.k are much closer to the exact f32
 * scores when the rows are rotated; iq4_nl (same size, non-uniform
 * codebook, scale search) is closer still.  Measured over 150 keys x 9
 * heads of the SmolLM2 shape: RMS score error. */
static void test_rotation_helps_q4_0(void **state) {
    (void)state;
    const int nkv = 3, nh = 9, hd = 64, n_pos = 150;
    double se[3] = {0, 0, 0};
    float q[9 * 64];
    for (int r = 0; r < 3; r++) {
        kt_seed(KT_SEED ^ 11);
        att_fix f;
        att_fix_init_rot(&f, r == 2 ? RL_TYPE_IQ4_NL : RL_TYPE_Q4_0, RL_TYPE_F16,
                         r ? RL_KV_ROT_HADAMARD : RL_KV_ROT_NONE, RL_KV_ROT_NONE, nkv, hd, 16,
                         n_pos);
        for (int i = 0; i < nh * hd; i++) q[i] = rnd_gauss();
        se[r] = score_sq_err(&f, q, nh, NULL);
        att_fix_free(&f);
    }
    double rms0 = sqrt(se[0] / (nh * n_pos)), rms1 = sqrt(se[1] / (nh * n_pos)),
           rms2 = sqrt(se[2] / (nh * n_pos));
    print_message(
        "  K score RMS error: q4_0 unrotated %.4f, q4_0 rotated %.4f, iq4_nl rotated %.4f\n", rms0,
        rms1, rms2);
    assert_true(rms1 < 0.75 * rms0);
    assert_true(rms2 < 0.95 * rms1);
}

/* Full checks (check_case_rot) of every K page type, rotated or not, with
 * q8_0 V, over all cases: for the K shift / scale tests. */
static void check_k_types(rl_threadpool *tp) {
    const rl_type kts[5] = {RL_TYPE_Q8_0, RL_TYPE_Q4_0, RL_TYPE_IQ4_NL, RL_TYPE_F16, RL_TYPE_Q8_64};
    for (int ki = 0; ki < 5; ki++)
        for (int ri = 0; ri < 2; ri++)
            for (int ci = 0; ci < N_CASES; ci++)
                check_case_rot(kts[ki], RL_TYPE_Q8_0, ri ? RL_KV_ROT_HADAMARD : RL_KV_ROT_NONE,
                               RL_KV_ROT_AUTO, &cases[ci], tp, NULL, NULL, NULL);
}

/* K offset (rl_kv_layer.k_shift): keys = a large fixed per-channel offset
 * (like qwen2's K bias: up to +-60 on a few channels) plus the fixture's
 * varying part.  With k_shift = that offset, quantized K pages hold only the
 * varying part: full checks (the oracle adds q . mu back; bounds, batch
 * invariance; softcap case included) for every quantized K type, rotated
 * or not, and f16 K ignores the shift; then the q4_0 score error with the
 * shift must be far below the error without it. */
static void test_k_shift(void **state) {
    (void)state;
    static float mu[3 * 256];
    rl_threadpool *tp = rl_threadpool_new(2);
    for (int i = 0; i < 3 * 256; i++)
        mu[i] = (i % 16 == 5) ? 60.0f * (i % 3 ? 1.0f : -1.0f) : 0.5f * rnd_gauss();
    g_shift = mu;
    check_k_types(tp);
    /* score error of q4_0 (rotated) against the exact keys, without and
     * with the shift */
    const int nkv = 3, nh = 9, hd = 64, n_pos = 150;
    double se[2] = {0, 0};
    float q[9 * 64];
    for (int r = 0; r < 2; r++) {
        kt_seed(KT_SEED ^ 13);
        g_shift = mu;
        att_fix f;
        rl_kv_layer dummy = {.k_type = RL_TYPE_Q4_0, .k_shift = mu};
        assert_true(rl_kv_k_shifted(&dummy));
        g_shift_off = r == 0; /* r = 0: the same keys (k + mu) stored as they are */
        att_fix_init_rot(&f, RL_TYPE_Q4_0, RL_TYPE_F16, RL_KV_ROT_HADAMARD, RL_KV_ROT_NONE, nkv, hd,
                         16, n_pos);
        g_shift_off = false;
        assert_true(f.k_shift == (r == 1));
        for (int i = 0; i < nh * hd; i++) q[i] = rnd_gauss();
        se[r] = score_sq_err(&f, q, nh, NULL);
        att_fix_free(&f);
    }
    g_shift = NULL;
    print_message("  q4_0 K (rotated), keys with a +-60 offset: score RMS error %.4f unshifted, "
                  "%.4f shifted\n",
                  sqrt(se[0] / (nh * n_pos)), sqrt(se[1] / (nh * n_pos)));
    assert_true(se[1] < 0.25 * 0.25 * se[0]); /* RMS error down 4x or more */
    rl_threadpool_free(tp);
}

/* K channel scale (rl_kv_layer.k_scale), with a shift: full checks (the
 * oracle scores fl(q / D) against the page-domain keys D (k - mu); bounds,
 * batch invariance) for every quantized K type, rotated or not, f16 K
 * ignoring it.  Then the fit (rl_model_k_scale_fit) on keys whose quiet
 * channels are the ones the queries weigh most: it must predict a large
 * gain, and the q4_0 score error with its D must drop accordingly; on
 * isotropic keys and queries it must predict none. */
static void test_k_scale(void **state) {
    (void)state;
    enum { NKV = 3, HD = 64, NH = 9, NPOS = 150, GROUP = NH / NKV };
    static float mu[NKV * 256], D[NKV * 256], kstd[NKV * HD], rq[NKV * HD];
    rl_threadpool *tp = rl_threadpool_new(2);
    for (int i = 0; i < NKV * 256; i++) {
        mu[i] = 0.5f * rnd_gauss();
        D[i] = 0.25f + 3.75f * (0.5f + 0.5f * rnd_unif());
    }
    g_shift = mu;
    g_scale = D;
    check_k_types(tp);
    g_shift = NULL;
    rl_kv_layer dummy = {.k_type = RL_TYPE_F16, .k_scale = D};
    assert_false(rl_kv_k_scaled(&dummy));
    dummy.k_type = RL_TYPE_Q4_0;
    assert_true(rl_kv_k_scaled(&dummy));

    /* keys: 8 quiet channels (sd 0.05) per head that the queries weigh
     * 20x; the rest sd 1, queries 1 */
    for (int i = 0; i < NKV * HD; i++) {
        bool quiet = i % 8 == 2;
        kstd[i] = quiet ? 0.05f : 1.0f;
        rq[i] = quiet ? 20.0f : 1.0f;
    }
    for (int iso = 0; iso < 2; iso++) {
        double sk[HD], sk2[HD], sq2[HD];
        float Dfit[HD];
        for (int i = 0; i < HD; i++) {
            double s = iso ? 1.0 : kstd[i], r = iso ? 1.0 : rq[i];
            sk[i] = 3.0 * 100, sk2[i] = (s * s + 9.0) * 100, sq2[i] = r * r * 700; /* mean 3 */
        }
        double gain = rl_model_k_scale_fit(sk, sk2, sq2, 100, 700, HD, Dfit);
        print_message("  K scale fit: predicted gain %.2f (%s)\n", gain,
                      iso ? "isotropic" : "quiet channels");
        if (iso) {
            assert_true(gain < 1.0001);
            for (int i = 0; i < HD; i++) assert_float_equal(Dfit[i], 1.0f, 1e-5f);
        } else {
            assert_true(gain > 5.0);
            for (int h = 0; h < NKV; h++) memcpy(D + h * HD, Dfit, sizeof Dfit);
        }
    }
    double se[2] = {0, 0};
    float q[NH * HD];
    for (int r = 0; r < 2; r++) {
        kt_seed(KT_SEED ^ 17);
        g_kstd = kstd;
        g_scale = r ? D : NULL;
        att_fix f;
        att_fix_init_rot(&f, RL_TYPE_Q4_0, RL_TYPE_F16, RL_KV_ROT_HADAMARD, RL_KV_ROT_NONE, NKV, HD,
                         16, NPOS);
        assert_true(f.k_scale == (r == 1));
        for (int i = 0; i < NH * HD; i++) q[i] = rnd_gauss() * rq[(i / (HD * GROUP)) * HD + i % HD];
        se[r] = score_sq_err(&f, q, NH, r ? D : NULL);
        att_fix_free(&f);
    }
    g_kstd = NULL;
    g_scale = NULL;
    print_message("  q4_0 K (rotated), quiet channels weighed most: score RMS error %.4f unscaled, "
                  "%.4f scaled\n",
                  sqrt(se[0] / (NH * NPOS)), sqrt(se[1] / (NH * NPOS)));
    assert_true(se[1] < se[0] / 4.0); /* RMS error down 2x or more */
    rl_threadpool_free(tp);
}

/* The iq4_nl page quantizer of every table writes the reference's bytes:
 * Gaussian rows at many magnitudes, rows with one outlier, constant rows,
 * exact codebook multiples, zeros, tiny values, and rows whose candidate
 * scale 1 puts values exactly between two codebook entries (ties). */
static void test_iq4_nl_quant_twins(void **state) {
    (void)state;
    const rl__ktab *ref = rl__kernels_ref(), *tabs[2] = {rl__kernels_avx2(), rl__kernels()};
    float x[256];
    uint8_t a[256], b[256];
    int n_rows = 0;
    for (int it = 0; it < 3000; it++) {
        int kind = it % 7, hd = 32 << (it % 4); /* 32..256 */
        float mag = ldexpf(1.0f, (int)(rnd_u32() % 40) - 20);
        for (int i = 0; i < hd; i++) {
            switch (kind) {
            case 0:
                x[i] = rnd_gauss() * mag;
                break;
            case 1:
                x[i] = (i == (int)(rnd_u32() % (uint32_t)hd) ? 40.0f : 1.0f) * rnd_gauss() * mag;
                break;
            case 2:
                x[i] = mag;
                break;
            case 3:
                x[i] = (float)rl__iq4nl_values[rnd_u32() % 16] * mag;
                break;
            case 4:
                x[i] = (i % 3) ? 0.0f : rnd_gauss();
                break;
            case 5:
                x[i] = rnd_gauss() * 1e-30f;
                break;
            default: { /* -127 sets the candidate scale 1 exactly: midpoints are ties */
                int k = (int)(rnd_u32() % 15);
                x[i] = i % 32 == 0 ? -127.0f
                       : i % 8 == 3
                           ? 0.5f * ((float)rl__iq4nl_values[k] + (float)rl__iq4nl_values[k + 1])
                           : (float)rl__iq4nl_values[k];
            }
            }
        }
        ref->quant_iq4_nl_kv(x, a, hd);
        for (int k = 0; k < 2; k++) {
            if (!tabs[k]) continue;
            memset(b, 0xAB, sizeof b);
            tabs[k]->quant_iq4_nl_kv(x, b, hd);
            assert_memory_equal(a, b, (size_t)hd / 32 * 18);
        }
        n_rows++;
    }
    print_message("  iq4_nl quantizer: %d rows identical to the reference (%s)\n", n_rows,
                  rl_kernels_impl_name());
}

/* The pool hands its configured rotation to every layer view (0 = AUTO). */
static void test_pool_rotation(void **state) {
    (void)state;
    rl_kv_config cfg = {.n_layer = 2,
                        .n_kv_head = 1,
                        .head_dim = 64,
                        .block_size = 16,
                        .k_type = RL_TYPE_Q4_0,
                        .v_type = RL_TYPE_Q4_0,
                        .v_rot = RL_KV_ROT_NONE,
                        .n_blocks = 4};
    rl_kv_pool *p = NULL;
    rl_err err = {0};
    assert_int_equal(rl_kv_pool_new(&cfg, &p, &err), RL_OK);
    const rl_kv_layer *L = rl_kv_pool_layers(p);
    for (int l = 0; l < 2; l++) {
        assert_int_equal(L[l].k_rot, RL_KV_ROT_AUTO);
        assert_int_equal(L[l].v_rot, RL_KV_ROT_NONE);
        assert_int_equal(rl_kv_rot_resolve(L[l].v_type, L[l].head_dim, L[l].v_rot), RL_KV_ROT_NONE);
    }
    rl_kv_pool_free(p);
}

static void test_supported(void **state) {
    (void)state;
    assert_true(rl_kv_type_supported(RL_TYPE_F16, 64));
    assert_true(rl_kv_type_supported(RL_TYPE_F32, 40));
    assert_true(rl_kv_type_supported(RL_TYPE_Q8_0, 64));
    assert_true(rl_kv_type_supported(RL_TYPE_Q4_0, 256));
    assert_true(rl_kv_type_supported(RL_TYPE_IQ4_NL, 128));
    assert_false(rl_kv_type_supported(RL_TYPE_IQ4_NL, 80));
    assert_true(rl_kv_type_supported(RL_TYPE_Q8_64, 64));
    assert_true(rl_kv_type_known(RL_TYPE_Q8_64) && rl_kv_type_known(RL_TYPE_F32));
    assert_false(rl_kv_type_known(RL_TYPE_Q4_1) || rl_kv_type_known(RL_TYPE_Q8_1));
    assert_false(rl_kv_type_supported(RL_TYPE_Q8_64, 96));
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
        cmocka_unit_test(test_wht),
        cmocka_unit_test(test_rot_resolve),
        cmocka_unit_test(test_attention_rotations),
        cmocka_unit_test(test_rotation_transparent),
        cmocka_unit_test(test_rotation_helps_q4_0),
        cmocka_unit_test(test_pool_rotation),
        cmocka_unit_test(test_k_shift),
        cmocka_unit_test(test_k_scale),
        cmocka_unit_test(test_iq4_nl_quant_twins),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
