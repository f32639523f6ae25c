"""Step oracle: the only code that calls the user's model.

It parses and validates every raw step table once, turns tokens into integer ids, memoizes full
tables for prefixes scored outside the prefix tree (best-first listing, sampling, log-densities,
harvests), fills the tree's tables in batches, and counts every forward.

Accepted result forms for one prefix (``next_logprobs(prefix)``):

- a list of ``(token, log_prob)`` pairs;
- a ``(tokens, log_probs)`` pair of numpy arrays;
- a dense 1-D float array of length ``V`` whose index is the token id (``arenum`` extension).

``batch_next_logprobs(prefixes)`` returns a list of such results, or a dense 2-D array ``(n, V)``.

``batch_next_heads(prefixes, floors)`` (optional, an ``arenum`` extension for adapters that can cut
rows where the model runs, e.g. on a GPU) returns only the table heads the prefix tree asks for; see
:meth:`StepOracle.fetch_heads` and :func:`check_heads` for the contract and what is checked.

Validation (each a ``ValueError`` naming the prefix): NaN; a log-prob ``> 0`` (this catches
``+inf``); duplicate tokens; mismatched array lengths; no finite entry; ``|sum(p) - 1| > norm_tol``.
``-inf`` entries are dropped. Rows whose ``|log sum p| > 1e-12`` (reduced precision) are renormalized
by subtracting ``log sum p``; rows normalized to float64 precision are used verbatim, so scores are
bit-identical to summing the model's own numbers.

Table order: descending log-prob; equal log-probs keep the model's order (ascending id for dense
rows). This order, and nothing else, defines "table position" in the tie rule.

This module does not decide which prefixes to score: the prefix tree and the queries do.
"""
from __future__ import annotations

import math
import numbers
import time
from collections import OrderedDict
from dataclasses import asdict, dataclass
from typing import Any, Callable, Iterable, Sequence

import numpy as np

__all__ = ["StepOracle", "OracleStats", "NORM_TOL", "RENORM_TOL"]

NORM_TOL = 1e-3
"""Default tolerance on ``|sum(p) - 1|`` for one step table."""
RENORM_TOL = 1e-12
"""Rows with ``|log sum p|`` above this are renormalized; below it they are used verbatim."""


@dataclass
class OracleStats:
    """Forward counters, all cumulative.

    forwards: step tables computed by the model (prefixes scored), every path included.
    calls: invocations of ``next_logprobs`` or ``batch_next_logprobs``.
    batch_calls: invocations of ``batch_next_logprobs``.
    refetches: forwards spent re-scoring a prefix whose stored head was too short for a deeper budget.
    sequences_scored: sequences scored by ``batch_score_sequences`` (teacher forcing).
    score_calls: invocations of ``batch_score_sequences``.
    harvest_calls / harvested_positions: ``all_position_logprobs`` invocations and tables cached.
    model_seconds: wall time spent inside user callbacks.
    parse_seconds: wall time spent validating and sorting step tables.
    """

    forwards: int = 0
    calls: int = 0
    batch_calls: int = 0
    refetches: int = 0
    sequences_scored: int = 0
    score_calls: int = 0
    harvest_calls: int = 0
    harvested_positions: int = 0
    model_seconds: float = 0.0
    parse_seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _is_int_token(t: Any) -> bool:
    return isinstance(t, numbers.Integral) and not isinstance(t, bool)


