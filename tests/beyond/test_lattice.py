"""The Markov-refined (lattice) envelope: exact on models whose table depends on (depth, cluster of
the last token), checked against the exact index and brute force."""
from __future__ import annotations

import math
import zlib

import numpy as np
import pytest

from arenum import AutoregressiveEnumerable
from arenum.beyond.lattice import LatticeEnvelopeIndex
from arenum.testing import RandomModel, brute_force


class Markov:
    """Next-token table depends only on (depth, cluster(last token)); cluster = token % K (K=None: the token)."""

    def __init__(self, V: int, seed: int, *, K: int | None = None, eos=None, peak: float = 1.3, ties=False):
        self.V, self.seed, self.K, self.eos, self.peak, self.ties = V, seed, K, eos, peak, ties

    def logprobs(self, prefix):
        last = prefix[-1] if prefix else -1
        c = last if (self.K is None or last < 0) else last % self.K
        rng = np.random.default_rng(zlib.crc32(repr((self.seed, len(prefix), c)).encode()))
        if self.ties:
            w = 2.0 ** -rng.integers(0, 2, size=self.V).astype(float)
        else:
            w = np.exp(self.peak * rng.standard_normal(self.V))
        if self.eos is not None:
            w[self.eos] *= 2.0
        return np.log(w) - np.log(w.sum())

    def __call__(self, prefix):
        return self.logprobs(prefix)

    def table(self, prefix):
        lp = self.logprobs(prefix)
        o = np.argsort(-lp, kind="stable")
        return [int(i) for i in o], [float(lp[i]) for i in o]


CASES = [  # V, L, terminating, K (model's clusters), index's clusters
    (5, 5, False, None, {"cluster_fn": lambda t: t}),
    (4, 6, True, None, {"cluster_fn": lambda t: t}),
    (6, 4, False, 3, {"n_clusters": 3}),
    (6, 5, True, 2, {"cluster_fn": lambda t: t % 2}),
    (6, 4, False, 2, {"n_clusters": 6}),  # finer clusters than the model needs: still exact
]


