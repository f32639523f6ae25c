"""Every answer says exactly what it is, in every regime (issue 25's "what will be checked").

For every query (count, threshold, unrank, rank, cumulative, mass_above, nucleus_size, top_k, slice,
the guessing curve) and every regime (exact, bracket past a cap, ``branch_cap``, certified, Monte
Carlo, envelope, bounded error, distributed), on small models whose truth is brute-forced, with caps
set to force the regime:

- ``exact`` is True only when the answer equals the truth;
- ``method`` names the regime;
- the truth lies inside every bracket (or interval);
- no point value equals a bound unless the bracket is a single value (``docs/results.md``: the only
  exceptions are named by ``point_method``: ``lower_end``/``upper_end`` of a one-sided bracket, and
  the envelope's ``envelope_order``, whose ``rank_lo``/``rank_hi`` are its tie run, not an interval).
"""
from __future__ import annotations

import itertools
import math
import sys

import numpy as np
import pytest

from arenum import AutoregressiveEnumerable, BudgetExceeded
from arenum.models import NGramModel
from arenum.report import guessing_curve, nucleus_json
from arenum.results import CountBracket, point_value
from arenum.testing import RandomModel, brute_force

CORPUS = ["abc", "ab", "a", "bca", "cab", "abc", "b", "ca", "aab", "bb", "cc", "abca", "bac", "ab"]
ONE_SIDED = ("lower_end", "upper_end", "envelope_order", "unbounded")


# ------------------------------------------------------------------ the truth
class Truth:
    """Scores of the whole support (brute force), and the true answers from them."""

    def __init__(self, scored: list[tuple[tuple, float]]) -> None:
        scored = sorted(scored, key=lambda r: -r[1])  # stable: ties keep their given order
        self.items = scored
        self.score_of = {tuple(q): x for q, x in scored}
        self.s = np.array([x for _, x in scored])
        self.seqs = [q for q, _ in scored]

    def count(self, t: float) -> int:
        return int((self.s >= t).sum())

    def rank(self, x: float) -> int:
        return int((self.s > x).sum())

    def mass(self, t: float) -> float:
        return math.fsum(math.exp(v) for v in self.s if v >= t)

    def threshold(self, k: int) -> float:
        return float(np.sort(self.s)[::-1][k - 1])

    def nucleus(self, p: float) -> int | None:
        c = np.cumsum(np.exp(np.sort(self.s)[::-1]))
        j = np.flatnonzero(c >= p * (1 - 1e-12))
        return int(j[0]) + 1 if j.size else None


def _ngram():
    return NGramModel.fit(CORPUS, order=3)


def _ngram_truth(model: NGramModel, max_len: int) -> Truth:
    strings = ["".join(t) for n in range(max_len) for t in itertools.product("abc", repeat=n)]
    return Truth([(model.encode(s), model.logprob(s)) for s in strings])


def _random_truth(m: RandomModel, max_len: int) -> Truth:
    return Truth(brute_force(m.table, fixed_len=max_len))


# ------------------------------------------------------------------ the checks
def inside(lo, x, hi, slack=0.0) -> bool:
    return lo - slack <= x <= hi + slack


def check_point(point, lo, hi, point_method):
    if lo == hi:
        return
    if point_method in ONE_SIDED:
        assert point in (lo, hi), (point, lo, hi, point_method)
        return
    assert lo < point < hi, (point, lo, hi, point_method)


def check_count(r, truth: int, methods):
    if isinstance(r, CountBracket):  # its method names the regime, as a CountResult's does
        assert r.method in methods, r.method
        assert r.lo <= truth <= r.hi and (r.exact == (r.lo == r.hi))
        if r.exact:
            assert r.lo == truth
        else:
            assert r.method != "exact"
        check_point(r.point, r.lo, r.hi, r.point_method)
        return
    assert r.method in methods, r.method
    if r.exact:  # the certified DP's ends may meet: the truth, and it still says 'certified' (docs/certified.md)
        assert int(r) == truth and (r.method == "exact" or r.method == "certified" and r.ci_lo == r.ci_hi)
    else:
        assert r.method != "exact"
        check_point(r.point, r.ci_lo, r.ci_hi, r.point_method)
    assert inside(r.ci_lo, truth, r.ci_hi), (r, truth)


