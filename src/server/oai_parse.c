/* OpenAI request parsing: JSON body -> validated rl_oai_req (see
 * oai_parse.h for the contract).  Pure code: jansson and librl only, no
 * HTTP, no engine, so the fuzz target can compile this file directly.
 *
 * Field rules follow the OpenAI API where it has one (ranges of
 * temperature, top_p, penalties, n, logit_bias) and vLLM's extensions
 * otherwise (top_k, min_p, repetition_penalty, ignore_eos, priority).
 * `null` counts as "not given" for every optional field.
 */
#include "server/oai_parse.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"

#define INVALID "invalid_request_error"

void rl_oai_limits_default(rl_oai_limits *lim, int32_t n_vocab, int32_t n_ctx) {
    lim->n_vocab = n_vocab;
    lim->n_ctx = n_ctx;
    lim->max_n = RL_OAI_MAX_N;
    lim->max_messages = 1024;
    lim->default_spec = RL_SPEC_NONE;
    lim->have_draft = false;
}

void rl_oai_rename_param(rl_oai_err *e, const char *from, const char *to) {
    size_t fl = strlen(from);
    if (strcmp(e->param, from)) return;
    char m[sizeof e->message + 64];
    const char *rest = strncmp(e->message, from, fl) ? e->message : e->message + fl;
    snprintf(m, sizeof m, "%s%s", to, rest);
    memcpy(e->message, m, sizeof e->message - 1); /* m is NUL-terminated within */
    e->message[sizeof e->message - 1] = 0;
    snprintf(e->param, sizeof e->param, "%s", to);
}

bool rl_oai_fail(rl_oai_err *e, int status, const char *param, const char *code, const char *fmt,
                 ...) {
    e->status = status;
    e->type = status == 401                    ? "authentication_error"
              : status == 404                  ? "not_found_error"
              : status == 429 || status == 503 ? "server_overloaded"
              : status >= 500                  ? "server_error"
                                               : INVALID;
    e->code = code;
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    return false;
}

char *rl_oai_err_json(const rl_oai_err *e) {
    json_t *o = json_pack("{s:{s:s, s:s, s:o, s:o}}", "error", "message", e->message, "type",
                          e->type ? e->type : INVALID, "param",
                          e->param[0] ? json_string(e->param) : json_null(), "code",
                          e->code ? json_string(e->code) : json_integer(e->status));
    /* json_pack fails only on invalid UTF-8 in message (it quotes user
     * input): fall back to a fixed text. */
    if (!o)
        o = json_pack("{s:{s:s, s:s, s:n, s:i}}", "error", "message",
                      "invalid request (the error message was not valid UTF-8)", "type", INVALID,
                      "param", "code", e->status);
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return s;
}

/* Copies at most 48 bytes of a user-supplied value into an error message,
 * replacing non-printable bytes, so messages stay short and valid UTF-8. */
static const char *clip(const char *s, char *buf, size_t cap) {
    size_t j = 0;
    for (size_t i = 0; s[i] && j + 4 < cap && i < 48; i++)
        buf[j++] = (s[i] >= 0x20 && s[i] < 0x7f) ? s[i] : '?';
    buf[j] = 0;
    return buf;
}

json_t *rl_oai_parse_object(const char *body, size_t len, rl_oai_err *e) {
    if (len == 0) {
        rl_oai_fail(e, 400, NULL, "invalid_json", "request body is empty; expected a JSON object");
        return NULL;
    }
    json_error_t je;
    json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        char tmp[200];
        rl_oai_fail(e, 400, NULL, "invalid_json", "request body is not valid JSON: %s at byte %d",
                    clip(je.text, tmp, sizeof tmp), je.position);
        return NULL;
    }
    if (!json_is_object(root)) {
        json_decref(root);
        rl_oai_fail(e, 400, NULL, "invalid_json", "request body must be a JSON object");
        return NULL;
    }
    return root;
}

/* ---- typed field readers: each returns false with *e filled on a type or
 * range error; "absent" (missing or null) leaves *out unchanged and sets
 * *given = false. ---- */
static json_t *field(json_t *o, const char *k) {
    json_t *v = json_object_get(o, k);
    return json_is_null(v) ? NULL : v;
}

static bool get_bool(json_t *o, const char *k, bool *out, rl_oai_err *e) {
    json_t *v = field(o, k);
    if (!v) return true;
    if (!json_is_boolean(v))
        return rl_oai_fail(e, 400, k, "invalid_type", "%s: must be a boolean", k);
    *out = json_is_true(v);
    return true;
}

static bool get_num(json_t *o, const char *k, double lo, double hi, bool lo_open, float *out,
                    bool *given, rl_oai_err *e) {
    json_t *v = field(o, k);
    if (given) *given = v != NULL;
    if (!v) return true;
    if (!json_is_number(v))
        return rl_oai_fail(e, 400, k, "invalid_type", "%s: must be a number", k);
    double d = json_number_value(v);
    if (!isfinite(d) || d < lo || d > hi || (lo_open && d == lo))
        return rl_oai_fail(e, 400, k, "invalid_value", "%s: must be a number in %c%g, %g], got %g",
                           k, lo_open ? '(' : '[', lo, hi, d);
    *out = (float)d;
    return true;
}

