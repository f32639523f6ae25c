"""The certified DP's compiled sweep, its laziness and the skipped exact build (issue 27 target 3).

The compiled sweep (:mod:`arenum.beyond.sweepjit`) gives the numpy sweep's values bit for bit; a rank
past the caps builds the count DPs only (the mass DPs when its cumulative mass is read); an exact
build the certified count proves over the caps is not attempted (0 forwards), and every bracket
still holds brute force.
"""
from __future__ import annotations

import itertools
import math
import os
import pickle
import random

import numpy as np
import pytest

from arenum.beyond import CertifiedCounter
from arenum.beyond import certified, sweep
from arenum.errors import BudgetExceeded
from arenum.models import NGramModel
from arenum.support import Support


def _words(n: int, seed: int, alphabet: str = "abcd", longest: int = 6) -> list[str]:
    rng = random.Random(seed)
    return ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, longest))) for _ in range(n)]


def _scores(m: NGramModel, cap: int) -> np.ndarray:
    toks = [t for t in range(m.vocab_size) if t != m.eos]
    seqs = [t + (m.eos,) for n in range(cap) for t in itertools.product(toks, repeat=n)]
    return m.score_sequences(seqs)


def _answers(cc: CertifiedCounter, ts) -> list:
    return [(b.lo, b.hi) for t in ts for b in (cc.count_bracket(t), cc.mass_bracket(t))]


def _binding_cap_built_once(cc: CertifiedCounter, m: NGramModel, sup: Support, bits: float, ts) -> None:
    """Where the cap binds at the last threshold (seed 0's likely cycle, past about 47 nats), the
    lower count and mass DPs are summed length by length there: numpy's sweep in both runs (not the
    compiled one compared), 400 lengths, rebuilt from cell 0 each time a deeper threshold needs it
    (1.5x deeper: 2,895, 4,343 and 6,515 cells; most of this test's time). Asked at the first
    threshold and then at the last, each is built once (5,759 cells), the same values; the one-pass
    sweeps grow threshold by threshold through the same cells as before. A seed whose cap does not
    bind is not touched (a spare counter asks)."""
    K = cc._cells(ts[-1])[0]
    if CertifiedCounter(m.finite_state(), sup, resolution_bits=bits)._uncapped(True, K):
        return
    for mass in (False, True):
        for t in (ts[0], ts[-1]):
            cc._value(True, mass, cc._cells(t)[0])


@pytest.mark.parametrize("seed", range(4))
def test_compiled_sweep_equals_numpy_bit_for_bit(monkeypatch, seed):
    """Random n-grams (some with steps of probability near 1: zero-cost cells), counts past 2**53."""
    rng = random.Random(seed)
    words = _words(60, seed) + ["ab" * rng.randint(3, 9)] * rng.randint(0, 40)  # a likely cycle
    m = NGramModel.fit(words, order=rng.choice([2, 3]), smoothing=rng.choice(["kn", "wb", "addk"]))
    sup = Support.terminating(m.eos, m.eos, 400)  # the cap does not bind: the one-pass sweep
    ts = [-x for x in np.linspace(0.5, 90.0, 25)]
    res, bits = {}, rng.choice([1 / 8, 1 / 32, 1 / 64])
    for name, jit in (("numpy", lambda progress=None: None), ("numba", certified._compiled_sweep)):
        monkeypatch.setattr(certified, "_compiled_sweep", jit)
        cc = CertifiedCounter(m.finite_state(), sup, resolution_bits=bits)
        _binding_cap_built_once(cc, m, sup, bits, ts)
        res[name] = _answers(cc, ts)
        sweeps = [sw for k, sw in cc._sweeps.items() if k[2] is None]
        assert sweeps and all((sw.ring is not None) == (name == "numba") and (sw._jit is None) == (name == "numpy")
                              for sw in sweeps)
    assert res["numba"] == res["numpy"]
    assert max(hi for _, hi in res["numpy"] if math.isfinite(hi)) > 2**53  # the scaled cells were compared too


@pytest.mark.parametrize("seed", range(3))
def test_compiled_minplus_equals_numpy(monkeypatch, seed):
    """The min-plus DP deciding the sweep (cheapest cost of r-token paths): the same integers and
    length compiled or not, whether the cap binds (a short cap, a likely cycle) or not."""
    rng = random.Random(seed)
    words = _words(50, seed) + ["ab" * rng.randint(3, 9)] * rng.randint(0, 40)
    m = NGramModel.fit(words, order=rng.choice([2, 3]), smoothing=rng.choice(["kn", "wb"]))
    seen = set()
    for cap in (3, 12, 400):
        got = {}
        for name, jit in (("numpy", lambda progress=None: None), ("numba", certified._compiled_sweep)):
            monkeypatch.setattr(certified, "_compiled_sweep", jit)
            cc = CertifiedCounter(m.finite_state(), Support.terminating(m.eos, m.eos, cap))
            got[name] = [(cc._uncapped(lower, K), cc._minplus[lower][1], cc._minplus[lower][0].tolist())
                         for K in (0, 40, 300, 3000) for lower in (True, False)]
        assert got["numba"] == got["numpy"]
        seen |= {u for u, _, _ in got["numpy"]}
    assert seen == {True, False}  # both answers met: the cap binds at some depths and not at others


