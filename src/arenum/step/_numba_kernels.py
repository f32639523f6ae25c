"""The numba kernels behind :mod:`arenum.step.kernels` (imported only when numba is installed and in use).

Compiled on first use and cached on disk (numba's ``cache=True``: next to this file, or numba's
user-wide cache directory when that is not writable). Every kernel runs without the GIL.
See :mod:`arenum.step.kernels` for the precision argument.
"""
from __future__ import annotations

import math

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

CHUNK = 1024  # == arenum.step.kernels.CHUNK
_LOG2E = 1.4426950408889634
_LN2HI = 6.93147180369123816490e-01  # ln 2 = _LN2HI + _LN2LO; _LN2HI has 32 trailing zero bits: k * _LN2HI is exact
_LN2LO = 1.90821492927058770002e-10
# exp(r) on [-ln2/2, ln2/2]: Chebyshev.interpolate(np.exp, 10, domain=[-h, h]).convert(kind=Polynomial)
_C0, _C1, _C2, _C3, _C4, _C5 = (1.0000000000000007, 1.0000000000000044, 0.4999999999998164, 0.1666666666658354,
                                0.0416666666792648, 0.00833333337602627)
_C6, _C7, _C8, _C9, _C10 = (0.0013888885723103987, 0.00019841181925838063, 2.4804821741504393e-05,
                            2.763554450594373e-06, 2.643646585673587e-07)
_ONES = np.uint64(0x0101010101010101)
_TOP = np.uint64(56)
_OPTS = {"cache": True, "nogil": True, "boundscheck": False, "error_model": "numpy"}


@intrinsic
def _bits_to_float(typingctx, x):
    """The float64 whose bits are the int64 ``x``."""
    sig = types.float64(types.int64)

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.DoubleType())
    return sig, codegen


@njit(fastmath={"contract"}, **_OPTS)
def exp(v):
    """``exp(v)`` for ``v <= 709`` (larger: garbage, which the callers catch); below ``-708``,
    ``exp(-708)``; NaN stays NaN. Contract only (fused multiply-adds), no reassociation."""
    t = -708.0 if v < -708.0 else v
    kf = math.floor(t * _LOG2E + 0.5)
    r = (t - kf * _LN2HI) - kf * _LN2LO
    p = _C0 + r * (_C1 + r * (_C2 + r * (_C3 + r * (_C4 + r * (_C5 + r * (_C6 + r * (_C7 + r * (
        _C8 + r * (_C9 + r * _C10)))))))))
    return p * _bits_to_float((np.int64(kf) + 1023) << 52)


@njit(fastmath={"reassoc"}, **_OPTS)
def _chunk_cut(x, f, mk):
    """The sum of ``exp`` over ``x`` (vector lanes, any order); ``mk[j] = x[j] >= f``."""
    acc = 0.0
    for j in range(x.shape[0]):
        v = x[j]
        mk[j] = v >= f
        acc += exp(v)
    return acc


@njit(fastmath={"reassoc"}, **_OPTS)
def _chunk_sum(x):
    """The sum of ``exp`` over ``x`` (vector lanes, any order), and how many entries are ``> 0``."""
    acc = 0.0
    pos = 0
    for j in range(x.shape[0]):
        v = x[j]
        pos += v > 0.0
        acc += exp(v)
    return acc, pos