static bool get_int(json_t *o, const char *k, int64_t lo, int64_t hi, int64_t *out, bool *given,
                    rl_oai_err *e) {
    json_t *v = field(o, k);
    if (given) *given = v != NULL;
    if (!v) return true;
    int64_t x;
    if (json_is_integer(v))
        x = json_integer_value(v);
    else if (json_is_real(v) && isfinite(json_real_value(v)) &&
             json_real_value(v) == floor(json_real_value(v)) && fabs(json_real_value(v)) < 9e15)
        x = (int64_t)json_real_value(v); /* 16.0 is accepted as 16 */
    else
        return rl_oai_fail(e, 400, k, "invalid_type", "%s: must be an integer", k);
    if (x < lo || x > hi)
        return rl_oai_fail(e, 400, k, "invalid_value",
                           "%s: must be an integer in [%lld, %lld], got %lld", k, (long long)lo,
                           (long long)hi, (long long)x);
    *out = x;
    return true;
}

static bool get_str(json_t *o, const char *k, const char **out, rl_oai_err *e) {
    json_t *v = field(o, k);
    if (!v) return true;
    if (!json_is_string(v))
        return rl_oai_fail(e, 400, k, "invalid_type", "%s: must be a string", k);
    *out = json_string_value(v);
    return true;
}

bool rl_oai_token_array(const json_t *v, const char *fieldname, int32_t n_vocab, int32_t max_n,
                        bool allow_empty, int32_t **ids, int32_t *n, rl_oai_err *e) {
    *ids = NULL;
    *n = 0;
    if (!json_is_array(v))
        return rl_oai_fail(e, 400, fieldname, "invalid_type", "%s: must be an array of token ids",
                           fieldname);
    size_t cnt = json_array_size(v);
    if (cnt == 0 && !allow_empty)
        return rl_oai_fail(e, 400, fieldname, "invalid_value", "%s: must not be empty", fieldname);
    if (cnt > (size_t)max_n)
        return rl_oai_fail(e, 400, fieldname, "context_length_exceeded",
                           "%s: %zu tokens is more than the limit of %d", fieldname, cnt, max_n);
    int32_t *a = cnt ? rl_malloc(cnt * sizeof *a) : NULL;
    if (cnt && !a) return rl_oai_fail(e, 500, NULL, NULL, "out of memory");
    for (size_t i = 0; i < cnt; i++) {
        json_t *t = json_array_get(v, i);
        if (!json_is_integer(t) || json_integer_value(t) < 0 || json_integer_value(t) >= n_vocab) {
            rl_free(a);
            return rl_oai_fail(e, 400, fieldname, "invalid_value",
                               "%s[%zu]: must be a token id in [0, %d)", fieldname, i, n_vocab);
        }
        a[i] = (int32_t)json_integer_value(t);
    }
    *ids = a;
    *n = (int32_t)cnt;
    return true;
}

/* ---- pieces of a request ---- */
static bool parse_stop(json_t *root, rl_gen_params *gp, rl_oai_err *e) {
    json_t *v = field(root, "stop");
    if (!v) return true;
    json_t *one[1] = {v};
    json_t **items = one;
    size_t cnt = 1;
    if (json_is_array(v)) {
        cnt = json_array_size(v);
        if (cnt > RL_MAX_STOP)
            return rl_oai_fail(e, 400, "stop", "invalid_value",
                               "stop: at most %d stop strings, got %zu", RL_MAX_STOP, cnt);
        items = NULL;
    } else if (!json_is_string(v)) {
        return rl_oai_fail(e, 400, "stop", "invalid_type",
                           "stop: must be a string or an array of strings");
    }
    gp->n_stop = 0;
    for (size_t i = 0; i < cnt; i++) {
        json_t *s = items ? items[i] : json_array_get(v, i);
        if (!json_is_string(s))
            return rl_oai_fail(e, 400, "stop", "invalid_type", "stop[%zu]: must be a string", i);
        size_t l = json_string_length(s);
        const char *p = json_string_value(s);
        if (l == 0 || l > RL_MAX_STOP_LEN || memchr(p, 0, l) || !rl_utf8_valid(p, l))
            return rl_oai_fail(e, 400, "stop", "invalid_value",
                               "stop[%zu]: must be 1..%d bytes of text without NUL", i,
                               RL_MAX_STOP_LEN);
        memcpy(gp->stop[gp->n_stop], p, l);
        gp->stop[gp->n_stop][l] = 0;
        gp->n_stop++;
    }
    return true;
}

