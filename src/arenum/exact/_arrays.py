"""Array helpers of the prefix tree and the index: growable memory-mapped arrays, a segment search.

- :func:`page_empty`: an uninitialized array, large ones in their own anonymous memory map.
- :class:`Grow`: an append-only 1-D array that grows in place (``mremap``) once large.
- :func:`seg_first_below`: a vectorized binary search over many sorted segments of one pool.

This module knows nothing of models, trees or scores beyond the arrays it is given.
"""
from __future__ import annotations

import mmap

import numpy as np

__all__ = ["Grow", "page_empty", "seg_first_below", "MAP_MIN_BYTES"]

MAP_MIN_BYTES = 1 << 22
"""Arrays at least this large live in their own anonymous memory map (see :func:`page_empty`)."""
GROW_MAP_MIN_BYTES = 1 << 16
"""A :class:`Grow` this large lives in its own map: what it frees goes back to the system at once
(an old copy freed on the heap stays resident), and its unused capacity is never paged in, so the
bytes it holds are its values (``used_bytes``), which is what the tree counts against ``max_bytes``."""
_MAP_KW = {"flags": mmap.MAP_PRIVATE} if hasattr(mmap, "MAP_PRIVATE") else {}


def page_empty(n: int, dtype: type) -> np.ndarray:
    """An uninitialized 1-D array of ``n`` elements; a large one in its own anonymous memory map.

    numpy asks the kernel for transparent huge pages on large arrays, and the first touch of a
    huge page can cost several times that of the same memory in 4 KiB pages (on the virtual
    machines we measure on, about 2.3 ns against 0.35 ns per byte). Every array here is written once
    soon after it is allocated, so first-touch cost is most of what a large allocation costs.
    """
    dt = np.dtype(dtype)
    nbytes = n * dt.itemsize
    if nbytes < MAP_MIN_BYTES:
        return np.empty(n, dt)
    return np.frombuffer(mmap.mmap(-1, nbytes, **_MAP_KW), dt, count=n)


