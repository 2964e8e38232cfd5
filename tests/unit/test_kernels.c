/* Kernel tests: every public kernel against a plain double-precision oracle
 * (weights dequantized with the traits' to_float), batch invariance
 * (n_tok = 1 vs 7, 1 vs 2 threads: bit-identical), and each AVX2 leaf
 * against its reference twin.  Every test runs under each available
 * implementation (ref; avx2 and avx512vnni when the CPU has them).  The
 * avx512vnni matmul leaves are bit-identical to the avx2 ones (same float
 * operations, exact integer sums; x86/vnni_dot.c), and each tile variant
 * (1, 4, 8 tokens; 2 rows) to the 1-token leaf: test_vnni_vs_avx2.
 *
 * Error bounds (stated where checked):
 *   matmul, quantized weights: activations are quantized per block with
 *     d = amax/127 (stored as fp16 for q8_0/q8_1), so each x_i is off by at
 *     most d/2 + 2^-10|x_i|; with W_b = max|w| over x_i's block:
 *       |y - y_oracle| <= sum_i W_b (amax_b/254 + 2^-10 |x_i|)  (+ for
 *       q8_1, the fp16 rounding of s: 2^-10 W_b sum_b|x|) + 1e-5 sum|w||x|.
 *   matmul, float weights: 1e-5 * sum|w||x| (float accumulation, n <= 1024).
 *   attention: 1e-4 * max|v| (f32 KV), f16 KV compared to an oracle on the
 *     same f16-rounded K/V with the same bound.
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

#define KT_SEED 0x9E3779B97F4A7C15ull /* the data these tests were written against */

static const rl_type k_types[] = {RL_TYPE_F32,  RL_TYPE_F16,    RL_TYPE_BF16,   RL_TYPE_Q4_0,
                                  RL_TYPE_Q4_1, RL_TYPE_Q5_0,   RL_TYPE_Q5_1,   RL_TYPE_Q8_0,
                                  RL_TYPE_Q2_K, RL_TYPE_Q3_K,   RL_TYPE_Q4_K,   RL_TYPE_Q5_K,
                                  RL_TYPE_Q6_K, RL_TYPE_IQ4_NL, RL_TYPE_IQ4_XS, RL_TYPE_MXFP4};
#define N_TYPES (int)(sizeof k_types / sizeof k_types[0])

typedef struct test_mat {
    rl_mat m;
    float *deq; /* [n_rows][n_cols] dequantized weights */
} test_mat;

/* Random weights with per-32 magnitude variation, quantized by the traits. */
static test_mat make_mat(rl_type t, int64_t rows, int64_t cols) {
    test_mat tm;
    const rl_type_traits *tr = rl_type_get(t);
    assert_non_null(tr);
    assert_non_null(tr->from_float);
    tm.m.type = t;
    tm.m.n_rows = rows;
    tm.m.n_cols = cols;
    tm.m.row_size = rl_type_row_size(t, cols);
    assert_true(tm.m.row_size > 0);
    void *data = malloc(tm.m.row_size * rows);
    float *src = malloc(sizeof(float) * cols);
    tm.deq = malloc(sizeof(float) * rows * cols);
    for (int64_t r = 0; r < rows; r++) {
        float sc = 0.01f + 0.1f * (rnd_unif() + 1.0f);
        for (int64_t i = 0; i < cols; i++) {
            if (i % 32 == 0) sc *= 0.5f + (rnd_unif() + 1.0f) * 0.5f;
            src[i] = rnd_gauss() * sc + (t == RL_TYPE_Q4_1 || t == RL_TYPE_Q5_1 ? 0.01f : 0.0f);
        }
        tr->from_float(src, (uint8_t *)data + r * tm.m.row_size, cols);
        tr->to_float((uint8_t *)data + r * tm.m.row_size, tm.deq + r * cols, cols);
    }
    tm.m.data = data;
    free(src);
    return tm;
}

static void free_mat(test_mat *tm) {
    free((void *)tm->m.data);
    free(tm->deq);
}

static float *make_x(int64_t n, float scale) {
    float *x = malloc(sizeof(float) * n);
    for (int64_t i = 0; i < n; i++) x[i] = rnd_gauss() * scale * (i % 7 == 0 ? 4.0f : 1.0f);
    return x;
}

/* Oracle y and the stated bound for one (row, token). */
static void oracle(const test_mat *tm, const float *x, int64_t r, double *y, double *bound) {
    int64_t n = tm->m.n_cols;
    const float *w = tm->deq + r * n;
    rl_type at = rl__act_type(tm->m.type);
    int blk = at == RL_TYPE_Q8_K ? 256 : 32;
    double s = 0, swx = 0, b = 0;
    for (int64_t i = 0; i < n; i++) {
        s += (double)w[i] * x[i];
        swx += fabs((double)w[i] * x[i]);
    }
    if (at != RL_TYPE_F32) {
        for (int64_t i0 = 0; i0 < n; i0 += blk) {
            double wmax = 0, xmax = 0, xs = 0;
            for (int64_t i = i0; i < i0 + blk; i++) {
                wmax = fmax(wmax, fabs(w[i]));
                xmax = fmax(xmax, fabs(x[i]));
                xs += fabs(x[i]);
            }
            b += wmax * (xmax / 254.0 * blk + xs / 1024.0);
            if (at == RL_TYPE_Q8_1) b += wmax * xs / 1024.0;
        }
    }
    *y = s;
    *bound = b + 1e-5 * swx + 1e-30;
}

static void run_matmul(const rl_mat *m, const float *x, float *y, int64_t n_tok,
                       rl_threadpool *tp) {
    size_t ss = rl_matmul_scratch_size(m, n_tok);
    void *scratch = ss ? malloc(ss) : NULL;
    rl_matmul(m, x, y, n_tok, scratch, tp);
    free(scratch);
}

