"""`build/bench/ablation --tiny` (the technique table) on SmolLM2 end to end (< 90 s).

One full --tiny run (every row, JSON) and one run of a single row with the
--break-quality test hook (N(0,1) noise on that row's quality-pass logits).
Checks that every row is produced with its fields, that the figures are
consistent with each other (ratios vs naive, memory sums, lossless rows
equal in quality to their base), and that the quality columns are computed:
the broken run moves perplexity, KL and top-1 agreement.  Speed is not
asserted.
"""
import json
import math
import subprocess

import pytest

from conftest import BUILD, ROOT, model_path

ROWS = ["naive", "+ weight quant", "+ paged KV", "+ continuous batching", "+ prefix caching",
        "+ KV q8_0", "+ KV q4_0", "+ speculative", "+ structured output", "everything"]
FIELDS = ["tok_s", "throughput_x_naive", "ttft_p50_s", "ttft_p99_s", "tpot_p50_s", "tpot_p99_s",
          "ttft_p50_cut_pct", "tpot_p50_cut_pct", "weights_mib", "kv_peak_mib", "kv_pool_mib",
          "weights_kv_mib", "memory_cut_pct", "peak_rss_mib", "ppl", "ppl_delta_pct", "kl",
          "top1_agreement", "greedy_agreement_vs_base", "runs"]
LOSSLESS = ["+ paged KV", "+ continuous batching", "+ prefix caching", "+ speculative",
            "+ structured output"]


def ablation(*extra, timeout=150):
    exe = BUILD / "bench" / "ablation"
    if not exe.exists():
        pytest.fail(f"{exe} not built (make test-bins)")
    cmd = [str(exe), "-m", str(model_path("smollm2-135m")), "--tiny",
           "--json", "-t", "2", *extra]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    assert p.returncode == 0, f"{' '.join(cmd)}\nexit {p.returncode}\n{p.stderr}"
    return json.loads(p.stdout)


@pytest.fixture(scope="module")
def full():
    return ablation()


def rows(d):
    return {r["name"]: r for r in d["rows"]}


def test_every_row(full):
    assert [r["name"] for r in full["rows"]] == ROWS
    assert full["machine"]["cores"] >= 1 and full["machine"]["cpu"]
    assert full["machine"]["mem_bandwidth_gbs"] > 0
    w = full["workload"]
    assert w["tiny"] and w["requests"] == sum(w["kinds"].values())
    for r in full["rows"]:
        if not r["available"]:
            # only the KV-quantized rows may be refused, and they say why
            assert "KV" in r["name"] or r["name"] == "everything", r
            assert r["reason"]
            continue
        for f in FIELDS:
            assert f in r, f"{r['name']}: missing {f}"
        assert r["tok_s"] > 0 and r["ttft_p50_s"] > 0
        assert r["ttft_p99_s"] >= r["ttft_p50_s"] and r["tpot_p99_s"] >= r["tpot_p50_s"]
        assert abs(r["weights_kv_mib"] - r["weights_mib"] - r["kv_peak_mib"]) < 0.01
        assert 0 < r["kv_peak_mib"] <= r["kv_pool_mib"] + 1e-6
        assert r["peak_rss_mib"] > 0
        assert sum(x["output_tokens"] for x in r["runs"][:1]) > 0


def test_ratios_against_naive(full):
    by = rows(full)
    naive = by["naive"]
    assert naive["throughput_x_naive"] == pytest.approx(1.0)
    for r in full["rows"]:
        if r["available"]:
            assert r["throughput_x_naive"] == pytest.approx(r["tok_s"] / naive["tok_s"], rel=1e-3)
            assert r["memory_cut_pct"] == pytest.approx(
                100 * (1 - r["weights_kv_mib"] / naive["weights_kv_mib"]), abs=0.01)
    # f32 weights are larger than the file's Q4_1; naive reserves n_ctx per request
    assert by["+ weight quant"]["weights_mib"] < naive["weights_mib"] / 3
    assert by["+ paged KV"]["kv_peak_mib"] < by["+ weight quant"]["kv_peak_mib"]
    assert naive["kv_peak_mib"] == pytest.approx(naive["kv_pool_mib"], rel=0.05)


def test_quality_computed(full):
    by = rows(full)
    ref = full["reference"]["ppl"]
    assert ref > 1
    # naive: f32 weights, f16 KV: almost the reference
    assert by["naive"]["kl"] < 1e-3 and by["naive"]["top1_agreement"] > 0.9
    # quantized weights cost something measurable
    assert by["+ weight quant"]["kl"] > by["naive"]["kl"]
    for name in LOSSLESS:
        r = by[name]
        assert r["ppl"] == pytest.approx(by["+ weight quant"]["ppl"], rel=1e-6), name
        assert r["greedy_agreement_vs_base"] == pytest.approx(1.0), name
    if by["+ KV q4_0"]["available"]:
        assert by["+ KV q4_0"]["kl"] > by["+ prefix caching"]["kl"]


def test_break_quality_moves_figures(full):
    broken = rows(ablation("--break-quality", "--rows", "1"))
    good = rows(full)["+ weight quant"]
    b = broken["+ weight quant"]
    assert b["available"] and not broken["naive"]["available"]
    assert b["kl"] > good["kl"] + 0.05
    assert b["ppl"] > good["ppl"] * 1.05
    assert b["top1_agreement"] < good["top1_agreement"]
    for v in (b["kl"], b["ppl"]):
        assert math.isfinite(v)