@pytest.mark.parametrize("seed", range(3))
def test_compiled_sweep_rings_per_state_hold_what_they_are_read_for(monkeypatch, seed):
    """Each state's ring is as long as the costliest step into it reads back (issue 27 target 5: a
    5-gram's rings took 2 GB per DP at one width for all): rings of different sizes, each longer
    than its farthest read plus a block, less in all than one width for every state, and the
    values the numpy sweep's bit for bit, deep enough that every ring wrapped many times."""
    rng = random.Random(seed)
    words = _words(80, seed, alphabet="abcde") + ["z"]  # a rare letter: steps into its states cost much
    m = NGramModel.fit(words, order=3, smoothing=rng.choice(["kn", "wb"]))
    sup = Support.terminating(m.eos, m.eos, 400)
    ts = [-x for x in np.linspace(0.5, 150.0, 30)]
    res = {}
    for name, jit in (("numpy", lambda progress=None: None), ("numba", certified._compiled_sweep)):
        monkeypatch.setattr(certified, "_compiled_sweep", jit)
        cc = CertifiedCounter(m.finite_state(), sup, resolution_bits=1 / 16)
        res[name] = _answers(cc, ts)
    assert res["numba"] == res["numpy"]
    for (lower, _, _), sw in cc._sweeps.items():
        e = sw.e
        src, col = np.nonzero(e.possible & (e.cost > 0))
        far = np.zeros(e.S, np.int64)
        np.maximum.at(far, e.nxt[src, col], e.cost[src, col])
        size = sw._rmask + 1
        assert np.all(size > far) and np.all(size >= sw.B) and np.all((size & sw._rmask) == 0)  # powers of two past each reach
        assert np.all((size == sw.B) | (size <= 2 * far))  # the smallest
        assert len(set(size.tolist())) > 1 and sw.ring.size == size.sum() < e.S * size.max()
        assert sw.K > 4 * size.max()  # every ring wrapped


def test_compiled_sweep_merged_steps_and_interrupt(monkeypatch):
    """Merged steps (weights: many tokens of one cell and next state) through the compiled sweep,
    and an interrupt between its calls leaves the ring and the row in step."""
    p = np.array([0.3 * 0.95] + [0.7 * 0.95 / 200] * 200 + [0.05])  # the last column: the end
    lp = np.log(p)[None, :]
    V = lp.shape[1]
    fs = certified.FiniteStateTables(np.arange(V, dtype=np.int64), lp, lp[:, -1].copy(),
                                     np.zeros((1, V), dtype=np.int32), 0, V - 1)
    sup = Support.terminating(V - 1, V - 1, 10**6)
    ts = [-x for x in np.linspace(1.0, 200.0, 20)]
    want = _answers(CertifiedCounter(fs, sup), ts)  # default: the compiled sweep
    monkeypatch.setattr(certified, "_compiled_sweep", lambda progress=None: None)
    assert _answers(CertifiedCounter(fs, sup), ts) == want
    monkeypatch.undo()
    monkeypatch.setattr(sweep.Sweep, "JIT_UPDATES", 1)  # one block of cells a call
    cc = CertifiedCounter(fs, sup)
    calls = []

    def stop(d):
        calls.append(d)
        if len(calls) == 3:
            raise KeyboardInterrupt
    cc.progress = stop
    with pytest.raises(KeyboardInterrupt):
        cc.count_bracket(-300.0)
    cc.progress = None
    assert _answers(cc, ts) == want


def _capped(m: NGramModel, **kw):
    return m.enumerable(max_len=7, max_prefixes=40, **kw)


def test_rank_builds_no_mass_tables_until_the_cumulative_is_read():
    m = NGramModel.fit(_words(40, 7), order=3, smoothing="kn")
    sc = _scores(m, 7)
    e = _capped(m)
    seq = m.encode("dcbad")
    s = m.logprob("dcbad")
    r = e.rank(seq)
    assert r.method == "certified" and r.cumulative_pending
    cells = e.certified().stats["cells"]
    assert cells and not any("mass" in k for k in cells)  # only the count DPs
    assert r.rank_lo <= int((sc > s).sum()) <= r.rank_hi
    truth = float(np.exp(sc[sc >= s]).sum())
    lo, hi = r.cumulative_lo, r.cumulative_hi  # read: the mass DPs are built now
    assert not r.cumulative_pending and any("mass" in k for k in e.certified().stats["cells"])
    assert lo <= truth * (1 + 1e-12) and truth <= hi * (1 + 1e-12) and lo <= r.cumulative <= hi
    assert r.cumulative == 0.5 * (lo + hi) and r.cumulative_point_method == "middle"
    d = r.as_dict()
    assert d["cumulative_lo"] == lo and "_mass" not in d
    # a record read in another process: pickled with its mass
    r2 = e.rank(seq)
    assert r2.cumulative_pending
    back = pickle.loads(pickle.dumps(r2))
    assert not back.cumulative_pending and back == r and back.cumulative == r.cumulative


