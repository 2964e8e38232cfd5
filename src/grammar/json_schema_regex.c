/* JSON Schema `pattern` -> grammar (part of the JSON Schema converter,
 * json_schema.c).  A recursive-descent translator of the regex subset in
 * docs/STRUCTURED.md: alternation, grouping, quantifiers (?, *, +, {m,n},
 * lazy and possessive forms as the same language), literals, `.`, classes
 * and the escapes \d \w \s (and negations), \uXXXX, \xXX.  Code point
 * classes become grammar classes over JSON string content: the plain part
 * (everything but controls, quote, backslash and surrogates) as one
 * \U-range class, controls, quote and backslash as their JSON escapes.
 *
 * Bounds: the caller caps the pattern at 4096 bytes; nesting is capped at
 * 32, a class at 256 items, repetition counts at RL_GRAMMAR_MAX_REPEAT. */
#include <stdio.h>
#include <string.h>

#include "grammar/grammar-impl.h"
#include "grammar/json_schema-impl.h"

typedef struct rx {
    rl__jsconv *c;
    const char *s;
    size_t n, i;
    int depth;
    const char *ptr;
} rx;

/* Appends the JSON-string encoding of code point cp as a grammar literal. */
static bool json_char_literal(rl__jsconv *c, rl_buf *b, uint32_t cp) {
    char tmp[16];
    if (cp == '"') return rl__js_put(c, b, "\"\\\\\\\"\"", 6);  /* "\\\"" */
    if (cp == '\\') return rl__js_put(c, b, "\"\\\\\\\\\"", 6); /* "\\\\" */
    if (cp == '\n') return rl__js_put(c, b, "\"\\\\n\"", 5);
    if (cp == '\t') return rl__js_put(c, b, "\"\\\\t\"", 5);
    if (cp == '\r') return rl__js_put(c, b, "\"\\\\r\"", 5);
    if (cp < 0x20) {
        snprintf(tmp, sizeof tmp, "\"\\\\u%04X\"", cp);
        return rl__js_put(c, b, tmp, strlen(tmp));
    }
    snprintf(tmp, sizeof tmp, "\"\\U%08X\"", cp);
    return rl__js_put(c, b, tmp, strlen(tmp));
}

typedef rl__cprange cpr;

/* A set of code points (ranges, possibly negated) as a grammar expression
 * over JSON string content. */
static bool class_expr(rl__jsconv *c, rl_buf *b, cpr *r, int n, bool neg) {
    cpr f[264]; /* n <= 260 */
    int nf = rl__cp_ranges_normalize(r, n, neg, f);
    /* plain part: everything but controls, quote, backslash, surrogates */
    bool first = true, any_plain = false;
    rl_buf cls = {0};
    if (!rl__js_put(c, &cls, "[", 1)) return false;
    for (int i = 0; i < nf; i++) {
        uint32_t lo = f[i].lo, hi = f[i].hi;
        /* cut out 0x00-0x1F, '"', '\\', D800-DFFF */
        uint32_t cuts[][2] = {{0, 0x1F}, {'"', '"'}, {'\\', '\\'}, {0xD800, 0xDFFF}};
        uint32_t segs[8][2];
        int ns = 1;
        segs[0][0] = lo, segs[0][1] = hi;
        for (int q = 0; q < 4; q++) {
            uint32_t out[8][2];
            int no = 0;
            for (int t = 0; t < ns; t++) {
                uint32_t a = segs[t][0], z = segs[t][1];
                if (z < cuts[q][0] || a > cuts[q][1]) {
                    out[no][0] = a, out[no][1] = z, no++;
                    continue;
                }
                if (a < cuts[q][0]) out[no][0] = a, out[no][1] = cuts[q][0] - 1, no++;
                if (z > cuts[q][1]) out[no][0] = cuts[q][1] + 1, out[no][1] = z, no++;
            }
            memcpy(segs, out, sizeof out);
            ns = no;
        }
        for (int t = 0; t < ns; t++) {
            any_plain = true;
            if (!rl__js_printf(c, &cls, "\\U%08X-\\U%08X", segs[t][0], segs[t][1])) {
                rl_buf_free(&cls);
                return false;
            }
        }
    }
    if (!rl__js_put(c, &cls, "]", 1)) return false;
    if (!rl__js_put(c, b, "(", 1)) goto err;
    if (any_plain) {
        if (!rl__js_put(c, b, cls.p, cls.n)) goto err;
        first = false;
    }
    for (int i = 0; i < nf; i++)
        for (uint32_t cp = f[i].lo; cp <= f[i].hi && cp < 0x20; cp++) {
            if (!first && !rl__js_put(c, b, " | ", 3)) goto err;
            if (!json_char_literal(c, b, cp)) goto err;
            first = false;
        }
    for (int i = 0; i < nf; i++) {
        uint32_t sp[2] = {'"', '\\'};
        for (int q = 0; q < 2; q++)
            if (f[i].lo <= sp[q] && sp[q] <= f[i].hi) {
                if (!first && !rl__js_put(c, b, " | ", 3)) goto err;
                if (!json_char_literal(c, b, sp[q])) goto err;
                first = false;
            }
    }
    rl_buf_free(&cls);
    if (first) return rl__js_fail(c, RL_ERR_INVALID, "pattern has a class that matches nothing");
    return rl__js_put(c, b, ")", 1);
err:
    rl_buf_free(&cls);
    return false;
}

