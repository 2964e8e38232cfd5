/* AVX-512 activation quantizers of the "avx512vnni" table: q8_0, q8_1 and
 * q8_K 16 floats a register.  The same bits as the AVX2 quantizers and the
 * reference (test_quant_tables): the amax is a max of |x| (exact, any
 * order), d = amax / 127, id = 1 / d (0 for d = 0), each code x * id
 * rounded to nearest even (vcvtps2dq with an explicit rounding) and
 * saturated to int8 (vpmovsdb; the AVX2 code's two saturating packs clamp
 * the same), fp16 scales by rl__to_f16c; the q8_1 sum and the q8_K bsums add
 * the saturated codes.  A prompt step quantizes every token's activations
 * once per matmul input: SmolLM2 pp512 spent 4.9% of the step in the AVX2
 * quantizer and 5.5% in these (the step 1.015x faster overall), so the
 * pass is bound by moving the activations, not by its arithmetic.
 * Compiled with the VNNI files' flags (Makefile). */
#include "kernels/x86/avx2-impl.h"

/* max |x| over 16 * nv floats (nv >= 1) */
static inline float rl__zamax(const float *x, int nv) {
    __m512 m = _mm512_abs_ps(_mm512_loadu_ps(x));
    for (int j = 1; j < nv; j++) m = _mm512_max_ps(m, _mm512_abs_ps(_mm512_loadu_ps(x + 16 * j)));
    return _mm512_reduce_max_ps(m);
}

/* 16 codes of x * id, rounded to nearest even and clamped to int8, as int32 */
static inline __m512i rl__zq16(const float *x, __m512 id) {
    const __m512i q = _mm512_cvt_roundps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x), id),
                                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    return _mm512_max_epi32(_mm512_min_epi32(q, _mm512_set1_epi32(127)), _mm512_set1_epi32(-128));
}

static inline float rl__zid(float d) {
    return d != 0.0f ? 1.0f / d : 0.0f;
}

static void rl__quant_q8_0_vnni(const float *x, void *vy, int64_t n) {
    rl_block_q8_0 *y = vy;
    for (int64_t i = 0; i < n / 32; i++, x += 32) {
        const float d = rl__zamax(x, 2) / 127.0f;
        const __m512 id = _mm512_set1_ps(rl__zid(d));
        y[i].d = rl__to_f16c(d);
        _mm_storeu_si128((__m128i *)y[i].qs, _mm512_cvtepi32_epi8(rl__zq16(x, id)));
        _mm_storeu_si128((__m128i *)(y[i].qs + 16), _mm512_cvtepi32_epi8(rl__zq16(x + 16, id)));
    }
}

static void rl__quant_q8_1_vnni(const float *x, void *vy, int64_t n) {
    rl_block_q8_1 *y = vy;
    for (int64_t i = 0; i < n / 32; i++, x += 32) {
        const float d = rl__zamax(x, 2) / 127.0f;
        const __m512 id = _mm512_set1_ps(rl__zid(d));
        const __m512i a = rl__zq16(x, id), b = rl__zq16(x + 16, id);
        _mm_storeu_si128((__m128i *)y[i].qs, _mm512_cvtepi32_epi8(a));
        _mm_storeu_si128((__m128i *)(y[i].qs + 16), _mm512_cvtepi32_epi8(b));
        const int sum = _mm512_reduce_add_epi32(_mm512_add_epi32(a, b));
        y[i].d = rl__to_f16c(d);
        y[i].s = rl__to_f16c(d * (float)sum);
    }
}

static void rl__quant_q8_K_vnni(const float *x, void *vy, int64_t n) {
    rl_block_q8_K *y = vy;
    for (int64_t i = 0; i < n / RL_QK_K; i++, x += RL_QK_K) {
        const float d = rl__zamax(x, RL_QK_K / 16) / 127.0f;
        const __m512 id = _mm512_set1_ps(rl__zid(d));
        y[i].d = d;
        for (int j = 0; j < RL_QK_K / 16; j++) {
            const __m512i q = rl__zq16(x + 16 * j, id);
            _mm_storeu_si128((__m128i *)(y[i].qs + 16 * j), _mm512_cvtepi32_epi8(q));
            y[i].bsums[j] = (int16_t)_mm512_reduce_add_epi32(q);
        }
    }
}

void rl__vnni_fill_quant(rl__ktab *t) {
    t->quant_q8_0 = rl__quant_q8_0_vnni;
    t->quant_q8_1 = rl__quant_q8_1_vnni;
    t->quant_q8_K = rl__quant_q8_K_vnni;
}
