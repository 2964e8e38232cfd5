/* Unit tests for the tool-call and reasoning parser (src/chat/toolcall.c)
 * on fixed model outputs of every format: Hermes/Qwen <tool_call>, Llama 3
 * JSON and <|python_tag|>, Mistral [TOOL_CALLS] (array and v11), Granite
 * <|tool_call|>, <think> blocks (opened by the output or by the prompt),
 * malformed and truncated calls, and the streaming invariant: every prefix
 * parsed as partial gives fields that are prefixes of the final parse.
 * Also the template -> format detection. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/chat.h"

static rl_chat_output parse(rl_tool_format f, bool reasoning, bool think_open, const char *text,
                            bool partial) {
    rl_chat_syntax syn = {.tools = f, .reasoning = reasoning, .think_open = think_open};
    rl_chat_output o;
    rl_err err;
    assert_int_equal(rl_chat_parse(&syn, text, strlen(text), partial, &o, &err), RL_OK);
    return o;
}

static void check_call(const rl_chat_output *o, int i, const char *name, const char *args,
                       bool complete) {
    assert_true(i < o->n_calls);
    assert_string_equal(o->calls[i].name, name);
    assert_string_equal(o->calls[i].arguments, args);
    assert_int_equal(o->calls[i].complete, complete);
}

static bool is_prefix(const char *a, const char *b) {
    return strncmp(a, b, strlen(a)) == 0;
}

/* Every prefix of text, parsed as partial, is consistent with the final
 * parse: content, reasoning, the calls so far and their arguments are
 * prefixes of the final ones, and names never change once reported. */
static void check_streaming(rl_tool_format f, bool reasoning, bool think_open, const char *text) {
    rl_chat_output fin = parse(f, reasoning, think_open, text, false);
    size_t n = strlen(text);
    char *buf = malloc(n + 1);
    int32_t prev_calls = 0;
    for (size_t k = 0; k <= n; k++) {
        memcpy(buf, text, k);
        buf[k] = 0;
        rl_chat_output o = parse(f, reasoning, think_open, buf, true);
        if (!is_prefix(o.content, fin.content) || !is_prefix(o.reasoning, fin.reasoning))
            fail_msg("prefix %zu of %s: content '%s' / reasoning '%s' not prefixes of '%s' / '%s'",
                     k, text, o.content, o.reasoning, fin.content, fin.reasoning);
        assert_true(o.n_calls <= fin.n_calls);
        assert_true(o.n_calls >= prev_calls);
        prev_calls = o.n_calls;
        for (int32_t i = 0; i < o.n_calls; i++) {
            assert_string_equal(o.calls[i].name, fin.calls[i].name);
            if (!is_prefix(o.calls[i].arguments, fin.calls[i].arguments))
                fail_msg("prefix %zu: arguments '%s' not a prefix of '%s'", k, o.calls[i].arguments,
                         fin.calls[i].arguments);
            if (i + 1 < o.n_calls) assert_true(o.calls[i].complete);
        }
        rl_chat_output_free(&o);
    }
    free(buf);
    rl_chat_output_free(&fin);
}