static bool parse_logit_bias(json_t *root, const rl_oai_limits *lim, rl_oai_req *r, rl_oai_err *e) {
    json_t *v = field(root, "logit_bias");
    if (!v) return true;
    if (!json_is_object(v))
        return rl_oai_fail(e, 400, "logit_bias", "invalid_type",
                           "logit_bias: must be an object mapping token ids to numbers");
    size_t cnt = json_object_size(v);
    if (cnt > 1024)
        return rl_oai_fail(e, 400, "logit_bias", "invalid_value",
                           "logit_bias: at most 1024 entries, got %zu", cnt);
    if (cnt == 0) return true;
    r->bias = rl_calloc(cnt, sizeof *r->bias);
    if (!r->bias) return rl_oai_fail(e, 500, NULL, NULL, "out of memory");
    const char *key;
    json_t *val;
    int32_t i = 0;
    json_object_foreach(v, key, val) {
        char *end = NULL, tmp[64];
        long long id = strtoll(key, &end, 10);
        if (!key[0] || *end || id < 0 || id >= lim->n_vocab)
            return rl_oai_fail(e, 400, "logit_bias", "invalid_value",
                               "logit_bias: key '%s' is not a token id in [0, %d)",
                               clip(key, tmp, sizeof tmp), lim->n_vocab);
        if (!json_is_number(val) || !isfinite(json_number_value(val)) ||
            fabs(json_number_value(val)) > 100)
            return rl_oai_fail(e, 400, "logit_bias", "invalid_value",
                               "logit_bias[%lld]: must be a number in [-100, 100]", id);
        r->bias[i].id = (int32_t)id;
        r->bias[i].bias = (float)json_number_value(val);
        i++;
    }
    r->gp.sample.logit_bias = r->bias;
    r->gp.sample.n_logit_bias = i;
    return true;
}

/* Compiles the grammar of a structured-output request into r->gp.grammar;
 * a schema or grammar that cannot be honoured is a 400 naming it. */
static bool compile_grammar(rl_oai_req *r, const char *param, const char *text, size_t len,
                            bool is_schema, rl_oai_err *e) {
    rl_err err = {0};
    rl_grammar *g =
        rl_gen_grammar_new(is_schema ? RL_GRAMMAR_JSON_SCHEMA : RL_GRAMMAR_GBNF, text, len, &err);
    if (!g) return rl_oai_fail(e, 400, param, "invalid_value", "%s: %s", param, err.msg);
    rl_gen_grammar_free(r->gp.grammar);
    r->gp.grammar = g;
    return true;
}

static bool parse_response_format(json_t *root, rl_oai_req *r, rl_oai_err *e) {
    json_t *gv = field(root, "grammar"); /* extension: a GBNF grammar */
    if (gv && !json_is_null(gv)) {
        if (!json_is_string(gv))
            return rl_oai_fail(e, 400, "grammar", "invalid_type", "grammar: must be a string");
        if (!compile_grammar(r, "grammar", json_string_value(gv), json_string_length(gv), false, e))
            return false;
    }
    json_t *v = field(root, "response_format");
    if (!v) return true;
    if (!json_is_object(v))
        return rl_oai_fail(e, 400, "response_format", "invalid_type",
                           "response_format: must be an object");
    const char *t = json_string_value(json_object_get(v, "type"));
    if (!t || (strcmp(t, "text") && strcmp(t, "json_object") && strcmp(t, "json_schema")))
        return rl_oai_fail(e, 400, "response_format", "invalid_value",
                           "response_format.type: must be one of text, json_object, json_schema");
    snprintf(r->response_format, sizeof r->response_format, "%s", t);
    if (!strcmp(t, "json_schema")) {
        json_t *js = json_object_get(v, "json_schema");
        json_t *schema = json_is_object(js) ? json_object_get(js, "schema") : NULL;
        if (!json_is_object(schema))
            return rl_oai_fail(e, 400, "response_format", "invalid_value",
                               "response_format.json_schema.schema: must be an object");
        char *s = json_dumps(schema, JSON_COMPACT);
        if (!s) return rl_oai_fail(e, 500, NULL, NULL, "out of memory");
        r->json_schema = rl_strndup(s, strlen(s));
        free(s);
        if (!r->json_schema) return rl_oai_fail(e, 500, NULL, NULL, "out of memory");
        if (gv && !json_is_null(gv))
            return rl_oai_fail(e, 400, "grammar", "invalid_value",
                               "grammar: cannot be combined with response_format json_schema");
        return compile_grammar(r, "response_format.json_schema.schema", r->json_schema,
                               strlen(r->json_schema), true, e);
    }
    if (!strcmp(t, "json_object")) {
        static const char any_object[] = "{\"type\":\"object\"}";
        if (gv && !json_is_null(gv))
            return rl_oai_fail(e, 400, "grammar", "invalid_value",
                               "grammar: cannot be combined with response_format json_object");
        return compile_grammar(r, "response_format", any_object, sizeof any_object - 1, true, e);
    }
    return true;
}

/* The text of one message's content: a string, null (assistant only), or
 * an array of {"type":"text","text":...} parts, joined. */
