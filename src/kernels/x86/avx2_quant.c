/* AVX2 matmul leaves: activation quantizers (bit-identical to the
 * reference: same d = amax/127, same float x*(1/d), round-to-nearest-even)
 * and the float-weight vec-dots (f32, f16, bf16).  The quantized-weight
 * vec-dots live in avx2_dot4.c (1- and 4-token variants from one template).
 * Nothing here depends on how many tokens or rows the caller processes.
 */
#include <math.h>
#include <string.h>

#include "kernels/x86/avx2-impl.h"

#define F16(h) rl_fp16_to_f32(h)

static inline float rl__f16(rl_fp16 h) {
    return _cvtsh_ss(h);
}

/* ---------------- activation quantizers ---------------- */

/* amax of 32 floats and their int8 quantization with id (packed in order). */
static inline float rl__amax32(const float *x) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 m = _mm256_andnot_ps(sign, _mm256_loadu_ps(x));
    for (int j = 8; j < 32; j += 8)
        m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + j)));
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline __m256i rl__q8_32(const float *x, float id) {
    const __m256 v = _mm256_set1_ps(id);
    __m256i i[4];
    for (int j = 0; j < 4; j++) {
        __m256 p = _mm256_mul_ps(_mm256_loadu_ps(x + 8 * j), v);
        p = _mm256_round_ps(p, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        i[j] = _mm256_cvtps_epi32(p);
    }
    __m256i a = _mm256_packs_epi32(i[0], i[1]);
    __m256i b = _mm256_packs_epi32(i[2], i[3]);
    a = _mm256_packs_epi16(a, b);
    return _mm256_permutevar8x32_epi32(a, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

static void rl__quant_q8_0_avx2(const float *x, void *vy, int64_t n) {
    rl_block_q8_0 *y = vy;
    for (int64_t i = 0; i < n / 32; i++) {
        float d = rl__amax32(x + 32 * i) / 127.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = rl__to_f16c(d);
        _mm256_storeu_si256((__m256i *)y[i].qs, rl__q8_32(x + 32 * i, id));
    }
}

static void rl__quant_q8_1_avx2(const float *x, void *vy, int64_t n) {
    rl_block_q8_1 *y = vy;
    for (int64_t i = 0; i < n / 32; i++) {
        float d = rl__amax32(x + 32 * i) / 127.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        __m256i q = rl__q8_32(x + 32 * i, id);
        _mm256_storeu_si256((__m256i *)y[i].qs, q);
        int sum = rl__hsum_epi32(
            _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), q), _mm256_set1_epi16(1)));
        y[i].d = rl__to_f16c(d);
        y[i].s = rl__to_f16c(d * (float)sum);
    }
}

static void rl__quant_q8_K_avx2(const float *x, void *vy, int64_t n) {
    rl_block_q8_K *y = vy;
    for (int64_t i = 0; i < n / RL_QK_K; i++) {
        const float *xb = x + i * RL_QK_K;
        float amax = 0.0f;
        for (int j = 0; j < RL_QK_K; j += 32) {
            float a = rl__amax32(xb + j);
            if (a > amax) amax = a;
        }
        float d = amax / 127.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = d;
        for (int j = 0; j < RL_QK_K; j += 32) {
            __m256i q = rl__q8_32(xb + j, id);
            _mm256_storeu_si256((__m256i *)(y[i].qs + j), q);
            /* two bsums of 16: widen to int16, pairwise to int32, reduce per half */
            __m256i s16 = _mm256_maddubs_epi16(_mm256_set1_epi8(1), q);
            __m256i s32 = _mm256_madd_epi16(s16, _mm256_set1_epi16(1));
            __m128i lo = _mm256_castsi256_si128(s32), hi = _mm256_extracti128_si256(s32, 1);
            lo = _mm_hadd_epi32(lo, hi);
            lo = _mm_hadd_epi32(lo, lo);
            y[i].bsums[j / 16] = (int16_t)_mm_extract_epi32(lo, 0);
            y[i].bsums[j / 16 + 1] = (int16_t)_mm_extract_epi32(lo, 1);
        }
    }
}

/* rl_f32_to_fp16 8 at a time (vcvtps2ph, round to nearest even); a group
 * holding a NaN goes through the scalar code (rl__to_f16c). */
static void rl__to_f16_avx2(rl_fp16 *y, const float *x, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_loadu_ps(x + i);
        if (_mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q))) {
            for (int j = 0; j < 8; j++) y[i + j] = rl_f32_to_fp16(x[i + j]);
            continue;
        }
        _mm_storeu_si128((__m128i *)(y + i), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
    }
    for (; i < n; i++) y[i] = rl__to_f16c(x[i]);
}

/* ---------------- float weights ---------------- */

static void rl__dot_f32_avx2(int64_t n, float *s, const void *vw, const void *vx) {
    const float *w = vw, *x = vx;
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i), _mm256_loadu_ps(x + i), a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i + 8), _mm256_loadu_ps(x + i + 8), a1);
    }
    float sum = rl__hsum_ps(_mm256_add_ps(a0, a1));
    for (; i < n; i++) sum += w[i] * x[i];
    *s = sum;
}

static void rl__dot_f16w_avx2(int64_t n, float *s, const void *vw, const void *vx) {
    const rl_fp16 *w = vw;
    const float *x = vx;
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256 w0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w + i)));
        __m256 w1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w + i + 8)));
        a0 = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x + i), a0);
        a1 = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x + i + 8), a1);
    }
    float sum = rl__hsum_ps(_mm256_add_ps(a0, a1));
    for (; i < n; i++) sum += rl__f16(w[i]) * x[i];
    *s = sum;
}

static void rl__dot_bf16w_avx2(int64_t n, float *s, const void *vw, const void *vx) {
    const rl_bf16 *w = vw;
    const float *x = vx;
    __m256 a0 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i b = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(w + i)));
        __m256 wf = _mm256_castsi256_ps(_mm256_slli_epi32(b, 16));
        a0 = _mm256_fmadd_ps(wf, _mm256_loadu_ps(x + i), a0);
    }
    float sum = rl__hsum_ps(a0);
    for (; i < n; i++) sum += rl_bf16_to_f32(w[i]) * x[i];
    *s = sum;
}

void rl__avx2_fill_quant(rl__ktab *t) {
    t->quant_q8_0 = rl__quant_q8_0_avx2;
    t->quant_q8_1 = rl__quant_q8_1_avx2;
    t->quant_q8_K = rl__quant_q8_K_avx2;
    t->to_f16 = rl__to_f16_avx2;
    t->vec_dot[RL_TYPE_F32] = rl__dot_f32_avx2;
    t->vec_dot[RL_TYPE_F16] = rl__dot_f16w_avx2;
    t->vec_dot[RL_TYPE_BF16] = rl__dot_bf16w_avx2;
}
