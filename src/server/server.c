/* The HTTP side of `redline serve`: libmicrohttpd daemon (one thread per
 * connection), routing, limits, authentication, CORS, access log, the
 * background model load, the busy-summary logger and graceful shutdown.
 * Generation endpoints live in oai.c, metrics in metrics.c, the probes and
 * info routes routers read (/livez, /server_info, /get_load, ...) in info.c.
 *
 * Request flow: MHD calls on_request first with *con_cls == NULL (we
 * allocate an rl_srv_req and check headers: size, Content-Length, auth),
 * then once per body chunk (appended, bounded by max_body), then a last
 * time with no data, where the route runs and queues exactly one response.
 *
 * Invariants:
 *   - every response carries CORS headers and, for errors, OpenAI error JSON;
 *   - no route aborts on bad input; every limit maps to a 4xx naming it;
 *   - the engine is touched only after state == RL_SRV_READY, and only
 *     through include/redline.h;
 *   - shutdown: stop accepting (quiesce), wait up to drain_s for in-flight
 *     generations, then cancel the rest, stop MHD, free the engine.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <nettle/memops.h>
#include <nettle/sha2.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "base/env.h"
#include "server/server-impl.h"

void rl_server_config_default(rl_server_config *c) {
    memset(c, 0, sizeof *c);
    c->host = "127.0.0.1";
    c->port = 8080;
    rl_engine_params_default(&c->ep);
    c->max_queue = 256;
    c->max_body = 4u << 20;
    c->max_header = 32u << 10;
    c->max_conns = 512;
    c->drain_s = 30;
    c->log_interval_s = 10;
}

/* ---- small helpers ---- */
json_t *rl_srv_json_text(const char *s, size_t n) {
    json_t *j = json_stringn(s, n);
    if (j) return j;
    /* invalid UTF-8 (or NUL): rebuild lossily, U+FFFD per bad byte */
    char *buf = malloc(n * 3 + 1);
    if (!buf) return NULL;
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        /* the longest whole, NUL-free UTF-8 run of at most 4 bytes at i */
        size_t l = n - i < 4 ? n - i : 4;
        while (l > 0 && (memchr(s + i, 0, l) || !rl_utf8_valid(s + i, l))) l--;
        if (l == 0) {
            memcpy(buf + o, "\xEF\xBF\xBD", 3);
            o += 3;
            i++;
        } else {
            memcpy(buf + o, s + i, l);
            o += l;
            i += l;
        }
    }
    j = json_stringn(buf, o);
    free(buf);
    return j;
}

bool rl_srv_client_gone(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci) return true;
    struct pollfd p = {.fd = ci->connect_fd, .events = POLLIN | POLLRDHUP};
    if (poll(&p, 1, 0) <= 0) return false;
    if (p.revents & (POLLHUP | POLLERR | POLLNVAL | POLLRDHUP)) return true;
    if (p.revents & POLLIN) {
        char ch;
        ssize_t r = recv(ci->connect_fd, &ch, 1, MSG_PEEK | MSG_DONTWAIT);
        if (r == 0) return true; /* orderly close; r > 0 is a pipelined request */
        if (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return true;
    }
    return false;
}

void rl_srv_add_cors(struct MHD_Response *r) {
    MHD_add_response_header(r, "Access-Control-Allow-Origin", "*");
    MHD_add_response_header(r, "Access-Control-Allow-Methods", "GET, POST, OPTIONS");
    MHD_add_response_header(
        r, "Access-Control-Allow-Headers",
        "Authorization, Content-Type, OpenAI-Organization, OpenAI-Project, x-api-key, "
        "anthropic-version, "
        "X-Stainless-Arch, X-Stainless-Lang, X-Stainless-OS, X-Stainless-Package-Version, "
        "X-Stainless-Runtime, X-Stainless-Runtime-Version, X-Stainless-Retry-Count, "
        "X-Stainless-Async, X-Stainless-Timeout, X-Stainless-Read-Timeout");
    MHD_add_response_header(r, "Access-Control-Max-Age", "86400");
}

