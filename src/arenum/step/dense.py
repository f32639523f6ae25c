"""Array kernels of the step-table parser: one sweep over a dense ``(n, V)`` batch, and the sorts.

- :func:`sweep`: block by block, while each block of rows is in cache, ``s[i] = sum(exp(row i))``
  (the normalization check), optionally the row maxima, and the entries at or above per-row floors
  (the head cut). One ``exp`` pass, one reduction, one comparison per block.
- :func:`desc_order`: the permutation sorting rows of entries (grouped by row) by descending value,
  equal values in their given order: the table order of :mod:`arenum.step.tables`.

The sorts use one packed ``uint64`` key per entry: the order-preserving bits of ``-value`` with
the low bits replaced by the entry's position in its row. Sorting the keys (a plain ``np.sort``,
several times faster than an ``argsort``) orders by value and breaks exact ties by position,
which is the stable order; values that differ only in the replaced bits may come out in the
wrong order, so every sorted row is checked (values non-increasing) and a row that fails is
sorted again by a stable ``argsort``. The result is always exactly the stable sort's.

This module knows nothing of models, prefixes or messages: :mod:`arenum.step.tables` validates and
words the errors.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

__all__ = ["DOT_MAX_V", "sweep", "sorted_heads", "desc_order", "desc_sort_row"]

DOT_MAX_V = 4096
"""Rows up to this width are summed by a BLAS dot product with ones (about 1.7x faster than
``np.sum``). Any summation order of ``V`` non-negative terms is within ``(V - 1) * 2**-53`` of the
exact sum, relatively: ``4.6e-13`` at this width, which with the fast check's ``1e-13`` stays
inside ``RENORM_TOL`` (``1e-12``), so a row the check clears is still one the reference formula
would leave verbatim. Wider rows use numpy's pairwise sum (error ``O(log V)`` ulps)."""
_SORT_ENTRIES = 1 << 16  # rows are sorted in chunks of about this many (padded) keys
_CUT_ENTRIES = 1 << 15  # candidates are cut and sorted in chunks of pieces of about this many
_PAD = np.uint64(2**64 - 1)
_SIGN = np.uint64(2**63)

Buffers = Callable[..., np.ndarray]
"""``bufs(shape, dtype, slot) -> array``: a reusable work buffer (:class:`arenum.step.tables.Scratch`)."""


def sweep(arr: np.ndarray, step: int, bufs: Buffers, floors: np.ndarray | None = None, *,
          row_max: bool = False, candidates: int = 64
          ) -> tuple[np.ndarray, np.ndarray | None, list[np.ndarray], list[np.ndarray]]:
    """One pass over a C-contiguous float64 ``(n, V)`` batch, ``step`` rows at a time.

    Returns ``(s, mx, flats, lps)``: ``s[i] = sum(exp(arr[i]))`` (NaN or ``inf`` for rows holding
    NaN or ``+inf``), ``mx`` the row maxima when ``row_max`` (else ``None``), and with ``floors``
    per block the flat positions (row-major, in order) and values of the candidates: a superset
    of the entries ``>= floors[row]`` (:func:`sorted_heads` applies each row's own floor).

    The cut compares a block with its lowest floor (a scalar: about 3x faster than the per-row
    broadcast). Where the floors of a block are so spread that more than
    ``candidates`` entries per row pass, the block is compared row by row instead.
    """
    n, V = arr.shape
    s = np.empty(n)
    mx = np.empty(n) if row_max else None
    flats: list[np.ndarray] = []
    vals: list[np.ndarray] = []
    if n == 0 or V == 0:
        s[:] = 0.0
        if mx is not None:
            mx[:] = -np.inf
        return s, mx, flats, vals
    k = min(n, step)
    ebuf = bufs((k, V), np.float64, "exp")
    ones = np.ones(V) if V <= DOT_MAX_V else None
    if floors is not None:
        mbuf = bufs((k, V), np.bool_, "mask")
        lows = np.minimum.reduceat(floors, np.arange(0, n, step))
        whole = False
    for j, a in enumerate(range(0, n, step)):
        b = min(n, a + step)
        blk = arr[a:b]
        e = ebuf[: b - a]
        np.exp(blk, out=e)
        if ones is not None:
            np.dot(e, ones, out=s[a:b])
        else:
            np.sum(e, axis=1, out=s[a:b])
        if mx is not None:
            np.max(blk, axis=1, out=mx[a:b])
        if floors is not None:
            mk = mbuf[: b - a]
            np.greater_equal(blk, lows[j], out=mk)
            if whole and np.count_nonzero(mk) == mk.size:  # a run of whole rows (the heads near the root)
                flats.append(np.arange(a * V, b * V))
                vals.append(blk.reshape(-1))
                continue
            f = np.flatnonzero(mk)
            whole = f.shape[0] == mk.size  # nonzero is slow on a full mask: count first next time
            if f.shape[0] > candidates * (b - a):
                np.greater_equal(blk, floors[a:b, None], out=mk)
                f = np.flatnonzero(mk)
            vals.append(blk.reshape(-1)[f])
            if a:
                f += a * V
            flats.append(f)
    return s, mx, flats, vals


