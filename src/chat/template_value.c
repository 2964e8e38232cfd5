/* Chat-template values: Python-compatible str()/repr(), json.dumps (as HF's
 * tojson: ensure_ascii=False, insertion order), equality, truthiness, Python
 * whitespace over UTF-8 and the arena dict.
 *
 * Invariants: recursion over nested values is bounded by limits.max_depth
 * (namespaces can contain themselves); every buffer append is checked
 * against the arena cap.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/chat-impl.h"

/* Appends to an arena-backed growable buffer. */
void rl__tp_buf_put(tp_ctx *c, char **buf, size_t *len, size_t *cap, const char *p, size_t n,
                    size_t off) {
    size_t need;
    if (!rl_add_size(*len, n, &need) || !rl_add_size(need, 1, &need))
        rl__tp_fail(c, RL_ERR_LIMIT, off, "string too large");
    if (need > *cap) {
        size_t nc = *cap ? *cap : 64;
        while (nc < need) {
            if (nc > SIZE_MAX / 2) rl__tp_fail(c, RL_ERR_LIMIT, off, "string too large");
            nc *= 2;
        }
        char *b = rl__tp_alloc(c, nc, off);
        if (*len) memcpy(b, *buf, *len);
        *buf = b;
        *cap = nc;
    }
    if (n) memcpy(*buf + *len, p, n);
    *len += n;
    (*buf)[*len] = 0;
}

#define PUTS(s) rl__tp_buf_put(c, buf, len, cap, (s), strlen(s), off)

const char *rl__tp_type_name(tp_val v) {
    switch (v.t) {
    case V_UNDEF:
        return "undefined";
    case V_NONE:
        return "NoneType";
    case V_BOOL:
        return "bool";
    case V_INT:
        return "int";
    case V_FLOAT:
        return "float";
    case V_STR:
        return "str";
    case V_LIST:
        return v.u.l->tname ? v.u.l->tname : v.u.l->tuple ? "tuple" : "list";
    case V_DICT:
        return "dict";
    case V_NS:
        return "Namespace";
    case V_LOOP:
        return "LoopContext";
    case V_FUNC:
        return "function";
    case V_MACRO:
        return "Macro";
    case V_METHOD:
        return "builtin_function_or_method";
    }
    return "?";
}

bool rl__tp_truthy(tp_val v) {
    switch (v.t) {
    case V_UNDEF:
    case V_NONE:
        return false;
    case V_BOOL:
        return v.u.b;
    case V_INT:
        return v.u.i != 0;
    case V_FLOAT:
        return v.u.f != 0.0;
    case V_STR:
        return v.u.s.n != 0;
    case V_LIST:
        return v.u.l->kind == LK_ITER || v.u.l->n != 0; /* a generator is always true */
    case V_DICT:
        return v.u.d->n != 0;
    default:
        return true;
    }
}

/* Python repr(float): shortest round-tripping digits; exponent form when
 * the decimal exponent is < -4 or >= 16. */
void rl__tp_fmt_float(double f, char *out, size_t cap) {
    if (isnan(f)) {
        snprintf(out, cap, "nan");
        return;
    }
    if (isinf(f)) {
        snprintf(out, cap, f < 0 ? "-inf" : "inf");
        return;
    }
    char tmp[64];
    int prec = 1;
    for (; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*e", prec - 1, f);
        if (strtod(tmp, NULL) == f) break;
    }
    /* tmp = [-]d[.ddd]e[+-]XX */
    char digits[32];
    size_t nd = 0;
    const char *p = tmp;
    bool neg = *p == '-';
    if (neg) p++;
    for (; *p && *p != 'e'; p++)
        if (*p != '.') digits[nd++] = *p;
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    digits[nd] = 0;
    int e10 = atoi(p + 1);
    char *o = out;
    size_t left = cap;
#define EMIT(...)                                                                                  \
    do {                                                                                           \
        int w_ = snprintf(o, left, __VA_ARGS__);                                                   \
        if (w_ < 0 || (size_t)w_ >= left) return;                                                  \
        o += w_;                                                                                   \
        left -= (size_t)w_;                                                                        \
    } while (0)
    if (neg) EMIT("-");
    if (e10 < -4 || e10 >= 16) {
        EMIT("%c", digits[0]);
        if (nd > 1) EMIT(".%s", digits + 1);
        EMIT("e%c%02d", e10 < 0 ? '-' : '+', e10 < 0 ? -e10 : e10);
    } else if (e10 < 0) {
        EMIT("0.");
        for (int i = 0; i < -e10 - 1; i++) EMIT("0");
        EMIT("%s", digits);
    } else {
        for (int i = 0; i <= e10; i++) EMIT("%c", (size_t)i < nd ? digits[i] : '0');
        EMIT(".");
        if ((size_t)e10 + 1 < nd)
            EMIT("%s", digits + e10 + 1);
        else
            EMIT("0");
    }
#undef EMIT
}

