/* Chat-template parser: tokens (template_lex.c) -> AST.
 *
 * Recursive descent over jinja2's expression grammar (or, and, not,
 * comparisons, ~, + -, * / // %, **, unary, filters, postfix) and its
 * statements (if/elif/else, for, set, block set (optionally filtered),
 * macro, call, filter, generation, break, continue; raw blocks are the
 * lexer's).  Any other statement (include, extends, import, block, ...) is
 * an error naming it.
 *
 * Invariants: every node carries the byte offset of its token, so errors
 * name line:col; recursion (nested blocks and expressions) is bounded by
 * limits.max_depth; all memory comes from the ctx arena.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/chat-impl.h"

/* ----------------------------------------------------------------- parser */

static tp_tok *cur(tp_ctx *c) {
    return &c->toks[c->pos];
}
static tp_tok *next_tok(tp_ctx *c) {
    tp_tok *t = &c->toks[c->pos];
    if (t->kind != TK_EOF) c->pos++;
    return t;
}
static bool tok_is(tp_tok *t, tp_tkind k, const char *s) {
    if (t->kind != k) return false;
    if (!s) return true;
    size_t l = strlen(s);
    return t->n == l && memcmp(t->p, s, l) == 0;
}
static bool at_op(tp_ctx *c, const char *s) {
    return tok_is(cur(c), TK_OP, s);
}
static bool at_name(tp_ctx *c, const char *s) {
    return tok_is(cur(c), TK_NAME, s);
}
static bool skip_op(tp_ctx *c, const char *s) {
    if (!at_op(c, s)) return false;
    c->pos++;
    return true;
}
static bool skip_name(tp_ctx *c, const char *s) {
    if (!at_name(c, s)) return false;
    c->pos++;
    return true;
}

static const char *tok_desc(tp_ctx *c, tp_tok *t) {
    switch (t->kind) {
    case TK_TEXT:
        return "template text";
    case TK_VAR_BEGIN:
        return "'{{'";
    case TK_VAR_END:
        return "'}}'";
    case TK_BLOCK_BEGIN:
        return "'{%'";
    case TK_BLOCK_END:
        return "'%}'";
    case TK_STR:
        return "string literal";
    case TK_INT:
        return "integer literal";
    case TK_FLOAT:
        return "float literal";
    case TK_EOF:
        return "end of template";
    case TK_NAME:
    case TK_OP: {
        size_t n = t->n > 40 ? 40 : t->n;
        char *b = rl__tp_alloc(c, n + 3, t->off);
        b[0] = '\'';
        memcpy(b + 1, t->p, n);
        b[n + 1] = '\'';
        return b;
    }
    }
    return "token";
}

static _Noreturn void unexpected(tp_ctx *c, const char *want) {
    tp_tok *t = cur(c);
    rl__tp_fail(c, RL_ERR_FORMAT, t->off, "expected %s, got %s", want, tok_desc(c, t));
}
static void expect_op(tp_ctx *c, const char *s) {
    if (!skip_op(c, s)) {
        char w[16];
        snprintf(w, sizeof w, "'%s'", s);
        unexpected(c, w);
    }
}
static tp_tok *expect_name(tp_ctx *c) {
    if (cur(c)->kind != TK_NAME) unexpected(c, "a name");
    return next_tok(c);
}
static void expect_block_end(tp_ctx *c) {
    if (cur(c)->kind != TK_BLOCK_END) unexpected(c, "'%}'");
    c->pos++;
}

static void enter(tp_ctx *c, size_t off) {
    if (++c->depth > c->lim.max_depth)
        rl__tp_fail(c, RL_ERR_LIMIT, off, "nesting deeper than %d", c->lim.max_depth);
}
static void leave(tp_ctx *c) {
    c->depth--;
}

static tp_node *mk(tp_ctx *c, tp_nkind k, size_t off) {
    tp_node *n = rl__tp_alloc(c, sizeof *n, off);
    n->kind = k;
    n->off = off;
    return n;
}

