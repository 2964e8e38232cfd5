/* Chat-template lexer and parser: normalized source -> tokens -> AST.
 *
 * Whitespace rules are jinja2's with trim_blocks and lstrip_blocks on:
 *   - `{%-`, `{{-`, `{#-` strip all whitespace before the tag; `-%}`, `-}}`,
 *     `-#}` strip all whitespace after it;
 *   - otherwise, before `{%` / `{#` (not `{{`), spaces and tabs between the
 *     start of the line and the tag are removed (lstrip_blocks), unless the
 *     tag is written `{%+`;
 *   - after `%}` / `#}` (not `}}`) a single newline is removed (trim_blocks),
 *     unless written `+%}`.
 * The caller has already turned \r\n and \r into \n and dropped one
 * trailing newline (jinja2's keep_trailing_newline=False).
 *
 * Invariants: every token and node carries the byte offset it came from, so
 * errors name line:col; recursion (nested blocks and expressions) is bounded
 * by limits.max_depth; all memory comes from the ctx arena.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/chat-impl.h"

/* ------------------------------------------------------------------ lexer */

static bool is_ws(char ch) {
    return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' || ch == '\f' || ch == '\v';
}
static bool is_alpha(char ch) {
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '_';
}
static bool is_digit(char ch) { return ch >= '0' && ch <= '9'; }

static tp_tok *push_tok(tp_ctx *c, tp_tkind kind, size_t off) {
    if (c->n_toks == c->cap_toks) {
        size_t cap = c->cap_toks ? c->cap_toks * 2 : 256;
        tp_tok *t = tp_alloc_array(c, cap, sizeof(tp_tok), off);
        if (c->n_toks) memcpy(t, c->toks, c->n_toks * sizeof(tp_tok));
        c->toks = t;
        c->cap_toks = cap;
    }
    tp_tok *t = &c->toks[c->n_toks++];
    memset(t, 0, sizeof *t);
    t->kind = kind;
    t->off = off;
    return t;
}

static void emit_text(tp_ctx *c, size_t s, size_t e) {
    if (e <= s) return;
    tp_tok *t = push_tok(c, TK_TEXT, s);
    t->p = c->src + s;
    t->n = e - s;
}


static int hexval(char ch) {
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return -1;
}

/* Lexes a quoted string at *pos; decodes Python escapes (unicode-escape, as
 * jinja2 does).  Unknown escapes are kept verbatim. */
static void lex_string(tp_ctx *c, size_t *pos) {
    const char *s = c->src;
    size_t start = *pos, i = start + 1;
    char q = s[start];
    while (i < c->src_len && s[i] != q) i += (s[i] == '\\' && i + 1 < c->src_len) ? 2 : 1;
    if (i >= c->src_len) tp_fail(c, RL_ERR_FORMAT, start, "unterminated string literal");
    /* decoded length <= raw length (every escape shrinks or keeps size,
     * \U and \u produce at most 4 bytes from 6+ chars, \x from 4) */
    char *o = tp_alloc(c, i - start + 1, start);
    size_t n = 0;
    for (size_t j = start + 1; j < i; j++) {
        if (s[j] != '\\') {
            o[n++] = s[j];
            continue;
        }
        char e = s[++j];
        int nhex = 0;
        switch (e) {
        case 'n': o[n++] = '\n'; break;
        case 't': o[n++] = '\t'; break;
        case 'r': o[n++] = '\r'; break;
        case '\\': o[n++] = '\\'; break;
        case '\'': o[n++] = '\''; break;
        case '"': o[n++] = '"'; break;
        case 'a': o[n++] = '\a'; break;
        case 'b': o[n++] = '\b'; break;
        case 'f': o[n++] = '\f'; break;
        case 'v': o[n++] = '\v'; break;
        case '\n': break; /* line continuation */
        case 'x': nhex = 2; break;
        case 'u': nhex = 4; break;
        case 'U': nhex = 8; break;
        default:
            if (e >= '0' && e <= '7') {
                uint32_t v = 0;
                int k = 0;
                while (k < 3 && j < i && s[j] >= '0' && s[j] <= '7') v = v * 8 + (uint32_t)(s[j++] - '0'), k++;
                j--;
                n += rl_utf8_encode(v, o + n);
            } else {
                o[n++] = '\\';
                o[n++] = e;
            }
        }
        if (nhex) {
            uint32_t v = 0;
            for (int k = 0; k < nhex; k++) {
                int h = (j + 1 + (size_t)k < i) ? hexval(s[j + 1 + (size_t)k]) : -1;
                if (h < 0) tp_fail(c, RL_ERR_FORMAT, j - 1, "truncated \\%c escape in string literal", e);
                v = v * 16 + (uint32_t)h;
            }
            if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
                tp_fail(c, RL_ERR_FORMAT, j - 1, "invalid code point in \\%c escape", e);
            j += (size_t)nhex;
            n += rl_utf8_encode(v, o + n);
        }
    }
    tp_tok *t = push_tok(c, TK_STR, start);
    t->p = o;
    t->n = n;
    *pos = i + 1;
}

static const char *const OPS2[] = {"==", "!=", "<=", ">=", "//", "**"};
static const char OPS1[] = "+-*/%~<>=.,:|()[]{}";

