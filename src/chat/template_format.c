/* Chat-template string formatting: Python's printf-style `fmt % args` (also
 * jinja2's |format filter) and str.format().
 *
 * printf-style: %[(key)][flags][width][.precision]type with flags "-+ 0#",
 * `*` width/precision, types s r a d i u x X o e E f F g G c %; args are a
 * tuple, a mapping (with %(key)) or one value, and leftovers are an error as
 * in Python.  str.format: {} {0} {name} fields with .attr / [key] lookups,
 * !s / !r conversions and the format-spec mini-language
 * [[fill]align][sign][#][0][width][,|_][.precision][type] for s d b o x X c
 * e E f F g G % and none.
 *
 * Invariants: widths and precisions are capped (a clear error beyond
 * FMT_MAX), output is built in the ctx arena, every field costs a step.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/chat-impl.h"

#define FMT_MAX 10000 /* largest width or precision accepted */

typedef struct sbuf {
    char *p;
    size_t n, cap;
} sbuf;

static void sput(tp_ctx *c, sbuf *b, const char *p, size_t n, size_t off) {
    rl__tp_buf_put(c, &b->p, &b->n, &b->cap, p, n, off);
}

static void spad(tp_ctx *c, sbuf *b, uint32_t fill, size_t k, size_t off) {
    char e[4];
    size_t w = rl_utf8_encode(fill, e);
    for (size_t i = 0; i < k; i++) sput(c, b, e, w, off);
}

/* Python's repr() of v as a string value. */
static tp_val repr_of(tp_ctx *c, tp_val v, size_t off) {
    char *buf = NULL;
    size_t len = 0, cap = 0;
    rl__tp_buf_put(c, &buf, &len, &cap, "", 0, off);
    rl__tp_repr(c, v, &buf, &len, &cap, 0, off);
    return tp_str(buf, len);
}

/* Writes `body` (sign already split off into `sign`) padded to `width`
 * code points: align '<' '>' '^' or '=' (padding after the sign). */
static void emit_padded(tp_ctx *c, sbuf *b, const char *sign, const char *body, size_t bn,
                        size_t width, char align, uint32_t fill, size_t off) {
    size_t sl = strlen(sign), len = sl + rl_utf8_count(body, bn);
    size_t pad = width > len ? width - len : 0, left = 0, right = 0;
    if (align == '<')
        right = pad;
    else if (align == '^')
        left = pad / 2, right = pad - pad / 2;
    else
        left = pad;
    if (align == '=') {
        sput(c, b, sign, sl, off);
        spad(c, b, fill, left, off);
    } else {
        spad(c, b, fill, left, off);
        sput(c, b, sign, sl, off);
    }
    sput(c, b, body, bn, off);
    spad(c, b, fill, right, off);
}

/* Formats a number in C printf style (type one of d x X o e E f F g G,
 * b for binary) into tmp; the sign goes to *neg. */
static void fmt_number(tp_ctx *c, tp_val v, char type, int prec, bool alt, char *tmp, size_t cap,
                       bool *neg, size_t off) {
    if (strchr("dxXob", type)) {
        if (v.t == V_FLOAT && type == 'd') {
            if (!isfinite(v.u.f))
                rl__tp_fail(c, RL_ERR_FORMAT, off, "format: cannot convert float %s to integer",
                            isnan(v.u.f) ? "NaN" : "infinity");
            if (fabs(v.u.f) >= 9.2e18)
                rl__tp_fail(c, RL_ERR_RANGE, off, "format: %g does not fit a 64-bit integer",
                            v.u.f);
            v = mk_int((int64_t)v.u.f);
        }
        if (v.t != V_INT && v.t != V_BOOL)
            rl__tp_fail(c, RL_ERR_FORMAT, off, "%%%c format: %s is required, not %s", type,
                        type == 'd' ? "a real number" : "an integer", rl__tp_type_name(v));
        int64_t i = num_i(v);
        *neg = i < 0;
        uint64_t u = i < 0 ? (uint64_t)0 - (uint64_t)i : (uint64_t)i;
        const char *pre = !alt          ? ""
                          : type == 'x' ? "0x"
                          : type == 'X' ? "0X"
                          : type == 'o' ? "0o"
                          : type == 'b' ? "0b"
                                        : "";
        if (type == 'b') {
            char bits[72];
            int k = 0;
            do bits[k++] = (char)('0' + (u & 1)), u >>= 1;
            while (u);
            size_t o = (size_t)snprintf(tmp, cap, "%s", pre);
            while (k > 0 && o + 1 < cap) tmp[o++] = bits[--k];
            tmp[o] = 0;
        } else {
            char f[8] = {'%', 'l', 'l', type == 'd' ? 'u' : type, 0};
            size_t o = (size_t)snprintf(tmp, cap, "%s", pre);
            snprintf(tmp + o, cap - o, f, (unsigned long long)u);
        }
        return;
    }
    if (!is_num(v))
        rl__tp_fail(c, RL_ERR_FORMAT, off, "%%%c format: a real number is required, not %s", type,
                    rl__tp_type_name(v));
    double d = num_f(v);
    *neg = signbit(d) && !isnan(d);
    d = fabs(d);
    if (!isfinite(d)) {
        bool up = type == 'E' || type == 'F' || type == 'G';
        snprintf(tmp, cap, "%s", isnan(d) ? (up ? "NAN" : "nan") : (up ? "INF" : "inf"));
        return;
    }
    char f[8] = {'%', alt ? '#' : '.', '.', '*', type, 0};
    if (!alt) memmove(f + 1, f + 2, 4);
    snprintf(tmp, cap, f, prec, d);
}

