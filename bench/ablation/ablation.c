/* bench/ablation: the technique table, measured -- a program of its own
 * over librl (built by `make test-bins` into build/bench/ablation).
 *
 *   build/bench/ablation -m MODEL [-md DRAFT] [--requests N] [--concurrency C]
 *       [--prompt-len L] [--output-len L] [--shared-prefix K] [--runs R]
 *       [--quality-text FILE] [--quality-tokens T] [--json] [--tiny] ...
 *
 * One fixed workload runs under a stack of configurations, each in a fresh
 * child process (ablation_run.c), R times interleaved (run 1 of every
 * row, then run 2, ...); the table shows medians and the spread of the
 * throughput.  Rows (each a precise engine configuration; see `cfgs`):
 *   naive            f32 weights (dequantized at load), f16 KV reserved for
 *                    n_ctx tokens per request (engine naive mode), static
 *                    batches, whole-prompt prefill, no prefix reuse
 *   + weight quant   the file's own quantized weights (integer kernels)
 *   + paged KV       KV blocks on demand (naive off) but still static batches
 *   + continuous     new requests join running batches; chunked prefill
 *   + prefix caching shared prompt prefixes reused
 *   + KV q8_0/q4_0   quantized KV pages (on the prefix-caching row)
 *   + speculative    draft model (-md) or n-gram lookup (on the prefix row)
 *   + structured     JSON-asking requests decode under their JSON schema
 *   everything       all of it, KV type --all-kv (q8_0)
 *
 * Workload (fixed by the seed): N requests in a closed loop of C clients
 * (a client submits its next request when its previous one finishes).
 * Request r is of kind r % 4: chat, code, summarization, JSON.  Its prompt
 * is K tokens of a shared system prompt, an instruction, and a slice of
 * real text encoded with the model's tokenizer (--text prose, --code C
 * source; by default the fixed files bench/ablation/prose.txt and
 * code.txt, which belong to the benchmark so that editing the project's
 * docs or code never moves its figures) at a seeded offset: L/2 tokens for chat and JSON, L for
 * code, 2L for summarization, each times a uniform factor in [0.75, 1.25]; output O tokens (O/2 for
 * summarization), times the same kind of factor.
 *
 * Quality: perplexity over T tokens of --quality-text (default
 * bench/ablation/prose.txt), KL divergence and
 * top-1 agreement against the reference (f32 weights, f32 KV), all computed
 * by each row's own model and KV types; greedy agreement: share of a row's
 * generated tokens that equal, position by position up to the first
 * difference, those of the row it builds on (JSON requests are left out
 * where a grammar applies).  --break-quality (a test hook) adds N(0, 1)
 * noise to the logits of every row's quality pass, to show the quality
 * columns are computed.
 */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ablation.h"
#include "base/rng.h"
#include "cli/args.h"
#include "cli/cli.h"
#include "cli/report.h"
#include "gguf/gguf.h"
#include "kernels/kernels.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

#define AB_CMD "bench/ablation"
#define AB_TEXT_PROSE                                                                              \
    "bench/ablation/prose.txt" /* a snapshot of docs/ARCHITECTURE.md (commit 269aa58) */
#define AB_TEXT_CODE                                                                               \
    "bench/ablation/code.txt" /* a snapshot of src/sched/sched.c (commit 269aa58) */

#define N_CFG 10
static ab_cfg cfgs[N_CFG] = {
    {"naive", "f32 weights, f16 KV reserved for n_ctx per request, static batches, no prefix reuse",
     RL_MODEL_WEIGHTS_F32, true, true, false, false, false, false, "f16", "f16", -1},
    {"+ weight quant", "naive with the file's quantized weights", RL_MODEL_WEIGHTS_STORED, true,
     true, false, false, false, false, "f16", "f16", 0},
    {"+ paged KV", "KV blocks allocated on demand; still static batches, whole-prompt prefill",
     RL_MODEL_WEIGHTS_STORED, false, true, false, false, false, false, "f16", "f16", 1},
    {"+ continuous batching", "requests join running batches; chunked prefill (-b tokens/step)",
     RL_MODEL_WEIGHTS_STORED, false, false, true, false, false, false, "f16", "f16", 2},
    {"+ prefix caching", "cached prompt prefixes reused", RL_MODEL_WEIGHTS_STORED, false, false,
     true, true, false, false, "f16", "f16", 3},
    {"+ KV q8_0", "prefix-caching row with q8_0 K and V pages", RL_MODEL_WEIGHTS_STORED, false,
     false, true, true, false, false, "q8_0", "q8_0", 4},
    {"+ KV q4_0", "prefix-caching row with q4_0 K and V pages", RL_MODEL_WEIGHTS_STORED, false,
     false, true, true, false, false, "q4_0", "q4_0", 4},
    {"+ speculative",
     "prefix-caching row, speculative decoding (draft model with -md, else n-gram)",
     RL_MODEL_WEIGHTS_STORED, false, false, true, true, true, false, "f16", "f16", 4},
    {"+ structured output", "prefix-caching row, JSON requests under their JSON schema",
     RL_MODEL_WEIGHTS_STORED, false, false, true, true, false, true, "f16", "f16", 4},
    {"everything",
     "quantized weights, paged, continuous, chunked, prefix, KV --all-kv, speculative, "
     "structured",
     RL_MODEL_WEIGHTS_STORED, false, false, true, true, true, true, "q8_0", "q8_0", 4},
};

