/* Chat-template evaluator and public API (see template.h for the subset).
 *
 * Scoping follows jinja2: the template body is one frame; every iteration of
 * a for loop pushes a fresh frame (so `set` inside a loop is invisible after
 * it, which is why templates use namespace()); if blocks do not open frames.
 *
 * Every statement and expression node visited costs one step; steps, output
 * bytes, arena bytes and nesting depth are capped by rl_template_limits.
 * Errors longjmp to the entry point with c->err filled (tp_fail).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "chat/chat-impl.h"

/* ------------------------------------------------------- arena and errors */

struct tp_chunk {
    tp_chunk *next;
    size_t used, cap;
    max_align_t data[];
};

void rl_template_limits_default(rl_template_limits *lim) {
    lim->max_steps = 10 * 1000 * 1000;
    lim->max_output = (size_t)64 << 20;
    lim->max_memory = (size_t)256 << 20;
    lim->max_depth = 100;
}

static void line_col(const tp_ctx *c, size_t off, int *line, int *col) {
    int l = 1, cl = 1;
    if (c->src) {
        if (off > c->src_len) off = c->src_len;
        for (size_t i = 0; i < off; i++) {
            if (c->src[i] == '\n') {
                l++;
                cl = 1;
            } else if (((unsigned char)c->src[i] & 0xC0) != 0x80) {
                cl++;
            }
        }
    }
    *line = l;
    *col = cl;
}

_Noreturn void tp_fail(tp_ctx *c, rl_status st, size_t off, const char *fmt, ...) {
    int line, col;
    line_col(c, off, &line, &col);
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    c->status = rl_err_set(c->err, st, "chat template %d:%d: %s", line, col, msg);
    longjmp(c->jb, 1);
}

void *tp_alloc(tp_ctx *c, size_t n, size_t off) {
    n = (n + 15) & ~(size_t)15;
    if (n == 0) n = 16;
    if (n > c->lim.max_memory || c->mem_used > c->lim.max_memory - n)
        tp_fail(c, RL_ERR_LIMIT, off, "template needs more than %zu bytes of memory", c->lim.max_memory);
    tp_chunk *ch = c->chunks;
    if (!ch || ch->cap - ch->used < n) {
        size_t cap = n > 65536 ? n : 65536;
        ch = rl_malloc(sizeof(tp_chunk) + cap);
        if (!ch) tp_fail(c, RL_ERR_NOMEM, off, "out of memory");
        ch->used = 0;
        ch->cap = cap;
        /* a big one-off block goes behind the current chunk so the
         * current chunk's free space stays usable */
        if (c->chunks && n > 65536) {
            ch->next = c->chunks->next;
            c->chunks->next = ch;
        } else {
            ch->next = c->chunks;
            c->chunks = ch;
        }
    }
    void *p = (char *)ch->data + ch->used;
    ch->used += n;
    c->mem_used += n;
    memset(p, 0, n);
    return p;
}

void *tp_alloc_array(tp_ctx *c, size_t count, size_t size, size_t off) {
    size_t n;
    if (!rl_mul_size(count, size, &n)) tp_fail(c, RL_ERR_LIMIT, off, "allocation too large");
    return tp_alloc(c, n, off);
}

char *tp_strdup(tp_ctx *c, const char *s, size_t n, size_t off) {
    char *p = tp_alloc(c, n + 1, off);
    if (n) memcpy(p, s, n);
    return p;
}

static void ctx_free(tp_ctx *c) {
    while (c->chunks) {
        tp_chunk *n = c->chunks->next;
        rl_free(c->chunks);
        c->chunks = n;
    }
    rl_free(c->out);
    c->out = NULL;
}

/* ---------------------------------------------------------------- helpers */

enum { FN_RAISE = 1, FN_NAMESPACE, FN_RANGE, FN_DICT, FN_STRFTIME };

static tp_val mk_int(int64_t i) {
    tp_val v = {.t = V_INT};
    v.u.i = i;
    return v;
}
static tp_val mk_bool(bool b) {
    tp_val v = {.t = V_BOOL};
    v.u.b = b;
    return v;
}
static tp_val mk_float(double f) {
    tp_val v = {.t = V_FLOAT};
    v.u.f = f;
    return v;
}
static tp_val mk_undef(const char *name) {
    tp_val v = {.t = V_UNDEF};
    v.u.s.p = name;
    return v;
}
static tp_val mk_list(tp_ctx *c, size_t n, bool tuple, size_t off) {
    tp_val v = {.t = V_LIST};
    v.u.l = tp_alloc(c, sizeof(tp_list), off);
    v.u.l->n = n;
    v.u.l->tuple = tuple;
    if (n) v.u.l->v = tp_alloc_array(c, n, sizeof(tp_val), off);
    return v;
}
static tp_val mk_dict(tp_ctx *c, size_t cap, size_t off) {
    tp_val v = {.t = V_DICT};
    v.u.d = tp_dict_new(c, cap, off);
    return v;
}
static tp_val cat(tp_ctx *c, const char *a, size_t an, const char *b, size_t bn, size_t off) {
    size_t n;
    if (!rl_add_size(an, bn, &n)) tp_fail(c, RL_ERR_LIMIT, off, "string too large");
    char *p = tp_alloc(c, n + 1, off);
    if (an) memcpy(p, a, an);
    if (bn) memcpy(p + an, b, bn);
    return tp_str(p, n);
}

