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
        size_t wl = words[i] ? strlen(words[i]) : 0;
        if (wl == 0 || wl > RL_GRAMMAR_MAX_TRIGGER_LEN - 1) {
            rl_free(lz);
            rl_err_set(err, RL_ERR_INVALID, "grammar: trigger word %d must be 1..%d bytes", (int)i,
                       RL_GRAMMAR_MAX_TRIGGER_LEN - 1);
            return NULL;
        }
        memcpy(lz->words[i], words[i], wl);
        lz->word_len[i] = (uint16_t)wl;
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

int64_t rl__glazy_find(const rl_glazy *lz, const char *p, size_t n, size_t from, size_t min_start) {
    int64_t best = -1;
    for (int32_t i = 0; i < lz->n_words; i++) {
        size_t wl = lz->word_len[i];
        if (wl > n) continue;
        /* an occurrence ending at or after `from` starts at or after from - wl + 1 */
        size_t s = from + 1 > wl ? from + 1 - wl : 0;
        if (s < min_start) s = min_start;
        if (s >= n) continue;
        const char *hit = memmem(p + s, n - s, lz->words[i], wl);
        if (hit && (best < 0 || hit - p < best)) best = hit - p;
    }
    return best;
}

bool rl__glazy_is_token(const rl_glazy *lz, int32_t id) {
    for (int32_t i = 0; i < lz->n_tokens; i++)
        if (lz->tokens[i] == id) return true;
    return false;
}
