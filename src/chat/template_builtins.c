/* Chat-template filters (`x | name(args)`), as jinja2 3.1 defines them,
 * with HF's tojson.
 *
 * Each follows the Python/jinja2 behaviour HF templates rely on; anything
 * unknown is an error naming the filter/test/method, never a silent no-op.
 * Every built-in is charged one step, and loops over values one per item.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "chat/chat-impl.h"

/* jinja2's filters that yield return generators */
static tp_val generator(tp_ctx *c, tp_val list, size_t off) {
    return mk_lazy(c, list.u.l, LK_ITER, "generator", off);
}

static tp_val attr_path(tp_ctx *c, tp_val x, tp_val *attr, size_t off) {
    if (attr && (attr->t == V_INT || attr->t == V_BOOL))
        return rl__tp_get_item(c, x, *attr, off); /* attribute=0 */
    tp_val an = rl__tp_want_str(c, attr, "attribute", off);
    /* dotted paths ("a.b") and integer components as jinja2 allows */
    size_t st = 0;
    for (size_t i = 0; i <= an.u.s.n; i++) {
        if (i < an.u.s.n && an.u.s.p[i] != '.') continue;
        const char *seg = an.u.s.p + st;
        size_t sl = i - st;
        bool digits = sl > 0;
        for (size_t k = 0; k < sl; k++) digits = digits && seg[k] >= '0' && seg[k] <= '9';
        if (digits && sl < 18)
            x = rl__tp_get_item(c, x, mk_int(strtoll(rl__tp_strdup(c, seg, sl, off), NULL, 10)),
                                off);
        else
            x = rl__tp_get_item(c, x, tp_str(seg, sl), off); /* jinja2's attrgetter uses getitem */
        st = i + 1;
    }
    return x;
}

tp_val rl__tp_join(tp_ctx *c, tp_val v, tp_val *sep, tp_val *attr, size_t off) {
    tp_list *l = rl__tp_iterate(c, v, off);
    tp_val sp = sep ? rl__tp_to_str(c, *sep, off) : tp_str("", 0);
    char *buf = NULL;
    size_t bl = 0, bc = 0;
    rl__tp_buf_put(c, &buf, &bl, &bc, "", 0, off);
    for (size_t i = 0; i < l->n; i++) {
        if (i) rl__tp_buf_put(c, &buf, &bl, &bc, sp.u.s.p, sp.u.s.n, off);
        tp_val x = attr ? attr_path(c, l->v[i], attr, off) : l->v[i];
        tp_val s = rl__tp_to_str(c, x, off);
        rl__tp_buf_put(c, &buf, &bl, &bc, s.u.s.p, s.u.s.n, off);
    }
    return tp_str(buf, bl);
}

/* Stable merge sort (the comparator may longjmp, so no qsort). */
static void sort_vals(tp_ctx *c, tp_val *v, tp_val *keys, size_t n, bool rev, size_t off) {
    if (n < 2) return;
    tp_val *tv = rl__tp_alloc_array(c, n, sizeof(tp_val), off);
    tp_val *tk = rl__tp_alloc_array(c, n, sizeof(tp_val), off);
    for (size_t w = 1; w < n; w *= 2) {
        for (size_t lo = 0; lo < n; lo += 2 * w) {
            size_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
            size_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi) {
                step(c, off);
                int r = rl__tp_compare_order(c, keys[j], keys[i], TP_OP_LT, 0, off);
                bool take_j = rev ? r > 0 : r < 0;
                if (take_j) {
                    tv[k] = v[j];
                    tk[k++] = keys[j++];
                } else {
                    tv[k] = v[i];
                    tk[k++] = keys[i++];
                }
            }
            while (i < mid) tv[k] = v[i], tk[k++] = keys[i++];
            while (j < hi) tv[k] = v[j], tk[k++] = keys[j++];
        }
        memcpy(v, tv, n * sizeof(tp_val));
        memcpy(keys, tk, n * sizeof(tp_val));
    }
}

/* select/reject/selectattr/rejectattr: test each item (or item.attr). */
static tp_val do_select(tp_ctx *c, tp_val v, targs *a, bool by_attr, bool keep_if, size_t off) {
    if (!rl__tp_truthy(v))
        return generator(c, mk_list(c, 0, false, off), off); /* jinja2: `if value:` */
    tp_list *l = rl__tp_iterate(c, v, off);
    size_t first = by_attr ? 1 : 0;
    tp_val *attr = by_attr ? arg(a, 0, NULL) : NULL;
    if (by_attr && !attr) rl__tp_fail(c, RL_ERR_FORMAT, off, "selectattr: missing attribute name");
    tp_val *tname = arg(a, first, NULL);
    const char *test =
        tname ? rl__tp_strdup(c, rl__tp_want_str(c, tname, "select", off).u.s.p, tname->u.s.n, off)
              : NULL;
    targs ta = {0};
    if (a->n_pos > first + 1) {
        ta.pos = a->pos + first + 1;
        ta.n_pos = a->n_pos - first - 1;
    }
    tp_val out = mk_list(c, 0, false, off);
    size_t cap = 0;
    for (size_t i = 0; i < l->n; i++) {
        step(c, off);
        tp_val x = by_attr ? attr_path(c, l->v[i], attr, off) : l->v[i];
        bool r = test ? rl__tp_test(c, test, x, &ta, off) : rl__tp_truthy(x);
        if (r == keep_if) rl__tp_list_append(c, out.u.l, &cap, l->v[i], off);
    }
    return generator(c, out, off);
}

