/* Tool calls and reasoning on /v1/chat/completions (server-impl.h, "tools"):
 * the template context of a request with tools, tool calls, tool results
 * or chat_template_kwargs; the grammar that constrains tool calls; and the
 * output side: the model's text parsed (rl_chat_parse) into content,
 * reasoning_content and tool_calls, whole or as streaming deltas.
 *
 * Templates that render tools themselves (Qwen2.5, Hermes, Llama 3.x,
 * Mistral, Granite: rl_chat_format.native_tools) get the request's
 * messages and tools as they are, with each call's `arguments` string
 * decoded into an object as Hugging Face templates expect.  Any other
 * template gets redline's generic format: a system text listing the tools
 * and asking for <tool_call>{...}</tool_call>, assistant calls written in
 * that format into the content, tool results as user turns in
 * <tool_response> tags.
 *
 * Grammar: the calls' JSON is {"name": <a tool's name>, "arguments": <its
 * parameters schema>} ("parameters" for Llama 3), framed by the format's
 * tags (rl_json_schema_to_grammar_framed).  `required` and a named tool
 * constrain from the first token; `auto` compiles the same grammar lazily,
 * triggered by the format's opening tag, so a call once begun is valid
 * (for Hermes also by a bare {"name" object, the grammar's unframed form).
 * A tag that the tokenizer has as one control token (which a grammar
 * cannot emit) is the lazy grammar's trigger token, and for `required` it
 * is left out of the grammar and put back in front of the text before
 * parsing.
 *
 * Streaming invariant: what a choice has sent (content, reasoning, each
 * call's name and argument bytes) is a prefix of what the final parse
 * says; rl_chat_parse's partial mode guarantees this for well-formed
 * output, and anything that would contradict what was sent is dropped.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/hash.h"
#include "grammar/grammar.h"
#include "server/server-impl.h"

bool rl_srv_chat_needs_ctx(const rl_oai_req *r) {
    return (r->tools && r->tool_choice != RL_OAI_TOOLS_NONE) || r->tool_msgs || r->tmpl_kwargs;
}

static const char *tool_name(const rl_oai_req *r, int32_t i) {
    return json_string_value(
        json_object_get(json_object_get(json_array_get(r->tools, (size_t)i), "function"), "name"));
}

/* A call's arguments as the template wants them: the decoded object when
 * the string is JSON, else the string. */
static json_t *args_value(json_t *a) {
    if (!json_is_string(a)) return a ? json_incref(a) : json_object();
    json_t *v = json_loadb(json_string_value(a), json_string_length(a), JSON_DECODE_ANY, NULL);
    return v ? v : json_incref(a);
}

/* The generic tool prompt (for templates without tool support). */
static bool generic_tools_text(const rl_oai_req *r, rl_buf *b) {
    bool ok = !rl_buf_puts(
        b, "# Tools\n\nYou can call functions to help with the request. Their signatures, one "
           "JSON object a line:\n<tools>\n");
    for (int32_t i = 0; ok && i < r->n_tools; i++) {
        char *t = json_dumps(json_array_get(r->tools, (size_t)i), JSON_COMPACT);
        ok = t && !rl_buf_puts(b, t) && !rl_buf_putc(b, '\n');
        free(t);
    }
    return ok &&
           !rl_buf_puts(
               b, "</tools>\n\nTo call a function, answer with one block per call:\n<tool_call>\n"
                  "{\"name\": <function name>, \"arguments\": <arguments as a JSON object>}\n"
                  "</tool_call>");
}

