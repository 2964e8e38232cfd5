"""Token-exact comparison of redline's tokenizers with Hugging Face.

The oracle is the HF tokenizer that transformers builds from the same GGUF
(AutoTokenizer.from_pretrained(dir, gguf_file=name)).  One exception: the
GGUF converter gives SmolLM2 a plain ByteLevel pre-tokenizer, while the
model's own tokenizer.json (and GGUF's pre = "smollm") splits digits
individually first, so for "smollm" the oracle's pre-tokenizer is set to
Sequence[Digits(individual_digits), ByteLevel] as in SmolLM2's tokenizer.json.

Our side runs build/tools/tokenize_tool once per batch (JSON lines in/out).
Checked per model on tokenizer_corpus.corpus() (>= 2,000 strings):
  - ids, no special tokens added, control tokens not parsed
    (HF: add_special_tokens=False, encode_special_tokens=True);
  - ids with RL_TOK_PARSE_SPECIAL (HF: special tokens matched);
  - BOS/EOS handling (HF: add_special_tokens=True);
  - decode(encode(s)) == s and decode agrees with HF's decode.
"""
import json
import os
import subprocess
import sys

import pytest

from conftest import BUILD, MODELS, model_path

sys.path.insert(0, os.path.dirname(__file__))
from tokenizer_corpus import corpus  # noqa: E402

TOOL = BUILD / "tools" / "tokenize_tool"
TOK_MODELS = ["smollm2-135m", "gemma3-270m", "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"]


def run_tool(model, requests):
    if not TOOL.exists():
        pytest.fail(f"{TOOL} missing (make test-bins)")
    data = "".join(json.dumps(r) + "\n" for r in requests).encode()
    p = subprocess.run([str(TOOL), str(model)], input=data, capture_output=True, timeout=600)
    assert p.returncode == 0, p.stderr.decode()
    out = [json.loads(line) for line in p.stdout.decode().splitlines()]
    assert len(out) == len(requests)
    for o in out:
        assert "error" not in o, o
    return out


class _BareHF:
    """The slice of the transformers tokenizer API these tests use, over a
    bare `tokenizers.Tokenizer`."""

    def __init__(self, tk, bos, add_bos):
        self.backend_tokenizer, self._bos, self._add_bos = tk, bos, add_bos

    def __call__(self, text, add_special_tokens=True):
        ids = self.backend_tokenizer.encode(text, add_special_tokens=False).ids
        return {"input_ids": ([self._bos] if add_special_tokens and self._add_bos else []) + ids}

    def decode(self, ids, skip_special_tokens=False):
        return self.backend_tokenizer.decode(ids, skip_special_tokens=skip_special_tokens)


def hf_tokenizer_without_torch(path, pre):
    """transformers (5.x) needs torch to read a GGUF, which CI does not
    install (its PyPI wheel pulls ~5 GB of CUDA libraries).  For byte-level
    BPE vocabularies with the "smollm" pre-tokenizer, build the same HF
    tokenizer the GGUF converter builds (BPE over the GGUF's tokens and
    merges, ByteLevel decoding, control tokens as special tokens) directly
    with the `tokenizers` library; other models need transformers."""
    import gguf
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    if pre != "smollm":
        pytest.skip("an HF oracle for this tokenizer needs transformers with torch")
    r = gguf.GGUFReader(str(path))

    def arr(key):
        f = r.fields[key]
        return [f.parts[i] for i in f.data]

    tokens = [bytes(p).decode("utf-8") for p in arr("tokenizer.ggml.tokens")]
    types = [int(p[0]) for p in arr("tokenizer.ggml.token_type")]
    merges = [tuple(bytes(p).decode("utf-8").split(" ", 1)) for p in arr("tokenizer.ggml.merges")]
    scalar = lambda k, d: int(r.fields[k].parts[r.fields[k].data[0]][0]) if k in r.fields else d
    tk = Tokenizer(models.BPE({t: i for i, t in enumerate(tokens)}, merges, fuse_unk=False,
                              byte_fallback=False))
    tk.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True),
         pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    tk.decoder = decoders.ByteLevel()
    tk.add_special_tokens([AddedToken(t, special=True, normalized=False)
                           for t, ty in zip(tokens, types) if ty == 3])  # CONTROL
    return _BareHF(tk, scalar("tokenizer.ggml.bos_token_id", -1),
                   bool(scalar("tokenizer.ggml.add_bos_token", 0)))


def hf_tokenizer(path, pre):
    transformers = pytest.importorskip("transformers")
    from tokenizers import pre_tokenizers

    try:
        import torch  # noqa: F401  (transformers reads GGUF files with it)
    except ImportError:
        return hf_tokenizer_without_torch(path, pre)
    tok = transformers.AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    if pre == "smollm":
        tok.backend_tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Digits(individual_digits=True),
             pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    return tok


