/* Tokenizer unit tests: tiny byte-level BPE and SentencePiece vocabularies
 * built with the GGUF writer, special-token parsing, the streaming
 * detokenizer with split and invalid UTF-8, and metadata that must be
 * rejected with an error naming the key.  (Token-exactness against HF on
 * the real models is tests/python/test_tokenizer.py.) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

/* ---- building tiny models ---- */

static const char *build_pre; /* tokenizer.ggml.pre of the next build, if set */

enum {
    F_NO_TOKENS = 1,
    F_SHORT_SCORES = 2,
    F_FLOAT_TYPES = 4,
    F_BAD_BOS = 8,
    F_BAD_MERGE = 16,
    F_BAD_MODEL = 32,
    F_BAD_TYPE_VALUE = 64,
    F_MERGE_NO_SPACE = 128,
    F_SCORES_STR = 256,
    F_NO_UNK = 512,
    F_WPM_KEYS = 1024,
    F_FIM_KEYS = 2048,
    F_BAD_FIM = 4096
};

static rl_tokenizer *build(const char *model, const char *const *toks, const int32_t *types,
                           size_t n, const char *const *merges, size_t n_merges, int bad,
                           rl_err *err, rl_status *st_out) {
    rl_gguf_writer *w = rl_gguf_writer_new();
    assert_non_null(w);
    assert_int_equal(rl_gguf_writer_str(w, "general.architecture", "llama", 5), RL_OK);
    const char *m = bad & F_BAD_MODEL ? "wordpiece9" : model;
    assert_int_equal(rl_gguf_writer_str(w, "tokenizer.ggml.model", m, strlen(m)), RL_OK);
    if (build_pre)
        assert_int_equal(rl_gguf_writer_str(w, "tokenizer.ggml.pre", build_pre, strlen(build_pre)),
                         RL_OK);
    if (!(bad & F_NO_TOKENS))
        assert_int_equal(rl_gguf_writer_arr_str(w, "tokenizer.ggml.tokens", toks, NULL, n), RL_OK);
    float scores[64];
    for (size_t i = 0; i < n; i++) scores[i] = -(float)i;
    if (bad & F_SCORES_STR)
        assert_int_equal(rl_gguf_writer_arr_str(w, "tokenizer.ggml.scores", toks, NULL, n), RL_OK);
    else
        assert_int_equal(rl_gguf_writer_arr(w, "tokenizer.ggml.scores", RL_GGUF_FLOAT32, scores,
                                            bad & F_SHORT_SCORES ? n - 1 : n),
                         RL_OK);
    int32_t ty[64];
    for (size_t i = 0; i < n; i++) ty[i] = types[i];
    if (bad & F_BAD_TYPE_VALUE) ty[0] = 42;
    if (bad & F_FLOAT_TYPES)
        assert_int_equal(
            rl_gguf_writer_arr(w, "tokenizer.ggml.token_type", RL_GGUF_FLOAT32, scores, n), RL_OK);
    else
        assert_int_equal(rl_gguf_writer_arr(w, "tokenizer.ggml.token_type", RL_GGUF_INT32, ty, n),
                         RL_OK);
    if (n_merges) {
        const char *mm[16];
        for (size_t i = 0; i < n_merges; i++) mm[i] = merges[i];
        if (bad & F_BAD_MERGE) mm[0] = "a zz";
        if (bad & F_MERGE_NO_SPACE) mm[0] = "ab";
        assert_int_equal(rl_gguf_writer_arr_str(w, "tokenizer.ggml.merges", mm, NULL, n_merges),
                         RL_OK);
    }
    assert_int_equal(
        rl_gguf_writer_u32(w, "tokenizer.ggml.bos_token_id", bad & F_BAD_BOS ? 1000 : 1), RL_OK);
    assert_int_equal(rl_gguf_writer_u32(w, "tokenizer.ggml.eos_token_id", 2), RL_OK);
    if (!(bad & F_NO_UNK))
        assert_int_equal(rl_gguf_writer_u32(w, "tokenizer.ggml.unknown_token_id", 0), RL_OK);
    if (bad & F_WPM_KEYS) { /* WordPiece's own keys: [CLS] = 3 wins over bos, no [SEP] added */
        assert_int_equal(rl_gguf_writer_u32(w, "tokenizer.ggml.cls_token_id", 3), RL_OK);
        assert_int_equal(rl_gguf_writer_u32(w, "tokenizer.ggml.seperator_token_id", 0), RL_OK);
        assert_int_equal(rl_gguf_writer_bool(w, "tokenizer.ggml.add_sep_token", false), RL_OK);
    }
    if (bad & F_FIM_KEYS) /* the key wins over the vocabulary's spelling */
        assert_int_equal(rl_gguf_writer_u32(w, "tokenizer.ggml.fim_pre_token_id", 4), RL_OK);
    if (bad & F_BAD_FIM)
        assert_int_equal(rl_gguf_writer_u32(w, "tokenizer.ggml.fim_mid_token_id", 1000), RL_OK);
    void *buf;
    size_t size;
    assert_int_equal(rl_gguf_writer_to_memory(w, &buf, &size, err), RL_OK);
    rl_gguf_writer_free(w);
    rl_gguf *g;
    assert_int_equal(rl_gguf_open_memory(buf, size, &g, err), RL_OK);
    rl_tokenizer *tok = NULL;
    *st_out = rl_tokenizer_load(g, &tok, err);
    rl_gguf_close(g);
    rl_free(buf);
    return tok;
}

