#!/usr/bin/env python3
"""Checks redline's tokenizer against llama.cpp's vocab test vectors.

For each ggml-vocab-NAME.gguf that has NAME.gguf.inp / NAME.gguf.out next to
it (inputs separated by "\\n__ggml_vocab_test__\\n", one line of
space-separated expected ids per input, as llama.cpp's
tests/test-tokenizer-0.cpp reads them), every input is encoded by
build/tools/tokenize_tool with flags 0 (no BOS/EOS added, control tokens
not parsed: test-tokenizer-0's add_special = false, parse_special = false)
and compared with the expected ids.  Prints per file: passed / total and
the first mismatch.  Exit status 1 if any vector fails.

    tests/tools/vocab_check.py [--dir DIR] [--tool PATH] [--hf] [NAME ...]
"""
import argparse
import json
import os
import pathlib
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))  # test_vocab_vectors, tokenizer_corpus
DEFAULT_DIR = os.path.join(
    ROOT, "bench", ".cache", "llama-cpp-python-0.3.16", "vendor", "llama.cpp", "models")


def read_vectors(base):
    """(inputs, expected ids) of base.inp / base.out, read as the pytest
    test_vocab_vectors reads them (one parser for both)."""
    from test_vocab_vectors import read_vectors as read_pairs
    pairs = read_pairs(pathlib.Path(base + ".inp"), pathlib.Path(base + ".out"))
    return [t for t, _ in pairs], [ids for _, ids in pairs]


def encode(tool, base, texts):
    """ids per text (None where redline answered an error), or an error string."""
    req = "".join(json.dumps({"encode": s, "flags": 0}) + "\n" for s in texts).encode()
    p = subprocess.run([tool, base], input=req, capture_output=True, timeout=600)
    if p.returncode != 0:
        return "load: " + p.stderr.decode(errors="replace").strip()
    return [json.loads(line).get("ids") for line in p.stdout.decode().splitlines()]


def compare(texts, want, got):
    if isinstance(got, str):
        return 0, got
    ok, first = 0, ""
    for s, w, g in zip(texts, want, got):
        if g == w:
            ok += 1
        elif not first and g is None:
            first = f"{s[:60]!r}: error"
        elif not first:
            k = next((i for i, (x, y) in enumerate(zip(w, g)) if x != y), min(len(w), len(g)))
            k = max(0, k - 4)
            first = f"{s[:60]!r}: ids from [{k}]: want {w[k:k + 12]} got {g[k:k + 12]}"
    return ok, first


def check(tool, base):
    inputs, want = read_vectors(base)
    ok, first = compare(inputs, want, encode(tool, base, inputs))
    return ok, len(inputs), first


# ---- Hugging Face oracles (--hf) ----

LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
          r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2 = LLAMA3.replace(r"\p{N}{1,3}", r"\p{N}")
DSL_LETTERS = (
    r"\s?[A-Za-z\x{B5}\x{C0}-\x{D6}\x{D8}-\x{F6}\x{F8}-\x{1BA}\x{1BC}-\x{1BF}\x{1C4}-\x{293}"
    r"\x{295}-\x{2AF}\x{370}-\x{373}\x{376}\x{377}\x{37B}-\x{37D}\x{37F}\x{386}\x{388}-\x{38A}"
    r"\x{38C}\x{38E}-\x{3A1}\x{3A3}-\x{3F5}\x{3F7}-\x{481}\x{48A}-\x{52F}\x{531}-\x{556}"
    r"\x{10A0}-\x{10C5}\x{13A0}-\x{13F5}\x{13F8}-\x{13FD}\x{1C90}-\x{1CBA}\x{1CBD}-\x{1CBF}"
    r"\x{1D00}-\x{1D2B}\x{1D6B}-\x{1D77}\x{1D79}-\x{1D9A}\x{1E00}-\x{1F15}\x{1F18}-\x{1F1D}"
    r"\x{1F20}-\x{1F45}\x{1F48}-\x{1F4D}\x{1F50}-\x{1F57}\x{1F59}\x{1F5B}\x{1F5D}"
    r"\x{1F5F}-\x{1F7D}\x{1F80}-\x{1FB4}\x{1FB6}-\x{1FBC}\x{1FBE}\x{1FC2}-\x{1FC4}"
    r"\x{1FC6}-\x{1FCC}\x{1FD0}-\x{1FD3}\x{1FD6}-\x{1FDB}\x{1FE0}-\x{1FEC}\x{1FF2}-\x{1FF4}"
    r"\x{1FF6}-\x{1FFC}\x{2102}\x{2107}\x{210A}-\x{2113}\x{2115}\x{2119}-\x{211D}\x{2124}"
    r"\x{2126}\x{2128}\x{212A}-\x{212D}\x{212F}-\x{2134}\x{2139}\x{213C}-\x{213F}"
    r"\x{2145}-\x{2149}\x{214E}\x{2183}\x{2184}\x{2C00}-\x{2C7B}\x{2C7E}-\x{2CE4}"
    r"\x{2CEB}-\x{2CEE}\x{2CF2}\x{2CF3}\x{A640}-\x{A66D}\x{A680}-\x{A69B}\x{A722}-\x{A76F}"
    r"\x{A771}-\x{A787}\x{A78B}-\x{A78E}\x{AB70}-\x{ABBF}\x{FB00}-\x{FB06}\x{FB13}-\x{FB17}"
    r"\x{FF21}-\x{FF3A}\x{FF41}-\x{FF5A}\x{10400}-\x{1044F}\x{104B0}-\x{104D3}"
    r"\x{104D8}-\x{104FB}\x{10C80}-\x{10CB2}\x{10CC0}-\x{10CF2}\x{118A0}-\x{118DF}"
    r"\x{1E900}-\x{1E943}]+")
