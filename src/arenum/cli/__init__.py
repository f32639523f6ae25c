"""``arenum`` command line: fit an n-gram, then count, rank, unrank and plot its sequences.

Subcommands (``arenum <command> --help`` for each; ``docs/cli.md`` has examples and outputs):

    fit FILE -o MODEL        character (or ``--tokens``) n-gram from a text file, one item per line
                             (``--weighted`` frequency lists, ``--encoding``, ``--errors replace|skip``,
                             ``--lowercase``); ``--kind pcfg``: a PCFG password model from the same lines
    count / mass             ``--min-log-prob X`` or ``--bits B``: exact count / mass at that threshold
    threshold K              log-prob of the K-th most likely sequence (1-based) and the sequence
    unrank I / slice START K sequences at 0-based ranks (``slice --jsonl``: JSON lines, streamed)
    top K                    the K most likely sequences
    guesses MODEL            raw candidates in exact order, one per line, streamed (``| hashcat``)
    rank STRING... | - | --file F    rank, guess number (rank + 1) and cumulative mass of each string
    eval MODEL TEST [MODEL]  fraction of a test set guessed at 10**k guesses; PNG, CSV, JSON
    nucleus P                how many of the most likely sequences hold mass P
    plot                     guessing curve and cumulative mass, PNG
    demo                     all of the above on a 4-gram fitted on 30,000 real passwords
    serve MODEL              a local JSON API and web page (password meter, explorer) from a store

``--model`` is a file written by ``arenum fit`` (:meth:`NGramModel.save`, :meth:`PCFGModel.save`) or ``hf:<local dir>`` (a
Hugging Face causal LM, loaded with ``local_files_only``; nothing is downloaded). Every answer is
exact unless it says ``bracket`` (a certified ``lo <= true <= hi``, past ``--max-forwards``) or names
an estimator (a Monte Carlo estimate with a confidence interval, past ``--exact-limit``), and every
answer reports the forwards (model evaluations, one per live prefix) it cost. ``--json`` prints one
JSON document per command; ``rank`` prints one JSON object per line (JSON lines), one per string.

Errors (bad numbers, unreadable or malformed files, strings the model cannot produce) print ONE
line ``arenum: error: ...`` on stderr and exit with status 2 (a ``rank`` batch answers its other
strings and exits with status 1); files are written to a temporary name
in the target folder and renamed only on success, so a failed command leaves nothing behind.
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Sequence

from .common import DEMO_MAX_FORWARDS, CLIError, budget_message, dumps, one_line, make_progress, in_cli_words
from .parser import build_parser
from .load import close_model, load_model
from .common import Output, constraint_name, constraint_of, writing_stdout
from .demo import demo_model_path, fit_demo_model

ESTIMATING = ("rank", "count", "threshold")
"""The commands that answer past the exact budget with a Monte Carlo estimate under ``--exact-limit``."""

__all__ = ["main", "build_parser", "demo_model_path", "fit_demo_model", "make_progress"]


def _run(args: argparse.Namespace) -> Output:
    if args.command in ("fit", "demo", "eval", "info", "serve"):
        out = args.run(args)
        c = constraint_of(args) if args.command == "eval" else None
        return _under_constraint(out, None if c is None else c.name, args.command)
    if args.command == "guesses":
        if args.model is not None and args.model_pos is not None:
            raise CLIError("give the model once: arenum guesses MODEL (or -m MODEL)")
        args.model = args.model or args.model_pos
        if args.model is None:
            raise CLIError("guesses needs a model: arenum guesses MODEL [--start I] [--count N]")
    m = load_model(args)
    bar = make_progress(args.quiet)
    m.enum.progress = bar
    done = False
    try:
        out = _under_constraint(args.run(args, m), constraint_name(m.enum), args.command)
        done = True
        return out
    finally:
        if bar is not None:
            bar.close()
        close_model(m, done)


def _under_constraint(out: Output, name: str | None, command: str) -> Output:
    """Say in the output under which constraint it answers: a ``constraint`` key in the JSON
    document (each JSON line), a first text line; ``guesses`` (raw candidates) says it on stderr."""
    if name is None:
        return out
    if command == "guesses" or (command == "slice" and out.doc is None):  # streamed: stdout is data
        out.notes.insert(0, f"{'candidates' if command == 'guesses' else 'sequences'} under the constraint {name}")
        return out
    if isinstance(out.doc, dict):
        out.doc = {"constraint": name, **out.doc}
    elif isinstance(out.doc, list):
        out.doc = [{"constraint": name, **d} if isinstance(d, dict) else d for d in out.doc]
    out.text.insert(0, f"constraint: {name} (only the sequences it accepts are counted)")
    return out


def _emit(out: Output, as_json: bool) -> None:
    with writing_stdout():
        if as_json:
            if out.json_lines:
                sys.stdout.write("".join(dumps(d) + "\n" for d in out.doc))
            elif out.doc is not None:
                sys.stdout.write(dumps(out.doc) + "\n")
        else:
            for line in out.text:
                sys.stdout.write(line + "\n")
        sys.stdout.flush()


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``arenum`` console script; returns the exit status (0; 1 when part of a
    ``rank`` batch failed; 2 on error; 130 on Ctrl-C)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    from ..errors import BudgetExceeded

    if sys.stdout is None:  # started with fd 1 closed ('>&-'): say so, before any work
        if sys.stderr is not None:
            sys.stderr.write("arenum: error: standard output is closed (write it to a file or a pipe)\n")
        return 2

    try:
        out = _run(args)
        _emit(out, args.json)
        for line in out.errors:
            sys.stderr.write(f"arenum: error: {line}\n")
        for line in out.notes:
            sys.stderr.write(f"arenum: note: {line}\n")
        return out.status
    except CLIError as exc:
        msg = str(exc)
    except BudgetExceeded as exc:
        cap = getattr(args, "max_forwards", DEMO_MAX_FORWARDS)
        limit = getattr(args, "exact_limit", None)
        msg = budget_message(exc)
        flag, cap = ("--exact-limit", limit) if limit is not None and limit < cap else ("--max-forwards", cap)
        advice = ("; or pass --exact-limit N for an estimate with a confidence interval"
                  if limit is None and getattr(args, "command", None) in ESTIMATING else "")
        msg = f"{msg} (past {flag} {cap:,}: raise it to go deeper{advice})"
    except IndexError as exc:
        msg = f"out of range: {one_line(exc)}"
    except BrokenPipeError:  # the reader went away (e.g. '| head'): stop quietly, status 0
        try:  # point fd 1 at /dev/null so that the flush at exit cannot fail again
            fd = os.open(os.devnull, os.O_WRONLY)
            os.dup2(fd, sys.stdout.fileno())
            os.close(fd)
        except (OSError, ValueError):
            pass
        return 0
    except (ValueError, TypeError, OSError) as exc:
        msg = in_cli_words(one_line(exc))
    except KeyboardInterrupt:
        sys.stderr.write("\narenum: error: interrupted\n")
        return 130
    except Exception as exc:  # never a traceback on the command line; ARENUM_DEBUG=1 shows it
        if os.environ.get("ARENUM_DEBUG"):
            raise
        msg = f"internal error: {type(exc).__name__}: {one_line(exc)} (ARENUM_DEBUG=1 shows the traceback)"
    sys.stderr.write(f"arenum: error: {msg}\n")
    return 2
