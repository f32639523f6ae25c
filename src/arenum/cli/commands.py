"""The query subcommands (fit, count, threshold, unrank, slice, top, rank, mass, nucleus, plot)."""
from __future__ import annotations

import argparse
import math
import time
from typing import Any, Callable, Sequence

from .._validate import LN2
from .common import (
    Output,
    check_figure_out,
    constraint_name,
    CLIError,
    read_lines,
    read_bytes,
    decode_lines,
    check_writable,
    checked_atomic_write,
    fmt_count,
    fmt_lp,
    fmt_point,
    table,
    kv,
    one_line,
)
from .load import Loaded, score_strings, threshold_arg


def _header(m: Loaded) -> dict:
    return {"model": m.name, **{k: v for k, v in m.info.items() if v is not None}}


def _cost(m: Loaded, before: int, t0: float) -> tuple[dict, str]:
    f = m.forwards()
    secs = time.perf_counter() - t0
    return ({"forwards": f - before, "forwards_total": f, "seconds": round(secs, 4)},
            f"{f - before:,} forwards ({secs:.2f} s)")


def read_corpus(args: argparse.Namespace) -> tuple[list[str], list[int] | None, dict[str, int], int]:
    """The lines ``fit`` learns from, their counts (``--weighted``), what was skipped (by reason) and
    how many kept lines had undecodable bytes replaced (``--errors replace``)."""
    from ..models.ngram.fit import parse_weighted_line

    where = "stdin" if args.input == "-" else repr(args.input)
    lines, bad = decode_lines(read_bytes(args.input), where, encoding=args.encoding, errors=args.errors)
    skipped = {"undecodable": bad if args.errors == "skip" else 0, "blank": 0, "malformed": 0, "zero_count": 0}
    replaced = bad if args.errors == "replace" else 0
    items: list[str] = []
    counts: list[int] | None = [] if args.weighted else None
    for ln in lines:
        if not ln.strip():  # empty or whitespace-only: not a sequence anyone would type as one
            skipped["blank"] += 1
            continue
        if counts is not None:
            parsed = parse_weighted_line(ln)
            if parsed is None:
                skipped["malformed"] += 1
                continue
            c, ln = parsed
            if c == 0:
                skipped["zero_count"] += 1
                continue
        if not ln.strip():  # empty or whitespace-only: not a sequence anyone would type as one
            skipped["blank"] += 1
            continue
        items.append(ln)
        if counts is not None:
            counts.append(c)
    return items, counts, skipped, replaced


def _skip_text(skipped: dict[str, int]) -> str:
    words = {"blank": "blank or whitespace-only", "undecodable": "undecodable (--errors skip)",
             "malformed": "not 'count<TAB>item' / 'count item'", "zero_count": "count 0"}
    parts = [f"{n:,} {words[k]}" for k, n in skipped.items() if n]
    return ", ".join(parts) if parts else "no"


