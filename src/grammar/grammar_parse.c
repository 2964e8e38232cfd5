/* Grammar text -> compiled rl_grammar (layout in grammar-impl.h).
 *
 * Syntax (docs/STRUCTURED.md):  rules `name ::= alt | alt ...`, a body runs
 * until the next `name ::=` or the end; `#` comments; terms are "string"
 * literals, [classes] (ranges, ^ negation, code points as UTF-8), `.` (any
 * code point), rule names, ( groups ); postfix * + ? {m} {m,} {m,n}.
 * Escapes in strings and classes: \n \r \t \\ \" \' \[ \] \- \^ \/ \xHH
 * \uHHHH \UHHHHHHHH (code points, emitted as UTF-8).
 *
 * Steps: parse into a builder (rules of alternatives of elements; classes
 * and repetitions become helper rules), then analyse (Knuth's shortest-
 * derivation algorithm gives each rule's minimum length, hence which rules
 * are productive and nullable; unproductive alternatives are dropped; a
 * DFS over "reachable through a nullable prefix" edges finds left
 * recursion), then flatten.
 *
 * Hostile input: every loop is bounded by the text length or the limits in
 * grammar.h; recursion depth is bounded by RL_GRAMMAR_MAX_NEST; every
 * failure is an rl_err naming the line or rule. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/hash.h"
#include "base/heap.h"
#include "grammar/grammar-impl.h"

typedef struct bseq {
    uint32_t *e;
    int32_t n, cap;
} bseq;

typedef struct brule {
    char *name;
    bseq *alts;
    int32_t n_alts, cap_alts;
    int line_def, line_ref; /* 0 = not yet */
} brule;

typedef struct builder {
    brule *rules;
    int32_t n_rules, cap_rules;
    int32_t *name_ht; /* open addressing over rule ids, -1 empty */
    int32_t ht_cap;
    rl_bset *sets;
    int32_t n_sets, cap_sets;
    int32_t *set_ht;
    int32_t set_ht_cap;
    int64_t n_elems;
    rl_err *err;
    bool failed;
} builder;

static uint32_t hash_bytes(const void *p, size_t n) {
    return (uint32_t)rl_hash_bytes(p, n);
}

static bool b_fail(builder *b, rl_status code, const char *fmt, const char *a, int line) {
    if (!b->failed) {
        char buf[300];
        snprintf(buf, sizeof buf, fmt, a ? a : "");
        if (line > 0)
            rl_err_set(b->err, code, "grammar line %d: %s", line, buf);
        else
            rl_err_set(b->err, code, "grammar: %s", buf);
    }
    b->failed = true;
    return false;
}

static bool b_nomem(builder *b) {
    if (!b->failed) rl_err_set(b->err, RL_ERR_NOMEM, "grammar: out of memory");
    b->failed = true;
    return false;
}

static bool seq_push(builder *b, bseq *s, uint32_t e) {
    if (++b->n_elems > RL_GRAMMAR_MAX_ELEMS)
        return b_fail(b, RL_ERR_LIMIT, "more than %s elements after expansion", "1048576", 0);
    if (rl_grow_i32((void **)&s->e, &s->cap, s->n + 1, sizeof *s->e)) return b_nomem(b);
    s->e[s->n++] = e;
    return true;
}

static bool ht_grow(builder *b) {
    int32_t nc = b->ht_cap ? b->ht_cap * 2 : 64;
    int32_t *ht = rl_malloc(sizeof *ht * (size_t)nc);
    if (!ht) return b_nomem(b);
    for (int32_t i = 0; i < nc; i++) ht[i] = -1;
    for (int32_t r = 0; r < b->n_rules; r++) {
        uint32_t h = hash_bytes(b->rules[r].name, strlen(b->rules[r].name)) & (uint32_t)(nc - 1);
        while (ht[h] >= 0) h = (h + 1) & (uint32_t)(nc - 1);
        ht[h] = r;
    }
    rl_free(b->name_ht);
    b->name_ht = ht;
    b->ht_cap = nc;
    return true;
}

/* Rule id for name[0..n), created (undefined) if new; -1 on failure. */
static int32_t rule_get(builder *b, const char *name, size_t n) {
    if (b->ht_cap) {
        uint32_t h = hash_bytes(name, n) & (uint32_t)(b->ht_cap - 1);
        for (; b->name_ht[h] >= 0; h = (h + 1) & (uint32_t)(b->ht_cap - 1)) {
            const char *rn = b->rules[b->name_ht[h]].name;
            if (strlen(rn) == n && memcmp(rn, name, n) == 0) return b->name_ht[h];
        }
    }
    if (b->n_rules >= RL_GRAMMAR_MAX_RULES) {
        b_fail(b, RL_ERR_LIMIT, "more than %s rules (including generated helpers)", "65536", 0);
        return -1;
    }
    if (rl_grow_i32((void **)&b->rules, &b->cap_rules, b->n_rules + 1, sizeof *b->rules))
        return b_nomem(b), -1;
    brule *r = &b->rules[b->n_rules];
    memset(r, 0, sizeof *r);
    r->name = rl_strndup(name, n);
    if (!r->name) return b_nomem(b), -1;
    b->n_rules++;
    if ((b->n_rules) * 2 > b->ht_cap) {
        if (!ht_grow(b)) return -1;
    } else {
        uint32_t h = hash_bytes(name, n) & (uint32_t)(b->ht_cap - 1);
        while (b->name_ht[h] >= 0) h = (h + 1) & (uint32_t)(b->ht_cap - 1);
        b->name_ht[h] = b->n_rules - 1;
    }
    return b->n_rules - 1;
}

