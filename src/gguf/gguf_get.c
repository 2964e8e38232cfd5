/* Typed getters over a parsed GGUF file.  Every offset used here was
 * validated by the parser (gguf.c), so reads are in bounds; values are
 * copied out with memcpy because GGUF values are unaligned in the file. */
#include "gguf/gguf-impl.h"

#include <math.h>
#include <string.h>

static const rl__gguf_kv *kv_at(const rl_gguf *g, int64_t i, rl_err *err) {
    if (i < 0 || (uint64_t)i >= g->n_kv) {
        rl_err_set(err, RL_ERR_NOT_FOUND, "gguf: kv index %lld out of range", (long long)i);
        return NULL;
    }
    return &g->kv[i];
}

static rl_status type_error(const rl__gguf_kv *kv, uint32_t actual, const char *want, rl_err *err) {
    return rl_err_set(err, RL_ERR_FORMAT, "gguf: key '%s' has type %s, expected %s", kv->key,
                      rl_gguf_vtype_name(actual), want);
}

/* Reads a scalar of type t at file offset off as int64 (integers, bool). */
static rl_status load_int(const rl_gguf *g, const rl__gguf_kv *kv, uint32_t t, uint64_t off,
                          int64_t *out, rl_err *err) {
    const uint8_t *p = g->base + off;
    switch (t) {
    case RL_GGUF_UINT8:
        *out = *p;
        return RL_OK;
    case RL_GGUF_INT8:
        *out = (int8_t)*p;
        return RL_OK;
    case RL_GGUF_BOOL:
        *out = *p != 0;
        return RL_OK;
    case RL_GGUF_UINT16: {
        uint16_t v;
        memcpy(&v, p, 2);
        *out = v;
        return RL_OK;
    }
    case RL_GGUF_INT16: {
        int16_t v;
        memcpy(&v, p, 2);
        *out = v;
        return RL_OK;
    }
    case RL_GGUF_UINT32: {
        uint32_t v;
        memcpy(&v, p, 4);
        *out = v;
        return RL_OK;
    }
    case RL_GGUF_INT32: {
        int32_t v;
        memcpy(&v, p, 4);
        *out = v;
        return RL_OK;
    }
    case RL_GGUF_INT64: {
        int64_t v;
        memcpy(&v, p, 8);
        *out = v;
        return RL_OK;
    }
    case RL_GGUF_UINT64: {
        uint64_t v;
        memcpy(&v, p, 8);
        if (v > (uint64_t)INT64_MAX)
            return rl_err_set(err, RL_ERR_RANGE, "gguf: key '%s': value %llu does not fit int64",
                              kv->key, (unsigned long long)v);
        *out = (int64_t)v;
        return RL_OK;
    }
    default:
        return type_error(kv, t, "an integer", err);
    }
}

static rl_status load_f64(const rl_gguf *g, const rl__gguf_kv *kv, uint32_t t, uint64_t off,
                          double *out, rl_err *err) {
    const uint8_t *p = g->base + off;
    if (t == RL_GGUF_FLOAT32) {
        float v;
        memcpy(&v, p, 4);
        *out = v;
        return RL_OK;
    }
    if (t == RL_GGUF_FLOAT64) {
        memcpy(out, p, 8);
        return RL_OK;
    }
    int64_t i;
    if (t == RL_GGUF_BOOL || t == RL_GGUF_STRING || t == RL_GGUF_ARRAY)
        return type_error(kv, t, "a number", err);
    rl_status s = load_int(g, kv, t, off, &i, err);
    if (s) return s;
    *out = (double)i;
    return RL_OK;
}

static void load_str(const rl_gguf *g, uint64_t off, rl_gguf_str *out) {
    memcpy(&out->len, g->base + off, 8);
    out->ptr = (const char *)g->base + off + 8;
}

rl_status rl_gguf_kv_i64(const rl_gguf *g, int64_t i, int64_t *out, rl_err *err) {
    const rl__gguf_kv *kv = kv_at(g, i, err);
    if (!kv) return RL_ERR_NOT_FOUND;
    if (kv->type == RL_GGUF_FLOAT32 || kv->type == RL_GGUF_FLOAT64 || kv->type == RL_GGUF_STRING ||
        kv->type == RL_GGUF_ARRAY)
        return type_error(kv, kv->type, "an integer", err);
    return load_int(g, kv, kv->type, kv->val_off, out, err);
}

rl_status rl_gguf_kv_f64(const rl_gguf *g, int64_t i, double *out, rl_err *err) {
    const rl__gguf_kv *kv = kv_at(g, i, err);
    if (!kv) return RL_ERR_NOT_FOUND;
    return load_f64(g, kv, kv->type, kv->val_off, out, err);
}

rl_status rl_gguf_kv_bool(const rl_gguf *g, int64_t i, bool *out, rl_err *err) {
    const rl__gguf_kv *kv = kv_at(g, i, err);
    if (!kv) return RL_ERR_NOT_FOUND;
    if (kv->type != RL_GGUF_BOOL) return type_error(kv, kv->type, "bool", err);
    *out = g->base[kv->val_off] != 0;
    return RL_OK;
}

rl_status rl_gguf_kv_str(const rl_gguf *g, int64_t i, rl_gguf_str *out, rl_err *err) {
    const rl__gguf_kv *kv = kv_at(g, i, err);
    if (!kv) return RL_ERR_NOT_FOUND;
    if (kv->type != RL_GGUF_STRING) return type_error(kv, kv->type, "string", err);
    load_str(g, kv->val_off, out);
    return RL_OK;
}

