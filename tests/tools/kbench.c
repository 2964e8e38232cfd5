/* kbench: kernel micro-benchmark.  Prints GB/s (weight bytes read per
 * second) and GFLOP/s (2*rows*cols*n_tok per second) of rl_matmul for each
 * weight type at decode (n_tok=1), verification (n_tok=8) and prefill
 * (n_tok=64) shapes, for each kernel table (ref, avx2, avx512vnni; the
 * tables run back to back for each shape, so they see the same load), 1
 * and 2 threads; and the machine's memory read bandwidth (sum over a 1 GiB
 * buffer, 1 and 2 threads).  Each figure is the best of 3 timed runs; the
 * "cpu" columns divide by the process CPU time instead of wall time, which
 * excludes time-slicing by other processes (for 2 threads they are
 * per-core rates).
 *
 * Weights rotate through enough copies (>= 256 MiB in all) that decode
 * reads come from DRAM, not the 48 MiB L3, as they would in a real model.
 *
 * usage: kbench [-q] [-a] [-c] [-r] [-k TABLE]... [-t 1|2] [-n N] [-s RxC]... [type ...]
 *        (-q: skip the 1 GiB bandwidth test; -a: also time ref at 4096x4096
 *        prefill, which is slow; -c: one weight copy, so the small shapes
 *        run from L2/L3 (kernel speed, not DRAM speed); -k: only these
 *        tables, repeatable: ref, avx2, avx512vnni; -t: only this thread
 *        count; -n: only this token count, repeatable: 1..64; -r: each type
 *        with resident tiles also in its resident layout, rl_mat_make_resident,
 *        the "r8" rows, run right after the row-major ones; -s ROWSxCOLS:
 *        only these shapes, repeatable)
 * default types: f32 f16 q4_0 q4_1 q5_0 q8_0 q4_K q6_K
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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
        printf("memory read bandwidth, %d thread%s: %.1f GB/s (checksum %llu)\n", nth,
               nth > 1 ? "s" : "", bytes / best / 1e9, (unsigned long long)(total & 0xffff));
    }
    free(buf);
}

static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static const char *const k_impl_names[] = {"auto", "ref", "avx2", "avx512vnni", "amx"};
static bool g_impl_on[5] = {false, true, true, true, true};
static int g_nth_only;          /* 0 = 1 and 2 threads */
static bool g_in_cache;         /* -c: no weight copies */
static bool g_resident;         /* -r: also the resident layout */
static int g_ntok[8], g_n_ntok; /* -n: token counts (default 1, 8, 64) */
typedef struct shape {
    int64_t rows, cols;
} shape;
static shape g_shapes[8]; /* -s: shapes (default 1536x576, 576x1536, 4096x4096) */
static int g_n_shapes;

