/* `redline bench`: prompt-processing and generation speed, llama-bench
 * style, plus this machine's memory read bandwidth and the decode roofline.
 *
 *   redline bench [-m MODEL] [-p 128,512] [-n 128] [-t 1,2] [-r 5] [--json]
 *                 [--no-bw] [--bw-mib 1024] [--np 8,32] [--np-gen 32] [--no-peak]
 *                 [--no-fast-tiles]
 *
 * Tests (the same definitions as llama-bench):
 *   ppN: one prefill forward of N tokens (random ids) from an empty cache;
 *        logits of the last token only.  t/s = N / time.
 *   tgN: N single-token decode steps from an empty cache (positions
 *        0..N-1).  t/s = N / time.
 *   bdS: batched decode, only with --np: S sequences decode --np-gen steps
 *        together from empty caches (each step one forward of S tokens, one
 *        per sequence, logits for all S).  t/s = S * steps / time (total).
 * Each test runs once untimed (warm-up), then -r times; the table gives the
 * median and the min/max of the repetitions (wall clock), and "cpu t/s":
 * the median of n * threads / (process CPU seconds), which on a loaded,
 * shared machine estimates the speed without time-slicing (spin-waiting
 * threads count as busy, so it underestimates multi-thread gains).  Thread counts run in the
 * order given, each with its own thread pool.
 *
 * Bandwidth: a buffer of --bw-mib MiB (default 1024) is summed with AVX2
 * loads (8 independent accumulators), split over the T threads of the pool
 * of each thread count.  So that the roofline is measured under the same
 * conditions as the decode it bounds (on a shared machine both move with
 * the load), one bandwidth pass runs right before every timed repetition
 * of every tg test (and 5 passes when there is no tg test); the median is
 * reported.  A warm-up pass first faults the pages in.  The decode roofline is bandwidth / bytes
 * read per token, where the bytes read are every weight tensor the forward streams: all tensor data
 * (rl_model_weight_bytes) minus the token-embedding table, which is only gathered one row per token
 * -- unless the output projection is tied to it, in which case the whole table is read by the
 * output matmul.  For a mixture-of-experts model the bytes are the active ones
 * (rl_model_active_bytes_of): attention + router + k of the n_expert blocks of every expert
 * tensor + the dense/shared weights + one embedding row + the output head, printed with that
 * breakdown ("active_bytes" in --json).
 *
 * Compute peaks (kernels.h, rl_peak_run): for each thread count, every
 * thread runs a chain of each available tier's multiply-add (int8 AVX2
 * vpmaddubsw+vpmaddwd+vpaddd, int8 AVX512-VNNI vpdpbusd, fp32 FMA) for
 * about 0.1 s; the best of 3 passes is reported as multiply-adds per second.
 * Prefill and batched-decode results are then also given as a fraction of
 * the int8 peak of the active kernel tier: t/s x multiply-adds per token /
 * peak, where the multiply-adds per token are those of the weight matmuls
 * counted from the model's tensor shapes (every 2-D+ ".weight" tensor but
 * the token embeddings, or those once when the output is tied to them;
 * expert tensors scaled by expert_used_count / n_expert), the output head
 * counted once per prompt for ppN (only its last position computes logits)
 * and once per sequence for bdS.  Attention
 * (q.k, p.v) is not counted, so the fraction slightly understates the
 * arithmetic done at long contexts.  The matmul calls themselves are also
 * timed (rl_matmul_stats: wall time and multiply-adds inside
 * rl_matmul_multi_ex, on the calling thread, so the time covers the whole
 * parallel dispatch): "inside the matmuls" gives their share of the step's
 * wall time and their own multiply-adds per second as a fraction of the
 * peak, the figure that says how near the tile kernels run to the
 * arithmetic roofline, apart from the step's other work ("matmul_*" in
 * --json).
 *
 * ppN runs its prompt as prompt tokens (rl_batch.prompt, as in the engine);
 * tgN and bdS as generated tokens.  q4_K/q6_K/q4_1 layer matrices are
 * resident tiles (repacked at load: every token takes the tiles' reduction).
 * --no-fast-tiles (rl_matmul_set_fast_tiles(false) before the load) keeps
 * the file's layout and sends every token down the per-token path: the
 * baseline of the tiles.
 *
 * The KV cache is contiguous f16 (kv/seqkv.h) of max(pp, tg) slots.
 * Diagnostics go to stderr; the table (or JSON) to stdout.
 */
