/* Chat-template evaluator: statements, expressions, scopes and output.
 *
 * Scoping follows jinja2: the template body is one frame; every iteration of
 * a for loop pushes a fresh frame (so `set` inside a loop is invisible after
 * it, which is why templates use namespace()); if blocks do not open frames;
 * a macro call pushes a frame whose lookups continue in the frames where the
 * macro was defined (template_macro.c), not the caller's.
 *
 * Every statement and expression node visited costs one step; steps, output
 * bytes, arena bytes, nesting depth and run-time recursion (RL__TP_RDEPTH)
 * are capped by rl_template_limits.  Errors longjmp to the entry point with
 * c->err filled (rl__tp_fail).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/chat-impl.h"

/* ----------------------------------------------------------------- output */

static tp_val cat(tp_ctx *c, const char *a, size_t an, const char *b, size_t bn, size_t off) {
    size_t n;
    if (!rl_add_size(an, bn, &n)) rl__tp_fail(c, RL_ERR_LIMIT, off, "string too large");
    char *p = rl__tp_alloc(c, n + 1, off);
    if (an) memcpy(p, a, an);
    if (bn) memcpy(p + an, b, bn);
    return tp_str(p, n);
}

void rl__tp_emit(tp_ctx *c, const char *p, size_t n, size_t off) {
    if (!n) return;
    if (n > c->lim.max_output || c->out.n > c->lim.max_output - n)
        rl__tp_fail(c, RL_ERR_LIMIT, off, "output larger than %zu bytes", c->lim.max_output);
    if (rl_buf_append(&c->out, p, n)) rl__tp_fail(c, RL_ERR_NOMEM, off, "out of memory for output");
}

/* ----------------------------------------------------------------- scopes */

void rl__tp_push_frame(tp_ctx *c, size_t off) {
    c->frames = rl__tp_grow(c, c->frames, c->n_frames, &c->cap_frames, sizeof *c->frames, 8, off);
    tp_frame *f = &c->frames[c->n_frames];
    f->n = 0; /* a popped frame's arrays (k, v, cap) are reused: loops and calls do not grow the
                 arena */
    f->up = c->n_frames++;
}

void rl__tp_set_var(tp_ctx *c, const char *name, tp_val v, size_t off) {
    tp_frame *f = &c->frames[c->n_frames - 1];
    for (size_t i = 0; i < f->n; i++)
        if (strcmp(f->k[i], name) == 0) {
            f->v[i] = v;
            return;
        }
    size_t kcap = f->cap; /* k and v share f->cap */
    f->k = rl__tp_grow(c, f->k, f->n, &kcap, sizeof *f->k, 8, off);
    f->v = rl__tp_grow(c, f->v, f->n, &f->cap, sizeof *f->v, 8, off);
    f->k[f->n] = name;
    f->v[f->n] = v;
    f->n++;
}

static tp_val get_var(tp_ctx *c, const char *name) {
    for (size_t i = c->n_frames; i > 0;) {
        tp_frame *f = &c->frames[i - 1];
        for (size_t j = f->n; j-- > 0;)
            if (strcmp(f->k[j], name) == 0) return f->v[j];
        i = f->up < i ? f->up : i - 1; /* always moves down */
    }
    static const struct {
        const char *name;
        int fn;
    } globals[] = {{"raise_exception", FN_RAISE},
                   {"namespace", FN_NAMESPACE},
                   {"range", FN_RANGE},
                   {"dict", FN_DICT},
                   {"strftime_now", FN_STRFTIME}};
    for (size_t i = 0; i < sizeof globals / sizeof globals[0]; i++)
        if (strcmp(globals[i].name, name) == 0) {
            tp_val v = {.t = V_FUNC};
            v.u.fn = globals[i].fn;
            return v;
        }
    return mk_undef(name);
}

/* -------------------------------------------------------------- evaluator */

#define eval rl__tp_eval

