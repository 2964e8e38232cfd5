/* AVX2 4-token vec-dots (prefill): one weight row against 4 activation
 * rows, unpacking each weight block once.  Per token the float operations
 * are exactly those of the 1-token kernel in avx2_quant.c (integer block
 * sums are exact, so their order is free), which makes every output
 * bit-identical to the 1-token path: batch invariance holds. */
#include "kernels/x86/avx2-impl.h"

static inline float rl__f16(rl_fp16 h) { return _cvtsh_ss(h); }

#define XB(type, k, i) (((const type *)((const uint8_t *)vx + (k) * xs))[i])

static void rl__dot4_q4_0_avx2(int64_t n, float *s, size_t ss, const void *vw, const void *vx, size_t xs) {
    const rl_block_q4_0 *w = vw;
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int64_t i = 0; i < n / 32; i++) {
        float dw = rl__f16(w[i].d);
        __m256i qw = _mm256_sub_epi8(rl__nibbles32(w[i].qs), _mm256_set1_epi8(8));
        for (int k = 0; k < 4; k++) {
            const rl_block_q8_0 *x = &XB(rl_block_q8_0, k, i);
            __m256 d = _mm256_set1_ps(dw * rl__f16(x->d));
            __m256i qx = _mm256_loadu_si256((const __m256i *)x->qs);
            acc[k] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(rl__mul_sum_i8(qw, qx)), acc[k]);
        }
    }
    for (int k = 0; k < 4; k++) s[k * ss] = rl__hsum_ps(acc[k]);
}

static void rl__dot4_q4_1_avx2(int64_t n, float *s, size_t ss, const void *vw, const void *vx, size_t xs) {
    const rl_block_q4_1 *w = vw;
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    float summ[4] = {0, 0, 0, 0};
    for (int64_t i = 0; i < n / 32; i++) {
        float dw = rl__f16(w[i].d), mw = rl__f16(w[i].m);
        __m256i qw = rl__nibbles32(w[i].qs);
        for (int k = 0; k < 4; k++) {
            const rl_block_q8_1 *x = &XB(rl_block_q8_1, k, i);
            summ[k] += mw * rl__f16(x->s);
            __m256 d = _mm256_set1_ps(dw * rl__f16(x->d));
            __m256i qx = _mm256_loadu_si256((const __m256i *)x->qs);
            acc[k] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(rl__mul_sum_u8i8(qw, qx)), acc[k]);
        }
    }
    for (int k = 0; k < 4; k++) s[k * ss] = rl__hsum_ps(acc[k]) + summ[k];
}

static void rl__dot4_q8_0_avx2(int64_t n, float *s, size_t ss, const void *vw, const void *vx, size_t xs) {
    const rl_block_q8_0 *w = vw;
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int64_t i = 0; i < n / 32; i++) {
        float dw = rl__f16(w[i].d);
        __m256i qw = _mm256_loadu_si256((const __m256i *)w[i].qs);
        for (int k = 0; k < 4; k++) {
            const rl_block_q8_0 *x = &XB(rl_block_q8_0, k, i);
            __m256 d = _mm256_set1_ps(dw * rl__f16(x->d));
            __m256i qx = _mm256_loadu_si256((const __m256i *)x->qs);
            acc[k] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(rl__mul_sum_i8(qw, qx)), acc[k]);
        }
    }
    for (int k = 0; k < 4; k++) s[k * ss] = rl__hsum_ps(acc[k]);
}