static const char *k_schema =
    "{\"type\":\"object\",\"properties\":{\"title\":{\"type\":\"string\"},"
    "\"topic\":{\"type\":\"string\"},\"score\":{\"type\":\"integer\"}},"
    "\"required\":[\"title\",\"topic\",\"score\"]}";

static const char *k_system =
    "System: You are a careful assistant for a small software team. Answer briefly and "
    "precisely, say when you are unsure, prefer plain words to jargon, quote the text you "
    "are given when it helps, and never invent facts, names or numbers. ";

static const char *k_instr[4][2] = {
    {"\nUser: What does the following passage say?\n", "\nAssistant:"},
    {"\nUser: Explain what this C code does.\n```c\n", "\n```\nAssistant:"},
    {"\nUser: Summarize the following text in three sentences.\n", "\nAssistant:"},
    {"\nUser: Describe the following passage as a JSON object with a title, a topic and a score "
     "from 1 to 10.\n",
     "\nAssistant:"},
};

static void usage(FILE *f) {
    fprintf(
        f,
        "usage: build/bench/ablation [-m MODEL] [options]\n"
        "\n"
        "The technique table: one fixed workload under naive -> + weight quant -> + paged KV\n"
        "-> + continuous batching -> + prefix caching, then + KV q8_0 / q4_0, + speculative,\n"
        "+ structured output, and everything; each row in a fresh process, compared with naive.\n"
        "\n"
        "workload:\n"
        "  -m, --model FILE        GGUF model (default $REDLINE_MODEL or " RL_DEFAULT_MODEL ")\n"
        "  -md, --model-draft F    draft model for the speculative rows (default: n-gram lookup)\n"
        "  --requests N            requests (32)\n"
        "  --concurrency C         clients in the closed loop = engine sequences (8)\n"
        "  --prompt-len L          mean own prompt tokens (128; chat/json L/2, code L, summary "
        "2L)\n"
        "  --output-len O          mean output tokens (64; summary O/2)\n"
        "  --shared-prefix K       shared system-prompt tokens per prompt (64)\n"
        "  --text FILE             prose for prompts (" AB_TEXT_PROSE ")\n"
        "  --code FILE             C source for code prompts (" AB_TEXT_CODE ")\n"
        "  --seed S                workload seed (1)\n"
        "engine:\n"
        "  -c, --ctx-size N        n_ctx: what naive reserves per request (1024)\n"
        "  -b, --batch-size N      tokens per step with chunked prefill (256)\n"
        "  -t, --threads N         threads (one per core)\n"
        "  --all-kv TYPE           KV type of the `everything` row (q8_0)\n"
        "measurement:\n"
        "  --runs R                repetitions per row, interleaved; medians reported (3)\n"
        "  --quality-text FILE     text for perplexity/KL (" AB_TEXT_PROSE ")\n"
        "  --quality-tokens T      scored tokens (512)\n"
        "  --quality-ctx W         window length of the quality pass (256); windows\n"
        "                          start W/2 apart and score their second half\n"
        "  --json                  JSON instead of the Markdown table\n"
        "  --tiny                  a seconds-long workload for CI (4 requests, C 2, L 16, O 6,\n"
        "                          K 16, -c 192, 1 run, 32 quality tokens, window 48)\n"
        "  --rows LIST             only these rows, comma-separated indices 0-9 (all)\n"
        "  --break-quality         test hook: N(0,1) noise on every row's quality-pass logits\n"
        "  -h, --help              this text\n");
}

static int encode_file(const rl_tokenizer *tok, const char *path, int32_t **ids, size_t *n) {
    size_t len = 0;
    char *t = rl_cli_read_file(path, &len);
    rl_err err = {0};
    if (!t) {
        fprintf(stderr, AB_CMD ": cannot read '%s': %s\n", path, strerror(errno));
        return -1;
    }
    int rc = rl_tokenizer_encode(tok, t, len, 0, ids, n, &err) ? -1 : 0;
    if (rc)
        fprintf(stderr, AB_CMD ": %s: %s\n", path, err.msg);
    else if (*n < 16) {
        fprintf(stderr, AB_CMD ": '%s' has only %zu tokens\n", path, *n);
        rc = -1;
    }
    free(t);
    return rc;
}

static int32_t scaled(rl_rng *g, int32_t base) {
    int32_t v = (int32_t)lround(base * (0.75 + 0.5 * rl_rng_f64(g)));
    return v < 2 ? 2 : v;
}