/* Charges `n` steps (bulk work such as building a range counts too). */
static void step_n(tp_ctx *c, uint64_t n, size_t off) {
    if (n > c->lim.max_steps || c->steps > c->lim.max_steps - n)
        tp_fail(c, RL_ERR_LIMIT, off, "template ran more than %llu steps",
                (unsigned long long)c->lim.max_steps);
    c->steps += n;
}

static void step(tp_ctx *c, size_t off) {
    if (++c->steps > c->lim.max_steps)
        tp_fail(c, RL_ERR_LIMIT, off, "template ran more than %llu steps",
                (unsigned long long)c->lim.max_steps);
}

static void emit(tp_ctx *c, const char *p, size_t n, size_t off) {
    if (!n) return;
    if (n > c->lim.max_output || c->out_len > c->lim.max_output - n)
        tp_fail(c, RL_ERR_LIMIT, off, "output larger than %zu bytes", c->lim.max_output);
    if (c->out_len + n + 1 > c->out_cap) {
        size_t cap = c->out_cap ? c->out_cap : 4096;
        while (cap < c->out_len + n + 1) cap *= 2;
        char *o = rl_realloc(c->out, cap);
        if (!o) tp_fail(c, RL_ERR_NOMEM, off, "out of memory for output");
        c->out = o;
        c->out_cap = cap;
    }
    memcpy(c->out + c->out_len, p, n);
    c->out_len += n;
    c->out[c->out_len] = 0;
}

/* ----------------------------------------------------------------- scopes */

static void push_frame(tp_ctx *c, size_t off) {
    if (c->n_frames == c->cap_frames) {
        size_t cap = c->cap_frames ? c->cap_frames * 2 : 8;
        tp_frame *f = tp_alloc_array(c, cap, sizeof *f, off);
        if (c->n_frames) memcpy(f, c->frames, c->n_frames * sizeof *f);
        c->frames = f;
        c->cap_frames = cap;
    }
    memset(&c->frames[c->n_frames++], 0, sizeof(tp_frame));
}

static void set_var(tp_ctx *c, const char *name, tp_val v, size_t off) {
    tp_frame *f = &c->frames[c->n_frames - 1];
    for (size_t i = 0; i < f->n; i++)
        if (strcmp(f->k[i], name) == 0) {
            f->v[i] = v;
            return;
        }
    if (f->n == f->cap) {
        size_t cap = f->cap ? f->cap * 2 : 8;
        const char **k = tp_alloc_array(c, cap, sizeof *k, off);
        tp_val *vv = tp_alloc_array(c, cap, sizeof *vv, off);
        if (f->n) {
            memcpy(k, f->k, f->n * sizeof *k);
            memcpy(vv, f->v, f->n * sizeof *vv);
        }
        f->k = k;
        f->v = vv;
        f->cap = cap;
    }
    f->k[f->n] = name;
    f->v[f->n] = v;
    f->n++;
}

static tp_val get_var(tp_ctx *c, const char *name) {
    for (size_t i = c->n_frames; i-- > 0;) {
        tp_frame *f = &c->frames[i];
        for (size_t j = f->n; j-- > 0;)
            if (strcmp(f->k[j], name) == 0) return f->v[j];
    }
    static const struct {
        const char *name;
        int fn;
    } globals[] = {{"raise_exception", FN_RAISE}, {"namespace", FN_NAMESPACE}, {"range", FN_RANGE},
                   {"dict", FN_DICT},          {"strftime_now", FN_STRFTIME}};
    for (size_t i = 0; i < sizeof globals / sizeof globals[0]; i++)
        if (strcmp(globals[i].name, name) == 0) {
            tp_val v = {.t = V_FUNC};
            v.u.fn = globals[i].fn;
            return v;
        }
    return mk_undef(name);
}

/* -------------------------------------------------------------- evaluator */

static tp_val eval(tp_ctx *c, tp_node *n);
static int exec_body(tp_ctx *c, tp_node **body, size_t n);

static _Noreturn void undefined_error(tp_ctx *c, tp_val v, size_t off) {
    if (v.u.s.p) tp_fail(c, RL_ERR_FORMAT, off, "'%s' is undefined", v.u.s.p);
    tp_fail(c, RL_ERR_FORMAT, off, "use of an undefined value");
}

/* Python-style index normalization; returns false when out of range. */
static bool norm_index(int64_t i, size_t n, size_t *out) {
    if (i < 0) i += (int64_t)n;
    if (i < 0 || (uint64_t)i >= n) return false;
    *out = (size_t)i;
    return true;
}

static tp_val str_char(tp_ctx *c, tp_val s, size_t cp, size_t off) {
    size_t a = tp_utf8_offset(s.u.s.p, s.u.s.n, cp);
    size_t b = tp_utf8_offset(s.u.s.p + a, s.u.s.n - a, 1) + a;
    (void)c;
    (void)off;
    return tp_str(s.u.s.p + a, b - a);
}

static tp_val get_item(tp_ctx *c, tp_val obj, tp_val key, size_t off) {
    size_t idx;
    switch (obj.t) {
    case V_UNDEF: undefined_error(c, obj, off);
    case V_DICT:
    case V_NS: {
        tp_val *v = tp_dict_get(c, obj.u.d, key, off);
        return v ? *v : mk_undef(NULL);
    }
    case V_LIST:
        if ((key.t == V_INT || key.t == V_BOOL) &&
            norm_index(key.t == V_INT ? key.u.i : key.u.b, obj.u.l->n, &idx))
            return obj.u.l->v[idx];
        return mk_undef(NULL);
    case V_STR:
        if (key.t == V_INT && norm_index(key.u.i, tp_utf8_len(obj.u.s.p, obj.u.s.n), &idx))
            return str_char(c, obj, idx, off);
        return mk_undef(NULL);
    default: return mk_undef(NULL);
    }
}

