/* Compute-peak probes of the AVX2 table (see rl_peak_run in kernels.h):
 * long chains of the multiply-adds the matmul leaves are built from, with
 * enough independent accumulators to hide their latency, so that the rate
 * they retire at is the machine's arithmetic roofline for that tier.
 *
 *   int8:  acc_k += vpmaddwd(vpmaddubsw(a_k, b), ones)  (32 u8 x s8 products
 *          per step: the AVX2 int8 multiply-add of avx2_dot4.c);
 *   fp32:  acc_k = fma(a, b, acc_k)                      (8 per step).
 *
 * An empty asm statement marks each a_k as rewritten every step, so the
 * compiler can neither hoist the products out of the loop nor fold the
 * chain (the statement emits no instruction).  The accumulators are named
 * variables, not an array, so that they stay in registers.  Operands and
 * the checksum follow kernels-impl.h (RL_PEAK_*, rl__peak_operand); the
 * scalar twin is rl__peak_expect (peak.c). */
#include "kernels/x86/avx2-impl.h"

_Static_assert(RL_PEAK_I8_ACC == 6 && RL_PEAK_F32_ACC == 10, "the chains below are written out");

/* a_k or b as 32 bytes (which: 0 = a, 1 = b). */
static __m256i rl__peak_vec(int which, int k) {
    uint8_t v[32];
    for (int j = 0; j < 32; j++) v[j] = (uint8_t)rl__peak_operand(which, k, j);
    return _mm256_loadu_si256((const __m256i *)v);
}

/* Lanes of an int32 ymm, summed with wrap-around (the checksum's ring). */
static uint32_t rl__peak_sum32(__m256i v) {
    uint32_t l[8], s = 0;
    _mm256_storeu_si256((__m256i *)l, v);
    for (int i = 0; i < 8; i++) s += l[i];
    return s;
}

static float rl__peak_sumf(__m256 v) {
    float l[8], s = 0;
    _mm256_storeu_ps(l, v);
    for (int i = 0; i < 8; i++) s += l[i];
    return s;
}

uint64_t rl__peak_i8_avx2(int64_t n_iter, uint32_t *check) {
    __m256i a0 = rl__peak_vec(0, 0), a1 = rl__peak_vec(0, 1), a2 = rl__peak_vec(0, 2),
            a3 = rl__peak_vec(0, 3), a4 = rl__peak_vec(0, 4), a5 = rl__peak_vec(0, 5);
    __m256i c0 = _mm256_setzero_si256(), c1 = c0, c2 = c0, c3 = c0, c4 = c0, c5 = c0;
    const __m256i b = rl__peak_vec(1, 0), ones = _mm256_set1_epi16(1);
#define RL_PEAK_I8(a, c)                                                                           \
    __asm__ volatile("" : "+x"(a));                                                                \
    c = _mm256_add_epi32(c, _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), ones))
    for (int64_t it = 0; it < n_iter; it++) {
        RL_PEAK_I8(a0, c0);
        RL_PEAK_I8(a1, c1);
        RL_PEAK_I8(a2, c2);
        RL_PEAK_I8(a3, c3);
        RL_PEAK_I8(a4, c4);
        RL_PEAK_I8(a5, c5);
    }
#undef RL_PEAK_I8
    *check = rl__peak_sum32(c0) + rl__peak_sum32(c1) + rl__peak_sum32(c2) + rl__peak_sum32(c3) +
             rl__peak_sum32(c4) + rl__peak_sum32(c5);
    return n_iter > 0 ? (uint64_t)n_iter * RL_PEAK_I8_ACC * 32 : 0;
}

uint64_t rl__peak_f32_fma(int64_t n_iter, uint32_t *check) {
    __m256 c0 = _mm256_set1_ps(0), c1 = _mm256_set1_ps(1), c2 = _mm256_set1_ps(2),
           c3 = _mm256_set1_ps(3), c4 = _mm256_set1_ps(4), c5 = _mm256_set1_ps(5),
           c6 = _mm256_set1_ps(6), c7 = _mm256_set1_ps(7), c8 = _mm256_set1_ps(8),
           c9 = _mm256_set1_ps(9);
    __m256 a = _mm256_set1_ps(1.0f);
    const __m256 b = _mm256_set1_ps(RL_PEAK_F32_STEP);
    for (int64_t it = 0; it < n_iter; it++) {
        __asm__ volatile("" : "+x"(a));
        c0 = _mm256_fmadd_ps(a, b, c0);
        c1 = _mm256_fmadd_ps(a, b, c1);
        c2 = _mm256_fmadd_ps(a, b, c2);
        c3 = _mm256_fmadd_ps(a, b, c3);
        c4 = _mm256_fmadd_ps(a, b, c4);
        c5 = _mm256_fmadd_ps(a, b, c5);
        c6 = _mm256_fmadd_ps(a, b, c6);
        c7 = _mm256_fmadd_ps(a, b, c7);
        c8 = _mm256_fmadd_ps(a, b, c8);
        c9 = _mm256_fmadd_ps(a, b, c9);
    }
    /* lane sums in units of the step: exact (all values are multiples of
     * the step below 2^14 while n_iter < 2^22) */
    const __m256 all[RL_PEAK_F32_ACC] = {c0, c1, c2, c3, c4, c5, c6, c7, c8, c9};
    double s = 0;
    for (int k = 0; k < RL_PEAK_F32_ACC; k++) s += (double)rl__peak_sumf(all[k]);
    *check = (uint32_t)(uint64_t)(s / RL_PEAK_F32_STEP);
    return n_iter > 0 ? (uint64_t)n_iter * RL_PEAK_F32_ACC * 8 : 0;
}