/* ------------------------------------------------------- printf-style */

tp_val rl__tp_percent_format(tp_ctx *c, tp_val fmt, tp_val args, size_t off) {
    tp_val *items;
    size_t n_items, next = 0;
    /* a dict feeds %(key)s; a dict or a list (Python: anything with
     * __getitem__ but a tuple or str) is never "not all converted" */
    bool mapping = args.t == V_DICT, lenient = mapping || (is_seq(args) && !args.u.l->tuple);
    if (is_seq(args) && args.u.l->tuple) {
        items = args.u.l->v;
        n_items = args.u.l->n;
    } else {
        items = &args;
        n_items = 1;
    }
    sbuf b = {0};
    sput(c, &b, "", 0, off);
    const char *p = fmt.u.s.p;
    size_t n = fmt.u.s.n, i = 0;
    while (i < n) {
        const char *pct = memchr(p + i, '%', n - i);
        size_t e = pct ? (size_t)(pct - p) : n;
        sput(c, &b, p + i, e - i, off);
        if (!pct) break;
        i = e + 1;
        step(c, off);
        tp_val v;
        bool have_v = false;
        if (i < n && p[i] == '(') {
            size_t k = i + 1, depth = 1;
            while (k < n && depth) depth += p[k] == '(' ? 1 : p[k] == ')' ? -1 : 0, k++;
            if (depth) rl__tp_fail(c, RL_ERR_FORMAT, off, "format: incomplete format key");
            if (!mapping) rl__tp_fail(c, RL_ERR_FORMAT, off, "format: format requires a mapping");
            tp_val *x = rl__tp_dict_get(c, args.u.d, tp_str(p + i + 1, k - i - 2), off);
            if (!x)
                rl__tp_fail(c, RL_ERR_FORMAT, off, "format: KeyError '%.*s'",
                            (int)(k - i - 2 > 60 ? 60 : k - i - 2), p + i + 1);
            v = *x;
            have_v = true;
            i = k;
        }
        bool left = false, zero = false, plus = false, space = false, alt = false;
        for (; i < n && strchr("-0+ #", p[i]); i++) {
            if (p[i] == '-')
                left = true;
            else if (p[i] == '0')
                zero = true;
            else if (p[i] == '+')
                plus = true;
            else if (p[i] == ' ')
                space = true;
            else
                alt = true;
        }
        int64_t width = 0, prec = -1;
        for (int part = 0; part < 2; part++) {
            int64_t *dst = part ? &prec : &width;
            if (part) {
                if (i >= n || p[i] != '.') break;
                i++;
                prec = 0;
            }
            if (i < n && p[i] == '*') {
                if (next >= n_items || mapping)
                    rl__tp_fail(c, RL_ERR_FORMAT, off,
                                "format: not enough arguments for format string");
                *dst = rl__tp_want_int(c, &items[next++], "format * width", off);
                i++;
                if (*dst > FMT_MAX || *dst < -FMT_MAX)
                    rl__tp_fail(c, RL_ERR_LIMIT, off, "format: width or precision above %d",
                                FMT_MAX);
                if (!part && *dst < 0) left = true, *dst = -*dst;
                if (part && *dst < 0) *dst = 0;
            } else {
                while (i < n && p[i] >= '0' && p[i] <= '9') {
                    *dst = *dst * 10 + (p[i++] - '0');
                    if (*dst > FMT_MAX)
                        rl__tp_fail(c, RL_ERR_LIMIT, off, "format: width or precision above %d",
                                    FMT_MAX);
                }
            }
        }
        if (width > FMT_MAX || prec > FMT_MAX)
            rl__tp_fail(c, RL_ERR_LIMIT, off, "format: width or precision above %d", FMT_MAX);
        while (i < n && (p[i] == 'l' || p[i] == 'h' || p[i] == 'L'))
            i++; /* length modifiers are ignored */
        if (i >= n) rl__tp_fail(c, RL_ERR_FORMAT, off, "format: incomplete format");
        char type = p[i++];
        if (type == '%') {
            sput(c, &b, "%", 1, off);
            continue;
        }
        if (!have_v) {
            if (next >= n_items)
                rl__tp_fail(c, RL_ERR_FORMAT, off,
                            "format: not enough arguments for format string");
            v = items[next++];
        }
        char tmp[400];
        const char *sign = "";
        const char *body;
        size_t bn;
        if (type == 's' || type == 'r' || type == 'a') {
            tp_val s = type == 's' ? rl__tp_to_str(c, v, off) : repr_of(c, v, off);
            body = s.u.s.p;
            bn = prec >= 0 ? rl_utf8_offset(s.u.s.p, s.u.s.n, (size_t)prec) : s.u.s.n;
            zero = false;
        } else if (type == 'c') {
            if (v.t == V_STR && rl_utf8_count(v.u.s.p, v.u.s.n) == 1) {
                body = v.u.s.p;
                bn = v.u.s.n;
            } else {
                int64_t cp = rl__tp_want_int(c, &v, "%c format", off);
                if (cp < 0 || cp > 0x10FFFF)
                    rl__tp_fail(c, RL_ERR_RANGE, off, "%%c arg not in range(0x110000)");
                bn = rl_utf8_encode((uint32_t)cp, tmp);
                body = tmp;
            }
            zero = false;
        } else if (strchr("diuxXoeEfFgG", type)) {
            char t = type == 'i' || type == 'u' ? 'd' : type;
            bool neg;
            fmt_number(c, v, t, prec < 0 ? 6 : (int)prec, alt, tmp, sizeof tmp, &neg, off);
            if (strchr("dxXo", t) && prec > 0) { /* precision on integers: minimum digits */
                size_t pre = alt && t != 'd' ? 2 : 0, dl = strlen(tmp) - pre;
                if ((size_t)prec > dl && (size_t)prec < sizeof tmp - pre - 1) {
                    memmove(tmp + pre + ((size_t)prec - dl), tmp + pre, dl + 1);
                    memset(tmp + pre, '0', (size_t)prec - dl);
                }
            }
            sign = neg ? "-" : plus ? "+" : space ? " " : "";
            body = tmp;
            bn = strlen(tmp);
            if (!isfinite(num_f(v))) zero = false;
        } else {
            rl__tp_fail(c, RL_ERR_FORMAT, off, "format: unsupported format character '%c'", type);
        }
        emit_padded(c, &b, sign, body, bn, (size_t)width,
                    left   ? '<'
                    : zero ? '='
                           : '>',
                    zero && !left ? '0' : ' ', off);
    }
    if (!lenient && next < n_items)
        rl__tp_fail(c, RL_ERR_FORMAT, off,
                    "format: not all arguments converted during string formatting");
    return tp_str(b.p, b.n);
}

