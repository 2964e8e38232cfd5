"""The architectures of the popular dense families on random-weight files:
redline's logits and greedy tokens against the NumPy reference.

tests/gen/randmodel.py writes each family's `tiny` file (real vocabulary,
the family's structure: Llama 3 rope_freqs, Mistral head_dim, Qwen3 Q/K
norms, YaRN, Phi-3 fused tensors + LongRoPE + sliding window, Gemma 2
softcaps + alternating windows + post norms, Granite multipliers; the
mixture-of-experts qwen3moe, qwen2moe with its shared expert, Mixtral,
OLMoE's full-width q/k norms, Granite-MoE, gpt-oss with MXFP4 experts,
sinks, biases, alternating windows and YaRN) into
.cache/randmodels/ (fitted on tests/gen/README.md and tests/reference/
README.md; reused while the generator, the reference, that corpus and the
vocab files are unchanged, stale files removed).  Its weights make a peaked distribution, so a wrong
rope, norm, scale or window changes the logits and the argmax.

Per file (build/tools/logits, as test_golden.py runs it, with -c N_CTX):
  exact path (--exact): final-prompt-position logits cosine >= 0.9999 and
      max |difference| <= 1e-4 * max(1, max |logit|) with
      tests/reference/refmodel.py; 32 greedy tokens identical to the
      reference's argmax at every position (teacher-forced), except at a
      near-tie (top-2 gap < 1e-3), where the comparison stops;
  fast path: cosine >= 0.99;
  batching: prefill vs single steps vs two interleaved sequences <= 1e-5.
Prompts are ~150 tokens (longer than the tiny sliding windows, 16 and 24,
and than the LongRoPE/YaRN original context, 64); phi3 runs at two context
sizes, selecting LongRoPE's long (n_ctx 256 > 64) and short (n_ctx 64)
factors as llama.cpp does.  phi3-swa follows Hugging Face (the window
applies to every layer; llama.cpp 0.3.16 ignores phi3 windows).
"""
import hashlib
import os
import sys

import numpy as np
import pytest

from conftest import BUILD, ROOT, llamacpp_assets_dir
from test_golden import cosine, run_logits  # build/tools/logits as the golden test runs it

pytest.importorskip("gguf", reason="the gguf package (pip install gguf) writes the random-weight files")
sys.path.insert(0, str(ROOT / "tests" / "reference"))
sys.path.insert(0, str(ROOT / "tests" / "gen"))
import refmodel  # noqa: E402
import randmodel  # noqa: E402

LOGITS = BUILD / "tools" / "logits"
CACHE = ROOT / ".cache" / "randmodels"
N_GREEDY = 32
EXACT_COS = 0.9999
# exact path: max |logit difference| <= EXACT_REL * max(1, max |logit|); cosine
# alone misses pure logit scales (Granite's logit_scale, Gemma 2's final softcap)
EXACT_REL = 1e-4
FAST_COS = 0.99
BATCH_BOUND = 1e-5
TIE_GAP = 1e-3
# the generator's fit text: files of this test's own area (not docs/, which other work edits)
CORPUS = [ROOT / "tests" / "gen" / "README.md", ROOT / "tests" / "reference" / "README.md"]
TEXT = ("The committee met on Tuesday to discuss the budget for the new library. "
        "Members agreed that the library should open in the spring, and that the "
        "budget should cover books, staff and a small garden. The chair asked each "
        "member to write a short report before the next meeting. The library will "
        "open in the spring; the garden will open later in the summer. Each report "
        "should describe the books, the staff and the garden, and the budget for "
        "each of them.\n")

# (case id, family, context size, prompt tokens)
CASES = [("llama3", "llama3", 512, 150), ("mistral", "mistral", 512, 150),
         ("qwen3", "qwen3", 512, 150), ("qwen3-yarn", "qwen3-yarn", 256, 150),
         ("phi3-long", "phi3", 256, 150), ("phi3-short", "phi3", 64, 30),
         ("phi3-swa", "phi3-swa", 512, 150), ("gemma2", "gemma2", 512, 150),
         ("granite", "granite", 512, 150),
         # mixture of experts (tests/gen/randmodel.py MOE_FAMILIES)
         ("qwen3moe", "qwen3moe", 512, 150), ("qwen2moe", "qwen2moe", 512, 150),
         ("mixtral", "mixtral", 512, 150), ("olmoe", "olmoe", 512, 150),
         ("granitemoe", "granitemoe", 512, 150), ("gpt-oss", "gpt-oss", 256, 150)]


