/* The grammar matcher: a recognizer over bytes that keeps the set of all
 * parse stacks compatible with the input so far (a pushdown automaton run
 * on every alternative at once), plus a lazily built DFA over those sets.
 *
 * Advancing a state by a byte: every stack whose top GE_SET contains the
 * byte moves its top one element on and is then "expanded" until its top
 * is again a GE_SET (or it is empty = accept): GE_END pops to the return
 * address below; GE_REF r replaces the top by its return address and
 * pushes each alternative of r.  A reference that is the last element of
 * its alternative pushes no return address (tail call), so right
 * recursion such as `x*` runs in constant stack depth.
 *
 * Sets of stacks are interned (rl_gctx.st): the first time a (state, byte)
 * transition is needed it is computed and memoised in next[]; afterwards it
 * is two loads and a popcount.  This is what makes the trie walk of the
 * mask computation cheap (grammar_trie.c).
 *
 * Two paths that reach the same stack expand to the same results, so each
 * advance remembers the stacks whose top reference it has expanded (up to
 * SEEN_MAX_INTS ints of them) and skips repeats: without this a run of
 * optional items, `a? b? c? ...`, costs 2^n steps per byte.
 *
 * Bounds: a stack deeper than RL_GRAMMAR_MAX_DEPTH, stacks beyond
 * RL_GRAMMAR_MAX_STACKS in one state, or an expansion needing more than
 * EXPAND_LIMIT steps are cut (counted in stats.n_cut): the grammar is then
 * enforced as if those paths did not exist, which keeps outputs inside the
 * language.  One public call (a mask, an accept) may take at most
 * RL_GRAMMAR_OP_STEPS expansion steps in all; past that it fails with
 * RL_ERR_LIMIT, so an ambiguous grammar costs its own request an error
 * rather than stalling every request in the batch.  The interned states
 * and memo are flushed between operations once they exceed SOFT_STATES or
 * SOFT_BYTES; during one mask walk they may
 * grow to HARD_STATES / HARD_BYTES, after which the walk continues without
 * interning (RL_GT_OVERFLOW).  A matcher keeps its own copy of its state's
 * blob so it survives flushes. */
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "grammar/grammar-impl.h"

#define SOFT_STATES   4096
#define HARD_STATES   32768
#define SOFT_BYTES    ((size_t)16 << 20)
#define HARD_BYTES    ((size_t)96 << 20)
#define EXPAND_LIMIT  200000
#define EXPAND_DEPTH  2048
#define SEEN_MAX_INTS ((size_t)1 << 21)

struct rl_gmatch {
    rl_gctx *c;
    int32_t sid;
    uint32_t gen;
    int32_t *blob;
    uint32_t blob_len;
    size_t blob_cap;
    bool done; /* an EOG token was accepted */
    /* lazy grammars: no trigger seen yet; the output's last bytes, searched
     * for the trigger words (at most max_word - 1 kept between tokens) */
    bool waiting;
    char *tail;
    uint32_t tail_len, tail_cap;
    uint8_t pre; /* rl__glazy_pre_step's state over the bytes dropped from the tail */
};

/* Scratch arrays grow with rl_grow (base/buf.h); code holds offsets into
 * them, never pointers, so reallocation is safe. */

static void emit(rl_gctx *c, size_t off, int len) {
    if (c->n_outidx >= RL_GRAMMAR_MAX_STACKS) {
        c->stats.n_cut++;
        return;
    }
    if (rl_grow((void **)&c->out, &c->cap_out, c->n_out + (size_t)len + 1, sizeof(int32_t)) ||
        rl_grow((void **)&c->outidx, &c->cap_outidx, c->n_outidx + 1, sizeof(int32_t))) {
        c->scratch_fail = true;
        return;
    }
    c->outidx[c->n_outidx++] = (int32_t)c->n_out;
    c->out[c->n_out++] = len;
    memcpy(c->out + c->n_out, c->work + off, sizeof(int32_t) * (size_t)len);
    c->n_out += (size_t)len;
}

static uint32_t blob_hash(const int32_t *b, size_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (uint32_t)b[i]) * 0xff51afd7ed558ccdull;
    return (uint32_t)(h ^ (h >> 32));
}

/* Records the stack work[off .. off+len) as expanded in this advance;
 * true when it already was.  Once the arena is full nothing new is
 * recorded (repeats are then merely expanded again). */
