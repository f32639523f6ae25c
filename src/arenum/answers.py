"""The answers stage: exact, else certified bracket, else estimate, decided once per query.

:class:`Answers` turns what the exact index can do (or its :class:`~arenum.errors.BudgetExceeded`)
into the result records of :mod:`arenum.results`. ONE method, :meth:`Answers.regime`, owns the
order of preference for every query (``count``, ``count_bracket``, ``threshold``, ``mass_above``,
``rank``); each query only says how each regime's record is made:

1. exact: the index deepened to the budget the answer needs (``method='exact'``); under
   ``branch_cap`` the sub-support is counted exactly and the skipped part bounded
   (``method='bracket'``, ``lo <= true <= hi``);

past a resource cap (the index raised :class:`~arenum.errors.BudgetExceeded`):

2. certified: for a finite-state model, the DP of :mod:`arenum.beyond.certified`
   (``method='certified'``, ``lo <= true <= hi`` at any depth, the exact head's count folded in);
3. estimate: a Monte Carlo estimate with its interval, when the caller allowed one (``exact_limit``),
   drawn once by the :class:`~arenum.beyond.regime.BeyondExact` it holds, after the exact head
   is deepened as far as the caps allow;
4. bracket: a certified bracket around the deepest index built (``method='bracket'``);
5. else the :class:`~arenum.errors.BudgetExceeded` itself.

It takes the seek index, the support and the facade's :class:`~arenum.beyond.regime.BeyondExact`,
never the facade. It does not validate user input and does not take the lock: the facade did both,
once. It builds nothing itself: every forward is made by the seek index or the draws.
"""
from __future__ import annotations

import contextlib
import math
from typing import Callable, Sequence, TypeVar

import numpy as np

from .beyond import BeyondExact, CertifiedCounter, ExactHead, MonteCarloEstimator, mass_count_bound
from .exact import ExactIndex, SeekIndex, values
from .errors import BudgetExceeded
from ._guard import held
from .results import (
    CountBracket, CountDPTopPResult, CountResult, DensityRankResult, MassBracket, ThresholdResult,
)
from .support import Support

__all__ = ["Answers"]

R = TypeVar("R")


