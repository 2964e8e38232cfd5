"""Embeddings: the bert architecture and pooling against the NumPy reference,
and POST /v1/embeddings driven by the official `openai` SDK.

Files: tests/gen/randbert.py writes `tiny` random-weight bert files (the
real bge WordPiece vocabulary from llama.cpp's ggml-vocab-bert-bge.gguf; 2
layers, n_embd 64) with pooling cls, mean and last, and one with
bert.attention.causal = true; the decoder is models/smollm2-135m.gguf (no
pooling key: mean).

  reference (build/tools/embed vs tests/reference/bert.py, cosine per input):
    exact path (--exact: f32 weights and KV) >= 0.9999, stored weights
    (f16 / SmolLM2's Q4_1, 8-bit activations) >= 0.999; a decoder input
    longer than the batch (-b 8: chunks attending to earlier K/V) equals
    the one-forward result to 1e-5;
  server (openai SDK): the default model with a list of strings, float and
    base64 (the SDK's default), the two agree exactly; token-array input
    equals build/tools/embed's stored-path vector; usage.prompt_tokens is the
    inputs' token count; a bert file with string input ([CLS] ... [SEP]
    added) equals its token-array input; embeddings served while a
    generation streams are unchanged; generation on bert is a 400 naming
    `model`; bad input (missing, empty, mistyped, out-of-vocabulary ids, too
    long, bad encoding_format / model / dimensions) is a 400 naming the field.
"""
import base64
import json
import os
import shutil
import signal
import subprocess
import sys
import threading

import numpy as np
import pytest

from conftest import BUILD, ROOT, llamacpp_assets_dir, model_path
from serverlib import Server

pytest.importorskip("gguf", reason="the gguf package writes the random-weight files")
sys.path.insert(0, str(ROOT / "tests" / "reference"))
sys.path.insert(0, str(ROOT / "tests" / "gen"))
import bert as refbert  # noqa: E402
import randbert  # noqa: E402

EMBED = BUILD / "tools" / "embed"
EXACT_COS = 0.9999
FAST_COS = 0.999
INPUTS = [[101, 7592, 2088, 102],
          [101] + list(range(2000, 2040)) + [102],
          [101, 1996, 4248, 2829, 4419, 14523, 2058, 1996, 13971, 3899, 1012, 102]]
SMOL_INPUTS = [[504, 3458, 282, 5248, 30], list(range(1000, 1030)), [9906, 2088, 28, 9906]]