/* SentencePiece: ids 0..2 specials, then pieces, byte tokens for 0xE2 0x82 0xAC 0xFF */
static const char *const spm_toks[] = {"<unk>",
                                       "<s>",
                                       "</s>",
                                       "\xE2\x96\x81",
                                       "a",
                                       "b",
                                       "ab",
                                       "\xE2\x96\x81"
                                       "ab",
                                       "c",
                                       "<0xE2>",
                                       "<0x82>",
                                       "<0xAC>",
                                       "<0xFF>",
                                       "<0x41>",
                                       "<end_of_turn>"};
static const int32_t spm_types[] = {2, 3, 3, 1, 1, 1, 1, 1, 1, 6, 6, 6, 6, 6, 3};
#define N_SPM (sizeof spm_toks / sizeof spm_toks[0])

static rl_tokenizer *spm(void) {
    rl_err err = {0};
    rl_status st;
    rl_tokenizer *tok = build("llama", spm_toks, spm_types, N_SPM, NULL, 0, 0, &err, &st);
    assert_int_equal(st, RL_OK);
    return tok;
}

/* byte-level BPE: "Ġ" is the space byte */
static const char *const bpe_toks[] = {"<|endoftext|>",
                                       "<|im_start|>",
                                       "<|im_end|>",
                                       "a",
                                       "b",
                                       "c",
                                       "ab",
                                       "abc",
                                       "\xC4\xA0",
                                       "\xC4\xA0"
                                       "ab",
                                       "1"};
static const int32_t bpe_types[] = {3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1};
static const char *const bpe_merges[] = {"a b", "ab c", "\xC4\xA0 ab"};
#define N_BPE (sizeof bpe_toks / sizeof bpe_toks[0])

static rl_tokenizer *bpe(void) {
    rl_err err = {0};
    rl_status st;
    rl_tokenizer *tok = build("gpt2", bpe_toks, bpe_types, N_BPE, bpe_merges, 3, 0, &err, &st);
    assert_int_equal(st, RL_OK);
    return tok;
}

static void expect_ids(rl_tokenizer *tok, const char *text, unsigned flags, const int32_t *want,
                       size_t n_want) {
    int32_t *ids;
    size_t n;
    rl_err err = {0};
    assert_int_equal(rl_tokenizer_encode(tok, text, strlen(text), flags, &ids, &n, &err), RL_OK);
    assert_int_equal(n, n_want);
    for (size_t i = 0; i < n; i++) assert_int_equal(ids[i], want[i]);
    rl_free(ids);
}

static void expect_decode(rl_tokenizer *tok, const int32_t *ids, size_t n, const char *want) {
    char *text;
    size_t len;
    rl_err err = {0};
    assert_int_equal(rl_tokenizer_decode(tok, ids, n, 0, &text, &len, &err), RL_OK);
    assert_string_equal(text, want);
    assert_int_equal(len, strlen(want));
    rl_free(text);
}

/* ---- tests ---- */