static tp_val do_map(tp_ctx *c, tp_val v, targs *a, size_t off) {
    if (!rl__tp_truthy(v))
        return generator(c, mk_list(c, 0, false, off), off); /* jinja2: `if value:` */
    tp_list *l = rl__tp_iterate(c, v, off);
    tp_val out = mk_list(c, l->n, false, off);
    tp_val *attr = NULL, *def = NULL;
    for (size_t k = 0; k < a->n_kw; k++) {
        if (!strcmp(a->kw[k], "attribute")) attr = &a->kwv[k];
        if (!strcmp(a->kw[k], "default")) def = &a->kwv[k];
    }
    const char *filt = NULL;
    targs fa = {0};
    if (!attr) {
        tp_val *f = arg(a, 0, NULL);
        tp_val fs = rl__tp_want_str(c, f, "map", off);
        filt = rl__tp_strdup(c, fs.u.s.p, fs.u.s.n, off);
        if (a->n_pos > 1) {
            fa.pos = a->pos + 1;
            fa.n_pos = a->n_pos - 1;
        }
    }
    for (size_t i = 0; i < l->n; i++) {
        step(c, off);
        if (attr) {
            tp_val x = attr_path(c, l->v[i], attr, off);
            out.u.l->v[i] = (x.t == V_UNDEF && def) ? *def : x;
        } else {
            out.u.l->v[i] = rl__tp_filter(c, filt, l->v[i], &fa, off);
        }
    }
    return generator(c, out, off);
}

/* jinja2's indent: the text plus a newline, split into lines (Python's
 * splitlines), rejoined with "\n" + indentation on all lines but the first
 * (blank lines only with blank=true). */
static tp_val do_indent(tp_ctx *c, tp_val s, targs *a, size_t off) {
    tp_val *wv = arg(a, 0, "width");
    tp_val pad;
    if (wv && wv->t == V_STR)
        pad = *wv;
    else
        pad = rl__tp_repeat(c, tp_str(" ", 1), wv ? rl__tp_want_int(c, wv, "indent", off) : 4, off);
    tp_val *fv = arg(a, 1, "first"), *bv = arg(a, 2, "blank");
    bool first = fv && rl__tp_truthy(*fv), blank = bv && rl__tp_truthy(*bv);
    tp_val withnl = rl__tp_binop(c, TP_OP_ADD, tp_str(s.u.s.p, s.u.s.n), tp_str("\n", 1), off);
    tp_list *lines = rl__tp_str_splitlines(c, withnl, false, off).u.l;
    char *buf = NULL;
    size_t bl = 0, bc = 0;
    rl__tp_buf_put(c, &buf, &bl, &bc, "", 0, off);
    if (first) rl__tp_buf_put(c, &buf, &bl, &bc, pad.u.s.p, pad.u.s.n, off);
    for (size_t i = 0; i < lines->n; i++) {
        tp_val ln = lines->v[i];
        if (i) {
            rl__tp_buf_put(c, &buf, &bl, &bc, "\n", 1, off);
            if (blank || ln.u.s.n) rl__tp_buf_put(c, &buf, &bl, &bc, pad.u.s.p, pad.u.s.n, off);
        }
        rl__tp_buf_put(c, &buf, &bl, &bc, ln.u.s.p, ln.u.s.n, off);
    }
    tp_val r = tp_str(buf, bl);
    r.safe = s.safe;
    return r;
}

tp_val rl__tp_dict_items(tp_ctx *c, tp_dict *d, int which, size_t off) {
    /* which: 0 items, 1 keys, 2 values; a plain list of them */
    tp_val l = mk_list(c, d->n, false, off);
    for (size_t i = 0; i < d->n; i++) {
        if (which == 1)
            l.u.l->v[i] = d->k[i];
        else if (which == 2)
            l.u.l->v[i] = d->v[i];
        else {
            tp_val t = mk_list(c, 2, true, off);
            t.u.l->v[0] = d->k[i];
            t.u.l->v[1] = d->v[i];
            l.u.l->v[i] = t;
        }
    }
    return l;
}

