/* `redline run`: generate text from a prompt, or chat interactively.
 *
 *   redline run [-m MODEL] [-p PROMPT | -f FILE] [-n N] [-c CTX] [-t THREADS]
 *               [--temp T] [--top-k K] [--top-p P] [--min-p P]
 *               [--repeat-penalty R] [--seed S] [--raw] [-s SYSTEM]
 *
 * One-shot (-p or -f): the prompt goes through the model's chat template
 * (unless --raw, or the model has none), tokens stream to stdout through
 * the streaming detokenizer, and timings go to stderr.  Without -p/-f:
 * multi-turn chat, one user message per line of stdin (a TTY or not),
 * until EOF; each turn re-renders the whole conversation and evaluates
 * only the tokens after the longest prefix already in the KV cache.
 * Generation stops at an end-of-generation token, after -n tokens, or when
 * the context is full.  Model output goes to stdout, diagnostics to stderr.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "kv/seqkv.h"
#include "kernels/kernels.h"
#include "model/model.h"
#include "sample/sample.h"
#include "chat/chat.h"
#include "tokenizer/tokenizer.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: redline run [options]\n\n"
            "model and context:\n"
            "  -m, --model FILE       GGUF model (default $REDLINE_MODEL or %s)\n"
            "  -c, --ctx-size N       context size in tokens (default min(4096, trained))\n"
            "  -t, --threads N        threads (default: CPU count)\n"
            "  -b, --batch-size N     prompt tokens per forward (default 512)\n"
            "\n"
            "prompt:\n"
            "  -p, --prompt TEXT      one-shot prompt (without -p/-f: interactive chat on stdin)\n"
            "  -f, --file FILE        read the one-shot prompt from FILE\n"
            "  -s, --system TEXT      system message for the chat template\n"
            "      --raw, --no-chat-template\n"
            "                         send the prompt as is, without the chat template\n"
            "  -n, --n-predict N      tokens to generate per reply (default 512; -1 = until\n"
            "                         end of generation or a full context)\n"
            "\n"
            "sampling:\n"
            "      --temp T           temperature (default 0.8; 0 = greedy)\n"
            "      --top-k K          keep the K most likely tokens (default 40; 0 = off)\n"
            "      --top-p P          nucleus sampling (default 0.95; 1 = off)\n"
            "      --min-p P          drop tokens below P * max prob (default 0.05; 0 = off)\n"
            "      --repeat-penalty R penalty on the last 64 tokens (default 1.0 = off)\n"
            "      --seed S           rng seed (default: random, printed with -v)\n"
            "\n"
            "other:\n"
            "  -v, --verbose          print the prompt's token count and the seed\n"
            "  -h, --help             this text\n",
            RL_DEFAULT_MODEL);
}

typedef struct run_opts {
    const char *model, *prompt, *file, *system;
    int32_t n_predict, ctx, threads, batch;
    bool raw, verbose, seed_set;
    rl_sample_params sp;
} run_opts;

static bool parse_i32(const char *s, int32_t lo, int32_t hi, int32_t *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (end == s || *end || errno || v < lo || v > hi) return false;
    *out = (int32_t)v;
    return true;
}

static bool parse_f32(const char *s, float *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end || errno || !isfinite(v)) return false;
    *out = (float)v;
    return true;
}

static bool is_opt(const char *a, const char *s1, const char *s2) {
    return !strcmp(a, s1) || (s2 && !strcmp(a, s2));
}

/* Returns 0 on success, 1 on a bad option (message printed), -1 for --help. */
static int parse_args(int argc, char **argv, run_opts *o) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        bool ok = true, takes = true;
#define IS(s1, s2) is_opt(a, s1, s2)
        if (IS("-h", "--help")) return -1;
        else if (IS("--raw", "--no-chat-template")) o->raw = true, takes = false;
        else if (IS("-v", "--verbose")) o->verbose = true, takes = false;
        else if (!v) {
            fprintf(stderr, "redline run: option '%s' needs a value (or is unknown; see --help)\n", a);
            return 1;
        } else if (IS("-m", "--model")) o->model = v;
        else if (IS("-p", "--prompt")) o->prompt = v;
        else if (IS("-f", "--file")) o->file = v;
        else if (IS("-s", "--system")) o->system = v;
        else if (IS("-n", "--n-predict")) ok = parse_i32(v, -1, 1 << 30, &o->n_predict);
        else if (IS("-c", "--ctx-size")) ok = parse_i32(v, 1, 1 << 24, &o->ctx);
        else if (IS("-t", "--threads")) ok = parse_i32(v, 1, 1024, &o->threads);
        else if (IS("-b", "--batch-size")) ok = parse_i32(v, 1, 1 << 16, &o->batch);
        else if (IS("--temp", NULL)) ok = parse_f32(v, &o->sp.temperature);
        else if (IS("--top-k", NULL)) ok = parse_i32(v, 0, 1 << 30, &o->sp.top_k);
        else if (IS("--top-p", NULL)) ok = parse_f32(v, &o->sp.top_p);
        else if (IS("--min-p", NULL)) ok = parse_f32(v, &o->sp.min_p);
        else if (IS("--repeat-penalty", NULL)) ok = parse_f32(v, &o->sp.repeat_penalty);
        else if (IS("--seed", NULL)) {
            char *end;
            errno = 0;
            unsigned long long s = strtoull(v, &end, 10);
            ok = end != v && !*end && !errno;
            o->sp.seed = s;
            o->seed_set = true;
        } else {
            fprintf(stderr, "redline run: unknown option '%s' (see --help)\n", a);
            return 1;
        }