static bool seen_before(rl_gctx *c, size_t off, int len) {
    const int32_t *s = c->work + off;
    uint32_t h = blob_hash(s, (size_t)len);
    if (c->seen_cap) {
        for (uint32_t i = h & (c->seen_cap - 1); c->seen_ht[i].stamp == c->seen_stamp;
             i = (i + 1) & (c->seen_cap - 1)) {
            const int32_t *t = c->seen_arena + c->seen_ht[i].off;
            if (t[0] == len && !memcmp(t + 1, s, sizeof(int32_t) * (size_t)len)) return true;
        }
    }
    if (c->n_seen_arena + (size_t)len + 1 > SEEN_MAX_INTS) return false;
    if ((c->seen_n + 1) * 2 > c->seen_cap) {
        uint32_t nc = c->seen_cap ? c->seen_cap * 2 : 1024;
        struct rl_gseen *nt = rl_malloc(sizeof *nt * nc);
        if (!nt) return false;
        uint32_t live = c->seen_stamp;
        for (uint32_t i = 0; i < nc; i++) nt[i].stamp = live - 1;
        for (uint32_t i = 0; i < c->seen_cap; i++) {
            if (c->seen_ht[i].stamp != live) continue;
            const int32_t *t = c->seen_arena + c->seen_ht[i].off;
            uint32_t j = blob_hash(t + 1, (size_t)t[0]) & (nc - 1);
            while (nt[j].stamp == live) j = (j + 1) & (nc - 1);
            nt[j] = c->seen_ht[i];
        }
        rl_free(c->seen_ht);
        c->seen_ht = nt;
        c->seen_cap = nc;
    }
    /* s points into work, which growing the arena never moves */
    if (rl_grow((void **)&c->seen_arena, &c->cap_seen_arena, c->n_seen_arena + (size_t)len + 1,
                sizeof(int32_t)))
        return false;
    uint32_t i = h & (c->seen_cap - 1);
    while (c->seen_ht[i].stamp == c->seen_stamp) i = (i + 1) & (c->seen_cap - 1);
    c->seen_ht[i].stamp = c->seen_stamp;
    c->seen_ht[i].off = (uint32_t)c->n_seen_arena;
    c->seen_arena[c->n_seen_arena] = len;
    memcpy(c->seen_arena + c->n_seen_arena + 1, s, sizeof(int32_t) * (size_t)len);
    c->n_seen_arena += (size_t)len + 1;
    c->seen_n++;
    return false;
}

/* Expands the stack work[off .. off+len) (top last) until its top is a
 * GE_SET, emitting each result. */
static void expand(rl_gctx *c, size_t off, int len, int depth) {
    const rl_grammar *g = c->g;
    if (c->scratch_fail) return;
    if (++c->op_steps > RL_GRAMMAR_OP_STEPS) {
        c->op_limit = c->scratch_fail = true;
        return;
    }
    c->stats.n_expand++;
    if (++c->n_expand > EXPAND_LIMIT || depth > EXPAND_DEPTH) {
        c->stats.n_cut++;
        return;
    }
    if (len == 0) {
        emit(c, off, 0);
        return;
    }
    int32_t p = c->work[off + (size_t)len - 1];
    uint32_t e = g->el[p];
    switch (GE_KIND(e)) {
    case GE_SET:
        emit(c, off, len);
        return;
    case GE_END:
        expand(c, off, len - 1, depth + 1);
        return;
    default:
        break;
    }
    /* paths meet where they branch: a reference met before is done */
    if (seen_before(c, off, len)) return;
    int32_t r = GE_ARG(e);
    bool tail = GE_KIND(g->el[p + 1]) == GE_END;
    int base = tail ? len - 1 : len;
    if (base + 1 > RL_GRAMMAR_MAX_DEPTH) {
        c->stats.n_cut++;
        return;
    }
    size_t off2 = c->work_top;
    if (rl_grow((void **)&c->work, &c->work_cap, off2 + (size_t)base + 1, sizeof(int32_t))) {
        c->scratch_fail = true;
        return;
    }
    c->work_top = off2 + (size_t)base + 1;
    memcpy(c->work + off2, c->work + off, sizeof(int32_t) * (size_t)base);
    if (!tail) c->work[off2 + (size_t)len - 1] = p + 1;
    for (int32_t a = g->rule_alt[r]; a < g->rule_alt[r + 1]; a++) {
        c->work[off2 + (size_t)base] = g->alt_start[a];
        expand(c, off2, base + 1, depth + 1);
    }
    c->work_top = off2;
}

static const int32_t *out_stack(const rl_gctx *c, int32_t i) {
    return c->out + c->outidx[i];
}

/* qsort has no context argument in C11 */
static _Thread_local rl_gctx *tl_sort_ctx;

static int stack_cmp(const void *a, const void *b) {
    const int32_t *x = out_stack(tl_sort_ctx, *(const int32_t *)a);
    const int32_t *y = out_stack(tl_sort_ctx, *(const int32_t *)b);
    if (x[0] != y[0]) return x[0] < y[0] ? -1 : 1;
    for (int32_t i = 1; i <= x[0]; i++)
        if (x[i] != y[i]) return x[i] < y[i] ? -1 : 1;
    return 0;
}

/* Sorts and dedupes the emitted stacks into c->cand; returns its length
 * or 0 on allocation failure. */
