"""Commits are safe against an exception at any bytecode (issue 26, item 7).

A ``sys.settrace`` hook counts the bytecodes run inside a commit (the tree's commit, its records'
application, the growable arrays, the store's journal write and rollback) and raises at one drawn
at random; a second family arms a ``SIGALRM`` timer whose handler raises, at a random moment of a
build. After every fault: ``_check()``, the build finished, every answer equal to brute force; with
a store, the store dropped (as if killed) or closed, reopened, checked and compared, with nothing it
had committed lost; at the end, every store is reopened in a fresh process and compared again.
"""
from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import textwrap
import types

import numpy as np
import pytest

from arenum import AutoregressiveEnumerable
from arenum.exact import _arrays, frontier, levels, records, store, tree
from arenum.testing import RandomModel, brute_force

L = 5
VOCAB = ["a", "b", "c", "d", "e"]


class Injected(BaseException):
    """The fault: a BaseException, so that nothing on the way catches it as an error."""


def _codes() -> set:
    out: set = set()

    def add(obj):
        if isinstance(obj, types.FunctionType):
            obj = obj.__code__
        if isinstance(obj, property):
            for f in (obj.fget, obj.fset):
                if f is not None:
                    add(f)
            return
        if not isinstance(obj, types.CodeType) or obj in out:
            return
        out.add(obj)
        for c in obj.co_consts:
            add(c)  # nested functions: the undo closures

    P = tree.PrefixTree
    S = store.TreeStore
    for f in (P._commit, P._run, P.recover, P._save_scalars, P.apply, records.apply_fetch, records.apply_expand,
              records.apply_built, S._append, S._write, S._detach, S._reattach, S.rollback):
        add(f)
    for name, f in vars(_arrays.Grow).items():
        add(f)
    add(levels.Level.append)
    add(levels.Level.drop_view)
    add(store._Journal.__call__)
    add(store._Journal.rollback)
    for name, f in vars(frontier.Frontier).items():  # the derived columns each commit brings up to date
        add(f.__func__ if isinstance(f, staticmethod) else f)
    return out


CODES = _codes()


def _traced(fn, k: int) -> int:
    """Run ``fn()``, raising :class:`Injected` at the ``k``-th bytecode run inside a commit (never if
    ``k`` is 0); the count of such bytecodes run."""
    n = [0]

    def local(frame, event, arg):
        if event == "opcode":
            n[0] += 1
            if n[0] == k:
                raise Injected(k)
        return local

    def glob(frame, event, arg):
        if frame.f_code in CODES:
            frame.f_trace_opcodes = True
            return local
        return None

    sys.settrace(glob)
    try:
        fn()
    finally:
        sys.settrace(None)
    return n[0]


class _RowsOnce(RandomModel):
    """The random model, each prefix's row made once and handed out as a copy: the trials build the
    same six models over and over, and making a row (a generator seeded by the prefix) was a third of
    a build. The same rows, so the same forwards, commits and bytecodes (the faults land where they
    did); only the model's own time goes."""

    def __init__(self, *args, **kw) -> None:
        super().__init__(*args, **kw)
        self._rows: dict = {}

    def __call__(self, prefix: tuple):
        row = self._rows.get(prefix)
        if row is None:
            row = self._rows[prefix] = super().__call__(prefix)
        return list(row)


def _model(seed: int, term: bool, rows_once: bool = True) -> RandomModel:
    return (_RowsOnce if rows_once else RandomModel)(VOCAB, seed=seed, eos="a" if term else None, eos_boost=2.0)


def _open(m, term, path=None, **kw):
    return AutoregressiveEnumerable(m, max_len=L, eos="a" if term else None, batch_next_logprobs=m.batch,
                                    batch_size=4, store=path, fingerprint=None if path is None else "m", **kw)


def _exact(ar, bf) -> None:
    ar._check()
    n = ar.count(-math.inf)
    assert n == len(bf)
    assert ar.slice(0, n) == bf
    ar._check()


_MODELS: dict = {}


def _case(seed: int, term: bool, rows_once: bool = True):
    key = (seed % 3, term, rows_once)
    if key not in _MODELS:
        m = _model(seed % 3, term, rows_once)
        _MODELS[key] = m, brute_force(m.table, fixed_len=None if term else L, eos="a" if term else None, cap=L)
    return _MODELS[key]


@pytest.fixture
def no_fsync(monkeypatch):
    """The faults here are exceptions, not power cuts: syncing to the disk only costs time."""
    monkeypatch.setattr(store.os, "fsync", lambda fd: None)


@pytest.mark.parametrize("with_store", [False, True])
def test_an_exception_at_any_bytecode_of_a_commit_leaves_everything_exact(tmp_path, with_store, no_fsync):
    rng = np.random.default_rng(26 + with_store)
    totals: dict = {}
    trials = 100 if with_store else 200
    faults = 0
    stores = []
    for t in range(trials):
        term = bool(t % 2)
        m, bf = _case(t, term)
        path = tmp_path / f"s{t}" if with_store else None
        first = -3.0 - 2 * rng.random()  # part built before the fault, sometimes
        key = (t % 3, term, with_store)
        if key not in totals:  # bytecodes run inside commits by a whole build
            probe = _open(m, term, tmp_path / f"probe{t}" if with_store else None)
            totals[key] = _traced(lambda: (probe.count(first), probe.count(-math.inf)), 0)
            probe.close()
        ar = _open(m, term, path)
        k = int(rng.integers(1, totals[key] + 1))
        try:
            _traced(lambda: (ar.count(first), ar.count(-math.inf)), k)
        except Injected:
            faults += 1
        ar._check()
        if with_store:
            held = ar.stats["store_forwards"]
            built = ar._tree.built
            if rng.random() < 0.5:
                ar.close()
            else:
                del ar  # killed: the journal is all there is
            ar = _open(m, term, path)
            ar._check()
            assert ar.stats["store_forwards"] == held and ar._tree.built <= built  # nothing committed lost
            stores.append((str(path), t % 3, term))
        _exact(ar, bf)
        if with_store:
            ar.close()
    assert faults > 0.9 * trials
    if with_store:
        _reopen_in_a_fresh_process(stores)


