"""Where the workers run: in this process (``LocalBackend``) or as Ray actors (``RayBackend``).

Both run :class:`~arenum.distributed.worker.ShardWorker` methods by name: ``call`` one worker,
``map`` every worker (in parallel on Ray) and ``map_some`` a few. A failure in any worker is raised
after every worker of that call has stopped, as the worker's own exception (never wrapped), so the
coordinator's state is never half-updated. Ray actors are restarted when they die
(``max_restarts=-1``) and the call in flight is retried on the new actor (``max_task_retries=-1``),
which reopens its store: no saved forward is paid again.
"""
from __future__ import annotations

import logging
import os
from typing import Any, Callable

from ..errors import StoreError, WorkerError
from .worker import ShardWorker

__all__ = ["LocalBackend", "RayBackend", "WorkerError", "start_ray"]


def start_ray(address: str | None) -> bool:
    """Join ``address`` (or start a local instance) unless this process already runs Ray; whether it
    started one."""
    import ray

    if ray.is_initialized():
        return False
    logging.getLogger("ray").setLevel(logging.ERROR)  # no start-up chatter on the user's stderr
    ray.init(address=address, include_dashboard=False, log_to_driver=False, configure_logging=False)
    return True


class LocalBackend:
    """Workers in this process, called one after the other (tests, one worker, debugging)."""

    kind = "local"

    def __init__(self, factory: Callable[[], Any], n: int, stores: list[str | None], fingerprint: str | None) -> None:
        self.workers = [ShardWorker(factory, j, stores[j], fingerprint) for j in range(n)]
        self.n = n

    def call(self, j: int, method: str, *args: Any) -> Any:
        return getattr(self.workers[j], method)(*args)

    def map(self, method: str, args: list[tuple]) -> list[Any]:
        return _gather([lambda w=w, a=a: getattr(w, method)(*a) for w, a in zip(self.workers, args)])

    def map_some(self, method: str, args: dict[int, tuple]) -> dict[int, Any]:
        return {j: self.call(j, method, *a) for j, a in args.items()}

    def pids(self) -> list[int]:
        return [os.getpid()] * self.n

    def close(self, cut_tables: bool = True) -> None:
        for w in self.workers:
            w.close(cut_tables)


class RayBackend:
    """Workers as Ray actors (one model replica each). ``address=None`` joins the Ray instance this
    process already runs or starts a local one sized to the machine; otherwise it joins ``address``."""

    kind = "ray"

    def __init__(self, factory: Callable[[], Any], n: int, stores: list[str | None], fingerprint: str | None, *,
                 address: str | None = None, num_cpus: float | None = None, num_gpus: float = 0.0) -> None:
        self.ray, num_cpus = ray_placement(n, num_cpus, num_gpus, address)
        ray = self.ray
        actor = ray.remote(ShardWorker).options(max_restarts=-1, max_task_retries=-1, num_cpus=num_cpus,
                                                num_gpus=num_gpus)
        self.n = n
        self.actors = [actor.remote(factory, j, stores[j], fingerprint) for j in range(n)]
        try:
            for attempt in range(_START_TRIES):  # every worker built its model, or the first one's error is raised
                errs: dict[int, Exception] = {}
                for j, ref in enumerate([a.ping.options(max_task_retries=0).remote() for a in self.actors]):
                    try:
                        self._get(ref)
                    except Exception as exc:
                        errs[j] = exc
                if not errs:
                    break
                # an actor the cluster cancelled before it ran (a busy machine) is started again, alone
                # (the others keep their stores open); a worker whose own constructor failed is not
                if attempt + 1 == _START_TRIES or not all(isinstance(e, WorkerError) and _NEVER_RAN in str(e)
                                                          for e in errs.values()):
                    raise errs[min(errs)]
                for j in errs:
                    ray.kill(self.actors[j], no_restart=True)
                    self.actors[j] = actor.remote(factory, j, stores[j], fingerprint)
        except BaseException:
            for a in self.actors:
                ray.kill(a, no_restart=True)
            raise

    def _get(self, ref: Any) -> Any:
        ray = self.ray
        try:
            return ray.get(ref)
        except ray.exceptions.RayTaskError as exc:
            cause = getattr(exc, "cause", None)
            if isinstance(cause, BaseException):
                raise cause from None
            raise WorkerError(first_line(exc)) from None
        except ray.exceptions.RayActorError as exc:
            raise _start_error(exc) from None

    def call(self, j: int, method: str, *args: Any) -> Any:
        return self._get(getattr(self.actors[j], method).remote(*args))

    def map(self, method: str, args: list[tuple]) -> list[Any]:
        refs = [getattr(a, method).remote(*x) for a, x in zip(self.actors, args)]
        return _gather([lambda r=r: self._get(r) for r in refs])

    def map_some(self, method: str, args: dict[int, tuple]) -> dict[int, Any]:
        refs = {j: getattr(self.actors[j], method).remote(*a) for j, a in args.items()}
        return {j: self._get(r) for j, r in refs.items()}

    def pids(self) -> list[int]:
        return self.map("ping", [()] * self.n)

    def close(self, cut_tables: bool = True) -> None:
        try:
            self.map("close", [(cut_tables,)] * self.n)
        finally:
            for a in self.actors:
                self.ray.kill(a, no_restart=True)
            self.actors = []


