"""Step-table parsing micro-benchmark: microseconds per dense row, the step oracle's own work only.

What is timed: the step oracle (:class:`arenum.step.oracle.StepOracle`) receiving dense ``(n, V)``
float64 batches from a model that costs nothing (the rows are precomputed), and

- ``heads``: ``fetch_heads`` with per-row floors (validation: NaN, ``+inf``, ``> 0``, no finite
  entry; the normalization check; the head cut and its sort), the path every exact build takes;
  the floors keep 1 to ``2 --head`` entries per row (uniformly);
- ``heads, whole rows``: the same with floors at ``-inf`` (every entry is in the head: the rows an
  exact build fetches near its root, where the sort of the whole row dominates);
- ``rows``: ``fetch_rows`` (validation and the normalization check of full rows, no cut: the
  Monte Carlo path);
- ``table``: ``table(prefix)`` for distinct prefixes through ``next_logprobs`` returning one dense
  row (the single-prefix path: parse, sort the whole row, memoize): its overhead per call.

Rows: V=2000 (``--V``), Zipf(1.4) over a per-row permutation (as ``bench_core``), normalized to
float64 precision. Reported: the best of ``--repeat`` runs in CPU seconds of this process (``time.process_time``: the
machine is shared, and wall time would count other work), microseconds per row; the model's own time
is excluded (its callback returns a slice of a prebuilt array). Memory bandwidth reference: one
read of the row (``row.sum()``).

Each path is timed on every sweep in ``--backends`` (default ``numba,numpy``: the compiled sweep of
:mod:`arenum.step.kernels` and the numpy one), interleaved in one process.

Run: ``python benchmarks/bench_parse.py`` (options ``--V 2000 --batch 4096 --head 8 --whole 1024
--backends numba,numpy``). Writes ``benchmarks/results/parse.json``. The script only drives
``StepOracle`` (and :mod:`arenum.step.kernels`, so it needs a checkout that has it): run it with
``PYTHONPATH`` on two such checkouts to compare them.
"""
from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np


def _rows(n: int, V: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    w = 1.0 / np.arange(1, V + 1) ** 1.4
    base = np.log(w / w.sum())
    perms = np.stack([rng.permutation(V) for _ in range(64)])
    return base[perms[rng.integers(0, 64, size=n)]]


def _median_time(fn, repeat: int) -> float:
    ts = []
    for _ in range(repeat):
        t0 = time.process_time()
        fn()
        ts.append(time.process_time() - t0)
    return float(np.min(ts))


def main() -> None:
    from arenum.step import kernels
    from arenum.step.oracle import StepOracle

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--V", type=int, default=2000)
    ap.add_argument("--batch", type=int, default=4096, help="rows per batched call")
    ap.add_argument("--head", type=int, default=8, help="about this many entries kept per row")
    ap.add_argument("--single", type=int, default=2000, help="single-prefix calls timed")
    ap.add_argument("--whole", type=int, default=1024, help="rows of the whole-row heads batch")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--backends", default="numba,numpy",
                    help="sweeps to time, interleaved in this process (arenum.step.kernels: numba, numpy)")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results", "parse.json"))
    a = ap.parse_args()
    V, n = a.V, a.batch
    rows = _rows(n, V)
    srt = -np.sort(-rows, axis=1)
    keep = np.random.default_rng(1).integers(1, 2 * a.head, size=n)  # about `head` entries per row, varying
    floors = srt[np.arange(n), np.minimum(keep, V) - 1].copy()
    prefixes = [(i,) for i in range(n)]
    backends = [b.strip() for b in a.backends.split(",") if b.strip()]
    for b in backends:
        kernels.set_backend(b)  # a missing numba fails here, before any timing

    out = {"benchmark": "parse", "V": V, "batch": n, "head": a.head, "backends": {}}
    # memory bandwidth reference: one read of every row
    out["read_us_per_row"] = 1e6 * _median_time(lambda: rows.sum(), a.repeat) / n

    def heads() -> None:
        o = StepOracle(lambda p: rows[p[0]], batch_next_logprobs=lambda ps: rows, batch_size=n)
        h = o.fetch_heads(prefixes, floors)
        assert h.lens.sum() >= n

    nw = min(n, a.whole)
    whole_floors = np.full(nw, -np.inf)

    def heads_whole() -> None:
        o = StepOracle(lambda p: rows[p[0]], batch_next_logprobs=lambda ps: rows[: len(ps)], batch_size=n)
        h = o.fetch_heads(prefixes[:nw], whole_floors)
        assert h.lens.sum() == nw * V

    def full_rows() -> None:
        o = StepOracle(lambda p: rows[p[0]], batch_next_logprobs=lambda ps: rows, batch_size=n)
        o.fetch_rows(prefixes)

    m = min(a.single, n)

    def singles() -> None:
        o = StepOracle(lambda p: rows[p[0]])
        for p in prefixes[:m]:
            o.table(p)

    paths = [("heads_us_per_row", "fetch_heads (dense batch)", heads, n),
             ("heads_whole_us_per_row", "fetch_heads (whole rows)", heads_whole, nw),
             ("rows_us_per_row", "fetch_rows (full rows)", full_rows, n),
             ("table_us_per_call", "table(prefix) (single)", singles, m)]
    for key, _, fn, count in paths:  # interleaved: each path timed on every backend before the next path
        for b in backends:
            kernels.set_backend(b)
            out["backends"].setdefault(b, {})[key] = 1e6 * _median_time(fn, a.repeat) / count
    kernels.set_backend(None)

    print(f"V={V} batch={n} head~{a.head}: best of {a.repeat} runs, model time excluded, CPU us per row")
    print(f"{'path':<28}" + "".join(f"{b:>10}" for b in backends))
    print(f"{'read (bandwidth reference)':<28}{out['read_us_per_row']:>10.2f}")
    for key, label, _, _ in paths:
        print(f"{label:<28}" + "".join(f"{out['backends'][b][key]:>10.2f}" for b in backends))
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(out, f, indent=2)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
