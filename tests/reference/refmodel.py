"""Independent NumPy reference of the decoder forward pass for GGUF models.

Purpose: a slow-but-obvious oracle that the C engine's logits and greedy
tokens are compared against (golden tests). It is written from the published
architecture descriptions (Llama, Qwen2, Gemma 3) and the Hugging Face
modelling conventions, not from the engine's C code.

Supported `general.architecture` values: llama, qwen2, gemma3, qwen3, phi3,
gemma2, granite and the mixture-of-experts qwen3moe, qwen2moe, olmoe,
granitemoe (and llama files with experts, Mixtral).

Mixture of experts (from the Mixtral, Qwen-MoE and OLMoE papers and the
Hugging Face modelling code): router logits x @ ffn_gate_inp.T, softmax
over all experts, the top expert_used_count experts per token, their
probabilities as weights (renormalised to sum 1 for Mixtral, Qwen3-MoE and
Granite-MoE; as they are for Qwen2-MoE and OLMoE), and the weighted sum of
each selected expert's SwiGLU FFN (ffn_{gate,up,down}_exps[e]).  Qwen2-MoE
adds a shared expert (ffn_*_shexp) that every token runs, scaled by
sigmoid(x . ffn_gate_inp_shexp).  OLMoE normalises q and k over the whole
projection (attn_q_norm [n_head*head_dim]), not per head.

gpt-oss (from OpenAI's reference implementation): biases on q, k, v, the
attention output, the router and every expert; one learned sink logit per
attention head that joins the softmax denominator without a value;
sliding-window attention on the even layers; the FFN input norm named
post_attention_norm; top-k on the raw router logits with the weights a
softmax over the k chosen; the expert activation
min(g, 7) * sigmoid(1.702 min(g, 7)) * (clamp(u, -7, 7) + 1).

Conventions:
  * GGUF lists shapes fastest axis first (ne0, ne1, ...); NumPy is row-major,
    so a matmul weight stored as ne=[n_in, n_out] becomes a NumPy array of
    shape (n_out, n_in) and a projection is y = x @ W.T.
  * Everything is float32; RMSNorm statistics and softmax use float64.
  * RoPE style: llama GGUF files use the "normal" style (rotate adjacent
    pairs (2i, 2i+1)) because the converter permutes the Q/K rows; qwen2 and
    gemma3 use the "neox" style (rotate (i, i + rope_dim/2)).
  * gemma3: llama.cpp's converter already folds Gemma's (1 + w) RMSNorm
    convention into the stored norm weights, so every norm here is x*w.
    (Verified against transformers, see README.md.)

Invariants: `forward()` appends the K/V of the tokens it is given to the
KVCache and attends over everything in it; positions are implicit (the cache
length before the call is the position of the first token).
"""

from __future__ import annotations

import hashlib
import math
import os
from dataclasses import dataclass, field

# Multi-threaded OpenBLAS is ~30x slower than one thread for these small
# matrices on a busy 2-core machine; effective only if numpy is not yet
# imported (forward.py imports us first).
for _v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import numpy as np  # noqa: E402

import gguf  # noqa: E402
from gguf import quants as gguf_quants  # noqa: E402

SUPPORTED_ARCHS = ("llama", "qwen2", "gemma3", "qwen3", "phi3", "gemma2", "granite",
                   "qwen3moe", "qwen2moe", "olmoe", "granitemoe", "gpt-oss")
# MoE archs whose top-k weights are renormalised to sum 1 (the others: as they are)
MOE_NORM_W = ("llama", "qwen3moe", "granitemoe")


# --------------------------------------------------------------------------
# GGUF reading
# --------------------------------------------------------------------------
# A small header parser of our own: gguf.GGUFReader builds a NumPy view for
# every element of the vocabulary arrays and takes tens of seconds on a
# 262k-token vocabulary. Dequantization still uses gguf-py (gguf.quants).
#
# Layout (v2/v3, little endian): "GGUF" u32 version, u64 n_tensors,
# u64 n_kv, n_kv x (string key, u32 type, value), n_tensors x (string name,
# u32 n_dims, u64 ne[n_dims], u32 ggml_type, u64 offset), padding to
# general.alignment (default 32), then tensor data at data_start + offset.

_SCALAR = {0: "<u1", 1: "<i1", 2: "<u2", 3: "<i2", 4: "<u4", 5: "<i4",
           6: "<f4", 7: "<u1", 10: "<u8", 11: "<i8", 12: "<f8"}
_BIG_ARRAY = 4096  # arrays longer than this are skipped, not stored