static void test_matmul_oracle(void **state) {
    (void)state;
    rl_kernels_impl impls[KT_MAX_IMPLS];
    int ni = kt_impls(impls);
    rl_threadpool *tp = rl_threadpool_new(2);
    for (int ii = 0; ii < ni; ii++) {
        assert_int_equal(rl_kernels_init(impls[ii]), impls[ii]);
        for (int ti = 0; ti < N_TYPES; ti++) {
            rl_type t = k_types[ti];
            assert_true(rl_matmul_supports(t));
            const int64_t rows = 37, cols = 768, n_tok = 7;
            test_mat tm = make_mat(t, rows, cols);
            float *x = make_x(cols * n_tok, 1.0f);
            float *y = malloc(sizeof(float) * rows * n_tok);
            run_matmul(&tm.m, x, y, n_tok, tp);
            double worst = 0;
            for (int64_t tk = 0; tk < n_tok; tk++)
                for (int64_t r = 0; r < rows; r++) {
                    double yo, bd;
                    oracle(&tm, x + tk * cols, r, &yo, &bd);
                    double err = fabs(y[tk * rows + r] - yo);
                    if (err > bd)
                        fail_msg("%s/%s tok %ld row %ld: got %g want %g (err %g > bound %g)",
                                 rl_kernels_impl_name(), rl_type_name(t), (long)tk, (long)r,
                                 y[tk * rows + r], yo, err, bd);
                    if (err / bd > worst) worst = err / bd;
                }
            free(x);
            free(y);
            free_mat(&tm);
        }
    }
    rl_threadpool_free(tp);
}

/* y for n_tok = 3, 6, 7, 14 (decode-sized row chunks; 3 and 7 end in a
 * padded 4-tile, 6 and 14 in a padded 8-tile) and n_tok = 21
 * (prefill-sized chunks, tiles 8 + 8 + 4 + 1) equals, bit for bit, n_tok
 * one-token calls; and 2 threads equal 1 thread.  The scratch is exactly
 * rl_matmul_scratch_size (ASan sees a padded row past it). */
static void test_matmul_batch_invariance(void **state) {
    (void)state;
    rl_kernels_impl impls[KT_MAX_IMPLS];
    int ni = kt_impls(impls);
    rl_threadpool *tp2 = rl_threadpool_new(2);
    for (int ii = 0; ii < ni; ii++) {
        rl_kernels_init(impls[ii]);
        static const int64_t ntoks[5] = {3, 6, 7, 14, 21};
        for (int ti = 0; ti < 5 * N_TYPES; ti++) {
            rl_type t = k_types[ti % N_TYPES];
            const int64_t rows = 131, cols = 512, n_tok = ntoks[ti / N_TYPES];
            test_mat tm = make_mat(t, rows, cols);
            float *x = make_x(cols * n_tok, 0.7f);
            float *y7 = malloc(sizeof(float) * rows * n_tok);
            float *y7b = malloc(sizeof(float) * rows * n_tok);
            float *y1 = malloc(sizeof(float) * rows);
            run_matmul(&tm.m, x, y7, n_tok, NULL);
            run_matmul(&tm.m, x, y7b, n_tok, tp2);
            assert_memory_equal(y7, y7b, sizeof(float) * rows * n_tok);
            for (int64_t tk = 0; tk < n_tok; tk++) {
                run_matmul(&tm.m, x + tk * cols, y1, 1, (tk & 1) ? tp2 : NULL);
                assert_memory_equal(y1, y7 + tk * rows, sizeof(float) * rows);
            }
            free(x);
            free(y7);
            free(y7b);
            free(y1);
            free_mat(&tm);
        }
    }
    rl_threadpool_free(tp2);
}

/* AVX2 leaves vs reference: activation quantizers bit-identical; vec-dots
 * within 2e-6 * sum|w_i x_i| of the (differently ordered) reference. */