/* Python int(str, base) for base 0 or 2..36: whitespace around, a sign, a
 * 0x/0o/0b prefix where the base allows it, single underscores between
 * digits.  False when it is not such a literal or does not fit. */
static bool parse_int_base(const char *p, size_t n, int base, int64_t *out) {
    size_t i = 0, w;
    while (i < n && rl__tp_is_space_at(p, n, i, &w)) i += w;
    while (n > i && rl__tp_is_space_before(p, n, &w)) n -= w;
    bool neg = false;
    if (i < n && (p[i] == '+' || p[i] == '-')) neg = p[i++] == '-';
    if (i + 1 < n && p[i] == '0') {
        char x = (char)(p[i + 1] | 32);
        int pb = x == 'x' ? 16 : x == 'o' ? 8 : x == 'b' ? 2 : 0;
        if (pb && (base == 0 || base == pb)) {
            base = pb;
            i += 2;
            if (i < n && p[i] == '_') i++;
        }
    }
    if (base == 0) {
        base = 10;
        if (i + 1 < n && p[i] == '0') { /* base 0: no leading zeros unless all zeros */
            for (size_t k = i; k < n; k++)
                if (p[k] != '0' && p[k] != '_') return false;
        }
    }
    if (i >= n) return false;
    uint64_t v = 0;
    bool prev_digit = false;
    for (; i < n; i++) {
        char ch = p[i];
        if (ch == '_' && prev_digit && i + 1 < n && p[i + 1] != '_') {
            prev_digit = false;
            continue;
        }
        int d = ch >= '0' && ch <= '9'                 ? ch - '0'
                : (ch | 32) >= 'a' && (ch | 32) <= 'z' ? (ch | 32) - 'a' + 10
                                                       : 99;
        if (d >= base) return false;
        if (v > (UINT64_MAX - (uint64_t)d) / (uint64_t)base) return false;
        v = v * (uint64_t)base + (uint64_t)d;
        prev_digit = true;
    }
    if (!prev_digit || v > (uint64_t)INT64_MAX + neg) return false;
    *out = neg ? (int64_t)(0 - v) : (int64_t)v;
    return true;
}

/* jinja2's |int (default, base) and |float (default). */
static tp_val parse_number(tp_ctx *c, tp_val v, bool as_float, tp_val def, int base, size_t off) {
    (void)c;
    (void)off;
    if (v.t == V_INT || v.t == V_BOOL)
        return as_float ? mk_float((double)num_i(v)) : mk_int(num_i(v));
    if (v.t == V_FLOAT) {
        if (as_float) return v;
        if (!isfinite(v.u.f) || fabs(v.u.f) >= 9.2e18) return def;
        return mk_int((int64_t)v.u.f);
    }
    if (v.t != V_STR || v.u.s.n == 0 || v.u.s.n > 64) return def;
    int64_t iv;
    if (!as_float && parse_int_base(v.u.s.p, v.u.s.n, base, &iv)) return mk_int(iv);
    char buf[80];
    memcpy(buf, v.u.s.p, v.u.s.n);
    buf[v.u.s.n] = 0;
    char *st = buf, *end;
    while (*st == ' ' || (*st >= '\t' && *st <= '\r')) st++;
    if ((st[0] == '0' && (st[1] | 32) == 'x') ||
        ((st[0] == '-' || st[0] == '+') && st[1] == '0' && (st[2] | 32) == 'x'))
        return def; /* strtod reads hex floats; Python's float() does not */
    double f = strtod(st, &end);
    while (*end == ' ' || (*end >= '\t' && *end <= '\r')) end++;
    if (*end || end == st) return def;
    if (as_float) return mk_float(f);
    if (!isfinite(f) || fabs(f) >= 9.2e18) return def;
    return mk_int((int64_t)f);
}

/* The key jinja2 sorts, dedups and compares by: item, or item.attr (dotted
 * path); strings lowered unless case_sensitive. */
static tp_val item_key(tp_ctx *c, tp_val item, tp_val *attr, bool case_sensitive, size_t off) {
    tp_val k = attr && attr->t != V_NONE ? attr_path(c, item, attr, off) : item;
    if (!case_sensitive && k.t == V_STR) k = rl__tp_str_case(c, k, 0, off);
    return k;
}

/* |sort's key: a list of one key per comma-separated attribute. */
static tp_val multi_key(tp_ctx *c, tp_val item, tp_val *attr, bool cs, size_t off) {
    if (!attr || attr->t != V_STR || !memchr(attr->u.s.p, ',', attr->u.s.n)) {
        tp_val l = mk_list(c, 1, false, off);
        l.u.l->v[0] = item_key(c, item, attr, cs, off);
        return l;
    }
    tp_list *parts =
        rl__tp_str_split(c, *attr, &(tp_val){.t = V_STR, .u.s = {",", 1}}, NULL, off).u.l;
    tp_val l = mk_list(c, parts->n, false, off);
    for (size_t i = 0; i < parts->n; i++) l.u.l->v[i] = item_key(c, item, &parts->v[i], cs, off);
    return l;
}

