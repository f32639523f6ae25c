"""Exact integer step widths, the row searches, and finite-state draws against brute force."""
from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest

from arenum.beyond.draws import (K_BITS, FiniteStateSampler, guide_search, guide_tables, log_width, quantize_rows,
                          row_search, scan_search, uniform_ints)
from arenum.beyond.estimate import MonteCarloEstimator
from arenum.models import NGramModel
from arenum.testing import brute_force


def test_quantized_widths_are_exact_and_keep_every_entry():
    rng = np.random.default_rng(0)
    p = rng.gamma(0.2, size=(50, 13))
    p[p < 1e-3] = 0.0
    p[:, 0] = 1e-30  # tiny but positive: still drawable
    p[3] *= 1e-200  # any scale per row
    w = quantize_rows(p)
    lq = log_width(w)
    assert (w.sum(axis=1) == 2.0**K_BITS).all() and (w == np.floor(w)).all()
    assert ((w >= 1) == (p > 0)).all()
    q = p / p.sum(axis=1, keepdims=True)
    assert np.allclose(np.exp(lq), q, atol=4 * 13 * 2.0 ** -52, rtol=0)  # the remainder goes to the largest
    with np.errstate(divide="ignore"):
        assert np.array_equal(lq, np.log(w.astype(float)) - K_BITS * math.log(2))
    with pytest.raises(ValueError, match="no entry of positive weight"):
        quantize_rows(np.zeros((1, 3)))


def test_row_searches_find_the_first_column_past_the_key():
    rng = np.random.default_rng(1)
    S, C = 40, 9
    p = rng.gamma(0.3, size=(S, C))
    p = -np.sort(-p, axis=1)
    p[:, -2:] = 0.0  # zero-width columns are never found
    w = quantize_rows(p)
    cum = np.cumsum(w, axis=1)
    state = rng.integers(0, S, size=5000)
    key = uniform_ints(rng, 5000)
    key[:S] = cum[np.arange(S), 0] - 1  # edges: the last integer of the first column
    key[S : 2 * S] = cum[np.arange(S), 0]  # and the first of the next one
    state[: 2 * S] = np.tile(np.arange(S), 2)
    want = np.array([int(np.searchsorted(cum[s], k, side="right")) for s, k in zip(state, key)])
    base = state * C
    assert np.array_equal(row_search(cum.reshape(-1), base, C, key), want)
    for scans in (0, 1, 3, 20):
        assert np.array_equal(scan_search(cum.reshape(-1), base, C, key, scans=scans), want)
    guide, g = guide_tables(cum)
    assert guide.shape == (S, 1 << g) and (1 << g) >= C
    assert np.array_equal(guide_search(cum.reshape(-1), guide.reshape(-1), g, state, C, key), want)
    assert (w.reshape(-1)[base + want] > 0).all()


def _model(term: bool):
    corpus = ["abba", "abc", "cab", "bca", "aab", "c", "bb", "acca"]
    return NGramModel.fit(corpus, order=3)