enum MHD_Result rl_srv_reply_text(rl_srv_req *rq, int status, const char *ctype, char *body,
                                  size_t len) {
    struct MHD_Response *r = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", ctype);
    rl_srv_add_cors(r);
    if (status == 503 || status == 429) MHD_add_response_header(r, "Retry-After", "1");
    if (status == 401) MHD_add_response_header(r, "WWW-Authenticate", "Bearer");
    rq->status = status;
    enum MHD_Result ret = MHD_queue_response(rq->conn, (unsigned)status, r);
    MHD_destroy_response(r);
    return ret;
}

enum MHD_Result rl_srv_reply_json(rl_srv_req *rq, int status, json_t *body) {
    char *s = body ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    if (!s) {
        s = strdup("{\"error\":{\"message\":\"out of "
                   "memory\",\"type\":\"server_error\",\"param\":null,\"code\":500}}");
        status = 500;
        if (!s) return MHD_NO;
    }
    return rl_srv_reply_text(rq, status, "application/json", s, strlen(s));
}

enum MHD_Result rl_srv_reply_error(rl_srv_req *rq, const rl_oai_err *e) {
    char *s = rl_srv_is_anthropic(rq) ? rl_srv_anth_err_json(e) : rl_oai_err_json(e);
    if (!s) return MHD_NO;
    return rl_srv_reply_text(rq, e->status, "application/json", s, strlen(s));
}

static enum MHD_Result reply_err(rl_srv_req *rq, int status, const char *param, const char *code,
                                 const char *msg) {
    rl_oai_err e;
    rl_oai_fail(&e, status, param, code, "%s", msg);
    return rl_srv_reply_error(rq, &e);
}

void rl_srv_req_unref(rl_srv_req *rq) {
    if (atomic_fetch_sub(&rq->refs, 1) != 1) return;
    rl_buf_free(&rq->body);
    free(rq);
}

/* Constant-time check of "Authorization: Bearer <key>" (or "x-api-key:
 * <key>", as Anthropic's clients send it): both sides are
 * hashed first so the comparison time depends on neither length. */
static bool auth_ok(const rl_srv *s, struct MHD_Connection *c) {
    if (!s->cfg.api_key || !s->cfg.api_key[0]) return true;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    const char *given = "";
    if (h && !strncasecmp(h, "Bearer ", 7)) given = h + 7;
    const char *xk =
        MHD_lookup_connection_value(c, MHD_HEADER_KIND, "x-api-key"); /* Anthropic's header */
    if (!given[0] && xk) given = xk;
    uint8_t a[SHA256_DIGEST_SIZE], b[SHA256_DIGEST_SIZE];
    struct sha256_ctx ctx;
    sha256_init(&ctx);
    sha256_update(&ctx, strlen(given), (const uint8_t *)given);
    sha256_digest(&ctx, sizeof a, a);
    sha256_init(&ctx);
    sha256_update(&ctx, strlen(s->cfg.api_key), (const uint8_t *)s->cfg.api_key);
    sha256_digest(&ctx, sizeof b, b);
    return memeql_sec(a, b, sizeof a) != 0;
}

static enum MHD_Result count_header(void *cls, enum MHD_ValueKind kind, const char *k,
                                    const char *v) {
    (void)kind;
    size_t *n = cls;
    *n += strlen(k) + (v ? strlen(v) : 0) + 4;
    return MHD_YES;
}

