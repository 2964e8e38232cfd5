/* AVX2/FMA/F16C elementwise and attention leaves, and the filler that
 * overrides a reference-filled table with the AVX2 kernels.
 *
 * Bounds against the reference twins (tested in test_kernels.c): exp via
 * rl__exp_ps (about 2 ulp), float lane sums instead of sequential or double
 * sums; relative error of a few 1e-7 per element in practice.
 */
#include <math.h>

#include "kernels/x86/avx2-impl.h"

static void rl__rmsnorm_avx2(float *out, const float *x, const float *w, int64_t n, float eps) {
    __m256 a = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        a = _mm256_fmadd_ps(v, v, a);
    }
    double ss = rl__hsum_ps(a);
    for (; i < n; i++) ss += (double)x[i] * x[i];
    float r = (float)(1.0 / sqrt(ss / (double)n + (double)eps));
    __m256 rv = _mm256_set1_ps(r);
    for (i = 0; i + 8 <= n; i += 8) {
        __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + i), rv);
        if (w) v = _mm256_mul_ps(v, _mm256_loadu_ps(w + i));
        _mm256_storeu_ps(out + i, v);
    }
    for (; i < n; i++) out[i] = w ? x[i] * r * w[i] : x[i] * r;
}

/* Eight lanes at a time through rl__exp_ps (about 2 ulp), the tail with
 * expf, as softmax. */
static float rl__exp_sum_avx2(float *x, int64_t n, float m) {
    const __m256 mv = _mm256_set1_ps(m);
    __m256 sv = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 e = rl__exp_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), mv));
        _mm256_storeu_ps(x + i, e);
        sv = _mm256_add_ps(sv, e);
    }
    float s = rl__hsum_ps(sv);
    for (; i < n; i++) {
        x[i] = expf(x[i] - m);
        s += x[i];
    }
    return s;
}

/* The scalar twin's values (an add, then a multiply, per element); the max
 * is exact in any order. */
static float rl__add_scale_max_avx2(float *x, int64_t n, float b, float a) {
    const __m256 bv = _mm256_set1_ps(b), av = _mm256_set1_ps(a);
    __m256 mv = _mm256_set1_ps(-INFINITY);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_mul_ps(_mm256_add_ps(_mm256_loadu_ps(x + i), bv), av);
        _mm256_storeu_ps(x + i, v);
        mv = _mm256_max_ps(v, mv); /* (a NaN score is passed over, as in the twin) */
    }
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(mv), _mm256_extractf128_ps(mv, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_movehdup_ps(h));
    float m = _mm_cvtss_f32(h);
    for (; i < n; i++) {
        x[i] = (x[i] + b) * a;
        if (x[i] > m) m = x[i];
    }
    return m;
}

static void rl__softmax_avx2(float *x, int64_t n) {
    if (n <= 0) return;
    float m = x[0];
    for (int64_t i = 1; i < n; i++)
        if (x[i] > m) m = x[i];
    float is = (float)(1.0 / (double)rl__exp_sum_avx2(x, n, m));
    __m256 iv = _mm256_set1_ps(is);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), iv));
    for (; i < n; i++) x[i] *= is;
}

