#!/usr/bin/env python3
"""Random-weight GGUF files of the dense LLM families, as llama.cpp's converter
writes them, with weights built so that the output distribution is peaked.

  tests/gen/randmodel.py FAMILY [--preset tiny|real] -o OUT.gguf [--seed N]
        [--corpus FILE ...] [--dtype f16|f32] [--noise X] [--q4km]
        [--set KEY=VALUE ...] [--drop KEY_OR_TENSOR ...] [--layers N]
        (--dtype q8_0: 2-D weights Q8_0, the real-shape MoE intermediates)
  tests/gen/randmodel.py --list

Families (general.architecture in brackets; `real` = the shapes of):
  llama3      [llama]   Llama-3.2-1B-Instruct: GQA 32/8, rope_freqs.weight with the
                        llama3 rope-scaling factors, llama-bpe tokenizer, tied output
  mistral     [llama]   Mistral-Nemo-Instruct-2407 (4 of 40 layers at `real`):
                        head_dim 128 != n_embd/n_head, 131072 vocabulary, untied
  qwen3       [qwen3]   Qwen3-1.7B: per-head Q/K RMSNorm, head_dim 128, qwen2 tokenizer
  qwen3-yarn  [qwen3]   tiny only: qwen3 with rope.scaling.type = yarn
  phi3        [phi3]    Phi-3.5-mini-instruct: fused attn_qkv and gate|up ffn_up,
                        LongRoPE rope_factors_short/long, sliding_window 262144
  phi3-swa    [phi3]    tiny only: Phi-3-mini-4k style (no LongRoPE, small sliding
                        window; note llama.cpp ignores phi3 sliding windows)
  gemma2      [gemma2]  Gemma-2-2B-it: attention/final logit softcapping, sliding
                        window on even layers, post-attention/post-FFN norms,
                        embeddings times sqrt(n_embd); Gemma tokenizer (from
                        models/gemma3-270m.gguf: 262144 tokens, not Gemma 2's 256000)
  granite     [granite] Granite-3.3-2B-Instruct: embedding/residual/attention/logit
                        multipliers, refact tokenizer with Granite's role tokens
Mixture-of-experts families (`real` for qwen3moe, olmoe, gpt-oss, mixtral: the shapes of
Qwen3-30B-A3B, OLMoE-1B-7B, gpt-oss-20b, Mixtral-8x7B; use --layers and --dtype q8_0 there;
`arch_base` = the dense design they reuse):
  qwen3moe    [qwen3moe]   Qwen3-30B-A3B style: 16 experts, top 4, renormalised
  qwen2moe    [qwen2moe]   Qwen1.5-MoE style: 8 experts, top 2, not renormalised, a shared
                           expert with its sigmoid gate
  mixtral     [llama]      Mixtral-8x7B style: 8 experts, top 2, llama-spm vocabulary
  olmoe       [olmoe]      OLMoE-1B-7B style: 16 experts, top 4, q/k RMSNorm over the whole
                           projection, gpt-neox vocabulary
  granitemoe  [granitemoe] Granite-3.x-MoE style: 8 experts, top 2, granite multipliers
  gpt-oss     [gpt-oss]    gpt-oss-20b style: 8 MXFP4 experts, top 2, biases on q/k/v/output,
                           router and experts, attention sinks, a 16-token window on the
                           even layers, YaRN, the clamped SwiGLU; gpt-2 vocabulary
Each layer's dense FFN design becomes every expert's (each with its own dressing
noise), scaled so the expected weight sum is 1; the router rows are random over
the small dims (every token picks its own experts, all experts equally likely).
`tiny` keeps each family's real vocabulary, structure and quirks (GQA, head_dim,
windows, scalings shrunk so that they act within a few hundred tokens) with
n_embd 128 and 3-4 layers (a few tens of MB, most of it the embedding).

Tokenizer metadata comes from llama.cpp's vocab-only GGUFs (scripts/fetch-
llamacpp-assets) and chat templates from its models/templates/; family edits
(Llama 3.1 special-token names, Qwen3's added tokens, Granite's role tokens) are
in `vocab_metadata`.  Tensors: 2-D weights F16 (or --dtype f32), norms and rope
factors F32, names/shapes as llama.cpp loads them.  --q4km also writes
OUT-Q4_K_M.gguf with llama.cpp's llama-quantize (bench/common.sh's build;
OUT-MXFP4_MOE.gguf for gpt-oss).

How the weights make a peaked distribution (see tests/gen/README.md): the
residual stream is split into subspaces.  A large constant block C1 makes every
RMSNorm nearly a fixed scale.  The output reads a unigram prior (C2), a low-rank
bigram code (S_b) and an identity code (S_id).  The bigram and prior are fitted
on --corpus (default: the repository's docs, tokenized greedily with the vocab):
  layer 0  attention: a position-only head (q, k from C1) whose RoPE kernel is
           peaked at distance 1 copies the previous token's identity code to S_pid;
           FFN (SwiGLU/GeGLU used as a linear map, gate held large by C1): clears
           the tied embedding's copy of the output code in S_b, sets C2 constant
  layers 1+ attention: a distance-0 RoPE kernel head copies a chunk of the bigram
           input code S_a to scratch S_x; an induction head matches S_id (now)
           against S_pid (then) in the low-frequency RoPE pairs and copies the
           identity code of the token that followed into S_ind;
           FFN: moves S_x into this layer's chunk of S_b; the last FFN replaces
           S_id by S_ind (so the output boosts the token induction predicts)
Every other head, FFN channel and free dimension is random ("dressing"), and all
structured matrices get noise, so every tensor matters.  The position kernels are
optimized (numpy, Adam) for the file's own effective RoPE frequencies, so a wrong
base, pair layout, scaling factor or attention scale breaks the bigram path.
"""

from __future__ import annotations

import argparse
import dataclasses
import glob
import math
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "reference"))
import refmodel  # noqa: E402  (sets the BLAS thread count before numpy)

import numpy as np  # noqa: E402

import gguf  # noqa: E402

T_NORMAL, T_UNKNOWN, T_CONTROL, T_USER, T_UNUSED, T_BYTE = 1, 2, 3, 4, 5, 6
GVT = gguf.GGUFValueType


# --------------------------------------------------------------------------
# Family specifications
# --------------------------------------------------------------------------

@dataclass
class Spec:
    family: str
    preset: str
    arch: str
    n_embd: int
    n_layer: int
    n_head: int
    n_head_kv: int
    head_dim: int
    n_ff: int
    ctx: int
    eps: float
    vocab: str                      # source vocab (see vocab_metadata)
    template: str | None            # file in the assets' templates/
    tied: bool
    rope_base: float | None         # None: key not written (gemma2: 10000)
    write_head_dim: bool = True     # {arch}.attention.key_length/value_length
    rope_scaling: dict | None = None
    sliding_window: int | None = None
    attn_softcap: float | None = None
    final_softcap: float | None = None
    multipliers: dict | None = None  # granite
    name: str = ""
    extra_kv: dict = field(default_factory=dict)
    moe: dict | None = None         # n_expert, k, norm_w, ff_key (write expert_feed_forward_length),
                                    # sh_ff (shared expert rows, qwen2moe)
    base_arch: str | None = None    # the dense arch whose design the MoE family reuses
    n_vocab: int | None = None      # pad (unused tokens) or cut (unused tail) the source vocab to this


def _llama3(p):
    if p == "real":
        return Spec("llama3", p, "llama", 2048, 16, 32, 8, 64, 8192, 131072, 1e-5,
                    "llama3", "meta-llama-Llama-3.2-3B-Instruct.jinja", True, 500000.0,
                    rope_scaling=dict(type="llama3", factor=32.0, low=1.0, high=4.0, orig=8192),
                    name="Llama-3.2-1B-Instruct (random weights)")
    return Spec("llama3", p, "llama", 128, 3, 4, 2, 64, 256, 2048, 1e-5,
                "llama3", "meta-llama-Llama-3.2-3B-Instruct.jinja", True, 500000.0,
                rope_scaling=dict(type="llama3", factor=8.0, low=1.0, high=4.0, orig=128),
                name="Llama-3 tiny (random weights)")


def _mistral(p):
    if p == "real":
        return Spec("mistral", p, "llama", 5120, 4, 32, 8, 128, 14336, 1024000, 1e-5,
                    "mistral", "mistralai-Mistral-Nemo-Instruct-2407.jinja", False, 1e6,
                    name="Mistral-Nemo-Instruct-2407 shapes, 4 layers (random weights)")
    return Spec("mistral", p, "llama", 128, 3, 4, 2, 64, 256, 1024000, 1e-5,
                "mistral", "mistralai-Mistral-Nemo-Instruct-2407.jinja", False, 1e6,
                name="Mistral-Nemo tiny (random weights)")


def _qwen3(p, yarn=False):
    if p == "real":
        return Spec("qwen3", p, "qwen3", 2048, 28, 16, 8, 128, 6144, 40960, 1e-6,
                    "qwen3", "Qwen-Qwen3-0.6B.jinja", True, 1e6, name="Qwen3-1.7B (random weights)")
    s = Spec("qwen3", p, "qwen3", 128, 3, 4, 2, 64, 256, 40960, 1e-6,
             "qwen3", "Qwen-Qwen3-0.6B.jinja", True, 1e6, name="Qwen3 tiny (random weights)")
    if yarn:
        s.family, s.ctx, s.name = "qwen3-yarn", 256, "Qwen3 tiny YaRN (random weights)"
        s.rope_scaling = dict(type="yarn", factor=4.0, orig=64)
    return s


def _phi3(p, swa=False):
    if p == "real":
        return Spec("phi3", p, "phi3", 3072, 32, 32, 32, 96, 8192, 131072, 1e-5,
                    "phi3", "microsoft-Phi-3.5-mini-instruct.jinja", False, 10000.0,
                    write_head_dim=False, sliding_window=262144,
                    rope_scaling=dict(type="longrope", orig=4096),
                    name="Phi-3.5-mini-instruct (random weights)")
    if swa:
        return Spec("phi3-swa", p, "phi3", 256, 3, 4, 2, 64, 256, 4096, 1e-5,
                    "phi3", "microsoft-Phi-3.5-mini-instruct.jinja", False, 10000.0,
                    write_head_dim=False, sliding_window=24,
                    rope_scaling=dict(type="none", orig=4096),
                    name="Phi-3-mini-4k style tiny, sliding window 24 (random weights)")
    return Spec("phi3", p, "phi3", 256, 3, 4, 2, 64, 256, 256, 1e-5,
                "phi3", "microsoft-Phi-3.5-mini-instruct.jinja", False, 10000.0,
                write_head_dim=False, sliding_window=262144,
                rope_scaling=dict(type="longrope", orig=64),
                name="Phi-3.5 tiny, LongRoPE (random weights)")


