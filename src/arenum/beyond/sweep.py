"""One DP of the certified counter (:mod:`arenum.beyond.certified`): :class:`Sweep`, a count or mass
DP for one rounding, grown cell by cell on demand, by the compiled sweep (:mod:`arenum.beyond.sweepjit`)
where numba is in use, else the numpy sweep (:mod:`arenum.beyond.sweepnp`), the same values bit for bit.
"""
from __future__ import annotations

import functools
import sys
import time
from typing import Any, Callable

import numpy as np

from .._guard import deferred_interrupts
from ..step import kernels
from . import sweepnp
from .certified_steps import EXACT_SUMS as _EXACT, UNIT_ROUNDOFF as _U, StepEdges

__all__ = ["Sweep", "compiled_sweep", "NO_HORIZON"]

NO_HORIZON = 1 << 62  # a growing sweep: every state summed at every cell


def compiled_sweep(progress: Any = None) -> Any:
    """The compiled sweep's module if compiled code is in use (:func:`arenum.step.kernels.allows_numba`; else
    ``None``: the numpy path, the same values), its first load told to ``progress``."""
    if not kernels.allows_numba():
        return None
    if progress is not None and __name__.rpartition(".")[0] + ".sweepjit" not in sys.modules:
        progress({"phase": "certified", "dp": "loading its compiled kernels", "cells_done": 0, "cells_todo": 0})
    try:
        from . import sweepjit
    except ImportError:
        return None
    return sweepjit


