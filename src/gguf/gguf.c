/* GGUF reader: parse and validate a whole GGUF header up front, then serve
 * lookups from tables built once.
 *
 * Invariants after a successful open:
 *   - every kv's value, every array element and every string lies inside
 *     [0, size) of the buffer;
 *   - keys are unique; tensor names are unique; every tensor's data lies
 *     inside the file, starts at an aligned offset, and no two overlap;
 *   - element type ids, tensor type ids and dimensions are known and sane.
 * All parsing goes through the bounds-checked cursor below; nothing reads
 * the buffer except through it or through offsets it validated.
 */
#include "gguf/gguf-impl.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/hash.h"

/* Bounds that no real model comes near; they keep hostile counts from
 * turning into huge allocations before the per-byte checks catch them. */
#define GGUF_MAX_KEY_LEN  65535u
#define GGUF_MAX_NAME_LEN 1024u
#define GGUF_MAX_NEST     8

static const size_t vtype_size[RL_GGUF_VTYPE_COUNT] = {
    [RL_GGUF_UINT8] = 1,   [RL_GGUF_INT8] = 1,  [RL_GGUF_UINT16] = 2,  [RL_GGUF_INT16] = 2,
    [RL_GGUF_UINT32] = 4,  [RL_GGUF_INT32] = 4, [RL_GGUF_FLOAT32] = 4, [RL_GGUF_BOOL] = 1,
    [RL_GGUF_STRING] = 0,  [RL_GGUF_ARRAY] = 0, [RL_GGUF_UINT64] = 8,  [RL_GGUF_INT64] = 8,
    [RL_GGUF_FLOAT64] = 8,
};

const char *rl_gguf_vtype_name(uint32_t t) {
    static const char *names[RL_GGUF_VTYPE_COUNT] = {
        "u8",   "i8",     "u16",   "i16", "u32", "i32", "f32",
        "bool", "string", "array", "u64", "i64", "f64",
    };
    return t < RL_GGUF_VTYPE_COUNT ? names[t] : "?";
}

size_t rl__gguf_vtype_size(uint32_t t) {
    return t < RL_GGUF_VTYPE_COUNT ? vtype_size[t] : 0;
}

/* ---- bounds-checked cursor ---- */
typedef struct cursor {
    const uint8_t *p;
    size_t size;
    size_t pos;
    rl_err *err;
} cursor;

static rl_status short_read(cursor *c, const char *field, size_t need) {
    return rl_err_set(c->err, RL_ERR_FORMAT,
                      "gguf: %s at offset %zu: needs %zu bytes but the file ends at %zu", field,
                      c->pos, need, c->size);
}

static rl_status rd_bytes(cursor *c, const char *field, size_t n, const uint8_t **out) {
    if (n > c->size - c->pos) return short_read(c, field, n);
    *out = c->p + c->pos;
    c->pos += n;
    return RL_OK;
}

static rl_status rd_u32(cursor *c, const char *field, uint32_t *v) {
    const uint8_t *b = NULL;
    rl_status s = rd_bytes(c, field, 4, &b);
    if (s) return s;
    memcpy(v, b, 4);
    return RL_OK;
}

static rl_status rd_u64(cursor *c, const char *field, uint64_t *v) {
    const uint8_t *b = NULL;
    rl_status s = rd_bytes(c, field, 8, &b);
    if (s) return s;
    memcpy(v, b, 8);
    return RL_OK;
}

/* Reads a string header and checks its bytes are present; returns the
 * offset of the first byte in *off. */
static rl_status rd_str(cursor *c, const char *field, uint64_t max_len, uint64_t *off,
                        uint64_t *len) {
    size_t at = c->pos;
    rl_status s = rd_u64(c, field, len);
    if (s) return s;
    if (*len > max_len)
        return rl_err_set(c->err, RL_ERR_FORMAT,
                          "gguf: %s at offset %zu: string length %llu exceeds the limit %llu",
                          field, at, (unsigned long long)*len, (unsigned long long)max_len);
    if (*len > c->size - c->pos)
        return rl_err_set(c->err, RL_ERR_FORMAT,
                          "gguf: %s at offset %zu: string length %llu runs past the end of the "
                          "file (%zu bytes left)",
                          field, at, (unsigned long long)*len, c->size - c->pos);
    *off = c->pos;
    c->pos += (size_t)*len;
    return RL_OK;
}