static const char *op_name(int op) {
    static const char *const names[] = {"?",  "+",  "-", "*",  "/", "//", "%",  "**",    "~",
                                        "==", "!=", "<", "<=", ">", ">=", "in", "not in"};
    return op > 0 && op <= TP_OP_NOTIN ? names[op] : "?";
}

static _Noreturn void type_error(tp_ctx *c, int op, tp_val a, tp_val b, size_t off) {
    rl__tp_fail(c, RL_ERR_FORMAT, off, "unsupported operand types for %s: '%s' and '%s'",
                op_name(op), rl__tp_type_name(a), rl__tp_type_name(b));
}

tp_val rl__tp_repeat(tp_ctx *c, tp_val s, int64_t k, size_t off) {
    if (k <= 0 || s.u.s.n == 0) return tp_str("", 0);
    size_t n;
    if (!rl_mul_size(s.u.s.n, (size_t)k, &n) || n > c->lim.max_memory)
        rl__tp_fail(c, RL_ERR_LIMIT, off, "string repetition too large");
    char *p = rl__tp_alloc(c, n + 1, off);
    for (int64_t i = 0; i < k; i++) memcpy(p + (size_t)i * s.u.s.n, s.u.s.p, s.u.s.n);
    return tp_str(p, n);
}

tp_val rl__tp_binop(tp_ctx *c, int op, tp_val a, tp_val b, size_t off) {
    if (a.t == V_UNDEF && op != TP_OP_CONCAT) rl__tp_undefined(c, a, off);
    if (b.t == V_UNDEF && op != TP_OP_CONCAT) rl__tp_undefined(c, b, off);
    if (op == TP_OP_CONCAT) {
        tp_val x = rl__tp_to_str(c, a, off), y = rl__tp_to_str(c, b, off);
        return cat(c, x.u.s.p, x.u.s.n, y.u.s.p, y.u.s.n, off);
    }
    if (op == TP_OP_ADD && a.t == V_STR && b.t == V_STR) {
        if (a.safe != b.safe) { /* Markup + str escapes the str */
            a = rl__tp_escape(c, a, off);
            b = rl__tp_escape(c, b, off);
        }
        tp_val r = cat(c, a.u.s.p, a.u.s.n, b.u.s.p, b.u.s.n, off);
        r.safe = a.safe;
        return r;
    }
    if (op == TP_OP_ADD && is_seq(a) && is_seq(b) && a.u.l->tuple == b.u.l->tuple) {
        tp_val l = mk_list(c, a.u.l->n + b.u.l->n, a.u.l->tuple, off);
        if (a.u.l->n) memcpy(l.u.l->v, a.u.l->v, a.u.l->n * sizeof(tp_val));
        if (b.u.l->n) memcpy(l.u.l->v + a.u.l->n, b.u.l->v, b.u.l->n * sizeof(tp_val));
        return l;
    }
    if (op == TP_OP_MOD && a.t == V_STR) return rl__tp_percent_format(c, a, b, off);
    if (op == TP_OP_MUL && ((is_seq(a) && (b.t == V_INT || b.t == V_BOOL)) ||
                            (is_seq(b) && (a.t == V_INT || a.t == V_BOOL)))) {
        tp_val l = is_seq(a) ? a : b;
        int64_t k = num_i(is_seq(a) ? b : a);
        size_t n = k > 0 ? (size_t)k : 0, tot;
        if (!rl_mul_size(n, l.u.l->n, &tot) || tot > c->lim.max_memory / sizeof(tp_val))
            rl__tp_fail(c, RL_ERR_LIMIT, off, "list repetition too large");
        tp_val r = mk_list(c, tot, l.u.l->tuple, off);
        for (size_t i = 0; tot && i < n; i++) /* [] * 10**18 is [] at once */
            memcpy(r.u.l->v + i * l.u.l->n, l.u.l->v, l.u.l->n * sizeof(tp_val));
        return r;
    }
    if (op == TP_OP_MUL && ((a.t == V_STR && (b.t == V_INT || b.t == V_BOOL)) ||
                            (b.t == V_STR && (a.t == V_INT || a.t == V_BOOL)))) {
        tp_val s = a.t == V_STR ? a : b;
        tp_val r = rl__tp_repeat(c, s, num_i(a.t == V_STR ? b : a), off);
        r.safe = s.safe;
        return r;
    }
    if (!is_num(a) || !is_num(b)) type_error(c, op, a, b, off);
    bool ints = a.t != V_FLOAT && b.t != V_FLOAT;
    if (ints) {
        int64_t x = num_i(a), y = num_i(b), r;
        switch (op) {
        case TP_OP_ADD:
            if (__builtin_add_overflow(x, y, &r)) break;
            return mk_int(r);
        case TP_OP_SUB:
            if (__builtin_sub_overflow(x, y, &r)) break;
            return mk_int(r);
        case TP_OP_MUL:
            if (__builtin_mul_overflow(x, y, &r)) break;
            return mk_int(r);
        case TP_OP_DIV:
            if (y == 0) rl__tp_fail(c, RL_ERR_FORMAT, off, "division by zero");
            return mk_float((double)x / (double)y);
        case TP_OP_FLOORDIV:
        case TP_OP_MOD: {
            if (y == 0) rl__tp_fail(c, RL_ERR_FORMAT, off, "integer division or modulo by zero");
            if (x == INT64_MIN && y == -1) break;
            int64_t q = x / y, m = x % y;
            if (m != 0 && ((m < 0) != (y < 0))) {
                q--;
                m += y;
            }
            return mk_int(op == TP_OP_MOD ? m : q);
        }
        case TP_OP_POW: {
            if (y < 0) return mk_float(pow((double)x, (double)y));
            int64_t acc = 1;
            bool ovf = false;
            for (int64_t i = 0; i < y && !ovf; i++) {
                ovf = __builtin_mul_overflow(acc, x, &acc);
                if (acc == 0 || acc == 1) break;
                if (acc == -1) {
                    acc = (y % 2) ? (x == -1 ? -1 : acc) : 1;
                    break;
                }
            }
            if (ovf) break;
            return mk_int(acc);
        }
        }
        rl__tp_fail(c, RL_ERR_RANGE, off, "integer overflow in %s", op_name(op));
    }
    double x = num_f(a), y = num_f(b);
    switch (op) {
    case TP_OP_ADD:
        return mk_float(x + y);
    case TP_OP_SUB:
        return mk_float(x - y);
    case TP_OP_MUL:
        return mk_float(x * y);
    case TP_OP_DIV:
        if (y == 0) rl__tp_fail(c, RL_ERR_FORMAT, off, "float division by zero");
        return mk_float(x / y);
    case TP_OP_FLOORDIV:
    case TP_OP_MOD: {
        if (y == 0) rl__tp_fail(c, RL_ERR_FORMAT, off, "float modulo by zero");
        double m = fmod(x, y);
        if (m != 0 && ((m < 0) != (y < 0))) m += y;
        return mk_float(op == TP_OP_MOD ? m : floor((x - m) / y + 0.5));
    }
    case TP_OP_POW:
        return mk_float(pow(x, y));
    }
    type_error(c, op, a, b, off);
}

