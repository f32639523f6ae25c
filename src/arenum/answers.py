"""The answers stage: exact, else certified bracket, else estimate, decided once per query.

:class:`Answers` turns what the exact index can do (or its :class:`~arenum.results.BudgetExceeded`)
into the result records of :mod:`arenum.results`, in one order of preference:

1. exact: the index deepened to the budget the answer needs (``method='exact'``);
2. a certified bracket where a cap forbids exactness: ``branch_cap`` (the sub-support is counted
   exactly and the skipped part bounded) or a resource cap with no estimator allowed
   (``method='bracket'``, ``lo <= true <= hi``); for a finite-state model past a resource cap, the
   DP of :mod:`arenum.beyond.certified` (``method='certified'``, ``lo <= true <= hi`` at any depth, the
   exact head's count folded in), preferred to an estimate;
3. a Monte Carlo estimate with its interval, when the caller allowed one (``exact_limit``): the
   ``estimator`` callback gives the estimator and the exact head it adds to.

It takes the seek index, the support and the estimator callback, never the facade. It does not
validate user input (the facade does, once) and does not build anything itself: every forward is
made by the seek index.
"""
from __future__ import annotations

import math
from typing import Callable

from .beyond import CertifiedCounter, ExactHead, MonteCarloEstimator, mass_count_bound
from .exact import ExactIndex, SeekIndex
from .results import (
    BudgetExceeded, CountBracket, CountDPTopPResult, CountResult, DensityRankResult, MassBracket, ThresholdResult,
)
from .support import Support

__all__ = ["Answers"]

Estimator = Callable[[], "tuple[MonteCarloEstimator, ExactHead | None]"]
"""``() -> (estimator, exact head or None)``: the automatic regime's Monte Carlo estimator."""


