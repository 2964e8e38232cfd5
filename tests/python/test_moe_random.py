"""Mixture-of-experts models through the engine, on the tiny random-weight
files of tests/gen/randmodel.py (the logits and greedy tokens against the
NumPy reference are test_arch_random.py's MoE cases).

  - `redline run -m <moe file>` loads and generates (greedy twice: the same
    text), for every MoE family;
  - batch invariance through `redline serve` (paged KV, continuous
    batching, prefix cache off): four requests with different prompts (so
    their tokens route to different experts; the reference confirms the
    routing differs) get, when sent at once and sharing engine steps,
    exactly the greedy text and top-3 log-probabilities each got alone;
  - bad input: a file whose expert_used_count exceeds expert_count, or is
    0, is refused with a one-line error naming the key.
"""
import concurrent.futures
import subprocess
import sys

import numpy as np
import pytest

from conftest import BUILD, ROOT
from test_arch_random import prompt_ids, tiny_model

pytest.importorskip("gguf", reason="the gguf package (pip install gguf) writes the random-weight files")
sys.path.insert(0, str(ROOT / "tests" / "reference"))
sys.path.insert(0, str(ROOT / "tests" / "gen"))
import randmodel  # noqa: E402
import refmodel  # noqa: E402
from serverlib import Server  # noqa: E402

EXE = BUILD / "redline"


def redline_run(path, *args, check=True):
    if not EXE.exists():
        pytest.fail(f"{EXE} not built (make)")
    cmd = [str(EXE), "run", "-m", str(path), "-t", "2", "-c", "512", *args]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=ROOT)
    if check:
        assert p.returncode == 0, f"{' '.join(cmd)}\nexit {p.returncode}\n{p.stderr}"
    return p


@pytest.mark.parametrize("family", randmodel.MOE_FAMILIES)
def test_run_moe(family):
    path = tiny_model(family)
    text = "The committee met on Tuesday to discuss the budget for the new library."
    a = redline_run(path, "--raw", "-p", text, "-n", "24", "--temp", "0")
    b = redline_run(path, "--raw", "-p", text, "-n", "24", "--temp", "0")
    spec = randmodel.get_spec(family)
    assert f"({spec.arch}, {spec.n_layer} layers)" in a.stderr, a.stderr
    assert "generated 24 tokens" in a.stderr, a.stderr
    assert a.stdout == b.stdout and a.stdout


def layer0_experts(ref, ids):
    """The experts the reference routes the last prompt token to in layer 0."""
    hp, w = ref.hp, ref.w
    x = w["token_embd.weight"][np.asarray(ids)].astype(np.float32) * np.float32(hp.embd_scale)
    h = refmodel.rms_norm(x, w["blk.0.attn_norm.weight"], hp.eps)
    x = x + ref._attention(0, h, ref.new_cache(), 0) * np.float32(hp.residual_scale)
    norm = "blk.0.post_attention_norm.weight" if hp.arch == "gpt-oss" else "blk.0.ffn_norm.weight"
    h = refmodel.rms_norm(x[-1:], w[norm], hp.eps)
    lg = h.astype(np.float64) @ w["blk.0.ffn_gate_inp.weight"].T
    if "blk.0.ffn_gate_inp.bias" in w:
        lg = lg + w["blk.0.ffn_gate_inp.bias"]
    return frozenset(np.argsort(-lg[0], kind="stable")[:hp.n_expert_used].tolist())


@pytest.mark.parametrize("family", ["qwen2moe", "olmoe", "mixtral", "gpt-oss"])
def test_server_batch_invariance(family):
    path = tiny_model(family)
    ids = prompt_ids(path, 200)
    prompts = [ids[0:40], ids[45:95], ids[100:130], ids[130:200]]
    ref = refmodel.Model(str(path))
    routes = {layer0_experts(ref, p) for p in prompts}
    assert len(routes) > 1, f"all prompts route to the same experts {routes}"

    def complete(srv, p):
        # text plus the log-probabilities of the 3 best tokens at every step:
        # any difference in the logits shows, not only in the argmax
        st, _, body = srv.request("POST", "/v1/completions",
                                  {"prompt": p, "max_tokens": 24, "temperature": 0, "logprobs": 3})
        assert st == 200, body
        c = body["choices"][0]
        return c["text"], c["logprobs"]

    with Server("-np", "4", "-c", "512", "--no-prefix-cache", model=str(path)[:-len(".gguf")]) as srv:
        alone = [complete(srv, p) for p in prompts]
        steps0 = srv.metrics()["redline:engine_steps_total"]
        with concurrent.futures.ThreadPoolExecutor(4) as ex:
            together = list(ex.map(lambda p: complete(srv, p), prompts))
        steps = srv.metrics()["redline:engine_steps_total"] - steps0
    assert all(t for t, _ in alone) and all(lp["top_logprobs"] for _, lp in alone)
    assert steps < 4 * 24, f"{steps} steps: the requests did not share steps"
    assert together == alone


def test_bad_expert_counts(tmp_path):
    spec = randmodel.get_spec("mixtral")
    assets = randmodel.assets_dir()
    corpus = [str(ROOT / "tests" / "gen" / "README.md")]
    for val, needle in (("9", "'llama.expert_used_count' = 9 out of range [1, llama.expert_count = 8]"),
                        ("0", "'llama.expert_used_count' = 0 out of range")):
        out = tmp_path / f"bad-{val}.gguf"
        randmodel.generate(spec, str(out), assets, corpus, overrides=[("expert_used_count", val)],
                           log=lambda m: None)
        p = redline_run(out, "--raw", "-p", "hello", "-n", "4", check=False)
        assert p.returncode != 0 and p.stdout == ""
        assert needle in p.stderr, p.stderr
        assert len(p.stderr.strip().splitlines()) == 1, p.stderr