/* A fresh helper rule named "<parent>~<n>" (the ~ cannot be written in
 * grammar text, so helpers never collide with user rules). */
static int32_t rule_aux(builder *b, int32_t parent) {
    char name[160];
    snprintf(name, sizeof name, "%.100s~%d", parent >= 0 ? b->rules[parent].name : "aux",
             (int)b->n_rules);
    int32_t r = rule_get(b, name, strlen(name));
    if (r >= 0) b->rules[r].line_def = -1;
    return r;
}

/* Appends an empty alternative to rule r; NULL on failure. */
static bseq *alt_new(builder *b, int32_t r) {
    brule *ru = &b->rules[r];
    if (rl_grow_i32((void **)&ru->alts, &ru->cap_alts, ru->n_alts + 1, sizeof *ru->alts))
        return b_nomem(b), NULL;
    bseq *s = &ru->alts[ru->n_alts++];
    memset(s, 0, sizeof *s);
    return s;
}

static int32_t set_intern(builder *b, const rl_bset *s) {
    if (b->n_sets * 2 >= b->set_ht_cap) {
        int32_t nc = b->set_ht_cap ? b->set_ht_cap * 2 : 64;
        int32_t *ht = rl_malloc(sizeof *ht * (size_t)nc);
        if (!ht) return b_nomem(b), -1;
        for (int32_t i = 0; i < nc; i++) ht[i] = -1;
        for (int32_t i = 0; i < b->n_sets; i++) {
            uint32_t h = hash_bytes(&b->sets[i], sizeof(rl_bset)) & (uint32_t)(nc - 1);
            while (ht[h] >= 0) h = (h + 1) & (uint32_t)(nc - 1);
            ht[h] = i;
        }
        rl_free(b->set_ht);
        b->set_ht = ht;
        b->set_ht_cap = nc;
    }
    uint32_t h = hash_bytes(s, sizeof *s) & (uint32_t)(b->set_ht_cap - 1);
    for (; b->set_ht[h] >= 0; h = (h + 1) & (uint32_t)(b->set_ht_cap - 1))
        if (!memcmp(&b->sets[b->set_ht[h]], s, sizeof *s)) return b->set_ht[h];
    if (rl_grow_i32((void **)&b->sets, &b->cap_sets, b->n_sets + 1, sizeof *b->sets))
        return b_nomem(b), -1;
    b->sets[b->n_sets] = *s;
    b->set_ht[h] = b->n_sets;
    return b->n_sets++;
}

static int32_t set_range(builder *b, unsigned lo, unsigned hi) {
    rl_bset s = {{0, 0, 0, 0}};
    for (unsigned c = lo; c <= hi; c++) s.w[c >> 6] |= 1ull << (c & 63);
    return set_intern(b, &s);
}

static void builder_free(builder *b) {
    for (int32_t r = 0; r < b->n_rules; r++) {
        for (int32_t a = 0; a < b->rules[r].n_alts; a++) rl_free(b->rules[r].alts[a].e);
        rl_free(b->rules[r].alts);
        rl_free(b->rules[r].name);
    }
    rl_free(b->rules);
    rl_free(b->name_ht);
    rl_free(b->sets);
    rl_free(b->set_ht);
}

/* ------------------------------------------------------------------ */
/* UTF-8 ranges: a code point range [lo, hi] becomes byte-range runs. */

/* Emits alternatives into rule r: one per run of byte ranges.  A range
 * whose ends differ in more than the last byte is split until each
 * position is an independent byte interval. */
static bool utf8_emit(builder *b, int32_t r, uint32_t lo, uint32_t hi, int depth) {
    if (b->failed || depth > 16) return false;
    int nl = (int)rl_utf8_cp_len(lo), nh = (int)rl_utf8_cp_len(hi);
    if (nl != nh) {
        uint32_t top = nl == 1 ? 0x7F : nl == 2 ? 0x7FF : 0xFFFF;
        return utf8_emit(b, r, lo, top, depth + 1) && utf8_emit(b, r, top + 1, hi, depth + 1);
    }
    for (int i = 1; i < nl; i++) {
        uint32_t m = (1u << (6 * i)) - 1;
        if ((lo & ~m) != (hi & ~m)) {
            if ((lo & m) != 0)
                return utf8_emit(b, r, lo, lo | m, depth + 1) &&
                       utf8_emit(b, r, (lo | m) + 1, hi, depth + 1);
            if ((hi & m) != m)
                return utf8_emit(b, r, lo, (hi & ~m) - 1, depth + 1) &&
                       utf8_emit(b, r, hi & ~m, hi, depth + 1);
        }
    }
    char bl[4], bh[4];
    rl_utf8_encode(lo, bl);
    rl_utf8_encode(hi, bh);
    bseq *s = alt_new(b, r);
    if (!s) return false;
    for (int i = 0; i < nl; i++) {
        int32_t si = set_range(b, (uint8_t)bl[i], (uint8_t)bh[i]);
        if (si < 0 || !seq_push(b, s, GE_MAKE(GE_SET, si))) return false;
    }
    return true;
}