int rl__tp_compare_order(tp_ctx *c, tp_val a, tp_val b, int op, int depth, size_t off) {
    if (depth > c->lim.max_depth)
        rl__tp_fail(c, RL_ERR_LIMIT, off, "value nested deeper than %d", c->lim.max_depth);
    if (is_num(a) && is_num(b)) {
        if (a.t != V_FLOAT && b.t != V_FLOAT) return num_i(a) < num_i(b) ? -1 : num_i(a) > num_i(b);
        double x = num_f(a), y = num_f(b);
        return x < y ? -1 : x > y;
    }
    if (a.t == V_STR && b.t == V_STR) {
        size_t n = a.u.s.n < b.u.s.n ? a.u.s.n : b.u.s.n;
        rl__tp_charge(c, n, off);
        int r = n ? memcmp(a.u.s.p, b.u.s.p, n) : 0;
        if (r) return r < 0 ? -1 : 1;
        return a.u.s.n < b.u.s.n ? -1 : a.u.s.n > b.u.s.n;
    }
    if (is_seq(a) && is_seq(b)) {
        rl__tp_charge(c, (a.u.l->n < b.u.l->n ? a.u.l->n : b.u.l->n) * 16, off);
        for (size_t i = 0; i < a.u.l->n && i < b.u.l->n; i++) {
            if (rl__tp_equal(c, a.u.l->v[i], b.u.l->v[i], depth + 1, off)) continue;
            return rl__tp_compare_order(c, a.u.l->v[i], b.u.l->v[i], op, depth + 1, off);
        }
        return a.u.l->n < b.u.l->n ? -1 : a.u.l->n > b.u.l->n;
    }
    if (a.t == V_UNDEF) rl__tp_undefined(c, a, off);
    if (b.t == V_UNDEF) rl__tp_undefined(c, b, off);
    rl__tp_fail(c, RL_ERR_FORMAT, off, "'%s' not supported between '%s' and '%s'", op_name(op),
                rl__tp_type_name(a), rl__tp_type_name(b));
}