static tp_val get_attr(tp_ctx *c, tp_val obj, const char *name, size_t off) {
    if (obj.t == V_UNDEF) undefined_error(c, obj, off);
    if (obj.t == V_DICT || obj.t == V_NS) {
        tp_val *v = tp_dict_get_str(obj.u.d, name, strlen(name));
        return v ? *v : mk_undef(NULL);
    }
    if (obj.t == V_LOOP) {
        tp_loop *l = obj.u.loop;
        if (!strcmp(name, "index")) return mk_int(l->index0 + 1);
        if (!strcmp(name, "index0")) return mk_int(l->index0);
        if (!strcmp(name, "revindex")) return mk_int(l->length - l->index0);
        if (!strcmp(name, "revindex0")) return mk_int(l->length - l->index0 - 1);
        if (!strcmp(name, "first")) return mk_bool(l->index0 == 0);
        if (!strcmp(name, "last")) return mk_bool(l->index0 == l->length - 1);
        if (!strcmp(name, "length")) return mk_int(l->length);
        if (!strcmp(name, "depth")) return mk_int(1);
        if (!strcmp(name, "depth0")) return mk_int(0);
        if (!strcmp(name, "previtem"))
            return l->index0 > 0 ? l->items->v[l->index0 - 1] : mk_undef("previtem");
        if (!strcmp(name, "nextitem"))
            return l->index0 + 1 < l->length ? l->items->v[l->index0 + 1] : mk_undef("nextitem");
    }
    return mk_undef(NULL);
}

/* Materializes something iterable as a list (dict -> keys, str -> chars). */
static tp_list *iterate(tp_ctx *c, tp_val v, size_t off) {
    switch (v.t) {
    case V_UNDEF: return mk_list(c, 0, false, off).u.l;
    case V_LIST: return v.u.l;
    case V_DICT: {
        tp_val l = mk_list(c, v.u.d->n, false, off);
        for (size_t i = 0; i < v.u.d->n; i++) l.u.l->v[i] = v.u.d->k[i];
        return l.u.l;
    }
    case V_STR: {
        size_t n = tp_utf8_len(v.u.s.p, v.u.s.n);
        tp_val l = mk_list(c, n, false, off);
        size_t pos = 0;
        for (size_t i = 0; i < n; i++) {
            size_t w = tp_utf8_offset(v.u.s.p + pos, v.u.s.n - pos, 1);
            l.u.l->v[i] = tp_str(v.u.s.p + pos, w);
            pos += w;
        }
        return l.u.l;
    }
    default: tp_fail(c, RL_ERR_FORMAT, off, "'%s' object is not iterable", tp_type_name(v));
    }
}

static bool is_num(tp_val v) { return v.t == V_INT || v.t == V_FLOAT || v.t == V_BOOL; }
static double num_f(tp_val v) {
    return v.t == V_FLOAT ? v.u.f : v.t == V_INT ? (double)v.u.i : (double)v.u.b;
}
static int64_t num_i(tp_val v) { return v.t == V_INT ? v.u.i : (int64_t)v.u.b; }

static const char *op_name(int op) {
    static const char *const names[] = {"?", "+", "-", "*", "/", "//", "%", "**", "~",
                                        "==", "!=", "<", "<=", ">", ">=", "in", "not in"};
    return op > 0 && op <= TP_OP_NOTIN ? names[op] : "?";
}

static _Noreturn void type_error(tp_ctx *c, int op, tp_val a, tp_val b, size_t off) {
    tp_fail(c, RL_ERR_FORMAT, off, "unsupported operand types for %s: '%s' and '%s'", op_name(op),
            tp_type_name(a), tp_type_name(b));
}

static tp_val repeat(tp_ctx *c, tp_val s, int64_t k, size_t off) {
    if (k <= 0 || s.u.s.n == 0) return tp_str("", 0);
    size_t n;
    if (!rl_mul_size(s.u.s.n, (size_t)k, &n) || n > c->lim.max_memory)
        tp_fail(c, RL_ERR_LIMIT, off, "string repetition too large");
    char *p = tp_alloc(c, n + 1, off);
    for (int64_t i = 0; i < k; i++) memcpy(p + (size_t)i * s.u.s.n, s.u.s.p, s.u.s.n);
    return tp_str(p, n);
}

