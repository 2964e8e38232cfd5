/* Unit tests for lazy grammars (src/grammar/grammar_lazy.c and the waiting
 * state of grammar_match.c): unconstrained before a trigger, a trigger
 * word starting the grammar at the word (also when split across tokens or
 * in the middle of one), trigger tokens, refused occurrences passed over,
 * EOG while waiting, clone/restore of the waiting state, long byte runs,
 * bad trigger lists, the framed JSON-schema grammar tool calls use, and
 * allocation-failure injection. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "grammar/grammar.h"

/* vocabulary: the 256 single bytes, then EOG (256), a control token (257),
 * then multi-byte pieces "<call>" (258), "x <ca" (259), "ll>{" (260),
 * "}</call>" (261), "<call>!" (262) */
#define NV 263
static rl_vocab_trie *trie(void) {
    static char store[256];
    const char *pieces[NV];
    size_t lens[NV];
    uint8_t kinds[NV];
    for (int i = 0; i < 256; i++) {
        store[i] = (char)i;
        pieces[i] = &store[i];
        lens[i] = 1;
        kinds[i] = RL_VOCAB_NORMAL;
    }
    const char *more[] = {"</s>", "<ctl>", "<call>", "x <ca", "ll>{", "}</call>", "<call>!"};
    for (int i = 0; i < 7; i++) {
        pieces[256 + i] = more[i];
        lens[256 + i] = strlen(more[i]);
        kinds[256 + i] = RL_VOCAB_NORMAL;
    }
    kinds[256] = RL_VOCAB_EOG;
    kinds[257] = RL_VOCAB_EXCLUDE;
    rl_err err;
    rl_vocab_trie *t = rl_vocab_trie_build(NV, pieces, lens, kinds, &err);
    if (!t) fail_msg("trie: %s", err.msg);
    return t;
}

#define CALL_G "root ::= \"<call>{\" [a-z]* \"}</call>\""

static rl_grammar *lazy_ok(const char *text, const char *const *w, int nw, const int32_t *tk,
                           int nt) {
    rl_err err;
    rl_grammar *g = rl_grammar_compile_lazy(text, strlen(text), w, nw, tk, nt, &err);
    if (!g) fail_msg("compile_lazy: %s", err.msg);
    return g;
}

static int n_allowed(rl_gmatch *m) {
    uint64_t bits[(NV + 63) / 64];
    rl_err err;
    return rl_gmatch_allowed(m, bits, &err);
}

static bool allowed(rl_gmatch *m, int32_t id) {
    uint64_t bits[(NV + 63) / 64];
    rl_err err;
    assert_true(rl_gmatch_allowed(m, bits, &err) >= 0);
    return (bits[id >> 6] >> (id & 63)) & 1;
}

static void feed(rl_gmatch *m, const char *s) {
    rl_err err;
    if (rl_gmatch_accept_bytes(m, s, strlen(s), &err) != RL_OK)
        fail_msg("accept '%s': %s", s, err.msg);
}