/* ------------------------------------------------------------ str.format */

/* One replacement field's value: {N}, {name}, {} then .attr / [key]. */
static tp_val field_value(tp_ctx *c, const char *f, size_t fn, targs *a, size_t *auto_i,
                          size_t off) {
    size_t i = 0;
    while (i < fn && f[i] != '.' && f[i] != '[') i++;
    tp_val v;
    if (i == 0) {
        if (*auto_i >= a->n_pos)
            rl__tp_fail(c, RL_ERR_FORMAT, off, "format: Replacement index %zu out of range",
                        *auto_i);
        v = a->pos[(*auto_i)++];
    } else if (f[0] >= '0' && f[0] <= '9') {
        size_t k = 0;
        for (size_t j = 0; j < i; j++) {
            if (f[j] < '0' || f[j] > '9' || k > 1000000)
                rl__tp_fail(c, RL_ERR_FORMAT, off, "format: bad field index");
            k = k * 10 + (size_t)(f[j] - '0');
        }
        if (k >= a->n_pos)
            rl__tp_fail(c, RL_ERR_FORMAT, off, "format: Replacement index %zu out of range", k);
        v = a->pos[k];
    } else {
        tp_val *x = NULL;
        for (size_t k = 0; k < a->n_kw && !x; k++)
            if (strlen(a->kw[k]) == i && !memcmp(a->kw[k], f, i)) x = &a->kwv[k];
        if (!x)
            rl__tp_fail(c, RL_ERR_FORMAT, off, "format: KeyError '%.*s'", (int)(i > 60 ? 60 : i),
                        f);
        v = *x;
    }
    while (i < fn) {
        size_t st = i + 1, e = st;
        if (f[i] == '.') {
            while (e < fn && f[e] != '.' && f[e] != '[') e++;
            v = rl__tp_get_attr(c, v, rl__tp_strdup(c, f + st, e - st, off), off);
            i = e;
        } else {
            while (e < fn && f[e] != ']') e++;
            if (e >= fn) rl__tp_fail(c, RL_ERR_FORMAT, off, "format: missing ']' in format string");
            bool digits = e > st;
            for (size_t k = st; k < e; k++) digits = digits && f[k] >= '0' && f[k] <= '9';
            v = rl__tp_get_item(
                c, v,
                digits && e - st < 18
                    ? mk_int(strtoll(rl__tp_strdup(c, f + st, e - st, off), NULL, 10))
                    : tp_str(f + st, e - st),
                off);
            i = e + 1;
        }
        if (v.t == V_UNDEF) rl__tp_undefined(c, v, off);
    }
    return v;
}