/* ---- simple routes ---- */
static enum MHD_Result route_health(rl_srv_req *rq) {
    rl_srv *s = rq->srv;
    int st = atomic_load(&s->state);
    if (st == RL_SRV_READY && atomic_load(&s->draining))
        return rl_srv_reply_json(rq, 503, json_pack("{s:s}", "status", "draining"));
    if (st == RL_SRV_READY) return rl_srv_reply_json(rq, 200, json_pack("{s:s}", "status", "ok"));
    if (st == RL_SRV_LOADING)
        return rl_srv_reply_json(rq, 503, json_pack("{s:s}", "status", "loading"));
    return rl_srv_reply_json(rq, 500,
                             json_pack("{s:s, s:s}", "status", "error", "message", s->load_error));
}

static json_t *model_obj(rl_srv *s) {
    return json_pack("{s:s, s:s, s:I, s:s, s:i}", "id", s->model_id, "object", "model", "created",
                     (json_int_t)s->created, "owned_by", "redline", "max_model_len",
                     atomic_load(&s->state) == RL_SRV_READY ? s->n_ctx : 0);
}

static enum MHD_Result route_models(rl_srv_req *rq, const char *which) {
    rl_srv *s = rq->srv;
    if (which) {
        if (strcmp(which, s->model_id) != 0) {
            rl_oai_err e;
            rl_oai_fail(&e, 404, "model", "model_not_found", "model '%.200s' does not exist",
                        which);
            return rl_srv_reply_error(rq, &e);
        }
        return rl_srv_reply_json(rq, 200, model_obj(s));
    }
    return rl_srv_reply_json(rq, 200,
                             json_pack("{s:s, s:[o]}", "object", "list", "data", model_obj(s)));
}

static enum MHD_Result route_metrics(rl_srv_req *rq) {
    rl_srv *s = rq->srv;
    rl_engine_stats st;
    bool ready = atomic_load(&s->state) == RL_SRV_READY;
    if (ready) st = rl_engine_get_stats(s->eng);
    char *txt = rl_metrics_render(&s->m, ready ? &st : NULL, s->model_id);
    if (!txt) return reply_err(rq, 500, NULL, NULL, "out of memory");
    return rl_srv_reply_text(rq, 200, "text/plain; version=0.0.4; charset=utf-8", txt, strlen(txt));
}

