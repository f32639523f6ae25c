"""What a deepening of the prefix tree reads, kept in step with its commits instead of rescanned.

A deepening from the built threshold to a lower ``T`` turns into child nodes only the stored table
entries whose score lies in ``[T, built)``: per level, the nodes whose next unmade entry scores
``>= T``. Finding them by scanning every column of every level costs the whole tree each round,
however little the round adds (a stream of growing slices deepens in many small rounds). The
:class:`Frontier` keeps, per level, that next entry's score (``next_score``: ``score +
pool_lp[off + made]`` for a fetched node with ``made < min(tlen, branch_cap)``, ``-inf`` otherwise), so
that a round finds its candidates with one comparison per node, and updates it for the nodes each
commit touches (a fetch: its nodes; an expand: its candidates; new nodes: ``-inf``). Likewise the
nodes a round must fetch (``score >= T`` and not fetched, or fetched with a head cut above ``T``:
``floor > T``) are those whose ``due`` exceeds ``T``: ``up(score)`` for a node not fetched,
``min(up(score), floor)`` for one fetched, where ``up(x)`` is the next float above ``x`` (so
``up(score) > T`` exactly when ``score >= T``).

It is derived state, never journaled or stored: a level's column is built from the level's columns
when first asked for, a commit rolled back (an exception, an interrupt) drops every column, and
:meth:`Frontier.check` compares each kept column with one built afresh (the tree's ``_check``).
The histograms' populated span (:func:`hist_cum`) is kept the same way: ``hist_top`` bounds the
bins any commit has touched, so a cumulative sum covers those instead of all ``HIST_LEN`` bins.
"""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from ._arrays import Grow

__all__ = ["Frontier", "hist_cum"]


def hist_cum(tree: Any, hist: np.ndarray) -> np.ndarray:
    """``np.cumsum(hist)`` for one of ``tree``'s histograms, over its first ``tree.hist_top`` bins (at
    least one): every later bin is zero, so every later entry would repeat the last."""
    return np.cumsum(hist[: max(1, int(tree.hist_top))])


class Frontier:
    """Per level of a :class:`~arenum.exact.tree.PrefixTree`, the score of each node's next unmade
    table entry (module docstring). Only the tree calls it, under its lock."""

    def __init__(self) -> None:
        self._next: dict[int, Grow] = {}  # grown in place as the level grows (amortized, no copy a round)
        self._due: dict[int, Grow] = {}

    def nbytes(self) -> int:
        """The bytes of the kept columns' values (counted in the tree's ``memory_bytes``)."""
        return sum(g.n * g.a.dtype.itemsize for cols in (self._next, self._due) for g in cols.values())

    def clear(self) -> None:
        """Forget every column (a commit was rolled back, or the tree's levels were replaced)."""
        self._next.clear(), self._due.clear()

    @staticmethod
    def compute_due(tree: Any, d: int, nodes: np.ndarray | None = None) -> np.ndarray:
        """``due`` of ``nodes`` of level ``d`` (all when ``None``): a fetch at ``T`` needs the nodes
        with ``due > T`` (module docstring)."""
        lev = tree.levels[d]
        fetched, score, floor = lev.fetched, lev.score, lev.floor
        if nodes is not None:
            fetched, score, floor = fetched[nodes], score[nodes], floor[nodes]
        up = np.nextafter(score, math.inf)
        return np.where(fetched, np.minimum(up, floor), up)

    @staticmethod
    def _column(cols: dict, d: int, n: int, whole: Callable[[], np.ndarray],
                new: Callable[[int], np.ndarray]) -> np.ndarray:
        """The kept column of level ``d`` (``n`` nodes): built from ``whole()`` when first asked for,
        else extended by ``new(first new node)`` for the nodes added since (grown in place)."""
        g = cols.get(d)
        if g is None:
            g = Grow(np.float64, max(16, n))
            g.extend(whole())
            cols[d] = g
        elif g.n < n:
            g.extend(new(g.n))
        return g.v

    def due(self, tree: Any, d: int) -> np.ndarray:
        """Level ``d``'s ``due`` column, one per node (read it before the level changes)."""
        n = len(tree.levels[d])  # new nodes are not fetched yet: due = up(score)
        return self._column(self._due, d, n, lambda: self.compute_due(tree, d),
                            lambda a: np.nextafter(tree.levels[d].score[a:n], math.inf))

    @staticmethod
    def compute(tree: Any, d: int, nodes: np.ndarray | None = None) -> np.ndarray:
        """The next-entry scores of ``nodes`` of level ``d`` (all its nodes when ``None``), from the
        level's columns."""
        lev = tree.levels[d]
        fetched, made, tlen, score, off = lev.fetched, lev.made, lev.tlen, lev.score, lev.off
        if nodes is not None:
            fetched, made, tlen, score, off = fetched[nodes], made[nodes], tlen[nodes], score[nodes], off[nodes]
        lim = tlen.astype(np.int64)
        cap = tree.support.branch_cap
        if cap is not None:
            lim = np.minimum(lim, cap)
        has = fetched & (made < lim)
        out = np.full(score.shape[0], -math.inf)
        out[has] = score[has] + lev.pool_lp.v[off[has] + made[has]]
        return out

    def next_scores(self, tree: Any, d: int) -> np.ndarray:
        """Level ``d``'s next-entry scores, one per node (read it before the level changes)."""
        n = len(tree.levels[d])  # new nodes are not fetched yet: no next entry
        return self._column(self._next, d, n, lambda: self.compute(tree, d), lambda a: np.full(n - a, -math.inf))

    def committed(self, tree: Any, kind: str, rec: dict) -> None:
        """Bring the kept columns up to date with a commit just applied (``kind``, its record)."""
        if kind == "fetch":
            d, nodes = int(rec["d"]), rec["ns"]
            if d in self._due and len(nodes):
                a = self.due(tree, d)
                a[nodes] = self.compute_due(tree, d, np.asarray(nodes, np.int64))
        elif kind == "expand":
            d, nodes = int(rec["d"]), rec["cand"]
        else:
            return
        a = self._next.get(d)
        if a is None or not len(nodes):
            return
        a = self.next_scores(tree, d)
        a[nodes] = self.compute(tree, d, np.asarray(nodes, np.int64))

    def check(self, tree: Any) -> None:
        """Assert that every kept column equals the one the level's columns give (for tests)."""
        for d, g in self._next.items():
            a = g.v
            assert d < len(tree.levels), (d, len(tree.levels))
            n = len(tree.levels[d])
            assert a.shape[0] <= n, (d, a.shape[0], n)
            want = self.compute(tree, d)
            assert np.array_equal(a, want[: a.shape[0]]), f"next-entry scores of level {d} are stale"
            assert (want[a.shape[0]:] == -math.inf).all(), f"level {d}: new nodes already fetched"
        for d, g in self._due.items():
            a = g.v
            assert d < len(tree.levels) and a.shape[0] <= len(tree.levels[d]), (d, a.shape[0])
            want = self.compute_due(tree, d)
            assert np.array_equal(a, want[: a.shape[0]]), f"due column of level {d} is stale"
            assert not tree.levels[d].fetched[a.shape[0]:].any(), f"level {d}: new nodes already fetched"
        top = int(tree.hist_top)
        assert not tree.h_comp[top:].any() and not tree.h_pref[top:].any(), "histogram bins past hist_top"
