"""Plotting helpers: the guessing curve and the cumulative-mass curve of an enumerable, as a PNG.

- :func:`exact_curve` reads points off the EXACT index: for log-spaced ranks ``k`` it takes
  ``t = threshold(k)``, ``count(t)`` and ``mass_above(t)``. Cost: one forward per live prefix at the
  budget of the deepest rank asked for (``threshold(max_rank)``); every other point is free.
- :func:`estimated_curve` draws Monte Carlo count estimates with confidence intervals at thresholds
  past the exact region (``enum.monte_carlo``, from ``arenum.beyond.estimate``); ``None`` without them.
- :func:`draw_curves` draws both panels from plain point records, so any object with
  ``log_prob``, ``estimate``, ``ci_lo`` and ``ci_hi`` can feed the estimated band.
- :func:`save_png` writes a figure atomically (temporary file in the same folder, then rename).

matplotlib is imported lazily (Agg backend); numpy only otherwise. What it does not do: pick the
ranks for you past the exact budget, or plot anything interactively.
"""
from __future__ import annotations

import importlib
import importlib.util
import math
import os
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from .._io import atomic_write

import numpy as np
from .._validate import LN2

__all__ = ["CurvePoint", "EstimatePoint", "FIGURE_FORMATS", "Mark", "pyplot", "exact_curve", "estimated_curve", "draw_curves",
           "figure_format", "percent_axis", "save_figure", "save_png"]



@dataclass(frozen=True)
class CurvePoint:
    """One exact point: ``count`` sequences have ``log_prob >= log_prob`` (``rank = threshold``'s k).

    mass_lo <= P(log p(Y) >= log_prob) <= mass_hi.
    """

    rank: int
    count: int
    log_prob: float
    mass_lo: float
    mass_hi: float


@dataclass(frozen=True)
class EstimatePoint:
    """One estimated point: ``ci_lo <= #{x : log p(x) >= log_prob} <= ci_hi`` at the stated confidence,
    and (when drawn) ``mass_lo <= P(log p(Y) >= log_prob) <= mass_hi`` around the estimate ``mass``."""

    log_prob: float
    estimate: float
    ci_lo: float
    ci_hi: float
    mass: float | None = None
    mass_lo: float | None = None
    mass_hi: float | None = None


@dataclass(frozen=True)
class Mark:
    """A ranked sequence to mark: guess number ``rank_lo + 1`` (``.. rank_hi + 1``), cumulative mass
    ``cum_lo .. cum_hi``. ``method`` ``"exact"``: a point; ``"bracket"``: an arrow from ``rank_lo``;
    an estimator's name: ``estimate`` with its interval as an error bar. Far below the curve: listed."""

    label: str
    log_prob: float
    rank_lo: float
    rank_hi: float
    cum_lo: float = 0.0
    cum_hi: float = 0.0
    method: str = "exact"
    estimate: float | None = None

    @property
    def exact(self) -> bool:
        return self.rank_lo == self.rank_hi


def log_ranks(max_rank: int, n_points: int) -> list[int]:
    """About ``n_points`` distinct integers from 1 to ``max_rank``, log-spaced, both ends included."""
    if max_rank < 1:
        return []
    ks = np.unique(np.rint(np.logspace(0.0, math.log10(max_rank), max(2, n_points))).astype(np.int64))
    ks = ks[(ks >= 1) & (ks <= max_rank)]
    out = [int(k) for k in ks]
    if out[-1] != max_rank:
        out.append(max_rank)
    return out


def exact_curve(enum: Any, max_rank: int, n_points: int = 40) -> list[CurvePoint]:
    """Exact guessing-curve points at log-spaced ranks ``1 .. max_rank``.

    Same as sorting the support by score and reading the ``k``-th score, the number of sequences at
    least that probable, and their total mass, at each ``k``. Exact (mass to float rounding). Cost:
    the forwards of ``enum.threshold(max_rank)``. When a cap stops that build (or ``threshold`` would
    only estimate), the curve stops at the sequences the exact index holds. ``IndexError`` past the
    end of the support.
    """
    from ..errors import BudgetExceeded

    ks = log_ranks(int(max_rank), int(n_points))
    if not ks:
        return []
    try:
        capped = not getattr(enum.threshold(ks[-1]), "exact", True)  # build once, at the deepest budget
    except BudgetExceeded:
        capped = True
    if capped:
        answers = getattr(enum, "answers", None)
        if answers is not None:  # a position query may fail before building: build what the caps allow
            answers.deepen_head()
        head = enum.exact_head() if hasattr(enum, "exact_head") else None  # past the cap: the sequences
        held = head.count if head is not None else int(enum.count_bracket(-math.inf).lo)  # indexed so far
        if held < 1:
            raise BudgetExceeded(f"no sequence is affordable exactly (rank {ks[-1]:,} asked)")
        ks = log_ranks(min(held, ks[-1]), int(n_points))
    pts = []
    for k in ks:
        t = float(enum.threshold(k))
        c = int(enum.count(t))
        lo, hi = enum.mass_above(t)
        pts.append(CurvePoint(rank=k, count=c, log_prob=t, mass_lo=float(lo), mass_hi=float(hi)))
    return pts