def test_an_exact_build_the_certified_count_rules_out_is_skipped(monkeypatch):
    """The certified lower count passes twice the caps: no forwards past the sequence's own scoring,
    the same bracket as a build tried up to the cap gives, and exact answers where they fit."""
    from arenum.answers import Answers

    m = NGramModel.fit(_words(40, 11), order=3, smoothing="kn")
    sc = _scores(m, 7)
    seq = m.encode("ddddcc")
    s = m.logprob("ddddcc")
    truth = int((sc > s).sum())
    e = _capped(m)
    r = e.rank(seq)
    f0 = len(seq)  # the sequence's own prefixes, scored
    assert e.stats["forwards"] == f0 and r.method == "certified"
    assert r.rank_lo <= truth <= r.rank_hi and r.rank_lo > 4 * 40
    x = e.rank(m.encode("a"))  # within the caps: exact, as before
    assert x.exact and x.rank == int((sc > m.logprob("a")).sum())
    monkeypatch.setattr(Answers, "_out_of_reach", lambda self, t: False)
    tried = _capped(m)
    t = tried.rank(seq)
    assert tried.stats["forwards"] > f0 and t.method == "certified"  # it built up to the cap first
    assert (t.rank_lo, t.rank_hi) == (r.rank_lo, r.rank_hi)


def test_batched_ranks_equal_one_at_a_time():
    """``ranks`` (one scoring call, one DP made to the deepest) gives the records ``rank`` gives:
    exact where the built index reaches, certified past the caps, and ``deepen=True`` as ``rank``."""
    m = NGramModel.fit(_words(40, 5), order=3, smoothing="kn")
    sc = _scores(m, 7)
    batch, single = _capped(m), _capped(m)
    for e in (batch, single):
        e.rank(m.encode("a"))  # the same exact head in both
    built = batch.seek_index().tree.built
    cands = ["a", "ab", "dcbad", "ddddcc", "abcd", "cccccc", "b", "bdca", "dddd", "cabd", "aaaaaa"]
    # past the built head only where the certified count rules the build out: rank builds nothing either
    words = [w for w in cands if m.logprob(w) >= built or single.certified().count_lower(m.logprob(w)) > 80]
    assert sum(m.logprob(w) < built for w in words) >= 3 and any(m.logprob(w) >= built for w in words)
    seqs = [m.encode(w) for w in words]
    got = batch.ranks(seqs)
    want = [single.rank(s) for s in seqs]
    assert [r.method for r in got] == [r.method for r in want] and {"exact", "certified"} <= {r.method for r in got}
    assert got == want  # every field, the cumulative masses read
    for w, r in zip(words, got):
        s = m.logprob(w)
        assert r.rank_lo <= int((sc > s).sum()) <= r.rank_hi
    again, one = _capped(m), _capped(m)
    assert again.ranks(seqs, deepen=True) == [one.rank(s) for s in seqs]
    with pytest.raises(TypeError, match="sequences"):
        batch.ranks([seqs[0], 5])
    with pytest.raises(ValueError, match="outside the declared support"):
        batch.ranks([seqs[0], (m.eos, m.eos)])


_PROCESS = """
import json, sys, warnings
from arenum.models import NGramModel
m = NGramModel.load(sys.argv[1])
e = m.enumerable(max_len=7, max_prefixes=40, store=sys.argv[2])
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    r = e.rank(m.encode(sys.argv[3]))
cc = e.certified()
print(json.dumps({"lo": r.rank_lo, "hi": r.rank_hi, "method": r.method, "forwards": e.stats["forwards"],
                  "dp_seconds": sum(s.seconds for s in cc._sweeps.values()), "tables": sorted(cc._edges),
                  "numba": "numba" in sys.modules,
                  "warnings": [str(x.message) for x in w if "certified tables" in str(x.message)]}))
"""


def _in_process(model_path, store, word) -> dict:
    import json
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", _PROCESS, str(model_path), str(store), word], capture_output=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr.decode()[-2000:]
    return json.loads(out.stdout)


