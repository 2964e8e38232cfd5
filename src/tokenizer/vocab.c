/* Tokenizer vocabulary: loading and validating the tokenizer.ggml.* metadata,
 * the token-text and merge hash tables, token pieces, special-token tables,
 * and the small accessors of tokenizer.h.
 *
 * Every array is checked against n_vocab and its element type before use;
 * every id key against [0, n_vocab); every merge must name two tokens whose
 * concatenation is itself a token.  Errors name the key (and index).
 */
#include <stdio.h>
#include <string.h>

#include "base/buf.h"
#include "base/hash.h"
#include "tokenizer/tokenizer-impl.h"

#define K_MODEL  "tokenizer.ggml.model"
#define K_PRE    "tokenizer.ggml.pre"
#define K_TOKENS "tokenizer.ggml.tokens"
#define K_SCORES "tokenizer.ggml.scores"
#define K_TYPES  "tokenizer.ggml.token_type"
#define K_MERGES "tokenizer.ggml.merges"

int32_t rl__vocab_find(const rl_tokenizer *tok, const char *s, size_t len) {
    uint32_t i = (uint32_t)rl_hash_bytes(s, len) & tok->vmap_mask;
    for (;;) {
        int32_t id = tok->vmap[i];
        if (id < 0) return -1;
        uint32_t o = tok->text_off[id], l = tok->text_off[id + 1] - o;
        if (l == len && memcmp(tok->text + o, s, len) == 0) return id;
        i = (i + 1) & tok->vmap_mask;
    }
}

const rl__merge_slot *rl__merge_find(const rl_tokenizer *tok, int32_t a, int32_t b) {
    if (!tok->merges || a < 0 || b < 0) return NULL;
    uint64_t key = ((uint64_t)(uint32_t)(a + 1) << 32) | (uint32_t)b;
    uint32_t i = (uint32_t)rl_mix64(key) & tok->merges_mask;
    for (;;) {
        const rl__merge_slot *m = &tok->merges[i];
        if (m->key == key) return m;
        if (m->key == 0) return NULL;
        i = (i + 1) & tok->merges_mask;
    }
}

static uint32_t pow2_at_least(uint64_t n) {
    uint32_t c = 16;
    while (c < n) c <<= 1;
    return c;
}

/* GPT-2's reversible byte -> code point map: printable Latin-1 bytes map to
 * themselves, the other 68 bytes to U+0100.. in byte order. */
static bool byte_is_printable(uint8_t b) {
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
}

uint32_t rl__byte_to_cp(uint8_t b) {
    if (byte_is_printable(b)) return b;
    uint32_t n = 0;
    for (unsigned i = 0; i < b; i++)
        if (!byte_is_printable((uint8_t)i)) n++;
    return 0x100 + n;
}

int rl__cp_to_byte(uint32_t cp) {
    if (cp < 0x100) return byte_is_printable((uint8_t)cp) ? (int)cp : -1;
    if (cp >= 0x100 + 68) return -1;
    uint32_t n = cp - 0x100;
    for (unsigned i = 0; i < 256; i++) {
        if (!byte_is_printable((uint8_t)i)) {
            if (n == 0) return (int)i;
            n--;
        }
    }
    return -1;
}

/* Gemma files store tokens of two or more spaces as real spaces, while the
 * text is matched with spaces as U+2581; such all-whitespace tokens that
 * contain a space are respelled as that many U+2581 (what HF's GGUF
 * converter does).  Returns the respelled length, 0 if not respelled. */
static size_t respell_len(const char *s, size_t n) {
    bool space = false;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == ' ')
            space = true;
        else if (!(c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f' ||
                   (c >= 0x1C && c <= 0x1F)))
            return 0;
    }
    return space ? n * 3 : 0;
}

/* ---- ids ---- */

rl_status rl__ids_push(rl__ids *a, int32_t id) {
    if (a->n == a->cap && rl_grow((void **)&a->v, &a->cap, a->n + 1, sizeof *a->v))
        return RL_ERR_NOMEM;
    a->v[a->n++] = id;
    return RL_OK;
}

