/* Unit tests for src/base/arena: the two-pass protocol (measure, commit,
 * carve again) gives aligned, disjoint, zeroed buffers that exactly fill
 * the measured size; an allocation past the block or an overflowing size
 * is refused; commit fails cleanly under allocation-failure injection. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <string.h>

#include "base/arena.h"

typedef struct bufs {
    int32_t *a; /* [7] */
    double *b;  /* [3] */
    char *c;    /* [1] */
    float *d;   /* [0] */
    uint8_t *e; /* [100] */
} bufs;

static void carve(bufs *x, rl_arena *a) {
    x->a = rl_arena_alloc(a, 7, sizeof *x->a);
    x->b = rl_arena_alloc(a, 3, sizeof *x->b);
    x->c = rl_arena_alloc(a, 1, 1);
    x->d = rl_arena_alloc(a, 0, sizeof *x->d);
    x->e = rl_arena_alloc(a, 100, 1);
}

static void test_two_passes(void **state) {
    (void)state;
    rl_arena a;
    rl_arena_init(&a);
    bufs x;
    carve(&x, &a);
    assert_null(x.a);
    assert_null(x.e);
    /* 28 -> 64, +24 -> 88 -> 128, +1 -> 129 -> 192 (+0), -> 192 + 100 */
    assert_int_equal(a.used, 292);
    rl_err err;
    assert_int_equal(rl_arena_commit(&a, &err), RL_OK);
    assert_int_equal(a.size, 292);
    assert_int_equal(a.used, 0);
    carve(&x, &a);
    assert_false(a.overflow);
    assert_int_equal(a.used, 292);
    char *p[] = {(char *)x.a, (char *)x.b, x.c, (char *)x.d, (char *)x.e};
    size_t off[] = {0, 64, 128, 192, 192};
    for (int i = 0; i < 5; i++) {
        assert_non_null(p[i]);
        assert_int_equal((uintptr_t)p[i] % RL_ARENA_ALIGN, 0);
        assert_int_equal(p[i] - a.base, off[i]);
    }
    /* zeroed, and writable to the last byte */
    for (int i = 0; i < 7; i++) assert_int_equal(x.a[i], 0);
    for (int i = 0; i < 100; i++) assert_int_equal(x.e[i], 0);
    memset(x.e, 0xAB, 100);
    x.a[6] = -1;
    assert_true(x.b[0] == 0.0 && x.b[2] == 0.0);
    /* full: one more byte does not fit */
    assert_null(rl_arena_alloc(&a, 1, 1));
    assert_true(a.overflow);
    rl_arena_free(&a);
    assert_null(a.block);
    assert_int_equal(a.used, 0);
    rl_arena_free(&a); /* idempotent */
}

static void test_overflow(void **state) {
    (void)state;
    rl_arena a;
    rl_arena_init(&a);
    assert_null(rl_arena_alloc(&a, SIZE_MAX / 2, 4)); /* count * size overflows */
    assert_true(a.overflow);
    rl_err err;
    assert_int_equal(rl_arena_commit(&a, &err), RL_ERR_LIMIT);
    assert_null(a.block);
    rl_arena_free(&a);
    rl_arena_init(&a);
    rl_arena_alloc(&a, SIZE_MAX - 10, 1); /* the alignment padding overflows the offset */
    rl_arena_alloc(&a, 1, 1);
    assert_true(a.overflow);
    assert_int_equal(rl_arena_commit(&a, &err), RL_ERR_LIMIT);
    rl_arena_free(&a);
}

static void test_commit_nomem(void **state) {
    (void)state;
    rl_arena a;
    rl_arena_init(&a);
    rl_arena_alloc(&a, 1000, 8);
    rl_err err;
    rl_alloc_fail_after(0);
    rl_status s = rl_arena_commit(&a, &err);
    rl_alloc_fail_after(-1);
    assert_int_equal(s, RL_ERR_NOMEM);
    assert_null(a.block);
    assert_non_null(strstr(err.msg, "8000 bytes"));
    /* still measuring: a second commit succeeds */
    assert_int_equal(rl_arena_commit(&a, &err), RL_OK);
    assert_non_null(rl_arena_alloc(&a, 1000, 8));
    assert_null(rl_arena_alloc(&a, 1, 1));
    rl_arena_free(&a);
}

/* An empty measuring pass still commits a block: allocations of no bytes
 * get valid pointers. */
static void test_empty(void **state) {
    (void)state;
    rl_arena a;
    rl_arena_init(&a);
    assert_null(rl_arena_alloc(&a, 0, 4));
    rl_err err;
    assert_int_equal(rl_arena_commit(&a, &err), RL_OK);
    assert_non_null(a.block);
    assert_non_null(rl_arena_alloc(&a, 0, 4));
    assert_null(rl_arena_alloc(&a, 1, 1));
    rl_arena_free(&a);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_two_passes),
        cmocka_unit_test(test_overflow),
        cmocka_unit_test(test_commit_nomem),
        cmocka_unit_test(test_empty),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
