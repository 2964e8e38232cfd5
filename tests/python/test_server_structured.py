"""Structured output through the HTTP server with the official `openai`
client: response_format json_object and json_schema (strict), and the
`grammar` extension field; bad schemas and grammars are 400s naming the
field."""
import json

import jsonschema
import openai
import pytest

from conftest import model_path
from serverlib import Server

SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 40},
        "population": {"type": "integer", "minimum": 0},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 20}, "maxItems": 3},
    },
    "required": ["city", "population", "tags"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def client():
    model_path("smollm2-135m")
    s = Server("-c", "1024", "-np", "8")
    yield openai.OpenAI(base_url=s.base + "/v1", api_key="x", max_retries=0, timeout=120)
    assert s.stop() == 0


def ask(client, **kw):
    return client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "Describe Paris as JSON."}],
        max_tokens=120, **kw)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_json_schema_strict(client, temperature):
    r = ask(client, temperature=temperature, seed=5, response_format={
        "type": "json_schema", "json_schema": {"name": "city", "strict": True, "schema": SCHEMA}})
    jsonschema.validate(json.loads(r.choices[0].message.content), SCHEMA)


def test_json_object(client):
    r = ask(client, temperature=0.0, response_format={"type": "json_object"})
    assert isinstance(json.loads(r.choices[0].message.content), dict)


def test_streaming_json_schema(client):
    chunks = ask(client, temperature=0.7, seed=1, stream=True, response_format={
        "type": "json_schema", "json_schema": {"name": "city", "schema": SCHEMA}})
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    jsonschema.validate(json.loads(text), SCHEMA)


def test_grammar_extension(client):
    r = ask(client, temperature=1.0, seed=2, extra_body={"grammar": 'root ::= "yes" | "no"'})
    assert r.choices[0].message.content in ("yes", "no")


def test_bad_schema_and_grammar_are_400(client):
    with pytest.raises(openai.BadRequestError) as e:
        ask(client, response_format={"type": "json_schema", "json_schema": {
            "name": "x", "schema": {"type": "object", "multipleOf": 2}}})
    assert "multipleOf" in str(e.value)
    with pytest.raises(openai.BadRequestError) as e:
        ask(client, extra_body={"grammar": "root ::= missing"})
    assert "grammar" in str(e.value) and "missing" in str(e.value)
    deep = {"type": "object"}
    for _ in range(200):
        deep = {"type": "object", "properties": {"a": deep}}
    with pytest.raises(openai.BadRequestError):
        ask(client, response_format={"type": "json_schema", "json_schema": {"name": "d", "schema": deep}})


def test_ambiguous_grammar_fails_alone(client):
    """A grammar too ambiguous to match within the per-call step budget
    ends its own request with a 400 naming the cause; a request running
    beside it finishes normally."""
    from concurrent.futures import ThreadPoolExecutor
    rules = ["root ::= [a-y] b", "b ::= " + " | ".join(f"y{i}" for i in range(300))]
    rules += [f"y{i} ::= " + " | ".join(['"q"'] * 300) for i in range(300)]
    with ThreadPoolExecutor(2) as ex:
        good = ex.submit(ask, client, temperature=0.7, seed=3, response_format={
            "type": "json_schema", "json_schema": {"name": "city", "schema": SCHEMA}})
        bad = ex.submit(ask, client, temperature=0.7, extra_body={"grammar": "\n".join(rules)})
        jsonschema.validate(json.loads(good.result().choices[0].message.content), SCHEMA)
        with pytest.raises(openai.BadRequestError) as e:
            bad.result()
        assert "too ambiguous" in str(e.value), str(e.value)
    # streamed: the 200 header is already sent, so the error is an SSE event
    with pytest.raises(openai.APIError) as e:
        for _ in ask(client, temperature=0.7, stream=True, extra_body={"grammar": "\n".join(rules)}):
            pass
    assert "too ambiguous" in str(e.value), str(e.value)