static void rl__dot4_q4_K_avx2(int64_t n, float *s, size_t ss, const void *vw, const void *vx, size_t xs) {
    const rl_block_q4_K *w = vw;
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    float accm[4] = {0, 0, 0, 0};
    for (int64_t i = 0; i < n / RL_QK_K; i++) {
        uint8_t sc[8], mn[8];
        for (int j = 0; j < 8; j++) rl__get_scale_min_k4(j, w[i].scales, &sc[j], &mn[j]);
        const float dw = rl__f16(w[i].d), dmw = rl__f16(w[i].dmin);
        const rl_block_q8_K *x[4];
        __m256i sumi[4];
        for (int k = 0; k < 4; k++) {
            x[k] = &XB(rl_block_q8_K, k, i);
            int summ = 0;
            for (int j = 0; j < 8; j++) summ += mn[j] * (x[k]->bsums[2 * j] + x[k]->bsums[2 * j + 1]);
            accm[k] += x[k]->d * dmw * (float)summ;
            sumi[k] = _mm256_setzero_si256();
        }
        for (int j = 0; j < 4; j++) {
            __m256i qb = _mm256_loadu_si256((const __m256i *)(w[i].qs + 32 * j));
            __m256i lo = _mm256_and_si256(qb, m4);
            __m256i hi = _mm256_and_si256(_mm256_srli_epi16(qb, 4), m4);
            __m256i s0 = _mm256_set1_epi16(sc[2 * j]), s1 = _mm256_set1_epi16(sc[2 * j + 1]);
            for (int k = 0; k < 4; k++) {
                __m256i y0 = _mm256_loadu_si256((const __m256i *)(x[k]->qs + 64 * j));
                __m256i y1 = _mm256_loadu_si256((const __m256i *)(x[k]->qs + 64 * j + 32));
                __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, y0), s0);
                __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, y1), s1);
                sumi[k] = _mm256_add_epi32(sumi[k], _mm256_add_epi32(p0, p1));
            }
        }
        for (int k = 0; k < 4; k++) {
            __m256 d = _mm256_set1_ps(x[k]->d * dw);
            acc[k] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(sumi[k]), acc[k]);
        }
    }
    for (int k = 0; k < 4; k++) s[k * ss] = rl__hsum_ps(acc[k]) - accm[k];
}

static void rl__dot4_q6_K_avx2(int64_t n, float *s, size_t ss, const void *vw, const void *vx, size_t xs) {
    const rl_block_q6_K *w = vw;
    const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
    const __m256i k32 = _mm256_set1_epi8(32);
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int64_t i = 0; i < n / RL_QK_K; i++) {
        __m256i sumi[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(),
                           _mm256_setzero_si256()};
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = w[i].ql + 64 * h, *qh = w[i].qh + 32 * h;
            const int8_t *sc = w[i].scales + 8 * h;
            __m256i l0 = _mm256_loadu_si256((const __m256i *)ql);
            __m256i l1 = _mm256_loadu_si256((const __m256i *)(ql + 32));
            __m256i hb = _mm256_loadu_si256((const __m256i *)qh);
            __m256i q[4];
            q[0] = _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_and_si256(_mm256_slli_epi16(hb, 4), m30));
            q[1] = _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_and_si256(_mm256_slli_epi16(hb, 2), m30));
            q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), _mm256_and_si256(hb, m30));
            q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                                   _mm256_and_si256(_mm256_srli_epi16(hb, 2), m30));
            for (int kk = 0; kk < 4; kk++) {
                __m256i scv = _mm256_set_m128i(_mm_set1_epi16(sc[2 * kk + 1]), _mm_set1_epi16(sc[2 * kk]));
                for (int k = 0; k < 4; k++) {
                    const int8_t *y = XB(rl_block_q8_K, k, i).qs + 128 * h + 32 * kk;
                    __m256i yk = _mm256_loadu_si256((const __m256i *)y);
                    __m256i p = _mm256_sub_epi16(_mm256_maddubs_epi16(q[kk], yk), _mm256_maddubs_epi16(k32, yk));
                    sumi[k] = _mm256_add_epi32(sumi[k], _mm256_madd_epi16(p, scv));
                }
            }
        }
        float dw = rl__f16(w[i].d);
        for (int k = 0; k < 4; k++) {
            __m256 d = _mm256_set1_ps(XB(rl_block_q8_K, k, i).d * dw);
            acc[k] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(sumi[k]), acc[k]);
        }
    }
    for (int k = 0; k < 4; k++) s[k * ss] = rl__hsum_ps(acc[k]);
}

void rl__avx2_fill_dot4(rl__ktab *t);
void rl__avx2_fill_dot4(rl__ktab *t) {
    t->vec_dot4[RL_TYPE_Q4_0] = rl__dot4_q4_0_avx2;
    t->vec_dot4[RL_TYPE_Q4_1] = rl__dot4_q4_1_avx2;
    t->vec_dot4[RL_TYPE_Q8_0] = rl__dot4_q8_0_avx2;
    t->vec_dot4[RL_TYPE_Q4_K] = rl__dot4_q4_K_avx2;
    t->vec_dot4[RL_TYPE_Q6_K] = rl__dot4_q6_K_avx2;
}
