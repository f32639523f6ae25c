"""What every part of the command line shares: constants, the user-facing error, reading and
writing files, formatting numbers and tables, and the progress bar."""
from __future__ import annotations

import argparse
import codecs
import json
import math
import os
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence

from .._io import atomic_write
from .._validate import LN2


DEFAULT_MAX_FORWARDS = 5_000_000
DEMO_MAX_FORWARDS = 1_000_000
DEMO_MODEL = "passwords-4gram-kn.npz"
DEMO_STRINGS = ("123456", "dragon", "password1", "iloveyou2", "correcthorse")


class CLIError(Exception):
    """A user-facing error: printed as ``arenum: error: <message>``, exit status 2."""


@dataclass
class Output:
    """What a command prints: a JSON document (or JSON lines) and the readable text."""

    doc: Any
    text: list[str]
    json_lines: bool = False
    errors: list[str] = field(default_factory=list)  # one ``arenum: error:`` line each on stderr
    status: int = 0  # the exit status once printed: 1 when part of a batch failed
    notes: list[str] = field(default_factory=list)  # one ``arenum: note:`` line each on stderr


# --------------------------------------------------------------------------------- input/output
def read_bytes(path: str) -> bytes:
    """The bytes of ``path`` (``'-'``: stdin), or a one-line :class:`CLIError`."""
    where = "stdin" if path == "-" else repr(path)
    try:
        if path == "-":
            return sys.stdin.buffer.read()
        with open(path, "rb") as fh:
            return fh.read()
    except OSError as exc:
        raise CLIError(f"cannot read {where}: {exc.strerror or exc}") from None


DECODE_ERRORS = ("strict", "replace", "skip")


def decode_lines(data: bytes, where: str, *, encoding: str = "utf-8", errors: str = "strict",
                 options: bool = True) -> tuple[list[str], int]:
    """``(lines, bad)``: ``data`` decoded with ``encoding``, split into lines without ``\n``/``\r\n``.

    ``errors``: ``strict`` (an undecodable byte is a :class:`CLIError` naming its offset), ``replace``
    (each undecodable byte becomes U+FFFD) or ``skip`` (a line holding an undecodable byte is dropped).
    ``bad``: the lines that held an undecodable byte (replaced or dropped). ``options``: the command
    has ``--encoding``/``--errors`` (its error names them; else it asks for UTF-8).
    """
    if errors not in DECODE_ERRORS:
        raise CLIError(f"--errors must be one of {', '.join(DECODE_ERRORS)}, got {errors!r}")
    try:
        canon = codecs.lookup(encoding).name
    except LookupError:
        raise CLIError(f"unknown --encoding {encoding!r} (e.g. utf-8, latin-1, cp1252)") from None
    name = "UTF-8" if canon == "utf-8" else encoding
    if canon == "utf-8" and data.startswith(codecs.BOM_UTF8):
        data = data[len(codecs.BOM_UTF8):]
    try:
        text = data.decode(encoding, "strict" if errors == "strict" else "surrogateescape")
    except UnicodeDecodeError as exc:
        hint = ("try --encoding latin-1, or --errors replace|skip" if options
                else "this command reads UTF-8: convert it first")
        raise CLIError(f"{where} is not {name} text (byte {exc.start}; {hint})") from None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    lines = [s[:-1] if s.endswith("\r") else s for s in lines]
    if errors == "strict":
        return lines, 0
    out, bad = [], 0
    for s in lines:
        if any("\udc80" <= c <= "\udcff" for c in s):
            bad += 1
            if errors == "skip":
                continue
            s = "".join("\ufffd" if "\udc80" <= c <= "\udcff" else c for c in s)
        out.append(s)
    return out, bad


def read_lines(path: str, *, skip_blank: bool = False) -> list[str]:
    """Lines of a UTF-8 file (``'-'``: stdin), without their ``\n`` / ``\r\n``; with ``skip_blank``,
    without empty and whitespace-only lines."""
    lines, _ = decode_lines(read_bytes(path), "stdin" if path == "-" else repr(path), options=False)
    return [s for s in lines if s.strip()] if skip_blank else lines


@contextmanager
def writing_stdout() -> Iterator[None]:
    """A write to the standard output that fails (a full disk, a closed device) as a one-line
    :class:`CLIError` saying so; a reader gone away (``BrokenPipeError``) as it is: the command
    line stops quietly."""
    try:
        yield
    except BrokenPipeError:
        raise
    except OSError as exc:
        raise CLIError(f"cannot write the standard output: {exc.strerror or exc}") from None


