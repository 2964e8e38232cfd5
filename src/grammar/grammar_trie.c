/* Vocabulary byte trie and the allowed-token walk.
 *
 * The trie stores every NORMAL token's bytes, nodes in depth-first
 * preorder, each with the index just past its subtree (`skip`).  Walking
 * it for a matcher state is then one linear pass: at node i take the
 * parent's state (kept per depth), step it by the node's byte through the
 * memoised automaton (grammar_match.c); a dead transition skips the whole
 * subtree in one jump, a live one marks the node's tokens allowed and
 * descends.  Cost: one table lookup per visited node; nodes under a
 * rejected byte are never visited.
 *
 * Invariants: tokens are sorted by bytes, so the tokens of one node are
 * consecutive in tok_ids; depth <= RL_TRIE_MAX_PIECE; pieces that are
 * empty or longer are excluded, like control tokens. */
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "grammar/grammar-impl.h"

#define RL_TRIE_MAX_PIECE 1024

static _Thread_local const rl_vocab_trie *tl_trie;

static int piece_cmp(const void *a, const void *b) {
    const rl_vocab_trie *t = tl_trie;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    uint32_t lx = t->off[x + 1] - t->off[x], ly = t->off[y + 1] - t->off[y];
    int c = memcmp(t->bytes + t->off[x], t->bytes + t->off[y], lx < ly ? lx : ly);
    if (c) return c;
    if (lx != ly) return lx < ly ? -1 : 1;
    return x < y ? -1 : x > y;
}

void rl_vocab_trie_free(rl_vocab_trie *t) {
    if (!t) return;
    rl_free(t->nodes);
    rl_free(t->tok_ids);
    rl_free(t->eog);
    rl_free(t->kind);
    rl_free(t->bytes);
    rl_free(t->off);
    rl_free(t);
}

