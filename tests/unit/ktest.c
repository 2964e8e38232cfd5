/* See ktest.h. */
#include "ktest.h"

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdlib.h>

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

void kt_att_grouping(const rl_attn_args *a, rl_threadpool *tp, int32_t n_pos, int nc, float **qc,
                     float **oc, int32_t *cpos) {
    const size_t row = (size_t)a->n_head * a->kv->head_dim;
    float *og = malloc(sizeof(float) * (size_t)a->n_tok * row), *o1 = malloc(sizeof(float) * row);
    assert_true(og && o1);
    rl_attn_args ag = *a;
    ag.out = og;
    rl_attention_set_grouped(false);
    rl_attention(&ag, tp);
    rl_attention_set_grouped(true);
    assert_memory_equal(og, a->out, sizeof(float) * (size_t)a->n_tok * row);
    for (int t = 0; t < nc; t++) cpos[t] = n_pos - nc + t;
    *qc = malloc(sizeof(float) * (size_t)nc * row);
    *oc = malloc(sizeof(float) * (size_t)nc * row);
    assert_true(*qc && *oc);
    for (size_t i = 0; i < (size_t)nc * row; i++) (*qc)[i] = rnd_gauss() * 0.6f;
    rl_attn_args ac = *a;
    ac.q = *qc;
    ac.out = *oc;
    ac.n_tok = nc;
    ac.pos = cpos;
    rl_attention(&ac, tp);
    rl_attention_set_grouped(false);
    for (int t = 0; t < nc; t++) {
        rl_attn_args a1 = ac;
        a1.q = *qc + (size_t)t * row;
        a1.out = o1;
        a1.n_tok = 1;
        a1.pos = &cpos[t];
        rl_attention(&a1, NULL);
        assert_memory_equal(o1, *oc + (size_t)t * row, sizeof(float) * row);
    }
    rl_attention_set_grouped(true);
    free(og);
    free(o1);
}