/* ---- string hash set (keys, tensor names) ---- */

typedef rl__gguf_strset strset;

static rl_status strset_init(strset *ss, uint64_t n) {
    size_t cap = 16;
    while (cap < n * 2 + 1) cap <<= 1;
    ss->slot = rl_calloc(cap, sizeof(int64_t));
    ss->cap = cap;
    return ss->slot ? RL_OK : RL_ERR_NOMEM;
}

/* Looks `name` up; names[k] is found at byte offset k * stride. */
static int64_t strset_find(const strset *ss, const char *const *names, size_t stride,
                           const char *name) {
    if (!ss->slot || !names) return -1;
    size_t mask = ss->cap - 1, i = rl_hash_bytes(name, strlen(name)) & mask;
    while (ss->slot[i]) {
        const char *n = *(const char *const *)((const char *)names + stride * (ss->slot[i] - 1));
        if (!strcmp(n, name)) return ss->slot[i] - 1;
        i = (i + 1) & mask;
    }
    return -1;
}

/* ---- values ---- */

/* Skips over one value of type t at the cursor, validating it.  For arrays
 * it records element type, count and (for string/array elements) an index
 * of element offsets when `kv` is non-NULL (top level only). */
static rl_status parse_value(cursor *c, uint32_t t, const char *key, int depth, rl__gguf_kv *kv);

static rl_status parse_array(cursor *c, const char *key, int depth, rl__gguf_kv *kv) {
    size_t at = c->pos;
    uint32_t et;
    uint64_t n;
    rl_status s = rd_u32(c, "array element type", &et);
    if (s) return rl_err_prefix(c->err, "key '%s'", key);
    if ((s = rd_u64(c, "array length", &n))) return rl_err_prefix(c->err, "key '%s'", key);
    if (et >= RL_GGUF_VTYPE_COUNT)
        return rl_err_set(c->err, RL_ERR_FORMAT,
                          "gguf: key '%s': array at offset %zu has unknown element type %u", key,
                          at, et);
    if (et == RL_GGUF_ARRAY && depth + 1 >= GGUF_MAX_NEST)
        return rl_err_set(c->err, RL_ERR_FORMAT,
                          "gguf: key '%s': arrays nested deeper than %d at offset %zu", key,
                          GGUF_MAX_NEST, at);
    size_t left = c->size - c->pos;
    size_t esz = vtype_size[et];
    /* Minimum bytes per element: fixed size, 8 for a string length, 12 for
     * a nested array header.  Checking n against this first bounds every
     * allocation below by the file size. */
    size_t min_el = esz ? esz : (et == RL_GGUF_STRING ? 8 : 12);
    if (n > left / min_el)
        return rl_err_set(c->err, RL_ERR_FORMAT,
                          "gguf: key '%s': array length %llu at offset %zu runs past the end of "
                          "the file",
                          key, (unsigned long long)n, at);
    if (kv) {
        kv->arr_type = et;
        kv->arr_n = n;
        kv->arr_data = c->pos;
    }
    if (esz) {
        if (et == RL_GGUF_BOOL) {
            for (uint64_t j = 0; j < n; j++)
                if (c->p[c->pos + j] > 1)
                    return rl_err_set(c->err, RL_ERR_FORMAT,
                                      "gguf: key '%s': bool element %llu at offset %zu is %u "
                                      "(must be 0 or 1)",
                                      key, (unsigned long long)j, c->pos + (size_t)j,
                                      c->p[c->pos + j]);
        }
        c->pos += (size_t)n * esz;
        return RL_OK;
    }
    uint64_t *index = NULL;
    if (kv && n) {
        index = rl_calloc((size_t)n, sizeof(uint64_t));
        if (!index) return rl_err_set(c->err, RL_ERR_NOMEM, "gguf: key '%s': out of memory", key);
        kv->arr_index = index;
    }
    for (uint64_t j = 0; j < n; j++) {
        if (index) index[j] = c->pos;
        if ((s = parse_value(c, et, key, depth + 1, NULL))) return s;
    }
    return RL_OK;
}

