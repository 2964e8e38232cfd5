/* Internal layout of a compiled grammar; only src/grammar/grammar*.c and
 * json_schema_regex.c include this.
 *
 * A grammar is a flat array of elements.  Rule r has alternatives
 * alt_start[rule_alt[r] .. rule_alt[r+1]); each alternative is a run of
 * elements ending with one GE_END.  An element is (arg << 2) | kind:
 *   GE_SET  arg = index into sets[]: one byte from a 256-bit set
 *   GE_REF  arg = rule id
 *   GE_END  end of the alternative
 * Character classes over code points are compiled to byte sequences
 * (helper rules whose alternatives are runs of GE_SETs), so the matcher
 * only ever sees bytes.
 *
 * Invariants established by rl_grammar_compile:
 *   - every referenced rule is defined, and the root has an alternative;
 *   - no rule can reach itself through a nullable prefix (no left
 *     recursion), so expanding references always terminates;
 *   - every alternative left is productive (can finish), so every stack
 *     position can be completed: minrest[p] is finite;
 *   - minrest[p] = fewest bytes that take element p up to its GE_END. */
#ifndef RL_GRAMMAR_IMPL_H
#define RL_GRAMMAR_IMPL_H

#include <stdatomic.h>

#include "grammar/grammar.h"

enum { GE_END = 0, GE_SET = 1, GE_REF = 2 };
#define GE_KIND(e)         ((e)&3u)
#define GE_ARG(e)          ((int32_t)((e) >> 2))
#define GE_MAKE(kind, arg) (((uint32_t)(arg) << 2) | (uint32_t)(kind))

#define RL_GRAMMAR_INF_LEN (1 << 29) /* saturating "infinite" length */

typedef struct rl_bset {
    uint64_t w[4];
} rl_bset;

static inline bool rl_bset_has(const rl_bset *s, unsigned b) {
    return (s->w[b >> 6] >> (b & 63)) & 1u;
}

/* The triggers of a lazy grammar (grammar_lazy.c). */
typedef struct rl_glazy {
    int32_t n_words, n_tokens;
    int32_t max_word; /* longest word, bytes */
    uint16_t word_len[RL_GRAMMAR_MAX_TRIGGERS];
    bool anchored[RL_GRAMMAR_MAX_TRIGGERS]; /* written with a leading '^' */
    char words[RL_GRAMMAR_MAX_TRIGGERS][RL_GRAMMAR_MAX_TRIGGER_LEN];
    int32_t tokens[RL_GRAMMAR_MAX_TRIGGERS];
} rl_glazy;

struct rl_grammar {
    atomic_int refs;
    rl_glazy *lazy; /* NULL = constrains from the first byte */
    int32_t n_rules, n_elems, n_alts, n_sets;
    int32_t root;
    uint32_t *el;       /* [n_elems] */
    int32_t *rule_alt;  /* [n_rules + 1] offsets into alt_start */
    int32_t *alt_start; /* [n_alts] element positions */
    rl_bset *sets;      /* [n_sets] */
    int32_t *minrest;   /* [n_elems] */
    char **rule_names;  /* [n_rules] NUL-terminated, for messages */
};

/* ---- vocabulary trie (grammar_trie.c) ----
 * Nodes in depth-first preorder; node i covers the byte sequence on the
 * path from the root; its subtree is [i, skip).  Tokens whose bytes end at
 * node i are tok_ids[tok_first .. tok_first + n_tok). */
typedef struct rl_trie_node {
    int32_t skip;
    int32_t tok_first;
    uint16_t depth; /* 1 for the first byte */
    uint8_t byte;
    uint8_t n_tok; /* duplicates beyond 255 identical pieces are excluded */
} rl_trie_node;

struct rl_vocab_trie {
    int32_t n_vocab, n_nodes, n_eog, max_depth;
    rl_trie_node *nodes;
    int32_t *tok_ids; /* token ids sorted by bytes */
    int32_t *eog;     /* [n_eog] */
    uint8_t *kind;    /* [n_vocab] RL_VOCAB_* */
    char *bytes;      /* all pieces concatenated */
    uint32_t *off;    /* [n_vocab + 1] piece offsets into bytes */
};

/* ---- the lazily built automaton shared by a matcher family ----
 * A state is a canonical set of parse stacks, stored as a "blob" of
 * int32: [n_stacks, (len, pos_0 .. pos_len-1) ...], stacks sorted and
 * unique; pos_len-1 is the top (a GE_SET), the others return addresses.
 * An empty stack means the input so far is a sentence (accepting).
 * States are interned: equal sets get equal ids, so ids key the
 * transition memo (next[]) and the mask cache. */
typedef struct rl_gstate {
    rl_bset allow;     /* bytes with a live transition */
    uint32_t blob_off; /* into blobs */
    uint32_t blob_len;
    uint32_t next_off; /* into next: one entry per allowed byte */
    uint16_t pre[4];   /* popcount of allow.w[0..k) */
    uint16_t n_allow;
    uint8_t accepting;
    int32_t mask_slot; /* -1 = none */
    int32_t min_rem;   /* fewest bytes to accept */
    uint32_t hash;
} rl_gstate;

