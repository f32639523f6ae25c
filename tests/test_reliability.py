"""Failures are part of the contract: threads racing, Ctrl-C during a build. The object stays exact.

Every trial is seeded; after each one the tree and index invariants are checked (``_check``) and the
answers compared with brute force.
"""
from __future__ import annotations

import math
import os
import signal
import threading

import numpy as np
import pytest

from arenum import AutoregressiveEnumerable
from arenum.testing import RandomModel, brute_force


def _setup(V, L, term, seed):
    m = RandomModel(V, seed=seed, peak=1.0, eos=0 if term else None, eos_boost=2.0)
    bf = brute_force(m.table, fixed_len=None if term else L, eos=0 if term else None, cap=L)
    return m, bf


def _fresh(m, L, term, **kw):
    return AutoregressiveEnumerable(m, max_len=L, eos=0 if term else None, batch_next_logprobs=m.batch,
                                    batch_size=16, **kw)


@pytest.mark.parametrize("term", [False, True])
def test_threads_querying_a_fresh_enumerable_get_exact_answers(term):
    V, L = (7, 4) if not term else (6, 5)
    m, bf = _setup(V, L, term, seed=3)
    scores = [s for _, s in bf]
    rank_of = {}
    for i, (q, s) in enumerate(bf):
        rank_of.setdefault(s, i)  # first position of a score = #strictly higher
    for trial in range(6):
        ar = _fresh(m, L, term)
        errors: list[BaseException] = []
        wrong: list[str] = []

        def work(tid: int) -> None:
            rng = np.random.default_rng(1000 * trial + tid)
            try:
                for _ in range(25):
                    op = int(rng.integers(0, 4))
                    i = int(rng.integers(0, len(bf)))
                    if op == 0:
                        got = ar.unrank(i)
                        if got != bf[i]:
                            wrong.append(f"unrank({i}) = {got} != {bf[i]}")
                    elif op == 1:
                        t = scores[i]
                        c = ar.count(t)
                        want = sum(1 for s in scores if s >= t)
                        if c != want:
                            wrong.append(f"count({t}) = {c} != {want}")
                    elif op == 2:
                        x = ar.threshold(i + 1)
                        if x != scores[i]:
                            wrong.append(f"threshold({i + 1}) = {x} != {scores[i]}")
                    else:
                        q, s = bf[i]
                        r = ar.rank(q).rank
                        if r != rank_of[s]:
                            wrong.append(f"rank({q}) = {r} != {rank_of[s]}")
            except BaseException as exc:  # noqa: BLE001 - the test reports it
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors[:3]
        assert not wrong, wrong[:5]
        assert ar.count(-math.inf) == len(bf)
        ar._check()


class _Interrupter:
    """Delivers a real SIGINT to this process after a delay, as Ctrl-C would."""

    def __init__(self) -> None:
        self.old = signal.signal(signal.SIGALRM, lambda *_: os.kill(os.getpid(), signal.SIGINT))

    def arm(self, seconds: float) -> None:
        signal.setitimer(signal.ITIMER_REAL, seconds)

    def close(self) -> None:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, self.old)


@pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="needs POSIX interval timers")
@pytest.mark.parametrize("term", [False, True])
def test_ctrl_c_during_builds_leaves_the_object_exact(term):
    V, L = (8, 4) if not term else (6, 5)
    m, bf = _setup(V, L, term, seed=11)
    scores = [s for _, s in bf]
    rng = np.random.default_rng(7 if term else 8)
    # how long a full build takes here: the interrupts land anywhere inside it
    ar = _fresh(m, L, term)
    import time
    t0 = time.perf_counter()
    ar.count(-math.inf)
    full = time.perf_counter() - t0
    intr = _Interrupter()
    interrupted = 0
    try:
        for trial in range(120):
            ar = _fresh(m, L, term)
            queries = [int(rng.integers(0, len(bf))) for _ in range(3)]
            for q in queries:
                intr.arm(float(rng.uniform(1e-5, full)))
                try:
                    ar.unrank(q)
                    intr.arm(0)
                except KeyboardInterrupt:
                    interrupted += 1
                intr.arm(0)
                ar._check()
            # whatever was interrupted, the object answers exactly now
            for q in queries:
                assert ar.unrank(q) == bf[q]
            assert ar.count(scores[queries[0]]) == sum(1 for s in scores if s >= scores[queries[0]])
            assert ar.count(-math.inf) == len(bf)
            ar._check()
    finally:
        intr.close()
    assert interrupted > 20  # the interrupts did land inside builds
