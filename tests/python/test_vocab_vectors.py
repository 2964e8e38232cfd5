"""llama.cpp's tokenizer test vectors against redline's tokenizer.

The pinned llama-cpp-python sdist ships, next to each vocab-only GGUF
models/ggml-vocab-NAME.gguf, a file of inputs (.inp) and the token ids
llama.cpp's tokenizer must produce for them (.out); scripts/fetch-
llamacpp-assets extracts them (the `llamacpp_assets` fixture).  Layout, as
llama.cpp's tests/test-tokenizer-0.cpp reads it:
  .inp  the inputs, each followed by "\\n__ggml_vocab_test__\\n"
  .out  one line per input: its token ids separated by spaces (possibly
        with a leading space; an empty line is an empty tokenization)
Each input is tokenized without adding BOS/EOS and without parsing special
tokens (test-tokenizer-0: add_special = false, parse_special = false), here
by build/tools/tokenize_tool (flags 0), and must give exactly the expected ids.
One test per vocabulary; a failure names the first mismatching input.
"""
import json
import subprocess

import pytest

from conftest import BUILD, llamacpp_assets_dir

TOOL = BUILD / "tools" / "tokenize_tool"
SEP = "\n__ggml_vocab_test__\n"
# vocabularies with test vectors in llama-cpp-python 0.3.16 (checked below)
VOCABS = ["bert-bge", "command-r", "deepseek-coder", "deepseek-llm", "falcon", "gpt-2",
          "llama-bpe", "llama-spm", "mpt", "phi-3", "qwen2", "refact", "starcoder"]


def read_vectors(inp_path, out_path):
    """[(text, [ids])] in file order."""
    raw = inp_path.read_bytes().decode("utf-8")
    texts = []
    pos = 0
    while pos < len(raw):
        nxt = raw.find(SEP, pos)
        if nxt < 0:
            texts.append(raw[pos:])
            break
        texts.append(raw[pos:nxt])
        pos = nxt + len(SEP)
    lines = out_path.read_bytes().decode("utf-8").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    assert len(texts) == len(lines), f"{inp_path.name}: {len(texts)} inputs, {len(lines)} outputs"
    return [(t, [int(x) for x in line.split()]) for t, line in zip(texts, lines)]


def test_vocab_list_complete(llamacpp_assets):
    have = sorted(p.name[len("ggml-vocab-"):-len(".gguf.inp")]
                  for p in llamacpp_assets.glob("ggml-vocab-*.gguf.inp"))
    assert have == sorted(VOCABS)


@pytest.mark.parametrize("name", VOCABS)
def test_vocab_vectors(name):
    d = llamacpp_assets_dir()
    gguf, inp, out = (d / f"ggml-vocab-{name}.gguf{ext}" for ext in ("", ".inp", ".out"))
    vectors = read_vectors(inp, out)
    assert len(vectors) > 10
    if not TOOL.exists():
        pytest.fail(f"{TOOL} missing (make test-bins)")
    req = "".join(json.dumps({"encode": t, "flags": 0}) + "\n" for t, _ in vectors).encode()
    p = subprocess.run([str(TOOL), str(gguf)], input=req, capture_output=True, timeout=600)
    assert p.returncode == 0, f"tokenize_tool {gguf.name}: exit {p.returncode}: {p.stderr.decode().strip()}"
    got = [json.loads(line) for line in p.stdout.decode().splitlines()]
    assert len(got) == len(vectors)
    bad = []
    for (text, want), g in zip(vectors, got):
        ids = g.get("ids")
        if ids != want:
            bad.append((text, want, g.get("error", ids)))
    if bad:
        lines = [f"  {text[:60]!r}\n    expected {want[:24]}\n    redline  {str(ids)[:200]}"
                 for text, want, ids in bad[:6]]
        pytest.fail(f"{name}: {len(bad)} of {len(vectors)} vectors differ (first {len(lines)}):\n"
                    + "\n".join(lines))