bool rl__tp_contains(tp_ctx *c, tp_val hay, tp_val needle, size_t off) {
    switch (hay.t) {
    case V_UNDEF:
        return false;
    case V_STR:
        if (needle.t != V_STR)
            rl__tp_fail(c, RL_ERR_FORMAT, off,
                        "'in <string>' requires string as left operand, not %s",
                        rl__tp_type_name(needle));
        if (needle.u.s.n == 0) return true;
        if (needle.u.s.n > hay.u.s.n) return false;
        rl__tp_charge(c, hay.u.s.n, off);
        return memmem(hay.u.s.p, hay.u.s.n, needle.u.s.p, needle.u.s.n) != NULL;
    case V_LIST: {
        tp_list *l = rl__tp_iterate(c, hay, off);
        if (l->n >= 16) step_n(c, l->n >> 4, off);
        for (size_t i = 0; i < l->n; i++)
            if (rl__tp_equal(c, l->v[i], needle, 0, off)) return true;
        return false;
    }
    case V_DICT:
    case V_NS:
        return rl__tp_dict_get(c, hay.u.d, needle, off) != NULL;
    default:
        rl__tp_fail(c, RL_ERR_FORMAT, off, "argument of type '%s' is not iterable",
                    rl__tp_type_name(hay));
    }
}

bool rl__tp_compare(tp_ctx *c, int op, tp_val a, tp_val b, size_t off) {
    switch (op) {
    case TP_OP_EQ:
        return rl__tp_equal(c, a, b, 0, off);
    case TP_OP_NE:
        return !rl__tp_equal(c, a, b, 0, off);
    case TP_OP_IN:
        return rl__tp_contains(c, b, a, off);
    case TP_OP_NOTIN:
        return !rl__tp_contains(c, b, a, off);
    case TP_OP_LT:
        return rl__tp_compare_order(c, a, b, op, 0, off) < 0;
    case TP_OP_LE:
        return rl__tp_compare_order(c, a, b, op, 0, off) <= 0;
    case TP_OP_GT:
        return rl__tp_compare_order(c, a, b, op, 0, off) > 0;
    case TP_OP_GE:
        return rl__tp_compare_order(c, a, b, op, 0, off) >= 0;
    }
    return false;
}

