"""Result records returned (or raised) by queries. Every bracket states its inequality: ``lo <= true <= hi``.

``exact`` says whether the point value is the true value; ``method`` names how it was obtained:
``"exact"`` (full index at the needed budget), ``"bracket"`` (a certified bracket, e.g. a resource
cap or ``branch_cap`` prevented exactness), ``"certified"`` (the finite-state DP's certified bracket
at any depth, :mod:`arenum.beyond.certified`), ``"logprob_error"`` (a bracket for the true model of
a declared per-step error) or an estimator's name (``"monte_carlo"``, ``"envelope"``), which then
carries standard errors and a confidence interval.

The point value of a non-exact answer (:func:`point_value`, the one rule every record applies):

1. with an estimate (Monte Carlo, envelope) strictly inside the bracket: the estimate
   (``point_method='estimate'``); an estimate on or outside an end contradicts the bracket and is
   not used (the middle below is taken);
2. otherwise the bracket's middle, in the scale of the quantity: for counts, ranks and sizes the
   geometric middle of ``lo + 1`` and ``hi + 1``, minus 1 (``'geometric_middle'``; the ``+ 1``
   makes a bracket starting at 0 work), for masses and cumulative masses the arithmetic middle
   (``'middle'``), for thresholds (log-probabilities) the middle of the log bracket (``'log_middle'``);
3. a bracket with one infinite end has no middle: its finite end (``'lower_end'``/``'upper_end'``),
   the only case where a point equals a bound of a bracket of width; a single-value bracket is its value.

A point is a float strictly inside a bracket of width (``[5, 6]`` gives ``5.477...``), never one of
its ends; ``point_method='exact'`` when the answer is exact. See ``docs/results.md``.
"""
from __future__ import annotations

import math
import threading
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

