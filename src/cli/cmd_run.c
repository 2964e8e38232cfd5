/* `redline run`: generate text from a prompt, or chat interactively, through
 * the engine of include/redline.h (the same step loop, sampler, stop
 * strings, structured output, KV types and speculation as `redline serve`).
 *
 *   redline run [-m MODEL] [-p PROMPT | -f FILE] [-n N] [-c CTX] [-t THREADS]
 *               [--temp T] [--top-k K] [--top-p P] [--min-p P] [--repeat-penalty R]
 *               [--seed S] [--raw] [-s SYSTEM] [--stop S]... [--json-schema FILE |
 *               --grammar FILE] [-ctk T] [-ctv T] [--spec ngram|draft] [-md DRAFT]
 *
 * The engine runs in this thread: submit one request, then rl_engine_step
 * and rl_engine_next until its DONE event, writing each event's text to
 * stdout as it arrives (diagnostics and timings go to stderr).
 *
 * One-shot (-p or -f): the prompt goes through the model's chat template
 * (the file's, else the built-in one for its architecture, exactly as the
 * server chooses: rl_chat_render) unless --raw.  Without -p/-f: multi-turn
 * chat, one user message per line of stdin (a TTY or not), until EOF; each
 * turn resubmits the whole conversation, and the engine's prefix cache
 * finds the blocks of the earlier turns, so only the new tokens are
 * computed.  In raw mode the transcript is the concatenation of the lines
 * and the replies' tokens.  A reply ends at an end-of-generation token, a
 * stop string (not printed), after -n tokens, or when the context is full.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/base.h" /* rl_time_s, rl_malloc */
#include "base/buf.h"
#include "cli/args.h"
#include "cli/cli.h"
#include "redline.h"

#define RUN "redline run"

static void usage(FILE *f) {
    fprintf(
        f,
        "usage: redline run [options]\n\n"
        "model and context:\n"
        "  -m, --model FILE       GGUF model (default $REDLINE_MODEL or %s)\n"
        "  -c, --ctx-size N       context size in tokens (default min(4096, trained))\n"
        "  -t, --threads N        threads (default: one per core)\n"
        "  -b, --batch-size N     prompt tokens per engine step (default 512)\n"
        "  -ctk, --cache-type-k T K cache pages: f16 (default), f32, q8_0, q8_64, q4_0, iq4_nl\n"
        "  -ctv, --cache-type-v T V cache pages: same choices (docs/KVQUANT.md)\n"
        "  --kv-mem SIZE          KV-cache memory, e.g. 512M (default: 4 contexts' worth)\n"
        "\n"
        "prompt:\n"
        "  -p, --prompt TEXT      one-shot prompt (without -p/-f: interactive chat on stdin)\n"
        "  -f, --file FILE        read the one-shot prompt from FILE\n"
        "  -s, --system TEXT      system message for the chat template\n"
        "      --raw, --no-chat-template\n"
        "                         send the prompt as is, without the chat template\n"
        "  -n, --n-predict N      tokens to generate per reply (default 512; -1 = until\n"
        "                         end of generation or a full context)\n"
        "  --stop TEXT            end a reply where TEXT appears (not printed); up to %d\n"
        "  -r, --reverse-prompt TEXT  the same (llama.cpp's name)\n"
        "\n"
        "sampling:\n"
        "      --temp T           temperature (default 0.8; 0 = greedy)\n"
        "      --top-k K          keep the K most likely tokens (default 40; 0 = off)\n"
        "      --top-p P          nucleus sampling (default 0.95; 1 = off)\n"
        "      --min-p P          drop tokens below P * max prob (default 0.05; 0 = off)\n"
        "      --repeat-penalty R penalty on the last 64 tokens (default 1.0 = off)\n"
        "      --seed S           rng seed (default: random, printed with -v)\n"
        "\n"
        "structured output:\n"
        "  --json-schema FILE     replies are JSON valid under the JSON Schema in FILE\n"
        "  --grammar FILE         replies follow the grammar in FILE (docs/STRUCTURED.md)\n"
        "\n"
        "speculative decoding (output identical to plain decoding when greedy):\n"
        "  --spec MODE            none (default), ngram (prompt lookup) or draft (needs -md)\n"
        "  -md, --model-draft FILE  draft model with the same vocabulary (implies --spec draft)\n"
        "  --draft-max N          draft tokens per step at most (default 5)\n"
        "\n"
        "other:\n"
        "  -v, --verbose          print the prompt's token count and the seed\n"
        "  -h, --help             this text\n",
        RL_DEFAULT_MODEL, RL_MAX_STOP);
}

