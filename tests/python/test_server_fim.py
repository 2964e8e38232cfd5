"""Fill-in-the-middle: `suffix` on /v1/completions (the official `openai`
client) and llama-server's /infill (input_prefix, input_suffix,
input_extra, prompt), plain and streamed.  The prompt is checked token for
token against the order llama.cpp's server builds (the repo-level pattern:
<|repo_name|>, <|file_sep|> per extra chunk, then <|fim_prefix|> ...
<|fim_suffix|> ... <|fim_middle|>), and, when bench/'s llama.cpp build is
there, against llama-server itself on the same request.  SmolLM2 has no
FIM tokens: both endpoints answer 400 naming the field."""
import json
import os
import re
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import openai
import pytest

from conftest import ROOT, model_path
from serverlib import Server

PREFIX = "def add(a, b):\n    "
SUFFIX = "\n\nprint(add(1, 2))\n"
EXTRA = [{"filename": "util.py", "text": "X = 1\n"}, {"text": "Y = 2\n"}]
WANT_PROMPT = ("<|repo_name|>myproject\n<|file_sep|>util.py\nX = 1\n<|file_sep|>tmp\nY = 2\n"
               "<|file_sep|>filename\n<|fim_prefix|>" + PREFIX + "<|fim_suffix|>" + SUFFIX + "<|fim_middle|>")


@pytest.fixture(scope="module")
def qwen():
    model_path("qwen2.5-coder-0.5b")
    s = Server("-c", "2048", "-np", "2", model="qwen2.5-coder-0.5b")
    yield s
    assert s.stop() == 0


@pytest.fixture(scope="module")
def small():
    s = Server("-c", "1024")
    yield s
    assert s.stop() == 0


def _tok(s, text):
    st, _, b = s.request("POST", "/tokenize", {"content": text, "add_special": False})
    assert st == 200
    return b["tokens"]


def test_no_fim_tokens_is_400(small):
    st, _, b = small.request("POST", "/infill", {"input_prefix": "a", "input_suffix": "b"})
    assert st == 400 and b["error"]["param"] == "input_suffix"
    assert "fill-in-the-middle" in b["error"]["message"]
    st, _, b = small.request("POST", "/v1/completions", {"prompt": "a", "suffix": "b", "max_tokens": 2})
    assert st == 400 and b["error"]["param"] == "suffix"
    # nothing else is affected
    st, _, b = small.request("POST", "/v1/completions", {"prompt": "a", "max_tokens": 2})
    assert st == 200 and b["choices"][0]["text"] is not None


@pytest.mark.parametrize("body, param", [
    ({"input_suffix": "b"}, "input_prefix"),
    ({"input_prefix": "a"}, "input_suffix"),
    ({"input_prefix": 1, "input_suffix": "b"}, "input_prefix"),
    ({"input_prefix": "a", "input_suffix": "b", "prompt": ["x"]}, "prompt"),
    ({"input_prefix": "a", "input_suffix": "b", "input_extra": {"text": "x"}}, "input_extra"),
    ({"input_prefix": "a", "input_suffix": "b", "input_extra": [{"filename": "f"}]}, "input_extra"),
    ({"input_prefix": "a", "input_suffix": "b", "input_extra": [{"text": "x", "filename": 3}]}, "input_extra"),
    ({"input_prefix": "a", "input_suffix": "b", "n": 2}, "n"),
    ({"input_prefix": "a", "input_suffix": "b", "n_predict": -5}, "n_predict"),
])
def test_infill_bad_input(qwen, body, param):
    st, _, b = qwen.request("POST", "/infill", body)
    assert st == 400 and b["error"]["param"] == param, b


def test_completion_suffix_bad_input(qwen):
    st, _, b = qwen.request("POST", "/v1/completions", {"prompt": "a", "suffix": 3})
    assert st == 400 and b["error"]["param"] == "suffix"
    st, _, b = qwen.request("POST", "/v1/completions", {"prompt": [1, 2], "suffix": "x"})
    assert st == 400 and b["error"]["param"] == "suffix"