def cmd_fit(args: argparse.Namespace) -> Output:
    from ..models.ngram import NGramModel

    if args.kind == "pcfg":
        return _fit_pcfg(args)
    order = 4 if args.order is None else args.order
    if not 1 <= order <= 8:
        raise CLIError(f"--order must be in 1..8, got {order}")
    check_writable(args.output)
    lines, counts, skipped, replaced = read_corpus(args)
    if not lines:
        raise CLIError(f"{'stdin' if args.input == '-' else repr(args.input)} has no non-empty lines to fit "
                       f"(skipped: {_skip_text(skipped)} lines)")
    corpus = [ln.split() for ln in lines] if args.tokens else lines
    t0 = time.perf_counter()
    model = NGramModel.fit(corpus, order=order, smoothing=args.smoothing or "kn", unknown=args.unknown or "error",
                           weights=counts, lowercase=args.lowercase)
    secs = time.perf_counter() - t0
    size = checked_atomic_write(args.output, model.save)
    doc = {"command": "fit", "output": args.output, "bytes": size, "kind": model.kind, "order": model.order,
           "smoothing": model.smoothing, "unknown": model.unknown, "lowercase": model.lowercase,
           "vocab_size": model.vocab_size,
           "n_sequences": model.n_sequences, "n_tokens": model.n_tokens, "contexts": model.num_contexts,
           "lines_used": len(lines), "weighted": counts is not None, "encoding": args.encoding,
           "skipped": skipped, "replaced": replaced, "seconds": round(secs, 4)}
    fitted = f"{model.n_sequences:,} sequences, {model.n_tokens:,} tokens in {secs:.2f} s"
    if counts is not None:
        fitted = f"{len(lines):,} distinct lines weighted to {fitted}"
    text = kv([("wrote", f"{args.output} ({size:,} bytes)"),
                ("model", f"{model.kind} {model.order}-gram, smoothing {model.smoothing}, unknown {model.unknown}"
                          + (", lowercased" if model.lowercase else "")),
                ("vocabulary", f"{model.vocab_size} tokens (EOS included)"),
                ("fitted on", fitted), ("skipped", _skip_text(skipped) + " lines")]
               + ([("replaced", f"undecodable bytes by U+FFFD in {replaced:,} lines")] if replaced else []))
    return Output(doc, text)


def _fit_pcfg(args: argparse.Namespace) -> Output:
    """``fit --kind pcfg``: the same input lines (weighted, encodings) as the n-gram, a PCFG model."""
    from ..models.pcfg import PCFGModel

    for opt, given in (("--order", args.order), ("--smoothing", args.smoothing), ("--unknown", args.unknown),
                       ("--tokens", args.tokens or None)):
        if given is not None:
            raise CLIError(f"{opt} applies to --kind ngram only (a PCFG has no order, smoothing or <unk>; "
                           "its tokens are structures and segments)")
    check_writable(args.output)
    lines, counts, skipped, replaced = read_corpus(args)
    if not lines:
        raise CLIError(f"{'stdin' if args.input == '-' else repr(args.input)} has no non-empty lines to fit "
                       f"(skipped: {_skip_text(skipped)} lines)")
    t0 = time.perf_counter()
    model = PCFGModel.fit(lines, counts, lowercase=args.lowercase)
    secs = time.perf_counter() - t0
    size = checked_atomic_write(args.output, model.save)
    doc = {"command": "fit", "output": args.output, "bytes": size, "kind": "pcfg", "lowercase": model.lowercase,
           "structures": len(model.structures), "vocab_size": model.vocab_size, "groups": model.groups,
           "n_sequences": model.n_sequences, "lines_used": len(lines), "weighted": counts is not None,
           "encoding": args.encoding, "skipped": skipped, "replaced": replaced, "seconds": round(secs, 4)}
    fitted = f"{model.n_sequences:,} passwords in {secs:.2f} s"
    if counts is not None:
        fitted = f"{len(lines):,} distinct lines weighted to {fitted}"
    text = kv([("wrote", f"{args.output} ({size:,} bytes)"),
               ("model", "pcfg" + (", lowercased" if model.lowercase else "")),
               ("structures", f"{len(model.structures):,}; {model.vocab_size - len(model.structures) - 1:,} "
                              f"segment strings in {len(model.groups)} groups"),
               ("fitted on", fitted), ("skipped", _skip_text(skipped) + " lines")]
              + ([("replaced", f"undecodable bytes by U+FFFD in {replaced:,} lines")] if replaced else []))
    return Output(doc, text)


def _tag(g: dict) -> str:
    if g["exact"]:
        return "[exact]"
    if "confidence" in g:
        return f"[estimate: {g['guarantee']}, {g['confidence']:.0%} interval]"
    if g["guarantee"] == "certified":
        return "[certified bracket]"
    return f"[{g['guarantee']}]"


def count_answer(enum: Any, t: float) -> dict:
    """``count(t)`` as its JSON (:func:`arenum.report.count_json`): exact, a certified bracket past the
    cap, or a Monte Carlo estimate with its interval when the enumerable has an ``exact_limit``."""
    from ..report import count_json

    return count_json(enum.answers.count_or_bracket(t))