typedef struct run_opts {
    const char *model, *prompt, *file, *system, *schema_file, *grammar_file;
    int32_t n_predict;
    bool raw, verbose, seed_set, spec_set;
    rl_engine_params ep;
    rl_gen_params gp;
} run_opts;

/* Returns 0 on success, 2 on a bad option (message printed), -1 for --help. */
static int parse_args(int argc, char **argv, run_opts *o) {
    static const char *const spec_names[] = {"none", "ngram", "draft", NULL};
    static const rl_spec_mode spec_modes[] = {RL_SPEC_NONE, RL_SPEC_NGRAM, RL_SPEC_DRAFT};
    rl_sample_params *sp = &o->gp.sample;
    rl_args A;
    rl_args_init(&A, RUN, argc, argv);
    while (rl_args_next(&A)) {
        bool ok = true;
        const char *v = NULL;
        int k;
        if (rl_args_is(&A, "-h|--help"))
            return -1;
        else if (rl_args_is(&A, "--raw|--no-chat-template"))
            o->raw = true;
        else if (rl_args_is(&A, "-v|--verbose"))
            o->verbose = true;
        else if (rl_args_is(&A, "-m|--model"))
            ok = rl_args_str(&A, &o->model);
        else if (rl_args_is(&A, "-p|--prompt"))
            ok = rl_args_str(&A, &o->prompt);
        else if (rl_args_is(&A, "-f|--file"))
            ok = rl_args_str(&A, &o->file);
        else if (rl_args_is(&A, "-s|--system"))
            ok = rl_args_str(&A, &o->system);
        else if (rl_args_is(&A, "-n|--n-predict"))
            ok = rl_args_i32(&A, -1, 1 << 30, &o->n_predict);
        else if (rl_args_is(&A, "-c|--ctx-size"))
            ok = rl_args_i32(&A, 1, 1 << 24, &o->ep.n_ctx);
        else if (rl_args_is(&A, "-t|--threads"))
            ok = rl_args_i32(&A, 1, 1024, &o->ep.n_threads);
        else if (rl_args_is(&A, "-b|--batch-size"))
            ok = rl_args_i32(&A, 1, 65536, &o->ep.max_batch_tokens);
        else if (rl_args_is(&A, "-ctk|--cache-type-k"))
            ok = rl_args_str(&A, &o->ep.cache_type_k);
        else if (rl_args_is(&A, "-ctv|--cache-type-v"))
            ok = rl_args_str(&A, &o->ep.cache_type_v);
        else if (rl_args_is(&A, "--kv-mem"))
            ok = rl_args_size(&A, true, &o->ep.kv_mem_bytes);
        else if (rl_args_is(&A, "--temp"))
            ok = rl_args_f32(&A, 0, 100, &sp->temperature);
        else if (rl_args_is(&A, "--top-k"))
            ok = rl_args_i32(&A, 0, 1 << 30, &sp->top_k);
        else if (rl_args_is(&A, "--top-p"))
            ok = rl_args_f32(&A, 1e-6, 1, &sp->top_p);
        else if (rl_args_is(&A, "--min-p"))
            ok = rl_args_f32(&A, 0, 1, &sp->min_p);
        else if (rl_args_is(&A, "--repeat-penalty"))
            ok = rl_args_f32(&A, 1e-6, 100, &sp->repeat_penalty);
        else if (rl_args_is(&A, "--seed"))
            ok = o->seed_set = rl_args_u64(&A, &sp->seed);
        else if (rl_args_is(&A, "--stop|-r|--reverse-prompt")) {
            if ((ok = rl_args_str(&A, &v))) {
                size_t l = strlen(v);
                if (o->gp.n_stop >= RL_MAX_STOP)
                    ok = rl_args_bad(&A, v, "at most %d stop strings", RL_MAX_STOP);
                else if (l == 0 || l > RL_MAX_STOP_LEN)
                    ok = rl_args_bad(&A, v, "a stop string is 1..%d bytes", RL_MAX_STOP_LEN);
                else
                    memcpy(o->gp.stop[o->gp.n_stop++], v, l + 1);
            }
        } else if (rl_args_is(&A, "--json-schema"))
            ok = rl_args_str(&A, &o->schema_file);
        else if (rl_args_is(&A, "--grammar"))
            ok = rl_args_str(&A, &o->grammar_file);
        else if (rl_args_is(&A, "--spec")) {
            if ((ok = rl_args_choice(&A, spec_names, &k))) o->gp.spec = spec_modes[k];
            o->spec_set = true;
        } else if (rl_args_is(&A, "-md|--model-draft"))
            ok = rl_args_str(&A, &o->ep.draft_model_path);
        else if (rl_args_is(&A, "--draft-max"))
            ok = rl_args_i32(&A, 0, 32, &o->ep.draft_max);
        else
            ok = rl_args_unknown(&A);
        if (!ok) return 2;
    }
    bool ok = true;
    if (o->n_predict == 0)
        ok = rl_args_fail(&A, "-n: must be -1 (no limit) or at least 1");
    else if (o->prompt && o->file)
        ok = rl_args_fail(&A, "give -p or -f, not both");
    else if (o->schema_file && o->grammar_file)
        ok = rl_args_fail(&A, "give --json-schema or --grammar, not both");
    if (o->ep.draft_model_path && !o->spec_set) o->gp.spec = RL_SPEC_DRAFT;
    if (ok && o->gp.spec == RL_SPEC_DRAFT && !o->ep.draft_model_path)
        ok = rl_args_fail(&A, "--spec draft needs a draft model (-md FILE)");
    return ok ? 0 : 2;
}