static const char *tok_cstr(tp_ctx *c, tp_tok *t) {
    return rl__tp_strdup(c, t->p, t->n, t->off);
}

/* Growable node-pointer vector built in the arena. */
typedef struct nvec {
    tp_node **v;
    size_t n, cap;
} nvec;
static void nvec_push(tp_ctx *c, nvec *nv, tp_node *x) {
    nv->v = rl__tp_grow(c, nv->v, nv->n, &nv->cap, sizeof *nv->v, 4, x ? x->off : 0);
    nv->v[nv->n++] = x;
}

static tp_node *parse_expr(tp_ctx *c);
static tp_node *parse_or(tp_ctx *c);
static tp_node *parse_unary(tp_ctx *c, bool with_filter);
static tp_node *parse_primary(tp_ctx *c);

/* Parses "(args, name=value, ...)" after the '(' has been consumed. */
static void parse_call_args(tp_ctx *c, tp_node *n) {
    nvec args = {0}, kwv = {0};
    const char **names = NULL;
    size_t n_names = 0, cap_names = 0;
    while (!skip_op(c, ")")) {
        if (args.n + kwv.n > 0) expect_op(c, ",");
        if (skip_op(c, ")")) break; /* trailing comma */
        if (cur(c)->kind == TK_NAME && tok_is(&c->toks[c->pos + 1], TK_OP, "=")) {
            tp_tok *t = next_tok(c);
            c->pos++;
            names = rl__tp_grow(c, names, n_names, &cap_names, sizeof *names, 4, t->off);
            names[n_names++] = tok_cstr(c, t);
            nvec_push(c, &kwv, parse_expr(c));
        } else {
            if (kwv.n) unexpected(c, "a keyword argument (positional after keyword)");
            nvec_push(c, &args, parse_expr(c));
        }
    }
    n->body = args.v;
    n->n_body = args.n;
    n->body2 = kwv.v;
    n->n_body2 = kwv.n;
    n->names = names;
    n->n_names = n_names;
}

static tp_node *parse_postfix(tp_ctx *c, tp_node *n) {
    for (;;) {
        tp_tok *t = cur(c);
        if (skip_op(c, ".")) {
            tp_tok *a = cur(c);
            if (a->kind == TK_INT) {
                c->pos++;
                tp_node *x = mk(c, E_ITEM, t->off);
                x->a = n;
                x->b = mk(c, E_LIT, a->off);
                x->b->lit.t = V_INT;
                x->b->lit.u.i = a->i;
                n = x;
                continue;
            }
            a = expect_name(c);
            tp_node *x = mk(c, E_ATTR, t->off);
            x->a = n;
            x->s = tok_cstr(c, a);
            x->sn = a->n;
            n = x;
        } else if (skip_op(c, "[")) {
            tp_node *parts[3] = {NULL, NULL, NULL};
            int np = 0;
            bool slice = false;
            for (;;) {
                if (at_op(c, ":")) {
                    c->pos++;
                    slice = true;
                    if (++np > 2) unexpected(c, "']'");
                    continue;
                }
                if (at_op(c, "]")) break;
                if (parts[np]) unexpected(c, "':' or ']'");
                parts[np] = parse_expr(c);
            }
            c->pos++;
            if (!slice && !parts[0]) rl__tp_fail(c, RL_ERR_FORMAT, t->off, "empty subscript");
            tp_node *x = mk(c, slice ? E_SLICE : E_ITEM, t->off);
            x->a = n;
            x->b = parts[0];
            x->c = parts[1];
            x->d = parts[2];
            n = x;
        } else if (skip_op(c, "(")) {
            tp_node *x = mk(c, E_CALL, t->off);
            x->a = n;
            enter(c, t->off);
            parse_call_args(c, x);
            leave(c);
            n = x;
        } else {
            return n;
        }
    }
}

/* One filter after its '|' (or first in a filter block): name[(args)],
 * applied to n (NULL in a filter block's chain). */
