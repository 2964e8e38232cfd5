/* Implementation of base.h: errors, asserts, allocation hooks, logging, clocks
 * (UTF-8 is in utf8.c). */
#include "base.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

rl_status rl_err_set(rl_err *e, rl_status code, const char *fmt, ...) {
    if (e) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(e->msg, sizeof e->msg, fmt, ap);
        va_end(ap);
        e->code = code;
    }
    return code;
}

rl_status rl_err_prefix(rl_err *e, const char *fmt, ...) {
    if (!e) return RL_OK;
    char pre[256], old[sizeof e->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(pre, sizeof pre, fmt, ap);
    va_end(ap);
    memcpy(old, e->msg, sizeof old);
    size_t n = strlen(pre);
    if (n > sizeof e->msg - 3) n = sizeof e->msg - 3;
    memcpy(e->msg, pre, n);
    memcpy(e->msg + n, ": ", 2);
    size_t m = strlen(old);
    if (m > sizeof e->msg - n - 3) m = sizeof e->msg - n - 3;
    memcpy(e->msg + n + 2, old, m);
    e->msg[n + 2 + m] = 0;
    return e->code;
}

void rl_err_clear(rl_err *e) {
    if (e) {
        e->code = RL_OK;
        e->msg[0] = 0;
    }
}

const char *rl_status_str(rl_status s) {
    switch (s) {
    case RL_OK:
        return "ok";
    case RL_ERR_IO:
        return "i/o error";
    case RL_ERR_FORMAT:
        return "format error";
    case RL_ERR_NOMEM:
        return "out of memory";
    case RL_ERR_INVALID:
        return "invalid argument";
    case RL_ERR_UNSUPPORTED:
        return "unsupported";
    case RL_ERR_RANGE:
        return "out of range";
    case RL_ERR_LIMIT:
        return "limit exceeded";
    case RL_ERR_NOT_FOUND:
        return "not found";
    }
    return "unknown status";
}

void rl__assert_fail(const char *expr, const char *file, int line) {
    fprintf(stderr, "redline: assertion failed: %s (%s:%d)\n", expr, file, line);
    fflush(stderr);
    abort();
}

/* ---- allocation ---- */
static long g_fail_after = -1;

static bool alloc_should_fail(void) {
    if (g_fail_after < 0) return false;
    if (g_fail_after == 0) return true;
    g_fail_after--;
    return false;
}

void rl_alloc_fail_after(long n) {
    g_fail_after = n;
}

void *rl_malloc(size_t n) {
    if (alloc_should_fail()) return NULL;
    return malloc(n ? n : 1);
}

void *rl_calloc(size_t count, size_t size) {
    size_t total;
    if (!rl_mul_size(count, size, &total)) return NULL;
    if (alloc_should_fail()) return NULL;
    return calloc(total ? total : 1, 1);
}

void *rl_realloc(void *p, size_t n) {
    if (alloc_should_fail()) return NULL;
    return realloc(p, n ? n : 1);
}

void rl_free(void *p) {
    free(p);
}

char *rl_strndup(const char *s, size_t n) {
    char *d = rl_malloc(n + 1);
    if (!d) return NULL;
    memcpy(d, s, n);
    d[n] = 0;
    return d;
}

/* ---- logging ---- */
static rl_log_level g_log_level = RL_LOG_INFO;

void rl_log_set_level(rl_log_level lvl) {
    g_log_level = lvl;
}
rl_log_level rl_log_get_level(void) {
    return g_log_level;
}

void rl_log(rl_log_level lvl, const char *fmt, ...) {
    if (lvl < g_log_level) return;
    static const char *tag[] = {"debug", "info", "warn", "error", ""};
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    fprintf(stderr, "redline %s: %s\n", tag[lvl], buf);
}

/* ---- clocks ---- */
uint64_t rl_time_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

double rl_time_s(void) {
    return (double)rl_time_ns() * 1e-9;
}
