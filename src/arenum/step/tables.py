"""Step tables: raw model results -> validated, normalized, sorted ``(ids, log_probs)`` and heads.

Accepted result forms for one prefix (``next_logprobs(prefix)``), parsed by :func:`parse_table`:

- a list of ``(token, log_prob)`` pairs;
- a ``(tokens, log_probs)`` pair of numpy arrays;
- a dense 1-D float array of length ``V`` whose index is the token id (``arenum`` extension).

``batch_next_logprobs(prefixes)`` returns a list of such results, or a dense 2-D array ``(n, V)``
(:func:`parse_dense_batch`; :func:`parse_dense_heads` validates and cuts heads in one sweep: compiled, one
pass per row, in :mod:`arenum.step.kernels` when numba is installed, else numpy's over cache-sized blocks of
rows; the numpy sweep and the sorts are :mod:`arenum.step.dense`).
``batch_next_heads(prefixes, floors)`` returns table heads only; :func:`parse_heads` states that
contract and checks it.

Validation (each a ``ValueError`` naming the prefix): NaN; a log-prob ``> 0`` (this catches
``+inf``); duplicate tokens; mismatched array lengths; no finite entry; ``|sum(p) - 1| > norm_tol``.
``-inf`` entries are dropped. Rows whose ``|log sum p| > 1e-12`` (reduced precision: a bf16 row may
sum to 0.9985) are renormalized by subtracting ``log sum p`` and reported through ``on_renorm(n)``;
rows normalized to float64 precision are used verbatim, so scores are bit-identical to summing the
model's own numbers.

Table order: descending log-prob; equal log-probs keep the model's order (ascending id for dense
rows). This order, and nothing else, defines "table position" in the tie rule (:func:`sort_table`,
:func:`head_order`).

Every parse function takes one :class:`Parser`: the model's :class:`arenum.step.vocab.Vocab` (tokens
to ids, integer mode, ids back to tokens for messages), ``norm_tol``, the work buffers and the
``on_renorm`` counter. This module does not call the model, count forwards or cache tables: the step
oracle (:mod:`arenum.step.oracle`) does, and owns the parser.
"""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from . import kernels
from .dense import desc_order, desc_sort_row, sorted_heads, sweep
from .vocab import Vocab
from .._validate import INT64_MAX, short_repr

__all__ = [
    "NORM_TOL",
    "RENORM_TOL",
    "Heads",
    "Parser",
    "Scratch",
    "parse_table",
    "normalize",
    "parse_dense_batch",
    "rows_of_dense",
    "parse_dense_heads",
    "collect_rows",
    "parse_heads",
    "build_heads",
    "heads_in_order",
    "head_order",
    "sort_table",
    "check_cardinality",
]

NORM_TOL = 2e-2
"""Default tolerance on ``|sum(p) - 1|`` of a step table (bf16/int8 rows pass, renormalized)."""
OnRenorm = Callable[[int], None]  # on_renorm(n): told that n accepted rows were renormalized
RENORM_TOL = 1e-12  # rows with |log sum p| above this are renormalized; below it used verbatim


class Heads:
    """Sorted table heads of many prefixes, CSR: row ``i`` is ``ids/lps[off[i]:off[i] + lens[i]]``.

    ids int64 ``(M,)``, lps float64 ``(M,)`` (descending within a row, ties in the model's order),
    lens int64 ``(n,)``, full int64 ``(n,)`` = finite entries in the whole row (``lens < full`` means
    the head was cut); ``offs`` float64 ``(n,)`` or ``None``: each row's offset where the adapter
    gave one (``batch_next_heads``' fifth array; NaN where unknown), a store's hint, never trusted
    for a value (``arenum.exact.records.f32_rows`` checks it).
    """

    __slots__ = ("ids", "lps", "lens", "full", "offs")

    def __init__(self, ids: np.ndarray, lps: np.ndarray, lens: np.ndarray, full: np.ndarray,
                 offs: np.ndarray | None = None) -> None:
        self.ids, self.lps, self.lens, self.full, self.offs = ids, lps, lens, full, offs