class Answers:
    """Result records for one seek index (see the module docstring).

    ``beyond``: the enumerable's state past the exact budget (``None``: no certified brackets and
    no estimates). ``estimates``: whether a query past a cap may be answered by a Monte Carlo
    estimate (``exact_limit`` was given). ``certified``: whether a finite-state model's certified DP
    is preferred to the estimate past a cap.
    """

    def __init__(self, seek: SeekIndex, support: Support, beyond: BeyondExact | None = None, *,
                 estimates: bool = False, certified: bool = True) -> None:
        self.seek = seek
        self.support = support
        self.beyond = beyond
        self.estimates = estimates and beyond is not None
        self.certified = certified and beyond is not None
        self._floor: tuple[CertifiedCounter, float] | None = None  # (counter, its support_floor)

    # ------------------------------------------------------------------ the regime ladder
    def regime(self, build: Callable[[], R], exact: Callable[[R], R], *, t: float = 0.0,
               sub_support: Callable[[R], R] | None = None,
               certified: Callable[[CertifiedCounter], R] | None = None,
               estimate: Callable[[MonteCarloEstimator, ExactHead | None], R] | None = None,
               bracket: Callable[[ExactIndex], R] | None = None, whole: bool = False,
               rank_limit: int | None = None) -> R:
        """The one regime decision of every query: the first rung that applies makes the record.

        ``build()`` deepens the index to the query's budget (it raises
        :class:`~arenum.errors.BudgetExceeded` past a resource cap; ``rank_limit``: a rank's own cap on
        the live prefixes, :meth:`_past_rank_limit`). Then, in this order:

        - ``exact(x)``: no cap bound (``method='exact'``);
        - ``sub_support(x)``: ``branch_cap`` cut the support (``method='bracket'``);

        past a resource cap:

        - ``certified(cc)``: a finite-state model's DP (``method='certified'``); not under
          ``branch_cap``, and for ``t = -inf`` (the whole support) only when ``whole`` (a count) and
          the support's least score is finite (:meth:`support_floor`: the count there is the same);
        - ``estimate(est, head)``: a Monte Carlo estimate, only when estimates are allowed;
        - ``bracket(idx)``: a certified bracket around the deepest index built (``method='bracket'``);
        - none of these: the :class:`~arenum.errors.BudgetExceeded` propagates.

        A query passes only the rungs it has; each rung sets its record's ``exact``/``method``, and a
        record of the certified or bracket rung that still says ``exact`` (a :class:`MassBracket`
        built plainly) is stamped with the rung's method here: past a cap nothing claims exactness
        unless its bracket is a single value. Every record computes its own point value
        (:func:`arenum.results.point_value`).
        """
        try:
            if certified is not None and (self._past_rank_limit(t, rank_limit) if rank_limit is not None
                                          else self._out_of_reach(t)):  # a rank's limit bounds its build
                raise BudgetExceeded("the certified count shows the exact build would pass a cap")
            x = build()
        except BudgetExceeded:
            cc = self._certified_counter(t, whole) if certified is not None else None
            if cc is not None:
                self.beyond.certified_note("answering past the exact budget")
                return _stamp(certified(cc), "certified")
            if estimate is not None and self.estimates:
                return estimate(*self._estimator())
            if bracket is None:
                raise
            try:
                idx = self._built()
            except BudgetExceeded:  # a cap refused the very first build: nothing is indexed
                idx = _NOTHING  # type: ignore[assignment]
            return _stamp(bracket(idx), "bracket")
        if sub_support is not None and self._capped:
            return sub_support(x)
        return exact(x)

    def _out_of_reach(self, t: float) -> bool:
        """Whether the certified DP proves that an exact build down to score ``t`` passes a cap
        (:meth:`~arenum.exact.SeekIndex.surely_over_caps` of its lower count of the sequences, then
        of the prefixes, each a live node of that build): then the build is skipped (its time, its
        memory and its forwards), never an answer the caps allowed. Asked only past what the tree
        has built, and only where the count could pass a cap (``e**-t`` sequences bound it, and
        ``max_len`` times that their prefixes): shallow queries build no DP for it, and where only
        the prefixes could pass a cap, only a counter whose lower count DP already reaches ``t``
        (a rank after a deeper one) is asked, its prefix DP grown once."""
        seek = self.seek
        if not math.isfinite(t) or t >= seek.tree.built:
            return False
        bound = mass_count_bound(t)
        term = self.support.is_terminating
        by_count = seek.surely_over_caps(bound)
        if not by_count and not (term and seek.surely_over_caps(0, prefixes=bound * self.support.cap)):
            return False
        cc = self._certified_counter(t)
        if cc is None or not (by_count or cc.counts_built(t)):
            return False
        per = 1 if term else max(1, cc.max_degree)
        D, L = max(2, cc.max_degree), self.support.cap  # the whole support holds at most D**L sequences
        if L * math.log(D) < 700 and not seek.surely_over_caps(float(D) ** L, per,  # its prefixes, 2 D**L
                                                               prefixes=0 if by_count else 2.0 * float(D) ** L):
            return False  # a short max_len: needs no DP to tell (a deep t there cost minutes of DP for an exact answer)
        self.beyond.certified_note("checking the exact build's size")
        n = cc.count_lower(t)
        if seek.surely_over_caps(n, per):
            return True
        p = cc.prefix_lower(t) if term else None
        return p is not None and seek.surely_over_caps(n, per, prefixes=p)

    def _rank_limit(self) -> int | None:
        """A rank's own cap on the live prefixes of its build (:attr:`BeyondExact.rank_exact_limit`) where a
        certified DP can answer instead and the limit binds before the caps; else ``None`` (the caps
        decide, as for any query)."""
        limit = self.beyond.rank_limit() if self.certified else None
        return None if limit is None or self.seek.surely_over_caps(0, prefixes=2 * limit) else limit

    def _past_rank_limit(self, t: float, limit: int) -> bool:
        """Whether a certified DP already built down to ``t`` proves that an exact build there holds
        more than ``limit`` live prefixes (a terminating sequence's body is one of them; a fixed-length
        prefix has at most ``max_degree`` completions a step): then a rank skips the build it would
        stop at the limit. It stands for :meth:`_out_of_reach` there (whose prefix DP each deeper rank
        would grow, for a build the limit bounds anyway). The count DP is built to tell only for a rank
        more than 10 bits past what ``limit`` sequences could reach (``e**-t > 1024 limit``), which
        it answers anyway when the build cannot: a shallower one builds first (cheaper than that DP, and
        often exact)."""
        if not math.isfinite(t) or t >= self.seek.tree.built or mass_count_bound(t) <= limit:
            return False
        cc = self._certified_counter(t)
        if cc is None or not (cc.counts_built(t) or mass_count_bound(t) > 1024 * limit):
            return False
        return cc.count_lower(t) / (1 if self.support.is_terminating else max(1, cc.max_degree)) > limit

    def _certified_counter(self, t: float, whole: bool = False) -> CertifiedCounter | None:
        """The certified counter past a cap (never under ``branch_cap``: it counts the whole support;
        for ``t = -inf``, the whole support, only when ``whole`` and its least score is finite)."""
        if not self.certified or self._capped or (t == -math.inf and not whole):
            return None
        cc = self.beyond.certified()
        if t == -math.inf and cc is not None and self.support_floor(cc) < -cc.max_cells * cc.delta:
            return None  # no least score, or one past the DP's depth: its count would be a lower end only
        return cc

    def unrank(self, i: int) -> tuple[tuple, float]:
        """``seek.unrank(i)``; past a cap, ``IndexError`` where the certified count shows ``i`` past the
        whole support (``BudgetExceeded`` otherwise), as :meth:`threshold` does."""
        try:
            return self.seek.unrank(i)
        except BudgetExceeded:
            n = self.support_at_most()
            if n is not None and i >= n:
                raise IndexError(f"i={i} is beyond the support (at most {n:,} sequences)") from None
            raise

    def support_at_most(self) -> int | None:
        """A certified upper bound on the number of sequences of the whole support (a finite-state
        model's DP, counted to its least score), else ``None``."""
        cc = self._certified_counter(-math.inf, whole=True)
        return None if cc is None else int(self._cert_count(cc, -math.inf).hi)

    def support_floor(self, cc: CertifiedCounter) -> float:
        """The least score of any sequence of the support (``+inf`` when it has none): a min-plus walk
        of ``cc``'s tables over the length cap, from the start state. Every sequence scores ``>=`` it,
        so ``count(-inf) == count(support_floor)``. Computed once per counter (``cap`` passes over
        the tables)."""
        if self._floor is not None and self._floor[0] is cc:
            return self._floor[1]
        tab = cc.tables
        _, lp, nxt, end = tab.step_tables(cc.terminating)
        fin_end = np.where(np.isfinite(end), end, np.inf)
        # least score of a completion from each state: eos now, or after one more token (terminating:
        # at most cap - 1 tokens then eos; fixed length: exactly cap tokens)
        least = fin_end.copy() if cc.terminating else np.zeros(tab.n_states)
        for _ in range(cc.cap - 1 if cc.terminating else cc.cap):
            step = np.empty(tab.n_states)
            for i in range(0, tab.n_states, 4096):  # rows in blocks: temporaries of 4096 rows, no table copy
                b, n = lp[i:i + 4096], nxt[i:i + 4096]
                ok = np.isfinite(b) & (n >= 0)
                with np.errstate(invalid="ignore"):  # -inf + inf outside ok: discarded by the where
                    step[i:i + 4096] = np.where(ok, b + least[np.where(ok, n, 0)], np.inf).min(axis=1)
            least = np.minimum(fin_end, step) if cc.terminating else step
        v = float(least[tab.start])
        # a true floor under float rounding: a sum of cap terms in another order differs by a few ulps
        # (+inf: the support is empty, no completion from the start; -inf: none within the cap is finite)
        floor = v - abs(v) * (cc.cap + 2) * 4 * 2.0**-52 if math.isfinite(v) else (math.inf if v > 0 else -math.inf)
        self._floor = (cc, floor)
        return floor

    def _estimator(self) -> tuple[MonteCarloEstimator, ExactHead | None]:
        """The automatic regime's estimator: before its draws are made (once), the exact head is
        deepened as far as the caps allow, so its forwards also serve later exact answers."""
        key = self.beyond.default_key()
        if self.beyond.cached_estimator(key) is None:
            self.deepen_head()
        est = self.monte_carlo(key)
        return est, (self.exact_head() if est.head is not None else None)

    def monte_carlo(self, key: tuple) -> MonteCarloEstimator:
        """The estimator of ``key = (n, seed, head, interval)`` (validated by the facade), drawn once:
        the memory for its draws is checked first, then they avoid the exact head built so far when
        ``head`` (see :meth:`arenum.AutoregressiveEnumerable.monte_carlo`)."""
        est = self.beyond.cached_estimator(key)
        if est is None:
            self.beyond.check_room(key[0], self.seek.memory_bytes)
            est = self.beyond.draw(key, self.exact_head() if key[2] else None)
        return est

    # ------------------------------------------------------------------ the index built
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

    def _head(self) -> tuple[int, float]:
        """``(N, T)`` of the exact index built: every sequence with score ``>= T`` is one of its ``N``."""
        try:
            idx = self._built()
        except BudgetExceeded:
            return 0, math.inf
        return idx.N, idx.T

    @property
    def _capped(self) -> bool:
        return self.support.branch_cap is not None

    def _cert_count(self, cc: CertifiedCounter, t: float) -> CountBracket:
        """The certified count bracket, its lower end raised to the exact head's count below ``T``."""
        if t == -math.inf:  # the whole support: its count at (a few cells under) its least score
            t = self.support_floor(cc)
            if t == math.inf:  # an empty support (a constraint that accepts nothing the model makes)
                return CountBracket(0, 0, method="certified")
            below = t - (cc.cap + 2) * cc.delta  # the lower DP's rounding (a cell a step) takes them all in
            t = below if below >= -cc.max_cells * cc.delta else t
        b = cc.count_bracket(t)
        n, T = self._head()
        lo = max(b.lo, n) if T >= t else b.lo
        return CountBracket(lo, max(lo, b.hi), method="certified")

    def _cert_mass(self, cc: CertifiedCounter, t: float) -> MassBracket:
        """The certified mass bracket, its lower end raised to the exact head's mass below ``T``."""
        b = cc.mass_bracket(t)
        try:
            idx = self._built()
        except BudgetExceeded:
            return b
        lo = max(b.lo, idx.total_mass().lo) if idx.T >= t else b.lo
        hi = max(lo, b.hi)
        return MassBracket(lo, hi, exact=lo == hi, method="certified")  # equal ends: proven (both bound it)

    def _lazy_mass(self, cc: CertifiedCounter, s: float) -> Callable[[], tuple[float, float]]:
        """``() -> (lo, hi)``: the certified cumulative mass ``P(s(X) >= s)``, computed when called
        (under the enumerable's build lock, like every query)."""
        lock = self.beyond.lock

        def mass() -> tuple[float, float]:
            with held(lock) if lock is not None else contextlib.nullcontext():
                m = self._cert_mass(cc, s)
            return m.lo, m.hi
        return mass

    def _cert_extra(self, cc: CertifiedCounter) -> dict:
        return {"resolution_bits": cc.resolution_bits, "head_count": self._head()[0]}

    # ------------------------------------------------------------------ counts
    def count(self, t: float) -> CountResult:
        """``#{x : s(x) >= t}``: exact; a bracket record under ``branch_cap``; past a resource cap the
        certified DP of a finite-state model, else an estimate when allowed, else :class:`BudgetExceeded`."""
        seek = self.seek

        def certified(cc: CertifiedCounter) -> CountResult:
            b = self._cert_count(cc, t)
            return CountResult(b.lo, exact=b.exact, method="certified", ci_lo=b.lo,
                               ci_hi=b.hi, extra=self._cert_extra(cc))

        def sub_support(c: int) -> CountResult:
            hi = c + seek.dropped_bound(t)
            if hi == c:  # nothing the cap skipped scores >= t: the count is the truth
                return CountResult(c)
            return CountResult(c, exact=False, method="bracket", ci_lo=c, ci_hi=hi)

        return self.regime(
            lambda: seek.count(t), CountResult, t=t, sub_support=None if t > 0 else sub_support,
            certified=certified, estimate=lambda est, head: est.count(t, head=head), whole=True,
        )

    def count_bracket(self, t: float) -> CountBracket:
        """Certified ``lo <= #{x : s(x) >= t} <= hi``, never raising for a cap."""
        return self._count_brackets(t, estimate=False)

    def count_or_bracket(self, t: float) -> CountResult | CountBracket:
        """The count the automatic regime gives, never raising for a cap: the exact count as its
        certified bracket (equal ends unless ``branch_cap`` cut the support), an estimate when one is
        allowed, else the certified bracket past the cap."""
        return self._count_brackets(t, estimate=True)

    def _count_brackets(self, t: float, *, estimate: bool) -> CountResult | CountBracket:
        seek = self.seek
        return self.regime(
            lambda: seek.count(t), lambda c: CountBracket(c, c), t=t,
            sub_support=lambda c: CountBracket(c, c + seek.dropped_bound(t)),
            certified=lambda cc: self._cert_count(cc, t),
            estimate=(lambda est, head: est.count(t, head=head)) if estimate else None,
            bracket=lambda idx: CountBracket(idx.N if idx.T >= t else 0, mass_count_bound(t)), whole=True,
        )

    # ------------------------------------------------------------------ positions
    def threshold(self, k: int) -> ThresholdResult:
        """Score of the ``k``-th sequence (1-based): exact; a lower bound under ``branch_cap``; past
        a resource cap the certified DP's bracket, else an estimate when allowed, else :class:`BudgetExceeded`."""

        def certified(cc: CertifiedCounter) -> ThresholdResult:
            lo, hi = cc.threshold_bracket(k)
            if lo == -math.inf and self.support_floor(cc) > -cc.max_cells * cc.delta:
                # the lower count never reached k: a finite support may hold fewer (then no k-th score)
                whole = self._cert_count(cc, -math.inf)
                if whole.hi < k:
                    raise IndexError(f"k={k} (1-based) is beyond the support (at most {whole.hi:,} sequences)")
            n, T = self._head()
            hi = min(hi, T) if n < k else hi  # fewer than k sequences score >= T
            return ThresholdResult(lo, exact=False, method="certified", ci_lo=lo, ci_hi=max(lo, hi),
                                   extra=self._cert_extra(cc))

        return self.regime(
            lambda: self.seek.threshold(k), ThresholdResult,
            sub_support=lambda x: ThresholdResult(x, exact=False, method="bracket", ci_lo=x, ci_hi=0.0),
            certified=certified, estimate=lambda est, head: est.threshold(k, head=head),
        )

    # ------------------------------------------------------------------ masses
    def mass_above(self, t: float) -> MassBracket:
        """``lo <= P(s(X) >= t) <= hi``: float rounding only; ``branch_cap`` adds the skipped mass
        to ``hi``; past a resource cap the certified DP's bracket, else ``[mass built, 1]``."""
        seek = self.seek
        if t > 0:
            return MassBracket(0.0, 0.0)

        def sub_support(idx: ExactIndex) -> MassBracket:
            m = idx.mass_ge(t)
            dropped = seek.dropped_mass(t)
            if dropped <= 0:  # nothing skipped: exact to float rounding
                return m
            return MassBracket(m.lo, _mass_hi(m.hi, dropped), exact=False, method="bracket")

        return self.regime(
            lambda: seek.ensure_score(t), lambda idx: idx.mass_ge(t), t=t, sub_support=sub_support,
            certified=lambda cc: self._cert_mass(cc, t),
            bracket=lambda idx: MassBracket(*((idx.total_mass().lo, _mass_hi(idx.total_mass().hi)) if idx.T >= t
                                              else (0.0, 1.0))),
        )

    def nucleus_size(self, p: float) -> CountDPTopPResult:
        """Smallest head with mass ``>= p``: exact up to float rounding; ``truncated`` past a cap;
        ``reachable=False`` when the whole support holds less than ``p`` (``None``: a cap stopped the
        build before it could tell)."""
        r = self._nucleus(p)
        if self._capped:
            r = self._sub_support_nucleus(r, p)
        if r.truncated:
            reachable = False if r.mass_hi < p and self._whole_support_built() else None
            return CountDPTopPResult(**{**r.as_dict(), "reachable": reachable, "point_method": None})
        return r

    def _sub_support_nucleus(self, r: CountDPTopPResult, p: float) -> CountDPTopPResult:
        """Under ``branch_cap`` the sub-support's nucleus ``r`` bounds the true one from above; the
        skipped mass ``S`` above its boundary bounds it from below: the true top ``k < size`` all
        score above that boundary, so they hold at most the sub-support's top ``k`` plus ``S``, and
        the true nucleus is at least the sub-support's nucleus of ``p - S``."""
        S = self.seek.dropped_mass(r.threshold)
        if S <= 0:
            return r
        lo = min(r.size_lo, self._nucleus(p - S).size_lo) if p > S else 1
        hi = r.size_hi
        return CountDPTopPResult(size=lo, size_lo=lo, size_hi=hi, mass_lo=r.mass_lo, mass_hi=_mass_hi(r.mass_hi, S),
                                 threshold=r.threshold, p=p, truncated=r.truncated, exact=hi == lo and not r.truncated)

    def _whole_support_built(self) -> bool:
        """Every sequence of the support is in the index (no cap and no depth floor left any out)."""
        seek = self.seek
        return (not self._capped and seek.at_depth_floor
                and not seek.tree.completions_beyond(seek.limits.max_depth_bits))

    def _nucleus(self, p: float) -> CountDPTopPResult:
        try:
            idx, truncated = self.seek.ensure_mass(p)
        except BudgetExceeded:
            if self.seek.current is not None:  # pragma: no cover - ensure_mass answers from a built index
                raise
            # a cap refused the very first build: nothing is indexed, the nucleus lies somewhere in the support
            n = 1 if p > 0 else 0
            return CountDPTopPResult(size=n, size_lo=n, size_hi=None, mass_lo=0.0, mass_hi=1.0, threshold=0.0,
                                     p=p, truncated=True, exact=False)
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
        m = _top_mass(idx, k_lo, thr)
        if k_hi is None and idx.total_mass().lo >= p:
            k_hi = idx.N  # all the items together certainly hold p
        if k_hi is None:  # the items may hold less than p (float rounding, or a cap left the rest out)
            if truncated or not self._whole_support_built():  # the nucleus may lie past the items
                return CountDPTopPResult(size=k_lo, size_lo=k_lo, size_hi=None, mass_lo=m.lo, mass_hi=m.hi,
                                         threshold=thr, p=p, truncated=True, exact=False)
            # the whole support, whose mass rounding cannot tell from p: all of it, if any set holds p
            return CountDPTopPResult(size=k_lo, size_lo=k_lo, size_hi=idx.N, mass_lo=m.lo, mass_hi=m.hi,
                                     threshold=thr, p=p, truncated=False, exact=False, reachable=None)
        return CountDPTopPResult(size=k_lo, size_lo=k_lo, size_hi=k_hi, mass_lo=m.lo, mass_hi=m.hi,
                                 threshold=thr, p=p, truncated=False, exact=k_lo == k_hi)

    # ------------------------------------------------------------------ ranks
    def rank(self, s: float) -> DensityRankResult:
        """Rank (``#{x : s(x) > s}``) and cumulative mass of a sequence of finite score ``s``: exact;
        a bracket under ``branch_cap``; past a resource cap the certified DP's bracket, else an
        estimate when allowed, else a certified bracket."""
        seek = self.seek
        trunc = seek.tree.depth_truncated or self._capped

        def indexed(idx: ExactIndex, capped: bool = False) -> DensityRankResult:
            lo = idx.count_gt(s)
            m = idx.mass_ge(s)
            hi: int | float = lo
            c_hi = m.hi
            if capped:
                hi = lo + seek.dropped_bound(s)
                c_hi = _mass_hi(m.hi, seek.dropped_mass(s))
            exact = hi == lo
            return DensityRankResult(
                rank=lo, cumulative=m.mid if exact else 0.5 * (m.lo + c_hi), log_prob=s, exact=exact,
                method="exact" if exact else "bracket", rank_lo=lo, rank_hi=hi,
                cumulative_lo=m.lo, cumulative_hi=c_hi, truncated=seek.tree.depth_truncated or not exact,
            )

        def certified(cc: CertifiedCounter) -> DensityRankResult:
            return self._cert_rank(cc, s, trunc)

        def bracket(idx: ExactIndex) -> DensityRankResult:
            lo = idx.N if idx.T > s else 0  # every indexed sequence is strictly above s
            hi = mass_count_bound(s) - 1
            m = idx.total_mass() if idx.T > s else MassBracket(0.0, 0.0)
            # the sequence's own value fl(exp(s)) (as every exact sum defines it), the sum rounded down
            c_lo = min(1.0, (m.lo + float(values(np.array([s]))[0])) * (1 - 2.0**-52))
            c_hi = _mass_hi(m.hi)
            return DensityRankResult(
                rank=lo, cumulative=0.5 * (c_lo + c_hi), log_prob=s, exact=False, method="bracket",
                rank_lo=lo, rank_hi=hi, cumulative_lo=c_lo, cumulative_hi=c_hi, truncated=trunc,
            )

        limit = self._rank_limit()  # the DP answers past it
        return self.regime(
            lambda: seek.ensure_score(s, limit), indexed, t=s, sub_support=lambda idx: indexed(idx, capped=True),
            certified=certified, estimate=lambda est, head: est.rank(s, head=head), bracket=bracket, rank_limit=limit,
        )

    def _cert_rank(self, cc: CertifiedCounter, s: float, trunc: bool) -> DensityRankResult:
        """The certified rank record of score ``s``; its cumulative mass computed when read.

        ``method='certified'`` always (the regime that answered); ``exact=True`` only when both
        brackets are single values: both ends are certified bounds of the truth, so equal ends are
        the truth itself (the rank an integer, the mass a real between equal floats)."""
        r = self._cert_count(cc, math.nextafter(s, math.inf))  # s(x) > s: s(x) >= the next float
        if not r.exact:  # the mass DPs are built only when the cumulative mass is read
            return DensityRankResult.lazy_cumulative(
                self._lazy_mass(cc, s), rank=r.lo, log_prob=s, exact=False, method="certified",
                rank_lo=r.lo, rank_hi=r.hi, truncated=trunc, extra=self._cert_extra(cc))
        m = self._cert_mass(cc, s)
        exact = r.exact and m.exact
        return DensityRankResult(
            rank=r.lo, cumulative=m.mid, log_prob=s, exact=exact, method="certified",
            rank_lo=r.lo, rank_hi=r.hi, cumulative_lo=m.lo, cumulative_hi=m.hi, truncated=trunc,
            extra=self._cert_extra(cc))

    def ranks(self, scores: Sequence[float], *, deepen: bool = False) -> list[DensityRankResult]:
        """:meth:`rank` of many finite scores. ``deepen``: each exactly as :meth:`rank` (builds within
        the caps). Otherwise no build: a score the exact index built so far reaches is ranked exactly
        (as :meth:`rank`), a deeper one of a finite-state model by the certified DP, made once to the
        deepest score (then each is two lookups; :meth:`CertifiedCounter.prepare_ranks`); without the
        DP, as :meth:`rank`."""
        scores = [float(x) for x in scores]
        built = self.seek.tree.built
        deep = [x for x in scores if x < built]
        cc = self._certified_counter(min(deep)) if deep and not deepen else None
        if cc is None:
            return [self.rank(x) for x in scores]
        lo = min(deep)
        cc.prepare_ranks(math.nextafter(lo, math.inf))  # the count DPs to the deepest cell, once
        trunc = self.seek.tree.depth_truncated or self._capped
        return [self.rank(x) if x >= built else self._cert_rank(cc, x, trunc) for x in scores]

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


