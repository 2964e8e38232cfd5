/* Unit tests for the shared base helpers: rl_buf and rl_grow (base/buf.h),
 * rl_heap (base/heap.h), the UTF-8 helpers (base/utf8.h) and rl_mix64 /
 * rl_hash_bytes (base/hash.h).  Every check asserts an exact value. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <string.h>

#include "base/base.h"
#include "base/buf.h"
#include "base/hash.h"
#include "base/heap.h"
#include "base/rng.h"
#include "base/utf8.h"

/* ------------------------------------------------------------------ buf */

static void test_buf_append(void **state) {
    (void)state;
    rl_buf b = {0};
    assert_null(b.p);
    assert_int_equal(rl_buf_append(&b, "abc", 3), RL_OK);
    assert_int_equal(rl_buf_putc(&b, '-'), RL_OK);
    assert_int_equal(rl_buf_puts(&b, "xyz"), RL_OK);
    assert_int_equal(rl_buf_printf(&b, "[%d|%s|%04x]", -12, "q", 0xbeef), RL_OK);
    assert_int_equal(rl_buf_append(&b, NULL, 0), RL_OK);
    assert_int_equal(b.n, 19);
    assert_string_equal(b.p, "abc-xyz[-12|q|beef]");
    assert_true(b.cap > b.n);
    /* embedded NUL: length counts it, the terminator follows */
    assert_int_equal(rl_buf_append(&b, "\0z", 2), RL_OK);
    assert_int_equal(b.n, 21);
    assert_int_equal(memcmp(b.p + 19, "\0z\0", 3), 0);
    rl_buf_clear(&b);
    assert_int_equal(b.n, 0);
    assert_string_equal(b.p, "");
    rl_buf_free(&b);
    assert_null(b.p);
    assert_int_equal(b.cap, 0);
}

static void test_buf_growth_and_long_printf(void **state) {
    (void)state;
    rl_buf b = {0};
    /* 1000 appends of 7 bytes: every byte where it belongs */
    for (int i = 0; i < 1000; i++) assert_int_equal(rl_buf_printf(&b, "%06d,", i), RL_OK);
    assert_int_equal(b.n, 7000);
    assert_int_equal(memcmp(b.p, "000000,000001,", 14), 0);
    assert_int_equal(memcmp(b.p + 6993, "000999,", 7), 0);
    assert_int_equal(b.p[7000], 0);
    /* a formatted piece longer than the internal stack piece */
    rl_buf c = {0};
    char big[1000];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = 0;
    assert_int_equal(rl_buf_printf(&c, "<%s>%d", big, 7), RL_OK);
    assert_int_equal(c.n, 1002); /* '<', 999 x, '>', '7' */
    assert_int_equal(c.p[0], '<');
    assert_int_equal(c.p[1], 'x');
    assert_int_equal(c.p[999], 'x');
    assert_int_equal(c.p[1000], '>');
    assert_int_equal(c.p[1001], '7');
    assert_int_equal(c.p[1002], 0);
    size_t len = 0;
    char *s = rl_buf_take(&c, &len);
    assert_int_equal(len, 1002);
    assert_null(c.p);
    assert_int_equal(c.n, 0);
    assert_int_equal(s[1001], '7');
    rl_free(s);
    rl_buf_free(&b);
}

static void test_buf_take_empty(void **state) {
    (void)state;
    rl_buf b = {0};
    size_t len = 99;
    char *s = rl_buf_take(&b, &len);
    assert_non_null(s);
    assert_int_equal(len, 0);
    assert_string_equal(s, "");
    rl_free(s);
    /* reserve alone makes an empty C string */
    assert_int_equal(rl_buf_reserve(&b, 100), RL_OK);
    assert_true(b.cap >= 101);
    assert_string_equal(b.p, "");
    char *before = b.p;
    for (int i = 0; i < 100; i++) assert_int_equal(rl_buf_putc(&b, 'a'), RL_OK);
    assert_ptr_equal(b.p, before); /* reserved: no reallocation */
    rl_buf_free(&b);
}

