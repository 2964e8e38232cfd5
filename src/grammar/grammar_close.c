/* Closing mode (see grammar.h): the budget test and the token that steers
 * a constrained sequence to the shortest complete sentence.
 *
 * Token bytes and kinds come from the matcher's vocabulary trie, the same
 * table its masks are computed from, so a token the mask allowed is either
 * an end-of-generation token (allowed only while the sentence is
 * complete) or a NORMAL token whose trie bytes are its piece. */
#include <math.h>

#include "grammar/grammar-impl.h"

int64_t rl_gmatch_slack(rl_gmatch *m, int32_t tokens_left) {
    int64_t need = rl_gmatch_min_remaining(m);
    return need >= 0 ? (int64_t)tokens_left - need : INT64_MAX;
}

bool rl_gmatch_must_close(rl_gmatch *m, int32_t tokens_left) {
    return rl_gmatch_slack(m, tokens_left) <= RL_GRAMMAR_CLOSE_SLACK;
}

int32_t rl_gmatch_close_pick(rl_gmatch *m, rl_gmatch *scratch, const float *row, int32_t n_row) {
    const rl_vocab_trie *t = rl__gmatch_trie(m);
    bool acc = rl_gmatch_is_accepting(m);
    int32_t n = n_row < t->n_vocab ? n_row : t->n_vocab; /* the mask bans ids past the trie */
    int32_t best = -1;
    int64_t best_rem = INT64_MAX;
    rl_err err;
    for (int32_t id = 0; id < n; id++) {
        if (!(row[id] > -INFINITY)) continue;
        if (t->kind[id] == RL_VOCAB_EOG) {
            if (acc) return id;
            continue;
        }
        uint32_t len = t->off[id + 1] - t->off[id];
        if (len == 0 || len > 3) continue;
        if (rl_gmatch_restore(scratch, m, &err) || rl_gmatch_accept_token(scratch, id, &err))
            continue;
        int64_t rem = rl_gmatch_min_remaining(scratch);
        if (rem >= 0 && (rem < best_rem || (rem == best_rem && row[id] > row[best]))) {
            best = id;
            best_rem = rem;
        }
    }
    return best;
}