static void test_spm_ids(void **state) {
    (void)state;
    rl_tokenizer *tok = spm();
    assert_int_equal(rl_tokenizer_n_vocab(tok), (int)N_SPM);
    assert_int_equal(rl_tokenizer_bos(tok), 1);
    assert_true(rl_tokenizer_add_bos(tok)); /* SentencePiece default */
    /* "ab ab" with the space prefix: ▁ab ▁ab */
    const int32_t w1[] = {1, 7, 7};
    expect_ids(tok, "ab ab", RL_TOK_ADD_SPECIAL, w1, 3);
    /* c, then € through byte fallback, then the invalid byte 0xFF */
    const int32_t w2[] = {3, 8, 9, 10, 11, 12};
    expect_ids(tok, "c\xE2\x82\xAC\xFF", 0, w2, 6);
    /* control tokens only with PARSE_SPECIAL */
    const int32_t w3[] = {7, 2};
    expect_ids(tok, "ab</s>", RL_TOK_PARSE_SPECIAL, w3, 2);
    int32_t *ids;
    size_t n;
    rl_err err = {0};
    assert_int_equal(rl_tokenizer_encode(tok, "ab</s>", 6, 0, &ids, &n, &err), RL_OK);
    assert_int_equal(n, 2); /* ▁ab, then one fused <unk> for "</s>" */
    assert_int_equal(ids[0], 7);
    assert_int_equal(ids[1], 0);
    rl_free(ids);
    /* decode strips the space prefix and fuses byte tokens */
    const int32_t d[] = {7, 7, 8, 9, 10, 11};
    expect_decode(tok, d, 6, "ab abc\xE2\x82\xAC");
    char *text;
    size_t len;
    assert_true(rl_tokenizer_is_eog(tok, 2));
    assert_true(rl_tokenizer_is_eog(tok, 14)); /* <end_of_turn> */
    assert_false(rl_tokenizer_is_eog(tok, 7));
    assert_false(rl_tokenizer_is_eog(tok, 99));
    const int32_t bad[] = {7, 99};
    assert_int_equal(rl_tokenizer_decode(tok, bad, 2, 0, &text, &len, &err), RL_ERR_RANGE);
    assert_non_null(strstr(err.msg, "ids[1]"));
    rl_tokenizer_free(tok);
}

static void test_bpe_encode(void **state) {
    (void)state;
    rl_tokenizer *tok = bpe();
    assert_false(rl_tokenizer_add_bos(tok));
    /* "abc ab" -> "abc" | " ab" */
    const int32_t w1[] = {7, 9};
    expect_ids(tok, "abc ab", RL_TOK_ADD_SPECIAL, w1, 2);
    /* the text of a control token is plain text without PARSE_SPECIAL */
    const int32_t w2[] = {6, 2, 9};
    expect_ids(tok, "ab<|im_end|> ab", RL_TOK_PARSE_SPECIAL, w2, 3);
    int32_t *ids;
    size_t n;
    rl_err err = {0};
    assert_int_equal(rl_tokenizer_encode(tok, "ab<|im_end|>", 12, 0, &ids, &n, &err), RL_OK);
    for (size_t i = 0; i < n; i++) assert_int_not_equal(ids[i], 2);
    rl_free(ids);
    assert_true(rl_tokenizer_is_eog(tok, 2));
    size_t pl;
    const char *p = rl_tokenizer_piece(tok, 9, &pl);
    assert_int_equal(pl, 3);
    assert_memory_equal(p, " ab", 3);
    assert_null(rl_tokenizer_piece(tok, -1, &pl));
    rl_tokenizer_free(tok);
}

/* A byte-level BPE vocabulary with pre-tokenizer `pre`; all types normal. */
static rl_tokenizer *bpe_pre(const char *pre, const char *const *toks, size_t n,
                             const char *const *merges, size_t n_merges) {
    int32_t types[64];
    for (size_t i = 0; i < n; i++) types[i] = 1;
    rl_err err = {0};
    rl_status st;
    build_pre = pre;
    rl_tokenizer *tok = build("gpt2", toks, types, n, merges, n_merges, 0, &err, &st);
    build_pre = NULL;
    if (st) fail_msg("load: %s", err.msg);
    return tok;
}

