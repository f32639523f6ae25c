"""Forwards paid over a sweep of deepening queries, against the minimum.

Two cases (issue: "every forward paid once"):

- sweep: a fixed-length model, V=64, max_len=4, a numpy ``(tokens, log_probs)`` callback called one
  prefix at a time; ``count(threshold(r))`` for 20 ranks ``r`` log-spaced from 1 to 64**4, on one
  enumerable (every query deepens the same tree).
- wide: V=2000, max_len=3, a peaked model served as a dense batch callback; ``threshold(10**6)``.

minimum: the live prefixes at the deepest budget reached (prefixes with score >= the lowest
threshold answered), read off the finished tree. forwards/minimum is what the user paid over what
any exact method must pay. ``--table-bytes`` sets the whole-table budget (default: the library's).

Run: ``python benchmarks/bench_forwards.py [--quick] [--table-bytes N]``; writes
``benchmarks/results/forwards.json``.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import time

import numpy as np

from arenum import AutoregressiveEnumerable

K_ROWS = 64


class HashedLM:
    """Deterministic, prefix-dependent: each prefix picks one of ``K_ROWS`` fixed rows by a hash."""

    def __init__(self, V: int, zipf: float, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        w = 1.0 / np.arange(1, V + 1) ** zipf
        base = np.log(w / w.sum())
        self.rows = np.stack([base[rng.permutation(V)] for _ in range(K_ROWS)])
        self.tokens = np.arange(V)
        self.calls = 0

    def _row(self, prefix: tuple) -> int:
        h = 1469598103934665603
        for t in prefix:
            h = ((h ^ (int(t) + 1)) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
        return h % K_ROWS

    def __call__(self, prefix: tuple):
        self.calls += 1
        return self.tokens, self.rows[self._row(prefix)]

    def batch(self, prefixes: list[tuple]) -> np.ndarray:
        self.calls += 1
        return self.rows[[self._row(p) for p in prefixes]]


def live_prefixes(ar: AutoregressiveEnumerable, T: float) -> int:
    tree = ar._tree
    return sum(int((tree.view(d).score >= T).sum()) for d in range(min(tree.n_levels, tree.leaf_level + 1)))


def run_sweep(table_bytes, quick: bool) -> dict:
    V, L = (32, 4) if quick else (64, 4)
    m = HashedLM(V, zipf=1.0, seed=1)
    ar = AutoregressiveEnumerable(m, max_len=L, **table_bytes)
    ranks = sorted({int(round(x)) for x in np.logspace(0, math.log10(V**L), 20)})
    rows = []
    t0 = time.perf_counter()
    lowest = 0.0
    for r in ranks:
        t1 = time.perf_counter()
        x = ar.threshold(r)
        c = ar.count(x)
        lowest = min(lowest, x)
        st = ar.stats
        rows.append({"rank": r, "count": c, "forwards": st["forwards"], "refetches": st["refetches"],
                     "minimum": live_prefixes(ar, lowest), "seconds": time.perf_counter() - t1})
    st = ar.stats
    mn = live_prefixes(ar, lowest)
    return {"case": f"sweep V={V} L={L} (20 ranks, single-prefix callback)", "forwards": st["forwards"],
            "refetches": st["refetches"], "minimum": mn, "ratio": st["forwards"] / mn,
            "seconds": time.perf_counter() - t0, "tree_bytes": st["memory_bytes"], "steps": rows}


def run_wide(table_bytes, quick: bool) -> dict:
    V, L, k = (2000, 3, 10**5 if quick else 10**6)
    m = HashedLM(V, zipf=1.4, seed=2)
    ar = AutoregressiveEnumerable(m, max_len=L, batch_next_logprobs=m.batch, batch_size=256, **table_bytes)
    t0 = time.perf_counter()
    x = ar.threshold(k)
    st = ar.stats
    mn = live_prefixes(ar, x)
    return {"case": f"wide V={V} L={L} threshold({k:.0e})", "forwards": st["forwards"],
            "refetches": st["refetches"], "minimum": mn, "ratio": st["forwards"] / mn,
            "seconds": time.perf_counter() - t0, "tree_bytes": st["memory_bytes"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="smaller cases (V=32 sweep, 1e5 wide)")
    ap.add_argument("--table-bytes", type=int, default=None, help="whole-table budget (default: the library's)")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results", "forwards.json"))
    a = ap.parse_args()
    tb = {} if a.table_bytes is None else {"table_bytes": a.table_bytes}
    res = [run_sweep(tb, a.quick), run_wide(tb, a.quick)]
    print(f"{'case':48s} {'forwards':>10s} {'minimum':>10s} {'ratio':>6s} {'refetch':>8s} {'MB':>7s} {'s':>7s}")
    for r in res:
        print(f"{r['case']:48s} {r['forwards']:10,d} {r['minimum']:10,d} {r['ratio']:6.3f} {r['refetches']:8,d} "
              f"{r['tree_bytes'] / 1e6:7.1f} {r['seconds']:7.1f}")
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump({"table_bytes": a.table_bytes, "results": res}, f, indent=1)
    print(f"written to {a.out}")


if __name__ == "__main__":
    main()
