"""The two bounded caches of log-prob rows in front of :class:`CountTables` rows.

Rows are cached by context (the last order-1 token ids) and by deepest observed suffix
``(depth, context id)``, which many contexts share.  Every row is a pure function of its context,
so a cache miss, an eviction or a clear never changes an answer.
"""
from __future__ import annotations

from itertools import repeat
from operator import is_
from typing import Any

import numpy as np

from .tables import CountTables

__all__ = ["RowCache"]


class _Recent:
    """A bounded cache that keeps the recently used entries: two generations of ``maxsize // 2``
    (one, for ``maxsize`` 1). A hit in the current generation costs one dict lookup (no reordering);
    a hit in the previous one moves the entry to the current; when the current is full it becomes
    the previous, and what the previous held is dropped. At most ``maxsize`` entries."""

    __slots__ = ("_new", "_old", "_cap", "_maxsize")

    def __init__(self, maxsize: int) -> None:
        self._new: dict = {}
        self._old: dict = {}
        self.maxsize = maxsize

    @property
    def maxsize(self) -> int:
        return self._maxsize

    @maxsize.setter
    def maxsize(self, value: int) -> None:
        self._maxsize = value
        self._cap = max(1, value // 2)
        self.clear()

    def get(self, key: Any) -> Any:
        val = self._new.get(key)
        if val is None:
            val = self._old.pop(key, None)
            if val is not None:
                self.put(key, val)
        return val

    def get_many(self, keys: list) -> tuple[list, list[int]]:
        """``([get(k) for k in keys], positions of the misses)``; a batch of hits in the current
        generation costs one C-level pass."""
        vals = list(map(self._new.get, keys))
        if not any(map(is_, vals, repeat(None))):
            return vals, []
        miss = []
        get = self.get
        for i, v in enumerate(vals):
            if v is None:
                v = vals[i] = get(keys[i])
                if v is None:
                    miss.append(i)
        return vals, miss

    def put(self, key: Any, val: Any) -> None:
        new = self._new
        if len(new) >= self._cap and key not in new:  # full: the current becomes the previous
            self._old = new if self._maxsize >= 2 else {}
            new = self._new = {}
        new[key] = val

    def clear(self) -> None:
        self._new = {}
        self._old = {}

    def __len__(self) -> int:
        return len(self._new) + len(self._old)


class RowCache:
    """Rows of :meth:`CountTables.rows`, cached; ``maxsize`` rows per cache."""

    def __init__(self, tables: CountTables, maxsize: int) -> None:
        self._tables = tables
        self._row_cache = _Recent(maxsize)  # (depth, ctx id) -> read-only log-prob row
        self._ctx_cache = _Recent(maxsize)  # last order-1 token ids -> same row object

    @property
    def maxsize(self) -> int:
        return self._row_cache.maxsize

    @maxsize.setter
    def maxsize(self, value: int) -> None:
        self._row_cache.maxsize = value
        self._ctx_cache.maxsize = value
        self.clear()

    def clear(self) -> None:
        self._row_cache.clear()
        self._ctx_cache.clear()

    def get(self, ctx: tuple) -> np.ndarray | None:
        """The cached row of one context, or None."""
        return self._ctx_cache.get(ctx)

    def rows(self, ctxs: list[tuple]) -> list[np.ndarray]:
        """Read-only log-prob rows for contexts (each at most order-1 most recent token ids)."""
        cache = self._ctx_cache
        rows, miss = cache.get_many(ctxs)
        if not miss:
            return rows
        # Distinct missing contexts, resolved together.
        uniq: dict[tuple, int] = {}
        for i in miss:
            uniq.setdefault(ctxs[i], len(uniq))
        ukeys = list(uniq)
        depth, path = self._tables.walk(ukeys)
        # Rows are cached per deepest matched context (depth, id): many contexts share one.
        row_cache = self._row_cache
        R = len(ukeys)
        rkeys = list(zip(depth.tolist(), path[np.arange(R), depth].tolist()))
        found: list = [row_cache.get(key) for key in rkeys]
        todo: dict[tuple[int, int], int] = {}  # uncached (depth, id) -> first row that has it
        for j, r in enumerate(found):
            if r is None:
                todo.setdefault(rkeys[j], j)
        if todo:
            if len(todo) == R:
                new = self._tables.rows(depth, path)
            else:
                sel = np.fromiter(todo.values(), dtype=np.int64, count=len(todo))
                new = self._tables.rows(depth[sel], path[sel])
            fresh = dict(zip(todo, new))
            for key, r in fresh.items():
                row_cache.put(key, r)
            found = [fresh[key] if r is None else r for key, r in zip(rkeys, found)]
        for c, r in zip(ukeys, found):
            cache.put(c, r)
        for i in miss:
            rows[i] = found[uniq[ctxs[i]]]
        return rows

