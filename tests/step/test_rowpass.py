"""The compiled row pass of the plain callback (:mod:`arenum.step._numba_rows` through
:func:`arenum.step.many.parse_rows`) against the numpy path, and the fallback without numba.

The compiled pass must answer bit for bit as the numpy path (parse, cut at the floors, then the
stable descending sort of each row): the same ids, values, head lengths, widths, renormalization
counts and vocab, or the same first error, on seeded chunks of every form with defects, ties,
near-ties, ``-inf`` entries, rows within and past ``RENORM_TOL``, sorted rows and wide rows. Without
numba (an ``ImportError`` on loading the kernels) the numpy path answers, silently, unless numba
was asked for.
"""
from __future__ import annotations

import math
import random
import sys
import warnings

import numpy as np
import pytest

import arenum.step.many as many
import arenum.step.tables as tables_mod
from arenum import AutoregressiveEnumerable
from arenum.errors import KernelUnavailable
from arenum.step import kernels
from arenum.step.vocab import Vocab
from arenum.testing import RandomModel, brute_force


@pytest.fixture
def jit_state(monkeypatch):
    """The loader's state, restored after the test (and the backend choice)."""
    saved = dict(many._jit)
    yield many._jit
    many._jit.clear()
    many._jit.update(saved)
    kernels.set_backend(None)


def _heads_by_row(r, ids, lps, n):
    return [(ids[r == i].tolist(), lps[r == i].tolist()) for i in range(n)]


def _rows(rng: random.Random, n: int, form: str, defect: bool) -> list:
    """``n`` raw results of one form (``list``, ``numpy`` or ``str``), maybe with one defect."""
    out = []
    for i in range(n):
        w = rng.choice([1, 2, 3, 7, 20, 63, 64, 65, 130]) if rng.random() < 0.8 else rng.randint(200, 1200)
        kind = rng.randrange(5)
        if kind == 0:  # exact ties
            vals = [-float(rng.randint(1, 4)) for _ in range(w)]
        elif kind == 1:  # near-ties: values differing in their last bits
            base = -rng.uniform(0.5, 3.0)
            vals = [float(np.nextafter(base, 0.0) if rng.random() < 0.5 else base) for _ in range(w)]
        else:
            vals = [math.log(rng.random() + 0.01) for _ in range(w)]
        p = np.exp(np.array(vals))
        lse = math.log(p.sum())
        vals = [v - lse for v in vals]  # normalized to float64 precision, or within a few ulps
        r = rng.random()
        if r < 0.1:
            vals = [v + 1e-9 for v in vals]  # within norm_tol, renormalized
        elif r < 0.15:
            vals = [v + 3e-13 for v in vals]  # near RENORM_TOL: the reference formula decides
        elif r < 0.3:
            vals.sort(reverse=True)  # given sorted: not sorted again
        toks = rng.sample(range(-5, 5000), w)
        if rng.random() < 0.15:
            toks.append(rng.choice([6000, 6001]))
            vals.append(-math.inf)
        if rng.random() < 0.05:
            vals = [-0.0 if j == 0 else -math.inf for j in range(len(vals))]  # one certain token, -0.0
        out.append([toks, vals])
    if defect:
        toks, vals = out[rng.randrange(n)]
        j = rng.randrange(len(toks))
        kind = rng.randrange(9)
        if kind == 0 and len(toks) > 1:
            toks[j] = toks[(j + 1) % len(toks)]  # a duplicate
        elif kind == 1:
            vals[j] = float("nan")
        elif kind == 2:
            vals[j] = 0.5
        elif kind == 3:
            vals[j] += 0.5  # the sum off 1
        elif kind == 4:
            vals[:] = [-math.inf] * len(vals)
        elif kind == 5:
            toks[j] = toks[j] + 2**40  # a span too wide for the stamps: the numpy duplicate check
        else:  # not a number, though float() or numpy would make one of it
            vals[j] = [repr(vals[j]), None, repr(vals[j]).encode()][kind - 6]
    res = []
    for toks, vals in out:
        if form == "numpy":
            res.append((np.array(toks, np.int64), np.array(vals)))
        elif form == "str":
            res.append([(f"t{t}", v) for t, v in zip(toks, vals)])
        else:
            res.append(list(zip(toks, vals)))
    return res


