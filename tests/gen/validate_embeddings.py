#!/usr/bin/env python3
"""Compare redline's /v1/embeddings with llama.cpp's llama-embedding on the
same files and texts.  A bench tool, not a CI test: it needs llama-embedding
(built from the pinned sdist, e.g. cmake --build BUILD --target
llama-embedding) and a built `redline`.

  tests/gen/validate_embeddings.py [--llama-bin DIR] [--preset real|tiny]
        [--dir /tmp/embd-validate] [--smollm2 models/smollm2-135m.gguf]
        [--json OUT.json]

Files: random-weight bert files from tests/gen/randbert.py at --preset
(real = bge-small's shape: 12 layers, n_embd 384, 12 heads, n_ff 1536,
context 512, the bge WordPiece vocabulary), one per pooling type (cls, mean,
last), F16; and the SmolLM2 decoder (no pooling key: redline pools by mean,
llama-embedding is given --pooling mean).
Texts: TEXTS below (short and long, up to ~330 WordPiece tokens, with
punctuation, accents and numbers), tokenized by each program itself (so the
comparison covers WordPiece/BPE tokenization and the BOS/[CLS]/[SEP] rules
too).  llama-embedding runs with -c/-b/-ub 512 (bert: its position table has
512 rows; llama.cpp aborts beyond it) or 2048 (SmolLM2), -t 2,
--embd-normalize 2 (L2) and --embd-output-format json (7 decimals);
redline serve -t 2 answers a POST /v1/embeddings with all texts as a list.
--oracle llama-server instead asks llama.cpp's llama-server (--embeddings,
the same -c/-b/-ub/-t and --pooling; it L2-normalises its /v1/embeddings
answer) the same request.
Reported per file: the cosine of each text's two vectors, min and mean, and
the prompt tokens each counted (llama-server's usage; llama-embedding prints
none).
"""

import argparse
import json
import os
import subprocess
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import randbert  # noqa: E402

import numpy as np  # noqa: E402

TEXTS = [
    "Hello world",
    "The quick brown fox jumps over the lazy dog.",
    "Embeddings map text to vectors; similar texts get similar vectors.",
    "Café au lait costs 3.50 euros in Zürich, but naïve tourists pay more!",
    "In 1905 Albert Einstein published four papers that changed physics: on the photoelectric "
    "effect, Brownian motion, special relativity and the equivalence of mass and energy.",
    " ".join(["The committee met on Tuesday to discuss the budget for the new library, and "
              "members agreed that it should open in the spring with books, staff and a garden."] * 8),
]


def llama_embed(bin_dir, path, texts, pooling=None, ctx=2048):
    c = str(ctx)
    cmd = [os.path.join(bin_dir, "llama-embedding"), "-m", path, "-p", "\n".join(texts),
           "-c", c, "-b", c, "-ub", c, "-t", "2", "--embd-normalize", "2",
           "--embd-output-format", "json"]
    if pooling:
        cmd += ["--pooling", pooling]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    if p.returncode != 0:
        raise RuntimeError(f"llama-embedding failed: {p.stderr[-2000:]}")
    out = p.stdout[p.stdout.index("{"):]
    return [d["embedding"] for d in json.loads(out)["data"]], None


def free_port():
    import socket
    with socket.socket() as so:
        so.bind(("127.0.0.1", 0))
        return so.getsockname()[1]


def serve_embed(cmd, port, texts):
    """Starts a server (cmd), waits for /health, POSTs /v1/embeddings."""
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        base = f"http://127.0.0.1:{port}"
        for _ in range(1200):
            try:
                with urllib.request.urlopen(base + "/health", timeout=5) as r:
                    if r.status == 200:
                        break
            except Exception:
                time.sleep(0.1)
        req = urllib.request.Request(base + "/v1/embeddings", method="POST",
                                     data=json.dumps({"input": texts, "model": "x"}).encode())
        with urllib.request.urlopen(req, timeout=1800) as r:
            body = json.loads(r.read())
        return [d["embedding"] for d in body["data"]], body["usage"]["prompt_tokens"]
    finally:
        proc.terminate()
        proc.wait(30)


def redline_embed(path, texts):
    port = free_port()
    cmd = [os.path.join(ROOT, "build", "redline"), "serve", "-m", path, "--host", "127.0.0.1",
           "--port", str(port), "-t", "2", "-c", "2048"]
    return serve_embed(cmd, port, texts)


def llama_server_embed(bin_dir, path, texts, pooling=None, ctx=2048):
    port, c = free_port(), str(ctx)
    cmd = [os.path.join(bin_dir, "llama-server"), "-m", path, "--host", "127.0.0.1", "--port", str(port),
           "--embeddings", "-c", c, "-b", c, "-ub", c, "-t", "2"]
    if pooling:
        cmd += ["--pooling", pooling]
    return serve_embed(cmd, port, texts)


def cos(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--llama-bin", default=os.environ.get("LLAMA_CPP_BIN", "/work/llama-embd-build/bin"))
    ap.add_argument("--preset", default="real", choices=("real", "tiny"))
    ap.add_argument("--dir", default="/tmp/embd-validate")
    ap.add_argument("--smollm2", default=os.path.join(ROOT, "models", "smollm2-135m.gguf"))
    ap.add_argument("--oracle", default="llama-embedding", choices=("llama-embedding", "llama-server"),
                    help="llama.cpp program to compare with (llama-server: its /v1/embeddings "
                         "with --embeddings)")
    ap.add_argument("--json")
    a = ap.parse_args(argv)
    os.makedirs(a.dir, exist_ok=True)
    assets = randbert.assets_dir()
    runs = []
    for i, pooling in enumerate(("cls", "mean", "last")):
        f = os.path.join(a.dir, f"bert-{a.preset}-{pooling}.gguf")
        if not os.path.exists(f):
            randbert.generate(f, assets, a.preset, seed=100 + i, pooling=pooling)
        runs.append((f"bert {a.preset} pooling={pooling}", f, None, 512))
    if a.smollm2 and os.path.exists(a.smollm2):
        runs.append(("smollm2-135m (Q4_1) pooling=mean", a.smollm2, "mean", 2048))
    results = []
    for label, f, pool, ctx in runs:
        if a.oracle == "llama-server":
            ll, ll_tok = llama_server_embed(a.llama_bin, f, TEXTS, pool, ctx)
        else:
            ll, ll_tok = llama_embed(a.llama_bin, f, TEXTS, pool, ctx)
        rl, n_tok = redline_embed(f, TEXTS)
        cs = [cos(x, y) for x, y in zip(rl, ll)]
        results.append(dict(label=label, oracle=a.oracle, file=f, cosines=cs, min=min(cs),
                            mean=float(np.mean(cs)), prompt_tokens=n_tok, llama_prompt_tokens=ll_tok))
        toks = f"{n_tok} tokens" + (f", llama.cpp {ll_tok}" if ll_tok is not None else "")
        print(f"{label:40} min cos {min(cs):.7f} mean {np.mean(cs):.7f}  per text "
              + " ".join(f"{c:.7f}" for c in cs) + f"  ({toks})", flush=True)
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(results, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
