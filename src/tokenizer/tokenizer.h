/* redline tokenizer (L3): vocabulary from GGUF metadata, byte-level BPE
 * (GPT-2 style, with the pre-tokenizer regex split of the model family),
 * SentencePiece-style BPE with scores and byte fallback, BERT WordPiece,
 * special tokens, and a streaming detokenizer that only ever emits valid
 * UTF-8.
 *
 * Metadata read (all under "tokenizer.ggml."): model ("gpt2" = byte-level
 * BPE, "llama" = SentencePiece BPE, "bert" = WordPiece), pre, tokens,
 * scores, token_type, merges, bos/eos/eot/padding/unknown_token_id,
 * add_bos_token, add_eos_token, add_space_prefix; for WordPiece also
 * cls_token_id (the BOS), seperator_token_id (sic) and add_sep_token.
 * WordPiece vocabularies are stored as llama.cpp's converter writes them:
 * word-initial pieces prefixed with U+2581, continuation pieces ("##x" in
 * the original vocabulary) bare.  Inconsistent metadata (ids out of
 * range, merges naming missing tokens, arrays of the wrong length or
 * element type) is an RL_ERR_FORMAT load error naming the key.
 *
 * Invariants:
 *   - encode is a pure function of (tokenizer, text, flags); it is safe to
 *     call from several threads at once (the word cache has its own lock);
 *   - every id returned by encode is in [0, n_vocab);
 *   - for any bytes s (valid UTF-8 or not), decode(encode(s, 0)) == s for
 *     byte-level BPE whose vocabulary has all 256 byte tokens (SmolLM2 lacks
 *     21 rare bytes, which are dropped as HF drops them), and for
 *     SentencePiece with byte fallback; WordPiece is lossy (lowercased,
 *     accents and controls removed, words joined by single spaces, unknown
 *     words as [UNK]);
 *   - text that looks like a control token ("<|im_start|>") is matched as
 *     that token only with RL_TOK_PARSE_SPECIAL; user-defined tokens
 *     (token_type 4) are always matched, as Hugging Face does.
 *
 * Ownership: the tokenizer copies everything it needs from the GGUF, so the
 * file may be closed after rl_tokenizer_load.
 */
#ifndef RL_TOKENIZER_H
#define RL_TOKENIZER_H

#include "base/base.h"
#include "gguf/gguf.h"

typedef struct rl_tokenizer rl_tokenizer; /* opaque */

/* GGUF token types (tokenizer.ggml.token_type); fixed by the format. */
typedef enum rl_token_type {
    RL_TOKEN_UNDEFINED = 0,
    RL_TOKEN_NORMAL = 1,
    RL_TOKEN_UNKNOWN = 2,
    RL_TOKEN_CONTROL = 3,
    RL_TOKEN_USER_DEFINED = 4,
    RL_TOKEN_UNUSED = 5,
    RL_TOKEN_BYTE = 6,
} rl_token_type;

typedef enum rl_tokenizer_kind {
    RL_TOKENIZER_BPE = 1, /* byte-level BPE ("gpt2") */
    RL_TOKENIZER_SPM = 2, /* SentencePiece BPE with scores ("llama") */
    RL_TOKENIZER_WPM = 3, /* BERT WordPiece ("bert") */
} rl_tokenizer_kind;

/* encode flags */
#define RL_TOK_ADD_SPECIAL   1u /* add BOS/EOS (WordPiece: [CLS]/[SEP]) as the metadata says */
#define RL_TOK_PARSE_SPECIAL 2u /* match control tokens written in the text */
/* decode / detok flags */
#define RL_TOK_SKIP_SPECIAL 1u /* render control tokens as nothing */

/* Builds a tokenizer from g's metadata.  On error *out is NULL. */
rl_status rl_tokenizer_load(const rl_gguf *g, rl_tokenizer **out, rl_err *err);
void rl_tokenizer_free(rl_tokenizer *tok);

rl_tokenizer_kind rl_tokenizer_kind_of(const rl_tokenizer *tok);
int32_t rl_tokenizer_n_vocab(const rl_tokenizer *tok);
/* Special ids; -1 when the model has none. */
int32_t rl_tokenizer_bos(const rl_tokenizer *tok);
int32_t rl_tokenizer_eos(const rl_tokenizer *tok);
int32_t rl_tokenizer_eot(const rl_tokenizer *tok);
int32_t rl_tokenizer_pad(const rl_tokenizer *tok);
int32_t rl_tokenizer_unk(const rl_tokenizer *tok);
/* WordPiece's [SEP], appended after the text with RL_TOK_ADD_SPECIAL. */
int32_t rl_tokenizer_sep(const rl_tokenizer *tok);
bool rl_tokenizer_add_bos(const rl_tokenizer *tok);
bool rl_tokenizer_add_eos(const rl_tokenizer *tok);
/* Fill-in-the-middle tokens (index of rl_tokenizer_fim).  From the keys
 * tokenizer.ggml.fim_{pre,suf,mid,pad,rep,sep}_token_id (pre/suf/mid also
 * under the older prefix/suffix/middle_token_id), else, as llama.cpp does
 * for files that lack them, the first vocabulary string of the families'
 * spellings (<|fim_prefix|>, <fim-prefix>, <fim_prefix>, <PRE>, ...).
 * pad, rep and sep also end a generation (as in llama.cpp). */
