/* dequant: test helper that dequantizes one GGUF tensor with redline's
 * scalar reference dequantizers (the type traits), for comparison against
 * an independent implementation (tests/python/test_dequant.py).
 *
 *   dequant MODEL.gguf TENSOR_NAME OUT.f32   raw little-endian float32,
 *                                            n_elements values, ne[0] fastest
 *   dequant MODEL.gguf --list                one "name,type,n_elements" line
 *                                            per tensor, type as rl_type_name
 *
 * Exit status 0 on success, 1 with a one-line reason on stderr otherwise
 * (unknown tensor, type without a dequantizer, I/O error).
 */
#include "base/base.h"
#include "gguf/gguf.h"
#include "tensor/tensor.h"

#include <stdio.h>
#include <string.h>

static int list_tensors(const rl_gguf *g) {
    for (int64_t i = 0; i < rl_gguf_n_tensors(g); i++) {
        const rl_gguf_tensor *t = rl_gguf_tensor_at(g, i);
        printf("%s,%s,%lld\n", t->name, rl_type_name(t->type), (long long)t->n_elements);
    }
    return 0;
}

/* Dequantizes row by row (a row is ne[0] elements, a whole number of
 * blocks) into a bounded buffer, so huge tensors need little memory. */
static int dump_tensor(const rl_gguf_tensor *t, const char *out_path) {
    const rl_type_traits *tr = rl_type_get(t->type);
    if (!tr || !tr->to_float) {
        fprintf(stderr, "dequant: tensor '%s' has type %s (%u), which has no dequantizer\n",
                t->name, rl_type_name(t->type), (unsigned)t->type);
        return 1;
    }
    if (!t->data) {
        fprintf(stderr, "dequant: tensor '%s' has no data\n", t->name);
        return 1;
    }
    const int64_t ne0 = t->ne[0];
    const size_t row_bytes = rl_type_row_size(t->type, ne0);
    const int64_t n_rows = ne0 > 0 ? t->n_elements / ne0 : 0;
    if (ne0 > 0 && row_bytes == 0) {
        fprintf(stderr, "dequant: tensor '%s': bad row size\n", t->name);
        return 1;
    }
    FILE *f = fopen(out_path, "wb");
    if (!f) {
        fprintf(stderr, "dequant: cannot open '%s' for writing\n", out_path);
        return 1;
    }
    float *row = ne0 > 0 ? rl_malloc((size_t)ne0 * sizeof(float)) : NULL;
    if (ne0 > 0 && !row) {
        fclose(f);
        fprintf(stderr, "dequant: out of memory\n");
        return 1;
    }
    int rc = 0;
    for (int64_t r = 0; r < n_rows; r++) {
        tr->to_float((const unsigned char *)t->data + (size_t)r * row_bytes, row, ne0);
        /* x86-64 is little-endian, like the output format */
        if (fwrite(row, sizeof(float), (size_t)ne0, f) != (size_t)ne0) {
            fprintf(stderr, "dequant: write to '%s' failed\n", out_path);
            rc = 1;
            break;
        }
    }
    rl_free(row);
    if (fclose(f) != 0 && rc == 0) {
        fprintf(stderr, "dequant: write to '%s' failed\n", out_path);
        rc = 1;
    }
    return rc;
}

int main(int argc, char **argv) {
    const bool list = argc == 3 && strcmp(argv[2], "--list") == 0;
    if (!list && argc != 4) {
        fprintf(stderr, "usage: dequant MODEL.gguf TENSOR_NAME OUT.f32\n"
                        "       dequant MODEL.gguf --list\n");
        return 2;
    }
    rl_err err = {0};
    rl_gguf *g = NULL;
    if (rl_gguf_open(argv[1], &g, &err) != RL_OK) {
        fprintf(stderr, "dequant: %s: %s\n", argv[1], err.msg);
        return 1;
    }
    int rc;
    if (list) {
        rc = list_tensors(g);
    } else {
        const rl_gguf_tensor *t = rl_gguf_find_tensor(g, argv[2]);
        if (!t) {
            fprintf(stderr, "dequant: no tensor named '%s' in %s\n", argv[2], argv[1]);
            rc = 1;
        } else {
            rc = dump_tensor(t, argv[3]);
        }
    }
    rl_gguf_close(g);
    return rc;
}