/* byte-level spellings: "Ġ" space, "Ċ" newline, "Â" 0xC2, "½" 0xBD, "Å" 0xC5, "¾" 0xBE */
#define BL_SP "\xC4\xA0"
#define BL_NL "\xC4\x8A"
#define BL_C2 "\xC3\x82"
#define BL_BD "\xC2\xBD"
static const char *const pre_toks[] = {BL_SP,
                                       BL_NL,
                                       BL_C2,
                                       BL_BD,
                                       "=",
                                       "1",
                                       "2",
                                       "3",
                                       "4", /* 0..8 */
                                       BL_SP BL_C2,
                                       BL_SP BL_C2 BL_BD,
                                       BL_C2 BL_BD,
                                       BL_NL BL_SP,
                                       BL_SP "=", /* 9..13 */
                                       "12",
                                       "123",
                                       "1234",
                                       BL_SP "1",
                                       BL_SP "12",
                                       "\xC3\x85",
                                       "\xC2\xBE", /* 14..20 */
                                       "\xC3\x85\xC2\xBE",
                                       "a",
                                       "b",
                                       "c",
                                       "ab",
                                       "abc"}; /* 21..26 */
static const char *const pre_merges[] = {BL_SP " " BL_C2,
                                         BL_SP BL_C2 " " BL_BD,
                                         BL_C2 " " BL_BD,
                                         BL_NL " " BL_SP,
                                         BL_SP " =",
                                         "1 2",
                                         "12 3",
                                         "123 4",
                                         BL_SP " 12",
                                         "\xC3\x85 \xC2\xBE",
                                         "a b"};
#define N_PRE_TOKS   (sizeof pre_toks / sizeof pre_toks[0])
#define N_PRE_MERGES (sizeof pre_merges / sizeof pre_merges[0])

static void expect_pre(const char *pre, const char *text, const int32_t *want, size_t n_want) {
    rl_tokenizer *tok = bpe_pre(pre, pre_toks, N_PRE_TOKS, pre_merges, N_PRE_MERGES);
    assert_string_equal(rl_tokenizer_pre(tok), pre);
    expect_ids(tok, text, 0, want, n_want);
    rl_tokenizer_free(tok);
}

/* "½" is \p{N} (No): a Digits step isolates it from the space before it */
static void test_pre_digits_isolate_no(void **state) {
    (void)state;
    const int32_t gpt2[] = {10}, digits[] = {0, 11};
    expect_pre("gpt-2", " \xC2\xBD", gpt2, 1);
    expect_pre("starcoder", " \xC2\xBD", digits, 2);
    expect_pre("refact", " \xC2\xBD", digits, 2);
    expect_pre("command-r", " \xC2\xBD", digits, 2);
    expect_pre("deepseek-llm", " \xC2\xBD", digits, 2);
    expect_pre("deepseek-coder", " \xC2\xBD", digits, 2);
    /* " 12": deepseek-llm keeps the number whole, deepseek-coder splits digits */
    const int32_t g12[] = {18}, dsl12[] = {0, 14}, dsc12[] = {0, 5, 6};
    expect_pre("gpt-2", " 12", g12, 1);
    expect_pre("deepseek-llm", " 12", dsl12, 2);
    expect_pre("deepseek-coder", " 12", dsc12, 3);
}

/* falcon: punctuation is split off before the GPT-2 pattern ("\n " | "="),
 * and on the byte-level text numeric characters (here the byte 0xBD of
 * "½" and 0xBE of "ž") are isolated, digit runs cut in threes */
static void test_pre_falcon(void **state) {
    (void)state;
    const int32_t g_nl[] = {1, 13}, f_nl[] = {12, 4};
    expect_pre("gpt-2", "\n =", g_nl, 2);
    expect_pre("falcon", "\n =", f_nl, 2);
    const int32_t g_half[] = {11}, f_half[] = {2, 3};
    expect_pre("gpt-2", "\xC2\xBD", g_half, 1);
    expect_pre("falcon", "\xC2\xBD", f_half, 2);
    const int32_t g_z[] = {21}, f_z[] = {19, 20};
    expect_pre("gpt-2", "\xC5\xBE", g_z, 1);
    expect_pre("falcon", "\xC5\xBE", f_z, 2);
    const int32_t g_num[] = {16}, f_num[] = {15, 8};
    expect_pre("gpt-2", "1234", g_num, 1);
    expect_pre("falcon", "1234", f_num, 2);
}

/* llama-bpe (HF ignore_merges): a word that is a token wins even when the
 * merges never build it; other families merge */
static void test_pre_ignore_merges(void **state) {
    (void)state;
    const int32_t merged[] = {25, 24}, whole[] = {26};
    expect_pre("qwen2", "abc", merged, 2);
    expect_pre("llama-bpe", "abc", whole, 1);
}

