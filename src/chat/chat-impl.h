/* Internals of the chat-template interpreter (template*.c only):
 * template.c (API, arena, errors), template_lex.c and template_parse.c
 * (source -> tokens -> AST), template_eval.c (statements and expressions),
 * template_macro.c (macros, call and filter blocks, output capture),
 * template_builtins.c (filters, tests, methods, globals), template_value.c
 * (str/repr/json, equality, dicts).
 *
 * One tp_ctx lives for one render.  Everything it allocates (tokens, AST,
 * values) comes from its arena, which is capped at limits.max_memory and
 * freed in one go at the end; the output buffer is separate and capped at
 * limits.max_output.  Errors longjmp to the render entry point (rl__tp_fail), so
 * no code path below needs to unwind: the arena owns everything.
 *
 * Values are small structs passed by value.  Strings are (ptr, len) slices
 * into the source, the caller's inputs or the arena; they are never
 * modified after creation, so sharing is safe.  Lists and dicts are
 * immutable once built, except namespaces (V_NS), which `set ns.x = v`
 * mutates in place, and generators (LK_ITER), which iterating consumes.
 *
 * Two Python distinctions that templates can observe are kept: a string
 * may be markup (`safe`: markupsafe.Markup, from |safe or |escape; `+` with
 * a plain string escapes the plain one), and a list may be a one-pass
 * generator (what |map, |select, |unique ... return in jinja2: always true,
 * no len(), not JSON) or a dict view (.items(): sized, not JSON).
 */
#ifndef RL_CHAT_IMPL_H
#define RL_CHAT_IMPL_H

#include <setjmp.h>
#include <string.h>

#include "base/buf.h"
#include "chat/chat.h"

typedef enum tp_vtype {
    V_UNDEF = 0,
    V_NONE,
    V_BOOL,
    V_INT,
    V_FLOAT,
    V_STR,
    V_LIST, /* also tuples: l->tuple */
    V_DICT,
    V_NS,     /* namespace(): a dict that `set ns.a = ...` may mutate */
    V_LOOP,   /* the `loop` object of a for statement */
    V_FUNC,   /* a global function (raise_exception, namespace, ...) */
    V_MACRO,  /* a {% macro %} or the `caller` of a call block */
    V_METHOD, /* a bound method read as an attribute (`d.items` without a call) */
} tp_vtype;

/* What an undefined value knows about how it came about, for jinja2's
 * messages ("'dict object' has no attribute 'x'"). */
enum {
    UK_NONE = 0, /* nothing */
    UK_NAME,     /* u.s.p: a variable name (NUL-terminated) */
    UK_ATTR,     /* u.s.p/n: the attribute or key; uobj: the object's type */
    UK_ELEM,     /* u.i: the index; uobj: the object's type */
    UK_HINT,     /* u.s.p: the whole message (NUL-terminated) */
};

typedef struct tp_list tp_list;
typedef struct tp_dict tp_dict;
typedef struct tp_loop tp_loop;
typedef struct tp_macro tp_macro;
typedef struct tp_bound tp_bound;
typedef struct tp_node tp_node;

typedef struct tp_val {
    tp_vtype t;
    bool safe;     /* V_STR: markupsafe.Markup */
    uint8_t ukind; /* V_UNDEF: UK_* */
    uint8_t uobj;  /* V_UNDEF with UK_ATTR/UK_ELEM: tp_vtype of the object (| 0x80: a tuple) */
    union {
        bool b;
        int64_t i;
        double f;
        struct {
            const char *p;
            size_t n;
        } s; /* V_STR; for V_UNDEF the name, if known (may be NULL) */
        tp_list *l;
        tp_dict *d; /* V_DICT and V_NS */
        tp_loop *loop;
        tp_macro *mac;
        tp_bound *bm;
        int fn;
    } u;
} tp_val;

enum { LK_SEQ = 0, LK_ITER, LK_VIEW }; /* tp_list.kind */

struct tp_list {
    size_t n;
    bool tuple;
    uint8_t kind;      /* LK_*: list/tuple, generator (items left: v[0..n)), dict view */
    const char *tname; /* Python type name for LK_ITER / LK_VIEW */
    tp_val *v;
};