static int rx_hex(rx *x, int nd, uint32_t *v) {
    *v = 0;
    for (int k = 0; k < nd; k++) {
        if (x->i >= x->n) return -1;
        char ch = x->s[x->i++];
        int h = ch >= '0' && ch <= '9'   ? ch - '0'
                : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10
                : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10
                                         : -1;
        if (h < 0) return -1;
        *v = *v * 16 + (uint32_t)h;
    }
    return 0;
}

static bool rx_unsupported(rx *x, const char *what) {
    return rl__js_fail(x->c, RL_ERR_UNSUPPORTED,
                       "pattern at '%s': %s (offset %zu) is not supported", x->ptr, what, x->i);
}

/* One class item or escape; returns the ranges it adds (n up to 4). */
static bool rx_escape(rx *x, cpr *r, int *n, bool *neg_class) {
    char e = x->s[x->i++];
    *neg_class = false;
    uint32_t v;
    switch (e) {
    case 'd':
        r[0] = (cpr){'0', '9'};
        *n = 1;
        return true;
    case 'D':
        r[0] = (cpr){'0', '9'};
        *n = 1;
        *neg_class = true;
        return true;
    case 'w':
        r[0] = (cpr){'0', '9'};
        r[1] = (cpr){'A', 'Z'};
        r[2] = (cpr){'_', '_'};
        r[3] = (cpr){'a', 'z'};
        *n = 4;
        return true;
    case 'W':
        r[0] = (cpr){'0', '9'};
        r[1] = (cpr){'A', 'Z'};
        r[2] = (cpr){'_', '_'};
        r[3] = (cpr){'a', 'z'};
        *n = 4;
        *neg_class = true;
        return true;
    case 's':
        r[0] = (cpr){'\t', '\r'};
        r[1] = (cpr){' ', ' '};
        *n = 2;
        return true;
    case 'S':
        r[0] = (cpr){'\t', '\r'};
        r[1] = (cpr){' ', ' '};
        *n = 2;
        *neg_class = true;
        return true;
    case 'n':
        v = '\n';
        break;
    case 't':
        v = '\t';
        break;
    case 'r':
        v = '\r';
        break;
    case 'f':
        v = '\f';
        break;
    case 'v':
        v = '\v';
        break;
    case 'u':
        if (rx_hex(x, 4, &v) < 0 || (v >= 0xD800 && v <= 0xDFFF))
            return rx_unsupported(x, "\\u escape");
        break;
    case 'x':
        if (rx_hex(x, 2, &v) < 0) return rx_unsupported(x, "\\x escape");
        break;
    default:
        if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z') || (e >= '0' && e <= '9'))
            return rx_unsupported(x, "this escape (backreference, \\b or similar)");
        v = (unsigned char)e;
    }
    r[0] = (cpr){v, v};
    *n = 1;
    return true;
}