#undef IS
        if (!ok) {
            fprintf(stderr, "redline run: bad value '%s' for %s\n", v, a);
            return 1;
        }
        if (takes) i++;
    }
    if (o->prompt && o->file) {
        fprintf(stderr, "redline run: give -p or -f, not both\n");
        return 1;
    }
    return 0;
}


static void progress(float frac, const char *what, void *ud) {
    bool tty = *(bool *)ud;
    if (tty) {
        fprintf(stderr, "\rloading model: %3d%% (%s)   ", (int)(frac * 100.0f + 0.5f), what);
        if (frac >= 1.0f) fputc('\n', stderr);
    }
}

/* Session state shared by one-shot and chat mode. */
typedef struct session {
    run_opts *o;
    rl_model *m;
    rl_tokenizer *tok;
    rl_sampler *smp;
    rl_seqkv kv;
    rl_threadpool *tp;
    float *logits;     /* [n_vocab] */
    int32_t *hist;     /* [ctx] tokens whose K/V are in the cache */
    int32_t n_hist;
    const char *tmpl;  /* chat template or NULL */
    size_t tmpl_len;
    char bos[64], eos[64];
    /* totals for the stats line */
    int64_t n_prompt, n_gen;
    double t_prompt, t_gen;
} session;

static void special_text(const rl_tokenizer *tok, int32_t id, char *buf, size_t cap) {
    size_t len = 0;
    const char *p = id >= 0 ? rl_tokenizer_piece(tok, id, &len) : NULL;
    if (!p || len >= cap) len = 0;
    if (len) memcpy(buf, p, len);
    buf[len] = '\0';
}

/* Evaluates toks[n_keep..n) after keeping the first n_keep cached tokens;
 * leaves the last token's logits in s->logits. */
static rl_status eval_from(session *s, const int32_t *toks, int32_t n, int32_t n_keep, rl_err *err) {
    if (n > s->kv.n_ctx)
        return rl_err_set(err, RL_ERR_RANGE,
                          "the prompt is %d tokens but the context holds %d (raise -c)", (int)n,
                          (int)s->kv.n_ctx);
    double t0 = rl_time_s();
    rl_status st =
        rl_seqkv_eval(&s->kv, s->m, 0, toks + n_keep, n - n_keep, n_keep, false, s->logits, s->tp, err);
    if (st) return st;
    s->t_prompt += rl_time_s() - t0;
    s->n_prompt += n - n_keep;
    memcpy(s->hist + n_keep, toks + n_keep, (size_t)(n - n_keep) * sizeof *toks);
    s->n_hist = n;
    for (int32_t i = n_keep; i < n; i++) rl_sampler_accept(s->smp, toks[i]);
    return RL_OK;
}

