/* Byte-level BPE (GPT-2 family): pre-tokenizer regex split, then BPE merges
 * by rank over the byte-level symbols of each piece ("word").
 *
 * Pre-tokenizers, as the Hugging Face tokenizer.json of each family:
 *   gpt2 / default  ByteLevel regex (GPT-2 pattern)
 *   smollm          Digits(individual_digits) then the GPT-2 pattern
 *   llama-bpe       the llama-3 pattern (\p{N}{1,3})
 *   qwen2           the llama-3 pattern with single digits (\p{N})
 * A stage splits each piece of the previous stage into its matches and the
 * gaps between them ("Isolated"), so lookaheads such as \s+(?!\S) see the
 * piece's end exactly as HF does.  Invalid UTF-8 bytes never reach PCRE2:
 * each one is its own word.
 *
 * BPE: symbols start as the tokens of single byte-level chars; a min-heap
 * of (rank, position) candidate pairs merges the lowest-rank pair, leftmost
 * first; stale heap entries are detected by re-checking both symbols' ids.
 * Words up to RL__CACHE_MAX_WORD bytes are cached (direct mapped, locked).
 * A byte whose byte-level char is not in the vocabulary is dropped (no unk,
 * as HF's BPE without unk_token) and no pair merges across it.
 */
#include <string.h>

#include "base/buf.h"
#include "base/hash.h"
#include "base/heap.h"
#include "tokenizer/tokenizer-impl.h"

/* \s as Unicode White_Space (what HF's Oniguruma uses), spelled out so that
 * PCRE2's wider \s (it adds U+180E) does not leak in. */
#define WS "\\t-\\r\\x20\\x85\\xA0\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"

static const char RE_GPT2[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" WS
                              "\\p{L}\\p{N}]+|[" WS "]+(?![^" WS "])|[" WS "]+";
static const char RE_DIGIT[] = "\\p{N}";
static const char RE_LLAMA3[] = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^" WS
                                "\\p{L}\\p{N}]+[\\r\\n]*|[" WS "]*[\\r\\n]+|[" WS "]+(?![^" WS "])|[" WS
                                "]+";
static const char RE_QWEN2[] = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^" WS
                               "\\p{L}\\p{N}]+[\\r\\n]*|[" WS "]*[\\r\\n]+|[" WS "]+(?![^" WS "])|[" WS
                               "]+";

static void *pcre_alloc(size_t n, void *ud) {
    (void)ud;
    return rl_malloc(n);
}
static void pcre_free(void *p, void *ud) {
    (void)ud;
    rl_free(p);
}

static rl_status add_stage(rl_tokenizer *tok, const char *pat, rl_err *err) {
    int ec;
    PCRE2_SIZE eo;
    pcre2_compile_context *cc = pcre2_compile_context_create(tok->pcre_gctx);
    if (!cc) return rl_err_set(err, RL_ERR_NOMEM, "pre-tokenizer: out of memory");
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED,
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &ec, &eo, cc);
    pcre2_compile_context_free(cc);
    if (!re) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(ec, msg, sizeof msg);
        return rl_err_set(err, RL_ERR_INVALID, "pre-tokenizer regex at %zu: %s", (size_t)eo,
                          (const char *)msg);
    }
    (void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* falls back to the interpreter */
    tok->re[tok->n_re++] = re;
    return RL_OK;
}

rl_status rl__bpe_setup(rl_tokenizer *tok, rl_err *err) {
    for (int b = 0; b < 256; b++) {
        char u[4];
        size_t l = rl_utf8_encode(rl__byte_to_cp((uint8_t)b), u);
        /* some vocabularies (SmolLM2) lack a few bytes; HF drops them */
        tok->byte_id[b] = rl__vocab_find(tok, u, l);
    }
    tok->pcre_gctx = pcre2_general_context_create(pcre_alloc, pcre_free, NULL);
    if (!tok->pcre_gctx) return rl_err_set(err, RL_ERR_NOMEM, "pre-tokenizer: out of memory");
    const char *pre = tok->pre;
    rl_status st;
    if (!strcmp(pre, "smollm")) {
        if ((st = add_stage(tok, RE_DIGIT, err))) return st;
        return add_stage(tok, RE_GPT2, err);
    }
    static const char *const qwen2[] = {"qwen2", "deepseek-r1-qwen", "megrez"};
    static const char *const llama3[] = {"llama-bpe", "llama3", "llama-v3", "smaug-bpe", "falcon3", "dbrx"};
    for (size_t i = 0; i < sizeof qwen2 / sizeof qwen2[0]; i++)
        if (!strcmp(pre, qwen2[i])) return add_stage(tok, RE_QWEN2, err);
    for (size_t i = 0; i < sizeof llama3 / sizeof llama3[0]; i++)
        if (!strcmp(pre, llama3[i])) return add_stage(tok, RE_LLAMA3, err);
    if (pre[0] && strcmp(pre, "default") && strcmp(pre, "gpt2") && strcmp(pre, "gpt-2"))
        rl_log(RL_LOG_WARN, "tokenizer: unknown pre-tokenizer '%s', using the GPT-2 split", pre);
    return add_stage(tok, RE_GPT2, err);
}

