/* Chat-template value access: subscripts, attributes, iteration and the
 * undefined values they produce, as jinja2's ImmutableSandboxedEnvironment
 * does them.
 *
 *   obj.name   getattr first: a method of obj's Python type wins over a
 *              dict key of the same name (so `schema.items` is dict.items,
 *              not the "items" key), then the item; a mutating method
 *              (list.append, dict.update, ...) is an undefined that says it
 *              is unsafe, and calling it is an error.
 *   obj[key]   the item first, then, for a string key, the attribute.
 * A miss is an undefined that remembers what was looked up, so using it
 * fails with jinja2's message ("'dict object' has no attribute 'x'",
 * "list object has no element 3").
 *
 * Invariants: no lookup allocates unless it returns a new value (a bound
 * method, a character, an unsafe-attribute message); iteration of a
 * generator consumes it.
 */
#include <stdio.h>
#include <string.h>

#include "chat/chat-impl.h"

/* jinja2's object_type_repr for the object an undefined came from */
static const char *type_repr(uint8_t t) {
    switch (t & 0x7f) {
    case V_NONE:
        return "None";
    case V_BOOL:
        return "bool object";
    case V_INT:
        return "int object";
    case V_FLOAT:
        return "float object";
    case V_STR:
        return "str object";
    case V_LIST:
        return t & 0x80 ? "tuple object" : "list object";
    case V_DICT:
        return "dict object";
    case V_NS:
        return "transformers.utils.chat_template_utils.TemplateNamespace object";
    case V_LOOP:
        return "jinja2.runtime.LoopContext object";
    case V_MACRO:
        return "jinja2.runtime.Macro object";
    default:
        return "object";
    }
}

static uint8_t obj_tag(tp_val obj) {
    return (uint8_t)(obj.t | (obj.t == V_LIST && obj.u.l->tuple ? 0x80 : 0));
}

void rl__tp_undef_message(tp_val v, char *buf, size_t cap) {
    switch (v.ukind) {
    case UK_NAME:
        snprintf(buf, cap, "'%s' is undefined", v.u.s.p);
        return;
    case UK_HINT:
        snprintf(buf, cap, "%s", v.u.s.p);
        return;
    case UK_ATTR: {
        int n = v.u.s.n > 80 ? 80 : (int)v.u.s.n;
        if ((v.uobj & 0x7f) == V_NONE)
            snprintf(buf, cap, "'None' has no attribute '%.*s'", n, v.u.s.p);
        else
            snprintf(buf, cap, "'%s' has no attribute '%.*s'", type_repr(v.uobj), n, v.u.s.p);
        return;
    }
    case UK_ELEM:
        snprintf(buf, cap, "%s has no element %lld", type_repr(v.uobj), (long long)v.u.i);
        return;
    default:
        snprintf(buf, cap, "use of an undefined value");
        return;
    }
}

_Noreturn void rl__tp_undefined(tp_ctx *c, tp_val v, size_t off) {
    char msg[256];
    rl__tp_undef_message(v, msg, sizeof msg);
    rl__tp_fail(c, RL_ERR_FORMAT, off, "%s", msg);
}

static tp_val undef_attr(tp_val obj, const char *name, size_t n) {
    tp_val v = {.t = V_UNDEF, .ukind = UK_ATTR, .uobj = obj_tag(obj)};
    v.u.s.p = name;
    v.u.s.n = n;
    return v;
}

static tp_val undef_key(tp_val obj, tp_val key) {
    if (key.t == V_STR) return undef_attr(obj, key.u.s.p, key.u.s.n);
    if (key.t == V_INT || key.t == V_BOOL) {
        tp_val v = {.t = V_UNDEF, .ukind = UK_ELEM, .uobj = obj_tag(obj)};
        v.u.i = num_i(key);
        return v;
    }
    return mk_undef(NULL);
}

