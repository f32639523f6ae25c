"""The compiled one-pass sweep of the certified DP (numba; imported only when numba is in use).

:func:`fill` computes cells ``k0..k1`` of one unbounded sweep of :mod:`arenum.beyond.certified` into
ring buffers of each state's last cells (:func:`ring_layout`: as many as the costliest step into it reads back), with the same float operations in the same order as
the numpy path (``_Sweep._block`` and ``_Sweep._finish_cell``), so both give the same values bit for
bit (``tests/beyond/test_certified_fast.py`` compares them):

- the bulk steps (cost ``>= B`` cells) of a state: ``acc = 0; acc += value * weight`` in column
  order (numpy's ``sum`` over the step axis adds in that order; adding the ``0.0`` of a missing step
  changes nothing);
- then the cheap steps (``0 < cost < B``): ``tmp = 0; tmp += value * weight`` in column order,
  ``v = acc + tmp`` (numpy's ``bincount`` then ``+=``); then the end (``+ 1`` or ``+ p``), the slack
  scaling, and the zero-cost steps resolved ``zero_depth + 1`` times, each followed by the slack.

No fused multiply-add (numba does not contract without ``fastmath``), no reordering.

Memory order (the same values): the bulk sums are made state-major (a window of ``B`` cells per
step). A state without cheap steps then has its block's cells from them alone (``+ 0.0``, the end,
the slack), state by state; the few with cheap steps (every state, with zero-cost steps) are summed
cell by cell, reading the block's done cells in place; the block goes into the rings state by state
once done. Cell by cell for every state, each cell touched a cache line of each of ``S`` rows: that
pass took more than half the sweep's time.
"""
from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit

_EXACT = 2.0**53


def csr_steps(e: Any, mass: bool) -> tuple[np.ndarray, ...]:
    """The bulk, cheap (nonzero) and zero-cost steps of ``e`` per state in column order, as CSR
    arrays ``(ptr, next, cost, weight)`` (zero-cost: ``(ptr, next, weight)``) for :mod:`sweepjit`.
    Next states and costs are int32 where they fit; the weights are empty for a count DP without
    merged steps (:func:`fill` reads them only when ``weighted``)."""
    S = e.S
    weighted = mass or e.weight is not None
    w = e.prob if mass else e.weight
    small = S < 2**31 and (int(e.cost[e.possible].max()) if e.possible.any() else 0) < 2**31
    it = np.int32 if small else np.int64

    def ptr(src: np.ndarray) -> np.ndarray:
        return np.concatenate([[0], np.cumsum(np.bincount(src, minlength=S))]).astype(np.int64)

    def weights(v: Any, sel: Any) -> np.ndarray:
        return np.ascontiguousarray(v[sel], np.float64) if weighted else np.zeros(0)

    bs, bj = np.nonzero(e.bulk)
    cw = e.c_prob if mass else e.c_weight
    nz, z = ~e.c_zero, e.c_zero
    return (ptr(bs), e.nxt[bs, bj].astype(it), e.cost[bs, bj].astype(it), weights(w, (bs, bj)),
            ptr(e.c_src[nz]), e.c_nxt[nz].astype(it), e.c_cost[nz].astype(it), weights(cw, nz),
            ptr(e.c_src[z]), e.c_nxt[z].astype(it), weights(cw, z))


def ring_layout(S: int, csr: tuple[np.ndarray, ...], B: int) -> tuple[np.ndarray, np.ndarray]:
    """``(roff, rmask)``: each state's ring of the last ``rmask[s] + 1`` cells at ``roff[s]`` of one
    flat buffer, ``rmask[s] + 1`` the smallest power of two (at least ``B``) above the costliest
    bulk or cheap step into ``s``: a read of ``s`` at cell ``k`` reaches back at most that far, and
    the cells ``k - rmask[s] - 1 .. k - 1`` are the ones its ring holds then (a bulk step's block of
    ``B`` cells ends before ``k``: its cost is at least ``B``). A state that only likely steps reach
    keeps a short ring: for a 5-gram of passwords the rings hold a tenth of what one width for every
    state (the costliest step) would."""
    far = np.zeros(S, np.int64)
    np.maximum.at(far, csr[1], csr[2])  # bulk steps: (next, cost)
    np.maximum.at(far, csr[5], csr[6])  # cheap steps
    size = np.full(S, B, np.int64)
    while True:
        short = size <= far
        if not short.any():
            break
        size[short] *= 2
    roff = np.concatenate([[0], np.cumsum(size)[:-1]]).astype(np.int64)
    return roff, size - 1


@njit(cache=True, nogil=True, boundscheck=False)
def minplus(m: np.ndarray, src: np.ndarray, cost: np.ndarray, first: np.ndarray, target: np.ndarray,
            K: int, cap: int, r: int, big: int) -> tuple[np.ndarray, int]:
    """The min-plus steps of ``CertifiedCounter._uncapped`` (the cheapest cost of ``r``-token paths
    to each state, ``big`` for none), taken while ``r < cap`` and some state costs ``<= K``: the
    numpy steps' integers (``min(big, m[src] + cost)`` per group of steps into one ``target``)."""
    S, G, E = m.shape[0], first.shape[0], src.shape[0]
    while r < cap:
        least = big
        for s in range(S):
            least = min(least, m[s])
        if least > K:
            break
        new = np.full(S, big, np.int64)
        for g in range(G):
            acc = big
            for e in range(first[g], first[g + 1] if g + 1 < G else E):
                acc = min(acc, m[src[e]] + cost[e])
            new[target[g]] = acc
        m = new
        r += 1
    return m, r


