"""Tool calling on /v1/chat/completions with the official `openai` client:
tool_choice required / named (grammar-constrained: the arguments validate
against the function's schema), auto (the lazy grammar), none, streamed
delta.tool_calls assembled into the same calls, a tool result round trip,
parallel_tool_calls, and bad input (invalid schema, duplicate names, an
unknown tool_call_id, a tool_choice naming no tool) answered 400 naming the
field.  Two models: SmolLM2 (a template without tools: redline's generic
<tool_call> format) and Qwen2.5-Coder (the template renders tools itself)."""
import json

import jsonschema
import openai
import pytest

from conftest import model_path
from serverlib import Server

WEATHER = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 30},
        "unit": {"enum": ["celsius", "fahrenheit"]},
    },
    "required": ["city", "unit"],
    "additionalProperties": False,
}
TIME = {
    "type": "object",
    "properties": {"zone": {"type": "string", "maxLength": 20}},
    "required": ["zone"],
    "additionalProperties": False,
}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Current weather in a city",
                                      "parameters": WEATHER}},
    {"type": "function", "function": {"name": "get_time", "description": "Current time in a time zone",
                                      "parameters": TIME}},
]
SCHEMAS = {"get_weather": WEATHER, "get_time": TIME}
ASK = [{"role": "user", "content": "What is the weather in Paris right now?"}]


def _client(model):
    model_path(model)
    s = Server("-c", "2048", "-np", "4", model=model)
    return s, openai.OpenAI(base_url=s.base + "/v1", api_key="x", max_retries=0, timeout=180)


@pytest.fixture(scope="module", params=["smollm2-135m", "qwen2.5-coder-0.5b"])
def client(request):
    s, c = _client(request.param)
    yield c
    assert s.stop() == 0


@pytest.fixture(scope="module")
def small():
    s, c = _client("smollm2-135m")
    yield c
    assert s.stop() == 0


def check_calls(calls, names=None):
    assert calls, "no tool calls"
    ids = set()
    for tc in calls:
        assert tc.type == "function"
        assert tc.id and tc.id not in ids
        ids.add(tc.id)
        assert tc.function.name in (names or SCHEMAS)
        jsonschema.validate(json.loads(tc.function.arguments), SCHEMAS[tc.function.name])


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_required_validates(client, seed):
    r = client.chat.completions.create(model="m", messages=ASK, tools=TOOLS, tool_choice="required",
                                       temperature=1.0, seed=seed, max_tokens=200)
    ch = r.choices[0]
    assert ch.finish_reason == "tool_calls", ch
    check_calls(ch.message.tool_calls)


def test_named_tool(client):
    r = client.chat.completions.create(model="m", messages=ASK, tools=TOOLS, temperature=0.8, seed=4,
                                       tool_choice={"type": "function", "function": {"name": "get_time"}},
                                       max_tokens=200)
    ch = r.choices[0]
    assert ch.finish_reason == "tool_calls"
    assert len(ch.message.tool_calls) == 1
    check_calls(ch.message.tool_calls, ["get_time"])


def test_not_parallel_one_call(client):
    r = client.chat.completions.create(model="m", messages=ASK, tools=TOOLS, tool_choice="required",
                                       parallel_tool_calls=False, temperature=1.0, seed=9, max_tokens=200)
    assert len(r.choices[0].message.tool_calls) == 1


def test_streaming_tool_calls(client):
    kw = dict(model="m", messages=ASK, tools=TOOLS, tool_choice="required", temperature=0.0,
              max_tokens=200)
    whole = client.chat.completions.create(**kw).choices[0]
    calls, fin = {}, None
    for ck in client.chat.completions.create(stream=True, **kw):
        if not ck.choices:
            continue
        d = ck.choices[0].delta
        for tc in d.tool_calls or []:
            c = calls.setdefault(tc.index, {"id": None, "name": "", "args": ""})
            if tc.id:
                assert c["id"] is None
                c["id"] = tc.id
            if tc.function and tc.function.name:
                c["name"] += tc.function.name
            if tc.function and tc.function.arguments:
                c["args"] += tc.function.arguments
        fin = ck.choices[0].finish_reason or fin
    assert fin == "tool_calls"
    got = [(c["name"], json.loads(c["args"])) for _, c in sorted(calls.items())]
    want = [(t.function.name, json.loads(t.function.arguments)) for t in whole.message.tool_calls]
    assert got == want
    assert all(c["id"] for c in calls.values())