def estimator_available(enum: Any = None) -> bool:
    """Whether Monte Carlo estimates can be drawn: ``arenum.beyond.estimate`` is installed and ``enum``
    (when given) has ``monte_carlo``. The estimated band is drawn only then."""
    try:
        if importlib.util.find_spec("arenum.beyond.estimate") is None:
            return False
    except (ImportError, ValueError):
        return False
    return enum is None or callable(getattr(enum, "monte_carlo", None))


def estimated_curve(enum: Any, log_probs: Iterable[float], *, samples: int | None = None,
                    seed: int | None = 0) -> list[EstimatePoint] | None:
    """Estimated counts ``#{x : log p(x) >= t}`` with confidence intervals at each ``t``, or ``None``.

    Uses ``enum.monte_carlo(samples, seed=seed)``: one set of draws from the tail beyond the exact
    index built so far (its head), reused at every threshold; each count is the head's exact count
    plus the tail's importance-sampling estimate, and the same for the mass above ``t`` (``mass``,
    ``mass_lo``, ``mass_hi``). Guarantee: an ESTIMATE, ``ci_lo <= count <= ci_hi``
    at ``enum.confidence``; thresholds the head covers come back exact (``ci_lo == ci_hi``). Cost: at
    most ``samples`` forwards per level of the draws. ``None`` when no estimator is available.
    """
    if not estimator_available(enum):
        return None
    est = enum.monte_carlo(samples, seed=seed)
    head = enum.exact_head() if est.head is not None else None
    out = []
    for t in log_probs:
        c = est.count(float(t), head=head)
        mass = est.mass_above(float(t), head=head)
        out.append(EstimatePoint(log_prob=float(t), estimate=float(c.estimate), ci_lo=float(c.ci_lo),
                                 ci_hi=float(c.ci_hi), mass=float(mass.value), mass_lo=float(mass.lo),
                                 mass_hi=float(mass.hi)))
    return out


