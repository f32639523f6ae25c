"""``enumerator()``: the exact order read off the index in growing chunks, best-first past a cap."""
from __future__ import annotations

import math
from itertools import islice

import pytest

from arenum import AutoregressiveEnumerable
from arenum.exact import listing
from arenum.testing import RandomModel, brute_force


@pytest.mark.parametrize("ties, eos", [(False, 0), (True, 0), (False, None), (True, None)])
def test_enumerator_lists_the_brute_force_order(ties, eos):
    L = 6 if eos is not None else 4
    m = RandomModel(6, seed=2, ties=ties, eos=eos, eos_boost=2.0)
    bf = brute_force(m.table, fixed_len=None if eos is not None else L, eos=eos, cap=L)
    ar = AutoregressiveEnumerable(m, eos=eos, max_len=L)
    assert list(ar.enumerator()) == bf
    # interleaved with other queries on the same object, and two listings at once
    a, b = ar.enumerator(), AutoregressiveEnumerable(m, eos=eos, max_len=L).enumerator()
    got = []
    for i, (x, y) in enumerate(zip(a, b)):
        assert x == y == bf[i]
        got.append(x)
        if i % 97 == 0:
            assert ar.unrank(len(bf) - 1 - i) == bf[len(bf) - 1 - i]
    assert len(got) == len(bf)


def test_enumerator_is_lazy_and_its_memory_follows_what_was_yielded():
    m = RandomModel(30, seed=4, eos=0, eos_boost=3.0)
    ar = AutoregressiveEnumerable(m, eos=0, max_len=8)
    it = ar.enumerator()
    assert ar.stats["forwards"] == 0  # nothing read before the first item is asked for
    first = list(islice(it, 10))
    f10, b10 = ar.stats["forwards"], ar.stats["memory_bytes"]
    # 5,010 items: chunks of 64 to 4,096 read (8,128 items, the forwards 0.82 of a fresh top 10,020's, as
    # 32,704 items were 0.81 of 40,020's after 20,010: the bound below as tight, four times cheaper)
    rest = list(islice(it, 5_000))
    f2, b2 = ar.stats["forwards"], ar.stats["memory_bytes"]
    ref = AutoregressiveEnumerable(m, eos=0, max_len=8)
    assert first + rest == ref.top_k(5_010)
    assert 0 < f10 < f2 and b10 < b2
    # the first items cost what their chunk (64 items) costs, not what a large listing costs
    assert f10 == _forwards_for(m, 64)
    # at most the next chunk (twice what was yielded) ahead of the items yielded
    assert f2 <= 1.2 * _forwards_for(m, 2 * 5_010) + 64


def _forwards_for(m, k):
    ar = AutoregressiveEnumerable(m, eos=0, max_len=8)
    ar.top_k(k)
    return ar.stats["forwards"]


@pytest.mark.parametrize("eos", [0, None])
def test_a_whole_support_is_listed_off_the_index_without_a_forward_twice(eos):
    """A finite support read to its end (its build reaches -inf, below the depth floor) is listed
    whole by the index: the listing does not walk it again best-first (which scored every prefix a
    second time: 6 forwards for 3 prefixes, and all of them again after ``count(-inf)``)."""
    L = 4
    m = RandomModel(3, seed=7, eos=eos, eos_boost=1.5)
    bf = brute_force(m.table, fixed_len=None if eos is not None else L, eos=eos, cap=L)
    ar = AutoregressiveEnumerable(m, eos=eos, max_len=L)
    assert list(ar.enumerator()) == bf
    assert ar.stats["forwards"] == ar.stats["tree_prefixes"] and ar.stats["refetches"] == 0
    f = ar.stats["forwards"]
    ar.count(float("-inf"))
    assert list(ar.enumerator()) == bf and ar.stats["forwards"] == f


def test_past_the_depth_floor_the_listing_goes_on_best_first():
    """Sequences below ``max_depth_bits`` (4096) are not in any index: the listing reaches them
    best-first, in order, after the index's items."""
    def tab(p):
        return [0, 1], [math.log1p(-math.exp(-1500.0)), -1500.0]  # two steps of token 1: past 4096 bits

    bf = brute_force(lambda p: tuple(map(list, tab(p))), fixed_len=4)
    ar = AutoregressiveEnumerable(lambda p: list(zip(*tab(p))), max_len=4)
    assert list(ar.enumerator()) == bf and ar.seek_index().more_below_floor


@pytest.mark.parametrize("cap", [50, 400])
def test_past_a_cap_the_listing_goes_on_best_first(cap):
    """A cap on prefixes stops the index (BudgetExceeded): the listing goes on best-first, still
    exact, the items already yielded not repeated."""
    m = RandomModel(5, seed=9, eos=0, eos_boost=2.0)
    bf = brute_force(m.table, fixed_len=None, eos=0, cap=6)
    ar = AutoregressiveEnumerable(m, eos=0, max_len=6, max_prefixes=cap)
    with pytest.raises(Exception, match="max_prefixes"):
        ar.top_k(len(bf))
    assert list(ar.enumerator()) == bf


def test_chunks_double_from_the_first():
    reads = []

    def read(i, n):
        reads.append((i, n))
        return [((j,), -float(j)) for j in range(i, min(i + n, 1000))]

    got = list(listing(read, lambda: False, lambda: iter(())))
    assert got == [((j,), -float(j)) for j in range(1000)]
    assert reads == [(0, 64), (64, 128), (192, 256), (448, 512), (960, 1024)]
