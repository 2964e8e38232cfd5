/* Unit tests for src/tensor: fp16/bf16 conversions, the traits table, row
 * sizes, type names, and quantize -> dequantize error bounds per type.
 *
 * Bit-exactness of every dequantizer against an independent implementation
 * (the `gguf` Python package) is in tests/python/test_dequant.py; here we
 * check properties that need no oracle: exact IEEE rounding, and that each
 * reference quantizer meets the error bound stated next to it in
 * src/tensor/quants*.c.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "base/base.h"
#include "tensor/tensor.h"

#include <float.h>
#include <math.h>
#include <string.h>

static uint32_t f2u(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static float u2f(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* deterministic xorshift so failures reproduce */
static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static uint32_t rnd_u32(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (uint32_t)(g_rng >> 16);
}
static float rnd_unit(void) {
    return (float)(rnd_u32() >> 8) / 16777216.0f * 2.0f - 1.0f;
}
static float rnd_gauss(void) {
    float u1 = ((float)(rnd_u32() >> 8) + 0.5f) / 16777216.0f;
    float u2 = (float)(rnd_u32() >> 8) / 16777216.0f;
    return sqrtf(-2.0f * logf(u1)) * cosf(6.2831853f * u2);
}

/* ---------------- fp16 ---------------- */

/* independent value of a half: (-1)^s * m * 2^-24 (subnormal) or
 * (1024 + m) * 2^(e - 25) (normal), in double */
static double half_value(uint16_t h) {
    int e = (h >> 10) & 31, m = h & 1023;
    double v = e == 0 ? ldexp(m, -24) : ldexp(1024 + m, e - 25);
    return (h & 0x8000) ? -v : v;
}

static void test_fp16_all_patterns(void **state) {
    (void)state;
    for (uint32_t i = 0; i < 65536; i++) {
        rl_fp16 h = (rl_fp16)i;
        float f = rl_fp16_to_f32(h);
        int e = (h >> 10) & 31;
        if (e == 31) {
            if (h & 1023)
                assert_true(isnan(f));
            else
                assert_true(isinf(f) && (signbit(f) != 0) == ((h & 0x8000) != 0));
        } else {
            assert_true((double)f == half_value(h));
            assert_int_equal(signbit(f) != 0, (h & 0x8000) != 0); /* -0 stays -0 */
        }
        /* every pattern, NaNs included, survives f16 -> f32 -> f16 */
        assert_int_equal(rl_f32_to_fp16(f), h);
    }
}

/* f32 -> f16 is correct rounding: no other finite half is nearer, and on a
 * tie the chosen one has an even mantissa.  Checked on random bit patterns
 * spanning the half range, exact midpoints, and the edges. */
