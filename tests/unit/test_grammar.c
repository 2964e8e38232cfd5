/* Unit tests for the grammar engine (src/grammar/grammar*.c, json_schema.c):
 * parsing and matching of each syntax feature, hostile grammars rejected
 * with a message, runtime bounds, token masks on synthetic vocabularies
 * checked against brute force (every token tried one by one), the mask
 * cache, EOG handling, jump-forward, the closing mode, the JSON-schema
 * converter, and allocation-failure injection. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "grammar/grammar.h"

/* vocabulary: the 256 single bytes, then EOG (id 256), then a control token */
static rl_vocab_trie *byte_trie(void) {
    static char store[256];
    const char *pieces[258];
    size_t lens[258];
    uint8_t kinds[258];
    for (int i = 0; i < 256; i++) {
        store[i] = (char)i;
        pieces[i] = &store[i];
        lens[i] = 1;
        kinds[i] = RL_VOCAB_NORMAL;
    }
    pieces[256] = "</s>", lens[256] = 4, kinds[256] = RL_VOCAB_EOG;
    pieces[257] = "<ctl>", lens[257] = 5, kinds[257] = RL_VOCAB_EXCLUDE;
    rl_err err;
    rl_vocab_trie *t = rl_vocab_trie_build(258, pieces, lens, kinds, &err);
    if (!t) fail_msg("trie: %s", err.msg);
    return t;
}

static rl_grammar *compile_ok(const char *text) {
    rl_err err;
    rl_grammar *g = rl_grammar_compile(text, strlen(text), &err);
    if (!g) fail_msg("compile '%s': %s", text, err.msg);
    return g;
}

/* 1 = accepted as a complete sentence, 0 = valid prefix only, -1 = rejected */
static int run(const rl_grammar *g, const char *s, size_t n) {
    static rl_vocab_trie *t;
    if (!t) t = byte_trie();
    rl_err err;
    rl_gmatch *m = rl_gmatch_new(g, t, &err);
    assert_non_null(m);
    int r = rl_gmatch_accept_bytes(m, s, n, &err) != RL_OK ? -1 : rl_gmatch_is_accepting(m) ? 1 : 0;
    rl_gmatch_free(m);
    return r;
}
#define RUN(g, s) run((g), (s), strlen(s))

static void expect_error(const char *text, rl_status code, const char *needle) {
    rl_err err;
    rl_grammar *g = rl_grammar_compile(text, strlen(text), &err);
    if (g) fail_msg("grammar unexpectedly compiled: %s", text);
    assert_int_equal(err.code, code);
    if (!strstr(err.msg, needle)) fail_msg("error '%s' lacks '%s'", err.msg, needle);
}

static void test_literals_and_alternatives(void **st) {
    (void)st;
    rl_grammar *g = compile_ok("root ::= \"ab\" | \"cd\" x\nx ::= \"e\"  # comment\n");
    assert_int_equal(RUN(g, "ab"), 1);
    assert_int_equal(RUN(g, "cde"), 1);
    assert_int_equal(RUN(g, "cd"), 0);
    assert_int_equal(RUN(g, "a"), 0);
    assert_int_equal(RUN(g, "abc"), -1);
    assert_int_equal(RUN(g, "x"), -1);
    assert_int_equal(RUN(g, ""), 0);
    rl_grammar_free(g);
    g = compile_ok("root ::= \"\\n\\t\\\\\\\"\\x41\\u00e9\\U0001F600\"");
    assert_int_equal(RUN(g, "\n\t\\\"A\xc3\xa9\xf0\x9f\x98\x80"), 1);
    rl_grammar_free(g);
    /* multi-line bodies continue until the next definition */
    g = compile_ok("root ::= a\n  | b\na ::= \"1\"\nb ::=\n  \"2\"\n  \"3\"\n");
    assert_int_equal(RUN(g, "1"), 1);
    assert_int_equal(RUN(g, "23"), 1);
    assert_int_equal(RUN(g, "2"), 0);
    rl_grammar_free(g);
}

