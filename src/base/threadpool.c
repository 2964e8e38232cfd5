/* Persistent thread pool (see threadpool.h).
 *
 * Workers are created once.  A job is published by bumping `gen` (a
 * generation counter) under the mutex; workers spin on `gen` for a short
 * while after finishing a job (decode steps come in quick succession), then
 * park on the condvar.  The caller runs as thread 0 and then waits for
 * `n_done` to reach nth-1 (spin, then park on the `done` condvar).
 *
 * Invariants: one job at a time (rl_threadpool_run is not reentrant);
 * fn/ctx are written before `gen` is released and read after it is
 * acquired, so workers always see the job of the generation they woke for.
 */
#include "base/threadpool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "base/base.h"

#define RL_TP_SPIN 4000 /* iterations of polling before parking */

struct rl_threadpool {
    int n_threads;
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t wake;  /* workers park here waiting for a new gen */
    pthread_cond_t done;  /* caller parks here waiting for n_done */
    _Atomic unsigned gen; /* job generation */
    _Atomic int n_done;   /* workers finished with the current gen */
    _Atomic bool stop;
    rl_task_fn fn;
    void *ctx;
};

typedef struct rl__tp_worker_arg {
    rl_threadpool *tp;
    int ith;
} rl__tp_worker_arg;

static inline void rl__cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static void *rl__tp_worker(void *p) {
    rl__tp_worker_arg *arg = p;
    rl_threadpool *tp = arg->tp;
    int ith = arg->ith;
    rl_free(arg);
    unsigned seen = 0;
    for (;;) {
        unsigned g = atomic_load_explicit(&tp->gen, memory_order_acquire);
        for (int i = 0; g == seen && i < RL_TP_SPIN; i++) {
            rl__cpu_relax();
            g = atomic_load_explicit(&tp->gen, memory_order_acquire);
        }
        if (g == seen) {
            pthread_mutex_lock(&tp->mu);
            while ((g = atomic_load_explicit(&tp->gen, memory_order_acquire)) == seen &&
                   !atomic_load(&tp->stop))
                pthread_cond_wait(&tp->wake, &tp->mu);
            pthread_mutex_unlock(&tp->mu);
        }
        if (atomic_load(&tp->stop)) break;
        seen = g;
        tp->fn(tp->ctx, ith, tp->n_threads);
        if (atomic_fetch_add_explicit(&tp->n_done, 1, memory_order_acq_rel) + 1 ==
            tp->n_threads - 1) {
            pthread_mutex_lock(&tp->mu);
            pthread_cond_signal(&tp->done);
            pthread_mutex_unlock(&tp->mu);
        }
    }
    return NULL;
}

rl_threadpool *rl_threadpool_new(int n_threads) {
    if (n_threads < 1) return NULL;
    rl_threadpool *tp = rl_calloc(1, sizeof *tp);
    if (!tp) return NULL;
    tp->n_threads = n_threads;
    pthread_mutex_init(&tp->mu, NULL);
    pthread_cond_init(&tp->wake, NULL);
    pthread_cond_init(&tp->done, NULL);
    atomic_init(&tp->gen, 0);
    atomic_init(&tp->n_done, 0);
    atomic_init(&tp->stop, false);
    if (n_threads > 1) {
        tp->threads = rl_calloc((size_t)n_threads, sizeof(pthread_t));
        if (!tp->threads) goto fail;
        for (int i = 1; i < n_threads; i++) {
            rl__tp_worker_arg *arg = rl_malloc(sizeof *arg);
            if (!arg) {
                tp->n_threads = i;
                goto fail;
            }
            arg->tp = tp;
            arg->ith = i;
            if (pthread_create(&tp->threads[i], NULL, rl__tp_worker, arg) != 0) {
                rl_free(arg);
                tp->n_threads = i;
                goto fail;
            }
        }
    }
    return tp;
fail:
    rl_threadpool_free(tp);
    return NULL;
}

void rl_threadpool_free(rl_threadpool *tp) {
    if (!tp) return;
    if (tp->threads) {
        pthread_mutex_lock(&tp->mu);
        atomic_store(&tp->stop, true);
        atomic_fetch_add(&tp->gen, 1);
        pthread_cond_broadcast(&tp->wake);
        pthread_mutex_unlock(&tp->mu);
        for (int i = 1; i < tp->n_threads; i++) pthread_join(tp->threads[i], NULL);
        rl_free(tp->threads);
    }
    pthread_mutex_destroy(&tp->mu);
    pthread_cond_destroy(&tp->wake);
    pthread_cond_destroy(&tp->done);
    rl_free(tp);
}

int rl_threadpool_n_threads(const rl_threadpool *tp) {
    return tp ? tp->n_threads : 1;
}

void rl_threadpool_run(rl_threadpool *tp, rl_task_fn fn, void *ctx) {
    if (!tp || tp->n_threads == 1) {
        fn(ctx, 0, 1);
        return;
    }
    int nw = tp->n_threads - 1;
    tp->fn = fn;
    tp->ctx = ctx;
    atomic_store_explicit(&tp->n_done, 0, memory_order_relaxed);
    pthread_mutex_lock(&tp->mu);
    atomic_fetch_add_explicit(&tp->gen, 1, memory_order_release);
    pthread_cond_broadcast(&tp->wake);
    pthread_mutex_unlock(&tp->mu);

    fn(ctx, 0, tp->n_threads);

    for (int i = 0; i < RL_TP_SPIN; i++) {
        if (atomic_load_explicit(&tp->n_done, memory_order_acquire) == nw) return;
        rl__cpu_relax();
    }
    pthread_mutex_lock(&tp->mu);
    while (atomic_load_explicit(&tp->n_done, memory_order_acquire) != nw)
        pthread_cond_wait(&tp->done, &tp->mu);
    pthread_mutex_unlock(&tp->mu);
}
