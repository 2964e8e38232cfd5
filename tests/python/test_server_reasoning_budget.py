"""The per-request reasoning budget (`max_reasoning_tokens`, or
llama-server's `reasoning_budget`): once that many tokens were generated
inside the think block the engine writes "\\n</think>\\n\\n" into the output
and the model goes on with the answer; 0 closes the block at once.  On the
thinking copy of SmolLM2 of test_server_reasoning (its generation prompt
opens <think>), greedy, so the tokens before the close are exactly those
of unbudgeted decoding; also on /v1/completions with a prompt that ends in
<think>, and streamed."""
import openai
import pytest

from conftest import model_path
from test_server_reasoning import THINKING, ServerAt, with_template

CLOSE = "\n</think>\n\n"
ASK = [{"role": "user", "content": "What is 2 + 2? Think step by step."}]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    src = model_path("smollm2-135m")
    d = tmp_path_factory.mktemp("think_budget")
    with_template(src, d / "think.gguf", THINKING)
    s = ServerAt(d / "think.gguf")
    yield s
    assert s.stop() == 0


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.base + "/v1", api_key="x", max_retries=0, timeout=120)


def _tokens(server, text):
    st, _, b = server.request("POST", "/tokenize", {"content": text, "add_special": False})
    return b["tokens"]


def _detok(server, ids):
    st, _, d = server.request("POST", "/detokenize", {"tokens": ids})
    return d["content"]


def _gen(server, prompt, n, **kw):
    st, _, b = server.request("POST", "/v1/completions", {"prompt": prompt, "max_tokens": n, "temperature": 0,
                                                           "ignore_eos": True, "logprobs": 0, **kw})
    assert st == 200, b
    return b["choices"][0]


def test_completion_budget_closes_after_n_tokens(server):
    prompt = "Question: what is 2+2?\n<think>\n"
    free = _gen(server, prompt, 24)
    for n in (0, 1, 6):
        ch = _gen(server, prompt, 24, max_reasoning_tokens=n)
        toks = ch["logprobs"]["tokens"]
        assert len(toks) == 24
        # the first n tokens are those of free decoding, then the close
        assert toks[:n] == free["logprobs"]["tokens"][:n]
        head = "".join(toks[:n])
        assert ch["text"].startswith(head + CLOSE), (n, ch["text"])
        assert ch["text"].count("</think>") >= 1
    # llama-server's name; -1 = no budget
    assert _gen(server, prompt, 24, reasoning_budget=3)["text"] == _gen(server, prompt, 24,
                                                                         max_reasoning_tokens=3)["text"]
    assert _gen(server, prompt, 24, reasoning_budget=-1)["text"] == free["text"]


def test_no_think_no_force(server):
    # the prompt opens no block and the model writes none: nothing is forced
    prompt = "The capital of France is"
    assert _gen(server, prompt, 12, max_reasoning_tokens=2)["text"] == _gen(server, prompt, 12)["text"]


def test_chat_budget_splits_reasoning(client):
    free = client.chat.completions.create(model="m", messages=ASK, max_tokens=40, temperature=0)
    for n in (0, 8):
        r = client.chat.completions.create(model="m", messages=ASK, max_tokens=40, temperature=0,
                                           extra_body={"max_reasoning_tokens": n})
        m = r.choices[0].message
        rc = (m.model_extra or {}).get("reasoning_content") or ""
        assert "</think>" not in rc  # (the tiny model may write another one in its answer)
        assert m.content, "the answer follows the closed block"
        if n == 0:
            assert rc == ""
        else:
            free_rc = free.choices[0].message.model_extra.get("reasoning_content") or \
                free.choices[0].message.content
            assert rc and free_rc.startswith(rc.rstrip()), (rc, free_rc)


def test_chat_budget_streamed(client):
    kw = dict(model="m", messages=ASK, max_tokens=40, temperature=0, extra_body={"max_reasoning_tokens": 5})
    whole = client.chat.completions.create(**kw).choices[0].message
    content, reasoning = "", ""
    for ck in client.chat.completions.create(stream=True, **kw):
        if ck.choices:
            d = ck.choices[0].delta
            content += d.content or ""
            reasoning += (d.model_extra or {}).get("reasoning_content") or ""
    assert content == whole.content
    assert reasoning == (whole.model_extra.get("reasoning_content") or "")


@pytest.mark.parametrize("body, param", [
    ({"max_reasoning_tokens": -1}, "max_reasoning_tokens"),
    ({"max_reasoning_tokens": "a"}, "max_reasoning_tokens"),
    ({"reasoning_budget": -2}, "reasoning_budget"),
])
def test_bad_budget(server, body, param):
    st, _, b = server.request("POST", "/v1/chat/completions", {"messages": ASK, "max_tokens": 2, **body})
    assert st == 400 and b["error"]["param"] == param


