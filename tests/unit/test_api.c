/* The text side of the public API (include/redline.h, src/engine/api.c),
 * used exactly as an embedder would: this file includes redline.h only.
 *
 * On the default model (models/smollm2-135m.gguf or $REDLINE_MODEL):
 * rl_vocab_load and rl_engine_vocab agree; tokenize/detokenize round-trip
 * any UTF-8; control tokens are parsed only when asked; the streaming
 * detokenizer gives the one-shot text in complete characters; the chat
 * template renders the file's template; EOG and special ids are reported;
 * grammar construction reports bad input; rl_engine_embed gives the same
 * unit vector inline, on the step thread and beside a generation.  On Gemma 3 (when fetched): the
 * built-in template fallback and BOS handling.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "redline.h"

static const char *model_path(void) {
    const char *m = getenv("REDLINE_MODEL");
    return m && *m ? m : "models/smollm2-135m.gguf";
}

static const char *GEMMA = "models/gemma3-270m.gguf";

static bool exists(const char *p) {
    FILE *f = fopen(p, "rb");
    if (f) fclose(f);
    return f != NULL;
}

static rl_vocab *load(const char *path) {
    rl_err err = {0};
    rl_vocab *v = NULL;
    if (rl_vocab_load(path, &v, &err)) fail_msg("rl_vocab_load %s: %s", path, err.msg);
    return v;
}

/* True when s[0..n) is whole, valid UTF-8 (no sequence cut at the end). */
static bool utf8_whole(const char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        size_t l = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (!l || i + l > n) return false;
        for (size_t k = 1; k < l; k++)
            if (((unsigned char)s[i + k] & 0xC0) != 0x80) return false;
        i += l;
    }
    return true;
}

static void test_load_errors(void **state) {
    (void)state;
    rl_err err = {0};
    rl_vocab *v = (rl_vocab *)&err; /* must be reset to NULL */
    assert_int_not_equal(rl_vocab_load("models/absent.gguf", &v, &err), RL_OK);
    assert_null(v);
    assert_true(strlen(err.msg) > 0);
    rl_vocab_free(NULL);
}

static void test_engine_vocab_matches_file(void **state) {
    (void)state;
    rl_err err = {0};
    rl_engine_params ep;
    rl_engine_params_default(&ep);
    ep.model_path = model_path();
    ep.max_seqs = 1;
    ep.n_ctx = 256;
    rl_engine *e = NULL;
    assert_int_equal(rl_engine_new(&ep, &e, &err), RL_OK);
    rl_vocab *ve = NULL, *vf = load(model_path());
    assert_int_equal(rl_engine_vocab(e, &ve, &err), RL_OK);
    rl_model_info a, b;
    rl_vocab_model_info(ve, &a);
    rl_vocab_model_info(vf, &b);
    assert_string_equal(a.name, b.name);
    assert_string_equal(a.arch, b.arch);
    assert_string_equal(a.chat_template, b.chat_template);
    assert_int_equal(a.n_vocab, b.n_vocab);
    assert_int_equal(a.n_ctx_train, b.n_ctx_train);
    assert_int_equal(a.n_layer, b.n_layer);
    assert_int_equal(a.n_embd, b.n_embd);
    assert_int_equal(a.n_eog, b.n_eog);
    assert_int_equal(a.bos, b.bos);
    assert_int_equal(a.eos, b.eos);
    assert_true(a.n_layer > 0 && a.n_embd > 0 && a.n_head > 0 && a.head_dim > 0 &&
                a.n_ctx_train > 0);
    const char *text = "The quick brown fox <|im_start|> jumps.";
    int32_t *x = NULL, *y = NULL, nx = 0, ny = 0;
    unsigned fl = RL_TOKENIZE_ADD_BOS | RL_TOKENIZE_PARSE_SPECIAL;
    assert_int_equal(rl_tokenize(ve, text, strlen(text), fl, &x, &nx, &err), RL_OK);
    assert_int_equal(rl_tokenize(vf, text, strlen(text), fl, &y, &ny, &err), RL_OK);
    assert_int_equal(nx, ny);
    assert_memory_equal(x, y, (size_t)nx * sizeof *x);
    /* the prompt submits through the engine: its ids are in range */
    rl_gen_params gp;
    rl_gen_params_default(&gp);
    gp.max_tokens = 2;
    uint64_t id;
    assert_int_equal(rl_engine_submit(e, x, nx, &gp, &id, &err), RL_OK);
    rl_event ev;
    int steps = 0;
    do {
        rl_engine_step(e);
        assert_true(++steps < 100);
    } while (rl_engine_next(e, id, &ev, 0) != RL_OK || ev.kind != RL_EV_DONE);
    assert_int_equal(ev.n_prompt, nx);
    rl_free(x);
    rl_free(y);
    rl_engine_free(e); /* the engine's vocabulary may outlive the engine... */
    rl_vocab_free(ve); /* ...as long as it is only freed */
    rl_vocab_free(vf);
}

