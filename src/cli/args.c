/* Command-line parsing shared by the subcommands (see args.h). */
#include "cli/args.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- pure parsers ---- */

bool rl_parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out) {
    if (!s || !*s) return false;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return false;
    *out = (int64_t)v;
    return true;
}

bool rl_parse_u64(const char *s, uint64_t *out) {
    if (!s || *s < '0' || *s > '9') return false; /* strtoull would accept "-1" */
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end) return false;
    *out = (uint64_t)v;
    return true;
}

bool rl_parse_f64(const char *s, double *out) {
    if (!s || !*s) return false;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v)) return false;
    *out = v;
    return true;
}

bool rl_parse_size(const char *s, size_t *out) {
    if (!s || !*s) return false;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || !(v >= 0) || !isfinite(v)) return false;
    double mul = 1;
    switch (*end) {
    case 'k':
    case 'K':
        mul = 1024.0;
        end++;
        break;
    case 'm':
    case 'M':
        mul = 1024.0 * 1024;
        end++;
        break;
    case 'g':
    case 'G':
        mul = 1024.0 * 1024 * 1024;
        end++;
        break;
    case 't':
    case 'T':
        mul = 1024.0 * 1024 * 1024 * 1024;
        end++;
        break;
    default:
        break;
    }
    if (mul > 1 && (*end == 'i' || *end == 'I')) end++;
    if (*end == 'b' || *end == 'B') end++;
    if (*end) return false;
    v *= mul;
    if (v > 4611686018427387904.0) return false; /* 2^62 */
    *out = (size_t)v;
    return true;
}

/* ---- the walker ---- */

void rl_args_init(rl_args *a, const char *cmd, int argc, char **argv) {
    a->argc = argc;
    a->argv = argv;
    a->i = 0;
    a->cmd = cmd;
    a->flag = NULL;
}

bool rl_args_next(rl_args *a) {
    if (++a->i >= a->argc) {
        a->flag = NULL;
        return false;
    }
    a->flag = a->argv[a->i];
    return true;
}

bool rl_args_is(const rl_args *a, const char *names) {
    size_t fl = strlen(a->flag);
    for (const char *p = names; *p;) {
        size_t n = strcspn(p, "|");
        if (n == fl && !memcmp(p, a->flag, n)) return true;
        p += n;
        if (*p == '|') p++;
    }
    return false;
}

bool rl_args_positional(const rl_args *a) {
    return a->flag[0] != '-' || !a->flag[1];
}

bool rl_args_fail(const rl_args *a, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", a->cmd);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return false;
}

bool rl_args_bad(const rl_args *a, const char *value, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: bad value '%s' for %s: ", a->cmd, value, a->flag);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return false;
}

bool rl_args_unknown(const rl_args *a) {
    if (rl_args_positional(a))
        return rl_args_fail(a, "unexpected argument '%s' (see %s --help)", a->flag, a->cmd);
    return rl_args_fail(a, "unknown option '%s' (see %s --help)", a->flag, a->cmd);
}

bool rl_args_str(rl_args *a, const char **out) {
    if (a->i + 1 >= a->argc)
        return rl_args_fail(a, "%s: missing value (see %s --help)", a->flag, a->cmd);
    *out = a->argv[++a->i];
    return true;
}

bool rl_args_i32(rl_args *a, int32_t lo, int32_t hi, int32_t *out) {
    const char *v = NULL;
    if (!rl_args_str(a, &v)) return false;
    int64_t x = 0;
    if (!rl_parse_i64(v, lo, hi, &x))
        return rl_args_bad(a, v, "expected an integer in [%d, %d]", (int)lo, (int)hi);
    *out = (int32_t)x;
    return true;
}

bool rl_args_u64(rl_args *a, uint64_t *out) {
    const char *v = NULL;
    if (!rl_args_str(a, &v)) return false;
    if (!rl_parse_u64(v, out)) return rl_args_bad(a, v, "expected a non-negative integer");
    return true;
}

