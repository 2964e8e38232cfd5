/* RoPE extensions (rl_rope_qk_ext, rl_rope_yarn_corr_dims) against a plain
 * double-precision formula written from the published descriptions:
 *   - per-pair frequency factors (Llama 3 rope_freqs, LongRoPE): the angle
 *     of pair i is pos * base^(-2i/n) / ff[i];
 *   - linear scaling: the angle times freq_scale;
 *   - YaRN: per pair a mix of the interpolated (times freq_scale) and the
 *     original angle, weight of the original 1 - clamp((i - lo)/(hi - lo)),
 *     the ramp ends lo/hi where the pair turns beta_fast/beta_slow times
 *     over the original context; cos/sin times 1 + 0.1 ln(factor);
 *   - a magnitude factor on cos/sin (LongRoPE's attention factor), only on
 *     the rotated dims;
 * both pair layouts, partial rotation, q and k heads of different counts.
 * Also: a plain configuration is bit-identical to rl_rope_qk, and the ramp
 * ends of real files (Qwen3 YaRN, the tiny test file's) are the values the
 * formula gives.
 * Bound per rotated pair: 1e-5 (1 + |a| + |b|) + 4e-7 |theta| (|a| + |b|)
 * (a float angle of up to ~1e4 radians is good to a few ulps); untouched
 * dims exact to 1e-6.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <string.h>

#include "kernels/kernels.h"
#include "ktest.h"

enum { NH = 3, NKV = 2, HD = 64 };

typedef struct oracle_cfg {
    int n_rot;
    bool neox;
    double base, freq_scale, attn_factor;
    const float *ff;
    double yarn_factor; /* 0 = no YaRN (ext_factor 0) */
    int n_ctx_orig;
} oracle_cfg;

static double corr_dim(int n_rot, int n_ctx_orig, double turns, double base) {
    return n_rot * log(n_ctx_orig / (turns * 2 * M_PI)) / (2 * log(base));
}

/* Expected rotation of one head x[HD] at position pos; tol[d] the bound
 * for dim d (the float angle of pos * freq carries a relative error of a
 * few ulps: |th| * 4e-7 times the pair's magnitude, plus 1e-5 relative). */
static void oracle(const float *x, double *y, double *tol, int32_t pos, const oracle_cfg *c) {
    int half = c->n_rot / 2;
    double lo = 0, hi = 0, mscale = c->attn_factor;
    if (c->yarn_factor > 0) {
        lo = fmax(0, floor(corr_dim(c->n_rot, c->n_ctx_orig, 32, c->base)));
        hi = fmin(c->n_rot - 1, ceil(corr_dim(c->n_rot, c->n_ctx_orig, 1, c->base)));
        mscale *= 1 + 0.1 * log(c->yarn_factor);
    }
    for (int d = 0; d < HD; d++) {
        y[d] = x[d];
        tol[d] = 1e-6 * (1 + fabs(y[d]));
    }
    for (int i = 0; i < half; i++) {
        double th_e = pos * pow(c->base, -2.0 * i / c->n_rot) / (c->ff ? c->ff[i] : 1.0);
        double th = th_e * c->freq_scale;
        if (c->yarn_factor > 0) {
            double keep = 1 - fmin(1, fmax(0, (i - lo) / fmax(0.001, hi - lo)));
            th = th * (1 - keep) + th_e * keep;
        }
        int i0 = c->neox ? i : 2 * i, i1 = c->neox ? i + half : 2 * i + 1;
        double a = x[i0], b = x[i1];
        y[i0] = (a * cos(th) - b * sin(th)) * mscale;
        y[i1] = (a * sin(th) + b * cos(th)) * mscale;
        tol[i0] = tol[i1] =
            1e-5 * (1 + fabs(a) + fabs(b)) + 4e-7 * fabs(th) * (fabs(a) + fabs(b)) * mscale;
    }
}

/* Runs cfg on NH q heads and NKV k heads at pos and checks every element. */
static void check(const rl_rope_cfg *rc, const oracle_cfg *oc, int32_t pos) {
    float q[NH * HD], k[NKV * HD], q0[NH * HD], k0[NKV * HD];
    for (int i = 0; i < NH * HD; i++) q0[i] = rnd_gauss();
    for (int i = 0; i < NKV * HD; i++) k0[i] = rnd_gauss();
    memcpy(q, q0, sizeof q);
    memcpy(k, k0, sizeof k);
    rl_rope_qk_ext(q, NH, k, NKV, HD, pos, rc);
    double e[HD], tol[HD];
    for (int h = 0; h < NH + NKV; h++) {
        const float *src = h < NH ? q0 + h * HD : k0 + (h - NH) * HD;
        const float *got = h < NH ? q + h * HD : k + (h - NH) * HD;
        oracle(src, e, tol, pos, oc);
        for (int d = 0; d < HD; d++)
            if (fabs(got[d] - e[d]) > tol[d])
                fail_msg("pos %d head %d dim %d: got %.7g, expected %.7g", (int)pos, h, d, got[d],
                         e[d]);
    }
}