static bool hashable(tp_val v) {
    return !(v.t == V_DICT || v.t == V_NS || (v.t == V_LIST && !v.u.l->tuple));
}

static tp_val do_unique(tp_ctx *c, tp_val v, targs *a, size_t off) {
    tp_val *csv = arg(a, 0, "case_sensitive"), *attr = arg(a, 1, "attribute");
    bool cs = csv && rl__tp_truthy(*csv);
    tp_list *l = rl__tp_iterate(c, v, off);
    tp_val out = mk_list(c, 0, false, off), seen = mk_list(c, 0, false, off);
    size_t cap = 0, scap = 0;
    for (size_t i = 0; i < l->n; i++) {
        tp_val k = item_key(c, l->v[i], attr, cs, off);
        if (!hashable(k))
            rl__tp_fail(c, RL_ERR_FORMAT, off, "unique: unhashable type: '%s'",
                        rl__tp_type_name(k));
        bool dup = false;
        for (size_t j = 0; j < seen.u.l->n && !dup; j++) {
            step(c, off);
            dup = rl__tp_equal(c, seen.u.l->v[j], k, 0, off);
        }
        if (dup) continue;
        rl__tp_list_append(c, seen.u.l, &scap, k, off);
        rl__tp_list_append(c, out.u.l, &cap, l->v[i], off);
    }
    return generator(c, out, off);
}

static tp_val do_sort(tp_ctx *c, tp_val v, targs *a, size_t off) {
    tp_val *rv = arg(a, 0, "reverse"), *csv = arg(a, 1, "case_sensitive"),
           *attr = arg(a, 2, "attribute");
    bool cs = csv && rl__tp_truthy(*csv);
    tp_list *l = rl__tp_iterate(c, v, off);
    tp_val out = mk_list(c, l->n, false, off);
    tp_val keys = mk_list(c, l->n, false, off);
    for (size_t i = 0; i < l->n; i++) {
        out.u.l->v[i] = l->v[i];
        keys.u.l->v[i] = multi_key(c, l->v[i], attr, cs, off);
    }
    sort_vals(c, out.u.l->v, keys.u.l->v, l->n, rv && rl__tp_truthy(*rv), off);
    return out;
}

/* |dictsort(case_sensitive=false, by='key', reverse=false): sorted items */
static tp_val do_dictsort(tp_ctx *c, tp_val v, targs *a, size_t off) {
    tp_val *csv = arg(a, 0, "case_sensitive"), *byv = arg(a, 1, "by"), *rv = arg(a, 2, "reverse");
    if (v.t != V_DICT)
        rl__tp_fail(c, RL_ERR_FORMAT, off, "dictsort: '%s' object has no attribute 'items'",
                    rl__tp_type_name(v));
    int pos = 0;
    if (byv) {
        tp_val by = rl__tp_want_str(c, byv, "dictsort by", off);
        if (by.u.s.n == 5 && !memcmp(by.u.s.p, "value", 5))
            pos = 1;
        else if (!(by.u.s.n == 3 && !memcmp(by.u.s.p, "key", 3)))
            rl__tp_fail(c, RL_ERR_FORMAT, off,
                        "dictsort: You can only sort by either \"key\" or \"value\"");
    }
    bool cs = csv && rl__tp_truthy(*csv);
    tp_val items = rl__tp_dict_items(c, v.u.d, 0, off);
    tp_val keys = mk_list(c, items.u.l->n, false, off);
    for (size_t i = 0; i < items.u.l->n; i++)
        keys.u.l->v[i] = item_key(c, items.u.l->v[i].u.l->v[pos], NULL, cs, off);
    sort_vals(c, items.u.l->v, keys.u.l->v, items.u.l->n, rv && rl__tp_truthy(*rv), off);
    return items;
}

/* |min / |max(case_sensitive=false, attribute=none): the first extreme item */
static tp_val do_minmax(tp_ctx *c, tp_val v, targs *a, bool is_max, size_t off) {
    tp_val *csv = arg(a, 0, "case_sensitive"), *attr = arg(a, 1, "attribute");
    bool cs = csv && rl__tp_truthy(*csv);
    tp_list *l = rl__tp_iterate(c, v, off);
    if (!l->n) return mk_undef_hint("No aggregated item, sequence was empty.");
    size_t best = 0;
    tp_val bk = item_key(c, l->v[0], attr, cs, off);
    for (size_t i = 1; i < l->n; i++) {
        step(c, off);
        tp_val k = item_key(c, l->v[i], attr, cs, off);
        int r = rl__tp_compare_order(c, k, bk, is_max ? TP_OP_GT : TP_OP_LT, 0, off);
        if (is_max ? r > 0 : r < 0) best = i, bk = k;
    }
    return l->v[best];
}

