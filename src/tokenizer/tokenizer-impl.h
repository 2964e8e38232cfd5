/* Internals of the tokenizer module; only the tokenizer module includes this.
 *
 * Vocabulary strings live in one byte arena (`text`, offsets `text_off`,
 * n_vocab + 1 entries); the decoded bytes of each token in a second arena
 * (`piece`).  Token text -> id is an open-addressing hash table (`vmap`,
 * power-of-two size, -1 = empty, last duplicate wins as in HF and
 * llama.cpp).  BPE merges are a second table keyed by the (left, right) id
 * pair, holding the merge rank and the merged id.
 */
#ifndef RL_TOKENIZER_IMPL_H
#define RL_TOKENIZER_IMPL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <pthread.h>

#include "tokenizer/tokenizer.h"

#define RL__TA_EOG     1u /* ends generation */
#define RL__TA_CONTROL 2u /* matched in text only with RL_TOK_PARSE_SPECIAL */
#define RL__TA_USER    4u /* always matched in text */

#define RL__MAX_PRE_STAGES 8
#define RL__CACHE_SLOTS    65536u /* word cache, direct mapped */
#define RL__CACHE_MAX_WORD 64     /* longer words are not cached */

typedef struct rl__merge_slot {
    uint64_t key; /* ((left + 1) << 32) | right; 0 = empty */
    uint32_t rank;
    int32_t id;
} rl__merge_slot;

typedef struct rl__cache_ent {
    uint64_t hash;
    uint32_t n_bytes, n_ids;
    int32_t ids[]; /* then the word's bytes */
} rl__cache_ent;

struct rl_tokenizer {
    rl_tokenizer_kind kind;
    int32_t n_vocab;
    char *text;          /* vocabulary strings as stored */
    uint32_t *text_off;  /* [n_vocab + 1] */
    char *piece;         /* decoded bytes of each token */
    uint32_t *piece_off; /* [n_vocab + 1] */
    float *scores;       /* [n_vocab], zeros when absent */
    uint8_t *types;      /* [n_vocab] rl_token_type */
    uint8_t *attr;       /* [n_vocab] RL__TA_* */
    int32_t *vmap;       /* text -> id */
    uint32_t vmap_mask;
    rl__merge_slot *merges;
    uint32_t merges_mask;
    int32_t bos, eos, eot, pad, unk;
    int32_t fim[RL_FIM_COUNT]; /* rl_fim_token -> id, -1 = none */
    int32_t sep;               /* WordPiece: appended after the text (-1 if none) */
    uint32_t max_token_len;    /* longest token text, bytes */
    bool add_bos, add_eos, add_space_prefix;
    bool add_sep;         /* WordPiece: append sep with RL_TOK_ADD_SPECIAL */
    bool spm_by_position; /* Gemma: merge priority is file position, not score */
    char pre[32];
    int32_t byte_id[256]; /* byte -> token (byte-level char or <0xXX>), -1 if none */

    /* tokens matched in the text before the model runs */
    int32_t *spec_ids; /* control and user-defined ids, longest first */
    size_t n_spec;
    uint8_t spec_first[256]; /* first bytes of any special token */
    uint32_t spec_lens[64];  /* distinct lengths, descending */
    int n_spec_lens;

    /* pre-tokenizer: applied in stages, each stage's matches and gaps are
     * split further by the next stage (HF Sequence of Split/Isolated) */
    pcre2_code *re[RL__MAX_PRE_STAGES];
    int n_re;
    unsigned re_bytes;  /* bit i: stage i matches raw bytes (no UTF); only
                           byte stages follow a byte stage */
    bool ignore_merges; /* a pre-token that is itself a token is emitted as is */
    pcre2_general_context *pcre_gctx;

    pthread_mutex_t cache_mu;
    rl__cache_ent **cache; /* [RL__CACHE_SLOTS] */
};

/* growable id vector */
typedef struct rl__ids {
    int32_t *v;
    size_t n, cap;
} rl__ids;
rl_status rl__ids_push(rl__ids *a, int32_t id);

int32_t rl__vocab_find(const rl_tokenizer *tok, const char *s, size_t len);
const rl__merge_slot *rl__merge_find(const rl_tokenizer *tok, int32_t a, int32_t b);

/* model-specific encoders of one run of text free of special tokens */
rl_status rl__bpe_setup(rl_tokenizer *tok, rl_err *err); /* regexes, byte map */
rl_status rl__bpe_encode(const rl_tokenizer *tok, const uint8_t *s, size_t n, rl__ids *out,
                         rl_err *err);
rl_status rl__spm_encode(const rl_tokenizer *tok, const uint8_t *s, size_t n, bool prefix_space,
                         rl__ids *out, rl_err *err);
rl_status rl__wpm_encode(const rl_tokenizer *tok, const uint8_t *s, size_t n, rl__ids *out,
                         rl_err *err);

/* WordPiece basic-tokenizer data (wpm_tables.c, generated; see there) */
enum { RL__WPM_WORD = 0, RL__WPM_DROP = 1, RL__WPM_SPACE = 2, RL__WPM_CJK = 3 };
#define RL__WPM_MULTI 0x80000000u
extern const uint32_t rl__wpm_class[][3];
extern const size_t rl__wpm_class_n;
extern const uint32_t rl__wpm_map[][2];
extern const size_t rl__wpm_map_n;
extern const uint32_t rl__wpm_multi[];
extern const size_t rl__wpm_multi_n;
extern const uint32_t rl__wpm_punct[][2];
extern const size_t rl__wpm_punct_n;

/* GPT-2 byte <-> unicode mapping */
uint32_t rl__byte_to_cp(uint8_t b);
int rl__cp_to_byte(uint32_t cp); /* -1 if cp is not a mapped byte */

#endif
