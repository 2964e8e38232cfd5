#!/usr/bin/env python3
"""Validate the NumPy reference (tests/reference/refmodel.py) against llama.cpp
on random-weight files of each family (tests/gen/randmodel.py).  A bench tool,
not a CI test: it needs llama.cpp's llama-perplexity (bench/peer-llamacpp
--build-only) and, at real shapes, tens of minutes per family on 2 cores.

  tests/gen/validate_llamacpp.py [--preset tiny|real] [--family F ...]
        [--text FILE] [--corpus FILE ...] [--ctx 512] [--chunks 4] [--q4km]
        [--variants] [--dir /work/randmodels] [--json OUT.json]

Per family: the file is generated (fitted on --corpus, default --text) unless
DIR/FAMILY-PRESET.gguf exists; llama-perplexity runs on --text with -c CTX
--chunks N -t 2 --kl-divergence-base DUMP, which stores the tokens and, per
scored position (the second half of each chunk), every log-probability within
16 nats of the top one (uint16, step <= 2.5e-4).  The reference runs the same
tokens (BOS first when the file adds one, as llama-perplexity does) with
n_ctx = CTX, and phi3 windows off (llama.cpp 0.3.16 ignores them).  Reported:
  ppl_llama (llama-perplexity's estimate), ppl_ref (the reference on the same
  scored tokens), top-1 agreement, max and mean |log p difference| over the
  dumped entries, KL(llama || ref) over the dumped entries.
--q4km also quantizes with llama-quantize and compares on the Q4_K_M file
(the reference dequantizes with gguf.quants).  --variants writes copies of
the F16 file with one hyperparameter deliberately wrong (same weights) and
reports llama-perplexity's PPL on each: how visible such a mistake is.
--redline also runs redline (build/redline perplexity --llama-windows, the
same windows and scored tokens) on each file and reports, against llama.cpp's
dump: ppl_rl, top1_rl, and max/mean |log p difference| over redline's top-32
entries that llama.cpp dumped; --no-ref skips the NumPy reference (hours at
real shapes).  --float-act (with --redline) also runs redline --weights f32
(the file's weights dequantized at load, float activations: the exact result
for those weights) and reports llama.cpp and redline (both with 8-bit
activations) against it: PPL, top-1 agreement with the float argmax, mean and
max |log p(target) difference|.  --keep-dump keeps llama-perplexity's dump
(FILE.cCTX.kld, its PPL in FILE.cCTX.kld.ppl) and reuses it on the next run.
--model FILE ... runs llama-perplexity and redline on existing files (the
real-shape MoE Q4_K_M files, whose intermediates are deleted); --rl-float
f32|f16 adds redline on weights dequantized at load with float activations
(which side of a gap is nearer exact).
--ref-variants runs the reference instead on each variant and on the correct
file, for the first 256 tokens of --text (greedy-tokenized, BOS first), and
reports what the CI test (tests/python/test_arch_random.py) would see of the
mistake: the minimum cosine of the logits over positions and the fraction of
positions whose argmax is unchanged.
"""

import argparse
import json
import math
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "reference"))
import randmodel  # noqa: E402
import refmodel  # noqa: E402

import numpy as np  # noqa: E402

import gguf  # noqa: E402

LCPP_BIN = os.environ.get("LLAMA_CPP_BIN") or os.path.join(ROOT, "bench", ".cache", "llama.cpp-build-0.3.16", "bin")