/* ---- BPE over one word ---- */

typedef struct sym {
    int32_t id;
    int32_t prev, next; /* -1 at the ends */
} sym;

typedef struct cand {
    uint32_t rank;
    int32_t pos;
    int32_t left, right; /* ids the pair had when pushed */
    int32_t merged;
} cand;

typedef struct bpe_ctx {
    const rl_tokenizer *tok;
    pcre2_match_data *md;
    sym *syms;
    size_t syms_cap;
    rl_heap heap; /* of cand, least = next merge */
    rl__ids *out;
} bpe_ctx;

/* Lowest rank first, then leftmost: a total order on live candidates. */
static bool cand_less(const void *pa, const void *pb) {
    const cand *a = pa, *b = pb;
    return a->rank < b->rank || (a->rank == b->rank && a->pos < b->pos);
}

static rl_status try_pair(bpe_ctx *c, int32_t pos) {
    if (pos < 0) return RL_OK;
    int32_t nx = c->syms[pos].next;
    if (nx < 0 || c->syms[pos].id < 0 || c->syms[nx].id < 0) return RL_OK;
    const rl__merge_slot *m = rl__merge_find(c->tok, c->syms[pos].id, c->syms[nx].id);
    if (!m) return RL_OK;
    cand x = {m->rank, pos, c->syms[pos].id, c->syms[nx].id, m->id};
    return rl_heap_push(&c->heap, &x) ? RL_ERR_NOMEM : RL_OK;
}

static rl_status bpe_word_uncached(bpe_ctx *c, const uint8_t *w, size_t n) {
    if (rl_grow((void **)&c->syms, &c->syms_cap, n, sizeof *c->syms)) return RL_ERR_NOMEM;
    for (size_t i = 0; i < n; i++) {
        c->syms[i].id = c->tok->byte_id[w[i]];
        c->syms[i].prev = (int32_t)i - 1;
        c->syms[i].next = i + 1 < n ? (int32_t)i + 1 : -1;
    }
    rl_heap_clear(&c->heap);
    rl_status st;
    for (size_t i = 0; i + 1 < n; i++)
        if ((st = try_pair(c, (int32_t)i))) return st;
    cand x;
    while (rl_heap_pop(&c->heap, &x)) {
        sym *a = &c->syms[x.pos];
        if (a->id != x.left || a->next < 0) continue;
        sym *b = &c->syms[a->next];
        if (b->id != x.right) continue;
        a->id = x.merged;
        a->next = b->next;
        if (b->next >= 0) c->syms[b->next].prev = x.pos;
        b->id = -1;
        if ((st = try_pair(c, a->prev)) || (st = try_pair(c, x.pos))) return st;
    }
    for (int32_t i = 0; i >= 0; i = c->syms[i].next)
        if (c->syms[i].id >= 0 && (st = rl__ids_push(c->out, c->syms[i].id))) return st;
    return RL_OK;
}