#include <immintrin.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/rng.h"
#include "cli/args.h"
#include "cli/cli.h"
#include "cli/report.h"
#include "kv/seqkv.h"
#include "kernels/kernels.h"
#include "model/model.h"

#define B_MAX_LIST 16

static void usage(FILE *f) {
    fprintf(f,
            "usage: redline bench [-m MODEL] [options]\n\n"
            "  -m, --model FILE       GGUF model (default $REDLINE_MODEL or %s)\n"
            "  -p, --n-prompt LIST    prompt lengths, comma-separated (default 128,512; 0 = none)\n"
            "  -n, --n-gen LIST       generation lengths (default 128; 0 = none)\n"
            "  -t, --threads LIST     thread counts (default 1,2)\n"
            "  -r, --repetitions N    timed runs per test (default 5)\n"
            "      --json             JSON output instead of the table\n"
            "      --no-bw            skip the memory-bandwidth measurement\n"
            "      --bw-mib N         bandwidth buffer size in MiB (default 1024)\n"
            "      --np LIST          batched-decode tests: sequences decoding together (bdS)\n"
            "      --np-gen N         decode steps of each bdS test (default 32)\n"
            "      --no-peak          skip the compute-peak measurement\n"
            "      --no-fast-tiles    no tiles: layers not repacked at load, every token on\n"
            "                         the per-token matmul path (the baseline of the\n"
            "                         q4_K/q6_K/q4_1 tiles)\n"
            "  -h, --help             this text\n",
            RL_DEFAULT_MODEL);
}

/* ---------------- memory bandwidth ---------------- */

typedef struct bw_job {
    const uint8_t *buf;
    size_t bytes;
    double sums[64];
} bw_job;

__attribute__((target("avx2"))) static double bw_sum_avx2(const uint8_t *p, size_t n) {
    __m256 a[8];
    for (int k = 0; k < 8; k++) a[k] = _mm256_setzero_ps();
    for (size_t i = 0; i + 256 <= n; i += 256)
        for (int k = 0; k < 8; k++)
            a[k] = _mm256_add_ps(a[k], _mm256_load_ps((const float *)(p + i + 32 * k)));
    for (int k = 1; k < 8; k++) a[0] = _mm256_add_ps(a[0], a[k]);
    float f[8];
    _mm256_storeu_ps(f, a[0]);
    return (double)f[0] + f[1] + f[2] + f[3] + f[4] + f[5] + f[6] + f[7];
}

static double bw_sum_plain(const uint8_t *p, size_t n) {
    const uint64_t *q = (const uint64_t *)p;
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (size_t i = 0; i + 4 <= n / 8; i += 4) {
        s0 += q[i];
        s1 += q[i + 1];
        s2 += q[i + 2];
        s3 += q[i + 3];
    }
    return (double)(s0 + s1 + s2 + s3);
}

static bool g_avx2;

static void bw_task(void *ctx, int ith, int nth) {
    bw_job *J = ctx;
    size_t per = (J->bytes / (size_t)nth) & ~(size_t)4095;
    const uint8_t *p = J->buf + per * (size_t)ith;
    size_t n = ith == nth - 1 ? J->bytes - per * (size_t)ith : per;
    J->sums[ith & 63] = g_avx2 ? bw_sum_avx2(p, n) : bw_sum_plain(p, n);
}

/* Read bandwidth of one pass over the buffer with pool tp, bytes/s. */
static double bw_pass(bw_job *J, rl_threadpool *tp) {
    double t0 = rl_time_s();
    rl_threadpool_run(tp, bw_task, J);
    return (double)J->bytes / (rl_time_s() - t0);
}

/* ---------------- compute peaks ---------------- */

typedef struct peak_job {
    rl_peak_kind kind;
    int64_t n_iter;
    uint64_t macs[64];
    uint32_t check[64];
} peak_job;

static void peak_task(void *ctx, int ith, int nth) {
    (void)nth;
    peak_job *J = ctx;
    J->macs[ith & 63] = rl_peak_run(J->kind, J->n_iter, &J->check[ith & 63]);
}