/* Applies a format spec (the mini-language) to v. */
static void format_spec(tp_ctx *c, sbuf *b, tp_val v, const char *s, size_t sn, size_t off) {
    size_t i = 0;
    uint32_t fill = ' ';
    char align = 0, sign = '-';
    bool alt = false, zero = false;
    char group = 0;
    int64_t width = 0, prec = -1;
    uint32_t cp0 = 0;
    size_t w0 = sn ? rl_utf8_decode(s, sn, &cp0) : 0;
    if (w0 && w0 < sn && strchr("<>=^", s[w0])) {
        fill = cp0;
        align = s[w0];
        i = w0 + 1;
    } else if (sn && strchr("<>=^", s[0])) {
        align = s[0];
        i = 1;
    }
    if (i < sn && strchr("+- ", s[i])) sign = s[i++];
    if (i < sn && s[i] == '#') alt = true, i++;
    if (i < sn && s[i] == '0') zero = true, i++;
    while (i < sn && s[i] >= '0' && s[i] <= '9')
        if ((width = width * 10 + (s[i++] - '0')) > FMT_MAX)
            rl__tp_fail(c, RL_ERR_LIMIT, off, "format: width above %d", FMT_MAX);
    if (i < sn && (s[i] == ',' || s[i] == '_')) group = s[i++];
    if (i < sn && s[i] == '.') {
        prec = 0;
        for (i++; i < sn && s[i] >= '0' && s[i] <= '9';)
            if ((prec = prec * 10 + (s[i++] - '0')) > FMT_MAX)
                rl__tp_fail(c, RL_ERR_LIMIT, off, "format: precision above %d", FMT_MAX);
    }
    char type = i < sn ? s[i++] : 0;
    if (i < sn) rl__tp_fail(c, RL_ERR_FORMAT, off, "format: invalid format specifier");
    if (zero && !align) fill = '0', align = '=';
    char tmp[400];
    if (v.t == V_STR || type == 's' || (!type && !is_num(v))) {
        if (type && type != 's')
            rl__tp_fail(c, RL_ERR_FORMAT, off,
                        "format: unknown format code '%c' for object of type 'str'", type);
        tp_val t = rl__tp_to_str(c, v, off);
        size_t bn = prec >= 0 ? rl_utf8_offset(t.u.s.p, t.u.s.n, (size_t)prec) : t.u.s.n;
        emit_padded(c, b, "", t.u.s.p, bn, (size_t)width, align ? align : '<', fill, off);
        return;
    }
    if (!is_num(v))
        rl__tp_fail(c, RL_ERR_FORMAT, off,
                    "format: unsupported format string passed to %s.__format__",
                    rl__tp_type_name(v));
    bool is_int = v.t != V_FLOAT;
    if (!type) type = is_int ? 'd' : 'r';
    if (type == 'c') {
        size_t k =
            rl_utf8_encode((uint32_t)rl__tp_want_int(c, &v, "format c", off) & 0x1FFFFF, tmp);
        emit_padded(c, b, "", tmp, k, (size_t)width, align ? align : '<', fill, off);
        return;
    }
    bool neg = false;
    if (type == 'r') { /* a float with no type: repr, or %g-like with a precision */
        double d = num_f(v);
        neg = signbit(d) && !isnan(d);
        if (prec < 0)
            rl__tp_fmt_float(fabs(d), tmp, sizeof tmp);
        else
            fmt_number(c, v, 'g', prec ? (int)prec : 1, false, tmp, sizeof tmp, &neg, off);
    } else if (type == '%') {
        fmt_number(c, mk_float(num_f(v) * 100.0), 'f', prec < 0 ? 6 : (int)prec, alt, tmp,
                   sizeof tmp, &neg, off);
        strncat(tmp, "%", sizeof tmp - strlen(tmp) - 1);
    } else if (strchr("dbxXo", type)) {
        if (!is_int)
            rl__tp_fail(c, RL_ERR_FORMAT, off,
                        "format: unknown format code '%c' for object of type 'float'", type);
        fmt_number(c, v, type, 0, alt, tmp, sizeof tmp, &neg, off);
    } else if (strchr("eEfFgG", type)) {
        fmt_number(c, v, type, prec < 0 ? 6 : (int)prec, alt, tmp, sizeof tmp, &neg, off);
    } else {
        rl__tp_fail(c, RL_ERR_FORMAT, off, "format: unknown format code '%c'", type);
    }
    if (group) { /* thousands separators in the integer part */
        size_t dl = 0, st = tmp[0] == '0' && (tmp[1] == 'x' || tmp[1] == 'o' || tmp[1] == 'b' ||
                                              tmp[1] == 'X')
                                ? 2
                                : 0;
        while (tmp[st + dl] >= '0' && tmp[st + dl] <= '9') dl++;
        char g[450];
        size_t o = 0;
        memcpy(g, tmp, st);
        o = st;
        for (size_t k = 0; k < dl; k++) {
            g[o++] = tmp[st + k];
            if ((dl - k - 1) % 3 == 0 && k + 1 < dl) g[o++] = group;
        }
        snprintf(g + o, sizeof g - o, "%s", tmp + st + dl);
        size_t gl = strlen(g);
        if (gl >= sizeof tmp) gl = sizeof tmp - 1;
        memcpy(tmp, g, gl);
        tmp[gl] = 0;
    }
    const char *sg = neg ? "-" : sign == '+' ? "+" : sign == ' ' ? " " : "";
    emit_padded(c, b, sg, tmp, strlen(tmp), (size_t)width, align ? align : '>', fill, off);
}

