"""Result records returned by queries. Every bracket states its inequality: ``lo <= true <= hi``.

``exact`` says whether the point value is the true value; ``method`` names how it was obtained:
``"exact"`` (full index at the needed budget), ``"bracket"`` (a certified bracket, e.g. a resource
cap or ``branch_cap`` prevented exactness) or an estimator's name (Monte Carlo, envelope), which
then carries standard errors and a confidence interval.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = [
    "CountBracket",
    "DensityRankResult",
    "SeekResult",
    "CountDPTopPResult",
]


@dataclass(frozen=True)
class CountBracket:
    """``lo <= count <= hi``: a certified bracket on a number of sequences.

    lo: sequences counted exactly (the kept sub-support under ``branch_cap``).
    hi: ``lo`` plus the certified bound on everything a cap excluded (``== lo`` when nothing was).
    exact: ``lo == hi``.
    """

    lo: int | float
    hi: int | float

    @property
    def exact(self) -> bool:
        return self.lo == self.hi

    def __iter__(self):
        return iter((self.lo, self.hi))

    def __getitem__(self, i: int) -> int | float:
        return (self.lo, self.hi)[i]

    def __len__(self) -> int:
        return 2


@dataclass(frozen=True)
class DensityRankResult:
    """Rank and cumulative mass of one sequence.

    rank: number of support sequences with a strictly higher score (0 for the most probable); the
        point value (exact when ``exact``; the estimate or the bracket's lower end otherwise).
    cumulative: ``P(p(Y) >= p(seq))``, the mass of every sequence at least as probable (itself
        included); a midpoint when it is a bracket.
    log_prob: the sequence's exact log-probability (nats).
    exact: the rank is exact and ``cumulative`` is exact to float rounding.
    method: ``"exact"``, ``"bracket"``, or the estimator's name.
    rank_lo, rank_hi: ``rank_lo <= true rank <= rank_hi`` (certified unless ``method`` names an
        estimator, in which case they are the confidence interval at ``confidence``).
    cumulative_lo, cumulative_hi: the same for ``cumulative``.
    rank_stderr, cumulative_stderr: standard errors of an estimate (0.0 when exact or a bracket).
    confidence: confidence level of an estimator's interval (``None`` otherwise).
    truncated: the support was cut by a cap (depth cap or ``branch_cap``), see ``method``.
    """

    rank: int | float
    cumulative: float
    log_prob: float
    exact: bool
    method: str
    rank_lo: int | float
    rank_hi: int | float
    cumulative_lo: float
    cumulative_hi: float
    rank_stderr: float = 0.0
    cumulative_stderr: float = 0.0
    confidence: float | None = None
    truncated: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class SeekResult:
    """The sequence at which the cumulative mass (descending order) first reaches ``target``.

    rank: its 0-based rank (``rank + 1`` sequences cover the target), exact when ``exact``.
    sequence, log_prob: the sequence and its exact log-probability.
    target: the mass asked for.
    mass_lo, mass_hi: ``mass_lo <= mass of ranks 0..rank <= mass_hi``.
    exact: the rank is certainly right (float rounding cannot move it).
    truncated: the mass within the built budget never reached ``target`` (then ``sequence`` is None
        and ``rank`` is a lower bound).
    """

    rank: int
    sequence: tuple | None
    log_prob: float
    target: float
    mass_lo: float
    mass_hi: float
    exact: bool
    truncated: bool = False

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class CountDPTopPResult:
    """Size of the minimal set of most probable sequences holding mass ``>= p``.

    size: the point value (``size_lo`` when the bracket is not a single value).
    size_lo, size_hi: ``size_lo <= minimal size <= size_hi`` (they differ only when float rounding
        of the masses, or truncation, leaves the boundary ambiguous).
    mass_lo, mass_hi: bracket on the mass covered by the top ``size`` sequences.
    threshold: log-prob of the last sequence in the set (the nucleus boundary).
    p: the mass asked for.
    truncated: the budget cap was reached before the mass reached ``p``; ``size_lo`` is then the
        number of sequences built, a lower bound, and ``size_hi`` is ``None`` (unknown).
    exact: ``size_lo == size_hi`` and not truncated.
    """

    size: int
    size_lo: int
    size_hi: int | None
    mass_lo: float
    mass_hi: float
    threshold: float
    p: float
    truncated: bool
    exact: bool

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)