def check_writable(path: str) -> None:
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise CLIError(f"cannot write {path!r}: folder {folder!r} does not exist")
    if os.path.isdir(path):
        raise CLIError(f"cannot write {path!r}: it is a folder")
    if not os.access(folder, os.W_OK):
        raise CLIError(f"cannot write {path!r}: folder {folder!r} is not writable")
    try:  # a file made and removed there: what a folder that refuses files (say /proc) says, before any work
        fd, tmp = tempfile.mkstemp(prefix=".arenum-check-", dir=folder)
        os.close(fd)
        os.unlink(tmp)
    except OSError as exc:
        raise CLIError(f"cannot write {path!r}: folder {folder!r} refuses new files ({exc.strerror or exc})") from None


def checked_atomic_write(path: str, write: Callable[[str], None]) -> int:
    """``write(tmp)`` into a temp file beside ``path``, then rename it to ``path``; returns bytes."""
    check_writable(path)
    return atomic_write(path, write)


def jsonable(x: Any) -> Any:
    """JSON-safe copy: non-finite floats become ``null``, tuples lists, numpy scalars Python ones."""
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if isinstance(x, bool) or x is None or isinstance(x, str):
        return x
    if hasattr(x, "item") and not isinstance(x, (int, float)):
        x = x.item()
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    return x


def dumps(doc: Any) -> str:
    return json.dumps(jsonable(doc), ensure_ascii=False, allow_nan=False)


def fmt_count(n: Any) -> str:
    """``12,345`` for counts a person reads digit by digit; ``3.076e+14`` past a billion."""
    if isinstance(n, float) and math.isinf(n):
        return "inf"
    if isinstance(n, float) or abs(n) >= 10**9:
        return f"{float(n):.4g}"
    return f"{int(n):,}"


def fmt_point(x: Any) -> str:
    """A point value past the exact budget (a float strictly inside its bracket): ``1,364.7``; past a
    billion as :func:`fmt_count`."""
    if isinstance(x, int) or not math.isfinite(x) or abs(x) >= 10**9:
        return fmt_count(x)
    return f"{x:,.1f}"


def fmt_lp(lp: float) -> str:
    if lp == -math.inf:
        return "-inf"
    if abs(lp) >= 1e12:  # a threshold given far past any sequence: not 300 digits of fixed point
        return f"{lp:.6g} nats = {-lp / LN2:.6g} bits (p = {math.exp(lp):.4g})"
    return f"{lp:.4f} nats = {-lp / LN2:.3f} bits (p = {math.exp(lp):.4g})"


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], right: Sequence[bool] = ()) -> list[str]:
    cells = [[str(h) for h in headers]] + [[str(c) for c in r] for r in rows]
    w = [max(len(r[j]) for r in cells) for j in range(len(headers))]
    out = []
    for r in cells:
        parts = [(r[j].rjust(w[j]) if j < len(right) and right[j] else r[j].ljust(w[j])) for j in range(len(r))]
        out.append("  ".join(parts).rstrip())
    return out


def kv(pairs: Sequence[tuple[str, Any]]) -> list[str]:
    w = max(len(k) for k, _ in pairs)
    return [f"{k.ljust(w)}  {v}" for k, v in pairs]


# -------------------------------------------------------------------------------------- progress
def _bar_text(d: dict, rate: float | None = None) -> str:
    """``level 4 1,024/8,000, target budget 20.6 bits (>= 398,000 prefixes), ETA 3 s``: the level being
    expanded, the budget this build is heading for, the live prefixes known to lie within it so far (a
    lower bound: more are found as it goes) and the time left for those at the current rate."""
    if d.get("phase") == "certified":  # the finite-state DP past the exact budget (no forwards)
        if not d.get("cells_todo"):  # a step before its first block of cells (tables, kernels, min-plus DP)
            return f"certified DP: {d.get('dp', 'preparing')}"
        return f"certified DP ({d.get('dp', '')}): {int(d['cells_done']):,}/{int(d['cells_todo']):,} score cells"
    if d.get("phase") == "monte carlo":  # draws past the exact budget, one token per level
        text = (f"Monte Carlo: {int(d['draws_done']):,}/{int(d['draws']):,} draws ended, "
                f"level {int(d['level'])}/{int(d['levels'])}")
        return text + (f" ({int(d['rows_done']):,}/{int(d['rows_todo']):,} prefixes)" if "rows_todo" in d else "")
    if "workers" in d:  # a distributed build reports once per round, every worker done
        text = f"{int(d['workers'])} workers, round {int(d.get('round', 0))}"
    else:
        text = f"level {d.get('level', 0)} {int(d.get('level_done', 0)):,}/{int(d.get('level_todo', 0)):,}"
    goal = float(d.get("target_bits", d.get("keep_bits", 0.0)))
    if math.isfinite(goal):
        text += f", target budget {goal:.1f} bits"
    known, done = d.get("known_prefixes"), int(d.get("prefixes", 0))
    if known is not None and int(known) > done:
        text += f" (>= {int(known):,} prefixes)"
        if rate:
            text += f", ETA {fmt_seconds((int(known) - done) / rate)}"
    return text


