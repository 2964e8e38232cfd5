"""Bit-exactness of redline's scalar reference dequantizers (src/tensor/)
against an independent implementation: gguf.quants.dequantize from the
`gguf` Python package.

Every comparison is on the raw float32 bit patterns (uint32 views), so it
is exact down to NaN payloads and the sign of zero.  All types we can
dequantize and the package can too are bit-exact: both evaluate the same
float32 formula in the same order (e.g. q4_K: (d*sc)*q - (dmin*m)) with no
fused multiply-add, and fp16 -> f32 is exact.

  * test_synthetic_all_types: random bytes in every supported format
    (only the fp16 scale fields are forced finite, and the mxfp4 e8m0
    exponents kept off the reserved 255) written with GGUFWriter,
    dequantized by build/tools/dequant; covers layouts the models lack.
  * test_smollm2_all_tensors: every tensor of the default model (CI has it).
  * test_other_models: >= 10 tensors of each other model in models/, at
    least one of each type it holds (the smallest), skipped when absent.

The tool is $REDLINE_BUILD/tools/dequant (default build/, relative to the
repository root): build it with `make test-bins`.
"""
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType as T
from gguf import GGUFReader, GGUFWriter
from gguf.constants import GGML_QUANT_SIZES
from gguf import quants

ROOT = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("REDLINE_BUILD", "build"))
if not BUILD.is_absolute():
    BUILD = ROOT / BUILD
TOOL = BUILD / "tools" / "dequant"
MODELS = ROOT / "models"
SMOLLM2 = MODELS / "smollm2-135m.gguf"


@pytest.fixture(scope="module")
def tool():
    if not TOOL.exists():
        pytest.fail(f"{TOOL} not built: run `make test-bins`")
    return TOOL


def run_dequant(tool, model, name, out):
    r = subprocess.run([str(tool), str(model), name, str(out)], capture_output=True, text=True)
    assert r.returncode == 0, f"dequant {name}: {r.stderr.strip()}"
    return np.fromfile(out, dtype="<f4")


def reference(t):
    """Dequantized float32 values of GGUFReader tensor t, ne[0] fastest."""
    return np.ascontiguousarray(quants.dequantize(t.data, t.tensor_type), dtype=np.float32).reshape(-1)


def assert_bit_exact(ours, ref, what):
    assert ours.shape == ref.shape, f"{what}: {ours.shape} vs {ref.shape}"
    a, b = ours.view(np.uint32), ref.view(np.uint32)
    bad = np.flatnonzero(a != b)
    if bad.size:
        i = bad[0]
        pytest.fail(f"{what}: {bad.size} of {a.size} values differ; first at {i}: "
                    f"ours {ours[i]!r} ({a[i]:#010x}) ref {ref[i]!r} ({b[i]:#010x})")


def check_tensors(tool, model, tensors, tmp_path):
    out = tmp_path / "t.f32"
    for t in tensors:
        ours = run_dequant(tool, model, t.name, out)
        assert_bit_exact(ours, reference(t), f"{model.name}:{t.name} ({t.tensor_type.name})")
        out.unlink()


def check_list(tool, model, reader):
    r = subprocess.run([str(tool), str(model), "--list"], capture_output=True, text=True, check=True)
    rows = [line.split(",") for line in r.stdout.splitlines()]
    assert [x[0] for x in rows] == [t.name for t in reader.tensors]
    assert [x[1].lower() for x in rows] == [t.tensor_type.name.lower() for t in reader.tensors]
    assert [int(x[2]) for x in rows] == [int(t.n_elements) for t in reader.tensors]


# Offsets of the fp16 scale fields inside each block; they are forced to
# finite values so NaN/Inf scales do not make the comparison about NaN
# propagation rules (the quant bytes themselves stay fully random).
FP16_FIELDS = {
    T.Q4_0: [0], T.Q4_1: [0, 2], T.Q5_0: [0], T.Q5_1: [0, 2], T.Q8_0: [0],
    T.Q2_K: [80, 82], T.Q3_K: [108], T.Q4_K: [0, 2], T.Q5_K: [0, 2], T.Q6_K: [208],
    T.IQ4_NL: [0], T.IQ4_XS: [0],
}
# Offsets of e8m0 exponent bytes: drawn from the whole valid range (255 is
# reserved for NaN), the subnormal-scale codes 0 and 1 and the largest
# included, with most mass near 127 so the values stay moderate.
E8M0_FIELDS = {T.MXFP4: [0]}
E8M0_EDGES = np.array([0, 1, 2, 126, 127, 128, 253, 254], dtype=np.uint8)
SYNTH_TYPES = [T.F32, T.F16, T.BF16] + list(FP16_FIELDS) + list(E8M0_FIELDS)