/* A method read as an attribute: bound (safe) or an unsafe undefined. */
static tp_val method_value(tp_ctx *c, tp_val obj, const char *name, size_t n, int kind,
                           size_t off) {
    char *nm = rl__tp_strdup(c, name, n, off);
    if (kind == 2) {
        char *m = rl__tp_alloc(c, n + 80, off);
        snprintf(m, n + 80, "access to attribute '%s' of '%s' object is unsafe.", nm,
                 rl__tp_type_name(obj));
        return mk_undef_hint(m);
    }
    tp_val v = {.t = V_METHOD};
    v.u.bm = rl__tp_alloc(c, sizeof *v.u.bm, off);
    v.u.bm->obj = obj;
    v.u.bm->name = nm;
    return v;
}

/* Python-style index normalization; returns false when out of range. */
static bool norm_index(int64_t i, size_t n, size_t *out) {
    if (i < 0) i += (int64_t)n;
    if (i < 0 || (uint64_t)i >= n) return false;
    *out = (size_t)i;
    return true;
}

static tp_val str_char(tp_val s, size_t cp) {
    size_t a = rl_utf8_offset(s.u.s.p, s.u.s.n, cp);
    size_t b = rl_utf8_offset(s.u.s.p + a, s.u.s.n - a, 1) + a;
    tp_val r = tp_str(s.u.s.p + a, b - a);
    r.safe = s.safe;
    return r;
}

/* loop.<name>; false if the loop object has no such attribute */
static bool loop_attr(const tp_loop *l, const char *name, tp_val *out) {
    int64_t i = l->index0, n = l->length;
    if (!strcmp(name, "index"))
        *out = mk_int(i + 1);
    else if (!strcmp(name, "index0"))
        *out = mk_int(i);
    else if (!strcmp(name, "revindex"))
        *out = mk_int(n - i);
    else if (!strcmp(name, "revindex0"))
        *out = mk_int(n - i - 1);
    else if (!strcmp(name, "first"))
        *out = mk_bool(i == 0);
    else if (!strcmp(name, "last"))
        *out = mk_bool(i == n - 1);
    else if (!strcmp(name, "length"))
        *out = mk_int(n);
    else if (!strcmp(name, "depth"))
        *out = mk_int(1);
    else if (!strcmp(name, "depth0"))
        *out = mk_int(0);
    else if (!strcmp(name, "previtem"))
        *out = i > 0 ? l->items->v[i - 1] : mk_undef_hint("there is no previous item");
    else if (!strcmp(name, "nextitem"))
        *out = i + 1 < n ? l->items->v[i + 1] : mk_undef_hint("there is no next item");
    else
        return false;
    return true;
}

tp_val rl__tp_get_item(tp_ctx *c, tp_val obj, tp_val key, size_t off) {
    size_t idx;
    switch (obj.t) {
    case V_UNDEF:
        rl__tp_undefined(c, obj, off);
    case V_DICT:
    case V_NS: {
        tp_val *v = rl__tp_dict_get(c, obj.u.d, key, off);
        if (v) return *v;
        break;
    }
    case V_LIST:
        if (obj.u.l->kind == LK_SEQ && (key.t == V_INT || key.t == V_BOOL)) {
            if (norm_index(num_i(key), obj.u.l->n, &idx)) return obj.u.l->v[idx];
            return undef_key(obj, key);
        }
        break;
    case V_STR:
        if (key.t == V_INT || key.t == V_BOOL) {
            rl__tp_charge(c, obj.u.s.n, off);
            if (norm_index(num_i(key), rl_utf8_count(obj.u.s.p, obj.u.s.n), &idx))
                return str_char(obj, idx);
            return undef_key(obj, key);
        }
        break;
    default:
        break;
    }
    if (key.t == V_STR && !memchr(key.u.s.p, 0, key.u.s.n)) { /* getitem falls back to getattr */
        char *name = rl__tp_strdup(c, key.u.s.p, key.u.s.n, off);
        int kind = rl__tp_method_kind(obj, name);
        if (kind) return method_value(c, obj, name, key.u.s.n, kind, off);
        tp_val v;
        if (obj.t == V_LOOP && loop_attr(obj.u.loop, name, &v)) return v;
    }
    return undef_key(obj, key);
}