/* Lexes the inside of a {{ }} or {% %} tag starting at *pos; stops after the
 * closer and returns whether it asked to strip following whitespace ('-'),
 * and via *plus whether it was '+%}'. */
static bool lex_tag(tp_ctx *c, size_t *pos, bool is_var, size_t tag_off, bool *plus) {
    const char *s = c->src;
    size_t i = *pos, n = c->src_len;
    char closer = is_var ? '}' : '%';
    int depth = 0;
    *plus = false;
    for (;;) {
        while (i < n && is_ws(s[i])) i++;
        if (i >= n) tp_fail(c, RL_ERR_FORMAT, tag_off, "unclosed '%s' tag", is_var ? "{{" : "{%");
        if (depth == 0) {
            bool strip = false;
            size_t j = i;
            if ((s[j] == '-' || (!is_var && s[j] == '+')) && j + 2 < n + 1 && j + 1 < n && s[j + 1] == closer && j + 2 < n && s[j + 2] == '}') {
                strip = s[j] == '-';
                *plus = s[j] == '+';
                j++;
            }
            if (j + 1 < n && s[j] == closer && s[j + 1] == '}') {
                push_tok(c, is_var ? TK_VAR_END : TK_BLOCK_END, i);
                *pos = j + 2;
                return strip;
            }
        }
        char ch = s[i];
        if (ch == '\'' || ch == '"') {
            lex_string(c, &i);
        } else if (is_alpha(ch)) {
            size_t st = i;
            while (i < n && (is_alpha(s[i]) || is_digit(s[i]))) i++;
            tp_tok *t = push_tok(c, TK_NAME, st);
            t->p = s + st;
            t->n = i - st;
        } else if (is_digit(ch)) {
            size_t st = i;
            bool is_float = false;
            while (i < n && (is_digit(s[i]) || s[i] == '_')) i++;
            if (i + 1 < n && s[i] == '.' && is_digit(s[i + 1])) {
                is_float = true;
                i++;
                while (i < n && (is_digit(s[i]) || s[i] == '_')) i++;
            }
            if (i < n && (s[i] == 'e' || s[i] == 'E')) {
                size_t k = i + 1;
                if (k < n && (s[k] == '+' || s[k] == '-')) k++;
                if (k < n && is_digit(s[k])) {
                    is_float = true;
                    i = k;
                    while (i < n && is_digit(s[i])) i++;
                }
            }
            char buf[64];
            size_t m = 0;
            for (size_t k = st; k < i && m < sizeof buf - 1; k++)
                if (s[k] != '_') buf[m++] = s[k];
            buf[m] = 0;
            if (i - st >= sizeof buf - 1) tp_fail(c, RL_ERR_FORMAT, st, "number literal too long");
            tp_tok *t = push_tok(c, is_float ? TK_FLOAT : TK_INT, st);
            if (is_float) {
                t->f = strtod(buf, NULL);
            } else {
                uint64_t v = 0;
                for (size_t k = 0; k < m; k++) {
                    if (v > (uint64_t)INT64_MAX / 10 ||
                        v * 10 + (uint64_t)(buf[k] - '0') > (uint64_t)INT64_MAX)
                        tp_fail(c, RL_ERR_RANGE, st, "integer literal out of range");
                    v = v * 10 + (uint64_t)(buf[k] - '0');
                }
                t->i = (int64_t)v;
            }
        } else {
            size_t len = 0;
            for (size_t k = 0; k < sizeof OPS2 / sizeof OPS2[0]; k++)
                if (i + 1 < n && s[i] == OPS2[k][0] && s[i + 1] == OPS2[k][1]) len = 2;
            if (!len && strchr(OPS1, ch) && ch) len = 1;
            if (!len) tp_fail(c, RL_ERR_FORMAT, i, "unexpected character '%c' in tag", ch);
            if (ch == '(' || ch == '[' || ch == '{') depth++;
            if ((ch == ')' || ch == ']' || ch == '}') && depth > 0) depth--;
            tp_tok *t = push_tok(c, TK_OP, i);
            t->p = s + i;
            t->n = len;
            i += len;
        }
    }
}

/* Skips whitespace after a tag: all of it for '-', else one newline if
 * trim_blocks applies. */
static size_t after_tag(tp_ctx *c, size_t pos, bool strip, bool trim) {
    if (strip) {
        while (pos < c->src_len && is_ws(c->src[pos])) pos++;
    } else if (trim && pos < c->src_len && c->src[pos] == '\n') {
        pos++;
    }
    return pos;
}

/* If a {% raw %} tag starts at `i` (just past "{%" and modifier), handles the
 * whole raw block and returns true. */