@pytest.mark.parametrize("term", [True, False])
def test_finite_state_draws_match_brute_force(term):
    """Draws walked by state ids: exact scores, q within 2**-52 per step of p, frequencies of p."""
    m = _model(term)
    L = 5 if term else 3
    ar = m.enumerable(max_len=L, terminating=term)
    table = lambda p: ar._oracle.table(p)  # noqa: E731
    bf = dict(brute_force(table, eos=m.eos if term else None, fixed_len=None if term else L, cap=L))
    n = 40_000
    est = ar.monte_carlo(n, head=False, seed=3)
    s = est.samples
    assert s.extra["sampler"] == "finite_state" and s.forwards == 0 and s.seqs is None
    assert np.abs(s.log_q - s.score).max() < 1e-12 * L
    from arenum.beyond.draws import walk_finite_state

    smp = ar.finite_state_sampler()
    sc, lq, ok, length, keys, toks = walk_finite_state(smp, 3000, L, None if term else L, np.random.default_rng(5), True)
    freq = Counter()
    for row, k, x, good in zip(toks, length, sc, ok):
        seq = tuple(row[:k].tolist())
        if good:
            assert bf[seq] == x  # the exact left-to-right score of the drawn sequence
            freq[seq] += 1
        else:
            assert term and k == L and m.eos not in seq
    mass_ok = 0.0
    for seq, lp in bf.items():
        p = math.exp(lp)
        mass_ok += p
        if p * 3000 > 30:
            assert abs(freq[seq] / 3000 - p) < 5 * math.sqrt(p * (1 - p) / 3000), seq
    assert abs(ok.mean() - mass_ok) < 5 * math.sqrt(mass_ok * (1 - mass_ok) / 3000) + 1e-9
    # estimates from these draws cover the truth
    scores = np.array(sorted(bf.values(), reverse=True))
    for k in (3, 10, len(scores) // 2):
        t = float(scores[k])
        c = est.count(t)
        true = int((scores >= t).sum())
        assert c.ci_lo <= true <= c.ci_hi


def test_finite_state_and_callback_draws_estimate_alike():
    """The finite-state walk and level-wise draws through the model's callback: same distribution
    (their count estimates agree within their standard errors)."""
    m = _model(True)
    fast = m.enumerable(max_len=6)
    from arenum import AutoregressiveEnumerable

    slow = AutoregressiveEnumerable(m.next_logprobs, batch_next_logprobs=m.batch_next_logprobs, eos=m.eos, max_len=6)
    a, b = fast.monte_carlo(20_000, head=False), slow.monte_carlo(20_000, head=False)
    assert b.samples.extra["sampler"] == "levels" and b.samples.forwards > 0
    assert slow._oracle.cache_bytes == 0
    for t in (-2.0, -4.0, -6.0):
        x, y = a.count(t), b.count(t)
        assert abs(x.extra["unbiased"] - y.extra["unbiased"]) <= 5 * math.hypot(x.stderr, y.stderr) + 1e-9
    assert isinstance(a, MonteCarloEstimator)


def test_level_draws_call_the_model_in_batch_size_chunks_of_any_form():
    """fetch_rows: batch_size respected; dense and list results mixed in one level give one answer."""
    from arenum import AutoregressiveEnumerable
    from arenum.testing import RandomModel

    m = RandomModel(5, seed=3, peak=1.0, eos=0, eos_boost=1.5, form="dense")
    sizes, calls = [], [0]

    def batch(prefixes):
        sizes.append(len(prefixes))
        calls[0] += 1
        rows = np.stack([m.logprobs(p) for p in prefixes])
        if calls[0] % 2:  # every other call answers with (tokens, log_probs) pairs
            return [(np.arange(5), r) for r in rows]
        return rows

    ar = AutoregressiveEnumerable(m, eos=0, max_len=5, batch_next_logprobs=batch, batch_size=7)
    ref = AutoregressiveEnumerable(m, eos=0, max_len=5, batch_next_logprobs=m.batch, batch_size=1000)
    a, b = ar.monte_carlo(500, head=False, seed=1), ref.monte_carlo(500, head=False, seed=1)
    assert max(sizes) <= 7
    assert np.array_equal(a.samples.score, b.samples.score) and np.array_equal(a.samples.keys, b.samples.keys)
    assert a.samples.forwards == b.samples.forwards


def test_draws_fill_the_forward_cache_only_when_asked():
    from arenum import AutoregressiveEnumerable
    from arenum.beyond.sampling import draw_samples
    from arenum.testing import RandomModel

    m = RandomModel(4, seed=2, peak=1.0, eos=0, eos_boost=1.5, form="dense")
    ar = AutoregressiveEnumerable(m, eos=0, max_len=4, batch_next_logprobs=m.batch)
    o = ar._oracle
    a = draw_samples(o, 300, ar.support, seed=4)
    assert o.cache_bytes == 0 and a.forwards > 0
    b = draw_samples(o, 300, ar.support, seed=4, remember=True)
    assert o.cache_bytes > 0 and b.forwards == a.forwards
    c = draw_samples(o, 300, ar.support, seed=4)  # every prefix cached now: no forward
    assert c.forwards == 0 and np.array_equal(c.score, a.score) and np.array_equal(c.keys, a.keys)
    ar._check()


def test_sampler_of_a_finite_state_model_walks_states():
    m = _model(True)
    ar = m.enumerable(max_len=6)
    draws = ar.sampler(seed=2).sample_n(2000)
    assert ar.stats["forwards"] == 0
    for seq, lp in draws[:300]:
        if lp > -math.inf:
            assert lp == ar.log_density(seq) and seq[-1] == m.eos
    a, b = ar.sampler(seed=5).sample_n(40), ar.sampler(seed=5).sample_n(40)
    assert a == b


@pytest.mark.parametrize("head", [False, True])
def test_levels_split_in_chunks_draw_the_same_distribution(monkeypatch, head):
    """A level scored a few rows at a time (draws grouped by prefix) draws what one chunk does."""
    import arenum.beyond.sampling as sampling_mod
    from arenum import AutoregressiveEnumerable
    from arenum.beyond.estimate import ExactHead
    from arenum.beyond.sampling import draw_samples
    from arenum.testing import RandomModel

    monkeypatch.setattr(sampling_mod, "_ENTRY_CHUNK", 8)  # one row per chunk
    m = RandomModel(3, seed=5, peak=1.0, eos=0, eos_boost=2.0, form="dense")
    ar = AutoregressiveEnumerable(m, eos=0, max_len=3, batch_next_logprobs=m.batch)
    bf = dict(brute_force(m.table, eos=0, cap=3))
    h = None
    if head:
        seek = ar.seek_index()
        seek.ensure_count(3)
        h = ExactHead(ar._tree.built, seek.index())
    n = 20_000
    s = draw_samples(ar._oracle, n, ar.support, seed=1, tokens=True, tree=ar._tree if head else None,
                     head_T=h.T if head else math.inf, head_count=h.count if head else 0)
    freq = Counter(q for q, ok in zip(s.seqs, s.complete) if ok)
    for q, x, ok in zip(s.seqs[:500], s.score[:500], s.complete[:500]):
        if ok:
            assert bf[q] == x and (not head or x < h.T)
    for q, lp in bf.items():
        qq = math.exp(lp) / (1 - h.mass) if head else math.exp(lp)
        if head and lp >= h.T:
            assert freq[q] == 0
        elif qq * n > 50:
            assert abs(freq[q] / n - qq) < 5 * math.sqrt(qq * (1 - qq) / n), q


def test_distinct_counts_in_runs_of_equal_scores():
    from arenum.beyond.estimate import _first_in_run

    rng = np.random.default_rng(0)
    for _ in range(50):
        n = int(rng.integers(1, 60))
        sc = np.sort(-rng.integers(0, 6, size=n).astype(float))[::-1]  # descending, with runs
        keys = rng.integers(0, 4, size=n).astype(np.uint64)
        f = np.cumsum(_first_in_run(sc, keys))
        f = np.r_[0, f]
        for a in range(n + 1):
            for b in range(a, n + 1):
                if (a in (0, n) or sc[a] != sc[a - 1]) and (b == n or sc[b] != sc[b - 1]):  # whole runs
                    assert f[b] - f[a] == len(set(zip(sc[a:b].tolist(), keys[a:b].tolist())))