static void put_pystr(tp_ctx *c, const char *s, size_t n, char **buf, size_t *len, size_t *cap,
                      size_t off) {
    bool has_sq = memchr(s, '\'', n) != NULL, has_dq = memchr(s, '"', n) != NULL;
    char q = (has_sq && !has_dq) ? '"' : '\'';
    rl__tp_buf_put(c, buf, len, cap, &q, 1, off);
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        char e[8];
        if (ch == (unsigned char)q || ch == '\\') {
            e[0] = '\\';
            e[1] = (char)ch;
            rl__tp_buf_put(c, buf, len, cap, e, 2, off);
        } else if (ch == '\n')
            PUTS("\\n");
        else if (ch == '\r')
            PUTS("\\r");
        else if (ch == '\t')
            PUTS("\\t");
        else if (ch < 0x20 || ch == 0x7f) {
            snprintf(e, sizeof e, "\\x%02x", ch);
            PUTS(e);
        } else
            rl__tp_buf_put(c, buf, len, cap, s + i, 1, off);
    }
    rl__tp_buf_put(c, buf, len, cap, &q, 1, off);
}

/* Python repr() of a value (used for str() of containers). */
void rl__tp_repr(tp_ctx *c, tp_val v, char **buf, size_t *len, size_t *cap, int depth, size_t off) {
    if (depth > c->lim.max_depth)
        rl__tp_fail(c, RL_ERR_LIMIT, off, "value nested deeper than %d", c->lim.max_depth);
    char num[64];
    switch (v.t) {
    case V_STR:
        put_pystr(c, v.u.s.p, v.u.s.n, buf, len, cap, off);
        return;
    case V_LIST:
        if (v.u.l->kind == LK_ITER) { /* Python adds an address: never reproducible */
            PUTS("<");
            PUTS(v.u.l->tname);
            PUTS(" object>");
            return;
        }
        if (v.u.l->kind == LK_VIEW) {
            PUTS(v.u.l->tname);
            PUTS("([");
            for (size_t i = 0; i < v.u.l->n; i++) {
                if (i) PUTS(", ");
                rl__tp_repr(c, v.u.l->v[i], buf, len, cap, depth + 1, off);
            }
            PUTS("])");
            return;
        }
        PUTS(v.u.l->tuple ? "(" : "[");
        for (size_t i = 0; i < v.u.l->n; i++) {
            if (i) PUTS(", ");
            rl__tp_repr(c, v.u.l->v[i], buf, len, cap, depth + 1, off);
        }
        if (v.u.l->tuple && v.u.l->n == 1) PUTS(",");
        PUTS(v.u.l->tuple ? ")" : "]");
        return;
    case V_DICT:
    case V_NS:
        PUTS(v.t == V_NS ? "<Namespace {" : "{");
        for (size_t i = 0; i < v.u.d->n; i++) {
            if (i) PUTS(", ");
            rl__tp_repr(c, v.u.d->k[i], buf, len, cap, depth + 1, off);
            PUTS(": ");
            rl__tp_repr(c, v.u.d->v[i], buf, len, cap, depth + 1, off);
        }
        PUTS(v.t == V_NS ? "}>" : "}");
        return;
    case V_UNDEF:
        PUTS("Undefined");
        return; /* jinja2's Undefined.__repr__ */
    default: {
        tp_val s = rl__tp_to_str(c, v, off);
        rl__tp_buf_put(c, buf, len, cap, s.u.s.p, s.u.s.n, off);
        return;
    }
    }
    (void)num;
}

