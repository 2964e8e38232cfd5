/* Batch tokenizer driver for the Python oracle tests and the benchmark.
 *
 *   tokenize_tool MODEL            JSON lines on stdin, one answer per line:
 *       {"encode": TEXT, "flags": F}  -> {"ids": [...]}   (F: 1 add special, 2 parse special)
 *       {"decode": [IDS], "flags": F} -> {"text": TEXT}   (F: 1 skip control tokens)
 *       {"info": true}                -> {"n_vocab":..., "bos":..., "eos":..., "add_bos":...}
 *       errors                        -> {"error": MESSAGE}
 *   tokenize_tool MODEL --bench FILE [SECONDS]
 *       encodes FILE repeatedly, prints "MB/s TOKENS" of the best run.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

static void reply(json_t *o) {
    char *s = json_dumps(o, JSON_COMPACT | JSON_ENSURE_ASCII);
    puts(s ? s : "{\"error\":\"dump failed\"}");
    free(s);
    json_decref(o);
}

static int bench(rl_tokenizer *tok, const char *path, double seconds) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "tokenize_tool: cannot open %s\n", path);
        return 1;
    }
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc(sz > 0 ? (size_t)sz : 1);
    if (!buf || fread(buf, 1, (size_t)sz, f) != (size_t)sz) {
        fprintf(stderr, "tokenize_tool: cannot read %s\n", path);
        fclose(f);
        free(buf);
        return 1;
    }
    fclose(f);
    double best = 1e30, t_end = rl_time_s() + seconds;
    size_t n_tok = 0;
    int runs = 0;
    do {
        int32_t *ids;
        size_t n;
        rl_err err = {0};
        double t0 = rl_time_s();
        if (rl_tokenizer_encode(tok, buf, (size_t)sz, 0, &ids, &n, &err)) {
            fprintf(stderr, "tokenize_tool: %s\n", err.msg);
            free(buf);
            return 1;
        }
        double dt = rl_time_s() - t0;
        if (dt < best) best = dt;
        n_tok = n;
        rl_free(ids);
        runs++;
    } while (rl_time_s() < t_end || runs < 2);
    printf("%.3f %zu\n", (double)sz / 1e6 / best, n_tok);
    free(buf);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: tokenize_tool MODEL [--bench FILE [SECONDS]]\n");
        return 2;
    }
    rl_err err = {0};
    rl_gguf *g = NULL;
    rl_tokenizer *tok = NULL;
    if (rl_gguf_open(argv[1], &g, &err) || rl_tokenizer_load(g, &tok, &err)) {
        fprintf(stderr, "tokenize_tool: %s: %s\n", argv[1], err.msg);
        rl_gguf_close(g);
        return 1;
    }
    rl_gguf_close(g);
    if (argc >= 4 && !strcmp(argv[2], "--bench")) {
        int rc = bench(tok, argv[3], argc >= 5 ? atof(argv[4]) : 3.0);
        rl_tokenizer_free(tok);
        return rc;
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t got;
    while ((got = getline(&line, &cap, stdin)) > 0) {
        json_error_t je;
        json_t *req = json_loadb(line, (size_t)got, JSON_ALLOW_NUL, &je);
        if (!req) {
            reply(json_pack("{s:s}", "error", je.text));
            fflush(stdout);
            continue;
        }
        json_t *enc = json_object_get(req, "encode"), *dec = json_object_get(req, "decode");
        unsigned flags = (unsigned)json_integer_value(json_object_get(req, "flags"));
        if (json_is_string(enc)) {
            int32_t *ids;
            size_t n;
            if (rl_tokenizer_encode(tok, json_string_value(enc), json_string_length(enc), flags,
                                    &ids, &n, &err)) {
                reply(json_pack("{s:s}", "error", err.msg));
            } else {
                json_t *arr = json_array();
                for (size_t i = 0; i < n; i++) json_array_append_new(arr, json_integer(ids[i]));
                reply(json_pack("{s:o}", "ids", arr));
                rl_free(ids);
            }
        } else if (json_is_array(dec)) {
            size_t n = json_array_size(dec);
            int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
            for (size_t i = 0; i < n; i++)
                ids[i] = (int32_t)json_integer_value(json_array_get(dec, i));
            char *text;
            size_t len;
            if (rl_tokenizer_decode(tok, ids, n, flags, &text, &len, &err)) {
                reply(json_pack("{s:s}", "error", err.msg));
            } else {
                reply(json_pack("{s:s%}", "text", text, len));
                rl_free(text);
            }
            free(ids);
        } else if (json_object_get(req, "info")) {
            reply(json_pack("{s:i,s:i,s:i,s:i,s:b,s:b,s:s}", "n_vocab", rl_tokenizer_n_vocab(tok),
                            "bos", rl_tokenizer_bos(tok), "eos", rl_tokenizer_eos(tok), "eot",
                            rl_tokenizer_eot(tok), "add_bos", rl_tokenizer_add_bos(tok), "add_eos",
                            rl_tokenizer_add_eos(tok), "pre", rl_tokenizer_pre(tok)));
        } else {
            reply(json_pack("{s:s}", "error", "expected encode, decode or info"));
        }
        json_decref(req);
        fflush(stdout);
    }
    free(line);
    rl_tokenizer_free(tok);
    return 0;
}