class Scratch:
    """Reusable work buffers per (dtype, slot) (avoids page faults of fresh temporaries)."""

    __slots__ = ("_bufs",)

    def __init__(self) -> None:
        self._bufs: dict[Any, np.ndarray] = {}

    def __call__(self, shape: tuple[int, int], dtype: Any = np.float64, slot: str = "") -> np.ndarray:
        n = shape[0] * shape[1]
        key = (np.dtype(dtype), slot)
        buf = self._bufs.get(key)
        if buf is None or buf.shape[0] < n:
            buf = self._bufs[key] = np.empty(n, dtype)
        return buf[:n].reshape(shape)


class Parser:
    """What every parse function reads: ``vocab`` (tokens <-> ids), ``norm_tol`` (the tolerance on
    ``|sum(p) - 1|``), ``scratch`` (work buffers) and ``on_renorm(n)`` (told of renormalized rows)."""

    __slots__ = ("vocab", "norm_tol", "scratch", "on_renorm")

    def __init__(self, vocab: Vocab, norm_tol: float = NORM_TOL, on_renorm: OnRenorm | None = None,
                 scratch: Scratch | None = None) -> None:
        self.vocab = vocab
        self.norm_tol = float(norm_tol)
        self.on_renorm = on_renorm
        self.scratch = Scratch() if scratch is None else scratch


# ---------------------------------------------------------------------- one table
def _fail(prefix: Any, msg: str) -> ValueError:
    return ValueError(f"next_logprobs({short_repr(prefix)}): {msg}")


def _column_ids(V: int, vocab: Vocab) -> np.ndarray:
    """Ids of the columns ``0 .. V-1`` of a dense row."""
    if vocab.int_tokens():
        return np.arange(V, dtype=np.int64)
    return np.array([vocab.id(i) for i in range(V)], dtype=np.int64)


def _pairs(raw: Any, prefix: tuple) -> tuple[list, list]:
    """``(tokens, values)`` of a result given as ``(token, log_prob)`` pairs, checked item by item."""
    try:
        pairs = list(raw)
    except TypeError:
        raise TypeError(
            f"next_logprobs({short_repr(prefix)}) must return (token, log_prob) pairs, a "
            f"(tokens, log_probs) array pair or a dense log-prob array; got {type(raw).__name__}"
        ) from None
    toks = []
    vals = []
    for item in pairs:
        try:
            t, v = item
        except (TypeError, ValueError):
            raise _fail(prefix, f"expected (token, log_prob) pairs, got item {item!r}") from None
        toks.append(t)
        vals.append(v)
    return toks, vals


def real_values(toks: list, vals: list, prefix: tuple) -> np.ndarray:
    """``vals`` as float64; ``TypeError`` naming the first that is not a number (a string or bytes,
    which ``float`` would parse, or ``None``, which numpy would make NaN) and its token."""
    arr = np.array(vals)
    if arr.ndim == 1 and arr.dtype.kind in "fiub":
        return arr.astype(np.float64, copy=False)
    for t, v in zip(toks, vals):
        if v is None or isinstance(v, (str, bytes, bytearray)):
            raise TypeError(f"next_logprobs({short_repr(prefix)}): log_prob {short_repr(v)} for token {t!r} is "
                            + ("not a number" if v is None else f"a {type(v).__name__}, not a number"))
    try:
        return np.array(vals, dtype=np.float64)
    except (TypeError, ValueError):
        raise _fail(prefix, "log_probs must be real numbers") from None


def parse_table(raw: Any, prefix: tuple, ps: Parser) -> tuple[np.ndarray, np.ndarray]:
    """Validate one raw result; return ``(ids, logps)`` unsorted, ``-inf`` dropped, normalized. Every
    error names the prefix (a token's own, from the vocabulary, too)."""
    try:
        return _parse_table(raw, prefix, ps)
    except (TypeError, ValueError) as e:
        if str(e).startswith("next_logprobs("):
            raise
        raise type(e)(f"next_logprobs({short_repr(prefix)}): {e}") from None