typedef rl__cprange crange;

static int crange_cmp(const void *a, const void *b) {
    const crange *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

int rl__cp_ranges_normalize(rl__cprange *r, int n, bool neg, rl__cprange *out) {
    qsort(r, (size_t)n, sizeof *r, crange_cmp);
    int m = 0;
    for (int i = 0; i < n; i++) {
        if (m && r[i].lo <= r[m - 1].hi + 1) {
            if (r[i].hi > r[m - 1].hi) r[m - 1].hi = r[i].hi;
        } else
            r[m++] = r[i];
    }
    if (!neg) {
        memcpy(out, r, sizeof *r * (size_t)m);
        return m;
    }
    int k = 0;
    uint32_t next = 0;
    for (int i = 0; i < m; i++) {
        if (r[i].lo > next) out[k++] = (crange){next, r[i].lo - 1};
        next = r[i].hi + 1;
    }
    if (next <= 0x10FFFF) out[k++] = (crange){next, 0x10FFFF};
    return k;
}

/* Normalizes r[0..n) (rl__cp_ranges_normalize), then appends one element
 * matching the class to out.  Returns false (error set) when the class is
 * empty. */
static bool class_emit(builder *b, int32_t parent, crange *r, int n, bool neg, bseq *out,
                       int line) {
    crange tmp[2 * 4096 + 4];
    int nt = rl__cp_ranges_normalize(r, n, neg, tmp);
    /* remove surrogates: they have no UTF-8 encoding */
    crange fin[2 * 4096 + 8];
    int nf = 0;
    for (int i = 0; i < nt; i++) {
        uint32_t lo = tmp[i].lo, hi = tmp[i].hi > 0x10FFFF ? 0x10FFFF : tmp[i].hi;
        if (lo > hi) continue;
        if (hi < 0xD800 || lo > 0xDFFF)
            fin[nf++] = (crange){lo, hi};
        else {
            if (lo < 0xD800) fin[nf++] = (crange){lo, 0xD7FF};
            if (hi > 0xDFFF) fin[nf++] = (crange){0xE000, hi};
        }
    }
    if (nf == 0) return b_fail(b, RL_ERR_FORMAT, "character class matches nothing%s", "", line);
    /* ASCII part as one set */
    rl_bset ascii = {{0, 0, 0, 0}};
    bool has_ascii = false, has_multi = false;
    for (int i = 0; i < nf; i++) {
        for (uint32_t c = fin[i].lo; c <= fin[i].hi && c < 0x80; c++) {
            ascii.w[c >> 6] |= 1ull << (c & 63);
            has_ascii = true;
        }
        if (fin[i].hi >= 0x80) has_multi = true;
    }
    if (!has_multi) {
        int32_t si = set_intern(b, &ascii);
        return si >= 0 && seq_push(b, out, GE_MAKE(GE_SET, si));
    }
    int32_t ar = rule_aux(b, parent);
    if (ar < 0) return false;
    if (has_ascii) {
        int32_t si = set_intern(b, &ascii);
        bseq *s = si >= 0 ? alt_new(b, ar) : NULL;
        if (!s || !seq_push(b, s, GE_MAKE(GE_SET, si))) return false;
    }
    for (int i = 0; i < nf; i++) {
        uint32_t lo = fin[i].lo < 0x80 ? 0x80 : fin[i].lo;
        if (fin[i].hi >= 0x80 && !utf8_emit(b, ar, lo, fin[i].hi, 0)) return false;
    }
    return seq_push(b, out, GE_MAKE(GE_REF, ar));
}

/* ------------------------------------------------------------------ */
/* Parser */

typedef struct parser {
    const char *s;
    size_t n, i;
    int line;
    builder *b;
    int nest;
    int32_t cur_rule;
} parser;

static void skip_space(parser *p) {
    while (p->i < p->n) {
        char c = p->s[p->i];
        if (c == '\n') {
            p->line++;
            p->i++;
        } else if (c == ' ' || c == '\t' || c == '\r')
            p->i++;
        else if (c == '#') {
            while (p->i < p->n && p->s[p->i] != '\n') p->i++;
        } else
            break;
    }
}

static bool is_name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-';
}

