"""Exact sums of nonnegative float64 values, as integers: order-independent, mergeable masses.

Every finite float64 is an integer multiple of ``2**-1074`` (the smallest subnormal), so a sum of
them times ``2**SCALE`` (``SCALE = 1074``) is an integer: :func:`exact_sum` returns that integer
(a Python ``int``, "units"), whatever the order or the grouping of the terms. Sums computed in
several processes (shards) add exactly (``+`` on ints) and round once at the end
(:func:`to_float`), so one process and a merge of shards give the same float, bit for bit.

How (vectorized; ``exact_sum(np.exp(x))`` costs about 3x ``np.exp(x).sum()``): each value's
bits give its biased exponent ``E`` (the bin) and its 53-bit significand, split by a bit mask into
a high part (its top 26 bits, a float with the same exponent) and a low part (the other 27 bits,
``v - hi``, exact). ``np.bincount`` sums the parts per bin in float64; those sums are exact while a
bin holds fewer than ``2**26`` values (``_CHUNK`` bounds every accumulation), and a short loop
over the non-empty bins turns them into integers.

Two variants serve an index: :class:`GroupedSum` sums per group (bucket) at once, scaling each
value by its group's window (a few binades, one ulp as the unit) so that one bin per group
suffices; :class:`PrefixSums` keeps the exact running sums of one sorted bucket, so a mass inside
it is O(1) and the smallest head reaching a mass a binary search.

Item values: an item of score ``x`` has the value ``fl(exp(x))`` as numpy computes it on a
contiguous float64 array (:func:`values`). numpy's ``exp`` differs from ``math.exp`` in the last
bit for some inputs; arenum uses numpy's everywhere, so two processes on machines with the same
numpy build and CPU features give the same values.

This module knows nothing of sequences or indexes: the caller says which values, which groups
and which windows (a wrong window costs time, never exactness).
"""
from __future__ import annotations

import bisect
import math

import numpy as np

__all__ = ["SCALE", "GroupedSum", "PrefixSums", "exact_sum", "float_units", "to_float", "values"]

SCALE = 1074
"""Values are counted in units of ``2**-SCALE`` (the smallest positive subnormal float64)."""

_CHUNK = 1 << 26
"""At most this many values are summed in float per bin before conversion to integers (the float
sums of the 26-bit high parts and 27-bit low parts stay below ``2**53``: exact)."""
_STEP = 1 << 16
"""Values processed at a time (temporaries stay in cache)."""
_NE = 2048
_HI_MASK = np.int64(~((1 << 27) - 1))  # keeps sign, exponent and the top 25 fraction bits
_BIG_EXP = 997
_BIG = 2.0**_BIG_EXP
"""Bins of values at least this large could overflow a float sum; such values are summed scaled
(below it, no block of ``_STEP`` values can overflow, so the retry always ends)."""


def values(x: np.ndarray) -> np.ndarray:
    """``fl(exp(x))`` of scores ``x`` as numpy computes it on a contiguous float64 array (the one
    definition of an item's value everywhere in arenum)."""
    return np.exp(np.ascontiguousarray(x, np.float64))