/* Session state shared by one-shot and chat mode. */
typedef struct session {
    run_opts *o;
    rl_engine *e;
    rl_vocab *v;
    int32_t n_ctx, turn;
    int32_t *hist; /* raw mode: the transcript's tokens so far (owned) */
    int32_t n_hist, cap_hist;
    /* totals for the stats line */
    int64_t n_prompt, n_cached, n_gen;
    double t_prompt, t_gen;
} session;

static bool hist_push(session *s, const int32_t *ids, int32_t n) {
    if (n > INT32_MAX - s->n_hist ||
        rl_grow_i32((void **)&s->hist, &s->cap_hist, s->n_hist + n, sizeof *s->hist))
        return false;
    memcpy(s->hist + s->n_hist, ids, (size_t)n * sizeof *ids);
    s->n_hist += n;
    return true;
}

/* Submits prompt ids, drives the engine until the request is done, and
 * streams its text to stdout.  *reply (if non-NULL) gets the text
 * (malloc'd); in raw mode the generated ids join the transcript. */
static rl_status generate(session *s, const int32_t *ids, int32_t n, char **reply, rl_err *err) {
    rl_gen_params gp = s->o->gp;
    gp.max_tokens = s->o->n_predict < 0 ? 0 : s->o->n_predict;
    gp.sample.seed += (uint64_t)s->turn++; /* a fresh draw per turn, reproducible from --seed */
    if (s->o->verbose) fprintf(stderr, "[prompt: %d tokens]\n", (int)n);
    uint64_t id;
    rl_status st = rl_engine_submit(s->e, ids, n, &gp, &id, err);
    if (st == RL_ERR_LIMIT && !strstr(err->msg, "queue")) {
        char msg[sizeof err->msg];
        snprintf(msg, sizeof msg, "%s", err->msg);
        return rl_err_set(err, st, "%.400s (raise -c)", msg);
    }
    if (st) return st;
    rl_buf r = {0}; /* the reply's text, when the caller wants it */
    bool done = false, oom = false;
    int idle = 0;
    rl_event ev;
    while (!done) {
        int32_t computed = rl_engine_step(s->e);
        while (!done && rl_engine_next(s->e, id, &ev, 0) == RL_OK) {
            if (ev.text_len > 0) {
                fwrite(ev.text, 1, (size_t)ev.text_len, stdout);
                fflush(stdout);
                if (reply && rl_buf_append(&r, ev.text, (size_t)ev.text_len)) oom = true;
            }
            if (ev.kind == RL_EV_TOKEN && ev.token >= 0 && s->o->raw &&
                !rl_token_is_eog(s->v, ev.token) && !hist_push(s, &ev.token, 1))
                oom = true;
            done = ev.kind == RL_EV_DONE;
        }
        idle = computed > 0 ? 0 : idle + 1;
        if (!done && idle > 100000) { /* cannot happen while the request holds its KV */
            rl_engine_cancel(s->e, id);
            while (rl_engine_next(s->e, id, &ev, 0) != RL_ERR_NOT_FOUND) rl_engine_step(s->e);
            rl_buf_free(&r);
            return rl_err_set(err, RL_ERR_LIMIT, "the engine made no progress");
        }
    }
    if (ev.finish == RL_FINISH_ERROR) {
        rl_buf_free(&r);
        return rl_err_set(err, ev.error_code ? ev.error_code : RL_ERR_INVALID, "%s",
                          ev.error[0] ? ev.error : "generation failed");
    }
    if (ev.finish == RL_FINISH_LENGTH && ev.n_prompt + ev.n_generated >= s->n_ctx)
        fprintf(stderr, "\n[context full: %d tokens]\n", (int)s->n_ctx);
    s->n_prompt += ev.n_prompt - ev.n_cached;
    s->n_cached += ev.n_cached;
    s->n_gen += ev.n_generated;
    s->t_prompt += ev.t_first_token_s;
    s->t_gen += ev.t_total_s - ev.t_first_token_s;
    if (oom) {
        rl_buf_free(&r);
        return rl_err_set(err, RL_ERR_NOMEM, "out of memory");
    }
    if (reply) *reply = rl_buf_take(&r, NULL);
    return reply && !*reply ? rl_err_set(err, RL_ERR_NOMEM, "out of memory") : RL_OK;
}