tp_val rl__tp_to_str(tp_ctx *c, tp_val v, size_t off) {
    char num[64];
    switch (v.t) {
    case V_STR:
        return v;
    case V_UNDEF:
        return tp_str("", 0);
    case V_NONE:
        return tp_str("None", 4);
    case V_BOOL:
        return v.u.b ? tp_str("True", 4) : tp_str("False", 5);
    case V_INT:
        snprintf(num, sizeof num, "%lld", (long long)v.u.i);
        break;
    case V_FLOAT:
        rl__tp_fmt_float(v.u.f, num, sizeof num);
        break;
    case V_LOOP:
        return tp_str("<LoopContext>", 13);
    case V_FUNC:
        return tp_str("<function>", 10);
    case V_METHOD: { /* Python adds an address: never reproducible */
        size_t n = strlen(v.u.bm->name) + 48;
        char *p = rl__tp_alloc(c, n, off);
        snprintf(p, n, "<built-in method %s of %s object>", v.u.bm->name,
                 rl__tp_type_name(v.u.bm->obj));
        return tp_str(p, strlen(p));
    }
    case V_MACRO: {
        const tp_node *d = v.u.mac->def;
        const char *name = d->kind == N_MACRO ? d->s : "caller";
        size_t n = strlen(name) + 10;
        char *p = rl__tp_alloc(c, n + 1, off);
        snprintf(p, n + 1, "<Macro '%s'>", name);
        return tp_str(p, n);
    }
    default: {
        char *buf = NULL;
        size_t len = 0, cap = 0;
        rl__tp_repr(c, v, &buf, &len, &cap, 0, off);
        return tp_str(buf, len);
    }
    }
    size_t n = strlen(num);
    return tp_str(rl__tp_strdup(c, num, n, off), n);
}

static void put_json_str(tp_ctx *c, const char *s, size_t n, bool ascii, char **buf, size_t *len,
                         size_t *cap, size_t off) {
    PUTS("\"");
    size_t run = 0;
    for (size_t i = 0; i < n;) {
        unsigned char ch = (unsigned char)s[i];
        const char *esc = NULL;
        char e[16];
        size_t w = 1;
        switch (ch) {
        case '"':
            esc = "\\\"";
            break;
        case '\\':
            esc = "\\\\";
            break;
        case '\n':
            esc = "\\n";
            break;
        case '\r':
            esc = "\\r";
            break;
        case '\t':
            esc = "\\t";
            break;
        case '\b':
            esc = "\\b";
            break;
        case '\f':
            esc = "\\f";
            break;
        default:
            if (ch < 0x20) {
                snprintf(e, sizeof e, "\\u%04x", ch);
                esc = e;
            } else if (ascii && ch >= 0x80) { /* \uXXXX, surrogate pairs above the BMP */
                uint32_t cp;
                size_t k = rl_utf8_decode(s + i, n - i, &cp);
                if (!k) cp = 0xFFFD, k = 1;
                w = k;
                if (cp >= 0x10000)
                    snprintf(e, sizeof e, "\\u%04x\\u%04x", 0xD800 + ((cp - 0x10000) >> 10),
                             0xDC00 + ((cp - 0x10000) & 0x3FF));
                else
                    snprintf(e, sizeof e, "\\u%04x", cp);
                esc = e;
            }
        }
        if (esc) {
            rl__tp_buf_put(c, buf, len, cap, s + run, i - run, off);
            PUTS(esc);
            run = i + w;
        }
        i += w;
    }
    rl__tp_buf_put(c, buf, len, cap, s + run, n - run, off);
    PUTS("\"");
}

