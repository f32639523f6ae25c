"""Lower bounds on the forwards an exact answer needs, so that a query that cannot fit under
``max_prefixes`` fails at once instead of after building up to the cap, and the one hint every budget
error gives (how to go deeper, or how to get an estimate instead).

Only bounds that are proofs, from what the tree has seen so far (it does not fetch anything):

- the ``n``-th most probable sequence has probability ``<= 1/n``, so a position query needing ``n``
  sequences needs the budget ``log2(n)`` bits at least, hence every prefix known within ``log2(n)``
  bits, and, when the support is smaller than ``n``, the whole support (every prefix known at all);
- in a terminating support every complete sequence is the EOS child of its own live prefix, so ``n``
  sequences need ``n`` distinct fetched prefixes (or, again, the whole support when it has fewer).

What it does not do: estimate (extrapolated growth is the seek index's job, and not a proof).
"""
from __future__ import annotations

import math
from typing import Callable

__all__ = ["BUDGET_HINT", "position_floor", "position_beyond_message", "fetch_round", "ROUND_ENTRY_BYTES",
           "EXPAND_CHILD_BYTES", "keep_whole", "WHOLE_WIDTH", "TIMED_HEAD_ROWS"]

ROUND_ENTRY_BYTES = 96
"""Bytes a fetch round holds for a while per table entry it reads (the model's output, the sorted
heads, their scores, masks and kept copies, the record): counted against ``max_bytes`` with the round."""
EXPAND_CHILD_BYTES = 128
"""Bytes an expansion adds per child it makes: the child's columns (65) and what is built aside for a while."""
_ROUND_SHARE = 32
"""A fetch round's temporaries stay under ``max_bytes / _ROUND_SHARE``."""

BUDGET_HINT = ("raise max_prefixes (command line: --max-forwards) to build deeper, or set exact_limit "
               "(--exact-limit) for a Monte Carlo estimate with a confidence interval")
"""Appended to every budget error of a position query: what to change (API and command-line names)."""


def position_floor(n: int, *, terminating: bool, known_prefixes: Callable[[float], int]) -> int:
    """Forwards (live prefixes) an exact answer holding the ``n`` most probable sequences needs, at
    least: ``known_prefixes(bits)`` is the number of prefixes of ``bits`` or fewer seen so far.

    >>> seen = lambda bits: 10 if bits == math.inf else 4
    >>> position_floor(1000, terminating=True, known_prefixes=seen), position_floor(1000, terminating=False, known_prefixes=seen)
    (10, 4)
    """
    if n <= 1:
        return 1
    floor = int(known_prefixes(math.log2(n)))
    if terminating:
        floor = max(floor, min(int(n), int(known_prefixes(math.inf))))
    return floor


def fetch_round(batch: int, widest: int, max_bytes: int | None, entries: int = 1 << 18) -> int:
    """Prefixes per round of a fetch: about ``entries`` table entries (fresh large temporaries cost more
    in first touches than the work done on them), at most ``max_bytes / _ROUND_SHARE`` of temporaries
    (:data:`ROUND_ENTRY_BYTES` per entry), at least one model batch.

    >>> fetch_round(64, 64, None), fetch_round(64, 64, 64 << 20), fetch_round(64, 50_000, 64 << 20)
    (4096, 341, 64)
    """
    if max_bytes is not None:
        entries = min(entries, max(1, max_bytes // (_ROUND_SHARE * ROUND_ENTRY_BYTES)))
    return max(batch, 1, entries // max(widest, 1))


WHOLE_WIDTH = 1024
"""Tables up to this wide are stored whole while they fit ``table_bytes``."""
_KEEP_ALL_ENTRIES = 1 << 20  # a tree holding fewer entries stores every table whole
_SORT_SECONDS_PER_ENTRY = 5e-9  # rough cost of sorting a table, per entry and bit of its width
TIMED_HEAD_ROWS = 256
"""Prefixes fetched for heads before a forward's time is trusted (a small round's time is mostly
the call's own overhead): until then wide tables get heads."""


def keep_whole(entries: int, widest: int, table_bytes: int | None, entry_bytes: int,
               head_seconds: float | None) -> bool:
    """Store the next tables whole (no prefix is then ever scored twice)? ``entries``: the entries the
    tree would hold with them; ``widest``: the widest table seen; ``head_seconds``: what a prefix
    costs the tree on rounds that asked for heads (the model's own time, timed; ``None`` before
    :data:`TIMED_HEAD_ROWS` prefixes were).

    Tiny trees: always. Otherwise only while ``entries * entry_bytes`` fits ``table_bytes``, and for
    tables wider than :data:`WHOLE_WIDTH` only when a forward costs at least this rule's estimate of
    sorting a whole table (what keeping one costs; 5 ns an entry and bit of its width: about 4 ms for
    a 50,257-entry table, which takes 0.6 MB to hold, more than a small transformer's forward on a CPU). A wide table is never judged by rounds
    that fetched whole tables (their callbacks copy every entry out), so the rounds past the tiny
    tree ask for heads until :data:`TIMED_HEAD_ROWS` prefixes have been timed.

    >>> keep_whole(1000, 50_257, None, 12, None), keep_whole(2 << 20, 50_257, None, 12, None)
    (True, False)
    >>> keep_whole(2 << 20, 50_257, None, 12, 0.002), keep_whole(2 << 20, 50_257, None, 12, 0.01)
    (False, True)
    >>> keep_whole(2 << 20, 64, None, 12, None), keep_whole(2 << 20, 64, 1 << 20, 12, None)
    (True, False)
    """
    if entries < _KEEP_ALL_ENTRIES:
        return True
    if table_bytes is not None and entries * entry_bytes > table_bytes:
        return False
    if widest <= WHOLE_WIDTH:
        return True
    return head_seconds is not None and head_seconds >= _SORT_SECONDS_PER_ENTRY * widest * math.log2(widest)


def position_beyond_message(n: int, floor: int, cap: int) -> str:
    """The error of a position query that provably needs more than ``cap`` live prefixes."""
    count = f"{n:,}" if n < 10**15 else f"{float(n):.4g}"
    return (f"the {count} most probable sequences need at least {floor:,} live prefixes (forwards) "
            f"> max_prefixes={cap:,}, known before building them; {BUDGET_HINT}")
