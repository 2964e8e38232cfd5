/* redline GGUF reader and writer (L2).
 *
 * File layout (all little-endian; GGUF v2/v3, 64-bit counts):
 *
 *   u32   magic        "GGUF" (0x46554747)
 *   u32   version      2 or 3
 *   u64   n_tensors
 *   u64   n_kv
 *   kv[n_kv]:          string key; u32 value_type; value
 *   tensor_info[n_tensors]:
 *                      string name; u32 n_dims (1..4); u64 ne[n_dims];
 *                      u32 type (rl_type); u64 offset (relative to data start)
 *   padding to `general.alignment` (default 32)
 *   tensor data        each tensor at data_start + offset, offset aligned
 *
 *   string = u64 length + bytes (no NUL, not necessarily UTF-8)
 *   array  = u32 element_type + u64 count + elements (nested arrays allowed)
 *
 * Every count, length, offset, dimension, type id and alignment is checked
 * before use with overflow-checked arithmetic; a malformed file gives
 * RL_ERR_FORMAT with a message naming the field and its byte offset.
 * Nothing reads past the end of the mapping.
 *
 * Ownership: strings and arrays returned by accessors point into the
 * mapping or into the reader's own tables, borrowed until rl_gguf_close.
 */
#ifndef RL_GGUF_H
#define RL_GGUF_H

#include "base/base.h"
#include "tensor/tensor.h"

#define RL_GGUF_MAGIC             0x46554747u
#define RL_GGUF_DEFAULT_ALIGNMENT 32
#define RL_GGUF_MAX_DIMS          4

/* Value types; append-only, fixed by the format. */
typedef enum rl_gguf_vtype {
    RL_GGUF_UINT8 = 0,
    RL_GGUF_INT8 = 1,
    RL_GGUF_UINT16 = 2,
    RL_GGUF_INT16 = 3,
    RL_GGUF_UINT32 = 4,
    RL_GGUF_INT32 = 5,
    RL_GGUF_FLOAT32 = 6,
    RL_GGUF_BOOL = 7,
    RL_GGUF_STRING = 8,
    RL_GGUF_ARRAY = 9,
    RL_GGUF_UINT64 = 10,
    RL_GGUF_INT64 = 11,
    RL_GGUF_FLOAT64 = 12,
    RL_GGUF_VTYPE_COUNT = 13,
} rl_gguf_vtype;

const char *rl_gguf_vtype_name(uint32_t t); /* "?" if unknown */

typedef struct rl_gguf_str {
    const char *ptr; /* NOT NUL-terminated; points into the file */
    uint64_t len;
} rl_gguf_str;

typedef struct rl_gguf_tensor {
    const char *name; /* NUL-terminated copy */
    rl_type type;
    uint32_t n_dims;
    int64_t ne[RL_GGUF_MAX_DIMS]; /* unused dims are 1; ne[0] fastest */
    int64_t n_elements;
    uint64_t offset; /* relative to the data section */
    size_t nbytes;
    const void *data; /* into the mapping; NULL for header-only opens */
} rl_gguf_tensor;

typedef struct rl_gguf rl_gguf; /* opaque */

/* Opens and validates `path` (mmap, read-only).  On error *out is NULL. */
rl_status rl_gguf_open(const char *path, rl_gguf **out, rl_err *err);
/* Same over a caller buffer, borrowed until close (tests, fuzzing). */
rl_status rl_gguf_open_memory(const void *data, size_t size, rl_gguf **out, rl_err *err);
void rl_gguf_close(rl_gguf *g);
/* The caller no longer reads bytes [p, p + n) of a mapped file's data (a
 * tensor repacked into memory of its own): the whole pages inside the range
 * leave the process's resident set (madvise MADV_DONTNEED; the mapping stays
 * valid, a later read faults the file's bytes in again).  A no-op for a
 * memory open or a range outside the mapping. */
void rl_gguf_release(const rl_gguf *g, const void *p, size_t n);

uint32_t rl_gguf_version(const rl_gguf *g);
size_t rl_gguf_alignment(const rl_gguf *g);
uint64_t rl_gguf_data_offset(const rl_gguf *g); /* file offset of the data section */
size_t rl_gguf_file_size(const rl_gguf *g);

/* ---- key/value metadata ---- */
int64_t rl_gguf_n_kv(const rl_gguf *g);
const char *rl_gguf_kv_key(const rl_gguf *g, int64_t i); /* NUL-terminated */
rl_gguf_vtype rl_gguf_kv_type(const rl_gguf *g, int64_t i);
int64_t rl_gguf_find_key(const rl_gguf *g, const char *key); /* -1 if absent */

/* Scalar getters by index: convert any integer/bool type to int64/uint64
 * (RL_ERR_RANGE if it does not fit), any float or integer to double.
 * RL_ERR_FORMAT (naming the key and the actual type) on a type mismatch. */
rl_status rl_gguf_kv_i64(const rl_gguf *g, int64_t i, int64_t *out, rl_err *err);
rl_status rl_gguf_kv_f64(const rl_gguf *g, int64_t i, double *out, rl_err *err);
rl_status rl_gguf_kv_bool(const rl_gguf *g, int64_t i, bool *out, rl_err *err);
rl_status rl_gguf_kv_str(const rl_gguf *g, int64_t i, rl_gguf_str *out, rl_err *err);

