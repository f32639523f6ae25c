"""Monte Carlo estimates of counts, ranks, masses and thresholds, with confidence intervals.

Exact answers cost one forward per live prefix; beyond an affordable budget this module answers
from ancestral samples instead, always as an ESTIMATE with a standard error, an interval at a stated
confidence, and the method named.

Estimators (``n`` draws ``x_i ~ q``, ``q = p`` without a head, up to the exact quantization of each step):

- ``count(t) = #{x : s(x) >= t}``: importance sampling, ``(1/n) sum_i 1{s(x_i) >= t} / q(x_i)``;
- ``rank(s0) = #{x : s(x) > s0}``: the same with a strict inequality;
- ``mass_above(t)`` and ``cumulative(s0) = P(s >= s0)``: ``(1/n) sum_i 1{...} p(x_i) / q(x_i)``;
- ``threshold(k)``: the largest sampled score whose count estimate reaches ``k`` (inverting the
  count estimate), with the interval obtained by inverting the count's interval band.

All are unbiased for ``n`` fixed (``threshold`` only consistent; a count's point value is held up to
the distinct sampled sequences of its region, its unbiased mean is ``extra["unbiased"]``). Every
query's region is a run of the draws sorted by score, so each costs ``O(log n)`` from prefix sums
built once. A draw of a terminating model that
reaches the depth cap without ``eos`` is outside the declared support: it contributes 0 but stays in
``n`` (dropping it would bias every estimate upward).

Combining with an exact head. When the exact index is built down to ``T`` (every sequence with
``s >= T`` counted exactly, ``N_T`` of them holding mass ``P_T``), the draws are taken from the TAIL
distribution ``q(x) = p(x) 1{s(x) < T} / (1 - P_T)`` instead of ``p``: walking down the tree, the
head mass below every live prefix is known exactly, so each step samples its children in proportion
to ``p(child) - head mass below it`` (no forward is spent for this). Then
``count(t) = N_T + (1/n) sum_i 1{t <= s(x_i) < T} / q(x_i)``. Its variance is
``(1/n) [(1 - P_T) sum_{t <= s < T} 1/p(x) - N_tail^2]`` against ``(1/n) [sum_{s >= t} 1/p(x) - N^2]``
for plain sampling: about a factor ``1 - P_T`` for counts, and ``(1 - P_T)^2`` or better for masses.
(Simply adding ``N_T`` to a plain estimate restricted to ``s < T`` can INCREASE the variance: the head
and tail parts of a plain weight are negatively correlated. That is why the head changes the draws.)

Intervals. Importance weights are heavy-tailed, so a normal interval ``m +- z se`` under-covers when
few draws land near ``t``. Counts use a log-normal interval ``[m / f, m f]``, ``f = exp(z se / m)``
(the delta method on ``log m``), which is asymmetric the way the error is; masses use Wilson's score
interval on the hit proportion. Both are then intersected with certified bounds: a count is at least
the head count plus the distinct sampled sequences in the region, and at most what the mass allows
(each counted sequence has probability ``>= e^t``). ``docs/estimates.md`` gives measured coverage.

Cost: drawing ``n`` samples of length ``L`` costs at most ``n L`` forwards, fewer because draws
sharing a prefix share its forward; all draws advance one level per batched model call
(``batch_next_logprobs``), so a transformer adapter reuses its KV cache level to level.

This module does not decide when to estimate: :class:`arenum.AutoregressiveEnumerable` does (its
``exact_limit``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist
from typing import TYPE_CHECKING, Any, Literal, get_args

import numpy as np

from .._validate import exact_int, finite_float
from ..results import CountResult, DensityRankResult, Estimate, ThresholdResult

if TYPE_CHECKING:
    from ..exact import ExactIndex
    from .sampling import SampleSet

__all__ = ["MonteCarloEstimator", "ExactHead", "Interval", "INTERVALS", "mass_count_bound"]

Interval = Literal["bernstein", "log", "normal"]
"""Interval shapes for counts: ``"bernstein"`` (the default: log-normal lower end, empirical-Bernstein
upper end), ``"log"`` (log-normal both ends) or ``"normal"``. Masses always use Wilson's interval."""
INTERVALS: tuple[str, ...] = get_args(Interval)

# --------------------------------------------------------------------------------------- intervals
def _z(confidence: float) -> float:
    return NormalDist().inv_cdf(0.5 + confidence / 2.0)


