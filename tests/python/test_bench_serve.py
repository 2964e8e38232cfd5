"""`redline bench-serve --json` on SmolLM2 with tiny settings (< 60 s).

Three runs of 8 requests (prompt 24 random token ids, 6 output tokens,
ignore_eos, greedy, max_tokens 64 so the naive baseline must reserve for
more than a request uses): paged, --naive, and paged with a 48-token shared
prefix and Poisson arrivals.  Checks that the JSON fields exist and agree
with each other and with the workload, not how fast anything is.
"""
import json
import subprocess

import pytest

from conftest import BUILD, model_path

N, PROMPT, OUT, SHARED = 8, 24, 6, 48
COMMON = ["-n", str(N), "--prompt-len", str(PROMPT), "--output-len", str(OUT), "-np", str(N),
          "-b", "128", "-c", "256", "-t", "1", "--max-tokens", "64", "--seed", "7", "--json"]

FIELDS = ["model", "mode", "prompt_source", "n_requests", "prompt_len", "output_len",
          "shared_prefix", "rate", "max_seqs", "batch_tokens", "n_ctx", "duration_s", "completed",
          "failed", "requests_per_s", "prompt_tokens", "cached_prompt_tokens",
          "computed_prompt_tokens", "prefill_saved_frac", "hit_requests",
          "prefill_saved_frac_on_hits", "output_tokens", "prompt_tok_s", "output_tok_s",
          "total_tok_s", "ttft_s", "tpot_s", "itl_s", "kv_utilization", "kv_peak_used_frac",
          "kv_blocks_total", "block_size", "kv_bytes_per_token", "kv_budget_tokens",
          "kv_budget_bytes", "seq_tokens", "seqs_fit", "peak_running", "prefix_queries",
          "prefix_hits", "prefix_hit_rate", "preemptions", "steps", "busy_s"]


def bench(*extra, timeout=120):
    exe = BUILD / "redline"
    if not exe.exists():
        pytest.fail(f"{exe} not built (make)")
    cmd = [str(exe), "bench-serve", "-m", str(model_path("smollm2-135m")), *COMMON, *extra]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, f"{' '.join(cmd)}\nexit {p.returncode}\n{p.stderr}"
    return json.loads(p.stdout)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    dump = tmp_path_factory.mktemp("bench") / "workload.json"
    return {
        "paged": bench(),
        "naive": bench("--naive"),
        "shared": bench("--shared-prefix", str(SHARED), "--rate", "50", "--dump-workload", str(dump)),
        "dump": json.loads(dump.read_text()),
    }


def check_consistent(d, shared=0):
    for f in FIELDS:
        assert f in d, f"missing field {f}"
    assert d["n_requests"] == N and d["completed"] == N and d["failed"] == 0
    # ignore_eos and fixed lengths: every request yields exactly OUT tokens
    assert d["output_tokens"] == N * OUT
    # SmolLM2 adds no BOS: prompts are exactly shared + own tokens
    assert d["prompt_tokens"] == N * (shared + PROMPT)
    assert d["computed_prompt_tokens"] == d["prompt_tokens"] - d["cached_prompt_tokens"]
    dur = d["duration_s"]
    assert dur > 0
    assert d["total_tok_s"] == pytest.approx((d["prompt_tokens"] + d["output_tokens"]) / dur, rel=1e-3)
    assert d["output_tok_s"] == pytest.approx(d["output_tokens"] / dur, rel=1e-3)
    assert d["requests_per_s"] == pytest.approx(N / dur, rel=1e-3)
    # one TTFT and one TPOT per request, OUT-1 inter-token gaps each
    assert d["ttft_s"]["n"] == N and d["tpot_s"]["n"] == N
    assert d["itl_s"]["n"] == N * (OUT - 1)
    for k in ("ttft_s", "tpot_s", "itl_s"):
        m = d[k]
        assert 0 < m["p50"] <= m["p99"] + 1e-12, (k, m)
        assert m["mean"] > 0
    assert max(d["ttft_s"]["p99"], d["tpot_s"]["p99"]) <= dur
    assert 0 < d["kv_utilization"]
    assert 0 < d["kv_peak_used_frac"] <= 1
    assert d["kv_budget_tokens"] == d["kv_blocks_total"] * d["block_size"]
    assert d["kv_budget_bytes"] == d["kv_budget_tokens"] * d["kv_bytes_per_token"]
    per_seq = -(-d["seq_tokens"] // d["block_size"]) * d["block_size"]
    assert d["seqs_fit"] == d["kv_budget_tokens"] // per_seq
    assert 1 <= d["peak_running"] <= N
    assert d["preemptions"] == 0
    assert d["steps"] >= OUT
    assert 0 <= d["prefix_hits"] <= d["prefix_queries"]


def test_paged(runs):
    d = runs["paged"]
    check_consistent(d)
    assert d["mode"] == "paged" and d["prompt_source"] == "random"
    # paged: at most one partly filled block per sequence
    assert d["kv_utilization"] > 0.6
    assert d["seq_tokens"] == PROMPT + OUT


def test_naive(runs):
    d, p = runs["naive"], runs["paged"]
    check_consistent(d)
    assert d["mode"] == "naive" and d["prefix_cache"] is False
    # the baseline reserves prompt + max_tokens (64) for each request
    assert d["seq_tokens"] == PROMPT + 64
    assert d["seqs_fit"] < p["seqs_fit"]
    assert d["kv_utilization"] < p["kv_utilization"]
    assert d["kv_utilization"] <= (PROMPT + OUT) / (PROMPT + 64) + 1e-9
    assert d["prefix_queries"] == 0 and d["cached_prompt_tokens"] == 0


def test_shared_prefix(runs):
    d = runs["shared"]
    check_consistent(d, SHARED)
    assert d["shared_prefix"] == SHARED and d["rate"] == 50
    assert d["prefix_hit_rate"] > 0 and d["prefix_hits"] > 0
    assert d["hit_requests"] >= 1 and d["cached_prompt_tokens"] > 0
    # a hit adopts whole blocks of the shared prefix, never more than it
    bs = d["block_size"]
    assert d["cached_prompt_tokens"] <= d["hit_requests"] * (SHARED // bs) * bs
    assert d["cached_prompt_tokens"] % bs == 0
    assert 0 < d["prefill_saved_frac"] <= d["prefill_saved_frac_on_hits"] < 1


def test_dumped_workload(runs):
    w = runs["dump"]
    reqs = w["requests"]
    assert len(reqs) == N and w["shared_prefix"] == SHARED and w["ignore_eos"] is True
    head = reqs[0]["prompt"][:SHARED]
    arrivals = [r["arrival_s"] for r in reqs]
    assert arrivals == sorted(arrivals) and arrivals[0] > 0
    for r in reqs:
        assert len(r["prompt"]) == SHARED + PROMPT and r["prompt"][:SHARED] == head
        assert r["output_len"] == OUT
    # the own parts are seeded random draws: distinct between requests
    assert len({tuple(r["prompt"][SHARED:]) for r in reqs}) == N


def test_bad_flags():
    exe = BUILD / "redline"
    for args, word in ([["--rate", "-1"], "--rate"], [["--prompt-len", "9:3"], "--prompt-len"],
                       [["--kv-mem", "lots"], "--kv-mem"], [["--bogus"], "--bogus"],
                       [["--output-len", "8", "--max-tokens", "4"], "--max-tokens"]):
        p = subprocess.run([str(exe), "bench-serve", *args], capture_output=True, text=True, timeout=30)
        assert p.returncode == 2, (args, p.stderr)
        assert word in p.stderr and p.stdout == ""
