#!/usr/bin/env python3
"""Validate refmodel.py against Hugging Face transformers on the same GGUF.

  validate_hf.py --model PATH [--greedy 32] [--prompt TEXT ...]

transformers dequantizes the GGUF into a float32 torch model (it undoes the
llama Q/K permutation and gemma's folded +1 itself), so both sides see the
same weights. For each prompt it prints the max abs diff and cosine of the
final-position logits (and of all positions), whether the argmax agrees,
and whether N greedy tokens are identical. Needs torch (CPU is fine).
Exit status 1 if any greedy sequence differs.
"""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import refmodel  # noqa: E402  (first: it sets the BLAS thread count)

import numpy as np  # noqa: E402

DEFAULT_PROMPTS = [
    "The capital of France is",
    "Once upon a time, in a small village by the sea, there lived",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "Water boils at 100 degrees Celsius. The chemical formula of water is",
]


# ~700 tokens: longer than gemma3's 512-token sliding window, so the local
# layers' window mask is exercised (and RoPE at larger positions).
LONG_PROMPT = " ".join(
    f"Day {i}: the caravan travelled {3 * i + 7} miles past {c} and camped by the {r}."
    for i, (c, r) in enumerate(
        [(c, r) for c in ("Avalon", "Brightwater", "Cinderford", "Dunmore", "Eastwick",
                          "Fairhaven", "Glenrock", "Highmoor")
         for r in ("river", "old mill", "quiet lake", "stone bridge", "pine forest")]))
LONG_PROMPT += " Looking back on the whole journey, the leader of the caravan wrote that"


def cos(a, b):
    a = a.astype(np.float64).ravel()
    b = b.astype(np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def hf_greedy(hf, ids, n):
    """Plain argmax loop with HF's own KV cache (no EOS stop, no processors)."""
    import torch
    out = hf(torch.tensor([ids]), use_cache=True)
    past, logits, toks = out.past_key_values, out.logits[0, -1], []
    for i in range(n):
        t = int(torch.argmax(logits))
        toks.append(t)
        if i + 1 < n:
            out = hf(torch.tensor([[t]]), past_key_values=past, use_cache=True)
            past, logits = out.past_key_values, out.logits[0, -1]
    return toks


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--greedy", type=int, default=32)
    ap.add_argument("--prompt", action="append")
    ap.add_argument("--long", action="store_true", help="also run a ~700-token prompt")
    a = ap.parse_args()

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    torch.set_grad_enabled(False)

    d, name = os.path.split(os.path.abspath(a.model))
    t0 = time.time()
    tok = AutoTokenizer.from_pretrained(d, gguf_file=name)
    hf = AutoModelForCausalLM.from_pretrained(d, gguf_file=name, dtype=torch.float32)
    hf.eval()
    print(f"HF load {time.time() - t0:.1f}s  {type(hf).__name__}", flush=True)
    t0 = time.time()
    ref = refmodel.Model(a.model)
    print(f"ref load {time.time() - t0:.1f}s  arch={ref.hp.arch}", flush=True)

    ok = True
    worst_diff, worst_cos = 0.0, 1.0
    prompts = list(a.prompt or DEFAULT_PROMPTS) + ([LONG_PROMPT] if a.long else [])
    for text in prompts:
        ids = tok(text)["input_ids"]
        if ref.hp.bos_id is not None and ref.meta.get("tokenizer.ggml.add_bos_token") \
                and (not ids or ids[0] != ref.hp.bos_id):
            ids = [ref.hp.bos_id] + ids
        x = torch.tensor([ids])
        hf_all = hf(x).logits[0].float().numpy()
        cache = ref.new_cache()
        ref_all = ref.forward(ids, cache, all_logits=True)
        dl = float(np.abs(hf_all[-1] - ref_all[-1]).max())
        da = float(np.abs(hf_all - ref_all).max())
        cl, ca = cos(hf_all[-1], ref_all[-1]), cos(hf_all, ref_all)
        am = int(np.argmax(hf_all[-1])) == int(np.argmax(ref_all[-1]))
        worst_diff, worst_cos = max(worst_diff, dl), min(worst_cos, cl)

        g_hf = hf_greedy(hf, ids, a.greedy)
        g_ref, _ = ref.greedy(ids, a.greedy)
        # self-consistency: one batched pass over prompt + generated tokens
        # must predict the same tokens as the incremental KV-cache decode
        batch = ref.forward(ids + g_ref[:-1], ref.new_cache(), all_logits=True)[len(ids) - 1:]
        self_ok = [int(t) for t in np.argmax(batch, axis=-1)] == g_ref
        ok &= self_ok
        n_same = next((i for i, (p, q) in enumerate(zip(g_hf, g_ref)) if p != q), len(g_ref))
        same = g_hf == g_ref
        ok &= same
        print(f"\nprompt {text[:70]!r}  ({len(ids)} tokens)")
        print(f"  last-pos logits: max|diff| {dl:.3e}  1-cos {1 - cl:.2e}  argmax agree {am}"
              f"  (logit range {hf_all[-1].min():.2f}..{hf_all[-1].max():.2f})")
        print(f"  all positions  : max|diff| {da:.3e}  1-cos {1 - ca:.2e}")
        print(f"  greedy {a.greedy}: {'IDENTICAL' if same else f'DIFFER at {n_same}'}")
        print(f"  ref batched == ref incremental: {self_ok}")
        print(f"  text: {tok.decode(g_ref)[:160]!r}")
        if not same:
            print(f"  hf : {g_hf}\n  ref: {g_ref}")
    print(f"\nSUMMARY {ref.hp.arch}: worst last-pos max|diff| {worst_diff:.3e}, "
          f"worst 1-cos {1 - worst_cos:.2e}, greedy all identical: {ok}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
