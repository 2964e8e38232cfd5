/* redline pipeline parallel (L8, src/dist/): one model split into K
 * contiguous layer ranges, one per MPI rank (Open MPI's mpirun starts
 * them; docs/PIPELINE.md).
 *
 * Rank 0 is the whole program as in one process (HTTP server or `run`,
 * scheduler, KV allocator, sampling, speculation, grammars) with a model
 * holding the embeddings, the first layers and the head; ranks 1..K-1 are
 * workers holding the next layer ranges and their layers' share of every
 * KV block.  Every engine forward is split into micro-batches; each
 * micro-batch's batch description and hidden state go rank 0 -> 1 -> ...
 * -> K-1 and its final hidden rows back to rank 0, which applies the head.
 * Block ids are decided by rank 0's allocator alone: its block operations
 * (alloc, ref, unref, copy) travel with the next message, the workers
 * replay the copies on their pages and keep refcounts only to check the
 * stream (every block a batch uses is held; every block returned at the
 * end).
 *
 * Failure: MPI errors are returned, not fatal, and end the job with a
 * message naming the rank and the peer (MPI_Abort); a rank that dies is
 * seen by mpirun, which ends every rank; a rank that hangs (alive, not
 * answering) is seen by rank 0's step timeout (--pp-timeout), which ends
 * the job the same way.
 *
 * Built with MPI only under `make MPI=1` (dist.c); without it
 * (nompi.c) a process started by mpirun with more than one rank refuses
 * to run.
 */
#ifndef RL_DIST_H
#define RL_DIST_H

#include <stdbool.h>

#include "redline.h"
#include "kv/kv.h"
#include "model/model.h"

/* Call first in main.  Not started by mpirun with K > 1 ranks: returns
 * false and does nothing.  Otherwise initializes MPI; on a worker rank
 * runs the worker until rank 0 ends the job and returns true with
 * *exit_code; on rank 0 returns false (the caller then installs the
 * hooks below as the engine's, rl_engine_set_hooks, stage 0 of
 * rl_dist_size()), unless argv's command is not `run` or `serve` (then an
 * error, *exit_code 2, true).  Consumes `--pp-micro N` (micro-batches per
 * forward, default K) and `--pp-timeout S` (seconds rank 0 waits for a
 * micro-batch's result before ending the job: a hung rank; default 600,
 * 0 = never) from argv. */
bool rl_dist_main(int *argc, char **argv, int *exit_code);
/* Ranks in the job (1 outside a pipeline). */
int rl_dist_size(void);

/* Rank 0's engine hooks (engine/engine.h's rl_engine_hooks slots), all
 * with ud = rl_dist_ctx(): the forward through every stage, the start
 * message to the workers once the model is loaded, the KV geometry once
 * the pool exists (and its block-op observer), the end of the job when the
 * engine is freed.  Only under rl_dist_size() > 1; the plain build has
 * none. */
void *rl_dist_ctx(void);
rl_status rl_dist_forward(void *ud, rl_model *m, const rl_batch *b, const rl_kv_layer *kv,
                          float *logits, rl_threadpool *tp, rl_err *err);
rl_status rl_dist_on_model(void *ud, const rl_engine_params *ep, rl_model *m, rl_err *err);
rl_status rl_dist_on_pool(void *ud, rl_kv_pool *pool, rl_err *err);
void rl_dist_on_free(void *ud);

/* Rank 0 at the end of main: ends the workers if the engine did not
 * (a command that failed before creating it), finalizes MPI.  Returns
 * exit_code.  A no-op outside a pipeline. */
int rl_dist_finalize(int exit_code);

#endif
