/* Chat-template lexer: normalized source -> tokens (c->toks).
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
 * trailing newline (jinja2's keep_trailing_newline=False).  Text outside
 * tags becomes TK_TEXT tokens; string literals are unescaped here.
 *
 * Invariants: every token carries the byte offset it came from (errors name
 * line:col); all memory comes from the ctx arena.
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
static bool is_digit(char ch) {
    return ch >= '0' && ch <= '9';
}

static tp_tok *push_tok(tp_ctx *c, tp_tkind kind, size_t off) {
    c->toks = rl__tp_grow(c, c->toks, c->n_toks, &c->cap_toks, sizeof(tp_tok), 256, off);
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
    if (i >= c->src_len) rl__tp_fail(c, RL_ERR_FORMAT, start, "unterminated string literal");
    /* decoded length <= raw length (every escape shrinks or keeps size,
     * \U and \u produce at most 4 bytes from 6+ chars, \x from 4) */
    char *o = rl__tp_alloc(c, i - start + 1, start);
    size_t n = 0;
    for (size_t j = start + 1; j < i; j++) {
        if (s[j] != '\\') {
            o[n++] = s[j];
            continue;
        }
        char e = s[++j];
        int nhex = 0;
        switch (e) {
        case 'n':
            o[n++] = '\n';
            break;
        case 't':
            o[n++] = '\t';
            break;
        case 'r':
            o[n++] = '\r';
            break;
        case '\\':
            o[n++] = '\\';
            break;
        case '\'':
            o[n++] = '\'';
            break;
        case '"':
            o[n++] = '"';
            break;
        case 'a':
            o[n++] = '\a';
            break;
        case 'b':
            o[n++] = '\b';
            break;
        case 'f':
            o[n++] = '\f';
            break;
        case 'v':
            o[n++] = '\v';
            break;
        case '\n':
            break; /* line continuation */
        case 'x':
            nhex = 2;
            break;
        case 'u':
            nhex = 4;
            break;
        case 'U':
            nhex = 8;
            break;
        default:
            if (e >= '0' && e <= '7') {
                uint32_t v = 0;
                int k = 0;
                while (k < 3 && j < i && s[j] >= '0' && s[j] <= '7')
                    v = v * 8 + (uint32_t)(s[j++] - '0'), k++;
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
                if (h < 0)
                    rl__tp_fail(c, RL_ERR_FORMAT, j - 1, "truncated \\%c escape in string literal",
                                e);
                v = v * 16 + (uint32_t)h;
            }
            if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
                rl__tp_fail(c, RL_ERR_FORMAT, j - 1, "invalid code point in \\%c escape", e);
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
        if (i >= n)
            rl__tp_fail(c, RL_ERR_FORMAT, tag_off, "unclosed '%s' tag", is_var ? "{{" : "{%");
        if (depth == 0) {
            bool strip = false;
            size_t j = i;
            if ((s[j] == '-' || (!is_var && s[j] == '+')) && j + 2 < n + 1 && j + 1 < n &&
                s[j + 1] == closer && j + 2 < n && s[j + 2] == '}') {
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
            if (i - st >= sizeof buf - 1)
                rl__tp_fail(c, RL_ERR_FORMAT, st, "number literal too long");
            tp_tok *t = push_tok(c, is_float ? TK_FLOAT : TK_INT, st);
            if (is_float) {
                t->f = strtod(buf, NULL);
            } else {
                uint64_t v = 0;
                for (size_t k = 0; k < m; k++) {
                    if (v > (uint64_t)INT64_MAX / 10 ||
                        v * 10 + (uint64_t)(buf[k] - '0') > (uint64_t)INT64_MAX)
                        rl__tp_fail(c, RL_ERR_RANGE, st, "integer literal out of range");
                    v = v * 10 + (uint64_t)(buf[k] - '0');
                }
                t->i = (int64_t)v;
            }
        } else {
            size_t len = 0;
            for (size_t k = 0; k < sizeof OPS2 / sizeof OPS2[0]; k++)
                if (i + 1 < n && s[i] == OPS2[k][0] && s[i + 1] == OPS2[k][1]) len = 2;
            if (!len && strchr(OPS1, ch) && ch) len = 1;
            if (!len) rl__tp_fail(c, RL_ERR_FORMAT, i, "unexpected character '%c' in tag", ch);
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
    rl__tp_fail(c, RL_ERR_FORMAT, tag, "unclosed raw block (missing endraw)");
}

void rl__tp_lex(tp_ctx *c) {
    const char *s = c->src;
    size_t n = c->src_len, pos = 0;
    for (;;) {
        size_t tag = pos;
        while (tag + 1 < n &&
               !(s[tag] == '{' && (s[tag + 1] == '{' || s[tag + 1] == '%' || s[tag + 1] == '#')))
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
            if (k + 1 >= n) rl__tp_fail(c, RL_ERR_FORMAT, tag, "unclosed comment");
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
