"""The compiled one-pass sweep of the certified DP (numba; imported only when numba is in use).

:func:`fill` computes cells ``k0..k1`` of one unbounded sweep of :mod:`arenum.beyond.certified` into
ring buffers of each state's last cells (:func:`ring_layout`: as many as the costliest step into it reads back), with the same float operations in the same order as
the numpy path (:func:`arenum.beyond.sweepnp.block` and :func:`~arenum.beyond.sweepnp.finish_cell`), so both give the same values bit for
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
the slack), state by state, right after its bulk sums. A state with cheap steps whose next states
are all done by then (:func:`_ahead`: every state but those on a cycle of cheap steps, reading one,
or at an end of a zero-cost step) is done next, state by state in an order where each comes after
the states it reads: each cheap step reads the block's cells at once (``tmp`` per cell, summed in
column order as before). The rest are summed cell by cell, reading the block's done cells in
place: each cell touches a cache line of each of them (of the zxcvbn 4-gram's 4,469 and 4,619
states with cheap steps in its two count DPs, 94 and 175 go that way; all of them, cell by cell,
took 0.7 s of the 2.5 s of those two DPs). The zero-cost passes run over the sources of those
steps only: a state without such steps comes out of every pass as ``base + 0.0`` scaled, the same
each time, so it is made once (a state no such step touches: once more, at the end; state by state
for those outside this cell-by-cell set). The block goes into the rings state by state once done.
Cell by cell for every state, each cell touched a cache line of each of ``S`` rows: that pass took
more than half the sweep's time (one zero-cost step of the zxcvbn 4-gram's upper DP sent all 16,833
states there, and through both zero-cost passes).

Less work, the same values (:func:`windows`): a state is not summed below its cheapest completion
(0 there) and a step whose reads all lie there is skipped; a build for one final cell (``horizon``)
sums a state only up to the horizon less its cheapest path from the start, the last cell any start
cell within the horizon reads.
"""
from __future__ import annotations

from typing import Any

import numpy as np
from llvmlite import binding as _llvm
from llvmlite import ir as _ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from .certified_steps import EXACT_SUMS as _EXACT  # a compile-time constant of the kernels below
#: a bulk step's window is asked for (:func:`_prefetch_cell`) this many steps before it is read, in
#: blocks of ``_AHEAD_FROM`` cells or more: the hardware's own prefetch does not follow windows of 4-8
#: cache lines scattered this way (the zxcvbn 4-gram's two count DPs take 13% less time asked for),
#: while for 1-2 lines (blocks of 16 and 8 cells, the coarse grids) it does better alone (one grid's
#: DPs 0.47 s alone, 0.57 s asked for)
_AHEAD = 8
_AHEAD_FROM = 32


@intrinsic
def _prefetch_cell(typingctx: Any, arr: Any, idx: Any) -> Any:
    """Ask for the cache line holding ``arr[idx]`` (``llvm.prefetch``: a read, kept in every cache
    level; a hint: no value changes)."""
    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        aryty = signature.args[0]
        ary = context.make_array(aryty)(context, builder, args[0])
        ptr = cgutils.get_item_pointer(context, builder, aryty, ary, [args[1]], wraparound=False)
        i8p, i32 = _ir.IntType(8).as_pointer(), _ir.IntType(32)
        name = "llvm.prefetch.p0" if _llvm.llvm_version_info >= (15,) else "llvm.prefetch.p0i8"
        fn = cgutils.get_or_insert_function(builder.module, _ir.FunctionType(_ir.VoidType(), [i8p, i32, i32, i32]), name)
        builder.call(fn, [builder.bitcast(ptr, i8p), _ir.Constant(i32, 0), _ir.Constant(i32, 3), _ir.Constant(i32, 1)])
        return context.get_dummy_value()
    return types.void(arr, idx), codegen


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
    far = _farthest(S, csr[1], csr[2], csr[5], csr[6])  # bulk and cheap steps: (next, cost)
    size = np.full(S, B, np.int64)
    while True:
        short = size <= far
        if not short.any():
            break
        size[short] *= 2
    roff = np.concatenate([[0], np.cumsum(size)[:-1]]).astype(np.int64)
    return roff, size - 1