def check_threshold(r, truth: float, methods):
    assert r.method in methods, r.method
    if r.exact:
        assert float(r) == truth and r.method == "exact"
    else:
        assert r.method != "exact"
        check_point(float(r), r.ci_lo, r.ci_hi, r.point_method)
    assert inside(r.ci_lo, truth, r.ci_hi), (r, truth)


def check_rank(r, rank: int, cum: float, methods):
    assert r.method in methods, r.method
    if r.exact:
        assert r.rank == rank and r.method == "exact" and r.point_method == "exact"
        assert inside(r.cumulative_lo, cum, r.cumulative_hi, 1e-12)
    else:
        assert r.method != "exact"
        check_point(r.rank, r.rank_lo, r.rank_hi, r.point_method)
        check_point(r.cumulative, r.cumulative_lo, r.cumulative_hi, r.cumulative_point_method)
        assert r.guess_number == r.rank + 1
    assert inside(r.rank_lo, rank, r.rank_hi), (r, rank)
    assert inside(r.cumulative_lo, cum, r.cumulative_hi, 1e-12), (r, cum)


def check_mass(m, truth: float, methods):
    assert m.method in methods, m.method
    assert inside(m.lo, truth, m.hi, 1e-12 * max(truth, 1e-300)), (m, truth)
    if m.exact:
        assert m.method == "exact" and m.hi - m.lo <= 1e-9 * max(truth, 1e-300)
    else:
        assert m.method != "exact"
        check_point(m.point, m.lo, m.hi, m.point_method)


def check_nucleus(r, truth_size: int | None, exact_ok: bool):
    assert r.method in ("exact", "bracket", "logprob_error") and (r.method == "exact") <= r.exact
    if r.exact:
        assert exact_ok and r.size == truth_size and r.point_method == "exact"
        return
    if truth_size is not None and r.size_hi is not None:
        assert r.size_lo <= truth_size <= r.size_hi
    if r.size_hi is not None:
        check_point(r.size, r.size_lo, r.size_hi, r.point_method)
    else:
        assert r.point_method == "lower_end" and r.size == r.size_lo
        assert truth_size is None or r.size_lo <= truth_size


def check_items(items, truth: Truth, start: int, exact: bool):
    want = truth.items[start:start + len(items)]
    if exact:  # the scores of the positions, and each sequence's own score (ties may swap sequences)
        assert [x for _, x in items] == [x for _, x in want]
        assert all(truth.score_of[tuple(q)] == x for q, x in items)
        assert getattr(items, "exact", True)
    else:
        assert not items.exact and items.method == "sub_support"


def check_curve(enum, truth: Truth, sample: list, curve_methods):
    cur = guessing_curve(enum, sample, samples=500, seed=1)
    for g in np.logspace(0, math.log10(len(truth.s) + 1), 12):
        p = cur.at(g)
        want = sum(1 for q in sample if truth.rank(_score_of(truth, q)) + 1 <= g) / len(sample)
        assert p.lo - 1e-12 <= want <= p.hi + 1e-12
        if p.exact:
            assert p.fraction == pytest.approx(want, abs=1e-12)
        elif p.hi > p.lo:
            assert p.lo < p.fraction < p.hi and p.point_method == "expected_fraction"
            assert p.band
    for it in cur.items:
        assert it.method in curve_methods
        if not it.exact and it.rank_lo < it.rank_hi:
            assert it.rank_lo < it.rank < it.rank_hi


def _score_of(truth: Truth, seq) -> float:
    return truth.score_of[tuple(seq)]


# ------------------------------------------------------------------ the regimes
def _thresholds(truth: Truth, n: int = 6) -> list[float]:
    s = np.unique(truth.s)[::-1]
    return [float(s[j]) for j in np.linspace(0, len(s) - 1, n).astype(int)]


