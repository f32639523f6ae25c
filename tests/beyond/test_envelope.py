"""The envelope index against the exact index and brute force."""
from __future__ import annotations

import math
from collections import defaultdict

import numpy as np
import pytest

from arenum import AutoregressiveEnumerable, Quantizer
from arenum.beyond.envelope import SEARCH_FORWARDS, AREnvelopeIndex
from arenum.beyond.rescore import RescoredIndex
from arenum.testing import RandomModel, brute_force


class Independent:
    """A model whose step table never depends on the prefix (optionally a different table per depth)."""

    def __init__(self, V: int, seed: int, *, eos=None, per_depth: bool = False, peak: float = 1.2):
        self.rng = np.random.default_rng(seed)
        self.V, self.eos, self.per_depth, self.peak = V, eos, per_depth, peak
        self.rows: dict[int, np.ndarray] = {}

    def logprobs(self, prefix) -> np.ndarray:
        d = len(prefix) if self.per_depth else 0
        if d not in self.rows:
            w = np.exp(self.peak * self.rng.standard_normal(self.V))
            if self.eos is not None:
                w[self.eos] *= 2.0
            self.rows[d] = np.log(w) - np.log(w.sum())
        return self.rows[d]

    def __call__(self, prefix):
        return self.logprobs(prefix).copy()

    def table(self, prefix):
        lp = self.logprobs(prefix)
        o = np.argsort(-lp, kind="stable")
        return [int(i) for i in o], [float(lp[i]) for i in o]


def _support(m, term, L):
    return brute_force(m.table, fixed_len=None if term else L, eos=0 if term else None, cap=L)


