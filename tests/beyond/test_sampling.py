"""The ancestral sampler: ARSampler draws each support sequence with its probability."""
from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest

from arenum import AutoregressiveEnumerable
from arenum.testing import RandomModel, brute_force


@pytest.mark.parametrize("term", [False, True])
def test_sampler_frequencies_match_brute_force(term):
    L = 3
    m = RandomModel(3, seed=5, peak=1.0, eos=0 if term else None, eos_boost=2.0)
    ar = AutoregressiveEnumerable(m, max_len=L, eos=0 if term else None)
    bf = dict(brute_force(m.table, fixed_len=None if term else L, eos=0 if term else None, cap=L))
    n = 20_000
    draws = ar.sampler(seed=1).sample_n(n)
    assert len(draws) == n
    for seq, lp in draws[:200]:
        if lp > -math.inf:
            assert lp == bf[seq]  # the exact left-to-right score of the drawn sequence
    freq = Counter(s for s, lp in draws if lp > -math.inf)
    incomplete = sum(1 for _, lp in draws if lp == -math.inf)
    # chi-square-like check: every frequent sequence within 5 standard errors of its probability
    for seq, lp in bf.items():
        p = math.exp(lp)
        if p * n > 50:
            se = math.sqrt(p * (1 - p) / n)
            assert abs(freq[seq] / n - p) < 5 * se, (seq, freq[seq] / n, p)
    mass = sum(math.exp(v) for v in bf.values())
    assert abs(incomplete / n - (1 - mass)) < 5 * math.sqrt(max(mass * (1 - mass), 1e-9) / n) + 1e-9
    ar._check()


def test_sampler_is_seeded_and_single_draws_agree_with_batches():
    m = RandomModel(4, seed=2, peak=1.5)
    ar = AutoregressiveEnumerable(m, max_len=3)
    a = ar.sampler(seed=7).sample_n(50)
    b = ar.sampler(seed=7).sample_n(50)
    assert a == b
    s = ar.sampler(seed=3)
    d = s.draw()
    assert d.complete and len(d.ids) == 3
    seq, lp = s.sample()
    assert len(seq) == 3 and lp == ar.log_density(seq)
    assert s.sample_n(0) == []
    with pytest.raises(ValueError):
        s.sample_n(-1)


def test_sampler_with_string_tokens():
    m = RandomModel(["a", "b", "</s>"], seed=1, eos="</s>", eos_boost=3.0)
    ar = AutoregressiveEnumerable(m, eos="</s>", max_len=4)
    for seq, lp in ar.sampler(seed=0).sample_n(30):
        assert all(isinstance(t, str) for t in seq)
        if lp > -math.inf:
            assert seq[-1] == "</s>" and np.isclose(lp, ar.log_density(seq), rtol=0, atol=0)


def test_tail_draws_match_tree_children_when_ties_come_in_the_models_own_order():
    # the model returns tied tokens in descending id order; the tree numbers children in that order
    # while draws read rows by column. Every completion of (2,) and (0,) is in the exact head, none
    # of (1,) but (1, 0): tail draws must (almost) never land in the head.
    import math

    from arenum import AutoregressiveEnumerable

    def model(prefix):
        if len(prefix) == 0:
            return [(0, math.log(0.5)), (2, math.log(0.25)), (1, math.log(0.25))]  # a tie, 2 before 1
        if prefix[0] == 2:
            return [(0, math.log(0.98)), (1, math.log(0.01)), (2, math.log(0.01))]
        if prefix[0] == 1:
            return [(0, math.log(0.998)), (1, math.log(0.001)), (2, math.log(0.001))]
        return [(0, math.log(1 / 3)), (1, math.log(1 / 3)), (2, math.log(1 / 3))]

    ar = AutoregressiveEnumerable(model, max_len=2)
    ar.count(math.log(0.25 * 0.01) - 1e-9)  # the head: every sequence but (1, 1) and (1, 2)
    h = ar.exact_head()
    assert h is not None and h.count == 7
    s = ar.monte_carlo(4000, head=True, seed=3).samples
    assert (s.score >= h.T).mean() < 0.01


def _mc_reports(seen):
    return [x for x in seen if x.get("phase") == "monte carlo"]


@pytest.mark.parametrize("head", [False, True])
def test_monte_carlo_draws_report_progress_level_by_level(monkeypatch, head):
    """Every level of the draws (and every chunk of a level scored in several) reaches the
    enumerable's ``progress`` callback, with the forwards so far; the last report has every draw ended."""
    import arenum.beyond.sampling as sampling

    monkeypatch.setattr(sampling, "_ENTRY_CHUNK", 64)  # 8 rows a chunk at V=8: a level in several chunks
    m = RandomModel(8, seed=3, peak=1.0, eos=0, eos_boost=1.0)
    seen = []
    e = AutoregressiveEnumerable(m, max_len=5, eos=0, progress=seen.append)
    if head:
        e.count(-4.0)
    seen.clear()
    n = 3000
    est = e.monte_carlo(n, head=head)
    mc = _mc_reports(seen)
    assert mc and mc[0]["draws_done"] == 0 and mc[-1]["draws_done"] == n == est.samples.n
    assert [x["draws_done"] for x in mc] == sorted(x["draws_done"] for x in mc)
    assert {x["level"] for x in mc} >= {1, 2, 3}
    assert any("rows_todo" in x and 0 < x["rows_done"] < x["rows_todo"] for x in mc)
    assert all(x["forwards"] == e.stats["forwards"] for x in mc[-1:])
    e._check()


def test_finite_state_draws_report_progress():
    from arenum.models.ngram import NGramModel

    m = NGramModel.fit(["password", "dragon", "letmein", "monkey"] * 5, order=2)
    seen = []
    e = m.enumerable(max_len=8, progress=seen.append)
    e.monte_carlo(500, head=False)
    mc = _mc_reports(seen)
    assert mc and mc[-1]["draws_done"] == 500 and mc[-1]["levels"] == 8
    assert len({x["level"] for x in mc}) >= 3


def test_a_long_draw_shows_a_progress_line_and_a_tiny_one_none():
    """The command line's bar (``make_progress``: a line redrawn on a terminal after 0.25 s) fed by a
    Monte Carlo draw: a draw of most of a second says so, a tiny one prints nothing."""
    import io
    import time

    from arenum.cli import common

    class Tty(io.StringIO):
        def isatty(self):
            return True

    base = RandomModel(3, seed=1, peak=0.5)

    def slow(prefix):
        time.sleep(0.002)
        return base(prefix)

    for n, long in ((2000, True), (2, False)):
        s = Tty()
        bar = common._LineBar(s)  # the bar without tqdm; tqdm's gets the same text (_bar_text)
        e = AutoregressiveEnumerable(slow if long else base, max_len=6, progress=bar)
        e.monte_carlo(n, head=False)
        bar.close()
        if long:
            assert "Monte Carlo:" in s.getvalue() and "draws ended, level" in s.getvalue()
        else:
            assert s.getvalue() == ""
    text = common._bar_text({"phase": "monte carlo", "draws": 10_000, "draws_done": 2500, "level": 3, "levels": 12,
                             "rows_done": 40, "rows_todo": 90})
    assert text == "Monte Carlo: 2,500/10,000 draws ended, level 3/12 (40/90 prefixes)"