struct tp_dict {
    size_t n, cap;
    tp_val *k;
    tp_val *v;
};

struct tp_loop {
    int64_t index0, length;
    tp_list *items;
    tp_val last_changed; /* loop.changed(): the last arguments, once has_changed */
    bool has_changed;
};

/* A macro value: its definition (N_MACRO, or N_CALLBLOCK for `caller`) and
 * the frames its body sees besides its own: frames[0..scope) as they are at
 * call time (jinja2 closures bind late). */
struct tp_macro {
    tp_node *def;
    size_t scope;
};

struct tp_bound {
    tp_val obj;
    const char *name;
};

/* ---- tokens ---- */
typedef enum tp_tkind {
    TK_TEXT,
    TK_VAR_BEGIN,
    TK_VAR_END,
    TK_BLOCK_BEGIN,
    TK_BLOCK_END,
    TK_NAME,
    TK_STR,
    TK_INT,
    TK_FLOAT,
    TK_OP,
    TK_EOF,
} tp_tkind;

typedef struct tp_tok {
    tp_tkind kind;
    size_t off;    /* offset in the normalized source, for line:col */
    const char *p; /* TEXT/NAME/STR contents, OP spelling */
    size_t n;
    int64_t i;
    double f;
} tp_tok;

/* ---- AST ---- */
typedef enum tp_nkind {
    /* statements */
    N_TEXT,
    N_OUTPUT,   /* a: expr */
    N_IF,       /* a: cond, body: then, body2: else */
    N_FOR,      /* names: targets, a: iterable, b: filter or NULL, body, body2: else */
    N_SET,      /* names[0] (and names[1] for ns.attr when a_attr), a: value; names >1: unpack */
    N_SETBLOCK, /* names[0], body, a: filter chain or NULL */
    N_BLOCK,    /* body (generation blocks) */
    N_BREAK,
    N_CONTINUE,
    N_MACRO,       /* s: name, names: params, body2: defaults (NULL: none), body; op: MAC_* */
    N_CALLBLOCK,   /* a: the E_CALL; names/body2/body/op: the caller's, as N_MACRO */
    N_FILTERBLOCK, /* a: filter chain (E_FILTER, innermost a == NULL), body */
    /* expressions */
    E_LIT,
    E_NAME,
    E_ATTR,   /* a.name */
    E_ITEM,   /* a[b] */
    E_SLICE,  /* a[b:c:d] (any may be NULL) */
    E_CALL,   /* a(args, kwargs) */
    E_FILTER, /* a | name(args, kwargs) */
    E_TEST,   /* a is [not] name(args); op = negate */
    E_NEG,
    E_POS,
    E_NOT,
    E_AND,
    E_OR,
    E_BIN,     /* op: one of the TP_OP_* below */
    E_COMPARE, /* a, then args[i] compared with ops[i] */
    E_COND,    /* b if a else c */
    E_LIST,
    E_TUPLE,
    E_DICT, /* args: keys, kwv: values */
} tp_nkind;

enum {
    TP_OP_ADD = 1,
    TP_OP_SUB,
    TP_OP_MUL,
    TP_OP_DIV,
    TP_OP_FLOORDIV,
    TP_OP_MOD,
    TP_OP_POW,
    TP_OP_CONCAT,
    TP_OP_EQ,
    TP_OP_NE,
    TP_OP_LT,
    TP_OP_LE,
    TP_OP_GT,
    TP_OP_GE,
    TP_OP_IN,
    TP_OP_NOTIN,
};

/* N_MACRO/N_CALLBLOCK op bits: the body reads these special names */
enum { MAC_VARARGS = 1, MAC_KWARGS = 2, MAC_CALLER = 4 };

struct tp_node {
    tp_nkind kind;
    int op;
    bool a_attr; /* N_SET: target is names[0].names[1] */
    size_t off;
    tp_node *a, *b, *c, *d;
    tp_node **body; /* statements, or positional args / items */
    size_t n_body;
    tp_node **body2; /* else-branch, or kwarg values / dict values */
    size_t n_body2;
    const char **names; /* NUL-terminated (arena): for targets, kwarg names */
    size_t n_names;
    int *ops; /* E_COMPARE */
    tp_val lit;
    const char *s; /* E_NAME/E_ATTR/E_FILTER/E_TEST name; N_TEXT text */
    size_t sn;
};

