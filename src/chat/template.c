/* Chat-template public API (chat.h): the render entry points, the
 * interpreter's arena and error reporting, and the built-in templates.
 * Rendering is load_source -> rl__tp_parse -> rl__tp_exec_body; the
 * evaluator is template_eval.c.
 *
 * Invariants: everything a render allocates comes from its arena (freed in
 * one go) except the output buffer; an error anywhere longjmps back to
 * render(), which frees both and returns the rl_status.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "chat/chat-impl.h"

/* ------------------------------------------------------- arena and errors */

struct tp_chunk {
    tp_chunk *next;
    size_t used, cap;
    max_align_t data[];
};

void rl_template_limits_default(rl_template_limits *lim) {
    lim->max_steps = 10 * 1000 * 1000;
    lim->max_output = (size_t)64 << 20;
    lim->max_memory = (size_t)256 << 20;
    lim->max_depth = 100;
}

static void line_col(const tp_ctx *c, size_t off, int *line, int *col) {
    int l = 1, cl = 1;
    if (c->src) {
        if (off > c->src_len) off = c->src_len;
        for (size_t i = 0; i < off; i++) {
            if (c->src[i] == '\n') {
                l++;
                cl = 1;
            } else if (((unsigned char)c->src[i] & 0xC0) != 0x80) {
                cl++;
            }
        }
    }
    *line = l;
    *col = cl;
}

_Noreturn void rl__tp_fail(tp_ctx *c, rl_status st, size_t off, const char *fmt, ...) {
    int line, col;
    line_col(c, off, &line, &col);
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    c->status = rl_err_set(c->err, st, "chat template %d:%d: %s", line, col, msg);
    longjmp(c->jb, 1);
}

void *rl__tp_alloc(tp_ctx *c, size_t n, size_t off) {
    n = (n + 15) & ~(size_t)15;
    if (n == 0) n = 16;
    if (n > c->lim.max_memory || c->mem_used > c->lim.max_memory - n)
        rl__tp_fail(c, RL_ERR_LIMIT, off, "template needs more than %zu bytes of memory",
                    c->lim.max_memory);
    tp_chunk *ch = c->chunks;
    if (!ch || ch->cap - ch->used < n) {
        size_t cap = n > 65536 ? n : 65536;
        ch = rl_malloc(sizeof(tp_chunk) + cap);
        if (!ch) rl__tp_fail(c, RL_ERR_NOMEM, off, "out of memory");
        ch->used = 0;
        ch->cap = cap;
        /* a big one-off block goes behind the current chunk so the
         * current chunk's free space stays usable */
        if (c->chunks && n > 65536) {
            ch->next = c->chunks->next;
            c->chunks->next = ch;
        } else {
            ch->next = c->chunks;
            c->chunks = ch;
        }
    }
    void *p = (char *)ch->data + ch->used;
    ch->used += n;
    c->mem_used += n;
    memset(p, 0, n);
    return p;
}

void *rl__tp_alloc_array(tp_ctx *c, size_t count, size_t size, size_t off) {
    size_t n;
    if (!rl_mul_size(count, size, &n)) rl__tp_fail(c, RL_ERR_LIMIT, off, "allocation too large");
    return rl__tp_alloc(c, n, off);
}

char *rl__tp_strdup(tp_ctx *c, const char *s, size_t n, size_t off) {
    char *p = rl__tp_alloc(c, n + 1, off);
    if (n) memcpy(p, s, n);
    return p;
}

void *rl__tp_grow(tp_ctx *c, void *p, size_t n, size_t *cap, size_t elem, size_t first,
                  size_t off) {
    if (n < *cap) return p;
    if (*cap > SIZE_MAX / 2) rl__tp_fail(c, RL_ERR_LIMIT, off, "allocation too large");
    size_t nc = *cap ? *cap * 2 : first;
    void *np = rl__tp_alloc_array(c, nc, elem, off);
    if (n) memcpy(np, p, n * elem);
    *cap = nc;
    return np;
}

static void ctx_free(tp_ctx *c) {
    while (c->chunks) {
        tp_chunk *n = c->chunks->next;
        rl_free(c->chunks);
        c->chunks = n;
    }
    rl_buf_free(&c->out);
}

