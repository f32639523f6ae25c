"""Score distributions as atoms (value in nats, weight): the arithmetic of the envelope indexes.

A :class:`Dist` holds float64 values in DESCENDING order with positive float64 weights. While few,
atoms are EXACT: a convolution adds values left to right exactly as a sequence's score is summed and
merges them only when equal as floats. Past :data:`MAX_PAIRS` pairwise sums a convolution works on a
grid of ``g_nats`` cells instead (values rounded to the grid, ``exact`` becomes False).

:class:`StepTable` is one pooled step table (entries carry the state they lead to), and
:func:`exact_counts` counts, under such tables, the completions whose float sum equals a given score
(the exact-order walk of the envelopes).

This module never calls a model and knows nothing of ranks: :mod:`arenum.beyond.envelope` and
:mod:`arenum.beyond.lattice` build on it.
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np

__all__ = ["Dist", "StepTable", "mix", "mix_all", "convolve", "to_grid", "exact_counts", "MAX_PAIRS", "GRID_PER_BUCKET"]

MAX_PAIRS = 1 << 21
"""Largest exact convolution (pairs of atoms); beyond it the envelope works on the grid."""
GRID_PER_BUCKET = 8
"""Grid cells per fine bucket once the atoms are no longer exact."""


class Dist:
    """Atoms: ``v`` float64 ``(n,)`` values (nats) in DESCENDING order, ``w`` float64 ``(n,)`` weights;
    ``exact`` False once values were rounded to the grid."""

    __slots__ = ("v", "w", "exact")

    def __init__(self, v: np.ndarray, w: np.ndarray, exact: bool) -> None:
        self.v, self.w, self.exact = v, w, exact

    @staticmethod
    def point() -> "Dist":
        """One atom of weight 1 at 0 (the empty prefix)."""
        return Dist(np.zeros(1), np.ones(1), True)

    @staticmethod
    def empty() -> "Dist":
        return Dist(np.zeros(0), np.zeros(0), True)

    @staticmethod
    def of(v: np.ndarray, w: np.ndarray, exact: bool = True) -> "Dist":
        """Merge equal values (float equality), sort descending, drop zero weights."""
        if v.size == 0:
            return Dist(np.zeros(0), np.zeros(0), exact)
        u, inv = np.unique(-v, return_inverse=True)
        ww = np.bincount(inv.reshape(-1), weights=w, minlength=u.size)
        keep = ww > 0
        return Dist(-u[keep], ww[keep], exact)

    def __len__(self) -> int:
        return int(self.v.size)

    def prune(self, floor: float) -> "Dist":
        """The atoms ``>= floor``."""
        k = int(np.searchsorted(-self.v, -floor, side="right"))
        return self if k == self.v.size else Dist(self.v[:k], self.w[:k], self.exact)

    def total(self) -> float:
        return float(self.w.sum())

    def count_ge(self, t: float) -> float:
        """Total weight of atoms with ``v >= t``."""
        k = int(np.searchsorted(-self.v, -t, side="right"))
        return float(self.w[:k].sum())

    def count_gt(self, t: float) -> float:
        """Total weight of atoms with ``v > t``."""
        k = int(np.searchsorted(-self.v, -t, side="left"))
        return float(self.w[:k].sum())

    def mass_ge(self, t: float) -> float:
        """``sum(w * exp(v))`` over atoms with ``v >= t``."""
        k = int(np.searchsorted(-self.v, -t, side="right"))
        return float((self.w[:k] * np.exp(self.v[:k])).sum())

    def cum(self) -> np.ndarray:
        return np.cumsum(self.w)

    def count_in(self, lo: np.ndarray, hi: np.ndarray, cum: np.ndarray) -> np.ndarray:
        """Per query: total weight of atoms with ``lo < v <= hi``."""
        neg = -self.v  # ascending
        a = np.searchsorted(neg, -hi, side="left")  # first atom with v <= hi
        b = np.searchsorted(neg, -lo, side="left")  # first atom with v <= lo
        c = np.concatenate(([0.0], cum))
        return c[b] - c[a]


def mix(a: Dist, b: Dist) -> Dist:
    """Mixture (sum of measures)."""
    if len(a) == 0:
        return b
    if len(b) == 0:
        return a
    return Dist.of(np.concatenate([a.v, b.v]), np.concatenate([a.w, b.w]), a.exact and b.exact)


def mix_all(parts: list[Dist], g_nats: float, limit: int = MAX_PAIRS) -> Dist:
    """Mixture of many distributions at once; past ``limit`` atoms the values go to the grid."""
    parts = [p for p in parts if len(p)]
    if len(parts) <= 1:
        return parts[0] if parts else Dist.empty()
    v = np.concatenate([p.v for p in parts])
    w = np.concatenate([p.w for p in parts])
    if v.size > limit:  # to the grid, by histogram (no sort)
        k0, h = to_grid(Dist(v, w, False), g_nats)
        nz = np.flatnonzero(h > 0)
        return Dist(-(k0 + nz) * g_nats, h[nz], False)
    return Dist.of(v, w, all(p.exact for p in parts))


def convolve(a: Dist, b: Dist, floor: float, g_nats: float, max_pairs: int = MAX_PAIRS) -> Dist:
    """Distribution of ``x + y`` (``x`` from ``a`` added LEFT of ``y`` from ``b``), pruned at ``floor``;
    exact while at most ``max_pairs`` pairs, else on the grid."""
    if len(a) == 0 or len(b) == 0:
        return Dist.empty()
    a = a.prune(floor)
    b = b.prune(floor)
    if len(a) == 0 or len(b) == 0:
        return Dist.empty()
    if a.exact and b.exact and len(a) * len(b) <= max_pairs:
        v = (a.v[:, None] + b.v[None, :]).reshape(-1)
        w = (a.w[:, None] * b.w[None, :]).reshape(-1)
        keep = v >= floor
        return Dist.of(v[keep], w[keep], True)
    ka, ha = to_grid(a, g_nats)
    kb, hb = to_grid(b, g_nats)
    kmax = int(math.floor(-floor / g_nats + 0.5))
    h = np.convolve(ha, hb)
    k0 = ka + kb
    n = max(0, min(h.size, kmax - k0 + 1))
    h = h[:n]
    nz = np.flatnonzero(h > 0)
    return Dist(-(k0 + nz) * g_nats, h[nz], False)


def to_grid(d: Dist, g_nats: float) -> tuple[int, np.ndarray]:
    """``(k0, h)``: weights on grid cells ``k0, k0+1, ...`` (cell ``k`` is the value ``-k g``)."""
    k = np.rint(-d.v / g_nats).astype(np.int64)
    k0 = int(k.min())
    h = np.bincount(k - k0, weights=d.w)
    return k0, h


class StepTable:
    """One pooled step table: continuing entries ``cv`` (values, nats), ``cn`` (state each leads to),
    ``cw`` (weights), and ``eos`` entries ``ev``/``ew``; all 1-D arrays. ``agree``: every context
    pooled had the same table (weights are then exactly 1); ``same_size``: every context's table had
    the same number of entries."""

    __slots__ = ("cv", "cn", "cw", "ev", "ew", "agree", "same_size")

    def __init__(self, cv, cn, cw, ev, ew, agree: bool, same_size: bool) -> None:
        self.cv, self.cn, self.cw, self.ev, self.ew, self.agree = cv, cn, cw, ev, ew, agree
        self.same_size = same_size

    @staticmethod
    def pool(tables: list[tuple[np.ndarray, np.ndarray]], n: int, eos_id: int | None,
             next_states: Callable[[np.ndarray], np.ndarray]) -> "StepTable":
        """Pool ``tables`` (one per context; ``n`` contexts weigh ``1 / n`` each; ``next_states``: the
        state each token leads to) into a StepTable."""
        i0, l0 = tables[0]
        agree = all(np.array_equal(i, i0) and np.array_equal(lp, l0) for i, lp in tables[1:])
        use = [tables[0]] if agree else tables
        wt = 1.0 if agree else 1.0 / n
        cv, cn, ev = [], [], []
        for ids, lps in use:
            if eos_id is not None:
                e = ids == eos_id
                if e.any():
                    ev.append(float(lps[e][0]))
                ids, lps = ids[~e], lps[~e]
            cv.append(lps)
            cn.append(next_states(ids))
        v = np.concatenate(cv)
        evv = np.array(ev, dtype=np.float64)
        same = len({i.size for i, _ in tables}) == 1
        return StepTable(v, np.concatenate(cn).astype(np.int64), np.full(v.size, wt), evv,
                         np.full(evv.size, wt), agree, same)


def exact_counts(tabs: list[dict[int, "StepTable"]], x: np.ndarray, st: np.ndarray, d0: int, stop: int, v: float, *,
                 fixed_len: int | None, terminating: bool) -> np.ndarray | None:
    """``(n, stop)`` float counts: row ``r`` column ``l - 1`` is the number of completions of
    length ``l <= stop`` from depth ``d0`` (running score ``x[r]`` in state ``st[r]``) whose
    left-to-right float sum is exactly ``v``, under the pooled tables."""
    n = x.size
    out = np.zeros((n, stop))
    tag, u, s, w = np.arange(n), x.astype(np.float64), st.astype(np.int64), np.ones(n)
    slack = 1e-7 * (1.0 + abs(v))
    for k in range(d0, min(stop, len(tabs))):
        keep = u >= v - slack  # steps are <= 0: an atom below v never climbs back
        tag, u, s, w = tag[keep], u[keep], s[keep], w[keep]
        if u.size == 0:
            break
        last = fixed_len is not None and k == fixed_len - 1
        nt, nu, ns, nw = [], [], [], []
        for c in np.unique(s).tolist():
            t = tabs[k].get(c)
            if t is None:
                continue
            m = s == c
            if terminating and t.ev.size:  # sequences ending here
                e = (u[m][:, None] + t.ev[None, :]) == v
                np.add.at(out[:, k], np.broadcast_to(tag[m][:, None], e.shape)[e],
                          np.broadcast_to((w[m][:, None] * t.ew[None, :]), e.shape)[e])
            if fixed_len is None and k == stop - 1:
                continue  # no longer sequence is asked for
            if last:
                e = (u[m][:, None] + t.cv[None, :]) == v
                np.add.at(out[:, k], np.broadcast_to(tag[m][:, None], e.shape)[e],
                          np.broadcast_to((w[m][:, None] * t.cw[None, :]), e.shape)[e])
                continue
            if m.sum() * t.cv.size > MAX_PAIRS:
                return None
            nu.append((u[m][:, None] + t.cv[None, :]).ravel())
            nw.append((w[m][:, None] * t.cw[None, :]).ravel())
            nt.append(np.repeat(tag[m], t.cv.size))
            ns.append(np.tile(t.cn, int(m.sum())))
        if last or not nu:
            break
        tag, u, s, w = _merge(np.concatenate(nt), np.concatenate(nu), np.concatenate(ns), np.concatenate(nw))
    return out


def _merge(tag: np.ndarray, u: np.ndarray, s: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, ...]:
    """Merge atoms equal in (tag, state, value), summing weights."""
    if tag.size == 0:
        return tag, u, s, w
    o = np.lexsort((u, s, tag))
    tag, u, s, w = tag[o], u[o], s[o], w[o]
    new = np.ones(tag.size, bool)
    new[1:] = (tag[1:] != tag[:-1]) | (s[1:] != s[:-1]) | (u[1:] != u[:-1])
    starts = np.flatnonzero(new)
    return tag[starts], u[starts], s[starts], np.add.reduceat(w, starts)
