/* BERT WordPiece (tokenizer.ggml.model = "bert"): the basic tokenizer of
 * Hugging Face's BertNormalizer + BertPreTokenizer, then greedy
 * longest-match-first WordPiece.
 *
 * Basic tokenizer, per code point of the text (tables in wpm_tables.c):
 *   - controls, U+0000, U+FFFD and nonspacing marks are removed (invalid
 *     UTF-8 bytes count as U+FFFD);
 *   - whitespace ends the current word;
 *   - a CJK ideograph is a word of its own;
 *   - anything else is replaced by its NFD decomposition without
 *     nonspacing marks, lowercased ("Ä" -> "a", Hangul syllables -> jamo);
 *     each resulting punctuation character (ASCII punctuation or Unicode
 *     P*) is a word of its own, the rest extend the current word.
 * WordPiece, per word: a word of more than RL__WPM_MAX_CHARS characters is
 * [UNK]; otherwise from the start, the longest prefix that is a token
 * (U+2581 + text at the word's start, the bare text after it: the
 * converter's spelling of "x" and "##x") is taken, and so on; if some
 * position has no token the whole word is one [UNK].
 *
 * Cost: a binary search per code point, and per word position at most
 * max_token_len lookups: linear in the text for a fixed vocabulary.
 */
#include <string.h>

#include "base/buf.h"
#include "tokenizer/tokenizer-impl.h"

#define RL__WPM_MAX_CHARS 100 /* HF WordPiece max_input_chars_per_word */
#define HANGUL_FIRST      0xAC00u
#define HANGUL_LAST       0xD7A3u

static const char SPM_SPACE[] = "\xE2\x96\x81"; /* U+2581 */

/* The row of sorted table t (n rows of w words; a row covers the code
 * points row[0]..row[last], last = 0 for a single key) that holds cp, or
 * NULL. */
static const uint32_t *find_row(const uint32_t *t, size_t n, size_t w, size_t last, uint32_t cp) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const uint32_t *r = t + mid * w;
        if (cp < r[0])
            hi = mid;
        else if (cp > r[last])
            lo = mid + 1;
        else
            return r;
    }
    return NULL;
}

static int class_of(uint32_t cp) {
    const uint32_t *r = find_row(&rl__wpm_class[0][0], rl__wpm_class_n, 3, 1, cp);
    return r ? (int)r[2] : RL__WPM_WORD;
}

static bool is_punct(uint32_t cp) {
    return find_row(&rl__wpm_punct[0][0], rl__wpm_punct_n, 2, 1, cp) != NULL;
}

/* Normalized form of cp (not DROP or SPACE) into out[0..3); returns its
 * length (1..3). */
static size_t normalize(uint32_t cp, uint32_t out[3]) {
    if (cp >= HANGUL_FIRST && cp <= HANGUL_LAST) {
        uint32_t s = cp - HANGUL_FIRST;
        out[0] = 0x1100 + s / 588;
        out[1] = 0x1161 + (s % 588) / 28;
        if (s % 28 == 0) return 2;
        out[2] = 0x11A7 + s % 28;
        return 3;
    }
    const uint32_t *r = find_row(&rl__wpm_map[0][0], rl__wpm_map_n, 2, 0, cp);
    if (!r) {
        out[0] = cp;
        return 1;
    }
    if (!(r[1] & RL__WPM_MULTI)) {
        out[0] = r[1];
        return 1;
    }
    const uint32_t *m = rl__wpm_multi + (r[1] & ~RL__WPM_MULTI);
    size_t k = m[0] < 3 ? m[0] : 3;
    memcpy(out, m + 1, k * sizeof *out);
    return k;
}

typedef struct wpm_ctx {
    const rl_tokenizer *tok;
    rl__ids *out;
    rl_buf word;    /* U+2581 then the word's UTF-8 */
    size_t n_chars; /* code points of the word */
} wpm_ctx;

/* WordPiece of the current word; empties it. */
static rl_status flush_word(wpm_ctx *c) {
    const rl_tokenizer *tok = c->tok;
    const size_t pre = sizeof SPM_SPACE - 1;
    size_t n = c->word.n;
    if (n <= pre) return RL_OK;
    const char *w = c->word.p;
    size_t mark = c->out->n;
    rl_status st = RL_OK;
    bool unk = c->n_chars > RL__WPM_MAX_CHARS;
    for (size_t i = pre; i < n && !unk;) {
        /* the key starts at the U+2581 for the word's first piece */
        size_t from = i == pre ? 0 : i;
        size_t end = n - from > tok->max_token_len ? from + tok->max_token_len : n;
        int32_t id = -1;
        for (; end > i; end--) {
            if (end < n && ((uint8_t)w[end] & 0xC0) == 0x80) continue; /* inside a character */
            /* a continuation is never a word-initial piece (text with U+2581) */
            if (from && end - from >= pre && !memcmp(w + from, SPM_SPACE, pre)) continue;
            if ((id = rl__vocab_find(tok, w + from, end - from)) >= 0) break;
        }
        if (id < 0) {
            unk = true;
            break;
        }
        if ((st = rl__ids_push(c->out, id))) return st;
        i = end;
    }
    if (unk) {
        c->out->n = mark;
        if ((st = rl__ids_push(c->out, tok->unk))) return st;
    }
    c->word.n = pre; /* keep the U+2581 */
    c->word.p[pre] = 0;
    c->n_chars = 0;
    return RL_OK;
}

static rl_status append_cp(wpm_ctx *c, uint32_t cp) {
    char u[4];
    c->n_chars++;
    return rl_buf_append(&c->word, u, rl_utf8_encode(cp, u));
}

rl_status rl__wpm_encode(const rl_tokenizer *tok, const uint8_t *s, size_t n, rl__ids *out,
                         rl_err *err) {
    wpm_ctx c = {.tok = tok, .out = out};
    rl_status st = rl_buf_append(&c.word, SPM_SPACE, sizeof SPM_SPACE - 1);
    for (size_t i = 0; i < n && !st;) {
        uint32_t cp;
        size_t l = rl_utf8_decode(s + i, n - i, &cp);
        if (!l) { /* an invalid byte: U+FFFD, which is removed */
            i++;
            continue;
        }
        i += l;
        int cls = class_of(cp);
        if (cls == RL__WPM_DROP) continue;
        if (cls == RL__WPM_SPACE) {
            st = flush_word(&c);
            continue;
        }
        uint32_t norm[3];
        size_t k = normalize(cp, norm);
        if (cls == RL__WPM_CJK) {
            if ((st = flush_word(&c))) break;
            for (size_t j = 0; j < k && !st; j++) st = append_cp(&c, norm[j]);
            if (!st) st = flush_word(&c);
            continue;
        }
        for (size_t j = 0; j < k && !st; j++) {
            if (!is_punct(norm[j])) {
                st = append_cp(&c, norm[j]);
                continue;
            }
            if (!(st = flush_word(&c)) && !(st = append_cp(&c, norm[j]))) st = flush_word(&c);
        }
    }
    if (!st) st = flush_word(&c);
    rl_buf_free(&c.word);
    if (st)
        return rl_err_set(err, st,
                          st == RL_ERR_NOMEM ? "encode: out of memory" : "encode: word too long");
    return RL_OK;
}
