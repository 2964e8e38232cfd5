"""Reasoning on /v1/chat/completions with the official `openai` client, on
a copy of SmolLM2 whose chat template thinks (Qwen3-style: the generation
prompt opens <think>, `enable_thinking: false` closes it at once).  The
`grammar` extension fixes the output so the split is exact: the think
block goes to message.reasoning_content (delta.reasoning_content when
streaming), the rest to content; chat_template_kwargs reach the template."""
import numpy as np  # noqa: F401  (gguf needs it)
import openai
import pytest

from conftest import model_path
from serverlib import Server

gguf = pytest.importorskip("gguf")

THINKING = (
    "{%- for m in messages %}{{ '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}{% endfor %}"
    "{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and not enable_thinking %}{{ '<think>\\n\\n</think>\\n\\n' }}"
    "{%- else %}{{ '<think>\\n' }}{%- endif %}{%- endif %}")


def with_template(src, dst, template):
    """A copy of GGUF file src with tokenizer.chat_template replaced."""
    r = gguf.GGUFReader(src)
    arch = bytes(r.fields["general.architecture"].parts[-1]).decode()
    w = gguf.GGUFWriter(str(dst), arch)
    for k, f in r.fields.items():
        if k.startswith("GGUF.") or k in ("general.architecture", "tokenizer.chat_template"):
            continue
        vt = f.types[0]
        if vt == gguf.GGUFValueType.ARRAY:
            st = f.types[-1]
            if st == gguf.GGUFValueType.STRING:
                val = [bytes(f.parts[i]).decode("utf-8", "surrogateescape") for i in f.data]
            else:
                val = [f.parts[i].tolist()[0] for i in f.data]
            w.add_key_value(k, val, vt, sub_type=st)
        elif vt == gguf.GGUFValueType.STRING:
            w.add_key_value(k, bytes(f.parts[f.data[0]]).decode("utf-8", "surrogateescape"), vt)
        else:
            w.add_key_value(k, f.parts[f.data[0]].tolist()[0], vt)
    w.add_key_value("tokenizer.chat_template", template, gguf.GGUFValueType.STRING)
    for t in r.tensors:
        w.add_tensor(t.name, t.data, raw_shape=t.data.shape, raw_dtype=t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    src = model_path("smollm2-135m")
    d = tmp_path_factory.mktemp("think")
    with_template(src, d / "think.gguf", THINKING)
    s = ServerAt(d / "think.gguf")
    yield s
    assert s.stop() == 0


def ServerAt(path):
    import serverlib
    old = serverlib.MODELS
    serverlib.MODELS = path.parent
    try:
        return Server("-c", "1024", "-np", "4", model=path.stem)
    finally:
        serverlib.MODELS = old


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.base + "/v1", api_key="x", max_retries=0, timeout=120)


ASK = [{"role": "user", "content": "What is 2 + 2?"}]
G = 'root ::= "Two plus two, " [a-z ]{0,8} "." "</think>" "\\n\\nThe answer is 4."'


def test_reasoning_split(client):
    r = client.chat.completions.create(model="m", messages=ASK, max_tokens=60, temperature=0.8, seed=3,
                                       extra_body={"grammar": G})
    m = r.choices[0].message
    assert m.content == "The answer is 4."
    rc = m.model_extra.get("reasoning_content")
    assert rc.startswith("Two plus two, ") and rc.endswith(".") and "</think>" not in rc
    assert r.choices[0].finish_reason == "stop"


def test_reasoning_streamed(client):
    kw = dict(model="m", messages=ASK, max_tokens=60, temperature=0.8, seed=3, extra_body={"grammar": G})
    whole = client.chat.completions.create(**kw).choices[0].message
    content, reasoning = "", ""
    for ck in client.chat.completions.create(stream=True, **kw):
        if ck.choices:
            d = ck.choices[0].delta
            content += d.content or ""
            reasoning += (d.model_extra or {}).get("reasoning_content") or ""
    assert content == whole.content
    assert reasoning == whole.model_extra["reasoning_content"]


def test_template_kwargs(server, client):
    def prompt(**kw):
        st, _, b = server.request("POST", "/tokenize", {"messages": ASK, **kw})
        assert st == 200
        st, _, d = server.request("POST", "/detokenize", {"tokens": b["tokens"]})
        return d["content"]
    assert prompt().endswith("<think>\n")
    assert prompt(chat_template_kwargs={"enable_thinking": False}).endswith("<think>\n\n</think>\n\n")
    # thinking off: the prompt closed the block, so all output is content
    r = client.chat.completions.create(model="m", messages=ASK, max_tokens=20, temperature=0.0,
                                       extra_body={"grammar": 'root ::= "The answer is 4."',
                                                   "chat_template_kwargs": {"enable_thinking": False}})
    m = r.choices[0].message
    assert m.content == "The answer is 4."
    assert not m.model_extra.get("reasoning_content")
    with pytest.raises(openai.BadRequestError) as ei:
        client.chat.completions.create(model="m", messages=ASK, max_tokens=5,
                                       extra_body={"chat_template_kwargs": [1]})
    assert ei.value.body["param"] == "chat_template_kwargs" or \
        ei.value.body.get("error", {}).get("param") == "chat_template_kwargs"