def threshold_record(r: Any, m: Loaded, seq: Sequence[int] | None) -> dict:
    """JSON fields of a :class:`~arenum.results.ThresholdResult` (:func:`arenum.report.threshold_json`:
    exact, bracket, certified or estimate) and of the sequence at that position (``None`` when the
    position is not exact)."""
    from ..report import threshold_json

    return {**threshold_json(r), "sequence": None if seq is None else m.display(seq),
            "tokens": None if seq is None else list(seq)}


def mass_record(b: Any, mass: Any) -> dict:
    """JSON fields of ``mass_above(t)`` (:func:`arenum.report.mass_json` of its
    :class:`~arenum.results.MassBracket`: ``mass``, ``mass_lo``/``mass_hi``, ``exact``, ``method``,
    ``point_method``) beside the count bracket ``b`` at the same threshold (``count`` its point,
    ``count_lo``/``count_hi``, ``count_exact``, ``count_method``, ``count_point_method``)."""
    from ..report import count_json, mass_json

    cj = count_json(b)
    return {**mass_json(mass), "count": cj["count"], "count_lo": b.lo, "count_hi": b.hi, "count_exact": b.exact,
            "count_method": cj["method"], "count_point_method": cj["point_method"]}


def cmd_count(args: argparse.Namespace, m: Loaded) -> Output:
    t = threshold_arg(args)
    before, t0 = m.forwards(), time.perf_counter()
    g = count_answer(m.enum, t)
    c = g["count"]
    cost, cline = _cost(m, before, t0)
    doc = {"command": "count", **_header(m), "min_log_prob": t, "bits": -t / LN2, **g, **cost}
    val = fmt_count(c) if g["exact"] else f"~{fmt_point(c)} in [{fmt_count(g['count_lo'])}, {fmt_count(g['count_hi'])}]"
    text = kv([("threshold", fmt_lp(t)), ("count", f"{val}  {_tag(g)}"), ("cost", cline)])
    return Output(doc, text)


def cmd_threshold(args: argparse.Namespace, m: Loaded) -> Output:
    before, t0 = m.forwards(), time.perf_counter()
    from ..report import threshold_json

    r = m.enum.threshold(args.k)
    g = threshold_json(r)
    lp = g["log_prob"]
    seq = m.enum.unrank(args.k - 1)[0] if g["exact"] else None  # an estimate names no sequence
    cost, cline = _cost(m, before, t0)
    doc = {"command": "threshold", **_header(m), "k": args.k, **threshold_record(r, m, seq), **cost}
    rows = [("k", f"{args.k:,} (1-based)"),
            ("threshold", f"{'' if g['exact'] else '~'}{fmt_lp(lp)}  {_tag(g)}")]
    if not g["exact"]:
        rows.append(("interval", f"log p in [{g['log_prob_lo']:.4f}, {g['log_prob_hi']:.4f}] "
                                 f"(point: {g['point_method'].replace('_', ' ')})"))
    if seq is not None:
        rows.append(("sequence", repr(m.display(seq))))
    return Output(doc, kv(rows + [("cost", cline)]))


EXACT_ITEMS = {"exact": True, "method": "exact", "guarantee": "exact"}
"""What a record of sequences read off the exact index is (unrank, top, slice; the server's too)."""


def item(m: Loaded, rank: int, seq: Sequence[int], lp: float) -> dict:
    return {"rank": rank, "guess_number": rank + 1, "sequence": m.display(seq), "tokens": [int(t) for t in seq],
            "log_prob": float(lp), "bits": -float(lp) / LN2, "probability": math.exp(lp)}


def items_table(items: list[dict]) -> list[str]:
    rows = [(f"{d['rank']:,}", f"{d['rank'] + 1:,}", f"{d['log_prob']:.4f}", f"{d['bits']:.3f}",
             f"{d['probability']:.4g}", repr(d["sequence"])) for d in items]
    return table(("rank", "guess#", "log_prob", "bits", "p", "sequence"), rows, (True, True, True, True, True))


