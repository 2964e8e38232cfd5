/* Benchmark figures and JSON output (see report.h). */
#include "cli/report.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <time.h>

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double rl_report_percentile(double *v, int32_t n, double q) {
    if (n <= 0) return NAN;
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    double pos = q * (n - 1);
    int32_t i = (int32_t)pos;
    if (i >= n - 1) return v[n - 1];
    double frac = pos - i;
    return v[i] * (1 - frac) + v[i + 1] * frac;
}

rl_report_dist rl_report_dist_of(double *v, int32_t n) {
    rl_report_dist d = {0, 0, 0, n > 0 ? n : 0};
    if (n <= 0) return d;
    double sum = 0;
    for (int32_t i = 0; i < n; i++) sum += v[i];
    d.mean = sum / n;
    d.p50 = rl_report_percentile(v, n, 0.50);
    d.p99 = rl_report_percentile(v, n, 0.99);
    return d;
}

double rl_report_cpu_s(void) {
    struct timespec ts;
    if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts) != 0) return 0;
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

json_t *rl_report_real(double x) {
    return isfinite(x) ? json_real(x) : json_null();
}

json_t *rl_report_dist_json(const rl_report_dist *d) {
    return json_pack("{s:o, s:o, s:o, s:i}", "mean", rl_report_real(d->mean), "p50",
                     rl_report_real(d->p50), "p99", rl_report_real(d->p99), "n", (int)d->n);
}

int rl_report_json_write(FILE *f, json_t *root, bool one_line, const char *who) {
    if (!root) {
        fprintf(stderr, "%s: out of memory building the JSON output\n", who);
        return -1;
    }
    int rc = json_dumpf(root, f, (one_line ? 0 : JSON_INDENT(1)) | JSON_REAL_PRECISION(10));
    json_decref(root);
    if (rc != 0 || fputc('\n', f) == EOF || fflush(f) != 0) {
        fprintf(stderr, "%s: cannot write the JSON output\n", who);
        return -1;
    }
    return 0;
}
