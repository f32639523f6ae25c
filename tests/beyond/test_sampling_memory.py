"""Monte Carlo honours ``max_bytes`` (issue 26, item 8): the draws are made in batches whose working
memory fits the budget, measured with tracemalloc, and the estimate stays an estimate of the truth."""
from __future__ import annotations

import itertools
import json
import math
import subprocess
import sys
import textwrap
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
    # the model's rows, made before tracing: each call of the model made a generator (about 170 us a
    # call under tracemalloc, 55k calls); the draws, their batches and the library's memory the same
    rows = {p: m(p) for n in range(L) for p in itertools.product(range(6), repeat=n)}
    ar = AutoregressiveEnumerable(rows.__getitem__, max_len=L)
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


_RSS_CASE = textwrap.dedent("""
    import json, resource, sys
    import numpy as np
    from arenum import AutoregressiveEnumerable
    from arenum.beyond.sampling import SAMPLE_BYTES_PER_DRAW
    mib, V = int(sys.argv[1]), 16
    T = np.random.default_rng(0).normal(size=(V + 1, V)) * 1.5
    T -= np.log(np.exp(T).sum(1, keepdims=True))  # a bigram: its cost is the library's, not the model's
    ar = AutoregressiveEnumerable(lambda p: T[p[-1] if p else V], max_len=10, batch_size=64, max_bytes=mib << 20,
                                  batch_next_logprobs=lambda ps: T[[p[-1] if p else V for p in ps]])
    ar.count(-3.0)
    warm = ar.monte_carlo(4000, head=False, seed=1)  # the oracle's buffers; its draws stay cached (counted)
    warm.count(-20.0), warm.threshold(100)
    from arenum.step import kernels
    kernels.preload()  # the compiled kernels' code is the library's, loaded before the baseline
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    held = ar.stats["memory_bytes"] + ar.stats["table_cache_bytes"] + SAMPLE_BYTES_PER_DRAW * 4000
    n = int(0.9 * ((mib << 20) - held) / SAMPLE_BYTES_PER_DRAW)  # as many draws as the budget takes, nearly
    mc = ar.monte_carlo(n, head=False, seed=2)
    c, t = mc.count(-20.0), mc.threshold(n // 10)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - base
    print(json.dumps({"n": n, "peak": peak, "samples": mc.n, "ci": [c.ci_lo, c.ci_hi], "t": float(t)}))
""")


@pytest.mark.parametrize("mib", [64])
def test_monte_carlo_near_its_budget_peaks_within_10_percent_of_max_bytes(mib):
    """Issue 26 item 8, measured as peak RSS in a fresh process: ``monte_carlo(n)`` with as many draws
    as ``max_bytes`` takes, then a count and a threshold (the largest query's temporaries), stays within
    10% of the budget above the interpreter, the model and the compiled kernels (before: 96 bytes a
    draw counted, where the estimator and a threshold hold 171; 2.3x the budget at 1M draws)."""
    r = subprocess.run([sys.executable, "-c", _RSS_CASE, str(mib)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    budget = mib << 20
    assert got["samples"] == got["n"] > 50_000 and math.isfinite(got["t"]) and got["ci"][0] <= got["ci"][1]
    assert got["peak"] <= 1.10 * budget, (got["peak"] / budget, got)