def test_anthropic_thinking_budget(server, client):
    # Anthropic's thinking.budget_tokens is the same budget
    chat = client.chat.completions.create(model="m", messages=ASK, max_tokens=40, temperature=0,
                                          extra_body={"max_reasoning_tokens": 6}).choices[0].message
    body = {"model": "m", "max_tokens": 40, "temperature": 0, "messages": ASK,
            "thinking": {"type": "enabled", "budget_tokens": 6}}
    st, _, b = server.request("POST", "/v1/messages", body)
    assert st == 200, b
    think = [c["thinking"] for c in b["content"] if c["type"] == "thinking"]
    text = [c["text"] for c in b["content"] if c["type"] == "text"]
    assert think == [chat.model_extra["reasoning_content"]]
    assert text == [chat.content]
    st, _, b = server.request("POST", "/v1/messages", {**body, "thinking": {"type": "disabled"}})
    assert st == 200 and not [c for c in b["content"] if c["type"] == "thinking" and c["thinking"]]
    for bad in ({"type": "enabled"}, {"type": "on"}, "yes", {"type": "enabled", "budget_tokens": -1}):
        st, _, b = server.request("POST", "/v1/messages", {**body, "thinking": bad})
        assert st == 400 and b["type"] == "error" and "thinking" in b["error"]["message"], b
    st, _, b = server.request("POST", "/v1/messages", {**body, "thinking": {"type": "enabled",
                                                                           "budget_tokens": 10 ** 6}})
    assert st == 400 and "thinking.budget_tokens" in b["error"]["message"], b


def _resp_parts(body):
    rs = [p["text"] for it in body["output"] if it["type"] == "reasoning" for p in it["content"]]
    tx = [p["text"] for it in body["output"] if it["type"] == "message" for p in it["content"]]
    return rs, tx


def test_responses_reasoning_budget(server, client):
    # /v1/responses: reasoning.max_tokens is the same budget, the think block
    # is a reasoning item (reasoning_text) before the message
    chat = client.chat.completions.create(model="m", messages=ASK, max_tokens=40, temperature=0,
                                          extra_body={"max_reasoning_tokens": 6}).choices[0].message
    body = {"model": "m", "input": ASK[0]["content"], "max_output_tokens": 40, "temperature": 0,
            "reasoning": {"max_tokens": 6}}
    st, _, b = server.request("POST", "/v1/responses", body)
    assert st == 200, b
    assert b["output"][0]["type"] == "reasoning" and b["output"][0]["id"].startswith("rs_")
    assert _resp_parts(b) == ([chat.model_extra["reasoning_content"]], [chat.content])
    # effort "none" closes the block at once, as budget 0 does
    zero = client.chat.completions.create(model="m", messages=ASK, max_tokens=40, temperature=0,
                                          extra_body={"max_reasoning_tokens": 0}).choices[0].message
    st, _, b = server.request("POST", "/v1/responses", {**body, "reasoning": {"effort": "none"}})
    assert st == 200 and _resp_parts(b) == ([], [zero.content]), b
    # the other efforts are accepted (through the SDK too) and change nothing
    free = client.chat.completions.create(model="m", messages=ASK, max_tokens=40, temperature=0).choices[0].message
    for effort in ("minimal", "low", "medium", "high"):
        r = client.responses.create(model="m", input=ASK[0]["content"], max_output_tokens=40, temperature=0,
                                    reasoning={"effort": effort})
        assert r.output_text == free.content
        assert [p.text for it in r.output if it.type == "reasoning" for p in it.content] == \
            [free.model_extra["reasoning_content"]]
    for bad, param in (({"effort": "max"}, "reasoning.effort"), ("high", "reasoning"),
                       ({"max_tokens": "a"}, "reasoning.max_tokens"),
                       ({"max_tokens": -1}, "reasoning.max_tokens"),
                       ({"max_tokens": 10 ** 6}, "reasoning.max_tokens")):
        st, _, b = server.request("POST", "/v1/responses", {**body, "reasoning": bad})
        assert st == 400 and b["error"]["param"] == param, (bad, b)


def test_responses_reasoning_streamed(client):
    kw = dict(model="m", input=ASK[0]["content"], max_output_tokens=40, temperature=0,
              extra_body={"reasoning": {"max_tokens": 5}})
    whole = client.responses.create(**kw)
    deltas, done, items = "", None, []
    for ev in client.responses.create(stream=True, **kw):
        if ev.type == "response.reasoning_text.delta":
            deltas += ev.delta
        elif ev.type == "response.reasoning_text.done":
            done = ev.text
        elif ev.type == "response.output_item.done":
            items.append(ev.item)
        elif ev.type == "response.completed":
            final = ev.response
    rs = [p.text for it in whole.output if it.type == "reasoning" for p in it.content]
    assert rs and deltas == done == rs[0]
    assert [it.id for it in items] == [it.id for it in final.output]  # (ids derive from the response id)
    assert [it.type for it in final.output] == [it.type for it in whole.output] == ["reasoning", "message"]
    assert final.output_text == whole.output_text