/* Multiply-adds per second of kind k over the pool's threads: a first
 * short pass (its checksums verified against the scalar model, outside the
 * timing) sizes the step count for about 0.1 s, then the best of 3
 * passes.  0 if a checksum is wrong. */
static double peak_rate(rl_peak_kind k, rl_threadpool *tp) {
    peak_job J = {.kind = k, .n_iter = 1 << 14};
    int nth = rl_threadpool_n_threads(tp);
    double best = 0, dt = 0;
    for (int pass = -1; pass < 3; pass++) {
        double t0 = rl_time_s();
        rl_threadpool_run(tp, peak_task, &J);
        dt = rl_time_s() - t0;
        uint64_t n = 0;
        for (int i = 0; i < nth && i < 64; i++) {
            if (pass == -1 && !rl_peak_check(k, J.n_iter, J.check[i])) return 0;
            n += J.macs[i];
        }
        if (pass >= 0 && dt > 0 && (double)n / dt > best) best = (double)n / dt;
        if (pass == -1) { /* calibrate: about 0.1 s per pass */
            double scale = dt > 0 ? 0.1 / dt : 64;
            J.n_iter = (int64_t)((double)J.n_iter * (scale > 4096 ? 4096 : scale));
            if (J.n_iter < 1) J.n_iter = 1;
        }
    }
    return best;
}

/* Multiply-adds of the weight matmuls per token, from the tensor shapes
 * (see the file comment); *head gets the output head's share of the total
 * (output.weight, or the token embeddings when the output is tied). */
static double macs_per_token(const rl_model *m, double *head) {
    const rl_gguf *g = rl_model_gguf(m);
    bool tied = rl_gguf_find_tensor(g, "output.weight") == NULL;
    char key[96];
    snprintf(key, sizeof key, "%s.expert_used_count", rl_model_arch(m));
    int64_t used = 0;
    rl_err e = {0};
    if (rl_gguf_get_i64(g, key, 0, &used, &e)) used = 0;
    double total = 0;
    *head = 0;
    for (int64_t i = 0; i < rl_gguf_n_tensors(g); i++) {
        const rl_gguf_tensor *t = rl_gguf_tensor_at(g, i);
        size_t len = strlen(t->name);
        if (t->n_dims < 2 || len < 7 || strcmp(t->name + len - 7, ".weight") != 0) continue;
        bool emb = strcmp(t->name, "token_embd.weight") == 0;
        if (emb && !tied) continue;
        double n = (double)t->n_elements;
        if (t->n_dims >= 3 && used > 0 && t->ne[2] > 1) n = n * (double)used / (double)t->ne[2];
        if (emb || strcmp(t->name, "output.weight") == 0) *head = n;
        total += n;
    }
    return total;
}

/* Multiply-adds per token of one test: a prompt (ppN) computes logits at
 * its last position only, so the head counts once per N tokens there; a
 * batched-decode step (bdS) computes them for every sequence. */
static double test_macs_per_token(double macs_tok, double head, const char *test, int n_tok) {
    return test[0] == 'p' && n_tok > 0 ? macs_tok - head + head / n_tok : macs_tok;
}

/* ---------------- model timing ---------------- */

typedef struct bench_res {
    char test[16];
    int threads, n_tok;
    double ts[64];  /* tokens/s per repetition (wall clock) */
    double cts[64]; /* tokens/s per repetition by CPU time: n * threads / cpu s */
    double mms[64]; /* multiply-adds/s inside the matmul calls, per repetition */
    double mmf[64]; /* the matmul calls' share of the wall time, per repetition */
    int n;
    double med, min, max, cmed, mm_med, mm_share;
} bench_res;

static rl_status run_pp(rl_seqkv *kv, rl_model *m, const int32_t *toks, int n, float *logits,
                        rl_threadpool *tp, rl_err *err) {
    kv->prompt = true; /* a prompt: the many-token path, as the engine runs one */
    rl_status st = rl_seqkv_eval(kv, m, 0, toks, n, 0, false, logits, tp, err);
    kv->prompt = false;
    return st;
}