def test_certified_tables_kept_in_the_store_for_a_fresh_process(tmp_path):
    """A store keeps the certified DPs' rows in their own checksummed file: a fresh process answers
    the same bracket with no DP sweep and no forward past the sequence's own scoring; a damaged or
    foreign file is one warning line and a rebuild (the same bracket), then rewritten whole."""
    from arenum.beyond import certstore

    m = NGramModel.fit(_words(40, 11), order=3, smoothing="kn")
    path = tmp_path / "m.npz"
    m.save(path)
    store = tmp_path / "store"
    first = _in_process(path, store, "ddddcc")
    assert first["method"] == "certified" and first["dp_seconds"] > 0 and not first["warnings"]
    files = sorted(store.glob("certified-*.bin"))
    assert len(files) == 1 and not list(store.glob(".arenum-*"))  # no temp file left
    again = _in_process(path, store, "ddddcc")
    assert (again["lo"], again["hi"]) == (first["lo"], first["hi"]) and again["dp_seconds"] == 0
    assert again["forwards"] <= len(m.encode("ddddcc")) and not again["warnings"]
    # the kept rows answer alone: no step tables made, no compiled code loaded (scoring one string)
    assert first["tables"] == [False, True] and again["tables"] == []
    assert not again["numba"] or os.environ.get("ARENUM_KERNELS", "").strip().lower() == "numba"
    # a DP restored from the file and grown deeper is kept again: the next process needs no sweep
    deep = "dddddd"  # less probable than "ddddcc": the restored DP grows
    grown = _in_process(path, store, deep)
    assert grown["dp_seconds"] > 0 and not grown["warnings"]
    kept = _in_process(path, store, deep)
    assert (kept["lo"], kept["hi"]) == (grown["lo"], grown["hi"]) and kept["dp_seconds"] == 0
    # damaged: one flipped byte of the payload
    data = bytearray(files[0].read_bytes())
    data[-7] ^= 0xFF
    files[0].write_bytes(bytes(data))
    hurt = _in_process(path, store, "ddddcc")
    assert (hurt["lo"], hurt["hi"]) == (first["lo"], first["hi"]) and hurt["dp_seconds"] > 0
    assert len(hurt["warnings"]) == 1 and "damaged" in hurt["warnings"][0] and "\n" not in hurt["warnings"][0]
    assert _in_process(path, store, "ddddcc")["dp_seconds"] == 0  # rewritten whole
    # foreign: another model's whole file under this one's name
    other = NGramModel.fit(_words(40, 12), order=3, smoothing="kn")
    opath, ostore = tmp_path / "o.npz", tmp_path / "ostore"
    other.save(opath)
    _in_process(opath, ostore, "ddddcc")
    files[0].write_bytes(next(ostore.glob("certified-*.bin")).read_bytes())
    foreign = _in_process(path, store, "ddddcc")
    assert (foreign["lo"], foreign["hi"]) == (first["lo"], first["hi"])
    assert len(foreign["warnings"]) == 1 and "other tables" in foreign["warnings"][0]
    assert certstore.MAGIC == files[0].read_bytes()[:8]