def _mean_se_sums(s1: float, s2: float, n: int) -> tuple[float, float]:
    """:func:`_mean_se` from the sums of the weights and of their squares."""
    m = s1 / n
    if n < 2:
        return m, math.inf
    var = (s2 - n * m * m) / (n - 1)
    return m, math.sqrt(max(var, 0.0) / n)


def _count_interval(m: float, se: float, z: float, kind: str, n: int, R: float,
                    alpha: float) -> tuple[float, float]:
    """Interval for the mean of ``n`` weights in ``[0, R]`` with mean ``m`` and standard error ``se``."""
    if kind == "normal":
        return max(0.0, m - z * se), m + z * se
    if m > 0:
        f = math.exp(min(700.0, z * se / m))
        lo, hi = m / f, m * f
    else:
        lo = hi = 0.0
    if kind == "bernstein":
        hi = max(hi, _bernstein_hi(m, se, n, R, alpha / 2))
    return lo, hi


def _bernstein_hi(m: float, se: float, n: int, R: float, delta: float) -> float:
    """Maurer-Pontil empirical Bernstein upper bound on the mean of i.i.d. weights in ``[0, R]``:
    ``m + sqrt(2 V ln(2/delta) / n) + 7 R ln(2/delta) / (3 (n - 1))`` holds with probability
    ``>= 1 - delta`` whatever their distribution (``V = n se^2`` the sample variance)."""
    if n < 2 or not math.isfinite(R):
        return math.inf
    lg = math.log(2.0 / delta)
    return m + math.sqrt(2.0 * se * se * lg) + 7.0 * R * lg / (3.0 * (n - 1))


def _wilson(k: int, n: int, z: float) -> tuple[float, float]:
    if n == 0:
        return 0.0, 1.0
    ph = k / n
    den = 1.0 + z * z / n
    c = (ph + z * z / (2 * n)) / den
    h = z * math.sqrt(ph * (1 - ph) / n + z * z / (4 * n * n)) / den
    # at no hits the lower end is 0 and at all the upper 1, exactly (c - h, c + h round a few ulps off:
    # an interval that missed a true mass of 0, or of the whole support)
    return 0.0 if k == 0 else max(0.0, c - h), 1.0 if k == n else min(1.0, c + h)


@dataclass(frozen=True)
class ExactHead:
    """The exact part of a combined estimate: every sequence with ``s >= T`` is in ``index``."""

    T: float
    index: "ExactIndex"

    @property
    def count(self) -> int:
        return self.index.N

    @property
    def mass(self) -> float:
        return self.index.total_mass().mid