static size_t canonicalize(rl_gctx *c) {
    int32_t *idx = rl_malloc(sizeof(int32_t) * (c->n_outidx + 1));
    if (!idx) return 0;
    for (size_t i = 0; i < c->n_outidx; i++) idx[i] = (int32_t)i;
    tl_sort_ctx = c;
    if (c->n_outidx > 1) qsort(idx, c->n_outidx, sizeof *idx, stack_cmp);
    if (rl_grow((void **)&c->cand, &c->cap_cand, c->n_out + 1, sizeof(int32_t))) {
        rl_free(idx);
        return 0;
    }
    size_t n = 1;
    int32_t k = 0;
    for (size_t i = 0; i < c->n_outidx; i++) {
        if (i > 0 && stack_cmp(&idx[i - 1], &idx[i]) == 0) continue;
        const int32_t *s = out_stack(c, idx[i]);
        memcpy(c->cand + n, s, sizeof(int32_t) * (size_t)(s[0] + 1));
        n += (size_t)s[0] + 1;
        k++;
    }
    c->cand[0] = k;
    rl_free(idx);
    return n;
}

static void scratch_reset(rl_gctx *c) {
    c->n_out = c->n_outidx = 0;
    c->work_top = 0;
    c->n_expand = 0;
    c->scratch_fail = false;
    c->n_seen_arena = 0;
    c->seen_n = 0;
    if (++c->seen_stamp == 0) { /* wrapped: stamp 0 is never live */
        for (uint32_t i = 0; i < c->seen_cap; i++) c->seen_ht[i].stamp = 0;
        c->seen_stamp = 1;
    }
}

/* Starts a public operation's step budget. */
static void op_begin(rl_gctx *c) {
    c->op_steps = 0;
    c->op_limit = false;
}

/* The error for a failed operation: the step budget or memory. */
static rl_status op_fail(const rl_gctx *c, rl_err *err, const char *what) {
    if (c->op_limit)
        return rl_err_set(
            err, RL_ERR_LIMIT,
            "%s: grammar too ambiguous here (more than %d parse-stack expansion steps)", what,
            RL_GRAMMAR_OP_STEPS);
    return rl_err_set(err, RL_ERR_NOMEM, "%s: out of memory", what);
}

bool rl__gctx_advance_raw(rl_gctx *c, const int32_t *blob, unsigned byte, size_t *len) {
    scratch_reset(c);
    const rl_grammar *g = c->g;
    int32_t ns = blob[0];
    size_t i = 1;
    /* blob may live in c->blobs, which advancing never reallocates */
    for (int32_t k = 0; k < ns; k++) {
        int32_t l = blob[i];
        const int32_t *s = blob + i + 1;
        i += (size_t)l + 1;
        if (l == 0) continue;
        int32_t p = s[l - 1];
        if (!rl_bset_has(&g->sets[GE_ARG(g->el[p])], byte)) continue;
        size_t off = c->work_top;
        if (rl_grow((void **)&c->work, &c->work_cap, off + (size_t)l, sizeof(int32_t)))
            return false;
        memcpy(c->work + off, s, sizeof(int32_t) * (size_t)l);
        c->work[off + (size_t)l - 1] = p + 1;
        c->work_top = off + (size_t)l;
        expand(c, off, l, 0);
        c->work_top = off;
        if (c->scratch_fail) return false;
    }
    *len = canonicalize(c);
    return *len > 0;
}

static bool initial_raw(rl_gctx *c, size_t *len) {
    scratch_reset(c);
    const rl_grammar *g = c->g;
    if (rl_grow((void **)&c->work, &c->work_cap, 1, sizeof(int32_t))) return false;
    for (int32_t a = g->rule_alt[g->root]; a < g->rule_alt[g->root + 1]; a++) {
        c->work[0] = g->alt_start[a];
        c->work_top = 1;
        expand(c, 0, 1, 0);
        if (c->scratch_fail) return false;
    }
    *len = canonicalize(c);
    return *len > 0;
}

static size_t ctx_bytes(const rl_gctx *c) {
    return c->n_blobs * 4 + c->n_next * 4 + (size_t)c->n_st * sizeof(rl_gstate) +
           (size_t)c->ht_cap * 4;
}

static bool ht_rebuild(rl_gctx *c, uint32_t cap) {
    int32_t *ht = rl_malloc(sizeof(int32_t) * cap);
    if (!ht) return false;
    for (uint32_t i = 0; i < cap; i++) ht[i] = -1;
    for (int32_t s = 0; s < c->n_st; s++) {
        uint32_t h = c->st[s].hash & (cap - 1);
        while (ht[h] >= 0) h = (h + 1) & (cap - 1);
        ht[h] = s;
    }
    rl_free(c->ht);
    c->ht = ht;
    c->ht_cap = cap;
    return true;
}

/* Interns blob[0..n) (not inside c->blobs).  Returns its id,
 * RL_GT_OVERFLOW at the hard caps, or -4 on allocation failure. */