def test_auto_and_none(client):
    r = client.chat.completions.create(model="m", messages=ASK, tools=TOOLS, tool_choice="auto",
                                       temperature=0.0, max_tokens=120)
    ch = r.choices[0]
    if ch.message.tool_calls:  # a call, once begun, is valid (lazy grammar)
        assert ch.finish_reason == "tool_calls"
        check_calls(ch.message.tool_calls)
    else:
        assert ch.finish_reason in ("stop", "length") and ch.message.content is not None
    r = client.chat.completions.create(model="m", messages=ASK, tools=TOOLS, tool_choice="none",
                                       temperature=0.0, max_tokens=40)
    assert not r.choices[0].message.tool_calls
    assert r.choices[0].finish_reason in ("stop", "length")


def test_tool_result_round_trip(client):
    first = client.chat.completions.create(model="m", messages=ASK, tools=TOOLS, tool_choice="required",
                                           temperature=0.0, max_tokens=200).choices[0].message
    tc = first.tool_calls[0]
    msgs = ASK + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": tc.id, "type": "function",
             "function": {"name": tc.function.name, "arguments": tc.function.arguments}}]},
        {"role": "tool", "tool_call_id": tc.id, "content": json.dumps({"temperature": 21, "sky": "clear"})},
    ]
    r = client.chat.completions.create(model="m", messages=msgs, tools=TOOLS, tool_choice="none",
                                       temperature=0.0, max_tokens=40)
    assert r.choices[0].finish_reason in ("stop", "length")
    assert r.choices[0].message.content
    assert r.usage.prompt_tokens > 40  # the call and its result were rendered


def bad(client, param, **kw):
    with pytest.raises(openai.BadRequestError) as ei:
        client.chat.completions.create(model="m", max_tokens=5, **kw)
    assert ei.value.status_code == 400
    body = ei.value.body if isinstance(ei.value.body, dict) else {}
    err = body.get("error", body)
    assert err.get("param") == param, err
    return err


def test_bad_input(small):
    bad(small, "tools[0].function.parameters", messages=ASK, tools=[
        {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "minProperties": "x"}}}])
    bad(small, "tools[0].function.parameters", messages=ASK, tools=[
        {"type": "function", "function": {"name": "f", "parameters": "not a schema"}}])
    err = bad(small, "tools[1].function.name", messages=ASK, tools=[TOOLS[0], TOOLS[0]])
    assert "get_weather" in err["message"]
    bad(small, "tools[0].function.name", messages=ASK,
        tools=[{"type": "function", "function": {"name": "has space"}}])
    bad(small, "tools[0]", messages=ASK, tools=[{"type": "retrieval"}])
    bad(small, "tool_choice", messages=ASK, tools=TOOLS,
        tool_choice={"type": "function", "function": {"name": "nope"}})
    bad(small, "tool_choice", messages=ASK, tool_choice="required")
    bad(small, "messages[1].tool_call_id", messages=ASK + [
        {"role": "tool", "tool_call_id": "call_missing", "content": "x"}])
    bad(small, "messages[2].tool_call_id", messages=ASK + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_time", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "call_2", "content": "x"}])
    bad(small, "messages[1].tool_calls", messages=ASK + [
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c", "function": {"name": 3}}]}])
    # the server is unaffected
    r = small.chat.completions.create(model="m", messages=ASK, max_tokens=5)
    assert r.choices[0].message.tool_calls is None
