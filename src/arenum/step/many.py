"""Many single-prefix results parsed at once: the plain callback's rows in bulk.

A model with only ``next_logprobs(prefix)`` answers one prefix per call; parsing each answer on
its own costs a dozen numpy calls per row (tens of microseconds for a row of ~100 entries). Here a
chunk of answers is checked and normalized together: per row only what Python must do (the form
of the result; the ``(token, log_prob)`` items of all rows unpacked in one pass, which checks that
each is a pair), then one array of every entry and vectorized checks over it (duplicate tokens,
NaN, ``> 0``, the normalization).

The result is exactly :func:`arenum.step.tables.parse_table` applied row by row, in order: the
same ids (tokens interned in the same order), the same values, the same error for the first bad
row. Anything the bulk path does not clear (a form it does not take, a possible error, a row not
normalized to float64 precision) is handed to the row-by-row path: a whole chunk when an error is
possible (so the first bad row's error is raised, as row by row), a single row to be renormalized
by the reference formula.
"""
from __future__ import annotations

import math
import warnings
from itertools import chain
from operator import attrgetter, itemgetter
from typing import Any

import numpy as np

from . import kernels
from ..errors import KernelUnavailable
from .tables import RENORM_TOL, Parser, normalize, parse_table

__all__ = ["JIT_ROWS", "JIT_ROWS_WARM", "load_compiled", "parse_rows", "parse_rows_numpy", "parse_tables"]

_WIDE = 4096  # rows wider than this are checked by the reference formula (summation error margin)
_PAIR_TYPES = {tuple, list}
_ARRAY = {np.ndarray}
_F64 = {np.dtype(np.float64)}
_I64 = {np.dtype(np.int64)}
_first = itemgetter(0)
_dtype = attrgetter("dtype")
_ndim = attrgetter("ndim")
_ONE = {1}


def _one_by_one(raws: list, prefixes: list[tuple], ps: Parser
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    tabs = [parse_table(r, p, ps) for r, p in zip(raws, prefixes)]
    widths = np.array([t[1].shape[0] for t in tabs], np.int64)
    if not tabs:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0), widths
    row = np.repeat(np.arange(len(tabs), dtype=np.int64), widths)
    return row, np.concatenate([t[0] for t in tabs]), np.concatenate([t[1] for t in tabs]), widths


def _from_lists(raws: list, ps: Parser) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """``(ids, lps, lens)`` of results that are all non-empty lists of ``(token, log_prob)`` pairs
    with real values; ``None`` otherwise (duplicates are found later, on the ids). The rows are
    checked and unpacked as one flat list of items (no Python code per row)."""
    if set(map(type, raws)) != {list}:
        return None
    lens = np.fromiter(map(len, raws), np.int64, len(raws))
    if not lens.all() or any(issubclass(t, np.ndarray) for t in set(map(type, map(_first, raws)))):
        return None  # an empty row, or the (tokens, log_probs) pair given as a list: not this form
    flat = list(chain.from_iterable(raws))
    M = len(flat)
    try:
        toks = [t for t, _ in flat]  # unpacking checks that every item is a pair
        lps = np.array([v for _, v in flat])  # numbers only: a string, bytes or None gives another dtype
    except (TypeError, ValueError):
        return None
    if lps.ndim != 1 or lps.dtype.kind not in "fiub":
        return None  # the row-by-row error (tables.real_values)
    lps = lps.astype(np.float64, copy=False)
    vocab = ps.vocab
    if vocab.int_mode is not False and set(map(type, toks)) == {int}:
        if vocab.int_mode is None:
            vocab.int_mode = True
        try:
            ids = np.fromiter(toks, np.int64, M)
        except OverflowError:
            return None
    else:
        try:
            ids = vocab.ids(toks)
        except (TypeError, ValueError):
            return None
    return ids, lps, lens