/* Samples and streams a reply; *reply (if non-NULL) gets the text (malloc). */
static rl_status generate(session *s, char **reply, rl_err *err) {
    rl_detok dt;
    rl_detok_init(&dt, s->tok, RL_TOK_SKIP_SPECIAL);
    size_t rcap = 256, rlen = 0;
    char *r = reply ? malloc(rcap) : NULL;
    if (reply && !r) return rl_err_set(err, RL_ERR_NOMEM, "out of memory");
    rl_status st = RL_OK;
    double t0 = rl_time_s();
    for (int32_t i = 0; s->o->n_predict < 0 || i < s->o->n_predict; i++) {
        int32_t id = rl_sampler_sample(s->smp, s->logits, NULL);
        if (id < 0 || rl_tokenizer_is_eog(s->tok, id)) break;
        rl_sampler_accept(s->smp, id);
        s->n_gen++;
        size_t add = 0;
        if ((st = rl_detok_push(&dt, id, &add, err))) break;
        if (dt.len) {
            fwrite(dt.buf, 1, dt.len, stdout);
            fflush(stdout);
            if (r) {
                while (rlen + dt.len + 1 > rcap) {
                    char *nr = realloc(r, rcap *= 2);
                    if (!nr) {
                        st = rl_err_set(err, RL_ERR_NOMEM, "out of memory");
                        break;
                    }
                    r = nr;
                }
                if (st) break;
                memcpy(r + rlen, dt.buf, dt.len);
                rlen += dt.len;
            }
            rl_detok_clear(&dt);
        }
        if (s->n_hist >= s->kv.n_ctx) {
            fprintf(stderr, "\n[context full: %d tokens]\n", (int)s->kv.n_ctx);
            break;
        }
        if ((st = rl_seqkv_eval(&s->kv, s->m, 0, &id, 1, s->n_hist, false, s->logits, s->tp, err)))
            break;
        s->hist[s->n_hist++] = id;
    }
    if (!st) {
        size_t add = 0;
        st = rl_detok_flush(&dt, &add, err);
        if (dt.len) fwrite(dt.buf, 1, dt.len, stdout);
    }
    s->t_gen += rl_time_s() - t0;
    rl_detok_free(&dt);
    if (r) {
        r[rlen] = '\0';
        *reply = r;
    }
    return st;
}

/* Text -> tokens for the model: control tokens in the text are parsed (the
 * template writes them); BOS is added when the model wants one and the
 * text does not already start with it. */
static rl_status tokenize(session *s, const char *text, const int32_t *prefix, int32_t n_prefix,
                          int32_t **out, int32_t *n, rl_err *err) {
    int32_t *ids = NULL;
    size_t cnt = 0;
    rl_status st = rl_tokenizer_encode(s->tok, text, strlen(text), RL_TOK_PARSE_SPECIAL, &ids, &cnt, err);
    if (st) return st;
    int32_t bos = rl_tokenizer_bos(s->tok);
    bool add = n_prefix == 0 && rl_tokenizer_add_bos(s->tok) && bos >= 0 &&
               (cnt == 0 || ids[0] != bos);
    size_t total = (size_t)n_prefix + cnt + (add ? 1 : 0);
    int32_t *res = malloc((total ? total : 1) * sizeof *res);
    if (!res || total > INT32_MAX) {
        free(res);
        rl_free(ids);
        return rl_err_set(err, RL_ERR_NOMEM, "out of memory");
    }
    if (n_prefix) memcpy(res, prefix, (size_t)n_prefix * sizeof *res);
    if (add) res[n_prefix] = bos;
    if (cnt) memcpy(res + n_prefix + (add ? 1 : 0), ids, cnt * sizeof *ids);
    rl_free(ids);
    *out = res;
    *n = (int32_t)total;
    return RL_OK;
}

/* Renders the conversation and tokenizes it, or (raw mode) appends the raw
 * text's tokens to the cached ones; then evaluates what is not cached yet. */
