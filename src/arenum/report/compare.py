"""Comparisons of guessers on one test set: the min-auto curve and reference curves from CSV.

:func:`min_auto` combines the :class:`~arenum.report.curves.GuessCurve` of several guessers over the
SAME test lines into the curve of the guesser that, for each line, uses the best of them (the
standard way a password paper combines guessers): each line's guess number is the smallest over
the curves. Brackets combine by the same minimum, end by end: ``min(lo_m) <= min(true_m) <=
min(hi_m)``, for the certified brackets and the drawn bands alike, so the combined bracket holds
the true minimum whenever each bracket holds its own line's truth. A line is exact exactly when its
certified bracket is a single value (one curve's exact rank below every other curve's certified
lower end makes it so); its point value is :func:`arenum.results.point_value` of the combined band,
with the smallest of the curves' point values taken as the estimate when strictly inside. The
band's kind is the kinds of the curves whose bands reach the minimum, joined by ``+``.
A line no curve can guess stays unrankable (never guessed).

:func:`read_reference_csv` and :func:`reference_curve` bring in another tool's guess numbers (a PCFG
or a rule-based cracker's) as a curve of their own: a CSV with a password column and a guess-number
column (module-level :data:`PASSWORD_COLUMNS`, :data:`GUESS_COLUMNS`; no header: the first two
columns). Guess numbers are taken as the file states them (``exact``: the tool's own count, drawn
solid, ``method='reference'``); an empty cell, ``inf`` or ``-`` means never guessed. Rows whose
password is not a test line are ignored and counted (``ignored``); test lines the file does not
list are never guessed. A file that cannot be read as such a CSV is refused with one
:class:`ValueError` line naming the file and the row.
"""
from __future__ import annotations

import csv
import math
import os
from typing import Sequence

from ..results import point_value
from .curves import GuessCurve, RankedItem

__all__ = ["GUESS_COLUMNS", "PASSWORD_COLUMNS", "min_auto", "read_reference_csv", "reference_curve"]

PASSWORD_COLUMNS = ("password", "string", "sequence", "candidate")
"""Header names accepted for the password column (case-insensitive)."""
GUESS_COLUMNS = ("guess_number", "guess_num", "guesses", "guess_no", "number", "rank+1")
"""Header names accepted for the guess-number column (1-based: the first guess is 1)."""
_NEVER = ("", "-", "inf", "+inf", "infinity", "nan", "none", "never")


def min_auto(curves: Sequence[GuessCurve], name: str = "min-auto") -> GuessCurve:
    """The min-auto :class:`GuessCurve` of ``curves`` (module docstring): per test line, the smallest
    guess number over the curves, brackets combined end by end. Every curve must come from the same
    test lines in the same order (:func:`~arenum.report.curves.guessing_curve` or
    :func:`reference_curve` over one list). Costs no forward."""
    curves = list(curves)
    if not curves:
        raise ValueError("min_auto needs at least one curve")
    per = [c.line_items() for c in curves]
    n = len(per[0])
    for c, p in zip(curves, per):
        if len(p) != n:
            raise ValueError(f"curve {c.name!r} covers {len(p)} test lines, {curves[0].name!r} {n}: "
                             "min_auto needs curves of the same test lines")
    labels = curves[0].labels()
    for c in curves[1:]:
        if c.labels() != labels:
            raise ValueError(f"curve {c.name!r} is of other test lines than {curves[0].name!r}")
    seen: dict[str, int] = {}
    items: list[RankedItem] = []
    index: list[int] = []
    for j in range(n):
        if labels[j] in seen:  # a repeated line: counted once more
            k = seen[labels[j]]
            items[k] = RankedItem(**{**items[k].__dict__, "count": items[k].count + 1})
        else:
            k = seen[labels[j]] = len(items)
            items.append(_min_item(labels[j], [p[j] for p in per]))
        index.append(k)
    return GuessCurve(name, items, sum(c.forwards for c in curves), sum(c.seconds for c in curves),
                      kind="min_auto", line_index=index, line_labels=labels)


def _min_item(label: str, its: Sequence[RankedItem]) -> RankedItem:
    """One line's combined item (module docstring)."""
    live = [it for it in its if it.method != "unrankable"]
    if not live:
        why = "; ".join(dict.fromkeys(it.error or "probability 0" for it in its))
        return RankedItem(label, 1, -math.inf, math.inf, math.inf, math.inf, math.inf, math.inf, "unrankable",
                          True, why)
    lo, hi = min(it.rank_lo for it in live), min(it.rank_hi for it in live)
    c_lo, c_hi = min(it.cert_lo for it in live), min(it.cert_hi for it in live)
    best = min(live, key=lambda it: (it.cert_hi, it.rank))
    if c_lo == c_hi:  # certain: one curve's rank is below every other's certified lower end
        return RankedItem(label, 1, best.log_prob, c_lo, c_lo, c_lo, c_lo, c_lo, "exact" if best.exact else
                          best.method, True)
    pt, _ = point_value(lo, hi, "rank", min(it.rank for it in live)) if lo < hi else (lo, "single_value")
    reach = [it for it in live if it.cert_lo < c_hi]  # the curves that may hold the minimum
    kinds = sorted({k for it in reach if not it.exact for k in it.band.split(" + ")})
    return RankedItem(label, 1, best.log_prob, float(pt), lo, hi, c_lo, c_hi, "min_auto", False,
                      band=" + ".join(kinds) or "certified")


