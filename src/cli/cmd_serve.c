/* `redline serve`: command-line flags -> rl_server_config -> rl_server_run
 * (src/server/).  Flags follow llama.cpp's names (DESIGN.md §5).  Every bad
 * flag value is a one-line error naming the flag and exit status 2. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "server/server.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: redline serve [options]\n"
            "\n"
            "OpenAI-compatible HTTP server: /v1/chat/completions, /v1/completions, /v1/models,\n"
            "/health, /metrics, /tokenize, /detokenize, and a chat page at /.\n"
            "\n"
            "model:\n"
            "  -m, --model FILE       GGUF model (default $REDLINE_MODEL or " RL_DEFAULT_MODEL ")\n"
            "  -a, --alias NAME       model id reported by the API (default: the file name)\n"
            "\n"
            "network:\n"
            "  --host ADDR            address to bind (default 127.0.0.1)\n"
            "  --port N               port (default 8080; 0 = any free port)\n"
            "  --api-key KEY          require 'Authorization: Bearer KEY' (all routes but /health and /)\n"
            "                         (default $REDLINE_API_KEY if set)\n"
            "  --max-body BYTES       request body limit (default 4M)\n"
            "  --max-conns N          simultaneous connections (default 512)\n"
            "\n"
            "engine:\n"
            "  -c, --ctx-size N       context length per sequence (default min(train, 4096))\n"
            "  -np, --parallel N      sequences running at once (default 32)\n"
            "  -b, --batch-size N     tokens per engine step (default 256)\n"
            "  -t, --threads N        compute threads (default: one per core)\n"
            "  --kv-mem SIZE          KV-cache memory, e.g. 512M or 2G (default: sized from -c and -np)\n"
            "  --cache-type-k TYPE    K cache pages: f16 (default), f32, q8_0, q8_64, q4_0, iq4_nl\n"
            "  --cache-type-v TYPE    V cache pages: same choices (docs/KVQUANT.md)\n"
            "  --max-queue N          waiting requests before new ones get 503 (default 256)\n"
            "  --no-prefix-cache      do not reuse cached prompt prefixes\n"
            "\nspeculative decoding:\n"
            "  --spec MODE            default for requests: none (default), ngram, draft\n"
            "                         (a request may set \"speculative\" itself)\n"
            "  -md, --model-draft FILE  draft model with the same vocabulary\n"
            "  --draft-max N          draft tokens per step at most (default 5; a cost\n"
            "                         model of measured step times picks fewer or none)\n"
            "  --draft-vocab N        draft head scores only token ids [0, N): cheaper draft\n"
            "                         steps (default 32768; 0 = the full vocabulary)\n"
            "  --spec-max-batch N     speculate only while at most N sequences decode (4)\n"
            "\n"
            "other:\n"
            "  --drain SECONDS        on SIGTERM, time in-flight requests may take (default 30)\n"
            "  -h, --help             this text\n");
}

/* Parses "512M", "2G", "1048576" (K, M, G, T; powers of 1024). */
static int parse_size(const char *s, size_t *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || v < 0) return -1;
    double mul = 1;
    switch (*end) {
    case 'k': case 'K': mul = 1024.0; end++; break;
    case 'm': case 'M': mul = 1024.0 * 1024; end++; break;
    case 'g': case 'G': mul = 1024.0 * 1024 * 1024; end++; break;
    case 't': case 'T': mul = 1024.0 * 1024 * 1024 * 1024; end++; break;
    default: break;
    }
    if (*end == 'i' || *end == 'I') end++;
    if (*end == 'b' || *end == 'B') end++;
    if (*end) return -1;
    v *= mul;
    if (v > (double)SIZE_MAX / 2) return -1;
    *out = (size_t)v;
    return 0;
}

static int parse_int(const char *flag, const char *s, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        fprintf(stderr, "redline serve: %s: expected an integer in [%ld, %ld], got '%s'\n", flag, lo, hi, s);
        return -1;
    }
    *out = v;
    return 0;
}