/* The prompt of the next reply: the whole conversation through the chat
 * template, or (raw mode) the transcript so far plus the raw text.  *ids
 * allocated (rl_free). */
static rl_status build_prompt(session *s, const rl_chat_msg *msgs, size_t n_msgs, const char *raw,
                              int32_t **ids, int32_t *n, rl_err *err) {
    rl_status st;
    if (!s->o->raw) {
        char *text = NULL;
        size_t tl = 0;
        if ((st = rl_chat_render(s->v, msgs, n_msgs, true, &text, &tl, err))) return st;
        st = rl_tokenize(s->v, text, tl, RL_TOKENIZE_ADD_BOS | RL_TOKENIZE_PARSE_SPECIAL, ids, n,
                         err);
        rl_free(text);
        return st;
    }
    int32_t *add = NULL, n_add = 0;
    unsigned flags = RL_TOKENIZE_PARSE_SPECIAL | (s->n_hist == 0 ? RL_TOKENIZE_ADD_BOS : 0);
    if ((st = rl_tokenize(s->v, raw, strlen(raw), flags, &add, &n_add, err))) return st;
    bool ok = hist_push(s, add, n_add);
    rl_free(add);
    if (!ok) return rl_err_set(err, RL_ERR_NOMEM, "out of memory");
    if (s->n_hist == 0) return rl_err_set(err, RL_ERR_INVALID, "empty prompt: nothing to evaluate");
    *ids = rl_malloc((size_t)s->n_hist * sizeof **ids);
    if (!*ids) return rl_err_set(err, RL_ERR_NOMEM, "out of memory");
    memcpy(*ids, s->hist, (size_t)s->n_hist * sizeof **ids);
    *n = s->n_hist;
    return RL_OK;
}

