/* Internals of the GGUF reader, shared by gguf.c (parse), gguf_get.c
 * (typed getters) and gguf_write.c.  Only src/gguf/ includes this. */
#ifndef RL_GGUF_IMPL_H
#define RL_GGUF_IMPL_H

#include "gguf/gguf.h"

typedef struct rl__gguf_kv {
    char *key;        /* NUL-terminated copy */
    uint32_t type;    /* rl_gguf_vtype */
    uint64_t key_off; /* file offset of the key's length field */
    uint64_t val_off; /* file offset of the value */
    /* arrays only: */
    uint32_t arr_type;   /* element type */
    uint64_t arr_n;      /* element count */
    uint64_t arr_data;   /* file offset of element 0 */
    uint64_t *arr_index; /* [arr_n] element offsets for string/array elements, else NULL */
} rl__gguf_kv;

typedef struct {
    int64_t *slot; /* index+1, 0 = empty */
    size_t cap;
} rl__gguf_strset;

struct rl_gguf {
    const uint8_t *base; /* mapping or caller buffer */
    size_t size;
    bool mapped;
    uint32_t version;
    uint64_t n_kv, n_tensors;
    uint64_t n_kv_parsed, n_tensors_parsed; /* how many names to free */
    rl__gguf_kv *kv;                        /* [n_kv] */
    rl_gguf_tensor *tensors;                /* [n_tensors] */
    rl__gguf_strset kv_set, tensor_set;
    size_t alignment;
    uint64_t data_offset;
};

size_t rl__gguf_vtype_size(uint32_t t); /* 0 for string/array/unknown */

#endif