static bool lex_raw(tp_ctx *c, size_t tag, size_t i, size_t *pos_out) {
    const char *s = c->src;
    size_t n = c->src_len;
    while (i < n && is_ws(s[i])) i++;
    if (!(i + 3 <= n && memcmp(s + i, "raw", 3) == 0)) return false;
    i += 3;
    while (i < n && is_ws(s[i])) i++;
    bool strip = false;
    if (i < n && (s[i] == '-' || s[i] == '+')) strip = s[i++] == '-';
    if (!(i + 1 < n && s[i] == '%' && s[i + 1] == '}')) return false;
    size_t body = after_tag(c, i + 2, strip, true);
    /* find {%[-+]? endraw [-+]?%} */
    for (size_t k = body; k + 1 < n; k++) {
        if (s[k] != '{' || s[k + 1] != '%') continue;
        size_t j = k + 2;
        bool lstrip = false;
        if (j < n && (s[j] == '-' || s[j] == '+')) lstrip = s[j++] == '-';
        while (j < n && is_ws(s[j])) j++;
        if (!(j + 6 <= n && memcmp(s + j, "endraw", 6) == 0)) continue;
        j += 6;
        while (j < n && is_ws(s[j])) j++;
        bool rstrip = false;
        if (j < n && (s[j] == '-' || s[j] == '+')) rstrip = s[j++] == '-';
        if (!(j + 1 < n && s[j] == '%' && s[j + 1] == '}')) continue;
        size_t e = k;
        if (lstrip)
            while (e > body && is_ws(s[e - 1])) e--;
        emit_text(c, body, e);
        *pos_out = after_tag(c, j + 2, rstrip, true);
        return true;
    }
    tp_fail(c, RL_ERR_FORMAT, tag, "unclosed raw block (missing endraw)");
}

static void lex(tp_ctx *c) {
    const char *s = c->src;
    size_t n = c->src_len, pos = 0;
    for (;;) {
        size_t tag = pos;
        while (tag + 1 < n && !(s[tag] == '{' && (s[tag + 1] == '{' || s[tag + 1] == '%' || s[tag + 1] == '#')))
            tag++;
        bool found = tag + 1 < n;
        size_t e = found ? tag : n;
        bool line_starting = pos == 0 || s[pos - 1] == '\n';
        if (found) {
            char kind = s[tag + 1];
            char mod = tag + 2 < n ? s[tag + 2] : 0;
            if (mod == '-') {
                while (e > pos && is_ws(s[e - 1])) e--;
            } else if (kind != '{' && mod != '+') {
                size_t l = e;
                while (l > pos && s[l - 1] != '\n') l--;
                if (l > pos || line_starting) {
                    size_t k = l;
                    while (k < e && (s[k] == ' ' || s[k] == '\t')) k++;
                    if (k == e) e = l;
                }
            }
        }
        emit_text(c, pos, e);
        if (!found) break;
        char kind = s[tag + 1];
        size_t i = tag + 2;
        if (i < n && (s[i] == '-' || (kind != '{' && s[i] == '+'))) i++;
        if (kind == '#') {
            size_t k = i;
            while (k + 1 < n && !(s[k] == '#' && s[k + 1] == '}')) k++;
            if (k + 1 >= n) tp_fail(c, RL_ERR_FORMAT, tag, "unclosed comment");
            bool strip = k > i && s[k - 1] == '-';
            pos = after_tag(c, k + 2, strip, true);
            continue;
        }
        if (kind == '%' && lex_raw(c, tag, i, &pos)) continue;
        push_tok(c, kind == '{' ? TK_VAR_BEGIN : TK_BLOCK_BEGIN, tag);
        bool plus = false;
        bool strip = lex_tag(c, &i, kind == '{', tag, &plus);
        pos = after_tag(c, i, strip, kind == '%' && !plus);
    }
    push_tok(c, TK_EOF, n);
}

/* ----------------------------------------------------------------- parser */

static tp_tok *cur(tp_ctx *c) { return &c->toks[c->pos]; }
static tp_tok *next_tok(tp_ctx *c) {
    tp_tok *t = &c->toks[c->pos];
    if (t->kind != TK_EOF) c->pos++;
    return t;
}
static bool tok_is(tp_tok *t, tp_tkind k, const char *s) {
    if (t->kind != k) return false;
    if (!s) return true;
    size_t l = strlen(s);
    return t->n == l && memcmp(t->p, s, l) == 0;
}
static bool at_op(tp_ctx *c, const char *s) { return tok_is(cur(c), TK_OP, s); }
static bool at_name(tp_ctx *c, const char *s) { return tok_is(cur(c), TK_NAME, s); }
static bool skip_op(tp_ctx *c, const char *s) {
    if (!at_op(c, s)) return false;
    c->pos++;
    return true;
}
static bool skip_name(tp_ctx *c, const char *s) {
    if (!at_name(c, s)) return false;
    c->pos++;
    return true;
}

static const char *tok_desc(tp_ctx *c, tp_tok *t) {
    switch (t->kind) {
    case TK_TEXT: return "template text";
    case TK_VAR_BEGIN: return "'{{'";
    case TK_VAR_END: return "'}}'";
    case TK_BLOCK_BEGIN: return "'{%'";
    case TK_BLOCK_END: return "'%}'";
    case TK_STR: return "string literal";
    case TK_INT: return "integer literal";
    case TK_FLOAT: return "float literal";
    case TK_EOF: return "end of template";
    case TK_NAME:
    case TK_OP: {
        size_t n = t->n > 40 ? 40 : t->n;
        char *b = tp_alloc(c, n + 3, t->off);
        b[0] = '\'';
        memcpy(b + 1, t->p, n);
        b[n + 1] = '\'';
        return b;
    }
    }
    return "token";
}