static tp_node *parse_one_filter(tp_ctx *c, tp_node *n, size_t off) {
    tp_tok *name = expect_name(c);
    tp_node *x = mk(c, E_FILTER, off);
    x->a = n;
    x->s = tok_cstr(c, name);
    x->sn = name->n;
    if (skip_op(c, "(")) {
        enter(c, off);
        parse_call_args(c, x);
        leave(c);
    }
    return x;
}

static tp_node *parse_filters(tp_ctx *c, tp_node *n) {
    for (;;) {
        tp_tok *t = cur(c);
        if (skip_op(c, "|")) {
            n = parse_one_filter(c, n, t->off);
        } else if (skip_name(c, "is")) {
            tp_node *x = mk(c, E_TEST, t->off);
            x->op = skip_name(c, "not");
            tp_tok *name = cur(c);
            /* `is none`, `is true` etc. arrive as names; `is ==` as an op */
            if (name->kind != TK_NAME && !tok_is(name, TK_OP, "==") && !tok_is(name, TK_OP, "!=") &&
                !tok_is(name, TK_OP, "<") && !tok_is(name, TK_OP, ">") &&
                !tok_is(name, TK_OP, "<=") && !tok_is(name, TK_OP, ">="))
                unexpected(c, "a test name");
            c->pos++;
            x->a = n;
            x->s = tok_cstr(c, name);
            x->sn = name->n;
            tp_tok *nx = cur(c);
            if (skip_op(c, "(")) {
                enter(c, t->off);
                parse_call_args(c, x);
                leave(c);
            } else if ((nx->kind == TK_NAME || nx->kind == TK_STR || nx->kind == TK_INT ||
                        nx->kind == TK_FLOAT || tok_is(nx, TK_OP, "[") || tok_is(nx, TK_OP, "{")) &&
                       !tok_is(nx, TK_NAME, "else") && !tok_is(nx, TK_NAME, "or") &&
                       !tok_is(nx, TK_NAME, "and") && !tok_is(nx, TK_NAME, "if") &&
                       !tok_is(nx, TK_NAME, "in") && !tok_is(nx, TK_NAME, "not") &&
                       !tok_is(nx, TK_NAME, "is")) {
                tp_node *arg = parse_postfix(c, parse_primary(c));
                x->body = rl__tp_alloc(c, sizeof(tp_node *), nx->off);
                x->body[0] = arg;
                x->n_body = 1;
            }
            n = x;
        } else if (n->kind == E_FILTER && skip_op(c, "(")) {
            /* `x|f(...)` call syntax already handled; a call after a filter
             * chain calls its result */
            tp_node *x = mk(c, E_CALL, t->off);
            x->a = n;
            enter(c, t->off);
            parse_call_args(c, x);
            leave(c);
            n = x;
        } else {
            return n;
        }
    }
}

