"""The envelope index: approximate count, threshold, rank and unrank at depths the exact tree cannot reach.

Model. At every depth ``d`` the envelope holds POOLED step tables: the real model's tables at a few
contexts of that depth, averaged (each context weighs ``1 / n``). :class:`AREnvelopeIndex` pools
``n_paths`` sampled contexts (or the prefixes of ``calibration_sequences``) into one table per depth
and treats the steps as independent: the mean-field envelope. :class:`arenum.beyond.lattice.LatticeEnvelopeIndex`
keeps one pooled table per (depth, cluster of the last token), each entry carrying the cluster it
leads to. Both are an :class:`EnvelopeBase`: a lattice of states (one state for the mean-field
envelope) whose score distributions compose by convolution, ``P_0 = delta_0`` at the start state,
``P_{d+1}[c'] = sum_c P_d[c] * C_d[c -> c']``; the total is ``P_L`` (fixed length ``L``) or
``sum_d P_d * E_d`` (terminating, ``E`` the pooled ``eos`` steps).

Arithmetic: :mod:`arenum.beyond.atoms` (exact atoms while few, a grid past ``MAX_PAIRS`` pairs). Atoms below
the budget (``-budget_bits * ln 2``) are dropped; the budget grows on demand (:meth:`ensure_bits`).

Guarantees. When the model's table depends only on the state (the depth, for the mean-field
envelope; the depth and the last token's cluster, for the lattice) and the atoms are exact:
``count``, ``threshold``, ``rank_bracket`` and ``mass_above`` equal the exact index's (same floats),
and ``unrank`` returns exactly the exact index's sequence (the library's order: descending score,
shorter first, then table positions), by walking the real model and counting, at each entry, the
completions whose left-to-right float sum equals the rank's score. This exact walk is used whenever
every pooled table agreed across its contexts (``tables_agree``) and the atoms are exact. For any other
model the answers are ESTIMATES without an interval (``method='envelope'``, ``exact=False``): the error
depends on how much the steps depend on what the state forgets; ``docs/envelope.md`` and
``docs/estimates.md`` report measured errors.

Estimated unrank. A rank maps to a fine bucket ``B`` and an offset inside it; the walk goes down the
REAL model (one forward per step, memoized): every table entry gets the envelope's count of its
completions landing in ``B``, the offset picks the entry and is rescaled to the next level's counts.
Returned sequences are real, with exact log-probs. Where the walk ends outside ``B`` (the estimate
promised completions the real model lacks), a count-guided depth-first search (``SEARCH_FORWARDS``
tables at most) looks for a real sequence in ``B``, so ``unrank(i)`` lies inside its own
``rank_bracket`` (bucket positions here) wherever one is within reach; else the nearest entry's,
its ``rank_bracket`` widened to take the rank in (kept per such sequence): an answer always lies
inside its own bracket. Only bucket order is guaranteed, as far as the counts are right; not COMPLETE. Ranks are integers
end to end (:mod:`arenum.beyond.ranks`). It sets
``exact_order = False`` and ``dropped_upper = inf``, so a :class:`arenum.RescoredIndex` built on it
orders by it but never certifies.

Cost: at most ``n_paths`` forwards per depth (per state, for the lattice) to build, ``O(L)`` forwards
per ``unrank`` (plus at most ``SEARCH_FORWARDS`` when its walk misses the bucket), none per
``count``/``threshold``/``mass_above``.

This module gives no confidence intervals: :mod:`arenum.beyond.estimate` does.
"""
from __future__ import annotations

import math
import threading
from fractions import Fraction
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from .._guard import locked
from .._validate import exact_int, finite_float, LN2
from .ranks import calibration_ids, first_above, int_cum, rank_index
from .atoms import GRID_PER_BUCKET, MAX_PAIRS, Dist, StepTable, convolve, exact_counts, mix_all
from ..exact import Quantizer
from ..results import CountResult, MassBracket, RankBracket, SequenceResult, ThresholdResult
from ..support import Support

if TYPE_CHECKING:
    from ..step import StepOracle

__all__ = ["AREnvelopeIndex", "EnvelopeBase", "StepTable", "MAX_PAIRS", "GRID_PER_BUCKET"]

