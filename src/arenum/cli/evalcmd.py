"""``arenum eval MODEL TEST [MODEL ...]``: the guessing curve of a test set under one or more models.

Every line of TEST (blank lines skipped) is ranked by :func:`arenum.report.curves.guessing_curve`: exact
where ``--max-forwards`` allows, past it a certified bracket (a finite-state model's DP), else a
plain bracket plus a Monte Carlo estimate, or the estimate ``--exact-limit`` asks for. Prints the
fraction guessed at 10**k guesses (past the exact region: the point value and its band, the band's
kind named), and writes the curve as a PNG, SVG or PDF (``-o``, by the extension), CSV (``--csv``)
and JSON (``--json``). ``--label`` names the models, ``--reference FILE[:LABEL]`` adds another tool's
guess numbers (:mod:`arenum.report.compare`), ``--min-auto`` the curve of each line's smallest
guess number over all of them.
"""
from __future__ import annotations

import argparse
import csv
import gc
import io
import math
import os
import sys
import time

from .common import CLIError, check_figure_out, check_writable, checked_atomic_write, make_progress, read_lines, table
from .load import check_model_spec, close_model, load_model


def _pct(p) -> str:
    if p.exact:
        return f"{100 * p.fraction:.2f}%"
    return f"~{100 * p.fraction:.2f}% [{100 * p.lo:.2f}, {100 * p.hi:.2f}]"


def _say(text: str) -> None:
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


def _peak_gb() -> float:
    """Peak resident memory of this process so far, GB (0 where the platform does not say)."""
    try:
        import resource
    except ImportError:  # pragma: no cover - not on this platform
        return 0.0
    kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return kb * (1 if sys.platform == "darwin" else 1024) / 1e9


def _fmt_g(g: float) -> str:
    return f"{int(g):,}" if g < 1e7 else f"1e{round(math.log10(g))}"


def _labels(specs: list[str], given: list[str] | None) -> list[str]:
    """Each model's name: ``--label`` once per model, in order, else the file's stem (``hf:DIR``: the
    folder's name)."""
    if given:
        if len(given) != len(specs):
            raise CLIError(f"--label given {len(given)} time(s) for {len(specs)} model(s): give one per model, "
                           f"in order")
        if len(set(given)) != len(given):
            raise CLIError(f"--label names must differ, got {given}")
        return list(given)
    stems = [os.path.splitext(os.path.basename(s[3:].rstrip("/") if s.startswith("hf:") else s))[0] or s
             for s in specs]
    return stems if len(set(stems)) == len(stems) else list(specs)


def _references(specs: list[str], lines: list[str], names: list[str]) -> list[tuple[str, object, int]]:
    """``(file, curve, ignored rows)`` of each ``--reference FILE[:LABEL]`` (a bad file: one line)."""
    from ..report import read_reference_csv, reference_curve

    out = []
    for spec in specs:
        path, label = spec, None
        if not os.path.exists(spec) and ":" in spec:
            path, label = spec.rsplit(":", 1)
        label = label or os.path.splitext(os.path.basename(path))[0]
        if not os.path.isfile(path):
            raise CLIError(f"--reference {path}: no such file")
        if label in names or label in [c.name for _, c, _ in out]:
            raise CLIError(f"--reference {spec}: the label {label!r} is taken; name it with FILE:LABEL")
        try:
            guesses = read_reference_csv(path)
        except ValueError as exc:
            raise CLIError(str(exc)) from None
        cur, ignored = reference_curve(guesses, lines, label)
        out.append((path, cur, ignored))
    return out


