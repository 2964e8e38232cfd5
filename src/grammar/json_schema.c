/* JSON Schema (jansson) -> grammar text for rl_grammar_compile.
 *
 * Each subschema becomes one rule `rN ::= ...`; shared building blocks
 * (ws, string, number, any value ...) are emitted once at the top.  The
 * supported subset and the choices made (property order, what
 * additionalProperties does, whitespace) are in docs/STRUCTURED.md.
 *
 * Soundness rule: every string the grammar admits validates against the
 * schema.  A keyword that would constrain the value in a way this
 * converter cannot express is rejected with RL_ERR_UNSUPPORTED naming the
 * keyword and its JSON pointer, rather than silently ignored; annotations
 * (title, description, examples, ...) and unknown extension keywords are
 * ignored.  Where the grammar is narrower than the schema (fixed property
 * order, no extra properties, bounded number lengths) outputs still
 * validate.
 *
 * Bounds: nesting RL_SCHEMA_MAX_DEPTH, RL_SCHEMA_MAX_NODES subschemas,
 * grammar text RL_GRAMMAR_MAX_TEXT, repetition counts RL_GRAMMAR_MAX_REPEAT,
 * pattern length 4096 and nesting 32. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "grammar/grammar-impl.h"

typedef struct sbuf {
    char *p;
    size_t n, cap;
} sbuf;

typedef struct ref_memo {
    const json_t *target;
    int id;
} ref_memo;

typedef struct conv {
    const json_t *root;
    sbuf out;
    int n_rules, n_nodes;
    rl_err *err;
    bool failed;
    ref_memo refs[256];
    int n_refs;
} conv;

static bool fail(conv *c, rl_status code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static bool fail(conv *c, rl_status code, const char *fmt, ...) {
    if (!c->failed) {
        char buf[400];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(buf, sizeof buf, fmt, ap);
        va_end(ap);
        rl_err_set(c->err, code, "json schema: %s", buf);
    }
    c->failed = true;
    return false;
}

static bool sb_put(conv *c, sbuf *b, const char *s, size_t n) {
    if (c->failed) return false;
    if (b->n + n + 1 > RL_GRAMMAR_MAX_TEXT)
        return fail(c, RL_ERR_LIMIT, "generated grammar exceeds %d bytes", RL_GRAMMAR_MAX_TEXT);
    if (b->n + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap : 1024;
        while (nc < b->n + n + 1) nc *= 2;
        char *np = rl_realloc(b->p, nc);
        if (!np) return fail(c, RL_ERR_NOMEM, "out of memory");
        b->p = np;
        b->cap = nc;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
    return true;
}

static bool sb_printf(conv *c, sbuf *b, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static bool sb_printf(conv *c, sbuf *b, const char *fmt, ...) {
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof tmp) return fail(c, RL_ERR_LIMIT, "internal: formatted piece too long");
    return sb_put(c, b, tmp, (size_t)n);
}

/* Appends s[0..n) as a grammar string literal (quotes included). */
static bool sb_literal(conv *c, sbuf *b, const char *s, size_t n) {
    if (!sb_put(c, b, "\"", 1)) return false;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        char e[8];
        if (ch == '"' || ch == '\\') snprintf(e, sizeof e, "\\%c", ch);
        else if (ch < 0x20 || ch == 0x7f) snprintf(e, sizeof e, "\\x%02X", ch);
        else e[0] = (char)ch, e[1] = 0;
        if (!sb_put(c, b, e, strlen(e))) return false;
    }
    return sb_put(c, b, "\"", 1);
}

static const char COMMON[] =
    "ws ::= [ \\t\\n]{0,20}\n"
    "hex ::= [0-9a-fA-F]\n"
    "char ::= [^\"\\\\\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" ([0-9a-cA-CeEfF] hex hex hex | [dD] [0-7] hex hex))\n"
    "string ::= \"\\\"\" char* \"\\\"\"\n"
    "integer ::= \"-\"? (\"0\" | [1-9] [0-9]{0,15})\n"
    "number ::= integer (\".\" [0-9]{1,16})? ([eE] [-+]? [0-9]{1,3})?\n"
    "boolean ::= \"true\" | \"false\"\n"
    "null ::= \"null\"\n"
    "value ::= object | array | string | number | boolean | null\n"
    "member ::= string ws \":\" ws value ws\n"
    "object ::= \"{\" ws (member (\",\" ws member)*)? \"}\"\n"
    "array ::= \"[\" ws (value ws (\",\" ws value ws)*)? \"]\"\n"
    /* Feb 29 is left out: leap years are not worth a grammar */
    "day28 ::= \"0\" [1-9] | \"1\" [0-9] | \"2\" [0-8]\n"
    "date ::= [0-9]{4} \"-\" ((\"0\" [13578] | \"1\" [02]) \"-\" (day28 | \"29\" | \"3\" [01]) | "
    "(\"0\" [469] | \"11\") \"-\" (day28 | \"29\" | \"30\") | \"02-\" day28)\n"
    "time ::= ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9] \":\" [0-5] [0-9] (\".\" [0-9]{1,6})? "
    "(\"Z\" | [+-] ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9])\n"
    "uuid ::= hex{8} \"-\" hex{4} \"-\" hex{4} \"-\" hex{4} \"-\" hex{12}\n"
    "emailpart ::= [a-zA-Z0-9] [a-zA-Z0-9._+-]{0,30}\n"
    "email ::= emailpart \"@\" [a-zA-Z0-9] [a-zA-Z0-9-]{0,30} (\".\" [a-zA-Z]{2,10}){1,3}\n";