/* rl_engine_embed: unit length, the same vector with and without the step
 * thread and with a generation in flight (its own forward), different
 * inputs give different vectors, errors name "input". */
static void test_engine_embed(void **state) {
    (void)state;
    rl_err err = {0};
    rl_engine_params ep;
    rl_engine_params_default(&ep);
    ep.model_path = model_path();
    ep.max_seqs = 2;
    ep.n_ctx = 256;
    ep.max_batch_tokens = 8; /* a 20-token input runs in 3 chunks */
    rl_engine *e = NULL;
    assert_int_equal(rl_engine_new(&ep, &e, &err), RL_OK);
    assert_true(rl_engine_can_generate(e));
    assert_string_equal(rl_engine_pooling(e), "mean");
    assert_int_equal(rl_engine_embed_max_tokens(e), 256);
    int32_t E = rl_engine_n_embd(e);
    float *a = calloc((size_t)E, sizeof *a), *b = calloc((size_t)E, sizeof *b),
          *c = calloc((size_t)E, sizeof *c);
    int32_t toks[20];
    for (int i = 0; i < 20; i++) toks[i] = 500 + 37 * i;
    assert_int_equal(rl_engine_embed(e, toks, 20, a, &err), RL_OK); /* no thread: inline */
    double norm = 0;
    for (int32_t d = 0; d < E; d++) norm += (double)a[d] * a[d];
    assert_true(norm > 0.9999 && norm < 1.0001);
    assert_int_equal(rl_engine_embed(e, toks, 10, c, &err), RL_OK);
    assert_true(memcmp(a, c, (size_t)E * sizeof *a) != 0);
    assert_int_equal(rl_engine_embed(e, toks, 0, b, &err), RL_ERR_RANGE);
    assert_non_null(strstr(err.msg, "input"));
    int32_t bad[2] = {1, 1 << 30};
    assert_int_equal(rl_engine_embed(e, bad, 2, b, &err), RL_ERR_RANGE);
    assert_int_equal(rl_engine_embed(e, toks, 257, b, &err), RL_ERR_LIMIT);
    assert_non_null(strstr(err.msg, "input"));
    /* with the step thread and a generation running */
    assert_int_equal(rl_engine_start(e, &err), RL_OK);
    rl_gen_params gp;
    rl_gen_params_default(&gp);
    gp.max_tokens = 24;
    gp.ignore_eos = true;
    uint64_t id;
    assert_int_equal(rl_engine_submit(e, toks, 12, &gp, &id, &err), RL_OK);
    assert_int_equal(rl_engine_embed(e, toks, 20, b, &err), RL_OK);
    assert_memory_equal(a, b, (size_t)E * sizeof *a);
    rl_event ev;
    do assert_int_equal(rl_engine_next(e, id, &ev, 60000), RL_OK);
    while (ev.kind != RL_EV_DONE);
    assert_int_equal(ev.finish, RL_FINISH_LENGTH);
    /* every block went back (the stats are published at the end of a step) */
    int32_t used = -1;
    for (int i = 0; i < 500 && used != 0; i++) {
        used = rl_engine_get_stats(e).kv_blocks_used;
        if (used) nanosleep(&(struct timespec){0, 10000000}, NULL);
    }
    assert_int_equal(used, 0);
    free(a);
    free(b);
    free(c);
    rl_engine_free(e);
}