def cmd_unrank(args: argparse.Namespace, m: Loaded) -> Output:
    before, t0 = m.forwards(), time.perf_counter()
    seq, lp = m.enum.unrank(args.i)
    cost, cline = _cost(m, before, t0)
    it = item(m, args.i, seq, lp)
    doc = {"command": "unrank", **_header(m), **it, **EXACT_ITEMS, **cost}
    text = kv([("rank", f"{args.i:,} (0-based; guess number {args.i + 1:,})"), ("sequence", repr(it["sequence"])),
                ("log_prob", f"{fmt_lp(lp)}  [exact]"), ("cost", cline)])
    return Output(doc, text)


def _list_output(command: str, m: Loaded, pairs: list, first: int, before: int, t0: float, **extra: Any) -> Output:
    cost, cline = _cost(m, before, t0)
    items = [item(m, first + j, s, lp) for j, (s, lp) in enumerate(pairs)]
    doc = {"command": command, **_header(m), **extra, "items": items, **EXACT_ITEMS, **cost}
    note = [] if items else ["(no sequences: past the end of the support)"]
    return Output(doc, items_table(items) + note + [f"[exact] cost: {cline}"])


def cmd_slice(args: argparse.Namespace, m: Loaded) -> Output:
    if args.jsonl:
        from .stream import stream_jsonl

        name = constraint_name(m.enum)  # each line says under which constraint it answers
        head = {"command": "slice", **({} if name is None else {"constraint": name}), **_header(m)}
        n = stream_jsonl(m, args.start, args.k, lambda r, seq, lp: {**head, **item(m, r, seq, lp), **EXACT_ITEMS})
        past = not n and args.k > 0
        return Output(None, [], notes=[f"no sequences: start {args.start:,} is past the end of the support"] if past else [])
    before, t0 = m.forwards(), time.perf_counter()
    pairs = m.enum.slice(args.start, args.k)
    return _list_output("slice", m, pairs, args.start, before, t0, start=args.start, k=args.k)


def cmd_top(args: argparse.Namespace, m: Loaded) -> Output:
    before, t0 = m.forwards(), time.perf_counter()
    pairs = m.enum.top_k(args.k)
    return _list_output("top", m, pairs, 0, before, t0, k=args.k)


def rank_strings(m: Loaded, strings: Sequence[str], *, per_string_errors: bool = False) -> list[dict]:
    """Rank records of ``strings`` in input order. All are encoded and scored first; ranks are then
    computed from the most probable string to the least, so each deepening reuses the forwards of the
    one before and ``forwards`` is incremental.

    A string the model cannot produce raises :class:`CLIError`, or with ``per_string_errors`` gets a
    record ``{"string": s, "error": why}`` of its own (so does a rank that fails on its own).
    """
    enc, scores, errors = score_strings(m, strings)
    if not per_string_errors:
        first = next((e for e in errors if e is not None), None)
        if first is not None:
            raise CLIError(first)
    ok = [j for j in range(len(strings)) if errors[j] is None]
    order = sorted(ok, key=lambda j: -scores[j])
    out: list[dict | None] = [None] * len(strings)
    for j in range(len(strings)):
        if errors[j] is not None:
            out[j] = {"string": strings[j], "error": errors[j]}
    for j in order:
        before, t0 = m.forwards(), time.perf_counter()
        try:
            r = m.enum.rank(enc[j])
        except (ValueError, IndexError, ArithmeticError) as exc:
            if not per_string_errors:
                raise
            out[j] = {"string": strings[j], "error": one_line(exc)}
            continue
        f = m.forwards()
        out[j] = {"string": strings[j], "tokens": list(enc[j]), **rank_record(r), "forwards": f - before,
                  "forwards_total": f, "seconds": round(time.perf_counter() - t0, 4)}
    return out  # type: ignore[return-value]


