/* Unit tests for the chat-template interpreter (src/chat/template*.c):
 * language features with exact expected output (macros, call and filter
 * blocks, filters, tests, methods, formatting: each as jinja2 renders it),
 * HF whitespace rules, built-in templates, and hostile templates that must
 * end in a clear error (bounded steps, output, memory, nesting and
 * recursion depth) rather than a crash. */
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
    if (err.code != code)
        fail_msg("template %s: code %d (%s), want %d", t, err.code, err.msg, code);
    if (!strstr(err.msg, substr))
        fail_msg("template %s: message [%s] lacks [%s]", t, err.msg, substr);
}

static void test_basics(void **state) {
    (void)state;
    expect("", "");
    expect("plain text", "plain text");
    expect("{{ bos_token }}{{ eos_token }}", "<s></s>");
    expect("{{ 'a' + 'b' ~ 1 }}", "ab1");
    expect("{# comment #}x", "x");
    expect("{{ messages | length }} {{ messages[1]['role'] }} {{ messages[1].content }}",
           "4 user Hi");
    /* tools and documents are passed as None, as apply_chat_template does */
    expect("{{ add_generation_prompt }} {{ none }} {{ true }} {{ tools is defined }} {{ tools is "
           "none }}"
           " {{ documents is none }} {{ functions is defined }}",
           "True None True True True True False");
    expect("{% if tools is not none %}T{% else %}no tools{% endif %}", "no tools");
    expect_err("{% for t in tools %}{{ t }}{% endfor %}", RL_ERR_FORMAT,
               "'NoneType' object is not iterable");
    expect("{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 2 ** 3 ** 2 }} {{ 7 % 3 }} {{ -7 // 2 }}",
           "7 9 64 1 -4");
    expect("{{ 1 / 4 }} {{ 1e20 }} {{ 0.1 + 0.2 }} {{ 1.0 }} {{ 1e-7 }}",
           "0.25 1e+20 0.30000000000000004 1.0 1e-07");
    expect("{{ [1, 'a', none] }} {{ {'k': (1,)} }}", "[1, 'a', None] {'k': (1,)}");
}

static void test_control_flow(void **state) {
    (void)state;
    expect("{% for m in messages %}{{ loop.index }}{{ m.role[0] }}{% if not loop.last %},{% endif "
           "%}{% endfor %}",
           "1s,2u,3a,4u");
    expect("{% for m in messages[1:] %}{{ loop.index0 }}/{{ loop.length }}{{ loop.first }} {% "
           "endfor %}",
           "0/3True 1/3False 2/3False ");
    expect("{% if 0 %}a{% elif '' %}b{% elif [1] %}c{% else %}d{% endif %}", "c");
    expect("{% set x = 1 %}{% for i in [1,2] %}{% set x = x + 10 %}{{ x }}{% endfor %}{{ x }}",
           "11111");
    expect("{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}{% endfor "
           "%}{{ ns.n }}",
           "4");
    expect("{% for i in range(10) %}{% if i == 1 %}{% continue %}{% endif %}{% if i == 4 %}{% "
           "break %}{% endif %}{{ i }}{% endfor %}",
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
    expect("{{ '  a b  ' | trim }}|{{ ' x '.strip() }}|{{ 'xxaxx'.strip('x') }}|{{ "
           "'\xc2\xa0u\xe3\x80\x80'.strip() }}",
           "a b|x|a|u");
    expect("{{ 'Ab' | upper }}{{ 'Ab' | lower }}{{ 'a b' | title }}{{ 'aB' | capitalize }}",
           "ABabA BAb");
    expect("{{ x | default('d') }}{{ '' | default('e', true) }}{{ 'v' | d('no') }}", "dev");
    expect("{{ 'a-b' | replace('-', '+') }} {{ [1, 2] | join(',') }} {{ 'h\xc3\xa9' | length }}",
           "a+b 1,2 2");
    expect("{{ {'a': [1, 2.5, 'q\"\xc3\xa9'], 'b': none} | tojson }}",
           "{\"a\": [1, 2.5, \"q\\\"\xc3\xa9\"], \"b\": null}");
    expect("{{ [1] | tojson(indent=2) }}", "[\n  1\n]");
    expect("{{ 'a,b,,c'.split(',') }} {{ ' a  b '.split() }}", "['a', 'b', '', 'c'] ['a', 'b']");
    /* whitespace is decoded strictly: an overlong encoding of a space (C0 A0)
     * or a stray continuation byte is not whitespace, so it is kept */
    expect("{{ '\xc0\xa0x\xc0\xa0'.strip() }}|{{ 'a\xc0\xa0"
           "b'.split() }}|{{ ' \x80 '.strip() }}",
           "\xc0\xa0x\xc0\xa0|['a\xc0\xa0"
           "b']|\x80");
    expect(
        "{{ 'abc'.startswith('ab') }}{{ 'abc'.endswith('bc') }}{{ 'abc'.startswith(('x', 'a')) }}",
        "TrueTrueTrue");
    expect("{{ messages | map(attribute='role') | join(' ') }}", "system user assistant user");
    expect("{{ messages | selectattr('role', 'equalto', 'user') | list | length }}", "2");
    expect("{{ [3, 1, 2] | sort | list }} {{ [1, 1, 2] | unique | list }} {{ 'abc' | reverse }}",
           "[1, 2, 3] [1, 2] cba");
    expect("{{ 'h\xc3\xa9llo'[1] }}{{ 'abcdef'[1:4] }}{{ 'abc'[::-1] }}{{ [1, 2, 3][-1] }}",
           "\xc3\xa9"
           "bcdcba3");
    expect("{{ {'a': 1}.get('a') }}{{ {'a': 1}.get('b', 2) }}{{ {'a': 1}.keys() | list }}",
           "12['a']");
}

static void test_tests_and_compare(void **state) {
    (void)state;
    expect("{{ x is defined }}{{ x is undefined }}{{ none is none }}{{ 'a' is string }}{{ 1 is "
           "number }}",
           "FalseTrueTrueTrueTrue");
    expect("{{ [] is iterable }}{{ {} is mapping }}{{ 3 is odd }}{{ 4 is divisibleby 2 }}{{ 1 is "
           "not string }}",
           "TrueTrueTrueTrueTrue");
    expect("{{ 1 < 2 < 3 }}{{ 'a' in 'cat' }}{{ 'z' not in ['a'] }}{{ 'role' in messages[0] }}{{ 1 "
           "== 1.0 }}",
           "TrueTrueTrueTrueTrue");
    expect("{{ 1 and 'x' }} {{ 0 or 'y' }} {{ not [] }}", "x y True");
}

static void test_json_context(void **state) {
    (void)state;
    const char *t =
        "{% for m in messages %}{{ m.role }}{% for c in m.tool_calls %}:{{ c.function.name }}"
        "({{ c.function.arguments | tojson }}){% endfor %};{% endfor %}{{ tools | length }}";
    const char *ctx =
        "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}, {\"role\": \"assistant\", "
        "\"content\": null, \"tool_calls\": [{\"function\": {\"name\": \"f\", "
        "\"arguments\": {\"z\": 1, \"a\": [true]}}}]}], \"tools\": [1, 2]}";
    char *out = NULL;
    size_t n = 0;
    rl_err err = {0};
    assert_int_equal(rl_template_render_json(t, strlen(t), ctx, strlen(ctx), NULL, &out, &n, &err),
                     RL_OK);
    assert_string_equal(out, "user;assistant:f({\"z\": 1, \"a\": [true]});2");
    rl_free(out);
    assert_int_equal(rl_template_render_json(t, strlen(t), "[1]", 3, NULL, &out, &n, &err),
                     RL_ERR_FORMAT);
    assert_null(out);
    assert_int_equal(rl_template_render_json(t, strlen(t), "{bad", 4, NULL, &out, &n, &err),
                     RL_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "context JSON"));
}