def _from_arrays(raws: list, ps: Parser) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """``(ids, lps, lens)`` of results that are all ``(tokens, log_probs)`` pairs of 1-D numpy
    arrays of equal lengths, signed integer tokens, numeric values; ``None`` otherwise. The checks
    run over all rows at once (``map`` over the pairs, a set of the dtypes)."""
    if not raws or not set(map(type, raws)) <= _PAIR_TYPES or set(map(len, raws)) != {2}:
        return None
    ts, vs = zip(*raws)
    if set(map(type, ts)) != _ARRAY or set(map(type, vs)) != _ARRAY:
        return None
    tdt = set(map(_dtype, ts))
    vdt = set(map(_dtype, vs))
    if any(d.kind != "i" for d in tdt) or any(d.kind not in "fiu" for d in vdt):
        return None
    if not ps.vocab.int_tokens():
        return None
    if set(map(_ndim, ts)) != _ONE or set(map(_ndim, vs)) != _ONE:
        return None  # not 1-D: the row-by-row error
    try:
        lens = np.fromiter(map(len, ts), np.int64, len(ts))
        if not np.array_equal(lens, np.fromiter(map(len, vs), np.int64, len(vs))):
            return None  # lengths that differ: the row-by-row error
        ids = _join(ts, np.int64) if tdt == _I64 else np.concatenate(ts).astype(np.int64, copy=False)
        if vdt == _F64:
            lps = _join(vs, np.float64)
        else:
            lps = np.concatenate([v.astype(np.float64, copy=False) for v in vs])
    except (TypeError, ValueError):
        return None
    return ids, lps, lens


def _join(arrays: tuple, dtype: type) -> np.ndarray:
    """The 1-D arrays (all of the native ``dtype``) end to end, a new writable array: their bytes
    joined (a third of ``np.concatenate``'s cost for many short rows), or concatenated when one is
    not contiguous."""
    try:
        return np.frombuffer(bytearray().join(arrays), dtype)
    except (TypeError, BufferError, ValueError):
        return np.concatenate(arrays)


def _distinct(ids: np.ndarray, row: np.ndarray, n: int) -> bool:
    """No token twice in a row."""
    M = ids.shape[0]
    if M < 2:
        return True
    lo, hi = int(ids.min()), int(ids.max())
    span = hi - lo + 1
    if span * n <= 8 * M + 4096:
        return int(np.bincount(row * span + (ids - lo)).max()) <= 1
    if span * n >= 2**62:
        return False  # cannot pack: the row-by-row path checks
    key = np.sort(row * span + (ids - lo))
    return not (key[1:] == key[:-1]).any()


def _bulk(raws: list, ps: Parser) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """``(ids, lps, lens)`` of a chunk the bulk path takes (one form, non-empty rows of at most
    ``_WIDE`` entries, the default tolerance), else ``None``."""
    got = _from_lists(raws, ps)
    if got is None:
        got = _from_arrays(raws, ps)
    if got is None or ps.norm_tol < 2 * RENORM_TOL:
        return None
    lens = got[2]
    if not lens.all() or int(lens.max()) > _WIDE:
        return None
    return got


def _renormalize(rows: np.ndarray, ids: np.ndarray, lps: np.ndarray, starts: np.ndarray, lens: np.ndarray,
                 prefixes: list[tuple], ps: Parser) -> None:
    """The reference formula on ``rows`` (not cleared by a fast check), in order: renormalized in
    place, or the first one's error."""
    for i in rows.tolist():
        a, b = int(starts[i]), int(starts[i] + lens[i])
        seg = lps[a:b]
        fin = seg > -math.inf
        _, seg[fin] = normalize(ids[a:b], seg.copy(), prefixes[i], ps)


