/* Anthropic's Messages API, POST /v1/messages (server-impl.h, "Anthropic").
 *
 * A request is translated into the equivalent OpenAI chat body and then
 * goes through the same parser, template, grammar and engine path as
 * /v1/chat/completions (oai.c); only the two ends differ:
 *   - in: system (a string or text blocks) -> a system message; content
 *     blocks text / tool_use / tool_result -> content, assistant
 *     tool_calls (input re-encoded as the arguments string) and tool
 *     messages; tools {name, description, input_schema} -> functions;
 *     tool_choice auto / any / tool / none (+ disable_parallel_tool_use);
 *     max_tokens (required), stop_sequences, temperature, top_p, top_k.
 *     What only Anthropic's shape can get wrong (an unknown block type, a
 *     tool_result whose tool_use_id matches no tool_use) is checked here,
 *     so the error names Anthropic's field;
 *   - out: the parsed output (oai_tools.c) as content blocks (thinking,
 *     text, tool_use), stop_reason end_turn / max_tokens / tool_use, and
 *     when streaming the typed events message_start, content_block_start /
 *     _delta / _stop, message_delta, message_stop;
 *   - errors: {"type": "error", "error": {"type", "message"}}.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/server-impl.h"

#define INVALID "invalid_request_error"

bool rl_srv_is_anthropic(const rl_srv_req *rq) {
    return !strcmp(rq->path, "/v1/messages") || !strcmp(rq->path, "/messages");
}

char *rl_srv_anth_err_json(const rl_oai_err *e) {
    const char *t = e->status == 401   ? "authentication_error"
                    : e->status == 404 ? "not_found_error"
                    : e->status == 413 ? "request_too_large"
                    : e->status == 429 ? "rate_limit_error"
                    : e->status == 503 ? "overloaded_error"
                    : e->status >= 500 ? "api_error"
                                       : INVALID;
    json_t *o = json_pack("{s:s, s:{s:s, s:s}}", "type", "error", "error", "type", t, "message",
                          e->message);
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return s;
}

/* The text of a content value that must be text: a string or text blocks. */
static bool text_of(json_t *c, const char *param, rl_buf *b, rl_oai_err *e) {
    if (json_is_string(c)) return !rl_buf_append(b, json_string_value(c), json_string_length(c));
    if (!json_is_array(c))
        return rl_oai_fail(e, 400, param, "invalid_type", "%s: must be a string or text blocks",
                           param);
    for (size_t k = 0; k < json_array_size(c); k++) {
        json_t *blk = json_array_get(c, k);
        const char *ty = json_string_value(json_object_get(blk, "type"));
        json_t *tx = json_object_get(blk, "text");
        if (!ty || strcmp(ty, "text") || !json_is_string(tx))
            return rl_oai_fail(e, 400, param, "invalid_value", "%s[%zu]: must be a text block",
                               param, k);
        if (rl_buf_append(b, json_string_value(tx), json_string_length(tx)))
            return rl_oai_fail(e, 500, NULL, NULL, "out of memory");
    }
    return true;
}

/* One Anthropic message -> OpenAI messages appended to `out`; ids of the
 * tool_use blocks so far in `ids`. */