static void test_builtins(void **state) {
    (void)state;
    rl_err err = {0};
    char *out = NULL;
    size_t n = 0;
    const char *g = rl_template_builtin("gemma");
    assert_non_null(g);
    assert_int_equal(
        rl_template_render(g, strlen(g), CONV, 4, true, "<bos>", "<eos>", &out, &n, &err), RL_OK);
    assert_string_equal(out, "<bos><start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n"
                             "<start_of_turn>model\nHello!<end_of_turn>\n"
                             "<start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\n");
    rl_free(out);
    /* Gemma rejects two user turns in a row */
    rl_chat_msg bad[] = {{"user", "a"}, {"user", "b"}};
    assert_int_equal(rl_template_render(g, strlen(g), bad, 2, false, "", "", &out, &n, &err),
                     RL_ERR_INVALID);
    assert_non_null(strstr(err.msg, "roles must alternate"));
    const char *c = rl_template_builtin("chatml");
    assert_int_equal(
        rl_template_render(c, strlen(c), CONV + 1, 1, true, NULL, NULL, &out, &n, &err), RL_OK);
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
    expect_err("{{ 'x'.expandtabs() }}", RL_ERR_UNSUPPORTED,
               "no method 'expandtabs'"); /* Python has it; we do not */
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
    assert_int_equal(
        render_lim(
            "{% for a in range(1000000) %}{% for b in range(1000000) %}{% endfor %}{% endfor %}",
            &lim, &err),
        RL_ERR_LIMIT);
    if (!strstr(err.msg, "steps")) fail_msg("%s", err.msg);
    /* huge output */
    rl_template_limits_default(&lim);
    lim.max_output = 1 << 20;
    assert_int_equal(
        render_lim("{% for i in range(100000) %}{{ 'x' * 100 }}{% endfor %}", &lim, &err),
        RL_ERR_LIMIT);
    assert_non_null(strstr(err.msg, "output larger than"));
    /* memory: string doubling */
    rl_template_limits_default(&lim);
    lim.max_memory = 8 << 20;
    assert_int_equal(render_lim("{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set "
                                "ns.s = ns.s ~ ns.s %}{% endfor %}",
                                &lim, &err),
                     RL_ERR_LIMIT);
    assert_non_null(strstr(err.msg, "memory"));
    assert_int_equal(render_lim("{{ 'x' * 9000000000000000000 }}", &lim, &err), RL_ERR_LIMIT);
    assert_int_equal(render_lim("{{ range(9000000000000000000) | length }}", &lim, &err),
                     RL_ERR_LIMIT);
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
    assert_int_equal(
        render_lim("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}", &lim, &err),
        RL_ERR_LIMIT);
    /* deep value built at run time, then serialized */
    assert_int_equal(render_lim("{% set ns = namespace(v=1) %}{% for i in range(1000) %}{% set "
                                "ns.v = [ns.v] %}{% endfor %}{{ ns.v | tojson }}",
                                &lim, &err),
                     RL_ERR_LIMIT);
    /* NULL / odd arguments */
    char *out = NULL;
    size_t n = 0;
    assert_int_equal(rl_template_render(NULL, 5, NULL, 0, false, NULL, NULL, &out, &n, &err),
                     RL_ERR_INVALID);
    assert_int_equal(rl_template_render("x", 1, NULL, 3, false, NULL, NULL, &out, &n, &err),
                     RL_ERR_INVALID);
    /* embedded NUL in the template is plain text */
    assert_int_equal(rl_template_render("a\0b", 3, NULL, 0, false, NULL, NULL, &out, &n, &err),
                     RL_OK);
    assert_int_equal(n, 3);
    assert_memory_equal(out, "a\0b", 3);
    rl_free(out);
}

