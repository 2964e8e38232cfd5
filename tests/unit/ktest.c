/* See ktest.h. */
#include "ktest.h"

#include "kernels/kernels-impl.h"

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;

void kt_seed(uint64_t seed) {
    g_rng = seed;
}
uint64_t kt_state(void) {
    return g_rng;
}

uint32_t rnd_u32(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (uint32_t)(g_rng >> 32);
}

float rnd_unif(void) {
    return (float)(rnd_u32() >> 8) / 8388608.0f - 1.0f;
}

float rnd_gauss(void) {
    float s = 0;
    for (int i = 0; i < 4; i++) s += rnd_unif();
    return s * 0.866f;
}

int n_impls(rl_kernels_impl out[2]) {
    int n = 0;
    out[n++] = RL_KERNELS_REF;
    if (rl__kernels_avx2()) out[n++] = RL_KERNELS_AVX2;
    return n;
}

int kt_impls(rl_kernels_impl out[KT_MAX_IMPLS]) {
    int n = n_impls(out);
    if (rl__kernels_vnni()) out[n++] = RL_KERNELS_AVX512VNNI;
    if (rl__kernels_amx()) out[n++] = RL_KERNELS_AMX;
    return n;
}
