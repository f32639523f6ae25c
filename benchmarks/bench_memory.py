"""What the library counts against ``max_bytes`` beside what the process holds (peak RSS).

Each case runs in a fresh process: it loads the model, notes its RSS (the interpreter and the model),
then runs one query under ``max_bytes`` and reports the peak RSS above that baseline, the bytes the
library counts (``stats["memory_bytes"]``, the table cache, and the bytes reserved for the draws),
and whether the query finished or stopped at the budget (``BudgetExceeded``).

    python benchmarks/bench_memory.py --mib 64        # small cases (a few minutes on a loaded machine)
    python benchmarks/bench_memory.py --mib 1024 --draws 10000000 --k 100000000

The compiled kernels are loaded before the baseline (their code, about 100 MB, is the library's, like
the interpreter's). Cases: ``mc``: ``monte_carlo(draws)`` of a V=16, length-10 callback (draws in
batches that fit), then a count and a threshold on it;
``threshold``: ``threshold(k)`` of the same model (the exact tree grows to the budget and stops).
Writes ``benchmarks/results/memory.json``.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import textwrap

CASE = textwrap.dedent("""
    import json, resource, sys, time
    import numpy as np
    from arenum import AutoregressiveEnumerable
    from arenum import BudgetExceeded
    from arenum.beyond.sampling import SAMPLE_BYTES_PER_DRAW
    from arenum.testing import RandomModel
    kind, mib, draws, k = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    def rss():  # peak RSS so far, bytes (Linux reports KiB)
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    m = RandomModel(16 if kind == "mc" else 64, seed=1, peak=1.5, form="dense")
    ar = AutoregressiveEnumerable(m, max_len=10, batch_next_logprobs=lambda ps: np.stack([m(p) for p in ps]),
                                  batch_size=64, max_bytes=mib << 20)
    ar.count(-3.0)  # warm: the oracle's buffers, the first tables
    from arenum.step import kernels
    kernels.preload()  # the compiled kernels' code is the library's, loaded before the baseline
    base = rss()
    t0 = time.perf_counter()
    status = "done"
    try:
        if kind == "mc":
            mc = ar.monte_carlo(draws, head=False)
            mc.count(-20.0), mc.threshold(max(1, draws // 10))  # a threshold: the largest query's temporaries
        else:
            ar.threshold(k)
    except BudgetExceeded:
        status = "stopped at max_bytes"
    st = ar.stats
    print(json.dumps({"case": kind, "max_bytes": mib << 20, "status": status, "seconds": time.perf_counter() - t0,
                      "peak_rss_above_base": rss() - base, "base_rss": base,
                      "counted": st["memory_bytes"] + st["table_cache_bytes"]
                                 + (SAMPLE_BYTES_PER_DRAW * draws if kind == "mc" else 0)}))
""")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mib", type=int, default=256, help="max_bytes in MiB (default 256)")
    ap.add_argument("--draws", type=int, default=300_000, help="Monte Carlo draws (default 3e5)")
    ap.add_argument("--k", type=int, default=10**8, help="threshold rank (default 1e8: stops at the budget)")
    args = ap.parse_args()
    rows = []
    for kind in ("mc", "threshold"):
        r = subprocess.run([sys.executable, "-c", CASE, kind, str(args.mib), str(args.draws), str(args.k)],
                           capture_output=True, text=True, env={**os.environ})
        if r.returncode != 0:
            raise SystemExit(r.stderr[-2000:])
        rows.append(json.loads(r.stdout.strip().splitlines()[-1]))
    print(f"{'case':10} {'max_bytes':>10} {'counted':>10} {'peak RSS - base':>16} {'ratio':>6}  status")
    for x in rows:
        print(f"{x['case']:10} {x['max_bytes'] / 2**20:8.0f}Mi {x['counted'] / 2**20:8.1f}Mi "
              f"{x['peak_rss_above_base'] / 2**20:14.1f}Mi {x['peak_rss_above_base'] / x['max_bytes']:6.2f}  "
              f"{x['status']} ({x['seconds']:.1f} s)")
    os.makedirs(os.path.join(os.path.dirname(__file__), "results"), exist_ok=True)
    with open(os.path.join(os.path.dirname(__file__), "results", "memory.json"), "w") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