static void check_fp16_rounding(float x) {
    rl_fp16 h = rl_f32_to_fp16(x);
    if (isnan(x)) {
        assert_true((h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0);
        return;
    }
    const double ax = fabs((double)x);
    assert_int_equal((h & 0x8000) != 0, signbit(x) != 0);
    if (ax >= 65520.0) { /* halfway to 2^16 or beyond: overflows to Inf */
        assert_int_equal(h & 0x7fff, 0x7c00);
        return;
    }
    uint16_t mag = h & 0x7fff;
    assert_true(mag < 0x7c00);
    double err = fabs(half_value(mag) - ax);
    if (mag > 0) assert_true(err <= fabs(half_value((uint16_t)(mag - 1)) - ax));
    if (mag < 0x7bff) assert_true(err <= fabs(half_value((uint16_t)(mag + 1)) - ax));
    double lo = mag > 0 ? fabs(half_value((uint16_t)(mag - 1)) - ax) : INFINITY;
    double hi = mag < 0x7bff ? fabs(half_value((uint16_t)(mag + 1)) - ax) : INFINITY;
    if (err == lo || err == hi) assert_int_equal(mag & 1, 0); /* tie -> even */
}

static void test_fp16_rounding(void **state) {
    (void)state;
    for (int i = 0; i < 200000; i++) {
        /* exponents from below the smallest subnormal to above the largest half */
        uint32_t u = (rnd_u32() % (0x47900000u - 0x32000000u)) + 0x32000000u;
        check_fp16_rounding(u2f(u | (rnd_u32() & 0x80000000u)));
    }
    for (uint32_t h = 0; h < 0x7bff; h++) { /* exact midpoints between halves */
        float mid = (float)((half_value((uint16_t)h) + half_value((uint16_t)(h + 1))) / 2);
        check_fp16_rounding(mid);
        check_fp16_rounding(-mid);
        check_fp16_rounding(nextafterf(mid, 0.0f));
        check_fp16_rounding(nextafterf(mid, INFINITY));
    }
    const float edge[] = {0.0f,
                          -0.0f,
                          65504.0f,
                          65519.996f,
                          65520.0f,
                          1e9f,
                          INFINITY,
                          -INFINITY,
                          NAN,
                          u2f(0x7f800001u),
                          u2f(0x33000000u),
                          u2f(0x33000001u),
                          u2f(0x387fffffu),
                          u2f(0x38800000u),
                          FLT_MIN,
                          FLT_TRUE_MIN};
    for (size_t i = 0; i < sizeof edge / sizeof edge[0]; i++) check_fp16_rounding(edge[i]);
    assert_int_equal(rl_f32_to_fp16(65519.996f), 0x7bff);
    assert_int_equal(rl_f32_to_fp16(65520.0f), 0x7c00);
    assert_int_equal(rl_f32_to_fp16(u2f(0x33000000u)), 0x0000); /* 2^-25: tie to 0 */
    assert_int_equal(rl_f32_to_fp16(u2f(0x33000001u)), 0x0001);
    assert_int_equal(rl_f32_to_fp16(1.0f), 0x3c00);
    assert_int_equal(rl_f32_to_fp16(-2.0f), 0xc000);
}

/* ---------------- bf16 ---------------- */

static void test_bf16(void **state) {
    (void)state;
    for (uint32_t i = 0; i < 65536; i++) {
        float f = rl_bf16_to_f32((rl_bf16)i);
        assert_int_equal(f2u(f), i << 16);
        rl_bf16 back = rl_f32_to_bf16(f);
        if (isnan(f))
            assert_true(isnan(rl_bf16_to_f32(back)) && (back & 0x40));
        else
            assert_int_equal(back, i);
    }
    for (int i = 0; i < 200000; i++) {
        uint32_t u = rnd_u32();
        float x = u2f(u);
        rl_bf16 b = rl_f32_to_bf16(x);
        if (isnan(x)) {
            assert_true(isnan(rl_bf16_to_f32(b)));
            continue;
        }
        /* RNE on the 16 dropped bits, computed independently */
        uint32_t lo = u & 0xffff, up = u >> 16;
        if (lo > 0x8000 || (lo == 0x8000 && (up & 1))) up++;
        assert_int_equal(b, (rl_bf16)up);
    }
    assert_int_equal(rl_f32_to_bf16(1.0f), 0x3f80);
    assert_int_equal(rl_f32_to_bf16(u2f(0x3f808000u)), 0x3f80); /* tie, even stays */
    assert_int_equal(rl_f32_to_bf16(u2f(0x3f818000u)), 0x3f82); /* tie, odd rounds up */
    assert_int_equal(rl_f32_to_bf16(u2f(0x7f7fffffu)), 0x7f80); /* FLT_MAX -> Inf */
}

/* ---------------- traits, names, row sizes ---------------- */

static void test_traits_table(void **state) {
    (void)state;
    const struct {
        rl_type t;
        const char *name;
        int blck;
        size_t size;
        bool quant, has_from;
    } want[] = {
        {RL_TYPE_F32, "f32", 1, 4, false, true},
        {RL_TYPE_F16, "f16", 1, 2, false, true},
        {RL_TYPE_BF16, "bf16", 1, 2, false, true},
        {RL_TYPE_F64, "f64", 1, 8, false, false},
        {RL_TYPE_I8, "i8", 1, 1, false, false},
        {RL_TYPE_I16, "i16", 1, 2, false, false},
        {RL_TYPE_I32, "i32", 1, 4, false, false},
        {RL_TYPE_I64, "i64", 1, 8, false, false},
        {RL_TYPE_Q4_0, "q4_0", 32, 18, true, true},
        {RL_TYPE_Q4_1, "q4_1", 32, 20, true, true},
        {RL_TYPE_Q5_0, "q5_0", 32, 22, true, true},
        {RL_TYPE_Q5_1, "q5_1", 32, 24, true, true},
        {RL_TYPE_Q8_0, "q8_0", 32, 34, true, true},
        {RL_TYPE_Q8_1, "q8_1", 32, 36, true, true},
        {RL_TYPE_Q2_K, "q2_K", 256, 84, true, true},
        {RL_TYPE_Q3_K, "q3_K", 256, 110, true, true},
        {RL_TYPE_Q4_K, "q4_K", 256, 144, true, true},
        {RL_TYPE_Q5_K, "q5_K", 256, 176, true, true},
        {RL_TYPE_Q6_K, "q6_K", 256, 210, true, true},
        {RL_TYPE_Q8_K, "q8_K", 256, 292, true, true},
        {RL_TYPE_IQ4_NL, "iq4_nl", 32, 18, true, true},
        {RL_TYPE_IQ4_XS, "iq4_xs", 256, 136, true, true},
        {RL_TYPE_MXFP4, "mxfp4", 32, 17, true, true},
        {RL_TYPE_Q8_64, "q8_64", 64, 66, true, true},
    };
    int n_known = 0;
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const rl_type_traits *tr = rl_type_get(want[i].t);
        assert_non_null(tr);
        assert_string_equal(tr->name, want[i].name);
        assert_string_equal(rl_type_name(want[i].t), want[i].name);
        assert_int_equal(tr->blck_size, want[i].blck);
        assert_int_equal(tr->type_size, want[i].size);
        assert_int_equal(tr->is_quantized, want[i].quant);
        assert_int_equal(tr->from_float != NULL, want[i].has_from);
        if (want[i].quant || want[i].t == RL_TYPE_F32 || want[i].t == RL_TYPE_F16 ||
            want[i].t == RL_TYPE_BF16)
            assert_non_null(tr->to_float);
        rl_type parsed;
        assert_true(rl_type_from_name(want[i].name, &parsed));
        assert_int_equal(parsed, want[i].t);
    }
    for (uint32_t t = 0; t < RL_TYPE_COUNT; t++) n_known += rl_type_get(t) != NULL;
    assert_int_equal(n_known, (int)(sizeof want / sizeof want[0]));
}

