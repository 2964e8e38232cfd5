/* Generation endpoints: POST /v1/chat/completions, /v1/completions (plain
 * JSON and SSE streaming), POST /tokenize, /detokenize.
 *
 * A request becomes a gen_job: the parsed rl_oai_req, the prompt tokens and
 * one engine request per choice (n > 1 submits n).  Every check that can
 * fail (parsing, template, prompt length, queue bound, submit) runs before
 * any byte is sent, so failures are proper 4xx/503 responses; after
 * streaming has begun, a failure is an `data: {"error":...}` event.
 *
 * Disconnects: while waiting on the engine (slices of <= 100 ms) the job
 * polls the client's socket; once the client has gone every unfinished
 * choice is cancelled with rl_engine_cancel, and the job takes the DONE
 * events so the engine forgets the requests and frees their KV blocks.
 *
 * Invariants: a job always drains the DONE event of every choice it
 * submitted before it is freed; s->n_active counts live jobs.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/buf.h"
#include "base/hash.h"
#include "server/server-impl.h"

typedef struct choice {
    uint64_t id;
    bool submitted, done;
    rl_finish_reason fin;
    rl_status err_code;
    char err[160];
    int32_t n_gen, n_prompt, n_cached;
    double t_last_tok;
    rl_buf text;      /* non-streaming, or read for tools/reasoning: accumulated text */
    rl_srv_stream ss; /* streaming tools/reasoning: what was sent */
    json_t *lp;       /* non-streaming logprobs (chat: array; completion: object) */
    /* /infill: text accumulates in `text`; sent_n bytes of it streamed;
     * line_at: start of the line n_indent has not judged yet (0 = none:
     * the first line is never cut); cut: a line was indented too little */
    size_t sent_n, line_at;
    bool cut;
} choice;

typedef struct gen_job {
    rl_srv *srv;
    rl_srv_req *rq;
    rl_oai_req req;
    int32_t *prompt;
    int32_t n_prompt;
    char *prompt_text; /* for echo (completions) */
    size_t prompt_text_len;
    char id[64];
    int64_t created;
    rl_srv_tools tools; /* chat: how the output is read */
    bool anth;          /* /v1/messages: Anthropic's shapes in and out */
    rl_srv_anth as;     /* its streaming state */
    bool resp;          /* /v1/responses: the Responses API's shapes */
    bool infill;        /* /infill: llama-server's shapes */
    rl_srv_resp rs;     /* its streaming state */
    choice ch[RL_OAI_MAX_N];
    int32_t n_left; /* choices without a DONE event yet */
    int rr;         /* round-robin start for n > 1 */
    double t_start, t_check;
    bool gone, cancelled;
    /* streaming output buffer */
    rl_buf out;     /* streaming: SSE bytes not yet handed to the connection */
    size_t out_off; /* bytes of out already handed */
    bool ended;     /* "data: [DONE]" queued */
} gen_job;

/* The seed of choice i's tool-call ids. */
static uint64_t call_seed(const gen_job *j, int i) {
    return rl_hash_bytes(j->id, strlen(j->id)) + (uint64_t)i;
}

static const char *finish_str(rl_finish_reason f) {
    switch (f) {
    case RL_FINISH_STOP:
        return "stop";
    case RL_FINISH_LENGTH:
        return "length";
    case RL_FINISH_CANCELLED:
        return "abort";
    case RL_FINISH_ERROR:
        return "error";
    default:
        return NULL;
    }
}

/* ---- prompt building ---- */
/* Text -> prompt ids: control tokens written in the text are parsed (the
 * template writes them); BOS when the model adds one (with_bos). */
static bool encode_text(rl_srv *s, const char *text, size_t len, bool with_bos, int32_t **ids,
                        int32_t *n, const char *param, rl_oai_err *e) {
    rl_err err = {0};
    unsigned flags = RL_TOKENIZE_PARSE_SPECIAL | (with_bos ? RL_TOKENIZE_ADD_BOS : 0);
    rl_status st = rl_tokenize(s->vocab, text, len, flags, ids, n, &err);
    if (st == RL_ERR_LIMIT)
        return rl_oai_fail(e, 400, param, "context_length_exceeded", "%s: too many tokens", param);
    if (st == RL_ERR_NOMEM) return rl_oai_fail(e, 500, NULL, NULL, "out of memory");
    if (st)
        return rl_oai_fail(e, 400, param, "invalid_value", "%s: cannot tokenize: %s", param,
                           err.msg);
    return true;
}

/* Renders the chat template over r's messages; *out allocated (rl_free). */
static bool render_chat(rl_srv *s, const rl_oai_req *r, bool add_gen, char **out, size_t *len,
                        rl_oai_err *e) {
    rl_err err = {0};
    rl_status st = rl_chat_render(s->vocab, r->msgs, r->n_msgs, add_gen, out, len, &err);
    if (st == RL_ERR_NOMEM) return rl_oai_fail(e, 500, NULL, NULL, "out of memory");
    /* anything else is this conversation's fault (the template's
     * raise_exception, a type error, a step bound): 400 with the message */
    if (st != RL_OK)
        return rl_oai_fail(e, 400, "messages", "invalid_value",
                           "messages: the chat template failed: %s", err.msg);
    return true;
}