static tp_val arith(tp_ctx *c, int op, tp_val a, tp_val b, size_t off) {
    if (a.t == V_UNDEF && op != TP_OP_CONCAT) undefined_error(c, a, off);
    if (b.t == V_UNDEF && op != TP_OP_CONCAT) undefined_error(c, b, off);
    if (op == TP_OP_CONCAT) {
        tp_val x = tp_to_str(c, a, off), y = tp_to_str(c, b, off);
        return cat(c, x.u.s.p, x.u.s.n, y.u.s.p, y.u.s.n, off);
    }
    if (op == TP_OP_ADD && a.t == V_STR && b.t == V_STR)
        return cat(c, a.u.s.p, a.u.s.n, b.u.s.p, b.u.s.n, off);
    if (op == TP_OP_ADD && a.t == V_LIST && b.t == V_LIST && a.u.l->tuple == b.u.l->tuple) {
        tp_val l = mk_list(c, a.u.l->n + b.u.l->n, a.u.l->tuple, off);
        if (a.u.l->n) memcpy(l.u.l->v, a.u.l->v, a.u.l->n * sizeof(tp_val));
        if (b.u.l->n) memcpy(l.u.l->v + a.u.l->n, b.u.l->v, b.u.l->n * sizeof(tp_val));
        return l;
    }
    if (op == TP_OP_MUL && a.t == V_STR && (b.t == V_INT || b.t == V_BOOL)) return repeat(c, a, num_i(b), off);
    if (op == TP_OP_MUL && b.t == V_STR && (a.t == V_INT || a.t == V_BOOL)) return repeat(c, b, num_i(a), off);
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
            if (y == 0) tp_fail(c, RL_ERR_FORMAT, off, "division by zero");
            return mk_float((double)x / (double)y);
        case TP_OP_FLOORDIV:
        case TP_OP_MOD: {
            if (y == 0) tp_fail(c, RL_ERR_FORMAT, off, "integer division or modulo by zero");
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
        tp_fail(c, RL_ERR_RANGE, off, "integer overflow in %s", op_name(op));
    }
    double x = num_f(a), y = num_f(b);
    switch (op) {
    case TP_OP_ADD: return mk_float(x + y);
    case TP_OP_SUB: return mk_float(x - y);
    case TP_OP_MUL: return mk_float(x * y);
    case TP_OP_DIV:
        if (y == 0) tp_fail(c, RL_ERR_FORMAT, off, "float division by zero");
        return mk_float(x / y);
    case TP_OP_FLOORDIV:
    case TP_OP_MOD: {
        if (y == 0) tp_fail(c, RL_ERR_FORMAT, off, "float modulo by zero");
        double m = fmod(x, y);
        if (m != 0 && ((m < 0) != (y < 0))) m += y;
        return mk_float(op == TP_OP_MOD ? m : floor((x - m) / y + 0.5));
    }
    case TP_OP_POW: return mk_float(pow(x, y));
    }
    type_error(c, op, a, b, off);
}

static int compare_order(tp_ctx *c, tp_val a, tp_val b, int op, int depth, size_t off) {
    if (depth > c->lim.max_depth) tp_fail(c, RL_ERR_LIMIT, off, "value nested deeper than %d", c->lim.max_depth);
    if (is_num(a) && is_num(b)) {
        if (a.t != V_FLOAT && b.t != V_FLOAT) return num_i(a) < num_i(b) ? -1 : num_i(a) > num_i(b);
        double x = num_f(a), y = num_f(b);
        return x < y ? -1 : x > y;
    }
    if (a.t == V_STR && b.t == V_STR) {
        size_t n = a.u.s.n < b.u.s.n ? a.u.s.n : b.u.s.n;
        int r = n ? memcmp(a.u.s.p, b.u.s.p, n) : 0;
        if (r) return r < 0 ? -1 : 1;
        return a.u.s.n < b.u.s.n ? -1 : a.u.s.n > b.u.s.n;
    }
    if (a.t == V_LIST && b.t == V_LIST) {
        for (size_t i = 0; i < a.u.l->n && i < b.u.l->n; i++) {
            if (tp_equal(c, a.u.l->v[i], b.u.l->v[i], depth + 1, off)) continue;
            return compare_order(c, a.u.l->v[i], b.u.l->v[i], op, depth + 1, off);
        }
        return a.u.l->n < b.u.l->n ? -1 : a.u.l->n > b.u.l->n;
    }
    if (a.t == V_UNDEF) undefined_error(c, a, off);
    if (b.t == V_UNDEF) undefined_error(c, b, off);
    tp_fail(c, RL_ERR_FORMAT, off, "'%s' not supported between '%s' and '%s'", op_name(op),
            tp_type_name(a), tp_type_name(b));
}

static bool contains(tp_ctx *c, tp_val hay, tp_val needle, size_t off) {
    switch (hay.t) {
    case V_UNDEF: return false;
    case V_STR:
        if (needle.t != V_STR)
            tp_fail(c, RL_ERR_FORMAT, off, "'in <string>' requires string as left operand, not %s", tp_type_name(needle));
        if (needle.u.s.n == 0) return true;
        if (needle.u.s.n > hay.u.s.n) return false;
        for (size_t i = 0; i + needle.u.s.n <= hay.u.s.n; i++)
            if (memcmp(hay.u.s.p + i, needle.u.s.p, needle.u.s.n) == 0) return true;
        return false;
    case V_LIST:
        for (size_t i = 0; i < hay.u.l->n; i++)
            if (tp_equal(c, hay.u.l->v[i], needle, 0, off)) return true;
        return false;
    case V_DICT:
    case V_NS: return tp_dict_get(c, hay.u.d, needle, off) != NULL;
    default: tp_fail(c, RL_ERR_FORMAT, off, "argument of type '%s' is not iterable", tp_type_name(hay));
    }
}

static bool compare(tp_ctx *c, int op, tp_val a, tp_val b, size_t off) {
    switch (op) {
    case TP_OP_EQ: return tp_equal(c, a, b, 0, off);
    case TP_OP_NE: return !tp_equal(c, a, b, 0, off);
    case TP_OP_IN: return contains(c, b, a, off);
    case TP_OP_NOTIN: return !contains(c, b, a, off);
    case TP_OP_LT: return compare_order(c, a, b, op, 0, off) < 0;
    case TP_OP_LE: return compare_order(c, a, b, op, 0, off) <= 0;
    case TP_OP_GT: return compare_order(c, a, b, op, 0, off) > 0;
    case TP_OP_GE: return compare_order(c, a, b, op, 0, off) >= 0;
    }
    return false;
}

