"""Answer fingerprint: every query's answer and the forwards it cost, on seeded models, as JSON.

Runs a fixed script of queries (count, count_bracket, threshold, unrank, slice, rank, mass_above,
nucleus_size, seek, top_k, estimates, envelope, rescoring) over seeded random models (fixed and
terminating, flat and peaked, ties, ``branch_cap``, ``exact_limit``) and over a small fitted n-gram,
recording each answer (floats as ``float.hex``) and ``stats["forwards"]`` after it. Two runs of
two versions of the code that print the same digest gave bit-identical answers at identical
forward counts: the check that a refactor changed nothing.

Run: ``python benchmarks/fingerprint.py [--out benchmarks/results/fingerprint.json]``; compare two
JSON files with ``python benchmarks/fingerprint.py --diff A.json B.json``.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import sys
from typing import Any

from arenum import AutoregressiveEnumerable, RescoredIndex
from arenum.models import NGramModel
from arenum.testing import RandomModel


def _enc(x: Any) -> Any:
    if isinstance(x, float):
        return float.hex(x)
    if isinstance(x, bool) or x is None or isinstance(x, str):
        return x
    if isinstance(x, int):
        return x
    if isinstance(x, dict):
        return {str(k): _enc(v) for k, v in sorted(x.items(), key=lambda kv: str(kv[0]))}
    if isinstance(x, (list, tuple)):
        return [_enc(v) for v in x]
    if hasattr(x, "__dataclass_fields__"):
        return {k: _enc(getattr(x, k)) for k in x.__dataclass_fields__}
    if hasattr(x, "item"):
        return _enc(x.item())
    return repr(x)


def _record(out: list, name: str, ar: Any, fn) -> None:
    try:
        val = fn()
        extra = {}
        for attr in ("exact", "method", "ci_lo", "ci_hi"):
            if hasattr(val, attr):
                extra[attr] = getattr(val, attr)
        ans: Any = {"value": val, **extra} if extra else val
    except Exception as exc:  # the error itself is part of the fingerprint
        ans = {"error": type(exc).__name__, "msg": str(exc)}
    fw = ar.stats["forwards"] if ar is not None else None
    out.append([name, _enc(ans), fw])


def _script(out: list, tag: str, ar: AutoregressiveEnumerable, sample_seqs: list) -> None:
    r = lambda n, f: _record(out, f"{tag}:{n}", ar, f)  # noqa: E731
    for k in (1, 7, 50, 300, 2000):
        r(f"threshold({k})", lambda k=k: ar.threshold(k))
    for t in (-1.0, -4.0, -8.0, -math.inf):
        r(f"count({t})", lambda t=t: ar.count(t))
        r(f"count_bracket({t})", lambda t=t: ar.count_bracket(t))
        r(f"mass_above({t})", lambda t=t: tuple(ar.mass_above(t)))
    for i in (0, 3, 99, 1234, 5000):
        r(f"unrank({i})", lambda i=i: ar.unrank(i))
    r("slice(10,15)", lambda: ar.slice(10, 15))
    for s in sample_seqs:
        r(f"rank({s})", lambda s=s: ar.rank(s))
    for p in (0.3, 0.9):
        r(f"nucleus({p})", lambda p=p: ar.nucleus_size(p))
        r(f"seek({p})", lambda p=p: ar.seek_mass(p))  # label kept from before the rename, so diffs line up
    r("top_k(20)", lambda: ar.top_k(20))
    r("log_density", lambda: [ar.log_density(s) for s in sample_seqs])
    r("quantized_count_index", lambda: ar.quantized_count_index(ar.quantizer, 40).total())


def run() -> list:
    out: list = []
    cases = [
        ("fixed-flat", dict(V=6, max_len=4, peak=0.5)),
        ("fixed-peaked", dict(V=8, max_len=4, peak=2.5)),
        ("fixed-ties", dict(V=5, max_len=4, ties=True)),
        ("term", dict(V=6, eos=0, max_len=6, peak=1.0, eos_boost=3.0)),
        ("term-ties", dict(V=5, eos=0, max_len=5, ties=True, eos_boost=2.0)),
        ("fixed-cap", dict(V=8, max_len=4, peak=1.0, branch_cap=3)),
        ("term-cap", dict(V=7, eos=0, max_len=5, peak=1.0, branch_cap=3, eos_boost=2.0)),
        ("fixed-limit", dict(V=8, max_len=5, peak=1.0, exact_limit=300)),
        ("term-limit", dict(V=6, eos=0, max_len=8, peak=1.0, exact_limit=200, eos_boost=2.0)),
    ]
    for tag, kw in cases:
        kw = dict(kw)
        V = kw.pop("V")
        eos = kw.pop("eos", None)
        m = RandomModel(V, seed=len(tag), peak=kw.pop("peak", 1.0), ties=kw.pop("ties", False), eos=eos,
                        eos_boost=kw.pop("eos_boost", 1.0))
        ar = AutoregressiveEnumerable(m, eos=eos, batch_next_logprobs=m.batch, batch_size=7, **kw)
        L = kw.get("max_len", 4)
        samples = [tuple([1] * (L - 1) + [0 if eos is not None else 2]), tuple([2, 1] + [0] * 0) if eos is None
                   else (2, 1, 0)]
        samples = [s for s in samples if (eos is None and len(s) == L) or (eos is not None)]
        _script(out, tag, ar, samples)
        if "exact_limit" in kw:
            mc = ar.monte_carlo(500, seed=3)
            _record(out, f"{tag}:mc.count", ar, lambda mc=mc: mc.count(-6.0))
            _record(out, f"{tag}:mc.threshold", ar, lambda mc=mc: mc.threshold(100))
        env = ar.envelope_index(n_paths=8, seed=1, budget_bits=12.0)
        _record(out, f"{tag}:env.count", ar, lambda env=env: env.count(-5.0))
        _record(out, f"{tag}:env.unrank", ar, lambda env=env: env.unrank(5))
        # not the timings, nor max_bytes ("auto": half the machine's memory), so that the digest is the machine's alone
        _record(out, f"{tag}:stats", ar, lambda: {k: v for k, v in ar.stats.items()
                                                  if "seconds" not in k and k != "max_bytes"})
    # deepening sweep on a fresh model: forwards after each query
    m = RandomModel(10, seed=11, peak=1.5)
    ar = AutoregressiveEnumerable(m, max_len=4, batch_next_logprobs=m.batch, batch_size=16)
    for r_ in (1, 10, 100, 1000, 5000, 9000):
        _record(out, f"sweep:count(threshold({r_}))", ar, lambda r_=r_: ar.count(ar.threshold(r_)))
    # rescoring over two random models
    d = RandomModel(6, seed=21, peak=1.0)
    t = RandomModel(6, seed=21, peak=1.2)
    da = AutoregressiveEnumerable(d, max_len=3)
    ta = AutoregressiveEnumerable(t, max_len=3)
    rx = RescoredIndex(da.seek_index(), ta, rerank_window=8, assumed_gap=2.0)
    _record(out, "rescore.top_k", ta, lambda: rx.top_k(10))
    _record(out, "rescore.slice", ta, lambda: rx.slice(5, 5))
    # a fitted n-gram
    words = [f"{a}{b}{c}" for a in "abcd" for b in "abca" for c in "xyzx"] * 3 + ["ab", "ba", "abcabc"]
    ng = NGramModel.fit(words, order=3)
    ar = ng.enumerable(max_len=6)
    _script(out, "ngram", ar, [ng.encode("abx"), ng.encode("ab")])
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results", "fingerprint.json"))
    ap.add_argument("--diff", nargs=2, metavar=("A", "B"), help="compare two fingerprint files and exit")
    a = ap.parse_args(argv)
    if a.diff:
        ra, rb = (json.load(open(p))["records"] for p in a.diff)
        bad = [(x, y) for x, y in zip(ra, rb) if x != y]
        if len(ra) != len(rb):
            print(f"different lengths: {len(ra)} vs {len(rb)}")
        for x, y in bad[:20]:
            print(f"- {x}\n+ {y}")
        print(f"{len(ra)} records, {len(bad)} differ")
        return 1 if bad or len(ra) != len(rb) else 0
    recs = run()
    digest = hashlib.sha256(json.dumps(recs).encode()).hexdigest()[:16]
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w") as fh:
        json.dump({"digest": digest, "records": recs}, fh, indent=0)
    print(f"{'query':58s} {'forwards':>9s}")
    for name, _, fw in recs:
        print(f"{name[:58]:58s} {fw if fw is not None else '-':>9}")
    print(f"{len(recs)} records, digest {digest}, written to {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