rl_vocab_trie *rl_vocab_trie_build(int32_t n_vocab, const char *const *pieces, const size_t *lens,
                                   const uint8_t *kinds, rl_err *err) {
    rl_err_clear(err);
    if (n_vocab <= 0 || n_vocab > (1 << 24) || !pieces || !lens) {
        rl_err_set(err, RL_ERR_INVALID,
                   "vocab trie: n_vocab %d out of range (1..16777216) or NULL pieces",
                   (int)n_vocab);
        return NULL;
    }
    rl_vocab_trie *t = rl_calloc(1, sizeof *t);
    int32_t *order = NULL, *path = NULL;
    if (!t) goto nomem;
    t->n_vocab = n_vocab;
    t->kind = rl_malloc((size_t)n_vocab);
    t->off = rl_malloc(sizeof(uint32_t) * ((size_t)n_vocab + 1));
    if (!t->kind || !t->off) goto nomem;
    size_t total = 0;
    int32_t n_eog = 0, n_norm = 0;
    for (int32_t i = 0; i < n_vocab; i++) {
        uint8_t k = kinds ? kinds[i] : RL_VOCAB_NORMAL;
        if (k > RL_VOCAB_EXCLUDE) k = RL_VOCAB_EXCLUDE;
        if (k == RL_VOCAB_NORMAL && (lens[i] == 0 || lens[i] > RL_TRIE_MAX_PIECE || !pieces[i]))
            k = RL_VOCAB_EXCLUDE;
        t->kind[i] = k;
        t->off[i] = (uint32_t)total;
        if (k == RL_VOCAB_NORMAL) {
            total += lens[i];
            n_norm++;
            if (total > 0xFFFFFFF0u) {
                rl_err_set(err, RL_ERR_LIMIT, "vocab trie: pieces total over 4 GiB");
                goto fail;
            }
        }
        if (k == RL_VOCAB_EOG) n_eog++;
    }
    t->off[n_vocab] = (uint32_t)total;
    t->bytes = rl_malloc(total + 1);
    t->eog = rl_malloc(sizeof(int32_t) * ((size_t)n_eog + 1));
    t->tok_ids = rl_malloc(sizeof(int32_t) * ((size_t)n_norm + 1));
    order = rl_malloc(sizeof(int32_t) * ((size_t)n_norm + 1));
    path = rl_malloc(sizeof(int32_t) * (RL_TRIE_MAX_PIECE + 1));
    if (!t->bytes || !t->eog || !t->tok_ids || !order || !path) goto nomem;
    int32_t no = 0;
    for (int32_t i = 0; i < n_vocab; i++) {
        if (t->kind[i] == RL_VOCAB_NORMAL) {
            memcpy(t->bytes + t->off[i], pieces[i], lens[i]);
            order[no++] = i;
        } else if (t->kind[i] == RL_VOCAB_EOG)
            t->eog[t->n_eog++] = i;
    }
    tl_trie = t;
    qsort(order, (size_t)no, sizeof *order, piece_cmp);

    size_t cap = 0;
    if (rl_grow((void **)&t->nodes, &cap, (size_t)no * 2 + 16, sizeof *t->nodes)) goto nomem;
    int32_t n_nodes = 0, depth = 0, n_tok = 0, prev = -1;
    for (int32_t k = 0; k < no; k++) {
        int32_t id = order[k];
        const uint8_t *s = (const uint8_t *)t->bytes + t->off[id];
        int32_t len = (int32_t)(t->off[id + 1] - t->off[id]);
        int32_t lcp = 0;
        if (prev >= 0) {
            const uint8_t *ps = (const uint8_t *)t->bytes + t->off[prev];
            int32_t pl = (int32_t)(t->off[prev + 1] - t->off[prev]);
            while (lcp < pl && lcp < len && ps[lcp] == s[lcp]) lcp++;
        }
        while (depth > lcp) t->nodes[path[--depth]].skip = n_nodes;
        while (depth < len) {
            if (rl_grow((void **)&t->nodes, &cap, (size_t)n_nodes + 1, sizeof *t->nodes))
                goto nomem;
            t->nodes[n_nodes] = (rl_trie_node){
                .skip = -1, .tok_first = -1, .depth = (uint16_t)(depth + 1), .byte = s[depth]};
            path[depth++] = n_nodes++;
        }
        rl_trie_node *nd = &t->nodes[path[len - 1]];
        if (nd->n_tok == 255) {
            t->kind[id] = RL_VOCAB_EXCLUDE; /* absurd duplication */
        } else {
            if (!nd->n_tok) nd->tok_first = n_tok;
            nd->n_tok++;
            t->tok_ids[n_tok++] = id;
        }
        prev = id;
        if (len > t->max_depth) t->max_depth = len;
    }
    while (depth > 0) t->nodes[path[--depth]].skip = n_nodes;
    t->n_nodes = n_nodes;
    rl_free(order);
    rl_free(path);
    return t;
nomem:
    rl_err_set(err, RL_ERR_NOMEM, "vocab trie: out of memory");
fail:
    rl_free(order);
    rl_free(path);
    rl_vocab_trie_free(t);
    return NULL;
}