static void test_avx2_vs_ref(void **state) {
    (void)state;
    const rl__ktab *ref = rl__kernels_ref(), *avx = rl__kernels_avx2();
    if (!avx) skip();
    const int64_t n = 1024 + 256;
    float *x = make_x(n, 1.3f);
    x[5] = 0.0f;
    for (int i = 64; i < 96; i++) x[i] = 0.0f; /* an all-zero block */
    uint8_t qa[2][8192], qb[2][8192];
    ref->quant_q8_0(x, qa[0], n);
    avx->quant_q8_0(x, qb[0], n);
    assert_memory_equal(qa[0], qb[0], rl_type_row_size(RL_TYPE_Q8_0, n));
    ref->quant_q8_1(x, qa[0], n);
    avx->quant_q8_1(x, qb[0], n);
    assert_memory_equal(qa[0], qb[0], rl_type_row_size(RL_TYPE_Q8_1, n));
    ref->quant_q8_K(x, qa[0], n);
    avx->quant_q8_K(x, qb[0], n);
    assert_memory_equal(qa[0], qb[0], rl_type_row_size(RL_TYPE_Q8_K, n));
    for (int ti = 0; ti < N_TYPES; ti++) {
        rl_type t = k_types[ti];
        test_mat tm = make_mat(t, 4, n);
        rl_type at = rl__act_type(t);
        const void *xa = x;
        if (at != RL_TYPE_F32) {
            rl__quant_fn q = at == RL_TYPE_Q8_0   ? ref->quant_q8_0
                             : at == RL_TYPE_Q8_1 ? ref->quant_q8_1
                                                  : ref->quant_q8_K;
            q(x, qa[1], n);
            xa = qa[1];
        }
        for (int r = 0; r < 4; r++) {
            const void *wr = (const uint8_t *)tm.m.data + r * tm.m.row_size;
            float sr, sa;
            ref->vec_dot[t](n, &sr, wr, xa);
            avx->vec_dot[t](n, &sa, wr, xa);
            double swx = 0;
            for (int64_t i = 0; i < n; i++) swx += fabs((double)tm.deq[r * n + i] * x[i]);
            if (fabs((double)sr - sa) > 2e-6 * swx + 1e-30)
                fail_msg("%s row %d: ref %.9g avx2 %.9g", rl_type_name(t), r, sr, sa);
        }
        free_mat(&tm);
    }
    /* attention leaves */
    float a[200], b[200], ya[200], yb[200];
    rl_fp16 h[200];
    double sab = 0;
    for (int i = 0; i < 200; i++) {
        a[i] = rnd_gauss();
        b[i] = rnd_gauss();
        h[i] = rl_f32_to_fp16(b[i]);
        ya[i] = yb[i] = rnd_gauss();
        sab += fabs(a[i] * b[i]);
    }
    for (int nn = 1; nn <= 200; nn += 13) {
        assert_true(fabs(ref->dot_f32(a, b, nn) - avx->dot_f32(a, b, nn)) <= 2e-6 * sab);
        assert_true(fabs(ref->dot_f16(a, h, nn) - avx->dot_f16(a, h, nn)) <= 2e-6 * sab);
    }
    ref->axpy_f16(ya, h, 0.37f, 197);
    avx->axpy_f16(yb, h, 0.37f, 197);
    for (int i = 0; i < 200; i++) assert_float_equal(ya[i], yb[i], 1e-6f * (1 + fabsf(ya[i])));
    ref->axpy_f32(ya, a, -1.5f, 199);
    avx->axpy_f32(yb, a, -1.5f, 199);
    for (int i = 0; i < 200; i++) assert_float_equal(ya[i], yb[i], 1e-6f * (1 + fabsf(ya[i])));
    ref->scale(ya, 0.3f, 150);
    avx->scale(yb, 0.3f, 150);
    for (int i = 0; i < 200; i++) assert_float_equal(ya[i], yb[i], 1e-6f * (1 + fabsf(ya[i])));
    free(x);
}

/* rmsnorm, softmax, exp_sum, silu_mul, gelu_mul vs double oracles: relative 1e-5
 * (rmsnorm, softmax, exp_sum), and 2e-6*|out| + 1e-6 (silu/gelu; expf/tanhf and the
 * AVX2 polynomial approximations). */
static void test_elementwise(void **state) {
    (void)state;
    rl_kernels_impl impls[KT_MAX_IMPLS];
    int ni = kt_impls(impls);
    enum { N = 300 };
    float x[N], w[N], g[N], u[N], out[N];
    for (int i = 0; i < N; i++) {
        x[i] = rnd_gauss() * 3;
        w[i] = rnd_gauss();
        g[i] = rnd_unif() * 12;
        u[i] = rnd_gauss();
    }
    g[0] = -80.0f;
    g[1] = 80.0f;
    for (int ii = 0; ii < ni; ii++) {
        rl_kernels_init(impls[ii]);
        for (int n = 1; n <= N; n += 37) {
            double ss = 0;
            for (int i = 0; i < n; i++) ss += (double)x[i] * x[i];
            double r = 1.0 / sqrt(ss / n + 1e-6);
            rl_rmsnorm(out, x, w, n, 1e-6f);
            for (int i = 0; i < n; i++)
                assert_float_equal(out[i], x[i] * r * w[i], 1e-5 * fabs(x[i] * r * w[i]) + 1e-7);
            memcpy(out, x, sizeof x);
            rl_rmsnorm(out, out, NULL, n, 1e-6f); /* aliasing */
            for (int i = 0; i < n; i++)
                assert_float_equal(out[i], x[i] * r, 1e-5 * fabs(x[i] * r) + 1e-7);
            double m = -1e30, se = 0;
            for (int i = 0; i < n; i++) m = fmax(m, x[i]);
            for (int i = 0; i < n; i++) se += exp(x[i] - m);
            memcpy(out, x, sizeof x);
            rl_softmax(out, n);
            for (int i = 0; i < n; i++) {
                double p = exp(x[i] - m) / se;
                assert_float_equal(out[i], p, 1e-5 * p + 1e-9);
            }
            memcpy(out, x, sizeof x); /* attention's tile weights */
            double es = rl__kernels()->exp_sum(out, n, (float)m);
            for (int i = 0; i < n; i++) {
                double e = exp(x[i] - m);
                assert_float_equal(out[i], e, 1e-5 * e + 1e-30);
            }
            assert_float_equal(es, se, 1e-5 * se);
            memcpy(out, x, sizeof x); /* attention's scaled scores: the twin's bits */
            float sm = rl__kernels()->add_scale_max(out, n, 0.375f, 0.125f), wm = -INFINITY;
            for (int i = 0; i < n; i++) {
                float e = (x[i] + 0.375f) * 0.125f;
                assert_memory_equal(&out[i], &e, sizeof e);
                wm = e > wm ? e : wm;
            }
            assert_memory_equal(&sm, &wm, sizeof sm);
            for (int k = 0; k < 2; k++) { /* residual add: the scalar loop's bits */
                const float a = k ? 0.7f : 1.0f;
                memcpy(out, x, sizeof x);
                rl_add_scaled(out, g, a, n);
                for (int i = 0; i < N; i++) {
                    float e = x[i];
                    if (i < n) e += a * g[i];
                    assert_memory_equal(&out[i], &e, sizeof e);
                }
            }
            rl_silu_mul(out, g, u, n);
            for (int i = 0; i < n; i++) {
                double e = g[i] / (1.0 + exp(-(double)g[i])) * u[i];
                assert_float_equal(out[i], e, 2e-6 * fabs(e) + 1e-6);
            }
            rl_gelu_mul(out, g, u, n);
            for (int i = 0; i < n; i++) {
                double gx = g[i];
                double e = 0.5 * gx *
                           (1 + tanh(0.7978845608028654 * (gx + 0.044715 * gx * gx * gx))) * u[i];
                assert_float_equal(out[i], e, 2e-6 * fabs(e) + 1e-6);
            }
        }
    }
}

