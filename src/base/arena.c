/* Bump allocator over one block (see arena.h).  The measuring pass and
 * the committed pass walk the same offsets: both round `used` up to
 * RL_ARENA_ALIGN before each allocation, so the second pass fits the block
 * exactly when it repeats the first. */
#include "base/arena.h"

#include <stdint.h>
#include <string.h>

void rl_arena_init(rl_arena *a) {
    memset(a, 0, sizeof *a);
}

void *rl_arena_alloc(rl_arena *a, size_t count, size_t size) {
    size_t n, start, end;
    if (!rl_mul_size(count, size, &n) || !rl_add_size(a->used, RL_ARENA_ALIGN - 1, &start)) {
        a->overflow = true;
        return NULL;
    }
    start &= ~(size_t)(RL_ARENA_ALIGN - 1);
    if (!rl_add_size(start, n, &end)) {
        a->overflow = true;
        return NULL;
    }
    if (!a->block) { /* measuring */
        a->used = end;
        return NULL;
    }
    if (end > a->size) {
        a->overflow = true;
        return NULL;
    }
    a->used = end;
    return a->base + start;
}

rl_status rl_arena_commit(rl_arena *a, rl_err *err) {
    RL_ASSERT(!a->block);
    size_t total;
    if (a->overflow || !rl_add_size(a->used, RL_ARENA_ALIGN, &total))
        return rl_err_set(err, RL_ERR_LIMIT, "arena: buffer sizes overflow");
    char *block = rl_calloc(1, total);
    if (!block) return rl_err_set(err, RL_ERR_NOMEM, "arena: out of memory for %zu bytes", a->used);
    a->block = block;
    a->base = (char *)(((uintptr_t)block + RL_ARENA_ALIGN - 1) & ~(uintptr_t)(RL_ARENA_ALIGN - 1));
    a->size = a->used;
    a->used = 0;
    return RL_OK;
}

void rl_arena_free(rl_arena *a) {
    rl_free(a->block);
    rl_arena_init(a);
}
