"""Forwards are bounded by the live prefixes; deepening reuses them; failures leave things consistent."""
from __future__ import annotations

import math

import pytest

import arenum.exact.tree as tree_mod

from arenum import AutoregressiveEnumerable, BudgetExceeded, Quantizer, autoregressive_count_index
from arenum.testing import RandomModel, brute_force


def live_prefixes(model: RandomModel, T: float, *, fixed_len=None, eos=None, cap=None) -> int:
    """Brute-force count of prefixes with score >= T (the minimum forwards for budget T)."""
    n = 0
    stack = [((), 0.0)]
    last = (fixed_len if fixed_len is not None else cap) - 1
    while stack:
        seq, s = stack.pop()
        if s < T:
            continue
        n += 1
        if len(seq) >= last + 0 and len(seq) == last:
            continue
        toks, lps = model.table(seq)
        for t, v in zip(toks, lps):
            if eos is not None and t == eos:
                continue
            stack.append((seq + (t,), s + v))
    return n


@pytest.mark.parametrize("term", [False, True])
def test_count_uses_exactly_the_live_prefixes(term):
    m = RandomModel(12, seed=4, peak=1.5, eos=0 if term else None, eos_boost=3.0, form="dense")
    kw = dict(eos=0, max_len=6) if term else dict(max_len=3)
    ar = AutoregressiveEnumerable(m, **kw)
    for bits in (3.0, 6.0, 9.0):
        T = -bits * math.log(2)
        ar.count(T)
        want = live_prefixes(m, T, fixed_len=None if term else 3, eos=0 if term else None, cap=6)
        assert ar.stats["forwards"] == want, bits
    assert ar.stats["refetches"] == 0


def test_deepening_reuses_forwards_and_unrank_stays_near_minimum():
    m = RandomModel(30, seed=7, peak=2.0, form="dense")
    ar = AutoregressiveEnumerable(m, max_len=3, batch_next_logprobs=lambda ps: [m(p) for p in ps], batch_size=16)
    bf = brute_force(m.table, fixed_len=3)
    calls_before = 0
    for i in (10, 100, 1000, 5000):
        seq, s = ar.unrank(i)
        assert (seq, s) == bf[i]
        minimum = live_prefixes(m, s, fixed_len=3)
        f = ar.stats["forwards"]
        assert f >= minimum
        assert f <= 1.10 * minimum + 2 * 16, (i, f, minimum)
        assert ar.stats["forwards"] >= calls_before
        calls_before = f
    # queries inside the built budget cost no forward at all
    f = ar.stats["forwards"]
    for i in range(0, 5000, 250):
        assert ar.unrank(i) == bf[i]
    ar.count(bf[4000][1])
    ar.rank(bf[3000][0])
    assert ar.stats["forwards"] == f
    # every prefix was scored once: no prefix twice
    assert m.calls == ar.stats["forwards"] + ar.stats["refetches"]


def test_top_k_then_index_reuses_cached_tables():
    m = RandomModel(6, seed=2, peak=1.0)
    ar = AutoregressiveEnumerable(m, max_len=3)
    head = ar.top_k(5)
    f = ar.stats["forwards"]
    assert f <= live_prefixes(m, head[-1][1], fixed_len=3)
    ar.count(head[-1][1])
    assert ar.slice(0, 5) == head
    # prefixes already scored by best-first were not scored again by the tree
    assert m.calls == ar.stats["forwards"]


class Flaky:
    """A model that raises on its n-th call, once."""

    def __init__(self, model, n):
        self.model = model
        self.n = n
        self.calls = 0

    def __call__(self, prefix):
        self.calls += 1
        if self.calls == self.n:
            raise RuntimeError("boom")
        return self.model(prefix)

    def batch(self, prefixes):
        self.calls += 1
        if self.calls == self.n:
            raise RuntimeError("boom")
        return [self.model(p) for p in prefixes]