/* deepseek-llm's trailing-whitespace stage (\s+$) only splits whitespace
 * at the end of a piece; a long run before other text stays one gap */
static void test_pre_deepseek_trailing_ws(void **state) {
    (void)state;
    rl_tokenizer *tok = bpe_pre("deepseek-llm", pre_toks, N_PRE_TOKS, pre_merges, N_PRE_MERGES);
    char text[4096];
    memset(text, ' ', sizeof text - 2);
    text[sizeof text - 2] = '=';
    text[sizeof text - 1] = 0;
    int32_t *ids;
    size_t n;
    rl_err err = {0};
    assert_int_equal(rl_tokenizer_encode(tok, text, strlen(text), 0, &ids, &n, &err), RL_OK);
    /* the punctuation stage takes " =", the 4093 spaces before it are one
     * piece of single-space tokens (no merge joins spaces here) */
    assert_int_equal(n, sizeof text - 3 + 1);
    assert_int_equal(ids[n - 1], 13);
    for (size_t i = 0; i + 1 < n; i++) assert_int_equal(ids[i], 0);
    rl_free(ids);
    /* spaces then a character no stage takes: one word, no stage splits it */
    memcpy(text + sizeof text - 4, "\xE2\x82\xAC", 4);
    assert_int_equal(rl_tokenizer_encode(tok, text, strlen(text), 0, &ids, &n, &err), RL_OK);
    assert_int_equal(n, sizeof text - 4); /* the bytes of the euro sign have no token */
    rl_free(ids);
    const int32_t trail[] = {22, 0, 0};
    expect_ids(tok, "a  ", 0, trail, 3);
    rl_tokenizer_free(tok);
}

/* WordPiece as llama.cpp's converter stores it: "\u2581x" for a word-initial
 * "x", bare "x" for "##x" */
#define WB "\xE2\x96\x81"
static const char *const wpm_toks[] = {"[UNK]",
                                       "[CLS]",
                                       "[SEP]",
                                       "[MASK]",
                                       WB "hello",
                                       WB "world",
                                       WB "un",
                                       "aff",
                                       "able", /* 0..8 */
                                       WB "a",
                                       "pf",
                                       "el",
                                       WB "!",
                                       WB ",",
                                       WB "\xE4\xB8\xAD",
                                       WB "\xE1\x84\x80",
                                       "\xE1\x85\xA1", /* 9..16 */
                                       WB "x",
                                       "x",
                                       WB "\xCE\xBF"}; /* 17..19 */
