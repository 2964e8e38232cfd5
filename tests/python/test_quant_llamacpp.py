"""Files with the weight types the popular GGUFs ship in (q2_K, q3_K,
iq4_nl, iq4_xs, mxfp4, bf16), written by llama.cpp's own llama-quantize
from the default model, load and run in redline, and score a text like
llama.cpp's llama-perplexity does on the same file.

Each case quantizes SmolLM2 (n_embd 576: the matrices whose rows are not a
multiple of 256 take llama-quantize's fallback, iq4_nl for q2_K/q3_K/iq4_xs)
with --tensor-type overrides where the file type alone would not use the
type (q2_K: llama.cpp's Q2_K mix gives ffn_down q3_K), and checks:
  * the file holds the expected types (so the case exercises them);
  * perplexity on identical scored tokens: windows of 128 tokens every 64
    (SmolLM2 adds no BOS), the last 64 targets of each, 6 windows
    (llama-perplexity -c 96 --ppl-stride 64, which widens the context to
    96 + 64/2 = 128; redline perplexity -c 128 --stride 64 --save-dist,
    whose first window also scores its first 63 targets, dropped here):
    within 2% of llama.cpp's (measured 0.1-0.7%: both quantize activations
    to 8 bits, in different places).

Needs the llama.cpp build of bench/ (bench/.cache/llama.cpp-build-*/bin, or
$REDLINE_LLAMA_BIN); skipped without it (not in CI).  Slow: ~10 s per case
on an idle machine.
"""
import math
import os
import re
import struct
import subprocess
from collections import Counter
from pathlib import Path

import pytest
from gguf import GGUFReader

from conftest import BUILD, ROOT, model_path


def llama_bin():
    env = os.environ.get("REDLINE_LLAMA_BIN")
    cands = [Path(env)] if env else sorted((ROOT / "bench" / ".cache").glob("llama.cpp-build-*/bin"))
    for d in cands:
        if (d / "llama-quantize").exists() and (d / "llama-perplexity").exists():
            return d
    return None


LBIN = llama_bin()
pytestmark = pytest.mark.skipif(LBIN is None, reason="llama.cpp build not found (bench/, $REDLINE_LLAMA_BIN)")

TEXT = ROOT / "docs" / "ARCHITECTURE.md"
MXFP4_ALL = [x for t in ("attn_q", "attn_output", "ffn_gate", "ffn_up", "ffn_down")
             for x in ("--tensor-type", f"{t}=mxfp4")]
# case: (llama-quantize file type, extra arguments, types the file must hold)
CASES = {
    "q2_K": ("Q2_K", ["--tensor-type", "ffn_down=q2_k"], {"Q2_K", "IQ4_NL"}),
    "q3_K": ("Q2_K", [], {"Q3_K", "IQ4_NL"}),
    "iq4_xs": ("IQ4_XS", [], {"IQ4_XS", "IQ4_NL"}),
    "mxfp4": ("Q8_0", MXFP4_ALL, {"MXFP4"}),
    "bf16": ("BF16", [], {"BF16"}),
}


def redline_ppl(model, tmp_path):
    dist = tmp_path / "rl.dist"
    cmd = [str(BUILD / "redline"), "perplexity", "-m", str(model), "-f", str(TEXT), "-c", "128",
           "--stride", "64", "--chunks", "6", "-t", "2", "--save-dist", str(dist)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr
    b = dist.read_bytes()
    _magic, _ver, k, _nv, ctx, stride, n = struct.unpack("<4sIIIIIQ", b[:32])
    assert (ctx, stride, n) == (128, 64, 127 + 5 * 64)
    rec = 4 + 8 * k + 8
    lps = [struct.unpack_from("<f", b, 32 + i * rec + rec - 4)[0] for i in range(n)][63:]
    return math.exp(-sum(lps) / len(lps))


def llama_ppl(model):
    cmd = [str(LBIN / "llama-perplexity"), "-m", str(model), "-f", str(TEXT), "-c", "96", "-b", "128",
           "--ppl-stride", "64", "--chunks", "6", "-t", "2"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-2000:]
    m = re.findall(r"\[(\d+)\]([0-9.]+)", r.stdout + r.stderr)
    assert m and m[-1][0] == "6", (r.stdout + r.stderr)[-2000:]
    return float(m[-1][1])


@pytest.mark.parametrize("case", list(CASES))
def test_llamacpp_file_scores_like_llamacpp(case, tmp_path):
    ftype, extra, want = CASES[case]
    out = tmp_path / f"{case}.gguf"
    r = subprocess.run([str(LBIN / "llama-quantize"), "--allow-requantize", *extra,
                        str(model_path("smollm2-135m")), str(out), ftype, "2"],
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-2000:]
    have = Counter(t.tensor_type.name for t in GGUFReader(str(out)).tensors)
    assert want <= set(have), have
    ours, theirs = redline_ppl(out, tmp_path), llama_ppl(out)
    print(f"{case}: {dict(have)} redline {ours:.4f} llama.cpp {theirs:.4f} ratio {ours / theirs:.5f}")
    assert abs(ours / theirs - 1) < 0.02, (ours, theirs)
