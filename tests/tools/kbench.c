/* kbench: kernel micro-benchmark.  Prints GB/s (weight bytes read per
 * second) and GFLOP/s (2*rows*cols*n_tok per second) of rl_matmul for each
 * weight type at decode (n_tok=1) and prefill (n_tok=64) shapes, ref vs
 * avx2, 1 and 2 threads; and the machine's memory read bandwidth (sum over
 * a 1 GiB buffer, 1 and 2 threads).
 *
 * Weights rotate through enough copies (>= 256 MiB in all) that decode
 * reads come from DRAM, not the 48 MiB L3, as they would in a real model.
 *
 * usage: kbench [-q] [-a] [type ...]   (-q: skip the 1 GiB bandwidth test;
 *        -a: also time ref at 4096x4096 prefill, which is slow)
 * default types: f32 f16 q4_0 q4_1 q5_0 q8_0 q4_K q6_K
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels-impl.h"

static uint64_t g_rng = 88172645463325252ull;
static float rnd(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (float)(g_rng >> 40) / 8388608.0f - 1.0f;
}

typedef struct bw_arg {
    const uint64_t *p;
    size_t n;
    uint64_t sum;
} bw_arg;

static void *bw_sum(void *v) {
    bw_arg *a = v;
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (size_t i = 0; i + 4 <= a->n; i += 4) {
        s0 += a->p[i];
        s1 += a->p[i + 1];
        s2 += a->p[i + 2];
        s3 += a->p[i + 3];
    }
    a->sum = s0 + s1 + s2 + s3;
    return NULL;
}

static void bench_bandwidth(void) {
    size_t bytes = (size_t)1 << 30, n = bytes / 8;
    uint64_t *buf = malloc(bytes);
    if (!buf) {
        printf("bandwidth: cannot allocate 1 GiB\n");
        return;
    }
    for (size_t i = 0; i < n; i++) buf[i] = i;
    for (int nth = 1; nth <= 2; nth++) {
        double best = 1e30;
        uint64_t total = 0;
        for (int rep = 0; rep < 3; rep++) {
            pthread_t th[2];
            bw_arg args[2];
            double t0 = rl_time_s();
            for (int k = 0; k < nth; k++) {
                args[k] = (bw_arg){buf + k * (n / nth), n / nth, 0};
                pthread_create(&th[k], NULL, bw_sum, &args[k]);
            }
            for (int k = 0; k < nth; k++) {
                pthread_join(th[k], NULL);
                total += args[k].sum;
            }
            double dt = rl_time_s() - t0;
            if (dt < best) best = dt;
        }
        printf("memory read bandwidth, %d thread%s: %.1f GB/s (checksum %llu)\n", nth, nth > 1 ? "s" : "",
               bytes / best / 1e9, (unsigned long long)(total & 0xffff));
    }
    free(buf);
}

typedef struct shape {
    int64_t rows, cols;
} shape;

static void bench_type(rl_type t, bool all, rl_threadpool *tp2) {
    static const shape shapes[] = {{1536, 576}, {576, 1536}, {4096, 4096}};
    const rl_type_traits *tr = rl_type_get(t);
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        shape sh = shapes[si];
        if (sh.cols % tr->blck_size) continue;
        size_t rs = rl_type_row_size(t, sh.cols), wbytes = rs * sh.rows;
        int n_copies = (int)((256u << 20) / wbytes) + 1;
        if (n_copies > 512) n_copies = 512;
        uint8_t *w = malloc(wbytes * n_copies);
        float *src = malloc(sizeof(float) * sh.cols);
        for (int64_t r = 0; r < sh.rows; r++) {
            for (int64_t i = 0; i < sh.cols; i++) src[i] = rnd() * 0.1f;
            tr->from_float(src, w + r * rs, sh.cols);
        }
        for (int c = 1; c < n_copies; c++) memcpy(w + c * wbytes, w, wbytes);
        const int64_t max_tok = 64;
        float *x = malloc(sizeof(float) * sh.cols * max_tok);
        float *y = malloc(sizeof(float) * sh.rows * max_tok);
        for (int64_t i = 0; i < sh.cols * max_tok; i++) x[i] = rnd();
        rl_mat m = {.type = t, .n_rows = sh.rows, .n_cols = sh.cols, .row_size = rs};
        void *scratch = malloc(rl_matmul_scratch_size(&m, max_tok) + 64);
        for (int ntk = 1; ntk <= max_tok; ntk *= 64) {
            for (int impl = RL_KERNELS_REF; impl <= RL_KERNELS_AVX2; impl++) {
                if ((int)rl_kernels_init((rl_kernels_impl)impl) != impl) continue;
                if (impl == RL_KERNELS_REF && ntk > 1 && sh.rows * sh.cols > 4000000 && !all) continue;
                for (int nth = 1; nth <= 2; nth++) {
                    rl_threadpool *tp = nth == 1 ? NULL : tp2;
                    double t0 = rl_time_s(), dt;
                    int iters = 0;
                    do {
                        m.data = w + (size_t)(iters % n_copies) * wbytes;
                        rl_matmul(&m, x, y, ntk, scratch, tp);
                        iters++;
                        dt = rl_time_s() - t0;
                    } while (dt < 0.25 && iters < 100000);
                    double per = dt / iters;
                    printf("%-5s %5lldx%-5lld n_tok=%-2d %-4s %dT  %8.1f us  %6.2f GB/s  %7.2f GFLOP/s\n",
                           tr->name, (long long)sh.rows, (long long)sh.cols, ntk, rl_kernels_impl_name(), nth,
                           per * 1e6, wbytes / per / 1e9, 2.0 * sh.rows * sh.cols * ntk / per / 1e9);
                    fflush(stdout);
                }
            }
        }
        free(scratch);
        free(w);
        free(src);
        free(x);
        free(y);
    }
}

int main(int argc, char **argv) {
    bool quick = false, all = false;
    rl_type types[32];
    int nt = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-q")) quick = true;
        else if (!strcmp(argv[i], "-a")) all = true;
        else if (nt < 32 && rl_type_from_name(argv[i], &types[nt]) && rl_matmul_supports(types[nt])) nt++;
        else {
            fprintf(stderr, "kbench: unknown or unsupported type '%s'\n", argv[i]);
            return 2;
        }
    }
    if (nt == 0) {
        const rl_type def[] = {RL_TYPE_F32, RL_TYPE_F16, RL_TYPE_Q4_0, RL_TYPE_Q4_1,
                               RL_TYPE_Q5_0, RL_TYPE_Q8_0, RL_TYPE_Q4_K, RL_TYPE_Q6_K};
        for (size_t i = 0; i < sizeof def / sizeof def[0]; i++) types[nt++] = def[i];
    }
    if (!quick) bench_bandwidth();
    rl_threadpool *tp2 = rl_threadpool_new(2);
    for (int i = 0; i < nt; i++) bench_type(types[i], all, tp2);
    rl_threadpool_free(tp2);
    return 0;
}