static void test_hermes(void **state) {
    (void)state;
    const char *t = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
                    "\"Paris\"}}\n</tool_call>";
    rl_chat_output o = parse(RL_TOOLS_HERMES, false, false, t, false);
    assert_int_equal(o.n_calls, 1);
    check_call(&o, 0, "get_weather", "{\"city\": \"Paris\"}", true);
    assert_string_equal(o.content, "");
    assert_null(o.calls[0].id);
    rl_chat_output_free(&o);
    check_streaming(RL_TOOLS_HERMES, false, false, t);

    /* text around, two calls, escapes, nested arguments, keys in either order */
    t = "Let me look.\n<tool_call>\n{\"name\": \"a\", \"arguments\": {\"q\": "
        "\"x\\\"y</tool_call>\", "
        "\"n\": [1, 2.5e3, {\"d\": null}]}}\n</tool_call>\n<tool_call>\n{\"arguments\": {}, "
        "\"name\": \"b\\u00e9\"}\n"
        "</tool_call>\nDone.";
    o = parse(RL_TOOLS_HERMES, false, false, t, false);
    assert_int_equal(o.n_calls, 2);
    check_call(&o, 0, "a", "{\"q\": \"x\\\"y</tool_call>\", \"n\": [1, 2.5e3, {\"d\": null}]}",
               true);
    check_call(&o, 1, "b\xc3\xa9", "{}", true);
    assert_string_equal(o.content, "Let me look.\n\n\nDone.");
    rl_chat_output_free(&o);
    check_streaming(RL_TOOLS_HERMES, false, false, t);

    /* no arguments key: {} ; arguments written as a string holding JSON */
    o = parse(RL_TOOLS_HERMES, false, false, "<tool_call>{\"name\": \"f\"}</tool_call>", false);
    check_call(&o, 0, "f", "{}", true);
    rl_chat_output_free(&o);
    o = parse(RL_TOOLS_HERMES, false, false,
              "<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"a\\\": 1}\"}</tool_call>", false);
    check_call(&o, 0, "f", "{\"a\": 1}", true);
    rl_chat_output_free(&o);
    /* a missing closing tag is tolerated */
    o = parse(RL_TOOLS_HERMES, false, false, "<tool_call>{\"name\": \"f\", \"arguments\": {}} bye",
              false);
    check_call(&o, 0, "f", "{}", true);
    assert_string_equal(o.content, "bye");
    rl_chat_output_free(&o);
    /* plain text: no calls, all content */
    o = parse(RL_TOOLS_HERMES, false, false, "  just <b>text</b> <tool  ", false);
    assert_int_equal(o.n_calls, 0);
    assert_string_equal(o.content, "just <b>text</b> <tool");
    rl_chat_output_free(&o);
}

static void test_hermes_bare(void **state) {
    (void)state;
    const char *ts[] = {
        "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}",
        "```json\n{\n  \"name\": \"get_weather\",\n  \"arguments\": {\"city\": \"Paris\"}\n}\n```",
        "  ```\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}```\n",
        /* doubled braces, as Qwen2.5's template shows the call; the closing
         * one may be missing (a grammar that ended at the object) */
        "{{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}}",
        "{ {\"name\":\"get_weather\",\"arguments\": {\"city\":\"Paris\"}}",
    };
    for (int i = 0; i < 5; i++) {
        rl_chat_output o = parse(RL_TOOLS_HERMES, false, false, ts[i], false);
        assert_int_equal(o.n_calls, 1);
        assert_string_equal(o.calls[0].name, "get_weather");
        assert_true(o.calls[0].complete);
        assert_non_null(strstr(o.calls[0].arguments, "\"Paris\""));
        assert_string_equal(o.content, "");
        rl_chat_output_free(&o);
        check_streaming(RL_TOOLS_HERMES, false, false, ts[i]);
    }
    /* not a call: JSON without a name, text after the object, a fence
     * around something else -- all content */
    const char *no[] = {
        "{\"city\": \"Paris\"}",
        "{\"name\": \"f\", \"arguments\": {}} and then some",
        "```python\nprint(1)\n```",
        "{\"name\": 3}",
        "{{\"name\": \"f\", \"arguments\": {}}} more",
        "{{}}",
    };
    for (int i = 0; i < 6; i++) {
        rl_chat_output o = parse(RL_TOOLS_HERMES, false, false, no[i], false);
        assert_int_equal(o.n_calls, 0);
        assert_string_equal(o.content, no[i]);
        rl_chat_output_free(&o);
    }
    /* cut short by the length limit: an unfinished call */
    rl_chat_output o =
        parse(RL_TOOLS_HERMES, false, false, "{\"name\": \"f\", \"arguments\": {\"a\": 1", false);
    assert_int_equal(o.n_calls, 1);
    assert_false(o.calls[0].complete);
    rl_chat_output_free(&o);
    /* other formats do not look for bare objects */
    o = parse(RL_TOOLS_MISTRAL, false, false, ts[0], false);
    assert_int_equal(o.n_calls, 0);
    rl_chat_output_free(&o);
}

