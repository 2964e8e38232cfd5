/* Tool calls and reasoning in model output (chat.h, "tool calls and
 * reasoning"): which format a chat template's model writes, and the parser
 * that splits an output text into answer, reasoning and tool calls.
 *
 * The parser works on the whole text generated so far.  With `partial`
 * (the text is still growing) it reports only what can no longer change:
 * text that may be the start of a tag ("<tool_c") is held back, a call is
 * reported once its name is complete, and its arguments are the raw JSON
 * text written so far.  Invariant (streaming relies on it): for a text t
 * and any extension t + u that stays well formed, every field of
 * parse(t, partial) is a prefix of the same field of parse(t + u), and the
 * calls of the first are a prefix of the calls of the second.  A call whose
 * JSON turns out malformed becomes content; that is the one place the
 * invariant can break (a grammar-constrained call never is malformed).
 *
 * Hermes output that is nothing but a bare call object (optionally in a
 * ``` fence, or in doubled braces {{..}} as Qwen2.5's template writes its
 * example) is that call too: Qwen2.5-Coder answers so.  While such text
 * is still growing it is held back (a JSON answer that turns out not to
 * be a call is content at the end).
 *
 * Pure text functions: no tokenizer, no model.  jansson decodes JSON
 * strings (names, arguments written as a string).
 */
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "base/buf.h"
#include "chat/chat.h"

/* ---- format detection ---- */

static bool has(const char *s, size_t n, const char *needle) {
    return memmem(s, n, needle, strlen(needle)) != NULL;
}

void rl_chat_format_detect(const char *tmpl, size_t len, rl_chat_format *out) {
    memset(out, 0, sizeof *out);
    if (!tmpl) len = 0;
    out->native_tools = len && has(tmpl, len, "tools");
    if (len && has(tmpl, len, "[TOOL_CALLS]"))
        out->tools = RL_TOOLS_MISTRAL;
    else if (len && has(tmpl, len, "<|tool_call|>"))
        out->tools = RL_TOOLS_GRANITE;
    else if (len && (has(tmpl, len, "<|python_tag|>") ||
                     (has(tmpl, len, "<|start_header_id|>") && has(tmpl, len, "ipython"))))
        out->tools = RL_TOOLS_LLAMA3;
    else
        out->tools = RL_TOOLS_HERMES; /* <tool_call> templates, and the generic format */
    if (out->tools == RL_TOOLS_HERMES && !(len && has(tmpl, len, "<tool_call>")))
        out->native_tools = false;
    out->reasoning = len && has(tmpl, len, RL_THINK_CLOSE);
}

const char *rl_tool_format_name(rl_tool_format f) {
    switch (f) {
    case RL_TOOLS_NONE:
        return "none";
    case RL_TOOLS_HERMES:
        return "hermes";
    case RL_TOOLS_LLAMA3:
        return "llama3";
    case RL_TOOLS_MISTRAL:
        return "mistral";
    case RL_TOOLS_GRANITE:
        return "granite";
    }
    return "?";
}

/* ---- a JSON scanner that knows where a value ends, and whether the input
 * stopped inside one ---- */

typedef enum js_res { JS_OK, JS_PART, JS_BAD } js_res;

#define JS_MAX_DEPTH 64