static _Noreturn void unexpected(tp_ctx *c, const char *want) {
    tp_tok *t = cur(c);
    tp_fail(c, RL_ERR_FORMAT, t->off, "expected %s, got %s", want, tok_desc(c, t));
}
static void expect_op(tp_ctx *c, const char *s) {
    if (!skip_op(c, s)) {
        char w[16];
        snprintf(w, sizeof w, "'%s'", s);
        unexpected(c, w);
    }
}
static tp_tok *expect_name(tp_ctx *c) {
    if (cur(c)->kind != TK_NAME) unexpected(c, "a name");
    return next_tok(c);
}
static void expect_block_end(tp_ctx *c) {
    if (cur(c)->kind != TK_BLOCK_END) unexpected(c, "'%}'");
    c->pos++;
}

static void enter(tp_ctx *c, size_t off) {
    if (++c->depth > c->lim.max_depth)
        tp_fail(c, RL_ERR_LIMIT, off, "nesting deeper than %d", c->lim.max_depth);
}
static void leave(tp_ctx *c) { c->depth--; }

static tp_node *mk(tp_ctx *c, tp_nkind k, size_t off) {
    tp_node *n = tp_alloc(c, sizeof *n, off);
    n->kind = k;
    n->off = off;
    return n;
}

static const char *tok_cstr(tp_ctx *c, tp_tok *t) { return tp_strdup(c, t->p, t->n, t->off); }

/* Growable node-pointer vector built in the arena. */
typedef struct nvec {
    tp_node **v;
    size_t n, cap;
} nvec;
static void nvec_push(tp_ctx *c, nvec *nv, tp_node *x) {
    if (nv->n == nv->cap) {
        size_t cap = nv->cap ? nv->cap * 2 : 4;
        tp_node **v = tp_alloc_array(c, cap, sizeof *v, x ? x->off : 0);
        if (nv->n) memcpy(v, nv->v, nv->n * sizeof *v);
        nv->v = v;
        nv->cap = cap;
    }
    nv->v[nv->n++] = x;
}

static tp_node *parse_expr(tp_ctx *c);
static tp_node *parse_or(tp_ctx *c);
static tp_node *parse_unary(tp_ctx *c, bool with_filter);
static tp_node *parse_primary(tp_ctx *c);

/* Parses "(args, name=value, ...)" after the '(' has been consumed. */
static void parse_call_args(tp_ctx *c, tp_node *n) {
    nvec args = {0}, kwv = {0};
    const char **names = NULL;
    size_t n_names = 0, cap_names = 0;
    while (!skip_op(c, ")")) {
        if (args.n + kwv.n > 0) expect_op(c, ",");
        if (skip_op(c, ")")) break; /* trailing comma */
        if (cur(c)->kind == TK_NAME && tok_is(&c->toks[c->pos + 1], TK_OP, "=")) {
            tp_tok *t = next_tok(c);
            c->pos++;
            if (n_names == cap_names) {
                size_t cap = cap_names ? cap_names * 2 : 4;
                const char **nn = tp_alloc_array(c, cap, sizeof *nn, t->off);
                if (n_names) memcpy(nn, names, n_names * sizeof *nn);
                names = nn;
                cap_names = cap;
            }
            names[n_names++] = tok_cstr(c, t);
            nvec_push(c, &kwv, parse_expr(c));
        } else {
            if (kwv.n) unexpected(c, "a keyword argument (positional after keyword)");
            nvec_push(c, &args, parse_expr(c));
        }
    }
    n->body = args.v;
    n->n_body = args.n;
    n->body2 = kwv.v;
    n->n_body2 = kwv.n;
    n->names = names;
    n->n_names = n_names;
}

static tp_node *parse_postfix(tp_ctx *c, tp_node *n) {
    for (;;) {
        tp_tok *t = cur(c);
        if (skip_op(c, ".")) {
            tp_tok *a = cur(c);
            if (a->kind == TK_INT) {
                c->pos++;
                tp_node *x = mk(c, E_ITEM, t->off);
                x->a = n;
                x->b = mk(c, E_LIT, a->off);
                x->b->lit.t = V_INT;
                x->b->lit.u.i = a->i;
                n = x;
                continue;
            }
            a = expect_name(c);
            tp_node *x = mk(c, E_ATTR, t->off);
            x->a = n;
            x->s = tok_cstr(c, a);
            x->sn = a->n;
            n = x;
        } else if (skip_op(c, "[")) {
            tp_node *parts[3] = {NULL, NULL, NULL};
            int np = 0;
            bool slice = false;
            for (;;) {
                if (at_op(c, ":")) {
                    c->pos++;
                    slice = true;
                    if (++np > 2) unexpected(c, "']'");
                    continue;
                }
                if (at_op(c, "]")) break;
                if (parts[np]) unexpected(c, "':' or ']'");
                parts[np] = parse_expr(c);
            }
            c->pos++;
            if (!slice && !parts[0]) tp_fail(c, RL_ERR_FORMAT, t->off, "empty subscript");
            tp_node *x = mk(c, slice ? E_SLICE : E_ITEM, t->off);
            x->a = n;
            x->b = parts[0];
            x->c = parts[1];
            x->d = parts[2];
            n = x;
        } else if (skip_op(c, "(")) {
            tp_node *x = mk(c, E_CALL, t->off);
            x->a = n;
            enter(c, t->off);
            parse_call_args(c, x);
            leave(c);
            n = x;
        } else {
            return n;
        }
    }
}