static bool one_message(json_t *m, size_t i, json_t *out, json_t *ids, rl_oai_err *e) {
    char param[64];
    snprintf(param, sizeof param, "messages[%zu]", i);
    const char *role = json_string_value(json_object_get(m, "role"));
    if (!json_is_object(m) || !role || (strcmp(role, "user") && strcmp(role, "assistant")))
        return rl_oai_fail(e, 400, param, "invalid_value", "%s.role: must be user or assistant",
                           param);
    json_t *c = json_object_get(m, "content");
    if (json_is_string(c))
        return !json_array_append_new(out, json_pack("{s:s, s:O}", "role", role, "content", c));
    snprintf(param, sizeof param, "messages[%zu].content", i);
    if (!json_is_array(c))
        return rl_oai_fail(e, 400, param, "invalid_type",
                           "%s: must be a string or an array of blocks", param);
    rl_buf text = {0};
    json_t *calls = json_array();
    bool ok = true;
    for (size_t k = 0; ok && k < json_array_size(c); k++) {
        json_t *blk = json_array_get(c, k);
        const char *ty = json_string_value(json_object_get(blk, "type"));
        snprintf(param, sizeof param, "messages[%zu].content[%zu]", i, k);
        if (ty && !strcmp(ty, "text") && json_is_string(json_object_get(blk, "text"))) {
            json_t *tx = json_object_get(blk, "text");
            ok = !rl_buf_append(&text, json_string_value(tx), json_string_length(tx));
        } else if (ty && !strcmp(ty, "tool_use") && !strcmp(role, "assistant")) {
            const char *id = json_string_value(json_object_get(blk, "id"));
            const char *name = json_string_value(json_object_get(blk, "name"));
            json_t *in = json_object_get(blk, "input");
            if (!id || !id[0] || !name || (in && !json_is_object(in))) {
                ok = rl_oai_fail(e, 400, param, "invalid_value",
                                 "%s: a tool_use block needs id, name and an input object", param);
                break;
            }
            char *args = json_dumps(in ? in : json_object(), JSON_COMPACT);
            json_array_append_new(calls, json_pack("{s:s, s:s, s:{s:s, s:s}}", "id", id, "type",
                                                   "function", "function", "name", name,
                                                   "arguments", args ? args : "{}"));
            free(args);
            json_object_set_new(ids, id, json_true());
        } else if (ty && !strcmp(ty, "tool_result") && !strcmp(role, "user")) {
            const char *id = json_string_value(json_object_get(blk, "tool_use_id"));
            char p2[80];
            snprintf(p2, sizeof p2, "%s.tool_use_id", param);
            if (!id || !json_object_get(ids, id)) {
                ok = rl_oai_fail(e, 400, p2, "invalid_value",
                                 "%s: '%.100s' is the id of no earlier tool_use block", p2,
                                 id ? id : "");
                break;
            }
            rl_buf r = {0};
            json_t *rc = json_object_get(blk, "content");
            snprintf(p2, sizeof p2, "%s.content", param);
            ok = !rc || text_of(rc, p2, &r, e);
            if (ok)
                json_array_append_new(out,
                                      json_pack("{s:s, s:s, s:s%}", "role", "tool", "tool_call_id",
                                                id, "content", r.p ? r.p : "", r.n));
            rl_buf_free(&r);
        } else {
            ok = rl_oai_fail(e, 400, param, "invalid_value",
                             "%s.type: '%.40s' is not a block type a %s message may carry "
                             "(text, %s)",
                             param, ty ? ty : "", role,
                             strcmp(role, "user") ? "tool_use" : "tool_result");
        }
    }
    if (ok && (text.n || json_array_size(calls) || !json_array_size(c))) {
        json_t *msg =
            json_pack("{s:s, s:s%}", "role", role, "content", text.p ? text.p : "", text.n);
        if (json_array_size(calls)) json_object_set(msg, "tool_calls", calls);
        json_array_append_new(out, msg);
    }
    json_decref(calls);
    rl_buf_free(&text);
    return ok;
}