/* Expected outputs below are what jinja2 renders (transformers'
 * render_jinja_template, as apply_chat_template does) for the same
 * template over CONV with add_generation_prompt=True, bos "<s>". */

static void test_macros(void **state) {
    (void)state;
    expect("{% macro m(a, b=a ~ '!', c=none) %}[{{ a }}|{{ b }}|{{ c }}]{% endmacro %}{{ m(1) }}{{ "
           "m(1, 2) }}{{ m(c=3, a='x') }}{{ m() }}",
           "[1|1!|None][1|2|None][x|x!|3][|!|None]");
    expect("{% macro m(a) %}{{ a }}:{{ varargs }}:{{ kwargs }}{% endmacro %}{{ m(1, 2, 3, k='v') "
           "}}|{{ m(0) }}",
           "1:(2, 3):{'k': 'v'}|0:():{}");
    expect("{% set g = 'G' %}{% macro m() %}{{ g }}{{ i is defined }}{% endmacro %}{% set g = 'H' "
           "%}{% for i in [1] %}{{ m() }}{% endfor %}",
           "HFalse");
    expect("{% for i in [7] %}{% macro m() %}{{ i }}{% endmacro %}{{ m() }}{% endfor %}{% macro "
           "n() %}{% set local = 1 %}{% endmacro %}{{ n() }}{{ local is defined }}",
           "7False");
    expect("{% macro m(x) %}<{{ x }}>{% endmacro %}{{ m('a') | upper }}{{ m(1) ~ m(2) }}{{ m.name "
           "}}{{ m.arguments }}{{ m }}",
           "<A><1><2>m('x',)<Macro 'm'>");
    expect("{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * fact(n - 1) | int }}{% endif %}{% "
           "endmacro %}{{ fact(10) }}",
           "3628800");
    expect("{%- macro render(v) -%}\n  {%- if v is mapping -%}{ {%- for k, x in v | dictsort -%}{{ "
           "k }}: {{ render(x) }}{{ ', ' if not loop.last }}{%- endfor -%} }\n  {%- elif v is "
           "iterable and v is not string -%}[{%- for x in v -%}{{ render(x) }}{{ ', ' if not "
           "loop.last }}{%- endfor -%}]\n  {%- else -%}{{ v | tojson }}{%- endif -%}\n{%- endmacro "
           "-%}\n{{ render({'b': [1, {'c': none}], 'a': 'x'}) }}",
           "{a: \"x\", b: [1, {c: null}]}");
    /* jinja2: TypeError: macro 'm' takes not more than 1 argument(s) */
    expect_err("{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, 2) }}", RL_ERR_FORMAT,
               "macro 'm' takes not more than 1 argument(s)");
    /* jinja2: TypeError: macro 'm' takes no keyword argument 'b' */
    expect_err("{% macro m(a) %}{{ a }}{% endmacro %}{{ m(b=2) }}", RL_ERR_FORMAT,
               "macro 'm' takes no keyword argument 'b'");
    /* jinja2: TypeError: macro 'm' takes no keyword argument 'a' */
    expect_err("{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, a=2) }}", RL_ERR_FORMAT,
               "macro 'm' takes no keyword argument 'a'");
    /* jinja2: UndefinedError: parameter 'a' was not provided */
    expect_err("{% macro m(a) %}{{ a.x }}{% endmacro %}{{ m() }}", RL_ERR_FORMAT,
               "parameter 'a' was not provided");
}

static void test_call_blocks(void **state) {
    (void)state;
    expect("{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}{% call "
           "wrap('b') %}bold {{ messages[1].content }}{% endcall %}",
           "<b>bold Hi</b>");
    expect("{% macro each(xs) %}{% for x in xs %}{{ caller(x, loop.index) }}{% endfor %}{% "
           "endmacro %}{% for p in ['>'] %}{% call(v, i) each(['a', 'b']) %}{{ p }}{{ i }}{{ v }} "
           "{% endcall %}{% endfor %}",
           ">1a >2b ");
    expect("{% macro outer() %}({{ caller() }}){% endmacro %}{% macro inner() %}[{{ caller() }}]{% "
           "endmacro %}{% call outer() %}{% call inner() %}x{% endcall %}{% endcall %}",
           "([x])");
    expect("{% macro m() %}{{ caller is defined }}{% endmacro %}{{ m() }}", "False");
    expect(
        "{% macro m() %}{{ kwargs.caller() }}{% endmacro %}{% call m() %}via kwargs{% endcall %}",
        "via kwargs");
    /* jinja2: TypeError: macro 'm' was invoked with two values for the special caller argument.
     * This is most likel */
    expect_err("{% macro m() %}x{% endmacro %}{% call m() %}y{% endcall %}", RL_ERR_FORMAT,
               "macro 'm' was invoked with two values for the special caller argument");
    /* jinja2: TypeError: 'str' object is not callable */
    expect_err("{% set m = 'str' %}{% call m() %}y{% endcall %}", RL_ERR_FORMAT,
               "'str' object is not callable");
    /* jinja2: UndefinedError: No caller defined */
    expect_err("{% macro m() %}{{ caller() }}{% endmacro %}{{ m() }}", RL_ERR_FORMAT,
               "No caller defined");
}