static bool rx_cp(rx *x, uint32_t *cp) {
    size_t l = rl_utf8_decode(x->s + x->i, x->n - x->i, cp);
    if (!l) return rx_unsupported(x, "invalid UTF-8");
    x->i += l;
    return true;
}

static bool rx_alt(rx *x, rl_buf *b, bool top);

static bool rx_atom(rx *x, rl_buf *b) {
    rl__jsconv *c = x->c;
    char ch = x->s[x->i];
    cpr r[260];
    int n = 0;
    bool neg = false;
    if (ch == '(') {
        x->i++;
        if (x->i < x->n && x->s[x->i] == '?') {
            if (x->i + 1 < x->n && x->s[x->i + 1] == ':')
                x->i += 2;
            else
                return rx_unsupported(x, "lookaround or named group");
        }
        if (++x->depth > 32) return rx_unsupported(x, "nesting deeper than 32");
        if (!rl__js_put(c, b, "(", 1) || !rx_alt(x, b, false)) return false;
        x->depth--;
        if (x->i >= x->n || x->s[x->i] != ')') return rx_unsupported(x, "unbalanced parenthesis");
        x->i++;
        return rl__js_put(c, b, ")", 1);
    }
    if (ch == '[') {
        x->i++;
        bool cneg = false;
        if (x->i < x->n && x->s[x->i] == '^') {
            cneg = true;
            x->i++;
        }
        bool firstc = true;
        while (1) {
            if (x->i >= x->n) return rx_unsupported(x, "unterminated class");
            if (x->s[x->i] == ']' && !firstc) {
                x->i++;
                break;
            }
            firstc = false;
            cpr one[4];
            int k = 1;
            bool eneg = false;
            if (x->s[x->i] == '\\') {
                x->i++;
                if (x->i >= x->n) return rx_unsupported(x, "dangling backslash");
                if (!rx_escape(x, one, &k, &eneg)) return false;
                if (eneg) return rx_unsupported(x, "negated escape inside a class");
            } else {
                uint32_t cp;
                if (!rx_cp(x, &cp)) return false;
                one[0] = (cpr){cp, cp};
            }
            if (k == 1 && x->i + 1 < x->n && x->s[x->i] == '-' && x->s[x->i + 1] != ']') {
                x->i++;
                uint32_t hi;
                if (x->s[x->i] == '\\') {
                    x->i++;
                    cpr t[4];
                    int tk;
                    if (x->i >= x->n || !rx_escape(x, t, &tk, &eneg) || tk != 1 || eneg)
                        return rx_unsupported(x, "class range end");
                    hi = t[0].lo;
                } else if (!rx_cp(x, &hi))
                    return false;
                if (hi < one[0].lo) return rx_unsupported(x, "reversed class range");
                one[0].hi = hi;
            }
            if (n + k > 256) return rx_unsupported(x, "class with over 256 items");
            for (int q = 0; q < k; q++) r[n++] = one[q];
        }
        return class_expr(c, b, r, n, cneg);
    }
    if (ch == '.') {
        x->i++;
        r[0] = (cpr){'\n', '\n'};
        return class_expr(c, b, r, 1, true);
    }
    if (ch == '\\') {
        x->i++;
        if (x->i >= x->n) return rx_unsupported(x, "dangling backslash");
        if (!rx_escape(x, r, &n, &neg)) return false;
        return class_expr(c, b, r, n, neg);
    }
    if (ch == '^' || ch == '$') return rx_unsupported(x, "anchor not at the start or end");
    if (ch == '*' || ch == '+' || ch == '?' || ch == '{')
        return rx_unsupported(x, "quantifier without operand");
    uint32_t cp;
    if (!rx_cp(x, &cp)) return false;
    return json_char_literal(c, b, cp);
}