static bool parse_content(json_t *c, size_t i, bool null_ok, char **out, rl_oai_err *e) {
    char param[16] = "messages";
    *out = NULL;
    if (!c) {
        if (null_ok) return true;
        return rl_oai_fail(e, 400, param, "invalid_value", "messages[%zu].content: is required", i);
    }
    if (json_is_string(c)) {
        size_t l = json_string_length(c);
        if (memchr(json_string_value(c), 0, l))
            return rl_oai_fail(e, 400, param, "invalid_value",
                               "messages[%zu].content: must not contain NUL characters", i);
        *out = rl_strndup(json_string_value(c), l);
        return *out ? true : rl_oai_fail(e, 500, NULL, NULL, "out of memory");
    }
    if (!json_is_array(c))
        return rl_oai_fail(e, 400, param, "invalid_type",
                           "messages[%zu].content: must be a string or an array of content parts",
                           i);
    size_t total = 0, np = json_array_size(c);
    for (size_t j = 0; j < np; j++) {
        json_t *p = json_array_get(c, j);
        const char *ty = json_string_value(json_object_get(p, "type"));
        json_t *tx = json_object_get(p, "text");
        if (!json_is_object(p) || !ty || strcmp(ty, "text") || !json_is_string(tx)) {
            char pp[64];
            snprintf(pp, sizeof pp, "messages[%zu].content[%zu]%s", i, j,
                     json_is_object(p) && ty && strcmp(ty, "text") ? ".type" : "");
            return rl_oai_fail(
                e, 400, pp, "invalid_value",
                "%s: only {\"type\":\"text\",\"text\":...} parts are supported%s%.40s", pp,
                ty && strcmp(ty, "text") ? ", not " : "", ty ? ty : "");
        }
        if (memchr(json_string_value(tx), 0, json_string_length(tx)))
            return rl_oai_fail(e, 400, param, "invalid_value",
                               "messages[%zu].content[%zu].text: must not contain NUL characters",
                               i, j);
        total += json_string_length(tx);
    }
    char *s = rl_malloc(total + 1);
    if (!s) return rl_oai_fail(e, 500, NULL, NULL, "out of memory");
    size_t off = 0;
    for (size_t j = 0; j < np; j++) {
        json_t *tx = json_object_get(json_array_get(c, j), "text");
        memcpy(s + off, json_string_value(tx), json_string_length(tx));
        off += json_string_length(tx);
    }
    s[off] = 0;
    *out = s;
    return true;
}

/* A function name as OpenAI allows it: [A-Za-z0-9_-]{1,64}. */
static bool good_name(const char *s) {
    size_t n = s ? strlen(s) : 0;
    if (n == 0 || n > 64) return false;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
              (s[i] >= '0' && s[i] <= '9') || s[i] == '_' || s[i] == '-'))
            return false;
    return true;
}

/* An assistant message's tool_calls: each {"id", "type":"function",
 * "function":{"name","arguments": a string}}; ids go into `ids` (a JSON
 * object used as a set). */
static bool parse_msg_calls(json_t *m, size_t i, json_t *ids, rl_oai_err *e) {
    json_t *tc = field(m, "tool_calls");
    if (!tc) return true;
    char param[64];
    snprintf(param, sizeof param, "messages[%zu].tool_calls", i);
    if (!json_is_array(tc))
        return rl_oai_fail(e, 400, param, "invalid_type", "%s: must be an array", param);
    for (size_t k = 0; k < json_array_size(tc); k++) {
        json_t *c = json_array_get(tc, k), *f = json_object_get(c, "function");
        const char *id = json_string_value(json_object_get(c, "id"));
        const char *ty = json_string_value(json_object_get(c, "type"));
        json_t *args = json_object_get(f, "arguments");
        if (!json_is_object(c) || !id || !id[0] || (ty && strcmp(ty, "function")) ||
            !json_is_object(f) || !good_name(json_string_value(json_object_get(f, "name"))) ||
            (args && !json_is_string(args)))
            return rl_oai_fail(
                e, 400, param, "invalid_value",
                "%s[%zu]: must be {\"id\": a string, \"type\": \"function\", \"function\": "
                "{\"name\": [A-Za-z0-9_-]{1,64}, \"arguments\": a JSON string}}",
                param, k);
        json_object_set_new(ids, id, json_true());
    }
    return true;
}

