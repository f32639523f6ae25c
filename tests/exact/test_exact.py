"""Every query against brute-force enumeration on seeded random models."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from arenum import AutoregressiveEnumerable
from arenum.testing import RandomModel, brute_force

CASES = [
    # (vocab, length, terminating, peak, ties, form)
    (2, 5, False, 1.0, False, "pairs"),
    (3, 4, False, 0.3, False, "dense"),
    (5, 3, False, 2.5, False, "arrays"),
    (8, 3, False, 1.0, True, "pairs"),
    (16, 2, False, 1.5, False, "dense"),
    (64, 2, False, 2.0, False, "dense"),
    (4, 5, True, 1.0, False, "pairs"),
    (3, 5, True, 0.0, False, "dense"),  # flat: massive exact ties
    (6, 4, True, 2.0, True, "arrays"),
    (2, 4, False, 0.0, False, "pairs"),  # uniform: everything ties
]
STRING_VOCAB = ["a", "b", "c", "<eos>"]


def _make(V, L, term, peak, ties, form, seed=0, vocab=None):
    voc = vocab if vocab is not None else V
    eos = (voc[-1] if vocab is not None else 0) if term else None
    m = RandomModel(voc, seed=seed, peak=peak, ties=ties, eos=eos, eos_boost=2.0, form=form)
    bf = brute_force(m.table, fixed_len=None if term else L, eos=eos, cap=L)
    mk = lambda **kw: AutoregressiveEnumerable(m, max_len=L, eos=eos, **kw)  # noqa: E731
    return m, bf, mk


def _count(bf, t):
    return sum(1 for _, s in bf if s >= t)


@pytest.mark.parametrize("case", CASES, ids=lambda c: "V%d-L%d-%s-p%s-%s-%s" % (c[0], c[1], "term" if c[2] else "fix", c[3], "ties" if c[4] else "", c[5]))
def test_all_queries_match_brute_force(case):
    V, L, term, peak, ties, form = case
    m, bf, mk = _make(*case, seed=V * 31 + L)
    n = len(bf)
    scores = [s for _, s in bf]
    # unrank, threshold, slice, top_k
    ar = mk()
    for i in range(n):
        assert ar.unrank(i) == bf[i]
    with pytest.raises(IndexError):
        ar.unrank(n)
    assert ar.slice(0, n + 5) == bf
    assert ar.slice(n // 3, 7) == bf[n // 3 : n // 3 + 7]
    for k in (1, 2, n // 2, n):
        assert ar.threshold(k) == scores[k - 1]
    assert mk().top_k(min(n, 25)) == bf[:25]
    ar._check()
    # count at every distinct score, between scores, and beyond
    ar = mk()
    ts = sorted(set(scores), reverse=True)
    probe = ts[::3] + [0.5 * (a + b) for a, b in zip(ts[::4], ts[1::4])] + [0.0, 1.0, ts[-1] - 1.0, -math.inf]
    for t in probe:
        assert ar.count(t) == _count(bf, t), t
    ar._check()
    # rank and cumulative
    ar = mk()
    for seq, s in bf[:: max(1, n // 25)]:
        r = ar.rank(seq)
        assert r.exact and r.method == "exact"
        assert r.rank == sum(1 for _, x in bf if x > s)
        assert r.log_prob == s
        true_cum = math.fsum(math.exp(x) for _, x in bf if x >= s)
        assert r.cumulative_lo <= true_cum <= r.cumulative_hi
        assert r.cumulative_hi - r.cumulative_lo <= 1e-12
    # mass_above
    ar = mk()
    for t in probe:
        lo, hi = ar.mass_above(t)
        true = math.fsum(math.exp(x) for _, x in bf if x >= t)
        assert lo <= true <= hi and hi - lo <= 1e-12
    # nucleus_size and seek
    ar = mk()
    cum = np.cumsum([math.exp(s) for s in scores])
    for p in (0.01, 0.3, 0.5, 0.9, 0.999):
        r = ar.nucleus_size(p)
        if cum[-1] < p * (1 - 1e-12):  # the declared support holds less than p
            assert r.truncated and r.size_hi is None
            continue
        true = int(np.searchsorted(cum, p, side="left")) + 1
        assert r.size_lo <= true <= r.size_hi, (p, r, true)
        assert not r.truncated
        sk = ar.seek_mass(p)
        assert sk.rank == r.size_lo - 1 and sk.sequence == bf[sk.rank][0]


def test_no_ties_rank_unrank_roundtrip():
    m, bf, mk = _make(7, 3, False, 1.3, False, "dense", seed=5)
    assert len({s for _, s in bf}) == len(bf)
    ar = mk()
    for i in range(0, len(bf), 11):
        seq, _ = ar.unrank(i)
        assert ar.rank(seq).rank == i


def test_string_tokens():
    m, bf, mk = _make(4, 5, True, 1.0, False, "pairs", seed=3, vocab=STRING_VOCAB)
    ar = mk()
    assert ar.slice(0, len(bf)) == bf
    assert all(isinstance(t, str) for t in ar.unrank(3)[0])
    seq, s = bf[17]
    assert ar.rank(list(seq)).rank == sum(1 for _, x in bf if x > s)
    assert ar.log_density(seq) == s


def test_terminating_depth_cap_truncation_flag():
    # a model that rarely ends: the cap binds and the support is cut
    m = RandomModel(3, seed=1, peak=0.5, eos=0, eos_boost=0.05)
    ar = AutoregressiveEnumerable(m, eos=0, max_depth=3)
    bf = brute_force(m.table, eos=0, cap=3)
    assert ar.slice(0, 100) == bf[:100]
    assert ar.seek_index().truncated
    assert ar.log_density((1, 1, 1, 0)) == -math.inf  # past the depth cap


def test_log_density_and_score_sequences_match_brute_force():
    m, bf, mk = _make(5, 3, False, 1.0, False, "pairs", seed=9)
    ar = mk()
    seqs = [q for q, _ in bf[::13]] + [(0, 1), (0, 1, 2, 3)]
    got = ar.score_sequences(seqs)
    want = [s for _, s in bf[::13]] + [-math.inf, -math.inf]
    assert got.tolist() == want
    assert ar.log_density(bf[4][0]) == bf[4][1]


@settings(max_examples=25, deadline=None)
@given(
    V=st.integers(2, 6),
    L=st.integers(1, 4),
    term=st.booleans(),
    peak=st.sampled_from([0.0, 0.5, 1.5, 3.0]),
    ties=st.booleans(),
    seed=st.integers(0, 10_000),
    data=st.data(),
)
def test_property_random_models(V, L, term, peak, ties, seed, data):
    if term and L < 1:
        return
    m, bf, mk = _make(V, L, term, peak, ties, "dense", seed=seed)
    ar = mk()
    n = len(bf)
    if n == 0:
        with pytest.raises(IndexError):
            ar.unrank(0)
        return
    i = data.draw(st.integers(0, n - 1))
    assert ar.unrank(i) == bf[i]
    t = bf[data.draw(st.integers(0, n - 1))][1]
    assert ar.count(t) == _count(bf, t)
    seq, s = bf[data.draw(st.integers(0, n - 1))]
    assert ar.rank(seq).rank == sum(1 for _, x in bf if x > s)
    ar._check()


def test_past_the_support_errors_name_the_callers_position():
    """``threshold`` speaks of the caller's 1-based k, ``unrank`` of its 0-based rank."""
    from arenum import AutoregressiveEnumerable
    from arenum.testing import RandomModel

    ar = AutoregressiveEnumerable(RandomModel(list(range(3)), seed=1), max_len=2)
    with pytest.raises(IndexError, match=r"^k=100 \(1-based\) is beyond the support \(9 sequences\)$"):
        ar.threshold(100)
    with pytest.raises(IndexError, match=r"^rank 99 is beyond the support \(9 sequences\)$"):
        ar.unrank(99)
    ar._check()