def _parse_table(raw: Any, prefix: tuple, ps: Parser) -> tuple[np.ndarray, np.ndarray]:
    vocab = ps.vocab
    if type(raw) is list and raw and not isinstance(raw[0], np.ndarray):
        # (token, log_prob) pairs, the common form: a dict checks pairs and duplicates in one go
        try:
            d = dict(raw)
        except (TypeError, ValueError):  # not pairs, an unhashable token: the slow path words the error
            d = None
        if d is not None and len(d) == len(raw):
            lps = real_values(list(d), list(d.values()), prefix)
            if lps.ndim == 1:
                return normalize(vocab.ids(list(d)), lps, prefix, ps)
    if isinstance(raw, np.ndarray) and raw.ndim == 1 and raw.dtype.kind == "f":
        lps = raw.astype(np.float64, copy=False)
        ids = _column_ids(lps.shape[0], vocab)
    elif (
        isinstance(raw, (tuple, list))
        and len(raw) == 2
        and isinstance(raw[0], np.ndarray)
        and isinstance(raw[1], np.ndarray)
    ):
        toks, lps = raw
        if toks.ndim != 1 or lps.ndim != 1:
            raise _fail(prefix, f"tokens and log_probs must be 1-D arrays, got shapes {toks.shape} and {lps.shape}")
        if toks.shape[0] != lps.shape[0]:
            raise _fail(
                prefix, f"tokens and log_probs differ in length ({toks.shape[0]} != {lps.shape[0]})"
            )
        if lps.dtype.kind not in "fiu":
            raise _fail(prefix, f"log_probs must be numeric, got dtype {lps.dtype}")
        lps = lps.astype(np.float64, copy=False)
        if toks.dtype.kind in "iu":
            if toks.dtype.kind == "u" and toks.size and int(toks.max()) > INT64_MAX:
                raise _fail(prefix, f"token id {int(toks.max())} does not fit in int64 (ids must be < 2**63)")
            if vocab.int_tokens():
                ids = toks.astype(np.int64, copy=False)
            else:
                ids = np.array([vocab.id(int(t)) for t in toks], dtype=np.int64)
        else:
            ids = vocab.ids(toks.tolist())
        _check_unique(ids, prefix, vocab)
    else:
        toks, vals = _pairs(raw, prefix)
        lps = real_values(toks, vals, prefix)
        if lps.ndim != 1:
            raise _fail(prefix, "log_probs must be real numbers")
        ids = np.fromiter((vocab.id(t) for t in toks), dtype=np.int64, count=len(toks))
        _check_unique(ids, prefix, vocab)
    return normalize(ids, lps, prefix, ps)


def normalize(ids: np.ndarray, lps: np.ndarray, prefix: tuple, ps: Parser, report: bool = True
              ) -> tuple[np.ndarray, np.ndarray]:
    """One table's checks (empty, NaN, ``> 0``, no finite entry, sum off 1 by more than ``norm_tol``)
    by the reference formula; ``-inf`` entries dropped; renormalized (and reported) when
    ``|log sum p| > RENORM_TOL``."""
    if lps.shape[0] == 0:
        raise _fail(prefix, "empty step table (probabilities must sum to 1)")
    mx = lps.max()
    if not mx <= 0.0:
        if np.isnan(lps).any():
            j = int(np.flatnonzero(np.isnan(lps))[0])
            raise _fail(prefix, f"log_prob is NaN for token {ps.vocab.token(ids[j])!r}")
        j = int(np.argmax(lps))
        raise _fail(prefix, f"log_prob must be <= 0, got {float(lps[j])!r} for token {ps.vocab.token(ids[j])!r}")
    if mx == -math.inf:
        raise _fail(prefix, "no finite log_prob (probabilities must sum to 1)")
    lse = float(mx + math.log(float(np.exp(lps - mx).sum())))
    if abs(math.expm1(lse)) > ps.norm_tol:
        raise _fail(
            prefix,
            f"probabilities sum to {math.exp(lse):.6g}, not 1 (tolerance {ps.norm_tol:g})",
        )
    finite = lps > -math.inf
    if not finite.all():
        ids, lps = ids[finite], lps[finite]
    if abs(lse) > RENORM_TOL:
        lps = lps - lse
        if report and ps.on_renorm is not None:
            ps.on_renorm(1)
    return ids, lps