static bool parse_messages(json_t *root, const rl_oai_limits *lim, rl_oai_req *r, rl_oai_err *e) {
    json_t *v = field(root, "messages");
    if (!v) return rl_oai_fail(e, 400, "messages", "missing_field", "messages: is required");
    if (!json_is_array(v))
        return rl_oai_fail(e, 400, "messages", "invalid_type", "messages: must be an array");
    size_t cnt = json_array_size(v);
    if (cnt == 0)
        return rl_oai_fail(e, 400, "messages", "invalid_value", "messages: must not be empty");
    if (cnt > (size_t)lim->max_messages)
        return rl_oai_fail(e, 400, "messages", "invalid_value",
                           "messages: at most %d messages, got %zu", lim->max_messages, cnt);
    r->msgs = rl_calloc(cnt, sizeof *r->msgs);
    json_t *ids = json_object(); /* ids of the calls so far */
    if (!r->msgs || !ids) {
        json_decref(ids);
        return rl_oai_fail(e, 500, NULL, NULL, "out of memory");
    }
    static const char *roles[] = {"system", "developer", "user", "assistant", "tool"};
    for (size_t i = 0; i < cnt; i++) {
        json_t *m = json_array_get(v, i);
        if (!json_is_object(m)) {
            rl_oai_fail(e, 400, "messages", "invalid_type", "messages[%zu]: must be an object", i);
            goto fail;
        }
        const char *role = json_string_value(json_object_get(m, "role"));
        bool known = false;
        for (size_t k = 0; role && k < sizeof roles / sizeof roles[0]; k++)
            known |= !strcmp(role, roles[k]);
        if (!known) {
            rl_oai_fail(
                e, 400, "messages", "invalid_value",
                "messages[%zu].role: must be one of system, developer, user, assistant, tool", i);
            goto fail;
        }
        char *content;
        if (!parse_content(field(m, "content"), i, !strcmp(role, "assistant"), &content, e))
            goto fail;
        r->msgs[i].role = role;
        r->msgs[i].content = content;
        r->n_msgs = i + 1;
        if (!strcmp(role, "assistant") && field(m, "tool_calls")) {
            r->tool_msgs = true;
            if (!parse_msg_calls(m, i, ids, e)) goto fail;
        }
        if (!strcmp(role, "tool")) {
            r->tool_msgs = true;
            char param[64];
            snprintf(param, sizeof param, "messages[%zu].tool_call_id", i);
            const char *tid = json_string_value(field(m, "tool_call_id"));
            if (!tid) {
                rl_oai_fail(e, 400, param, "missing_field",
                            "%s: a tool message needs the id of the call it answers", param);
                goto fail;
            }
            if (!json_object_get(ids, tid)) {
                rl_oai_fail(e, 400, param, "invalid_value",
                            "%s: '%.100s' is the id of no earlier tool call", param, tid);
                goto fail;
            }
        }
    }
    json_decref(ids);
    return true;
fail:
    json_decref(ids);
    return false;
}

/* tools, tool_choice, parallel_tool_calls, chat_template_kwargs (chat
 * only). */
static bool parse_tools(json_t *root, rl_oai_req *r, rl_oai_err *e) {
    r->parallel_tool_calls = true;
    if (!get_bool(root, "parallel_tool_calls", &r->parallel_tool_calls, e)) return false;
    json_t *kw = field(root, "chat_template_kwargs");
    if (kw && !json_is_object(kw))
        return rl_oai_fail(e, 400, "chat_template_kwargs", "invalid_type",
                           "chat_template_kwargs: must be an object");
    r->tmpl_kwargs = kw;
    json_t *t = field(root, "tools");
    if (t) {
        if (!json_is_array(t))
            return rl_oai_fail(e, 400, "tools", "invalid_type", "tools: must be an array");
        if (json_array_size(t) > RL_OAI_MAX_TOOLS)
            return rl_oai_fail(e, 400, "tools", "invalid_value", "tools: at most %d tools",
                               RL_OAI_MAX_TOOLS);
        for (size_t i = 0; i < json_array_size(t); i++) {
            json_t *tool = json_array_get(t, i), *f = json_object_get(tool, "function");
            const char *ty = json_string_value(json_object_get(tool, "type"));
            char param[64];
            snprintf(param, sizeof param, "tools[%zu]", i);
            if (!json_is_object(tool) || !ty || strcmp(ty, "function") || !json_is_object(f))
                return rl_oai_fail(e, 400, param, "invalid_value",
                                   "%s: must be {\"type\": \"function\", \"function\": {...}}",
                                   param);
            const char *name = json_string_value(json_object_get(f, "name"));
            snprintf(param, sizeof param, "tools[%zu].function.name", i);
            if (!good_name(name))
                return rl_oai_fail(e, 400, param, "invalid_value",
                                   "%s: must match [A-Za-z0-9_-]{1,64}", param);
            for (size_t k = 0; k < i; k++)
                if (!strcmp(name, json_string_value(json_object_get(
                                      json_object_get(json_array_get(t, k), "function"), "name"))))
                    return rl_oai_fail(e, 400, param, "invalid_value",
                                       "%s: '%s' is also the name of tools[%zu]", param, name, k);
            json_t *ps = json_object_get(f, "parameters");
            snprintf(param, sizeof param, "tools[%zu].function.parameters", i);
            if (ps && !json_is_null(ps)) {
                if (!json_is_object(ps))
                    return rl_oai_fail(e, 400, param, "invalid_type",
                                       "%s: must be a JSON Schema object", param);
                char *txt = json_dumps(ps, JSON_COMPACT);
                if (!txt) return rl_oai_fail(e, 500, NULL, NULL, "out of memory");
                rl_err err = {0};
                rl_grammar *g = rl_gen_grammar_new(RL_GRAMMAR_JSON_SCHEMA, txt, strlen(txt), &err);
                free(txt);
                if (!g)
                    return rl_oai_fail(e, 400, param, "invalid_value", "%s: %s", param, err.msg);
                rl_gen_grammar_free(g);
            }
        }
        r->tools = json_array_size(t) ? t : NULL;
        r->n_tools = (int32_t)json_array_size(t);
    }
    r->tool_choice = r->tools ? RL_OAI_TOOLS_AUTO : RL_OAI_TOOLS_NONE;
    json_t *tc = field(root, "tool_choice");
    if (!tc) return true;
    const char *s = json_string_value(tc);
    if (s && !strcmp(s, "none"))
        r->tool_choice = RL_OAI_TOOLS_NONE;
    else if (s && !strcmp(s, "auto"))
        r->tool_choice = r->tools ? RL_OAI_TOOLS_AUTO : RL_OAI_TOOLS_NONE;
    else if (s && !strcmp(s, "required"))
        r->tool_choice = RL_OAI_TOOLS_REQUIRED;
    else if (json_is_object(tc)) {
        const char *ty = json_string_value(json_object_get(tc, "type"));
        const char *name =
            json_string_value(json_object_get(json_object_get(tc, "function"), "name"));
        if (!ty || strcmp(ty, "function") || !name)
            return rl_oai_fail(
                e, 400, "tool_choice", "invalid_value",
                "tool_choice: must be {\"type\": \"function\", \"function\": {\"name\": ...}}");
        r->tool_choice = RL_OAI_TOOLS_NAMED;
        r->tool_named = -1;
        for (int32_t i = 0; i < r->n_tools; i++)
            if (!strcmp(name, json_string_value(json_object_get(
                                  json_object_get(json_array_get(r->tools, (size_t)i), "function"),
                                  "name"))))
                r->tool_named = i;
        if (r->tool_named < 0)
            return rl_oai_fail(e, 400, "tool_choice", "invalid_value",
                               "tool_choice: no tool is named '%.64s'", name);
    } else {
        return rl_oai_fail(
            e, 400, "tool_choice", "invalid_value",
            "tool_choice: must be none, auto, required or {\"type\": \"function\", ...}");
    }
    if (r->tool_choice >= RL_OAI_TOOLS_REQUIRED && !r->tools)
        return rl_oai_fail(e, 400, "tool_choice", "invalid_value", "tool_choice: '%s' needs tools",
                           s ? s : "function");
    if (r->tool_choice >= RL_OAI_TOOLS_REQUIRED && r->gp.grammar)
        return rl_oai_fail(
            e, 400, "tool_choice", "invalid_value",
            "tool_choice: a required tool call cannot be combined with response_format or grammar");
    return true;
}