@dataclass
class TensorInfo:
    name: str
    ne: tuple          # GGUF order, fastest axis first
    ggml_type: int
    offset: int        # absolute file offset
    nbytes: int


class GGUFFile:
    """Metadata and tensor table of a GGUF file; tensor bytes via np.memmap.

    keep_arrays: also keep arrays longer than _BIG_ARRAY (the vocabulary),
    with string elements as raw bytes; `types[key]` is then (vtype, etype)."""

    def __init__(self, path: str, keep_arrays: bool = False):
        self.path = path
        self.keep_arrays = keep_arrays
        self.types = {}
        self.mm = np.memmap(path, dtype=np.uint8, mode="r")
        self.pos = 0
        if bytes(self.mm[:4]) != b"GGUF":
            raise ValueError(f"{path}: not a GGUF file")
        self.pos = 4
        version = self._scalar(4)
        if version not in (2, 3):
            raise ValueError(f"{path}: unsupported GGUF version {version}")
        n_tensors = self._scalar(10)
        n_kv = self._scalar(10)
        self.meta = {}
        for _ in range(n_kv):
            key = self._string()
            vtype = self._scalar(4)
            self._etype = None
            self.meta[key] = self._value(vtype)
            self.types[key] = (vtype, self._etype)
        self.tensors = {}
        infos = []
        for _ in range(n_tensors):
            name = self._string()
            n_dims = self._scalar(4)
            ne = tuple(self._scalar(10) for _ in range(n_dims))
            gtype = self._scalar(4)
            off = self._scalar(10)
            infos.append((name, ne, gtype, off))
        align = int(self.meta.get("general.alignment", 32))
        data_start = (self.pos + align - 1) // align * align
        for name, ne, gtype, off in infos:
            qt = gguf.GGMLQuantizationType(gtype)
            bs, ts = gguf.GGML_QUANT_SIZES[qt]
            n = int(np.prod(ne, dtype=np.int64))
            if ne[0] % bs:
                raise ValueError(f"{name}: ne0 {ne[0]} not a multiple of block {bs}")
            nbytes = n // bs * ts
            start = data_start + off
            if start + nbytes > self.mm.size:
                raise ValueError(f"{name}: data past end of file")
            self.tensors[name] = TensorInfo(name, ne, gtype, start, nbytes)

    def _scalar(self, vtype: int):
        dt = np.dtype(_SCALAR[vtype])
        v = np.frombuffer(self.mm, dtype=dt, count=1, offset=self.pos)[0]
        self.pos += dt.itemsize
        return bool(v) if vtype == 7 else v.item()

    def _string(self) -> str:
        n = self._scalar(10)
        s = bytes(self.mm[self.pos:self.pos + n]).decode("utf-8", errors="replace")
        self.pos += n
        return s

    def _value(self, vtype: int):
        if vtype == 8:
            return self._string()
        if vtype != 9:
            return self._scalar(vtype)
        etype = self._scalar(4)
        self._etype = etype
        n = self._scalar(10)
        if etype in _SCALAR:
            dt = np.dtype(_SCALAR[etype])
            arr = np.frombuffer(self.mm, dtype=dt, count=n, offset=self.pos)
            self.pos += n * dt.itemsize
            if self.keep_arrays:
                return arr.copy()
            return None if n > _BIG_ARRAY else arr.tolist()
        if etype == 8:
            if self.keep_arrays:
                out = []
                for _ in range(n):
                    ln = int(np.frombuffer(self.mm, dtype="<u8", count=1, offset=self.pos)[0])
                    out.append(bytes(self.mm[self.pos + 8:self.pos + 8 + ln]))
                    self.pos += 8 + ln
                return out
            if n > _BIG_ARRAY:  # skip quickly: only the lengths matter
                for _ in range(n):
                    ln = int(np.frombuffer(self.mm, dtype="<u8", count=1, offset=self.pos)[0])
                    self.pos += 8 + ln
                return None
            return [self._string() for _ in range(n)]
        return [self._value(etype) for _ in range(n)]

    def load(self, name: str) -> np.ndarray:
        """Dequantize one tensor to float32, NumPy shape = reversed(ne)."""
        ti = self.tensors[name]
        raw = np.asarray(self.mm[ti.offset:ti.offset + ti.nbytes])
        qt = gguf.GGMLQuantizationType(ti.ggml_type)
        rows = int(np.prod(ti.ne[1:], dtype=np.int64)) if len(ti.ne) > 1 else 1
        arr = gguf_quants.dequantize(raw.reshape(rows, -1), qt)
        shape = tuple(int(x) for x in reversed(ti.ne))
        return np.ascontiguousarray(np.asarray(arr, dtype=np.float32).reshape(shape))