class Sweep:
    """One DP (count or mass, lower or upper) for cells ``0..K``, grown on demand.

    ``N`` is state-major, ``(S + 1, columns)``; column ``PAD + k - o`` holds cell ``k`` (``o``: the
    origin, 0 until the buffer slides); ``PAD`` zero cells on the left stand for negative cells, and
    row ``S`` is all zeros.  An edge reads the window ``[K - cost, K - cost + B)`` of its next state
    for a block of ``B`` cells at once (clamped into the padding when it lies wholly before cell 0;
    an edge outside the block's set reads row ``S``).  Edges cheaper than ``B`` cells are added cell
    by cell within the block (their reads may fall in it).  An unbounded sweep only ever reads the
    last ``span`` (the costliest step) cells, so its buffer slides instead of growing past
    ``span + 3 PAD + GROW`` columns; the start state's row is kept whole.
    """

    B = 64  # the largest block; each counter sets its own (:attr:`~arenum.beyond.certified.CertifiedCounter.block`)
    GROW = 512
    JIT_UPDATES = 1 << 24

    def __init__(self, edges: StepEdges | Callable[[], StepEdges], end_cost: np.ndarray | None,
                 end_prob: np.ndarray | None, S: int, start: int, *, lower: bool, mass: bool, levels: int | None,
                 fixed: bool) -> None:
        # edges: the tables, or a callable making them when a cell is first built (a row restored
        # from a store answers within it without them)
        self._e, self.end_cost, self.end_prob, self.S, self.start = edges, end_cost, end_prob, S, start
        self.lower, self.mass, self.levels, self.fixed = lower, mass, levels, fixed
        self.row = np.zeros(0)  # (K + 1,) float64: the start state's cumulative values
        self.N: np.ndarray | None = None  # unbounded mode: (S + 1, columns) float64, see above
        self.o = 0  # the cell in column PAD of N
        self.seconds = 0.0
        self.on_grow: Any = None
        self._jit: Any = False  # the compiled one-pass sweep's module, None: numpy (decided at the first build)
        self.load_jit: Callable[[Any], Any] = compiled_sweep  # loads that module (the counter's own loader)
        self.ring: np.ndarray | None = None  # the compiled sweep's rings of each state's last cells, flat
        #: the deepest cell this sweep is built for (``None``: any, it grows on demand): set by
        #: :meth:`ensure` ``(K, final=True)`` on a sweep built from cell 0; each state is then summed
        #: only to the last cell a start cell up to it reads, and a deeper cell rebuilds from cell 0
        self.horizon: int | None = None
        self._windows: tuple[np.ndarray, np.ndarray] | None = None  # the compiled sweep's (lo_cell, hi_cell)
        #: ``progress(dict)`` after every block of cells (``phase='certified'``, ``cells_done``, ``cells_todo``)
        self.progress: Any = None

    @property
    def e(self) -> StepEdges:
        """The tables of this rounding (made on first use), split for this sweep's block :attr:`B`."""
        if not isinstance(self._e, StepEdges):
            self._e = self._e()
        return self._e.for_block(self.B)

    @functools.cached_property
    def factor(self) -> float:
        """The slack of a cell: ``1 -/+ (n + 8) u`` for ``n`` terms summed into it (doubled with weights)."""
        e = self.e
        n = e.degree + 4 + (e.degree + 4) * 2 * (e.zero_depth or 0)  # None: a zero-cost cycle, length by length
        eps = (n + 8) * _U * (1.0 if not self.mass and e.weight is None else 2.0)  # weights: a product per term
        return 1.0 - eps if self.lower else 1.0 + eps

    @functools.cached_property
    def span(self) -> int:
        """The farthest read back, in cells (the costliest step, plus one)."""
        costs = self.e.cost[self.e.possible]
        return int(costs.max()) + 1 if costs.size else 1

    def report(self, done: int, todo: int) -> None:
        if self.progress is not None:
            self.progress({"phase": "certified", "cells_done": done, "cells_todo": todo,
                           "dp": f"{'lower' if self.lower else 'upper'} {'mass' if self.mass else 'count'}"})

    @property
    def K(self) -> int:
        return len(self.row) - 1

    @property
    def nbytes(self) -> int:
        return int(self.row.nbytes + (self.N.nbytes if self.N is not None else 0)
                   + (self.ring.nbytes if self.ring is not None else 0))

    def slack(self, v: np.ndarray) -> None:
        if self.mass:
            v *= self.factor
        else:
            big = v >= _EXACT
            if big.any():
                v[big] *= self.factor

    def _fill_jit(self, K: int) -> None:
        """Cells up to ``K`` by the compiled sweep (:mod:`arenum.beyond.sweepjit`: the numpy sweep's
        values bit for bit) into a ring per state of its last cells (more than the costliest step into
        it reads back: :func:`~arenum.beyond.sweepjit.ring_layout`); the rings and :attr:`row` advance together, a call of about :attr:`JIT_UPDATES` cell updates at a time
        (an interrupt between calls leaves them in step)."""
        e, P, S = self.e, self.B, self.S
        if self.ring is None:
            self._csr = self._jit.csr_steps(e, self.mass)
            self._cheap = self._jit.cheap_order(S, self._csr)  # which states are summed how, in what order
            self._roff, self._rmask = self._jit.ring_layout(S, self._csr, P)  # a ring per state, as far as it is read
            self.ring = np.zeros(int(self._roff[-1] + self._rmask[-1] + 1) if S else 0)
            self._order = np.lexsort(np.where(e.bulk, e.nxt, -1).T[::-1]).astype(np.int64)  # by next states
        end_cost, end_val = (self.end_cost, (self.end_prob if self.mass else np.ones(S))) if self.end_cost is not None \
            else (np.zeros(S, np.int64), np.zeros(S))
        if self._windows is None:  # each state's first cell and (to a horizon) last cell read
            c = self._csr
            self._windows = self._jit.windows(c[0], c[1], c[2], c[4], c[5], c[6], c[8], c[9], end_cost,
                                              self.end_cost is not None, self.start,
                                              NO_HORIZON if self.horizon is None else self.horizon)
        step = P * max(1, self.JIT_UPDATES // max(1, P * int(e.n_edges)))
        k0 = k = self.K + 1
        while k <= K:
            kb = min(K, k + step - 1)
            out = np.empty(kb - k + 1)
            with deferred_interrupts():  # the ring and the row advance together
                self._jit.fill(self.ring, self._roff, self._rmask, k, kb, P, *self._csr, e.zero_depth, end_cost, end_val,
                               self.end_cost is not None, self.mass or e.weight is not None, self.mass, self.factor,
                               self.start, self._order, *self._windows, *self._cheap, out)
                self.row = np.concatenate([self.row, out])
            k = kb + 1
            self.report(k - k0, K - k0 + 1)

    def ensure(self, K: int, final: bool = False) -> None:
        """Build cells ``0..K`` (at least). ``final``: no deeper cell will be asked of this build (it
        is released once built, :meth:`release`): a sweep starting from cell 0 then sums each state
        only as far as the start state's cells up to ``K`` read it (the compiled sweep: the same
        values, less work the farther the states lie from the start)."""
        if K <= self.K:
            return
        try:
            self._ensure(K, final)
        finally:
            if self.on_grow is not None:
                self.on_grow()

    def _ensure(self, K: int, final: bool = False) -> None:
        t0 = time.perf_counter()
        S, P = self.S, self.B
        if self.levels is None:
            if self.horizon is not None and K > self.horizon:  # built for a shallower final cell: from 0
                self.ring = self._windows = self.horizon = None
            if self.ring is None and self.N is None:  # a row restored from a store: rebuilt from cell 0
                self.row = np.zeros(0)
            if self._jit is False:
                self._jit = self.load_jit(self.progress)
            K = max(K, int(self.K * 1.25) + 1)
            if self.horizon is not None:  # a windowed build resumed (after an interrupt): to its horizon at most
                K = min(K, self.horizon)
            elif self._jit is not None and self.ring is None:  # a sweep from cell 0: windowed if final
                self.horizon, self._windows = (K if final else None), None
            if self._jit is not None:
                try:
                    self._fill_jit(K)
                finally:
                    self.seconds += time.perf_counter() - t0
                return
            limit = self.span + 3 * P + self.GROW
            width = max(min(K - self.o + 2 * P + 1, limit), 0 if self.N is None else self.N.shape[1])
            if self.N is None or width > self.N.shape[1]:
                N = np.zeros((S + 1, width), dtype=np.float64)
                if self.N is not None:
                    N[:, : self.N.shape[1]] = self.N
                self.N = N
            self.row = np.concatenate([self.row, sweepnp.fill_unbounded(self, self.K + 1, K)])
        else:
            K = max(K, int(self.K * 1.5) + 1)  # a rebuild: grow geometrically
            prev = np.zeros((S + 1, P + K + 1 + P))
            if self.fixed:  # no token left: the empty completion, cost 0
                prev[:S, P:] = 1.0
            cur = np.zeros_like(prev)
            for lv in range(self.levels):
                sweepnp.fill_level(self, prev, cur, K)
                prev, cur = cur, prev
                self.report((lv + 1) * (K + 1), self.levels * (K + 1))
            self.row = prev[self.start, P : P + K + 1].copy()
        self.seconds += time.perf_counter() - t0

    def release(self, edges: Any) -> None:
        """Drop what grows this DP (its rings or buffer, its steps, its step tables: ``edges`` makes
        them again) and keep :attr:`row`: cells up to :attr:`K` still answer; a deeper one rebuilds
        from cell 0, as a row restored from a store does."""
        self.ring = self.N = None
        self._csr = self._cheap = self._order = self._roff = self._rmask = self._windows = self.horizon = None
        self.o = 0
        self._e = edges

    def at(self, K: int) -> float:
        """The start state's value at cell ``K`` (``K < 0``: 0)."""
        if K < 0:
            return 0.0
        self.ensure(K)
        return float(self.row[K])