static bool build_prompt(gen_job *j, rl_oai_err *e) {
    rl_srv *s = j->srv;
    rl_oai_req *r = &j->req;
    const char *param = r->kind == RL_OAI_CHAT     ? "messages"
                        : r->kind == RL_OAI_INFILL ? "input_prefix"
                                                   : "prompt";
    if (r->kind == RL_OAI_CHAT) {
        char *txt = NULL;
        size_t len = 0;
        rl_srv_tools_init(s, r, &j->tools);
        if (rl_srv_chat_needs_ctx(r) ? !rl_srv_render_ctx(s, r, &j->tools.fmt, true, &txt, &len, e)
                                     : !render_chat(s, r, true, &txt, &len, e))
            return false;
        rl_srv_tools_prompt(&j->tools, txt, len);
        r->gp.think_open = rl_srv_opens_think(txt, len);
        bool ok = rl_srv_tool_grammar(s, r, &j->tools, e) &&
                  encode_text(s, txt, len, true, &j->prompt, &j->n_prompt, param, e);
        rl_free(txt);
        if (!ok) return false;
    } else if (r->fim) {
        if (!rl_srv_fim_prompt(s, r, &j->prompt, &j->n_prompt, e)) return false;
        if (r->echo && r->prompt) {
            j->prompt_text = rl_strndup(r->prompt, r->prompt_len);
            j->prompt_text_len = r->prompt_len;
            if (!j->prompt_text) return rl_oai_fail(e, 500, NULL, NULL, "out of memory");
        }
    } else if (r->prompt_ids) {
        j->prompt = rl_malloc((size_t)r->n_prompt_ids * sizeof(int32_t));
        if (!j->prompt) return rl_oai_fail(e, 500, NULL, NULL, "out of memory");
        memcpy(j->prompt, r->prompt_ids, (size_t)r->n_prompt_ids * sizeof(int32_t));
        j->n_prompt = r->n_prompt_ids;
        if (r->echo) {
            rl_err err;
            if (rl_detokenize(s->vocab, j->prompt, (size_t)j->n_prompt, 0, &j->prompt_text,
                              &j->prompt_text_len, &err) != RL_OK)
                return rl_oai_fail(e, 400, "prompt", "invalid_value", "prompt: %s", err.msg);
        }
    } else {
        if (!encode_text(s, r->prompt, r->prompt_len, true, &j->prompt, &j->n_prompt, param, e))
            return false;
        r->gp.think_open = rl_srv_opens_think(r->prompt, r->prompt_len);
        if (r->echo) {
            j->prompt_text = rl_strndup(r->prompt, r->prompt_len);
            j->prompt_text_len = r->prompt_len;
            if (!j->prompt_text) return rl_oai_fail(e, 500, NULL, NULL, "out of memory");
        }
    }
    if (r->reasoning_budget >= 0) { /* the engine closes the think block when it is spent */
        r->gp.think_budget = r->reasoning_budget;
        snprintf(r->gp.think_close, sizeof r->gp.think_close, "\n%s\n\n", RL_THINK_CLOSE);
    }
    if (j->n_prompt == 0)
        return rl_oai_fail(e, 400, param, "invalid_value", "%s: must not be empty", param);
    if (j->n_prompt >= s->n_ctx)
        return rl_oai_fail(e, 400, param, "context_length_exceeded",
                           "%s: %d tokens leave no room to generate in the context of %d tokens",
                           param, j->n_prompt, s->n_ctx);
    if (r->max_tokens > 0 && (int64_t)j->n_prompt + r->max_tokens > s->n_ctx)
        return rl_oai_fail(
            e, 400, "max_tokens", "context_length_exceeded",
            "max_tokens: %d prompt tokens + %d new tokens exceed the context of %d tokens",
            j->n_prompt, r->max_tokens, s->n_ctx);
    return true;
}

/* ---- job lifetime ---- */
static void job_cancel_all(gen_job *j) {
    if (j->cancelled) return;
    j->cancelled = true;
    for (int i = 0; i < j->req.n; i++)
        if (j->ch[i].submitted && !j->ch[i].done) rl_engine_cancel(j->srv->eng, j->ch[i].id);
}

/* Takes the DONE event of every unfinished choice (after cancelling them),
 * so the engine forgets them.  Bounded: gives up after 30 s. */
static void job_drain(gen_job *j) {
    job_cancel_all(j);
    double until = rl_time_s() + 30;
    for (int i = 0; i < j->req.n; i++) {
        choice *c = &j->ch[i];
        while (c->submitted && !c->done) {
            rl_event ev;
            rl_status st = rl_engine_next(j->srv->eng, c->id, &ev, 100);
            if (st == RL_ERR_NOT_FOUND || (st == RL_OK && ev.kind == RL_EV_DONE)) c->done = true;
            if (rl_time_s() > until) {
                rl_log(RL_LOG_WARN, "request %llu: no DONE event 30 s after cancel",
                       (unsigned long long)c->id);
                c->done = true;
            }
        }
    }
}

static void job_free(gen_job *j) {
    if (!j) return;
    if (j->srv->eng) job_drain(j);
    for (int i = 0; i < RL_OAI_MAX_N; i++) {
        rl_buf_free(&j->ch[i].text);
        json_decref(j->ch[i].lp);
    }
    rl_free(j->prompt);
    rl_free(j->prompt_text);
    rl_oai_req_free(&j->req);
    rl_buf_free(&j->out);
    rl_buf_free(&j->rs.acc);
    if (j->rq) {
        atomic_fetch_sub(&j->srv->n_active, 1);
        rl_srv_req_unref(j->rq);
    }
    free(j);
}

/* Cancels everything once the client has gone or the server must stop.
 * Checks the socket at most every 50 ms. */
static void job_check_abandon(gen_job *j) {
    double now = rl_time_s();
    if (now - j->t_check < 0.05 && !atomic_load(&j->srv->abort_all)) return;
    j->t_check = now;
    if (!j->gone && rl_srv_client_gone(j->rq->conn)) j->gone = true;
    if (j->gone || atomic_load(&j->srv->abort_all)) job_cancel_all(j);
}

