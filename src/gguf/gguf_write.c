/* GGUF writer: metadata is serialized into a growing byte buffer as it is
 * added (so the writer needs no per-type storage); tensors are kept as
 * descriptors whose data is borrowed until the file is written.  Layout on
 * output: header, kvs, tensor infos, padding, tensor data each aligned. */
#include "gguf/gguf-impl.h"

#include "base/buf.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

/* A growing byte buffer (m), or (f set) a counting stream into a file;
 * n counts the bytes written either way. */
typedef struct wbuf {
    rl_buf m;
    size_t n;
    bool oom;
    FILE *f;
    bool ioerr;
} wbuf;

typedef struct wtensor {
    char *name;
    rl_type type;
    uint32_t n_dims;
    int64_t ne[RL_GGUF_MAX_DIMS];
    size_t nbytes;
    const void *data;
} wtensor;

struct rl_gguf_writer {
    wbuf kv; /* serialized kv pairs */
    uint64_t n_kv;
    char **keys; /* for duplicate checks */
    wtensor *tensors;
    size_t n_tensors, cap_tensors;
    uint32_t alignment;
};

static void wb_put(wbuf *b, const void *src, size_t n) {
    if (b->oom || b->ioerr || n == 0) return;
    if (b->f) {
        if (fwrite(src, 1, n, b->f) != n) b->ioerr = true;
        b->n += n;
        return;
    }
    if (rl_buf_append(&b->m, src, n)) {
        b->oom = true;
        return;
    }
    b->n += n;
}

static void wb_u32(wbuf *b, uint32_t v) {
    wb_put(b, &v, 4);
}
static void wb_u64(wbuf *b, uint64_t v) {
    wb_put(b, &v, 8);
}
static void wb_str(wbuf *b, const char *s, size_t n) {
    wb_u64(b, n);
    wb_put(b, s, n);
}

rl_gguf_writer *rl_gguf_writer_new(void) {
    rl_gguf_writer *w = rl_calloc(1, sizeof *w);
    if (w) w->alignment = RL_GGUF_DEFAULT_ALIGNMENT;
    return w;
}

void rl_gguf_writer_free(rl_gguf_writer *w) {
    if (!w) return;
    for (uint64_t i = 0; i < w->n_kv; i++) rl_free(w->keys[i]);
    for (uint64_t i = 0; i < w->n_tensors; i++) rl_free(w->tensors[i].name);
    rl_free(w->keys);
    rl_free(w->tensors);
    rl_buf_free(&w->kv.m);
    rl_free(w);
}

/* Registers key (rejecting duplicates) and writes its header. */
static rl_status begin_kv(rl_gguf_writer *w, const char *key, rl_gguf_vtype t) {
    if (!key || !*key) return RL_ERR_INVALID;
    for (uint64_t i = 0; i < w->n_kv; i++)
        if (!strcmp(w->keys[i], key)) return RL_ERR_INVALID;
    char **keys = rl_realloc(w->keys, (size_t)(w->n_kv + 1) * sizeof *keys);
    if (!keys) return RL_ERR_NOMEM;
    w->keys = keys;
    if (!(keys[w->n_kv] = rl_strndup(key, strlen(key)))) return RL_ERR_NOMEM;
    w->n_kv++;
    wb_str(&w->kv, key, strlen(key));
    wb_u32(&w->kv, t);
    return w->kv.oom ? RL_ERR_NOMEM : RL_OK;
}

static rl_status put_scalar(rl_gguf_writer *w, const char *key, rl_gguf_vtype t, const void *v) {
    rl_status s = begin_kv(w, key, t);
    if (s) return s;
    wb_put(&w->kv, v, rl__gguf_vtype_size(t));
    return w->kv.oom ? RL_ERR_NOMEM : RL_OK;
}

#define SCALAR_SETTER(fn, ctype, vt)                                                               \
    rl_status fn(rl_gguf_writer *w, const char *key, ctype v) {                                    \
        return put_scalar(w, key, vt, &v);                                                         \
    }
