/* Byte-level BPE (GPT-2 family): pre-tokenizer regex split, then BPE merges
 * by rank over the byte-level symbols of each piece ("word").
 *
 * Pre-tokenizers, as the Hugging Face tokenizer.json of each family (the
 * table PRE_DEFS below):
 *   gpt2, olmo, ..   ByteLevel regex (GPT-2 pattern)
 *   default          (also no tokenizer.ggml.pre) llama.cpp's chain: punctuation
 *                    runs, the GPT-2 pattern, \p{N}+, then [0-9]{3}
 *   smollm, starcoder, refact, command-r
 *                    Digits(individual_digits) then the GPT-2 pattern
 *   llama-bpe        the llama-3 pattern (\p{N}{1,3}); BPE ignore_merges
 *   qwen2            the llama-3 pattern with single digits (\p{N})
 *   falcon           Punctuation(contiguous), the GPT-2 pattern, then on the
 *                    byte-level text Digits and [0-9]{3}
 *   deepseek-llm/-coder  their sequences of Split(Isolated) regexes
 * A stage splits each piece of the previous stage into its matches and the
 * gaps between them ("Isolated"), so lookaheads such as \s+(?!\S) see the
 * piece's end exactly as HF does.  Invalid UTF-8 bytes never reach PCRE2:
 * each one is its own word.  Stages that HF runs after ByteLevel has mapped
 * bytes to characters are matched on raw bytes (PCRE2 without UTF).
 *
 * ignore_merges: a word whose byte-level spelling is a token is that token,
 * even when no merge sequence reaches it (Llama 3's " Việt").
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
#define WS                                                                                         \
    "\\t-\\r\\x20\\x85\\xA0\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{"   \
    "3000}"

/* HF ByteLevel(use_regex = true) */
static const char RE_GPT2[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" WS
                              "\\p{L}\\p{N}]+|[" WS "]+(?![^" WS "])|[" WS "]+";
/* HF Digits(individual_digits = true): Rust's char::is_numeric is \p{N} */
static const char RE_DIGIT[] = "\\p{N}";
static const char RE_LLAMA3[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^" WS
    "\\p{L}\\p{N}]+[\\r\\n]*|[" WS "]*[\\r\\n]+|[" WS "]+(?![^" WS "])|[" WS "]+";
static const char RE_QWEN2[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^" WS
    "\\p{L}\\p{N}]+[\\r\\n]*|[" WS "]*[\\r\\n]+|[" WS "]+(?![^" WS "])|[" WS "]+";
/* HF Punctuation(Contiguous): ASCII punctuation (which includes the symbols
 * $+<=>^`|~) or a Unicode P* character, runs kept together */
static const char RE_PUNCT[] = "[\\p{P}$+<=>^`|~]+";
/* Byte stages (matched on raw bytes, see stage_bytes): after HF's ByteLevel
 * maps each byte to a character, Digits(individual_digits = false) isolates
 * runs of numeric characters; the numeric byte-level characters are '0'-'9'
 * and the bytes that map to themselves as No: B2 B3 B9 (superscripts) and
 * BC BD BE (vulgar fractions).  So a UTF-8 character whose continuation
 * bytes are among these is cut there, as HF cuts it. */
static const char REB_DIGITS[] = "[0-9\\xB2\\xB3\\xB9\\xBC-\\xBE]+";
static const char REB_DIGIT3[] = "[0-9][0-9][0-9]";
static const char RE_NEWLINE[] = "[\\r\\n]";
/* DeepSeek LLM's letter class (the ranges of its tokenizer.json, as code points) */
static const char RE_DSL_LETTERS[] =
    "[" WS "]?[A-Za-z\\x{B5}\\x{C0}-\\x{D6}\\x{D8}-\\x{F6}\\x{F8}-\\x{1BA}\\x{1BC}-\\x{1BF}"
    "\\x{1C4}-\\x{293}\\x{295}-\\x{2AF}\\x{370}-\\x{373}\\x{376}\\x{377}\\x{37B}-\\x{37D}\\x{37F}"
    "\\x{386}\\x{388}-\\x{38A}\\x{38C}\\x{38E}-\\x{3A1}\\x{3A3}-\\x{3F5}\\x{3F7}-\\x{481}"
    "\\x{48A}-\\x{52F}\\x{531}-\\x{556}\\x{10A0}-\\x{10C5}\\x{13A0}-\\x{13F5}\\x{13F8}-\\x{13FD}"
    "\\x{1C90}-\\x{1CBA}\\x{1CBD}-\\x{1CBF}\\x{1D00}-\\x{1D2B}\\x{1D6B}-\\x{1D77}\\x{1D79}-\\x{"
    "1D9A}"
    "\\x{1E00}-\\x{1F15}\\x{1F18}-\\x{1F1D}\\x{1F20}-\\x{1F45}\\x{1F48}-\\x{1F4D}\\x{1F50}-\\x{"
    "1F57}"
    "\\x{1F59}\\x{1F5B}\\x{1F5D}\\x{1F5F}-\\x{1F7D}\\x{1F80}-\\x{1FB4}\\x{1FB6}-\\x{1FBC}\\x{1FBE}"
    "\\x{1FC2}-\\x{1FC4}\\x{1FC6}-\\x{1FCC}\\x{1FD0}-\\x{1FD3}\\x{1FD6}-\\x{1FDB}\\x{1FE0}-\\x{"
    "1FEC}"
    "\\x{1FF2}-\\x{1FF4}\\x{1FF6}-\\x{1FFC}\\x{2102}\\x{2107}\\x{210A}-\\x{2113}\\x{2115}"
    "\\x{2119}-\\x{211D}\\x{2124}\\x{2126}\\x{2128}\\x{212A}-\\x{212D}\\x{212F}-\\x{2134}\\x{2139}"
    "\\x{213C}-\\x{213F}\\x{2145}-\\x{2149}\\x{214E}\\x{2183}\\x{2184}\\x{2C00}-\\x{2C7B}"
    "\\x{2C7E}-\\x{2CE4}\\x{2CEB}-\\x{2CEE}\\x{2CF2}\\x{2CF3}\\x{A640}-\\x{A66D}\\x{A680}-\\x{A69B}"
    "\\x{A722}-\\x{A76F}\\x{A771}-\\x{A787}\\x{A78B}-\\x{A78E}\\x{AB70}-\\x{ABBF}\\x{FB00}-\\x{"
    "FB06}"
    "\\x{FB13}-\\x{FB17}\\x{FF21}-\\x{FF3A}\\x{FF41}-\\x{FF5A}\\x{10400}-\\x{1044F}"
    "\\x{104B0}-\\x{104D3}\\x{104D8}-\\x{104FB}\\x{10C80}-\\x{10CB2}\\x{10CC0}-\\x{10CF2}"
    "\\x{118A0}-\\x{118DF}\\x{1E900}-\\x{1E943}]+";
static const char RE_DSL_PUNCT[] =
    "[" WS
    "]?[!-/:-~\\x{FF01}-\\x{FF0F}\\x{FF1A}-\\x{FF5E}\\x{2018}-\\x{201F}\\x{3000}-\\x{3002}]+";
/* \s+$ of the tokenizer.json; the lookbehind starts a match only at the
 * start of a whitespace run, so a long run not at the end costs linear time */
static const char RE_TRAIL_WS[] = "(?<![" WS "])[" WS "]+\\z";
static const char RE_DS_CJK[] = "[\\x{4E00}-\\x{9FA5}\\x{800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+";
static const char RE_NUMBERS[] = "\\p{N}+";
static const char RE_DSC_LETTERS[] = "[" WS "]?\\p{L}+";
static const char RE_DSC_PUNCT[] = "[" WS "]?\\p{P}+";
static const char RE_DEFAULT_PUNCT[] = "[\\p{P}$+<=>^~|]+";

/* The pre-tokenizers of the families, as the Sequence of Split(Isolated)
 * / Digits / Punctuation / ByteLevel steps of their tokenizer.json; the
 * names are the tokenizer.ggml.pre values llama.cpp gives each family. */
typedef struct pre_def {
    const char *names; /* '|'-separated */
    const char *stages[RL__MAX_PRE_STAGES];
    unsigned byte_stages; /* bit i: stage i matches raw bytes (after ByteLevel) */
    bool ignore_merges;   /* a word that is a token is that token (HF ignore_merges) */
} pre_def;

static const pre_def PRE_DEFS[] = {
    {"smollm|starcoder|refact|command-r|codeshell|exaone|minerva-7b",
     {RE_DIGIT, RE_GPT2},
     0,
     false},
    {"llama-bpe|llama3|llama-v3|falcon3|falcon-h1|pixtral|midm-2.0|lfm2", {RE_LLAMA3}, 0, true},
    {"smaug-bpe|dbrx", {RE_LLAMA3}, 0, false},
    {"qwen2|deepseek-r1-qwen|megrez|stablelm2", {RE_QWEN2}, 0, false},
    {"falcon", {RE_PUNCT, RE_GPT2, REB_DIGITS, REB_DIGIT3}, 4u | 8u, false},
    {"deepseek-llm",
     {RE_NEWLINE, RE_DSL_LETTERS, RE_DSL_PUNCT, RE_TRAIL_WS, RE_DS_CJK, RE_NUMBERS},
     0,
     false},
    {"deepseek-coder", {RE_NEWLINE, RE_DSC_LETTERS, RE_DSC_PUNCT, RE_DS_CJK, RE_DIGIT}, 0, false},
    /* llama.cpp's own chain for "default" and for a file without the key
     * (no tokenizer.json has it): punctuation runs, the GPT-2 pattern,
     * number runs, then groups of 3 ASCII digits */
    {"default", {RE_DEFAULT_PUNCT, RE_GPT2, RE_NUMBERS, REB_DIGIT3}, 0, false},
    {"gpt2|gpt-2|mpt|olmo|jais|phi-2|gigachat|roberta-bpe|exaone4", {RE_GPT2}, 0, false},
};

static void *pcre_alloc(size_t n, void *ud) {
    (void)ud;
    return rl_malloc(n);
}
static void pcre_free(void *p, void *ud) {
    (void)ud;
    rl_free(p);
}

/* Adds a stage; `bytes` compiles it without UTF (it matches raw bytes, so
 * it may follow a stage that cut a UTF-8 character). */
static rl_status add_stage(rl_tokenizer *tok, const char *pat, bool bytes, rl_err *err) {
    int ec;
    PCRE2_SIZE eo;
    pcre2_compile_context *cc = pcre2_compile_context_create(tok->pcre_gctx);
    if (!cc) return rl_err_set(err, RL_ERR_NOMEM, "pre-tokenizer: out of memory");
    uint32_t opts = bytes ? 0 : PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED, opts, &ec, &eo, cc);
    pcre2_compile_context_free(cc);
    if (!re) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(ec, msg, sizeof msg);
        return rl_err_set(err, RL_ERR_INVALID, "pre-tokenizer regex at %zu: %s", (size_t)eo,
                          (const char *)msg);
    }
    (void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* falls back to the interpreter */
    if (bytes) tok->re_bytes |= 1u << tok->n_re;
    tok->re[tok->n_re++] = re;
    return RL_OK;
}

static bool name_in(const char *list, const char *name) {
    size_t n = strlen(name);
    for (const char *p = list;;) {
        const char *bar = strchr(p, '|');
        size_t l = bar ? (size_t)(bar - p) : strlen(p);
        if (l == n && !memcmp(p, name, n)) return true;
        if (!bar) return false;
        p = bar + 1;
    }
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
    size_t n_defs = sizeof PRE_DEFS / sizeof PRE_DEFS[0];
    const pre_def *d = &PRE_DEFS[n_defs - 1]; /* the GPT-2 split */
    size_t k = 0;
    while (k < n_defs && !name_in(PRE_DEFS[k].names, tok->pre[0] ? tok->pre : "default")) k++;
    if (k < n_defs)
        d = &PRE_DEFS[k];
    else if (tok->pre[0])
        rl_log(RL_LOG_WARN, "tokenizer: unknown pre-tokenizer '%s', using the GPT-2 split",
               tok->pre);
    tok->ignore_merges = d->ignore_merges;
    rl_status st;
    for (int i = 0; i < RL__MAX_PRE_STAGES && d->stages[i]; i++)
        if ((st = add_stage(tok, d->stages[i], (d->byte_stages >> i) & 1u, err))) return st;
    return RL_OK;
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
    char *spell; /* byte-level spelling of a word (ignore_merges) */
    size_t spell_cap;
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

/* The token whose byte-level spelling is the whole word w, or -1. */
static int32_t whole_word(bpe_ctx *c, const uint8_t *w, size_t n, rl_status *st) {
    if (rl_grow((void **)&c->spell, &c->spell_cap, 2 * n, 1)) { /* <= 2 UTF-8 bytes a byte */
        *st = RL_ERR_NOMEM;
        return -1;
    }
    size_t l = 0;
    for (size_t i = 0; i < n; i++) l += rl_utf8_encode(rl__byte_to_cp(w[i]), c->spell + l);
    return rl__vocab_find(c->tok, c->spell, l);
}

static rl_status bpe_word_uncached(bpe_ctx *c, const uint8_t *w, size_t n) {
    rl_status st = RL_OK;
    if (c->tok->ignore_merges) {
        int32_t id = whole_word(c, w, n, &st);
        if (st) return st;
        if (id >= 0) return rl__ids_push(c->out, id);
    }
    if (rl_grow((void **)&c->syms, &c->syms_cap, n, sizeof *c->syms)) return RL_ERR_NOMEM;
    for (size_t i = 0; i < n; i++) {
        c->syms[i].id = c->tok->byte_id[w[i]];
        c->syms[i].prev = (int32_t)i - 1;
        c->syms[i].next = i + 1 < n ? (int32_t)i + 1 : -1;
    }
    rl_heap_clear(&c->heap);
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
    if (n == 1)
        return c->tok->byte_id[w[0]] < 0 ? RL_OK : rl__ids_push(c->out, c->tok->byte_id[w[0]]);
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
    if (k)
        memcpy(e->ids, c->out->v + start, k * sizeof(int32_t)); /* k = 0: bytes the vocab lacks */
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
    bool bytes = (c->tok->re_bytes >> stage) & 1u;
    size_t pos = b;
    rl_status st;
    while (pos < e) {
        int rc =
            pcre2_match(re, (PCRE2_SPTR)(s + b), e - b, pos - b, PCRE2_NO_UTF_CHECK, c->md, NULL);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc == PCRE2_ERROR_NOMEMORY)
            return rl_err_set(err, RL_ERR_NOMEM, "encode: out of memory");
        if (rc < 0) {
            PCRE2_UCHAR msg[160];
            pcre2_get_error_message(rc, msg, sizeof msg);
            return rl_err_set(err, RL_ERR_LIMIT, "pre-tokenizer: %s", (const char *)msg);
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(c->md);
        size_t ms = b + ov[0], me = b + ov[1];
        if (me == ms) { /* empty match: step one character */
            size_t l = bytes ? 1 : rl_utf8_valid_len(s + me, e - me);
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
    rl_free(c.spell);
    rl_heap_free(&c.heap);
    return st;
}
