/* Chat-template tests (`x is name`), methods of str/dict/list/loop values
 * and the global functions (raise_exception, namespace, dict, range,
 * strftime_now), as jinja2 and HF's sandboxed environment define them.
 *
 * Each is charged one step, and loops over values one per item; anything
 * unknown is an error naming it, never a silent no-op.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "chat/chat-impl.h"

bool rl__tp_test(tp_ctx *c, const char *name, tp_val v, targs *a, size_t off) {
    step(c, off);
    tp_val *a0 = arg(a, 0, NULL);
#define IS(s) (strcmp(name, (s)) == 0)
    if (IS("defined")) return v.t != V_UNDEF;
    if (IS("undefined")) return v.t == V_UNDEF;
    if (IS("none")) return v.t == V_NONE;
    if (IS("string")) return v.t == V_STR;
    if (IS("number")) return is_num(v);
    if (IS("integer")) return v.t == V_INT;
    if (IS("float")) return v.t == V_FLOAT;
    if (IS("boolean")) return v.t == V_BOOL;
    if (IS("true")) return v.t == V_BOOL && v.u.b;
    if (IS("false")) return v.t == V_BOOL && !v.u.b;
    if (IS("mapping")) return v.t == V_DICT;
    if (IS("iterable")) return v.t == V_STR || v.t == V_LIST || v.t == V_DICT || v.t == V_UNDEF;
    if (IS("sequence")) return v.t == V_STR || is_seq(v) || v.t == V_DICT; /* len() and [] */
    if (IS("callable")) return v.t == V_FUNC || v.t == V_MACRO || v.t == V_METHOD;
    if (IS("lower") || IS("upper")) {
        if (v.t != V_STR) return false;
        bool any = false;
        for (size_t i = 0; i < v.u.s.n; i++) {
            char ch = v.u.s.p[i];
            if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z')) {
                any = true;
                if (IS("lower") ? (ch <= 'Z') : (ch >= 'a')) return false;
            }
        }
        return any;
    }
    if (IS("odd") || IS("even")) {
        int64_t i = rl__tp_want_int(c, &v, name, off);
        return IS("odd") ? (i % 2 != 0) : (i % 2 == 0);
    }
    if (IS("divisibleby")) {
        int64_t i = rl__tp_want_int(c, &v, name, off), d = rl__tp_want_int(c, a0, name, off);
        if (d == 0) rl__tp_fail(c, RL_ERR_FORMAT, off, "divisibleby: division by zero");
        return d == -1 || i % d == 0;
    }
    if (!a0 && (IS("eq") || IS("equalto") || IS("==") || IS("ne") || IS("!=") || IS("lt") ||
                IS("lessthan") || IS("<") || IS("le") || IS("<=") || IS("gt") ||
                IS("greaterthan") || IS(">") || IS("ge") || IS(">=") || IS("in") || IS("sameas")))
        rl__tp_fail(c, RL_ERR_FORMAT, off, "test '%s' needs an argument", name);
    if (IS("eq") || IS("equalto") || IS("==")) return rl__tp_equal(c, v, *a0, 0, off);
    if (IS("ne") || IS("!=")) return !rl__tp_equal(c, v, *a0, 0, off);
    if (IS("lt") || IS("lessthan") || IS("<")) return rl__tp_compare(c, TP_OP_LT, v, *a0, off);
    if (IS("le") || IS("<=")) return rl__tp_compare(c, TP_OP_LE, v, *a0, off);
    if (IS("gt") || IS("greaterthan") || IS(">")) return rl__tp_compare(c, TP_OP_GT, v, *a0, off);
    if (IS("ge") || IS(">=")) return rl__tp_compare(c, TP_OP_GE, v, *a0, off);
    if (IS("in")) return rl__tp_contains(c, *a0, v, off);
    if (IS("sameas")) {
        if (v.t != a0->t) return false;
        if (v.t == V_NONE || v.t == V_UNDEF) return true;
        if (v.t == V_BOOL) return v.u.b == a0->u.b;
        return rl__tp_equal(c, v, *a0, 0, off) && (v.t != V_LIST || v.u.l == a0->u.l) &&
               (v.t != V_DICT || v.u.d == a0->u.d);
    }