def fmt_seconds(s: float) -> str:
    """``42 s``, ``3 min 5 s``, ``2 h 10 min``."""
    s = max(0.0, float(s))
    if s < 60:
        return f"{s:.0f} s"
    if s < 3600:
        return f"{int(s // 60)} min {int(s % 60)} s"
    return f"{int(s // 3600)} h {int(s % 3600 // 60)} min"


class _Rate:
    """Prefixes per second over the current build (for the ETA)."""

    def __init__(self) -> None:
        self.t0: float | None = None
        self.p0 = 0

    def __call__(self, d: dict) -> float | None:
        now, p = time.monotonic(), int(d.get("prefixes", 0))
        if self.t0 is None:
            self.t0, self.p0 = now, p
            return None
        dt = now - self.t0
        return (p - self.p0) / dt if dt > 0.2 and p > self.p0 else None

    def reset(self) -> None:
        self.t0 = None


class _LineBar:
    """A one-line progress display on a terminal: forwards so far, level, budget; redrawn at most
    10 times a second, shown only once a build has run for ``delay`` seconds, erased by ``close``."""

    def __init__(self, stream: Any, delay: float = 0.25) -> None:
        self.stream = stream
        self.width = 0
        self.start: float | None = None
        self.last = 0.0
        self.delay = delay
        self.rate = _Rate()

    def __call__(self, d: dict) -> None:
        now = time.monotonic()
        if self.start is None:
            self.start = now
        rate = self.rate(d)
        if now - self.start < self.delay or now - self.last < 0.1:
            return
        self.last = now
        line = f"arenum: {int(d.get('forwards', 0)):,} forwards ({now - self.start:.1f} s), {_bar_text(d, rate)}"
        self.stream.write("\r" + line + " " * max(0, self.width - len(line)))
        self.stream.flush()
        self.width = len(line)

    def close(self) -> None:
        if self.width:
            self.stream.write("\r" + " " * self.width + "\r")
            self.stream.flush()
        self.width = 0
        self.start = None
        self.rate.reset()


class _TqdmBar:
    """The same through tqdm: one counter of forwards per build (no total: the budget is searched)."""

    def __init__(self, stream: Any, delay: float = 0.25) -> None:
        self.stream = stream
        self.delay = delay
        self.bar = None
        self.rate = _Rate()

    def __call__(self, d: dict) -> None:
        from tqdm import tqdm

        rate = self.rate(d)
        f = int(d.get("forwards", 0))
        if self.bar is None:
            self.bar = tqdm(total=None, initial=f, desc="arenum", unit=" forwards", unit_scale=True, leave=False,
                            file=self.stream, dynamic_ncols=True, mininterval=0.1, delay=self.delay)
        self.bar.set_postfix_str(_bar_text(d, rate), refresh=False)
        self.bar.update(max(0, f - self.bar.n))

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
        self.rate.reset()


def make_progress(quiet: bool, stream: Any = None) -> Any:
    """A progress callback for ``enum.progress`` (with ``.close()``), or ``None`` when off.

    Off with ``quiet`` or when ``stream`` (default stderr) is not a terminal. tqdm when installed,
    else a one-line bar.
    """
    stream = sys.stderr if stream is None else stream
    if quiet:
        return None
    try:
        if not stream.isatty():
            return None
    except (AttributeError, ValueError):
        return None
    try:
        import tqdm  # noqa: F401
    except ImportError:
        return _LineBar(stream)
    return _TqdmBar(stream)


def one_line(exc: BaseException) -> str:
    msg = str(exc).strip()
    if isinstance(exc, KeyError) and len(exc.args) == 1:
        msg = str(exc.args[0])
    first = msg.splitlines()[0] if msg else type(exc).__name__
    return first


_OPTION = {"max_len": "--max-len", "max_prefixes": "--max-forwards", "eos": "--eos", "max_depth": "--max-len"}


def in_cli_words(msg: str) -> str:
    """A library message in the command line's words: ``this enumerable has max_len=12`` becomes
    ``this command has --max-len 12`` (the option to change, not the API's parameter)."""
    import re

    def sub(m: "re.Match[str]") -> str:
        opt = _OPTION.get(m.group(1), "--" + m.group(1).replace("_", "-"))
        return f"this command has {opt} {m.group(2)}"

    from ..exact import READONLY_HINT, WRITER_HINT

    msg = msg.replace(f"{WRITER_HINT}; {READONLY_HINT}", "(another command building or querying it): wait for it to "
                      "end, pass --readonly to read it beside that command, or serve the store")
    msg = msg.replace(READONLY_HINT, "a query opens its store to extend it: pass --readonly to read it without "
                      "writing, copy the folder somewhere writable, or serve it")
    msg = msg.replace("; this enumerable has", "; this command has")
    return re.sub(r"this enumerable has (\w+)=(\S+)", sub, msg)