static void test_waiting_is_unconstrained(void **st) {
    (void)st;
    const char *w[] = {"<call>"};
    rl_grammar *g = lazy_ok(CALL_G, w, 1, NULL, 0);
    assert_true(rl_grammar_is_lazy(g));
    rl_vocab_trie *t = trie();
    rl_err err;
    rl_gmatch *m = rl_gmatch_new(g, t, &err);
    assert_true(rl_gmatch_is_waiting(m));
    assert_int_equal(n_allowed(m), NV); /* everything, even the control token */
    float logits[NV + 3];
    for (int i = 0; i < NV + 3; i++) logits[i] = 1.0f;
    assert_int_equal(rl_gmatch_mask(m, logits, NV + 3, &err), RL_OK);
    for (int i = 0; i < NV + 3; i++) assert_true(logits[i] == 1.0f);
    int32_t forced[8];
    assert_int_equal(rl_gmatch_forced(m, forced, 8), 0);
    assert_true(rl_gmatch_is_accepting(m));
    assert_false(rl_gmatch_is_done(m));
    assert_int_equal(rl_gmatch_min_remaining(m), 0);
    feed(m, "Sure, let me look <that> up. ");
    assert_int_equal(rl_gmatch_accept_token(m, 257, &err),
                     RL_OK); /* control token: fine while waiting */
    assert_true(rl_gmatch_is_waiting(m));
    /* an EOG while waiting ends the output */
    assert_int_equal(rl_gmatch_accept_token(m, 256, &err), RL_OK);
    assert_true(rl_gmatch_is_done(m));
    assert_int_equal(rl_gmatch_accept_token(m, 'a', &err),
                     RL_ERR_INVALID); /* nothing after the end */
    rl_gmatch_free(m);
    /* a plain grammar is never waiting */
    rl_grammar *p = rl_grammar_compile(CALL_G, strlen(CALL_G), &err);
    assert_false(rl_grammar_is_lazy(p));
    m = rl_gmatch_new(p, t, &err);
    assert_false(rl_gmatch_is_waiting(m));
    assert_int_equal(n_allowed(m), 2); /* '<' and "<call>" */
    rl_gmatch_free(m);
    rl_grammar_free(p);
    rl_grammar_free(g);
    rl_vocab_trie_free(t);
}

static void test_trigger_word(void **st) {
    (void)st;
    const char *w[] = {"<call>"};
    rl_grammar *g = lazy_ok(CALL_G, w, 1, NULL, 0);
    rl_vocab_trie *t = trie();
    rl_err err;
    /* the word as one token */
    rl_gmatch *m = rl_gmatch_new(g, t, &err);
    feed(m, "hello ");
    assert_int_equal(rl_gmatch_accept_token(m, 258, &err), RL_OK);
    assert_false(rl_gmatch_is_waiting(m));
    assert_false(rl_gmatch_is_accepting(m));
    assert_int_equal(n_allowed(m), 1); /* only '{' now */
    assert_true(allowed(m, '{'));
    assert_int_equal(rl_gmatch_accept_token(m, 'Z', &err), RL_ERR_INVALID);
    assert_int_equal(rl_gmatch_accept_token(m, 256, &err),
                     RL_ERR_INVALID); /* a call once begun must finish */
    feed(m, "{ab");
    assert_int_equal(rl_gmatch_accept_token(m, 261, &err), RL_OK);
    assert_true(rl_gmatch_is_done(m));
    rl_gmatch_free(m);
    /* the word split across tokens, starting mid-token: "x <ca" + "ll>{" */
    m = rl_gmatch_new(g, t, &err);
    assert_int_equal(rl_gmatch_accept_token(m, 259, &err), RL_OK);
    assert_true(rl_gmatch_is_waiting(m));
    assert_int_equal(rl_gmatch_accept_token(m, 260, &err), RL_OK);
    assert_false(rl_gmatch_is_waiting(m));
    assert_true(allowed(m, 'q'));
    assert_true(allowed(m, 261));
    assert_false(allowed(m, '{'));
    rl_gmatch_free(m);
    /* byte by byte */
    m = rl_gmatch_new(g, t, &err);
    const char *s = "a<b<cal<call>{";
    for (size_t i = 0; s[i]; i++)
        assert_int_equal(rl_gmatch_accept_token(m, (unsigned char)s[i], &err), RL_OK);
    assert_false(rl_gmatch_is_waiting(m));
    feed(m, "z}</call>");
    assert_true(rl_gmatch_is_accepting(m));
    rl_gmatch_free(m);
    /* a control token between the halves breaks the word */
    m = rl_gmatch_new(g, t, &err);
    feed(m, "<ca");
    assert_int_equal(rl_gmatch_accept_token(m, 257, &err), RL_OK);
    feed(m, "ll>{");
    assert_true(rl_gmatch_is_waiting(m));
    rl_gmatch_free(m);
    rl_grammar_free(g);
    rl_vocab_trie_free(t);
}

/* An anchored word ("^<call>") triggers only at the start of the output:
 * at once, after whitespace, after a fence opener ("```json\n"), also
 * when the opener and the word arrive across tokens and after more than a
 * tail's worth of whitespace; not after prose, a lone backtick or a
 * control token.  The plain word beside it still triggers anywhere. */