static void test_classes(void **st) {
    (void)st;
    rl_grammar *g = compile_ok("root ::= [a-c0-9_]");
    assert_int_equal(RUN(g, "b"), 1);
    assert_int_equal(RUN(g, "7"), 1);
    assert_int_equal(RUN(g, "_"), 1);
    assert_int_equal(RUN(g, "d"), -1);
    rl_grammar_free(g);
    g = compile_ok("root ::= [^a\"]");
    assert_int_equal(RUN(g, "b"), 1);
    assert_int_equal(RUN(g, "a"), -1);
    assert_int_equal(RUN(g, "\""), -1);
    assert_int_equal(RUN(g, "\xc3\xa9"), 1);         /* é */
    assert_int_equal(RUN(g, "\xf0\x9f\x98\x80"), 1); /* emoji */
    assert_int_equal(RUN(g, "\xc3"), 0);             /* incomplete */
    assert_int_equal(RUN(g, "\xff"), -1);            /* never valid UTF-8 */
    assert_int_equal(RUN(g, "\xed\xa0\x80"), -1);    /* surrogate */
    assert_int_equal(RUN(g, "\xc0\x80"), -1);        /* overlong */
    rl_grammar_free(g);
    g = compile_ok("root ::= [α-ω]+");
    assert_int_equal(RUN(g, "αβω"), 1);
    assert_int_equal(RUN(g, "αa"), -1);
    assert_int_equal(RUN(g, "Ω"), -1);
    rl_grammar_free(g);
    /* ranges crossing UTF-8 length boundaries */
    g = compile_ok("root ::= [\\x70-\\u0800\\uFFF0-\\U00010010]");
    assert_int_equal(RUN(g, "p"), 1);
    assert_int_equal(RUN(g, "\x7f"), 1);
    assert_int_equal(RUN(g, "\xc2\x80"), 1);
    assert_int_equal(RUN(g, "\xdf\xbf"), 1);
    assert_int_equal(RUN(g, "\xe0\xa0\x80"), 1);     /* U+0800 */
    assert_int_equal(RUN(g, "\xe0\xa0\x81"), -1);    /* U+0801 */
    assert_int_equal(RUN(g, "\xef\xbf\xb0"), 1);     /* U+FFF0 */
    assert_int_equal(RUN(g, "\xf0\x90\x80\x90"), 1); /* U+10010 */
    assert_int_equal(RUN(g, "\xf0\x90\x80\x91"), -1);
    assert_int_equal(RUN(g, "o"), -1);
    rl_grammar_free(g);
    g = compile_ok("root ::= . .");
    assert_int_equal(RUN(g, "a\xe2\x82\xac"), 1);
    assert_int_equal(RUN(g, "\n\n"), 1);
    rl_grammar_free(g);
    g = compile_ok("root ::= [\\]\\-\\\\^]+");
    assert_int_equal(RUN(g, "]-\\^"), 1);
    rl_grammar_free(g);
}

static void test_repetition(void **st) {
    (void)st;
    rl_grammar *g =
        compile_ok("root ::= \"a\"* \"b\"+ (\"c\" \"d\")? [0-9]{2,4} \"x\"{3} \"y\"{2,}");
    assert_int_equal(RUN(g, "b12xxxyy"), 1);
    assert_int_equal(RUN(g, "aaabbcd1234xxxyyyy"), 1);
    assert_int_equal(RUN(g, "cd12xxxyy"), -1); /* b+ needs one */
    assert_int_equal(RUN(g, "b1xxxyy"), -1);   /* {2,4} */
    assert_int_equal(RUN(g, "b12345"), -1);    /* {2,4} */
    assert_int_equal(RUN(g, "b12xxxy"), 0);    /* {2,} */
    assert_int_equal(RUN(g, "b12xxxx"), -1);   /* {3} */
    assert_int_equal(RUN(g, "bc12xxxyy"), -1); /* group is atomic */
    rl_grammar_free(g);
    /* nested big repetition compiles small (helpers are shared by reference) */
    g = compile_ok("root ::= ((\"a\"{100}){100}){10}");
    char *s = malloc(100001);
    memset(s, 'a', 100000);
    s[100000] = 0;
    assert_int_equal(run(g, s, 100000), 1);
    assert_int_equal(run(g, s, 99999), 0);
    rl_grammar_free(g);
    free(s);
    /* x* in a long input runs in constant stack depth (tail calls) */
    g = compile_ok("root ::= (\"ab\" | \"c\")*");
    char buf[30001];
    for (int i = 0; i < 30000; i++) buf[i] = i % 3 == 2 ? 'c' : "ab"[i % 3];
    assert_int_equal(run(g, buf, 30000), 1);
    rl_grammar_free(g);
}

