/* GGUF reader/writer tests: random round-trips, hand-corrupted files, and
 * truncation at every byte of a header.  Run under ASan+UBSan in CI, so a
 * read past a buffer or a leak fails the test even where the reader
 * returned the right status. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/rng.h"
#include "gguf/gguf.h"

/* ---------- a tiny byte builder for hand-made (possibly broken) files ---------- */
typedef struct bb {
    uint8_t buf[1 << 16];
    size_t n;
} bb;

static void bb_put(bb *b, const void *p, size_t n) {
    assert_true(b->n + n <= sizeof b->buf);
    memcpy(b->buf + b->n, p, n);
    b->n += n;
}
static void bb_u8(bb *b, uint8_t v) {
    bb_put(b, &v, 1);
}
static void bb_u32(bb *b, uint32_t v) {
    bb_put(b, &v, 4);
}
static void bb_u64(bb *b, uint64_t v) {
    bb_put(b, &v, 8);
}
static void bb_str(bb *b, const char *s) {
    bb_u64(b, strlen(s));
    bb_put(b, s, strlen(s));
}
static void bb_hdr(bb *b, uint64_t n_tensors, uint64_t n_kv) {
    b->n = 0;
    bb_u32(b, RL_GGUF_MAGIC);
    bb_u32(b, 3);
    bb_u64(b, n_tensors);
    bb_u64(b, n_kv);
}
static void bb_kv_u32(bb *b, const char *k, uint32_t v) {
    bb_str(b, k);
    bb_u32(b, RL_GGUF_UINT32);
    bb_u32(b, v);
}
static void bb_tensor(bb *b, const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t type,
                      uint64_t off) {
    bb_str(b, name);
    bb_u32(b, n_dims);
    for (uint32_t d = 0; d < n_dims; d++) bb_u64(b, ne[d]);
    bb_u32(b, type);
    bb_u64(b, off);
}
static void bb_pad(bb *b, size_t align) {
    while (b->n % align) bb_u8(b, 0);
}
static void bb_zeros(bb *b, size_t n) {
    for (size_t i = 0; i < n; i++) bb_u8(b, 0);
}

/* Opens b and expects failure with `code` and `needle` in the message. */
static void expect_err(const bb *b, rl_status code, const char *needle) {
    rl_gguf *g = (rl_gguf *)0x1;
    rl_err err = {0};
    rl_status s = rl_gguf_open_memory(b->buf, b->n, &g, &err);
    if (s != code || !strstr(err.msg, needle))
        fail_msg("expected status %d with '%s', got %d: '%s'", code, needle, s, err.msg);
    assert_null(g);
}

static rl_gguf *expect_ok(const bb *b) {
    rl_gguf *g = NULL;
    rl_err err = {0};
    rl_status s = rl_gguf_open_memory(b->buf, b->n, &g, &err);
    if (s) fail_msg("expected success, got %d: %s", s, err.msg);
    return g;
}

/* A small valid file: 2 kvs, 2 tensors.  Returns the header length. */
static size_t make_valid(bb *b) {
    bb_hdr(b, 2, 2);
    bb_str(b, "general.architecture");
    bb_u32(b, RL_GGUF_STRING);
    bb_str(b, "llama");
    bb_str(b, "tok.list");
    bb_u32(b, RL_GGUF_ARRAY);
    bb_u32(b, RL_GGUF_STRING);
    bb_u64(b, 3);
    bb_str(b, "a");
    bb_str(b, "bc");
    bb_str(b, "");
    uint64_t ne1[2] = {32, 2}, ne2[1] = {8};
    bb_tensor(b, "w", 2, ne1, RL_TYPE_Q8_0, 0);
    bb_tensor(b, "n", 1, ne2, RL_TYPE_F32, 96);
    size_t hdr = b->n;
    bb_pad(b, 32);
    bb_zeros(b, 96 + 32);
    return hdr;
}