static void test_anchored_word(void **st) {
    (void)st;
    const char *w[] = {"^<call>"};
    rl_grammar *g = lazy_ok(CALL_G, w, 1, NULL, 0);
    rl_vocab_trie *t = trie();
    rl_err err;
    const char *fire[] = {"", "  \n", "```json\n", "\n```\n  "};
    for (int i = 0; i < 4; i++) {
        rl_gmatch *m = rl_gmatch_new(g, t, &err);
        feed(m, fire[i]);
        feed(m, "<call>{");
        if (rl_gmatch_is_waiting(m)) fail_msg("anchored word after '%s' did not trigger", fire[i]);
        rl_gmatch_free(m);
    }
    const char *quiet[] = {"Sure: ", "`", "x\n```json\n", "``` json x "};
    for (int i = 0; i < 4; i++) {
        rl_gmatch *m = rl_gmatch_new(g, t, &err);
        feed(m, quiet[i]);
        feed(m, "<call>{");
        if (!rl_gmatch_is_waiting(m)) fail_msg("anchored word after '%s' triggered", quiet[i]);
        rl_gmatch_free(m);
    }
    /* byte by byte across a long whitespace run (past the tail) and a fence */
    rl_gmatch *m = rl_gmatch_new(g, t, &err);
    for (int i = 0; i < 3000; i++) assert_int_equal(rl_gmatch_accept_token(m, ' ', &err), RL_OK);
    const char *s = "```py\n<call>{";
    for (size_t i = 0; s[i]; i++)
        assert_int_equal(rl_gmatch_accept_token(m, (unsigned char)s[i], &err), RL_OK);
    assert_false(rl_gmatch_is_waiting(m));
    rl_gmatch_free(m);
    /* prose far back (past the tail) still counts */
    m = rl_gmatch_new(g, t, &err);
    feed(m, "ok");
    for (int i = 0; i < 3000; i++) assert_int_equal(rl_gmatch_accept_token(m, ' ', &err), RL_OK);
    feed(m, "<call>{");
    assert_true(rl_gmatch_is_waiting(m));
    rl_gmatch_free(m);
    /* a control token is output: the start is over */
    m = rl_gmatch_new(g, t, &err);
    assert_int_equal(rl_gmatch_accept_token(m, 257, &err), RL_OK);
    feed(m, "<call>{");
    assert_true(rl_gmatch_is_waiting(m));
    rl_gmatch_free(m);
    rl_grammar_free(g);
    /* beside a plain word: the plain one fires after prose */
    const char *w2[] = {"^<call>", "<call>!"};
    g = lazy_ok("root ::= \"<call>{\" [a-z]* \"}</call>\" | \"<call>!\" [a-z]*", w2, 2, NULL, 0);
    m = rl_gmatch_new(g, t, &err);
    feed(m, "Sure: <call>{");
    assert_true(rl_gmatch_is_waiting(m));
    feed(m, "} <call>!");
    assert_false(rl_gmatch_is_waiting(m));
    rl_gmatch_free(m);
    rl_grammar_free(g);
    rl_vocab_trie_free(t);
}

static void test_refused_occurrence(void **st) {
    (void)st;
    const char *w[] = {"<call>"};
    rl_grammar *g = lazy_ok(CALL_G, w, 1, NULL, 0);
    rl_vocab_trie *t = trie();
    rl_err err;
    rl_gmatch *m = rl_gmatch_new(g, t, &err);
    /* "<call>!" runs past the word into bytes the grammar refuses: passed over */
    assert_int_equal(rl_gmatch_accept_token(m, 262, &err), RL_OK);
    assert_true(rl_gmatch_is_waiting(m));
    assert_int_equal(n_allowed(m), NV);
    /* a later occurrence in the same run of bytes is found */
    feed(m, " then <call> no, <call>{");
    assert_false(rl_gmatch_is_waiting(m));
    feed(m, "}</call>");
    assert_true(rl_gmatch_is_done(m));
    rl_gmatch_free(m);
    /* accept_bytes with the word and refused bytes in one call leaves the
     * matcher waiting and at the grammar's start */
    m = rl_gmatch_new(g, t, &err);
    feed(m, "<call>{A");
    assert_true(rl_gmatch_is_waiting(m));
    feed(m, "<call>{b}</call>");
    assert_true(rl_gmatch_is_done(m));
    rl_gmatch_free(m);
    rl_grammar_free(g);
    rl_vocab_trie_free(t);
}