static void test_hostile(void **st) {
    (void)st;
    expect_error("root ::= root \"a\" | \"b\"", RL_ERR_FORMAT, "left recursion");
    expect_error("root ::= a\na ::= b \"x\"\nb ::= \"\" | root", RL_ERR_FORMAT, "left recursion");
    expect_error("root ::= x* root \"y\" | \"z\"\nx ::= \"q\"", RL_ERR_FORMAT, "left recursion");
    expect_error("root ::= foo", RL_ERR_FORMAT, "undefined rule 'foo'");
    expect_error("root ::= \"a\"\nroot ::= \"b\"", RL_ERR_FORMAT, "defined twice");
    expect_error("main ::= \"a\"", RL_ERR_FORMAT, "no 'root'");
    expect_error("root ::= a\na ::= \"x\" a", RL_ERR_FORMAT, "matches no string");
    expect_error("root ::= \"a\"{5000}", RL_ERR_LIMIT, "repetition");
    expect_error("root ::= \"a\"{3,2}", RL_ERR_FORMAT, "n < m");
    expect_error("root ::= \"abc", RL_ERR_FORMAT, "unterminated string");
    expect_error("root ::= [abc", RL_ERR_FORMAT, "unterminated character class");
    expect_error("root ::= \"\\q\"", RL_ERR_FORMAT, "unknown escape");
    expect_error("root ::= \"\\uD800\"", RL_ERR_FORMAT, "scalar");
    expect_error("root ::= [^\\x00-\\U0010FFFF]", RL_ERR_FORMAT, "matches nothing");
    expect_error("root ::= []", RL_ERR_FORMAT, "empty character class");
    expect_error("root ::= (\"a\"", RL_ERR_FORMAT, "missing ')'");
    expect_error("root ::= \"a\")", RL_ERR_FORMAT, "unbalanced");
    expect_error("root ::= @", RL_ERR_FORMAT, "unexpected character");
    expect_error("\"a\"", RL_ERR_FORMAT, "rule definition");
    expect_error("root ::= \"\xff\"", RL_ERR_FORMAT, "UTF-8");
    char deep[600];
    int n = 0;
    for (int i = 0; i < 200; i++) deep[n++] = '(';
    deep[n++] = 'x';
    for (int i = 0; i < 200; i++) deep[n++] = ')';
    deep[n] = 0;
    char text[700];
    snprintf(text, sizeof text, "root ::= %s\nx ::= \"1\"", deep);
    expect_error(text, RL_ERR_LIMIT, "nested");
    /* an unproductive alternative is dropped, the rest works */
    rl_grammar *g = compile_ok("root ::= \"a\" | \"b\" loop\nloop ::= \"c\" loop");
    assert_int_equal(RUN(g, "a"), 1);
    assert_int_equal(RUN(g, "b"), -1);
    rl_grammar_free(g);
    /* text over the size limit */
    size_t big = RL_GRAMMAR_MAX_TEXT + 1;
    char *t = malloc(big);
    memset(t, ' ', big);
    rl_err err;
    assert_null(rl_grammar_compile(t, big, &err));
    assert_int_equal(err.code, RL_ERR_LIMIT);
    free(t);
}

/* Runtime nesting beyond RL_GRAMMAR_MAX_DEPTH is cut, not a crash. */
static void test_runtime_depth(void **st) {
    (void)st;
    rl_grammar *g = compile_ok("root ::= \"(\" root \")\" | \"x\"");
    rl_vocab_trie *t = byte_trie();
    rl_err err;
    rl_gmatch *m = rl_gmatch_new(g, t, &err);
    int opened = 0;
    while (opened < 1000 && rl_gmatch_accept_bytes(m, "(", 1, &err) == RL_OK) opened++;
    assert_true(opened > 100 && opened < RL_GRAMMAR_MAX_DEPTH + 2);
    assert_int_equal(err.code, RL_ERR_INVALID);
    assert_true(rl_gmatch_get_stats(m).n_cut > 0);
    assert_int_equal(rl_gmatch_accept_bytes(m, "x", 1, &err), RL_OK);
    for (int i = 0; i < opened; i++)
        assert_int_equal(rl_gmatch_accept_bytes(m, ")", 1, &err), RL_OK);
    assert_true(rl_gmatch_is_accepting(m));
    assert_true(rl_gmatch_is_done(m));
    rl_gmatch_free(m);
    rl_grammar_free(g);
    /* exponential ambiguity is bounded by the stack cap */
    g = compile_ok("root ::= (\"a\" | \"a\" \"a\" | \"a\" \"a\" \"a\" | x)*\nx ::= \"a\"+");
    m = rl_gmatch_new(g, t, &err);
    for (int i = 0; i < 2000; i++) assert_int_equal(rl_gmatch_accept_bytes(m, "a", 1, &err), RL_OK);
    assert_true(rl_gmatch_is_accepting(m));
    rl_gmatch_free(m);
    rl_grammar_free(g);
    rl_vocab_trie_free(t);
}

/* Paths that meet on one parse stack are expanded once: a run of 24
 * optional items is 2^24 paths to the final "z" but a few hundred steps.
 * A grammar that is ambiguous for real costs one call at most
 * RL_GRAMMAR_OP_STEPS steps and fails with RL_ERR_LIMIT. */