static void test_filter_blocks(void **state) {
    (void)state;
    expect("{% filter upper %}abc {{ 'def' }}{% endfilter %}|{% filter replace('a', 'b') | title "
           "%}aaa ccc{% endfilter %}|{% set s | trim | upper %}  padded  {% endset %}[{{ s }}]",
           "ABC DEF|Bbb Ccc|[PADDED]");
    expect("{%- filter indent(2) %}\nline1\nline2\n{%- endfilter %}", "line1\n  line2");
    expect("{% set n | length %}abcd{% endset %}{{ n + 1 }}", "5");
    /* jinja2: TemplateAssertionError: No filter named 'nosuch'. */
    expect_err("{% filter nosuch %}x{% endfilter %}", RL_ERR_UNSUPPORTED,
               "unknown filter 'nosuch'");
}

/* getattr/getitem precedence, unsafe methods, undefined messages, Markup,
 * generators and dict views, namespace names, loop.changed, list/dict ops */
static void test_access_and_values(void **state) {
    (void)state;
    expect("{% set d = {'items': 1, 'k': 2} %}{{ d.items is callable }}{{ d['items'] }}{{ d.k }}{{ "
           "d['get'] is callable }}{{ d.nope is defined }}",
           "True12TrueFalse");
    expect("{% set l = [1] %}{{ l.append }}|{{ l.append is defined }}", "|False");
    /* jinja2: SecurityError: access to attribute 'append' of 'list' object is unsafe. */
    expect_err("{% set l = [1] %}{{ l.append(2) }}", RL_ERR_FORMAT,
               "access to attribute 'append' of 'list' object is unsafe.");
    /* jinja2: SecurityError: access to attribute 'update' of 'dict' object is unsafe. */
    expect_err("{{ {'a': 1}.update({'b': 2}) }}", RL_ERR_FORMAT,
               "access to attribute 'update' of 'dict' object is unsafe.");
    /* jinja2: UndefinedError: 'dict object' has no attribute 'nope' */
    expect_err("{{ messages[0].nope.deeper }}", RL_ERR_FORMAT,
               "'dict object' has no attribute 'nope'");
    /* jinja2: UndefinedError: list object has no element 9 */
    expect_err("{{ messages[9].role }}", RL_ERR_FORMAT, "list object has no element 9");
    /* jinja2: UndefinedError: 'None' has no attribute 'split' */
    expect_err("{{ none.split() }}", RL_ERR_FORMAT, "'None' has no attribute 'split'");
    expect(
        "{{ ('<a>' | safe) + '<b>' }} {{ '<b>' + ('&' | safe) }} {{ '\"q\" & \\'s\\'' | escape }} "
        "{{ ('<i>' | safe) | escape }} {{ ('<i>' | safe) | forceescape }} {{ ('<' | safe) ~ '<' }}",
        "<a>&lt;b&gt; &lt;b&gt;& &#34;q&#34; &amp; &#39;s&#39; <i> &lt;i&gt; <<");
    expect("{% set g = [1, 2, 3] | select('odd') %}{{ g | list }}{{ g | list }}|{{ 'T' if [] | "
           "select else 'F' }}|{{ [1] | map('string') | first }}|{{ [3, 1] | reverse | list }}",
           "[1, 3][]|T|1|[1, 3]");
    expect("{{ {'a': 1}.items() | length }} {{ {'a': 1}.keys() | list }} {{ {'a': 1}.items() is "
           "sequence }} {{ [1] | unique is iterable }} {{ 'x' is sequence }} {{ {} is sequence }}",
           "1 ['a'] False True True True");
    /* jinja2: TypeError: object of type 'generator' has no len() */
    expect_err("{{ [1] | map('string') | length }}", RL_ERR_FORMAT,
               "object of type 'generator' has no len()");
    /* jinja2: TypeError: Object of type generator is not JSON serializable */
    expect_err("{{ [1] | select | tojson }}", RL_ERR_FORMAT,
               "Object of type generator is not JSON serializable");
    /* jinja2: TypeError: Object of type dict_items is not JSON serializable */
    expect_err("{{ {'a': 1}.items() | tojson }}", RL_ERR_FORMAT,
               "Object of type dict_items is not JSON serializable");
    /* jinja2: SecurityError: Chat templates cannot store underscore-prefixed attributes on a
     * namespace, but got '_ */
    expect_err("{% set ns = namespace() %}{% set ns._private = 1 %}", RL_ERR_INVALID,
               "underscore-prefixed attributes on a namespace, but got '_private'");
    /* jinja2: SecurityError: Chat templates cannot store underscore-prefixed attributes on a
     * namespace, but got '_ */
    expect_err("{{ namespace(_x=1) }}", RL_ERR_INVALID,
               "underscore-prefixed attributes on a namespace, but got '_x'");
    expect("{% for x in [1, 1, 2, 1] %}{{ loop.changed(x) }}{% endfor %}|{% for x in 'ab' %}{{ "
           "loop.previtem is defined }}{{ loop.nextitem is defined }}{{ loop.cycle('o', 'e') }}{% "
           "endfor %}",
           "TrueFalseTrueTrue|FalseTrueoTrueFalsee");
    expect("{{ [1, 2] * 2 }} {{ (1,) * 3 }} {{ dict([('a', 1), ('b', 2)]) }} {{ "
           "dict.fromkeys(['x', 'y'], 0) }} {{ {'a': 1}.copy() }} {{ [1, 2, 1].count(1) }} {{ "
           "['a', 'b'].index('b') }} {{ [1, none] }} {{ [x] }}",
           "[1, 2, 1, 2] (1, 1, 1) {'a': 1, 'b': 2} {'x': 0, 'y': 0} {'a': 1} 2 1 [1, None] "
           "[Undefined]");
}