def rank_record(r: Any) -> dict:
    """JSON fields of a :class:`~arenum.results.DensityRankResult` (:func:`arenum.report.result_json`,
    the one JSON of each record type)."""
    from ..report import result_json

    return result_json(r)


def rank_table(recs: list[dict]) -> list[str]:
    rows = []
    for d in recs:
        if "error" in d:
            rows.append((repr(d["string"]), "-", "-", "-", "-", "-", "error", "-"))
            continue
        if d["exact"]:
            g, rk, cum = f"{d['guess_number']:,}", f"{d['rank']:,}", f"{d['cumulative']:.6f}"
        else:  # the point (estimate, or the bracket's middle) and its bracket or interval
            g = f"~ {fmt_point(d['guess_number'])}"
            pct = f" {d['confidence']:.0%}" if d.get("confidence") is not None else ""
            rk = f"[{fmt_count(d['rank_lo'])}, {fmt_count(d['rank_hi'])}]{pct}"
            cum = f"~ {d['cumulative']:.4f} [{d['cumulative_lo']:.4f}, {d['cumulative_hi']:.4f}]"
        rows.append((repr(d["string"]), g, rk, f"{d['bits']:.3f}", f"{d['probability']:.4g}", cum,
                     d["guarantee"], f"{d['forwards']:,}"))
    return table(("string", "guess#", "rank", "bits", "p", "cumulative", "guarantee", "forwards"), rows,
                  (False, True, True, True, True, True, False, True))


def cmd_rank(args: argparse.Namespace, m: Loaded) -> Output:
    strings: list[str] = []
    for s in args.strings:
        strings.extend(read_lines("-", skip_blank=True) if s == "-" else [s])
    if args.file is not None:
        strings.extend(read_lines(args.file, skip_blank=True))
    if not strings:
        raise CLIError("rank needs at least one string: arguments, '-' for stdin, or --file FILE "
                       "(blank lines are skipped)")
    t0 = time.perf_counter()
    recs = rank_strings(m, strings, per_string_errors=True)
    failed = [d for d in recs if "error" in d]
    foot = (f"cost: {sum(d.get('forwards', 0) for d in recs):,} forwards ({time.perf_counter() - t0:.2f} s); "
            "guess# = rank + 1 (rank = number of strictly more probable sequences)")
    if any(not d.get("exact", True) for d in recs if "error" not in d):
        foot += ("; ~ x [lo, hi]: past the exact budget, the point value (an estimate inside the bracket, "
                 "else the bracket's geometric middle) and its bracket (certified) or interval (with its %)")
    if failed:
        foot += f"; {len(failed)} of {len(recs)} strings failed (errors on stderr)"
    text = rank_table(recs) + [foot] if len(failed) < len(recs) else []
    return Output([{"command": "rank", **_header(m), **d} for d in recs], text, json_lines=True,
                  errors=[d['error'] for d in failed], status=1 if failed else 0)


def cmd_mass(args: argparse.Namespace, m: Loaded) -> Output:
    t = threshold_arg(args)
    before, t0 = m.forwards(), time.perf_counter()
    b = m.enum.count_bracket(t)
    mb = m.enum.mass_above(t)
    cost, cline = _cost(m, before, t0)
    rec = mass_record(b, mb)
    doc = {"command": "mass", **_header(m), "min_log_prob": t, "bits": -t / LN2, **rec, **cost}
    what = {"exact": "exact to float rounding", "bracket": "bracket: the cap stopped the build",
            "certified": "certified bracket (finite-state DP)"}.get(mb.method, mb.method)
    cnt = fmt_count(b.lo) if b.exact else f"~{fmt_point(rec['count'])} in [{fmt_count(b.lo)}, {fmt_count(b.hi)}]"
    mtxt = f"{mb.lo:.12g} <= mass <= {mb.hi:.12g}" + ("" if mb.exact else f" (point {mb.point:.6g})")
    text = kv([("threshold", fmt_lp(t)), ("mass", f"{mtxt}  [{what}]"), ("sequences", cnt), ("cost", cline)])
    return Output(doc, text)