static void test_buf_overflow_and_nomem(void **state) {
    (void)state;
    rl_buf b = {0};
    assert_int_equal(rl_buf_puts(&b, "keep"), RL_OK);
    char *p = b.p;
    size_t cap = b.cap;
    /* n + extra + 1 overflows size_t: refused, buffer untouched */
    assert_int_equal(rl_buf_reserve(&b, SIZE_MAX - 4), RL_ERR_LIMIT);
    assert_int_equal(rl_buf_reserve(&b, SIZE_MAX), RL_ERR_LIMIT);
    assert_int_equal(rl_buf_append(&b, "x", SIZE_MAX - 3), RL_ERR_LIMIT);
    assert_ptr_equal(b.p, p);
    assert_int_equal(b.cap, cap);
    assert_int_equal(b.n, 4);
    /* allocation failure: contents kept */
    char more[200];
    memset(more, 'm', sizeof more);
    rl_alloc_fail_after(0);
    assert_int_equal(rl_buf_append(&b, more, sizeof more), RL_ERR_NOMEM);
    assert_int_equal(rl_buf_printf(&b, "%200s", "y"), RL_ERR_NOMEM);
    rl_alloc_fail_after(-1);
    assert_int_equal(b.n, 4);
    assert_string_equal(b.p, "keep");
    /* and an empty buffer's take fails cleanly */
    rl_buf e = {0};
    rl_alloc_fail_after(0);
    assert_null(rl_buf_take(&e, NULL));
    rl_alloc_fail_after(-1);
    assert_null(e.p);
    rl_buf_free(&b);
}

/* ----------------------------------------------------------------- grow */

static void test_grow(void **state) {
    (void)state;
    int64_t *a = NULL;
    size_t cap = 0;
    assert_int_equal(rl_grow((void **)&a, &cap, 0, sizeof *a), RL_OK);
    assert_null(a); /* nothing needed, nothing allocated */
    assert_int_equal(rl_grow((void **)&a, &cap, 1, sizeof *a), RL_OK);
    assert_int_equal(cap, 16);
    for (int i = 0; i < 16; i++) a[i] = i * 3;
    assert_int_equal(rl_grow((void **)&a, &cap, 16, sizeof *a), RL_OK);
    assert_int_equal(cap, 16);
    assert_int_equal(rl_grow((void **)&a, &cap, 17, sizeof *a), RL_OK);
    assert_int_equal(cap, 32); /* doubles */
    assert_int_equal(rl_grow((void **)&a, &cap, 100, sizeof *a), RL_OK);
    assert_int_equal(cap, 100); /* a jump past twice the old size: exactly need */
    for (int i = 0; i < 16; i++) assert_int_equal(a[i], i * 3); /* contents kept */
    /* overflow of need * elem: refused, array untouched */
    int64_t *old = a;
    assert_int_equal(rl_grow((void **)&a, &cap, SIZE_MAX / 8 + 1, sizeof *a), RL_ERR_LIMIT);
    assert_ptr_equal(a, old);
    assert_int_equal(cap, 100);
    assert_int_equal(rl_grow((void **)&a, &cap, 101, 0), RL_ERR_INVALID);
    /* allocation failure: unchanged */
    rl_alloc_fail_after(0);
    assert_int_equal(rl_grow((void **)&a, &cap, 101, sizeof *a), RL_ERR_NOMEM);
    rl_alloc_fail_after(-1);
    assert_ptr_equal(a, old);
    assert_int_equal(cap, 100);
    assert_int_equal(a[15], 45);
    rl_free(a);
}