/* |sum(attribute=none, start=0) */
static tp_val do_sum(tp_ctx *c, tp_val v, targs *a, size_t off) {
    tp_val *attr = arg(a, 0, "attribute"), *sv = arg(a, 1, "start");
    tp_val acc = sv ? *sv : mk_int(0);
    if (acc.t == V_STR)
        rl__tp_fail(c, RL_ERR_FORMAT, off, "sum() can't sum strings [use ''.join(seq) instead]");
    tp_list *l = rl__tp_iterate(c, v, off);
    for (size_t i = 0; i < l->n; i++) {
        step(c, off);
        tp_val x = attr && attr->t != V_NONE ? attr_path(c, l->v[i], attr, off) : l->v[i];
        acc = rl__tp_binop(c, TP_OP_ADD, acc, x, off);
    }
    return acc;
}

/* |batch(linecount, fill_with=none) and |slice(slices, fill_with=none):
 * generators of lists. */
static tp_val do_batch(tp_ctx *c, tp_val v, targs *a, bool slice, size_t off) {
    int64_t k = rl__tp_want_int(c, arg(a, 0, slice ? "slices" : "linecount"),
                                slice ? "slice" : "batch", off);
    tp_val *fill = arg(a, 1, "fill_with");
    if (fill && fill->t == V_NONE) fill = NULL;
    if (k <= 0)
        rl__tp_fail(c, RL_ERR_FORMAT, off, "%s: the count must be positive",
                    slice ? "slice" : "batch");
    tp_list *l = rl__tp_iterate(c, v, off);
    size_t n = l->n, per = slice ? n / (size_t)k : (size_t)k;
    size_t groups = slice ? (size_t)k : (n + per - 1) / per;
    if (groups > c->lim.max_memory / sizeof(tp_val))
        rl__tp_fail(c, RL_ERR_LIMIT, off, "slice: too many slices");
    tp_val out = mk_list(c, groups, false, off);
    size_t extra = slice ? n % (size_t)k : 0, st = 0;
    for (size_t g = 0; g < groups; g++) {
        step(c, off);
        size_t cnt = slice ? per + (g < extra) : (n - st < per ? n - st : per);
        bool pad = fill && (slice ? g >= extra : cnt < per);
        size_t tot = cnt + (pad ? (slice ? 1 : per - cnt) : 0);
        tp_val grp = mk_list(c, tot, false, off);
        for (size_t i = 0; i < tot; i++) grp.u.l->v[i] = i < cnt ? l->v[st + i] : *fill;
        out.u.l->v[g] = grp;
        st += cnt;
    }
    return generator(c, out, off);
}

/* |round(precision=0, method='common'): Python's round() (correctly
 * rounded, halves to even; an int stays an int), or math.ceil / floor
 * scaled by 10**precision (always a float). */
static tp_val do_round(tp_ctx *c, tp_val v, targs *a, size_t off) {
    if (!is_num(v))
        rl__tp_fail(c, RL_ERR_FORMAT, off, "round: expected a number, got %s", rl__tp_type_name(v));
    tp_val *pv = arg(a, 0, "precision"), *mv = arg(a, 1, "method");
    int64_t prec = pv ? rl__tp_want_int(c, pv, "round", off) : 0;
    if (prec < -330 || prec > 330) prec = prec < 0 ? -330 : 330;
    int method = 0;
    if (mv) {
        tp_val m = rl__tp_want_str(c, mv, "round method", off);
        if (m.u.s.n == 4 && !memcmp(m.u.s.p, "ceil", 4))
            method = 1;
        else if (m.u.s.n == 5 && !memcmp(m.u.s.p, "floor", 5))
            method = 2;
        else if (!(m.u.s.n == 6 && !memcmp(m.u.s.p, "common", 6)))
            rl__tp_fail(c, RL_ERR_FORMAT, off, "round: method must be common, ceil or floor");
    }
    double x = num_f(v), scale = pow(10.0, (double)prec);
    if (method) return mk_float((method == 1 ? ceil(x * scale) : floor(x * scale)) / scale);
    if (v.t != V_FLOAT) { /* round(int, n): exact for n >= 0 */
        if (prec >= 0) return mk_int(num_i(v));
        double r = nearbyint(x / pow(10.0, (double)-prec)) * pow(10.0, (double)-prec);
        if (fabs(r) >= 9.2e18)
            rl__tp_fail(c, RL_ERR_RANGE, off, "round: result does not fit a 64-bit integer");
        return mk_int((int64_t)r);
    }
    if (!isfinite(x)) return v;
    if (prec < 0)
        return mk_float(nearbyint(x / pow(10.0, (double)-prec)) * pow(10.0, (double)-prec));
    char buf[400];
    snprintf(buf, sizeof buf, "%.*f", (int)(prec > 300 ? 300 : prec),
             x); /* glibc rounds exactly, ties to even */
    return mk_float(strtod(buf, NULL));
}