static rl_status bpe_word(bpe_ctx *c, const uint8_t *w, size_t n) {
    if (n == 0) return RL_OK;
    if (n == 1) return c->tok->byte_id[w[0]] < 0 ? RL_OK : rl__ids_push(c->out, c->tok->byte_id[w[0]]);
    rl_tokenizer *tok = (rl_tokenizer *)c->tok; /* the cache is the one mutable part */
    uint64_t h = 0;
    uint32_t slot = 0;
    if (n <= RL__CACHE_MAX_WORD) {
        h = rl_hash_bytes(w, n);
        slot = (uint32_t)(h >> 40) & (RL__CACHE_SLOTS - 1);
        pthread_mutex_lock(&tok->cache_mu);
        rl__cache_ent *e = tok->cache[slot];
        if (e && e->hash == h && e->n_bytes == n &&
            memcmp((const char *)(e->ids + e->n_ids), w, n) == 0) {
            rl_status st = RL_OK;
            for (uint32_t i = 0; i < e->n_ids && !st; i++) st = rl__ids_push(c->out, e->ids[i]);
            pthread_mutex_unlock(&tok->cache_mu);
            return st;
        }
        pthread_mutex_unlock(&tok->cache_mu);
    }
    size_t start = c->out->n;
    rl_status st = bpe_word_uncached(c, w, n);
    if (st || n > RL__CACHE_MAX_WORD) return st;
    size_t k = c->out->n - start;
    rl__cache_ent *e = rl_malloc(sizeof *e + k * sizeof(int32_t) + n);
    if (!e) return RL_OK; /* caching is optional */
    e->hash = h;
    e->n_bytes = (uint32_t)n;
    e->n_ids = (uint32_t)k;
    if (k) memcpy(e->ids, c->out->v + start, k * sizeof(int32_t)); /* k = 0: bytes the vocab lacks */
    memcpy((char *)(e->ids + k), w, n);
    pthread_mutex_lock(&tok->cache_mu);
    rl__cache_ent *old = tok->cache[slot];
    tok->cache[slot] = e;
    pthread_mutex_unlock(&tok->cache_mu);
    rl_free(old);
    return RL_OK;
}

/* Splits s[b..e) with stage `stage` and recurses; the last stage's pieces
 * are BPE words. */
static rl_status split(bpe_ctx *c, int stage, const uint8_t *s, size_t b, size_t e, rl_err *err) {
    if (stage == c->tok->n_re) return bpe_word(c, s + b, e - b);
    const pcre2_code *re = c->tok->re[stage];
    size_t pos = b;
    rl_status st;
    while (pos < e) {
        int rc = pcre2_match(re, (PCRE2_SPTR)(s + b), e - b, pos - b, PCRE2_NO_UTF_CHECK, c->md, NULL);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc == PCRE2_ERROR_NOMEMORY) return rl_err_set(err, RL_ERR_NOMEM, "encode: out of memory");
        if (rc < 0) {
            PCRE2_UCHAR msg[160];
            pcre2_get_error_message(rc, msg, sizeof msg);
            return rl_err_set(err, RL_ERR_LIMIT, "pre-tokenizer: %s", (const char *)msg);
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(c->md);
        size_t ms = b + ov[0], me = b + ov[1];
        if (me == ms) { /* empty match: step one character */
            size_t l = rl_utf8_valid_len(s + me, e - me);
            me += l ? l : 1;
            if (ms > pos && (st = split(c, stage + 1, s, pos, ms, err))) return st;
            if ((st = split(c, stage + 1, s, ms, me, err))) return st;
            pos = me;
            continue;
        }
        if (ms > pos && (st = split(c, stage + 1, s, pos, ms, err))) return st;
        if ((st = split(c, stage + 1, s, ms, me, err))) return st;
        pos = me;
    }
    if (pos < e) return split(c, stage + 1, s, pos, e, err);
    return RL_OK;
}

rl_status rl__bpe_encode(const rl_tokenizer *tok, const uint8_t *s, size_t n, rl__ids *out,
                         rl_err *err) {
    bpe_ctx c = {.tok = tok, .out = out};
    rl_heap_init(&c.heap, sizeof(cand), cand_less);
    c.md = pcre2_match_data_create(1, tok->pcre_gctx);
    if (!c.md) return rl_err_set(err, RL_ERR_NOMEM, "encode: out of memory");
    rl_status st = RL_OK;
    size_t i = 0;
    while (i < n && !st) {
        /* longest valid UTF-8 run from i */
        size_t j = i;
        while (j < n) {
            if (s[j] < 0x80) {
                j++;
                continue;
            }
            size_t l = rl_utf8_valid_len(s + j, n - j);
            if (!l) break;
            j += l;
        }
        if (j > i) st = split(&c, 0, s, i, j, err);
        if (!st && j < n) st = bpe_word(&c, s + j, 1); /* an invalid byte */
        i = j + (j < n);
    }
    if (st == RL_ERR_NOMEM) rl_err_set(err, st, "encode: out of memory");
    pcre2_match_data_free(c.md);
    rl_free(c.syms);
    rl_heap_free(&c.heap);
    return st;
}