static void test_rope(void **state) {
    (void)state;
    enum { NH = 3, HD = 64 };
    float x[NH * HD], y[NH * HD];
    for (int i = 0; i < NH * HD; i++) x[i] = rnd_gauss();
    for (int mode = 0; mode < 2; mode++) {
        rl_rope_mode md = mode ? RL_ROPE_NEOX : RL_ROPE_NORMAL;
        int n_rot = mode ? 64 : 32; /* partial rotation in NORMAL case */
        memcpy(y, x, sizeof x);
        rl_rope(y, NH, HD, n_rot, 123, 10000.0f, 0.5f, md);
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < HD; i++) {
                int d = h * HD + i;
                double e = x[d];
                if (i < n_rot) {
                    int k = md == RL_ROPE_NEOX ? i % (n_rot / 2) : i / 2;
                    int lo = md == RL_ROPE_NEOX ? (i < n_rot / 2) : (i % 2 == 0);
                    int partner = md == RL_ROPE_NEOX ? (lo ? i + n_rot / 2 : i - n_rot / 2)
                                                     : (lo ? i + 1 : i - 1);
                    double th = 123 * 0.5 * pow(10000.0, -2.0 * k / n_rot);
                    double a = x[h * HD + (lo ? i : partner)], b = x[h * HD + (lo ? partner : i)];
                    e = lo ? a * cos(th) - b * sin(th) : a * sin(th) + b * cos(th);
                }
                assert_float_equal(y[d], e, 2e-5 * (1 + fabs(e)));
            }
    }
}

static void test_get_row_kv_store(void **state) {
    (void)state;
    test_mat tm = make_mat(RL_TYPE_Q4_K, 5, 512);
    float row[512];
    rl_get_row(&tm.m, 3, row);
    assert_memory_equal(row, tm.deq + 3 * 512, sizeof row);
    free_mat(&tm);

    enum { NKV = 2, HD = 8, BS = 4, NB = 3 };
    rl_fp16 kbuf[NB * NKV * BS * HD];
    float vbuf[NB * NKV * BS * HD];
    rl_kv_layer kv = {.k_type = RL_TYPE_F16,
                      .v_type = RL_TYPE_F32,
                      .n_kv_head = NKV,
                      .head_dim = HD,
                      .block_size = BS,
                      .k_base = kbuf,
                      .v_base = vbuf,
                      .k_block_bytes = NKV * BS * HD * 2,
                      .v_block_bytes = NKV * BS * HD * 4};
    int32_t bt[2] = {2, 0};
    float k[NKV * HD], v[NKV * HD];
    for (int i = 0; i < NKV * HD; i++) {
        k[i] = (float)i * 0.25f;
        v[i] = -(float)i;
    }
    rl_kv_store(&kv, bt, 5, k, v); /* block bt[1] = 0, slot 1 */
    for (int h = 0; h < NKV; h++)
        for (int d = 0; d < HD; d++) {
            assert_float_equal(rl_fp16_to_f32(kbuf[(h * BS + 1) * HD + d]), k[h * HD + d], 0);
            assert_float_equal(vbuf[(h * BS + 1) * HD + d], v[h * HD + d], 0);
        }
}

/* ---- attention ---- */

typedef struct att_fix {
    rl_kv_layer kv;
    int32_t bt[64];
    int n_pos;
    float *kf, *vf; /* f32 copies (after f16 rounding when KV is f16) [pos][nkv][hd] */
} att_fix;

static void att_fix_init(att_fix *f, rl_type kt, rl_type vt, int nkv, int hd, int bs, int n_pos) {
    int nblk = (n_pos + bs - 1) / bs + 3;
    assert_true(nblk <= 64);
    f->n_pos = n_pos;
    f->kv = (rl_kv_layer){
        .k_type = kt, .v_type = vt, .n_kv_head = nkv, .head_dim = hd, .block_size = bs};
    f->kv.k_block_bytes = (size_t)nkv * bs * rl_type_row_size(kt, hd);
    f->kv.v_block_bytes = (size_t)nkv * bs * rl_type_row_size(vt, hd);
    f->kv.k_base = calloc(nblk, f->kv.k_block_bytes);
    f->kv.v_base = calloc(nblk, f->kv.v_block_bytes);
    /* shuffled block ids */
    for (int i = 0; i < nblk; i++) f->bt[i] = i;
    for (int i = nblk - 1; i > 0; i--) {
        int j = (int)(rnd_u32() % (uint32_t)(i + 1));
        int32_t tmp = f->bt[i];
        f->bt[i] = f->bt[j];
        f->bt[j] = tmp;
    }
    f->kf = malloc(sizeof(float) * n_pos * nkv * hd);
    f->vf = malloc(sizeof(float) * n_pos * nkv * hd);
    for (int p = 0; p < n_pos; p++) {
        float *k = f->kf + (size_t)p * nkv * hd, *v = f->vf + (size_t)p * nkv * hd;
        for (int i = 0; i < nkv * hd; i++) {
            k[i] = rnd_gauss();
            v[i] = rnd_gauss();
        }
        rl_kv_store(&f->kv, f->bt, p, k, v);
        for (int i = 0; i < nkv * hd; i++) {
            if (kt == RL_TYPE_F16) k[i] = rl_fp16_to_f32(rl_f32_to_fp16(k[i]));
            if (vt == RL_TYPE_F16) v[i] = rl_fp16_to_f32(rl_f32_to_fp16(v[i]));
        }
    }
}