static void test_trigger_token_and_words(void **st) {
    (void)st;
    /* a trigger token: the grammar matches what follows it */
    int32_t tk[] = {257};
    rl_grammar *g = lazy_ok("root ::= \"{\" [0-9]+ \"}\"", NULL, 0, tk, 1);
    rl_vocab_trie *t = trie();
    rl_err err;
    rl_gmatch *m = rl_gmatch_new(g, t, &err);
    feed(m, "text {not yet");
    assert_true(rl_gmatch_is_waiting(m));
    assert_int_equal(rl_gmatch_accept_token(m, 257, &err), RL_OK);
    assert_false(rl_gmatch_is_waiting(m));
    assert_int_equal(n_allowed(m), 1);
    feed(m, "{12}");
    assert_true(rl_gmatch_is_done(m));
    rl_gmatch_free(m);
    rl_grammar_free(g);
    /* several words: the earliest one that the grammar admits wins */
    const char *w[] = {"[TOOL]", "<call>"};
    g = lazy_ok("root ::= \"<call>{\" [a-z]* \"}</call>\" | \"[TOOL]\" [0-9]", w, 2, NULL, 0);
    m = rl_gmatch_new(g, t, &err);
    feed(m, "ok [TOOL]7");
    assert_false(rl_gmatch_is_waiting(m));
    assert_true(rl_gmatch_is_done(m));
    rl_gmatch_free(m);
    /* a long run (past the tail buffer) with the word near its end */
    m = rl_gmatch_new(g, t, &err);
    char big[5000];
    memset(big, 'x', sizeof big);
    memcpy(big + 4990, "<call>{ab", 9);
    assert_int_equal(rl_gmatch_accept_bytes(m, big, 4999, &err), RL_OK);
    assert_false(rl_gmatch_is_waiting(m));
    assert_true(allowed(m, 261));
    rl_gmatch_free(m);
    /* the word straddling a chunk boundary of the tail buffer */
    for (size_t at = 1000; at < 1100; at += 7) {
        m = rl_gmatch_new(g, t, &err);
        memset(big, 'y', sizeof big);
        memcpy(big + at, "<call>{", 7);
        assert_int_equal(rl_gmatch_accept_bytes(m, big, at + 7, &err), RL_OK);
        assert_false(rl_gmatch_is_waiting(m));
        rl_gmatch_free(m);
    }
    rl_grammar_free(g);
    rl_vocab_trie_free(t);
}

static void test_clone_restore(void **st) {
    (void)st;
    const char *w[] = {"<call>"};
    rl_grammar *g = lazy_ok(CALL_G, w, 1, NULL, 0);
    rl_vocab_trie *t = trie();
    rl_err err;
    rl_gmatch *m = rl_gmatch_new(g, t, &err);
    feed(m, "pre <ca");
    rl_gmatch *c = rl_gmatch_clone(m, &err);
    assert_non_null(c);
    assert_true(rl_gmatch_is_waiting(c));
    feed(c, "ll>{"); /* the clone kept the partial word */
    assert_false(rl_gmatch_is_waiting(c));
    assert_true(rl_gmatch_is_waiting(m));
    assert_int_equal(rl_gmatch_restore(c, m, &err), RL_OK); /* rollback to waiting */
    assert_true(rl_gmatch_is_waiting(c));
    assert_int_equal(n_allowed(c), NV);
    feed(c, "ll>{q}</call>");
    assert_true(rl_gmatch_is_done(c));
    assert_int_equal(rl_gmatch_restore(m, c, &err), RL_OK); /* and forward to active */
    assert_false(rl_gmatch_is_waiting(m));
    assert_true(rl_gmatch_is_done(m));
    rl_gmatch_free(c);
    rl_gmatch_free(m);
    rl_grammar_free(g);
    rl_vocab_trie_free(t);
}

