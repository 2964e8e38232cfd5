/* The CLI's shared argument parser (src/cli/args.h) and report helpers
 * (src/cli/report.h): exact values for sizes, integers, ranges, lists and
 * choices, rejection of every malformed value, the walker over argv, and
 * percentiles against hand-computed order statistics.  No model. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <string.h>

#include "cli/args.h"
#include "cli/report.h"

static void test_sizes(void **state) {
    (void)state;
    struct {
        const char *s;
        size_t v;
    } ok[] = {
        {"0", 0},           {"1048576", 1048576}, {"512M", 512ull << 20}, {"2G", 2ull << 30},
        {"1T", 1ull << 40}, {"1.5G", 3ull << 29}, {"2GiB", 2ull << 30},   {"64kB", 64ull << 10},
        {"4k", 4096},       {"100B", 100},        {"3t", 3ull << 40},     {"8MiB", 8ull << 20},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        size_t v = 7;
        assert_true(rl_parse_size(ok[i].s, &v));
        assert_int_equal(v, ok[i].v);
    }
    const char *bad[] = {"",    "-1",  "1X",  "inf", "nan", "1e30", "M",
                         "1 G", "1GG", "1iB", "1Gx", "0x",  NULL};
    for (int i = 0; bad[i]; i++) {
        size_t v = 7;
        assert_false(rl_parse_size(bad[i], &v));
        assert_int_equal(v, 7);
    }
}

static void test_numbers(void **state) {
    (void)state;
    int64_t x;
    assert_true(rl_parse_i64("-5", -10, 10, &x) && x == -5);
    assert_false(rl_parse_i64("11", -10, 10, &x));
    assert_false(rl_parse_i64("1.5", -10, 10, &x));
    assert_false(rl_parse_i64("", -10, 10, &x));
    assert_false(rl_parse_i64("99999999999999999999", INT64_MIN, INT64_MAX, &x));
    uint64_t u;
    assert_true(rl_parse_u64("18446744073709551615", &u) && u == UINT64_MAX);
    assert_false(rl_parse_u64("-1", &u));
    assert_false(rl_parse_u64("18446744073709551616", &u));
    double d;
    assert_true(rl_parse_f64("0.25", &d) && d == 0.25);
    assert_false(rl_parse_f64("inf", &d));
    assert_false(rl_parse_f64("nan", &d));
    assert_false(rl_parse_f64("1,5", &d));
}

static void test_walker(void **state) {
    (void)state;
    char *argv[] = {"cmd",   "-c",     "64",    "--kv-mem", "1T",     "--len", "8:16", "-t",
                    "1,2,4", "--spec", "ngram", "file.txt", "--flag", "-n",    "x"};
    int argc = (int)(sizeof argv / sizeof argv[0]);
    rl_args A;
    rl_args_init(&A, "test", argc, argv);
    int32_t c = 0, range[2] = {0}, list[4], n = 0;
    size_t kv = 0;
    int k = -1;
    bool flag = false;
    const char *pos = NULL;
    static const char *const names[] = {"none", "ngram", "draft", NULL};
    while (rl_args_next(&A)) {
        if (rl_args_is(&A, "-c|--ctx-size"))
            assert_true(rl_args_i32(&A, 1, 100, &c));
        else if (rl_args_is(&A, "--kv-mem"))
            assert_true(rl_args_size(&A, true, &kv));
        else if (rl_args_is(&A, "--len"))
            assert_true(rl_args_range(&A, 1, 100, range));
        else if (rl_args_is(&A, "-t"))
            assert_true(rl_args_list(&A, 1, 8, list, &n, 4));
        else if (rl_args_is(&A, "--spec"))
            assert_true(rl_args_choice(&A, names, &k));
        else if (rl_args_is(&A, "--flag"))
            flag = true;
        else if (rl_args_positional(&A))
            pos = A.flag;
        else if (rl_args_is(&A, "-n"))
            assert_false(rl_args_i32(&A, 0, 9, &c)); /* 'x' */
        else
            fail_msg("unexpected %s", A.flag);
    }
    assert_int_equal(c, 64);
    assert_int_equal(kv, 1ull << 40);
    assert_int_equal(range[0], 8);
    assert_int_equal(range[1], 16);
    assert_int_equal(n, 3);
    assert_int_equal(list[2], 4);
    assert_int_equal(k, 1);
    assert_true(flag);
    assert_string_equal(pos, "file.txt");
    /* failures: missing value, bad range, bad list, bad choice, zero size */
    char *bad[][3] = {{"cmd", "-c", NULL},      {"cmd", "--len", "9:3"},
                      {"cmd", "-t", "1,,2"},    {"cmd", "--spec", "fast"},
                      {"cmd", "--kv-mem", "0"}, {"cmd", "-t", "1,2,3,4,5"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        rl_args B;
        rl_args_init(&B, "test", bad[i][2] ? 3 : 2, bad[i]);
        assert_true(rl_args_next(&B));
        bool ok = rl_args_is(&B, "-c")       ? rl_args_i32(&B, 1, 100, &c)
                  : rl_args_is(&B, "--len")  ? rl_args_range(&B, 1, 100, range)
                  : rl_args_is(&B, "-t")     ? rl_args_list(&B, 1, 8, list, &n, 4)
                  : rl_args_is(&B, "--spec") ? rl_args_choice(&B, names, &k)
                                             : rl_args_size(&B, true, &kv);
        assert_false(ok);
    }
}

static void test_percentiles(void **state) {
    (void)state;
    double v[] = {5, 1, 4, 2, 3};
    assert_true(rl_report_percentile(v, 5, 0.5) == 3);
    assert_true(v[0] == 1 && v[4] == 5); /* sorted in place */
    double w[] = {4, 1, 3, 2};
    assert_true(rl_report_percentile(w, 4, 0.5) == 2.5); /* mean of the middle two */
    assert_true(fabs(rl_report_percentile(w, 4, 0.99) - 3.97) < 1e-12);
    assert_true(rl_report_percentile(w, 4, 1.0) == 4 && rl_report_percentile(w, 4, 0.0) == 1);
    assert_true(isnan(rl_report_percentile(w, 0, 0.5)));
    rl_report_dist d = rl_report_dist_of(v, 5);
    assert_true(d.mean == 3 && d.p50 == 3 && d.n == 5);
    rl_report_dist z = rl_report_dist_of(v, 0);
    assert_true(z.mean == 0 && z.p50 == 0 && z.p99 == 0 && z.n == 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sizes),
        cmocka_unit_test(test_numbers),
        cmocka_unit_test(test_walker),
        cmocka_unit_test(test_percentiles),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