rl_vocab_trie *rl_vocab_trie_from_tokenizer(const rl_tokenizer *tok, rl_err *err) {
    rl_err_clear(err);
    int32_t n = tok ? rl_tokenizer_n_vocab(tok) : 0;
    if (n <= 0) {
        rl_err_set(err, RL_ERR_INVALID, "vocab trie: empty tokenizer");
        return NULL;
    }
    const char **pieces = rl_malloc(sizeof(char *) * (size_t)n);
    size_t *lens = rl_malloc(sizeof(size_t) * (size_t)n);
    uint8_t *kinds = rl_malloc((size_t)n);
    rl_vocab_trie *t = NULL;
    if (!pieces || !lens || !kinds) {
        rl_err_set(err, RL_ERR_NOMEM, "vocab trie: out of memory");
        goto out;
    }
    for (int32_t i = 0; i < n; i++) {
        pieces[i] = rl_tokenizer_piece(tok, i, &lens[i]);
        rl_token_type ty = rl_tokenizer_token_type(tok, i);
        if (rl_tokenizer_is_eog(tok, i))
            kinds[i] = RL_VOCAB_EOG;
        else if (ty == RL_TOKEN_CONTROL || ty == RL_TOKEN_UNKNOWN || ty == RL_TOKEN_UNUSED)
            kinds[i] = RL_VOCAB_EXCLUDE;
        else
            kinds[i] = RL_VOCAB_NORMAL;
    }
    t = rl_vocab_trie_build(n, pieces, lens, kinds, err);
out:
    rl_free(pieces);
    rl_free(lens);
    rl_free(kinds);
    return t;
}

int32_t rl_vocab_trie_n_vocab(const rl_vocab_trie *t) {
    return t ? t->n_vocab : 0;
}
int32_t rl_vocab_trie_n_nodes(const rl_vocab_trie *t) {
    return t ? t->n_nodes : 0;
}

static void mark(const rl_vocab_trie *t, const rl_trie_node *nd, uint64_t *bits) {
    for (int32_t k = 0; k < nd->n_tok; k++) {
        int32_t id = t->tok_ids[nd->tok_first + k];
        bits[id >> 6] |= 1ull << (id & 63);
    }
}

/* Subtree i under a parent state given as a blob, without interning (the
 * caches are at their hard caps).  Bounded by the subtree size. */
static bool walk_slow(rl_gctx *c, const int32_t *pblob, int32_t i, uint64_t *bits) {
    const rl_vocab_trie *t = c->t;
    const rl_trie_node *nd = &t->nodes[i];
    size_t len;
    if (!rl__gctx_advance_raw(c, pblob, nd->byte, &len)) return false;
    if (c->cand[0] == 0) return true;
    int32_t *mine = rl_malloc(sizeof(int32_t) * len);
    if (!mine) return false;
    memcpy(mine, c->cand, sizeof(int32_t) * len);
    mark(t, nd, bits);
    bool ok = true;
    for (int32_t j = i + 1; ok && j < nd->skip; j = t->nodes[j].skip)
        ok = walk_slow(c, mine, j, bits);
    rl_free(mine);
    return ok;
}

bool rl__trie_walk(rl_gctx *c, int32_t s0, uint64_t *bits) {
    const rl_vocab_trie *t = c->t;
    memset(bits, 0, sizeof(uint64_t) * (size_t)c->n_words);
    int32_t sd[RL_TRIE_MAX_PIECE + 1];
    sd[0] = s0;
    const rl_trie_node *N = t->nodes;
    const int32_t n = t->n_nodes;
    for (int32_t i = 0; i < n;) {
        const rl_trie_node *nd = &N[i];
        int32_t nx = rl__gctx_step(c, sd[nd->depth - 1], nd->byte);
        if (nx < 0) {
            if (nx == RL_GT_OVERFLOW) {
                const rl_gstate *P = &c->st[sd[nd->depth - 1]];
                int32_t *pb = rl_malloc(sizeof(int32_t) * P->blob_len);
                if (!pb) return false;
                memcpy(pb, c->blobs + P->blob_off, sizeof(int32_t) * P->blob_len);
                bool ok = walk_slow(c, pb, i, bits);
                rl_free(pb);
                if (!ok) return false;
            } else if (nx != RL_GT_DEAD)
                return false;
            i = nd->skip;
            continue;
        }
        sd[nd->depth] = nx;
        if (nd->n_tok) mark(t, nd, bits);
        i++;
    }
    if (c->st[s0].accepting)
        for (int32_t k = 0; k < t->n_eog; k++) bits[t->eog[k] >> 6] |= 1ull << (t->eog[k] & 63);
    return true;
}