/* One message for a template without tool support. */
static json_t *generic_msg(const rl_oai_req *r, size_t i, json_t *m) {
    const char *role = r->msgs[i].role, *content = r->msgs[i].content ? r->msgs[i].content : "";
    rl_buf b = {0};
    bool ok = true;
    if (!strcmp(role, "tool")) {
        role = "user";
        ok = !rl_buf_printf(&b, "<tool_response>\n%s\n</tool_response>", content);
    } else {
        ok = !rl_buf_puts(&b, content);
        json_t *tc = json_object_get(m, "tool_calls");
        for (size_t k = 0; ok && json_is_array(tc) && k < json_array_size(tc); k++) {
            json_t *f = json_object_get(json_array_get(tc, k), "function");
            json_t *call = json_pack("{s:O, s:o}", "name", json_object_get(f, "name"), "arguments",
                                     args_value(json_object_get(f, "arguments")));
            char *t = call ? json_dumps(call, JSON_COMPACT) : NULL;
            json_decref(call);
            ok = t && !rl_buf_printf(&b, "%s<tool_call>\n%s\n</tool_call>", b.n ? "\n" : "", t);
            free(t);
        }
    }
    json_t *o = ok ? json_pack("{s:s, s:s%}", "role", role, "content", b.p ? b.p : "", b.n) : NULL;
    rl_buf_free(&b);
    return o;
}

/* One message for a template with tool support: as sent, content joined,
 * arguments decoded. */
static json_t *native_msg(const rl_oai_req *r, size_t i, json_t *m) {
    json_t *o = json_object();
    if (!o) return NULL;
    json_object_set_new(o, "role", json_string(r->msgs[i].role));
    json_object_set_new(o, "content",
                        r->msgs[i].content ? json_string(r->msgs[i].content) : json_null());
    const char *keys[] = {"tool_call_id", "name"};
    for (int k = 0; k < 2; k++)
        if (json_is_string(json_object_get(m, keys[k])))
            json_object_set(o, keys[k], json_object_get(m, keys[k]));
    json_t *tc = json_object_get(m, "tool_calls");
    if (json_is_array(tc)) {
        json_t *arr = json_array();
        for (size_t k = 0; k < json_array_size(tc); k++) {
            json_t *c = json_array_get(tc, k), *f = json_object_get(c, "function");
            json_array_append_new(
                arr, json_pack("{s:O, s:s, s:{s:O, s:o}}", "id", json_object_get(c, "id"), "type",
                               "function", "function", "name", json_object_get(f, "name"),
                               "arguments", args_value(json_object_get(f, "arguments"))));
        }
        json_object_set_new(o, "tool_calls", arr);
    }
    return o;
}

bool rl_srv_render_ctx(rl_srv *s, const rl_oai_req *r, const rl_chat_format *f, bool add_gen,
                       char **out, size_t *len, rl_oai_err *e) {
    json_t *ctx = json_object(), *msgs = json_array(), *src = json_object_get(r->root, "messages");
    bool tools = r->tools && r->tool_choice != RL_OAI_TOOLS_NONE;
    bool ok = ctx && msgs;
    const char *k;
    json_t *v;
    if (ok && r->tmpl_kwargs) json_object_foreach(r->tmpl_kwargs, k, v) json_object_set(ctx, k, v);
    for (size_t i = 0; ok && i < r->n_msgs; i++) {
        json_t *m = f->native_tools ? native_msg(r, i, json_array_get(src, i))
                                    : generic_msg(r, i, json_array_get(src, i));
        ok = m && !json_array_append_new(msgs, m);
    }
    if (ok && tools && f->native_tools) json_object_set(ctx, "tools", r->tools);
    if (ok && tools && !f->native_tools) {
        rl_buf b = {0};
        ok = generic_tools_text(r, &b);
        json_t *m0 = json_array_get(msgs, 0);
        const char *r0 = json_string_value(json_object_get(m0, "role"));
        if (ok && r0 && (!strcmp(r0, "system") || !strcmp(r0, "developer"))) {
            rl_buf c = {0};
            ok = !rl_buf_printf(&c, "%s\n\n%.*s", json_string_value(json_object_get(m0, "content")),
                                (int)b.n, b.p);
            json_object_set_new(m0, "content", json_stringn(c.p ? c.p : "", c.n));
            rl_buf_free(&c);
        } else if (ok) {
            ok = !json_array_insert_new(
                msgs, 0, json_pack("{s:s, s:s%}", "role", "system", "content", b.p, b.n));
        }
        rl_buf_free(&b);
    }
    if (ok) {
        json_object_set(ctx, "messages", msgs);
        json_object_set_new(ctx, "add_generation_prompt", json_boolean(add_gen));
    }
    json_decref(msgs);
    char *txt = ok ? json_dumps(ctx, JSON_COMPACT) : NULL;
    json_decref(ctx);
    if (!txt) return rl_oai_fail(e, 500, NULL, NULL, "out of memory");
    rl_err err = {0};
    rl_status st = rl_chat_render_json(s->vocab, txt, strlen(txt), out, len, &err);
    free(txt);
    if (st != RL_OK)
        return rl_oai_fail(e, 400, "messages", "invalid_value",
                           "messages: the chat template failed: %s", err.msg);
    return true;
}

