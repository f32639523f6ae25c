"""Prefix tree: the live prefixes for a score threshold, stored as arrays per level.

A prefix is *live* at threshold ``T`` (nats; a budget of ``B = -T / ln 2`` bits) when its own
score ``s(prefix) >= T``: only live prefixes can have completions with ``s >= T``. The tree holds
every live prefix for its ``built`` threshold, each scored once by the model, and deepens in place:
lowering the threshold scores only the newly live prefixes. Nodes are appended, never moved, so a
node id is stable; levels are breadth-first (every node of level ``d`` has length ``d``), so one
level is scored in full batches.

Per level (shape ``(n_d,)`` each): ``parent`` int64, ``child`` int32 (position in the parent's
table), ``tok`` int64 (token id), ``score`` float64 (exact cumulative log-prob, summed left to right),
``fetched`` bool, ``off``/``tlen`` (the node's stored table head in the level's pool), ``floor``
float64 (every entry with ``score + lp >= floor`` is stored; ``-inf`` when the whole table is),
``made`` int32 (table positions ``< made`` were already turned into child nodes) and ``eos_j`` int32
(table position of ``eos``, ``-1`` if absent from the stored head); terminating trees also keep
``eos_lp`` float64 (that entry's log-prob, ``-inf`` if absent), so the index reads every
completion's score ``score + eos_lp`` from two aligned columns instead of gathering from the pool.

Whole tables are stored while their entries fit ``table_bytes`` (12 bytes an entry), for tables up
to ``budget.WHOLE_WIDTH`` entries wide or wider ones when sorting one costs less than a forward, timed on
rounds that asked for heads (:func:`arenum.exact.budget.keep_whole`): no prefix is then ever scored twice.
Once a table wider than that is seen, heads reach at least ``WIDE_MARGIN_BITS`` (6) below the budget:
a wide head is a small share of its table, and a re-score costs a forward. Past it, stored heads keep the entries that can
matter a little below the budget asked for (``keep_margin_bits``); a deeper budget re-scores a prefix
whose head is too short (``stats.refetches``), and each re-score at least doubles how far below the
prefix's score its head reaches. A level's pool holds its stored heads back to back: ``pool_lp``
float64 and ``pool_tok`` (int32, widened to int64 if needed), growing in place (``_arrays.Grow``).

This module does not answer queries: ``arenum.exact.index`` builds the exact index from a tree.
"""
from __future__ import annotations

import math
import threading
import time
from typing import Callable

import numpy as np

from .budget import (BUDGET_HINT, EXPAND_CHILD_BYTES, ROUND_ENTRY_BYTES, TIMED_HEAD_ROWS, WHOLE_WIDTH, fetch_round,
                     keep_whole)
from ._arrays import seg_first_below
from .._guard import deferred_interrupts, held
from .frontier import Frontier, hist_cum
from .levels import Level, LevelView, read_only
from ..step import StepOracle
from ..errors import BudgetExceeded
from .records import HIST_BINS_PER_BIT, HIST_LEN, RECORDS, check_record, narrow_ids
from ..support import Support
from .._validate import LN2

__all__ = ["PrefixTree", "HIST_BINS_PER_BIT"]

DEFAULT_TABLE_BYTES = 2 << 30  # default budget for whole stored tables (module docstring)