static tp_node *parse_filters(tp_ctx *c, tp_node *n) {
    for (;;) {
        tp_tok *t = cur(c);
        if (skip_op(c, "|")) {
            tp_tok *name = expect_name(c);
            tp_node *x = mk(c, E_FILTER, t->off);
            x->a = n;
            x->s = tok_cstr(c, name);
            x->sn = name->n;
            if (skip_op(c, "(")) {
                enter(c, t->off);
                parse_call_args(c, x);
                leave(c);
            }
            n = x;
        } else if (skip_name(c, "is")) {
            tp_node *x = mk(c, E_TEST, t->off);
            x->op = skip_name(c, "not");
            tp_tok *name = cur(c);
            /* `is none`, `is true` etc. arrive as names; `is ==` as an op */
            if (name->kind != TK_NAME && !tok_is(name, TK_OP, "==") && !tok_is(name, TK_OP, "!=") &&
                !tok_is(name, TK_OP, "<") && !tok_is(name, TK_OP, ">") &&
                !tok_is(name, TK_OP, "<=") && !tok_is(name, TK_OP, ">="))
                unexpected(c, "a test name");
            c->pos++;
            x->a = n;
            x->s = tok_cstr(c, name);
            x->sn = name->n;
            tp_tok *nx = cur(c);
            if (skip_op(c, "(")) {
                enter(c, t->off);
                parse_call_args(c, x);
                leave(c);
            } else if ((nx->kind == TK_NAME || nx->kind == TK_STR || nx->kind == TK_INT ||
                        nx->kind == TK_FLOAT || tok_is(nx, TK_OP, "[") || tok_is(nx, TK_OP, "{")) &&
                       !tok_is(nx, TK_NAME, "else") && !tok_is(nx, TK_NAME, "or") &&
                       !tok_is(nx, TK_NAME, "and") && !tok_is(nx, TK_NAME, "if") &&
                       !tok_is(nx, TK_NAME, "in") && !tok_is(nx, TK_NAME, "not") &&
                       !tok_is(nx, TK_NAME, "is")) {
                tp_node *arg = parse_postfix(c, parse_primary(c));
                x->body = tp_alloc(c, sizeof(tp_node *), nx->off);
                x->body[0] = arg;
                x->n_body = 1;
            }
            n = x;
        } else if (n->kind == E_FILTER && skip_op(c, "(")) {
            /* `x|f(...)` call syntax already handled; a call after a filter
             * chain calls its result */
            tp_node *x = mk(c, E_CALL, t->off);
            x->a = n;
            enter(c, t->off);
            parse_call_args(c, x);
            leave(c);
            n = x;
        } else {
            return n;
        }
    }
}

static tp_node *parse_primary(tp_ctx *c) {
    tp_tok *t = cur(c);
    tp_node *n;
    switch (t->kind) {
    case TK_STR: {
        c->pos++;
        /* adjacent string literals concatenate, as in Python */
        const char *p = t->p;
        size_t len = t->n;
        while (cur(c)->kind == TK_STR) {
            tp_tok *u = next_tok(c);
            char *b = tp_alloc(c, len + u->n + 1, u->off);
            memcpy(b, p, len);
            memcpy(b + len, u->p, u->n);
            p = b;
            len += u->n;
        }
        n = mk(c, E_LIT, t->off);
        n->lit = tp_str(p, len);
        return n;
    }
    case TK_INT:
        c->pos++;
        n = mk(c, E_LIT, t->off);
        n->lit.t = V_INT;
        n->lit.u.i = t->i;
        return n;
    case TK_FLOAT:
        c->pos++;
        n = mk(c, E_LIT, t->off);
        n->lit.t = V_FLOAT;
        n->lit.u.f = t->f;
        return n;
    case TK_NAME:
        c->pos++;
        n = mk(c, E_LIT, t->off);
        if (tok_is(t, TK_NAME, "true") || tok_is(t, TK_NAME, "True")) {
            n->lit.t = V_BOOL;
            n->lit.u.b = true;
        } else if (tok_is(t, TK_NAME, "false") || tok_is(t, TK_NAME, "False")) {
            n->lit.t = V_BOOL;
        } else if (tok_is(t, TK_NAME, "none") || tok_is(t, TK_NAME, "None")) {
            n->lit.t = V_NONE;
        } else {
            n->kind = E_NAME;
            n->s = tok_cstr(c, t);
            n->sn = t->n;
        }
        return n;
    case TK_OP:
        if (skip_op(c, "(")) {
            enter(c, t->off);
            if (skip_op(c, ")")) {
                n = mk(c, E_TUPLE, t->off);
            } else {
                tp_node *first = parse_expr(c);
                if (at_op(c, ",")) {
                    nvec items = {0};
                    nvec_push(c, &items, first);
                    while (skip_op(c, ",")) {
                        if (at_op(c, ")")) break;
                        nvec_push(c, &items, parse_expr(c));
                    }
                    n = mk(c, E_TUPLE, t->off);
                    n->body = items.v;
                    n->n_body = items.n;
                } else {
                    n = first;
                }
                expect_op(c, ")");
            }
            leave(c);
            return n;
        }
        if (skip_op(c, "[")) {
            enter(c, t->off);
            nvec items = {0};
            while (!skip_op(c, "]")) {
                if (items.n) expect_op(c, ",");
                if (skip_op(c, "]")) break;
                nvec_push(c, &items, parse_expr(c));
            }
            leave(c);
            n = mk(c, E_LIST, t->off);
            n->body = items.v;
            n->n_body = items.n;
            return n;
        }
        if (skip_op(c, "{")) {
            enter(c, t->off);
            nvec keys = {0}, vals = {0};
            while (!skip_op(c, "}")) {
                if (keys.n) expect_op(c, ",");
                if (skip_op(c, "}")) break;
                nvec_push(c, &keys, parse_expr(c));
                expect_op(c, ":");
                nvec_push(c, &vals, parse_expr(c));
            }
            leave(c);
            n = mk(c, E_DICT, t->off);
            n->body = keys.v;
            n->n_body = keys.n;
            n->body2 = vals.v;
            n->n_body2 = vals.n;
            return n;
        }
        break;
    default:
        break;
    }
    unexpected(c, "an expression");
}

