/* Server metrics: latency histograms and counters kept by the HTTP side,
 * plus the engine's own counters, rendered as Prometheus text with
 * vLLM-style names (redline:num_requests_running, ...), and the load and
 * cache gauges again under the names inference gateways scrape by default
 * (vllm:num_requests_waiting, vllm:kv_cache_usage_perc, sglang:num_queue_reqs,
 * ...; the list is in docs/SCALE.md), so an endpoint picker needs no
 * per-engine configuration.  Aliases carry the same values as redline's own.
 *
 * Invariants: histogram counts are stored per bucket (non-cumulative) and
 * made cumulative only when rendered; every update holds m->mu, which is
 * never held while calling into the engine.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "server/server-impl.h"

static const double ttft_bounds[] = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06,  0.08,
                                     0.1,   0.25,  0.5,  0.75, 1.0,  2.5,   5.0,
                                     7.5,   10.0,  20.0, 40.0, 80.0, 160.0, 640.0};
static const double itl_bounds[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1,
                                    0.15,  0.2,    0.3,   0.4,  0.5,   0.75, 1.0,   2.5,
                                    5.0,   7.5,    10.0,  20.0, 40.0,  80.0};
static const double e2e_bounds[] = {0.05, 0.1,   0.3,   0.5,   0.8,   1.0,   1.5,  2.0,
                                    2.5,  5.0,   10.0,  15.0,  20.0,  30.0,  40.0, 50.0,
                                    60.0, 120.0, 240.0, 480.0, 960.0, 1920.0};

#define NB(a) ((int)(sizeof(a) / sizeof(a[0])))
_Static_assert(NB(ttft_bounds) < RL_HIST_MAX_BUCKETS && NB(itl_bounds) < RL_HIST_MAX_BUCKETS &&
                   NB(e2e_bounds) < RL_HIST_MAX_BUCKETS,
               "histogram bucket arrays too small");

void rl_metrics_init(rl_metrics *m) {
    memset(m, 0, sizeof *m);
    pthread_mutex_init(&m->mu, NULL);
    m->ttft.bounds = ttft_bounds;
    m->ttft.n_bounds = NB(ttft_bounds);
    m->itl.bounds = itl_bounds;
    m->itl.n_bounds = NB(itl_bounds);
    m->e2e.bounds = e2e_bounds;
    m->e2e.n_bounds = NB(e2e_bounds);
}

void rl_metrics_free(rl_metrics *m) {
    pthread_mutex_destroy(&m->mu);
}

void rl_hist_observe(rl_metrics *m, rl_hist *h, double v) {
    if (!isfinite(v) || v < 0) v = 0;
    int b = 0;
    while (b < h->n_bounds && v > h->bounds[b]) b++;
    pthread_mutex_lock(&m->mu);
    h->counts[b]++;
    h->sum += v;
    h->count++;
    pthread_mutex_unlock(&m->mu);
}

void rl_metrics_count_finish(rl_metrics *m, rl_finish_reason why) {
    if ((int)why < 0 || (int)why > 4) return;
    pthread_mutex_lock(&m->mu);
    m->finished[why]++;
    pthread_mutex_unlock(&m->mu);
}

void rl_metrics_count_http(rl_metrics *m, int status) {
    int c = status / 100;
    if (c < 1 || c > 5) return;
    pthread_mutex_lock(&m->mu);
    m->http[c]++;
    if (status == 503) m->rejected++;
    pthread_mutex_unlock(&m->mu);
}

/* ---- rendering into a growable buffer (rl_buf; a failed append leaves
 * the buffer as it was, so one check of `ok` at the end suffices) ---- */
typedef struct sbuf {
    rl_buf b;
    bool oom;
} sbuf;

static void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf *b, const char *fmt, ...) {
    if (b->oom) return;
    va_list ap;
    va_start(ap, fmt);
    b->oom = rl_buf_vprintf(&b->b, fmt, ap) != RL_OK;
    va_end(ap);
}