/* Evaluated call arguments. */
typedef struct targs {
    tp_val *pos;
    size_t n_pos;
    const char **kw;
    tp_val *kwv;
    size_t n_kw;
} targs;

static targs eval_args(tp_ctx *c, tp_node *n) {
    targs a = {0};
    a.n_pos = n->n_body;
    a.n_kw = n->n_body2;
    if (a.n_pos) a.pos = tp_alloc_array(c, a.n_pos, sizeof(tp_val), n->off);
    if (a.n_kw) a.kwv = tp_alloc_array(c, a.n_kw, sizeof(tp_val), n->off);
    for (size_t i = 0; i < a.n_pos; i++) a.pos[i] = eval(c, n->body[i]);
    for (size_t i = 0; i < a.n_kw; i++) a.kwv[i] = eval(c, n->body2[i]);
    a.kw = n->names;
    return a;
}

/* Argument i (positional) or `name` (keyword); NULL if absent. */
static tp_val *arg(targs *a, size_t i, const char *name) {
    if (i < a->n_pos) return &a->pos[i];
    for (size_t k = 0; k < a->n_kw; k++)
        if (name && strcmp(a->kw[k], name) == 0) return &a->kwv[k];
    return NULL;
}

static tp_val want_str(tp_ctx *c, tp_val *v, const char *what, size_t off) {
    if (!v || v->t != V_STR)
        tp_fail(c, RL_ERR_FORMAT, off, "%s: expected a string argument, got %s", what,
                v ? tp_type_name(*v) : "nothing");
    return *v;
}
static int64_t want_int(tp_ctx *c, tp_val *v, const char *what, size_t off) {
    if (!v || (v->t != V_INT && v->t != V_BOOL))
        tp_fail(c, RL_ERR_FORMAT, off, "%s: expected an integer argument, got %s", what,
                v ? tp_type_name(*v) : "nothing");
    return num_i(*v);
}

#include "template_builtins.inc"

static tp_val eval_call(tp_ctx *c, tp_node *n) {
    tp_node *fn = n->a;
    if (fn->kind == E_ATTR) {
        tp_val obj = eval(c, fn->a);
        targs a = eval_args(c, n);
        return call_method(c, obj, fn->s, &a, n->off);
    }
    tp_val f = eval(c, fn);
    targs a = eval_args(c, n);
    if (f.t == V_UNDEF) undefined_error(c, f, n->off);
    if (f.t != V_FUNC) tp_fail(c, RL_ERR_FORMAT, n->off, "'%s' object is not callable", tp_type_name(f));
    return call_global(c, f.u.fn, &a, n->off);
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
        v[i] = want_int(c, &x, "slice", n->off);
        has[i] = true;
    }
    int64_t stp = has[2] ? v[2] : 1;
    if (stp == 0) tp_fail(c, RL_ERR_FORMAT, n->off, "slice step cannot be zero");
    if (obj.t == V_UNDEF) undefined_error(c, obj, n->off);
    if (obj.t != V_LIST && obj.t != V_STR)
        tp_fail(c, RL_ERR_FORMAT, n->off, "'%s' object is not subscriptable with a slice", tp_type_name(obj));
    int64_t len = obj.t == V_LIST ? (int64_t)obj.u.l->n : (int64_t)tp_utf8_len(obj.u.s.p, obj.u.s.n);
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
        size_t a = tp_utf8_offset(obj.u.s.p, obj.u.s.n, (size_t)st);
        size_t b = tp_utf8_offset(obj.u.s.p, obj.u.s.n, (size_t)st + cnt);
        return tp_str(obj.u.s.p + a, b - a);
    }
    tp_list *chars = iterate(c, obj, n->off);
    char *buf = NULL;
    size_t bl = 0, bc = 0;
    tp_buf_put(c, &buf, &bl, &bc, "", 0, n->off);
    for (size_t i = 0; i < cnt; i++) {
        tp_val ch = chars->v[st + (int64_t)i * stp];
        tp_buf_put(c, &buf, &bl, &bc, ch.u.s.p, ch.u.s.n, n->off);
    }
    return tp_str(buf, bl);
}