static tp_node *parse_unary(tp_ctx *c, bool with_filter) {
    tp_tok *t = cur(c);
    tp_node *n;
    enter(c, t->off);
    if (skip_op(c, "-") || skip_op(c, "+")) {
        n = mk(c, tok_is(t, TK_OP, "-") ? E_NEG : E_POS, t->off);
        n->a = parse_unary(c, false);
    } else {
        n = parse_primary(c);
    }
    n = parse_postfix(c, n);
    if (with_filter) n = parse_filters(c, n);
    leave(c);
    return n;
}

static tp_node *bin(tp_ctx *c, int op, tp_node *a, tp_node *b, size_t off) {
    tp_node *n = mk(c, E_BIN, off);
    n->op = op;
    n->a = a;
    n->b = b;
    return n;
}

static tp_node *parse_pow(tp_ctx *c) {
    tp_node *n = parse_unary(c, true);
    while (at_op(c, "**")) {
        size_t off = next_tok(c)->off;
        n = bin(c, TP_OP_POW, n, parse_unary(c, true), off);
    }
    return n;
}

static tp_node *parse_math2(tp_ctx *c) {
    tp_node *n = parse_pow(c);
    for (;;) {
        int op = at_op(c, "*") ? TP_OP_MUL : at_op(c, "/") ? TP_OP_DIV : at_op(c, "//") ? TP_OP_FLOORDIV : at_op(c, "%") ? TP_OP_MOD : 0;
        if (!op) return n;
        size_t off = next_tok(c)->off;
        n = bin(c, op, n, parse_pow(c), off);
    }
}

static tp_node *parse_concat(tp_ctx *c) {
    tp_node *n = parse_math2(c);
    while (at_op(c, "~")) {
        size_t off = next_tok(c)->off;
        n = bin(c, TP_OP_CONCAT, n, parse_math2(c), off);
    }
    return n;
}

static tp_node *parse_math1(tp_ctx *c) {
    tp_node *n = parse_concat(c);
    for (;;) {
        int op = at_op(c, "+") ? TP_OP_ADD : at_op(c, "-") ? TP_OP_SUB : 0;
        if (!op) return n;
        size_t off = next_tok(c)->off;
        n = bin(c, op, n, parse_concat(c), off);
    }
}

static tp_node *parse_compare(tp_ctx *c) {
    tp_node *first = parse_math1(c);
    nvec rhs = {0};
    int *ops = NULL;
    size_t cap = 0;
    size_t off = cur(c)->off;
    for (;;) {
        int op = 0;
        if (at_op(c, "==")) op = TP_OP_EQ;
        else if (at_op(c, "!=")) op = TP_OP_NE;
        else if (at_op(c, "<")) op = TP_OP_LT;
        else if (at_op(c, "<=")) op = TP_OP_LE;
        else if (at_op(c, ">")) op = TP_OP_GT;
        else if (at_op(c, ">=")) op = TP_OP_GE;
        else if (at_name(c, "in")) op = TP_OP_IN;
        else if (at_name(c, "not") && tok_is(&c->toks[c->pos + 1], TK_NAME, "in")) {
            op = TP_OP_NOTIN;
            c->pos++;
        }
        if (!op) break;
        c->pos++;
        if (rhs.n == cap) {
            size_t nc = cap ? cap * 2 : 4;
            int *o = tp_alloc_array(c, nc, sizeof *o, off);
            if (rhs.n) memcpy(o, ops, rhs.n * sizeof *o);
            ops = o;
            cap = nc;
        }
        ops[rhs.n] = op;
        nvec_push(c, &rhs, parse_math1(c));
    }
    if (!rhs.n) return first;
    tp_node *n = mk(c, E_COMPARE, off);
    n->a = first;
    n->body = rhs.v;
    n->n_body = rhs.n;
    n->ops = ops;
    return n;
}

