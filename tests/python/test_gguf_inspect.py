"""`redline inspect` agrees with the PyPI `gguf` package's reading of each
model: every key with its type and scalar value, every tensor with its
type, shape and byte size."""
import re
import subprocess

import numpy as np
import pytest

from conftest import ALL_MODELS, BUILD, model_path

VT = {0: "u8", 1: "i8", 2: "u16", 3: "i16", 4: "u32", 5: "i32", 6: "f32", 7: "bool",
      8: "string", 9: "array", 10: "u64", 11: "i64", 12: "f64"}


def parse_inspect(text):
    kvs, tensors = {}, {}
    section = None
    for line in text.splitlines():
        if line.startswith("metadata ("):
            section = "kv"
            continue
        if line.startswith("tensors ("):
            section = "t"
            continue
        if line.startswith("totals"):
            section = None
            continue
        if not line.startswith("  "):
            continue
        if section == "kv":
            m = re.match(r"  (\S+)\s+(\S+)\s+(.*)$", line)
            kvs[m.group(1)] = (m.group(2), m.group(3))
        elif section == "t" and not line.strip().startswith("name "):
            m = re.match(r"  (\S+)\s+(\S+)\s+([\d x]+?)\s+(\d+)$", line)
            shape = tuple(int(x) for x in m.group(3).split(" x "))
            tensors[m.group(1)] = (m.group(2), shape, int(m.group(4)))
    return kvs, tensors


@pytest.mark.parametrize("name", ALL_MODELS)
def test_inspect_matches_gguf_package(name):
    import gguf
    path = model_path(name)
    out = subprocess.run([str(BUILD / "redline"), "inspect", str(path)], capture_output=True,
                         text=True, check=True).stdout
    kvs, tensors = parse_inspect(out)
    r = gguf.GGUFReader(str(path))
    # GGUFReader exposes the three header fields as pseudo-keys
    fields = {k: f for k, f in r.fields.items() if not k.startswith("GGUF.")}
    assert set(kvs) == set(fields), set(kvs) ^ set(fields)
    for key, f in fields.items():
        vt = VT[int(f.types[0])]
        assert kvs[key][0] == vt, (key, kvs[key], vt)
        if vt in ("u8", "i8", "u16", "i16", "u32", "i32", "u64", "i64"):
            assert int(kvs[key][1]) == int(f.parts[f.data[0]][0]), key
        elif vt == "string":
            val = bytes(f.parts[f.data[0]]).decode("utf-8", "replace")
            if len(val) <= 120 and "\n" not in val and '"' not in val and "\\" not in val:
                assert kvs[key][1] == f'"{val}"', key
        elif vt == "array":
            n = len(f.data)
            et = VT[int(f.types[1])]
            assert kvs[key][1].startswith(f"[{et} x {n}]"), (key, kvs[key][1][:40])
    assert len(tensors) == len(r.tensors)
    for t in r.tensors:
        ty, shape, nbytes = tensors[t.name]
        assert ty.lower() == t.tensor_type.name.lower(), t.name
        assert shape == tuple(int(x) for x in t.shape), t.name
        assert nbytes == int(t.n_bytes), t.name


def test_inspect_rejects_garbage(tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF\x03\x00\x00\x00" + b"\xff" * 16)
    r = subprocess.run([str(BUILD / "redline"), "inspect", str(bad)], capture_output=True,
                       text=True)
    assert r.returncode != 0
    assert "n_kv" in r.stderr and "offset 16" in r.stderr
    r = subprocess.run([str(BUILD / "redline"), "inspect", str(tmp_path / "missing.gguf")],
                       capture_output=True, text=True)
    assert r.returncode != 0 and "cannot open" in r.stderr
