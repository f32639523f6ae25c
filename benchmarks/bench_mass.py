"""Mass-query benchmark: ``mass_above`` and ``nucleus_size`` on exact indexes of 10**6-10**7 sequences.

Model: ``bench_core.SyntheticLM`` (V=2000, peaked, fixed length 3). For each size k, a fresh
enumerable answers ``threshold(k)`` (the index build, not timed here), then:

- first mass: the first ``mass_above`` on the index (it computes the per-bucket masses, once;
  measured 5 times with that cache cleared, the minimum reported);
- ``mass_above``: 200 queries at random item scores above the threshold (median, p99);
- ``nucleus_size``: 50 queries at random ``p`` the index holds (median, p99);
- ``exact_sum`` vs ``np.exp(x).sum()`` over the index's scores (one pass each), when available.

Times are CPU seconds of the process (``time.process_time``). Run the same script against two checkouts to compare (``PYTHONPATH=src``):
``python benchmarks/bench_mass.py --sizes 6 7``. Writes ``benchmarks/results/mass.json``.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from bench_core import SyntheticLM  # noqa: E402

clock = time.process_time  # CPU time: the machine is shared, wall time swings with other work


def run_one(exp: int, seed: int = 0) -> dict:
    from arenum import AutoregressiveEnumerable

    lm = SyntheticLM()
    ar = AutoregressiveEnumerable(lm.single, batch_next_logprobs=lm.batch, batch_size=4096, max_len=3,
                                  max_sequences=2 * 10**9, max_prefixes=10**9)
    k = 10**exp
    thr = ar.threshold(k)
    idx = ar.seek_index().index()
    rng = np.random.default_rng(seed)
    ts = [ar.threshold(int(i)) for i in rng.integers(1, k + 1, size=200)]  # warms the buckets' sort too
    firsts = []
    for _ in range(5):  # the per-bucket masses, computed again each time (min of 5 reported)
        idx._mass_cum = None
        getattr(idx, "_prefix_cache", {}).clear()
        a = clock()
        top = ar.mass_above(thr)
        firsts.append(clock() - a)
    first = min(firsts)
    lat_mass = []
    for t in ts:
        a = clock()
        ar.mass_above(t)
        lat_mass.append(clock() - a)
    ps = rng.uniform(0.05, 0.95, size=50) * top.lo
    for p in ps:  # the buckets each p lands in, sorted once (shared with other queries)
        ar.nucleus_size(float(p))
    lat_nuc = []
    for p in ps:
        a = clock()
        ar.nucleus_size(float(p))
        lat_nuc.append(clock() - a)
    x = idx.items(0, idx.N)[1]
    a = clock()
    np.exp(x).sum()
    t_plain = clock() - a
    t_exact = None
    try:
        from arenum.exact.exactsum import exact_sum, values

        a = clock()
        exact_sum(values(x))
        t_exact = clock() - a
    except ImportError:
        pass
    ms = lambda xs: (1e3 * float(np.median(xs)), 1e3 * float(np.percentile(xs, 99)))  # noqa: E731
    return {"k": k, "indexed": int(idx.N), "buckets": int(idx.nb), "first_mass_ms": 1e3 * first,
            "mass_above_ms": ms(lat_mass), "nucleus_ms": ms(lat_nuc), "exp_sum_ms": 1e3 * t_plain,
            "exact_sum_ms": None if t_exact is None else 1e3 * t_exact}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[6, 7], help="exponents of the target rank")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results", "mass.json"))
    a = ap.parse_args()
    rows = [run_one(e) for e in a.sizes]
    hdr = ("k", "indexed", "buckets", "first mass ms", "mass_above ms med/p99", "nucleus ms med/p99",
           "exp().sum ms", "exact_sum ms")
    print(" | ".join(hdr))
    print("-" * 110)
    for r in rows:
        print(" | ".join([f"{r['k']:.0e}", str(r["indexed"]), str(r["buckets"]), f"{r['first_mass_ms']:.1f}",
                          "%.3f/%.3f" % tuple(r["mass_above_ms"]), "%.3f/%.3f" % tuple(r["nucleus_ms"]),
                          f"{r['exp_sum_ms']:.1f}", "-" if r["exact_sum_ms"] is None else f"{r['exact_sum_ms']:.1f}"]))
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump({"benchmark": "mass", "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