def _gemma2(p):
    if p == "real":
        return Spec("gemma2", p, "gemma2", 2304, 26, 8, 4, 256, 9216, 8192, 1e-6,
                    "gemma", "google-gemma-2-2b-it.jinja", True, None, sliding_window=4096,
                    attn_softcap=50.0, final_softcap=30.0, name="Gemma-2-2B-it (random weights)")
    return Spec("gemma2", p, "gemma2", 128, 4, 4, 2, 64, 256, 8192, 1e-6,
                "gemma", "google-gemma-2-2b-it.jinja", True, None, sliding_window=16,
                attn_softcap=50.0, final_softcap=30.0, name="Gemma-2 tiny (random weights)")


def _granite(p):
    mult = dict(embedding_scale=12.0, residual_scale=0.22, attention_scale=0.015625, logit_scale=8.0)
    if p == "real":
        return Spec("granite", p, "granite", 2048, 40, 32, 8, 64, 8192, 131072, 1e-5,
                    "granite", "ibm-granite-granite-3.3-2B-Instruct.jinja", True, 1e7,
                    write_head_dim=False, multipliers=mult,
                    name="Granite-3.3-2B-Instruct (random weights)")
    return Spec("granite", p, "granite", 256, 3, 4, 2, 64, 256, 131072, 1e-5,
                "granite", "ibm-granite-granite-3.3-2B-Instruct.jinja", True, 1e7,
                write_head_dim=False, multipliers=mult, name="Granite tiny (random weights)")


def _moe_real(family):
    """The real shapes of the MoE models (use --layers for fewer layers)."""
    if family == "qwen3moe":   # Qwen3-30B-A3B
        s = Spec("qwen3moe", "real", "qwen3moe", 2048, 48, 32, 4, 128, 768, 40960, 1e-6,
                 "qwen3", "Qwen-Qwen3-0.6B.jinja", False, 1e6, name="Qwen3-30B-A3B (random weights)")
        s.base_arch, s.moe = "qwen3", dict(n_expert=128, k=8, norm_w=True, ff_key=True)
    elif family == "olmoe":    # OLMoE-1B-7B-0924
        s = Spec("olmoe", "real", "olmoe", 2048, 16, 16, 16, 128, 1024, 4096, 1e-5, "olmoe", None, False,
                 10000.0, write_head_dim=False, name="OLMoE-1B-7B (random weights)", n_vocab=50304)
        s.base_arch, s.moe = "qwen2", dict(n_expert=64, k=8, norm_w=False, ff_key=False)
    elif family == "gpt-oss":  # gpt-oss-20b
        s = Spec("gpt-oss", "real", "gpt-oss", 2880, 24, 64, 8, 64, 2880, 131072, 1e-5, "gptoss", None, False,
                 150000.0, sliding_window=128, rope_scaling=dict(type="yarn", factor=32.0, orig=4096),
                 name="gpt-oss-20b (random weights)", n_vocab=201088)
        s.base_arch, s.moe = "qwen2", dict(n_expert=32, k=4, norm_w=True, ff_key=True, mxfp4=True)
    elif family == "mixtral":  # Mixtral-8x7B-Instruct-v0.1
        s = Spec("mixtral", "real", "llama", 4096, 32, 32, 8, 128, 14336, 32768, 1e-5, "mixtral", None, False,
                 1e6, name="Mixtral-8x7B (random weights)")
        s.base_arch, s.moe = "llama", dict(n_expert=8, k=2, norm_w=True, ff_key=False)
    else:
        raise ValueError(f"family {family} has no preset 'real'")
    return s


def _moe_family(family, p):
    if p == "real":
        return _moe_real(family)
    if p != "tiny":
        raise ValueError(f"family {family} has no preset {p!r}")
    if family == "qwen3moe":
        s = _qwen3("tiny")
        s.arch, s.base_arch, s.name = "qwen3moe", "qwen3", "Qwen3-MoE tiny (random weights)"
        s.moe = dict(n_expert=16, k=4, norm_w=True, ff_key=True)
    elif family == "qwen2moe":
        s = _qwen3("tiny")
        s.arch, s.base_arch, s.name = "qwen2moe", "qwen2", "Qwen2-MoE tiny (random weights)"
        s.template = "Qwen-Qwen2.5-7B-Instruct.jinja"
        s.moe = dict(n_expert=8, k=2, norm_w=False, ff_key=True, sh_ff=128)
    elif family == "mixtral":
        s = Spec("mixtral", p, "llama", 128, 3, 4, 2, 64, 256, 32768, 1e-5, "mixtral", None, False, 1e6,
                 name="Mixtral tiny (random weights)")
        s.base_arch = "llama"
        s.moe = dict(n_expert=8, k=2, norm_w=True, ff_key=False)
    elif family == "olmoe":
        s = Spec("olmoe", p, "olmoe", 128, 3, 4, 4, 32, 256, 4096, 1e-5, "olmoe", None, False, 10000.0,
                 write_head_dim=False, name="OLMoE tiny (random weights)")
        s.base_arch = "qwen2"
        s.moe = dict(n_expert=16, k=4, norm_w=False, ff_key=False)
    elif family == "gpt-oss":
        s = Spec("gpt-oss", p, "gpt-oss", 128, 4, 4, 2, 64, 256, 256, 1e-5, "gptoss", None, False, 150000.0,
                 sliding_window=16, rope_scaling=dict(type="yarn", factor=4.0, orig=64),
                 name="gpt-oss tiny (random weights)")
        s.base_arch = "qwen2"
        s.moe = dict(n_expert=8, k=2, norm_w=True, ff_key=True, mxfp4=True)
    else:
        s = _granite("tiny")
        s.family, s.arch, s.base_arch, s.name = "granitemoe", "granitemoe", "granite", \
            "Granite-MoE tiny (random weights)"
        s.moe = dict(n_expert=8, k=2, norm_w=True, ff_key=False)
    s.family = family
    return s


FAMILIES = {
    "llama3": _llama3, "mistral": _mistral, "qwen3": _qwen3,
    "qwen3-yarn": lambda p: _qwen3(p, yarn=True), "phi3": _phi3,
    "phi3-swa": lambda p: _phi3(p, swa=True), "gemma2": _gemma2, "granite": _granite,
}
MOE_FAMILIES = ("qwen3moe", "qwen2moe", "mixtral", "olmoe", "granitemoe", "gpt-oss")
for _f in MOE_FAMILIES:
    FAMILIES[_f] = (lambda f: lambda p: _moe_family(f, p))(_f)
TINY_ONLY = ("qwen3-yarn", "phi3-swa", "qwen2moe", "granitemoe")


def get_spec(family: str, preset: str = "tiny") -> Spec:
    if family not in FAMILIES:
        raise ValueError(f"unknown family {family!r} (known: {', '.join(FAMILIES)})")
    if preset not in ("tiny", "real") or (preset == "real" and family in TINY_ONLY):
        raise ValueError(f"family {family} has no preset {preset!r}")
    return FAMILIES[family](preset)


# --------------------------------------------------------------------------
# RoPE as the file asks for it (effective angular frequency per pair)
# --------------------------------------------------------------------------