MAX_WORKERS_PER_CPU = 16
"""Workers sharing one CPU at most (each holds a model replica)."""


def placeable(n: int, num_cpus: float | None, num_gpus: float, res: dict) -> float:
    """The CPUs of each of ``n`` actors the cluster (resources ``res``) can place now: ``num_cpus``,
    or by default one each, shared when there are more workers than CPUs. ``ValueError`` (one line)
    for what it cannot hold: Ray would keep the actors pending, without a word, for ever."""
    cpus, gpus = float(res.get("CPU", 0.0)), float(res.get("GPU", 0.0))
    if num_cpus is None:
        if n > MAX_WORKERS_PER_CPU * max(cpus, 1.0):
            raise ValueError(f"{n} workers on a Ray cluster of {cpus:g} CPUs: at most {MAX_WORKERS_PER_CPU} a CPU "
                             "(each holds a model replica)")
        num_cpus = min(1.0, cpus / n) if cpus else 1.0
    elif n * num_cpus > cpus + 1e-9:
        raise ValueError(f"{n} workers of {num_cpus:g} CPUs each need {n * num_cpus:g} CPUs; the Ray cluster has "
                         f"{cpus:g} (give fewer workers or num_cpus_per_worker)")
    if num_gpus and n * num_gpus > gpus + 1e-9:
        raise ValueError(f"{n} workers of {num_gpus:g} GPUs each need {n * num_gpus:g} GPUs; the Ray cluster has "
                         f"{gpus:g} (give fewer workers or num_gpus_per_worker)")
    return num_cpus


def ray_placement(n: int, num_cpus: float | None, num_gpus: float, address: str | None) -> tuple[Any, float]:
    """``(ray, the CPUs of each actor)``: Ray imported (a one-line ``ImportError`` without it), this
    process joined to its cluster (:func:`start_ray`), and :func:`placeable` checked there."""
    try:
        import ray
    except ImportError:
        raise ImportError("workers on Ray need the ray package: pip install 'arenum[ray]'") from None
    start_ray(address)
    return ray, placeable(n, num_cpus, num_gpus, ray.cluster_resources())


_START_TRIES = 3  # starts of the workers when the cluster cancels an actor before it runs
_NEVER_RAN = "cancelled before it started"  # Ray's words for that


def _gather(calls: list[Callable[[], Any]]) -> list[Any]:
    """Every call's result; the first failure is raised after all have run (every worker stops in a
    known state)."""
    out, err = [], None
    for c in calls:
        try:
            out.append(c())
        except Exception as exc:
            out.append(None)
            err = err or exc
    if err is not None:
        raise err
    return out


def first_line(exc: BaseException) -> str:
    lines = [ln for ln in str(exc).splitlines() if ln.strip()]
    return lines[-1] if lines else type(exc).__name__


_KNOWN = {"StoreError": StoreError, "FileNotFoundError": FileNotFoundError, "ValueError": ValueError,
          "TypeError": TypeError, "OSError": OSError, "ImportError": ImportError, "KeyError": KeyError}


def _start_error(exc: BaseException) -> BaseException:
    """A dead actor's error: the worker's own exception type and message when its constructor
    raised one of the usual ones (Ray passes it only as text), else a :class:`WorkerError`."""
    reason = _actor_reason(exc)
    name, _, msg = reason.partition(": ")
    cls = _KNOWN.get(name.rsplit(".", 1)[-1])
    if cls is not None and getattr(exc, "actor_init_failed", False) and msg:
        return cls(f"a worker could not start: {msg}")
    return WorkerError(f"a worker could not start or died: {reason}")


def _actor_reason(exc: BaseException) -> str:
    """The worker's own error when its constructor raised (the model could not be loaded)."""
    text = str(exc)
    for ln in reversed(text.splitlines()):
        ln = ln.strip()
        if ln and ("Error" in ln.split(":")[0] or "Exception" in ln.split(":")[0]):
            return ln
    return first_line(exc)