/* |truncate(length=255, killwords=false, end='...', leeway=5) */
static tp_val do_truncate(tp_ctx *c, tp_val s, targs *a, size_t off) {
    tp_val *lv = arg(a, 0, "length"), *kv = arg(a, 1, "killwords"), *ev = arg(a, 2, "end"),
           *wv = arg(a, 3, "leeway");
    int64_t length = lv ? rl__tp_want_int(c, lv, "truncate length", off) : 255;
    int64_t leeway = wv && wv->t != V_NONE ? rl__tp_want_int(c, wv, "truncate leeway", off) : 5;
    tp_val end = ev ? rl__tp_want_str(c, ev, "truncate end", off) : tp_str("...", 3);
    int64_t el = (int64_t)rl_utf8_count(end.u.s.p, end.u.s.n),
            n = (int64_t)rl_utf8_count(s.u.s.p, s.u.s.n);
    if (length < el)
        rl__tp_fail(c, RL_ERR_FORMAT, off, "truncate: expected length >= %lld, got %lld",
                    (long long)el, (long long)length);
    if (leeway < 0)
        rl__tp_fail(c, RL_ERR_FORMAT, off, "truncate: expected leeway >= 0, got %lld",
                    (long long)leeway);
    if (n <= length + leeway) return s;
    size_t cut = rl_utf8_offset(s.u.s.p, s.u.s.n, (size_t)(length - el));
    tp_val head = tp_str(s.u.s.p, cut);
    if (!(kv && rl__tp_truthy(*kv))) { /* drop the last partial word: rsplit(' ', 1)[0] */
        const char *sp = NULL;
        for (size_t i = cut; i-- > 0;)
            if (s.u.s.p[i] == ' ') {
                sp = s.u.s.p + i;
                break;
            }
        if (sp) head.u.s.n = (size_t)(sp - s.u.s.p);
    }
    return rl__tp_binop(c, TP_OP_ADD, head, end, off);
}

/* Python's \w+ runs (re.findall(r"\w+")): letters, digits and '_'. */
static int64_t word_count(tp_val s) {
    int64_t n = 0;
    bool in = false;
    for (size_t i = 0; i < s.u.s.n;) {
        uint32_t cp;
        size_t w = rl_utf8_decode(s.u.s.p + i, s.u.s.n - i, &cp);
        if (!w) w = 1, cp = 0xFFFD;
        bool word = cp == '_' || (cp >= '0' && cp <= '9') || rl__tp_cp_alpha(cp);
        if (word && !in) n++;
        in = word;
        i += w;
    }
    return n;
}

/* HF's tojson: json.dumps(v, ensure_ascii=False, indent=None, separators=None,
 * sort_keys=False), keywords or positional in that order. */
static tp_val do_tojson(tp_ctx *c, tp_val v, targs *a, size_t off) {
    tp_val *av = arg(a, 0, "ensure_ascii"), *iv = arg(a, 1, "indent"),
           *sv = arg(a, 2, "separators"), *kv = arg(a, 3, "sort_keys");
    tp_jsonopt o = {.ensure_ascii = av && rl__tp_truthy(*av),
                    .sort_keys = kv && rl__tp_truthy(*kv)};
    o.indent = "";
    if (iv && iv->t != V_NONE) {
        o.pretty = true;
        if (iv->t == V_STR) {
            o.indent = iv->u.s.p;
            o.indent_n = iv->u.s.n;
        } else {
            int64_t k = rl__tp_want_int(c, iv, "tojson indent", off);
            if (k > 64) k = 64;
            tp_val pad = rl__tp_repeat(c, tp_str(" ", 1), k, off);
            o.indent = pad.u.s.p;
            o.indent_n = pad.u.s.n;
        }
    }
    o.item_sep = o.pretty ? "," : ", ";
    o.key_sep = ": ";
    if (sv && sv->t != V_NONE) {
        if (!is_seq(*sv) || sv->u.l->n != 2 || sv->u.l->v[0].t != V_STR || sv->u.l->v[1].t != V_STR)
            rl__tp_fail(c, RL_ERR_FORMAT, off, "tojson: separators must be a pair of strings");
        o.item_sep = sv->u.l->v[0].u.s.p;
        o.item_sep_n = sv->u.l->v[0].u.s.n;
        o.key_sep = sv->u.l->v[1].u.s.p;
        o.key_sep_n = sv->u.l->v[1].u.s.n;
    } else {
        o.item_sep_n = strlen(o.item_sep);
        o.key_sep_n = 2;
    }
    char *buf = NULL;
    size_t bl = 0, bc = 0;
    rl__tp_buf_put(c, &buf, &bl, &bc, "", 0, off);
    rl__tp_json(c, v, &buf, &bl, &bc, &o, 0, off);
    return tp_str(buf, bl);
}