static void expect_bad(const char *const *w, int nw, const int32_t *tk, int nt,
                       const char *needle) {
    rl_err err;
    rl_grammar *g = rl_grammar_compile_lazy(CALL_G, strlen(CALL_G), w, nw, tk, nt, &err);
    if (g) fail_msg("bad trigger list accepted (%s)", needle);
    assert_int_equal(err.code, RL_ERR_INVALID);
    if (!strstr(err.msg, needle)) fail_msg("error '%s' lacks '%s'", err.msg, needle);
}

static void test_bad_triggers(void **st) {
    (void)st;
    expect_bad(NULL, 0, NULL, 0, "trigger");
    const char *empty[] = {""};
    expect_bad(empty, 1, NULL, 0, "trigger word 0");
    char longw[RL_GRAMMAR_MAX_TRIGGER_LEN + 1];
    memset(longw, 'a', sizeof longw - 1);
    longw[sizeof longw - 1] = 0;
    const char *lw[] = {"ok", longw};
    expect_bad(lw, 2, NULL, 0, "trigger word 1");
    const char *many[RL_GRAMMAR_MAX_TRIGGERS + 1];
    for (int i = 0; i <= RL_GRAMMAR_MAX_TRIGGERS; i++) many[i] = "w";
    expect_bad(many, RL_GRAMMAR_MAX_TRIGGERS + 1, NULL, 0, "trigger");
    int32_t neg[] = {-3};
    expect_bad(NULL, 0, neg, 1, "negative");
    /* a bad grammar is reported as rl_grammar_compile reports it */
    rl_err err;
    const char *w[] = {"<call>"};
    assert_null(rl_grammar_compile_lazy("root ::= (", 10, w, 1, NULL, 0, &err));
    assert_true(err.code != RL_OK);
}

/* rl_json_schema_to_grammar_framed: the value between the frame's strings,
 * one or several items, special characters in the strings escaped. */