static tp_node *parse_primary(tp_ctx *c) {
    tp_tok *t = cur(c);
    tp_node *n;
    switch (t->kind) {
    case TK_STR: {
        c->pos++;
        /* adjacent string literals concatenate, as in Python */
        const char *p = t->p;
        size_t len = t->n;
        while (cur(c)->kind == TK_STR) {
            tp_tok *u = next_tok(c);
            char *b = rl__tp_alloc(c, len + u->n + 1, u->off);
            memcpy(b, p, len);
            memcpy(b + len, u->p, u->n);
            p = b;
            len += u->n;
        }
        n = mk(c, E_LIT, t->off);
        n->lit = tp_str(p, len);
        return n;
    }
    case TK_INT:
        c->pos++;
        n = mk(c, E_LIT, t->off);
        n->lit.t = V_INT;
        n->lit.u.i = t->i;
        return n;
    case TK_FLOAT:
        c->pos++;
        n = mk(c, E_LIT, t->off);
        n->lit.t = V_FLOAT;
        n->lit.u.f = t->f;
        return n;
    case TK_NAME:
        c->pos++;
        n = mk(c, E_LIT, t->off);
        if (tok_is(t, TK_NAME, "true") || tok_is(t, TK_NAME, "True")) {
            n->lit.t = V_BOOL;
            n->lit.u.b = true;
        } else if (tok_is(t, TK_NAME, "false") || tok_is(t, TK_NAME, "False")) {
            n->lit.t = V_BOOL;
        } else if (tok_is(t, TK_NAME, "none") || tok_is(t, TK_NAME, "None")) {
            n->lit.t = V_NONE;
        } else {
            n->kind = E_NAME;
            n->s = tok_cstr(c, t);
            n->sn = t->n;
        }
        return n;
    case TK_OP:
        if (skip_op(c, "(")) {
            enter(c, t->off);
            if (skip_op(c, ")")) {
                n = mk(c, E_TUPLE, t->off);
            } else {
                tp_node *first = parse_expr(c);
                if (at_op(c, ",")) {
                    nvec items = {0};
                    nvec_push(c, &items, first);
                    while (skip_op(c, ",")) {
                        if (at_op(c, ")")) break;
                        nvec_push(c, &items, parse_expr(c));
                    }
                    n = mk(c, E_TUPLE, t->off);
                    n->body = items.v;
                    n->n_body = items.n;
                } else {
                    n = first;
                }
                expect_op(c, ")");
            }
            leave(c);
            return n;
        }
        if (skip_op(c, "[")) {
            enter(c, t->off);
            nvec items = {0};
            while (!skip_op(c, "]")) {
                if (items.n) expect_op(c, ",");
                if (skip_op(c, "]")) break;
                nvec_push(c, &items, parse_expr(c));
            }
            leave(c);
            n = mk(c, E_LIST, t->off);
            n->body = items.v;
            n->n_body = items.n;
            return n;
        }
        if (skip_op(c, "{")) {
            enter(c, t->off);
            nvec keys = {0}, vals = {0};
            while (!skip_op(c, "}")) {
                if (keys.n) expect_op(c, ",");
                if (skip_op(c, "}")) break;
                nvec_push(c, &keys, parse_expr(c));
                expect_op(c, ":");
                nvec_push(c, &vals, parse_expr(c));
            }
            leave(c);
            n = mk(c, E_DICT, t->off);
            n->body = keys.v;
            n->n_body = keys.n;
            n->body2 = vals.v;
            n->n_body2 = vals.n;
            return n;
        }
        break;
    default:
        break;
    }
    unexpected(c, "an expression");
}

static tp_node *parse_unary(tp_ctx *c, bool with_filter) {
    tp_tok *t = cur(c);
    tp_node *n;
    enter(c, t->off);
    if (skip_op(c, "-") || skip_op(c, "+")) {
        n = mk(c, tok_is(t, TK_OP, "-") ? E_NEG : E_POS, t->off);
        n->a = parse_unary(c, false);
    } else {
        n = parse_primary(c);
    }
    n = parse_postfix(c, n);
    if (with_filter) n = parse_filters(c, n);
    leave(c);
    return n;
}

static tp_node *bin(tp_ctx *c, int op, tp_node *a, tp_node *b, size_t off) {
    tp_node *n = mk(c, E_BIN, off);
    n->op = op;
    n->a = a;
    n->b = b;
    return n;
}

static tp_node *parse_pow(tp_ctx *c) {
    tp_node *n = parse_unary(c, true);
    while (at_op(c, "**")) {
        size_t off = next_tok(c)->off;
        n = bin(c, TP_OP_POW, n, parse_unary(c, true), off);
    }
    return n;
}

static tp_node *parse_math2(tp_ctx *c) {
    tp_node *n = parse_pow(c);
    for (;;) {
        int op = at_op(c, "*")    ? TP_OP_MUL
                 : at_op(c, "/")  ? TP_OP_DIV
                 : at_op(c, "//") ? TP_OP_FLOORDIV
                 : at_op(c, "%")  ? TP_OP_MOD
                                  : 0;
        if (!op) return n;
        size_t off = next_tok(c)->off;
        n = bin(c, op, n, parse_pow(c), off);
    }
}

static tp_node *parse_concat(tp_ctx *c) {
    tp_node *n = parse_math2(c);
    while (at_op(c, "~")) {
        size_t off = next_tok(c)->off;
        n = bin(c, TP_OP_CONCAT, n, parse_math2(c), off);
    }
    return n;
}