tp_val rl__tp_filter(tp_ctx *c, const char *name, tp_val v, targs *a, size_t off) {
    step(c, off);
    tp_val *a0 = arg(a, 0, NULL);
#define IS(s) (strcmp(name, (s)) == 0)
    if (IS("default") || IS("d")) {
        tp_val *dv = arg(a, 0, "default_value");
        tp_val *bv = arg(a, 1, "boolean");
        bool boolean = bv && rl__tp_truthy(*bv);
        if (v.t == V_UNDEF || (boolean && !rl__tp_truthy(v))) return dv ? *dv : tp_str("", 0);
        return v;
    }
    if (IS("safe")) { /* markupsafe.Markup(v) */
        v = rl__tp_to_str(c, v, off);
        v.safe = true;
        return v;
    }
    if (IS("escape") || IS("e")) return rl__tp_escape(c, v, off);
    if (IS("forceescape")) {
        v = rl__tp_to_str(c, v, off);
        v.safe = false;
        return rl__tp_escape(c, v, off);
    }
    if (IS("string")) return rl__tp_to_str(c, v, off);
    if (IS("tojson")) return do_tojson(c, v, a, off);
    if (IS("length") || IS("count")) {
        if (v.t == V_LIST && v.u.l->kind == LK_ITER)
            rl__tp_fail(c, RL_ERR_FORMAT, off, "object of type '%s' has no len()", v.u.l->tname);
        if (v.t == V_STR) {
            rl__tp_charge(c, v.u.s.n, off);
            return mk_int((int64_t)rl_utf8_count(v.u.s.p, v.u.s.n));
        }
        if (v.t == V_LIST) return mk_int((int64_t)v.u.l->n);
        if (v.t == V_DICT || v.t == V_NS) return mk_int((int64_t)v.u.d->n);
        if (v.t == V_UNDEF) return mk_int(0);
        rl__tp_fail(c, RL_ERR_FORMAT, off, "object of type '%s' has no len()", rl__tp_type_name(v));
    }
    if (IS("list")) {
        tp_list *l = rl__tp_iterate(c, v, off);
        tp_val r = mk_list(c, l->n, false, off);
        if (l->n) memcpy(r.u.l->v, l->v, l->n * sizeof(tp_val));
        return r;
    }
    if (IS("items")) {
        if (v.t == V_UNDEF) return generator(c, mk_list(c, 0, false, off), off);
        if (v.t != V_DICT)
            rl__tp_fail(c, RL_ERR_FORMAT, off,
                        "items: Can only get item pairs from a mapping, not %s",
                        rl__tp_type_name(v));
        return generator(c, rl__tp_dict_items(c, v.u.d, 0, off), off);
    }
    if (IS("first")) {
        if (v.t == V_LIST && v.u.l->kind == LK_ITER) { /* next(): takes one item */
            if (!v.u.l->n) return mk_undef(NULL);
            v.u.l->n--;
            return *v.u.l->v++;
        }
        tp_list *l = rl__tp_iterate(c, v, off);
        return l->n ? l->v[0] : mk_undef(NULL);
    }
    if (IS("last")) {
        if (v.t == V_LIST && v.u.l->kind == LK_ITER)
            rl__tp_fail(c, RL_ERR_FORMAT, off, "last: '%s' object is not reversible", v.u.l->tname);
        tp_list *l = rl__tp_iterate(c, v, off);
        return l->n ? l->v[l->n - 1] : mk_undef(NULL);
    }
    if (IS("reverse")) { /* str -> str; list/tuple -> an iterator; other iterables -> a list */
        bool lazy = is_seq(v);
        tp_list *l = rl__tp_iterate(c, v, off);
        tp_val r = mk_list(c, l->n, false, off);
        for (size_t i = 0; i < l->n; i++) r.u.l->v[i] = l->v[l->n - 1 - i];
        if (lazy)
            return mk_lazy(c, r.u.l, LK_ITER, v.u.l->tuple ? "reversed" : "list_reverseiterator",
                           off);
        if (v.t != V_STR) return r;
        tp_val s = rl__tp_join(c, r, NULL, NULL, off);
        s.safe = v.safe;
        return s;
    }
    if (IS("join")) return rl__tp_join(c, v, arg(a, 0, "d"), arg(a, 1, "attribute"), off);
    if (IS("map")) return do_map(c, v, a, off);
    if (IS("select") || IS("reject")) return do_select(c, v, a, false, IS("select"), off);
    if (IS("selectattr") || IS("rejectattr"))
        return do_select(c, v, a, true, IS("selectattr"), off);
    if (IS("unique")) return do_unique(c, v, a, off);
    if (IS("sort")) return do_sort(c, v, a, off);
    if (IS("dictsort")) return do_dictsort(c, v, a, off);
    if (IS("min") || IS("max")) return do_minmax(c, v, a, IS("max"), off);
    if (IS("sum")) return do_sum(c, v, a, off);
    if (IS("batch") || IS("slice")) return do_batch(c, v, a, IS("slice"), off);
    if (IS("attr")) { /* getattr only: methods, loop and macro attributes, not dict keys */
        tp_val nm = rl__tp_to_str(c, a0 ? *a0 : mk_undef(NULL), off);
        char *k = rl__tp_strdup(c, nm.u.s.p, nm.u.s.n, off);
        if (v.t == V_DICT || v.t == V_UNDEF)
            return rl__tp_method_kind(v, k) ? rl__tp_get_attr(c, v, k, off) : mk_undef(NULL);
        return rl__tp_get_attr(c, v, k, off);
    }
    if (IS("int")) {
        tp_val *bv = arg(a, 1, "base");
        int64_t base = bv ? rl__tp_want_int(c, bv, "int base", off) : 10;
        if (base != 0 && (base < 2 || base > 36))
            rl__tp_fail(c, RL_ERR_FORMAT, off, "int() base must be >= 2 and <= 36, or 0");
        return parse_number(c, v, false, (a0 = arg(a, 0, "default")) ? *a0 : mk_int(0), (int)base,
                            off);
    }
    if (IS("float"))
        return parse_number(c, v, true, (a0 = arg(a, 0, "default")) ? *a0 : mk_float(0.0), 10, off);
    if (IS("abs")) {
        if (v.t == V_FLOAT) return mk_float(fabs(v.u.f));
        if (v.t == V_INT || v.t == V_BOOL) {
            if (num_i(v) == INT64_MIN) rl__tp_fail(c, RL_ERR_RANGE, off, "integer overflow in abs");
            return mk_int(num_i(v) < 0 ? -num_i(v) : num_i(v));
        }
        rl__tp_fail(c, RL_ERR_FORMAT, off, "bad operand type for abs(): '%s'", rl__tp_type_name(v));
    }
    if (IS("round")) return do_round(c, v, a, off);
    if (IS("wordcount")) return mk_int(word_count(rl__tp_to_str(c, v, off)));
    if (IS("format")) { /* soft_str(value) % (kwargs or args) */
        if (a->n_pos && a->n_kw)
            rl__tp_fail(c, RL_ERR_FORMAT, off,
                        "format: can't handle positional and keyword arguments at the same time");
        tp_val args;
        if (a->n_kw) {
            args = mk_dict(c, a->n_kw, off);
            for (size_t i = 0; i < a->n_kw; i++)
                rl__tp_dict_set(c, args.u.d, tp_str(a->kw[i], strlen(a->kw[i])), a->kwv[i], off);
        } else {
            args = mk_list(c, a->n_pos, true, off);
            for (size_t i = 0; i < a->n_pos; i++) args.u.l->v[i] = a->pos[i];
        }
        return rl__tp_percent_format(c, rl__tp_to_str(c, v, off), args, off);
    }
    /* the rest operate on strings */
    if (v.t == V_UNDEF) v = tp_str("", 0);
    if (IS("indent")) return do_indent(c, rl__tp_to_str(c, v, off), a, off);
    if (IS("trim"))
        return rl__tp_str_strip(c, rl__tp_to_str(c, v, off), arg(a, 0, "chars"), true, true, off);
    if (IS("upper")) return rl__tp_str_case(c, rl__tp_to_str(c, v, off), 1, off);
    if (IS("lower")) return rl__tp_str_case(c, rl__tp_to_str(c, v, off), 0, off);
    if (IS("capitalize")) return rl__tp_str_case(c, rl__tp_to_str(c, v, off), 2, off);
    if (IS("title")) return rl__tp_str_case(c, rl__tp_to_str(c, v, off), 4, off);
    if (IS("center")) {
        tp_val *wv = arg(a, 0, "width");
        return rl__tp_str_pad(c, rl__tp_to_str(c, v, off),
                              wv ? wv : &(tp_val){.t = V_INT, .u.i = 80}, NULL, 0, off);
    }
    if (IS("truncate")) return do_truncate(c, rl__tp_to_str(c, v, off), a, off);
    if (IS("replace"))
        return rl__tp_str_replace(c, rl__tp_to_str(c, v, off), arg(a, 0, "old"), arg(a, 1, "new"),
                                  arg(a, 2, "count"), off);
#undef IS
    rl__tp_fail(c, RL_ERR_UNSUPPORTED, off, "unknown filter '%s'", name);
}