def test_infill_prompt_order(qwen):
    st, _, b = qwen.request("POST", "/infill", {"input_prefix": PREFIX, "input_suffix": SUFFIX,
                                                "input_extra": EXTRA, "n_predict": 8, "temperature": 0})
    assert st == 200, b
    assert b["prompt"] == WANT_PROMPT
    # token for token: control tokens as ids, the texts tokenized on their own
    ctl = {n: _tok(qwen, n)[0] for n in ("<|repo_name|>", "<|file_sep|>", "<|fim_prefix|>",
                                         "<|fim_suffix|>", "<|fim_middle|>")}
    st, _, t = qwen.request("POST", "/tokenize", {"content": "<|fim_prefix|>", "add_special": False})
    assert len(t["tokens"]) == 1  # one control token when parsed as special
    want = ([ctl["<|repo_name|>"]] + _tok(qwen, "myproject\n") + [ctl["<|file_sep|>"]] + _tok(qwen, "util.py\n")
            + _tok(qwen, "X = 1\n") + [ctl["<|file_sep|>"]] + _tok(qwen, "tmp\n") + _tok(qwen, "Y = 2\n")
            + [ctl["<|file_sep|>"]] + _tok(qwen, "filename\n") + [ctl["<|fim_prefix|>"]] + _tok(qwen, PREFIX)
            + [ctl["<|fim_suffix|>"]] + _tok(qwen, SUFFIX) + [ctl["<|fim_middle|>"]])
    assert b["tokens_evaluated"] == len(want)
    assert b["stop"] is True and b["stop_type"] in ("eos", "limit") and b["tokens_predicted"] >= 1
    # a control-token spelling in the user's text stays text
    st, _, b2 = qwen.request("POST", "/infill", {"input_prefix": "<|fim_middle|>", "input_suffix": "",
                                                 "n_predict": 1})
    assert st == 200 and b2["tokens_evaluated"] > 6


def test_infill_prompt_field_goes_after_prefix(qwen):
    st, _, b = qwen.request("POST", "/infill", {"input_prefix": "x = ", "input_suffix": "\n", "prompt": "1 +",
                                                "n_predict": 2, "temperature": 0})
    assert st == 200
    assert b["prompt"].endswith("<|fim_prefix|>x = 1 +<|fim_suffix|>\n<|fim_middle|>")


def test_infill_completes_the_gap(qwen):
    st, _, b = qwen.request("POST", "/infill", {"input_prefix": PREFIX, "input_suffix": SUFFIX, "n_predict": 16,
                                                "temperature": 0})
    assert st == 200
    assert b["content"].startswith("return a + b"), b["content"]


def test_infill_n_indent(qwen):
    # llama-server's n_indent: a line after the first indented less than 4
    # ends the output (cut before it), streamed the same
    body = {"input_prefix": "def is_prime(n):\n    \"\"\"True when n is prime.\"\"\"\n",
            "input_suffix": "\n\n\ndef primes_below(m):\n    return [k for k in range(m) if is_prime(k)]\n",
            "n_predict": 120, "temperature": 0, "n_indent": 4}
    st, _, b = qwen.request("POST", "/infill", body)
    assert st == 200
    lines = b["content"].split("\n")
    assert all(not l.strip() or l.startswith("    ") for l in lines[1:]), b["content"]
    free = qwen.request("POST", "/infill", {**body, "n_indent": 0})[2]
    if free["content"] != b["content"]:  # the rule cut something: "limit", and a prefix of the free text
        assert b["stop_type"] == "limit" and free["content"].startswith(b["content"])
    req = urllib.request.Request(qwen.base + "/infill", data=json.dumps({**body, "stream": True}).encode(),
                                 method="POST")
    with urllib.request.urlopen(req, timeout=60) as r:
        events = [json.loads(l[6:]) for l in r.read().decode().split("\n") if l.startswith("data: ")]
    assert "".join(e["content"] for e in events) == b["content"]
    assert events[-1]["stop_type"] == b["stop_type"]
    st, _, e = qwen.request("POST", "/infill", {**body, "n_indent": -1})
    assert st == 400 and e["error"]["param"] == "n_indent"