static const int32_t wpm_types[] = {3, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
#define N_WPM (sizeof wpm_toks / sizeof wpm_toks[0])

static rl_tokenizer *wpm(void) {
    rl_err err = {0};
    rl_status st;
    rl_tokenizer *tok = build("bert", wpm_toks, wpm_types, N_WPM, NULL, 0, 0, &err, &st);
    if (st) fail_msg("load: %s", err.msg);
    return tok;
}

static void test_wpm_basic(void **state) {
    (void)state;
    rl_tokenizer *tok = wpm();
    assert_int_equal(rl_tokenizer_kind_of(tok), RL_TOKENIZER_WPM);
    assert_int_equal(rl_tokenizer_bos(tok), 1);
    assert_int_equal(rl_tokenizer_sep(tok), 2); /* found by its text */
    /* lowercasing, punctuation as words of their own */
    const int32_t w1[] = {4, 13, 5, 12};
    expect_ids(tok, "Hello, WORLD!", 0, w1, 4);
    /* [CLS] ... [SEP] with ADD_SPECIAL; their text is matched only with PARSE_SPECIAL */
    const int32_t w2[] = {1, 4, 2};
    expect_ids(tok, "hello", RL_TOK_ADD_SPECIAL, w2, 3);
    const int32_t w3[] = {1, 4};
    expect_ids(tok, "[CLS]hello", RL_TOK_PARSE_SPECIAL, w3, 2);
    /* greedy longest match with continuations */
    const int32_t w4[] = {6, 7, 8};
    expect_ids(tok, "unaffable", 0, w4, 3);
    /* a word with no complete split is one [UNK] */
    const int32_t w5[] = {4, 0, 5};
    expect_ids(tok, "hello unaffablez world", 0, w5, 3);
    /* accents stripped after NFD: "Äpfel", and with a combining diaeresis */
    const int32_t w6[] = {9, 10, 11};
    expect_ids(tok, "\xC3\x84pfel", 0, w6, 3);
    expect_ids(tok, "A\xCC\x88pfel", 0, w6, 3);
    /* Greek capital omicron with tonos: NFD, strip, lowercase */
    const int32_t w7[] = {19};
    expect_ids(tok, "\xCE\x8C", 0, w7, 1);
    /* CJK ideographs are words; Hangul syllables decompose into jamo */
    const int32_t w8[] = {14, 14, 15, 16};
    expect_ids(tok, "\xE4\xB8\xAD\xE4\xB8\xAD\xEA\xB0\x80", 0, w8, 4);
    /* controls and format characters vanish (\v, ZWJ, U+0000, invalid
     * UTF-8); Unicode spaces end words */
    const int32_t w9[] = {4, 5};
    expect_ids(tok, "hel\vlo\xE2\x80\x83world", 0, w9, 2); /* U+2003 em space */
    rl_tokenizer_free(tok);
}

static void test_wpm_edges(void **state) {
    (void)state;
    rl_tokenizer *tok = wpm();
    int32_t *ids;
    size_t n;
    rl_err err = {0};
    const char zwj[] = "hel\xE2\x80\x8Dlo\x00\xFFworld\xE3\x80\x80hello";
    assert_int_equal(rl_tokenizer_encode(tok, zwj, sizeof zwj - 1, 0, &ids, &n, &err), RL_OK);
    assert_int_equal(n, 2); /* "helloworld" (no "##world"), then "hello" after U+3000 */
    assert_int_equal(ids[0], 0);
    assert_int_equal(ids[1], 4);
    rl_free(ids);
    /* 100 characters: pieces; 101: [UNK] */
    char xs[102];
    memset(xs, 'x', sizeof xs);
    xs[100] = 0;
    assert_int_equal(rl_tokenizer_encode(tok, xs, 100, 0, &ids, &n, &err), RL_OK);
    assert_int_equal(n, 100);
    assert_int_equal(ids[0], 17);
    assert_int_equal(ids[99], 18);
    rl_free(ids);
    const int32_t unk[] = {0};
    xs[100] = 'x';
    xs[101] = 0;
    expect_ids(tok, xs, 0, unk, 1);
    /* an empty text, and only whitespace: nothing */
    expect_ids(tok, " \t\n", 0, NULL, 0);
    /* decode: the first word's mark is dropped, later ones are spaces */
    const int32_t d[] = {4, 5, 13, 6, 7, 8};
    expect_decode(tok, d, 6, "hello world , unaffable");
    rl_tokenizer_free(tok);
    /* cls_token_id, seperator_token_id and add_sep_token */
    rl_status st;
    tok = build("bert", wpm_toks, wpm_types, N_WPM, NULL, 0, F_WPM_KEYS, &err, &st);
    assert_int_equal(st, RL_OK);
    assert_int_equal(rl_tokenizer_bos(tok), 3);
    assert_int_equal(rl_tokenizer_sep(tok), 0);
    const int32_t cls_only[] = {3, 4};
    expect_ids(tok, "hello", RL_TOK_ADD_SPECIAL, cls_only, 2);
    rl_tokenizer_free(tok);
    /* a WordPiece vocabulary without [UNK] is refused, naming the key */
    const char *const no_unk[] = {"[CLS]", "[SEP]", WB "a"};
    const int32_t no_unk_types[] = {3, 3, 1};
    tok = build("bert", no_unk, no_unk_types, 3, NULL, 0, F_NO_UNK, &err, &st);
    assert_null(tok);
    assert_int_equal(st, RL_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "tokenizer.ggml.unknown_token_id"));
}

static void push_str(rl_detok *d, const char *s, size_t n, size_t want_appended) {
    size_t app;
    rl_err err = {0};
    assert_int_equal(rl_detok_push_bytes(d, s, n, &app, &err), RL_OK);
    assert_int_equal(app, want_appended);
}

