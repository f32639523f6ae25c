"""Best-first listing of a model's support in exact descending score order.

A heap of candidates keyed by ``(-score, length, table positions)``; popping a candidate pushes only
its next sibling and, for a prefix, its first child (tables are sorted), so listing ``k`` sequences
costs ``O(k)`` heap operations and one forward per prefix popped. The key is the library's one
order: descending score, ties by length, then lexicographic table positions, the same order as
``unrank``.

:func:`listing` is what ``enumerator()`` runs: the exact index read in growing chunks (each a
``slice``), best-first only past a cap. This module does not count: use the index for ranks beyond
the head.
"""
from __future__ import annotations

import heapq
from itertools import islice
from typing import Any, Callable, Iterator

import numpy as np

from ..support import Support

__all__ = ["best_first", "listing"]

FIRST_CHUNK = 64  # items of the first slice a listing reads
MAX_CHUNK = 1 << 16  # slices double up to this many items


def best_first(
    table: Callable[[tuple], tuple[np.ndarray, np.ndarray]],
    support: Support,
) -> Iterator[tuple[tuple, float]]:
    """Yield ``(id sequence, score)`` of ``support`` in exact descending order (ties as above).

    ``table(prefix_ids)`` returns the sorted table ``(ids, logps)`` of a prefix.
    """
    branch_cap = support.branch_cap
    # heap item: (-score, length, positions, ids, parent_table_key)
    # a "child" candidate is (parent ids, position j) materialized lazily.
    heap: list[tuple[float, int, tuple, tuple, Any]] = []
    root: tuple = ()

    def push_child(prefix: tuple, positions: tuple, base: float, tab: tuple[np.ndarray, np.ndarray], j: int) -> None:
        ids, lps = tab
        if j >= ids.shape[0] or (branch_cap is not None and j >= branch_cap):
            return
        tok = int(ids[j])
        score = base + float(lps[j])
        seq = prefix + (tok,)
        heapq.heappush(heap, (-score, len(seq), positions + (j,), seq, (prefix, positions, base, tab)))

    is_complete = support.is_complete_ids
    push_child(root, (), 0.0, table(root), 0)
    while heap:
        negs, _, pos, seq, parent = heapq.heappop(heap)
        prefix, ppos, base, tab = parent
        push_child(prefix, ppos, base, tab, pos[-1] + 1)
        score = -negs
        if is_complete(seq):
            yield seq, score
        elif support.can_extend(len(seq)):
            push_child(seq, pos, score, table(seq), 0)


def listing(read: Callable[[int, int], list], at_floor: Callable[[], bool],
            rest: Callable[[], Iterator[tuple[tuple, float]]]) -> Iterator[tuple[tuple, float]]:
    """The whole exact order, lazily: ``read(i, n)`` (a ``slice``: items ``i .. i+n-1``, fewer at
    the end) in chunks of :data:`FIRST_CHUNK` items doubling up to :data:`MAX_CHUNK`, each read when
    the one before has been yielded, so what is built (the tree and index) stays within what the
    items yielded so far and one more chunk need. Where ``read`` raises
    :class:`~arenum.errors.BudgetExceeded` (a cap), or comes back short while ``at_floor()`` (the
    build reached its depth floor, so the order may go on below it), the rest comes from ``rest()``
    (the whole order, best-first: :func:`best_first`) past the items already yielded."""
    from ..errors import BudgetExceeded

    i, size = 0, FIRST_CHUNK
    while True:
        try:
            items = read(i, size)
        except BudgetExceeded:
            break
        yield from items
        i += len(items)
        if len(items) < size:
            if not at_floor():
                return
            break
        size = min(2 * size, MAX_CHUNK)
    yield from islice(rest(), i, None)