#undef IS
    rl__tp_fail(c, RL_ERR_UNSUPPORTED, off, "unknown test '%s'", name);
}

static bool in_names(const char *const *names, const char *name) {
    for (; *names; names++)
        if (!strcmp(*names, name)) return true;
    return false;
}

int rl__tp_method_kind(tp_val obj, const char *name) {
    static const char *const str_m[] = {
        "capitalize",   "casefold",    "center",    "count",      "encode",       "endswith",
        "expandtabs",   "find",        "format",    "format_map", "index",        "isalnum",
        "isalpha",      "isascii",     "isdecimal", "isdigit",    "isidentifier", "islower",
        "isnumeric",    "isprintable", "isspace",   "istitle",    "isupper",      "join",
        "ljust",        "lower",       "lstrip",    "maketrans",  "partition",    "removeprefix",
        "removesuffix", "replace",     "rfind",     "rindex",     "rjust",        "rpartition",
        "rsplit",       "rstrip",      "split",     "splitlines", "startswith",   "strip",
        "swapcase",     "title",       "translate", "upper",      "zfill",        NULL};
    static const char *const dict_m[] = {"copy", "fromkeys", "get", "items",
                                         "keys", "values",   NULL};
    static const char *const dict_mut[] = {"clear", "pop", "popitem", "setdefault", "update", NULL};
    static const char *const list_m[] = {"copy", "count", "index", NULL};
    static const char *const list_mut[] = {"append", "clear",   "extend", "insert", "pop",
                                           "remove", "reverse", "sort",   NULL};
    static const char *const loop_m[] = {"cycle", "changed", NULL};
    switch (obj.t) {
    case V_FUNC:
        return obj.u.fn == FN_DICT && !strcmp(name, "fromkeys");
    case V_STR:
        return in_names(str_m, name);
    case V_DICT:
        return in_names(dict_m, name) ? 1 : in_names(dict_mut, name) ? 2 : 0;
    case V_LIST:
        if (obj.u.l->kind != LK_SEQ) return 0;
        if (obj.u.l->tuple) return !strcmp(name, "count") || !strcmp(name, "index");
        return in_names(list_m, name) ? 1 : in_names(list_mut, name) ? 2 : 0;
    case V_LOOP:
        return in_names(loop_m, name);
    default:
        return 0;
    }
}