static enum MHD_Result route_page(rl_srv_req *rq) {
    struct MHD_Response *r = MHD_create_response_from_buffer(
        rl_srv_webpage_len, (void *)rl_srv_webpage, MHD_RESPMEM_PERSISTENT);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Content-Type", "text/html; charset=utf-8");
    MHD_add_response_header(r, "Cache-Control", "no-cache");
    rl_srv_add_cors(r);
    rq->status = 200;
    enum MHD_Result ret = MHD_queue_response(rq->conn, 200, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result route_options(rl_srv_req *rq) {
    struct MHD_Response *r = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    if (!r) return MHD_NO;
    rl_srv_add_cors(r);
    MHD_add_response_header(r, "Allow", "GET, POST, OPTIONS");
    rq->status = 204;
    enum MHD_Result ret = MHD_queue_response(rq->conn, 204, r);
    MHD_destroy_response(r);
    return ret;
}

/* ---- routing ---- */
typedef enum route_id {
    R_NONE,
    R_PAGE,
    R_HEALTH,
    R_LIVEZ,
    R_HEALTH_GEN,
    R_SERVER_INFO,
    R_MODEL_INFO,
    R_GET_LOAD,
    R_METRICS,
    R_MODELS,
    R_MODEL_ONE,
    R_CHAT,
    R_COMPL,
    R_TOKENIZE,
    R_DETOKENIZE,
    R_MESSAGES,
    R_RESPONSES,
    R_EMBEDDINGS,
    R_INFILL,
} route_id;

static route_id find_route(const char *p, const char **arg) {
    *arg = NULL;
    if (!strcmp(p, "/") || !strcmp(p, "/index.html")) return R_PAGE;
    if (!strcmp(p, "/health") || !strcmp(p, "/v1/health") || !strcmp(p, "/readyz")) return R_HEALTH;
    if (!strcmp(p, "/livez")) return R_LIVEZ;
    if (!strcmp(p, "/health_generate")) return R_HEALTH_GEN;
    if (!strcmp(p, "/server_info") || !strcmp(p, "/get_server_info")) return R_SERVER_INFO;
    if (!strcmp(p, "/model_info") || !strcmp(p, "/get_model_info")) return R_MODEL_INFO;
    if (!strcmp(p, "/get_load")) return R_GET_LOAD;
    if (!strcmp(p, "/metrics")) return R_METRICS;
    if (!strcmp(p, "/v1/models") || !strcmp(p, "/models")) return R_MODELS;
    if (!strncmp(p, "/v1/models/", 11) && p[11]) {
        *arg = p + 11;
        return R_MODEL_ONE;
    }
    if (!strcmp(p, "/v1/chat/completions") || !strcmp(p, "/chat/completions")) return R_CHAT;
    if (!strcmp(p, "/v1/completions") || !strcmp(p, "/completions")) return R_COMPL;
    if (!strcmp(p, "/v1/messages") || !strcmp(p, "/messages")) return R_MESSAGES;
    if (!strcmp(p, "/v1/responses") || !strcmp(p, "/responses")) return R_RESPONSES;
    if (!strcmp(p, "/v1/embeddings") || !strcmp(p, "/embeddings")) return R_EMBEDDINGS;
    if (!strcmp(p, "/infill") || !strcmp(p, "/v1/infill")) return R_INFILL;
    if (!strcmp(p, "/tokenize") || !strcmp(p, "/v1/tokenize")) return R_TOKENIZE;
    if (!strcmp(p, "/detokenize") || !strcmp(p, "/v1/detokenize")) return R_DETOKENIZE;
    return R_NONE;
}

static bool route_is_post(route_id r) {
    return r == R_CHAT || r == R_COMPL || r == R_TOKENIZE || r == R_DETOKENIZE || r == R_MESSAGES ||
           r == R_RESPONSES || r == R_EMBEDDINGS || r == R_INFILL;
}

static enum MHD_Result dispatch(rl_srv_req *rq) {
    rl_srv *s = rq->srv;
    const char *arg;
    route_id r = find_route(rq->path, &arg);
    if (r == R_NONE) {
        rl_oai_err e;
        rl_oai_fail(&e, 404, NULL, "not_found", "no route for %s %.200s", rq->method, rq->path);
        return rl_srv_reply_error(rq, &e);
    }
    bool is_get = !strcmp(rq->method, "GET") || !strcmp(rq->method, "HEAD");
    bool is_post = !strcmp(rq->method, "POST");
    if ((route_is_post(r) && !is_post) || (!route_is_post(r) && !is_get)) {
        rl_oai_err e;
        rl_oai_fail(&e, 405, NULL, "method_not_allowed", "%s is not allowed on %.200s (use %s)",
                    rq->method, rq->path, route_is_post(r) ? "POST" : "GET");
        return rl_srv_reply_error(rq, &e);
    }
    switch (r) {
    case R_PAGE:
        return route_page(rq);
    case R_HEALTH:
        return route_health(rq);
    case R_LIVEZ:
        return rl_srv_livez(rq);
    case R_HEALTH_GEN:
        return rl_srv_health_generate(rq);
    case R_SERVER_INFO:
        return rl_srv_server_info(rq);
    case R_MODEL_INFO:
        return rl_srv_model_info(rq);
    case R_GET_LOAD:
        return rl_srv_get_load(rq);
    case R_METRICS:
        return route_metrics(rq);
    case R_MODELS:
        return route_models(rq, NULL);
    case R_MODEL_ONE:
        return route_models(rq, arg);
    default:
        break;
    }
    if (rq->too_big) {
        rl_oai_err e;
        rl_oai_fail(&e, 413, NULL, "request_too_large", "request body is larger than %zu bytes",
                    s->cfg.max_body);
        return rl_srv_reply_error(rq, &e);
    }
    int st = atomic_load(&s->state);
    if (st != RL_SRV_READY)
        return reply_err(rq, 503, NULL, st == RL_SRV_LOADING ? "model_loading" : "model_failed",
                         st == RL_SRV_LOADING ? "the model is still loading; retry shortly"
                                              : "the model failed to load");
    if (atomic_load(&s->draining))
        return reply_err(rq, 503, NULL, "shutting_down", "the server is shutting down");
    switch (r) {
    case R_CHAT:
        return rl_srv_generate(rq, RL_OAI_CHAT);
    case R_COMPL:
        return rl_srv_generate(rq, RL_OAI_COMPLETION);
    case R_MESSAGES:
        return rl_srv_messages(rq);
    case R_RESPONSES:
        return rl_srv_responses(rq);
    case R_INFILL:
        return rl_srv_infill(rq);
    case R_TOKENIZE:
        return rl_srv_tokenize(rq);
    case R_DETOKENIZE:
        return rl_srv_detokenize(rq);
    case R_EMBEDDINGS:
        return rl_srv_embeddings(rq);
    default:
        return reply_err(rq, 500, NULL, NULL, "internal routing error");
    }
}

/* First call for a request: checks that need only the headers.  Returns
 * true when a response was queued (or must be: *ret is set). */
static bool early_checks(rl_srv_req *rq, enum MHD_Result *ret) {
    rl_srv *s = rq->srv;
    size_t hdr = 0;
    MHD_get_connection_values(rq->conn, MHD_HEADER_KIND, count_header, &hdr);
    rl_oai_err e;
    if (hdr > s->cfg.max_header) {
        rl_oai_fail(&e, 431, NULL, "headers_too_large",
                    "request headers are %zu bytes; the limit is %zu", hdr, s->cfg.max_header);
        *ret = rl_srv_reply_error(rq, &e);
        return true;
    }
    if (!strcmp(rq->method, "OPTIONS")) {
        *ret = route_options(rq);
        return true;
    }
    const char *arg;
    route_id r = find_route(rq->path, &arg);
    if (r != R_HEALTH && r != R_LIVEZ && r != R_PAGE && !auth_ok(s, rq->conn)) {
        *ret = reply_err(rq, 401, NULL, "invalid_api_key",
                         "missing or invalid API key (Authorization: Bearer <key>)");
        return true;
    }
    const char *cl = MHD_lookup_connection_value(rq->conn, MHD_HEADER_KIND, "Content-Length");
    if (cl) {
        char *end;
        errno = 0;
        unsigned long long n = strtoull(cl, &end, 10);
        if (errno || *end || end == cl || n > s->cfg.max_body) {
            rl_oai_fail(&e, 413, NULL, "request_too_large", "request body is larger than %zu bytes",
                        s->cfg.max_body);
            *ret = rl_srv_reply_error(rq, &e);
            return true;
        }
    }
    return false;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_size, void **con_cls) {
    (void)version;
    rl_srv *s = cls;
    rl_srv_req *rq = *con_cls;
    if (!rq) {
        rq = calloc(1, sizeof *rq);
        if (!rq) return MHD_NO;
        atomic_init(&rq->refs, 1);
        rq->srv = s;
        rq->conn = conn;
        rq->t0 = rl_time_s();
        snprintf(rq->method, sizeof rq->method, "%s", method);
        *con_cls = rq;
        atomic_fetch_add(&s->n_http, 1); /* until on_completed: shutdown waits for it */
        enum MHD_Result ret;
        if (!rl_oai_normalize_path(url, rq->path, sizeof rq->path)) {
            snprintf(rq->path, sizeof rq->path, "(bad path)");
            return reply_err(rq, strlen(url) >= sizeof rq->path ? 414 : 400, NULL, "invalid_path",
                             "request path is malformed or too long");
        }
        if (early_checks(rq, &ret)) return ret;
        return MHD_YES;
    }
    if (rq->status) { /* response already queued: swallow the body */
        *upload_size = 0;
        return MHD_YES;
    }
    if (*upload_size) {
        size_t n = *upload_size;
        *upload_size = 0;
        if (rq->too_big) return MHD_YES;
        if (rq->body.n + n > s->cfg.max_body) {
            rq->too_big = true;
            rl_buf_free(&rq->body);
            return MHD_YES;
        }
        return rl_buf_append(&rq->body, upload_data, n) ? MHD_NO : MHD_YES;
    }
    return dispatch(rq);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
    (void)cls;
    rl_srv_req *rq = *con_cls;
    if (!rq) return;
    *con_cls = NULL;
    rl_srv *s = rq->srv;
    atomic_fetch_sub(&s->n_http, 1);
    if (rq->status) rl_metrics_count_http(&s->m, rq->status);
    char addr[INET6_ADDRSTRLEN] = "?";
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    if (ci && ci->client_addr) {
        if (ci->client_addr->sa_family == AF_INET)
            inet_ntop(AF_INET, &((const struct sockaddr_in *)ci->client_addr)->sin_addr, addr,
                      sizeof addr);
        else if (ci->client_addr->sa_family == AF_INET6)
            inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)ci->client_addr)->sin6_addr, addr,
                      sizeof addr);
    }
    static const char *why[] = {"-", "stop", "length", "cancelled", "error"};
    int f = atomic_load(&rq->finish);
    if (rq->status || toe != MHD_REQUEST_TERMINATED_COMPLETED_OK)
        fprintf(stderr, "%s \"%s %s\" %d %.3fs prompt=%d gen=%d finish=%s%s\n", addr, rq->method,
                rq->path, rq->status, rl_time_s() - rq->t0, atomic_load(&rq->n_prompt),
                atomic_load(&rq->n_gen), f >= 0 && f <= 4 ? why[f] : "-",
                toe == MHD_REQUEST_TERMINATED_COMPLETED_OK ? "" : " (client closed)");
    rl_srv_req_unref(rq);
}

