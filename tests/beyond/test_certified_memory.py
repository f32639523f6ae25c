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
        monkeypatch.setattr(certified, "_compiled_sweep", lambda: None)
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