/* ---- the tool-call grammar ---- */

/* The token id when `tag` is one control token (a grammar cannot write
 * it), else -1. */
static int32_t control_token(rl_srv *s, const char *tag) {
    int32_t *ids = NULL, n = 0;
    rl_err err;
    if (rl_tokenize(s->vocab, tag, strlen(tag), RL_TOKENIZE_PARSE_SPECIAL, &ids, &n, &err) != RL_OK)
        return -1;
    int32_t id = n == 1 ? ids[0] : -1;
    rl_free(ids);
    if (id < 0) return -1;
    char *txt = NULL;
    size_t len = 0;
    if (rl_detokenize(s->vocab, &id, 1, RL_DETOKENIZE_SKIP_SPECIAL, &txt, &len, &err) != RL_OK)
        return -1;
    rl_free(txt);
    return len == 0 ? id : -1;
}

bool rl_srv_tool_grammar(rl_srv *s, rl_oai_req *r, rl_srv_tools *t, rl_oai_err *e) {
    const rl_chat_format *f = &t->fmt;
    t->prefix[0] = 0;
    if (!r->tools || r->tool_choice == RL_OAI_TOOLS_NONE) return true;
    if (r->tool_choice == RL_OAI_TOOLS_AUTO && r->gp.grammar)
        return true; /* response_format wins */
    const char *args_key = f->tools == RL_TOOLS_LLAMA3 ? "parameters" : "arguments";
    json_t *any = json_array();
    for (int32_t i = 0; i < r->n_tools; i++) {
        if (r->tool_choice == RL_OAI_TOOLS_NAMED && i != r->tool_named) continue;
        json_t *ps = json_object_get(
            json_object_get(json_array_get(r->tools, (size_t)i), "function"), "parameters");
        json_t *props = json_object();
        json_object_set_new(props, "name", json_pack("{s:s}", "const", tool_name(r, i)));
        json_object_set_new(props, args_key,
                            json_is_object(ps) ? json_incref(ps)
                                               : json_pack("{s:s}", "type", "object"));
        json_array_append_new(any, json_pack("{s:s, s:o, s:[s, s], s:b}", "type", "object",
                                             "properties", props, "required", "name", args_key,
                                             "additionalProperties", 0));
    }
    json_t *schema = json_array_size(any) == 1 ? json_incref(json_array_get(any, 0))
                                               : json_pack("{s:O}", "anyOf", any);
    json_decref(any);
    char *stxt = schema ? json_dumps(schema, JSON_COMPACT) : NULL;
    json_decref(schema);
    if (!stxt) return rl_oai_fail(e, 500, NULL, NULL, "out of memory");
    rl_grammar_frame fr = {.many = r->parallel_tool_calls && r->tool_choice != RL_OAI_TOOLS_NAMED};
    const char *tag;
    switch (f->tools) {
    case RL_TOOLS_MISTRAL:
        tag = "[TOOL_CALLS]";
        fr.open = "[TOOL_CALLS][";
        fr.sep = ", ";
        fr.close = "]";
        break;
    case RL_TOOLS_GRANITE:
        tag = "<|tool_call|>";
        fr.open = "<|tool_call|>[";
        fr.sep = ", ";
        fr.close = "]";
        break;
    case RL_TOOLS_LLAMA3:
        tag = "{\"name\"";
        fr.many = false;
        break;
    default:
        tag = "<tool_call>";
        fr.item_open = "<tool_call>\n";
        fr.item_close = "\n</tool_call>";
        fr.sep = "\n";
    }
    int32_t ctl = f->tools == RL_TOOLS_LLAMA3 ? -1 : control_token(s, tag);
    if (ctl >= 0) { /* the tag is a control token: out of the grammar */
        size_t tl = strlen(tag);
        if (fr.open) fr.open += tl;
        if (fr.item_open) fr.item_open += tl;
    }
    fr.bare = f->tools == RL_TOOLS_HERMES && r->tool_choice == RL_OAI_TOOLS_AUTO;
    char *gtxt = NULL;
    size_t glen = 0;
    rl_err err = {0};
    rl_status st = rl_json_schema_to_grammar_framed(stxt, strlen(stxt), &fr, &gtxt, &glen, &err);
    free(stxt);
    rl_grammar *g = NULL;
    if (st == RL_OK) {
        /* auto: the tag starts the grammar; for Hermes also a bare call
         * object (Qwen2.5-Coder answers so), anchored at the start of the
         * output as the parser takes it (a bare object after prose is text) */
        static const char *const bare[] = {"^{\"name\"", "^{ \"name\"", "^{\n\"name\"",
                                           "^{\n  \"name\"", "^{\n    \"name\""};
        const char *words[8];
        int32_t n_words = 0;
        if (ctl < 0) words[n_words++] = tag;
        for (int i = 0; fr.bare && i < 5; i++) words[n_words++] = bare[i];
        if (r->tool_choice == RL_OAI_TOOLS_AUTO)
            g = rl_grammar_compile_lazy(gtxt, glen, words, n_words, ctl >= 0 ? &ctl : NULL,
                                        ctl >= 0, &err);
        else
            g = rl_grammar_compile(gtxt, glen, &err);
    }
    rl_free(gtxt);
    if (!g)
        return rl_oai_fail(e, 400, "tools", "invalid_value",
                           "tools: cannot build the tool-call grammar: %s", err.msg);
    rl_gen_grammar_free(r->gp.grammar);
    r->gp.grammar = g;
    if (ctl >= 0 && r->tool_choice != RL_OAI_TOOLS_AUTO)
        snprintf(t->prefix, sizeof t->prefix, "%s", tag);
    return true;
}