/* ---- loading ---- */

static rl_status get_id(const rl_gguf *g, const char *suffix, int32_t n_vocab, int32_t *out,
                        rl_err *err) {
    char key[96];
    snprintf(key, sizeof key, "tokenizer.ggml.%s", suffix);
    *out = -1;
    if (rl_gguf_find_key(g, key) < 0) return RL_OK;
    int64_t v;
    rl_status st = rl_gguf_get_i64(g, key, -1, &v, err);
    if (st) return st;
    if (v == -1 || v == 0xFFFFFFFFll) return RL_OK; /* "none" spelled as -1 */
    if (v < 0 || v >= n_vocab)
        return rl_err_set(err, RL_ERR_FORMAT, "%s: token id %lld out of range [0, %d)", key,
                          (long long)v, n_vocab);
    *out = (int32_t)v;
    return RL_OK;
}

/* Array kv `key` must be present (if `required`), of an allowed element
 * type, and (if want_n > 0) have exactly want_n elements. */
static rl_status get_array(const rl_gguf *g, const char *key, bool required, const int *types,
                           int n_types, uint64_t want_n, int64_t *idx, uint64_t *n, rl_err *err) {
    *idx = rl_gguf_find_key(g, key);
    *n = 0;
    if (*idx < 0) {
        if (required) return rl_err_set(err, RL_ERR_FORMAT, "%s: missing", key);
        return RL_OK;
    }
    if (rl_gguf_kv_type(g, *idx) != RL_GGUF_ARRAY)
        return rl_err_set(err, RL_ERR_FORMAT, "%s: expected an array, got %s", key,
                          rl_gguf_vtype_name(rl_gguf_kv_type(g, *idx)));
    rl_gguf_vtype et;
    rl_status st = rl_gguf_kv_arr(g, *idx, &et, n, err);
    if (st) return st;
    bool ok = false;
    for (int i = 0; i < n_types; i++) ok |= (int)et == types[i];
    if (!ok)
        return rl_err_set(err, RL_ERR_FORMAT, "%s: unexpected element type %s", key,
                          rl_gguf_vtype_name(et));
    if (want_n && *n != want_n)
        return rl_err_set(err, RL_ERR_FORMAT, "%s: has %llu elements, expected %llu (n_vocab)", key,
                          (unsigned long long)*n, (unsigned long long)want_n);
    return RL_OK;
}

static void vmap_insert(rl_tokenizer *tok, int32_t id) {
    uint32_t o = tok->text_off[id], l = tok->text_off[id + 1] - o;
    uint32_t i = (uint32_t)rl_hash_bytes(tok->text + o, l) & tok->vmap_mask;
    for (;;) {
        int32_t cur = tok->vmap[i];
        if (cur < 0) break;
        uint32_t co = tok->text_off[cur], cl = tok->text_off[cur + 1] - co;
        if (cl == l && memcmp(tok->text + co, tok->text + o, l) == 0) break; /* last wins */
        i = (i + 1) & tok->vmap_mask;
    }
    tok->vmap[i] = id;
}

static bool is_eog_text(const char *s, size_t n) {
    static const char *const names[] = {
        "<|eot_id|>", "<|im_end|>", "<|end|>",         "<end_of_turn>", "<|endoftext|>",
        "<EOT>",      "<|eom_id|>", "<|end_of_text|>", "<|return|>",    "<｜end▁of▁sentence｜>",
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strlen(names[i]) == n && memcmp(names[i], s, n) == 0) return true;
    return false;
}

/* The FIM token ids (tokenizer.h, rl_fim_token): the metadata's, else the
 * first of the families' spellings found in the vocabulary. */
