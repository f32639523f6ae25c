"""Certified brackets at any depth for finite-state models: a DP over (state, score cell).

Same as brute force over the whole support, bracketed: for a model with
:class:`~arenum.step.finite_state.FiniteStateTables`, :class:`CertifiedCounter` answers

- ``count_bracket(t)``: ``lo <= #{x : s(x) >= t} <= hi``;
- ``rank_bracket(s)``: ``lo <= #{x : s(x) > s} <= hi``;
- ``threshold_bracket(k)``: ``t_lo <= (the k-th largest score) <= t_hi``;
- ``mass_bracket(t)``: ``lo <= P(s(X) >= t) <= hi``,

for every ``t`` and ``k``, at any depth, with zero model forwards (the tables are the model).
Every answer is ``method='certified'``; it says ``exact`` only when its two ends meet: both are
certified bounds of the truth, so equal ends are the truth (e.g. a count or mass of 0 where no
sequence can reach ``t``).

How: every step's cost ``-log p`` (nats) is put on a grid of cell ``delta`` (a power of two, so
``cost / delta`` is exact), rounded UP for the lower DP and DOWN for the upper DP.  ``N[K, s]`` is
the number of completions from state ``s`` whose rounded cost is ``<= K`` cells (cumulative in K)::

    N[K, s] = [end cost of s <= K] + sum_j N[K - c(s, j), next(s, j)]

A completion whose rounded-up cost is ``<= K`` has true cost ``<= K delta``; one whose true cost is
``<= K delta`` has rounded-down cost ``<= K``.  So ``N_lo[K] <= #{cost <= K delta} <= N_hi[K]``.
The float64 score the engine sums left to right differs from the real sum of the same terms by at
most ``gamma = (cap + 2) 2**-52`` relative; the query cells absorb it (``K_lo = floor(T/delta
(1 - 3 gamma))``, ``K_hi = floor(T/delta (1 + 3 gamma))``).  The counts are float64: sums of
integers below ``2**53`` are exact; a cell at or above ``2**53`` is scaled by ``1 -/+ (n + 8) 2**-53``
(``n`` = terms summed into it) after it is summed, which covers its rounding, so the lower ends
stay below and the upper ends above the truth at every depth (``docs/certified.md`` has the proof).

Two sweeps, chosen per query (``mode`` in :attr:`CertifiedCounter.stats`):

- ``unbounded`` (terminating supports): ``K`` ascending, one pass, no length dimension.  Work
  ``O(E K)`` for ``E`` edges (state, token).  It counts completions of any length, so the upper
  end is sound as is; the lower end is sound while ``K`` is below the cheapest (rounded-up) path
  of ``cap`` tokens (a min-plus DP checks that), and beyond it the ``levels`` sweep answers.
- ``levels`` (fixed length, or a terminating cap that binds the lower end; the upper end only for a
  cap up to ``UPPER_LEVELS_MAX_CAP``): one sweep per length, ``O(cap E K)``.
  A terminating model forced into it (a short cycle of likely steps makes a ``cap``-token path
  cheap, e.g. a small ``max_len``) gets a ``RuntimeWarning`` with that cost when the sweep is first
  built, if it adds more than ``LEVELS_WARN_WORK`` cell updates.

What it does not do: it never calls the model, and it does not order sequences (``unrank`` stays
with the exact index).  Memory (``stats["bytes"]``: the rows and the rings): each rounding's step
tables (about 30 bytes a (state, token) entry) and, while a DP grows, the compiled sweep's rings (8 bytes
times, summed over the states, the power of two above the costliest step into each: a 5-gram of
passwords, 60,352 states, 0.19 GB a DP) or the numpy sweep's buffer (``8 S`` bytes a cell of the
costliest step); :meth:`CertifiedCounter.prepare_counts` holds one rounding's at a time.
"""
from __future__ import annotations

import functools
import math
import time
import warnings
from typing import Any

import numpy as np

from .._validate import exact_int, finite_float
from .certified_steps import UNIT_ROUNDOFF as _U, LazySteps
from .sweep import Sweep, compiled_sweep
from .estimate import mass_count_bound
from ..step import FiniteStateTables
from ..results import CountBracket, MassBracket
from ..support import Support

