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
#include "chat/chat.h"
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
    uint64_t finished[5]; /* by rl_finish_reason */
    uint64_t http[6];     /* responses by status class: [1] = 1xx .. [5] = 5xx */
    uint64_t rejected;    /* 503 for a full queue */
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
    _Atomic int state; /* RL_SRV_* */
    rl_engine *eng;    /* set before state becomes READY */
    rl_vocab *vocab;   /* the engine's tokenizer and chat template (owned) */
    int32_t n_vocab, n_ctx;
    char model_id[256];
    char load_error[512];
    rl_metrics m;
    struct MHD_Daemon *daemon;
    atomic_int n_active;   /* generation requests in flight */
    atomic_int n_http;     /* HTTP requests between their first byte handled and their end */
    atomic_bool draining;  /* SIGTERM received: refuse new generations */
    atomic_bool abort_all; /* drain timed out: cancel everything */
    atomic_ullong seq;     /* ids of responses */
    int64_t created;       /* start time (unix seconds) */
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
    rl_buf body; /* request body (NUL-terminated once non-empty) */
    bool too_big;
    int status;                  /* HTTP status sent */
    double t0;                   /* arrival (monotonic seconds) */
    _Atomic int n_prompt, n_gen; /* for the access log */
    _Atomic int finish;          /* rl_finish_reason of choice 0, for the access log */
} rl_srv_req;

void rl_srv_req_unref(rl_srv_req *rq);

/* ---- responses (server.c) ---- */
/* Adds CORS headers (and nothing else) to r. */
void rl_srv_add_cors(struct MHD_Response *r);
/* Queues a JSON response; takes ownership of `body` (malloc'd). */
enum MHD_Result rl_srv_reply_text(rl_srv_req *rq, int status, const char *ctype, char *body,
                                  size_t len);
enum MHD_Result rl_srv_reply_json(rl_srv_req *rq, int status, json_t *body); /* steals body */
enum MHD_Result rl_srv_reply_error(rl_srv_req *rq, const rl_oai_err *e);
/* True when the client has closed its side of the connection. */
bool rl_srv_client_gone(struct MHD_Connection *c);
/* Text -> JSON string; invalid UTF-8 becomes U+FFFD.  Never NULL except
 * out of memory. */
json_t *rl_srv_json_text(const char *s, size_t n);

/* ---- endpoints (oai.c) ---- */
enum MHD_Result rl_srv_generate(rl_srv_req *rq, rl_oai_kind kind);
enum MHD_Result rl_srv_messages(rl_srv_req *rq);  /* POST /v1/messages */
enum MHD_Result rl_srv_responses(rl_srv_req *rq); /* POST /v1/responses */
enum MHD_Result rl_srv_infill(rl_srv_req *rq);    /* POST /infill (llama-server's shapes) */
enum MHD_Result rl_srv_tokenize(rl_srv_req *rq);
enum MHD_Result rl_srv_embeddings(rl_srv_req *rq); /* POST /v1/embeddings (embeddings.c) */
enum MHD_Result rl_srv_detokenize(rl_srv_req *rq);

/* ---- probes and info routes for routers (info.c) ---- */
enum MHD_Result rl_srv_livez(rl_srv_req *rq);           /* GET /livez */
enum MHD_Result rl_srv_health_generate(rl_srv_req *rq); /* GET /health_generate */
enum MHD_Result rl_srv_server_info(rl_srv_req *rq);     /* GET /server_info */
enum MHD_Result rl_srv_model_info(rl_srv_req *rq);      /* GET /model_info */
enum MHD_Result rl_srv_get_load(rl_srv_req *rq);        /* GET /get_load */

/* ---- tool calls and reasoning (oai_tools.c) ---- */
#define RL_SRV_MAX_CALLS 64 /* calls of one choice that are streamed */

/* How a chat job's output is read. */
typedef struct rl_srv_tools {
    rl_chat_format fmt; /* the template's */
    rl_chat_syntax syn; /* what rl_chat_parse looks for in this request's output */
    bool active;        /* the output goes through rl_chat_parse (tools or reasoning) */
    char prefix[32];    /* put in front of the output before parsing (a control-token tag
                           a required-call grammar cannot write), "" when none */
} rl_srv_tools;

/* What one streaming choice has sent so far. */
typedef struct rl_srv_stream {
    size_t sent_content, sent_reasoning;
    int32_t n_calls;
    size_t sent_args[RL_SRV_MAX_CALLS];
} rl_srv_stream;

/* The template's format and the request's syntax (before rendering). */
void rl_srv_tools_init(rl_srv *s, const rl_oai_req *r, rl_srv_tools *t);
/* The prompt text ends with an open think block ("<think>" then blanks). */
bool rl_srv_opens_think(const char *prompt, size_t len);
/* After rendering: notes whether the prompt left a think block open. */
void rl_srv_tools_prompt(rl_srv_tools *t, const char *prompt, size_t len);
/* The request needs the full template context (tools, tool calls or
 * results, chat_template_kwargs) rather than {role, content} messages. */
bool rl_srv_chat_needs_ctx(const rl_oai_req *r);
/* Renders r through the template with that context; *out as rl_chat_render. */
bool rl_srv_render_ctx(rl_srv *s, const rl_oai_req *r, const rl_chat_format *f, bool add_gen,
                       char **out, size_t *len, rl_oai_err *e);
