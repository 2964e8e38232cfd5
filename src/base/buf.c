/* rl_buf and the array growth helpers (contracts in buf.h). */
#include "base/buf.h"

#include <stdio.h>
#include <string.h>

#define GROW_MIN 16 /* elements (rl_grow) or bytes (rl_buf) of a first allocation */

/* The new capacity for `need` slots: the larger of need, 2 * cap and
 * GROW_MIN, without overflowing `max`.  0 when need > max. */
static size_t next_cap(size_t cap, size_t need, size_t max) {
    if (need > max) return 0;
    size_t nc = cap > max / 2 ? max : cap * 2;
    if (nc < GROW_MIN) nc = GROW_MIN < max ? GROW_MIN : max;
    return nc < need ? need : nc;
}

rl_status rl_grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return RL_OK;
    if (elem == 0) return RL_ERR_INVALID;
    size_t nc = next_cap(*cap, need, SIZE_MAX / elem);
    if (!nc) return RL_ERR_LIMIT;
    void *np = rl_realloc(*p, nc * elem);
    if (!np) return RL_ERR_NOMEM;
    *p = np;
    *cap = nc;
    return RL_OK;
}

rl_status rl_grow_i32(void **p, int32_t *cap, int32_t need, size_t elem) {
    if (need < 0 || *cap < 0) return RL_ERR_LIMIT;
    if (need <= *cap) return RL_OK;
    if (elem == 0) return RL_ERR_INVALID;
    size_t max = SIZE_MAX / elem < (size_t)INT32_MAX ? SIZE_MAX / elem : (size_t)INT32_MAX;
    size_t nc = next_cap((size_t)*cap, (size_t)need, max);
    if (!nc) return RL_ERR_LIMIT;
    void *np = rl_realloc(*p, nc * elem);
    if (!np) return RL_ERR_NOMEM;
    *p = np;
    *cap = (int32_t)nc;
    return RL_OK;
}

rl_status rl_buf_reserve(rl_buf *b, size_t extra) {
    size_t need;
    if (!rl_add_size(b->n, extra, &need) || !rl_add_size(need, 1, &need)) return RL_ERR_LIMIT;
    if (need <= b->cap) return RL_OK;
    bool fresh = b->p == NULL;
    rl_status st = rl_grow((void **)&b->p, &b->cap, need, 1);
    if (st == RL_OK && fresh) b->p[0] = 0;
    return st;
}

rl_status rl_buf_append(rl_buf *b, const void *p, size_t n) {
    rl_status st = rl_buf_reserve(b, n);
    if (st) return st;
    if (n) memcpy(b->p + b->n, p, n);
    b->n += n;
    b->p[b->n] = 0;
    return RL_OK;
}

rl_status rl_buf_putc(rl_buf *b, char c) {
    return rl_buf_append(b, &c, 1);
}

rl_status rl_buf_puts(rl_buf *b, const char *s) {
    return rl_buf_append(b, s, strlen(s));
}

rl_status rl_buf_vprintf(rl_buf *b, const char *fmt, va_list ap) {
    va_list ap2;
    va_copy(ap2, ap);
    char small[256];
    int k = vsnprintf(small, sizeof small, fmt, ap2);
    va_end(ap2);
    if (k < 0) return RL_ERR_INVALID;
    if ((size_t)k < sizeof small) return rl_buf_append(b, small, (size_t)k);
    /* longer than the stack piece: format straight into the buffer */
    rl_status st = rl_buf_reserve(b, (size_t)k);
    if (st) return st;
    va_copy(ap2, ap);
    vsnprintf(b->p + b->n, (size_t)k + 1, fmt, ap2);
    va_end(ap2);
    b->n += (size_t)k;
    return RL_OK;
}

rl_status rl_buf_printf(rl_buf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    rl_status st = rl_buf_vprintf(b, fmt, ap);
    va_end(ap);
    return st;
}

void rl_buf_clear(rl_buf *b) {
    b->n = 0;
    if (b->p) b->p[0] = 0;
}

char *rl_buf_take(rl_buf *b, size_t *len) {
    if (!b->p && rl_buf_reserve(b, 0) != RL_OK) return NULL;
    char *p = b->p;
    if (len) *len = b->n;
    *b = (rl_buf){0};
    return p;
}

void rl_buf_free(rl_buf *b) {
    rl_free(b->p);
    *b = (rl_buf){0};
}