tp_val rl__tp_method(tp_ctx *c, tp_val obj, const char *name, targs *a, size_t off) {
    step(c, off);
#define IS(s) (strcmp(name, (s)) == 0)
    tp_val *a0 = arg(a, 0, NULL), *a1 = arg(a, 1, NULL);
    if (obj.t == V_UNDEF) rl__tp_undefined(c, obj, off);
    if (obj.t == V_STR) {
        static const char *const cases[] = {"lower", "upper",    "capitalize", "title",
                                            "",      "swapcase", NULL};
        for (int m = 0; cases[m]; m++)
            if (IS(cases[m])) return rl__tp_str_case(c, obj, m, off);
        if (IS("casefold")) return rl__tp_str_case(c, obj, 6, off);
        if (IS("strip")) return rl__tp_str_strip(c, obj, a0, true, true, off);
        if (IS("lstrip")) return rl__tp_str_strip(c, obj, a0, true, false, off);
        if (IS("rstrip")) return rl__tp_str_strip(c, obj, a0, false, true, off);
        if (IS("startswith")) return mk_bool(rl__tp_str_affix(c, obj, a0, false, off));
        if (IS("endswith")) return mk_bool(rl__tp_str_affix(c, obj, a0, true, off));
        if (IS("split"))
            return rl__tp_str_split(c, obj, arg(a, 0, "sep"), arg(a, 1, "maxsplit"), off);
        if (IS("rsplit"))
            return rl__tp_str_rsplit(c, obj, arg(a, 0, "sep"), arg(a, 1, "maxsplit"), off);
        if (IS("splitlines")) {
            tp_val *k = arg(a, 0, "keepends");
            return rl__tp_str_splitlines(c, obj, k && rl__tp_truthy(*k), off);
        }
        if (IS("replace")) return rl__tp_str_replace(c, obj, a0, a1, arg(a, 2, "count"), off);
        if (IS("find") || IS("index") || IS("rfind") || IS("rindex")) {
            bool right = name[0] == 'r';
            tp_val x = rl__tp_want_str(c, a0, name, off);
            int64_t i = rl__tp_str_find(c, obj, x, right ? 2 : 0, off);
            if (i < 0 && (IS("index") || IS("rindex")))
                rl__tp_fail(c, RL_ERR_FORMAT, off, "%s: substring not found", name);
            return mk_int(i);
        }
        if (IS("count"))
            return mk_int(rl__tp_str_find(c, obj, rl__tp_want_str(c, a0, "count", off), 1, off));
        if (IS("join")) return rl__tp_join(c, a0 ? *a0 : mk_undef(NULL), &obj, NULL, off);
        if (IS("partition") || IS("rpartition"))
            return rl__tp_str_partition(c, obj, a0, name[0] == 'r', off);
        if (IS("center")) return rl__tp_str_pad(c, obj, a0, a1, 0, off);
        if (IS("ljust")) return rl__tp_str_pad(c, obj, a0, a1, 1, off);
        if (IS("rjust")) return rl__tp_str_pad(c, obj, a0, a1, 2, off);
        if (IS("zfill")) return rl__tp_str_pad(c, obj, a0, NULL, 3, off);
        if (IS("removeprefix") || IS("removesuffix")) {
            bool suf = IS("removesuffix");
            tp_val x = rl__tp_want_str(c, a0, name, off);
            if (!rl__tp_str_affix(c, obj, &x, suf, off)) return obj;
            tp_val r = tp_str(obj.u.s.p + (suf ? 0 : x.u.s.n), obj.u.s.n - x.u.s.n);
            r.safe = obj.safe;
            return r;
        }
        if (IS("format")) return rl__tp_str_format(c, obj, a, off);
        if (IS("isupper") || IS("islower")) { /* at least one cased character, all of that case */
            bool any = false, up = IS("isupper");
            for (size_t i = 0; i < obj.u.s.n;) {
                uint32_t cp;
                size_t w = rl_utf8_decode(obj.u.s.p + i, obj.u.s.n - i, &cp);
                if (!w) w = 1, cp = 0xFFFD;
                if (up ? rl__tp_cp_lower(cp) : rl__tp_cp_upper(cp)) return mk_bool(false);
                any = any || (up ? rl__tp_cp_upper(cp) : rl__tp_cp_lower(cp));
                i += w;
            }
            return mk_bool(any);
        }
        if (IS("isdigit") || IS("isdecimal") || IS("isnumeric") || IS("isalpha") || IS("isspace") ||
            IS("isalnum") || IS("isascii")) {
            if (!obj.u.s.n) return mk_bool(IS("isascii"));
            for (size_t i = 0; i < obj.u.s.n;) {
                uint32_t cp;
                size_t w = rl_utf8_decode(obj.u.s.p + i, obj.u.s.n - i, &cp), sw;
                if (!w) w = 1, cp = 0xFFFD;
                bool d = cp >= '0' && cp <= '9', al = rl__tp_cp_upper(cp) || rl__tp_cp_lower(cp) ||
                                                      (cp >= 0x80 && rl__tp_cp_alpha(cp));
                bool ok = IS("isascii")   ? cp < 0x80
                          : IS("isalpha") ? al
                          : IS("isalnum") ? (d || al)
                          : IS("isspace") ? rl__tp_is_space_at(obj.u.s.p, obj.u.s.n, i, &sw)
                                          : d;
                if (!ok) return mk_bool(false);
                i += w;
            }
            return mk_bool(true);
        }
    } else if (obj.t == V_DICT) {
        static const char *const views[] = {"dict_items", "dict_keys", "dict_values"};
        for (int w = 0; w < 3; w++)
            if (IS(views[w] + 5))
                return mk_lazy(c, rl__tp_dict_items(c, obj.u.d, w, off).u.l, LK_VIEW, views[w],
                               off);
        if (IS("get")) {
            if (!a0) rl__tp_fail(c, RL_ERR_FORMAT, off, "get: missing key");
            tp_val *r = rl__tp_dict_get(c, obj.u.d, *a0, off);
            return r ? *r : a1 ? *a1 : (tp_val){.t = V_NONE};
        }
        if (IS("copy")) {
            tp_val d = mk_dict(c, obj.u.d->n, off);
            if (obj.u.d->n) {
                memcpy(d.u.d->k, obj.u.d->k, obj.u.d->n * sizeof(tp_val));
                memcpy(d.u.d->v, obj.u.d->v, obj.u.d->n * sizeof(tp_val));
            }
            d.u.d->n = obj.u.d->n;
            return d;
        }
    } else if (obj.t == V_LIST && is_seq(obj)) {
        if (IS("copy")) {
            tp_val l = mk_list(c, obj.u.l->n, false, off);
            if (obj.u.l->n) memcpy(l.u.l->v, obj.u.l->v, obj.u.l->n * sizeof(tp_val));
            return l;
        }
        if (IS("count") || IS("index")) {
            if (!a0) rl__tp_fail(c, RL_ERR_FORMAT, off, "%s: missing argument", name);
            int64_t cnt = 0;
            for (size_t i = 0; i < obj.u.l->n; i++) {
                step(c, off);
                if (!rl__tp_equal(c, obj.u.l->v[i], *a0, 0, off)) continue;
                if (IS("index")) return mk_int((int64_t)i);
                cnt++;
            }
            if (IS("index"))
                rl__tp_fail(c, RL_ERR_FORMAT, off, "index: value is not in %s",
                            rl__tp_type_name(obj));
            return mk_int(cnt);
        }
    } else if (obj.t == V_FUNC && obj.u.fn == FN_DICT && IS("fromkeys")) {
        tp_list *keys = rl__tp_iterate(c, a0 ? *a0 : mk_undef(NULL), off);
        tp_val d = mk_dict(c, keys->n, off);
        for (size_t i = 0; i < keys->n; i++)
            rl__tp_dict_set(c, d.u.d, keys->v[i], a1 ? *a1 : (tp_val){.t = V_NONE}, off);
        return d;
    } else if (obj.t == V_LOOP) {
        if (IS("cycle")) {
            if (!a->n_pos) rl__tp_fail(c, RL_ERR_FORMAT, off, "loop.cycle: no items");
            return a->pos[obj.u.loop->index0 % (int64_t)a->n_pos];
        }
        if (IS("changed")) { /* true when the arguments differ from the last call's */
            tp_loop *l = obj.u.loop;
            tp_val now = mk_list(c, a->n_pos, true, off);
            for (size_t i = 0; i < a->n_pos; i++) now.u.l->v[i] = a->pos[i];
            if (l->has_changed && rl__tp_equal(c, l->last_changed, now, 0, off))
                return mk_bool(false);
            l->last_changed = now;
            l->has_changed = true;
            return mk_bool(true);
        }
    }
#undef IS
    rl__tp_fail(c, RL_ERR_UNSUPPORTED, off, "'%s' object has no method '%s'", rl__tp_type_name(obj),
                name);
}