/* Next event of any unfinished choice, waiting up to slice_ms; returns the
 * choice index or -1 on timeout (or when nothing is left). */
static int job_next(gen_job *j, rl_event *ev, int slice_ms) {
    rl_engine *e = j->srv->eng;
    int first = -1, n = j->req.n;
    for (int k = 0; k < n; k++) {
        int i = (j->rr + k) % n;
        choice *c = &j->ch[i];
        if (!c->submitted || c->done) continue;
        if (first < 0) first = i;
        if (n == 1) break;
        if (rl_engine_next(e, c->id, ev, 0) == RL_OK) {
            j->rr = (i + 1) % n;
            return i;
        }
    }
    if (first < 0) return -1;
    rl_status st = rl_engine_next(e, j->ch[first].id, ev, n == 1 ? slice_ms : 10);
    if (st == RL_OK) return first;
    if (st == RL_ERR_NOT_FOUND) { /* cannot happen while we hold the id; end the choice cleanly */
        memset(ev, 0, sizeof *ev);
        ev->kind = RL_EV_DONE;
        ev->finish = RL_FINISH_ERROR;
        snprintf(ev->error, sizeof ev->error, "the engine lost the request");
        return first;
    }
    return -1;
}

/* ---- JSON pieces ---- */
static json_t *token_bytes(const char *p, size_t n) {
    json_t *a = json_array();
    for (size_t i = 0; a && i < n; i++) json_array_append_new(a, json_integer((uint8_t)p[i]));
    return a;
}

static double lp_val(float x) {
    return isfinite(x) ? (double)x : -9999.0;
}

static json_t *chat_lp_item(rl_srv *s, const rl_event *ev, int n_top) {
    size_t l = 0;
    const char *p = rl_token_piece(s->vocab, ev->token, &l);
    json_t *top = json_array();
    for (int k = 0; k < n_top && k < ev->n_top; k++) {
        size_t tl = 0;
        const char *tp = rl_token_piece(s->vocab, ev->top_id[k], &tl);
        json_array_append_new(top, json_pack("{s:o, s:f, s:o}", "token",
                                             rl_srv_json_text(tp ? tp : "", tl), "logprob",
                                             lp_val(ev->top_logprob[k]), "bytes",
                                             token_bytes(tp ? tp : "", tl)));
    }
    return json_pack("{s:o, s:f, s:o, s:o}", "token", rl_srv_json_text(p ? p : "", l), "logprob",
                     lp_val(ev->logprob), "bytes", token_bytes(p ? p : "", l), "top_logprobs", top);
}

/* Appends one token's entry to a completion-style logprobs object. */
static void compl_lp_add(rl_srv *s, json_t *o, const rl_event *ev, int n_top, size_t offset) {
    size_t l = 0;
    const char *p = rl_token_piece(s->vocab, ev->token, &l);
    json_array_append_new(json_object_get(o, "tokens"), rl_srv_json_text(p ? p : "", l));
    json_array_append_new(json_object_get(o, "token_logprobs"), json_real(lp_val(ev->logprob)));
    json_array_append_new(json_object_get(o, "text_offset"), json_integer((json_int_t)offset));
    json_t *top = json_object();
    for (int k = 0; k < n_top && k < ev->n_top; k++) {
        size_t tl = 0;
        const char *tp = rl_token_piece(s->vocab, ev->top_id[k], &tl);
        json_t *key = rl_srv_json_text(tp ? tp : "", tl);
        if (key && !json_object_get(top, json_string_value(key)))
            json_object_set_new(top, json_string_value(key), json_real(lp_val(ev->top_logprob[k])));
        json_decref(key);
    }
    json_array_append_new(json_object_get(o, "top_logprobs"), top);
}

static json_t *compl_lp_new(void) {
    return json_pack("{s:[], s:[], s:[], s:[]}", "tokens", "token_logprobs", "top_logprobs",
                     "text_offset");
}

static json_t *usage_obj(gen_job *j) {
    int32_t gen = 0;
    for (int i = 0; i < j->req.n; i++) gen += j->ch[i].n_gen;
    return json_pack("{s:i, s:i, s:i, s:{s:i}}", "prompt_tokens", j->n_prompt, "completion_tokens",
                     gen, "total_tokens", j->n_prompt + gen, "prompt_tokens_details",
                     "cached_tokens", j->ch[0].n_cached);
}

/* ---- streaming output ---- */
static bool out_append(gen_job *j, const char *p, size_t n) {
    return rl_buf_append(&j->out, p, n) == RL_OK;
}

static void out_event(gen_job *j, json_t *o) {
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (!s) return;
    out_append(j, "data: ", 6);
    out_append(j, s, strlen(s));
    out_append(j, "\n\n", 2);
    free(s);
}

/* A chunk with one choice: chat delta or completion text. */
static json_t *chunk(gen_job *j, int i, json_t *delta_or_text, json_t *logprobs,
                     const char *finish) {
    bool chat = j->req.kind == RL_OAI_CHAT;
    json_t *c = json_pack("{s:i, s:o, s:o, s:o}", "index", i, chat ? "delta" : "text",
                          delta_or_text, "logprobs", logprobs ? logprobs : json_null(),
                          "finish_reason", finish ? json_string(finish) : json_null());
    json_t *o = json_pack("{s:s, s:s, s:I, s:s, s:s, s:[o]}", "id", j->id, "object",
                          chat ? "chat.completion.chunk" : "text_completion", "created",
                          (json_int_t)j->created, "model", j->srv->model_id, "system_fingerprint",
                          "redline-" RL_SERVER_VERSION, "choices", c);
    if (o && j->req.include_usage) json_object_set_new(o, "usage", json_null());
    return o;
}

