/* Compute-peak probe of the AVX512-VNNI tier (see rl_peak_run in
 * kernels.h and x86/avx2_peak.c): acc_k = vpdpbusd(acc_k, a_k, b) on zmm
 * registers, 64 u8 x s8 products per step, with enough chains to hide the
 * instruction's latency (5 cycles, up to 2 per cycle).  Compiled with the
 * AVX-512 flags (Makefile) and called only when dispatch.c found the
 * features. */
#include "kernels/x86/avx2-impl.h"

_Static_assert(RL_PEAK_VNNI_ACC == 12, "the chains below are written out");

static __m512i rl__peak_zvec(int which, int k) {
    uint8_t v[64];
    for (int j = 0; j < 64; j++) v[j] = (uint8_t)rl__peak_operand(which, k, j);
    return _mm512_loadu_si512(v);
}

static uint32_t rl__peak_zsum32(__m512i v) {
    uint32_t l[16], s = 0;
    _mm512_storeu_si512(l, v);
    for (int i = 0; i < 16; i++) s += l[i];
    return s;
}

uint64_t rl__peak_i8_vnni(int64_t n_iter, uint32_t *check) {
    __m512i a0 = rl__peak_zvec(0, 0), a1 = rl__peak_zvec(0, 1), a2 = rl__peak_zvec(0, 2),
            a3 = rl__peak_zvec(0, 3), a4 = rl__peak_zvec(0, 4), a5 = rl__peak_zvec(0, 5),
            a6 = rl__peak_zvec(0, 6), a7 = rl__peak_zvec(0, 7), a8 = rl__peak_zvec(0, 8),
            a9 = rl__peak_zvec(0, 9), a10 = rl__peak_zvec(0, 10), a11 = rl__peak_zvec(0, 11);
    __m512i c0 = _mm512_setzero_si512(), c1 = c0, c2 = c0, c3 = c0, c4 = c0, c5 = c0, c6 = c0,
            c7 = c0, c8 = c0, c9 = c0, c10 = c0, c11 = c0;
    const __m512i b = rl__peak_zvec(1, 0);
#define RL_PEAK_VN(a, c)                                                                           \
    __asm__ volatile("" : "+v"(a));                                                                \
    c = _mm512_dpbusd_epi32(c, a, b)
    for (int64_t it = 0; it < n_iter; it++) {
        RL_PEAK_VN(a0, c0);
        RL_PEAK_VN(a1, c1);
        RL_PEAK_VN(a2, c2);
        RL_PEAK_VN(a3, c3);
        RL_PEAK_VN(a4, c4);
        RL_PEAK_VN(a5, c5);
        RL_PEAK_VN(a6, c6);
        RL_PEAK_VN(a7, c7);
        RL_PEAK_VN(a8, c8);
        RL_PEAK_VN(a9, c9);
        RL_PEAK_VN(a10, c10);
        RL_PEAK_VN(a11, c11);
    }
#undef RL_PEAK_VN
    *check = rl__peak_zsum32(c0) + rl__peak_zsum32(c1) + rl__peak_zsum32(c2) + rl__peak_zsum32(c3) +
             rl__peak_zsum32(c4) + rl__peak_zsum32(c5) + rl__peak_zsum32(c6) + rl__peak_zsum32(c7) +
             rl__peak_zsum32(c8) + rl__peak_zsum32(c9) + rl__peak_zsum32(c10) +
             rl__peak_zsum32(c11);
    return n_iter > 0 ? (uint64_t)n_iter * RL_PEAK_VNNI_ACC * 64 : 0;
}
