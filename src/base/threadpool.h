/* A persistent thread pool (L0).  Threads are created once and park between
 * jobs; rl_threadpool_run() wakes them, runs fn(ctx, ith, nth) on every
 * thread (the caller is thread 0) and returns when all have finished.
 * Work splitting is the job's business (typically an atomic chunk counter
 * in ctx).  One job at a time per pool; not reentrant. */
#ifndef RL_THREADPOOL_H
#define RL_THREADPOOL_H

typedef struct rl_threadpool rl_threadpool;
typedef void (*rl_task_fn)(void *ctx, int ith, int nth);

/* n_threads >= 1 (1 = run inline, no threads).  NULL on failure. */
rl_threadpool *rl_threadpool_new(int n_threads);
void rl_threadpool_free(rl_threadpool *tp);
int rl_threadpool_n_threads(const rl_threadpool *tp);
/* tp may be NULL: runs fn(ctx, 0, 1) inline. */
void rl_threadpool_run(rl_threadpool *tp, rl_task_fn fn, void *ctx);

#endif
