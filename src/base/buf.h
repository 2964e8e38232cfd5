/* Growable byte buffer / string builder and array growth (L0).
 *
 * rl_buf invariants:
 *   - a zero-initialised rl_buf ({0}) is a valid empty buffer; p stays NULL
 *     until something is appended or reserved;
 *   - once p is non-NULL, p[n] == 0 (the contents are a C string when they
 *     hold no NUL of their own) and n < cap;
 *   - every size computation is overflow-checked, and a failed call leaves
 *     the buffer exactly as it was (its contents are never lost);
 *   - memory comes from rl_malloc/rl_realloc (base.h), so allocation-failure
 *     injection reaches it.
 * The buffer owns p; rl_buf_take hands it to the caller.
 *
 * Errors: RL_ERR_NOMEM when an allocation fails, RL_ERR_LIMIT when a size
 * would overflow size_t, RL_ERR_INVALID for a bad format string.
 *
 * rl_grow / rl_grow_i32 grow a plain array (pointer + capacity kept by the
 * caller): capacity at least doubles, so n appends cost O(n) copying. */
#ifndef RL_BUF_H
#define RL_BUF_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "base/base.h"

typedef struct rl_buf {
    char *p;    /* owned; NUL-terminated at p[n] once non-NULL */
    size_t n;   /* bytes held, not counting the NUL */
    size_t cap; /* bytes allocated at p */
} rl_buf;

/* Makes room for `extra` more bytes (and the NUL) without reallocating. */
rl_status rl_buf_reserve(rl_buf *b, size_t extra);
/* Appends p[0..n) (p may be NULL when n == 0). */
rl_status rl_buf_append(rl_buf *b, const void *p, size_t n);
rl_status rl_buf_putc(rl_buf *b, char c);
rl_status rl_buf_puts(rl_buf *b, const char *s); /* strlen(s) bytes */
/* Appends printf-style output of any length. */
rl_status rl_buf_printf(rl_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
rl_status rl_buf_vprintf(rl_buf *b, const char *fmt, va_list ap);
/* n = 0, keeps the memory. */
void rl_buf_clear(rl_buf *b);
/* Hands the contents to the caller (free with rl_free) and leaves b empty
 * ({0}).  An empty buffer yields a fresh "" so the result is always a
 * string; NULL only if that allocation fails (b is then unchanged).
 * *len (may be NULL) gets the length. */
char *rl_buf_take(rl_buf *b, size_t *len);
/* Frees the memory and leaves b empty ({0}). */
void rl_buf_free(rl_buf *b);

/* Ensures the array *p, of *cap elements of `elem` bytes each, has room for
 * `need` elements.  When need > *cap it reallocates to the larger of need,
 * twice *cap and 16 elements and updates *p and *cap; on failure (NOMEM, or
 * LIMIT when the byte size would overflow) *p and *cap are unchanged and the
 * old array stays valid.  Contents are preserved; new slots are
 * uninitialised.  Usage: rl_grow((void **)&a, &cap, n + 1, sizeof *a). */
rl_status rl_grow(void **p, size_t *cap, size_t need, size_t elem);
/* The same for int32_t capacities: also RL_ERR_LIMIT when the capacity
 * would exceed INT32_MAX (or need < 0). */
rl_status rl_grow_i32(void **p, int32_t *cap, int32_t need, size_t elem);

#endif