__all__ = ["CertifiedCounter", "DEFAULT_RESOLUTION_BITS", "DEFAULT_MAX_BITS"]

LEVELS_WARN_WORK = 2e9
"""A terminating model counted length by length warns when that adds more cell updates than this
(seconds of work) over the one-pass sweep."""
UPPER_LEVELS_MAX_CAP = 64
"""A terminating support's upper DP is counted length by length (``cap`` sweeps, tighter) only for
caps up to this; past it the one-pass sweep, which counts completions of any length, gives the upper
end (sound: a superset of the support). With rounded-down steps a cycle of likely steps makes long
paths cheap, and the min-plus check alone would take ``cap`` passes over the edges (a 1,024-token
cap over a policy's product with 24 million edges: minutes, then 1,024 sweeps)."""
DEFAULT_RESOLUTION_BITS = 1.0 / 32
DEFAULT_MAX_BITS = 256.0
WALKS_MAX = 16
"""The longest walks whose cheapest cost (from any state) bounds a capped path (:meth:`CertifiedCounter._uncapped`):
a path of ``n`` tokens holds ``n // j`` walks of ``j`` tokens, each at least the cheapest one."""


def _floor_int(v: float) -> int:
    return int(math.floor(v)) if math.isfinite(v) else 0


def _ceil_int(v: float) -> int | float:
    return int(math.ceil(v)) if math.isfinite(v) else math.inf


_compiled_sweep = compiled_sweep  # the loader the counter's sweeps use (a test swaps it for numpy: ``None``)


def _load_jit(progress: Any = None) -> Any:
    """Each sweep's loader (:attr:`Sweep.load_jit`): :func:`_compiled_sweep` as it is when it loads."""
    return _compiled_sweep(progress)


