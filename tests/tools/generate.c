/* generate: runs a set of requests concurrently through the engine and
 * prints one JSON line per request.  A test and benchmark harness for the
 * engine-level features (structured output, speculation).
 *
 *   generate -m MODEL [-np N] [-t THREADS] [--spec ngram|draft] [-md DRAFT]
 *            [--draft-vocab N] [--draft-max K] [--draft-fixed] [--spec-max-batch B]
 *            < requests.jsonl
 * (--draft-fixed: always draft --draft-max tokens instead of the cost
 * model's choice.)
 *
 * Each input line: {"prompt": "user text", "chat": true, "schema": {...} |
 * "json_object": true | "grammar": "GBNF", "temperature": 0, "seed": 1,
 * "max_tokens": 64}.  Output lines: {"i", "text", "finish", "n_gen",
 * "n_prompt"}; a last line {"summary": {"wall_s", "gen_tokens", "tok_s",
 * "forced", "spec_proposed", "spec_accepted", "spec_verifies"}}.  Errors in a request are
 * reported on its line as {"i", "error"}. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "model/model.h"
#include "redline.h"
#include "engine/engine.h"
#include "grammar/grammar.h"
#include "chat/chat.h"
#include "tokenizer/tokenizer.h"

#define MAXREQ 256

typedef struct out_t {
    uint64_t id;
    char *text;
    size_t len, cap;
    int finish, n_gen, n_prompt;
    double t_first, t_total;
    bool done, failed;
    char err[600];
} out_t;

static void append(out_t *o, const char *p, size_t n) {
    if (o->len + n + 1 > o->cap) {
        o->cap = (o->len + n + 1) * 2;
        o->text = realloc(o->text, o->cap);
    }
    memcpy(o->text + o->len, p, n);
    o->len += n;
    o->text[o->len] = 0;
}

static int encode_prompt(rl_engine *e, const char *text, bool chat, int32_t **ids, size_t *n,
                         rl_err *err) {
    const rl_tokenizer *tok = rl_engine_tokenizer(e);
    char *rendered = NULL;
    size_t rlen = 0;
    unsigned flags = RL_TOK_ADD_SPECIAL;
    if (chat) {
        rl_gguf_str t;
        const rl_gguf *g = rl_model_gguf(rl_engine_model(e));
        rl_gguf_get_str(g, "tokenizer.chat_template", &t, NULL);
        const char *tmpl = t.ptr ? t.ptr : rl_template_builtin("chatml");
        size_t tlen = t.ptr ? (size_t)t.len : strlen(tmpl);
        rl_chat_msg m = {.role = "user", .content = text};
        if (rl_template_render(tmpl, tlen, &m, 1, true, "", "", &rendered, &rlen, err)) return -1;
        text = rendered;
        flags = RL_TOK_PARSE_SPECIAL;
    } else {
        rlen = strlen(text);
    }
    rl_status s = rl_tokenizer_encode(tok, text, rlen, flags, ids, n, err);
    rl_free(rendered);
    return s ? -1 : 0;
}

int main(int argc, char **argv) {
    rl_engine_params p;
    rl_engine_params_default(&p);
    p.model_path = "models/smollm2-135m.gguf";
    p.n_ctx = 1024;
    rl_spec_mode spec = RL_SPEC_NONE;
    for (int a = 1; a < argc; a++) {
        if (!strcmp(argv[a], "-m") && a + 1 < argc)
            p.model_path = argv[++a];
        else if (!strcmp(argv[a], "-np") && a + 1 < argc)
            p.max_seqs = atoi(argv[++a]);
        else if (!strcmp(argv[a], "-t") && a + 1 < argc)
            p.n_threads = atoi(argv[++a]);
        else if (!strcmp(argv[a], "-md") && a + 1 < argc)
            p.draft_model_path = argv[++a];
        else if (!strcmp(argv[a], "--draft-vocab") && a + 1 < argc)
            p.draft_n_vocab = atoi(argv[++a]);
        else if (!strcmp(argv[a], "--draft-max") && a + 1 < argc)
            p.draft_max = atoi(argv[++a]);
        else if (!strcmp(argv[a], "--spec-max-batch") && a + 1 < argc)
            p.spec_max_batch = atoi(argv[++a]);
        else if (!strcmp(argv[a], "--draft-fixed"))
            p.draft_fixed = true;
        else if (!strcmp(argv[a], "--spec") && a + 1 < argc) {
            a++;
            spec = !strcmp(argv[a], "draft")   ? RL_SPEC_DRAFT
                   : !strcmp(argv[a], "ngram") ? RL_SPEC_NGRAM
                                               : RL_SPEC_NONE;
        } else if (!strcmp(argv[a], "--no-jump-forward"))
            p.draft_max = 0;
        else {
            fprintf(stderr, "generate: unknown option %s\n", argv[a]);
            return 2;
        }
    }
    rl_err err = {0};
    rl_engine *e;
    if (rl_engine_new(&p, &e, &err)) {
        fprintf(stderr, "generate: %s\n", err.msg);
        return 1;
    }
    static out_t outs[MAXREQ];
    int n = 0;
    char line[1 << 16];
    double t0 = rl_time_s();
    while (n < MAXREQ && fgets(line, sizeof line, stdin)) {
        json_error_t je;
        json_t *j = json_loads(line, 0, &je);
        out_t *o = &outs[n++];
        if (!j) {
            o->failed = true;
            snprintf(o->err, sizeof o->err, "bad json: %s", je.text);
            continue;
        }
        rl_gen_params gp;
        rl_gen_params_default(&gp);
        gp.spec = spec;
        json_t *v;
        if ((v = json_object_get(j, "temperature")))
            gp.sample.temperature = (float)json_number_value(v);
        if ((v = json_object_get(j, "seed"))) gp.sample.seed = (uint64_t)json_integer_value(v);
        if ((v = json_object_get(j, "max_tokens"))) gp.max_tokens = (int32_t)json_integer_value(v);
        rl_grammar *g = NULL;
        if ((v = json_object_get(j, "schema"))) {
            char *s = json_dumps(v, JSON_COMPACT);
            g = rl_grammar_from_json_schema(s, strlen(s), &err);
            free(s);
        } else if (json_is_true(json_object_get(j, "json_object"))) {
            const char *s = "{\"type\":\"object\"}";
            g = rl_grammar_from_json_schema(s, strlen(s), &err);
        } else if ((v = json_object_get(j, "grammar"))) {
            g = rl_grammar_compile(json_string_value(v), json_string_length(v), &err);
        }
        if ((json_object_get(j, "schema") || json_object_get(j, "json_object") ||
             json_object_get(j, "grammar")) &&
            !g) {
            o->failed = true;
            snprintf(o->err, sizeof o->err, "%s", err.msg);
            json_decref(j);
            continue;
        }
        gp.grammar = g;
        int32_t *ids = NULL;
        size_t nid = 0;
        const char *prompt = json_string_value(json_object_get(j, "prompt"));
        bool chat = !json_is_false(json_object_get(j, "chat"));
        if (!prompt || encode_prompt(e, prompt, chat, &ids, &nid, &err) ||
            rl_engine_submit(e, ids, (int32_t)nid, &gp, &o->id, &err)) {
            o->failed = true;
            snprintf(o->err, sizeof o->err, "%s", prompt ? err.msg : "prompt missing");
        }
        rl_free(ids);
        rl_grammar_free(g);
        json_decref(j);
    }
    int left = 0;
    for (int i = 0; i < n; i++) left += !outs[i].failed;
    while (left > 0) {
        rl_engine_step(e);
        for (int i = 0; i < n; i++) {
            out_t *o = &outs[i];
            rl_event ev;
            while (!o->failed && !o->done && rl_engine_next(e, o->id, &ev, 0) == RL_OK) {
                append(o, ev.text, (size_t)ev.text_len);
                if (ev.kind == RL_EV_DONE) {
                    o->done = true;
                    o->finish = ev.finish;
                    o->n_gen = ev.n_generated;
                    o->n_prompt = ev.n_prompt;
                    o->t_first = ev.t_first_token_s;
                    o->t_total = ev.t_total_s;
                    if (ev.error[0]) snprintf(o->err, sizeof o->err, "%s", ev.error);
                    left--;
                }
            }
        }
    }
    double wall = rl_time_s() - t0;
    long gen = 0;
    /* decode speed per request, prefill excluded: tokens after the first
     * over the time after the first */
    double dec_sum = 0;
    int dec_n = 0;
    for (int i = 0; i < n; i++)
        if (!outs[i].failed && outs[i].n_gen > 1 && outs[i].t_total > outs[i].t_first) {
            dec_sum += (outs[i].n_gen - 1) / (outs[i].t_total - outs[i].t_first);
            dec_n++;
        }
    for (int i = 0; i < n; i++) {
        out_t *o = &outs[i];
        json_t *j = json_object();
        json_object_set_new(j, "i", json_integer(i));
        if (o->failed)
            json_object_set_new(j, "error", json_string(o->err));
        else {
            json_object_set_new(j, "text", json_stringn(o->text ? o->text : "", o->len));
            static const char *fin[] = {"none", "stop", "length", "cancelled", "error"};
            json_object_set_new(j, "finish", json_string(fin[o->finish]));
            json_object_set_new(j, "n_gen", json_integer(o->n_gen));
            json_object_set_new(j, "n_prompt", json_integer(o->n_prompt));
            if (o->err[0]) json_object_set_new(j, "error", json_string(o->err));
            gen += o->n_gen;
        }
        char *s = json_dumps(j, JSON_COMPACT | JSON_ENSURE_ASCII);
        puts(s);
        free(s);
        json_decref(j);
        free(o->text);
    }
    rl_engine_stats st = rl_engine_get_stats(e);
    printf("{\"summary\": {\"wall_s\": %.4f, \"gen_tokens\": %ld, \"tok_s\": %.3f, "
           "\"decode_tok_s_per_seq\": %.3f, \"forced\": %llu, "
           "\"spec_proposed\": %llu, \"spec_accepted\": %llu, \"spec_verifies\": %llu, "
           "\"kv_blocks_used\": %d}}\n",
           wall, gen, wall > 0 ? (double)gen / wall : 0.0, dec_n ? dec_sum / dec_n : 0.0,
           (unsigned long long)st.grammar_forced, (unsigned long long)st.spec_proposed,
           (unsigned long long)st.spec_accepted, (unsigned long long)st.spec_verifies,
           st.kv_blocks_used);
    rl_engine_free(e);
    return 0;
}
