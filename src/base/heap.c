/* rl_heap (contract in heap.h).  Sifting moves a hole instead of swapping:
 * push walks the hole up from the end, pop walks it down from the root and
 * drops the former last element into it, so each level costs one copy. */
#include "base/heap.h"

#include <string.h>

#include "base/buf.h"

#define AT(h, i) ((char *)(h)->v + (size_t)(i) * (h)->elem)

void rl_heap_init(rl_heap *h, size_t elem, rl_heap_less_fn less) {
    RL_ASSERT(h && elem > 0 && less);
    *h = (rl_heap){.elem = elem, .less = less};
}

rl_status rl_heap_reserve(rl_heap *h, size_t n) {
    return rl_grow(&h->v, &h->cap, n, h->elem);
}

rl_status rl_heap_push(rl_heap *h, const void *x) {
    size_t need;
    if (!rl_add_size(h->n, 1, &need)) return RL_ERR_LIMIT;
    rl_status st = rl_grow(&h->v, &h->cap, need, h->elem);
    if (st) return st;
    size_t i = h->n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!h->less(x, AT(h, p))) break;
        memcpy(AT(h, i), AT(h, p), h->elem);
        i = p;
    }
    memcpy(AT(h, i), x, h->elem);
    return RL_OK;
}

bool rl_heap_pop(rl_heap *h, void *out) {
    if (h->n == 0) return false;
    memcpy(out, h->v, h->elem);
    size_t n = --h->n;
    if (n == 0) return true;
    /* the former last element, at index n, is outside the heap now and
     * stays in place while the hole moves down (only slots < n are written) */
    const void *x = AT(h, n);
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && h->less(AT(h, c + 1), AT(h, c))) c++;
        if (!h->less(AT(h, c), x)) break;
        memcpy(AT(h, i), AT(h, c), h->elem);
        i = c;
    }
    memcpy(AT(h, i), x, h->elem);
    return true;
}

const void *rl_heap_top(const rl_heap *h) {
    return h->n ? h->v : NULL;
}

void rl_heap_free(rl_heap *h) {
    rl_free(h->v);
    h->v = NULL;
    h->n = h->cap = 0;
}
