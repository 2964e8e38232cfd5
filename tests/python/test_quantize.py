"""`redline quantize` against an independent reader: the PyPI `gguf`
package opens the file redline wrote and dequantizes every tensor.

  * q8_0 from the default model: every key/value of the source is in the
    output unchanged (general.file_type set to 7), the same tensors with
    the same shapes, matrices stored as q8_0 and each element within the
    q8_0 rounding bound (half a step of its block's scale) of the source's
    value, vectors copied bit for bit; the model still scores the text.
  * q6_K: matrices whose rows are a multiple of 256 are q6_K, the others
    take the fallback q8_0; relative RMS error against the source below 3%
    for q6_K (measured 2.0%; q8_0 0.55%, about the 127/31 ratio of their
    steps) and 1% for q8_0; perplexity within 3%.
  * iq4_xs and mxfp4 (the codebook types, llama.cpp's file types 30 and
    38): matrices whose rows are a multiple of the block take the type,
    the others iq4_nl; relative RMS error against the source below 12%
    (iq4_xs and iq4_nl, measured 6.9% and 8.8% on SmolLM2-135M) and 16%
    (mxfp4: two significant bits and a power-of-two scale, measured 12.3%).
  * bad arguments and unreadable input fail with a message and leave no
    output file behind.
"""
import re
import subprocess

import numpy as np
import pytest
from gguf import GGMLQuantizationType as T
from gguf import GGUFReader
from gguf import quants

from conftest import BUILD, ROOT, model_path

REDLINE = BUILD / "redline"
TEXT = "/usr/share/common-licenses/GPL-3"


def quantize(src, out, *args):
    return subprocess.run([str(REDLINE), "quantize", "-m", str(src), "-o", str(out), *args],
                          capture_output=True, text=True, timeout=600)


def deq(t):
    return quants.dequantize(t.data, t.tensor_type).reshape(-1).astype(np.float64)


def kv_value(f):
    return [bytes(p).hex() for p in f.parts[f.data[0]:]] if f.data else []