/* -------------------------------------------------------------------- API */

/* Copies the source with \r\n and \r turned into \n and one trailing newline
 * dropped, as jinja2 does before lexing. */
static void load_source(tp_ctx *c, const char *tmpl, size_t len) {
    char *s = rl__tp_alloc(c, len + 1, 0);
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (tmpl[i] == '\r') {
            s[n++] = '\n';
            if (i + 1 < len && tmpl[i + 1] == '\n') i++;
        } else {
            s[n++] = tmpl[i];
        }
    }
    if (n && s[n - 1] == '\n') n--;
    s[n] = 0;
    c->src = s;
    c->src_len = n;
}

static tp_val from_json(tp_ctx *c, json_t *j, int depth) {
    if (depth > c->lim.max_depth)
        rl__tp_fail(c, RL_ERR_LIMIT, 0, "context JSON nested deeper than %d", c->lim.max_depth);
    switch (json_typeof(j)) {
    case JSON_NULL:
        return (tp_val){.t = V_NONE};
    case JSON_TRUE:
        return mk_bool(true);
    case JSON_FALSE:
        return mk_bool(false);
    case JSON_INTEGER:
        return mk_int((int64_t)json_integer_value(j));
    case JSON_REAL:
        return mk_float(json_real_value(j));
    case JSON_STRING:
        return tp_str(json_string_value(j), json_string_length(j));
    case JSON_ARRAY: {
        size_t n = json_array_size(j);
        tp_val l = mk_list(c, n, false, 0);
        for (size_t i = 0; i < n; i++) l.u.l->v[i] = from_json(c, json_array_get(j, i), depth + 1);
        return l;
    }
    case JSON_OBJECT: {
        size_t n = json_object_size(j);
        tp_val d = mk_dict(c, n, 0);
        const char *k;
        json_t *v;
        /* keys are unique in a jansson object: append without lookup */
        json_object_foreach(j, k, v) {
            d.u.d->k[d.u.d->n] = tp_str(k, strlen(k));
            d.u.d->v[d.u.d->n] = from_json(c, v, depth + 1);
            d.u.d->n++;
        }
        return d;
    }
    }
    return mk_undef(NULL);
}

/* What apply_chat_template does to each message before rendering: keys
 * whose value is None are dropped (OpenAI-style `content: null` becomes an
 * absent key), then a reasoning given as reasoning_content, thinking or
 * reasoning (the first present, in that order) is copied to both
 * reasoning_content and thinking, in the key order of Python's
 * {"thinking": r, **message, "reasoning_content": r}.  A message that is not
 * a dict is an error, as in HF.  Returns the new list; msgs is not changed. */
static tp_val hf_messages(tp_ctx *c, tp_val msgs) {
    static const char *const reasoning_keys[] = {"reasoning_content", "thinking", "reasoning"};
    tp_val out = mk_list(c, msgs.u.l->n, false, 0);
    for (size_t i = 0; i < msgs.u.l->n; i++) {
        tp_val m = msgs.u.l->v[i];
        if (m.t != V_DICT)
            rl__tp_fail(c, RL_ERR_FORMAT, 0, "messages[%zu]: chat messages should be dicts, got %s",
                        i, rl__tp_type_name(m));
        tp_dict *src = m.u.d;
        tp_val reasoning = {.t = V_UNDEF};
        for (size_t r = 0; r < 3 && reasoning.t == V_UNDEF; r++) {
            tp_val *v =
                rl__tp_dict_get_str(c, src, reasoning_keys[r], strlen(reasoning_keys[r]), 0);
            if (v && v->t != V_NONE) reasoning = *v;
        }
        tp_val d = mk_dict(c, src->n + 2, 0);
        if (reasoning.t != V_UNDEF) rl__tp_dict_set(c, d.u.d, tp_str("thinking", 8), reasoning, 0);
        for (size_t k = 0; k < src->n; k++)
            if (src->v[k].t != V_NONE) rl__tp_dict_set(c, d.u.d, src->k[k], src->v[k], 0);
        if (reasoning.t != V_UNDEF)
            rl__tp_dict_set(c, d.u.d, tp_str("reasoning_content", 17), reasoning, 0);
        out.u.l->v[i] = d;
    }
    return out;
}

