/* Command-line parsing for every `redline` subcommand and the bench
 * programs (L9): one walker over argv and one set of number, size, range
 * and list parsers, so a flag means the same everywhere (`--kv-mem 1T` is
 * a size for `serve` and `bench-serve` alike).
 *
 * Use:
 *   rl_args A;
 *   rl_args_init(&A, "redline serve", argc, argv);   // argv[0] = the command name
 *   while (rl_args_next(&A)) {
 *       bool ok = true;
 *       if (rl_args_is(&A, "-h|--help")) { usage(stdout); return 0; }
 *       else if (rl_args_is(&A, "-m|--model")) ok = rl_args_str(&A, &model);
 *       else if (rl_args_is(&A, "--port")) ok = rl_args_i32(&A, 0, 65535, &port);
 *       else ok = rl_args_unknown(&A);
 *       if (!ok) return 2;
 *   }
 *
 * Every failure prints one line to stderr that names the command, the flag
 * and the bad value, and returns false; the caller exits with status 2:
 *   redline serve: bad value 'x' for --port: expected an integer in [0, 65535]
 *   redline serve: --port: missing value (see redline serve --help)
 *   redline serve: unknown option '--prot' (see redline serve --help)
 *
 * Sizes (rl_parse_size): a non-negative number, possibly fractional, with
 * an optional K, M, G or T (powers of 1024), then an optional "i" and an
 * optional "B": 1048576, 512M, 1.5G, 2GiB, 1T, 64kB.  At most 2^62 bytes.
 */
#ifndef RL_CLI_ARGS_H
#define RL_CLI_ARGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- pure parsers: no output; false on any trailing text or overflow ---- */
bool rl_parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out); /* decimal */
bool rl_parse_u64(const char *s, uint64_t *out);                        /* decimal, no sign */
bool rl_parse_f64(const char *s, double *out);                          /* finite */
bool rl_parse_size(const char *s, size_t *out);                         /* see the file comment */

/* ---- the argv walker ---- */
typedef struct rl_args {
    int argc;
    char **argv;      /* borrowed */
    int i;            /* index of the current argument */
    const char *cmd;  /* prefix of every message, e.g. "redline serve" (borrowed) */
    const char *flag; /* the current argument (argv[i]) */
} rl_args;

void rl_args_init(rl_args *a, const char *cmd, int argc, char **argv);
/* Moves to the next argument (a->flag); false when none is left. */
bool rl_args_next(rl_args *a);
/* True when the current argument is one of `names`, separated by '|'
 * ("-c|--ctx-size"). */
bool rl_args_is(const rl_args *a, const char *names);
/* True when the current argument is not an option ("x", or "-" alone). */
bool rl_args_positional(const rl_args *a);

/* Value takers: consume the argument after the flag and convert it. */
bool rl_args_str(rl_args *a, const char **out);
bool rl_args_i32(rl_args *a, int32_t lo, int32_t hi, int32_t *out);
bool rl_args_u64(rl_args *a, uint64_t *out);
bool rl_args_f32(rl_args *a, double lo, double hi, float *out); /* finite, in [lo, hi] */
bool rl_args_f64(rl_args *a, double lo, double hi, double *out);
bool rl_args_size(rl_args *a, bool nonzero, size_t *out); /* rl_parse_size (nonzero: > 0) */
/* "L" or "MIN:MAX" with lo <= MIN <= MAX <= hi; out = {MIN, MAX}. */
bool rl_args_range(rl_args *a, int32_t lo, int32_t hi, int32_t out[2]);
/* Comma-separated integers in [lo, hi], at most `max` of them. */
bool rl_args_list(rl_args *a, int32_t lo, int32_t hi, int32_t *out, int *n, int max);
/* One of the NULL-terminated `names`; *out gets its index. */
bool rl_args_choice(rl_args *a, const char *const *names, int *out);

/* Messages for the caller's own checks; all return false. */
bool rl_args_unknown(const rl_args *a); /* unknown option (or unexpected argument) */
bool rl_args_bad(const rl_args *a, const char *value, const char *fmt, ...)
    __attribute__((format(printf, 3, 4))); /* bad value 'V' for FLAG: ... */
bool rl_args_fail(const rl_args *a, const char *fmt, ...)
    __attribute__((format(printf, 2, 3))); /* CMD: ... */

#endif
