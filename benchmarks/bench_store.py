"""The forward store: size, open-and-query time against rebuilding, and resuming after a kill.

Model: ``HashedLM`` of ``bench_forwards.py`` (each prefix picks one of 64 fixed Zipf rows by a hash),
V=64 (Zipf exponent 2), fixed length 5, a dense batch callback. For a target of ``N`` sequences:

- build: ``threshold(N)`` into a fresh store, then ``close()`` (snapshot); time, forwards, store bytes
  on disk per live prefix and per indexed sequence;
- open: a fresh process opens the store and answers 1,000 ``rank`` queries of sequences drawn from
  the index (cold: the first query builds the index from the stored tree; warm: the next 1,000),
  with the forwards it made (0 expected: the model is identified by ``fingerprint=``);
- resume: a child process building the same store is killed (SIGKILL) half way through the build
  time; a new process resumes it: forwards paid in total over the minimum, and wall time against a
  clean build.

Run: ``python benchmarks/bench_store.py [--sizes 6 7 8]`` (``N = 10**size``); writes
``benchmarks/results/store.json``.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))

CHILD = r"""
import json, sys, time, math
sys.path.insert(0, {here!r})
import numpy as np
from bench_forwards import HashedLM
from arenum import AutoregressiveEnumerable
mode, path, N = sys.argv[1], sys.argv[2], int(sys.argv[3])
m = HashedLM(64, zipf=2.0, seed=1)
t0 = time.perf_counter()
ar = AutoregressiveEnumerable(m, max_len=5, batch_next_logprobs=m.batch, batch_size=1024,
                              store=path if path != "-" else None, fingerprint="hashed-64-1" if path != "-" else None)
t_open = time.perf_counter() - t0
out = {{"open_s": t_open}}
if mode == "build":
    print("ready", flush=True)
    t0 = time.perf_counter()
    x = ar.threshold(N)
    out["build_s"] = time.perf_counter() - t0
    out["forwards"] = ar.stats["forwards"]
    out["prefixes"] = ar.stats["tree_prefixes"]
    out["indexed"] = ar.stats["indexed_sequences"]
    out["store_forwards"] = ar.stats.get("store_forwards", 0)
    t0 = time.perf_counter()
    ar.close()
    out["close_s"] = time.perf_counter() - t0
else:
    rng = np.random.default_rng(0)
    t0 = time.perf_counter()
    seqs = [ar.unrank(int(i))[0] for i in rng.integers(0, N, 1)]
    first = time.perf_counter() - t0
    idx = rng.integers(0, N, 1000)
    t0 = time.perf_counter()
    seqs = [s for s, _ in (ar.unrank(int(i)) for i in idx)]
    t_unrank = time.perf_counter() - t0
    t0 = time.perf_counter()
    for s in seqs:
        ar.rank(s)
    out["cold_first_s"] = first
    out["warm_unrank_ms"] = 1000 * t_unrank / 1000
    out["warm_rank_ms"] = 1000 * (time.perf_counter() - t0) / 1000
    out["forwards"] = ar.stats["forwards"]
    out["store_forwards"] = ar.stats.get("store_forwards", 0)
print(json.dumps(out), flush=True)
"""


def run(args: list[str], kill_after: float | None = None) -> dict | None:
    p = subprocess.Popen([sys.executable, "-c", CHILD.format(here=HERE)] + args, stdout=subprocess.PIPE, text=True)
    if kill_after is not None:
        assert p.stdout.readline().strip() == "ready"
        time.sleep(kill_after)
        p.send_signal(signal.SIGKILL)
        p.wait()
        return None
    lines = [ln for ln in p.stdout.read().splitlines() if ln.startswith("{")]
    p.wait()
    if p.returncode:
        raise SystemExit(f"child failed: {args}")
    return json.loads(lines[-1])


def du(path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[6, 7])
    ap.add_argument("--no-resume", action="store_true", help="skip the kill-and-resume run (large sizes)")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "store.json"))
    a = ap.parse_args()
    rows = []
    tmp = tempfile.mkdtemp(prefix="arenum-bench-store-")
    try:
        for e in a.sizes:
            N = 10**e
            path = os.path.join(tmp, f"s{e}")
            b = run(["build", path, str(N)])
            size = du(path)
            o = run(["open", path, str(N)])
            clean = run(["build", "-", str(N)])
            # resume: kill half way, then finish
            rpath = os.path.join(tmp, f"r{e}")
            t0 = time.perf_counter()
            if a.no_resume:
                r, t_resume = {"store_forwards": math.nan, "forwards": math.nan}, math.nan
            else:
                run(["build", rpath, str(N)], kill_after=0.5 * clean["build_s"])
                r = run(["build", rpath, str(N)])
                t_resume = time.perf_counter() - t0
            rows.append({
                "N": N, "build_s": b["build_s"], "close_s": b["close_s"], "forwards": b["forwards"],
                "prefixes": b["prefixes"], "indexed": b["indexed"], "store_bytes": size,
                "bytes_per_prefix": size / b["prefixes"], "bytes_per_sequence": size / b["indexed"],
                "open_s": o["open_s"], "cold_first_s": o["cold_first_s"], "warm_unrank_ms": o["warm_unrank_ms"],
                "warm_rank_ms": o["warm_rank_ms"], "open_forwards": o["forwards"], "rebuild_s": clean["build_s"],
                "resume_total_forwards": r["store_forwards"], "resumed_forwards": r["forwards"],
                "resume_wall_s": t_resume, "clean_forwards": clean["forwards"],
            })
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{'N':>6s} {'build s':>8s} {'MB':>7s} {'B/prefix':>8s} {'B/seq':>6s} {'open s':>7s} {'1st q s':>7s} "
          f"{'unrank ms':>9s} {'rank ms':>8s} {'fwd':>4s} {'rebuild s':>9s} {'resume fwd/min':>14s} {'resume s':>8s}")
    for r in rows:
        print(f"{r['N']:6.0e} {r['build_s']:8.1f} {r['store_bytes'] / 1e6:7.1f} {r['bytes_per_prefix']:8.0f} "
              f"{r['bytes_per_sequence']:6.2f} {r['open_s']:7.2f} {r['cold_first_s']:7.2f} {r['warm_unrank_ms']:9.3f} "
              f"{r['warm_rank_ms']:8.3f} {r['open_forwards']:4d} {r['rebuild_s']:9.1f} "
              f"{r['resume_total_forwards'] / r['clean_forwards']:14.3f} {r['resume_wall_s']:8.1f}")
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(rows, f, indent=1)
    print(f"written to {a.out}")


if __name__ == "__main__":
    main()