/* Emits `rN ::= body` and returns N. */
static int emit_rule(conv *c, int id, const sbuf *body) {
    if (!sb_printf(c, &c->out, "r%d ::= ", id) || !sb_put(c, &c->out, body->p ? body->p : "\"\"", body->p ? body->n : 2) ||
        !sb_put(c, &c->out, "\n", 1))
        return -1;
    return id;
}

static int new_id(conv *c) {
    if (c->n_rules >= RL_GRAMMAR_MAX_RULES / 4) {
        fail(c, RL_ERR_LIMIT, "schema needs more than %d rules", RL_GRAMMAR_MAX_RULES / 4);
        return -1;
    }
    return c->n_rules++;
}

static int gen(conv *c, const json_t *s, int depth, const char *ptr);

/* ---- keyword policy ---- */

static const char *const UNSUPPORTED[] = {
    "multipleOf", "patternProperties", "propertyNames", "minProperties", "maxProperties",
    "uniqueItems", "contains", "minContains", "maxContains", "prefixItems", "additionalItems",
    "if", "then", "else", "not", "dependentRequired", "dependentSchemas", "dependencies",
    "unevaluatedProperties", "unevaluatedItems", "$dynamicRef", "$recursiveRef", NULL};

static bool check_keywords(conv *c, const json_t *s, const char *ptr) {
    for (int i = 0; UNSUPPORTED[i]; i++)
        if (json_object_get(s, UNSUPPORTED[i]))
            return fail(c, RL_ERR_UNSUPPORTED, "keyword '%s' at '%s' is not supported", UNSUPPORTED[i], ptr);
    return true;
}

static bool get_count(conv *c, const json_t *s, const char *key, long dflt, long *out, const char *ptr) {
    const json_t *v = json_object_get(s, key);
    if (!v) {
        *out = dflt;
        return true;
    }
    double d = json_is_integer(v) ? (double)json_integer_value(v) : json_is_real(v) ? json_real_value(v) : -1;
    if (d < 0 || d != floor(d))
        return fail(c, RL_ERR_INVALID, "'%s' at '%s' must be a non-negative integer", key, ptr);
    if (d > RL_GRAMMAR_MAX_REPEAT)
        return fail(c, RL_ERR_LIMIT, "'%s' at '%s' is %.0f, limit %d", key, ptr, d, RL_GRAMMAR_MAX_REPEAT);
    *out = (long)d;
    return true;
}

/* ---- integers with bounds ---- */

static bool all_char(const char *s, char ch) {
    for (; *s; s++)
        if (*s != ch) return false;
    return true;
}

/* Digit strings a <= b of equal length n (no leading zeros unless n == 1). */
static bool same_len(conv *c, sbuf *b, const char *A, const char *B) {
    size_t n = strlen(A);
    if (n == 1) return sb_printf(c, b, "[%c-%c]", A[0], B[0]);
    if (A[0] == B[0]) return sb_printf(c, b, "\"%c\" ", A[0]) && same_len(c, b, A + 1, B + 1);
    char nines[24], zeros[24];
    memset(nines, '9', n - 1);
    nines[n - 1] = 0;
    memset(zeros, '0', n - 1);
    zeros[n - 1] = 0;
    bool first = true;
    char start = A[0], end = B[0];
    if (!sb_put(c, b, "(", 1)) return false;
    if (!all_char(A + 1, '0')) {
        if (!sb_printf(c, b, "\"%c\" ", A[0]) || !same_len(c, b, A + 1, nines)) return false;
        first = false;
        start++;
    }
    bool last = !all_char(B + 1, '9');
    if (last) end--;
    if (start <= end) {
        if (!first && !sb_put(c, b, " | ", 3)) return false;
        if (!sb_printf(c, b, "[%c-%c] [0-9]{%zu}", start, end, n - 1)) return false;
        first = false;
    }
    if (last) {
        if (!first && !sb_put(c, b, " | ", 3)) return false;
        if (!sb_printf(c, b, "\"%c\" ", B[0]) || !same_len(c, b, zeros, B + 1)) return false;
    }
    return sb_put(c, b, ")", 1);
}

#define INT_LIM 1000000000000000LL /* 10^15: bounds must be within +-INT_LIM */

/* 0 <= a <= b (b == -1: unbounded above, up to 16 digits). */
static bool nonneg_range(conv *c, sbuf *b, long long a, long long hi, bool *first) {
    char A[24], B[24];
    long long p10 = 1;
    for (int n = 1; n <= 16; n++, p10 *= 10) {
        long long lo_n = n == 1 ? 0 : p10, hi_n = p10 * 10 - 1;
        if (lo_n < a) lo_n = a;
        if (hi >= 0 && hi_n > hi) hi_n = hi;
        if (lo_n > hi_n) continue;
        if (!*first && !sb_put(c, b, " | ", 3)) return false;
        *first = false;
        snprintf(A, sizeof A, "%lld", lo_n);
        snprintf(B, sizeof B, "%lld", hi_n);
        if (!same_len(c, b, A, B)) return false;
    }
    return true;
}

static bool bound(conv *c, const json_t *s, const char *key, bool upper, bool excl, bool *has, long long *v,
                  const char *ptr) {
    const json_t *j = json_object_get(s, key);
    if (!j) return true;
    if (!json_is_number(j)) return fail(c, RL_ERR_INVALID, "'%s' at '%s' must be a number", key, ptr);
    double d = json_number_value(j);
    if (!(fabs(d) < (double)INT_LIM))
        return fail(c, RL_ERR_UNSUPPORTED, "'%s' at '%s': bounds beyond 1e15 are not supported", key, ptr);
    double r = upper ? floor(d) : ceil(d);
    if (excl && r == d) r += upper ? -1 : 1;
    long long x = (long long)r;
    if (!*has || (upper ? x < *v : x > *v)) *v = x;
    *has = true;
    return true;
}