static void test_more_filters(void **state) {
    (void)state;
    expect("{{ {'b': 1, 'A': 3, 'a': 2} | dictsort }} {{ {'b': 1, 'A': 3, 'a': 2} | dictsort(true) "
           "}} {{ {'x': 2, 'y': 1} | dictsort(by='value', reverse=true) }}",
           "[('A', 3), ('a', 2), ('b', 1)] [('A', 3), ('a', 2), ('b', 1)] [('x', 2), ('y', 1)]");
    expect("{{ ['b', 'A', 'a', 'B'] | unique | list }} {{ ['b', 'A', 'a', 'B'] | unique(true) | "
           "list }} {{ [{'n': 'X'}, {'n': 'x'}, {'n': 'y'}] | unique(attribute='n') | "
           "map(attribute='n') | list }}",
           "['b', 'A'] ['b', 'A', 'a', 'B'] ['X', 'y']");
    /* jinja2: TypeError: unhashable type: 'dict' */
    expect_err("{{ [{'a': 1}] | unique | list }}", RL_ERR_FORMAT, "unhashable type: 'dict'");
    expect("{{ ['b', 'A', 'c'] | sort }} {{ ['b', 'A', 'c'] | sort(case_sensitive=true) }} {{ "
           "[{'x': 2, 'y': 'b'}, {'x': 1, 'y': 'c'}, {'x': 2, 'y': 'a'}] | sort(attribute='x,y') | "
           "map(attribute='y') | join }} {{ [3, 1, 2] | sort(reverse=true) }}",
           "['A', 'b', 'c'] ['A', 'b', 'c'] cab [3, 2, 1]");
    expect(
        "{{ ['b', 'A'] | min }} {{ [{'v': 3}, {'v': 9}] | max(attribute='v') }} {{ [] | min is "
        "defined }} {{ [1, 2.5] | sum }} {{ [{'v': 3}, {'v': 9}] | sum(attribute='v', start=1) }}",
        "A {'v': 9} False 3.5 13");
    expect("{{ [1, 2, 3, 4, 5] | batch(2) | list }} {{ [1, 2, 3] | batch(2, 0) | list }} {{ [1, 2, "
           "3, 4, 5] | slice(2) | list }} {{ [1, 2, 3] | slice(2, 'x') | list }}",
           "[[1, 2], [3, 4], [5]] [[1, 2], [3, 0]] [[1, 2, 3], [4, 5]] [[1, 2], [3, 'x']]");
    expect("{{ 'foo bar baz qux' | truncate(9) }}|{{ 'foo bar baz qux' | truncate(9, true) }}|{{ "
           "'foo bar baz qux' | truncate(11) }}|{{ 'ab' | center(6) }}|{{ {'a': 1} | attr('a') is "
           "defined }}|{{ '%s=%d' | format('x', 3) }}|{{ '%(k)s' | format(k='v') }}",
           "foo...|foo ba...|foo bar baz qux|  ab  |False|x=3|v");
    expect("{{ 2.5 | round }} {{ 3.5 | round }} {{ 2.675 | round(2) }} {{ 7 | round }} {{ 2.1 | "
           "round(0, 'ceil') }} {{ 2.9 | round(method='floor') }} {{ '0x1f' | int(0, 16) }} {{ 'z' "
           "| int(36, base=36) }} {{ '12.7' | int }} {{ 'x' | int(-1) }} {{ '1e2' | float }}",
           "2.0 4.0 2.67 7 3.0 2.0 31 35 12 -1 100.0");
    expect("{{ \"they're o'neil-smith (x)\" | title }} {{ \"they're o'neil-smith (x)\".title() }} "
           "{{ 'a\\r\\nb\\n' | indent(2) }}|{{ 'a\\n\\nb' | indent(2, true, true) }}|{{ 'ab, c-d "
           "e_f 42!' | wordcount }}",
           "They're O'neil-Smith (X) They'Re O'Neil-Smith (X) a\n  b\n|  a\n  \n  b|5");
    expect("{{ {'\xc3\xa9': [1, 2]} | tojson(ensure_ascii=true) }} {{ {'b': 1, 'a': 2} | "
           "tojson(sort_keys=true) }} {{ {'a': [1]} | tojson(separators=(',', ':')) }} {{ {'a': "
           "[1]} | tojson(indent='\\t') }} {{ '\xf0\x9f\x98\x80' | tojson(ensure_ascii=true) }}",
           "{\"\\u00e9\": [1, 2]} {\"a\": 2, \"b\": 1} {\"a\":[1]} {\n\t\"a\": [\n\t\t1\n\t]\n} "
           "\"\\ud83d\\ude00\"");
    /* jinja2: TypeError: unsupported operand type(s) for +: 'int' and 'str' */
    expect_err("{{ [1, 'a'] | sum }}", RL_ERR_FORMAT,
               "unsupported operand types for +: 'int' and 'str'");
}