static void mhd_log(void *cls, const char *fmt, va_list ap) {
    (void)cls;
    char buf[512];
    vsnprintf(buf, sizeof buf, fmt, ap);
    size_t n = strlen(buf);
    while (n && (buf[n - 1] == '\n' || buf[n - 1] == '\r')) buf[--n] = 0;
    rl_log(RL_LOG_DEBUG, "http: %s", buf);
}

/* ---- model loading (background thread) ---- */
static void *load_thread(void *arg) {
    rl_srv *s = arg;
    double t0 = rl_time_s();
    /* test hook: hold the loading state so tests can see /health say 503 */
    const char *delay = rl_env(RL_ENV_TEST_LOAD_DELAY_MS);
    if (delay && atoi(delay) > 0) usleep((useconds_t)atoi(delay) * 1000u);
    rl_err err = {0};
    rl_engine *e = NULL;
    if (rl_engine_new(&s->cfg.ep, &e, &err) != RL_OK || rl_engine_start(e, &err) != RL_OK) {
        snprintf(s->load_error, sizeof s->load_error, "%s", err.msg);
        rl_log(RL_LOG_ERROR, "cannot load model %s: %s", s->cfg.ep.model_path, err.msg);
        rl_engine_free(e);
        atomic_store(&s->state, RL_SRV_FAILED);
        return NULL;
    }
    rl_vocab *v = NULL;
    if (rl_engine_vocab(e, &v, &err) != RL_OK) {
        snprintf(s->load_error, sizeof s->load_error, "%s", err.msg);
        rl_engine_free(e);
        atomic_store(&s->state, RL_SRV_FAILED);
        return NULL;
    }
    rl_model_info mi;
    rl_vocab_model_info(v, &mi);
    if (!mi.has_chat_template)
        rl_log(RL_LOG_INFO, "model has no chat template; using the built-in %s template",
               mi.chat_template);
    s->eng = e;
    s->vocab = v;
    s->n_vocab = mi.n_vocab;
    s->n_ctx = rl_engine_n_ctx(e);
    rl_log(RL_LOG_INFO, "model %s loaded in %.2f s: context %d, vocabulary %d", s->model_id,
           rl_time_s() - t0, s->n_ctx, s->n_vocab);
    atomic_store(&s->state, RL_SRV_READY);
    return NULL;
}