/* ---- output ---- */

static void call_id(uint64_t seed, int32_t k, char out[32]) {
    uint64_t h = rl_mix64(seed ^ rl_mix64((uint64_t)k + 0x9e37));
    snprintf(out, 32, "call_%016llx", (unsigned long long)h);
}

/* Parses the whole text of a choice (with its prefix). */
static bool parse_text(const rl_srv_tools *t, const char *p, size_t n, bool partial,
                       rl_chat_output *o) {
    rl_buf b = {0};
    if (t->prefix[0]) {
        if (rl_buf_puts(&b, t->prefix) || rl_buf_append(&b, p, n)) {
            rl_buf_free(&b);
            return false;
        }
        p = b.p;
        n = b.n;
    }
    rl_err err;
    bool ok = rl_chat_parse(&t->syn, p ? p : "", n, partial, o, &err) == RL_OK;
    rl_buf_free(&b);
    return ok;
}

json_t *rl_srv_tools_message(const rl_srv_tools *t, uint64_t seed, const char *p, size_t n,
                             bool *has_calls) {
    rl_chat_output o;
    *has_calls = false;
    if (!parse_text(t, p, n, false, &o)) return NULL;
    json_t *m = json_pack("{s:s}", "role", "assistant");
    json_object_set_new(
        m, "content",
        o.n_calls && o.content_len == 0 ? json_null() : rl_srv_json_text(o.content, o.content_len));
    if (t->syn.reasoning && o.reasoning_len)
        json_object_set_new(m, "reasoning_content", rl_srv_json_text(o.reasoning, o.reasoning_len));
    if (o.n_calls) {
        json_t *arr = json_array();
        for (int32_t k = 0; k < o.n_calls; k++) {
            char id[32];
            call_id(seed, k, id);
            json_array_append_new(
                arr,
                json_pack("{s:s, s:s, s:{s:s, s:o}}", "id", o.calls[k].id ? o.calls[k].id : id,
                          "type", "function", "function", "name", o.calls[k].name, "arguments",
                          rl_srv_json_text(o.calls[k].arguments, strlen(o.calls[k].arguments))));
        }
        json_object_set_new(m, "tool_calls", arr);
        *has_calls = true;
    }
    rl_chat_output_free(&o);
    return m;
}

