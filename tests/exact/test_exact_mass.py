"""Exact masses of the index (sums of ``fl(exp(score))`` rounded once) against brute force."""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

import arenum.exact.exactsum as xs
import arenum.exact.index as index_mod
from arenum import AutoregressiveEnumerable
from arenum.exact.exactsum import SCALE, exact_sum, float_units, to_float, values
from arenum.testing import RandomModel, brute_force

CASES = [
    # (vocab, length, terminating, peak, ties)
    (3, 5, False, 1.0, False),
    (8, 3, False, 1.0, True),
    (2, 6, False, 0.0, False),  # uniform: everything ties
    (4, 5, True, 1.0, False),
    (3, 5, True, 0.0, False),  # flat: massive exact ties
    (6, 4, True, 2.0, True),
]
_U = 2.0**-53


def _setup(V, L, term, peak, ties, seed=0):
    eos = 0 if term else None
    m = RandomModel(V, seed=seed, peak=peak, ties=ties, eos=eos, eos_boost=2.0)
    bf = brute_force(m.table, fixed_len=None if term else L, eos=eos, cap=L)
    return m, bf, (lambda: AutoregressiveEnumerable(m, max_len=L, eos=eos))


def _units(scores) -> int:
    """``sum(fl(exp(s))) * 2**SCALE`` by Fractions, each value computed by numpy alone."""
    v = values(np.array(scores, float)) if len(scores) else np.zeros(0)
    return int(sum((Fraction(x) for x in v.tolist()), Fraction(0)) * 2**SCALE)


def _full_index(mk, n):
    ar = mk()
    assert len(ar.slice(0, n + 1)) == n  # the whole support
    return ar, index_mod.ExactIndex(ar._tree, ar._tree.built)


def _bracket(m: float, n: int) -> tuple[float, float]:
    e = (n + 8) * _U * m
    return max(0.0, m - e), m + e