static void json_nl(tp_ctx *c, char **buf, size_t *len, size_t *cap, const tp_jsonopt *o, int level,
                    size_t off) {
    PUTS("\n");
    for (int i = 0; i < level; i++) rl__tp_buf_put(c, buf, len, cap, o->indent, o->indent_n, off);
}

static void json_key(tp_ctx *c, tp_val k, const tp_jsonopt *o, char **buf, size_t *len, size_t *cap,
                     size_t off) {
    char num[64];
    switch (k.t) {
    case V_STR:
        put_json_str(c, k.u.s.p, k.u.s.n, o->ensure_ascii, buf, len, cap, off);
        return;
    case V_NONE:
        PUTS("\"null\"");
        return;
    case V_BOOL:
        PUTS(k.u.b ? "\"true\"" : "\"false\"");
        return;
    case V_INT:
        snprintf(num, sizeof num, "\"%lld\"", (long long)k.u.i);
        PUTS(num);
        return;
    case V_FLOAT: {
        if (isnan(k.u.f))
            snprintf(num, sizeof num, "NaN");
        else if (isinf(k.u.f))
            snprintf(num, sizeof num, k.u.f < 0 ? "-Infinity" : "Infinity");
        else
            rl__tp_fmt_float(k.u.f, num, sizeof num);
        PUTS("\"");
        PUTS(num);
        PUTS("\"");
        return;
    }
    default:
        rl__tp_fail(c, RL_ERR_FORMAT, off,
                    "tojson: keys must be str, int, float, bool or None, not %s",
                    rl__tp_type_name(k));
    }
}

/* Stable insertion sort of dict entry indices by key (sort_keys=True);
 * the comparison may fail (mixed key types) by longjmp. */
static size_t *sorted_keys(tp_ctx *c, const tp_dict *d, size_t off) {
    size_t *ix = rl__tp_alloc_array(c, d->n, sizeof *ix, off);
    for (size_t i = 0; i < d->n; i++) {
        size_t j = i;
        while (j > 0 && rl__tp_compare_order(c, d->k[i], d->k[ix[j - 1]], TP_OP_LT, 0, off) < 0) {
            step(c, off);
            ix[j] = ix[j - 1];
            j--;
        }
        ix[j] = i;
    }
    return ix;
}

void rl__tp_json(tp_ctx *c, tp_val v, char **buf, size_t *len, size_t *cap, const tp_jsonopt *o,
                 int level, size_t off) {
    if (level > c->lim.max_depth)
        rl__tp_fail(c, RL_ERR_LIMIT, off, "value nested deeper than %d", c->lim.max_depth);
    char num[64];
    switch (v.t) {
    case V_NONE:
        PUTS("null");
        return;
    case V_BOOL:
        PUTS(v.u.b ? "true" : "false");
        return;
    case V_INT:
        snprintf(num, sizeof num, "%lld", (long long)v.u.i);
        PUTS(num);
        return;
    case V_FLOAT:
        if (isnan(v.u.f))
            PUTS("NaN");
        else if (isinf(v.u.f))
            PUTS(v.u.f < 0 ? "-Infinity" : "Infinity");
        else {
            rl__tp_fmt_float(v.u.f, num, sizeof num);
            PUTS(num);
        }
        return;
    case V_STR:
        put_json_str(c, v.u.s.p, v.u.s.n, o->ensure_ascii, buf, len, cap, off);
        return;
    case V_LIST:
        if (v.u.l->kind != LK_SEQ)
            rl__tp_fail(c, RL_ERR_FORMAT, off, "tojson: Object of type %s is not JSON serializable",
                        v.u.l->tname);
        if (!v.u.l->n) {
            PUTS("[]");
            return;
        }
        PUTS("[");
        for (size_t i = 0; i < v.u.l->n; i++) {
            if (i) rl__tp_buf_put(c, buf, len, cap, o->item_sep, o->item_sep_n, off);
            if (o->pretty) json_nl(c, buf, len, cap, o, level + 1, off);
            rl__tp_json(c, v.u.l->v[i], buf, len, cap, o, level + 1, off);
        }
        if (o->pretty) json_nl(c, buf, len, cap, o, level, off);
        PUTS("]");
        return;
    case V_DICT: {
        if (!v.u.d->n) {
            PUTS("{}");
            return;
        }
        size_t *ix = o->sort_keys ? sorted_keys(c, v.u.d, off) : NULL;
        PUTS("{");
        for (size_t j = 0; j < v.u.d->n; j++) {
            size_t i = ix ? ix[j] : j;
            if (j) rl__tp_buf_put(c, buf, len, cap, o->item_sep, o->item_sep_n, off);
            if (o->pretty) json_nl(c, buf, len, cap, o, level + 1, off);
            json_key(c, v.u.d->k[i], o, buf, len, cap, off);
            rl__tp_buf_put(c, buf, len, cap, o->key_sep, o->key_sep_n, off);
            rl__tp_json(c, v.u.d->v[i], buf, len, cap, o, level + 1, off);
        }
        if (o->pretty) json_nl(c, buf, len, cap, o, level, off);
        PUTS("}");
        return;
    }
    default:
        rl__tp_fail(c, RL_ERR_FORMAT, off, "tojson: Object of type %s is not JSON serializable",
                    rl__tp_type_name(v));
    }
}