static void att_fix_free(att_fix *f) {
    free(f->kv.k_base);
    free(f->kv.v_base);
    free(f->kf);
    free(f->vf);
}

static void naive_attention(const att_fix *f, const float *q, int n_head, int32_t pos, float scale,
                            int window, float softcap, double *out) {
    int nkv = f->kv.n_kv_head, hd = f->kv.head_dim;
    double *s = malloc(sizeof(double) * (pos + 1));
    for (int h = 0; h < n_head; h++) {
        int kvh = h / (n_head / nkv);
        int lo = window > 0 ? pos - window + 1 : 0;
        if (lo < 0) lo = 0;
        double m = -1e300, z = 0;
        for (int p = lo; p <= pos; p++) {
            double d = 0;
            for (int i = 0; i < hd; i++)
                d += (double)q[h * hd + i] * f->kf[((size_t)p * nkv + kvh) * hd + i];
            d *= scale;
            if (softcap > 0) d = softcap * tanh(d / softcap);
            s[p] = d;
            m = fmax(m, d);
        }
        for (int p = lo; p <= pos; p++) z += (s[p] = exp(s[p] - m));
        for (int i = 0; i < hd; i++) {
            double acc = 0;
            for (int p = lo; p <= pos; p++) acc += s[p] * f->vf[((size_t)p * nkv + kvh) * hd + i];
            out[h * hd + i] = acc / z;
        }
    }
    free(s);
}

static void check_attention(rl_type kt, rl_type vt, int n_head, int nkv, int hd, int bs, int window,
                            float softcap, rl_threadpool *tp) {
    att_fix f;
    const int n_pos = 150, n_tok = 5;
    att_fix_init(&f, kt, vt, nkv, hd, bs, n_pos);
    int32_t pos[5] = {0, 31, 32, 97, 149};
    float *q = make_x((int64_t)n_tok * n_head * hd, 0.6f);
    float *out = malloc(sizeof(float) * n_tok * n_head * hd);
    float *out1 = malloc(sizeof(float) * n_head * hd);
    double *ref = malloc(sizeof(double) * n_head * hd);
    rl_attn_args a = {.q = q,
                      .out = out,
                      .n_tok = n_tok,
                      .n_head = n_head,
                      .pos = pos,
                      .block_table = f.bt,
                      .kv = &f.kv,
                      .scale = 1.0f / sqrtf((float)hd),
                      .window = window,
                      .softcap = softcap};
    rl_attention(&a, tp);
    for (int t = 0; t < n_tok; t++) {
        naive_attention(&f, q + (size_t)t * n_head * hd, n_head, pos[t], a.scale, window, softcap,
                        ref);
        for (int i = 0; i < n_head * hd; i++)
            if (fabs(out[(size_t)t * n_head * hd + i] - ref[i]) > 1e-4 * 4.0)
                fail_msg("attention %s tok %d elem %d: got %g want %g", rl_kernels_impl_name(), t,
                         i, out[(size_t)t * n_head * hd + i], ref[i]);
        /* batch invariance: the same token alone, single-threaded */
        rl_attn_args a1 = a;
        a1.q = q + (size_t)t * n_head * hd;
        a1.out = out1;
        a1.n_tok = 1;
        a1.pos = &pos[t];
        rl_attention(&a1, NULL);
        assert_memory_equal(out1, out + (size_t)t * n_head * hd, sizeof(float) * n_head * hd);
    }
    /* several runs in one dispatch (rl_attention_runs): tokens {0,1}, {2},
     * {3,4} as three runs equal the one-run call bit for bit */
    float *out3 = malloc(sizeof(float) * n_tok * n_head * hd);
    rl_attn_args runs[3] = {a, a, a};
    const int r0[4] = {0, 2, 3, 5};
    for (int r = 0; r < 3; r++) {
        runs[r].q = q + (size_t)r0[r] * n_head * hd;
        runs[r].out = out3 + (size_t)r0[r] * n_head * hd;
        runs[r].n_tok = r0[r + 1] - r0[r];
        runs[r].pos = &pos[r0[r]];
    }
    rl_attention_runs(runs, 3, tp);
    assert_memory_equal(out3, out, sizeof(float) * n_tok * n_head * hd);
    free(out3);
    /* grouped-query items (heads of a KV head together) against one head
     * an item, here and over a prompt chunk at positions 62..149; some of
     * the chunk's tokens against the oracle */
    enum { NC = 88 };
    int32_t cpos[NC];
    float *qc, *outc;
    kt_att_grouping(&a, tp, n_pos, NC, &qc, &outc, cpos);
    for (int t = 0; t < NC; t += 29) {
        const float *ot = outc + (size_t)t * n_head * hd;
        naive_attention(&f, qc + (size_t)t * n_head * hd, n_head, cpos[t], a.scale, window, softcap,
                        ref);
        for (int i = 0; i < n_head * hd; i++)
            if (fabs(ot[i] - ref[i]) > 1e-4 * 4.0)
                fail_msg("attention chunk %s tok %d elem %d: got %g want %g",
                         rl_kernels_impl_name(), t, i, ot[i], ref[i]);
    }
    free(qc);
    free(outc);
    free(q);
    free(out);
    free(out1);
    free(ref);
    att_fix_free(&f);
}