typedef struct render_in {
    const rl_chat_msg *msgs;
    size_t n_msgs;
    bool add_gen;
    const char *bos, *eos;
    json_t *ctx;
} render_in;

static rl_status render(const char *tmpl, size_t tmpl_len, const render_in *in,
                        const rl_template_limits *lim, char **out, size_t *out_len, rl_err *err) {
    if (out) *out = NULL;
    if (out_len) *out_len = 0;
    if (!out || (!tmpl && tmpl_len))
        return rl_err_set(err, RL_ERR_INVALID, "chat template: NULL argument");
    tp_ctx *c = rl_calloc(1, sizeof *c);
    if (!c) return rl_err_set(err, RL_ERR_NOMEM, "chat template: out of memory");
    rl_err local;
    c->err = err ? err : &local;
    if (lim)
        c->lim = *lim;
    else
        rl_template_limits_default(&c->lim);
    if (c->lim.max_depth < 1) c->lim.max_depth = 1;
    if (setjmp(c->jb)) {
        rl_status st = c->status;
        ctx_free(c);
        rl_free(c);
        return st;
    }
    load_source(c, tmpl ? tmpl : "", tmpl_len);
    size_t n_body;
    tp_node **body = rl__tp_parse(c, &n_body);
    c->depth = 0;
    rl__tp_push_frame(c, 0);
    if (in->ctx) {
        const char *k;
        json_t *v;
        json_object_foreach(in->ctx, k, v) {
            tp_val x = from_json(c, v, 0);
            if (strcmp(k, "messages") == 0 && x.t == V_LIST) x = hf_messages(c, x);
            rl__tp_set_var(c, k, x, 0);
        }
    } else {
        tp_val msgs = mk_list(c, in->n_msgs, false, 0);
        for (size_t i = 0; i < in->n_msgs; i++) {
            tp_val d = mk_dict(c, 2, 0);
            const rl_chat_msg *m = &in->msgs[i];
            tp_val role = m->role ? tp_str(m->role, strlen(m->role)) : (tp_val){.t = V_NONE};
            tp_val content =
                m->content ? tp_str(m->content, strlen(m->content)) : (tp_val){.t = V_NONE};
            rl__tp_dict_set(c, d.u.d, tp_str("role", 4), role, 0);
            rl__tp_dict_set(c, d.u.d, tp_str("content", 7), content, 0);
            msgs.u.l->v[i] = d;
        }
        rl__tp_set_var(c, "messages", hf_messages(c, msgs), 0);
        /* apply_chat_template always passes tools= and documents= (None
         * when not given): `tools is defined` holds, `tools is not none`
         * does not, and a tool-use template iterating tools fails as in HF */
        rl__tp_set_var(c, "tools", (tp_val){.t = V_NONE}, 0);
        rl__tp_set_var(c, "documents", (tp_val){.t = V_NONE}, 0);
        rl__tp_set_var(c, "add_generation_prompt", mk_bool(in->add_gen), 0);
        const char *bos = in->bos ? in->bos : "", *eos = in->eos ? in->eos : "";
        rl__tp_set_var(c, "bos_token", tp_str(bos, strlen(bos)), 0);
        rl__tp_set_var(c, "eos_token", tp_str(eos, strlen(eos)), 0);
    }
    rl__tp_exec_body(c, body, n_body);
    char *text = rl_buf_take(&c->out, out_len); /* "" when nothing was emitted */
    if (!text) rl__tp_fail(c, RL_ERR_NOMEM, 0, "out of memory");
    *out = text;
    ctx_free(c);
    rl_free(c);
    rl_err_clear(err);
    return RL_OK;
}

rl_status rl_template_render(const char *tmpl, size_t tmpl_len, const rl_chat_msg *msgs,
                             size_t n_msgs, bool add_generation_prompt, const char *bos_token,
                             const char *eos_token, char **out, size_t *out_len, rl_err *err) {
    if (n_msgs && !msgs) return rl_err_set(err, RL_ERR_INVALID, "chat template: msgs is NULL");
    render_in in = {msgs, n_msgs, add_generation_prompt, bos_token, eos_token, NULL};
    return render(tmpl, tmpl_len, &in, NULL, out, out_len, err);
}