static void test_framed_schema(void **st) {
    (void)st;
    static const char schema[] =
        "{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"integer\"}},"
        "\"required\":[\"n\"],\"additionalProperties\":false}";
    rl_grammar_frame f = {
        .item_open = "<c>\n\"", .item_close = "\"\\</c>", .sep = "\n", .many = true};
    char *txt = NULL;
    size_t n = 0;
    rl_err err;
    assert_int_equal(
        rl_json_schema_to_grammar_framed(schema, sizeof schema - 1, &f, &txt, &n, &err), RL_OK);
    rl_grammar *g = rl_grammar_compile(txt, n, &err);
    if (!g) fail_msg("framed grammar: %s\n%s", err.msg, txt);
    rl_vocab_trie *t = trie();
    const char *yes[] = {"<c>\n\"{\"n\": 1}\"\\</c>",
                         "<c>\n\"{\"n\":2}\"\\</c>\n<c>\n\"{\"n\": 3}\"\\</c>"};
    const char *no[] = {"{\"n\": 1}", "<c>\n\"{\"n\": \"x\"}\"\\</c>",
                        "<c>\n\"{\"n\": 1}\"\\</c><c>"};
    for (int i = 0; i < 2; i++) {
        rl_gmatch *m = rl_gmatch_new(g, t, &err);
        assert_int_equal(rl_gmatch_accept_bytes(m, yes[i], strlen(yes[i]), &err), RL_OK);
        assert_true(rl_gmatch_is_accepting(m));
        rl_gmatch_free(m);
    }
    for (int i = 0; i < 3; i++) {
        rl_gmatch *m = rl_gmatch_new(g, t, &err);
        bool ok = rl_gmatch_accept_bytes(m, no[i], strlen(no[i]), &err) == RL_OK &&
                  rl_gmatch_is_accepting(m);
        assert_false(ok);
        rl_gmatch_free(m);
    }
    rl_grammar_free(g);
    rl_free(txt);
    /* one item only, with an outer frame */
    rl_grammar_frame f2 = {.open = "[", .close = "]", .sep = ",", .many = false};
    assert_int_equal(
        rl_json_schema_to_grammar_framed(schema, sizeof schema - 1, &f2, &txt, &n, &err), RL_OK);
    g = rl_grammar_compile(txt, n, &err);
    assert_non_null(g);
    rl_gmatch *m = rl_gmatch_new(g, t, &err);
    assert_int_equal(rl_gmatch_accept_bytes(m, "[{\"n\":5}]", 9, &err), RL_OK);
    assert_true(rl_gmatch_is_done(m));
    rl_gmatch_free(m);
    m = rl_gmatch_new(g, t, &err);
    assert_int_equal(rl_gmatch_accept_bytes(m, "[{\"n\":5},", 9, &err), RL_ERR_INVALID);
    rl_gmatch_free(m);
    rl_grammar_free(g);
    rl_free(txt);
    /* bare: the framed form or the value alone; lazily, a trigger word at
     * the value's first bytes starts the unframed value, the frame's tag
     * the framed one */
    rl_grammar_frame f3 = {.item_open = "<call>", .item_close = "</call>", .bare = true};
    assert_int_equal(
        rl_json_schema_to_grammar_framed(schema, sizeof schema - 1, &f3, &txt, &n, &err), RL_OK);
    const char *w[] = {"<call>", "{\"n\""};
    g = rl_grammar_compile_lazy(txt, n, w, 2, NULL, 0, &err);
    if (!g) fail_msg("bare grammar: %s\n%s", err.msg, txt);
    const char *outs[] = {"Sure. <call>{\"n\": 1}</call>", "{\"n\": 7}"};
    for (int i = 0; i < 2; i++) {
        m = rl_gmatch_new(g, t, &err);
        assert_int_equal(rl_gmatch_accept_bytes(m, outs[i], strlen(outs[i]), &err), RL_OK);
        assert_false(rl_gmatch_is_waiting(m));
        assert_true(rl_gmatch_is_done(m));
        rl_gmatch_free(m);
    }
    m = rl_gmatch_new(g, t, &err); /* a begun bare call stays valid */
    assert_int_equal(rl_gmatch_accept_bytes(m, "{\"n\": ", 6, &err), RL_OK);
    assert_false(rl_gmatch_is_waiting(m));
    assert_int_equal(rl_gmatch_accept_bytes(m, "\"x\"", 3, &err), RL_ERR_INVALID);
    rl_gmatch_free(m);
    rl_grammar_free(g);
    rl_free(txt);
    rl_vocab_trie_free(t);
}

static void test_alloc_failure(void **st) {
    (void)st;
    rl_vocab_trie *t = trie();
    const char *w[] = {"<call>"};
    rl_err err;
    for (int n = 0; n < 200; n++) {
        rl_alloc_fail_after(n);
        rl_grammar *g = rl_grammar_compile_lazy(CALL_G, strlen(CALL_G), w, 1, NULL, 0, &err);
        rl_gmatch *m = g ? rl_gmatch_new(g, t, &err) : NULL;
        rl_gmatch *c = m ? rl_gmatch_clone(m, &err) : NULL;
        if (m) {
            (void)rl_gmatch_accept_bytes(m, "x<call>{ab}", 11, &err);
            (void)n_allowed(m);
        }
        rl_alloc_fail_after(-1);
        rl_gmatch_free(c);
        rl_gmatch_free(m);
        rl_grammar_free(g);
    }
    rl_vocab_trie_free(t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_waiting_is_unconstrained),
        cmocka_unit_test(test_trigger_word),
        cmocka_unit_test(test_refused_occurrence),
        cmocka_unit_test(test_anchored_word),
        cmocka_unit_test(test_trigger_token_and_words),
        cmocka_unit_test(test_clone_restore),
        cmocka_unit_test(test_bad_triggers),
        cmocka_unit_test(test_framed_schema),
        cmocka_unit_test(test_alloc_failure),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
