"""Long sequences: the time of ``unrank(0)`` on a two-token chain model at growing ``max_len``.

One forward per prefix is the floor (``max_len`` forwards); the bookkeeping per level should stay
flat, so the time should grow about linearly with the length.

Run: ``python benchmarks/bench_long.py [--lengths 500 1000 2000 4000]``; writes
``benchmarks/results/long.json``.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import time

from arenum import AutoregressiveEnumerable


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lengths", type=int, nargs="+", default=[500, 1000, 2000, 4000])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results", "long.json"))
    a = ap.parse_args()
    rows = []
    print(f"{'max_len':>8} {'unrank(0) s':>12} {'forwards':>9} {'us per level':>13}")
    for L in a.lengths:
        ar = AutoregressiveEnumerable(lambda p: [(0, math.log(0.999)), (1, math.log(0.001))], max_len=L)
        t0 = time.perf_counter()
        seq, _ = ar.unrank(0)
        dt = time.perf_counter() - t0
        assert len(seq) == L
        rows.append({"max_len": L, "seconds": dt, "forwards": ar.stats["forwards"]})
        print(f"{L:>8} {dt:>12.3f} {ar.stats['forwards']:>9} {1e6 * dt / L:>13.1f}")
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w") as fh:
        json.dump(rows, fh, indent=1)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