static bool integer_body(conv *c, const json_t *s, sbuf *b, const char *ptr) {
    bool has_lo = false, has_hi = false;
    long long lo = 0, hi = 0;
    if (!bound(c, s, "minimum", false, false, &has_lo, &lo, ptr) ||
        !bound(c, s, "exclusiveMinimum", false, true, &has_lo, &lo, ptr) ||
        !bound(c, s, "maximum", true, false, &has_hi, &hi, ptr) ||
        !bound(c, s, "exclusiveMaximum", true, true, &has_hi, &hi, ptr))
        return false;
    if (!has_lo && !has_hi) return sb_put(c, b, "integer", 7);
    if (has_lo && has_hi && lo > hi) return fail(c, RL_ERR_INVALID, "empty integer range at '%s'", ptr);
    bool first = true;
    if (!sb_put(c, b, "(", 1)) return false;
    /* non-negative part */
    if (!has_hi || hi >= 0)
        if (!nonneg_range(c, b, has_lo && lo > 0 ? lo : 0, has_hi ? hi : -1, &first)) return false;
    /* negative part: "-" then magnitudes */
    if (!has_lo || lo < 0) {
        long long mlo = has_hi && hi < 0 ? -hi : 1, mhi = has_lo ? -lo : -1;
        if (!first && !sb_put(c, b, " | ", 3)) return false;
        bool f2 = true;
        if (!sb_put(c, b, "\"-\" (", 5) || !nonneg_range(c, b, mlo, mhi, &f2) || !sb_put(c, b, ")", 1))
            return false;
    }
    return sb_put(c, b, ")", 1);
}

static bool number_body(conv *c, const json_t *s, sbuf *b, const char *ptr) {
    const json_t *mn = json_object_get(s, "minimum");
    if (json_object_get(s, "maximum") || json_object_get(s, "exclusiveMaximum") ||
        json_object_get(s, "exclusiveMinimum") || (mn && (!json_is_number(mn) || json_number_value(mn) != 0)))
        return fail(c, RL_ERR_UNSUPPORTED,
                    "bounds on type 'number' at '%s' (only \"minimum\": 0 is supported; use 'integer' for ranges)", ptr);
    if (mn) { /* minimum 0: no sign */
        static const char unsigned_num[] =
            "(\"0\" | [1-9] [0-9]{0,15}) (\".\" [0-9]{1,16})? ([eE] [-+]? [0-9]{1,3})?";
        return sb_put(c, b, unsigned_num, sizeof unsigned_num - 1);
    }
    return sb_put(c, b, "number", 6);
}

/* ---- strings ---- */

typedef struct rx {
    conv *c;
    const char *s;
    size_t n, i;
    int depth;
    const char *ptr;
} rx;

/* Appends the JSON-string encoding of code point cp as a grammar literal. */
static bool json_char_literal(conv *c, sbuf *b, uint32_t cp) {
    char tmp[16];
    if (cp == '"') return sb_put(c, b, "\"\\\\\\\"\"", 6);      /* "\\\"" */
    if (cp == '\\') return sb_put(c, b, "\"\\\\\\\\\"", 6);     /* "\\\\" */
    if (cp == '\n') return sb_put(c, b, "\"\\\\n\"", 5);
    if (cp == '\t') return sb_put(c, b, "\"\\\\t\"", 5);
    if (cp == '\r') return sb_put(c, b, "\"\\\\r\"", 5);
    if (cp < 0x20) {
        snprintf(tmp, sizeof tmp, "\"\\\\u%04X\"", cp);
        return sb_put(c, b, tmp, strlen(tmp));
    }
    snprintf(tmp, sizeof tmp, "\"\\U%08X\"", cp);
    return sb_put(c, b, tmp, strlen(tmp));
}

typedef struct cpr {
    uint32_t lo, hi;
} cpr;

/* A set of code points (ranges, possibly negated) as a grammar expression
 * over JSON string content. */
static bool class_expr(conv *c, sbuf *b, cpr *r, int n, bool neg) {
    /* normalise: sort + merge, then complement */
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && r[j - 1].lo > r[j].lo; j--) {
            cpr t = r[j];
            r[j] = r[j - 1];
            r[j - 1] = t;
        }
    cpr m[260];
    int k = 0;
    for (int i = 0; i < n; i++) {
        if (k && r[i].lo <= m[k - 1].hi + 1) {
            if (r[i].hi > m[k - 1].hi) m[k - 1].hi = r[i].hi;
        } else m[k++] = r[i];
    }
    cpr f[264];
    int nf = 0;
    if (neg) {
        uint32_t next = 0;
        for (int i = 0; i < k; i++) {
            if (m[i].lo > next) f[nf++] = (cpr){next, m[i].lo - 1};
            next = m[i].hi + 1;
        }
        if (next <= 0x10FFFF) f[nf++] = (cpr){next, 0x10FFFF};
    } else {
        memcpy(f, m, sizeof *m * (size_t)k);
        nf = k;
    }
    /* plain part: everything but controls, quote, backslash, surrogates */
    bool first = true, any_plain = false;
    sbuf cls = {0};
    if (!sb_put(c, &cls, "[", 1)) return false;
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
            if (!sb_printf(c, &cls, "\\U%08X-\\U%08X", segs[t][0], segs[t][1])) {
                rl_free(cls.p);
                return false;
            }
        }
    }
    if (!sb_put(c, &cls, "]", 1)) return false;
    if (!sb_put(c, b, "(", 1)) goto err;
    if (any_plain) {
        if (!sb_put(c, b, cls.p, cls.n)) goto err;
        first = false;
    }
    for (int i = 0; i < nf; i++)
        for (uint32_t cp = f[i].lo; cp <= f[i].hi && cp < 0x20; cp++) {
            if (!first && !sb_put(c, b, " | ", 3)) goto err;
            if (!json_char_literal(c, b, cp)) goto err;
            first = false;
        }
    for (int i = 0; i < nf; i++) {
        uint32_t sp[2] = {'"', '\\'};
        for (int q = 0; q < 2; q++)
            if (f[i].lo <= sp[q] && sp[q] <= f[i].hi) {
                if (!first && !sb_put(c, b, " | ", 3)) goto err;
                if (!json_char_literal(c, b, sp[q])) goto err;
                first = false;
            }
    }
    rl_free(cls.p);
    if (first) return fail(c, RL_ERR_INVALID, "pattern has a class that matches nothing");
    return sb_put(c, b, ")", 1);
