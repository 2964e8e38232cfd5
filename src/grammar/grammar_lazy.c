/* Lazy grammars (grammar.h, rl_grammar_compile_lazy): a compiled grammar
 * plus the trigger words and tokens that switch it on.  The matcher side
 * (waiting, the byte tail it searches, activation) is in grammar_match.c;
 * this file owns the trigger table and its search.
 *
 * Invariant: a lazy grammar's words are 1..RL_GRAMMAR_MAX_TRIGGER_LEN
 * bytes without NUL, max_word is the longest, and the table is immutable
 * after compilation like the rest of the grammar. */
#include <string.h>

#include "grammar/grammar-impl.h"

rl_grammar *rl_grammar_compile_lazy(const char *text, size_t len, const char *const *words,
                                    int32_t n_words, const int32_t *tokens, int32_t n_tokens,
                                    rl_err *err) {
    if (n_words < 0 || n_tokens < 0 || n_words > RL_GRAMMAR_MAX_TRIGGERS ||
        n_tokens > RL_GRAMMAR_MAX_TRIGGERS || n_words + n_tokens == 0 || (n_words && !words) ||
        (n_tokens && !tokens)) {
        rl_err_set(err, RL_ERR_INVALID,
                   "grammar: a lazy grammar needs 1..%d trigger words and/or tokens",
                   RL_GRAMMAR_MAX_TRIGGERS);
        return NULL;
    }
    rl_glazy *lz = rl_calloc(1, sizeof *lz);
    if (!lz) {
        rl_err_set(err, RL_ERR_NOMEM, "grammar: out of memory");
        return NULL;
    }
    for (int32_t i = 0; i < n_words; i++) {
        const char *wd = words[i];
        bool anch = wd && wd[0] == '^';
        if (anch) wd++;
        size_t wl = wd ? strlen(wd) : 0;
        if (wl == 0 || wl > RL_GRAMMAR_MAX_TRIGGER_LEN - 1) {
            rl_free(lz);
            rl_err_set(err, RL_ERR_INVALID, "grammar: trigger word %d must be 1..%d bytes", (int)i,
                       RL_GRAMMAR_MAX_TRIGGER_LEN - 1);
            return NULL;
        }
        memcpy(lz->words[i], wd, wl);
        lz->word_len[i] = (uint16_t)wl;
        lz->anchored[i] = anch;
        if ((int32_t)wl > lz->max_word) lz->max_word = (int32_t)wl;
    }
    for (int32_t i = 0; i < n_tokens; i++) {
        if (tokens[i] < 0) {
            rl_free(lz);
            rl_err_set(err, RL_ERR_INVALID, "grammar: trigger token %d is negative",
                       (int)tokens[i]);
            return NULL;
        }
        lz->tokens[i] = tokens[i];
    }
    lz->n_words = n_words;
    lz->n_tokens = n_tokens;
    rl_grammar *g = rl_grammar_compile(text, len, err);
    if (!g) {
        rl_free(lz);
        return NULL;
    }
    g->lazy = lz;
    return g;
}

bool rl_grammar_is_lazy(const rl_grammar *g) {
    return g && g->lazy;
}

int64_t rl__glazy_find(const rl_glazy *lz, const char *p, size_t n, size_t from, size_t min_start,
                       int64_t anchor_max) {
    int64_t best = -1;
    for (int32_t i = 0; i < lz->n_words; i++) {
        size_t wl = lz->word_len[i];
        if (wl > n || (lz->anchored[i] && anchor_max < 0)) continue;
        /* an occurrence ending at or after `from` starts at or after from - wl + 1 */
        size_t s = from + 1 > wl ? from + 1 - wl : 0;
        if (s < min_start) s = min_start;
        if (s >= n) continue;
        /* an anchored word: only starts up to anchor_max */
        size_t e = lz->anchored[i] && (size_t)anchor_max + wl < n ? (size_t)anchor_max + wl : n;
        if (e < s + wl) continue;
        const char *hit = memmem(p + s, e - s, lz->words[i], wl);
        if (hit && (best < 0 || hit - p < best)) best = hit - p;
    }
    return best;
}

static bool rl__is_space(unsigned char b) {
    return b == ' ' || b == '\t' || b == '\n' || b == '\r';
}

/* 0 whitespace, 1-3 backticks seen, 4 in the fence's language word, 5
 * whitespace after the fence opener, RL__GPRE_BROKEN anything else */
uint8_t rl__glazy_pre_step(uint8_t st, unsigned char b) {
    switch (st) {
    case 0:
        return rl__is_space(b) ? 0 : b == '`' ? 1 : RL__GPRE_BROKEN;
    case 1:
    case 2:
        return b == '`' ? (uint8_t)(st + 1) : RL__GPRE_BROKEN;
    case 3:
    case 4:
        if (rl__is_space(b)) return 5;
        return (b >= 'a' && b <= 'z') || (b >= 'A' && b <= 'Z') || (b >= '0' && b <= '9') ||
                       b == '_' || b == '-' || b == '+'
                   ? 4
                   : RL__GPRE_BROKEN;
    case 5:
        return rl__is_space(b) ? 5 : RL__GPRE_BROKEN;
    default:
        return RL__GPRE_BROKEN;
    }
}

bool rl__glazy_is_token(const rl_glazy *lz, int32_t id) {
    for (int32_t i = 0; i < lz->n_tokens; i++)
        if (lz->tokens[i] == id) return true;
    return false;
}