targs rl__tp_eval_args(tp_ctx *c, tp_node *n) {
    targs a = {0};
    a.n_pos = n->n_body;
    a.n_kw = n->n_body2;
    if (a.n_pos) a.pos = rl__tp_alloc_array(c, a.n_pos, sizeof(tp_val), n->off);
    if (a.n_kw) a.kwv = rl__tp_alloc_array(c, a.n_kw, sizeof(tp_val), n->off);
    for (size_t i = 0; i < a.n_pos; i++) a.pos[i] = eval(c, n->body[i]);
    for (size_t i = 0; i < a.n_kw; i++) a.kwv[i] = eval(c, n->body2[i]);
    a.kw = n->names;
    return a;
}

tp_val rl__tp_want_str(tp_ctx *c, tp_val *v, const char *what, size_t off) {
    if (!v || v->t != V_STR)
        rl__tp_fail(c, RL_ERR_FORMAT, off, "%s: expected a string argument, got %s", what,
                    v ? rl__tp_type_name(*v) : "nothing");
    return *v;
}
int64_t rl__tp_want_int(tp_ctx *c, tp_val *v, const char *what, size_t off) {
    if (!v || (v->t != V_INT && v->t != V_BOOL))
        rl__tp_fail(c, RL_ERR_FORMAT, off, "%s: expected an integer argument, got %s", what,
                    v ? rl__tp_type_name(*v) : "nothing");
    return num_i(*v);
}

static tp_val eval_call(tp_ctx *c, tp_node *n) {
    tp_node *fn = n->a;
    tp_val f;
    if (fn->kind == E_ATTR) { /* obj.name(...): a method call without a bound-method value */
        tp_val obj = eval(c, fn->a);
        if (obj.t != V_UNDEF && rl__tp_method_kind(obj, fn->s) == 1) {
            targs a = rl__tp_eval_args(c, n);
            return rl__tp_method(c, obj, fn->s, &a, n->off);
        }
        f = rl__tp_get_attr(c, obj, fn->s, n->off);
    } else {
        f = eval(c, fn);
    }
    targs a = rl__tp_eval_args(c, n);
    if (f.t == V_UNDEF) rl__tp_undefined(c, f, n->off);
    if (f.t == V_MACRO) return rl__tp_call_macro(c, f.u.mac, &a, NULL, n->off);
    if (f.t == V_METHOD) return rl__tp_method(c, f.u.bm->obj, f.u.bm->name, &a, n->off);
    if (f.t != V_FUNC)
        rl__tp_fail(c, RL_ERR_FORMAT, n->off, "'%s' object is not callable", rl__tp_type_name(f));
    return rl__tp_global(c, f.u.fn, &a, n->off);
}

