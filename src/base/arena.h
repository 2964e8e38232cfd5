/* redline arena (L0): one allocation for a set of buffers sized once.
 *
 * A module with many buffers fixed at creation (the engine's step arrays,
 * the speculation planner's) takes them from one block instead of one
 * rl_calloc each, so creation has one failure point and freeing is one
 * call.  The block is sized by a first pass over the same allocations:
 *
 *     rl_arena a;
 *     rl_arena_init(&a);          // measuring: no block yet
 *     carve(obj, &a);             // every rl_arena_alloc returns NULL, sizes add up
 *     if (rl_arena_commit(&a, err)) fail;  // one zeroed block of that size
 *     carve(obj, &a);             // the same calls again: now real pointers
 *     ...
 *     rl_arena_free(&a);          // releases every buffer at once
 *
 * Invariants: every pointer handed out is aligned to RL_ARENA_ALIGN bytes
 * and points into the block, the buffers do not overlap, and the block
 * starts zeroed (as rl_calloc'd buffers did).  Nothing is freed on its
 * own.  Not thread-safe (an arena belongs to its owner's creation code).
 */
#ifndef RL_BASE_ARENA_H
#define RL_BASE_ARENA_H

#include <stdbool.h>
#include <stddef.h>

#include "base/base.h"

#define RL_ARENA_ALIGN 64 /* a cache line; enough for any SIMD load */

typedef struct rl_arena {
    char *block;   /* owned; NULL while measuring (and after rl_arena_free) */
    char *base;    /* block rounded up to RL_ARENA_ALIGN */
    size_t size;   /* bytes of the block (after commit) */
    size_t used;   /* bytes handed out (measured, before commit) */
    bool overflow; /* a size overflowed, or an allocation did not fit the block */
} rl_arena;

/* An empty arena in measuring mode. */
void rl_arena_init(rl_arena *a);

/* count * size bytes, aligned to RL_ARENA_ALIGN (count or size 0: a valid
 * pointer to no bytes).  While measuring: adds the size and returns NULL.
 * After commit: a pointer into the block, or NULL (and a->overflow) when
 * it does not fit or the size overflows. */
void *rl_arena_alloc(rl_arena *a, size_t count, size_t size);

/* Allocates one zeroed block of the measured size (with rl_calloc, so
 * allocation-failure injection reaches it) and rewinds, so the same
 * sequence of rl_arena_alloc calls hands out the block.  RL_ERR_NOMEM, or
 * RL_ERR_LIMIT when a measured size overflowed; the arena is then left as
 * it was (rl_arena_free still safe). */
rl_status rl_arena_commit(rl_arena *a, rl_err *err);

/* Releases the block; every pointer from the arena dies.  The arena is
 * then empty and measuring again.  Safe on an arena never committed. */
void rl_arena_free(rl_arena *a);

#endif