typedef enum rl_fim_token {
    RL_FIM_PRE = 0, /* before the prefix */
    RL_FIM_SUF = 1, /* before the suffix */
    RL_FIM_MID = 2, /* the model writes the middle after it */
    RL_FIM_PAD = 3,
    RL_FIM_REP = 4, /* repository name (repo-level FIM) */
    RL_FIM_SEP = 5, /* file separator (repo-level FIM) */
    RL_FIM_COUNT = 6,
} rl_fim_token;
/* The id of FIM token `which`, -1 when the model has none. */
int32_t rl_tokenizer_fim(const rl_tokenizer *tok, rl_fim_token which);
/* Pre-tokenizer name as in the metadata ("smollm", "qwen2", ...; "" if none). */
const char *rl_tokenizer_pre(const rl_tokenizer *tok);
/* End of generation: eos, eot, and control tokens such as <|im_end|>,
 * <|endoftext|>, <end_of_turn>, <|eot_id|>.  False for ids out of range. */
bool rl_tokenizer_is_eog(const rl_tokenizer *tok, int32_t id);
/* Token type of id (RL_TOKEN_UNDEFINED if out of range). */
rl_token_type rl_tokenizer_token_type(const rl_tokenizer *tok, int32_t id);
/* Id of the token whose vocabulary string is exactly s (as stored in the
 * GGUF, e.g. "<|im_end|>"), or -1. */
int32_t rl_tokenizer_find(const rl_tokenizer *tok, const char *s, size_t len);

/* Text -> ids.  *ids is allocated (caller frees with rl_free; may be NULL
 * when *n == 0).  Any bytes are accepted: invalid UTF-8 is encoded
 * byte-wise (byte-level tokens, or <0xXX> byte-fallback tokens). */
rl_status rl_tokenizer_encode(const rl_tokenizer *tok, const char *text, size_t len, unsigned flags,
                              int32_t **ids, size_t *n, rl_err *err);

/* Raw bytes of token id (byte-level chars mapped back to bytes, U+2581 to
 * space, <0xXX> to the byte; control tokens as their text).  Borrowed until
 * rl_tokenizer_free; NULL with *len = 0 if id is out of range. */
const char *rl_tokenizer_piece(const rl_tokenizer *tok, int32_t id, size_t *len);

/* One-shot decode: ids -> NUL-terminated valid UTF-8 (invalid byte
 * sequences become U+FFFD).  *out allocated, caller frees with rl_free.
 * RL_ERR_RANGE naming the position if an id is out of range. */
rl_status rl_tokenizer_decode(const rl_tokenizer *tok, const int32_t *ids, size_t n, unsigned flags,
                              char **out, size_t *out_len, rl_err *err);

/* Streaming detokenizer.  push appends to `buf` only complete, valid UTF-8;
 * an incomplete multi-byte tail is held until a later token completes it;
 * bytes that can never form a valid sequence become U+FFFD (one per maximal
 * invalid subpart, as Python's and Rust's lossy decoders do).  flush emits
 * U+FFFD for a held incomplete tail.  The caller reads buf[0..len) (always
 * NUL-terminated) and may reset len to 0 (rl_detok_clear) after consuming.
 * Usage: rl_detok_init; push...; flush; rl_detok_free. */
typedef struct rl_detok {
    const rl_tokenizer *tok; /* borrowed */
    unsigned flags;
    char *buf; /* owned output, NUL-terminated */
    size_t len, cap;
    uint8_t pend[4];        /* held bytes of an incomplete UTF-8 sequence */
    uint8_t n_pend, n_need; /* bytes held, total length of the sequence */
    uint8_t lo, hi;         /* allowed range of the next continuation byte */
    bool at_start;          /* nothing pushed yet (SentencePiece strips the
                               space prefix it added) */
} rl_detok;

void rl_detok_init(rl_detok *d, const rl_tokenizer *tok, unsigned flags);
/* Appends the text of token id; *appended (may be NULL) gets the number of
 * bytes added to buf.  RL_ERR_RANGE for a bad id, RL_ERR_NOMEM. */
rl_status rl_detok_push(rl_detok *d, int32_t id, size_t *appended, rl_err *err);
/* Same for raw bytes (used by push; exposed for tests). */
rl_status rl_detok_push_bytes(rl_detok *d, const char *p, size_t n, size_t *appended, rl_err *err);
rl_status rl_detok_flush(rl_detok *d, size_t *appended, rl_err *err);
void rl_detok_clear(rl_detok *d); /* len = 0, keeps the held tail */
void rl_detok_free(rl_detok *d);

#endif