bool rl_args_f64(rl_args *a, double lo, double hi, double *out) {
    const char *v = NULL;
    if (!rl_args_str(a, &v)) return false;
    double x = 0;
    if (!rl_parse_f64(v, &x) || x < lo || x > hi)
        return rl_args_bad(a, v, "expected a number in [%g, %g]", lo, hi);
    *out = x;
    return true;
}

bool rl_args_f32(rl_args *a, double lo, double hi, float *out) {
    double x = 0;
    if (!rl_args_f64(a, lo, hi, &x)) return false;
    *out = (float)x;
    return true;
}

bool rl_args_size(rl_args *a, bool nonzero, size_t *out) {
    const char *v = NULL;
    if (!rl_args_str(a, &v)) return false;
    size_t x = 0;
    if (!rl_parse_size(v, &x) || (nonzero && x == 0))
        return rl_args_bad(a, v, "expected a size such as 512M, 2G or 1T%s",
                           nonzero ? " (not 0)" : "");
    *out = x;
    return true;
}

bool rl_args_range(rl_args *a, int32_t lo, int32_t hi, int32_t out[2]) {
    const char *v = NULL;
    if (!rl_args_str(a, &v)) return false;
    const char *colon = strchr(v, ':');
    int64_t x, y;
    if (!colon) {
        if (!rl_parse_i64(v, lo, hi, &x))
            return rl_args_bad(a, v, "expected L or MIN:MAX, integers in [%d, %d]", (int)lo,
                               (int)hi);
        out[0] = out[1] = (int32_t)x;
        return true;
    }
    char buf[32];
    size_t n = (size_t)(colon - v);
    if (n == 0 || n >= sizeof buf) return rl_args_bad(a, v, "expected L or MIN:MAX");
    memcpy(buf, v, n);
    buf[n] = 0;
    if (!rl_parse_i64(buf, lo, hi, &x) || !rl_parse_i64(colon + 1, lo, hi, &y))
        return rl_args_bad(a, v, "expected L or MIN:MAX, integers in [%d, %d]", (int)lo, (int)hi);
    if (x > y) return rl_args_bad(a, v, "MIN %lld exceeds MAX %lld", (long long)x, (long long)y);
    out[0] = (int32_t)x;
    out[1] = (int32_t)y;
    return true;
}

bool rl_args_list(rl_args *a, int32_t lo, int32_t hi, int32_t *out, int *n, int max) {
    const char *v = NULL;
    if (!rl_args_str(a, &v)) return false;
    *n = 0;
    for (const char *p = v; *p;) {
        size_t k = strcspn(p, ",");
        char buf[32];
        int64_t x;
        if (k == 0 || k >= sizeof buf)
            return rl_args_bad(a, v, "expected integers separated by commas");
        memcpy(buf, p, k);
        buf[k] = 0;
        if (!rl_parse_i64(buf, lo, hi, &x))
            return rl_args_bad(a, v, "'%s' is not an integer in [%d, %d]", buf, (int)lo, (int)hi);
        if (*n >= max) return rl_args_bad(a, v, "at most %d values", max);
        out[(*n)++] = (int32_t)x;
        p += k;
        if (*p == ',' && !*++p) return rl_args_bad(a, v, "trailing comma");
    }
    if (*n == 0) return rl_args_bad(a, v, "expected at least one value");
    return true;
}

bool rl_args_choice(rl_args *a, const char *const *names, int *out) {
    const char *v = NULL;
    if (!rl_args_str(a, &v)) return false;
    for (int k = 0; names[k]; k++)
        if (!strcmp(v, names[k])) {
            *out = k;
            return true;
        }
    char list[256];
    size_t o = 0;
    for (int k = 0; names[k] && o < sizeof list; k++)
        o += (size_t)snprintf(list + o, sizeof list - o, "%s%s", k ? ", " : "", names[k]);
    return rl_args_bad(a, v, "expected one of %s", list);
}
