"""The step tables of the certified DP (:mod:`arenum.beyond.certified`): each step's next state, cost
in cells and probability, for one rounding of the costs (up: the lower DP; down: the upper DP).

:func:`merged_steps` merges the steps of a state that share their next state and cell (a PCFG's
groups of thousands of strings) when that shrinks the tables four times or more; :class:`StepEdges`
splits them into the bulk steps (cost ``>= B`` cells, read a block at a time), the cheap ones and
the zero-cost ones, and groups them by next state for the min-plus DP; :class:`LazySteps` makes
each rounding the first time it is read (a counter whose rows come from a store never does).
"""
from __future__ import annotations

import copy
import math
import time
from typing import Any, Callable

import numpy as np

from ..step import FiniteStateTables

__all__ = ["merged_steps", "StepEdges", "LazySteps", "UNIT_ROUNDOFF", "EXACT_SUMS"]

UNIT_ROUNDOFF = _U = 2.0**-53  # of float64: the certified DP's widenings (certified.py, sweep.py) read it here
EXACT_SUMS = 2.0**53  # float64 sums of integers below this are exact: a cell under it is not widened (both sweeps)


def merged_steps(nx: np.ndarray, cost: np.ndarray, prob: np.ndarray | Callable[[], np.ndarray], possible: np.ndarray,
                 lower: bool) -> tuple[np.ndarray, np.ndarray, Any, np.ndarray, np.ndarray | None]:
    """``(next, cost, prob, possible, weight)`` of one rounding, with the steps of a state that share
    their next state and their cell merged into one step of integer ``weight`` (their number) and
    probability (their sum, widened by ``(m + 4) u`` for ``m`` summed): the same DP values, each a sum
    of fewer terms.  Done only when it shrinks the tables four times or more (a PCFG's groups of
    thousands of strings, a few hundred distinct cells), else the tables are kept (``weight`` None)
    with ``prob`` widened by ``4 u``.  ``prob`` may be a callable making it: it is then called only
    to merge, and kept tables get a callable making the widened probabilities when first read (a
    count DP never reads them); whether to merge is told from the first rows when they already
    show distinct steps (an n-gram: no full sort of its tables)."""
    pad = 1 - 4 * _U if lower else 1 + 4 * _U
    S, V = nx.shape
    if not possible.any():
        return nx, cost, _padded(prob, pad), possible, None
    base = int(np.max(cost, where=possible, initial=0)) + 1
    head = max(1, (1 << 20) // max(1, V))  # the first rows alone: an n-gram is told from them
    if S > head and 4 * _width(nx[:head], cost[:head], possible[:head], base) > V:
        return nx, cost, _padded(prob, pad), possible, None
    key = _step_keys(nx, cost, possible, base)
    order = np.argsort(key, axis=1, kind="stable")  # per state: impossible steps first, then by key
    ks = np.take_along_axis(key, order, axis=1)
    new = _firsts(ks)  # the first step of each distinct (next, cell)
    per_state = new.sum(axis=1)
    width = int(per_state.max())
    if 4 * width > V:  # an n-gram: its steps lead to distinct states
        return nx, cost, _padded(prob, pad), possible, None
    if callable(prob):
        prob = prob()
    valid = (ks >= 0).ravel()
    g = (np.cumsum(new.ravel()) - 1)[valid]  # the merged step of each possible step
    n_new = int(per_state.sum())
    m = np.bincount(g, minlength=n_new)  # steps merged into each
    psum = np.bincount(g, weights=np.take_along_axis(prob, order, axis=1).ravel()[valid], minlength=n_new)
    psum *= (1 - (m + 4) * _U) if lower else (1 + (m + 4) * _U)
    ms = np.nonzero(new)[0]
    slot = (np.cumsum(new, axis=1) - 1)[new]  # position within its state
    kk = ks[new]
    out_n, out_c = np.zeros((S, width), np.int64), np.zeros((S, width), np.int64)
    out_p, out_w = np.zeros((S, width)), np.zeros((S, width))
    out_ok = np.zeros((S, width), np.bool_)
    out_n[ms, slot], out_c[ms, slot], out_p[ms, slot], out_w[ms, slot], out_ok[ms, slot] = kk // base, kk % base, psum, m, True
    return out_n, out_c, out_p, out_ok, out_w


def _step_keys(nx: np.ndarray, cost: np.ndarray, possible: np.ndarray, base: int) -> np.ndarray:
    """Each step's ``(next state, cell)`` as one int64 key; -1 for an impossible step."""
    return np.where(possible, nx.astype(np.int64) * base + cost, -1)


def _firsts(ks: np.ndarray) -> np.ndarray:
    """In rows of sorted keys, the first step of each distinct possible key."""
    new = ks >= 0
    new[:, 1:] &= ks[:, 1:] != ks[:, :-1]
    return new


def _width(nx: np.ndarray, cost: np.ndarray, possible: np.ndarray, base: int) -> int:
    """The most distinct ``(next state, cell)`` pairs of one state's possible steps."""
    key = _step_keys(nx, cost, possible, base)
    key.sort(axis=1)
    return int(_firsts(key).sum(axis=1).max()) if len(key) else 0


def _padded(prob: Any, pad: float) -> Any:
    """``prob * pad``, or, for a callable making ``prob``, a callable making it when first read (a
    count DP without merged steps never reads the probabilities: 8 bytes a step not held)."""
    if callable(prob):
        return lambda: prob() * pad
    return prob * pad


class StepEdges:
    """The transitions of one rounding as dense ``(S, V)`` tables: next state, cell cost, probability.

    Impossible steps have probability 0 and next state 0 (never read: they are never ``bulk`` and
    never ``cheap``). ``cheap`` lists the possible steps of cost ``< B`` cells (at most a few per state).
    ``by_target``: the steps grouped by next state for the min-plus DP (source state and cost, int32
    where they fit: a 5-gram's steps number millions). Memory: about 60 bytes a possible step, and
    16 more where the numpy sweep runs a count DP, 24 a mass DP (its lists by rank:
    :func:`arenum.beyond.sweepnp._by_rank`).
    """

    def __init__(self, nxt: np.ndarray, cost: np.ndarray, prob: np.ndarray | Callable[[], np.ndarray],
                 possible: np.ndarray, weight: np.ndarray | None, B: int) -> None:
        self.S = nxt.shape[0]
        narrow = self.S < 2**31 and int(np.max(cost, where=possible, initial=0)) < 2**31
        it = np.int32 if narrow else np.int64  # indices and cells: int32 where they fit (the same values)
        self.nxt, self.cost, self.possible = nxt, cost.astype(it, copy=False), possible  # (S, V) each
        self._prob = prob  # (S, V), or a callable making it when first read (:attr:`prob`)
        self.weight = weight  # (S, V) float64 integer multiplicities of merged steps (count DPs), or None
        self.degree = int(possible.sum(axis=1).max()) if possible.size else 0
        self._split(B, it)
        self._views: dict[int, StepEdges] = {}  # other splits of these tables (:meth:`for_block`)
        self._root = self
        src, col = np.nonzero(possible)
        self.n_edges = len(src)
        fn, fc = nxt[src, col], self.cost[src, col]  # (E,) each: the possible steps, for the min-plus DP
        del col
        src = src.astype(it)
        o = np.argsort(fn, kind="stable")  # grouped by next state: one reduceat per min-plus step
        fn = fn[o]
        first = np.flatnonzero(np.r_[True, fn[1:] != fn[:-1]]) if len(o) else np.zeros(0, np.int64)
        self.by_target = (src[o], fc[o].astype(it, copy=False), first, fn[first])
        del src, fc, o, fn
        self.zero_depth = self._zero_depth(self.c_src[self.c_zero], self.c_nxt[self.c_zero]) if self.c_zero.any() else 0

    def _split(self, B: int, it: Any) -> None:
        """The bulk steps (cost ``>= B`` cells) and the cheap ones (``< B``, listed) for a block of ``B``."""
        self.B = B
        self.bulk = self.possible & (self.cost >= B)  # (S, V) bool
        cs, cj = np.nonzero(self.possible & (self.cost < B))
        self.c_src, self._c_col = cs.astype(it), cj.astype(it)  # copies: the (2, n) int64 result goes
        del cs, cj
        self.c_nxt, self.c_cost = self.nxt[self.c_src, self._c_col], self.cost[self.c_src, self._c_col]
        self.c_weight = None if self.weight is None else self.weight[self.c_src, self._c_col]
        self.c_zero = self.c_cost == 0
        self._c_prob: np.ndarray | None = None
        self.np_ranks: dict[int, Any] = {}  # the numpy sweep's step lists per mask (sweepnp._by_rank)

    def for_block(self, B: int) -> "StepEdges":
        """These steps split for a block of ``B`` cells (``self`` when it is :attr:`B`): the per-length
        sweep reads 64-cell blocks where the one-pass sweep reads the counter's smaller block (a coarse
        grid); the tables are shared, the bulk mask and the cheap lists made once."""
        if B == self.B:
            return self
        root = self._root
        if B == root.B:
            return root
        v = root._views.get(B)
        if v is None:
            v = copy.copy(root)
            v._views = {}
            v._split(B, root.c_src.dtype.type)
            root._views[B] = v
        return v

    @property
    def prob(self) -> np.ndarray:
        """``(S, V)`` float64: each step's probability, widened for the rounding (made on first read
        when it was given as a callable: the mass DPs and merged steps read it, a count DP does not).
        A split for another block (:meth:`for_block`) reads its tables'."""
        if self._root is not self:
            return self._root.prob
        if callable(self._prob):
            self._prob = self._prob()
        return self._prob

    @property
    def c_prob(self) -> np.ndarray:
        """The probabilities of the cheap steps (``c_src``), read from :attr:`prob` on first use."""
        if self._c_prob is None:
            self._c_prob = self.prob[self.c_src, self._c_col]
        return self._c_prob

    def _zero_depth(self, src: np.ndarray, nxt: np.ndarray) -> int | None:
        """Longest path of zero-cost edges (they are resolved within one cell); ``None`` for a cycle of
        them (steps of probability close to 1 rounded down to 0 cells): the one-pass sweep cannot count
        it, the sweep length by length can (:meth:`arenum.beyond.certified.CertifiedCounter._sweep`)."""
        S = self.S
        depth = np.zeros(S, dtype=np.int64)
        for it in range(S + 1):
            new = np.zeros(S, dtype=np.int64)
            np.maximum.at(new, src, depth[nxt] + 1)
            if np.array_equal(new, depth):
                return it
            depth = new
        return None


class LazySteps(dict):
    """``{lower: StepEdges}`` of a counter's tables, each rounding made the first time it is read
    (``lower``: costs rounded up); ``seconds``: the time spent making them."""

    def __init__(self, tables: FiniteStateTables, terminating: bool, delta: float, B: int) -> None:
        super().__init__()
        self.tables, self.terminating, self.delta, self.B, self.seconds = tables, terminating, delta, B, 0.0

    def __missing__(self, lower: bool) -> "StepEdges":
        t0 = time.perf_counter()
        _, lp, nxt, _ = self.tables.step_tables(self.terminating)
        possible = lp > -math.inf  # (S, V)
        cost = np.where(possible, -lp, 0.0) / self.delta  # exact: delta is a power of two
        (np.ceil if lower else np.floor)(cost, out=cost)
        big = float(np.max(cost, where=possible, initial=0.0)) >= 2**31
        cost = cost.astype(np.int64 if big else np.int32)  # cells: int32 where they fit (the same integers)
        del lp
        nx = np.where(possible, nxt, 0).astype(np.int32 if self.tables.n_states < 2**31 else np.int64)
        del nxt
        tables, terminating = self.tables, self.terminating

        def prob() -> np.ndarray:  # made when first read (a count DP of an n-gram never does)
            lp = tables.step_tables(terminating)[1]
            return np.where(lp > -math.inf, np.exp(lp), 0.0)

        e = self[lower] = StepEdges(*merged_steps(nx, cost, prob, possible, lower), self.B)
        self.seconds += time.perf_counter() - t0
        return e