static rl_status feed(session *s, const rl_chat_msg *msgs, size_t n_msgs, const char *raw, rl_err *err) {
    char *text = NULL;
    size_t tl = 0;
    rl_status st;
    if (s->tmpl && !s->o->raw) {
        st = rl_template_render(s->tmpl, s->tmpl_len, msgs, n_msgs, true, s->bos, s->eos, &text, &tl,
                                err);
        if (st) return st;
    }
    int32_t *toks = NULL, n = 0;
    if (text)
        st = tokenize(s, text, NULL, 0, &toks, &n, err);
    else
        st = tokenize(s, raw, s->hist, s->n_hist, &toks, &n, err);
    rl_free(text);
    if (st) return st;
    if (n == 0 || (n == s->n_hist && !text)) {
        free(toks);
        return rl_err_set(err, RL_ERR_INVALID, "empty prompt: nothing to evaluate");
    }
    if (s->o->verbose) fprintf(stderr, "[prompt: %d tokens]\n", (int)n);
    int32_t keep = 0;
    while (keep < s->n_hist && keep < n && s->hist[keep] == toks[keep]) keep++;
    if (keep == n) keep = n - 1; /* re-run the last token for its logits */
    st = eval_from(s, toks, n, keep, err);
    free(toks);
    return st;
}

static int chat_loop(session *s, rl_err *err) {
    size_t cap = 16, n_msgs = 0;
    rl_chat_msg *msgs = malloc(cap * sizeof *msgs);
    if (!msgs) return 1;
    if (s->o->system) msgs[n_msgs++] = (rl_chat_msg){"system", strdup(s->o->system)};
    bool tty = isatty(STDIN_FILENO);
    char *line = NULL;
    size_t lcap = 0;
    int rc = 0;
    for (;;) {
        if (tty) {
            fputs("> ", stdout);
            fflush(stdout);
        }
        ssize_t len = getline(&line, &lcap, stdin);
        if (len < 0) break;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = '\0';
        if (len == 0) continue;
        if (n_msgs + 2 > cap) {
            rl_chat_msg *nm = realloc(msgs, (cap *= 2) * sizeof *msgs);
            if (!nm) {
                rc = 1;
                break;
            }
            msgs = nm;
        }
        msgs[n_msgs++] = (rl_chat_msg){"user", strdup(line)};
        /* raw mode: the transcript is the concatenation of the lines and replies */
        if (feed(s, msgs, n_msgs, line, err)) {
            fprintf(stderr, "redline run: %s\n", err->msg);
            rc = 1;
            break;
        }
        char *reply = NULL;
        if (generate(s, &reply, err)) {
            fprintf(stderr, "\nredline run: %s\n", err->msg);
            free(reply);
            rc = 1;
            break;
        }
        fputc('\n', stdout);
        fflush(stdout);
        msgs[n_msgs++] = (rl_chat_msg){"assistant", reply};
    }
    free(line);
    for (size_t i = 0; i < n_msgs; i++) free((void *)msgs[i].content);
    free(msgs);
    return rc;
}

