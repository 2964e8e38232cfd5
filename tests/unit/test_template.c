/* Unit tests for the chat-template interpreter (src/chat/template*.c):
 * language features with exact expected output, HF whitespace rules,
 * built-in templates, and hostile templates that must end in a clear error
 * (bounded steps, output, memory and depth) rather than a crash. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "chat/chat.h"

static const rl_chat_msg CONV[] = {
    {"system", "Be brief."},
    {"user", "Hi"},
    {"assistant", "Hello!"},
    {"user", "Bye"},
};

/* Renders `t` over CONV; returns the output (static buffer) or NULL and
 * fills *err. */
static char *render(const char *t, rl_err *err) {
    static char buf[1 << 16];
    char *out = NULL;
    size_t n = 0;
    rl_status st = rl_template_render(t, strlen(t), CONV, 4, true, "<s>", "</s>", &out, &n, err);
    if (st != RL_OK) {
        assert_null(out);
        return NULL;
    }
    assert_int_equal(strlen(out), n);
    assert_true(n < sizeof buf);
    memcpy(buf, out, n + 1);
    rl_free(out);
    return buf;
}

static void expect(const char *t, const char *want) {
    rl_err err = {0};
    char *got = render(t, &err);
    if (!got) fail_msg("template %s failed: %s", t, err.msg);
    if (strcmp(got, want) != 0) fail_msg("template %s\n got: [%s]\nwant: [%s]", t, got, want);
}

static void expect_err(const char *t, rl_status code, const char *substr) {
    rl_err err = {0};
    char *got = render(t, &err);
    if (got) fail_msg("template %s should fail, rendered [%s]", t, got);
    if (err.code != code) fail_msg("template %s: code %d (%s), want %d", t, err.code, err.msg, code);
    if (!strstr(err.msg, substr)) fail_msg("template %s: message [%s] lacks [%s]", t, err.msg, substr);
}

static void test_basics(void **state) {
    (void)state;
    expect("", "");
    expect("plain text", "plain text");
    expect("{{ bos_token }}{{ eos_token }}", "<s></s>");
    expect("{{ 'a' + 'b' ~ 1 }}", "ab1");
    expect("{# comment #}x", "x");
    expect("{{ messages | length }} {{ messages[1]['role'] }} {{ messages[1].content }}", "4 user Hi");
    expect("{{ add_generation_prompt }} {{ none }} {{ true }} {{ tools is defined }}",
           "True None True False");
    expect("{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 2 ** 3 ** 2 }} {{ 7 % 3 }} {{ -7 // 2 }}",
           "7 9 64 1 -4");
    expect("{{ 1 / 4 }} {{ 1e20 }} {{ 0.1 + 0.2 }} {{ 1.0 }} {{ 1e-7 }}",
           "0.25 1e+20 0.30000000000000004 1.0 1e-07");
    expect("{{ [1, 'a', none] }} {{ {'k': (1,)} }}", "[1, 'a', None] {'k': (1,)}");
}

static void test_control_flow(void **state) {
    (void)state;
    expect("{% for m in messages %}{{ loop.index }}{{ m.role[0] }}{% if not loop.last %},{% endif %}{% endfor %}",
           "1s,2u,3a,4u");
    expect("{% for m in messages[1:] %}{{ loop.index0 }}/{{ loop.length }}{{ loop.first }} {% endfor %}",
           "0/3True 1/3False 2/3False ");
    expect("{% if 0 %}a{% elif '' %}b{% elif [1] %}c{% else %}d{% endif %}", "c");
    expect("{% set x = 1 %}{% for i in [1,2] %}{% set x = x + 10 %}{{ x }}{% endfor %}{{ x }}", "11111");
    expect("{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}{% endfor %}{{ ns.n }}",
           "4");
    expect("{% for i in range(10) %}{% if i == 1 %}{% continue %}{% endif %}{% if i == 4 %}{% break %}{% endif %}{{ i }}{% endfor %}",
           "023");
    expect("{% for i in [] %}x{% else %}empty{% endfor %}", "empty");
    expect("{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}{{ v }}{% endfor %}", "a1b2");
    expect("{% for i in range(5) if i is even %}{{ i }}{{ loop.length }}{% endfor %}", "032343");
    expect("{{ 'y' if messages else 'n' }}{{ 'y' if none else 'n' }}", "yn");
    expect("{% set b %}in{{ 1 }}{% endset %}[{{ b }}]", "[in1]");
    expect("{% raw %}{{ x }}{% endraw %}", "{{ x }}");
    expect("{% generation %}g{% endgeneration %}", "g");
}

