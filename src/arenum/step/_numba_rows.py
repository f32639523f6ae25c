"""The compiled row pass of the plain callback's rows (numba; imported only when in use: :mod:`arenum.step.many`).

Two kernels over a chunk of parsed rows (row ``i`` is the next ``lens[i]`` entries of ``ids``/``lps``):

- :func:`check`: per row, the checks of the bulk parse in one pass (an entry NaN or ``> 0``, a
  duplicate token, no finite entry: the row's number is returned and the caller parses the chunk
  row by row, which raises that row's error), the finite entries counted, and whether the row is
  normalized to float64 precision (``odd[i]`` when not cleared: the caller applies the reference
  formula to it);
- :func:`cut_sort`: per row, the entries ``>= floors[i]`` written to the output, sorted by
  descending log-prob, equal log-probs in the row's order (stable: short heads placed by rank,
  the number of larger entries and of equal ones before; longer ones by a merge sort).

**The clearing bound.** A row is cleared (used verbatim) when ``|lse| + (len + 128) * 2**-52 <=
RENORM_TOL``, ``lse = mx + log(sum(exp(lps - mx)))`` with the kernels' ``exp`` (relative error at
most :data:`arenum.step.kernels.EXP_REL_ERR`, ``4e-15``, about 36 half-ulps; ``exp(-708)`` for
the entries below ``-708``, ``-inf`` included: under ``4096 * 3.3e-308`` in all) summed in any
order. Against the reference formula (numpy's ``exp``, pairwise ``sum``, ``log``: the same ``mx``
and the same differences ``lps - mx``): each sum is within ``(len - 1) * 2**-53`` of the exact sum
of its terms, relatively, in any order (non-negative terms); numpy's ``exp`` within a few ulps; each
``log`` of a sum in ``[1, len]`` within a few ulps of ``log(len) <= 8.4`` (``len <= 4096``). So the
two ``lse`` differ by less than ``(2 len + 40 + 8 * 17) * 2**-53 < (len + 128) * 2**-52``, and a
cleared row is one the reference formula leaves verbatim (its ``|lse| <= RENORM_TOL``); every
other row gets the reference formula. The values written are the model's own (no arithmetic on
them), so the heads are the numpy path's bit for bit (``tests/step/test_rowpass.py``).
"""
from __future__ import annotations

import math

from numba import njit

from ._numba_kernels import exp

_OPTS = {"cache": True, "nogil": True, "boundscheck": False, "error_model": "numpy"}
_ULP = 2.0**-52
_RANKED = 64  # heads up to this long are placed by rank; longer ones merge-sorted
_RUN = 16  # a merge sort's first runs (insertion-sorted)


@njit(fastmath={"reassoc"}, **_OPTS)
def _exp_sum(lps, a, b, mx):
    """``sum(exp(lps[a:b] - mx))``, the kernels' ``exp``, in any order (vector lanes)."""
    s = 0.0
    for j in range(a, b):
        s += exp(lps[j] - mx)
    return s


@njit(**_OPTS)
def check(ids, lps, lens, lo, stamp, dup, tol, odd, widths):
    """Rows in order: ``widths[i]`` (finite entries), ``odd[i]`` (not cleared, module docstring).
    ``dup``: check duplicate tokens with ``stamp`` (int64, zeros, one slot per id in
    ``lo .. lo + len(stamp) - 1``; every id must be in range). Returns the first row holding an
    entry NaN or ``> 0``, a duplicate token or no finite entry, else ``-1``."""
    a = 0
    for i in range(lens.shape[0]):
        b = a + lens[i]
        mx = -math.inf
        mark = i + 1
        w = 0
        for j in range(a, b):
            v = lps[j]
            if not v <= 0.0:
                return i
            if v > mx:
                mx = v
            w += v > -math.inf
            if dup:
                k = ids[j] - lo
                if stamp[k] == mark:
                    return i
                stamp[k] = mark
        if mx == -math.inf:
            return i
        lse = mx + math.log(_exp_sum(lps, a, b, mx))
        widths[i] = w
        odd[i] = not (abs(lse) + (lens[i] + 128) * _ULP <= tol)
        a = b
    return -1