def _answer(fn, raws, pre, floors):
    vocab, seen = Vocab(), []
    ps = tables_mod.Parser(vocab, 1e-3, seen.append)
    try:
        lens, ids, lps, widths, done = fn(raws, pre, ps, floors)
    except (TypeError, ValueError) as e:
        return ("error", type(e), str(e))
    r = np.repeat(np.arange(len(raws)), lens)
    ids_l, lps_l = ids.tolist(), lps.tolist()
    if not done:  # the numpy path's rows as the model gave them: sort them for the comparison
        o = np.lexsort((-lps, r))
        r, ids_l, lps_l = r[o], ids[o].tolist(), lps[o].tolist()
    return ("ok", r.tolist(), ids_l, [x.hex() for x in lps_l], widths.tolist(), sum(seen), vocab.state())


@pytest.mark.parametrize("form", ["list", "numpy", "str"])
def test_compiled_rows_equal_the_numpy_path(form, jit_state):
    """parse_rows by the compiled pass answers as the numpy path, bit for bit, errors included."""
    kernels.set_backend("numba")
    rng = random.Random(7)
    for trial in range(120):
        n = rng.randint(1, 12)
        raws = _rows(rng, n, form, defect=trial % 4 == 0)
        pre = [("p", i) for i in range(n)]
        floors = None if trial % 3 == 0 else np.array([rng.choice([-math.inf, -1e300, -2.0, -0.7, 0.0, 1.0])
                                                        for _ in range(n)])
        got = _answer(many.parse_rows, raws, pre, floors)
        want = _answer(many.parse_rows_numpy, raws, pre, floors)
        assert got == want, (trial, raws)
    assert jit_state["mod"] is not None


def test_the_sort_equals_the_stable_argsort(jit_state):
    """Heads of every length (rank placement up to 64, merge sort past it), ties and near-ties:
    the stable descending order."""
    kernels.set_backend("numba")
    mod = many._compiled(1)
    rng = np.random.default_rng(3)
    for w in [1, 2, 3, 16, 17, 63, 64, 65, 100, 127, 128, 129, 1000, 4096]:
        for trial in range(4):
            v = -np.round(rng.exponential(2.0, w), int(rng.integers(0, 3)))
            if trial == 1:
                v = np.where(rng.random(w) < 0.5, v, np.nextafter(v, 0.0))
            if trial == 2:
                v = np.sort(v)  # ascending: the worst order
            ids = rng.permutation(w).astype(np.int64) * 3
            oi, ol, heads = np.empty(w, np.int64), np.empty(w), np.empty(1, np.int64)
            m = mod.cut_sort(ids, v, np.array([w], np.int64), np.array([-np.inf]), oi, ol, heads,
                             np.empty(w), np.empty(w, np.int64), np.empty(w, np.int64))
            o = np.argsort(-v, kind="stable")
            assert m == w and heads[0] == w
            assert np.array_equal(oi, ids[o]) and np.array_equal(ol.view(np.int64), v[o].view(np.int64))


def _no_numba(monkeypatch, jit_state):
    """Loading the kernels raises ImportError, as without numba."""
    import arenum.step

    jit_state.update(mod=None, error=None, rows=0)
    monkeypatch.setitem(sys.modules, "arenum.step._numba_rows", None)
    monkeypatch.delattr(arenum.step, "_numba_rows", raising=False)