def pyplot() -> Any:
    """``matplotlib.pyplot`` on the Agg backend (imported lazily: matplotlib is an optional extra)."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def draw_curves(
    exact: Sequence[CurvePoint],
    estimated: Sequence[Any] | None = None,
    marks: Sequence[Mark] = (),
    *,
    title: str = "",
    subtitle: str = "",
) -> Any:
    """A two-panel matplotlib Figure: guessing curve (log-log) and cumulative mass (log-linear).

    Left: the probability of the ``k``-th most likely sequence against ``k`` (exact region, solid;
    estimated region, dashed with its confidence band, when ``estimated`` is given: any records with
    ``log_prob``, ``estimate``, ``ci_lo``, ``ci_hi``), and the ``marks`` at their guess numbers.
    Right: the probability mass of the ``k`` most likely sequences (``mass_above`` at the same
    thresholds), with its bracket.
    """
    if not exact:
        raise ValueError("no exact points to plot (max_rank must be >= 1)")
    plt = pyplot()

    fig, (ax, bx) = plt.subplots(1, 2, figsize=(12.5, 5.2), dpi=110, constrained_layout=True)
    x = np.array([p.count for p in exact], dtype=float)
    y = np.exp(np.array([p.log_prob for p in exact], dtype=float))
    last = exact[-1]
    y_floor = float(y.min())

    ax.axvspan(1.0, last.count, color="C0", alpha=0.07, lw=0,
               label=f"exact region: ranks 1..{last.count:,} ({-last.log_prob / LN2:.1f} bits)")
    ax.plot(x, y, "-o", color="C0", lw=2.0, ms=3.0, label="exact (from the index)")
    ax.axvline(last.count, color="0.55", lw=0.8, ls=":")
    if estimated:
        est = sorted(estimated, key=lambda e: -e.log_prob)
        ey = np.exp(np.array([e.log_prob for e in est], dtype=float))
        ex = np.array([e.estimate for e in est], dtype=float)
        lo = np.array([e.ci_lo for e in est], dtype=float)
        hi = np.array([e.ci_hi for e in est], dtype=float)
        ax.fill_betweenx(ey, np.maximum(lo, 1.0), np.maximum(hi, 1.0), color="C1", alpha=0.3, lw=0,
                         label="estimate: confidence interval")
        for edge in (lo, hi):
            ax.plot(np.maximum(edge, 1.0), ey, "-", color="C1", lw=0.6, alpha=0.8)
        ax.plot(ex, ey, "--", color="C1", lw=1.6, label="estimate (Monte Carlo)")
        y_floor = min(y_floor, float(ey.min()))
    off_scale = []
    x_right = max([float(x.max())] + [mk.rank_lo + 1.0 for mk in marks if mk.method != "bracket"]
                  + ([float(e.estimate) for e in estimated] if estimated else []))

    def _side(px: float) -> dict:  # labels of points near the right edge go to their left
        left = math.log(px) > 0.55 * math.log(max(x_right, 2.0))
        return {"xytext": (-9 if left else 7, 6), "ha": "right" if left else "left",
                "arrowprops": {"arrowstyle": "-", "lw": 0.5, "color": "0.55", "shrinkA": 0, "shrinkB": 3}}

    labels_a: list = []
    labels_b: list = []
    est_mass_x = bool(estimated) and all(getattr(e, "mass", None) is not None for e in estimated)
    for i, mk in enumerate(marks):
        px, py = mk.rank_lo + 1.0, math.exp(mk.log_prob)
        color = f"C{2 + i % 7}"
        if mk.exact:
            ax.plot([px], [py], "D", color=color, ms=6, zorder=5)
            labels_a.append(ax.annotate(f"{mk.label}: #{int(px):,}", (px, py), textcoords="offset points",
                                        fontsize=8, color=color, **_side(px)))
            cy = 0.5 * (mk.cum_lo + mk.cum_hi)
            bx.plot([px], [cy], "D", color=color, ms=6, zorder=5)
            labels_b.append(bx.annotate(mk.label, (px, cy), textcoords="offset points", fontsize=8, color=color,
                                        **_side(px)))
        elif mk.method == "bracket":
            if py >= y_floor * 1e-3:
                ax.plot([px], [py], ">", color=color, ms=8, zorder=5)
                labels_a.append(ax.annotate(f"{mk.label}: # > {int(mk.rank_lo):,} (bracket)", (px, py),
                                            textcoords="offset points", fontsize=8, color=color, **_side(px)))
            else:
                off_scale.append(f"{mk.label}: p = {py:.2g}, # > {int(mk.rank_lo):,} (bracket, off scale)")
        else:
            ex = (mk.estimate if mk.estimate is not None else mk.rank_lo) + 1.0
            if py >= y_floor * 1e-3:
                ax.errorbar([ex], [py], xerr=[[ex - mk.rank_lo - 1.0], [mk.rank_hi + 1.0 - ex]], fmt="s",
                            color=color, ms=5, capsize=3, zorder=5)
                labels_a.append(ax.annotate(f"{mk.label}: #~{ex:.3g} (estimate)", (ex, py),
                                            textcoords="offset points", fontsize=8, color=color, **_side(ex)))
                cy = 0.5 * (mk.cum_lo + mk.cum_hi)
                if est_mass_x:  # the right-hand panel reaches past the exact region: mark it there too
                    bx.errorbar([ex], [cy], yerr=[[cy - mk.cum_lo], [mk.cum_hi - cy]], fmt="s", color=color, ms=5,
                                capsize=3, zorder=5)
                    labels_b.append(bx.annotate(f"{mk.label} (estimate)", (ex, cy), textcoords="offset points",
                                                fontsize=8, color=color, **_side(ex)))
            else:
                off_scale.append(f"{mk.label}: p = {py:.2g}, # ~ {ex:.3g} [{mk.rank_lo + 1:.3g}, "
                                 f"{mk.rank_hi + 1:.3g}] (estimate, off scale)")
    if off_scale:
        ax.text(0.02, 0.02, "\n".join(off_scale), transform=ax.transAxes, fontsize=8, va="bottom", ha="left",
                bbox=dict(boxstyle="round", fc="white", ec="0.7"))
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("guess number k (rank + 1)")
    ax.set_ylabel("probability of the k-th most likely sequence")
    ax.set_title("Guessing curve")
    ax.grid(True, which="major", alpha=0.35)
    ax.legend(loc="upper right", fontsize=8)

    mlo = np.array([p.mass_lo for p in exact], dtype=float)
    mhi = np.array([p.mass_hi for p in exact], dtype=float)
    bx.axvspan(1.0, last.count, color="C0", alpha=0.06, lw=0)
    bx.fill_between(x, mlo, mhi, color="C0", alpha=0.3, label="bracket (float rounding)")
    bx.plot(x, 0.5 * (mlo + mhi), "-o", color="C0", lw=2.0, ms=3.0, label="exact mass of the top k")
    top = max([float(mhi.max())] + [0.5 * (mk.cum_lo + mk.cum_hi) for mk in marks if mk.exact])
    if est_mass_x:
        est = sorted(estimated, key=lambda e: -e.log_prob)
        ex = np.array([e.estimate for e in est], dtype=float)
        em = np.array([e.mass for e in est], dtype=float)
        bx.fill_between(ex, [e.mass_lo for e in est], [e.mass_hi for e in est], color="C1", alpha=0.3, lw=0,
                        label="estimate: confidence interval")
        bx.plot(ex, em, "--", color="C1", lw=1.6, label="estimated mass (Monte Carlo)")
        top = max([top, float(max(e.mass_hi for e in est))]
                  + [0.5 * (mk.cum_lo + mk.cum_hi) for mk in marks if not mk.exact and mk.method != "bracket"])
    bx.set_xscale("log")
    bx.set_ylim(0.0, max(0.05, min(1.02, top * 1.12)))
    bx.set_xlabel("number of guesses k")
    bx.set_ylabel("probability mass of the k most likely (success rate)")
    bx.set_title("Cumulative mass")
    bx.grid(True, which="major", alpha=0.35)
    bx.legend(loc="upper left", fontsize=8)
    if title or subtitle:
        fig.suptitle(title + (("\n" + subtitle) if subtitle else ""), fontsize=11)
    declutter(fig, labels_a)
    declutter(fig, labels_b)
    return fig


def declutter(fig: Any, labels: Sequence[Any], pad_px: float = 2.0) -> int:
    """Move annotation ``labels`` (offset-points annotations of one figure) down, one at a time, until none
    overlaps another, with a thin leader line to its point when moved. Returns how many moved.

    The labels are placed in the order given; each is pushed below every earlier label it would
    overprint (at most 40 steps), so no two labels share a pixel; their leader lines (``arrowprops``)
    follow them back to their points.
    """
    if len(labels) < 2:
        return 0
    from matplotlib.text import Text

    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    placed: list = []
    moved = 0
    for lab in labels:
        bb = Text.get_window_extent(lab, renderer)  # the text alone, not its leader line
        shift_px = 0.0
        for _ in range(40):
            hit = next((p for p in placed if bb.overlaps(p)), None)
            if hit is None:
                break
            step = bb.y1 - hit.y0 + pad_px  # just below the label it hits
            shift_px += step
            bb = bb.translated(0.0, -step)
        if shift_px:
            x, y = lab.xyann
            lab.xyann = (x, y - shift_px * 72.0 / fig.dpi)
            moved += 1
        placed.append(bb)
    return moved


def percent_axis(ax: Any) -> None:
    """Label the y axis of ``ax`` (fractions 0..1) in percent: ticks ``0%`` .. ``100%``."""
    from matplotlib.ticker import PercentFormatter

    ax.yaxis.set_major_formatter(PercentFormatter(xmax=1.0, decimals=0))


def save_png(fig: Any, path: str | os.PathLike) -> int:
    """Write ``fig`` as a PNG to ``path`` atomically (temp file in the same folder, then rename).

    Returns the file size in bytes. Nothing is left at ``path`` (or beside it) if writing fails.
    """
    return save_figure(fig, path, "png")


FIGURE_FORMATS = ("png", "svg", "pdf")
"""The formats :func:`save_figure` writes, told by the file's extension."""


