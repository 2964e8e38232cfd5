/* fwdtime: the forward costs that decide whether speculation pays — the
 * time of one forward of n positions of one sequence (a verification of
 * n - 1 drafts), of n sequences at one position each (a batched draft or
 * decode step), with the full or a restricted output head.
 *
 *   fwdtime -m MODEL [-t THREADS] [-r REPEATS] [--ctx 256] [--vocab N]
 *           [--positions 1,2,3,4,5,6] [--seqs 1,4,16]
 *
 * After a --ctx token prefill (per sequence), each configuration runs
 * REPEATS times over the same positions (the KV writes are overwritten)
 * and the median is printed, one JSON line per configuration:
 *   {"kind": "positions"|"seqs", "n", "vocab", "ms", "ratio"}
 * where ratio is ms over the 1-position, full-head time. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/threadpool.h"
#include "kv/seqkv.h"
#include "model/model.h"

#define MAXN 64

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int parse_list(const char *s, int32_t *out) {
    int n = 0;
    while (*s && n < 16) {
        out[n++] = (int32_t)strtol(s, (char **)&s, 10);
        while (*s == ',') s++;
    }
    return n;
}

/* Median ms of `reps` forwards of n tokens: n positions of sequence 0
 * (seqs false) or position ctx of sequences 0..n-1 (seqs true). */
static double time_fwd(rl_model *m, rl_seqkv *kv, int32_t n, bool seqs, int32_t ctx, int32_t vocab,
                       int reps, float *logits, rl_threadpool *tp) {
    int32_t tok[MAXN], pos[MAXN], seq[MAXN];
    bool want[MAXN];
    for (int32_t i = 0; i < n; i++) {
        tok[i] = 100 + i;
        pos[i] = seqs ? ctx : ctx + i;
        seq[i] = seqs ? i : 0;
        want[i] = true;
    }
    rl_batch b = {.n_tok = n,
                  .token = tok,
                  .pos = pos,
                  .seq = seq,
                  .want_logits = want,
                  .n_seq = kv->n_seq,
                  .block_tables = kv->tables,
                  .n_blocks = kv->n_blocks,
                  .n_vocab_out = vocab};
    double t[64];
    rl_err err = {0};
    for (int r = 0; r < reps + 1; r++) {
        double t0 = rl_time_s();
        if (rl_model_forward(m, &b, kv->layers, logits, tp, &err)) {
            fprintf(stderr, "fwdtime: %s\n", err.msg);
            exit(1);
        }
        if (r > 0) t[r - 1] = (rl_time_s() - t0) * 1e3; /* the first run warms up */
    }
    qsort(t, (size_t)reps, sizeof *t, cmp_d);
    return t[reps / 2];
}

int main(int argc, char **argv) {
    const char *path = "models/smollm2-135m.gguf";
    int32_t threads = 2, reps = 5, ctx = 256, vocab = 0;
    int32_t posl[16] = {1, 2, 3, 4, 5, 6}, seql[16] = {1, 4, 16};
    int n_pos = 6, n_seqs = 3;
    for (int a = 1; a < argc; a++) {
        const char *v = a + 1 < argc ? argv[a + 1] : NULL;
        if (!v) break;
        if (!strcmp(argv[a], "-m"))
            path = v;
        else if (!strcmp(argv[a], "-t"))
            threads = atoi(v);
        else if (!strcmp(argv[a], "-r"))
            reps = atoi(v);
        else if (!strcmp(argv[a], "--ctx"))
            ctx = atoi(v);
        else if (!strcmp(argv[a], "--vocab"))
            vocab = atoi(v);
        else if (!strcmp(argv[a], "--positions"))
            n_pos = parse_list(v, posl);
        else if (!strcmp(argv[a], "--seqs"))
            n_seqs = parse_list(v, seql);
        else {
            fprintf(stderr, "fwdtime: unknown option %s\n", argv[a]);
            return 2;
        }
        a++;
    }
    if (reps < 1 || reps > 64 || ctx < 1) return 2;
    int32_t max_seq = 1;
    for (int i = 0; i < n_seqs; i++)
        if (seql[i] > max_seq) max_seq = seql[i];
    for (int i = 0; i < n_pos; i++)
        if (posl[i] < 1 || posl[i] > MAXN) return 2;
    if (max_seq > MAXN) return 2;
    rl_err err = {0};
    rl_model *m;
    rl_model_opts mo = {.max_batch = 256};
    if (rl_model_load(path, &mo, &m, &err)) {
        fprintf(stderr, "fwdtime: %s\n", err.msg);
        return 1;
    }
    rl_threadpool *tp = rl_threadpool_new(threads);
    rl_seqkv kv;
    if (rl_seqkv_init(&kv, m, ctx + MAXN + 1, max_seq, 16, RL_TYPE_F16, &err)) {
        fprintf(stderr, "fwdtime: %s\n", err.msg);
        return 1;
    }
    int32_t *prompt = malloc((size_t)ctx * sizeof *prompt);
    for (int32_t i = 0; i < ctx; i++) prompt[i] = 1000 + (i * 37) % 5000;
    for (int32_t s = 0; s < max_seq; s++)
        if (rl_seqkv_eval(&kv, m, s, prompt, ctx, 0, false, NULL, tp, &err)) {
            fprintf(stderr, "fwdtime: %s\n", err.msg);
            return 1;
        }
    float *logits = malloc((size_t)MAXN * (size_t)rl_model_n_vocab(m) * sizeof(float));
    double base = time_fwd(m, &kv, 1, false, ctx, 0, reps, logits, tp);
    for (int i = 0; i < n_pos; i++) {
        double ms = time_fwd(m, &kv, posl[i], false, ctx, vocab, reps, logits, tp);
        printf(
            "{\"kind\": \"positions\", \"n\": %d, \"vocab\": %d, \"ms\": %.2f, \"ratio\": %.3f}\n",
            (int)posl[i], (int)(vocab ? vocab : rl_model_n_vocab(m)), ms, ms / base);
    }
    for (int i = 0; i < n_seqs; i++) {
        double ms = time_fwd(m, &kv, seql[i], true, ctx, vocab, reps, logits, tp);
        printf("{\"kind\": \"seqs\", \"n\": %d, \"vocab\": %d, \"ms\": %.2f, \"ratio\": %.3f}\n",
               (int)seql[i], (int)(vocab ? vocab : rl_model_n_vocab(m)), ms, ms / base);
    }
    printf("{\"kind\": \"base\", \"ms\": %.2f}\n", base);
    free(prompt);
    free(logits);
    rl_seqkv_free(&kv);
    rl_threadpool_free(tp);
    rl_model_free(m);
    return 0;
}