def cmd_eval(args: argparse.Namespace) -> "object":
    from ..report import band_name, draw_guessing_curves, guessing_curve
    from .commands import need_matplotlib
    from .common import Output

    specs = [args.model] + list(args.more)
    test = args.test
    names = _labels(specs, getattr(args, "label", None))
    for path in (args.out, args.csv):
        if path is not None:
            check_writable(path)
    if args.out is not None:
        check_figure_out(args.out)
        need_matplotlib()
    raw = read_lines(test)
    lines = [s for s in raw if s.strip()]
    if not lines:
        raise CLIError(f"test file {test!r} has no non-blank lines")
    refs = _references(getattr(args, "reference", None) or [], lines, names)  # refused before any model work
    if getattr(args, "store", None) and len(specs) > 1:
        raise CLIError("--store keeps one model's tree: give it with one model (or run eval once per model)")
    for spec in specs:  # a bad model is refused before the others are worked on (each loads in its turn)
        check_model_spec(spec)
    curves = []
    t0 = time.perf_counter()
    for k, (spec, name) in enumerate(zip(specs, names)):
        # one model at a time: the one before is released first (its tree, index, tables)
        ns = argparse.Namespace(**{**vars(args), "model": spec})
        m = load_model(ns)
        m.enum.progress = bar = make_progress(args.quiet)
        if bar is not None:  # a terminal: a line per model, above its bar
            _say(f"eval: model {k + 1}/{len(specs)} {spec}: ranking {len(lines):,} lines")
        done = False
        try:
            seqs, errs = [], []
            for s in lines:
                try:
                    seqs.append(m.encode(s))
                    errs.append(None)
                    if m.enum.support.constraint is not None and (why := m.enum.support.why_outside(seqs[-1])):
                        seqs[-1], errs[-1] = None, f"{s!r} is outside the support: {why}"  # never guessed
                except CLIError as exc:
                    seqs.append(None)
                    errs.append(str(exc))
            curves.append(guessing_curve(m.enum, seqs, labels=lines, name=name, errors=errs,
                                         samples=args.samples, seed=args.seed))
            done = True
        finally:
            if bar is not None:
                bar.close()
            close_model(m, done)
        if bar is not None:
            c = curves[-1]
            _say(f"eval: model {k + 1}/{len(specs)} {spec}: done, {c.forwards:,} forwards, {c.seconds:.1f} s, "
                 f"peak memory so far {_peak_gb():.2f} GB")
        del m, seqs, errs, bar, ns
        gc.collect()  # the model's arrays go now, not after the next model has grown its own
    secs = time.perf_counter() - t0
    files = list(specs) + [path for path, _, _ in refs]
    curves += [cur for _, cur, _ in refs]
    if getattr(args, "min_auto", False):
        from ..report import min_auto

        curves.append(min_auto(curves))
        files.append(None)
    size = None
    if args.out is not None:
        from ..report import save_figure

        fig = draw_guessing_curves(curves, max_guesses=args.max_guesses,
                                   title=f"arenum eval: {test} ({len(lines):,} lines)")
        size = save_figure(fig, args.out)
    if args.csv is not None:
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(["model", "guesses", "fraction", "lo", "hi", "exact", "band", "point_method"])
        for cur in curves:
            for p in cur.points(args.max_guesses):
                w.writerow([cur.name, f"{p.guesses:.6g}", f"{p.fraction:.9f}", f"{p.lo:.9f}", f"{p.hi:.9f}",
                            int(p.exact), p.band, p.point_method])
        data = buf.getvalue().encode("utf-8")

        def write(tmp: str) -> None:
            with open(tmp, "wb") as fh:
                fh.write(data)

        checked_atomic_write(args.csv, write)
    doc = {"command": "eval", "test": test, "lines": len(lines), "blank_skipped": len(raw) - len(lines),
           "max_guesses": args.max_guesses, "out": args.out, "bytes": size, "csv": args.csv,
           "models": [{**c.as_dict(args.max_guesses), "file": f} for c, f in zip(curves, files)],
           "seconds": round(secs, 4)}
    text = [f"test set  {test}: {len(lines):,} lines ({len(raw) - len(lines):,} blank skipped)"]
    for c in curves:
        if c.kind != "model":
            continue
        est = sum(it.count for it in c.items if not it.exact)
        kinds = sorted({band_name(it.band) for it in c.items if not it.exact})  # what their bands are
        eu = c.exact_until()
        text.append(f"{c.name}: {c.exact_lines:,} lines ranked exactly, {est:,} past the exact "
                    f"budget ({' / '.join(kinds) or 'none'}), {c.unrankable:,} unrankable (never guessed); exact up to "
                    f"{'every guess count' if math.isinf(eu) else f'{eu:.4g} guesses'}; "
                    f"{c.forwards:,} forwards ({c.seconds:.1f} s)")
    for path, cur, ignored in refs:
        doc["models"][curves.index(cur)]["ignored_rows"] = ignored
        text.append(f"{cur.name}: guess numbers from {path}: {cur.n - cur.unrankable:,} lines guessed, "
                    f"{cur.unrankable:,} not (absent or never guessed); {ignored:,} of its passwords are "
                    f"not test lines (ignored)")
    if getattr(args, "min_auto", False):
        text.append(f"{curves[-1].name}: each line's smallest guess number over {', '.join(c.name for c in curves[:-1])} "
                    f"(brackets: the min of the lower ends and the min of the upper ends); "
                    f"{curves[-1].exact_lines:,} lines exact")
    rows = []
    decs = [c.decades(args.max_guesses) for c in curves]
    for k in range(len(decs[0])):
        rows.append([_fmt_g(decs[0][k].guesses)] + [_pct(d[k]) for d in decs])
    text += [""] + table(["guesses"] + [c.name for c in curves], rows, [True] * (1 + len(curves)))
    kinds = sorted({k for d in decs for p in d if not p.exact for k in p.band.split(" + ")})
    text.append("fraction of the test set guessed within that many guesses (guess number = rank + 1)"
                + ("" if not kinds else
                   f"; ~x% [lo, hi]: past the exact budget, the point value (expected fraction) in its "
                   f"{' / '.join(band_name(k) for k in kinds)}"))
    if args.out is not None:
        text.append(f"wrote {args.out} ({size:,} bytes)")
    if args.csv is not None:
        text.append(f"wrote {args.csv}")
    return Output(doc, text)