static void bench_type(rl_type t, bool all, rl_threadpool *tp2) {
    static const shape def_shapes[] = {{1536, 576}, {576, 1536}, {4096, 4096}};
    const shape *shapes = g_n_shapes ? g_shapes : def_shapes;
    const int n_shapes = g_n_shapes ? g_n_shapes : 3;
    const rl_type_traits *tr = rl_type_get(t);
    for (int si = 0; si < n_shapes; si++) {
        shape sh = shapes[si];
        if (sh.cols % tr->blck_size) continue;
        size_t rs = rl_type_row_size(t, sh.cols), wbytes = rs * sh.rows;
        int n_copies = g_in_cache ? 1 : (int)((256u << 20) / wbytes) + 1;
        if (n_copies > 512) n_copies = 512;
        uint8_t *w = malloc(wbytes * n_copies);
        float *src = malloc(sizeof(float) * sh.cols);
        for (int64_t r = 0; r < sh.rows; r++) {
            for (int64_t i = 0; i < sh.cols; i++) src[i] = rnd() * 0.1f;
            tr->from_float(src, w + r * rs, sh.cols);
        }
        for (int c = 1; c < n_copies; c++) memcpy(w + c * wbytes, w, wbytes);
        int64_t max_tok = 64;
        for (int j = 0; j < g_n_ntok; j++)
            if (g_ntok[j] > max_tok) max_tok = g_ntok[j];
        float *x = malloc(sizeof(float) * sh.cols * max_tok);
        float *y = malloc(sizeof(float) * sh.rows * max_tok);
        for (int64_t i = 0; i < sh.cols * max_tok; i++) x[i] = rnd();
        rl_mat m = {.type = t, .n_rows = sh.rows, .n_cols = sh.cols, .row_size = rs};
        void *scratch = malloc(rl_matmul_scratch_size(&m, max_tok) + 64);
        static const int def_ntoks[] = {1, 8, 64};
        const int *ntoks = g_n_ntok ? g_ntok : def_ntoks;
        const int n_ntoks = g_n_ntok ? g_n_ntok : 3;
        for (int ni = 0; ni < n_ntoks; ni++) {
            const int ntk = ntoks[ni];
            for (int impl = RL_KERNELS_REF; impl <= RL_KERNELS_AMX; impl++) {
                if (!g_impl_on[impl] || (int)rl_kernels_init((rl_kernels_impl)impl) != impl)
                    continue;
                if (impl == RL_KERNELS_REF && ntk > 1 && sh.rows * sh.cols > 4000000 && !all)
                    continue;
                /* the resident copies, in this table's layout */
                rl_mat mr = m;
                uint8_t *wr = NULL;
                size_t rbytes = 0;
                if (g_resident && (rbytes = rl_mat_resident_bytes(&m)) > 0) {
                    wr = malloc(rbytes * n_copies);
                    mr.data = w;
                    rl_mat_make_resident(&mr, wr);
                    for (int c = 1; c < n_copies; c++) memcpy(wr + c * rbytes, wr, rbytes);
                }
                for (int run = 0; run < (wr ? 4 : 2); run++) {
                    const int nth = 1 + run % 2;
                    const bool r8 = run >= 2;
                    if (g_nth_only && nth != g_nth_only) continue;
                    rl_threadpool *tp = nth == 1 ? NULL : tp2;
                    rl_mat *mm = r8 ? &mr : &m;
                    uint8_t *base = r8 ? wr : w;
                    const size_t stride = r8 ? rbytes : wbytes;
                    double per = 1e30, cper = 1e30;
                    for (int rep = 0; rep < 3; rep++) {
                        double t0 = rl_time_s(), c0 = cpu_s(), dt;
                        int iters = 0;
                        do {
                            mm->data = base + (size_t)(iters % n_copies) * stride;
                            rl_matmul(mm, x, y, ntk, scratch, tp);
                            iters++;
                            dt = rl_time_s() - t0;
                        } while (dt < 0.1 && iters < 100000);
                        double dc = cpu_s() - c0;
                        if (dt / iters < per) per = dt / iters;
                        if (dc / iters < cper) cper = dc / iters;
                    }
                    double fl = 2.0 * sh.rows * sh.cols * ntk;
                    printf("%-5s %5lldx%-5lld n_tok=%-2d %-10s%s %dT  %8.1f us  %6.2f GB/s  %7.2f "
                           "GFLOP/s"
                           "  | cpu %8.1f us  %6.2f GB/s  %7.2f GFLOP/s\n",
                           tr->name, (long long)sh.rows, (long long)sh.cols, ntk,
                           rl_kernels_impl_name(), r8 ? " r8" : "", nth, per * 1e6,
                           wbytes / per / 1e9, fl / per / 1e9, cper * 1e6, wbytes / cper / 1e9,
                           fl / cper / 1e9);
                    fflush(stdout);
                }
                free(wr);
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
    bool quick = false, all = false, k_sel = false;
    rl_type types[32];
    int nt = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-q"))
            quick = true;
        else if (!strcmp(argv[i], "-a"))
            all = true;
        else if (!strcmp(argv[i], "-c"))
            g_in_cache = true;
        else if (!strcmp(argv[i], "-r"))
            g_resident = true;
        else if (!strcmp(argv[i], "-n") && i + 1 < argc) {
            int v = atoi(argv[++i]);
            if (v < 1 || v > 512 || g_n_ntok == 8) {
                fprintf(stderr, "kbench: -n takes 1..512, at most 8 times\n");
                return 2;
            }
            g_ntok[g_n_ntok++] = v;
        } else if (!strcmp(argv[i], "-s") && i + 1 < argc) {
            long long r = 0, c = 0;
            if (sscanf(argv[++i], "%lldx%lld", &r, &c) != 2 || r < 1 || c < 1 || r > 1 << 20 ||
                c > 1 << 20 || g_n_shapes == 8) {
                fprintf(stderr, "kbench: -s takes ROWSxCOLS (1..1048576 each), at most 8 times\n");
                return 2;
            }
            g_shapes[g_n_shapes++] = (shape){r, c};
        } else if (!strcmp(argv[i], "-t") && i + 1 < argc)
            g_nth_only = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-k") && i + 1 < argc) {
            if (!k_sel) memset(g_impl_on, 0, sizeof g_impl_on);
            k_sel = true;
            const char *k = argv[++i];
            int hit = 0;
            for (int j = 1; j < 5; j++)
                if (!strcmp(k, k_impl_names[j])) g_impl_on[hit = j] = true;
            if (!hit) {
                fprintf(stderr, "kbench: unknown table '%s' (ref, avx2, avx512vnni, amx)\n", k);
                return 2;
            }
        } else if (nt < 32 && rl_type_from_name(argv[i], &types[nt]) &&
                   rl_matmul_supports(types[nt]))
            nt++;
        else {
            fprintf(stderr, "kbench: unknown or unsupported type '%s'\n", argv[i]);
            return 2;
        }
    }
    if (nt == 0) {
        const rl_type def[] = {RL_TYPE_F32,  RL_TYPE_F16,  RL_TYPE_Q4_0, RL_TYPE_Q4_1,
                               RL_TYPE_Q5_0, RL_TYPE_Q8_0, RL_TYPE_Q4_K, RL_TYPE_Q6_K};
        for (size_t i = 0; i < sizeof def / sizeof def[0]; i++) types[nt++] = def[i];
    }
    if (!quick) bench_bandwidth();
    rl_threadpool *tp2 = rl_threadpool_new(2);
    for (int i = 0; i < nt; i++) bench_type(types[i], all, tp2);
    rl_threadpool_free(tp2);
    return 0;
}
