"""The coordinator's view of a distributed enumeration: the workers' trees and indexes as one.

:class:`MergedTree` stands where :class:`~arenum.exact.seek.SeekIndex` expects a prefix tree: its steering
histograms are the sums of the workers' (so budgets are chosen exactly as for one tree), and
``deepen`` deepens every worker to the same threshold, in parallel. :class:`MergedIndex` stands where
an :class:`~arenum.exact.index.ExactIndex` is expected, for every item with score ``>= T`` over all workers:

- counts and masses add (masses are exact sums, :mod:`arenum.exact.exactsum`, so they are the same floats
  as one process's);
- a position ``i`` is found by selection on the score: every worker sends scores sampled evenly from
  the part of its order still in question, every worker counts at those scores, and the window
  shrinks about ``K``-fold a round (two messages to each worker a round) until the score ``s*`` of
  position ``i`` is known exactly; the items tied at ``s*`` are placed by the one documented order
  (length, then table positions: the workers send their tie groups as runs, sorted by
  :meth:`~arenum.distributed.plan.ShardPlan.key`), so only the one worker holding position ``i``
  sends an item;
- a slice asks each worker for exactly its share of the positions and merges them by the same key.
"""
from __future__ import annotations

import heapq
import math
import threading
from types import SimpleNamespace
from typing import Any

import numpy as np

from ..exact import float_units, to_float, values, mass_bracket, SeekIndex, HIST_BINS_PER_BIT, PrefixTree, hist_cum
from ..results import MassBracket
from .plan import ShardPlan
from .._validate import LN2

__all__ = ["MergedTree", "MergedIndex", "DistributedSeek", "SAMPLES_PER_ROUND"]

SAMPLES_PER_ROUND = 32
"""Scores each worker sends per selection round (the window shrinks about this much a round)."""
WHOLE_WINDOW = 512
"""A worker with at most this many items in the window sends all their scores: when every worker
does, the coordinator places the position itself, with no further message."""
_U = 2.0**-53


class MergedTree:
    """The workers' trees as one (module docstring). ``backend`` runs worker methods."""

    def __init__(self, backend: Any, plan: ShardPlan, support: Any, *, keep_margin_bits: float,
                 batch_size: int, summaries: list[dict]) -> None:
        self.backend, self.plan, self.support = backend, plan, support
        self.lock = threading.RLock()
        self.leaf_level = support.leaf_level
        self.fixed_len = support.fixed_len
        self.margin_bits = float(keep_margin_bits)
        self.oracle = SimpleNamespace(batch_size=batch_size)
        self.progress = None
        self.rounds = 0  # deepen rounds sent to the workers
        self._set(summaries)

    def _set(self, sums: list[dict]) -> None:
        self.summaries = sums
        n = max(s["hist_len"] for s in sums)
        hc, hp = np.zeros(n, np.int64), np.zeros(n, np.int64)
        for s in sums:
            hc[: len(s["h_comp"])] += s["h_comp"]
            hp[: len(s["h_pref"])] += s["h_pref"]
        self.h_comp, self.h_pref = hc, hp
        self.hist_top = max(max(len(s["h_comp"]), len(s["h_pref"])) for s in sums)  # zero from here on

    def refresh(self) -> None:
        self._set(self.backend.map("summary", [()] * self.backend.n))

    # ------------------------------------------------------------------ what SeekIndex reads
    @property
    def built(self) -> float:
        return max(s["built"] for s in self.summaries)

    @property
    def keep_margin_bits(self) -> float:
        """The margin the workers' trees apply (wider for wide tables: :class:`PrefixTree`)."""
        return max([self.margin_bits] + [s.get("margin", self.margin_bits) for s in self.summaries])

    @property
    def depth_truncated(self) -> bool:
        return any(s["depth_truncated"] for s in self.summaries)

    @property
    def fetched_nodes(self) -> int:
        return sum(s["fetched"] for s in self.summaries)

    @property
    def nbytes(self) -> int:
        return sum(s["nbytes"] for s in self.summaries)

    @property
    def n_nodes(self) -> int:
        return sum(s["nodes"] for s in self.summaries)

    def memory_bytes(self) -> int:
        return sum(s["memory"] for s in self.summaries)

    # the single tree's readers, over the summed histograms (same names, same lengths)
    completions_hist = PrefixTree.completions_hist
    prefixes_hist = PrefixTree.prefixes_hist
    bits_for = PrefixTree.bits_for
    known_prefixes = PrefixTree.known_prefixes
    completions_beyond = PrefixTree.completions_beyond

    def deepen(self, T: float, keep: float | None = None, max_prefixes: int | None = None,
               max_bytes: int | None = None) -> None:
        """Deepen every worker to ``T`` in parallel. Each worker's cap is the total cap minus the
        others' use before this round; as the workers grow together, the sum may pass a cap by what
        the others add in the same round (``BudgetExceeded`` is still raised, by the worker that
        reaches its own cap). A failure anywhere raises after every worker has stopped."""
        sums = self.summaries
        fetched = [s["fetched"] for s in sums]
        mem = [s["memory"] for s in sums]
        tot_f, tot_m = sum(fetched), sum(mem)
        args = []
        for j in range(len(sums)):
            mp = None if max_prefixes is None else max(0, max_prefixes - (tot_f - fetched[j]))
            mb = None if max_bytes is None else max(0, max_bytes - (tot_m - mem[j]))
            args.append((T, keep, mp, mb))
        self.rounds += 1
        try:
            self._set(self.backend.map("deepen", args))
        except BaseException:
            self.refresh()
            raise
        if self.progress is not None:
            st = self.stats_sum()
            bits = -T / LN2 if T > -math.inf else math.inf
            self.progress({"prefixes": self.fetched_nodes, "forwards": st.get("forwards", 0), "target_bits": bits,
                           "known_prefixes": self.known_prefixes(bits), "workers": len(sums), "round": self.rounds})

    def stats_sum(self) -> dict:
        out: dict[str, Any] = {}
        for s in self.summaries:
            for k, v in s["stats"].items():
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    out[k] = out.get(k, 0) + v
        return out

    def score(self, seq: tuple) -> float:
        """Canonical score of ``seq`` (in the declared support), from the worker owning it."""
        w = self.plan.owner(seq)
        if w is None:
            return -math.inf
        return float(self.backend.call(w, "score", [tuple(seq)])[0])

    def _check(self) -> None:
        """Every worker's invariants; the summaries are the workers' own (a failed round may leave
        workers at different thresholds: ``built`` is the least deep, and the next round evens them)."""
        assert all(self.backend.map("check", [()] * self.backend.n))
        fresh = self.backend.map("summary", [()] * self.backend.n)
        assert [s["built"] for s in fresh] == [s["built"] for s in self.summaries]
        assert [s["fetched"] for s in fresh] == [s["fetched"] for s in self.summaries]