/* /infill's answer (llama-server's shape): the whole text, a streamed
 * piece (final false), or the closing event of a stream (text "", final). */
static json_t *infill_obj(gen_job *j, const choice *c, const char *p, size_t n, bool final) {
    json_t *o = json_pack("{s:i, s:o, s:b}", "index", 0, "content", rl_srv_json_text(p ? p : "", n),
                          "stop", final);
    if (o && final) {
        const char *st = c->fin == RL_FINISH_LENGTH ? "limit"
                         : c->fin == RL_FINISH_STOP ? "eos"
                                                    : "none";
        json_object_set_new(o, "stop_type", json_string(st));
        json_object_set_new(o, "model", json_string(j->srv->model_id));
        json_object_set_new(o, "tokens_predicted", json_integer(c->n_gen));
        json_object_set_new(o, "tokens_evaluated", json_integer(j->n_prompt));
        json_object_set_new(o, "tokens_cached", json_integer(c->n_cached));
        json_object_set_new(o, "truncated", json_false());
    }
    return o;
}

/* /infill's n_indent (llama-server's rule): judges every complete
 * indentation of a line after the first; a line whose first other
 * character comes before column n_indent is cut off with the rest and the
 * generation cancelled.  Returns how many bytes of c->text are final (the
 * rest may still be cut). */
static size_t infill_indent(gen_job *j, choice *c) {
    int32_t want = j->req.n_indent;
    if (want <= 0) return c->text.n;
    const char *p = c->text.p;
    size_t n = c->text.n;
    for (;;) {
        if (c->line_at == 0) { /* find the first newline: the line after it is judged */
            const char *nl = memchr(p, '\n', n);
            if (!nl) return n;
            c->line_at = (size_t)(nl - p) + 1;
        }
        size_t k = c->line_at;
        int32_t ind = 0;
        while (k < n && (p[k] == ' ' || p[k] == '\t') && ind < want) k++, ind++;
        if (ind >= want || (k < n && p[k] == '\n')) { /* deep enough, or an empty line */
            const char *nl = memchr(p + k, '\n', n - k);
            if (!nl) return n;
            c->line_at = (size_t)(nl - p) + 1;
            continue;
        }
        if (k >= n) return c->line_at; /* indentation not known yet: hold the line */
        c->cut = true;                 /* a line indented too little */
        c->text.n = c->line_at;
        if (!c->done) rl_engine_cancel(j->srv->eng, c->id);
        return c->text.n;
    }
}

/* HTTP status of a generation that ended in an error: a bound the
 * request's own grammar or parameters exceeded is the client's (400);
 * anything else is the server's (500). */
static int finish_status(rl_status code) {
    return code == RL_ERR_LIMIT ? 400 : 500;
}

/* A failure after streaming began, in the stream's API: Anthropic's
 * `event: error`, the Responses API's `response.failed`, else OpenAI's
 * error object as a data event. */
static void stream_error(gen_job *j, const char *msg, int code) {
    rl_oai_err e;
    rl_oai_fail(&e, code, NULL, code == 503 ? "shutting_down" : NULL, "%s", msg);
    if (j->resp) {
        rl_srv_resp_fail(&j->rs, j->id, j->created, j->srv->model_id, &e, &j->out);
        return;
    }
    char *s = j->anth ? rl_srv_anth_err_json(&e) : rl_oai_err_json(&e);
    if (!s) return;
    if (j->anth) out_append(j, "event: error\n", 13);
    out_append(j, "data: ", 6);
    out_append(j, s, strlen(s));
    out_append(j, "\n\n", 2);
    free(s);
}