DS_CJK = r"[\x{4E00}-\x{9FA5}\x{800}-\x{4E00}\x{AC00}-\x{D7FF}]+"
EDGES = ["1/2 \u00bd \u00bc \u00b2 \u017e 's 'S '\u017f", "C\u1eeda Vi\u1ec7t Cu\u031b\u0309a",
         "   \n  \n\t\t x  ", "x" * 300 + " " * 300 + "\u20ac", "\r\n\r\n\n", "[CLS] hello [SEP]",
         "x" * 101, "\u0130stanbul \u01c5 \ufb01 \u1e9e \u2126 \u212a", "\uac00\ud7a3 \u037e\u0387`",
         "\u00ad\u200b\u200d\ufeff\u2060x\x00y\ufffdz \u00bfQu\u00e9? \u00abx\u00bb \u2014 \u2026"]


def hf_tokenizer(base, name):
    import gguf
    from tokenizers import AddedToken, Regex, Tokenizer, models, normalizers
    from tokenizers import pre_tokenizers as pt

    def iso(p):
        return pt.Split(Regex(p), behavior="isolated")

    def bl(regex):
        return pt.ByteLevel(add_prefix_space=False, use_regex=regex)

    digits = pt.Digits(individual_digits=True)
    pre = {
        "gpt-2": [bl(True)], "mpt": [bl(True)],
        "llama-bpe": [iso(LLAMA3), bl(False)], "qwen2": [iso(QWEN2), bl(False)],
        "starcoder": [digits, bl(True)], "refact": [digits, bl(True)],
        "command-r": [digits, bl(True)],
        "falcon": [pt.Punctuation(behavior="contiguous"), bl(True),
                   pt.Digits(individual_digits=False), iso("[0-9][0-9][0-9]")],
        "deepseek-llm": [iso("[\r\n]"), iso(DSL_LETTERS),
                         iso(r"\s?[!-/:-~\x{FF01}-\x{FF0F}\x{FF1A}-\x{FF5E}\x{2018}-\x{201F}"
                             r"\x{3000}-\x{3002}]+"),
                         iso(r"\s+$"), iso(DS_CJK), iso(r"\p{N}+"), bl(False)],
        "deepseek-coder": [iso("[\r\n]"), iso(r"\s?\p{L}+"), iso(r"\s?\p{P}+"), iso(DS_CJK),
                           iso(r"\p{N}"), bl(False)],
    }
    r = gguf.GGUFReader(base)

    def arr(k):
        f = r.fields[k]
        return [f.parts[i] for i in f.data]

    tokens = [bytes(p).decode("utf-8") for p in arr("tokenizer.ggml.tokens")]
    types = [int(p[0]) for p in arr("tokenizer.ggml.token_type")]
    if name == "bert-bge":  # undo the converter's spelling: "\u2581x" -> "x", "x" -> "##x"
        vocab = {(t[1:] if t.startswith("\u2581") else
                  t if t.startswith("[") and t.endswith("]") else "##" + t): i
                 for i, t in enumerate(tokens)}
        tk = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]", max_input_chars_per_word=100))
        tk.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True,
                                                   strip_accents=None, lowercase=True)
        tk.pre_tokenizer = pt.BertPreTokenizer()
    elif name in pre:
        merges = [tuple(bytes(p).decode("utf-8").split(" ", 1))
                  for p in arr("tokenizer.ggml.merges")]
        tk = Tokenizer(models.BPE({t: i for i, t in enumerate(tokens)}, merges, fuse_unk=False,
                                  byte_fallback=False, ignore_merges=name == "llama-bpe"))
        tk.pre_tokenizer = pt.Sequence(pre[name])
    else:
        return None
    tk.add_special_tokens([AddedToken(t, special=True, normalized=False)
                           for t, ty in zip(tokens, types) if ty == 3])
    users = [AddedToken(t, special=False, normalized=False) for t, ty in zip(tokens, types) if ty == 4]
    if users:
        tk.add_tokens(users)
    tk.encode_special_tokens = True  # as flags 0: control tokens are text
    return tk


def check_hf(tool, base, name):
    tk = hf_tokenizer(base, name)
    if tk is None:  # SentencePiece files: no HF oracle here
        return None
    inputs, want = read_vectors(base)
    got = [e.ids for e in tk.encode_batch(inputs, add_special_tokens=False)]
    ok, first = compare(inputs, want, got)
    if ok != len(inputs):
        return 0, 1, f"the oracle itself fails the vectors: {first}"
    from tokenizer_corpus import corpus
    texts = corpus() + EDGES
    want = [e.ids for e in tk.encode_batch(texts, add_special_tokens=False)]
    ok, first = compare(texts, want, encode(tool, base, texts))
    return ok, len(texts), first


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default=DEFAULT_DIR)
    ap.add_argument("--tool", default=os.path.join(ROOT, "build", "tools", "tokenize_tool"))
    ap.add_argument("--hf", action="store_true", help="also compare with HF on a corpus")
    ap.add_argument("names", nargs="*")
    a = ap.parse_args()
    names = a.names or sorted(
        f[len("ggml-vocab-"):-len(".gguf.inp")] for f in os.listdir(a.dir)
        if f.startswith("ggml-vocab-") and f.endswith(".gguf.inp"))
    bad = 0
    for name in names:
        base = os.path.join(a.dir, f"ggml-vocab-{name}.gguf")
        ok, total, first = check(a.tool, base)
        bad += ok != total
        print(f"{name:16s} {ok:3d}/{total:<3d} {first}")
        if a.hf:
            res = check_hf(a.tool, base, name)
            if res is not None:
                ok, total, first = res
                bad += ok != total
                print(f"{'':16s} hf corpus {ok}/{total} {first}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
