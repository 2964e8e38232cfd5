/* `redline bench ablation`: the technique table, measured (L9).
 *
 *   redline bench ablation -m MODEL [-md DRAFT] [--requests N] [--concurrency C]
 *       [--prompt-len L] [--output-len L] [--shared-prefix K] [--runs R]
 *       [--quality-text FILE] [--quality-tokens T] [--json] [--tiny] ...
 *
 * One fixed workload runs under a stack of configurations, each in a fresh
 * child process (cmd_ablation_run.c), R times interleaved (run 1 of every
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
 * source) at a seeded offset: L/2 tokens for chat and JSON, L for code, 2L
 * for summarization, each times a uniform factor in [0.75, 1.25]; output
 * O tokens (O/2 for summarization), times the same kind of factor.
 *
 * Quality: perplexity over T tokens of --quality-text, KL divergence and
 * top-1 agreement against the reference (f32 weights, f32 KV), all computed
 * by each row's own model and KV types; greedy agreement: share of a row's
 * generated tokens that equal, position by position up to the first
 * difference, those of the row it builds on (JSON requests are left out
 * where a grammar applies).  --break-quality (a test hook) adds N(0, 1)
 * noise to the logits of every row's quality pass, to show the quality
 * columns are computed.
 */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/rng.h"
#include "cli/cli.h"
#include "cli/cmd_ablation.h"
#include "gguf/gguf.h"
#include "kernels/kernels.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

int rl_cmd_bench_ablation(int argc, char **argv);

#define N_CFG 10
static ab_cfg cfgs[N_CFG] = {
    {"naive", "f32 weights, f16 KV reserved for n_ctx per request, static batches, no prefix reuse",
     RL_MODEL_WEIGHTS_F32, true, true, false, false, false, false, "f16", "f16", -1},
    {"+ weight quant", "naive with the file's quantized weights", RL_MODEL_WEIGHTS_STORED, true, true,
     false, false, false, false, "f16", "f16", 0},
    {"+ paged KV", "KV blocks allocated on demand; still static batches, whole-prompt prefill",
     RL_MODEL_WEIGHTS_STORED, false, true, false, false, false, false, "f16", "f16", 1},
    {"+ continuous batching", "requests join running batches; chunked prefill (-b tokens/step)",
     RL_MODEL_WEIGHTS_STORED, false, false, true, false, false, false, "f16", "f16", 2},
    {"+ prefix caching", "cached prompt prefixes reused", RL_MODEL_WEIGHTS_STORED, false, false, true,
     true, false, false, "f16", "f16", 3},
    {"+ KV q8_0", "prefix-caching row with q8_0 K and V pages", RL_MODEL_WEIGHTS_STORED, false, false,
     true, true, false, false, "q8_0", "q8_0", 4},
    {"+ KV q4_0", "prefix-caching row with q4_0 K and V pages", RL_MODEL_WEIGHTS_STORED, false, false,
     true, true, false, false, "q4_0", "q4_0", 4},
    {"+ speculative", "prefix-caching row, speculative decoding (draft model with -md, else n-gram)",
     RL_MODEL_WEIGHTS_STORED, false, false, true, true, true, false, "f16", "f16", 4},
    {"+ structured output", "prefix-caching row, JSON requests under their JSON schema",
     RL_MODEL_WEIGHTS_STORED, false, false, true, true, false, true, "f16", "f16", 4},
    {"everything", "quantized weights, paged, continuous, chunked, prefix, KV --all-kv, speculative, "
                   "structured", RL_MODEL_WEIGHTS_STORED, false, false, true, true, true, true, "q8_0",
     "q8_0", 4},
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
     "from 1 to 10.\n", "\nAssistant:"},
};