static int32_t intern(rl_gctx *c, const int32_t *blob, size_t n) {
    uint32_t h = blob_hash(blob, n);
    if (c->ht_cap) {
        for (uint32_t i = h & (c->ht_cap - 1); c->ht[i] >= 0; i = (i + 1) & (c->ht_cap - 1)) {
            const rl_gstate *S = &c->st[c->ht[i]];
            if (S->hash == h && S->blob_len == n &&
                !memcmp(c->blobs + S->blob_off, blob, n * sizeof(int32_t)))
                return c->ht[i];
        }
    }
    if (c->n_st >= HARD_STATES || ctx_bytes(c) > HARD_BYTES) return RL_GT_OVERFLOW;
    if ((uint32_t)(c->n_st + 1) * 2 > c->ht_cap && !ht_rebuild(c, c->ht_cap ? c->ht_cap * 2 : 256))
        return -4;
    const rl_grammar *g = c->g;
    rl_gstate S = {
        .blob_len = (uint32_t)n, .mask_slot = -1, .hash = h, .min_rem = RL_GRAMMAR_INF_LEN};
    int32_t ns = blob[0];
    size_t i = 1;
    for (int32_t k = 0; k < ns; k++) {
        int32_t l = blob[i];
        int64_t rem = 0;
        for (int32_t j = 0; j < l; j++) rem += g->minrest[blob[i + 1 + (size_t)j]];
        if (rem < S.min_rem) S.min_rem = (int32_t)rem;
        if (l == 0)
            S.accepting = 1;
        else {
            const rl_bset *bs = &g->sets[GE_ARG(g->el[blob[i + (size_t)l]])];
            for (int w = 0; w < 4; w++) S.allow.w[w] |= bs->w[w];
        }
        i += (size_t)l + 1;
    }
    uint32_t cnt = 0;
    for (int w = 0; w < 4; w++) {
        S.pre[w] = (uint16_t)cnt;
        cnt += (uint32_t)__builtin_popcountll(S.allow.w[w]);
    }
    S.n_allow = (uint16_t)cnt;
    if (rl_grow((void **)&c->blobs, &c->cap_blobs, c->n_blobs + n, sizeof(int32_t)) ||
        rl_grow((void **)&c->next, &c->cap_next, c->n_next + cnt + 1, sizeof(int32_t)) ||
        rl_grow((void **)&c->st, &c->cap_st, (size_t)c->n_st + 1, sizeof(rl_gstate)))
        return -4;
    S.blob_off = (uint32_t)c->n_blobs;
    memcpy(c->blobs + c->n_blobs, blob, n * sizeof(int32_t));
    c->n_blobs += n;
    S.next_off = (uint32_t)c->n_next;
    for (uint32_t k = 0; k < cnt; k++) c->next[c->n_next + k] = RL_GT_UNKNOWN;
    c->n_next += cnt;
    int32_t id = c->n_st++;
    c->st[id] = S;
    uint32_t slot = h & (c->ht_cap - 1);
    while (c->ht[slot] >= 0) slot = (slot + 1) & (c->ht_cap - 1);
    c->ht[slot] = id;
    c->stats.n_states = c->n_st;
    return id;
}

int32_t rl__gctx_compute(rl_gctx *c, int32_t s, unsigned byte) {
    size_t len;
    const int32_t *blob = c->blobs + c->st[s].blob_off;
    if (!rl__gctx_advance_raw(c, blob, byte, &len)) return -4;
    c->stats.n_transitions++;
    int32_t v = c->cand[0] == 0 ? RL_GT_DEAD : intern(c, c->cand, len);
    if (v == -4) return -4;
    if (v != RL_GT_OVERFLOW) {
        const rl_gstate *S = &c->st[s];
        unsigned w = byte >> 6;
        uint64_t bit = 1ull << (byte & 63);
        uint32_t idx = S->pre[w] + (uint32_t)__builtin_popcountll(S->allow.w[w] & (bit - 1));
        c->next[S->next_off + idx] = v;
    }
    return v;
}

static void ctx_flush(rl_gctx *c) {
    c->n_st = 0;
    c->n_blobs = c->n_next = 0;
    for (uint32_t i = 0; i < c->ht_cap; i++) c->ht[i] = -1;
    for (int32_t k = 0; k < c->n_slots; k++) c->slot_owner[k] = -1;
    c->gen++;
    c->stats.n_flushes++;
    c->stats.n_states = 0;
}

/* ------------------------------------------------------------------ */
/* matcher */

static bool set_blob(rl_gmatch *m, const int32_t *blob, size_t n) {
    if (rl_grow((void **)&m->blob, &m->blob_cap, n, sizeof(int32_t))) return false;
    memcpy(m->blob, blob, n * sizeof(int32_t));
    m->blob_len = (uint32_t)n;
    return true;
}

/* Makes m->sid valid in the current generation, flushing first when the
 * caches are over their soft caps.  false on allocation failure. */
static bool sync(rl_gmatch *m) {
    rl_gctx *c = m->c;
    if (c->n_st > SOFT_STATES || ctx_bytes(c) > SOFT_BYTES) ctx_flush(c);
    if (m->gen == c->gen && m->sid >= 0) return true;
    int32_t id = intern(c, m->blob, m->blob_len);
    if (id < 0) return false;
    m->sid = id;
    m->gen = c->gen;
    return true;
}

/* dst takes src's lazy state (same family: same tail capacity). */
static bool copy_lazy(rl_gmatch *dst, const rl_gmatch *src) {
    dst->waiting = src->waiting;
    dst->pre = src->pre;
    if (!src->tail) return true;
    if (!dst->tail) {
        if (!(dst->tail = rl_malloc(src->tail_cap))) return false;
        dst->tail_cap = src->tail_cap;
    }
    memcpy(dst->tail, src->tail, src->tail_len);
    dst->tail_len = src->tail_len;
    return true;
}