/* Is there `name ::=` at the current position (after spaces)? */
static bool at_rule_def(parser *p) {
    size_t j = p->i;
    while (j < p->n && is_name_char(p->s[j])) j++;
    if (j == p->i) return false;
    while (j < p->n && (p->s[j] == ' ' || p->s[j] == '\t')) j++;
    return j + 3 <= p->n && !memcmp(p->s + j, "::=", 3);
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Reads one code point (escape or raw UTF-8) at p->i; -1 on error. */
static int64_t read_char(parser *p) {
    if (p->i >= p->n) return -1;
    uint8_t c = (uint8_t)p->s[p->i];
    if (c == '\\') {
        if (p->i + 1 >= p->n)
            return b_fail(p->b, RL_ERR_FORMAT, "dangling backslash%s", "", p->line), -1;
        char e = p->s[p->i + 1];
        p->i += 2;
        int nd = 0;
        switch (e) {
        case 'n':
            return '\n';
        case 'r':
            return '\r';
        case 't':
            return '\t';
        case '0':
            return 0;
        case '\\':
        case '"':
        case '\'':
        case '[':
        case ']':
        case '-':
        case '^':
        case '/':
        case '.':
        case '(':
        case ')':
        case '{':
        case '}':
        case '|':
        case '*':
        case '+':
        case '?':
            return (unsigned char)e;
        case 'x':
            nd = 2;
            break;
        case 'u':
            nd = 4;
            break;
        case 'U':
            nd = 8;
            break;
        default: {
            char m[4] = {e, 0};
            return b_fail(p->b, RL_ERR_FORMAT, "unknown escape '\\%s'", m, p->line), -1;
        }
        }
        uint32_t v = 0;
        for (int k = 0; k < nd; k++) {
            int h = p->i < p->n ? hexval(p->s[p->i]) : -1;
            if (h < 0) return b_fail(p->b, RL_ERR_FORMAT, "bad hex escape%s", "", p->line), -1;
            v = v * 16 + (uint32_t)h;
            p->i++;
        }
        if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
            return b_fail(p->b, RL_ERR_FORMAT, "escape is not a Unicode scalar value%s", "",
                          p->line),
                   -1;
        return v;
    }
    uint32_t v;
    size_t l = rl_utf8_decode(p->s + p->i, p->n - p->i, &v);
    if (l == 0)
        return b_fail(p->b, RL_ERR_FORMAT, "invalid UTF-8 in grammar text%s", "", p->line), -1;
    p->i += l;
    return v;
}

static bool parse_alts(parser *p, int32_t rule, char close);

static bool parse_string(parser *p, bseq *out) {
    p->i++; /* opening quote */
    while (1) {
        if (p->i >= p->n || p->s[p->i] == '\n')
            return b_fail(p->b, RL_ERR_FORMAT, "unterminated string literal%s", "", p->line);
        if (p->s[p->i] == '"') {
            p->i++;
            return true;
        }
        int64_t c = read_char(p);
        if (c < 0) return false;
        char u[4];
        size_t l = rl_utf8_encode((uint32_t)c, u);
        for (size_t k = 0; k < l; k++) {
            int32_t si = set_range(p->b, (uint8_t)u[k], (uint8_t)u[k]);
            if (si < 0 || !seq_push(p->b, out, GE_MAKE(GE_SET, si))) return false;
        }
    }
}

static bool parse_class(parser *p, bseq *out) {
    int line = p->line;
    p->i++; /* [ */
    bool neg = false;
    if (p->i < p->n && p->s[p->i] == '^') {
        neg = true;
        p->i++;
    }
    crange r[4096];
    int n = 0;
    while (1) {
        if (p->i >= p->n || p->s[p->i] == '\n')
            return b_fail(p->b, RL_ERR_FORMAT, "unterminated character class%s", "", line);
        if (p->s[p->i] == ']') {
            p->i++;
            break;
        }
        int64_t lo = read_char(p);
        if (lo < 0) return false;
        int64_t hi = lo;
        if (p->i + 1 < p->n && p->s[p->i] == '-' && p->s[p->i + 1] != ']') {
            p->i++;
            hi = read_char(p);
            if (hi < 0) return false;
            if (hi < lo)
                return b_fail(p->b, RL_ERR_FORMAT, "reversed range in character class%s", "", line);
        }
        if (n >= 4096)
            return b_fail(p->b, RL_ERR_LIMIT, "more than %s items in a character class", "4096",
                          line);
        r[n++] = (crange){(uint32_t)lo, (uint32_t)hi};
    }
    if (n == 0 && !neg) return b_fail(p->b, RL_ERR_FORMAT, "empty character class%s", "", line);
    return class_emit(p->b, p->cur_rule, r, n, neg, out, line);
}

static bool parse_count(parser *p, long *v) {
    size_t st = p->i;
    long x = 0;
    while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') {
        x = x * 10 + (p->s[p->i] - '0');
        if (x > RL_GRAMMAR_MAX_REPEAT)
            return b_fail(p->b, RL_ERR_LIMIT, "repetition count above %s", "4096", p->line);
        p->i++;
    }
    if (p->i == st) return b_fail(p->b, RL_ERR_FORMAT, "expected a number in {m,n}%s", "", p->line);
    *v = x;
    return true;
}