def cmd_nucleus(args: argparse.Namespace, m: Loaded) -> Output:
    before, t0 = m.forwards(), time.perf_counter()
    from ..report import nucleus_json

    r = m.enum.nucleus_size(args.p)
    cost, cline = _cost(m, before, t0)
    doc = {"command": "nucleus", **_header(m), **nucleus_json(r), **cost}
    tag = _tag(doc)  # the other commands' label of the same guarantee fields
    tag = tag[:-1] + ", truncated by the cap]" if r.truncated else tag
    if r.exact:
        size = f"{r.size:,}"
    elif r.size_hi is None:
        size = f">= {r.size_lo:,}"
    else:
        size = f"~{r.size:,.1f} in [{r.size_lo:,}, {r.size_hi:,}]"
    built = " (of the head built before the cap, not the nucleus's)" if r.truncated else ""
    rows = [("p", f"{args.p:g}"), ("size", f"{size}  {tag}"),
            ("mass", f"{r.mass_lo:.12g} .. {r.mass_hi:.12g}{built}"), ("boundary", fmt_lp(r.threshold) + built)]
    if r.reachable is False:
        rows.append(("unreachable", f"p = {args.p:g} cannot be reached: the whole support holds at most "
                                    f"{r.mass_hi:.6g} of the model's mass (raise --max-len / --max-depth)"))
    text = kv(rows + [("cost", cline)])
    return Output(doc, text)


def need_matplotlib() -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise CLIError("plotting needs matplotlib (pip install 'arenum[plot]')") from None


def marks(recs: list[dict]) -> list:
    from ..report import Mark

    return [Mark(label=d["string"], log_prob=d["log_prob"], rank_lo=d["rank_lo"], rank_hi=d["rank_hi"],
                 cum_lo=d["cumulative_lo"], cum_hi=d["cumulative_hi"], method=d["guarantee"],
                 estimate=None if d["exact"] else float(d["rank"])) for d in recs]


def estimates(m: Loaded, exact: list, to_bits: float, samples: int, seed: int,
               warn: Callable[[str], None]) -> list | None:
    """Estimated counts at 25 thresholds from the end of the exact region down to ``to_bits``."""
    from ..report import plot

    if not plot.estimator_available(m.enum):
        return None
    b0 = -exact[-1].log_prob / LN2
    if to_bits <= b0:
        return None
    ts = [-(b0 + (to_bits - b0) * j / 24) * LN2 for j in range(25)]  # from the exact boundary on
    try:
        return plot.estimated_curve(m.enum, ts, samples=samples, seed=seed)
    except Exception as exc:  # the band is optional: a failing estimator must not lose the exact plot
        warn(f"estimated band skipped: {type(exc).__name__}: {one_line(exc)}")
        return None


