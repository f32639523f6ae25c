"""``DistributedEnumerable``: one exact enumeration whose tree and forwards are split over workers.

Same query API and the same answers as :class:`arenum.AutoregressiveEnumerable` (same floats, same
sequences, same order, same ``exact`` flags): ``count``, ``count_bracket``, ``threshold``, ``unrank``,
``slice``, ``rank``, ``cumulative``, ``mass_above``, ``nucleus_size``, ``top_k``, ``seek``, ``seek_mass``,
``stats``. Each worker holds its own model replica, its own part of the prefix tree (a shard plan,
:mod:`arenum.distributed.plan`) and its own index; this coordinator steers every build from the
workers' merged histograms and merges their answers (:mod:`arenum.distributed.merge`).
"""
from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from .._validate import exact_int, optional_exact_int
from ..enumerable import AutoregressiveEnumerable
from ..beyond import INTERVALS, BeyondExact, Interval, MonteCarloEstimator, SampleSet
from ..errors import StoreError
from ..exact import MANIFEST, PROBES, SeekIndex
from .backend import LocalBackend, RayBackend, first_line, ray_placement, start_ray
from .merge import DistributedSeek, MergedTree
from .plan import ShardPlan, plan_shards
from .worker import write_atomic

__all__ = ["DistributedEnumerable", "CLUSTER_FILE"]

CLUSTER_FILE = "cluster.json"
DRAW_CHUNK = 1 << 16
"""Draws per chunk of a distributed Monte Carlo (each chunk has its own derived seed)."""