def read_reference_csv(path: str | os.PathLike) -> dict[str, float]:
    """``{password: guess number}`` of a reference CSV (module docstring; ``inf``: never guessed).
    Raises ``ValueError`` in one line naming the file and the row for a file that is not such a CSV,
    a guess number that is not a number >= 1, or a password listed twice with different numbers."""
    p = os.fspath(path)
    try:
        with open(p, encoding="utf-8", newline="") as f:
            rows = list(csv.reader(f))
    except UnicodeDecodeError as e:
        raise ValueError(f"reference {p}: not UTF-8 text (byte {e.start})") from None
    except csv.Error as e:
        raise ValueError(f"reference {p}: not a CSV file ({e})") from None
    rows = [r for r in rows if any(x.strip() for x in r)]
    if not rows:
        raise ValueError(f"reference {p}: no rows (expected a CSV of password,guess_number)")
    head = [x.strip().lower() for x in rows[0]]
    pw_col = next((head.index(c) for c in PASSWORD_COLUMNS if c in head), None)
    g_col = next((head.index(c) for c in GUESS_COLUMNS if c in head), None)
    if pw_col is not None and g_col is not None:
        body, first = rows[1:], 2
    elif pw_col is not None or g_col is not None or not _number(rows[0][1:2]):
        raise ValueError(f"reference {p}: row 1 {rows[0][:4]!r} names no password column "
                         f"({'/'.join(PASSWORD_COLUMNS)}) and guess-number column ({'/'.join(GUESS_COLUMNS)})")
    else:
        body, first, pw_col, g_col = rows, 1, 0, 1
    out: dict[str, float] = {}
    for i, r in enumerate(body, first):
        if len(r) <= max(pw_col, g_col):
            raise ValueError(f"reference {p}: row {i} has {len(r)} column(s), expected at least {max(pw_col, g_col) + 1}")
        pw, cell = r[pw_col], r[g_col].strip()
        if cell.lower() in _NEVER:
            g = math.inf
        else:
            try:
                g = float(cell.replace(",", "").replace("_", ""))
            except ValueError:
                raise ValueError(f"reference {p}: row {i}: guess number {cell!r} is not a number") from None
            if not g >= 1:
                raise ValueError(f"reference {p}: row {i}: guess number {cell!r} is below 1 (the first guess is 1)")
        if pw in out and out[pw] != g:
            raise ValueError(f"reference {p}: row {i}: {pw!r} is listed twice, with guess numbers "
                             f"{out[pw]:g} and {g:g}")
        out[pw] = g
    return out


def _number(cells: Sequence[str]) -> bool:
    if not cells:
        return False
    x = cells[0].strip().lower()
    if x in _NEVER:
        return True
    try:
        float(x.replace(",", "").replace("_", ""))
        return True
    except ValueError:
        return False


def reference_curve(guesses: dict[str, float], lines: Sequence[str], name: str) -> tuple[GuessCurve, int]:
    """``(curve, ignored)``: the :class:`GuessCurve` of ``lines`` under another tool's ``guesses``
    (``{password: guess number}``, :func:`read_reference_csv`), and how many of its passwords are not
    among ``lines`` (ignored). A line it does not list is never guessed (unrankable)."""
    wanted = set(lines)
    ignored = sum(1 for pw in guesses if pw not in wanted)
    items: list[RankedItem] = []
    where: dict[str, int] = {}
    index: list[int] = []
    for s in lines:
        if s in where:
            k = where[s]
            items[k] = RankedItem(**{**items[k].__dict__, "count": items[k].count + 1})
            index.append(k)
            continue
        where[s] = len(items)
        index.append(len(items))
        g = guesses.get(s)
        if g is None or math.isinf(g):
            why = "not in the reference file" if g is None else "never guessed by the reference"
            items.append(RankedItem(s, 1, -math.inf, math.inf, math.inf, math.inf, math.inf, math.inf,
                                    "unrankable", True, why))
        else:
            r = g - 1.0
            items.append(RankedItem(s, 1, math.nan, r, r, r, r, r, "reference", True, band="exact"))
    return GuessCurve(name, items, kind="reference", line_index=index, line_labels=list(lines)), ignored