/* Builds the workload; returns 0 or -1 (message printed). */
static int build_workload(const ab_opts *o, const rl_tokenizer *tok, ab_req *reqs) {
    int32_t *prose = NULL, *code = NULL, *sys = NULL, *ins[4][2] = {{0}};
    size_t n_prose = 0, n_code = 0, n_sys = 0, n_ins[4][2] = {{0}};
    int rc = -1;
    rl_err err = {0};
    if (encode_file(tok, o->text, &prose, &n_prose) || encode_file(tok, o->code, &code, &n_code))
        goto done;
    if (rl_tokenizer_encode(tok, k_system, strlen(k_system), 0, &sys, &n_sys, &err)) goto bad;
    for (int k = 0; k < 4; k++)
        for (int j = 0; j < 2; j++)
            if (rl_tokenizer_encode(tok, k_instr[k][j], strlen(k_instr[k][j]), 0, &ins[k][j],
                                    &n_ins[k][j], &err))
                goto bad;
    const int32_t bos = rl_tokenizer_add_bos(tok) ? rl_tokenizer_bos(tok) : -1;
    rl_rng g;
    rl_rng_seed(&g, o->seed);
    for (int32_t r = 0; r < o->n_req; r++) {
        ab_req *q = &reqs[r];
        q->kind = (ab_kind)(r % 4);
        int32_t own = scaled(&g, q->kind == AB_CODE   ? o->prompt_len
                                 : q->kind == AB_SUMM ? 2 * o->prompt_len
                                                      : (o->prompt_len + 1) / 2);
        q->out_len = scaled(&g, q->kind == AB_SUMM ? (o->output_len + 1) / 2 : o->output_len);
        const int32_t *src = q->kind == AB_CODE ? code : prose;
        size_t n_src = q->kind == AB_CODE ? n_code : n_prose;
        size_t off = (size_t)rl_rng_below(&g, n_src);
        int32_t n =
            (bos >= 0) + o->shared + (int32_t)n_ins[q->kind][0] + own + (int32_t)n_ins[q->kind][1];
        if (n + q->out_len > o->n_ctx) {
            fprintf(stderr, AB_CMD ": request %d needs %d + %d tokens, over -c %d\n", (int)r,
                    (int)n, (int)q->out_len, (int)o->n_ctx);
            goto done;
        }
        if (!(q->prompt = malloc((size_t)n * sizeof(int32_t)))) goto done;
        int32_t p = 0;
        if (bos >= 0) q->prompt[p++] = bos;
        for (int32_t i = 0; i < o->shared; i++) q->prompt[p++] = sys[(size_t)i % n_sys];
        for (size_t i = 0; i < n_ins[q->kind][0]; i++) q->prompt[p++] = ins[q->kind][0][i];
        for (int32_t i = 0; i < own; i++) q->prompt[p++] = src[(off + (size_t)i) % n_src];
        for (size_t i = 0; i < n_ins[q->kind][1]; i++) q->prompt[p++] = ins[q->kind][1][i];
        q->n_prompt = p;
    }
    rc = 0;
    goto done;
bad:
    fprintf(stderr, AB_CMD ": %s\n", err.msg);
done:
    rl_free(prose);
    rl_free(code);
    rl_free(sys);
    for (int k = 0; k < 4; k++)
        for (int j = 0; j < 2; j++) rl_free(ins[k][j]);
    return rc;
}

static void *shared_alloc(size_t n) {
    void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

/* Runs fn(arg) in a child; returns 0 when it exited normally, else a
 * description in msg. */
typedef void (*child_fn)(void *arg);
static int in_child(child_fn fn, void *arg, char *msg, size_t msg_len) {
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(msg, msg_len, "fork: %s", strerror(errno));
        return -1;
    }
    if (pid == 0) {
        fn(arg);
        fflush(NULL);
        _exit(0);
    }
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    if (WIFSIGNALED(st)) {
        snprintf(msg, msg_len, "child killed by signal %d", WTERMSIG(st));
        return -1;
    }
    return 0;
}

typedef struct ctx_all {
    const ab_opts *o;
    const ab_req *reqs;
    const int32_t *qids;
    int32_t n_qids, n_ref;
    ab_qrec *ref;
    double *ref_ppl;
    char *ref_msg;
    int *ref_ok;
    const ab_cfg *cfg;
    bool with_quality;
    ab_slot slot;
} ctx_all;

static void child_ref(void *arg) {
    ctx_all *c = arg;
    *c->ref_ok = rl__ab_reference(c->o, c->qids, c->n_qids, c->ref, c->n_ref, c->ref_ppl,
                                  c->ref_msg, 200) == 0;
}

static void child_row(void *arg) {
    ctx_all *c = arg;
    rl__ab_run_config(c->o, c->cfg, c->reqs, k_schema, c->qids, c->n_qids,
                      c->with_quality ? c->ref : NULL, c->n_ref, &c->slot);
}

/* Per-row summary over runs. */
typedef struct ab_sum {
    bool avail;
    char reason[240];
    int n_ok;
    double tok_s, tok_s_min, tok_s_max, ttft50, ttft99, tpot50, tpot99, dur;
    double mem_mib, kv_peak_mib, kv_pool_mib, w_mib, rss_mib, rss_start_mib;
    double ppl, kl, top1, greedy;
    bool q_ok;
    double spec_acc;
    uint64_t cached;
} ab_sum;