# deliberately wrong metadata per family: (label, [(key, value)] to set, [keys/tensors] to drop)
VARIANTS = {
    "llama3": [("rope_freqs.weight dropped (no llama3 scaling)", [], ["rope_freqs.weight"]),
               ("rope.freq_base 500000 -> 100000", [("rope.freq_base", "100000")], [])],
    "mistral": [("rope.freq_base 1e6 -> 1e4", [("rope.freq_base", "10000")], []),
                ("rms eps 1e-5 -> 1e-2", [("attention.layer_norm_rms_epsilon", "0.01")], [])],
    "qwen3": [("rope.freq_base 1e6 -> 1e4", [("rope.freq_base", "10000")], []),
              ("rms eps 1e-6 -> 1e-2 (also the q/k norms)", [("attention.layer_norm_rms_epsilon", "0.01")], [])],
    "qwen3-yarn": [("YaRN dropped", [], ["rope.scaling.type", "rope.scaling.factor"])],
    "phi3": [("LongRoPE attention factor dropped", [], ["rope.scaling.attn_factor"]),
             ("long/short LongRoPE factors swapped", [("rope.scaling.original_context_length", "SWAPCTX")], [])],
    "phi3-swa": [("rope.freq_base 1e4 -> 1e5", [("rope.freq_base", "100000")], [])],
    "gemma2": [("final softcap 30 -> 1e4 (none)", [("final_logit_softcapping", "10000")], []),
               ("attention softcap 50 -> 1e4 (none)", [("attn_logit_softcapping", "10000")], []),
               ("sliding window off", [("attention.sliding_window", "1000000")], [])],
    "granite": [("logit_scale 8 -> 1", [("logit_scale", "1.0")], []),
                ("residual_scale 0.22 -> 1", [("residual_scale", "1.0")], []),
                ("attention.scale 1/64 -> 1/8 (=1/sqrt(head_dim))", [("attention.scale", "0.125")], []),
                ("embedding_scale 12 -> 1", [("embedding_scale", "1.0")], [])],
}


def run(cmd, timeout=7200):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:3])}: exit {p.returncode}: {p.stderr[-2000:]}")
    return p.stdout + p.stderr


def llama_ppl(model, text, ctx, chunks, dump=None, extra=()):
    cmd = [os.path.join(LCPP_BIN, "llama-perplexity"), "-m", model, "-f", text, "-c", str(ctx),
           "--chunks", str(chunks), "-t", "2", *extra]
    if dump:
        cmd += ["--kl-divergence-base", dump]
    out = run(cmd)
    m = re.search(r"Final estimate: PPL = ([0-9.]+) \+/- ([0-9.]+)", out)
    if not m:
        raise RuntimeError(f"no PPL in llama-perplexity output:\n{out[-1500:]}")
    return float(m.group(1)), float(m.group(2))