def test_without_numba_the_numpy_path_answers(monkeypatch, jit_state):
    """No numba: no warning, the numpy path's answers and forwards; forced numba raises."""
    V, L = 7, 5
    m = RandomModel(V, seed=5, peak=1.5, ties=True, eos=0, eos_boost=2.0, form="dense")
    bf = brute_force(m.table, fixed_len=None, eos=0, cap=L)

    def cb(prefix):
        lp = m.logprobs(prefix)
        return np.arange(V, dtype=np.int64), lp

    def run():
        ar = AutoregressiveEnumerable(cb, max_len=L, eos=0, batch_size=4)
        return ar.top_k(60), ar.stats["forwards"]

    kernels.set_backend("numba")
    jit_state.update(mod=None, error=None, rows=0)
    fast = run()
    assert jit_state["mod"] is not None
    _no_numba(monkeypatch, jit_state)
    kernels.set_backend(None)
    monkeypatch.setattr(many, "JIT_ROWS", 0)
    monkeypatch.setattr(many, "JIT_ROWS_WARM", 0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        slow = run()
    assert jit_state["mod"] is None and "ModuleNotFoundError" in jit_state["error"]
    assert slow == fast
    assert [s for _, s in slow[0]] == [s for _, s in bf[:60]]
    kernels.set_backend("numba")
    with pytest.raises(KernelUnavailable, match="row pass is unavailable"):
        many.parse_rows([(np.array([0]), np.array([0.0]))], [()], tables_mod.Parser(Vocab()))


@pytest.mark.parametrize("warm", [False, True])
def test_auto_loads_the_kernels_only_past_jit_rows(monkeypatch, jit_state, warm):
    """Under ``auto`` the first JIT_ROWS rows parse by numpy (no load: a short run never pays it),
    JIT_ROWS_WARM once numba is warm (the dense kernels loaded)."""
    jit_state.update(mod=None, error=None, rows=0)
    monkeypatch.setattr(many, "JIT_ROWS", 10 if not warm else 10**9)
    monkeypatch.setattr(many, "JIT_ROWS_WARM", 10 if warm else 10**9)
    monkeypatch.setattr(kernels, "loaded", lambda: warm)
    kernels.set_backend("auto")
    ps = tables_mod.Parser(Vocab())
    row = (np.array([0, 1]), np.log(np.array([0.25, 0.75])))
    many.parse_rows([row] * 6, [()] * 6, ps)
    many.parse_rows([row] * 6, [()] * 6, ps)
    assert jit_state["mod"] is None and jit_state["rows"] == 12
    lens, ids, lps, widths, done = many.parse_rows([row] * 3, [()] * 3, ps)
    assert jit_state["mod"] is not None and done and lens.tolist() == [2, 2, 2]
    assert ids.tolist() == [1, 0] * 3 and widths.tolist() == [2, 2, 2]
    kernels.set_backend("numpy")
    lens, ids, lps, widths, done = many.parse_rows([row] * 3, [()] * 3, ps)
    assert ids.tolist() == [0, 1] * 3 and not done and lens.tolist() == [2, 2, 2]


def test_load_compiled_loads_at_once(jit_state):
    jit_state.update(mod=None, error=None, rows=0)
    kernels.set_backend("auto")
    assert many.load_compiled() and jit_state["mod"] is not None
    kernels.set_backend("numpy")
    assert not many.load_compiled()


@pytest.mark.parametrize("bad_at", [None, 203, 599])
def test_a_failing_call_after_a_bad_row_raises_the_rows_error(bad_at, jit_state):
    """One prefix per call, a chunk of rows: a call raising at prefix 600 leaves the rows before it
    parsed (a forward counted per call that returned), and a bad row among them raises its own
    error first, as when each row is parsed after its call."""
    from arenum.step.oracle import StepOracle

    m = RandomModel(8, seed=5, peak=1.0)

    def cb(p):
        i = p[0]
        if i == 600:
            raise KeyError("model down")
        row = m.logprobs((i % 8,))
        return [(t, float(v)) for t, v in enumerate(row)] if i != bad_at else [(0, 0.5)]

    o = StepOracle(cb, batch_size=4)
    o.fetch_heads([(i,) for i in range(200)], np.full(200, -np.inf))  # sizes the next chunks by the widest row
    assert o.stats.forwards == 200
    with pytest.raises(ValueError if bad_at is not None else KeyError) as e:
        o.fetch_heads([(i,) for i in range(200, 1000)], np.full(800, -np.inf))
    if bad_at is not None:
        assert "log_prob must be <= 0" in str(e.value) and f"({bad_at},)" in str(e.value)
    assert o.stats.forwards == 600 and o.stats.calls == 601
    good = [(i,) for i in range(200, 600) if i != bad_at]
    h = o.fetch_heads(good, np.full(len(good), -np.inf))
    # the rows got before the failure are kept and read again, not scored again; with a bad row among
    # them, its error comes first and nothing is kept (they are scored again)
    again = 0 if bad_at is None else len(good)
    assert h.lens.shape[0] == len(good) and (h.lens == 8).all() and o.stats.forwards == 600 + again


_FORM_DEFECTS = ["0-d tokens", "2-d pair", "2-d tokens", "lengths differ", "uint32 tokens", "bool tokens",
                 "float32 values", "int values", "int8 tokens", "list pair", "three arrays", "object values",
                 "strided tokens", "strided values", "big-endian values", "big-endian tokens"]


@pytest.mark.parametrize("defect", _FORM_DEFECTS)
@pytest.mark.parametrize("backend", ["numba", "numpy"])
def test_numpy_pairs_of_every_form_parse_as_row_by_row(defect, backend, jit_state):
    """A chunk of ``(tokens, log_probs)`` array pairs with one row of another form (shape, rank,
    dtype, container): the bulk parse answers as :func:`arenum.step.tables.parse_table` row by row,
    the same heads or the same first error."""
    kernels.set_backend(backend)
    rng = np.random.default_rng(_FORM_DEFECTS.index(defect))
    raws = []
    for _ in range(40):
        t = rng.permutation(30)[:20].astype(np.int64)
        v = np.log(rng.dirichlet(np.ones(20)))
        raws.append((t, v))
    t, v = raws[17]
    bad = {"0-d tokens": lambda: (np.array(3), v[:1]), "2-d pair": lambda: (t.reshape(4, 5), v.reshape(4, 5)),
           "2-d tokens": lambda: (t.reshape(20, 1), v), "lengths differ": lambda: (t, v[:-1]),
           "uint32 tokens": lambda: (t.astype(np.uint32), v), "bool tokens": lambda: (t % 2 == 0, v),
           "float32 values": lambda: (t, v.astype(np.float32)), "int values": lambda: (t[:1], np.zeros(1, np.int64)),
           "int8 tokens": lambda: (t.astype(np.int8), v), "list pair": lambda: [t, v],
           "three arrays": lambda: (t, v, v), "object values": lambda: (t, v.astype(object)),
           "strided tokens": lambda: (np.repeat(t, 2)[::2], v), "strided values": lambda: (t, np.repeat(v, 2)[::2]),
           "big-endian values": lambda: (t, v.astype(">f8")), "big-endian tokens": lambda: (t.astype(">i8"), v)}[defect]
    raws[17] = bad()
    pre = [(i,) for i in range(len(raws))]

    def ref():
        vocab, seen = Vocab(), []
        ps = tables_mod.Parser(vocab, 1e-3, seen.append)
        try:
            tabs = [tables_mod.parse_table(r, p, ps) for r, p in zip(raws, pre)]
        except (TypeError, ValueError) as e:
            return ("error", type(e), str(e))
        out = []
        for ids, lps in tabs:
            o = np.argsort(-lps, kind="stable")
            out.append((ids[o].tolist(), [x.hex() for x in lps[o].tolist()]))
        return ("ok", out, sum(seen))

    def got():
        vocab, seen = Vocab(), []
        ps = tables_mod.Parser(vocab, 1e-3, seen.append)
        try:
            lens, ids, lps, widths, done = many.parse_rows(raws, pre, ps, None)
        except (TypeError, ValueError) as e:
            return ("error", type(e), str(e))
        out, a = [], 0
        for n in lens.tolist():
            i, l = ids[a : a + n], lps[a : a + n]
            o = np.arange(n) if done else np.argsort(-l, kind="stable")
            out.append((i[o].tolist(), [x.hex() for x in l[o].tolist()]))
            a += n
        return ("ok", out, sum(seen))

    assert got() == ref()