static tp_val eval_slice(tp_ctx *c, tp_node *n) {
    tp_val obj = eval(c, n->a);
    tp_node *parts[3] = {n->b, n->c, n->d};
    int64_t v[3];
    bool has[3];
    for (int i = 0; i < 3; i++) {
        has[i] = false;
        if (!parts[i]) continue;
        tp_val x = eval(c, parts[i]);
        if (x.t == V_NONE) continue;
        v[i] = rl__tp_want_int(c, &x, "slice", n->off);
        has[i] = true;
    }
    int64_t stp = has[2] ? v[2] : 1;
    if (stp == 0) rl__tp_fail(c, RL_ERR_FORMAT, n->off, "slice step cannot be zero");
    if (obj.t == V_UNDEF) rl__tp_undefined(c, obj, n->off);
    if (!is_seq(obj) && obj.t != V_STR)
        rl__tp_fail(c, RL_ERR_FORMAT, n->off, "'%s' object is not subscriptable with a slice",
                    rl__tp_type_name(obj));
    int64_t len =
        obj.t == V_LIST ? (int64_t)obj.u.l->n : (int64_t)rl_utf8_count(obj.u.s.p, obj.u.s.n);
    /* Python's slice.indices() */
    int64_t lo, hi;
    if (stp > 0) {
        lo = 0;
        hi = len;
    } else {
        lo = -1;
        hi = len - 1;
    }
    int64_t st = stp > 0 ? lo : hi, en = stp > 0 ? hi : lo;
    if (has[0]) {
        st = v[0] < 0 ? v[0] + len : v[0];
        if (st < lo) st = lo;
        if (st > hi) st = hi;
    }
    if (has[1]) {
        en = v[1] < 0 ? v[1] + len : v[1];
        if (en < lo) en = lo;
        if (en > hi) en = hi;
    }
    size_t cnt = 0;
    if (stp > 0 && en > st) cnt = (size_t)((en - st + stp - 1) / stp);
    if (stp < 0 && st > en) cnt = (size_t)((st - en + (-stp) - 1) / (-stp));
    if (obj.t == V_LIST) {
        tp_val l = mk_list(c, cnt, obj.u.l->tuple, n->off);
        for (size_t i = 0; i < cnt; i++) l.u.l->v[i] = obj.u.l->v[st + (int64_t)i * stp];
        return l;
    }
    if (stp == 1) {
        size_t a = rl_utf8_offset(obj.u.s.p, obj.u.s.n, (size_t)st);
        size_t b = rl_utf8_offset(obj.u.s.p, obj.u.s.n, (size_t)st + cnt);
        tp_val r = tp_str(obj.u.s.p + a, b - a);
        r.safe = obj.safe;
        return r;
    }
    tp_list *chars = rl__tp_iterate(c, obj, n->off);
    char *buf = NULL;
    size_t bl = 0, bc = 0;
    rl__tp_buf_put(c, &buf, &bl, &bc, "", 0, n->off);
    for (size_t i = 0; i < cnt; i++) {
        tp_val ch = chars->v[st + (int64_t)i * stp];
        rl__tp_buf_put(c, &buf, &bl, &bc, ch.u.s.p, ch.u.s.n, n->off);
    }
    tp_val r = tp_str(buf, bl);
    r.safe = obj.safe;
    return r;
}

void rl__tp_rdepth_enter(tp_ctx *c, size_t off) {
    if (++c->rdepth > RL__TP_RDEPTH(c->lim))
        rl__tp_fail(c, RL_ERR_LIMIT, off,
                    "evaluation nested deeper than %d (deep operator chains or macro recursion)",
                    RL__TP_RDEPTH(c->lim));
}

static tp_val eval_node(tp_ctx *c, tp_node *n);

tp_val rl__tp_eval(tp_ctx *c, tp_node *n) {
    rl__tp_rdepth_enter(c, n->off);
    tp_val v = eval_node(c, n);
    c->rdepth--;
    return v;
}

