/* libFuzzer target for the grammar compiler, the JSON-schema converter and
 * the matcher.  The first byte picks the mode: even -> the rest is grammar
 * text, odd -> the rest is a JSON schema.  When it compiles, the input is
 * also fed to a matcher over a small byte vocabulary (masks, accept, jump-
 * forward), so that anything the compiler accepts is safe to run. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "grammar/grammar.h"

static rl_vocab_trie *trie(void) {
    static rl_vocab_trie *t;
    if (t) return t;
    static char store[256];
    static const char *pieces[260];
    static size_t lens[260];
    static uint8_t kinds[260];
    for (int i = 0; i < 256; i++) {
        store[i] = (char)i;
        pieces[i] = &store[i];
        lens[i] = 1;
    }
    pieces[256] = "{\"", lens[256] = 2;
    pieces[257] = "\":", lens[257] = 2;
    pieces[258] = "true", lens[258] = 4;
    pieces[259] = "", lens[259] = 0, kinds[259] = RL_VOCAB_EOG;
    rl_err err;
    t = rl_vocab_trie_build(260, pieces, lens, kinds, &err);
    return t;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1 || size > 8192) return 0;
    rl_err err;
    const char *text = (const char *)data + 1;
    rl_grammar *g = (data[0] & 1) ? rl_grammar_from_json_schema(text, size - 1, &err)
                                  : rl_grammar_compile(text, size - 1, &err);
    if (!g) return 0;
    rl_gmatch *m = rl_gmatch_new(g, trie(), &err);
    if (m) {
        float logits[260];
        uint64_t bits[5];
        /* each call is bounded (RL_GRAMMAR_OP_STEPS); the run as a whole is
         * kept short so that a sanitizer build stays inside -timeout */
        for (int step = 0; step < 24 && !rl_gmatch_is_done(m) &&
                           rl_gmatch_get_stats(m).n_expand < 2 * (int64_t)RL_GRAMMAR_OP_STEPS;
             step++) {
            for (int i = 0; i < 260; i++) logits[i] = 0;
            if (rl_gmatch_mask(m, logits, 260, &err)) break;
            int32_t f[8];
            int k = rl_gmatch_forced(m, f, 8);
            for (int i = 0; i < k; i++)
                if (rl_gmatch_accept_token(m, f[i], &err))
                    __builtin_trap(); /* forced must be allowed */
            int32_t n = rl_gmatch_allowed(m, bits, &err);
            if (n <= 0) break;
            int pick = (int)(data[step % size] % (uint8_t)(n > 255 ? 255 : n)), id = -1;
            for (int i = 0; i < 260 && id < 0; i++)
                if ((bits[i >> 6] >> (i & 63)) & 1 && pick-- == 0) id = i;
            if (id < 0 || rl_gmatch_accept_token(m, id, &err))
                __builtin_trap(); /* mask/accept agree */
        }
        (void)rl_gmatch_min_remaining(m);
        rl_gmatch_free(m);
    }
    rl_grammar_free(g);
    return 0;
}