static tp_node *parse_math1(tp_ctx *c) {
    tp_node *n = parse_concat(c);
    for (;;) {
        int op = at_op(c, "+") ? TP_OP_ADD : at_op(c, "-") ? TP_OP_SUB : 0;
        if (!op) return n;
        size_t off = next_tok(c)->off;
        n = bin(c, op, n, parse_concat(c), off);
    }
}

static tp_node *parse_compare(tp_ctx *c) {
    tp_node *first = parse_math1(c);
    nvec rhs = {0};
    int *ops = NULL;
    size_t cap = 0;
    size_t off = cur(c)->off;
    for (;;) {
        int op = 0;
        if (at_op(c, "=="))
            op = TP_OP_EQ;
        else if (at_op(c, "!="))
            op = TP_OP_NE;
        else if (at_op(c, "<"))
            op = TP_OP_LT;
        else if (at_op(c, "<="))
            op = TP_OP_LE;
        else if (at_op(c, ">"))
            op = TP_OP_GT;
        else if (at_op(c, ">="))
            op = TP_OP_GE;
        else if (at_name(c, "in"))
            op = TP_OP_IN;
        else if (at_name(c, "not") && tok_is(&c->toks[c->pos + 1], TK_NAME, "in")) {
            op = TP_OP_NOTIN;
            c->pos++;
        }
        if (!op) break;
        c->pos++;
        ops = rl__tp_grow(c, ops, rhs.n, &cap, sizeof *ops, 4, off);
        ops[rhs.n] = op;
        nvec_push(c, &rhs, parse_math1(c));
    }
    if (!rhs.n) return first;
    tp_node *n = mk(c, E_COMPARE, off);
    n->a = first;
    n->body = rhs.v;
    n->n_body = rhs.n;
    n->ops = ops;
    return n;
}

static tp_node *parse_not(tp_ctx *c) {
    tp_tok *t = cur(c);
    if (at_name(c, "not")) {
        c->pos++;
        enter(c, t->off);
        tp_node *n = mk(c, E_NOT, t->off);
        n->a = parse_not(c);
        leave(c);
        return n;
    }
    return parse_compare(c);
}

static tp_node *parse_and(tp_ctx *c) {
    tp_node *n = parse_not(c);
    while (at_name(c, "and")) {
        size_t off = next_tok(c)->off;
        tp_node *x = mk(c, E_AND, off);
        x->a = n;
        x->b = parse_not(c);
        n = x;
    }
    return n;
}

static tp_node *parse_or(tp_ctx *c) {
    tp_node *n = parse_and(c);
    while (at_name(c, "or")) {
        size_t off = next_tok(c)->off;
        tp_node *x = mk(c, E_OR, off);
        x->a = n;
        x->b = parse_and(c);
        n = x;
    }
    return n;
}

/* expr := or ('if' or ('else' expr)?)* */
static tp_node *parse_expr(tp_ctx *c) {
    enter(c, cur(c)->off);
    tp_node *n = parse_or(c);
    while (at_name(c, "if")) {
        size_t off = next_tok(c)->off;
        tp_node *x = mk(c, E_COND, off);
        x->b = n;
        x->a = parse_or(c);
        if (skip_name(c, "else")) x->c = parse_expr(c);
        n = x;
    }
    leave(c);
    return n;
}

/* expr (',' expr)* -> a tuple when there is a comma. */
static tp_node *parse_tuple_expr(tp_ctx *c) {
    size_t off = cur(c)->off;
    tp_node *n = parse_expr(c);
    if (!at_op(c, ",")) return n;
    nvec items = {0};
    nvec_push(c, &items, n);
    while (skip_op(c, ",")) {
        if (cur(c)->kind == TK_VAR_END || cur(c)->kind == TK_BLOCK_END) break;
        nvec_push(c, &items, parse_expr(c));
    }
    tp_node *t = mk(c, E_TUPLE, off);
    t->body = items.v;
    t->n_body = items.n;
    return t;
}

