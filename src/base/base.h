/* redline base (L0): status codes and error messages, asserts, allocation
 * hooks, checked size arithmetic, logging, clocks.
 *
 * Errors come in three tiers (DESIGN.md §2.4):
 *   - untrusted input returns an rl_status and fills an rl_err whose message
 *     names the bad field (and, for files, its byte offset);
 *   - broken invariants hit RL_ASSERT, which stays on in release builds;
 *   - hot-loop checks use plain assert() (off with -DNDEBUG).
 */
#ifndef RL_BASE_H
#define RL_BASE_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "redline-types.h"

/* rl_status (append-only, fixed values), rl_err, rl_status_str and rl_free
 * are public: defined in include/redline-types.h. */

/* Fills *e (if non-NULL) and returns `code`, so callers can write
 * `return rl_err_set(err, RL_ERR_FORMAT, "tensor '%s': ...", name);`. */
rl_status rl_err_set(rl_err *e, rl_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Prefixes an existing message: "ctx: old message". */
rl_status rl_err_prefix(rl_err *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void rl_err_clear(rl_err *e);

/* RL_ASSERT: invariant check, on in every build; prints and aborts. */
#define RL_ASSERT(x)                                                                               \
    do {                                                                                           \
        if (!(x)) rl__assert_fail(#x, __FILE__, __LINE__);                                         \
    } while (0)
_Noreturn void rl__assert_fail(const char *expr, const char *file, int line);

/* ---- allocation: every allocation in the library goes through these so
 * tests can inject failure. ---- */
void *rl_malloc(size_t n);
void *rl_calloc(size_t count, size_t size); /* overflow-checked */
void *rl_realloc(void *p, size_t n);
/* rl_free(p): declared in redline-types.h */
char *rl_strndup(const char *s, size_t n);
/* Test hook: after `n` more successful allocations every allocation fails
 * (returns NULL).  n < 0 disables injection.  Not thread-safe by design. */
void rl_alloc_fail_after(long n);

/* ---- checked arithmetic: return false on overflow ---- */
static inline bool rl_mul_size(size_t a, size_t b, size_t *out) {
    return !__builtin_mul_overflow(a, b, out);
}
static inline bool rl_add_size(size_t a, size_t b, size_t *out) {
    return !__builtin_add_overflow(a, b, out);
}
static inline bool rl_mul_u64(uint64_t a, uint64_t b, uint64_t *out) {
    return !__builtin_mul_overflow(a, b, out);
}
static inline bool rl_add_u64(uint64_t a, uint64_t b, uint64_t *out) {
    return !__builtin_add_overflow(a, b, out);
}

/* ---- logging (diagnostics go to stderr; never in hot loops) ---- */
typedef enum rl_log_level {
    RL_LOG_DEBUG = 0,
    RL_LOG_INFO = 1,
    RL_LOG_WARN = 2,
    RL_LOG_ERROR = 3,
    RL_LOG_QUIET = 4,
} rl_log_level;
void rl_log_set_level(rl_log_level lvl);
rl_log_level rl_log_get_level(void);
void rl_log(rl_log_level lvl, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- UTF-8: rl_utf8_valid, rl_utf8_encode, rl_utf8_decode, ... ---- */
#include "base/utf8.h"

/* ---- clocks ---- */
uint64_t rl_time_ns(void); /* monotonic */
double rl_time_s(void);    /* monotonic, seconds */

#endif