class StepOracle:
    """Validated, memoized access to a model's next-token tables (see module docstring).

    Tables handed out are ``(ids, logps)``: ``ids`` int64 token ids, ``logps`` float64, sorted by
    descending log-prob (stable). In integer mode ids are the model's integer tokens; otherwise tokens
    are interned (``token(id)`` maps back).
    """

    def __init__(
        self,
        next_logprobs: Callable[[tuple], Any],
        *,
        batch_next_logprobs: Callable[[list[tuple]], Any] | None = None,
        batch_size: int = 256,
        batch_score_sequences: Callable[[list[tuple]], Any] | None = None,
        all_position_logprobs: Callable[[tuple], Any] | None = None,
        batch_next_heads: Callable[[list[tuple], np.ndarray], Any] | None = None,
        eos: Any = None,
        norm_tol: float = NORM_TOL,
        cache_size: int = 200_000,
    ) -> None:
        if not callable(next_logprobs):
            raise TypeError(f"next_logprobs must be callable, got {type(next_logprobs).__name__}")
        for name, fn in (
            ("batch_next_logprobs", batch_next_logprobs),
            ("batch_score_sequences", batch_score_sequences),
            ("all_position_logprobs", all_position_logprobs),
            ("batch_next_heads", batch_next_heads),
        ):
            if fn is not None and not callable(fn):
                raise TypeError(f"{name} must be callable or None, got {type(fn).__name__}")
        self._next = next_logprobs
        self._batch = batch_next_logprobs
        self._score = batch_score_sequences
        self._allpos = all_position_logprobs
        self._heads = batch_next_heads
        self.batch_size = batch_size
        self.norm_tol = float(norm_tol)
        self.stats = OracleStats()
        # int mode: ids are the tokens themselves; object mode: interned.
        self.int_mode: bool | None = None
        self._tok2id: dict[Any, int] = {}
        self._id2tok: list[Any] = []
        self._cache: OrderedDict[tuple, tuple[np.ndarray, np.ndarray]] = OrderedDict()
        self._cache_size = int(cache_size)
        self._bufs: dict[Any, np.ndarray] = {}
        self.eos_id: int | None = None
        if eos is not None:
            self.int_mode = _is_int_token(eos)
            self.eos_id = self.token_id(eos)

    # ------------------------------------------------------------------ token ids
    def token_id(self, token: Any, *, intern: bool = True) -> int | None:
        """Integer id of ``token`` (``None`` if unknown and ``intern`` is False)."""
        if self.int_mode is None:
            self.int_mode = _is_int_token(token)
        if self.int_mode:
            if not _is_int_token(token):
                raise TypeError(
                    f"token {token!r} is not an integer, but this model's tokens are integers"
                )
            return int(token)
        try:
            return self._tok2id[token]
        except KeyError:
            if not intern:
                return None
            i = len(self._id2tok)
            self._tok2id[token] = i
            self._id2tok.append(token)
            return i
        except TypeError:
            raise TypeError(f"token {token!r} is not hashable") from None

    def token(self, tid: int) -> Any:
        """Inverse of :meth:`token_id`."""
        return int(tid) if self.int_mode else self._id2tok[int(tid)]

    def tokens(self, ids: Iterable[int]) -> tuple:
        """Token tuple for an iterable of ids."""
        if self.int_mode:
            return tuple(int(i) for i in ids)
        t = self._id2tok
        return tuple(t[int(i)] for i in ids)

    def ids_of(self, seq: Sequence[Any]) -> list[int | None]:
        """Ids of a user sequence; ``None`` for a token the model never produced."""
        if self.int_mode is None:
            return [None] * len(seq)
        if self.int_mode:
            return [int(t) if _is_int_token(t) else None for t in seq]
        out: list[int | None] = []
        for t in seq:
            try:
                out.append(self._tok2id.get(t))
            except TypeError:
                raise TypeError(f"token {t!r} is not hashable") from None
        return out

    # ------------------------------------------------------------------ parsing
    def _fail(self, prefix: Any, msg: str) -> ValueError:
        return ValueError(f"next_logprobs({_short(prefix)}): {msg}")

    def _parse_one(self, raw: Any, prefix: tuple) -> tuple[np.ndarray, np.ndarray]:
        """Validate one raw result; return ``(ids, logps)`` unsorted, ``-inf`` dropped, normalized."""
        if isinstance(raw, np.ndarray) and raw.ndim == 1 and raw.dtype.kind == "f":
            lps = raw.astype(np.float64, copy=False)
            if self.int_mode is None:
                self.int_mode = True
            if self.int_mode:
                ids = np.arange(lps.shape[0], dtype=np.int64)
            else:
                ids = np.array([self.token_id(i) for i in range(lps.shape[0])], dtype=np.int64)
        elif (
            isinstance(raw, (tuple, list))
            and len(raw) == 2
            and isinstance(raw[0], np.ndarray)
            and isinstance(raw[1], np.ndarray)
        ):
            toks, lps = raw
            if toks.ndim != 1 or lps.ndim != 1:
                raise self._fail(prefix, f"tokens and log_probs must be 1-D arrays, got shapes {toks.shape} and {lps.shape}")
            if toks.shape[0] != lps.shape[0]:
                raise self._fail(
                    prefix, f"tokens and log_probs differ in length ({toks.shape[0]} != {lps.shape[0]})"
                )
            if lps.dtype.kind not in "fiu":
                raise self._fail(prefix, f"log_probs must be numeric, got dtype {lps.dtype}")
            lps = lps.astype(np.float64, copy=False)
            if toks.dtype.kind in "iu":
                if self.int_mode is None:
                    self.int_mode = True
                if self.int_mode:
                    ids = toks.astype(np.int64, copy=False)
                else:
                    ids = np.array([self.token_id(int(t)) for t in toks], dtype=np.int64)
            else:
                ids = np.array([self.token_id(t) for t in toks.tolist()], dtype=np.int64)
            _check_unique(ids, lambda m: self._fail(prefix, m), self)
        else:
            try:
                pairs = list(raw)
            except TypeError:
                raise TypeError(
                    f"next_logprobs({_short(prefix)}) must return (token, log_prob) pairs, a "
                    f"(tokens, log_probs) array pair or a dense log-prob array; got {type(raw).__name__}"
                ) from None
            toks = []
            vals = []
            for item in pairs:
                try:
                    t, v = item
                except (TypeError, ValueError):
                    raise self._fail(prefix, f"expected (token, log_prob) pairs, got item {item!r}") from None
                toks.append(t)
                vals.append(v)
            try:
                lps = np.asarray(vals, dtype=np.float64)
            except (TypeError, ValueError):
                raise self._fail(prefix, "log_probs must be real numbers") from None
            ids = np.fromiter((self.token_id(t) for t in toks), dtype=np.int64, count=len(toks))
            _check_unique(ids, lambda m: self._fail(prefix, m), self)
        return self._normalize(ids, lps, prefix)

    def _normalize(self, ids: np.ndarray, lps: np.ndarray, prefix: tuple) -> tuple[np.ndarray, np.ndarray]:
        if lps.shape[0] == 0:
            raise self._fail(prefix, "empty step table (probabilities must sum to 1)")
        mx = lps.max()
        if not mx <= 0.0:
            if np.isnan(lps).any():
                j = int(np.flatnonzero(np.isnan(lps))[0])
                raise self._fail(prefix, f"log_prob is NaN for token {self.token(ids[j])!r}")
            j = int(np.argmax(lps))
            raise self._fail(prefix, f"log_prob must be <= 0, got {float(lps[j])!r} for token {self.token(ids[j])!r}")
        if mx == -math.inf:
            raise self._fail(prefix, "no finite log_prob (probabilities must sum to 1)")
        lse = float(mx + math.log(float(np.exp(lps - mx).sum())))
        if abs(math.expm1(lse)) > self.norm_tol:
            raise self._fail(
                prefix,
                f"probabilities sum to {math.exp(lse):.6g}, not 1 (tolerance {self.norm_tol:g})",
            )
        finite = lps > -math.inf
        if not finite.all():
            ids, lps = ids[finite], lps[finite]
        if abs(lse) > RENORM_TOL:
            lps = lps - lse
        return ids, lps

    def _parse_dense_batch(self, arr: np.ndarray, prefixes: list[tuple]) -> tuple[np.ndarray, np.ndarray]:
        """Validate a dense ``(n, V)`` batch; return ``(normalized rows, ids of the columns)``.

        The rows returned may live in a reusable work buffer: callers copy what they keep.
        """
        if arr.dtype != np.float64:
            arr64 = self._scratch(arr.shape, np.float64, "rows")
            np.copyto(arr64, arr)
            arr = arr64
        n, V = arr.shape
        mx = np.empty(n)
        lse = np.empty(n)
        step = _block_rows(V)
        buf = self._scratch((min(n, step), V))
        with np.errstate(invalid="ignore"):  # a NaN row is reported below
            for a in range(0, n, step):  # in cache-sized blocks of rows: each pass reads from cache
                blk = arr[a : a + step]
                m = blk.max(axis=1)
                mx[a : a + step] = m
                b = buf[: blk.shape[0]]
                np.subtract(blk, m[:, None], out=b)
                np.exp(b, out=b)
                lse[a : a + step] = m + np.log(b.sum(axis=1))
        bad = ~(mx <= 0.0) | (mx == -math.inf)
        if bad.any():
            r = int(np.flatnonzero(bad)[0])
            self._normalize(np.arange(arr.shape[1], dtype=np.int64), arr[r], prefixes[r])  # raises
        off = np.abs(np.expm1(lse)) > self.norm_tol
        if off.any():
            r = int(np.flatnonzero(off)[0])
            raise self._fail(
                prefixes[r],
                f"probabilities sum to {math.exp(lse[r]):.6g}, not 1 (tolerance {self.norm_tol:g})",
            )
        if self.int_mode is None:
            self.int_mode = True
        if self.int_mode:
            ids_all = np.arange(arr.shape[1], dtype=np.int64)
        else:
            ids_all = np.array([self.token_id(i) for i in range(arr.shape[1])], dtype=np.int64)
        renorm = np.abs(lse) > RENORM_TOL
        if renorm.any():
            out = self._scratch(arr.shape, np.float64, "rows")
            if out is not arr and not np.shares_memory(out, arr):
                np.copyto(out, arr)
            out[renorm] -= lse[renorm, None]
            arr = out
        return arr, ids_all

    def _scratch(self, shape: tuple[int, int], dtype: Any = np.float64, slot: str = "") -> np.ndarray:
        """A reusable work buffer per (dtype, slot) (avoids page faults of fresh temporaries)."""
        n = shape[0] * shape[1]
        key = (np.dtype(dtype), slot)
        buf = self._bufs.get(key)
        if buf is None or buf.shape[0] < n:
            buf = self._bufs[key] = np.empty(n, dtype)
        return buf[:n].reshape(shape)

    def _rows_of_dense(self, arr: np.ndarray, ids_all: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
        out = []
        for row in arr:
            keep = row > -math.inf
            out.append((ids_all, row) if keep.all() else (ids_all[keep], row[keep]))
        return out

    # ------------------------------------------------------------------ calling the model
    def _call_single(self, prefix: tuple) -> tuple[np.ndarray, np.ndarray]:
        t0 = time.perf_counter()
        raw = self._next(prefix)
        t1 = time.perf_counter()
        self.stats.model_seconds += t1 - t0
        self.stats.calls += 1
        out = self._parse_one(raw, prefix)
        self.stats.parse_seconds += time.perf_counter() - t1
        return out

    def _call_batch(self, prefixes: list[tuple]) -> Any:
        """One batched call: a validated ``(rows, column ids)`` dense pair or a list of tables."""
        assert self._batch is not None
        t0 = time.perf_counter()
        raw = self._batch(list(prefixes))
        t1 = time.perf_counter()
        self.stats.model_seconds += t1 - t0
        self.stats.calls += 1
        self.stats.batch_calls += 1
        _check_cardinality("batch_next_logprobs", raw, len(prefixes), "for a batch of {n} prefixes", "prefix")
        if isinstance(raw, np.ndarray) and raw.ndim == 2 and raw.dtype.kind == "f":
            out: Any = self._parse_dense_batch(raw, prefixes)
        else:
            out = [self._parse_one(r, p) for r, p in zip(raw, prefixes)]
        self.stats.parse_seconds += time.perf_counter() - t1
        return out

    def fetch_heads(self, prefixes: list[tuple], floors: np.ndarray) -> "Heads":
        """Sorted heads of the tables of ``prefixes``: the entries with ``lp >= floors[i]``.

        One forward per uncached prefix, through ``batch_next_logprobs`` in ``batch_size`` chunks
        when available (every row validated before anything is returned; only one chunk of full
        rows is held at a time). Returns :class:`Heads` in the order of ``prefixes``.
        """
        n = len(prefixes)
        floors = np.maximum(np.asarray(floors, np.float64), np.finfo(np.float64).min)
        parts_row: list[np.ndarray] = []
        parts_ids: list[np.ndarray] = []
        parts_lp: list[np.ndarray] = []
        full = np.zeros(n, np.int64)
        presorted = True  # every part holds whole rows, each sorted (cached tables, dense heads)
        cache = self._cache
        if not cache:  # the common case while building: no per-prefix lookups
            todo = list(range(n))
        else:
            todo = []
            for i, p in enumerate(prefixes):
                hit = cache.get(p)
                if hit is None:
                    todo.append(i)
                    continue
                ids, lps = hit
                k = int(np.searchsorted(-lps, -floors[i], side="right"))
                parts_row.append(np.full(k, i, np.int64))
                parts_ids.append(ids[:k])
                parts_lp.append(lps[:k])
                full[i] = lps.shape[0]
        t_parse = 0.0
        if self._heads is not None:
            presorted = False
            bs = self.batch_size
            for a in range(0, len(todo), bs):
                chunk = np.array(todo[a : a + bs], np.int64)
                r, ids, lps, widths = self._call_heads([prefixes[i] for i in chunk], floors[chunk])
                parts_row.append(chunk[r])
                parts_ids.append(ids)
                parts_lp.append(lps)
                full[chunk] = widths
                self.stats.forwards += len(chunk)
        elif self._batch is not None:
            bs = self.batch_size
            for a in range(0, len(todo), bs):
                chunk = np.array(todo[a : a + bs], np.int64)
                res = self._call_batch([prefixes[i] for i in chunk])
                t0 = time.perf_counter()
                if isinstance(res, tuple):
                    arr, ids_all = res
                    self._dense_heads(arr, ids_all, chunk, floors[chunk], parts_row, parts_ids, parts_lp)
                    full[chunk] = arr.shape[1]  # -inf entries count as present: at worst a needless re-score
                else:
                    presorted = False
                    self._collect_rows(res, chunk, floors, parts_row, parts_ids, parts_lp, full)
                t_parse += time.perf_counter() - t0
                self.stats.forwards += len(chunk)
        else:
            presorted = presorted and not todo
            for i in todo:
                tab = self._call_single(prefixes[i])
                t0 = time.perf_counter()
                self._collect_rows([tab], np.array([i]), floors, parts_row, parts_ids, parts_lp, full)
                t_parse += time.perf_counter() - t0
                self.stats.forwards += 1
        t0 = time.perf_counter()
        if parts_row:
            row = np.concatenate(parts_row)
            ids = np.concatenate(parts_ids)
            lps = np.concatenate(parts_lp)
        else:
            row, ids, lps = np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0)
        lens = np.bincount(row, minlength=n).astype(np.int64)
        if not presorted:
            order = _head_order(row, lps, lens)
            ids, lps = ids[order], lps[order]
        elif row.shape[0] > 1 and (row[1:] < row[:-1]).any():
            order = np.argsort(row, kind="stable")  # sorted rows, interleaved: group them
            ids, lps = ids[order], lps[order]
        heads = Heads(ids, lps, lens, full)
        self.stats.parse_seconds += t_parse + time.perf_counter() - t0
        return heads

    @staticmethod
    def _dense_heads(arr: np.ndarray, ids_all: np.ndarray, chunk: np.ndarray, floors: np.ndarray,
                     parts_row: list, parts_ids: list, parts_lp: list) -> None:
        """The entries ``>= floors`` of validated dense rows, each row's sorted (descending, ties in
        column order), rows in order; in cache-sized blocks of rows."""
        n, V = arr.shape
        step = _block_rows(V)
        for a in range(0, n, step):
            blk = arr[a : a + step]
            mask = blk >= floors[a : a + step, None]
            cnt = mask.sum(axis=1)
            flat = np.flatnonzero(mask)
            lp = blk.reshape(-1)[flat]
            r = np.repeat(np.arange(blk.shape[0]), cnt)
            o = _head_order(r, lp, cnt)  # rows stay grouped; the sort runs in cache
            flat, lp = flat[o], lp[o]
            flat -= r * V  # r is unchanged by the sort: the column of each entry
            parts_row.append(chunk[a + r])
            parts_ids.append(ids_all[flat])
            parts_lp.append(lp)

    def _call_heads(
        self, prefixes: list[tuple], floors: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """One ``batch_next_heads`` call, checked: ``(row, ids, lps, widths)`` with ``lps >= floors[row]``.

        Contract: ``batch_next_heads(prefixes, floors) -> (counts, tokens, log_probs, widths)``, all
        1-D arrays: ``counts[i]`` entries of prefix ``i`` (rows concatenated in prefix order, equal
        log-probs in the model's table order), every entry with ``log_prob >= floors[i]`` included
        (more is allowed: the oracle drops them), integer tokens, and ``widths[i]`` the number of
        finite entries of the whole table. The callback guarantees each whole table is normalized;
        what the oracle can see is checked: cardinality, shapes, NaN, ``> 0``, duplicate tokens,
        ``counts <= widths``, and a head whose probabilities sum above ``1 + norm_tol``.
        """
        assert self._heads is not None
        n = len(prefixes)
        t0 = time.perf_counter()
        raw = self._heads(list(prefixes), floors.copy())
        t1 = time.perf_counter()
        st = self.stats
        st.model_seconds += t1 - t0
        st.calls += 1
        st.batch_calls += 1
        if not (isinstance(raw, (tuple, list)) and len(raw) == 4):
            raise TypeError(
                "batch_next_heads must return a (counts, tokens, log_probs, widths) tuple of arrays, "
                f"got {type(raw).__name__}"
            )
        counts, toks, lps, widths = (np.asarray(x) for x in raw)
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
                f"batch_next_heads({_short(prefixes[i])}): {counts[i]} entries for a table of {widths[i]}"
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
        if self.int_mode is None:
            self.int_mode = True
        elif not self.int_mode:
            raise TypeError("batch_next_heads needs integer tokens, but this model's tokens are not integers")
        ids = toks.astype(np.int64, copy=False)
        lps = lps.astype(np.float64, copy=False)
        row = np.repeat(np.arange(n, dtype=np.int64), counts)
        bad = ~(lps <= 0.0)
        if bad.any():
            j = int(np.flatnonzero(bad)[0])
            what = "NaN" if np.isnan(lps[j]) else f"{float(lps[j])!r} (must be <= 0)"
            raise ValueError(
                f"batch_next_heads({_short(prefixes[row[j]])}): log_prob is {what} for token {int(ids[j])}"
            )
        if total > 1:
            width = int(ids.max()) + 1
            key = row * width + ids
            key.sort()
            dup = np.flatnonzero(key[1:] == key[:-1])
            if dup.size:
                i, t = divmod(int(key[dup[0]]), width)
                raise ValueError(f"batch_next_heads({_short(prefixes[i])}): duplicate token {t}")
        mass = np.bincount(row, weights=np.exp(lps), minlength=n)
        over = mass > 1.0 + self.norm_tol
        if over.any():
            i = int(np.flatnonzero(over)[0])
            raise ValueError(
                f"batch_next_heads({_short(prefixes[i])}): head probabilities sum to {mass[i]:.6g} > 1 "
                f"(tolerance {self.norm_tol:g})"
            )
        keep = lps >= floors[row]
        if not keep.all():
            row, ids, lps = row[keep], ids[keep], lps[keep]
        st.parse_seconds += time.perf_counter() - t1
        return row, ids, lps, widths

    @staticmethod
    def _collect_rows(tabs, rows, floors, parts_row, parts_ids, parts_lp, full) -> None:
        for i, (ids, lps) in zip(rows.tolist(), tabs):
            m = lps >= floors[i]
            k = int(m.sum())
            parts_row.append(np.full(k, i, np.int64))
            parts_ids.append(ids[m])
            parts_lp.append(lps[m])
            full[i] = lps.shape[0]

    def table(self, prefix: tuple) -> tuple[np.ndarray, np.ndarray]:
        """Full sorted table for one prefix, memoized (LRU of ``cache_size`` prefixes)."""
        hit = self._cache.get(prefix)
        if hit is not None:
            self._cache.move_to_end(prefix)
            return hit
        if self._batch is not None:
            res = self._call_batch([prefix])
            ids, lps = self._rows_of_dense(*res)[0] if isinstance(res, tuple) else res[0]
        else:
            ids, lps = self._call_single(prefix)
        self.stats.forwards += 1
        tab = sort_table(ids, lps)
        self._remember(prefix, tab)
        return tab

    def _remember(self, prefix: tuple, tab: tuple[np.ndarray, np.ndarray]) -> None:
        self._cache[prefix] = tab
        if len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)

    def cached(self, prefix: tuple) -> bool:
        return prefix in self._cache

    # ------------------------------------------------------------------ sequences
    def score_sequences(self, seqs: list[tuple]) -> np.ndarray:
        """Teacher-forcing scores through ``batch_score_sequences`` (cardinality checked)."""
        assert self._score is not None
        t0 = time.perf_counter()
        raw = self._score(list(seqs))
        self.stats.model_seconds += time.perf_counter() - t0
        self.stats.score_calls += 1
        try:
            arr = np.asarray(raw, dtype=np.float64).reshape(-1)
        except (TypeError, ValueError):
            raise TypeError(
                f"batch_score_sequences must return one real score per sequence, got {type(raw).__name__}"
            ) from None
        if arr.shape[0] != len(seqs):
            raise ValueError(
                f"batch_score_sequences returned {arr.shape[0]} scores for {len(seqs)} sequences; "
                "it must return exactly one score per sequence"
            )
        if np.isnan(arr).any() or (arr > 0).any():
            j = int(np.flatnonzero(np.isnan(arr) | (arr > 0))[0])
            raise ValueError(
                f"batch_score_sequences returned {arr[j]!r} for sequence {_short(seqs[j])}; "
                "a total log-prob must be <= 0 and not NaN"
            )
        self.stats.sequences_scored += len(seqs)
        return arr

    @property
    def has_scorer(self) -> bool:
        return self._score is not None

    def harvest(self, seq: tuple) -> int:
        """Cache the table at every prefix of ``seq`` from one ``all_position_logprobs`` call.

        Returns the number of new prefixes cached. The result's cardinality (one entry per
        position) and every row are validated before anything is written.
        """
        if self._allpos is None:
            return 0
        t0 = time.perf_counter()
        raw = self._allpos(tuple(seq))
        self.stats.model_seconds += time.perf_counter() - t0
        self.stats.harvest_calls += 1
        _check_cardinality("all_position_logprobs", raw, len(seq), "for a sequence of length {n}", "position")
        prefixes = [tuple(seq[:d]) for d in range(len(seq))]
        if isinstance(raw, np.ndarray) and raw.ndim == 2 and raw.dtype.kind == "f":
            parsed = self._rows_of_dense(*self._parse_dense_batch(raw, prefixes))
        else:
            parsed = [self._parse_one(r, p) for r, p in zip(raw, prefixes)]
        new = 0
        for p, (ids, lps) in zip(prefixes, parsed):
            if p not in self._cache:
                self._remember(p, sort_table(ids, lps))
                new += 1
        self.stats.harvested_positions += new
        return new