def read_dump(path):
    """(n_ctx, n_vocab, tokens (n_chunk, n_ctx), log-probs (n_chunk, n_scored, n_vocab), -inf
    where llama.cpp stored nothing)."""
    b = open(path, "rb").read()
    if b[:8] != b"_logits_":
        raise ValueError(f"{path}: not a llama-perplexity logits file")
    n_ctx, n_vocab, n_chunk = (int(v) for v in np.frombuffer(b, np.int32, 3, 8))
    off = 20
    toks = np.frombuffer(b, np.int32, n_chunk * n_ctx, off).reshape(n_chunk, n_ctx)
    off += 4 * n_chunk * n_ctx
    nv = 2 * ((n_vocab + 1) // 2) + 4
    n_sc = n_ctx - 1 - n_ctx // 2
    rec = np.frombuffer(b, np.uint16, n_chunk * n_sc * nv, off).reshape(n_chunk, n_sc, nv)
    hdr = np.ascontiguousarray(rec[..., :4]).view(np.float32)   # scale, min log-prob
    q = rec[..., 4:4 + n_vocab].astype(np.float32)
    lp = hdr[..., 1:2] + hdr[..., 0:1] * q
    lp[q == 0] = -np.inf
    return n_ctx, n_vocab, toks, lp


def compare(model_path, dump, ctx, lazy):
    n_ctx, n_vocab, toks, lp_l = read_dump(dump)
    m = refmodel.Model(model_path, n_ctx=ctx, lazy=lazy, phi3_swa=False)
    add_bos = bool(m.meta.get("tokenizer.ggml.add_bos_token", False))
    bos = m.meta.get("tokenizer.ggml.bos_token_id")
    first = n_ctx // 2
    nll, agree, dmax, dsum, dn, kl, n = 0.0, 0, 0.0, 0.0, 0, 0.0, 0
    for c in range(toks.shape[0]):
        t = toks[c].astype(np.int64).copy()
        if add_bos and bos is not None:
            t[0] = bos
        lg = m.forward(t, m.new_cache(), all_logits=True)[first:n_ctx - 1].astype(np.float64)
        lr = lg - lg.max(1, keepdims=True)
        lr -= np.log(np.exp(lr).sum(1, keepdims=True))
        tgt = toks[c][first + 1:]
        nll -= lr[np.arange(len(tgt)), tgt].sum()
        ll = lp_l[c]
        agree += int((np.argmax(ll, 1) == np.argmax(lr, 1)).sum())
        ok = np.isfinite(ll)
        d = np.abs(ll - lr)[ok]
        dmax, dsum, dn = max(dmax, float(d.max())), dsum + float(d.sum()), dn + d.size
        pl = np.where(ok, np.exp(np.where(ok, ll, 0)), 0.0)
        kl += float((pl * np.where(ok, ll - lr, 0)).sum())
        n += len(tgt)
    return dict(ppl_ref=math.exp(nll / n), top1=agree / n, max_dlogp=dmax, mean_dlogp=dsum / dn,
                kl=kl / n, n_scored=n)


def compare_redline(model_path, text, dump, ctx, chunks, threads=2, weights="stored", records=None):
    """redline perplexity on llama-perplexity's windows against its dump;
    weights "f32" dequantizes the weights at load and keeps activations in
    float (the exact result for the file's weights).  records: a list that
    receives redline's per-position records (n_chunk, n_scored)."""
    n_ctx, n_vocab, toks, lp_l = read_dump(dump)
    dist = dump + ".rlpd"
    exe = os.path.join(ROOT, "build", "redline")
    out = run([exe, "perplexity", "-m", model_path, "-f", text, "-c", str(ctx), "--chunks", str(chunks),
               "-t", str(threads), "--llama-windows", "--save-dist", dist, "--weights", weights])
    b = open(dist, "rb").read()
    os.unlink(dist)
    k, nv, n = np.frombuffer(b, np.uint32, 1, 8)[0], np.frombuffer(b, np.uint32, 1, 12)[0], \
        int(np.frombuffer(b, np.uint64, 1, 24)[0])
    if nv != n_vocab:
        raise RuntimeError(f"redline vocab {nv} != llama.cpp {n_vocab}")
    rec = np.dtype([("target", "<i4"), ("ids", "<i4", (k,)), ("lp", "<f4", (k,)), ("rest", "<f4"),
                    ("tlp", "<f4")])
    r = np.frombuffer(b, rec, n, 32)
    n_sc = lp_l.shape[1]
    if n != toks.shape[0] * n_sc:
        raise RuntimeError(f"redline scored {n} tokens, llama.cpp {toks.shape[0] * n_sc}:\n{out[-800:]}")
    r = r.reshape(toks.shape[0], n_sc)
    want = toks[:, n_ctx // 2 + 1:]
    if not np.array_equal(r["target"], want):
        bad = np.argwhere(r["target"] != want)[0]
        raise RuntimeError(f"tokens differ from llama.cpp's at chunk {bad[0]} scored slot {bad[1]}: "
                           f"redline {r['target'][tuple(bad)]}, llama.cpp {want[tuple(bad)]}")
    if records is not None:
        records.append(r)
    top1 = float((np.argmax(lp_l, 2) == r["ids"][..., 0]).mean())
    ll = np.take_along_axis(lp_l, r["ids"].astype(np.int64), 2)
    ok = np.isfinite(ll) & np.isfinite(r["lp"])
    d = np.abs(ll - r["lp"])[ok]
    lt = np.take_along_axis(lp_l, want[..., None].astype(np.int64), 2)[..., 0]  # llama.cpp's log p(target)
    okt = np.isfinite(lt)
    dt = np.abs(lt[okt] - r["tlp"][okt])
    m = re.search(r"perplexity: ([0-9.]+)", out)
    return dict(ppl_rl=math.exp(-float(r["tlp"].astype(np.float64).mean())), ppl_rl_printed=float(m.group(1)),
                top1_rl=top1, max_dlogp_rl=float(d.max()), mean_dlogp_rl=float(d.mean()),
                mean_dtlp_rl=float(dt.mean()), max_dtlp_rl=float(dt.max()), n_scored_rl=n)


def peer_self(model, text, ctx, chunks, dump):
    """llama.cpp against itself: llama-perplexity again with --no-repack (the
    same 8-bit activations, the same weights, only the order of the float
    additions in its matmuls changes) on the same windows, compared with the
    default run's dump: how far two runs of the reference implementation
    agree when nothing but float summation order differs."""
    dump2 = dump + ".norepack"
    ppl2, _ = llama_ppl(model, text, ctx, chunks, dump2, extra=("--no-repack",))
    _, _, toks, lp_a = read_dump(dump)
    _, _, _, lp_b = read_dump(dump2)
    os.unlink(dump2)
    tgt = toks[:, toks.shape[1] // 2 + 1:].astype(np.int64)
    ta = np.take_along_axis(lp_a, tgt[..., None], 2)[..., 0]
    tb = np.take_along_axis(lp_b, tgt[..., None], 2)[..., 0]
    ok = np.isfinite(ta) & np.isfinite(tb)
    d = np.abs(ta[ok] - tb[ok])
    return dict(ppl_llama_norepack=ppl2, top1_llama_self=float((np.argmax(lp_a, 2) == np.argmax(lp_b, 2)).mean()),
                mean_dlogp_llama_self=float(d.mean()), max_dlogp_llama_self=float(d.max()))


def against_float(dump, r8, rf):
    """llama.cpp (its dump) and redline with 8-bit activations (records r8)
    each against redline with float activations (records rf) on the same
    positions: top-1 agreement with the float argmax and mean/max |log p
    difference| of the target token."""
    _, _, toks, lp_l = read_dump(dump)
    tgt = toks[:, toks.shape[1] // 2 + 1:].astype(np.int64)
    lt = np.take_along_axis(lp_l, tgt[..., None], 2)[..., 0]
    ok = np.isfinite(lt)
    am = rf["ids"][..., 0]
    d_l, d_8 = np.abs(lt - rf["tlp"])[ok], np.abs(r8["tlp"] - rf["tlp"])
    return dict(ppl_f32=math.exp(-float(rf["tlp"].astype(np.float64).mean())),
                top1_llama_vs_f32=float((np.argmax(lp_l, 2) == am).mean()),
                top1_rl_vs_f32=float((r8["ids"][..., 0] == am).mean()),
                top1_llama_vs_rl=float((np.argmax(lp_l, 2) == r8["ids"][..., 0]).mean()),
                dtlp_llama_vs_f32=(float(d_l.mean()), float(d_l.max())),
                dtlp_rl_vs_f32=(float(d_8.mean()), float(d_8.max())))


def patch_gguf(src, dst, sets, drops, swapctx=None):
    """Copy of an F16/F32 GGUF with metadata keys changed/removed (same tensors)."""
    f = refmodel.GGUFFile(src, keep_arrays=True)
    arch = f.meta["general.architecture"]
    w = gguf.GGUFWriter(dst, arch)
    full = lambda k: k if k.split(".")[0] in ("general", "tokenizer", arch) or k.endswith(".weight") \
        else f"{arch}.{k}"  # noqa: E731
    dropped = {full(k) for k in drops}
    setk = {full(k) for k, _ in sets}
    for key, val in f.meta.items():
        if key in ("general.architecture", "general.alignment") or key in dropped or key in setk:
            continue
        vt, et = f.types[key]
        if isinstance(val, np.ndarray):
            val = val.tolist()
        w.add_key_value(key, val, gguf.GGUFValueType(vt), gguf.GGUFValueType(et) if et is not None else None)
    for key, sval in sets:
        key = full(key)
        if sval == "SWAPCTX":
            sval = str(swapctx)
        vt = f.types[key][0] if key in f.types else gguf.GGUFValueType.FLOAT32
        val = float(sval) if vt in (gguf.GGUFValueType.FLOAT32, gguf.GGUFValueType.FLOAT64) else int(float(sval))
        w.add_key_value(key, val, gguf.GGUFValueType(vt))
    names = [n for n in f.tensors if n not in dropped]
    for name in names:
        ti = f.tensors[name]
        qt = gguf.GGMLQuantizationType(ti.ggml_type)
        if qt not in (gguf.GGMLQuantizationType.F16, gguf.GGMLQuantizationType.F32):
            raise ValueError(f"patch_gguf: {name} is {qt.name}; only F16/F32 files")
        dt = np.float16 if qt == gguf.GGMLQuantizationType.F16 else np.float32
        w.add_tensor_info(name, tuple(reversed(ti.ne)), np.dtype(dt), ti.nbytes)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for name in names:
        ti = f.tensors[name]
        dt = np.float16 if ti.ggml_type == gguf.GGMLQuantizationType.F16 else np.float32
        w.write_tensor_data(np.frombuffer(f.mm, dtype=dt, count=ti.nbytes // np.dtype(dt).itemsize,
                                          offset=ti.offset).reshape(tuple(reversed(ti.ne))))
    w.close()


def ref_variant_diff(path, vpath, text, ctx, n=256):
    """(min cosine over positions, argmax agreement, max |logit difference|,
    max |logit|) of the reference's logits on vpath vs path for the first n
    tokens of text."""
    f = refmodel.GGUFFile(path, keep_arrays=True)
    mt = f.meta
    ids = randmodel.greedy_tokenize(open(text, encoding="utf-8").read(), mt["tokenizer.ggml.tokens"],
                                    mt["tokenizer.ggml.token_type"], mt["tokenizer.ggml.model"]).tolist()
    if mt.get("tokenizer.ggml.add_bos_token") and mt.get("tokenizer.ggml.bos_token_id") is not None:
        ids = [int(mt["tokenizer.ggml.bos_token_id"])] + ids
    ids = ids[:n]
    out = []
    for p_ in (path, vpath):
        m = refmodel.Model(p_, n_ctx=ctx, phi3_swa=False)
        out.append(m.forward(ids, m.new_cache(), all_logits=True).astype(np.float64))
    a, b = out
    cos = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    return (float(cos.min()), float((a.argmax(1) == b.argmax(1)).mean()), float(np.abs(a - b).max()),
            float(np.abs(a).max()))


def print_peer_self(results):
    """results: {name: {file tag: result}}; rows where peer_self ran."""
    print("\n| model | file | PPL llama.cpp | PPL llama.cpp --no-repack | top-1 llama.cpp vs itself | "
          "mean/max abs dlogp(target) | redline vs llama.cpp: PPL diff, top-1, mean/max abs dlogp(target) |"
          "\n|---|---|---|---|---|---|---|")
    for name, res in results.items():
        for tag, r in res.items():
            if isinstance(r, dict) and "top1_llama_self" in r:
                rl = (f"{100 * (r['ppl_rl'] / r['ppl_llama'] - 1):+.3f}%, {100 * r['top1_rl']:.2f}%, "
                      f"{r['mean_dtlp_rl']:.4f} / {r['max_dtlp_rl']:.3f}" if "top1_rl" in r else "")
                print(f"| {name} | {tag} | {r['ppl_llama']:.3f} | {r['ppl_llama_norepack']:.3f} | "
                      f"{100 * r['top1_llama_self']:.2f}% | {r['mean_dlogp_llama_self']:.4f} / "
                      f"{r['max_dlogp_llama_self']:.3f} | {rl} |")


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="tiny", choices=("tiny", "real"))
    ap.add_argument("--family", nargs="+", default=None)
    ap.add_argument("--text", default="/usr/share/common-licenses/GPL-3")
    ap.add_argument("--corpus", nargs="+", default=None, help="fit text (default: --text)")
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--chunks", type=int, default=4)
    ap.add_argument("--q4km", action="store_true")
    ap.add_argument("--variants", action="store_true")
    ap.add_argument("--ref-variants", action="store_true", help="reference logits on each variant (no llama.cpp)")
    ap.add_argument("--no-compare", action="store_true", help="only llama.cpp PPL (no reference run)")
    ap.add_argument("--redline", action="store_true", help="also redline perplexity on the same windows")
    ap.add_argument("--no-ref", action="store_true", help="skip the NumPy reference")
    ap.add_argument("--float-act", action="store_true",
                    help="with --redline: also redline --weights f32 (float activations over the file's weights) "
                         "and both 8-bit-activation results against it")
    ap.add_argument("--keep-dump", action="store_true",
                    help="keep llama-perplexity's dump (FILE.cCTX.kld + .ppl) and reuse it when present")
    ap.add_argument("--peer-self", action="store_true",
                    help="also llama.cpp against itself: llama-perplexity --no-repack on the same windows "
                         "(only the float summation order differs), top-1 and |dlogp(target)| between the two")
    ap.add_argument("--files", default="F16,Q4_K_M", help="which of the files to run (with --q4km)")
    ap.add_argument("--dir", default="/work/randmodels")
    ap.add_argument("--json", default=None)
    ap.add_argument("--model", nargs="+", default=None, metavar="GGUF",
                    help="existing files instead of generated ones (tag = file name; with --redline --no-ref)")
    ap.add_argument("--rl-float", choices=("f32", "f16"), default=None,
                    help="with --model: also redline perplexity --weights W (dequantized at load, float "
                    "activations; f16 halves the memory)")
    a = ap.parse_args(argv)
    fams = a.family or [f for f in randmodel.FAMILIES if not (a.preset == "real" and f in randmodel.TINY_ONLY)]
    if a.model:
        return run_models(a)
    os.makedirs(a.dir, exist_ok=True)
    assets = randmodel.assets_dir()
    results = {}
    for fam in fams:
        spec = randmodel.get_spec(fam, a.preset)
        path = os.path.join(a.dir, f"{fam}-{a.preset}.gguf")
        if not os.path.exists(path):
            log(f"{fam}: generating {path}")
            randmodel.generate(spec, path + ".tmp", assets, a.corpus or [a.text],
                               log=lambda m: log(m) if "layer" not in m else None)
            os.replace(path + ".tmp", path)
        if a.ref_variants:
            for label, sets, drops in VARIANTS.get(fam, []):
                vpath = path[:-5] + "-variant.gguf"
                orig = (spec.rope_scaling or {}).get("orig", 0)
                patch_gguf(path, vpath, sets, drops, swapctx=a.ctx * 4 if a.ctx > orig else max(1, a.ctx // 4))
                cmin, agree, dmax, lmax = ref_variant_diff(path, vpath, a.text, a.ctx)
                os.unlink(vpath)
                results.setdefault(fam, {}).setdefault("ref_variants", []).append((label, cmin, agree, dmax, lmax))
                log(f"{fam} variant {label}: reference min cosine {cmin:.6f}, argmax unchanged "
                    f"{100 * agree:.1f}%, max |dlogit| {dmax:.4f} (max |logit| {lmax:.2f})")
            continue
        files = [("F16", path)]
        if a.q4km:
            q = path[:-5] + "-Q4_K_M.gguf"
            if not os.path.exists(q):
                log(f"{fam}: llama-quantize Q4_K_M")
                randmodel.quantize_q4km(path, q)
            files.append(("Q4_K_M", q))
        files = [(t, p) for t, p in files if t in a.files.split(",")]
        res = results.setdefault(fam, {})
        for tag, fpath in files:
            dump = fpath + f".c{a.ctx}.kld"
            if a.keep_dump and os.path.exists(dump) and os.path.exists(dump + ".ppl"):
                ppl, err = (float(v) for v in open(dump + ".ppl").read().split())
                log(f"{fam} {tag}: reusing {dump} (PPL {ppl})")
            else:
                log(f"{fam} {tag}: llama-perplexity")
                ppl, err = llama_ppl(fpath, a.text, a.ctx, a.chunks, None if a.no_compare else dump)
                if a.keep_dump and not a.no_compare:
                    with open(dump + ".ppl", "w") as f:
                        f.write(f"{ppl} {err}\n")
            r = dict(ppl_llama=ppl, ppl_llama_err=err)
            if not a.no_compare and a.peer_self:
                log(f"{fam} {tag}: llama-perplexity --no-repack")
                r.update(peer_self(fpath, a.text, a.ctx, a.chunks, dump))
            if not a.no_compare and a.redline:
                log(f"{fam} {tag}: redline")
                r8 = []
                r.update(compare_redline(fpath, a.text, dump, a.ctx, a.chunks, records=r8))
                r["ppl_rl_rel_diff"] = r["ppl_rl"] / ppl - 1
                if a.float_act and tag != "F16":  # F16 weights already take float activations
                    log(f"{fam} {tag}: redline --weights f32")
                    rf = []
                    compare_redline(fpath, a.text, dump, a.ctx, a.chunks, weights="f32", records=rf)
                    r.update(against_float(dump, r8[0], rf[0]))
                    log(f"{fam} {tag}: {json.dumps(r)}")
            if not a.no_compare and not a.no_ref:
                log(f"{fam} {tag}: reference")
                r.update(compare(fpath, dump, a.ctx, lazy=a.preset == "real"))
                r["ppl_rel_diff"] = r["ppl_ref"] / ppl - 1
            if not a.no_compare and not a.keep_dump:
                os.unlink(dump)
            res[tag] = r
            log(f"{fam} {tag}: {json.dumps(r)}")
        if a.variants:
            for label, sets, drops in VARIANTS.get(fam, []):
                vpath = path[:-5] + "-variant.gguf"
                orig = (spec.rope_scaling or {}).get("orig", 0)
                swap = a.ctx * 4 if a.ctx > orig else max(1, a.ctx // 4)  # flips long <-> short
                patch_gguf(path, vpath, sets, drops, swapctx=swap)
                ppl, _ = llama_ppl(vpath, a.text, a.ctx, a.chunks)
                os.unlink(vpath)
                res.setdefault("variants", []).append((label, ppl))
                log(f"{fam} variant {label}: PPL {ppl:.3f} (x{ppl / res['F16']['ppl_llama']:.3f})")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)
    if not a.no_ref:
        print(f"| family | file | PPL llama.cpp | PPL reference | diff | top-1 | max/mean abs dlogp | KL |")
        print("|---|---|---|---|---|---|---|---|")
    for fam, res in results.items() if not a.no_ref else ():
        for tag in ("F16", "Q4_K_M"):
            r = res.get(tag)
            if not r:
                continue
            if "ppl_ref" in r:
                print(f"| {fam} | {tag} | {r['ppl_llama']:.3f} | {r['ppl_ref']:.3f} | {100 * r['ppl_rel_diff']:+.3f}% "
                      f"| {100 * r['top1']:.2f}% | {r['max_dlogp']:.3f} / {r['mean_dlogp']:.4f} | {r['kl']:.2e} |")
            else:
                print(f"| {fam} | {tag} | {r['ppl_llama']:.3f} | | | | | |")
    if a.redline:
        print("\n| family | file | PPL llama.cpp | PPL redline | diff | top-1 | max/mean abs dlogp (redline top-32) |"
              "\n|---|---|---|---|---|---|---|")
        for fam, res in results.items():
            for tag in ("F16", "Q4_K_M"):
                r = res.get(tag)
                if r and "ppl_rl" in r:
                    print(f"| {fam} | {tag} | {r['ppl_llama']:.3f} | {r['ppl_rl']:.3f} | "
                          f"{100 * r['ppl_rl_rel_diff']:+.3f}% | {100 * r['top1_rl']:.2f}% | "
                          f"{r['max_dlogp_rl']:.3f} / {r['mean_dlogp_rl']:.4f} |")
    if a.float_act:
        print("\n| family | file | PPL float act. | PPL llama.cpp | PPL redline | top-1 llama.cpp / redline vs float |"
              " mean/max abs dlogp(target) llama.cpp vs float | redline vs float |\n|---|---|---|---|---|---|---|---|")
        for fam, res in results.items():
            for tag in ("F16", "Q4_K_M"):
                r = res.get(tag)
                if r and "ppl_f32" in r:
                    print(f"| {fam} | {tag} | {r['ppl_f32']:.3f} | {r['ppl_llama']:.3f} "
                          f"({100 * (r['ppl_llama'] / r['ppl_f32'] - 1):+.3f}%) | {r['ppl_rl']:.3f} "
                          f"({100 * (r['ppl_rl'] / r['ppl_f32'] - 1):+.3f}%) | {100 * r['top1_llama_vs_f32']:.2f}% / "
                          f"{100 * r['top1_rl_vs_f32']:.2f}% | {r['dtlp_llama_vs_f32'][0]:.4f} / "
                          f"{r['dtlp_llama_vs_f32'][1]:.3f} | {r['dtlp_rl_vs_f32'][0]:.4f} / "
                          f"{r['dtlp_rl_vs_f32'][1]:.3f} |")
    if a.peer_self:
        print_peer_self(results)
    if a.ref_variants:
        print("\n| family | wrong variant | min logit cosine | argmax unchanged | max abs dlogit (max abs logit) |"
              "\n|---|---|---|---|---|")
        for fam, res in results.items():
            for label, cmin, agree, dmax, lmax in res.get("ref_variants", []):
                print(f"| {fam} | {label} | {cmin:.6f} | {100 * agree:.1f}% | {dmax:.4f} ({lmax:.1f}) |")
    if a.variants:
        print("\n| family | wrong variant | PPL | x correct |\n|---|---|---|---|")
        for fam, res in results.items():
            for label, ppl in res.get("variants", []):
                print(f"| {fam} | {label} | {ppl:.3f} | {ppl / res['F16']['ppl_llama']:.3f} |")
    return 0


def run_models(a):
    """--model: llama-perplexity and redline (and with --rl-float W redline on
    weights dequantized to W, float activations) on each given file."""
    results = {}
    for fpath in a.model:
        tag = os.path.basename(fpath)
        dump = os.path.join(a.dir, tag + f".c{a.ctx}.kld")
        log(f"{tag}: llama-perplexity")
        ppl, err = llama_ppl(fpath, a.text, a.ctx, a.chunks, dump)
        r = dict(ppl_llama=ppl, ppl_llama_err=err)
        if a.peer_self:
            log(f"{tag}: llama-perplexity --no-repack")
            r.update(peer_self(fpath, a.text, a.ctx, a.chunks, dump))
        log(f"{tag}: redline")
        r.update(compare_redline(fpath, a.text, dump, a.ctx, a.chunks))
        r["ppl_rl_rel_diff"] = r["ppl_rl"] / ppl - 1
        if a.rl_float:
            log(f"{tag}: redline --weights {a.rl_float}")
            f = compare_redline(fpath, a.text, dump, a.ctx, a.chunks, weights=a.rl_float)
            r.update({k + "_float": v for k, v in f.items()})
            r["ppl_rl_float_rel_diff"] = r["ppl_rl_float"] / ppl - 1
            r["float_weights"] = a.rl_float
        os.unlink(dump)
        results[tag] = r
        log(f"{tag}: {json.dumps(r)}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)
    print("\n| file | PPL llama.cpp | PPL redline | diff | top-1 | max/mean abs dlogp | float activations: PPL, diff, top-1 |"
          "\n|---|---|---|---|---|---|---|")
    for tag, r in results.items():
        f32 = (f"{r['ppl_rl_float']:.3f}, {100 * r['ppl_rl_float_rel_diff']:+.3f}%, {100 * r['top1_rl_float']:.2f}% "
               f"({r['float_weights']} weights)" if "ppl_rl_float" in r else "")
        print(f"| {tag} | {r['ppl_llama']:.3f} | {r['ppl_rl']:.3f} | {100 * r['ppl_rl_rel_diff']:+.3f}% | "
              f"{100 * r['top1_rl']:.2f}% | {r['max_dlogp_rl']:.3f} / {r['mean_dlogp_rl']:.4f} | {f32} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