static rl_status run_tg(rl_seqkv *kv, rl_model *m, const int32_t *toks, int n, float *logits,
                        rl_threadpool *tp, rl_err *err) {
    for (int i = 0; i < n; i++) {
        rl_status st = rl_seqkv_eval(kv, m, 0, toks + i, 1, i, false, logits, tp, err);
        if (st) return st;
    }
    return RL_OK;
}

/* One batched-decode test: S sequences (the whole of bkv) decode n steps
 * together; the logits buffer holds S rows. */
static rl_status run_bd(rl_seqkv *bkv, rl_model *m, const int32_t *toks, int n_toks, int S, int n,
                        float *logits, rl_threadpool *tp, rl_err *err) {
    for (int i = 0; i < n; i++) {
        for (int s = 0; s < S; s++) {
            bkv->tok[s] = toks[(s * 7 + i) % n_toks];
            bkv->pos[s] = i;
            bkv->seq[s] = s;
            bkv->want[s] = true;
        }
        rl_batch b = {.n_tok = S,
                      .token = bkv->tok,
                      .pos = bkv->pos,
                      .seq = bkv->seq,
                      .want_logits = bkv->want,
                      .n_seq = S,
                      .block_tables = bkv->tables,
                      .n_blocks = bkv->n_blocks};
        rl_status st = rl_model_forward(m, &b, bkv->layers, logits, tp, err);
        if (st) return st;
    }
    return RL_OK;
}

/* Index of thread count t in th[0..n). */
static int thread_index(const int32_t *th, int n, int t) {
    int i = 0;
    while (i < n - 1 && th[i] != t) i++;
    return i;
}

/* Dense: every tensor but an untied embedding table.  MoE: the active
 * bytes (rl_model_active_bytes_of: attention + router + k experts +
 * dense/shared + one embedding row + head). */
static size_t read_bytes_per_token(const rl_model *m, bool *tied) {
    const rl_gguf *g = rl_model_gguf(m);
    const rl_gguf_tensor *emb = rl_gguf_find_tensor(g, "token_embd.weight");
    *tied = rl_gguf_find_tensor(g, "output.weight") == NULL;
    rl_model_active_bytes a = rl_model_active_bytes_of(m);
    if (a.n_expert > 0) return a.total;
    size_t total = rl_model_weight_bytes(m);
    if (emb && !*tied && emb->nbytes <= total) total -= emb->nbytes;
    return total;
}

static double mib(size_t b) {
    return (double)b / (1 << 20);
}

