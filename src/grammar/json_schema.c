/* JSON Schema (JSON text, parsed with jansson) -> grammar text for
 * rl_grammar_compile.  The `pattern` regex translator is in
 * json_schema_regex.c (shared internals: json_schema-impl.h).
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

#include <jansson.h>

#include "grammar/json_schema-impl.h"

typedef struct ref_memo {
    const json_t *target;
    int id;
} ref_memo;

struct rl__jsconv {
    const json_t *root;
    rl_buf out;
    int n_rules, n_nodes;
    rl_err *err;
    bool failed;
    ref_memo refs[256];
    int n_refs;
};
typedef rl__jsconv conv;

bool rl__js_fail(conv *c, rl_status code, const char *fmt, ...) {
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

bool rl__js_put(conv *c, rl_buf *b, const char *s, size_t n) {
    if (c->failed) return false;
    if (b->n + n + 1 > RL_GRAMMAR_MAX_TEXT)
        return rl__js_fail(c, RL_ERR_LIMIT, "generated grammar exceeds %d bytes",
                           RL_GRAMMAR_MAX_TEXT);
    if (rl_buf_append(b, s, n)) return rl__js_fail(c, RL_ERR_NOMEM, "out of memory");
    return true;
}

bool rl__js_printf(conv *c, rl_buf *b, const char *fmt, ...) {
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof tmp)
        return rl__js_fail(c, RL_ERR_LIMIT, "internal: formatted piece too long");
    return rl__js_put(c, b, tmp, (size_t)n);
}

/* Appends s[0..n) as a grammar string literal (quotes included). */
static bool sb_literal(conv *c, rl_buf *b, const char *s, size_t n) {
    if (!rl__js_put(c, b, "\"", 1)) return false;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        char e[8];
        if (ch == '"' || ch == '\\')
            snprintf(e, sizeof e, "\\%c", ch);
        else if (ch < 0x20 || ch == 0x7f)
            snprintf(e, sizeof e, "\\x%02X", ch);
        else
            e[0] = (char)ch, e[1] = 0;
        if (!rl__js_put(c, b, e, strlen(e))) return false;
    }
    return rl__js_put(c, b, "\"", 1);
}