static void summarize(const ab_res *runs, int R, ab_sum *s) {
    double v[6][64];
    int n = 0;
    s->tok_s_min = INFINITY;
    s->tok_s_max = 0;
    s->rss_mib = 0;
    for (int r = 0; r < R && r < 64; r++) {
        const ab_res *x = &runs[r];
        if (!x->ok) continue;
        v[0][n] = x->tok_s;
        v[1][n] = x->ttft_p50;
        v[2][n] = x->ttft_p99;
        v[3][n] = x->tpot_p50;
        v[4][n] = x->tpot_p99;
        v[5][n] = x->dur_s;
        n++;
        s->tok_s_min = fmin(s->tok_s_min, x->tok_s);
        s->tok_s_max = fmax(s->tok_s_max, x->tok_s);
        s->rss_mib = fmax(s->rss_mib, x->rss_peak_kb / 1024.0);
    }
    s->n_ok = n;
    s->tok_s = rl_report_percentile(v[0], n, 0.5);
    s->ttft50 = rl_report_percentile(v[1], n, 0.5);
    s->ttft99 = rl_report_percentile(v[2], n, 0.5);
    s->tpot50 = rl_report_percentile(v[3], n, 0.5);
    s->tpot99 = rl_report_percentile(v[4], n, 0.5);
    s->dur = rl_report_percentile(v[5], n, 0.5);
    const ab_res *f = &runs[0];
    s->w_mib = f->weight_bytes / 1048576.0;
    s->kv_peak_mib = f->kv_peak_bytes / 1048576.0;
    s->kv_pool_mib = f->kv_pool_bytes / 1048576.0;
    s->mem_mib = s->w_mib + s->kv_peak_mib;
    s->rss_start_mib = f->rss_start_kb / 1024.0;
    s->q_ok = f->q_ok;
    s->ppl = f->ppl;
    s->kl = f->kl;
    s->top1 = f->top1;
    s->spec_acc = f->spec_proposed ? (double)f->spec_accepted / f->spec_proposed : NAN;
    s->cached = (uint64_t)f->cached_tokens;
}

/* Greedy agreement of row a with row b (run-0 tokens). */
static double greedy_agree(const ab_opts *o, const ab_req *reqs, int32_t out_max, const int32_t *ta,
                           const int32_t *na, const int32_t *tb, const int32_t *nb,
                           bool skip_json) {
    int64_t match = 0, total = 0;
    for (int32_t r = 0; r < o->n_req; r++) {
        if (skip_json && reqs[r].kind == AB_JSON) continue;
        int32_t n = na[r] < nb[r] ? na[r] : nb[r], k = 0;
        while (k < n && ta[(size_t)r * out_max + k] == tb[(size_t)r * out_max + k]) k++;
        match += k;
        total += nb[r];
    }
    return total ? (double)match / (double)total : NAN;
}

static double mem_bandwidth_gbs(size_t mib) {
    size_t n = mib << 20;
    char *a = malloc(n), *b = malloc(n);
    double best = 0;
    if (a && b) {
        memset(a, 1, n);
        memset(b, 2, n);
        for (int i = 0; i < 5; i++) {
            double t = rl_time_s();
            memcpy(i % 2 ? a : b, i % 2 ? b : a, n);
            t = rl_time_s() - t;
            if (t > 0 && 2.0 * n / t / 1e9 > best) best = 2.0 * n / t / 1e9;
        }
    }
    free(a);
    free(b);
    return best;
}

static void cpu_model(char *out, size_t len) {
    snprintf(out, len, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "model name", 10)) {
            char *p = strchr(line, ':');
            if (p) {
                p++;
                while (*p == ' ') p++;
                p[strcspn(p, "\n")] = 0;
                snprintf(out, len, "%s", p);
            }
            break;
        }
    fclose(f);
}

/* o[k] = v, null when v is not finite */
static void num(json_t *o, const char *k, double v) {
    json_object_set_new(o, k, rl_report_real(v));
}

static double pct_cut(double naive, double x) {
    return naive > 0 ? 100.0 * (1.0 - x / naive) : NAN;
}

/* "12.3" or "-" for NaN */
static const char *fmt(char *b, size_t n, const char *f, double v) {
    if (!isfinite(v))
        snprintf(b, n, "-");
    else
        snprintf(b, n, f, v);
    return b;
}

