"""Guessing curves of a test set: what fraction of it a guesser who tries sequences in the model's
order has found after ``g`` guesses (the figure password papers publish).

:func:`guessing_curve` ranks every test sequence once, from the most probable to the least (each
deepening reuses the forwards of the one before): exact where the caps allow, and past them what
the answers stage gives (a certified bracket, or any other method it names, carried as is). A plain
``"bracket"`` (``[indexed sequences, 1/p]``) is wide, so with ``estimate=True`` those sequences also
get a Monte Carlo estimate from ONE set of draws beyond the exact head (``enum.monte_carlo``), its
interval clipped to the certified bracket. :class:`GuessCurve` then reads the fraction guessed at
any ``g``: a point value, a band ``lo <= fraction <= hi``, and ``exact`` when every test sequence is
certainly on one side of ``g`` (then ``lo == hi`` is the true fraction). The band is named for what
it is (``band``): ``'certified'`` (every sequence's certified rank bracket), ``'monte_carlo 95%'``
(a confidence interval), or both joined by ``+`` where both kinds meet at ``g``.

The point value past the exact region (``point_method='expected_fraction'``): the expected fraction
when each non-exact sequence's guess number is spread over its band, log-uniformly on each side of
its own point value (the rank's point, :func:`arenum.results.point_value`: its estimate, else its
bracket's geometric middle) with half the weight on each side. It lies strictly inside the band
wherever the band has width. :func:`draw_guessing_curves` draws several curves on one plot
(matplotlib, lazily): solid where exact, dashed with the band past it (a hatched, edged band that
stays visible in print), the band's kind named in the legend.

Sequences a model cannot produce (probability 0, unknown symbols) are never guessed: they stay in
the denominator and are counted as ``unrankable``. What it does not do: read files or encode
strings (the command line does), or dedupe beyond counting repeated sequences once.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

import numpy as np

from ..beyond import mass_count_bound
from .._validate import LN2
from ..results import point_value
from ..support import why_zero

__all__ = ["RankedItem", "CurvePoint", "GuessCurve", "band_name", "guessing_curve", "predeepen", "draw_guessing_curves"]



@dataclass(frozen=True)
class RankedItem:
    """One distinct test sequence: ``count`` occurrences, guess number ``rank + 1``.

    ``cert_lo <= true rank <= cert_hi`` is certified (equal when ``exact``); ``rank_lo .. rank_hi`` is
    the band drawn (the certified bracket, or an estimate's confidence interval inside it) and
    ``rank`` its point value (strictly inside a band of width). ``method``: ``"exact"``, the answers
    stage's bracket method, an estimator's name, or ``"unrankable"`` (``log_prob == -inf``: never
    guessed, ``error`` says why). ``band``: ``'exact'``, ``'certified'`` or ``'<estimator> 95%'``.
    """

    label: str
    count: int
    log_prob: float
    rank: float
    rank_lo: float
    rank_hi: float
    cert_lo: float
    cert_hi: float
    method: str
    exact: bool
    error: str | None = None
    band: str = "exact"


@dataclass(frozen=True)
class CurvePoint:
    """The fraction of the test set guessed within ``guesses`` guesses: ``fraction`` (point value),
    ``lo <= fraction <= hi`` (the band), ``exact``: every test sequence is certainly on one side.

    ``band``: what the band is (``'exact'``, ``'certified'``, ``'monte_carlo 95%'``, or kinds joined
    by ``+``); ``point_method``: ``'exact'`` or ``'expected_fraction'`` (the module docstring)."""

    guesses: float
    fraction: float
    lo: float
    hi: float
    exact: bool
    band: str = "exact"
    point_method: str = "exact"


class GuessCurve:
    """The ranked test set of one model; read it with :meth:`at`, :meth:`points`, :meth:`decades`."""

    def __init__(self, name: str, items: Sequence[RankedItem], forwards: int = 0, seconds: float = 0.0, *,
                 kind: str = "model", line_index: Sequence[int] | None = None,
                 line_labels: Sequence[str] | None = None) -> None:
        self.name = name
        self.items = list(items)
        self.forwards = forwards
        self.seconds = seconds
        self.kind = kind
        """``'model'`` (ranked under a model), ``'min_auto'`` (:func:`arenum.report.compare.min_auto`)
        or ``'reference'`` (another tool's guess numbers, :func:`arenum.report.compare.reference_curve`)."""
        self.line_index = list(line_index) if line_index is not None else None
        """The item of each test line, in the order given (``None``: one line per item and count)."""
        self.line_labels = list(line_labels) if line_labels is not None else None
        """Each test line as given (``None``: the items' labels)."""
        w = np.array([it.count for it in self.items], dtype=np.float64)
        self.n = int(w.sum())
        self._arrays = {}
        for key in ("rank", "rank_lo", "rank_hi", "cert_lo", "cert_hi"):
            g = np.array([getattr(it, key) + 1.0 for it in self.items], dtype=np.float64)  # guess numbers
            o = np.argsort(g, kind="stable")
            self._arrays[key] = (g[o], np.concatenate([[0.0], np.cumsum(w[o])]))
        ranked = [it for it in self.items if it.method != "unrankable"]
        self._cl = np.array([it.cert_lo + 1.0 for it in ranked], dtype=np.float64)  # certified guess numbers
        self._ch = np.array([it.cert_hi + 1.0 for it in ranked], dtype=np.float64)
        self._bands = [it.band for it in ranked]
        # the spread of each non-exact band: log(lo + 1), log(point + 1.5), log(hi + 2) in guess numbers
        wide = [i for i, it in enumerate(self.items) if it.rank_lo < it.rank_hi and it.method != "unrankable"]
        self._wide_w = w[wide]
        its = [self.items[i] for i in wide]
        self._wlo = np.array([it.rank_lo + 1.0 for it in its], dtype=np.float64)  # the band's guess numbers
        self._whi = np.array([it.rank_hi + 1.0 for it in its], dtype=np.float64)
        self._wa = np.log(np.array([it.rank_lo + 1.0 for it in its], dtype=np.float64))
        self._wc = np.log(np.array([it.rank + 1.5 for it in its], dtype=np.float64))
        self._wb = np.log(np.array([it.rank_hi + 2.0 for it in its], dtype=np.float64))

    def labels(self) -> list[str]:
        """Every test line, in the order given (:meth:`line_items`' lines)."""
        if self.line_labels is not None:
            return list(self.line_labels)
        return [it.label for it in self.line_items()]

    def line_items(self) -> list[RankedItem]:
        """The item of every test line, in the order given (a repeated line repeats its item)."""
        if self.line_index is not None:
            return [self.items[k] for k in self.line_index]
        return [it for it in self.items for _ in range(it.count)]

    @property
    def unrankable(self) -> int:
        """Test lines the model cannot produce (never guessed)."""
        return sum(it.count for it in self.items if it.method == "unrankable")

    @property
    def exact_lines(self) -> int:
        """Test lines ranked exactly (an unrankable line, never guessed, is not ranked)."""
        return sum(it.count for it in self.items if it.exact and it.method != "unrankable")

    def _within(self, key: str, g: float) -> float:
        gs, cum = self._arrays[key]
        return float(cum[np.searchsorted(gs, g, side="right")])

    def at(self, guesses: float) -> CurvePoint:
        """Same as ``sum(count for x in test if rank(x) + 1 <= guesses) / len(test)``, with its band."""
        g = float(guesses)
        if not self.n:
            return CurvePoint(g, 0.0, 0.0, 0.0, True)
        lo, hi = self._within("rank_hi", g), self._within("rank_lo", g)
        c_lo, c_hi = self._within("cert_hi", g), self._within("cert_lo", g)
        if c_lo == c_hi:
            return CurvePoint(g, c_lo / self.n, c_lo / self.n, c_lo / self.n, True)
        # what the band rests on: the kinds of every item whose certified bracket straddles g (those whose
        # own band straddles it among them; an estimate's interval wholly on one side of g places its item there)
        kinds = {self._bands[i] for i in np.flatnonzero((self._cl <= g) & (g < self._ch))} - {"exact"}
        return CurvePoint(g, self._expected(g, lo) / self.n, lo / self.n, hi / self.n, False,
                          " + ".join(sorted(kinds)) or "certified", "expected_fraction")

    def _expected(self, g: float, lo: float) -> float:
        """The expected count guessed within g: the items certainly within (``lo``: band's top ``<= g``)
        plus, for each band straddling ``g`` (its bottom ``<= g`` < its top), the share of its spread at
        or below ``g``: strictly between 0 and 1, so the point lies strictly inside the band (a band with
        a fractional end, a Monte Carlo interval's, was counted in ``lo`` and again here)."""
        if not self._wide_w.size:
            return lo
        x = math.log(math.floor(g) + 1.0)
        a, c, b = self._wa, self._wc, self._wb
        inside = (self._wlo <= g) & (g < self._whi)
        f = np.where(x < c, 0.5 * (x - a) / (c - a), 0.5 + 0.5 * (x - c) / (b - c))
        return lo + float(np.sum(self._wide_w[inside] * f[inside]))

    def decades(self, max_guesses: float = 1e14) -> list[CurvePoint]:
        """:meth:`at` ``10**k`` guesses for ``k = 0, 1, ...`` up to ``max_guesses``."""
        top = int(math.floor(math.log10(max(1.0, float(max_guesses))) + 1e-9))
        return [self.at(10.0**k) for k in range(top + 1)]

    def points(self, max_guesses: float = 1e14, per_decade: int = 16) -> list[CurvePoint]:
        """:meth:`at` log-spaced guess counts from 1 to ``max_guesses`` (for plots and CSV)."""
        d = math.log10(max(1.0, float(max_guesses)))
        gs = np.logspace(0.0, d, max(2, int(math.ceil(d * per_decade)) + 1))
        return [self.at(float(g)) for g in gs]

    def exact_until(self) -> float:
        """The largest guess count ``g`` such that the fraction is exact at every count up to ``g``
        (``inf`` when the whole curve is exact; ``0`` when not even at one guess): the guess number
        before the first that a bracket may hold."""
        straddle = [it.cert_lo + 1.0 for it in self.items if it.cert_lo != it.cert_hi and it.method != "unrankable"]
        return max(0.0, math.ceil(min(straddle)) - 1.0) if straddle else math.inf

    def as_dict(self, max_guesses: float = 1e14) -> dict:
        """JSON-ready: the decades, counts and every distinct sequence's rank record."""
        return {
            "model": self.name, "kind": self.kind, "lines": self.n, "distinct": len(self.items), "unrankable": self.unrankable,
            "exact_lines": self.exact_lines, "exact_until_guesses": self.exact_until(),
            "forwards": self.forwards, "seconds": round(self.seconds, 4),
            "decades": [p.__dict__ for p in self.decades(max_guesses)],
            "items": [{"string": it.label, "count": it.count,
                       "log_prob": it.log_prob if not math.isnan(it.log_prob) else None,
                       "bits": -it.log_prob / LN2 if it.log_prob > -math.inf else None,
                       "guess_number": it.rank + 1 if it.method != "unrankable" else None,
                       "guess_lo": it.rank_lo + 1, "guess_hi": it.rank_hi + 1, "method": it.method,
                       "band": it.band, "exact": it.exact, **({"error": it.error} if it.error else {})} for it in self.items],
        }


def _band(r: Any) -> str:
    if r.exact:
        return "exact"
    conf = getattr(r, "confidence", None)
    return f"{r.method} {conf:.0%}" if conf is not None else "certified"


def _item(enum: Any, label: str, count: int, r: Any) -> RankedItem:
    """The item of rank result ``r``. An estimate's interval is not certified, so its certified ends
    are rebuilt: every sequence indexed above it (``count_bracket`` just above its score, no deeper
    build) and the mass bound (fewer than ``1/p`` sequences are more probable)."""
    lp = float(r.log_prob)
    cert_lo, cert_hi = float(r.rank_lo), float(r.rank_hi)
    if getattr(r, "confidence", None) is not None and not r.exact:
        cert_lo = float(enum.count_bracket(math.nextafter(lp, math.inf)).lo)
        cert_hi = float(mass_count_bound(lp)) - 1.0
    return _clipped(label, count, lp, r, cert_lo, cert_hi)


def _clipped(label: str, count: int, lp: float, r: Any, cert_lo: float, cert_hi: float) -> RankedItem:
    """The item of ``r`` with its band clipped into the certified ``[cert_lo, cert_hi]`` and its point
    re-read by the one rule (:func:`arenum.results.point_value`) inside the clipped band."""
    lo = min(max(float(r.rank_lo), cert_lo), cert_hi)
    hi = max(min(float(r.rank_hi), cert_hi), lo)
    if r.exact:
        return RankedItem(label, count, lp, float(r.rank), lo, hi, cert_lo, cert_hi, "exact", True)
    est = float(r.rank) if getattr(r, "point_method", None) == "estimate" else None
    pt, _ = point_value(lo, hi, "rank", est)
    return RankedItem(label, count, lp, float(pt), lo, hi, cert_lo, cert_hi, str(r.method), False, band=_band(r))


def predeepen(enum: Any, scores: Sequence[float], pad_bits: float = 1.0) -> float:
    """Build the exact index down to the least probable of ``scores`` (descending) that the caps allow,
    in steps that each reach ``pad_bits`` past the next score not yet covered: a few large deepenings
    instead of one per score (the same forwards, a fraction of the bookkeeping). Near the cap the
    padding halves down to 1/16 bit, then the step aims at the score itself. Returns the score built
    to (``0.0``: nothing). Stops quietly at the first cap."""
    from ..errors import BudgetExceeded

    seek = enum.seek_index()
    built = 0.0
    pad = float(pad_bits)
    for s in scores:
        while s < built:
            t = s - pad * LN2 if pad > 0 else s
            try:
                seek.count(t)
            except BudgetExceeded:
                if pad <= 0:
                    return built
                pad = pad / 2 if pad > 1 / 16 else 0.0
                continue
            built = t
    return built


def _prepare_certified(enum: Any, deepest: float) -> None:
    """Lines past the caps of a finite-state model get certified brackets: its count DPs are built to
    the least probable line (plus a bit) at once, one rounding after the other
    (:meth:`~arenum.beyond.certified.CertifiedCounter.prepare_counts`: half the peak memory of
    growing both with the ranks, and one sweep each instead of one per deepening)."""
    certified = getattr(enum, "certified", None)
    cc = certified() if callable(certified) else None
    if cc is not None and callable(getattr(cc, "prepare_counts", None)):
        cc.prepare_counts(deepest - LN2)


def guessing_curve(
    enum: Any,
    sequences: Iterable[Sequence[Any] | None],
    *,
    labels: Sequence[str] | None = None,
    name: str = "",
    estimate: bool = True,
    samples: int | None = None,
    seed: int | None = 0,
    errors: Sequence[str | None] | None = None,
) -> GuessCurve:
    """Rank every test sequence under ``enum`` and return its :class:`GuessCurve`.

    Same as ``GuessCurve`` of ``[rank(x) for x in sequences]`` (repeats counted, ``None`` or a
    sequence of probability 0: unrankable, never guessed). Exact where the caps allow (one forward per
    live prefix at the budget of the least probable sequence ranked exactly); past them the answers
    stage's certified bracket, plus, with ``estimate`` and a plain ``"bracket"``, a Monte Carlo
    estimate from one set of ``samples`` draws (``enum.monte_carlo``; at most ``samples`` forwards per
    level). ``errors[j]``, when given, says why ``sequences[j]`` is ``None``.
    """
    import time

    t0 = time.perf_counter()
    f0 = int(enum.stats["forwards"])
    seqs = list(sequences)
    labs = [str(s) for s in seqs] if labels is None else [str(x) for x in labels]
    if len(labs) != len(seqs):
        raise ValueError(f"labels has {len(labs)} entries but sequences has {len(seqs)}")
    errs = list(errors) if errors is not None else [None] * len(seqs)
    # distinct sequences, counted, in first-seen order
    first: dict[Any, int] = {}
    counts: list[int] = []
    keys: list[Any] = []
    for j, s in enumerate(seqs):
        key = ("none", j) if s is None else tuple(s)
        if key in first:
            counts[first[key]] += 1
            continue
        first[key] = len(keys)
        keys.append((j, s))
        counts.append(1)
    good = [i for i, (_, s) in enumerate(keys) if s is not None]
    scores = [-math.inf] * len(keys)
    if good:
        for i, v in zip(good, enum.score_sequences([tuple(keys[i][1]) for i in good])):
            scores[i] = float(v)
    index = [first[("none", j) if s is None else tuple(s)] for j, s in enumerate(seqs)]
    items: list[RankedItem | None] = [None] * len(keys)
    for i, (j, s) in enumerate(keys):
        if scores[i] == -math.inf:
            sup = getattr(enum, "support", None)  # past the length cap, outside a constraint, or probability 0
            why = errs[j] or ("sequence " + why_zero(tuple(s), sup, None) if sup is not None and s is not None
                              else "probability 0 under the model")
            items[i] = RankedItem(labs[j], counts[i], -math.inf, math.inf, math.inf, math.inf, math.inf, math.inf,
                                  "unrankable", True, why)
    ranked = sorted((i for i in good if scores[i] > -math.inf), key=lambda i: -scores[i])
    built = predeepen(enum, [scores[i] for i in ranked])
    if ranked and scores[ranked[-1]] < built:
        _prepare_certified(enum, scores[ranked[-1]])
    loose: list[int] = []
    for i in ranked:
        j, s = keys[i]
        r = enum.rank(s)
        items[i] = _item(enum, labs[j], counts[i], r)
        if not r.exact and r.method == "bracket":
            loose.append(i)
    if estimate and loose and callable(getattr(enum, "monte_carlo", None)):
        from ..errors import BudgetExceeded

        try:
            est = enum.monte_carlo(samples, seed=seed)
        except BudgetExceeded:  # the draws do not fit the caps: every line keeps its certified bracket
            loose = []
        head = enum.exact_head() if loose and getattr(est, "head", None) is not None else None
        for i in loose:
            b = items[i]
            e = est.rank(b.log_prob, head=head)
            items[i] = _clipped(b.label, b.count, b.log_prob, e, b.cert_lo, b.cert_hi)
    return GuessCurve(name, [it for it in items if it is not None], int(enum.stats["forwards"]) - f0,
                      time.perf_counter() - t0, line_index=index, line_labels=labs)


def band_name(kind: str) -> str:
    """Words for a band kind: ``'certified'`` -> ``'certified band'``, ``'monte_carlo 95%'`` ->
    ``'95% Monte Carlo interval'``."""
    if kind in ("certified", "exact"):
        return f"{kind} band"
    method, _, conf = kind.rpartition(" ")
    name = {"monte_carlo": "Monte Carlo"}.get(method, method.replace("_", " "))
    return f"{conf} {name} interval"


def _fmt_guesses(g: float) -> str:
    return f"{g:,.0f}" if g < 1e7 else f"{g:.3g}"


def draw_guessing_curves(curves: Sequence[GuessCurve], *, max_guesses: float = 1e14, title: str = "") -> Any:
    """A matplotlib Figure: percent of the test set guessed against the number of guesses (log x).

    One colour per curve (the min-auto curve, :func:`arenum.report.compare.min_auto`, in black and
    thicker; a reference curve, :func:`arenum.report.compare.reference_curve`, dash-dotted): solid where
    the fraction is exact, dashed (the point value) with its band past it (hatched, with edge lines,
    so that it shows in print), the legend naming the band's kind; a dotted vertical line where each
    curve stops being exact, named in the legend (``exact up to g guesses``).
    """
    from .plot import percent_axis, pyplot

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(12.0, 5.6), dpi=110, constrained_layout=True)
    n_colour = 0
    for cur in curves:
        if cur.kind == "min_auto":
            color, width = "black", 2.8
        else:
            color, width = f"C{n_colour % 10}", 2.2
            n_colour += 1
        pts = np.array(cur.points(max_guesses), dtype=object)
        g = np.array([p.guesses for p in pts])
        y = np.array([p.fraction for p in pts])
        lo = np.array([p.lo for p in pts])
        hi = np.array([p.hi for p in pts])
        ex = np.array([p.exact for p in pts])
        lbl = f"{cur.name} (n = {cur.n:,})"
        if ex.any():
            yy = np.where(ex, y, np.nan)
            last = int(np.flatnonzero(ex)[-1])
            if last + 1 < len(ex) and not ex[last + 1]:
                yy[last + 1] = np.nan
            what = "guess numbers from the reference file" if cur.kind == "reference" else "exact"
            ax.plot(g, yy, "-." if cur.kind == "reference" else "-", color=color, lw=width, label=f"{lbl}: {what}")
        if (~ex).any():
            first = max(0, int(np.flatnonzero(~ex)[0]) - 1)
            sel = slice(first, None)
            kinds = sorted({k for p in pts[sel] for k in p.band.split(" + ") if not p.exact})
            ax.fill_between(g[sel], lo[sel], hi[sel], facecolor=color, alpha=0.3, lw=0)
            ax.fill_between(g[sel], lo[sel], hi[sel], facecolor="none", edgecolor=color, hatch="///", lw=0,
                            alpha=0.6)
            ax.plot(g[sel], lo[sel], "-", color=color, lw=0.8, alpha=0.9)
            ax.plot(g[sel], hi[sel], "-", color=color, lw=0.8, alpha=0.9)
            ax.plot(g[sel], y[sel], "--", color=color, lw=width * 0.75,
                    label=f"{lbl}: point value in its {' + '.join(band_name(k) for k in kinds)}")
        eu = cur.exact_until()
        if math.isfinite(eu) and 1.0 <= eu <= max_guesses:
            ax.axvline(eu, color=color, lw=0.9, ls=":",
                       label=f"{cur.name}: exact up to {_fmt_guesses(eu)} guesses (dotted; past it, a band)")
    ax.set_xscale("log")
    ax.set_xlim(1.0, max_guesses)
    ax.set_ylim(0.0, 1.0)
    percent_axis(ax)
    ax.set_xlabel("number of guesses (guess number = rank + 1)")
    ax.set_ylabel("test set guessed (%)")
    ax.set_title(title or "Guessing curve of the test set")
    ax.grid(True, which="major", alpha=0.35)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, borderaxespad=0.0,
              title="exact: every line certainly on one side of g", title_fontsize=8)
    return fig