@njit(cache=True, nogil=True, boundscheck=False)
def _farthest(S: int, n1: np.ndarray, c1: np.ndarray, n2: np.ndarray, c2: np.ndarray) -> np.ndarray:
    """The costliest step into each state (0 for none), over two lists of ``(next, cost)``."""
    far = np.zeros(S, np.int64)
    for i in range(n1.shape[0]):
        far[n1[i]] = max(far[n1[i]], c1[i])
    for i in range(n2.shape[0]):
        far[n2[i]] = max(far[n2[i]], c2[i])
    return far


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
def _heap_push(hk: np.ndarray, hv: np.ndarray, n: int, key: int, val: int) -> int:
    i = n
    hk[i], hv[i] = key, val
    while i > 0:
        p = (i - 1) >> 1
        if hk[p] <= hk[i]:
            break
        hk[p], hk[i] = hk[i], hk[p]
        hv[p], hv[i] = hv[i], hv[p]
        i = p
    return n + 1


@njit(cache=True, nogil=True, boundscheck=False)
def _heap_pop(hk: np.ndarray, hv: np.ndarray, n: int) -> int:
    n -= 1
    hk[0], hv[0] = hk[n], hv[n]
    i = 0
    while True:
        l, r, m = 2 * i + 1, 2 * i + 2, i
        if l < n and hk[l] < hk[m]:
            m = l
        if r < n and hk[r] < hk[m]:
            m = r
        if m == i:
            return n
        hk[m], hk[i] = hk[i], hk[m]
        hv[m], hv[i] = hv[i], hv[m]
        i = m


@njit(cache=True, nogil=True, boundscheck=False)
def _dijkstra(ptr: np.ndarray, nxt: np.ndarray, cost: np.ndarray, dist: np.ndarray, big: int) -> None:
    """Cheapest costs over the CSR graph ``(ptr, nxt, cost)`` (non-negative integers) from the
    states whose ``dist`` is below ``big`` (their own cost), in place."""
    S = dist.shape[0]
    hk = np.empty(nxt.shape[0] + S, np.int64)
    hv = np.empty(nxt.shape[0] + S, np.int64)
    n = 0
    for s in range(S):
        if dist[s] < big:
            n = _heap_push(hk, hv, n, dist[s], s)
    while n > 0:
        d, u = hk[0], hv[0]
        n = _heap_pop(hk, hv, n)
        if d > dist[u]:
            continue
        for e in range(ptr[u], ptr[u + 1]):
            t = nxt[e]
            nd = d + cost[e]
            if nd < dist[t]:
                dist[t] = nd
                n = _heap_push(hk, hv, n, nd, t)


@njit(cache=True, nogil=True, boundscheck=False)
def windows(b_ptr: np.ndarray, b_nxt: np.ndarray, b_cost: np.ndarray, c_ptr: np.ndarray, c_nxt: np.ndarray,
            c_cost: np.ndarray, z_ptr: np.ndarray, z_nxt: np.ndarray, end_cost: np.ndarray, has_end: bool,
            start: int, horizon: int) -> tuple[np.ndarray, np.ndarray]:
    """``(lo_cell, hi_cell)`` of :func:`fill`: each state's cheapest completion (its first cell that
    may be nonzero: the least of its end and of each step's cost plus its next state's; ``big`` for
    none) and ``horizon`` less the cheapest path from ``start`` to it (``-1`` where none or past the
    horizon; ``horizon`` at most ``2**62``: no window)."""
    S = b_ptr.shape[0] - 1
    big = np.int64(1) << 62
    E = b_nxt.shape[0] + c_nxt.shape[0] + z_nxt.shape[0]
    fptr = np.zeros(S + 1, np.int64)  # every step, forward (CSR by state) and backward (by next state)
    rptr = np.zeros(S + 1, np.int64)
    for s in range(S):
        fptr[s + 1] = fptr[s] + (b_ptr[s + 1] - b_ptr[s]) + (c_ptr[s + 1] - c_ptr[s]) + (z_ptr[s + 1] - z_ptr[s])
    fn = np.empty(E, np.int64)
    fc = np.empty(E, np.int64)
    for s in range(S):
        i = fptr[s]
        for e in range(b_ptr[s], b_ptr[s + 1]):
            fn[i], fc[i] = b_nxt[e], b_cost[e]
            i += 1
        for e in range(c_ptr[s], c_ptr[s + 1]):
            fn[i], fc[i] = c_nxt[e], c_cost[e]
            i += 1
        for e in range(z_ptr[s], z_ptr[s + 1]):
            fn[i], fc[i] = z_nxt[e], 0
            i += 1
    for e in range(E):
        rptr[fn[e] + 1] += 1
    for s in range(S):
        rptr[s + 1] += rptr[s]
    fill_at = rptr[:-1].copy()
    rn = np.empty(E, np.int64)
    rc = np.empty(E, np.int64)
    for s in range(S):
        for e in range(fptr[s], fptr[s + 1]):
            t = fn[e]
            rn[fill_at[t]], rc[fill_at[t]] = s, fc[e]
            fill_at[t] += 1
    lo = np.full(S, big, np.int64)
    if has_end:
        for s in range(S):
            lo[s] = min(end_cost[s], big)
    else:
        lo[:] = 0
    _dijkstra(rptr, rn, rc, lo, big)
    hi = np.full(S, big, np.int64)
    if horizon >= big:
        return lo, hi
    d = np.full(S, big, np.int64)
    d[start] = 0
    _dijkstra(fptr, fn, fc, d, big)
    for s in range(S):
        hi[s] = horizon - d[s] if d[s] <= horizon else -1
    return lo, hi