static void test_valid_small(void **state) {
    (void)state;
    bb b;
    make_valid(&b);
    rl_gguf *g = expect_ok(&b);
    assert_int_equal(rl_gguf_n_kv(g), 2);
    assert_int_equal(rl_gguf_n_tensors(g), 2);
    rl_gguf_str s;
    assert_int_equal(rl_gguf_get_str(g, "general.architecture", &s, NULL), RL_OK);
    assert_int_equal(s.len, 5);
    assert_memory_equal(s.ptr, "llama", 5);
    int64_t i = rl_gguf_find_key(g, "tok.list");
    assert_true(i >= 0);
    assert_int_equal(rl_gguf_arr_str(g, i, 1, &s, NULL), RL_OK);
    assert_int_equal(s.len, 2);
    assert_memory_equal(s.ptr, "bc", 2);
    assert_int_equal(rl_gguf_arr_str(g, i, 2, &s, NULL), RL_OK);
    assert_int_equal(s.len, 0);
    rl_err err = {0};
    assert_int_equal(rl_gguf_arr_str(g, i, 3, &s, &err), RL_ERR_RANGE);
    const rl_gguf_tensor *t = rl_gguf_find_tensor(g, "w");
    assert_non_null(t);
    assert_int_equal(t->nbytes, 68);
    assert_int_equal(t->ne[1], 2);
    assert_null(rl_gguf_find_tensor(g, "missing"));
    /* wrong-type getter names the key */
    int64_t v;
    assert_int_equal(rl_gguf_get_i64(g, "general.architecture", 0, &v, &err), RL_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "general.architecture"));
    /* absent key gives the default */
    assert_int_equal(rl_gguf_get_i64(g, "nope", 42, &v, NULL), RL_OK);
    assert_int_equal(v, 42);
    rl_gguf_close(g);
}

/* Every prefix of the valid file's header must be rejected cleanly. */
static void test_truncated_every_byte(void **state) {
    (void)state;
    bb b;
    size_t hdr = make_valid(&b);
    size_t full = b.n;
    for (size_t n = 0; n < full; n++) {
        rl_gguf *g = NULL;
        rl_err err = {0};
        rl_status s = rl_gguf_open_memory(b.buf, n, &g, &err);
        if (n < hdr || n < full) {
            if (s == RL_OK) fail_msg("truncation at %zu of %zu accepted", n, full);
            assert_true(strlen(err.msg) > 0);
        }
        rl_gguf_close(g);
    }
}

static void test_corrupt_header(void **state) {
    (void)state;
    bb b;
    /* 1 bad magic */
    make_valid(&b);
    b.buf[0] = 'X';
    expect_err(&b, RL_ERR_FORMAT, "magic");
    /* 2 version 1 */
    make_valid(&b);
    b.buf[4] = 1;
    expect_err(&b, RL_ERR_UNSUPPORTED, "version");
    /* 3 version 99 */
    make_valid(&b);
    b.buf[4] = 99;
    expect_err(&b, RL_ERR_UNSUPPORTED, "version");
    /* 4 big-endian version */
    make_valid(&b);
    b.buf[4] = 0;
    b.buf[7] = 3;
    expect_err(&b, RL_ERR_UNSUPPORTED, "big-endian");
    /* 5 huge tensor count */
    bb_hdr(&b, UINT64_MAX, 0);
    expect_err(&b, RL_ERR_FORMAT, "n_tensors");
    /* 6 huge kv count */
    bb_hdr(&b, 0, 1ull << 40);
    expect_err(&b, RL_ERR_FORMAT, "n_kv");
    /* 7 empty file */
    b.n = 0;
    expect_err(&b, RL_ERR_FORMAT, "magic");
    /* 8 file of 3 bytes */
    b.n = 3;
    expect_err(&b, RL_ERR_FORMAT, "magic");
}

