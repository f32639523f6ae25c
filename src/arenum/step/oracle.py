"""Step oracle: the only code that calls the user's model.

:class:`StepOracle` turns tokens into integer ids (integer tokens are their own ids; other tokens
are interned), memoizes full tables for prefixes scored outside the prefix tree (best-first
listing, sampling, log-densities, harvests), fills the tree's tables in batches of ``batch_size``
prefixes, and counts every forward and the seconds spent in the model and in parsing
(:class:`OracleStats`). It checks the cardinality of batched results (one per prefix) before
anything is cached.

The callbacks: ``next_logprobs(prefix)``; optionally ``batch_next_logprobs(prefixes)``,
``batch_score_sequences(seqs)`` (teacher forcing, checked here), ``all_position_logprobs(seq)``
and ``batch_next_heads(prefixes, floors)`` (an ``arenum`` extension for adapters that can cut rows
where the model runs, e.g. on a GPU; see :meth:`StepOracle.fetch_heads` and
:func:`arenum.step.tables.parse_heads` for the contract and what is checked).

Monte Carlo draws take whole rows instead (:meth:`StepOracle.fetch_rows`: unsorted, one layout
whatever their source, not added to the cache unless asked).

This module does not parse step tables: the accepted result forms, their validation,
normalization, sort order and head cutting are in :mod:`arenum.step.tables`, which it calls with its
parser (:class:`arenum.step.tables.Parser`: its vocab, tolerance and buffers). It does not decide
which prefixes to score: the prefix tree and the queries do.
"""
from __future__ import annotations

import math
import time
from collections import OrderedDict
from dataclasses import asdict, dataclass
from typing import Any, Callable

import numpy as np

from .._validate import short_repr
from .many import parse_rows, parse_tables
from .vocab import Vocab
from .tables import (
    NORM_TOL,
    RENORM_TOL,
    Heads,
    Parser,
    build_heads,
    check_cardinality,
    collect_rows,
    dense_widths,
    heads_in_order,
    parse_dense_batch,
    parse_dense_heads,
    parse_heads,
    parse_table,
    rows_of_dense,
    sort_table,
)

__all__ = ["StepOracle", "OracleStats", "NORM_TOL", "RENORM_TOL"]

