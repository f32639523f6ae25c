"""The ``arenum`` argument parser: subcommands, their options and the checks on their values."""
from __future__ import annotations

import argparse
import decimal
import math
import sys
from typing import Callable

from .common import DEFAULT_MAX_FORWARDS, add_constraint_args
from .storecmd import cmd_build, cmd_info
from .commands import (
    cmd_fit,
    cmd_count,
    cmd_threshold,
    cmd_unrank,
    cmd_slice,
    cmd_top,
    cmd_rank,
    cmd_mass,
    cmd_nucleus,
    cmd_plot,
)
from .demo import cmd_demo
from .stream import cmd_guesses
from .evalcmd import cmd_eval
from .servecmd import add_serve_parser, EXAMPLES as SERVE_EXAMPLES


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (``arenum: error: ...``, exit 2) instead of usage dumps."""

    def parse_known_args(self, args=None, namespace=None):  # type: ignore[override]
        # "-inf" after an option reads as an option to argparse: keep it the option's value
        a = list(sys.argv[1:] if args is None else args)
        for i in range(len(a) - 1, 0, -1):
            if a[i - 1].startswith("--") and "=" not in a[i - 1] and a[i].lower() in ("-inf", "-infinity"):
                a[i - 1 : i + 1] = [f"{a[i - 1]}={a[i]}"]
        return super().parse_known_args(a, namespace)

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
            try:  # 1e6, 2.5e3: read exactly (a float would round integers past 2**53)
                d = decimal.Decimal(s)
            except decimal.InvalidOperation:
                raise argparse.ArgumentTypeError(f"{name} must be an integer, got {text!r}") from None
            if not d.is_finite() or d != d.to_integral_value() or d.adjusted() > 4300:
                raise argparse.ArgumentTypeError(f"{name} must be an integer, got {text!r}") from None
            v = int(d)
        if v < minimum:
            raise argparse.ArgumentTypeError(f"{name} must be >= {minimum}, got {text!r}")
        return v

    return parse


def _float_type(name: str, lo: float | None = None, hi: float | None = None,
                lo_open: bool = False, neg_inf: bool = False) -> Callable[[str], float]:
    """A finite float (or ``-inf`` with ``neg_inf``), optionally in ``[lo, hi]`` (``(lo, hi]`` with ``lo_open``)."""

    def parse(text: str) -> float:
        try:
            f = float(text.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be a number, got {text!r}") from None
        if not math.isfinite(f) and not (neg_inf and f == -math.inf):
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


EXAMPLES = {
    "fit": ["arenum fit passwords.txt -o pw4.npz --order 4",
            "arenum fit passwords.txt -o pcfg.npz --kind pcfg --lowercase",
            "arenum fit rockyou-counts.txt -o pw4.npz --weighted --encoding latin-1 --errors replace"],
    "count": ["arenum count -m pw4.npz --bits 20", "arenum count -m pw4.npz --bits 30 --exact-limit 1e6"],
    "threshold": ["arenum threshold 100000 -m pw4.npz"],
    "unrank": ["arenum unrank 123456 -m pw4.npz"],
    "slice": ["arenum slice 1000000 5 -m pw4.npz", "arenum slice 0 1000 -m pw4.npz --jsonl | jq -r .sequence"],
    "top": ["arenum top 10 -m pw4.npz"],
    "guesses": ["arenum guesses pw4.npz --count 1000000 | hashcat -m 0 hashes.txt",
                "arenum guesses pw4.npz --start 1000000 | head"],
    "rank": ["arenum rank password1 dragon -m pw4.npz", "arenum rank --file test.txt -m pw4.npz --json"],
    "eval": ["arenum eval pw4.npz test.txt -o curve.png --csv curve.csv",
             "arenum eval pw4.npz test.txt pw3.npz --json   # two models on one plot",
             "arenum eval pw4.npz test.txt pw3.npz --label 4-gram --label 3-gram --min-auto "
             "--reference pcfg.csv:PCFG -o curve.pdf"],
    "mass": ["arenum mass -m pw4.npz --bits 20"],
    "nucleus": ["arenum nucleus 0.5 -m pw4.npz"],
    "plot": ["arenum plot -m pw4.npz -o curve.png --mark password1 --mark iloveyou2"],
    "demo": ["arenum demo", "arenum demo --json -o demo.png"],
    "build": ["arenum build -m pw4.npz --budget 1e8 --store pw4.store",
              "arenum build -m pw4.npz --budget 1e8 --store pw4.store --workers 8   # over 8 Ray workers",
              "arenum rank password1 -m pw4.npz --store pw4.store   # answers from the store"],
    "info": ["arenum info pw4.store", "arenum info pw4.store --json"],
    "serve": SERVE_EXAMPLES,
}


def _epilog(name: str) -> str:
    return "examples:\n" + "\n".join("  " + e for e in EXAMPLES[name])


def _version() -> str:
    try:
        from importlib.metadata import PackageNotFoundError, version

        return version("arenum")
    except (ImportError, PackageNotFoundError):  # run from a source tree that was never installed
        return "unknown (not installed)"


def _model_opts(model: str) -> argparse.ArgumentParser:
    """The model and estimate options; ``model``: ``-m`` is ``"required"``, ``"optional"`` (a
    positional MODEL is the other way) or ``"none"`` (models are positional only)."""
    model_opts = _Parser(add_help=False)
    g = model_opts.add_argument_group("model")
    if model != "none":
        g.add_argument("-m", "--model", required=model == "required", metavar="MODEL",
                       help="model file written by 'arenum fit' (n-gram or PCFG), or hf:<local dir> for a Hugging "
                            "Face causal LM")
    g.add_argument("--max-len", type=_int_type("--max-len", 1), metavar="N",
                   help="terminating: at most N tokens, EOS included; with --eos none: exactly N tokens")
    g.add_argument("--eos", type=_eos_type, default="auto", metavar="auto|none|ID",
                   help="'auto' (default): sequences end with the model's EOS; 'none': fixed length "
                        "--max-len; an integer: that token id ends sequences (hf models)")
    g.add_argument("--prompt", metavar="TEXT", help="hf models: the text every sequence continues")
    g.add_argument("--lowercase", action="store_true",
                   help="lowercase every string before it is encoded (a model fitted with --lowercase does it anyway)")
    g.add_argument("--store", metavar="DIR",
                   help="keep the exact tree in DIR: later runs answer from it without re-scoring, deeper "
                        "queries extend it, a killed build resumes (see 'arenum build', 'arenum info')")
    g.add_argument("--readonly", dest="store_readonly", action="store_true",
                   help="with --store: read it without its lock, writing nothing (beside a build that holds it; "
                        "a query past what it holds deepens in memory only)")
    g.add_argument("--workers", type=_int_type("--workers", 1), metavar="N",
                   help="split the exact build over N Ray workers, each with its own model replica (the same "
                        "answers; needs 'pip install arenum[ray]'; see docs/distributed.md)")
    g.add_argument("--ray-address", metavar="ADDR",
                   help="with --workers: join this Ray cluster (default: a local instance sized to the machine)")
    g.add_argument("--max-forwards", type=_int_type("--max-forwards", 1), default=DEFAULT_MAX_FORWARDS,
                   metavar="N", help=f"cap on model evaluations for exact answers; past it answers are "
                                     f"brackets or errors (default {DEFAULT_MAX_FORWARDS:,})")
    g.add_argument("--certify-resolution", type=_float_type("--certify-resolution", 0.0, 64.0, lo_open=True), metavar="R",
                   help="finite-state models: grid cell in bits of the certified brackets past --max-forwards "
                        "(default 1/32; a coarser grid is faster and smaller, its brackets wider)")
    g.add_argument("--rank-exact-limit", type=_int_type("--rank-exact-limit", 0), metavar="N",
                   help="finite-state models: a rank builds the exact index up to N live prefixes, past them the "
                        "certified DP answers it (default 100,000; N >= --max-forwards: exact as far as it allows)")
    e = model_opts.add_argument_group("estimates past the exact budget")
    e.add_argument("--exact-limit", type=_int_type("--exact-limit", 1), metavar="N",
                   help="rank/count/threshold needing more than N forwards are answered by a Monte Carlo "
                        "estimate with a confidence interval (the exact head is first built up to N)")
    e.add_argument("--samples", type=_int_type("--samples", 2), default=10_000, metavar="N",
                   help="Monte Carlo draws for estimates (default 10,000)")
    e.add_argument("--confidence", type=_float_type("--confidence", 0.0, 1.0, lo_open=True), default=0.95,
                   metavar="C", help="confidence level of estimate intervals (default 0.95)")
    e.add_argument("--seed", type=_int_type("--seed", 0), default=0, help="seed of the draws (default 0)")
    add_constraint_args(model_opts)
    return model_opts


def build_parser() -> argparse.ArgumentParser:
    """The ``arenum`` argument parser (subcommands and their options)."""
    out_opts = _Parser(add_help=False)
    out_opts.add_argument("--json", action="store_true",
                          help="machine-readable output: one JSON document (rank: one JSON object per line)")
    out_opts.add_argument("-q", "--quiet", action="store_true", help="no progress bar on stderr")

    model_opts = _model_opts("required")
    free_model_opts = _model_opts("optional")
    eval_model_opts = _model_opts("none")

    thr_opts = _Parser(add_help=False)
    t = thr_opts.add_mutually_exclusive_group(required=True)
    t.add_argument("--min-log-prob", type=_float_type("--min-log-prob", neg_inf=True), metavar="X",
                   help="threshold on log p (natural log, e.g. -13.86)")
    t.add_argument("--bits", type=_float_type("--bits"), metavar="B",
                   help="threshold in bits: min_log_prob = -B ln 2 (p >= 2^-B)")

    p = _Parser(prog="arenum", description="Count, rank and randomly access the sequences of an "
                "autoregressive model, exactly. Every answer states its guarantee and its cost in forwards.",
                epilog="examples:\n  arenum demo\n  arenum fit passwords.txt -o pw4.npz\n"
                       "  arenum rank password1 -m pw4.npz\n  arenum COMMAND --help",
                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version=f"arenum {_version()}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    def add(name: str, parents: list, help: str) -> argparse.ArgumentParser:
        return sub.add_parser(name, parents=parents, help=help, description=help, epilog=_epilog(name),
                              formatter_class=argparse.RawDescriptionHelpFormatter)

    f = add("fit", [out_opts], "fit an n-gram (or --kind pcfg) model on a text file, one item per line")
    f.add_argument("input", metavar="FILE", help="text, one sequence per line ('-' for stdin); empty and "
                   "whitespace-only lines are skipped")
    f.add_argument("-o", "--output", required=True, metavar="MODEL", help="model file to write")
    f.add_argument("--kind", choices=("ngram", "pcfg"), default="ngram",
                   help="ngram (default): an n-gram over characters or tokens; pcfg: a PCFG password model "
                        "(structures of letter/digit/symbol runs, docs/pcfg.md)")
    f.add_argument("--order", type=_int_type("--order", 1), default=None, help="n-gram: n (1..8, default 4)")
    f.add_argument("--smoothing", choices=("kn", "wb", "addk"), default=None,
                   help="n-gram: Kneser-Ney (default), Witten-Bell or add-k")
    f.add_argument("--unknown", choices=("error", "unk"), default=None,
                   help="n-gram: unseen symbols: refuse (default) or map to <unk>")
    f.add_argument("--lowercase", action="store_true",
                   help="lowercase every line first; stored in the model, so queries lowercase their strings too")
    f.add_argument("--tokens", action="store_true", help="one token per whitespace-separated word, not per character")
    f.add_argument("--weighted", action="store_true",
                   help="each line is 'COUNT<TAB>ITEM' or 'COUNT ITEM' (a frequency list, e.g. 'uniq -c' "
                        "output): ITEM counts COUNT times; other lines are skipped and reported")
    f.add_argument("--encoding", default="utf-8", metavar="ENC",
                   help="the file's encoding (default utf-8; latin-1 reads any bytes)")
    f.add_argument("--errors", choices=("strict", "replace", "skip"), default="strict",
                   help="undecodable bytes: stop with an error (default), replace each by U+FFFD, or skip "
                        "the line; replaced and skipped lines are reported")
    f.set_defaults(run=cmd_fit)

    c = add("count", [thr_opts, model_opts, out_opts], "how many sequences have log p >= X (exact)")
    c.set_defaults(run=cmd_count)

    c = add("build", [model_opts, out_opts], "build the exact index of the BUDGET most likely sequences into a "
            "store (resumable: run it again after a crash)")
    c.add_argument("--budget", type=_int_type("--budget", 1), required=True, metavar="N",
                   help="sequences to index (1e8 is accepted)")
    c.set_defaults(run=cmd_build)

    c = add("info", [out_opts], "describe a store: settings, model fingerprint, budget built, size")
    c.add_argument("store_dir", metavar="DIR", help="the store's folder")
    c.set_defaults(run=cmd_info)

    c = add("threshold", [model_opts, out_opts], "log-prob of the K-th most likely sequence (1-based), and the sequence")
    c.add_argument("k", type=_int_type("K", 1), metavar="K", help="1-based position (guess number); 1e6 is accepted")
    c.set_defaults(run=cmd_threshold)

    c = add("unrank", [model_opts, out_opts], "the sequence at 0-based rank I (guess number I + 1)")
    c.add_argument("i", type=_int_type("I", 0), metavar="I", help="0-based rank")
    c.set_defaults(run=cmd_unrank)

    c = add("slice", [model_opts, out_opts], "sequences at ranks START .. START+K-1")
    c.add_argument("start", type=_int_type("START", 0), metavar="START", help="0-based rank of the first")
    c.add_argument("k", type=_int_type("K", 1), metavar="K", help="how many")
    c.add_argument("--jsonl", action="store_true", help="one JSON object per sequence, one per line, streamed")
    c.set_defaults(run=cmd_slice)

    c = add("top", [model_opts, out_opts], "the K most likely sequences")
    c.add_argument("k", type=_int_type("K", 1), metavar="K", help="how many")
    c.set_defaults(run=cmd_top)

    c = add("guesses", [free_model_opts],
            "raw candidates in exact order, one per line, streamed (for hashcat/john --stdin)")
    c.add_argument("model_pos", nargs="?", metavar="MODEL", help="the model (or -m MODEL)")
    c.add_argument("--start", type=_int_type("--start", 0), default=0, metavar="I",
                   help="0-based rank of the first candidate (default 0)")
    c.add_argument("--count", type=_int_type("--count", 1), metavar="N",
                   help="how many (default: all, until the support or --max-forwards ends)")
    c.add_argument("--encoding", default="utf-8", metavar="ENC",
                   help="bytes of each candidate (default utf-8; latin-1 for hashes of latin-1 passwords); "
                        "candidates it cannot write are left out and counted on stderr")
    c.add_argument("-q", "--quiet", action="store_true", help="no progress bar on stderr")
    c.set_defaults(run=cmd_guesses, json=False)

    c = add("rank", [model_opts, out_opts], "rank, guess number and cumulative mass of strings")
    c.add_argument("strings", nargs="*", metavar="STRING",
                   help="strings to rank; '-' reads one string per line from stdin (use -- before "
                        "strings that start with '-'); blank lines are skipped")
    c.add_argument("--file", metavar="FILE", help="also rank every non-blank line of FILE")
    c.set_defaults(run=cmd_rank)

    c = add("eval", [eval_model_opts, out_opts],
            "guessing curve of a test set: the fraction guessed at 10**k guesses, PNG/JSON/CSV")
    c.add_argument("model", metavar="MODEL", help="n-gram file written by 'arenum fit', or hf:<local dir>")
    c.add_argument("test", metavar="TEST", help="the test set: one string per line (blank lines skipped)")
    c.add_argument("more", nargs="*", metavar="MODEL", help="more models, compared on the same plot and table")
    c.add_argument("-o", "--out", metavar="FILE", help="write the plot: PNG, SVG or PDF by the extension")
    c.add_argument("--csv", metavar="CSV", help="write the curve as CSV (model, guesses, fraction, lo, hi, exact)")
    c.add_argument("--max-guesses", type=_float_type("--max-guesses", 1.0), default=1e14, metavar="G",
                   help="report and plot up to G guesses (default 1e14)")
    c.add_argument("--label", action="append", metavar="NAME",
                   help="a model's name in the table, legend, CSV and JSON: once per model, in order "
                        "(default: the file name without its extension)")
    c.add_argument("--reference", action="append", metavar="CSV[:LABEL]",
                   help="another tool's guess numbers: a CSV of password,guess_number, drawn as a curve of "
                        "its own (repeatable)")
    c.add_argument("--min-auto", action="store_true",
                   help="add the min-auto curve: each line's smallest guess number over the models and "
                        "references")
    c.set_defaults(run=cmd_eval)

    c = add("mass", [thr_opts, model_opts, out_opts],
            "probability mass of the sequences with log p >= X (bracket to float rounding)")
    c.set_defaults(run=cmd_mass)

    c = add("nucleus", [model_opts, out_opts], "size of the smallest set of most likely sequences with mass >= P")
    c.add_argument("p", type=_float_type("P", 0.0, 1.0, lo_open=True), metavar="P", help="a mass in (0, 1]")
    c.set_defaults(run=cmd_nucleus)

    c = add("plot", [model_opts, out_opts], "guessing curve and cumulative-mass curve, PNG, SVG or PDF")
    c.add_argument("-o", "--out", default="arenum-plot.png",
                   help="the figure to write: PNG, SVG or PDF by the extension (default arenum-plot.png)")
    c.add_argument("--max-rank", type=_int_type("--max-rank", 1), default=100_000, metavar="K",
                   help="exact region: ranks 1..K (default 100,000)")
    c.add_argument("--points", type=_int_type("--points", 2), default=40, help="points on the curve (default 40)")
    c.add_argument("--mark", action="append", default=[], metavar="STRING",
                   help="mark a string (repeatable); past the exact region it is estimated, with its interval")
    c.add_argument("--exact-marks", action="store_true",
                   help="rank marks past the exact region exactly (deepening the build, up to --max-forwards)")
    c.add_argument("--estimate-bits", type=_float_type("--estimate-bits", 0.0), metavar="B",
                   help="Monte Carlo estimated region (with its confidence band) down to B bits "
                        "(default: 16 bits past the exact region; drawn when an estimator is installed)")
    c.set_defaults(run=cmd_plot)

    d = add("demo", [out_opts], "a 4-gram on 30,000 real passwords: count, threshold, unrank, top, rank, plot")
    d.add_argument("-o", "--out", default="arenum-demo.png",
                   help="the figure to write: PNG, SVG or PDF by the extension (default arenum-demo.png)")
    d.set_defaults(run=cmd_demo)

    add_serve_parser(add, _int_type, _float_type, _eos_type)
    return p