static rl_status parse_value(cursor *c, uint32_t t, const char *key, int depth, rl__gguf_kv *kv) {
    if (t >= RL_GGUF_VTYPE_COUNT)
        return rl_err_set(c->err, RL_ERR_FORMAT,
                          "gguf: key '%s': unknown value type %u at offset %zu", key, t,
                          c->pos - 4);
    if (t == RL_GGUF_STRING) {
        uint64_t off, len;
        rl_status s = rd_str(c, "string value", UINT64_MAX, &off, &len);
        return s ? rl_err_prefix(c->err, "key '%s'", key) : RL_OK;
    }
    if (t == RL_GGUF_ARRAY) return parse_array(c, key, depth, kv);
    const uint8_t *b = NULL;
    if (rd_bytes(c, "value", vtype_size[t], &b)) return rl_err_prefix(c->err, "key '%s'", key);
    if (t == RL_GGUF_BOOL && *b > 1)
        return rl_err_set(c->err, RL_ERR_FORMAT,
                          "gguf: key '%s': bool at offset %zu is %u (must be 0 or 1)", key,
                          c->pos - 1, *b);
    return RL_OK;
}

/* Keys whose type the format fixes; a file that stores them otherwise is
 * malformed rather than merely unusual. */
static const struct {
    const char *key;
    rl_gguf_vtype type;
} known_keys[] = {
    {"general.alignment", RL_GGUF_UINT32},
    {"general.architecture", RL_GGUF_STRING},
    {"general.name", RL_GGUF_STRING},
};

static rl_status check_known_key(const rl_gguf *g, const rl__gguf_kv *kv, rl_err *err) {
    for (size_t i = 0; i < sizeof known_keys / sizeof known_keys[0]; i++)
        if (!strcmp(kv->key, known_keys[i].key) && kv->type != known_keys[i].type)
            return rl_err_set(err, RL_ERR_FORMAT,
                              "gguf: key '%s' at offset %llu has type %s, expected %s", kv->key,
                              (unsigned long long)kv->key_off, rl_gguf_vtype_name(kv->type),
                              rl_gguf_vtype_name(known_keys[i].type));
    (void)g;
    return RL_OK;
}

