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
from itertools import chain
from operator import attrgetter, itemgetter

import numpy as np

from .tables import RENORM_TOL, Parser, normalize, parse_table

__all__ = ["parse_tables"]

_WIDE = 4096  # rows wider than this are checked by the reference formula (summation error margin)
_PAIR_TYPES = {tuple, list}
_ARRAY = {np.ndarray}
_F64 = {np.dtype(np.float64)}
_first = itemgetter(0)
_shape = attrgetter("shape")
_dtype = attrgetter("dtype")


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
    try:
        toks = [t for t, _ in flat]  # unpacking checks that every item is a pair
        vals = [v for _, v in flat]
        lps = np.array(vals, np.float64)
    except (TypeError, ValueError):
        return None
    if lps.ndim != 1:
        return None
    vocab = ps.vocab
    if vocab.int_mode is not False and set(map(type, toks)) == {int}:
        if vocab.int_mode is None:
            vocab.int_mode = True
        try:
            ids = np.array(toks, np.int64)
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
    shapes = list(map(_shape, ts))
    if set(map(len, shapes)) != {1} or shapes != list(map(_shape, vs)):
        return None  # not 1-D, or lengths that differ: the row-by-row errors
    tdt = set(map(_dtype, ts))
    vdt = set(map(_dtype, vs))
    if any(d.kind != "i" for d in tdt) or any(d.kind not in "fiu" for d in vdt):
        return None
    if not ps.vocab.int_tokens():
        return None
    lens = np.fromiter(map(len, ts), np.int64, len(ts))
    ids = np.concatenate(ts).astype(np.int64, copy=False)
    if vdt == _F64:
        lps = np.concatenate(vs)
    else:
        lps = np.concatenate([v.astype(np.float64, copy=False) for v in vs])
    return ids, lps, lens


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


def parse_tables(raws: list, prefixes: list[tuple], ps: Parser
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Validate many single-prefix results: ``(row, ids, lps, widths)``, every finite entry (rows in
    order, each row's entries in the model's order, unsorted), normalized; ``widths[i]`` the finite
    entries of row ``i``. Exactly :func:`arenum.step.tables.parse_table` row by row (module
    docstring), errors included."""
    n = len(raws)
    if not n:
        return _one_by_one(raws, prefixes, ps)
    got = _from_lists(raws, ps)
    if got is None:
        got = _from_arrays(raws, ps)
    if got is None or ps.norm_tol < 2 * RENORM_TOL:
        return _one_by_one(raws, prefixes, ps)
    ids, lps, lens = got
    if not lens.all() or int(lens.max()) > _WIDE:
        return _one_by_one(raws, prefixes, ps)
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
        for i in odd.tolist():  # the reference formula: renormalized, or the row's error
            a, b = int(starts[i]), int(starts[i] + lens[i])
            seg = lps[a:b]
            fin = seg > -math.inf
            _, seg[fin] = normalize(ids[a:b], seg.copy(), prefixes[i], ps)
    fin = lps > -math.inf
    if not fin.all():
        row, ids, lps = row[fin], ids[fin], lps[fin]
        lens = np.bincount(row, minlength=n).astype(np.int64)
    return row, ids, lps, lens
