"""The numpy sweep of the certified DP (:mod:`arenum.beyond.certified`): the reference order of its
additions and products, which the compiled sweep (:mod:`arenum.beyond.sweepjit`) repeats bit for bit.

Functions of one :class:`~arenum.beyond.sweep.Sweep` (``sw``: its step tables ``sw.e``, block ``sw.B``, buffer ``sw.N`` and
origin ``sw.o``, ends, slack and progress): :func:`fill_unbounded` (one pass, ``K`` ascending, the
buffer sliding) and :func:`fill_level` (one length from the previous one), from :func:`block` (the
bulk steps of a block of cells, summed over tokens) and :func:`finish_cell` (the cheap steps, the
ends, the slack and the zero-cost steps of one cell).
"""
from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["block", "finish_cell", "slide", "fill_unbounded", "fill_level"]


def _by_rank(e: Any, mask: np.ndarray) -> tuple[np.ndarray, list[list[Any]]]:
    """The steps in ``mask`` by their rank among their state's (column order): ``(order, ranks)``,
    ``order`` the states by how many such steps they have (descending, ties by state), and
    ``ranks[j] = [c, flat, nxt, cost, weight, prob]``: the ``j``-th step of each of the first ``c``
    states of ``order`` (``flat``: its position in the ``(S, V)`` tables; ``prob`` read on first use by
    a mass sweep). Made once per mask, kept on ``e``."""
    cache = e.np_ranks
    hit = cache.get(id(mask))
    if hit is not None and hit[0] is mask:
        return hit[1]
    S, V = mask.shape
    deg = mask.sum(axis=1)
    order = np.argsort(-deg, kind="stable")
    start = np.zeros(S + 1, np.int64)
    np.cumsum(deg[order], out=start[1:])
    src, col = np.nonzero(mask[order])  # row-major over the ordered states: each one's columns ascending
    rank = np.arange(src.shape[0]) - start[src]
    by = np.argsort(rank, kind="stable")  # rank by rank, each in the order of the states
    flat = order[src[by]].astype(np.int64) * V + col[by]
    cuts = np.searchsorted(rank[by], np.arange(int(deg.max()) + 1 if S else 1))
    nx, cs, wt = e.nxt.reshape(-1), e.cost.reshape(-1), None if e.weight is None else e.weight.reshape(-1)
    ranks = []
    for a, b in zip(cuts[:-1], cuts[1:]):
        f = flat[a:b]
        ranks.append([b - a, f, nx[f], cs[f], None if wt is None else wt[f], None])
    cache[id(mask)] = (mask, (order, ranks))
    return order, ranks


def block(sw: Any, read: np.ndarray, K: int, B: int, bulk: np.ndarray, o: int) -> np.ndarray:
    """``(S, B)``: the sums over the steps in ``bulk`` for cells ``K..K+B-1``, reading ``read``
    (state-major, origin ``o``, ``PAD`` cells of padding, zero row ``S``). Each state's steps are
    added in column order, from 0.0: its ``j``-th steps of every state that has one, a rank at a time
    (:func:`_by_rank`), so only the steps in ``bulk`` are gathered."""
    e, P = sw.e, sw.B
    S = e.nxt.shape[0]
    W = read.shape[1]
    win = np.lib.stride_tricks.sliding_window_view(read.reshape(-1), B)
    order, ranks = _by_rank(e, bulk)
    if sw.mass and ranks and ranks[0][5] is None:  # the probabilities, read once
        pf = e.prob.reshape(-1)
        for r in ranks:
            r[5] = pf[r[1]]
    acc = np.zeros((S, B))
    rows = max(1, (1 << 22) // max(1, B))  # steps per gather: ~32 MB of windows
    for c, _, nxt, cost, weight, prob in ranks:
        for a in range(0, c, rows):
            sl = slice(a, a + rows)
            G = win[nxt[sl].astype(np.int64) * W + (np.maximum(K - cost[sl].astype(np.int64), -P) + P - o)]
            if sw.mass:
                G *= prob[sl, None]
            elif weight is not None:
                G *= weight[sl, None]
            acc[a : a + G.shape[0]] += G
    out = np.empty((S, B))
    out[order] = acc
    return out


def finish_cell(sw: Any, v: np.ndarray, read: np.ndarray, k: int, o: int) -> np.ndarray:
    """Add the cheap steps (unbounded mode) and the ends to the block sums ``v`` of cell ``k``;
    resolve the zero-cost steps."""
    e, S, P = sw.e, sw.S, sw.B
    if len(e.c_src):
        nz = ~e.c_zero
        vals = read[e.c_nxt[nz], k - e.c_cost[nz].astype(np.int64) + P - o]  # cost < B = P: inside the padding at worst
        if sw.mass:
            vals = vals * e.c_prob[nz]
        elif e.c_weight is not None:
            vals = vals * e.c_weight[nz]
        v += np.bincount(e.c_src[nz], weights=vals, minlength=S)
    if sw.end_cost is not None:
        v += np.where(sw.end_cost <= k, sw.end_prob if sw.mass else 1.0, 0.0)
    sw.slack(v)
    if e.c_zero.any():
        zs, zn, zp = e.c_src[e.c_zero], e.c_nxt[e.c_zero], e.c_prob[e.c_zero] if sw.mass else None  # counts: no p
        base = v
        zw = None if e.c_weight is None else e.c_weight[e.c_zero]
        for _ in range(e.zero_depth + 1):
            w = v[zn] * zp if sw.mass else (v[zn] if zw is None else v[zn] * zw)
            v = base + np.bincount(zs, weights=w, minlength=S)
            sw.slack(v)
    return v


def slide(sw: Any, k: int, B: int) -> None:
    """Make room in ``N`` for cells ``k..k+B-1``: move the last ``span + PAD`` cells to the front."""
    N, P = sw.N, sw.B
    if k + B - sw.o + P <= N.shape[1]:
        return
    new_o = k - sw.span - P
    keep = N[:, new_o - sw.o : k - sw.o + P].copy()  # cells new_o - P .. k - 1
    N[:, : keep.shape[1]] = keep
    N[:, keep.shape[1]:] = 0.0
    sw.o = new_o


def fill_unbounded(sw: Any, k0: int, k1: int) -> np.ndarray:
    """Cells ``k0..k1`` of every state into ``N`` (sliding it as needed); the start state's values."""
    P, start = sw.B, sw.start
    out = np.empty(k1 - k0 + 1)
    k = k0
    while k <= k1:
        B = min(P, k1 - k + 1)
        slide(sw, k, B)
        N, o = sw.N, sw.o
        blk = block(sw, N, k, B, sw.e.bulk, o)
        for i in range(B):  # cheap steps may read cells of this block: cell by cell
            N[: sw.S, P + k + i - o] = v = finish_cell(sw, blk[:, i], N, k + i, o)
            out[k + i - k0] = v[start]
        k += B
        sw.report(k - k0, k1 - k0 + 1)
    return out


def fill_level(sw: Any, read: np.ndarray, write: np.ndarray, K: int) -> None:
    """Cells ``0..K`` of one level from the previous one: every step reads ``read``, a block at once."""
    P, S = sw.B, sw.S
    k = 0
    while k <= K:
        B = min(P, K - k + 1)
        blk = block(sw, read, k, B, sw.e.possible, 0)
        if sw.end_cost is not None:
            blk += np.where(sw.end_cost[:, None] <= k + np.arange(B),
                            (sw.end_prob if sw.mass else np.ones(S))[:, None], 0.0)
        sw.slack(blk)
        write[:S, P + k : P + k + B] = blk
        k += B