/* ---- header parse ---- */
static int cmp_tensor_off(const void *a, const void *b) {
    const rl_gguf_tensor *x = *(const rl_gguf_tensor *const *)a;
    const rl_gguf_tensor *y = *(const rl_gguf_tensor *const *)b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

static rl_status parse_kvs(rl_gguf *g, cursor *c) {
    rl_err *err = c->err;
    /* each kv needs at least 8 (key len) + 1 (key) + 4 (type) + 1 bytes */
    if (g->n_kv > (c->size - c->pos) / 14)
        return rl_err_set(err, RL_ERR_FORMAT,
                          "gguf: n_kv %llu at offset 16 is more than the file could hold",
                          (unsigned long long)g->n_kv);
    g->kv = rl_calloc((size_t)g->n_kv, sizeof *g->kv);
    if (!g->kv && g->n_kv) return rl_err_set(err, RL_ERR_NOMEM, "gguf: out of memory (kv table)");
    for (uint64_t i = 0; i < g->n_kv; i++) {
        rl__gguf_kv *kv = &g->kv[i];
        uint64_t off, len;
        kv->key_off = c->pos;
        if (rd_str(c, "key", GGUF_MAX_KEY_LEN, &off, &len))
            return rl_err_prefix(err, "kv %llu", (unsigned long long)i);
        if (len == 0)
            return rl_err_set(err, RL_ERR_FORMAT, "gguf: kv %llu at offset %llu has an empty key",
                              (unsigned long long)i, (unsigned long long)kv->key_off);
        if (memchr(c->p + off, 0, (size_t)len))
            return rl_err_set(err, RL_ERR_FORMAT,
                              "gguf: kv %llu at offset %llu: key contains a NUL byte",
                              (unsigned long long)i, (unsigned long long)kv->key_off);
        kv->key = rl_strndup((const char *)c->p + off, (size_t)len);
        if (!kv->key) return rl_err_set(err, RL_ERR_NOMEM, "gguf: out of memory (key)");
        g->n_kv_parsed = i + 1;
        if (rd_u32(c, "value type", &kv->type)) return rl_err_prefix(err, "key '%s'", kv->key);
        kv->val_off = c->pos;
        rl_status s = parse_value(c, kv->type, kv->key, 0, kv);
        if (s) return s;
        if (check_known_key(g, kv, err)) return err ? err->code : RL_ERR_FORMAT;
    }
    return RL_OK;
}

static rl_status parse_tensors(rl_gguf *g, cursor *c) {
    rl_err *err = c->err;
    /* each tensor info needs at least 8+1 + 4 + 8 + 4 + 8 bytes */
    if (g->n_tensors > (c->size - c->pos) / 33)
        return rl_err_set(err, RL_ERR_FORMAT,
                          "gguf: n_tensors %llu at offset 8 is more than the file could hold",
                          (unsigned long long)g->n_tensors);
    g->tensors = rl_calloc((size_t)g->n_tensors, sizeof *g->tensors);
    if (!g->tensors && g->n_tensors)
        return rl_err_set(err, RL_ERR_NOMEM, "gguf: out of memory (tensor table)");
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        rl_gguf_tensor *t = &g->tensors[i];
        size_t at = c->pos;
        uint64_t off, len;
        if (rd_str(c, "tensor name", GGUF_MAX_NAME_LEN, &off, &len))
            return rl_err_prefix(err, "tensor %llu", (unsigned long long)i);
        if (len == 0 || memchr(c->p + off, 0, (size_t)len))
            return rl_err_set(err, RL_ERR_FORMAT,
                              "gguf: tensor %llu at offset %zu: name is empty or contains NUL",
                              (unsigned long long)i, at);
        char *name = rl_strndup((const char *)c->p + off, (size_t)len);
        if (!name) return rl_err_set(err, RL_ERR_NOMEM, "gguf: out of memory (tensor name)");
        t->name = name;
        g->n_tensors_parsed = i + 1;
        uint32_t n_dims;
        size_t dims_at = c->pos;
        if (rd_u32(c, "n_dims", &n_dims)) return rl_err_prefix(err, "tensor '%s'", name);
        if (n_dims == 0 || n_dims > RL_GGUF_MAX_DIMS)
            return rl_err_set(err, RL_ERR_FORMAT,
                              "gguf: tensor '%s': n_dims %u at offset %zu is not in 1..%d", name,
                              n_dims, dims_at, RL_GGUF_MAX_DIMS);
        t->n_dims = n_dims;
        uint64_t nel = 1;
        for (int d = 0; d < RL_GGUF_MAX_DIMS; d++) t->ne[d] = 1;
        for (uint32_t d = 0; d < n_dims; d++) {
            uint64_t ne;
            size_t ne_at = c->pos;
            if (rd_u64(c, "dimension", &ne)) return rl_err_prefix(err, "tensor '%s'", name);
            if (ne == 0 || ne > (uint64_t)INT64_MAX)
                return rl_err_set(err, RL_ERR_FORMAT,
                                  "gguf: tensor '%s': dimension %u at offset %zu is %lld (must be "
                                  "positive)",
                                  name, d, ne_at, (long long)ne);
            if (!rl_mul_u64(nel, ne, &nel) || nel > (uint64_t)INT64_MAX)
                return rl_err_set(err, RL_ERR_FORMAT,
                                  "gguf: tensor '%s': element count overflows at dimension %u "
                                  "(offset %zu)",
                                  name, d, ne_at);
            t->ne[d] = (int64_t)ne;
        }
        t->n_elements = (int64_t)nel;
        uint32_t type;
        size_t type_at = c->pos;
        if (rd_u32(c, "tensor type", &type)) return rl_err_prefix(err, "tensor '%s'", name);
        const rl_type_traits *tr = type < RL_TYPE_GGUF_END ? rl_type_get(type) : NULL;
        if (!tr)
            return rl_err_set(err, RL_ERR_FORMAT,
                              "gguf: tensor '%s': unknown tensor type %u at offset %zu", name, type,
                              type_at);
        t->type = (rl_type)type;
        if (t->ne[0] % tr->blck_size)
            return rl_err_set(err, RL_ERR_FORMAT,
                              "gguf: tensor '%s': ne[0]=%lld is not a multiple of the %s block "
                              "size %d",
                              name, (long long)t->ne[0], tr->name, tr->blck_size);
        size_t row = rl_type_row_size(t->type, t->ne[0]);
        uint64_t rows = (uint64_t)(nel / (uint64_t)t->ne[0]), nbytes;
        if (!row || !rl_mul_u64(row, rows, &nbytes) || nbytes > SIZE_MAX)
            return rl_err_set(err, RL_ERR_FORMAT, "gguf: tensor '%s': byte size overflows", name);
        t->nbytes = (size_t)nbytes;
        if (rd_u64(c, "tensor offset", &t->offset)) return rl_err_prefix(err, "tensor '%s'", name);
    }
    return RL_OK;
}

