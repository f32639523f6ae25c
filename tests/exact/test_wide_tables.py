"""Wide tables (a transformer's vocabulary): kept whole only when a forward costs more than sorting one.

A table wider than ``budget.WHOLE_WIDTH`` costs 12 bytes an entry and a sort of the whole row to keep
whole; it saves only the re-scores of the prefixes whose heads turn out too short. The tree keeps
such tables whole when a forward, timed on rounds that asked for heads, costs more than that sort
(``arenum.exact.budget.keep_whole``), else heads reaching ``WIDE_MARGIN_BITS`` below the budget.
Answers are exact either way (checked here against brute force), and no forward is lost.
"""
from __future__ import annotations

import math
import time

import numpy as np
import pytest

from arenum import AutoregressiveEnumerable
from arenum.exact import budget
from arenum.exact.budget import TIMED_HEAD_ROWS, WHOLE_WIDTH, fetch_round, keep_whole
from arenum.exact.tree import WIDE_MARGIN_BITS
from arenum.testing import RandomModel

V = 2 * WHOLE_WIDTH  # past the tiny-tree allowance (2**20 entries) after 512 whole tables


class Timed(RandomModel):
    """A dense-row model whose forward costs ``delay`` seconds a prefix (a dear model)."""

    def __init__(self, delay: float, **kw) -> None:
        super().__init__(V, peak=2.5, form="dense", **kw)
        self.delay = delay

    def __call__(self, prefix: tuple):
        if self.delay:
            time.sleep(self.delay)
        return super().__call__(prefix)


def brute_count(m: RandomModel, T: float) -> int:
    """Sequences of length 2 with ``s1 + lp2 >= T`` (the library's left-to-right float64 sum)."""
    s1 = m.logprobs(())
    return sum(int(np.count_nonzero(s1[t] + m.logprobs((int(t),)) >= T)) for t in np.flatnonzero(s1 >= T))


def _build(delay: float, bits: tuple[float, ...], seed: int) -> tuple[AutoregressiveEnumerable, Timed]:
    m = Timed(delay, seed=seed)
    ar = AutoregressiveEnumerable(m, max_len=2, batch_next_logprobs=m.batch, batch_size=64)
    for b in bits:
        T = -b * math.log(2)
        assert ar.count(T) == brute_count(m, T), b
        ar._tree._check()
    return ar, m


@pytest.mark.parametrize("seed", [1, 2])
def test_cheap_wide_tables_keep_heads_and_stay_exact(seed, monkeypatch):
    # a forward far cheaper than sorting its table (the timing made certain: a dear sort)
    monkeypatch.setattr(budget, "_SORT_SECONDS_PER_ENTRY", 1e-3)
    ar, m = _build(0.0, (10.0, 13.0, 15.0), seed)
    tree = ar._tree
    lev = tree.levels[1]
    fetched = np.flatnonzero(lev.fetched)
    assert fetched.size > 600  # past the tiny-tree allowance
    cut = lev.tlen[fetched] < V
    assert cut.sum() >= fetched.size - (1 << 20) // V  # past the allowance: heads, not whole tables
    assert tree._pool_entries < 0.7 * fetched.size * V
    assert tree.keep_margin_bits == WIDE_MARGIN_BITS
    # every forward is counted, and the re-scores are a small share of them
    assert m.calls == ar.stats["forwards"] + ar.stats["refetches"]
    assert ar.stats["refetches"] <= 0.05 * ar.stats["forwards"]


def test_dear_wide_tables_are_kept_whole_and_never_scored_twice():
    ar, m = _build(0.002, (10.0, 13.0, 15.0), 3)
    tree = ar._tree
    lev = tree.levels[1]
    fetched = np.flatnonzero(lev.fetched)
    assert fetched.size > 600
    # only the rounds that timed a forward on heads hold heads; every other table is whole
    assert (lev.tlen[fetched] == V).sum() >= fetched.size - TIMED_HEAD_ROWS - fetch_round(64, V, None)
    assert (lev.tlen[fetched] < V).sum() >= TIMED_HEAD_ROWS
    assert ar.stats["refetches"] == 0
    assert m.calls == ar.stats["forwards"]


def test_the_margin_as_given_holds_for_narrow_tables():
    m = RandomModel(64, seed=5, form="dense")
    ar = AutoregressiveEnumerable(m, max_len=3, keep_margin_bits=0.5)
    ar.count(-10.0)
    assert ar._tree.keep_margin_bits == 0.5


def test_keep_whole_rule():
    big = 2 << 20  # past the tiny-tree allowance
    assert keep_whole(1000, 50_257, None, 12, None)  # a tiny tree: always
    assert not keep_whole(big, 50_257, None, 12, None)  # no head round timed yet: heads first
    assert not keep_whole(big, 50_257, None, 12, 0.002)  # a 2 ms forward: cheaper than the ~4 ms sort
    assert keep_whole(big, 50_257, None, 12, 0.01)
    assert not keep_whole(big, 50_257, big * 12 - 1, 12, 0.01)  # past table_bytes: never
    assert keep_whole(big, WHOLE_WIDTH, None, 12, None)  # narrow: whole while they fit


def test_the_first_build_of_a_wide_tree_already_reaches_the_wide_margin(monkeypatch):
    # the margin widens once a wide table is seen at the root: the next level's first heads reach it
    monkeypatch.setattr(budget, "_SORT_SECONDS_PER_ENTRY", 1e-3)
    m = Timed(0.0, seed=4)
    ar = AutoregressiveEnumerable(m, max_len=2, batch_next_logprobs=m.batch, batch_size=64)
    T = -15.0 * math.log(2)
    assert ar.count(T) == brute_count(m, T)
    lev = ar._tree.levels[1]
    cut = np.flatnonzero(lev.fetched & (lev.tlen < V))
    assert cut.size > 100  # heads, not whole tables
    T2 = -(15.0 + WIDE_MARGIN_BITS - 1) * math.log(2)  # a deeper budget within the margin: no re-score
    assert ar.count(T2) == brute_count(m, T2)
    assert ar.stats["refetches"] == 0 and m.calls == ar.stats["forwards"]
    ar._tree._check()


def test_a_reopened_store_keeps_the_wide_margin(tmp_path, monkeypatch):
    monkeypatch.setattr(budget, "_SORT_SECONDS_PER_ENTRY", 1e-3)
    T, T2 = -15.0 * math.log(2), -(15.0 + WIDE_MARGIN_BITS - 1) * math.log(2)
    m = Timed(0.0, seed=6)
    with AutoregressiveEnumerable(m, max_len=2, batch_next_logprobs=m.batch, batch_size=64,
                                  store=tmp_path / "st", fingerprint="wide-6") as ar:
        want = ar.count(T)
        assert ar._tree.keep_margin_bits == WIDE_MARGIN_BITS
    m2 = Timed(0.0, seed=6)
    with AutoregressiveEnumerable(m2, max_len=2, batch_next_logprobs=m2.batch, batch_size=64,
                                  store=tmp_path / "st", fingerprint="wide-6") as again:  # no probe: 0 forwards
        assert again._tree.keep_margin_bits == WIDE_MARGIN_BITS  # restored from the store
        assert again.count(T) == want and m2.calls == 0
        assert again.count(T2) == brute_count(m2, T2)  # deeper, within the margin: new prefixes only
        assert again.stats["refetches"] == 0
        again._tree._check()