tp_val rl__tp_str_format(tp_ctx *c, tp_val fmt, targs *a, size_t off) {
    sbuf b = {0};
    sput(c, &b, "", 0, off);
    const char *p = fmt.u.s.p;
    size_t n = fmt.u.s.n, i = 0, auto_i = 0;
    while (i < n) {
        char ch = p[i];
        if ((ch == '{' || ch == '}') && i + 1 < n && p[i + 1] == ch) {
            sput(c, &b, p + i, 1, off);
            i += 2;
            continue;
        }
        if (ch == '}')
            rl__tp_fail(c, RL_ERR_FORMAT, off, "format: Single '}' encountered in format string");
        if (ch != '{') {
            size_t e = i;
            while (e < n && p[e] != '{' && p[e] != '}') e++;
            sput(c, &b, p + i, e - i, off);
            i = e;
            continue;
        }
        step(c, off);
        size_t e = i + 1;
        while (e < n && p[e] != '}' && p[e] != '{') e++;
        if (e >= n || p[e] != '}')
            rl__tp_fail(
                c, RL_ERR_FORMAT, off,
                "format: expected '}' before end of string (nested fields are not supported)");
        const char *f = p + i + 1;
        size_t fl = e - i - 1, name_n = 0;
        while (name_n < fl && f[name_n] != '!' && f[name_n] != ':') name_n++;
        tp_val v = field_value(c, f, name_n, a, &auto_i, off);
        size_t k = name_n;
        if (k < fl && f[k] == '!') {
            if (k + 1 >= fl || (f[k + 1] != 's' && f[k + 1] != 'r' && f[k + 1] != 'a'))
                rl__tp_fail(c, RL_ERR_FORMAT, off, "format: bad conversion specifier");
            v = f[k + 1] == 's' ? rl__tp_to_str(c, v, off) : repr_of(c, v, off);
            k += 2;
        }
        if (k < fl && f[k] != ':')
            rl__tp_fail(c, RL_ERR_FORMAT, off, "format: expected ':' after conversion specifier");
        if (k < fl)
            format_spec(c, &b, v, f + k + 1, fl - k - 1, off);
        else {
            tp_val s = rl__tp_to_str(c, v, off);
            sput(c, &b, s.u.s.p, s.u.s.n, off);
        }
        i = e + 1;
    }
    return tp_str(b.p, b.n);
}