/* Builds the key and tensor-name indexes, rejecting duplicates. */
static rl_status check_duplicates(rl_gguf *g, rl_err *err) {
    if (strset_init(&g->kv_set, g->n_kv) || strset_init(&g->tensor_set, g->n_tensors))
        return rl_err_set(err, RL_ERR_NOMEM, "gguf: out of memory (index)");
    for (uint64_t i = 0; i < g->n_kv; i++) {
        const char *k = g->kv[i].key;
        size_t mask = g->kv_set.cap - 1, h = rl_hash_bytes(k, strlen(k)) & mask;
        while (g->kv_set.slot[h]) {
            if (!strcmp(g->kv[g->kv_set.slot[h] - 1].key, k))
                return rl_err_set(err, RL_ERR_FORMAT,
                                  "gguf: duplicate key '%s' at offset %llu (first at %llu)", k,
                                  (unsigned long long)g->kv[i].key_off,
                                  (unsigned long long)g->kv[g->kv_set.slot[h] - 1].key_off);
            h = (h + 1) & mask;
        }
        g->kv_set.slot[h] = (int64_t)i + 1;
    }
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const char *k = g->tensors[i].name;
        size_t mask = g->tensor_set.cap - 1, h = rl_hash_bytes(k, strlen(k)) & mask;
        while (g->tensor_set.slot[h]) {
            if (!strcmp(g->tensors[g->tensor_set.slot[h] - 1].name, k))
                return rl_err_set(err, RL_ERR_FORMAT, "gguf: duplicate tensor name '%s'", k);
            h = (h + 1) & mask;
        }
        g->tensor_set.slot[h] = (int64_t)i + 1;
    }
    return RL_OK;
}