static tp_val eval_node(tp_ctx *c, tp_node *n) {
    step(c, n->off);
    switch (n->kind) {
    case E_LIT:
        return n->lit;
    case E_NAME:
        return get_var(c, n->s);
    case E_ATTR:
        return rl__tp_get_attr(c, eval(c, n->a), n->s, n->off);
    case E_ITEM: {
        tp_val obj = eval(c, n->a);
        tp_val key = eval(c, n->b);
        return rl__tp_get_item(c, obj, key, n->off);
    }
    case E_SLICE:
        return eval_slice(c, n);
    case E_CALL:
        return eval_call(c, n);
    case E_FILTER: {
        tp_val v = eval(c, n->a);
        targs a = rl__tp_eval_args(c, n);
        return rl__tp_filter(c, n->s, v, &a, n->off);
    }
    case E_TEST: {
        tp_val v = eval(c, n->a);
        targs a = rl__tp_eval_args(c, n);
        bool r = rl__tp_test(c, n->s, v, &a, n->off);
        return mk_bool(n->op ? !r : r);
    }
    case E_NEG:
    case E_POS: {
        tp_val v = eval(c, n->a);
        if (v.t == V_UNDEF) rl__tp_undefined(c, v, n->off);
        if (!is_num(v))
            rl__tp_fail(c, RL_ERR_FORMAT, n->off, "bad operand type for unary %c: '%s'",
                        n->kind == E_NEG ? '-' : '+', rl__tp_type_name(v));
        if (n->kind == E_POS) return v.t == V_BOOL ? mk_int(v.u.b) : v;
        if (v.t == V_FLOAT) return mk_float(-v.u.f);
        if (num_i(v) == INT64_MIN)
            rl__tp_fail(c, RL_ERR_RANGE, n->off, "integer overflow in unary -");
        return mk_int(-num_i(v));
    }
    case E_NOT:
        return mk_bool(!rl__tp_truthy(eval(c, n->a)));
    case E_AND: {
        tp_val a = eval(c, n->a);
        return rl__tp_truthy(a) ? eval(c, n->b) : a;
    }
    case E_OR: {
        tp_val a = eval(c, n->a);
        return rl__tp_truthy(a) ? a : eval(c, n->b);
    }
    case E_BIN: {
        tp_val a = eval(c, n->a);
        tp_val b = eval(c, n->b);
        return rl__tp_binop(c, n->op, a, b, n->off);
    }
    case E_COMPARE: {
        tp_val a = eval(c, n->a);
        for (size_t i = 0; i < n->n_body; i++) {
            tp_val b = eval(c, n->body[i]);
            if (!rl__tp_compare(c, n->ops[i], a, b, n->off)) return mk_bool(false);
            a = b;
        }
        return mk_bool(true);
    }
    case E_COND:
        if (rl__tp_truthy(eval(c, n->a))) return eval(c, n->b);
        return n->c ? eval(c, n->c) : mk_undef(NULL);
    case E_LIST:
    case E_TUPLE: {
        tp_val l = mk_list(c, n->n_body, n->kind == E_TUPLE, n->off);
        for (size_t i = 0; i < n->n_body; i++) l.u.l->v[i] = eval(c, n->body[i]);
        return l;
    }
    case E_DICT: {
        tp_val d = mk_dict(c, n->n_body, n->off);
        for (size_t i = 0; i < n->n_body; i++) {
            tp_val k = eval(c, n->body[i]);
            if (k.t == V_LIST && !k.u.l->tuple)
                rl__tp_fail(c, RL_ERR_FORMAT, n->off, "unhashable type: 'list'");
            if (k.t == V_DICT || k.t == V_NS)
                rl__tp_fail(c, RL_ERR_FORMAT, n->off, "unhashable type: 'dict'");
            rl__tp_dict_set(c, d.u.d, k, eval(c, n->body2[i]), n->off);
        }
        return d;
    }
    default:
        break;
    }
    RL_ASSERT(!"statement node evaluated as expression");
    return mk_undef(NULL);
}

/* Binds for/set targets: one name takes the value; several unpack it. */
static void bind_targets(tp_ctx *c, tp_node *n, tp_val v) {
    if (n->n_names == 1) {
        rl__tp_set_var(c, n->names[0], v, n->off);
        return;
    }
    tp_list *l = rl__tp_iterate(c, v, n->off);
    if (l->n != n->n_names)
        rl__tp_fail(c, RL_ERR_FORMAT, n->off, "cannot unpack %zu values into %zu names", l->n,
                    n->n_names);
    for (size_t i = 0; i < l->n; i++) rl__tp_set_var(c, n->names[i], l->v[i], n->off);
}

static int exec_for(tp_ctx *c, tp_node *n) {
    tp_list *items = rl__tp_iterate(c, eval(c, n->a), n->off);
    if (n->b) { /* `for x in xs if cond`: filter first; loop.* sees the filtered list */
        tp_val f = mk_list(c, items->n, false, n->off);
        size_t k = 0;
        for (size_t i = 0; i < items->n; i++) {
            rl__tp_push_frame(c, n->off);
            bind_targets(c, n, items->v[i]);
            bool keep = rl__tp_truthy(eval(c, n->b));
            c->n_frames--;
            if (keep) f.u.l->v[k++] = items->v[i];
        }
        f.u.l->n = k;
        items = f.u.l;
    }
    if (items->n == 0) return rl__tp_exec_body(c, n->body2, n->n_body2);
    tp_loop *loop = rl__tp_alloc(c, sizeof *loop, n->off);
    loop->length = (int64_t)items->n;
    loop->items = items;
    tp_val lv = {.t = V_LOOP};
    lv.u.loop = loop;
    size_t base = c->n_frames;
    for (size_t i = 0; i < items->n; i++) {
        step(c, n->off);
        loop->index0 = (int64_t)i;
        c->n_frames = base;
        rl__tp_push_frame(c, n->off);
        rl__tp_set_var(c, "loop", lv, n->off);
        bind_targets(c, n, items->v[i]);
        int fl = rl__tp_exec_body(c, n->body, n->n_body);
        c->n_frames = base;
        if (fl == FLOW_BREAK) break;
    }
    return FLOW_NORMAL;
}