/* Bytes of `now` past `sent` when sent is a prefix of it; else none. */
static size_t extend(const char *now, size_t n_now, size_t sent, const char **from) {
    *from = now + sent;
    return n_now > sent ? n_now - sent : 0;
}

json_t *rl_srv_tools_delta(const rl_srv_tools *t, rl_srv_stream *st, uint64_t seed, const char *p,
                           size_t n, bool final, bool *has_calls) {
    rl_chat_output o;
    *has_calls = st->n_calls > 0;
    if (!parse_text(t, p, n, !final, &o)) return NULL;
    json_t *d = json_object();
    const char *from;
    size_t k = extend(o.reasoning, o.reasoning_len, st->sent_reasoning, &from);
    if (k) {
        json_object_set_new(d, "reasoning_content", rl_srv_json_text(from, k));
        st->sent_reasoning += k;
    }
    k = extend(o.content, o.content_len, st->sent_content, &from);
    if (k) {
        json_object_set_new(d, "content", rl_srv_json_text(from, k));
        st->sent_content += k;
    }
    json_t *calls = json_array();
    for (int32_t c = 0; c < o.n_calls && c < RL_SRV_MAX_CALLS; c++) {
        size_t al = strlen(o.calls[c].arguments);
        if (c >= st->n_calls) { /* a new call: id, name and what arguments there are */
            char id[32];
            call_id(seed, c, id);
            json_array_append_new(calls,
                                  json_pack("{s:i, s:s, s:s, s:{s:s, s:o}}", "index", c, "id",
                                            o.calls[c].id ? o.calls[c].id : id, "type", "function",
                                            "function", "name", o.calls[c].name, "arguments",
                                            rl_srv_json_text(o.calls[c].arguments, al)));
            st->sent_args[c] = al;
            st->n_calls = c + 1;
            continue;
        }
        k = extend(o.calls[c].arguments, al, st->sent_args[c], &from);
        if (k) {
            json_array_append_new(calls, json_pack("{s:i, s:{s:o}}", "index", c, "function",
                                                   "arguments", rl_srv_json_text(from, k)));
            st->sent_args[c] += k;
        }
    }
    if (json_array_size(calls))
        json_object_set_new(d, "tool_calls", calls);
    else
        json_decref(calls);
    *has_calls = st->n_calls > 0;
    rl_chat_output_free(&o);
    if (json_object_size(d) == 0) {
        json_decref(d);
        return NULL;
    }
    return d;
}

void rl_srv_tools_init(rl_srv *s, const rl_oai_req *r, rl_srv_tools *t) {
    memset(t, 0, sizeof *t);
    size_t tl = 0;
    const char *tmpl = rl_vocab_chat_template(s->vocab, &tl);
    rl_chat_format_detect(tmpl, tl, &t->fmt);
    t->syn.tools = r->tools && r->tool_choice != RL_OAI_TOOLS_NONE ? t->fmt.tools : RL_TOOLS_NONE;
    t->syn.reasoning = t->fmt.reasoning;
    t->active = t->syn.tools != RL_TOOLS_NONE || t->syn.reasoning;
}

bool rl_srv_opens_think(const char *prompt, size_t len) {
    while (len > 0 && (prompt[len - 1] == '\n' || prompt[len - 1] == ' ')) len--;
    size_t ol = strlen(RL_THINK_OPEN);
    return len >= ol && !memcmp(prompt + len - ol, RL_THINK_OPEN, ol);
}

void rl_srv_tools_prompt(rl_srv_tools *t, const char *prompt, size_t len) {
    t->syn.think_open = t->fmt.reasoning && rl_srv_opens_think(prompt, len);
}