int main(int argc, char **argv) {
    ab_opts o = {.text = AB_TEXT_PROSE,
                 .code = AB_TEXT_CODE,
                 .qtext = AB_TEXT_PROSE,
                 .all_kv = "q8_0",
                 .n_req = 32,
                 .conc = 8,
                 .prompt_len = 128,
                 .output_len = 64,
                 .shared = 64,
                 .runs = 3,
                 .qtokens = 512,
                 .qctx = 256,
                 .n_ctx = 1024,
                 .batch = 256,
                 .seed = 1};
    for (int c = 0; c < N_CFG; c++) o.rows[c] = true;
    for (int i = 1; i < argc; i++) /* --tiny sets defaults the other flags may override */
        if (!strcmp(argv[i], "--tiny")) {
            o.tiny = true;
            o.n_req = 4, o.conc = 2, o.prompt_len = 16, o.output_len = 6, o.shared = 16;
            o.n_ctx = 192, o.runs = 1, o.qtokens = 32, o.qctx = 48;
        }
    rl_args A;
    rl_args_init(&A, AB_CMD, argc, argv);
    while (rl_args_next(&A)) {
        bool ok = true;
        if (rl_args_is(&A, "-h|--help")) {
            usage(stdout);
            return 0;
        } else if (rl_args_is(&A, "--tiny"))
            continue;
        else if (rl_args_is(&A, "--json"))
            o.json = true;
        else if (rl_args_is(&A, "--break-quality"))
            o.break_quality = true;
        else if (rl_args_is(&A, "--rows")) {
            int32_t rows[N_CFG];
            int n = 0;
            if ((ok = rl_args_list(&A, 0, N_CFG - 1, rows, &n, N_CFG))) {
                memset(o.rows, 0, sizeof o.rows);
                for (int k = 0; k < n; k++) o.rows[rows[k]] = true;
            }
        } else if (rl_args_is(&A, "-m|--model"))
            ok = rl_args_str(&A, &o.model);
        else if (rl_args_is(&A, "-md|--model-draft"))
            ok = rl_args_str(&A, &o.draft);
        else if (rl_args_is(&A, "--text"))
            ok = rl_args_str(&A, &o.text);
        else if (rl_args_is(&A, "--code"))
            ok = rl_args_str(&A, &o.code);
        else if (rl_args_is(&A, "--quality-text"))
            ok = rl_args_str(&A, &o.qtext);
        else if (rl_args_is(&A, "--all-kv"))
            ok = rl_args_str(&A, &o.all_kv);
        else if (rl_args_is(&A, "--requests"))
            ok = rl_args_i32(&A, 1, 100000, &o.n_req);
        else if (rl_args_is(&A, "--concurrency"))
            ok = rl_args_i32(&A, 1, 1024, &o.conc);
        else if (rl_args_is(&A, "--prompt-len"))
            ok = rl_args_i32(&A, 1, 65536, &o.prompt_len);
        else if (rl_args_is(&A, "--output-len"))
            ok = rl_args_i32(&A, 1, 65536, &o.output_len);
        else if (rl_args_is(&A, "--shared-prefix"))
            ok = rl_args_i32(&A, 0, 65536, &o.shared);
        else if (rl_args_is(&A, "--runs"))
            ok = rl_args_i32(&A, 1, 64, &o.runs);
        else if (rl_args_is(&A, "--quality-tokens"))
            ok = rl_args_i32(&A, 1, 1 << 20, &o.qtokens);
        else if (rl_args_is(&A, "--quality-ctx"))
            ok = rl_args_i32(&A, 2, 65536, &o.qctx);
        else if (rl_args_is(&A, "-c|--ctx-size"))
            ok = rl_args_i32(&A, 16, 1 << 20, &o.n_ctx);
        else if (rl_args_is(&A, "-b|--batch-size"))
            ok = rl_args_i32(&A, 1, 65536, &o.batch);
        else if (rl_args_is(&A, "-t|--threads"))
            ok = rl_args_i32(&A, 1, 256, &o.threads);
        else if (rl_args_is(&A, "--seed"))
            ok = rl_args_u64(&A, &o.seed);
        else
            ok = rl_args_unknown(&A);
        if (!ok) return 2;
    }
    o.model = rl_cli_model_path(o.model);
    if (!o.threads) {
        long nc = sysconf(_SC_NPROCESSORS_ONLN);
        o.threads = nc > 0 ? (int32_t)(nc > 64 ? 64 : nc) : 1;
    }
    cfgs[N_CFG - 1].kt = cfgs[N_CFG - 1].vt = o.all_kv;
    rl_kernels_init(RL_KERNELS_AUTO);

    /* the parent holds only the tokenizer and the workload */
    int rc = 1;
    rl_err err = {0};
    rl_gguf *g = NULL;
    rl_tokenizer *tok = NULL;
    ab_req *reqs = calloc((size_t)o.n_req, sizeof *reqs);
    int32_t *qids = NULL;
    size_t n_qids = 0;
    ab_res *all = NULL;
    int32_t *toks = NULL, *ntok = NULL;
    if (!reqs) return 1;
    if (rl_gguf_open(o.model, &g, &err) || rl_tokenizer_load(g, &tok, &err)) {
        fprintf(stderr, AB_CMD ": %s: %s\n", o.model, err.msg);
        goto out;
    }
    rl_gguf_close(g);
    g = NULL;
    if (build_workload(&o, tok, reqs) || encode_file(tok, o.qtext, &qids, &n_qids)) goto out;
    int32_t out_max = 0;
    int64_t prompt_sum = 0, out_sum = 0;
    for (int32_t r = 0; r < o.n_req; r++) {
        out_max = reqs[r].out_len > out_max ? reqs[r].out_len : out_max;
        prompt_sum += reqs[r].n_prompt;
        out_sum += reqs[r].out_len;
    }
    const int32_t n_ref = rl__ab_n_scored(&o, (int32_t)n_qids);
    if (n_ref < 1) {
        fprintf(stderr, AB_CMD ": the quality text is too short\n");
        goto out;
    }

    /* shared memory: reference, one result slot */
    size_t slot_bytes = sizeof(ab_res) + (size_t)o.n_req * ((size_t)out_max + 1) * sizeof(int32_t);
    ab_qrec *ref = shared_alloc((size_t)n_ref * sizeof(ab_qrec) + 512);
    char *slot_mem = shared_alloc(slot_bytes);
    all = calloc((size_t)N_CFG * (size_t)o.runs, sizeof *all);
    toks = calloc((size_t)N_CFG * (size_t)o.n_req * (size_t)out_max, sizeof(int32_t));
    ntok = calloc((size_t)N_CFG * (size_t)o.n_req, sizeof(int32_t));
    if (!ref || !slot_mem || !all || !toks || !ntok) {
        fprintf(stderr, AB_CMD ": out of memory\n");
        goto out;
    }
    char *ref_tail = (char *)(ref + n_ref);
    ctx_all cx = {.o = &o,
                  .reqs = reqs,
                  .qids = qids,
                  .n_qids = (int32_t)n_qids,
                  .n_ref = n_ref,
                  .ref = ref,
                  .ref_ppl = (double *)ref_tail,
                  .ref_ok = (int *)(ref_tail + 8),
                  .ref_msg = ref_tail + 16};
    cx.slot.res = (ab_res *)slot_mem;
    cx.slot.toks = (int32_t *)(slot_mem + sizeof(ab_res));
    cx.slot.n_tok = cx.slot.toks + (size_t)o.n_req * out_max;
    cx.slot.out_max = out_max;
    char msg[240];
    fprintf(stderr, "ablation: reference quality pass (f32 weights, f32 KV, %d tokens)\n",
            (int)n_ref);
    if (in_child(child_ref, &cx, msg, sizeof msg) || !*cx.ref_ok) {
        fprintf(stderr, AB_CMD ": reference: %s\n", *cx.ref_ok ? msg : cx.ref_msg);
        goto out;
    }
    const double ref_ppl = *cx.ref_ppl;
    bool dead[N_CFG] = {0};
    for (int run = 0; run < o.runs; run++)
        for (int c = 0; c < N_CFG; c++) {
            ab_res *dst = &all[(size_t)c * o.runs + run];
            if (dead[c] || !o.rows[c]) {
                if (!o.rows[c])
                    snprintf(dst->err, sizeof dst->err, "not selected (--rows)");
                else
                    *dst = all[(size_t)c * o.runs];
                continue;
            }
            memset(slot_mem, 0, slot_bytes);
            cx.cfg = &cfgs[c];
            cx.with_quality = run == 0;
            if (in_child(child_row, &cx, msg, sizeof msg)) {
                cx.slot.res->ok = 0;
                snprintf(cx.slot.res->err, sizeof cx.slot.res->err, "%s", msg);
            }
            *dst = *cx.slot.res;
            if (run == 0) {
                memcpy(toks + (size_t)c * o.n_req * out_max, cx.slot.toks,
                       (size_t)o.n_req * out_max * sizeof(int32_t));
                memcpy(ntok + (size_t)c * o.n_req, cx.slot.n_tok,
                       (size_t)o.n_req * sizeof(int32_t));
                if (!dst->ok) dead[c] = true;
            }
            if (dst->ok)
                fprintf(
                    stderr,
                    "ablation: run %d/%d %-22s %8.2f tok/s, TTFT p50 %.3f s, TPOT p50 %.4f s%s\n",
                    run + 1, o.runs, cfgs[c].name, dst->tok_s, dst->ttft_p50, dst->tpot_p50,
                    run == 0 && !dst->q_ok ? " (quality pass failed)" : "");
            else
                fprintf(stderr, "ablation: run %d/%d %-22s unavailable: %s\n", run + 1, o.runs,
                        cfgs[c].name, dst->err);
        }

    ab_sum sum[N_CFG];
    memset(sum, 0, sizeof sum);
    for (int c = 0; c < N_CFG; c++) {
        ab_res *runs = &all[(size_t)c * o.runs];
        sum[c].avail = runs[0].ok;
        snprintf(sum[c].reason, sizeof sum[c].reason, "%s", runs[0].err);
        if (!sum[c].avail) continue;
        summarize(runs, o.runs, &sum[c]);
        int b = cfgs[c].base;
        sum[c].greedy =
            b >= 0 && sum[b].avail
                ? greedy_agree(&o, reqs, out_max, toks + (size_t)c * o.n_req * out_max,
                               ntok + (size_t)c * o.n_req, toks + (size_t)b * o.n_req * out_max,
                               ntok + (size_t)b * o.n_req, cfgs[c].grammar || cfgs[b].grammar)
                : NAN;
    }
    /* machine, measured after every child has finished */
    char cpu[256];
    cpu_model(cpu, sizeof cpu);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    double bw = mem_bandwidth_gbs(o.tiny ? 32 : 256);
    const ab_sum *nv = &sum[0];
    int n_kind[4] = {0};
    for (int32_t r = 0; r < o.n_req; r++) n_kind[reqs[r].kind]++;

    FILE *f = stdout;
    if (o.json) {
        json_t *rows = json_array();
        for (int c = 0; c < N_CFG; c++) {
            const ab_sum *s = &sum[c];
            char kv[64];
            snprintf(kv, sizeof kv, "%s/%s", cfgs[c].kt, cfgs[c].vt);
            json_t *r = json_pack("{s:s, s:s, s:s, s:i, s:b}", "name", cfgs[c].name, "definition",
                                  cfgs[c].what, "kv_type", kv, "base", cfgs[c].base, "available",
                                  (int)s->avail);
            if (!r) break;
            json_array_append_new(rows, r);
            if (!s->avail) {
                json_object_set_new(r, "reason", json_string(s->reason));
                continue;
            }
            num(r, "tok_s", s->tok_s);
            num(r, "tok_s_min", s->tok_s_min);
            num(r, "tok_s_max", s->tok_s_max);
            num(r, "throughput_x_naive", nv->avail ? s->tok_s / nv->tok_s : NAN);
            num(r, "ttft_p50_s", s->ttft50);
            num(r, "ttft_p99_s", s->ttft99);
            num(r, "tpot_p50_s", s->tpot50);
            num(r, "tpot_p99_s", s->tpot99);
            num(r, "ttft_p50_cut_pct", nv->avail ? pct_cut(nv->ttft50, s->ttft50) : NAN);
            num(r, "tpot_p50_cut_pct", nv->avail ? pct_cut(nv->tpot50, s->tpot50) : NAN);
            num(r, "duration_s", s->dur);
            num(r, "weights_mib", s->w_mib);
            num(r, "kv_peak_mib", s->kv_peak_mib);
            num(r, "kv_pool_mib", s->kv_pool_mib);
            num(r, "weights_kv_mib", s->mem_mib);
            num(r, "memory_cut_pct", nv->avail ? pct_cut(nv->mem_mib, s->mem_mib) : NAN);
            num(r, "kv_cut_pct", nv->avail ? pct_cut(nv->kv_peak_mib, s->kv_peak_mib) : NAN);
            num(r, "peak_rss_mib", s->rss_mib);
            num(r, "rss_at_start_mib", s->rss_start_mib);
            num(r, "ppl", s->q_ok ? s->ppl : NAN);
            num(r, "ppl_delta_pct", s->q_ok ? 100.0 * (s->ppl / ref_ppl - 1) : NAN);
            num(r, "kl", s->q_ok ? s->kl : NAN);
            num(r, "top1_agreement", s->q_ok ? s->top1 : NAN);
            num(r, "greedy_agreement_vs_base", s->greedy);
            num(r, "spec_acceptance", s->spec_acc);
            json_object_set_new(r, "cached_prompt_tokens", json_integer((json_int_t)s->cached));
            json_t *runs = json_array();
            for (int k = 0; k < o.runs; k++) {
                const ab_res *x = &all[(size_t)c * o.runs + k];
                json_t *one = json_object();
                num(one, "tok_s", x->tok_s);
                num(one, "ttft_p50_s", x->ttft_p50);
                num(one, "tpot_p50_s", x->tpot_p50);
                json_object_set_new(one, "output_tokens", json_integer((json_int_t)x->out_tokens));
                num(one, "peak_rss_mib", x->rss_peak_kb / 1024.0);
                json_array_append_new(runs, one);
            }
            json_object_set_new(r, "runs", runs);
        }
        json_t *machine = json_pack("{s:s, s:I}", "cpu", cpu, "cores", (json_int_t)cores);
        if (machine) num(machine, "mem_bandwidth_gbs", bw);
        json_t *workload = json_pack(
            "{s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:I, s:b, s:I, s:I, s:{s:i, s:i, s:i, "
            "s:i}, s:i, s:i, "
            "s:b}",
            "requests", (int)o.n_req, "concurrency", (int)o.conc, "prompt_len", (int)o.prompt_len,
            "output_len", (int)o.output_len, "shared_prefix", (int)o.shared, "n_ctx", (int)o.n_ctx,
            "batch_tokens", (int)o.batch, "threads", (int)o.threads, "runs", (int)o.runs, "seed",
            (json_int_t)o.seed, "tiny", (int)o.tiny, "prompt_tokens", (json_int_t)prompt_sum,
            "output_tokens", (json_int_t)out_sum, "kinds", "chat", n_kind[0], "code", n_kind[1],
            "summarization", n_kind[2], "json", n_kind[3], "quality_tokens", (int)n_ref,
            "quality_ctx", (int)o.qctx, "break_quality", (int)o.break_quality);
        json_t *root =
            json_pack("{s:o, s:s, s:o, s:o, s:{s:o}, s:o}", "machine", machine, "model", o.model,
                      "draft", o.draft ? json_string(o.draft) : json_null(), "workload", workload,
                      "reference", "ppl", rl_report_real(ref_ppl), "rows", rows);
        if (rl_report_json_write(f, root, false, AB_CMD)) goto out;
    } else {
        char b[16][48];
        fprintf(f, "## bench/ablation\n\n");
        fprintf(f, "- machine: %s, %ld cores, memory bandwidth %.1f GB/s (memcpy, read+write)\n",
                cpu, cores, bw);
        fprintf(f, "- model: %s%s%s\n", o.model, o.draft ? ", draft " : "", o.draft ? o.draft : "");
        fprintf(
            f,
            "- workload: %d requests (%d chat, %d code, %d summarization, %d JSON), closed loop "
            "of %d clients, own prompt ~%d tokens (chat/JSON /2, summary x2), output ~%d, "
            "shared system prompt %d tokens; %lld prompt + %lld output tokens; -c %d, -b %d, "
            "-t %d, seed %llu\n",
            (int)o.n_req, n_kind[0], n_kind[1], n_kind[2], n_kind[3], (int)o.conc,
            (int)o.prompt_len, (int)o.output_len, (int)o.shared, (long long)prompt_sum,
            (long long)out_sum, (int)o.n_ctx, (int)o.batch, (int)o.threads,
            (unsigned long long)o.seed);
        fprintf(f,
                "- quality: %d tokens of %s (windows of %d, each scoring its second half), "
                "reference f32 weights + f32 KV, "
                "PPL %.4f%s\n",
                (int)n_ref, o.qtext, (int)o.qctx, ref_ppl,
                o.break_quality ? "; --break-quality: N(0,1) noise on every row's logits" : "");
        fprintf(f, "- %d run(s) per row, interleaved; medians, tok/s with [min-max]\n\n",
                (int)o.runs);
        fprintf(f,
                "| configuration | tok/s | x naive | TTFT p50/p99 ms | TTFT cut | TPOT p50/p99 ms "
                "| TPOT cut | weights+KV MiB | mem cut | KV peak/pool MiB | peak RSS MiB | PPL | "
                "dPPL | KL | top-1 | greedy=base |\n");
        fprintf(f, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
        for (int c = 0; c < N_CFG; c++) {
            const ab_sum *s = &sum[c];
            if (!s->avail) {
                fprintf(f, "| %s | unavailable: %s |||||||||||||||\n", cfgs[c].name, s->reason);
                continue;
            }
            char range[64] = "";
            if (o.runs > 1)
                snprintf(range, sizeof range, " [%.1f-%.1f]", s->tok_s_min, s->tok_s_max);
            fprintf(f,
                    "| %s | %.2f%s | %s | %.0f / %.0f | %s | %.1f / %.1f | %s | %.1f | %s | %.1f / "
                    "%.1f "
                    "| %.0f | %s | %s | %s | %s | %s |\n",
                    cfgs[c].name, s->tok_s, range,
                    fmt(b[0], 48, "%.2f", nv->avail ? s->tok_s / nv->tok_s : NAN), 1e3 * s->ttft50,
                    1e3 * s->ttft99,
                    fmt(b[1], 48, "%.0f%%", nv->avail ? pct_cut(nv->ttft50, s->ttft50) : NAN),
                    1e3 * s->tpot50, 1e3 * s->tpot99,
                    fmt(b[2], 48, "%.0f%%", nv->avail ? pct_cut(nv->tpot50, s->tpot50) : NAN),
                    s->mem_mib,
                    fmt(b[3], 48, "%.0f%%", nv->avail ? pct_cut(nv->mem_mib, s->mem_mib) : NAN),
                    s->kv_peak_mib, s->kv_pool_mib, s->rss_mib,
                    fmt(b[4], 48, "%.4f", s->q_ok ? s->ppl : NAN),
                    fmt(b[5], 48, "%+.2f%%", s->q_ok ? 100.0 * (s->ppl / ref_ppl - 1) : NAN),
                    fmt(b[6], 48, "%.5f", s->q_ok ? s->kl : NAN),
                    fmt(b[7], 48, "%.1f%%", s->q_ok ? 100.0 * s->top1 : NAN),
                    fmt(b[8], 48, "%.1f%%", 100.0 * s->greedy));
        }
        fprintf(f, "\nRows: ");
        for (int c = 0; c < N_CFG; c++)
            fprintf(f, "%s**%s**: %s", c ? "; " : "", cfgs[c].name, cfgs[c].what);
        fprintf(f, ". Speculation: %s", o.draft ? "draft model" : "n-gram lookup");
        if (sum[7].avail && isfinite(sum[7].spec_acc))
            fprintf(f, ", acceptance %.0f%%", 100.0 * sum[7].spec_acc);
        fprintf(f, ". Peak RSS is the row's child process (VmHWM; %.0f MiB at its start).\n",
                sum[0].avail ? sum[0].rss_start_mib : 0.0);
    }
    rc = 0;
out:
    for (int32_t r = 0; r < o.n_req; r++) free(reqs[r].prompt);
    free(reqs);
    rl_free(qids);
    free(all);
    free(toks);
    free(ntok);
    rl_tokenizer_free(tok);
    rl_gguf_close(g);
    return rc;
}