static void test_attention(void **state) {
    (void)state;
    rl_kernels_impl impls[KT_MAX_IMPLS];
    int ni = kt_impls(impls);
    rl_threadpool *tp = rl_threadpool_new(2);
    for (int ii = 0; ii < ni; ii++) {
        rl_kernels_init(impls[ii]);
        check_attention(RL_TYPE_F32, RL_TYPE_F32, 4, 4, 32, 16, 0, 0, NULL);   /* MHA */
        check_attention(RL_TYPE_F16, RL_TYPE_F16, 9, 3, 64, 16, 0, 0, tp);     /* GQA 9/3 */
        check_attention(RL_TYPE_F16, RL_TYPE_F16, 4, 1, 256, 8, 40, 0, tp);    /* window, MQA */
        check_attention(RL_TYPE_F16, RL_TYPE_F32, 8, 2, 48, 32, 0, 5.0f, tp);  /* softcap */
        check_attention(RL_TYPE_F32, RL_TYPE_F16, 6, 2, 40, 7, 20, 30.0f, tp); /* odd block size */
        check_attention(RL_TYPE_F32, RL_TYPE_F32, 12, 2, 36, 16, 0, 0, tp); /* groups of 6, tails */
        check_attention(RL_TYPE_F16, RL_TYPE_F16, 16, 2, 128, 16, 0, 0, tp); /* groups of 8 */
    }
    rl_threadpool_free(tp);
}

/* The VNNI table's 16-lane exp_sum and silu_mul equal the AVX2 leaves bit
 * for bit (weights and sum; every n from 1 to 70: 16-, 8- and scalar
 * parts), inputs spanning exp's clamps. */
static void test_vnni_exp_vs_avx2(void **state) {
    (void)state;
    const rl__ktab *avx = rl__kernels_avx2(), *vn = rl__kernels_vnni();
    if (!avx || !vn) skip();
    enum { N = 70 };
    float x[N], g[N], u[N], a[N], b[N];
    for (int i = 0; i < N; i++) {
        x[i] = -rnd_unif() * 30 - (i % 9 == 0 ? 90.0f : 0.0f);
        g[i] = (rnd_unif() - 0.5f) * 40 + (i % 11 == 0 ? 70.0f : 0.0f);
        u[i] = rnd_gauss();
    }
    for (int n = 1; n <= N; n++) {
        memcpy(a, x, sizeof x);
        memcpy(b, x, sizeof x);
        float sa = avx->exp_sum(a, n, 0.5f), sb = vn->exp_sum(b, n, 0.5f);
        assert_memory_equal(a, b, sizeof a);
        assert_memory_equal(&sa, &sb, sizeof sa);
        memset(a, 0, sizeof a);
        memset(b, 0, sizeof b);
        avx->silu_mul(a, g, u, n);
        vn->silu_mul(b, g, u, n);
        assert_memory_equal(a, b, sizeof a);
    }
}

/* Every table's activation quantizers and f16 conversion against the
 * reference: the same bytes, on blocks of every magnitude (codes of a zero
 * block, an fp16 scale that underflows to a subnormal or 0, one that
 * overflows to Inf), and to_f16 against rl_f32_to_fp16 on a sweep of bit
 * patterns (subnormals, the Inf threshold, NaNs with and without payload). */
static void test_quant_tables(void **state) {
    (void)state;
    const rl__ktab *ref = rl__kernels_ref();
    const rl__ktab *tabs[2] = {rl__kernels_avx2(), rl__kernels_vnni()};
    const int64_t n = 8 * 256;
    float *x = make_x(n, 1.0f);
    const float mags[8] = {1.0f, 0.0f, 1e-30f, 3e-6f, 1e6f, 1e7f, 2e-3f, 65504.0f * 127.0f};
    for (int b = 0; b < 8; b++) /* one 256-element block per magnitude */
        for (int i = 0; i < 256; i++) x[256 * b + i] *= mags[b];
    x[256 * 6 + 7] = 1.0f; /* a block whose amax is one outlier */
    static uint8_t qa[3][8192], qb[8192];
    ref->quant_q8_0(x, qa[0], n);
    ref->quant_q8_1(x, qa[1], n);
    ref->quant_q8_K(x, qa[2], n);
    enum { NH = 70000 };
    static float hx[NH];
    static rl_fp16 hr[NH], ht[NH];
    for (int i = 0; i < NH; i++) {
        uint32_t u = (uint32_t)i * 61363u + (uint32_t)(i & 7) * 0x1000u; /* all exponents */
        memcpy(&hx[i], &u, 4);
    }
    const float special[] = {
        65519.0f,       65520.0f,       65504.0f, 6.1035156e-05f, 5.9604645e-08f,
        2.9802322e-08f, 2.9802326e-08f, INFINITY, -INFINITY,      NAN,
        -0.0f};
    memcpy(hx, special, sizeof(special));
    const uint32_t snan = 0x7f800001u, qnan = 0xffc12345u;
    memcpy(&hx[20], &snan, 4);
    memcpy(&hx[21], &qnan, 4);
    for (int i = 0; i < NH; i++) hr[i] = rl_f32_to_fp16(hx[i]);
    int checked = 0;
    for (int ti = 0; ti < 2; ti++) {
        const rl__ktab *t = tabs[ti];
        if (!t) continue;
        checked++;
        t->quant_q8_0(x, qb, n);
        assert_memory_equal(qa[0], qb, rl_type_row_size(RL_TYPE_Q8_0, n));
        t->quant_q8_1(x, qb, n);
        assert_memory_equal(qa[1], qb, rl_type_row_size(RL_TYPE_Q8_1, n));
        t->quant_q8_K(x, qb, n);
        assert_memory_equal(qa[2], qb, rl_type_row_size(RL_TYPE_Q8_K, n));
        for (int len = NH - 5; len <= NH; len += 5) { /* with and without a tail */
            memset(ht, 0, sizeof(ht));
            t->to_f16(ht, hx, len);
            assert_memory_equal(hr, ht, sizeof(rl_fp16) * (size_t)len);
        }
    }
    if (!checked) skip();
    free(x);
}