static void rl__silu_mul_avx2(float *out, const float *g, const float *u, int64_t n) {
    const __m256 one = _mm256_set1_ps(1.0f), zero = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 x = _mm256_loadu_ps(g + i);
        __m256 e = rl__exp_ps(_mm256_sub_ps(zero, x));
        __m256 s = _mm256_div_ps(x, _mm256_add_ps(one, e));
        _mm256_storeu_ps(out + i, _mm256_mul_ps(s, _mm256_loadu_ps(u + i)));
    }
    for (; i < n; i++) out[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

/* gelu_tanh(x) = 0.5x(1 + tanh(z)) = x / (1 + exp(-2z)), z = c(x + 0.044715x^3). */
static void rl__gelu_mul_avx2(float *out, const float *g, const float *u, int64_t n) {
    const float c = 0.7978845608028654f;
    const __m256 one = _mm256_set1_ps(1.0f), m2c = _mm256_set1_ps(-2.0f * c);
    const __m256 k = _mm256_set1_ps(0.044715f);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 x = _mm256_loadu_ps(g + i);
        __m256 x3 = _mm256_mul_ps(_mm256_mul_ps(x, x), x);
        __m256 z = _mm256_mul_ps(m2c, _mm256_fmadd_ps(k, x3, x));
        __m256 s = _mm256_div_ps(x, _mm256_add_ps(one, rl__exp_ps(z)));
        _mm256_storeu_ps(out + i, _mm256_mul_ps(s, _mm256_loadu_ps(u + i)));
    }
    for (; i < n; i++) {
        float x = g[i];
        out[i] = 0.5f * x * (1.0f + tanhf(c * (x + 0.044715f * x * x * x))) * u[i];
    }
}

static float rl__dot_f32_avx2(const float *a, const float *b, int64_t n) {
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
    }
    for (; i + 8 <= n; i += 8)
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    float s = rl__hsum_ps(_mm256_add_ps(s0, s1));
    for (; i < n; i++) s += a[i] * b[i];
    return s;
}

static float rl__dot_f16_avx2(const float *a, const rl_fp16 *b, int64_t n) {
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256 b0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(b + i)));
        __m256 b1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(b + i + 8)));
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), b0, s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), b1, s1);
    }
    for (; i + 8 <= n; i += 8)
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i),
                             _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(b + i))), s0);
    float s = rl__hsum_ps(_mm256_add_ps(s0, s1));
    for (; i < n; i++) s += a[i] * _cvtsh_ss(b[i]);
    return s;
}

static void rl__axpy_f32_avx2(float *y, const float *x, float a, int64_t n) {
    __m256 av = _mm256_set1_ps(a);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i,
                         _mm256_fmadd_ps(av, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    for (; i < n; i++) y[i] += a * x[i];
}

/* rl_add_scaled: the scalar loop's two roundings, 8 lanes at a time. */
static void rl__add_scaled_avx2(float *x, const float *y, float a, int64_t n) {
    const __m256 av = _mm256_set1_ps(a);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(x + i, _mm256_add_ps(_mm256_loadu_ps(x + i),
                                              _mm256_mul_ps(av, _mm256_loadu_ps(y + i))));
    for (; i < n; i++) x[i] += a * y[i];
}

static void rl__axpy_f16_avx2(float *y, const rl_fp16 *x, float a, int64_t n) {
    __m256 av = _mm256_set1_ps(a);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 xv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i)));
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(av, xv, _mm256_loadu_ps(y + i)));
    }
    for (; i < n; i++) y[i] += a * _cvtsh_ss(x[i]);
}

static void rl__scale_avx2(float *y, float a, int64_t n) {
    __m256 av = _mm256_set1_ps(a);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(av, _mm256_loadu_ps(y + i)));
    for (; i < n; i++) y[i] *= a;
}

void rl__avx2_fill_dot4(rl__ktab *t);
void rl__avx2_fill(rl__ktab *t) {
    rl__avx2_fill_quant(t);
    rl__avx2_fill_dot4(t);
    t->rmsnorm = rl__rmsnorm_avx2;
    t->softmax = rl__softmax_avx2;
    t->exp_sum = rl__exp_sum_avx2;
    t->silu_mul = rl__silu_mul_avx2;
    t->gelu_mul = rl__gelu_mul_avx2;
    t->dot_f32 = rl__dot_f32_avx2;
    t->dot_f16 = rl__dot_f16_avx2;
    t->axpy_f32 = rl__axpy_f32_avx2;
    t->add_scaled = rl__add_scaled_avx2;
    t->axpy_f16 = rl__axpy_f16_avx2;
    t->scale = rl__scale_avx2;
    t->add_scale_max = rl__add_scale_max_avx2;
    rl__avx2_fill_kvq(t);
    rl__avx2_fill_tile(t);
}