def tiny_model(family):
    """Path of the family's tiny file, generated when missing or stale."""
    assets = llamacpp_assets_dir()
    spec = randmodel.get_spec(family, "tiny")
    h = hashlib.sha256()
    for f in [randmodel.__file__, refmodel.__file__] + CORPUS:
        h.update(open(f, "rb").read())
    h.update(open(os.path.join(assets, ".stamp"), "rb").read())
    gem = ROOT / "models" / "gemma3-270m.gguf"
    h.update(f"{family}:{gem.exists()}".encode())
    path = CACHE / f"{family}-tiny-{h.hexdigest()[:12]}.gguf"
    if not path.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        for old in CACHE.glob(f"{family}-tiny-*.gguf"):  # stale: another generator version
            old.unlink(missing_ok=True)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        randmodel.generate(spec, str(tmp), str(assets), [str(c) for c in CORPUS], log=lambda m: None,
                           gemma_fallback=True)
        os.replace(tmp, path)
    return path


def prompt_ids(path, n):
    m = refmodel.GGUFFile(str(path), keep_arrays=True)
    toks, types = m.meta["tokenizer.ggml.tokens"], m.meta["tokenizer.ggml.token_type"]
    ids = randmodel.greedy_tokenize(TEXT * 4, toks, types, m.meta["tokenizer.ggml.model"]).tolist()
    if m.meta.get("tokenizer.ggml.add_bos_token") and m.meta.get("tokenizer.ggml.bos_token_id") is not None:
        ids = [int(m.meta["tokenizer.ggml.bos_token_id"])] + ids
    return ids[:n]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_arch_random(case):
    name, family, n_ctx, n_prompt = case
    if not LOGITS.exists():
        pytest.fail(f"{LOGITS} missing (make test-bins)")
    path = tiny_model(family)
    ids = prompt_ids(path, n_prompt)
    ref = refmodel.Model(str(path), n_ctx=n_ctx, phi3_swa=True)
    ex = run_logits(str(path), ids, "-c", str(n_ctx), "--exact", "--greedy", str(N_GREEDY))
    fa = run_logits(str(path), ids, "-c", str(n_ctx), "--greedy", str(N_GREEDY), "--check-batch")
    full = ids + ex["greedy"][:-1]
    rl = ref.forward(full, ref.new_cache(), all_logits=True)
    last = rl[len(ids) - 1]
    ce, cf = cosine(ex["logits"], last), cosine(fa["logits"], last)
    de = float(np.abs(ex["logits"] - last).max())
    print(f"{name}: exact cos {ce:.7f} max|d| {de:.2e}, fast cos {cf:.5f}")
    assert ce >= EXACT_COS, f"exact-path cosine {ce:.6f} (max |diff| {de:.3g})"
    bound = EXACT_REL * max(1.0, float(np.abs(last).max()))
    assert de <= bound, f"exact-path max |logit diff| {de:.3g} > {bound:.3g} (cosine {ce:.7f})"
    for i, t in enumerate(ex["greedy"]):
        row = rl[len(ids) - 1 + i]
        r = int(np.argmax(row))
        if r != t:
            top2 = np.sort(row)[-2:]
            tie = abs(float(row[t]) - float(row[r])) < TIE_GAP or float(top2[1] - top2[0]) < TIE_GAP
            assert tie, f"greedy token {i}: redline {t}, reference {r} (logits {row[t]:.5f} vs {row[r]:.5f})"
            break
    assert cf >= FAST_COS, f"fast-path cosine {cf:.5f}"
    assert fa["prefill_vs_step_max_abs"] <= BATCH_BOUND
    assert fa["multiseq_max_abs"] <= BATCH_BOUND