/* Applies x{m,n} (n = -1: unbounded) to a single element x, appending to out. */
static bool repeat_emit(parser *p, uint32_t x, long m, long n, bseq *out) {
    builder *b = p->b;
    for (long k = 0; k < m; k++)
        if (!seq_push(b, out, x)) return false;
    if (n < 0) { /* star: R ::= x R | "" */
        int32_t r = rule_aux(b, p->cur_rule);
        bseq *a1 = r >= 0 ? alt_new(b, r) : NULL;
        if (!a1 || !seq_push(b, a1, x) || !seq_push(b, a1, GE_MAKE(GE_REF, r))) return false;
        if (!alt_new(b, r)) return false;
        return seq_push(b, out, GE_MAKE(GE_REF, r));
    }
    /* Q1 ::= x | "" ; Qk ::= x Q(k-1) | "" */
    int32_t prev = -1;
    for (long k = 0; k < n - m; k++) {
        int32_t r = rule_aux(b, p->cur_rule);
        bseq *a1 = r >= 0 ? alt_new(b, r) : NULL;
        if (!a1 || !seq_push(b, a1, x)) return false;
        if (prev >= 0 && !seq_push(b, a1, GE_MAKE(GE_REF, prev))) return false;
        if (!alt_new(b, r)) return false;
        prev = r;
    }
    return prev < 0 || seq_push(b, out, GE_MAKE(GE_REF, prev));
}

/* One term with its postfix operators, appended to out. */
static bool parse_term(parser *p, bseq *out) {
    builder *b = p->b;
    bseq t = {0};
    bool ok = true;
    char c = p->s[p->i];
    if (c == '"')
        ok = parse_string(p, &t);
    else if (c == '[')
        ok = parse_class(p, &t);
    else if (c == '.') {
        p->i++;
        crange r = {0, 0x10FFFF};
        ok = class_emit(b, p->cur_rule, &r, 1, false, &t, p->line);
    } else if (c == '(') {
        if (++p->nest > RL_GRAMMAR_MAX_NEST) {
            b_fail(b, RL_ERR_LIMIT, "parentheses nested deeper than %s", "128", p->line);
            return false;
        }
        p->i++;
        int32_t r = rule_aux(b, p->cur_rule);
        ok = r >= 0 && parse_alts(p, r, ')');
        if (ok) {
            if (p->i >= p->n || p->s[p->i] != ')')
                ok = b_fail(b, RL_ERR_FORMAT, "missing ')'%s", "", p->line);
            else
                p->i++;
        }
        p->nest--;
        /* a group of one alternative of one element is that element */
        if (ok && b->rules[r].n_alts == 1 && b->rules[r].alts[0].n == 1)
            ok = seq_push(b, &t, b->rules[r].alts[0].e[0]);
        else if (ok)
            ok = seq_push(b, &t, GE_MAKE(GE_REF, r));
    } else if (is_name_char(c)) {
        size_t st = p->i;
        while (p->i < p->n && is_name_char(p->s[p->i])) p->i++;
        int32_t r = rule_get(b, p->s + st, p->i - st);
        if (r < 0) return false;
        if (!b->rules[r].line_ref) b->rules[r].line_ref = p->line;
        ok = seq_push(b, &t, GE_MAKE(GE_REF, r));
    } else {
        char m[2] = {c, 0};
        b_fail(b, RL_ERR_FORMAT, "unexpected character '%s'", (unsigned char)c >= 32 ? m : "?",
               p->line);
        return false;
    }
    if (!ok) {
        rl_free(t.e);
        return false;
    }
    /* postfix operators (spaces allowed before them on the same line) */
    while (ok) {
        size_t j = p->i;
        while (j < p->n && (p->s[j] == ' ' || p->s[j] == '\t')) j++;
        if (j >= p->n) break;
        char o = p->s[j];
        long m, n;
        if (o == '*')
            m = 0, n = -1;
        else if (o == '+')
            m = 1, n = -1;
        else if (o == '?')
            m = 0, n = 1;
        else if (o == '{') {
            p->i = j + 1;
            if (!parse_count(p, &m)) ok = false;
            n = m;
            if (ok && p->i < p->n && p->s[p->i] == ',') {
                p->i++;
                if (p->i < p->n && p->s[p->i] == '}')
                    n = -1;
                else if (!parse_count(p, &n))
                    ok = false;
            }
            if (ok && (p->i >= p->n || p->s[p->i] != '}'))
                ok = b_fail(b, RL_ERR_FORMAT, "expected '}' in {m,n}%s", "", p->line);
            if (ok && n >= 0 && n < m)
                ok = b_fail(b, RL_ERR_FORMAT, "{m,n} with n < m%s", "", p->line);
            j = p->i;
        } else
            break;
        if (!ok) break;
        p->i = j + 1;
        if (t.n == 0) continue; /* repeating the empty string */
        uint32_t x;
        if (t.n == 1)
            x = t.e[0];
        else {
            int32_t r = rule_aux(b, p->cur_rule);
            bseq *a = r >= 0 ? alt_new(b, r) : NULL;
            if (!a) {
                ok = false;
                break;
            }
            *a = t; /* the helper takes ownership */
            t = (bseq){0};
            x = GE_MAKE(GE_REF, r);
        }
        bseq nt = {0};
        ok = repeat_emit(p, x, m, n, &nt);
        rl_free(t.e);
        t = nt;
    }
    for (int32_t k = 0; ok && k < t.n; k++) ok = seq_push(b, out, t.e[k]);
    b->n_elems -= ok ? t.n : 0; /* counted twice */
    rl_free(t.e);
    return ok;
}