static void test_ambiguity_bounds(void **st) {
    (void)st;
    const size_t cap = RL_GRAMMAR_MAX_TEXT;
    char *text = malloc(cap);
    assert_non_null(text);
    int n = snprintf(text, cap, "root ::=");
    for (int i = 0; i < 24; i++) n += snprintf(text + n, cap - (size_t)n, " a");
    snprintf(text + n, cap - (size_t)n, " \"z\"\na ::= b | c\nb ::= \"x\"?\nc ::= \"y\"?");
    rl_grammar *g = compile_ok(text);
    rl_vocab_trie *t = byte_trie();
    rl_err err;
    rl_gmatch *m = rl_gmatch_new(g, t, &err);
    assert_non_null(m);
    uint64_t bits[5];
    assert_int_equal(rl_gmatch_allowed(m, bits, &err), 3);
    for (const char *c = "xyz"; *c; c++) assert_true((bits[*c >> 6] >> (*c & 63)) & 1);
    assert_int_equal(rl_gmatch_accept_bytes(m, "xyyxz", 5, &err), RL_OK);
    assert_true(rl_gmatch_is_done(m));
    rl_gmatch_stats s = rl_gmatch_get_stats(m);
    assert_int_equal(s.n_cut, 0);
    assert_true(s.n_expand < 5000);
    rl_gmatch_free(m);
    rl_grammar_free(g);

    /* 25 first bytes, each followed by a choice among 300 x 300 paths */
    n = snprintf(text, cap, "root ::= [a-y] b\nb ::= y0");
    for (int i = 1; i < 300; i++) n += snprintf(text + n, cap - (size_t)n, " | y%d", i);
    for (int i = 0; i < 300; i++) {
        n += snprintf(text + n, cap - (size_t)n, "\ny%d ::= \"q\"", i);
        for (int k = 1; k < 300; k++) n += snprintf(text + n, cap - (size_t)n, " | \"q\"");
    }
    assert_true((size_t)n < cap);
    g = compile_ok(text);
    m = rl_gmatch_new(g, t, &err);
    assert_non_null(m);
    int64_t e0 = rl_gmatch_get_stats(m).n_expand;
    assert_int_equal(rl_gmatch_allowed(m, bits, &err), -1);
    assert_int_equal(err.code, RL_ERR_LIMIT);
    assert_non_null(strstr(err.msg, "too ambiguous"));
    assert_true(rl_gmatch_get_stats(m).n_expand - e0 <= RL_GRAMMAR_OP_STEPS);
    /* the matcher still works for a single transition */
    assert_int_equal(rl_gmatch_accept_bytes(m, "a", 1, &err), RL_OK);
    rl_gmatch_free(m);
    rl_grammar_free(g);
    rl_vocab_trie_free(t);
    free(text);
}

/* ---- synthetic vocabulary and brute-force mask oracle ---- */

#define NV 400
static char vstore[NV][8];
static const char *vpieces[NV];
static size_t vlens[NV];
static uint8_t vkinds[NV];

static rl_vocab_trie *synth_trie(unsigned seed) {
    const char *alpha = "ab\"{}[]:, 0123456789-.enrtuls\\x";
    size_t na = strlen(alpha);
    srand(seed);
    for (int i = 0; i < NV; i++) {
        int len = i < 32 ? 1 : 1 + rand() % 6;
        for (int k = 0; k < len; k++)
            vstore[i][k] = i < 32 ? alpha[i % na] : alpha[(size_t)rand() % na];
        vpieces[i] = vstore[i];
        vlens[i] = (size_t)len;
        vkinds[i] = RL_VOCAB_NORMAL;
    }
    /* a few duplicates, an empty piece, EOG and excluded tokens */
    memcpy(vstore[40], vstore[41], 8);
    vlens[40] = vlens[41];
    vlens[50] = 0;
    vkinds[NV - 1] = RL_VOCAB_EOG;
    vkinds[NV - 2] = RL_VOCAB_EXCLUDE;
    memcpy(vstore[NV - 2], "a", 1);
    vlens[NV - 2] = 1;
    rl_err err;
    rl_vocab_trie *t = rl_vocab_trie_build(NV, vpieces, vlens, vkinds, &err);
    if (!t) fail_msg("trie: %s", err.msg);
    return t;
}

static void check_mask(rl_gmatch *m, int *n_allowed_out) {
    uint64_t bits[(NV + 63) / 64];
    rl_err err;
    int32_t n = rl_gmatch_allowed(m, bits, &err);
    assert_true(n >= 0);
    int cnt = 0;
    for (int id = 0; id < NV; id++) {
        rl_gmatch *c = rl_gmatch_clone(m, &err);
        bool ok = rl_gmatch_accept_token(c, id, &err) == RL_OK;
        rl_gmatch_free(c);
        bool bit = (bits[id >> 6] >> (id & 63)) & 1;
        if (ok != bit)
            fail_msg("token %d '%.*s': brute force %d, mask %d", id, (int)vlens[id], vpieces[id],
                     ok, bit);
        cnt += ok;
    }
    assert_int_equal(cnt, n);
    /* rl_gmatch_mask agrees with the bitmask */
    float logits[NV + 3];
    for (int i = 0; i < NV + 3; i++) logits[i] = (float)i;
    assert_int_equal(rl_gmatch_mask(m, logits, NV + 3, &err), RL_OK);
    for (int i = 0; i < NV; i++) {
        bool bit = (bits[i >> 6] >> (i & 63)) & 1;
        if (bit)
            assert_true(logits[i] == (float)i);
        else
            assert_true(isinf(logits[i]) && logits[i] < 0);
    }
    for (int i = NV; i < NV + 3; i++) assert_true(isinf(logits[i]));
    *n_allowed_out = cnt;
}