_MAX_BUDGET_BITS = 4096.0
SEARCH_FORWARDS = 256  # tables an estimated unrank may read to find a sequence in its bucket
_START = -1
"""State of the empty prefix."""


class EnvelopeBase:
    """The query surface shared by the envelope indexes (module docstring). A subclass fills depth
    ``d``'s tables in :meth:`_sample_depth` (calling :meth:`_pool`) and maps tokens to the state they
    lead to in :meth:`_next_states`.

    ``count(t)`` ~ ``sum(1 for x in support if score(x) >= t)``, ``threshold(k)`` ~ the ``k``-th
    largest score, ``unrank(i)`` ~ ``sorted(support, key=score, reverse=True)[i]``: exact where the
    module docstring says, else ESTIMATES (``method='envelope'``).
    """

    exact_order = False
    """Only bucket order in general (exact order only where the module docstring says)."""
    dropped_upper = math.inf
    """The envelope may never return some sequences (it is not known to be complete)."""

    def _setup(self, oracle: Any, support: Support | None, quantizer: Quantizer | None, n_paths: int,
               seed: int | None, lock: "threading.RLock | None") -> None:
        if hasattr(oracle, "envelope_index"):  # an AutoregressiveEnumerable, as the seed system takes
            ar = oracle
            oracle, support, quantizer, lock = ar._oracle, ar.support, ar.quantizer, ar._lock
        if not isinstance(support, Support) or not isinstance(quantizer, Quantizer):
            raise TypeError("give an AutoregressiveEnumerable, or a step oracle with its Support and Quantizer")
        self._lock = lock if lock is not None else threading.RLock()
        self.n_paths = exact_int("n_paths", n_paths, minimum=1)
        self._oracle = oracle
        self.quantizer: Quantizer = quantizer
        self.seed = seed
        self._rng = np.random.default_rng(seed)
        self.support = support
        self.fixed_len = support.fixed_len
        self.eos_id = support.eos_id
        self.cap = support.cap
        self.g_nats = self.quantizer.fine_width_bits / GRID_PER_BUCKET * LN2
        self._tabs: list[dict[int, StepTable]] = []
        self._C: list[dict[int, dict[int, Dist]]] = []
        self._E: list[dict[int, Dist]] = []
        self.forwards = 0
        self.budget_bits = 0.0
        self._placed: dict[tuple, tuple[int, int]] = {}  # (lo, hi) of sequences unrank placed off their bucket
        self._total = Dist.empty()

    # ------------------------------------------------------------------ subclass hooks
    def _sample_depth(self, d: int) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def _next_states(self, ids: np.ndarray) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def _fetch(self, prefixes: list[tuple]) -> list[tuple[np.ndarray, np.ndarray]]:
        """Full sorted tables of id-prefixes, one batched pass; counts the forwards."""
        o = self._oracle
        f0 = o.stats.forwards
        heads = o.fetch_heads([o.tokens(p) for p in prefixes], np.full(len(prefixes), -np.inf))
        off = np.concatenate(([0], np.cumsum(heads.lens)))
        self.forwards += o.stats.forwards - f0
        return [(heads.ids[off[r]: off[r + 1]], heads.lps[off[r]: off[r + 1]]) for r in range(len(prefixes))]

    def _pool(self, tables: list[tuple[np.ndarray, np.ndarray]], n: int) -> StepTable:
        """Pool ``tables`` (one per context; ``n`` contexts weigh ``1 / n`` each) into a StepTable."""
        return StepTable.pool(tables, n, self.eos_id, self._next_states)

    def _set_depth(self, d: int, tabs: dict[int, StepTable]) -> None:
        """Record depth ``d``'s pooled tables and their distributions by next state."""
        assert d == len(self._tabs)
        self._tabs.append(tabs)
        C: dict[int, dict[int, Dist]] = {}
        E: dict[int, Dist] = {}
        for c, t in tabs.items():
            C[c] = {int(c2): Dist.of(t.cv[t.cn == c2], t.cw[t.cn == c2]) for c2 in np.unique(t.cn)}
            E[c] = Dist.of(t.ev, t.ew)
        self._C.append(C)
        self._E.append(E)

    # ------------------------------------------------------------------ building
    @property
    def floor(self) -> float:
        """Lowest score (nats) the envelope's distributions hold: ``-budget_bits * ln 2``."""
        return -self.budget_bits * LN2 - 1e-9

    def _depth_limit(self) -> int:
        return self.fixed_len if self.fixed_len is not None else self.cap

    @property
    def tables_agree(self) -> bool:
        """Every pooled table was the same at all its contexts (as for a model whose table depends
        only on the state): with exact atoms, the answers are then the exact index's if the model is
        what the envelope assumes (agreement is evidence, not proof; with one context, vacuous)."""
        return all(t.agree for tabs in self._tabs[: self._depth] for t in tabs.values())

    @locked
    def _build(self, budget_bits: float) -> None:
        """(Re)compute the totals and suffix distributions for ``budget_bits``, sampling more depths
        only where a prefix within the budget can reach them."""
        self.budget_bits = min(float(budget_bits), _MAX_BUDGET_BITS)
        floor, g, fixed = self.floor, self.g_nats, self.fixed_len is not None
        Dmax = self._depth_limit()
        P = {_START: Dist.point()}
        total = Dist.empty()
        self._depth = 0
        for d in range(Dmax):
            if d >= len(self._tabs):
                self._sample_depth(d)
            last = d == Dmax - 1
            nxt: dict[int, list[Dist]] = {}
            ends = [total]
            mp = MAX_PAIRS // max(1, sum(len(self._C[d].get(c, ())) for c in P))  # per convolution
            for c, Pc in P.items():
                if not fixed:
                    ends.append(convolve(Pc, self._E[d].get(c, Dist.empty()), floor, g, mp))
                if not fixed and last:
                    continue
                for c2, D in self._C[d].get(c, {}).items():
                    x = convolve(Pc, D, floor, g, mp)
                    (ends if fixed and last else nxt.setdefault(c2, [])).append(x)
            total = mix_all(ends, g)
            lim = MAX_PAIRS // max(1, len(nxt))  # all states together hold at most MAX_PAIRS exact atoms
            P = {c2: x for c2, parts in nxt.items() if len(x := mix_all(parts, g, lim))}
            self._depth = d + 1
            if not P:
                break
        self._total = total
        self.pruned = self._pruned_any()
        # suffix distributions for the walk: S[d][c] = completions from depth d in state c
        D = self._depth
        S: list[dict[int, Dist]] = [{} for _ in range(D)]
        for d in range(D - 1, -1, -1):
            mp = MAX_PAIRS // max(1, sum(len(x) for x in self._C[d].values()))
            for c in self._C[d]:
                parts = [] if fixed else [self._E[d][c]]
                if fixed or d + 1 < Dmax:
                    parts += [convolve(Dd, self._suffix(S, d + 1, c2), floor, g, mp)
                              for c2, Dd in self._C[d][c].items()]
                S[d][c] = mix_all(parts, g)
        self._S = S
        self._Scum = [{c: s.cum() for c, s in Sd.items()} for Sd in S]
        w = self.quantizer.fine_width_bits
        fb = np.floor((-total.v / LN2) / w).astype(np.int64) if len(total) else np.zeros(0, np.int64)
        self._fb0 = int(fb.min()) if fb.size else 0
        counts = np.bincount(fb - self._fb0, weights=total.w) if fb.size else np.zeros(0)
        self._bucket_cum = np.cumsum(counts)

    def _suffix(self, S: list[dict[int, Dist]], d: int, c: int) -> Dist:
        if d >= self._depth:
            return Dist.point() if self.fixed_len is not None else Dist.empty()
        return S[d].get(c, Dist.empty())

    def _pruned_any(self) -> bool:
        """Whether the envelope's support goes on below the budget (from the per-depth minima)."""
        Dmax = self._depth_limit()
        if self._depth < Dmax:
            return True
        lo = low = 0.0
        for d in range(Dmax):
            tabs = self._tabs[d].values()
            cmin = min((float(t.cv.min()) for t in tabs if t.cv.size), default=None)
            emin = min((float(t.ev.min()) for t in tabs if t.ev.size), default=None)
            if self.fixed_len is not None:
                lo += cmin if cmin is not None else 0.0
                low = lo
            else:
                if emin is not None:
                    low = min(low, lo + emin)
                if cmin is not None:
                    lo += cmin
        return low < self.floor

    def _ensure_budget(self, bits: float) -> None:
        if bits > self.budget_bits:
            if self.budget_bits >= _MAX_BUDGET_BITS:
                raise ValueError(f"the envelope's budget cannot exceed {_MAX_BUDGET_BITS} bits")
            self._build(max(bits, self.budget_bits * 1.5))

    @locked
    def ensure_bits(self, bits: float) -> "EnvelopeBase":
        """Deepen in place so that every score down to ``-bits * ln 2`` is held; returns ``self``.
        Reuses every forward already made."""
        b = finite_float("bits", bits)
        if b <= 0:
            raise ValueError(f"bits must be > 0, got {bits!r}")
        if min(b, _MAX_BUDGET_BITS) > self.budget_bits:
            self._build(min(b, _MAX_BUDGET_BITS))
        return self

    def _ensure_rank(self, i: int) -> None:
        while (self._bucket_cum.size == 0 or not float(self._bucket_cum[-1]) > i) and self.pruned \
                and self.budget_bits < _MAX_BUDGET_BITS:
            self._build(min(_MAX_BUDGET_BITS, max(self.budget_bits * 1.5, self.budget_bits + 8.0)))

    # ------------------------------------------------------------------ queries
    @property
    def exact_atoms(self) -> bool:
        """The totals are exact sums of the pooled step values (no grid rounding happened)."""
        return self._total.exact

    def size(self) -> float:
        """Envelope count of the sequences within the current budget."""
        return float(self._bucket_cum[-1]) if self._bucket_cum.size else 0.0

    def total(self) -> float:
        """Same as :meth:`size` (the seed system's name)."""
        return self.size()

    def _extra(self) -> dict[str, Any]:
        return {"n_paths": self.n_paths, "budget_bits": self.budget_bits, "exact_atoms": self.exact_atoms,
                "tables_agree": self.tables_agree}

    def _result_count(self, c: float, t: float) -> CountResult:
        hi = math.exp(-t) if t > -math.inf and -t < 700 else math.inf
        return CountResult(c, exact=False, method="envelope", estimate=c, ci_lo=0, ci_hi=hi,
                           forwards=self.forwards, extra={**self._extra(), "interval": "none (certified mass bound)"})

    @locked
    def count(self, min_log_prob: float) -> CountResult:
        """Envelope estimate of ``#{x : s(x) >= min_log_prob}`` (no forward beyond building).

        ``ci_lo``/``ci_hi`` are only the certified ``[0, e^{-t}]``: the envelope has no interval."""
        t = finite_float("min_log_prob", min_log_prob)
        if t > 0:
            return self._result_count(0.0, t)
        self._ensure_budget(-t / LN2)
        return self._result_count(self._total.count_ge(t), t)

    @locked
    def mass_above(self, min_log_prob: float) -> MassBracket:
        """Envelope value of ``sum(exp(s(x)) for x in support if s(x) >= min_log_prob)`` as a
        :class:`MassBracket` (``method='envelope'``, ``exact=False``): ``lo``/``hi`` bracket the
        envelope's own mass to float rounding; it is the true mass where the module docstring says."""
        t = finite_float("min_log_prob", min_log_prob, allow_neg_inf=True)
        if t > 0:
            return MassBracket(0.0, 0.0, exact=False, method="envelope")
        if t > -math.inf:
            self._ensure_budget(-t / LN2)
        m = self._total.mass_ge(t)
        r = (len(self._total) + self._depth + 2) * 2.0**-52
        return MassBracket(m * (1 - r), min(1.0, m * (1 + r)), exact=False, method="envelope")

    @locked
    def threshold(self, rank: int) -> ThresholdResult:
        """Envelope estimate of the log-prob of the ``rank``-th most probable sequence (1-based)."""
        k = exact_int("rank", rank, minimum=1)
        self._ensure_rank(k - 1)
        cum = self._total.cum()
        j = first_above(cum, k - 1)  # first atom whose cumulative count reaches k
        if j >= cum.size:
            if not self.pruned:
                raise IndexError(f"rank {k} is beyond the envelope's support ({self.size():.6g} sequences)")
            j = cum.size - 1
        x = float(self._total.v[j])
        return ThresholdResult(x, exact=False, method="envelope", estimate=x, ci_lo=-math.inf, ci_hi=0.0,
                               forwards=self.forwards, extra=self._extra())

    @locked
    def rank_bracket(self, sequence: Sequence[Any]) -> RankBracket:
        """Envelope estimate of ``sum(1 for x in support if s(x) > s(sequence))`` and the mass at or
        above it; the sequence's own log-prob is exact (one forward per step, memoized).

        A :class:`RankBracket` (unpacks as ``(rank_lo, rank_hi)``), integer positions: where exact
        (exact atoms, tables that agree) from the count strictly above the score to the count at or
        above, less one; elsewhere the score's fine bucket's positions (only bucket order is
        guaranteed): the envelope's positions, not an interval. ``rank`` is the lower one
        (``point_method='envelope_order'``). ``exact=False``, ``method='envelope'``."""
        seq = tuple(sequence)
        s = self._score(seq)
        if s == -math.inf:
            raise ValueError(f"sequence {seq!r} is outside the support or has probability 0; its rank is undefined")
        above, hi = self._positions(seq, s)
        m = self._total.mass_ge(s)
        return RankBracket(rank=above, cumulative=m, log_prob=s, exact=False, method="envelope",
                                 rank_lo=above, rank_hi=hi, cumulative_lo=m, cumulative_hi=m,
                                 extra=self._extra(), point_method="envelope_order")

    def _positions(self, seq: tuple, s: float, i: int | None = None) -> tuple[int, int]:
        """``(rank_lo, rank_hi)`` of :meth:`rank_bracket`: the score's positions, widened to take in every
        rank :meth:`unrank` returned ``seq`` at (``_placed``); ``i``: returned now, for that rank."""
        self._ensure_budget(-s / LN2 + 1e-9)
        if self.exact_atoms and self.tables_agree:
            above, at = int(self._total.count_gt(s)), int(self._total.count_ge(s))
        else:
            above, at = self._bucket_positions(s)
        lo, hi = self._placed.get(seq, (above, max(above, at - 1)))
        lo, hi = min(lo, above), max(hi, above, at - 1)
        if i is not None and not lo <= i <= hi:
            lo, hi = self._placed[seq] = (min(lo, i), max(hi, i))
        return lo, hi

    def _score(self, seq: tuple) -> float:
        if not self.support.contains(seq):
            return -math.inf
        o = self._oracle
        o.table(())  # decides the token mode before ids are looked up
        ids = o.ids_of(seq)
        s = 0.0
        for t in range(len(seq)):
            tid, lp = o.table(seq[:t])
            hit = np.flatnonzero(tid == ids[t]) if ids[t] is not None else np.zeros(0, np.int64)
            if hit.size == 0:
                return -math.inf
            s = s + float(lp[hit[0]])
        return s

    def _bucket_positions(self, s: float) -> tuple[int, int]:
        """``(first, end)``: the ranks ``i`` with ``cum[b-1] <= i < cum[b]``, ``b`` the bucket of ``s``."""
        cum = self._bucket_cum
        b = int(math.floor((-s / LN2) / self.quantizer.fine_width_bits)) - self._fb0
        if cum.size == 0 or b < 0:
            return 0, 0
        b = min(b, cum.size - 1)
        lo = math.ceil(float(cum[b - 1])) if b > 0 else 0
        return lo, max(lo, math.ceil(float(cum[b])))

    def bucket_of_rank(self, i: int) -> tuple[int, float]:
        """``(fine bucket, offset)`` of rank ``i``: the first bucket whose cumulative count passes ``i``
        (exactly, at any size); the offset is ``i + 0.5`` measured from the bucket's start."""
        i = rank_index(i)
        self._ensure_rank(i)
        cum = self._bucket_cum
        if cum.size == 0 or not float(cum[-1]) > i:
            full = all(t.same_size for tabs in self._tabs[: self._depth] for t in tabs.values())
            if not self.pruned and full:  # else the real support may be larger than the estimate
                raise IndexError(f"rank {i} is beyond the support ({self.size():.6g} sequences)")
            b = int(cum.size - 1)
        else:
            b = first_above(cum, i)
        start = Fraction(float(cum[b - 1])) if b else Fraction(0)
        return self._fb0 + b, float(i - start) + 0.5

    @locked
    def unrank(self, i: int) -> SequenceResult:
        """A real sequence for rank ``i`` and its exact log-prob (``IndexError`` past the support):
        the exact index's own sequence where the module docstring says (``method='exact_order'``),
        else one in the rank's fine bucket wherever the envelope's counts are right
        (``method='envelope'``). Cost: one forward per step (memoized)."""
        fb, o = self.bucket_of_rank(i)
        i = int(i)
        if self.exact_atoms and self.tables_agree:
            r = self._unrank_exact(i)
            if r is not None:
                self._positions(r[0], r[1], i)
                return SequenceResult(r[0], r[1], exact=False, method="exact_order", rank=i)
        lo, hi = self.quantizer.bucket_log_prob_bounds(fb)
        seq, lp = self._walk(lo, hi, o, self._bucket_count(fb))
        if not lo < lp <= hi:  # the walk missed the bucket: look for a real sequence in it
            seq, lp = self._search(lo, hi, i) or (seq, lp)
        self._positions(seq, lp, i)  # none found: the nearest, its bracket widened to take rank i in
        return SequenceResult(seq, lp, exact=False, method="envelope", rank=i)

    @locked
    def seek(self, i: int) -> SequenceResult:
        """Same as :meth:`unrank` (the seed system's name for the rank lookup)."""
        return self.unrank(i)

    @locked
    def slice(self, start: int, k: int) -> list[SequenceResult]:
        """``[unrank(i) for i in range(start, start + k)]`` (stopping at the end of the support)."""
        start = exact_int("start", start, minimum=0)
        k = exact_int("k", k, minimum=0)
        out = []
        for i in range(start, start + k):
            try:
                out.append(self.unrank(i))
            except IndexError:
                break
        return out

    def _bucket_count(self, fb: int) -> float:
        b = fb - self._fb0
        cum = self._bucket_cum
        return float(cum[b] - (cum[b - 1] if b > 0 else 0.0))

    # ------------------------------------------------------------------ the estimated walk
    def _walk(self, lo: float, hi: float, o: float, expected: float) -> tuple[tuple, float]:
        o_ids: list[int] = []
        s = 0.0
        oracle = self._oracle
        Dmax = self._depth_limit()
        for d in range(Dmax):
            ids, lps = oracle.table(oracle.tokens(o_ids))
            x = s + lps
            term = ids == self.eos_id if self.eos_id is not None else np.full(ids.size, d == Dmax - 1)
            st = self._next_states(ids)
            c = self._counts(d, x, term, st, lo, hi)
            tot = float(c.sum())
            if tot <= 0:
                j = self._nearest(x, term, st, d, lo, hi)
                o = 0.0
            else:
                o = o * tot / expected if expected > 0 else 0.0
                cum = np.cumsum(c)
                j = int(np.searchsorted(cum, o, side="right"))
                if j >= c.size:  # o beyond the counts (overflow rank): last entry with a count
                    j = int(np.flatnonzero(c > 0)[-1])
                    o = c[j] * (1 - 1e-12)
                else:
                    o = o - (cum[j - 1] if j else 0.0)
                expected = float(c[j])
            o_ids.append(int(ids[j]))
            s = s + float(lps[j])
            if term[j]:
                break
        return oracle.tokens(o_ids), s

    def _counts(self, d: int, x: np.ndarray, term: np.ndarray, st: np.ndarray, lo: float, hi: float) -> np.ndarray:
        """The envelope's count of the completions in ``(lo, hi]`` through each entry of a depth-``d`` table."""
        c = np.zeros(x.size)
        c[term] = ((x[term] > lo) & (x[term] <= hi)).astype(float)
        for c2 in np.unique(st[~term]):
            m = ~term & (st == c2)
            S = self._suffix(self._S, d + 1, int(c2))
            if len(S):
                cum = self._Scum[d + 1][int(c2)] if d + 1 < self._depth else S.cum()
                c[m] = S.count_in(lo - x[m], hi - x[m], cum)
        return c

    def _search(self, lo: float, hi: float, i: int) -> tuple[tuple, float] | None:
        """A real sequence with score in ``(lo, hi]`` (``None`` if none within ``SEARCH_FORWARDS``
        tables), depth first down the entries in an order drawn by their envelope completions in the
        bucket (seeded by the rank ``i``, so that the ranks of one bucket spread over its sequences)."""
        rng = np.random.default_rng(i % (1 << 63))
        oracle = self._oracle
        Dmax = self._depth_limit()
        stack: list[tuple[list, float, int]] = [([], 0.0, 0)]
        for _ in range(SEARCH_FORWARDS):
            if not stack:
                return None
            path, s, d = stack.pop()
            ids, lps = oracle.table(oracle.tokens(path))
            x = s + lps
            term = ids == self.eos_id if self.eos_id is not None else np.full(ids.size, d == Dmax - 1)
            hit = np.flatnonzero(term & (x > lo) & (x <= hi))
            if hit.size:
                j = int(hit[rng.integers(hit.size)])
                return oracle.tokens(path + [int(ids[j])]), s + float(lps[j])
            if d + 1 >= Dmax:
                continue
            c = self._counts(d, x, term, self._next_states(ids), lo, hi)
            live = np.flatnonzero(~term & (c > 0))
            keys = np.log(c[live]) + rng.gumbel(size=live.size)  # a draw in proportion to the counts
            for j in live[np.argsort(keys, kind="stable")]:  # the first drawn is pushed last: popped first
                stack.append((path + [int(ids[j])], s + float(lps[j]), d + 1))
        return None

    def _nearest(self, x: np.ndarray, term: np.ndarray, st: np.ndarray, d: int, lo: float, hi: float) -> int:
        """Entry whose reachable range ``[x + min S, x + max S]`` is nearest to the bucket ``(lo, hi]``."""
        top = np.where(term, x, -np.inf)
        bot = top.copy()
        for c2 in np.unique(st[~term]):
            S = self._suffix(self._S, d + 1, int(c2))
            m = ~term & (st == c2)
            if len(S):
                top[m], bot[m] = x[m] + S.v[0], x[m] + S.v[-1]
        dist = np.maximum(0.0, np.maximum(lo - top, bot - hi))
        return int(np.argmin(dist))

    # ------------------------------------------------------------------ the exact walk
    def _unrank_exact(self, i: int) -> tuple[tuple, float] | None:
        """The exact index's ``i``-th sequence, when the tables agree and the atoms are exact; ``None``
        if the real model contradicts the envelope (or the counting grows past ``MAX_PAIRS``)."""
        cum = int_cum(self._total.w)  # integers here (tables that agree weigh 1): exact at any size
        j = first_above(cum, i)
        if j >= cum.size:
            return None
        v = float(self._total.v[j])
        o = i - (int(cum[j - 1]) if j else 0)
        hits = self._exact_counts(np.zeros(1), np.full(1, _START, np.int64), 0, self._depth_limit(), v)
        if hits is None:
            return None
        by_len = int_cum(hits[0])  # shorter first
        k = first_above(by_len, o)
        if k >= by_len.size:
            return None
        o -= int(by_len[k - 1]) if k else 0
        length = k + 1
        oracle = self._oracle
        o_ids: list[int] = []
        s = 0.0
        for d in range(length):
            ids, lps = oracle.table(oracle.tokens(o_ids))
            x = s + lps
            eos = ids == self.eos_id if self.eos_id is not None else np.zeros(ids.size, bool)
            if d == length - 1:
                cnt = ((x == v) & (eos if self.eos_id is not None else True)).astype(float)
            else:
                cnt = np.zeros(ids.size)
                keep = np.flatnonzero(~eos)
                h = self._exact_counts(x[keep], self._next_states(ids[keep]), d + 1, length, v)
                if h is None:
                    return None
                cnt[keep] = h[:, length - 1]
            cc = int_cum(cnt)
            j = first_above(cc, o)
            if j >= cc.size:
                return None
            o -= int(cc[j - 1]) if j else 0
            o_ids.append(int(ids[j]))
            s = s + float(lps[j])
        return oracle.tokens(o_ids), s

    def _exact_counts(self, x: np.ndarray, st: np.ndarray, d0: int, stop: int, v: float) -> np.ndarray | None:
        return exact_counts(self._tabs[: self._depth], x, st, d0, stop, v, fixed_len=self.fixed_len,
                            terminating=self.eos_id is not None)

    def _check(self) -> None:
        """Assert internal invariants (for tests)."""
        for D in [self._total, *(x for Sd in self._S for x in Sd.values())]:
            assert (np.diff(D.v) < 0).all() and (D.w > 0).all()
        assert (np.diff(self._bucket_cum) >= -1e-9).all()