#define RL_GT_UNKNOWN  (-2)
#define RL_GT_DEAD     (-1)
#define RL_GT_OVERFLOW (-3)

typedef struct rl_gctx {
    int refs; /* matchers sharing this context (one thread) */
    rl_grammar *g;
    const rl_vocab_trie *t;
    uint32_t gen; /* bumped by each flush: state ids of older generations are void */
    rl_gstate *st;
    int32_t n_st;
    size_t cap_st;
    int32_t *blobs;
    size_t n_blobs, cap_blobs;
    int32_t *next;
    size_t n_next, cap_next;
    int32_t *ht;
    uint32_t ht_cap;
    /* advance scratch */
    int32_t *work;
    size_t work_top, work_cap;
    int32_t *out;
    size_t n_out, cap_out;
    int32_t *outidx;
    size_t n_outidx, cap_outidx;
    int32_t *cand; /* canonical candidate blob */
    size_t cap_cand;
    int64_t n_expand;
    bool scratch_fail;
    /* stacks already expanded in this advance (expansion is a function of
     * the stack, so a second visit adds nothing): open addressing over
     * seen_arena, an entry is live when its stamp is seen_stamp */
    struct rl_gseen {
        uint32_t stamp, off;
    } * seen_ht;
    uint32_t seen_cap, seen_n, seen_stamp;
    int32_t *seen_arena;
    size_t n_seen_arena, cap_seen_arena;
    /* expansion steps of the current public operation (mask, accept,
     * construction); past RL_GRAMMAR_OP_STEPS the operation fails */
    int64_t op_steps;
    bool op_limit;
    /* mask cache */
    int32_t n_words; /* (n_vocab + 63) / 64 */
    int32_t n_slots;
    uint64_t *slot_mem;  /* [n_slots][n_words] */
    int32_t *slot_owner; /* state id or -1 */
    uint64_t *slot_used;
    uint64_t tick;
    uint64_t *tmp_bits; /* [n_words] */
    rl_gmatch_stats stats;
} rl_gctx;

/* grammar_match.c */
int32_t rl__gctx_compute(rl_gctx *c, int32_t s, unsigned byte);
/* Raw advance without interning: returns the candidate blob in c->cand
 * (length *len; cand[0] == 0 means dead), false on allocation failure. */
bool rl__gctx_advance_raw(rl_gctx *c, const int32_t *blob, unsigned byte, size_t *len);

/* Transition of state s by byte: a state id, RL_GT_DEAD, or RL_GT_OVERFLOW
 * (caches full mid-walk; use rl__gctx_advance_raw). */
static inline int32_t rl__gctx_step(rl_gctx *c, int32_t s, unsigned b) {
    const rl_gstate *S = &c->st[s];
    unsigned w = b >> 6;
    uint64_t bit = 1ull << (b & 63);
    if (!(S->allow.w[w] & bit)) return RL_GT_DEAD;
    uint32_t idx = S->pre[w] + (uint32_t)__builtin_popcountll(S->allow.w[w] & (bit - 1));
    int32_t v = c->next[S->next_off + idx];
    return v != RL_GT_UNKNOWN ? v : rl__gctx_compute(c, s, b);
}

/* grammar_lazy.c: the earliest occurrence of a trigger word in
 * p[0..n) that ends at or after byte `from` and starts at or after
 * `min_start` (-1 when none). */
/* The earliest occurrence in p[0..n) of a word ending at or after `from`
 * and starting at or after min_start; anchored words only where they start
 * at or before anchor_max (-1: nowhere).  -1 if none. */
int64_t rl__glazy_find(const rl_glazy *lz, const char *p, size_t n, size_t from, size_t min_start,
                       int64_t anchor_max);
/* The output-start pattern of anchored words: whitespace, then at most one
 * Markdown fence opener (``` and a language word) and whitespace.  States
 * advance byte by byte; RL__GPRE_BROKEN is final; an anchored word may
 * start in any other state but 1 and 2 (inside the backticks). */
enum { RL__GPRE_BROKEN = 6 };
uint8_t rl__glazy_pre_step(uint8_t state, unsigned char b);
bool rl__glazy_is_token(const rl_glazy *lz, int32_t id);

/* grammar_match.c: the vocabulary trie of m's family (borrowed). */
const rl_vocab_trie *rl__gmatch_trie(const rl_gmatch *m);

/* grammar_trie.c: allowed-token bitmask of state s into bits[n_words]
 * (EOG bits included when s accepts); false on allocation failure. */
bool rl__trie_walk(rl_gctx *c, int32_t s, uint64_t *bits);

/* ---- code point ranges (grammar_parse.c; also the JSON Schema regex) ---- */
typedef struct rl__cprange {
    uint32_t lo, hi; /* inclusive */
} rl__cprange;
/* Sorts r[0..n) by lo and merges overlapping or adjacent ranges (in place),
 * then writes the union to out, or with neg its complement within
 * [0, 0x10FFFF]; returns the number written (out has room for n + 1). */
int rl__cp_ranges_normalize(rl__cprange *r, int n, bool neg, rl__cprange *out);

#endif
