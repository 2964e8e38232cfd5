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

    tests/tools/vocab_check.py [--dir DIR] [--tool PATH] [NAME ...]
"""
import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_DIR = os.path.join(
    ROOT, "bench", ".cache", "llama-cpp-python-0.3.16", "vendor", "llama.cpp", "models")
SEP = "\n__ggml_vocab_test__\n"


def read_vectors(base):
    raw = open(base + ".inp", encoding="utf-8", newline="").read()
    inputs, pos = [], 0
    while pos < len(raw):  # as read_tests: a trailing separator ends the list
        nxt = raw.find(SEP, pos)
        if nxt < 0:
            inputs.append(raw[pos:])
            break
        inputs.append(raw[pos:nxt])
        pos = nxt + len(SEP)
    outs = open(base + ".out", encoding="utf-8").read().split("\n")
    if outs and outs[-1] == "":
        outs.pop()
    if len(inputs) != len(outs):
        raise SystemExit(f"{base}: {len(inputs)} inputs but {len(outs)} outputs")
    return inputs, [[int(t) for t in o.split()] for o in outs]


def check(tool, base):
    inputs, want = read_vectors(base)
    req = "".join(json.dumps({"encode": s, "flags": 0}) + "\n" for s in inputs).encode()
    p = subprocess.run([tool, base], input=req, capture_output=True, timeout=600)
    if p.returncode != 0:
        return 0, len(inputs), "load: " + p.stderr.decode(errors="replace").strip()
    got = [json.loads(line) for line in p.stdout.decode().splitlines()]
    ok, first = 0, ""
    for s, w, g in zip(inputs, want, got):
        ids = g.get("ids")
        if ids == w:
            ok += 1
        elif not first:
            first = f"{s[:60]!r}: want {w[:16]} got {ids[:16] if ids is not None else g}"
    return ok, len(inputs), first


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default=DEFAULT_DIR)
    ap.add_argument("--tool", default=os.path.join(ROOT, "build", "tools", "tokenize_tool"))
    ap.add_argument("names", nargs="*")
    a = ap.parse_args()
    names = a.names or sorted(
        f[len("ggml-vocab-"):-len(".gguf.inp")] for f in os.listdir(a.dir)
        if f.startswith("ggml-vocab-") and f.endswith(".gguf.inp"))
    bad = 0
    for name in names:
        ok, total, first = check(a.tool, os.path.join(a.dir, f"ggml-vocab-{name}.gguf"))
        bad += ok != total
        print(f"{name:16s} {ok:3d}/{total:<3d} {first}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