/* ---- event handling (both modes) ---- */
static void on_event(gen_job *j, int i, const rl_event *ev, bool stream) {
    rl_srv *s = j->srv;
    choice *c = &j->ch[i];
    bool chat = j->req.kind == RL_OAI_CHAT;
    double now = rl_time_s();
    if (ev->kind == RL_EV_TOKEN) {
        bool has_tok = ev->token >= 0;
        if (has_tok) {
            if (c->t_last_tok > 0) rl_hist_observe(&s->m, &s->m.itl, now - c->t_last_tok);
            c->t_last_tok = now;
        }
        bool lp = j->req.logprobs && has_tok;
        if (j->infill) {
            if (c->cut || ev->text_len == 0) return;
            if (rl_buf_append(&c->text, ev->text, (size_t)ev->text_len)) return;
            size_t fin_n = infill_indent(j, c);
            if (stream && fin_n > c->sent_n) {
                out_event(j, infill_obj(j, c, c->text.p + c->sent_n, fin_n - c->sent_n, false));
                c->sent_n = fin_n;
            }
            return;
        }
        if (!stream) {
            if (lp) {
                if (!c->lp) c->lp = chat ? json_array() : compl_lp_new();
                if (chat)
                    json_array_append_new(c->lp, chat_lp_item(s, ev, j->req.top_logprobs));
                else
                    compl_lp_add(s, c->lp, ev, j->req.top_logprobs, c->text.n);
            }
            if (ev->text_len > 0) {
                if (rl_buf_append(&c->text, ev->text, (size_t)ev->text_len)) return;
            }
            return;
        }
        if (ev->text_len == 0 && !lp) return;
        json_t *delta = NULL;
        if (chat && j->tools.active) {
            bool calls;
            if (ev->text_len > 0 && rl_buf_append(&c->text, ev->text, (size_t)ev->text_len)) return;
            delta = rl_srv_tools_delta(&j->tools, &c->ss, call_seed(j, i), c->text.p, c->text.n,
                                       false, &calls);
            if (j->anth || j->resp) {
                if (delta && j->anth) rl_srv_anth_events(&j->as, delta, &j->out);
                if (delta && j->resp) rl_srv_resp_events(&j->rs, j->id, delta, &j->out);
                json_decref(delta);
                return;
            }
            if (!delta && !lp) return;
            if (!delta) delta = json_object();
        }
        json_t *txt = delta ? NULL : rl_srv_json_text(ev->text, (size_t)ev->text_len);
        json_t *lpo = NULL;
        if (lp) {
            if (chat)
                lpo = json_pack("{s:[o]}", "content", chat_lp_item(s, ev, j->req.top_logprobs));
            else {
                lpo = compl_lp_new();
                compl_lp_add(s, lpo, ev, j->req.top_logprobs, 0);
            }
        }
        out_event(j, chunk(j, i,
                           delta  ? delta
                           : chat ? json_pack("{s:o}", "content", txt)
                                  : txt,
                           lpo, NULL));
        return;
    }
    /* DONE */
    c->done = true;
    j->n_left--;
    c->fin = c->cut ? RL_FINISH_LENGTH : ev->finish; /* cut by n_indent: llama's "limit" */
    c->n_gen = ev->n_generated;
    c->n_prompt = ev->n_prompt;
    c->n_cached = ev->n_cached;
    c->err_code = ev->error_code;
    snprintf(c->err, sizeof c->err, "%s", ev->error);
    rl_metrics_count_finish(&s->m, ev->finish);
    if (ev->n_generated > 0 && ev->finish != RL_FINISH_CANCELLED)
        rl_hist_observe(&s->m, &s->m.ttft, ev->t_first_token_s);
    if (ev->finish == RL_FINISH_STOP || ev->finish == RL_FINISH_LENGTH)
        rl_hist_observe(&s->m, &s->m.e2e, now - j->t_start);
    int gen = 0;
    for (int k = 0; k < j->req.n; k++) gen += j->ch[k].n_gen;
    atomic_store(&j->rq->n_gen, gen);
    if (i == 0) atomic_store(&j->rq->finish, (int)ev->finish);
    if (!stream) return;
    if (j->infill && c->fin != RL_FINISH_ERROR && c->fin != RL_FINISH_CANCELLED) {
        if (c->text.n > c->sent_n) /* the held-back end of the text */
            out_event(j, infill_obj(j, c, c->text.p + c->sent_n, c->text.n - c->sent_n, false));
        out_event(j, infill_obj(j, c, "", 0, true));
        return;
    }
    if (ev->finish == RL_FINISH_ERROR) {
        char msg[200];
        snprintf(msg, sizeof msg, "generation failed: %s",
                 ev->error[0] ? ev->error : "engine error");
        stream_error(j, msg, finish_status(ev->error_code));
    } else if (ev->finish == RL_FINISH_CANCELLED) {
        stream_error(j, "the request was cancelled (the server is shutting down)", 503);
    } else {
        const char *fin = finish_str(ev->finish);
        if (chat && j->tools.active) {
            bool calls;
            json_t *d = rl_srv_tools_delta(&j->tools, &c->ss, call_seed(j, i), c->text.p, c->text.n,
                                           true, &calls);
            if (calls && ev->finish == RL_FINISH_STOP) fin = "tool_calls";
            if (j->anth) {
                if (d) rl_srv_anth_events(&j->as, d, &j->out);
                json_decref(d);
                rl_srv_anth_finish(&j->as, fin, ev->n_generated, &j->out);
                return;
            }
            if (j->resp) {
                if (d) rl_srv_resp_events(&j->rs, j->id, d, &j->out);
                json_decref(d);
                json_t *msg =
                    rl_srv_tools_message(&j->tools, call_seed(j, i), c->text.p, c->text.n, &calls);
                if (msg)
                    rl_srv_resp_finish(&j->rs, j->id,
                                       rl_srv_resp_object(j->id, j->created, s->model_id, msg, fin,
                                                          j->n_prompt, ev->n_generated, NULL),
                                       &j->out);
                json_decref(msg);
                return;
            }
            if (d) out_event(j, chunk(j, i, d, NULL, NULL));
        }
        json_t *empty = chat ? json_object() : json_string("");
        out_event(j, chunk(j, i, empty, NULL, fin));
    }
}

/* ---- streaming response callbacks ---- */
static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    gen_job *j = cls;
    for (;;) {
        if (j->out_off < j->out.n) {
            size_t n = j->out.n - j->out_off;
            if (n > max) n = max;
            memcpy(buf, j->out.p + j->out_off, n);
            j->out_off += n;
            return (ssize_t)n;
        }
        j->out_off = 0;
        rl_buf_clear(&j->out);
        if (j->ended) return MHD_CONTENT_READER_END_OF_STREAM;
        if (j->n_left == 0 && (j->anth || j->resp || j->infill)) {
            j->ended = true;
            continue;
        }
        if (j->n_left == 0) {
            if (j->req.include_usage) {
                bool chat = j->req.kind == RL_OAI_CHAT;
                out_event(j, json_pack("{s:s, s:s, s:I, s:s, s:[], s:o}", "id", j->id, "object",
                                       chat ? "chat.completion.chunk" : "text_completion",
                                       "created", (json_int_t)j->created, "model", j->srv->model_id,
                                       "choices", "usage", usage_obj(j)));
            }
            out_append(j, "data: [DONE]\n\n", 14);
            j->ended = true;
            continue;
        }
        job_check_abandon(j);
        if (j->gone) return MHD_CONTENT_READER_END_WITH_ERROR;
        rl_event ev;
        int i = job_next(j, &ev, 100);
        if (i < 0) continue;
        on_event(j, i, &ev, true);
        /* batch whatever else is ready without waiting */
        while (j->n_left > 0 && j->out.n < 8192 && (i = job_next(j, &ev, 0)) >= 0)
            on_event(j, i, &ev, true);
    }
}