@njit(cache=True, nogil=True, boundscheck=False, inline="always")
def _again(val: float, mass: bool, factor: float) -> float:
    """``val + 0.0``, scaled as a summed cell is: a value a zero-cost pass leaves as it was."""
    val = val + 0.0
    if mass or val >= _EXACT:
        val *= factor
    return val


def cheap_order(S: int, csr: tuple[np.ndarray, ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(inx, kind, pre)`` of :func:`fill` for the steps of :func:`csr_steps` (:func:`_unfinished`,
    :func:`_ahead`): made once per sweep, not at each call."""
    inx, kind = _unfinished(S, csr[4], csr[8], csr[9])
    return inx, kind, _ahead(S, inx, kind, csr[8], csr[4], csr[5])


@njit(cache=True, nogil=True, boundscheck=False)
def _unfinished(S: int, c_ptr: np.ndarray, z_ptr: np.ndarray, z_nxt: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(inx, kind)`` of :func:`fill`: the states not finished with their bulk sums (those with
    cheap steps, and those at either end of a zero-cost step, resolved within a cell), and ``kind``
    1 at the ends of a zero-cost step (its source or its next state)."""
    inx = np.zeros(S, np.bool_)
    kind = np.zeros(S, np.int8)
    for s in range(S):
        if c_ptr[s + 1] > c_ptr[s] or z_ptr[s + 1] > z_ptr[s]:
            inx[s] = True
        for e in range(z_ptr[s], z_ptr[s + 1]):
            inx[z_nxt[e]] = True
            kind[s] = kind[z_nxt[e]] = 1
    return inx, kind


@njit(cache=True, nogil=True, boundscheck=False)
def _ahead(S: int, inx: np.ndarray, kind: np.ndarray, z_ptr: np.ndarray, c_ptr: np.ndarray,
           c_nxt: np.ndarray) -> np.ndarray:
    """Of the states with cheap or zero-cost steps (``inx``), those whose cheap steps can be summed a
    block at a time: each reads only states done before it (no cheap steps, or listed earlier), so
    none is on a cycle of cheap steps or reads one, and none is at an end of a zero-cost step
    (``kind``, the sources in ``z_ptr``). In Kahn's order on the cheap steps between ``inx`` states."""
    pend = np.zeros(S, np.int64)
    cnt = np.zeros(S + 1, np.int64)
    for s in range(S):
        if inx[s]:
            for e in range(c_ptr[s], c_ptr[s + 1]):
                n = c_nxt[e]
                if inx[n]:
                    pend[s] += 1
                    cnt[n + 1] += 1
    for s in range(S):
        cnt[s + 1] += cnt[s]
    rev = np.empty(cnt[S], np.int64)
    at = cnt[:-1].copy()
    for s in range(S):
        if inx[s]:
            for e in range(c_ptr[s], c_ptr[s + 1]):
                n = c_nxt[e]
                if inx[n]:
                    rev[at[n]] = s
                    at[n] += 1
    out = np.empty(S, np.int64)
    n_out = 0
    for s in range(S):
        if inx[s] and pend[s] == 0 and kind[s] == 0 and z_ptr[s + 1] == z_ptr[s]:
            out[n_out] = s
            n_out += 1
    i = 0
    while i < n_out:
        n = out[i]
        i += 1
        for j in range(cnt[n], cnt[n + 1]):
            s = rev[j]
            pend[s] -= 1
            if pend[s] == 0 and kind[s] == 0 and z_ptr[s + 1] == z_ptr[s]:
                out[n_out] = s
                n_out += 1
    return out[:n_out]


@njit(cache=True, nogil=True, boundscheck=False)
def fill(ring: np.ndarray, roff: np.ndarray, rmask: np.ndarray, k0: int, k1: int, B: int,
         b_ptr: np.ndarray, b_nxt: np.ndarray, b_cost: np.ndarray, b_w: np.ndarray,
         c_ptr: np.ndarray, c_nxt: np.ndarray, c_cost: np.ndarray, c_w: np.ndarray,
         z_ptr: np.ndarray, z_nxt: np.ndarray, z_w: np.ndarray, zero_depth: int,
         end_cost: np.ndarray, end_val: np.ndarray, has_end: bool, weighted: bool, mass: bool,
         factor: float, start: int, order: np.ndarray, lo_cell: np.ndarray, hi_cell: np.ndarray,
         inx: np.ndarray, kind: np.ndarray, pre: np.ndarray, out: np.ndarray) -> None:
    """Cells ``k0..k1`` of every state into ``ring[roff[s] + (k & rmask[s])]`` (cells before ``k0``
    already there, negative cells read as 0); ``out[k - k0]``: the start state's value at cell ``k``.
    Each state has its own ring of ``rmask[s] + 1`` cells (a power of two, more than the costliest
    step into it plus ``B``): the values read of it lie that far back at most.

    ``b_*``/``c_*``/``z_*``: the bulk, cheap and zero-cost steps of each state in column order (CSR:
    ``ptr[s]..ptr[s+1]``), with their next state, cost (cells) and weight (``weighted``: multiply
    the read value by it; else the value itself). ``order``: the states in the order their bulk sums
    are made (any order gives the same values; states that read the same rows close together keep
    those rows in cache).

    ``lo_cell[s]``: the first cell where state ``s`` may be nonzero (:func:`windows`: its cheapest
    completion); below it the state is 0 and not summed, and a step whose reads all lie below it is
    skipped (adding ``0.0`` changes nothing). ``hi_cell[s]``: the last cell of ``s`` any cell of the
    start state up to the sweep's horizon reads (the horizon less the cheapest path from the start
    to ``s``); past it ``s`` is not summed and its ring holds 0 or an older value, never read for a
    start cell within the horizon (a step from a state summed at cell ``k`` reads a cell its next
    state sums). The start state's values are the same bit for bit either way.

    ``inx, kind, pre``: :func:`cheap_order` of these steps (the states not finished with their bulk
    sums, the ends of zero-cost steps, and those of the first summed a block at a time, in order)."""
    S = roff.shape[0]
    acc = np.empty((S, B))
    v = np.empty(S)
    base = np.empty(S)
    zero = z_ptr[S] > 0
    zs = np.flatnonzero(z_ptr[1:] > z_ptr[:-1])  # the sources of zero-cost steps
    zr = np.flatnonzero(kind == 1)  # both ends
    n_zs, n_zr = zs.shape[0], zr.shape[0]
    is_pre = np.zeros(S, np.bool_)
    is_pre[pre] = True
    n_cx = 0
    cx = np.empty(S, np.int64)
    for s in range(S):
        if inx[s] and not is_pre[s]:
            cx[n_cx] = s
            n_cx += 1
    tmp_b = np.empty(B)
    ahead = _AHEAD if B >= _AHEAD_FROM else 0  # steps ahead a window is asked for (0: not asked)
    k = k0
    while k <= k1:
        nb = min(B, k1 - k + 1)
        for s in order:  # bulk steps: their reads lie before this block (states sharing next states together)
            a = acc[s]
            for i in range(nb):
                a[i] = 0.0
            ns = min(nb, hi_cell[s] - k + 1)  # the cells of this block the state sums
            if ns <= 0 or k + ns - 1 < lo_cell[s]:
                continue
            e0, e1 = b_ptr[s], b_ptr[s + 1]
            # the first windows asked for, then each one `ahead` steps before its read (written out twice:
            # the same lines in a helper function, compiled apart, made the DPs twice as slow)
            for e in range(e0, min(e1, e0 + ahead)):
                cf = k - b_cost[e]
                if cf >= 0:
                    of, mf = roff[b_nxt[e]], rmask[b_nxt[e]]
                    for q in range(0, ns, 8):
                        _prefetch_cell(ring, of + ((cf + q) & mf))
            for e in range(e0, e1):
                f = e + ahead  # the window read that many steps on, asked for now
                if ahead and f < e1:
                    cf = k - b_cost[f]
                    if cf >= 0:
                        of, mf = roff[b_nxt[f]], rmask[b_nxt[f]]
                        for q in range(0, ns, 8):
                            _prefetch_cell(ring, of + ((cf + q) & mf))
                n = b_nxt[e]
                c0 = k - b_cost[e]
                if c0 + ns - 1 < lo_cell[n]:
                    continue  # every read a cell where the next state is 0: adds 0.0
                o = roff[n]
                m = rmask[n]
                w = b_w[e] if weighted else 1.0
                st = c0 & m
                if c0 >= 0 and st + ns <= m + 1:  # one contiguous window
                    seg = ring[o + st : o + st + ns]
                    if weighted:
                        for i in range(ns):
                            a[i] += seg[i] * w
                    else:
                        for i in range(ns):
                            a[i] += seg[i]
                else:
                    for i in range(ns):
                        c = c0 + i
                        if c >= 0:
                            x = ring[o + (c & m)]
                            a[i] += x * w if weighted else x
            if not inx[s]:  # summed state by state: its cells from its bulk sums alone, done here
                for i in range(ns):
                    val = a[i] + 0.0
                    if has_end:
                        val += end_val[s] if end_cost[s] <= k + i else 0.0
                    if mass or val >= _EXACT:
                        val *= factor
                    a[i] = _again(val, mass, factor) if zero else val  # zero-cost passes: scaled once more
        for s in pre:  # cheap steps into states already done: a window of the block at a time
            a = acc[s]
            for i in range(nb):
                tmp_b[i] = 0.0
            for e in range(c_ptr[s], c_ptr[s + 1]):
                n = c_nxt[e]
                cc = c_cost[e]
                w = c_w[e] if weighted else 1.0
                o = roff[n]
                m = rmask[n]
                an = acc[n]
                for i in range(nb):
                    c = k + i - cc
                    if c >= k:
                        x = an[c - k]
                    elif c >= 0:
                        x = ring[o + (c & m)]
                    else:
                        x = 0.0
                    tmp_b[i] += x * w if weighted else x
            for i in range(nb):
                kk = k + i
                if kk < lo_cell[s] or kk > hi_cell[s]:
                    a[i] = 0.0
                    continue
                val = a[i] + tmp_b[i]
                if has_end:
                    val += end_val[s] if end_cost[s] <= kk else 0.0
                if mass or val >= _EXACT:
                    val *= factor
                a[i] = _again(val, mass, factor) if zero else val
        for i in range(nb):  # cell by cell, the others: their cheap steps may read this block
            kk = k + i
            for j in range(n_cx):
                s = cx[j]
                if kk < lo_cell[s] or kk > hi_cell[s]:
                    v[s] = 0.0  # 0 below its first cell; past its last never read
                    continue
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
            if zero:  # resolved: each pass sums a source's zero-cost steps over the last pass's values
                for j in range(n_zr):
                    base[zr[j]] = v[zr[j]]
                for it in range(zero_depth + 1):
                    for j in range(n_zs):
                        s = zs[j]
                        tmp = 0.0
                        for e in range(z_ptr[s], z_ptr[s + 1]):
                            x = v[z_nxt[e]]
                            tmp += x * z_w[e] if weighted else x
                        val = base[s] + tmp
                        if mass or val >= _EXACT:
                            val *= factor
                        acc[s, i] = val  # the new values, kept apart until every source has read the old
                    for j in range(n_zs):
                        v[zs[j]] = acc[zs[j], i]
                    if it == 0:  # a state only read: base + 0.0, scaled, the same at every later pass
                        for j in range(n_zr):
                            s = zr[j]
                            if z_ptr[s + 1] == z_ptr[s]:
                                v[s] = _again(base[s], mass, factor)
                for j in range(n_cx):
                    s = cx[j]
                    if kind[s] == 0:  # neither end of a zero-cost step: base + 0.0, scaled once more
                        v[s] = _again(v[s], mass, factor)
            for j in range(n_cx):
                s = cx[j]
                acc[s, i] = v[s]
            out[kk - k0] = acc[start, i]
        for s in range(S):  # the block into the rings, state by state
            if hi_cell[s] < k or k + nb - 1 < lo_cell[s]:
                continue  # past its last cell (never read) or before its first (the ring's zeros)
            o = roff[s]
            m = rmask[s]
            a = acc[s]
            for i in range(nb):
                ring[o + ((k + i) & m)] = a[i]
        k += nb
