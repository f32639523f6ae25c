"""Streaming output: ``guesses`` (raw candidates, one per line) and ``slice --jsonl``.

Both read the exact index in chunks, writing and flushing each chunk before the next is built: the
first 256 lines come out after the first small build, so ``arenum guesses pw4.npz | head`` returns at
once, and a reader that goes away (``| head``) ends the command quietly (status 0, no traceback).
The chunks are paced by the reader (:class:`Reader`): before the next chunk is built, the pipe is
given a moment to drain (the unread bytes, ``FIONREAD``), and the next chunk is planned as a quarter
of what the reader has taken, or 32 times its square root when that is less (past 16,384 lines;
at least 256, at most 262,144 lines: :func:`chunk_size`). The exact index is deepened in
ONE round toward that plan (``SeekIndex.ensure_count(need, aim=...)``: the budget read off the
histograms and the counts' growth, as ``threshold`` plans its own rounds), and the chunk is what
that round made, whatever its size: closing in on an exact chunk size took about four rounds a
chunk, each with a fixed cost per level of the tree. So a reader that stops after ``N`` lines has
cost the build of about ``1.25 N`` positions (what ``threshold(N)`` builds, and about a quarter as
much again, planned from the histograms, not a bound: 1.10 N at 10^5, 1.03 N at 10^6), plus the lines its pipe held unread and
at least the first 256; one that has gone is noticed before the next build (``POLLERR``), also
one that read the whole chunk and closes right after (``head -N``: it is given 5 ms). The
order is the exact descending order of every other command (``slice``/``unrank``), chunk boundaries
change nothing. What it does not do: dedupe or filter candidates, or order them by anything but the
model's probability.
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from typing import Any, Callable, Iterator

from .common import CLIError, budget_message, dumps, writing_stdout
from .load import Loaded

FIRST_CHUNK = 256
MAX_CHUNK = 1 << 18
AHEAD = 4  # the next chunk is at most what the reader has taken over this
ROOT_AHEAD = 32  # ... and at most this times the square root of it (chunk_size)


def chunk_size(taken: int) -> int:
    """The next chunk planned after the reader has taken ``taken`` lines: ``taken / AHEAD`` while that
    is less than ``ROOT_AHEAD * sqrt(taken)`` (up to 16,384 lines taken), then that square root rule,
    within :data:`FIRST_CHUNK` .. :data:`MAX_CHUNK`.

    A chunk costs one deepening round (a fixed cost per level of the tree) and its forwards, and a
    reader that stops in the middle of the last chunk has paid for all of it: the share of ``taken``
    planned ahead shrinks as ``taken`` grows (3.2% at 10^6), where a round's fixed cost is small
    against the forwards of even a small share, so the overshoot shrinks with it.

    >>> [chunk_size(t) for t in (0, 1000, 10_000, 100_000, 1_000_000)]
    [256, 256, 2500, 10119, 32000]
    """
    return min(max(min(taken // AHEAD, int(ROOT_AHEAD * math.sqrt(taken))), FIRST_CHUNK), MAX_CHUNK)
DRAIN_SECONDS = 0.05  # how long the pipe is given to drain before the next chunk is sized
GRACE_SECONDS = 0.005  # once drained, how long a reader is given to close before the next chunk is built


class Reader:
    """What the process reading ``out`` has taken: the lines written, less those whose bytes are
    still unread in the pipe (``FIONREAD``; a file or a terminal reads as all taken)."""

    def __init__(self, out: Any) -> None:
        try:
            self.fd: int | None = out.fileno()
        except (AttributeError, OSError, ValueError):
            self.fd = None
        self.lines = 0
        self.bytes = 0

    def wrote(self, lines: int, nbytes: int) -> None:
        self.lines += lines
        self.bytes += nbytes

    def _unread(self) -> int:
        import array
        import fcntl
        import termios

        buf = array.array("i", [0])
        try:
            fcntl.ioctl(self.fd, termios.FIONREAD, buf, True)
        except (OSError, ValueError):
            self.fd = None
            return 0
        return max(0, buf[0])

    def _gone(self) -> bool:
        import select

        try:
            p = select.poll()
            p.register(self.fd, select.POLLOUT)
            return any(ev & (select.POLLERR | select.POLLHUP) for _, ev in p.poll(0))
        except (OSError, ValueError, AttributeError):
            return False

    def taken(self, wait: float = DRAIN_SECONDS) -> int:
        """Lines the reader has taken, after up to ``wait`` seconds for the pipe to drain;
        ``BrokenPipeError`` when the reader has gone (the command then ends quietly), also when it
        closes within :data:`GRACE_SECONDS` of taking everything (``head -N`` whose ``N``-th line
        was in the last chunk: without the grace, the next chunk would be built for nobody)."""
        if self.fd is None or not self.bytes:
            return self.lines
        end = time.monotonic() + wait
        while True:
            unread = self._unread()
            if self.fd is None:
                return self.lines
            if unread == 0:  # all read: a reader that had what it wanted (head -N) closes about now
                for pause in (0.0, GRACE_SECONDS):
                    time.sleep(pause)
                    if self._gone():
                        raise BrokenPipeError("the reader has gone")
                return self.lines
            if self._gone():
                raise BrokenPipeError("the reader has gone")
            if time.monotonic() >= end:
                return int(self.lines * (self.bytes - unread) / self.bytes)
            time.sleep(0.002)


def _grower(enum: Any) -> Callable[[int, int | None], int] | None:
    """``grow(need, aim)``: deepen ``enum``'s exact index until it holds at least ``need`` sequences,
    planned for about ``aim`` (one round, mostly: :meth:`~arenum.exact.SeekIndex.ensure_count`'s
    ``aim``), and return how many it holds; ``None`` for an enumerable without a seek index."""
    seek_index = getattr(enum, "seek_index", None)
    if seek_index is None:
        return None
    seek = seek_index()
    if not getattr(seek, "exact_order", False) or not hasattr(seek, "ensure_count"):
        return None
    return lambda need, aim: seek.ensure_count(need, fail_fast=True, aim=aim).N


def _grown(grow: Callable[[int, int | None], int], i: int, aim: int, capped: list) -> int:
    """``grow(i + 1, aim)``; where that round passes a cap (``--max-forwards``), the index closes in on
    the next line alone instead (``aim`` dropped, as ``slice`` would), so that the stream gets as far
    as the cap allows before it stops; ``capped`` (a one-item list) keeps the stream there."""
    from ..errors import BudgetExceeded

    if not capped[0]:
        try:
            return grow(i + 1, aim)
        except BudgetExceeded:
            capped[0] = True
    return grow(i + 1, None)


def chunks(m: Loaded, start: int, count: int | None, taken: Callable[[], int] | None = None
           ) -> Iterator[list[tuple[tuple, float]]]:
    """Lists of ``(sequence, log_prob)`` at ranks ``start, start+1, ...`` (``count`` of them, or to the
    end of the support), each read with one ``slice``; a cap stops it with a :class:`CLIError` that
    says how far it got. Each chunk after the first (:data:`FIRST_CHUNK`) is planned as a quarter of
    what ``taken()`` (the lines the reader has taken so far; by default all those yielded) reports,
    within :data:`FIRST_CHUNK` .. :data:`MAX_CHUNK`. The index is deepened in one round toward that
    size (:func:`_grower`), and the chunk is what the round made (at least one line, at most
    :data:`MAX_CHUNK`): the rounds are not spent closing in on an exact chunk size. Past a cap the
    index closes in on one line at a time (:func:`_grown`), so the stream stops where ``slice`` would."""
    from ..errors import BudgetExceeded

    grow = _grower(m.enum)
    capped = [False]
    i, n, size = start, 0, FIRST_CHUNK
    while count is None or n < count:
        if n:
            size = chunk_size(taken() if taken is not None else n)
        want = size if count is None else min(size, count - n)
        try:
            if grow is not None and (n or capped[0]):  # the first chunk is exactly FIRST_CHUNK (the first line's time)
                have = _grown(grow, i, i + want, capped)  # fewer than i + 1: the support ends at i
                # what the round made is served, past the plan too (paid for), within the caps
                want = max(1, min(have - i, MAX_CHUNK, count - n if count is not None else MAX_CHUNK))
            items = m.enum.slice(i, want)
        except BudgetExceeded as exc:
            if not n and grow is not None and not capped[0]:  # the first chunk past the cap: the lines it allows
                capped[0] = True
                continue
            msg = budget_message(exc)
            raise CLIError(f"stopped at rank {i:,} after {n:,} candidates: {msg} (raise --max-forwards "
                           f"to go deeper)") from None
        if items:
            yield items
        n += len(items)
        i += len(items)
        if len(items) < want:
            return


def _write(out: Any, data: bytes) -> None:
    with writing_stdout():
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
    reader = Reader(out)
    left_out = written = 0
    for items in chunks(m, args.start, args.count, lambda: reader.taken()):
        written += len(items)
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
        reader.wrote(len(items), len(data))
    notes = [f"{left_out:,} candidates left out: not encodable in {args.encoding}"] if left_out else []
    if not written and args.count != 0:
        notes.append(f"no candidates: --start {args.start:,} is past the end of the support")
    return Output(None, [], notes=notes)


def stream_jsonl(m: Loaded, start: int, k: int, record: Callable[[int, tuple, float], dict]) -> int:
    """``slice START K --jsonl``: one JSON object per sequence (``record(rank, seq, lp)``), streamed;
    how many."""
    out = sys.stdout.buffer
    reader = Reader(out)
    i = start
    for items in chunks(m, start, k, lambda: reader.taken()):
        text = "".join(dumps(record(i + j, seq, lp)) + "\n" for j, (seq, lp) in enumerate(items))
        i += len(items)
        data = text.encode("utf-8", "surrogatepass")
        _write(out, data)
        reader.wrote(len(items), len(data))
    return i - start