class PrefixTree:
    """Low-level: the live prefixes every query of :meth:`arenum.AutoregressiveEnumerable.count` (and
    the other queries) is built on, for a descending score threshold (see module docstring).

    ``support``: fixed length (levels ``0..fixed_len-1`` are prefixes) or terminating (sequences end
    in ``eos`` at length ``<= cap``), and the ``branch_cap`` of the enumerated sub-support.
    """

    def __init__(
        self,
        oracle: StepOracle,
        support: Support,
        *,
        keep_margin_bits: float = 1.0,
        prefix_ids: tuple[int, ...] = (),
        table_bytes: int | None = DEFAULT_TABLE_BYTES,
    ) -> None:
        self.oracle, self.vocab = oracle, oracle.vocab  # vocab (tokens <-> ids): what a store reads and writes
        self.support = support
        self.fixed_len = support.fixed_len
        self.eos_id = eos_id = support.eos_id
        self.cap = support.cap
        self.margin_bits = float(keep_margin_bits)  # as asked; keep_margin_bits: as applied
        self.table_bytes = table_bytes  # whole tables while stored entries fit (None: always)
        self.prefix = tuple(prefix_ids)  # conditioning ids prepended to every model call
        # last level whose nodes are prefixes (its nodes make completions but no child nodes)
        self.leaf_level = support.leaf_level
        self.levels: list[Level] = [Level(0, eos_id is not None)]
        self.levels[0].append(
            np.array([-1], np.int64), np.array([-1], np.int32), np.array([-1], np.int64), np.zeros(1)
        )
        self._node_bytes = self.levels[0].used_bytes  # one node's columns (57 or 65 bytes)
        self._used_bytes = self._node_bytes  # values held by the levels' arrays
        self.built = math.inf  # every live prefix with score >= built is fetched and expanded
        self.depth_truncated = False  # a leaf-level prefix had non-eos children within budget
        self.h_comp = np.zeros(HIST_LEN, np.int64)  # completions seen, by 1/64-bit bin
        self.h_pref = np.zeros(HIST_LEN, np.int64)  # next-level prefixes seen, by bin
        self.hist_top = 0  # every bin from here on is zero in both (arenum.exact.frontier)
        self.frontier = Frontier()  # each node's next unmade entry's score, kept with the commits
        self.fetched_nodes = 0
        self._pool_entries = 0
        self._widest = 0  # the widest whole table seen (entries)
        self._head_cost = [0.0, 0]  # seconds and prefixes of the fetch calls that asked for heads (_keep_whole)
        self._key_cache: dict[int, tuple[int, np.ndarray, np.ndarray]] = {}
        self._tuples: dict = {}  # deep levels: prefix tuples of the level fetched last and the one above
        self.progress: Callable[[dict], None] | None = None  # called after every fetched chunk
        # every commit (kind, record, sequence number) before it is applied; replaying them through
        # apply() rebuilds the tree (arenum.exact.records, arenum.exact.store)
        self.journal: Callable[[str, dict, int], None] | None = None
        self.commits = 0  # commits applied (the next one's sequence number)
        self._pending: tuple | None = None  # (kind, record, seq, undo) of a commit an exception cut short
        self._goal_bits = math.inf  # the budget the current deepen() is heading for (progress reports)
        self.lock = threading.RLock()  # held by every reader and writer above: one build at a time

    # ------------------------------------------------------------------ paths
    def token_paths(self, d: int, nodes: np.ndarray) -> np.ndarray:
        """``(m, d)`` int64 token ids of the prefixes ``nodes`` of level ``d``."""
        return self._paths(d, nodes, "tok")

    def child_paths(self, d: int, nodes: np.ndarray) -> np.ndarray:
        """``(m, d)`` int64 table positions along the paths to ``nodes`` of level ``d``."""
        return self._paths(d, nodes, "child")

    def _paths(self, d: int, nodes: np.ndarray, col: str) -> np.ndarray:
        out = np.empty((nodes.shape[0], d), np.int64)
        cur = nodes
        for k in range(d, 0, -1):
            lev = self.levels[k]
            out[:, k - 1] = lev.cols[col].v[cur]
            cur = lev.parent[cur]
        return out

    def _prefix_tuples(self, d: int, nodes: np.ndarray) -> list[tuple]:
        """The model-call prefixes (conditioning prefix + tokens) of ``nodes`` of level ``d``.

        Deep levels build each tuple from its parent's, kept from fetching the level above (linear
        in the length, where walking the parents would be quadratic); shallow ones walk the columns.
        """
        if d >= _TUPLE_CACHE_DEPTH:
            return self._prefix_tuples_from_parents(d, nodes)
        return self._prefix_tuples_walk(d, nodes)

    def _prefix_tuples_from_parents(self, d: int, nodes: np.ndarray) -> list[tuple]:
        cache = self._tuples
        if cache.get("level") != d:  # a new level: keep the level above's tuples, start this one's
            prev = cache.get("this", {}) if cache.get("level") == d - 1 else {}
            cache.clear()
            cache.update(level=d, above=prev, this={})
        above, this = cache["above"], cache["this"]
        lev = self.levels[d]
        par = lev.parent[nodes].tolist()
        tok = lev.tok[nodes].tolist()
        o = self.oracle
        conv = (lambda x: x) if (o.int_mode or o.int_mode is None) else o.token
        out: list[tuple] = []
        missing = [i for i, p in enumerate(par) if p not in above]
        walked = self._prefix_tuples_walk(d, nodes[missing]) if missing else []
        w = iter(walked)
        for i, (p, k) in enumerate(zip(par, tok)):
            q = above.get(p)
            s = next(w) if q is None else q + (conv(k),)
            out.append(s)
        for n, s in zip(nodes.tolist(), out):
            this[n] = s
        return out

    def _prefix_tuples_walk(self, d: int, nodes: np.ndarray) -> list[tuple]:
        paths = self.token_paths(d, nodes)
        pre = self.prefix
        o = self.oracle
        if o.int_mode or o.int_mode is None:
            if d == 0:
                return [pre] * nodes.shape[0]
            rows = zip(*[paths[:, k].tolist() for k in range(d)])  # tuples straight from columns
            if pre:
                return [pre + r for r in rows]
            return list(rows)
        return [o.tokens(pre) + o.tokens(r) for r in paths]

    @property
    def keep_margin_bits(self) -> float:
        """Bits below the budget asked that heads reach: as given, >= 6 for wide tables (module docstring)."""
        return max(self.margin_bits, WIDE_MARGIN_BITS) if self._widest > WHOLE_WIDTH else self.margin_bits

    # ------------------------------------------------------------------ fetching
    def _fetch(self, d: int, nodes: np.ndarray, keep: float, max_bytes: int | None = None) -> None:
        """Score ``nodes`` of level ``d`` (one forward each) and store their heads down to ``keep``
        (whole tables while they fit ``table_bytes``: module docstring)."""
        lev = self.levels[d]
        o = self.oracle
        # nodes per round: the heads and their temporaries stay a few MiB, and a small share of max_bytes
        full_chunk = chunk = fetch_round(o.batch_size, self._widest, max_bytes, _FETCH_ENTRIES)
        if self.journal is not None:  # a store: commit about every _JOURNAL_SECONDS of forwards
            chunk = min(chunk, max(4 * o.batch_size, _JOURNAL_CHUNK))
        eos = self.eos_id
        a = 0
        while a < nodes.shape[0]:
            t_chunk = time.perf_counter()
            ns = nodes[a : a + chunk]
            m = ns.shape[0]
            if max_bytes is not None and self.fetched_nodes:
                # the round's expected size (entries stored per prefix so far) and its temporaries
                per = _NODE_BYTES + _ENTRY_BYTES * self._pool_entries / self.fetched_nodes
                if (held := self.memory_bytes()) + m * (per + ROUND_ENTRY_BYTES * max(self._widest, 1)) > max_bytes:
                    raise BudgetExceeded(
                        f"an exact answer at {-keep / LN2:.3f} bits needs more memory: the tree and table "
                        f"cache hold {held:,} bytes and the next {m} prefixes would pass max_bytes={max_bytes:,}")
            refetch = lev.fetched[ns].copy()
            old_floor = np.where(refetch, lev.floor[ns], math.inf)  # entries below it are new
            s = lev.score[ns]
            keep_all = self._keep_whole(m)
            keeps = np.full(m, keep)
            if refetch.any():  # a re-score at least doubles how far below its score the head reaches
                keeps[refetch] = np.minimum(keep, 2 * old_floor[refetch] - s[refetch])
            # a superset in lp terms (float slack), then the exact test on s + lp
            floors = np.full(m, -math.inf) if keep_all else (keeps - s) - 1e-9 * (1.0 + np.abs(keeps))
            t_model = o.stats.model_seconds
            heads = o.fetch_heads(self._prefix_tuples(d, ns), floors)
            if not keep_all:  # the model's own time on heads: what a re-score would cost (_keep_whole)
                self._head_cost = [self._head_cost[0] + o.stats.model_seconds - t_model, self._head_cost[1] + m]
            klp, kid, klen = heads.lps, heads.ids, heads.lens
            kx = np.repeat(s, klen)
            kx += klp  # s + lp, the score of each entry (computed once, consumed by the commit)
            if not keep_all:
                kmask = kx >= np.repeat(keeps, klen)
                if not kmask.all():
                    klp, kid, kx = klp[kmask], kid[kmask], kx[kmask]
                    kept = np.zeros(kmask.shape[0] + 1, np.int64)
                    np.cumsum(kmask, out=kept[1:])
                    ends = np.cumsum(klen)
                    klen = kept[ends] - kept[ends - klen]
            starts = np.cumsum(klen) - klen  # each row's first entry
            eos_j = np.full(m, -1, np.int32)
            eos_lp = np.full(m, -math.inf) if eos is not None else None
            if eos is not None:
                hit = np.flatnonzero(kid == eos)
                if hit.size:
                    r = np.searchsorted(starts, hit, side="right") - 1
                    eos_j[r] = (hit - starts[r]).astype(np.int32)
                    eos_lp[r] = klp[hit]
            cut = klen < heads.full
            widest = max(self._widest, int(heads.full.max(initial=0)))
            rec = {"d": d, "ns": ns, "kid": narrow_ids(kid), "klp": klp, "klen": klen, "cut": cut, "keeps": keeps,
                   "eos_j": eos_j, "eos_lp": eos_lp, "widest": widest, "koff": heads.offs}
            self._commit("fetch", rec, kx=kx)
            if self.progress is not None:
                goal = self._goal_bits
                self.progress({"prefixes": self.fetched_nodes, "forwards": o.stats.forwards, "level": d,
                               "level_done": a + m, "level_todo": nodes.shape[0], "keep_bits": -keep / LN2,
                               "target_bits": goal, "known_prefixes": self.known_prefixes(goal)})
            a += m
            if chunk < full_chunk and time.perf_counter() - t_chunk < _JOURNAL_SECONDS:
                chunk = min(full_chunk, 2 * chunk)

    def _keep_whole(self, m: int) -> bool:
        """Store the next ``m`` tables whole? (:func:`~arenum.exact.budget.keep_whole`)"""
        secs, rows = self._head_cost
        return keep_whole(self._pool_entries + m * self._widest, self._widest, self.table_bytes, _ENTRY_BYTES,
                          secs / rows if rows >= TIMED_HEAD_ROWS else None)

    # ------------------------------------------------------------------ commits (arenum.exact.records)
    def apply(self, kind: str, rec: dict, seq: int | None = None) -> None:
        """Apply one commit record of :data:`~arenum.exact.records.RECORDS` (a store replaying its
        journal), all or nothing. ``seq``: the record's sequence number, which must be ``commits``
        (``ValueError`` otherwise, or if ``rec`` lacks a field or does not fit the tree)."""
        check_record(kind, rec)
        if seq is not None and seq != self.commits:
            raise ValueError(f"record {seq} does not follow commit {self.commits}")
        with held(self.lock):
            self.recover()
            self._run(kind, rec, {}, None)

    def _commit(self, kind: str, rec: dict, **extra: object) -> None:
        """Journal ``rec``, then apply it in memory, whole or not at all whatever exception lands where
        (SIGINT is held back; anything else rolls it back, here or at the next :meth:`recover`, and
        cuts its record from the journal; if the cut fails, the next record supersedes it)."""
        with held(self.lock), deferred_interrupts():
            self._run(kind, rec, extra, self.journal)

    def _run(self, kind: str, rec: dict, extra: dict, journal: Callable | None) -> None:
        self.recover()
        undo: list = []
        written: list = [] if journal is not None else [True]
        before = self.commits
        self._pending = (kind, rec, before, undo, written)  # first: from here on, recover() finishes it
        try:
            if journal is not None:  # a failed write commits nothing
                journal(kind, rec, before)
                written.append(True)
            self._save_scalars(undo)
            RECORDS[kind].apply(self, **rec, **extra, undo=undo)
            self.frontier.committed(self, kind, rec)
            self.commits = before + 1  # the publish: a commit counts once this is done
            self._pending = None
        except BaseException:
            self.recover()
            raise

    def recover(self) -> None:
        """Finish a commit an exception cut short: roll it back (and cut its record from the journal),
        or keep it if it was published (or, for ``built``, journaled: a reader may have seen it).
        Every entry point calls this first; idempotent, so it may itself be cut short and rerun."""
        if self._pending is None:
            return
        with held(self.lock):
            p = self._pending
            if p is None:
                return
            kind, rec, before, undo, written = p
            if self.commits == before and kind == "built" and written:
                RECORDS[kind].apply(self, **rec, undo=[])
                self.commits = before + 1
            elif self.commits == before:
                for u in reversed(undo):
                    u()
                self._key_cache.clear(), self._tuples.clear(), self.frontier.clear()
                j = self.journal
                if j is not None and hasattr(j, "rollback"):
                    j.rollback(before)
            self._pending = None

    def _save_scalars(self, undo: list) -> None:
        st = self.oracle.stats
        vals = (self.built, self.depth_truncated, self.fetched_nodes, self._pool_entries, self._widest,
                self._used_bytes, st.refetches)
        nlev = len(self.levels)

        def back() -> None:
            (self.built, self.depth_truncated, self.fetched_nodes, self._pool_entries, self._widest,
             self._used_bytes, st.refetches) = vals
            del self.levels[nlev:]
        undo.append(back)

    def _expand(self, d: int, T: float, max_bytes: int | None = None) -> None:
        """Turn the stored heads of level ``d`` into child nodes of level ``d+1`` down to ``T``."""
        lev = self.levels[d]
        if len(lev) == 0:
            return
        # the nodes whose next unmade entry scores >= T, from the frontier's column (no level scan)
        cand = np.flatnonzero(self.frontier.next_scores(self, d) >= T)
        lim = lev.tlen[cand].astype(np.int64)
        if self.support.branch_cap is not None:
            lim = np.minimum(lim, self.support.branch_cap)
        made, score, pool = lev.made[cand].astype(np.int64), lev.score, lev.pool_lp.v
        sel = lev.fetched[cand] & (made < lim) & (score[cand] >= T)
        sel[sel] = score[cand[sel]] + pool[lev.off[cand[sel]] + made[sel]] >= T
        cand, lim, made = cand[sel], lim[sel], made[sel]
        if cand.size == 0:
            return
        off = lev.off[cand]
        s = score[cand]
        lo = made + 1
        hi = lim
        h = seg_first_below(pool, off, s, lo, hi, T)
        m0 = made
        counts = h - m0
        total = int(counts.sum())
        if max_bytes is not None and (held := self.memory_bytes()) + total * EXPAND_CHILD_BYTES > max_bytes:
            raise BudgetExceeded(f"an exact answer at {-T / LN2:.3f} bits needs more memory: the tree holds {held:,} "
                                 f"bytes and the next {total} prefixes would pass max_bytes={max_bytes:,}")
        node = np.repeat(cand, counts)
        starts = np.cumsum(counts) - counts
        j = np.arange(total, dtype=np.int64) - np.repeat(starts - m0, counts)
        if self.eos_id is not None:
            keepm = j != lev.eos_j[node]
            node, j = node[keepm], j[keepm]
        pidx = lev.off[node] + j
        rec = {"d": d, "node": node, "j": j.astype(np.int32), "tok": lev.pool_tok.v[pidx],
               "score": score[node] + pool[pidx], "cand": cand, "made": h.astype(np.int32)}
        self._commit("expand", rec)

    def memory_bytes(self) -> int:
        """Bytes held by the tree's arrays (their values; a running count, kept with every commit:
        ``_check`` compares it with the arrays), the frontier's kept columns and the oracle's table cache."""
        return (self._used_bytes + self.h_comp.nbytes + self.h_pref.nbytes + self.frontier.nbytes()
                + self.oracle.cache_bytes)

    def deepen(self, T: float, keep: float | None = None, max_prefixes: int | None = None,
               max_bytes: int | None = None) -> None:
        """Make the tree complete for threshold ``T``: fetch and expand every prefix with score >= T.

        Each newly live prefix costs one forward; stored heads reach ``keep`` (default: ``T`` minus
        ``keep_margin_bits``). Exception-safe: a failing model call leaves every stored table valid
        and ``built`` unchanged, and the next call resumes.
        """
        self.recover()
        if T >= self.built:
            return
        keep = T if keep is None else min(keep, T)  # the margin is applied per level (below)
        self._goal_bits = -T / LN2 if T > -math.inf else math.inf  # for the progress callback only
        for d in range(self.leaf_level + 1):
            if d >= len(self.levels):
                break
            lev = self.levels[d]
            if len(lev) == 0:
                break
            need = np.flatnonzero(self.frontier.due(self, d) > T)  # (score >= T) & (~fetched | (floor > T))
            if max_prefixes is not None and self.fetched_nodes + need.size > max_prefixes:
                raise BudgetExceeded(
                    f"an exact answer at {-T / LN2:.3f} bits needs more than max_prefixes={max_prefixes} "
                    f"live prefixes (at least {self.fetched_nodes + need.size}); {BUDGET_HINT}"
                )
            if need.size:  # the margin as applied now: wide tables seen on an earlier level widen it
                self._fetch(d, need, min(keep, T - self.keep_margin_bits * LN2), max_bytes)
            if d < self.leaf_level:
                self._expand(d, T, max_bytes)
        trunc = self.depth_truncated
        if self.eos_id is not None and self.leaf_level < len(self.levels):
            trunc = self._depth_truncation(T)
        self._commit("built", {"T": float(T), "truncated": bool(trunc)})

    def _depth_truncation(self, T: float) -> bool:
        """Whether a leaf-level prefix has a non-eos child within ``T`` (or one had before)."""
        lev = self.levels[self.leaf_level]
        if len(lev) == 0 or self.depth_truncated:
            return self.depth_truncated
        sel = np.flatnonzero(lev.fetched & (lev.score >= T) & (lev.tlen > 0))
        if sel.size == 0:
            return False
        # best non-eos entry: position 0, or 1 when eos sits at 0
        pos = np.where(lev.eos_j[sel] == 0, 1, 0)
        has = pos < lev.tlen[sel]
        sel, pos = sel[has], pos[has]
        return bool(sel.size and (lev.score[sel] + lev.pool_lp.v[lev.off[sel] + pos] >= T).any())

    # ------------------------------------------------------------------ persistence (arenum.exact.store)
    def export_state(self) -> tuple[dict, dict[str, np.ndarray]]:
        """``(scalars, arrays)``: everything needed to rebuild this tree with :meth:`import_state`
        (arrays are views: write them out before the tree changes)."""
        scalars = {"built": float(self.built).hex(), "depth_truncated": self.depth_truncated,
                   "fetched_nodes": self.fetched_nodes, "pool_entries": self._pool_entries,
                   "widest": self._widest, "used_bytes": self._used_bytes, "n_levels": len(self.levels),
                   "commits": self.commits}
        arrays = {k: h[: int(np.flatnonzero(h)[-1]) + 1] if h.any() else h[:0]  # trailing zeros dropped
                  for k, h in (("h_comp", self.h_comp), ("h_pref", self.h_pref))}
        for d, lev in enumerate(self.levels):
            for k, a in lev.arrays().items():
                arrays[f"L{d}.{k}"] = a
        return scalars, arrays

    def import_state(self, scalars: dict, arrays: dict[str, np.ndarray]) -> None:
        """Replace this (fresh) tree's contents with an exported state; the arrays are used in place
        (a copy-on-write map is copied only where the tree writes). Checked with :meth:`_check`."""
        n = int(scalars["n_levels"])
        eos = self.eos_id is not None
        levels = []
        for d in range(n):
            pre = f"L{d}."
            levels.append(Level.from_arrays(d, eos, {k[len(pre):]: a for k, a in arrays.items() if k.startswith(pre)}))
        hists = []
        for k in ("h_comp", "h_pref"):
            a = arrays[k]
            if a.ndim != 1 or a.shape[0] > HIST_LEN or a.dtype != np.int64:
                raise ValueError(f"histogram {k} has dtype {a.dtype} and shape {a.shape}")
            h = np.zeros(HIST_LEN, np.int64)
            h[: a.shape[0]] = a
            hists.append(h)
        self.levels = levels
        self.h_comp, self.h_pref = hists
        self.built = float.fromhex(scalars["built"])
        self.depth_truncated = bool(scalars["depth_truncated"])
        self.fetched_nodes = int(scalars["fetched_nodes"])
        self._pool_entries = int(scalars["pool_entries"])
        self._widest = int(scalars["widest"])
        self._used_bytes = int(scalars["used_bytes"])
        self.commits = int(scalars["commits"])
        self._key_cache.clear(), self._tuples.clear(), self.frontier.clear()
        self.hist_top = max(arrays["h_comp"].shape[0], arrays["h_pref"].shape[0])  # trailing zeros dropped

    # ------------------------------------------------------------------ read API
    @property
    def n_levels(self) -> int:
        """Levels that hold nodes or may (level ``d`` holds the prefixes of length ``d``)."""
        return len(self.levels)

    def view(self, d: int) -> LevelView:
        """Read-only columns of level ``d`` (see :class:`LevelView`)."""
        self.recover()
        return self.levels[d].view()

    def level_size(self, d: int) -> int:
        """Nodes of level ``d`` (0 past the last level)."""
        self.recover()
        return len(self.levels[d]) if d < len(self.levels) else 0

    @property
    def completions_hist(self) -> np.ndarray:
        """Completions seen in fetched tables, by ``1/HIST_BINS_PER_BIT``-bit bin of their score (read-only)."""
        return read_only(self.h_comp)

    @property
    def prefixes_hist(self) -> np.ndarray:
        """Prefixes (children seen in fetched tables) by bin of their score (read-only)."""
        return read_only(self.h_pref)

    def completions_beyond(self, bits: float) -> bool:
        """Whether completions with more than ``bits`` bits have been seen in fetched tables."""
        return bool(self.h_comp[int(bits * HIST_BINS_PER_BIT) : self.hist_top].any())

    def child_nodes(self, d: int, parent: int, positions: np.ndarray) -> np.ndarray:
        """Node ids at level ``d`` of the children of node ``parent`` (level ``d - 1``) at table
        ``positions``; ``-1`` where no such child node exists."""
        self.recover()
        positions = np.asarray(positions, np.int64)
        out = np.full(positions.shape[0], -1, np.int64)
        if d >= len(self.levels) or len(self.levels[d]) == 0:
            return out
        keys, order = self._child_keys(d)
        want = parent * (1 << 32) + positions
        pos = np.minimum(np.searchsorted(keys, want), keys.shape[0] - 1)
        hit = keys[pos] == want
        out[hit] = order[pos[hit]]
        return out

    def score(self, seq: tuple) -> float:
        """Canonical score of a token sequence: left-to-right float64 sum of its validated table
        entries (``-inf`` if a token has probability 0). Steps the stored tables answer cost no
        forward; the rest come from the oracle's memoized full tables (one forward per new prefix).
        Does not check the support."""
        s = 0.0
        for v in self.steps(seq):
            s = s + v  # -inf (a token of probability 0) is the last step, and the sum
        return s

    def steps(self, seq: tuple) -> list[float]:
        """The step log-probs :meth:`score` sums, to the first ``-inf`` (a token of probability 0)."""
        o = self.oracle
        ids = o.ids_of(seq)  # None: a token no table has shown yet
        steps = self.lookup(tuple(ids[: ids.index(None)] if None in ids else ids))
        t = len(steps)
        while t < len(seq) and not (steps and steps[-1] == -math.inf):  # past the stored tables
            tab_ids, lps = o.table(seq[:t])  # parsing the table interns its tokens
            tid = o.ids_of((seq[t],))[0]
            hit = np.flatnonzero(tab_ids == tid) if tid is not None else np.zeros(0, np.int64)
            steps.append(float(lps[hit[0]]) if hit.size else -math.inf)
            t += 1
        return steps

    # ------------------------------------------------------------------ lookup
    def _child_keys(self, d: int) -> tuple[np.ndarray, np.ndarray]:
        lev = self.levels[d]
        hit = self._key_cache.get(d)
        if hit is not None and hit[0] == len(lev):
            return hit[1], hit[2]
        keys = lev.parent * (1 << 32) + lev.child
        order = np.argsort(keys, kind="stable")
        self._key_cache[d] = (len(lev), keys[order], order)
        return keys[order], order

    def lookup(self, ids: tuple) -> list[float]:
        """Step log-probs of the longest head of ``ids`` answerable from stored tables (no forward).

        The list is shorter than ``ids`` where the tree stops; a ``-inf`` entry means the token has
        probability 0 (absent from a whole stored table).
        """
        self.recover()
        out: list[float] = []
        node = 0
        for d, tok in enumerate(ids):
            if d >= len(self.levels) or d > self.leaf_level:
                break
            lev = self.levels[d]
            if not lev.fetched[node]:
                break
            off, n = int(lev.off[node]), int(lev.tlen[node])
            seg = lev.pool_tok.v[off : off + n]
            hit = np.flatnonzero(seg == tok)
            if hit.size == 0:
                if lev.floor[node] == -math.inf:
                    out.append(-math.inf)
                break
            j = int(hit[0])
            out.append(float(lev.pool_lp.v[off + j]))
            if d + 1 == len(ids) or d + 1 >= len(self.levels):
                break
            nxt = int(self.child_nodes(d + 1, node, np.array([j]))[0])
            if nxt < 0:
                break
            node = nxt
        return out

    # ------------------------------------------------------------------ steering
    def bits_for(self, hist: np.ndarray, count: float) -> float | None:
        """Smallest budget (bits, at a bin edge) at which ``hist`` reaches ``count``; None if never."""
        cum = hist_cum(self, hist)
        if cum[-1] < count:
            return None
        b = int(np.searchsorted(cum, count))
        return (b + 1) / HIST_BINS_PER_BIT

    def known_prefixes(self, bits: float) -> int:
        """Prefixes with ``bits`` or fewer known so far (children seen in fetched tables, + root)."""
        x = bits * HIST_BINS_PER_BIT
        b = self.hist_top if x >= self.hist_top else int(math.floor(x))  # a budget past the histogram: all of it
        return 1 + int(self.h_pref[: max(0, min(b, self.hist_top))].sum())

    @property
    def nbytes(self) -> int:
        return sum(lev.nbytes for lev in self.levels) + self.h_comp.nbytes + self.h_pref.nbytes

    @property
    def n_nodes(self) -> int:
        return sum(len(lev) for lev in self.levels)

    def _check(self) -> None:
        """Assert the tree's invariants (for tests; a commit an exception cut short is finished first)."""
        self.recover()
        assert self._pending is None
        self.frontier.check(self)
        assert self._used_bytes == sum(lev.used_bytes for lev in self.levels)
        T = self.built
        for d, lev in enumerate(self.levels):
            n = len(lev)
            if d == 0:
                assert n == 1 and lev.score[0] == 0.0
            else:
                prev = self.levels[d - 1]
                par = lev.parent
                assert (par >= 0).all() and (par < len(prev)).all()
                pidx = prev.off[par] + lev.child
                assert np.array_equal(prev.pool_tok.v[pidx], lev.tok)
                assert np.array_equal(prev.score[par] + prev.pool_lp.v[pidx], lev.score)
                assert (lev.child < prev.made[par]).all()
                if self.eos_id is not None:
                    assert (lev.tok != self.eos_id).all()
            if self.eos_id is not None:
                has = lev.eos_j >= 0
                assert np.array_equal(lev.eos_lp[has], lev.pool_lp.v[lev.off[has] + lev.eos_j[has]])
                assert (lev.eos_lp[~has] == -math.inf).all()
            fetched = np.flatnonzero(lev.fetched)
            for a in range(0, fetched.shape[0], 1 << 16):  # heads sorted, each down to its floor
                f = fetched[a : a + (1 << 16)]
                lens = lev.tlen[f].astype(np.int64)
                idx = np.repeat(lev.off[f] - (np.cumsum(lens) - lens), lens) + np.arange(int(lens.sum()))
                seg = lev.pool_lp.v[idx]
                first = np.zeros(seg.shape[0], bool)
                first[(np.cumsum(lens) - lens)[lens > 0]] = True
                assert (np.diff(seg)[~first[1:]] <= 0).all()
                fl = np.repeat(lev.floor[f], lens)
                assert (np.repeat(lev.score[f], lens) + seg >= fl).all()
            if T < math.inf:
                live = lev.score >= T
                assert lev.fetched[live].all(), f"unfetched live prefix at level {d}"
                assert (lev.floor[live] <= T).all()


_NODE_BYTES = 65  # bytes of one node's columns (57 for a fixed-length tree)
WIDE_MARGIN_BITS = 6.0  # the least keep margin once a table wider than budget.WHOLE_WIDTH is seen (module docstring)
_ENTRY_BYTES = 12  # bytes of one stored table entry (float64 log-prob and int32 token)
_TUPLE_CACHE_DEPTH = 24  # from this depth on, model-call prefixes are built from their parents' (_prefix_tuples)
_FETCH_ENTRIES = 1 << 18  # about this many stored entries are fetched per round of PrefixTree._fetch
# with a store, commits start at max(4 * batch_size, 256) prefixes and double while one takes less than
# 0.25 s: a crash loses about that much work, and the journal's fsyncs stay a few percent
_JOURNAL_CHUNK, _JOURNAL_SECONDS = 256, 0.25
