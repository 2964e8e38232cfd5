"""NumPy reference of sentence embeddings: the BERT encoder (general.architecture
"bert", as Hugging Face's BertModel computes it and llama.cpp's converter
stores it) and the pooling of any model's final hidden states.

  embed(path, tokens) -> L2-normalised vector (n_embd,) float64

BERT (post-norm encoder, float64 throughout here):
  h = LN(tok[t] + type[0] + pos[p]) with token_embd_norm
  per layer: a = softmax(q k^T / sqrt(d)) v over ALL tokens (no mask),
             h = LN(h + a W_o + b_o)             attn_output_norm
             h = LN(h + gelu(h W_up + b_up) W_down + b_down)  layer_output_norm
  GELU: the tanh approximation (what ggml's gelu computes; HF's BertModel
  uses erf, a difference far below the test tolerance at these scales only if
  the activations are small, so the tanh form is the one checked).
Decoders (llama, qwen2, ...): refmodel.Model's hidden states after
output_norm.  Pooling: <arch>.pooling_type (1 mean, 2 cls = first token,
3 last; absent or 0: mean), then L2 normalisation.
"""

from __future__ import annotations

import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import refmodel  # noqa: E402  (first: it sets the BLAS thread count)

import numpy as np  # noqa: E402


def layer_norm(x, w, b, eps):
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


class Bert:
    def __init__(self, path: str):
        self.file = refmodel.GGUFFile(path)
        m = self.file.meta
        self.meta = m
        self.n_head = int(m["bert.attention.head_count"])
        self.n_layer = int(m["bert.block_count"])
        self.eps = float(m["bert.attention.layer_norm_epsilon"])
        self.causal = bool(m.get("bert.attention.causal", False))
        self.w = {n: self.file.load(n).astype(np.float64) for n in self.file.tensors}

    def hidden(self, tokens) -> np.ndarray:
        w, tokens = self.w, np.asarray(tokens, np.int64)
        n = len(tokens)
        h = w["token_embd.weight"][tokens] + w["position_embd.weight"][:n]
        if "token_types.weight" in w:
            h = h + w["token_types.weight"][0]
        h = layer_norm(h, w["token_embd_norm.weight"], w["token_embd_norm.bias"], self.eps)
        E = h.shape[1]
        hd = E // self.n_head
        mask = np.triu(np.full((n, n), -np.inf), 1) if self.causal else np.zeros((n, n))
        for il in range(self.n_layer):
            p = f"blk.{il}."
            q, k, v = (h @ w[p + f"attn_{c}.weight"].T + w[p + f"attn_{c}.bias"] for c in "qkv")
            q, k, v = (t.reshape(n, self.n_head, hd).transpose(1, 0, 2) for t in (q, k, v))
            s = q @ k.transpose(0, 2, 1) / math.sqrt(hd) + mask
            s = np.exp(s - s.max(axis=-1, keepdims=True))
            s /= s.sum(axis=-1, keepdims=True)
            a = (s @ v).transpose(1, 0, 2).reshape(n, E)
            a = a @ w[p + "attn_output.weight"].T + w[p + "attn_output.bias"]
            h = layer_norm(h + a, w[p + "attn_output_norm.weight"], w[p + "attn_output_norm.bias"],
                           self.eps)
            f = gelu_tanh(h @ w[p + "ffn_up.weight"].T + w[p + "ffn_up.bias"])
            f = f @ w[p + "ffn_down.weight"].T + w[p + "ffn_down.bias"]
            h = layer_norm(h + f, w[p + "layer_output_norm.weight"],
                           w[p + "layer_output_norm.bias"], self.eps)
        return h


def pooling_type(meta: dict) -> int:
    arch = meta["general.architecture"]
    p = int(meta.get(f"{arch}.pooling_type", 1))
    return 1 if p == 0 else p


def pool(hidden: np.ndarray, ptype: int) -> np.ndarray:
    hidden = np.asarray(hidden, np.float64)
    v = {1: lambda: hidden.mean(axis=0), 2: lambda: hidden[0], 3: lambda: hidden[-1]}[ptype]()
    return v / np.linalg.norm(v)


_MODELS: dict = {}


def embed(path: str, tokens) -> np.ndarray:
    """The L2-normalised pooled embedding of tokens (model cached per path)."""
    m = _MODELS.get(path)
    if m is None:
        meta = refmodel.GGUFFile(path).meta
        if meta["general.architecture"] == "bert":
            m = Bert(path)
        else:
            m = refmodel.Model(path)
        _MODELS[path] = m
    if isinstance(m, Bert):
        h = m.hidden(tokens)
    else:
        h = m.forward(tokens, m.new_cache(), hidden=True)
    return pool(h, pooling_type(m.meta))