static void test_detok_split_utf8(void **state) {
    (void)state;
    rl_tokenizer *tok = spm();
    rl_detok d;
    rl_detok_init(&d, tok, 0);
    size_t app;
    rl_err err = {0};
    /* € as three byte tokens: nothing until the last */
    assert_int_equal(rl_detok_push(&d, 9, &app, &err), RL_OK);
    assert_int_equal(app, 0);
    assert_int_equal(rl_detok_push(&d, 10, &app, &err), RL_OK);
    assert_int_equal(app, 0);
    assert_int_equal(rl_detok_push(&d, 11, &app, &err), RL_OK);
    assert_int_equal(app, 3);
    assert_string_equal(d.buf, "\xE2\x82\xAC");
    rl_detok_clear(&d);
    /* a 4-byte emoji split 1+2+1 */
    push_str(&d, "\xF0", 1, 0);
    push_str(&d, "\x9F\x98", 2, 0);
    push_str(&d, "\x80x", 2, 5);
    assert_string_equal(d.buf, "\xF0\x9F\x98\x80x");
    rl_detok_clear(&d);
    /* an interrupted sequence becomes U+FFFD and the interrupting byte is kept */
    push_str(&d, "\xE2\x82", 2, 0);
    push_str(&d, "A", 1, 4);
    assert_string_equal(d.buf, "\xEF\xBF\xBD"
                               "A");
    rl_detok_clear(&d);
    /* bytes that never start a sequence, overlong and surrogate forms */
    push_str(&d, "\xFF\xC0\x80", 3, 9);
    push_str(&d, "\xED\xA0\x80", 3, 9); /* surrogate: 3 maximal subparts as Python */
    rl_detok_clear(&d);
    /* flush of a held tail */
    push_str(&d, "\xF0\x9F", 2, 0);
    assert_int_equal(rl_detok_flush(&d, &app, &err), RL_OK);
    assert_int_equal(app, 3);
    assert_string_equal(d.buf, "\xEF\xBF\xBD");
    assert_int_equal(rl_detok_push(&d, 12345, &app, &err), RL_ERR_RANGE);
    rl_detok_free(&d);
    /* skip-special */
    rl_detok_init(&d, tok, RL_TOK_SKIP_SPECIAL);
    assert_int_equal(rl_detok_push(&d, 2, &app, &err), RL_OK);
    assert_int_equal(app, 0);
    rl_detok_free(&d);
    rl_tokenizer_free(tok);
}

static void expect_load_error(const char *model, const char *const *toks, const int32_t *types,
                              size_t n, const char *const *merges, size_t n_merges, int bad,
                              rl_status want, const char *needle) {
    rl_err err = {0};
    rl_status st;
    rl_tokenizer *tok = build(model, toks, types, n, merges, n_merges, bad, &err, &st);
    assert_null(tok);
    assert_int_equal(st, want);
    if (!strstr(err.msg, needle)) fail_msg("error '%s' lacks '%s'", err.msg, needle);
}

/* FIM ids: the fim_*_token_id keys, else the families' spellings; pad,
 * rep and sep end a generation; a model without them has -1. */
static void test_fim_ids(void **state) {
    (void)state;
    static const char *const toks[] = {
        "<unk>",          "<s>",          "</s>",      "<|fim_prefix|>", "a", "<fim_suffix>",
        "<|fim_middle|>", "<|file_sep|>", "<reponame>"};
    static const int32_t types[] = {2, 3, 3, 3, 1, 3, 3, 3, 3};
    rl_err err = {0};
    rl_status st;
    rl_tokenizer *tok = build("llama", toks, types, 9, NULL, 0, 0, &err, &st);
    assert_int_equal(st, RL_OK);
    assert_int_equal(rl_tokenizer_fim(tok, RL_FIM_PRE), 3);
    assert_int_equal(rl_tokenizer_fim(tok, RL_FIM_SUF), 5);
    assert_int_equal(rl_tokenizer_fim(tok, RL_FIM_MID), 6);
    assert_int_equal(rl_tokenizer_fim(tok, RL_FIM_PAD), -1);
    assert_int_equal(rl_tokenizer_fim(tok, RL_FIM_REP), 8);
    assert_int_equal(rl_tokenizer_fim(tok, RL_FIM_SEP), 7);
    assert_int_equal(rl_tokenizer_fim(tok, RL_FIM_COUNT), -1);
    assert_true(rl_tokenizer_is_eog(tok, 7) && rl_tokenizer_is_eog(tok, 8));
    assert_false(rl_tokenizer_is_eog(tok, 3) || rl_tokenizer_is_eog(tok, 6));
    rl_tokenizer_free(tok);
    tok = build("llama", toks, types, 9, NULL, 0, F_FIM_KEYS, &err, &st);
    assert_int_equal(st, RL_OK);
    assert_int_equal(rl_tokenizer_fim(tok, RL_FIM_PRE), 4);
    rl_tokenizer_free(tok);
    tok = spm(); /* no FIM spellings at all */
    for (int w = 0; w < RL_FIM_COUNT; w++) assert_int_equal(rl_tokenizer_fim(tok, w), -1);
    rl_tokenizer_free(tok);
    expect_load_error("llama", toks, types, 9, NULL, 0, F_BAD_FIM, RL_ERR_FORMAT,
                      "tokenizer.ggml.fim_mid_token_id");
}