static void test_str_methods_and_format(void **state) {
    (void)state;
    expect("{{ 'a b  c '.rsplit(None, 1) }} {{ 'a.b.c'.rsplit('.', 1) }} {{ 'k=v=w'.partition('=') "
           "}} {{ 'k=v=w'.rpartition('=') }} {{ 'ab'.center(5, '*') }}{{ 'ab'.ljust(4, '.') }}{{ "
           "'ab'.rjust(4) }}{{ '-7'.zfill(4) }}",
           "['a b', 'c'] ['a.b', 'c'] ('k', '=', 'v=w') ('k=v', '=', 'w') **ab*ab..  ab-007");
    expect(
        "{{ 'prefix-x'.removeprefix('prefix-') }} {{ 'x.jinja'.removesuffix('.jinja') }} {{ "
        "'aBc'.swapcase() }} {{ 'Stra\xc3\x9f"
        "e'.casefold() }} {{ 'abcabc'.rfind('b') }} {{ 'abc'.find('z') }} {{ 'ABC'.isupper() }}{{ "
        "'AbC'.isupper() }}{{ 'abc1'.islower() }}{{ '12'.isdigit() }}{{ '\xc3\xa9'.isalpha() }}",
        "x x AbC strasse 4 -1 TrueFalseTrueTrueTrue");
    expect(
        "{{ 'h\xc3\xa9llo w\xc3\xb6rld'.upper() }} {{ '\xc3\x80\xc3\x89\xc3\x8e'.lower() }} {{ "
        "'stra\xc3\x9f"
        "e' | upper }} {{ '\xce\x9f\xce\x94\xce\x9f\xce\xa3 \xce\xa3\xce\x91\xce\xa3'.lower() }} "
        "{{ '\xc3\xa9mile zola' | title }} {{ '\xc3\xa9lan'.capitalize() }}",
        "H\xc3\x89LLO W\xc3\x96RLD \xc3\xa0\xc3\xa9\xc3\xae STRASSE "
        "\xce\xbf\xce\xb4\xce\xbf\xcf\x82 \xcf\x83\xce\xb1\xcf\x82 \xc3\x89mile Zola \xc3\x89lan");
    expect("{{ 'a\\r\\nb\\rc\\nd'.splitlines() }} {{ 'a\\nb\\n'.splitlines(true) }}",
           "['a', 'b', 'c', 'd'] ['a\\n', 'b\\n']");
    /* jinja2: ValueError: substring not found */
    expect_err("{{ 'abc'.index('z') }}", RL_ERR_FORMAT, "substring not found");
    expect(
        "{{ '{}-{}'.format('a', 1) }} {{ '{1}{0}'.format('a', 'b') }} {{ '{x}/{y!r}'.format(x=1, "
        "y='q') }} {{ '{:>6.2f}|{:<4}|{:^5}|{:05d}|{:,}|{:x}|{:.1%}'.format(3.14159, 'ab', 'c', "
        "42, 1234567, 255, 0.25) }} {{ '{0[k]}'.format({'k': 'v'}) }} {{ '{{}}'.format() }}",
        "a-1 ba 1/'q'   3.14|ab  |  c  |00042|1,234,567|ff|25.0% v {}");
    expect("{{ '%s|%5s|%-5s|%.2s' % ('a', 'b', 'c', 'def') }} {{ '%d %i %05d %+d %x %X %o %#x' % "
           "(1, 2, 3, 4, 255, 255, 8, 255) }} {{ '%.3f %e %g %G' % (3.14159, 12345.678, 0.00001, "
           "1e20) }} {{ '%(a)s%(b)r' % {'a': 1, 'b': 'x'} }} {{ '%c%c' % (65, 'b') }} {{ '100%%' % "
           "() }} {{ '%s' % [1, 2] }}",
           "a|    b|c    |de 1 2 00003 +4 ff FF 10 0xff 3.142 1.234568e+04 1e-05 1E+20 1'x' Ab "
           "100% [1, 2]");
    /* jinja2: TypeError: not enough arguments for format string */
    expect_err("{{ '%s %s' % ('a',) }}", RL_ERR_FORMAT, "not enough arguments for format string");
    /* jinja2: TypeError: not all arguments converted during string formatting */
    expect_err("{{ '%s' % ('a', 'b') }}", RL_ERR_FORMAT,
               "not all arguments converted during string formatting");
    /* jinja2: TypeError: %d format: a real number is required, not str */
    expect_err("{{ '%d' % 'x' }}", RL_ERR_FORMAT, "%d format: a real number is required, not str");
}

/* A tool-use conversation in the OpenAI shape (tool_calls with dict and
 * string arguments, tool results with tool_call_id), a tools list and an
 * extra kwarg, through a macro. */
static void test_tools_context(void **state) {
    (void)state;
    const char *t =
        "{%- macro render_args(args) -%}{%- if args is string -%}{{ args }}{%- else -%}{{ args | "
        "tojson }}{%- endif -%}{%- endmacro -%}\n"
        "{%- for t in tools %}<tool>{{ t.function.name }}: {{ t.function.parameters.properties | "
        "dictsort | map(attribute=0) | join(',') }}</tool>{% endfor %}\n"
        "{%- for m in messages %}[{{ m.role }}]{% if m.tool_calls %}{% for c in m.tool_calls %}{{ "
        "c.function.name }}({{ render_args(c.function.arguments) }})#{{ c.id }}{% endfor %}{% elif "
        "m.role == 'tool' %}{{ m.tool_call_id }}={{ m.content }}{% else %}{{ m.content }}{% endif "
        "%}{% endfor %}\n"
        "{%- if add_generation_prompt %}[assistant]{% endif %}{{ enable_thinking | default(true) "
        "}}";
    const char *ctx =
        "{\"messages\": [{\"role\": \"user\", \"content\": \"w?\"}, {\"role\": \"assistant\", "
        "\"content\": null, \"tool_calls\": [{\"id\": \"c1\", \"type\": \"function\", "
        "\"function\": {\"name\": \"get\", \"arguments\": {\"city\": \"Z\xc3\xbcrich\", \"n\": "
        "2}}}]}, {\"role\": \"tool\", \"tool_call_id\": \"c1\", \"name\": \"get\", \"content\": "
        "\"sunny\"}, {\"role\": \"assistant\", \"content\": null, \"tool_calls\": [{\"id\": "
        "\"c2\", \"type\": \"function\", \"function\": {\"name\": \"get\", \"arguments\": "
        "\"{\\\"city\\\": \\\"Bern\\\"}\"}}]}], \"tools\": [{\"type\": \"function\", \"function\": "
        "{\"name\": \"get\", \"parameters\": {\"type\": \"object\", \"properties\": {\"unit\": "
        "{\"type\": \"string\"}, \"city\": {\"type\": \"string\"}}}}}], \"add_generation_prompt\": "
        "true, \"enable_thinking\": false}";
    char *out = NULL;
    size_t n = 0;
    rl_err err = {0};
    if (rl_template_render_json(t, strlen(t), ctx, strlen(ctx), NULL, &out, &n, &err) != RL_OK)
        fail_msg("%s", err.msg);
    assert_string_equal(
        out, "<tool>get: city,unit</tool>[user]w?[assistant]get({\"city\": \"Z\xc3\xbcrich\", "
             "\"n\": 2})#c1[tool]c1=sunny[assistant]get({\"city\": \"Bern\"})#c2[assistant]False");
    rl_free(out);
}

