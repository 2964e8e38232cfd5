/* Unit tests for src/base/env: the registry rows are complete and name
 * files that exist, every variable is read once (at the first rl_env
 * call, later changes unseen), and docs/ENV.md lists every variable.
 * Runs from the repository root (as the other unit binaries). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/env.h"

/* Must run first: nothing has called rl_env before it. */
static void test_read_once(void **state) {
    (void)state;
    assert_int_equal(setenv("RL_KVQ_QUERY", "f32", 1), 0);
    assert_int_equal(unsetenv("RL_KV_KSCALE"), 0);
    assert_string_equal(rl_env(RL_ENV_KVQ_QUERY), "f32");
    assert_true(rl_env_is(RL_ENV_KVQ_QUERY, "f32"));
    assert_false(rl_env_is(RL_ENV_KVQ_QUERY, "q8"));
    assert_null(rl_env(RL_ENV_KV_KSCALE));
    assert_false(rl_env_is(RL_ENV_KV_KSCALE, "none"));
    /* set after the first read: not seen */
    assert_int_equal(setenv("RL_KV_KSCALE", "none", 1), 0);
    assert_null(rl_env(RL_ENV_KV_KSCALE));
    assert_false(rl_env_is(RL_ENV_KV_KSCALE, "none"));
}

static void test_table(void **state) {
    (void)state;
    for (int i = 0; i < RL_ENV_COUNT; i++) {
        const rl_env_var *v = rl_env_info((rl_env_id)i);
        assert_non_null(v->name);
        assert_non_null(v->values);
        assert_non_null(v->meaning);
        assert_non_null(v->reader);
        assert_true(*v->values && *v->meaning);
        /* redline's own, or one Open MPI's mpirun sets (the pipeline, src/dist/) */
        assert_true(!strncmp(v->name, "RL_", 3) || !strncmp(v->name, "REDLINE_", 8) ||
                    !strcmp(v->name, "OMPI_COMM_WORLD_SIZE"));
        for (int j = 0; j < i; j++)
            assert_string_not_equal(v->name, rl_env_info((rl_env_id)j)->name);
        FILE *f = fopen(v->reader, "rb"); /* the reader is a file of the tree */
        if (!f) fail_msg("%s: reader %s not found", v->name, v->reader);
        fclose(f);
    }
}

static void test_documented(void **state) {
    (void)state;
    FILE *f = fopen("docs/ENV.md", "rb");
    assert_non_null(f);
    static char doc[1 << 16];
    size_t n = fread(doc, 1, sizeof doc - 1, f);
    fclose(f);
    doc[n] = 0;
    for (int i = 0; i < RL_ENV_COUNT; i++) {
        char want[80];
        snprintf(want, sizeof want, "`%s`", rl_env_info((rl_env_id)i)->name);
        if (!strstr(doc, want)) fail_msg("docs/ENV.md does not list %s", want);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_read_once),
        cmocka_unit_test(test_table),
        cmocka_unit_test(test_documented),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