class DistributedEnumerable(AutoregressiveEnumerable):
    """An exact enumeration over ``workers`` Ray actors (or in-process workers).

    model: a :class:`~arenum.distributed.spec.ModelSpec` or a zero-argument factory returning an
        :class:`arenum.AutoregressiveEnumerable`; each worker calls it to build its own replica, and its
        settings (``max_len``, ``eos``, ``batch_size``, caps...) are the enumeration's.
    workers: how many workers; default one per CPU of the Ray cluster (per GPU when the spec asks
        for CUDA).
    address: a Ray cluster to join; ``None`` joins the instance this process runs, else starts a
        local one sized to the machine.
    backend: ``"ray"`` (default) or ``"local"`` (every worker in this process, one after the other:
        the same answers, for tests and debugging).
    store: a folder keeping every worker's tree (``worker-K/``, see ``docs/store.md``) and the plan
        (``cluster.json``): reopening answers without forwards, and a restarted actor resumes from
        it. ``None`` (default): on Ray, a temporary folder serves for restarts and is removed by
        :meth:`close`; ``False``: no store at all (a restarted actor starts its part again).
    num_cpus_per_worker, num_gpus_per_worker: Ray resources of each actor (CPUs default to one,
        shared when there are more workers than the cluster's CPUs, at most 16 a CPU; GPUs to the
        spec's: one for a CUDA device). What the cluster cannot hold now is a ``ValueError`` (Ray
        would keep the actors pending without a word).

    Not supported across workers (``ValueError``): ``branch_cap``, ``logprob_error``, ``exact_limit``.
    """

    def __init__(self, model: Callable[[], Any], workers: int | None = None, *, address: str | None = None,
                 backend: str = "ray", store: str | os.PathLike | bool | None = None, fingerprint: str | None = None,
                 num_cpus_per_worker: float | None = None, num_gpus_per_worker: float | None = None,
                 progress: Callable[[dict], None] | None = None) -> None:
        if not callable(model):
            raise TypeError(f"model must be a ModelSpec or a factory returning an enumerable, got {type(model).__name__}")
        if backend not in ("ray", "local"):
            raise ValueError(f"backend must be 'ray' or 'local', got {backend!r}")
        if address is not None and backend != "ray":
            raise ValueError("address applies to the ray backend")
        gpus = num_gpus_per_worker if num_gpus_per_worker is not None else float(getattr(model, "num_gpus", 0.0))
        W = workers if workers is None else exact_int("workers", workers, minimum=1)
        self._tmp: str | None = None
        if store is not None and store is not False and not isinstance(store, (str, os.PathLike)):
            raise TypeError(f"store must be a folder path, None or False, got {type(store).__name__}")
        root = os.fspath(store) if store not in (None, False) else None
        saved = _read_cluster(root)
        if W is None:
            W = saved["workers"] if saved else _default_workers(backend, address, gpus)
        if saved and saved["workers"] != W:
            raise StoreError(f"{os.path.join(root, CLUSTER_FILE)}: built with {saved['workers']} workers, not {W}")
        if backend == "ray":  # what the cluster cannot hold is refused before anything is made
            ray_placement(W, num_cpus_per_worker, gpus, address)
        if store is None and backend == "ray":
            root = self._tmp = tempfile.mkdtemp(prefix="arenum-workers-")
        stores = [None if root is None else os.path.join(root, f"worker-{j}") for j in range(W)]
        self.workers = W
        if backend == "ray":
            self._backend: Any = RayBackend(model, W, stores, fingerprint, address=address,
                                            num_cpus=num_cpus_per_worker, num_gpus=gpus)
        else:
            self._backend = LocalBackend(model, W, stores, fingerprint)
        try:
            self._setup(saved, root)
        except BaseException:
            self._backend.close()
            self._drop_tmp()
            raise
        self.progress = progress

    def _setup(self, saved: dict | None, root: str | None) -> None:
        be = self._backend
        infos = be.map("describe", [()] * be.n)
        ref = {k: v for k, v in infos[0].items() if k != "planned"}
        for j, info in enumerate(infos[1:], 1):
            got = {k: v for k, v in info.items() if k != "planned"}
            if got != ref:
                diff = sorted(k for k in ref if ref[k] != got.get(k))
                raise ValueError(f"worker {j} loaded another model or settings than worker 0 (differs in: "
                                 f"{', '.join(diff)})")
        if be.n > 1 and not ref["fingerprint_given"]:
            _same_model(be)
        cfg = be.call(0, "settings")
        if cfg.branch_cap is not None or cfg.logprob_error or cfg.exact_limit is not None:
            raise ValueError("branch_cap, logprob_error and exact_limit are not supported across workers")
        self._take_settings(cfg)
        self.fingerprint = ref["fingerprint"]
        self._int_mode = ref["int_mode"]
        self.support = be.call(0, "support")
        if saved is not None:
            plan = saved["plan_obj"]
            if saved.get("fingerprint") != self.fingerprint:
                raise StoreError(f"{os.path.join(root, CLUSTER_FILE)}: built for another model")
        else:
            plan = plan_shards(be.n, lambda p: be.call(0, "table", p), eos=cfg.eos if cfg.terminating else None,
                               leaf_level=self.support.leaf_level)
            if root is not None and self._tmp is None:
                os.makedirs(root, exist_ok=True)
                write_atomic(os.path.join(root, CLUSTER_FILE), json.dumps(
                    {"workers": be.n, "plan": plan.to_json(), "fingerprint": self.fingerprint}))
        self.plan = plan
        sums = be.map("set_plan", [(plan.to_json(),)] * be.n)
        self._tree = MergedTree(be, plan, self.support, keep_margin_bits=cfg.keep_margin_bits,
                                batch_size=cfg.batch_size, summaries=sums)
        self._lock = self._tree.lock
        self._beyond = BeyondExact(None, self.support, None, cfg, lock=self._lock)  # no finite-state tables here
        self._draws: dict[tuple, MonteCarloEstimator] = {}
        self.store = None

    # ------------------------------------------------------------------ life
    def close(self, *, cut_tables: bool = True) -> None:
        """Stop the workers (their stores are snapshotted first) and remove a temporary store.
        ``cut_tables=False`` (``with`` when its block raised, the command line interrupted) keeps every
        table in the workers' stores, for an interrupted build: resumed, it scores no saved prefix again."""
        be = getattr(self, "_backend", None)
        if be is not None:
            try:
                be.close(cut_tables)
            finally:
                self._backend = None
                self._drop_tmp()

    def __exit__(self, et: Any, ev: Any, tb: Any) -> None:
        """:meth:`close`; an error while closing the workers (say, a restarted worker that cannot
        start) does not hide the exception that left the block: it is added to it as a note."""
        try:
            self.close(cut_tables=et is None)
        except Exception as e:
            if ev is None:
                raise
            ev.add_note(f"closing the workers also failed: {type(e).__name__}: {e}")

    def _drop_tmp(self) -> None:
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None

    def __del__(self) -> None:  # pragma: no cover - best effort
        try:
            self._drop_tmp()
        except Exception:
            pass

    @property
    def backend(self) -> Any:
        """The backend running the workers (``LocalBackend`` or ``RayBackend``)."""
        if self._backend is None:
            raise RuntimeError("this DistributedEnumerable is closed")
        return self._backend

    # ------------------------------------------------------------------ plumbing
    def _new_seek(self) -> SeekIndex:
        return DistributedSeek(self._tree, quantizer=self.quantizer, limits=self._limits, count_mode=self.count_mode,
                               decode=tuple)

    def _decode(self, ids: Iterable[Any]) -> tuple:
        return tuple(ids)

    def _str_tokens(self) -> bool:
        return self._int_mode is False

    @property
    def oracle(self) -> Any:
        raise AttributeError("a DistributedEnumerable has one oracle per worker, none here")

    @property
    def stats(self) -> dict[str, Any]:
        """Counters summed over the workers (forwards, model calls, ...), the tree and index sizes,
        and per worker: ``workers_forwards``, ``workers_prefixes``; ``balance`` is the max over the
        mean of the forwards per worker; ``rounds`` counts the deepening rounds sent."""
        with self._lock:
            t = self._tree
            d = t.stats_sum()
            per = [s["stats"].get("forwards", 0) for s in t.summaries]
            d["tree_prefixes"], d["tree_nodes"], d["tree_bytes"] = t.fetched_nodes, t.n_nodes, t.nbytes
            seek = self.seek_index()
            d["built_bits"], d["index_builds"], d["index_seconds"] = seek.built_bits, seek.builds, seek.index_seconds
            d["indexed_sequences"] = seek.indexed
            d["memory_bytes"] = seek.memory_bytes
            d["max_bytes"], d["table_bytes"] = self.settings.max_bytes, self.settings.table_bytes
            d["workers"] = self.workers
            d["workers_forwards"] = per
            d["workers_prefixes"] = [s["fetched"] for s in t.summaries]
            d["workers_busy_s"] = [s["busy"] for s in t.summaries]
            mean = sum(per) / len(per) if per else 0.0
            d["balance"] = max(per) / mean if mean else 1.0
            d["rounds"] = t.rounds
            d["plan"] = self.plan.describe()
            if any("store_forwards" in s for s in t.summaries):
                d["store_forwards"] = sum(s.get("store_forwards", 0) for s in t.summaries)
                d["store_replayed"] = sum(s.get("store_replayed", 0) for s in t.summaries)
                d["workers_store_forwards"] = [s.get("store_forwards", 0) for s in t.summaries]
                d["workers_restored"] = [s.get("restored", 0) for s in t.summaries]
                d["workers_probe_forwards"] = [s.get("probe_forwards", 0) for s in t.summaries]
            return d

    # ------------------------------------------------------------------ scores
    def log_density(self, sequence: Sequence[Any]) -> float:
        """As :meth:`AutoregressiveEnumerable.log_density`, computed by the worker owning the sequence."""
        seq = self._as_tuple(sequence)
        if not self.support.contains(seq):
            return -math.inf
        with self._lock:
            return self._tree.score(seq)

    def score_sequences(self, sequences: Iterable[Sequence[Any]]) -> np.ndarray:
        """``[log_density(x) for x in sequences]`` as a float64 array."""
        return np.array([self.log_density(s) for s in sequences], np.float64)

    def harvest(self, sequence: Sequence[Any]) -> int:
        return 0

    def enumerator(self):  # type: ignore[override]
        """Lists by position (``slice`` in chunks) instead of best-first."""
        return self.seek_index().iter_from(0)

    def sampler(self, seed: int | None = None):  # type: ignore[override]
        raise NotImplementedError("draw with monte_carlo(n), or a single-process AutoregressiveEnumerable")

    def envelope_index(self, **kwargs: Any):  # type: ignore[override]
        raise NotImplementedError("the envelope index samples the model in one process: build it on a "
                                  "single-process AutoregressiveEnumerable of the same model")

    def finite_state_sampler(self) -> None:  # type: ignore[override]
        return None

    def monte_carlo(self, n: int | None = None, *, seed: int | None = -1, head: bool = False,  # type: ignore[override]
                    interval: Interval = "bernstein") -> MonteCarloEstimator:
        """Plain ancestral draws split across the workers: chunk ``c`` of ``DRAW_CHUNK`` draws is drawn
        with seed ``seed`` (``c == 0``) or one derived from ``(seed, c)``, on worker ``c % workers``, and
        the chunks are joined in order, so a seed gives the same estimate for any number of workers
        (and, up to ``DRAW_CHUNK`` draws, the single process's). ``head=True`` is not available here."""
        if head:
            raise ValueError("draws against the exact head need the tree in one process: use head=False")
        n = self.estimate_samples if n is None else exact_int("n", n, minimum=2)
        seed = self.estimate_seed if seed == -1 else optional_exact_int("seed", seed, minimum=0)
        if interval not in INTERVALS:
            raise ValueError(f"interval must be one of {INTERVALS}, got {interval!r}")
        key = (n, seed, False, interval)
        with self._lock:
            est = self._draws.get(key)
            if est is not None:
                return est
            base = seed if seed is not None else int(np.random.SeedSequence().generate_state(1)[0])
            sizes = [min(DRAW_CHUNK, n - a) for a in range(0, n, DRAW_CHUNK)]
            seeds = [base if c == 0 else int(np.random.SeedSequence([base, c]).generate_state(1)[0])
                     for c in range(len(sizes))]
            be = self.backend
            jobs: dict[int, list] = {}
            for c, (m, sd) in enumerate(zip(sizes, seeds)):
                jobs.setdefault(c % be.n, []).append((m, sd))
            got = be.map_some("draw", {j: (v,) for j, v in jobs.items()})
            parts = [got[c % be.n][c // be.n] for c in range(len(sizes))]
            cat = {k: np.concatenate([p[k] for p in parts]) for k in ("score", "log_q", "complete", "length", "keys")}
            samples = SampleSet(cat["score"], cat["log_q"], cat["complete"], None, math.inf, 0, 0.0,
                                sum(int(p["forwards"]) for p in parts), seed, length=cat["length"], keys=cat["keys"])
            est = self._draws[key] = MonteCarloEstimator(samples, confidence=self.confidence, interval=interval)
            return est

    def _check(self) -> None:
        """Assert every worker's invariants and that they are built alike (for tests)."""
        with self._lock:
            self._tree._check()


def _read_cluster(root: str | None) -> dict | None:
    if root is None:
        return None
    path = os.path.join(root, CLUSTER_FILE)
    if not os.path.exists(path):
        if os.path.exists(os.path.join(root, MANIFEST)):  # a one-process store: not rebuilt as a cluster's
            raise StoreError(f"{root}: holds a single-process store, not a cluster's: open it without workers "
                             "(or give the workers another folder)")
        return None
    try:
        with open(path, encoding="utf-8") as f:
            d = json.load(f)
        if not isinstance(d, dict):
            raise ValueError("not a JSON object")
        w = d.get("workers")
        if type(w) is not int or w < 1 or not isinstance(d.get("plan"), str):
            raise ValueError("missing or bad fields")
        plan = ShardPlan.from_json(d["plan"])
        if plan.workers != w:
            raise ValueError(f"its plan is for {plan.workers} workers, not {w}")
        d["plan_obj"] = plan
        return d
    except Exception as exc:  # damaged: any field or plan that does not parse
        raise StoreError(f"{path}: not a readable cluster file ({type(exc).__name__}: {first_line(exc)})") from None


def _default_workers(backend: str, address: str | None, gpus: float) -> int:
    if backend == "local":
        return 1
    import ray

    start_ray(address)
    res = ray.cluster_resources()
    n = res.get("GPU", 0) if gpus else res.get("CPU", 1)
    return max(1, int(n))


def _same_model(be: Any) -> None:
    """Refuse workers whose models differ past the first step (their fingerprints, hashes of the
    first-step table, agree): the tables along :data:`~arenum.exact.store.PROBES` paths drawn from
    worker 0's model (a fresh seed each time) are hashed on every worker and compared. A model that
    differs from worker 0's at tables that a path drawn from worker 0's model meets with probability
    ``q`` passes with probability at most ``(1 - q) ** PROBES``."""
    seed = int(np.random.SeedSequence().entropy % (1 << 62))
    prefixes = be.call(0, "probe_prefixes", PROBES, seed)
    digests = be.map("probe_digest", [(prefixes,)] * be.n)
    for j, dg in enumerate(digests[1:], 1):
        if dg != digests[0]:
            raise ValueError(f"worker {j} loaded another model than worker 0: their first steps agree but their "
                             f"tables differ along {PROBES} paths drawn from worker 0's model (give each the same "
                             "model, or a ModelSpec / fingerprint= naming it)")