class AREnvelopeIndex(EnvelopeBase):
    """The mean-field envelope: one pooled step table per depth (module docstring). Built by
    ``enumerable.envelope_index(n_paths=64, seed=0, budget_bits=64.0)``, or, as in the seed system,
    ``AREnvelopeIndex(enumerable, n_paths=64)`` (sharing its forward cache).

    Contexts: ``n_paths`` sampled paths (a terminating model's paths skip ``eos``, so all of them
    reach every depth), or, with ``calibration_sequences``, the prefixes of those real sequences
    (each must be in the support: length ``max_len`` for a fixed-length model; ending in ``eos`` for
    a terminating one, whose paths are then continued by sampling past their end). Exact for
    prefix-independent (iid-step) models, estimates otherwise. Cost: at most ``n_paths`` forwards per
    depth to build, ``O(L)`` per ``unrank``.
    """

    def __init__(self, oracle: "StepOracle | Any", support: Support | None = None, quantizer: Quantizer | None = None,
                 *, n_paths: int = 64, seed: int | None = 0, budget_bits: float = 64.0,
                 lock: "threading.RLock | None" = None,
                 calibration_sequences: Sequence[Sequence[Any]] | None = None) -> None:
        b = finite_float("budget_bits", budget_bits)
        if b <= 0:
            raise ValueError(f"budget_bits must be > 0, got {budget_bits!r}")
        self._setup(oracle, support, quantizer, n_paths, seed, lock)
        forced: list[tuple] = []
        if calibration_sequences is not None:
            forced = calibration_ids(self._oracle, self.support, calibration_sequences)
            self.n_paths = len(forced)
        self._forced = forced or [()] * self.n_paths
        self._paths: list[tuple] = [()] * self.n_paths
        self._build(b)

    def _next_states(self, ids: np.ndarray) -> np.ndarray:
        return np.zeros(ids.size, np.int64)

    def _sample_depth(self, d: int) -> None:
        """Pool depth ``d``'s tables at every path's context (one batched pass), then move each path
        on: along its calibration sequence, else a non-eos token drawn in proportion to ``p``."""
        uniq = sorted(set(self._paths))
        pos = {p: i for i, p in enumerate(uniq)}
        tabs = self._fetch(uniq)
        per_path = [tabs[pos[p]] for p in self._paths]
        new_paths = []
        for p, f, (ids, lps) in zip(self._paths, self._forced, per_path):
            if self.eos_id is not None:
                keep = ids != self.eos_id
                ids, lps = ids[keep], lps[keep]
            if d < len(f):
                new_paths.append(p + (f[d],))
            elif ids.size:
                pr = np.exp(lps)
                j = int(np.searchsorted(np.cumsum(pr), self._rng.random() * pr.sum(), side="right"))
                new_paths.append(p + (int(ids[min(j, ids.size - 1)]),))
            else:
                new_paths.append(p)
        t = self._pool(per_path, self.n_paths)
        self._set_depth(d, {_START if d == 0 else 0: t})
        self._paths = new_paths

    def __repr__(self) -> str:
        return (f"AREnvelopeIndex(n_paths={self.n_paths}, budget_bits={self.budget_bits:g}, "
                f"size~{self.size():.4g}, exact_atoms={self.exact_atoms})")
