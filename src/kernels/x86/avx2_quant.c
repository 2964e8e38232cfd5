/* AVX2 matmul leaves: activation quantizers (bit-identical to the
 * reference: same d = amax/127, same float x*(1/d), round-to-nearest-even)
 * and vec-dots for q4_0, q4_1, q5_0, q8_0, q4_K, q6_K, f32, f16, bf16.
 *
 * Each vec-dot computes every block's integer sum exactly and accumulates
 * d * sumi in 8 float lanes (one fixed order for a given n), so results
 * differ from the reference only by float summation order.  Nothing here
 * depends on how many tokens or rows the caller processes.
 */
#include <math.h>
#include <string.h>

#include "kernels/x86/avx2-impl.h"

#define F16(h) rl_fp16_to_f32(h)

static inline float rl__f16(rl_fp16 h) { return _cvtsh_ss(h); }

/* ---------------- activation quantizers ---------------- */

/* amax of 32 floats and their int8 quantization with id (packed in order). */
static inline float rl__amax32(const float *x) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 m = _mm256_andnot_ps(sign, _mm256_loadu_ps(x));
    for (int j = 8; j < 32; j += 8) m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + j)));
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
        y[i].d = rl_f32_to_fp16(d);
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
        int sum = rl__hsum_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), q),
                                                   _mm256_set1_epi16(1)));
        y[i].d = rl_f32_to_fp16(d);
        y[i].s = rl_f32_to_fp16(d * (float)sum);
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

/* ---------------- 32-element blocks ---------------- */

static void rl__dot_q4_0_avx2(int64_t n, float *s, const void *vw, const void *vx) {
    const rl_block_q4_0 *w = vw;
    const rl_block_q8_0 *x = vx;
    __m256 acc = _mm256_setzero_ps();
    const __m256i off = _mm256_set1_epi8(8);
    for (int64_t i = 0; i < n / 32; i++) {
        __m256 d = _mm256_set1_ps(rl__f16(w[i].d) * rl__f16(x[i].d));
        __m256i qw = _mm256_sub_epi8(rl__nibbles32(w[i].qs), off);
        __m256i qx = _mm256_loadu_si256((const __m256i *)x[i].qs);
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(rl__mul_sum_i8(qw, qx)), acc);
    }
    *s = rl__hsum_ps(acc);
}

static void rl__dot_q4_1_avx2(int64_t n, float *s, const void *vw, const void *vx) {
    const rl_block_q4_1 *w = vw;
    const rl_block_q8_1 *x = vx;
    __m256 acc = _mm256_setzero_ps();
    float summ = 0.0f;
    for (int64_t i = 0; i < n / 32; i++) {
        summ += rl__f16(w[i].m) * rl__f16(x[i].s);
        __m256 d = _mm256_set1_ps(rl__f16(w[i].d) * rl__f16(x[i].d));
        __m256i qw = rl__nibbles32(w[i].qs);
        __m256i qx = _mm256_loadu_si256((const __m256i *)x[i].qs);
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(rl__mul_sum_u8i8(qw, qx)), acc);
    }
    *s = rl__hsum_ps(acc) + summ;
}

static void rl__dot_q5_0_avx2(int64_t n, float *s, const void *vw, const void *vx) {
    const rl_block_q5_0 *w = vw;
    const rl_block_q8_0 *x = vx;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / 32; i++) {
        __m256 d = _mm256_set1_ps(rl__f16(w[i].d) * rl__f16(x[i].d));
        uint32_t qh;
        memcpy(&qh, w[i].qh, 4);
        /* q - 16 = nibble | 0xF0 (as int8) where the 5th bit is clear */
        __m256i hi = _mm256_andnot_si256(rl__bits32(qh), _mm256_set1_epi8((char)0xF0));
        __m256i qw = _mm256_or_si256(rl__nibbles32(w[i].qs), hi);
        __m256i qx = _mm256_loadu_si256((const __m256i *)x[i].qs);
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(rl__mul_sum_i8(qw, qx)), acc);
    }
    *s = rl__hsum_ps(acc);
}

static void rl__dot_q8_0_avx2(int64_t n, float *s, const void *vw, const void *vx) {
    const rl_block_q8_0 *w = vw;
    const rl_block_q8_0 *x = vx;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / 32; i++) {
        __m256 d = _mm256_set1_ps(rl__f16(w[i].d) * rl__f16(x[i].d));
        __m256i qw = _mm256_loadu_si256((const __m256i *)w[i].qs);
        __m256i qx = _mm256_loadu_si256((const __m256i *)x[i].qs);
        /* weights may hold -128 (first operand is safe); x is within +-127 */
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(rl__mul_sum_i8(qw, qx)), acc);
    }
    *s = rl__hsum_ps(acc);
}