@njit(cache=True, nogil=True, boundscheck=False)
def _slack(v: np.ndarray, mass: bool, factor: float) -> None:
    for s in range(v.shape[0]):
        if mass or v[s] >= _EXACT:
            v[s] *= factor


@njit(cache=True, nogil=True, boundscheck=False)
def fill(ring: np.ndarray, roff: np.ndarray, rmask: np.ndarray, k0: int, k1: int, B: int,
         b_ptr: np.ndarray, b_nxt: np.ndarray, b_cost: np.ndarray, b_w: np.ndarray,
         c_ptr: np.ndarray, c_nxt: np.ndarray, c_cost: np.ndarray, c_w: np.ndarray,
         z_ptr: np.ndarray, z_nxt: np.ndarray, z_w: np.ndarray, zero_depth: int,
         end_cost: np.ndarray, end_val: np.ndarray, has_end: bool, weighted: bool, mass: bool,
         factor: float, start: int, order: np.ndarray, out: np.ndarray) -> None:
    """Cells ``k0..k1`` of every state into ``ring[roff[s] + (k & rmask[s])]`` (cells before ``k0``
    already there, negative cells read as 0); ``out[k - k0]``: the start state's value at cell ``k``.
    Each state has its own ring of ``rmask[s] + 1`` cells (a power of two, more than the costliest
    step into it plus ``B``): the values read of it lie that far back at most.

    ``b_*``/``c_*``/``z_*``: the bulk, cheap and zero-cost steps of each state in column order (CSR:
    ``ptr[s]..ptr[s+1]``), with their next state, cost (cells) and weight (``weighted``: multiply
    the read value by it; else the value itself). ``order``: the states in the order their bulk sums
    are made (any order gives the same values; states that read the same rows close together keep
    those rows in cache)."""
    S = roff.shape[0]
    acc = np.empty((S, B))
    v = np.empty(S)
    base = np.empty(S)
    zero = z_ptr[S] > 0
    n_cx = 0  # the states summed cell by cell: those with cheap steps (every state with zero-cost steps)
    cx = np.empty(S, np.int64)
    for s in range(S):
        if zero or c_ptr[s + 1] > c_ptr[s]:
            cx[n_cx] = s
            n_cx += 1
    k = k0
    while k <= k1:
        nb = min(B, k1 - k + 1)
        for s in order:  # bulk steps: their reads lie before this block (states sharing next states together)
            a = acc[s]
            for i in range(nb):
                a[i] = 0.0
            for e in range(b_ptr[s], b_ptr[s + 1]):
                n = b_nxt[e]
                o = roff[n]
                m = rmask[n]
                c0 = k - b_cost[e]
                w = b_w[e] if weighted else 1.0
                if c0 + nb - 1 < 0:
                    continue  # wholly before cell 0: adds 0.0
                st = c0 & m
                if c0 >= 0 and st + nb <= m + 1:  # one contiguous window
                    seg = ring[o + st : o + st + nb]
                    if weighted:
                        for i in range(nb):
                            a[i] += seg[i] * w
                    else:
                        for i in range(nb):
                            a[i] += seg[i]
                else:
                    for i in range(nb):
                        c = c0 + i
                        if c >= 0:
                            x = ring[o + (c & m)]
                            a[i] += x * w if weighted else x
        if not zero:  # a state without cheap steps: its cells from its bulk sums alone, state by state
            for s in range(S):
                if c_ptr[s + 1] > c_ptr[s]:
                    continue
                a = acc[s]
                for i in range(nb):
                    val = a[i] + 0.0
                    if has_end:
                        val += end_val[s] if end_cost[s] <= k + i else 0.0
                    if mass or val >= _EXACT:
                        val *= factor
                    a[i] = val
        for i in range(nb):  # cell by cell, the others: their cheap steps may read this block
            kk = k + i
            for j in range(n_cx):
                s = cx[j]
                tmp = 0.0
                for e in range(c_ptr[s], c_ptr[s + 1]):
                    c = kk - c_cost[e]
                    n = c_nxt[e]
                    if c >= k:
                        x = acc[n, c - k]  # a cell of this block, done
                    elif c >= 0:
                        x = ring[roff[n] + (c & rmask[n])]
                    else:
                        x = 0.0
                    tmp += x * c_w[e] if weighted else x
                val = acc[s, i] + tmp
                if has_end:
                    val += end_val[s] if end_cost[s] <= kk else 0.0
                if mass or val >= _EXACT:
                    val *= factor
                v[s] = val
            if zero:  # every state is in cx
                base[:] = v
                for _ in range(zero_depth + 1):
                    nv = np.empty(S)
                    for s in range(S):
                        tmp = 0.0
                        for e in range(z_ptr[s], z_ptr[s + 1]):
                            x = v[z_nxt[e]]
                            tmp += x * z_w[e] if weighted else x
                        nv[s] = base[s] + tmp
                    _slack(nv, mass, factor)
                    v[:] = nv
            for j in range(n_cx):
                s = cx[j]
                acc[s, i] = v[s]
            out[kk - k0] = acc[start, i]
        for s in range(S):  # the block into the rings, state by state
            o = roff[s]
            m = rmask[s]
            a = acc[s]
            for i in range(nb):
                ring[o + ((k + i) & m)] = a[i]
        k += nb
