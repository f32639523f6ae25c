"""Constrained support: every query on a model composed with an automaton equals brute force with
the automaton's filter applied (random models and n-grams, fixed and terminating, random automata)."""
from __future__ import annotations

import math
import pickle
import random

import numpy as np
import pytest

from arenum import AllOf, AutoregressiveEnumerable, Automaton, StoreError, why_rejected
from arenum.models import NGramModel
from arenum.step.constrained import constrained_tables
from arenum.testing import RandomModel, brute_force


def rand_automaton(vocab, n_states: int, seed: int, eos=None, p_edge: float = 0.7) -> Automaton:
    rng = random.Random(seed)
    tr = {q: {t: rng.randrange(n_states) for t in vocab if t != eos and rng.random() < p_edge}
          for q in range(n_states)}
    acc = {q for q in range(n_states) if rng.random() < 0.4} or {n_states - 1}
    return Automaton(0, tr, acc, name=f"rand{seed}")


def filtered(bf, c, terminating: bool):
    return [(q, s) for q, s in bf if why_rejected(c, q[:-1] if terminating else q) is None]


def check_all_queries(ar, bf, *, rank_all: bool = True) -> None:
    """unrank, slice, top_k, count, threshold, rank, cumulative, mass_above, nucleus_size and the
    lazy enumerator against the filtered brute force ``bf``."""
    n = len(bf)
    scores = [s for _, s in bf]
    assert int(ar.count(-math.inf)) == n
    if n == 0:
        with pytest.raises(IndexError):
            ar.unrank(0)
        return
    got = [tuple(x) for x in ar.slice(0, n)]
    assert [(tuple(q), s) for q, s in got] == [(q, s) for q, s in bf]
    assert [(tuple(q), s) for q, s in ar.top_k(min(n, 5))] == bf[:5]
    assert list(ar.enumerator()) == bf
    for i in range(n):
        q, s = ar.unrank(i)
        assert (tuple(q), s) == bf[i]
    for i in range(n) if rank_all else range(0, n, max(1, n // 25)):
        t = scores[i]
        assert int(ar.count(t)) == sum(1 for v in scores if v >= t)
        assert float(ar.threshold(i + 1)) == t
        r = ar.rank(bf[i][0])
        assert r.exact and r.rank == sum(1 for v in scores if v > t)
        truth = math.fsum(math.exp(v) for v in scores if v >= t)
        assert r.cumulative == pytest.approx(truth, rel=1e-9)
        mb = ar.mass_above(t)
        assert mb.lo <= truth * (1 + 1e-12) and mb.hi >= truth * (1 - 1e-12)
    total = math.fsum(math.exp(v) for v in scores)
    for p in (0.3, 0.9):
        want = p * total
        acc, k = 0.0, 0
        while k < n and acc < want * (1 - 1e-12):
            acc += math.exp(scores[k])
            k += 1
        res = ar.nucleus_size(want)
        if res.exact:
            assert res.size == k, (p, res, k)


@pytest.mark.parametrize("seed", range(12))
def test_random_models_random_automata(seed):
    term = seed % 2 == 0
    vocab = list(range(4))
    eos = 3 if term else None
    m = RandomModel(vocab, seed=seed, eos=eos, eos_boost=2.0, ties=seed % 3 == 0)
    a = rand_automaton(vocab, 3 + seed % 3, seed, eos)
    kw = dict(eos=eos, max_len=5) if term else dict(max_len=4)
    ar = AutoregressiveEnumerable(m, constraint=a, **kw)
    bf = filtered(brute_force(m.table, fixed_len=None if term else 4, eos=eos, cap=5), a, term)
    check_all_queries(ar, bf)
    assert ar.constraint is a and ar.support.constraint is a


def test_string_tokens_batched_and_outside_sequences():
    vocab = ["a", "b", "c", "$"]
    m = RandomModel(vocab, seed=5, eos="$", eos_boost=1.5)
    a = Automaton("s", {"s": {"a": "t", "b": "s"}, "t": {"c": "s", "a": "t"}}, accepting={"s"}, name="no-dangling-a")
    ar = AutoregressiveEnumerable(m, eos="$", max_len=6, constraint=a, batch_next_logprobs=m.batch, batch_size=3)
    bf = filtered(brute_force(m.table, eos="$", cap=6), a, True)
    check_all_queries(ar, bf, rank_all=False)
    with pytest.raises(ValueError, match="rejects token 'c' at position 0"):
        ar.rank(("c", "$"))
    with pytest.raises(ValueError, match="does not accept"):
        ar.rank(("a", "$"))
    assert ar.log_density(("a", "$")) == -math.inf
    assert ar.log_density(("a", "c", "$")) == pytest.approx(bf[[q for q, _ in bf].index(("a", "c", "$"))][1])


def test_dead_prefixes_are_pruned_and_length_bounds_respected():
    """An automaton needing 4 tokens before acceptance: with cap 4 (3 tokens + eos) nothing is
    accepted and no prefix past the root is scored."""
    vocab = [0, 1, 2]
    m = RandomModel(vocab, seed=1, eos=2)
    chain = Automaton(0, {0: {0: 1, 1: 1}, 1: {0: 2, 1: 2}, 2: {0: 3, 1: 3}, 3: {0: 4, 1: 4}}, accepting={4},
                      name="four")
    assert chain.min_tokens(0) == 4 and not chain.live(9)
    ar = AutoregressiveEnumerable(m, eos=2, max_len=4, constraint=chain)
    assert int(ar.count(-math.inf)) == 0
    assert ar.stats["forwards"] <= 1
    ar6 = AutoregressiveEnumerable(m, eos=2, max_len=6, constraint=chain)
    check_all_queries(ar6, filtered(brute_force(m.table, eos=2, cap=6), chain, True))


def test_intersection_and_pickle():
    vocab = list(range(4))
    m = RandomModel(vocab, seed=7, eos=3)
    a, b = rand_automaton(vocab, 3, 1, 3, 0.9), rand_automaton(vocab, 3, 2, 3, 0.9)
    both = a & b
    assert isinstance(both, AllOf) and both.name == "rand1 & rand2"
    both = pickle.loads(pickle.dumps(both))
    ar = AutoregressiveEnumerable(m, eos=3, max_len=5, constraint=both)
    bf = [(q, s) for q, s in brute_force(m.table, eos=3, cap=5)
          if why_rejected(a, q[:-1]) is None and why_rejected(b, q[:-1]) is None]
    check_all_queries(ar, bf, rank_all=False)


def _fit_ngram() -> NGramModel:
    return NGramModel.fit(["abc", "abd", "bad", "cab", "dab", "aab", "bba", "dcba", "abcd"], order=2)


def test_ngram_fixed_and_terminating():
    m = _fit_ngram()
    V, eos = m.vocab_size, m.eos
    toks = [t for t in range(V) if t != eos]
    a = rand_automaton(toks, 4, 3, p_edge=0.8)

    def table(prefix):
        lp = m.next_logprobs(prefix)
        ids, vals = (np.arange(V), np.asarray(lp)) if not isinstance(lp, tuple) else lp
        order = np.argsort(-np.asarray(vals), kind="stable")
        return [int(ids[i]) for i in order], [float(vals[i]) for i in order]

    term = m.enumerable(max_len=5, constraint=a)
    check_all_queries(term, filtered(brute_force(table, eos=eos, cap=5), a, True), rank_all=False)
    fixed = m.enumerable(max_len=3, terminating=False, constraint=rand_automaton(list(range(V)), 3, 4, p_edge=0.8))
    check_all_queries(fixed, filtered(brute_force(table, fixed_len=3), fixed.constraint, False), rank_all=False)


def test_store_identity_includes_the_constraint(tmp_path):
    vocab = list(range(4))
    m = RandomModel(vocab, seed=2, eos=3)
    a, b = rand_automaton(vocab, 3, 11, 3, 0.9), rand_automaton(vocab, 3, 12, 3, 0.9)
    path = tmp_path / "st"
    ar = AutoregressiveEnumerable(m, eos=3, max_len=5, constraint=a, store=path, fingerprint="rm2")
    n = int(ar.count(-math.inf))
    ar.close()
    with pytest.raises(StoreError, match="constraint"):
        AutoregressiveEnumerable(m, eos=3, max_len=5, constraint=b, store=path, fingerprint="rm2")
    with pytest.raises(StoreError, match="built under the constraint '.+'; this enumerable has no constraint$"):
        AutoregressiveEnumerable(m, eos=3, max_len=5, store=path, fingerprint="rm2")
    again = AutoregressiveEnumerable(m, eos=3, max_len=5, constraint=a, store=path, fingerprint="rm2")
    assert int(again.count(-math.inf)) == n and again.stats["forwards"] == 0
    again.close()
    plain = tmp_path / "plain"
    AutoregressiveEnumerable(m, eos=3, max_len=5, store=plain, fingerprint="rm2").close()
    with pytest.raises(StoreError, match="built under no constraint; this enumerable has the constraint"):
        AutoregressiveEnumerable(m, eos=3, max_len=5, constraint=a, store=plain, fingerprint="rm2")


def test_a_store_tells_apart_constraints_of_one_name(tmp_path):
    """Two automata both named "automaton", or builders given one name for other rules, are other
    constraints to a store: refused in one line; the same rules under the same name reopen with 0
    forwards."""
    from arenum.constraints import Blocklist, Policy, Regex

    def model(prefix):
        return [("a", math.log(0.5)), ("b", math.log(0.3)), ("<E>", math.log(0.2))]

    pairs = [(Automaton(0, {0: {"a": 0}}, accepting={0}), Automaton(0, {0: {"b": 0}}, accepting={0})),
             (Regex("a*", name="r"), Regex("b*", name="r")),
             (Policy(min_len=1, name="p"), Policy(min_len=2, name="p")),
             (Blocklist(["a"], name="w"), Blocklist(["b"], name="w")),
             (Automaton(0, {0: {"a": 0}}, accepting={0}) & Regex("a*", name="r"),
              Automaton(0, {0: {"a": 0}}, accepting={0}) & Regex("ab*", name="r"))]
    for i, (one, other) in enumerate(pairs):
        assert one.name == other.name
        path = tmp_path / f"s{i}"
        with AutoregressiveEnumerable(model, eos="<E>", max_len=4, constraint=one, store=path, fingerprint="m") as ar:
            n = int(ar.count(-math.inf))
        with pytest.raises(StoreError, match=r"built under the constraint .+; this enumerable has the constraint") as e:
            AutoregressiveEnumerable(model, eos="<E>", max_len=4, constraint=other, store=path, fingerprint="m")
        assert "\n" not in str(e.value)
        with AutoregressiveEnumerable(model, eos="<E>", max_len=4, constraint=one, store=path, fingerprint="m") as again:
            assert int(again.count(-math.inf)) == n and again.stats["forwards"] == 0


class _Flaky(Automaton):
    """An automaton whose ``where`` method raises at the calls in ``fail`` (counted in ``calls``)."""

    def __init__(self, base: Automaton, where: str, fail: set, calls: list) -> None:
        super().__init__(base.start, base.transitions, base.accepting, name=base.name)
        self.where, self.fail, self.calls = where, fail, calls

    def _tick(self, where: str) -> None:
        if where == self.where:
            self.calls[0] += 1
            if self.calls[0] in self.fail:
                raise KeyboardInterrupt if self.calls[0] % 2 else RuntimeError("transient")

    def step(self, state, token):
        self._tick("step")
        return super().step(state, token)

    def accepts(self, state):
        self._tick("accepts")
        return super().accepts(state)

    def min_tokens(self, state):
        self._tick("min_tokens")
        return super().min_tokens(state)


@pytest.mark.parametrize("where", ["step", "accepts", "min_tokens", "text", "model"])
def test_a_failure_in_the_constraint_or_the_model_loses_nothing(where):
    """A constraint (its step, accepts, min_tokens, or a text function) or the model raising at random
    calls (seeded, many trials; errors and Ctrl-C) mid-query: after each failure ``_check()`` passes;
    run again, every query answers as brute force, and over all the tries each prefix is scored once
    (a retry scored again the rows a failed round had got: QA, 17 forwards for 15 prefixes), and a
    failure in ``accepts`` no longer leaves the automaton's tables a state short (every later query
    raised IndexError)."""
    import collections

    from arenum.constraints import Regex

    rng = random.Random(5)
    vocab, eos = [0, 1, 2, 3], 3
    for trial in range(10):
        m = RandomModel(vocab, seed=300 + trial, eos=eos, eos_boost=1.5)
        calls, fail = [0], set(rng.sample(range(1, 40), 4))
        base = rand_automaton(vocab, 3, 400 + trial, eos, 0.9)
        if where == "text":
            def text(t, calls=calls, fail=fail):
                calls[0] += 1
                if calls[0] in fail:
                    raise RuntimeError("transient decode")
                return "abc"[t] if t != eos else ""
            c = Regex("[ab]*c?[ab]*", text=text)
        else:
            c = _Flaky(base, where, fail if where != "model" else set(), calls)
        scored: collections.Counter = collections.Counter()

        def model(p, calls=calls, fail=fail):
            if where == "model":
                calls[0] += 1
                if calls[0] in fail:
                    raise RuntimeError("transient model")
            scored[p] += 1
            return m(p)

        for _ in range(len(fail) + 2):  # the start state's calls may fail too
            try:
                ar = AutoregressiveEnumerable(model, eos=eos, max_len=4, constraint=c, batch_size=2)
                break
            except (KeyboardInterrupt, RuntimeError):
                pass
        plain = Regex("[ab]*c?[ab]*", text=lambda t: "abc"[t] if t != eos else "") if where == "text" else base
        bf = filtered(brute_force(m.table, eos=eos, cap=4), plain, True)

        def retry(f):
            for _ in range(len(fail) + 2):
                try:
                    return f()
                except (KeyboardInterrupt, RuntimeError):
                    ar._check()
            raise AssertionError("still failing")

        assert retry(lambda: int(ar.count(-math.inf))) == len(bf), trial
        assert retry(lambda: [(tuple(q), s) for q, s in ar.slice(0, len(bf))]) == bf
        for q, s in bf[:: max(1, len(bf) // 6)]:
            assert retry(lambda: ar.rank(q).rank) == sum(1 for _, v in bf if v > s)
            assert retry(lambda: ar.log_density(q)) == s
        ar._check()
        assert max(scored.values(), default=1) == 1 and ar.stats["forwards"] == sum(scored.values()), \
            (trial, scored.most_common(2))


def test_samples_are_accepted_and_estimates_cover():
    vocab = list(range(4))
    m = RandomModel(vocab, seed=3, eos=3, eos_boost=1.5)
    a = rand_automaton(vocab, 3, 21, 3, 0.9)
    ar = AutoregressiveEnumerable(m, eos=3, max_len=6, constraint=a)
    for seq, _ in ar.sampler(seed=1).sample_n(200):
        assert ar.support.contains(tuple(seq)), seq
    bf = filtered(brute_force(m.table, eos=3, cap=6), a, True)
    est = AutoregressiveEnumerable(m, eos=3, max_len=6, constraint=a, exact_limit=3, estimate_samples=4000)
    scores = np.array([s for _, s in bf])
    misses = 0
    for q in (0.2, 0.5, 0.8):
        t = float(np.quantile(scores, q))
        c = est.count(t)
        truth = int((scores >= t).sum())
        if not c.exact:
            assert c.method != "exact"
            misses += not (c.ci_lo <= truth <= c.ci_hi)
        else:
            assert int(c) == truth
    assert misses <= 1


def test_constrained_tables_product_matches_brute_force():
    m = _fit_ngram()
    fs = m.finite_state()
    toks = [t for t in range(m.vocab_size) if t != m.eos]
    a = rand_automaton(toks, 3, 8, p_edge=0.9)
    prod = constrained_tables(fs, a, terminating=True)
    assert prod is not None and constrained_tables(fs, a, terminating=False) is None
    # the product's score of a sequence equals the model's when accepted, -inf when not
    import itertools

    for n in range(4):
        for x in itertools.product(toks, repeat=n):
            s, lp = prod.start, 0.0
            col = {int(t): j for j, t in enumerate(prod.tokens)}
            for t in x:
                if s < 0:
                    break
                j = col[t]
                lp += prod.log_probs[s, j]
                s = int(prod.next_state[s, j]) if prod.log_probs[s, j] > -math.inf else -1
            lp = lp + prod.eos_log_probs[s] if s >= 0 else -math.inf
            want = m.score_sequences([x + (m.eos,)])[0] if why_rejected(a, x) is None else -math.inf
            assert lp == pytest.approx(want, abs=1e-9) or (lp == -math.inf and want == -math.inf), (x, lp, want)


def test_bad_constraints():
    m = RandomModel(3, seed=0, eos=2)
    with pytest.raises(TypeError, match="constraint"):
        AutoregressiveEnumerable(m, eos=2, max_len=3, constraint=object())
    with pytest.raises(TypeError, match="name"):
        Automaton(0, {}, [0], name="")


# ------------------------------------------------------------------ certified brackets under a constraint
@pytest.mark.parametrize("seed", range(4))
def test_certified_brackets_hold_the_constrained_truth(seed):
    import itertools

    from arenum.beyond.certified import CertifiedCounter

    m = NGramModel.fit(["abc", "abd", "bad", "cab", "dab", "aab", "bba", "dcba", "abcd", "ddd"], order=1 + seed % 3)
    toks = [t for t in range(m.vocab_size) if t != m.eos]
    a = rand_automaton(toks, 3 + seed % 2, 30 + seed, p_edge=0.85)
    cap = 6
    seqs = [x + (m.eos,) for n in range(cap) for x in itertools.product(toks, repeat=n) if why_rejected(a, x) is None]
    sc = np.asarray(m.score_sequences(seqs))
    assert sc.size
    capped = m.enumerable(max_len=cap, constraint=a, max_prefixes=20)
    fs = capped.finite_state_tables()
    assert fs is not None and fs.n_states >= 1
    cc = CertifiedCounter(fs, capped.support, resolution_bits=1 / 8)
    for t in list(np.quantile(sc, np.linspace(0, 1, 25))) + [-math.inf, 0.0]:
        b = cc.count_bracket(float(t))
        assert b.lo <= int((sc >= t).sum()) <= b.hi, (t, b)
        mass = float(np.exp(sc[sc >= t]).sum())
        mb = cc.mass_bracket(float(t))
        assert mb.lo <= mass * (1 + 1e-12) and mass <= mb.hi * (1 + 1e-12) + 1e-300
    for s in sc[:: max(1, sc.size // 30)]:
        r = capped.rank(seqs[int(np.flatnonzero(sc == s)[0])])
        truth = int((sc > s).sum())
        assert r.rank_lo <= truth <= r.rank_hi, (r, truth)
        if r.exact:
            assert r.rank == truth
    deep = float(np.quantile(sc, 0.3))
    c = capped.count(deep)
    assert c.ci_lo <= int((sc >= deep).sum()) <= c.ci_hi
    srt = np.sort(sc)[::-1]
    for k in (1, 5, sc.size // 2, sc.size):
        t = capped.threshold(k)
        assert t.ci_lo <= srt[k - 1] <= t.ci_hi


def test_accepted_and_conditional_mass():
    import itertools

    from arenum.constraints import accepted_mass, conditional_mass_above

    m = _fit_ngram()
    toks = [t for t in range(m.vocab_size) if t != m.eos]
    a = rand_automaton(toks, 3, 41, p_edge=0.9)
    cap = 5
    seqs = [x + (m.eos,) for n in range(cap) for x in itertools.product(toks, repeat=n) if why_rejected(a, x) is None]
    sc = np.asarray(m.score_sequences(seqs))
    z = math.fsum(np.exp(sc))
    with_fs = m.enumerable(max_len=cap, constraint=a)
    without = AutoregressiveEnumerable(m.next_logprobs, eos=m.eos, max_len=cap, constraint=a)
    for ar in (with_fs, without):
        zb = accepted_mass(ar)
        assert zb.lo <= z * (1 + 1e-12) and z <= zb.hi * (1 + 1e-12) and zb.hi - zb.lo <= 1e-9 * z
        t = float(np.median(sc))
        cb = conditional_mass_above(ar, t)
        truth = math.fsum(np.exp(sc[sc >= t])) / z
        assert cb.lo <= truth * (1 + 1e-9) and truth <= cb.hi * (1 + 1e-9) and cb.exact
    capped = m.enumerable(max_len=cap, constraint=a, branch_cap=2)  # a sub-support: its own mass
    zc, sub = accepted_mass(capped), capped.mass_above(-math.inf)
    assert (zc.lo, zc.hi, zc.exact, zc.method) == (sub.lo, sub.hi, sub.exact, sub.method)


def test_distributed_workers_answer_as_one_constrained_process():
    from arenum.distributed import DistributedEnumerable
    from arenum.testing import EnumerableFactory

    vocab = list(range(4))
    a = rand_automaton(vocab, 3, 51, 3, 0.9)
    fac = EnumerableFactory(vocab, seed=4, eos=3, options={"max_len": 5, "constraint": a})
    one = fac()
    n = int(one.count(-math.inf))
    assert n > 5
    with DistributedEnumerable(fac, 3, backend="local") as dist:
        assert int(dist.count(-math.inf)) == n
        assert [tuple(q) for q, _ in dist.slice(0, n)] == [tuple(q) for q, _ in one.slice(0, n)]
        q, s = one.unrank(n // 2)
        assert dist.rank(q).rank == one.rank(q).rank
        assert dist.support.constraint is not None


def test_dead_ends_in_draws_are_incomplete_and_estimates_cover():
    """A character policy without the model's token lengths cannot prune by length: a prefix too
    long to reach 3 characters plus a digit before the cap is a dead end; draws reaching one are
    incomplete (score -inf), never a crash, and Monte Carlo intervals still cover the truth."""
    from arenum.constraints import Policy

    m = RandomModel(["a", "B", "1", "$"], seed=2, eos="$", eos_boost=0.5)
    c = Policy(min_len=3, required=["digit"])
    bf = filtered(brute_force(m.table, eos="$", cap=5), c, True)
    ar = AutoregressiveEnumerable(m, eos="$", max_len=5, constraint=c)
    check_all_queries(ar, bf, rank_all=False)
    draws = ar.sampler(seed=0).sample_n(300)
    assert any(s == -math.inf for _, s in draws)
    for q, s in draws:
        assert (s > -math.inf) == ar.support.contains(tuple(q))
        if s == -math.inf:
            assert "$" not in q
    t = bf[len(bf) // 2][1]
    truth = sum(1 for _, s in bf if s >= t)
    misses = 0
    for seed in range(4):
        est = AutoregressiveEnumerable(m, eos="$", max_len=5, constraint=c, exact_limit=3, estimate_samples=2000,
                                       estimate_seed=seed)
        r = est.count(t)
        assert r.method == "monte_carlo"
        misses += not (r.ci_lo <= truth <= r.ci_hi)
    assert misses <= 1


def test_a_small_state_memo_changes_no_answer(monkeypatch):
    import arenum.step.constrained as constrained

    monkeypatch.setattr(constrained, "_MEMO_MAX", 3)
    vocab = list(range(4))
    m = RandomModel(vocab, seed=13, eos=3)
    a = rand_automaton(vocab, 4, 61, 3, 0.85)
    ar = AutoregressiveEnumerable(m, eos=3, max_len=5, constraint=a, batch_size=2)
    check_all_queries(ar, filtered(brute_force(m.table, eos=3, cap=5), a, True), rank_all=False)
    assert len(ar.oracle.composition._memo) <= 64
