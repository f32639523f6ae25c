"""Monte Carlo honours ``max_bytes`` (issue 26, item 8): the draws are made in batches whose working
memory fits the budget, measured with tracemalloc, and the estimate stays an estimate of the truth."""
from __future__ import annotations

import math
import tracemalloc

import numpy as np
import pytest

from arenum import AutoregressiveEnumerable
from arenum.beyond.sampling import SAMPLE_BYTES_PER_DRAW, draw_samples, draw_work_bytes
from arenum import BudgetExceeded
from arenum.testing import RandomModel, brute_force


def test_draws_in_batches_within_max_bytes_match_the_truth_and_the_measured_peak():
    m = RandomModel(6, seed=4, peak=1.0)
    L = 7
    ar = AutoregressiveEnumerable(m, max_len=L)
    bf = brute_force(m.table, fixed_len=L)
    t = bf[2000][1]
    truth = sum(1 for _, s in bf if s >= t)
    n = 40_000
    budget = SAMPLE_BYTES_PER_DRAW * n + draw_work_bytes(L, False) * 4_000  # about ten batches
    draw_samples(ar.oracle, 100, ar.support, seed=1)  # the oracle's work buffers, allocated once
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        s = draw_samples(ar.oracle, n, ar.support, seed=3, max_bytes=budget)
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    assert s.extra["batches"] >= 8 and s.n == n and s.complete.all()
    assert peak <= 1.1 * budget, (peak, budget)
    est = float(np.mean(np.exp(-s.log_q) * (s.score >= t)))
    assert abs(est - truth) < 0.1 * truth
    whole = draw_samples(ar.oracle, n, ar.support, seed=3)  # unbounded: one batch, the same estimator
    assert "batches" not in whole.extra
    with pytest.raises(BudgetExceeded, match="max_bytes"):
        draw_samples(ar.oracle, n, ar.support, seed=3, max_bytes=SAMPLE_BYTES_PER_DRAW * n - 1)


def test_monte_carlo_under_max_bytes_batches_and_refuses_what_cannot_fit():
    m = RandomModel(5, seed=2, peak=1.0, eos=0, eos_boost=2.0)
    ar = AutoregressiveEnumerable(m, eos=0, max_len=8, max_bytes=24 << 20, estimate_samples=100)
    bf = brute_force(m.table, eos=0, cap=8)
    t = bf[500][1]
    mc = ar.monte_carlo(60_000, head=False)
    c = mc.count(t)
    truth = sum(1 for _, s in bf if s >= t)
    assert c.ci_lo <= truth <= c.ci_hi or abs(c.estimate - truth) < 0.1 * truth
    with pytest.raises(BudgetExceeded):
        ar.monte_carlo(10**6, head=False)
    assert math.isfinite(c.estimate)