class MergedIndex:
    """Every item with score ``>= T`` over all workers, in the one global order (module docstring)."""

    def __init__(self, tree: MergedTree, T: float) -> None:
        self.tree, self.T, self.plan = tree, T, tree.plan
        self.backend = tree.backend
        self.sizes = [int(n) for n in self.backend.map("index_size", [(T,)] * self.backend.n)]
        self.N = sum(self.sizes)
        self.bucketed = False
        self._split_cache: dict[int, list[int]] = {}

    def complete(self) -> "MergedIndex":
        if not self.bucketed:
            self.backend.map("complete", [(self.T,)] * self.backend.n)
            self.bucketed = True
        return self

    # ------------------------------------------------------------------ counts and masses
    def _counts(self, ts: list[float]) -> np.ndarray:
        """``(workers, len(ts), 2)``: ``count_ge``, ``count_gt`` per worker at each ``t``."""
        self.complete()
        out = self.backend.map("counts", [(self.T, ts)] * self.backend.n)
        return np.asarray(out, np.int64).reshape(self.backend.n, len(ts), 2)

    def _masses(self, ts: list[float]) -> np.ndarray:
        """``(workers, len(ts), 4)`` object array: mass units ``>= t``, ``> t``, ``count_ge``, ``count_gt``."""
        self.complete()
        out = self.backend.map("masses", [(self.T, ts)] * self.backend.n)
        arr = np.empty((self.backend.n, len(ts), 4), object)
        for j, rows in enumerate(out):
            for c, row in enumerate(rows):
                arr[j, c] = row
        return arr

    def count_ge(self, t: float) -> int:
        return int(self._counts([t])[:, 0, 0].sum())

    def count_gt(self, t: float) -> int:
        return int(self._counts([t])[:, 0, 1].sum())

    def top_score(self) -> float:
        return max(self.backend.map("top", [(self.T,)] * self.backend.n), default=-math.inf)

    def mass_ge(self, t: float) -> MassBracket:
        m = self._masses([t])[:, 0, :].sum(axis=0)
        return mass_bracket(to_float(int(m[0])), int(m[2]))

    def total_mass(self) -> MassBracket:
        units = sum(self.backend.map("total_mass", [(self.T,)] * self.backend.n))
        return mass_bracket(to_float(units), self.N)

    def nucleus(self, p: float) -> tuple[int, int | None] | None:
        """As :meth:`arenum.exact.index.ExactIndex.nucleus`: for each target, the smallest ``k`` whose exact
        top-``k`` mass reaches it, placed by the score level where the exact mass crosses it."""
        total = sum(self.backend.map("total_mass", [(self.T,)] * self.backend.n))
        n = max(self.N, 1)
        e = (n + 8) * _U
        out: list[int | None] = []
        for target in (p / (1 + e), p / (1 - e)):
            goal = float_units(target)
            if goal > total:
                out.append(None)
                continue
            if goal <= 0:
                out.append(min(1, self.N))
                continue
            s, at = self._select(goal, "mass")  # at: per worker (units >=, units >, count_ge, count_gt)
            gt_units = int(at[:, 1].sum())
            v = float_units(float(values(np.array([s], np.float64))[0]))
            k = int(at[:, 3].sum()) + -(-(goal - gt_units) // v)
            out.append(min(k, self.N))
        if out[0] is None:
            return None
        return out[0], out[1]

    # ------------------------------------------------------------------ selection
    def _select_count(self, goal: int) -> tuple[float, np.ndarray]:
        return self._select(goal, "count", self._hint(goal))

    def _hint(self, goal: int) -> tuple[float, float] | None:
        """Scores likely to bracket position ``goal - 1``, read off the merged completion histogram
        (1/64-bit bins, exact above the built threshold), one bin of slack each side; only a guess:
        the selection checks it like any other candidate."""
        cum = hist_cum(self.tree, self.tree.completions_hist)  # the populated bins (past them all zero)
        if cum.size == 0 or cum[-1] < goal:
            return None
        b = int(np.searchsorted(cum, goal))
        step = LN2 / HIST_BINS_PER_BIT
        lo, hi = -(b + 2) * step, -(b - 1) * step
        if hi >= 0.0 or lo <= self.T:
            return None
        return lo, hi

    def _select(self, goal: int, kind: str, hint: tuple[float, float] | None = None) -> tuple[float, np.ndarray]:
        """The highest item score ``s*`` whose ``>=`` total (count or exact mass) reaches ``goal``,
        with ``(count_ge, count_gt)`` per worker at ``s*`` (for ``kind="mass"``: ``(units >=, units >,
        count_ge, count_gt)``). Requires the total at ``T`` to reach it.

        Each round, every worker sends up to ``SAMPLES_PER_ROUND`` scores spread over its items in the
        window still in question, and every worker counts at all of them; the window shrinks to
        between two candidates. ``hint``: a first window to sample, whose ends are candidates too."""
        self.complete()
        lo, lo_strict, hi = self.T, False, math.inf  # s* is in [lo, hi) (or (lo, hi) when strict)
        W = self.backend.n
        while True:
            slo, shi = (lo, hi) if hint is None else hint
            got = self.backend.map("sample_scores",
                                   [(self.T, slo, lo_strict, shi, SAMPLES_PER_ROUND, WHOLE_WINDOW)] * W)
            if kind == "count" and all(len(xs) == n for n, xs, _ in got):
                done = _select_in_window(got, goal)  # every item of the window is here: no more messages
                if done is not None:
                    return done
            pool = {x for _, xs, _ in got for x in xs}
            if hint is not None:
                pool |= {hint[0], hint[1]}
                hint = None
            cands = sorted(pool, reverse=True)
            if not cands:
                raise RuntimeError(f"selection found no item between {lo!r} and {hi!r} (goal {goal})")
            # (W, C, 2) counts ge/gt, or (W, C, 4) masses ge/gt then counts: one message either way
            cnt = self._counts(cands) if kind == "count" else self._masses(cands)
            ge = cnt[:, :, 0].sum(axis=0)
            gt = cnt[:, :, 1].sum(axis=0)
            for c, x in enumerate(cands):  # descending: the first reaching the goal is the highest
                if ge[c] >= goal:
                    if gt[c] < goal:
                        return x, cnt[:, c, :]
                    lo, lo_strict = x, True  # s* > x
                    if c > 0:
                        hi = cands[c - 1]
                    break
            else:
                hi = cands[-1]  # every candidate holds too little: s* is below them all

    # ------------------------------------------------------------------ positions
    def _split(self, i: int) -> list[int]:
        """How many of each worker's items precede global position ``i``."""
        if i <= 0:
            return [0] * self.backend.n
        if i >= self.N:
            return list(self.sizes)
        hit = self._split_cache.get(i)
        if hit is not None:
            return hit
        s, c = self._select_count(i + 1)
        ge, gt = c[:, 0].tolist(), c[:, 1].tolist()
        o = i - sum(gt)
        out = list(gt)
        tied = [j for j in range(len(ge)) if ge[j] > gt[j]]
        if len(tied) == 1:
            out[tied[0]] += o
        elif o:
            for j, take in self._tie_walk(s, tied, o):
                out[j] += take
        if len(self._split_cache) > 64:
            self._split_cache.clear()
        self._split_cache[i] = out
        return out

    def _tie_walk(self, s: float, tied: list[int], o: int) -> list[tuple[int, int]]:
        """The first ``o`` items tied at ``s`` in the global order: ``(worker, how many)`` runs."""
        runs = []
        for j in tied:
            for length, key, n in self.backend.call(j, "tie_groups", self.T, s):
                runs.append((length, tuple(key), j, n))
        runs.sort(key=lambda r: (r[0], r[1]))
        out = []
        for _, _, j, n in runs:
            if o <= 0:
                break
            take = min(n, o)
            out.append((j, take))
            o -= take
        return out

    def item(self, i: int) -> tuple[tuple, float]:
        """``(sequence, score)`` at global position ``i``: one selection, then one worker's item."""
        if not 0 <= i < self.N:
            raise IndexError(f"index {i} out of range for {self.N} indexed sequences")
        s, c = self._select_count(i + 1)
        ge, gt = c[:, 0].tolist(), c[:, 1].tolist()
        o = i - sum(gt)
        tied = [j for j in range(len(ge)) if ge[j] > gt[j]]
        if len(tied) == 1:
            j, local = tied[0], gt[tied[0]] + o
        else:
            runs = self._tie_walk(s, tied, o + 1)
            j = runs[-1][0]
            local = gt[j] + sum(n for k, n in runs if k == j) - 1
        seq, x = self.backend.call(j, "items", self.T, local, local + 1)[0]
        return tuple(seq), float(x)

    def items(self, start: int, stop: int) -> tuple[list[tuple], np.ndarray]:
        """(sequences, scores) of global positions ``start .. stop-1``."""
        stop = min(stop, self.N)
        if start >= stop:
            return [], np.zeros(0)
        a, b = self._split(start), self._split(stop)
        want = [j for j in range(len(a)) if b[j] > a[j]]
        got = self.backend.map_some("items", {j: (self.T, a[j], b[j]) for j in want})
        key = self.plan.key
        lists = [[(-x, len(seq), key(seq), k, tuple(seq), x) for k, (seq, x) in enumerate(got[j])] for j in want]
        merged = list(heapq.merge(*lists))
        return [m[4] for m in merged], np.array([m[5] for m in merged], np.float64)

    def sequences(self, P: list[tuple]) -> list[tuple]:
        return [tuple(p) for p in P]

    def _check(self) -> None:
        assert self.N == sum(self.sizes)


def _select_in_window(got: list[tuple[int, list[float], int]], goal: int) -> tuple[float, np.ndarray] | None:
    """:meth:`MergedIndex._select` when every worker sent every score of the window (descending) and
    how many of its items lie above it: ``None`` if the window does not hold position ``goal - 1``."""
    above = sum(a for _, _, a in got)
    inside = sum(n for n, _, _ in got)
    if not above < goal <= above + inside:
        return None
    merged = sorted((x for _, xs, _ in got for x in xs), reverse=True)
    s = merged[goal - above - 1]
    cnt = np.zeros((len(got), 2), np.int64)
    for j, (_, xs, a) in enumerate(got):
        neg = -np.asarray(xs, np.float64)  # ascending
        cnt[j, 0] = a + int(np.searchsorted(neg, -s, side="right"))
        cnt[j, 1] = a + int(np.searchsorted(neg, -s, side="left"))
    return s, cnt


class DistributedSeek(SeekIndex):
    """:class:`~arenum.exact.seek.SeekIndex` over a :class:`MergedTree`: the same budget steering, on the
    merged histograms, with :class:`MergedIndex` for indexes."""

    def _make_index(self, T: float) -> MergedIndex:  # type: ignore[override]
        return MergedIndex(self.tree, T)

    def _seq(self, idx: Any, P: Any) -> list[tuple]:
        return [self._decode(s) for s in idx.sequences(list(P))]