static void stream_free(void *cls) {
    job_free(cls);
}

/* ---- non-streaming ---- */
static enum MHD_Result run_blocking(gen_job *j) {
    rl_srv_req *rq = j->rq;
    while (j->n_left > 0) {
        job_check_abandon(j);
        rl_event ev;
        int i = job_next(j, &ev, 100);
        if (i >= 0) on_event(j, i, &ev, false);
    }
    if (j->gone) {
        job_free(j);
        return MHD_NO; /* nobody to answer: close the connection */
    }
    bool chat = j->req.kind == RL_OAI_CHAT;
    for (int i = 0; i < j->req.n; i++) {
        if (j->ch[i].fin == RL_FINISH_ERROR || j->ch[i].fin == RL_FINISH_CANCELLED) {
            rl_oai_err e;
            if (j->ch[i].fin == RL_FINISH_ERROR)
                rl_oai_fail(&e, finish_status(j->ch[i].err_code), NULL, NULL,
                            "generation failed: %s",
                            j->ch[i].err[0] ? j->ch[i].err : "engine error");
            else
                rl_oai_fail(&e, 503, NULL, "shutting_down",
                            "the request was cancelled (the server is shutting down)");
            job_free(j);
            return rl_srv_reply_error(rq, &e);
        }
    }
    if (j->infill) {
        json_t *o = infill_obj(j, &j->ch[0], j->ch[0].text.p, j->ch[0].text.n, true);
        char *txt = NULL;
        size_t len = 0;
        rl_err err;
        if (o && rl_detokenize(j->srv->vocab, j->prompt, (size_t)j->n_prompt, 0, &txt, &len,
                               &err) == RL_OK)
            json_object_set_new(o, "prompt", rl_srv_json_text(txt, len));
        rl_free(txt);
        job_free(j);
        return rl_srv_reply_json(rq, 200, o);
    }
    if (j->anth || j->resp) {
        choice *c = &j->ch[0];
        bool calls;
        json_t *msg =
            rl_srv_tools_message(&j->tools, call_seed(j, 0), c->text.p, c->text.n, &calls);
        const char *fin = calls && c->fin == RL_FINISH_STOP ? "tool_calls" : finish_str(c->fin);
        json_t *o = !msg      ? NULL
                    : j->anth ? rl_srv_anth_message(j->id, j->srv->model_id, msg, fin, j->n_prompt,
                                                    c->n_gen)
                              : rl_srv_resp_object(j->id, j->created, j->srv->model_id, msg, fin,
                                                   j->n_prompt, c->n_gen, NULL);
        json_decref(msg);
        job_free(j);
        return rl_srv_reply_json(rq, 200, o);
    }
    json_t *choices = json_array();
    for (int i = 0; i < j->req.n; i++) {
        choice *c = &j->ch[i];
        json_t *text;
        if (j->prompt_text) {
            rl_buf t = {0}; /* echo: prompt text + completion */
            bool ok = !rl_buf_append(&t, j->prompt_text, j->prompt_text_len) &&
                      !rl_buf_append(&t, c->text.p, c->text.n);
            text = rl_srv_json_text(ok ? t.p : "", ok ? t.n : 0);
            rl_buf_free(&t);
        } else {
            text = rl_srv_json_text(c->text.p ? c->text.p : "", c->text.n);
        }
        json_t *lp = c->lp ? (chat ? json_pack("{s:O}", "content", c->lp) : json_incref(c->lp))
                           : json_null();
        json_t *msg = NULL;
        const char *fin = finish_str(c->fin);
        if (chat && j->tools.active) {
            bool calls;
            msg = rl_srv_tools_message(&j->tools, call_seed(j, i), c->text.p, c->text.n, &calls);
            if (calls && c->fin == RL_FINISH_STOP) fin = "tool_calls";
        }
        json_t *item =
            msg ? (json_decref(text), json_pack("{s:i, s:o, s:o, s:s}", "index", i, "message", msg,
                                                "logprobs", lp, "finish_reason", fin))
            : chat ? json_pack("{s:i, s:{s:s, s:o}, s:o, s:s}", "index", i, "message", "role",
                               "assistant", "content", text, "logprobs", lp, "finish_reason",
                               finish_str(c->fin))
                   : json_pack("{s:i, s:o, s:o, s:s}", "index", i, "text", text, "logprobs", lp,
                               "finish_reason", finish_str(c->fin));
        json_array_append_new(choices, item);
    }
    json_t *o = json_pack("{s:s, s:s, s:I, s:s, s:s, s:o, s:o}", "id", j->id, "object",
                          chat ? "chat.completion" : "text_completion", "created",
                          (json_int_t)j->created, "model", j->srv->model_id, "system_fingerprint",
                          "redline-" RL_SERVER_VERSION, "choices", choices, "usage", usage_obj(j));
    job_free(j);
    return rl_srv_reply_json(rq, 200, o);
}