_LOWEST = float(np.finfo(np.float64).min)  # a floor at or below this cuts nothing (floors are capped here)
PARSE_ENTRIES = 1 << 16
"""About this many entries of one-prefix results are parsed at once (:meth:`StepOracle.fetch_heads`):
a few parses a round of the prefix tree (a chunk's objects and arrays stay in cache; measured
faster per row than one parse of the whole round, and than chunks of ``batch_size`` rows)."""


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
    renormalized_rows: rows accepted within ``norm_tol`` but not normalized to float64 precision
        (e.g. bf16 or int8 forwards), renormalized before use (counted at every parse).
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
    renormalized_rows: int = 0
    model_seconds: float = 0.0
    parse_seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class StepOracle:
    """Low-level: validated, memoized access to a model's next-token tables (see module docstring);
    a user scores a sequence with :meth:`arenum.AutoregressiveEnumerable.log_density`.

    Tables handed out are ``(ids, logps)``: ``ids`` int64 token ids, ``logps`` float64, sorted by
    descending log-prob (stable). :attr:`vocab` (a :class:`arenum.step.vocab.Vocab`) maps tokens to
    ids and back: in integer mode ids are the model's integer tokens; otherwise tokens are interned.
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
        self.vocab = vocab = Vocab()  # tokens <-> ids (integer mode: ids are the tokens themselves)
        # the vocab's maps, under the names the tree, the queries and the adapters call
        self.token_id, self.token, self.tokens, self.ids_of = vocab.id, vocab.token, vocab.tokens, vocab.ids_of
        self._cache: OrderedDict[tuple, tuple[np.ndarray, np.ndarray]] = OrderedDict()
        self._cache_size = int(cache_size)
        self.cache_bytes = 0  # bytes of the memoized full tables
        self.cache_max_bytes: int | None = None  # set by the enumerable from its memory budget
        # rows scored in a round that an exception cut short: read by the query run again (fetch_heads)
        self._salvage: dict[tuple, tuple[np.ndarray, np.ndarray, int, float, float]] = {}
        self._parser = Parser(vocab, self.norm_tol, self._renormalized)
        self._widest_row = 0  # the widest row parsed from one-prefix calls (sizes their chunks)
        self.eos_id: int | None = None
        if eos is not None:
            self.eos_id = vocab.id(eos)

    @property
    def declared_forward_seconds(self) -> float | None:
        """The model's declared cost of one forward (a ``forward_seconds`` attribute of the object
        its callbacks are bound to, as :class:`arenum.models.NGramModel` has), else ``None``. A
        store's ``close()`` weighs it, not the measured time, so what it keeps does not depend on load."""
        for fn in (self._batch, self._next):
            v = getattr(getattr(fn, "__self__", None), "forward_seconds", None)
            if v is not None:
                return float(v)
        return None

    # ------------------------------------------------------------------ token ids (the vocab's)
    @property
    def int_mode(self) -> bool | None:
        """Whether the model's tokens are their own ids (``None``: undecided): :attr:`vocab`'s."""
        return self.vocab.int_mode

    @int_mode.setter
    def int_mode(self, value: bool | None) -> None:
        self.vocab.int_mode = value

    def _parse_one(self, raw: Any, prefix: tuple) -> tuple[np.ndarray, np.ndarray]:
        """One raw result, validated: ``(ids, logps)`` unsorted, ``-inf`` dropped, normalized."""
        return parse_table(raw, prefix, self._parser)

    def _parse_dense_batch(self, arr: np.ndarray, prefixes: list[tuple]) -> tuple[np.ndarray, np.ndarray]:
        """A dense ``(n, V)`` batch, validated: ``(normalized rows, ids of the columns)``; the rows
        may live in this oracle's work buffer (callers copy what they keep)."""
        return parse_dense_batch(arr, prefixes, self._parser)

    def _renormalized(self, n: int) -> None:
        self.stats.renormalized_rows += n

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

    def _call_many(self, prefixes: list[tuple], floors: np.ndarray | None
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, bool]:
        """``next_logprobs`` of each prefix, one call each, parsed together and cut at ``floors``
        (``None``: whole rows; :func:`arenum.step.many.parse_rows`): ``(lens, ids, lps, widths,
        sorted)``, row ``i`` the next ``lens[i]`` entries. Counts a forward per call that returned
        (however the rows are chunked, a bad row included); a row's parse error comes before a
        later call's failure, as when each row is parsed after its call."""
        st = self.stats
        raws: list = []
        nxt = self._next
        clock = time.perf_counter
        t0 = clock()
        try:
            raws.extend(map(nxt, prefixes))  # a call that raises leaves the rows before it in raws
        except BaseException:
            st.calls += len(raws) + 1
            st.model_seconds += clock() - t0
            st.forwards += len(raws)
            t1 = clock()
            if raws:  # raises the first bad row's error; else the rows are kept for the query run again
                row, ids, lps, widths = parse_tables(raws, prefixes[: len(raws)], self._parser)
                k = len(raws)
                self._stash(prefixes[:k], np.full(k, -math.inf), [np.arange(k)], [row], [ids], [lps], widths, None)
            st.parse_seconds += clock() - t1
            raise
        t1 = clock()
        st.model_seconds += t1 - t0
        st.calls += len(raws)
        st.forwards += len(raws)
        try:
            return parse_rows(raws, prefixes, self._parser, floors)
        finally:
            st.parse_seconds += clock() - t1

    def _call_batch(self, prefixes: list[tuple], floors: np.ndarray | None = None) -> Any:
        """One batched call: a validated ``(rows, column ids)`` dense pair or a list of tables; with
        ``floors``, a dense result comes back as its cut heads ``(row, ids, lps)`` (one sweep)."""
        assert self._batch is not None
        t0 = time.perf_counter()
        raw = self._batch(list(prefixes))
        t1 = time.perf_counter()
        self.stats.model_seconds += t1 - t0
        self.stats.calls += 1
        self.stats.batch_calls += 1
        check_cardinality("batch_next_logprobs", raw, len(prefixes), "for a batch of {n} prefixes", "prefix")
        if isinstance(raw, np.ndarray) and raw.ndim == 2 and raw.shape[1] == 0 and prefixes:
            raise ValueError(f"next_logprobs({short_repr(prefixes[0])}): empty step table (a dense batch of 0 columns)")
        if isinstance(raw, np.ndarray) and raw.ndim == 2 and raw.dtype.kind == "f":
            if floors is not None:
                out: Any = parse_dense_heads(raw, prefixes, floors, self._parser)
                out = (*out, dense_widths(raw, out[0]))
            else:
                out = self._parse_dense_batch(raw, prefixes)
        else:
            out = [self._parse_one(r, p) for r, p in zip(raw, prefixes)]
        self.stats.parse_seconds += time.perf_counter() - t1
        return out

    def fetch_heads(self, prefixes: list[tuple], floors: np.ndarray) -> Heads:
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
            hits = list(map(cache.get, prefixes))  # one C loop; the few hits are read below
            todo = [i for i, hit in enumerate(hits) if hit is None]
            for i, hit in enumerate(hits if len(todo) < n else ()):
                if hit is None:
                    continue
                ids, lps = hit
                k = int(np.searchsorted(-lps, -floors[i], side="right"))
                parts_row.append(np.full(k, i, np.int64))
                parts_ids.append(ids[:k])
                parts_lp.append(lps[:k])
                full[i] = lps.shape[0]
        offs = None  # each row's offset, where the adapter gives one (Heads)
        kept: dict[int, float] = {}  # rows read from the salvage, their offsets
        if self._salvage:
            todo, kept = self._from_salvage(prefixes, floors, todo, parts_row, parts_ids, parts_lp, full)
            if kept:
                presorted = False
                got = {i: o for i, o in kept.items() if o == o}
                if got:
                    offs = np.full(n, np.nan)
                    offs[list(got)] = list(got.values())
        t_parse = 0.0
        direct = len(todo) == n  # nothing cached: a chunk's prefixes are a slice
        n_pre = len(parts_row)  # the parts read from the cache (or kept from a cut round)
        scored: list[tuple[np.ndarray, int]] = []  # the chunks scored, for a round cut short (below)
        parts_lens: list[np.ndarray] = []  # one-prefix calls of a slice: each chunk's row lengths
        offs_box = [offs]  # the offsets, as the chunks fill them
        try:
            heads = self._fetch_todo(prefixes, floors, todo, direct, parts_row, parts_lens, parts_ids, parts_lp, full,
                                     presorted, offs_box, t_parse, scored)
            for i in kept:  # read: the rows kept for this round are the caller's now
                self._salvage.pop(prefixes[i], None)
            return heads
        except BaseException:
            # the rows scored before the failure are kept, so that the query run again does not score them again
            chunks = [c for c, _ in scored]
            end = scored[-1][1] if scored else n_pre  # the parts of whole chunks
            rows = [np.repeat(c, ln) for c, ln in zip(chunks, parts_lens)] if parts_lens else parts_row[n_pre:end]
            try:
                self._stash(prefixes, floors, chunks, rows, parts_ids[n_pre:end], parts_lp[n_pre:end], full, offs_box[0])
            except Exception:  # pragma: no cover - best effort: never hides the failure
                pass
            raise

    def _fetch_todo(self, prefixes: list[tuple], floors: np.ndarray, todo: list[int], direct: bool,
                    parts_row: list, parts_lens: list, parts_ids: list, parts_lp: list, full: np.ndarray,
                    presorted: bool, offs_box: list, t_parse: float, scored: list[tuple[np.ndarray, int]]) -> Heads:
        """:meth:`fetch_heads` of the rows ``todo`` (the model's calls), the parts read before it given;
        each chunk scored is appended to ``scored`` once its parts are, with the number of parts then."""
        n = len(prefixes)
        offs = offs_box[0]
        if self._heads is not None:
            presorted = False
            bs = self.batch_size
            for a in range(0, len(todo), bs):
                chunk = np.array(todo[a : a + bs], np.int64)
                r, ids, lps, widths, off = self._call_heads(
                    prefixes[a : a + bs] if direct else [prefixes[i] for i in todo[a : a + bs]], floors[chunk])
                parts_row.append(chunk[r])
                parts_ids.append(ids)
                parts_lp.append(lps)
                full[chunk] = widths
                if off is not None:
                    if offs is None:
                        offs = offs_box[0] = np.full(n, np.nan)
                    offs[chunk] = off
                self.stats.forwards += len(chunk)
                scored.append((chunk, len(parts_ids)))
        elif self._batch is not None:
            bs = self.batch_size
            for a in range(0, len(todo), bs):
                chunk = np.array(todo[a : a + bs], np.int64)
                res = self._call_batch(prefixes[a : a + bs] if direct else [prefixes[i] for i in todo[a : a + bs]],
                                       floors[chunk])
                t0 = time.perf_counter()
                if isinstance(res, tuple):
                    r, ids, lps, widths = res  # whole rows, each sorted, in order
                    parts_row.append(chunk[r])
                    parts_ids.append(ids)
                    parts_lp.append(lps)
                    full[chunk] = widths  # each row's entries above -inf
                else:
                    presorted = False
                    collect_rows(res, chunk, floors, parts_row, parts_ids, parts_lp, full)
                t_parse += time.perf_counter() - t0
                self.stats.forwards += len(chunk)
                scored.append((chunk, len(parts_ids)))
        else:
            # one call per prefix: the rows parsed together, about PARSE_ENTRIES entries at a time
            # (after the first batch_size rows, by the widest row seen)
            bs = self.batch_size
            whole = not todo or float(floors[todo].max()) <= _LOWEST  # no cut: whole rows
            a = 0
            while a < len(todo):
                if self._widest_row:
                    bs = max(self.batch_size, PARSE_ENTRIES // self._widest_row)
                chunk = np.array(todo[a : a + bs], np.int64)
                a += chunk.shape[0]
                # each row cut at its floor; rows already sorted (by the model, or the compiled pass)
                # are not sorted again
                lens, ids, lps, widths, done = self._call_many(
                    prefixes[chunk[0] : chunk[-1] + 1] if direct else [prefixes[i] for i in chunk],
                    None if whole else floors[chunk])
                if widths.shape[0]:
                    self._widest_row = max(self._widest_row, int(widths.max()))
                presorted = presorted and done
                if direct:
                    parts_lens.append(lens)
                else:
                    parts_row.append(np.repeat(chunk, lens))
                parts_ids.append(ids)
                parts_lp.append(lps)
                full[chunk] = widths
                scored.append((chunk, len(parts_ids)))
            if direct:
                t0 = time.perf_counter()
                heads = heads_in_order(parts_lens, parts_ids, parts_lp, full, presorted)
                self.stats.parse_seconds += time.perf_counter() - t0
                return heads
        t0 = time.perf_counter()
        heads = build_heads(parts_row, parts_ids, parts_lp, full, n, presorted)
        heads.offs = offs
        self.stats.parse_seconds += t_parse + time.perf_counter() - t0
        return heads

    def _stash(self, prefixes: list[tuple], floors: np.ndarray, done: list[np.ndarray], rows: list, ids: list,
               lps: list, full: np.ndarray, offs: np.ndarray | None) -> None:
        """Keep the rows of ``done`` (each prefix's entries ``>= floors[i]``, from the parts ``rows``,
        ``ids``, ``lps``; its width; its offset) that a round scored before an exception cut it short:
        the round is not committed, and :meth:`fetch_heads` reads them when the query runs again."""
        if not done:
            return
        idx = np.concatenate(done)
        r = np.concatenate(rows) if rows else np.zeros(0, np.int64)
        kid = np.concatenate(ids) if ids else np.zeros(0, np.int64)
        klp = np.concatenate(lps) if lps else np.zeros(0)
        o = np.argsort(r, kind="stable")  # each row's entries together, in their order
        r, kid, klp = r[o], kid[o], klp[o]
        lo, hi = np.searchsorted(r, idx, "left"), np.searchsorted(r, idx, "right")
        for i, a, b in zip(idx.tolist(), lo.tolist(), hi.tolist()):
            self._keep_row(prefixes[i], kid[a:b], klp[a:b], full[i], floors[i], math.nan if offs is None else offs[i])

    def keep_heads(self, prefixes: list[tuple], floors: np.ndarray, h: Heads) -> None:
        """Put the heads ``h`` that :meth:`fetch_heads` returned for ``prefixes`` back where a round cut
        short keeps its rows (a caller that failed before using them: the query run again reads them
        rather than scoring them again)."""
        floors = np.maximum(np.asarray(floors, np.float64), np.finfo(np.float64).min)
        ends = np.cumsum(h.lens)
        for i, (a, b) in enumerate(zip((ends - h.lens).tolist(), ends.tolist())):
            self._keep_row(prefixes[i], h.ids[a:b], h.lps[a:b], h.full[i], floors[i],
                           math.nan if h.offs is None else h.offs[i])

    def _keep_row(self, prefix: tuple, ids: np.ndarray, lps: np.ndarray, width: Any, floor: Any, off: Any) -> None:
        """One prefix's row kept for the retry: its entries ``>= floor``, its width and its offset."""
        self._salvage[prefix] = (ids.copy(), lps.copy(), int(width), float(floor), float(off))

    def _from_salvage(self, prefixes: list[tuple], floors: np.ndarray, todo: list[int], parts_row: list,
                      parts_ids: list, parts_lp: list, full: np.ndarray) -> tuple[list[int], dict[int, float]]:
        """Read the kept rows of ``todo`` that reach ``floors`` into the parts: ``(the rows left to score,
        {row read: its offset})``; :meth:`fetch_heads` drops them from the salvage once the round is read."""
        left, sv = [], self._salvage
        kept: dict[int, float] = {}
        for i in todo:
            got = sv.get(prefixes[i])
            if got is None or got[3] > floors[i]:  # none, or not kept as deep as this floor asks: scored
                left.append(i)
                continue
            ids, lps, width, _, off = got
            keep = lps >= floors[i]
            parts_row.append(np.full(int(keep.sum()), i, np.int64))
            parts_ids.append(ids[keep])
            parts_lp.append(lps[keep])
            full[i] = width
            kept[i] = off
        return left, kept

    def _call_heads(
        self, prefixes: list[tuple], floors: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
        """One ``batch_next_heads`` call, checked: ``(row, ids, lps, widths, offsets)`` with ``lps >= floors[row]``.

        The contract and what is checked: :func:`arenum.step.tables.parse_heads`.
        """
        assert self._heads is not None
        t0 = time.perf_counter()
        raw = self._heads(list(prefixes), floors.copy())
        t1 = time.perf_counter()
        st = self.stats
        st.model_seconds += t1 - t0
        st.calls += 1
        st.batch_calls += 1
        row, ids, lps, widths, offsets = parse_heads(raw, prefixes, floors, self._parser)
        st.parse_seconds += time.perf_counter() - t1
        return row, ids, lps, widths, offsets

    def fetch_rows(self, prefixes: list[tuple], *, remember: bool = False,
                   known: dict[int, tuple[np.ndarray, np.ndarray]] | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Full validated tables of ``prefixes`` as padded rows, entries by ascending token id (dense
        columns as they are), whether from the model or the cache, so that draws do not depend on
        what is cached: ``(lps, ids)`` with ``lps`` ``(m, W)`` float64 (``-inf`` where a row has no
        entry) and ``ids`` ``(W,)`` int64 shared by every row (a dense batch) or ``(m, W)``.

        One forward per prefix not in the cache, through ``batch_next_logprobs`` in ``batch_size``
        chunks when available; cached tables are reused but, unless ``remember``, nothing is added
        to the cache (Monte Carlo draws visit each prefix about once). ``known``: whole tables the
        caller already holds (row index -> ``(ids, lps)``, e.g. the prefix tree's), used as cached.
        Read the rows before the next call to this oracle: a dense batch answered in one call comes
        back as it was parsed (the model's own array, or a work buffer the next call reuses).
        """
        m = len(prefixes)
        hit = [self._cache.get(p) for p in prefixes] if self._cache else [None] * m
        if known:
            for i, tab in known.items():
                hit[i] = tab
        todo = [i for i in range(m) if hit[i] is None]
        tabs: list[Any] = list(hit)
        dense: np.ndarray | None = None  # (m, V) rows while every result so far is dense
        ids_all = None
        bs = self.batch_size
        for a in range(0, len(todo) if self._batch is not None else 0, bs):
            chunk = todo[a : a + bs]
            res = self._call_batch([prefixes[i] for i in chunk])
            self.stats.forwards += len(chunk)
            if (isinstance(res, tuple) and len(todo) == m and (a == 0 or dense is not None)
                    and (ids_all is None or np.array_equal(ids_all, res[1]))):
                if len(chunk) == m and not remember:  # the whole request in one call: its rows as they are
                    dense, ids_all = res
                    continue
                if dense is None:
                    dense, ids_all = np.empty((m, res[0].shape[1])), res[1]
                dense[a : a + len(chunk)] = res[0]  # todo is every row, in order
                continue
            if dense is not None:  # a mixed batch: back to tables
                for i, tab in zip(todo[:a], rows_of_dense(dense[:a], ids_all)):
                    tabs[i] = tab
                dense = None
            for i, tab in zip(chunk, rows_of_dense(res[0].copy(), res[1]) if isinstance(res, tuple) else res):
                tabs[i] = tab
        if self._batch is None:
            for i in todo:
                tabs[i] = self._call_single(prefixes[i])
                self.stats.forwards += 1
        if dense is not None:
            if remember:
                for p, tab in zip(prefixes, rows_of_dense(dense, ids_all)):
                    self._remember(p, sort_table(*tab))
            return dense, ids_all
        W = max(1, max(t[0].shape[0] for t in tabs))
        lps = np.full((m, W), -np.inf)
        ids = np.zeros((m, W), np.int64)
        for i, (a, b) in enumerate(tabs):
            if a.shape[0] > 1 and (a[1:] < a[:-1]).any():  # one layout, whatever the source: ascending ids
                o = np.argsort(a, kind="stable")
                a, b = a[o], b[o]
            ids[i, : a.shape[0]] = a
            lps[i, : b.shape[0]] = b
        if remember:
            for i in todo:
                self._remember(prefixes[i], sort_table(*tabs[i]))
        return lps, ids

    def table(self, prefix: tuple) -> tuple[np.ndarray, np.ndarray]:
        """Full sorted table for one prefix, memoized (LRU of ``cache_size`` prefixes)."""
        hit = self._cache.get(prefix)
        if hit is not None:
            self._cache.move_to_end(prefix)
            return hit
        got = self._salvage.get(prefix) if self._salvage else None
        if got is not None and got[0].shape[0] == got[2]:  # kept whole from a round cut short: scored once
            del self._salvage[prefix]
            tab = sort_table(got[0], got[1])
            self._remember(prefix, tab)
            return tab
        if self._batch is not None:
            res = self._call_batch([prefix])
            ids, lps = rows_of_dense(*res)[0] if isinstance(res, tuple) else res[0]
        else:
            ids, lps = self._call_single(prefix)
        self.stats.forwards += 1
        tab = sort_table(ids, lps)
        self._remember(prefix, tab)
        return tab

    def _remember(self, prefix: tuple, tab: tuple[np.ndarray, np.ndarray]) -> None:
        old = self._cache.pop(prefix, None)
        if old is not None:
            self.cache_bytes -= old[0].nbytes + old[1].nbytes
        self._cache[prefix] = tab
        self.cache_bytes += tab[0].nbytes + tab[1].nbytes
        lim = self.cache_max_bytes
        while len(self._cache) > self._cache_size or (lim is not None and self.cache_bytes > lim and len(self._cache) > 1):
            _, (ids, lps) = self._cache.popitem(last=False)
            self.cache_bytes -= ids.nbytes + lps.nbytes

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
        if type(raw) is np.ndarray and raw.ndim == 1 and raw.dtype == np.float64:
            arr = raw  # the common case, without the conversions (a single string's score is microseconds)
        else:
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
        if not (all(v <= 0.0 for v in arr.tolist()) if arr.shape[0] <= 8 else (arr <= 0.0).all()):  # NaN or > 0
            j = int(np.flatnonzero(~(arr <= 0.0))[0])
            raise ValueError(
                f"batch_score_sequences returned {arr[j]!r} for sequence {short_repr(seqs[j])}; "
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
        check_cardinality("all_position_logprobs", raw, len(seq), "for a sequence of length {n}", "position")
        prefixes = [tuple(seq[:d]) for d in range(len(seq))]
        if isinstance(raw, np.ndarray) and raw.ndim == 2 and raw.dtype.kind == "f":
            parsed = rows_of_dense(*self._parse_dense_batch(raw, prefixes))
        else:
            parsed = [self._parse_one(r, p) for r, p in zip(raw, prefixes)]
        new = 0
        for p, (ids, lps) in zip(prefixes, parsed):
            if p not in self._cache:
                self._remember(p, sort_table(ids, lps))
                new += 1
        self.stats.harvested_positions += new
        return new
