#!/usr/bin/env python3
"""Run the NumPy reference forward pass on a GGUF model (see refmodel.py).

  forward.py --model PATH --tokens 1,2,3 [--greedy N] [--out-logits F.npy]
             [--all-logits F.npy] [--json] [--cache]

--out-logits   final-prompt-position logits, float32 (n_vocab,)
--all-logits   logits at every prompt position, float32 (n_tokens, n_vocab)
--greedy N     N argmax tokens with the KV cache
--json         print {"prompt_tokens", "greedy", "top5_last",
               "top5_last_logits"} as one JSON line on stdout
--prompt TEXT  instead of --tokens: tokenize with the Hugging Face tokenizer
               read from the GGUF (slow to load; needs transformers)
--cache        keep dequantized weights in /tmp/redline-refcache/*.npz
"""

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import refmodel  # noqa: E402  (first: it sets the BLAS thread count)

import numpy as np  # noqa: E402


def parse_tokens(s: str):
    try:
        toks = [int(t) for t in s.replace(" ", "").split(",") if t != ""]
    except ValueError:
        raise SystemExit(f"forward.py: bad --tokens value {s!r}")
    if not toks:
        raise SystemExit("forward.py: --tokens is empty")
    return toks


def hf_tokenize(model_path: str, text: str, add_bos: bool):
    from transformers import AutoTokenizer
    d, name = os.path.split(os.path.abspath(model_path))
    tok = AutoTokenizer.from_pretrained(d, gguf_file=name)
    return tok(text, add_special_tokens=add_bos)["input_ids"]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--tokens", help="comma-separated token ids")
    src.add_argument("--prompt", help="text, tokenized with the HF tokenizer")
    ap.add_argument("--no-bos", action="store_true", help="with --prompt: no BOS")
    ap.add_argument("--greedy", type=int, default=0, metavar="N")
    ap.add_argument("--out-logits", metavar="FILE.npy")
    ap.add_argument("--all-logits", metavar="FILE.npy")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--cache", action="store_true")
    a = ap.parse_args(argv)

    t0 = time.time()
    model = refmodel.Model(a.model, use_disk_cache=a.cache)
    t_load = time.time() - t0
    tokens = parse_tokens(a.tokens) if a.tokens else hf_tokenize(a.model, a.prompt, not a.no_bos)

    t0 = time.time()
    cache = model.new_cache()
    if a.all_logits:
        all_l = model.forward(tokens, cache, all_logits=True)
        np.save(a.all_logits, all_l.astype(np.float32))
        last = all_l[-1]
    else:
        last = model.forward(tokens, cache)
    if a.out_logits:
        np.save(a.out_logits, last.astype(np.float32))
    t_prompt = time.time() - t0

    t0 = time.time()
    greedy = []
    logits = last
    for i in range(a.greedy):
        t = int(np.argmax(logits))
        greedy.append(t)
        if i + 1 < a.greedy:
            logits = model.forward([t], cache)
    t_gen = time.time() - t0

    top5 = np.argsort(-last, kind="stable")[:5]
    res = {
        "prompt_tokens": [int(t) for t in tokens],
        "greedy": greedy,
        "top5_last": [int(t) for t in top5],
        "top5_last_logits": [float(last[t]) for t in top5],
    }
    print(f"forward.py: {model.hp.arch} load {t_load:.2f}s prompt({len(tokens)}) "
          f"{t_prompt:.2f}s greedy({a.greedy}) {t_gen:.2f}s", file=sys.stderr)
    if a.json:
        print(json.dumps(res))
    else:
        print("prompt_tokens:", " ".join(map(str, res["prompt_tokens"])))
        print("top5_last:", ", ".join(f"{t}:{l:.4f}" for t, l in
                                      zip(res["top5_last"], res["top5_last_logits"])))
        if a.greedy:
            print("greedy:", " ".join(map(str, greedy)))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (ValueError, OSError, KeyError) as e:
        raise SystemExit(f"forward.py: {e}")
