/* Scalar reference attention leaves over runs of KV rows, for every page
 * type the KV cache supports: f32, f16, q8_0 and q4_0 (the GGUF block
 * packings of src/tensor/tensor.h, 32 elements per block).  These are the
 * oracles for x86/avx2_kvq.c.
 *
 * Conventions (fixed, the AVX2 twins follow them up to float summation
 * order and fused multiply-adds):
 *   - q . k for quantized pages: the query is q8_0 (quantized once per
 *     attention item by quant_q8_0); per block the integer sum of
 *     products is exact (int32), scaled by d_k * d_q in float and added to
 *     the running float sum in block order;
 *   - v accumulation: per row and block wd = w[r] * d_v, then
 *     acc[i] += wd * code, rows in order.
 * f32/f16 leaves do exactly what the single-row dot_f16 / axpy_f16 leaves of
 * ref_ops.c do, row after row.
 */
#include "kernels/kernels-impl.h"

#define ROW(base, r, stride) ((const uint8_t *)(base) + (size_t)(r) * (stride))

static void rl__kq_f32_ref(const void *q, const void *k, size_t stride, int n, int hd, float *s) {
    const float *a = q;
    for (int r = 0; r < n; r++) {
        const float *b = (const float *)ROW(k, r, stride);
        float acc = 0.0f;
        for (int i = 0; i < hd; i++) acc += a[i] * b[i];
        s[r] = acc;
    }
}

static void rl__kq_f16_ref(const void *q, const void *k, size_t stride, int n, int hd, float *s) {
    const float *a = q;
    for (int r = 0; r < n; r++) {
        const rl_fp16 *b = (const rl_fp16 *)ROW(k, r, stride);
        float acc = 0.0f;
        for (int i = 0; i < hd; i++) acc += a[i] * rl_fp16_to_f32(b[i]);
        s[r] = acc;
    }
}

static void rl__kq_q8_0_ref(const void *q, const void *k, size_t stride, int n, int hd, float *s) {
    const rl_block_q8_0 *x = q;
    for (int r = 0; r < n; r++) {
        const rl_block_q8_0 *w = (const rl_block_q8_0 *)ROW(k, r, stride);
        float acc = 0.0f;
        for (int b = 0; b < hd / RL_QK8_0; b++) {
            int32_t isum = 0;
            for (int j = 0; j < RL_QK8_0; j++) isum += (int32_t)w[b].qs[j] * x[b].qs[j];
            acc += rl_fp16_to_f32(w[b].d) * rl_fp16_to_f32(x[b].d) * (float)isum;
        }
        s[r] = acc;
    }
}

static void rl__kq_q4_0_ref(const void *q, const void *k, size_t stride, int n, int hd, float *s) {
    const rl_block_q8_0 *x = q;
    for (int r = 0; r < n; r++) {
        const rl_block_q4_0 *w = (const rl_block_q4_0 *)ROW(k, r, stride);
        float acc = 0.0f;
        for (int b = 0; b < hd / RL_QK4_0; b++) {
            int32_t isum = 0;
            for (int j = 0; j < RL_QK4_0 / 2; j++) {
                isum += ((int32_t)(w[b].qs[j] & 0x0F) - 8) * x[b].qs[j];
                isum += ((int32_t)(w[b].qs[j] >> 4) - 8) * x[b].qs[j + 16];
            }
            acc += rl_fp16_to_f32(w[b].d) * rl_fp16_to_f32(x[b].d) * (float)isum;
        }
        s[r] = acc;
    }
}

static void rl__v_f32_ref(float *acc, const void *v, size_t stride, const float *w, int n, int hd) {
    for (int r = 0; r < n; r++) {
        const float *x = (const float *)ROW(v, r, stride);
        for (int i = 0; i < hd; i++) acc[i] += w[r] * x[i];
    }
}

static void rl__v_f16_ref(float *acc, const void *v, size_t stride, const float *w, int n, int hd) {
    for (int r = 0; r < n; r++) {
        const rl_fp16 *x = (const rl_fp16 *)ROW(v, r, stride);
        for (int i = 0; i < hd; i++) acc[i] += w[r] * rl_fp16_to_f32(x[i]);
    }
}

