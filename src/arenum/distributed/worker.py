"""One worker of a distributed enumeration: its model replica, its part of the tree, its index.

:class:`ShardWorker` is plain Python (the Ray backend wraps it in an actor; the local backend calls
it in-process). It builds the model from a factory, owns a :class:`~arenum.exact.tree.PrefixTree` whose
interior tables are cut to what the :class:`~arenum.distributed.plan.ShardPlan` gives this worker
(:class:`ShardOracle`), keeps it in a :class:`~arenum.exact.store.TreeStore` when given a folder (a restarted
worker resumes from it, with no saved forward paid again), and answers the coordinator's questions
about its own items: counts, masses, samples of scores, tie groups and items by local position.
Every method takes and returns plain values (numbers, lists, small arrays), cheap to send.
"""
from __future__ import annotations

import hashlib
import math
import os
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

from .._io import atomic_write
from ..exact import ExactIndex, open_store, root_fingerprint, PrefixTree
from ..beyond import draw_samples
from ..step import Heads
from .plan import ShardPlan

__all__ = ["ShardOracle", "ShardWorker", "PLAN_FILE"]

PLAN_FILE = "plan.json"
_KEEP_INDEXES = 3  # indexes kept per worker (at the thresholds asked last)


class ShardOracle:
    """A step oracle whose interior tables hold only this worker's entries (whole, never cut).

    Everything but :meth:`fetch_heads` is the wrapped :class:`~arenum.step.oracle.StepOracle`'s.
    """

    def __init__(self, inner: Any, plan: ShardPlan, worker: int) -> None:
        self._inner, self._plan, self._worker = inner, plan, worker

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def fetch_heads(self, prefixes: list[tuple], floors: np.ndarray) -> Heads:
        plan, inner = self._plan, self._inner
        if plan.single:  # no cut: worker 0 holds everything, the others nothing (an empty root)
            if self._worker == 0:
                return inner.fetch_heads(prefixes, floors)
            n = len(prefixes)
            return Heads(np.zeros(0, np.int64), np.zeros(0), np.zeros(n, np.int64), np.zeros(n, np.int64))
        inter = [i for i, p in enumerate(prefixes) if plan.is_interior(tuple(p))]
        if not inter:
            return inner.fetch_heads(prefixes, floors)
        # an interior table the plan holds is read from it (the plan scored it), the others scored
        known = {i for i in inter if tuple(prefixes[i]) in plan.lps}
        rest = [i for i in range(len(prefixes)) if i not in known]
        n = len(prefixes)
        lens, full = np.zeros(n, np.int64), np.zeros(n, np.int64)
        ids_of: dict[int, np.ndarray] = {}
        lps_of: dict[int, np.ndarray] = {}
        if rest:
            fl = np.array(floors, np.float64)[rest]
            is_inter = np.array([i in inter for i in rest], bool)
            fl[is_inter] = -math.inf
            h = inner.fetch_heads([prefixes[i] for i in rest] if known else prefixes, fl)
            off = np.cumsum(h.lens) - h.lens
            for k, i in enumerate(rest):
                a, m = int(off[k]), int(h.lens[k])
                ids, lps = h.ids[a:a + m], h.lps[a:a + m]
                if is_inter[k]:
                    mine = self._mine(tuple(prefixes[i]), inner.tokens(ids))
                    ids, lps = ids[mine], lps[mine]
                    full[i] = ids.shape[0]
                else:
                    full[i] = h.full[k]
                ids_of[i], lps_of[i] = ids, lps
        for i in known:
            p = tuple(prefixes[i])
            mine = self._mine(p, plan.tables[p])
            ids_of[i] = inner.vocab.ids([t for t, y in zip(plan.tables[p], mine) if y])
            lps_of[i] = np.asarray(plan.lps[p], np.float64)[mine]
            full[i] = ids_of[i].shape[0]
        cat = [ids_of[i] for i in range(n)]
        lens[:] = [a.shape[0] for a in cat]
        return Heads(np.concatenate(cat).astype(np.int64, copy=False) if cat else np.zeros(0, np.int64),
                     np.concatenate([lps_of[i] for i in range(n)]) if n else np.zeros(0), lens, full)

    def _mine(self, prefix: tuple, tokens: Any) -> np.ndarray:
        """Which entries of the interior table at ``prefix`` this worker's tree keeps."""
        return np.array([self._plan.owns(self._worker, prefix, t) for t in tokens], bool)


