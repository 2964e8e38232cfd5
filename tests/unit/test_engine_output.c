/* Unit tests for the engine's text output rules (src/engine/output.c),
 * without a model: stop-string hold-back (a partial stop string at the end
 * of the pending text waits for the next token), a stop string inside the
 * text (the text before the earliest match is emitted), and event chunks
 * of at most RL_EV_TEXT_MAX bytes cut at UTF-8 character boundaries. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "engine/engine-impl.h"

static char stops[RL_MAX_STOP][RL_MAX_STOP_LEN + 1];

static size_t scan(const char *text, bool all, bool *stopped, int n_stop, ...) {
    va_list ap;
    va_start(ap, n_stop);
    for (int i = 0; i < n_stop; i++)
        snprintf(stops[i], sizeof stops[i], "%s", va_arg(ap, const char *));
    va_end(ap);
    return rl__stop_scan(text, strlen(text), (const char(*)[RL_MAX_STOP_LEN + 1]) stops, n_stop,
                         all, stopped);
}

static void test_stop_holdback(void **state) {
    (void)state;
    bool st;
    /* "</e" may become "</end>": held back */
    assert_int_equal(scan("hello </e", false, &st, 1, "</end>"), 6);
    assert_false(st);
    /* at the end of the request nothing is held */
    assert_int_equal(scan("hello </e", true, &st, 1, "</end>"), 9);
    assert_false(st);
    /* the longest held suffix over all stop strings wins */
    assert_int_equal(scan("aax", false, &st, 2, "xy", "axz"), 1);
    assert_false(st);
    /* a suffix as long as the whole text */
    assert_int_equal(scan("</en", false, &st, 1, "</end>"), 0);
    /* only proper prefixes are held: a one-byte stop string is a match or nothing */
    assert_int_equal(scan("abc", false, &st, 1, "c"), 2);
    assert_true(st);
    assert_int_equal(scan("abd", false, &st, 1, "c"), 3);
    assert_false(st);
    /* no stop strings: everything */
    assert_int_equal(scan("abc", false, &st, 0), 3);
    assert_false(st);
    assert_int_equal(
        rl__stop_scan(NULL, 0, (const char(*)[RL_MAX_STOP_LEN + 1]) stops, 1, false, &st), 0);
    assert_false(st);
}

static void test_stop_inside(void **state) {
    (void)state;
    bool st;
    assert_int_equal(scan("abc</end>def", false, &st, 1, "</end>"), 3);
    assert_true(st);
    /* with `all` too: the match still cuts */
    assert_int_equal(scan("abc</end>def", true, &st, 1, "</end>"), 3);
    assert_true(st);
    /* the earliest match of any stop string */
    assert_int_equal(scan("abc</end>def", false, &st, 2, "def", "c<"), 2);
    assert_true(st);
    /* a match beats a hold-back of another string */
    assert_int_equal(scan("xx stop y", false, &st, 2, "stop", "y z"), 3);
    assert_true(st);
    /* at the very start */
    assert_int_equal(scan("\n\nrest", false, &st, 1, "\n\n"), 0);
    assert_true(st);
    /* multi-byte stop strings are matched as bytes */
    assert_int_equal(scan("caf\xc3\xa9 au lait", false, &st, 1, "\xc3\xa9"), 3);
    assert_true(st);
    assert_int_equal(scan("caf\xc3", false, &st, 1, "\xc3\xa9"), 3);
    assert_false(st);
}

static void test_text_chunks(void **state) {
    (void)state;
    char buf[600];
    memset(buf, 'a', sizeof buf);
    assert_int_equal(rl__text_chunk(buf, 0), 0);
    assert_int_equal(rl__text_chunk(buf, RL_EV_TEXT_MAX), RL_EV_TEXT_MAX);
    assert_int_equal(rl__text_chunk(buf, RL_EV_TEXT_MAX + 1), RL_EV_TEXT_MAX);
    /* a 3-byte character (U+20AC) straddling byte 256 goes to the next chunk */
    memcpy(buf + 254, "\xe2\x82\xac", 3);
    assert_int_equal(rl__text_chunk(buf, 300), 254);
    assert_int_equal(rl__text_chunk(buf + 254, 46), 46);
    /* ending exactly at the boundary: kept whole */
    memset(buf, 'a', sizeof buf);
    memcpy(buf + 253, "\xe2\x82\xac", 3);
    assert_int_equal(rl__text_chunk(buf, 300), 256);
    /* a 4-byte character starting at byte 255 */
    memset(buf, 'a', sizeof buf);
    memcpy(buf + 255, "\xf0\x9f\x98\x80", 4);
    assert_int_equal(rl__text_chunk(buf, 300), 255);
    /* splitting 600 bytes of 2-byte characters: every chunk ends on a lead byte */
    for (int i = 0; i < 600; i += 2) memcpy(buf + i, "\xc3\xa9", 2);
    size_t off = 0, n_chunks = 0;
    while (off < 600) {
        size_t n = rl__text_chunk(buf + off, 600 - off);
        assert_true(n > 0 && n <= RL_EV_TEXT_MAX && n % 2 == 0);
        off += n;
        n_chunks++;
    }
    assert_int_equal(off, 600);
    assert_int_equal(n_chunks, 3);
    /* no lead byte in reach (not UTF-8): cut at the limit rather than never */
    memset(buf, 0x80, sizeof buf);
    assert_int_equal(rl__text_chunk(buf, 600), RL_EV_TEXT_MAX);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stop_holdback),
        cmocka_unit_test(test_stop_inside),
        cmocka_unit_test(test_text_chunks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