class Grow:
    """An append-only 1-D array with amortized doubling.

    Once large, the storage is an anonymous memory map that grows in place (``mremap``: no copy,
    no page touched twice); if a view of the old storage is still held elsewhere, or the platform
    cannot remap, it is copied into a new map instead.

    Exception-safe at every bytecode: the values are published by one assignment (``n`` after an
    append, ``a`` after a growth or a widening), and the one window where ``a`` must be dropped (to
    remap in place) keeps the map in ``_hold``, from which ``a`` is rebuilt if an exception (a
    signal handler raising, say) lands inside it.
    """

    __slots__ = ("_a", "n", "_hold", "_dt")

    def __init__(self, dtype: type, cap: int = 16) -> None:
        self._a: np.ndarray | None = np.empty(cap, dtype=dtype)
        self._dt = self._a.dtype
        self.n = 0
        self._hold: mmap.mmap | None = None  # the map while ``_a`` is dropped to remap it

    @classmethod
    def wrap(cls, values: np.ndarray) -> "Grow":
        """A Grow holding ``values`` as they are (e.g. a copy-on-write file map): read in place, and
        copied into a map of its own at the first append."""
        g = cls.__new__(cls)
        g._a, g._dt, g.n, g._hold = values, values.dtype, int(values.shape[0]), None
        return g

    @property
    def a(self) -> np.ndarray:
        """The storage (capacity ``a.shape[0]``, values ``a[:n]``)."""
        a = self._a
        if a is None:  # an exception landed while the map was being remapped: it still holds the values
            mm = self._hold
            assert mm is not None
            self._a = a = np.frombuffer(memoryview(mm), self._dt, count=len(mm) // self._dt.itemsize)
        return a

    def _own_map(self) -> "mmap.mmap | None":
        base = self._a.base if self._a is not None else None
        if type(base) is memoryview and type(base.obj) is mmap.mmap:
            return base.obj
        return None

    def _grow(self, need: int) -> None:
        a = self.a
        dt = a.dtype
        cap = max(need, 2 * a.shape[0])
        nbytes = cap * dt.itemsize
        if nbytes < GROW_MAP_MIN_BYTES:
            new = np.empty(cap, dt)
            new[: self.n] = a[: self.n]
            self._a = new  # published in one step
            return
        mm = self._own_map()
        if mm is not None:
            self._dt, self._hold = dt, mm
            self._a = a = None  # drop our view: the map can move only without exported views
            try:
                mm.resize(nbytes)
                self._a = np.frombuffer(memoryview(mm), dt, count=cap)
                return
            except (BufferError, OSError, SystemError, ValueError, TypeError):
                a = np.frombuffer(memoryview(mm), dt, count=self.n)
        mm2 = mmap.mmap(-1, nbytes, **_MAP_KW)
        # through a memoryview: it holds the map's buffer export, so a resize refuses while any
        # view of this array is alive (numpy alone would release the export at once)
        new = np.frombuffer(memoryview(mm2), dt, count=cap)
        new[: self.n] = a[: self.n]
        self._a = new  # published in one step

    def extend(self, values: np.ndarray) -> None:
        need = self.n + values.shape[0]
        if need > self.a.shape[0]:
            self._grow(need)
        self.a[self.n : need] = values
        self.n = need  # the publish

    def truncate(self, n: int) -> None:
        """Forget the values past the first ``n`` (undoing appends)."""
        if n < self.n:
            self.n = n

    def widen(self, dtype: type) -> None:
        """Store the values (and every later one) as ``dtype`` (built aside, published in one step)."""
        g = Grow(dtype, max(16, self.n))
        g.extend(self.v.astype(dtype))
        self._a = g.a

    @property
    def v(self) -> np.ndarray:
        return self.a[: self.n]

    @property
    def nbytes(self) -> int:
        """Bytes reserved (the capacity)."""
        return self.a.nbytes

    @property
    def used_bytes(self) -> int:
        """Bytes of the values held (what is touched; the rest of a large map is never paged in)."""
        return self.n * self.a.itemsize


def seg_first_below(
    pool: np.ndarray, off: np.ndarray, s: np.ndarray, lo: np.ndarray, hi: np.ndarray, T: float
) -> np.ndarray:
    """Per segment: first position ``j`` in ``[lo, hi]`` with ``s + pool[off + j] < T`` (or ``hi``).

    Vectorized binary search; the predicate ``s + lp >= T`` is evaluated exactly as scores are
    computed, and is monotone because segments are sorted descending. Runs ``_SEG_STEP``
    segments at a time: the temporaries stay in cache and their memory is reused, where one pass
    over millions of segments would fault in fresh pages for every temporary.
    """
    out = np.empty_like(lo)
    for a in range(0, lo.shape[0], _SEG_STEP):
        b = a + _SEG_STEP
        out[a:b] = _seg_first_below(pool, off[a:b], s[a:b], lo[a:b], hi[a:b], T)
    return out


_SEG_STEP = 1 << 14


def _seg_first_below(
    pool: np.ndarray, off: np.ndarray, s: np.ndarray, lo: np.ndarray, hi: np.ndarray, T: float
) -> np.ndarray:
    out = lo.copy()
    idx = np.flatnonzero(lo < hi)
    # the searches still running, compacted: every step touches only them
    lo, hi, s, off = lo[idx], hi[idx], s[idx], off[idx]
    while idx.size:
        mid = lo + hi
        mid >>= 1
        ok = s + pool[off + mid] >= T
        lo = np.where(ok, mid + 1, lo)
        hi = np.where(ok, hi, mid)
        go = lo < hi
        if not go.all():
            done = ~go
            out[idx[done]] = lo[done]
            idx, lo, hi, s, off = idx[go], lo[go], hi[go], s[go], off[go]
    return out