/* ------------------------------------------------------------- statements */

static nvec parse_body(tp_ctx *c, const char *const *ends);

/* Target names of for/set: name (',' name)*, optionally parenthesized. */
static void parse_targets(tp_ctx *c, tp_node *n) {
    bool paren = skip_op(c, "(");
    const char **names = NULL;
    size_t cnt = 0, cap = 0;
    do {
        if (paren && at_op(c, ")")) break;
        tp_tok *t = expect_name(c);
        names = rl__tp_grow(c, names, cnt, &cap, sizeof *names, 2, t->off);
        names[cnt++] = tok_cstr(c, t);
    } while (skip_op(c, ","));
    if (paren) expect_op(c, ")");
    n->names = names;
    n->n_names = cnt;
}

/* Macro and call-block signatures: '(' [name ['=' expr] (',' ...)*] ')'
 * into n->names (parameters) and n->body2 (defaults, NULL where none). */
static void parse_signature(tp_ctx *c, tp_node *n) {
    expect_op(c, "(");
    const char **names = NULL;
    size_t cnt = 0, cap = 0;
    nvec defs = {0};
    while (!skip_op(c, ")")) {
        if (cnt) expect_op(c, ",");
        if (skip_op(c, ")")) break;
        tp_tok *t = expect_name(c);
        names = rl__tp_grow(c, names, cnt, &cap, sizeof *names, 4, t->off);
        names[cnt] = tok_cstr(c, t);
        for (size_t i = 0; i < cnt; i++)
            if (strcmp(names[i], names[cnt]) == 0)
                rl__tp_fail(c, RL_ERR_FORMAT, t->off, "duplicate parameter '%s'", names[cnt]);
        cnt++;
        if (skip_op(c, "="))
            nvec_push(c, &defs, parse_expr(c));
        else if (defs.n && defs.v[defs.n - 1])
            rl__tp_fail(c, RL_ERR_FORMAT, t->off, "non-default argument follows default argument");
        else
            nvec_push(c, &defs, NULL);
    }
    n->names = names;
    n->n_names = cnt;
    n->body2 = defs.v;
    n->n_body2 = defs.n;
}

/* MAC_* bits for the special names (varargs, kwargs, caller) that the
 * subtree reads, as jinja2 decides whether a macro takes them. */
static int special_names(tp_node *n) {
    if (!n) return 0;
    int f = 0;
    if (n->kind == E_NAME) {
        if (!strcmp(n->s, "varargs")) f |= MAC_VARARGS;
        if (!strcmp(n->s, "kwargs")) f |= MAC_KWARGS;
        if (!strcmp(n->s, "caller")) f |= MAC_CALLER;
    }
    f |= special_names(n->a) | special_names(n->b) | special_names(n->c) | special_names(n->d);
    for (size_t i = 0; i < n->n_body; i++) f |= special_names(n->body[i]);
    for (size_t i = 0; i < n->n_body2; i++) f |= special_names(n->body2[i]);
    return f;
}

/* Filters of a filter block or filtered block set: name[(args)] ('|' ...)*,
 * as E_FILTER nodes, the first-applied innermost (its a is NULL). */
static tp_node *parse_filter_chain(tp_ctx *c) {
    tp_node *n = NULL;
    do n = parse_one_filter(c, n, cur(c)->off);
    while (skip_op(c, "|"));
    return n;
}

/* Parses a block body up to {% end %} (one name) and consumes that tag. */
static void parse_block_body(tp_ctx *c, tp_node *n, const char *end) {
    const char *ends[] = {end, NULL};
    nvec body = parse_body(c, ends);
    n->body = body.v;
    n->n_body = body.n;
    c->pos += 2;
    expect_block_end(c);
}

