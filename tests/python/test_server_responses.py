"""OpenAI's Responses API (POST /v1/responses, stateless) driven by the
official `openai` SDK: a string input with instructions, message items,
max_output_tokens (status incomplete), text.format json_schema, function
tools (required: arguments validate) with a function_call_output round
trip, the typed streaming events, and bad input named by field."""
import json

import jsonschema
import openai
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
TOOLS = [{"type": "function", "name": "get_weather", "description": "Current weather", "parameters": WEATHER}]


@pytest.fixture(scope="module")
def client():
    model_path("smollm2-135m")
    s = Server("-c", "2048", "-np", "4")
    yield openai.OpenAI(base_url=s.base + "/v1", api_key="x", max_retries=0, timeout=120)
    assert s.stop() == 0


def test_text(client):
    r = client.responses.create(model="m", instructions="Be brief.", input="Say hello.", max_output_tokens=16,
                                temperature=0.0)
    assert r.object == "response" and r.id.startswith("resp_")
    assert r.status in ("completed", "incomplete")
    assert r.output[0].type == "message" and r.output_text
    assert r.usage.input_tokens > 5 and 0 < r.usage.output_tokens <= 16


def test_incomplete_and_items(client):
    r = client.responses.create(model="m", max_output_tokens=3, temperature=0.0, input=[
        {"role": "user", "content": [{"type": "input_text", "text": "Tell me a long story."}]}])
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"
    assert r.usage.output_tokens == 3


def test_json_schema(client):
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"],
              "additionalProperties": False}
    r = client.responses.create(model="m", input="A number as JSON.", max_output_tokens=40, temperature=0.5,
                                text={"format": {"type": "json_schema", "name": "num", "schema": schema}})
    jsonschema.validate(json.loads(r.output_text), schema)


def test_tools_round_trip(client):
    r = client.responses.create(model="m", input="Weather in Paris?", tools=TOOLS, tool_choice="required",
                                max_output_tokens=150, temperature=1.0)
    calls = [o for o in r.output if o.type == "function_call"]
    assert calls and calls[0].name == "get_weather" and calls[0].call_id
    jsonschema.validate(json.loads(calls[0].arguments), WEATHER)
    fc = calls[0]
    r2 = client.responses.create(model="m", tools=TOOLS, tool_choice="none", max_output_tokens=20, temperature=0.0,
                                 input=[{"role": "user", "content": "Weather in Paris?"},
                                        {"type": "function_call", "call_id": fc.call_id, "name": fc.name,
                                         "arguments": fc.arguments},
                                        {"type": "function_call_output", "call_id": fc.call_id,
                                         "output": json.dumps({"temperature": 21})}])
    assert r2.output_text


def test_stream(client):
    kw = dict(model="m", input="Count to five.", max_output_tokens=20, temperature=0.0)
    whole = client.responses.create(**kw)
    types, text, seqs = [], "", []
    for ev in client.responses.create(stream=True, **kw):
        types.append(ev.type)
        seqs.append(ev.sequence_number)
        if ev.type == "response.output_text.delta":
            text += ev.delta
        if ev.type in ("response.completed", "response.incomplete"):
            final = ev.response
    assert types[0] == "response.created"
    for t in ("response.output_item.added", "response.content_part.added", "response.output_text.done",
              "response.output_item.done"):
        assert t in types
    assert types[-1] in ("response.completed", "response.incomplete")
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    assert text == whole.output_text == final.output_text


def test_stream_function_call(client):
    kw = dict(model="m", input="Weather in Paris?", tools=TOOLS, tool_choice="required", max_output_tokens=150,
              temperature=0.0)
    whole = client.responses.create(**kw)
    args, done = {}, {}
    for ev in client.responses.create(stream=True, **kw):
        if ev.type == "response.function_call_arguments.delta":
            args[ev.item_id] = args.get(ev.item_id, "") + ev.delta
        if ev.type == "response.function_call_arguments.done":
            done[ev.item_id] = ev.arguments
    want = [o.arguments for o in whole.output if o.type == "function_call"]
    assert want and list(args) == list(done)
    assert [json.loads(a) for a in args.values()] == [json.loads(a) for a in done.values()] == \
        [json.loads(a) for a in want]


def test_bad_input(client):
    def bad(param, **kw):
        with pytest.raises(openai.BadRequestError) as ei:
            client.responses.create(model="m", max_output_tokens=5, **kw)
        assert ei.value.body.get("param") == param or ei.value.body.get("error", {}).get("param") == param, ei.value.body
    bad("input[0].type", input=[{"type": "image_generation_call"}])
    bad("input[1].call_id", input=[{"role": "user", "content": "x"},
                                   {"type": "function_call_output", "call_id": "nope", "output": "1"}])
    bad("tools[1].name", input="x", tools=TOOLS + TOOLS)
    bad("tools[0].parameters", input="x", tools=[{"type": "function", "name": "f", "parameters": {"minProperties": "q"}}])
    bad("previous_response_id", input="x", previous_response_id="resp_1")