static void usage(FILE *f) {
    fprintf(f,
            "usage: redline bench ablation [-m MODEL] [options]\n"
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
            "  --prompt-len L          mean own prompt tokens (128; chat/json L/2, code L, summary 2L)\n"
            "  --output-len O          mean output tokens (64; summary O/2)\n"
            "  --shared-prefix K       shared system-prompt tokens per prompt (64)\n"
            "  --text FILE             prose for prompts (docs/ARCHITECTURE.md)\n"
            "  --code FILE             C source for code prompts (src/sched/sched.c)\n"
            "  --seed S                workload seed (1)\n"
            "engine:\n"
            "  -c, --ctx-size N        n_ctx: what naive reserves per request (1024)\n"
            "  -b, --batch-size N      tokens per step with chunked prefill (256)\n"
            "  -t, --threads N         threads (one per core)\n"
            "  --all-kv TYPE           KV type of the `everything` row (q8_0)\n"
            "measurement:\n"
            "  --runs R                repetitions per row, interleaved; medians reported (3)\n"
            "  --quality-text FILE     text for perplexity/KL (docs/ARCHITECTURE.md)\n"
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

static char *read_all(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *b = malloc(cap);
    while (b) {
        size_t k = fread(b + n, 1, cap - n, f);
        n += k;
        if (n < cap) break;
        char *nb = realloc(b, cap *= 2);
        if (!nb) free(b);
        b = nb;
    }
    fclose(f);
    *len = n;
    return b;
}

static int encode_file(const rl_tokenizer *tok, const char *path, int32_t **ids, size_t *n) {
    size_t len = 0;
    char *t = read_all(path, &len);
    rl_err err = {0};
    if (!t) {
        fprintf(stderr, "redline bench ablation: cannot read '%s': %s\n", path, strerror(errno));
        return -1;
    }
    int rc = rl_tokenizer_encode(tok, t, len, 0, ids, n, &err) ? -1 : 0;
    if (rc) fprintf(stderr, "redline bench ablation: %s: %s\n", path, err.msg);
    else if (*n < 16) {
        fprintf(stderr, "redline bench ablation: '%s' has only %zu tokens\n", path, *n);
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
        int32_t n = (bos >= 0) + o->shared + (int32_t)n_ins[q->kind][0] + own + (int32_t)n_ins[q->kind][1];
        if (n + q->out_len > o->n_ctx) {
            fprintf(stderr, "redline bench ablation: request %d needs %d + %d tokens, over -c %d\n",
                    (int)r, (int)n, (int)q->out_len, (int)o->n_ctx);
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
    fprintf(stderr, "redline bench ablation: %s\n", err.msg);
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
    *c->ref_ok = rl__ab_reference(c->o, c->qids, c->n_qids, c->ref, c->n_ref, c->ref_ppl, c->ref_msg,
                                  200) == 0;
}

static void child_row(void *arg) {
    ctx_all *c = arg;
    rl__ab_run_config(c->o, c->cfg, c->reqs, k_schema, c->qids, c->n_qids,
                      c->with_quality ? c->ref : NULL, c->n_ref, &c->slot);
}

static double median_of(double *v, int n) {
    if (n <= 0) return NAN;
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && v[j - 1] > v[j]; j--) {
            double t = v[j];
            v[j] = v[j - 1];
            v[j - 1] = t;
        }
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
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
    s->tok_s = median_of(v[0], n);
    s->ttft50 = median_of(v[1], n);
    s->ttft99 = median_of(v[2], n);
    s->tpot50 = median_of(v[3], n);
    s->tpot99 = median_of(v[4], n);
    s->dur = median_of(v[5], n);
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
                           const int32_t *na, const int32_t *tb, const int32_t *nb, bool skip_json) {
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

static void jstr(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\') fprintf(f, "\\%c", ch);
        else if (ch < 0x20) fprintf(f, "\\u%04x", ch);
        else fputc(ch, f);
    }
    fputc('"', f);
}

static void jnum(FILE *f, const char *key, double v, bool comma) {
    fprintf(f, "\"%s\": ", key);
    if (isfinite(v)) fprintf(f, "%.6g", v);
    else fprintf(f, "null");
    if (comma) fprintf(f, ", ");
}

static double pct_cut(double naive, double x) { return naive > 0 ? 100.0 * (1.0 - x / naive) : NAN; }

/* "12.3" or "-" for NaN */
static const char *fmt(char *b, size_t n, const char *f, double v) {
    if (!isfinite(v)) snprintf(b, n, "-");
    else snprintf(b, n, f, v);
    return b;
}

static int parse_i(const char *flag, const char *v, long lo, long hi, int32_t *out) {
    char *end;
    errno = 0;
    long x = v ? strtol(v, &end, 10) : 0;
    if (!v || errno || *end || x < lo || x > hi) {
        fprintf(stderr, "redline bench ablation: %s needs an integer in [%ld, %ld]\n", flag, lo, hi);
        return -1;
    }
    *out = (int32_t)x;
    return 0;
}

int rl_cmd_bench_ablation(int argc, char **argv) {
    ab_opts o = {.text = "docs/ARCHITECTURE.md", .code = "src/sched/sched.c",
                 .qtext = "docs/ARCHITECTURE.md", .all_kv = "q8_0", .n_req = 32, .conc = 8,
                 .prompt_len = 128, .output_len = 64, .shared = 64, .runs = 3, .qtokens = 512,
                 .qctx = 256, .n_ctx = 1024, .batch = 256, .seed = 1};
    for (int c = 0; c < 10; c++) o.rows[c] = true;
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--tiny")) {
            o.tiny = true;
            o.n_req = 4, o.conc = 2, o.prompt_len = 16, o.output_len = 6, o.shared = 16;
            o.n_ctx = 192, o.runs = 1, o.qtokens = 32, o.qctx = 48;
        }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int32_t x = 0;
#define INT_OPT(name, lo, hi, field)                        \
    if (!strcmp(a, name)) {                                 \
        if (parse_i(a, v, lo, hi, &x)) return 2;            \
        o.field = x;                                        \
        i++;                                                \
        continue;                                           \
    }
#define STR_OPT(name, alt, field)                                                            \
    if (!strcmp(a, name) || (alt[0] && !strcmp(a, alt))) {                                     \
        if (!v) {                                                                            \
            fprintf(stderr, "redline bench ablation: %s needs a value\n", a);                \
            return 2;                                                                        \
        }                                                                                    \
        o.field = v;                                                                         \
        i++;                                                                                 \
        continue;                                                                            \
    }
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--tiny")) continue;
        if (!strcmp(a, "--json")) {
            o.json = true;
            continue;
        }
        if (!strcmp(a, "--rows") && v) {
            memset(o.rows, 0, sizeof o.rows);
            for (const char *p = v; *p;) {
                char *end;
                long k = strtol(p, &end, 10);
                if (end == p || k < 0 || k >= 10 || (*end && *end != ',')) {
                    fprintf(stderr, "redline bench ablation: --rows needs indices 0-9, e.g. 0,1,9\n");
                    return 2;
                }
                o.rows[k] = true;
                p = *end ? end + 1 : end;
            }
            i++;
            continue;
        }
        if (!strcmp(a, "--break-quality")) {
            o.break_quality = true;
            continue;
        }
        STR_OPT("-m", "--model", model)
        STR_OPT("-md", "--model-draft", draft)
        STR_OPT("--text", "", text)
        STR_OPT("--code", "", code)
        STR_OPT("--quality-text", "", qtext)
        STR_OPT("--all-kv", "", all_kv)
        INT_OPT("--requests", 1, 100000, n_req)
        INT_OPT("--concurrency", 1, 1024, conc)
        INT_OPT("--prompt-len", 1, 65536, prompt_len)
        INT_OPT("--output-len", 1, 65536, output_len)
        INT_OPT("--shared-prefix", 0, 65536, shared)
        INT_OPT("--runs", 1, 64, runs)
        INT_OPT("--quality-tokens", 1, 1 << 20, qtokens)
        INT_OPT("--quality-ctx", 2, 65536, qctx)
        INT_OPT("-c", 16, 1 << 20, n_ctx)
        INT_OPT("--ctx-size", 16, 1 << 20, n_ctx)
        INT_OPT("-b", 1, 65536, batch)
        INT_OPT("--batch-size", 1, 65536, batch)
        INT_OPT("-t", 1, 256, threads)
        INT_OPT("--threads", 1, 256, threads)
        if (!strcmp(a, "--seed")) {
            if (parse_i(a, v, 0, 2147483647, &x)) return 2;
            o.seed = (uint64_t)x;
            i++;
            continue;
        }
#undef INT_OPT
#undef STR_OPT
        fprintf(stderr, "redline bench ablation: unknown option '%s' (see --help)\n", a);
        return 2;
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
        fprintf(stderr, "redline bench ablation: %s: %s\n", o.model, err.msg);
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
        fprintf(stderr, "redline bench ablation: the quality text is too short\n");
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
        fprintf(stderr, "redline bench ablation: out of memory\n");
        goto out;
    }
    char *ref_tail = (char *)(ref + n_ref);
    ctx_all cx = {.o = &o, .reqs = reqs, .qids = qids, .n_qids = (int32_t)n_qids, .n_ref = n_ref,
                  .ref = ref, .ref_ppl = (double *)ref_tail, .ref_ok = (int *)(ref_tail + 8),
                  .ref_msg = ref_tail + 16};
    cx.slot.res = (ab_res *)slot_mem;
    cx.slot.toks = (int32_t *)(slot_mem + sizeof(ab_res));
    cx.slot.n_tok = cx.slot.toks + (size_t)o.n_req * out_max;
    cx.slot.out_max = out_max;
    char msg[240];
    fprintf(stderr, "ablation: reference quality pass (f32 weights, f32 KV, %d tokens)\n", (int)n_ref);
    if (in_child(child_ref, &cx, msg, sizeof msg) || !*cx.ref_ok) {
        fprintf(stderr, "redline bench ablation: reference: %s\n", *cx.ref_ok ? msg : cx.ref_msg);
        goto out;
    }
    const double ref_ppl = *cx.ref_ppl;
    bool dead[N_CFG] = {0};
    for (int run = 0; run < o.runs; run++)
        for (int c = 0; c < N_CFG; c++) {
            ab_res *dst = &all[(size_t)c * o.runs + run];
            if (dead[c] || !o.rows[c]) {
                if (!o.rows[c]) snprintf(dst->err, sizeof dst->err, "not selected (--rows)");
                else *dst = all[(size_t)c * o.runs];
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
                memcpy(ntok + (size_t)c * o.n_req, cx.slot.n_tok, (size_t)o.n_req * sizeof(int32_t));
                if (!dst->ok) dead[c] = true;
            }
            if (dst->ok)
                fprintf(stderr, "ablation: run %d/%d %-22s %8.2f tok/s, TTFT p50 %.3f s, TPOT p50 %.4f s%s\n",
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
        sum[c].greedy = b >= 0 && sum[b].avail
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
        fprintf(f, "{\"machine\": {\"cpu\": ");
        jstr(f, cpu);
        fprintf(f, ", \"cores\": %ld, ", cores);
        jnum(f, "mem_bandwidth_gbs", bw, false);
        fprintf(f, "},\n \"model\": ");
        jstr(f, o.model);
        fprintf(f, ", \"draft\": ");
        if (o.draft) jstr(f, o.draft);
        else fprintf(f, "null");
        fprintf(f, ",\n \"workload\": {\"requests\": %d, \"concurrency\": %d, \"prompt_len\": %d, "
                   "\"output_len\": %d, \"shared_prefix\": %d, \"n_ctx\": %d, \"batch_tokens\": %d, "
                   "\"threads\": %d, \"runs\": %d, \"seed\": %llu, \"tiny\": %s, "
                   "\"prompt_tokens\": %lld, \"output_tokens\": %lld, \"kinds\": {\"chat\": %d, "
                   "\"code\": %d, \"summarization\": %d, \"json\": %d}, \"quality_tokens\": %d, "
                   "\"quality_ctx\": %d, \"break_quality\": %s},\n",
                (int)o.n_req, (int)o.conc, (int)o.prompt_len, (int)o.output_len, (int)o.shared,
                (int)o.n_ctx, (int)o.batch, (int)o.threads, (int)o.runs, (unsigned long long)o.seed,
                o.tiny ? "true" : "false", (long long)prompt_sum, (long long)out_sum, n_kind[0],
                n_kind[1], n_kind[2], n_kind[3], (int)n_ref, (int)o.qctx,
                o.break_quality ? "true" : "false");
        fprintf(f, " \"reference\": {");
        jnum(f, "ppl", ref_ppl, false);
        fprintf(f, "},\n \"rows\": [\n");
        for (int c = 0; c < N_CFG; c++) {
            const ab_sum *s = &sum[c];
            fprintf(f, "  {\"name\": ");
            jstr(f, cfgs[c].name);
            fprintf(f, ", \"definition\": ");
            jstr(f, cfgs[c].what);
            fprintf(f, ", \"kv_type\": \"%s/%s\", \"base\": %d, \"available\": %s, ", cfgs[c].kt,
                    cfgs[c].vt, cfgs[c].base, s->avail ? "true" : "false");
            if (!s->avail) {
                fprintf(f, "\"reason\": ");
                jstr(f, s->reason);
                fprintf(f, "}%s\n", c + 1 < N_CFG ? "," : "");
                continue;
            }
            jnum(f, "tok_s", s->tok_s, true);
            jnum(f, "tok_s_min", s->tok_s_min, true);
            jnum(f, "tok_s_max", s->tok_s_max, true);
            jnum(f, "throughput_x_naive", nv->avail ? s->tok_s / nv->tok_s : NAN, true);
            jnum(f, "ttft_p50_s", s->ttft50, true);
            jnum(f, "ttft_p99_s", s->ttft99, true);
            jnum(f, "tpot_p50_s", s->tpot50, true);
            jnum(f, "tpot_p99_s", s->tpot99, true);
            jnum(f, "ttft_p50_cut_pct", nv->avail ? pct_cut(nv->ttft50, s->ttft50) : NAN, true);
            jnum(f, "tpot_p50_cut_pct", nv->avail ? pct_cut(nv->tpot50, s->tpot50) : NAN, true);
            jnum(f, "duration_s", s->dur, true);
            jnum(f, "weights_mib", s->w_mib, true);
            jnum(f, "kv_peak_mib", s->kv_peak_mib, true);
            jnum(f, "kv_pool_mib", s->kv_pool_mib, true);
            jnum(f, "weights_kv_mib", s->mem_mib, true);
            jnum(f, "memory_cut_pct", nv->avail ? pct_cut(nv->mem_mib, s->mem_mib) : NAN, true);
            jnum(f, "kv_cut_pct", nv->avail ? pct_cut(nv->kv_peak_mib, s->kv_peak_mib) : NAN, true);
            jnum(f, "peak_rss_mib", s->rss_mib, true);
            jnum(f, "rss_at_start_mib", s->rss_start_mib, true);
            jnum(f, "ppl", s->q_ok ? s->ppl : NAN, true);
            jnum(f, "ppl_delta_pct", s->q_ok ? 100.0 * (s->ppl / ref_ppl - 1) : NAN, true);
            jnum(f, "kl", s->q_ok ? s->kl : NAN, true);
            jnum(f, "top1_agreement", s->q_ok ? s->top1 : NAN, true);
            jnum(f, "greedy_agreement_vs_base", s->greedy, true);
            jnum(f, "spec_acceptance", s->spec_acc, true);
            jnum(f, "cached_prompt_tokens", (double)s->cached, true);
            fprintf(f, "\"runs\": [");
            for (int r = 0; r < o.runs; r++) {
                const ab_res *x = &all[(size_t)c * o.runs + r];
                fprintf(f, "{");
                jnum(f, "tok_s", x->tok_s, true);
                jnum(f, "ttft_p50_s", x->ttft_p50, true);
                jnum(f, "tpot_p50_s", x->tpot_p50, true);
                jnum(f, "output_tokens", (double)x->out_tokens, true);
                jnum(f, "peak_rss_mib", x->rss_peak_kb / 1024.0, false);
                fprintf(f, "}%s", r + 1 < o.runs ? ", " : "");
            }
            fprintf(f, "]}%s\n", c + 1 < N_CFG ? "," : "");
        }
        fprintf(f, " ]}\n");
    } else {
        char b[16][48];
        fprintf(f, "## redline bench ablation\n\n");
        fprintf(f, "- machine: %s, %ld cores, memory bandwidth %.1f GB/s (memcpy, read+write)\n", cpu,
                cores, bw);
        fprintf(f, "- model: %s%s%s\n", o.model, o.draft ? ", draft " : "", o.draft ? o.draft : "");
        fprintf(f, "- workload: %d requests (%d chat, %d code, %d summarization, %d JSON), closed loop "
                   "of %d clients, own prompt ~%d tokens (chat/JSON /2, summary x2), output ~%d, "
                   "shared system prompt %d tokens; %lld prompt + %lld output tokens; -c %d, -b %d, "
                   "-t %d, seed %llu\n",
                (int)o.n_req, n_kind[0], n_kind[1], n_kind[2], n_kind[3], (int)o.conc,
                (int)o.prompt_len, (int)o.output_len, (int)o.shared, (long long)prompt_sum,
                (long long)out_sum, (int)o.n_ctx, (int)o.batch, (int)o.threads,
                (unsigned long long)o.seed);
        fprintf(f, "- quality: %d tokens of %s (windows of %d, each scoring its second half), reference f32 weights + f32 KV, "
                   "PPL %.4f%s\n",
                (int)n_ref, o.qtext, (int)o.qctx, ref_ppl,
                o.break_quality ? "; --break-quality: N(0,1) noise on every row's logits" : "");
        fprintf(f, "- %d run(s) per row, interleaved; medians, tok/s with [min-max]\n\n", (int)o.runs);
        fprintf(f, "| configuration | tok/s | x naive | TTFT p50/p99 ms | TTFT cut | TPOT p50/p99 ms "
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
            if (o.runs > 1) snprintf(range, sizeof range, " [%.1f-%.1f]", s->tok_s_min, s->tok_s_max);
            fprintf(f, "| %s | %.2f%s | %s | %.0f / %.0f | %s | %.1f / %.1f | %s | %.1f | %s | %.1f / %.1f "
                       "| %.0f | %s | %s | %s | %s | %s |\n",
                    cfgs[c].name, s->tok_s, range,
                    fmt(b[0], 48, "%.2f", nv->avail ? s->tok_s / nv->tok_s : NAN), 1e3 * s->ttft50,
                    1e3 * s->ttft99, fmt(b[1], 48, "%.0f%%", nv->avail ? pct_cut(nv->ttft50, s->ttft50) : NAN),
                    1e3 * s->tpot50, 1e3 * s->tpot99,
                    fmt(b[2], 48, "%.0f%%", nv->avail ? pct_cut(nv->tpot50, s->tpot50) : NAN), s->mem_mib,
                    fmt(b[3], 48, "%.0f%%", nv->avail ? pct_cut(nv->mem_mib, s->mem_mib) : NAN),
                    s->kv_peak_mib, s->kv_pool_mib, s->rss_mib, fmt(b[4], 48, "%.4f", s->q_ok ? s->ppl : NAN),
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