bool rl_srv_anth_to_oai(const char *body, size_t len, char **out, rl_oai_err *e) {
    *out = NULL;
    json_t *in = rl_oai_parse_object(body, len, e);
    if (!in) return false;
    json_t *o = json_object(), *msgs = json_array(), *ids = json_object();
    bool ok = false;
    json_t *v = json_object_get(in, "max_tokens");
    if (!json_is_integer(v)) {
        rl_oai_fail(e, 400, "max_tokens", "missing_field", "max_tokens: is required (an integer)");
        goto done;
    }
    json_object_set(o, "max_tokens", v);
    /* (ignore_eos: redline's extension, as on chat) */
    const char *copy[] = {"model", "temperature", "top_p", "top_k", "stream", "ignore_eos"};
    for (int k = 0; k < 6; k++)
        if ((v = json_object_get(in, copy[k]))) json_object_set(o, copy[k], v);
    if ((v = json_object_get(in, "stop_sequences"))) json_object_set(o, "stop", v);
    /* thinking {"type": "enabled", "budget_tokens": N} -> the reasoning
     * budget; "disabled" -> 0 (the block, if the template opens one, is
     * closed at once) */
    if ((v = json_object_get(in, "thinking")) && !json_is_null(v)) {
        const char *t = json_string_value(json_object_get(v, "type"));
        json_t *bt = json_object_get(v, "budget_tokens");
        if (!json_is_object(v) || !t || (strcmp(t, "enabled") && strcmp(t, "disabled")) ||
            (!strcmp(t, "enabled") && (!json_is_integer(bt) || json_integer_value(bt) < 0))) {
            rl_oai_fail(e, 400, "thinking", "invalid_value",
                        "thinking: must be {\"type\": \"enabled\", \"budget_tokens\": an "
                        "integer >= 0} or {\"type\": \"disabled\"}");
            goto done;
        }
        json_object_set_new(o, "max_reasoning_tokens",
                            json_integer(strcmp(t, "enabled") ? 0 : json_integer_value(bt)));
    }
    if ((v = json_object_get(in, "system"))) {
        rl_buf b = {0};
        if (!text_of(v, "system", &b, e)) {
            rl_buf_free(&b);
            goto done;
        }
        json_array_append_new(
            msgs, json_pack("{s:s, s:s%}", "role", "system", "content", b.p ? b.p : "", b.n));
        rl_buf_free(&b);
    }
    v = json_object_get(in, "messages");
    if (!json_is_array(v) || !json_array_size(v)) {
        rl_oai_fail(e, 400, "messages", "invalid_value", "messages: must be a non-empty array");
        goto done;
    }
    for (size_t i = 0; i < json_array_size(v); i++)
        if (!one_message(json_array_get(v, i), i, msgs, ids, e)) goto done;
    json_object_set(o, "messages", msgs);
    if ((v = json_object_get(in, "tools"))) {
        if (!json_is_array(v)) {
            rl_oai_fail(e, 400, "tools", "invalid_type", "tools: must be an array");
            goto done;
        }
        json_t *tools = json_array();
        for (size_t i = 0; i < json_array_size(v); i++) {
            json_t *t = json_array_get(v, i), *f = json_object();
            const char *keys[][2] = {
                {"name", "name"}, {"description", "description"}, {"input_schema", "parameters"}};
            for (int k = 0; k < 3; k++)
                if (json_object_get(t, keys[k][0]))
                    json_object_set(f, keys[k][1], json_object_get(t, keys[k][0]));
            json_array_append_new(tools,
                                  json_pack("{s:s, s:o}", "type", "function", "function", f));
        }
        json_object_set_new(o, "tools", tools);
    }
    if ((v = json_object_get(in, "tool_choice"))) {
        const char *t = json_string_value(json_object_get(v, "type"));
        if (!t ||
            (strcmp(t, "auto") && strcmp(t, "any") && strcmp(t, "tool") && strcmp(t, "none"))) {
            rl_oai_fail(e, 400, "tool_choice", "invalid_value",
                        "tool_choice.type: must be auto, any, tool or none");
            goto done;
        }
        if (!strcmp(t, "tool"))
            json_object_set_new(
                o, "tool_choice",
                json_pack("{s:s, s:{s:O}}", "type", "function", "function", "name",
                          json_object_get(v, "name") ? json_object_get(v, "name") : json_null()));
        else
            json_object_set_new(o, "tool_choice", json_string(!strcmp(t, "any") ? "required" : t));
        if (json_is_true(json_object_get(v, "disable_parallel_tool_use")))
            json_object_set_new(o, "parallel_tool_calls", json_false());
    }
    *out = json_dumps(o, JSON_COMPACT);
    ok = *out != NULL || rl_oai_fail(e, 500, NULL, NULL, "out of memory");
done:
    json_decref(in);
    json_decref(o);
    json_decref(msgs);
    json_decref(ids);
    return ok;
}

/* Anthropic's names for the fields the shared parser reports. */
/* Replaces each `from` in s by the shorter `to`, in place. */
static void shrink_all(char *s, const char *from, const char *to) {
    size_t fl = strlen(from), tl = strlen(to);
    for (char *p = strstr(s, from); p; p = strstr(p + tl, from))
        memmove(p + tl, p + fl, strlen(p + fl) + 1), memcpy(p, to, tl);
}

void rl_srv_anth_fix_param(rl_oai_err *e) {
    static const char *from[] = {".function.parameters", ".function.name"},
                      *to[] = {".input_schema", ".name"};
    for (int k = 0; k < 2; k++) {
        shrink_all(e->param, from[k], to[k]);
        shrink_all(e->message, from[k], to[k]);
    }
    if (!strcmp(e->param, "stop")) snprintf(e->param, sizeof e->param, "stop_sequences");
    rl_oai_rename_param(e, "max_reasoning_tokens", "thinking.budget_tokens");
}

static const char *stop_reason(const char *finish) {
    if (!finish || !strcmp(finish, "stop")) return "end_turn";
    if (!strcmp(finish, "length")) return "max_tokens";
    if (!strcmp(finish, "tool_calls")) return "tool_use";
    return "end_turn";
}

json_t *rl_srv_anth_message(const char *id, const char *model, json_t *msg, const char *finish,
                            int n_in, int n_out) {
    json_t *content = json_array();
    const char *rc = json_string_value(json_object_get(msg, "reasoning_content"));
    if (rc && rc[0])
        json_array_append_new(content, json_pack("{s:s, s:s, s:s}", "type", "thinking", "thinking",
                                                 rc, "signature", ""));
    json_t *tx = json_object_get(msg, "content");
    if (json_is_string(tx) && json_string_length(tx))
        json_array_append_new(content, json_pack("{s:s, s:O}", "type", "text", "text", tx));
    json_t *tc = json_object_get(msg, "tool_calls");
    for (size_t k = 0; json_is_array(tc) && k < json_array_size(tc); k++) {
        json_t *c = json_array_get(tc, k), *f = json_object_get(c, "function");
        const char *a = json_string_value(json_object_get(f, "arguments"));
        json_t *input = a ? json_loads(a, 0, NULL) : NULL;
        if (!json_is_object(input)) {
            json_decref(input);
            input = json_object();
        }
        json_array_append_new(content, json_pack("{s:s, s:O, s:O, s:o}", "type", "tool_use", "id",
                                                 json_object_get(c, "id"), "name",
                                                 json_object_get(f, "name"), "input", input));
    }
    return json_pack("{s:s, s:s, s:s, s:s, s:o, s:s, s:n, s:{s:i, s:i}}", "id", id, "type",
                     "message", "role", "assistant", "model", model, "content", content,
                     "stop_reason", stop_reason(finish), "stop_sequence", "usage", "input_tokens",
                     n_in, "output_tokens", n_out);
}

