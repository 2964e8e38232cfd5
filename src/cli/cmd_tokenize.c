/* `redline tokenize`: text to token ids (with pieces) and ids back to text.
 *
 *   redline tokenize [-m MODEL] [-p TEXT | -f FILE] [--ids] [--special] [--no-add-special]
 *   redline tokenize [-m MODEL] --decode 1,2,3
 *
 * Output goes to stdout; errors to stderr with a non-zero exit status.
 */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "cli/args.h"
#include "cli/cli.h"
#include "cli/report.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: redline tokenize [-m MODEL] [-p TEXT | -f FILE] [--ids] [--special]\n"
            "       redline tokenize [-m MODEL] --decode ID,ID,...\n\n"
            "  -m, --model FILE     GGUF model (default $REDLINE_MODEL or %s)\n"
            "  -p, --prompt TEXT    text to tokenize\n"
            "  -f, --file FILE      read the text from FILE ('-' = stdin)\n"
            "      --ids            print only the ids, as [1, 2, 3]\n"
            "      --special        match control tokens written in the text (<|im_start|>)\n"
            "      --no-add-special do not add BOS/EOS even if the model asks for them\n"
            "      --decode IDS     print the text of comma-separated token ids\n",
            RL_DEFAULT_MODEL);
}

static void print_escaped(const char *p, size_t n) {
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        if (c == '\n')
            fputs("\\n", stdout);
        else if (c == '\t')
            fputs("\\t", stdout);
        else if (c == '\r')
            fputs("\\r", stdout);
        else if (c == '\\')
            fputs("\\\\", stdout);
        else if (c == '\'')
            fputs("\\'", stdout);
        else if (c < 0x20 || c == 0x7F)
            printf("\\x%02x", c);
        else
            putchar(c);
    }
}

static int decode_ids(rl_tokenizer *tok, const char *list) {
    size_t cap = 16, n = 0;
    int32_t *ids = malloc(cap * sizeof *ids);
    const char *p = list;
    while (ids && *p) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v >= rl_tokenizer_n_vocab(tok)) {
            fprintf(stderr,
                    "redline tokenize: --decode: bad token id at '%.20s' (vocabulary has %d)\n", p,
                    rl_tokenizer_n_vocab(tok));
            free(ids);
            return 1;
        }
        if (rl_grow((void **)&ids, &cap, n + 1, sizeof *ids)) {
            free(ids);
            ids = NULL;
            break;
        }
        ids[n++] = (int32_t)v;
        p = end;
        while (*p == ',' || *p == ' ') p++;
    }
    if (!ids) {
        fprintf(stderr, "redline tokenize: out of memory\n");
        return 1;
    }
    char *text;
    size_t len;
    rl_err err = {0};
    rl_status st = rl_tokenizer_decode(tok, ids, n, 0, &text, &len, &err);
    free(ids);
    if (st) {
        fprintf(stderr, "redline tokenize: %s\n", err.msg);
        return 1;
    }
    fwrite(text, 1, len, stdout);
    putchar('\n');
    rl_free(text);
    return 0;
}

int rl_cmd_tokenize(int argc, char **argv) {
    const char *model = NULL, *prompt = NULL, *file = NULL, *decode = NULL;
    bool only_ids = false;
    unsigned flags = RL_TOK_ADD_SPECIAL;
    rl_args A;
    rl_args_init(&A, "redline tokenize", argc, argv);
    while (rl_args_next(&A)) {
        bool ok = true;
        if (rl_args_is(&A, "-h|--help")) {
            usage(stdout);
            return 0;
        } else if (rl_args_is(&A, "-m|--model"))
            ok = rl_args_str(&A, &model);
        else if (rl_args_is(&A, "-p|--prompt"))
            ok = rl_args_str(&A, &prompt);
        else if (rl_args_is(&A, "-f|--file"))
            ok = rl_args_str(&A, &file);
        else if (rl_args_is(&A, "--decode"))
            ok = rl_args_str(&A, &decode);
        else if (rl_args_is(&A, "--ids"))
            only_ids = true;
        else if (rl_args_is(&A, "--special"))
            flags |= RL_TOK_PARSE_SPECIAL;
        else if (rl_args_is(&A, "--no-add-special"))
            flags &= ~RL_TOK_ADD_SPECIAL;
        else
            ok = rl_args_unknown(&A);
        if (!ok) return 2;
    }
    if (!decode && !!prompt == !!file) {
        fprintf(stderr, "redline tokenize: give exactly one of -p TEXT, -f FILE or --decode IDS\n");
        return 2;
    }
    const char *path = rl_cli_model_path(model);
    rl_err err = {0};
    rl_gguf *g = NULL;
    rl_tokenizer *tok = NULL;
    if (rl_gguf_open(path, &g, &err) || rl_tokenizer_load(g, &tok, &err)) {
        fprintf(stderr, "redline tokenize: %s: %s\n", path, err.msg);
        rl_gguf_close(g);
        return 1;
    }
    rl_gguf_close(g);
    int rc = 0;
    if (decode) {
        rc = decode_ids(tok, decode);
        rl_tokenizer_free(tok);
        return rc;
    }
    size_t len = 0;
    char *text = NULL;
    if (file) {
        text = rl_cli_read_file(file, &len);
        if (!text) {
            fprintf(stderr, "redline tokenize: cannot read '%s': %s\n", file, strerror(errno));
            rl_tokenizer_free(tok);
            return 1;
        }
    }
    int32_t *ids;
    size_t n;
    rl_status st = rl_tokenizer_encode(tok, file ? text : prompt, file ? len : strlen(prompt),
                                       flags, &ids, &n, &err);
    free(text);
    if (st) {
        fprintf(stderr, "redline tokenize: %s\n", err.msg);
        rl_tokenizer_free(tok);
        return 1;
    }
    if (only_ids) {
        json_t *arr = json_array();
        for (size_t i = 0; arr && i < n; i++) json_array_append_new(arr, json_integer(ids[i]));
        if (rl_report_json_write(stdout, arr, true, "redline tokenize")) rc = 1;
    } else {
        for (size_t i = 0; i < n; i++) {
            size_t pl;
            const char *p = rl_tokenizer_piece(tok, ids[i], &pl);
            printf("%6d -> '", ids[i]);
            print_escaped(p, pl);
            puts("'");
        }
    }
    rl_free(ids);
    rl_tokenizer_free(tok);
    return rc;
}