static bool parse_seq(parser *p, bseq *out, char close) {
    while (1) {
        skip_space(p);
        if (p->i >= p->n) return true;
        char c = p->s[p->i];
        if (c == '|' || (close && c == close)) return true;
        if (!close && at_rule_def(p)) return true;
        if (c == ')') return b_fail(p->b, RL_ERR_FORMAT, "unbalanced ')'%s", "", p->line);
        if (!parse_term(p, out)) return false;
    }
}

static bool parse_alts(parser *p, int32_t rule, char close) {
    while (1) {
        bseq *s = alt_new(p->b, rule);
        if (!s) return false;
        bseq tmp = {0};
        bool ok = parse_seq(p, &tmp, close);
        /* alt_new may have moved the array: look the alternative up again */
        brule *ru = &p->b->rules[rule];
        ru->alts[ru->n_alts - 1] = tmp;
        if (!ok) return false;
        if (p->i < p->n && p->s[p->i] == '|') {
            p->i++;
            continue;
        }
        return true;
    }
}

static bool parse_all(parser *p) {
    builder *b = p->b;
    while (1) {
        skip_space(p);
        if (p->i >= p->n) return true;
        size_t st = p->i;
        while (p->i < p->n && is_name_char(p->s[p->i])) p->i++;
        if (p->i == st || !at_rule_def(&(parser){.s = p->s, .n = p->n, .i = st}))
            return b_fail(b, RL_ERR_FORMAT, "expected a rule definition 'name ::= ...'%s", "",
                          p->line);
        int32_t r = rule_get(b, p->s + st, p->i - st);
        if (r < 0) return false;
        if (b->rules[r].line_def)
            return b_fail(b, RL_ERR_FORMAT, "rule '%s' defined twice", b->rules[r].name, p->line);
        b->rules[r].line_def = p->line;
        while (p->s[p->i] != ':') p->i++;
        p->i += 3;
        p->cur_rule = r;
        if (!parse_alts(p, r, 0)) return false;
    }
}

/* ------------------------------------------------------------------ */
/* Analysis */

typedef struct heap_item {
    int32_t val, rule;
} heap_item;

static bool item_less(const void *a, const void *b) {
    return ((const heap_item *)a)->val < ((const heap_item *)b)->val;
}

static int32_t sat_add(int32_t a, int32_t b) {
    int64_t s = (int64_t)a + b;
    return s > RL_GRAMMAR_INF_LEN ? RL_GRAMMAR_INF_LEN : (int32_t)s;
}

/* minlen[r] for every rule (RL_GRAMMAR_INF_LEN = unproductive), by Knuth's
 * generalisation of Dijkstra: an alternative's length is known once all
 * rules it references are final; rules are finalised in increasing order. */
static bool compute_minlen(builder *b, int32_t *minlen) {
    int32_t nr = b->n_rules, na = 0;
    for (int32_t r = 0; r < nr; r++) na += b->rules[r].n_alts;
    int32_t *alt_rule = rl_malloc(sizeof(int32_t) * (size_t)(na + 1));
    int32_t *pending = rl_malloc(sizeof(int32_t) * (size_t)(na + 1));
    int32_t *sum = rl_malloc(sizeof(int32_t) * (size_t)(na + 1));
    int32_t *occ_off = rl_calloc((size_t)nr + 1, sizeof(int32_t));
    int32_t *occ = rl_malloc(sizeof(int32_t) * (size_t)(b->n_elems + 1));
    rl_heap heap; /* pushed once per alternative at most: reserved */
    rl_heap_init(&heap, sizeof(heap_item), item_less);
    bool *final = rl_calloc((size_t)nr + 1, 1);
    bool ok = alt_rule && pending && sum && occ_off && occ && final &&
              rl_heap_reserve(&heap, (size_t)na + 1) == RL_OK;
    if (ok) {
        int32_t a = 0;
        for (int32_t r = 0; r < nr; r++) {
            minlen[r] = RL_GRAMMAR_INF_LEN;
            for (int32_t k = 0; k < b->rules[r].n_alts; k++, a++) {
                bseq *s = &b->rules[r].alts[k];
                alt_rule[a] = r;
                pending[a] = 0;
                sum[a] = 0;
                for (int32_t i = 0; i < s->n; i++) {
                    if (GE_KIND(s->e[i]) == GE_REF) {
                        pending[a]++;
                        occ_off[GE_ARG(s->e[i]) + 1]++;
                    } else
                        sum[a] = sat_add(sum[a], 1);
                }
                if (!pending[a]) rl_heap_push(&heap, &(heap_item){sum[a], r});
            }
        }
        for (int32_t r = 0; r < nr; r++) occ_off[r + 1] += occ_off[r];
        int32_t *fill = rl_calloc((size_t)nr + 1, sizeof(int32_t));
        if (!fill) ok = false;
        a = 0;
        for (int32_t r = 0; ok && r < nr; r++)
            for (int32_t k = 0; k < b->rules[r].n_alts; k++, a++) {
                bseq *s = &b->rules[r].alts[k];
                for (int32_t i = 0; i < s->n; i++)
                    if (GE_KIND(s->e[i]) == GE_REF) {
                        int32_t t = GE_ARG(s->e[i]);
                        occ[occ_off[t] + fill[t]++] = a;
                    }
            }
        rl_free(fill);
        heap_item it;
        while (ok && rl_heap_pop(&heap, &it)) {
            if (final[it.rule]) continue;
            final[it.rule] = true;
            minlen[it.rule] = it.val;
            for (int32_t k = occ_off[it.rule]; k < occ_off[it.rule + 1]; k++) {
                int32_t al = occ[k];
                sum[al] = sat_add(sum[al], it.val);
                if (--pending[al] == 0 && !final[alt_rule[al]])
                    rl_heap_push(&heap, &(heap_item){sum[al], alt_rule[al]});
            }
        }
    }
    if (!ok) b_nomem(b);
    rl_free(alt_rule);
    rl_free(pending);
    rl_free(sum);
    rl_free(occ_off);
    rl_free(occ);
    rl_heap_free(&heap);
    rl_free(final);
    return ok;
}

