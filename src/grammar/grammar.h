/* Grammar-constrained decoding (L6): a GBNF-like grammar (or a JSON Schema
 * converted to one) restricts which tokens the sampler may pick.
 *
 * Three objects:
 *   rl_grammar     compiled grammar; immutable, shareable between threads
 *                  and requests (reference-counted: rl_grammar_retain /
 *                  rl_grammar_free).
 *   rl_vocab_trie  every token's bytes in a byte trie, built once per
 *                  tokenizer; immutable, shareable; must outlive matchers.
 *   rl_gmatch      one sequence's position in the grammar plus its caches
 *                  (lazily built byte automaton, LRU of token masks).  A
 *                  matcher and its clones share those caches and must be
 *                  used from one thread at a time.
 *
 * Per decode step of a constrained sequence the engine calls
 *     rl_gmatch_mask(m, logits, n_logits, &err);   // -inf for banned tokens
 *     id = rl_sampler_sample(s, logits, &res);
 *     rl_gmatch_accept_token(m, id, &err);
 *     if (rl_gmatch_is_done(m)) finish;
 * and may call rl_gmatch_forced to append tokens the grammar forces
 * without sampling (jump-forward).  Unconstrained sequences have no
 * matcher and pay nothing.
 *
 * End-of-generation tokens (rl_tokenizer_is_eog) are allowed exactly when
 * the bytes so far form a complete sentence of the grammar; control and
 * unused tokens and tokens with no bytes are never allowed.
 *
 * Grammar text syntax, the JSON Schema subset, limits and measured costs:
 * docs/STRUCTURED.md. */
#ifndef RL_GRAMMAR_H
#define RL_GRAMMAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/base.h"
#include "tokenizer/tokenizer.h"

/* Limits on untrusted grammars and schemas (exceeding one is RL_ERR_LIMIT). */
#define RL_GRAMMAR_MAX_TEXT   (1 << 20) /* bytes of grammar text */
#define RL_GRAMMAR_MAX_RULES  65536     /* rules incl. generated helpers */
#define RL_GRAMMAR_MAX_ELEMS  (1 << 20) /* compiled elements */
#define RL_GRAMMAR_MAX_REPEAT 4096      /* m and n in x{m,n} */
#define RL_GRAMMAR_MAX_NEST   128       /* parenthesis nesting */
#define RL_GRAMMAR_MAX_DEPTH                                                                       \
    256 /* matcher stack depth (runtime                                                            \
           nesting); deeper paths die */
#define RL_GRAMMAR_MAX_STACKS                                                                      \
    512 /* live parse stacks per state;                                                            \
           more ambiguity is cut off */
#define RL_GRAMMAR_OP_STEPS                                                                        \
    500000 /* parse-stack expansion steps in one                                                   \
              mask or accept; past it that call                                                    \
              fails (a grammar too ambiguous) */
#define RL_GRAMMAR_MAX_TRIGGERS                                                                    \
    16                                   /* trigger words and tokens of a                          \
                                            lazy grammar, each */
#define RL_GRAMMAR_MAX_TRIGGER_LEN 64    /* bytes of one trigger word */
#define RL_SCHEMA_MAX_DEPTH        32    /* nested subschemas */
#define RL_SCHEMA_MAX_NODES        10000 /* subschemas visited */

typedef struct rl_grammar rl_grammar;
typedef struct rl_vocab_trie rl_vocab_trie;
typedef struct rl_gmatch rl_gmatch;

/* ---- grammars ---- */

/* Compiles grammar text (docs/STRUCTURED.md; the start rule is `root`).
 * Rejects with a message naming the line and rule: syntax errors,
 * undefined or duplicate rules, left recursion, a grammar whose root
 * matches no string, and anything over the limits above.  NULL on error.
 * Caller frees with rl_grammar_free. */
rl_grammar *rl_grammar_compile(const char *text, size_t len, rl_err *err);

/* JSON Schema -> grammar text.  `schema_json` is the schema as JSON text
 * (len bytes; invalid JSON or a duplicate key is RL_ERR_FORMAT naming the
 * line and column).  On success *out is NUL-terminated grammar text of
 * *out_len bytes (out_len may be NULL), caller frees with rl_free.
 * Unsupported keywords that would constrain the value are rejected
 * (RL_ERR_UNSUPPORTED naming the keyword and its JSON pointer) so that
 * every output of an accepted schema validates; see docs/STRUCTURED.md. */
rl_status rl_json_schema_to_grammar(const char *schema_json, size_t len, char **out,
                                    size_t *out_len, rl_err *err);
