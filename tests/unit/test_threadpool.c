/* Thread pool tests: every thread (caller = 0) runs each job exactly once
 * with the right (ith, nth); many back-to-back jobs (spin path) and jobs
 * after an idle pause (park path); NULL and 1-thread pools run inline. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdatomic.h>
#include <time.h>

#include "base/threadpool.h"

typedef struct job {
    _Atomic int hits[8];
    _Atomic int bad_nth;
    int nth_expected;
    _Atomic long sum;
} job;

static void job_fn(void *p, int ith, int nth) {
    job *j = p;
    if (nth != j->nth_expected || ith < 0 || ith >= nth)
        atomic_fetch_add(&j->bad_nth, 1);
    else
        atomic_fetch_add(&j->hits[ith], 1);
    atomic_fetch_add(&j->sum, ith + 1);
}

static void run_jobs(rl_threadpool *tp, int nth, int n_jobs, int sleep_us) {
    job j = {.nth_expected = nth};
    for (int k = 0; k < n_jobs; k++) {
        if (sleep_us) {
            struct timespec ts = {0, sleep_us * 1000L};
            nanosleep(&ts, NULL);
        }
        rl_threadpool_run(tp, job_fn, &j);
        /* the job is complete when run returns */
        assert_int_equal(atomic_load(&j.sum), (long)(k + 1) * nth * (nth + 1) / 2);
    }
    assert_int_equal(atomic_load(&j.bad_nth), 0);
    for (int i = 0; i < nth; i++) assert_int_equal(atomic_load(&j.hits[i]), n_jobs);
}

static void test_inline(void **state) {
    (void)state;
    run_jobs(NULL, 1, 3, 0);
    rl_threadpool *tp = rl_threadpool_new(1);
    assert_non_null(tp);
    assert_int_equal(rl_threadpool_n_threads(tp), 1);
    run_jobs(tp, 1, 3, 0);
    rl_threadpool_free(tp);
    assert_null(rl_threadpool_new(0));
    assert_int_equal(rl_threadpool_n_threads(NULL), 1);
}

static void test_many_jobs(void **state) {
    (void)state;
    for (int nth = 2; nth <= 4; nth++) {
        rl_threadpool *tp = rl_threadpool_new(nth);
        assert_non_null(tp);
        assert_int_equal(rl_threadpool_n_threads(tp), nth);
        run_jobs(tp, nth, 2000, 0);
        run_jobs(tp, nth, 5, 3000); /* workers have parked between jobs */
        rl_threadpool_free(tp);
    }
}

static void test_free_idle(void **state) {
    (void)state;
    rl_threadpool *tp = rl_threadpool_new(3); /* never used */
    assert_non_null(tp);
    rl_threadpool_free(tp);
    rl_threadpool_free(NULL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_inline),
        cmocka_unit_test(test_many_jobs),
        cmocka_unit_test(test_free_idle),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