/* jinja2.runtime.Macro's public attributes */
static bool macro_attr(tp_ctx *c, const tp_macro *m, const char *name, tp_val *out, size_t off) {
    const tp_node *d = m->def;
    if (!strcmp(name, "name")) {
        const char *nm = d->kind == N_MACRO ? d->s : "caller";
        *out = tp_str(nm, strlen(nm));
    } else if (!strcmp(name, "arguments")) {
        *out = mk_list(c, d->n_names, true, off);
        for (size_t i = 0; i < d->n_names; i++)
            out->u.l->v[i] = tp_str(d->names[i], strlen(d->names[i]));
    } else if (!strcmp(name, "catch_kwargs"))
        *out = mk_bool(d->op & MAC_KWARGS);
    else if (!strcmp(name, "catch_varargs"))
        *out = mk_bool(d->op & MAC_VARARGS);
    else if (!strcmp(name, "caller"))
        *out = mk_bool(d->op & MAC_CALLER);
    else
        return false;
    return true;
}

tp_val rl__tp_get_attr(tp_ctx *c, tp_val obj, const char *name, size_t off) {
    if (obj.t == V_UNDEF) rl__tp_undefined(c, obj, off);
    size_t n = strlen(name);
    int kind = rl__tp_method_kind(obj, name);
    if (kind) return method_value(c, obj, name, n, kind, off);
    if (obj.t == V_DICT || obj.t == V_NS) {
        tp_val *v = rl__tp_dict_get_str(c, obj.u.d, name, n, off);
        if (v) return *v;
    }
    tp_val v;
    if (obj.t == V_LOOP && loop_attr(obj.u.loop, name, &v)) return v;
    if (obj.t == V_MACRO && macro_attr(c, obj.u.mac, name, &v, off)) return v;
    return undef_attr(obj, name, n);
}

/* Materializes something iterable as a list (dict -> keys, str -> chars). */
tp_list *rl__tp_iterate(tp_ctx *c, tp_val v, size_t off) {
    switch (v.t) {
    case V_UNDEF:
        return mk_list(c, 0, false, off).u.l;
    case V_LIST:
        if (v.u.l->kind == LK_ITER) { /* one pass: what is left, then empty */
            tp_val l = mk_list(c, v.u.l->n, false, off);
            if (v.u.l->n) memcpy(l.u.l->v, v.u.l->v, v.u.l->n * sizeof(tp_val));
            v.u.l->n = 0;
            return l.u.l;
        }
        return v.u.l;
    case V_DICT: {
        tp_val l = mk_list(c, v.u.d->n, false, off);
        for (size_t i = 0; i < v.u.d->n; i++) l.u.l->v[i] = v.u.d->k[i];
        return l.u.l;
    }
    case V_STR: {
        size_t n = rl_utf8_count(v.u.s.p, v.u.s.n);
        tp_val l = mk_list(c, n, false, off);
        size_t pos = 0;
        for (size_t i = 0; i < n; i++) {
            size_t w = rl_utf8_offset(v.u.s.p + pos, v.u.s.n - pos, 1);
            l.u.l->v[i] = tp_str(v.u.s.p + pos, w);
            l.u.l->v[i].safe = v.safe;
            pos += w;
        }
        return l.u.l;
    }
    default:
        rl__tp_fail(c, RL_ERR_FORMAT, off, "'%s' object is not iterable", rl__tp_type_name(v));
    }
}

void rl__tp_ns_check_name(tp_ctx *c, tp_val name, size_t off) {
    if (name.t == V_STR && name.u.s.n && name.u.s.p[0] == '_')
        rl__tp_fail(c, RL_ERR_INVALID, off,
                    "Chat templates cannot store underscore-prefixed attributes on a namespace, "
                    "but got '%.*s'. "
                    "Please rename the attribute.",
                    (int)(name.u.s.n > 60 ? 60 : name.u.s.n), name.u.s.p);
}