/* One reply: prompt, generation, newline. */
static rl_status reply_to(session *s, const rl_chat_msg *msgs, size_t n_msgs, const char *raw,
                          char **reply, rl_err *err) {
    int32_t *ids = NULL, n = 0;
    rl_status st = build_prompt(s, msgs, n_msgs, raw, &ids, &n, err);
    if (!st) st = generate(s, ids, n, reply, err);
    rl_free(ids);
    fputc('\n', stdout);
    fflush(stdout);
    return st;
}

static int chat_loop(session *s, rl_err *err) {
    size_t cap = 16, n_msgs = 0;
    rl_chat_msg *msgs = malloc(cap * sizeof *msgs);
    if (!msgs) return 1;
    int rc = 0;
    if (s->o->system) msgs[n_msgs++] = (rl_chat_msg){"system", strdup(s->o->system)};
    bool tty = isatty(STDIN_FILENO);
    char *line = NULL;
    size_t lcap = 0;
    for (;;) {
        if (tty) {
            fputs("> ", stdout);
            fflush(stdout);
        }
        ssize_t len = getline(&line, &lcap, stdin);
        if (len < 0) break;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = '\0';
        if (len == 0) continue;
        if (rl_grow((void **)&msgs, &cap, n_msgs + 2, sizeof *msgs)) {
            rc = 1;
            break;
        }
        msgs[n_msgs++] = (rl_chat_msg){"user", strdup(line)};
        char *reply = NULL;
        if (reply_to(s, msgs, n_msgs, line, &reply, err)) {
            fprintf(stderr, RUN ": %s\n", err->msg);
            free(reply);
            rc = 1;
            break;
        }
        msgs[n_msgs++] = (rl_chat_msg){"assistant", reply};
    }
    free(line);
    for (size_t i = 0; i < n_msgs; i++) free((void *)msgs[i].content);
    free(msgs);
    return rc;
}

/* Reads and compiles --json-schema / --grammar; NULL (and *failed false)
 * when neither was given. */
static rl_grammar *load_grammar(const run_opts *o, bool *failed) {
    const char *path = o->schema_file ? o->schema_file : o->grammar_file;
    const char *flag = o->schema_file ? "--json-schema" : "--grammar";
    *failed = false;
    if (!path) return NULL;
    size_t len = 0;
    char *text = rl_cli_read_file(path, &len);
    if (!text) {
        fprintf(stderr, RUN ": %s: cannot read '%s': %s\n", flag, path, strerror(errno));
        *failed = true;
        return NULL;
    }
    rl_err err = {0};
    rl_grammar *g = rl_gen_grammar_new(o->schema_file ? RL_GRAMMAR_JSON_SCHEMA : RL_GRAMMAR_GBNF,
                                       text, len, &err);
    free(text);
    if (!g) {
        fprintf(stderr, RUN ": %s: %s: %s\n", flag, path, err.msg);
        *failed = true;
    }
    return g;
}

