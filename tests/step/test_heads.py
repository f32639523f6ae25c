"""The ``batch_next_heads`` extension: the prefix tree filled from heads cut by the adapter."""
from __future__ import annotations

import math

import numpy as np
import pytest

from arenum import AutoregressiveEnumerable
from arenum.testing import RandomModel, brute_force


class HeadsOf:
    """``batch_next_heads`` for a RandomModel with integer tokens (ascending ids inside a row)."""

    def __init__(self, model: RandomModel, mutate=None):
        self.model = model
        self.mutate = mutate
        self.calls = 0
        self.prefixes = 0

    def __call__(self, prefixes, floors):
        self.calls += 1
        self.prefixes += len(prefixes)
        counts, toks, lps = [], [], []
        for p, f in zip(prefixes, floors):
            lp = self.model.logprobs(p)
            keep = np.flatnonzero(lp >= f)
            counts.append(keep.shape[0])
            toks.append(keep)
            lps.append(lp[keep])
        out = [np.array(counts, np.int64), np.concatenate(toks), np.concatenate(lps),
               np.full(len(prefixes), self.model.V, np.int64)]
        return self.mutate(out) if self.mutate else out


def _no_dense(prefixes):
    raise AssertionError("the tree must be filled through batch_next_heads")


@pytest.mark.parametrize("V, L, term, peak, ties", [
    (5, 3, False, 2.0, False), (8, 3, False, 1.0, True), (4, 5, True, 1.0, False), (3, 4, True, 0.0, False),
])
def test_queries_through_heads_match_brute_force(V, L, term, peak, ties):
    eos = 0 if term else None
    m = RandomModel(V, seed=V * 7 + L, peak=peak, ties=ties, eos=eos, eos_boost=2.0, form="dense")
    bf = brute_force(m.table, fixed_len=None if term else L, eos=eos, cap=L)
    heads = HeadsOf(m)
    ar = AutoregressiveEnumerable(m, max_len=L, eos=eos, batch_next_logprobs=_no_dense, batch_size=7,
                                  batch_next_heads=heads)
    n = len(bf)
    for i in range(n):
        assert ar.unrank(i) == bf[i]
    scores = [s for _, s in bf]
    for k in (1, n // 2, n):
        assert ar.threshold(k) == scores[k - 1]
    for t in sorted(set(scores))[::3] + [0.0, -math.inf]:
        assert ar.count(t) == sum(1 for s in scores if s >= t)
    for seq, s in bf[:: max(1, n // 10)]:
        assert ar.rank(seq).rank == sum(1 for x in scores if x > s)
    assert heads.calls > 0
    assert ar.stats["forwards"] >= heads.prefixes > 0
    ar._check()


def test_heads_deepening_reuses_forwards_and_matches_dense():
    """Cut heads are refetched only when a deeper budget needs them; answers equal the dense path's."""
    m = RandomModel(40, seed=3, peak=2.0, form="dense")
    dense = AutoregressiveEnumerable(m, max_len=3, batch_next_logprobs=m.batch)
    heads = HeadsOf(m)
    ar = AutoregressiveEnumerable(m, max_len=3, batch_next_logprobs=_no_dense, batch_next_heads=heads)
    for k in (10, 300, 5000, 40**3):
        assert ar.threshold(k) == dense.threshold(k)
        assert ar.unrank(k - 1) == dense.unrank(k - 1)
    assert ar.stats["forwards"] == dense.stats["forwards"]


def _bad(**changes):
    def mutate(out):
        counts, toks, lps, widths = out
        if "nan" in changes:
            lps = lps.copy(); lps[0] = math.nan
        if "positive" in changes:
            lps = lps.copy(); lps[0] = 0.5
        if "dup" in changes:
            toks = toks.copy(); toks[1] = toks[0]
        if "mass" in changes:
            lps = np.zeros_like(lps)
        if "widths" in changes:
            widths = np.zeros_like(widths)
        if "short" in changes:
            counts = counts[:-1]
        if "len" in changes:
            toks = toks[:-1]
        if "float_tokens" in changes:
            toks = toks.astype(float)
        if "tuple3" in changes:
            return (counts, toks, lps)
        if "offsets" in changes:  # one offset too few
            return (counts, toks, lps, widths, np.zeros(counts.shape[0] - 1))
        return (counts, toks, lps, widths)
    return mutate


@pytest.mark.parametrize("change, exc, match", [
    ("nan", ValueError, r"batch_next_heads\(\(\)\): log_prob is NaN for token"),
    ("positive", ValueError, r"log_prob is 0.5 \(must be <= 0\)"),
    ("dup", ValueError, r"batch_next_heads\(\(\)\): duplicate token"),
    ("mass", ValueError, r"head probabilities sum to .* > 1"),
    ("widths", ValueError, r"entries for a table of 0"),
    ("short", ValueError, r"returned 0 counts for a batch of 1 prefixes"),
    ("len", ValueError, r"must both hold sum\(counts\)"),
    ("float_tokens", TypeError, r"tokens must be non-negative integer ids"),
    ("tuple3", TypeError, r"must return a \(counts, tokens, log_probs, widths\[, offsets\]\) tuple"),
    ("offsets", ValueError, r"offsets must be 1 floats, one per prefix"),
])
def test_bad_heads_rejected_and_nothing_kept(change, exc, match):
    m = RandomModel(6, seed=1, peak=1.0, form="dense")
    ar = AutoregressiveEnumerable(m, max_len=2, batch_next_heads=HeadsOf(m, _bad(**{change: True})))
    with pytest.raises(exc, match=match):
        ar.count(-3.0)
    assert ar.stats["forwards"] == 0
    ar._check()


def test_heads_need_integer_tokens():
    m = RandomModel(["a", "b", "c"], seed=0, form="pairs")
    ar = AutoregressiveEnumerable(m, max_len=2, eos="a",
                                  batch_next_heads=lambda p, f: (np.ones(len(p), int), np.zeros(len(p), int),
                                                                 np.zeros(len(p)), np.ones(len(p), int)))
    with pytest.raises(TypeError, match="needs integer tokens"):
        ar.count(-3.0)
    with pytest.raises(TypeError, match="batch_next_heads must be callable"):
        AutoregressiveEnumerable(m, max_len=2, batch_next_heads=3)


def test_head_order_equals_lexsort_with_wide_rows_and_ties():
    from arenum.step.tables import head_order as _head_order

    rng = np.random.default_rng(1)
    for trial in range(120):
        n = int(rng.integers(1, 8))
        lens = rng.integers(0, 9000 if trial % 3 == 0 else 50, n)
        row = np.repeat(np.arange(n), lens)
        lps = -np.round(rng.exponential(3, row.shape[0]), int(rng.integers(0, 3)))  # many exact ties
        perm = rng.permutation(row.shape[0]) if trial % 2 else np.arange(row.shape[0])
        row, lps = row[perm], lps[perm]
        assert np.array_equal(_head_order(row, lps, lens), np.lexsort((-lps, row)))


@pytest.mark.parametrize("ties", [False, True])
def test_plain_callback_rows_in_any_order_list_as_brute_force(ties):
    """A plain ``next_logprobs`` whose rows come sorted (descending: not sorted again), reversed,
    shuffled, or sorted in some rows only, as pairs or as an array pair: the same order as brute
    force (ties in the model's order within a row), the same forwards."""
    V, L = 6, 5
    m = RandomModel(V, seed=3, peak=1.5, ties=ties, eos=0, eos_boost=2.0, form="dense")
    bf = brute_force(m.table, fixed_len=None, eos=0, cap=L)
    rng = np.random.default_rng(0)

    def served(order, as_pairs):
        def cb(prefix):
            lp = m.logprobs(prefix)
            ids = np.arange(V)
            kind = order if order != "mixed" else ("sorted" if len(prefix) % 2 else "shuffled")
            if kind == "sorted":
                ids = np.argsort(-lp, kind="stable")
            elif kind == "reversed":
                ids = ids[::-1]
            elif kind == "shuffled":
                ids = rng.permutation(V)
            return [(int(t), float(lp[t])) for t in ids] if as_pairs else (ids.astype(np.int64), lp[ids])
        return cb

    forwards = set()
    for order in ("sorted", "reversed", "shuffled", "mixed"):
        for as_pairs in (True, False):
            for k in (7, 40, len(bf)):  # a fresh object each: trees cut at the k-th score
                ar = AutoregressiveEnumerable(served(order, as_pairs), max_len=L, eos=0, batch_size=3)
                got = ar.top_k(k)
                assert [s for _, s in got] == [s for _, s in bf[:k]]
                if not ties:
                    assert got == bf[:k]
                forwards.add((k, ar.stats["forwards"]))
    assert len(forwards) == 3
