/* Chat-template macros, call blocks and filter blocks, and output capture.
 *
 * Semantics are jinja2's:
 *   - `{% macro m(a, b=default) %}` binds m (a V_MACRO) in the current
 *     scope.  A call binds positional then keyword arguments; a missing
 *     argument without a default is undefined; defaults are evaluated at call
 *     time, after the parameters before them are bound.  Extra positional
 *     arguments go to `varargs` and unknown keywords to `kwargs` when the body
 *     reads those names, and are an error otherwise.  The call renders the
 *     body and returns the text as a string.
 *   - The body sees its own frame, then the frames that were visible where
 *     the macro was defined (as they are at call time: closures bind late),
 *     never the caller's loop variables.
 *   - `{% call(x) m(...) %}body{% endcall %}` calls m with `caller`, a macro
 *     whose body is the call block's, seeing the scope of the call site.
 *   - `{% filter f | g(1) %}body{% endfilter %}` renders the body and
 *     outputs it through the filters.
 *
 * Invariants: macro calls in progress are bounded by limits.max_depth and,
 * with every eval/exec level, by RL__TP_RDEPTH (a recursive macro ends in a
 * clear error); each call is charged a step; captured text is moved out of
 * the output buffer into the arena, so output bytes in flight never exceed
 * limits.max_output.
 */
#include <stdio.h>
#include <string.h>

#include "chat/chat-impl.h"

size_t rl__tp_capture_begin(tp_ctx *c) {
    return c->out.n;
}

tp_val rl__tp_capture_end(tp_ctx *c, size_t mark, size_t off) {
    RL_ASSERT(mark <= c->out.n);
    size_t n = c->out.n - mark;
    char *s = rl__tp_strdup(c, n ? c->out.p + mark : "", n, off);
    c->out.n = mark;
    if (c->out.p) c->out.p[mark] = 0;
    return tp_str(s, n);
}

void rl__tp_define_macro(tp_ctx *c, tp_node *n) {
    tp_macro *m = rl__tp_alloc(c, sizeof *m, n->off);
    m->def = n;
    m->scope = c->n_frames;
    tp_val v = {.t = V_MACRO};
    v.u.mac = m;
    rl__tp_set_var(c, n->s, v, n->off);
}

static const char *macro_name(const tp_macro *m) {
    return m->def->kind == N_MACRO ? m->def->s : "caller";
}