def parse_tables(raws: list, prefixes: list[tuple], ps: Parser
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Validate many single-prefix results: ``(row, ids, lps, widths)``, every finite entry (rows in
    order, each row's entries in the model's order, unsorted), normalized; ``widths[i]`` the finite
    entries of row ``i``. Exactly :func:`arenum.step.tables.parse_table` row by row (module
    docstring), errors included."""
    n = len(raws)
    got = _bulk(raws, ps) if n else None
    if got is None:
        return _one_by_one(raws, prefixes, ps)
    ids, lps, lens = got
    row = np.repeat(np.arange(n, dtype=np.int64), lens)
    if not _distinct(ids, row, n):
        return _one_by_one(raws, prefixes, ps)
    starts = np.cumsum(lens) - lens
    mx = np.maximum.reduceat(lps, starts)
    if not ((mx <= 0.0) & (mx > -math.inf)).all():  # NaN, > 0, no finite entry: the row-by-row errors
        return _one_by_one(raws, prefixes, ps)
    with np.errstate(under="ignore"):
        s = np.add.reduceat(np.exp(lps - mx[row]), starts)
    lse = mx + np.log(s)
    # summation in another order than the reference's: off by at most (len + 2) ulps, relatively
    odd = np.flatnonzero(~(np.abs(lse) + (lens + 2) * 2.0**-52 <= RENORM_TOL))
    if odd.size:
        _renormalize(odd, ids, lps, starts, lens, prefixes, ps)
    fin = lps > -math.inf
    if not fin.all():
        row, ids, lps = row[fin], ids[fin], lps[fin]
        lens = np.bincount(row, minlength=n).astype(np.int64)
    return row, ids, lps, lens


# ---------------------------------------------------------------------- the compiled pass
JIT_ROWS = 1_000_000
"""Rows parsed in this process by the numpy path before the compiled pass is loaded (``auto``
backend) while numba is cold: numba's import and its first load cost seconds once per process
(``docs/benchmarks.md``), which only a long run wins back (the pass saves a few microseconds a
row). ``0``: at the first chunk. The forced ``numba`` backend loads it at once."""
JIT_ROWS_WARM = 20_000
"""The same once numba is warm in this process (the compiled dense kernels loaded): the pass then
loads in milliseconds."""
_jit: dict = {"rows": 0, "mod": None, "error": None}


def _compiled(n: int, now: bool = False) -> Any:
    """The kernel module (:mod:`arenum.step._numba_rows`) when the compiled pass is in use for a
    chunk of ``n`` rows, else ``None`` (``ARENUM_KERNELS=numpy``, numba missing or failing, or fewer
    than :data:`JIT_ROWS` rows parsed so far under ``auto``, :data:`JIT_ROWS_WARM` once numba is
    warm, unless ``now``)."""
    mod = _jit["mod"]
    c = kernels.choice()
    if c == "numpy":
        return None
    if mod is not None:
        return mod
    if _jit["error"] is not None:
        if c == "numba":
            raise KernelUnavailable(_jit["error"])
        return None
    if c == "auto" and not now and _jit["rows"] < (JIT_ROWS_WARM if kernels.loaded() else JIT_ROWS):
        _jit["rows"] += n
        return None
    try:
        from . import _numba_rows as mod

        _self_check(mod)
    except Exception as e:  # noqa: BLE001  (numba missing, too old, not compiling)
        _jit["error"] = f"the compiled row pass is unavailable: {type(e).__name__}: {e}"
        if not isinstance(e, ImportError):
            warnings.warn(_jit["error"] + " (using numpy)", RuntimeWarning, stacklevel=3)
        if c == "numba":
            raise KernelUnavailable(_jit["error"]) from e
        return None
    _jit["mod"] = mod
    return mod


def load_compiled() -> bool:
    """Load the compiled row pass now (numba's import, the kernels from numba's cache; the first
    run ever compiles them, seconds) instead of after :data:`JIT_ROWS` rows: ``True`` when it is in
    use (``False``: ``ARENUM_KERNELS=numpy``, or numba missing or failing; under a forced ``numba``
    backend a failure raises :class:`~arenum.errors.KernelUnavailable`)."""
    return _compiled(0, now=True) is not None


def _self_check(mod: Any) -> None:
    """Run both kernels once on a tiny chunk (compiles, or loads numba's cache) and check them."""
    ids = np.array([3, 1, 2, 0], np.int64)
    lps = np.log(np.array([0.25, 0.5, 0.25, 1.0]))
    lens = np.array([3, 1], np.int64)
    odd, widths = np.zeros(2, np.bool_), np.zeros(2, np.int64)
    if mod.check(ids, lps, lens, 0, np.zeros(4, np.int64), True, RENORM_TOL, odd, widths) != -1 or odd.any():
        raise RuntimeError("the check kernel failed its self-check")
    oi, ol, heads = np.empty(4, np.int64), np.empty(4), np.empty(2, np.int64)
    m = mod.cut_sort(ids, lps, lens, np.full(2, _LOWEST), oi, ol, heads, np.empty(3), np.empty(3, np.int64),
                     np.empty(3, np.int64))
    if m != 4 or oi.tolist() != [1, 3, 2, 0] or heads.tolist() != [3, 1]:
        raise RuntimeError("the sort kernel failed its self-check")


_LOWEST = float(np.finfo(np.float64).min)
_STAMP_MAX = 1 << 22  # token spans up to this (or 8 per entry) are checked for duplicates in the kernel


def parse_rows(raws: list, prefixes: list[tuple], ps: Parser, floors: np.ndarray | None = None
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, bool]:
    """:func:`parse_tables` then each row's entries ``>= floors[i]`` (``None``: whole rows):
    ``(lens, ids, lps, widths, sorted)``, row ``i`` the next ``lens[i]`` entries (rows in order),
    ``sorted`` when each row's entries are in table order (descending log-prob, ties in the model's
    order). The compiled pass (:func:`_compiled`) checks, cuts and sorts each row in one go; the
    numpy path parses, cuts and tells whether the model gave its rows sorted. Same values, same
    errors, either way."""
    n = len(raws)
    k = _compiled(n) if n else None
    got = _bulk(raws, ps) if k is not None else None
    if got is None:
        return parse_rows_numpy(raws, prefixes, ps, floors)
    ids, lps, lens = got
    M = ids.shape[0]
    lo, hi = int(ids.min()), int(ids.max())
    span = hi - lo + 1
    dup = span <= max(8 * M, _STAMP_MAX)
    if not dup and not _distinct(ids, np.repeat(np.arange(n, dtype=np.int64), lens), n):
        return parse_rows_numpy(raws, prefixes, ps, floors)
    odd, widths = np.zeros(n, np.bool_), np.empty(n, np.int64)
    stamp = np.zeros(span if dup else 1, np.int64)
    if k.check(ids, lps, lens, lo, stamp, dup, RENORM_TOL, odd, widths) >= 0:
        return parse_rows_numpy(raws, prefixes, ps, floors)  # a bad row: the row-by-row error
    if odd.any():
        _renormalize(np.flatnonzero(odd), ids, lps, np.cumsum(lens) - lens, lens, prefixes, ps)
    fl = np.full(n, _LOWEST) if floors is None else np.maximum(floors, _LOWEST)
    heads = np.empty(n, np.int64)
    w = int(lens.max())
    # in place: ids and lps are this parse's own arrays, and each row is read into the buffers
    # before its head is written, at or before where the row was read (no fresh output arrays)
    m = k.cut_sort(ids, lps, lens, fl, ids, lps, heads, np.empty(w), np.empty(w, np.int64), np.empty(w, np.int64))
    return heads, ids[:m], lps[:m], widths, True


def parse_rows_numpy(raws: list, prefixes: list[tuple], ps: Parser, floors: np.ndarray | None = None
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, bool]:
    """:func:`parse_rows` by the numpy path (the reference of the compiled pass)."""
    n = len(raws)
    row, ids, lps, widths = parse_tables(raws, prefixes, ps)
    lens = widths
    if floors is not None:
        keep = lps >= floors[row]
        if not keep.all():
            row, ids, lps = row[keep], ids[keep], lps[keep]
            lens = np.bincount(row, minlength=n).astype(np.int64)
    down = lps[1:] > lps[:-1]
    return lens, ids, lps, widths, not (down & (row[1:] == row[:-1])).any()