def test_exact_regime():
    model = _ngram()
    truth = _ngram_truth(model, 5)
    e = model.enumerable(max_len=5)
    for t in _thresholds(truth):
        check_count(e.count(t), truth.count(t), {"exact"})
        check_count(e.count_bracket(t), truth.count(t), {"exact"})
        check_mass(e.mass_above(t), truth.mass(t), {"exact"})
    for k in (1, 7, len(truth.s)):
        check_threshold(e.threshold(k), truth.threshold(k), {"exact"})
    for q, x in truth.items[::17]:
        check_rank(e.rank(q), truth.rank(x), truth.mass(x), {"exact"})
        check_rank(e.cumulative(q), truth.rank(x), truth.mass(x), {"exact"})
    check_items([e.unrank(5)], truth, 5, True)
    check_items(e.slice(3, 6), truth, 3, True)
    check_items(e.top_k(4), truth, 0, True)
    for p in (0.1, 0.5):
        r = e.nucleus_size(p)
        check_nucleus(r, truth.nucleus(p), True)
        assert r.reachable
    check_curve(e, truth, truth.seqs[::9], {"exact"})


def test_bracket_regime_past_a_resource_cap():
    m = RandomModel(3, seed=4)
    truth = _random_truth(m, 5)
    e = AutoregressiveEnumerable(m, max_len=5, max_prefixes=12)
    deep = [t for t in _thresholds(truth) if truth.count(t) > 40]
    for t in deep:
        with pytest.raises(BudgetExceeded):
            e.count(t)
        check_count(e.count_bracket(t), truth.count(t), {"bracket"})
        check_mass(e.mass_above(t), truth.mass(t), {"bracket"})  # past the cap: never 'exact'
    for q, x in truth.items[100::37]:
        r = e.rank(q)
        assert r.method == "bracket" and r.point_method == "geometric_middle"
        check_rank(r, truth.rank(x), truth.mass(x), {"bracket"})
    r = e.nucleus_size(0.99)
    assert r.truncated and not r.exact and r.reachable is None
    check_nucleus(r, truth.nucleus(0.99), False)
    check_curve(e, truth, truth.seqs[::23], {"exact", "bracket", "monte_carlo", "monte_carlo+exact_head"})


def test_branch_cap_regime():
    m = RandomModel(4, seed=2)
    truth = _random_truth(m, 3)
    e = AutoregressiveEnumerable(m, max_len=3, branch_cap=2)
    for t in _thresholds(truth):
        check_count(e.count(t), truth.count(t), {"exact", "bracket"})
        check_count(e.count_bracket(t), truth.count(t), {"exact", "bracket"})
        check_mass(e.mass_above(t), truth.mass(t), {"exact", "bracket"})
    for k in (1, 3, 5):
        check_threshold(e.threshold(k), truth.threshold(k), {"exact", "bracket"})
    for q, x in truth.items[::3]:
        check_rank(e.rank(q), truth.rank(x), truth.mass(x), {"exact", "bracket"})
    check_items(e.slice(0, 4), truth, 0, False)
    assert e.unrank(0).method == "sub_support" and not e.unrank(0).exact
    for seed in (0, 3, 4):  # the sub-support's nucleus is only an upper end of the true one
        m = RandomModel(4, seed=seed, peak=0.3)
        truth = _random_truth(m, 3)
        e = AutoregressiveEnumerable(m, max_len=3, branch_cap=2)
        for p in (0.05, 0.2, 0.3):
            check_nucleus(e.nucleus_size(p), truth.nucleus(p), True)


def test_certified_regime():
    model = _ngram()
    truth = _ngram_truth(model, 6)
    e = model.enumerable(max_len=6, max_prefixes=30)
    deep = [t for t in _thresholds(truth) if truth.count(t) > 60]
    for t in deep:
        check_count(e.count(t), truth.count(t), {"certified"})
        check_count(e.count_bracket(t), truth.count(t), {"certified"})  # the DP's bracket, named so
        check_mass(e.mass_above(t), truth.mass(t), {"certified"})
    for k in (150, 300):
        check_threshold(e.threshold(k), truth.threshold(k), {"certified"})
    for q, x in truth.items[200::97]:
        r = e.rank(q)
        assert r.method == "certified"
        check_rank(r, truth.rank(x), truth.mass(x), {"certified"})
    check_curve(e, truth, truth.seqs[::41], {"exact", "certified"})