static bool rx_seq(rx *x, rl_buf *b, bool top) {
    rl__jsconv *c = x->c;
    bool anchored_start = false, anchored_end = false;
    if (top && x->i < x->n && x->s[x->i] == '^') {
        anchored_start = true;
        x->i++;
    }
    if (top && !anchored_start && !rl__js_put(c, b, "char* ", 6)) return false;
    while (x->i < x->n && x->s[x->i] != '|' && x->s[x->i] != ')') {
        if (top && x->s[x->i] == '$' && (x->i + 1 == x->n || x->s[x->i + 1] == '|')) {
            anchored_end = true;
            x->i++;
            break;
        }
        if (!rl__js_put(c, b, "(", 1) || !rx_atom(x, b) || !rl__js_put(c, b, ")", 1)) return false;
        if (x->i < x->n) {
            char q = x->s[x->i];
            if (q == '*' || q == '+' || q == '?') {
                x->i++;
                if (!rl__js_put(c, b, &q, 1)) return false;
            } else if (q == '{') {
                size_t st = x->i++;
                long m = 0, mx = -2;
                bool okq = false, digits = false;
                while (x->i < x->n && x->s[x->i] >= '0' && x->s[x->i] <= '9' &&
                       m <= RL_GRAMMAR_MAX_REPEAT)
                    m = m * 10 + (x->s[x->i++] - '0'), digits = true;
                if (digits && x->i < x->n && x->s[x->i] == '}')
                    mx = m, okq = true;
                else if (digits && x->i < x->n && x->s[x->i] == ',') {
                    x->i++;
                    if (x->i < x->n && x->s[x->i] == '}')
                        mx = -1, okq = true;
                    else {
                        long v = 0;
                        bool d2 = false;
                        while (x->i < x->n && x->s[x->i] >= '0' && x->s[x->i] <= '9' &&
                               v <= RL_GRAMMAR_MAX_REPEAT)
                            v = v * 10 + (x->s[x->i++] - '0'), d2 = true;
                        if (d2 && x->i < x->n && x->s[x->i] == '}') mx = v, okq = true;
                    }
                }
                if (!okq) {
                    x->i = st;
                    return rx_unsupported(x, "malformed {m,n}");
                }
                x->i++;
                if (m > RL_GRAMMAR_MAX_REPEAT || mx > RL_GRAMMAR_MAX_REPEAT)
                    return rl__js_fail(c, RL_ERR_LIMIT, "pattern at '%s': repetition over %d",
                                       x->ptr, RL_GRAMMAR_MAX_REPEAT);
                if (mx >= 0 && mx < m) return rx_unsupported(x, "{m,n} with n < m");
                if (mx == -1 ? !rl__js_printf(c, b, "{%ld,}", m)
                             : !rl__js_printf(c, b, "{%ld,%ld}", m, mx))
                    return false;
            }
            if (x->i < x->n && (x->s[x->i] == '?' || x->s[x->i] == '+') &&
                (x->s[x->i - 1] == '*' || x->s[x->i - 1] == '+' || x->s[x->i - 1] == '?' ||
                 x->s[x->i - 1] == '}'))
                x->i++; /* lazy / possessive: same language */
        }
        if (!rl__js_put(c, b, " ", 1)) return false;
    }
    if (top && !anchored_end && !rl__js_put(c, b, "char*", 5)) return false;
    if (x->i < x->n && x->s[x->i] == '$') return rx_unsupported(x, "anchor not at the end");
    return true;
}

static bool rx_alt(rx *x, rl_buf *b, bool top) {
    rl__jsconv *c = x->c;
    if (!rx_seq(x, b, top)) return false;
    while (x->i < x->n && x->s[x->i] == '|') {
        x->i++;
        if (!rl__js_put(c, b, " | ", 3) || !rx_seq(x, b, top)) return false;
    }
    return true;
}

bool rl__js_pattern(rl__jsconv *c, rl_buf *b, const char *pat, size_t n, const char *ptr) {
    rx x = {.c = c, .s = pat, .n = n, .ptr = ptr};
    if (!rl__js_put(c, b, "\"\\\"\" (", 6) || !rx_alt(&x, b, true)) return false;
    if (x.i < x.n) return rx_unsupported(&x, "unbalanced ')'");
    return rl__js_put(c, b, ") \"\\\"\"", 6);
}
