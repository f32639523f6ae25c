"""Count histograms by fine bucket, and the tree-recursive count index of a prefix's completions.

``autoregressive_count_index`` files every completion under the fine bucket of its EXACT total bits
(never a sum of per-step buckets), built breadth-first over the live prefixes with the same prefix
tree as the main index, so ``get_in_bucket(fb, offset)`` returns sequences in the library's one
exact order. Counts are plain integers (``count_mode`` chooses int64, Python ints or float64).
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator

import numpy as np

from .._validate import check_count_mode, exact_int, optional_exact_int, LN2
from .index import ExactIndex
from ..step import StepOracle
from .quantize import Quantizer
from ..support import Support
from .tree import PrefixTree

if TYPE_CHECKING:
    from .seek import SeekIndex

__all__ = ["CountHistogram", "CountIndex", "autoregressive_count_index"]



class CountHistogram:
    """Counts of sequences by fine bucket: a dense array ``counts`` starting at bucket ``offset``.

    Immutable in use: :meth:`shift` and :meth:`add` return new histograms.

    >>> h = CountHistogram.delta(2).add(CountHistogram.delta(4, 3))
    >>> h.count_at(4), h.total(), h.shift(1).count_at(5)
    (3, 4, 3)
    """

    __slots__ = ("offset", "counts")

    def __init__(self, offset: int = 0, counts: np.ndarray | None = None) -> None:
        self.offset = int(offset)
        self.counts = np.zeros(0, np.int64) if counts is None else counts

    @classmethod
    def empty(cls, dtype: Any = np.int64) -> "CountHistogram":
        """A histogram with no sequences."""
        return cls(0, np.zeros(0, dtype))

    @classmethod
    def delta(cls, fb: int, count: int | float = 1, dtype: Any = np.int64) -> "CountHistogram":
        """``count`` sequences in bucket ``fb``."""
        return cls(int(fb), np.array([count], dtype))

    def shift(self, k: int) -> "CountHistogram":
        """Every sequence moved ``k`` buckets deeper (adding ``k`` buckets of bits to each)."""
        return CountHistogram(self.offset + int(k), self.counts.copy())

    def add(self, other: "CountHistogram") -> "CountHistogram":
        """Bucket-wise sum of two histograms (pooling disjoint sets of sequences)."""
        if other.counts.shape[0] == 0:
            return CountHistogram(self.offset, self.counts.copy())
        if self.counts.shape[0] == 0:
            return CountHistogram(other.offset, other.counts.copy())
        lo = min(self.offset, other.offset)
        hi = max(self.offset + self.counts.shape[0], other.offset + other.counts.shape[0])
        dtype = np.result_type(self.counts.dtype, other.counts.dtype)
        out = np.zeros(hi - lo, dtype)
        out[self.offset - lo : self.offset - lo + self.counts.shape[0]] += self.counts
        out[other.offset - lo : other.offset - lo + other.counts.shape[0]] += other.counts
        return CountHistogram(lo, out)

    def count_at(self, fb: int) -> int | float:
        """Sequences in bucket ``fb``."""
        i = int(fb) - self.offset
        if 0 <= i < self.counts.shape[0]:
            v = self.counts[i]
            return v.item() if hasattr(v, "item") else v
        return 0

    def total(self) -> int | float:
        """All sequences in the histogram."""
        if self.counts.dtype == object:
            return sum(self.counts.tolist())
        v = self.counts.sum()
        return v.item()

    def buckets(self) -> Iterator[tuple[int, int | float]]:
        """``(fb, count)`` for every non-empty bucket, ascending ``fb`` (most probable first)."""
        for i in np.flatnonzero(self.counts != 0):
            v = self.counts[i]
            yield self.offset + int(i), (v.item() if hasattr(v, "item") else v)

    def __repr__(self) -> str:
        return f"CountHistogram(offset={self.offset}, total={self.total()})"


class CountIndex:
    """Low-level: completions counted by fine bucket, with exact unranking inside a bucket; a user
    wants :meth:`arenum.AutoregressiveEnumerable.quantized_count_index` (or ``count``).

    hist: the :class:`CountHistogram`.
    dropped_upper: certified bound on in-budget completions excluded by ``branch_cap``; the true
        in-budget count lies in ``[total(), total() + dropped_upper]``.
    """

    def __init__(self, hist: CountHistogram, index: ExactIndex, fbs: np.ndarray, decode: Callable[[tuple], tuple],
                 dropped_upper: int | float = 0) -> None:
        self.hist = hist
        self.dropped_upper = dropped_upper
        self.truncated = False
        self._index = index
        self._decode = decode
        # items of the exact order restricted to the kept buckets, grouped by bucket
        self._pos = np.flatnonzero(fbs >= 0) if fbs.size else np.zeros(0, np.int64)
        kept_fbs = fbs[self._pos]
        self._bucket_start = {int(fb): int(i) for fb, i in zip(*_first_positions(kept_fbs))}

    def total(self) -> int | float:
        """Completions counted (within the bucket bound)."""
        return self.hist.total()

    def get_in_bucket(self, fb: int, offset: int) -> tuple[tuple, float]:
        """The ``offset``-th completion (0-based, exact order) of bucket ``fb``: ``(sequence, log_prob)``."""
        fb = exact_int("fb", fb)
        offset = exact_int("offset", offset, minimum=0)
        n = self.hist.count_at(fb)
        if offset >= n:
            raise IndexError(f"offset {offset} out of range for bucket {fb} holding {n} sequences")
        k = int(self._pos[self._bucket_start[fb] + offset])
        p, x = self._index.item(k)
        return self._decode(self._index.sequences(np.array([p]))[0]), x


def _first_positions(fbs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    if fbs.size == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    change = np.flatnonzero(np.concatenate(([True], fbs[1:] != fbs[:-1])))
    return fbs[change], change


def fine_buckets(quantizer: Quantizer, x: np.ndarray) -> np.ndarray:
    """Vectorized :meth:`Quantizer.fine_bucket` (identical float operations)."""
    return np.floor((-x / LN2) / quantizer.fine_width_bits).astype(np.int64)


def build_count_index(seek: "SeekIndex", quantizer: Quantizer, max_fine_bucket: int, count_mode: str,
                      decode: Callable[[tuple], tuple]) -> tuple[CountIndex, bool]:
    """Count index of the seek index's support down to bucket ``max_fine_bucket`` (inclusive).

    Deepens the shared index (its caps apply) and reads the head of its exact order.
    """
    count_mode = check_count_mode(count_mode)
    T = -(max_fine_bucket + 1) * quantizer.fine_width_bits * LN2
    T = float(np.nextafter(T, -math.inf))  # include the whole bucket despite rounding at its edge
    idx = seek.ensure_score(T)
    tree = seek.tree
    _, x = idx.items(0, idx.count_ge(T))
    fbs = fine_buckets(quantizer, x)
    fbs = np.where(fbs <= max_fine_bucket, fbs, -1)
    kept = fbs[fbs >= 0]
    dtype: Any = {"auto": np.int64, "exact": object, "float": np.float64}[count_mode]
    if kept.size:
        lo = int(kept.min())
        counts = np.bincount(kept - lo).astype(dtype)
        hist = CountHistogram(lo, counts)
    else:
        hist = CountHistogram.empty(dtype)
    truncated = tree.completions_beyond(-T / LN2) or tree.depth_truncated
    return CountIndex(hist, idx, fbs, decode, seek.dropped_bound(T)), truncated


def autoregressive_count_index(
    steps: Callable[[tuple], Iterable[tuple[Any, float]]],
    prefix: tuple,
    depth: int,
    quantizer: Quantizer,
    max_fine_bucket: int,
    eos: Any = None,
    branch_cap: int | None = None,
) -> tuple[CountIndex, bool]:
    """Count index over completions of ``prefix`` up to ``depth`` more tokens.

    Same as filing every completion ``c`` (all length-``depth`` continuations, or, with ``eos``, every
    continuation ending in ``eos`` within ``depth`` tokens) whose conditional log-prob
    ``s(c | prefix)`` has ``quantizer.fine_bucket(s) <= max_fine_bucket`` under that bucket. Exact;
    one ``steps`` call per live prefix. Returns ``(CountIndex, truncated)``: ``truncated`` is True if
    completions exist beyond the bucket bound (so a caller can deepen). ``branch_cap`` keeps the top
    ``branch_cap`` tokens per prefix; ``CountIndex.dropped_upper`` bounds what it skipped.
    """
    depth = exact_int("depth", depth, minimum=1)
    max_fine_bucket = exact_int("max_fine_bucket", max_fine_bucket, minimum=0)
    branch_cap = optional_exact_int("branch_cap", branch_cap, minimum=1)
    prefix = tuple(prefix)
    oracle = StepOracle(lambda p: steps(prefix + p), eos=eos)
    eos_id = oracle.eos_id
    support = (Support.terminating(eos, eos_id, depth, branch_cap=branch_cap) if eos is not None
               else Support.fixed(depth, branch_cap=branch_cap))
    tree = PrefixTree(oracle, support)
    from .seek import Limits, SeekIndex

    seek = SeekIndex(tree, quantizer=quantizer, limits=Limits(max_depth_bits=math.inf, max_prefixes=None,
                                                              max_sequences=None))
    return build_count_index(seek, quantizer, max_fine_bucket, "auto", oracle.tokens)