static tp_node *parse_not(tp_ctx *c) {
    tp_tok *t = cur(c);
    if (at_name(c, "not")) {
        c->pos++;
        enter(c, t->off);
        tp_node *n = mk(c, E_NOT, t->off);
        n->a = parse_not(c);
        leave(c);
        return n;
    }
    return parse_compare(c);
}

static tp_node *parse_and(tp_ctx *c) {
    tp_node *n = parse_not(c);
    while (at_name(c, "and")) {
        size_t off = next_tok(c)->off;
        tp_node *x = mk(c, E_AND, off);
        x->a = n;
        x->b = parse_not(c);
        n = x;
    }
    return n;
}

static tp_node *parse_or(tp_ctx *c) {
    tp_node *n = parse_and(c);
    while (at_name(c, "or")) {
        size_t off = next_tok(c)->off;
        tp_node *x = mk(c, E_OR, off);
        x->a = n;
        x->b = parse_and(c);
        n = x;
    }
    return n;
}

/* expr := or ('if' or ('else' expr)?)* */
static tp_node *parse_expr(tp_ctx *c) {
    enter(c, cur(c)->off);
    tp_node *n = parse_or(c);
    while (at_name(c, "if")) {
        size_t off = next_tok(c)->off;
        tp_node *x = mk(c, E_COND, off);
        x->b = n;
        x->a = parse_or(c);
        if (skip_name(c, "else")) x->c = parse_expr(c);
        n = x;
    }
    leave(c);
    return n;
}

/* expr (',' expr)* -> a tuple when there is a comma. */
static tp_node *parse_tuple_expr(tp_ctx *c) {
    size_t off = cur(c)->off;
    tp_node *n = parse_expr(c);
    if (!at_op(c, ",")) return n;
    nvec items = {0};
    nvec_push(c, &items, n);
    while (skip_op(c, ",")) {
        if (cur(c)->kind == TK_VAR_END || cur(c)->kind == TK_BLOCK_END) break;
        nvec_push(c, &items, parse_expr(c));
    }
    tp_node *t = mk(c, E_TUPLE, off);
    t->body = items.v;
    t->n_body = items.n;
    return t;
}

/* ------------------------------------------------------------- statements */

static nvec parse_body(tp_ctx *c, const char *const *ends);

/* Target names of for/set: name (',' name)*, optionally parenthesized. */
static void parse_targets(tp_ctx *c, tp_node *n) {
    bool paren = skip_op(c, "(");
    const char **names = NULL;
    size_t cnt = 0, cap = 0;
    do {
        if (paren && at_op(c, ")")) break;
        tp_tok *t = expect_name(c);
        if (cnt == cap) {
            size_t nc = cap ? cap * 2 : 2;
            const char **nn = tp_alloc_array(c, nc, sizeof *nn, t->off);
            if (cnt) memcpy(nn, names, cnt * sizeof *nn);
            names = nn;
            cap = nc;
        }
        names[cnt++] = tok_cstr(c, t);
    } while (skip_op(c, ","));
    if (paren) expect_op(c, ")");
    n->names = names;
    n->n_names = cnt;
}

