/* redline paged KV cache (L5): a pool of fixed-size blocks allocated once
 * from a memory budget, refcounted, with an intrusive free list and a
 * prefix cache keyed by chained SHA-256 block hashes.
 *
 * Storage: for every layer, one K region and one V region of n_blocks
 * blocks in the layout of rl_kv_layer (kernels/kernels.h): block b of
 * layer l holds, per KV head, block_size token rows.  A block id means the
 * same slot range in every layer.  Block 0 is the null block: never handed
 * out, never freed (padding in block tables points at it).
 *
 * Block states:
 *   in use    refcount > 0 (owned by one or more sequences);
 *   cached    refcount 0, holds a full block whose hash is registered:
 *             reusable by a later request with the same prefix, evicted in
 *             LRU order only when a plain free block is not available;
 *   free      refcount 0, no hash.
 * Invariant: every block except 0 is in exactly one of: in use, the free
 * list, the cached (LRU) list.  rl_kv_pool_check() verifies it.
 *
 * Sequences (rl_kv_seq) own a block table; the pool knows nothing about
 * requests.  Not thread-safe: the engine's step loop owns the pool.
 */
#ifndef RL_KV_H
#define RL_KV_H

#include <stdbool.h>
#include <stdint.h>

#include "base/base.h"
#include "kernels/kernels.h"

#define RL_KV_HASH_BYTES 32

typedef struct rl_kv_config {
    int32_t n_layer, n_kv_head, head_dim;
    int32_t block_size; /* tokens per block (default 16) */
    rl_type k_type, v_type;
    rl_kv_rot k_rot, v_rot; /* page rotation, copied into every layer (0 = AUTO:
                             * Hadamard for quantized pages, see rl_kv_rot) */
    size_t mem_bytes;       /* budget for K+V of all layers; n_blocks follows */
    int32_t n_blocks;       /* if > 0, overrides mem_bytes (tests) */
} rl_kv_config;

typedef struct rl_kv_pool rl_kv_pool;

typedef struct rl_kv_stats {
    int32_t n_blocks;                     /* usable blocks (excluding the null block) */
    int32_t n_used;                       /* refcount > 0 */
    int32_t n_cached;                     /* refcount 0 with a registered hash */
    int32_t n_free;                       /* refcount 0, no hash */
    uint64_t n_evictions;                 /* cached blocks reclaimed for new allocations */
    uint64_t prefix_queries, prefix_hits; /* in blocks */
} rl_kv_stats;

/* Bytes of K+V one block takes across all layers. */
size_t rl_kv_block_bytes(const rl_kv_config *cfg);
rl_status rl_kv_pool_new(const rl_kv_config *cfg, rl_kv_pool **out, rl_err *err);
void rl_kv_pool_free(rl_kv_pool *p);
/* Per-layer storage descriptors for the model, [n_layer]; borrowed. */
rl_kv_layer *rl_kv_pool_layers(rl_kv_pool *p);
/* Observer of the block operations that change refcounts or contents:
 * ALLOC (a = the id handed out), REF, UNREF (a = id), COPY (a = dst,
 * b = src).  The pipeline (src/dist/) replays them on the other ranks'
 * pools, whose blocks hold the other layers of the same ids.  fn NULL =
 * none; called synchronously from the pool's functions. */
typedef enum rl_kv_op {
    RL_KV_OP_ALLOC = 1,
    RL_KV_OP_REF = 2,
    RL_KV_OP_UNREF = 3,
    RL_KV_OP_COPY = 4
} rl_kv_op;
typedef void (*rl_kv_observer_fn)(void *ud, rl_kv_op op, int32_t a, int32_t b);
void rl_kv_pool_set_observer(rl_kv_pool *p, rl_kv_observer_fn fn, void *ud);
const rl_kv_config *rl_kv_pool_config(const rl_kv_pool *p);
rl_kv_stats rl_kv_pool_stats(const rl_kv_pool *p);
/* Blocks obtainable now (free + cached). */
int32_t rl_kv_pool_available(const rl_kv_pool *p);
/* Verifies every invariant (lists, refcounts, hash index); returns false
 * and fills err on the first violation.  O(n_blocks); for tests. */
