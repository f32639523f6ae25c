"""What the certified count DPs hold in memory (issue 27 target 5): ``prepare_counts`` builds the two
roundings one after the other and releases each one's step tables and rings, keeping its row; the
answers are a fresh counter's, they hold brute force, and a deeper query rebuilds from cell 0.
``arenum eval``'s curves use it for the lines past the caps (the same records)."""
from __future__ import annotations

import itertools
import random

import numpy as np
import pytest

from arenum.beyond import CertifiedCounter
from arenum.beyond import certified
from arenum.models import NGramModel
from arenum.report import curves, guessing_curve
from arenum.support import Support


def _model(seed: int) -> NGramModel:
    rng = random.Random(seed)
    words = ["".join(rng.choice("abc") for _ in range(rng.randint(1, 5))) for _ in range(50)]
    return NGramModel.fit(words, order=rng.choice([2, 3]), smoothing=rng.choice(["kn", "wb"]))


def _brute(m: NGramModel, cap: int) -> np.ndarray:
    toks = [t for t in range(m.vocab_size) if t != m.eos]
    return m.score_sequences([t + (m.eos,) for n in range(cap) for t in itertools.product(toks, repeat=n)])


def _answers(cc: CertifiedCounter, ts) -> list:
    return [(b.lo, b.hi) for t in ts for b in (cc.count_bracket(t), cc.rank_bracket(t))] + [cc.count_lower(t) for t in ts]


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("jit", ["numba", "numpy"])
@pytest.mark.parametrize("cap", [6, 400])  # 6: brute force (the per-length sweep when it binds); 400: the rings
def test_prepare_counts_releases_the_tables_and_answers_the_same(monkeypatch, seed, jit, cap):
    if jit == "numpy":
        monkeypatch.setattr(certified, "_compiled_sweep", lambda progress=None: None)
    m = _model(seed)
    sup = Support.terminating(m.eos, m.eos, cap)
    t0 = -25.0
    ts = [float(x) for x in np.linspace(-0.5, t0, 12)]
    deeper = [t0 - 8.0, t0 - 20.0]
    fresh = CertifiedCounter(m.finite_state(), sup, resolution_bits=1 / 16)
    want = _answers(fresh, ts + deeper)
    want_ts = _answers(fresh, ts)
    cc = CertifiedCounter(m.finite_state(), sup, resolution_bits=1 / 16)
    cc.prepare_counts(t0)
    counts = {k: sw for k, sw in cc._sweeps.items() if not k[1]}
    assert {k[0] for k in counts} == {True, False} and not cc._sweeps.keys() - counts.keys()
    assert all(sw.ring is None and sw.N is None for sw in counts.values()) and not dict.keys(cc._edges)
    assert cc.stats["bytes"] == sum(sw.row.nbytes for sw in counts.values())  # the rows alone
    K = {k: sw.K for k, sw in counts.items()}
    assert _answers(cc, ts) == want_ts
    if cap == 400:  # one-pass sweeps answer every shallower cell (a binding cap picks a sweep per depth)
        assert {k: sw.K for k, sw in counts.items()} == K and not dict.keys(cc._edges)  # no growth, no tables
    assert _answers(cc, ts + deeper) == want  # deeper: rebuilt from cell 0, the same values
    if cap == 6:
        sc = _brute(m, cap)
        for t, (lo, hi) in zip(ts + deeper, want[0: 2 * len(ts + deeper): 2]):
            assert lo <= int((sc >= t).sum()) <= hi
    with pytest.raises(ValueError, match="t"):
        cc.prepare_counts(float("nan"))


def test_eval_curve_builds_the_counts_once_one_rounding_at_a_time(monkeypatch):
    """The guessing curve past the caps: the same records as ranking with both DPs grown as the
    ranks deepen, and the count DPs released after (one sweep each to the least probable line)."""
    rng = random.Random(3)
    m = NGramModel.fit(["".join(rng.choice("abcd") for _ in range(rng.randint(1, 6))) for _ in range(60)],
                       order=3, smoothing="kn")
    lines = ["a", "ab", "dcbad", "ddddcc", "abcd", "cccccc", "b", "bdca", "dddd", "cabd", "aaaaaa", "dcdcdc"]
    seqs = [m.encode(w) for w in lines]
    got_e = m.enumerable(max_prefixes=40)
    got = guessing_curve(got_e, seqs, labels=lines, estimate=False)
    monkeypatch.setattr(curves, "_prepare_certified", lambda enum, deepest: None)
    want_e = m.enumerable(max_prefixes=40)
    want = guessing_curve(want_e, seqs, labels=lines, estimate=False)
    key = [(it.label, it.rank, it.rank_lo, it.rank_hi, it.cert_lo, it.cert_hi, it.method) for it in got.items]
    assert key == [(it.label, it.rank, it.rank_lo, it.rank_hi, it.cert_lo, it.cert_hi, it.method) for it in want.items]
    assert {"certified"} <= {it.method for it in got.items}
    sweeps = got_e.certified()._sweeps
    assert sweeps and all(sw.ring is None and sw.N is None for sw in sweeps.values())
    assert any(sw.ring is not None or sw.N is not None for sw in want_e.certified()._sweeps.values())