tp_val rl__tp_call_macro(tp_ctx *c, tp_macro *m, targs *a, tp_val *caller, size_t off) {
    step(c, off);
    const tp_node *d = m->def;
    const char *name = macro_name(m);
    size_t np = d->n_names;
    if (++c->n_calls > c->lim.max_depth)
        rl__tp_fail(c, RL_ERR_LIMIT, off,
                    "macro calls nested deeper than %d (runaway recursion in '%s'?)",
                    c->lim.max_depth, name);
    rl__tp_rdepth_enter(c, off);
    if (a->n_pos > np && !(d->op & MAC_VARARGS))
        rl__tp_fail(c, RL_ERR_FORMAT, off, "macro '%s' takes not more than %zu argument(s)", name,
                    np);
    /* keyword arguments: a parameter's slot, or `kwargs` */
    tp_val **slot = np && a->n_kw ? rl__tp_alloc_array(c, np, sizeof *slot, off) : NULL;
    tp_val kwargs = {.t = V_NONE};
    if (d->op & MAC_KWARGS) kwargs = mk_dict(c, 0, off);
    for (size_t k = 0; k < a->n_kw; k++) {
        size_t i = 0;
        while (i < np && strcmp(d->names[i], a->kw[k]) != 0) i++;
        if (i < np && i >= a->n_pos && !slot[i]) {
            slot[i] = &a->kwv[k];
        } else if (d->op & MAC_KWARGS) { /* jinja2: also a parameter already given positionally */
            rl__tp_dict_set(c, kwargs.u.d, tp_str(a->kw[k], strlen(a->kw[k])), a->kwv[k], off);
        } else {
            rl__tp_fail(c, RL_ERR_FORMAT, off, "macro '%s' takes no keyword argument '%s'", name,
                        a->kw[k]);
        }
    }
    /* the body's frame: after it, lookup continues at the macro's scope */
    size_t base = c->n_frames;
    rl__tp_push_frame(c, off);
    c->frames[base].up = m->scope < base ? m->scope : base;
    for (size_t i = 0; i < np; i++) {
        tp_val v;
        if (i < a->n_pos)
            v = a->pos[i];
        else if (slot && slot[i])
            v = *slot[i];
        else if (d->body2[i])
            v = rl__tp_eval(c, d->body2[i]);
        else {
            size_t mn = strlen(d->names[i]) + 32;
            char *msg = rl__tp_alloc(c, mn, off);
            snprintf(msg, mn, "parameter '%s' was not provided", d->names[i]);
            v = mk_undef_hint(msg);
        }
        rl__tp_set_var(c, d->names[i], v, off);
    }
    if (d->op & MAC_VARARGS) {
        size_t nv = a->n_pos > np ? a->n_pos - np : 0;
        tp_val va = mk_list(c, nv, true, off);
        for (size_t i = 0; i < nv; i++) va.u.l->v[i] = a->pos[np + i];
        rl__tp_set_var(c, "varargs", va, off);
    }
    if (caller && !(d->op & MAC_CALLER)) { /* jinja2: then it is just a keyword */
        if (!(d->op & MAC_KWARGS))
            rl__tp_fail(c, RL_ERR_FORMAT, off,
                        "macro '%s' was invoked with two values for the special caller argument",
                        name);
        rl__tp_dict_set(c, kwargs.u.d, tp_str("caller", 6), *caller, off);
    }
    if (d->op & MAC_KWARGS) rl__tp_set_var(c, "kwargs", kwargs, off);
    if (d->op & MAC_CALLER)
        rl__tp_set_var(c, "caller", caller ? *caller : mk_undef_hint("No caller defined"), off);
    size_t mark = rl__tp_capture_begin(c);
    rl__tp_exec_body(c, d->body, d->n_body); /* break/continue cannot leave a macro */
    tp_val out = rl__tp_capture_end(c, mark, off);
    c->n_frames = base;
    c->n_calls--;
    c->rdepth--;
    return out;
}

int rl__tp_exec_callblock(tp_ctx *c, tp_node *n) {
    tp_node *call = n->a;
    tp_val f = rl__tp_eval(c, call->a);
    targs a = rl__tp_eval_args(c, call);
    if (f.t == V_UNDEF) rl__tp_undefined(c, f, call->off);
    if (f.t != V_MACRO)
        rl__tp_fail(c, RL_ERR_FORMAT, call->off,
                    "'%s' object is not callable (a call block needs a macro)",
                    rl__tp_type_name(f));
    tp_macro *cm = rl__tp_alloc(c, sizeof *cm, n->off);
    cm->def = n;
    cm->scope = c->n_frames;
    tp_val caller = {.t = V_MACRO};
    caller.u.mac = cm;
    tp_val v = rl__tp_call_macro(c, f.u.mac, &a, &caller, call->off);
    rl__tp_emit(c, v.u.s.p, v.u.s.n, n->off); /* as {{ m(...) }} would */
    return FLOW_NORMAL;
}

tp_val rl__tp_apply_filters(tp_ctx *c, tp_node *chain, tp_val v) {
    rl__tp_rdepth_enter(c, chain->off);
    if (chain->a) v = rl__tp_apply_filters(c, chain->a, v);
    targs a = rl__tp_eval_args(c, chain);
    v = rl__tp_filter(c, chain->s, v, &a, chain->off);
    c->rdepth--;
    return v;
}