/* ---------------- K-quants ---------------- */

static void rl__dot_q4_K_avx2(int64_t n, float *s, const void *vw, const void *vx) {
    const rl_block_q4_K *w = vw;
    const rl_block_q8_K *x = vx;
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    __m256 acc = _mm256_setzero_ps();
    float accm = 0.0f;
    for (int64_t i = 0; i < n / RL_QK_K; i++) {
        uint8_t sc[8], mn[8];
        int summ = 0;
        for (int j = 0; j < 8; j++) {
            rl__get_scale_min_k4(j, w[i].scales, &sc[j], &mn[j]);
            summ += mn[j] * (x[i].bsums[2 * j] + x[i].bsums[2 * j + 1]);
        }
        accm += x[i].d * rl__f16(w[i].dmin) * (float)summ;
        __m256i sumi = _mm256_setzero_si256();
        for (int j = 0; j < 4; j++) {
            __m256i qb = _mm256_loadu_si256((const __m256i *)(w[i].qs + 32 * j));
            __m256i lo = _mm256_and_si256(qb, m4);
            __m256i hi = _mm256_and_si256(_mm256_srli_epi16(qb, 4), m4);
            __m256i y0 = _mm256_loadu_si256((const __m256i *)(x[i].qs + 64 * j));
            __m256i y1 = _mm256_loadu_si256((const __m256i *)(x[i].qs + 64 * j + 32));
            __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, y0), _mm256_set1_epi16(sc[2 * j]));
            __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, y1), _mm256_set1_epi16(sc[2 * j + 1]));
            sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(p0, p1));
        }
        __m256 d = _mm256_set1_ps(x[i].d * rl__f16(w[i].d));
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(sumi), acc);
    }
    *s = rl__hsum_ps(acc) - accm;
}

static void rl__dot_q6_K_avx2(int64_t n, float *s, const void *vw, const void *vx) {
    const rl_block_q6_K *w = vw;
    const rl_block_q8_K *x = vx;
    const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
    const __m256i k32 = _mm256_set1_epi8(32);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / RL_QK_K; i++) {
        __m256i sumi = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = w[i].ql + 64 * h, *qh = w[i].qh + 32 * h;
            const int8_t *sc = w[i].scales + 8 * h;
            const int8_t *y = x[i].qs + 128 * h;
            __m256i l0 = _mm256_loadu_si256((const __m256i *)ql);
            __m256i l1 = _mm256_loadu_si256((const __m256i *)(ql + 32));
            __m256i hb = _mm256_loadu_si256((const __m256i *)qh);
            __m256i q[4];
            q[0] = _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_and_si256(_mm256_slli_epi16(hb, 4), m30));
            q[1] = _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_and_si256(_mm256_slli_epi16(hb, 2), m30));
            q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), _mm256_and_si256(hb, m30));
            q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                                   _mm256_and_si256(_mm256_srli_epi16(hb, 2), m30));
            for (int k = 0; k < 4; k++) {
                __m256i yk = _mm256_loadu_si256((const __m256i *)(y + 32 * k));
                __m256i p = _mm256_sub_epi16(_mm256_maddubs_epi16(q[k], yk), _mm256_maddubs_epi16(k32, yk));
                __m256i scv = _mm256_set_m128i(_mm_set1_epi16(sc[2 * k + 1]), _mm_set1_epi16(sc[2 * k]));
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p, scv));
            }
        }
        __m256 d = _mm256_set1_ps(x[i].d * rl__f16(w[i].d));
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(sumi), acc);
    }
    *s = rl__hsum_ps(acc);
}

void rl__avx2_fill_quant(rl__ktab *t) {
    t->quant_q8_0 = rl__quant_q8_0_avx2;
    t->quant_q8_1 = rl__quant_q8_1_avx2;
    t->quant_q8_K = rl__quant_q8_K_avx2;
    t->vec_dot[RL_TYPE_F32] = rl__dot_f32_avx2;
    t->vec_dot[RL_TYPE_F16] = rl__dot_f16w_avx2;
    t->vec_dot[RL_TYPE_BF16] = rl__dot_bf16w_avx2;
    t->vec_dot[RL_TYPE_Q4_0] = rl__dot_q4_0_avx2;
    t->vec_dot[RL_TYPE_Q4_1] = rl__dot_q4_1_avx2;
    t->vec_dot[RL_TYPE_Q5_0] = rl__dot_q5_0_avx2;
    t->vec_dot[RL_TYPE_Q8_0] = rl__dot_q8_0_avx2;
    t->vec_dot[RL_TYPE_Q4_K] = rl__dot_q4_K_avx2;
    t->vec_dot[RL_TYPE_Q6_K] = rl__dot_q6_K_avx2;
}