/* Renders t over the JSON context ctx; fails the test unless the outcome is
 * want (output) or, when want is NULL, an RL_ERR_FORMAT naming `err_sub`. */
static void expect_json(const char *t, const char *ctx, const char *want, const char *err_sub) {
    char *out = NULL;
    size_t n = 0;
    rl_err err = {0};
    rl_status st = rl_template_render_json(t, strlen(t), ctx, strlen(ctx), NULL, &out, &n, &err);
    if (want) {
        if (st != RL_OK) fail_msg("%s over %s failed: %s", t, ctx, err.msg);
        if (strcmp(out, want) != 0)
            fail_msg("%s over %s\n got: [%s]\nwant: [%s]", t, ctx, out, want);
        rl_free(out);
    } else {
        if (st != RL_ERR_FORMAT || !strstr(err.msg, err_sub))
            fail_msg("%s over %s: %d [%s]", t, ctx, st, err.msg);
        assert_null(out);
    }
}

/* apply_chat_template's message preparation (expected outputs from
 * transformers' _normalize_chat_messages + render_jinja_template): None
 * values dropped, reasoning aliased in Python's key order, non-dict
 * messages rejected; the {role, content} entry point does the same with a
 * NULL content. */
static void test_hf_message_normalization(void **state) {
    (void)state;
    const char *t = "{{ messages[0] | tojson }} {{ messages[0].content is defined }}";
    expect_json(t,
                "{\"messages\": [{\"role\": \"assistant\", \"content\": null, \"reasoning\": "
                "\"r\", \"x\": null}]}",
                "{\"thinking\": \"r\", \"role\": \"assistant\", \"reasoning\": \"r\", "
                "\"reasoning_content\": \"r\"} False",
                NULL);
    expect_json(
        t,
        "{\"messages\": [{\"role\": \"a\", \"thinking\": \"t\", \"reasoning_content\": \"rc\"}]}",
        "{\"thinking\": \"t\", \"role\": \"a\", \"reasoning_content\": \"rc\"} False", NULL);
    expect_json(t, "{\"messages\": [{\"role\": \"a\", \"thinking\": null, \"reasoning\": \"\"}]}",
                "{\"thinking\": \"\", \"role\": \"a\", \"reasoning\": \"\", \"reasoning_content\": "
                "\"\"} False",
                NULL);
    /* nested None values stay; only a message's own keys are dropped */
    expect_json("{{ messages[0].tool_calls[0] | tojson }}",
                "{\"messages\": [{\"role\": \"assistant\", \"tool_calls\": [{\"id\": null}]}]}",
                "{\"id\": null}", NULL);
    /* other variables are not touched, nor a `messages` that is not a list */
    expect_json("{{ other | tojson }} {{ messages }}",
                "{\"other\": [{\"a\": null}], \"messages\": \"m\"}", "[{\"a\": null}] m", NULL);
    expect_json("x", "{\"messages\": [{\"role\": \"user\"}, \"x\"]}", NULL,
                "messages[1]: chat messages should be dicts, got str");
    rl_chat_msg m[] = {{"assistant", NULL}, {"user", "u"}};
    const char *t2 =
        "{% for x in messages %}{{ x | tojson }}{{ x.content is defined }};{% endfor %}";
    char *out = NULL;
    size_t n = 0;
    rl_err err = {0};
    assert_int_equal(rl_template_render(t2, strlen(t2), m, 2, false, NULL, NULL, &out, &n, &err),
                     RL_OK);
    assert_string_equal(
        out, "{\"role\": \"assistant\"}False;{\"role\": \"user\", \"content\": \"u\"}True;");
    rl_free(out);
}

/* Macros, recursion and call blocks stay inside the limits: a clear
 * RL_ERR_LIMIT, never a crash or a hang. */