static tp_node *parse_stmt(tp_ctx *c) {
    tp_tok *begin = next_tok(c); /* TK_BLOCK_BEGIN */
    tp_tok *kw = expect_name(c);
    size_t off = begin->off;
    enter(c, off);
    tp_node *n = NULL;
    if (tok_is(kw, TK_NAME, "if")) {
        n = mk(c, N_IF, off);
        n->a = parse_tuple_expr(c);
        expect_block_end(c);
        static const char *const ends[] = {"elif", "else", "endif", NULL};
        nvec body = parse_body(c, ends);
        n->body = body.v;
        n->n_body = body.n;
        /* at "{% elif|else|endif" */
        c->pos++;
        tp_tok *e = next_tok(c);
        if (tok_is(e, TK_NAME, "elif")) {
            c->pos -= 2; /* re-parse "{% elif ... %}" as a nested if */
            c->toks[c->pos + 1].p = "if";
            c->toks[c->pos + 1].n = 2;
            tp_node *nested = parse_stmt(c);
            n->body2 = rl__tp_alloc(c, sizeof(tp_node *), off);
            n->body2[0] = nested;
            n->n_body2 = 1;
            leave(c);
            return n; /* the nested if consumed endif */
        }
        if (tok_is(e, TK_NAME, "else")) {
            expect_block_end(c);
            static const char *const ends2[] = {"endif", NULL};
            nvec eb = parse_body(c, ends2);
            n->body2 = eb.v;
            n->n_body2 = eb.n;
            c->pos += 2;
        }
        expect_block_end(c);
    } else if (tok_is(kw, TK_NAME, "for")) {
        n = mk(c, N_FOR, off);
        parse_targets(c, n);
        if (!skip_name(c, "in")) unexpected(c, "'in'");
        /* no conditional expression here: `if` introduces the filter */
        n->a = parse_or(c);
        if (at_op(c, ",")) {
            nvec items = {0};
            nvec_push(c, &items, n->a);
            while (skip_op(c, ",")) nvec_push(c, &items, parse_or(c));
            tp_node *t = mk(c, E_TUPLE, n->a->off);
            t->body = items.v;
            t->n_body = items.n;
            n->a = t;
        }
        if (skip_name(c, "if")) n->b = parse_expr(c);
        if (at_name(c, "recursive"))
            rl__tp_fail(c, RL_ERR_UNSUPPORTED, cur(c)->off,
                        "recursive for loops are not supported");
        expect_block_end(c);
        static const char *const ends[] = {"else", "endfor", NULL};
        nvec body = parse_body(c, ends);
        n->body = body.v;
        n->n_body = body.n;
        c->pos++;
        if (tok_is(next_tok(c), TK_NAME, "else")) {
            expect_block_end(c);
            static const char *const ends2[] = {"endfor", NULL};
            nvec eb = parse_body(c, ends2);
            n->body2 = eb.v;
            n->n_body2 = eb.n;
            c->pos += 2;
        }
        expect_block_end(c);
    } else if (tok_is(kw, TK_NAME, "set")) {
        tp_tok *t = cur(c);
        if (t->kind == TK_NAME && tok_is(&c->toks[c->pos + 1], TK_OP, ".")) {
            n = mk(c, N_SET, off);
            n->a_attr = true;
            n->names = rl__tp_alloc_array(c, 2, sizeof(char *), off);
            n->names[0] = tok_cstr(c, next_tok(c));
            c->pos++;
            n->names[1] = tok_cstr(c, expect_name(c));
            n->n_names = 2;
        } else {
            n = mk(c, N_SET, off);
            parse_targets(c, n);
        }
        if (skip_op(c, "=")) {
            n->a = parse_tuple_expr(c);
            expect_block_end(c);
        } else {
            if (n->a_attr || n->n_names != 1) unexpected(c, "'='");
            n->kind = N_SETBLOCK;
            if (skip_op(c, "|")) n->a = parse_filter_chain(c);
            expect_block_end(c);
            parse_block_body(c, n, "endset");
        }
    } else if (tok_is(kw, TK_NAME, "macro")) {
        n = mk(c, N_MACRO, off);
        tp_tok *name = expect_name(c);
        n->s = tok_cstr(c, name);
        n->sn = name->n;
        parse_signature(c, n);
        expect_block_end(c);
        parse_block_body(c, n, "endmacro");
        for (size_t i = 0; i < n->n_body; i++) n->op |= special_names(n->body[i]);
    } else if (tok_is(kw, TK_NAME, "call")) {
        n = mk(c, N_CALLBLOCK, off);
        if (at_op(c, "(")) parse_signature(c, n);
        n->a = parse_expr(c);
        if (n->a->kind != E_CALL)
            rl__tp_fail(c, RL_ERR_FORMAT, n->a->off, "call block: expected a macro call");
        expect_block_end(c);
        parse_block_body(c, n, "endcall");
        for (size_t i = 0; i < n->n_body; i++) n->op |= special_names(n->body[i]);
    } else if (tok_is(kw, TK_NAME, "filter")) {
        n = mk(c, N_FILTERBLOCK, off);
        n->a = parse_filter_chain(c);
        expect_block_end(c);
        parse_block_body(c, n, "endfilter");
    } else if (tok_is(kw, TK_NAME, "generation")) {
        n = mk(c, N_BLOCK, off);
        expect_block_end(c);
        parse_block_body(c, n, "endgeneration");
    } else if (tok_is(kw, TK_NAME, "break") || tok_is(kw, TK_NAME, "continue")) {
        n = mk(c, tok_is(kw, TK_NAME, "break") ? N_BREAK : N_CONTINUE, off);
        expect_block_end(c);
    } else {
        rl__tp_fail(c, RL_ERR_UNSUPPORTED, kw->off, "unknown or unsupported statement '%.*s'",
                    (int)(kw->n > 40 ? 40 : kw->n), kw->p);
    }
    leave(c);
    return n;
}