/* AVX512-VNNI leaves: vec_dot, vec_dot4 and vec_dot8 equal the AVX2
 * vec_dot bit for bit for every token (the bound vs the reference is then
 * the AVX2 one, test_avx2_vs_ref); weights include q8_0 codes of -128 and
 * an odd number of 32-element blocks.  Then rl_matmul under the VNNI table
 * with 13 tokens (tiles 8 + 4 + 1) equals 13 one-token AVX2 matmuls. */
static void test_vnni_vs_avx2(void **state) {
    (void)state;
    const rl__ktab *avx = rl__kernels_avx2(), *vn = rl__kernels_vnni();
    if (!avx || !vn) skip();
    enum { T = 8, ROWS = 3 };
    uint8_t *xq = malloc((size_t)T * 8192);
    for (int ti = 0; ti < N_TYPES; ti++) {
        rl_type t = k_types[ti];
        rl_type at = rl__act_type(t);
        if (!vn->vec_dot[t] || vn->vec_dot[t] == avx->vec_dot[t]) continue;
        assert_true(at != RL_TYPE_F32);
        const int64_t n = at == RL_TYPE_Q8_K ? 1280 : 1056; /* 33 blocks of 32 */
        test_mat tm = make_mat(t, ROWS, n);
        if (t == RL_TYPE_Q8_0) { /* codes the quantizer never writes */
            rl_block_q8_0 *b = (rl_block_q8_0 *)(uintptr_t)tm.m.data;
            b[0].qs[3] = -128;
            b[7].qs[31] = -128;
            b[40].qs[0] = -128;
        }
        size_t xrow = rl_type_row_size(at, n);
        assert_true(xrow <= 8192);
        rl__quant_fn q = at == RL_TYPE_Q8_0   ? avx->quant_q8_0
                         : at == RL_TYPE_Q8_1 ? avx->quant_q8_1
                                              : avx->quant_q8_K;
        float *x = make_x(n * T, 1.1f);
        for (int k = 0; k < T; k++) q(x + k * n, xq + k * xrow, n);
        for (int r = 0; r < ROWS; r++) {
            const void *wr = (const uint8_t *)tm.m.data + r * tm.m.row_size;
            float sa[T], s1[T], s4[T], s8[T];
            for (int k = 0; k < T; k++) {
                avx->vec_dot[t](n, &sa[k], wr, xq + k * xrow);
                vn->vec_dot[t](n, &s1[k], wr, xq + k * xrow);
            }
            assert_non_null(vn->vec_dot4[t]);
            assert_non_null(vn->vec_dot8[t]);
            vn->vec_dot4[t](n, s4, 1, wr, xq, xrow);
            vn->vec_dot4[t](n, s4 + 4, 1, wr, xq + 4 * xrow, xrow);
            vn->vec_dot8[t](n, s8, 1, wr, xq, xrow);
            for (int k = 0; k < T; k++)
                if (memcmp(&sa[k], &s1[k], 4) || memcmp(&sa[k], &s4[k], 4) ||
                    memcmp(&sa[k], &s8[k], 4))
                    fail_msg("%s row %d tok %d: avx2 %.9g vnni %.9g dot4 %.9g dot8 %.9g",
                             rl_type_name(t), r, k, sa[k], s1[k], s4[k], s8[k]);
        }
        if (vn->vec_dot2r[t]) /* two rows per call == one row per vec_dot call */
            for (int r = 0; r + 1 < ROWS; r++)
                for (int k = 0; k < T; k++) {
                    const void *wr = (const uint8_t *)tm.m.data + r * tm.m.row_size;
                    float s2[2], sa2[2];
                    vn->vec_dot2r[t](n, s2, wr, tm.m.row_size, xq + k * xrow);
                    avx->vec_dot[t](n, &sa2[0], wr, xq + k * xrow);
                    avx->vec_dot[t](n, &sa2[1], (const uint8_t *)wr + tm.m.row_size, xq + k * xrow);
                    if (memcmp(s2, sa2, sizeof s2))
                        fail_msg("%s rows %d,%d tok %d: avx2 %.9g %.9g vnni 2-row %.9g %.9g",
                                 rl_type_name(t), r, r + 1, k, sa2[0], sa2[1], s2[0], s2[1]);
                }
        free(x);
        free_mat(&tm);
    }
    free(xq);

    rl_threadpool *tp = rl_threadpool_new(2);
    for (int ti = 0; ti < N_TYPES; ti++) {
        rl_type t = k_types[ti];
        const int64_t rows = 70, cols = 512, n_tok = 13;
        test_mat tm = make_mat(t, rows, cols);
        float *x = make_x(cols * n_tok, 0.9f);
        float *y = malloc(sizeof(float) * rows * n_tok), *y1 = malloc(sizeof(float) * rows);
        assert_int_equal(rl_kernels_init(RL_KERNELS_AVX512VNNI), RL_KERNELS_AVX512VNNI);
        run_matmul(&tm.m, x, y, n_tok, tp);
        assert_int_equal(rl_kernels_init(RL_KERNELS_AVX2), RL_KERNELS_AVX2);
        for (int64_t tk = 0; tk < n_tok; tk++) {
            run_matmul(&tm.m, x + tk * cols, y1, 1, NULL);
            if (memcmp(y1, y + tk * rows, sizeof(float) * rows))
                fail_msg("%s: 13-token vnni matmul differs from avx2 at token %ld", rl_type_name(t),
                         (long)tk);
        }
        free(x);
        free(y);
        free(y1);
        free_mat(&tm);
    }
    rl_threadpool_free(tp);
    rl_kernels_init(RL_KERNELS_AUTO);
}