static void gauge(sbuf *b, const char *name, const char *help, const char *lbl, double v) {
    sb_printf(b, "# HELP %s %s\n# TYPE %s gauge\n%s{%s} %.17g\n", name, help, name, name, lbl, v);
}

static void counter(sbuf *b, const char *name, const char *help, const char *lbl, double v) {
    sb_printf(b, "# HELP %s %s\n# TYPE %s counter\n%s{%s} %.17g\n", name, help, name, name, lbl, v);
}

static void hist(sbuf *b, const char *name, const char *help, const char *lbl, const rl_hist *h) {
    sb_printf(b, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    uint64_t cum = 0;
    for (int i = 0; i < h->n_bounds; i++) {
        cum += h->counts[i];
        sb_printf(b, "%s_bucket{%s,le=\"%g\"} %llu\n", name, lbl, h->bounds[i],
                  (unsigned long long)cum);
    }
    cum += h->counts[h->n_bounds];
    sb_printf(b, "%s_bucket{%s,le=\"+Inf\"} %llu\n", name, lbl, (unsigned long long)cum);
    sb_printf(b, "%s_sum{%s} %.17g\n%s_count{%s} %llu\n", name, lbl, h->sum, name, lbl,
              (unsigned long long)h->count);
}

/* The gateway-facing aliases.  vLLM counts prefix-cache queries and hits
 * in tokens: redline's are whole blocks, so both are scaled by the block
 * size (the hit ratio is the same). */
static void render_aliases(sbuf *b, const char *lbl, const rl_engine_stats *st) {
    double kv = st->kv_blocks_total ? (double)st->kv_blocks_used / st->kv_blocks_total : 0.0;
    double bs = st->block_size;
    gauge(b, "vllm:num_requests_running", "Alias of redline:num_requests_running.", lbl,
          st->n_running);
    gauge(b, "vllm:num_requests_waiting", "Alias of redline:num_requests_waiting.", lbl,
          st->n_waiting);
    gauge(b, "vllm:kv_cache_usage_perc", "Alias of redline:kv_cache_usage_perc.", lbl, kv);
    gauge(b, "vllm:gpu_cache_usage_perc", "Alias of redline:kv_cache_usage_perc (older name).", lbl,
          kv);
    counter(b, "vllm:prefix_cache_queries_total",
            "redline:prefix_cache_queries_total in tokens (blocks x block size).", lbl,
            (double)st->prefix_queries * bs);
    counter(b, "vllm:prefix_cache_hits_total",
            "redline:prefix_cache_hits_total in tokens (blocks x block size).", lbl,
            (double)st->prefix_hits * bs);
    gauge(b, "sglang:num_running_reqs", "Alias of redline:num_requests_running.", lbl,
          st->n_running);
    gauge(b, "sglang:num_queue_reqs", "Alias of redline:num_requests_waiting.", lbl, st->n_waiting);
    gauge(b, "sglang:token_usage", "Alias of redline:kv_cache_usage_perc.", lbl, kv);
}

char *rl_metrics_render(rl_metrics *m, const rl_engine_stats *st, const char *model_id) {
    sbuf b = {0};
    if (rl_buf_reserve(&b.b, 8192)) return NULL;
    /* model ids come from file names: keep label values to a safe charset */
    char id[128];
    size_t j = 0;
    for (size_t i = 0; model_id[i] && j + 1 < sizeof id; i++) {
        char c = model_id[i];
        id[j++] = (c == '"' || c == '\\' || (unsigned char)c < 0x20) ? '_' : c;
    }
    id[j] = 0;
    char lbl[160];
    snprintf(lbl, sizeof lbl, "model_name=\"%s\"", id);

    rl_engine_stats z;
    memset(&z, 0, sizeof z);
    if (!st) st = &z;
    gauge(&b, "redline:num_requests_running", "Requests in the running batch.", lbl, st->n_running);
    gauge(&b, "redline:num_requests_waiting", "Requests waiting to be scheduled.", lbl,
          st->n_waiting);
    gauge(&b, "redline:kv_cache_usage_perc", "Fraction of KV-cache blocks in use (1 = full).", lbl,
          st->kv_blocks_total ? (double)st->kv_blocks_used / st->kv_blocks_total : 0.0);
    gauge(&b, "redline:kv_blocks_total", "Usable KV-cache blocks.", lbl, st->kv_blocks_total);
    gauge(&b, "redline:kv_blocks_used", "KV-cache blocks held by requests.", lbl,
          st->kv_blocks_used);
    gauge(&b, "redline:kv_blocks_cached", "Free KV-cache blocks kept for prefix reuse.", lbl,
          st->kv_blocks_cached);
    counter(&b, "redline:prompt_tokens_total", "Prompt tokens admitted.", lbl,
            (double)st->prompt_tokens);
    counter(&b, "redline:generation_tokens_total", "Tokens generated.", lbl,
            (double)st->generation_tokens);
    counter(&b, "redline:prefix_cache_queries_total", "Prefix-cache lookups, in blocks.", lbl,
            (double)st->prefix_queries);
    counter(&b, "redline:prefix_cache_hits_total", "Prefix-cache hits, in blocks.", lbl,
            (double)st->prefix_hits);
    counter(&b, "redline:num_preemptions_total", "Requests preempted for lack of KV blocks.", lbl,
            (double)st->preemptions);
    counter(&b, "redline:spec_decode_num_draft_tokens_total", "Draft tokens proposed.", lbl,
            (double)st->spec_proposed);
    counter(&b, "redline:spec_decode_num_accepted_tokens_total", "Draft tokens accepted.", lbl,
            (double)st->spec_accepted);
    counter(&b, "redline:spec_decode_num_verifications_total", "Speculative verifications run.",
            lbl, (double)st->spec_verifies);
    gauge(&b, "redline:spec_decode_acceptance_rate", "Accepted / proposed draft tokens.", lbl,
          st->spec_proposed ? (double)st->spec_accepted / (double)st->spec_proposed : 0.0);
    gauge(&b, "redline:spec_decode_mean_accepted_length",
          "Mean tokens emitted per verification (accepted drafts + 1).", lbl,
          st->spec_verifies ? 1.0 + (double)st->spec_accepted / (double)st->spec_verifies : 0.0);
    counter(&b, "redline:prompt_tokens_cached_total",
            "Prompt tokens served from the prefix cache (not recomputed).", lbl,
            (double)st->cached_prompt_tokens);
    render_aliases(&b, lbl, st);
    counter(&b, "redline:engine_steps_total", "Engine steps run.", lbl, (double)st->steps);
    counter(&b, "redline:engine_busy_seconds_total", "Seconds the engine spent in steps.", lbl,
            st->busy_s);

    pthread_mutex_lock(&m->mu);
    static const char *why[] = {"none", "stop", "length", "abort", "error"};
    sb_printf(&b, "# HELP redline:request_success_total Finished requests by finish reason.\n"
                  "# TYPE redline:request_success_total counter\n");
    for (int i = 1; i < 5; i++)
        sb_printf(&b, "redline:request_success_total{%s,finished_reason=\"%s\"} %llu\n", lbl,
                  why[i], (unsigned long long)m->finished[i]);
    sb_printf(&b, "# HELP redline:http_responses_total HTTP responses by status class.\n"
                  "# TYPE redline:http_responses_total counter\n");
    for (int i = 1; i < 6; i++)
        sb_printf(&b, "redline:http_responses_total{%s,code=\"%dxx\"} %llu\n", lbl, i,
                  (unsigned long long)m->http[i]);
    hist(&b, "redline:time_to_first_token_seconds", "Time from submit to the first token.", lbl,
         &m->ttft);
    hist(&b, "redline:inter_token_latency_seconds", "Time between consecutive tokens.", lbl,
         &m->itl);
    hist(&b, "redline:e2e_request_latency_seconds", "Time from arrival to the last token.", lbl,
         &m->e2e);
    pthread_mutex_unlock(&m->mu);
    if (b.oom) {
        rl_buf_free(&b.b);
        return NULL;
    }
    return rl_buf_take(&b.b, NULL);
}