def test_infill_stream_matches_plain(qwen):
    body = {"input_prefix": PREFIX, "input_suffix": SUFFIX, "n_predict": 12, "temperature": 0}
    st, _, plain = qwen.request("POST", "/infill", body)
    req = urllib.request.Request(qwen.base + "/infill", data=json.dumps({**body, "stream": True}).encode(),
                                 method="POST")
    with urllib.request.urlopen(req, timeout=60) as r:
        raw = r.read().decode()
    events = [json.loads(l[6:]) for l in raw.split("\n") if l.startswith("data: ")]
    assert "[DONE]" not in raw
    assert all(e["stop"] is False for e in events[:-1]) and events[-1]["stop"] is True
    assert "".join(e["content"] for e in events) == plain["content"]
    assert events[-1]["tokens_predicted"] == plain["tokens_predicted"]


def test_completion_suffix_openai(qwen):
    c = openai.OpenAI(base_url=qwen.base + "/v1", api_key="x", max_retries=0, timeout=120)
    r = c.completions.create(model="m", prompt=PREFIX, suffix=SUFFIX, max_tokens=16, temperature=0)
    assert r.choices[0].text.startswith("return a + b"), r.choices[0].text
    # [PRE] prefix [SUF] suffix [MID], no repo context
    n = 3 + len(_tok(qwen, PREFIX)) + len(_tok(qwen, SUFFIX))
    assert r.usage.prompt_tokens == n
    parts = [ch.choices[0].text for ch in c.completions.create(model="m", prompt=PREFIX, suffix=SUFFIX,
                                                                 max_tokens=16, temperature=0, stream=True)]
    assert "".join(parts) == r.choices[0].text


# ---- against llama-server (bench/'s llama.cpp build; skipped without it) ----
def _llama_server():
    env = os.environ.get("REDLINE_LLAMA_BIN")
    cands = [Path(env)] if env else sorted((ROOT / "bench" / ".cache").glob("llama.cpp-build-*/bin"))
    for d in cands:
        if (d / "llama-server").exists():
            return d / "llama-server"
    return None


def _free_port():
    with socket.socket() as so:
        so.bind(("127.0.0.1", 0))
        return so.getsockname()[1]


@pytest.mark.skipif(_llama_server() is None, reason="llama.cpp build not found (bench/, $REDLINE_LLAMA_BIN)")
def test_infill_prompt_same_as_llama_server(qwen):
    exe, port = _llama_server(), _free_port()
    env = {**os.environ, "LD_LIBRARY_PATH": f"{exe.parent}:{exe.parent.parent / 'lib'}"}
    p = subprocess.Popen([str(exe), "-m", str(model_path("qwen2.5-coder-0.5b")), "--port", str(port), "-c", "8192",
                          "-b", "2048", "-t", "2"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    try:
        body = {"input_prefix": PREFIX, "input_suffix": SUFFIX, "input_extra": EXTRA, "prompt": "return",
                "n_predict": 4, "temperature": 0}
        t_end, lb = time.time() + 90, None
        while time.time() < t_end and lb is None:
            try:
                req = urllib.request.Request(f"http://127.0.0.1:{port}/infill", data=json.dumps(body).encode(),
                                             method="POST")
                with urllib.request.urlopen(req, timeout=60) as r:
                    lb = json.loads(r.read())
            except Exception:
                time.sleep(0.5)
        assert lb is not None, "llama-server did not answer"
        st, _, b = qwen.request("POST", "/infill", body)
        assert st == 200
        assert b["prompt"] == lb["prompt"]
        assert b["tokens_evaluated"] == lb["tokens_evaluated"]
        assert re.sub(r"\s+", " ", b["prompt"]).count("<|file_sep|>") == 3
    finally:
        p.terminate()
        p.wait(20)