static rl_status finish_layout(rl_gguf *g, cursor *c) {
    rl_err *err = c->err;
    g->alignment = RL_GGUF_DEFAULT_ALIGNMENT;
    int64_t ai = rl_gguf_find_key(g, "general.alignment");
    if (ai >= 0) {
        uint32_t a;
        memcpy(&a, c->p + g->kv[ai].val_off, 4);
        if (a == 0 || (a & (a - 1)))
            return rl_err_set(err, RL_ERR_FORMAT,
                              "gguf: general.alignment at offset %llu is %u (must be a nonzero "
                              "power of two)",
                              (unsigned long long)g->kv[ai].val_off, a);
        g->alignment = a;
    }
    uint64_t hdr_end = c->pos;
    uint64_t data = (hdr_end + g->alignment - 1) / g->alignment * g->alignment;
    g->data_offset = data;
    if (g->n_tensors == 0) return RL_OK;
    if (data > c->size)
        return rl_err_set(err, RL_ERR_FORMAT,
                          "gguf: data section would start at offset %llu, past the end of the "
                          "file (%zu bytes)",
                          (unsigned long long)data, c->size);
    uint64_t data_size = c->size - data;
    rl_gguf_tensor **by_off = rl_malloc((size_t)g->n_tensors * sizeof *by_off);
    if (!by_off) return rl_err_set(err, RL_ERR_NOMEM, "gguf: out of memory (tensor order)");
    rl_status s = RL_OK;
    for (uint64_t i = 0; i < g->n_tensors && !s; i++) {
        rl_gguf_tensor *t = &g->tensors[i];
        by_off[i] = t;
        if (t->offset % g->alignment)
            s = rl_err_set(err, RL_ERR_FORMAT,
                           "gguf: tensor '%s': data offset %llu is not a multiple of the "
                           "alignment %zu",
                           t->name, (unsigned long long)t->offset, g->alignment);
        else if (t->offset > data_size || t->nbytes > data_size - t->offset)
            s = rl_err_set(err, RL_ERR_FORMAT,
                           "gguf: tensor '%s': data [%llu, +%zu) runs past the end of the file "
                           "(data section is %llu bytes)",
                           t->name, (unsigned long long)t->offset, t->nbytes,
                           (unsigned long long)data_size);
        else
            t->data = c->p + data + t->offset;
    }
    if (!s) {
        qsort(by_off, (size_t)g->n_tensors, sizeof *by_off, cmp_tensor_off);
        for (uint64_t i = 1; i < g->n_tensors && !s; i++) {
            const rl_gguf_tensor *a = by_off[i - 1], *b = by_off[i];
            if (a->offset + a->nbytes > b->offset)
                s = rl_err_set(err, RL_ERR_FORMAT,
                               "gguf: tensor '%s' (data [%llu, %llu)) overlaps tensor '%s' "
                               "(starts at %llu)",
                               a->name, (unsigned long long)a->offset,
                               (unsigned long long)(a->offset + a->nbytes), b->name,
                               (unsigned long long)b->offset);
        }
    }
    rl_free(by_off);
    return s;
}

static rl_status parse(rl_gguf *g, rl_err *err) {
    cursor c = {.p = g->base, .size = g->size, .pos = 0, .err = err};
    uint32_t magic;
    if (rd_u32(&c, "magic", &magic)) return err ? err->code : RL_ERR_FORMAT;
    if (magic != RL_GGUF_MAGIC)
        return rl_err_set(err, RL_ERR_FORMAT,
                          "gguf: magic at offset 0 is 0x%08x, expected 0x%08x (\"GGUF\"): not a "
                          "GGUF file",
                          magic, RL_GGUF_MAGIC);
    if (rd_u32(&c, "version", &g->version)) return err ? err->code : RL_ERR_FORMAT;
    if (g->version != 2 && g->version != 3) {
        if ((g->version & 0xffff) == 0 && g->version)
            return rl_err_set(err, RL_ERR_UNSUPPORTED,
                              "gguf: version at offset 4 looks byte-swapped (%u): big-endian "
                              "GGUF files are not supported",
                              g->version);
        return rl_err_set(err, RL_ERR_UNSUPPORTED,
                          "gguf: version at offset 4 is %u; only versions 2 and 3 are supported",
                          g->version);
    }
    if (rd_u64(&c, "n_tensors", &g->n_tensors)) return err ? err->code : RL_ERR_FORMAT;
    if (rd_u64(&c, "n_kv", &g->n_kv)) return err ? err->code : RL_ERR_FORMAT;
    rl_status s;
    if ((s = parse_kvs(g, &c))) return s;
    if ((s = parse_tensors(g, &c))) return s;
    if ((s = check_duplicates(g, err))) return s;
    return finish_layout(g, &c);
}

static void gguf_free_tables(rl_gguf *g) {
    for (uint64_t i = 0; i < g->n_kv_parsed; i++) {
        rl_free(g->kv[i].key);
        rl_free(g->kv[i].arr_index);
    }
    for (uint64_t i = 0; i < g->n_tensors_parsed; i++) rl_free((char *)g->tensors[i].name);
    rl_free(g->kv);
    rl_free(g->tensors);
    rl_free(g->kv_set.slot);
    rl_free(g->tensor_set.slot);
}

