"""KV-cache quantization on a real model: SmolLM2-135M with q8_0 / q8_64 /
q4_0 / iq4_nl KV pages (Walsh-Hadamard rotated, the default for quantized pages)
against f16 KV pages (build/tools/logits --kv/--kv-v).

Greedy decoding of this 135M Q4_1 model is chaotic: f32 KV pages already
change the f16-KV greedy tokens within 32 steps on most golden prompts
(near-tied logits), so "identical greedy tokens" is not a property any KV
format has here.  What is asserted instead, per golden prompt:

  - teacher-forced top-1 agreement: the f16-KV greedy continuation (32
    tokens) is fed back with --all, and the argmax at each continuation
    position under q8_0 (and q8_64) KV must equal the f16-KV argmax on >= 95% of
    positions overall (f32 KV is checked the same way as a yardstick);
    q4_0 and iq4_nl KV must reach >= 88% (measured with rotation: f32
    98.0%, q8_0 95.7%, q4_0 91.4%, iq4_nl 91.8%; before rotation q8_0 96.9%,
    q4_0 80.9%, when the q4_0 bound was 75%);
  - with REDLINE_KVQUANT_DIVERGENCE=1, the greedy first-divergence step of
    every format is printed too (the figures in docs/KVQUANT.md come from
    such a run; it asserts nothing, so CI leaves it out: 40 of the 88
    runs of the tool).

Run: .venv/bin/python tests/python/test_kvquant.py [-v]
"""

import json
import os
import subprocess
import sys
import tempfile
import unittest

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("REDLINE_BUILD", os.path.join(ROOT, "build"))
LOGITS = os.path.join(BUILD, "tools", "logits")
PROMPTS_JSON = os.path.join(ROOT, "tests", "data", "golden_prompts.json")
MODEL = os.path.join(ROOT, "models", "smollm2-135m.gguf")
N_GEN = 32
DIVERGENCE = os.environ.get("REDLINE_KVQUANT_DIVERGENCE") == "1"
MIN_AGREE = {"f32": 0.95, "q8_0": 0.95, "q8_64": 0.95, "q4_0": 0.88, "iq4_nl": 0.88}


def run_logits(ids, kv, extra):
    cmd = [LOGITS, "-m", MODEL, "--tokens", ",".join(map(str, ids)), "--kv", kv, "-t", "2"] + extra
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:6])}...: {r.stderr.strip()}")
    return json.loads(r.stdout)


def all_logits(ids, kv, path):
    run_logits(ids, kv, ["--all", "--out", path])
    return np.load(path)


@unittest.skipUnless(os.path.exists(LOGITS) and os.path.exists(MODEL), "needs build/tools/logits and the model")
class KVQuantGolden(unittest.TestCase):
    def test_agreement(self):
        with open(PROMPTS_JSON) as f:
            prompts = json.load(f)["smollm2"]["prompts"]
        agree = {k: [0, 0] for k in MIN_AGREE}
        with tempfile.TemporaryDirectory() as td:
            for pi, p in enumerate(prompts):
                ids = p["ids"]
                base = run_logits(ids, "f16", ["--greedy", str(N_GEN)])["greedy"]
                full = ids + base[:-1]  # positions len(ids)-1 .. predict base[0..]
                ref = all_logits(full, "f16", os.path.join(td, "f16.npy"))
                ref_top = ref[len(ids) - 1:].argmax(-1)
                line = []
                for kv in MIN_AGREE:
                    div = ""
                    if DIVERGENCE:
                        g = run_logits(ids, kv, ["--greedy", str(N_GEN)])["greedy"]
                        div = f"diverges@{next((i for i in range(N_GEN) if g[i] != base[i]), N_GEN)} "
                    lg = all_logits(full, kv, os.path.join(td, kv + ".npy"))
                    top = lg[len(ids) - 1:].argmax(-1)
                    agree[kv][0] += int((top == ref_top).sum())
                    agree[kv][1] += len(ref_top)
                    line.append(f"{kv}: {div}agree {int((top == ref_top).sum())}/{len(ref_top)}")
                print(f"prompt {pi}: " + "; ".join(line), file=sys.stderr)
        for kv, (a, n) in agree.items():
            print(f"{kv}: teacher-forced top-1 agreement with f16 KV {a}/{n} = {a / n:.3f}", file=sys.stderr)
            self.assertGreaterEqual(a / n, MIN_AGREE[kv], kv)


if __name__ == "__main__":
    unittest.main()