int rl_cmd_bench(int argc, char **argv) {
    const char *model_arg = NULL;
    int32_t pp[B_MAX_LIST] = {128, 512}, tg[B_MAX_LIST] = {128}, th[B_MAX_LIST] = {1, 2};
    int32_t np[B_MAX_LIST] = {0};
    int n_pp = 2, n_tg = 1, n_th = 2, n_np = 0;
    int32_t reps = 5, bw_mib = 1024, np_gen = 32;
    bool json = false, do_bw = true, do_peak = true, fast_tiles = true;
    rl_args A;
    rl_args_init(&A, "redline bench", argc, argv);
    while (rl_args_next(&A)) {
        bool ok = true;
        if (rl_args_is(&A, "-h|--help")) {
            usage(stdout);
            return 0;
        } else if (rl_args_is(&A, "-m|--model"))
            ok = rl_args_str(&A, &model_arg);
        else if (rl_args_is(&A, "-p|--n-prompt"))
            ok = rl_args_list(&A, 0, 1 << 20, pp, &n_pp, B_MAX_LIST);
        else if (rl_args_is(&A, "-n|--n-gen"))
            ok = rl_args_list(&A, 0, 1 << 20, tg, &n_tg, B_MAX_LIST);
        else if (rl_args_is(&A, "-t|--threads"))
            ok = rl_args_list(&A, 1, 64, th, &n_th, B_MAX_LIST);
        else if (rl_args_is(&A, "-r|--repetitions"))
            ok = rl_args_i32(&A, 1, 64, &reps);
        else if (rl_args_is(&A, "--bw-mib"))
            ok = rl_args_i32(&A, 16, 65536, &bw_mib);
        else if (rl_args_is(&A, "--json"))
            json = true;
        else if (rl_args_is(&A, "--no-bw"))
            do_bw = false;
        else if (rl_args_is(&A, "--np"))
            ok = rl_args_list(&A, 1, 1024, np, &n_np, B_MAX_LIST);
        else if (rl_args_is(&A, "--np-gen"))
            ok = rl_args_i32(&A, 1, 1 << 16, &np_gen);
        else if (rl_args_is(&A, "--no-peak"))
            do_peak = false;
        else if (rl_args_is(&A, "--no-fast-tiles"))
            fast_tiles = false;
        else
            ok = rl_args_unknown(&A);
        if (!ok) return 2;
    }
    int max_pp = 0, max_tg = 0, max_np = 0;
    for (int i = 0; i < n_np; i++) max_np = np[i] > max_np ? np[i] : max_np;
    for (int i = 0; i < n_pp; i++) max_pp = pp[i] > max_pp ? pp[i] : max_pp;
    for (int i = 0; i < n_tg; i++) max_tg = tg[i] > max_tg ? tg[i] : max_tg;
    int n_ctx = max_pp > max_tg ? max_pp : max_tg;
    if (n_ctx < 1) n_ctx = 1;

    rl_kernels_init(RL_KERNELS_AUTO);
    rl_matmul_set_fast_tiles(fast_tiles);
    rl_matmul_stats_enable(true);
    g_avx2 = __builtin_cpu_supports("avx2");
    const char *path = rl_cli_model_path(model_arg);
    rl_err err = {0};
    rl_model *m = NULL;
    int max_batch = max_pp > max_np ? max_pp : max_np;
    rl_model_opts mo = {.max_batch = max_batch > 0 ? max_batch : 1, .prefault = true};
    if (rl_model_load(path, &mo, &m, &err)) {
        fprintf(stderr, "redline bench: %s\n", err.msg);
        return 1;
    }
    rl_seqkv kv, bkv = {0};
    if (rl_seqkv_init(&kv, m, n_ctx, 1, 0, RL_TYPE_F16, &err) ||
        (max_np > 0 && rl_seqkv_init(&bkv, m, np_gen, max_np, 0, RL_TYPE_F16, &err))) {
        fprintf(stderr, "redline bench: %s\n", err.msg);
        rl_seqkv_free(&kv);
        rl_model_free(m);
        return 1;
    }
    if (max_np > 0) {
        memset(bkv.k_mem, 0,
               (size_t)bkv.n_layer * bkv.layers[0].k_block_bytes * (size_t)bkv.n_blocks_seq *
                   max_np);
        memset(bkv.v_mem, 0,
               (size_t)bkv.n_layer * bkv.layers[0].v_block_bytes * (size_t)bkv.n_blocks_seq *
                   max_np);
    }
    /* Touch the KV pages so first-touch faults are not timed. */
    memset(kv.k_mem, 0, (size_t)kv.n_layer * kv.layers[0].k_block_bytes * (size_t)kv.n_blocks_seq);
    memset(kv.v_mem, 0, (size_t)kv.n_layer * kv.layers[0].v_block_bytes * (size_t)kv.n_blocks_seq);

    int32_t V = rl_model_n_vocab(m);
    int32_t *toks = rl_malloc((size_t)n_ctx * sizeof *toks);
    float *logits = rl_malloc((size_t)V * sizeof(float) * (size_t)(max_np > 1 ? max_np : 1));
    bench_res *res = rl_calloc((size_t)(n_th * (n_pp + n_tg + n_np)), sizeof *res);
    int n_res = 0, rc = 0;
    bw_job J = {0}; /* J.buf: freed at done */
    if (!toks || !logits || !res) {
        fprintf(stderr, "redline bench: out of memory\n");
        rc = 1;
        goto done;
    }
    rl_rng rng;
    rl_rng_seed(&rng, 1234);
    for (int i = 0; i < n_ctx; i++) toks[i] = (int32_t)(rl_rng_u64(&rng) % (uint64_t)V);

    bool tied;
    size_t rd_bytes = read_bytes_per_token(m, &tied);
    const rl_model_active_bytes act = rl_model_active_bytes_of(m);
    fprintf(stderr, "redline bench: %s (%s), %.1f MiB read per token, kernels %s%s\n", path,
            rl_model_arch(m), (double)rd_bytes / (1 << 20), rl_kernels_impl_name(),
            fast_tiles ? "" : ", fast tiles off");

    double bwt[B_MAX_LIST] = {0}, peaks[B_MAX_LIST][RL_PEAK_COUNT] = {{0}};
    double macs_head = 0;
    const double macs_tok = macs_per_token(m, &macs_head);
    /* the int8 peak the matmul leaves of the active table can reach */
    const char *kn = rl_kernels_impl_name();
    const rl_peak_kind i8_kind = strcmp(kn, "amx") == 0          ? RL_PEAK_I8_AMX
                                 : strcmp(kn, "avx512vnni") == 0 ? RL_PEAK_I8_VNNI
                                                                 : RL_PEAK_I8_AVX2;
    if (!rl_peak_available(i8_kind)) do_peak = false;
    J.bytes = (size_t)bw_mib << 20;
    if (do_bw) {
        void *buf = NULL;
        if (posix_memalign(&buf, 4096, J.bytes)) {
            fprintf(stderr, "redline bench: no memory for a %d MiB bandwidth buffer\n", bw_mib);
            do_bw = false;
        } else {
            memset(buf, 1, J.bytes);
            J.buf = buf;
        }
    }
    for (int ti = 0; ti < n_th; ti++) {
        rl_threadpool *tp = rl_threadpool_new(th[ti]);
        if (!tp) {
            fprintf(stderr, "redline bench: cannot start %d threads\n", th[ti]);
            rc = 1;
            goto done;
        }
        double bws[B_MAX_LIST * 64];
        int n_bws = 0;
        if (do_peak)
            for (int k = 0; k < RL_PEAK_COUNT; k++)
                if (rl_peak_available((rl_peak_kind)k))
                    peaks[ti][k] = peak_rate((rl_peak_kind)k, tp);
        if (do_bw) bw_pass(&J, tp); /* warm-up */
        for (int k = 0; k < n_pp + n_tg + n_np; k++) {
            bool is_pp = k < n_pp, is_bd = k >= n_pp + n_tg;
            int n = is_pp ? pp[k] : is_bd ? np_gen : tg[k - n_pp];
            int S = is_bd ? np[k - n_pp - n_tg] : 1;
            if (n == 0) continue;
            bench_res *R = &res[n_res++];
            if (is_bd)
                snprintf(R->test, sizeof R->test, "bd%d", S);
            else
                snprintf(R->test, sizeof R->test, "%s%d", is_pp ? "pp" : "tg", n);
            R->threads = th[ti];
            R->n_tok = n * S;
            fprintf(stderr, "  %s t=%d ...\n", R->test, th[ti]);
            for (int r = -1; r < reps; r++) {
                if (do_bw && !is_pp && !is_bd && r >= 0) bws[n_bws++] = bw_pass(&J, tp);
                rl_matmul_stats_take();
                double t0 = rl_time_s(), c0 = rl_report_cpu_s();
                rl_status st = is_pp   ? run_pp(&kv, m, toks, n, logits, tp, &err)
                               : is_bd ? run_bd(&bkv, m, toks, n_ctx, S, n, logits, tp, &err)
                                       : run_tg(&kv, m, toks, n, logits, tp, &err);
                double dt = rl_time_s() - t0, dc = rl_report_cpu_s() - c0;
                const rl_matmul_stats ms = rl_matmul_stats_take();
                if (st) {
                    fprintf(stderr, "redline bench: %s\n", err.msg);
                    rl_threadpool_free(tp);
                    rc = 1;
                    goto done;
                }
                if (r >= 0) {
                    R->cts[R->n] = dc > 0 ? (double)R->n_tok * th[ti] / dc : 0;
                    R->mms[R->n] = ms.seconds > 0 ? ms.madds / ms.seconds : 0;
                    R->mmf[R->n] = dt > 0 ? ms.seconds / dt : 0;
                    R->ts[R->n++] = R->n_tok / dt;
                }
            }
            double tmp[64];
            memcpy(tmp, R->ts, sizeof(double) * (size_t)R->n);
            R->med = rl_report_percentile(tmp, R->n, 0.5); /* sorts tmp */
            R->min = tmp[0];
            R->max = tmp[R->n - 1];
            memcpy(tmp, R->cts, sizeof(double) * (size_t)R->n);
            R->cmed = rl_report_percentile(tmp, R->n, 0.5);
            memcpy(tmp, R->mms, sizeof(double) * (size_t)R->n);
            R->mm_med = rl_report_percentile(tmp, R->n, 0.5);
            memcpy(tmp, R->mmf, sizeof(double) * (size_t)R->n);
            R->mm_share = rl_report_percentile(tmp, R->n, 0.5);
        }
        if (do_bw) {
            while (n_bws < 5) bws[n_bws++] = bw_pass(&J, tp);
            bwt[ti] = rl_report_percentile(bws, n_bws, 0.5);
        }
        rl_threadpool_free(tp);
    }

    const char *mname = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    if (json) {
        json_t *bw = json_array(), *rs = json_array();
        for (int ti = 0; do_bw && ti < n_th; ti++)
            json_array_append_new(
                bw, json_pack("{s:i, s:f}", "threads", (int)th[ti], "bytes_per_s", bwt[ti]));
        for (int i = 0; i < n_res; i++) {
            bench_res *R = &res[i];
            json_t *samples = json_array();
            for (int k = 0; k < R->n; k++) json_array_append_new(samples, json_real(R->ts[k]));
            json_t *o =
                json_pack("{s:s, s:i, s:i, s:f, s:f, s:f, s:f, s:o}", "test", R->test, "threads",
                          R->threads, "n_tok", R->n_tok, "median_ts", R->med, "min_ts", R->min,
                          "max_ts", R->max, "cpu_median_ts", R->cmed, "samples_ts", samples);
            if (o && do_bw && R->test[0] == 't') {
                int ti = 0;
                while (th[ti] != R->threads) ti++;
                double roof = bwt[ti] / (double)rd_bytes;
                json_object_set_new(o, "roofline_ts", rl_report_real(roof));
                json_object_set_new(o, "roofline_frac", rl_report_real(R->med / roof));
            }
            double pk = do_peak ? peaks[thread_index(th, n_th, R->threads)][i8_kind] : 0;
            if (o && pk > 0 && R->test[0] != 't') {
                const double mt = test_macs_per_token(macs_tok, macs_head, R->test, R->n_tok);
                json_object_set_new(o, "madds_per_token", json_real(mt));
                json_object_set_new(o, "int8_peak_frac", rl_report_real(R->med * mt / pk));
                json_object_set_new(o, "matmul_madds_per_s", rl_report_real(R->mm_med));
                json_object_set_new(o, "matmul_time_share", rl_report_real(R->mm_share));
                json_object_set_new(o, "matmul_int8_peak_frac", rl_report_real(R->mm_med / pk));
            }
            json_array_append_new(rs, o);
        }
        json_t *pj = json_array();
        for (int ti = 0; do_peak && ti < n_th; ti++)
            for (int k = 0; k < RL_PEAK_COUNT; k++)
                if (peaks[ti][k] > 0)
                    json_array_append_new(pj, json_pack("{s:i, s:s, s:f}", "threads", (int)th[ti],
                                                        "kind", rl_peak_name((rl_peak_kind)k),
                                                        "madds_per_s", peaks[ti][k]));
        json_t *root =
            json_pack("{s:s, s:s, s:s, s:I, s:I, s:b, s:f, s:o, s:o, s:o}", "model", mname, "arch",
                      rl_model_arch(m), "kernels", rl_kernels_impl_name(), "weight_bytes",
                      (json_int_t)rl_model_weight_bytes(m), "read_bytes_per_token",
                      (json_int_t)rd_bytes, "tied_output", (int)tied, "madds_per_token", macs_tok,
                      "bandwidth", bw, "peaks", pj, "results", rs);
        if (root) json_object_set_new(root, "fast_tiles", json_boolean(fast_tiles));
        if (root && act.n_expert > 0)
            json_object_set_new(
                root, "active_bytes",
                json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:i, s:i}", "attention",
                          (json_int_t)act.attn, "router", (json_int_t)act.router, "experts",
                          (json_int_t)act.experts, "dense", (json_int_t)act.dense, "embd_row",
                          (json_int_t)act.embd_row, "head", (json_int_t)act.head, "total",
                          (json_int_t)act.total, "n_expert", (int)act.n_expert, "n_used",
                          (int)act.n_used));
        if (rl_report_json_write(stdout, root, false, "redline bench")) rc = 1;
    } else {
        printf("| %-28s | %9s | %7s | %7s | %10s | %10s | %10s | %10s |\n", "model", "size MiB",
               "threads", "test", "t/s median", "min", "max", "cpu t/s");
        printf("|%s|%s|%s|%s|%s|%s|%s|%s|\n", "------------------------------",
               "----------:", "--------:", "--------:", "-----------:", "-----------:",
               "-----------:", "-----------:");
        for (int i = 0; i < n_res; i++) {
            bench_res *R = &res[i];
            printf("| %-28.28s | %9.1f | %7d | %7s | %10.2f | %10.2f | %10.2f | %10.2f |\n", mname,
                   (double)rl_model_weight_bytes(m) / (1 << 20), R->threads, R->test, R->med,
                   R->min, R->max, R->cmed);
        }
        if (do_bw) {
            printf("\nmemory read bandwidth (%d MiB buffer, AVX2 sum, median of passes interleaved "
                   "with tg runs):\n",
                   bw_mib);
            for (int ti = 0; ti < n_th; ti++)
                printf("  %d thread%s: %.2f GB/s\n", th[ti], th[ti] > 1 ? "s" : "", bwt[ti] / 1e9);
            if (act.n_expert > 0)
                printf("decode roofline (active bytes, %d of %d experts): %.1f MiB per token = "
                       "attention %.1f + router %.2f + experts %.1f + dense/shared %.1f + "
                       "embedding row %.3f + head %.1f MiB%s\n",
                       (int)act.n_used, (int)act.n_expert, mib(act.total), mib(act.attn),
                       mib(act.router), mib(act.experts), mib(act.dense), mib(act.embd_row),
                       mib(act.head), tied ? " (output tied to the embeddings)" : "");
            else
                printf("decode roofline: %.1f MiB of weights read per token%s\n",
                       (double)rd_bytes / (1 << 20),
                       tied ? " (output tied to the embeddings)" : "");
            for (int i = 0; i < n_res; i++) {
                bench_res *R = &res[i];
                if (R->test[0] != 't') continue;
                int ti = 0;
                while (th[ti] != R->threads) ti++;
                double roof = bwt[ti] / (double)rd_bytes;
                printf("  %s t=%d: %.2f t/s of a %.2f t/s roofline = %.0f%%\n", R->test, R->threads,
                       R->med, roof, 100.0 * R->med / roof);
            }
        }
        if (do_peak) {
            printf("\ncompute peaks (multiply-adds/s, best of 3 passes of about 0.1 s):\n");
            for (int ti = 0; ti < n_th; ti++) {
                printf("  %d thread%s:", th[ti], th[ti] > 1 ? "s" : "");
                for (int k = 0; k < RL_PEAK_COUNT; k++)
                    if (peaks[ti][k] > 0)
                        printf("  %s %.1f G", rl_peak_name((rl_peak_kind)k), peaks[ti][k] / 1e9);
                printf("\n");
            }
            printf(
                "matmul multiply-adds per token (weight shapes): %.3f G, of which the output head "
                "%.3f G (a prompt computes it at its last position only); int8 peak: %s\n",
                macs_tok / 1e9, macs_head / 1e9, rl_peak_name(i8_kind));
            for (int i = 0; i < n_res; i++) {
                bench_res *R = &res[i];
                if (R->test[0] == 't') continue;
                double pk = peaks[thread_index(th, n_th, R->threads)][i8_kind];
                const double mt = test_macs_per_token(macs_tok, macs_head, R->test, R->n_tok);
                if (pk > 0)
                    printf("  %s t=%d: %.2f t/s x %.3f G = %.1f G/s = %.1f%% of the int8 peak; "
                           "inside the matmuls (%.0f%% of the time): %.1f G/s = %.1f%%\n",
                           R->test, R->threads, R->med, mt / 1e9, R->med * mt / 1e9,
                           100.0 * R->med * mt / pk, 100.0 * R->mm_share, R->mm_med / 1e9,
                           100.0 * R->mm_med / pk);
            }
        }
    }
done:
    rl_seqkv_free(&bkv);
    free((void *)J.buf);
    rl_free(res);
    rl_free(logits);
    rl_free(toks);
    rl_seqkv_free(&kv);
    rl_model_free(m);
    return rc;
}
