"""Anthropic's Messages API (POST /v1/messages) driven by the official
`anthropic` SDK: text answers, system prompts, stop_sequences, streaming
events (text and tool_use), tools with tool_choice any / tool (grammar
constrained: input validates), a tool_use / tool_result round trip, the
x-api-key header, and errors in Anthropic's shape naming the field.
(SDK 2.15 has no temperature argument: it goes in extra_body.)"""
import json

import anthropic
import jsonschema
import pytest

from conftest import model_path
from serverlib import Server

WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 30},
                   "unit": {"enum": ["celsius", "fahrenheit"]}},
    "required": ["city", "unit"],
    "additionalProperties": False,
}
TOOLS = [{"name": "get_weather", "description": "Current weather in a city", "input_schema": WEATHER}]
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


@pytest.fixture(scope="module")
def server():
    model_path("smollm2-135m")
    s = Server("-c", "2048", "-np", "4", "--api-key", "sekret")
    yield s
    assert s.stop() == 0


@pytest.fixture(scope="module")
def client(server):
    return anthropic.Anthropic(base_url=server.base, api_key="sekret", max_retries=0, timeout=120)


def test_text(client):
    r = client.messages.create(model="m", max_tokens=16, system="Be brief.", extra_body={"temperature": 0.0},
                               messages=[{"role": "user", "content": "Say hello."}])
    assert r.type == "message" and r.role == "assistant" and r.id.startswith("msg_")
    assert r.content and r.content[0].type == "text" and r.content[0].text
    assert r.stop_reason in ("end_turn", "max_tokens")
    assert r.usage.input_tokens > 5 and 0 < r.usage.output_tokens <= 16


def test_stop_sequences(client):
    r = client.messages.create(model="m", max_tokens=40, extra_body={"temperature": 0.0}, stop_sequences=["e"],
                               messages=[{"role": "user", "content": "Write a sentence about trees."}])
    assert "e" not in "".join(b.text for b in r.content if b.type == "text")


def test_stream_text(client):
    kw = dict(model="m", max_tokens=20, extra_body={"temperature": 0.0},
              messages=[{"role": "user", "content": "Count to five."}])
    whole = client.messages.create(**kw)
    types, text = [], ""
    with client.messages.stream(**kw) as st:
        for ev in st:
            types.append(ev.type)
            if ev.type == "content_block_delta" and ev.delta.type == "text_delta":
                text += ev.delta.text
        final = st.get_final_message()
    assert types[0] == "message_start" and types[-1] == "message_stop"
    assert "content_block_start" in types and "content_block_stop" in types and "message_delta" in types
    assert text == whole.content[0].text == final.content[0].text
    assert final.stop_reason == whole.stop_reason


@pytest.mark.parametrize("choice", [{"type": "any"}, {"type": "tool", "name": "get_weather"}])
def test_tools_forced(client, choice):
    r = client.messages.create(model="m", max_tokens=150, extra_body={"temperature": 1.0}, tools=TOOLS, tool_choice=choice,
                               messages=ASK)
    assert r.stop_reason == "tool_use"
    uses = [b for b in r.content if b.type == "tool_use"]
    assert uses and uses[0].name == "get_weather" and uses[0].id
    jsonschema.validate(uses[0].input, WEATHER)


def test_tools_streamed(client):
    kw = dict(model="m", max_tokens=150, extra_body={"temperature": 0.0}, tools=TOOLS, tool_choice={"type": "any"}, messages=ASK)
    whole = client.messages.create(**kw)
    with client.messages.stream(**kw) as st:
        final = st.get_final_message()
    assert final.stop_reason == "tool_use"
    want = [(b.name, b.input) for b in whole.content if b.type == "tool_use"]
    got = [(b.name, b.input) for b in final.content if b.type == "tool_use"]
    assert got == want


def test_tool_round_trip(client):
    first = client.messages.create(model="m", max_tokens=150, extra_body={"temperature": 0.0}, tools=TOOLS,
                                   tool_choice={"type": "any"}, messages=ASK)
    use = next(b for b in first.content if b.type == "tool_use")
    msgs = ASK + [
        {"role": "assistant", "content": [{"type": "tool_use", "id": use.id, "name": use.name, "input": use.input}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id,
                                      "content": json.dumps({"temperature": 21})}]},
    ]
    r = client.messages.create(model="m", max_tokens=30, extra_body={"temperature": 0.0}, tools=TOOLS,
                               tool_choice={"type": "none"}, messages=msgs)
    assert r.stop_reason in ("end_turn", "max_tokens")
    assert r.content[0].type == "text"


def bad(client, param_part, **kw):
    with pytest.raises(anthropic.BadRequestError) as ei:
        client.messages.create(model="m", **kw)
    body = ei.value.body
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    assert param_part in body["error"]["message"], body
    return body


def test_errors(client, server):
    st, _, b = server.request("POST", "/v1/messages", {"model": "m", "messages": ASK},
                              headers={"x-api-key": "sekret"})
    assert st == 400 and b["type"] == "error" and "max_tokens" in b["error"]["message"]
    bad(client, "messages[0].content[0].type", max_tokens=5,
        messages=[{"role": "user", "content": [{"type": "image_url", "x": 1}]}])
    bad(client, "messages[1].content[0].tool_use_id", max_tokens=5, messages=ASK + [
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_nope", "content": "x"}]}])
    bad(client, "tools[0].input_schema", max_tokens=5, messages=ASK,
        tools=[{"name": "f", "input_schema": {"type": "object", "minProperties": "x"}}])
    bad(client, "tools[1].name", max_tokens=5, messages=ASK, tools=TOOLS + TOOLS)
    # auth: a wrong key is a 401 in Anthropic's shape
    with pytest.raises(anthropic.AuthenticationError) as ei:
        anthropic.Anthropic(base_url=server.base, api_key="wrong", max_retries=0).messages.create(
            model="m", max_tokens=5, messages=ASK)
    assert ei.value.body["error"]["type"] == "authentication_error"