static tp_val eval(tp_ctx *c, tp_node *n) {
    step(c, n->off);
    switch (n->kind) {
    case E_LIT: return n->lit;
    case E_NAME: return get_var(c, n->s);
    case E_ATTR: return get_attr(c, eval(c, n->a), n->s, n->off);
    case E_ITEM: {
        tp_val obj = eval(c, n->a);
        tp_val key = eval(c, n->b);
        tp_val r = get_item(c, obj, key, n->off);
        /* jinja2: subscript falls back to attribute for string keys */
        if (r.t == V_UNDEF && key.t == V_STR && obj.t == V_LOOP) {
            char *k = tp_strdup(c, key.u.s.p, key.u.s.n, n->off);
            r = get_attr(c, obj, k, n->off);
        }
        return r;
    }
    case E_SLICE: return eval_slice(c, n);
    case E_CALL: return eval_call(c, n);
    case E_FILTER: {
        tp_val v = eval(c, n->a);
        targs a = eval_args(c, n);
        return apply_filter(c, n->s, v, &a, n->off);
    }
    case E_TEST: {
        tp_val v = eval(c, n->a);
        targs a = eval_args(c, n);
        bool r = apply_test(c, n->s, v, &a, n->off);
        return mk_bool(n->op ? !r : r);
    }
    case E_NEG:
    case E_POS: {
        tp_val v = eval(c, n->a);
        if (v.t == V_UNDEF) undefined_error(c, v, n->off);
        if (!is_num(v)) tp_fail(c, RL_ERR_FORMAT, n->off, "bad operand type for unary %c: '%s'", n->kind == E_NEG ? '-' : '+', tp_type_name(v));
        if (n->kind == E_POS) return v.t == V_BOOL ? mk_int(v.u.b) : v;
        if (v.t == V_FLOAT) return mk_float(-v.u.f);
        if (num_i(v) == INT64_MIN) tp_fail(c, RL_ERR_RANGE, n->off, "integer overflow in unary -");
        return mk_int(-num_i(v));
    }
    case E_NOT: return mk_bool(!tp_truthy(eval(c, n->a)));
    case E_AND: {
        tp_val a = eval(c, n->a);
        return tp_truthy(a) ? eval(c, n->b) : a;
    }
    case E_OR: {
        tp_val a = eval(c, n->a);
        return tp_truthy(a) ? a : eval(c, n->b);
    }
    case E_BIN: {
        tp_val a = eval(c, n->a);
        tp_val b = eval(c, n->b);
        return arith(c, n->op, a, b, n->off);
    }
    case E_COMPARE: {
        tp_val a = eval(c, n->a);
        for (size_t i = 0; i < n->n_body; i++) {
            tp_val b = eval(c, n->body[i]);
            if (!compare(c, n->ops[i], a, b, n->off)) return mk_bool(false);
            a = b;
        }
        return mk_bool(true);
    }
    case E_COND:
        if (tp_truthy(eval(c, n->a))) return eval(c, n->b);
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
            if (k.t == V_LIST && !k.u.l->tuple) tp_fail(c, RL_ERR_FORMAT, n->off, "unhashable type: 'list'");
            if (k.t == V_DICT || k.t == V_NS) tp_fail(c, RL_ERR_FORMAT, n->off, "unhashable type: 'dict'");
            tp_dict_set(c, d.u.d, k, eval(c, n->body2[i]), n->off);
        }
        return d;
    }
    default: break;
    }
    RL_ASSERT(!"statement node evaluated as expression");
    return mk_undef(NULL);
}

/* Binds for/set targets: one name takes the value; several unpack it. */
static void bind_targets(tp_ctx *c, tp_node *n, tp_val v) {
    if (n->n_names == 1) {
        set_var(c, n->names[0], v, n->off);
        return;
    }
    tp_list *l = iterate(c, v, n->off);
    if (l->n != n->n_names)
        tp_fail(c, RL_ERR_FORMAT, n->off, "cannot unpack %zu values into %zu names", l->n, n->n_names);
    for (size_t i = 0; i < l->n; i++) set_var(c, n->names[i], l->v[i], n->off);
}

enum { FLOW_NORMAL = 0, FLOW_BREAK = 1, FLOW_CONTINUE = 2 };

static int exec_for(tp_ctx *c, tp_node *n) {
    tp_list *items = iterate(c, eval(c, n->a), n->off);
    if (n->b) { /* `for x in xs if cond`: filter first; loop.* sees the filtered list */
        tp_val f = mk_list(c, items->n, false, n->off);
        size_t k = 0;
        for (size_t i = 0; i < items->n; i++) {
            push_frame(c, n->off);
            bind_targets(c, n, items->v[i]);
            bool keep = tp_truthy(eval(c, n->b));
            c->n_frames--;
            if (keep) f.u.l->v[k++] = items->v[i];
        }
        f.u.l->n = k;
        items = f.u.l;
    }
    if (items->n == 0) return exec_body(c, n->body2, n->n_body2);
    tp_loop *loop = tp_alloc(c, sizeof *loop, n->off);
    loop->length = (int64_t)items->n;
    loop->items = items;
    tp_val lv = {.t = V_LOOP};
    lv.u.loop = loop;
    size_t base = c->n_frames;
    for (size_t i = 0; i < items->n; i++) {
        step(c, n->off);
        loop->index0 = (int64_t)i;
        c->n_frames = base;
        push_frame(c, n->off);
        set_var(c, "loop", lv, n->off);
        bind_targets(c, n, items->v[i]);
        int fl = exec_body(c, n->body, n->n_body);
        c->n_frames = base;
        if (fl == FLOW_BREAK) break;
    }
    return FLOW_NORMAL;
}