class MonteCarloEstimator:
    """Estimates from one :class:`~arenum.beyond.sampling.SampleSet`, reused by every query (module docstring).

    ``confidence``: level of every interval (default 0.95). ``interval``: the shape of count
    intervals, one of :data:`Interval` (default ``"bernstein"``; masses always use Wilson's). ``head``: the exact head the draws
    avoid (required when the samples were drawn against one); a deeper head may be passed per query.
    """

    def __init__(self, samples: "SampleSet", *, confidence: float = 0.95, interval: Interval = "bernstein",
                 head: ExactHead | None = None) -> None:
        c = finite_float("confidence", confidence)
        if not 0 < c < 1:
            raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
        if interval not in INTERVALS:
            raise ValueError(f"interval must be one of {INTERVALS}, got {interval!r}")
        if samples.head_T < math.inf and (head is None or head.T > samples.head_T):
            raise ValueError("samples drawn against an exact head need that head (or a deeper one)")
        self.samples = samples
        self.confidence = c
        self.interval = interval
        self.head = head
        self._z = _z(c)
        s = samples
        ok = s.complete
        # what is kept and what is made along the way is counted in SAMPLE_BYTES_PER_DRAW (max_bytes):
        # each temporary is dropped as soon as it is used
        self._w = np.where(ok, np.exp(-s.log_q), 0.0)  # 1/q(x): weight of one sequence in a count
        r_all = np.where(ok, np.exp(s.score - s.log_q), 0.0)  # p/q: weight in a mass
        comp = np.flatnonzero(ok)
        self._order = comp[np.argsort(-s.score[comp])]  # complete draws by descending score (ties: any order)
        del comp
        self._sorted = s.score[self._order]
        self._neg = -self._sorted  # ascending: searched by every query
        # every query's region is a run of that order (scores in [t, top)): prefix sums answer it
        # in O(log n). Copies of one sequence share its score, hence lie in one run together; a
        # draw counts as distinct where its key first appears in the order.
        zero = np.zeros(1)

        def running(x: np.ndarray) -> np.ndarray:
            return np.concatenate((zero, np.cumsum(x)))

        w = self._w[self._order]
        self._cw = running(w)
        self._cw2 = running(w * w)
        del w
        r = r_all[self._order]
        self._cr = running(r)
        self._cr2 = running(r * r)
        del r
        self._rbar = float(r_all.sum()) / samples.n
        self._r_median = float(np.median(r_all[ok])) if ok.any() else 1.0
        del r_all
        keys = s.keys[self._order] if s.keys is not None else np.array(
            [hash(s.seqs[i]) for i in self._order.tolist()], np.int64)
        self._cdistinct = np.concatenate(([0], np.cumsum(_first_in_run(self._sorted, keys))))

    @property
    def method(self) -> str:
        return "monte_carlo" if self.samples.head_T == math.inf else "monte_carlo+exact_head"

    @property
    def n(self) -> int:
        return self.samples.n

    def _head(self, head: ExactHead | None) -> ExactHead | None:
        h = head if head is not None else self.head
        if self.samples.head_T < math.inf:
            if h is None or h.T > self.samples.head_T:
                raise ValueError("these samples avoid an exact head: pass it (or a deeper one)")
            return h
        return None  # plain draws are never combined with a head (that can raise the variance)

    def _region(self, lo: float, strict: bool, hi: float) -> tuple[int, int]:
        """``[a, b)`` in the descending order of complete draws: the draws with ``lo <= s < hi``
        (``lo < s`` when ``strict``)."""
        neg = self._neg
        a = int(np.searchsorted(neg, -hi, side="right"))
        b = int(np.searchsorted(neg, -lo, side="left" if strict else "right"))
        return a, max(a, b)

    def _sums(self, c: np.ndarray, a: int, b: int) -> float:
        return float(c[b] - c[a])

    def _extra(self, head: ExactHead | None, hits: int) -> dict[str, Any]:
        return {"hits": hits, "interval": self.interval, "head_count": head.count if head else 0,
                "head_bits": (-head.T / math.log(2.0)) if head else 0.0,
                "head_mass": head.mass if head else 0.0, "seed": self.samples.seed}

    def _wmax(self, t: float, h: ExactHead | None) -> float:
        """Largest possible count weight ``1/q(x)`` in the region ``s(x) >= t``: ``e^{-t}`` for plain
        draws, ``(1 - P_head) e^{-t}`` for tail draws (``q >= p / (1 - P_head)`` on the tail)."""
        if t == -math.inf or -t >= 700:
            return math.inf
        f = 1.0 if self.samples.head_T == math.inf else max(0.0, 1.0 - self.samples.head_mass) * (1 + 1e-9)
        return math.exp(-t) * f

    def _distinct(self, a: int, b: int) -> int:
        """Distinct sequences among the draws ``[a, b)`` of the order (a lower bound: keys may collide)."""
        return int(self._cdistinct[b] - self._cdistinct[a])

    # ------------------------------------------------------------------ counts
    def count(self, min_log_prob: float, *, head: ExactHead | None = None) -> CountResult:
        """Estimate of ``#{x : s(x) >= min_log_prob}`` (exact if the head covers it)."""
        t = finite_float("min_log_prob", min_log_prob, allow_neg_inf=True)
        return self._count(t, strict=False, head=head)

    def _count(self, t: float, *, strict: bool, head: ExactHead | None) -> CountResult:
        h = self._head(head)
        if h is not None and t >= h.T:  # the head holds every sequence with s >= T: exact, strict or not
            c = h.index.count_gt(t) if strict else h.index.count_ge(t)
            return CountResult(c)
        top = h.T if h is not None else math.inf
        a, b = self._region(t, strict, top)
        n = self.n
        m, se = _mean_se_sums(self._sums(self._cw, a, b), self._sums(self._cw2, a, b), n)
        hits = b - a
        base = h.count if h is not None else 0
        lo, hi = _count_interval(m, se, self._z, self.interval, n, self._wmax(t, h), 1 - self.confidence)
        # certified lower end: the distinct sampled sequences in the region are real (the point
        # value is held to it too, so it never falls outside its own interval)
        distinct = float(self._distinct(a, b))
        unbiased = base + m  # the plain importance-sampling mean (the point value below is held up)
        lo = max(lo, distinct)
        m = max(m, distinct)
        # upper end from the mass: each counted sequence has p >= e^t; the region's mass is at most
        # the Wilson upper end of its sampled mass (a probabilistic bound, used only to cap)
        if hits == 0:
            # nothing sampled in the region: each counted sequence has p >= e^t, and the region's
            # mass is at most the Wilson upper end of zero hits (scaled by the mean p/q)
            mass_hi = _wilson(0, n, self._z)[1] * max(self._rbar, 1e-300)
            hi = mass_hi * math.exp(-t) if t > -math.inf and -t < 700 else math.inf
        est = base + m
        return CountResult(
            float(est), exact=False, method=self.method, estimate=float(est), stderr=se,
            ci_lo=base + lo, ci_hi=base + max(hi, lo), confidence=self.confidence, samples=n,
            forwards=self.samples.forwards, extra={**self._extra(h, hits), "unbiased": float(unbiased)},
        )

    # ------------------------------------------------------------------ masses
    def mass_above(self, min_log_prob: float, *, head: ExactHead | None = None) -> Estimate:
        """Estimate of ``P(s(Y) >= min_log_prob)`` (Wilson interval on the hits)."""
        t = finite_float("min_log_prob", min_log_prob, allow_neg_inf=True)
        return self._mass(t, head=head)

    def _mass(self, t: float, *, head: ExactHead | None) -> Estimate:
        h = self._head(head)
        n = self.n
        if h is not None and t >= h.T:
            mb = h.index.mass_ge(t)
            return Estimate(mb.mid, 0.0, mb.lo, mb.hi, self.confidence, "exact", 0, 0)
        top = h.T if h is not None else math.inf
        a, b = self._region(t, False, top)
        hits = b - a
        m, se = _mean_se_sums(self._sums(self._cr, a, b), self._sums(self._cr2, a, b), n)
        base = h.mass if h is not None else 0.0
        # the ratio p/q is constant (1 - P_head) on the tail up to the quantization: Wilson on the hits
        c = self._r_median
        lo, hi = _wilson(hits, n, self._z)
        hi = 1.0 if hits == n else min(1.0, base + c * hi)  # every draw above t: up to the whole mass, at most 1
        return Estimate(base + m, se, min(1.0, base + c * lo), hi, self.confidence,
                        self.method, n, hits, self.samples.forwards, self._extra(h, hits))

    # ------------------------------------------------------------------ ranks
    def rank(self, log_prob: float, *, head: ExactHead | None = None) -> DensityRankResult:
        """Estimate of the rank ``#{x : s(x) > log_prob}`` and of ``P(s(Y) >= log_prob)`` of a
        sequence whose exact log-probability is ``log_prob``."""
        s0 = finite_float("log_prob", log_prob)
        c = self._count(s0, strict=True, head=head)
        mres = self._mass(s0, head=head)
        # rank < (1 - p0) / p0: every sequence ranked before has probability > p0
        cap = mass_count_bound(s0) - 1
        hi = min(float(c.ci_hi), float(cap))
        exact = c.exact
        return DensityRankResult(
            rank=int(c) if exact else c.estimate, cumulative=mres.value, log_prob=s0, exact=exact,
            method="exact" if exact else self.method, rank_lo=c.ci_lo, rank_hi=c.ci_hi if exact else hi,
            cumulative_lo=mres.lo, cumulative_hi=mres.hi, rank_stderr=c.stderr,
            cumulative_stderr=mres.stderr, confidence=None if exact else self.confidence,
            extra={**c.extra, "samples": self.n, "forwards": self.samples.forwards},
        )

    cumulative = rank

    # ------------------------------------------------------------------ thresholds
    def threshold(self, rank: int, *, head: ExactHead | None = None) -> ThresholdResult:
        """Estimate of the log-prob of the ``rank``-th most probable sequence (1-based).

        The point value is the largest sampled score whose count estimate reaches ``rank``; the
        interval inverts the count interval: ``ci_hi`` is the largest sampled score whose interval's
        upper end reaches ``rank``, ``ci_lo`` the largest whose lower end does (``-inf`` if none).
        """
        k = exact_int("rank", rank, minimum=1)
        h = self._head(head)
        if h is not None and k <= h.count:
            _, x = h.index.item(k - 1)
            return ThresholdResult(x)
        base = h.count if h is not None else 0
        top = h.T if h is not None else math.inf
        sc = self._sorted
        ords = self._order[sc < top]
        sc = sc[sc < top]
        n = self.n
        w = self._w[ords]
        del ords
        cw = np.cumsum(w)
        cw2 = np.cumsum(w * w)
        del w
        # counts at each sampled score (ties: the last of a run counts all of them)
        m = cw / n
        del cw  # temporaries dropped as soon as used: counted in SAMPLE_BYTES_PER_DRAW (max_bytes)
        var = np.maximum(cw2 - n * m * m, 0.0) / max(n - 1, 1)
        del cw2
        se = np.sqrt(var / n)
        del var
        need = k - base
        extra = self._extra(h, int(sc.shape[0]))
        if sc.shape[0] == 0:
            return ThresholdResult(-math.inf, exact=False, method=self.method, estimate=-math.inf,
                                   ci_lo=-math.inf, ci_hi=top, confidence=self.confidence, samples=n,
                                   forwards=self.samples.forwards, extra=extra)
        if self.interval == "normal":
            lo = np.maximum(m - self._z * se, 0.0)
            hi = m + self._z * se
        else:
            f = np.exp(np.minimum(700.0, self._z * se / np.maximum(m, 1e-300)))
            lo, hi = m / f, m * f
            del f
            if self.interval == "bernstein":
                lg = math.log(4.0 / (1 - self.confidence))
                R = np.fromiter((self._wmax(float(x), h) for x in sc), np.float64, count=sc.shape[0])
                hi = np.maximum(hi, m + np.sqrt(2.0 * se * se * lg) + 7.0 * R * lg / (3.0 * max(n - 1, 1)))
        last_of_run = np.r_[sc[1:] != sc[:-1], True]

        def first_reach(arr: np.ndarray) -> float:
            ok = np.flatnonzero((arr >= need) & last_of_run)
            return float(sc[ok[0]]) if ok.size else -math.inf

        point = first_reach(m)
        if point == -math.inf:
            point = float(sc[-1])  # the estimate never reaches k: the lowest sampled score
        t_hi = first_reach(hi)
        t_hi = float(sc[0]) if t_hi == -math.inf and hi[-1] >= need else (t_hi if t_hi > -math.inf else point)
        t_lo = first_reach(lo)
        lo_t, hi_t = min(t_lo, point), max(t_hi, point)
        # a standard error read off the interval (half-width over z); nan when it is unbounded
        se_t = (hi_t - lo_t) / (2 * self._z) if lo_t > -math.inf else float("nan")
        return ThresholdResult(point, exact=False, method=self.method, estimate=point,
                               stderr=se_t, ci_lo=lo_t, ci_hi=hi_t,
                               confidence=self.confidence, samples=n, forwards=self.samples.forwards,
                               extra=extra)


