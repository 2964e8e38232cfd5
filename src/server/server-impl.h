/* Internals shared by the server's files (server.c: HTTP plumbing and
 * routes; oai.c: generation endpoints and SSE; metrics.c: Prometheus text;
 * webpage.c: the chat page).  Only src/server/ and its tests include this.
 */
#ifndef RL_SERVER_IMPL_H
#define RL_SERVER_IMPL_H

#include <jansson.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "base/base.h"
#include "base/buf.h"
#include "server/oai_parse.h"
#include "server/server.h"

#define RL_SERVER_VERSION "0.1.0"

/* ---- metrics (metrics.c) ---- */
#define RL_HIST_MAX_BUCKETS 32

typedef struct rl_hist {
    const double *bounds; /* upper bounds, ascending; +Inf is implicit */
    int n_bounds;
    uint64_t counts[RL_HIST_MAX_BUCKETS]; /* non-cumulative, [n_bounds + 1] */
    double sum;
    uint64_t count;
} rl_hist;

typedef struct rl_metrics {
    pthread_mutex_t mu;
    rl_hist ttft, itl, e2e;
    uint64_t finished[5];  /* by rl_finish_reason */
    uint64_t http[6];      /* responses by status class: [1] = 1xx .. [5] = 5xx */
    uint64_t rejected;     /* 503 for a full queue */
} rl_metrics;

void rl_metrics_init(rl_metrics *m);
void rl_metrics_free(rl_metrics *m);
void rl_hist_observe(rl_metrics *m, rl_hist *h, double v);
void rl_metrics_count_finish(rl_metrics *m, rl_finish_reason why);
void rl_metrics_count_http(rl_metrics *m, int status);
/* Prometheus text exposition of the server and engine metrics.  `st` may
 * be NULL while loading.  Returns a malloc'd string (caller frees). */
char *rl_metrics_render(rl_metrics *m, const rl_engine_stats *st, const char *model_id);

/* ---- server state ---- */
enum { RL_SRV_LOADING = 0, RL_SRV_READY = 1, RL_SRV_FAILED = 2 };

typedef struct rl_srv {
    rl_server_config cfg;
    _Atomic int state;          /* RL_SRV_* */
    rl_engine *eng;             /* set before state becomes READY */
    rl_vocab *vocab;            /* the engine's tokenizer and chat template (owned) */
    int32_t n_vocab, n_ctx;
    char model_id[256];
    char load_error[512];
    rl_metrics m;
    struct MHD_Daemon *daemon;
    atomic_int n_active;        /* generation requests in flight */
    atomic_bool draining;       /* SIGTERM received: refuse new generations */
    atomic_bool abort_all;      /* drain timed out: cancel everything */
    atomic_ullong seq;          /* ids of responses */
    int64_t created;            /* start time (unix seconds) */
} rl_srv;

/* One HTTP request (MHD's con_cls).  Reference-counted: the connection
 * holds one reference until MHD reports completion, a streaming job
 * another until its response is freed. */
typedef struct rl_srv_req {
    atomic_int refs;
    rl_srv *srv;
    struct MHD_Connection *conn;
    char method[12];
    char path[256];
    rl_buf body;        /* request body (NUL-terminated once non-empty) */
    bool too_big;
    int status;         /* HTTP status sent */
    double t0;          /* arrival (monotonic seconds) */
    _Atomic int n_prompt, n_gen; /* for the access log */
    _Atomic int finish; /* rl_finish_reason of choice 0, for the access log */
} rl_srv_req;

void rl_srv_req_unref(rl_srv_req *rq);

/* ---- responses (server.c) ---- */
/* Adds CORS headers (and nothing else) to r. */
void rl_srv_add_cors(struct MHD_Response *r);
/* Queues a JSON response; takes ownership of `body` (malloc'd). */
enum MHD_Result rl_srv_reply_text(rl_srv_req *rq, int status, const char *ctype, char *body, size_t len);
enum MHD_Result rl_srv_reply_json(rl_srv_req *rq, int status, json_t *body); /* steals body */
enum MHD_Result rl_srv_reply_error(rl_srv_req *rq, const rl_oai_err *e);
/* True when the client has closed its side of the connection. */
bool rl_srv_client_gone(struct MHD_Connection *c);
/* Text -> JSON string; invalid UTF-8 becomes U+FFFD.  Never NULL except
 * out of memory. */
json_t *rl_srv_json_text(const char *s, size_t n);

/* ---- endpoints (oai.c) ---- */
enum MHD_Result rl_srv_generate(rl_srv_req *rq, rl_oai_kind kind);
enum MHD_Result rl_srv_tokenize(rl_srv_req *rq);
enum MHD_Result rl_srv_detokenize(rl_srv_req *rq);

/* ---- the web page (webpage.c) ---- */
extern const char rl_srv_webpage[];
extern const size_t rl_srv_webpage_len;

#endif
