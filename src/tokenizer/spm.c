/* SentencePiece-style BPE with scores (the "llama" tokenizer model: Llama 2,
 * Gemma).  Spaces become U+2581 (plus one leading U+2581 when the model adds
 * a space prefix); the text starts as one symbol per UTF-8 character; the
 * adjacent pair whose concatenation is a vocabulary token with the highest
 * score merges first (leftmost on ties), until no pair is a token.  Gemma
 * files rank by file position instead of score (their user-defined space
 * runs carry score -1000 but merge early), as HF's GGUF converter does; ties
 * follow HF's derived merge order (see struct bigram).  A final
 * symbol that is not a token is emitted as its bytes' <0xXX> tokens (byte
 * fallback), or as unk when the model lacks a byte token (consecutive unks
 * fuse into one, as HF's fuse_unk).
 */
#include <string.h>

#include "base/heap.h"
#include "tokenizer/tokenizer-impl.h"

typedef struct ssym {
    uint32_t start, len; /* bytes of the normalized text */
    uint32_t nch;        /* characters, for HF's tie-break on piece lengths */
    int32_t id;          /* token of this symbol, -1 if not in the vocabulary */
    int32_t prev, next;
} ssym;

/* A candidate merge.  Order (best first), as HF's merges derived from a
 * SentencePiece vocabulary: merged token priority (score, or file position
 * for Gemma), then longer left piece, longer right piece, lower merged id;
 * among equal pairs the leftmost. */
typedef struct bigram {
    double prio;
    uint32_t nl, nr;
    int32_t id;
    int32_t left;
    int32_t lid, rid; /* ids of the pair when pushed, to detect stale entries */
} bigram;

typedef struct spm_ctx {
    const rl_tokenizer *tok;
    const char *t; /* normalized text */
    ssym *syms;
    rl_heap heap; /* of bigram, least = best merge */
} spm_ctx;

/* The order above; "less" is "merges first". */
static bool big_before(const void *pa, const void *pb) {
    const bigram *a = pa, *b = pb;
    if (a->prio != b->prio) return a->prio > b->prio;
    if (a->nl != b->nl) return a->nl > b->nl;
    if (a->nr != b->nr) return a->nr > b->nr;
    if (a->id != b->id) return a->id < b->id;
    return a->left < b->left;
}

static rl_status try_big(spm_ctx *c, int32_t left) {
    if (left < 0 || c->syms[left].next < 0) return RL_OK;
    const ssym *a = &c->syms[left], *b = &c->syms[a->next];
    if (a->id < 0 || b->id < 0) return RL_OK; /* only tokens merge */
    int32_t id = rl__vocab_find(c->tok, c->t + a->start, a->len + b->len);
    if (id < 0) return RL_OK;
    double prio = c->tok->spm_by_position ? -(double)id : (double)c->tok->scores[id];
    bigram x = {prio, a->nch, b->nch, id, left, a->id, b->id};
    return rl_heap_push(&c->heap, &x) ? RL_ERR_NOMEM : RL_OK;
}

rl_status rl__spm_encode(const rl_tokenizer *tok, const uint8_t *s, size_t n, bool prefix_space,
                         rl__ids *out, rl_err *err) {
    if (n == 0 && !prefix_space) return RL_OK;
    size_t nn;
    if (!rl_mul_size(n, 3, &nn) || !rl_add_size(nn, 3, &nn) || nn > 0xFFFFFFF0u)
        return rl_err_set(err, RL_ERR_LIMIT, "encode: text of %zu bytes is too long", n);
    spm_ctx c = {.tok = tok};
    rl_heap_init(&c.heap, sizeof(bigram), big_before);
    char *t = rl_malloc(nn);
    ssym *syms = rl_malloc(nn * sizeof *syms);
    rl_status st = RL_OK;
    if (!t || !syms) {
        st = rl_err_set(err, RL_ERR_NOMEM, "encode: out of memory");
        goto done;
    }
    size_t w = 0;
    if (prefix_space) {
        memcpy(t, "\xE2\x96\x81", 3);
        w = 3;
    }
    for (size_t i = 0; i < n; i++) {
        if (s[i] == ' ') {
            memcpy(t + w, "\xE2\x96\x81", 3);
            w += 3;
        } else {
            t[w++] = (char)s[i];
        }
    }
    c.t = t;
    c.syms = syms;
    size_t ns = 0;
    for (size_t i = 0; i < w;) {
        size_t l = rl_utf8_valid_len((const uint8_t *)t + i, w - i);
        if (!l) l = 1;
        syms[ns].start = (uint32_t)i;
        syms[ns].len = (uint32_t)l;
        syms[ns].nch = 1;
        syms[ns].id = rl__vocab_find(tok, t + i, l);
        syms[ns].prev = (int32_t)ns - 1;
        syms[ns].next = -1;
        if (ns) syms[ns - 1].next = (int32_t)ns;
        ns++;
        i += l;
    }
    for (size_t i = 0; i + 1 < ns; i++)
        if ((st = try_big(&c, (int32_t)i))) goto nomem;
    bigram x;
    while (rl_heap_pop(&c.heap, &x)) {
        ssym *a = &syms[x.left];
        if (a->id != x.lid || a->next < 0) continue;
        ssym *b = &syms[a->next];
        if (b->id != x.rid) continue;
        a->len += b->len;
        a->nch += b->nch;
        a->id = x.id;
        a->next = b->next;
        if (b->next >= 0) syms[b->next].prev = x.left;
        b->len = 0;
        b->id = -1;
        if ((st = try_big(&c, a->prev)) || (st = try_big(&c, x.left))) goto nomem;
    }
    bool prev_unk = false; /* consecutive unknowns fuse into one unk (HF fuse_unk) */
    for (int32_t i = ns ? 0 : -1; i >= 0; i = syms[i].next) {
        int32_t id = syms[i].id;
        if (id >= 0) {
            if ((st = rl__ids_push(out, id))) goto nomem;
            prev_unk = false;
            continue;
        }
        for (uint32_t k = 0; k < syms[i].len; k++) {
            uint8_t byte = (uint8_t)t[syms[i].start + k];
            int32_t bid = tok->byte_id[byte];
            if (bid >= 0) {
                if ((st = rl__ids_push(out, bid))) goto nomem;
                prev_unk = false;
                continue;
            }
            if (tok->unk < 0) {
                st = rl_err_set(err, RL_ERR_UNSUPPORTED,
                                "encode: byte 0x%02X has no token and the model has no unk token",
                                byte);
                goto done;
            }
            if (!prev_unk && (st = rl__ids_push(out, tok->unk))) goto nomem;
            prev_unk = true;
        }
    }
    goto done;
nomem:
    rl_err_set(err, RL_ERR_NOMEM, "encode: out of memory");
done:
    rl_free(t);
    rl_free(syms);
    rl_heap_free(&c.heap);
    return st;
}
