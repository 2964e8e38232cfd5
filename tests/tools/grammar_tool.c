/* Grammar-constrained random generation over a real vocabulary, for the
 * Python structured-output tests and the mask benchmark.
 *
 *   grammar_tool MODEL.gguf (--schema FILE | --gbnf FILE) [options]
 *     --check            compile only: {"ok": true, "rules": N} or {"error": MSG, "code": NAME}
 *     --print            print the grammar text generated from the schema
 *     --seeds A,B,...    one JSON line per seed (default 1):
 *                        {"seed": S, "text": T, "n_tokens": N, "done": bool, "forced": F}
 *     --mode uniform     each step picks uniformly among the allowed tokens (default)
 *     --mode pref        fixed pseudo-logits favouring word-like tokens, sampled
 *                        with softmax: output that looks more like a model's
 *     --budget N         free steps before "finish mode" (default 40): then each
 *                        step takes the allowed token (of <= 3 bytes) that most
 *                        shortens the way to a complete sentence
 *     --max-tokens N     hard cap (default 2000)
 *     --jump             use rl_gmatch_forced (jump-forward) whenever it offers tokens
 *     --bench [STEPS]    mask time per step (median, p99, mean) with the mask cache
 *                        off and on, over pref-mode generations of the seeds
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/hash.h"
#include "gguf/gguf.h"
#include "grammar/grammar.h"
#include "tokenizer/tokenizer.h"

typedef struct opts {
    const char *mode;
    int budget, max_tokens;
    bool jump;
} opts;

static uint64_t rng_state;
static uint64_t rnd(void) { /* splitmix64 */
    uint64_t z = rl_mix64(rng_state);
    rng_state += RL_MIX64_GAMMA;
    return z;
}
static double rnd01(void) {
    return (double)(rnd() >> 11) / 9007199254740992.0;
}

static char *read_file(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)(sz > 0 ? sz : 0) + 1);
    if (!b || fread(b, 1, (size_t)sz, f) != (size_t)sz) {
        fclose(f);
        free(b);
        return NULL;
    }
    fclose(f);
    b[sz] = 0;
    *n = (size_t)sz;
    return b;
}

/* Fixed preference: word-like pieces up, odd bytes down, small per-token noise. */
static float *pref_logits(const rl_tokenizer *tok) {
    int32_t n = rl_tokenizer_n_vocab(tok);
    float *p = malloc(sizeof(float) * (size_t)n);
    for (int32_t i = 0; i < n; i++) {
        size_t len;
        const char *s = rl_tokenizer_piece(tok, i, &len);
        int letters = 0, odd = 0, digits = 0;
        for (size_t k = 0; k < len; k++) {
            unsigned char ch = (unsigned char)s[k];
            if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == ' ')
                letters++;
            else if (ch >= '0' && ch <= '9')
                digits++;
            else if (ch < 0x20 || ch >= 0x7f)
                odd++;
        }
        uint32_t h = (uint32_t)i * 2654435761u;
        float noise = (float)(h >> 8) / (float)(1u << 24);
        float v = noise;
        if (len && (size_t)letters == len) v += 4.0f;
        if (len && (size_t)(digits) == len) v += 3.0f;
        if (odd) v -= 6.0f;
        if (rl_tokenizer_is_eog(tok, i)) v += 8.0f;
        p[i] = v;
    }
    return p;
}

typedef struct gen_out {
    char *text;
    size_t len, cap;
    int n_tokens, forced;
    bool done;
    int64_t max_op_steps; /* most parse-stack expansion steps in one mask or accept */
    double *mask_s;       /* per-step mask time (bench) */
    int n_mask;
} gen_out;

static void out_append(gen_out *o, const char *s, size_t n) {
    if (o->len + n + 1 > o->cap) {
        o->cap = (o->len + n + 1) * 2;
        o->text = realloc(o->text, o->cap);
    }
    memcpy(o->text + o->len, s, n);
    o->len += n;
    o->text[o->len] = 0;
}

/* Finish mode: the allowed token of <= 3 bytes that leaves the fewest bytes
 * to a complete sentence (EOG when the sentence is complete). */
static int32_t finish_pick(rl_gmatch *m, const rl_tokenizer *tok, const float *logits, int32_t n) {
    int32_t best = -1;
    int64_t best_rem = -1;
    rl_err err;
    bool acc = rl_gmatch_is_accepting(m);
    for (int32_t i = 0; i < n; i++) {
        if (isinf(logits[i])) continue;
        if (rl_tokenizer_is_eog(tok, i)) {
            if (acc) return i;
            continue;
        }
        size_t len;
        rl_tokenizer_piece(tok, i, &len);
        if (len > 3) continue;
        rl_gmatch *c = rl_gmatch_clone(m, &err);
        if (!c) continue;
        if (rl_gmatch_accept_token(c, i, &err) == RL_OK) {
            int64_t r = rl_gmatch_min_remaining(c);
            if (r >= 0 && (best < 0 || r < best_rem || (r == best_rem && (rnd() & 3) == 0))) {
                best = i;
                best_rem = r;
            }
        }
        rl_gmatch_free(c);
    }
    return best;
}