def cos(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def run_embed(path, inputs, *extra):
    cmd = [str(EMBED), "-m", str(path), "-t", "2", *extra]
    for t in inputs:
        cmd += ["--tokens", ",".join(map(str, t))]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


@pytest.fixture(scope="module")
def bert_files(tmp_path_factory):
    assets = llamacpp_assets_dir()
    d = tmp_path_factory.mktemp("bert")
    out = {}
    for name, pooling, causal in (("cls", "cls", False), ("mean", "mean", False),
                                  ("last", "last", False), ("causal", "mean", True)):
        f = d / f"bert-{name}.gguf"
        randbert.generate(str(f), str(assets), "tiny", seed=len(out), pooling=pooling, causal=causal)
        out[name] = f
    return out


@pytest.mark.parametrize("name", ["cls", "mean", "last", "causal"])
def test_bert_vs_reference(bert_files, name):
    f = bert_files[name]
    exact = run_embed(f, INPUTS, "--exact")
    fast = run_embed(f, INPUTS)
    assert exact["arch"] == "bert" and exact["n_embd"] == 64
    assert exact["pooling"] == {"causal": "mean"}.get(name, name)
    for i, t in enumerate(INPUTS):
        ref = refbert.embed(str(f), t)
        assert abs(np.linalg.norm(exact["embeddings"][i]) - 1.0) < 1e-5
        assert cos(exact["embeddings"][i], ref) >= EXACT_COS, (name, i)
        assert cos(fast["embeddings"][i], ref) >= FAST_COS, (name, i)


def test_bert_pooling_differs(bert_files):
    """The pooling type is read: a cls file's vector is not the mean of the
    same hidden states."""
    f = bert_files["cls"]
    a = run_embed(f, INPUTS[1:2], "--exact")["embeddings"][0]
    ref_mean = refbert.pool(refbert.Bert(str(f)).hidden(INPUTS[1]), 1)
    assert cos(a, ref_mean) < 0.999


def test_decoder_vs_reference():
    f = model_path("smollm2-135m")
    exact = run_embed(f, SMOL_INPUTS, "--exact")
    fast = run_embed(f, SMOL_INPUTS)
    chunked = run_embed(f, SMOL_INPUTS, "--exact", "-b", "8")
    assert exact["pooling"] == "mean"
    for i, t in enumerate(SMOL_INPUTS):
        ref = refbert.embed(str(f), t)
        assert cos(exact["embeddings"][i], ref) >= EXACT_COS, i
        assert cos(fast["embeddings"][i], ref) >= FAST_COS, i
        assert np.abs(np.subtract(chunked["embeddings"][i], exact["embeddings"][i])).max() <= 1e-5


def strace_works():
    """strace is installed and may trace here (containers can forbid ptrace)."""
    if shutil.which("strace") is None:
        return False
    return subprocess.run(["strace", "-qq", "-o", "/dev/null", "true"], capture_output=True).returncode == 0


@pytest.mark.skipif(not strace_works(), reason="strace (installed and allowed to trace) counts the opens of the model file")
def test_engine_loads_bert_once(bert_files, tmp_path):
    """The engine opens a bert file once (it used to load it, free it and
    load it again with room for the whole trained context), and one forward
    still takes that whole context (test_server_bert sends 512 tokens)."""
    f = bert_files["cls"]
    trace = tmp_path / "strace.txt"
    cmd = ["strace", "-f", "-qq", "-e", "trace=open,openat", "-o", str(trace), str(BUILD / "redline"),
           "serve", "-m", str(f), "--host", "127.0.0.1", "--port", "0", "-t", "2"]
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)  # SIGTERM to the group: strace passes none on
    try:
        for line in p.stderr:
            assert "cannot load" not in line, line
            if "loaded in" in line:
                break
    finally:
        os.killpg(p.pid, signal.SIGTERM)
        p.communicate(timeout=60)
    opens = [ln for ln in trace.read_text().splitlines() if f.name in ln and "= -1" not in ln]
    assert len(opens) == 1, opens


# ---- the server ----

@pytest.fixture(scope="module")
def smol():
    model_path("smollm2-135m")
    s = Server("-c", "2048", "-np", "4")
    yield s
    assert s.stop() == 0


def client_of(s):
    import openai
    return openai.OpenAI(base_url=s.base + "/v1", api_key="x", max_retries=0, timeout=120)


def test_server_default_model(smol):
    c = client_of(smol)
    texts = ["The quick brown fox.", "A completely different sentence about the weather."]
    fl = c.embeddings.create(model="m", input=texts, encoding_format="float")
    b64 = c.embeddings.create(model="m", input=texts)  # the SDK asks for base64 and decodes it
    assert [d.index for d in fl.data] == [0, 1]
    n_tok = 0
    for t in texts:
        _, _, tk = smol.request("POST", "/tokenize", {"content": t})
        n_tok += tk["count"]
    assert fl.usage.prompt_tokens == n_tok and fl.usage.total_tokens == n_tok
    for a, b in zip(fl.data, b64.data):
        assert len(a.embedding) == 576
        assert np.array_equal(np.float32(a.embedding), np.float32(b.embedding))
        assert abs(np.linalg.norm(a.embedding) - 1.0) < 1e-5
    assert cos(fl.data[0].embedding, fl.data[1].embedding) < 0.999
    # raw base64 bytes are little-endian float32
    _, _, raw = smol.request("POST", "/v1/embeddings", {"input": texts[0], "encoding_format": "base64"})
    v = np.frombuffer(base64.b64decode(raw["data"][0]["embedding"]), "<f4")
    assert np.array_equal(v, np.float32(fl.data[0].embedding))


def test_server_tokens_match_tool(smol):
    c = client_of(smol)
    r = c.embeddings.create(model="m", input=SMOL_INPUTS, encoding_format="float")
    tool = run_embed(model_path("smollm2-135m"), SMOL_INPUTS)
    assert r.usage.prompt_tokens == sum(map(len, SMOL_INPUTS))
    for d, v in zip(r.data, tool["embeddings"]):
        assert np.abs(np.float32(d.embedding) - np.float32(v)).max() <= 1e-6
    one = c.embeddings.create(model="m", input=SMOL_INPUTS[0], encoding_format="float")
    assert np.array_equal(np.float32(one.data[0].embedding), np.float32(r.data[0].embedding))