SCALAR_SETTER(rl_gguf_writer_u8, uint8_t, RL_GGUF_UINT8)
SCALAR_SETTER(rl_gguf_writer_i8, int8_t, RL_GGUF_INT8)
SCALAR_SETTER(rl_gguf_writer_u16, uint16_t, RL_GGUF_UINT16)
SCALAR_SETTER(rl_gguf_writer_i16, int16_t, RL_GGUF_INT16)
SCALAR_SETTER(rl_gguf_writer_u32, uint32_t, RL_GGUF_UINT32)
SCALAR_SETTER(rl_gguf_writer_i32, int32_t, RL_GGUF_INT32)
SCALAR_SETTER(rl_gguf_writer_u64, uint64_t, RL_GGUF_UINT64)
SCALAR_SETTER(rl_gguf_writer_i64, int64_t, RL_GGUF_INT64)
SCALAR_SETTER(rl_gguf_writer_f32, float, RL_GGUF_FLOAT32)
SCALAR_SETTER(rl_gguf_writer_f64, double, RL_GGUF_FLOAT64)

rl_status rl_gguf_writer_bool(rl_gguf_writer *w, const char *key, bool v) {
    uint8_t b = v ? 1 : 0;
    return put_scalar(w, key, RL_GGUF_BOOL, &b);
}

rl_status rl_gguf_writer_str(rl_gguf_writer *w, const char *key, const char *s, size_t len) {
    rl_status st = begin_kv(w, key, RL_GGUF_STRING);
    if (st) return st;
    wb_str(&w->kv, s, len);
    return w->kv.oom ? RL_ERR_NOMEM : RL_OK;
}

rl_status rl_gguf_writer_arr(rl_gguf_writer *w, const char *key, rl_gguf_vtype elem_type,
                             const void *data, uint64_t n) {
    size_t esz = rl__gguf_vtype_size(elem_type), bytes;
    if (!esz || !rl_mul_size(esz, (size_t)n, &bytes)) return RL_ERR_INVALID;
    rl_status s = begin_kv(w, key, RL_GGUF_ARRAY);
    if (s) return s;
    wb_u32(&w->kv, elem_type);
    wb_u64(&w->kv, n);
    wb_put(&w->kv, data, bytes);
    return w->kv.oom ? RL_ERR_NOMEM : RL_OK;
}

rl_status rl_gguf_writer_arr_str(rl_gguf_writer *w, const char *key, const char *const *strs,
                                 const size_t *lens, uint64_t n) {
    rl_status s = begin_kv(w, key, RL_GGUF_ARRAY);
    if (s) return s;
    wb_u32(&w->kv, RL_GGUF_STRING);
    wb_u64(&w->kv, n);
    for (uint64_t i = 0; i < n; i++) wb_str(&w->kv, strs[i], lens ? lens[i] : strlen(strs[i]));
    return w->kv.oom ? RL_ERR_NOMEM : RL_OK;
}

void rl_gguf_writer_set_alignment(rl_gguf_writer *w, uint32_t alignment) {
    w->alignment = alignment;
    rl_gguf_writer_u32(w, "general.alignment", alignment);
}

rl_status rl_gguf_writer_tensor(rl_gguf_writer *w, const char *name, rl_type type, uint32_t n_dims,
                                const int64_t *ne, const void *data) {
    const rl_type_traits *tr = (uint32_t)type < RL_TYPE_GGUF_END ? rl_type_get(type) : NULL;
    if (!tr || !name || !*name || n_dims == 0 || n_dims > RL_GGUF_MAX_DIMS) return RL_ERR_INVALID;
    for (uint64_t i = 0; i < w->n_tensors; i++)
        if (!strcmp(w->tensors[i].name, name)) return RL_ERR_INVALID;
    wtensor t = {.type = type, .n_dims = n_dims, .data = data};
    size_t rows = 1;
    for (int d = 0; d < RL_GGUF_MAX_DIMS; d++) t.ne[d] = 1;
    for (uint32_t d = 0; d < n_dims; d++) {
        if (ne[d] <= 0) return RL_ERR_INVALID;
        t.ne[d] = ne[d];
        if (d > 0 && !rl_mul_size(rows, (size_t)ne[d], &rows)) return RL_ERR_INVALID;
    }
    size_t row = rl_type_row_size(type, t.ne[0]);
    if (!row || !rl_mul_size(row, rows, &t.nbytes)) return RL_ERR_INVALID;
    if (rl_grow((void **)&w->tensors, &w->cap_tensors, w->n_tensors + 1, sizeof *w->tensors))
        return RL_ERR_NOMEM;
    if (!(t.name = rl_strndup(name, strlen(name)))) return RL_ERR_NOMEM;
    w->tensors[w->n_tensors++] = t;
    return RL_OK;
}

