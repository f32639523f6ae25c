"""The exact index's chunked build and the tree's growable storage, against brute force."""
from __future__ import annotations

import math

import numpy as np
import pytest

import arenum.exact.index as index_mod
import arenum.exact._arrays as arrays_mod
from arenum import AutoregressiveEnumerable
from arenum.testing import RandomModel, brute_force


@pytest.mark.parametrize("term", [False, True])
@pytest.mark.parametrize("chunk,segment,sample", [(1, 1, 1), (3, 7, 2), (64, 50, 3), (3, 1 << 18, 16)])
def test_chunked_build_matches_brute_force(monkeypatch, term, chunk, segment, sample):
    """Tiny build chunks and segments: chunks end inside and at node boundaries, many per level;
    segments of one item and more; lookup tables from sparse samples (unbalanced buckets)."""
    monkeypatch.setattr(index_mod, "_CHUNK", chunk)
    monkeypatch.setattr(index_mod, "_SEGMENT", segment)
    monkeypatch.setattr(index_mod, "_SAMPLE", sample)
    monkeypatch.setattr(index_mod, "_NODE_STEP", 2)
    monkeypatch.setattr(index_mod, "_ONE_SHOT", 0)  # the chunked build, even for tiny indexes
    V, L = (5, 4) if term else (6, 3)
    eos = 0 if term else None
    m = RandomModel(V, seed=7, peak=1.2, eos=eos, eos_boost=2.0)
    bf = brute_force(m.table, fixed_len=None if term else L, eos=eos, cap=L)
    ar = AutoregressiveEnumerable(m, max_len=L, eos=eos)
    assert ar.slice(0, len(bf) + 3) == bf
    for i in range(0, len(bf), 7):
        seq, s = bf[i]
        assert ar.unrank(i) == (seq, s)
        assert ar.count(s) == sum(1 for _, x in bf if x >= s)
    total = math.fsum(math.exp(s) for _, s in bf)
    lo, hi = ar.mass_above(-math.inf)
    assert lo <= total <= hi
    ar._check()


@pytest.mark.parametrize("term", [False, True])
@pytest.mark.parametrize("one_shot", [0, 1 << 22])
def test_branch_cap_index_is_exact_over_the_capped_support(monkeypatch, term, one_shot):
    monkeypatch.setattr(index_mod, "_CHUNK", 2)
    monkeypatch.setattr(index_mod, "_ONE_SHOT", one_shot)
    V, L = (5, 4) if term else (6, 3)
    eos = 0 if term else None
    m = RandomModel(V, seed=3, peak=1.0, eos=eos, eos_boost=2.0)

    def top3(prefix):
        toks, lps = m.table(prefix)
        return toks[:3], lps[:3]

    bf = brute_force(top3, fixed_len=None if term else L, eos=eos, cap=L)
    ar = AutoregressiveEnumerable(m, max_len=L, eos=eos, branch_cap=3)
    assert ar.slice(0, len(bf) + 3) == bf
    ar._check()


def test_grow_remaps_in_place_and_copies_when_a_view_is_held(monkeypatch):
    monkeypatch.setattr(arrays_mod, "MAP_MIN_BYTES", 1 << 12)
    g = arrays_mod.Grow(np.float64)
    rng = np.random.default_rng(0)
    parts = []
    held = None
    for i in range(60):
        v = rng.random(int(rng.integers(1, 3000)))
        g.extend(v)
        parts.append(v)
        if i == 30:
            held = g.v  # the next growth must not move the memory under this view
            snapshot = held.copy()
    assert g._own_map() is not None  # a map of its own, grown in place
    assert np.array_equal(g.v, np.concatenate(parts))
    assert np.array_equal(held, snapshot)
    del held
    for _ in range(20):
        v = rng.random(5000)
        g.extend(v)
        parts.append(v)
    assert np.array_equal(g.v, np.concatenate(parts))


def test_token_pool_widens_for_large_ids():
    big = [3, 2**40, 2**33 + 1]

    def model(prefix):
        return np.array(big, np.int64), np.log([0.5, 0.3, 0.2])

    ar = AutoregressiveEnumerable(model, max_len=2)
    assert ar.unrank(0) == ((3, 3), math.log(0.5) + math.log(0.5))
    assert ar.unrank(1)[0] in {(3, 2**40), (2**40, 3)}
    assert sorted(s for s, _ in ar.slice(0, 9)) == sorted((a, b) for a in big for b in big)
    assert ar._tree.levels[0].pool_tok.v.dtype == np.int64
    ar._check()


@pytest.mark.parametrize("term", [False, True])
def test_one_shot_and_segmented_builds_agree(monkeypatch, term):
    """Small indexes are built in one shot. With the lookup table from every chunk (``_SAMPLE=1``,
    the exact histogram), the segmented build has the same buckets, table and bucket contents."""
    V, L = (7, 4) if term else (9, 3)
    eos = 0 if term else None
    m = RandomModel(V, seed=11, peak=1.5, ties=True, eos=eos, eos_boost=2.0)
    ar = AutoregressiveEnumerable(m, max_len=L, eos=eos)
    ar.threshold(200)
    tree = ar._tree
    for T in (tree.built, ar.threshold(50)):
        one = index_mod.ExactIndex(tree, T)
        assert one.seg_cum.shape[0] == 1
        monkeypatch.setattr(index_mod, "_CHUNK", 5)
        monkeypatch.setattr(index_mod, "_SEGMENT", 16)
        monkeypatch.setattr(index_mod, "_SAMPLE", 1)
        monkeypatch.setattr(index_mod, "_ONE_SHOT", 0)
        seg = index_mod.ExactIndex(tree, T)
        monkeypatch.undo()
        assert one.N == seg.N > 0 and seg.seg_cum.shape[0] > 2
        assert one.perm.dtype == seg.perm.dtype
        assert np.array_equal(np.sort(one.perm), np.sort(seg.perm))
        assert np.array_equal(one.cum, seg.cum) and np.array_equal(one.lut, seg.lut)
        for b in range(one.nb):
            assert np.array_equal(one._bucket_positions(b), seg._bucket_positions(b))
        counted = index_mod.ExactIndex(tree, T, buckets=False)
        assert counted.N == one.N and not counted.bucketed
        assert np.array_equal(counted.complete().perm, one.perm) and counted.bucketed


@pytest.mark.parametrize("term", [False, True])
def test_chunked_build_of_an_all_ties_support(monkeypatch, term):
    """Every sequence equally likely (a zero-width score range: one bucket), built in segments."""
    monkeypatch.setattr(index_mod, "_CHUNK", 4)
    monkeypatch.setattr(index_mod, "_SEGMENT", 9)
    monkeypatch.setattr(index_mod, "_ONE_SHOT", 0)
    V, L = 4, 4
    eos = 0 if term else None
    m = RandomModel(V, seed=2, peak=0.0, eos=eos)
    bf = brute_force(m.table, fixed_len=None if term else L, eos=eos, cap=L)
    ar = AutoregressiveEnumerable(m, max_len=L, eos=eos)
    assert ar.slice(0, len(bf) + 1) == bf
    for i in range(0, len(bf), 11):
        assert ar.rank(bf[i][0]).rank == sum(1 for _, s in bf if s > bf[i][1])
    ar._check()
