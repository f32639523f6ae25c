"""JSON of the result records: ONE function per record type, shared by every command line
subcommand (and any other front end, e.g. an HTTP server) so that a record always reads the same.

:func:`result_json` dispatches on the record's type. Every dict carries ``exact``, ``method`` (also
``guarantee``, the older name), the point value under the record's own name (``count``,
``log_prob``, ``rank``, ``mass``, ``size``), its bracket (``*_lo``/``*_hi``), ``point_method`` (how
the point was obtained, :func:`arenum.results.point_value`) and, for an estimate, ``confidence``
and ``stderr``. Field meanings per regime: ``docs/results.md``.
"""
from __future__ import annotations

import math
from typing import Any

from .._validate import LN2
from ..results import (
    CountBracket, CountDPTopPResult, CountResult, DensityRankResult, Estimate, MassBracket, ThresholdResult,
)

__all__ = ["result_json", "count_json", "threshold_json", "rank_json", "mass_json", "nucleus_json"]

def _guarantee(exact: bool, method: str, point_method: str, confidence: float | None = None,
               stderr: float | None = None) -> dict:
    d: dict[str, Any] = {"exact": bool(exact), "method": method, "guarantee": method, "point_method": point_method}
    if confidence is not None:
        d["confidence"] = confidence
        d["stderr"] = stderr
    return d


def count_json(r: CountResult | CountBracket) -> dict:
    """``count`` (point), ``count_lo``/``count_hi`` and the guarantee fields."""
    if isinstance(r, CountBracket):
        return {"count": r.point, "count_lo": r.lo, "count_hi": r.hi, **_guarantee(r.exact, r.method, r.point_method)}
    pt = int(r) if r.exact else r.point
    return {"count": pt, "count_lo": r.ci_lo, "count_hi": r.ci_hi,
            **_guarantee(r.exact, r.method, r.point_method, r.confidence, r.stderr)}


def threshold_json(r: ThresholdResult | float) -> dict:
    """``log_prob`` (point), ``bits``, ``probability``, ``log_prob_lo``/``log_prob_hi`` and the guarantee."""
    lp = float(r)
    if not isinstance(r, ThresholdResult):
        r = ThresholdResult(lp)
    return {"log_prob": lp, "bits": -lp / LN2, "probability": math.exp(lp), "log_prob_lo": float(r.ci_lo),
            "log_prob_hi": float(r.ci_hi), **_guarantee(r.exact, r.method, r.point_method, r.confidence, r.stderr)}


def rank_json(r: DensityRankResult) -> dict:
    """``rank`` (point), ``guess_number`` (``rank + 1``), their bracket, ``cumulative`` with its
    bracket, the sequence's ``log_prob``/``bits``/``probability``, ``truncated`` and the guarantee."""
    d = {"rank": r.rank, "guess_number": r.rank + 1, "rank_lo": r.rank_lo, "rank_hi": r.rank_hi,
         "log_prob": r.log_prob, "bits": -r.log_prob / LN2, "probability": math.exp(r.log_prob),
         "cumulative": r.cumulative, "cumulative_lo": r.cumulative_lo, "cumulative_hi": r.cumulative_hi,
         **_guarantee(r.exact, r.method, r.point_method), "cumulative_point_method": r.cumulative_point_method,
         "truncated": bool(r.truncated)}
    if r.confidence is not None:
        d.update(confidence=r.confidence, rank_stderr=r.rank_stderr, cumulative_stderr=r.cumulative_stderr)
    return d


def mass_json(r: MassBracket | Estimate) -> dict:
    """``mass`` (point), ``mass_lo``/``mass_hi`` and the guarantee."""
    if isinstance(r, Estimate):
        return {"mass": r.value, "mass_lo": r.lo, "mass_hi": r.hi,
                **_guarantee(r.method == "exact", r.method, "estimate" if r.method != "exact" else "exact",
                             None if r.method == "exact" else r.confidence, r.stderr)}
    return {"mass": r.point, "mass_lo": r.lo, "mass_hi": r.hi, **_guarantee(r.exact, r.method, r.point_method)}


def nucleus_json(r: CountDPTopPResult) -> dict:
    """Every field of the record, ``bits`` of its boundary, ``reachable`` and the guarantee."""
    d = r.as_dict()
    d.update(bits=-r.threshold / LN2, **_guarantee(r.exact, r.method, r.point_method))
    return d


def result_json(r: Any) -> dict:
    """The JSON-ready dict of any result record (see the module docstring)."""
    for cls, fn in ((DensityRankResult, rank_json), (CountResult, count_json), (CountBracket, count_json),
                    (ThresholdResult, threshold_json), (MassBracket, mass_json), (Estimate, mass_json),
                    (CountDPTopPResult, nucleus_json)):
        if isinstance(r, cls):
            return fn(r)
    raise TypeError(f"result_json: not a result record: {type(r).__name__}")
