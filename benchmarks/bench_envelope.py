#!/usr/bin/env python
"""Benchmark: the envelope family (mean-field ``AREnvelopeIndex`` vs ``LatticeEnvelopeIndex``) against
the exact index.

Models (all small enough for the exact index to be the truth):

1. ``iid``: one random 7-token table at every step, length 5 (16,807 sequences);
2. ``markov``: the table depends on (depth, last token), 8 tokens, length 6;
3. ``random``: every prefix its own table (``arenum.testing.RandomModel``), 6 tokens, length 6;
4. ``passwords``: the embedded character 4-gram (``arenum/data/passwords-4gram-kn.npz``,
   terminating, ``max_len=10``), exact index to 2**18 sequences.

For each model and index: ``count`` error ``|log10(estimate / exact)|`` (median and max) at the
thresholds of ranks 10, 100, ... (up to the support or the exact reach), the share of ``unrank(i)``
over a spread of ranks returning exactly the exact index's sequence, the forwards the build costs
(the envelope on its own fresh enumerable), the mean new forwards per ``unrank``, and the build
time (wall clock, ``time.perf_counter``; the envelope starts at ``budget_bits=8`` and deepens on
demand, which the first queries pay).

Run: ``python benchmarks/bench_envelope.py`` (about a minute on 2 cores). Results: a table on
stdout, JSON in ``benchmarks/results/envelope.json``.
"""
from __future__ import annotations

import json
import math
import sys
import time
import zlib
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from arenum import AutoregressiveEnumerable  # noqa: E402
from arenum.models import NGramModel  # noqa: E402
from arenum.testing import RandomModel  # noqa: E402


class Table:
    """``key(prefix)`` -> a seeded random table."""

    def __init__(self, V: int, seed: int, key) -> None:
        self.V, self.seed, self.key = V, seed, key

    def __call__(self, prefix):
        rng = np.random.default_rng(zlib.crc32(repr((self.seed, self.key(prefix))).encode()))
        w = np.exp(1.3 * rng.standard_normal(self.V))
        return np.log(w) - np.log(w.sum())


def models():
    yield "iid", lambda: AutoregressiveEnumerable(Table(7, 1, lambda p: 0), max_len=5)
    yield "markov", lambda: AutoregressiveEnumerable(
        Table(8, 2, lambda p: (len(p), p[-1] if p else -1)), max_len=6)
    yield "random", lambda: AutoregressiveEnumerable(RandomModel(6, seed=3, peak=1.2, form="dense"), max_len=6)
    ng = NGramModel.load(ROOT / "src" / "arenum" / "data" / "passwords-4gram-kn.npz")
    yield "passwords", lambda: ng.enumerable(max_len=10)


def run_one(name: str, make, kw: dict, max_n: int) -> dict:
    ar = make()
    n = min(max_n, int(ar.count_bracket(-math.inf).hi)) if not ar.terminating else max_n
    ar.seek_index().ensure_count(n)
    n = min(n, ar.seek_index().indexed)
    ea = make()  # a fresh enumerable: the envelope's forwards are its own
    t0 = time.perf_counter()
    env = ea.envelope_index(budget_bits=8.0, **kw)
    build_s = time.perf_counter() - t0
    build_f = ea.stats["forwards"]
    errs = []
    k = 10
    while k <= n:
        t = ar.threshold(k)
        errs.append(abs(math.log10(max(env.count(t).estimate, 1e-300) / ar.count(t))))
        k *= 10
    ranks = sorted({int(x) for x in np.geomspace(1, n - 1, 60)} | set(range(50)))
    f1 = ea.stats["forwards"]
    same = sum(tuple(env.unrank(i))[0] == ar.unrank(i)[0] for i in ranks)
    per_unrank = (ea.stats["forwards"] - f1) / len(ranks)
    return {"model": name, "index": type(env).__name__, "args": {k_: str(v) for k_, v in kw.items()},
            "sequences_checked": n, "count_err_median": round(float(np.median(errs)), 4),
            "count_err_max": round(float(np.max(errs)), 4), "unrank_exact_share": round(same / len(ranks), 3),
            "build_forwards": build_f, "forwards_per_unrank": round(per_unrank, 2),
            "build_seconds": round(build_s, 3),
            "tables_agree": env.tables_agree}


def main() -> int:
    rows = []
    configs = [({"n_paths": 16}, "mean-field"), ({"n_paths": 4, "n_clusters": 4}, "lattice, 4 clusters"),
               ({"n_paths": 4, "cluster_fn": lambda t: t}, "lattice, token clusters")]
    for name, make in models():
        for kw, label in configs:
            r = run_one(name, make, kw, 1 << 18 if name == "passwords" else 1 << 15)
            r["label"] = label
            rows.append(r)
    hdr = f"{'model':10} {'index':24} {'checked':>8} {'count err med':>13} {'max':>7} {'unrank exact':>12} {'build fwd':>9} {'fwd/unrank':>10} {'build s':>8}"
    print(hdr)
    print("-" * len(hdr))
    for r in rows:
        print(f"{r['model']:10} {r['label']:24} {r['sequences_checked']:8d} {r['count_err_median']:13.4f} "
              f"{r['count_err_max']:7.4f} {r['unrank_exact_share']:12.3f} {r['build_forwards']:9d} "
              f"{r['forwards_per_unrank']:10.2f} "
              f"{r['build_seconds']:8.3f}")
    out = ROOT / "benchmarks" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "envelope.json").write_text(json.dumps({"rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