static void note_steps(gen_out *out, const rl_gmatch *m, int64_t before) {
    int64_t d = rl_gmatch_get_stats(m).n_expand - before;
    if (d > out->max_op_steps) out->max_op_steps = d;
}

static int generate(const rl_grammar *g, const rl_vocab_trie *trie, const rl_tokenizer *tok,
                    const float *pref, const opts *o, uint64_t seed, int cache, gen_out *out) {
    rl_err err;
    int32_t n = rl_tokenizer_n_vocab(tok);
    rl_gmatch *m = rl_gmatch_new(g, trie, &err);
    if (!m) {
        fprintf(stderr, "grammar_tool: %s\n", err.msg);
        return 1;
    }
    if (cache >= 0) rl_gmatch_set_mask_cache(m, cache);
    rng_state = seed * 0x2545F4914F6CDD1Dull + 1;
    float *logits = malloc(sizeof(float) * (size_t)n);
    bool uniform = !strcmp(o->mode, "uniform");
    while (out->n_tokens < o->max_tokens && !rl_gmatch_is_done(m)) {
        if (o->jump) {
            int32_t f[64];
            int k = rl_gmatch_forced(m, f, 64);
            for (int i = 0; i < k; i++) {
                if (rl_gmatch_accept_token(m, f[i], &err)) {
                    fprintf(stderr, "grammar_tool: forced token rejected: %s\n", err.msg);
                    return 1;
                }
                size_t len;
                const char *s = rl_tokenizer_piece(tok, f[i], &len);
                out_append(out, s, len);
                out->n_tokens++;
                out->forced++;
            }
            if (k) continue;
        }
        for (int32_t i = 0; i < n; i++) logits[i] = uniform ? 0.0f : pref[i];
        uint64_t t0 = rl_time_ns();
        int64_t e0 = rl_gmatch_get_stats(m).n_expand;
        if (rl_gmatch_mask(m, logits, n, &err)) {
            fprintf(stderr, "grammar_tool: %s\n", err.msg);
            return 1;
        }
        double dt = (double)(rl_time_ns() - t0) * 1e-9;
        note_steps(out, m, e0);
        if (out->mask_s) out->mask_s[out->n_mask++] = dt;
        int32_t id = -1;
        if (out->n_tokens >= o->budget) id = finish_pick(m, tok, logits, n);
        if (id < 0) {
            double tot = 0, mx = -INFINITY;
            for (int32_t i = 0; i < n; i++)
                if (!isinf(logits[i]) && logits[i] > mx) mx = logits[i];
            if (isinf(mx)) {
                fprintf(stderr, "grammar_tool: no token allowed (dead end) after %d tokens\n",
                        out->n_tokens);
                break;
            }
            for (int32_t i = 0; i < n; i++)
                if (!isinf(logits[i])) tot += exp(logits[i] - mx);
            double r = rnd01() * tot;
            for (int32_t i = 0; i < n; i++) {
                if (isinf(logits[i])) continue;
                id = i;
                r -= exp(logits[i] - mx);
                if (r <= 0) break;
            }
        }
        e0 = rl_gmatch_get_stats(m).n_expand;
        if (rl_gmatch_accept_token(m, id, &err)) {
            fprintf(stderr, "grammar_tool: sampled token rejected: %s\n", err.msg);
            return 1;
        }
        note_steps(out, m, e0);
        out->n_tokens++;
        if (!rl_tokenizer_is_eog(tok, id)) {
            size_t len;
            const char *s = rl_tokenizer_piece(tok, id, &len);
            out_append(out, s, len);
        }
    }
    out->done = rl_gmatch_is_done(m);
    if (!out->text) out_append(out, "", 0);
    free(logits);
    rl_gmatch_free(m);
    return 0;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void report(const char *label, double *t, int n) {
    if (n == 0) return;
    qsort(t, (size_t)n, sizeof *t, cmp_d);
    double sum = 0;
    for (int i = 0; i < n; i++) sum += t[i];
    printf("| %-26s | %6d | %9.4f | %9.4f | %9.4f | %9.4f |\n", label, n, t[n / 2] * 1e3,
           t[(int)((n - 1) * 0.99)] * 1e3, sum / n * 1e3, t[n - 1] * 1e3);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr,
                "usage: grammar_tool MODEL.gguf (--schema FILE | --gbnf FILE) "
                "[--check|--print|--bench [N]] "
                "[--seeds A,B] [--mode uniform|pref] [--budget N] [--max-tokens N] [--jump]\n");
        return 2;
    }
    const char *schema = NULL, *gbnf = NULL, *seeds = "1";
    bool check = false, print = false, bench = false;
    opts o = {.mode = "uniform", .budget = 40, .max_tokens = 2000};
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--schema") && v)
            schema = v, i++;
        else if (!strcmp(a, "--gbnf") && v)
            gbnf = v, i++;
        else if (!strcmp(a, "--seeds") && v)
            seeds = v, i++;
        else if (!strcmp(a, "--mode") && v)
            o.mode = v, i++;
        else if (!strcmp(a, "--budget") && v)
            o.budget = atoi(v), i++;
        else if (!strcmp(a, "--max-tokens") && v)
            o.max_tokens = atoi(v), i++;
        else if (!strcmp(a, "--check"))
            check = true;
        else if (!strcmp(a, "--print"))
            print = true;
        else if (!strcmp(a, "--jump"))
            o.jump = true;
        else if (!strcmp(a, "--bench"))
            bench = true;
        else {
            fprintf(stderr, "grammar_tool: unknown argument %s\n", a);
            return 2;
        }
    }
    size_t n = 0;
    char *text = read_file(schema ? schema : gbnf ? gbnf : "", &n);
    if (!text) {
        fprintf(stderr, "grammar_tool: cannot read the schema/grammar file\n");
        return 2;
    }
    rl_err err = {0};
    if (print && schema) {
        char *gt = NULL;
        if (rl_json_schema_to_grammar(text, n, &gt, NULL, &err)) {
            fprintf(stderr, "grammar_tool: %s\n", err.msg);
            return 1;
        }
        fputs(gt, stdout);
        rl_free(gt);
        free(text);
        return 0;
    }
    uint64_t t0 = rl_time_ns();
    rl_grammar *g =
        schema ? rl_grammar_from_json_schema(text, n, &err) : rl_grammar_compile(text, n, &err);
    double t_compile = (double)(rl_time_ns() - t0) * 1e-9;
    free(text);
    if (check) {
        json_t *r = g ? json_pack("{s:b,s:i}", "ok", 1, "rules", (int)rl_grammar_n_rules(g))
                      : json_pack("{s:s,s:s}", "error", err.msg, "code", rl_status_str(err.code));
        char *s = json_dumps(r, JSON_COMPACT);
        puts(s);
        free(s);
        json_decref(r);
        rl_grammar_free(g);
        return 0;
    }
    if (!g) {
        fprintf(stderr, "grammar_tool: %s\n", err.msg);
        return 1;
    }
    rl_gguf *gg = NULL;
    rl_tokenizer *tok = NULL;
    if (rl_gguf_open(argv[1], &gg, &err) || rl_tokenizer_load(gg, &tok, &err)) {
        fprintf(stderr, "grammar_tool: %s\n", err.msg);
        return 1;
    }
    rl_gguf_close(gg);
    t0 = rl_time_ns();
    rl_vocab_trie *trie = rl_vocab_trie_from_tokenizer(tok, &err);
    double t_trie = (double)(rl_time_ns() - t0) * 1e-9;
    if (!trie) {
        fprintf(stderr, "grammar_tool: %s\n", err.msg);
        return 1;
    }
    float *pref = pref_logits(tok);
    int rc = 0;
    if (bench) {
        o.mode = "pref";
        printf("vocab %d tokens, trie %d nodes built in %.1f ms; grammar %d rules compiled in %.2f "
               "ms\n",
               rl_tokenizer_n_vocab(tok), rl_vocab_trie_n_nodes(trie), t_trie * 1e3,
               rl_grammar_n_rules(g), t_compile * 1e3);
        printf("| %-26s | %6s | %9s | %9s | %9s | %9s |\n", "mask cache", "steps", "median ms",
               "p99 ms", "mean ms", "max ms");
        printf("|%s|%s|%s|%s|%s|%s|\n", "----------------------------", "--------", "-----------",
               "-----------", "-----------", "-----------");
        int caches[2] = {0, 256};
        const char *labels[2] = {"off (trie walk every step)", "on (256 entries)"};
        for (int ci = 0; ci < 2; ci++) {
            double *all = malloc(sizeof(double) * 200000);
            int n_all = 0;
            const char *p = seeds;
            while (*p && rc == 0) {
                uint64_t seed = strtoull(p, (char **)&p, 10);
                if (*p == ',') p++;
                gen_out out = {.mask_s = malloc(sizeof(double) * ((size_t)o.max_tokens + 1))};
                rc = generate(g, trie, tok, pref, &o, seed, caches[ci], &out);
                for (int k = 0; k < out.n_mask && n_all < 200000; k++) all[n_all++] = out.mask_s[k];
                free(out.mask_s);
                free(out.text);
            }
            report(labels[ci], all, n_all);
            free(all);
        }
    } else {
        const char *p = seeds;
        while (*p && rc == 0) {
            uint64_t seed = strtoull(p, (char **)&p, 10);
            if (*p == ',') p++;
            gen_out out = {0};
            rc = generate(g, trie, tok, pref, &o, seed, -1, &out);
            if (rc) break;
            json_t *r =
                json_pack("{s:I,s:s%,s:i,s:b,s:i,s:I}", "seed", (json_int_t)seed, "text", out.text,
                          out.len, "n_tokens", out.n_tokens, "done", out.done, "forced", out.forced,
                          "max_op_steps", (json_int_t)out.max_op_steps);
            char *s = r ? json_dumps(r, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;
            puts(s ? s : "{\"error\":\"output is not valid UTF-8\"}");
            free(s);
            json_decref(r);
            free(out.text);
        }
    }
    free(pref);
    rl_vocab_trie_free(trie);
    rl_tokenizer_free(tok);
    rl_grammar_free(g);
    return rc;
}