__all__ = [
    "point_value",
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


#: methods whose ends are certified bounds (their point is never an estimate of their own)
BOUND_METHODS = frozenset({"exact", "bracket", "certified", "logprob_error", "sub_support"})

_LAZY_MASS = ("cumulative", "cumulative_lo", "cumulative_hi", "cumulative_point_method")
_MIDDLE = {"count": "geometric_middle", "rank": "geometric_middle", "size": "geometric_middle",
           "mass": "middle", "log": "log_middle"}


def point_value(lo: Any, hi: Any, kind: str, estimate: float | None = None) -> tuple[Any, str]:
    """``(point, point_method)`` of a bracket ``lo <= true <= hi`` (the module docstring's rule).

    ``kind``: ``'count'``, ``'rank'``, ``'size'`` (geometric middle on ``x + 1``), ``'mass'``
    (arithmetic middle) or ``'log'`` (a log-probability: arithmetic middle of the log bracket).
    ``estimate``: an estimate of the same quantity, used when strictly inside.

    >>> point_value(0, 8, "rank")
    (2.0, 'geometric_middle')
    >>> point_value(0.2, 0.4, "mass", estimate=0.25)
    (0.25, 'estimate')
    >>> point_value(-3.0, -1.0, "log", estimate=-1.0)
    (-2.0, 'log_middle')
    """
    if kind not in _MIDDLE:
        raise ValueError(f"kind must be one of {sorted(_MIDDLE)}, got {kind!r}")
    if lo == hi:
        return lo, "single_value"
    if estimate is not None and not math.isnan(estimate) and lo < estimate < hi:
        return estimate, "estimate"
    inf_lo, inf_hi = math.isinf(lo), math.isinf(hi)
    if inf_lo or inf_hi:
        if inf_lo and inf_hi:
            return (0.0 if kind != "log" else -math.inf), "unbounded"
        return (hi, "upper_end") if inf_lo else (lo, "lower_end")
    if _MIDDLE[kind] == "geometric_middle":
        if isinstance(lo, int) and isinstance(hi, int) and hi > 2**52:
            p: Any = math.isqrt((lo + 1) * (hi + 1)) - 1  # exact integer arithmetic past float precision
            if not lo < p < hi:
                p = lo + (hi - lo) // 2
        else:
            p = math.sqrt((float(lo) + 1.0) * (float(hi) + 1.0)) - 1.0
    else:
        p = 0.5 * (float(lo) + float(hi))
    if not lo < p < hi:  # float rounding of a bracket a few ulps wide
        p = float(lo) + 0.5 * (float(hi) - float(lo))
    return p, _MIDDLE[kind]


def _point(exact: bool, method: str, lo: Any, hi: Any, kind: str, value: Any,
           point_method: str | None) -> tuple[Any, str]:
    """The point of a record built with ``value``: itself when exact, else :func:`point_value`, with
    ``value`` taken as an estimate when ``point_method`` says so or ``method`` names an estimator."""
    if exact:
        return value, "exact"
    if point_method not in (None, "estimate"):  # rebuilt from a record: its point is already the rule's
        return value, point_method
    is_est = point_method == "estimate" or method not in BOUND_METHODS
    try:
        return point_value(lo, hi, kind, value if is_est else None)
    except TypeError:  # an unknown upper end (None)
        return value, "lower_end"


@dataclass(frozen=True)
class MassBracket:
    """A bracket ``lo <= mass <= hi`` on a probability mass; unpacks as ``(lo, hi)`` (the seed system's
    ``(lower, upper)``; ``.lower``/``.upper`` are aliases).

    ``exact=True`` (``method='exact'``): the true mass lies in ``[lo, hi]``, a bracket of float
    rounding only. Otherwise ``method`` says what the bracket is: ``'bracket'`` (certified: a cap
    stopped the build, or ``branch_cap`` added what it skipped), ``'certified'`` (the finite-state
    DP's certified bracket), ``'logprob_error'`` (certified for the true model), or an estimator
    (``'envelope'``: its own value to a relative width). ``point`` is the point value (the module
    docstring's rule: the arithmetic middle, or the estimator's value) and ``point_method`` says which.
    """

    lo: float
    hi: float
    exact: bool = True
    method: str = "exact"
    point: float | None = None
    point_method: str | None = None

    def __post_init__(self) -> None:
        v = self.point if self.point is not None else 0.5 * (self.lo + self.hi)
        pt, pm = _point(self.exact, self.method, self.lo, self.hi, "mass", v,
                        self.point_method if self.point is not None else None)
        object.__setattr__(self, "point", pt)
        object.__setattr__(self, "point_method", pm)

    def __iter__(self):
        return iter((self.lo, self.hi))

    @property
    def mid(self) -> float:
        """The arithmetic middle of the bracket (``point`` is the documented point value)."""
        return 0.5 * (self.lo + self.hi)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

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

    lo: sequences counted exactly (the kept sub-support under ``branch_cap``), or the DP's lower count.
    hi: ``lo`` plus the certified bound on everything a cap excluded (``== lo`` when nothing was).
    exact: ``lo == hi``.
    method: the regime: ``'exact'``, ``'bracket'`` (a cap or ``branch_cap`` cut the build),
        ``'certified'`` (the finite-state DP, also when its ends meet) or ``'logprob_error'``; by
        default ``'exact'`` when ``lo == hi``, else ``'bracket'``. Not in the repr nor in equality.
    """

    lo: int | float
    hi: int | float
    method: str | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "method", self.method or ("exact" if self.lo == self.hi else "bracket"))

    @property
    def exact(self) -> bool:
        return self.lo == self.hi

    @property
    def point(self) -> int | float:
        """The point value: ``lo`` when exact, else the geometric middle of ``lo + 1``, ``hi + 1``, minus 1."""
        return point_value(self.lo, self.hi, "count")[0]

    @property
    def point_method(self) -> str:
        """``'exact'``, or how :attr:`point` was obtained (:func:`point_value`)."""
        return "exact" if self.exact else point_value(self.lo, self.hi, "count")[1]

    def __iter__(self):
        return iter((self.lo, self.hi))

    def __getitem__(self, i: int) -> int | float:
        return (self.lo, self.hi)[i]

    def __len__(self) -> int:
        return 2

    lower = property(lambda self: self.lo, doc="Alias of ``lo``.")
    upper = property(lambda self: self.hi, doc="Alias of ``hi``.")


@dataclass(frozen=True)
class DensityRankResult:
    """Rank and cumulative mass of one sequence.

    rank: number of support sequences with a strictly higher score (0 for the most probable); the
        point value: exact when ``exact``, else a float strictly inside ``[rank_lo, rank_hi]``
        (the module docstring's rule; ``point_method`` says which: ``'estimate'`` or
        ``'geometric_middle'``). The guess number is ``rank + 1``.
    cumulative: ``P(p(Y) >= p(seq))``, the mass of every sequence at least as probable (itself
        included); past the exact budget the estimate or the bracket's arithmetic middle
        (``cumulative_point_method``).
    log_prob: the sequence's exact log-probability (nats).
    exact: the rank is exact and ``cumulative`` is exact to float rounding.
    method: ``"exact"``, ``"bracket"``, ``"certified"``, or the estimator's name.
    rank_lo, rank_hi: ``rank_lo <= true rank <= rank_hi`` (certified unless ``method`` names an
        estimator, in which case they are the confidence interval at ``confidence``).
    cumulative_lo, cumulative_hi: the same for ``cumulative``.
    rank_stderr, cumulative_stderr: standard errors of an estimate (0.0 when exact or a bracket).
    confidence: confidence level of an estimator's interval (``None`` otherwise).
    truncated: the support was cut by a cap (depth cap or ``branch_cap``), see ``method``.
    point_method, cumulative_point_method: how ``rank`` and ``cumulative`` were obtained
        (``'exact'``, ``'estimate'``, ``'geometric_middle'``, ``'middle'``, ...; :func:`point_value`).
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
    point_method: str | None = None
    cumulative_point_method: str | None = field(default_factory=lambda: None)  # no class attribute (lazy)

    def __post_init__(self) -> None:
        given = self.cumulative_point_method if self.cumulative_point_method is not None else self.point_method
        r, pm = _point(self.exact, self.method, self.rank_lo, self.rank_hi, "rank", self.rank, self.point_method)
        object.__setattr__(self, "rank", r)
        object.__setattr__(self, "point_method", pm)
        self._set_cumulative(self.cumulative, self.cumulative_lo, self.cumulative_hi, given)

    def _set_cumulative(self, value: float, lo: float, hi: float, given: str | None) -> None:
        c, cpm = _point(self.exact, self.method, lo, hi, "mass", value, given)
        for k, v in (("cumulative", c), ("cumulative_lo", lo), ("cumulative_hi", hi), ("cumulative_point_method", cpm)):
            object.__setattr__(self, k, v)

    @classmethod
    def lazy_cumulative(cls, mass: Callable[[], tuple[float, float]], **fields: Any) -> "DensityRankResult":
        """A record (not ``exact``) whose cumulative bracket is ``mass() -> (lo, hi)``, computed the first
        time a ``cumulative*`` field is read (or the record is compared, printed, pickled or turned
        into a dict), then kept: a rank that only reads its rank costs no mass computation."""
        if fields.get("exact"):
            raise ValueError("lazy_cumulative: an exact record carries its cumulative mass")
        given = fields.pop("cumulative_point_method", None) or fields.get("point_method")
        r = cls(cumulative=0.5, cumulative_lo=0.0, cumulative_hi=1.0, **fields)
        for k in _LAZY_MASS:
            object.__delattr__(r, k)
        object.__setattr__(r, "_mass", (mass, given, threading.Lock()))
        return r

    def __getattr__(self, name: str) -> Any:  # reached only for a missing attribute: a lazy field
        d = self.__dict__
        if name in _LAZY_MASS:
            if (pending := d.get("_mass")) is not None:  # one read: another thread may resolve it
                fn, given, lock = pending
                with lock:
                    if "_mass" in d:  # not resolved by another thread meanwhile
                        lo, hi = fn()
                        self._set_cumulative(0.5 * (lo + hi), lo, hi, given)
                        object.__delattr__(self, "_mass")
            if name in d:
                return d[name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __getstate__(self) -> dict[str, Any]:
        _ = self.cumulative  # resolved before pickling: the thunk stays in this process
        return dict(self.__dict__)

    @property
    def cumulative_pending(self) -> bool:
        """Whether the cumulative mass is still to be computed (:meth:`lazy_cumulative`)."""
        return "_mass" in self.__dict__

    @property
    def guess_number(self) -> int | float:
        """``rank + 1`` (the number of guesses a guesser trying sequences in order needs)."""
        return self.rank + 1

    # the seed system's names
    rank_lower = property(lambda self: self.rank_lo, doc="Alias of ``rank_lo``.")
    rank_upper = property(lambda self: self.rank_hi, doc="Alias of ``rank_hi``.")
    cumulative_lower = property(lambda self: self.cumulative_lo, doc="Alias of ``cumulative_lo``.")
    cumulative_upper = property(lambda self: self.cumulative_hi, doc="Alias of ``cumulative_hi``.")

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class RankBracket(DensityRankResult):
    """A :class:`DensityRankResult` that also unpacks as the seed system's ``(lo, hi)`` rank bracket:
    ``lo, hi = index.rank_bracket(seq)`` gives ``(rank_lo, rank_hi)`` (also ``.lo``/``.hi``).

    >>> r = RankBracket(rank=3.5, cumulative=0.5, log_prob=-2.0, exact=False, method="envelope",
    ...                 rank_lo=3, rank_hi=4, cumulative_lo=0.5, cumulative_hi=0.5)
    >>> tuple(r), r.lo, r.hi, r.rank, r.point_method
    ((3, 4), 3, 4, 3.5, 'estimate')
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
    exact: the rank and the sequence are certainly right (float rounding cannot move the rank; under
        ``branch_cap`` or ``logprob_error`` the sequence at a rank is the sub-support's, so never).
    truncated: the mass within the built budget never reached ``target`` (then ``sequence`` and
        ``log_prob`` are None and ``rank`` is a lower bound).
    """

    rank: int
    sequence: tuple | None
    log_prob: float | None
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

    size: the point value: exact when ``exact``; strictly inside ``[size_lo, size_hi]`` otherwise
        (their geometric middle, a float); ``size_lo`` when ``size_hi`` is unknown (``point_method``
        ``'lower_end'``).
    size_lo, size_hi: ``size_lo <= minimal size <= size_hi`` (they differ only when float rounding
        of the masses, or truncation, leaves the boundary ambiguous).
    mass_lo, mass_hi: bracket on the mass covered by the top ``size`` sequences.
    threshold: log-prob of the last sequence in the set (the nucleus boundary).
    p: the mass asked for.
    truncated: the budget cap was reached before the mass reached ``p``; ``size_lo`` is then a
        lower bound, and ``size_hi`` is ``None`` (unknown) unless the sequences counted, not
        ordered (past ``max_sequences``), are known to hold ``p``: then their number.
    exact: ``size_lo == size_hi`` and not truncated.
    reachable: ``False`` when the whole support holds less mass than ``p`` (``mass_hi < p`` with
        nothing left out): no set of sequences holds ``p``; ``size`` is then the whole support's
        size and the repr says so. ``None`` when a cap stopped the build before it could tell.
    point_method: how ``size`` was obtained (``'exact'``, ``'geometric_middle'``, ``'lower_end'``).
    method: the regime: ``'exact'``, ``'bracket'`` (float rounding, a cap or ``branch_cap``) or
        ``'logprob_error'`` (:mod:`arenum.bounded`); not in the repr nor in equality.
    """

    size: int | float
    size_lo: int
    size_hi: int | None
    mass_lo: float
    mass_hi: float
    threshold: float
    p: float
    truncated: bool
    exact: bool
    reachable: bool | None = True
    point_method: str | None = None
    method: str | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "method", self.method or ("exact" if self.exact else "bracket"))
        hi = self.size_hi if self.size_hi is not None else math.inf
        sz, pm = _point(self.exact, "bracket", self.size_lo, hi, "size", self.size, self.point_method)
        object.__setattr__(self, "size", sz)
        object.__setattr__(self, "point_method", pm)

    def __repr__(self) -> str:
        body = ", ".join(f"{k}={getattr(self, k)!r}" for k, f in self.__dataclass_fields__.items() if f.repr)
        if self.reachable is False:
            body = (f"UNREACHABLE: the support holds at most {self.mass_hi:.6g} < p={self.p!r}; " + body)
        return f"{type(self).__name__}({body})"

    # the seed system's names
    size_lower = property(lambda self: self.size_lo, doc="Alias of ``size_lo``.")
    size_upper = property(lambda self: self.size_hi, doc="Alias of ``size_hi``.")
    mass_lower = property(lambda self: self.mass_lo, doc="Alias of ``mass_lo``.")
    mass_upper = property(lambda self: self.mass_hi, doc="Alias of ``mass_hi``.")

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class _Annotated:
    """Shared behaviour of the annotated numbers :class:`CountResult` and :class:`ThresholdResult`.

    They ARE numbers (arithmetic, comparison, hashing and JSON treat them as the plain value) and also
    say how they were obtained. Fields: ``exact`` (the value is the true value), ``method``
    (``"exact"``, ``"bracket"``, ``"certified"``, ``"logprob_error"`` or an estimator's name),
    ``estimate`` (also ``point``: the unrounded point value, strictly inside ``[ci_lo, ci_hi]`` when
    not exact, by the module docstring's rule), ``point_method`` (how it was obtained),
    ``stderr`` (standard error of an estimate, ``0.0`` otherwise), ``ci_lo``/``ci_hi``
    (``ci_lo <= true <= ci_hi``: certified for ``exact``/``bracket``, a confidence interval at
    ``confidence`` for an estimator), ``confidence`` (``None`` unless estimated), ``samples`` and
    ``forwards`` (Monte Carlo draws used, and model forwards their drawing cost), ``extra`` (details).
    """

    _FIELDS = ("exact", "method", "estimate", "stderr", "ci_lo", "ci_hi", "confidence", "samples",
               "forwards", "extra", "point_method")

    @staticmethod
    def _resolve(kind, value, exact, method, estimate, ci_lo, ci_hi, point_method):
        """``(point, point_method, ci_lo, ci_hi)`` of a record built from ``value`` (and ``estimate``)."""
        lo = value if ci_lo is None else ci_lo
        hi = value if ci_hi is None else ci_hi
        cand = value if estimate is None else estimate
        pt, pm = _point(bool(exact), method, lo, hi, kind, cand, point_method)
        return pt, pm, lo, hi

    def _init(self, value, exact, method, estimate, stderr, ci_lo, ci_hi, confidence, samples, forwards,
              extra, point_method="exact") -> None:
        self.exact = bool(exact)
        self.method = method
        self.estimate = value if estimate is None else estimate
        self.point_method = point_method
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

    @property
    def point(self) -> int | float:
        """The point value, unrounded (same as ``estimate``)."""
        return self.estimate

    def __repr__(self) -> str:
        if self.exact:
            return repr(self._plain())
        return (f"{type(self).__name__}({self.estimate!r}, method={self.method!r}, "
                f"point_method={self.point_method!r}, ci=({self.ci_lo!r}, {self.ci_hi!r}), "
                f"confidence={self.confidence!r})")

    def __reduce__(self):
        return (_rebuild, (type(self), self._plain(), {k: getattr(self, k) for k in self._FIELDS}))


def _rebuild(cls, value, fields):
    return cls(value, **fields)


class CountResult(_Annotated, int):
    """A number of sequences: an ``int`` that also says how it was obtained (see ``_Annotated``).

    Exact: ``CountResult(n)`` equals ``n`` and ``ci_lo == ci_hi == n``. Otherwise the integer is the
    point value (the module docstring's rule) rounded to the nearest integer; ``estimate`` (``point``)
    keeps the float, which is strictly inside ``[ci_lo, ci_hi]`` (the rounded integer of a bracket one
    wide, e.g. ``[5, 6]``, can only be one of its ends: read ``point``). ``ci_lo <= true count <= ci_hi``
    (certified for ``bracket``/``certified``, at ``confidence`` for an estimator).

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
                forwards: int = 0, extra: dict | None = None, point_method: str | None = None) -> "CountResult":
        pt, pm, lo, hi = cls._resolve("count", value, exact, method, estimate, ci_lo, ci_hi, point_method)
        if isinstance(pt, float):
            iv = int(round(pt)) if abs(pt) < 2.0**63 else (int(pt) if math.isfinite(pt) else 0)
            est = pt
        else:
            iv = int(pt)
            est = estimate if pm == "exact" else pt
        obj = int.__new__(cls, iv)
        obj._init(iv, exact, method, est, stderr, lo, hi, confidence, samples, forwards, extra, pm)
        return obj

    def _plain(self) -> int:
        return int(self)


class ThresholdResult(_Annotated, float):
    """A log-probability threshold: a ``float`` that also says how it was obtained (see ``_Annotated``).

    ``ci_lo <= true threshold <= ci_hi`` (log-probs, nats): certified when exact or a bracket, a
    confidence interval at ``confidence`` for an estimate. Not exact: the value is the point (the
    estimate strictly inside, else the middle of the log bracket; ``point_method``).

    >>> t = ThresholdResult(-3.5)
    >>> t == -3.5, t.exact, repr(t)
    (True, True, '-3.5')
    """

    def __new__(cls, value: float, *, exact: bool = True, method: str = "exact",
                estimate: float | None = None, stderr: float = 0.0, ci_lo: float | None = None,
                ci_hi: float | None = None, confidence: float | None = None, samples: int = 0,
                forwards: int = 0, extra: dict | None = None, point_method: str | None = None) -> "ThresholdResult":
        pt, pm, lo, hi = cls._resolve("log", float(value), exact, method, estimate, ci_lo, ci_hi, point_method)
        obj = float.__new__(cls, pt)
        obj._init(float(pt), exact, method, None if pm != "exact" else estimate, stderr, lo, hi, confidence,
                  samples, forwards, extra, pm)
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