@njit(**_OPTS)
def heads(arr, floors, s, mask, pos, vals, counts, start):
    """Rows ``start..`` of ``arr``: ``s[i]``, and the entries ``>= floors[i]`` written at ``pos``
    (flat positions) and ``vals`` from 0, row-major, ``counts[i]`` of them per row; a row kept
    whole is not written (``counts[i] = -V``: the caller takes it from ``arr``). ``mask``:
    ``uint8`` scratch of ``V`` rounded up to whole words, zero past ``V``. Returns ``(next row,
    entries written)``; stops before a row whose entries do not fit (the caller gives a new buffer
    and calls again from that row)."""
    n, V = arr.shape
    cap = pos.shape[0]
    words = mask.view(np.uint64)
    m = 0
    for i in range(start, n):
        row = arr[i]
        f = floors[i]
        tot = 0.0
        for a in range(0, V, CHUNK):  # chunk sums added in order
            b = min(V, a + CHUNK)
            tot += _chunk_cut(row[a:b], f, mask[a:b])
        cnt = 0
        for w in range(words.shape[0]):  # bytes are 0 or 1: a word's byte sum is its top byte times ONES
            cnt += np.int64((words[w] * _ONES) >> _TOP)
        s[i] = tot
        if cnt == V:  # the whole row: not copied
            counts[i] = -V
            continue
        if m + cnt + 1 > cap:  # +1: the branchless copy below writes one slot past its last entry
            return i, m
        counts[i] = cnt
        base = i * V
        if cnt * 8 > V:  # dense: every entry written, the index advanced on the kept ones
            for j in range(V):
                pos[m] = base + j
                vals[m] = row[j]
                m += mask[j]
        elif cnt:  # sparse: only the words holding a kept entry
            for w in range(words.shape[0]):
                if words[w] != 0:
                    for j in range(w * 8, w * 8 + 8):
                        if mask[j]:
                            pos[m] = base + j
                            vals[m] = row[j]
                            m += 1
    return n, m


@njit(**_OPTS)
def rows(arr, s):
    """``s[i]``: the sum of ``exp`` over row ``i``; NaN when the row holds an entry ``> 0``."""
    n, V = arr.shape
    for i in range(n):
        row = arr[i]
        tot = 0.0
        bad = 0
        for a in range(0, V, CHUNK):
            b = min(V, a + CHUNK)
            acc, p = _chunk_sum(row[a:b])
            tot += acc
            bad += p
        s[i] = np.nan if bad else tot


@njit(**_OPTS)
def exp_values(x, out):
    """``out[j]`` = the kernels' ``exp(x[j])`` (for the tests)."""
    for j in range(x.shape[0]):
        out[j] = exp(x[j])


@njit(**_OPTS)
def _scaled_ceil(p, sc, tot, one, out):
    """``out[j] = ceil(p[j] * sc)`` (``ceil((p[j] / tot) * one)`` when ``sc`` overflowed), as
    :func:`arenum.beyond.draws.quantize_rows` computes them: no fast-math."""
    if sc == math.inf:
        for j in range(p.shape[0]):
            out[j] = math.ceil((p[j] / tot) * one)
    else:
        for j in range(p.shape[0]):
            out[j] = math.ceil(p[j] * sc)


@njit(fastmath={"reassoc", "nnan"}, **_OPTS)
def _sum_max(x):
    """Sum and max of integer-valued floats whose sum is below 2**53: exact in any order."""
    s = 0.0
    mx = 0.0
    for j in range(x.shape[0]):
        v = x[j]
        s += v
        mx = max(mx, v)
    return s, mx


@njit(**_OPTS)
def quantized_cum(p, tot, one, cum):
    """``cum[i]``: the running sums of row ``i``'s integer widths, ``ceil(p * (one / tot[i]))`` with
    the excess over ``one`` taken from the row's first largest width: exactly
    ``np.cumsum(draws.quantize_rows(p), axis=1)`` (the widths and their sums are integers below
    2**53: exact in any order, so the sums run as four interleaved chains)."""
    m, V = p.shape
    q = (V + 3) // 4
    for i in range(m):
        row = cum[i]
        _scaled_ceil(p[i], one / tot[i], tot[i], one, row)
        s, mx = _sum_max(row)
        for j in range(V):  # the first largest width takes the excess
            if row[j] == mx:
                row[j] -= s - one
                break
        a0 = a1 = a2 = a3 = 0.0  # running sums of the four quarters, side by side
        for k in range(q):
            a0 += row[k]
            row[k] = a0
            if q + k < V:
                a1 += row[q + k]
                row[q + k] = a1
            if 2 * q + k < V:
                a2 += row[2 * q + k]
                row[2 * q + k] = a2
            if 3 * q + k < V:
                a3 += row[3 * q + k]
                row[3 * q + k] = a3
        for j in range(q, min(V, 2 * q)):  # each quarter offset by the quarters before it
            row[j] += a0
        for j in range(2 * q, min(V, 3 * q)):
            row[j] += a0 + a1
        for j in range(3 * q, V):
            row[j] += a0 + a1 + a2
