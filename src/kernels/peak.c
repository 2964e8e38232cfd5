/* Compute-peak probes (kernels.h, rl_peak_*): which tiers this CPU runs,
 * the calls into the leaves (x86/avx2_peak.c, x86/vnni_peak.c), and the
 * scalar twin of their checksums (rl__peak_expect), which executes the
 * same multiply-adds one product at a time -- so a test that compares the
 * two proves that a leaf did exactly the work it reports. */
#include "kernels/kernels-impl.h"

const char *rl_peak_name(rl_peak_kind k) {
    switch (k) {
    case RL_PEAK_I8_AVX2:
        return "int8-avx2";
    case RL_PEAK_I8_VNNI:
        return "int8-vnni";
    case RL_PEAK_F32_FMA:
        return "fp32-fma";
    case RL_PEAK_I8_AMX:
        return "int8-amx";
    default:
        return "?";
    }
}

bool rl_peak_available(rl_peak_kind k) {
    switch (k) {
    case RL_PEAK_I8_AVX2:
    case RL_PEAK_F32_FMA:
        return rl__kernels_avx2() != NULL;
    case RL_PEAK_I8_VNNI:
        return rl__kernels_vnni() != NULL;
    case RL_PEAK_I8_AMX:
        return rl__kernels_amx() != NULL;
    default:
        return false;
    }
}

uint64_t rl_peak_run(rl_peak_kind k, int64_t n_iter, uint32_t *check) {
    uint32_t c = 0;
    uint64_t n = 0;
    if (rl_peak_available(k) && n_iter > 0) {
        n = k == RL_PEAK_I8_AVX2   ? rl__peak_i8_avx2(n_iter, &c)
            : k == RL_PEAK_I8_VNNI ? rl__peak_i8_vnni(n_iter, &c)
            : k == RL_PEAK_I8_AMX  ? rl__peak_i8_amx(n_iter, &c)
                                   : rl__peak_f32_fma(n_iter, &c);
    }
    if (check) *check = c;
    return n;
}

uint32_t rl__peak_expect(int kind, int64_t n_iter) {
    if (kind == RL_PEAK_F32_FMA) {
        /* lane sum of acc_k = k + n_iter * step, in units of the step */
        double s = 0;
        for (int k = 0; k < RL_PEAK_F32_ACC; k++) {
            float a = (float)k;
            for (int64_t it = 0; it < n_iter; it++) a += RL_PEAK_F32_STEP;
            s += 8.0 * (double)a;
        }
        return (uint32_t)(uint64_t)(s / RL_PEAK_F32_STEP);
    }
    if (kind == RL_PEAK_I8_AMX) {
        /* tile (a, b): sum over rows m, columns n of
         * sum_{kk, c} A[4kk + c] B_b[4n + c], every row alike */
        uint32_t s = 0;
        for (int64_t it = 0; it < n_iter; it++)
            for (int t = 0; t < 4; t++)
                for (int m = 0; m < 16; m++)
                    for (int n = 0; n < 16; n++)
                        for (int j = 0; j < 64; j++)
                            s += (uint32_t)(rl__peak_operand(1, 0, j) *
                                            rl__peak_operand(0, t & 1, 4 * n + j % 4));
        return s;
    }
    const int n_acc = kind == RL_PEAK_I8_VNNI ? RL_PEAK_VNNI_ACC : RL_PEAK_I8_ACC;
    const int width = kind == RL_PEAK_I8_VNNI ? 64 : 32;
    uint32_t s = 0;
    for (int64_t it = 0; it < n_iter; it++)
        for (int k = 0; k < n_acc; k++)
            for (int j = 0; j < width; j++)
                s += (uint32_t)(rl__peak_operand(0, k, j) * rl__peak_operand(1, 0, j));
    return s;
}

bool rl_peak_check(rl_peak_kind k, int64_t n_iter, uint32_t check) {
    return check == rl__peak_expect((int)k, n_iter);
}