static void test_corrupt_kv(void **state) {
    (void)state;
    bb b;
    /* 9 key length past the end */
    bb_hdr(&b, 0, 1);
    bb_u64(&b, 1000);
    bb_put(&b, "abc", 3);
    bb_zeros(&b, 40);
    expect_err(&b, RL_ERR_FORMAT, "past the end");
    /* 10 key length huge */
    bb_hdr(&b, 0, 1);
    bb_u64(&b, UINT64_MAX);
    bb_zeros(&b, 16);
    expect_err(&b, RL_ERR_FORMAT, "limit");
    /* 11 empty key */
    bb_hdr(&b, 0, 1);
    bb_str(&b, "");
    bb_u32(&b, RL_GGUF_UINT8);
    bb_u8(&b, 1);
    bb_zeros(&b, 8);
    expect_err(&b, RL_ERR_FORMAT, "empty key");
    /* 12 unknown value type */
    bb_hdr(&b, 0, 1);
    bb_str(&b, "k");
    bb_u32(&b, 77);
    bb_zeros(&b, 8);
    expect_err(&b, RL_ERR_FORMAT, "unknown value type 77");
    /* 13 string value length past the end */
    bb_hdr(&b, 0, 1);
    bb_str(&b, "k");
    bb_u32(&b, RL_GGUF_STRING);
    bb_u64(&b, 1ull << 62);
    expect_err(&b, RL_ERR_FORMAT, "past the end");
    /* 14 array length past the end */
    bb_hdr(&b, 0, 1);
    bb_str(&b, "k");
    bb_u32(&b, RL_GGUF_ARRAY);
    bb_u32(&b, RL_GGUF_UINT32);
    bb_u64(&b, 1ull << 61);
    expect_err(&b, RL_ERR_FORMAT, "array length");
    /* 15 string array, count past the end */
    bb_hdr(&b, 0, 1);
    bb_str(&b, "k");
    bb_u32(&b, RL_GGUF_ARRAY);
    bb_u32(&b, RL_GGUF_STRING);
    bb_u64(&b, 100);
    bb_str(&b, "x");
    expect_err(&b, RL_ERR_FORMAT, "array length");
    /* 16 array of unknown element type */
    bb_hdr(&b, 0, 1);
    bb_str(&b, "k");
    bb_u32(&b, RL_GGUF_ARRAY);
    bb_u32(&b, 200);
    bb_u64(&b, 0);
    expect_err(&b, RL_ERR_FORMAT, "unknown element type");
    /* 17 nested arrays too deep */
    bb_hdr(&b, 0, 1);
    bb_str(&b, "k");
    bb_u32(&b, RL_GGUF_ARRAY);
    for (int d = 0; d < 12; d++) {
        bb_u32(&b, RL_GGUF_ARRAY);
        bb_u64(&b, 1);
    }
    bb_u32(&b, RL_GGUF_UINT8);
    bb_u64(&b, 0);
    bb_zeros(&b, 64);
    expect_err(&b, RL_ERR_FORMAT, "nested");
    /* 18 duplicate key */
    bb_hdr(&b, 0, 2);
    bb_kv_u32(&b, "dup", 1);
    bb_kv_u32(&b, "dup", 2);
    expect_err(&b, RL_ERR_FORMAT, "duplicate key 'dup'");
    /* 19 known key with the wrong type */
    bb_hdr(&b, 0, 1);
    bb_str(&b, "general.alignment");
    bb_u32(&b, RL_GGUF_STRING);
    bb_str(&b, "32");
    expect_err(&b, RL_ERR_FORMAT, "general.alignment");
    /* 20 alignment 0 */
    bb_hdr(&b, 0, 1);
    bb_kv_u32(&b, "general.alignment", 0);
    expect_err(&b, RL_ERR_FORMAT, "power of two");
    /* 21 alignment not a power of two */
    bb_hdr(&b, 0, 1);
    bb_kv_u32(&b, "general.alignment", 48);
    expect_err(&b, RL_ERR_FORMAT, "power of two");
    /* 22 bool that is not 0/1 */
    bb_hdr(&b, 0, 1);
    bb_str(&b, "flag");
    bb_u32(&b, RL_GGUF_BOOL);
    bb_u8(&b, 7);
    expect_err(&b, RL_ERR_FORMAT, "bool");
    /* 23 key containing NUL */
    bb_hdr(&b, 0, 1);
    bb_u64(&b, 3);
    bb_put(&b, "a\0b", 3);
    bb_u32(&b, RL_GGUF_UINT8);
    bb_u8(&b, 0);
    bb_zeros(&b, 8);
    expect_err(&b, RL_ERR_FORMAT, "NUL");
    /* 24 valid nested array is accepted and readable */
    bb_hdr(&b, 0, 1);
    bb_str(&b, "nest");
    bb_u32(&b, RL_GGUF_ARRAY);
    bb_u32(&b, RL_GGUF_ARRAY);
    bb_u64(&b, 2);
    bb_u32(&b, RL_GGUF_UINT16);
    bb_u64(&b, 1);
    uint16_t v16 = 7;
    bb_put(&b, &v16, 2);
    bb_u32(&b, RL_GGUF_STRING);
    bb_u64(&b, 1);
    bb_str(&b, "hi");
    rl_gguf *g = expect_ok(&b);
    rl_gguf_vtype et;
    uint64_t n;
    assert_int_equal(rl_gguf_arr_nested(g, 0, 1, &et, &n, NULL), RL_OK);
    assert_int_equal(et, RL_GGUF_STRING);
    assert_int_equal(n, 1);
    rl_gguf_close(g);
}