rl_status rl_gguf_get_i64(const rl_gguf *g, const char *key, int64_t def, int64_t *out,
                          rl_err *err) {
    int64_t i = rl_gguf_find_key(g, key);
    if (i < 0) {
        *out = def;
        return RL_OK;
    }
    return rl_gguf_kv_i64(g, i, out, err);
}

rl_status rl_gguf_get_f64(const rl_gguf *g, const char *key, double def, double *out, rl_err *err) {
    int64_t i = rl_gguf_find_key(g, key);
    if (i < 0) {
        *out = def;
        return RL_OK;
    }
    return rl_gguf_kv_f64(g, i, out, err);
}

rl_status rl_gguf_get_bool(const rl_gguf *g, const char *key, bool def, bool *out, rl_err *err) {
    int64_t i = rl_gguf_find_key(g, key);
    if (i < 0) {
        *out = def;
        return RL_OK;
    }
    return rl_gguf_kv_bool(g, i, out, err);
}

rl_status rl_gguf_get_str(const rl_gguf *g, const char *key, rl_gguf_str *out, rl_err *err) {
    int64_t i = rl_gguf_find_key(g, key);
    if (i < 0) {
        out->ptr = NULL;
        out->len = 0;
        return RL_OK;
    }
    return rl_gguf_kv_str(g, i, out, err);
}

/* ---- arrays ---- */
static const rl__gguf_kv *arr_at(const rl_gguf *g, int64_t i, uint64_t j, rl_err *err) {
    const rl__gguf_kv *kv = kv_at(g, i, err);
    if (!kv) return NULL;
    if (kv->type != RL_GGUF_ARRAY) {
        type_error(kv, kv->type, "array", err);
        return NULL;
    }
    if (j >= kv->arr_n) {
        rl_err_set(err, RL_ERR_RANGE, "gguf: key '%s': element %llu out of range (length %llu)",
                   kv->key, (unsigned long long)j, (unsigned long long)kv->arr_n);
        return NULL;
    }
    return kv;
}

rl_status rl_gguf_kv_arr(const rl_gguf *g, int64_t i, rl_gguf_vtype *elem_type, uint64_t *n,
                         rl_err *err) {
    const rl__gguf_kv *kv = kv_at(g, i, err);
    if (!kv) return RL_ERR_NOT_FOUND;
    if (kv->type != RL_GGUF_ARRAY) return type_error(kv, kv->type, "array", err);
    *elem_type = (rl_gguf_vtype)kv->arr_type;
    *n = kv->arr_n;
    return RL_OK;
}

rl_status rl_gguf_arr_i64(const rl_gguf *g, int64_t i, uint64_t j, int64_t *out, rl_err *err) {
    const rl__gguf_kv *kv = arr_at(g, i, j, err);
    if (!kv) return err ? err->code : RL_ERR_FORMAT;
    size_t esz = rl__gguf_vtype_size(kv->arr_type);
    if (!esz || kv->arr_type == RL_GGUF_FLOAT32 || kv->arr_type == RL_GGUF_FLOAT64)
        return rl_err_set(err, RL_ERR_FORMAT, "gguf: key '%s' is an array of %s, expected integers",
                          kv->key, rl_gguf_vtype_name(kv->arr_type));
    return load_int(g, kv, kv->arr_type, kv->arr_data + j * esz, out, err);
}

rl_status rl_gguf_arr_f64(const rl_gguf *g, int64_t i, uint64_t j, double *out, rl_err *err) {
    const rl__gguf_kv *kv = arr_at(g, i, j, err);
    if (!kv) return err ? err->code : RL_ERR_FORMAT;
    size_t esz = rl__gguf_vtype_size(kv->arr_type);
    if (!esz || kv->arr_type == RL_GGUF_BOOL)
        return rl_err_set(err, RL_ERR_FORMAT, "gguf: key '%s' is an array of %s, expected numbers",
                          kv->key, rl_gguf_vtype_name(kv->arr_type));
    return load_f64(g, kv, kv->arr_type, kv->arr_data + j * esz, out, err);
}

rl_status rl_gguf_arr_str(const rl_gguf *g, int64_t i, uint64_t j, rl_gguf_str *out, rl_err *err) {
    const rl__gguf_kv *kv = arr_at(g, i, j, err);
    if (!kv) return err ? err->code : RL_ERR_FORMAT;
    if (kv->arr_type != RL_GGUF_STRING)
        return rl_err_set(err, RL_ERR_FORMAT, "gguf: key '%s' is an array of %s, expected strings",
                          kv->key, rl_gguf_vtype_name(kv->arr_type));
    load_str(g, kv->arr_index[j], out);
    return RL_OK;
}

rl_status rl_gguf_arr_nested(const rl_gguf *g, int64_t i, uint64_t j, rl_gguf_vtype *elem_type,
                             uint64_t *n, rl_err *err) {
    const rl__gguf_kv *kv = arr_at(g, i, j, err);
    if (!kv) return err ? err->code : RL_ERR_FORMAT;
    if (kv->arr_type != RL_GGUF_ARRAY)
        return rl_err_set(err, RL_ERR_FORMAT, "gguf: key '%s' is an array of %s, not of arrays",
                          kv->key, rl_gguf_vtype_name(kv->arr_type));
    uint32_t et;
    memcpy(&et, g->base + kv->arr_index[j], 4);
    memcpy(n, g->base + kv->arr_index[j] + 4, 8);
    *elem_type = (rl_gguf_vtype)et;
    return RL_OK;
}