static const char *JSONISH =
    "root ::= ws value ws\n"
    "value ::= object | array | string | number | \"true\" | \"false\" | \"null\"\n"
    "object ::= \"{\" ws (member (\",\" ws member)*)? \"}\"\n"
    "member ::= string ws \":\" ws value ws\n"
    "array ::= \"[\" ws (value ws (\",\" ws value ws)*)? \"]\"\n"
    "string ::= \"\\\"\" ([^\"\\\\] | \"\\\\\" [\"\\\\nrt])* \"\\\"\"\n"
    "number ::= \"-\"? ([0-9] | [1-9] [0-9]+) (\".\" [0-9]+)?\n"
    "ws ::= \" \"?\n";

static void random_walk_check(const char *gtext, unsigned seed, int steps, int cache) {
    rl_vocab_trie *t = synth_trie(seed);
    rl_grammar *g = compile_ok(gtext);
    rl_err err;
    rl_gmatch *m = rl_gmatch_new(g, t, &err);
    rl_gmatch_set_mask_cache(m, cache);
    srand(seed * 7 + 1);
    for (int s = 0; s < steps; s++) {
        int n;
        check_mask(m, &n);
        if (n == 0) break;
        uint64_t bits[(NV + 63) / 64];
        rl_gmatch_allowed(m, bits, &err);
        int pick = rand() % n, id = -1;
        for (int i = 0; i < NV && pick >= 0; i++)
            if ((bits[i >> 6] >> (i & 63)) & 1 && pick-- == 0) id = i;
        assert_true(id >= 0);
        if (vkinds[id] == RL_VOCAB_EOG) {
            assert_true(rl_gmatch_is_accepting(m));
            assert_int_equal(rl_gmatch_accept_token(m, id, &err), RL_OK);
            assert_true(rl_gmatch_is_done(m));
            int k;
            check_mask(m, &k);
            assert_int_equal(k, 1); /* only EOG after the end */
            break;
        }
        assert_int_equal(rl_gmatch_accept_token(m, id, &err), RL_OK);
    }
    rl_gmatch_stats stt = rl_gmatch_get_stats(m);
    if (cache)
        assert_true(stt.n_mask_hits > 0);
    else
        assert_int_equal(stt.n_mask_hits, 0);
    rl_gmatch_free(m);
    rl_grammar_free(g);
    rl_vocab_trie_free(t);
}

static void test_mask_bruteforce(void **st) {
    (void)st;
    for (unsigned seed = 1; seed <= 6; seed++)
        random_walk_check(JSONISH, seed, 60, seed % 2 ? 256 : 0);
    random_walk_check("root ::= (\"ab\" | \"a\" [0-9]+ | \"\\\"\" [^\"]{0,5} \"\\\"\")+", 9, 80, 4);
}

static void test_eog_and_excluded(void **st) {
    (void)st;
    rl_grammar *g = compile_ok("root ::= \"a\" \"b\"?");
    rl_vocab_trie *t = byte_trie();
    rl_err err;
    rl_gmatch *m = rl_gmatch_new(g, t, &err);
    uint64_t bits[5];
    assert_int_equal(rl_gmatch_allowed(m, bits, &err), 1); /* only 'a' */
    assert_int_equal(rl_gmatch_accept_token(m, 256, &err), RL_ERR_INVALID);
    assert_int_equal(rl_gmatch_accept_token(m, 257, &err), RL_ERR_INVALID);
    assert_int_equal(rl_gmatch_accept_token(m, 258, &err), RL_ERR_RANGE);
    assert_int_equal(rl_gmatch_accept_token(m, 'x', &err), RL_ERR_INVALID);
    assert_non_null(strstr(err.msg, "not allowed"));
    assert_int_equal(rl_gmatch_accept_token(m, 'a', &err), RL_OK);
    assert_int_equal(rl_gmatch_allowed(m, bits, &err), 2); /* 'b' and EOG */
    assert_true((bits[4] & 1) != 0);
    assert_false(rl_gmatch_is_done(m));
    assert_int_equal(rl_gmatch_min_remaining(m), 0);
    rl_gmatch *c = rl_gmatch_clone(m, &err);
    assert_int_equal(rl_gmatch_accept_token(c, 'b', &err), RL_OK);
    assert_true(rl_gmatch_is_done(c)); /* nothing can follow */
    assert_int_equal(rl_gmatch_restore(c, m, &err), RL_OK);
    assert_false(rl_gmatch_is_done(c));
    assert_int_equal(rl_gmatch_accept_token(c, 256, &err), RL_OK);
    assert_true(rl_gmatch_is_done(c));
    assert_int_equal(rl_gmatch_accept_token(c, 'b', &err), RL_ERR_INVALID);
    rl_gmatch_free(c);
    rl_gmatch_free(m);
    rl_grammar_free(g);
    g = compile_ok("root ::= \"abc\" [0-9]+ \"xy\"");
    m = rl_gmatch_new(g, t, &err);
    assert_int_equal(rl_gmatch_min_remaining(m), 6);
    rl_gmatch_accept_bytes(m, "ab", 2, &err);
    assert_int_equal(rl_gmatch_min_remaining(m), 4);
    rl_gmatch_free(m);
    rl_grammar_free(g);
    rl_vocab_trie_free(t);
}