class Heads:
    """Sorted table heads of many prefixes, CSR: row ``i`` is ``ids/lps[off[i]:off[i] + lens[i]]``.

    ids int64 ``(M,)``, lps float64 ``(M,)`` (descending within a row, ties in the model's order),
    lens int64 ``(n,)``, full int64 ``(n,)`` = finite entries in the whole row (``lens < full`` means
    the head was cut).
    """

    __slots__ = ("ids", "lps", "lens", "full")

    def __init__(self, ids: np.ndarray, lps: np.ndarray, lens: np.ndarray, full: np.ndarray) -> None:
        self.ids, self.lps, self.lens, self.full = ids, lps, lens, full


_BLOCK_ENTRIES = 1 << 16
"""Dense rows are validated and cut in blocks of about this many entries (they stay in cache)."""


def _block_rows(V: int) -> int:
    return max(1, _BLOCK_ENTRIES // max(V, 1))


_BIG_ROW = 4096
"""Rows with more head entries than this are sorted one by one (a fast unstable sort, checked for ties)."""


def _head_order(row: np.ndarray, lps: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """Permutation sorting entries by (row, descending log-prob, given order): ``lexsort((-lps, row))``.

    Many small rows go through one lexsort; each big row (a whole wide table) is sorted alone by an
    unstable argsort, falling back to a stable one only when it holds exact ties.
    """
    big = lens > _BIG_ROW
    if not big.any():
        return np.lexsort((-lps, row))
    by_row = np.argsort(row, kind="stable") if (row[1:] < row[:-1]).any() else np.arange(row.shape[0])
    start = np.concatenate(([0], np.cumsum(lens)))
    order = np.empty(row.shape[0], np.int64)
    small = ~big[row[by_row]]
    if small.any():
        pos = np.flatnonzero(small)
        sel = by_row[pos]
        order[pos] = sel[np.lexsort((-lps[sel], row[sel]))]
    for i in np.flatnonzero(big).tolist():
        seg = by_row[start[i] : start[i + 1]]
        key = -lps[seg]
        o = np.argsort(key)
        k = key[o]
        if (k[1:] == k[:-1]).any():
            o = np.argsort(key, kind="stable")
        order[start[i] : start[i + 1]] = seg[o]
    return order


def sort_table(ids: np.ndarray, lps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sort a table by descending log-prob, stable (ties keep the model's order)."""
    order = np.argsort(-lps, kind="stable")
    return ids[order], lps[order]


def _check_cardinality(name: str, raw: Any, expected: int, what: str, unit: str) -> None:
    """Exactly one result per item, checked before anything is trusted or cached."""
    try:
        n = len(raw)
    except TypeError:
        raise TypeError(f"{name} must return a sequence of results, got {type(raw).__name__}") from None
    if n != expected:
        raise ValueError(
            f"{name} returned {n} results {what.format(n=expected)}; it must return exactly one result per {unit}"
        )


def _check_unique(ids: np.ndarray, fail: Callable[[str], ValueError], oracle: StepOracle) -> None:
    n = ids.shape[0]
    if n < 2:
        return
    lo, hi = int(ids.min()), int(ids.max())
    if lo >= 0 and hi < 4 * n + 64:
        counts = np.bincount(ids)
        if counts.max() > 1:
            raise fail(f"duplicate token {oracle.token(int(np.argmax(counts)))!r}")
        return
    s = np.sort(ids)
    dup = np.flatnonzero(s[1:] == s[:-1])
    if dup.size:
        raise fail(f"duplicate token {oracle.token(int(s[dup[0]]))!r}")


def _short(x: Any, n: int = 60) -> str:
    r = repr(x)
    return r if len(r) <= n else r[: n - 3] + "..."