def _first_in_run(sc: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """int64 flags over draws sorted by score: 1 where a key appears for the first time in its run
    of equal scores (a region is a union of whole runs, so its flags count its distinct keys).

    A run whose keys are all equal (copies of one sequence, the common case) flags its first draw;
    the few runs holding different keys (different sequences with one score) are sorted by
    (run, key, position) to flag each key's first draw."""
    n = sc.shape[0]
    flags = np.zeros(n, np.int64)
    if n == 0:
        return flags
    new_run = np.r_[True, sc[1:] != sc[:-1]]
    flags[new_run] = 1
    mixed_step = ~new_run[1:] & (keys[1:] != keys[:-1])  # a key change inside a run
    if mixed_step.any():
        run = np.cumsum(new_run) - 1
        mixed_runs = np.zeros(int(run[-1]) + 1, np.bool_)
        mixed_runs[run[1:][mixed_step]] = True
        sel = np.flatnonzero(mixed_runs[run])
        o = sel[np.lexsort((sel, keys[sel], run[sel]))]
        head = np.r_[True, (run[o][1:] != run[o][:-1]) | (keys[o][1:] != keys[o][:-1])]
        flags[sel] = 0
        flags[o[head]] = 1
    return flags


def mass_count_bound(t: float) -> int | float:
    """Sound bound on #sequences with score ``>= t``: each has mass ``>= e**t``, total ``<= 1``."""
    if -t < 700:
        return int(math.floor(math.exp(-t) * (1 + 1e-12))) + 1
    return math.inf
