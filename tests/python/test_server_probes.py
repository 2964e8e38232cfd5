"""What routers and orchestrators read from `redline serve` (docs/SCALE.md):
liveness apart from readiness (/livez answers 200 while /health is 503 for
loading, and /health turns 503 "draining" on SIGTERM), the SGLang Model
Gateway's info routes (/server_info, /model_info, their /get_* aliases,
/get_load, /health_generate), and the /metrics aliases an inference gateway
scrapes (vllm:*, sglang:*) carrying the same values as redline's own."""
import http.client
import json
import signal
import socket
import threading
import time

import pytest

from conftest import model_path
from serverlib import Server


@pytest.fixture(scope="module")
def srv():
    model_path("smollm2-135m")
    s = Server("-c", "1024", "-np", "4")
    yield s
    assert s.stop() == 0


def test_liveness_is_not_readiness_while_loading():
    s = Server("-c", "512", env={"REDLINE_TEST_LOAD_DELAY_MS": "1500"}, wait_ready=False)
    try:
        st, _, h = s.request("GET", "/health")
        assert st == 503 and h == {"status": "loading"}
        st, _, h = s.request("GET", "/readyz")
        assert st == 503 and h == {"status": "loading"}
        st, _, h = s.request("GET", "/livez")
        assert st == 200 and h == {"status": "alive", "state": "loading"}
        st, _, h = s.request("GET", "/health_generate")
        assert st == 503 and h["status"] == "loading"
        st, _, i = s.request("GET", "/server_info")
        assert st == 200 and i["status"] == "loading" and i["max_total_tokens"] == 0
        s.wait_ready()
        st, _, h = s.request("GET", "/livez")
        assert st == 200 and h["state"] == "ready"
        st, _, h = s.request("GET", "/readyz")
        assert st == 200 and h == {"status": "ok"}
    finally:
        s.stop()


def test_health_says_draining_after_sigterm():
    s = Server("-c", "512")
    try:
        # a kept-alive connection (as a router's pool holds) sees readiness drop
        conn = http.client.HTTPConnection("127.0.0.1", s.port, timeout=30)
        conn.request("GET", "/health")
        r = conn.getresponse()
        assert r.status == 200 and r.read() == b'{"status":"ok"}'
        done = {}

        def go():  # keeps the server draining for a while (seconds even on a quiet machine)
            done["r"] = s.request("POST", "/v1/completions",
                                  {"prompt": "Once upon a time", "max_tokens": 400, "temperature": 0,
                                   "ignore_eos": True})
        t = threading.Thread(target=go)
        t.start()
        # the generation in flight before the signal (a loaded CI host may
        # take longer than any fixed sleep to start it)
        t_end = time.time() + 30
        while s.metrics().get("redline:num_requests_running", 0) < 1 and time.time() < t_end:
            time.sleep(0.02)
        s.proc.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        conn.request("GET", "/health")
        r = conn.getresponse()
        assert r.status == 503 and r.read() == b'{"status":"draining"}'
        conn.close()
        t.join(60)
        assert done["r"][0] == 200
        assert s.proc.wait(40) == 0
    finally:
        s.stop()


def test_request_across_sigterm_is_answered():
    """A request whose headers reached the server before SIGTERM and whose
    body arrives after it gets an answer (503 shutting_down), not a closed
    connection: shutdown waits for HTTP requests being read, not only for
    generations in flight."""
    s = Server("-c", "512")
    try:
        body = json.dumps({"prompt": "Once upon a time", "max_tokens": 4}).encode()
        sock = socket.create_connection(("127.0.0.1", s.port), timeout=30)
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n" % len(body) + body[:5])
        time.sleep(0.3)  # the headers handled: the request is being read
        s.proc.send_signal(signal.SIGTERM)
        time.sleep(0.6)  # past the shutdown's grace for bytes in flight
        sock.sendall(body[5:])
        resp = b""
        while b"\r\n\r\n" not in resp or not resp.rstrip().endswith(b"}"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            resp += chunk
        sock.close()
        assert resp.startswith(b"HTTP/1.1 503"), resp[:200]
        assert b"shutting_down" in resp, resp[:400]
        assert s.proc.wait(40) == 0
    finally:
        s.stop()


def test_server_and_model_info(srv):
    for path in ("/server_info", "/get_server_info"):
        st, _, i = srv.request("GET", path)
        assert st == 200, path
        assert i["served_model_name"] == "smollm2-135m" and i["model_path"].endswith("smollm2-135m.gguf")
        assert i["tp_size"] == 1 and i["dp_size"] == 1 and i["status"] == "ready"
        assert i["context_length"] == 1024 and i["max_running_requests"] == 4
        assert i["max_total_tokens"] > 0 and i["max_total_tokens"] % i["page_size"] == 0
    for path in ("/model_info", "/get_model_info"):
        st, _, m = srv.request("GET", path)
        assert st == 200, path
        assert m["is_generation"] is True and m["model_type"] == "llama" and m["architectures"] == ["llama"]
        assert m["model_path"].endswith("smollm2-135m.gguf") and m["vocab_size"] == 49152
    st, _, h = srv.request("GET", "/health_generate")
    assert st == 200 and h == {"status": "ok"}
    st, _, e = srv.request("POST", "/server_info", b"{}")
    assert st == 405


def test_get_load_and_metric_aliases_follow_the_engine(srv):
    st, _, load = srv.request("GET", "/get_load")
    assert st == 200 and isinstance(load, list) and len(load) == 1
    assert load[0]["dp_rank"] == 0 and load[0]["num_waiting_reqs"] == 0
    # a shared prefix twice: the second request hits the prefix cache
    prompt = "The quick brown fox jumps over the lazy dog. " * 8
    for _ in range(2):
        st, _, _ = srv.request("POST", "/v1/completions", {"prompt": prompt + "And", "max_tokens": 2})
        assert st == 200
    seen = {}
    stop = threading.Event()

    def poll():  # the running gauge and /get_load agree while a request runs
        while not stop.is_set():
            m = srv.metrics()
            if m["redline:num_requests_running"] >= 1:
                seen["m"] = m
                _, _, seen["load"] = srv.request("GET", "/get_load")
                return
            time.sleep(0.02)
    t = threading.Thread(target=poll)
    t.start()
    srv.request("POST", "/v1/completions", {"prompt": "Count: 1, 2,", "max_tokens": 64, "ignore_eos": True})
    stop.set()
    t.join(10)
    assert "m" in seen, "never saw a running request in /metrics"
    m = seen["m"]
    assert m["vllm:num_requests_running"] == m["redline:num_requests_running"] == m["sglang:num_running_reqs"]
    assert seen["load"][0]["num_reqs"] >= 1
    m = srv.metrics()
    assert m["vllm:num_requests_waiting"] == m["redline:num_requests_waiting"] == m["sglang:num_queue_reqs"]
    assert m["vllm:kv_cache_usage_perc"] == m["vllm:gpu_cache_usage_perc"] == m["redline:kv_cache_usage_perc"]
    assert m["sglang:token_usage"] == m["redline:kv_cache_usage_perc"]
    _, _, info = srv.request("GET", "/server_info")
    bs = info["page_size"]
    assert m["redline:prefix_cache_hits_total"] >= 1
    assert m["vllm:prefix_cache_hits_total"] == m["redline:prefix_cache_hits_total"] * bs
    assert m["vllm:prefix_cache_queries_total"] == m["redline:prefix_cache_queries_total"] * bs
    assert m["redline:prompt_tokens_cached_total"] >= bs
