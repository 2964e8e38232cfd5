/* Figures for the benchmark commands (L9): order statistics over samples,
 * process CPU time, and JSON output through jansson (no hand-written JSON).
 *
 * JSON values are built with jansson by the caller (include <jansson.h>);
 * this header only forward-declares json_t so that it stays free of the
 * third-party header.
 */
#ifndef RL_CLI_REPORT_H
#define RL_CLI_REPORT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

struct json_t;

/* The q-quantile (q in [0, 1]) of v[0..n) by linear interpolation between
 * ranks (the median of an even count is the mean of the middle two).
 * Sorts v in place.  NAN when n <= 0. */
double rl_report_percentile(double *v, int32_t n, double q);

/* Mean, median and 99th percentile of v[0..n) (sorts v); all zero when
 * n <= 0. */
typedef struct rl_report_dist {
    double mean, p50, p99;
    int32_t n;
} rl_report_dist;
rl_report_dist rl_report_dist_of(double *v, int32_t n);

/* CPU seconds (user + system) this process has used, all threads. */
double rl_report_cpu_s(void);

/* A JSON number, or null when x is not finite (JSON has no NaN). */
struct json_t *rl_report_real(double x);
/* {"mean", "p50", "p99", "n"} of d. */
struct json_t *rl_report_dist_json(const rl_report_dist *d);

/* Writes `root` (stolen: freed here) to f as JSON and a newline: indented,
 * or on one line ("[1, 2]").  Returns 0, or -1 (message on stderr,
 * prefixed by `who`) when root is NULL (a failed build: out of memory) or
 * the write fails. */
int rl_report_json_write(FILE *f, struct json_t *root, bool one_line, const char *who);

#endif