@pytest.mark.parametrize("V,L,term,per_depth,seed", [
    (5, 5, False, False, 1), (3, 7, False, True, 2), (6, 4, True, False, 3), (4, 6, True, True, 4),
    (8, 3, False, True, 5),
])
def test_envelope_equals_the_exact_index_on_prefix_independent_models(V, L, term, per_depth, seed):
    m = Independent(V, seed, eos=0 if term else None, per_depth=per_depth)
    ar = AutoregressiveEnumerable(m, max_len=L, eos=0 if term else None)
    bf = _support(m, term, L)
    n = len(bf)
    env = ar.envelope_index(n_paths=8, budget_bits=4.0)  # small budget: deepens on demand
    for k in range(1, n + 1, max(1, n // 200)):
        assert env.threshold(k) == ar.threshold(k) == bf[k - 1][1]
    for seq, t in bf[:: max(1, n // 200)]:
        assert env.count(t) == ar.count(t)
        assert env.count(t - 1e-9) == ar.count(t - 1e-9)
    assert env.exact_atoms
    env._check()
    # unrank: every bucket's ranks give exactly that bucket's sequences, with exact log-probs
    q = ar.quantizer
    want, got = defaultdict(set), defaultdict(set)
    for i, (seq, s) in enumerate(bf):
        want[q.fine_bucket(s)].add(seq)
        es, lp = env.unrank(i)
        fb, _ = env.bucket_of_rank(i)
        assert q.fine_bucket(lp) == fb == q.fine_bucket(s)
        assert lp == ar.log_density(es)
        got[fb].add(es)
    assert got == want
    with pytest.raises(IndexError):
        env.unrank(n)


def test_unrank_walks_the_real_model_with_O_L_forwards():
    m = RandomModel(7, seed=11, peak=1.0, eos=0, eos_boost=2.0, form="dense")
    L = 6
    ar = AutoregressiveEnumerable(m, eos=0, max_len=L)
    bf = _support(m, True, L)
    env = ar.envelope_index(n_paths=32, seed=1)
    exact = dict(bf)
    out = []
    for i in range(0, len(bf), len(bf) // 300):
        f = ar.stats["forwards"]
        seq, lp = env.unrank(i)
        # one forward per step at most (memoized), plus the search when the walk missed its bucket
        assert ar.stats["forwards"] - f <= L + SEARCH_FORWARDS
        assert exact[seq] == lp  # a real support sequence with its exact log-prob
        out.append((i, seq, lp))
    distinct = len({s for _, s, _ in out})
    assert distinct >= 0.9 * len(out)
    # bucket order, as far as the estimate allows: the returned scores follow the ranks
    scores = np.array([x for _, x in bf])
    true_rank = np.array([(scores > lp).sum() for _, _, lp in out])
    idx = np.array([i for i, _, _ in out])
    err = np.abs(np.log10((true_rank + 1) / (idx + 1)))
    assert np.median(err) < 0.15 and np.quantile(err, 0.9) < 0.6, (np.median(err), np.quantile(err, 0.9))
    env._check()


@pytest.mark.parametrize("term", [False, True])
def test_counts_track_the_exact_index_on_random_models(term):
    m = RandomModel(6, seed=3, peak=1.0, eos=0 if term else None, eos_boost=2.0, form="dense")
    L = 7 if term else 6
    ar = AutoregressiveEnumerable(m, max_len=L, eos=0 if term else None)
    bf = _support(m, term, L)
    env = ar.envelope_index(n_paths=64, seed=0, budget_bits=8.0)
    for k in (10, 100, 1000, len(bf) // 3):
        t = bf[k][1]
        true = sum(1 for _, s in bf if s >= t)
        c = env.count(t)
        assert not c.exact and c.method == "envelope" and c.ci_lo <= true <= c.ci_hi
        assert abs(math.log10(c.estimate / true)) < 0.1, (k, c.estimate, true)
        th = env.threshold(k + 1)
        assert abs(th - t) / math.log(2) < 1.0 and th.method == "envelope"
    assert env.budget_bits > 8.0  # deepened on demand


def test_deepens_on_demand_and_never_raises_inside_the_support():
    m = RandomModel(4, seed=5, peak=1.5, form="dense")
    ar = AutoregressiveEnumerable(m, max_len=8)
    env = ar.envelope_index(n_paths=16, budget_bits=2.0)
    n = 4**8
    for i in (0, 10, 1000, n // 2, n - 1):
        seq, lp = env.unrank(i)
        assert len(seq) == 8 and lp == ar.log_density(seq)
    with pytest.raises(IndexError):
        env.unrank(n)
    assert ar.envelope_index(n_paths=16) is env


def test_grid_mode_on_a_wide_model():
    m = RandomModel(40, seed=2, peak=2.0, form="dense")
    ar = AutoregressiveEnumerable(m, max_len=5)
    env = ar.envelope_index(n_paths=16, budget_bits=20.0)
    assert not env.exact_atoms
    exact = ar.count(-14 * math.log(2))
    c = env.count(-14 * math.log(2))
    assert abs(math.log10(c.estimate / exact)) < 0.3
    seq, lp = env.unrank(5000)
    assert lp == ar.log_density(seq)


def test_declares_bucket_order_only_and_rescoring_never_certifies():
    m = RandomModel(5, seed=1, peak=1.0, form="dense")
    ar = AutoregressiveEnumerable(m, max_len=4)
    env = ar.envelope_index(n_paths=8)
    assert isinstance(env, AREnvelopeIndex)
    assert env.exact_order is False and isinstance(env.quantizer, Quantizer)
    assert env.quantizer is ar.quantizer and env.dropped_upper == math.inf
    fb = env.quantizer.fine_bucket(-1.0)
    lo, hi = env.quantizer.bucket_log_prob_bounds(fb)
    assert lo < -1.0 <= hi
    target = lambda seqs: [ar.log_density(s) for s in seqs]  # noqa: E731
    r = RescoredIndex(env, target, rerank_window=4, assumed_gap=1.0).top_k(3)
    assert len(r.items) == 3 and r.certified is False


def test_validation():
    m = RandomModel(3, seed=1)
    ar = AutoregressiveEnumerable(m, max_len=3)
    with pytest.raises(ValueError, match="n_paths"):
        ar.envelope_index(n_paths=0)
    with pytest.raises(ValueError, match="budget_bits"):
        ar.envelope_index(budget_bits=-1.0)
    with pytest.raises(TypeError, match="budget_bits"):
        ar.envelope_index(budget_bits="8")
    env = ar.envelope_index()
    with pytest.raises(ValueError, match="rank must be >= 1"):
        env.threshold(0)
    with pytest.raises(IndexError, match="i must be >= 0"):
        env.unrank(-1)
    assert env.count(0.5) == 0


# ---------------------------------------------------------------------- parity with the seed's surface
def test_iid_unrank_is_in_the_exact_order():
    """A 7-token, length-5 iid model: the first 1,000 unranks are the exact index's sequences."""
    m = Independent(7, seed=7)
    ar = AutoregressiveEnumerable(m, max_len=5)
    env = ar.envelope_index(n_paths=5, budget_bits=4.0)
    exact = ar.slice(0, 1000)
    got = [env.unrank(i) for i in range(1000)]
    assert [g[0] for g in got] == [e[0] for e in exact]
    assert [g[1] for g in got] == [e[1] for e in exact]
    assert got[3].rank == 3 and got[3].value == exact[3][0] and got[3].method == "exact_order"
    assert env.seek(17) == ar.unrank(17) and env.tables_agree


@pytest.mark.parametrize("term,per_depth", [(False, True), (True, False), (True, True)])
def test_iid_exact_order_all_ranks_with_ties(term, per_depth):
    m = Independent(4, seed=9, eos=0 if term else None, per_depth=per_depth)
    m.rows[0] = np.log(np.array([0.25, 0.25, 0.25, 0.25]))  # many exact ties
    L = 5
    ar = AutoregressiveEnumerable(m, max_len=L, eos=0 if term else None)
    bf = _support(m, term, L)
    env = ar.envelope_index(n_paths=3)
    assert [tuple(env.unrank(i)) for i in range(len(bf))] == [(s, x) for s, x in bf]
    with pytest.raises(IndexError):
        env.unrank(len(bf))


def test_rank_bracket_mass_above_size_total_ensure_bits():
    m = Independent(5, seed=3, per_depth=True)
    ar = AutoregressiveEnumerable(m, max_len=4)
    bf = _support(m, False, 4)
    env = ar.envelope_index(n_paths=4, budget_bits=2.0)
    for seq, s in bf[::37]:
        r = env.rank_bracket(seq)
        assert r.rank == ar.rank(seq).rank and r.rank_lo <= r.rank <= r.rank_hi
        lo, hi = r
        assert lo <= ar.rank(seq).rank <= hi
        assert r.log_prob == s and r.method == "envelope" and not r.exact
        assert r.cumulative == pytest.approx(ar.rank(seq).cumulative, rel=1e-12)
    for _, t in bf[::53]:
        mb, true = env.mass_above(t), ar.mass_above(t)
        assert mb.lo <= true.hi and true.lo <= mb.hi and mb.method == "envelope" and not mb.exact
        assert mb.lower == mb.lo and mb.upper == mb.hi
    env2 = ar.envelope_index(n_paths=3, budget_bits=1.0)
    b0 = env2.budget_bits
    assert env2.ensure_bits(30.0) is env2 and env2.budget_bits == 30.0 > b0
    assert env2.size() == env2.total() == 5**4 and callable(env2.total)
    with pytest.raises(ValueError, match="bits"):
        env2.ensure_bits(0)
    with pytest.raises(ValueError, match="outside the support"):
        env.rank_bracket((0, 1))


def test_calibration_sequences():
    m = Independent(5, seed=4)
    ar = AutoregressiveEnumerable(m, max_len=4)
    cal = [seq for seq, _ in _support(m, False, 4)[:6]]
    env = ar.envelope_index(calibration_sequences=cal)
    assert env.n_paths == 6 and env.unrank(10) == ar.unrank(10) and env.count(-4.0) == ar.count(-4.0)
    with pytest.raises(ValueError, match="length 4"):
        ar.envelope_index(calibration_sequences=[(0, 1, 2)])
    with pytest.raises(ValueError, match="at least one"):
        ar.envelope_index(calibration_sequences=[])
    # terminating: contexts from real sequences, continued past their end by sampling
    r = RandomModel(5, seed=8, peak=1.0, eos=0, eos_boost=2.0, form="dense")
    art = AutoregressiveEnumerable(r, eos=0, max_len=6)
    seqs = [s for s, _ in _support(r, True, 6)[:20]]
    env = art.envelope_index(calibration_sequences=seqs, budget_bits=10.0)
    assert env.n_paths == 20 and env._forced[0] == seqs[0][:-1]
    c, true = env.count(-6.0), art.count(-6.0)
    assert abs(math.log10(c.estimate / true)) < 0.3
    seq, lp = env.unrank(50)
    assert lp == art.log_density(seq)
    with pytest.raises(ValueError, match="ending in eos"):
        art.envelope_index(calibration_sequences=[(1, 2)])


def test_seed_style_construction_and_names():
    from arenum import CountBracket, CountDPTopPResult, DensityRankResult, LatticeEnvelopeIndex, MassBracket

    m = Independent(4, seed=2)
    ar = AutoregressiveEnumerable(m, max_len=3)
    env = AREnvelopeIndex(ar, n_paths=4)
    assert env.unrank(5) == ar.unrank(5) and env.total() == 64
    lat = LatticeEnvelopeIndex(ar, n_clusters=2, n_paths=2)
    assert lat.unrank(7) == ar.unrank(7) and lat.size() == 64
    with pytest.raises(TypeError, match="AutoregressiveEnumerable"):
        AREnvelopeIndex(object())
    # seek(i) is the rank lookup everywhere; seek_mass(p) the mass query
    r = ar.seek(3)
    assert (r.value, r.rank, r.log_prob) == (ar.unrank(3)[0], 3, ar.unrank(3)[1]) and r.exact
    with pytest.raises(IndexError):
        ar.seek(-1)
    with pytest.raises(IndexError):
        ar.seek(64)
    sm = ar.seek_mass(0.5)
    assert sm.rank == ar.nucleus_size(0.5).size - 1
    # the seed's field names
    n = ar.nucleus_size(0.5)
    assert isinstance(n, CountDPTopPResult) and (n.size_lower, n.size_upper) == (n.size_lo, n.size_hi)
    assert (n.mass_lower, n.mass_upper) == (n.mass_lo, n.mass_hi)
    rk = ar.rank(ar.unrank(9)[0])
    assert isinstance(rk, DensityRankResult) and (rk.rank_lower, rk.rank_upper) == (rk.rank_lo, rk.rank_hi)
    assert (rk.cumulative_lower, rk.cumulative_upper) == (rk.cumulative_lo, rk.cumulative_hi)
    mb = ar.mass_above(-2.0)
    assert isinstance(mb, MassBracket) and (mb.lower, mb.upper) == tuple(mb) and mb.exact
    cb = ar.count_bracket(-2.0)
    assert isinstance(cb, CountBracket) and (cb.lower, cb.upper) == tuple(cb)
    assert ar.quantizer.fine_per_bit() == 1 / ar.quantizer.fine_width_bits