def test_a_lazy_cumulative_read_by_many_threads_at_once_is_computed_once():
    """Threads reading a pending cumulative field together: one computation, every reader the same
    values, no reader sees the record half resolved (a KeyError or AttributeError)."""
    import threading
    import time

    from arenum.results import DensityRankResult

    names = ("cumulative", "cumulative_lo", "cumulative_hi", "cumulative_point_method")
    for trial in range(20):
        calls: list[int] = []

        def mass() -> tuple[float, float]:
            calls.append(1)
            time.sleep(0.001 * (trial % 3))
            return 0.25, 0.75

        r = DensityRankResult.lazy_cumulative(mass, rank=3, log_prob=-2.0, exact=False, method="certified",
                                              rank_lo=2, rank_hi=5)
        barrier, got, errors = threading.Barrier(8), [], []

        def read(name: str) -> None:
            barrier.wait()
            try:
                got.append((name, getattr(r, name)))
            except Exception as e:  # noqa: BLE001 - any error is the failure
                errors.append(e)

        threads = [threading.Thread(target=read, args=(names[i % 4],)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors and len(calls) == 1 and not r.cumulative_pending
        assert all(v == getattr(r, name) for name, v in got)
        assert r.cumulative_lo == 0.25 and r.cumulative_hi == 0.75 and 0.25 < r.cumulative < 0.75


def _numpy_sweep(monkeypatch):
    monkeypatch.setattr(certified, "_compiled_sweep", lambda progress=None: None)


@pytest.mark.parametrize("seed", range(4))
def test_windowed_sweep_equals_numpy_bit_for_bit(monkeypatch, seed):
    """A count DP built for one final depth (``prepare_counts``, ``ranks`` from nothing) sums each
    state only from its cheapest completion to the horizon less its cheapest path from the start:
    the start state's cells are the numpy sweep's bit for bit (a chain of likely steps: zero-cost
    cells; counts past 2**53), states are skipped on both sides, and a deeper count after it
    rebuilds, the same."""
    rng = random.Random(100 + seed)
    words = _words(70, seed, alphabet="abcdexyz") + ["cxyz"] * 150
    m = NGramModel.fit(words, order=3, smoothing=rng.choice(["kn", "wb"]))
    sup = Support.terminating(m.eos, m.eos, 400)
    bits = 1 / 16  # cells of 1/32 nat: "xy" -> "z" (p 0.98) rounds down to 0
    deep = -rng.uniform(60.0, 90.0)
    ts = [deep] + [-x for x in np.linspace(0.5, -deep, 20)]
    _numpy_sweep(monkeypatch)
    ref = CertifiedCounter(m.finite_state(), sup, resolution_bits=bits)
    want = [(b.lo, b.hi) for b in map(ref.count_bracket, ts + [2 * deep])]
    zero = any(e.c_zero.any() for e in ref._edges.values())
    monkeypatch.undo()
    cc = CertifiedCounter(m.finite_state(), sup, resolution_bits=bits)
    windowed = 0
    for lower, K in zip((True, False), cc._cells(deep)):  # one DP to a final cell, its windows looked at
        sw = cc._sweep(lower, False, K)
        sw.ensure(K, final=True)
        if sw.levels is not None:
            continue  # a binding cap: counted length by length (numpy), no window
        windowed += 1
        assert sw.horizon == K and sw.ring is not None
        lo_cell, hi_cell = sw._windows
        assert (lo_cell > 0).any() and ((hi_cell >= 0) & (hi_cell < K)).any()  # both ends skip work
        assert hi_cell[cc.tables.start] == K
    assert windowed == 2  # both roundings (no likely cycle: the cap does not bind)
    cc2 = CertifiedCounter(m.finite_state(), sup, resolution_bits=bits)
    cc2.prepare_counts(deep)  # built, released
    assert all(sw.ring is None and sw.horizon is None for sw in cc2._sweeps.values())
    for c in (cc, cc2):
        got = [(b.lo, b.hi) for b in map(c.count_bracket, ts + [2 * deep])]  # the last one deeper: rebuilt
        assert got == want
    assert zero  # "xy" -> "z": a step of probability near 1, a zero-cost cell in the upper DP
    assert max(hi for _, hi in want if math.isfinite(hi)) > 2**53


def test_windows_are_the_cheapest_paths():
    """``sweepjit.windows``: each state's cheapest completion and the horizon less its cheapest path
    from the start, against Bellman-Ford over the same steps (bulk, cheap and zero-cost)."""
    from arenum.beyond import sweepjit

    m = NGramModel.fit(_words(60, 7, alphabet="abcd") + ["abab"] * 30, order=3, smoothing="kn")
    cc = CertifiedCounter(m.finite_state(), Support.terminating(m.eos, m.eos, 400), resolution_bits=1 / 16)
    for lower in (True, False):
        e, (end, _) = cc._edges[lower], cc._end[lower]
        csr = sweepjit.csr_steps(e, False)
        src, col = np.nonzero(e.possible)
        nxt, cost = e.nxt[src, col].astype(np.int64), e.cost[src, col].astype(np.int64)
        big = 1 << 62
        h = np.minimum(end, big).astype(np.int64)
        d = np.full(e.S, big, np.int64)
        d[cc.tables.start] = 0
        for _ in range(e.S + 1):
            np.minimum.at(h, src, h[nxt] + cost)
            np.minimum.at(d, nxt, d[src] + cost)
        for horizon in (0, 500, big):
            lo, hi = sweepjit.windows(csr[0], csr[1], csr[2], csr[4], csr[5], csr[6], csr[8], csr[9], end, True,
                                      cc.tables.start, horizon)
            assert lo.tolist() == h.tolist()
            want = np.full(e.S, big) if horizon == big else np.where(d <= horizon, horizon - d, -1)
            assert hi.tolist() == want.tolist()


def test_windowed_sweep_interrupted_then_answers_the_same(monkeypatch):
    """An interrupt between the compiled calls of a windowed build (``prepare_counts``) leaves its
    ring and row in step: the counts after it, within and past its horizon, are an uninterrupted
    counter's."""
    m = NGramModel.fit(_words(80, 11, alphabet="abcde"), order=3, smoothing="kn")
    sup = Support.terminating(m.eos, m.eos, 400)
    ts = [-x for x in np.linspace(1.0, 80.0, 12)]
    want = [(b.lo, b.hi) for b in map(CertifiedCounter(m.finite_state(), sup).count_bracket, ts)]
    monkeypatch.setattr(sweep.Sweep, "JIT_UPDATES", 1)  # one block of cells a call
    rng = random.Random(3)
    for trial in range(5):
        cc = CertifiedCounter(m.finite_state(), sup)
        calls, stop_at = [], rng.randint(1, 12)

        def stop(d):
            calls.append(d)
            if len(calls) == stop_at:
                raise KeyboardInterrupt
        cc.progress = stop
        with pytest.raises(KeyboardInterrupt):
            cc.prepare_counts(-60.0)
        cc.progress = None
        cut = [sw for sw in cc._sweeps.values() if sw.horizon is not None]
        assert len(cut) == 1 and cut[0].ring is not None and 0 <= cut[0].K < cut[0].horizon  # stopped mid-way
        assert [(b.lo, b.hi) for b in map(cc.count_bracket, ts)] == want


def _reach(S: int, steps: list[tuple[int, int]]) -> np.ndarray:
    """``r[a, b]``: a path of one step or more from ``a`` to ``b`` (brute force)."""
    r = np.zeros((S, S), np.bool_)
    for a, b in steps:
        r[a, b] = True
    for k in range(S):
        r |= r[:, k : k + 1] & r[k : k + 1, :]
    return r


@pytest.mark.parametrize("seed", range(8))
def test_cheap_steps_summed_a_block_at_a_time_come_after_what_they_read(seed):
    """``sweepjit._ahead`` on random step graphs: the states it lets sum their cheap steps a block at
    a time are exactly those that reach neither a cycle of cheap steps nor an end of a zero-cost step
    (a path through states with cheap steps, brute force), each listed after every such state it reads."""
    from arenum.beyond import sweepjit

    rng = random.Random(seed)
    S = rng.randint(5, 40)
    cheap = [[rng.randrange(S) for _ in range(rng.choice([0, 0, 1, 1, 2, 3]))] for _ in range(S)]
    zero = [[rng.randrange(S)] if rng.random() < 0.05 else [] for _ in range(S)]
    c_ptr = np.concatenate([[0], np.cumsum([len(c) for c in cheap])]).astype(np.int64)
    z_ptr = np.concatenate([[0], np.cumsum([len(z) for z in zero])]).astype(np.int64)
    c_nxt = np.array([n for c in cheap for n in c], np.int32)
    z_nxt = np.array([n for z in zero for n in z], np.int32)
    inx, kind = sweepjit._unfinished(S, c_ptr, z_ptr, z_nxt)
    pre = sweepjit._ahead(S, inx, kind, z_ptr, c_ptr, c_nxt).tolist()
    hard = {s for s in range(S) if zero[s]} | {n for z in zero for n in z}
    assert {s for s in range(S) if kind[s]} == hard and {s for s in range(S) if inx[s]} == hard | {s for s in range(S) if cheap[s]}
    steps = [(s, n) for s in range(S) if inx[s] for n in cheap[s] if inx[n]]
    r = _reach(S, steps)
    bad = {s for s in range(S) if s in hard or r[s, s]}
    want = {s for s in range(S) if inx[s] and s not in bad and not any(r[s, b] for b in bad)}
    assert len(pre) == len(set(pre)) and set(pre) == want
    at = {s: i for i, s in enumerate(pre)}
    assert all(at[n] < at[s] for s in pre for n in cheap[s] if inx[n])


def test_cheap_steps_a_block_at_a_time_the_numpy_values_bit_for_bit(monkeypatch):
    """A model with chains of likely steps (summed a block at a time), a likely cycle and a step of
    probability near 1 (a zero-cost cell: those stay cell by cell): every group met in both
    roundings' sweeps, and the answers the numpy sweep's bit for bit, counts past 2**53."""
    from arenum.beyond import sweepjit

    words = _words(70, 5, alphabet="abcdexyz") + ["cxyz"] * 150 + ["qrst"] * 60 + ["ab" * 6] * 40
    m = NGramModel.fit(words, order=3, smoothing="kn")
    sup = Support.terminating(m.eos, m.eos, 400)
    ts = [-x for x in np.linspace(0.5, 50.0, 25)]  # deeper, the likely cycle binds the cap (per length, numpy)
    _numpy_sweep(monkeypatch)
    want = _answers(CertifiedCounter(m.finite_state(), sup, resolution_bits=1 / 16), ts)
    monkeypatch.undo()
    cc = CertifiedCounter(m.finite_state(), sup, resolution_bits=1 / 16)
    assert _answers(cc, ts) == want
    assert max(hi for _, hi in want if math.isfinite(hi)) > 2**53
    groups = []
    for (lower, mass, levels), sw in cc._sweeps.items():
        if levels is not None:
            continue  # counted length by length (numpy)
        c = sw._csr
        inx, kind = sweepjit._unfinished(cc.S, c[4], c[8], c[9])
        pre = sweepjit._ahead(cc.S, inx, kind, c[8], c[4], c[5])
        groups.append((lower, len(pre), int(inx.sum()) - len(pre), int(kind.sum())))
    assert {lower for lower, *_ in groups} == {True, False}
    assert all(n_pre > 0 and n_cell > 0 for _, n_pre, n_cell, _ in groups)  # both ways in every sweep
    assert any(zk > 0 for _, _, _, zk in groups)  # a zero-cost step (the upper rounding's)


def test_the_bulk_windows_asked_for_ahead_compile_to_a_prefetch():
    """``sweepjit._prefetch_cell`` (the bulk steps' windows asked for ahead of their reads) is an
    ``llvm.prefetch`` under this numba's LLVM: the instruction is in the machine code, and values
    read after it are unchanged."""
    from numba import njit

    from arenum.beyond import sweepjit

    @njit
    def total(a):
        s = 0.0
        for i in range(a.shape[0]):
            sweepjit._prefetch_cell(a, min(i + 16, a.shape[0] - 1))
            s += a[i]
        return s

    a = np.arange(1000.0)
    assert total(a) == a.sum()
    asm = "\n".join(total.inspect_asm().values()).lower()
    assert "prefetch" in asm or "prfm" in asm  # x86-64, or aarch64


@pytest.mark.parametrize("seed", range(4))
def test_cheapest_walks_rule_out_the_cap_as_the_min_plus_row_does(monkeypatch, seed):
    """``_uncapped`` with the cheapest j-token walks from any state (a path of ``cap`` tokens holds
    ``cap // j`` of them) decides as the min-plus row alone does, compiled or not, at depths where
    the cap binds (a likely cycle, a short cap) and where it does not; where the walks decide, the
    row is not walked (fewer passes)."""
    rng = random.Random(seed)
    words = _words(50, seed) + ["ab" * rng.randint(3, 9)] * rng.randint(0, 40)
    m = NGramModel.fit(words, order=rng.choice([2, 3]), smoothing=rng.choice(["kn", "wb"]))
    got, passes = {}, {}
    for walks in (0, certified.WALKS_MAX):
        monkeypatch.setattr(certified, "WALKS_MAX", walks)
        for name, jit in (("numpy", lambda progress=None: None), ("numba", certified._compiled_sweep)):
            monkeypatch.setattr(certified, "_compiled_sweep", jit)
            out, rs = [], []
            for cap in (3, 12, 60, 400):
                cc = CertifiedCounter(m.finite_state(), Support.terminating(m.eos, m.eos, cap))
                for K in (0, 40, 300, 3000, 20000):
                    for lower in (True, False):
                        out.append(cc._uncapped(lower, K))
                        rs.append(cc._minplus[lower][1])
            got[walks, name], passes[walks, name] = out, sum(rs)
    assert len({tuple(v) for v in got.values()}) == 1
    assert set(got[0, "numpy"]) == {True, False}
    assert passes[certified.WALKS_MAX, "numpy"] <= passes[0, "numpy"]
    assert passes[certified.WALKS_MAX, "numba"] == passes[certified.WALKS_MAX, "numpy"]
    # no likely cycle: the walks decide at once where the row took passes
    m = NGramModel.fit(_words(50, seed), order=3, smoothing="kn")
    cc = CertifiedCounter(m.finite_state(), Support.terminating(m.eos, m.eos, 400))
    K = cc.cap * cc._cheapest_step(True)  # the cheapest step alone does not rule it out
    assert cc._uncapped(True, K) and cc._minplus[True][1] == 0 and len(cc._walks[True][0]) > 2
    # kept with the min-plus rows: a counter restored from them knows it with no step table made;
    # one restored from rows kept before the walks (no such entry) walks again, the same answer
    for drop in (False, True):
        state = {k: v for k, v in cc.state().items() if not (drop and k.startswith("ruled_out_"))}
        back = CertifiedCounter(m.finite_state(), Support.terminating(m.eos, m.eos, 400))
        back.restore(state)
        assert back._uncapped(True, K) and (len(back._edges) == 0) == (not drop)
    monkeypatch.setattr(certified, "WALKS_MAX", 0)
    cc = CertifiedCounter(m.finite_state(), Support.terminating(m.eos, m.eos, 400))
    assert cc._uncapped(True, K) and cc._minplus[True][1] > 0


def test_walks_that_die_out_rule_the_cap_out_and_are_kept():
    """An acyclic model (one token, then only the end): no walk of 2 tokens exists, so no path
    reaches a 10-token cap at any depth; the depth kept for a store fits its int64 entry (5 walks of
    2 tokens, each "costing" the no-walk sentinel, overflowed it), and a counter restored from it
    needs no step table."""
    V, lp = 3, np.full((2, 3), -np.inf)
    lp[0, 0] = lp[0, 2] = math.log(0.5)
    lp[1, 2] = 0.0
    nxt = np.zeros((2, V), np.int32)
    nxt[0, 0] = 1
    fs = certified.FiniteStateTables(np.arange(V, dtype=np.int64), lp, lp[:, -1].copy(), nxt, 0, V - 1)
    sup = Support.terminating(V - 1, V - 1, 10)
    cc = CertifiedCounter(fs, sup)
    assert cc._uncapped(True, 10**6) and cc._walks[True][0][2] >= np.iinfo(np.int64).max // 4
    back = CertifiedCounter(fs, sup)
    back.restore({k: np.asarray(v) for k, v in cc.state().items()})
    assert back._uncapped(True, cc.max_cells) and len(back._edges) == 0
    # the sequences: "" and "0", 0.5 each
    assert [(b.lo, b.hi) for b in map(cc.count_bracket, (-0.1, -0.8, -50.0))] == [(0, 0), (2, 2), (2, 2)]


@pytest.mark.parametrize("seed", range(6))
def test_a_build_a_cap_refused_is_not_tried_again_and_answers_do_not_change(monkeypatch, seed):
    """Past a cap, a rank as deep as one whose build was refused is answered without trying the
    build again (``SeekIndex._deepen`` remembers the refusal while the caps and the tree's bytes
    allow no more: no forward, no scan); the records are those of an enumerable that tries every
    build again, with no more forwards; a looser cap builds again."""
    from arenum.answers import Answers
    from arenum.exact.tree import PrefixTree

    monkeypatch.setattr(Answers, "_out_of_reach", lambda self, t: False)  # every build tried
    rng = random.Random(seed)
    m = NGramModel.fit(_words(40, 20 + seed), order=3, smoothing="kn")
    sc = _scores(m, 7)
    words = _words(40, 50 + seed)
    kw = dict(max_bytes=150_000 + 20_000 * seed, max_prefixes=None if seed % 2 else 10**6)
    memo, again = m.enumerable(max_len=7, **kw), m.enumerable(max_len=7, **kw)
    memo.rank_exact_limit = again.rank_exact_limit = None  # the caps alone refuse (no rank's own limit)
    tried = []
    real = PrefixTree.deepen
    monkeypatch.setattr(PrefixTree, "deepen", lambda self, *a, **k: (tried.append(self), real(self, *a, **k))[1])
    skipped = 0
    for w in rng.sample(words, len(words)):
        seq, s = m.encode(w), m.logprob(w)
        si = memo.seek_index()
        n, f, fa = tried.count(si.tree), memo.stats["forwards"], again.stats["forwards"]
        lim = si.limits.max_prefixes  # the tree's known prefixes refuse some builds before any scan: not these
        deeper = s < si.tree.built and (lim is None or si.tree.known_prefixes(-s / math.log(2)) <= lim)
        got = memo.rank(seq)
        again.seek_index()._refused = None  # this one tries every build
        want = again.rank(seq)
        assert got == want and got.rank_lo <= int((sc > s).sum()) <= got.rank_hi
        assert memo.stats["forwards"] - f <= again.stats["forwards"] - fa
        if deeper and tried.count(si.tree) == n:  # refused at once: only its own prefixes scored
            skipped += 1
            assert got.method == "certified" and memo.stats["forwards"] - f <= len(seq)
        memo._check()
    assert skipped >= 1
    deep = min(words, key=m.logprob)
    assert memo.rank(m.encode(deep)).method == "certified"
    with pytest.raises(BudgetExceeded, match=r"is past the caps, as one at [0-9.]+ bits was: an exact answer"):
        memo.seek_index().ensure_score(m.logprob(deep))
    memo.seek_index().limits.max_prefixes = memo.seek_index().limits.max_bytes = None  # no cap: built
    assert memo.rank(m.encode(deep)).method == "exact"


def _prefix_scores(m: NGramModel, cap: int) -> np.ndarray:
    """The score of every prefix of fewer than ``cap`` tokens (the empty one included, no eos)."""
    toks = [t for t in range(m.vocab_size) if t != m.eos]
    out, level = [0.0], [((), 0.0)]
    for _ in range(cap - 1):
        nxt = []
        for p, s in level:
            lp = np.asarray(m.next_logprobs(p))
            nxt += [(p + (t,), s + float(lp[t])) for t in toks if lp[t] > -math.inf]
        out += [s for _, s in nxt]
        level = nxt
    return np.array(out)


@pytest.mark.parametrize("seed", range(5))
def test_the_prefix_count_holds_the_prefixes_of_brute_force(seed):
    """``prefix_lower(t)`` is at most the prefixes scoring ``>= t`` and at least those scoring ``>= t``
    plus the grid's slack on ``max_len`` steps (it fails if the DP counted sequences, or prefixes
    past the cap); ``None`` where the cap may bind."""
    m = NGramModel.fit(_words(40, 30 + seed), order=3, smoothing="kn")
    cap = 7
    cc = CertifiedCounter(m.finite_state(), Support.terminating(m.eos, m.eos, cap), resolution_bits=1 / 64)
    ps = _prefix_scores(m, cap)
    seen = 0
    for t in np.linspace(-0.5, -14.0, 12):
        lo = cc.prefix_lower(float(t))
        if lo is None:
            continue
        seen += 1
        assert lo <= int((ps >= t).sum())
        assert lo >= int((ps >= t + cap * cc.delta * 1.01).sum())
        assert lo >= cc.count_lower(float(t))
    assert seen >= 3
    assert cc.prefix_lower(0.5) == 0 and cc.prefix_lower(0.0) == 1  # the empty prefix scores 0
    assert CertifiedCounter(m.finite_state(), Support.fixed(3)).prefix_lower(-3.0) is None


def test_a_rank_after_a_deeper_one_is_refused_by_its_prefixes(monkeypatch):
    """Once a deeper rank has built the lower count DP, a rank whose sequences fit the caps but whose
    prefixes surely do not (the certified prefix count) is answered without its build: no forward
    past its own prefixes, the record a build tried up to the cap gives."""
    from arenum.answers import Answers

    m = NGramModel.fit(_words(40, 11), order=3, smoothing="kn")
    sc = _scores(m, 7)
    e, tried = _capped(m), _capped(m)
    for x in (e, tried):
        assert x.rank(m.encode("ddddcc")).method == "certified"  # the deep one: the count DP built, no build
    cc = e.certified()
    words = sorted({w for w in _words(300, 12) if len(w) <= 6}, key=m.logprob)
    hits = [w for w in words if m.logprob(w) < e.seek_index().tree.built and cc.count_lower(m.logprob(w)) <= 80
            and (cc.prefix_lower(m.logprob(w)) or 0) > 80]
    assert hits
    w = hits[len(hits) // 2]
    f = e.stats["forwards"]
    r = e.rank(m.encode(w))
    assert r.method == "certified" and e.stats["forwards"] - f <= len(w) + 1
    assert r.rank_lo <= int((sc > m.logprob(w)).sum()) <= r.rank_hi
    monkeypatch.setattr(Answers, "_out_of_reach", lambda self, t: False)
    f = tried.stats["forwards"]
    t = tried.rank(m.encode(w))
    assert tried.stats["forwards"] - f > len(w) + 1 and t == r  # it built up to the cap first, for the same record
    e._check()
