"""Speculative decoding through the server: the `speculative` request field
and the --spec default, greedy output identical with and without it, the
spec_decode metrics, a clear 400 for a draft request without a draft
model, and a draft model with a restricted head (--draft-vocab) giving the
plain output."""
import subprocess

import openai
import pytest

from conftest import BUILD, model_path
from serverlib import Server

CODE = "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n"


@pytest.fixture(scope="module")
def srv():
    model_path("smollm2-135m")
    s = Server("-c", "1024", "-np", "4", "--spec", "ngram")
    yield s
    assert s.stop() == 0


def complete(srv, **kw):
    c = openai.OpenAI(base_url=srv.base + "/v1", api_key="x", max_retries=0, timeout=120)
    return c.completions.create(model="m", prompt=f"Repeat this code exactly:\n{CODE}\n",
                                max_tokens=48, temperature=0, **kw).choices[0].text


def test_greedy_identical_with_ngram(srv):
    plain = complete(srv, extra_body={"speculative": "none"})
    spec = complete(srv, extra_body={"speculative": "ngram"})
    default = complete(srv)  # the server's --spec ngram
    assert plain == spec == default
    status, _, body = srv.request("GET", "/metrics")
    text = body if isinstance(body, str) else body.decode()
    drafts = [l for l in text.splitlines() if l.startswith("redline:spec_decode_num_draft_tokens_total")]
    assert drafts and float(drafts[0].split()[-1]) > 0


def test_draft_without_draft_model_is_400(srv):
    with pytest.raises(openai.BadRequestError) as e:
        complete(srv, extra_body={"speculative": "draft"})
    assert "draft" in str(e.value)
    with pytest.raises(openai.BadRequestError):
        complete(srv, extra_body={"speculative": "sometimes"})


def test_restricted_draft_model_identical():
    m = model_path("smollm2-135m")
    # the model drafts for itself over its first 4096 ids; --draft-max 3
    # fixed by the cost model's probe at least once
    s = Server("-c", "1024", "-np", "2", "-md", str(m), "--draft-vocab", "4096",
               "--spec", "draft", "--draft-max", "3")
    try:
        plain = complete(s, extra_body={"speculative": "none"})
        spec = complete(s)
        assert plain == spec
        _, _, body = s.request("GET", "/metrics")
        text = body if isinstance(body, str) else body.decode()
        drafts = [l for l in text.splitlines()
                  if l.startswith("redline:spec_decode_num_draft_tokens_total")]
        assert drafts and float(drafts[0].split()[-1]) > 0
    finally:
        assert s.stop() == 0


def test_bad_draft_vocab_is_usage_error():
    m = model_path("smollm2-135m")
    r = subprocess.run([str(BUILD / "redline"), "serve", "-m", str(m), "-md", str(m),
                        "--draft-vocab", "-5"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert "--draft-vocab" in r.stderr