static void test_whitespace(void **state) {
    (void)state;
    /* trim_blocks: newline after a block tag goes; lstrip_blocks: indentation before it goes */
    expect("  {% if true %}\n  a\n  {% endif %}\nb", "  a\nb");
    expect("{{ 'x' }}\n", "x"); /* one trailing newline of the source is dropped */
    expect("{{ 'x' }}\n\n", "x\n");
    expect("a  {%- if true -%}  b  {%- endif -%}  c", "abc");
    expect("a {% if true %}b{% endif %}", "a b"); /* not at line start: no lstrip */
    expect("  {%+ if true %}x{% endif %}", "  x");
    expect("{% if true +%}\nx{% endif %}", "\nx");
    expect("a\r\nb", "a\nb");
    expect("  {# c #}\nx", "x");
}

static void test_filters_methods(void **state) {
    (void)state;
    expect("{{ '  a b  ' | trim }}|{{ ' x '.strip() }}|{{ 'xxaxx'.strip('x') }}|{{ '\xc2\xa0u\xe3\x80\x80'.strip() }}",
           "a b|x|a|u");
    expect("{{ 'Ab' | upper }}{{ 'Ab' | lower }}{{ 'a b' | title }}{{ 'aB' | capitalize }}", "ABabA BAb");
    expect("{{ x | default('d') }}{{ '' | default('e', true) }}{{ 'v' | d('no') }}", "dev");
    expect("{{ 'a-b' | replace('-', '+') }} {{ [1, 2] | join(',') }} {{ 'h\xc3\xa9' | length }}", "a+b 1,2 2");
    expect("{{ {'a': [1, 2.5, 'q\"\xc3\xa9'], 'b': none} | tojson }}",
           "{\"a\": [1, 2.5, \"q\\\"\xc3\xa9\"], \"b\": null}");
    expect("{{ [1] | tojson(indent=2) }}", "[\n  1\n]");
    expect("{{ 'a,b,,c'.split(',') }} {{ ' a  b '.split() }}", "['a', 'b', '', 'c'] ['a', 'b']");
    /* whitespace is decoded strictly: an overlong encoding of a space (C0 A0)
     * or a stray continuation byte is not whitespace, so it is kept */
    expect("{{ '\xc0\xa0x\xc0\xa0'.strip() }}|{{ 'a\xc0\xa0" "b'.split() }}|{{ ' \x80 '.strip() }}",
           "\xc0\xa0x\xc0\xa0|['a\xc0\xa0" "b']|\x80");
    expect("{{ 'abc'.startswith('ab') }}{{ 'abc'.endswith('bc') }}{{ 'abc'.startswith(('x', 'a')) }}",
           "TrueTrueTrue");
    expect("{{ messages | map(attribute='role') | join(' ') }}", "system user assistant user");
    expect("{{ messages | selectattr('role', 'equalto', 'user') | list | length }}", "2");
    expect("{{ [3, 1, 2] | sort | list }} {{ [1, 1, 2] | unique | list }} {{ 'abc' | reverse }}",
           "[1, 2, 3] [1, 2] cba");
    expect("{{ 'h\xc3\xa9llo'[1] }}{{ 'abcdef'[1:4] }}{{ 'abc'[::-1] }}{{ [1, 2, 3][-1] }}", "\xc3\xa9" "bcdcba3");
    expect("{{ {'a': 1}.get('a') }}{{ {'a': 1}.get('b', 2) }}{{ {'a': 1}.keys() | list }}", "12['a']");
}

static void test_tests_and_compare(void **state) {
    (void)state;
    expect("{{ x is defined }}{{ x is undefined }}{{ none is none }}{{ 'a' is string }}{{ 1 is number }}",
           "FalseTrueTrueTrueTrue");
    expect("{{ [] is iterable }}{{ {} is mapping }}{{ 3 is odd }}{{ 4 is divisibleby 2 }}{{ 1 is not string }}",
           "TrueTrueTrueTrueTrue");
    expect("{{ 1 < 2 < 3 }}{{ 'a' in 'cat' }}{{ 'z' not in ['a'] }}{{ 'role' in messages[0] }}{{ 1 == 1.0 }}",
           "TrueTrueTrueTrueTrue");
    expect("{{ 1 and 'x' }} {{ 0 or 'y' }} {{ not [] }}", "x y True");
}