/* ---- streaming ---- */

static void event(rl_buf *out, const char *type, json_t *data) {
    char *s = data ? json_dumps(data, JSON_COMPACT) : NULL;
    json_decref(data);
    if (!s) return;
    rl_buf_printf(out, "event: %s\ndata: %s\n\n", type, s);
    free(s);
}

void rl_srv_anth_start(const char *id, const char *model, int n_in, rl_buf *out) {
    event(out, "message_start",
          json_pack("{s:s, s:{s:s, s:s, s:s, s:s, s:[], s:n, s:n, s:{s:i, s:i}}}", "type",
                    "message_start", "message", "id", id, "type", "message", "role", "assistant",
                    "model", model, "content", "stop_reason", "stop_sequence", "usage",
                    "input_tokens", n_in, "output_tokens", 0));
}

static void close_block(rl_srv_anth *st, rl_buf *out) {
    if (st->open_kind == 0) return;
    event(out, "content_block_stop",
          json_pack("{s:s, s:i}", "type", "content_block_stop", "index", st->n_blocks - 1));
    st->open_kind = 0;
}

/* Opens a block of kind k ('r' thinking, 't' text, 'c' tool_use) unless one is open. */
static void open_block(rl_srv_anth *st, char k, json_t *block, rl_buf *out) {
    close_block(st, out);
    event(out, "content_block_start",
          json_pack("{s:s, s:i, s:o}", "type", "content_block_start", "index", st->n_blocks,
                    "content_block", block));
    st->n_blocks++;
    st->open_kind = k;
}

static void delta(rl_srv_anth *st, json_t *d, rl_buf *out) {
    event(out, "content_block_delta",
          json_pack("{s:s, s:i, s:o}", "type", "content_block_delta", "index", st->n_blocks - 1,
                    "delta", d));
}

void rl_srv_anth_events(rl_srv_anth *st, json_t *d, rl_buf *out) {
    const char *r = json_string_value(json_object_get(d, "reasoning_content"));
    if (r && r[0]) {
        if (st->open_kind != 'r')
            open_block(st, 'r', json_pack("{s:s, s:s}", "type", "thinking", "thinking", ""), out);
        delta(st, json_pack("{s:s, s:s}", "type", "thinking_delta", "thinking", r), out);
    }
    const char *c = json_string_value(json_object_get(d, "content"));
    if (c && c[0]) {
        if (st->open_kind != 't')
            open_block(st, 't', json_pack("{s:s, s:s}", "type", "text", "text", ""), out);
        delta(st, json_pack("{s:s, s:s}", "type", "text_delta", "text", c), out);
    }
    json_t *tc = json_object_get(d, "tool_calls");
    for (size_t k = 0; json_is_array(tc) && k < json_array_size(tc); k++) {
        json_t *call = json_array_get(tc, k), *f = json_object_get(call, "function");
        int idx = (int)json_integer_value(json_object_get(call, "index"));
        if (json_object_get(call, "id") && idx != st->open_call) {
            open_block(st, 'c',
                       json_pack("{s:s, s:O, s:O, s:{}}", "type", "tool_use", "id",
                                 json_object_get(call, "id"), "name", json_object_get(f, "name"),
                                 "input"),
                       out);
            st->open_call = idx;
        }
        const char *a = json_string_value(json_object_get(f, "arguments"));
        if (a && a[0] && st->open_kind == 'c')
            delta(st, json_pack("{s:s, s:s}", "type", "input_json_delta", "partial_json", a), out);
    }
}

void rl_srv_anth_finish(rl_srv_anth *st, const char *finish, int n_out, rl_buf *out) {
    close_block(st, out);
    event(out, "message_delta",
          json_pack("{s:s, s:{s:s, s:n}, s:{s:i}}", "type", "message_delta", "delta", "stop_reason",
                    stop_reason(finish), "stop_sequence", "usage", "output_tokens", n_out));
    event(out, "message_stop", json_pack("{s:s}", "type", "message_stop"));
}