static void test_unknown_types(void **state) {
    (void)state;
    const uint32_t bad[] = {4, 5, 16, 19, 21, 22, 29, 31, 38, RL_TYPE_COUNT, 1000, UINT32_MAX};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_null(rl_type_get(bad[i]));
        assert_string_equal(rl_type_name(bad[i]), "?");
        assert_int_equal(rl_type_row_size((rl_type)bad[i], 256), 0);
    }
    rl_type t = RL_TYPE_F32;
    assert_true(rl_type_from_name("Q4_k", &t));
    assert_int_equal(t, RL_TYPE_Q4_K);
    assert_true(rl_type_from_name("BF16", &t));
    assert_int_equal(t, RL_TYPE_BF16);
    t = RL_TYPE_F16;
    assert_false(rl_type_from_name("q4", &t));
    assert_false(rl_type_from_name("q4_0x", &t));
    assert_false(rl_type_from_name("", &t));
    assert_false(rl_type_from_name("bogus", &t));
    assert_false(rl_type_from_name(NULL, &t));
    assert_int_equal(t, RL_TYPE_F16); /* untouched on failure */
}

static void test_row_size(void **state) {
    (void)state;
    assert_int_equal(rl_type_row_size(RL_TYPE_F32, 10), 40);
    assert_int_equal(rl_type_row_size(RL_TYPE_F16, 7), 14);
    assert_int_equal(rl_type_row_size(RL_TYPE_Q4_0, 64), 36);
    assert_int_equal(rl_type_row_size(RL_TYPE_Q4_1, 576), 18 * 20);
    assert_int_equal(rl_type_row_size(RL_TYPE_Q8_0, 32), 34);
    assert_int_equal(rl_type_row_size(RL_TYPE_Q4_K, 2048), 8 * 144);
    assert_int_equal(rl_type_row_size(RL_TYPE_Q6_K, 256), 210);
    assert_int_equal(rl_type_row_size(RL_TYPE_IQ4_XS, 2816), 11 * 136);
    assert_int_equal(rl_type_row_size(RL_TYPE_MXFP4, 2880), 90 * 17);
    assert_int_equal(rl_type_row_size(RL_TYPE_Q4_0, 33), 0); /* not a block multiple */
    assert_int_equal(rl_type_row_size(RL_TYPE_Q4_K, 128), 0);
    assert_int_equal(rl_type_row_size(RL_TYPE_Q4_0, -32), 0); /* negative */
    assert_int_equal(rl_type_row_size(RL_TYPE_Q4_0, 0), 0);
    assert_int_equal(rl_type_row_size(RL_TYPE_I64, (int64_t)1 << 40), (size_t)1 << 43);
    assert_int_equal(rl_type_row_size(RL_TYPE_Q8_K, (int64_t)1 << 40), ((size_t)1 << 32) * 292);
}