@pytest.mark.parametrize("rounds", ["one", "many"])
@pytest.mark.parametrize("batched", [False, True])
@pytest.mark.parametrize("fail_at", [1, 3, 20])
def test_callback_failure_mid_build_leaves_state_consistent(monkeypatch, batched, fail_at, rounds):
    if rounds == "many":  # a level's prefixes fetched a few at a time: a failure between rounds
        monkeypatch.setattr(tree_mod, "_FETCH_ENTRIES", 8)
    m = RandomModel(5, seed=11, peak=1.0, eos=0, eos_boost=2.0)
    fl = Flaky(m, fail_at)
    kw = dict(batch_next_logprobs=fl.batch, batch_size=2) if batched else {}
    ar = AutoregressiveEnumerable(fl, eos=0, max_len=4, **kw)
    bf = brute_force(m.table, eos=0, cap=4)
    with pytest.raises(RuntimeError, match="boom"):
        ar.unrank(len(bf) - 1)
    ar._check()
    assert ar.slice(0, len(bf)) == bf
    assert ar.count(bf[50][1]) == sum(1 for _, s in bf if s >= bf[50][1])
    ar._check()


def test_budget_caps_give_brackets_not_silence():
    m = RandomModel(20, seed=3, peak=0.5, form="dense")
    ar = AutoregressiveEnumerable(m, max_len=4, max_prefixes=50)
    seq = (19, 19, 19, 19)
    r = ar.rank(seq)
    assert not r.exact and r.method == "bracket"
    true = sum(1 for _, s in brute_force(m.table, fixed_len=4) if s > r.log_prob)
    assert r.rank_lo <= true <= r.rank_hi
    with pytest.raises(BudgetExceeded, match="max_prefixes=50"):
        ar.count(r.log_prob)
    b = ar.count_bracket(r.log_prob)
    assert b.lo <= true + 1 <= b.hi and not b.exact
    lo, hi = ar.mass_above(r.log_prob)
    assert lo <= 1.0 and hi == 1.0