/* ---- signals and the summary logger ---- */
static int g_sig_pipe[2] = {-1, -1};

static void on_signal(int sig) {
    int saved = errno;
    char c = (char)sig;
    if (write(g_sig_pipe[1], &c, 1) < 0) { /* nothing to do */
    }
    errno = saved;
}

static void log_summary(rl_srv *s, rl_engine_stats *prev, double dt) {
    rl_engine_stats st = rl_engine_get_stats(s->eng);
    uint64_t dp = st.prompt_tokens - prev->prompt_tokens,
             dg = st.generation_tokens - prev->generation_tokens;
    if (st.n_running || st.n_waiting || dp || dg)
        rl_log(RL_LOG_INFO,
               "prompt %.1f tok/s, generation %.1f tok/s, running %d, waiting %d, KV %.1f%% "
               "(%d/%d blocks, %d cached)",
               dp / dt, dg / dt, st.n_running, st.n_waiting,
               st.kv_blocks_total ? 100.0 * st.kv_blocks_used / st.kv_blocks_total : 0.0,
               st.kv_blocks_used, st.kv_blocks_total, st.kv_blocks_cached);
    *prev = st;
}

static int resolve_bind(const char *host, int port, struct sockaddr_storage *ss, bool *v6) {
    struct addrinfo hints = {
        .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE};
    struct addrinfo *res = NULL;
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    int rc = getaddrinfo(host, ps, &hints, &res);
    if (rc != 0 || !res) return -1;
    memcpy(ss, res->ai_addr, res->ai_addrlen);
    *v6 = res->ai_family == AF_INET6;
    freeaddrinfo(res);
    return 0;
}