static void test_grow_i32(void **state) {
    (void)state;
    int32_t *a = NULL;
    int32_t cap = 0;
    assert_int_equal(rl_grow_i32((void **)&a, &cap, 5, sizeof *a), RL_OK);
    assert_int_equal(cap, 16);
    assert_int_equal(rl_grow_i32((void **)&a, &cap, 40, sizeof *a), RL_OK);
    assert_int_equal(cap, 40);
    assert_int_equal(rl_grow_i32((void **)&a, &cap, 41, sizeof *a), RL_OK);
    assert_int_equal(cap, 80);
    assert_int_equal(rl_grow_i32((void **)&a, &cap, -1, sizeof *a), RL_ERR_LIMIT);
    assert_int_equal(cap, 80);
    /* element so large that 9 of them overflow size_t */
    void *p = NULL;
    int32_t pc = 0;
    assert_int_equal(rl_grow_i32(&p, &pc, 9, SIZE_MAX / 8), RL_ERR_LIMIT);
    assert_null(p);
    assert_int_equal(pc, 0);
    /* a capacity already at INT32_MAX satisfies any int32 need */
    int32_t big = INT32_MAX;
    assert_int_equal(rl_grow_i32(&p, &big, INT32_MAX, 1), RL_OK);
    rl_free(a);
}

/* ----------------------------------------------------------------- heap */

typedef struct item {
    int key;
    char tag;
} item;

static bool key_less(const void *a, const void *b) {
    return ((const item *)a)->key < ((const item *)b)->key;
}

static bool item_less(const void *pa, const void *pb) {
    const item *a = pa, *b = pb;
    return a->key < b->key || (a->key == b->key && a->tag < b->tag);
}

static void pop_tags(rl_heap *h, char *out) {
    item x;
    size_t k = 0;
    while (rl_heap_pop(h, &x)) out[k++] = x.tag;
    out[k] = 0;
}

static void test_heap_ties(void **state) {
    (void)state;
    rl_heap h;
    rl_heap_init(&h, sizeof(item), key_less);
    char got[16];
    item x;
    /* Pushes A1 B1 C0: C sifts to the root, A to slot 2.  Pops: C, then A
     * (the last element, A, drops into the root and B is not less), then B. */
    x = (item){1, 'A'}, rl_heap_push(&h, &x);
    x = (item){1, 'B'}, rl_heap_push(&h, &x);
    x = (item){0, 'C'}, rl_heap_push(&h, &x);
    assert_int_equal(rl_heap_size(&h), 3);
    assert_int_equal(((const item *)rl_heap_top(&h))->tag, 'C');
    pop_tags(&h, got);
    assert_string_equal(got, "CAB");
    /* A1 B1 C1 D0: heap [D A C B].  Popping D moves the last element B
     * into the root (neither child is less): [B A C]; popping B moves C
     * into the root: [C A].  So the ties pop B, C, A (not FIFO). */
    x = (item){1, 'A'}, rl_heap_push(&h, &x);
    x = (item){1, 'B'}, rl_heap_push(&h, &x);
    x = (item){1, 'C'}, rl_heap_push(&h, &x);
    x = (item){0, 'D'}, rl_heap_push(&h, &x);
    pop_tags(&h, got);
    assert_string_equal(got, "DBCA");
    assert_null(rl_heap_top(&h));
    assert_false(rl_heap_pop(&h, &x));
    rl_heap_free(&h);
}

/* Interleaved pushes and pops against a sorted reference under a total
 * order: the pop sequence is exactly the sorted order of what is live. */
static void test_heap_against_reference(void **state) {
    (void)state;
    rl_heap h;
    rl_heap_init(&h, sizeof(item), item_less);
    item ref[600];
    int n_ref = 0;
    rl_rng r;
    rl_rng_seed(&r, 17);
    for (int step = 0; step < 2000; step++) {
        bool push = n_ref == 0 || (n_ref < 600 && rl_rng_below(&r, 3) != 0);
        if (push) {
            item x = {(int)rl_rng_below(&r, 50), (char)('a' + rl_rng_below(&r, 26))};
            assert_int_equal(rl_heap_push(&h, &x), RL_OK);
            ref[n_ref++] = x;
        } else {
            int best = 0;
            for (int i = 1; i < n_ref; i++)
                if (item_less(&ref[i], &ref[best])) best = i;
            item x;
            assert_true(rl_heap_pop(&h, &x));
            assert_int_equal(x.key, ref[best].key);
            assert_int_equal(x.tag, ref[best].tag);
            ref[best] = ref[--n_ref];
        }
        assert_int_equal(rl_heap_size(&h), n_ref);
    }
    rl_heap_clear(&h);
    assert_int_equal(rl_heap_size(&h), 0);
    rl_heap_free(&h);
}