bool rl__tp_equal(tp_ctx *c, tp_val a, tp_val b, int depth, size_t off) {
    if (depth > c->lim.max_depth)
        rl__tp_fail(c, RL_ERR_LIMIT, off, "value nested deeper than %d", c->lim.max_depth);
    if (is_num(a) && is_num(b)) {
        if (a.t != V_FLOAT && b.t != V_FLOAT) {
            int64_t x = a.t == V_INT ? a.u.i : a.u.b, y = b.t == V_INT ? b.u.i : b.u.b;
            return x == y;
        }
        return num_f(a) == num_f(b);
    }
    if (a.t != b.t) return false;
    switch (a.t) {
    case V_UNDEF:
    case V_NONE:
        return true;
    case V_STR:
        if (a.u.s.n != b.u.s.n) return false;
        rl__tp_charge(c, a.u.s.n, off);
        return memcmp(a.u.s.p, b.u.s.p, a.u.s.n) == 0;
    case V_LIST:
        if (a.u.l->kind != LK_SEQ || b.u.l->kind != LK_SEQ) return a.u.l == b.u.l;
        if (a.u.l->n != b.u.l->n || a.u.l->tuple != b.u.l->tuple) return false;
        if (a.u.l->n >= 16) step_n(c, a.u.l->n >> 4, off);
        for (size_t i = 0; i < a.u.l->n; i++)
            if (!rl__tp_equal(c, a.u.l->v[i], b.u.l->v[i], depth + 1, off)) return false;
        return true;
    case V_DICT:
        if (a.u.d->n != b.u.d->n) return false;
        if (a.u.d->n >= 16) step_n(c, a.u.d->n >> 4, off);
        for (size_t i = 0; i < a.u.d->n; i++) {
            tp_val *o = rl__tp_dict_get(c, b.u.d, a.u.d->k[i], off);
            if (!o || !rl__tp_equal(c, a.u.d->v[i], *o, depth + 1, off)) return false;
        }
        return true;
    case V_NS:
        return a.u.d == b.u.d;
    case V_LOOP:
        return a.u.loop == b.u.loop;
    case V_FUNC:
        return a.u.fn == b.u.fn;
    case V_MACRO:
        return a.u.mac == b.u.mac;
    default:
        return false;
    }
}

/* markupsafe.escape: & < > " ' as HTML entities; the result is markup.
 * Markup is returned as it is. */
