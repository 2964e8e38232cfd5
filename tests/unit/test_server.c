/* Unit tests for the server's pure parts: OpenAI request parsing and
 * validation (every field, each error naming its field), error JSON, path
 * normalization, lossy JSON text, and the Prometheus rendering of the
 * metrics (cumulative histogram buckets). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "server/server-impl.h"

static rl_oai_limits lim(void) {
    rl_oai_limits l;
    rl_oai_limits_default(&l, 1000, 512);
    return l;
}

static bool parse(const char *body, rl_oai_kind k, rl_oai_req *r, rl_oai_err *e) {
    rl_oai_limits l = lim();
    return rl_oai_parse(body, strlen(body), k, &l, r, e);
}

static void test_chat_full(void **state) {
    (void)state;
    rl_oai_req r;
    rl_oai_err e;
    const char *b =
        "{\"model\":\"m\",\"messages\":[{\"role\":\"system\",\"content\":\"S\"},"
        "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},{\"type\":\"text\","
        "\"text\":\"b\"}]},"
        "{\"role\":\"assistant\",\"content\":null}],"
        "\"max_completion_tokens\":7,\"temperature\":0.5,\"top_p\":0.9,\"top_k\":-1,\"min_p\":0.1,"
        "\"presence_penalty\":1,\"frequency_penalty\":-1,\"repetition_penalty\":1.2,\"seed\":-3,"
        "\"stop\":[\"x\",\"yy\"],\"n\":3,\"stream\":true,\"stream_options\":{\"include_usage\":"
        "true},"
        "\"logprobs\":true,\"top_logprobs\":4,\"logit_bias\":{\"5\":-100,\"6\":1.5},"
        "\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"schema\":{\"type\":"
        "\"object\"}}},"
        "\"unknown_field\":{\"ignored\":[1,2]}}";
    assert_true(parse(b, RL_OAI_CHAT, &r, &e));
    assert_string_equal(r.model, "m");
    assert_int_equal(r.n_msgs, 3);
    assert_string_equal(r.msgs[1].content, "ab");
    assert_null(r.msgs[2].content);
    assert_int_equal(r.max_tokens, 7);
    assert_int_equal(r.gp.max_tokens, 7);
    assert_true(r.gp.sample.temperature == 0.5f);
    assert_int_equal(r.gp.sample.top_k, 0);
    assert_true(r.seed_given);
    assert_true(r.gp.sample.seed == (uint64_t)-3);
    assert_int_equal(r.gp.n_stop, 2);
    assert_string_equal(r.gp.stop[1], "yy");
    assert_int_equal(r.n, 3);
    assert_true(r.stream && r.include_usage && r.logprobs);
    assert_int_equal(r.top_logprobs, 4);
    assert_int_equal(r.gp.sample.n_logprobs, 4);
    assert_int_equal(r.gp.sample.n_logit_bias, 2);
    assert_string_equal(r.response_format, "json_schema");
    assert_string_equal(r.json_schema, "{\"type\":\"object\"}");
    rl_oai_req_free(&r);
}

static void test_completion_forms(void **state) {
    (void)state;
    rl_oai_req r;
    rl_oai_err e;
    assert_true(parse("{\"prompt\":\"hi\"}", RL_OAI_COMPLETION, &r, &e));
    assert_int_equal(r.prompt_len, 2);
    assert_int_equal(r.max_tokens, 0);
    assert_false(r.seed_given);
    rl_oai_req_free(&r);
    assert_true(
        parse("{\"prompt\":[[1,2,999]],\"logprobs\":2,\"echo\":true}", RL_OAI_COMPLETION, &r, &e));
    assert_int_equal(r.n_prompt_ids, 3);
    assert_int_equal(r.prompt_ids[2], 999);
    assert_true(r.logprobs && r.echo);
    assert_int_equal(r.top_logprobs, 2);
    rl_oai_req_free(&r);
    assert_true(parse("{\"prompt\":[\"only one\"],\"stop\":\"s\",\"max_tokens\":16.0}",
                      RL_OAI_COMPLETION, &r, &e));
    assert_int_equal(r.gp.n_stop, 1);
    assert_int_equal(r.max_tokens, 16);
    rl_oai_req_free(&r);
}

/* Each bad body must fail with status 400 and name `param`. */
static void test_errors_name_field(void **state) {
    (void)state;
    static const struct {
        rl_oai_kind k;
        const char *body, *param;
    } cases[] = {
        {RL_OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"temperature\":-1}",
         "temperature"},
        {RL_OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"top_p\":0}",
         "top_p"},
        {RL_OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"n\":9}", "n"},
        {RL_OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":0}",
         "max_tokens"},
        {RL_OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":513}",
         "max_tokens"},
        {RL_OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stop\":[\"\"]}",
         "stop"},
        {RL_OAI_CHAT,
         "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logit_bias\":{\"1000\":1}}",
         "logit_bias"},
        {RL_OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"top_logprobs\":2}",
         "top_logprobs"},
        {RL_OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stream\":1}",
         "stream"},
        {RL_OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"seed\":\"1\"}",
         "seed"},
        {RL_OAI_CHAT, "{\"messages\":[{\"role\":\"robot\",\"content\":\"x\"}]}", "messages"},
        {RL_OAI_CHAT, "{\"messages\":[]}", "messages"},
        {RL_OAI_CHAT, "{}", "messages"},
        {RL_OAI_COMPLETION, "{}", "prompt"},
        {RL_OAI_COMPLETION, "{\"prompt\":[1000]}", "prompt"},
        {RL_OAI_COMPLETION, "{\"prompt\":[]}", "prompt"},
        {RL_OAI_COMPLETION, "{\"prompt\":\"x\",\"response_format\":{\"type\":\"xml\"}}",
         "response_format"},
        {RL_OAI_COMPLETION, "{\"prompt\":\"x\",\"logprobs\":21}", "logprobs"},
        {RL_OAI_COMPLETION, "{\"prompt\":\"x\",\"stream_options\":{\"include_usage\":3}}",
         "stream_options"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        rl_oai_req r;
        rl_oai_err e;
        memset(&e, 0, sizeof e);
        assert_false(parse(cases[i].body, cases[i].k, &r, &e));
        assert_int_equal(e.status, 400);
        if (strcmp(e.param, cases[i].param) != 0)
            fail_msg("case %zu: param '%s', want '%s' (%s)", i, e.param, cases[i].param, e.message);
        assert_non_null(strstr(e.message, cases[i].param));
        assert_null(r.root);
    }
}

#define U "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]"
#define T(name, params)                                                                            \
    "{\"type\":\"function\",\"function\":{\"name\":\"" name "\",\"parameters\":" params "}}"

static void test_tools(void **state) {
    (void)state;
    rl_oai_req r;
    rl_oai_err e;
    /* valid: the choice, the named index, parallel */
    assert_true(parse(U ",\"tools\":[" T("a", "{\"type\":\"object\"}") "," T("b", "null") "]}",
                      RL_OAI_CHAT, &r, &e));
    assert_int_equal(r.n_tools, 2);
    assert_int_equal(r.tool_choice, RL_OAI_TOOLS_AUTO);
    assert_true(r.parallel_tool_calls);
    rl_oai_req_free(&r);
    assert_true(parse(
        U ",\"tools\":[" T("a", "{}") "," T(
            "b", "{}") "],\"parallel_tool_calls\":false,"
                       "\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"b\"}}}",
        RL_OAI_CHAT, &r, &e));
    assert_int_equal(r.tool_choice, RL_OAI_TOOLS_NAMED);
    assert_int_equal(r.tool_named, 1);
    assert_false(r.parallel_tool_calls);
    rl_oai_req_free(&r);
    assert_true(
        parse(U ",\"tools\":[" T("a", "{}") "],\"tool_choice\":\"none\"}", RL_OAI_CHAT, &r, &e));
    assert_int_equal(r.tool_choice, RL_OAI_TOOLS_NONE);
    rl_oai_req_free(&r);
    /* a call and its result round trip; the id must match */
    assert_true(parse(
        "{\"messages\":[{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"c1\","
        "\"type\":\"function\",\"function\":{\"name\":\"a\",\"arguments\":\"{}\"}}]},"
        "{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"ok\"}]}",
        RL_OAI_CHAT, &r, &e));
    assert_true(r.tool_msgs);
    rl_oai_req_free(&r);
    static const struct {
        const char *body, *param;
    } bad[] = {
        {U ",\"tools\":{}}", "tools"},
        {U ",\"tools\":[{\"type\":\"code\"}]}", "tools[0]"},
        {U ",\"tools\":[" T("a b", "{}") "]}", "tools[0].function.name"},
        {U ",\"tools\":[" T("a", "{}") "," T("a", "{}") "]}", "tools[1].function.name"},
        {U ",\"tools\":[" T("a", "3") "]}", "tools[0].function.parameters"},
        {U ",\"tools\":[" T("a", "{\"type\":\"object\",\"patternProperties\":{}}") "]}",
         "tools[0].function.parameters"},
        {U ",\"tool_choice\":\"required\"}", "tool_choice"},
        {U ",\"tools\":[" T("a", "{}") "],\"tool_choice\":\"sometimes\"}", "tool_choice"},
        {U ",\"tools\":[" T(
             "a", "{}") "],\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"z\"}}}",
         "tool_choice"},
        {U ",\"tools\":[" T(
             "a",
             "{}") "],\"tool_choice\":\"required\",\"response_format\":{\"type\":\"json_object\"}}",
         "tool_choice"},
        {U ",\"parallel_tool_calls\":1}", "parallel_tool_calls"},
        {U ",\"chat_template_kwargs\":[]}", "chat_template_kwargs"},
        {"{\"messages\":[{\"role\":\"tool\",\"content\":\"x\"}]}", "messages[0].tool_call_id"},
        {"{\"messages\":[{\"role\":\"tool\",\"tool_call_id\":\"q\",\"content\":\"x\"}]}",
         "messages[0].tool_call_id"},
        {"{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"id\":\"\",\"function\":{"
         "\"name\":\"a\"}}]}]}",
         "messages[0].tool_calls"},
        {"{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"id\":\"c\",\"function\":{"
         "\"name\":\"a\",\"arguments\":{}}}]}]}",
         "messages[0].tool_calls"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        memset(&e, 0, sizeof e);
        assert_false(parse(bad[i].body, RL_OAI_CHAT, &r, &e));
        assert_int_equal(e.status, 400);
        if (strcmp(e.param, bad[i].param) != 0)
            fail_msg("case %zu: param '%s', want '%s' (%s)", i, e.param, bad[i].param, e.message);
        assert_null(r.root);
    }
}

static void test_bad_json(void **state) {
    (void)state;
    const char *bodies[] = {
        "", "{", "[]", "null", "{\"a\":NaN}", "{\"a\":1e999}", "{\"a\":1,\"a\":2}"};
    for (size_t i = 0; i < sizeof bodies / sizeof bodies[0]; i++) {
        rl_oai_req r;
        rl_oai_err e;
        assert_false(parse(bodies[i], RL_OAI_CHAT, &r, &e));
        assert_int_equal(e.status, 400);
        char *j = rl_oai_err_json(&e);
        assert_non_null(j);
        json_error_t je;
        json_t *o = json_loads(j, 0, &je);
        assert_non_null(o);
        assert_true(json_is_string(json_object_get(json_object_get(o, "error"), "message")));
        assert_non_null(json_object_get(json_object_get(o, "error"), "param"));
        json_decref(o);
        free(j);
    }
}

static void test_normalize_path(void **state) {
    (void)state;
    char out[64];
    assert_true(rl_oai_normalize_path("//v1//models/", out, sizeof out));
    assert_string_equal(out, "/v1/models");
    assert_true(rl_oai_normalize_path("/", out, sizeof out));
    assert_string_equal(out, "/");
    assert_true(rl_oai_normalize_path("///", out, sizeof out));
    assert_string_equal(out, "/");
    assert_false(rl_oai_normalize_path("/v1/../etc", out, sizeof out));
    assert_false(rl_oai_normalize_path("/./x", out, sizeof out));
    assert_false(rl_oai_normalize_path("v1", out, sizeof out));
    assert_false(rl_oai_normalize_path("/a\x01", out, sizeof out));
    char longp[200];
    memset(longp, 'a', sizeof longp - 1);
    longp[0] = '/';
    longp[sizeof longp - 1] = 0;
    assert_false(rl_oai_normalize_path(longp, out, sizeof out));
    assert_true(rl_oai_normalize_path("/a..b/.c", out, sizeof out));
    assert_string_equal(out, "/a..b/.c");
}

static void test_json_text_lossy(void **state) {
    (void)state;
    json_t *j = rl_srv_json_text("a\xff"
                                 "b",
                                 3);
    assert_non_null(j);
    assert_string_equal(json_string_value(j), "a\xEF\xBF\xBD"
                                              "b");
    json_decref(j);
    j = rl_srv_json_text("caf\xc3\xa9", 5);
    assert_string_equal(json_string_value(j), "caf\xc3\xa9");
    json_decref(j);
}

static void test_metrics_render(void **state) {
    (void)state;
    rl_metrics m;
    rl_metrics_init(&m);
    rl_hist_observe(&m, &m.ttft, 0.003);
    rl_hist_observe(&m, &m.ttft, 0.003);
    rl_hist_observe(&m, &m.ttft, 1e9); /* lands in +Inf only */
    rl_metrics_count_finish(&m, RL_FINISH_STOP);
    rl_engine_stats st;
    memset(&st, 0, sizeof st);
    st.n_running = 2;
    st.kv_blocks_total = 10;
    st.kv_blocks_used = 5;
    st.block_size = 16;
    st.prefix_queries = 3;
    st.prefix_hits = 2;
    st.cached_prompt_tokens = 30;
    char *t = rl_metrics_render(&m, &st, "my\"model");
    assert_non_null(t);
    assert_non_null(strstr(t, "redline:num_requests_running{model_name=\"my_model\"} 2\n"));
    assert_non_null(strstr(t, "redline:kv_cache_usage_perc{model_name=\"my_model\"} 0.5\n"));
    assert_non_null(strstr(
        t, "redline:time_to_first_token_seconds_bucket{model_name=\"my_model\",le=\"0.001\"} 0\n"));
    assert_non_null(strstr(
        t, "redline:time_to_first_token_seconds_bucket{model_name=\"my_model\",le=\"0.005\"} 2\n"));
    assert_non_null(strstr(
        t, "redline:time_to_first_token_seconds_bucket{model_name=\"my_model\",le=\"640\"} 2\n"));
    assert_non_null(strstr(
        t, "redline:time_to_first_token_seconds_bucket{model_name=\"my_model\",le=\"+Inf\"} 3\n"));
    assert_non_null(
        strstr(t, "redline:time_to_first_token_seconds_count{model_name=\"my_model\"} 3\n"));
    assert_non_null(strstr(t, "finished_reason=\"stop\"} 1\n"));
    /* the gateway-facing aliases carry the same values (prefix counts in tokens) */
    assert_non_null(strstr(t, "vllm:num_requests_running{model_name=\"my_model\"} 2\n"));
    assert_non_null(strstr(t, "sglang:num_running_reqs{model_name=\"my_model\"} 2\n"));
    assert_non_null(strstr(t, "vllm:kv_cache_usage_perc{model_name=\"my_model\"} 0.5\n"));
    assert_non_null(strstr(t, "vllm:gpu_cache_usage_perc{model_name=\"my_model\"} 0.5\n"));
    assert_non_null(strstr(t, "sglang:token_usage{model_name=\"my_model\"} 0.5\n"));
    assert_non_null(strstr(t, "vllm:prefix_cache_queries_total{model_name=\"my_model\"} 48\n"));
    assert_non_null(strstr(t, "vllm:prefix_cache_hits_total{model_name=\"my_model\"} 32\n"));
    assert_non_null(strstr(t, "redline:prompt_tokens_cached_total{model_name=\"my_model\"} 30\n"));
    free(t);
    t = rl_metrics_render(&m, NULL, "x"); /* while loading */
    assert_non_null(strstr(t, "redline:num_requests_waiting{model_name=\"x\"} 0\n"));
    free(t);
    rl_metrics_free(&m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chat_full),         cmocka_unit_test(test_completion_forms),
        cmocka_unit_test(test_errors_name_field), cmocka_unit_test(test_bad_json),
        cmocka_unit_test(test_normalize_path),    cmocka_unit_test(test_json_text_lossy),
        cmocka_unit_test(test_metrics_render),    cmocka_unit_test(test_tools),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
