/* Binary min-heap of fixed-size elements (L0), ordered by the caller's
 * strict weak order `less`: the top is an element no other is less than.
 *
 * Invariants: v[0..n) is heap-ordered (no element is less than its
 * parent); elements are copied in and out by value (elem bytes each);
 * memory comes from rl_realloc (failure injection reaches it) and grows
 * by doubling, so a push is O(log n) amortised and never moves the
 * caller's data.  Which of several equal elements pops first depends only
 * on the sequence of pushes and pops, so a program that uses the heap
 * behaves the same in every run.  Callers that need one fixed order among
 * equals make `less` total (e.g. break ties by position).
 *
 * Users: the BPE and SentencePiece merge queues (tokenizer), the grammar
 * analysis (shortest lengths by Dijkstra).  The sampler keeps its own
 * inlined top-k heap: it runs over the whole vocabulary every step and a
 * comparison through a function pointer would cost it measurably.
 * Not thread-safe: one heap per user. */
#ifndef RL_HEAP_H
#define RL_HEAP_H

#include <stdbool.h>
#include <stddef.h>

#include "base/base.h"

typedef bool (*rl_heap_less_fn)(const void *a, const void *b);

typedef struct rl_heap {
    void *v; /* owned: cap elements, [0, n) live */
    size_t n, cap;
    size_t elem;          /* bytes per element */
    rl_heap_less_fn less; /* required */
} rl_heap;

/* An empty heap; allocates nothing. */
void rl_heap_init(rl_heap *h, size_t elem, rl_heap_less_fn less);
/* Room for n elements in all, so that pushes up to that size cannot fail. */
rl_status rl_heap_reserve(rl_heap *h, size_t n);
/* Inserts a copy of *x (x must not point into the heap).  RL_ERR_NOMEM or
 * RL_ERR_LIMIT when it cannot grow; the heap is then unchanged. */
rl_status rl_heap_push(rl_heap *h, const void *x);
/* Removes the top into *out; false (and *out untouched) when empty. */
bool rl_heap_pop(rl_heap *h, void *out);
/* The top, borrowed until the next push or pop; NULL when empty. */
const void *rl_heap_top(const rl_heap *h);
static inline size_t rl_heap_size(const rl_heap *h) {
    return h->n;
}
/* Empties the heap, keeping its memory. */
static inline void rl_heap_clear(rl_heap *h) {
    h->n = 0;
}
/* Frees the memory; h is then empty and may be reused. */
void rl_heap_free(rl_heap *h);

#endif