static void test_json_context(void **state) {
    (void)state;
    const char *t = "{% for m in messages %}{{ m.role }}{% for c in m.tool_calls %}:{{ c.function.name }}"
                    "({{ c.function.arguments | tojson }}){% endfor %};{% endfor %}{{ tools | length }}";
    const char *ctx = "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}, {\"role\": \"assistant\", "
                      "\"content\": null, \"tool_calls\": [{\"function\": {\"name\": \"f\", "
                      "\"arguments\": {\"z\": 1, \"a\": [true]}}}]}], \"tools\": [1, 2]}";
    char *out = NULL;
    size_t n = 0;
    rl_err err = {0};
    assert_int_equal(rl_template_render_json(t, strlen(t), ctx, strlen(ctx), NULL, &out, &n, &err), RL_OK);
    assert_string_equal(out, "user;assistant:f({\"z\": 1, \"a\": [true]});2");
    rl_free(out);
    assert_int_equal(rl_template_render_json(t, strlen(t), "[1]", 3, NULL, &out, &n, &err), RL_ERR_FORMAT);
    assert_null(out);
    assert_int_equal(rl_template_render_json(t, strlen(t), "{bad", 4, NULL, &out, &n, &err), RL_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "context JSON"));
}

static void test_builtins(void **state) {
    (void)state;
    rl_err err = {0};
    char *out = NULL;
    size_t n = 0;
    const char *g = rl_template_builtin("gemma");
    assert_non_null(g);
    assert_int_equal(rl_template_render(g, strlen(g), CONV, 4, true, "<bos>", "<eos>", &out, &n, &err), RL_OK);
    assert_string_equal(out, "<bos><start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n"
                             "<start_of_turn>model\nHello!<end_of_turn>\n"
                             "<start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\n");
    rl_free(out);
    /* Gemma rejects two user turns in a row */
    rl_chat_msg bad[] = {{"user", "a"}, {"user", "b"}};
    assert_int_equal(rl_template_render(g, strlen(g), bad, 2, false, "", "", &out, &n, &err), RL_ERR_INVALID);
    assert_non_null(strstr(err.msg, "roles must alternate"));
    const char *c = rl_template_builtin("chatml");
    assert_int_equal(rl_template_render(c, strlen(c), CONV + 1, 1, true, NULL, NULL, &out, &n, &err), RL_OK);
    assert_string_equal(out, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
    rl_free(out);
    assert_null(rl_template_builtin("nope"));
}

static void test_syntax_errors(void **state) {
    (void)state;
    expect_err("{% if true %}x", RL_ERR_FORMAT, "missing '{% endif %}'");
    expect_err("{% for x in y %}", RL_ERR_FORMAT, "endfor");
    expect_err("{{ 1 +  }}", RL_ERR_FORMAT, "1:9: expected an expression");
    expect_err("a\nb {{ 'abc }}", RL_ERR_FORMAT, "2:6: unterminated string");
    expect_err("{% endif %}", RL_ERR_FORMAT, "unexpected 'endif'");
    expect_err("{% include 'x.jinja' %}", RL_ERR_UNSUPPORTED, "unsupported statement 'include'");
    expect_err("{{ x | nosuchfilter }}", RL_ERR_UNSUPPORTED, "unknown filter 'nosuchfilter'");
    expect_err("{# never closed", RL_ERR_FORMAT, "unclosed comment");
    expect_err("{{ 'a' ", RL_ERR_FORMAT, "unclosed '{{' tag");
    expect_err("{{ @ }}", RL_ERR_FORMAT, "unexpected character '@'");
}

static void test_runtime_errors(void **state) {
    (void)state;
    expect_err("{{ raise_exception('boom') }}", RL_ERR_INVALID, "raise_exception: boom");
    expect_err("\n\n  {{ nope.attr }}", RL_ERR_FORMAT, "3:10: 'nope' is undefined");
    expect_err("{{ 'a' + 1 }}", RL_ERR_FORMAT, "unsupported operand types for +: 'str' and 'int'");
    expect_err("{{ 1 // 0 }}", RL_ERR_FORMAT, "division or modulo by zero");
    expect_err("{{ 9223372036854775807 + 1 }}", RL_ERR_RANGE, "integer overflow");
    expect_err("{% for x in 3 %}{% endfor %}", RL_ERR_FORMAT, "'int' object is not iterable");
    expect_err("{% set s = 'x' %}{% set s.a = 1 %}", RL_ERR_FORMAT, "not a namespace");
    expect_err("{{ 'x'.nomethod() }}", RL_ERR_FORMAT, "'str object' has no attribute 'nomethod'");
    expect_err("{{ 'x'.expandtabs() }}", RL_ERR_UNSUPPORTED, "no method 'expandtabs'"); /* Python has it; we do not */
}

static rl_status render_lim(const char *t, const rl_template_limits *lim, rl_err *err) {
    char *out = NULL;
    size_t n = 0;
    rl_status st = rl_template_render_json(t, strlen(t), "{}", 2, lim, &out, &n, err);
    rl_free(out);
    return st;
}

static void test_hostile(void **state) {
    (void)state;
    rl_template_limits lim;
    rl_template_limits_default(&lim);
    rl_err err = {0};
    /* nested loops of 10^12 iterations: stopped by the step limit */
    lim.max_steps = 100000;
    assert_int_equal(render_lim("{% for a in range(1000000) %}{% for b in range(1000000) %}{% endfor %}{% endfor %}",
                                &lim, &err),
                     RL_ERR_LIMIT);
    if (!strstr(err.msg, "steps")) fail_msg("%s", err.msg);
    /* huge output */
    rl_template_limits_default(&lim);
    lim.max_output = 1 << 20;
    assert_int_equal(render_lim("{% for i in range(100000) %}{{ 'x' * 100 }}{% endfor %}", &lim, &err), RL_ERR_LIMIT);
    assert_non_null(strstr(err.msg, "output larger than"));
    /* memory: string doubling */
    rl_template_limits_default(&lim);
    lim.max_memory = 8 << 20;
    assert_int_equal(render_lim("{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
                                &lim, &err),
                     RL_ERR_LIMIT);
    assert_non_null(strstr(err.msg, "memory"));
    assert_int_equal(render_lim("{{ 'x' * 9000000000000000000 }}", &lim, &err), RL_ERR_LIMIT);
    assert_int_equal(render_lim("{{ range(9000000000000000000) | length }}", &lim, &err), RL_ERR_LIMIT);
    /* deep nesting in expressions and blocks */
    rl_template_limits_default(&lim);
    char deep[20000];
    size_t k = 0;
    k += (size_t)sprintf(deep + k, "{{ ");
    for (int i = 0; i < 5000; i++) deep[k++] = '(';
    deep[k++] = '1';
    for (int i = 0; i < 5000; i++) deep[k++] = ')';
    k += (size_t)sprintf(deep + k, " }}");
    deep[k] = 0;
    assert_int_equal(render_lim(deep, &lim, &err), RL_ERR_LIMIT);
    assert_non_null(strstr(err.msg, "nesting deeper"));
    k = 0;
    for (int i = 0; i < 1500; i++) k += (size_t)sprintf(deep + k, "{%% if 1 %%}");
    deep[k] = 0;
    assert_int_equal(render_lim(deep, &lim, &err), RL_ERR_LIMIT);
    k = 0;
    for (int i = 0; i < 4000; i++) k += (size_t)sprintf(deep + k, "not ");
    deep[k] = 0;
    char t2[24000];
    snprintf(t2, sizeof t2, "{{ %s1 }}", deep);
    assert_int_equal(render_lim(t2, &lim, &err), RL_ERR_LIMIT);
    /* self-containing namespace: printing it must not recurse forever */
    assert_int_equal(render_lim("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}", &lim, &err), RL_ERR_LIMIT);
    /* deep value built at run time, then serialized */
    assert_int_equal(render_lim("{% set ns = namespace(v=1) %}{% for i in range(1000) %}{% set ns.v = [ns.v] %}{% endfor %}{{ ns.v | tojson }}",
                                &lim, &err),
                     RL_ERR_LIMIT);
    /* NULL / odd arguments */
    char *out = NULL;
    size_t n = 0;
    assert_int_equal(rl_template_render(NULL, 5, NULL, 0, false, NULL, NULL, &out, &n, &err), RL_ERR_INVALID);
    assert_int_equal(rl_template_render("x", 1, NULL, 3, false, NULL, NULL, &out, &n, &err), RL_ERR_INVALID);
    /* embedded NUL in the template is plain text */
    assert_int_equal(rl_template_render("a\0b", 3, NULL, 0, false, NULL, NULL, &out, &n, &err), RL_OK);
    assert_int_equal(n, 3);
    assert_memory_equal(out, "a\0b", 3);
    rl_free(out);
}

static void test_alloc_failure(void **state) {
    (void)state;
    const char *g = rl_template_builtin("gemma");
    for (long i = 0; i < 40; i++) {
        char *out = NULL;
        size_t n = 0;
        rl_err err = {0};
        rl_alloc_fail_after(i);
        rl_status st = rl_template_render(g, strlen(g), CONV, 4, true, "<bos>", "<eos>", &out, &n, &err);
        rl_alloc_fail_after(-1);
        if (st == RL_OK) {
            rl_free(out);
            break;
        }
        assert_int_equal(st, RL_ERR_NOMEM);
        assert_null(out);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_basics),          cmocka_unit_test(test_control_flow),
        cmocka_unit_test(test_whitespace),      cmocka_unit_test(test_filters_methods),
        cmocka_unit_test(test_tests_and_compare), cmocka_unit_test(test_json_context),
        cmocka_unit_test(test_builtins),        cmocka_unit_test(test_syntax_errors),
        cmocka_unit_test(test_runtime_errors),  cmocka_unit_test(test_hostile),
        cmocka_unit_test(test_alloc_failure),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