@pytest.mark.parametrize("V,L,term,K,kw", CASES)
def test_lattice_equals_the_exact_index_on_markov_models(V, L, term, K, kw):
    m = Markov(V, seed=V + L, K=K, eos=0 if term else None)
    ar = AutoregressiveEnumerable(m, max_len=L, eos=0 if term else None)
    bf = brute_force(m.table, fixed_len=None if term else L, eos=0 if term else None, cap=L)
    n = len(bf)
    env = ar.envelope_index(n_paths=2, budget_bits=3.0, **kw)
    assert isinstance(env, LatticeEnvelopeIndex)
    step = max(1, n // 150)
    for k in range(1, n + 1, step):
        assert env.threshold(k) == bf[k - 1][1]
    for seq, t in bf[::step]:
        assert env.count(t) == ar.count(t)
        assert env.rank_bracket(seq).rank == ar.rank(seq).rank
        mb, true = env.mass_above(t), ar.mass_above(t)
        assert mb.lo <= true.hi and true.lo <= mb.hi
    got = [tuple(env.unrank(i)) for i in range(0, n, step)]
    assert got == [bf[i] for i in range(0, n, step)]
    env.ensure_bits(-bf[-1][1] / math.log(2) + 1)
    assert env.size() == n and env.tables_agree and env.exact_atoms
    with pytest.raises(IndexError):
        env.unrank(n)
    env._check()


def test_lattice_with_ties_all_ranks():
    m = Markov(4, seed=2, ties=True, eos=0)
    ar = AutoregressiveEnumerable(m, eos=0, max_len=5)
    bf = brute_force(m.table, eos=0, cap=5)
    env = ar.envelope_index(n_clusters=4, n_paths=1)
    assert [tuple(env.unrank(i)) for i in range(len(bf))] == bf


def test_one_cluster_is_the_mean_field_envelope_and_more_clusters_help():
    m = RandomModel(6, seed=3, peak=1.2, form="dense")
    L = 5
    ar = AutoregressiveEnumerable(m, max_len=L)
    bf = brute_force(m.table, fixed_len=L)
    errs = {}
    for kw in ({"n_clusters": 1}, {"n_clusters": 6}):
        env = ar.envelope_index(n_paths=8, budget_bits=20.0, **kw)
        e = []
        for k in (30, 300, 3000):
            t = bf[k][1]
            e.append(abs(math.log10(env.count(t).estimate / ar.count(t))))
        errs[kw["n_clusters"]] = np.mean(e)
        seq, lp = env.unrank(1000)
        assert lp == ar.log_density(seq) and not env.tables_agree
    assert errs[1] < 0.3 and errs[6] < 0.3


def test_lattice_validation_and_cost():
    m = Markov(5, seed=1, K=5)
    ar = AutoregressiveEnumerable(m, max_len=4)
    with pytest.raises(ValueError, match="not both"):
        ar.envelope_index(n_clusters=2, cluster_fn=lambda t: t)
    with pytest.raises(ValueError, match="n_clusters"):
        ar.envelope_index(n_clusters=0)
    with pytest.raises(TypeError, match="cluster_fn"):
        ar.envelope_index(cluster_fn=3)
    f0 = ar.stats["forwards"]
    env = ar.envelope_index(n_clusters=5, n_paths=2)
    assert ar.stats["forwards"] - f0 <= 1 + 3 * 5 * 2  # n_paths per (depth, cluster)
    assert env.clusters_seen == 5 and "LatticeEnvelopeIndex" in repr(env)
    f1 = ar.stats["forwards"]
    seq, lp = env.unrank(100)
    assert ar.stats["forwards"] - f1 <= 4 and lp == ar.log_density(seq)
    with pytest.raises(IndexError):
        env.unrank(-1)


@pytest.mark.parametrize("seed", range(6))
def test_seeded_stress_every_rank_of_small_cluster_markov_models(seed):
    """Replayable: random (V, L, K, support, ties) per seed; every rank, count and rank_bracket."""
    rng = np.random.default_rng(seed)
    V, L, K = int(rng.integers(3, 6)), int(rng.integers(2, 5)), int(rng.integers(1, 4))
    term, ties = bool(rng.integers(0, 2)), bool(rng.integers(0, 2))
    m = Markov(V, seed=100 + seed, K=K, eos=0 if term else None, ties=ties)
    ar = AutoregressiveEnumerable(m, max_len=L, eos=0 if term else None)
    bf = brute_force(m.table, fixed_len=None if term else L, eos=0 if term else None, cap=L)
    env = ar.envelope_index(n_clusters=K, n_paths=int(rng.integers(1, 4)), budget_bits=2.0)
    assert [tuple(env.unrank(i)) for i in range(len(bf))] == bf
    for seq, t in bf:
        assert env.count(t) == ar.count(t) and env.rank_bracket(seq).rank == ar.rank(seq).rank


def test_lattice_calibration_sequences():
    m = Markov(5, seed=7, K=5, eos=0)
    ar = AutoregressiveEnumerable(m, eos=0, max_len=5)
    bf = brute_force(m.table, eos=0, cap=5)
    cal = [s for s, _ in bf[:10]]
    env = ar.envelope_index(cluster_fn=lambda t: t, n_paths=2, calibration_sequences=cal)
    assert env._calib[0] == cal[0][:-1]
    assert [tuple(env.unrank(i)) for i in range(0, len(bf), 7)] == bf[::7]  # still exact on a Markov model
    with pytest.raises(ValueError, match="ending in eos"):
        ar.envelope_index(n_clusters=2, calibration_sequences=[(1, 2)])
    # on a prefix-dependent model, contexts from real sequences: estimates, real sequences
    r = RandomModel(5, seed=2, peak=1.0, form="dense")
    ar2 = AutoregressiveEnumerable(r, max_len=4)
    seqs = [s for s, _ in brute_force(r.table, fixed_len=4)[:30]]
    env2 = ar2.envelope_index(n_clusters=5, n_paths=4, calibration_sequences=seqs)
    t = -5.0
    assert abs(math.log10(env2.count(t).estimate / ar2.count(t))) < 0.3
    seq, lp = env2.unrank(40)
    assert lp == ar2.log_density(seq)