static tp_node *parse_stmt(tp_ctx *c) {
    tp_tok *begin = next_tok(c); /* TK_BLOCK_BEGIN */
    tp_tok *kw = expect_name(c);
    size_t off = begin->off;
    enter(c, off);
    tp_node *n = NULL;
    if (tok_is(kw, TK_NAME, "if")) {
        n = mk(c, N_IF, off);
        n->a = parse_tuple_expr(c);
        expect_block_end(c);
        static const char *const ends[] = {"elif", "else", "endif", NULL};
        nvec body = parse_body(c, ends);
        n->body = body.v;
        n->n_body = body.n;
        /* at "{% elif|else|endif" */
        c->pos++;
        tp_tok *e = next_tok(c);
        if (tok_is(e, TK_NAME, "elif")) {
            c->pos -= 2; /* re-parse "{% elif ... %}" as a nested if */
            c->toks[c->pos + 1].p = "if";
            c->toks[c->pos + 1].n = 2;
            tp_node *nested = parse_stmt(c);
            n->body2 = tp_alloc(c, sizeof(tp_node *), off);
            n->body2[0] = nested;
            n->n_body2 = 1;
            leave(c);
            return n; /* the nested if consumed endif */
        }
        if (tok_is(e, TK_NAME, "else")) {
            expect_block_end(c);
            static const char *const ends2[] = {"endif", NULL};
            nvec eb = parse_body(c, ends2);
            n->body2 = eb.v;
            n->n_body2 = eb.n;
            c->pos += 2;
        }
        expect_block_end(c);
    } else if (tok_is(kw, TK_NAME, "for")) {
        n = mk(c, N_FOR, off);
        parse_targets(c, n);
        if (!skip_name(c, "in")) unexpected(c, "'in'");
        /* no conditional expression here: `if` introduces the filter */
        n->a = parse_or(c);
        if (at_op(c, ",")) {
            nvec items = {0};
            nvec_push(c, &items, n->a);
            while (skip_op(c, ",")) nvec_push(c, &items, parse_or(c));
            tp_node *t = mk(c, E_TUPLE, n->a->off);
            t->body = items.v;
            t->n_body = items.n;
            n->a = t;
        }
        if (skip_name(c, "if")) n->b = parse_expr(c);
        if (at_name(c, "recursive"))
            tp_fail(c, RL_ERR_UNSUPPORTED, cur(c)->off, "recursive for loops are not supported");
        expect_block_end(c);
        static const char *const ends[] = {"else", "endfor", NULL};
        nvec body = parse_body(c, ends);
        n->body = body.v;
        n->n_body = body.n;
        c->pos++;
        if (tok_is(next_tok(c), TK_NAME, "else")) {
            expect_block_end(c);
            static const char *const ends2[] = {"endfor", NULL};
            nvec eb = parse_body(c, ends2);
            n->body2 = eb.v;
            n->n_body2 = eb.n;
            c->pos += 2;
        }
        expect_block_end(c);
    } else if (tok_is(kw, TK_NAME, "set")) {
        tp_tok *t = cur(c);
        if (t->kind == TK_NAME && tok_is(&c->toks[c->pos + 1], TK_OP, ".")) {
            n = mk(c, N_SET, off);
            n->a_attr = true;
            n->names = tp_alloc_array(c, 2, sizeof(char *), off);
            n->names[0] = tok_cstr(c, next_tok(c));
            c->pos++;
            n->names[1] = tok_cstr(c, expect_name(c));
            n->n_names = 2;
        } else {
            n = mk(c, N_SET, off);
            parse_targets(c, n);
        }
        if (skip_op(c, "=")) {
            n->a = parse_tuple_expr(c);
            expect_block_end(c);
        } else {
            if (n->a_attr || n->n_names != 1) unexpected(c, "'='");
            n->kind = N_SETBLOCK;
            if (at_op(c, "|"))
                tp_fail(c, RL_ERR_UNSUPPORTED, cur(c)->off, "filtered block set is not supported");
            expect_block_end(c);
            static const char *const ends[] = {"endset", NULL};
            nvec body = parse_body(c, ends);
            n->body = body.v;
            n->n_body = body.n;
            c->pos += 2;
            expect_block_end(c);
        }
    } else if (tok_is(kw, TK_NAME, "generation")) {
        n = mk(c, N_BLOCK, off);
        expect_block_end(c);
        static const char *const ends[] = {"endgeneration", NULL};
        nvec body = parse_body(c, ends);
        n->body = body.v;
        n->n_body = body.n;
        c->pos += 2;
        expect_block_end(c);
    } else if (tok_is(kw, TK_NAME, "break") || tok_is(kw, TK_NAME, "continue")) {
        n = mk(c, tok_is(kw, TK_NAME, "break") ? N_BREAK : N_CONTINUE, off);
        expect_block_end(c);
    } else {
        tp_fail(c, RL_ERR_UNSUPPORTED, kw->off, "unknown or unsupported statement '%.*s'",
                (int)(kw->n > 40 ? 40 : kw->n), kw->p);
    }
    leave(c);
    return n;
}

/* Parses nodes until "{% <one of ends>" (left unconsumed) or, when ends is
 * NULL, until the end of the template.  A missing end tag is an error that
 * names the block being closed. */
static nvec parse_body(tp_ctx *c, const char *const *ends) {
    nvec body = {0};
    size_t start = c->pos ? c->toks[c->pos - 1].off : 0;
    for (;;) {
        tp_tok *t = cur(c);
        if (t->kind == TK_EOF) {
            if (ends) {
                size_t last = 0;
                while (ends[last + 1]) last++;
                tp_fail(c, RL_ERR_FORMAT, start, "block not closed: missing '{%% %s %%}'", ends[last]);
            }
            return body;
        }
        if (t->kind == TK_TEXT) {
            c->pos++;
            tp_node *n = mk(c, N_TEXT, t->off);
            n->s = t->p;
            n->sn = t->n;
            nvec_push(c, &body, n);
        } else if (t->kind == TK_VAR_BEGIN) {
            c->pos++;
            tp_node *n = mk(c, N_OUTPUT, t->off);
            n->a = parse_tuple_expr(c);
            if (cur(c)->kind != TK_VAR_END) unexpected(c, "'}}'");
            c->pos++;
            nvec_push(c, &body, n);
        } else if (t->kind == TK_BLOCK_BEGIN) {
            tp_tok *kw = &c->toks[c->pos + 1];
            if (kw->kind == TK_NAME) {
                for (size_t i = 0; ends && ends[i]; i++)
                    if (tok_is(kw, TK_NAME, ends[i])) return body;
                static const char *const closers[] = {"elif", "else", "endif", "endfor", "endset", "endgeneration", NULL};
                for (size_t i = 0; closers[i]; i++)
                    if (tok_is(kw, TK_NAME, closers[i]))
                        tp_fail(c, RL_ERR_FORMAT, kw->off, "unexpected '%s'%s", closers[i],
                                ends ? " (wrong block nesting)" : " with no open block");
            }
            nvec_push(c, &body, parse_stmt(c));
        } else {
            unexpected(c, "template text or a tag");
        }
    }
}

tp_node **tp_parse(tp_ctx *c, size_t *n_out) {
    lex(c);
    c->pos = 0;
    c->depth = 0;
    nvec body = parse_body(c, NULL);
    *n_out = body.n;
    return body.v;
}