static void test_heap_nomem(void **state) {
    (void)state;
    rl_heap h;
    rl_heap_init(&h, sizeof(item), item_less);
    assert_int_equal(rl_heap_reserve(&h, 16), RL_OK);
    item x = {5, 'x'};
    rl_alloc_fail_after(0);
    for (int i = 0; i < 16; i++) assert_int_equal(rl_heap_push(&h, &x), RL_OK); /* reserved */
    assert_int_equal(rl_heap_push(&h, &x), RL_ERR_NOMEM);
    rl_alloc_fail_after(-1);
    assert_int_equal(rl_heap_size(&h), 16);
    x = (item){1, 'y'};
    assert_int_equal(rl_heap_push(&h, &x), RL_OK);
    assert_true(rl_heap_pop(&h, &x));
    assert_int_equal(x.tag, 'y');
    rl_heap_free(&h);
}

/* ----------------------------------------------------------------- utf8 */

static void expect_cp(const char *s, size_t n, size_t want_len, uint32_t want_cp) {
    uint32_t cp = 0xDEADBEEF;
    assert_int_equal(rl_utf8_decode(s, n, &cp), want_len);
    assert_int_equal(cp, want_cp);
    assert_int_equal(rl_utf8_valid_len(s, n), want_len);
}

static void expect_bad(const char *s, size_t n) {
    uint32_t cp = 0xDEADBEEF;
    assert_int_equal(rl_utf8_decode(s, n, &cp), 0);
    assert_int_equal(cp, 0xDEADBEEF); /* untouched */
    assert_false(rl_utf8_valid(s, n) && n > 0);
}

static void test_utf8_decode_valid(void **state) {
    (void)state;
    expect_cp("A", 1, 1, 0x41);
    expect_cp("\x00", 1, 1, 0);
    expect_cp("\x7F", 1, 1, 0x7F);
    expect_cp("\xC2\x80", 2, 2, 0x80);
    expect_cp("\xDF\xBF", 2, 2, 0x7FF);
    expect_cp("\xE0\xA0\x80", 3, 3, 0x800);
    expect_cp("\xE2\x82\xAC", 3, 3, 0x20AC);
    expect_cp("\xED\x9F\xBF", 3, 3, 0xD7FF);
    expect_cp("\xEE\x80\x80", 3, 3, 0xE000);
    expect_cp("\xEF\xBF\xBF", 3, 3, 0xFFFF);
    expect_cp("\xF0\x90\x80\x80", 4, 4, 0x10000);
    expect_cp("\xF0\x9F\x98\x80", 4, 4, 0x1F600);
    expect_cp("\xF4\x8F\xBF\xBF", 4, 4, 0x10FFFF);
    /* only the first sequence is decoded */
    expect_cp("\xC3\xA9xyz", 5, 2, 0xE9);
    assert_true(rl_utf8_valid("a\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80", 10));
    assert_true(rl_utf8_valid("", 0));
}