static void model_id_from_path(const char *path, char *out, size_t cap) {
    const char *b = strrchr(path, '/');
    b = b ? b + 1 : path;
    size_t n = strlen(b);
    if (n > 5 && !strcmp(b + n - 5, ".gguf")) n -= 5;
    if (n >= cap) n = cap - 1;
    memcpy(out, b, n);
    out[n] = 0;
}

int rl_server_run(const rl_server_config *cfg) {
    rl_srv *s = calloc(1, sizeof *s);
    if (!s) return 1;
    s->cfg = *cfg;
    s->created = (int64_t)time(NULL);
    rl_metrics_init(&s->m);
    if (cfg->alias && cfg->alias[0])
        snprintf(s->model_id, sizeof s->model_id, "%s", cfg->alias);
    else
        model_id_from_path(cfg->ep.model_path ? cfg->ep.model_path : "model", s->model_id,
                           sizeof s->model_id);
    int rc = 1;
    if (pipe(g_sig_pipe) != 0) goto out;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    struct sockaddr_storage ss;
    bool v6 = false;
    if (resolve_bind(cfg->host, cfg->port, &ss, &v6) != 0) {
        rl_log(RL_LOG_ERROR, "--host: cannot resolve '%s'", cfg->host);
        goto out;
    }
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_ITC |
                     MHD_USE_POLL | MHD_USE_ERROR_LOG | (v6 ? MHD_USE_IPv6 : 0);
    s->daemon = MHD_start_daemon(
        flags, (uint16_t)cfg->port, NULL, NULL, on_request, s, MHD_OPTION_SOCK_ADDR,
        (struct sockaddr *)&ss, MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)cfg->max_conns, MHD_OPTION_CONNECTION_TIMEOUT,
        (unsigned)120, MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(cfg->max_header * 32 + 65536),
        MHD_OPTION_LISTENING_ADDRESS_REUSE, (unsigned)1, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, s,
        MHD_OPTION_END);
    if (!s->daemon) {
        rl_log(RL_LOG_ERROR, "cannot listen on %s:%d: %s", cfg->host, cfg->port, strerror(errno));
        goto out;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_BIND_PORT);
    int port = di ? di->port : cfg->port;
    rl_log(RL_LOG_INFO, "listening on http://%s%s%s:%d (model %s loading)", v6 ? "[" : "",
           cfg->host, v6 ? "]" : "", port, s->model_id);

    pthread_t loader;
    if (pthread_create(&loader, NULL, load_thread, s) != 0) {
        rl_log(RL_LOG_ERROR, "cannot start the loader thread");
        goto stop;
    }
    rl_engine_stats prev;
    memset(&prev, 0, sizeof prev);
    double t_last = rl_time_s();
    int sig = 0;
    for (;;) {
        struct pollfd p = {.fd = g_sig_pipe[0], .events = POLLIN};
        int pr = poll(&p, 1, 200);
        if (pr > 0) {
            char c;
            if (read(g_sig_pipe[0], &c, 1) == 1) sig = c;
            break;
        }
        int st = atomic_load(&s->state);
        if (st == RL_SRV_FAILED) break;
        double now = rl_time_s();
        if (st == RL_SRV_READY && now - t_last >= cfg->log_interval_s) {
            log_summary(s, &prev, now - t_last);
            t_last = now;
        }
    }
    pthread_join(loader, NULL);
    if (atomic_load(&s->state) == RL_SRV_FAILED) {
        rc = 1;
        goto stop;
    }
    rl_log(RL_LOG_INFO, "signal %d: draining %d in-flight request(s) (up to %.0f s)", sig,
           atomic_load(&s->n_active), cfg->drain_s);
    atomic_store(&s->draining, true);
    MHD_quiesce_daemon(s->daemon); /* stop accepting; open connections carry on */
    /* Wait for the generations in flight and for every HTTP request already
     * being read or answered (a request that reached the server just before
     * the signal gets its answer -- a 503 "shutting_down" if it starts
     * after it -- instead of a closed connection), and at least a short
     * grace for bytes already sent on open connections. */
    const double t_sig = rl_time_s(), grace_s = 0.25;
    double t_end = t_sig + cfg->drain_s;
    while ((atomic_load(&s->n_active) > 0 || atomic_load(&s->n_http) > 0 ||
            rl_time_s() - t_sig < grace_s) &&
           rl_time_s() < t_end) {
        struct pollfd p = {.fd = g_sig_pipe[0], .events = POLLIN};
        if (poll(&p, 1, 50) > 0) { /* a second signal: stop waiting */
            char c;
            if (read(g_sig_pipe[0], &c, 1) == 1) break;
        }
    }
    if (atomic_load(&s->n_active) > 0) {
        rl_log(RL_LOG_WARN, "cancelling %d request(s) still running", atomic_load(&s->n_active));
        atomic_store(&s->abort_all, true);
        for (int i = 0; i < 100 && atomic_load(&s->n_active) > 0; i++) usleep(20000);
    }
    rc = 0;
stop:
    MHD_stop_daemon(s->daemon);
    s->daemon = NULL;
    if (s->eng) rl_engine_free(s->eng);
    rl_log(RL_LOG_INFO, "server stopped");
    rl_vocab_free(s->vocab);
out:
    rl_metrics_free(&s->m);
    free(s);
    if (g_sig_pipe[0] >= 0) {
        close(g_sig_pipe[0]);
        close(g_sig_pipe[1]);
        g_sig_pipe[0] = g_sig_pipe[1] = -1;
    }
    return rc;
}
