"""End-to-end tests of `redline serve` with the official `openai` Python
client (and plain HTTP where the SDK has no call): models, chat and
completions (plain and streaming), usage, seeds, n, logprobs, stop strings,
tokenize/detokenize, health while loading, metrics, auth, CORS, and a clean
SIGTERM.  One shared server; small max_tokens keep the suite quick."""
import json
import signal
import threading
import time
import urllib.request

import openai
import pytest

from conftest import model_path
from serverlib import Server, raw_http, parse_raw

KEY = "sk-test-redline"


@pytest.fixture(scope="module")
def srv():
    model_path("smollm2-135m")
    s = Server("--api-key", KEY, "-c", "1024", "-np", "8")
    yield s
    assert s.stop() == 0


@pytest.fixture(scope="module")
def client(srv):
    return openai.OpenAI(base_url=srv.base + "/v1", api_key=KEY, max_retries=0, timeout=60)


MSG = [{"role": "user", "content": "Name three colors."}]
AUTH = {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"}


def test_models(client):
    ms = client.models.list()
    ids = [m.id for m in ms.data]
    assert ids == ["smollm2-135m"]
    assert client.models.retrieve("smollm2-135m").id == "smollm2-135m"
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("no-such-model")


def test_chat_nonstream(client):
    r = client.chat.completions.create(model="smollm2-135m", messages=MSG, max_tokens=8, temperature=0)
    c = r.choices[0]
    assert c.message.role == "assistant"
    assert isinstance(c.message.content, str) and len(c.message.content) > 0
    assert c.finish_reason in ("stop", "length")
    assert r.usage.prompt_tokens > 5 and 1 <= r.usage.completion_tokens <= 8
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    assert r.usage.prompt_tokens_details.cached_tokens >= 0
    assert r.id.startswith("chatcmpl-") and r.object == "chat.completion"


def test_chat_greedy_is_deterministic_and_prefix_cached(client):
    a = client.chat.completions.create(model="x", messages=MSG, max_tokens=6, temperature=0)
    b = client.chat.completions.create(model="x", messages=MSG, max_tokens=6, temperature=0)
    assert a.choices[0].message.content == b.choices[0].message.content
    assert b.usage.prompt_tokens_details.cached_tokens >= 0


def test_chat_stream_with_usage(client):
    chunks = list(client.chat.completions.create(model="smollm2-135m", messages=MSG, max_tokens=8,
                                                 temperature=0, stream=True,
                                                 stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    finals = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finals and finals[-1] in ("stop", "length")
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens >= 1
    full = client.chat.completions.create(model="smollm2-135m", messages=MSG, max_tokens=8, temperature=0)
    assert text == full.choices[0].message.content


def test_completions(client):
    r = client.completions.create(model="smollm2-135m", prompt="The capital of France is", max_tokens=5,
                                  temperature=0)
    assert r.choices[0].text and r.choices[0].finish_reason in ("stop", "length")
    s = list(client.completions.create(model="smollm2-135m", prompt="The capital of France is", max_tokens=5,
                                       temperature=0, stream=True))
    assert "".join(c.choices[0].text for c in s if c.choices) == r.choices[0].text
    # token-id prompts give the same result as the text they encode
    st, _, tk = _post_json(client, "/tokenize", {"content": "The capital of France is"})
    assert st == 200
    r2 = client.completions.create(model="smollm2-135m", prompt=tk["tokens"], max_tokens=5, temperature=0)
    assert r2.choices[0].text == r.choices[0].text


def test_seed_reproducible(client):
    kw = dict(model="smollm2-135m", messages=MSG, max_tokens=10, temperature=1.0)
    a = client.chat.completions.create(seed=1234, **kw).choices[0].message.content
    b = client.chat.completions.create(seed=1234, **kw).choices[0].message.content
    assert a == b
    texts = {client.chat.completions.create(seed=s, **kw).choices[0].message.content for s in (1, 2, 3)}
    assert len(texts | {a}) > 1  # different seeds give different samples


def test_n_and_logprobs(client):
    r = client.chat.completions.create(model="m", messages=MSG, max_tokens=4, temperature=1, n=3, seed=7,
                                       logprobs=True, top_logprobs=2)
    assert [c.index for c in r.choices] == [0, 1, 2]
    for c in r.choices:
        assert c.logprobs.content and all(t.logprob <= 0 for t in c.logprobs.content)
        assert all(len(t.top_logprobs) == 2 for t in c.logprobs.content)
    assert r.usage.completion_tokens == sum(len(c.logprobs.content) for c in r.choices)
    c = client.completions.create(model="m", prompt="Hello", max_tokens=3, temperature=0, logprobs=2)
    assert len(c.choices[0].logprobs.tokens) == len(c.choices[0].logprobs.token_logprobs)


def test_stop_string(client):
    r = client.completions.create(model="m", prompt="1, 2, 3, 4,", max_tokens=12, temperature=0, stop=[" 7"])
    assert " 7" not in r.choices[0].text
    assert r.choices[0].finish_reason in ("stop", "length")


def test_errors_as_sdk_exceptions(srv, client):
    with pytest.raises(openai.BadRequestError) as ei:
        client.chat.completions.create(model="m", messages=MSG, max_tokens=4, temperature=-1)
    assert ei.value.body["param"] == "temperature" or "temperature" in str(ei.value)
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="m", messages=[], max_tokens=4)
    with pytest.raises(openai.BadRequestError) as ei:
        client.completions.create(model="m", prompt="hi", max_tokens=100000)
    assert "max_tokens" in str(ei.value)
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model="m", prompt=[999999], max_tokens=4)
    bad = openai.OpenAI(base_url=srv.base + "/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.models.list()
    with pytest.raises(openai.AuthenticationError):
        bad.chat.completions.create(model="m", messages=MSG, max_tokens=2)


def _post_json(client, path, body):
    base = str(client.base_url).rstrip("/").removesuffix("/v1")
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(), headers=AUTH, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, dict(r.headers), json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), json.loads(e.read())


def test_tokenize_detokenize(client):
    st, _, r = _post_json(client, "/tokenize", {"content": "Hello world"})
    assert st == 200 and r["count"] == len(r["tokens"]) > 0
    st, _, d = _post_json(client, "/detokenize", {"tokens": r["tokens"]})
    assert st == 200 and d["content"].endswith("Hello world")
    st, _, r = _post_json(client, "/tokenize", {"messages": MSG})
    assert st == 200 and r["count"] > 5
    st, _, e = _post_json(client, "/detokenize", {"tokens": [-1]})
    assert st == 400 and e["error"]["param"] == "tokens"


def test_health_metrics_cors_paths(srv):
    st, _, h = srv.request("GET", "/health")
    assert st == 200 and h == {"status": "ok"}
    st, _, _ = srv.request("GET", "/metrics")
    assert st == 401  # metrics need the key too
    st, _, txt = srv.request("GET", "/metrics", headers=AUTH)
    for name in ["num_requests_running", "num_requests_waiting", "kv_cache_usage_perc", "prompt_tokens_total",
                 "generation_tokens_total", "prefix_cache_queries_total", "prefix_cache_hits_total",
                 "num_preemptions_total"]:
        assert f"redline:{name}{{" in txt, name
    for h in ["time_to_first_token_seconds", "inter_token_latency_seconds", "e2e_request_latency_seconds"]:
        for suf in ["_bucket{", "_sum{", "_count{"]:
            assert f"redline:{h}{suf}" in txt
    st, hd, _ = srv.request("OPTIONS", "/v1/chat/completions",
                            headers={"Origin": "http://x", "Access-Control-Request-Method": "POST"})
    assert st == 204 and hd["Access-Control-Allow-Origin"] == "*"
    assert "Authorization" in hd["Access-Control-Allow-Headers"]
    for p in ["//v1/models", "/v1/models/", "/v1//models"]:
        st, _, m = srv.request("GET", p, headers=AUTH)
        assert st == 200 and m["data"][0]["id"] == "smollm2-135m", p


def test_health_while_loading_and_sigterm_drain():
    s = Server("-c", "512", env={"REDLINE_TEST_LOAD_DELAY_MS": "1500"}, wait_ready=False)
    try:
        st, _, h = s.request("GET", "/health")
        assert st == 503 and h == {"status": "loading"}
        st, hd, e = s.request("POST", "/v1/completions", {"prompt": "hi", "max_tokens": 2})
        assert st == 503 and "loading" in e["error"]["message"] and "Retry-After" in hd
        s.wait_ready()
        # a request in flight at SIGTERM still completes; the process exits 0
        out = {}

        def go():
            out["r"] = s.request("POST", "/v1/completions", {"prompt": "Once upon a time", "max_tokens": 24,
                                                              "temperature": 0})
        t = threading.Thread(target=go)
        t.start()
        time.sleep(0.3)
        s.proc.send_signal(signal.SIGTERM)
        t.join(60)
        assert out["r"][0] == 200 and out["r"][2]["usage"]["completion_tokens"] >= 1
        assert s.proc.wait(40) == 0
    finally:
        s.stop()


def test_queue_bound_503():
    s = Server("-c", "512", "-np", "1", "--max-queue", "1")
    try:
        results = []

        def go():
            results.append(s.request("POST", "/v1/completions", {"prompt": "Count: 1, 2,", "max_tokens": 16}))
        ts = [threading.Thread(target=go) for _ in range(6)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(120)
        codes = sorted(r[0] for r in results)
        assert 200 in codes and 503 in codes, codes
        busy = [r for r in results if r[0] == 503]
        assert all("Retry-After" in r[1] and r[2]["error"]["code"] == "queue_full" for r in busy)
    finally:
        assert s.stop() == 0


def test_oversized_header_and_body(srv):
    st, body = parse_raw(raw_http(srv.port, b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 40000
                                  + b"\r\n\r\n"))
    assert st == 431 and "error" in body
    st, body = parse_raw(raw_http(srv.port, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
                                  + KEY.encode() + b"\r\nContent-Length: 99999999\r\n\r\n{"))
    assert st == 413 and body["error"]["code"] == "request_too_large"