static void test_tokenize_roundtrip(void **state) {
    (void)state;
    rl_vocab *v = load(model_path());
    rl_err err = {0};
    const char *texts[] = {"Hello world", "Grüße, 世界! 🙂 café\n\ttabs", "",
                           "  leading spaces", "<|im_start|>user"};
    for (size_t t = 0; t < sizeof texts / sizeof texts[0]; t++) {
        int32_t *ids = NULL, n = 0;
        assert_int_equal(rl_tokenize(v, texts[t], strlen(texts[t]), 0, &ids, &n, &err), RL_OK);
        char *out = NULL;
        size_t len = 0;
        assert_int_equal(rl_detokenize(v, ids, (size_t)n, 0, &out, &len, &err), RL_OK);
        assert_int_equal(len, strlen(texts[t]));
        assert_string_equal(out, texts[t]);
        rl_free(out);
        rl_free(ids);
    }
    /* control tokens: one id only when parsed */
    const char *ctl = "<|im_start|>";
    int32_t *a = NULL, *b = NULL, na = 0, nb = 0;
    assert_int_equal(rl_tokenize(v, ctl, strlen(ctl), RL_TOKENIZE_PARSE_SPECIAL, &a, &na, &err),
                     RL_OK);
    assert_int_equal(rl_tokenize(v, ctl, strlen(ctl), 0, &b, &nb, &err), RL_OK);
    assert_int_equal(na, 1);
    assert_true(nb > 1);
    size_t pl = 0;
    const char *p = rl_token_piece(v, a[0], &pl);
    assert_non_null(p);
    assert_int_equal(pl, strlen(ctl));
    assert_memory_equal(p, ctl, pl);
    /* rendered as nothing with SKIP_SPECIAL */
    char *out = NULL;
    size_t len = 1;
    assert_int_equal(rl_detokenize(v, a, 1, RL_DETOKENIZE_SKIP_SPECIAL, &out, &len, &err), RL_OK);
    assert_int_equal(len, 0);
    rl_free(out);
    /* out-of-range ids are errors, not crashes */
    int32_t bad[2] = {1, 1 << 30};
    assert_int_equal(rl_detokenize(v, bad, 2, 0, &out, &len, &err), RL_ERR_RANGE);
    assert_null(rl_token_piece(v, -1, &pl));
    assert_int_equal(pl, 0);
    rl_free(a);
    rl_free(b);
    rl_vocab_free(v);
}

static void test_streaming_detokenizer(void **state) {
    (void)state;
    rl_vocab *v = load(model_path());
    rl_err err = {0};
    const char *text = "Emoji 🙂🙃, CJK 世界, accents é è ü — and a long word: "
                       "antidisestablishmentarianism.";
    int32_t *ids = NULL, n = 0;
    assert_int_equal(rl_tokenize(v, text, strlen(text), 0, &ids, &n, &err), RL_OK);
    rl_detokenizer *d = NULL;
    assert_int_equal(rl_detokenizer_new(v, 0, &d, &err), RL_OK);
    char buf[512];
    size_t total = 0;
    int held = 0; /* pushes that returned nothing (a character still incomplete) */
    for (int32_t i = 0; i <= n; i++) {
        const char *p;
        size_t len;
        rl_status st = i < n ? rl_detokenizer_push(d, ids[i], &p, &len, &err)
                             : rl_detokenizer_flush(d, &p, &len, &err);
        assert_int_equal(st, RL_OK);
        assert_true(utf8_whole(p, len));
        held += i < n && len == 0;
        assert_true(total + len < sizeof buf);
        memcpy(buf + total, p, len);
        total += len;
    }
    assert_int_equal(total, strlen(text));
    assert_memory_equal(buf, text, total);
    assert_true(held > 0); /* byte-level BPE splits the emoji: the hold-back was exercised */
    const char *p;
    size_t len;
    assert_int_equal(rl_detokenizer_push(d, -5, &p, &len, &err), RL_ERR_RANGE);
    rl_detokenizer_free(d);
    rl_detokenizer_free(NULL);
    rl_free(ids);
    rl_vocab_free(v);
}