/* Maps a failed rl_engine_submit to an HTTP error. */
static void submit_error(const rl_err *err, const gen_job *j, rl_oai_err *e) {
    const char *param = j->req.kind == RL_OAI_CHAT ? "messages" : "prompt";
    if (err->code == RL_ERR_LIMIT && strstr(err->msg, "queue full"))
        rl_oai_fail(e, 503, NULL, "queue_full", "the server is busy (%s); retry later", err->msg);
    else if (err->code == RL_ERR_LIMIT)
        rl_oai_fail(e, 400, param, "context_length_exceeded", "%s", err->msg);
    else if (err->code == RL_ERR_NOMEM)
        rl_oai_fail(e, 503, NULL, "out_of_memory", "%s", err->msg);
    else {
        char pname[64];
        size_t k = strcspn(err->msg, ":[");
        snprintf(pname, sizeof pname, "%.*s", (int)(k < 63 ? k : 63), err->msg);
        rl_oai_fail(e, 400, pname, "invalid_value", "%s", err->msg);
    }
}

/* One generation request; `body` is the OpenAI-shaped body (for
 * /v1/messages the translated one, anth set). */
typedef enum api { API_OPENAI, API_ANTHROPIC, API_RESPONSES, API_INFILL } api;

static enum MHD_Result generate(rl_srv_req *rq, rl_oai_kind kind, const char *body, size_t body_len,
                                api which) {
    bool anth = which == API_ANTHROPIC, resp = which == API_RESPONSES;
    rl_srv *s = rq->srv;
    rl_oai_limits lim;
    rl_oai_limits_default(&lim, s->n_vocab, s->n_ctx);
    lim.default_spec = s->cfg.default_spec;
    lim.have_draft = s->cfg.ep.draft_model_path != NULL;
    gen_job *j = calloc(1, sizeof *j);
    if (!j) return MHD_NO;
    j->srv = s;
    j->t_start = rq->t0;
    j->created = (int64_t)time(NULL);
    j->anth = anth;
    j->as.open_call = -1;
    j->resp = resp;
    j->infill = which == API_INFILL;
    rl_oai_err e;
    if (!rl_oai_parse(body, body_len, kind, &lim, &j->req, &e) || !build_prompt(j, &e)) {
        if (anth) rl_srv_anth_fix_param(&e);
        if (resp) rl_srv_resp_fix_param(&e);
        job_free(j);
        return rl_srv_reply_error(rq, &e);
    }
    if (anth || resp) j->tools.active = true;
    atomic_store(&rq->n_prompt, j->n_prompt);
    rl_engine_stats st = rl_engine_get_stats(s->eng);
    if (st.n_waiting >= s->cfg.max_queue) {
        job_free(j);
        rl_oai_fail(&e, 503, NULL, "queue_full",
                    "the server is busy (%d requests waiting); retry later", st.n_waiting);
        return rl_srv_reply_error(rq, &e);
    }
    uint64_t seq = atomic_fetch_add(&s->seq, 1);
    uint64_t r1 = rl_mix64(rl_time_ns() ^ (seq << 20)), r2 = rl_mix64(r1 ^ (uint64_t)(uintptr_t)j);
    snprintf(j->id, sizeof j->id, "%s%016llx%08llx",
             anth                  ? "msg_"
             : resp                ? "resp_"
             : kind == RL_OAI_CHAT ? "chatcmpl-"
                                   : "cmpl-",
             (unsigned long long)r1, (unsigned long long)(r2 & 0xffffffffu));
    /* from here on the job is counted and owns a reference to rq */
    atomic_fetch_add(&s->n_active, 1);
    atomic_fetch_add(&rq->refs, 1);
    j->rq = rq;
    for (int i = 0; i < j->req.n; i++) {
        rl_gen_params gp = j->req.gp;
        gp.sample.seed =
            j->req.seed_given ? j->req.gp.sample.seed + (uint64_t)i : rl_mix64(r2 + (uint64_t)i);
        rl_err err = {0};
        if (rl_engine_submit(s->eng, j->prompt, j->n_prompt, &gp, &j->ch[i].id, &err) != RL_OK) {
            submit_error(&err, j, &e);
            job_free(j);
            return rl_srv_reply_error(rq, &e);
        }
        j->ch[i].submitted = true;
        j->n_left++;
    }
    if (!j->req.stream) return run_blocking(j);

    if (anth)
        rl_srv_anth_start(j->id, s->model_id, j->n_prompt, &j->out);
    else if (resp)
        rl_srv_resp_start(&j->rs, j->id, j->created, s->model_id, &j->out);
    else if (j->infill)
        ; /* llama-server sends no opening event */
    else if (kind == RL_OAI_CHAT)
        for (int i = 0; i < j->req.n; i++)
            out_event(j, chunk(j, i, json_pack("{s:s, s:s}", "role", "assistant", "content", ""),
                               NULL, NULL));
    else if (j->prompt_text)
        for (int i = 0; i < j->req.n; i++)
            out_event(
                j, chunk(j, i, rl_srv_json_text(j->prompt_text, j->prompt_text_len), NULL, NULL));
    struct MHD_Response *r =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_reader, j, stream_free);
    if (!r) {
        job_free(j);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", "text/event-stream");
    MHD_add_response_header(r, "Cache-Control", "no-cache");
    MHD_add_response_header(r, "X-Accel-Buffering", "no");
    rl_srv_add_cors(r);
    rq->status = 200;
    enum MHD_Result ret = MHD_queue_response(rq->conn, 200, r);
    MHD_destroy_response(r); /* the job is freed with the response (stream_free) */
    return ret;
}

enum MHD_Result rl_srv_generate(rl_srv_req *rq, rl_oai_kind kind) {
    return generate(rq, kind, rq->body.p ? rq->body.p : "", rq->body.n, API_OPENAI);
}