int rl_cmd_run(int argc, char **argv) {
    run_opts o = {.n_predict = 512};
    rl_engine_params_default(&o.ep);
    o.ep.max_seqs = 1;
    o.ep.max_batch_tokens = 512;
    rl_gen_params_default(&o.gp);
    o.gp.sample.temperature = 0.8f;
    o.gp.sample.top_k = 40;
    o.gp.sample.top_p = 0.95f;
    o.gp.sample.min_p = 0.05f;
    o.gp.sample.no_logprob = true; /* run prints text only */
    int pr = parse_args(argc, argv, &o);
    if (pr < 0) {
        usage(stdout);
        return 0;
    }
    if (pr > 0) return 2;
    if (!o.seed_set)
        o.gp.sample.seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32) ^ (uint64_t)clock();
    o.ep.model_path = rl_cli_model_path(o.model);

    session s = {.o = &o};
    rl_err err = {0};
    int rc = 1;
    char *prompt_buf = NULL;
    bool gfail;
    o.gp.grammar = load_grammar(&o, &gfail);
    if (gfail) return 1;
    if (o.file) {
        size_t n;
        if (!(prompt_buf = rl_cli_read_file(o.file, &n))) {
            fprintf(stderr, RUN ": cannot read '%s': %s\n", o.file, strerror(errno));
            goto done;
        }
        o.prompt = prompt_buf;
    }
    if (isatty(STDERR_FILENO)) fprintf(stderr, "loading %s ...\n", o.ep.model_path);
    double t_load = rl_time_s();
    if (rl_engine_new(&o.ep, &s.e, &err) || rl_engine_vocab(s.e, &s.v, &err)) {
        fprintf(stderr, RUN ": %s: %s\n", o.ep.model_path, err.msg);
        goto done;
    }
    t_load = rl_time_s() - t_load;
    s.n_ctx = rl_engine_n_ctx(s.e);
    rl_model_info mi;
    rl_vocab_model_info(s.v, &mi);
    char tmpl[64];
    if (o.raw)
        snprintf(tmpl, sizeof tmpl, "raw prompt");
    else if (mi.has_chat_template)
        snprintf(tmpl, sizeof tmpl, "chat template");
    else
        snprintf(tmpl, sizeof tmpl, "built-in %s chat template", mi.chat_template);
    fprintf(stderr, RUN ": %s (%s, %d layers), context %d, KV %s/%s%s%s, %s\n",
            mi.name[0] ? mi.name : o.ep.model_path, mi.arch, (int)mi.n_layer, (int)s.n_ctx,
            o.ep.cache_type_k, o.ep.cache_type_v,
            o.gp.spec == RL_SPEC_NGRAM   ? ", n-gram speculation"
            : o.gp.spec == RL_SPEC_DRAFT ? ", draft model "
                                         : "",
            o.gp.spec == RL_SPEC_DRAFT ? o.ep.draft_model_path : "", tmpl);
    if (o.verbose) fprintf(stderr, "[seed %llu]\n", (unsigned long long)o.gp.sample.seed);

    if (o.prompt) {
        rl_chat_msg msgs[2];
        size_t nm = 0;
        if (o.system) msgs[nm++] = (rl_chat_msg){"system", o.system};
        msgs[nm++] = (rl_chat_msg){"user", o.prompt};
        if (reply_to(&s, msgs, nm, o.prompt, NULL, &err)) {
            fprintf(stderr, RUN ": %s\n", err.msg);
            goto done;
        }
        rc = 0;
    } else {
        rc = chat_loop(&s, &err);
    }
    fprintf(stderr,
            "\nload %.2f s | prompt %lld tokens (%lld cached), %.1f tok/s | generated %lld tokens, "
            "%.1f tok/s\n",
            t_load, (long long)s.n_prompt, (long long)s.n_cached,
            s.t_prompt > 0 ? (double)s.n_prompt / s.t_prompt : 0.0, (long long)s.n_gen,
            s.t_gen > 0 && s.n_gen > 1 ? (double)(s.n_gen - 1) / s.t_gen : 0.0);
    if (o.gp.spec != RL_SPEC_NONE) {
        rl_engine_stats st = rl_engine_get_stats(s.e);
        fprintf(stderr, "speculation: %llu of %llu drafted tokens accepted\n",
                (unsigned long long)st.spec_accepted, (unsigned long long)st.spec_proposed);
    }
done:
    free(prompt_buf);
    free(s.hist);
    rl_vocab_free(s.v);
    rl_engine_free(s.e);
    rl_gen_grammar_free(o.gp.grammar);
    return rc;
}