/* How rl_json_schema_to_grammar_framed wraps the value: with item ::=
 * item_open VALUE item_close, the root is `open item close`, or with
 * `many` `open item (sep item)* close` (e.g. tool calls: item_open
 * "<tool_call>\n", item_close "\n</tool_call>", sep "\n").  NULL strings
 * are "".  The strings are written as GBNF literals (any bytes but NUL).
 * With `bare` the root also matches the value alone, unframed (a lazy
 * grammar triggered by the value's first bytes, e.g. a bare {"name": ..}
 * tool call; rule `framed` is then the framed form). */
typedef struct rl_grammar_frame {
    const char *open, *item_open, *item_close, *sep, *close;
    bool many, bare;
} rl_grammar_frame;
/* rl_json_schema_to_grammar with the value framed as f says (f NULL: the
 * plain grammar); rules `item` and `root` are the frame's. */
rl_status rl_json_schema_to_grammar_framed(const char *schema_json, size_t len,
                                           const rl_grammar_frame *f, char **out, size_t *out_len,
                                           rl_err *err);
/* Both steps at once (errors as above, then rl_grammar_compile's).  NULL
 * on error. */
rl_grammar *rl_grammar_from_json_schema(const char *schema_json, size_t len, rl_err *err);

/* A lazy grammar: a sequence using it is unconstrained until its output
 * contains one of the trigger words (the grammar then matches the output
 * from the start of that word on) or one of the trigger tokens is
 * generated (the grammar matches what follows the token).  While it
 * waits, masks ban nothing, jump-forward forces nothing, the output
 * counts as complete (an end-of-generation token ends it), and accepting a
 * token costs a copy of its bytes and a search for the words in the last
 * few bytes.  A trigger occurrence whose bytes the grammar refuses (a
 * token that runs on past the word into text the grammar does not allow)
 * is passed over.  A word written with a leading '^' is anchored: it
 * triggers only at the start of the output, after nothing but whitespace
 * and at most one Markdown fence opener ("```json\n"), and not after a
 * control token.  Words are 1..RL_GRAMMAR_MAX_TRIGGER_LEN bytes; at most
 * RL_GRAMMAR_MAX_TRIGGERS words and as many tokens; at least one of
 * either.  Errors as rl_grammar_compile, plus RL_ERR_INVALID for a bad
 * trigger list. */
rl_grammar *rl_grammar_compile_lazy(const char *text, size_t len, const char *const *words,
                                    int32_t n_words, const int32_t *tokens, int32_t n_tokens,
                                    rl_err *err);
bool rl_grammar_is_lazy(const rl_grammar *g);

rl_grammar *rl_grammar_retain(rl_grammar *g); /* returns g; thread-safe */
void rl_grammar_free(rl_grammar *g);          /* drops one reference; NULL ok */
int32_t rl_grammar_n_rules(const rl_grammar *g);

/* ---- vocabulary trie ---- */

/* Token kinds for rl_vocab_trie_build. */
#define RL_VOCAB_NORMAL  0 /* matched by its bytes */
#define RL_VOCAB_EOG     1 /* end of generation: allowed when the grammar accepts */
#define RL_VOCAB_EXCLUDE 2 /* never allowed under a grammar */

/* From a tokenizer: rl_tokenizer_piece bytes; eog tokens -> EOG; control,
 * unknown and unused tokens, empty pieces and pieces over 1024 bytes ->
 * EXCLUDE.  Caller frees. */
rl_vocab_trie *rl_vocab_trie_from_tokenizer(const rl_tokenizer *tok, rl_err *err);
/* From raw pieces (tests, other tokenizers).  kinds may be NULL (all
 * NORMAL).  Empty or over-long pieces are excluded. */
rl_vocab_trie *rl_vocab_trie_build(int32_t n_vocab, const char *const *pieces, const size_t *lens,
                                   const uint8_t *kinds, rl_err *err);
void rl_vocab_trie_free(rl_vocab_trie *t);
int32_t rl_vocab_trie_n_vocab(const rl_vocab_trie *t);
int32_t rl_vocab_trie_n_nodes(const rl_vocab_trie *t);

/* ---- matcher ---- */

/* New matcher at the start of the grammar.  Borrows g (retained) and t
 * (must outlive the matcher).  NULL on allocation failure. */
rl_gmatch *rl_gmatch_new(const rl_grammar *g, const rl_vocab_trie *t, rl_err *err);
/* Same position, shares the caches (cheap).  NULL on allocation failure. */
rl_gmatch *rl_gmatch_clone(const rl_gmatch *m, rl_err *err);
/* dst takes src's position (both from the same rl_gmatch_new family, e.g.
 * a speculative rollback).  RL_ERR_INVALID for different families. */
rl_status rl_gmatch_restore(rl_gmatch *dst, const rl_gmatch *src, rl_err *err);
void rl_gmatch_free(rl_gmatch *m); /* NULL ok */

/* Sets logits[i] = -inf for every token not allowed next (and for every
 * i >= n_vocab of the trie, i < n_logits).  Allowed logits are untouched.
 * RL_ERR_NOMEM on allocation failure, RL_ERR_LIMIT when the grammar is too
 * ambiguous here (RL_GRAMMAR_OP_STEPS); logits are then unchanged. */
