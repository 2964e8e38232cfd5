/* Internals of the MPI pipeline (dist.c: start-up, rank 0, the shared
 * message code; worker.c: ranks 1..K-1).  Only src/dist/ includes this.
 *
 * Messages (all ranks run the same build, so structs travel as bytes):
 *   TAG_CFG   rank 0 -> each worker: rl__dist_cfg (START: what to load;
 *             POOL: the KV geometry; END: stop before or instead of steps)
 *   TAG_META  rank r -> r+1: one micro-batch's description, int32s:
 *             header [H_N], block ops [n_ops][3], token, pos, seq, flags
 *             [n_tok] each (flags: bit 0 want logits, bit 1 a prompt
 *             token), n_blocks [n_seq], the block tables concatenated
 *             [n_bt]; seq ids are rebased to the micro-batch's first
 *             sequence.  Types STEP (a TAG_X follows), OPS (block ops
 *             only: the log filled between steps), END (the last ops; the
 *             job ends).
 *   TAG_X     rank r -> r+1: float [n_tok][n_embd], the hidden state after
 *             rank r's layers, in batch order
 *   TAG_BACK  rank K-1 -> 0: float [n_want][n_embd], the final hidden
 *             rows of the tokens that want logits
 * Messages between two ranks with one tag arrive in order (MPI), so
 * micro-batches need no sequence numbers.
 */
#ifndef RL_DIST_IMPL_H
#define RL_DIST_IMPL_H

#include <mpi.h>
#include <stdint.h>

#include "dist/dist.h"
#include "base/base.h"
#include "kv/kv.h"
#include "model/model.h"

enum { TAG_CFG = 1, TAG_META = 2, TAG_X = 3, TAG_BACK = 4 };
enum { MSG_STEP = 1, MSG_OPS = 2, MSG_END = 3 };
enum { CFG_START = 1, CFG_POOL = 2, CFG_END = 3 };
/* meta header fields */
enum { H_TYPE, H_NOPS, H_NTOK, H_NSEQ, H_NVOUT, H_NBT, H_N };

#define RL_DIST_OPS_CAP   4096 /* block ops logged between two messages */
#define RL_DIST_MICRO_MAX 16
#define RL_DIST_SEQ_MAX   4096 /* engine max_seqs limit */
/* --pp-timeout default: seconds rank 0 waits for one micro-batch's result
 * before it ends the job (a hung rank); generous, since one long prefill
 * of a large model on slow stages legitimately takes minutes */
#define RL_DIST_TIMEOUT_DEFAULT 600.0

typedef struct rl__dist_cfg {
    int32_t kind; /* CFG_* */
    /* START */
    int32_t max_batch, n_ctx, weights, n_threads, k_quant;
    char model_path[4096];
    /* POOL: the KV pool's geometry (n_layer is each rank's own) and block count */
    rl_kv_config kv;
    int32_t n_blocks;
} rl__dist_cfg;

/* One rank's state (rank 0's lives in dist.c, a worker's in worker.c). */
typedef struct rl__dist {
    int rank, size, n_micro;
    double step_timeout_s; /* rank 0: a result not back in this long ends the job (0: never) */
    int32_t n_embd, max_batch;
    /* this rank's stage (rl__dist_note_model), kept for the report: rank 0
     * reports after its engine has freed the model */
    int32_t l0, l1;
    bool has_io;
    size_t weight_bytes;
    /* refcount of every block id as the op stream says (both sides) */
    int32_t *mirror, n_blocks;
    bool mirror_bad; /* an op or a batch contradicted the stream */
    /* counters for the report */
    uint64_t steps, tokens, bytes_sent;
    double compute_s, wait_s;
} rl__dist;

/* Reports a failed MPI call (naming the peer) and ends the job. */
void rl__dist_check(const rl__dist *d, int rc, const char *what, int peer);
/* Ends the job with a message (a broken invariant of the protocol). */
_Noreturn void rl__dist_fatal(const rl__dist *d, const char *msg);
/* Receives the next message with `tag` from `src` into *buf (grown to fit
 * when esize > 0; a fixed buffer of *cap bytes when esize is 0: a larger
 * message ends the job), *cap in elements of `type`, polling with a backoff
 * so an idle rank does not spin; returns the element count.  On a worker
 * (d->rank > 0) a CFG_END from rank 0 arriving meanwhile ends the process
 * (rank 0 gave up). */
int rl__dist_recv(rl__dist *d, void **buf, int *cap, MPI_Datatype type, size_t esize, int src,
                  int tag);
/* Applies ops[n][3] to d->mirror and, with pool, the copies to its pages. */
void rl__dist_apply_ops(rl__dist *d, const int32_t *ops, int32_t n, rl_kv_pool *pool);
/* Blocks in use by d->mirror (the null block aside). */
int32_t rl__dist_held(const rl__dist *d);
/* Records m's layer range and weight bytes in d for the report. */
void rl__dist_note_model(rl__dist *d, const rl_model *m);
/* One line on stderr: layers, steps, tokens, times, bytes, weights, RSS,
 * blocks held.  Returns false when blocks are still held or the stream
 * was contradicted. */
bool rl__dist_report(const rl__dist *d);

/* Runs a worker rank to the end of the job; the process's exit code. */
int rl__dist_worker(rl__dist *d);

#endif