@njit(**_OPTS)
def _insertion(v, t, a, b):
    """Stable descending sort of ``v[a:b]`` (``t`` follows)."""
    for k in range(a + 1, b):
        x = v[k]
        y = t[k]
        j = k - 1
        while j >= a and v[j] < x:
            v[j + 1] = v[j]
            t[j + 1] = t[j]
            j -= 1
        v[j + 1] = x
        t[j + 1] = y


@njit(**_OPTS)
def _sort(v, t, a, b, bv, bt):
    """Stable descending sort of ``v[a:b]`` (``t`` follows); ``bv``/``bt``: buffers of at least
    ``b - a`` entries."""
    n = b - a
    for r in range(a, b, _RUN):
        _insertion(v, t, r, min(b, r + _RUN))
    width = _RUN
    src_v, src_t, dst_v, dst_t = v, t, bv, bt
    s0, d0 = a, 0  # where the runs start in the source and in the destination
    in_buf = False
    while width < n:
        for lo in range(0, n, 2 * width):
            mid = min(n, lo + width)
            hi = min(n, lo + 2 * width)
            i, j, k = lo, mid, lo
            while i < mid and j < hi:
                if src_v[s0 + i] >= src_v[s0 + j]:  # the left one first on ties: stable
                    dst_v[d0 + k] = src_v[s0 + i]
                    dst_t[d0 + k] = src_t[s0 + i]
                    i += 1
                else:
                    dst_v[d0 + k] = src_v[s0 + j]
                    dst_t[d0 + k] = src_t[s0 + j]
                    j += 1
                k += 1
            while i < mid:
                dst_v[d0 + k] = src_v[s0 + i]
                dst_t[d0 + k] = src_t[s0 + i]
                i += 1
                k += 1
            while j < hi:
                dst_v[d0 + k] = src_v[s0 + j]
                dst_t[d0 + k] = src_t[s0 + j]
                j += 1
                k += 1
        src_v, src_t, dst_v, dst_t = dst_v, dst_t, src_v, src_t
        s0, d0 = d0, s0
        in_buf = not in_buf
        width *= 2
    if in_buf:  # the sorted values ended in the buffers
        for k in range(n):
            v[a + k] = src_v[s0 + k]
            t[a + k] = src_t[s0 + k]


@njit(**_OPTS)
def _rank_place(v, t, n, out_v, out_t, m, cnt):
    """``v[:n]`` (``t`` follows) written to ``out_v[m:m + n]`` in stable descending order: each
    entry's place is the number of larger entries plus the equal ones placed before it."""
    for k in range(n):
        cnt[k] = 0
    for k in range(n):
        x = v[k]
        r = 0
        for j in range(n):  # vectorized
            r += v[j] > x
        p = r + cnt[r]
        cnt[r] += 1
        out_v[m + p] = x
        out_t[m + p] = t[k]


@njit(**_OPTS)
def cut_sort(ids, lps, lens, floors, out_ids, out_lps, heads, bv, bt, cnt):
    """Rows in order: the entries ``>= floors[i]`` of row ``i`` written to ``out_ids``/``out_lps``
    (after the rows before it), sorted (descending, stable); ``heads[i]`` their number. ``bv``/``bt``/
    ``cnt``: buffers as long as the widest row. The outputs may be ``ids``/``lps`` themselves (in
    place): a row is read into the buffers before its head is written, at or before where it was
    read. Returns the entries written."""
    a = 0
    m = 0
    for i in range(lens.shape[0]):
        b = a + lens[i]
        f = floors[i]
        c = 0
        down = True
        prev = math.inf
        for j in range(a, b):
            v = lps[j]
            if v >= f:
                bv[c] = v
                bt[c] = ids[j]
                c += 1
                down &= v <= prev
                prev = v
        if not down and c <= _RANKED:
            _rank_place(bv, bt, c, out_lps, out_ids, m, cnt)
        else:
            for j in range(c):
                out_lps[m + j] = bv[j]
                out_ids[m + j] = bt[j]
            if not down:
                _sort(out_lps, out_ids, m, m + c, bv, bt)
        heads[i] = c
        m += c
        a = b
    return m