static bool parse_prompt(json_t *root, const rl_oai_limits *lim, rl_oai_req *r, rl_oai_err *e) {
    json_t *v = field(root, "prompt");
    if (!v) return rl_oai_fail(e, 400, "prompt", "missing_field", "prompt: is required");
    /* A one-element batch ["text"] or [[ids]] is the same as its element. */
    if (json_is_array(v) && json_array_size(v) == 1 &&
        (json_is_string(json_array_get(v, 0)) || json_is_array(json_array_get(v, 0))))
        v = json_array_get(v, 0);
    if (json_is_string(v)) {
        r->prompt = json_string_value(v);
        r->prompt_len = json_string_length(v);
        return true;
    }
    if (json_is_array(v) && json_array_size(v) > 1 &&
        (json_is_string(json_array_get(v, 0)) || json_is_array(json_array_get(v, 0))))
        return rl_oai_fail(
            e, 400, "prompt", "invalid_value",
            "prompt: batches of several prompts are not supported; send one request each");
    if (!json_is_array(v))
        return rl_oai_fail(e, 400, "prompt", "invalid_type",
                           "prompt: must be a string or an array of token ids");
    if (!rl_oai_token_array(v, "prompt", lim->n_vocab, lim->n_ctx - 1, false, &r->prompt_ids,
                            &r->n_prompt_ids, e))
        return false;
    return true;
}

/* Fill-in-the-middle: `suffix` on a completion (the string prompt is the
 * prefix), or /infill's input_prefix, input_suffix, input_extra and
 * prompt (the text typed after the prefix). */