enum MHD_Result rl_srv_infill(rl_srv_req *rq) {
    return generate(rq, RL_OAI_INFILL, rq->body.p ? rq->body.p : "", rq->body.n, API_INFILL);
}

enum MHD_Result rl_srv_messages(rl_srv_req *rq) {
    char *body = NULL;
    rl_oai_err e;
    if (!rl_srv_anth_to_oai(rq->body.p ? rq->body.p : "", rq->body.n, &body, &e))
        return rl_srv_reply_error(rq, &e);
    enum MHD_Result r = generate(rq, RL_OAI_CHAT, body, strlen(body), API_ANTHROPIC);
    free(body);
    return r;
}

enum MHD_Result rl_srv_responses(rl_srv_req *rq) {
    char *body = NULL;
    rl_oai_err e;
    if (!rl_srv_resp_to_oai(rq->body.p ? rq->body.p : "", rq->body.n, &body, &e))
        return rl_srv_reply_error(rq, &e);
    enum MHD_Result r = generate(rq, RL_OAI_CHAT, body, strlen(body), API_RESPONSES);
    free(body);
    return r;
}

/* ---- /tokenize and /detokenize ---- */
enum MHD_Result rl_srv_tokenize(rl_srv_req *rq) {
    rl_srv *s = rq->srv;
    rl_oai_err e;
    json_t *root = rl_oai_parse_object(rq->body.p ? rq->body.p : "", rq->body.n, &e);
    if (!root) return rl_srv_reply_error(rq, &e);
    int32_t *ids = NULL, n = 0;
    bool ok;
    if (json_object_get(root, "messages")) {
        rl_oai_limits lim;
        rl_oai_limits_default(&lim, s->n_vocab, s->n_ctx);
        rl_oai_req r;
        json_t *agp = json_object_get(root, "add_generation_prompt");
        if (agp && !json_is_boolean(agp)) {
            json_decref(root);
            rl_oai_fail(&e, 400, "add_generation_prompt", "invalid_type",
                        "add_generation_prompt: must be a boolean");
            return rl_srv_reply_error(rq, &e);
        }
        ok = rl_oai_parse(rq->body.p ? rq->body.p : "", rq->body.n, RL_OAI_CHAT, &lim, &r, &e);
        char *txt = NULL;
        size_t len = 0;
        if (ok) {
            rl_srv_tools t;
            rl_srv_tools_init(s, &r, &t);
            bool add_gen = !agp || json_is_true(agp);
            ok = rl_srv_chat_needs_ctx(&r)
                     ? rl_srv_render_ctx(s, &r, &t.fmt, add_gen, &txt, &len, &e)
                     : render_chat(s, &r, add_gen, &txt, &len, &e);
        }
        if (ok) ok = encode_text(s, txt, len, true, &ids, &n, "messages", &e);
        rl_free(txt);
        rl_oai_req_free(&r); /* zeroed already when parsing failed */
    } else {
        json_t *c = json_object_get(root, "content");
        const char *fname = "content";
        if (!c) {
            c = json_object_get(root, "prompt");
            fname = "prompt";
        }
        json_t *as = json_object_get(root, "add_special");
        if (!json_is_string(c)) {
            ok = rl_oai_fail(&e, 400, fname, "invalid_type",
                             "%s: must be a string (or send messages)", fname);
        } else if (as && !json_is_boolean(as)) {
            ok = rl_oai_fail(&e, 400, "add_special", "invalid_type",
                             "add_special: must be a boolean");
        } else {
            ok = encode_text(s, json_string_value(c), json_string_length(c),
                             !(as && json_is_false(as)), &ids, &n, fname, &e);
        }
    }
    json_decref(root);
    if (!ok) {
        rl_free(ids);
        return rl_srv_reply_error(rq, &e);
    }
    json_t *arr = json_array();
    for (int32_t i = 0; i < n; i++) json_array_append_new(arr, json_integer(ids[i]));
    rl_free(ids);
    return rl_srv_reply_json(
        rq, 200,
        json_pack("{s:o, s:i, s:i}", "tokens", arr, "count", n, "max_model_len", s->n_ctx));
}

enum MHD_Result rl_srv_detokenize(rl_srv_req *rq) {
    rl_srv *s = rq->srv;
    rl_oai_err e;
    json_t *root = rl_oai_parse_object(rq->body.p ? rq->body.p : "", rq->body.n, &e);
    if (!root) return rl_srv_reply_error(rq, &e);
    int32_t *ids = NULL, n = 0;
    json_t *t = json_object_get(root, "tokens");
    if (!t) {
        json_decref(root);
        rl_oai_fail(&e, 400, "tokens", "missing_field", "tokens: is required");
        return rl_srv_reply_error(rq, &e);
    }
    bool ok = rl_oai_token_array(t, "tokens", s->n_vocab, 1 << 20, true, &ids, &n, &e);
    json_decref(root);
    if (!ok) return rl_srv_reply_error(rq, &e);
    char *txt = NULL;
    size_t len = 0;
    rl_err err = {0};
    if (rl_detokenize(s->vocab, ids, (size_t)n, 0, &txt, &len, &err) != RL_OK) {
        rl_free(ids);
        rl_oai_fail(&e, 400, "tokens", "invalid_value", "tokens: %s", err.msg);
        return rl_srv_reply_error(rq, &e);
    }
    rl_free(ids);
    json_t *o = json_pack("{s:o, s:o}", "content", rl_srv_json_text(txt, len), "prompt",
                          rl_srv_json_text(txt, len));
    rl_free(txt);
    return rl_srv_reply_json(rq, 200, o);
}