def plot_marks(m: Loaded, strings: Sequence[str], boundary: float, *, exact_marks: bool, samples: int,
               seed: int) -> tuple[list[dict], list[str]]:
    """Rank records of the ``--mark`` strings and notes on how they were ranked.

    A mark inside the exact region (``log p >= boundary``) is ranked exactly at no extra cost. A deeper
    one gets a Monte Carlo estimate with its interval from draws beyond the exact head (no deeper
    build), unless ``exact_marks``: then it is ranked exactly (deepening the build up to
    ``--max-forwards``) and the note says how deep that went."""
    from ..report import plot

    if not strings:
        return [], []
    enc, scores, errors = score_strings(m, strings)
    first = next((e for e in errors if e is not None), None)
    if first is not None:
        raise CLIError(first)
    deep = [j for j in range(len(strings)) if scores[j] < boundary]
    notes: list[str] = []
    if exact_marks or not deep or not plot.estimator_available(m.enum):
        if exact_marks and hasattr(m.enum, "rank_exact_limit"):
            m.enum.rank_exact_limit = None  # exactly, as far as --max-forwards allows (not the certified DP)
        recs = rank_strings(m, strings)
        for d in recs:
            if d["forwards"]:
                notes.append(f"mark {d['string']!r} deepened the exact build to {d['bits']:.1f} bits "
                             f"({d['forwards']:,} forwards)")
        return recs, notes
    shallow = [strings[j] for j in range(len(strings)) if j not in deep]
    by = {d["string"]: d for d in rank_strings(m, shallow)} if shallow else {}
    est = m.enum.monte_carlo(samples, seed=seed)
    head = m.enum.exact_head() if est.head is not None else None
    for j in deep:
        r = est.rank(scores[j], head=head)
        by[strings[j]] = {"string": strings[j], "tokens": list(enc[j]), **rank_record(r), "forwards": 0,
                          "forwards_total": m.forwards(), "seconds": 0.0}
    notes.append(f"{len(deep)} mark(s) past the exact region estimated ({samples:,} draws beyond the exact head; "
                 f"--exact-marks ranks them exactly)")
    return [by[s] for s in strings], notes


def cmd_plot(args: argparse.Namespace, m: Loaded) -> Output:
    check_figure_out(args.out)
    need_matplotlib()
    check_writable(args.out)
    from ..report import plot

    before, t0 = m.forwards(), time.perf_counter()
    whole = False
    try:
        exact = plot.exact_curve(m.enum, args.max_rank, args.points)
    except IndexError:  # the support is smaller than --max-rank: plot all of it (nothing left to estimate)
        exact = plot.exact_curve(m.enum, int(m.enum.count_bracket(-math.inf).lo), args.points)
        whole = True
    recs, notes = plot_marks(m, args.mark, exact[-1].log_prob, exact_marks=args.exact_marks,
                             samples=args.samples, seed=args.seed)
    warnings: list[str] = []
    b0 = -exact[-1].log_prob / LN2
    to_bits = args.estimate_bits if args.estimate_bits is not None else b0 + 16.0
    est = None if whole else estimates(m, exact, to_bits, args.samples, args.seed, warnings.append)
    deepened = [n for n in notes if "deepened" in n]
    fig = plot.draw_curves(exact, est, marks(recs), title=f"arenum: {m.name}",
                           subtitle=f"{m.info.get('support', '')}, exact index to rank {exact[-1].count:,}"
                                    + (f", Monte Carlo estimate to {to_bits:.0f} bits" if est else "")
                                    + (f"; {len(deepened)} mark(s) deepened the exact build" if deepened else ""))
    size = plot.save_figure(fig, args.out)  # PNG, SVG or PDF by the extension
    cost, cline = _cost(m, before, t0)
    doc = {"command": "plot", **_header(m), "out": args.out, "bytes": size,
           "points": [p.__dict__ for p in exact],
           "estimated": [{**e.__dict__, "method": "monte_carlo", "confidence": getattr(m.enum, "confidence", 0.95)}
                         for e in est] if est else None,
           "marks": recs, "notes": notes, **cost}
    if est:
        band = (f"{len(est)} points to {to_bits:.1f} bits, {getattr(m.enum, 'confidence', 0.95):.0%} intervals "
                f"({args.samples:,} draws beyond the exact head), both panels")
    elif whole:
        band = "none (the whole support is plotted exactly)"
    elif not plot.estimator_available(m.enum):
        band = "none (no Monte Carlo estimator installed)"
    else:
        band = "none (--estimate-bits is inside the exact region)" if not warnings else "none"
    text = kv([("wrote", f"{args.out} ({size:,} bytes)"),
                ("exact", f"{len(exact)} points, ranks 1..{exact[-1].count:,}, down to {b0:.2f} bits; "
                          f"the top {exact[-1].count:,} hold mass {exact[-1].mass_lo:.6f}"),
                ("estimate", band)] + [("marks", n) for n in notes] + [("cost", cline)]) + warnings
    return Output(doc, text)
