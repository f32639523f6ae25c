"""Soak the commit path with faults: exceptions at random bytecodes of a commit and from signal handlers.

Four families of trials, each on a random small model (4-6 tokens, length 4-5, terminating or not;
every answer checked against brute force):

- ``settrace``: a ``sys.settrace`` hook counts the bytecodes run inside a commit (the tree's commit,
  its records' application, the growable arrays, the store's journal write, rollback and lock
  release) and raises a ``BaseException`` at one drawn at random;
- ``sigalrm``: a ``SIGALRM`` timer, armed at a random moment of a build, whose handler raises;

each ``without`` and ``with`` a store. After every fault: ``_check()``, the build finished, every
answer equal to brute force; with a store, the enumerable dropped (as if killed) or closed, the store
reopened (nothing it had committed lost: its forwards and built budget kept), checked and compared;
every ``--reopen-every`` trials the stores of those trials are reopened read-only in a fresh process,
which must answer exactly without a forward.

    python benchmarks/soak_faults.py --trials 500 --quick  # 2,000 trials: 2,108 s (35 min) on a 2-core
                                                          # machine shared with other work (docs/store.md)
    python benchmarks/soak_faults.py --trials 5 --quick    # a smoke run (20 trials, about 30 s)

Without ``--quick`` every journal record and snapshot is fsynced, as in real use: slower still.

Prints a table (trials, faults that landed, wrong answers, failed checks, stores that would not
reopen, commits lost, unexpected errors) and writes ``benchmarks/results/soak_faults.json``. Exit
status 1 if anything went wrong.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import traceback

import numpy as np

from arenum import AutoregressiveEnumerable
from arenum.exact import store
from arenum.testing import RandomModel, brute_force


# the fault harness is the test suite's own (tests/exact/test_commit_faults.py), run here at scale
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "tests", "exact"))
from test_commit_faults import CODES, Alarm, Injected, _traced, alarm_during  # noqa: E402


_CASES: dict = {}


def _case(key: tuple):
    """(model, brute force) of a case ``(seed, V, L, terminating)``, memoized."""
    if key not in _CASES:
        seed, V, L, term = key
        toks = [chr(ord("a") + i) for i in range(V)]
        m = RandomModel(toks, seed=seed, eos="a" if term else None, eos_boost=2.0)
        _CASES[key] = m, brute_force(m.table, fixed_len=None if term else L, eos="a" if term else None, cap=L)
    return _CASES[key]


def _open(m, L: int, term: bool, path: str | None) -> AutoregressiveEnumerable:
    return AutoregressiveEnumerable(m, max_len=L, eos="a" if term else None, batch_next_logprobs=m.batch,
                                    batch_size=4, store=path, fingerprint=None if path is None else "m")


class Tally:
    def __init__(self) -> None:
        self.rows: dict[str, dict] = {}
        self.errors: list[str] = []

    def row(self, family: str) -> dict:
        return self.rows.setdefault(family, {"trials": 0, "faults": 0, "wrong": 0, "check_failed": 0,
                                             "unopenable": 0, "lost": 0, "unexpected": 0, "seconds": 0.0})

    def bad(self, family: str, what: str, detail: str) -> None:
        self.row(family)[what] += 1
        if len(self.errors) < 20:
            self.errors.append(f"{family}: {what}: {detail}")


def _verify(ar, bf, fam: str, tally: Tally, t: int) -> None:
    try:
        ar._check()
    except AssertionError as e:
        tally.bad(fam, "check_failed", f"trial {t}: {e}")
        return
    n = ar.count(-math.inf)
    if n != len(bf) or ar.slice(0, n) != bf:
        tally.bad(fam, "wrong", f"trial {t}: count {n} of {len(bf)}")
    try:
        ar._check()
    except AssertionError as e:
        tally.bad(fam, "check_failed", f"trial {t} (after the answers): {e}")


def _trial(kind: str, with_store: bool, t: int, rng: np.random.Generator, root: str, tally: Tally,
           totals: dict, stores: list) -> None:
    fam = f"{kind}, {'with' if with_store else 'without'} a store"
    row = tally.row(fam)
    row["trials"] += 1
    key = (int(rng.integers(0, 6)), int(rng.integers(4, 7)), int(rng.integers(4, 6)), bool(rng.integers(0, 2)))
    m, bf = _case(key)
    _, V, L, term = key
    path = os.path.join(root, f"{kind}-{t}") if with_store else None
    ar = None
    try:
        ar = _open(m, L, term, path)
        if kind == "settrace":
            first = -2.0 - 3 * rng.random()  # part built before the fault, sometimes
            tk = (key, with_store)
            if tk not in totals:  # bytecodes run inside commits by a whole build
                probe = _open(m, L, term, os.path.join(root, f"probe-{t}") if with_store else None)
                totals[tk] = _traced(lambda: (probe.count(first), probe.count(-math.inf)), 0)
                probe.close()
            k = int(rng.integers(1, totals[tk] + 1))
            try:
                _traced(lambda: (ar.count(first), ar.count(-math.inf)), k)
            except Injected:
                row["faults"] += 1
        else:
            row["faults"] += alarm_during(lambda: (ar.count(-math.inf), ar.slice(0, 50)),
                                          float(rng.uniform(0.0002, 0.03)))
        try:
            ar._check()
        except AssertionError as e:
            tally.bad(fam, "check_failed", f"trial {t} right after the fault: {e}")
        if with_store:
            held, built = ar.stats["store_forwards"], ar._tree.built
            if rng.random() < 0.5:
                ar.close()
            ar = None  # dropped: as if killed, the journal is all there is
            try:
                ar = _open(m, L, term, path)
            except Exception as e:  # noqa: BLE001 - counted
                tally.bad(fam, "unopenable", f"trial {t}: {type(e).__name__}: {e}")
                return
            if ar.stats["store_forwards"] < held or ar._tree.built > built:
                tally.bad(fam, "lost", f"trial {t}: forwards {ar.stats['store_forwards']} < {held} or built moved up")
            stores.append((path, key))
        _verify(ar, bf, fam, tally, t)
    except Exception as e:  # noqa: BLE001 - counted: a fault must never surface as another error
        tally.bad(fam, "unexpected", f"trial {t}: {type(e).__name__}: {e} {traceback.format_exc(limit=-3)}")
    finally:
        if ar is not None and with_store:
            try:
                ar.close()
            except Exception as e:  # noqa: BLE001 - counted
                tally.bad(fam, "unexpected", f"trial {t} close: {type(e).__name__}: {e}")


_REOPEN = textwrap.dedent("""
    import json, math, sys
    from arenum import AutoregressiveEnumerable
    from arenum.testing import RandomModel, brute_force
    bad = []
    for path, (seed, V, L, term) in json.loads(sys.argv[1]):
        toks = [chr(ord("a") + i) for i in range(V)]
        m = RandomModel(toks, seed=seed, eos="a" if term else None, eos_boost=2.0)
        bf = brute_force(m.table, fixed_len=None if term else L, eos="a" if term else None, cap=L)
        try:
            ar = AutoregressiveEnumerable(m, max_len=L, eos="a" if term else None, batch_next_logprobs=m.batch,
                                          store=path, fingerprint="m", store_readonly=True)
            ar._check()
            if ar.stats["forwards"] or ar.count(-math.inf) != len(bf) or ar.slice(0, len(bf)) != bf:
                bad.append([path, "wrong"])
        except Exception as e:
            bad.append([path, f"{type(e).__name__}: {e}"])
    print(json.dumps(bad))