static bool parse_fim(json_t *root, rl_oai_req *r, rl_oai_err *e) {
    if (r->kind == RL_OAI_COMPLETION) {
        json_t *sf = field(root, "suffix");
        if (!sf) return true;
        if (!json_is_string(sf))
            return rl_oai_fail(e, 400, "suffix", "invalid_type", "suffix: must be a string");
        if (!r->prompt)
            return rl_oai_fail(e, 400, "suffix", "invalid_value",
                               "suffix: needs a string prompt (the text before the gap)");
        r->fim = true;
        r->fim_prefix = r->prompt;
        r->fim_prefix_len = r->prompt_len;
        r->fim_suffix = json_string_value(sf);
        r->fim_suffix_len = json_string_length(sf);
        return true;
    }
    static const char *const keys[] = {"input_prefix", "input_suffix", "prompt"};
    const char **txt[] = {&r->fim_prefix, &r->fim_suffix, &r->fim_middle};
    size_t *len[] = {&r->fim_prefix_len, &r->fim_suffix_len, &r->fim_middle_len};
    for (int k = 0; k < 3; k++) {
        json_t *v = field(root, keys[k]);
        if (!v && k < 2)
            return rl_oai_fail(e, 400, keys[k], "missing_field", "%s: is required", keys[k]);
        if (v && !json_is_string(v))
            return rl_oai_fail(e, 400, keys[k], "invalid_type", "%s: must be a string", keys[k]);
        *txt[k] = v ? json_string_value(v) : NULL;
        *len[k] = v ? json_string_length(v) : 0;
    }
    json_t *x = field(root, "input_extra");
    if (x && (!json_is_array(x) || json_array_size(x) > RL_OAI_MAX_EXTRA))
        return rl_oai_fail(e, 400, "input_extra", "invalid_value",
                           "input_extra: must be an array of at most %d {\"filename\": a string, "
                           "\"text\": a string} objects",
                           RL_OAI_MAX_EXTRA);
    for (size_t i = 0; x && i < json_array_size(x); i++) {
        json_t *c = json_array_get(x, i), *fn = json_object_get(c, "filename");
        if (!json_is_object(c) || !json_is_string(json_object_get(c, "text")) ||
            (fn && !json_is_null(fn) && !json_is_string(fn)))
            return rl_oai_fail(e, 400, "input_extra", "invalid_value",
                               "input_extra[%zu]: must be {\"filename\": a string (optional), "
                               "\"text\": a string}",
                               i);
    }
    r->fim_extra = x && json_array_size(x) ? x : NULL;
    int64_t ni;
    bool given;
    if (!get_int(root, "n_indent", 0, 4096, &ni, &given, e)) return false;
    if (given) r->n_indent = (int32_t)ni;
    if (r->n != 1)
        return rl_oai_fail(e, 400, "n", "invalid_value", "n: /infill makes one completion");
    r->fim = true;
    return true;
}

