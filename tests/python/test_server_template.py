"""A chat template's raise_exception(msg) reaches the HTTP client as a 400
whose error message carries msg, through every route that renders the
template (chat completions, plain and streaming, through the official
openai client and plain HTTP; /tokenize with messages), and the server keeps
serving afterwards.  Gemma 3 270M has no template in its GGUF, so the
built-in Gemma template renders it: it raises "Conversation roles must
alternate user/assistant/user/assistant/..." when two user turns follow
each other."""
import openai
import pytest

from conftest import model_path
from serverlib import Server

MODEL = "gemma3-270m"
MSG_RAISED = "Conversation roles must alternate user/assistant/user/assistant/..."
BAD = [{"role": "user", "content": "Hi"}, {"role": "user", "content": "Hi again"}]
GOOD = [{"role": "user", "content": "Hi"}]


@pytest.fixture(scope="module")
def srv():
    model_path(MODEL)
    s = Server("-c", "512", "-np", "2", model=MODEL)
    yield s
    assert s.stop() == 0


@pytest.fixture(scope="module")
def client(srv):
    return openai.OpenAI(base_url=srv.base + "/v1", api_key="none", max_retries=0, timeout=60)


def _check_error(body):
    err = body["error"]
    assert MSG_RAISED in err["message"], err
    assert "raise_exception" in err["message"] and "chat template" in err["message"], err
    assert err["type"] == "invalid_request_error" and err["param"] == "messages", err


def test_raise_exception_is_400_with_message(srv, client):
    with pytest.raises(openai.BadRequestError) as ei:
        client.chat.completions.create(model=MODEL, messages=BAD, max_tokens=2)
    assert ei.value.status_code == 400
    _check_error(ei.value.body if "error" in ei.value.body else {"error": ei.value.body})

    # streaming: the template is rendered before any event is sent, so the
    # client gets the same 400 rather than a stream that breaks
    with pytest.raises(openai.BadRequestError) as ei:
        client.chat.completions.create(model=MODEL, messages=BAD, max_tokens=2, stream=True)
    assert MSG_RAISED in str(ei.value)

    st, _, body = srv.request("POST", "/v1/chat/completions", {"model": MODEL, "messages": BAD, "max_tokens": 2})
    assert st == 400, body
    _check_error(body)

    st, _, body = srv.request("POST", "/tokenize", {"messages": BAD})
    assert st == 400, body
    _check_error(body)


def test_server_still_serves(srv, client):
    r = client.chat.completions.create(model=MODEL, messages=GOOD, max_tokens=2, temperature=0)
    assert r.choices[0].finish_reason in ("stop", "length")
    st, _, body = srv.request("POST", "/tokenize", {"messages": GOOD})
    assert st == 200 and len(body["tokens"]) > 3, body