tp_val rl__tp_global(tp_ctx *c, int fn, targs *a, size_t off) {
    tp_val *a0 = arg(a, 0, NULL);
    switch (fn) {
    case FN_RAISE: {
        tp_val m = a0 ? rl__tp_to_str(c, *a0, off) : tp_str("", 0);
        int n = m.u.s.n > 300 ? 300 : (int)m.u.s.n;
        rl__tp_fail(c, RL_ERR_INVALID, off, "raise_exception: %.*s", n, m.u.s.p);
    }
    case FN_NAMESPACE:
    case FN_DICT: {
        const char *fname = fn == FN_DICT ? "dict" : "namespace";
        tp_val d = mk_dict(c, 4, off);
        if (fn == FN_NAMESPACE) d.t = V_NS;
        if (a->n_pos > 1)
            rl__tp_fail(c, RL_ERR_FORMAT, off, "%s expected at most 1 positional argument, got %zu",
                        fname, a->n_pos);
        if (a0 && a0->t == V_DICT) {
            for (size_t i = 0; i < a0->u.d->n; i++)
                rl__tp_dict_set(c, d.u.d, a0->u.d->k[i], a0->u.d->v[i], off);
        } else if (a0) { /* an iterable of key/value pairs */
            tp_list *pairs = rl__tp_iterate(c, *a0, off);
            for (size_t i = 0; i < pairs->n; i++) {
                step(c, off);
                tp_list *kv = rl__tp_iterate(c, pairs->v[i], off);
                if (kv->n != 2)
                    rl__tp_fail(c, RL_ERR_FORMAT, off,
                                "%s: sequence element #%zu has length %zu; 2 is required", fname, i,
                                kv->n);
                rl__tp_dict_set(c, d.u.d, kv->v[0], kv->v[1], off);
            }
        }
        for (size_t i = 0; i < a->n_kw; i++)
            rl__tp_dict_set(c, d.u.d, tp_str(a->kw[i], strlen(a->kw[i])), a->kwv[i], off);
        if (fn == FN_NAMESPACE)
            for (size_t i = 0; i < d.u.d->n; i++) rl__tp_ns_check_name(c, d.u.d->k[i], off);
        return d;
    }
    case FN_RANGE: {
        if (a->n_pos < 1 || a->n_pos > 3)
            rl__tp_fail(c, RL_ERR_FORMAT, off, "range expects 1 to 3 arguments");
        int64_t st = 0, en, sp = 1;
        if (a->n_pos == 1)
            en = rl__tp_want_int(c, &a->pos[0], "range", off);
        else {
            st = rl__tp_want_int(c, &a->pos[0], "range", off);
            en = rl__tp_want_int(c, &a->pos[1], "range", off);
            if (a->n_pos == 3) sp = rl__tp_want_int(c, &a->pos[2], "range", off);
        }
        if (sp == 0) rl__tp_fail(c, RL_ERR_FORMAT, off, "range() arg 3 must not be zero");
        double cnt_d = sp > 0 ? ceil(((double)en - (double)st) / (double)sp)
                              : ceil(((double)st - (double)en) / (double)-sp);
        if (cnt_d < 0) cnt_d = 0;
        if (cnt_d > (double)(c->lim.max_memory / sizeof(tp_val)))
            rl__tp_fail(c, RL_ERR_LIMIT, off, "range of %.0f items is too large", cnt_d);
        size_t cnt = (size_t)cnt_d;
        step_n(c, cnt / 16, off);
        tp_val l = mk_list(c, cnt, false, off);
        for (size_t i = 0; i < cnt; i++) l.u.l->v[i] = mk_int(st + (int64_t)i * sp);
        return l;
    }
    case FN_STRFTIME: {
        tp_val f = rl__tp_want_str(c, a0, "strftime_now", off);
        char fmt[128], buf[256];
        size_t n = f.u.s.n < sizeof fmt - 1 ? f.u.s.n : sizeof fmt - 1;
        memcpy(fmt, f.u.s.p, n);
        fmt[n] = 0;
        time_t t = time(NULL);
        struct tm tmv;
        localtime_r(&t, &tmv);
        size_t w = strftime(buf, sizeof buf, fmt, &tmv);
        return tp_str(rl__tp_strdup(c, buf, w, off), w);
    }
    }
    rl__tp_fail(c, RL_ERR_FORMAT, off, "not callable");
}