static int exec_body(tp_ctx *c, tp_node **body, size_t nb) {
    for (size_t i = 0; i < nb; i++) {
        tp_node *n = body[i];
        step(c, n->off);
        switch (n->kind) {
        case N_TEXT: emit(c, n->s, n->sn, n->off); break;
        case N_OUTPUT: {
            tp_val v = tp_to_str(c, eval(c, n->a), n->off);
            emit(c, v.u.s.p, v.u.s.n, n->off);
            break;
        }
        case N_IF: {
            int fl = tp_truthy(eval(c, n->a)) ? exec_body(c, n->body, n->n_body)
                                              : exec_body(c, n->body2, n->n_body2);
            if (fl) return fl;
            break;
        }
        case N_FOR: exec_for(c, n); break;
        case N_SET: {
            tp_val v = eval(c, n->a);
            if (n->a_attr) {
                tp_val ns = get_var(c, n->names[0]);
                if (ns.t != V_NS)
                    tp_fail(c, RL_ERR_FORMAT, n->off, "cannot assign attribute on '%s' (a %s, not a namespace)", n->names[0], tp_type_name(ns));
                const char *k = n->names[1];
                tp_dict_set(c, ns.u.d, tp_str(k, strlen(k)), v, n->off);
            } else {
                bind_targets(c, n, v);
            }
            break;
        }
        case N_SETBLOCK: {
            /* render the body into a separate buffer */
            char *saved = c->out;
            size_t saved_len = c->out_len, saved_cap = c->out_cap;
            c->out = NULL;
            c->out_len = c->out_cap = 0;
            int fl = exec_body(c, n->body, n->n_body);
            tp_val v = tp_str(tp_strdup(c, c->out ? c->out : "", c->out_len, n->off), c->out_len);
            rl_free(c->out);
            c->out = saved;
            c->out_len = saved_len;
            c->out_cap = saved_cap;
            set_var(c, n->names[0], v, n->off);
            if (fl) return fl;
            break;
        }
        case N_BLOCK: {
            int fl = exec_body(c, n->body, n->n_body);
            if (fl) return fl;
            break;
        }
        case N_BREAK: return FLOW_BREAK;
        case N_CONTINUE: return FLOW_CONTINUE;
        default: RL_ASSERT(!"expression node executed as statement");
        }
    }
    return FLOW_NORMAL;
}

/* -------------------------------------------------------------------- API */

/* Copies the source with \r\n and \r turned into \n and one trailing newline
 * dropped, as jinja2 does before lexing. */
static void load_source(tp_ctx *c, const char *tmpl, size_t len) {
    char *s = tp_alloc(c, len + 1, 0);
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (tmpl[i] == '\r') {
            s[n++] = '\n';
            if (i + 1 < len && tmpl[i + 1] == '\n') i++;
        } else {
            s[n++] = tmpl[i];
        }
    }
    if (n && s[n - 1] == '\n') n--;
    s[n] = 0;
    c->src = s;
    c->src_len = n;
}

static tp_val from_json(tp_ctx *c, json_t *j, int depth) {
    if (depth > c->lim.max_depth) tp_fail(c, RL_ERR_LIMIT, 0, "context JSON nested deeper than %d", c->lim.max_depth);
    switch (json_typeof(j)) {
    case JSON_NULL: return (tp_val){.t = V_NONE};
    case JSON_TRUE: return mk_bool(true);
    case JSON_FALSE: return mk_bool(false);
    case JSON_INTEGER: return mk_int((int64_t)json_integer_value(j));
    case JSON_REAL: return mk_float(json_real_value(j));
    case JSON_STRING: return tp_str(json_string_value(j), json_string_length(j));
    case JSON_ARRAY: {
        size_t n = json_array_size(j);
        tp_val l = mk_list(c, n, false, 0);
        for (size_t i = 0; i < n; i++) l.u.l->v[i] = from_json(c, json_array_get(j, i), depth + 1);
        return l;
    }
    case JSON_OBJECT: {
        size_t n = json_object_size(j);
        tp_val d = mk_dict(c, n, 0);
        const char *k;
        json_t *v;
        /* keys are unique in a jansson object: append without lookup */
        json_object_foreach(j, k, v) {
            d.u.d->k[d.u.d->n] = tp_str(k, strlen(k));
            d.u.d->v[d.u.d->n] = from_json(c, v, depth + 1);
            d.u.d->n++;
        }
        return d;
    }
    }
    return mk_undef(NULL);
}

typedef struct render_in {
    const rl_chat_msg *msgs;
    size_t n_msgs;
    bool add_gen;
    const char *bos, *eos;
    json_t *ctx;
} render_in;

static rl_status render(const char *tmpl, size_t tmpl_len, const render_in *in,
                        const rl_template_limits *lim, char **out, size_t *out_len, rl_err *err) {
    if (out) *out = NULL;
    if (out_len) *out_len = 0;
    if (!out || (!tmpl && tmpl_len)) return rl_err_set(err, RL_ERR_INVALID, "chat template: NULL argument");
    tp_ctx *c = rl_calloc(1, sizeof *c);
    if (!c) return rl_err_set(err, RL_ERR_NOMEM, "chat template: out of memory");
    rl_err local;
    c->err = err ? err : &local;
    if (lim) c->lim = *lim;
    else rl_template_limits_default(&c->lim);
    if (c->lim.max_depth < 1) c->lim.max_depth = 1;
    if (setjmp(c->jb)) {
        rl_status st = c->status;
        ctx_free(c);
        rl_free(c);
        return st;
    }
    load_source(c, tmpl ? tmpl : "", tmpl_len);
    size_t n_body;
    tp_node **body = tp_parse(c, &n_body);
    c->depth = 0;
    push_frame(c, 0);
    if (in->ctx) {
        const char *k;
        json_t *v;
        json_object_foreach(in->ctx, k, v) set_var(c, k, from_json(c, v, 0), 0);
    } else {
        tp_val msgs = mk_list(c, in->n_msgs, false, 0);
        for (size_t i = 0; i < in->n_msgs; i++) {
            tp_val d = mk_dict(c, 2, 0);
            const rl_chat_msg *m = &in->msgs[i];
            tp_val role = m->role ? tp_str(m->role, strlen(m->role)) : (tp_val){.t = V_NONE};
            tp_val content = m->content ? tp_str(m->content, strlen(m->content)) : (tp_val){.t = V_NONE};
            tp_dict_set(c, d.u.d, tp_str("role", 4), role, 0);
            tp_dict_set(c, d.u.d, tp_str("content", 7), content, 0);
            msgs.u.l->v[i] = d;
        }
        set_var(c, "messages", msgs, 0);
        set_var(c, "add_generation_prompt", mk_bool(in->add_gen), 0);
        const char *bos = in->bos ? in->bos : "", *eos = in->eos ? in->eos : "";
        set_var(c, "bos_token", tp_str(bos, strlen(bos)), 0);
        set_var(c, "eos_token", tp_str(eos, strlen(eos)), 0);
    }
    exec_body(c, body, n_body);
    if (!c->out) {
        c->out = rl_malloc(1);
        if (!c->out) tp_fail(c, RL_ERR_NOMEM, 0, "out of memory");
        c->out[0] = 0;
    }
    *out = c->out;
    if (out_len) *out_len = c->out_len;
    c->out = NULL;
    ctx_free(c);
    rl_free(c);
    rl_err_clear(err);
    return RL_OK;
}