def sorted_heads(flats: list[np.ndarray], vals: list[np.ndarray], V: int, floors: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The heads of a :func:`sweep`'s candidates: ``(row, col, lp, pos_rows)``, the entries
    ``>= floors[row]``, rows in order, each sorted (descending, ties in column order), and the
    rows holding an entry ``> 0``. Worked in chunks of blocks (small temporaries, in cache)."""
    total = sum(f.shape[0] for f in flats)
    r_out, c_out, l_out = np.empty(total, np.int64), np.empty(total, np.int64), np.empty(total)
    pos: list[np.ndarray] = []
    i = m = 0
    while i < len(flats):
        j, k = i, 0
        while j < len(flats) and (k == 0 or k + flats[j].shape[0] <= _CUT_ENTRIES):
            k += flats[j].shape[0]
            j += 1
        f = flats[i] if j == i + 1 else np.concatenate(flats[i:j])
        lp = vals[i] if j == i + 1 else np.concatenate(vals[i:j])
        i = j
        if not f.shape[0]:
            continue
        r = f // V
        ok = lp >= floors[r]
        if not ok.all():
            keep = np.flatnonzero(ok)
            if not keep.shape[0]:
                continue
            f, lp = f[keep], lp[keep]
            r = f // V
        o = desc_order(lp, np.bincount(r - int(r[0])))
        k = f.shape[0]
        rr, cc, ll = r_out[m : m + k], c_out[m : m + k], l_out[m : m + k]
        rr[:] = r  # the order keeps every row in place
        np.take(f, o, out=cc)
        cc -= rr * V
        np.take(lp, o, out=ll)
        m += k
        p = ll > 0.0
        if p.any():
            pos.append(rr[p])
    return r_out[:m], c_out[:m], l_out[:m], np.concatenate(pos) if pos else np.zeros(0, np.int64)


def _keys(vals: np.ndarray, bits: int) -> np.ndarray | None:
    """Order-preserving ``uint64`` keys of ``-vals`` with the low ``bits`` cleared; ``None`` when a
    value is above 0: the caller sorts those another way (tables are validated: no NaN here)."""
    y = np.subtract(0.0, vals)  # -vals, with 0.0 - 0.0 = 0.0 - (-0.0) = +0.0: equal values must tie
    u = y.view(np.uint64)
    if u.shape[0] and u.max() >= _SIGN:
        return None
    u &= np.uint64(~((1 << bits) - 1) & (2**64 - 1))
    return u


def desc_sort_row(vals: np.ndarray) -> np.ndarray:
    """Permutation sorting one row descending, equal values in their given order (the stable
    ``argsort(-vals)``), through a packed-key sort."""
    N = vals.shape[0]
    if N < 2:
        return np.arange(N)
    bits = (N - 1).bit_length()
    key = _keys(vals, bits)
    if key is None or bits > 40:
        return np.argsort(-vals, kind="stable")
    key |= np.arange(N, dtype=np.uint64)
    key.sort()
    perm = (key & np.uint64((1 << bits) - 1)).view(np.int64)
    v = vals[perm]
    if (v[1:] > v[:-1]).any():  # values within the cleared bits, out of order
        return np.argsort(-vals, kind="stable")
    return perm


def desc_order(vals: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """Permutation sorting entries grouped by row (row ``i`` is the next ``lens[i]`` entries) by
    descending value within each row, equal values in their given order, rows kept in place:
    ``lexsort((-vals, row))`` for grouped rows. Chunks of rows are padded to a ``(rows, width)``
    key array (in cache) and sorted along the rows."""
    N = vals.shape[0]
    out = np.empty(N, np.int64)
    if N == 0:
        return out
    lens = lens.astype(np.int64, copy=False)
    ends = np.cumsum(lens)
    n = lens.shape[0]
    i = 0
    while i < n:
        e0 = int(ends[i] - lens[i])
        if lens[i] * 2 > _SORT_ENTRIES:  # a wide row alone
            out[e0 : e0 + lens[i]] = desc_sort_row(vals[e0 : e0 + lens[i]]) + e0
            i += 1
            continue
        j = int(np.searchsorted(ends, e0 + _SORT_ENTRIES, side="right"))
        j = max(i + 1, min(j, n))
        while j > i + 1 and (j - i) * int(lens[i:j].max()) > 2 * _SORT_ENTRIES:
            j = i + max(1, (j - i) // 2)
        e1 = int(ends[j - 1])
        out[e0:e1] = _chunk_order(vals[e0:e1], lens[i:j]) + e0
        i = j
    return out


def _chunk_order(vals: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """:func:`desc_order` of one chunk (entries relative to the chunk)."""
    N = vals.shape[0]
    R = lens.shape[0]
    mc = int(lens.max())
    if mc < 2:
        return np.arange(N)
    bits = (mc - 1).bit_length()
    key = _keys(vals, bits)
    if key is None:
        return _stable_chunk(vals, lens)
    low = np.uint64((1 << bits) - 1)
    if int(lens.min()) == mc:  # rows of one width: no padding
        key = key.reshape(R, mc)
        key |= np.arange(mc, dtype=np.uint64)
        n_valid = None
    else:
        starts = np.cumsum(lens) - lens
        rr = np.repeat(np.arange(R), lens)
        pos = np.arange(N) - starts[rr]
        padded = np.full((R, mc), _PAD)
        padded[rr, pos] = key | pos.view(np.uint64)
        key = padded
        n_valid = np.arange(mc)[None, :] < lens[:, None]
    key.sort(axis=1)
    key &= low
    pos = key.view(np.int64)
    pos += (np.cumsum(lens) - lens)[:, None]
    perm = pos.reshape(-1) if n_valid is None else pos[n_valid]
    v = vals[perm]
    if N > 1:
        down = v[1:] > v[:-1]
        if down.any():
            b = np.cumsum(lens)[:-1]
            down[b[(b > 0) & (b < N)] - 1] = False  # across a row boundary: no order asked
            if down.any():
                return _stable_chunk(vals, lens)
    return perm


def _stable_chunk(vals: np.ndarray, lens: np.ndarray) -> np.ndarray:
    rr = np.repeat(np.arange(lens.shape[0]), lens)
    return np.lexsort((-vals, rr))