def llama3_factors(base, dim, factor, low, high, orig):
    """Meta's llama3 rope scaling: per-pair divisors of the frequency."""
    out = []
    for i in range(dim // 2):
        freq = base ** (-2.0 * i / dim)
        wavelen = 2 * math.pi / freq
        if wavelen < orig / high:
            out.append(1.0)
        elif wavelen > orig / low:
            out.append(factor)
        else:
            smooth = (orig / wavelen - low) / (high - low)
            out.append(1.0 / ((1 - smooth) / factor + smooth))
    return np.array(out, np.float32)


def longrope_factors(n_pairs, scale):
    """Smooth LongRoPE-like factors: short ones mild, long ones up to ~scale;
    the first quarter of the pairs is 1.0 in both (as in Phi-3.5's)."""
    x = np.clip((np.arange(n_pairs) - n_pairs / 4) / (0.75 * n_pairs), 0, 1)
    short = 1.0 + 0.6 * x ** 2
    long_ = 1.0 + (scale - 1.0) * x ** 3 + 0.2 * x
    return short.astype(np.float32), long_.astype(np.float32)


def effective_thetas(spec: Spec, tensors_f32: dict) -> list:
    """Per-pair rotation per position, for each factor set llama.cpp may pick
    (phi3: short and long), and the cos/sin magnitude (attention factor)."""
    d = spec.head_dim
    base = spec.rope_base or 10000.0
    th = base ** (-2.0 * np.arange(d // 2) / d)
    rs = spec.rope_scaling or {}
    t = rs.get("type")
    if t == "llama3":
        return [(th / tensors_f32["rope_freqs.weight"], 1.0)]
    if t == "longrope":
        af = longrope_attn_factor(spec)
        return [(th / tensors_f32["rope_factors_short.weight"], af),
                (th / tensors_f32["rope_factors_long.weight"], af)]
    if t == "yarn":
        f, orig = rs["factor"], rs["orig"]

        def corr(nrot):
            return d * math.log(orig / (nrot * 2 * math.pi)) / (2 * math.log(base))
        lo, hi = max(0, math.floor(corr(32))), min(d - 1, math.ceil(corr(1)))
        ramp = 1 - np.clip((np.arange(d // 2) - lo) / max(0.001, hi - lo), 0, 1)
        return [(th / f * (1 - ramp) + th * ramp, 1.0 + 0.1 * math.log(f))]
    return [(th, 1.0)]


def longrope_attn_factor(spec):
    scale = spec.ctx / spec.rope_scaling["orig"]
    return math.sqrt(1 + math.log(scale) / math.log(spec.rope_scaling["orig"])) if scale > 1 else 1.0


def pair_dims(spec: Spec, i: int):
    """(real, imaginary) dims of rotation pair i inside a head."""
    if spec.arch in ("llama", "granite"):      # GGUF llama: adjacent pairs
        return 2 * i, 2 * i + 1
    return i, i + spec.head_dim // 2           # neox


def design_kernel(theta_sets, delta0, horizon, budget, cap=None, steps=400):
    """Complex weights w (n_pairs) of a position-only attention score
    s(D) = sum_i Re(w_i exp(-i D theta_i)) (D = query pos - key pos) such that
    the softmax over D = 0..t puts its mass on delta0 for t = horizon,
    horizon/4, ... under every (theta, mscale) in theta_sets (mscale^2
    multiplies the score, as RoPE's cos/sin scaling does); sum |w_i| = budget.
    Returns (w, worst attention weight on delta0)."""
    n = len(theta_sets[0][0])
    D = np.arange(horizon + 1, dtype=np.float64)
    feats = [(np.cos(D[:, None] * th[None, :]) * ms ** 2, np.sin(D[:, None] * th[None, :]) * ms ** 2)
             for th, ms in theta_sets]
    ts = [t for t in (horizon, horizon // 4, horizon // 16, 16, 4) if t >= delta0 + 1]
    w = np.exp(1j * delta0 * theta_sets[0][0]) / n
    w *= budget / np.abs(w).sum()
    m = np.zeros(2 * n)
    v = np.zeros(2 * n)

    def evaluate(w, grad):
        g = np.zeros(2 * n)
        worst = 1.0
        for C, S in feats:
            s = C @ w.real + S @ w.imag
            ds = np.ones_like(s)
            if cap:
                s, ds = cap * np.tanh(s / cap), 1 - np.tanh(s / cap) ** 2
            for t in ts:
                p = np.exp(s[:t + 1] - s[:t + 1].max())
                p /= p.sum()
                worst = min(worst, p[delta0])
                if grad:
                    gs = p.copy()
                    gs[delta0] -= 1
                    gs *= ds[:t + 1]
                    g[:n] += C[:t + 1].T @ gs
                    g[n:] += S[:t + 1].T @ gs
            if grad:
                # keep the peak score near 0 (the rest negative): q and k scale
                # with 1/rms of their token, so large absolute scores are fragile
                gp = 2 * len(ts) * s[delta0] * ds[delta0] / 16.0 ** 2
                g[:n] += gp * C[delta0]
                g[n:] += gp * S[delta0]
        return g, worst

    for it in range(1, steps + 1):
        g = evaluate(w, True)[0]
        m = 0.9 * m + 0.1 * g
        v = 0.999 * v + 0.001 * g * g
        step = 0.05 * budget / n * (m / (1 - 0.9 ** it)) / (np.sqrt(v / (1 - 0.999 ** it)) + 1e-12)
        w = (w.real - step[:n]) + 1j * (w.imag - step[n:])
        w *= budget / max(np.abs(w).sum(), 1e-30)
    return w, evaluate(w, False)[1]


# --------------------------------------------------------------------------
# Vocabulary metadata (copied from llama.cpp's vocab files, family edits)
# --------------------------------------------------------------------------

VOCAB_SOURCES = {"llama3": "llama-bpe", "mistral": "llama-bpe", "qwen3": "qwen2",
                 "phi3": "phi-3", "granite": "refact", "mixtral": "llama-spm", "olmoe": "gpt-neox",
                 "gptoss": "gpt-2"}

QWEN3_ADDED = [  # ids 151646.. of Qwen2.5/Qwen3 (content, special)
    ("<|object_ref_start|>", 1), ("<|object_ref_end|>", 1), ("<|box_start|>", 1), ("<|box_end|>", 1),
    ("<|quad_start|>", 1), ("<|quad_end|>", 1), ("<|vision_start|>", 1), ("<|vision_end|>", 1),
    ("<|vision_pad|>", 1), ("<|image_pad|>", 1), ("<|video_pad|>", 1), ("<tool_call>", 0),
    ("</tool_call>", 0), ("<|fim_prefix|>", 0), ("<|fim_middle|>", 0), ("<|fim_suffix|>", 0),
    ("<|fim_pad|>", 0), ("<|repo_name|>", 0), ("<|file_sep|>", 0), ("<tool_response>", 0),
    ("</tool_response>", 0), ("<think>", 0), ("</think>", 0)]
GRANITE_ADDED = ["<|start_of_role|>", "<|end_of_role|>", "<|tool_call|>", "<|start_of_cite|>",
                 "<|end_of_cite|>", "<|start_of_plugin|>", "<|end_of_plugin|>"]


def vocab_metadata(spec: Spec, assets: str, gemma_fallback: bool = False):
    """Ordered {key: (value, vtype, etype)} of tokenizer.* metadata.
    gemma_fallback: without models/gemma3-270m.gguf, give gemma2 llama-spm's
    SentencePiece vocabulary instead of failing (the architecture tests use
    token ids only)."""
    if spec.vocab == "gemma":
        path = os.path.join(ROOT, "models", "gemma3-270m.gguf")
        if not os.path.exists(path):
            if not gemma_fallback:
                raise FileNotFoundError(f"{path} (the Gemma vocabulary) is missing: "
                                        "scripts/fetch-model gemma3-270m")
            path = os.path.join(assets, "ggml-vocab-llama-spm.gguf")
    else:
        path = os.path.join(assets, f"ggml-vocab-{VOCAB_SOURCES[spec.vocab]}.gguf")
    g = refmodel.GGUFFile(path, keep_arrays=True)
    kv = {k: [v, *g.types[k]] for k, v in g.meta.items()
          if k.startswith("tokenizer.") and not k.startswith("tokenizer.chat_template")}
    toks = list(kv["tokenizer.ggml.tokens"][0])
    types = np.array(kv["tokenizer.ggml.token_type"][0], np.int32)

    def setk(key, val, vtype=GVT.UINT32):
        kv[key] = [val, vtype, None]

    if spec.vocab == "llama3":   # Llama 3.1+ special-token names
        named = {128004: "<|finetune_right_pad_id|>", 128008: "<|eom_id|>", 128010: "<|python_tag|>"}
        r = 0
        for i in range(128002, 128256):
            if i in named:
                toks[i] = named[i].encode()
            elif i not in (128006, 128007, 128009):
                toks[i] = f"<|reserved_special_token_{r}|>".encode()
                r += 1
        setk("tokenizer.ggml.eos_token_id", 128009)
        setk("tokenizer.ggml.add_bos_token", True, GVT.BOOL)
    elif spec.vocab == "mistral":  # a 131072-token BPE vocabulary (stand-in for tekken)
        n0 = len(toks)
        toks += [f"[PAD{i}]".encode() for i in range(n0, 131072)]
        types = np.concatenate([types, np.full(131072 - n0, T_UNUSED, np.int32)])
        setk("tokenizer.ggml.add_bos_token", True, GVT.BOOL)
        setk("tokenizer.ggml.add_eos_token", False, GVT.BOOL)
    elif spec.vocab == "qwen3":
        for k, (t, special) in enumerate(QWEN3_ADDED):
            toks[151646 + k] = t.encode()
            types[151646 + k] = T_CONTROL if special or t.startswith("<|") else T_USER
        types[151646 + len(QWEN3_ADDED):] = T_UNUSED
        setk("tokenizer.ggml.eos_token_id", 151645)
        setk("tokenizer.ggml.padding_token_id", 151643)
        setk("tokenizer.ggml.add_bos_token", False, GVT.BOOL)
    elif spec.vocab == "granite":
        toks = toks[:49152] + [t.encode() for t in GRANITE_ADDED]
        types = np.concatenate([types[:49152], np.full(len(GRANITE_ADDED), T_CONTROL, np.int32)])
        toks[0] = b"<|end_of_text|>"
        for key in ("bos", "eos", "unknown", "padding"):
            setk(f"tokenizer.ggml.{key}_token_id", 0)
        setk("tokenizer.ggml.add_bos_token", False, GVT.BOOL)
    if spec.n_vocab and spec.n_vocab > len(toks):   # the model's padded embedding rows
        n0 = len(toks)
        toks += [f"[PAD{i}]".encode() for i in range(n0, spec.n_vocab)]
        types = np.concatenate([types, np.full(spec.n_vocab - n0, T_UNUSED, np.int32)])
        if "tokenizer.ggml.scores" in kv:
            kv["tokenizer.ggml.scores"][0] = np.concatenate(
                [np.asarray(kv["tokenizer.ggml.scores"][0], np.float32), np.zeros(spec.n_vocab - n0, np.float32)])
    elif spec.n_vocab and spec.n_vocab < len(toks):
        tail = types[spec.n_vocab:]
        if np.any((tail != T_UNUSED) & (tail != T_USER)) or "tokenizer.ggml.scores" in kv:
            raise ValueError(f"cannot cut the {spec.vocab} vocabulary to {spec.n_vocab}: its tail holds special tokens")
        toks, types = toks[:spec.n_vocab], types[:spec.n_vocab]
    kv["tokenizer.ggml.tokens"][0] = toks
    kv["tokenizer.ggml.token_type"][0] = types
    if "tokenizer.ggml.scores" in kv and len(kv["tokenizer.ggml.scores"][0]) != len(toks):
        raise ValueError("scores/tokens length mismatch")
    if spec.template:
        with open(os.path.join(assets, "templates", spec.template), encoding="utf-8") as f:
            setk("tokenizer.chat_template", f.read(), GVT.STRING)
    return kv


# --------------------------------------------------------------------------
# Corpus statistics: greedy longest-match tokenization with the vocabulary
# --------------------------------------------------------------------------

def _bytes_to_unicode():
    bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


_PRE = re.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?[^\W\d_]+| ?\d{1,3}| ?[^\s\w]+|\s+(?!\S)|\s+""")


def greedy_tokenize(text: str, toks: list, types, model: str) -> np.ndarray:
    """Approximate tokenization (longest vocabulary match per pre-token); good
    enough for statistics, not a tokenizer."""
    ids = {}
    for i, t in enumerate(toks):
        if types[i] in (T_NORMAL, T_USER, T_BYTE):
            ids.setdefault(t.decode("utf-8", "replace"), i)
    maxlen = min(24, max(len(t) for t in ids))
    out = []

    def piece(s):
        i = 0
        while i < len(s):
            for n in range(min(maxlen, len(s) - i), 0, -1):
                t = ids.get(s[i:i + n])
                if t is not None:
                    out.append(t)
                    i += n
                    break
            else:
                for b in s[i].encode():
                    t = ids.get(f"<0x{b:02X}>")
                    if t is not None:
                        out.append(t)
                i += 1

    if model == "gpt2":
        b2u = _bytes_to_unicode()
        for w in _PRE.findall(text):
            piece("".join(b2u[b] for b in w.encode()))
    else:
        for w in re.findall(r" ?[^ ]+| +", text):
            piece(w.replace(" ", "\u2581"))
    return np.array(out, np.int64)


def default_corpus():
    files = sorted(glob.glob(os.path.join(ROOT, "docs", "*.md"))) + [os.path.join(ROOT, "README.md")]
    return [f for f in files if os.path.exists(f)]


@dataclass
class Stats:
    prior: np.ndarray      # (V,) centred log unigram probabilities
    top: np.ndarray        # (K,) token ids with bigram codes
    L: np.ndarray          # (K, r) bigram input codes
    R: np.ndarray          # (K, r) bigram output codes: R[v] . L[x] ~ log P(v|x) / P(v)
    tri: list = field(default_factory=list)  # [(a, b, [(next, P(next|a b)), ...])], most frequent first


def corpus_stats(ids: np.ndarray, n_vocab: int, K: int, r: int, kappa=5.0, alpha=0.01,
                 top_logit=8.0) -> Stats:
    """top_logit: the prior logit of the commonest token (the level only
    matters under a final softcap)."""
    cnt = np.bincount(ids, minlength=n_vocab).astype(np.float64)[:n_vocab]
    pu = (cnt + alpha) / (cnt.sum() + alpha * n_vocab)
    prior = np.log(pu)
    prior = prior - prior.max() + top_logit
    K = int(min(K, (cnt >= 2).sum()))
    top = np.argsort(-cnt, kind="stable")[:K]
    idx = -np.ones(n_vocab, np.int64)
    idx[top] = np.arange(K)
    p, n = idx[ids[:-1]], idx[ids[1:]]
    ok = (p >= 0) & (n >= 0)
    C = np.zeros((K, K))
    np.add.at(C, (p[ok], n[ok]), 1.0)
    pk = pu[top] / pu[top].sum()
    P = (C + kappa * pk[None, :]) / (C.sum(1, keepdims=True) + kappa)
    M = np.log(P) - np.log(pk)[None, :]
    U, S, Vt = np.linalg.svd(M, full_matrices=False)
    r = min(r, K)
    sq = np.sqrt(S[:r])
    # two-token contexts seen at least twice, with their commonest continuations
    trig = {}
    for a_, b_, c_ in zip(ids[:-2].tolist(), ids[1:-1].tolist(), ids[2:].tolist()):
        trig.setdefault((a_, b_), {}).setdefault(c_, 0)
        trig[(a_, b_)][c_] += 1
    tri = []
    for (a_, b_), nxt in trig.items():
        tot = sum(nxt.values())
        if tot >= 2:
            best = sorted(nxt.items(), key=lambda kv: (-kv[1], kv[0]))[:3]
            tri.append((tot, a_, b_, [(c_, k / tot) for c_, k in best]))
    tri.sort(key=lambda t: (-t[0], t[1], t[2]))
    return Stats(prior.astype(np.float32), top, (U[:, :r] * sq).astype(np.float32),
                 (Vt[:r].T * sq).astype(np.float32), [t[1:] for t in tri])


# --------------------------------------------------------------------------
# The network, designed in "logical" units and compiled to the family
# --------------------------------------------------------------------------

class Layout:
    """Named residual-stream subspaces.  The large dims (the constant block,
    the prior, the bias dims) sit together in their own 256-wide block (the
    last one) when n_embd allows, so that blockwise activation quantization
    (Q8_K/Q8_0 in llama.cpp, 8-bit activations in redline) keeps the small
    code dims of the other blocks precise."""

    def __init__(self, d, n_big):
        self.d, self.next, self.s = d, 0, {}
        self.big0 = (d - 256) // 256 * 256 if d >= 512 else d - n_big
        self.big = np.arange(self.big0, self.big0 + n_big)
        self.nbig = 0

    def take_big(self, name, n):
        self.s[name] = self.big[self.nbig:self.nbig + n]
        self.nbig += n
        return self.s[name]

    def take(self, name, n):
        lim = self.big0 if self.next <= self.big0 else self.d
        if self.next + n > lim:
            if lim == self.big0 and self.big0 + len(self.big) + n <= self.d:
                self.next = self.big0 + len(self.big)
            else:
                raise ValueError(f"n_embd {self.d} too small for the layout ({name})")
        self.s[name] = np.arange(self.next, self.next + n)
        self.next += n
        return self.s[name]

    def free(self):
        used = np.zeros(self.d, bool)
        for v in self.s.values():
            used[v] = True
        used[self.big] = True
        return np.nonzero(~used)[0]


class Builder:
    def __init__(self, spec: Spec, stats: Stats, n_vocab: int, seed: int, noise: float):
        self.spec, self.st, self.V = spec, stats, n_vocab
        self.rng = np.random.default_rng(seed)
        self.seed = seed
        self.noise = noise
        d, hd = spec.n_embd, spec.head_dim
        real = d >= 1024
        self.kappa = 8.0
        self.r_i = min(hd // 4, 64 if real else 16)
        r_b = stats.L.shape[1]
        n_mid = spec.n_layer - 1
        self.chunk = int(min(hd - 1, math.ceil(r_b / n_mid)))
        self.r_b = min(r_b, self.chunk * n_mid)
        nC = 32 if real else 4
        lay = self.lay = Layout(d, nC + 3)
        lay.take_big("C1", nC)
        lay.take_big("C2", 1)
        lay.take_big("BA", 1)
        lay.take_big("BF", 1)
        subs = [("Sa", self.r_b), ("Sb", self.r_b), ("Sx", self.chunk), ("Sid", self.r_i),
                ("Spid", self.r_i), ("Sppid", self.r_i), ("Sind", self.r_i)]
        # trigram memories in every FFN from layer 1 (written to S_tri, moved at
        # the end) when there is room, else in the last FFN only
        self.tri_all = real
        if self.tri_all:
            subs.append(("Stri", self.r_i))
        for nm, n in subs:
            lay.take(nm, n)
        self.free = lay.free()
        self.sig_code = 0.35   # bigram codes are stored scaled by this
        self.sig_id = 0.5
        self.b_a, self.b_f = 1.0, 1.0
        mult = spec.multipliers or {}
        self.s_emb = math.sqrt(d) if spec.arch == "gemma2" else mult.get("embedding_scale", 1.0)
        self.s_res = mult.get("residual_scale", 1.0)
        self.attn_scale = mult.get("attention_scale", 1.0 / math.sqrt(hd))
        self.logit_scale = mult.get("logit_scale", 1.0)

        ids = np.random.default_rng([seed, 0x1D]).standard_normal((n_vocab, self.r_i))
        self.id_codes = (ids / np.linalg.norm(ids, axis=1, keepdims=True) * self.sig_id).astype(np.float32)
        self.code_of = -np.ones(n_vocab, np.int64)
        self.code_of[stats.top] = np.arange(len(stats.top))
        self.n_ind = spec.n_layer - 1
        self.gamma_id = float(os.environ.get("RM_GAMMA", 4.0))    # nats an exact induction match adds to the predicted token
        # induction score of a full match: high enough to find a true match among
        # a few hundred positions, low enough to stay diffuse (harmless) without one
        # (real: longer codes, fewer false matches; gemma2 real: up where its cap bends)
        self.alpha_ind = (40.0 if spec.attn_softcap else 24.0) if real else 16.0
        self.gamma_tri = float(os.environ.get("RM_GAMMA_TRI", 5.0))  # nats for a sure trigram continuation
        self.tri = list(stats.tri)
        self.G = 6.0           # gate pre-activation of the linear FFN channels

    # ---- embeddings -----------------------------------------------------
    def rows_of(self, ids, output=False):
        """Logical embedding rows (output=False) or output rows of token ids."""
        b = self
        ids = np.asarray(ids, np.int64)
        lay, st, d = b.lay, b.st, b.spec.n_embd
        E = np.zeros((len(ids), d), np.float32)
        E[:, lay.s["C1"]] = b.kappa / math.sqrt(len(lay.s["C1"]))
        E[:, lay.s["Sid"]] = b.id_codes[ids]
        nf = max(1, len(b.free))
        E[:, b.free] = hash_normal(b.seed, ids, len(b.free), 7 if output and not b.spec.tied else 3) * (0.5 / math.sqrt(nf))
        code = b.code_of[ids]
        has = code >= 0
        if b.spec.tied or output:
            E[:, lay.s["C2"]] = (st.prior[ids] * 0.1)[:, None]
            E[np.ix_(has, lay.s["Sb"])] = st.R[code[has], :b.r_b] * b.sig_code
        if b.spec.tied or not output:
            E[np.ix_(has, lay.s["Sa"])] = st.L[code[has], :b.r_b] * b.sig_code
        return E

    # ---- helpers ----------------------------------------------------------
    def c1_read(self, value):
        """Row over the residual reading `value` from the constant block."""
        c1 = self.lay.s["C1"]
        r = np.zeros(self.spec.n_embd, np.float32)
        r[c1] = value / (self.kappa * math.sqrt(len(c1)))
        return r

    def jitter(self, A, rel):
        """Dressing noise on a structured matrix: each output gets noise of
        about `rel` times the largest entry (the residual norm is ~sqrt(d)
        times its rms, dominated by C1)."""
        if self.noise <= 0 or not A.size:
            return A
        s = float(np.abs(A).max()) * rel * self.noise / math.sqrt(A.shape[-1])
        return A + self.rng.standard_normal(A.shape).astype(np.float32) * s

    def norm_weight(self, lo=0.6, hi=1.4):
        return self.rng.uniform(lo, hi, self.spec.n_embd).astype(np.float32)

    @staticmethod
    def rms(x):
        return float(np.sqrt(np.mean(x.astype(np.float64) ** 2)))

    def act(self, z):
        if self.spec.arch == "gemma2":
            return 0.5 * z * (1 + np.tanh(math.sqrt(2 / math.pi) * (z + 0.044715 * z ** 3)))
        return z / (1 + np.exp(-z))

    # ---- RoPE position kernels --------------------------------------------
    def setup_rope(self, extra):
        self.theta_sets = effective_thetas(self.spec, extra)
        self.mscale2 = self.theta_sets[0][1] ** 2
        horizon = 2048 if self.spec.n_embd >= 1024 else 512
        self.kernels = {}
        for delta0 in (0, 1, 2):
            for budget in (24.0, 32.0, 48.0, 64.0, 96.0, 128.0):
                w, worst = design_kernel(self.theta_sets, delta0, horizon, budget, self.spec.attn_softcap)
                if worst >= 0.95:
                    break
            self.kernels[delta0] = (w, worst, budget)
        self.budget = max(b for _, _, b in self.kernels.values())
        # induction codes live in the lowest-frequency pairs (fastest set decides)
        th = np.max([t for t, _ in self.theta_sets], axis=0)
        pairs = np.argsort(th)[:self.r_i]
        self.ind_dims = [d for p in pairs for d in pair_dims(self.spec, int(p))]

    def qk_norm_scale(self):
        """qwen3: per-head RMSNorm keeps only q/k directions, so every head of a
        layer gets the same |q||k| (from the shared norm weights); it is sized
        for the least peaked kernel head."""
        n_pairs = self.spec.head_dim // 2
        ratios = [np.abs(w).sum() / (np.linalg.norm(w) * math.sqrt(n_pairs)) for w, _, _ in self.kernels.values()]
        return self.budget / min(ratios)

    def head_roles(self, l):
        """Per kv group, the roles of its q heads (k and v are shared)."""
        Hkv, G = self.spec.n_head_kv, self.spec.n_head // self.spec.n_head_kv
        subs = [["prev1", "prev2"]] if l == 0 else [["self"], ["ind1", "ind2"]]
        flat = [r for g in subs for r in g]
        if G == 1:   # one q head per group: one role per group
            groups = [[r] for r in flat]
        else:
            groups = [[g[j % len(g)] for j in range(G)] for g in subs]
        if len(groups) > Hkv:
            raise ValueError(f"{Hkv} kv heads are too few for the roles {flat}")
        return groups + [["dress"] * G] * (Hkv - len(groups))

    # ---- one attention block (logical design + compile) --------------------
    def attention(self, l, x):
        sp, lay = self.spec, self.lay
        d, H, Hkv, hd = sp.n_embd, sp.n_head, sp.n_head_kv, sp.head_dim
        G = H // Hkv
        rho = math.sqrt(float(np.mean(np.mean(x.astype(np.float64) ** 2, axis=1))))
        Aq = np.zeros((H * hd, d), np.float32)
        Ak = np.zeros((Hkv * hd, d), np.float32)
        Av = np.zeros((Hkv * hd, d), np.float32)
        O = np.zeros((d, H * hd), np.float32)
        sign = 1.0 if l % 2 == 0 else -1.0
        scale_q = 1.0 / (self.attn_scale * self.mscale2)
        n_pairs = hd // 2
        kc = math.sqrt(self.budget / n_pairs)       # shared key of the kernel heads, per pair
        a_id = math.sqrt(self.alpha_ind / 2) / self.sig_id
        delta = {"prev1": 1, "prev2": 2, "self": 0}
        outs, struct = [], []
        for g, roles in enumerate(self.head_roles(l)):
            kr = np.arange(g * hd, (g + 1) * hd)
            qheads = [g * G + j for j in range(G)]
            if roles[0] == "dress":
                sq = math.sqrt(1.5 / (math.sqrt(hd) * self.attn_scale * self.mscale2)) / math.sqrt(d) / rho
                Ak[kr] = self.rng.standard_normal((hd, d)) * sq
                for h in qheads:
                    Aq[h * hd:(h + 1) * hd] = self.rng.standard_normal((hd, d)) * sq
                Av[kr] = self.rng.standard_normal((hd, d)) / math.sqrt(d) / rho
                for h in qheads:
                    O[np.ix_(self.free, np.arange(h * hd, (h + 1) * hd))] = \
                        self.rng.standard_normal((len(self.free), hd)) * (0.3 / math.sqrt(hd * H))
                outs.append(("dress", kr, qheads))
                continue
            struct.append((kr, qheads))
            if roles[0] in delta:   # position-only kernels: k constant, q carries the kernel
                for i in range(n_pairs):
                    Ak[g * hd + pair_dims(sp, i)[0]] = self.c1_read(kc)
                for h, role in zip(qheads, roles):
                    w = self.kernels[delta[role]][0]
                    for i in range(n_pairs):
                        re_, im_ = pair_dims(sp, i)
                        Aq[h * hd + re_] = self.c1_read(w[i].real / kc * scale_q)
                        Aq[h * hd + im_] = self.c1_read(-w[i].imag / kc * scale_q)
                if roles[0] == "self":
                    c0 = (l - 1) * self.chunk
                    src = lay.s["Sa"][c0:min(c0 + self.chunk, self.r_b)]
                    dsts = {"self": lay.s["Sx"][:len(src)]}
                else:
                    src = lay.s["Sid"]
                    dsts = {"prev1": lay.s["Spid"], "prev2": lay.s["Sppid"]}
            else:   # induction: match now (S_id, S_pid) against then (S_pid, S_ppid)
                r = self.r_i
                for m in range(r):
                    Ak[g * hd + self.ind_dims[m], lay.s["Spid"][m]] = a_id
                    Ak[g * hd + self.ind_dims[r + m], lay.s["Sppid"][m]] = a_id
                for h, role in zip(qheads, roles):
                    c = 1.0 if role == "ind2" else 2.0   # full match scores alpha_ind either way
                    for m in range(r):
                        Aq[h * hd + self.ind_dims[m], lay.s["Sid"][m]] = a_id * c * scale_q
                        if role == "ind2":
                            Aq[h * hd + self.ind_dims[r + m], lay.s["Spid"][m]] = a_id * scale_q
                    if sp.arch == "qwen3":
                        # the per-head q norm fixes |q|; a constant in a dim where
                        # k is zero brings the match score down to alpha_ind
                        ratio = self.qk_norm_scale() / (self.alpha_ind * (1.0 if role == "ind2" else 2 ** -0.5))
                        filler = math.sqrt(max(ratio ** 2 - 1.0, 0.0)) * math.sqrt(self.alpha_ind)
                        Aq[h * hd + pair_dims(sp, 0)[0]] = self.c1_read(filler * scale_q)
                src = lay.s["Sid"]
                dsts = {"ind1": lay.s["Sind"], "ind2": lay.s["Sind"]}
            for m, s_ in enumerate(src):
                Av[g * hd + m, s_] = 1.0
            Av[g * hd + len(src)] = self.c1_read(self.b_a)
            for role in sorted(set(roles)):
                # heads of one role split the value dims; the two induction
                # kinds are averaged 1:2 (the two-token match is the surer)
                hs = [h for h, r_ in zip(qheads, roles) if r_ == role]
                wgt = {"ind1": 1.0 / 3, "ind2": 2.0 / 3}.get(role, 1.0)
                for m in range(len(src)):
                    O[dsts[role][m], hs[m % len(hs)] * hd + m] = wgt
            O[lay.s["BA"][0], qheads[0] * hd + len(src)] = sign
            outs.append((tuple(roles), kr, qheads))
        for kr, qheads in struct:
            Ak[kr] = self.jitter(Ak[kr], 0.02)
            Av[kr] = self.jitter(Av[kr], 0.02)
            for h in qheads:
                hs = slice(h * hd, (h + 1) * hd)
                Aq[hs] = self.jitter(Aq[hs], 0.02)
                O[:, hs] = self.jitter(O[:, hs], 0.01)

        # sample update with the intended patterns (dressing/induction: causal mean)
        n = x.shape[0]
        V = x @ Av.T
        cm = np.cumsum(V, axis=0) / np.arange(1, n + 1)[:, None]
        shifted = {0: V, 1: np.vstack([V[:1], V[:-1]]), 2: np.vstack([V[:1], V[:1], V[:-2]])}
        att = np.zeros((n, H * hd), np.float32)
        for roles, kr, qheads in outs:
            for h, role in zip(qheads, roles if roles != "dress" else ["dress"] * G):
                att[:, h * hd:(h + 1) * hd] = (shifted[delta[role]] if role in delta else cm)[:, kr]
        o = att @ O.T
        t = {}
        wn = self.norm_weight()
        t["attn_norm.weight"] = wn
        W = lambda A: (A * rho / wn[None, :]).astype(np.float32)  # noqa: E731
        Wq, Wk, Wv = W(Aq), W(Ak), W(Av)
        if sp.arch == "qwen3":
            ck = math.sqrt(self.qk_norm_scale() / hd)
            fq, fk = self.rng.uniform(0.8, 1.2, hd), self.rng.uniform(0.8, 1.2, hd)
            t["attn_q_norm.weight"] = (fq * ck * scale_q).astype(np.float32)
            t["attn_k_norm.weight"] = (fk * ck).astype(np.float32)
            Wq = (Wq.reshape(H, hd, d) / fq[None, :, None]).reshape(H * hd, d)
            Wk = (Wk.reshape(Hkv, hd, d) / fk[None, :, None]).reshape(Hkv * hd, d)
        if sp.arch == "phi3":
            t["attn_qkv.weight"] = np.concatenate([Wq, Wk, Wv], axis=0)
        else:
            t["attn_q.weight"], t["attn_k.weight"], t["attn_v.weight"] = Wq, Wk, Wv
        if sp.arch == "gemma2":
            fp = self.rng.uniform(0.7, 1.3, d)
            r_typ = float(np.mean([self.rms(r / fp) for r in o]))
            t["attn_output.weight"] = (O / fp[:, None]).astype(np.float32)
            t["post_attention_norm.weight"] = (fp * self.s_emb * r_typ).astype(np.float32)
            o = o / np.maximum(np.sqrt(np.mean((o / fp) ** 2, axis=1, keepdims=True)), 1e-9) * r_typ
        else:
            t["attn_output.weight"] = (O * (self.s_emb / self.s_res)).astype(np.float32)
        return t, x + o

    # ---- one FFN block ------------------------------------------------------
    def ffn(self, l, x):
        sp, lay = self.spec, self.lay
        d, F = sp.n_embd, sp.n_ff
        rho = math.sqrt(float(np.mean(np.mean(x.astype(np.float64) ** 2, axis=1))))
        Ag = np.zeros((F, d), np.float32)
        Au = np.zeros((F, d), np.float32)
        D = np.zeros((d, F), np.float32)
        actG = float(self.act(np.float64(self.G)))
        ch = [0]

        def unit(i):
            e = np.zeros(d, np.float32)
            e[i] = 1.0
            return e

        def lin(up, writes):
            c = ch[0]
            if c >= F:
                raise ValueError("n_ff too small for the structured channels")
            Ag[c] = self.c1_read(self.G)
            Au[c] = up
            for dim, val in writes:
                D[dim, c] = val / actG
            ch[0] += 1

        if l == 0:
            for m in lay.s["Sb"]:
                lin(-unit(m), [(m, 1.0)])
            lin(self.c1_read(1.0) - unit(lay.s["C2"][0]), [(lay.s["C2"][0], 1.0)])
        else:
            c0 = (l - 1) * self.chunk
            nch = max(0, min(self.chunk, self.r_b - c0))
            for m in range(nch):
                sx = lay.s["Sx"][m]
                lin(unit(sx), [(lay.s["Sb"][c0 + m], 1.0), (sx, -1.0)])
        last = l == sp.n_layer - 1
        if last:
            for m in range(self.r_i):
                up = unit(lay.s["Sind"][m]) / self.n_ind - unit(lay.s["Sid"][m])
                if self.tri_all:
                    up = up + unit(lay.s["Stri"][m])
                lin(up, [(lay.s["Sid"][m], 1.0)])
        lin(self.c1_read(self.b_f), [(lay.s["BF"][0], 1.0 if l % 2 == 0 else -1.0)])
        if l >= 1 and (self.tri_all or last):
            # trigram memories: channel open (gate ~5) only when S_pid, S_id hold the
            # context (a, b); it writes the identity codes of a's-b's continuations
            dst = lay.s["Sid"] if last else lay.s["Stri"]
            share = len(self.tri) if last or not self.tri_all else \
                math.ceil(len(self.tri) / max(1, sp.n_layer - 1 - l))
            n_tri = min(share, int(0.75 * (F - ch[0])))
            beta, tau = 20.0, 1.75
            g_open = float(self.act(np.float64(beta * (2 - tau))))
            for _ in range(n_tri):
                a_, b_, conts = self.tri.pop(0)
                c = ch[0]
                Ag[c] = -beta * tau * self.c1_read(1.0)
                Ag[c, lay.s["Spid"]] += beta * self.id_codes[a_] / self.sig_id ** 2
                Ag[c, lay.s["Sid"]] += beta * self.id_codes[b_] / self.sig_id ** 2
                Au[c] = self.c1_read(1.0)
                for v_, pv in conts:
                    D[dst, c] += self.gamma_tri * pv / self.gamma_id * self.id_codes[v_] / g_open
                ch[0] += 1
        n_struct = ch[0]
        Ag[:n_struct] = self.jitter(Ag[:n_struct], 0.02)
        Au[:n_struct] = self.jitter(Au[:n_struct], 0.02)
        D[:, :n_struct] = self.jitter(D[:, :n_struct], 0.01)
        nd = F - n_struct
        Ag[n_struct:] = self.rng.standard_normal((nd, d)) * (1.5 / math.sqrt(d) / rho)
        Au[n_struct:] = self.rng.standard_normal((nd, d)) * (1.0 / math.sqrt(d) / rho)
        D[np.ix_(self.free, np.arange(n_struct, F))] = \
            self.rng.standard_normal((len(self.free), nd)) * (0.3 / math.sqrt(nd))

        f = (self.act(x @ Ag.T) * (x @ Au.T)) @ D.T
        t = {}
        wn = self.norm_weight()
        t["ffn_norm.weight"] = wn
        Wg = (Ag * rho / wn[None, :]).astype(np.float32)
        Wu = (Au * rho / wn[None, :]).astype(np.float32)
        if sp.arch == "phi3":
            t["ffn_up.weight"] = np.concatenate([Wg, Wu], axis=0)
        else:
            t["ffn_gate.weight"], t["ffn_up.weight"] = Wg, Wu
        if sp.arch == "gemma2":
            fp = self.rng.uniform(0.7, 1.3, d)
            r_typ = float(np.mean([self.rms(r / fp) for r in f]))
            t["ffn_down.weight"] = (D / fp[:, None]).astype(np.float32)
            t["post_ffw_norm.weight"] = (fp * self.s_emb * r_typ).astype(np.float32)
            f = f / np.maximum(np.sqrt(np.mean((f / fp) ** 2, axis=1, keepdims=True)), 1e-9) * r_typ
        else:
            t["ffn_down.weight"] = (D * (self.s_emb / self.s_res)).astype(np.float32)
        return t, x + f

    def output_norm(self, x):
        lay = self.lay
        rho = math.sqrt(float(np.mean(np.mean(x.astype(np.float64) ** 2, axis=1))))
        lam = np.full(self.spec.n_embd, 0.01, np.float32)
        lam[lay.s["Sb"]] = 1.0 / self.sig_code ** 2
        lam[lay.s["Sid"]] = self.gamma_id / self.sig_id ** 2
        lam[lay.s["C2"]] = 10.0
        lam[self.free] = 0.5
        return (lam * rho * self.logit_scale).astype(np.float32)


def hash_normal(seed: int, ids: np.ndarray, ncols: int, salt: int) -> np.ndarray:
    """Standard normals that depend only on (seed, salt, id, column), so rows can
    be produced in any order or chunking."""
    with np.errstate(over="ignore"):
        z = (ids.astype(np.uint64)[:, None] * np.uint64(0x9E3779B97F4A7C15)
             + (np.arange(ncols, dtype=np.uint64)[None, :] + np.uint64(1)) * np.uint64(0xBF58476D1CE4E5B9)
             + np.uint64((seed * 1000003 + salt) & 0xFFFFFFFFFFFF))
        out = []
        for k in range(2):
            z = z + np.uint64(0x632BE59BD9B4E019)
            h = z
            h = (h ^ (h >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
            h = (h ^ (h >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
            h = h ^ (h >> np.uint64(31))
            out.append(((h >> np.uint64(11)).astype(np.float64) + 0.5) / float(1 << 53))
    return (np.sqrt(-2 * np.log(out[0])) * np.cos(2 * np.pi * out[1])).astype(np.float32)




# --------------------------------------------------------------------------
# The file
# --------------------------------------------------------------------------

def arch_metadata(spec: Spec, n_vocab: int, file_type: int):
    """[(method, args)] of GGUFWriter calls in the converter's order."""
    a = spec.base_arch or spec.arch
    m = [("add_type", "model"), ("add_name", spec.name),
         ("add_block_count", spec.n_layer), ("add_context_length", spec.ctx),
         ("add_embedding_length", spec.n_embd), ("add_feed_forward_length", spec.n_ff),
         ("add_head_count", spec.n_head), ("add_head_count_kv", spec.n_head_kv)]
    if spec.rope_base is not None and a != "phi3":
        m.append(("add_rope_freq_base", spec.rope_base))
    m.append(("add_layer_norm_rms_eps", spec.eps))
    if spec.write_head_dim:
        m += [("add_key_length", spec.head_dim), ("add_value_length", spec.head_dim)]
    m.append(("add_file_type", file_type))
    rs = spec.rope_scaling or {}
    if a in ("llama", "granite"):
        m += [("add_vocab_size", n_vocab), ("add_rope_dimension_count", spec.head_dim)]
    if rs.get("type") == "yarn":
        m += [("add_rope_scaling_type", gguf.RopeScalingType.YARN),
              ("add_rope_scaling_factor", rs["factor"]), ("add_rope_scaling_orig_ctx_len", rs["orig"])]
    if a == "phi3":
        m += [("add_rope_scaling_orig_ctx_len", rs["orig"]), ("add_rope_dimension_count", spec.head_dim),
              ("add_rope_freq_base", spec.rope_base), ("add_sliding_window", spec.sliding_window or 0)]
        if rs.get("type") == "longrope":
            m.append(("add_rope_scaling_attn_factors", longrope_attn_factor(spec)))
    if a == "gemma2":
        m += [("add_attn_logit_softcapping", spec.attn_softcap),
              ("add_final_logit_softcapping", spec.final_softcap),
              ("add_sliding_window", spec.sliding_window)]
    if a == "granite":
        mu = spec.multipliers
        m += [("add_attention_scale", mu["attention_scale"]), ("add_embedding_scale", mu["embedding_scale"]),
              ("add_residual_scale", mu["residual_scale"]), ("add_logit_scale", mu["logit_scale"])]
    if spec.arch == "gpt-oss":
        m.append(("add_sliding_window", spec.sliding_window))
    if spec.moe:
        mo = spec.moe
        m += [("add_expert_count", mo["n_expert"]), ("add_expert_used_count", mo["k"])]
        if mo.get("ff_key"):
            m.append(("add_expert_feed_forward_length", spec.n_ff))
        if mo.get("sh_ff"):
            m.append(("add_expert_shared_feed_forward_length", mo["sh_ff"]))
    return m


def extra_tensors(spec: Spec) -> dict:
    rs = spec.rope_scaling or {}
    if rs.get("type") == "llama3":
        return {"rope_freqs.weight": llama3_factors(spec.rope_base, spec.head_dim, rs["factor"],
                                                    rs["low"], rs["high"], rs["orig"])}
    if rs.get("type") == "longrope":
        short, long_ = longrope_factors(spec.head_dim // 2, spec.ctx / rs["orig"])
        return {"rope_factors_long.weight": long_, "rope_factors_short.weight": short}
    return {}


def tensor_plan(spec: Spec, n_vocab: int, extra: dict):
    """[(name, numpy shape)] in file order."""
    d, hd, F = spec.n_embd, spec.head_dim, spec.n_ff
    q, kv = spec.n_head * hd, spec.n_head_kv * hd
    arch = spec.base_arch or spec.arch
    plan = [("token_embd.weight", (n_vocab, d))] + [(k, v.shape) for k, v in extra.items()]
    for l in range(spec.n_layer):
        p = f"blk.{l}."
        plan.append((p + "attn_norm.weight", (d,)))
        if arch == "phi3":
            plan.append((p + "attn_qkv.weight", (q + 2 * kv, d)))
        else:
            plan += [(p + "attn_q.weight", (q, d)), (p + "attn_k.weight", (kv, d)), (p + "attn_v.weight", (kv, d))]
        if spec.arch == "gpt-oss":
            plan += [(p + "attn_q.bias", (q,)), (p + "attn_k.bias", (kv,)), (p + "attn_v.bias", (kv,)),
                     (p + "attn_output.bias", (d,)), (p + "attn_sinks.weight", (spec.n_head,))]
        if arch == "qwen3":
            plan += [(p + "attn_q_norm.weight", (hd,)), (p + "attn_k_norm.weight", (hd,))]
        if spec.arch == "olmoe":
            plan += [(p + "attn_q_norm.weight", (q,)), (p + "attn_k_norm.weight", (kv,))]
        plan.append((p + "attn_output.weight", (d, q)))
        if arch == "gemma2":
            plan.append((p + "post_attention_norm.weight", (d,)))
        plan.append((p + ("post_attention_norm.weight" if spec.arch == "gpt-oss" else "ffn_norm.weight"), (d,)))
        if spec.moe:
            ne = spec.moe["n_expert"]
            plan += [(p + "ffn_gate_inp.weight", (ne, d)), (p + "ffn_gate_exps.weight", (ne, F, d)),
                     (p + "ffn_up_exps.weight", (ne, F, d)), (p + "ffn_down_exps.weight", (ne, d, F))]
            if spec.arch == "gpt-oss":
                plan += [(p + "ffn_gate_inp.bias", (ne,)), (p + "ffn_gate_exps.bias", (ne, F)),
                         (p + "ffn_up_exps.bias", (ne, F)), (p + "ffn_down_exps.bias", (ne, d))]
            if spec.moe.get("sh_ff"):
                fs = spec.moe["sh_ff"]
                plan += [(p + "ffn_gate_inp_shexp.weight", (d,)), (p + "ffn_gate_shexp.weight", (fs, d)),
                         (p + "ffn_up_shexp.weight", (fs, d)), (p + "ffn_down_shexp.weight", (d, fs))]
            continue
        if arch == "phi3":
            plan.append((p + "ffn_up.weight", (2 * F, d)))
        else:
            plan += [(p + "ffn_gate.weight", (F, d)), (p + "ffn_up.weight", (F, d))]
        plan.append((p + "ffn_down.weight", (d, F)))
        if arch == "gemma2":
            plan.append((p + "post_ffw_norm.weight", (d,)))
    plan.append(("output_norm.weight", (d,)))
    if not spec.tied:
        plan.append(("output.weight", (n_vocab, d)))
    return plan


def _parse_value(s: str):
    if s.lower() in ("true", "false"):
        return s.lower() == "true", GVT.BOOL
    try:
        return int(s), GVT.UINT32
    except ValueError:
        pass
    try:
        return float(s), GVT.FLOAT32
    except ValueError:
        return s, GVT.STRING


def generate(spec: Spec, out: str, assets: str, corpus_files=None, seed: int = 0, noise: float = 1.0,
             dtype: str = "f16", overrides=(), drops=(), log=print, gemma_fallback=False):
    """Writes the GGUF file; returns a dict of diagnostics."""
    kv = vocab_metadata(spec, assets, gemma_fallback)
    toks, types = kv["tokenizer.ggml.tokens"][0], kv["tokenizer.ggml.token_type"][0]
    n_vocab = len(toks)
    files = list(corpus_files or default_corpus())
    text = "".join(open(f, encoding="utf-8", errors="replace").read() + "\n" for f in files)
    ids = greedy_tokenize(text, toks, types, kv["tokenizer.ggml.model"][0])
    real = spec.n_embd >= 1024
    # gemma2: logits high enough for the final softcap (30) to bend them
    stats = corpus_stats(ids, n_vocab, 4096 if real else 1024, 256 if real else 20,
                         top_logit=18.0 if spec.final_softcap else 8.0)
    extra = extra_tensors(spec)
    # MoE families: the dense design of their base arch, converted per layer
    b = Builder(dataclasses.replace(spec, arch=spec.base_arch) if spec.base_arch else spec,
                stats, n_vocab, seed, noise)
    b.setup_rope(extra)
    diag = dict(corpus_tokens=int(len(ids)), corpus_files=[os.path.relpath(f, ROOT) for f in files],
                kernel_budget=b.budget,
                kernel_worst={k: round(float(v[1]), 4) for k, v in b.kernels.items()})
    log(f"randmodel: {spec.family}/{spec.preset}: vocab {n_vocab}, corpus {len(ids)} tokens, "
        f"codes {b.r_b}x2 + id {b.r_i}, kernel budget {b.budget} worst {diag['kernel_worst']}")

    ftype = {"f16": (np.float16, 1), "f32": (np.float32, 0), "q8_0": (np.float16, 7)}[dtype]
    Q8 = gguf.GGMLQuantizationType.Q8_0
    w = gguf.GGUFWriter(out, spec.arch)
    for meth, arg in arch_metadata(spec, n_vocab, ftype[1]):
        getattr(w, meth)(arg)
    w.add_string("general.description", f"random weights: tests/gen/randmodel.py {spec.family} "
                 f"--preset {spec.preset} --seed {seed} (not a trained model)")
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    for key, (val, vt, et) in kv.items():
        if isinstance(val, np.ndarray):
            val = val.tolist()
        w.add_key_value(key, val, GVT(vt), GVT(et) if et is not None else None)
    for key, sval in overrides:
        full = key if "." in key and key.split(".")[0] in ("general", "tokenizer", spec.arch) else f"{spec.arch}.{key}"
        val, vt = _parse_value(sval)
        old = w.kv_data[0].get(full)
        if old is not None and old.type != GVT.ARRAY:
            vt = old.type
            val = type(old.value)(val) if not isinstance(old.value, bool) else bool(val)
        w.add_key_value(full, val, vt)
    for key in drops:
        for full in (key, f"{spec.arch}.{key}"):
            w.kv_data[0].pop(full, None)

    plan = [(n, s) for n, s in tensor_plan(spec, n_vocab, extra) if n not in drops]
    def is_mxfp4(name):
        return bool(spec.moe and spec.moe.get("mxfp4")) and name.endswith("_exps.weight")

    def file_dtype(name, shape):
        return np.float32 if len(shape) == 1 or name.endswith(".bias") else ftype[0]

    def is_q8(name, shape):
        return dtype == "q8_0" and file_dtype(name, shape) != np.float32 and not is_mxfp4(name)

    MX = gguf.GGMLQuantizationType.MXFP4
    for name, shape in plan:
        if is_mxfp4(name):
            bs, ts = gguf.GGML_QUANT_SIZES[MX]
            w.add_tensor_info(name, shape, np.dtype(np.float32), int(np.prod(shape)) // bs * ts, raw_dtype=MX)
            continue
        if is_q8(name, shape):
            bs, ts = gguf.GGML_QUANT_SIZES[Q8]
            w.add_tensor_info(name, shape, np.dtype(np.float32), int(np.prod(shape)) // bs * ts, raw_dtype=Q8)
            continue
        dt = file_dtype(name, shape)
        w.add_tensor_info(name, shape, np.dtype(dt), int(np.prod(shape)) * np.dtype(dt).itemsize)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    plan_iter = iter(plan)

    def put(name, arr):
        if name in drops:
            return
        pname, shape = next(plan_iter)
        assert pname == name and tuple(arr.shape) == tuple(shape), (pname, name, arr.shape, shape)
        if is_mxfp4(name):
            w.write_tensor_data(quantize_mxfp4(arr))
        elif is_q8(name, arr.shape):
            w.write_tensor_data(quantize_q8_0(arr))
        else:
            w.write_tensor_data(arr.astype(file_dtype(name, arr.shape)))

    def matrix(output):
        M = np.empty((n_vocab, spec.n_embd), ftype[0])
        for lo in range(0, n_vocab, 8192):
            hi = min(n_vocab, lo + 8192)
            M[lo:hi] = b.rows_of(np.arange(lo, hi), output)
        return M

    put("token_embd.weight", matrix(False))
    for name, arr in extra.items():
        put(name, arr)
    sample = ids[:256] if len(ids) >= 256 else np.resize(ids, 256)
    x = b.rows_of(sample)
    for l in range(spec.n_layer):
        x_in = x
        ta, x = b.attention(l, x)
        x_att = x
        tf, x = b.ffn(l, x)
        if spec.arch == "olmoe":
            olmoe_qk_norms(spec, b, ta, x_in)
        if spec.moe:
            moe_tensors(spec, b, tf, x_att)
        if spec.arch == "gpt-oss":
            gptoss_extras(spec, b, l, ta, tf)
        layer = {f"blk.{l}.{k}": v for k, v in list(ta.items()) + list(tf.items())}
        for name, _ in plan:
            if name in layer:
                put(name, layer.pop(name))
        assert not layer, sorted(layer)
        log(f"randmodel:   layer {l}: residual rms {b.rms(x):.3f}")
    put("output_norm.weight", b.output_norm(x))
    if not spec.tied:
        put("output.weight", matrix(True))
    w.close()
    return diag


def olmoe_qk_norms(spec: Spec, b: Builder, ta: dict, x_in: np.ndarray):
    """OLMoE's RMSNorm over the whole q and k projections, sized so the
    normed projections stay what the dense design wants (weight = the typical
    rms of the projection, with jitter folded into the projection rows)."""
    xn = refmodel.rms_norm(x_in, ta["attn_norm.weight"], spec.eps)
    for nm, wn in (("attn_q.weight", "attn_q_norm.weight"), ("attn_k.weight", "attn_k_norm.weight")):
        W = ta[nm]
        r = float(np.mean(np.sqrt(np.mean((xn @ W.T).astype(np.float64) ** 2, axis=1))))
        f = b.rng.uniform(0.9, 1.1, W.shape[0])
        ta[wn] = (f * r).astype(np.float32)
        ta[nm] = (W / f[:, None]).astype(np.float32)


def moe_tensors(spec: Spec, b: Builder, tf: dict, x_att: np.ndarray):
    """Replaces the dense ffn_{gate,up,down} of tf by the router, the experts
    (each the dense design with its own noise) and, for qwen2moe, a shared
    expert of pure dressing with its sigmoid gate."""
    mo, d, rng = spec.moe, spec.n_embd, b.rng
    ne, k = mo["n_expert"], mo["k"]
    xn = refmodel.rms_norm(x_att, tf["ffn_norm.weight"], spec.eps).astype(np.float64)
    Wg, Wu, Wd = tf.pop("ffn_gate.weight"), tf.pop("ffn_up.weight"), tf.pop("ffn_down.weight")
    # router over the small dims (the constant block would fix a preference),
    # then each row's mean logit over the sample cancelled through the constant block
    R = rng.standard_normal((ne, d))
    R[:, b.lay.big] = 0.0
    lg = xn @ R.T
    R *= 2.0 / max(float(lg.std()), 1e-9)
    lg = xn @ R.T
    c1 = b.lay.s["C1"]
    xc = xn[:, c1].mean(axis=0)
    R[:, c1] -= lg.mean(axis=0)[:, None] * xc[None, :] / float(xc @ xc)
    lg = xn @ R.T
    pr = np.exp(lg - lg.max(axis=1, keepdims=True))
    pr /= pr.sum(axis=1, keepdims=True)
    wsum = 1.0 if mo["norm_w"] else float(np.mean(np.sort(pr, axis=1)[:, -k:].sum(axis=1)))
    tf["ffn_gate_inp.weight"] = R.astype(np.float32)
    tf["ffn_gate_exps.weight"] = np.stack([b.jitter(Wg, 0.05) for _ in range(ne)]).astype(np.float32)
    tf["ffn_up_exps.weight"] = np.stack([b.jitter(Wu, 0.05) for _ in range(ne)]).astype(np.float32)
    tf["ffn_down_exps.weight"] = np.stack([b.jitter(Wd / wsum, 0.05) for _ in range(ne)]).astype(np.float32)
    if mo.get("sh_ff"):
        fs = mo["sh_ff"]
        tf["ffn_gate_inp_shexp.weight"] = (rng.standard_normal(d) * (0.5 / math.sqrt(d))).astype(np.float32)
        tf["ffn_gate_shexp.weight"] = (rng.standard_normal((fs, d)) * (1.5 / math.sqrt(d))).astype(np.float32)
        tf["ffn_up_shexp.weight"] = (rng.standard_normal((fs, d)) * (1.0 / math.sqrt(d))).astype(np.float32)
        D = np.zeros((d, fs), np.float32)
        D[b.free] = rng.standard_normal((len(b.free), fs)) * (0.3 / math.sqrt(fs))
        tf["ffn_down_shexp.weight"] = D


def gptoss_extras(spec: Spec, b: Builder, l: int, ta: dict, tf: dict):
    """gpt-oss's biases and sinks: small q/k/v biases, an output bias on the
    free dims, sink logits that leave the designed heads alone (-8) and
    matter for the dressing heads; router and expert biases, the up bias -1
    cancelling the clamped SwiGLU's (u + 1); the FFN norm renamed."""
    sp, rng, d = spec, b.rng, spec.n_embd
    q, kv = sp.n_head * sp.head_dim, sp.n_head_kv * sp.head_dim
    ta["attn_q.bias"] = (rng.standard_normal(q) * 0.02).astype(np.float32)
    ta["attn_k.bias"] = (rng.standard_normal(kv) * 0.02).astype(np.float32)
    ta["attn_v.bias"] = (rng.standard_normal(kv) * 0.02).astype(np.float32)
    bo = np.zeros(d, np.float32)
    bo[b.free] = rng.standard_normal(len(b.free)) * 0.05
    ta["attn_output.bias"] = bo
    G = sp.n_head // sp.n_head_kv
    sinks = np.full(sp.n_head, -8.0, np.float32)
    for g, roles in enumerate(b.head_roles(l)):
        if roles[0] == "dress":
            sinks[g * G:(g + 1) * G] = rng.uniform(-1.0, 2.0, G)
    ta["attn_sinks.weight"] = sinks
    ne, F = sp.moe["n_expert"], sp.n_ff
    tf["post_attention_norm.weight"] = tf.pop("ffn_norm.weight")
    tf["ffn_gate_inp.bias"] = (rng.standard_normal(ne) * 0.3).astype(np.float32)
    tf["ffn_gate_exps.bias"] = (rng.standard_normal((ne, F)) * 0.05).astype(np.float32)
    tf["ffn_up_exps.bias"] = (-1.0 + rng.standard_normal((ne, F)) * 0.02).astype(np.float32)
    db = np.zeros((ne, d), np.float32)
    db[:, b.free] = rng.standard_normal((ne, len(b.free))) * 0.05
    tf["ffn_down_exps.bias"] = db


MX_KVALUES = np.array([0, 1, 2, 3, 4, 6, 8, 12], np.float32)   # e2m1 magnitudes, doubled


def quantize_mxfp4(a: np.ndarray) -> np.ndarray:
    """MXFP4 blocks of `a` (last dim a multiple of 32), byte layout of
    gguf.quants (E8M0 scale, then 16 bytes of nibbles: low = elements 0-15),
    the same shared exponent; each element takes the nearest e2m1 value (ties
    to the smaller magnitude, as gguf.quants' argmin does), found by
    comparing against the midpoints instead of all 16 codes (about 7x faster
    at the real shapes; row-chunked so the temporaries stay small)."""
    shape = a.shape
    a = a.reshape(-1, shape[-1])
    nb = shape[-1] // 32
    out = np.empty((a.shape[0], nb * 17), np.uint8)
    mids = (MX_KVALUES[1:] + MX_KVALUES[:-1]) / 2
    step = max(1, (1 << 22) // shape[-1])
    for r0 in range(0, a.shape[0], step):
        blk = a[r0:r0 + step].astype(np.float32).reshape(-1, 32)
        amax = np.abs(blk).max(axis=1, keepdims=True)
        with np.errstate(divide="ignore"):
            e = np.where(amax > 0, np.floor(np.log2(amax)) - 2 + 127, 0).astype(np.uint8)
        d = gguf.quants.MXFP4.e8m0_to_fp32_half(e)
        with np.errstate(divide="ignore", invalid="ignore"):
            mag = np.abs(blk) / d
        idx = np.searchsorted(mids, mag, side="left").astype(np.uint8)
        idx = np.where((blk < 0) & (idx > 0), idx + 8, idx).astype(np.uint8)
        qs = idx[:, :16] | (idx[:, 16:] << np.uint8(4))
        out[r0:r0 + step] = np.concatenate([e, qs], axis=1).reshape(-1, nb * 17)
    return out.reshape(*shape[:-1], nb * 17)


def quantize_q8_0(a: np.ndarray) -> np.ndarray:
    """Q8_0 blocks (f16 scale amax/127, 32 int8) of `a`, row-chunked; the
    intermediate of the real-shape files (half of F16's disk).  Rounding is
    numpy's (half to even), so a value may differ by one step from ggml's
    own quantizer; both engines read the same bytes."""
    shape = a.shape
    a = a.reshape(-1, shape[-1])
    nb = shape[-1] // 32
    out = np.empty((a.shape[0], nb * 34), np.uint8)
    step = max(1, (1 << 22) // shape[-1])
    for r0 in range(0, a.shape[0], step):
        blk = a[r0:r0 + step].astype(np.float32).reshape(-1, 32)
        d = (np.abs(blk).max(axis=1, keepdims=True) / 127).astype(np.float16)
        inv = np.where(d > 0, 1 / np.maximum(d.astype(np.float32), 1e-30), 0)
        q = np.clip(np.rint(blk * inv), -127, 127).astype(np.int8)
        out[r0:r0 + step] = np.concatenate([d.view(np.uint8), q.view(np.uint8)], axis=1).reshape(-1, nb * 34)
    return out.reshape(*shape[:-1], nb * 34)


def quantize_q4km(path: str, out: str, threads: int = 2, mxfp4_experts: bool = False):
    """llama.cpp's llama-quantize (built by bench/peer-llamacpp) to Q4_K_M
    (from a Q8_0 intermediate too: --allow-requantize); mxfp4_experts writes
    llama.cpp's MXFP4_MOE instead (gpt-oss, as its files ship: the MXFP4
    experts kept, every other matrix left as written, Q8_0 from --dtype q8_0;
    Q4_K_M would put Q5_0 on gpt-oss's 2880-column rows, no multiple of 256)."""
    exe = os.environ.get("LLAMA_QUANTIZE") or os.path.join(
        ROOT, "bench", ".cache", "llama.cpp-build-0.3.16", "bin", "llama-quantize")
    if not os.path.exists(exe):
        raise FileNotFoundError(f"{exe} missing: run bench/peer-llamacpp --build-only (or set LLAMA_QUANTIZE)")
    ftype = "MXFP4_MOE" if mxfp4_experts else "Q4_K_M"
    subprocess.run([exe, "--allow-requantize", path, out, ftype, str(threads)], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def assets_dir() -> str:
    p = subprocess.run([os.path.join(ROOT, "scripts", "fetch-llamacpp-assets")],
                       capture_output=True, text=True, check=True)
    return p.stdout.strip().splitlines()[-1]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n".join(__doc__.splitlines()[2:8]))
    ap.add_argument("family", nargs="?")
    ap.add_argument("--preset", default="tiny", choices=("tiny", "real"))
    ap.add_argument("-o", "--out")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--corpus", nargs="+", metavar="FILE", help="text the bigram/prior are fitted on "
                    "(default: docs/*.md and README.md)")
    ap.add_argument("--dtype", default="f16", choices=("f16", "f32", "q8_0"),
                    help="2-D weights (q8_0: the real-shape MoE intermediates, half of F16's disk)")
    ap.add_argument("--noise", type=float, default=1.0, help="dressing noise scale (0: structure only)")
    ap.add_argument("--q4km", action="store_true", help="also write OUT-Q4_K_M.gguf with llama-quantize "
                    "(gpt-oss: OUT-MXFP4_MOE.gguf)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="override a metadata key after generation (e.g. rope.freq_base=20000)")
    ap.add_argument("--drop", action="append", default=[], metavar="KEY",
                    help="leave out a metadata key or tensor (e.g. final_logit_softcapping, rope_freqs.weight)")
    ap.add_argument("--layers", type=int, default=None,
                    help="fewer layers than the preset (same per-layer shapes; named in general.name)")
    ap.add_argument("--list", action="store_true")
    a = ap.parse_args(argv)
    if a.list or not a.family:
        for fam in FAMILIES:
            for p in ("tiny", "real"):
                if p == "real" and fam in TINY_ONLY:
                    continue
                s = get_spec(fam, p)
                print(f"{fam:11} {p:5} {s.arch:7} d={s.n_embd} L={s.n_layer} H={s.n_head}/{s.n_head_kv} "
                      f"hd={s.head_dim} ff={s.n_ff}  {s.name}")
        return 0
    if not a.out:
        ap.error("-o OUT is required")
    spec = get_spec(a.family, a.preset)
    if a.layers and a.layers != spec.n_layer:
        spec = dataclasses.replace(spec, n_layer=a.layers,
                                   name=spec.name.replace(" (", f", {a.layers} of {spec.n_layer} layers (", 1))
    sets = [tuple(s.split("=", 1)) for s in a.set]
    if any(len(s) != 2 for s in sets):
        ap.error("--set wants KEY=VALUE")
    diag = generate(spec, a.out, assets_dir(), a.corpus, a.seed, a.noise, a.dtype, sets, a.drop,
                    log=lambda m: print(m, file=sys.stderr))
    print(f"{a.out} {diag}", file=sys.stderr)
    if a.q4km:
        mx = bool(spec.moe and spec.moe.get("mxfp4"))
        q = re.sub(r"(\.gguf)?$", "-MXFP4_MOE.gguf" if mx else "-Q4_K_M.gguf", a.out, count=1)
        quantize_q4km(a.out, q, mxfp4_experts=mx)
        print(q, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