rl_status rl_template_render(const char *tmpl, size_t tmpl_len, const rl_chat_msg *msgs,
                             size_t n_msgs, bool add_generation_prompt, const char *bos_token,
                             const char *eos_token, char **out, size_t *out_len, rl_err *err) {
    if (n_msgs && !msgs) return rl_err_set(err, RL_ERR_INVALID, "chat template: msgs is NULL");
    render_in in = {msgs, n_msgs, add_generation_prompt, bos_token, eos_token, NULL};
    return render(tmpl, tmpl_len, &in, NULL, out, out_len, err);
}

rl_status rl_template_render_json(const char *tmpl, size_t tmpl_len, const char *ctx_json,
                                  size_t ctx_json_len, const rl_template_limits *lim, char **out,
                                  size_t *out_len, rl_err *err) {
    if (out) *out = NULL;
    if (out_len) *out_len = 0;
    if (!ctx_json) return rl_err_set(err, RL_ERR_INVALID, "chat template: context JSON is NULL");
    json_error_t je;
    json_t *j = json_loadb(ctx_json, ctx_json_len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &je);
    if (!j)
        return rl_err_set(err, RL_ERR_FORMAT, "chat template context JSON %d:%d: %s", je.line,
                          je.column, je.text);
    if (!json_is_object(j)) {
        json_decref(j);
        return rl_err_set(err, RL_ERR_FORMAT, "chat template context JSON: top level must be an object");
    }
    render_in in = {0};
    in.ctx = j;
    rl_status st = render(tmpl, tmpl_len, &in, lim, out, out_len, err);
    json_decref(j);
    return st;
}

/* ---- built-in templates ---- */

static const char CHATML[] =
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}";

/* Gemma 3's chat template (behaviour as published with the model): a
 * leading system message is folded into the first user turn, roles must
 * alternate user/assistant, "assistant" is written "model", content is
 * trimmed. */
static const char GEMMA[] =
    "{{ bos_token }}\n"
    "{%- if messages[0]['role'] == 'system' -%}\n"
    "    {%- if messages[0]['content'] is string -%}\n"
    "        {%- set first_user_prefix = messages[0]['content'] + '\\n\\n' -%}\n"
    "    {%- else -%}\n"
    "        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\\n\\n' -%}\n"
    "    {%- endif -%}\n"
    "    {%- set loop_messages = messages[1:] -%}\n"
    "{%- else -%}\n"
    "    {%- set first_user_prefix = \"\" -%}\n"
    "    {%- set loop_messages = messages -%}\n"
    "{%- endif -%}\n"
    "{%- for message in loop_messages -%}\n"
    "    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}\n"
    "        {{ raise_exception(\"Conversation roles must alternate user/assistant/user/assistant/...\") }}\n"
    "    {%- endif -%}\n"
    "    {%- if (message['role'] == 'assistant') -%}\n"
    "        {%- set role = \"model\" -%}\n"
    "    {%- else -%}\n"
    "        {%- set role = message['role'] -%}\n"
    "    {%- endif -%}\n"
    "    {{ '<start_of_turn>' + role + '\\n' + (first_user_prefix if loop.first else \"\") }}\n"
    "    {%- if message['content'] is string -%}\n"
    "        {{ message['content'] | trim }}\n"
    "    {%- elif message['content'] is iterable -%}\n"
    "        {%- for item in message['content'] -%}\n"
    "            {%- if item['type'] == 'image' -%}\n"
    "                {{ '<start_of_image>' }}\n"
    "            {%- elif item['type'] == 'text' -%}\n"
    "                {{ item['text'] | trim }}\n"
    "            {%- endif -%}\n"
    "        {%- endfor -%}\n"
    "    {%- else -%}\n"
    "        {{ raise_exception(\"Invalid content type\") }}\n"
    "    {%- endif -%}\n"
    "    {{ '<end_of_turn>\\n' }}\n"
    "{%- endfor -%}\n"
    "{%- if add_generation_prompt -%}\n"
    "    {{'<start_of_turn>model\\n'}}\n"
    "{%- endif -%}\n";

const char *rl_template_builtin(const char *name) {
    if (!name) return NULL;
    if (strcmp(name, "chatml") == 0) return CHATML;
    if (strcmp(name, "gemma") == 0) return GEMMA;
    return NULL;
}

const char *rl_template_fallback(const char *arch, const char **name_out) {
    const char *name = arch && !strncmp(arch, "gemma", 5) ? "gemma" : "chatml";
    if (name_out) *name_out = name;
    return rl_template_builtin(name);
}