bool rl_kv_pool_check(const rl_kv_pool *p, rl_err *err);
/* Drops every cached block's hash (they become plain free blocks). */
void rl_kv_pool_clear_cache(rl_kv_pool *p);

/* ---- single blocks ---- */
/* A block with refcount 1, or -1 if none can be had. */
int32_t rl_kv_block_alloc(rl_kv_pool *p);
void rl_kv_block_ref(rl_kv_pool *p, int32_t id);
void rl_kv_block_unref(rl_kv_pool *p, int32_t id);
int32_t rl_kv_block_refcount(const rl_kv_pool *p, int32_t id);
/* Copies the K/V contents of block src into dst in every layer. */
void rl_kv_block_copy(rl_kv_pool *p, int32_t dst, int32_t src);

/* Chained block hash: SHA-256(parent ‖ salt ‖ tokens[0..n)).  parent is
 * NULL for the first block of a sequence. */
void rl_kv_hash_block(const uint8_t *parent, uint64_t salt, const int32_t *tokens, int32_t n,
                      uint8_t out[RL_KV_HASH_BYTES]);

/* ---- sequences ---- */
typedef struct rl_kv_seq {
    int32_t *blocks;  /* block table [cap]; owned; rl_kv_seq_free releases */
    int32_t n_blocks; /* entries in use */
    int32_t cap;
    int32_t n_tokens;                    /* positions [0, n_tokens) have K/V stored */
    int32_t n_hashed;                    /* leading full blocks whose chained hash is known */
    uint64_t salt;                       /* per-tenant prefix-cache salt */
    uint8_t (*hashes)[RL_KV_HASH_BYTES]; /* [cap] chained hash of each hashed block */
} rl_kv_seq;

void rl_kv_seq_init(rl_kv_seq *s, uint64_t salt);
/* Returns every block (refcounts dropped; full hashed blocks stay cached). */
void rl_kv_seq_free(rl_kv_pool *p, rl_kv_seq *s);
/* Looks up the longest cached prefix of tokens[0..n) in whole blocks and
 * adopts those blocks (the sequence must be empty).  At most max_tokens
 * tokens are matched (callers pass n-1 so one token is left to compute).
 * Returns the number of tokens matched (a multiple of block_size). */
int32_t rl_kv_seq_match_prefix(rl_kv_pool *p, rl_kv_seq *s, const int32_t *tokens, int32_t n,
                               int32_t max_tokens);
/* Blocks that growing s to n_total tokens would need to allocate
 * (including a copy-on-write of a shared partial last block). */
int32_t rl_kv_seq_blocks_needed(const rl_kv_pool *p, const rl_kv_seq *s, int32_t n_total);
/* Makes positions [s->n_tokens, n_total) writable: allocates blocks and
 * copies a shared partial last block (copy on write).  All or nothing:
 * RL_ERR_LIMIT (and no change) if the pool cannot supply enough blocks. */
rl_status rl_kv_seq_reserve(rl_kv_pool *p, rl_kv_seq *s, int32_t n_total);
/* Records that positions up to n_tokens now hold K/V for tokens[0..n_tokens)
 * and registers the hashes of newly completed full blocks in the prefix
 * cache. */
void rl_kv_seq_commit(rl_kv_pool *p, rl_kv_seq *s, const int32_t *tokens, int32_t n_tokens);
/* Drops positions >= n_tokens (speculative rollback); frees blocks wholly
 * past the new end. */
void rl_kv_seq_truncate(rl_kv_pool *p, rl_kv_seq *s, int32_t n_tokens);
/* dst (empty) shares all of src's blocks (refcounts +1). */
rl_status rl_kv_seq_fork(rl_kv_pool *p, rl_kv_seq *dst, const rl_kv_seq *src);

#endif