def _stream(ar, n_total: int, out: list) -> None:
    """Read the order as ``arenum guesses`` does: slices each a quarter of what was read (at least 2),
    so the tree deepens in many small rounds; ``out`` collects what was read."""
    while len(out) < n_total:
        k = max(2, len(out) // 4)
        got = ar.slice(len(out), k)
        out.extend(got)
        if len(got) < k:  # the end of the support
            return


def test_a_fault_in_the_rounds_of_a_stream_leaves_the_frontier_exact():
    """The frontier (each node's next entry score, kept with the commits, and the histograms'
    populated span) after a fault at a random bytecode of a commit or of the frontier's own code,
    during a stream of growing slices: ``_check()`` compares it with one built from the columns,
    and the stream, resumed, reads exactly the brute-force order."""
    rng = np.random.default_rng(2027)
    faults = kept = 0
    totals: dict = {}
    for t in range(30):
        term = bool(t % 2)
        m, bf = _case(t, term)
        ar = _open(m, term)
        read: list = []
        if (t % 3, term) not in totals:  # bytecodes run inside commits and the frontier by a whole stream
            totals[t % 3, term] = _traced(lambda: _stream(_open(m, term), 400, []), 0)
        k = int(rng.integers(1, totals[t % 3, term] + 1))
        try:
            _traced(lambda: _stream(ar, 400, read), k)
        except Injected:
            faults += 1
        ar._check()
        kept += bool(ar._tree.frontier._next)
        _stream(ar, len(bf), read)
        assert read == bf
        ar._check()
        assert ar._tree.frontier._next and ar._tree.hist_top > 0
    assert faults > 0.9 * 30 and kept > 0


_REOPEN = textwrap.dedent("""
    import json, math, sys
    from arenum import AutoregressiveEnumerable
    from arenum.testing import RandomModel, brute_force
    bad, cases = [], {}
    for path, seed, term in json.loads(sys.argv[1]):
        if (seed, term) not in cases:  # six models: each brute-forced once, not once a store
            m = RandomModel(["a", "b", "c", "d", "e"], seed=seed, eos="a" if term else None, eos_boost=2.0)
            cases[seed, term] = m, brute_force(m.table, fixed_len=None if term else 5, eos="a" if term else None, cap=5)
        m, bf = cases[seed, term]
        ar = AutoregressiveEnumerable(m, max_len=5, eos="a" if term else None, batch_next_logprobs=m.batch,
                                      store=path, fingerprint="m", store_readonly=True)
        ar._check()
        if ar.stats["forwards"] or ar.count(-math.inf) != len(bf) or ar.slice(0, len(bf)) != bf:
            bad.append(path)
    print(json.dumps(bad))
""")


def _reopen_in_a_fresh_process(stores) -> None:
    import json

    r = subprocess.run([sys.executable, "-c", _REOPEN, json.dumps(stores)], capture_output=True, text=True,
                       timeout=300, env={**os.environ})
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads(r.stdout.strip().splitlines()[-1]) == []


class Alarm(Exception):
    """Raised by a SIGALRM handler (the timeouts servers and notebooks use)."""


def alarm_during(fn, seconds: float) -> bool:
    """Run ``fn()`` under a SIGALRM timer of ``seconds`` (the caller's handler raises :class:`Alarm`);
    whether the alarm landed (also one that fires as the timer is being cancelled)."""
    try:
        try:
            signal.setitimer(signal.ITIMER_REAL, seconds)
            fn()
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    except Alarm:
        return True
    return False


@pytest.mark.parametrize("with_store", [False, True])
def test_a_signal_handler_raising_during_builds_leaves_everything_exact(tmp_path, with_store, no_fsync):
    rng = np.random.default_rng(7 + with_store)

    def handler(signum, frame):
        raise Alarm()

    old = signal.signal(signal.SIGALRM, handler)
    hits = 0
    try:
        for t in range(60):
            term = bool(t % 2)
            m, bf = _case(t, term, rows_once=False)  # a model's own time: the alarms land in its calls too
            path = tmp_path / f"a{t}" if with_store else None
            ar = _open(m, term, path)
            hits += alarm_during(lambda: (ar.count(-math.inf), ar.slice(0, 50)), float(rng.uniform(0.0005, 0.03)))
            ar._check()
            assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # Ctrl-C still works
            if with_store:
                if t % 2:
                    ar.close()
                else:
                    del ar
                ar = _open(m, term, path)
                ar._check()
            _exact(ar, bf)
            if with_store:
                ar.close()
    finally:
        signal.signal(signal.SIGALRM, old)
    assert hits > 10