static const char COMMON[] =
    "ws ::= [ \\t\\n]{0,20}\n"
    "hex ::= [0-9a-fA-F]\n"
    "char ::= [^\"\\\\\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" ([0-9a-cA-CeEfF] hex hex hex "
    "| [dD] [0-7] hex hex))\n"
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
static int emit_rule(conv *c, int id, const rl_buf *body) {
    if (!rl__js_printf(c, &c->out, "r%d ::= ", id) ||
        !rl__js_put(c, &c->out, body->p ? body->p : "\"\"", body->p ? body->n : 2) ||
        !rl__js_put(c, &c->out, "\n", 1))
        return -1;
    return id;
}

static int new_id(conv *c) {
    if (c->n_rules >= RL_GRAMMAR_MAX_RULES / 4) {
        rl__js_fail(c, RL_ERR_LIMIT, "schema needs more than %d rules", RL_GRAMMAR_MAX_RULES / 4);
        return -1;
    }
    return c->n_rules++;
}

static int gen(conv *c, const json_t *s, int depth, const char *ptr);

/* ---- keyword policy ---- */

static const char *const UNSUPPORTED[] = {"multipleOf",
                                          "patternProperties",
                                          "propertyNames",
                                          "minProperties",
                                          "maxProperties",
                                          "uniqueItems",
                                          "contains",
                                          "minContains",
                                          "maxContains",
                                          "prefixItems",
                                          "additionalItems",
                                          "if",
                                          "then",
                                          "else",
                                          "not",
                                          "dependentRequired",
                                          "dependentSchemas",
                                          "dependencies",
                                          "unevaluatedProperties",
                                          "unevaluatedItems",
                                          "$dynamicRef",
                                          "$recursiveRef",
                                          NULL};

static bool check_keywords(conv *c, const json_t *s, const char *ptr) {
    for (int i = 0; UNSUPPORTED[i]; i++)
        if (json_object_get(s, UNSUPPORTED[i]))
            return rl__js_fail(c, RL_ERR_UNSUPPORTED, "keyword '%s' at '%s' is not supported",
                               UNSUPPORTED[i], ptr);
    return true;
}

static bool get_count(conv *c, const json_t *s, const char *key, long dflt, long *out,
                      const char *ptr) {
    const json_t *v = json_object_get(s, key);
    if (!v) {
        *out = dflt;
        return true;
    }
    double d = json_is_integer(v) ? (double)json_integer_value(v)
               : json_is_real(v)  ? json_real_value(v)
                                  : -1;
    if (d < 0 || d != floor(d))
        return rl__js_fail(c, RL_ERR_INVALID, "'%s' at '%s' must be a non-negative integer", key,
                           ptr);
    if (d > RL_GRAMMAR_MAX_REPEAT)
        return rl__js_fail(c, RL_ERR_LIMIT, "'%s' at '%s' is %.0f, limit %d", key, ptr, d,
                           RL_GRAMMAR_MAX_REPEAT);
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
static bool same_len(conv *c, rl_buf *b, const char *A, const char *B) {
    size_t n = strlen(A);
    if (n == 1) return rl__js_printf(c, b, "[%c-%c]", A[0], B[0]);
    if (A[0] == B[0]) return rl__js_printf(c, b, "\"%c\" ", A[0]) && same_len(c, b, A + 1, B + 1);
    char nines[24], zeros[24];
    memset(nines, '9', n - 1);
    nines[n - 1] = 0;
    memset(zeros, '0', n - 1);
    zeros[n - 1] = 0;
    bool first = true;
    char start = A[0], end = B[0];
    if (!rl__js_put(c, b, "(", 1)) return false;
    if (!all_char(A + 1, '0')) {
        if (!rl__js_printf(c, b, "\"%c\" ", A[0]) || !same_len(c, b, A + 1, nines)) return false;
        first = false;
        start++;
    }
    bool last = !all_char(B + 1, '9');
    if (last) end--;
    if (start <= end) {
        if (!first && !rl__js_put(c, b, " | ", 3)) return false;
        if (!rl__js_printf(c, b, "[%c-%c] [0-9]{%zu}", start, end, n - 1)) return false;
        first = false;
    }
    if (last) {
        if (!first && !rl__js_put(c, b, " | ", 3)) return false;
        if (!rl__js_printf(c, b, "\"%c\" ", B[0]) || !same_len(c, b, zeros, B + 1)) return false;
    }
    return rl__js_put(c, b, ")", 1);
}

#define INT_LIM 1000000000000000LL /* 10^15: bounds must be within +-INT_LIM */

/* 0 <= a <= b (b == -1: unbounded above, up to 16 digits). */
static bool nonneg_range(conv *c, rl_buf *b, long long a, long long hi, bool *first) {
    char A[24], B[24];
    long long p10 = 1;
    for (int n = 1; n <= 16; n++, p10 *= 10) {
        long long lo_n = n == 1 ? 0 : p10, hi_n = p10 * 10 - 1;
        if (lo_n < a) lo_n = a;
        if (hi >= 0 && hi_n > hi) hi_n = hi;
        if (lo_n > hi_n) continue;
        if (!*first && !rl__js_put(c, b, " | ", 3)) return false;
        *first = false;
        snprintf(A, sizeof A, "%lld", lo_n);
        snprintf(B, sizeof B, "%lld", hi_n);
        if (!same_len(c, b, A, B)) return false;
    }
    return true;
}

static bool bound(conv *c, const json_t *s, const char *key, bool upper, bool excl, bool *has,
                  long long *v, const char *ptr) {
    const json_t *j = json_object_get(s, key);
    if (!j) return true;
    if (!json_is_number(j))
        return rl__js_fail(c, RL_ERR_INVALID, "'%s' at '%s' must be a number", key, ptr);
    double d = json_number_value(j);
    if (!(fabs(d) < (double)INT_LIM))
        return rl__js_fail(c, RL_ERR_UNSUPPORTED,
                           "'%s' at '%s': bounds beyond 1e15 are not supported", key, ptr);
    double r = upper ? floor(d) : ceil(d);
    if (excl && r == d) r += upper ? -1 : 1;
    long long x = (long long)r;
    if (!*has || (upper ? x < *v : x > *v)) *v = x;
    *has = true;
    return true;
}

static bool integer_body(conv *c, const json_t *s, rl_buf *b, const char *ptr) {
    bool has_lo = false, has_hi = false;
    long long lo = 0, hi = 0;
    if (!bound(c, s, "minimum", false, false, &has_lo, &lo, ptr) ||
        !bound(c, s, "exclusiveMinimum", false, true, &has_lo, &lo, ptr) ||
        !bound(c, s, "maximum", true, false, &has_hi, &hi, ptr) ||
        !bound(c, s, "exclusiveMaximum", true, true, &has_hi, &hi, ptr))
        return false;
    if (!has_lo && !has_hi) return rl__js_put(c, b, "integer", 7);
    if (has_lo && has_hi && lo > hi)
        return rl__js_fail(c, RL_ERR_INVALID, "empty integer range at '%s'", ptr);
    bool first = true;
    if (!rl__js_put(c, b, "(", 1)) return false;
    /* non-negative part */
    if (!has_hi || hi >= 0)
        if (!nonneg_range(c, b, has_lo && lo > 0 ? lo : 0, has_hi ? hi : -1, &first)) return false;
    /* negative part: "-" then magnitudes */
    if (!has_lo || lo < 0) {
        long long mlo = has_hi && hi < 0 ? -hi : 1, mhi = has_lo ? -lo : -1;
        if (!first && !rl__js_put(c, b, " | ", 3)) return false;
        bool f2 = true;
        if (!rl__js_put(c, b, "\"-\" (", 5) || !nonneg_range(c, b, mlo, mhi, &f2) ||
            !rl__js_put(c, b, ")", 1))
            return false;
    }
    return rl__js_put(c, b, ")", 1);
}

static bool number_body(conv *c, const json_t *s, rl_buf *b, const char *ptr) {
    const json_t *mn = json_object_get(s, "minimum");
    if (json_object_get(s, "maximum") || json_object_get(s, "exclusiveMaximum") ||
        json_object_get(s, "exclusiveMinimum") ||
        (mn && (!json_is_number(mn) || json_number_value(mn) != 0)))
        return rl__js_fail(c, RL_ERR_UNSUPPORTED,
                           "bounds on type 'number' at '%s' (only \"minimum\": 0 is supported; use "
                           "'integer' for ranges)",
                           ptr);
    if (mn) { /* minimum 0: no sign */
        static const char unsigned_num[] =
            "(\"0\" | [1-9] [0-9]{0,15}) (\".\" [0-9]{1,16})? ([eE] [-+]? [0-9]{1,3})?";
        return rl__js_put(c, b, unsigned_num, sizeof unsigned_num - 1);
    }
    return rl__js_put(c, b, "number", 6);
}

static bool string_body(conv *c, const json_t *s, rl_buf *b, const char *ptr) {
    const json_t *pat = json_object_get(s, "pattern");
    const json_t *fmt = json_object_get(s, "format");
    long mn, mx;
    if (!get_count(c, s, "minLength", 0, &mn, ptr) || !get_count(c, s, "maxLength", -1, &mx, ptr))
        return false;
    bool has_len = json_object_get(s, "minLength") || json_object_get(s, "maxLength");
    if (mx >= 0 && mx < mn)
        return rl__js_fail(c, RL_ERR_INVALID, "maxLength < minLength at '%s'", ptr);
    if (pat) {
        if (!json_is_string(pat))
            return rl__js_fail(c, RL_ERR_INVALID, "'pattern' at '%s' must be a string", ptr);
        if (has_len)
            return rl__js_fail(c, RL_ERR_UNSUPPORTED,
                               "pattern together with minLength/maxLength at '%s'", ptr);
        size_t n = json_string_length(pat);
        if (n > 4096)
            return rl__js_fail(c, RL_ERR_LIMIT, "pattern at '%s' longer than 4096 bytes", ptr);
        return rl__js_pattern(c, b, json_string_value(pat), n, ptr);
    }
    if (fmt && json_is_string(fmt) && !has_len) {
        const char *f = json_string_value(fmt);
        const char *rule = !strcmp(f, "date")        ? "date"
                           : !strcmp(f, "time")      ? "time"
                           : !strcmp(f, "uuid")      ? "uuid"
                           : !strcmp(f, "email")     ? "email"
                           : !strcmp(f, "date-time") ? "date \"T\" time"
                                                     : NULL;
        if (rule) return rl__js_printf(c, b, "\"\\\"\" %s \"\\\"\"", rule);
    }
    if (!has_len) return rl__js_put(c, b, "string", 6);
    if (mx < 0) return rl__js_printf(c, b, "\"\\\"\" char{%ld,} \"\\\"\"", mn);
    return rl__js_printf(c, b, "\"\\\"\" char{%ld,%ld} \"\\\"\"", mn, mx);
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

static bool object_body(conv *c, const json_t *s, rl_buf *b, int depth, const char *ptr) {
    const json_t *props = json_object_get(s, "properties");
    const json_t *req = json_object_get(s, "required");
    const json_t *addl = json_object_get(s, "additionalProperties");
    if (props && !json_is_object(props))
        return rl__js_fail(c, RL_ERR_INVALID, "'properties' at '%s' must be an object", ptr);
    if (req && !json_is_array(req))
        return rl__js_fail(c, RL_ERR_INVALID, "'required' at '%s' must be an array", ptr);
    if (addl && !json_is_boolean(addl) && !json_is_object(addl))
        return rl__js_fail(c, RL_ERR_INVALID,
                           "'additionalProperties' at '%s' must be a boolean or a schema", ptr);
    size_t np = props ? json_object_size(props) : 0, nr = req ? json_array_size(req) : 0;
    if (np + nr > 1024)
        return rl__js_fail(c, RL_ERR_LIMIT, "more than 1024 properties at '%s'", ptr);
    if (np == 0 && nr == 0) {
        if (json_is_false(addl)) return rl__js_put(c, b, "\"{\" ws \"}\"", 10);
        if (!addl || json_is_true(addl)) return rl__js_put(c, b, "object", 6);
        char sub[512];
        ptr_join(c, sub, sizeof sub, ptr, "additionalProperties");
        int v = gen(c, addl, depth + 1, sub);
        if (v < 0) return false;
        return rl__js_printf(
            c, b,
            "\"{\" ws (string ws \":\" ws r%d ws (\",\" ws string ws \":\" ws r%d ws)*)? \"}\"", v,
            v);
    }
    /* collect keys: properties in order, then required names not listed */
    typedef struct {
        const char *key;
        const json_t *schema;
        bool req;
        int kv;
    } prop;
    prop *P = rl_calloc(np + nr + 1, sizeof *P);
    if (!P) return rl__js_fail(c, RL_ERR_NOMEM, "out of memory");
    size_t n = 0;
    const char *key;
    const json_t *val;
    json_object_foreach((json_t *)props, key, val) P[n++] = (prop){key, val, false, -1};
    for (size_t i = 0; i < nr; i++) {
        const json_t *r = json_array_get(req, i);
        if (!json_is_string(r)) {
            rl_free(P);
            return rl__js_fail(c, RL_ERR_INVALID, "'required' at '%s' must hold strings", ptr);
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
        if (v < 0 || (P[i].schema == NULL && (v = new_id(c)) < 0)) {
            ok = false;
            break;
        }
        if (!P[i].schema) {
            rl_buf any = {0};
            ok = rl__js_put(c, &any, "value", 5) && emit_rule(c, v, &any) >= 0;
            rl_buf_free(&any);
            if (!ok) break;
        }
        int kv = new_id(c);
        rl_buf body = {0};
        json_t *ks = json_string(P[i].key);
        char *kj = ks ? json_dumps(ks, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;
        json_decref(ks);
        ok = kv >= 0 && kj && sb_literal(c, &body, kj, strlen(kj)) &&
             rl__js_printf(c, &body, " ws \":\" ws r%d ws", v) && emit_rule(c, kv, &body) >= 0;
        free(kj);
        rl_buf_free(&body);
        P[i].kv = kv;
    }
    /* T_i: after something was emitted; F_i: nothing emitted yet */
    int T = -1, F = -1; /* rule ids for i+1; -1 = empty */
    for (size_t ii = n; ok && ii-- > 0;) {
        int t = new_id(c), f = new_id(c);
        if (t < 0 || f < 0) {
            ok = false;
            break;
        }
        rl_buf bt = {0}, bf = {0};
        char tail[32] = "";
        if (T >= 0) snprintf(tail, sizeof tail, " r%d", T);
        if (P[ii].req)
            ok = rl__js_printf(c, &bt, "\",\" ws r%d%s", P[ii].kv, tail);
        else
            ok = rl__js_printf(c, &bt, "(\",\" ws r%d)?%s", P[ii].kv, tail);
        if (ok) ok = rl__js_printf(c, &bf, "r%d%s", P[ii].kv, tail);
        if (ok && !P[ii].req)
            ok = F >= 0 ? rl__js_printf(c, &bf, " | r%d", F) : rl__js_put(c, &bf, " | \"\"", 5);
        ok = ok && emit_rule(c, t, &bt) >= 0 && emit_rule(c, f, &bf) >= 0;
        rl_buf_free(&bt);
        rl_buf_free(&bf);
        T = t;
        F = f;
    }
    rl_free(P);
    return ok && rl__js_printf(c, b, "\"{\" ws r%d \"}\"", F);
}

static bool array_body(conv *c, const json_t *s, rl_buf *b, int depth, const char *ptr) {
    const json_t *items = json_object_get(s, "items");
    long mn, mx;
    if (!get_count(c, s, "minItems", 0, &mn, ptr) || !get_count(c, s, "maxItems", -1, &mx, ptr))
        return false;
    if (mx >= 0 && mx < mn)
        return rl__js_fail(c, RL_ERR_INVALID, "maxItems < minItems at '%s'", ptr);
    if (items && json_is_array(items))
        return rl__js_fail(c, RL_ERR_UNSUPPORTED,
                           "tuple 'items' (an array) at '%s' is not supported", ptr);
    int v = -1;
    if (items) {
        char sub[512];
        ptr_join(c, sub, sizeof sub, ptr, "items");
        v = gen(c, items, depth + 1, sub);
        if (v < 0) return false;
    }
    char item[32];
    if (v >= 0)
        snprintf(item, sizeof item, "r%d ws", v);
    else
        snprintf(item, sizeof item, "value ws");
    if (mx == 0) return rl__js_put(c, b, "\"[\" ws \"]\"", 10);
    if (!rl__js_put(c, b, "\"[\" ws (", 8) || !rl__js_printf(c, b, "%s (\",\" ws %s)", item, item))
        return false;
    long lo = mn > 0 ? mn - 1 : 0;
    if (mx < 0 ? !rl__js_printf(c, b, "{%ld,}", lo) : !rl__js_printf(c, b, "{%ld,%ld}", lo, mx - 1))
        return false;
    return rl__js_printf(c, b, ")%s \"]\"", mn == 0 ? "?" : "");
}

/* ---- dispatch ---- */

static bool literal_value(conv *c, rl_buf *b, const json_t *v) {
    char *d = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
    if (!d) return rl__js_fail(c, RL_ERR_NOMEM, "out of memory");
    bool ok = sb_literal(c, b, d, strlen(d));
    free(d);
    return ok;
}

static bool typed_body(conv *c, const json_t *s, const char *type, rl_buf *b, int depth,
                       const char *ptr) {
    if (!strcmp(type, "string")) return string_body(c, s, b, ptr);
    if (!strcmp(type, "integer")) return integer_body(c, s, b, ptr);
    if (!strcmp(type, "number")) return number_body(c, s, b, ptr);
    if (!strcmp(type, "boolean")) return rl__js_put(c, b, "boolean", 7);
    if (!strcmp(type, "null")) return rl__js_put(c, b, "null", 4);
    if (!strcmp(type, "object")) return object_body(c, s, b, depth, ptr);
    if (!strcmp(type, "array")) return array_body(c, s, b, depth, ptr);
    if (!strcmp(type, "json_object")) return rl__js_put(c, b, "object", 6);
    return rl__js_fail(c, RL_ERR_UNSUPPORTED, "unknown type '%.60s' at '%s'", type, ptr);
}

static const char *infer_type(const json_t *s) {
    if (json_object_get(s, "properties") || json_object_get(s, "required") ||
        json_object_get(s, "additionalProperties"))
        return "object";
    if (json_object_get(s, "items") || json_object_get(s, "minItems") ||
        json_object_get(s, "maxItems"))
        return "array";
    if (json_object_get(s, "pattern") || json_object_get(s, "minLength") ||
        json_object_get(s, "maxLength") || json_object_get(s, "format"))
        return "string";
    if (json_object_get(s, "minimum") || json_object_get(s, "maximum") ||
        json_object_get(s, "exclusiveMinimum") || json_object_get(s, "exclusiveMaximum"))
        return "number";
    return NULL;
}

static const json_t *resolve_ref(conv *c, const char *ref, const char *ptr) {
    if (ref[0] != '#') {
        rl__js_fail(c, RL_ERR_UNSUPPORTED,
                    "$ref '%.100s' at '%s': only local references ('#/...') are supported", ref,
                    ptr);
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
        if (json_is_object(cur))
            cur = json_object_get(cur, tok);
        else if (json_is_array(cur)) {
            char *end;
            long i = strtol(tok, &end, 10);
            cur = *end || i < 0 ? NULL : json_array_get(cur, (size_t)i);
        } else
            cur = NULL;
        if (!cur) break;
    }
    if (!cur || *p) {
        rl__js_fail(c, RL_ERR_FORMAT, "$ref '%.100s' at '%s' does not resolve", ref, ptr);
        return NULL;
    }
    return cur;
}

static int gen(conv *c, const json_t *s, int depth, const char *ptr) {
    if (c->failed) return -1;
    if (depth > RL_SCHEMA_MAX_DEPTH) {
        rl__js_fail(c, RL_ERR_LIMIT, "schema nested deeper than %d at '%s'", RL_SCHEMA_MAX_DEPTH,
                    ptr);
        return -1;
    }
    if (++c->n_nodes > RL_SCHEMA_MAX_NODES) {
        rl__js_fail(c, RL_ERR_LIMIT, "schema has more than %d subschemas", RL_SCHEMA_MAX_NODES);
        return -1;
    }
    if (json_is_false(s)) {
        rl__js_fail(c, RL_ERR_UNSUPPORTED, "schema 'false' at '%s' matches nothing", ptr);
        return -1;
    }
    int id;
    rl_buf b = {0};
    bool ok = true;
    if (json_is_true(s) || (json_is_object(s) && json_object_size(s) == 0)) {
        id = new_id(c);
        ok = id >= 0 && rl__js_put(c, &b, "value", 5);
        goto done;
    }
    if (!json_is_object(s)) {
        rl__js_fail(c, RL_ERR_INVALID, "schema at '%s' must be an object or a boolean", ptr);
        return -1;
    }
    if (!check_keywords(c, s, ptr)) return -1;
    const json_t *ref = json_object_get(s, "$ref");
    if (ref) {
        if (!json_is_string(ref)) {
            rl__js_fail(c, RL_ERR_INVALID, "'$ref' at '%s' must be a string", ptr);
            return -1;
        }
        const json_t *t = resolve_ref(c, json_string_value(ref), ptr);
        if (!t) return -1;
        for (int i = 0; i < c->n_refs; i++)
            if (c->refs[i].target == t) return c->refs[i].id;
        if (c->n_refs >= (int)(sizeof c->refs / sizeof c->refs[0])) {
            rl__js_fail(c, RL_ERR_LIMIT, "more than 256 distinct $ref targets");
            return -1;
        }
        /* reserve the id first so recursive references find it */
        id = new_id(c);
        if (id < 0) return -1;
        c->refs[c->n_refs++] = (ref_memo){t, id};
        int inner = gen(c, t, depth + 1, json_string_value(ref));
        ok = inner >= 0 && rl__js_printf(c, &b, "r%d", inner);
        goto done;
    }
    id = new_id(c);
    if (id < 0) return -1;
    const json_t *cst = json_object_get(s, "const"), *en = json_object_get(s, "enum");
    const json_t *any = json_object_get(s, "anyOf"), *one = json_object_get(s, "oneOf"),
                 *all = json_object_get(s, "allOf");
    if (all) {
        if (!json_is_array(all) || json_array_size(all) != 1) {
            rl__js_fail(c, RL_ERR_UNSUPPORTED,
                        "'allOf' at '%s' is supported with exactly one subschema", ptr);
            goto fail;
        }
        char sub[512];
        ptr_join(c, sub, sizeof sub, ptr, "allOf/0");
        int v = gen(c, json_array_get(all, 0), depth + 1, sub);
        ok = v >= 0 && rl__js_printf(c, &b, "r%d", v);
    } else if (cst) {
        ok = literal_value(c, &b, cst);
    } else if (en) {
        if (!json_is_array(en) || json_array_size(en) == 0 || json_array_size(en) > 4096) {
            rl__js_fail(c, RL_ERR_INVALID,
                        "'enum' at '%s' must be a non-empty array of at most 4096 values", ptr);
            goto fail;
        }
        for (size_t i = 0; ok && i < json_array_size(en); i++)
            ok = (i == 0 || rl__js_put(c, &b, " | ", 3)) &&
                 literal_value(c, &b, json_array_get(en, i));
    } else if (any || one) {
        const json_t *arr = any ? any : one;
        const char *kw = any ? "anyOf" : "oneOf";
        if (!json_is_array(arr) || json_array_size(arr) == 0 || json_array_size(arr) > 256) {
            rl__js_fail(c, RL_ERR_INVALID, "'%s' at '%s' must be a non-empty array (at most 256)",
                        kw, ptr);
            goto fail;
        }
        if (json_object_get(s, "type") || infer_type(s)) {
            rl__js_fail(c, RL_ERR_UNSUPPORTED, "'%s' at '%s' combined with sibling type keywords",
                        kw, ptr);
            goto fail;
        }
        for (size_t i = 0; ok && i < json_array_size(arr); i++) {
            char sub[512], k2[32];
            snprintf(k2, sizeof k2, "%s/%zu", kw, i);
            ptr_join(c, sub, sizeof sub, ptr, k2);
            int v = gen(c, json_array_get(arr, i), depth + 1, sub);
            ok =
                v >= 0 && (i == 0 || rl__js_put(c, &b, " | ", 3)) && rl__js_printf(c, &b, "r%d", v);
        }
    } else {
        const json_t *ty = json_object_get(s, "type");
        if (json_is_string(ty))
            ok = typed_body(c, s, json_string_value(ty), &b, depth, ptr);
        else if (json_is_array(ty)) {
            if (json_array_size(ty) == 0) {
                rl__js_fail(c, RL_ERR_INVALID, "'type' at '%s' is an empty array", ptr);
                goto fail;
            }
            for (size_t i = 0; ok && i < json_array_size(ty); i++) {
                const json_t *t = json_array_get(ty, i);
                if (!json_is_string(t)) {
                    rl__js_fail(c, RL_ERR_INVALID, "'type' at '%s' must hold strings", ptr);
                    goto fail;
                }
                ok = (i == 0 || rl__js_put(c, &b, " | ", 3)) && rl__js_put(c, &b, "(", 1) &&
                     typed_body(c, s, json_string_value(t), &b, depth, ptr) &&
                     rl__js_put(c, &b, ")", 1);
            }
        } else if (ty) {
            rl__js_fail(c, RL_ERR_INVALID, "'type' at '%s' must be a string or an array", ptr);
            goto fail;
        } else {
            const char *inf = infer_type(s);
            ok = inf ? typed_body(c, s, inf, &b, depth, ptr) : rl__js_put(c, &b, "value", 5);
        }
    }
done:
    if (!ok || emit_rule(c, id, &b) < 0) goto fail;
    rl_buf_free(&b);
    return id;
fail:
    rl_buf_free(&b);
    if (!c->failed) rl__js_fail(c, RL_ERR_NOMEM, "out of memory");
    return -1;
}

/* A GBNF string literal of s (quotes included). */
static bool put_literal(conv *c, const char *s) {
    bool ok = rl__js_put(c, &c->out, "\"", 1);
    for (; ok && *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            ok = rl__js_printf(c, &c->out, "\\%c", ch);
        else if (ch == '\n')
            ok = rl__js_put(c, &c->out, "\\n", 2);
        else if (ch == '\t')
            ok = rl__js_put(c, &c->out, "\\t", 2);
        else if (ch == '\r')
            ok = rl__js_put(c, &c->out, "\\r", 2);
        else
            ok = rl__js_put(c, &c->out, (const char *)&ch, 1);
    }
    return ok && rl__js_put(c, &c->out, "\"", 1);
}

/* The root rule around value rule r<top>: plain, or as `f` frames it. */
static bool put_root(conv *c, int top, const rl_grammar_frame *f) {
    if (!f) return rl__js_printf(c, &c->out, "root ::= r%d\n", top);
    bool ok = rl__js_printf(c, &c->out, "item ::= ") &&
              put_literal(c, f->item_open ? f->item_open : "") &&
              rl__js_printf(c, &c->out, " r%d ", top) &&
              put_literal(c, f->item_close ? f->item_close : "") &&
              (!f->bare || rl__js_printf(c, &c->out, "\nroot ::= framed | r%d", top)) &&
              rl__js_printf(c, &c->out, "\n%s ::= ", f->bare ? "framed" : "root") &&
              put_literal(c, f->open ? f->open : "") && rl__js_printf(c, &c->out, " item ");
    if (ok && f->many)
        ok = rl__js_printf(c, &c->out, "(") && put_literal(c, f->sep ? f->sep : "") &&
             rl__js_printf(c, &c->out, " item)* ");
    return ok && put_literal(c, f->close ? f->close : "") && rl__js_printf(c, &c->out, "\n");
}

/* The parsed schema -> grammar text; *out is set only on success. */
static rl_status convert(const json_t *schema, const rl_grammar_frame *f, char **out,
                         size_t *out_len, rl_err *err) {
    conv c = {.root = schema, .err = err};
    if (!rl__js_put(&c, &c.out, COMMON, sizeof COMMON - 1)) {
        rl_buf_free(&c.out);
        return err ? err->code : RL_ERR_NOMEM;
    }
    int top = gen(&c, schema, 0, "#");
    if (top < 0 || c.failed || !put_root(&c, top, f)) {
        rl_buf_free(&c.out);
        return err && err->code ? err->code : RL_ERR_NOMEM;
    }
    *out = rl_buf_take(&c.out, out_len); /* non-empty: cannot fail */
    return RL_OK;
}

rl_status rl_json_schema_to_grammar(const char *schema_json, size_t len, char **out,
                                    size_t *out_len, rl_err *err) {
    return rl_json_schema_to_grammar_framed(schema_json, len, NULL, out, out_len, err);
}

rl_status rl_json_schema_to_grammar_framed(const char *schema_json, size_t len,
                                           const rl_grammar_frame *f, char **out, size_t *out_len,
                                           rl_err *err) {
    rl_err_clear(err);
    *out = NULL;
    if (out_len) *out_len = 0;
    json_error_t je;
    json_t *s = json_loadb(schema_json, len, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &je);
    if (!s)
        return rl_err_set(err, RL_ERR_FORMAT, "json schema: invalid JSON at line %d column %d: %s",
                          je.line, je.column, je.text);
    rl_status st = convert(s, f, out, out_len, err);
    json_decref(s);
    return st;
}

rl_grammar *rl_grammar_from_json_schema(const char *schema_json, size_t len, rl_err *err) {
    char *text = NULL;
    size_t n = 0;
    rl_grammar *g = NULL;
    if (rl_json_schema_to_grammar(schema_json, len, &text, &n, err) == RL_OK) {
        g = rl_grammar_compile(text, n, err);
        if (!g) rl_err_prefix(err, "json schema -> grammar");
    }
    rl_free(text);
    return g;
}