static void rl__v_q8_0_ref(float *acc, const void *v, size_t stride, const float *w, int n, int hd) {
    for (int r = 0; r < n; r++) {
        const rl_block_q8_0 *x = (const rl_block_q8_0 *)ROW(v, r, stride);
        for (int b = 0; b < hd / RL_QK8_0; b++) {
            float wd = w[r] * rl_fp16_to_f32(x[b].d);
            float *y = acc + b * RL_QK8_0;
            for (int j = 0; j < RL_QK8_0; j++) y[j] += wd * (float)x[b].qs[j];
        }
    }
}

static void rl__v_q4_0_ref(float *acc, const void *v, size_t stride, const float *w, int n, int hd) {
    for (int r = 0; r < n; r++) {
        const rl_block_q4_0 *x = (const rl_block_q4_0 *)ROW(v, r, stride);
        for (int b = 0; b < hd / RL_QK4_0; b++) {
            float wd = w[r] * rl_fp16_to_f32(x[b].d);
            float *y = acc + b * RL_QK4_0;
            for (int j = 0; j < RL_QK4_0 / 2; j++) {
                y[j] += wd * (float)((int)(x[b].qs[j] & 0x0F) - 8);
                y[j + 16] += wd * (float)((int)(x[b].qs[j] >> 4) - 8);
            }
        }
    }
}

/* Float-query variants for quantized K: s[r] = sum_b d_b * sum_i q_i*code_i. */
static void rl__kqf_q8_0_ref(const void *vq, const void *k, size_t stride, int n, int hd, float *s) {
    const float *q = vq;
    for (int r = 0; r < n; r++) {
        const rl_block_q8_0 *w = (const rl_block_q8_0 *)ROW(k, r, stride);
        float acc = 0.0f;
        for (int b = 0; b < hd / RL_QK8_0; b++) {
            float t = 0.0f;
            for (int j = 0; j < RL_QK8_0; j++) t += q[b * 32 + j] * (float)w[b].qs[j];
            acc += rl_fp16_to_f32(w[b].d) * t;
        }
        s[r] = acc;
    }
}

static void rl__kqf_q4_0_ref(const void *vq, const void *k, size_t stride, int n, int hd, float *s) {
    const float *q = vq;
    for (int r = 0; r < n; r++) {
        const rl_block_q4_0 *w = (const rl_block_q4_0 *)ROW(k, r, stride);
        float acc = 0.0f;
        for (int b = 0; b < hd / RL_QK4_0; b++) {
            float t = 0.0f;
            for (int j = 0; j < 16; j++) t += q[b * 32 + j] * (float)((int)(w[b].qs[j] & 0x0F) - 8);
            for (int j = 0; j < 16; j++) t += q[b * 32 + 16 + j] * (float)((int)(w[b].qs[j] >> 4) - 8);
            acc += rl_fp16_to_f32(w[b].d) * t;
        }
        s[r] = acc;
    }
}

void rl__ref_fill_kvq(rl__ktab *t) {
    t->kqf_rows[RL_TYPE_Q8_0] = rl__kqf_q8_0_ref;
    t->kqf_rows[RL_TYPE_Q4_0] = rl__kqf_q4_0_ref;
    t->kq_rows[RL_TYPE_F32] = rl__kq_f32_ref;
    t->kq_rows[RL_TYPE_F16] = rl__kq_f16_ref;
    t->kq_rows[RL_TYPE_Q8_0] = rl__kq_q8_0_ref;
    t->kq_rows[RL_TYPE_Q4_0] = rl__kq_q4_0_ref;
    t->v_rows[RL_TYPE_F32] = rl__v_f32_ref;
    t->v_rows[RL_TYPE_F16] = rl__v_f16_ref;
    t->v_rows[RL_TYPE_Q8_0] = rl__v_q8_0_ref;
    t->v_rows[RL_TYPE_Q4_0] = rl__v_q4_0_ref;
}
