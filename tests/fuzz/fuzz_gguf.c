/* libFuzzer target for the GGUF reader: open any bytes, and when they
 * parse, touch every accessor so that what the reader validated is also
 * what its getters read. */
#include <stddef.h>
#include <stdint.h>

#include "gguf/gguf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    rl_gguf *g = NULL;
    rl_err err;
    if (rl_gguf_open_memory(data, size, &g, &err) != RL_OK) return 0;
    volatile uint64_t sink = 0;
    for (int64_t i = 0; i < rl_gguf_n_kv(g); i++) {
        rl_gguf_vtype t = rl_gguf_kv_type(g, i);
        int64_t v;
        double f;
        rl_gguf_str s;
        if (t == RL_GGUF_ARRAY) {
            rl_gguf_vtype et;
            uint64_t n;
            rl_gguf_kv_arr(g, i, &et, &n, NULL);
            for (uint64_t j = 0; j < n && j < 64; j++) {
                if (et == RL_GGUF_STRING && !rl_gguf_arr_str(g, i, j, &s, NULL))
                    sink += s.len ? (uint8_t)s.ptr[s.len - 1] : 0;
                else if (!rl_gguf_arr_i64(g, i, j, &v, NULL))
                    sink += (uint64_t)v;
                else if (!rl_gguf_arr_f64(g, i, j, &f, NULL))
                    sink += (uint64_t)(f == f);
                else {
                    rl_gguf_vtype et2;
                    uint64_t n2;
                    rl_gguf_arr_nested(g, i, j, &et2, &n2, NULL);
                }
            }
        } else if (t == RL_GGUF_STRING && !rl_gguf_kv_str(g, i, &s, NULL)) {
            sink += s.len ? (uint8_t)s.ptr[0] : 0;
        } else if (!rl_gguf_kv_i64(g, i, &v, NULL)) {
            sink += (uint64_t)v;
        } else if (!rl_gguf_kv_f64(g, i, &f, NULL)) {
            sink += (uint64_t)(f == f);
        }
        sink += rl_gguf_find_key(g, rl_gguf_kv_key(g, i)) == i;
    }
    for (int64_t i = 0; i < rl_gguf_n_tensors(g); i++) {
        const rl_gguf_tensor *t = rl_gguf_tensor_at(g, i);
        if (t->nbytes) sink += ((const uint8_t *)t->data)[t->nbytes - 1];
        sink += rl_gguf_find_tensor(g, t->name) == t;
    }
    (void)sink;
    rl_gguf_close(g);
    return 0;
}
