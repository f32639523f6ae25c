"""The package's own exceptions, in one place (each also exported as ``arenum.<Name>``).

Bad arguments raise builtin exceptions (``TypeError``, ``ValueError``, ``IndexError``) naming the
parameter and the value; the classes here say what a builtin cannot:

- :class:`BudgetExceeded` (a ``RuntimeError``): an exact answer would need more than a configured cap
  (``max_prefixes``, ``max_sequences``, ``max_bytes``, ``exact_limit``) allows; the message names it.
  The queries that can answer past a cap return a bracket or an estimate instead (``docs/core.md``).
- :class:`StoreError` (a ``ValueError``): a store folder that cannot be opened as asked (damaged,
  foreign, newer, locked), in one line (``docs/store.md``).
- :class:`WorkerError` (a ``RuntimeError``): a distributed worker failed outside the model's own
  errors: it could not start, or died for good (``docs/distributed.md``).
- :class:`KernelUnavailable` (an ``ImportError``): the compiled kernels were asked for but numba is
  missing or they do not compile or run here (``docs/core.md``).

This module imports nothing of the package: every layer may raise these.
"""
from __future__ import annotations

__all__ = ["BudgetExceeded", "KernelUnavailable", "StoreError", "WorkerError"]


class BudgetExceeded(RuntimeError):
    """An exact answer would need more than a configured cap allows (the message says which)."""


class StoreError(ValueError):
    """A store that cannot be opened as asked (damaged, foreign, newer, locked); one line."""


class WorkerError(RuntimeError):
    """A worker failed outside the model's own errors (it could not start, or died for good)."""


class KernelUnavailable(ImportError):
    """numba is missing, or the kernels do not compile or run on this machine (the reason is
    in the message); the numpy path is used unless ``numba`` was asked for."""