static void test_forced(void **st) {
    (void)st;
    const char *p[] = {"{", "\"", "{\"", "name", "na", "\":", " \"", "\": \"",
                       "a", "b",  "\"}", "}",    "\"", "x",   "</s>"};
    size_t n = sizeof p / sizeof p[0];
    size_t lens[16];
    uint8_t kinds[16] = {0};
    for (size_t i = 0; i < n; i++) lens[i] = strlen(p[i]);
    kinds[n - 1] = RL_VOCAB_EOG;
    rl_err err;
    rl_vocab_trie *t = rl_vocab_trie_build((int32_t)n, p, lens, kinds, &err);
    assert_non_null(t);
    rl_grammar *g = compile_ok("root ::= \"{\\\"name\\\": \\\"\" [ab]+ \"\\\"}\"");
    rl_gmatch *m = rl_gmatch_new(g, t, &err);
    int32_t out[16];
    int k = rl_gmatch_forced(m, out, 16);
    /* {"name": " = "{\"" "name" "\": \"" greedily */
    assert_int_equal(k, 3);
    assert_int_equal(out[0], 2);
    assert_int_equal(out[1], 3);
    assert_int_equal(out[2], 7);
    assert_int_equal(rl_gmatch_forced(m, out, 1), 1); /* max respected */
    for (int i = 0; i < k; i++) assert_int_equal(rl_gmatch_accept_token(m, out[i], &err), RL_OK);
    assert_int_equal(rl_gmatch_forced(m, out, 16), 0); /* a choice now */
    assert_int_equal(rl_gmatch_accept_token(m, 8, &err), RL_OK);
    assert_int_equal(rl_gmatch_forced(m, out, 16), 0);            /* [ab]+ may go on */
    assert_int_equal(rl_gmatch_accept_token(m, 12, &err), RL_OK); /* the lone quote */
    k = rl_gmatch_forced(m, out, 16);
    assert_int_equal(k, 1);
    assert_int_equal(out[0], 11);
    assert_int_equal(rl_gmatch_accept_token(m, 11, &err), RL_OK);
    assert_true(rl_gmatch_is_accepting(m));
    assert_int_equal(rl_gmatch_forced(m, out, 16), 0);
    rl_gmatch_free(m);
    rl_grammar_free(g);
    rl_vocab_trie_free(t);
}

/* Closing mode: the slack test against RL_GRAMMAR_CLOSE_SLACK, and the
 * pick: the shortest completion among 1..3-byte tokens, the higher logit
 * (then the lower id) on ties, a longer token never, an end-of-generation
 * token as soon as the sentence is complete. */