bool rl_oai_parse(const char *body, size_t len, rl_oai_kind kind, const rl_oai_limits *lim,
                  rl_oai_req *r, rl_oai_err *e) {
    memset(r, 0, sizeof *r);
    r->kind = kind;
    r->n = 1;
    rl_gen_params_default(&r->gp);
    r->gp.max_tokens = 0;
    r->gp.sample.penalty_last_n = 64;
    r->root = rl_oai_parse_object(body, len, e);
    if (!r->root) return false;
    json_t *root = r->root;
    int64_t x;
    bool given;
    rl_sample_params *sp = &r->gp.sample;
    bool ok = get_str(root, "model", &r->model, e) && get_str(root, "user", &r->user, e) &&
              get_bool(root, "stream", &r->stream, e) && get_bool(root, "echo", &r->echo, e) &&
              get_bool(root, "ignore_eos", &r->gp.ignore_eos, e) &&
              get_num(root, "temperature", 0, 100, false, &sp->temperature, NULL, e) &&
              get_num(root, "top_p", 0, 1, true, &sp->top_p, NULL, e) &&
              get_num(root, "min_p", 0, 1, false, &sp->min_p, NULL, e) &&
              get_num(root, "presence_penalty", -2, 2, false, &sp->presence_penalty, NULL, e) &&
              get_num(root, "frequency_penalty", -2, 2, false, &sp->frequency_penalty, NULL, e) &&
              get_num(root, "repetition_penalty", 0, 10, true, &sp->repeat_penalty, NULL, e);
    if (!ok) goto fail;
    if (!get_int(root, "top_k", -1, 1 << 30, &x, &given, e)) goto fail;
    if (given) sp->top_k = x < 0 ? 0 : (int32_t)x;
    if (!get_int(root, "seed", INT64_MIN, INT64_MAX, &x, &r->seed_given, e)) goto fail;
    if (r->seed_given) sp->seed = (uint64_t)x;
    if (!get_int(root, "n", 1, lim->max_n, &x, &given, e)) goto fail;
    if (given) r->n = (int32_t)x;
    /* extension: "speculative": "none" | "ngram" | "draft" (default: the server's --spec) */
    r->gp.spec = lim->default_spec;
    json_t *sv = field(root, "speculative");
    if (sv && !json_is_null(sv)) {
        const char *m = json_string_value(sv);
        if (!m || (strcmp(m, "none") && strcmp(m, "ngram") && strcmp(m, "draft"))) {
            rl_oai_fail(e, 400, "speculative", "invalid_value",
                        "speculative: must be one of none, ngram, draft");
            goto fail;
        }
        if (!strcmp(m, "draft") && !lim->have_draft) {
            rl_oai_fail(e, 400, "speculative", "invalid_value",
                        "speculative: 'draft' needs a server started with a draft model (-md)");
            goto fail;
        }
        r->gp.spec = !strcmp(m, "ngram")   ? RL_SPEC_NGRAM
                     : !strcmp(m, "draft") ? RL_SPEC_DRAFT
                                           : RL_SPEC_NONE;
    }
    if (!get_int(root, "priority", -1000000, 1000000, &x, &given, e)) goto fail;
    if (given) r->gp.priority = (int32_t)x;
    /* reasoning budget: max_reasoning_tokens, or llama-server's reasoning_budget (-1 = none) */
    r->reasoning_budget = -1;
    if (!get_int(root, "max_reasoning_tokens", 0, lim->n_ctx, &x, &given, e)) goto fail;
    if (given) r->reasoning_budget = (int32_t)x;
    if (!given && !get_int(root, "reasoning_budget", -1, lim->n_ctx, &x, &given, e)) goto fail;
    if (given) r->reasoning_budget = (int32_t)x;
    const char *mt_name =
        field(root, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
    if (!get_int(root, mt_name, 1, lim->n_ctx, &x, &given, e)) goto fail;
    if (given) r->max_tokens = (int32_t)x;
    /* llama-server's name; -1 = until the context is full */
    if (kind == RL_OAI_INFILL && !given) {
        if (!get_int(root, "n_predict", -1, lim->n_ctx, &x, &given, e)) goto fail;
        if (given && x > 0) r->max_tokens = (int32_t)x;
    }
    r->gp.max_tokens = r->max_tokens;

    json_t *so = field(root, "stream_options");
    if (so) {
        if (!json_is_object(so)) {
            rl_oai_fail(e, 400, "stream_options", "invalid_type",
                        "stream_options: must be an object");
            goto fail;
        }
        if (!get_bool(so, "include_usage", &r->include_usage, e)) {
            rl_oai_fail(e, 400, "stream_options", "invalid_type",
                        "stream_options.include_usage: must be a boolean");
            goto fail;
        }
    }

    /* logprobs: a boolean (+ top_logprobs) for chat, an integer for completions */
    json_t *lp = field(root, "logprobs");
    if (kind == RL_OAI_CHAT) {
        if (!get_bool(root, "logprobs", &r->logprobs, e)) goto fail;
        if (!get_int(root, "top_logprobs", 0, RL_EV_MAX_TOP, &x, &given, e)) goto fail;
        if (given) {
            if (!r->logprobs) {
                rl_oai_fail(e, 400, "top_logprobs", "invalid_value",
                            "top_logprobs: requires logprobs to be true");
                goto fail;
            }
            r->top_logprobs = (int32_t)x;
        }
    } else if (lp) {
        if (json_is_boolean(lp)) {
            r->logprobs = json_is_true(lp);
        } else {
            if (!get_int(root, "logprobs", 0, RL_EV_MAX_TOP, &x, NULL, e)) goto fail;
            r->logprobs = true;
            r->top_logprobs = (int32_t)x;
        }
    }
    sp->n_logprobs = r->top_logprobs;
    sp->no_logprob = !r->logprobs; /* no softmax over the vocabulary per token unless asked */

    if (!parse_stop(root, &r->gp, e) || !parse_logit_bias(root, lim, r, e) ||
        !parse_response_format(root, r, e))
        goto fail;
    if (kind == RL_OAI_CHAT         ? !parse_messages(root, lim, r, e) || !parse_tools(root, r, e)
        : kind == RL_OAI_COMPLETION ? !parse_prompt(root, lim, r, e) || !parse_fim(root, r, e)
                                    : !parse_fim(root, r, e))
        goto fail;

    /* The engine's own check, so whatever passes here is submittable. */
    rl_err err = {0};
    if (rl_sample_params_validate(sp, lim->n_vocab, &err) != RL_OK) {
        char pname[64];
        size_t k = strcspn(err.msg, ":");
        snprintf(pname, sizeof pname, "%.*s", (int)(k < 63 ? k : 63), err.msg);
        rl_oai_fail(e, 400, pname, "invalid_value", "%s", err.msg);
        goto fail;
    }
    return true;
fail:
    rl_oai_req_free(r);
    return false;
}

void rl_oai_req_free(rl_oai_req *r) {
    if (!r) return;
    for (size_t i = 0; i < r->n_msgs; i++) rl_free((void *)r->msgs[i].content);
    rl_free(r->msgs);
    rl_free(r->bias);
    rl_free(r->prompt_ids);
    rl_free(r->json_schema);
    rl_gen_grammar_free(r->gp.grammar);
    json_decref(r->root);
    memset(r, 0, sizeof *r);
}

bool rl_oai_normalize_path(const char *in, char *out, size_t cap) {
    if (!in || in[0] != '/' || cap < 2) return false;
    size_t j = 0;
    const char *p = in;
    while (*p) {
        while (*p == '/') p++;
        if (!*p) break;
        const char *seg = p;
        while (*p && *p != '/') {
            if ((unsigned char)*p < 0x20 || *p == 0x7f) return false;
            p++;
        }
        size_t l = (size_t)(p - seg);
        if ((l == 1 && seg[0] == '.') || (l == 2 && seg[0] == '.' && seg[1] == '.')) return false;
        if (j + 1 + l + 1 > cap) return false;
        out[j++] = '/';
        memcpy(out + j, seg, l);
        j += l;
    }
    if (j == 0) out[j++] = '/';
    out[j] = 0;
    return true;
}