static void test_bad_metadata(void **state) {
    (void)state;
    expect_load_error("llama", spm_toks, spm_types, N_SPM, NULL, 0, F_NO_TOKENS, RL_ERR_FORMAT,
                      "tokenizer.ggml.tokens");
    expect_load_error("llama", spm_toks, spm_types, N_SPM, NULL, 0, F_SHORT_SCORES, RL_ERR_FORMAT,
                      "tokenizer.ggml.scores");
    expect_load_error("llama", spm_toks, spm_types, N_SPM, NULL, 0, F_SCORES_STR, RL_ERR_FORMAT,
                      "tokenizer.ggml.scores");
    expect_load_error("llama", spm_toks, spm_types, N_SPM, NULL, 0, F_FLOAT_TYPES, RL_ERR_FORMAT,
                      "tokenizer.ggml.token_type");
    expect_load_error("llama", spm_toks, spm_types, N_SPM, NULL, 0, F_BAD_TYPE_VALUE, RL_ERR_FORMAT,
                      "tokenizer.ggml.token_type[0]");
    expect_load_error("llama", spm_toks, spm_types, N_SPM, NULL, 0, F_BAD_BOS, RL_ERR_FORMAT,
                      "tokenizer.ggml.bos_token_id");
    expect_load_error("llama", spm_toks, spm_types, N_SPM, NULL, 0, F_BAD_MODEL, RL_ERR_UNSUPPORTED,
                      "tokenizer.ggml.model");
    expect_load_error("gpt2", bpe_toks, bpe_types, N_BPE, bpe_merges, 3, F_BAD_MERGE, RL_ERR_FORMAT,
                      "tokenizer.ggml.merges[0]");
    expect_load_error("gpt2", bpe_toks, bpe_types, N_BPE, bpe_merges, 3, F_MERGE_NO_SPACE,
                      RL_ERR_FORMAT, "tokenizer.ggml.merges[0]");
}

/* Every allocation failure during encode (k-th allocation, k < k_max) is
 * a clean RL_ERR_NOMEM; otherwise the text gives n_want ids. */
static void alloc_failure_loop(rl_tokenizer *(*make)(void), const char *text, size_t n_want,
                               long k_max) {
    for (long k = 0; k < k_max; k++) {
        rl_tokenizer *tok = make();
        rl_alloc_fail_after(k);
        int32_t *ids = NULL;
        size_t n;
        rl_err err = {0};
        rl_status st = rl_tokenizer_encode(tok, text, strlen(text), 0, &ids, &n, &err);
        rl_alloc_fail_after(-1);
        if (st == RL_OK) {
            assert_int_equal(n, n_want);
            rl_free(ids);
        } else {
            assert_int_equal(st, RL_ERR_NOMEM);
        }
        rl_tokenizer_free(tok);
    }
}

static void test_alloc_failure(void **state) {
    (void)state;
    alloc_failure_loop(bpe, "abc ab abc", 4, 200);
    alloc_failure_loop(wpm, "Hello, unaffable", 5, 100); /* WordPiece: its word buffer */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_spm_ids),
        cmocka_unit_test(test_fim_ids),
        cmocka_unit_test(test_bpe_encode),
        cmocka_unit_test(test_detok_split_utf8),
        cmocka_unit_test(test_bad_metadata),
        cmocka_unit_test(test_alloc_failure),
        cmocka_unit_test(test_pre_digits_isolate_no),
        cmocka_unit_test(test_pre_falcon),
        cmocka_unit_test(test_pre_ignore_merges),
        cmocka_unit_test(test_pre_deepseek_trailing_ws),
        cmocka_unit_test(test_wpm_basic),
        cmocka_unit_test(test_wpm_edges),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