static void test_chat_render_and_specials(void **state) {
    (void)state;
    rl_vocab *v = load(model_path());
    rl_err err = {0};
    rl_model_info mi;
    rl_vocab_model_info(v, &mi);
    assert_true(mi.has_chat_template);
    assert_string_equal(mi.chat_template, "model");
    rl_chat_msg msgs[] = {{"system", "Be brief."}, {"user", "hi there"}};
    char *a = NULL, *b = NULL;
    size_t la = 0, lb = 0;
    assert_int_equal(rl_chat_render(v, msgs, 2, true, &a, &la, &err), RL_OK);
    assert_int_equal(rl_chat_render(v, msgs, 2, false, &b, &lb, &err), RL_OK);
    assert_non_null(strstr(a, "hi there"));
    assert_non_null(strstr(a, "Be brief."));
    assert_true(la > lb && !strncmp(a, b, lb)); /* the generation prompt is appended */
    assert_non_null(strstr(a + lb, "assistant"));
    rl_free(a);
    rl_free(b);
    /* end of generation: eos is one of them, listed ascending */
    assert_true(mi.n_eog >= 1 && mi.eos >= 0);
    bool has_eos = false;
    for (int i = 0; i < mi.n_eog && i < RL_MAX_EOG; i++) {
        assert_true(rl_token_is_eog(v, mi.eog[i]));
        if (i) assert_true(mi.eog[i] > mi.eog[i - 1]);
        has_eos |= mi.eog[i] == mi.eos;
    }
    assert_true(has_eos);
    assert_false(rl_token_is_eog(v, -1));
    assert_false(rl_token_is_eog(v, mi.n_vocab));
    rl_vocab_free(v);
}

static void test_builtin_template_and_bos(void **state) {
    (void)state;
    if (!exists(GEMMA)) skip();
    rl_vocab *v = load(GEMMA);
    rl_err err = {0};
    rl_model_info mi;
    rl_vocab_model_info(v, &mi);
    assert_false(mi.has_chat_template); /* our Gemma 3 file is a base model */
    assert_string_equal(mi.chat_template, "gemma");
    rl_chat_msg m = {"user", "hello"};
    char *t = NULL;
    size_t tl = 0;
    assert_int_equal(rl_chat_render(v, &m, 1, true, &t, &tl, &err), RL_OK);
    assert_non_null(strstr(t, "<start_of_turn>user"));
    assert_non_null(strstr(t, "<start_of_turn>model"));
    /* BOS: added once, also when the text already spells it */
    assert_true(mi.add_bos && mi.bos >= 0);
    int32_t *ids = NULL, n = 0;
    unsigned fl = RL_TOKENIZE_ADD_BOS | RL_TOKENIZE_PARSE_SPECIAL;
    assert_int_equal(rl_tokenize(v, t, tl, fl, &ids, &n, &err), RL_OK);
    assert_true(n > 2 && ids[0] == mi.bos && ids[1] != mi.bos);
    rl_free(ids);
    assert_int_equal(rl_tokenize(v, "hello", 5, 0, &ids, &n, &err), RL_OK);
    assert_true(n >= 1 && ids[0] != mi.bos);
    rl_free(ids);
    rl_free(t);
    rl_vocab_free(v);
}

static void test_grammar_constructors(void **state) {
    (void)state;
    rl_err err = {0};
    const char *gbnf = "root ::= \"yes\" | \"no\"";
    rl_grammar *g = rl_gen_grammar_new(RL_GRAMMAR_GBNF, gbnf, strlen(gbnf), &err);
    assert_non_null(g);
    rl_gen_grammar_free(g);
    const char *schema = "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}}}";
    g = rl_gen_grammar_new(RL_GRAMMAR_JSON_SCHEMA, schema, strlen(schema), &err);
    assert_non_null(g);
    rl_gen_grammar_free(g);
    const char *bad = "{\"type\":\"bogus\"}";
    assert_null(rl_gen_grammar_new(RL_GRAMMAR_JSON_SCHEMA, bad, strlen(bad), &err));
    assert_non_null(strstr(err.msg, "bogus"));
    assert_null(rl_gen_grammar_new(RL_GRAMMAR_GBNF, "root ::= (", 10, &err));
    assert_true(strlen(err.msg) > 0);
    assert_null(rl_gen_grammar_new((rl_grammar_syntax)9, gbnf, strlen(gbnf), &err));
    assert_int_equal(err.code, RL_ERR_INVALID);
    rl_gen_grammar_free(NULL);
}

int main(void) {
    if (!exists(model_path())) {
        fprintf(stderr, "test_api: model %s not found\n", model_path());
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_load_errors),
        cmocka_unit_test(test_engine_vocab_matches_file),
        cmocka_unit_test(test_engine_embed),
        cmocka_unit_test(test_tokenize_roundtrip),
        cmocka_unit_test(test_streaming_detokenizer),
        cmocka_unit_test(test_chat_render_and_specials),
        cmocka_unit_test(test_builtin_template_and_bos),
        cmocka_unit_test(test_grammar_constructors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
