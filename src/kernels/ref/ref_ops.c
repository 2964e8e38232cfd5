/* Scalar reference kernels for the elementwise / normalization ops and the
 * attention leaves (q·k dot products, weighted V accumulation), plus the
 * function that fills the reference table.
 */
#include <math.h>

#include "kernels/kernels-impl.h"

void rl__ref_fill_quant(rl__ktab *t);

static void rl__rmsnorm_ref(float *out, const float *x, const float *w, int64_t n, float eps) {
    double ss = 0.0;
    for (int64_t i = 0; i < n; i++) ss += (double)x[i] * x[i];
    float r = (float)(1.0 / sqrt(ss / (double)n + (double)eps));
    for (int64_t i = 0; i < n; i++) out[i] = w ? x[i] * r * w[i] : x[i] * r;
}

static float rl__exp_sum_ref(float *x, int64_t n, float m) {
    float s = 0.0f;
    for (int64_t i = 0; i < n; i++) {
        x[i] = expf(x[i] - m);
        s += x[i];
    }
    return s;
}

static void rl__softmax_ref(float *x, int64_t n) {
    if (n <= 0) return;
    float m = x[0];
    for (int64_t i = 1; i < n; i++)
        if (x[i] > m) m = x[i];
    double s = 0.0;
    for (int64_t i = 0; i < n; i++) {
        x[i] = expf(x[i] - m);
        s += x[i];
    }
    float is = (float)(1.0 / s);
    for (int64_t i = 0; i < n; i++) x[i] *= is;
}

static void rl__silu_mul_ref(float *out, const float *g, const float *u, int64_t n) {
    for (int64_t i = 0; i < n; i++) out[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

static void rl__gelu_mul_ref(float *out, const float *g, const float *u, int64_t n) {
    const float c = 0.7978845608028654f; /* sqrt(2/pi) */
    for (int64_t i = 0; i < n; i++) {
        float x = g[i];
        out[i] = 0.5f * x * (1.0f + tanhf(c * (x + 0.044715f * x * x * x))) * u[i];
    }
}

static void rl__add_scaled_ref(float *x, const float *y, float a, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] += a * y[i];
}

static float rl__dot_f32_ref(const float *a, const float *b, int64_t n) {
    float s = 0.0f;
    for (int64_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

static float rl__dot_f16_ref(const float *a, const rl_fp16 *b, int64_t n) {
    float s = 0.0f;
    for (int64_t i = 0; i < n; i++) s += a[i] * rl_fp16_to_f32(b[i]);
    return s;
}

static void rl__axpy_f32_ref(float *y, const float *x, float a, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] += a * x[i];
}

static void rl__axpy_f16_ref(float *y, const rl_fp16 *x, float a, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] += a * rl_fp16_to_f32(x[i]);
}

static float rl__add_scale_max_ref(float *x, int64_t n, float b, float a) {
    float m = -INFINITY;
    for (int64_t i = 0; i < n; i++) {
        x[i] = (x[i] + b) * a;
        if (x[i] > m) m = x[i];
    }
    return m;
}

static void rl__scale_ref(float *y, float a, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] *= a;
}

void rl__ref_fill(rl__ktab *t) {
    *t = (rl__ktab){0};
    t->name = "ref";
    rl__ref_fill_quant(t);
    t->rmsnorm = rl__rmsnorm_ref;
    t->softmax = rl__softmax_ref;
    t->exp_sum = rl__exp_sum_ref;
    t->silu_mul = rl__silu_mul_ref;
    t->gelu_mul = rl__gelu_mul_ref;
    t->add_scaled = rl__add_scaled_ref;
    t->dot_f32 = rl__dot_f32_ref;
    t->dot_f16 = rl__dot_f16_ref;
    t->axpy_f32 = rl__axpy_f32_ref;
    t->axpy_f16 = rl__axpy_f16_ref;
    t->scale = rl__scale_ref;
    t->add_scale_max = rl__add_scale_max_ref;
    rl__ref_fill_kvq(t);
    rl__ref_fill_tile(t);
}