/* Drops alternatives that reference unproductive rules. */
static void prune_unproductive(builder *b, const int32_t *minlen) {
    for (int32_t r = 0; r < b->n_rules; r++) {
        brule *ru = &b->rules[r];
        int32_t w = 0;
        for (int32_t k = 0; k < ru->n_alts; k++) {
            bool good = true;
            for (int32_t i = 0; i < ru->alts[k].n && good; i++)
                if (GE_KIND(ru->alts[k].e[i]) == GE_REF &&
                    minlen[GE_ARG(ru->alts[k].e[i])] >= RL_GRAMMAR_INF_LEN)
                    good = false;
            if (good)
                ru->alts[w++] = ru->alts[k];
            else
                rl_free(ru->alts[k].e);
        }
        ru->n_alts = w;
    }
}

/* Iterative DFS over edges A -> B where B is referenced by A after a
 * nullable prefix.  A back edge is left recursion. */
static bool check_left_recursion(builder *b, const int32_t *minlen) {
    int32_t nr = b->n_rules;
    uint8_t *color = rl_calloc((size_t)nr, 1);
    /* frame: rule, alt index, element index */
    int32_t *st = rl_malloc(sizeof(int32_t) * 3 * (size_t)(nr + 1));
    if (!color || !st) {
        rl_free(color);
        rl_free(st);
        return b_nomem(b);
    }
    bool ok = true;
    for (int32_t s0 = 0; s0 < nr && ok; s0++) {
        if (color[s0]) continue;
        int32_t sp = 0;
        st[0] = s0, st[1] = 0, st[2] = 0;
        color[s0] = 1;
        sp = 1;
        while (sp > 0 && ok) {
            int32_t *f = &st[3 * (sp - 1)];
            brule *ru = &b->rules[f[0]];
            if (f[1] >= ru->n_alts) {
                color[f[0]] = 2;
                sp--;
                continue;
            }
            bseq *s = &ru->alts[f[1]];
            if (f[2] >= s->n) {
                f[1]++, f[2] = 0;
                continue;
            }
            uint32_t e = s->e[f[2]];
            if (GE_KIND(e) != GE_REF) {
                f[1]++, f[2] = 0;
                continue;
            }
            int32_t t = GE_ARG(e);
            if (minlen[t] == 0)
                f[2]++; /* nullable: the next element is also a prefix target */
            else
                f[1]++, f[2] = 0;
            if (color[t] == 1) {
                b_fail(b, RL_ERR_FORMAT, "left recursion through rule '%s'", b->rules[t].name, 0);
                ok = false;
            } else if (color[t] == 0) {
                color[t] = 1;
                int32_t *g = &st[3 * sp++];
                g[0] = t, g[1] = 0, g[2] = 0;
            }
        }
    }
    rl_free(color);
    rl_free(st);
    return ok;
}

static const char *display_name(const char *n) {
    return n;
}

