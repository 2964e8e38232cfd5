"""Brief libFuzzer runs of every tests/fuzz/fuzz_*.c target (ASan+UBSan),
seeded with the committed regression inputs plus seeds each target's
`seeds_<name>()` below produces.  A crash, leak or timeout fails the test
and leaves the input in the work directory (add it to
tests/fuzz/regressions/<name>/).  Long runs: see docs/TESTING.md."""
import os
import shutil
import subprocess

import pytest

from conftest import MODELS, ROOT

FUZZ_BUILD = ROOT / "build-fuzz"
TARGETS = sorted(p.stem for p in (ROOT / "tests" / "fuzz").glob("fuzz_*.c"))
SECONDS = int(os.environ.get("REDLINE_FUZZ_SECONDS", "10"))


def seeds_fuzz_gguf(d):
    m = MODELS / "smollm2-135m.gguf"
    if m.exists():
        with open(m, "rb") as f:
            head = f.read(1 << 16)
        (d / "smollm2-head").write_bytes(head)
    try:
        import numpy as np
        import gguf
        w = gguf.GGUFWriter(str(d / "tiny.gguf"), "llama")
        w.add_uint32("llama.block_count", 1)
        w.add_array("arr", [1, 2, 3])
        w.add_array("strs", ["a", "bb"])
        w.add_tensor("t", np.zeros((2, 32), dtype=np.float32))
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
    except Exception as e:  # seeds are a help, not a requirement
        print("no gguf-package seed:", e)


def seeds_fuzz_request(d):
    """JSON bodies for tests/fuzz/fuzz_request.c; the first byte picks the
    endpoint (odd = chat, even = completion)."""
    import json
    chat = {"model": "m", "messages": [{"role": "system", "content": "be brief"},
                                        {"role": "user", "content": [{"type": "text", "text": "hi"}]}],
            "max_tokens": 16, "temperature": 0.7, "top_p": 0.9, "top_k": 40, "min_p": 0.05, "seed": 1,
            "stop": ["\n", "END"], "n": 2, "stream": True, "stream_options": {"include_usage": True},
            "logprobs": True, "top_logprobs": 3, "logit_bias": {"42": -100, "7": 2.5},
            "response_format": {"type": "json_schema", "json_schema": {"schema": {"type": "object"}}},
            "presence_penalty": 0.5, "frequency_penalty": -0.5, "repetition_penalty": 1.1}
    compl = {"prompt": "Once upon", "max_tokens": 8, "logprobs": 2, "echo": True, "stop": "x"}
    ids = {"prompt": [1, 2, 3, 49151], "max_completion_tokens": 4, "seed": -5}
    for i, (k, o) in enumerate([(1, chat), (0, compl), (0, ids), (1, {"messages": []}), (0, {"prompt": [[1]]})]):
        (d / f"req{i}").write_bytes(bytes([k]) + json.dumps(o).encode())


@pytest.mark.parametrize("name", TARGETS)
def test_fuzz_briefly(name, tmp_path):
    exe = FUZZ_BUILD / name
    if not exe.exists():
        if os.environ.get("REDLINE_NO_FUZZ") == "1":
            pytest.skip("fuzz build disabled (REDLINE_NO_FUZZ=1)")
        pytest.fail(f"{exe} not built (make fuzz)")
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    reg = ROOT / "tests" / "fuzz" / "regressions" / name.removeprefix("fuzz_")
    if reg.is_dir():
        for f in reg.iterdir():
            if f.is_file() and f.name != ".keep":
                shutil.copy(f, corpus / f.name)
    seeder = globals().get(f"seeds_{name}")
    if seeder:
        seeder(corpus)
    r = subprocess.run([str(exe), str(corpus), f"-max_total_time={SECONDS}", "-rss_limit_mb=2048",
                        "-timeout=10", f"-artifact_prefix={tmp_path}/", "-print_final_stats=1"],
                       capture_output=True, text=True, timeout=SECONDS * 4 + 60, cwd=str(ROOT))
    tail = r.stderr[-3000:]
    assert r.returncode == 0, f"{name} found a failure:\n{tail}"
    assert "stat::number_of_executed_units" in r.stderr, tail