class CertifiedCounter:
    """Certified count, rank, threshold and mass brackets of a finite-state model's support.

    tables: the model's :class:`~arenum.step.finite_state.FiniteStateTables` (validated here).
    support: the enumeration's :class:`~arenum.support.Support` (fixed length, or terminating with
        its cap; ``branch_cap`` is not supported: the DP counts the whole support).
    resolution_bits: the grid's cell, in bits (rounded down to a power of two in nats); each step
        of a sequence can move its cell by one, so a bracket spans about ``length * resolution``
        bits of score.  Finer is tighter and slower (build time and memory are linear in 1/it).
    max_bits: the deepest score (bits) the DP is grown to; past it the lower ends stay at their last
        value and the upper ends are the mass bound ``e**-t``.

    Built lazily per query depth (cells grown geometrically), then answered in microseconds. Every
    bracket holds for the float64 scores the exact engine computes; ``docs/certified.md``.

    >>> from arenum.models import NGramModel
    >>> m = NGramModel.fit(["ab", "abc", "b"], order=2)
    >>> cc = CertifiedCounter(m.finite_state(), Support.terminating(m.eos, m.eos, 6))
    >>> b = cc.count_bracket(-8.0)
    >>> b.lo <= b.hi
    True
    """

    def __init__(self, tables: FiniteStateTables, support: Support, *,
                 resolution_bits: float = DEFAULT_RESOLUTION_BITS, max_bits: float = DEFAULT_MAX_BITS) -> None:
        if not isinstance(tables, FiniteStateTables):
            raise TypeError(f"tables must be FiniteStateTables, got {type(tables).__name__}")
        if not isinstance(support, Support):
            raise TypeError(f"support must be a Support, got {type(support).__name__}")
        if support.branch_cap is not None:
            raise ValueError("certified brackets count the whole support: branch_cap is not supported")
        r = finite_float("resolution_bits", resolution_bits)
        if not 2.0**-24 <= r <= 64:  # finer: a step's cells overflow the tables' integers (QA: 1e-300)
            raise ValueError(f"resolution_bits must be in [2**-24, 64], got {resolution_bits!r}")
        mb = finite_float("max_bits", max_bits)
        if not 0 < mb <= 1000:  # at most 2**1000 sequences score within it: float64 holds the counts
            raise ValueError(f"max_bits must be in (0, 1000], got {max_bits!r}")
        tables.validate()
        self.tables, self.support = tables, support
        self.delta = 2.0 ** math.floor(math.log2(r * math.log(2)))  # cell, nats: a power of two
        self.resolution_bits = self.delta / math.log(2)
        #: cells a bulk step's read covers at once in the one-pass sweep (:attr:`Sweep.B`): about one nat
        #: of score (64 cells at the default grid; 8 at least), so a coarser grid keeps the same steps bulk
        #: and sums fewer cells; the per-length sweep reads 64 (:meth:`StepEdges.for_block`)
        self.block = int(min(Sweep.B, max(8, 2 ** round(math.log2(1.0 / self.delta)))))
        self.max_bits = mb
        self.max_cells = int(math.ceil(mb * math.log(2) / self.delta))
        self.cap = support.cap
        self.gamma = (self.cap + 2) * 2.0**-52  # relative error of a left-to-right float64 sum
        self.terminating = support.is_terminating
        t0 = time.perf_counter()
        _, lp, nxt, end = tables.step_tables(self.terminating)
        S = self.S = tables.n_states
        self._degree = int((lp > -math.inf).sum(axis=1).max()) if lp.size else 0  # StepEdges.degree's count
        #: the step tables of each rounding (``True``: lower), made the first time a DP is swept or a
        #: min-plus step taken: a counter whose rows come from a store answers within them without
        self._edges = LazySteps(tables, self.terminating, self.delta, self.block)
        big = np.iinfo(np.int64).max // 4
        ec = -end / self.delta
        fin = np.isfinite(ec)
        self._end = {
            True: (np.where(fin, np.ceil(np.where(fin, ec, 0)), big).astype(np.int64), np.exp(end) * (1 - 4 * _U)),
            False: (np.where(fin, np.floor(np.where(fin, ec, 0)), big).astype(np.int64), np.exp(end) * (1 + 4 * _U)),
        }
        self._sweeps: dict[tuple, Sweep] = {}
        self._prefixes: Sweep | None = None  # the lower count DP of the prefixes (:meth:`prefix_lower`)
        self._n_edges: int | None = None  # the possible steps, once counted (stats)
        m0 = np.full(S, big, dtype=np.int64)
        m0[tables.start] = 0
        self._minplus = {True: (m0, 0), False: (m0, 0)}  # cheapest rounded cost of r-token paths, r
        self._least: dict[bool, tuple[np.ndarray, int]] = {}  # each rounding's min-plus row and its minimum
        self._cheapest: dict[bool, int] = {}  # the cheapest step of each rounding (cells)
        #: per rounding: the cheapest ``j``-token walk from any state (``[0, w_1, .., w_j]``) and its row
        self._walks: dict[bool, tuple[list[int], np.ndarray]] = {}
        #: per rounding: every cell up to this is shown uncapped by those walks (kept in a store with
        #: the min-plus rows: a process reading it needs no step table to know it)
        self._ruled_out: dict[bool, int] = {}
        self.setup_seconds = time.perf_counter() - t0
        #: ``on_grow()`` after a DP grows (a store keeps the tables: :mod:`arenum.beyond.certstore`); ``None``: nothing
        self.on_grow: Any = None
        #: ``progress(dict)`` while a DP grows (every block of :attr:`block` cells): ``phase='certified'``,
        #: ``cells_done``/``cells_todo`` and the ``dp`` being built; ``None``: silent
        self.progress: Any = None

    # ------------------------------------------------------------------ the sweeps
    def _uncapped(self, lower: bool, K: int) -> bool:
        """Whether no path of ``cap`` tokens has rounded cost ``<= K`` (a min-plus DP, extended on
        demand): then the unbounded sweep counts exactly the completions the cap allows."""
        if K <= self._ruled_out.get(lower, -1):
            return True
        m, r = self._minplus[lower]
        least = self._least.get(lower)
        if least is None or least[0] is not m:  # a row is never changed in place: its minimum, once (a query
            least = self._least[lower] = (m, int(m.min()))  # asks this several times: a read, not a pass)
        if r >= self.cap or least[1] > K:
            return least[1] > K
        if least[1] + (self.cap - r) * self._cheapest_step(lower) > K:
            return True  # every further step costs at least the cheapest one: no walk needed
        if self._walks_rule_out(lower, least[1], r, K):
            return True  # every further j tokens cost at least the cheapest j-token walk
        m, r = self._minplus_steps(lower, m, r, K, self.cap)
        self._minplus[lower] = (m, r)
        self._least[lower] = (m, int(m.min()))
        return self._least[lower][1] > K

    def _minplus_steps(self, lower: bool, m: np.ndarray, r: int, K: int, cap: int) -> tuple[np.ndarray, int]:
        """Min-plus steps of row ``m`` (the cheapest cost of ``r``-token walks to each state, ``big`` for
        none) over this rounding's steps, taken while ``r < cap`` and some state costs ``<= K``:
        ``(row, r)``, compiled (``sweepjit.minplus``) or numpy, the same integers."""
        big = np.iinfo(np.int64).max // 4
        src, cost, first, target = self._edges[lower].by_target
        jit = _compiled_sweep(self.progress)
        if jit is not None:
            return jit.minplus(m, src, cost, first, target, K, cap, r, big)
        while r < cap and int(m.min()) <= K:
            new = np.full(self.S, big, dtype=np.int64)
            if len(first):
                new[target] = np.minimum.reduceat(np.minimum(m[src] + cost, big), first)
            m, r = new, r + 1
        return m, r

    def _walks_rule_out(self, lower: bool, least: int, r: int, K: int) -> bool:
        """Whether the cheapest walks show that no path of ``cap`` tokens costs ``<= K``: its first
        ``r`` cost at least ``least`` (the min-plus row's minimum), and its other ``cap - r`` tokens
        hold ``(cap - r) // j`` disjoint walks of ``j`` tokens, each costing at least ``w_j``, the
        cheapest ``j``-token walk from any state (``j <= WALKS_MAX``, made one pass over the steps
        at a time, only as far as needed). The zxcvbn 4-gram: ``j = 2`` rules out its 1,024-token
        cap at 67 bits, where the min-plus row took 112 passes; the same answer (the row's minimum
        past ``K`` before ``cap`` passes, or at ``cap``) when the walks fall short."""
        w, row = self._walks.get(lower) or ([0], None)
        big = np.iinfo(np.int64).max // 4
        j = 1
        while j <= min(WALKS_MAX, self.cap - r):
            if j == len(w):
                if row is None:
                    row = np.zeros(self.S, np.int64)  # walks from every state
                row, _ = self._minplus_steps(lower, row, 0, big, 1)  # one pass
                w = w + [int(row.min()) if row.size else big]
                self._walks[lower] = (w, row)
            bound = least + ((self.cap - r) // j) * w[j]
            if bound > K:
                self._ruled_out[lower] = max(self._ruled_out.get(lower, -1), min(bound - 1, big))  # big: no such walk
                return True
            j += 1
        return False

    def _zero_cycle(self, lower: bool) -> bool:
        """Whether this rounding has a cycle of steps that each cost 0 cells (probability close to 1,
        rounded down), which the one-pass sweep cannot count (found with its step tables, made once)."""
        return self._edges[lower].zero_depth is None

    def _cheapest_step(self, lower: bool) -> int:
        """The fewest cells one possible step costs in this rounding (0 when there is none)."""
        got = self._cheapest.get(lower)
        if got is None:
            cost = self._edges[lower].by_target[1]
            got = self._cheapest[lower] = int(cost.min()) if cost.size else 0
        return got

    def _sweep(self, lower: bool, mass: bool, K: int) -> Sweep:
        if self.terminating and not lower and self.cap > UPPER_LEVELS_MAX_CAP:
            levels = None  # the upper end counts completions of any length: sound as is, one pass
        else:
            levels = None if self.terminating and self._uncapped(lower, K) else self.cap
        key = (lower, mass, levels)
        if levels is None and key not in self._sweeps and self._zero_cycle(lower):
            levels = self.cap  # a cycle of steps rounded down to 0 cells: counted length by length
            key = (lower, mass, levels)
        sw = self._sweeps.get(key)
        if sw is None:
            work = (self.cap - 1) * int(self._edges[lower].possible.sum()) * (K + 1)  # cell updates past one pass
            if self.terminating and levels is not None and work > LEVELS_WARN_WORK:
                warnings.warn(
                    f"certified: paths of max_len = {self.cap} tokens reach this query's depth ({K * self.resolution_bits:.1f} "
                    f"bits; a short cycle of likely steps), so it is counted length by length: {self.cap} "
                    f"sweeps over {self.S:,} states x {K + 1:,} cells, about {self.cap}x the time of the one-pass "
                    f"sweep; a smaller max_len (max_depth) costs less", RuntimeWarning, stacklevel=4)
            sw = self._new_sweep(key)
        sw.progress = self.progress
        return sw

    def _new_sweep(self, key: tuple) -> Sweep:
        lower, mass, levels = key
        end_cost, end_prob = self._end[lower] if self.terminating else (None, None)
        edges = functools.partial(self._edges.__getitem__, lower)  # made when the sweep first builds a cell
        sw = self._sweeps[key] = Sweep(edges, end_cost, end_prob, self.S, self.tables.start,
                                       lower=lower, mass=mass, levels=levels, fixed=not self.terminating)
        sw.load_jit = _load_jit
        # one pass: the grid's block; per length (numpy): 64 cells (a smaller one gathers every step a block)
        sw.B = self.block if levels is None else Sweep.B
        sw.on_grow = self._grew  # the counter's callback as it is when the sweep grows (a store sets it
        return sw                # after restoring the sweeps it read)

    def _grew(self) -> None:
        if self.on_grow is not None:
            self.on_grow()

    # ------------------------------------------------------------------ kept in a store (beyond/certstore.py)
    def state(self) -> dict[str, np.ndarray]:
        """What the DPs built so far answer from: each sweep's start-state row, the min-plus DP of each
        rounding and the depth its cheapest walks rule the cap out to (for :mod:`arenum.beyond.certstore`)."""
        out = {f"row_{int(lo)}{int(ma)}_{lv or 0}": sw.row for (lo, ma, lv), sw in self._sweeps.items()}
        for lo, (m, r) in self._minplus.items():
            out[f"minplus_{int(lo)}"], out[f"minplus_r_{int(lo)}"] = m, np.array([r])
        for lo, k in self._ruled_out.items():
            out[f"ruled_out_{int(lo)}"] = np.array([k], np.int64)
        return out

    def restore(self, state: dict[str, np.ndarray]) -> None:
        """Take the rows and min-plus DPs of :meth:`state` (the same tables, support and grid): queries
        within them answer without a sweep; a deeper one rebuilds its sweep from cell 0."""
        for k, v in state.items():
            if k.startswith("row_"):
                lv = int(k.split("_")[2])
                self._new_sweep((k[4] == "1", k[5] == "1", lv or None)).row = np.asarray(v, np.float64)
        for lo in (True, False):
            self._minplus[lo] = (np.asarray(state[f"minplus_{int(lo)}"], np.int64), int(state[f"minplus_r_{int(lo)}"][0]))
            if f"ruled_out_{int(lo)}" in state:  # a file written before the walks has none
                self._ruled_out[lo] = int(state[f"ruled_out_{int(lo)}"][0])

    def _value(self, lower: bool, mass: bool, K: int) -> float:
        """The lower or upper DP at the start state at cell ``K`` (clamped at ``max_cells``)."""
        if K < 0:
            return 0.0
        if K > self.max_cells:
            if lower:
                K = self.max_cells
            else:
                return 1.0 if mass else math.inf
        return self._sweep(lower, mass, K).at(K)

    def _cells(self, t: float) -> tuple[int, int]:
        """``(K_lo, K_hi)``: the cells of threshold ``t`` for the lower and the upper DP."""
        x = min(-t / self.delta, 2.0**62)  # a threshold past any DP (its cells are clamped at max_cells after)
        return math.floor(x * (1 - 3 * self.gamma)), math.floor(x * (1 + 3 * self.gamma))

    # ------------------------------------------------------------------ answers
    def count_bracket(self, t: float) -> CountBracket:
        """Certified ``lo <= #{x in support : s(x) >= t} <= hi`` (``hi`` may be ``inf`` past
        ``max_bits``). Same as ``sum(1 for x in support if score(x) >= t)``, bracketed."""
        t = finite_float("t", t, allow_neg_inf=True)
        if t > 0:
            return CountBracket(0, 0, method="certified")
        if t == -math.inf:
            return CountBracket(_floor_int(self._value(True, False, self.max_cells)), math.inf, method="certified")
        k_lo, k_hi = self._cells(t)
        lo = _floor_int(self._value(True, False, k_lo))
        hi = _ceil_int(self._value(False, False, k_hi))
        hi = min(hi, mass_count_bound(t))  # each has mass >= e**t
        return CountBracket(lo, max(lo, hi), method="certified")

    def prepare_counts(self, t: float) -> None:
        """Build both count DPs down to score ``t`` (``count_bracket``, ``rank_bracket`` and
        ``count_lower`` of any score ``>= t`` then answer from their rows: the same values), one
        rounding after the other, each one's step tables and rings released once its row reaches
        ``t``: the peak holds one rounding's, not both (a 5-gram of passwords: 0.31 GB, not 0.62).
        A later count deeper than ``t`` rebuilds its DP from cell 0 (the sweep's time again), so
        give the deepest score asked for (``arenum eval``: its least probable test line)."""
        t = finite_float("t", t)
        if t > 0:
            return
        for lower, K in zip((True, False), self._cells(t)):
            K = min(K, self.max_cells)
            if K < 0:
                continue
            self._sweep(lower, False, K).ensure(K, final=True)  # released below: each state summed as far as read
            self._n_edges = self._edges[lower].n_edges  # for stats, once the tables go
            for sw in self._all_sweeps():
                if sw.lower == lower:
                    sw.release(functools.partial(self._edges.__getitem__, lower))
            self._edges.pop(lower, None)

    def prepare_ranks(self, t: float) -> None:
        """Both count DPs down to score ``t`` for a batch of counts or ranks (``t`` the deepest): a
        DP already growing (an earlier query's) grows on, else :meth:`prepare_counts` (each state
        summed only as far as a count down to ``t`` reads it, one rounding at a time, released once
        built: a later deeper count rebuilds from cell 0)."""
        if any(sw.ring is not None or sw.N is not None for (_, mass, _), sw in self._sweeps.items() if not mass):
            self.count_bracket(t)
        else:
            self.prepare_counts(t)

    def _edge_count(self) -> int:
        """The possible steps (one rounding's tables are made to count them, once)."""
        if self._n_edges is None:
            self._n_edges = int(self._edges[True].n_edges)
        return self._n_edges

    def count_lower(self, t: float) -> int:
        """The lower end of :meth:`count_bracket` alone (``lo <= #{x : s(x) >= t}``), building only
        the lower count DP (to ``t``; the deepest cell is ``max_cells``)."""
        t = finite_float("t", t)
        if t > 0:
            return 0
        return _floor_int(self._value(True, False, self._cells(t)[0]))

    def counts_built(self, t: float) -> bool:
        """Whether a lower count DP is already built down to score ``t`` (:meth:`count_lower` of it
        then reads a row: no sweep)."""
        K = min(self._cells(finite_float("t", t))[0], self.max_cells)
        return any(lo and not ma and sw.K >= K for (lo, ma, _), sw in self._sweeps.items())

    def prefix_lower(self, t: float) -> int | None:
        """A certified lower count of the prefixes scoring ``>= t`` (the empty one included, none
        ending in eos): each is a live node of an exact build down to ``t``, so this many prefixes
        (:meth:`arenum.answers.Answers._out_of_reach`), several times the sequences, is a sharper
        floor on that build's size than :meth:`count_lower`.  The lower count DP with every state
        ending at no cost, grown on demand and not kept in a store; ``None`` for a fixed length or
        where the cap may bind (a path of ``max_len`` tokens within ``t``: the one-pass sweep would
        count prefixes longer than any node)."""
        t = finite_float("t", t)
        if not self.terminating:
            return None
        if t > 0:
            return 0
        K = min(self._cells(t)[0], self.max_cells)
        if K < 0:
            return 0
        if not self._uncapped(True, K):
            return None
        sw = self._prefixes
        if sw is None:
            sw = self._prefixes = Sweep(functools.partial(self._edges.__getitem__, True), np.zeros(self.S, np.int64),
                                        np.ones(self.S), self.S, self.tables.start, lower=True, mass=False,
                                        levels=None, fixed=False)
            sw.B, sw.load_jit = self.block, _load_jit
        sw.progress = self.progress
        return _floor_int(sw.at(K))

    max_degree = property(lambda self: self._degree, doc="The most possible steps of one state (no step table made).")

    def rank_bracket(self, s: float) -> CountBracket:
        """Certified ``lo <= #{x : s(x) > s} <= hi``: the count at the next float above ``s``."""
        s = finite_float("s", s)
        return self.count_bracket(float(np.nextafter(s, math.inf)))

    def mass_bracket(self, t: float) -> MassBracket:
        """Certified ``lo <= P(s(X) >= t) <= hi`` over the support (``method='certified'``; ``exact``
        only when ``lo == hi``, e.g. ``0.0`` where no sequence can score ``>= t``: both ends bound the
        truth, so equal ends are it)."""
        t = finite_float("t", t, allow_neg_inf=True)
        if t > 0:
            return _certified_mass(0.0, 0.0)
        if t == -math.inf:
            lo = max(0.0, self._value(True, True, self.max_cells))
            return _certified_mass(lo, max(1.0, lo))  # rows summing a hair over 1 (rounding) may hold more than 1
        k_lo, k_hi = self._cells(t)
        lo = max(0.0, self._value(True, True, k_lo))
        hi = self._value(False, True, k_hi)  # a certified upper end as it is: not cut to 1 (float rounding)
        return _certified_mass(lo, max(lo, hi))

    def _first_cell(self, lower: bool, k: int) -> int | None:
        """Smallest cell ``K <= max_cells`` whose lower (upper) count reaches ``k``, or None."""
        K = min(64, self.max_cells)
        while True:
            sw = self._sweep(lower, False, K)
            sw.ensure(K)
            hit = np.flatnonzero(sw.row[: K + 1] >= k)
            if len(hit):
                return int(hit[0])
            if K >= self.max_cells:
                return None
            K = min(self.max_cells, 2 * K)

    def threshold_bracket(self, k: int) -> tuple[float, float]:
        """Certified ``t_lo <= threshold(k) <= t_hi``: the ``k``-th largest score (1-based) of the
        support, when it has ``k`` sequences. ``t_lo = -inf`` when the lower count does not reach
        ``k`` within ``max_bits``."""
        k = exact_int("k", k, minimum=1)
        ka = self._first_cell(True, k)
        t_lo = -math.inf if ka is None else float(np.nextafter(-(ka * self.delta) * (1 + 3 * self.gamma), -math.inf))
        kb = self._first_cell(False, k)  # the upper count is below k up to cell kb - 1
        if kb is None:
            kb = self.max_cells + 1
        t_hi = -(kb * self.delta) / (1 + 4 * self.gamma)
        return (t_lo, min(0.0, float(np.nextafter(t_hi, math.inf))))

    def _all_sweeps(self) -> list[Sweep]:
        return list(self._sweeps.values()) + ([self._prefixes] if self._prefixes is not None else [])

    @property
    def stats(self) -> dict[str, Any]:
        """States, edges, cells built per DP, build seconds and bytes held."""
        return {
            "states": self.S,
            "edges": self._edge_count(),
            "resolution_bits": self.resolution_bits,
            "cells": {f"{'lo' if k[0] else 'hi'}_{'mass' if k[1] else 'count'}_"
                      f"{'unbounded' if k[2] is None else 'levels'}": sw.K for k, sw in self._sweeps.items()},
            "seconds": self.setup_seconds + self._edges.seconds + sum(sw.seconds for sw in self._all_sweeps()),
            "bytes": sum(sw.nbytes for sw in self._all_sweeps()),
        }


def _certified_mass(lo: float, hi: float) -> MassBracket:
    """A certified mass bracket of the DP (``method='certified'``): ``exact`` only when it is a single
    value, which both ends, certified bounds of the truth, then prove."""
    return MassBracket(lo, hi, exact=lo == hi, method="certified")