class _EagerSteps(certified.LazySteps):
    """The step tables as first written: int64 cells, every probability made at once."""

    def __missing__(self, lower):
        import math

        from arenum.beyond.certified_steps import StepEdges, merged_steps

        _, lp, nxt, _ = self.tables.step_tables(self.terminating)
        possible = lp > -math.inf
        cost = (np.ceil if lower else np.floor)(np.where(possible, -lp, 0.0) / self.delta).astype(np.int64)
        prob = np.where(possible, np.exp(lp), 0.0)
        e = self[lower] = StepEdges(*merged_steps(np.where(possible, nxt, 0).astype(np.int32), cost, prob, possible, lower),
                                    self.B)
        return e


def _shallow_then_deepest(cc: CertifiedCounter, ts, mass: bool) -> None:
    """Grow ``cc``'s count (or mass) DPs to the first threshold, then to the last, before every
    threshold is asked in order: a DP the cap binds is counted length by length from cell 0, so asked
    deeper and deeper it was built again, 1.5x deeper each time (three or four builds, about twice
    the cells of the last: 40% of this test's time); now once to the last threshold's cell, the same
    values. The DPs the cap does not bind still grow threshold by threshold, and every bracket is
    asked and compared as before."""
    for t in (ts[0], ts[-1]):
        (cc.mass_bracket if mass else cc.count_bracket)(t)


def _all_brackets(cc: CertifiedCounter, ts) -> list:
    out = [(b.lo, b.hi) for t in ts for b in (cc.count_bracket(t), cc.rank_bracket(t))]
    out += [(b.lo, b.hi) for t in ts[::3] for b in (cc.mass_bracket(t),)]
    return out + [cc.threshold_bracket(k) for k in (1, 10, 1000)]


@pytest.mark.parametrize("jit", ["numba", "numpy"])
def test_lean_step_tables_give_the_same_brackets_under_each_preset(monkeypatch, jit):
    """int32 cells and indices, probabilities made only when a mass DP (or merged steps) reads them:
    every bracket bit for bit the eager tables' under each policy preset, a count DP never makes the
    probabilities, and the brackets hold the brute-forced truth of a short cap."""
    from arenum import why_rejected
    from arenum.constraints import PRESETS, Policy, policy

    if jit == "numpy":
        monkeypatch.setattr(certified, "_compiled_sweep", lambda progress=None: None)
    m = NGramModel.fit(["Pass1!", "abc12", "Xy#9z", "summer", "Abc!2", "dragon1", "P@ss", "Zz1!", "A1b2C3", "quiz", "queen",
                        "quote", "q1!", "quit"], order=2)  # "u" after "q": a step of about 0.9, rounded to 0 at 1 bit
    ts = [float(t) for t in np.linspace(-1.0, -45.0, 10)]
    unmerged, zero = 0, False
    for c in [None] + [policy(n) for n in sorted(PRESETS)] + [Policy(min_len=3, min_classes=2)]:
        short = c is not None and c.name == "policy(min_len=3, classes>=2)"
        ar = m.enumerable(max_len=5 if short else 15, constraint=c)
        fs = ar.finite_state_tables()
        res = 1.0 if c is None else 1 / 4  # 1 bit: likely steps round down to zero cells (resolved in a cell)
        lean = CertifiedCounter(fs, ar.support, resolution_bits=res, max_bits=70)
        eager = CertifiedCounter(fs, ar.support, resolution_bits=res, max_bits=70)
        eager._edges = _EagerSteps(fs, True, eager.delta, eager.block)
        _shallow_then_deepest(lean, ts, mass=False)
        counts = [(b.lo, b.hi) for t in ts for b in (lean.count_bracket(t),)]
        e = lean._edges[True]
        if e.weight is None:  # merged steps need their probabilities at once
            unmerged += 1
            assert callable(e._prob) and e._c_prob is None, c  # the counts never made the probabilities
        assert e.cost.dtype == e.c_src.dtype == e.c_cost.dtype == e.by_target[0].dtype == np.int32
        for cc in (lean, eager):
            _shallow_then_deepest(cc, ts, mass=False)
            _shallow_then_deepest(cc, ts[::3], mass=True)  # the thresholds _all_brackets asks the masses at
        assert _all_brackets(lean, ts) == _all_brackets(eager, ts), c
        zero |= bool(lean._edges[False].c_zero.any())
        assert counts == [(b.lo, b.hi) for t in ts for b in (eager.count_bracket(t),)]
        if short:  # brute force: every sequence of the support, filtered
            toks = [t for t in range(m.vocab_size) if t != m.eos]
            seqs = [x + (m.eos,) for n in range(5) for x in itertools.product(toks, repeat=n)
                    if why_rejected(c, m.decode(x)) is None]
            sc = np.asarray(m.score_sequences(seqs))
            for t in ts:
                b = lean.count_bracket(t)
                assert b.lo <= int((sc >= t).sum()) <= b.hi
    assert unmerged >= 2 and zero  # the plain n-gram and some products keep their tables unmerged