static int exec_body(tp_ctx *c, tp_node **body, size_t nb);

int rl__tp_exec_body(tp_ctx *c, tp_node **body, size_t nb) {
    rl__tp_rdepth_enter(c, nb ? body[0]->off : 0);
    int fl = exec_body(c, body, nb);
    c->rdepth--;
    return fl;
}

static int exec_body(tp_ctx *c, tp_node **body, size_t nb) {
    for (size_t i = 0; i < nb; i++) {
        tp_node *n = body[i];
        step(c, n->off);
        switch (n->kind) {
        case N_TEXT:
            rl__tp_emit(c, n->s, n->sn, n->off);
            break;
        case N_OUTPUT: {
            tp_val v = rl__tp_to_str(c, eval(c, n->a), n->off);
            rl__tp_emit(c, v.u.s.p, v.u.s.n, n->off);
            break;
        }
        case N_IF: {
            int fl = rl__tp_truthy(eval(c, n->a)) ? rl__tp_exec_body(c, n->body, n->n_body)
                                                  : rl__tp_exec_body(c, n->body2, n->n_body2);
            if (fl) return fl;
            break;
        }
        case N_FOR:
            exec_for(c, n);
            break;
        case N_SET: {
            tp_val v = eval(c, n->a);
            if (n->a_attr) {
                tp_val ns = get_var(c, n->names[0]);
                if (ns.t != V_NS)
                    rl__tp_fail(c, RL_ERR_FORMAT, n->off,
                                "cannot assign attribute on '%s' (a %s, not a namespace)",
                                n->names[0], rl__tp_type_name(ns));
                tp_val k = tp_str(n->names[1], strlen(n->names[1]));
                rl__tp_ns_check_name(c, k, n->off);
                rl__tp_dict_set(c, ns.u.d, k, v, n->off);
            } else {
                bind_targets(c, n, v);
            }
            break;
        }
        case N_SETBLOCK:
        case N_FILTERBLOCK: {
            size_t mark = rl__tp_capture_begin(c);
            int fl = rl__tp_exec_body(c, n->body, n->n_body);
            tp_val v = rl__tp_capture_end(c, mark, n->off);
            if (n->a) v = rl__tp_apply_filters(c, n->a, v);
            if (n->kind == N_SETBLOCK) {
                rl__tp_set_var(c, n->names[0], v, n->off);
            } else {
                v = rl__tp_to_str(c, v, n->off);
                rl__tp_emit(c, v.u.s.p, v.u.s.n, n->off);
            }
            if (fl) return fl;
            break;
        }
        case N_MACRO:
            rl__tp_define_macro(c, n);
            break;
        case N_CALLBLOCK: {
            int fl = rl__tp_exec_callblock(c, n);
            if (fl) return fl;
            break;
        }
        case N_BLOCK: {
            int fl = rl__tp_exec_body(c, n->body, n->n_body);
            if (fl) return fl;
            break;
        }
        case N_BREAK:
            return FLOW_BREAK;
        case N_CONTINUE:
            return FLOW_CONTINUE;
        default:
            RL_ASSERT(!"expression node executed as statement");
        }
    }
    return FLOW_NORMAL;
}
