#!/usr/bin/env python3
"""Random-weight BERT embedding GGUF files, as llama.cpp's converter writes them.

  tests/gen/randbert.py [--preset tiny|real] -o OUT.gguf [--seed N]
        [--pooling mean|cls|last] [--dtype f16|f32] [--causal]

Metadata and the WordPiece vocabulary (30522 tokens, [CLS]/[SEP]/[UNK]/[PAD]/
[MASK] ids) come from llama.cpp's ggml-vocab-bert-bge.gguf (scripts/fetch-
llamacpp-assets), which carries bge-small-en-v1.5's hyperparameters:
  real  bge-small: 12 layers, n_embd 384, 12 heads, n_ff 1536, context 512
  tiny  2 layers, n_embd 64, 4 heads, n_ff 128, context 512 (a few MB, most of
        it the 30522-row embedding)
plus bert.pooling_type (llama.cpp's values: 1 mean, 2 cls, 3 last; bge's own
is cls).  Tensors (names/shapes as llama.cpp loads LLM_ARCH_BERT):
  token_embd, token_types [n_embd, 2], position_embd [n_embd, n_ctx],
  token_embd_norm.{weight,bias}; per layer attn_{q,k,v}.{weight,bias},
  attn_output.{weight,bias}, attn_output_norm.{weight,bias},
  ffn_up.{weight,bias}, ffn_down.{weight,bias}, layer_output_norm.{weight,bias}
2-D weights F16 (or --dtype f32); vectors, position_embd and token_types F32
(as the converter writes them: llama.cpp adds token_types' row 0 as F32).  Weights are Gaussian with
1/sqrt(fan_in) scale, norm weights in [0.6, 1.4], biases N(0, 0.1): random,
not peaked (an embedding has no next-token distribution to shape), but large
enough that every tensor moves the pooled vector.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "reference"))
import refmodel  # noqa: E402  (sets the BLAS thread count before numpy)

import numpy as np  # noqa: E402

import gguf  # noqa: E402

GVT = gguf.GGUFValueType
POOLING = {"mean": 1, "cls": 2, "last": 3}
PRESETS = {
    "tiny": dict(n_embd=64, n_layer=2, n_head=4, n_ff=128),
    "real": dict(n_embd=384, n_layer=12, n_head=12, n_ff=1536),
}


def assets_dir() -> str:
    p = subprocess.run([os.path.join(ROOT, "scripts", "fetch-llamacpp-assets")],
                       capture_output=True, text=True, check=True)
    return p.stdout.strip().splitlines()[-1]


def generate(out: str, assets: str, preset: str = "tiny", seed: int = 0, pooling: str = "cls",
             dtype: str = "f16", causal: bool = False):
    sh = PRESETS[preset]
    src = refmodel.GGUFFile(os.path.join(assets, "ggml-vocab-bert-bge.gguf"), keep_arrays=True)
    n_vocab = len(src.meta["tokenizer.ggml.tokens"])
    n_ctx = int(src.meta["bert.context_length"])
    E, F, L = sh["n_embd"], sh["n_ff"], sh["n_layer"]
    rng = np.random.default_rng(seed)
    wt = {"f16": np.float16, "f32": np.float32}[dtype]

    w = gguf.GGUFWriter(out, "bert")
    w.add_name(f"randbert-{preset}")
    w.add_string("general.description", f"random weights: tests/gen/randbert.py --preset {preset} "
                 f"--seed {seed} --pooling {pooling} (not a trained model)")
    w.add_context_length(n_ctx)
    w.add_embedding_length(E)
    w.add_feed_forward_length(F)
    w.add_block_count(L)
    w.add_head_count(sh["n_head"])
    w.add_layer_norm_eps(float(src.meta["bert.attention.layer_norm_epsilon"]))
    w.add_causal_attention(causal)
    w.add_pooling_type(gguf.PoolingType(POOLING[pooling]))
    w.add_file_type(1 if dtype == "f16" else 0)
    for key, val in src.meta.items():
        if not key.startswith("tokenizer."):
            continue
        vt, et = src.types[key]
        if isinstance(val, np.ndarray):
            val = val.tolist()
        w.add_key_value(key, val, GVT(vt), GVT(et) if et is not None else None)

    def mat(n_out, n_in, scale=None):
        s = (1.0 / np.sqrt(n_in)) if scale is None else scale
        return (rng.standard_normal((n_out, n_in), np.float32) * s).astype(wt)

    def vec(n, lo=None, hi=None):
        if lo is not None:
            return rng.uniform(lo, hi, n).astype(np.float32)
        return (rng.standard_normal(n, np.float32) * 0.1).astype(np.float32)

    t = {}
    t["token_embd.weight"] = mat(n_vocab, E, 1.0)
    # the converter keeps the position and token-type tables in F32
    t["token_types.weight"] = mat(2, E, 0.5).astype(np.float32)
    t["position_embd.weight"] = mat(n_ctx, E, 0.5).astype(np.float32)
    t["token_embd_norm.weight"] = vec(E, 0.6, 1.4)
    t["token_embd_norm.bias"] = vec(E)
    for l in range(L):
        p = f"blk.{l}."
        for n in ("attn_q", "attn_k", "attn_v"):
            t[p + n + ".weight"] = mat(E, E)
            t[p + n + ".bias"] = vec(E)
        t[p + "attn_output.weight"] = mat(E, E)
        t[p + "attn_output.bias"] = vec(E)
        t[p + "attn_output_norm.weight"] = vec(E, 0.6, 1.4)
        t[p + "attn_output_norm.bias"] = vec(E)
        t[p + "ffn_up.weight"] = mat(F, E)
        t[p + "ffn_up.bias"] = vec(F)
        t[p + "ffn_down.weight"] = mat(E, F)
        t[p + "ffn_down.bias"] = vec(E)
        t[p + "layer_output_norm.weight"] = vec(E, 0.6, 1.4)
        t[p + "layer_output_norm.bias"] = vec(E)
    for name, arr in t.items():
        w.add_tensor(name, arr)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="tiny", choices=sorted(PRESETS))
    ap.add_argument("-o", "--out", required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--pooling", default="cls", choices=sorted(POOLING))
    ap.add_argument("--dtype", default="f16", choices=("f16", "f32"))
    ap.add_argument("--causal", action="store_true", help="bert.attention.causal = true")
    a = ap.parse_args(argv)
    generate(a.out, assets_dir(), a.preset, a.seed, a.pooling, a.dtype, a.causal)
    print(a.out, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