def test_server_beside_generation(smol):
    """Embeddings requested while a generation streams: both complete, and
    the vectors equal those computed on an idle server."""
    c = client_of(smol)
    alone = c.embeddings.create(model="m", input=SMOL_INPUTS, encoding_format="float")
    out = {}

    def gen():
        s = c.chat.completions.create(model="m", messages=[{"role": "user", "content": "Count to fifty."}],
                                      max_tokens=64, temperature=0.0, stream=True)
        out["text"] = "".join((ch.choices[0].delta.content or "") for ch in s if ch.choices)

    th = threading.Thread(target=gen)
    th.start()
    busy = [c.embeddings.create(model="m", input=SMOL_INPUTS, encoding_format="float") for _ in range(3)]
    th.join(120)
    assert out.get("text")
    for r in busy:
        for a, b in zip(r.data, alone.data):
            assert np.array_equal(np.float32(a.embedding), np.float32(b.embedding))


def bad(s, body, param, status=400):
    st, _, r = s.request("POST", "/v1/embeddings", body)
    assert st == status, (body, r)
    assert r["error"]["param"] == param, (body, r)
    return r["error"]


def test_server_bad_input(smol):
    assert "required" in bad(smol, {"model": "m"}, "input")["message"]
    bad(smol, {"input": ""}, "input")
    bad(smol, {"input": []}, "input")
    bad(smol, {"input": [""]}, "input[0]")
    bad(smol, {"input": ["ok", 5]}, "input[1]")
    bad(smol, {"input": [[]]}, "input[0]")
    bad(smol, {"input": {"text": "x"}}, "input")
    bad(smol, {"input": 7}, "input")
    bad(smol, {"input": [1, "a"]}, "input")
    bad(smol, {"input": [[1, 2], [3, 49152]]}, "input[1]")
    bad(smol, {"input": [-1]}, "input")
    assert bad(smol, {"input": [5] * 2100}, "input")["code"] == "context_length_exceeded"
    bad(smol, {"input": "x", "encoding_format": "hex"}, "encoding_format")
    bad(smol, {"input": "x", "encoding_format": 1}, "encoding_format")
    bad(smol, {"input": "x", "model": 5}, "model")
    bad(smol, {"input": "x", "dimensions": 7}, "dimensions")
    st, _, r = smol.request("POST", "/v1/embeddings", b"{not json")
    assert st == 400
    # the server is unaffected
    st, _, r = smol.request("POST", "/v1/embeddings", {"input": "still fine", "dimensions": 576})
    assert st == 200 and len(r["data"][0]["embedding"]) == 576


def test_server_bert(bert_files):
    f = bert_files["cls"]
    with Server(model=str(f)[:-len(".gguf")]) as s:
        c = client_of(s)
        r = c.embeddings.create(model="bge", input=["Hello world", "hello   WORLD"], encoding_format="float")
        t = c.embeddings.create(model="bge", input=[INPUTS[0]], encoding_format="float")
        b = c.embeddings.create(model="bge", input="Hello world")
        assert r.usage.prompt_tokens == 8  # [CLS] hello world [SEP], twice
        assert np.array_equal(np.float32(r.data[0].embedding), np.float32(t.data[0].embedding))
        assert np.array_equal(np.float32(r.data[1].embedding), np.float32(t.data[0].embedding))
        assert np.array_equal(np.float32(b.data[0].embedding), np.float32(t.data[0].embedding))
        ref = refbert.embed(str(f), INPUTS[0])
        assert cos(t.data[0].embedding, ref) >= FAST_COS
        # bert takes its whole trained context (512) in one forward
        ok = c.embeddings.create(model="bge", input=[[101] + [2000] * 510 + [102]], encoding_format="float")
        assert len(ok.data[0].embedding) == 64
        assert bad(s, {"input": [2000] * 513}, "input")["code"] == "context_length_exceeded"
        st, _, err = s.request("POST", "/v1/chat/completions",
                               {"model": "m", "messages": [{"role": "user", "content": "hi"}]})
        assert st == 400 and err["error"]["param"] == "model"
        assert s.stop() == 0