static void test_corrupt_tensors(void **state) {
    (void)state;
    bb b;
    uint64_t ne[5] = {32, 2, 1, 1, 1};
    /* 25 n_dims 5 */
    bb_hdr(&b, 1, 0);
    bb_tensor(&b, "t", 5, ne, RL_TYPE_F32, 0);
    expect_err(&b, RL_ERR_FORMAT, "n_dims 5");
    /* 26 n_dims 0 */
    bb_hdr(&b, 1, 0);
    bb_tensor(&b, "t", 0, ne, RL_TYPE_F32, 0);
    bb_zeros(&b, 16);
    expect_err(&b, RL_ERR_FORMAT, "n_dims 0");
    /* 27 zero dimension */
    uint64_t nz[2] = {32, 0};
    bb_hdr(&b, 1, 0);
    bb_tensor(&b, "t", 2, nz, RL_TYPE_F32, 0);
    expect_err(&b, RL_ERR_FORMAT, "must be positive");
    /* 28 negative dimension */
    uint64_t nn[2] = {32, (uint64_t)-5};
    bb_hdr(&b, 1, 0);
    bb_tensor(&b, "t", 2, nn, RL_TYPE_F32, 0);
    expect_err(&b, RL_ERR_FORMAT, "must be positive");
    /* 29 overflowing element count */
    uint64_t no[3] = {1ull << 32, 1ull << 32, 4};
    bb_hdr(&b, 1, 0);
    bb_tensor(&b, "t", 3, no, RL_TYPE_F32, 0);
    expect_err(&b, RL_ERR_FORMAT, "overflow");
    /* 30 unknown tensor type (37: a gap in the GGUF ids; 39 is mxfp4) */
    bb_hdr(&b, 1, 0);
    bb_tensor(&b, "t", 2, ne, 37, 0);
    expect_err(&b, RL_ERR_FORMAT, "unknown tensor type 37");
    /* 30b redline's own type ids (KV pages) are not GGUF types */
    bb_hdr(&b, 1, 0);
    bb_tensor(&b, "t", 2, ne, RL_TYPE_Q8_64, 0);
    expect_err(&b, RL_ERR_FORMAT, "unknown tensor type 40");
    /* 31 ne[0] not a multiple of the block size */
    uint64_t nb[1] = {33};
    bb_hdr(&b, 1, 0);
    bb_tensor(&b, "t", 1, nb, RL_TYPE_Q4_0, 0);
    expect_err(&b, RL_ERR_FORMAT, "block size");
    /* 32 data past the end */
    bb_hdr(&b, 1, 0);
    bb_tensor(&b, "t", 2, ne, RL_TYPE_F32, 0);
    bb_pad(&b, 32);
    bb_zeros(&b, 100); /* needs 256 */
    expect_err(&b, RL_ERR_FORMAT, "past the end");
    /* 33 offset not aligned */
    bb_hdr(&b, 1, 0);
    bb_tensor(&b, "t", 1, ne, RL_TYPE_F32, 4);
    bb_pad(&b, 32);
    bb_zeros(&b, 256);
    expect_err(&b, RL_ERR_FORMAT, "not a multiple of the alignment");
    /* 34 overlapping tensors */
    bb_hdr(&b, 2, 0);
    bb_tensor(&b, "a", 1, ne, RL_TYPE_F32, 0);  /* 128 bytes */
    bb_tensor(&b, "b", 1, ne, RL_TYPE_F32, 64); /* overlaps a */
    bb_pad(&b, 32);
    bb_zeros(&b, 512);
    expect_err(&b, RL_ERR_FORMAT, "overlaps");
    /* 35 duplicate tensor name */
    bb_hdr(&b, 2, 0);
    bb_tensor(&b, "same", 1, ne, RL_TYPE_F32, 0);
    bb_tensor(&b, "same", 1, ne, RL_TYPE_F32, 128);
    bb_pad(&b, 32);
    bb_zeros(&b, 512);
    expect_err(&b, RL_ERR_FORMAT, "duplicate tensor name 'same'");
    /* 36 empty tensor name */
    bb_hdr(&b, 1, 0);
    bb_tensor(&b, "", 1, ne, RL_TYPE_F32, 0);
    bb_zeros(&b, 16);
    expect_err(&b, RL_ERR_FORMAT, "name is empty");
    /* 37 offset huge (overflow in data start + offset) */
    bb_hdr(&b, 1, 0);
    bb_tensor(&b, "t", 1, ne, RL_TYPE_F32, UINT64_MAX - 31);
    bb_pad(&b, 32);
    bb_zeros(&b, 256);
    expect_err(&b, RL_ERR_FORMAT, "past the end");
    /* 38 data section missing entirely */
    bb_hdr(&b, 1, 0);
    bb_tensor(&b, "t", 1, ne, RL_TYPE_F32, 0);
    bb_u8(&b, 0);
    expect_err(&b, RL_ERR_FORMAT, "past the end");
    /* 39 a custom alignment is honoured */
    bb_hdr(&b, 1, 1);
    bb_kv_u32(&b, "general.alignment", 64);
    bb_tensor(&b, "t", 1, ne, RL_TYPE_F32, 0);
    bb_pad(&b, 64);
    bb_zeros(&b, 128);
    rl_gguf *g = expect_ok(&b);
    assert_int_equal(rl_gguf_alignment(g), 64);
    assert_int_equal(rl_gguf_data_offset(g) % 64, 0);
    rl_gguf_close(g);
}