/* By key, with a default when the key is absent (returns RL_OK then).
 * A present key of the wrong type is an error naming the key. */
rl_status rl_gguf_get_i64(const rl_gguf *g, const char *key, int64_t def, int64_t *out,
                          rl_err *err);
rl_status rl_gguf_get_f64(const rl_gguf *g, const char *key, double def, double *out, rl_err *err);
rl_status rl_gguf_get_bool(const rl_gguf *g, const char *key, bool def, bool *out, rl_err *err);
/* Absent key: out->ptr = NULL, out->len = 0, RL_OK. */
rl_status rl_gguf_get_str(const rl_gguf *g, const char *key, rl_gguf_str *out, rl_err *err);

/* ---- arrays (kv of type RL_GGUF_ARRAY) ---- */
/* Element type and count of array kv i; RL_ERR_FORMAT if i is not an array. */
rl_status rl_gguf_kv_arr(const rl_gguf *g, int64_t i, rl_gguf_vtype *elem_type, uint64_t *n,
                         rl_err *err);
/* Element j of a numeric/bool array kv i, converted (as the scalar getters). */
rl_status rl_gguf_arr_i64(const rl_gguf *g, int64_t i, uint64_t j, int64_t *out, rl_err *err);
rl_status rl_gguf_arr_f64(const rl_gguf *g, int64_t i, uint64_t j, double *out, rl_err *err);
/* Element j of a string array kv i (O(1): the reader indexes string arrays). */
rl_status rl_gguf_arr_str(const rl_gguf *g, int64_t i, uint64_t j, rl_gguf_str *out, rl_err *err);
/* Nested arrays: element j of array i is itself an array; its raw bytes are
 * exposed only for printing (rl_gguf_arr_nested).  Our models never need
 * nested values, so there are no typed getters for them. */
rl_status rl_gguf_arr_nested(const rl_gguf *g, int64_t i, uint64_t j, rl_gguf_vtype *elem_type,
                             uint64_t *n, rl_err *err);

/* ---- tensors ---- */
int64_t rl_gguf_n_tensors(const rl_gguf *g);
const rl_gguf_tensor *rl_gguf_tensor_at(const rl_gguf *g, int64_t i);
const rl_gguf_tensor *rl_gguf_find_tensor(const rl_gguf *g, const char *name); /* NULL if absent */

/* ---- writer (tests, tools, requantization) ----
 * Builds a file in memory: metadata and tensor descriptors are copied on
 * add; tensor data is borrowed until write.  Keys must be unique; adding a
 * duplicate key or tensor name is RL_ERR_INVALID. */
typedef struct rl_gguf_writer rl_gguf_writer;

rl_gguf_writer *rl_gguf_writer_new(void); /* NULL on OOM */
void rl_gguf_writer_free(rl_gguf_writer *w);
void rl_gguf_writer_set_alignment(rl_gguf_writer *w,
                                  uint32_t alignment); /* also writes general.alignment */

rl_status rl_gguf_writer_u8(rl_gguf_writer *w, const char *key, uint8_t v);
rl_status rl_gguf_writer_i8(rl_gguf_writer *w, const char *key, int8_t v);
rl_status rl_gguf_writer_u16(rl_gguf_writer *w, const char *key, uint16_t v);
rl_status rl_gguf_writer_i16(rl_gguf_writer *w, const char *key, int16_t v);
rl_status rl_gguf_writer_u32(rl_gguf_writer *w, const char *key, uint32_t v);
rl_status rl_gguf_writer_i32(rl_gguf_writer *w, const char *key, int32_t v);
rl_status rl_gguf_writer_u64(rl_gguf_writer *w, const char *key, uint64_t v);
rl_status rl_gguf_writer_i64(rl_gguf_writer *w, const char *key, int64_t v);
rl_status rl_gguf_writer_f32(rl_gguf_writer *w, const char *key, float v);
rl_status rl_gguf_writer_f64(rl_gguf_writer *w, const char *key, double v);
rl_status rl_gguf_writer_bool(rl_gguf_writer *w, const char *key, bool v);
rl_status rl_gguf_writer_str(rl_gguf_writer *w, const char *key, const char *s, size_t len);
/* Array of fixed-size elements (not STRING/ARRAY): `data` holds n elements
 * of elem_type, little-endian, copied. */
rl_status rl_gguf_writer_arr(rl_gguf_writer *w, const char *key, rl_gguf_vtype elem_type,
                             const void *data, uint64_t n);
/* Array of strings (copied). lens may be NULL for NUL-terminated strings. */
rl_status rl_gguf_writer_arr_str(rl_gguf_writer *w, const char *key, const char *const *strs,
                                 const size_t *lens, uint64_t n);
/* Adds a tensor; data (row_size * rows bytes) is borrowed until write. */
rl_status rl_gguf_writer_tensor(rl_gguf_writer *w, const char *name, rl_type type, uint32_t n_dims,
                                const int64_t *ne, const void *data);
/* Serializes to a malloc'd buffer (caller frees with rl_free) or a file. */
rl_status rl_gguf_writer_to_memory(rl_gguf_writer *w, void **out, size_t *out_size, rl_err *err);
rl_status rl_gguf_writer_to_file(rl_gguf_writer *w, const char *path, rl_err *err);

#endif
