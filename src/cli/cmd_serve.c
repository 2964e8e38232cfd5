/* `redline serve`: command-line flags -> rl_server_config -> rl_server_run
 * (src/server/).  Flags follow llama.cpp's names (DESIGN.md §5).  Every bad
 * flag value is a one-line error naming the flag and exit status 2. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/env.h"
#include "cli/args.h"
#include "cli/cli.h"
#include "server/server.h"

static void usage(FILE *f) {
    fprintf(
        f, "usage: redline serve [options]\n"
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
           "  --api-key KEY          require 'Authorization: Bearer KEY' (all routes but /health "
           "and /)\n"
           "                         (default $REDLINE_API_KEY if set)\n"
           "  --max-body BYTES       request body limit (default 4M)\n"
           "  --max-conns N          simultaneous connections (default 512)\n"
           "\n"
           "engine:\n"
           "  -c, --ctx-size N       context length per sequence (default min(train, 4096))\n"
           "  -np, --parallel N      sequences running at once (default 32)\n"
           "  -b, --batch-size N     tokens per engine step (default 256)\n"
           "  -t, --threads N        compute threads (default: one per core)\n"
           "  --kv-mem SIZE          KV-cache memory, e.g. 512M, 2G or 1T (default: sized from -c "
           "and -np)\n"
           "  -ctk, --cache-type-k T K cache pages: f16 (default), f32, q8_0, q8_64, q4_0, iq4_nl\n"
           "  -ctv, --cache-type-v T V cache pages: same choices (docs/KVQUANT.md)\n"
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

int rl_cmd_serve(int argc, char **argv) {
    rl_server_config c;
    rl_server_config_default(&c);
    const char *model = NULL;
    const char *env_key = rl_env(RL_ENV_API_KEY);
    if (env_key && *env_key) c.api_key = env_key;
    static const char *const spec_names[] = {"none", "ngram", "draft", NULL};
    static const rl_spec_mode spec_modes[] = {RL_SPEC_NONE, RL_SPEC_NGRAM, RL_SPEC_DRAFT};
    int32_t port = c.port, drain = (int32_t)c.drain_s;
    rl_args A;
    rl_args_init(&A, "redline serve", argc, argv);
    while (rl_args_next(&A)) {
        bool ok = true;
        int k;
        if (rl_args_is(&A, "-h|--help")) {
            usage(stdout);
            return 0;
        } else if (rl_args_is(&A, "--no-prefix-cache"))
            c.ep.prefix_cache = false;
        else if (rl_args_is(&A, "-m|--model"))
            ok = rl_args_str(&A, &model);
        else if (rl_args_is(&A, "-a|--alias"))
            ok = rl_args_str(&A, &c.alias);
        else if (rl_args_is(&A, "--host"))
            ok = rl_args_str(&A, &c.host);
        else if (rl_args_is(&A, "--api-key"))
            ok = rl_args_str(&A, &c.api_key);
        else if (rl_args_is(&A, "-ctk|--cache-type-k"))
            ok = rl_args_str(&A, &c.ep.cache_type_k);
        else if (rl_args_is(&A, "-ctv|--cache-type-v"))
            ok = rl_args_str(&A, &c.ep.cache_type_v);
        else if (rl_args_is(&A, "-md|--model-draft"))
            ok = rl_args_str(&A, &c.ep.draft_model_path);
        else if (rl_args_is(&A, "--spec")) {
            if ((ok = rl_args_choice(&A, spec_names, &k))) c.default_spec = spec_modes[k];
        } else if (rl_args_is(&A, "--draft-max"))
            ok = rl_args_i32(&A, 0, 32, &c.ep.draft_max);
        else if (rl_args_is(&A, "--draft-vocab"))
            ok = rl_args_i32(&A, 0, 1 << 24, &c.ep.draft_n_vocab);
        else if (rl_args_is(&A, "--spec-max-batch"))
            ok = rl_args_i32(&A, 0, 4096, &c.ep.spec_max_batch);
        else if (rl_args_is(&A, "--port"))
            ok = rl_args_i32(&A, 0, 65535, &port);
        else if (rl_args_is(&A, "-c|--ctx-size"))
            ok = rl_args_i32(&A, 0, 1 << 20, &c.ep.n_ctx);
        else if (rl_args_is(&A, "-np|--parallel"))
            ok = rl_args_i32(&A, 1, 4096, &c.ep.max_seqs);
        else if (rl_args_is(&A, "-b|--batch-size"))
            ok = rl_args_i32(&A, 1, 65536, &c.ep.max_batch_tokens);
        else if (rl_args_is(&A, "-t|--threads"))
            ok = rl_args_i32(&A, 0, 1024, &c.ep.n_threads);
        else if (rl_args_is(&A, "--max-queue")) {
            if ((ok = rl_args_i32(&A, 0, 1 << 20, &c.max_queue))) c.ep.max_waiting = c.max_queue;
        } else if (rl_args_is(&A, "--max-conns"))
            ok = rl_args_i32(&A, 1, 65536, &c.max_conns);
        else if (rl_args_is(&A, "--drain"))
            ok = rl_args_i32(&A, 0, 3600, &drain);
        else if (rl_args_is(&A, "--kv-mem"))
            ok = rl_args_size(&A, true, &c.ep.kv_mem_bytes);
        else if (rl_args_is(&A, "--max-body"))
            ok = rl_args_size(&A, true, &c.max_body);
        else
            ok = rl_args_unknown(&A);
        if (!ok) return 2;
    }
    c.port = (int)port;
    c.drain_s = (double)drain;
    c.ep.model_path = rl_cli_model_path(model);
    return rl_server_run(&c);
}