def _top_mass(idx: ExactIndex, k: int, thr: float) -> MassBracket:
    """The mass of the top ``k`` items, the ``k``-th scoring ``thr``: ``mass_ge(thr)`` less the items
    tied at ``thr`` past the ``k``-th (each worth ``fl(exp(thr))``, so which of them does not matter)."""
    m = idx.mass_ge(thr)
    extra = idx.count_ge(thr) - k
    if extra <= 0:
        return m
    v = float(values(np.array([thr]))[0])  # an item's value, as every exact sum defines it
    u = 2.0**-52
    ex_lo, ex_hi = extra * v * (1 - u), extra * v * (1 + u)  # one rounding of the product
    return MassBracket(max(0.0, (m.lo - ex_hi) * (1 - 2 * u)), (m.hi - ex_lo) * (1 + 2 * u))


def _mass_hi(known: float, more: float = math.inf) -> float:
    """An upper end of a mass: ``known`` (a sound upper end of the mass built) plus ``more`` (one of
    the rest), at most the whole support's, 1, unless what was built already holds more than 1 (float
    rounding of rows normalized to a tolerance: the mass summed is then the truth, never cut below)."""
    return min(max(1.0, known), known + more)


class _NoIndex:
    """What the bracket rungs read when a cap refused the very first build: no sequence indexed
    (``N = 0``, above ``T = inf``, mass 0), so each bracket is the one that knows nothing."""

    N = 0
    T = math.inf
    bucketed = False

    @staticmethod
    def total_mass() -> MassBracket:
        return MassBracket(0.0, 0.0)


_NOTHING = _NoIndex()


def _stamp(r: R, method: str) -> R:
    """A record of a rung past the cap: a :class:`MassBracket` that says ``exact`` while its ends
    differ gets the rung's ``method`` (its point is then recomputed by the one rule)."""
    if isinstance(r, MassBracket) and r.exact and r.lo != r.hi:
        return MassBracket(r.lo, r.hi, exact=False, method=method)  # type: ignore[return-value]
    return r