static bool move_to(rl_gmatch *m, int32_t id) {
    const rl_gstate *S = &m->c->st[id];
    if (!set_blob(m, m->c->blobs + S->blob_off, S->blob_len)) return false;
    m->sid = id;
    return true;
}

static void ctx_free(rl_gctx *c) {
    if (!c || --c->refs > 0) return;
    rl_grammar_free(c->g);
    rl_free(c->st);
    rl_free(c->blobs);
    rl_free(c->next);
    rl_free(c->ht);
    rl_free(c->work);
    rl_free(c->out);
    rl_free(c->outidx);
    rl_free(c->cand);
    rl_free(c->seen_ht);
    rl_free(c->seen_arena);
    rl_free(c->slot_mem);
    rl_free(c->slot_owner);
    rl_free(c->slot_used);
    rl_free(c->tmp_bits);
    rl_free(c);
}

static bool set_slots(rl_gctx *c, int n) {
    if (n < 0) n = 0;
    if (n > 65536) n = 65536;
    rl_free(c->slot_mem);
    rl_free(c->slot_owner);
    rl_free(c->slot_used);
    c->slot_mem = NULL;
    c->slot_owner = NULL;
    c->slot_used = NULL;
    for (int32_t s = 0; s < c->n_st; s++) c->st[s].mask_slot = -1;
    c->n_slots = 0;
    if (n == 0) return true;
    size_t words;
    if (!rl_mul_size((size_t)n, (size_t)c->n_words, &words)) return false;
    c->slot_mem = rl_malloc(words * sizeof(uint64_t));
    c->slot_owner = rl_malloc(sizeof(int32_t) * (size_t)n);
    c->slot_used = rl_calloc((size_t)n, sizeof(uint64_t));
    if (!c->slot_mem || !c->slot_owner || !c->slot_used) return false;
    for (int k = 0; k < n; k++) c->slot_owner[k] = -1;
    c->n_slots = n;
    return true;
}

rl_gmatch *rl_gmatch_new(const rl_grammar *g, const rl_vocab_trie *t, rl_err *err) {
    rl_err_clear(err);
    if (!g || !t) {
        rl_err_set(err, RL_ERR_INVALID, "rl_gmatch_new: NULL grammar or trie");
        return NULL;
    }
    rl_gmatch *m = rl_calloc(1, sizeof *m);
    rl_gctx *c = rl_calloc(1, sizeof *c);
    if (!m || !c) goto nomem;
    m->c = c;
    c->refs = 1;
    c->g = rl_grammar_retain((rl_grammar *)g);
    c->t = t;
    c->n_words = (t->n_vocab + 63) / 64;
    c->tmp_bits = rl_malloc(sizeof(uint64_t) * (size_t)(c->n_words + 1));
    if (!c->tmp_bits || !set_slots(c, 256)) goto nomem;
    size_t len;
    op_begin(c);
    if (!initial_raw(c, &len)) goto nomem;
    int32_t id = intern(c, c->cand, len);
    if (id < 0 || !move_to(m, id)) goto nomem;
    m->gen = c->gen;
    if (g->lazy) {
        m->waiting = true;
        m->tail_cap = (uint32_t)g->lazy->max_word + 1024 + 8; /* kept bytes + one token */
        if (!(m->tail = rl_malloc(m->tail_cap))) goto nomem;
    }
    return m;
nomem:
    if (c)
        op_fail(c, err, "grammar matcher");
    else
        rl_err_set(err, RL_ERR_NOMEM, "grammar matcher: out of memory");
    if (m) {
        rl_free(m->blob);
        rl_free(m->tail);
        rl_free(m);
    }
    if (c && !c->g)
        rl_free(c);
    else
        ctx_free(c);
    return NULL;
}

rl_gmatch *rl_gmatch_clone(const rl_gmatch *src, rl_err *err) {
    rl_err_clear(err);
    rl_gmatch *m = rl_calloc(1, sizeof *m);
    if (!m || !set_blob(m, src->blob, src->blob_len)) {
        rl_free(m);
        rl_err_set(err, RL_ERR_NOMEM, "grammar matcher clone: out of memory");
        return NULL;
    }
    m->c = src->c;
    m->c->refs++;
    m->sid = src->sid;
    m->gen = src->gen;
    m->done = src->done;
    if (!copy_lazy(m, src)) {
        rl_gmatch_free(m);
        rl_err_set(err, RL_ERR_NOMEM, "grammar matcher clone: out of memory");
        return NULL;
    }
    return m;
}

rl_status rl_gmatch_restore(rl_gmatch *dst, const rl_gmatch *src, rl_err *err) {
    if (dst->c != src->c)
        return rl_err_set(err, RL_ERR_INVALID, "rl_gmatch_restore: matchers of different families");
    if (!set_blob(dst, src->blob, src->blob_len))
        return rl_err_set(err, RL_ERR_NOMEM, "rl_gmatch_restore: out of memory");
    dst->sid = src->sid;
    dst->gen = src->gen;
    dst->done = src->done;
    if (!copy_lazy(dst, src))
        return rl_err_set(err, RL_ERR_NOMEM, "rl_gmatch_restore: out of memory");
    return RL_OK;
}

