/* Internals of the chat-template interpreter (template*.c only).
 *
 * One tp_ctx lives for one render.  Everything it allocates (tokens, AST,
 * values) comes from its arena, which is capped at limits.max_memory and
 * freed in one go at the end; the output buffer is separate and capped at
 * limits.max_output.  Errors longjmp to the render entry point (tp_fail), so
 * no code path below needs to unwind: the arena owns everything.
 *
 * Values are small structs passed by value.  Strings are (ptr, len) slices
 * into the source, the caller's inputs or the arena; they are never
 * modified after creation, so sharing is safe.  Lists and dicts are
 * immutable once built, except namespaces (V_NS), which `set ns.x = v`
 * mutates in place.
 */
#ifndef RL_CHAT_IMPL_H
#define RL_CHAT_IMPL_H

#include <setjmp.h>

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
    V_NS,   /* namespace(): a dict that `set ns.a = ...` may mutate */
    V_LOOP, /* the `loop` object of a for statement */
    V_FUNC, /* a global function (raise_exception, namespace, ...) */
} tp_vtype;

typedef struct tp_list tp_list;
typedef struct tp_dict tp_dict;
typedef struct tp_loop tp_loop;

typedef struct tp_val {
    tp_vtype t;
    union {
        bool b;
        int64_t i;
        double f;
        struct {
            const char *p;
            size_t n;
        } s;           /* V_STR; for V_UNDEF the name, if known (may be NULL) */
        tp_list *l;
        tp_dict *d;    /* V_DICT and V_NS */
        tp_loop *loop;
        int fn;
    } u;
} tp_val;

struct tp_list {
    size_t n;
    bool tuple;
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
    size_t off; /* offset in the normalized source, for line:col */
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
    N_SETBLOCK, /* names[0], body */
    N_BLOCK,    /* body (generation blocks) */
    N_BREAK,
    N_CONTINUE,
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

typedef struct tp_node tp_node;
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

typedef struct tp_frame {
    const char **k;
    tp_val *v;
    size_t n, cap;
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
    char *out;
    size_t out_len, out_cap;
    tp_frame *frames;
    size_t n_frames, cap_frames;
} tp_ctx;

/* Formats "chat template L:C: msg" into c->err and longjmps out. */
_Noreturn void tp_fail(tp_ctx *c, rl_status st, size_t off, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void *tp_alloc(tp_ctx *c, size_t n, size_t off); /* zeroed; fails (longjmp) past the cap */
void *tp_alloc_array(tp_ctx *c, size_t count, size_t size, size_t off);
char *tp_strdup(tp_ctx *c, const char *s, size_t n, size_t off);

/* template_parse.c: lexes and parses c->src into a statement list. */
tp_node **tp_parse(tp_ctx *c, size_t *n_out);

/* template_value.c: conversions shared by the evaluator. */
void tp_buf_put(tp_ctx *c, char **buf, size_t *len, size_t *cap, const char *p, size_t n, size_t off);
tp_val tp_str(const char *p, size_t n);
tp_val tp_to_str(tp_ctx *c, tp_val v, size_t off); /* Python str(); undefined -> "" */
void tp_repr(tp_ctx *c, tp_val v, char **buf, size_t *len, size_t *cap, int depth, size_t off);
void tp_json(tp_ctx *c, tp_val v, char **buf, size_t *len, size_t *cap, int indent, int level,
             size_t off);
void tp_fmt_float(double f, char *buf, size_t cap); /* Python repr(float) */
const char *tp_type_name(tp_val v);
bool tp_truthy(tp_val v);
bool tp_equal(tp_ctx *c, tp_val a, tp_val b, int depth, size_t off);
size_t tp_utf8_len(const char *p, size_t n);
/* Byte offset of code point `cp` (clamped to n). */
size_t tp_utf8_offset(const char *p, size_t n, size_t cp);
bool tp_is_space_at(const char *p, size_t n, size_t i, size_t *w);   /* Python isspace */
bool tp_is_space_before(const char *p, size_t i, size_t *w);         /* char ending at i */
tp_dict *tp_dict_new(tp_ctx *c, size_t cap, size_t off);
void tp_dict_set(tp_ctx *c, tp_dict *d, tp_val k, tp_val v, size_t off);
tp_val *tp_dict_get(tp_ctx *c, tp_dict *d, tp_val k, size_t off);
tp_val *tp_dict_get_str(tp_dict *d, const char *k, size_t n);

#endif