static bool is_ws(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

static size_t skip_ws(const char *p, size_t n, size_t i) {
    while (i < n && is_ws(p[i])) i++;
    return i;
}

static bool is_digit(char c) {
    return c >= '0' && c <= '9';
}

static bool is_hex(char c) {
    return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

static js_res js_string(const char *p, size_t n, size_t *i) {
    size_t k = *i + 1; /* past the opening quote */
    while (k < n) {
        unsigned char c = (unsigned char)p[k];
        if (c == '"') {
            *i = k + 1;
            return JS_OK;
        }
        if (c < 0x20) return JS_BAD;
        if (c == '\\') {
            if (k + 1 >= n) return JS_PART;
            char e = p[k + 1];
            if (e == 'u') {
                for (size_t h = 0; h < 4; h++) {
                    if (k + 2 + h >= n) return JS_PART;
                    if (!is_hex(p[k + 2 + h])) return JS_BAD;
                }
                k += 6;
                continue;
            }
            if (!strchr("\"\\/bfnrt", e)) return JS_BAD;
            k += 2;
            continue;
        }
        k++;
    }
    return JS_PART;
}

/* -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?; running into the end of
 * the input is PART (more digits may follow). */
static js_res js_number(const char *p, size_t n, size_t *i) {
    size_t k = *i;
    if (k < n && p[k] == '-') k++;
    if (k >= n) return JS_PART;
    if (p[k] == '0')
        k++;
    else if (is_digit(p[k]))
        while (k < n && is_digit(p[k])) k++;
    else
        return JS_BAD;
    if (k < n && p[k] == '.') {
        k++;
        if (k >= n) return JS_PART;
        if (!is_digit(p[k])) return JS_BAD;
        while (k < n && is_digit(p[k])) k++;
    }
    if (k < n && (p[k] == 'e' || p[k] == 'E')) {
        k++;
        if (k < n && (p[k] == '+' || p[k] == '-')) k++;
        if (k >= n) return JS_PART;
        if (!is_digit(p[k])) return JS_BAD;
        while (k < n && is_digit(p[k])) k++;
    }
    if (k >= n) return JS_PART;
    *i = k;
    return JS_OK;
}

static js_res js_literal(const char *p, size_t n, size_t *i, const char *lit) {
    size_t l = strlen(lit), avail = n - *i;
    if (avail < l) return memcmp(p + *i, lit, avail) ? JS_BAD : JS_PART;
    if (memcmp(p + *i, lit, l)) return JS_BAD;
    *i += l;
    return JS_OK;
}

static js_res js_value(const char *p, size_t n, size_t *i, int depth);

static js_res js_container(const char *p, size_t n, size_t *i, int depth, char close) {
    if (depth >= JS_MAX_DEPTH) return JS_BAD;
    size_t k = skip_ws(p, n, *i + 1);
    if (k >= n) return JS_PART;
    if (p[k] == close) {
        *i = k + 1;
        return JS_OK;
    }
    for (;;) {
        if (close == '}') {
            if (p[k] != '"') return JS_BAD;
            js_res r = js_string(p, n, &k);
            if (r != JS_OK) return r;
            k = skip_ws(p, n, k);
            if (k >= n) return JS_PART;
            if (p[k] != ':') return JS_BAD;
            k = skip_ws(p, n, k + 1);
        }
        js_res r = js_value(p, n, &k, depth + 1);
        if (r != JS_OK) return r;
        k = skip_ws(p, n, k);
        if (k >= n) return JS_PART;
        if (p[k] == close) {
            *i = k + 1;
            return JS_OK;
        }
        if (p[k] != ',') return JS_BAD;
        k = skip_ws(p, n, k + 1);
        if (k >= n) return JS_PART;
    }
}

/* One JSON value at p[*i] (no leading whitespace): JS_OK with *i past it,
 * JS_PART when the input ends inside a valid prefix, JS_BAD otherwise. */
static js_res js_value(const char *p, size_t n, size_t *i, int depth) {
    if (*i >= n) return JS_PART;
    switch (p[*i]) {
    case '{':
        return js_container(p, n, i, depth, '}');
    case '[':
        return js_container(p, n, i, depth, ']');
    case '"':
        return js_string(p, n, i);
    case 't':
        return js_literal(p, n, i, "true");
    case 'f':
        return js_literal(p, n, i, "false");
    case 'n':
        return js_literal(p, n, i, "null");
    default:
        return js_number(p, n, i);
    }
}

/* ---- the output being built ---- */

typedef struct pout {
    rl_buf content, reasoning;
    rl_chat_call *calls;
    size_t cap_calls;
    int32_t n_calls;
    bool nomem;
} pout;

static void put(pout *o, rl_buf *b, const char *s, size_t n) {
    if (n && rl_buf_append(b, s, n)) o->nomem = true;
}

static char *dup_n(pout *o, const char *s, size_t n) {
    char *d = rl_strndup(s ? s : "", s ? n : 0);
    if (!d) o->nomem = true;
    return d;
}

static void add_call(pout *o, const char *name, size_t name_len, const char *args, size_t args_len,
                     const char *id, size_t id_len, bool complete) {
    if (rl_grow((void **)&o->calls, &o->cap_calls, (size_t)o->n_calls + 1, sizeof *o->calls)) {
        o->nomem = true;
        return;
    }
    rl_chat_call *c = &o->calls[o->n_calls++];
    memset(c, 0, sizeof *c);
    c->name = dup_n(o, name, name_len);
    /* no arguments written: {} for a closed call, nothing yet for one in progress */
    c->arguments = args ? dup_n(o, args, args_len) : dup_n(o, "{}", complete ? 2 : 0);
    c->id = id ? dup_n(o, id, id_len) : NULL;
    c->complete = complete;
}

/* Length of the longest suffix of p[0..n) that is a proper prefix of tag:
 * text that may still become the tag is held back while streaming. */
static size_t tag_hold(const char *p, size_t n, const char *tag) {
    size_t tl = strlen(tag);
    for (size_t k = tl - 1 < n ? tl - 1 : n; k > 0; k--)
        if (!memcmp(p + n - k, tag, k)) return k;
    return 0;
}

static bool starts(const char *p, size_t n, const char *tag) {
    size_t tl = strlen(tag);
    return n >= tl && !memcmp(p, tag, tl);
}

/* p[0..n) is a proper prefix of tag (possibly empty). */
static bool is_prefix_of(const char *p, size_t n, const char *tag) {
    size_t tl = strlen(tag);
    return n < tl && !memcmp(p, tag, n);
}

/* ---- one call object {"name": .., "arguments": {..}} ---- */

typedef struct call_scan {
    size_t name_at, name_end; /* the raw JSON string, quotes included */
    bool has_name;
    size_t args_at, args_end; /* the raw arguments value */
    bool has_args, args_done;
    size_t id_at, id_end;
    bool has_id;
} call_scan;

static bool key_is(const char *p, size_t at, size_t end, const char *k) {
    size_t kl = strlen(k);
    return end - at == kl + 2 && !memcmp(p + at + 1, k, kl);
}

/* Scans the object at p[*i] ('{').  Keys: name; arguments or parameters;
 * id; others are skipped.  JS_OK with *i past the object. */
static js_res scan_call(const char *p, size_t n, size_t *i, call_scan *cs) {
    memset(cs, 0, sizeof *cs);
    size_t k = skip_ws(p, n, *i + 1);
    for (;;) {
        if (k >= n) return JS_PART;
        if (p[k] == '}') break;
        if (p[k] != '"') return JS_BAD;
        size_t ka = k;
        js_res r = js_string(p, n, &k);
        if (r != JS_OK) return r;
        size_t ke = k;
        k = skip_ws(p, n, k);
        if (k >= n) return JS_PART;
        if (p[k] != ':') return JS_BAD;
        k = skip_ws(p, n, k + 1);
        if (k >= n) return JS_PART;
        size_t va = k;
        bool is_name = key_is(p, ka, ke, "name"), is_id = key_is(p, ka, ke, "id");
        bool is_args = key_is(p, ka, ke, "arguments") || key_is(p, ka, ke, "parameters");
        if ((is_name || is_id) && p[k] != '"') return JS_BAD;
        if (is_args) {
            cs->has_args = true;
            cs->args_at = va;
        }
        r = js_value(p, n, &k, 1);
        if (r == JS_PART && is_args) {
            size_t e = n;
            while (e > va && is_ws(p[e - 1])) e--;
            cs->args_end = e;
        }
        if (r != JS_OK) return r;
        if (is_name) {
            cs->has_name = true;
            cs->name_at = va;
            cs->name_end = k;
        } else if (is_id) {
            cs->has_id = true;
            cs->id_at = va;
            cs->id_end = k;
        } else if (is_args) {
            cs->args_end = k;
            cs->args_done = true;
        }
        k = skip_ws(p, n, k);
        if (k >= n) return JS_PART;
        if (p[k] == ',') {
            k = skip_ws(p, n, k + 1);
            continue;
        }
        if (p[k] != '}') return JS_BAD;
        break;
    }
    *i = k + 1;
    return cs->has_name ? JS_OK : JS_BAD;
}

/* The decoded text of the JSON string p[at..end) (quotes included). */
static char *json_str_dup(pout *o, const char *p, size_t at, size_t end, size_t *len) {
    json_t *s = json_loadb(p + at, end - at, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
    char *d = NULL;
    if (json_is_string(s)) {
        *len = json_string_length(s);
        d = dup_n(o, json_string_value(s), *len);
    }
    json_decref(s);
    return d;
}

/* Records the scanned call.  Arguments written as a JSON string holding
 * JSON ("arguments": "{\"a\": 1}") are unwrapped once complete.  A name
 * that is not a valid string is refused (false: treat as content). */
static bool emit_call(pout *o, const char *p, const call_scan *cs, bool complete) {
    size_t nl = 0, il = 0, al = 0;
    char *name = json_str_dup(o, p, cs->name_at, cs->name_end, &nl);
    if (!name || nl == 0 || memchr(name, 0, nl)) {
        rl_free(name);
        return false;
    }
    char *id = cs->has_id ? json_str_dup(o, p, cs->id_at, cs->id_end, &il) : NULL;
    const char *args = cs->has_args ? p + cs->args_at : NULL;
    al = cs->has_args ? cs->args_end - cs->args_at : 0;
    char *unwrapped = NULL;
    if (args && cs->args_done && args[0] == '"') {
        size_t ul = 0;
        unwrapped = json_str_dup(o, p, cs->args_at, cs->args_end, &ul);
        json_t *chk = unwrapped ? json_loadb(unwrapped, ul, 0, NULL) : NULL;
        if (json_is_object(chk)) {
            args = unwrapped;
            al = ul;
        }
        json_decref(chk);
    }
    add_call(o, name, nl, args, al, id, il, complete);
    rl_free(name);
    rl_free(id);
    rl_free(unwrapped);
    return true;
}

/* ---- formats ---- */

typedef enum scan_res { SCAN_DONE, SCAN_STOP } scan_res;

/* A call object at p[*i] (after whitespace).  SCAN_DONE: recorded and *i
 * past it; SCAN_STOP: the input ended inside it (recorded if its name is
 * known) or it is malformed (*bad set, nothing recorded). */
static scan_res one_call(pout *o, const char *p, size_t n, size_t *i, bool partial, bool *bad) {
    call_scan cs;
    size_t k = *i;
    *bad = false;
    js_res r = p[k] == '{' ? scan_call(p, n, &k, &cs) : JS_BAD;
    if (r == JS_OK) {
        if (!emit_call(o, p, &cs, true)) *bad = true;
        *i = k;
        return *bad ? SCAN_STOP : SCAN_DONE;
    }
    if (r == JS_BAD) {
        *bad = true;
        return SCAN_STOP;
    }
    /* cut short: report it once the name is known (while streaming: the
     * call in progress; at the end: a call cut by the length limit) */
    if (cs.has_name && !emit_call(o, p, &cs, false))
        *bad = !partial;
    else if (!cs.has_name && !partial)
        *bad = true;
    return SCAN_STOP;
}

/* '[' call (',' call)* ']' at p[*i].  Returns as one_call. */
static scan_res call_array(pout *o, const char *p, size_t n, size_t *i, bool partial, bool *bad) {
    size_t k = skip_ws(p, n, *i + 1);
    int32_t first = o->n_calls;
    *bad = false;
    for (;;) {
        if (k >= n) {
            *bad = !partial && o->n_calls == first;
            return SCAN_STOP;
        }
        if (p[k] == ']' && o->n_calls > first) break;
        if (one_call(o, p, n, &k, partial, bad) == SCAN_STOP) return SCAN_STOP;
        k = skip_ws(p, n, k);
        if (k >= n) return SCAN_STOP;
        if (p[k] == ',') {
            k = skip_ws(p, n, k + 1);
            continue;
        }
        if (p[k] != ']') {
            *bad = true;
            return SCAN_STOP;
        }
        break;
    }
    *i = k + 1;
    return SCAN_DONE;
}

/* Drops the calls recorded from index `from` on (a malformed group). */
static void drop_calls(pout *o, int32_t from) {
    while (o->n_calls > from) {
        rl_chat_call *c = &o->calls[--o->n_calls];
        rl_free(c->name);
        rl_free(c->arguments);
        rl_free(c->id);
    }
}

/* Tagged formats: content, then OPEN call-or-array [CLOSE], repeated.
 * `array`: the tag is followed by a JSON array of calls (Granite, Mistral
 * v3); otherwise by one object (Hermes) or, for Mistral v11, by
 * name[CALL_ID]id[ARGS]{..}. */
static void parse_tagged(pout *o, const char *p, size_t n, bool partial, const char *open,
                         const char *close, rl_tool_format f) {
    size_t i = 0, ol = strlen(open);
    for (;;) {
        const char *hit = i < n ? memmem(p + i, n - i, open, ol) : NULL;
        if (!hit) {
            size_t e = n - (partial ? tag_hold(p + i, n - i, open) : 0);
            put(o, &o->content, p + i, e - i);
            return;
        }
        size_t at = (size_t)(hit - p);
        put(o, &o->content, p + i, at - i);
        size_t k = skip_ws(p, n, at + ol);
        if (k >= n) {
            if (!partial) put(o, &o->content, p + at, n - at);
            return;
        }
        int32_t first = o->n_calls;
        bool bad = false;
        scan_res r;
        if (p[k] == '[' && f != RL_TOOLS_HERMES) {
            r = call_array(o, p, n, &k, partial, &bad);
        } else if (f == RL_TOOLS_MISTRAL && p[k] != '{') {
            /* v11: name[ARGS]{..} or name[CALL_ID]id[ARGS]{..} */
            const char *ar = memmem(p + k, n - k, "[ARGS]", 6);
            const char *ci = memmem(p + k, n - k, "[CALL_ID]", 9);
            if (ci && ar && ci > ar) ci = NULL;
            if (!ar) {
                r = SCAN_STOP;
                bad = !partial;
            } else {
                size_t ne = (size_t)((ci ? ci : ar) - p), a = skip_ws(p, n, (size_t)(ar - p) + 6);
                while (ne > k && is_ws(p[ne - 1])) ne--;
                size_t a0 = a;
                js_res jr =
                    a < n && p[a] == '{' ? js_value(p, n, &a, 0) : (a < n ? JS_BAD : JS_PART);
                bool name_ok = ne > k && !memchr(p + k, '"', ne - k) && !memchr(p + k, '[', ne - k);
                const char *id = ci ? ci + 9 : NULL;
                size_t idl = id ? (size_t)(ar - id) : 0;
                if (jr == JS_BAD || !name_ok) {
                    r = SCAN_STOP;
                    bad = true;
                } else if (jr == JS_OK) {
                    add_call(o, p + k, ne - k, p + a0, a - a0, id, idl, true);
                    k = a;
                    r = SCAN_DONE;
                } else {
                    size_t e = n;
                    while (e > a0 && is_ws(p[e - 1])) e--;
                    add_call(o, p + k, ne - k, a0 < n ? p + a0 : NULL, e - a0, id, idl, false);
                    r = SCAN_STOP;
                }
            }
        } else {
            r = one_call(o, p, n, &k, partial, &bad);
        }
        if (bad) { /* not a call after all: the tag and what follows are text */
            drop_calls(o, first);
            const char *end = close ? memmem(p + at, n - at, close, strlen(close)) : NULL;
            size_t e = end ? (size_t)(end - p) + strlen(close) : n;
            if (partial && !end) e = at + ol; /* the rest may still be a later tag */
            put(o, &o->content, p + at, e - at);
            i = e;
            continue;
        }
        if (r == SCAN_STOP) return;
        k = skip_ws(p, n, k);
        if (close) {
            if (starts(p + k, n - k, close))
                k += strlen(close);
            else if (is_prefix_of(p + k, n - k, close))
                k = n; /* still coming */
        }
        i = k;
    }
}

/* Hermes-format models (Qwen2.5-Coder among them) also answer with the
 * bare call object, alone or in a ``` / ```json fence.  When the whole
 * output is one such object it is the call; true when handled that way
 * (or, while partial, when the text may still become one: held back).
 * false leaves the text to the tagged parser, with nothing recorded. */
static bool parse_bare(pout *o, const char *p, size_t n, bool partial) {
    static const char FENCE[] = "```";
    size_t k = skip_ws(p, n, 0);
    bool fenced = starts(p + k, n - k, FENCE);
    if (!fenced && partial && k < n && is_prefix_of(p + k, n - k, FENCE)) return true;
    if (fenced) {
        k += 3;
        if (partial && is_prefix_of(p + k, n - k, "json")) return true;
        if (starts(p + k, n - k, "json")) k += 4;
        k = skip_ws(p, n, k);
        if (partial && k >= n) return true;
    }
    if (k >= n || p[k] != '{') return false;
    /* {{"name": .., "arguments": ..}}: Qwen2.5's template shows the call so
     * (its Jinja source escapes nothing), and its models copy it */
    size_t k2 = skip_ws(p, n, k + 1);
    bool doubled = k2 < n && p[k2] == '{';
    if (partial && k2 >= n) return true; /* "{" alone: may become either */
    if (doubled) k = k2;
    int32_t first = o->n_calls;
    bool bad = false;
    scan_res r = one_call(o, p, n, &k, partial, &bad);
    if (!bad && r == SCAN_STOP)
        return partial || o->n_calls > first; /* in progress, or cut short */
    if (!bad) {
        k = skip_ws(p, n, k);
        if (doubled && k < n && p[k] == '}') k = skip_ws(p, n, k + 1);
        if (fenced && starts(p + k, n - k, FENCE))
            k = skip_ws(p, n, k + 3);
        else if (fenced && partial && is_prefix_of(p + k, n - k, FENCE))
            k = n;
        if (k >= n) return true;
    }
    drop_calls(o, first);
    return false;
}

/* Llama 3.x: the whole output is the call: {"name": .., "parameters": ..}
 * objects separated by ';', or <|python_tag|> and then a call object or
 * code (the built-in python tool: {"code": ..}). */
static void parse_llama3(pout *o, const char *p, size_t n, bool partial) {
    static const char TAG[] = "<|python_tag|>";
    size_t k = skip_ws(p, n, 0);
    bool tagged = starts(p + k, n - k, TAG);
    if (!tagged && partial && is_prefix_of(p + k, n - k, TAG)) return; /* may become the tag */
    if (tagged) k = skip_ws(p, n, k + sizeof TAG - 1);
    if (tagged && k < n && p[k] != '{') { /* code for the python tool */
        rl_buf args = {0};
        json_t *code = json_stringn(p + k, n - k);
        char *s = code ? json_dumps(code, JSON_ENCODE_ANY) : NULL;
        bool ok = s && !rl_buf_append(&args, "{\"code\": ", 9) &&
                  !rl_buf_append(&args, s, strlen(s) - (partial ? 1 : 0)) &&
                  (partial || !rl_buf_append(&args, "}", 1));
        if (ok)
            add_call(o, "python", 6, args.p, args.n, NULL, 0, !partial);
        else
            o->nomem = true;
        free(s);
        json_decref(code);
        rl_buf_free(&args);
        return;
    }
    if (k >= n) {
        if (!partial && !tagged) put(o, &o->content, p, n);
        return;
    }
    if (p[k] != '{') {
        put(o, &o->content, p, n);
        return;
    }
    for (;;) {
        bool bad = false;
        scan_res r = one_call(o, p, n, &k, partial, &bad);
        if (bad) {
            drop_calls(o, 0);
            put(o, &o->content, p, n);
            return;
        }
        if (r == SCAN_STOP) return;
        k = skip_ws(p, n, k);
        if (k < n && p[k] == ';') k = skip_ws(p, n, k + 1);
        if (k >= n) return;
        if (p[k] != '{') { /* text after the calls */
            put(o, &o->content, p + k, n - k);
            return;
        }
    }
}

/* ---- the parser ---- */

/* The text with leading and trailing whitespace dropped. */
static void trim(const char **p, size_t *n) {
    while (*n && is_ws(**p)) (*p)++, (*n)--;
    while (*n && is_ws((*p)[*n - 1])) (*n)--;
}

static bool take(pout *o, rl_buf *b, char **out, size_t *len) {
    const char *s = b->p ? b->p : "";
    size_t n = b->n;
    trim(&s, &n);
    *out = dup_n(o, s, n);
    *len = n;
    return *out != NULL;
}

rl_status rl_chat_parse(const rl_chat_syntax *syn, const char *text, size_t len, bool partial,
                        rl_chat_output *out, rl_err *err) {
    memset(out, 0, sizeof *out);
    if (!syn || (!text && len)) return rl_err_set(err, RL_ERR_INVALID, "chat parse: NULL argument");
    if (!text) text = "";
    pout o = {0};
    size_t i = 0;
    bool held = false;
    if (syn->reasoning) {
        static const char OPEN[] = RL_THINK_OPEN, CLOSE[] = RL_THINK_CLOSE;
        size_t j = skip_ws(text, len, 0);
        bool in = syn->think_open;
        if (!in && starts(text + j, len - j, OPEN)) {
            in = true;
            i = j + sizeof OPEN - 1;
        } else if (!in && partial && is_prefix_of(text + j, len - j, OPEN)) {
            held = true;
        }
        if (in) {
            const char *end = memmem(text + i, len - i, CLOSE, sizeof CLOSE - 1);
            size_t re = end ? (size_t)(end - text)
                            : len - (partial ? tag_hold(text + i, len - i, CLOSE) : 0);
            put(&o, &o.reasoning, text + i, re - i);
            i = end ? re + sizeof CLOSE - 1 : len;
            held = !end;
        }
    }
    if (!held) {
        const char *p = text + i;
        size_t n = len - i;
        switch (syn->tools) {
        case RL_TOOLS_HERMES:
            if (!parse_bare(&o, p, n, partial))
                parse_tagged(&o, p, n, partial, "<tool_call>", "</tool_call>", syn->tools);
            break;
        case RL_TOOLS_GRANITE:
            parse_tagged(&o, p, n, partial, "<|tool_call|>", NULL, syn->tools);
            break;
        case RL_TOOLS_MISTRAL:
            parse_tagged(&o, p, n, partial, "[TOOL_CALLS]", NULL, syn->tools);
            break;
        case RL_TOOLS_LLAMA3:
            parse_llama3(&o, p, n, partial);
            break;
        default:
            put(&o, &o.content, p, n);
            break;
        }
    }
    out->calls = o.calls;
    out->n_calls = o.n_calls;
    bool ok = !o.nomem && take(&o, &o.content, &out->content, &out->content_len) &&
              take(&o, &o.reasoning, &out->reasoning, &out->reasoning_len);
    rl_buf_free(&o.content);
    rl_buf_free(&o.reasoning);
    if (!ok || o.nomem) {
        rl_chat_output_free(out);
        return rl_err_set(err, RL_ERR_NOMEM, "chat parse: out of memory");
    }
    return RL_OK;
}

void rl_chat_output_free(rl_chat_output *o) {
    if (!o) return;
    for (int32_t i = 0; i < o->n_calls; i++) {
        rl_free(o->calls[i].name);
        rl_free(o->calls[i].arguments);
        rl_free(o->calls[i].id);
    }
    rl_free(o->calls);
    rl_free(o->content);
    rl_free(o->reasoning);
    memset(o, 0, sizeof *o);
}