const rl_vocab_trie *rl__gmatch_trie(const rl_gmatch *m) {
    return m->c->t;
}

void rl_gmatch_free(rl_gmatch *m) {
    if (!m) return;
    ctx_free(m->c);
    rl_free(m->blob);
    rl_free(m->tail);
    rl_free(m);
}

void rl_gmatch_set_mask_cache(rl_gmatch *m, int n_entries) {
    if (!set_slots(m->c, n_entries)) set_slots(m->c, 0);
}

rl_gmatch_stats rl_gmatch_get_stats(const rl_gmatch *m) {
    return m->c->stats;
}

/* Walks state *ps through bytes p[0..n) without committing (*ps is the
 * state reached; a cache flush on the way re-interns it). */
static rl_status walk(rl_gmatch *m, int32_t *ps, const uint8_t *p, size_t n, rl_err *err,
                      int32_t id) {
    int32_t s = *ps;
    for (size_t i = 0; i < n; i++) {
        int32_t nx = rl__gctx_step(m->c, s, p[i]);
        if (nx == RL_GT_DEAD) {
            if (id >= 0)
                return rl_err_set(err, RL_ERR_INVALID,
                                  "grammar: token %d not allowed here (byte %zu of %zu)", (int)id,
                                  i, n);
            return rl_err_set(err, RL_ERR_INVALID, "grammar: byte %zu (0x%02x) not allowed here", i,
                              p[i]);
        }
        if (nx == RL_GT_OVERFLOW) {
            /* long input through many distinct states: flush and go on */
            const rl_gstate *S = &m->c->st[s];
            int32_t *tmp = rl_malloc(sizeof(int32_t) * S->blob_len);
            if (!tmp) return rl_err_set(err, RL_ERR_NOMEM, "grammar: out of memory");
            size_t bl = S->blob_len;
            memcpy(tmp, m->c->blobs + S->blob_off, sizeof(int32_t) * bl);
            ctx_flush(m->c);
            s = intern(m->c, tmp, bl);
            rl_free(tmp);
            if (s < 0) return rl_err_set(err, RL_ERR_NOMEM, "grammar: out of memory");
            i--;
            continue;
        }
        if (nx < 0) return op_fail(m->c, err, "grammar");
        s = nx;
    }
    *ps = s;
    return RL_OK;
}

/* Advances a copy of the state through bytes; on success commits. */
static rl_status advance_bytes(rl_gmatch *m, const uint8_t *p, size_t n, rl_err *err,
                               const char *what, int32_t id) {
    if (m->done)
        return rl_err_set(err, RL_ERR_INVALID, "grammar: %s after end of generation", what);
    op_begin(m->c);
    if (!sync(m)) return rl_err_set(err, RL_ERR_NOMEM, "grammar: out of memory");
    int32_t s = m->sid;
    rl_status st = walk(m, &s, p, n, err, id);
    if (st != RL_OK) return st;
    if (!move_to(m, s)) return rl_err_set(err, RL_ERR_NOMEM, "grammar: out of memory");
    return RL_OK;
}

/* The grammar's start state (where a waiting matcher still is) through
 * a[0..na) then b[0..nb), committed only when both are accepted. */
static rl_status start_with(rl_gmatch *m, const char *a, size_t na, const char *b, size_t nb,
                            rl_err *err) {
    op_begin(m->c);
    if (!sync(m)) return rl_err_set(err, RL_ERR_NOMEM, "grammar: out of memory");
    int32_t s = m->sid;
    rl_status st = walk(m, &s, (const uint8_t *)a, na, err, -1);
    if (st == RL_OK) st = walk(m, &s, (const uint8_t *)b, nb, err, -1);
    if (st != RL_OK) return st;
    if (!move_to(m, s)) return rl_err_set(err, RL_ERR_NOMEM, "grammar: out of memory");
    return RL_OK;
}

/* A waiting lazy matcher takes output bytes p[0..n) (a control token's
 * none, `id` its id or -1): a trigger token starts the grammar after it; a
 * trigger word in the tail starts it at the word, fed the bytes from there
 * on (refused bytes: that occurrence is passed over). */