def _trim(h: np.ndarray) -> np.ndarray:
    nz = np.flatnonzero(h)
    return h[: int(nz[-1]) + 1].copy() if nz.size else h[:0].copy()


class ShardWorker:
    """A worker's part of one enumeration (module docstring).

    ``factory()`` returns the :class:`arenum.AutoregressiveEnumerable` of the model (its settings are
    the enumeration's); ``store``: a folder for this worker's tree (``None``: memory only);
    ``fingerprint``: the model's identity in the store (default: a hash of its root table).
    """

    def __init__(self, factory: Callable[[], Any], worker: int, store: str | None = None,
                 fingerprint: str | None = None) -> None:
        from ..enumerable import AutoregressiveEnumerable

        ar = factory()
        if isinstance(ar, tuple) and len(ar) == 2:  # a ModelSpec: (enumerable, the model's fingerprint)
            ar, fingerprint = ar[0], fingerprint if fingerprint is not None else ar[1]
        if not isinstance(ar, AutoregressiveEnumerable):
            raise TypeError(f"the model factory must return an AutoregressiveEnumerable, got {type(ar).__name__}")
        self.ar, self.worker, self.store_dir = ar, int(worker), store
        self.oracle = ar.oracle
        self._fp = fingerprint
        self._fp_given = fingerprint is not None  # else the root table's hash, and probes check the rest
        self.plan: ShardPlan | None = None
        self.tree: PrefixTree | None = None
        self.store = None
        self._restored = 0
        self.busy = 0.0  # seconds spent building (deepening, indexes) in this process
        self._idx: dict[float, ExactIndex] = {}
        if store is not None:
            path = os.path.join(store, PLAN_FILE)
            if os.path.exists(path):  # a restarted worker: its plan and its tree come back
                with open(path, encoding="utf-8") as f:
                    self.set_plan(f.read(), _saved=True)

    # ------------------------------------------------------------------ set-up
    def fingerprint(self) -> str:
        """The model's identity: the given one, else a hash of its root table (one forward)."""
        if self._fp is None:
            self._fp = root_fingerprint(self.oracle)
        return self._fp

    def describe(self) -> dict:
        """Settings and identity, compared by the coordinator across workers."""
        cfg = self.ar.settings
        return {"fingerprint": self.fingerprint(), "max_len": cfg.max_len, "eos": _jsonable(cfg.eos),
                "cap": cfg.cap, "terminating": cfg.terminating, "branch_cap": cfg.branch_cap,
                "norm_tol": cfg.norm_tol, "leaf_level": self.ar.support.leaf_level,
                "int_mode": self.oracle.int_mode, "batch_size": cfg.batch_size,
                "fingerprint_given": self._fp_given, "planned": self.plan is not None}

    def probe_prefixes(self, k: int, seed: int) -> list[tuple]:
        """The prefixes along ``k`` paths drawn from this worker's model (seeded ancestral draws,
        :func:`~arenum.beyond.draw_samples`), each cut to a random length below the cap: what
        :meth:`probe_digest` hashes on every worker, so that workers that loaded different models are
        told apart past the first step (the draws cost at most ``k`` forwards a step)."""
        drawn = draw_samples(self.oracle, k, self.ar.support, seed=seed, tokens=True)
        cap = self.ar.support.leaf_level + 1
        ends = np.random.default_rng(seed).integers(1, max(cap, 1) + 1, size=k)
        eos = self.oracle.eos_id
        out = {()}
        for ids, end in zip(drawn.seqs or [], ends.tolist()):
            ids = [t for t in ids if t != eos]
            for j in range(1, min(len(ids), end, cap - 1) + 1):
                out.add(tuple(self.oracle.tokens(ids[:j])))
        return sorted(out, key=lambda q: (len(q), repr(q)))

    def probe_digest(self, prefixes: list[tuple]) -> str:
        """A hash of this worker's whole tables (tokens and log-probs, sorted) at ``prefixes``."""
        h = hashlib.sha256()
        heads = self.oracle.fetch_heads([tuple(q) for q in prefixes], np.full(len(prefixes), -math.inf))
        offs = np.cumsum(heads.lens) - heads.lens
        for r in range(len(prefixes)):
            ids = heads.ids[offs[r] : offs[r] + heads.lens[r]]
            lps = heads.lps[offs[r] : offs[r] + heads.lens[r]]
            rows = sorted(zip(lps.tolist(), [repr(t) for t in self.oracle.tokens(ids)]))
            h.update(repr(rows).encode("utf-8"))
        return h.hexdigest()

    def settings(self) -> Any:
        """The enumeration's :class:`~arenum.settings.Settings` (from the factory's enumerable)."""
        return self.ar.settings

    def support(self) -> Any:
        return self.ar.support

    def table(self, prefix: tuple) -> tuple[list, np.ndarray]:
        """The whole table at ``prefix`` in table order: ``(tokens, log_probs)`` (to plan shards)."""
        h = self.oracle.fetch_heads([tuple(prefix)], np.array([-math.inf]))
        return list(self.oracle.tokens(h.ids)), np.asarray(h.lps, np.float64)

    def set_plan(self, plan_json: str, _saved: bool = False) -> dict:
        """Take this worker's part of ``plan`` (JSON): build (or reopen from the store) its tree."""
        plan = ShardPlan.from_json(plan_json)
        if self.plan is not None:
            if self.plan.digest() != plan.digest():
                raise ValueError("this worker already holds another plan")
            return self.summary()
        cfg = self.ar.settings
        tree = PrefixTree(ShardOracle(self.oracle, plan, self.worker), self.ar.support,
                          keep_margin_bits=cfg.keep_margin_bits, table_bytes=cfg.table_bytes)
        if self.store_dir is not None:
            os.makedirs(self.store_dir, exist_ok=True)
            fp = f"{self.fingerprint()}|plan:{plan.digest()}|worker:{self.worker}/{plan.workers}"
            self.store = open_store(self.store_dir, tree, cfg, fp, False, probe=not self._fp_given)
            self._restored = self.store.forwards  # forwards saved before this process started
            if not _saved:
                write_atomic(os.path.join(self.store_dir, PLAN_FILE), plan.to_json())
        self.plan, self.tree = plan, tree
        return self.summary()

    # ------------------------------------------------------------------ building
    def summary(self) -> dict:
        """What the coordinator steers by: the built threshold, histograms, counters, memory."""
        t = self._need_tree()
        st = self.oracle.stats.as_dict()
        out = {"built": t.built, "depth_truncated": t.depth_truncated, "h_comp": _trim(t.h_comp),
               "h_pref": _trim(t.h_pref), "hist_len": len(t.h_comp), "fetched": t.fetched_nodes, "memory": t.memory_bytes(),
               "nbytes": t.nbytes, "nodes": t.n_nodes, "stats": st, "pid": os.getpid(), "busy": self.busy,
               "margin": t.keep_margin_bits}
        if self.store is not None:
            out["store_forwards"], out["store_replayed"] = self.store.forwards, self.store.replayed
            out["restored"], out["probe_forwards"] = self._restored, self.store.probe_forwards
        return out

    def deepen(self, T: float, keep: float | None, max_prefixes: int | None, max_bytes: int | None) -> dict:
        """Deepen this worker's tree to threshold ``T`` (see :meth:`PrefixTree.deepen`)."""
        with self._busy():
            self._need_tree().deepen(T, keep, max_prefixes=max_prefixes, max_bytes=max_bytes)
        return self.summary()

    @contextmanager
    def _busy(self) -> Iterator[None]:
        """Count the time inside as building (``summary()["busy"]``)."""
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.busy += time.perf_counter() - t0

    def _need_tree(self) -> PrefixTree:
        if self.tree is None:
            raise RuntimeError("this worker has no plan yet")
        return self.tree

    # ------------------------------------------------------------------ its index
    def _index(self, T: float) -> ExactIndex:
        idx = self._idx.get(T)
        if idx is None:
            t = self._need_tree()
            if T < t.built:
                raise RuntimeError(f"worker {self.worker} is built to {t.built!r}, not {T!r}")
            idx = ExactIndex(t, T, buckets=False)
            if len(self._idx) >= _KEEP_INDEXES:
                self._idx.pop(next(iter(self._idx)))
            self._idx[T] = idx
        return idx

    def index_size(self, T: float) -> int:
        """Items with score ``>= T`` (the index at ``T``, its buckets not built yet)."""
        with self._busy():
            return self._index(T).N

    def complete(self, T: float) -> int:
        """Build the buckets of the index at ``T``; returns its size."""
        with self._busy():
            return self._ready(T).N

    def counts(self, T: float, ts: list[float]) -> list[tuple[int, int]]:
        """``(count_ge(t), count_gt(t))`` for each ``t``."""
        idx = self._ready(T)
        return [(idx.count_ge(t), idx.count_gt(t)) for t in ts]

    def masses(self, T: float, ts: list[float]) -> list[tuple[int, int, int, int]]:
        """``(units >= t, units > t, count_ge(t), count_gt(t))`` for each ``t`` (exact masses in
        ``arenum.exact.exactsum`` units, with the counts a mass bracket needs)."""
        idx = self._ready(T)
        return [(idx.mass_ge_units(t), idx.mass_gt_units(t), idx.count_ge(t), idx.count_gt(t)) for t in ts]

    def total_mass(self, T: float) -> int:
        return self._index(T).total_mass_units()

    def sample_scores(self, T: float, lo: float, lo_strict: bool, hi: float, k: int,
                      full: int = 0) -> tuple[int, list[float], int]:
        """Items with ``lo <= score < hi`` (``lo < score`` when ``lo_strict``; ``hi`` may be ``+inf``):
        ``(how many, scores, items above hi)``. The scores: every one in order when there are at most
        ``full``, else those at up to ``k`` positions spread evenly over them (in order)."""
        idx = self._ready(T)
        a = idx.count_ge(hi) if hi != math.inf else 0
        b = idx.count_gt(lo) if lo_strict else idx.count_ge(lo)
        if b <= a:
            return 0, [], a
        if b - a <= full:
            return b - a, idx.items(a, b)[1].tolist(), a
        pos = np.unique(np.linspace(a, b - 1, min(k, b - a)).round().astype(np.int64))
        return b - a, [idx.item(int(p))[1] for p in pos], a

    def top(self, T: float) -> float:
        return self._index(T).top_score()

    def tie_groups(self, T: float, s: float) -> list[tuple[int, tuple, int]]:
        """The items with score exactly ``s``, in this worker's order, as runs of
        ``(length, plan key, count)`` (the order across workers sorts these runs)."""
        idx = self._ready(T)
        a, b = idx.count_gt(s), idx.count_ge(s)
        out: list[tuple[int, tuple, int]] = []
        plan = self.plan
        for lo in range(a, b, 1 << 16):
            P, _ = idx.items(lo, min(b, lo + (1 << 16)))
            for ids in idx.sequences(P):
                g = (len(ids), plan.key(self.oracle.tokens(ids)))
                if out and out[-1][:2] == g:
                    out[-1] = (g[0], g[1], out[-1][2] + 1)
                else:
                    out.append((g[0], g[1], 1))
        return out

    def items(self, T: float, start: int, stop: int) -> list[tuple[tuple, float]]:
        """``(tokens, score)`` of this worker's items ``start .. stop-1`` in its order."""
        idx = self._ready(T)
        P, xs = idx.items(start, stop)
        return [(self.oracle.tokens(ids), x) for ids, x in zip(idx.sequences(P), xs.tolist())]

    def _ready(self, T: float) -> ExactIndex:
        idx = self._index(T)
        if not idx.bucketed:
            idx.complete()
        return idx

    # ------------------------------------------------------------------ draws
    def draw(self, chunks: list[tuple[int, int | None]]) -> list[dict]:
        """Plain ancestral draws, one set per ``(n, seed)`` chunk (this worker's model replica; its
        tree is not used): the arrays a :class:`~arenum.beyond.estimate.MonteCarloEstimator` needs."""
        out = []
        for n, seed in chunks:
            s = draw_samples(self.oracle, int(n), self.ar.support, seed=seed,
                             finite_state=self.ar.finite_state_sampler())
            out.append({"score": s.score, "log_q": s.log_q, "complete": s.complete, "length": s.length,
                        "keys": s.keys, "forwards": s.forwards})
        return out

    # ------------------------------------------------------------------ scores and checks
    def score(self, seqs: list[tuple]) -> list[float]:
        """Canonical scores of sequences this worker owns (stored tables first, then the model)."""
        t = self._need_tree()
        return [t.score(tuple(s)) for s in seqs]

    def check(self) -> bool:
        """Assert the tree's and the indexes' invariants (for tests)."""
        t = self._need_tree()
        t._check()
        for T, idx in self._idx.items():
            assert T >= t.built
            idx._check()
        return True

    def close(self, cut_tables: bool = True) -> None:
        """Snapshot and release this worker's store; ``cut_tables=False`` (an interrupted build) keeps
        every table, so that the build resumed scores no saved prefix again."""
        if self.store is not None:
            self.store.close(cut=cut_tables)
            self.store = None

    def ping(self) -> int:
        return os.getpid()


def _jsonable(t: Any) -> Any:
    return int(t) if isinstance(t, np.integer) else t


def write_atomic(path: str, text: str) -> None:
    """Write ``text`` to ``path`` atomically (:func:`arenum._io.atomic_write`)."""
    atomic_write(path, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))