static uint64_t align_up(uint64_t x, uint64_t a) {
    return (x + a - 1) / a * a;
}

static rl_status check_writable(const rl_gguf_writer *w, rl_err *err) {
    if (w->kv.oom) return rl_err_set(err, RL_ERR_NOMEM, "gguf writer: out of memory");
    if (!w->alignment || (w->alignment & (w->alignment - 1)))
        return rl_err_set(err, RL_ERR_INVALID, "gguf writer: alignment %u is not a power of two",
                          w->alignment);
    return RL_OK;
}

/* The whole file into b (a buffer or a file stream). */
static void serialize(const rl_gguf_writer *w, wbuf *b) {
    wb_u32(b, RL_GGUF_MAGIC);
    wb_u32(b, 3);
    wb_u64(b, w->n_tensors);
    wb_u64(b, w->n_kv);
    wb_put(b, w->kv.m.p, w->kv.n);
    uint64_t off = 0;
    for (uint64_t i = 0; i < w->n_tensors; i++) {
        const wtensor *t = &w->tensors[i];
        wb_str(b, t->name, strlen(t->name));
        wb_u32(b, t->n_dims);
        for (uint32_t d = 0; d < t->n_dims; d++) wb_u64(b, (uint64_t)t->ne[d]);
        wb_u32(b, t->type);
        wb_u64(b, off);
        off = align_up(off + t->nbytes, w->alignment);
    }
    static const uint8_t zeros[64];
    if (w->n_tensors) {
        while (b->n % w->alignment) wb_put(b, zeros, 1);
        for (uint64_t i = 0; i < w->n_tensors; i++) {
            const wtensor *t = &w->tensors[i];
            if (t->data)
                wb_put(b, t->data, t->nbytes);
            else
                for (size_t k = 0; k < t->nbytes; k += sizeof zeros)
                    wb_put(b, zeros, t->nbytes - k < sizeof zeros ? t->nbytes - k : sizeof zeros);
            if (i + 1 < w->n_tensors)
                while (b->n % w->alignment) wb_put(b, zeros, 1);
        }
    }
}

rl_status rl_gguf_writer_to_memory(rl_gguf_writer *w, void **out, size_t *out_size, rl_err *err) {
    *out = NULL;
    *out_size = 0;
    rl_status s = check_writable(w, err);
    if (s) return s;
    wbuf b = {0};
    serialize(w, &b);
    if (b.oom) {
        rl_buf_free(&b.m);
        return rl_err_set(err, RL_ERR_NOMEM, "gguf writer: out of memory");
    }
    *out = b.m.p;
    *out_size = b.n;
    return RL_OK;
}

rl_status rl_gguf_writer_to_file(rl_gguf_writer *w, const char *path, rl_err *err) {
    rl_status s = check_writable(w, err);
    if (s) return s;
    FILE *f = fopen(path, "wb");
    if (!f) return rl_err_set(err, RL_ERR_IO, "cannot create '%s': %s", path, strerror(errno));
    wbuf b = {.f = f}; /* streamed: tensor data is never copied */
    serialize(w, &b);
    int cl = fclose(f);
    if (b.ioerr || cl != 0) return rl_err_set(err, RL_ERR_IO, "cannot write '%s'", path);
    return RL_OK;
}