/* rl_matmul_multi equals one rl_matmul per matrix bit for bit, for a
 * group sharing the activation type (q4_K, q6_K: one quantization, one
 * dispatch) and a mixed group (q4_K with q8_0: falls back per matrix),
 * under every table, 1 and 2 threads, 1 and 11 tokens. */
static void test_matmul_multi(void **state) {
    (void)state;
    rl_kernels_impl impls[KT_MAX_IMPLS];
    int ni = kt_impls(impls);
    rl_threadpool *tp = rl_threadpool_new(2);
    const int64_t cols = 512;
    const rl_type grp[2][3] = {{RL_TYPE_Q4_K, RL_TYPE_Q6_K, RL_TYPE_Q4_K},
                               {RL_TYPE_Q4_K, RL_TYPE_Q8_0, RL_TYPE_Q4_K}};
    const int64_t rows[3] = {96, 33, 200};
    for (int g = 0; g < 2; g++) {
        test_mat tm[3];
        const rl_mat *ws[3];
        float *ys[3], *y1[3];
        for (int i = 0; i < 3; i++) {
            tm[i] = make_mat(grp[g][i], rows[i], cols);
            ws[i] = &tm[i].m;
            ys[i] = malloc(sizeof(float) * rows[i] * 11);
            y1[i] = malloc(sizeof(float) * rows[i] * 11);
        }
        float *x = make_x(cols * 11, 0.8f);
        size_t ss = 0;
        for (int i = 0; i < 3; i++)
            if (rl_matmul_scratch_size(ws[i], 11) > ss) ss = rl_matmul_scratch_size(ws[i], 11);
        void *scratch = malloc(ss);
        for (int ii = 0; ii < ni; ii++) {
            rl_kernels_init(impls[ii]);
            for (int n_tok = 1; n_tok <= 11; n_tok += 10)
                for (int th = 0; th < 2; th++) {
                    rl_matmul_multi(ws, ys, 3, x, n_tok, scratch, th ? tp : NULL);
                    for (int i = 0; i < 3; i++) {
                        run_matmul(ws[i], x, y1[i], n_tok, NULL);
                        if (memcmp(ys[i], y1[i], sizeof(float) * rows[i] * n_tok))
                            fail_msg("%s group %d matrix %d n_tok %d: multi differs from single",
                                     rl_kernels_impl_name(), g, i, n_tok);
                    }
                }
        }
        free(scratch);
        free(x);
        for (int i = 0; i < 3; i++) {
            free(ys[i]);
            free(y1[i]);
            free_mat(&tm[i]);
        }
    }
    rl_threadpool_free(tp);
    rl_kernels_init(RL_KERNELS_AUTO);
}

/* Matmul accounting: a top-level call counts once with exactly the
 * multiply-adds it computes (a mixed group that falls back to one call per
 * matrix included), take resets, and nothing is counted while off. */
static void test_matmul_stats(void **state) {
    (void)state;
    const int64_t cols = 256, n_tok = 5;
    const rl_type ty[2] = {RL_TYPE_Q4_K, RL_TYPE_Q8_0};
    const int64_t rows[2] = {40, 24};
    test_mat tm[2];
    const rl_mat *ws[2];
    float *ys[2];
    size_t ss = 0;
    for (int i = 0; i < 2; i++) {
        tm[i] = make_mat(ty[i], rows[i], cols);
        ws[i] = &tm[i].m;
        ys[i] = malloc(sizeof(float) * rows[i] * n_tok);
        if (rl_matmul_scratch_size(ws[i], n_tok) > ss) ss = rl_matmul_scratch_size(ws[i], n_tok);
    }
    float *x = make_x(cols * n_tok, 0.8f);
    void *scratch = malloc(ss);
    rl_matmul_stats_take();
    rl_matmul_stats_enable(true);
    rl_matmul_multi(ws, ys, 2, x, n_tok, scratch, NULL);
    rl_matmul(ws[0], x, ys[0], 2, scratch, NULL);
    rl_matmul_stats s = rl_matmul_stats_take();
    assert_int_equal(s.calls, 2);
    assert_true(s.madds == (double)((rows[0] + rows[1]) * cols * n_tok + rows[0] * cols * 2));
    assert_true(s.seconds >= 0);
    s = rl_matmul_stats_take();
    assert_int_equal(s.calls, 0);
    assert_true(s.madds == 0);
    rl_matmul_stats_enable(false);
    rl_matmul(ws[1], x, ys[1], n_tok, scratch, NULL);
    s = rl_matmul_stats_take();
    assert_int_equal(s.calls, 0);
    free(scratch);
    free(x);
    for (int i = 0; i < 2; i++) {
        free(ys[i]);
        free_mat(&tm[i]);
    }
}

int main(void) {
    kt_seed(KT_SEED);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matmul_oracle),
        cmocka_unit_test(test_matmul_batch_invariance),
        cmocka_unit_test(test_avx2_vs_ref),
        cmocka_unit_test(test_elementwise),
        cmocka_unit_test(test_rope),
        cmocka_unit_test(test_get_row_kv_store),
        cmocka_unit_test(test_attention),
        cmocka_unit_test(test_vnni_vs_avx2),
        cmocka_unit_test(test_vnni_exp_vs_avx2),
        cmocka_unit_test(test_matmul_multi),
        cmocka_unit_test(test_matmul_stats),
        cmocka_unit_test(test_quant_tables),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