""")


def _reopen_fresh(stores: list, tally: Tally) -> int:
    r = subprocess.run([sys.executable, "-c", _REOPEN, json.dumps(stores)], capture_output=True, text=True,
                       timeout=600, env={**os.environ})
    if r.returncode != 0:
        tally.errors.append(f"fresh process failed: {r.stderr[-500:]}")
        tally.bad("fresh-process reopen", "unexpected", "the process failed")
        return len(stores)
    bad = json.loads(r.stdout.strip().splitlines()[-1])
    for path, why in bad:
        tally.bad("fresh-process reopen", "wrong" if why == "wrong" else "unopenable", f"{path}: {why}")
    return len(stores)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=250, help="trials per family (four families; default 250)")
    ap.add_argument("--seed", type=int, default=26)
    ap.add_argument("--reopen-every", type=int, default=100, help="reopen the stores in a fresh process every N trials")
    ap.add_argument("--quick", action="store_true", help="no fsync (faults are exceptions, not power cuts)")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results",
                                                  "soak_faults.json"))
    args = ap.parse_args()
    if args.quick:
        store.os.fsync = lambda fd: None  # type: ignore[assignment]
    rng = np.random.default_rng(args.seed)
    tally = Tally()
    totals: dict = {}
    fresh = {"stores": 0, "runs": 0}

    def handler(signum, frame):
        raise Alarm()

    old = signal.signal(signal.SIGALRM, handler)
    t0 = time.perf_counter()
    try:
        with tempfile.TemporaryDirectory(prefix="arenum-soak-") as root:
            pending: list = []
            for t in range(args.trials):
                for kind in ("settrace", "sigalrm"):
                    for with_store in (False, True):
                        a = time.perf_counter()
                        _trial(kind, with_store, t, rng, root, tally, totals, pending)
                        fam = f"{kind}, {'with' if with_store else 'without'} a store"
                        tally.row(fam)["seconds"] += time.perf_counter() - a
                if (t + 1) % args.reopen_every == 0 or t + 1 == args.trials:
                    if pending:
                        fresh["stores"] += _reopen_fresh(pending, tally)
                        fresh["runs"] += 1
                    pending = []
                if (t + 1) % max(1, args.trials // 10) == 0:
                    print(f"  {t + 1}/{args.trials} rounds, {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    cols = ("trials", "faults", "wrong", "check_failed", "unopenable", "lost", "unexpected")
    print(f"{'family':32}" + "".join(f"{c:>13}" for c in cols))
    for fam, r in tally.rows.items():
        print(f"{fam:32}" + "".join(f"{r[c]:>13,}" for c in cols))
    total = {c: sum(r[c] for r in tally.rows.values()) for c in cols}
    print(f"{'total':32}" + "".join(f"{total[c]:>13,}" for c in cols))
    print(f"stores reopened in a fresh process: {fresh['stores']:,} ({fresh['runs']} processes); "
          f"{time.perf_counter() - t0:.0f} s")
    for e in tally.errors:
        print("  " + e)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump({"args": vars(args), "rows": tally.rows, "total": total, "fresh": fresh,
                   "errors": tally.errors, "seconds": time.perf_counter() - t0}, f, indent=1)
    bad = sum(total[c] for c in cols[2:])
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