def _check_unique(ids: np.ndarray, prefix: Any, vocab: Vocab) -> None:
    n = ids.shape[0]
    if n < 2:
        return
    lo, hi = int(ids.min()), int(ids.max())
    if lo >= 0 and hi < 4 * n + 64:
        counts = np.bincount(ids)
        if counts.max() > 1:
            raise _fail(prefix, f"duplicate token {vocab.token(int(np.argmax(counts)))!r}")
        return
    s = np.sort(ids)
    dup = np.flatnonzero(s[1:] == s[:-1])
    if dup.size:
        raise _fail(prefix, f"duplicate token {vocab.token(int(s[dup[0]]))!r}")


def sort_table(ids: np.ndarray, lps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sort a table by descending log-prob, stable (ties keep the model's order): a packed-key
    sort, checked (:func:`arenum.step.dense.desc_sort_row`)."""
    order = desc_sort_row(lps)
    return ids[order], lps[order]


def check_cardinality(name: str, raw: Any, expected: int, what: str, unit: str) -> None:
    """Exactly one result per item, checked before anything is trusted or cached."""
    try:
        n = len(raw)
    except TypeError:
        raise TypeError(f"{name} must return a sequence of results, got {type(raw).__name__}") from None
    if n != expected:
        raise ValueError(
            f"{name} returned {n} results {what.format(n=expected)}; it must return exactly one result per {unit}"
        )


# ---------------------------------------------------------------------- dense batches
_BLOCK_ENTRIES = 1 << 16  # dense rows are validated and cut in blocks of about this many entries
_CLEAR = 1e-13
"""A row with ``max <= 0`` and ``|sum(exp(row)) - 1| <= _CLEAR`` is normalized to float64 precision
(reference log-sum within ``1.1e-13`` of 0 for a pairwise sum, ``5.6e-13`` for a BLAS sum of up to
:data:`arenum.step.dense.DOT_MAX_V` terms; inside ``RENORM_TOL`` either way): used verbatim."""
_CANDIDATES = 64  # past this many entries per row above a block's lowest floor: cut row by row
_QUIET = {"invalid": "ignore", "over": "ignore", "divide": "ignore"}  # bad rows are reported after the sweep


def _block_rows(V: int) -> int:
    return max(1, _BLOCK_ENTRIES // max(V, 1))


def _as_float64(arr: np.ndarray, scratch: Scratch) -> np.ndarray:
    """``arr`` itself when it is C-contiguous float64, else a float64 copy in ``scratch``."""
    if arr.dtype == np.float64 and arr.flags.c_contiguous:
        return arr
    out = scratch(arr.shape, np.float64, "rows")
    np.copyto(out, arr)
    return out


def _reference(arr: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(max, lse)`` of ``arr[rows]`` by the reference formula ``max + log(sum(exp(row - max)))``
    (the values every message and renormalization use), in cache-sized blocks."""
    mx, lse = np.empty(rows.shape[0]), np.empty(rows.shape[0])
    step = _block_rows(arr.shape[1])
    for a in range(0, rows.shape[0], step):
        sub = arr[rows[a : a + step]]  # a copy
        m = sub.max(axis=1)
        sub -= m[:, None]
        np.exp(sub, out=sub)
        mx[a : a + step] = m
        lse[a : a + step] = m + np.log(sub.sum(axis=1))
    return mx, lse


def _cut_rows(arr: np.ndarray, rows: np.ndarray, shift: np.ndarray, floors: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(row, column, lp)`` of the entries ``>= floors[j]`` of ``arr[rows[j]] - shift[j]`` (a
    nonzero ``shift`` renormalizes; a zero one leaves the row verbatim), in cache-sized blocks."""
    V = arr.shape[1]
    step = _block_rows(V)
    out_r, out_c, out_lp = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)], [np.zeros(0)]
    for a in range(0, rows.shape[0], step):
        sub = arr[rows[a : a + step]]  # a copy
        sh = shift[a : a + step]
        nz = np.flatnonzero(sh != 0.0)
        if nz.size:
            sub[nz] -= sh[nz, None]
        flat = np.flatnonzero(sub >= floors[a : a + step, None])
        r = flat // V
        out_r.append(rows[a + r])
        out_c.append(flat - r * V)
        out_lp.append(sub.reshape(-1)[flat])
    return np.concatenate(out_r), np.concatenate(out_c), np.concatenate(out_lp)


def _raise_bad_rows(arr: np.ndarray, mx: np.ndarray, lse: np.ndarray, prefixes: list[tuple], ps: Parser) -> None:
    """Raise the first bad row's error, in a fixed priority: NaN, ``> 0`` or no finite entry (first
    such row), then a sum off 1 by more than ``norm_tol`` (first such row)."""
    bad = ~(mx <= 0.0) | (mx == -math.inf)
    if bad.any():
        r = int(np.flatnonzero(bad)[0])
        ids_bad = _column_ids(arr.shape[1], ps.vocab)  # decides the token mode before a message names one
        normalize(ids_bad, arr[r].astype(np.float64), prefixes[r], ps, report=False)  # raises
    off = np.abs(np.expm1(lse)) > ps.norm_tol
    if off.any():
        r = int(np.flatnonzero(off)[0])
        raise _fail(
            prefixes[r],
            f"probabilities sum to {math.exp(lse[r]):.6g}, not 1 (tolerance {ps.norm_tol:g})",
        )


def _verdict(arr: np.ndarray, odd: np.ndarray, prefixes: list[tuple], ps: Parser
             ) -> tuple[np.ndarray, np.ndarray]:
    """Check a batch whose rows outside ``odd`` passed the fast check; raise for a bad row; return
    ``(rows to renormalize, every row's lse)`` (``lse = 0`` for the rows used verbatim)."""
    n = arr.shape[0]
    mx, lse = np.zeros(n), np.zeros(n)
    if odd.size:
        mx[odd], lse[odd] = _reference(arr, odd)
    _raise_bad_rows(arr, mx, lse, prefixes, ps)
    return odd[np.abs(lse[odd]) > RENORM_TOL], lse


def parse_dense_batch(arr: np.ndarray, prefixes: list[tuple], ps: Parser) -> tuple[np.ndarray, np.ndarray]:
    """Validate a dense ``(n, V)`` batch; return ``(normalized rows, ids of the columns)``.

    The fast check (one ``exp`` and sum per block, plus the row max) clears rows normalized to
    float64 precision; the others get the reference formula (:func:`_reference`). The rows
    returned may live in a ``scratch`` work buffer: callers copy what they keep.
    """
    scratch = ps.scratch
    fast = ps.norm_tol >= 1e-11 and arr.dtype == np.float64
    arr = _as_float64(arr, scratch)
    n, V = arr.shape
    with np.errstate(**_QUIET):
        s = kernels.rows_sum(arr) if fast else None  # compiled: NaN for a row with an entry > 0
        if s is not None:
            odd = np.flatnonzero(~(np.abs(s - 1.0) <= _CLEAR))
        elif fast:
            s, mx, _, _ = sweep(arr, _block_rows(V), scratch, row_max=True)
            odd = np.flatnonzero(~((np.abs(s - 1.0) <= _CLEAR) & (mx <= 0.0)))
        else:
            odd = np.arange(n)
        renorm, lse = _verdict(arr, odd, prefixes, ps)
    ids_all = _column_ids(V, ps.vocab)
    if renorm.size:
        out = scratch(arr.shape, np.float64, "rows")
        if out is not arr and not np.shares_memory(out, arr):
            np.copyto(out, arr)
        out[renorm] -= lse[renorm, None]
        arr = out
        if ps.on_renorm is not None:
            ps.on_renorm(int(renorm.size))
    return arr, ids_all


def parse_dense_heads(arr: np.ndarray, prefixes: list[tuple], floors: np.ndarray, ps: Parser
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Validate a dense ``(n, V)`` batch and cut its heads: ``(row, ids, lps)``, the entries
    ``>= floors[row]`` of the normalized rows, rows in order, each row's sorted (descending, ties in
    column order). Same checks, messages and values as :func:`parse_dense_batch` then a cut.

    One sweep of cache-sized blocks (:func:`arenum.step.dense.sweep`): ``exp`` and its row sums (the normalization
    check), one comparison with the floors, the cut; then the heads are sorted in chunks of rows
    (:func:`arenum.step.dense.sorted_heads`). The floors are capped at 0 for the comparison, so an
    entry ``> 0`` lands in the cut and sends its row to the reference check (no max pass).
    Rows the fast check does not clear (reduced precision, unnormalized, bad) get the reference
    formula; the renormalized ones are cut again from their renormalized values.
    """
    scratch = ps.scratch
    fast = ps.norm_tol >= 1e-11 and arr.dtype == np.float64  # float64 from the model: reduced precision is rare
    arr = _as_float64(arr, scratch)
    n, V = arr.shape
    cap = np.minimum(floors, 0.0)
    with np.errstate(**_QUIET):
        if fast:
            ks = kernels.heads_sweep(arr, cap)  # compiled, fused; None: the numpy sweep
            if ks is not None:
                s, flats, vals = ks
            else:
                s, _, flats, vals = sweep(arr, _block_rows(V), scratch, cap, candidates=_CANDIDATES)
            r, c, lp, pos_rows = sorted_heads(flats, vals, V, cap)
            odd_mask = ~(np.abs(s - 1.0) <= _CLEAR)
            odd_mask[pos_rows] = True
            odd = np.flatnonzero(odd_mask)
        else:  # converted (e.g. float32): every row is renormalized, so the reference for all
            odd = np.arange(n)
            r, c, lp = np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0)
        renorm, lse = _verdict(arr, odd, prefixes, ps)
        if ps.on_renorm is not None and renorm.size:
            ps.on_renorm(int(renorm.size))
        redo = renorm if fast else odd  # the slow path: rows within RENORM_TOL stay verbatim (shift 0)
        if redo.size:
            stale = np.zeros(n, np.bool_)
            stale[redo] = True
            keep = ~stale[r]
            r2, c2, lp2 = _cut_rows(arr, redo, np.where(np.abs(lse[redo]) > RENORM_TOL, lse[redo], 0.0), cap[redo])
            o2 = head_order(r2, lp2, np.bincount(r2, minlength=n))
            r, c, lp = (np.concatenate((x[keep], y[o2])) for x, y in ((r, r2), (c, c2), (lp, lp2)))
            o = np.argsort(r, kind="stable")  # each row's entries are sorted and together: order the rows
            r, c, lp = r[o], c[o], lp[o]
    if (cap < floors).any():  # floors above 0 (nothing valid reaches them): the exact cut
        keep = lp >= floors[r]
        r, c, lp = r[keep], c[keep], lp[keep]
    if ps.vocab.int_tokens():
        return r, c, lp  # the ids are the columns
    return r, _column_ids(V, ps.vocab)[c], lp


def dense_widths(arr: np.ndarray, r: np.ndarray) -> np.ndarray:
    """Each dense row's table width, its entries above ``-inf`` (a ``-inf`` column is no entry), given
    ``r``, the rows of the heads cut from it: a row whose head holds all of them is whole, and is not
    scored again for a deeper threshold. One ``min`` pass when a row is cut; the count only for rows
    that hold a ``-inf``."""
    n, V = arr.shape
    w = np.full(n, V, np.int64)
    if n and np.bincount(r, minlength=n).min() < V:
        sub = np.flatnonzero(arr.min(axis=1) == -math.inf)
        if sub.size:
            w[sub] = np.count_nonzero(arr[sub] > -math.inf, axis=1)
    return w


def rows_of_dense(arr: np.ndarray, ids_all: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """The ``(ids, logps)`` table of each validated dense row, ``-inf`` entries dropped (unsorted)."""
    out = []
    for row in arr:
        keep = row > -math.inf
        out.append((ids_all, row) if keep.all() else (ids_all[keep], row[keep]))
    return out


def collect_rows(tabs, rows, floors, parts_row, parts_ids, parts_lp, full) -> None:
    """The entries ``>= floors[i]`` of parsed tables (``tabs[j]`` is row ``rows[j]``), unsorted;
    appended to the three lists, each table's width written to ``full``."""
    for i, (ids, lps) in zip(rows.tolist(), tabs):
        m = lps >= floors[i]
        k = int(m.sum())
        parts_row.append(np.full(k, i, np.int64))
        parts_ids.append(ids[m])
        parts_lp.append(lps[m])
        full[i] = lps.shape[0]


# ---------------------------------------------------------------------- heads
def parse_heads(
    raw: Any, prefixes: list[tuple], floors: np.ndarray, ps: Parser
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
    """Check one ``batch_next_heads`` result: ``(row, ids, lps, widths, offsets)`` with ``lps >= floors[row]``.

    Contract: ``batch_next_heads(prefixes, floors) -> (counts, tokens, log_probs, widths)``, all
    1-D arrays: ``counts[i]`` entries of prefix ``i`` (rows concatenated in prefix order, equal
    log-probs in the model's table order), every entry with ``log_prob >= floors[i]`` included
    (more is allowed: they are dropped here), integer tokens, and ``widths[i]`` the number of
    finite entries of the whole table. The callback guarantees each whole table is normalized;
    what can be seen is checked: cardinality, shapes, NaN, ``> 0``, duplicate tokens,
    ``counts <= widths``, and a head whose probabilities sum above ``1 + norm_tol``. A fifth array
    ``offsets`` (float64, one per prefix, NaN where unknown) may follow: row ``i``'s log-probs are
    ``float64(float32 value) - offsets[i]``; a store uses it to keep the row in 4 bytes an entry and
    checks it there, so a wrong offset costs bytes, never a value (``offsets`` is ``None`` without it).
    """
    n = len(prefixes)
    if not (isinstance(raw, (tuple, list)) and len(raw) in (4, 5)):
        raise TypeError(
            "batch_next_heads must return a (counts, tokens, log_probs, widths[, offsets]) tuple of arrays, "
            f"got {type(raw).__name__}"
        )
    counts, toks, lps, widths = (np.asarray(x) for x in raw[:4])
    offsets = None
    if len(raw) == 5 and raw[4] is not None:
        offsets = np.asarray(raw[4])
        if offsets.shape != (n,) or offsets.dtype.kind != "f":
            raise ValueError(f"batch_next_heads: offsets must be {n} floats, one per prefix, got "
                             f"{offsets.dtype} {offsets.shape}")
        offsets = offsets.astype(np.float64, copy=False)
    for name, a, m in (("counts", counts, n), ("widths", widths, n)):
        if a.ndim != 1 or a.dtype.kind not in "iu":
            raise TypeError(f"batch_next_heads: {name} must be a 1-D integer array, got {a.dtype} {a.shape}")
        if a.shape[0] != m:
            raise ValueError(
                f"batch_next_heads returned {a.shape[0]} {name} for a batch of {m} prefixes; "
                "it must return exactly one per prefix"
            )
    counts = counts.astype(np.int64, copy=False)
    widths = widths.astype(np.int64, copy=False)
    if (counts < 0).any() or (counts > widths).any():
        i = int(np.flatnonzero((counts < 0) | (counts > widths))[0])
        raise ValueError(
            f"batch_next_heads({short_repr(prefixes[i])}): {counts[i]} entries for a table of {widths[i]}"
        )
    total = int(counts.sum())
    if toks.ndim != 1 or lps.ndim != 1 or toks.shape[0] != total or lps.shape[0] != total:
        raise ValueError(
            f"batch_next_heads: tokens {toks.shape} and log_probs {lps.shape} must both hold "
            f"sum(counts) = {total} entries"
        )
    if toks.dtype.kind not in "iu" or (total and int(toks.min()) < 0):
        raise TypeError("batch_next_heads: tokens must be non-negative integer ids")
    if lps.dtype.kind not in "fiu":
        raise TypeError(f"batch_next_heads: log_probs must be numeric, got dtype {lps.dtype}")
    if not ps.vocab.int_tokens():
        raise TypeError("batch_next_heads needs integer tokens, but this model's tokens are not integers")
    if total and toks.dtype.kind == "u" and int(toks.max()) > INT64_MAX:
        raise ValueError(f"batch_next_heads: token id {int(toks.max())} does not fit in int64 (ids must be < 2**63)")
    ids = toks.astype(np.int64, copy=False)
    lps = lps.astype(np.float64, copy=False)
    row = np.repeat(np.arange(n, dtype=np.int64), counts)
    bad = ~(lps <= 0.0)
    if bad.any():
        j = int(np.flatnonzero(bad)[0])
        what = "NaN" if np.isnan(lps[j]) else f"{float(lps[j])!r} (must be <= 0)"
        raise ValueError(
            f"batch_next_heads({short_repr(prefixes[row[j]])}): log_prob is {what} for token {int(ids[j])}"
        )
    if total > 1:
        width = int(ids.max()) + 1
        key = row * width + ids
        key.sort()
        dup = np.flatnonzero(key[1:] == key[:-1])
        if dup.size:
            i, t = divmod(int(key[dup[0]]), width)
            raise ValueError(f"batch_next_heads({short_repr(prefixes[i])}): duplicate token {t}")
    mass = np.bincount(row, weights=np.exp(lps), minlength=n)
    norm_tol = ps.norm_tol
    over = mass > 1.0 + norm_tol
    if over.any():
        i = int(np.flatnonzero(over)[0])
        raise ValueError(
            f"batch_next_heads({short_repr(prefixes[i])}): head probabilities sum to {mass[i]:.6g} > 1 "
            f"(tolerance {norm_tol:g})"
        )
    keep = lps >= floors[row]
    if not keep.all():
        row, ids, lps = row[keep], ids[keep], lps[keep]
    return row, ids, lps, widths, offsets


def build_heads(parts_row: list, parts_ids: list, parts_lp: list, full: np.ndarray, n: int,
                presorted: bool) -> Heads:
    """:class:`Heads` of ``n`` rows from parts (row, id, log-prob arrays); ``presorted``: every part
    holds whole rows, each already sorted (the parts are only grouped by row)."""
    if len(parts_row) == 1:  # one part (one dense chunk): used as it is
        row, ids, lps = parts_row[0], parts_ids[0], parts_lp[0]
    elif parts_row:
        row = np.concatenate(parts_row)
        ids = np.concatenate(parts_ids)
        lps = np.concatenate(parts_lp)
    else:
        row, ids, lps = np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0)
    lens = np.bincount(row, minlength=n).astype(np.int64)
    if not presorted:
        order = head_order(row, lps, lens)
        ids, lps = ids[order], lps[order]
    elif row.shape[0] > 1 and (row[1:] < row[:-1]).any():
        order = np.argsort(row, kind="stable")  # sorted rows, interleaved: group them
        ids, lps = ids[order], lps[order]
    return Heads(ids, lps, lens, full)


def heads_in_order(parts_lens: list, parts_ids: list, parts_lp: list, full: np.ndarray, presorted: bool) -> Heads:
    """:class:`Heads` of rows given in order, in parts (row ``i`` of a part is the next ``lens[i]``
    entries of its ``ids``/``lps``); ``presorted``: each row already in table order."""
    def cat(parts: list, dtype: type) -> np.ndarray:
        if len(parts) == 1:
            return parts[0]
        return np.concatenate(parts) if parts else np.zeros(0, dtype)

    lens, ids, lps = cat(parts_lens, np.int64), cat(parts_ids, np.int64), cat(parts_lp, np.float64)
    if not presorted:
        order = desc_order(lps, lens)
        ids, lps = ids[order], lps[order]
    return Heads(ids, lps, lens, full)


def head_order(row: np.ndarray, lps: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """Permutation sorting entries by (row, descending log-prob, given order): ``lexsort((-lps, row))``
    (``lens = bincount(row)``). Rows given grouped in order (dense heads) are sorted in place
    (:func:`arenum.step.dense.desc_order`); others are grouped first by a stable sort of ``row``."""
    if row.shape[0] > 1 and (row[1:] < row[:-1]).any():
        by_row = np.argsort(row, kind="stable")
        return by_row[desc_order(lps[by_row], lens)]
    return desc_order(lps, lens)