def test_synthetic_all_types(tool, tmp_path):
    rng = np.random.default_rng(1234)
    path = tmp_path / "synth.gguf"
    w = GGUFWriter(str(path), "synthetic")
    expect = {}
    for qt in SYNTH_TYPES:
        blck, tsize = GGML_QUANT_SIZES[qt]
        rows, ne0 = 7, 512  # 512 is a multiple of every block size
        nbytes = rows * ne0 // blck * tsize
        raw = rng.integers(0, 256, size=nbytes, dtype=np.uint8)
        if qt in FP16_FIELDS:
            blocks = raw.reshape(-1, tsize)
            for off in FP16_FIELDS[qt]:
                mag = rng.choice([1e-4, 1e-2, 1.0, 300.0], size=blocks.shape[0])
                vals = (rng.standard_normal(blocks.shape[0]) * mag).astype(np.float16)
                blocks[:, off:off + 2] = vals.view(np.uint8).reshape(-1, 2)
        if qt in E8M0_FIELDS:
            blocks = raw.reshape(-1, tsize)
            for off in E8M0_FIELDS[qt]:
                e = rng.integers(100, 155, size=blocks.shape[0], dtype=np.uint8)
                e[:E8M0_EDGES.size] = E8M0_EDGES
                blocks[:, off] = rng.permutation(e)
        # f32/f16/bf16 keep fully random bits, NaN payloads and subnormals included
        name = f"t.{qt.name.lower()}"
        w.add_tensor(name, raw.reshape(rows, -1), raw_dtype=qt)
        expect[name] = qt
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

    reader = GGUFReader(str(path))
    check_list(tool, path, reader)
    tensors = {t.name: t for t in reader.tensors}
    assert set(tensors) == set(expect)
    check_tensors(tool, path, [tensors[n] for n in expect], tmp_path)


def test_smollm2_all_tensors(tool, tmp_path):
    assert SMOLLM2.exists(), f"{SMOLLM2} missing (CI always has it: scripts/fetch-model)"
    reader = GGUFReader(str(SMOLLM2))
    check_list(tool, SMOLLM2, reader)
    check_tensors(tool, SMOLLM2, reader.tensors, tmp_path)


def pick_tensors(reader, n_min=10):
    """The smallest tensor of each type, then the smallest others up to n_min."""
    by_size = sorted(reader.tensors, key=lambda t: (int(t.n_elements), t.name))
    picked, seen = [], set()
    for t in by_size:
        if t.tensor_type not in seen:
            seen.add(t.tensor_type)
            picked.append(t)
    names = {t.name for t in picked}
    for t in by_size:
        if len(picked) >= n_min:
            break
        if t.name not in names:
            names.add(t.name)
            picked.append(t)
    return picked


@pytest.mark.parametrize("name", ["gemma3-270m", "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"])
def test_other_models(tool, tmp_path, name):
    model = MODELS / f"{name}.gguf"
    if not model.exists():
        pytest.skip(f"{model} not present")
    reader = GGUFReader(str(model))
    check_list(tool, model, reader)
    tensors = pick_tensors(reader)
    assert len(tensors) >= 10
    assert {t.tensor_type for t in tensors} == {t.tensor_type for t in reader.tensors}
    check_tensors(tool, model, tensors, tmp_path)


def test_bad_arguments(tool, tmp_path):
    r = subprocess.run([str(tool)], capture_output=True, text=True)
    assert r.returncode == 2 and "usage" in r.stderr
    r = subprocess.run([str(tool), str(tmp_path / "nope.gguf"), "--list"], capture_output=True,
                       text=True)
    assert r.returncode == 1 and "nope.gguf" in r.stderr
    if SMOLLM2.exists():
        r = subprocess.run([str(tool), str(SMOLLM2), "no.such.tensor", str(tmp_path / "x")],
                           capture_output=True, text=True)
        assert r.returncode == 1 and "no.such.tensor" in r.stderr