static void test_recursion_limits(void **state) {
    (void)state;
    rl_template_limits lim;
    rl_err err = {0};
    rl_template_limits_default(&lim);
    /* unbounded recursion: stopped at limits.max_depth macro calls */
    assert_int_equal(
        render_lim("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", &lim, &err),
        RL_ERR_LIMIT);
    if (!strstr(err.msg, "macro calls nested deeper than 100")) fail_msg("%s", err.msg);
    /* through caller(): a call block inside the recursion */
    assert_int_equal(render_lim("{% macro m() %}{{ caller() }}{% endmacro %}{% macro r() %}{% call "
                                "m() %}{{ r() }}{% endcall %}"
                                "{% endmacro %}{{ r() }}",
                                &lim, &err),
                     RL_ERR_LIMIT);
    if (!strstr(err.msg, "nested deeper")) fail_msg("%s", err.msg);
    /* bounded recursion under a small max_depth: fine at 8 levels, refused at 20 */
    lim.max_depth = 10;
    const char *down =
        "{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}";
    char t[256];
    snprintf(t, sizeof t, "%s{{ f(8) }}", down);
    if (render_lim(t, &lim, &err) != RL_OK) fail_msg("%s", err.msg);
    snprintf(t, sizeof t, "%s{{ f(20) }}", down);
    assert_int_equal(render_lim(t, &lim, &err), RL_ERR_LIMIT);
    if (!strstr(err.msg, "macro calls nested deeper than 10")) fail_msg("%s", err.msg);
    /* exponential fan-out at a legal depth: the step limit */
    rl_template_limits_default(&lim);
    lim.max_steps = 200000;
    assert_int_equal(render_lim("{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{{ f(n - 1) }}{% "
                                "endif %}{% endmacro %}{{ f(40) }}",
                                &lim, &err),
                     RL_ERR_LIMIT);
    if (!strstr(err.msg, "steps")) fail_msg("%s", err.msg);
    /* a flat operator chain 4000 terms long nests 4000 deep at run time */
    rl_template_limits_default(&lim);
    static char chain[20000];
    size_t k = (size_t)sprintf(chain, "{{ 1");
    for (int i = 0; i < 4000; i++) k += (size_t)sprintf(chain + k, "+1");
    sprintf(chain + k, " }}");
    assert_int_equal(render_lim(chain, &lim, &err), RL_ERR_LIMIT);
    if (!strstr(err.msg, "evaluation nested deeper than 1000")) fail_msg("%s", err.msg);
    /* ... while a chain of 200 is fine */
    k = (size_t)sprintf(chain, "{{ 1");
    for (int i = 0; i < 200; i++) k += (size_t)sprintf(chain + k, "+1");
    sprintf(chain + k, " }}");
    if (render_lim(chain, &lim, &err) != RL_OK) fail_msg("%s", err.msg);
    /* macro output counts against max_output while it is being captured */
    lim.max_output = 1 << 20;
    assert_int_equal(render_lim("{% macro m() %}{% for i in range(100000) %}{{ 'x' * 100 }}{% "
                                "endfor %}{% endmacro %}{% set s = m() %}",
                                &lim, &err),
                     RL_ERR_LIMIT);
    assert_non_null(strstr(err.msg, "output larger than"));
    /* repeated scans of a long string are charged by length (a small step
     * budget keeps the test quick) */
    rl_template_limits_default(&lim);
    lim.max_steps = 1000000;
    assert_int_equal(
        render_lim(
            "{% set s = 'a' * 8000000 %}{% for i in range(1000000) %}{{ 'b' in s }}{% endfor %}",
            &lim, &err),
        RL_ERR_LIMIT);
    if (!strstr(err.msg, "steps")) fail_msg("%s", err.msg);
    /* dict lookups and list comparisons are linear: big ones are charged by size */
    assert_int_equal(render_lim("{{ dict.fromkeys(range(100000)) | length }}", &lim, &err),
                     RL_ERR_LIMIT);
    if (!strstr(err.msg, "steps")) fail_msg("%s", err.msg);
    assert_int_equal(render_lim("{% set l = range(100000) | list %}{% for i in range(100000) %}{{ "
                                "l == l }}{{ 99999 in l }}{% endfor %}",
                                &lim, &err),
                     RL_ERR_LIMIT);
    if (!strstr(err.msg, "steps")) fail_msg("%s", err.msg);
    /* huge widths in formatting and padding */
    assert_int_equal(render_lim("{{ '%*s' % (100000000, 'x') }}", &lim, &err), RL_ERR_LIMIT);
    assert_int_equal(render_lim("{{ '{:>99999999}'.format(1) }}", &lim, &err), RL_ERR_LIMIT);
    assert_int_equal(render_lim("{{ 'x'.center(100000000) }}", &lim, &err), RL_ERR_LIMIT);
    assert_int_equal(render_lim("{{ [1] * 9000000000000000000 }}", &lim, &err), RL_ERR_LIMIT);
    /* parse errors in the new statements */
    expect_err("{% macro m(a=1, b) %}{% endmacro %}", RL_ERR_FORMAT,
               "non-default argument follows default argument");
    expect_err("{% macro m(a, a) %}{% endmacro %}", RL_ERR_FORMAT, "duplicate parameter 'a'");
    expect_err("{% macro m() %}x", RL_ERR_FORMAT, "missing '{% endmacro %}'");
    expect_err("{% call m %}x{% endcall %}", RL_ERR_FORMAT, "call block: expected a macro call");
    expect_err("{% endcall %}", RL_ERR_FORMAT, "unexpected 'endcall'");
    expect_err("{% filter %}x{% endfilter %}", RL_ERR_FORMAT, "expected a name");
}

static void test_alloc_failure(void **state) {
    (void)state;
    const char *g = rl_template_builtin("gemma");
    for (long i = 0; i < 40; i++) {
        char *out = NULL;
        size_t n = 0;
        rl_err err = {0};
        rl_alloc_fail_after(i);
        rl_status st =
            rl_template_render(g, strlen(g), CONV, 4, true, "<bos>", "<eos>", &out, &n, &err);
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
        cmocka_unit_test(test_basics),
        cmocka_unit_test(test_control_flow),
        cmocka_unit_test(test_whitespace),
        cmocka_unit_test(test_filters_methods),
        cmocka_unit_test(test_tests_and_compare),
        cmocka_unit_test(test_json_context),
        cmocka_unit_test(test_builtins),
        cmocka_unit_test(test_syntax_errors),
        cmocka_unit_test(test_runtime_errors),
        cmocka_unit_test(test_hostile),
        cmocka_unit_test(test_macros),
        cmocka_unit_test(test_call_blocks),
        cmocka_unit_test(test_filter_blocks),
        cmocka_unit_test(test_access_and_values),
        cmocka_unit_test(test_more_filters),
        cmocka_unit_test(test_str_methods_and_format),
        cmocka_unit_test(test_tools_context),
        cmocka_unit_test(test_recursion_limits),
        cmocka_unit_test(test_hf_message_normalization),
        cmocka_unit_test(test_alloc_failure),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