rl_status rl_template_render_json(const char *tmpl, size_t tmpl_len, const char *ctx_json,
                                  size_t ctx_json_len, const rl_template_limits *lim, char **out,
                                  size_t *out_len, rl_err *err) {
    if (out) *out = NULL;
    if (out_len) *out_len = 0;
    if (!ctx_json) return rl_err_set(err, RL_ERR_INVALID, "chat template: context JSON is NULL");
    json_error_t je;
    json_t *j = json_loadb(ctx_json, ctx_json_len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &je);
    if (!j)
        return rl_err_set(err, RL_ERR_FORMAT, "chat template context JSON %d:%d: %s", je.line,
                          je.column, je.text);
    if (!json_is_object(j)) {
        json_decref(j);
        return rl_err_set(err, RL_ERR_FORMAT,
                          "chat template context JSON: top level must be an object");
    }
    render_in in = {0};
    in.ctx = j;
    rl_status st = render(tmpl, tmpl_len, &in, lim, out, out_len, err);
    json_decref(j);
    return st;
}

/* ---- built-in templates ---- */

static const char CHATML[] =
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}";

/* Gemma 3's chat template (behaviour as published with the model): a
 * leading system message is folded into the first user turn, roles must
 * alternate user/assistant, "assistant" is written "model", content is
 * trimmed. */
static const char GEMMA[] =
    "{{ bos_token }}\n"
    "{%- if messages[0]['role'] == 'system' -%}\n"
    "    {%- if messages[0]['content'] is string -%}\n"
    "        {%- set first_user_prefix = messages[0]['content'] + '\\n\\n' -%}\n"
    "    {%- else -%}\n"
    "        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\\n\\n' -%}\n"
    "    {%- endif -%}\n"
    "    {%- set loop_messages = messages[1:] -%}\n"
    "{%- else -%}\n"
    "    {%- set first_user_prefix = \"\" -%}\n"
    "    {%- set loop_messages = messages -%}\n"
    "{%- endif -%}\n"
    "{%- for message in loop_messages -%}\n"
    "    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}\n"
    "        {{ raise_exception(\"Conversation roles must alternate "
    "user/assistant/user/assistant/...\") }}\n"
    "    {%- endif -%}\n"
    "    {%- if (message['role'] == 'assistant') -%}\n"
    "        {%- set role = \"model\" -%}\n"
    "    {%- else -%}\n"
    "        {%- set role = message['role'] -%}\n"
    "    {%- endif -%}\n"
    "    {{ '<start_of_turn>' + role + '\\n' + (first_user_prefix if loop.first else \"\") }}\n"
    "    {%- if message['content'] is string -%}\n"
    "        {{ message['content'] | trim }}\n"
    "    {%- elif message['content'] is iterable -%}\n"
    "        {%- for item in message['content'] -%}\n"
    "            {%- if item['type'] == 'image' -%}\n"
    "                {{ '<start_of_image>' }}\n"
    "            {%- elif item['type'] == 'text' -%}\n"
    "                {{ item['text'] | trim }}\n"
    "            {%- endif -%}\n"
    "        {%- endfor -%}\n"
    "    {%- else -%}\n"
    "        {{ raise_exception(\"Invalid content type\") }}\n"
    "    {%- endif -%}\n"
    "    {{ '<end_of_turn>\\n' }}\n"
    "{%- endfor -%}\n"
    "{%- if add_generation_prompt -%}\n"
    "    {{'<start_of_turn>model\\n'}}\n"
    "{%- endif -%}\n";

const char *rl_template_builtin(const char *name) {
    if (!name) return NULL;
    if (strcmp(name, "chatml") == 0) return CHATML;
    if (strcmp(name, "gemma") == 0) return GEMMA;
    return NULL;
}

const char *rl_template_fallback(const char *arch, const char **name_out) {
    const char *name = arch && !strncmp(arch, "gemma", 5) ? "gemma" : "chatml";
    if (name_out) *name_out = name;
    return rl_template_builtin(name);
}