/* Parses nodes until "{% <one of ends>" (left unconsumed) or, when ends is
 * NULL, until the end of the template.  A missing end tag is an error that
 * names the block being closed. */
static nvec parse_body(tp_ctx *c, const char *const *ends) {
    nvec body = {0};
    size_t start = c->pos ? c->toks[c->pos - 1].off : 0;
    for (;;) {
        tp_tok *t = cur(c);
        if (t->kind == TK_EOF) {
            if (ends) {
                size_t last = 0;
                while (ends[last + 1]) last++;
                rl__tp_fail(c, RL_ERR_FORMAT, start, "block not closed: missing '{%% %s %%}'",
                            ends[last]);
            }
            return body;
        }
        if (t->kind == TK_TEXT) {
            c->pos++;
            tp_node *n = mk(c, N_TEXT, t->off);
            n->s = t->p;
            n->sn = t->n;
            nvec_push(c, &body, n);
        } else if (t->kind == TK_VAR_BEGIN) {
            c->pos++;
            tp_node *n = mk(c, N_OUTPUT, t->off);
            n->a = parse_tuple_expr(c);
            if (cur(c)->kind != TK_VAR_END) unexpected(c, "'}}'");
            c->pos++;
            nvec_push(c, &body, n);
        } else if (t->kind == TK_BLOCK_BEGIN) {
            tp_tok *kw = &c->toks[c->pos + 1];
            if (kw->kind == TK_NAME) {
                for (size_t i = 0; ends && ends[i]; i++)
                    if (tok_is(kw, TK_NAME, ends[i])) return body;
                static const char *const closers[] = {
                    "elif",     "else",    "endif",     "endfor",        "endset",
                    "endmacro", "endcall", "endfilter", "endgeneration", NULL};
                for (size_t i = 0; closers[i]; i++)
                    if (tok_is(kw, TK_NAME, closers[i]))
                        rl__tp_fail(c, RL_ERR_FORMAT, kw->off, "unexpected '%s'%s", closers[i],
                                    ends ? " (wrong block nesting)" : " with no open block");
            }
            nvec_push(c, &body, parse_stmt(c));
        } else {
            unexpected(c, "template text or a tag");
        }
    }
}

tp_node **rl__tp_parse(tp_ctx *c, size_t *n_out) {
    rl__tp_lex(c);
    c->pos = 0;
    c->depth = 0;
    nvec body = parse_body(c, NULL);
    *n_out = body.n;
    return body.v;
}