def _parts(c: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(biased exponent, high part, low part) of the float64 values ``c`` (contiguous)."""
    i = c.view(np.int64)
    E = i >> 52
    hi = (i & _HI_MASK).view(np.float64)
    with np.errstate(invalid="ignore"):  # inf - inf: refused by the caller
        lo = c - hi
    return E, hi, lo


def _bad(c: np.ndarray) -> ValueError:
    bad = c[~(np.isfinite(c) & (c >= 0))]
    return ValueError(f"exact_sum: values must be finite and >= 0, got {bad[0]!r}")


def _bin_units(H: np.ndarray, L: np.ndarray, E: np.ndarray) -> int:
    """The exact int (units) of bins with exponents ``E`` holding float sums ``H`` (high parts)
    and ``L`` (low parts)."""
    nz = np.flatnonzero((H != 0) | (L != 0))
    if nz.shape[0] == 0:
        return 0
    E = np.maximum(E[nz], 1)  # subnormals (E == 0) have the ulp of E == 1
    q = E - 1075  # the bin's ulp is 2**q
    Kh = np.ldexp(H[nz], -(q + 27)).astype(np.int64).tolist()
    Kl = np.ldexp(L[nz], -q).astype(np.int64).tolist()
    tot = 0
    for kh, kl, e in zip(Kh, Kl, (E - 1).tolist()):
        tot += ((kh << 27) + kl) << e
    return tot


def exact_sum(v: np.ndarray) -> int:
    """``sum(v) * 2**SCALE`` exactly, as an int: the same as
    ``int(sum(map(Fraction, v)) * 2**SCALE)``, for any order or split of ``v`` (sums of parts add).

    ``v``: finite float64 values ``>= 0`` (subnormals and zeros included); ``ValueError`` otherwise.

    >>> import numpy as np
    >>> v = np.array([0.1, 0.2, 0.3, 1e-300])
    >>> S = exact_sum(v)
    >>> S == exact_sum(v[::-1]) == exact_sum(v[:1]) + exact_sum(v[1:])
    True
    >>> to_float(S), float(sum(v))  # rounded once, vs rounded at every addition
    (0.6, 0.6000000000000001)
    >>> to_float(exact_sum(np.array([1.0, 1e-16, 1e-16]))), 1.0 + 1e-16 + 1e-16
    (1.0000000000000002, 1.0)
    """
    v = np.ascontiguousarray(v, np.float64).ravel()
    n = v.shape[0]
    tot = 0
    Eall = np.arange(_NE)
    for a in range(0, n, _CHUNK):
        b = min(n, a + _CHUNK)
        H = np.zeros(_NE)
        L = np.zeros(_NE)
        with np.errstate(over="ignore"):  # a bin that overflows is caught below and summed scaled
            for s in range(a, b, _STEP):
                c = v[s : min(b, s + _STEP)]
                E, hi, lo = _parts(c)
                try:
                    H += np.bincount(E, hi, _NE)
                    L += np.bincount(E, lo, _NE)
                except ValueError:  # a negative exponent key: the sign bit is set
                    if not (c >= 0).all():
                        raise _bad(c) from None
                    E, hi, lo = _parts(c + 0.0)  # only -0.0: make it +0.0
                    H += np.bincount(E, hi, _NE)
                    L += np.bincount(E, lo, _NE)
        if H[-1] != 0 or L[-1] != 0:  # E == 2047: inf or nan
            raise _bad(v[a:b])
        if not (np.isfinite(H).all() and np.isfinite(L).all()):  # a bin of huge values overflowed
            c = v[a:b]
            big = c >= _BIG
            tot += exact_sum(c[~big]) + (exact_sum(c[big] / _BIG) << _BIG_EXP)
            continue
        tot += _bin_units(H, L, Eall)
    return tot


def to_float(S: int) -> float:
    """``S * 2**-SCALE`` correctly rounded to float64 (round half to even; subnormal results
    included: Python's int true division rounds once). ``inf`` past the largest float."""
    try:
        return S / (1 << SCALE)
    except OverflowError:
        return math.inf if S > 0 else -math.inf


def float_units(x: float) -> int:
    """``x * 2**SCALE`` exactly (an int: every finite float is a multiple of ``2**-SCALE``), to
    compare a float with an exact sum."""
    x = float(x)
    if not math.isfinite(x):
        raise ValueError(f"float_units: x must be finite, got {x!r}")
    n, d = x.as_integer_ratio()
    return n << (SCALE - (d.bit_length() - 1))


class PrefixSums:
    """Exact prefix sums of ``v`` (finite, ``>= 0``): ``units(k) == exact_sum(v[:k])`` for
    ``0 <= k <= len(v)``, and :meth:`reaching`. O(1) a query after one pass when the values span
    at most 10 binary exponents (an index bucket does): two running sums of the values' high and low
    bits in units of the lowest exponent's ulp, exact in float64 (or int64 with subnormals or
    zeros). Otherwise each query sums exactly."""

    def __init__(self, v: np.ndarray) -> None:
        v = np.ascontiguousarray(v, np.float64).ravel()
        self.v: np.ndarray | None = v
        self.n = n = v.shape[0]
        self._fast = False
        if n == 0 or n >= _CHUNK:
            return
        vmin, vmax = float(v.min()), float(v.max())
        if n < 1 << 18 and 2.0**-1022 <= vmin and vmax < math.inf and math.frexp(vmax)[1] - math.frexp(vmin)[1] <= 9:
            # normal values in a few binades (an index bucket): in units of the lowest binade's ulp
            # 2**q every value is an integer below 2**62, split exactly into its bits from 2**27
            # up (< 2**35) and below (< 2**27); float running sums of those stay exact
            e = math.frexp(vmin)[1] - 53  # q
            w = np.ldexp(v, -e)
            h = w * 2.0**-27
            np.floor(h, out=h)
            w -= h * 2.0**27
            self._h, self._l, self._e = np.cumsum(h), np.cumsum(w), e + SCALE
            self._fast = True
            self.v = None  # not needed: the running sums say everything
            return
        i = v.view(np.int64)
        E = i >> 52
        lo, hi = int(E.min()), int(E.max())
        if not (lo >= 0 and hi < _NE - 1):  # a sign bit, inf or nan: exact_sum says which
            exact_sum(v)
        Ee = np.maximum(E, 1)  # subnormals have the ulp of E == 1
        nzE = Ee[v != 0]
        lo = int(nzE.min()) if nzE.shape[0] else 1
        if nzE.shape[0] and int(nzE.max()) - lo > 9:
            return
        M = i & ((1 << 52) - 1)
        M |= (E > 0).astype(np.int64) << 52  # the implicit bit of normal values
        sh = np.maximum(Ee - lo, 0)  # zeros: M == 0, any shift
        self._h = np.cumsum((M >> 27) << sh)  # < 2**35 a term: no overflow
        self._l = np.cumsum((M & ((1 << 27) - 1)) << sh)
        self._e = lo - 1  # units(k) = (h[k - 1] * 2**27 + l[k - 1]) << _e
        self._fast = True
        self.v = None

    def _rel(self, k: int) -> int:
        return (int(self._h[k - 1]) << 27) + int(self._l[k - 1]) if k else 0

    def units(self, k: int) -> int:
        """``exact_sum(v[:k])``."""
        if self._fast:
            return self._rel(k) << self._e
        return exact_sum(self.v[:k]) if k else 0

    def reaching(self, units: int) -> int:
        """The smallest ``k`` with ``units(k) >= units`` (``0 < units <= units(len(v))``, else
        ``ValueError``). Equal values are interchangeable, so ``k`` is the same for any order of
        ties: where ``v[a:k]`` are equal values ``w`` and ``units(a) < units``, it is
        ``a + ceil((units - units(a)) / float_units(w))``."""
        n = self.n
        if not 0 < units <= self.units(n):
            raise ValueError(f"PrefixSums.reaching: units must be in (0, units(len(v))], got {units!r}")
        if self._fast:
            r = -((-units) >> self._e)  # ceil(units / 2**_e): the sums are multiples of 2**_e
            return bisect.bisect_left(range(n + 1), r, lo=1, key=self._rel)
        # the float running sum guesses k; exact sums confirm it or binary-search it
        g = min(int(np.searchsorted(np.cumsum(self.v), to_float(units), side="left")) + 1, n)
        lo, hi = 1, n  # units(hi) >= units
        if self.units(g) >= units:
            if g == 1 or self.units(g - 1) < units:
                return g
            hi = g
        else:
            lo = g + 1
        while lo < hi:
            mid = (lo + hi) // 2
            if self.units(mid) >= units:
                hi = mid
            else:
                lo = mid + 1
        return lo


class GroupedSum:
    """Exact per-group sums: ``units()[g] == exact_sum(all values added with group g)``.

    Fast when group ``g``'s values have biased exponents in ``e_top[g] - width + 1 .. e_top[g]``
    (``width <= 8``, a window): scaled by the window's lowest ulp, each value is an integer below
    ``2**(52 + width)``, split exactly at ``2**27``; two ``np.bincount`` over the groups sum the
    parts in float64 (exact: every ``2**(27 - width)`` values are folded into int64 sums). Values
    outside their group's window (and windows reaching below ``2**-971``) are summed exactly one
    group at a time (correct, slower): a wrong window costs time, never exactness.
    """

    def __init__(self, e_top: np.ndarray, width: int) -> None:
        if not 1 <= width <= 8:
            raise ValueError(f"GroupedSum: width must be in 1..8, got {width!r}")
        self.W = W = int(width)
        e_top = np.clip(np.asarray(e_top, np.int64), 0, _NE - 2)
        self.ng = e_top.shape[0]
        self._q = np.maximum(e_top - (W - 1), 1) - 1075  # each window's lowest ulp is 2**q
        self._scale = np.where(self._q >= -1023, np.ldexp(1.0, np.minimum(-self._q, 1023)), math.nan)
        self._lim = 2.0 ** (52 + W)
        self._fold = min(_CHUNK, 1 << (27 - W))  # float sums of the parts stay below 2**53
        self._H = np.zeros(self.ng)
        self._L = np.zeros(self.ng)
        self._Ih = np.zeros(self.ng, np.int64)
        self._Il = np.zeros(self.ng, np.int64)
        self._n = self._folds = 0
        self._extra: dict[int, int] = {}  # exact sums summed apart (out-of-window values, spills)
        self._buf: list[np.ndarray] | None = None

    @classmethod
    def for_ranges(cls, lo: np.ndarray, hi: np.ndarray, counts: np.ndarray) -> "GroupedSum":
        """Windows for groups whose values lie about in ``lo[g] .. hi[g]`` (``counts[g]`` of them):
        one binade of slack at each end, and wide enough for all but about 1% of the values (the
        others are summed apart)."""
        e_hi = (np.asarray(hi, np.float64).view(np.int64) >> 52) + 1
        e_lo = np.maximum((np.asarray(lo, np.float64).view(np.int64) >> 52) - 1, 0)
        span = np.maximum(e_hi - e_lo + 1, 1)
        n = np.asarray(counts)
        W = next((w for w in range(1, 9) if n[span > w].sum() <= n.sum() // 100), 8)
        return cls(e_hi, W)

    def add(self, v: np.ndarray, g: np.ndarray) -> None:
        """Add values ``v`` (finite, ``>= 0``) to groups ``g`` (ints in ``0..groups-1``)."""
        v = np.ascontiguousarray(v, np.float64)
        g = np.asarray(g)
        if g.dtype.kind not in "iu":
            raise TypeError(f"GroupedSum.add: groups must be integers, got dtype {g.dtype}")
        if g.shape != v.shape:
            raise ValueError(f"GroupedSum.add: {v.shape[0]} values but groups of shape {g.shape}")
        if g.shape[0] and not (int(g.min()) >= 0 and int(g.max()) < self.ng):
            raise ValueError(f"GroupedSum.add: groups must be in 0..{self.ng - 1}")
        for s in range(0, v.shape[0], self._fold):
            self._add(v[s : s + self._fold], g[s : s + self._fold])

    def _buffers(self, n: int) -> list[np.ndarray]:
        """Work arrays, reused from call to call (fresh memory costs page faults): the groups and
        parts of ``n`` values."""
        if self._buf is None or self._buf[0].shape[0] < n:
            self._buf = [np.empty(n, np.intp), np.empty(n), np.empty(n)]
        return [b[:n] for b in self._buf]

    def _add(self, v: np.ndarray, g: np.ndarray) -> None:
        n = v.shape[0]
        if self._n + n > self._fold:
            self._fold_sums()
        self._n += n
        key, hi, lo = self._buffers(n)
        for s in range(0, n, _STEP):
            e = min(n, s + _STEP)
            self._step(v[s:e], g[s:e], key[s:e], hi[s:e], lo[s:e])
        self._H += np.bincount(key, hi, self.ng)
        self._L += np.bincount(key, lo, self.ng)

    def _step(self, v: np.ndarray, g: np.ndarray, key: np.ndarray, h: np.ndarray, w: np.ndarray) -> None:
        """Groups and high/low parts (in units of each window's ulp) of one cache-sized step."""
        np.copyto(key, g, casting="unsafe")
        np.take(self._scale, key, out=w, mode="clip")  # (groups checked in range by add)
        with np.errstate(invalid="ignore", over="ignore"):
            w *= v  # an integer below lim for every value in its window
            if not (w.shape[0] == 0 or (w.min() >= 2.0**52 and w.max() < self._lim)):
                bad = ~((w >= 2.0**52) & (w < self._lim)) & (v != 0)
                if bad.any():  # outside the window: summed exactly, group by group
                    out = np.flatnonzero(bad)
                    vo, go = v[out], key[out]
                    for k in np.unique(go).tolist():
                        self._extra[k] = self._extra.get(k, 0) + exact_sum(vo[go == k])
                    w[out] = 0.0
                w[v == 0] = 0.0  # zeros (and -0.0) add nothing
        np.multiply(w, 2.0**-27, out=h)
        np.floor(h, out=h)  # the bits from 2**27 up
        w -= h * 2.0**27  # the bits below

    def _fold_sums(self) -> None:
        """Fold the float sums into the int64 ones (exact: each is an integer below ``2**53``)."""
        if self._n == 0:
            return
        self._Ih += self._H.astype(np.int64)
        self._Il += self._L.astype(np.int64)
        self._H[:] = 0
        self._L[:] = 0
        self._n = 0
        self._folds += 1
        if self._folds >= 1 << 9:  # int64 sums near 2**62: spill them into Python ints
            for k, u in enumerate(self._window_units(0).tolist()):
                if u:
                    self._extra[k] = self._extra.get(k, 0) + u
            self._Ih[:] = 0
            self._Il[:] = 0
            self._folds = 0

    def _window_units(self, shift: int) -> np.ndarray:
        """The windows' sums, in units of ``2**shift`` (object array of ints)."""
        out = np.zeros(self.ng, object)
        nz = np.flatnonzero((self._Ih != 0) | (self._Il != 0))
        if nz.shape[0]:
            u = (self._Ih[nz].astype(object) << 27) + self._Il[nz].astype(object)
            out[nz] = u << (self._q[nz] + SCALE - shift).astype(object)
        return out

    @property
    def trailing(self) -> int:
        """A number of trailing zero bits all groups' units have: ``units(trailing)`` is exact."""
        self._fold_sums()
        nz = (self._Ih != 0) | (self._Il != 0)
        t = [int(self._q[nz].min()) + SCALE] if nz.any() else []
        t += [(u & -u).bit_length() - 1 for u in self._extra.values() if u]
        return min(t, default=0)

    def units(self, shift: int = 0) -> np.ndarray:
        """Each group's exact sum in units of ``2**(shift - SCALE)`` (``0 <= shift <= trailing``,
        else ``ValueError``): an object array of Python ints."""
        if not 0 <= shift <= self.trailing:
            raise ValueError(f"GroupedSum.units: shift must be in 0..{self.trailing}, got {shift!r}")
        out = self._window_units(shift)
        for k, u in self._extra.items():
            out[k] += u >> shift
        return out
