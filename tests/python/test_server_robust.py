"""Hostile clients: >= 200 malformed requests (generated below), each must
get a 4xx with OpenAI error JSON and leave the server answering normal
requests; and a disconnect storm of streaming clients killed at random
points, after which no request is running or waiting and no KV block is
held (cached prefix blocks are reported separately)."""
import json
import random
import socket
import threading
import time
import urllib.request

import pytest

from conftest import model_path
from serverlib import Server, raw_http, parse_raw

KEY = "sk-robust"
GOOD_CHAT = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3, "temperature": 0}
GOOD_COMPL = {"prompt": "Hello", "max_tokens": 3, "temperature": 0}


@pytest.fixture(scope="module")
def srv():
    model_path("smollm2-135m")
    s = Server("--api-key", KEY, "-c", "512", "-np", "32", "--max-body", "1M")
    yield s
    assert s.stop() == 0


def malformed_cases():
    """(name, method, path, headers-or-None (None = authorized JSON), body bytes)."""
    cases = []
    js = lambda o: json.dumps(o).encode()
    # 1. bodies that are not a JSON object
    for b in [b"", b"{", b"}", b"[]", b"null", b"123", b'"str"', b"{'a':1}", b'{"a":}', b"NaN", b"Infinity",
              b'{"max_tokens": NaN}', b'{"temperature": Infinity}', b'{"temperature": -Infinity}',
              b'{"a":1} trailing', b'{"a":1,}', b'{"a" 1}', b"\x00", b'{"a":"\\ud800"}', b"\xef\xbb\xbf{}",
              b'{"messages": [], "messages": []}', b"[" * 100000, b'{"a":' * 5000 + b"1" + b"}" * 5000,
              b'{"prompt":"\xff\xfe"}', b'{"prompt":"\xc0\xaf"}', b'{"prompt":"ok\xed\xa0\x80"}',
              b'{"max_tokens": 1e999}', b'{"seed": 99999999999999999999999}']:
        for path in ["/v1/chat/completions", "/v1/completions"]:
            cases.append((f"body {b[:20]!r} {path}", "POST", path, None, b))
    # 2. wrong types and out-of-range values, per field
    bad = {
        "model": [1, [], {}, True],
        "max_tokens": [0, -1, 10**12, 1.5, "10", True, [], -(2**63)],
        "max_completion_tokens": [0, -5, 10**9, "x"],
        "temperature": [-0.1, -1, 1e308, "1", [], True, 101],
        "top_p": [0, -0.5, 1.1, "x", 1e300],
        "top_k": [-2, 10**10, 1.5, "x"],
        "min_p": [-0.1, 1.5, "x"],
        "presence_penalty": [-3, 2.5, 1e308, "x"],
        "frequency_penalty": [-2.1, 3, {}],
        "repetition_penalty": [0, -1, 11, "x"],
        "seed": ["x", 1.5, 1e30, [], {}],
        "n": [0, -1, 9, 100, 1.5, "2"],
        "stream": ["yes", 1, [], {}],
        "stop": [1, [1], [""], ["a"] * 5, ["x" * 65], {}, [None]],
        "logit_bias": [[], "x", {"abc": 1}, {"-1": 1}, {"49152": 1}, {"5": 101}, {"5": "x"}, {"": 1},
                       {"5": None}, {"1e3": 1}],
        "response_format": ["json", {"type": "xml"}, {"type": "json_schema"}, {"type": 1}, [],
                            {"type": "json_schema", "json_schema": {"schema": 5}}],
        "stream_options": ["x", 1, {"include_usage": "yes"}],
        "priority": ["x", 1.5, 10**9],
        "ignore_eos": ["x", 0],
    }
    for field, vals in bad.items():
        for v in vals:
            for base, path in [(GOOD_CHAT, "/v1/chat/completions"), (GOOD_COMPL, "/v1/completions")]:
                cases.append((f"{field}={v!r:.30} {path}", "POST", path, None, js({**base, field: v})))
    # chat-only and completion-only fields
    for v in ["x", 1, [], [1], [{}], [{"role": "bogus", "content": "x"}], [{"content": "x"}], [{"role": "user"}],
              [{"role": "user", "content": 5}], [{"role": "user", "content": [{"type": "image_url"}]}],
              [{"role": "user", "content": [{"type": "text"}]}], [{"role": "user", "content": "a\u0000b"}],
              [{"role": 5, "content": "x"}], None]:
        cases.append((f"messages={v!r:.40}", "POST", "/v1/chat/completions", None,
                      js({"messages": v, "max_tokens": 2})))
    for v in [None, 5, {}, [], [-1], [49152], [10**10], [1.5], ["a", "b"], [[1, 2], [3]], [True], [[]],
              list(range(600))]:
        cases.append((f"prompt={v!r:.40}", "POST", "/v1/completions", None, js({"prompt": v, "max_tokens": 2})))
    for v in ["x", 1, 3.5]:
        cases.append((f"chat logprobs={v!r}", "POST", "/v1/chat/completions", None, js({**GOOD_CHAT, "logprobs": v})))
    for v in [-1, 21, "x", 2.5]:
        cases.append((f"top_logprobs={v!r}", "POST", "/v1/chat/completions", None,
                      js({**GOOD_CHAT, "logprobs": True, "top_logprobs": v})))
    cases.append(("top_logprobs without logprobs", "POST", "/v1/chat/completions", None,
                  js({**GOOD_CHAT, "top_logprobs": 2})))
    for v in [-1, 21, "x"]:
        cases.append((f"compl logprobs={v!r}", "POST", "/v1/completions", None, js({**GOOD_COMPL, "logprobs": v})))
    # prompt longer than the context (512)
    cases.append(("prompt too long", "POST", "/v1/completions", None, js({"prompt": "hello " * 2000})))
    cases.append(("max_tokens beyond context", "POST", "/v1/completions", None,
                  js({"prompt": "hello", "max_tokens": 600})))
    # tokenize / detokenize
    for b in [b"{}", b'{"content": 5}', b'{"tokens": "x"}', b"[1]", b'{"content":"x","add_special":"no"}']:
        cases.append((f"tokenize {b!r}", "POST", "/tokenize", None, b))
    for b in [b"{}", b'{"tokens": "x"}', b'{"tokens": [-1]}', b'{"tokens": [1e9]}', b'{"tokens": [[1]]}']:
        cases.append((f"detokenize {b!r}", "POST", "/detokenize", None, b))
    # 3. paths and methods
    for m, p in [("GET", "/v1/chat/completions"), ("DELETE", "/v1/models"), ("PUT", "/v1/completions"),
                 ("GET", "/nope"), ("POST", "/health"), ("GET", "/v1/../health"), ("GET", "/v1/./models"),
                 ("PATCH", "/"), ("GET", "/v2/models"), ("POST", "/v1/models"), ("GET", "/tokenize"),
                 ("POST", "/metrics"), ("GET", "/v1/completions/x"), ("BREW", "/v1/models")]:
        cases.append((f"{m} {p}", m, p, None, b"{}" if m in ("POST", "PUT", "PATCH") else None))
    # 4. authentication
    for h in [{}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic " + KEY},
              {"Authorization": "Bearer "}, {"Authorization": KEY}, {"Authorization": "Bearer " + KEY + "x"},
              {"Authorization": "Bearer " + KEY[:-1]}]:
        for m, p in [("GET", "/v1/models"), ("POST", "/v1/chat/completions"), ("GET", "/metrics")]:
            cases.append((f"auth {h} {p}", m, p, {"Content-Type": "application/json", **h},
                          json.dumps(GOOD_CHAT).encode() if m == "POST" else None))
    return cases


