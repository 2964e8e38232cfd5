/* render_template: renders a chat template with redline's interpreter, for
 * the Python oracle tests (tests/python/test_template.py).
 *
 *   render_template (--gguf MODEL | --template FILE | --builtin NAME)
 *                   [--print-template] CONTEXT.json
 *
 * CONTEXT.json is an object whose keys become template variables
 * (messages, add_generation_prompt, bos_token, eos_token, tools, ...).
 * The rendering goes to stdout byte for byte; on error a one-line reason
 * goes to stderr and the exit status is 1 (2 for usage errors, 3 when the
 * GGUF has no chat template).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "gguf/gguf.h"
#include "chat/chat.h"

static char *read_file(const char *path, size_t *len) {
    FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (!buf) break;
        if (n + 1 >= cap) {
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap *= 2;
        }
        size_t r = fread(buf + n, 1, cap - n - 1, f);
        if (r == 0) break;
        n += r;
    }
    if (f != stdin) fclose(f);
    if (buf) buf[n] = 0;
    *len = n;
    return buf;
}

static int usage(void) {
    fprintf(stderr, "usage: render_template (--gguf MODEL | --template FILE | --builtin NAME) "
                    "[--print-template] CONTEXT.json\n");
    return 2;
}

int main(int argc, char **argv) {
    const char *gguf = NULL, *tfile = NULL, *builtin = NULL, *ctx_path = NULL;
    bool print_only = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--gguf") && i + 1 < argc)
            gguf = argv[++i];
        else if (!strcmp(argv[i], "--template") && i + 1 < argc)
            tfile = argv[++i];
        else if (!strcmp(argv[i], "--builtin") && i + 1 < argc)
            builtin = argv[++i];
        else if (!strcmp(argv[i], "--print-template"))
            print_only = true;
        else if (argv[i][0] == '-' && argv[i][1])
            return usage();
        else
            ctx_path = argv[i];
    }
    if (!!gguf + !!tfile + !!builtin != 1 || (!ctx_path && !print_only)) return usage();

    char *tmpl = NULL;
    size_t tlen = 0;
    rl_gguf *g = NULL;
    rl_err err = {0};
    if (tfile) {
        tmpl = read_file(tfile, &tlen);
        if (!tmpl) {
            fprintf(stderr, "error: cannot read %s\n", tfile);
            return 1;
        }
    } else if (builtin) {
        const char *b = rl_template_builtin(builtin);
        if (!b) {
            fprintf(stderr, "error: no built-in template '%s'\n", builtin);
            return 1;
        }
        tlen = strlen(b);
        tmpl = malloc(tlen + 1);
        if (!tmpl) return 1;
        memcpy(tmpl, b, tlen + 1);
    } else {
        if (rl_gguf_open(gguf, &g, &err) != RL_OK) {
            fprintf(stderr, "error: %s\n", err.msg);
            return 1;
        }
        rl_gguf_str s;
        if (rl_gguf_get_str(g, "tokenizer.chat_template", &s, &err) != RL_OK) {
            fprintf(stderr, "error: %s\n", err.msg);
            rl_gguf_close(g);
            return 1;
        }
        if (!s.ptr) {
            fprintf(stderr, "error: %s has no tokenizer.chat_template\n", gguf);
            rl_gguf_close(g);
            return 3;
        }
        tlen = (size_t)s.len;
        tmpl = malloc(tlen + 1);
        if (!tmpl) return 1;
        memcpy(tmpl, s.ptr, tlen);
        tmpl[tlen] = 0;
        rl_gguf_close(g);
    }
    if (print_only) {
        fwrite(tmpl, 1, tlen, stdout);
        free(tmpl);
        return 0;
    }
    size_t clen = 0;
    char *ctx = read_file(ctx_path, &clen);
    if (!ctx) {
        fprintf(stderr, "error: cannot read %s\n", ctx_path);
        free(tmpl);
        return 1;
    }
    char *out = NULL;
    size_t out_len = 0;
    rl_status st = rl_template_render_json(tmpl, tlen, ctx, clen, NULL, &out, &out_len, &err);
    free(ctx);
    free(tmpl);
    if (st != RL_OK) {
        fprintf(stderr, "error: %s: %s\n", rl_status_str(st), err.msg);
        return 1;
    }
    fwrite(out, 1, out_len, stdout);
    rl_free(out);
    return 0;
}
