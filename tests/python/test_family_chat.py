"""A new user's GGUF of each popular family chats with the right template and
stops at the family's end-of-turn token, through `redline serve` and
`redline run`.

The files are test_arch_random.py's tiny random-weight ones (tests/gen/
randmodel.py): the family's real tokenizer (llama.cpp's vocab GGUFs) and the
chat template its converter writes (llama.cpp's models/templates/: Llama 3.2,
Qwen3, Gemma 2, Phi-3.5, Granite 3.3).  Per family:
  * the prompt the server renders for [system, user] ([user] for Gemma 2,
    whose template refuses a system turn) (POST /tokenize with
    messages, then /detokenize) is byte-identical to jinja2 rendering the
    file's tokenizer.chat_template as Hugging Face's apply_chat_template does
    (test_shipped_templates.render_hf, with the file's BOS/EOS strings; BOS
    first when the file adds one and the template does not write it), and
    ends with the family's assistant header;
  * `redline run -m FILE -p ...` renders the same prompt (its -v token count
    equals the server's for the same user message);
  * a chat completion whose logit_bias forces an end-of-turn token (Llama 3
    <|eot_id|> and <|eom_id|>, Qwen <|im_end|>, Gemma <end_of_turn>, Phi
    <|end|>, Granite <|end_of_text|>) stops there: finish_reason "stop",
    one completion token, empty content; forcing an ordinary token instead
    runs to max_tokens (finish_reason "length").
"""
import re
import subprocess
import sys

import pytest

from conftest import BUILD, ROOT
from serverlib import Server

pytest.importorskip("gguf", reason="the gguf package writes the random-weight files")
from test_arch_random import tiny_model  # noqa: E402
from test_shipped_templates import render_hf  # noqa: E402  (skips without transformers)

sys.path.insert(0, str(ROOT / "tests" / "reference"))
import refmodel  # noqa: E402

# family -> (end-of-turn tokens, what the rendered prompt ends with)
FAMILIES = {
    "llama3": (["<|eot_id|>", "<|eom_id|>"], "<|start_header_id|>assistant<|end_header_id|>\n\n"),
    "qwen3": (["<|im_end|>"], "<|im_start|>assistant\n"),
    "gemma2": (["<end_of_turn>"], "<start_of_turn>model\n"),
    "phi3": (["<|end|>"], "<|assistant|>\n"),
    "granite": (["<|end_of_text|>"], "<|start_of_role|>assistant<|end_of_role|>"),
}
USER = [{"role": "user", "content": "Name a colour."}]
SYS_USER = [{"role": "system", "content": "You are terse."}] + USER


def msgs(name):
    return USER if name == "gemma2" else SYS_USER  # Gemma 2's template raises on a system turn


@pytest.fixture(scope="module", params=list(FAMILIES))
def fam(request):
    path = tiny_model(request.param)
    meta = refmodel.GGUFFile(str(path), keep_arrays=True).meta
    if isinstance(meta["tokenizer.chat_template"], bytes):
        meta["tokenizer.chat_template"] = meta["tokenizer.chat_template"].decode()
    srv = Server("-c", "512", "-np", "1", model=str(path)[:-len(".gguf")])  # an absolute path
    yield request.param, path, meta, srv
    assert srv.stop() == 0


def token_text(meta, key):
    i = meta.get(key)
    return meta["tokenizer.ggml.tokens"][int(i)].decode() if i is not None else ""


def test_server_renders_the_files_template(fam):
    name, _path, meta, srv = fam
    st, _, body = srv.request("POST", "/tokenize", {"messages": msgs(name)})
    assert st == 200, body
    st, _, text = srv.request("POST", "/detokenize", {"tokens": body["tokens"]})
    assert st == 200, text
    want, err = render_hf(meta["tokenizer.chat_template"], token_text(meta, "tokenizer.ggml.bos_token_id"),
                          token_text(meta, "tokenizer.ggml.eos_token_id"), msgs(name), None, True)
    assert err is None, err
    bos = token_text(meta, "tokenizer.ggml.bos_token_id")
    if meta.get("tokenizer.ggml.add_bos_token") and not want.startswith(bos):
        want = bos + want  # the tokenizer adds BOS, as llama.cpp's server does (Phi-3)
    assert text["content"] == want
    assert want.endswith(FAMILIES[name][1]), want


def test_run_renders_the_same_prompt(fam):
    _name, path, _meta, srv = fam
    st, _, body = srv.request("POST", "/tokenize", {"messages": USER})
    assert st == 200, body
    p = subprocess.run([str(BUILD / "redline"), "run", "-m", str(path), "-p", USER[0]["content"], "-n", "2",
                        "--temp", "0", "-v", "-t", "2", "-c", "512"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    m = re.search(r"\[prompt: (\d+) tokens\]", p.stdout + p.stderr)
    assert m, p.stderr
    assert int(m.group(1)) == body["count"]


def chat(srv, name, bias, max_tokens=4):
    st, _, body = srv.request("POST", "/v1/chat/completions",
                              {"messages": msgs(name), "max_tokens": max_tokens, "temperature": 0,
                               "logit_bias": {str(bias): 100}})
    assert st == 200, body
    return body["choices"][0], body["usage"]


def test_generation_stops_at_the_familys_end_of_turn(fam):
    name, _path, meta, srv = fam
    toks = [t.decode("utf-8", "replace") for t in meta["tokenizer.ggml.tokens"]]
    missing = [e for e in FAMILIES[name][0] if e not in toks]
    if missing:  # gemma2 without models/gemma3-270m.gguf gets llama-spm's vocabulary (randmodel.py)
        pytest.skip(f"{name}: the fallback vocabulary has no {missing} (scripts/fetch-model gemma3-270m)")
    for eot in FAMILIES[name][0]:
        choice, usage = chat(srv, name, toks.index(eot))
        assert choice["finish_reason"] == "stop", (eot, choice)
        assert usage["completion_tokens"] == 1 and choice["message"]["content"] == "", (eot, choice, usage)
    plain = next(i for i, t in enumerate(toks) if re.fullmatch(r"[a-z]{4,}", t))
    choice, usage = chat(srv, name, plain)
    assert choice["finish_reason"] == "length" and usage["completion_tokens"] == 4, (toks[plain], choice)