static rl_status lazy_feed(rl_gmatch *m, const char *p, size_t n, int32_t id, rl_err *err) {
    const rl_glazy *lz = m->c->g->lazy;
    if (id >= 0 && rl__glazy_is_token(lz, id)) {
        m->waiting = false;
        return RL_OK;
    }
    if (!p) { /* a control token without bytes breaks any word in progress */
        m->tail_len = 0;
        m->pre = RL__GPRE_BROKEN; /* and is output: no longer the start */
        return RL_OK;
    }
    while (n > 0) {
        size_t room = m->tail_cap - m->tail_len, k = n < room ? n : room;
        uint32_t old = m->tail_len;
        memcpy(m->tail + old, p, k);
        m->tail_len += (uint32_t)k;
        p += k;
        n -= k;
        /* anchored words may start where the output so far is whitespace
         * and a fence opener */
        int64_t anchor_max = -1;
        uint8_t ps = m->pre;
        for (uint32_t i = 0; ps != RL__GPRE_BROKEN; i++) {
            if (ps != 1 && ps != 2) anchor_max = i;
            if (i == m->tail_len) break;
            ps = rl__glazy_pre_step(ps, (unsigned char)m->tail[i]);
        }
        int64_t at;
        size_t min_start = 0;
        while ((at = rl__glazy_find(lz, m->tail, m->tail_len, old, min_start, anchor_max)) >= 0) {
            rl_err e2;
            rl_status st = start_with(m, m->tail + at, m->tail_len - (size_t)at, p, n, &e2);
            if (st == RL_OK) {
                m->waiting = false;
                m->tail_len = 0;
                return RL_OK;
            }
            if (st != RL_ERR_INVALID) return rl_err_set(err, st, "%s", e2.msg);
            min_start = (size_t)at + 1; /* refused: look past this occurrence */
        }
        /* keep the bytes a word still in progress may need */
        uint32_t keep =
            (uint32_t)lz->max_word - 1 < m->tail_len ? (uint32_t)lz->max_word - 1 : m->tail_len;
        for (uint32_t i = 0; i < m->tail_len - keep; i++)
            m->pre = rl__glazy_pre_step(m->pre, (unsigned char)m->tail[i]);
        memmove(m->tail, m->tail + m->tail_len - keep, keep);
        m->tail_len = keep;
    }
    return RL_OK;
}

bool rl_gmatch_is_waiting(const rl_gmatch *m) {
    return m->waiting;
}

rl_status rl_gmatch_accept_bytes(rl_gmatch *m, const char *p, size_t n, rl_err *err) {
    rl_err_clear(err);
    if (m->waiting && !m->done) return lazy_feed(m, p, n, -1, err);
    return advance_bytes(m, (const uint8_t *)p, n, err, "bytes", -1);
}

rl_status rl_gmatch_accept_token(rl_gmatch *m, int32_t id, rl_err *err) {
    rl_err_clear(err);
    const rl_vocab_trie *t = m->c->t;
    if (id < 0 || id >= t->n_vocab)
        return rl_err_set(err, RL_ERR_RANGE, "grammar: token id %d out of range [0, %d)", (int)id,
                          (int)t->n_vocab);
    if (m->waiting && !m->done && t->kind[id] != RL_VOCAB_EOG) {
        if (t->kind[id] != RL_VOCAB_NORMAL) return lazy_feed(m, NULL, 0, id, err);
        return lazy_feed(m, t->bytes + t->off[id], t->off[id + 1] - t->off[id], id, err);
    }
    if (t->kind[id] == RL_VOCAB_EOG) {
        if (m->done || m->waiting) {
            m->done = true;
            return RL_OK;
        }
        if (!rl_gmatch_is_accepting(m))
            return rl_err_set(err, RL_ERR_INVALID,
                              "grammar: end-of-generation token %d before the output is complete",
                              (int)id);
        m->done = true;
        return RL_OK;
    }
    if (t->kind[id] != RL_VOCAB_NORMAL)
        return rl_err_set(err, RL_ERR_INVALID, "grammar: token %d (control/unused) never allowed",
                          (int)id);
    return advance_bytes(m, (const uint8_t *)t->bytes + t->off[id], t->off[id + 1] - t->off[id],
                         err, "token", id);
}

bool rl_gmatch_is_accepting(rl_gmatch *m) {
    if (m->done || m->waiting) return true;
    /* the blob says it without the automaton: look for an empty stack */
    int32_t ns = m->blob[0];
    size_t i = 1;
    for (int32_t k = 0; k < ns; k++) {
        if (m->blob[i] == 0) return true;
        i += (size_t)m->blob[i] + 1;
    }
    return false;
}

bool rl_gmatch_is_done(rl_gmatch *m) {
    if (m->done) return true;
    if (m->waiting) return false;
    int32_t ns = m->blob[0];
    /* accepting and nothing can follow: exactly one stack, empty */
    return ns == 1 && m->blob[1] == 0;
}

int64_t rl_gmatch_min_remaining(rl_gmatch *m) {
    if (m->done || m->waiting) return 0;
    const rl_grammar *g = m->c->g;
    int64_t best = -1;
    int32_t ns = m->blob[0];
    size_t i = 1;
    for (int32_t k = 0; k < ns; k++) {
        int32_t l = m->blob[i];
        int64_t rem = 0;
        for (int32_t j = 0; j < l; j++) rem += g->minrest[m->blob[i + 1 + (size_t)j]];
        if (best < 0 || rem < best) best = rem;
        i += (size_t)l + 1;
    }
    return best;
}

/* ------------------------------------------------------------------ */
/* jump-forward */