/* ---------- random round trips through the writer ---------- */
typedef struct rkv {
    char key[32];
    rl_gguf_vtype t, et;
    uint8_t raw[8];
    char str[24];
    uint64_t n;
    uint8_t arr[64 * 8];
    char strs[8][16];
} rkv;

static void test_roundtrip_random(void **state) {
    (void)state;
    rl_rng rng;
    rl_rng_seed(&rng, 1234);
    static const rl_type ttypes[] = {RL_TYPE_F32,  RL_TYPE_F16,  RL_TYPE_BF16, RL_TYPE_Q4_0,
                                     RL_TYPE_Q4_1, RL_TYPE_Q5_0, RL_TYPE_Q5_1, RL_TYPE_Q8_0,
                                     RL_TYPE_Q2_K, RL_TYPE_Q3_K, RL_TYPE_Q4_K, RL_TYPE_Q5_K,
                                     RL_TYPE_Q6_K, RL_TYPE_Q8_K};
    for (int iter = 0; iter < 120; iter++) {
        rl_gguf_writer *w = rl_gguf_writer_new();
        assert_non_null(w);
        uint32_t align = 1u << (3 + rl_rng_u64(&rng) % 4); /* 8..64 */
        if (iter % 3 == 0)
            rl_gguf_writer_set_alignment(w, align);
        else
            align = RL_GGUF_DEFAULT_ALIGNMENT;
        int n_kv = (int)(rl_rng_u64(&rng) % 14);
        rkv *kvs = calloc((size_t)n_kv, sizeof *kvs);
        for (int k = 0; k < n_kv; k++) {
            rkv *r = &kvs[k];
            snprintf(r->key, sizeof r->key, "key.%d.%d", iter, k);
            r->t = (rl_gguf_vtype)(rl_rng_u64(&rng) % RL_GGUF_VTYPE_COUNT);
            for (int j = 0; j < 8; j++) r->raw[j] = (uint8_t)rl_rng_u64(&rng);
            if (r->t == RL_GGUF_BOOL) r->raw[0] &= 1;
            rl_status s;
            switch (r->t) {
            case RL_GGUF_UINT8:
                s = rl_gguf_writer_u8(w, r->key, r->raw[0]);
                break;
            case RL_GGUF_INT8:
                s = rl_gguf_writer_i8(w, r->key, (int8_t)r->raw[0]);
                break;
            case RL_GGUF_UINT16: {
                uint16_t v;
                memcpy(&v, r->raw, 2);
                s = rl_gguf_writer_u16(w, r->key, v);
                break;
            }
            case RL_GGUF_INT16: {
                int16_t v;
                memcpy(&v, r->raw, 2);
                s = rl_gguf_writer_i16(w, r->key, v);
                break;
            }
            case RL_GGUF_UINT32: {
                uint32_t v;
                memcpy(&v, r->raw, 4);
                s = rl_gguf_writer_u32(w, r->key, v);
                break;
            }
            case RL_GGUF_INT32: {
                int32_t v;
                memcpy(&v, r->raw, 4);
                s = rl_gguf_writer_i32(w, r->key, v);
                break;
            }
            case RL_GGUF_UINT64:
                r->raw[7] &= 0x7f; /* keep it int64-readable */
                {
                    uint64_t v;
                    memcpy(&v, r->raw, 8);
                    s = rl_gguf_writer_u64(w, r->key, v);
                    break;
                }
            case RL_GGUF_INT64: {
                int64_t v;
                memcpy(&v, r->raw, 8);
                s = rl_gguf_writer_i64(w, r->key, v);
                break;
            }
            case RL_GGUF_FLOAT32: {
                float v = (float)rl_rng_f64(&rng) * 100.f - 50.f;
                memcpy(r->raw, &v, 4);
                s = rl_gguf_writer_f32(w, r->key, v);
                break;
            }
            case RL_GGUF_FLOAT64: {
                double v = rl_rng_f64(&rng) * 1e6;
                memcpy(r->raw, &v, 8);
                s = rl_gguf_writer_f64(w, r->key, v);
                break;
            }
            case RL_GGUF_BOOL:
                s = rl_gguf_writer_bool(w, r->key, r->raw[0]);
                break;
            case RL_GGUF_STRING:
                snprintf(r->str, sizeof r->str, "s%llu",
                         (unsigned long long)rl_rng_u64(&rng) % 100000);
                s = rl_gguf_writer_str(w, r->key, r->str, strlen(r->str));
                break;
            default: /* ARRAY */
                r->n = rl_rng_u64(&rng) % 9;
                if (rl_rng_u64(&rng) % 3 == 0) {
                    r->et = RL_GGUF_STRING;
                    const char *ptrs[8];
                    for (uint64_t j = 0; j < r->n; j++) {
                        snprintf(r->strs[j], sizeof r->strs[j], "e%llu",
                                 (unsigned long long)(rl_rng_u64(&rng) % 1000));
                        ptrs[j] = r->strs[j];
                    }
                    s = rl_gguf_writer_arr_str(w, r->key, ptrs, NULL, r->n);
                } else {
                    static const rl_gguf_vtype ets[] = {
                        RL_GGUF_UINT8,   RL_GGUF_INT16, RL_GGUF_INT32,  RL_GGUF_UINT32,
                        RL_GGUF_FLOAT32, RL_GGUF_INT64, RL_GGUF_FLOAT64};
                    r->et = ets[rl_rng_u64(&rng) % 7];
                    for (size_t j = 0; j < sizeof r->arr; j++)
                        r->arr[j] = (uint8_t)(rl_rng_u64(&rng) % 100);
                    s = rl_gguf_writer_arr(w, r->key, r->et, r->arr, r->n);
                }
            }
            assert_int_equal(s, RL_OK);
        }
        /* duplicate key is refused by the writer */
        if (n_kv) assert_int_equal(rl_gguf_writer_u8(w, kvs[0].key, 1), RL_ERR_INVALID);
        int n_t = (int)(rl_rng_u64(&rng) % 6);
        void *tdata[6];
        int64_t tne[6][4];
        rl_type tty[6];
        uint32_t tdims[6];
        size_t tbytes[6];
        for (int t = 0; t < n_t; t++) {
            tty[t] = ttypes[rl_rng_u64(&rng) % (sizeof ttypes / sizeof ttypes[0])];
            const rl_type_traits *tr = rl_type_get(tty[t]);
            tdims[t] = 1 + (uint32_t)(rl_rng_u64(&rng) % 4);
            tne[t][0] = tr->blck_size * (int64_t)(1 + rl_rng_u64(&rng) % 3);
            size_t rows = 1;
            for (uint32_t d = 1; d < tdims[t]; d++) {
                tne[t][d] = 1 + (int64_t)(rl_rng_u64(&rng) % 3);
                rows *= (size_t)tne[t][d];
            }
            tbytes[t] = rl_type_row_size(tty[t], tne[t][0]) * rows;
            tdata[t] = malloc(tbytes[t]);
            for (size_t j = 0; j < tbytes[t]; j++)
                ((uint8_t *)tdata[t])[j] = (uint8_t)rl_rng_u64(&rng);
            char name[32];
            snprintf(name, sizeof name, "blk.%d.weight", t);
            assert_int_equal(rl_gguf_writer_tensor(w, name, tty[t], tdims[t], tne[t], tdata[t]),
                             RL_OK);
        }
        void *buf;
        size_t size;
        rl_err err = {0};
        assert_int_equal(rl_gguf_writer_to_memory(w, &buf, &size, &err), RL_OK);
        rl_gguf *g = NULL;
        if (rl_gguf_open_memory(buf, size, &g, &err)) fail_msg("iter %d: %s", iter, err.msg);
        assert_int_equal(rl_gguf_alignment(g), align);
        assert_int_equal(rl_gguf_n_kv(g),
                         n_kv + (align != RL_GGUF_DEFAULT_ALIGNMENT || iter % 3 == 0 ? 1 : 0));
        for (int k = 0; k < n_kv; k++) {
            rkv *r = &kvs[k];
            int64_t i = rl_gguf_find_key(g, r->key);
            assert_true(i >= 0);
            assert_int_equal(rl_gguf_kv_type(g, i), r->t);
            if (r->t == RL_GGUF_STRING) {
                rl_gguf_str s;
                assert_int_equal(rl_gguf_kv_str(g, i, &s, NULL), RL_OK);
                assert_int_equal(s.len, strlen(r->str));
                assert_memory_equal(s.ptr, r->str, s.len);
            } else if (r->t == RL_GGUF_ARRAY) {
                rl_gguf_vtype et;
                uint64_t n;
                assert_int_equal(rl_gguf_kv_arr(g, i, &et, &n, NULL), RL_OK);
                assert_int_equal(et, r->et);
                assert_int_equal(n, r->n);
                for (uint64_t j = 0; j < n; j++) {
                    if (et == RL_GGUF_STRING) {
                        rl_gguf_str s;
                        assert_int_equal(rl_gguf_arr_str(g, i, j, &s, NULL), RL_OK);
                        assert_int_equal(s.len, strlen(r->strs[j]));
                        assert_memory_equal(s.ptr, r->strs[j], s.len);
                    } else if (et == RL_GGUF_FLOAT32 || et == RL_GGUF_FLOAT64) {
                        double v, want;
                        assert_int_equal(rl_gguf_arr_f64(g, i, j, &v, NULL), RL_OK);
                        if (et == RL_GGUF_FLOAT32) {
                            float f;
                            memcpy(&f, r->arr + j * 4, 4);
                            want = f;
                        } else
                            memcpy(&want, r->arr + j * 8, 8);
                        assert_true(v == want || (isnan(v) && isnan(want)));
                    } else {
                        int64_t v, want = 0;
                        assert_int_equal(rl_gguf_arr_i64(g, i, j, &v, NULL), RL_OK);
                        switch (et) {
                        case RL_GGUF_UINT8:
                            want = r->arr[j];
                            break;
                        case RL_GGUF_INT16: {
                            int16_t x;
                            memcpy(&x, r->arr + j * 2, 2);
                            want = x;
                            break;
                        }
                        case RL_GGUF_INT32: {
                            int32_t x;
                            memcpy(&x, r->arr + j * 4, 4);
                            want = x;
                            break;
                        }
                        case RL_GGUF_UINT32: {
                            uint32_t x;
                            memcpy(&x, r->arr + j * 4, 4);
                            want = x;
                            break;
                        }
                        default: {
                            int64_t x;
                            memcpy(&x, r->arr + j * 8, 8);
                            want = x;
                            break;
                        }
                        }
                        assert_int_equal(v, want);
                    }
                }
            } else if (r->t == RL_GGUF_FLOAT32 || r->t == RL_GGUF_FLOAT64) {
                double v, want;
                assert_int_equal(rl_gguf_kv_f64(g, i, &v, NULL), RL_OK);
                if (r->t == RL_GGUF_FLOAT32) {
                    float f;
                    memcpy(&f, r->raw, 4);
                    want = f;
                } else
                    memcpy(&want, r->raw, 8);
                assert_true(v == want);
            } else if (r->t == RL_GGUF_BOOL) {
                bool v;
                assert_int_equal(rl_gguf_kv_bool(g, i, &v, NULL), RL_OK);
                assert_int_equal(v, r->raw[0]);
            } else {
                int64_t v, want;
                assert_int_equal(rl_gguf_kv_i64(g, i, &v, NULL), RL_OK);
                switch (r->t) {
                case RL_GGUF_UINT8:
                    want = r->raw[0];
                    break;
                case RL_GGUF_INT8:
                    want = (int8_t)r->raw[0];
                    break;
                case RL_GGUF_UINT16: {
                    uint16_t x;
                    memcpy(&x, r->raw, 2);
                    want = x;
                    break;
                }
                case RL_GGUF_INT16: {
                    int16_t x;
                    memcpy(&x, r->raw, 2);
                    want = x;
                    break;
                }
                case RL_GGUF_UINT32: {
                    uint32_t x;
                    memcpy(&x, r->raw, 4);
                    want = x;
                    break;
                }
                case RL_GGUF_INT32: {
                    int32_t x;
                    memcpy(&x, r->raw, 4);
                    want = x;
                    break;
                }
                default:
                    memcpy(&want, r->raw, 8);
                    break;
                }
                assert_int_equal(v, want);
            }
        }
        assert_int_equal(rl_gguf_n_tensors(g), n_t);
        for (int t = 0; t < n_t; t++) {
            const rl_gguf_tensor *gt = rl_gguf_tensor_at(g, t);
            assert_int_equal(gt->type, tty[t]);
            assert_int_equal(gt->n_dims, tdims[t]);
            for (uint32_t d = 0; d < tdims[t]; d++) assert_int_equal(gt->ne[d], tne[t][d]);
            assert_int_equal(gt->nbytes, tbytes[t]);
            assert_int_equal(gt->offset % align, 0);
            assert_memory_equal(gt->data, tdata[t], tbytes[t]);
            free(tdata[t]);
        }
        rl_gguf_close(g);
        rl_free(buf);
        rl_gguf_writer_free(w);
        free(kvs);
    }
}