def test_malformed_requests(srv):
    cases = malformed_cases()
    assert len(cases) >= 200, len(cases)
    auth = {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"}
    failures = []
    for name, method, path, headers, body in cases:
        st, _, r = srv.request(method, path, body, headers=auth if headers is None else headers, timeout=30)
        ok = (400 <= st < 500 and isinstance(r, dict) and isinstance(r.get("error"), dict)
              and isinstance(r["error"].get("message"), str) and r["error"]["message"]
              and "type" in r["error"] and "param" in r["error"] and "code" in r["error"])
        if not ok:
            failures.append(f"{name}: {st} {str(r)[:200]}")
    # raw-socket cases urllib cannot produce
    raws = [b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 40000 + b"\r\n\r\n",
            b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + KEY.encode()
            + b"\r\nContent-Length: 99999999\r\n\r\n{",
            b"GET /v1/models HTTP/1.1\r\nHost: x\r\n" + b"".join(b"X-H%d: v\r\n" % i for i in range(3000)) + b"\r\n",
            # oversized body (--max-body 1M): the answer comes before the body is read
            b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + KEY.encode()
            + b"\r\nContent-Length: %d\r\n\r\n" % ((1 << 20) + 100) + b'{"prompt":"' + b"x" * 30000,
            # oversized chunked body
            b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + KEY.encode()
            + b"\r\nTransfer-Encoding: chunked\r\n\r\n" + (b"8000\r\n" + b"x" * 0x8000 + b"\r\n") * 40
            + b"0\r\n\r\n"]
    for i, raw in enumerate(raws):
        st, body = parse_raw(raw_http(srv.port, raw))
        if not (st is not None and 400 <= st < 500 and body and "error" in body):
            failures.append(f"raw case {i}: {st} {body}")
    # HTTP framing errors are answered by libmicrohttpd itself (a 4xx, not
    # JSON) or, for a request line that is not HTTP at all, by closing
    for raw in [b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n",
                b"GARBAGE\r\n\r\n", b"GET / HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n"]:
        st, _ = parse_raw(raw_http(srv.port, raw))
        if not (st is None or 400 <= st < 500):
            failures.append(f"framing case {raw[:30]!r}: {st}")
    assert not failures, f"{len(failures)} of {len(cases) + len(raws)} failed:\n" + "\n".join(failures[:40])
    # the server still answers normal requests correctly
    st, _, r = srv.request("POST", "/v1/chat/completions", json.dumps(GOOD_CHAT).encode(), headers=auth)
    assert st == 200 and r["choices"][0]["message"]["content"] and r["usage"]["completion_tokens"] >= 1
    st, _, h = srv.request("GET", "/health")
    assert st == 200


def _storm_client(port, rng, body, stats):
    s = socket.create_connection(("127.0.0.1", port), timeout=15)
    try:
        req = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + KEY.encode()
               + b"\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        mode = rng.choice(["partial", "after_send", "mid_stream", "mid_stream", "mid_stream"])
        if mode == "partial":
            s.sendall(req[: rng.randrange(1, len(req))])
            time.sleep(rng.random() * 0.3)
        else:
            s.sendall(req)
            if mode == "after_send":
                time.sleep(rng.random() * 0.3)
            else:
                want = rng.randrange(1, 12)
                got = b""
                while got.count(b"data: ") < want:
                    try:
                        b = s.recv(4096)
                    except socket.timeout:  # slow (sanitizer) build: give up waiting, still disconnect
                        break
                    if not b:
                        break
                    got += b
                stats.append(got.count(b"data: "))
    finally:
        # RST instead of FIN half the time: both must be noticed
        if rng.random() < 0.5:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        s.close()


def test_disconnect_storm(srv):
    rng = random.Random(1234)
    stats = []
    threads = []
    for i in range(24):
        body = json.dumps({"messages": [{"role": "user", "content": f"Tell me a long story number {i}."}],
                           "max_tokens": 400, "stream": True, "temperature": 1, "seed": i}).encode()
        t = threading.Thread(target=_storm_client, args=(srv.port, random.Random(rng.random()), body, stats))
        threads.append(t)
        t.start()
        time.sleep(rng.random() * 0.05)
    for t in threads:
        t.join(60)
    # also a non-streaming request whose client goes away
    s = socket.create_connection(("127.0.0.1", srv.port))
    body = json.dumps({"prompt": "Once upon a time", "max_tokens": 400}).encode()
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + KEY.encode()
              + b"\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    time.sleep(0.3)
    s.close()
    t_end = time.time() + 60  # release builds take well under a second; sanitizer builds longer
    m = {}
    while time.time() < t_end:
        _, _, txt = srv.request("GET", "/metrics", headers={"Authorization": f"Bearer {KEY}"})
        m = {l.split("{")[0]: float(l.rsplit(" ", 1)[1]) for l in txt.splitlines()
             if l.startswith("redline:") and "_bucket" not in l and "{model_name" in l and "code=" not in l
             and "finished_reason" not in l}
        if m["redline:num_requests_running"] == 0 and m["redline:num_requests_waiting"] == 0 \
                and m["redline:kv_blocks_used"] == 0:
            break
        time.sleep(0.1)
    assert m["redline:num_requests_running"] == 0, m
    assert m["redline:num_requests_waiting"] == 0, m
    assert m["redline:kv_blocks_used"] == 0, m
    assert m["redline:kv_cache_usage_perc"] == 0, m
    # generation stopped early: far fewer tokens than 25 x 400 were produced
    assert m["redline:generation_tokens_total"] < 25 * 400 / 2, m
    st, _, r = srv.request("POST", "/v1/completions", json.dumps(GOOD_COMPL).encode(),
                           headers={"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"})
    assert st == 200 and r["choices"][0]["text"]


def test_cancel_latency(srv):
    """A client that goes away has its request cancelled within about 1 s."""
    auth = {"Authorization": f"Bearer {KEY}"}
    s = socket.create_connection(("127.0.0.1", srv.port))
    body = json.dumps({"prompt": "Write a very long essay.", "max_tokens": 480, "stream": True,
                       "ignore_eos": True}).encode()
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + KEY.encode()
              + b"\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    got = b""
    while got.count(b"data: ") < 3:
        got += s.recv(4096)
    s.close()
    t0 = time.time()
    while time.time() - t0 < 5:
        _, _, txt = srv.request("GET", "/metrics", headers=auth)
        running = [l for l in txt.splitlines() if l.startswith("redline:num_requests_running{")]
        if float(running[0].rsplit(" ", 1)[1]) == 0:
            break
        time.sleep(0.05)
    assert time.time() - t0 < 1.5