class Answers:
    """Result records for one seek index (see the module docstring).

    ``estimator``: ``None`` (no estimates: past a cap, brackets or :class:`BudgetExceeded`), or the
    callback giving the Monte Carlo estimator of the automatic regime. ``certified``: ``None``, or
    the callback giving the :class:`~arenum.beyond.certified.CertifiedCounter` of a finite-state model (or
    ``None`` when it has none); preferred to the estimator past a cap.
    """

    def __init__(self, seek: SeekIndex, support: Support, estimator: Estimator | None = None,
                 certified: Callable[[], CertifiedCounter | None] | None = None) -> None:
        self.seek = seek
        self.support = support
        self.estimator = estimator
        self.certified = certified

    def _cert(self, t: float = 0.0) -> CertifiedCounter | None:
        """The certified counter past a cap (never under ``branch_cap``: it counts the whole support;
        nor for ``t = -inf``, the whole support, whose count past a cap stays the indexed one)."""
        if self.certified is None or self._capped or t == -math.inf:
            return None
        return self.certified()

    def _head(self) -> tuple[int, float]:
        """``(N, T)`` of the exact index built: every sequence with score ``>= T`` is one of its ``N``."""
        try:
            idx = self._built()
        except BudgetExceeded:
            return 0, math.inf
        return idx.N, idx.T

    def _cert_count(self, cc: CertifiedCounter, t: float) -> CountBracket:
        """The certified count bracket, its lower end raised to the exact head's count below ``T``."""
        b = cc.count_bracket(t)
        n, T = self._head()
        lo = max(b.lo, n) if T >= t else b.lo
        return CountBracket(lo, max(lo, b.hi))

    def _cert_mass(self, cc: CertifiedCounter, t: float) -> MassBracket:
        """The certified mass bracket, its lower end raised to the exact head's mass below ``T``."""
        b = cc.mass_bracket(t)
        try:
            idx = self._built()
        except BudgetExceeded:
            return b
        lo = max(b.lo, idx.total_mass().lo) if idx.T >= t else b.lo
        return MassBracket(lo, max(lo, b.hi))

    def _cert_extra(self, cc: CertifiedCounter) -> dict:
        return {"resolution_bits": cc.resolution_bits, "head_count": self._head()[0]}

    def _built(self) -> ExactIndex:
        """The deepest index within the caps, never raising for a cap: the current one, or the last
        one counted when building its buckets would pass ``max_sequences`` (items counted only)."""
        try:
            return self.seek.index()
        except BudgetExceeded:
            idx = self.seek.current
            if idx is None:
                raise
            return idx

    @property
    def _capped(self) -> bool:
        return self.support.branch_cap is not None

    # ------------------------------------------------------------------ counts
    def count(self, t: float) -> CountResult:
        """``#{x : s(x) >= t}``: exact; a bracket record under ``branch_cap``; past a resource cap an
        estimate when allowed, else :class:`BudgetExceeded`."""
        seek = self.seek
        try:
            c = seek.count(t)
        except BudgetExceeded:
            cc = self._cert(t)
            if cc is not None:
                b = self._cert_count(cc, t)
                return CountResult(b.lo, exact=b.exact, method="certified", ci_lo=b.lo, ci_hi=b.hi,
                                   extra=self._cert_extra(cc))
            if self.estimator is None:
                raise
            est, head = self.estimator()
            return est.count(t, head=head)
        if not self._capped or t > 0:
            return CountResult(c)
        return CountResult(c, exact=False, method="bracket", ci_lo=c, ci_hi=c + seek.dropped_bound(t))

    def count_bracket(self, t: float) -> CountBracket:
        """Certified ``lo <= #{x : s(x) >= t} <= hi``, never raising for a cap."""
        seek = self.seek
        try:
            lo = seek.count(t)
        except BudgetExceeded:
            cc = self._cert(t)
            if cc is not None:
                return self._cert_count(cc, t)
            idx = self._built()
            return CountBracket(idx.N if idx.T >= t else 0, mass_count_bound(t))
        if not self._capped:
            return CountBracket(lo, lo)
        return CountBracket(lo, lo + seek.dropped_bound(t))

    def count_or_bracket(self, t: float) -> CountResult | CountBracket:
        """The count the automatic regime gives, never raising for a cap: the exact count as its
        certified bracket (equal ends unless ``branch_cap`` cut the support), an estimate when one is
        allowed, else the certified bracket past the cap."""
        try:
            c = self.count(t)
        except BudgetExceeded:
            return self.count_bracket(t)
        if c.exact or c.method in ("bracket", "certified"):  # its certified ends, already computed
            return CountBracket(c.ci_lo, c.ci_hi)
        return c

    # ------------------------------------------------------------------ positions
    def threshold(self, k: int) -> ThresholdResult:
        """Score of the ``k``-th sequence (1-based): exact; a lower bound under ``branch_cap``; past
        a resource cap an estimate when allowed, else :class:`BudgetExceeded`."""
        try:
            x = self.seek.threshold(k)
        except BudgetExceeded:
            cc = self._cert()
            if cc is not None:
                lo, hi = cc.threshold_bracket(k)
                n, T = self._head()
                hi = min(hi, T) if n < k else hi  # fewer than k sequences score >= T
                return ThresholdResult(lo, exact=False, method="certified", ci_lo=lo, ci_hi=max(lo, hi),
                                       extra=self._cert_extra(cc))
            if self.estimator is None:
                raise
            est, head = self.estimator()
            return est.threshold(k, head=head)
        if not self._capped:
            return ThresholdResult(x)
        return ThresholdResult(x, exact=False, method="bracket", ci_lo=x, ci_hi=0.0)

    # ------------------------------------------------------------------ masses
    def mass_above(self, t: float) -> MassBracket:
        """``lo <= P(s(X) >= t) <= hi``: float rounding only; ``branch_cap`` adds the skipped mass
        to ``hi``; past a resource cap ``[mass built, 1]``."""
        seek = self.seek
        if t > 0:
            return MassBracket(0.0, 0.0)
        try:
            idx = seek.ensure_score(t)
        except BudgetExceeded:
            cc = self._cert(t)
            if cc is not None:
                return self._cert_mass(cc, t)
            idx = self._built()
            return MassBracket(idx.total_mass().lo if idx.T >= t else 0.0, 1.0)
        m = idx.mass_ge(t)
        if self._capped:
            return MassBracket(m.lo, min(1.0, m.hi + seek.dropped_mass(t)))
        return m

    def nucleus_size(self, p: float) -> CountDPTopPResult:
        """Smallest head with mass ``>= p``: exact up to float rounding; ``truncated`` past a cap."""
        idx, truncated = self.seek.ensure_mass(p)
        r = idx.nucleus(p) if idx.bucketed else None
        if truncated and not idx.bucketed:
            # items counted, not ordered (past max_sequences): a head holding p has at least
            # p / max p sequences, and all of them if they hold p
            tm = idx.total_mass()
            top = math.exp(idx.top_score) if idx.N else 1.0
            lo = max(1, math.ceil(p * (1 - 1e-12) / top)) if top > 0 else idx.N
            thr = idx.T if idx.N and idx.T > -math.inf else 0.0
            return CountDPTopPResult(size=lo, size_lo=lo, size_hi=idx.N if tm.lo >= p else None, mass_lo=tm.lo,
                                     mass_hi=tm.hi, threshold=thr, p=p, truncated=True, exact=False)
        if truncated and r is None:
            tm = idx.total_mass()
            thr = float(idx.item(idx.N - 1)[1]) if idx.N else 0.0
            return CountDPTopPResult(size=idx.N, size_lo=idx.N, size_hi=None, mass_lo=tm.lo, mass_hi=tm.hi,
                                     threshold=thr, p=p, truncated=True, exact=False)
        if r is None:  # pragma: no cover - ensure_mass returns untruncated only with a nucleus
            raise RuntimeError("internal error: no nucleus in an untruncated index")
        k_lo, k_hi = r
        _, thr = idx.item(k_lo - 1)
        m = idx.mass_ge(thr)
        if k_hi is None:  # even the whole built support may hold less than p (rounding or caps)
            return CountDPTopPResult(size=k_lo, size_lo=k_lo, size_hi=None, mass_lo=m.lo, mass_hi=m.hi,
                                     threshold=thr, p=p, truncated=True, exact=False)
        return CountDPTopPResult(size=k_lo, size_lo=k_lo, size_hi=k_hi, mass_lo=m.lo, mass_hi=m.hi,
                                 threshold=thr, p=p, truncated=False, exact=k_lo == k_hi)

    # ------------------------------------------------------------------ ranks
    def rank(self, s: float) -> DensityRankResult:
        """Rank (``#{x : s(x) > s}``) and cumulative mass of a sequence of finite score ``s``: exact;
        a bracket under ``branch_cap``; past a resource cap an estimate when allowed, else a
        certified bracket."""
        seek = self.seek
        tree = seek.tree
        trunc = tree.depth_truncated or self._capped
        try:
            idx = seek.ensure_score(s)
        except BudgetExceeded:
            cc = self._cert()
            if cc is not None:
                r = self._cert_count(cc, math.nextafter(s, math.inf))  # s(x) > s: s(x) >= the next float
                m = self._cert_mass(cc, s)
                return DensityRankResult(
                    rank=r.lo, cumulative=m.mid, log_prob=s, exact=r.exact, method="certified", rank_lo=r.lo,
                    rank_hi=r.hi, cumulative_lo=m.lo, cumulative_hi=m.hi, truncated=trunc, extra=self._cert_extra(cc))
            if self.estimator is not None:
                est, head = self.estimator()
                return est.rank(s, head=head)
            idx = self._built()
            lo = idx.N if idx.T > s else 0  # every indexed sequence is strictly above s
            hi = mass_count_bound(s) - 1
            m = idx.total_mass() if idx.T > s else MassBracket(0.0, 0.0)
            c_lo = min(1.0, m.lo + math.exp(s))
            return DensityRankResult(
                rank=lo, cumulative=0.5 * (c_lo + 1.0), log_prob=s, exact=False, method="bracket",
                rank_lo=lo, rank_hi=hi, cumulative_lo=c_lo, cumulative_hi=1.0, truncated=trunc,
            )
        lo = idx.count_gt(s)
        m = idx.mass_ge(s)
        hi: int | float = lo
        c_hi = m.hi
        if self._capped:
            hi = lo + seek.dropped_bound(s)
            c_hi = min(1.0, m.hi + seek.dropped_mass(s))
        exact = hi == lo
        return DensityRankResult(
            rank=lo, cumulative=m.mid if exact else 0.5 * (m.lo + c_hi), log_prob=s, exact=exact,
            method="exact" if exact else "bracket", rank_lo=lo, rank_hi=hi,
            cumulative_lo=m.lo, cumulative_hi=c_hi, truncated=tree.depth_truncated or not exact,
        )

    # ------------------------------------------------------------------ the exact head
    def exact_head(self) -> ExactHead | None:
        """The exact index built so far as an :class:`~arenum.beyond.estimate.ExactHead`; ``None`` when
        nothing is built or under ``branch_cap`` (a sub-support is not a head of the support)."""
        seek = self.seek
        if self._capped or seek.tree.built == math.inf:
            return None
        try:
            idx = seek.index()
        except BudgetExceeded:
            idx = seek.current
        if idx is None or idx.N == 0 or not idx.bucketed:
            return None
        return ExactHead(idx.T, idx)

    def deepen_head(self) -> None:
        """Deepen the exact head as far as the caps allow (before the first estimate: its forwards
        also serve later exact answers)."""
        try:
            self.seek.ensure_count(1 << 62)
        except BudgetExceeded:
            pass