int rl_cmd_serve(int argc, char **argv) {
    rl_server_config c;
    rl_server_config_default(&c);
    const char *model = NULL;
    const char *env_key = getenv("REDLINE_API_KEY");
    if (env_key && *env_key) c.api_key = env_key;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--no-prefix-cache")) {
            c.ep.prefix_cache = false;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "redline serve: %s: %s\n", a,
                    a[0] == '-' ? "missing value (see redline serve --help)" : "unexpected argument");
            return 2;
        }
        const char *v = argv[++i];
        long n;
        size_t sz;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) model = v;
        else if (!strcmp(a, "-a") || !strcmp(a, "--alias")) c.alias = v;
        else if (!strcmp(a, "--host")) c.host = v;
        else if (!strcmp(a, "--api-key")) c.api_key = v;
        else if (!strcmp(a, "--cache-type-k") || !strcmp(a, "-ctk")) c.ep.cache_type_k = v;
        else if (!strcmp(a, "-md") || !strcmp(a, "--model-draft")) c.ep.draft_model_path = v;
        else if (!strcmp(a, "--spec")) {
            if (!strcmp(v, "none")) c.default_spec = RL_SPEC_NONE;
            else if (!strcmp(v, "ngram")) c.default_spec = RL_SPEC_NGRAM;
            else if (!strcmp(v, "draft")) c.default_spec = RL_SPEC_DRAFT;
            else {
                fprintf(stderr, "redline serve: --spec: must be none, ngram or draft\n");
                return 2;
            }
        } else if (!strcmp(a, "--draft-max")) {
            if (parse_int(a, v, 0, 32, &n)) return 2;
            c.ep.draft_max = (int32_t)n;
        } else if (!strcmp(a, "--draft-vocab")) {
            if (parse_int(a, v, 0, 1 << 24, &n)) return 2;
            c.ep.draft_n_vocab = (int32_t)n;
        } else if (!strcmp(a, "--spec-max-batch")) {
            if (parse_int(a, v, 0, 4096, &n)) return 2;
            c.ep.spec_max_batch = (int32_t)n;
        }
        else if (!strcmp(a, "--cache-type-v") || !strcmp(a, "-ctv")) c.ep.cache_type_v = v;
        else if (!strcmp(a, "--port")) {
            if (parse_int(a, v, 0, 65535, &n)) return 2;
            c.port = (int)n;
        } else if (!strcmp(a, "-c") || !strcmp(a, "--ctx-size")) {
            if (parse_int(a, v, 0, 1 << 20, &n)) return 2;
            c.ep.n_ctx = (int32_t)n;
        } else if (!strcmp(a, "-np") || !strcmp(a, "--parallel")) {
            if (parse_int(a, v, 1, 4096, &n)) return 2;
            c.ep.max_seqs = (int32_t)n;
        } else if (!strcmp(a, "-b") || !strcmp(a, "--batch-size")) {
            if (parse_int(a, v, 1, 65536, &n)) return 2;
            c.ep.max_batch_tokens = (int32_t)n;
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            if (parse_int(a, v, 0, 1024, &n)) return 2;
            c.ep.n_threads = (int32_t)n;
        } else if (!strcmp(a, "--max-queue")) {
            if (parse_int(a, v, 0, 1 << 20, &n)) return 2;
            c.max_queue = (int32_t)n;
            c.ep.max_waiting = (int32_t)n;
        } else if (!strcmp(a, "--max-conns")) {
            if (parse_int(a, v, 1, 65536, &n)) return 2;
            c.max_conns = (int32_t)n;
        } else if (!strcmp(a, "--drain")) {
            if (parse_int(a, v, 0, 3600, &n)) return 2;
            c.drain_s = (double)n;
        } else if (!strcmp(a, "--kv-mem") || !strcmp(a, "--max-body")) {
            if (parse_size(v, &sz) || sz == 0) {
                fprintf(stderr, "redline serve: %s: expected a size such as 512M or 2G, got '%s'\n", a, v);
                return 2;
            }
            if (!strcmp(a, "--kv-mem")) c.ep.kv_mem_bytes = sz;
            else c.max_body = sz;
        } else {
            fprintf(stderr, "redline serve: unknown option '%s' (see redline serve --help)\n", a);
            return 2;
        }
    }
    c.ep.model_path = rl_cli_model_path(model);
    return rl_server_run(&c);
}
