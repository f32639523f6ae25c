"""Arguments of the envelope indexes: ranks as exact integers at any size, calibration sequences.

Counts past ``2**53`` lose units as floats; :func:`int_cum` and :func:`first_above` keep ranks as
Python integers end to end (:mod:`arenum.beyond.envelope`, :mod:`arenum.beyond.lattice`);
:func:`calibration_ids` checks calibration sequences against the support.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from .._validate import exact_int
from ..support import Support

if TYPE_CHECKING:
    from ..step import StepOracle

__all__ = ["int_cum", "first_above", "rank_index", "calibration_ids"]


def int_cum(counts: np.ndarray) -> np.ndarray:
    """Cumulative sums of integer-valued float ``counts`` as exact integers (``int64`` while they fit
    in 2**53, Python integers past it)."""
    c = np.asarray(counts, np.float64)
    if c.size == 0 or float(c.sum()) < 2.0**53:
        return np.cumsum(np.rint(c).astype(np.int64))
    return np.cumsum(np.array([int(x) for x in c.tolist()], dtype=object))


def first_above(cum: np.ndarray, i: int) -> int:
    """The first ``j`` with ``cum[j] > i`` (``len(cum)`` if none), ``cum`` ascending (floats or exact
    integers) and ``i`` an integer of any size, compared exactly (no rounding of ``i`` to a float)."""
    n = int(cum.shape[0])
    kind = cum.dtype.kind
    conv = float if kind == "f" else int

    def above(k: int) -> bool:
        return conv(cum[k]) > i  # a Python float or int against an int: exact

    if n == 0 or not above(n - 1):
        return n
    j = int(np.searchsorted(cum, float(i) if kind == "f" else (i if kind == "O" else min(i, 2**62)), side="right"))

    while j > 0 and above(j - 1):
        j -= 1
    while j < n and not above(j):
        j += 1
    return j


def rank_index(i: Any) -> int:
    """A rank argument: an exact integer (``TypeError``/``ValueError`` otherwise), ``IndexError`` if < 0."""
    i = exact_int("i", i)
    if i < 0:
        raise IndexError(f"i must be >= 0, got {i}")
    return i


def calibration_ids(oracle: "StepOracle", support: Support, seqs: Sequence[Sequence[Any]]) -> list[tuple]:
    """Id tuples of the calibration sequences' non-eos tokens (checked against the support)."""
    if isinstance(seqs, (str, bytes)) or not hasattr(seqs, "__iter__"):
        raise TypeError(f"calibration_sequences must be a list of sequences, got {type(seqs).__name__}")
    seqs = [tuple(s) for s in seqs]
    if not seqs:
        raise ValueError("calibration_sequences must hold at least one sequence")
    oracle.table(())  # decides the token mode
    out = []
    for s in seqs:
        if not support.contains(s):
            want = (f"length {support.fixed_len}" if support.fixed_len is not None
                    else f"length 1..{support.cap}, ending in eos {support.eos!r} (and only there)")
            raise ValueError(f"calibration sequence {s!r} has length {len(s)}; the support needs {want}")
        body = s if support.fixed_len is not None else s[:-1]
        ids = oracle.ids_of(body)
        if any(i is None for i in ids):
            raise ValueError(f"calibration sequence {s!r} has a token the model never produced")
        out.append(tuple(int(i) for i in ids))
    return out