tp_val rl__tp_escape(tp_ctx *c, tp_val v, size_t off) {
    if (v.t == V_STR && v.safe) return v;
    v = rl__tp_to_str(c, v, off);
    char *o = NULL;
    size_t n = 0, cap = 0, run = 0;
    rl__tp_buf_put(c, &o, &n, &cap, "", 0, off);
    for (size_t i = 0; i < v.u.s.n; i++) {
        const char *e = NULL;
        switch (v.u.s.p[i]) {
        case '&':
            e = "&amp;";
            break;
        case '<':
            e = "&lt;";
            break;
        case '>':
            e = "&gt;";
            break;
        case '"':
            e = "&#34;";
            break;
        case '\'':
            e = "&#39;";
            break;
        default:
            continue;
        }
        rl__tp_buf_put(c, &o, &n, &cap, v.u.s.p + run, i - run, off);
        rl__tp_buf_put(c, &o, &n, &cap, e, strlen(e), off);
        run = i + 1;
    }
    rl__tp_buf_put(c, &o, &n, &cap, v.u.s.p + run, v.u.s.n - run, off);
    tp_val r = tp_str(o, n);
    r.safe = true;
    return r;
}

/* ---- Python whitespace (str.isspace) over UTF-8 ---- */

static bool cp_is_space(uint32_t cp) {
    return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 ||
           cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
           cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

/* The code point at p[i] (0xFFFD when no well-formed sequence starts
 * there); *w = its byte width (1 for ill-formed bytes). */
static uint32_t decode_at(const char *p, size_t n, size_t i, size_t *w) {
    uint32_t cp;
    size_t k = rl_utf8_decode(p + i, n - i, &cp);
    *w = k ? k : 1;
    return k ? cp : 0xFFFD;
}

bool rl__tp_is_space_at(const char *p, size_t n, size_t i, size_t *w) {
    uint32_t cp = decode_at(p, n, i, w);
    return cp_is_space(cp);
}

bool rl__tp_is_space_before(const char *p, size_t i, size_t *w) {
    size_t s = rl_utf8_back(p, i);
    size_t ww;
    uint32_t cp = decode_at(p, i, s, &ww);
    if (s + ww != i) {
        *w = 1;
        return false;
    }
    *w = ww;
    return cp_is_space(cp);
}

/* ---- dict (insertion-ordered, linear lookup: template dicts are small;
 * lookups in big ones are charged steps by size) ---- */

tp_dict *rl__tp_dict_new(tp_ctx *c, size_t cap, size_t off) {
    tp_dict *d = rl__tp_alloc(c, sizeof *d, off);
    if (cap) {
        d->k = rl__tp_alloc_array(c, cap, sizeof(tp_val), off);
        d->v = rl__tp_alloc_array(c, cap, sizeof(tp_val), off);
        d->cap = cap;
    }
    return d;
}

tp_val *rl__tp_dict_get(tp_ctx *c, tp_dict *d, tp_val k, size_t off) {
    if (d->n >= 16) step_n(c, d->n >> 4, off); /* a linear scan: big dicts pay for it */
    for (size_t i = 0; i < d->n; i++)
        if (rl__tp_equal(c, d->k[i], k, 0, off)) return &d->v[i];
    return NULL;
}

tp_val *rl__tp_dict_get_str(tp_ctx *c, tp_dict *d, const char *k, size_t n, size_t off) {
    if (d->n >= 16) step_n(c, d->n >> 4, off);
    for (size_t i = 0; i < d->n; i++)
        if (d->k[i].t == V_STR && d->k[i].u.s.n == n && memcmp(d->k[i].u.s.p, k, n) == 0)
            return &d->v[i];
    return NULL;
}

void rl__tp_dict_set(tp_ctx *c, tp_dict *d, tp_val k, tp_val v, size_t off) {
    tp_val *slot = rl__tp_dict_get(c, d, k, off);
    if (slot) {
        *slot = v;
        return;
    }
    size_t kcap = d->cap; /* k and v share d->cap */
    d->k = rl__tp_grow(c, d->k, d->n, &kcap, sizeof(tp_val), 4, off);
    d->v = rl__tp_grow(c, d->v, d->n, &d->cap, sizeof(tp_val), 4, off);
    d->k[d->n] = k;
    d->v[d->n] = v;
    d->n++;
}