def report(name, texts, ours, theirs, limit=5):
    bad = [i for i in range(len(texts)) if ours[i] != theirs[i]]
    for i in bad[:limit]:
        print(f"{name} mismatch: {texts[i][:160]!r}\n  ours {ours[i][:40]}\n  hf   {theirs[i][:40]}")
    print(f"{name}: {len(bad)} mismatches of {len(texts)}")
    return len(bad)


@pytest.fixture(scope="module")
def texts():
    c = corpus()
    assert len(c) >= 2000
    return c


@pytest.mark.parametrize("name", TOK_MODELS)
def test_matches_hf(name, texts):
    path = model_path(name)
    info = run_tool(path, [{"info": True}])[0]
    hf = hf_tokenizer(path, info["pre"])
    bk = hf.backend_tokenizer

    reqs = [{"encode": t, "flags": 0} for t in texts] + \
           [{"encode": t, "flags": 2} for t in texts] + \
           [{"encode": t, "flags": 1} for t in texts[:200]]
    res = run_tool(path, reqs)
    n = len(texts)
    plain = [r["ids"] for r in res[:n]]
    parsed = [r["ids"] for r in res[n:2 * n]]
    with_bos = [r["ids"] for r in res[2 * n:]]

    bk.encode_special_tokens = True
    hf_plain = [e.ids for e in bk.encode_batch(texts, add_special_tokens=False)]
    bk.encode_special_tokens = False
    hf_parsed = [e.ids for e in bk.encode_batch(texts, add_special_tokens=False)]
    hf_bos = [hf(t, add_special_tokens=True)["input_ids"] for t in texts[:200]]

    bad = report(f"{name} plain", texts, plain, hf_plain)
    bad += report(f"{name} parse-special", texts, parsed, hf_parsed)
    bad += report(f"{name} add-special", texts[:200], with_bos, hf_bos)
    assert info["add_bos"] == (hf_bos[0][:1] == [info["bos"]] and hf_bos[0] != hf_plain[0])

    # decode: round trip and agreement with HF
    dec = run_tool(path, [{"decode": ids} for ids in plain])
    ours_text = [d["text"] for d in dec]
    hf_text = [hf.decode(ids, skip_special_tokens=False) for ids in hf_plain]
    bad += report(f"{name} decode-vs-hf", texts, ours_text, hf_text)
    # SmolLM2 lacks 21 byte tokens (both tokenizers drop those bytes)
    round_trip = [t for t, d, h in zip(texts, ours_text, hf_text) if h == t]
    assert len(round_trip) > 0.95 * len(texts)
    bad += report(f"{name} round-trip", round_trip,
                  [d for t, d, h in zip(texts, ours_text, hf_text) if h == t], round_trip)
    assert bad == 0


def test_bare_oracle_equals_transformers(texts):
    """The torch-free oracle used in CI is the tokenizer transformers builds."""
    pytest.importorskip("torch")
    path = model_path("smollm2-135m")
    full = hf_tokenizer(path, "smollm").backend_tokenizer
    bare = hf_tokenizer_without_torch(path, "smollm").backend_tokenizer
    for special in (True, False):
        full.encode_special_tokens = bare.encode_special_tokens = special
        a = [e.ids for e in full.encode_batch(texts, add_special_tokens=False)]
        b = [e.ids for e in bare.encode_batch(texts, add_special_tokens=False)]
        assert a == b


def test_tokenize_cli(build):
    path = model_path("smollm2-135m")
    p = subprocess.run([str(build / "redline"), "tokenize", "-m", str(path), "--ids", "-p",
                        "Hello world"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "[19556, 905]"
    p = subprocess.run([str(build / "redline"), "tokenize", "-m", str(path), "--special", "-p",
                        "<|im_start|>hi"], capture_output=True, text=True)
    assert p.returncode == 0 and "'<|im_start|>'" in p.stdout and p.stdout.count("\n") == 2
    p = subprocess.run([str(build / "redline"), "tokenize", "-m", str(path), "--decode",
                        "19556,905"], capture_output=True, text=True)
    assert p.returncode == 0 and p.stdout == "Hello world\n"
    p = subprocess.run([str(build / "redline"), "tokenize", "-m", str(path), "--decode",
                        "99999999"], capture_output=True, text=True)
    assert p.returncode != 0 and "bad token id" in p.stderr
    p = subprocess.run([str(build / "redline"), "tokenize", "-m", str(MODELS / "absent.gguf"),
                        "-p", "x"], capture_output=True, text=True)
    assert p.returncode != 0 and p.stderr.strip()
