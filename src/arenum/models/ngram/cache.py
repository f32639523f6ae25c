"""The two bounded LRU caches of log-prob rows in front of :class:`CountTables` rows.

Rows are cached by context (the last order-1 token ids) and by deepest observed suffix
``(depth, context id)``, which many contexts share.  Every row is a pure function of its context,
so a cache miss, an eviction or a clear never changes an answer.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Any

import numpy as np

from .tables import CountTables

__all__ = ["RowCache"]


class _LRU:
    __slots__ = ("_d", "maxsize")

    def __init__(self, maxsize: int) -> None:
        self._d: OrderedDict = OrderedDict()
        self.maxsize = maxsize

    def get(self, key: Any) -> Any:
        d = self._d
        val = d.get(key)
        if val is not None:
            d.move_to_end(key)
        return val

    def put(self, key: Any, val: Any) -> None:
        d = self._d
        d[key] = val
        d.move_to_end(key)
        if len(d) > self.maxsize:
            d.popitem(last=False)

    def clear(self) -> None:
        self._d.clear()

    def __len__(self) -> int:
        return len(self._d)


class RowCache:
    """Rows of :meth:`CountTables.rows`, cached; ``maxsize`` rows per cache."""

    def __init__(self, tables: CountTables, maxsize: int) -> None:
        self._tables = tables
        self._row_cache = _LRU(maxsize)  # (depth, ctx id) -> read-only log-prob row
        self._ctx_cache = _LRU(maxsize)  # last order-1 token ids -> same row object

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
        rows: list = [cache.get(c) for c in ctxs]
        miss = [i for i, r in enumerate(rows) if r is None]
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