static void test_hermes_streaming_holdback(void **state) {
    (void)state;
    /* a tag prefix at the end is held back while streaming, not at the end */
    rl_chat_output o = parse(RL_TOOLS_HERMES, false, false, "Hello <tool_c", true);
    assert_string_equal(o.content, "Hello");
    assert_int_equal(o.n_calls, 0);
    rl_chat_output_free(&o);
    o = parse(RL_TOOLS_HERMES, false, false, "Hello <tool_c", false);
    assert_string_equal(o.content, "Hello <tool_c");
    rl_chat_output_free(&o);
    /* a call being written: reported once the name is complete */
    o = parse(RL_TOOLS_HERMES, false, false, "<tool_call>\n{\"name\": \"get_wea", true);
    assert_int_equal(o.n_calls, 0);
    rl_chat_output_free(&o);
    o = parse(RL_TOOLS_HERMES, false, false,
              "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"ci", true);
    assert_int_equal(o.n_calls, 1);
    check_call(&o, 0, "get_weather", "{\"ci", false);
    rl_chat_output_free(&o);
    /* the object closed, the closing tag still coming: complete */
    o = parse(RL_TOOLS_HERMES, false, false,
              "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool", true);
    check_call(&o, 0, "f", "{}", true);
    assert_string_equal(o.content, "");
    rl_chat_output_free(&o);
}

static void test_malformed_and_truncated(void **state) {
    (void)state;
    /* malformed JSON: the whole tagged text is content */
    const char *t = "a <tool_call>{\"name\": \"f\", \"arguments\": {\"x\": tru}}</tool_call> b";
    rl_chat_output o = parse(RL_TOOLS_HERMES, false, false, t, false);
    assert_int_equal(o.n_calls, 0);
    assert_string_equal(
        o.content, "a <tool_call>{\"name\": \"f\", \"arguments\": {\"x\": tru}}</tool_call> b");
    rl_chat_output_free(&o);
    /* not an object, a name that is not a string, an empty name, no name */
    const char *bad[] = {
        "<tool_call>[1, 2]</tool_call>",
        "<tool_call>{\"name\": 5, \"arguments\": {}}</tool_call>",
        "<tool_call>{\"name\": \"\", \"arguments\": {}}</tool_call>",
        "<tool_call>{\"arguments\": {}}</tool_call>",
        "<tool_call>{\"name\": \"f\" \"arguments\": {}}</tool_call>",
        "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": \"\x01\"}}</tool_call>",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        o = parse(RL_TOOLS_HERMES, false, false, bad[i], false);
        assert_int_equal(o.n_calls, 0);
        assert_string_equal(o.content, bad[i]);
        rl_chat_output_free(&o);
    }
    /* truncated (the length limit): the call with the arguments so far */
    o = parse(RL_TOOLS_HERMES, false, false,
              "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": [1, ", false);
    assert_int_equal(o.n_calls, 1);
    check_call(&o, 0, "f", "{\"a\": [1,", false);
    rl_chat_output_free(&o);
    /* truncated before the name is complete: content */
    o = parse(RL_TOOLS_HERMES, false, false, "<tool_call>\n{\"na", false);
    assert_int_equal(o.n_calls, 0);
    assert_string_equal(o.content, "<tool_call>\n{\"na");
    rl_chat_output_free(&o);
    /* the tag alone at the end */
    o = parse(RL_TOOLS_HERMES, false, false, "x <tool_call>", false);
    assert_string_equal(o.content, "x <tool_call>");
    rl_chat_output_free(&o);
    /* deep nesting is refused, not recursed into */
    char deep[400] = "<tool_call>{\"name\": \"f\", \"arguments\": ";
    for (int i = 0; i < 100; i++) strcat(deep, "[");
    o = parse(RL_TOOLS_HERMES, false, false, deep, false);
    assert_int_equal(o.n_calls, 0);
    rl_chat_output_free(&o);
}

/* auto mode: prose, then a call ("Let me check. <tool_call>{..}</tool_call>"):
 * the prose is the content, the call a call; so while streaming (the tag's
 * first bytes are held back, the prose is sent before the call); cut short
 * and malformed after prose. */
static void test_hermes_prose_then_call(void **state) {
    (void)state;
    const char *t = "Let me check. <tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
                    "{\"city\": \"Paris\", \"unit\": \"celsius\"}}\n</tool_call>";
    rl_chat_output o = parse(RL_TOOLS_HERMES, false, false, t, false);
    assert_int_equal(o.n_calls, 1);
    check_call(&o, 0, "get_weather", "{\"city\": \"Paris\", \"unit\": \"celsius\"}", true);
    assert_string_equal(o.content, "Let me check.");
    rl_chat_output_free(&o);
    check_streaming(RL_TOOLS_HERMES, false, false, t);
    /* while streaming: the prose is out, "<tool_c" is held, then the call */
    o = parse(RL_TOOLS_HERMES, false, false, "Let me check. <tool_c", true);
    assert_string_equal(o.content, "Let me check.");
    assert_int_equal(o.n_calls, 0);
    rl_chat_output_free(&o);
    o = parse(RL_TOOLS_HERMES, false, false,
              "Let me check. <tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"ci", true);
    assert_string_equal(o.content, "Let me check.");
    check_call(&o, 0, "get_weather", "{\"ci", false);
    rl_chat_output_free(&o);
    /* several lines of prose, two calls, prose between them */
    t = "I need two things.\nFirst the weather:\n<tool_call>\n{\"name\": \"a\", \"arguments\": "
        "{}}\n</tool_call>\nthen the time:\n<tool_call>\n{\"name\": \"b\", \"arguments\": "
        "{\"z\": 1}}\n</tool_call>";
    o = parse(RL_TOOLS_HERMES, false, false, t, false);
    assert_int_equal(o.n_calls, 2);
    check_call(&o, 0, "a", "{}", true);
    check_call(&o, 1, "b", "{\"z\": 1}", true);
    assert_string_equal(o.content, "I need two things.\nFirst the weather:\n\nthen the time:");
    rl_chat_output_free(&o);
    check_streaming(RL_TOOLS_HERMES, false, false, t);
    /* cut by the length limit after the prose: the prose and the call so far */
    o = parse(
        RL_TOOLS_HERMES, false, false,
        "Let me check. <tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Pa",
        false);
    assert_string_equal(o.content, "Let me check.");
    check_call(&o, 0, "get_weather", "{\"city\": \"Pa", false);
    rl_chat_output_free(&o);
    /* cut before the name is complete: all text */
    o = parse(RL_TOOLS_HERMES, false, false, "Let me check. <tool_call>\n{\"name\": \"get_w",
              false);
    assert_int_equal(o.n_calls, 0);
    assert_string_equal(o.content, "Let me check. <tool_call>\n{\"name\": \"get_w");
    rl_chat_output_free(&o);
    /* malformed after the prose: all text; a good call after a bad one is kept */
    t = "Let me check. <tool_call>{\"name\": \"f\", \"arguments\": {\"x\": }}</tool_call>";
    o = parse(RL_TOOLS_HERMES, false, false, t, false);
    assert_int_equal(o.n_calls, 0);
    assert_string_equal(o.content, t);
    rl_chat_output_free(&o);
    t = "Hm. <tool_call>{\"name\": 1}</tool_call> So: <tool_call>{\"name\": \"g\", \"arguments\": "
        "{}}</tool_call>";
    o = parse(RL_TOOLS_HERMES, false, false, t, false);
    assert_int_equal(o.n_calls, 1);
    check_call(&o, 0, "g", "{}", true);
    assert_string_equal(o.content, "Hm. <tool_call>{\"name\": 1}</tool_call> So:");
    rl_chat_output_free(&o);
    /* a bare call object after prose is not a call (only a whole-output one is) */
    t = "Like this: {\"name\": \"get_weather\", \"arguments\": {}}";
    o = parse(RL_TOOLS_HERMES, false, false, t, false);
    assert_int_equal(o.n_calls, 0);
    assert_string_equal(o.content, t);
    rl_chat_output_free(&o);
}

static void test_llama3(void **state) {
    (void)state;
    const char *t = "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}";
    rl_chat_output o = parse(RL_TOOLS_LLAMA3, false, false, t, false);
    assert_int_equal(o.n_calls, 1);
    check_call(&o, 0, "get_weather", "{\"city\": \"Paris\"}", true);
    assert_string_equal(o.content, "");
    rl_chat_output_free(&o);
    check_streaming(RL_TOOLS_LLAMA3, false, false, t);
    /* two calls separated by ';' */
    t = "{\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", \"arguments\": {\"x\": 1}}";
    o = parse(RL_TOOLS_LLAMA3, false, false, t, false);
    assert_int_equal(o.n_calls, 2);
    check_call(&o, 1, "b", "{\"x\": 1}", true);
    rl_chat_output_free(&o);
    check_streaming(RL_TOOLS_LLAMA3, false, false, t);
    /* <|python_tag|> with a call object, and with code */
    o = parse(RL_TOOLS_LLAMA3, false, false,
              "<|python_tag|>{\"name\": \"f\", \"parameters\": {\"q\": 1}}", false);
    check_call(&o, 0, "f", "{\"q\": 1}", true);
    rl_chat_output_free(&o);
    t = "<|python_tag|>print(\"hi\")\nx = 1";
    o = parse(RL_TOOLS_LLAMA3, false, false, t, false);
    check_call(&o, 0, "python", "{\"code\": \"print(\\\"hi\\\")\\nx = 1\"}", true);
    rl_chat_output_free(&o);
    check_streaming(RL_TOOLS_LLAMA3, false, false, t);
    /* ordinary text and a JSON answer that is not a call stay content */
    o = parse(RL_TOOLS_LLAMA3, false, false, "The weather is fine.", false);
    assert_int_equal(o.n_calls, 0);
    assert_string_equal(o.content, "The weather is fine.");
    rl_chat_output_free(&o);
    t = "{\"answer\": 42}";
    o = parse(RL_TOOLS_LLAMA3, false, false, t, false);
    assert_int_equal(o.n_calls, 0);
    assert_string_equal(o.content, t);
    rl_chat_output_free(&o);
    check_streaming(RL_TOOLS_LLAMA3, false, false, t);
    /* a call in the middle of text is not a call (Llama 3 writes calls alone) */
    o = parse(RL_TOOLS_LLAMA3, false, false, "Sure: {\"name\": \"f\", \"parameters\": {}}", false);
    assert_int_equal(o.n_calls, 0);
    rl_chat_output_free(&o);
    /* partial: a prefix of the tag is held */
    o = parse(RL_TOOLS_LLAMA3, false, false, "<|python", true);
    assert_string_equal(o.content, "");
    rl_chat_output_free(&o);
}

static void test_mistral(void **state) {
    (void)state;
    const char *t =
        "[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {\"x\": 1}, \"id\": \"abc123xyz\"}, "
        "{\"name\": \"b\", \"arguments\": {}}]";
    rl_chat_output o = parse(RL_TOOLS_MISTRAL, false, false, t, false);
    assert_int_equal(o.n_calls, 2);
    check_call(&o, 0, "a", "{\"x\": 1}", true);
    assert_string_equal(o.calls[0].id, "abc123xyz");
    check_call(&o, 1, "b", "{}", true);
    assert_null(o.calls[1].id);
    rl_chat_output_free(&o);
    check_streaming(RL_TOOLS_MISTRAL, false, false, t);
    /* v11: name[ARGS]{..}, with a call id, repeated */
    t = "Checking.[TOOL_CALLS]get_weather[ARGS]{\"city\": "
        "\"Paris\"}[TOOL_CALLS]f[CALL_ID]k9[ARGS]{}";
    o = parse(RL_TOOLS_MISTRAL, false, false, t, false);
    assert_int_equal(o.n_calls, 2);
    check_call(&o, 0, "get_weather", "{\"city\": \"Paris\"}", true);
    check_call(&o, 1, "f", "{}", true);
    assert_string_equal(o.calls[1].id, "k9");
    assert_string_equal(o.content, "Checking.");
    rl_chat_output_free(&o);
    check_streaming(RL_TOOLS_MISTRAL, false, false, t);
    /* malformed array: content */
    o = parse(RL_TOOLS_MISTRAL, false, false, "[TOOL_CALLS][{\"name\": \"a\"}, oops]", false);
    assert_int_equal(o.n_calls, 0);
    assert_string_equal(o.content, "[TOOL_CALLS][{\"name\": \"a\"}, oops]");
    rl_chat_output_free(&o);
}

static void test_granite(void **state) {
    (void)state;
    const char *t =
        "<|tool_call|>[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}]";
    rl_chat_output o = parse(RL_TOOLS_GRANITE, false, false, t, false);
    assert_int_equal(o.n_calls, 1);
    check_call(&o, 0, "get_weather", "{\"city\": \"Rome\"}", true);
    rl_chat_output_free(&o);
    check_streaming(RL_TOOLS_GRANITE, false, false, t);
    /* truncated inside the array */
    o = parse(RL_TOOLS_GRANITE, false, false,
              "<|tool_call|>[{\"name\": \"a\", \"arguments\": {}}, {\"name\": \"b\", \"argu",
              false);
    assert_int_equal(o.n_calls, 2);
    check_call(&o, 0, "a", "{}", true);
    assert_false(o.calls[1].complete);
    rl_chat_output_free(&o);
}

static void test_reasoning(void **state) {
    (void)state;
    /* Qwen3 / QwQ: the output opens the block */
    const char *t = "<think>\nThe user wants the weather.\n</think>\n\nIt is sunny.";
    rl_chat_output o = parse(RL_TOOLS_NONE, true, false, t, false);
    assert_string_equal(o.reasoning, "The user wants the weather.");
    assert_string_equal(o.content, "It is sunny.");
    rl_chat_output_free(&o);
    check_streaming(RL_TOOLS_NONE, true, false, t);
    /* DeepSeek-R1 distills: the prompt opened it */
    t = "Hmm, 2+2.\n</think>\n\n4";
    o = parse(RL_TOOLS_NONE, true, true, t, false);
    assert_string_equal(o.reasoning, "Hmm, 2+2.");
    assert_string_equal(o.content, "4");
    rl_chat_output_free(&o);
    check_streaming(RL_TOOLS_NONE, true, true, t);
    /* reasoning then a tool call */
    t = "<think>I need the tool.</think>\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": "
        "1}}\n</tool_call>";
    o = parse(RL_TOOLS_HERMES, true, false, t, false);
    assert_string_equal(o.reasoning, "I need the tool.");
    assert_int_equal(o.n_calls, 1);
    check_call(&o, 0, "f", "{\"a\": 1}", true);
    rl_chat_output_free(&o);
    check_streaming(RL_TOOLS_HERMES, true, false, t);
    /* a tool-call tag inside the reasoning is reasoning */
    o = parse(RL_TOOLS_HERMES, true, false, "<think>maybe <tool_call>{}</think>ok", false);
    assert_string_equal(o.reasoning, "maybe <tool_call>{}");
    assert_string_equal(o.content, "ok");
    assert_int_equal(o.n_calls, 0);
    rl_chat_output_free(&o);
    /* unterminated (length): all reasoning, no content */
    o = parse(RL_TOOLS_NONE, true, false, "<think>still thinking", false);
    assert_string_equal(o.reasoning, "still thinking");
    assert_string_equal(o.content, "");
    rl_chat_output_free(&o);
    /* <think> not at the start is text; no block at all is content */
    o = parse(RL_TOOLS_NONE, true, false, "Answer: <think>x</think>", false);
    assert_string_equal(o.reasoning, "");
    assert_string_equal(o.content, "Answer: <think>x</think>");
    rl_chat_output_free(&o);
    /* partial: "<thi" and "</thi" are held */
    o = parse(RL_TOOLS_NONE, true, false, " <thi", true);
    assert_string_equal(o.content, "");
    rl_chat_output_free(&o);
    o = parse(RL_TOOLS_NONE, true, false, "<think>abc</thi", true);
    assert_string_equal(o.reasoning, "abc");
    rl_chat_output_free(&o);
    /* reasoning off: the tags are text */
    o = parse(RL_TOOLS_NONE, false, false, "<think>a</think>b", false);
    assert_string_equal(o.content, "<think>a</think>b");
    rl_chat_output_free(&o);
}

static void test_no_tools(void **state) {
    (void)state;
    const char *t = "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>";
    rl_chat_output o = parse(RL_TOOLS_NONE, false, false, t, false);
    assert_int_equal(o.n_calls, 0);
    assert_string_equal(o.content, t);
    rl_chat_output_free(&o);
    o = parse(RL_TOOLS_NONE, false, false, "", false);
    assert_string_equal(o.content, "");
    assert_string_equal(o.reasoning, "");
    rl_chat_output_free(&o);
    rl_chat_syntax syn = {0};
    rl_err err;
    assert_int_equal(rl_chat_parse(&syn, NULL, 3, false, &o, &err), RL_ERR_INVALID);
    rl_chat_output_free(NULL);
}

static void test_detect(void **state) {
    (void)state;
    rl_chat_format f;
    static const char qwen[] =
        "{%- if tools %}<tools>{{ tool | tojson }}</tools>{%- endif %}<tool_call>\n";
    rl_chat_format_detect(qwen, sizeof qwen - 1, &f);
    assert_int_equal(f.tools, RL_TOOLS_HERMES);
    assert_true(f.native_tools);
    assert_false(f.reasoning);
    static const char qwen3[] = "{%- if tools %}x{% endif %}<tool_call> <think>\n\n</think>";
    rl_chat_format_detect(qwen3, sizeof qwen3 - 1, &f);
    assert_true(f.reasoning);
    static const char r1[] =
        "{% set content = content.split('</think>')[-1] %}<｜Assistant｜><think>\n";
    rl_chat_format_detect(r1, sizeof r1 - 1, &f);
    assert_int_equal(f.tools, RL_TOOLS_HERMES);
    assert_false(f.native_tools);
    assert_true(f.reasoning);
    static const char llama[] = "<|start_header_id|>ipython<|end_header_id|> {%- if tools %}";
    rl_chat_format_detect(llama, sizeof llama - 1, &f);
    assert_int_equal(f.tools, RL_TOOLS_LLAMA3);
    assert_true(f.native_tools);
    static const char mistral[] = "{%- if tools %}[AVAILABLE_TOOLS]{% endif %}[TOOL_CALLS]";
    rl_chat_format_detect(mistral, sizeof mistral - 1, &f);
    assert_int_equal(f.tools, RL_TOOLS_MISTRAL);
    static const char granite[] = "{%- if tools %}<|tool_call|>{% endif %}";
    rl_chat_format_detect(granite, sizeof granite - 1, &f);
    assert_int_equal(f.tools, RL_TOOLS_GRANITE);
    /* SmolLM2's template knows no tools: the generic format */
    static const char smol[] =
        "{% for message in messages %}{{'<|im_start|>' + message['role']}}{% endfor %}";
    rl_chat_format_detect(smol, sizeof smol - 1, &f);
    assert_int_equal(f.tools, RL_TOOLS_HERMES);
    assert_false(f.native_tools);
    rl_chat_format_detect(NULL, 0, &f);
    assert_int_equal(f.tools, RL_TOOLS_HERMES);
    assert_string_equal(rl_tool_format_name(RL_TOOLS_MISTRAL), "mistral");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hermes),
        cmocka_unit_test(test_hermes_bare),
        cmocka_unit_test(test_hermes_streaming_holdback),
        cmocka_unit_test(test_malformed_and_truncated),
        cmocka_unit_test(test_hermes_prose_then_call),
        cmocka_unit_test(test_llama3),
        cmocka_unit_test(test_mistral),
        cmocka_unit_test(test_granite),
        cmocka_unit_test(test_reasoning),
        cmocka_unit_test(test_no_tools),
        cmocka_unit_test(test_detect),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