/* Allocation failure at every point of an open must be a clean error. */
static void test_alloc_failure(void **state) {
    (void)state;
    bb b;
    make_valid(&b);
    for (long k = 0; k < 40; k++) {
        rl_alloc_fail_after(k);
        rl_gguf *g = NULL;
        rl_err err = {0};
        rl_status s = rl_gguf_open_memory(b.buf, b.n, &g, &err);
        rl_alloc_fail_after(-1);
        if (s == RL_OK) {
            rl_gguf_close(g);
            return; /* enough allocations succeeded */
        }
        assert_int_equal(s, RL_ERR_NOMEM);
        assert_null(g);
    }
    fail_msg("open never succeeded within 40 allocations");
}

static void test_file_errors(void **state) {
    (void)state;
    rl_gguf *g = NULL;
    rl_err err = {0};
    assert_int_equal(rl_gguf_open("/nonexistent/x.gguf", &g, &err), RL_ERR_IO);
    assert_non_null(strstr(err.msg, "/nonexistent/x.gguf"));
    assert_int_equal(rl_gguf_open("/tmp", &g, &err), RL_ERR_IO);
    assert_null(g);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid_small),     cmocka_unit_test(test_truncated_every_byte),
        cmocka_unit_test(test_corrupt_header),  cmocka_unit_test(test_corrupt_kv),
        cmocka_unit_test(test_corrupt_tensors), cmocka_unit_test(test_roundtrip_random),
        cmocka_unit_test(test_alloc_failure),   cmocka_unit_test(test_file_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