@pytest.mark.parametrize("term", [False, True])
@pytest.mark.parametrize("mode", ["auto", "exact", "float"])
def test_branch_cap_brackets_contain_truth(term, mode):
    m = RandomModel(6, seed=5, peak=1.0, eos=0 if term else None, eos_boost=2.0)
    kw = dict(eos=0, max_len=4) if term else dict(max_len=3)
    bf = brute_force(m.table, fixed_len=None if term else 3, eos=0 if term else None, cap=4)
    ar = AutoregressiveEnumerable(m, branch_cap=2, count_mode=mode, **kw)
    for seq, t in bf[:: max(1, len(bf) // 15)]:
        true = sum(1 for _, s in bf if s >= t)
        b = ar.count_bracket(t)
        assert b.lo <= true <= b.hi
        c = ar.count(t)
        assert (b.lo, b.hi) == (c.ci_lo, c.ci_hi) and (c.exact or b.lo < c.point < b.hi)
        lo, hi = ar.mass_above(t)
        tm = math.fsum(math.exp(s) for _, s in bf if s >= t)
        assert lo <= tm + 1e-15 and tm <= hi + 1e-15
        r = ar.rank(seq)
        truer = sum(1 for _, s in bf if s > t)
        assert r.rank_lo <= truer <= r.rank_hi


def test_autoregressive_count_index_matches_brute_force():
    m = RandomModel(5, seed=8, peak=1.0)
    q = Quantizer(1.0, 4)
    prefix = (2,)
    ci, truncated = autoregressive_count_index(lambda p: list(zip(*m.table(p))), prefix, 2, q, 20)
    comps = brute_force(lambda p: m.table(prefix + p), fixed_len=2)
    want = {}
    for seq, s in comps:
        fb = q.fine_bucket(s)
        if fb <= 20:
            want.setdefault(fb, []).append((seq, s))
    assert ci.total() == sum(len(v) for v in want.values())
    for fb, items in want.items():
        assert ci.hist.count_at(fb) == len(items)
        for off, it in enumerate(items):
            assert ci.get_in_bucket(fb, off) == it
    assert truncated == (len(comps) > ci.total())


def test_quantized_count_index_shares_the_tree():
    m = RandomModel(4, seed=1, peak=1.0, eos=0, eos_boost=2.0)
    ar = AutoregressiveEnumerable(m, eos=0, max_len=5)
    q = Quantizer(0.5, 2)
    ci = ar.quantized_count_index(q, 30)
    bf = brute_force(m.table, eos=0, cap=5)
    assert ci.total() == sum(1 for _, s in bf if q.fine_bucket(s) <= 30)
    f = ar.stats["forwards"]
    ar.count(-(30 * 0.25) * math.log(2))
    assert ar.stats["forwards"] == f
    assert ar.structural_fine_bucket(bf[0][0], q) == q.fine_bucket(bf[0][1])


@pytest.mark.parametrize("term", [False, True])
@pytest.mark.parametrize("form", ["pairs", "dense"])
def test_tail_draws_score_no_prefix_the_tree_holds(term, form):
    from arenum.testing import RandomModel

    m = RandomModel(6, seed=4, eos=0 if term else None, eos_boost=1.5, form=form)
    seen: list[tuple] = []

    def batch(ps):
        seen.extend(tuple(p) for p in ps)
        return m.batch(ps)

    ar = AutoregressiveEnumerable(m, max_len=7, eos=0 if term else None, batch_next_logprobs=batch, batch_size=16)
    ar.count(-6.0)
    built = set(seen)
    assert len(built) == len(seen)
    seen.clear()
    est = ar.monte_carlo(3000, head=True)
    assert est.head is not None and seen
    assert not built & set(seen)  # every prefix scored once, by the tree or by the draws


@pytest.mark.parametrize("form", ["pairs", "arrays", "dense", "batch", "batch-dense", "heads"])
def test_a_failure_mid_round_scores_no_prefix_twice(monkeypatch, form):
    """Model errors and Ctrl-C at random calls (seeded, many trials): the rows a round got before the
    failure are kept (the round itself is not committed), so over all the tries every prefix is
    scored once (a retry scored them again: 8 forwards for 7 prefixes), and the answers are exact."""
    import collections

    import numpy as np

    monkeypatch.setattr(tree_mod, "_FETCH_ENTRIES", 40)  # rounds of several chunks
    rng = np.random.default_rng(17)
    for trial in range(12):
        m = RandomModel(4, seed=100 + trial, peak=1.0, eos=0 if trial % 2 else None, eos_boost=2.0,
                        form="dense" if form in ("dense", "batch-dense") else "arrays" if form == "arrays" else "pairs")
        L = 4
        eos = m.eos
        bf = brute_force(m.table, fixed_len=None if eos is not None else L, eos=eos, cap=L)
        scored: collections.Counter = collections.Counter()
        fail = set(rng.choice(np.arange(1, 60), size=4, replace=False).tolist())
        calls = [0]

        def tick():
            calls[0] += 1
            if calls[0] in fail:
                raise KeyboardInterrupt if calls[0] % 2 else RuntimeError("transient")

        def single(p):
            tick()
            scored[p] += 1
            return m(p)

        def batch(ps):
            tick()
            scored.update(ps)
            rows = [m(p) for p in ps]
            return np.stack(rows) if form == "batch-dense" else rows

        def heads(ps, floors):
            tick()
            scored.update(ps)
            counts, toks, lps, widths = [], [], [], []
            for p, f in zip(ps, floors):
                t, v = m.table(p)
                k = sum(1 for x in v if x >= f)
                counts.append(k), toks.extend(t[:k]), lps.extend(v[:k]), widths.append(len(t))
            return np.array(counts), np.array(toks, np.int64), np.array(lps), np.array(widths)

        kw: dict = {"batch_size": 3}
        if form.startswith("batch"):
            kw["batch_next_logprobs"] = batch
        if form == "heads":
            kw["batch_next_heads"] = heads
        ar = AutoregressiveEnumerable(single, eos=eos, max_len=L, **kw)
        for _ in range(len(fail) + 1):
            try:
                got = ar.slice(0, len(bf) + 1)
                break
            except (KeyboardInterrupt, RuntimeError):
                ar._check()
        assert got == bf
        ar._check()
        assert max(scored.values()) == 1 and ar.stats["forwards"] == sum(scored.values()), (trial, scored.most_common(2))