void rl_gguf_close(rl_gguf *g) {
    if (!g) return;
    gguf_free_tables(g);
    if (g->mapped && g->size) munmap((void *)g->base, g->size);
    rl_free(g);
}

void rl_gguf_release(const rl_gguf *g, const void *p, size_t n) {
    const uint8_t *b = g->base, *q = p;
    if (!g->mapped || !q || q < b || n > g->size || (size_t)(q - b) > g->size - n) return;
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t lo = ((uintptr_t)q + page - 1) & ~(page - 1), hi = ((uintptr_t)q + n) & ~(page - 1);
    if (hi > lo) (void)madvise((void *)lo, hi - lo, MADV_DONTNEED);
}

rl_status rl_gguf_open_memory(const void *data, size_t size, rl_gguf **out, rl_err *err) {
    *out = NULL;
    rl_gguf *g = rl_calloc(1, sizeof *g);
    if (!g) return rl_err_set(err, RL_ERR_NOMEM, "gguf: out of memory");
    g->base = data;
    g->size = size;
    rl_status s = parse(g, err);
    if (s) {
        rl_gguf_close(g);
        return s;
    }
    *out = g;
    return RL_OK;
}

rl_status rl_gguf_open(const char *path, rl_gguf **out, rl_err *err) {
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return rl_err_set(err, RL_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return rl_err_set(err, RL_ERR_IO, "'%s' is not a regular file", path);
    }
    size_t size = (size_t)st.st_size;
    if (size == 0) {
        close(fd);
        return rl_err_set(err, RL_ERR_FORMAT, "gguf: '%s' is empty", path);
    }
    void *p = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (p == MAP_FAILED)
        return rl_err_set(err, RL_ERR_IO, "cannot map '%s': %s", path, strerror(errno));
    rl_gguf *g = rl_calloc(1, sizeof *g);
    if (!g) {
        munmap(p, size);
        return rl_err_set(err, RL_ERR_NOMEM, "gguf: out of memory");
    }
    g->base = p;
    g->size = size;
    g->mapped = true;
    rl_status s = parse(g, err);
    if (s) {
        rl_err_prefix(err, "%s", path);
        rl_gguf_close(g);
        return s;
    }
    *out = g;
    return RL_OK;
}

/* ---- accessors ---- */
uint32_t rl_gguf_version(const rl_gguf *g) {
    return g->version;
}
size_t rl_gguf_alignment(const rl_gguf *g) {
    return g->alignment;
}
uint64_t rl_gguf_data_offset(const rl_gguf *g) {
    return g->data_offset;
}
size_t rl_gguf_file_size(const rl_gguf *g) {
    return g->size;
}
int64_t rl_gguf_n_kv(const rl_gguf *g) {
    return (int64_t)g->n_kv;
}
int64_t rl_gguf_n_tensors(const rl_gguf *g) {
    return (int64_t)g->n_tensors;
}

const char *rl_gguf_kv_key(const rl_gguf *g, int64_t i) {
    return i >= 0 && (uint64_t)i < g->n_kv ? g->kv[i].key : NULL;
}

rl_gguf_vtype rl_gguf_kv_type(const rl_gguf *g, int64_t i) {
    return i >= 0 && (uint64_t)i < g->n_kv ? (rl_gguf_vtype)g->kv[i].type : RL_GGUF_VTYPE_COUNT;
}

int64_t rl_gguf_find_key(const rl_gguf *g, const char *key) {
    if (!g->n_kv) return -1;
    return strset_find(&g->kv_set, (const char *const *)&g->kv[0].key, sizeof(rl__gguf_kv), key);
}

const rl_gguf_tensor *rl_gguf_tensor_at(const rl_gguf *g, int64_t i) {
    return i >= 0 && (uint64_t)i < g->n_tensors ? &g->tensors[i] : NULL;
}

const rl_gguf_tensor *rl_gguf_find_tensor(const rl_gguf *g, const char *name) {
    if (!g->n_tensors) return NULL;
    int64_t i = strset_find(&g->tensor_set, (const char *const *)&g->tensors[0].name,
                            sizeof(rl_gguf_tensor), name);
    return i >= 0 ? &g->tensors[i] : NULL;
}