static void test_plain_bit_identical(void **state) {
    (void)state;
    kt_seed(0x51);
    float a[NH * HD], b[NH * HD], ka[NKV * HD], kb[NKV * HD];
    for (int mode = 0; mode < 2; mode++)
        for (int32_t pos = 0; pos < 3000; pos += 997) {
            for (int i = 0; i < NH * HD; i++) a[i] = b[i] = rnd_gauss();
            for (int i = 0; i < NKV * HD; i++) ka[i] = kb[i] = rnd_gauss();
            rl_rope_mode md = mode ? RL_ROPE_NEOX : RL_ROPE_NORMAL;
            rl_rope_qk(a, NH, ka, NKV, HD, 48, pos, 500000.0f, 0.25f, md);
            rl_rope_cfg c = rl_rope_cfg_plain(48, 500000.0f, 0.25f, md);
            rl_rope_qk_ext(b, NH, kb, NKV, HD, pos, &c);
            assert_memory_equal(a, b, sizeof a);
            assert_memory_equal(ka, kb, sizeof ka);
        }
}

static void test_freq_factors(void **state) {
    (void)state;
    kt_seed(0x52);
    float ff[HD / 2];
    for (int i = 0; i < HD / 2; i++)
        ff[i] = i < 8 ? 1.0f : 1.0f + 0.9f * (float)(i - 8); /* up to ~22 */
    for (int mode = 0; mode < 2; mode++) {
        rl_rope_cfg c =
            rl_rope_cfg_plain(HD, 500000.0f, 1.0f, mode ? RL_ROPE_NEOX : RL_ROPE_NORMAL);
        c.freq_factors = ff;
        oracle_cfg o = {HD, mode != 0, 500000.0, 1.0, 1.0, ff, 0, 0};
        for (int32_t pos = 0; pos < 5000; pos += 1237) check(&c, &o, pos);
        /* LongRoPE: factors and an attention factor, partial rotation */
        c.n_rot = o.n_rot = 32;
        c.attn_factor = 1.19f;
        o.attn_factor = 1.19f;
        c.freq_scale = 0.5f;
        o.freq_scale = 0.5;
        for (int32_t pos = 1; pos < 5000; pos += 1999) check(&c, &o, pos);
    }
}

static void test_yarn(void **state) {
    (void)state;
    kt_seed(0x53);
    const int n_ctx_orig = 64;
    const float base = 1e6f, factor = 4.0f;
    for (int mode = 0; mode < 2; mode++) {
        rl_rope_cfg c =
            rl_rope_cfg_plain(HD, base, 1.0f / factor, mode ? RL_ROPE_NEOX : RL_ROPE_NORMAL);
        c.ext_factor = 1.0f;
        rl_rope_yarn_corr_dims(HD, n_ctx_orig, base, 32.0f, 1.0f, c.corr_dims);
        oracle_cfg o = {HD, mode != 0, base, 1.0 / factor, 1.0, NULL, factor, n_ctx_orig};
        for (int32_t pos = 0; pos < 400; pos += 37) check(&c, &o, pos);
        /* with frequency factors and an attention factor on top */
        float ff[HD / 2];
        for (int i = 0; i < HD / 2; i++) ff[i] = 1.0f + 0.05f * (float)i;
        c.freq_factors = o.ff = ff;
        c.attn_factor = 0.9f;
        o.attn_factor = 0.9;
        for (int32_t pos = 3; pos < 400; pos += 91) check(&c, &o, pos);
    }
}

static void test_corr_dims(void **state) {
    (void)state;
    struct {
        int n_rot, n_ctx;
        float base;
    } cases[] = {{128, 32768, 1e6f},
                 {128, 4096, 1e6f},
                 {64, 64, 1e6f},
                 {64, 8192, 10000.0f},
                 {96, 4096, 10000.0f}};
    for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++) {
        float d[2];
        rl_rope_yarn_corr_dims(cases[t].n_rot, cases[t].n_ctx, cases[t].base, 32.0f, 1.0f, d);
        double lo = fmax(0, floor(corr_dim(cases[t].n_rot, cases[t].n_ctx, 32, cases[t].base)));
        double hi = fmin(cases[t].n_rot - 1,
                         ceil(corr_dim(cases[t].n_rot, cases[t].n_ctx, 1, cases[t].base)));
        assert_float_equal(d[0], lo, 0);
        assert_float_equal(d[1], hi, 0);
        assert_true(d[0] <= d[1]);
    }
    /* Qwen3 with YaRN over 32768 (the published config): pairs 0..23 keep
     * their frequency, 40.. are fully interpolated; the tiny test file
     * (head_dim 64, original context 64): the low end clamps to 0 */
    float d[2];
    rl_rope_yarn_corr_dims(128, 32768, 1e6f, 32.0f, 1.0f, d);
    assert_float_equal(d[0], 23.0f, 0);
    assert_float_equal(d[1], 40.0f, 0);
    rl_rope_yarn_corr_dims(64, 64, 1e6f, 32.0f, 1.0f, d);
    assert_float_equal(d[0], 0.0f, 0);
    assert_float_equal(d[1], 6.0f, 0);
}

/* n_rot 0 (Granite with rope.scaling.finetuned false) leaves q and k as they are. */
static void test_no_rotation(void **state) {
    (void)state;
    float q[NH * HD], q0[NH * HD];
    for (int i = 0; i < NH * HD; i++) q[i] = q0[i] = (float)i * 0.01f;
    rl_rope_cfg c = rl_rope_cfg_plain(0, 10000.0f, 1.0f, RL_ROPE_NORMAL);
    c.attn_factor = 2.0f;
    rl_rope_qk_ext(q, NH, NULL, 0, HD, 77, &c);
    assert_memory_equal(q, q0, sizeof q);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plain_bit_identical),
        cmocka_unit_test(test_freq_factors),
        cmocka_unit_test(test_yarn),
        cmocka_unit_test(test_corr_dims),
        cmocka_unit_test(test_no_rotation),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
