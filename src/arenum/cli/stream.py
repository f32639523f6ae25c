"""Streaming output: ``guesses`` (raw candidates, one per line) and ``slice --jsonl``.

Both read the exact index in chunks that grow from 256 to 262,144 positions, writing and flushing
each chunk before the next is built: the first lines come out after the first small build, so
``arenum guesses pw4.npz | head`` returns at once, and a reader that goes away (``| head``) ends the
command quietly (status 0, no traceback). The order is the exact descending order of every other
command (``slice``/``unrank``), chunk boundaries change nothing. What it does not do: dedupe or
filter candidates, or order them by anything but the model's probability.
"""
from __future__ import annotations

import argparse
import sys
from typing import Any, Callable, Iterator

from .common import CLIError, budget_message, dumps
from .load import Loaded

FIRST_CHUNK = 256
MAX_CHUNK = 1 << 18


def chunks(m: Loaded, start: int, count: int | None) -> Iterator[list[tuple[tuple, float]]]:
    """Lists of ``(sequence, log_prob)`` at ranks ``start, start+1, ...`` (``count`` of them, or to the
    end of the support), each read with one ``slice``; a cap stops it with a :class:`CLIError` that
    says how far it got."""
    from ..errors import BudgetExceeded

    i, n, size = start, 0, FIRST_CHUNK
    while count is None or n < count:
        want = size if count is None else min(size, count - n)
        try:
            items = m.enum.slice(i, want)
        except BudgetExceeded as exc:
            msg = budget_message(exc)
            raise CLIError(f"stopped at rank {i:,} after {n:,} candidates: {msg} (raise --max-forwards "
                           f"to go deeper)") from None
        if items:
            yield items
        n += len(items)
        i += len(items)
        if len(items) < want:
            return
        size = min(size * 4, MAX_CHUNK)


def _write(out: Any, data: bytes) -> None:
    out.write(data)
    out.flush()


def cmd_guesses(args: argparse.Namespace, m: Loaded) -> Any:
    """Raw candidates in exact order, one per line in ``--encoding`` (UTF-8 by default), streamed; no
    header, no quoting. A candidate the encoding cannot write is left out and counted (a cracker
    hashing those bytes could never match it); the count is reported on stderr at the end."""
    import codecs

    from .common import Output

    try:
        enc = codecs.lookup(args.encoding).name
    except LookupError:
        raise CLIError(f"unknown --encoding {args.encoding!r} (e.g. utf-8, latin-1, cp1252)") from None
    out = sys.stdout.buffer
    left_out = 0
    for items in chunks(m, args.start, args.count):
        lines = [m.display(seq) for seq, _ in items]
        bad = next((s for s in lines if "\n" in s or "\r" in s), None)
        if bad is not None:
            raise CLIError(f"candidate {bad!r} holds a line break; it cannot be written one per line")
        try:
            data = ("\n".join(lines) + "\n").encode(enc)
        except UnicodeEncodeError:
            parts = []
            for s in lines:
                try:
                    parts.append(s.encode(enc) + b"\n")
                except UnicodeEncodeError:
                    left_out += 1
            data = b"".join(parts)
        _write(out, data)
    notes = [f"{left_out:,} candidates left out: not encodable in {args.encoding}"] if left_out else []
    return Output(None, [], notes=notes)


def stream_jsonl(m: Loaded, start: int, k: int, record: Callable[[int, tuple, float], dict]) -> None:
    """``slice START K --jsonl``: one JSON object per sequence (``record(rank, seq, lp)``), streamed."""
    out = sys.stdout.buffer
    i = start
    for items in chunks(m, start, k):
        text = "".join(dumps(record(i + j, seq, lp)) + "\n" for j, (seq, lp) in enumerate(items))
        i += len(items)
        _write(out, text.encode("utf-8", "surrogatepass"))