typedef struct tp_chunk tp_chunk;

/* One scope.  Lookup goes from the innermost frame down; after frame i it
 * continues with frames[0..up) (up == i except for a macro body's frame,
 * whose up is the macro's scope). */
typedef struct tp_frame {
    const char **k;
    tp_val *v;
    size_t n, cap;
    size_t up;
} tp_frame;

typedef struct tp_ctx {
    jmp_buf jb;
    rl_err *err;
    rl_status status;
    rl_template_limits lim;
    /* arena */
    tp_chunk *chunks;
    size_t mem_used;
    /* source (normalized copy) and tokens */
    const char *src;
    size_t src_len;
    tp_tok *toks;
    size_t n_toks, cap_toks, pos;
    int depth;
    /* evaluation */
    uint64_t steps;
    int rdepth;  /* C recursion of eval/exec/macro calls; <= RL__TP_RDEPTH(lim) */
    int n_calls; /* macro calls in progress; <= lim.max_depth */
    rl_buf out;  /* rendered text (owned; not in the arena) */
    tp_frame *frames;
    size_t n_frames, cap_frames;
} tp_ctx;

/* Formats "chat template L:C: msg" into c->err and longjmps out. */
_Noreturn void rl__tp_fail(tp_ctx *c, rl_status st, size_t off, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void *rl__tp_alloc(tp_ctx *c, size_t n, size_t off); /* zeroed; fails (longjmp) past the cap */
void *rl__tp_alloc_array(tp_ctx *c, size_t count, size_t size, size_t off);
char *rl__tp_strdup(tp_ctx *c, const char *s, size_t n, size_t off);
/* Arena array growth: with n == *cap, returns a copy of p[0..n) in a new
 * arena array of twice *cap elements (`first` when *cap is 0) and updates
 * *cap; otherwise returns p.  The old array is reclaimed with the arena. */
void *rl__tp_grow(tp_ctx *c, void *p, size_t n, size_t *cap, size_t elem, size_t first, size_t off);

/* template_lex.c: c->src -> c->toks (ending with TK_EOF). */
void rl__tp_lex(tp_ctx *c);
/* template_parse.c: lexes and parses c->src into a statement list. */
tp_node **rl__tp_parse(tp_ctx *c, size_t *n_out);

/* template_value.c: conversions shared by the evaluator. */
void rl__tp_buf_put(tp_ctx *c, char **buf, size_t *len, size_t *cap, const char *p, size_t n,
                    size_t off);
tp_val rl__tp_to_str(tp_ctx *c, tp_val v, size_t off); /* Python str(); undefined -> "" */
void rl__tp_repr(tp_ctx *c, tp_val v, char **buf, size_t *len, size_t *cap, int depth, size_t off);
/* json.dumps options (HF's tojson filter: ensure_ascii, indent, separators,
 * sort_keys); strings are borrowed. */
typedef struct tp_jsonopt {
    bool pretty; /* indent is not None: newline + indent per level */
    const char *indent, *item_sep, *key_sep;
    size_t indent_n, item_sep_n, key_sep_n;
    bool ensure_ascii, sort_keys;
} tp_jsonopt;
void rl__tp_json(tp_ctx *c, tp_val v, char **buf, size_t *len, size_t *cap, const tp_jsonopt *o,
                 int level, size_t off);
void rl__tp_fmt_float(double f, char *buf, size_t cap); /* Python repr(float) */
const char *rl__tp_type_name(tp_val v);
bool rl__tp_truthy(tp_val v);
tp_val rl__tp_escape(tp_ctx *c, tp_val v, size_t off); /* markupsafe.escape(v) */
bool rl__tp_equal(tp_ctx *c, tp_val a, tp_val b, int depth, size_t off);
bool rl__tp_is_space_at(const char *p, size_t n, size_t i, size_t *w); /* Python isspace */
bool rl__tp_is_space_before(const char *p, size_t i, size_t *w);       /* char ending at i */
tp_dict *rl__tp_dict_new(tp_ctx *c, size_t cap, size_t off);
void rl__tp_dict_set(tp_ctx *c, tp_dict *d, tp_val k, tp_val v, size_t off);
tp_val *rl__tp_dict_get(tp_ctx *c, tp_dict *d, tp_val k, size_t off);
tp_val *rl__tp_dict_get_str(tp_ctx *c, tp_dict *d, const char *k, size_t n, size_t off);

/* ---- the evaluator (template_eval.c), used by the API and the built-ins ---- */

enum { FN_RAISE = 1, FN_NAMESPACE, FN_RANGE, FN_DICT, FN_STRFTIME }; /* V_FUNC ids */
enum { FLOW_NORMAL = 0, FLOW_BREAK = 1, FLOW_CONTINUE = 2 };         /* exec results */

/* Evaluated call arguments (arena). */
typedef struct targs {
    tp_val *pos;
    size_t n_pos;
    const char **kw;
    tp_val *kwv;
    size_t n_kw;
} targs;

/* Run-time recursion bound: expressions nest deeper at run time than in
 * the source (left-deep operator chains, macro recursion), so eval, exec
 * and macro calls count against this many levels. */
#define RL__TP_RDEPTH(lim) ((lim).max_depth * 10)

void rl__tp_push_frame(tp_ctx *c, size_t off);
void rl__tp_emit(tp_ctx *c, const char *p, size_t n, size_t off);       /* to the output, capped */
void rl__tp_set_var(tp_ctx *c, const char *name, tp_val v, size_t off); /* innermost frame */
int rl__tp_exec_body(tp_ctx *c, tp_node **body, size_t n);              /* a FLOW_* */
tp_val rl__tp_eval(tp_ctx *c, tp_node *n);                              /* an expression */
targs rl__tp_eval_args(tp_ctx *c, tp_node *n);                          /* n->body / body2 */
void rl__tp_rdepth_enter(tp_ctx *c, size_t off);                        /* ++rdepth, bounded */

/* ---- macros, call and filter blocks (template_macro.c) ---- */
/* Output capture: bytes emitted after rl__tp_capture_begin are taken off
 * the output and returned as an arena string by rl__tp_capture_end. */
size_t rl__tp_capture_begin(tp_ctx *c);
tp_val rl__tp_capture_end(tp_ctx *c, size_t mark, size_t off);
void rl__tp_define_macro(tp_ctx *c, tp_node *n); /* N_MACRO */
tp_val rl__tp_call_macro(tp_ctx *c, tp_macro *m, targs *a, tp_val *caller, size_t off);
int rl__tp_exec_callblock(tp_ctx *c, tp_node *n);                 /* N_CALLBLOCK */
tp_val rl__tp_apply_filters(tp_ctx *c, tp_node *chain, tp_val v); /* filter chain */
/* ---- access (template_access.c): jinja2's sandboxed getattr/getitem ---- */
_Noreturn void rl__tp_undefined(tp_ctx *c, tp_val v, size_t off); /* "'x' is undefined" */
void rl__tp_undef_message(tp_val v, char *buf, size_t cap);
/* obj[key]: the item first, then (string keys) a method of that name. */
tp_val rl__tp_get_item(tp_ctx *c, tp_val obj, tp_val key, size_t off);
/* obj.name: a method of that name first (a V_METHOD; mutating ones are an
 * undefined that says they are unsafe), then the item. */
tp_val rl__tp_get_attr(tp_ctx *c, tp_val obj, const char *name, size_t off);
tp_list *rl__tp_iterate(tp_ctx *c, tp_val v, size_t off); /* list; dict -> keys, str -> chars */
/* Whether `name` is a Python method of obj's type: 0 no, 1 yes, 2 yes but
 * ImmutableSandboxedEnvironment forbids it (it mutates). */
int rl__tp_method_kind(tp_val obj, const char *name);
/* HF's TemplateNamespace refuses underscore-prefixed names (SecurityError). */
void rl__tp_ns_check_name(tp_ctx *c, tp_val name, size_t off);
tp_val rl__tp_repeat(tp_ctx *c, tp_val s, int64_t k, size_t off); /* s * k */
tp_val rl__tp_binop(tp_ctx *c, int op, tp_val a, tp_val b,
                    size_t off); /* a <op> b, TP_OP_ADD..CONCAT */
/* <0, 0, >0 as Python orders a and b; errors name operator op. */
int rl__tp_compare_order(tp_ctx *c, tp_val a, tp_val b, int op, int depth, size_t off);
bool rl__tp_contains(tp_ctx *c, tp_val hay, tp_val needle, size_t off); /* needle in hay */
bool rl__tp_compare(tp_ctx *c, int op, tp_val a, tp_val b, size_t off); /* TP_OP_EQ..NOTIN */
tp_val rl__tp_want_str(tp_ctx *c, tp_val *v, const char *what, size_t off);
int64_t rl__tp_want_int(tp_ctx *c, tp_val *v, const char *what, size_t off);

/* ---- string operations (template_strings.c) ---- */
/* strip/lstrip/rstrip: chars NULL or none = Python whitespace */
tp_val rl__tp_str_strip(tp_ctx *c, tp_val s, tp_val *chars, bool left, bool right, size_t off);
/* mode: 0 lower, 1 upper, 2 capitalize, 3 str.title, 4 jinja2 |title, 5 swapcase, 6 casefold */
tp_val rl__tp_str_case(tp_ctx *c, tp_val s, int mode, size_t off);
bool rl__tp_cp_upper(uint32_t cp); /* Unicode uppercase (iswupper in a UTF-8 ctype) */
bool rl__tp_cp_lower(uint32_t cp);
bool rl__tp_cp_alpha(uint32_t cp);
tp_val rl__tp_str_split(tp_ctx *c, tp_val s, tp_val *sep, tp_val *maxsplit, size_t off);
tp_val rl__tp_str_replace(tp_ctx *c, tp_val s, tp_val *from, tp_val *to, tp_val *count, size_t off);
bool rl__tp_str_affix(tp_ctx *c, tp_val s, tp_val *x, bool end,
                      size_t off); /* startswith / endswith */
int64_t rl__tp_str_find(tp_ctx *c, tp_val s, tp_val x, int mode,
                        size_t off); /* 0 find, 1 count, 2 rfind */
tp_list *rl__tp_list_append(tp_ctx *c, tp_list *l, size_t *cap, tp_val v, size_t off);
tp_val rl__tp_str_splitlines(tp_ctx *c, tp_val s, bool keepends, size_t off);
tp_val rl__tp_str_rsplit(tp_ctx *c, tp_val s, tp_val *sep, tp_val *maxsplit, size_t off);
tp_val rl__tp_str_partition(tp_ctx *c, tp_val s, tp_val *sep, bool right, size_t off);
/* align: 0 center, 1 ljust, 2 rjust, 3 zfill */
tp_val rl__tp_str_pad(tp_ctx *c, tp_val s, tp_val *width, tp_val *fill, int align, size_t off);
/* template_format.c: fmt % args (printf-style) and fmt.format(*a) */
tp_val rl__tp_percent_format(tp_ctx *c, tp_val fmt, tp_val args, size_t off);
tp_val rl__tp_str_format(tp_ctx *c, tp_val fmt, targs *a, size_t off);

/* ---- the built-ins (filters: template_builtins.c; tests, methods and
 * globals: template_methods.c) ---- */
tp_val rl__tp_join(tp_ctx *c, tp_val v, tp_val *sep, tp_val *attr, size_t off); /* |join */
tp_val rl__tp_dict_items(tp_ctx *c, tp_dict *d, int which,
                         size_t off); /* 0 items, 1 keys, 2 values */
tp_val rl__tp_filter(tp_ctx *c, const char *name, tp_val v, targs *a, size_t off); /* v | name */
bool rl__tp_test(tp_ctx *c, const char *name, tp_val v, targs *a, size_t off);     /* v is name */
tp_val rl__tp_method(tp_ctx *c, tp_val obj, const char *name, targs *a, size_t off);
tp_val rl__tp_global(tp_ctx *c, int fn, targs *a, size_t off); /* fn: FN_* */

/* ---- small value helpers ---- */

static inline tp_val tp_str(const char *p, size_t n) {
    tp_val v;
    memset(&v, 0, sizeof v);
    v.t = V_STR;
    v.u.s.p = p;
    v.u.s.n = n;
    return v;
}
static inline tp_val mk_int(int64_t i) {
    tp_val v = {.t = V_INT};
    v.u.i = i;
    return v;
}
static inline tp_val mk_bool(bool b) {
    tp_val v = {.t = V_BOOL};
    v.u.b = b;
    return v;
}
static inline tp_val mk_float(double f) {
    tp_val v = {.t = V_FLOAT};
    v.u.f = f;
    return v;
}
static inline tp_val mk_undef(const char *name) {
    tp_val v = {.t = V_UNDEF, .ukind = name ? UK_NAME : UK_NONE};
    v.u.s.p = name;
    return v;
}
static inline tp_val mk_undef_hint(const char *msg) {
    tp_val v = {.t = V_UNDEF, .ukind = UK_HINT};
    v.u.s.p = msg;
    return v;
}
static inline tp_val mk_list(tp_ctx *c, size_t n, bool tuple, size_t off) {
    tp_val v = {.t = V_LIST};
    v.u.l = rl__tp_alloc(c, sizeof(tp_list), off);
    v.u.l->n = n;
    v.u.l->tuple = tuple;
    if (n) v.u.l->v = rl__tp_alloc_array(c, n, sizeof(tp_val), off);
    return v;
}
static inline tp_val mk_dict(tp_ctx *c, size_t cap, size_t off) {
    tp_val v = {.t = V_DICT};
    v.u.d = rl__tp_dict_new(c, cap, off);
    return v;
}
/* A copy of list l as a generator or view of Python type `tname`. */
static inline tp_val mk_lazy(tp_ctx *c, tp_list *l, uint8_t kind, const char *tname, size_t off) {
    tp_val v = mk_list(c, 0, false, off);
    *v.u.l = *l;
    v.u.l->tuple = false;
    v.u.l->kind = kind;
    v.u.l->tname = tname;
    return v;
}
static inline bool is_seq(tp_val v) {
    return v.t == V_LIST && v.u.l->kind == LK_SEQ;
}
static inline bool is_num(tp_val v) {
    return v.t == V_INT || v.t == V_FLOAT || v.t == V_BOOL;
}
static inline double num_f(tp_val v) {
    return v.t == V_FLOAT ? v.u.f : v.t == V_INT ? (double)v.u.i : (double)v.u.b;
}
static inline int64_t num_i(tp_val v) {
    return v.t == V_INT ? v.u.i : (int64_t)v.u.b;
}

/* Charges `n` steps (bulk work such as building a range counts too). */
static inline void step_n(tp_ctx *c, uint64_t n, size_t off) {
    if (n > c->lim.max_steps || c->steps > c->lim.max_steps - n)
        rl__tp_fail(c, RL_ERR_LIMIT, off, "template ran more than %llu steps",
                    (unsigned long long)c->lim.max_steps);
    c->steps += n;
}
/* Charges work proportional to `bytes` scanned (one step per 256 bytes),
 * so repeated scans of a long string stay within the step limit. */
static inline void rl__tp_charge(tp_ctx *c, size_t bytes, size_t off) {
    if (bytes >= 256) step_n(c, bytes >> 8, off);
}
static inline void step(tp_ctx *c, size_t off) {
    if (++c->steps > c->lim.max_steps)
        rl__tp_fail(c, RL_ERR_LIMIT, off, "template ran more than %llu steps",
                    (unsigned long long)c->lim.max_steps);
}

/* Argument i (positional) or `name` (keyword); NULL if absent. */
static inline tp_val *arg(targs *a, size_t i, const char *name) {
    if (i < a->n_pos) return &a->pos[i];
    for (size_t k = 0; k < a->n_kw; k++)
        if (name && strcmp(a->kw[k], name) == 0) return &a->kwv[k];
    return NULL;
}

#endif