int rl_gmatch_forced(rl_gmatch *m, int32_t *out, int max) {
    if (max <= 0 || m->done || m->waiting || !sync(m)) return 0;
    rl_gctx *c = m->c;
    op_begin(c);
    uint8_t buf[256];
    size_t n = 0;
    int32_t s = m->sid;
    while (n < sizeof buf) {
        const rl_gstate *S = &c->st[s];
        if (S->accepting || S->n_allow != 1) break;
        unsigned b = 0;
        for (int w = 0; w < 4; w++)
            if (S->allow.w[w]) {
                b = (unsigned)(w * 64 + __builtin_ctzll(S->allow.w[w]));
                break;
            }
        int32_t nx = rl__gctx_step(c, s, b);
        if (nx < 0) break; /* dead (a cut path) or caches full: stop forcing */
        buf[n++] = (uint8_t)b;
        s = nx;
    }
    /* greedy longest match over the trie */
    const rl_vocab_trie *t = c->t;
    int k = 0;
    size_t pos = 0;
    while (pos < n && k < max) {
        int32_t best = -1;
        size_t best_len = 0;
        int32_t i = 0, end = t->n_nodes;
        size_t d = 0;
        while (pos + d < n && i < end) {
            /* find the child of the current node with byte buf[pos+d] */
            int32_t j = i;
            while (j < end && t->nodes[j].byte != buf[pos + d]) j = t->nodes[j].skip;
            if (j >= end) break;
            d++;
            if (t->nodes[j].n_tok) {
                best = t->tok_ids[t->nodes[j].tok_first];
                best_len = d;
            }
            end = t->nodes[j].skip;
            i = j + 1;
        }
        if (best < 0) break;
        out[k++] = best;
        pos += best_len;
    }
    return k;
}

/* ------------------------------------------------------------------ */
/* masks */

/* Bits of the allowed set for m's state: from the cache or a trie walk.
 * Returns a pointer valid until the next call on this family, or NULL. */
static const uint64_t *allowed_bits(rl_gmatch *m) {
    rl_gctx *c = m->c;
    const rl_vocab_trie *t = c->t;
    c->stats.n_masks++;
    if (m->waiting) { /* unconstrained until a trigger */
        memset(c->tmp_bits, 0xff, sizeof(uint64_t) * (size_t)c->n_words);
        if (t->n_vocab % 64) c->tmp_bits[c->n_words - 1] = (1ull << (t->n_vocab % 64)) - 1;
        return c->tmp_bits;
    }
    if (m->done) {
        memset(c->tmp_bits, 0, sizeof(uint64_t) * (size_t)c->n_words);
        for (int32_t k = 0; k < t->n_eog; k++)
            c->tmp_bits[t->eog[k] >> 6] |= 1ull << (t->eog[k] & 63);
        return c->tmp_bits;
    }
    op_begin(c);
    if (!sync(m)) return NULL;
    rl_gstate *S = &c->st[m->sid];
    if (S->mask_slot >= 0) {
        c->stats.n_mask_hits++;
        c->slot_used[S->mask_slot] = ++c->tick;
        return c->slot_mem + (size_t)S->mask_slot * (size_t)c->n_words;
    }
    if (c->n_slots == 0) return rl__trie_walk(c, m->sid, c->tmp_bits) ? c->tmp_bits : NULL;
    int32_t slot = 0;
    for (int32_t k = 1; k < c->n_slots && c->slot_used[slot]; k++)
        if (c->slot_used[k] < c->slot_used[slot]) slot = k;
    if (c->slot_owner[slot] >= 0 && c->slot_owner[slot] < c->n_st)
        c->st[c->slot_owner[slot]].mask_slot = -1;
    c->slot_owner[slot] = -1;
    uint64_t *bits = c->slot_mem + (size_t)slot * (size_t)c->n_words;
    if (!rl__trie_walk(c, m->sid, bits)) return NULL;
    /* the walk may have grown c->st, but never flushes it */
    c->st[m->sid].mask_slot = slot;
    c->slot_owner[slot] = m->sid;
    c->slot_used[slot] = ++c->tick;
    return bits;
}

int32_t rl_gmatch_allowed(rl_gmatch *m, uint64_t *bits, rl_err *err) {
    rl_err_clear(err);
    const uint64_t *b = allowed_bits(m);
    if (!b) {
        op_fail(m->c, err, "grammar mask");
        return -1;
    }
    int32_t n = 0;
    for (int32_t w = 0; w < m->c->n_words; w++) {
        bits[w] = b[w];
        n += __builtin_popcountll(b[w]);
    }
    return n;
}

rl_status rl_gmatch_mask(rl_gmatch *m, float *logits, int32_t n_logits, rl_err *err) {
    rl_err_clear(err);
    if (m->waiting) return RL_OK; /* unconstrained until a trigger: no per-token work */
    const uint64_t *b = allowed_bits(m);
    if (!b) return op_fail(m->c, err, "grammar mask");
    int32_t nv = m->c->t->n_vocab;
    int32_t lim = n_logits < nv ? n_logits : nv;
    for (int32_t w = 0; w * 64 < lim; w++) {
        uint64_t ban = ~b[w];
        while (ban) {
            int32_t i = w * 64 + __builtin_ctzll(ban);
            ban &= ban - 1;
            if (i >= lim) break;
            logits[i] = -__builtin_inff();
        }
    }
    for (int32_t i = nv; i < n_logits; i++) logits[i] = -__builtin_inff();
    return RL_OK;
}