def figure_format(path: str | os.PathLike) -> str:
    """``'png'``, ``'svg'`` or ``'pdf'`` from ``path``'s extension; ``ValueError`` (one line) otherwise."""
    ext = os.path.splitext(os.fspath(path))[1].lower().lstrip(".")
    if ext not in FIGURE_FORMATS:
        raise ValueError(f"{os.fspath(path)}: the figure's format is told by its extension: .png, .svg or .pdf "
                         f"(got {'.' + ext if ext else 'none'})")
    return ext


def save_figure(fig: Any, path: str | os.PathLike, fmt: str | None = None) -> int:
    """Write ``fig`` to ``path`` atomically as PNG, SVG or PDF (``fmt``, default: by the extension,
    :func:`figure_format`), without a creation date or random ids, so that the same figure gives the
    same bytes. Returns the file size in bytes; nothing is left at ``path`` if writing fails."""
    fmt = figure_format(path) if fmt is None else fmt
    meta = {"png": None, "svg": {"Date": None}, "pdf": {"CreationDate": None, "ModDate": None}}[fmt]
    try:
        import matplotlib

        with matplotlib.rc_context({"svg.hashsalt": "arenum"}):
            return atomic_write(path, lambda tmp: fig.savefig(tmp, format=fmt, metadata=meta),
                                suffix=f".{fmt}.tmp")
    finally:
        pyplot().close(fig)