int rl_cmd_run(int argc, char **argv) {
    run_opts o = {.n_predict = 512, .batch = 512};
    o.sp = rl_sample_params_default();
    o.sp.temperature = 0.8f;
    o.sp.top_k = 40;
    o.sp.top_p = 0.95f;
    o.sp.min_p = 0.05f;
    int pr = parse_args(argc, argv, &o);
    if (pr < 0) {
        usage(stdout);
        return 0;
    }
    if (pr > 0) return 2;
    if (!o.threads) {
        long nc = sysconf(_SC_NPROCESSORS_ONLN);
        o.threads = nc > 0 ? (int32_t)(nc > 64 ? 64 : nc) : 1;
    }
    if (!o.seed_set) o.sp.seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32) ^ rl_time_ns();
    o.model = rl_cli_model_path(o.model);
    rl_kernels_init(RL_KERNELS_AUTO);

    session s = {.o = &o};
    rl_err err = {0};
    int rc = 1;
    char *prompt_buf = NULL;
    if (o.file) {
        size_t n;
        prompt_buf = rl_cli_read_file(o.file, &n);
        if (!prompt_buf) {
            fprintf(stderr, "redline run: cannot read '%s': %s\n", o.file, strerror(errno));
            return 1;
        }
        o.prompt = prompt_buf;
    }
    bool tty = isatty(STDERR_FILENO);
    double t_load = rl_time_s();
    rl_model_opts mo = {.max_batch = o.batch, .prefault = true, .progress = progress,
                        .progress_ud = &tty};
    if (rl_model_load(o.model, &mo, &s.m, &err)) {
        fprintf(stderr, "redline run: %s: %s\n", o.model, err.msg);
        goto done;
    }
    if (rl_tokenizer_load(rl_model_gguf(s.m), &s.tok, &err)) {
        fprintf(stderr, "redline run: %s: %s\n", o.model, err.msg);
        goto done;
    }
    t_load = rl_time_s() - t_load;
    int32_t ctx = o.ctx ? o.ctx : rl_model_n_ctx_train(s.m) < 4096 ? rl_model_n_ctx_train(s.m) : 4096;
    int32_t V = rl_model_n_vocab(s.m);
    if (rl_seqkv_init(&s.kv, s.m, ctx, 1, 0, RL_TYPE_F16, &err)) {
        fprintf(stderr, "redline run: %s\n", err.msg);
        goto done;
    }
    if (!(s.smp = rl_sampler_new(&o.sp, V, &err))) {
        fprintf(stderr, "redline run: %s\n", err.msg);
        goto done;
    }
    s.logits = malloc((size_t)V * sizeof(float));
    s.hist = malloc((size_t)ctx * sizeof(int32_t));
    s.tp = o.threads > 1 ? rl_threadpool_new(o.threads) : NULL;
    if (!s.logits || !s.hist || (o.threads > 1 && !s.tp)) {
        fprintf(stderr, "redline run: out of memory\n");
        goto done;
    }
    rl_gguf_str ts;
    if (!rl_gguf_get_str(rl_model_gguf(s.m), "tokenizer.chat_template", &ts, &err) && ts.ptr) {
        s.tmpl = ts.ptr;
        s.tmpl_len = ts.len;
    } /* no template (e.g. a base model such as our Gemma 3 file): the prompt goes raw */
    special_text(s.tok, rl_tokenizer_bos(s.tok), s.bos, sizeof s.bos);
    special_text(s.tok, rl_tokenizer_eos(s.tok), s.eos, sizeof s.eos);
    fprintf(stderr, "redline run: %s (%s, %d layers, %s kernels), context %d, %d threads%s\n",
            rl_model_name(s.m)[0] ? rl_model_name(s.m) : o.model, rl_model_arch(s.m),
            (int)rl_model_n_layer(s.m), rl_kernels_impl_name(), (int)ctx, (int)o.threads,
            s.tmpl && !o.raw ? ", chat template" : ", raw prompt");
    if (o.verbose) fprintf(stderr, "[seed %llu]\n", (unsigned long long)o.sp.seed);

    if (o.prompt) {
        rl_chat_msg msgs[2];
        size_t nm = 0;
        if (o.system) msgs[nm++] = (rl_chat_msg){"system", o.system};
        msgs[nm++] = (rl_chat_msg){"user", o.prompt};
        if (feed(&s, msgs, nm, o.prompt, &err) || generate(&s, NULL, &err)) {
            fprintf(stderr, "\nredline run: %s\n", err.msg);
            goto done;
        }
        fputc('\n', stdout);
        rc = 0;
    } else {
        rc = chat_loop(&s, &err);
    }
    fprintf(stderr, "\nload %.2f s | prompt %lld tokens, %.1f tok/s | generated %lld tokens, %.1f tok/s\n",
            t_load, (long long)s.n_prompt, s.t_prompt > 0 ? (double)s.n_prompt / s.t_prompt : 0.0,
            (long long)s.n_gen, s.t_gen > 0 ? (double)s.n_gen / s.t_gen : 0.0);
done:
    free(prompt_buf);
    free(s.logits);
    free(s.hist);
    rl_sampler_free(s.smp);
    rl_seqkv_free(&s.kv);
    rl_tokenizer_free(s.tok);
    rl_model_free(s.m);
    rl_threadpool_free(s.tp);
    return rc;
}