def ppl(model):
    r = subprocess.run([str(REDLINE), "perplexity", "-m", str(model), "-f", TEXT, "-c", "256", "--chunks", "2",
                        "-t", "2"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    m = re.search(r"^perplexity: ([0-9.]+) \+/-", r.stdout + r.stderr, re.M)
    assert m, r.stdout + r.stderr
    return float(m.group(1))


@pytest.fixture(scope="module")
def smol():
    return model_path("smollm2-135m")


def test_q8_0_matches_source(smol, tmp_path):
    out = tmp_path / "q8.gguf"
    r = quantize(smol, out, "-q", "q8_0", "-t", "2")
    assert r.returncode == 0, r.stderr
    assert not (tmp_path / "q8.gguf.tmp").exists()
    a, b = GGUFReader(str(smol)), GGUFReader(str(out))
    ka = {k: v for k, v in a.fields.items() if not k.startswith("GGUF.") and k != "general.file_type"}
    kb = {k: v for k, v in b.fields.items() if not k.startswith("GGUF.") and k != "general.file_type"}
    assert ka.keys() == kb.keys()
    for k in ka:
        assert ka[k].types == kb[k].types, k
        assert kv_value(ka[k]) == kv_value(kb[k]), k
    assert int(b.fields["general.file_type"].parts[-1][0]) == 7
    ta = {t.name: t for t in a.tensors}
    tb = {t.name: t for t in b.tensors}
    assert ta.keys() == tb.keys()
    n_mat = 0
    for name, t in ta.items():
        u = tb[name]
        assert list(u.shape) == list(t.shape), name
        x, y = deq(t), deq(u)
        if len(t.shape) >= 2 and name.endswith("weight"):
            n_mat += 1
            assert u.tensor_type == T.Q8_0, name
            blocks = x.reshape(-1, 32)
            step = np.abs(blocks).max(axis=1, keepdims=True) / 127.0
            bound = step * 0.5 * (1 + 2.0 ** -9) + step * 2.0 ** -9 * 128 + 1e-12
            err = np.abs(y.reshape(-1, 32) - blocks)
            assert (err <= bound).all(), f"{name}: max excess {(err - bound).max()}"
        else:
            assert u.tensor_type == t.tensor_type and np.array_equal(x, y), name
    assert n_mat > 100
    p0, p1 = ppl(smol), ppl(out)
    assert abs(p1 / p0 - 1) < 0.03, (p0, p1)


def check_matrices(src, out, qt, blk, fallback, bounds):
    """Every matrix of out is qt where its rows are a multiple of blk, else
    fallback, within bounds[type] relative RMS error of src's; returns the
    types seen and out's reader."""
    a, b = GGUFReader(str(src)), GGUFReader(str(out))
    tb = {t.name: t for t in b.tensors}
    kinds = set()
    for t in a.tensors:
        if len(t.shape) < 2 or not t.name.endswith("weight"):
            continue
        u = tb[t.name]
        want = qt if int(t.shape[0]) % blk == 0 else fallback
        assert u.tensor_type == want, (t.name, t.shape, u.tensor_type)
        kinds.add(want)
        x, y = deq(t), deq(u)
        rel = np.sqrt(np.mean((y - x) ** 2) / np.mean(x ** 2))
        assert rel < bounds[want], (t.name, rel)
    return kinds, b


def test_k_quant_with_fallback(smol, tmp_path):
    out = tmp_path / "q6k.gguf"
    r = quantize(smol, out, "-q", "q6_K")
    assert r.returncode == 0, r.stderr
    assert "with a fallback type" in r.stdout
    kinds, b = check_matrices(smol, out, T.Q6_K, 256, T.Q8_0, {T.Q6_K: 0.03, T.Q8_0: 0.01})
    assert kinds == {T.Q6_K, T.Q8_0}
    assert int(b.fields["general.file_type"].parts[-1][0]) == 18
    p0, p1 = ppl(smol), ppl(out)
    assert abs(p1 / p0 - 1) < 0.03, (p0, p1)


@pytest.mark.parametrize("name,qt,blk,fallback,ftype,bound", [
    ("iq4_xs", T.IQ4_XS, 256, T.IQ4_NL, 30, 0.12),
    ("mxfp4", T.MXFP4, 32, T.Q8_0, 38, 0.16),
])
def test_codebook_targets(smol, tmp_path, name, qt, blk, fallback, ftype, bound):
    out = tmp_path / f"{name}.gguf"
    r = quantize(smol, out, "-q", name)
    assert r.returncode == 0, r.stderr
    kinds, b = check_matrices(smol, out, qt, blk, fallback, {qt: bound, fallback: bound})
    assert qt in kinds
    assert int(b.fields["general.file_type"].parts[-1][0]) == ftype


def test_bad_arguments(smol, tmp_path):
    out = tmp_path / "x.gguf"
    for args, needle in [(["-q", "q8_1"], "bad type"), (["-q", "q9"], "bad type"),
                         (["-q", "q8_0", "--output-type", "iq4_nl"], "bad type"),
                         (["-q", "q8_0", "-t", "0"], "bad value")]:
        r = quantize(smol, out, *args)
        assert r.returncode == 2 and needle in r.stderr, (args, r.stderr)
    r = quantize(ROOT / "README.md", out, "-q", "q8_0")
    assert r.returncode == 1 and "not a GGUF file" in r.stderr, r.stderr
    r = quantize(smol, tmp_path / "no" / "such" / "dir.gguf", "-q", "q8_0")
    assert r.returncode == 1 and "dir.gguf" in r.stderr, r.stderr
    r = subprocess.run([str(REDLINE), "quantize", "-m", str(smol)], capture_output=True, text=True)
    assert r.returncode == 2 and "required" in r.stderr
    assert not out.exists()
