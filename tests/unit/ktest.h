/* Helpers shared by the kernel tests (test_kernels.c, test_kvquant.c): a
 * small deterministic xorshift generator and the list of kernel variants
 * this CPU can run.  Linked into every unit-test binary (every .c file in
 * tests/unit/ without the test_ prefix). */
#ifndef RL_KTEST_H
#define RL_KTEST_H

#include <stdint.h>

#include "kernels/kernels.h"

/* Restarts the generator (each test file picks its own seed). */
void kt_seed(uint64_t seed);
/* The current state, to replay the same numbers with kt_seed. */
uint64_t kt_state(void);
uint32_t rnd_u32(void);
float rnd_unif(void);  /* [-1, 1) */
float rnd_gauss(void); /* approximately N(0, 1) (sum of 4 uniforms) */
/* REF always, AVX2 when the CPU has it (the attention variants: the
 * AVX512-VNNI table shares the AVX2 attention leaves). */
int n_impls(rl_kernels_impl out[2]);
/* Every table this CPU can run: REF, AVX2, AVX512VNNI. */
#define KT_MAX_IMPLS 4
int kt_impls(rl_kernels_impl out[KT_MAX_IMPLS]);
/* The grouping invariances of attention call a, whose a->out
 * rl_attention(a, tp) wrote: with grouped items off (one head an item) the
 * same bits; and a prompt chunk of nc random query tokens at positions
 * n_pos - nc .. n_pos - 1 (items of several tokens' rows sharing tiles)
 * equals each token alone with grouped items off.  The chunk's queries,
 * outputs and positions come back in *qc, *oc (malloc'd: the caller frees)
 * and cpos[nc], for oracle checks. */
void kt_att_grouping(const rl_attn_args *a, rl_threadpool *tp, int32_t n_pos, int nc, float **qc,
                     float **oc, int32_t *cpos);

#endif