def test_monte_carlo_regime():
    m = RandomModel(3, seed=5)
    truth = _random_truth(m, 6)
    e = AutoregressiveEnumerable(m, max_len=6, exact_limit=20, estimate_samples=4000, confidence=0.999)
    mc = {"monte_carlo", "monte_carlo+exact_head", "exact"}
    for t in [t for t in _thresholds(truth) if truth.count(t) > 50]:
        check_count(e.count(t), truth.count(t), mc)
    for k in (100, 400):
        check_threshold(e.threshold(k), truth.threshold(k), mc)
    for q, x in truth.items[150::111]:
        check_rank(e.rank(q), truth.rank(x), truth.mass(x), mc)
    check_curve(e, truth, truth.seqs[::53], mc)


def test_envelope_regime():
    """A model whose step table depends only on the depth: the envelope's own answers are the truth."""
    V, L = 3, 5

    def per_depth(prefix):
        rng = np.random.default_rng(len(prefix))
        w = rng.random(V) + 0.1
        return list(zip(range(V), np.log(w / w.sum()).tolist()))

    truth = Truth(brute_force(lambda q: tuple(map(list, zip(*sorted(per_depth(q), key=lambda r: -r[1])))),
                              fixed_len=L))
    ar = AutoregressiveEnumerable(per_depth, max_len=L)
    env = ar.envelope_index(n_paths=2, budget_bits=4.0)
    for t in _thresholds(truth):
        c = env.count(t)
        assert c.method == "envelope" and not c.exact and inside(c.ci_lo, truth.count(t), c.ci_hi)
        check_point(c.point, c.ci_lo, c.ci_hi, c.point_method)
        check_mass(env.mass_above(t), truth.mass(t), {"envelope"})
    for k in (1, 20):
        x = env.threshold(k)
        assert x.method == "envelope" and inside(x.ci_lo, truth.threshold(k), x.ci_hi)
        check_point(float(x), x.ci_lo, x.ci_hi, x.point_method)
    for q, x in truth.items[::29]:
        r = env.rank_bracket(q)
        assert r.method == "envelope" and not r.exact and r.point_method == "envelope_order"
        assert r.rank == truth.rank(x) and r.rank_lo <= r.rank <= r.rank_hi


def test_bounded_error_regime():
    """A declared per-step error: every answer a certified bracket for the true model (here the
    declared model is the true one, so the truth is its brute force)."""
    m = RandomModel(3, seed=7)
    truth = _random_truth(m, 4)
    e = AutoregressiveEnumerable(m, max_len=4, logprob_error=0.01)
    for t in _thresholds(truth):
        check_count(e.count(t), truth.count(t), {"logprob_error"})
        check_count(e.count_bracket(t), truth.count(t), {"logprob_error"})
        check_mass(e.mass_above(t), truth.mass(t), {"logprob_error"})
    for k in (1, 10, 40):
        check_threshold(e.threshold(k), truth.threshold(k), {"logprob_error"})
    for q, x in truth.items[::13]:
        check_rank(e.rank(q), truth.rank(x), truth.mass(x), {"logprob_error"})
    u = e.unrank(3)
    assert not u.exact and u.method == "logprob_error"
    for items in (e.slice(2, 4), e.top_k(3)):  # the declared model's order: flagged, as unrank is
        assert not items.exact and items.method == "logprob_error"
    heads = np.cumsum(np.exp(truth.s))
    for k in (5, 20):  # p = a head's own mass: the true nucleus lies between the declared one's at
        p = float(heads[k - 1])  # p e**-D (<= k) and p e**D (> k), a bracket of width
        r = e.nucleus_size(p)
        assert not r.exact and r.size_lo < r.size_hi and r.reachable and r.method == "logprob_error"
        check_nucleus(r, truth.nucleus(p), False)
        assert nucleus_json(r)["method"] == "logprob_error" and " method=" not in repr(r)
    assert e.nucleus_size(0.999).size_hi is None and not e.nucleus_size(0.999).exact  # p e**D > 1: open above


def test_distributed_regime():
    from arenum.distributed import DistributedEnumerable
    from arenum.testing import EnumerableFactory

    fac = EnumerableFactory(3, seed=3, options={"max_len": 5})
    truth = _random_truth(fac.make_model(), 5)
    with DistributedEnumerable(fac, 2, backend="local") as d:
        for t in _thresholds(truth):
            check_count(d.count(t), truth.count(t), {"exact"})
            check_count(d.count_bracket(t), truth.count(t), {"exact"})
            check_mass(d.mass_above(t), truth.mass(t), {"exact"})
        for k in (1, 50):
            check_threshold(d.threshold(k), truth.threshold(k), {"exact"})
        for q, x in truth.items[::41]:
            check_rank(d.rank(q), truth.rank(x), truth.mass(x), {"exact"})
        check_items(d.slice(2, 5), truth, 2, True)
        check_items(d.top_k(3), truth, 0, True)
        check_nucleus(d.nucleus_size(0.5), truth.nucleus(0.5), True)


