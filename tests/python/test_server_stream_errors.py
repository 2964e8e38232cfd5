"""A failure after a stream has begun is sent in the stream's own API:
OpenAI's {"error": ...} data event (then [DONE]), Anthropic's
`event: error` with {"type": "error", "error": {...}} (read by the
`anthropic` SDK as an error), the Responses API's `response.failed` with
the response's status "failed" and its error.  The failure here: SIGTERM
with --drain 0 cancels the generations in flight.  Also: a chat content
part of an unknown type is a 400 naming messages[i].content[j].type."""
import json
import signal
import threading
import time
import urllib.request

import anthropic
import openai
import pytest

from serverlib import Server

ASK = [{"role": "user", "content": "Tell me a long story about a dragon."}]


def _stream_until_sigterm(path, body, on_event=None):
    """POSTs a streaming body to a fresh server, sends SIGTERM after the first
    event, returns the whole SSE text."""
    s = Server("-c", "1024", "--drain", "0")
    try:
        req = urllib.request.Request(s.base + path, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
        out = []
        with urllib.request.urlopen(req, timeout=60) as r:
            first = r.readline()
            out.append(first.decode())
            s.proc.send_signal(signal.SIGTERM)
            for line in r:
                out.append(line.decode())
        return "".join(out)
    finally:
        s.stop()


def _events(raw):
    evs, name = [], None
    for line in raw.split("\n"):
        if line.startswith("event: "):
            name = line[7:]
        elif line.startswith("data: "):
            d = line[6:]
            evs.append((name, None if d == "[DONE]" else json.loads(d)))
            name = None
    return evs


def test_openai_stream_error():
    raw = _stream_until_sigterm("/v1/chat/completions", {"messages": ASK, "max_tokens": 900, "ignore_eos": True,
                                                        "stream": True})
    evs = _events(raw)
    errs = [d for _, d in evs if d and "error" in d]
    assert len(errs) == 1 and errs[0]["error"]["code"] == "shutting_down", raw[-400:]
    assert evs[-1] == (None, None)  # data: [DONE]


def test_anthropic_stream_error():
    raw = _stream_until_sigterm("/v1/messages", {"messages": ASK, "max_tokens": 900, "ignore_eos": True,
                                                 "stream": True})
    evs = _events(raw)
    assert evs[0][0] == "message_start"
    name, d = evs[-1]
    assert name == "error", raw[-400:]
    assert d["type"] == "error" and d["error"]["type"] == "overloaded_error" and d["error"]["message"]
    assert not any(n == "message_stop" for n, _ in evs)
    assert not any(d and "error" in d and "type" not in d for _, d in evs)  # nothing OpenAI-shaped


def test_responses_stream_error():
    raw = _stream_until_sigterm("/v1/responses", {"input": "Tell me a long story about a dragon.",
                                                  "max_output_tokens": 900, "ignore_eos": True, "stream": True})
    evs = _events(raw)
    assert evs[0][0] == "response.created"
    name, d = evs[-1]
    assert name == "response.failed" and d["type"] == "response.failed", raw[-400:]
    assert d["response"]["status"] == "failed"
    assert d["response"]["error"]["code"] == "shutting_down" and d["response"]["error"]["message"]
    seq = [d["sequence_number"] for _, d in evs]
    assert seq == list(range(len(seq)))
    assert not any(n == "response.completed" for n, _ in evs)


def test_anthropic_sdk_raises_on_stream_error():
    s = Server("-c", "1024", "--drain", "0")
    try:
        c = anthropic.Anthropic(base_url=s.base, api_key="x", max_retries=0, timeout=60)
        with pytest.raises(anthropic.APIStatusError) as ei:
            with c.messages.stream(model="m", max_tokens=900, messages=ASK,
                                   extra_body={"ignore_eos": True}) as st:
                for i, _ in enumerate(st.text_stream):
                    if i == 0:
                        s.proc.send_signal(signal.SIGTERM)
        assert "shutting down" in str(ei.value)
    finally:
        s.stop()


def test_content_part_type_named():
    with Server("-c", "512") as s:
        c = openai.OpenAI(base_url=s.base + "/v1", api_key="x", max_retries=0)
        with pytest.raises(openai.BadRequestError) as ei:
            c.chat.completions.create(model="m", max_tokens=2, messages=[
                {"role": "user", "content": [{"type": "text", "text": "a"},
                                             {"type": "image_url", "image_url": {"url": "http://x"}}]}])
        err = ei.value.body.get("error", ei.value.body)
        assert err["param"] == "messages[0].content[1].type" and "image_url" in err["message"]
