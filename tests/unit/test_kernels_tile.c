/* Kernel tests for the many-token paths: the compute-peak probes (each
 * leaf's checksum equals the scalar model's, so it did exactly the
 * multiply-adds it reports) and the register-blocked tile leaves
 * (vec_dot_tile: R weight rows x T tokens), each bit-identical to the
 * 1-token leaf of its table per (row, token), and the matmul driver's tile
 * path bit-identical to one token at a time. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels-impl.h"
#include "ktest.h"

static void test_peak_counts(void **state) {
    (void)state;
    const int64_t iters[] = {1, 7, 1000};
    int n_run = 0;
    for (int k = 0; k < RL_PEAK_COUNT; k++) {
        if (!rl_peak_available((rl_peak_kind)k)) {
            assert_int_equal(rl_peak_run((rl_peak_kind)k, 10, NULL), 0);
            continue;
        }
        for (size_t i = 0; i < sizeof iters / sizeof iters[0]; i++) {
            uint32_t c = 0;
            uint64_t n = rl_peak_run((rl_peak_kind)k, iters[i], &c);
            const uint64_t per = k == RL_PEAK_I8_AVX2   ? RL_PEAK_I8_ACC * 32
                                 : k == RL_PEAK_I8_VNNI ? RL_PEAK_VNNI_ACC * 64
                                                        : RL_PEAK_F32_ACC * 8;
            assert_int_equal(n, per * (uint64_t)iters[i]);
            if (!rl_peak_check((rl_peak_kind)k, iters[i], c))
                fail_msg("%s n_iter %lld: checksum %u, scalar model %u", rl_peak_name(k),
                         (long long)iters[i], c, rl__peak_expect(k, iters[i]));
            /* a different step count must not pass (the check can fail) */
            assert_false(rl_peak_check((rl_peak_kind)k, iters[i] + 1, c));
            n_run++;
        }
    }
    assert_int_equal(rl_peak_run(RL_PEAK_I8_AVX2, 0, NULL), 0);
    if (rl__kernels_avx2()) assert_true(n_run >= 6);
}

int main(void) {
    kt_seed(0x243F6A8885A308D3ull);
    rl_kernels_init(RL_KERNELS_AUTO);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_peak_counts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