def test_nucleus_unreachable_p_says_so():
    """The support holds less than p: the result says so (a field and the repr)."""
    m = RandomModel(3, seed=1, eos=0, eos_boost=0.01)
    e = AutoregressiveEnumerable(m, eos=0, max_len=2)
    held = e.mass_above(-math.inf).hi
    assert held < 0.5
    r = e.nucleus_size(0.5)
    assert r.reachable is False and not r.exact and "UNREACHABLE" in repr(r)
    assert e.nucleus_size(held * 0.5).reachable is True


@pytest.mark.parametrize("lo,hi,kind", [(0, 1, "rank"), (5, 6, "count"), (0, 10**30, "count"),
                                        (0.2, 0.2000001, "mass"), (-3.0, -2.9999999, "log"),
                                        (2**60, 2**60 + 3, "rank")])
def test_point_value_is_strictly_inside(lo, hi, kind):
    p, how = point_value(lo, hi, kind)
    assert lo < p < hi and how in ("geometric_middle", "middle", "log_middle")
    p, how = point_value(lo, hi, kind, estimate=hi)  # an estimate on an end is not the point
    assert lo < p < hi and how != "estimate"


def test_cli_eval_three_ngrams_points_inside_named_bands(tmp_path):
    """``arenum eval`` past the exact budget: every non-exact CSV point strictly inside its band,
    the band named for what it is (certified, for n-grams) in the CSV, the footer and the legend."""
    import csv
    import subprocess
    import sys

    from arenum.report import draw_guessing_curves

    words = ["".join(t) for t in itertools.product("abcd", repeat=3)]
    rng = np.random.default_rng(0)
    train = [w for w in words for _ in range(int(rng.integers(1, 4)))]
    paths = []
    for order in (2, 3, 4):
        p = tmp_path / f"m{order}.npz"
        NGramModel.fit(train, order=order).save(p)
        paths.append(str(p))
    test = tmp_path / "test.txt"
    test.write_text("\n".join(["abcd", "dcba", "aaaa", "abca", "ddd", "bad", "cab", "dddddd"] * 3) + "\n")
    out = tmp_path / "c.csv"
    cmd = [sys.executable, "-m", "arenum.cli", "eval", paths[0], str(test), paths[1], paths[2], "--max-forwards",
           "40", "--csv", str(out), "--max-guesses", "1e6"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert "certified band" in p.stdout and "Monte Carlo" not in p.stdout.splitlines()[-2]
    summary = [ln for ln in p.stdout.splitlines() if "past the exact budget (" in ln]  # one line a model, named
    assert len(summary) == 3 and all("past the exact budget (certified band)" in ln for ln in summary), p.stdout
    rows = list(csv.DictReader(out.open()))
    loose = [r for r in rows if r["exact"] == "0"]
    assert loose and all(r["band"] for r in loose)
    wide = [r for r in loose if float(r["hi"]) > float(r["lo"])]
    assert wide and all(float(r["lo"]) < float(r["fraction"]) < float(r["hi"]) for r in wide)
    assert all(r["band"] == "certified" and r["point_method"] == "expected_fraction" for r in wide)
    # the legend names the band's kind
    model = NGramModel.load(paths[1])
    e = model.enumerable(max_prefixes=40)
    cur = guessing_curve(e, [model.encode(s) for s in test.read_text().split()], name="m3")
    fig = draw_guessing_curves([cur], max_guesses=1e6)
    labels = fig.axes[0].get_legend_handles_labels()[1]
    assert any("certified band" in lb for lb in labels)


def test_certified_steps_report_progress_before_their_first_block():
    """Every step of the certified DP that can take a second says so: the tables, the compiled
    kernels' load and the answer each report before the DP's first block of cells (which, on the
    shipped 4-gram, came seconds after the query started), and the command line's bar names them."""
    from arenum.cli.common import _bar_text
    from arenum.step import kernels

    model = _ngram()
    seen: list[dict] = []
    e = model.enumerable(max_len=6, max_prefixes=30, progress=seen.append)
    first_load = "arenum.beyond.sweepjit" not in sys.modules  # the kernels load once a process, said then
    assert e.rank(model.encode("ccbca")).method == "certified"
    cert = [d for d in seen if d.get("phase") == "certified"]
    first = next(i for i, d in enumerate(cert) if d["cells_todo"])
    notes = [d["dp"] for d in cert[:first]]
    assert notes[0] == "building its tables" and ("loading its compiled kernels" in notes) == (kernels.allows_numba() and first_load)
    assert {"answering past the exact budget", "checking the exact build's size"} & set(notes)
    assert all("forwards" in d for d in cert)
    assert _bar_text(cert[0]) == "certified DP: building its tables"
    assert _bar_text(cert[first]).startswith("certified DP (") and "score cells" in _bar_text(cert[first])
    seen.clear()
    e.rank(model.encode("ccbca"))  # answered from the tables built: no table or kernel step again
    assert "building its tables" not in [d.get("dp") for d in seen]


def test_a_short_support_answers_a_deep_count_exactly_without_the_dp():
    """A deep threshold on a short support (``max_len=2``): the whole support fits the caps, so the
    exact answer comes without first running the certified DP to check the exact build's size (which,
    on the shipped 4-gram at ``--max-len 2 --bits 200``, took minutes before an exact count of 51)."""
    model = _ngram()
    truth = _ngram_truth(model, 2)
    e = model.enumerable(max_len=2, max_prefixes=50)
    r = e.count(-300.0)
    assert r.exact and r.method == "exact" and int(r) == truth.count(-300.0) == len(truth.s)
    assert e.certified().stats["cells"] == {}  # no DP grown
    deep = model.enumerable(max_len=6, max_prefixes=30)  # a long one still asks the DP, and brackets
    check_count(deep.count(-40.0), _ngram_truth(model, 6).count(-40.0), {"certified"})


def test_the_whole_support_past_the_cap_is_counted_by_the_dp():
    """``count(-inf)`` past the caps (the CLI's ``count --min-log-prob -inf``): the support's least
    score is finite, so the DP counts there (every sequence scores at least it): the truth, not
    ``[head, inf]`` with the head's count as the point."""
    model = _ngram()
    for max_len in (4, 5, 6):
        truth = _ngram_truth(model, max_len)
        e = model.enumerable(max_len=max_len, max_prefixes=10)
        with pytest.raises(BudgetExceeded):
            e.seek_index().count(-math.inf)  # the exact build cannot
        floor = e.answers.support_floor(e.certified())
        assert floor <= truth.s.min() <= floor + 1e-9  # the least score, to rounding
        for r in (e.count(-math.inf), e.count_bracket(-math.inf)):
            check_count(r, len(truth.s), {"certified"})
            lo, hi = (r.ci_lo, r.ci_hi) if hasattr(r, "ci_lo") else (r.lo, r.hi)
            assert lo == hi == len(truth.s)  # a few cells under the least score: both ends take them all
    from arenum.beyond import CertifiedCounter

    cc = CertifiedCounter(e.finite_state_tables(), e.support, max_bits=4)  # the least score past its depth
    r = e.answers._cert_count(cc, -math.inf)
    assert r.lo <= len(truth.s) <= r.hi and r.lo < r.hi and r.method == "certified"


# ------------------------------------------------------------------ edges a randomized harness found
def _uniform2(prefix):
    return [(0, math.log(0.5)), (1, math.log(0.5))]


def test_branch_cap_count_bracket_holds_exact_ties():
    """Every sequence ties: a dropped prefix holding exactly 2**j completions of mass e**t each must
    not count 2**j - 1 of them (e**y rounds below 2**j)."""
    for L in (3, 5, 7):
        e = AutoregressiveEnumerable(_uniform2, max_len=L, branch_cap=1)
        t = e.log_density((0,) * L)
        b = e.count_bracket(t)
        assert b.lo <= 2**L <= b.hi, (L, b)
        c = e.count(t)
        assert c.ci_lo <= 2**L <= c.ci_hi and not c.exact


def _halves(prefix):  # eos = 1: sequence (0,)*j + (1,) has mass 2**-(j+1)
    return [(0, math.log(0.5)), (1, math.log(0.5))]


@pytest.mark.parametrize("kw", [{"max_prefixes": 3}, {"exact_limit": 3}, {"max_sequences": 2}])
def test_nucleus_past_a_cap_never_claims_the_items_built(kw):
    """The head built (2 sequences, mass 0.75) holds less than p: the nucleus lies past it, so its
    size has no upper end and seek_mass no sequence (they said exact, size 2, before)."""
    p = math.nextafter(0.75, 1.0)  # truth: 3, the sequence (0, 0, 1) at rank 2
    e = AutoregressiveEnumerable(_halves, eos=1, max_len=6, **kw)
    r = e.nucleus_size(p)
    assert not r.exact and r.truncated and r.size_lo <= 3  # max_sequences: every item counted holds p
    assert r.size_hi is None if "max_sequences" not in kw else r.size_hi >= 3
    s = e.seek_mass(p)
    assert not s.exact and s.truncated and s.sequence is None and s.log_prob is None and s.rank <= 2
    full = AutoregressiveEnumerable(_halves, eos=1, max_len=6)
    assert full.nucleus_size(p).size_lo <= 3 <= full.nucleus_size(p).size_hi


def test_nucleus_under_branch_cap_is_not_the_sub_supports():
    e = AutoregressiveEnumerable(_uniform2, eos=0, max_len=6, branch_cap=1)
    r = e.nucleus_size(math.nextafter(0.5, 1.0))  # truth 2: (0,) and (1, 0)
    assert not r.exact and (r.size_hi is None or r.size_hi >= 2) and r.size_lo <= 2


def test_seek_mass_under_branch_cap_does_not_claim_the_sub_supports_sequence():
    def model(prefix):  # token 2 = eos; the top sequence is (2,), which branch_cap=2 cuts
        if not prefix:
            return [(0, math.log(0.40)), (1, math.log(0.35)), (2, math.log(0.25))]
        return [(0, math.log(0.25)), (1, math.log(0.25)), (2, math.log(0.50))]

    assert AutoregressiveEnumerable(model, eos=2, max_len=3).seek_mass(0.1).sequence == (2,)
    s = AutoregressiveEnumerable(model, eos=2, max_len=3, branch_cap=2).seek_mass(0.1)
    assert s.sequence == (0, 2) and not s.exact


@pytest.mark.parametrize("ms", [1, 2])
def test_seek_mass_past_a_cap_reports_a_lower_end_of_the_rank(ms):
    def model(prefix):
        return [(0, math.log(0.75)), (1, math.log(0.25))]

    assert AutoregressiveEnumerable(model, max_len=3).seek_mass(0.5).rank == 1
    e = AutoregressiveEnumerable(model, max_len=3, max_sequences=ms)
    r, s = e.nucleus_size(0.5), e.seek_mass(0.5)
    assert r.truncated and s.truncated and s.rank == r.size_lo - 1 <= 1


def test_bracket_queries_answer_when_a_cap_refuses_the_first_build():
    def model(prefix):  # the first token is certain: an exact build needs 2 live prefixes at once
        if not prefix:
            return [(0, 0.0), (1, -math.inf)]
        return [(0, math.log(0.75)), (1, math.log(0.25))]

    def table(prefix):  # brute_force's form: (tokens, log_probs), sorted
        t, lp = zip(*sorted(model(prefix), key=lambda r: -r[1]))
        return list(t), list(lp)

    truth = Truth(brute_force(table, fixed_len=3))
    e = AutoregressiveEnumerable(model, max_len=3, max_prefixes=1)
    with pytest.raises(BudgetExceeded):
        e.count(-1.0)
    for _ in range(2):  # the refused build does not spoil the next query
        check_count(e.count_bracket(-1.0), truth.count(-1.0), {"bracket"})
        check_mass(e.mass_above(-1.0), truth.mass(-1.0), {"bracket"})
        q = (0, 0, 0)
        check_rank(e.rank(q), truth.rank(truth.score_of[q]), truth.mass(truth.score_of[q]), {"bracket"})
        r = e.nucleus_size(0.3)
        assert r.truncated and not r.exact and r.reachable is None
        check_nucleus(r, truth.nucleus(0.3), False)


def test_a_subnormal_threshold_counts():
    def certain(prefix):
        return [(0, -math.inf), (1, -math.inf), (2, 0.0)]

    for t in (-1e-300, -5e-324):
        assert AutoregressiveEnumerable(certain, eos=2, max_len=4).count(t) == 1


def test_capped_queries_hold_the_truth_on_random_tied_models():
    """Seeded sweep: small models with exact ties, each query under each cap against brute force."""
    caps = [{"max_prefixes": 4}, {"max_prefixes": 9}, {"max_sequences": 3}, {"branch_cap": 1}, {"branch_cap": 2},
            {"max_prefixes": 2}]
    for seed in range(12):
        m = RandomModel(3, seed=seed, ties=seed % 2 == 0)
        truth = _random_truth(m, 4)
        for kw in caps:
            e = AutoregressiveEnumerable(m, max_len=4, **kw)
            methods = {"exact", "bracket"}
            for t in _thresholds(truth, 4):
                check_count(e.count_bracket(t), truth.count(t), methods)
                check_mass(e.mass_above(t), truth.mass(t), methods)
            for q, x in truth.items[::9]:
                check_rank(e.rank(q), truth.rank(x), truth.mass(x), methods)
            for p in (0.1, 0.5, 0.9):
                check_nucleus(e.nucleus_size(p), truth.nucleus(p), True)
                s = e.seek_mass(p)
                want = truth.nucleus(p)
                if s.exact:
                    assert s.rank == want - 1 and truth.score_of[tuple(s.sequence)] == truth.s[want - 1]
                elif want is not None:
                    assert s.rank <= want - 1 or not s.truncated


def test_mass_brackets_past_a_cap_are_not_cut_below_what_was_built():
    """Rows summing a hair over 1 (within the tolerance, used verbatim): the exact mass is above 1;
    a bracket past a cap may not end at 1.0 below what it built (it was inverted: lo > hi)."""
    a = 0.5 + 2e-13

    def model(prefix):
        return [(0, math.log(a)), (1, math.log(a))]

    exact = AutoregressiveEnumerable(model, max_len=8).mass_above(-math.inf)
    assert exact.lo > 1.0
    b = AutoregressiveEnumerable(model, max_len=8, max_sequences=5).mass_above(-math.inf)
    assert b.lo <= exact.lo <= exact.hi <= b.hi
    ng = NGramModel.fit(["", "aa"], order=1, smoothing="addk")
    e = ng.enumerable(max_len=6, terminating=False)
    t = min(s for _, s in e.slice(0, 64))
    whole = e.mass_above(t)
    cert = e.certified().mass_bracket(t)
    assert cert.lo <= whole.lo and whole.hi <= cert.hi


def test_a_certified_threshold_past_a_finite_supports_end_is_out_of_range():
    """A fixed-length n-gram support of 9 sequences, past a cap: k = 10 has no score (it printed a
    made-up certified bracket); k = 9 is bracketed."""
    model = NGramModel.fit(["ab", "ba", "aa", "b"], order=2)
    e = model.enumerable(max_len=2, terminating=False, max_prefixes=1)
    n = len(AutoregressiveEnumerable(model.next_logprobs, max_len=2).slice(0, 100))
    with pytest.raises(IndexError, match="beyond the support"):
        e.threshold(n + 1)
    r = e.threshold(n)
    assert r.method == "certified" and r.ci_lo <= min(s for _, s in model.enumerable(max_len=2, terminating=False)
                                                         .slice(0, n)) <= r.ci_hi


def test_the_nucleus_mass_is_the_mass_of_its_size_when_scores_tie():
    """16 tied sequences of mass 1/16: the top 5 hold 5/16, not the 16 tied at the boundary (1.0)."""
    e = AutoregressiveEnumerable(lambda p: [(t, math.log(0.25)) for t in range(4)], max_len=2)
    r, s = e.nucleus_size(0.3), e.seek_mass(0.3)
    assert r.exact and r.size == 5 and s.rank == 4
    for x in (r, s):
        assert x.mass_lo <= 5 / 16 <= x.mass_hi < 0.32
