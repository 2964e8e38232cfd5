/* embed: the pooled, L2-normalised embedding of fixed token ids
 * (rl_model_embed), for the tests that compare it with the NumPy reference
 * (tests/reference/bert.py) and the llama.cpp oracle script.
 *
 *   embed -m MODEL --tokens 1,2,3 [--tokens 4,5 ...] [--exact] [-b MAX_BATCH]
 *         [-t THREADS]
 *
 * Prints one JSON line on stdout: {"arch", "n_embd", "pooling",
 * "max_tokens", "embeddings": [[...], ...]} (one vector per --tokens).
 * --exact dequantizes every weight to f32 at load and keeps KV in f32.
 * Errors: one line on stderr, exit status 1.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv/seqkv.h"
#include "model/model.h"

#define MAX_INPUTS 16

static int die(const char *msg) {
    fprintf(stderr, "embed: %s\n", msg);
    return 1;
}

static int parse_tokens(const char *s, int32_t **out, int32_t *n) {
    size_t cap = strlen(s) / 2 + 1;
    int32_t *t = malloc(cap * sizeof *t), cnt = 0;
    if (!t) return -1;
    for (const char *p = s; *p;) {
        while (*p == ' ' || *p == ',') p++;
        if (!*p) break;
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < INT32_MIN || v > INT32_MAX || (size_t)cnt == cap) {
            free(t);
            return -1;
        }
        t[cnt++] = (int32_t)v;
        p = end;
    }
    *out = t;
    *n = cnt;
    return 0;
}

int main(int argc, char **argv) {
    const char *path = NULL;
    int32_t *toks[MAX_INPUTS], ntok[MAX_INPUTS], n_in = 0, max_batch = 0, threads = 1;
    bool exact = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-m") && i + 1 < argc)
            path = argv[++i];
        else if (!strcmp(a, "--tokens") && i + 1 < argc) {
            if (n_in == MAX_INPUTS) return die("too many --tokens");
            if (parse_tokens(argv[++i], &toks[n_in], &ntok[n_in]) || ntok[n_in] == 0)
                return die("bad --tokens");
            n_in++;
        } else if (!strcmp(a, "-b") && i + 1 < argc)
            max_batch = atoi(argv[++i]);
        else if (!strcmp(a, "-t") && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (!strcmp(a, "--exact"))
            exact = true;
        else
            return die("usage: embed -m MODEL --tokens 1,2,3 [--exact] [-b N] [-t N]");
    }
    if (!path || n_in == 0) return die("-m and --tokens are required");
    rl_err err = {0};
    rl_model *m = NULL;
    rl_model_opts mo = {.max_batch = max_batch,
                        .weights = exact ? RL_MODEL_WEIGHTS_F32 : RL_MODEL_WEIGHTS_STORED};
    if (rl_model_load(path, &mo, &m, &err)) return die(err.msg);
    rl_threadpool *tp = rl_threadpool_new(threads > 0 ? threads : 1);
    int32_t n_max = 0;
    for (int32_t i = 0; i < n_in; i++) n_max = ntok[i] > n_max ? ntok[i] : n_max;
    rl_seqkv kv;
    if (rl_seqkv_init(&kv, m, n_max, 1, 0, exact ? RL_TYPE_F32 : RL_TYPE_F16, &err))
        return die(err.msg);
    int32_t E = rl_model_n_embd(m);
    float *v = malloc((size_t)E * sizeof *v);
    static const char *const pool_names[] = {"", "mean", "cls", "last"};
    printf("{\"arch\": \"%s\", \"n_embd\": %d, \"pooling\": \"%s\", \"max_tokens\": %d, "
           "\"embeddings\": [",
           rl_model_arch(m), (int)E, pool_names[rl_model_pooling(m)],
           (int)rl_model_embed_max_tokens(m));
    int rc = 0;
    for (int32_t i = 0; i < n_in && !rc; i++) {
        if (rl_model_embed(m, toks[i], ntok[i], kv.layers, kv.tables[0], kv.n_blocks[0], v, tp,
                           &err)) {
            rc = die(err.msg);
            break;
        }
        printf(i ? ", [" : "[");
        for (int32_t d = 0; d < E; d++) printf(d ? ", %.9g" : "%.9g", (double)v[d]);
        printf("]");
    }
    if (!rc) printf("]}\n");
    for (int32_t i = 0; i < n_in; i++) free(toks[i]);
    free(v);
    rl_seqkv_free(&kv);
    rl_threadpool_free(tp);
    rl_model_free(m);
    return rc;
}