# --------------------------------------------------------------------------
# Hyperparameters
# --------------------------------------------------------------------------

@dataclass
class HParams:
    arch: str
    n_vocab: int
    n_embd: int
    n_layer: int
    n_head: int
    n_head_kv: int
    head_dim: int          # key_length
    head_dim_v: int        # value_length
    n_ff: int
    eps: float
    rope_dim: int
    rope_base: float
    rope_base_local: float  # gemma3 sliding-window layers
    rope_neox: bool
    rope_scale: float       # linear position scaling factor (1 = none)
    sliding_window: int     # 0 = none
    swa_pattern: int        # every swa_pattern-th layer is global (gemma2/3); 1: all layers local (phi3)
    attn_scale: float       # multiplier on q.k
    final_softcap: float    # 0 = none
    attn_softcap: float     # 0 = none
    embd_scale: float       # multiplier on token embeddings
    bos_id: int | None
    eos_id: int | None
    yarn_factor: float = 0.0    # rope.scaling.type yarn: context extension factor (0 = no YaRN)
    rope_orig_ctx: int = 0      # rope.scaling.original_context_length
    rope_attn_factor: float = 1.0  # rope.scaling.attn_factor: multiplies cos/sin (LongRoPE)
    residual_scale: float = 1.0    # granite: block outputs times this before the residual add
    logit_scale: float = 1.0       # granite: logits divided by this
    ctx_train: int = 0
    n_expert: int = 0              # expert_count (0: dense FFN)
    n_expert_used: int = 0         # expert_used_count (top-k)
    moe_norm_w: bool = False       # renormalise the top-k weights to sum 1

    def is_swa(self, il: int) -> bool:
        if self.sliding_window <= 0:
            return False
        if self.swa_pattern == 1:
            return True
        if self.swa_pattern <= 1:
            return False
        return (il % self.swa_pattern) < (self.swa_pattern - 1)