@pytest.mark.parametrize("case", CASES, ids=lambda c: "V%d-L%d-%s-p%s%s" % (c[0], c[1], "term" if c[2] else "fix", c[3], "-ties" if c[4] else ""))
def test_masses_are_the_correctly_rounded_exact_sums(case):
    _, bf, mk = _setup(*case, seed=case[0] * 7 + case[1])
    scores = [s for _, s in bf]
    ar, idx = _full_index(mk, len(bf))
    assert idx.N == len(bf)
    levels = sorted(set(scores), reverse=True)
    probes = [0.0, -math.inf, 1.0, levels[-1] - 1.0] + levels[:: max(1, len(levels) // 40)]
    probes += [math.nextafter(s, -math.inf) for s in levels[:: max(1, len(levels) // 10)]]
    for t in probes:
        ge = _units([s for s in scores if s >= t])
        gt = _units([s for s in scores if s > t])
        assert idx.mass_ge_units(t) == ge
        assert idx.mass_gt_units(t) == gt
        n = sum(1 for s in scores if s >= t)
        want = to_float(ge)
        assert want == float(Fraction(ge, 2**SCALE))
        assert tuple(idx.mass_ge(t)) == _bracket(want, n)
        if t <= 0:  # the facade: the same bracket, around the true mass of exp(score)
            lo, hi = ar.mass_above(t)
            assert (lo, hi) == _bracket(want, n)
            assert lo <= math.fsum(math.exp(s) for s in scores if s >= t) <= hi
    total = _units(scores)
    assert idx.total_mass_units() == total
    assert index_mod.ExactIndex(ar._tree, ar._tree.built, buckets=False).total_mass_units() == total
    for seq, s in bf[:: max(1, len(bf) // 15)]:
        r = ar.rank(seq)
        assert (r.cumulative_lo, r.cumulative_hi) == _bracket(to_float(_units([x for x in scores if x >= s])),
                                                               sum(1 for x in scores if x >= s))
    idx._check()
    ar._check()


def _nucleus_bf(scores, target: float) -> int | None:
    """Smallest k whose exact top-k sum of fl(exp(s)) is >= target (None if none)."""
    tu = float_units(target)
    acc = 0
    for k, x in enumerate(values(np.array(scores)).tolist(), 1):
        acc += float_units(x)
        if acc >= tu:
            return k
    return None


@pytest.mark.parametrize("case", CASES, ids=lambda c: "V%d-L%d-%s-p%s%s" % (c[0], c[1], "term" if c[2] else "fix", c[3], "-ties" if c[4] else ""))
def test_nucleus_is_the_exact_smallest_head(case):
    _, bf, mk = _setup(*case, seed=case[0] * 5 + case[1])
    scores = [s for _, s in bf]
    _, idx = _full_index(mk, len(bf))
    cum = np.cumsum(values(np.array(scores)))
    ps = [0.01, 0.3, 0.5, 0.9, 0.999, 1.0] + [float(c) for c in cum[:: max(1, len(cum) // 20)]]
    ps += [math.nextafter(float(c), 1.0) for c in cum[:: max(1, len(cum) // 20)]]
    e = (max(idx.N, 1) + 8) * _U
    fresh = mk()  # seeks its own index, as deep as each p needs
    for p in sorted(ps):
        if not 0 < p <= 1:
            continue
        lo, hi = _nucleus_bf(scores, p / (1 + e)), _nucleus_bf(scores, p / (1 - e))
        r = idx.nucleus(p)
        if lo is None:
            assert r is None
            continue
        assert r == (lo, hi), p  # hi None: the items may hold less than p / (1 - e)
        true = _nucleus_bf(scores, p)
        res = fresh.nucleus_size(p)
        if true is not None:
            assert res.size_lo <= true <= res.size_hi
        if hi is None:  # the whole support, whose mass may fall short of p: never exact, reachable unknown
            assert not res.exact and res.size_hi in (None, idx.N)
    idx._check()


def test_masses_do_not_depend_on_the_bucket_layout_or_the_index_depth(monkeypatch):
    """The same items under other buckets (chunked build, sampled lookup tables, a deeper index
    with other bucket counts) give the same exact units, and halves of the items add up."""
    _, bf, mk = _setup(5, 4, False, 1.5, True, seed=3)
    scores = np.array([s for _, s in bf])
    ar, full = _full_index(mk, len(bf))
    T = float(np.sort(scores)[::-1][len(scores) // 3])
    head = index_mod.ExactIndex(ar._tree, T)
    monkeypatch.setattr(index_mod, "_CHUNK", 3)
    monkeypatch.setattr(index_mod, "_SEGMENT", 7)
    monkeypatch.setattr(index_mod, "_SAMPLE", 3)
    monkeypatch.setattr(index_mod, "_ONE_SHOT", 0)
    monkeypatch.setattr(xs, "_CHUNK", 5)  # the exact sums convert to ints every 5 values
    monkeypatch.setattr(xs, "_STEP", 2)
    chunked = index_mod.ExactIndex(ar._tree, ar._tree.built)
    assert chunked.nb == full.nb and head.nb != full.nb
    rng = np.random.default_rng(0)
    half = rng.random(scores.shape[0]) < 0.5
    for t in sorted(set(scores.tolist()), reverse=True)[::3] + [-math.inf]:
        u = full.mass_ge_units(t)
        assert chunked.mass_ge_units(t) == u
        if t >= T:
            assert head.mass_ge_units(t) == u
        sel = scores >= t
        assert exact_sum(values(scores[sel & half])) + exact_sum(values(scores[sel & ~half])) == u
    for p in (0.2, 0.5, 0.8):
        assert chunked.nucleus(p) == full.nucleus(p)
    chunked._check()


def test_subnormal_and_underflowing_values(monkeypatch):
    """Scores down to -2000: values that are subnormal or 0.0 (``exp`` underflows) are summed exactly
    too, in wide buckets whose exponent windows miss some of them."""
    rng = np.random.default_rng(4)
    rows = {}

    def model(prefix):
        key = tuple(prefix)
        if key not in rows:
            x = np.concatenate([[0.0], -rng.uniform(200.0, 760.0, 5)])
            rows[key] = x - np.logaddexp.reduce(x)
        return rows[key]

    monkeypatch.setattr(index_mod, "_ONE_SHOT", 0)
    L = 3
    ar = AutoregressiveEnumerable(model, max_len=L)
    n = 6**L
    assert len(ar.slice(0, n + 1)) == n
    idx = index_mod.ExactIndex(ar._tree, ar._tree.built)
    scores = idx.items(0, n)[1]
    assert (values(scores) == 0).any() and ((values(scores) > 0) & (values(scores) < 2.0**-1022)).any()
    for t in sorted(set(scores.tolist()), reverse=True)[::5] + [-math.inf]:
        assert idx.mass_ge_units(t) == _units([s for s in scores.tolist() if s >= t])
        assert idx.mass_gt_units(t) == _units([s for s in scores.tolist() if s > t])
    for p in (0.5, 0.999999, 1.0):
        e = (idx.N + 8) * _U
        lo, hi = _nucleus_bf(list(scores), p / (1 + e)), _nucleus_bf(list(scores), p / (1 - e))
        assert idx.nucleus(p) == (None if lo is None else (lo, hi))
    idx._check()


def test_nucleus_under_max_sequences_does_not_depend_on_what_was_asked_first():
    """A fresh enumerable's nucleus_size jumped past max_sequences in one round and answered a
    truncated bracket (its threshold the depth cap), where the same query after a shallow count was
    exact (QA); the round now stops at the cap, and both orders answer the brute-force size."""
    import math

    import numpy as np

    from arenum.models import NGramModel
    from arenum.testing import brute_force

    corpus = ["", "aaad", "cb", "cbad", "bad", "ba", "", "a", "b", "ac", "c", "b", "abab", "bcc", "cd", "c", "cb",
              "b", "a", "ab"]
    m = NGramModel.fit(corpus, order=4, smoothing="kn")

    def tab(prefix):
        lp = np.asarray(m.next_logprobs(prefix))
        o = np.argsort(-lp, kind="stable")
        return [int(i) for i in o], [float(lp[i]) for i in o]

    items = brute_force(tab, eos=m.eos, cap=3)
    assert len(items) == 21
    for p in (0.3, 0.5, 0.7):
        acc, k = 0.0, 0
        while acc < p:
            acc += math.exp(items[k][1])
            k += 1
        for first in (False, True):
            e = m.enumerable(max_len=3, max_sequences=20)
            if first:
                e.count(items[5][1])
            r = e.nucleus_size(p)
            assert r.exact and r.size == k and not r.truncated, (p, first, r)
            s = e.seek_mass(p)
            assert s.exact and tuple(s.sequence) == items[k - 1][0]
            e._check()
