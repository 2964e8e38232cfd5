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
static tp_val generator(tp_ctx *c, tp_val list, size_t off) { return mk_lazy(c, list.u.l, LK_ITER, "generator", off); }

static tp_val attr_path(tp_ctx *c, tp_val x, tp_val *attr, size_t off) {
    tp_val an = rl__tp_want_str(c, attr, "attribute", off);
    /* dotted paths ("a.b") and integer components as jinja2 allows */
    size_t st = 0;
    for (size_t i = 0; i <= an.u.s.n; i++) {
        if (i < an.u.s.n && an.u.s.p[i] != '.') continue;
        const char *seg = an.u.s.p + st;
        size_t sl = i - st;
        bool digits = sl > 0;
        for (size_t k = 0; k < sl; k++) digits = digits && seg[k] >= '0' && seg[k] <= '9';
        if (digits && sl < 18) x = rl__tp_get_item(c, x, mk_int(strtoll(rl__tp_strdup(c, seg, sl, off), NULL, 10)), off);
        else x = rl__tp_get_item(c, x, tp_str(seg, sl), off); /* jinja2's attrgetter uses getitem */
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
    if (!rl__tp_truthy(v)) return generator(c, mk_list(c, 0, false, off), off); /* jinja2: `if value:` */
    tp_list *l = rl__tp_iterate(c, v, off);
    size_t first = by_attr ? 1 : 0;
    tp_val *attr = by_attr ? arg(a, 0, NULL) : NULL;
    if (by_attr && !attr) rl__tp_fail(c, RL_ERR_FORMAT, off, "selectattr: missing attribute name");
    tp_val *tname = arg(a, first, NULL);
    const char *test = tname ? rl__tp_strdup(c, rl__tp_want_str(c, tname, "select", off).u.s.p, tname->u.s.n, off) : NULL;
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
    if (!rl__tp_truthy(v)) return generator(c, mk_list(c, 0, false, off), off); /* jinja2: `if value:` */
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

static tp_val do_indent(tp_ctx *c, tp_val s, targs *a, size_t off) {
    tp_val *wv = arg(a, 0, "width");
    tp_val pad;
    if (wv && wv->t == V_STR) pad = *wv;
    else pad = rl__tp_repeat(c, tp_str(" ", 1), wv ? rl__tp_want_int(c, wv, "indent", off) : 4, off);
    tp_val *fv = arg(a, 1, "first"), *bv = arg(a, 2, "blank");
    bool first = fv && rl__tp_truthy(*fv), blank = bv && rl__tp_truthy(*bv);
    char *buf = NULL;
    size_t bl = 0, bc = 0;
    rl__tp_buf_put(c, &buf, &bl, &bc, "", 0, off);
    size_t st = 0;
    bool line0 = true;
    for (size_t i = 0; i <= s.u.s.n; i++) {
        if (i < s.u.s.n && s.u.s.p[i] != '\n') continue;
        bool empty = i == st;
        bool ind = line0 ? first : (blank || !empty);
        if (ind && !(line0 && empty && !blank && false)) rl__tp_buf_put(c, &buf, &bl, &bc, pad.u.s.p, pad.u.s.n, off);
        rl__tp_buf_put(c, &buf, &bl, &bc, s.u.s.p + st, i - st, off);
        if (i < s.u.s.n) rl__tp_buf_put(c, &buf, &bl, &bc, "\n", 1, off);
        st = i + 1;
        line0 = false;
    }
    return tp_str(buf, bl);
}

tp_val rl__tp_dict_items(tp_ctx *c, tp_dict *d, int which, size_t off) {
    /* which: 0 items, 1 keys, 2 values; a plain list of them */
    tp_val l = mk_list(c, d->n, false, off);
    for (size_t i = 0; i < d->n; i++) {
        if (which == 1) l.u.l->v[i] = d->k[i];
        else if (which == 2) l.u.l->v[i] = d->v[i];
        else {
            tp_val t = mk_list(c, 2, true, off);
            t.u.l->v[0] = d->k[i];
            t.u.l->v[1] = d->v[i];
            l.u.l->v[i] = t;
        }
    }
    return l;
}

static tp_val parse_number(tp_ctx *c, tp_val v, bool as_float, tp_val def, size_t off) {
    (void)c;
    (void)off;
    if (v.t == V_INT || v.t == V_BOOL) return as_float ? mk_float((double)num_i(v)) : mk_int(num_i(v));
    if (v.t == V_FLOAT) {
        if (as_float) return v;
        if (!isfinite(v.u.f) || fabs(v.u.f) >= 9.2e18) return def;
        return mk_int((int64_t)v.u.f);
    }
    if (v.t != V_STR || v.u.s.n == 0 || v.u.s.n > 64) return def;
    char buf[80];
    memcpy(buf, v.u.s.p, v.u.s.n);
    buf[v.u.s.n] = 0;
    char *end;
    if (!as_float) {
        errno = 0;
        long long i = strtoll(buf, &end, 10);
        while (*end == ' ' || *end == '\t' || *end == '\n') end++;
        if (!*end && errno == 0) return mk_int(i);
    }
    double f = strtod(buf, &end);
    while (*end == ' ' || *end == '\t' || *end == '\n') end++;
    if (*end || end == buf) return def;
    if (as_float) return mk_float(f);
    if (!isfinite(f) || fabs(f) >= 9.2e18) return def;
    return mk_int((int64_t)f);
}

/* HF's tojson: json.dumps(v, ensure_ascii=False, indent=None, separators=None,
 * sort_keys=False), keywords or positional in that order. */
static tp_val do_tojson(tp_ctx *c, tp_val v, targs *a, size_t off) {
    tp_val *av = arg(a, 0, "ensure_ascii"), *iv = arg(a, 1, "indent"), *sv = arg(a, 2, "separators"),
           *kv = arg(a, 3, "sort_keys");
    tp_jsonopt o = {.ensure_ascii = av && rl__tp_truthy(*av), .sort_keys = kv && rl__tp_truthy(*kv)};
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
        if (v.t == V_STR) return mk_int((int64_t)rl_utf8_count(v.u.s.p, v.u.s.n));
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
        if (v.t != V_DICT) rl__tp_fail(c, RL_ERR_FORMAT, off, "items: Can only get item pairs from a mapping, not %s", rl__tp_type_name(v));
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
        if (lazy) return mk_lazy(c, r.u.l, LK_ITER, v.u.l->tuple ? "reversed" : "list_reverseiterator", off);
        if (v.t != V_STR) return r;
        tp_val s = rl__tp_join(c, r, NULL, NULL, off);
        s.safe = v.safe;
        return s;
    }
    if (IS("join")) return rl__tp_join(c, v, arg(a, 0, "d"), arg(a, 1, "attribute"), off);
    if (IS("map")) return do_map(c, v, a, off);
    if (IS("select") || IS("reject")) return do_select(c, v, a, false, IS("select"), off);
    if (IS("selectattr") || IS("rejectattr")) return do_select(c, v, a, true, IS("selectattr"), off);
    if (IS("unique")) {
        tp_list *l = rl__tp_iterate(c, v, off);
        tp_val out = mk_list(c, 0, false, off);
        size_t cap = 0;
        for (size_t i = 0; i < l->n; i++) {
            bool seen = false;
            for (size_t j = 0; j < out.u.l->n && !seen; j++) {
                step(c, off);
                seen = rl__tp_equal(c, out.u.l->v[j], l->v[i], 0, off);
            }
            if (!seen) rl__tp_list_append(c, out.u.l, &cap, l->v[i], off);
        }
        return generator(c, out, off);
    }
    if (IS("sort")) {
        tp_list *l = rl__tp_iterate(c, v, off);
        tp_val out = mk_list(c, l->n, false, off);
        tp_val keys = mk_list(c, l->n, false, off);
        tp_val *attr = arg(a, 2, "attribute"), *rv = arg(a, 0, "reverse");
        for (size_t i = 0; i < l->n; i++) {
            out.u.l->v[i] = l->v[i];
            keys.u.l->v[i] = attr ? attr_path(c, l->v[i], attr, off) : l->v[i];
        }
        sort_vals(c, out.u.l->v, keys.u.l->v, l->n, rv && rl__tp_truthy(*rv), off);
        return out;
    }
    if (IS("int")) return parse_number(c, v, false, a0 ? *a0 : mk_int(0), off);
    if (IS("float")) return parse_number(c, v, true, a0 ? *a0 : mk_float(0.0), off);
    if (IS("abs")) {
        if (v.t == V_FLOAT) return mk_float(fabs(v.u.f));
        if (v.t == V_INT || v.t == V_BOOL) {
            if (num_i(v) == INT64_MIN) rl__tp_fail(c, RL_ERR_RANGE, off, "integer overflow in abs");
            return mk_int(num_i(v) < 0 ? -num_i(v) : num_i(v));
        }
        rl__tp_fail(c, RL_ERR_FORMAT, off, "bad operand type for abs(): '%s'", rl__tp_type_name(v));
    }
    if (IS("round")) {
        if (!is_num(v)) rl__tp_fail(c, RL_ERR_FORMAT, off, "round: expected a number, got %s", rl__tp_type_name(v));
        tp_val *pv = arg(a, 0, "precision");
        int64_t prec = pv ? rl__tp_want_int(c, pv, "round", off) : 0;
        if (prec < -300 || prec > 300) prec = prec < 0 ? -300 : 300;
        double scale = pow(10.0, (double)prec);
        return mk_float(nearbyint(num_f(v) * scale) / scale);
    }
    if (IS("wordcount")) {
        if (v.t != V_STR) v = rl__tp_to_str(c, v, off);
        return mk_int((int64_t)rl__tp_str_split(c, v, NULL, NULL, off).u.l->n);
    }
    /* the rest operate on strings */
    if (v.t == V_UNDEF) v = tp_str("", 0);
    if (IS("indent")) return do_indent(c, rl__tp_to_str(c, v, off), a, off);
    if (IS("trim")) return rl__tp_str_strip(c, rl__tp_to_str(c, v, off), arg(a, 0, "chars"), true, true, off);
    if (IS("upper")) return rl__tp_str_case(c, rl__tp_to_str(c, v, off), 1, off);
    if (IS("lower")) return rl__tp_str_case(c, rl__tp_to_str(c, v, off), 0, off);
    if (IS("capitalize")) return rl__tp_str_case(c, rl__tp_to_str(c, v, off), 2, off);
    if (IS("title")) return rl__tp_str_case(c, rl__tp_to_str(c, v, off), 3, off);
    if (IS("replace")) return rl__tp_str_replace(c, rl__tp_to_str(c, v, off), arg(a, 0, "old"), arg(a, 1, "new"), arg(a, 2, "count"), off);
#undef IS
    rl__tp_fail(c, RL_ERR_UNSUPPORTED, off, "unknown filter '%s'", name);
}

