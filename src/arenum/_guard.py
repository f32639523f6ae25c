"""Critical sections and the build lock: what keeps the tree exact under interrupts and threads.

- :func:`deferred_interrupts`: a ``KeyboardInterrupt`` (SIGINT) arriving inside the block is
  delivered when the block ends, so a commit of several arrays happens whole or not at all. Only the
  main thread receives signals; elsewhere the block is a plain block.
- :func:`locked`: a method decorator taking ``self._lock`` (a re-entrant lock) unless the thread
  already holds it, so one thread builds or deepens at a time, readers never see a half-built
  level, and a query takes the lock once, at its entry.

This module knows nothing of trees or models.
"""
from __future__ import annotations

import functools
import signal
import threading
from contextlib import contextmanager
from typing import Any, Callable, Iterator, TypeVar

__all__ = ["deferred_interrupts", "held", "locked"]

F = TypeVar("F", bound=Callable[..., Any])


@contextmanager
def deferred_interrupts() -> Iterator[None]:
    """Run the block with SIGINT held back; re-deliver it (``KeyboardInterrupt``) when it ends."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    try:
        old = signal.getsignal(signal.SIGINT)
    except (ValueError, OSError):  # pragma: no cover - no signal support here
        yield
        return
    if old is not signal.default_int_handler:
        yield  # someone else handles SIGINT: leave it alone
        return
    got: list[Any] = []

    def hold(signum: int, frame: Any) -> None:
        got.append((signum, frame))

    late: list[BaseException] = []
    try:  # installed inside the try: an exception landing right after still restores the handler
        signal.signal(signal.SIGINT, hold)
        yield
    finally:
        while True:  # restored whatever lands here (another signal handler raising): raised after
            try:
                signal.signal(signal.SIGINT, old)
                break
            except BaseException as e:  # noqa: BLE001 - re-raised below
                late.append(e)
        if late:
            raise late[0]
        if got:
            raise KeyboardInterrupt


@contextmanager
def held(lock: Any) -> Iterator[None]:
    """Run the block holding ``lock`` (a re-entrant lock), taking it only if this thread does not
    hold it yet: the rule of :func:`locked`, for a block."""
    if lock._is_owned():
        yield
        return
    with lock:
        yield


def locked(fn: F) -> F:
    """Decorate a method so that it runs holding ``self._lock`` (a re-entrant lock).

    The lock is taken only by a thread that does not hold it yet: a query takes it once, at its
    entry (the facade), and every locked method it calls below runs under that one hold; a
    low-level object used on its own (a :class:`~arenum.exact.seek.SeekIndex`) takes it itself.
    """

    @functools.wraps(fn)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        lock = self._lock  # taken once, by the query's entry; below it, held already (held(), inlined:
        if lock._is_owned():  # a generator-based context per call cost more than many a query)
            return fn(self, *args, **kwargs)
        with lock:
            return fn(self, *args, **kwargs)

    return wrapper  # type: ignore[return-value]
