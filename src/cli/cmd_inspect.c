/* `redline inspect MODEL.gguf`: metadata (long arrays summarized) and the
 * tensor table with totals by type.  Read-only; the file is validated by
 * the GGUF reader before anything is printed. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "gguf/gguf.h"

/* Prints a string value escaped for one line, cut at `max` bytes. */
static void print_str(const rl_gguf_str *s, size_t max) {
    putchar('"');
    size_t n = s->len < max ? (size_t)s->len : max;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s->ptr[i];
        if (c == '\n')
            fputs("\\n", stdout);
        else if (c == '\t')
            fputs("\\t", stdout);
        else if (c == '"' || c == '\\')
            printf("\\%c", c);
        else if (c < 0x20 || c == 0x7f)
            printf("\\x%02x", c);
        else
            putchar(c);
    }
    putchar('"');
    if (s->len > max) printf("... (%" PRIu64 " bytes)", s->len);
}

static void print_scalar_elem(const rl_gguf *g, int64_t i, uint64_t j, rl_gguf_vtype t) {
    if (t == RL_GGUF_STRING) {
        rl_gguf_str s;
        if (!rl_gguf_arr_str(g, i, j, &s, NULL)) print_str(&s, 40);
    } else if (t == RL_GGUF_FLOAT32 || t == RL_GGUF_FLOAT64) {
        double v;
        if (!rl_gguf_arr_f64(g, i, j, &v, NULL)) printf("%g", v);
    } else if (t == RL_GGUF_ARRAY) {
        rl_gguf_vtype et;
        uint64_t n;
        if (!rl_gguf_arr_nested(g, i, j, &et, &n, NULL))
            printf("[%s x %" PRIu64 "]", rl_gguf_vtype_name(et), n);
    } else {
        int64_t v;
        if (!rl_gguf_arr_i64(g, i, j, &v, NULL)) printf("%" PRId64, v);
    }
}

static void print_kv(const rl_gguf *g, int64_t i, int full) {
    rl_gguf_vtype t = rl_gguf_kv_type(g, i);
    printf("  %-44s %-7s ", rl_gguf_kv_key(g, i), rl_gguf_vtype_name(t));
    if (t == RL_GGUF_STRING) {
        rl_gguf_str s;
        rl_gguf_kv_str(g, i, &s, NULL);
        print_str(&s, full ? SIZE_MAX : 120);
    } else if (t == RL_GGUF_ARRAY) {
        rl_gguf_vtype et;
        uint64_t n;
        rl_gguf_kv_arr(g, i, &et, &n, NULL);
        printf("[%s x %" PRIu64 "] ", rl_gguf_vtype_name(et), n);
        uint64_t show = full ? n : (n < 8 ? n : 6);
        putchar('[');
        for (uint64_t j = 0; j < show; j++) {
            if (j) fputs(", ", stdout);
            print_scalar_elem(g, i, j, et);
        }
        if (show < n) printf(", ... %" PRIu64 " more", n - show);
        putchar(']');
    } else if (t == RL_GGUF_FLOAT32 || t == RL_GGUF_FLOAT64) {
        double v;
        rl_gguf_kv_f64(g, i, &v, NULL);
        printf("%g", v);
    } else if (t == RL_GGUF_BOOL) {
        bool v;
        rl_gguf_kv_bool(g, i, &v, NULL);
        fputs(v ? "true" : "false", stdout);
    } else {
        int64_t v;
        if (rl_gguf_kv_i64(g, i, &v, NULL) == RL_OK)
            printf("%" PRId64, v);
        else
            fputs("(out of int64 range)", stdout);
    }
    putchar('\n');
}

static void usage(FILE *f) {
    fprintf(f, "usage: redline inspect [options] MODEL.gguf\n"
               "  --full        print every array element and whole strings\n"
               "  --no-tensors  metadata only\n");
}

int rl_cmd_inspect(int argc, char **argv) {
    const char *path = NULL;
    int full = 0, tensors = 1;
    rl_args A;
    rl_args_init(&A, "redline inspect", argc, argv);
    while (rl_args_next(&A)) {
        bool ok = true;
        if (rl_args_is(&A, "-h|--help")) {
            usage(stdout);
            return 0;
        } else if (rl_args_is(&A, "--full"))
            full = 1;
        else if (rl_args_is(&A, "--no-tensors"))
            tensors = 0;
        else if (rl_args_is(&A, "-m|--model"))
            ok = rl_args_str(&A, &path);
        else if (rl_args_positional(&A))
            path = A.flag;
        else
            ok = rl_args_unknown(&A);
        if (!ok) return 2;
    }
    path = rl_cli_model_path(path);
    rl_err err = {0};
    rl_gguf *g;
    if (rl_gguf_open(path, &g, &err)) {
        fprintf(stderr, "redline inspect: %s\n", err.msg);
        return 1;
    }
    printf("file: %s\nsize: %zu bytes, GGUF v%u, alignment %zu, data at offset %" PRIu64 "\n", path,
           rl_gguf_file_size(g), rl_gguf_version(g), rl_gguf_alignment(g), rl_gguf_data_offset(g));
    printf("\nmetadata (%" PRId64 " keys):\n", rl_gguf_n_kv(g));
    for (int64_t i = 0; i < rl_gguf_n_kv(g); i++) print_kv(g, i, full);
    if (tensors) {
        int64_t nt = rl_gguf_n_tensors(g);
        uint64_t count[RL_TYPE_COUNT] = {0}, bytes[RL_TYPE_COUNT] = {0}, total = 0, elems = 0;
        printf("\ntensors (%" PRId64 "):\n  %-40s %-6s %-28s %12s\n", nt, "name", "type", "shape",
               "bytes");
        for (int64_t i = 0; i < nt; i++) {
            const rl_gguf_tensor *t = rl_gguf_tensor_at(g, i);
            char shape[96];
            int n = 0;
            for (uint32_t d = 0; d < t->n_dims; d++)
                n += snprintf(shape + n, sizeof shape - (size_t)n, "%s%" PRId64, d ? " x " : "",
                              t->ne[d]);
            printf("  %-40s %-6s %-28s %12zu\n", t->name, rl_type_name(t->type), shape, t->nbytes);
            count[t->type]++;
            bytes[t->type] += t->nbytes;
            total += t->nbytes;
            elems += (uint64_t)t->n_elements;
        }
        printf("\ntotals by type:\n");
        for (int ty = 0; ty < RL_TYPE_COUNT; ty++)
            if (count[ty])
                printf("  %-6s %5" PRIu64 " tensors %14" PRIu64 " bytes (%5.1f%%)\n",
                       rl_type_name((uint32_t)ty), count[ty], bytes[ty],
                       total ? 100.0 * (double)bytes[ty] / (double)total : 0.0);
        printf("  all    %5" PRId64 " tensors %14" PRIu64 " bytes, %" PRIu64
               " parameters, %.3f bits/parameter\n",
               nt, total, elems, elems ? 8.0 * (double)total / (double)elems : 0.0);
    }
    rl_gguf_close(g);
    return 0;
}