static void test_close_pick(void **st) {
    (void)st;
    const char *p[] = {"[", "]", "x", ",", "x]", "x,", "x,x", "x,x,x]", "</s>", "<c>"};
    enum { N = 10, EOG = 8 };
    size_t lens[N];
    uint8_t kinds[N] = {0};
    for (int i = 0; i < N; i++) lens[i] = strlen(p[i]);
    kinds[EOG] = RL_VOCAB_EOG;
    kinds[9] = RL_VOCAB_EXCLUDE;
    rl_err err;
    rl_vocab_trie *t = rl_vocab_trie_build(N, p, lens, kinds, &err);
    assert_non_null(t);
    rl_grammar *g = compile_ok("root ::= \"[\" (\"x\" (\",\" \"x\")*)? \"]\" \",\"?");
    rl_gmatch *m = rl_gmatch_new(g, t, &err), *scratch = rl_gmatch_clone(m, &err);
    assert_non_null(scratch);
    /* "[]" is 2 bytes away */
    assert_int_equal(rl_gmatch_slack(m, 40), 38);
    assert_false(rl_gmatch_must_close(m, 2 + RL_GRAMMAR_CLOSE_SLACK + 1));
    assert_true(rl_gmatch_must_close(m, 2 + RL_GRAMMAR_CLOSE_SLACK));
    assert_int_equal(rl_gmatch_slack(m, 1), -1);
    float row[N + 2];
    for (int i = 0; i < N + 2; i++) row[i] = (float)i;
    assert_int_equal(rl_gmatch_mask(m, row, N + 2, &err), RL_OK);
    assert_int_equal(rl_gmatch_close_pick(m, scratch, row, N + 2), 0); /* only "[" */
    assert_int_equal(rl_gmatch_accept_token(m, 0, &err), RL_OK);
    assert_int_equal(rl_gmatch_slack(m, 10), 9);
    /* after "[": "]" and "x]" complete (0 bytes left), "x,x" leaves 1,
     * "x," 2; "x,x,x]" completes too but is 6 bytes */
    for (int i = 0; i < N + 2; i++) row[i] = (float)i;
    row[7] = 100.f;
    assert_int_equal(rl_gmatch_mask(m, row, N + 2, &err), RL_OK);
    assert_true(isinf(row[0]) && isinf(row[3]) && isinf(row[EOG]) && isinf(row[9]));
    assert_int_equal(rl_gmatch_close_pick(m, scratch, row, N + 2), 4); /* higher logit */
    row[1] = row[4] = 5.f;
    assert_int_equal(rl_gmatch_close_pick(m, scratch, row, N + 2), 1); /* equal: lower id */
    row[1] = 9.f;
    assert_int_equal(rl_gmatch_close_pick(m, scratch, row, N + 2), 1);
    /* m itself is not advanced by the pick */
    assert_int_equal(rl_gmatch_min_remaining(m), 1);
    /* only the long token left: nothing to pick */
    for (int i = 0; i < N + 2; i++) row[i] = i == 7 ? 1.f : -INFINITY;
    assert_int_equal(rl_gmatch_close_pick(m, scratch, row, N + 2), -1);
    /* "[]": complete, "," could still follow, yet EOG is the pick (though
     * "," comes first and has the higher logit) */
    assert_int_equal(rl_gmatch_accept_token(m, 1, &err), RL_OK);
    for (int i = 0; i < N + 2; i++) row[i] = -(float)i;
    assert_int_equal(rl_gmatch_mask(m, row, N + 2, &err), RL_OK);
    assert_true(row[3] > -INFINITY && row[EOG] > -INFINITY);
    assert_int_equal(rl_gmatch_close_pick(m, scratch, row, N + 2), EOG);
    assert_int_equal(rl_gmatch_slack(m, 5), 5);
    rl_gmatch_free(scratch);
    rl_gmatch_free(m);
    rl_grammar_free(g);
    rl_vocab_trie_free(t);
}

/* ---- JSON schema converter ---- */

static rl_grammar *schema_ok(const char *json) {
    rl_err err;
    rl_grammar *g = rl_grammar_from_json_schema(json, strlen(json), &err);
    if (!g) fail_msg("schema %s: %s", json, err.msg);
    return g;
}

static void schema_err(const char *json, rl_status code, const char *needle) {
    rl_err err;
    rl_grammar *g = rl_grammar_from_json_schema(json, strlen(json), &err);
    if (g) fail_msg("schema unexpectedly accepted: %s", json);
    assert_int_equal(err.code, code);
    if (!strstr(err.msg, needle)) fail_msg("error '%s' lacks '%s'", err.msg, needle);
}

static void test_schema(void **st) {
    (void)st;
    rl_grammar *g = schema_ok("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},"
                              "\"b\":{\"type\":\"string\"},\"c\":{\"enum\":[1,\"x\",null]}},"
                              "\"required\":[\"a\",\"c\"]}");
    assert_int_equal(RUN(g, "{\"a\": 12, \"c\": \"x\"}"), 1);
    assert_int_equal(RUN(g, "{\"a\":-3,\"b\":\"h\\u00e9\\n\",\"c\":null}"), 1);
    assert_int_equal(RUN(g, "{\"a\": 1}"), -1);             /* c required */
    assert_int_equal(RUN(g, "{\"c\": 1}"), -1);             /* a required first */
    assert_int_equal(RUN(g, "{\"a\": 1.5, \"c\": 1}"), -1); /* integer */
    assert_int_equal(RUN(g, "{\"a\": 01, \"c\": 1}"), -1);
    assert_int_equal(RUN(g, "{\"a\": 1, \"c\": 2}"), -1); /* enum */
    assert_int_equal(RUN(g, "{\"a\": 1, \"c\": 1, \"d\": 1}"), -1);
    rl_grammar_free(g);
    g = schema_ok(
        "{\"type\":\"array\",\"items\":{\"type\":\"boolean\"},\"minItems\":1,\"maxItems\":2}");
    assert_int_equal(RUN(g, "[true]"), 1);
    assert_int_equal(RUN(g, "[true, false]"), 1);
    assert_int_equal(RUN(g, "[]"), -1);
    assert_int_equal(RUN(g, "[true,false,true]"), -1);
    rl_grammar_free(g);
    g = schema_ok("{\"type\":\"json_object\"}");
    assert_int_equal(RUN(g, "{\"k\": [1, {\"z\": null}], \"q\": \"s\"}"), 1);
    assert_int_equal(RUN(g, "[1]"), -1);
    rl_grammar_free(g);
    g = schema_ok("{\"anyOf\":[{\"type\":\"number\"},{\"const\":\"hi\"}]}");
    assert_int_equal(RUN(g, "-1.5e3"), 1);
    assert_int_equal(RUN(g, "\"hi\""), 1);
    assert_int_equal(RUN(g, "\"ho\""), -1);
    rl_grammar_free(g);
    g = schema_ok("{\"type\":\"string\",\"pattern\":\"^[A-Z]{2}-[0-9]+$\"}");
    assert_int_equal(RUN(g, "\"AB-123\""), 1);
    assert_int_equal(RUN(g, "\"AB123\""), -1);
    rl_grammar_free(g);
    schema_err("{\"type\":\"strin\"}", RL_ERR_UNSUPPORTED, "strin");
    schema_err("{\"type\":\"integer\",\"multipleOf\":3}", RL_ERR_UNSUPPORTED, "multipleOf");
    schema_err("{\"type\":\"object\",", RL_ERR_FORMAT, "JSON");
    schema_err("false", RL_ERR_UNSUPPORTED, "false");
    schema_err("{\"type\":\"array\",\"minItems\":5,\"maxItems\":2}", RL_ERR_INVALID, "minItems");
    char deep[2000] = "";
    for (int i = 0; i < 40; i++) strcat(deep, "{\"type\":\"array\",\"items\":");
    strcat(deep, "{}");
    for (int i = 0; i < 40; i++) strcat(deep, "}");
    schema_err(deep, RL_ERR_LIMIT, "deeper");
    schema_err("{\"$ref\":\"#/$defs/a\",\"$defs\":{\"a\":{\"$ref\":\"#/$defs/a\"}}}", RL_ERR_FORMAT,
               "");
}