rl_status rl_gmatch_mask(rl_gmatch *m, float *logits, int32_t n_logits, rl_err *err);
/* The allowed set as a bitmask: bits[(n_vocab+63)/64], bit i of word i/64
 * set when token i is allowed.  Returns the number of allowed tokens, or
 * -1 on failure (as rl_gmatch_mask). */
int32_t rl_gmatch_allowed(rl_gmatch *m, uint64_t *bits, rl_err *err);

/* Advances by token id.  RL_ERR_INVALID (state unchanged) when the token
 * is not allowed, RL_ERR_RANGE for an id outside the vocabulary,
 * RL_ERR_LIMIT as rl_gmatch_mask. */
rl_status rl_gmatch_accept_token(rl_gmatch *m, int32_t id, rl_err *err);
/* Advances by raw bytes (all or nothing). */
rl_status rl_gmatch_accept_bytes(rl_gmatch *m, const char *p, size_t n, rl_err *err);

/* A lazy grammar's matcher that has not seen a trigger yet (false for any
 * other). */
bool rl_gmatch_is_waiting(const rl_gmatch *m);

/* The bytes so far form a complete sentence (an EOG token is allowed). */
bool rl_gmatch_is_accepting(rl_gmatch *m);
/* Generation must stop: an EOG token was accepted, or the sentence is
 * complete and no byte can extend it. */
bool rl_gmatch_is_done(rl_gmatch *m);
/* Fewest bytes that complete a sentence from here (0 when accepting): lets
 * a caller finish the JSON before a length limit.  -1 if none can. */
int64_t rl_gmatch_min_remaining(rl_gmatch *m);

/* Jump-forward: while the grammar admits exactly one next byte (and is not
 * accepting), those bytes are forced.  Writes at most `max` token ids
 * spelling a prefix of the forced bytes, chosen greedily longest-match over
 * the trie, and returns how many (0 when nothing is forced).  Does NOT
 * advance m: the caller accepts each id as it commits it.  Note the ids may
 * differ from how the tokenizer would split the same text. */
int rl_gmatch_forced(rl_gmatch *m, int32_t *out, int max);

/* Mask cache size in entries (default 256; 0 disables caching).  Each
 * entry is n_vocab/8 bytes.  Affects m and its clones. */
void rl_gmatch_set_mask_cache(rl_gmatch *m, int n_entries);

typedef struct rl_gmatch_stats {
    int64_t n_masks;       /* mask computations requested */
    int64_t n_mask_hits;   /* served from the mask cache */
    int64_t n_states;      /* automaton states currently interned */
    int64_t n_transitions; /* byte transitions computed */
    int64_t n_flushes;     /* cache flushes (state or memory cap reached) */
    int64_t n_cut;         /* parse stacks dropped by depth/ambiguity limits */
    int64_t n_expand;      /* parse-stack expansion steps, all operations */
} rl_gmatch_stats;
rl_gmatch_stats rl_gmatch_get_stats(const rl_gmatch *m);

/* ---- closing mode (grammar_close.c) ----
 * A constrained sequence must not end truncated by its token budget: once
 * the tokens it may still generate barely cover what the shortest
 * completion needs, the caller stops sampling and steers to the shortest
 * complete sentence (rl_gmatch_close_pick) instead of emitting, e.g.,
 * invalid JSON. */

/* Closing starts with this margin: one freely sampled token can raise the
 * bytes still needed (it may open an object or array) by at most its own
 * length, so closing begins while the slack still covers a long token. */
#define RL_GRAMMAR_CLOSE_SLACK 32

/* Tokens a sequence with tokens_left tokens to go may spend beyond what
 * completing its sentence needs: tokens_left - rl_gmatch_min_remaining(m)
 * (the bytes to the shortest completion bound the tokens it needs), or
 * INT64_MAX when no completion exists. */
int64_t rl_gmatch_slack(rl_gmatch *m, int32_t tokens_left);
/* rl_gmatch_slack(m, tokens_left) <= RL_GRAMMAR_CLOSE_SLACK. */
bool rl_gmatch_must_close(rl_gmatch *m, int32_t tokens_left);
/* The closing-mode pick from row[0 .. n_row), a logits row already masked
 * by rl_gmatch_mask(m): when the sentence is complete, the first allowed
 * end-of-generation token; otherwise, among the allowed tokens of 1 to 3
 * bytes, the one leaving the fewest bytes to a complete sentence, the
 * higher logit on ties (then the lower id).  -1 when no token qualifies.
 * scratch is a matcher of m's family (rl_gmatch_clone), overwritten. */
int32_t rl_gmatch_close_pick(rl_gmatch *m, rl_gmatch *scratch, const float *row, int32_t n_row);

#endif