static void test_utf8_decode_invalid(void **state) {
    (void)state;
    expect_bad("", 0);
    expect_bad("\x80", 1); /* stray continuation */
    expect_bad("\xBF", 1);
    expect_bad("\xC0\x80", 2);         /* overlong NUL */
    expect_bad("\xC1\xBF", 2);         /* overlong U+007F */
    expect_bad("\xE0\x9F\xBF", 3);     /* overlong U+07FF */
    expect_bad("\xE0\x80\xA0", 3);     /* overlong space */
    expect_bad("\xF0\x8F\xBF\xBF", 4); /* overlong U+FFFF */
    expect_bad("\xED\xA0\x80", 3);     /* surrogate D800 */
    expect_bad("\xED\xBF\xBF", 3);     /* surrogate DFFF */
    expect_bad("\xF4\x90\x80\x80", 4); /* U+110000 */
    expect_bad("\xF5\x80\x80\x80", 4);
    expect_bad("\xFE", 1);
    expect_bad("\xFF", 1);
    expect_bad("\xE2\x82", 2); /* truncated */
    expect_bad("\xF0\x9F\x98", 3);
    expect_bad("\xE2\x82\xAC", 2); /* n cuts a valid sequence */
    expect_bad("\xE2\x28\xA1", 3); /* bad second byte */
    expect_bad("\xE2\x82\x28", 3); /* bad third byte */
    expect_bad("\xC3\xC3", 2);
    /* invalid anywhere makes the whole string invalid */
    assert_false(rl_utf8_valid("abc\xC3", 4));
    assert_false(rl_utf8_valid("ab\xED\xA0\x80z", 6));
}

static void test_utf8_lead_and_encode(void **state) {
    (void)state;
    uint8_t lo, hi;
    assert_int_equal(rl_utf8_lead('a', &lo, &hi), 1);
    assert_int_equal(rl_utf8_lead(0x80, &lo, &hi), 0);
    assert_int_equal(rl_utf8_lead(0xC1, &lo, &hi), 0);
    assert_int_equal(rl_utf8_lead(0xC2, &lo, &hi), 2);
    assert_int_equal(lo, 0x80);
    assert_int_equal(hi, 0xBF);
    assert_int_equal(rl_utf8_lead(0xE0, &lo, &hi), 3);
    assert_int_equal(lo, 0xA0);
    assert_int_equal(rl_utf8_lead(0xED, &lo, &hi), 3);
    assert_int_equal(hi, 0x9F);
    assert_int_equal(rl_utf8_lead(0xF0, &lo, &hi), 4);
    assert_int_equal(lo, 0x90);
    assert_int_equal(rl_utf8_lead(0xF4, &lo, &hi), 4);
    assert_int_equal(lo, 0x80);
    assert_int_equal(hi, 0x8F);
    assert_int_equal(rl_utf8_lead(0xF5, &lo, &hi), 0);
    char o[4];
    assert_int_equal(rl_utf8_encode(0x24, o), 1);
    assert_int_equal(memcmp(o, "$", 1), 0);
    assert_int_equal(rl_utf8_encode(0xA2, o), 2);
    assert_int_equal(memcmp(o, "\xC2\xA2", 2), 0);
    assert_int_equal(rl_utf8_encode(0x20AC, o), 3);
    assert_int_equal(memcmp(o, "\xE2\x82\xAC", 3), 0);
    assert_int_equal(rl_utf8_encode(0x10348, o), 4);
    assert_int_equal(memcmp(o, "\xF0\x90\x8D\x88", 4), 0);
    /* every scalar value round-trips through encode and decode */
    size_t bad = 0;
    for (uint32_t cp = 0; cp <= 0x10FFFF; cp++) {
        if (cp >= 0xD800 && cp <= 0xDFFF) continue;
        uint32_t back = 0;
        size_t l = rl_utf8_encode(cp, o);
        bad += l != rl_utf8_cp_len(cp) || rl_utf8_decode(o, l, &back) != l || back != cp;
    }
    assert_int_equal(bad, 0);
    assert_int_equal(rl_utf8_cp_len(0x7F), 1);
    assert_int_equal(rl_utf8_cp_len(0x80), 2);
    assert_int_equal(rl_utf8_cp_len(0x7FF), 2);
    assert_int_equal(rl_utf8_cp_len(0x800), 3);
    assert_int_equal(rl_utf8_cp_len(0xFFFF), 3);
    assert_int_equal(rl_utf8_cp_len(0x10000), 4);
}