err:
    rl_free(cls.p);
    return false;
}

static int rx_hex(rx *x, int nd, uint32_t *v) {
    *v = 0;
    for (int k = 0; k < nd; k++) {
        if (x->i >= x->n) return -1;
        char ch = x->s[x->i++];
        int h = ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10 : -1;
        if (h < 0) return -1;
        *v = *v * 16 + (uint32_t)h;
    }
    return 0;
}

static bool rx_unsupported(rx *x, const char *what) {
    return fail(x->c, RL_ERR_UNSUPPORTED, "pattern at '%s': %s (offset %zu) is not supported", x->ptr, what, x->i);
}

/* One class item or escape; returns the ranges it adds (n up to 4). */
static bool rx_escape(rx *x, cpr *r, int *n, bool *neg_class) {
    char e = x->s[x->i++];
    *neg_class = false;
    uint32_t v;
    switch (e) {
    case 'd': r[0] = (cpr){'0', '9'}; *n = 1; return true;
    case 'D': r[0] = (cpr){'0', '9'}; *n = 1; *neg_class = true; return true;
    case 'w': r[0] = (cpr){'0', '9'}; r[1] = (cpr){'A', 'Z'}; r[2] = (cpr){'_', '_'}; r[3] = (cpr){'a', 'z'}; *n = 4; return true;
    case 'W': r[0] = (cpr){'0', '9'}; r[1] = (cpr){'A', 'Z'}; r[2] = (cpr){'_', '_'}; r[3] = (cpr){'a', 'z'}; *n = 4; *neg_class = true; return true;
    case 's': r[0] = (cpr){'\t', '\r'}; r[1] = (cpr){' ', ' '}; *n = 2; return true;
    case 'S': r[0] = (cpr){'\t', '\r'}; r[1] = (cpr){' ', ' '}; *n = 2; *neg_class = true; return true;
    case 'n': v = '\n'; break;
    case 't': v = '\t'; break;
    case 'r': v = '\r'; break;
    case 'f': v = '\f'; break;
    case 'v': v = '\v'; break;
    case 'u':
        if (rx_hex(x, 4, &v) < 0 || (v >= 0xD800 && v <= 0xDFFF)) return rx_unsupported(x, "\\u escape");
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
    size_t l = rl_utf8_valid_len((const uint8_t *)x->s + x->i, x->n - x->i);
    if (!l) return rx_unsupported(x, "invalid UTF-8");
    const uint8_t *u = (const uint8_t *)x->s + x->i;
    if (l == 1) *cp = u[0];
    else if (l == 2) *cp = ((u[0] & 31u) << 6) | (u[1] & 63u);
    else if (l == 3) *cp = ((u[0] & 15u) << 12) | ((u[1] & 63u) << 6) | (u[2] & 63u);
    else *cp = ((u[0] & 7u) << 18) | ((u[1] & 63u) << 12) | ((u[2] & 63u) << 6) | (u[3] & 63u);
    x->i += l;
    return true;
}

static bool rx_alt(rx *x, sbuf *b, bool top);

static bool rx_atom(rx *x, sbuf *b) {
    conv *c = x->c;
    char ch = x->s[x->i];
    cpr r[260];
    int n = 0;
    bool neg = false;
    if (ch == '(') {
        x->i++;
        if (x->i < x->n && x->s[x->i] == '?') {
            if (x->i + 1 < x->n && x->s[x->i + 1] == ':') x->i += 2;
            else return rx_unsupported(x, "lookaround or named group");
        }
        if (++x->depth > 32) return rx_unsupported(x, "nesting deeper than 32");
        if (!sb_put(c, b, "(", 1) || !rx_alt(x, b, false)) return false;
        x->depth--;
        if (x->i >= x->n || x->s[x->i] != ')') return rx_unsupported(x, "unbalanced parenthesis");
        x->i++;
        return sb_put(c, b, ")", 1);
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
                } else if (!rx_cp(x, &hi)) return false;
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
    if (ch == '*' || ch == '+' || ch == '?' || ch == '{') return rx_unsupported(x, "quantifier without operand");
    uint32_t cp;
    if (!rx_cp(x, &cp)) return false;
    return json_char_literal(c, b, cp);
}

static bool rx_seq(rx *x, sbuf *b, bool top) {
    conv *c = x->c;
    bool anchored_start = false, anchored_end = false;
    if (top && x->i < x->n && x->s[x->i] == '^') {
        anchored_start = true;
        x->i++;
    }
    if (top && !anchored_start && !sb_put(c, b, "char* ", 6)) return false;
    while (x->i < x->n && x->s[x->i] != '|' && x->s[x->i] != ')') {
        if (top && x->s[x->i] == '$' && (x->i + 1 == x->n || x->s[x->i + 1] == '|')) {
            anchored_end = true;
            x->i++;
            break;
        }
        if (!sb_put(c, b, "(", 1) || !rx_atom(x, b) || !sb_put(c, b, ")", 1)) return false;
        if (x->i < x->n) {
            char q = x->s[x->i];
            if (q == '*' || q == '+' || q == '?') {
                x->i++;
                if (!sb_put(c, b, &q, 1)) return false;
            } else if (q == '{') {
                size_t st = x->i++;
                long m = 0, mx = -2;
                bool okq = false, digits = false;
                while (x->i < x->n && x->s[x->i] >= '0' && x->s[x->i] <= '9' && m <= RL_GRAMMAR_MAX_REPEAT)
                    m = m * 10 + (x->s[x->i++] - '0'), digits = true;
                if (digits && x->i < x->n && x->s[x->i] == '}') mx = m, okq = true;
                else if (digits && x->i < x->n && x->s[x->i] == ',') {
                    x->i++;
                    if (x->i < x->n && x->s[x->i] == '}') mx = -1, okq = true;
                    else {
                        long v = 0;
                        bool d2 = false;
                        while (x->i < x->n && x->s[x->i] >= '0' && x->s[x->i] <= '9' && v <= RL_GRAMMAR_MAX_REPEAT)
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
                    return fail(c, RL_ERR_LIMIT, "pattern at '%s': repetition over %d", x->ptr, RL_GRAMMAR_MAX_REPEAT);
                if (mx >= 0 && mx < m) return rx_unsupported(x, "{m,n} with n < m");
                if (mx == -1 ? !sb_printf(c, b, "{%ld,}", m) : !sb_printf(c, b, "{%ld,%ld}", m, mx)) return false;
            }
            if (x->i < x->n && (x->s[x->i] == '?' || x->s[x->i] == '+') &&
                (x->s[x->i - 1] == '*' || x->s[x->i - 1] == '+' || x->s[x->i - 1] == '?' || x->s[x->i - 1] == '}'))
                x->i++; /* lazy / possessive: same language */
        }
        if (!sb_put(c, b, " ", 1)) return false;
    }
    if (top && !anchored_end && !sb_put(c, b, "char*", 5)) return false;
    if (x->i < x->n && x->s[x->i] == '$') return rx_unsupported(x, "anchor not at the end");
    return true;
}

static bool rx_alt(rx *x, sbuf *b, bool top) {
    conv *c = x->c;
    if (!rx_seq(x, b, top)) return false;
    while (x->i < x->n && x->s[x->i] == '|') {
        x->i++;
        if (!sb_put(c, b, " | ", 3) || !rx_seq(x, b, top)) return false;
    }
    return true;
}

static bool string_body(conv *c, const json_t *s, sbuf *b, const char *ptr) {
    const json_t *pat = json_object_get(s, "pattern");
    const json_t *fmt = json_object_get(s, "format");
    long mn, mx;
    if (!get_count(c, s, "minLength", 0, &mn, ptr) || !get_count(c, s, "maxLength", -1, &mx, ptr)) return false;
    bool has_len = json_object_get(s, "minLength") || json_object_get(s, "maxLength");
    if (mx >= 0 && mx < mn) return fail(c, RL_ERR_INVALID, "maxLength < minLength at '%s'", ptr);
    if (pat) {
        if (!json_is_string(pat)) return fail(c, RL_ERR_INVALID, "'pattern' at '%s' must be a string", ptr);
        if (has_len) return fail(c, RL_ERR_UNSUPPORTED, "pattern together with minLength/maxLength at '%s'", ptr);
        size_t n = json_string_length(pat);
        if (n > 4096) return fail(c, RL_ERR_LIMIT, "pattern at '%s' longer than 4096 bytes", ptr);
        rx x = {.c = c, .s = json_string_value(pat), .n = n, .ptr = ptr};
        if (!sb_put(c, b, "\"\\\"\" (", 6) || !rx_alt(&x, b, true)) return false;
        if (x.i < x.n) return rx_unsupported(&x, "unbalanced ')'");
        return sb_put(c, b, ") \"\\\"\"", 6);
    }
    if (fmt && json_is_string(fmt) && !has_len) {
        const char *f = json_string_value(fmt);
        const char *rule = !strcmp(f, "date") ? "date" : !strcmp(f, "time") ? "time"
                         : !strcmp(f, "uuid") ? "uuid" : !strcmp(f, "email") ? "email"
                         : !strcmp(f, "date-time") ? "date \"T\" time" : NULL;
        if (rule) return sb_printf(c, b, "\"\\\"\" %s \"\\\"\"", rule);
    }
    if (!has_len) return sb_put(c, b, "string", 6);
    if (mx < 0) return sb_printf(c, b, "\"\\\"\" char{%ld,} \"\\\"\"", mn);
    return sb_printf(c, b, "\"\\\"\" char{%ld,%ld} \"\\\"\"", mn, mx);
}

/* ---- objects and arrays ---- */

static bool ptr_join(conv *c, char *out, size_t cap, const char *base, const char *key) {
    int n = snprintf(out, cap, "%s/%s", base, key);
    if (n < 0 || (size_t)n >= cap) {
        /* keep messages bounded: truncate with an ellipsis */
        if (cap > 4) strcpy(out + cap - 4, "...");
    }
    (void)c;
    return true;
}

static bool object_body(conv *c, const json_t *s, sbuf *b, int depth, const char *ptr) {
    const json_t *props = json_object_get(s, "properties");
    const json_t *req = json_object_get(s, "required");
    const json_t *addl = json_object_get(s, "additionalProperties");
    if (props && !json_is_object(props)) return fail(c, RL_ERR_INVALID, "'properties' at '%s' must be an object", ptr);
    if (req && !json_is_array(req)) return fail(c, RL_ERR_INVALID, "'required' at '%s' must be an array", ptr);
    if (addl && !json_is_boolean(addl) && !json_is_object(addl))
        return fail(c, RL_ERR_INVALID, "'additionalProperties' at '%s' must be a boolean or a schema", ptr);
    size_t np = props ? json_object_size(props) : 0, nr = req ? json_array_size(req) : 0;
    if (np + nr > 1024) return fail(c, RL_ERR_LIMIT, "more than 1024 properties at '%s'", ptr);
    if (np == 0 && nr == 0) {
        if (json_is_false(addl)) return sb_put(c, b, "\"{\" ws \"}\"", 10);
        if (!addl || json_is_true(addl)) return sb_put(c, b, "object", 6);
        char sub[512];
        ptr_join(c, sub, sizeof sub, ptr, "additionalProperties");
        int v = gen(c, addl, depth + 1, sub);
        if (v < 0) return false;
        return sb_printf(c, b, "\"{\" ws (string ws \":\" ws r%d ws (\",\" ws string ws \":\" ws r%d ws)*)? \"}\"", v, v);
    }
    /* collect keys: properties in order, then required names not listed */
    typedef struct { const char *key; const json_t *schema; bool req; int kv; } prop;
    prop *P = rl_calloc(np + nr + 1, sizeof *P);
    if (!P) return fail(c, RL_ERR_NOMEM, "out of memory");
    size_t n = 0;
    const char *key;
    const json_t *val;
    json_object_foreach((json_t *)props, key, val) P[n++] = (prop){key, val, false, -1};
    for (size_t i = 0; i < nr; i++) {
        const json_t *r = json_array_get(req, i);
        if (!json_is_string(r)) {
            rl_free(P);
            return fail(c, RL_ERR_INVALID, "'required' at '%s' must hold strings", ptr);
        }
        size_t k = 0;
        while (k < n && strcmp(P[k].key, json_string_value(r))) k++;
        if (k == n) P[n++] = (prop){json_string_value(r), NULL, true, -1};
        P[k].req = true;
    }
    bool ok = true;
    for (size_t i = 0; i < n && ok; i++) {
        char sub[512], esc[300];
        /* JSON pointer escaping is cosmetic here: keys shown raw, truncated */
        snprintf(esc, sizeof esc, "properties/%.200s", P[i].key);
        ptr_join(c, sub, sizeof sub, ptr, esc);
        int v = P[i].schema ? gen(c, P[i].schema, depth + 1, sub) : 0;
        if (v < 0 || (P[i].schema == NULL && (v = new_id(c)) < 0)) { ok = false; break; }
        if (!P[i].schema) {
            sbuf any = {0};
            ok = sb_put(c, &any, "value", 5) && emit_rule(c, v, &any) >= 0;
            rl_free(any.p);
            if (!ok) break;
        }
        int kv = new_id(c);
        sbuf body = {0};
        json_t *ks = json_string(P[i].key);
        char *kj = ks ? json_dumps(ks, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;
        json_decref(ks);
        ok = kv >= 0 && kj && sb_literal(c, &body, kj, strlen(kj)) &&
             sb_printf(c, &body, " ws \":\" ws r%d ws", v) && emit_rule(c, kv, &body) >= 0;
        free(kj);
        rl_free(body.p);
        P[i].kv = kv;
    }
    /* T_i: after something was emitted; F_i: nothing emitted yet */
    int T = -1, F = -1; /* rule ids for i+1; -1 = empty */
    for (size_t ii = n; ok && ii-- > 0;) {
        int t = new_id(c), f = new_id(c);
        if (t < 0 || f < 0) { ok = false; break; }
        sbuf bt = {0}, bf = {0};
        char tail[32] = "";
        if (T >= 0) snprintf(tail, sizeof tail, " r%d", T);
        if (P[ii].req) ok = sb_printf(c, &bt, "\",\" ws r%d%s", P[ii].kv, tail);
        else ok = sb_printf(c, &bt, "(\",\" ws r%d)?%s", P[ii].kv, tail);
        if (ok) ok = sb_printf(c, &bf, "r%d%s", P[ii].kv, tail);
        if (ok && !P[ii].req) ok = F >= 0 ? sb_printf(c, &bf, " | r%d", F) : sb_put(c, &bf, " | \"\"", 5);
        ok = ok && emit_rule(c, t, &bt) >= 0 && emit_rule(c, f, &bf) >= 0;
        rl_free(bt.p);
        rl_free(bf.p);
        T = t;
        F = f;
    }
    rl_free(P);
    return ok && sb_printf(c, b, "\"{\" ws r%d \"}\"", F);
}

static bool array_body(conv *c, const json_t *s, sbuf *b, int depth, const char *ptr) {
    const json_t *items = json_object_get(s, "items");
    long mn, mx;
    if (!get_count(c, s, "minItems", 0, &mn, ptr) || !get_count(c, s, "maxItems", -1, &mx, ptr)) return false;
    if (mx >= 0 && mx < mn) return fail(c, RL_ERR_INVALID, "maxItems < minItems at '%s'", ptr);
    if (items && json_is_array(items))
        return fail(c, RL_ERR_UNSUPPORTED, "tuple 'items' (an array) at '%s' is not supported", ptr);
    int v = -1;
    if (items) {
        char sub[512];
        ptr_join(c, sub, sizeof sub, ptr, "items");
        v = gen(c, items, depth + 1, sub);
        if (v < 0) return false;
    }
    char item[32];
    if (v >= 0) snprintf(item, sizeof item, "r%d ws", v);
    else snprintf(item, sizeof item, "value ws");
    if (mx == 0) return sb_put(c, b, "\"[\" ws \"]\"", 10);
    if (!sb_put(c, b, "\"[\" ws (", 8) || !sb_printf(c, b, "%s (\",\" ws %s)", item, item)) return false;
    long lo = mn > 0 ? mn - 1 : 0;
    if (mx < 0 ? !sb_printf(c, b, "{%ld,}", lo) : !sb_printf(c, b, "{%ld,%ld}", lo, mx - 1)) return false;
    return sb_printf(c, b, ")%s \"]\"", mn == 0 ? "?" : "");
}

/* ---- dispatch ---- */

static bool literal_value(conv *c, sbuf *b, const json_t *v) {
    char *d = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
    if (!d) return fail(c, RL_ERR_NOMEM, "out of memory");
    bool ok = sb_literal(c, b, d, strlen(d));
    free(d);
    return ok;
}

static bool typed_body(conv *c, const json_t *s, const char *type, sbuf *b, int depth, const char *ptr) {
    if (!strcmp(type, "string")) return string_body(c, s, b, ptr);
    if (!strcmp(type, "integer")) return integer_body(c, s, b, ptr);
    if (!strcmp(type, "number")) return number_body(c, s, b, ptr);
    if (!strcmp(type, "boolean")) return sb_put(c, b, "boolean", 7);
    if (!strcmp(type, "null")) return sb_put(c, b, "null", 4);
    if (!strcmp(type, "object")) return object_body(c, s, b, depth, ptr);
    if (!strcmp(type, "array")) return array_body(c, s, b, depth, ptr);
    if (!strcmp(type, "json_object")) return sb_put(c, b, "object", 6);
    return fail(c, RL_ERR_UNSUPPORTED, "unknown type '%.60s' at '%s'", type, ptr);
}

static const char *infer_type(const json_t *s) {
    if (json_object_get(s, "properties") || json_object_get(s, "required") ||
        json_object_get(s, "additionalProperties"))
        return "object";
    if (json_object_get(s, "items") || json_object_get(s, "minItems") || json_object_get(s, "maxItems"))
        return "array";
    if (json_object_get(s, "pattern") || json_object_get(s, "minLength") || json_object_get(s, "maxLength") ||
        json_object_get(s, "format"))
        return "string";
    if (json_object_get(s, "minimum") || json_object_get(s, "maximum") ||
        json_object_get(s, "exclusiveMinimum") || json_object_get(s, "exclusiveMaximum"))
        return "number";
    return NULL;
}

static const json_t *resolve_ref(conv *c, const char *ref, const char *ptr) {
    if (ref[0] != '#') {
        fail(c, RL_ERR_UNSUPPORTED, "$ref '%.100s' at '%s': only local references ('#/...') are supported", ref, ptr);
        return NULL;
    }
    const json_t *cur = c->root;
    const char *p = ref + 1;
    while (*p == '/') {
        p++;
        char tok[256];
        size_t n = 0;
        while (*p && *p != '/') {
            char ch = *p++;
            if (ch == '~' && (*p == '0' || *p == '1')) ch = *p++ == '0' ? '~' : '/';
            if (n + 1 >= sizeof tok) break;
            tok[n++] = ch;
        }
        tok[n] = 0;
        if (json_is_object(cur)) cur = json_object_get(cur, tok);
        else if (json_is_array(cur)) {
            char *end;
            long i = strtol(tok, &end, 10);
            cur = *end || i < 0 ? NULL : json_array_get(cur, (size_t)i);
        } else cur = NULL;
        if (!cur) break;
    }
    if (!cur || *p) {
        fail(c, RL_ERR_FORMAT, "$ref '%.100s' at '%s' does not resolve", ref, ptr);
        return NULL;
    }
    return cur;
}

static int gen(conv *c, const json_t *s, int depth, const char *ptr) {
    if (c->failed) return -1;
    if (depth > RL_SCHEMA_MAX_DEPTH) {
        fail(c, RL_ERR_LIMIT, "schema nested deeper than %d at '%s'", RL_SCHEMA_MAX_DEPTH, ptr);
        return -1;
    }
    if (++c->n_nodes > RL_SCHEMA_MAX_NODES) {
        fail(c, RL_ERR_LIMIT, "schema has more than %d subschemas", RL_SCHEMA_MAX_NODES);
        return -1;
    }
    if (json_is_false(s)) {
        fail(c, RL_ERR_UNSUPPORTED, "schema 'false' at '%s' matches nothing", ptr);
        return -1;
    }
    int id;
    sbuf b = {0};
    bool ok = true;
    if (json_is_true(s) || (json_is_object(s) && json_object_size(s) == 0)) {
        id = new_id(c);
        ok = id >= 0 && sb_put(c, &b, "value", 5);
        goto done;
    }
    if (!json_is_object(s)) {
        fail(c, RL_ERR_INVALID, "schema at '%s' must be an object or a boolean", ptr);
        return -1;
    }
    if (!check_keywords(c, s, ptr)) return -1;
    const json_t *ref = json_object_get(s, "$ref");
    if (ref) {
        if (!json_is_string(ref)) {
            fail(c, RL_ERR_INVALID, "'$ref' at '%s' must be a string", ptr);
            return -1;
        }
        const json_t *t = resolve_ref(c, json_string_value(ref), ptr);
        if (!t) return -1;
        for (int i = 0; i < c->n_refs; i++)
            if (c->refs[i].target == t) return c->refs[i].id;
        if (c->n_refs >= (int)(sizeof c->refs / sizeof c->refs[0])) {
            fail(c, RL_ERR_LIMIT, "more than 256 distinct $ref targets");
            return -1;
        }
        /* reserve the id first so recursive references find it */
        id = new_id(c);
        if (id < 0) return -1;
        c->refs[c->n_refs++] = (ref_memo){t, id};
        int inner = gen(c, t, depth + 1, json_string_value(ref));
        ok = inner >= 0 && sb_printf(c, &b, "r%d", inner);
        goto done;
    }
    id = new_id(c);
    if (id < 0) return -1;
    const json_t *cst = json_object_get(s, "const"), *en = json_object_get(s, "enum");
    const json_t *any = json_object_get(s, "anyOf"), *one = json_object_get(s, "oneOf"), *all = json_object_get(s, "allOf");
    if (all) {
        if (!json_is_array(all) || json_array_size(all) != 1) {
            fail(c, RL_ERR_UNSUPPORTED, "'allOf' at '%s' is supported with exactly one subschema", ptr);
            goto fail;
        }
        char sub[512];
        ptr_join(c, sub, sizeof sub, ptr, "allOf/0");
        int v = gen(c, json_array_get(all, 0), depth + 1, sub);
        ok = v >= 0 && sb_printf(c, &b, "r%d", v);
    } else if (cst) {
        ok = literal_value(c, &b, cst);
    } else if (en) {
        if (!json_is_array(en) || json_array_size(en) == 0 || json_array_size(en) > 4096) {
            fail(c, RL_ERR_INVALID, "'enum' at '%s' must be a non-empty array of at most 4096 values", ptr);
            goto fail;
        }
        for (size_t i = 0; ok && i < json_array_size(en); i++)
            ok = (i == 0 || sb_put(c, &b, " | ", 3)) && literal_value(c, &b, json_array_get(en, i));
    } else if (any || one) {
        const json_t *arr = any ? any : one;
        const char *kw = any ? "anyOf" : "oneOf";
        if (!json_is_array(arr) || json_array_size(arr) == 0 || json_array_size(arr) > 256) {
            fail(c, RL_ERR_INVALID, "'%s' at '%s' must be a non-empty array (at most 256)", kw, ptr);
            goto fail;
        }
        if (json_object_get(s, "type") || infer_type(s)) {
            fail(c, RL_ERR_UNSUPPORTED, "'%s' at '%s' combined with sibling type keywords", kw, ptr);
            goto fail;
        }
        for (size_t i = 0; ok && i < json_array_size(arr); i++) {
            char sub[512], k2[32];
            snprintf(k2, sizeof k2, "%s/%zu", kw, i);
            ptr_join(c, sub, sizeof sub, ptr, k2);
            int v = gen(c, json_array_get(arr, i), depth + 1, sub);
            ok = v >= 0 && (i == 0 || sb_put(c, &b, " | ", 3)) && sb_printf(c, &b, "r%d", v);
        }
    } else {
        const json_t *ty = json_object_get(s, "type");
        if (json_is_string(ty)) ok = typed_body(c, s, json_string_value(ty), &b, depth, ptr);
        else if (json_is_array(ty)) {
            if (json_array_size(ty) == 0) {
                fail(c, RL_ERR_INVALID, "'type' at '%s' is an empty array", ptr);
                goto fail;
            }
            for (size_t i = 0; ok && i < json_array_size(ty); i++) {
                const json_t *t = json_array_get(ty, i);
                if (!json_is_string(t)) {
                    fail(c, RL_ERR_INVALID, "'type' at '%s' must hold strings", ptr);
                    goto fail;
                }
                ok = (i == 0 || sb_put(c, &b, " | ", 3)) && sb_put(c, &b, "(", 1) &&
                     typed_body(c, s, json_string_value(t), &b, depth, ptr) && sb_put(c, &b, ")", 1);
            }
        } else if (ty) {
            fail(c, RL_ERR_INVALID, "'type' at '%s' must be a string or an array", ptr);
            goto fail;
        } else {
            const char *inf = infer_type(s);
            ok = inf ? typed_body(c, s, inf, &b, depth, ptr) : sb_put(c, &b, "value", 5);
        }
    }
done:
    if (!ok || emit_rule(c, id, &b) < 0) goto fail;
    rl_free(b.p);
    return id;
fail:
    rl_free(b.p);
    if (!c->failed) fail(c, RL_ERR_NOMEM, "out of memory");
    return -1;
}

rl_status rl_json_schema_to_grammar(const json_t *schema, char **out, size_t *out_len, rl_err *err) {
    rl_err_clear(err);
    *out = NULL;
    if (out_len) *out_len = 0;
    conv c = {.root = schema, .err = err};
    if (!schema) return rl_err_set(err, RL_ERR_INVALID, "json schema: NULL");
    if (!sb_put(&c, &c.out, COMMON, sizeof COMMON - 1)) {
        rl_free(c.out.p);
        return err ? err->code : RL_ERR_NOMEM;
    }
    int top = gen(&c, schema, 0, "#");
    if (top < 0 || c.failed || !sb_printf(&c, &c.out, "root ::= r%d\n", top)) {
        rl_free(c.out.p);
        return err && err->code ? err->code : RL_ERR_NOMEM;
    }
    *out = c.out.p;
    if (out_len) *out_len = c.out.n;
    return RL_OK;
}

rl_grammar *rl_grammar_from_json_schema(const char *schema_json, size_t len, rl_err *err) {
    rl_err_clear(err);
    json_error_t je;
    json_t *s = json_loadb(schema_json, len, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &je);
    if (!s) {
        rl_err_set(err, RL_ERR_FORMAT, "json schema: invalid JSON at line %d column %d: %s", je.line, je.column,
                   je.text);
        return NULL;
    }
    char *text = NULL;
    size_t n = 0;
    rl_grammar *g = NULL;
    if (rl_json_schema_to_grammar(s, &text, &n, err) == RL_OK) {
        g = rl_grammar_compile(text, n, err);
        if (!g) rl_err_prefix(err, "json schema -> grammar");
    }
    rl_free(text);
    json_decref(s);
    return g;
}
