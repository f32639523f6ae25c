#!/usr/bin/env python
"""Benchmark a transformer's wide tables in memory: ``threshold(R)`` on a distilGPT-2-shaped model.

The model: GPT-2 with random weights, 6 layers, width 768, 12 heads, V = 50,257, logits scaled by
``--scale`` (9.47 gives a mean next-token entropy of about 4 bits, as in ``bench_hf.py``), fixed
length ``--max-len``, one thread. Each setting runs in its own process (peak RSS is per process):

  default          what ``CausalLMOracle.enumerable(max_len=...)`` does
  heads only       ``table_bytes=0``: no whole table past the tiny-tree allowance
  heads, margin 1  ``table_bytes=0`` and the applied margin held at 1 bit (the heads-only regime
                   before wide tables had their own margin)

``--src DIR`` runs the default setting again on another checkout's ``src`` (a before/after row).
Printed: a table; written: JSON to benchmarks/results/wide_tables.json. Nothing is downloaded.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, os, resource, sys, time
sys.path.insert(0, os.environ["BENCH_SRC"])
import torch, transformers
torch.set_num_threads(1)
from arenum.models.hf import CausalLMOracle
a = json.loads(os.environ["BENCH_ARGS"])
torch.manual_seed(0)
V = 50257
cfg = transformers.GPT2Config(vocab_size=V, n_positions=64, n_embd=768, n_layer=a["layers"], n_head=12,
                              bos_token_id=V - 1, eos_token_id=V - 1)
model = transformers.GPT2LMHeadModel(cfg).eval()
o = CausalLMOracle(model, prompt=None, bos_token_id=V - 1, eos=None, logit_scale=a["scale"])
if a["margin1"]:
    import arenum.exact.tree as tm
    if hasattr(tm, "WIDE_MARGIN_BITS"):
        tm.WIDE_MARGIN_BITS = 1.0
e = o.enumerable(max_len=a["max_len"], **a["kw"])
rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
t = time.perf_counter()
thr = e.threshold(a["rank"])
wall = time.perf_counter() - t
st = e.stats
print(json.dumps({"threshold": float(thr), "wall_s": wall, "forwards": st["forwards"], "refetches": st["refetches"],
                  "tree_mb": st["memory_bytes"] / 1e6, "rss_before_mib": rss0,
                  "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def run(label: str, src: Path, args: argparse.Namespace, kw: dict, margin1: bool = False) -> dict:
    env = dict(os.environ, BENCH_SRC=str(src), BENCH_ARGS=json.dumps(
        {"layers": args.layers, "scale": args.scale, "max_len": args.max_len, "rank": args.rank, "kw": kw,
         "margin1": margin1}))
    out = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=args.timeout)
    if out.returncode != 0:
        return {"setting": label, "error": (out.stderr.strip().splitlines() or ["?"])[-1]}
    rec = json.loads(out.stdout.strip().splitlines()[-1])
    rec["setting"] = label
    return rec


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--rank", type=lambda s: int(float(s)), default=10**5)
    ap.add_argument("--max-len", type=int, default=2)
    ap.add_argument("--scale", type=float, default=9.47)
    ap.add_argument("--src", type=Path, action="append", default=[], help="another checkout's src: a 'before' row")
    ap.add_argument("--timeout", type=int, default=1800)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "wide_tables.json")
    args = ap.parse_args(argv)
    here = ROOT / "src"
    rows = [run("default", here, args, {}), run("heads only", here, args, {"table_bytes": 0}),
            run("heads only, margin 1", here, args, {"table_bytes": 0}, margin1=True)]
    rows += [run(f"default, {s}", s, args, {}) for s in args.src]
    print(f"threshold({args.rank:,}) at max_len {args.max_len}, {args.layers} layers, V = 50,257, scale {args.scale}")
    print(f"{'setting':40s} {'wall s':>8s} {'forwards':>9s} {'refetches':>9s} {'tree MB':>8s} {'peak RSS MiB':>12s}")
    for r in rows:
        if "error" in r:
            print(f"{r['setting']:40s} error: {r['error']}")
            continue
        print(f"{r['setting']:40s} {r['wall_s']:8.1f} {r['forwards']:9,d} {r['refetches']:9,d} {r['tree_mb']:8.1f} "
              f"{r['peak_rss_mib']:12,.0f}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "rows": rows}, indent=2))
    print(f"written to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