static rl_status load_fim(rl_tokenizer *tok, const rl_gguf *g, rl_err *err) {
    static const char *const keys[RL_FIM_COUNT][2] = {
        {"fim_pre_token_id", "prefix_token_id"},
        {"fim_suf_token_id", "suffix_token_id"},
        {"fim_mid_token_id", "middle_token_id"},
        {"fim_pad_token_id", NULL},
        {"fim_rep_token_id", NULL},
        {"fim_sep_token_id", NULL},
    };
    static const char *const names[RL_FIM_COUNT][8] = {
        {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>", "<PRE>", "▁<PRE>",
         "<|code_prefix|>", NULL},
        {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>", "<SUF>", "▁<SUF>",
         "<|code_suffix|>", NULL},
        {"<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>", "<MID>", "▁<MID>",
         "<|code_middle|>", NULL},
        {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", NULL},
        {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>", NULL},
        {"<|file_sep|>", NULL},
    };
    for (int w = 0; w < RL_FIM_COUNT; w++) {
        tok->fim[w] = -1;
        for (int k = 0; k < 2 && keys[w][k] && tok->fim[w] < 0; k++) {
            rl_status st = get_id(g, keys[w][k], tok->n_vocab, &tok->fim[w], err);
            if (st) return st;
        }
        for (int k = 0; names[w][k] && tok->fim[w] < 0; k++)
            tok->fim[w] = rl__vocab_find(tok, names[w][k], strlen(names[w][k]));
    }
    for (int w = RL_FIM_PAD; w <= RL_FIM_SEP; w++)
        if (tok->fim[w] >= 0) tok->attr[tok->fim[w]] |= RL__TA_EOG;
    return RL_OK;
}

static rl_status load_merges(rl_tokenizer *tok, const rl_gguf *g, rl_err *err) {
    static const int str_t[] = {RL_GGUF_STRING};
    int64_t idx;
    uint64_t n;
    rl_status st = get_array(g, K_MERGES, false, str_t, 1, 0, &idx, &n, err);
    if (st || idx < 0) return st;
    if (n > (1u << 28))
        return rl_err_set(err, RL_ERR_FORMAT, K_MERGES ": %llu merges is too many",
                          (unsigned long long)n);
    tok->merges_mask = pow2_at_least(n * 2 + 1) - 1;
    tok->merges = rl_calloc((size_t)tok->merges_mask + 1, sizeof *tok->merges);
    if (!tok->merges) return rl_err_set(err, RL_ERR_NOMEM, K_MERGES ": out of memory");
    char *buf = NULL;
    size_t buf_cap = 0;
    for (uint64_t j = 0; j < n; j++) {
        rl_gguf_str s;
        if ((st = rl_gguf_arr_str(g, idx, j, &s, err))) break;
        const char *sp = s.len > 1 ? memchr(s.ptr + 1, ' ', s.len - 1) : NULL;
        if (!sp) {
            st = rl_err_set(err, RL_ERR_FORMAT, K_MERGES "[%llu]: no space separating two tokens",
                            (unsigned long long)j);
            break;
        }
        size_t la = (size_t)(sp - s.ptr), lb = s.len - la - 1;
        int32_t a = rl__vocab_find(tok, s.ptr, la), b = rl__vocab_find(tok, sp + 1, lb);
        if (a < 0 || b < 0) {
            st = rl_err_set(err, RL_ERR_FORMAT, K_MERGES "[%llu]: '%.*s' names a missing token",
                            (unsigned long long)j, (int)(s.len > 80 ? 80 : s.len), s.ptr);
            break;
        }
        if (rl_grow((void **)&buf, &buf_cap, la + lb, 1)) {
            st = rl_err_set(err, RL_ERR_NOMEM, K_MERGES ": out of memory");
            break;
        }
        memcpy(buf, s.ptr, la);
        memcpy(buf + la, sp + 1, lb);
        int32_t m = rl__vocab_find(tok, buf, la + lb);
        if (m < 0) {
            st = rl_err_set(err, RL_ERR_FORMAT,
                            K_MERGES "[%llu]: merged token '%.*s' is not in the vocabulary",
                            (unsigned long long)j, (int)(la + lb > 80 ? 80 : la + lb), buf);
            break;
        }
        uint64_t key = ((uint64_t)(uint32_t)(a + 1) << 32) | (uint32_t)b;
        uint32_t i = (uint32_t)rl_mix64(key) & tok->merges_mask;
        while (tok->merges[i].key != 0 && tok->merges[i].key != key) i = (i + 1) & tok->merges_mask;
        if (tok->merges[i].key == 0) { /* a repeated pair keeps its first rank */
            tok->merges[i].key = key;
            tok->merges[i].rank = (uint32_t)j;
            tok->merges[i].id = m;
        }
    }
    rl_free(buf);
    return st;
}

static int cmp_spec_len_desc(const void *a, const void *b, void *ctx) {
    const rl_tokenizer *tok = ctx;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    uint32_t lx = tok->text_off[x + 1] - tok->text_off[x];
    uint32_t ly = tok->text_off[y + 1] - tok->text_off[y];
    if (lx != ly) return lx > ly ? -1 : 1;
    return x < y ? -1 : x > y;
}

static rl_status build_specials(rl_tokenizer *tok, rl_err *err) {
    size_t n = 0;
    for (int32_t i = 0; i < tok->n_vocab; i++)
        if ((tok->attr[i] & (RL__TA_CONTROL | RL__TA_USER)) &&
            tok->text_off[i + 1] > tok->text_off[i])
            n++;
    if (!n) return RL_OK;
    tok->spec_ids = rl_malloc(n * sizeof *tok->spec_ids);
    if (!tok->spec_ids) return rl_err_set(err, RL_ERR_NOMEM, "special tokens: out of memory");
    for (int32_t i = 0; i < tok->n_vocab; i++)
        if ((tok->attr[i] & (RL__TA_CONTROL | RL__TA_USER)) &&
            tok->text_off[i + 1] > tok->text_off[i])
            tok->spec_ids[tok->n_spec++] = i;
    qsort_r(tok->spec_ids, n, sizeof *tok->spec_ids, cmp_spec_len_desc, tok);
    for (size_t k = 0; k < n; k++) {
        int32_t id = tok->spec_ids[k];
        uint32_t l = tok->text_off[id + 1] - tok->text_off[id];
        tok->spec_first[(uint8_t)tok->text[tok->text_off[id]]] = 1;
        if (tok->n_spec_lens == 0 || tok->spec_lens[tok->n_spec_lens - 1] != l) {
            if (tok->n_spec_lens == (int)(sizeof tok->spec_lens / sizeof tok->spec_lens[0]))
                return rl_err_set(err, RL_ERR_UNSUPPORTED,
                                  "special tokens: more than 64 distinct lengths");
            tok->spec_lens[tok->n_spec_lens++] = l;
        }
    }
    return RL_OK;
}

static rl_status build_pieces(rl_tokenizer *tok, rl_err *err) {
    /* a piece is never longer than its text (byte-level chars are 1-2 bytes
     * for 1 byte; U+2581 is 3 bytes for 1; <0xXX> 6 for 1) */
    size_t total = tok->text_off[tok->n_vocab];
    tok->piece = rl_malloc(total + 1);
    tok->piece_off = rl_malloc(((size_t)tok->n_vocab + 1) * sizeof *tok->piece_off);
    if (!tok->piece || !tok->piece_off)
        return rl_err_set(err, RL_ERR_NOMEM, "pieces: out of memory");
    size_t w = 0;
    for (int32_t id = 0; id < tok->n_vocab; id++) {
        tok->piece_off[id] = (uint32_t)w;
        const uint8_t *s = (const uint8_t *)tok->text + tok->text_off[id];
        size_t n = tok->text_off[id + 1] - tok->text_off[id];
        uint8_t ty = tok->types[id];
        if (ty == RL_TOKEN_CONTROL || ty == RL_TOKEN_USER_DEFINED || ty == RL_TOKEN_UNKNOWN) {
            if (tok->kind == RL_TOKENIZER_SPM && ty == RL_TOKEN_USER_DEFINED) goto spm_text;
            memcpy(tok->piece + w, s, n);
            w += n;
            continue;
        }
        if (tok->kind == RL_TOKENIZER_WPM) goto spm_text; /* U+2581 marks a word start */
        if (tok->kind == RL_TOKENIZER_SPM) {
            unsigned hx;
            char tail;
            if (ty == RL_TOKEN_BYTE && n == 6 &&
                sscanf((const char *)s, "<0x%2X%c", &hx, &tail) == 2 && tail == '>') {
                tok->piece[w++] = (char)hx;
                continue;
            }
        spm_text:
            for (size_t i = 0; i < n;) {
                if (i + 3 <= n && s[i] == 0xE2 && s[i + 1] == 0x96 && s[i + 2] == 0x81) {
                    tok->piece[w++] = ' ';
                    i += 3;
                } else {
                    tok->piece[w++] = (char)s[i++];
                }
            }
            continue;
        }
        for (size_t i = 0; i < n;) {
            uint32_t cp;
            size_t l = rl_utf8_decode(s + i, n - i, &cp);
            int b = l ? rl__cp_to_byte(cp) : -1;
            if (b >= 0) {
                tok->piece[w++] = (char)b;
                i += l;
            } else if (l) {
                memcpy(tok->piece + w, s + i, l);
                w += l;
                i += l;
            } else {
                tok->piece[w++] = (char)s[i++];
            }
        }
    }
    tok->piece_off[tok->n_vocab] = (uint32_t)w;
    return RL_OK;
}

/* WordPiece: [CLS] is the BOS (cls_token_id, else bos_token_id), [SEP]
 * (seperator_token_id, spelled as llama.cpp writes it) is appended unless
 * add_sep_token is false; ids the metadata lacks are found by their text,
 * as the files llama.cpp converts always name them so.  [UNK] is required:
 * a word with no pieces is one. */
static rl_status wpm_specials(rl_tokenizer *tok, const rl_gguf *g, rl_err *err) {
    int32_t cls;
    rl_status st;
    if ((st = get_id(g, "cls_token_id", tok->n_vocab, &cls, err)) ||
        (st = get_id(g, "seperator_token_id", tok->n_vocab, &tok->sep, err)) ||
        (st = rl_gguf_get_bool(g, "tokenizer.ggml.add_sep_token", true, &tok->add_sep, err)))
        return st;
    if (cls >= 0) tok->bos = cls;
    if (tok->bos < 0) tok->bos = rl__vocab_find(tok, "[CLS]", 5);
    if (tok->sep < 0) tok->sep = rl__vocab_find(tok, "[SEP]", 5);
    if (tok->unk < 0) tok->unk = rl__vocab_find(tok, "[UNK]", 5);
    if (tok->unk < 0)
        return rl_err_set(err, RL_ERR_FORMAT,
                          "tokenizer.ggml.unknown_token_id: missing (a WordPiece vocabulary needs "
                          "[UNK])");
    return RL_OK;
}

rl_status rl_tokenizer_load(const rl_gguf *g, rl_tokenizer **out, rl_err *err) {
    *out = NULL;
    rl_gguf_str model;
    rl_status st = rl_gguf_get_str(g, K_MODEL, &model, err);
    if (st) return st;
    if (!model.ptr) return rl_err_set(err, RL_ERR_FORMAT, K_MODEL ": missing");
    rl_tokenizer_kind kind;
    if (model.len == 4 && !memcmp(model.ptr, "gpt2", 4))
        kind = RL_TOKENIZER_BPE;
    else if (model.len == 5 && !memcmp(model.ptr, "llama", 5))
        kind = RL_TOKENIZER_SPM;
    else if (model.len == 4 && !memcmp(model.ptr, "bert", 4))
        kind = RL_TOKENIZER_WPM;
    else
        return rl_err_set(err, RL_ERR_UNSUPPORTED,
                          K_MODEL ": tokenizer model '%.*s' is not supported",
                          (int)(model.len > 40 ? 40 : model.len), model.ptr);

    static const int str_t[] = {RL_GGUF_STRING};
    static const int flt_t[] = {RL_GGUF_FLOAT32, RL_GGUF_FLOAT64};
    static const int int_t[] = {RL_GGUF_INT32, RL_GGUF_UINT32, RL_GGUF_INT8,  RL_GGUF_UINT8,
                                RL_GGUF_INT16, RL_GGUF_UINT16, RL_GGUF_INT64, RL_GGUF_UINT64};
    int64_t i_tok, i_sc, i_ty;
    uint64_t n_vocab, n;
    if ((st = get_array(g, K_TOKENS, true, str_t, 1, 0, &i_tok, &n_vocab, err))) return st;
    if (n_vocab == 0 || n_vocab > (1u << 26))
        return rl_err_set(err, RL_ERR_FORMAT, K_TOKENS ": %llu tokens (want 1..%u)",
                          (unsigned long long)n_vocab, 1u << 26);
    if ((st = get_array(g, K_SCORES, false, flt_t, 2, n_vocab, &i_sc, &n, err))) return st;
    if ((st = get_array(g, K_TYPES, false, int_t, 8, n_vocab, &i_ty, &n, err))) return st;

    rl_tokenizer *tok = rl_calloc(1, sizeof *tok);
    if (!tok) return rl_err_set(err, RL_ERR_NOMEM, "tokenizer: out of memory");
    pthread_mutex_init(&tok->cache_mu, NULL);
    tok->kind = kind;
    tok->n_vocab = (int32_t)n_vocab;
    for (int b = 0; b < 256; b++) tok->byte_id[b] = -1;

    rl_gguf_str arch;
    if ((st = rl_gguf_get_str(g, "general.architecture", &arch, err))) goto fail;
    bool respell = kind == RL_TOKENIZER_SPM && arch.ptr && arch.len >= 5 &&
                   !memcmp(arch.ptr, "gemma", 5) && (arch.len == 5 || arch.ptr[5] != '4');
    tok->spm_by_position = respell;
    size_t total = 0;
    for (uint64_t j = 0; j < n_vocab; j++) {
        rl_gguf_str s;
        if ((st = rl_gguf_arr_str(g, i_tok, j, &s, err))) goto fail;
        if (s.len > 65536) {
            st = rl_err_set(err, RL_ERR_FORMAT, K_TOKENS "[%llu]: %llu bytes is too long",
                            (unsigned long long)j, (unsigned long long)s.len);
            goto fail;
        }
        size_t rl = respell ? respell_len(s.ptr, s.len) : 0;
        total += rl ? rl : s.len;
    }
    if (total > 0x7FFFFFFFu) {
        st = rl_err_set(err, RL_ERR_FORMAT, K_TOKENS ": %zu bytes in all is too many", total);
        goto fail;
    }
    tok->text = rl_malloc(total + 1);
    tok->text_off = rl_malloc((n_vocab + 1) * sizeof *tok->text_off);
    tok->scores = rl_calloc(n_vocab, sizeof *tok->scores);
    tok->types = rl_malloc(n_vocab);
    tok->attr = rl_calloc(n_vocab, 1);
    tok->vmap_mask = pow2_at_least(n_vocab * 2) - 1;
    tok->vmap = rl_malloc(((size_t)tok->vmap_mask + 1) * sizeof *tok->vmap);
    tok->cache = rl_calloc(RL__CACHE_SLOTS, sizeof *tok->cache);
    if (!tok->text || !tok->text_off || !tok->scores || !tok->types || !tok->attr || !tok->vmap ||
        !tok->cache) {
        st = rl_err_set(err, RL_ERR_NOMEM, "tokenizer: out of memory");
        goto fail;
    }
    memset(tok->vmap, 0xFF, ((size_t)tok->vmap_mask + 1) * sizeof *tok->vmap);
    size_t w = 0;
    for (uint64_t j = 0; j < n_vocab; j++) {
        rl_gguf_str s;
        if ((st = rl_gguf_arr_str(g, i_tok, j, &s, err))) goto fail;
        tok->text_off[j] = (uint32_t)w;
        size_t rl = respell ? respell_len(s.ptr, s.len) : 0;
        if (rl) {
            for (size_t k = 0; k < s.len; k++) memcpy(tok->text + w + 3 * k, "\xE2\x96\x81", 3);
            w += rl;
        } else {
            memcpy(tok->text + w, s.ptr, s.len);
            w += s.len;
        }
        if (i_sc >= 0) {
            double d;
            if ((st = rl_gguf_arr_f64(g, i_sc, j, &d, err))) goto fail;
            tok->scores[j] = (float)d;
        }
        int64_t ty = RL_TOKEN_NORMAL;
        if (i_ty >= 0 && (st = rl_gguf_arr_i64(g, i_ty, j, &ty, err))) goto fail;
        if (ty < 0 || ty > RL_TOKEN_BYTE) {
            st = rl_err_set(err, RL_ERR_FORMAT, K_TYPES "[%llu]: unknown token type %lld",
                            (unsigned long long)j, (long long)ty);
            goto fail;
        }
        /* a respelled user-defined token is an ordinary piece (HF does not
         * add it as an added token: its file spelling is gone) */
        if (rl && ty == RL_TOKEN_USER_DEFINED) ty = RL_TOKEN_NORMAL;
        tok->types[j] = (uint8_t)ty;
    }
    tok->text_off[n_vocab] = (uint32_t)w;
    for (int32_t id = 0; id < tok->n_vocab; id++) {
        vmap_insert(tok, id);
        uint32_t l = tok->text_off[id + 1] - tok->text_off[id];
        if (l > tok->max_token_len) tok->max_token_len = l;
    }

    if ((st = get_id(g, "bos_token_id", tok->n_vocab, &tok->bos, err)) ||
        (st = get_id(g, "eos_token_id", tok->n_vocab, &tok->eos, err)) ||
        (st = get_id(g, "eot_token_id", tok->n_vocab, &tok->eot, err)) ||
        (st = get_id(g, "padding_token_id", tok->n_vocab, &tok->pad, err)) ||
        (st = get_id(g, "unknown_token_id", tok->n_vocab, &tok->unk, err)))
        goto fail;
    tok->sep = -1;
    if (kind == RL_TOKENIZER_WPM && (st = wpm_specials(tok, g, err))) goto fail;
    if ((st = rl_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", kind != RL_TOKENIZER_BPE,
                               &tok->add_bos, err)) ||
        (st = rl_gguf_get_bool(g, "tokenizer.ggml.add_eos_token", false, &tok->add_eos, err)) ||
        (st = rl_gguf_get_bool(g, "tokenizer.ggml.add_space_prefix", kind == RL_TOKENIZER_SPM,
                               &tok->add_space_prefix, err)))
        goto fail;
    if (tok->add_bos && tok->bos < 0) tok->add_bos = false;
    if (tok->add_eos && tok->eos < 0) tok->add_eos = false;
    if (tok->add_sep && tok->sep < 0) tok->add_sep = false;
    rl_gguf_str pre;
    if ((st = rl_gguf_get_str(g, K_PRE, &pre, err))) goto fail;
    if (pre.ptr) {
        size_t l = pre.len < sizeof tok->pre - 1 ? pre.len : sizeof tok->pre - 1;
        memcpy(tok->pre, pre.ptr, l);
        tok->pre[l] = 0;
    }

    for (int32_t id = 0; id < tok->n_vocab; id++) {
        uint8_t ty = tok->types[id];
        const char *s = tok->text + tok->text_off[id];
        size_t l = tok->text_off[id + 1] - tok->text_off[id];
        if (ty == RL_TOKEN_CONTROL || ty == RL_TOKEN_UNKNOWN) tok->attr[id] |= RL__TA_CONTROL;
        if (ty == RL_TOKEN_USER_DEFINED) tok->attr[id] |= RL__TA_USER;
        if ((ty == RL_TOKEN_CONTROL || ty == RL_TOKEN_USER_DEFINED) && is_eog_text(s, l))
            tok->attr[id] |= RL__TA_EOG;
    }
    if (tok->eos >= 0) tok->attr[tok->eos] |= RL__TA_EOG;
    if (tok->eot >= 0) tok->attr[tok->eot] |= RL__TA_EOG;
    int32_t eom; /* Llama 3.1+ <|eom_id|> (end of a tool-calling message) */
    if ((st = get_id(g, "eom_token_id", tok->n_vocab, &eom, err))) goto fail;
    if (eom >= 0) tok->attr[eom] |= RL__TA_EOG;
    if ((st = load_fim(tok, g, err))) goto fail;

    if ((st = build_pieces(tok, err)) || (st = build_specials(tok, err))) goto fail;
    if (kind == RL_TOKENIZER_BPE) {
        if ((st = load_merges(tok, g, err)) || (st = rl__bpe_setup(tok, err))) goto fail;
    } else if (kind == RL_TOKENIZER_SPM) {
        for (int b = 0; b < 256; b++) {
            char hx[8];
            snprintf(hx, sizeof hx, "<0x%02X>", b);
            tok->byte_id[b] = rl__vocab_find(tok, hx, 6);
        }
    }
    *out = tok;
    return RL_OK;
fail:
    rl_tokenizer_free(tok);
    return st;
}

void rl_tokenizer_free(rl_tokenizer *tok) {
    if (!tok) return;
    for (int i = 0; i < tok->n_re; i++) pcre2_code_free(tok->re[i]);
    pcre2_general_context_free(tok->pcre_gctx);
    if (tok->cache)
        for (uint32_t i = 0; i < RL__CACHE_SLOTS; i++) rl_free(tok->cache[i]);
    rl_free(tok->cache);
    pthread_mutex_destroy(&tok->cache_mu);
    rl_free(tok->text);
    rl_free(tok->text_off);
    rl_free(tok->piece);
    rl_free(tok->piece_off);
    rl_free(tok->scores);
    rl_free(tok->types);
    rl_free(tok->attr);
    rl_free(tok->vmap);
    rl_free(tok->merges);
    rl_free(tok->spec_ids);
    rl_free(tok);
}

/* ---- accessors ---- */

rl_tokenizer_kind rl_tokenizer_kind_of(const rl_tokenizer *tok) {
    return tok->kind;
}
int32_t rl_tokenizer_n_vocab(const rl_tokenizer *tok) {
    return tok->n_vocab;
}
int32_t rl_tokenizer_bos(const rl_tokenizer *tok) {
    return tok->bos;
}
int32_t rl_tokenizer_eos(const rl_tokenizer *tok) {
    return tok->eos;
}
int32_t rl_tokenizer_eot(const rl_tokenizer *tok) {
    return tok->eot;
}
int32_t rl_tokenizer_pad(const rl_tokenizer *tok) {
    return tok->pad;
}
int32_t rl_tokenizer_unk(const rl_tokenizer *tok) {
    return tok->unk;
}
int32_t rl_tokenizer_sep(const rl_tokenizer *tok) {
    return tok->sep;
}
bool rl_tokenizer_add_bos(const rl_tokenizer *tok) {
    return tok->add_bos;
}
bool rl_tokenizer_add_eos(const rl_tokenizer *tok) {
    return tok->add_eos;
}
const char *rl_tokenizer_pre(const rl_tokenizer *tok) {
    return tok->pre;
}

int32_t rl_tokenizer_fim(const rl_tokenizer *tok, rl_fim_token which) {
    return which >= 0 && which < RL_FIM_COUNT ? tok->fim[which] : -1;
}

bool rl_tokenizer_is_eog(const rl_tokenizer *tok, int32_t id) {
    return id >= 0 && id < tok->n_vocab && (tok->attr[id] & RL__TA_EOG);
}

rl_token_type rl_tokenizer_token_type(const rl_tokenizer *tok, int32_t id) {
    if (id < 0 || id >= tok->n_vocab) return RL_TOKEN_UNDEFINED;
    return (rl_token_type)tok->types[id];
}

int32_t rl_tokenizer_find(const rl_tokenizer *tok, const char *s, size_t len) {
    return rl__vocab_find(tok, s, len);
}

const char *rl_tokenizer_piece(const rl_tokenizer *tok, int32_t id, size_t *len) {
    if (id < 0 || id >= tok->n_vocab) {
        *len = 0;
        return NULL;
    }
    *len = tok->piece_off[id + 1] - tok->piece_off[id];
    return tok->piece + tok->piece_off[id];
}