/* Compiles r's tool-call grammar into r->gp.grammar (nothing for no tools,
 * tool_choice none, or auto beside a response_format); t->prefix is set
 * when the output must be read behind a tag. */
bool rl_srv_tool_grammar(rl_srv *s, rl_oai_req *r, rl_srv_tools *t, rl_oai_err *e);
/* The final message of a choice's text: {role, content, reasoning_content?,
 * tool_calls?}; *has_calls when it holds calls.  NULL out of memory.
 * `seed` makes the call ids. */
json_t *rl_srv_tools_message(const rl_srv_tools *t, uint64_t seed, const char *p, size_t n,
                             bool *has_calls);
/* The delta of a streaming choice whose text is now p[0..n) (`final` at the
 * end), NULL when nothing new can be sent; st records what was sent. */
json_t *rl_srv_tools_delta(const rl_srv_tools *t, rl_srv_stream *st, uint64_t seed, const char *p,
                           size_t n, bool final, bool *has_calls);

/* ---- fill-in-the-middle (fim.c) ---- */
/* The model has the FIM prefix, suffix and middle tokens; else a 400
 * naming r's suffix field. */
bool rl_srv_fim_supported(rl_srv *s, const rl_oai_req *r, rl_oai_err *e);
/* The FIM prompt of r (r->fim) as llama.cpp's server orders it (see
 * fim.c); *ids allocated with rl_malloc (caller frees). */
bool rl_srv_fim_prompt(rl_srv *s, const rl_oai_req *r, int32_t **ids, int32_t *n, rl_oai_err *e);

/* ---- Anthropic Messages API (anthropic.c) ---- */
/* What a streaming /v1/messages response has opened. */
typedef struct rl_srv_anth {
    int32_t n_blocks;  /* content blocks started */
    char open_kind;    /* the open block: 'r' thinking, 't' text, 'c' tool_use; 0 = none */
    int32_t open_call; /* the call index of the open tool_use block (-1 before any) */
} rl_srv_anth;

/* rq is on /v1/messages: its errors take Anthropic's shape. */
bool rl_srv_is_anthropic(const rl_srv_req *rq);
/* {"type":"error","error":{...}} for e (caller frees with free()). */
char *rl_srv_anth_err_json(const rl_oai_err *e);
/* A /v1/messages body -> the equivalent OpenAI chat body (*out: malloc'd
 * JSON text, caller frees with free()); false with *e naming the field. */
bool rl_srv_anth_to_oai(const char *body, size_t len, char **out, rl_oai_err *e);
/* Renames the shared parser's field names to Anthropic's in e->param. */
void rl_srv_anth_fix_param(rl_oai_err *e);
/* The response message from the OpenAI-shaped message `msg` (borrowed). */
json_t *rl_srv_anth_message(const char *id, const char *model, json_t *msg, const char *finish,
                            int n_in, int n_out);
/* Streaming: message_start; the events of one OpenAI-shaped delta; the
 * closing events.  All append SSE text to out. */
void rl_srv_anth_start(const char *id, const char *model, int n_in, rl_buf *out);
void rl_srv_anth_events(rl_srv_anth *st, json_t *delta, rl_buf *out);
void rl_srv_anth_finish(rl_srv_anth *st, const char *finish, int n_out, rl_buf *out);

/* ---- OpenAI Responses API (responses.c) ---- */
/* What a streaming /v1/responses response has opened. */
typedef struct rl_srv_resp {
    int64_t seq;     /* sequence_number of the next event */
    int32_t n_items; /* output items added */
    char open_kind;  /* the open item: 'r' reasoning, 't' message, 'c' function_call; 0 = none */
    rl_buf acc;      /* the open item's text or arguments so far */
    char call_id[64], call_name[80];
} rl_srv_resp;

/* A /v1/responses body -> the equivalent chat body (as rl_srv_anth_to_oai). */
bool rl_srv_resp_to_oai(const char *body, size_t len, char **out, rl_oai_err *e);
/* The Responses API's field names in e. */
void rl_srv_resp_fix_param(rl_oai_err *e);
/* The response object from the OpenAI-shaped message msg (borrowed);
 * status NULL = from finish ("completed", or "incomplete" for length). */
json_t *rl_srv_resp_object(const char *id, int64_t created, const char *model, json_t *msg,
                           const char *finish, int n_in, int n_out, const char *status);
/* Streaming: response.created; the events of one chat delta; the closing
 * events and response.completed with final_resp (stolen).  SSE to out. */
void rl_srv_resp_start(rl_srv_resp *st, const char *id, int64_t created, const char *model,
                       rl_buf *out);
void rl_srv_resp_events(rl_srv_resp *st, const char *id, json_t *delta, rl_buf *out);
void rl_srv_resp_finish(rl_srv_resp *st, const char *id, json_t *final_resp, rl_buf *out);
/* Streaming: the generation failed: response.failed with the response
 * (status "failed", error {code, message}). */
void rl_srv_resp_fail(rl_srv_resp *st, const char *id, int64_t created, const char *model,
                      const rl_oai_err *e, rl_buf *out);

/* ---- the web page (webpage.c) ---- */
extern const char rl_srv_webpage[];
extern const size_t rl_srv_webpage_len;

#endif