def budget_message(exc: BaseException) -> str:
    """A :class:`~arenum.BudgetExceeded` in one line, without the API's hint (the command line gives
    its own, naming its options)."""
    from ..exact import BUDGET_HINT

    return one_line(exc).replace(f"; {BUDGET_HINT}", "")



# --------------------------------------------------------------------------------- constraints


def add_constraint_args(parser: Any) -> None:
    """The constraint flags (``docs/constraints.md``), added to ``parser`` (a parser or an argument
    group): ``--policy NAME``, ``--min-length N``/``--max-length N`` (characters; ``--max-len`` is
    the token cap), ``--classes N``, ``--require CLASS``, ``--regex PATTERN``, ``--blocklist FILE``.
    Every command that loads a model reads them through :func:`constraint_of`."""
    def count(name: str, lo: int, hi: int | None = None) -> Callable[[str], int]:
        def parse(text: str) -> int:
            try:
                v = int(text)
            except ValueError:
                raise argparse.ArgumentTypeError(f"{name} must be an integer, got {text!r}") from None
            if v < lo or (hi is not None and v > hi):
                raise argparse.ArgumentTypeError(f"{name} must be " + (f">= {lo}" if hi is None else f"in {lo}..{hi}")
                                                 + f", got {v}")
            return v
        return parse

    from ..constraints import CLASSES, PRESETS  # the names the builders know, not a copy of them

    g = parser.add_argument_group("constraint (answers count only the sequences it accepts)") \
        if hasattr(parser, "add_argument_group") else parser
    g.add_argument("--policy", choices=tuple(PRESETS), metavar="NAME",
                   help="a password policy: basic8, basic16 (at least 8/16 characters), 2class12, 3class12 (12 "
                        "characters, 2/3 of the classes lower, upper, digit, symbol), comprehensive8 (8, all 4)")
    g.add_argument("--min-length", type=count("--min-length", 0), metavar="N",
                   help="at least N characters (characters of the text, not tokens)")
    g.add_argument("--max-length", type=count("--max-length", 1), metavar="N",
                   help="at most N characters (--max-len is the cap in tokens)")
    g.add_argument("--classes", type=count("--classes", 0, 4), metavar="N",
                   help="at least N of the 4 character classes (lower, upper, digit, symbol)")
    g.add_argument("--require", action="append", default=[], choices=CLASSES, metavar="CLASS",
                   help="a class every sequence holds (repeatable): lower, upper, digit or symbol")
    g.add_argument("--regex", metavar="PATTERN", help="only texts the regular expression matches in full")
    g.add_argument("--blocklist", metavar="FILE", help="leave out these strings (one per line), exactly")


def constraint_of(args: Any, model: Any = None) -> Any:
    """The :class:`arenum.Constraint` the flags of :func:`add_constraint_args` name (``None``: no
    flag given), reading the tokens of ``model`` as text (:func:`arenum.constraints.token_text`);
    one-line :class:`CLIError` for a bad pattern, an unreadable file or contradictory lengths."""
    g = lambda name: getattr(args, name, None)  # noqa: E731
    if not any((g("policy"), g("min_length") is not None, g("max_length") is not None, g("classes") is not None,
                g("require"), g("regex") is not None, g("blocklist"))):
        return None
    from ..constraints import build, token_text

    text, longest = token_text(model) if model is not None else (None, None)
    if g("blocklist") and not os.path.isfile(g("blocklist")):
        raise CLIError(f"--blocklist {g('blocklist')!r} is not a readable file")
    try:
        return build(policy=g("policy"), min_chars=g("min_length"), max_chars=g("max_length"),
                     classes=g("classes"), required=tuple(g("require") or ()), regex=g("regex"),
                     blocklist=g("blocklist"), text=text, longest_token=longest)
    except (ValueError, TypeError, OSError) as exc:
        msg = str(exc).replace("max_len=", "--max-length ").replace("min_len=", "--min-length ")
        raise CLIError(f"constraint: {msg}") from None


def constraint_name(enum: Any) -> str | None:
    """The name of the constraint an enumerable answers under (``None``: none)."""
    c = getattr(getattr(enum, "support", None), "constraint", None)
    return None if c is None else str(getattr(c, "name", c))


def check_figure_out(path: str | None) -> None:
    """Refuse a figure's ``-o`` whose extension is not ``.png``, ``.svg`` or ``.pdf`` (before any work)."""
    if path is None:
        return
    from ..report import figure_format

    try:
        figure_format(path)
    except ValueError as exc:
        raise CLIError(f"-o {exc}") from None
