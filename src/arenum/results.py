"""Result records returned (or raised) by queries. Every bracket states its inequality: ``lo <= true <= hi``.

``exact`` says whether the point value is the true value; ``method`` names how it was obtained:
``"exact"`` (full index at the needed budget), ``"bracket"`` (a certified bracket, e.g. a resource
cap or ``branch_cap`` prevented exactness), ``"certified"`` (the finite-state DP's certified bracket
at any depth, :mod:`arenum.beyond.certified`) or an estimator's name (Monte Carlo, envelope), which
then carries standard errors and a confidence interval.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = [
    "CountBracket",
    "CountResult",
    "ThresholdResult",
    "Estimate",
    "DensityRankResult",
    "RankBracket",
    "SeekResult",
    "CountDPTopPResult",
    "MassBracket",
    "SequenceResult",
    "SequenceList",
]


@dataclass(frozen=True)
class MassBracket:
    """A bracket ``lo <= mass <= hi`` on a probability mass; unpacks as ``(lo, hi)`` (the seed system's
    ``(lower, upper)``; ``.lower``/``.upper`` are aliases).

    Certified (float rounding only) unless ``method`` names an estimator (``'envelope'``): then
    ``exact`` is False and the bracket is the estimator's own value to float rounding.
    """

    lo: float
    hi: float
    exact: bool = True
    method: str = "exact"

    def __iter__(self):
        return iter((self.lo, self.hi))

    @property
    def mid(self) -> float:
        return 0.5 * (self.lo + self.hi)

    @property
    def lower(self) -> float:
        """Alias of ``lo``."""
        return self.lo

    @property
    def upper(self) -> float:
        """Alias of ``hi``."""
        return self.hi


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

    @property
    def lower(self) -> int | float:
        """Alias of ``lo``."""
        return self.lo

    @property
    def upper(self) -> int | float:
        """Alias of ``hi``."""
        return self.hi


@dataclass(frozen=True)
class DensityRankResult:
    """Rank and cumulative mass of one sequence.

    rank: number of support sequences with a strictly higher score (0 for the most probable); the
        point value (exact when ``exact``; the estimate or the bracket's lower end otherwise).
    cumulative: ``P(p(Y) >= p(seq))``, the mass of every sequence at least as probable (itself
        included); a midpoint when it is a bracket.
    log_prob: the sequence's exact log-probability (nats).
    exact: the rank is exact and ``cumulative`` is exact to float rounding.
    method: ``"exact"``, ``"bracket"``, ``"certified"``, or the estimator's name.
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

    # the seed system's names
    @property
    def rank_lower(self) -> int | float:
        """Alias of ``rank_lo``."""
        return self.rank_lo

    @property
    def rank_upper(self) -> int | float:
        """Alias of ``rank_hi``."""
        return self.rank_hi

    @property
    def cumulative_lower(self) -> float:
        """Alias of ``cumulative_lo``."""
        return self.cumulative_lo

    @property
    def cumulative_upper(self) -> float:
        """Alias of ``cumulative_hi``."""
        return self.cumulative_hi

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class RankBracket(DensityRankResult):
    """A :class:`DensityRankResult` that also unpacks as the seed system's ``(lo, hi)`` rank bracket:
    ``lo, hi = index.rank_bracket(seq)`` gives ``(rank_lo, rank_hi)`` (also ``.lo``/``.hi``).

    >>> r = RankBracket(rank=3, cumulative=0.5, log_prob=-2.0, exact=False, method="envelope",
    ...                 rank_lo=3, rank_hi=4, cumulative_lo=0.5, cumulative_hi=0.5)
    >>> tuple(r), r.lo, r.hi, r.rank
    ((3, 4), 3, 4, 3)
    """

    def __iter__(self):
        return iter((self.rank_lo, self.rank_hi))

    @property
    def lo(self) -> int | float:
        """Alias of ``rank_lo``."""
        return self.rank_lo

    @property
    def hi(self) -> int | float:
        """Alias of ``rank_hi``."""
        return self.rank_hi


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

    # the seed system's names
    @property
    def size_lower(self) -> int:
        """Alias of ``size_lo``."""
        return self.size_lo

    @property
    def size_upper(self) -> int | None:
        """Alias of ``size_hi``."""
        return self.size_hi

    @property
    def mass_lower(self) -> float:
        """Alias of ``mass_lo``."""
        return self.mass_lo

    @property
    def mass_upper(self) -> float:
        """Alias of ``mass_hi``."""
        return self.mass_hi

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class _Annotated:
    """Shared behaviour of the annotated numbers :class:`CountResult` and :class:`ThresholdResult`.

    They ARE numbers (arithmetic, comparison, hashing and JSON treat them as the plain value) and also
    say how they were obtained. Fields: ``exact`` (the value is the true value), ``method``
    (``"exact"``, ``"bracket"`` or an estimator's name), ``estimate`` (the unrounded point value),
    ``stderr`` (standard error of an estimate, ``0.0`` otherwise), ``ci_lo``/``ci_hi``
    (``ci_lo <= true <= ci_hi``: certified for ``exact``/``bracket``, a confidence interval at
    ``confidence`` for an estimator), ``confidence`` (``None`` unless estimated), ``samples`` and
    ``forwards`` (Monte Carlo draws used, and model forwards their drawing cost), ``extra`` (details).
    """

    _FIELDS = ("exact", "method", "estimate", "stderr", "ci_lo", "ci_hi", "confidence", "samples",
               "forwards", "extra")

    def _init(self, value, exact, method, estimate, stderr, ci_lo, ci_hi, confidence, samples, forwards,
              extra) -> None:
        self.exact = bool(exact)
        self.method = method
        self.estimate = value if estimate is None else estimate
        self.stderr = float(stderr)
        self.ci_lo = value if ci_lo is None else ci_lo
        self.ci_hi = value if ci_hi is None else ci_hi
        self.confidence = confidence
        self.samples = int(samples)
        self.forwards = int(forwards)
        self.extra = dict(extra or {})

    def as_dict(self) -> dict[str, Any]:
        d = {"value": self._plain()}
        d.update({k: getattr(self, k) for k in self._FIELDS})
        return d

    def __repr__(self) -> str:
        if self.exact:
            return repr(self._plain())
        return (f"{type(self).__name__}({self._plain()!r}, method={self.method!r}, "
                f"ci=({self.ci_lo!r}, {self.ci_hi!r}), confidence={self.confidence!r})")

    def __reduce__(self):
        return (_rebuild, (type(self), self._plain(), {k: getattr(self, k) for k in self._FIELDS}))


def _rebuild(cls, value, fields):
    return cls(value, **fields)


class CountResult(_Annotated, int):
    """A number of sequences: an ``int`` that also says how it was obtained (see ``_Annotated``).

    Exact: ``CountResult(n)`` equals ``n`` and ``ci_lo == ci_hi == n``. An estimate rounds its point
    value to the nearest integer; ``estimate`` keeps the float, ``ci_lo <= true count <= ci_hi`` at
    ``confidence``.

    >>> c = CountResult(41.6, exact=False, method="monte_carlo", stderr=3.0, ci_lo=36.0, ci_hi=48.0,
    ...                 confidence=0.95, samples=1000)
    >>> c + 0, c.estimate, c.exact, (c.ci_lo, c.ci_hi)
    (42, 41.6, False, (36.0, 48.0))
    >>> CountResult(7) == 7, repr(CountResult(7)), CountResult(7).method
    (True, '7', 'exact')
    """

    def __new__(cls, value: int | float, *, exact: bool = True, method: str = "exact",
                estimate: float | None = None, stderr: float = 0.0, ci_lo: int | float | None = None,
                ci_hi: int | float | None = None, confidence: float | None = None, samples: int = 0,
                forwards: int = 0, extra: dict | None = None) -> "CountResult":
        if isinstance(value, float):
            est = value if estimate is None else estimate
            iv = int(round(value)) if value < 2.0**63 else int(value)
        else:
            est = estimate
            iv = int(value)
        obj = int.__new__(cls, iv)
        obj._init(iv, exact, method, est, stderr, ci_lo, ci_hi, confidence, samples, forwards, extra)
        return obj

    def _plain(self) -> int:
        return int(self)


class ThresholdResult(_Annotated, float):
    """A log-probability threshold: a ``float`` that also says how it was obtained (see ``_Annotated``).

    ``ci_lo <= true threshold <= ci_hi`` (log-probs, nats): certified when exact, a confidence
    interval at ``confidence`` for an estimate.

    >>> t = ThresholdResult(-3.5)
    >>> t == -3.5, t.exact, repr(t)
    (True, True, '-3.5')
    """

    def __new__(cls, value: float, *, exact: bool = True, method: str = "exact",
                estimate: float | None = None, stderr: float = 0.0, ci_lo: float | None = None,
                ci_hi: float | None = None, confidence: float | None = None, samples: int = 0,
                forwards: int = 0, extra: dict | None = None) -> "ThresholdResult":
        obj = float.__new__(cls, value)
        obj._init(float(value), exact, method, estimate, stderr, ci_lo, ci_hi, confidence, samples,
                  forwards, extra)
        return obj

    def _plain(self) -> float:
        return float(self)


@dataclass(frozen=True)
class Estimate:
    """A Monte Carlo estimate of a real quantity (e.g. a probability mass), with its interval.

    value: the point estimate. stderr: its standard error. lo, hi: ``lo <= true <= hi`` at
    ``confidence``. method: the estimator's name. samples: draws used. hits: draws that fell in the
    region counted. forwards: model forwards the draws cost. extra: details.
    """

    value: float
    stderr: float
    lo: float
    hi: float
    confidence: float
    method: str
    samples: int
    hits: int
    forwards: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    def __iter__(self):
        return iter((self.lo, self.hi))

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class SequenceResult(tuple):
    """``(sequence, log_prob)`` that also says how its position was obtained.

    ``exact=True`` (``method='exact'``): the position in the support's order is exact. Under
    ``branch_cap`` the position is exact in the capped sub-support only (``exact=False``,
    ``method='sub_support'``): sequences the cap skipped may come before it in the true order
    (``count_bracket`` bounds how many). The log-prob is exact either way.

    Fields by name, as the seed system's seek record names them: ``value`` (also ``sequence``) is
    the sequence, ``log_prob`` its exact log-probability, ``rank`` the 0-based position asked for
    (``None`` when the record was not made by a rank lookup).

    >>> r = SequenceResult((0, 1), -1.5, exact=False, method="sub_support", rank=3)
    >>> r == ((0, 1), -1.5), r.exact, r.method, r.value, r.rank, r.log_prob
    (True, False, 'sub_support', (0, 1), 3, -1.5)
    """

    exact: bool
    method: str
    rank: int | None

    def __new__(cls, sequence: tuple, log_prob: float, *, exact: bool = True, method: str = "exact",
                rank: int | None = None):
        self = super().__new__(cls, (sequence, log_prob))
        self.exact = bool(exact)
        self.method = method
        self.rank = rank
        return self

    @property
    def value(self) -> tuple:
        """The sequence (the seed system's name)."""
        return self[0]

    @property
    def sequence(self) -> tuple:
        """The sequence."""
        return self[0]

    @property
    def log_prob(self) -> float:
        """Its exact log-probability (nats)."""
        return self[1]

    def __reduce__(self):
        return (_rebuild_seq, (type(self), self[0], self[1], self.exact, self.method, self.rank))


class SequenceList(list):
    """A list of ``(sequence, log_prob)`` with ``exact`` and ``method`` as :class:`SequenceResult`."""

    def __init__(self, items=(), *, exact: bool = True, method: str = "exact") -> None:
        super().__init__(items)
        self.exact = bool(exact)
        self.method = method

    def __reduce__(self):
        return (_rebuild_list, (type(self), list(self), self.exact, self.method))


def _rebuild_seq(cls, seq, lp, exact, method, rank=None):
    return cls(seq, lp, exact=exact, method=method, rank=rank)


def _rebuild_list(cls, items, exact, method):
    return cls(items, exact=exact, method=method)