def hparams_from_meta(meta: dict, n_vocab: int, phi3_swa: bool = True) -> HParams:
    """phi3_swa: apply a phi3 file's attention.sliding_window to every layer,
    as Hugging Face's Phi3 does (llama.cpp 0.3.16 ignores it)."""
    arch = meta["general.architecture"]
    if arch not in SUPPORTED_ARCHS:
        raise ValueError(f"unsupported architecture {arch!r}")

    def g(key, default=None):
        return meta.get(f"{arch}.{key}", default)

    n_embd = int(g("embedding_length"))
    n_head = int(g("attention.head_count"))
    n_head_kv = int(g("attention.head_count_kv", n_head))
    head_dim = int(g("attention.key_length", n_embd // n_head))
    head_dim_v = int(g("attention.value_length", head_dim))
    rope_dim = int(g("rope.dimension_count", head_dim))
    default_base = 1_000_000.0 if arch == "gemma3" else 10000.0
    rope_base = float(g("rope.freq_base", default_base))
    rope_scale = 1.0
    yarn_factor = 0.0
    stype = g("rope.scaling.type")
    if stype == "linear" and g("rope.scaling.factor"):
        rope_scale = float(g("rope.scaling.factor"))
    elif stype == "yarn":
        yarn_factor = float(g("rope.scaling.factor", 1.0) or 1.0)
    ctx_train = int(g("context_length", 0) or 0)
    rope_orig_ctx = int(g("rope.scaling.original_context_length", ctx_train) or ctx_train)

    sliding_window = 0
    swa_pattern = 0
    rope_base_local = rope_base
    embd_scale = 1.0
    final_softcap = float(g("final_logit_softcapping", 0.0) or 0.0)
    attn_softcap = float(g("attn_logit_softcapping", 0.0) or 0.0)
    attn_scale = 1.0 / math.sqrt(head_dim)
    residual_scale = logit_scale = 1.0
    if arch in ("gemma2", "gemma3"):
        embd_scale = math.sqrt(n_embd)
        # query_pre_attn_scalar: head_dim for all sizes but the 27B ones, where
        # it is n_embd / n_head. GGUF does not store it; infer like that.
        qpas = g("attention.query_pre_attn_scalar")
        if qpas is None:
            qpas = head_dim
            if int(g("block_count")) in (46, 62):  # Gemma 2 / Gemma 3 27B
                qpas = n_embd // n_head
        attn_scale = 1.0 / math.sqrt(float(qpas))
    if arch == "gemma3":
        sliding_window = int(g("attention.sliding_window", 0) or 0)
        # Gemma 3: 5 local (sliding window) layers then 1 global layer.
        swa_pattern = int(g("attention.sliding_window_pattern", 6) or 6)
        rope_base_local = float(g("rope.freq_base_swa", 10000.0))
    if arch == "gemma2":
        # Gemma 2: even layers local, odd layers global; HF defaults 4096/50/30
        sliding_window = int(g("attention.sliding_window", 4096) or 0)
        swa_pattern = 2
        attn_softcap = float(g("attn_logit_softcapping", 50.0) or 0.0)
        final_softcap = float(g("final_logit_softcapping", 30.0) or 0.0)
    if arch == "gpt-oss":  # even layers local
        sliding_window = int(g("attention.sliding_window", 0) or 0)
        swa_pattern = 2
    if arch == "phi3" and phi3_swa:
        sliding_window = int(g("attention.sliding_window", 0) or 0)
        swa_pattern = 1
    if arch in ("granite", "granitemoe"):
        embd_scale = float(g("embedding_scale", 1.0) or 1.0)
        residual_scale = float(g("residual_scale", 1.0) or 1.0)
        logit_scale = float(g("logit_scale", 1.0) or 1.0)
        attn_scale = float(g("attention.scale", 0.0) or 0.0) or attn_scale

    return HParams(
        arch=arch,
        n_vocab=int(g("vocab_size", n_vocab) or n_vocab),
        n_embd=n_embd,
        n_layer=int(g("block_count")),
        n_head=n_head,
        n_head_kv=n_head_kv,
        head_dim=head_dim,
        head_dim_v=head_dim_v,
        n_ff=int(g("feed_forward_length")),
        eps=float(g("attention.layer_norm_rms_epsilon", 1e-6)),
        rope_dim=rope_dim,
        rope_base=rope_base,
        rope_base_local=rope_base_local,
        # GGUF llama/granite: Q/K rows permuted for adjacent-pair RoPE
        rope_neox=arch not in ("llama", "granite", "granitemoe"),
        rope_scale=rope_scale,
        sliding_window=sliding_window,
        swa_pattern=swa_pattern,
        attn_scale=attn_scale,
        final_softcap=final_softcap,
        attn_softcap=attn_softcap,
        embd_scale=embd_scale,
        bos_id=meta.get("tokenizer.ggml.bos_token_id"),
        eos_id=meta.get("tokenizer.ggml.eos_token_id"),
        yarn_factor=yarn_factor,
        rope_orig_ctx=rope_orig_ctx,
        rope_attn_factor=float(g("rope.scaling.attn_factor", 1.0) or 1.0),
        residual_scale=residual_scale,
        logit_scale=logit_scale,
        ctx_train=ctx_train,
        n_expert=int(g("expert_count", 0) or 0),
        n_expert_used=int(g("expert_used_count", 0) or 0),
        moe_norm_w=arch in MOE_NORM_W,
    )


# --------------------------------------------------------------------------
# Kernels (plain NumPy)
# --------------------------------------------------------------------------

def rms_norm(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    """RMSNorm over the last axis: x / sqrt(mean(x^2) + eps) * w."""
    x64 = x.astype(np.float64)
    inv = 1.0 / np.sqrt(np.mean(x64 * x64, axis=-1, keepdims=True) + eps)
    return (x64 * inv).astype(np.float32) * w


def silu(x: np.ndarray) -> np.ndarray:
    return x / (1.0 + np.exp(-x))


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    c = math.sqrt(2.0 / math.pi)
    return 0.5 * x * (1.0 + np.tanh(c * (x + 0.044715 * x * x * x)))


def rope_cos_sin(pos: np.ndarray, rope_dim: int, base: float, scale: float = 1.0,
                 freq_factors: np.ndarray | None = None, yarn_factor: float = 0.0,
                 orig_ctx: int = 0, mscale: float = 1.0):
    """cos/sin tables of shape (n, rope_dim/2) for positions `pos`.

    theta_i = pos / scale * base^(-2i/rope_dim), i = 0 .. rope_dim/2-1,
    optionally divided by per-pair freq_factors (llama3 rope_freqs, LongRoPE
    short/long factors).  YaRN (yarn_factor > 1, as in Hugging Face's
    _compute_yarn_parameters, beta_fast 32, beta_slow 1): per pair a blend of
    the interpolated (theta/factor) and original frequency, ramping from
    original (high frequencies) to interpolated (low ones) between the
    correction dims, and cos/sin times 0.1 ln(factor) + 1.  Both tables are
    multiplied by mscale (LongRoPE's attention factor)."""
    i = np.arange(rope_dim // 2, dtype=np.float64)
    inv_freq = base ** (-2.0 * i / rope_dim)
    if freq_factors is not None:
        inv_freq = inv_freq / freq_factors.astype(np.float64)
    if yarn_factor > 1.0:
        def corr_dim(n_rot):
            return rope_dim * math.log(orig_ctx / (n_rot * 2 * math.pi)) / (2 * math.log(base))
        low = max(math.floor(corr_dim(32.0)), 0)
        high = min(math.ceil(corr_dim(1.0)), rope_dim - 1)
        ramp = np.clip((i - low) / max(high - low, 0.001), 0.0, 1.0)
        extrap = 1.0 - ramp                      # weight of the original frequency
        inv_freq = inv_freq / yarn_factor * (1.0 - extrap) + inv_freq * extrap
        mscale = mscale * (0.1 * math.log(yarn_factor) + 1.0)
    ang = (pos.astype(np.float64) / scale)[:, None] * inv_freq[None, :]
    return np.cos(ang) * mscale, np.sin(ang) * mscale


def apply_rope(x: np.ndarray, cos: np.ndarray, sin: np.ndarray, rope_dim: int,
               neox: bool) -> np.ndarray:
    """Rotate x of shape (n, heads, head_dim); only the first rope_dim dims.

    normal (GGUF llama): pairs (x[2i], x[2i+1]).
    neox (HF rotate_half): pairs (x[i], x[i + rope_dim/2])."""
    x = x.astype(np.float64)
    out = x.copy()
    c = cos[:, None, :]
    s = sin[:, None, :]
    if neox:
        h = rope_dim // 2
        x0 = x[..., :h]
        x1 = x[..., h:rope_dim]
        out[..., :h] = x0 * c - x1 * s
        out[..., h:rope_dim] = x0 * s + x1 * c
    else:
        x0 = x[..., 0:rope_dim:2]
        x1 = x[..., 1:rope_dim:2]
        out[..., 0:rope_dim:2] = x0 * c - x1 * s
        out[..., 1:rope_dim:2] = x0 * s + x1 * c
    return out.astype(np.float32)


# --------------------------------------------------------------------------
# KV cache
# --------------------------------------------------------------------------

@dataclass
class KVCache:
    """Per-layer K/V, each (n_head_kv, capacity, head_dim); grows by doubling."""
    n_layer: int
    n_head_kv: int
    head_dim: int
    head_dim_v: int
    n: int = 0
    k: list = field(default_factory=list)
    v: list = field(default_factory=list)

    def __post_init__(self):
        cap = 64
        self.k = [np.zeros((self.n_head_kv, cap, self.head_dim), np.float32)
                  for _ in range(self.n_layer)]
        self.v = [np.zeros((self.n_head_kv, cap, self.head_dim_v), np.float32)
                  for _ in range(self.n_layer)]

    def _reserve(self, il: int, need: int):
        cap = self.k[il].shape[1]
        if need <= cap:
            return
        while cap < need:
            cap *= 2
        for arrs, d in ((self.k, self.head_dim), (self.v, self.head_dim_v)):
            new = np.zeros((self.n_head_kv, cap, d), np.float32)
            new[:, : arrs[il].shape[1]] = arrs[il]
            arrs[il] = new

    def store(self, il: int, pos0: int, k: np.ndarray, v: np.ndarray):
        """k: (n, n_head_kv, head_dim) for positions pos0 .. pos0+n-1."""
        n = k.shape[0]
        self._reserve(il, pos0 + n)
        self.k[il][:, pos0:pos0 + n] = k.transpose(1, 0, 2)
        self.v[il][:, pos0:pos0 + n] = v.transpose(1, 0, 2)


# --------------------------------------------------------------------------
# Model
# --------------------------------------------------------------------------

_CACHE_DIR = os.environ.get("REDLINE_REF_CACHE", "/tmp/redline-refcache")


def _cache_path(path: str) -> str:
    st = os.stat(path)
    key = f"{os.path.abspath(path)}:{st.st_size}:{st.st_mtime_ns}:v1"
    return os.path.join(_CACHE_DIR, hashlib.sha1(key.encode()).hexdigest() + ".npz")


class _LazyWeights(dict):
    """Weights dequantized on access; token_embd and output kept."""

    def __init__(self, file: GGUFFile):
        super().__init__()
        self.file = file
        for name in ("token_embd.weight", "output.weight"):
            if name in file.tensors:
                dict.__setitem__(self, name, file.load(name))

    def __contains__(self, name):
        return name in self.file.tensors

    def __getitem__(self, name):
        if dict.__contains__(self, name):
            return dict.__getitem__(self, name)
        return self.file.load(name)

    def get(self, name, default=None):
        return self[name] if name in self else default


class Model:
    """A GGUF decoder, weights dequantized to float32 once per process.

    use_disk_cache: keep the dequantized weights in an uncompressed .npz
    under $REDLINE_REF_CACHE (default /tmp/redline-refcache)."""

    def __init__(self, path: str, use_disk_cache: bool = False, n_ctx: int | None = None,
                 lazy: bool = False, phi3_swa: bool = True):
        """n_ctx: the context size the file is run with; it picks LongRoPE's
        long factors when n_ctx > rope.scaling.original_context_length, as
        llama.cpp does (default: the file's context_length, llama.cpp's -c 0).
        lazy: dequantize block weights on every use instead of keeping them
        (for multi-GB files; only token_embd/output stay in memory)."""
        self.path = path
        self.file = GGUFFile(path)
        self.meta = self.file.meta
        if "token_embd.weight" not in self.file.tensors:
            raise ValueError(f"{path}: no token_embd.weight")
        n_vocab = int(self.file.tensors["token_embd.weight"].ne[1])
        self.hp = hparams_from_meta(self.meta, n_vocab, phi3_swa=phi3_swa)
        self.w = _LazyWeights(self.file) if lazy else self._load_weights(use_disk_cache)
        emb = self.w["token_embd.weight"]
        self.hp.n_vocab = emb.shape[0]
        # tied embeddings when there is no output.weight
        self.out_w = self.w["output.weight"] if "output.weight" in self.w else emb
        self.freq_factors = self.w["rope_freqs.weight"] if "rope_freqs.weight" in self.w else None
        if "rope_factors_long.weight" in self.w:  # LongRoPE (phi3)
            ctx = n_ctx or self.hp.ctx_train
            which = "long" if ctx > self.hp.rope_orig_ctx else "short"
            self.freq_factors = self.w[f"rope_factors_{which}.weight"]
    def _load_weights(self, use_disk_cache):
        cp = _cache_path(self.path) if use_disk_cache else None
        if cp and os.path.exists(cp):
            with np.load(cp) as z:
                return {k: z[k] for k in z.files}
        w = {name: self.file.load(name) for name in self.file.tensors}
        if cp:
            os.makedirs(_CACHE_DIR, exist_ok=True)
            tmp = cp + f".tmp{os.getpid()}.npz"
            np.savez(tmp, **w)
            os.replace(tmp, cp)
        return w

    def new_cache(self) -> KVCache:
        hp = self.hp
        return KVCache(hp.n_layer, hp.n_head_kv, hp.head_dim, hp.head_dim_v)

    # ---- one transformer block -------------------------------------------
    def _attention(self, il: int, x: np.ndarray, cache: KVCache, pos0: int):
        hp, w = self.hp, self.w
        p = f"blk.{il}."
        n = x.shape[0]
        if p + "attn_qkv.weight" in w:  # phi3: fused rows [q; k; v]
            qkv = x @ w[p + "attn_qkv.weight"].T
            nq, nk = hp.n_head * hp.head_dim, hp.n_head_kv * hp.head_dim
            q, k, v = qkv[:, :nq], qkv[:, nq:nq + nk], qkv[:, nq + nk:]
        else:
            q = x @ w[p + "attn_q.weight"].T
            k = x @ w[p + "attn_k.weight"].T
            v = x @ w[p + "attn_v.weight"].T
        if p + "attn_q.bias" in w:
            q = q + w[p + "attn_q.bias"]
        if p + "attn_k.bias" in w:
            k = k + w[p + "attn_k.bias"]
        if p + "attn_v.bias" in w:
            v = v + w[p + "attn_v.bias"]
        if hp.arch == "olmoe":  # RMSNorm over the whole q and k projections
            q = rms_norm(q, w[p + "attn_q_norm.weight"], hp.eps)
            k = rms_norm(k, w[p + "attn_k_norm.weight"], hp.eps)
        q = q.reshape(n, hp.n_head, hp.head_dim)
        k = k.reshape(n, hp.n_head_kv, hp.head_dim)
        v = v.reshape(n, hp.n_head_kv, hp.head_dim_v)
        if p + "attn_q_norm.weight" in w and hp.arch != "olmoe":  # per-head (gemma3, qwen3)
            q = rms_norm(q, w[p + "attn_q_norm.weight"], hp.eps)
            k = rms_norm(k, w[p + "attn_k_norm.weight"], hp.eps)

        swa = hp.is_swa(il)
        base = hp.rope_base_local if swa else hp.rope_base
        scale = 1.0 if swa else hp.rope_scale
        pos = np.arange(pos0, pos0 + n)
        cos, sin = rope_cos_sin(pos, hp.rope_dim, base, scale, self.freq_factors,
                                hp.yarn_factor, hp.rope_orig_ctx, hp.rope_attn_factor)
        q = apply_rope(q, cos, sin, hp.rope_dim, hp.rope_neox)
        k = apply_rope(k, cos, sin, hp.rope_dim, hp.rope_neox)

        cache.store(il, pos0, k, v)
        T = pos0 + n
        K = cache.k[il][:, :T]  # (n_head_kv, T, hd)
        V = cache.v[il][:, :T]

        # mask: query at position pos0+i sees key j iff j <= pos0+i and,
        # on sliding-window layers, (pos0+i) - j < window.
        qpos = pos[:, None]
        kpos = np.arange(T)[None, :]
        allowed = kpos <= qpos
        if swa:
            allowed &= (qpos - kpos) < hp.sliding_window

        group = hp.n_head // hp.n_head_kv
        sinks = w[p + "attn_sinks.weight"].astype(np.float64) if p + "attn_sinks.weight" in w else None
        out = np.empty((n, hp.n_head, hp.head_dim_v), np.float32)
        for h in range(hp.n_head_kv):
            qh = q[:, h * group:(h + 1) * group, :].transpose(1, 0, 2)  # (g, n, hd)
            s = (qh @ K[h].T).astype(np.float64) * hp.attn_scale       # (g, n, T)
            if hp.attn_softcap > 0:
                s = hp.attn_softcap * np.tanh(s / hp.attn_softcap)
            s = np.where(allowed[None], s, -np.inf)
            if sinks is None:
                s = s - s.max(axis=-1, keepdims=True)
                pr = np.exp(s)
                pr /= pr.sum(axis=-1, keepdims=True)
            else:  # softmax over [scores, sink]; the sink has no value
                sk = sinks[h * group:(h + 1) * group][:, None, None]
                mx = np.maximum(s.max(axis=-1, keepdims=True), sk)
                pr = np.exp(s - mx)
                pr /= pr.sum(axis=-1, keepdims=True) + np.exp(sk - mx)
            o = pr.astype(np.float32) @ V[h]                           # (g, n, hdv)
            out[:, h * group:(h + 1) * group, :] = o.transpose(1, 0, 2)
        o = out.reshape(n, hp.n_head * hp.head_dim_v) @ w[p + "attn_output.weight"].T
        if p + "attn_output.bias" in w:
            o = o + w[p + "attn_output.bias"]
        return o

    def _moe(self, il: int, x: np.ndarray):
        """Routed FFN: softmax router, top-k, weighted sum of the selected
        experts (plus the gated shared expert when the layer has one)."""
        hp, w = self.hp, self.w
        p = f"blk.{il}."
        logits = x.astype(np.float64) @ w[p + "ffn_gate_inp.weight"].T.astype(np.float64)
        if p + "ffn_gate_inp.bias" in w:
            logits = logits + w[p + "ffn_gate_inp.bias"]
        k = hp.n_expert_used
        if hp.arch == "gpt-oss":  # top-k of the logits, softmax over those k
            sel = np.argsort(-logits, axis=1, kind="stable")[:, :k]
            wts = np.take_along_axis(logits, sel, axis=1)
            wts = np.exp(wts - wts.max(axis=1, keepdims=True))
            wts /= wts.sum(axis=1, keepdims=True)
        else:
            pr = np.exp(logits - logits.max(axis=1, keepdims=True))
            pr /= pr.sum(axis=1, keepdims=True)
            sel = np.argsort(-pr, axis=1, kind="stable")[:, :k]
            wts = np.take_along_axis(pr, sel, axis=1)
            if hp.moe_norm_w:
                wts = wts / wts.sum(axis=1, keepdims=True)
        G, U, D = w[p + "ffn_gate_exps.weight"], w[p + "ffn_up_exps.weight"], w[p + "ffn_down_exps.weight"]
        bias = {n: w[p + f"ffn_{n}_exps.bias"] for n in ("gate", "up", "down") if p + f"ffn_{n}_exps.bias" in w}
        out = np.zeros_like(x, dtype=np.float32)
        for e in np.unique(sel):
            rows, slot = np.nonzero(sel == e)
            xe = x[rows]
            g, u = xe @ G[e].T, xe @ U[e].T
            if bias:
                g, u = g + bias["gate"][e], u + bias["up"][e]
            if hp.arch == "gpt-oss":
                g = np.minimum(g, 7.0)
                with np.errstate(over="ignore"):  # exp(large) = inf: the product is -0
                    h = g / (1.0 + np.exp(-1.702 * g)) * (np.clip(u, -7.0, 7.0) + 1.0)
            else:
                h = silu(g) * u
            y = h @ D[e].T
            if bias:
                y = y + bias["down"][e]
            out[rows] += y * wts[rows, slot][:, None].astype(np.float32)
        if p + "ffn_gate_shexp.weight" in w:
            sh = (silu(x @ w[p + "ffn_gate_shexp.weight"].T) * (x @ w[p + "ffn_up_shexp.weight"].T)) \
                @ w[p + "ffn_down_shexp.weight"].T
            if p + "ffn_gate_inp_shexp.weight" in w:
                z = x.astype(np.float64) @ w[p + "ffn_gate_inp_shexp.weight"].reshape(-1).astype(np.float64)
                sh = sh * (1.0 / (1.0 + np.exp(-z)))[:, None].astype(np.float32)
            out = out + sh
        return out

    def _ffn(self, il: int, x: np.ndarray):
        w = self.w
        p = f"blk.{il}."
        if p + "ffn_gate_inp.weight" in w:
            return self._moe(il, x)
        if p + "ffn_gate.weight" in w:
            gate = x @ w[p + "ffn_gate.weight"].T
            up = x @ w[p + "ffn_up.weight"].T
        else:  # phi3: ffn_up holds [gate; up]
            gu = x @ w[p + "ffn_up.weight"].T
            gate, up = gu[:, :gu.shape[1] // 2], gu[:, gu.shape[1] // 2:]
        act = gelu_tanh(gate) if self.hp.arch in ("gemma2", "gemma3") else silu(gate)
        return (act * up) @ w[p + "ffn_down.weight"].T

    # ---- full forward ------------------------------------------------------
    def forward(self, tokens, cache: KVCache, all_logits: bool = False,
                hidden: bool = False) -> np.ndarray:
        """Run `tokens` at positions cache.n .. cache.n+len-1.

        Returns logits (n_vocab,) of the last token, or (len, n_vocab) when
        all_logits is set; with `hidden`, the final hidden states after
        output_norm (len, n_embd) instead (what embeddings pool). The cache
        is extended by len(tokens)."""
        hp, w = self.hp, self.w
        tokens = np.asarray(tokens, dtype=np.int64)
        if tokens.ndim != 1 or tokens.size == 0:
            raise ValueError("tokens must be a non-empty 1-D sequence")
        if tokens.min() < 0 or tokens.max() >= hp.n_vocab:
            raise ValueError("token id out of range")
        pos0 = cache.n
        x = w["token_embd.weight"][tokens].astype(np.float32)
        if hp.embd_scale != 1.0:
            x = x * np.float32(hp.embd_scale)

        for il in range(hp.n_layer):
            p = f"blk.{il}."
            h = rms_norm(x, w[p + "attn_norm.weight"], hp.eps)
            a = self._attention(il, h, cache, pos0)
            ffn_norm = "ffn_norm.weight"
            if hp.arch == "gpt-oss":  # its FFN input norm is named post_attention_norm
                ffn_norm = "post_attention_norm.weight"
            elif p + "post_attention_norm.weight" in w:
                a = rms_norm(a, w[p + "post_attention_norm.weight"], hp.eps)
            if hp.residual_scale != 1.0:
                a = a * np.float32(hp.residual_scale)
            x = x + a
            h = rms_norm(x, w[p + ffn_norm], hp.eps)
            f = self._ffn(il, h)
            if p + "post_ffw_norm.weight" in w:
                f = rms_norm(f, w[p + "post_ffw_norm.weight"], hp.eps)
            if hp.residual_scale != 1.0:
                f = f * np.float32(hp.residual_scale)
            x = x + f
        cache.n = pos0 + len(tokens)

        if hidden:
            return rms_norm(x, w["output_norm.weight"], hp.eps).astype(np.float32)
        if not all_logits:
            x = x[-1:]
        x = rms_norm(x, w["output_norm.weight"], hp.eps)
        logits = x @ self.out_w.T
        if hp.logit_scale != 1.0:
            logits = logits / np.float32(hp.logit_scale)
        if hp.final_softcap > 0:
            logits = hp.final_softcap * np.tanh(logits / hp.final_softcap)
        logits = logits.astype(np.float32)
        return logits if all_logits else logits[0]

    def greedy(self, prompt, n_new: int, stop_at_eos: bool = False):
        """Prompt once, then n_new argmax steps with the KV cache.

        Returns (generated token ids, last-prompt-position logits)."""
        cache = self.new_cache()
        logits = self.forward(prompt, cache)
        first = logits
        out = []
        for i in range(n_new):
            t = int(np.argmax(logits))
            out.append(t)
            if stop_at_eos and t == self.hp.eos_id:
                break
            if i + 1 < n_new:
                logits = self.forward([t], cache)
        return out, first