/* The text API: a schema given as JSON text -> grammar text. */
static void test_schema_text(void **st) {
    (void)st;
    const char *js = "{\"type\":\"boolean\"}";
    char *out = NULL;
    size_t n = 0;
    rl_err err;
    assert_int_equal(rl_json_schema_to_grammar(js, strlen(js), &out, &n, &err), RL_OK);
    assert_non_null(out);
    assert_int_equal(strlen(out), n);
    const char *tail = "\nr0 ::= boolean\nroot ::= r0\n";
    assert_true(n > strlen(tail));
    assert_string_equal(out + n - strlen(tail), tail);
    rl_free(out);
    /* bad JSON: FORMAT naming line and column, nothing returned */
    out = (char *)&n;
    const char *bad = "{\n \"type\": }";
    assert_int_equal(rl_json_schema_to_grammar(bad, strlen(bad), &out, &n, &err), RL_ERR_FORMAT);
    assert_null(out);
    assert_int_equal(n, 0);
    assert_non_null(strstr(err.msg, "line 2 column 10"));
    /* a duplicate key is refused, not silently resolved */
    const char *dup = "{\"type\":\"integer\",\"type\":\"string\"}";
    assert_int_equal(rl_json_schema_to_grammar(dup, strlen(dup), &out, NULL, &err), RL_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "duplicate"));
    /* converter errors come through too */
    const char *uns = "{\"not\":{}}";
    assert_int_equal(rl_json_schema_to_grammar(uns, strlen(uns), &out, NULL, &err),
                     RL_ERR_UNSUPPORTED);
    assert_null(out);
}

static void test_alloc_failure(void **st) {
    (void)st;
    rl_vocab_trie *t = synth_trie(3);
    for (long n = 0; n < 400; n++) {
        rl_err err;
        rl_alloc_fail_after(n);
        rl_grammar *g = rl_grammar_compile(JSONISH, strlen(JSONISH), &err);
        rl_gmatch *m = g ? rl_gmatch_new(g, t, &err) : NULL;
        if (m) {
            float logits[NV];
            for (int i = 0; i < NV; i++) logits[i] = 0;
            (void)rl_gmatch_mask(m, logits, NV, &err);
            (void)rl_gmatch_accept_bytes(m, "{\"a\": [1, 2]}", 13, &err);
        }
        rl_alloc_fail_after(-1);
        rl_gmatch_free(m);
        rl_grammar_free(g);
    }
    rl_vocab_trie_free(t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_literals_and_alternatives),
        cmocka_unit_test(test_classes),
        cmocka_unit_test(test_repetition),
        cmocka_unit_test(test_hostile),
        cmocka_unit_test(test_runtime_depth),
        cmocka_unit_test(test_ambiguity_bounds),
        cmocka_unit_test(test_mask_bruteforce),
        cmocka_unit_test(test_eog_and_excluded),
        cmocka_unit_test(test_forced),
        cmocka_unit_test(test_close_pick),
        cmocka_unit_test(test_schema),
        cmocka_unit_test(test_schema_text),
        cmocka_unit_test(test_alloc_failure),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