static void test_utf8_count_offset_back(void **state) {
    (void)state;
    const char s[] = "a\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80"; /* a é € 😀: 1+2+3+4 bytes */
    assert_int_equal(rl_utf8_count(s, 10), 4);
    assert_int_equal(rl_utf8_count(s, 0), 0);
    assert_int_equal(rl_utf8_offset(s, 10, 0), 0);
    assert_int_equal(rl_utf8_offset(s, 10, 1), 1);
    assert_int_equal(rl_utf8_offset(s, 10, 2), 3);
    assert_int_equal(rl_utf8_offset(s, 10, 3), 6);
    assert_int_equal(rl_utf8_offset(s, 10, 4), 10);
    assert_int_equal(rl_utf8_offset(s, 10, 99), 10);
    assert_int_equal(rl_utf8_back(s, 10), 6);
    assert_int_equal(rl_utf8_back(s, 6), 3);
    assert_int_equal(rl_utf8_back(s, 3), 1);
    assert_int_equal(rl_utf8_back(s, 1), 0);
    /* not UTF-8: every non-continuation byte counts; back stops after three */
    const char junk[] = "\x80\x80\x80\x80\x80";
    assert_int_equal(rl_utf8_count(junk, 5), 0);
    assert_int_equal(rl_utf8_back(junk, 5), 1);
    assert_int_equal(rl_utf8_back(junk, 2), 0);
    assert_int_equal(rl_utf8_count("\xFF\xC3", 2), 2);
}

/* ----------------------------------------------------------------- hash */

/* Expected values from an independent Python transcription; rl_mix64(0)
 * is splitmix64's published first output for seed 0. */
static void test_mix64_known(void **state) {
    (void)state;
    assert_true(rl_mix64(0) == 0xe220a8397b1dcdafull);
    assert_true(rl_mix64(1) == 0x910a2dec89025cc1ull);
    assert_true(rl_mix64(42) == 0xbdd732262feb6e95ull);
    assert_true(rl_mix64(UINT64_MAX) == 0xe4d971771b652c20ull);
    /* rl_rng seeds from it: state word 0 is rl_mix64(seed) */
    rl_rng r;
    rl_rng_seed(&r, 42);
    assert_true(r.s[0] == rl_mix64(42));
    assert_true(r.s[1] == rl_mix64(42 + RL_MIX64_GAMMA));
}

static void test_hash_bytes_known(void **state) {
    (void)state;
    assert_true(rl_hash_bytes("", 0) == 0x4e371fa1c0a35ba0ull);
    assert_true(rl_hash_bytes("a", 1) == 0xdb309ba1264b3bc0ull);
    assert_true(rl_hash_bytes("abcdefgh", 8) == 0x38db43898a341f91ull);
    assert_true(rl_hash_bytes("hello, world", 12) == 0x0c7a1045c03716d2ull);
    /* depends on the bytes, not their address or alignment */
    char buf[32];
    memcpy(buf + 3, "hello, world", 12);
    assert_true(rl_hash_bytes(buf + 3, 12) == 0x0c7a1045c03716d2ull);
    /* the length counts: "a" and "a\0" differ */
    assert_true(rl_hash_bytes("a\0", 2) != rl_hash_bytes("a", 1));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_buf_append),
        cmocka_unit_test(test_buf_growth_and_long_printf),
        cmocka_unit_test(test_buf_take_empty),
        cmocka_unit_test(test_buf_overflow_and_nomem),
        cmocka_unit_test(test_grow),
        cmocka_unit_test(test_grow_i32),
        cmocka_unit_test(test_heap_ties),
        cmocka_unit_test(test_heap_against_reference),
        cmocka_unit_test(test_heap_nomem),
        cmocka_unit_test(test_utf8_decode_valid),
        cmocka_unit_test(test_utf8_decode_invalid),
        cmocka_unit_test(test_utf8_lead_and_encode),
        cmocka_unit_test(test_utf8_count_offset_back),
        cmocka_unit_test(test_mix64_known),
        cmocka_unit_test(test_hash_bytes_known),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
