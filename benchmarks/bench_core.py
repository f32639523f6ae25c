"""Core engine benchmark: forwards vs the minimum, bookkeeping rates, query latency, peak memory.

Model: a deterministic synthetic LM with V=2000 and peaked steps (Zipf exponent 1.4 over a
per-prefix permutation chosen from 64 fixed ones by a hash of the prefix), served as a batched
dense callback. Fixed-length L=3, and a terminating variant (eos = token 0, p(eos) = 0.5 at every step, max_len 6).

For each target rank k: ``threshold(k)`` on a fresh enumerable (every deepening step included),
then 1000 random ``unrank(i)`` with ``i < k``, ``count(threshold(k))`` and 200 ``rank`` calls.

- forwards: prefixes scored by the model (every round, refetches included); minimum: live prefixes
  at the answer's budget (prefixes with score >= threshold(k)), read off the finished tree.
- bookkeeping: wall time of ``threshold(k)`` minus time inside the model callback minus step-table
  parsing (validation and head extraction of the V-wide rows, reported separately); split into the
  tree's share (per live prefix held) and the exact index builds (per indexed sequence).
- latency: per-query wall time after the build (median, p99).
- peak memory: the process's max RSS (each size runs in its own subprocess).

Run: ``python benchmarks/bench_core.py`` (add ``--sizes 6 7`` to choose 10**6, 10**7; default
6 7 8). Writes ``benchmarks/results/core.json``. The dense rows are parsed by the compiled sweep
when numba is installed; ``ARENUM_KERNELS=numpy`` times the numpy sweep (column ``sweep``).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import time

import numpy as np

V = 2000
K_PERMS = 64


class SyntheticLM:
    """Peaked, prefix-dependent, deterministic; cheap enough that our own overhead is visible."""

    def __init__(self, V: int = V, zipf: float = 1.4, eos: int | None = None, p_eos: float = 0.5, seed: int = 0):
        rng = np.random.default_rng(seed)
        w = 1.0 / np.arange(1, V + 1) ** zipf
        base = np.log(w / w.sum())
        rows = np.empty((K_PERMS, V))
        for k in range(K_PERMS):
            rows[k] = base[rng.permutation(V)]
        if eos is not None:
            # put mass p_eos on eos, renormalize the rest
            for k in range(K_PERMS):
                r = np.exp(rows[k])
                r[eos] = 0.0
                r *= (1 - p_eos) / r.sum()
                r[eos] = p_eos
                rows[k] = np.log(r)
        self.rows = rows
        self.mult = np.array([1_000_003, 7_919, 104_729, 15_485_863, 32_452_843, 49_979_687, 86_028_121, 3_267_000_013],
                             dtype=np.int64)

    def _keys(self, arr: np.ndarray) -> np.ndarray:
        d = arr.shape[1]
        if d == 0:
            return np.zeros(arr.shape[0], np.int64)
        h = (arr * self.mult[:d]).sum(axis=1)
        return (h ^ (h >> 7)) % K_PERMS

    def batch(self, prefixes: list[tuple]) -> np.ndarray:
        arr = np.array(prefixes, dtype=np.int64).reshape(len(prefixes), -1)
        return self.rows[self._keys(arr)]

    def single(self, prefix: tuple) -> np.ndarray:
        return self.batch([prefix])[0]


def run_one(kind: str, exp: int, seed: int = 0) -> dict:
    from arenum import AutoregressiveEnumerable
    from arenum.step import kernels

    k = 10**exp
    term = kind == "terminating"
    lm = SyntheticLM(eos=0 if term else None)
    kw = dict(eos=0, max_len=6) if term else dict(max_len=3)
    ar = AutoregressiveEnumerable(lm.single, batch_next_logprobs=lm.batch, batch_size=4096,
                                  max_sequences=2 * 10**9, max_prefixes=10**9, **kw)
    t0 = time.perf_counter()
    thr = ar.threshold(k)
    build = time.perf_counter() - t0
    st = ar.stats
    tree = ar._tree
    minimum = sum(int((lev.score >= thr).sum()) for lev in tree.levels[: tree.leaf_level + 1])
    seek = ar.seek_index()
    n_indexed = seek.size
    model_s, parse_s, index_s = st["model_seconds"], st["parse_seconds"], st["index_seconds"]
    book = build - model_s - parse_s
    tree_s = book - index_s
    rng = np.random.default_rng(seed)
    lat_unrank = []
    seqs = []
    for i in rng.integers(0, k, size=1000):
        a = time.perf_counter()
        seq, _ = ar.unrank(int(i))
        lat_unrank.append(time.perf_counter() - a)
        seqs.append(seq)
    lat_count = []
    for _ in range(200):
        a = time.perf_counter()
        c = ar.count(thr)
        lat_count.append(time.perf_counter() - a)
    assert c >= k
    lat_thr = []
    for i in rng.integers(1, k + 1, size=200):
        a = time.perf_counter()
        ar.threshold(int(i))
        lat_thr.append(time.perf_counter() - a)
    lat_rank = []
    for seq in seqs[:200]:
        a = time.perf_counter()
        ar.rank(seq)
        lat_rank.append(time.perf_counter() - a)
    f_after = ar.stats["forwards"]
    assert f_after == st["forwards"], "queries below the threshold must not run forwards"
    ms = lambda xs: (1e3 * float(np.median(xs)), 1e3 * float(np.percentile(xs, 99)))  # noqa: E731
    return {
        "model": kind, "k": k, "threshold_nats": thr, "threshold_bits": -thr / math.log(2),
        "build_s": build, "model_s": model_s, "parse_s": parse_s, "bookkeeping_s": book,
        "forwards": st["forwards"], "refetches": st["refetches"], "min_forwards": minimum,
        "forwards_over_min": st["forwards"] / minimum, "indexed": n_indexed,
        "index_builds": st["index_builds"],
        "tree_s": tree_s, "index_s": index_s,
        "prefixes_per_s": st["tree_prefixes"] / tree_s, "sequences_per_s": n_indexed / index_s,
        "parse_us_per_forward": 1e6 * parse_s / st["forwards"], "parse_share": parse_s / build,
        "sweep": kernels.backend(),  # the dense-row sweep: numba, or numpy (ARENUM_KERNELS=numpy)
        "unrank_ms": ms(lat_unrank), "count_ms": ms(lat_count), "threshold_ms": ms(lat_thr), "rank_ms": ms(lat_rank),
        "tree_MB": st["tree_bytes"] / 2**20,
        "peak_rss_MB": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[6, 7, 8], help="exponents of the target rank")
    ap.add_argument("--kinds", nargs="+", default=["fixed", "terminating"])
    ap.add_argument("--one", nargs=2, help=argparse.SUPPRESS)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results", "core.json"))
    a = ap.parse_args()
    if a.one:
        print(json.dumps(run_one(a.one[0], int(a.one[1]))))
        return
    rows = []
    for kind in a.kinds:
        for e in a.sizes:
            p = subprocess.run([sys.executable, __file__, "--one", kind, str(e)], capture_output=True, text=True)
            if p.returncode != 0:
                print(f"{kind} 1e{e}: failed\n{p.stderr[-2000:]}", file=sys.stderr)
                rows.append({"model": kind, "k": 10**e, "error": p.stderr[-500:]})
                continue
            r = json.loads(p.stdout.strip().splitlines()[-1])
            rows.append(r)
            print(f"done {kind} 1e{e} in {r['build_s']:.1f}s", file=sys.stderr)
    hdr = ("model", "k", "bits", "build s", "model s", "parse s", "parse us/fwd", "parse %", "sweep", "tree s", "index s", "fwd", "min fwd", "fwd/min",
           "indexed", "prefix/s", "seq/s", "unrank ms med/p99", "count ms", "thresh ms", "rank ms", "peak MB")
    print("\n" + " | ".join(hdr))
    print("-" * 160)
    for r in rows:
        if "error" in r:
            print(f"{r['model']} | {r['k']:.0e} | failed")
            continue
        print(" | ".join([
            r["model"], f"{r['k']:.0e}", f"{r['threshold_bits']:.2f}", f"{r['build_s']:.2f}", f"{r['model_s']:.2f}",
            f"{r['parse_s']:.2f}", f"{r['parse_us_per_forward']:.2f}", f"{100 * r['parse_share']:.0f}", r["sweep"],
            f"{r['tree_s']:.2f}", f"{r['index_s']:.2f}", str(r["forwards"]), str(r["min_forwards"]), f"{r['forwards_over_min']:.3f}",
            str(r["indexed"]), f"{r['prefixes_per_s']:.3g}", f"{r['sequences_per_s']:.3g}",
            "%.3f/%.3f" % tuple(r["unrank_ms"]), "%.3f/%.3f" % tuple(r["count_ms"]),
            "%.3f/%.3f" % tuple(r["threshold_ms"]), "%.3f/%.3f" % tuple(r["rank_ms"]), f"{r['peak_rss_MB']:.0f}",
        ]))
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump({"benchmark": "core", "V": V, "rows": rows,
                   "how": "each size in its own subprocess; bookkeeping = build wall time minus model and parse time"},
                  f, indent=2)
    print(f"\nwrote {a.out}")


if __name__ == "__main__":
    main()