rl_grammar *rl_grammar_compile(const char *text, size_t len, rl_err *err) {
    rl_err_clear(err);
    if (!text && len) {
        rl_err_set(err, RL_ERR_INVALID, "grammar: NULL text");
        return NULL;
    }
    if (len > RL_GRAMMAR_MAX_TEXT) {
        rl_err_set(err, RL_ERR_LIMIT, "grammar: text is %zu bytes, limit %d", len,
                   RL_GRAMMAR_MAX_TEXT);
        return NULL;
    }
    builder b = {.err = err};
    parser p = {.s = text, .n = len, .line = 1, .b = &b, .cur_rule = -1};
    rl_grammar *g = NULL;
    int32_t *minlen = NULL;
    if (!parse_all(&p)) goto out;
    int32_t root = -1;
    for (int32_t r = 0; r < b.n_rules; r++) {
        if (!b.rules[r].line_def) {
            b_fail(&b, RL_ERR_FORMAT, "undefined rule '%s'", display_name(b.rules[r].name),
                   b.rules[r].line_ref);
            goto out;
        }
        if (!strcmp(b.rules[r].name, "root")) root = r;
    }
    if (root < 0) {
        b_fail(&b, RL_ERR_FORMAT, "no 'root' rule%s", "", 0);
        goto out;
    }
    minlen = rl_malloc(sizeof(int32_t) * (size_t)(b.n_rules + 1));
    if (!minlen) {
        b_nomem(&b);
        goto out;
    }
    if (!compute_minlen(&b, minlen)) goto out;
    if (minlen[root] >= RL_GRAMMAR_INF_LEN) {
        b_fail(&b, RL_ERR_FORMAT, "the grammar matches no string: rule 'root' can never finish%s",
               "", 0);
        goto out;
    }
    prune_unproductive(&b, minlen);
    if (!check_left_recursion(&b, minlen)) goto out;

    /* flatten */
    g = rl_calloc(1, sizeof *g);
    if (!g) goto nomem;
    atomic_init(&g->refs, 1);
    int32_t na = 0;
    int64_t ne = 0;
    for (int32_t r = 0; r < b.n_rules; r++) {
        na += b.rules[r].n_alts;
        for (int32_t k = 0; k < b.rules[r].n_alts; k++) ne += b.rules[r].alts[k].n + 1;
    }
    if (ne > RL_GRAMMAR_MAX_ELEMS + RL_GRAMMAR_MAX_RULES) {
        b_fail(&b, RL_ERR_LIMIT, "more than %s elements", "1048576", 0);
        goto fail;
    }
    g->n_rules = b.n_rules;
    g->n_alts = na;
    g->n_elems = (int32_t)ne + 1; /* +1: a trailing END so p+1 is always valid */
    g->n_sets = b.n_sets;
    g->root = root;
    g->el = rl_malloc(sizeof(uint32_t) * (size_t)g->n_elems);
    g->minrest = rl_malloc(sizeof(int32_t) * (size_t)g->n_elems);
    g->rule_alt = rl_malloc(sizeof(int32_t) * (size_t)(b.n_rules + 1));
    g->alt_start = rl_malloc(sizeof(int32_t) * (size_t)(na + 1));
    g->sets = rl_malloc(sizeof(rl_bset) * (size_t)(b.n_sets + 1));
    g->rule_names = rl_calloc((size_t)b.n_rules, sizeof(char *));
    if (!g->el || !g->minrest || !g->rule_alt || !g->alt_start || !g->sets || !g->rule_names)
        goto nomem;
    if (b.n_sets) memcpy(g->sets, b.sets, sizeof(rl_bset) * (size_t)b.n_sets);
    int32_t pos = 0, ai = 0;
    for (int32_t r = 0; r < b.n_rules; r++) {
        g->rule_alt[r] = ai;
        g->rule_names[r] = b.rules[r].name;
        b.rules[r].name = NULL;
        for (int32_t k = 0; k < b.rules[r].n_alts; k++) {
            bseq *s = &b.rules[r].alts[k];
            g->alt_start[ai++] = pos;
            if (s->n) memcpy(g->el + pos, s->e, sizeof(uint32_t) * (size_t)s->n);
            pos += s->n;
            g->el[pos++] = GE_MAKE(GE_END, 0);
        }
    }
    g->rule_alt[b.n_rules] = ai;
    g->el[pos] = GE_MAKE(GE_END, 0);
    /* minrest backwards: END -> 0 */
    for (int32_t i = g->n_elems - 1; i >= 0; i--) {
        uint32_t e = g->el[i];
        if (GE_KIND(e) == GE_END)
            g->minrest[i] = 0;
        else {
            int32_t l = GE_KIND(e) == GE_SET ? 1 : minlen[GE_ARG(e)];
            g->minrest[i] = sat_add(l, g->minrest[i + 1]);
        }
    }
    goto out;
nomem:
    b_nomem(&b);
fail:
    rl_grammar_free(g);
    g = NULL;
out:
    if (b.failed && g) {
        rl_grammar_free(g);
        g = NULL;
    }
    rl_free(minlen);
    builder_free(&b);
    return g;
}

rl_grammar *rl_grammar_retain(rl_grammar *g) {
    if (g) atomic_fetch_add(&g->refs, 1);
    return g;
}

void rl_grammar_free(rl_grammar *g) {
    if (!g || atomic_fetch_sub(&g->refs, 1) != 1) return;
    if (g->rule_names)
        for (int32_t r = 0; r < g->n_rules; r++) rl_free(g->rule_names[r]);
    rl_free(g->rule_names);
    rl_free(g->el);
    rl_free(g->minrest);
    rl_free(g->rule_alt);
    rl_free(g->alt_start);
    rl_free(g->sets);
    rl_free(g->lazy);
    rl_free(g);
}

int32_t rl_grammar_n_rules(const rl_grammar *g) {
    return g ? g->n_rules : 0;
}