/* ---------------- element order of hand-built blocks ---------------- */

static void test_block_layouts(void **state) {
    (void)state;
    float y[256];
    rl_block_q4_0 b40 = {.d = rl_f32_to_fp16(1.0f)};
    for (int j = 0; j < 16; j++) b40.qs[j] = (uint8_t)(j | (15 - j) << 4);
    rl_type_get(RL_TYPE_Q4_0)->to_float(&b40, y, 32);
    for (int j = 0; j < 16; j++) {
        assert_true(y[j] == (float)(j - 8));      /* low nibbles: elements 0..15 */
        assert_true(y[j + 16] == (float)(7 - j)); /* high nibbles: 16..31 */
    }
    rl_block_q5_0 b50 = {.d = rl_f32_to_fp16(0.5f), .qh = {0x01, 0x00, 0x01, 0x80}};
    rl_type_get(RL_TYPE_Q5_0)->to_float(&b50, y, 32);
    for (int j = 0; j < 32; j++) {
        int hi = (j == 0 || j == 16 || j == 31) ? 16 : 0;
        assert_true(y[j] == 0.5f * (float)(hi - 16));
    }
    /* q6_K: element e = 128n + 32k + l */
    rl_block_q6_K b6;
    memset(&b6, 0, sizeof b6);
    b6.d = rl_f32_to_fp16(1.0f);
    for (int k = 0; k < 16; k++) b6.scales[k] = 1;
    b6.ql[64 + 32 + 5] = 0x30; /* n=1, k=3 (high nibble of the second 32), l=5 */
    b6.qh[32 + 5] = 0x80;      /* its high bits: 2 << 4 */
    rl_type_get(RL_TYPE_Q6_K)->to_float(&b6, y, 256);
    for (int e = 0; e < 256; e++) /* u = 0 everywhere else: q = -32 */
        if (e != 128 + 96 + 5) assert_true(y[e] == -32.0f);
    assert_true(y[128 + 96 + 5] == 3.0f);

    /* iq4_xs: sub-block ib has scale (scales_l nibble ib%2 of byte ib/2 |
     * scales_h bits 2ib..2ib+1 << 4) - 32 and codes qs[16ib..16ib+15] */
    rl_block_iq4_xs bx;
    memset(&bx, 0, sizeof bx);
    bx.d = rl_f32_to_fp16(0.5f);
    const int ls[8] = {0, 63, 32, 33, 31, 1, 48, 17}; /* biased 6-bit scales */
    for (int ib = 0; ib < 8; ib++) {
        bx.scales_l[ib / 2] |= (uint8_t)((ls[ib] & 15) << (4 * (ib % 2)));
        bx.scales_h |= (uint16_t)((ls[ib] >> 4) << (2 * ib));
        for (int j = 0; j < 16; j++)
            bx.qs[16 * ib + j] = (uint8_t)((j + ib) % 16 | ((15 - j) << 4));
    }
    rl_type_get(RL_TYPE_IQ4_XS)->to_float(&bx, y, 256);
    for (int ib = 0; ib < 8; ib++)
        for (int j = 0; j < 16; j++) {
            const float dl = 0.5f * (float)(ls[ib] - 32);
            assert_true(y[32 * ib + j] == dl * (float)rl_iq4nl_values[(j + ib) % 16]);
            assert_true(y[32 * ib + 16 + j] == dl * (float)rl_iq4nl_values[15 - j]);
        }
    /* mxfp4: x = table[q] * 2^(e-128), the table twice the e2m1 values */
    static const float e2m1[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
    for (int k = 0; k < 8; k++) {
        assert_true((float)rl_mxfp4_values[k] == 2.0f * e2m1[k]);
        assert_true((float)rl_mxfp4_values[k + 8] == -2.0f * e2m1[k]);
    }
    assert_true(rl_e8m0_half_to_f32(0) == ldexpf(1.0f, -128)); /* subnormal */
    assert_true(rl_e8m0_half_to_f32(1) == ldexpf(1.0f, -127));
    assert_true(rl_e8m0_half_to_f32(2) == ldexpf(1.0f, -126));
    assert_true(rl_e8m0_half_to_f32(128) == 1.0f);
    assert_true(rl_e8m0_half_to_f32(254) == ldexpf(1.0f, 126));
    assert_true(rl_e8m0_half_to_f32(255) == ldexpf(1.0f, 127));
    rl_block_mxfp4 bm[2] = {{.e = 129}, {.e = 0}};
    for (int j = 0; j < 16; j++) bm[0].qs[j] = bm[1].qs[j] = (uint8_t)(j | (15 - j) << 4);
    rl_type_get(RL_TYPE_MXFP4)->to_float(bm, y, 64);
    for (int j = 0; j < 16; j++) {
        assert_true(y[j] == 2.0f * (float)rl_mxfp4_values[j]);
        assert_true(y[j + 16] == 2.0f * (float)rl_mxfp4_values[15 - j]);
        assert_true(y[32 + j] == ldexpf((float)rl_mxfp4_values[j], -128));
    }
}

/* ---------------- quantize -> dequantize bounds ---------------- */

/* data shapes that stress different paths: symmetric, skewed, all
 * positive, all negative, constant, zero, with a single outlier */
static void fill(float *x, int n, int kind) {
    for (int i = 0; i < n; i++) {
        switch (kind) {
        case 0:
            x[i] = rnd_unit();
            break;
        case 1:
            x[i] = rnd_gauss() * 0.02f;
            break;
        case 2:
            x[i] = 3.0f + rnd_unit();
            break;
        case 3:
            x[i] = -7.0f + 0.001f * rnd_unit();
            break;
        case 4:
            x[i] = 0.25f;
            break;
        case 5:
            x[i] = 0.0f;
            break;
        case 6:
            x[i] = (i % 97 == 3) ? 40.0f : rnd_gauss();
            break;
        default:
            x[i] = rnd_gauss() * 1e-4f - 5e-5f;
            break;
        }
    }
}
#define N_KINDS 8
#define N_TEST  4096

static float amax_of(const float *x, int n) {
    float a = 0.0f;
    for (int i = 0; i < n; i++) a = fmaxf(a, fabsf(x[i]));
    return a;
}

/* Per element bound for block/super-block b (index) of a type; `blk` points
 * at the packed block.  The formulas are the ones stated in the quantizer
 * comments; `slop` covers float rounding of the dequantize arithmetic. */
static float bound_for(rl_type t, const void *blk, const float *xb, int e) {
    const float slop = 4e-6f * amax_of(xb, rl_type_get(t)->blck_size) + 1e-30f;
    switch (t) {
    case RL_TYPE_Q8_0:
        return 0.5f * rl_fp16_to_f32(((const rl_block_q8_0 *)blk)->d) * 1.0001f + slop;
    case RL_TYPE_Q8_1:
        return 0.5f * rl_fp16_to_f32(((const rl_block_q8_1 *)blk)->d) * 1.0001f + slop;
    case RL_TYPE_Q8_K:
        return 0.5f * ((const rl_block_q8_K *)blk)->d * 1.0001f + slop;
    case RL_TYPE_Q4_0:
        return fabsf(rl_fp16_to_f32(((const rl_block_q4_0 *)blk)->d)) * 1.0001f + slop;
    case RL_TYPE_Q5_0:
        return fabsf(rl_fp16_to_f32(((const rl_block_q5_0 *)blk)->d)) * 1.0001f + slop;
    case RL_TYPE_Q4_1:
        return 0.5f * rl_fp16_to_f32(((const rl_block_q4_1 *)blk)->d) * 1.0001f + slop;
    case RL_TYPE_Q5_1:
        return 0.5f * rl_fp16_to_f32(((const rl_block_q5_1 *)blk)->d) * 1.0001f + slop;
    case RL_TYPE_Q2_K:
    case RL_TYPE_Q4_K:
    case RL_TYPE_Q5_K: {
        /* ((mx_j - mn_j) + dmin)/(2 qmax) + d/2 for the element's sub-block */
        int sub_len = t == RL_TYPE_Q2_K ? 16 : 32, qmax = t == RL_TYPE_Q2_K   ? 3
                                                          : t == RL_TYPE_Q4_K ? 15
                                                                              : 31;
        rl_fp16 dh, dminh;
        if (t == RL_TYPE_Q2_K) {
            dh = ((const rl_block_q2_K *)blk)->d;
            dminh = ((const rl_block_q2_K *)blk)->dmin;
        } else if (t == RL_TYPE_Q4_K) {
            dh = ((const rl_block_q4_K *)blk)->d;
            dminh = ((const rl_block_q4_K *)blk)->dmin;
        } else {
            dh = ((const rl_block_q5_K *)blk)->d;
            dminh = ((const rl_block_q5_K *)blk)->dmin;
        }
        const float *xs = xb + (e / sub_len) * sub_len;
        float mn = 0.0f, mx = xs[0];
        for (int l = 0; l < sub_len; l++) {
            mn = fminf(mn, xs[l]);
            mx = fmaxf(mx, xs[l]);
        }
        return (((mx - mn) + rl_fp16_to_f32(dminh)) / (2.0f * qmax) + 0.5f * rl_fp16_to_f32(dh)) *
                   1.0001f +
               slop;
    }
    case RL_TYPE_Q3_K:
    case RL_TYPE_Q6_K: {
        /* (amax_j/qmax + d)/2 for the element's 16-element sub-block */
        int qmax = t == RL_TYPE_Q3_K ? 3 : 31;
        float d = rl_fp16_to_f32(t == RL_TYPE_Q3_K ? ((const rl_block_q3_K *)blk)->d
                                                   : ((const rl_block_q6_K *)blk)->d);
        return (amax_of(xb + (e / 16) * 16, 16) / qmax + d) * 0.5f * 1.0001f + slop;
    }
    case RL_TYPE_IQ4_NL: {
        /* the chosen candidate's least-squares d does no worse on the block
         * than 1/id, whose nearest codes are within 12/|id| <= 12*amax/106
         * of each element: |err| <= sqrt(32) * 12 * amax / 106 */
        return 0.641f * amax_of(xb, 32) * 1.001f + slop;
    }
    case RL_TYPE_IQ4_XS: {
        /* codes are the nearest entries for the stored dl: within half the
         * largest gap (12 |dl|) inside the codebook, |x| - 113|dl| beyond */
        const rl_block_iq4_xs *b = blk;
        const int ib = e / 32;
        const int u =
            ((b->scales_l[ib / 2] >> (4 * (ib % 2))) & 15) | ((b->scales_h >> (2 * ib)) & 3) << 4;
        const float dl = fabsf(rl_fp16_to_f32(b->d) * (float)(u - 32));
        return fmaxf(12.0f * dl, fabsf(xb[e]) - 113.0f * dl) * 1.0001f + slop;
    }
    case RL_TYPE_MXFP4: {
        /* nearest codes for the stored power of two d: half the largest gap
         * (8 -> 12) is 2d; beyond 12d, |x| - 12d */
        const float d = rl_e8m0_half_to_f32(((const rl_block_mxfp4 *)blk)->e);
        return fmaxf(2.0f * d, fabsf(xb[e]) - 12.0f * d) * 1.0001f + slop;
    }
    case RL_TYPE_F16:
        return fabsf(xb[e]) * 0x1p-11f + 0x1p-25f; /* half an ulp */
    case RL_TYPE_BF16:
        return fabsf(xb[e]) * 0x1p-8f;
    case RL_TYPE_F32:
        return 0.0f;
    default:
        fail_msg("no bound for type %d", (int)t);
        return 0.0f;
    }
}

static void check_roundtrip(rl_type t, float max_rel_rms) {
    const rl_type_traits *tr = rl_type_get(t);
    assert_non_null(tr);
    assert_non_null(tr->from_float);
    assert_non_null(tr->to_float);
    static float x[N_TEST], y[N_TEST];
    static unsigned char q[N_TEST * 8];
    const size_t rs = rl_type_row_size(t, N_TEST);
    assert_true(rs > 0 && rs <= sizeof q);
    for (int kind = 0; kind < N_KINDS; kind++) {
        fill(x, N_TEST, kind);
        memset(q, 0xa5, sizeof q);
        tr->from_float(x, q, N_TEST);
        tr->to_float(q, y, N_TEST);
        double se = 0.0, sx = 0.0;
        for (int i = 0; i < N_TEST; i++) {
            const int b = i / tr->blck_size;
            const void *blk = q + (size_t)b * tr->type_size;
            const float *xb = x + (size_t)b * tr->blck_size;
            const float err = fabsf(x[i] - y[i]);
            const float bound = bound_for(t, blk, xb, i % tr->blck_size);
            if (!(err <= bound))
                fail_msg("%s kind %d elem %d: x=%g y=%g err=%g > bound %g", tr->name, kind, i,
                         (double)x[i], (double)y[i], (double)err, (double)bound);
            se += (double)err * err;
            sx += (double)x[i] * x[i];
        }
        /* the bound above is per element; also make sure the quantizer is
         * useful on plain random data (relative rms error), kinds 0/1 */
        if (kind <= 1 && !(sqrt(se / (sx + 1e-30)) <= max_rel_rms))
            fail_msg("%s kind %d: rel rms %g > %g", tr->name, kind, sqrt(se / sx),
                     (double)max_rel_rms);
        if (kind == 5) /* zeros quantize to exact zeros */
            for (int i = 0; i < N_TEST; i++) assert_true(y[i] == 0.0f);
    }
}

static void test_q_f32(void **s) {
    (void)s;
    check_roundtrip(RL_TYPE_F32, 0.0f);
}
static void test_q_f16(void **s) {
    (void)s;
    check_roundtrip(RL_TYPE_F16, 1e-3f);
}
static void test_q_bf16(void **s) {
    (void)s;
    check_roundtrip(RL_TYPE_BF16, 5e-3f);
}
static void test_q8_0(void **s) {
    (void)s;
    check_roundtrip(RL_TYPE_Q8_0, 0.01f);
}
static void test_q8_1(void **s) {
    (void)s;
    check_roundtrip(RL_TYPE_Q8_1, 0.01f);
    /* s = d * sum(q), rounded once to fp16 */
    float x[64];
    rl_block_q8_1 b[2];
    fill(x, 64, 0);
    rl_type_get(RL_TYPE_Q8_1)->from_float(x, b, 64);
    for (int i = 0; i < 2; i++) {
        int sum = 0;
        for (int j = 0; j < 32; j++) sum += b[i].qs[j];
        assert_int_equal(b[i].s, rl_f32_to_fp16(rl_fp16_to_f32(b[i].d) * (float)sum));
    }
}
static void test_q8_K(void **s) {
    (void)s;
    check_roundtrip(RL_TYPE_Q8_K, 0.01f);
    float x[256];
    rl_block_q8_K b;
    fill(x, 256, 6);
    rl_type_get(RL_TYPE_Q8_K)->from_float(x, &b, 256);
    for (int k = 0; k < 16; k++) {
        int sum = 0;
        for (int l = 0; l < 16; l++) sum += b.qs[16 * k + l];
        assert_int_equal(b.bsums[k], sum);
    }
}
static void test_q4_0(void **s) {
    (void)s;
    check_roundtrip(RL_TYPE_Q4_0, 0.15f);
}
static void test_q4_1(void **s) {
    (void)s;
    check_roundtrip(RL_TYPE_Q4_1, 0.12f);
}
static void test_q5_0(void **s) {
    (void)s;
    check_roundtrip(RL_TYPE_Q5_0, 0.07f);
}
static void test_q5_1(void **s) {
    (void)s;
    check_roundtrip(RL_TYPE_Q5_1, 0.06f);
}
static void test_q2_K(void **s) {
    (void)s;
    check_roundtrip(RL_TYPE_Q2_K, 0.45f);
}
static void test_q3_K(void **s) {
    (void)s;
    check_roundtrip(RL_TYPE_Q3_K, 0.3f);
}
static void test_q4_K(void **s) {
    (void)s;
    check_roundtrip(RL_TYPE_Q4_K, 0.15f);
}
static void test_q5_K(void **s) {
    (void)s;
    check_roundtrip(RL_TYPE_Q5_K, 0.08f);
}
static void test_q6_K(void **s) {
    (void)s;
    check_roundtrip(RL_TYPE_Q6_K, 0.04f);
}
static void test_iq4_nl(void **s) {
    (void)s;
    check_roundtrip(RL_TYPE_IQ4_NL, 0.08f);
}
static void test_iq4_xs(void **s) {
    (void)s;
    check_roundtrip(RL_TYPE_IQ4_XS, 0.08f);
}
static void test_mxfp4(void **s) {
    (void)s;
    check_roundtrip(RL_TYPE_MXFP4, 0.12f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fp16_all_patterns),
        cmocka_unit_test(test_fp16_rounding),
        cmocka_unit_test(test_bf16),
        cmocka_unit_test(test_traits_table),
        cmocka_unit_test(test_unknown_types),
        cmocka_unit_test(test_row_size),
        cmocka_unit_test(test_block_layouts),
        cmocka_unit_test(test_q_f32),
        cmocka_unit_test(test_q_f16),
        cmocka_unit_test(test_q_bf16),
        cmocka_unit_test(test_q8_0),
        cmocka_unit_test(test_q8_1),
        cmocka_unit_test(test_q8_K),
        cmocka_unit_test(test_q4_0),
        cmocka_unit_test(test_q4_1),
        cmocka_unit_test(test_q5_0),
        cmocka_unit_test(test_q5_1),
        cmocka_unit_test(test_q2_K),
        cmocka_unit_test(test_q3_K),
        cmocka_unit_test(test_q4_K),
        cmocka_unit_test(test_q5_K),
        cmocka_unit_test(test_q6_K),
        cmocka_unit_test(test_iq4_nl),
        cmocka_unit_test(test_iq4_xs),
        cmocka_unit_test(test_mxfp4),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
