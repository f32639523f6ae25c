"""The compiled dense-row sweep (numba) against numpy: its ``exp``, its sums, its cut, its fallbacks.

The precision argument of :mod:`arenum.step.kernels` rests on two measured facts tested here: the
kernel's ``exp`` is within ``EXP_REL_ERR`` of the true value everywhere in ``[-708, 0]``, and a row
sum is within ``(CHUNK + V / CHUNK) * 2**-53`` (plus the ``exp`` error) of the exact sum. The cut
must be exactly numpy's comparison, the special values (NaN, ``+inf``, ``-inf``, ``> 0``,
``-0.0``) must reach the callers' checks, and the parse results must not depend on the backend
(``tests/step/test_parse_fast.py`` runs every parse test on both).
"""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import threading

import numpy as np
import pytest

from arenum import KernelUnavailable
from arenum.step import kernels
from arenum.step.dense import sweep
from arenum.step.oracle import StepOracle
from arenum.step.tables import Scratch

U = 2.0**-53


@pytest.fixture(autouse=True)
def compiled():
    kernels.set_backend("numba")  # the tests require numba: a missing one fails here
    yield
    kernels.set_backend(None)


def _exact_sum(row: np.ndarray) -> float:
    return math.fsum(math.exp(v) for v in row.tolist())


def test_exp_within_bound_on_a_dense_grid():
    x = np.concatenate([np.linspace(-708.0, 0.0, 2_000_001), -np.random.default_rng(0).exponential(5.0, 1_000_000),
                        np.array([-0.0, 0.0, -1e-300, -5e-324, -math.log(2) / 2, -708.0])])
    got = kernels.kernel_exp(x)
    want = np.exp(x)  # within 1 ulp of the true value
    rel = np.abs(got / want - 1.0)
    assert rel.max() <= kernels.EXP_REL_ERR - 2 * U, rel.max()
    assert abs(got[-6] - 1.0) <= kernels.EXP_REL_ERR and got[-6] == got[-5]


def test_exp_below_the_clamp_and_special_values():
    got = kernels.kernel_exp(np.array([-709.0, -1e6, -np.inf, np.nan, np.inf]))
    assert np.all(got[:3] == got[0]) and 0 < got[0] <= 3.4e-308
    assert math.isnan(got[3]) and not math.isfinite(got[4])


@pytest.mark.parametrize("V", [1, 7, 8, 9, 1023, 1024, 1025, 2000, 5000, 70_000])
def test_row_sums_within_the_stated_bound(V):
    rng = np.random.default_rng(V)
    n = 6 if V > 5000 else 24
    rows = np.empty((n, V))
    for i in range(n):
        x = rng.normal(0.0, [0.5, 3.0, 30.0][i % 3], V)
        x -= np.log(np.exp(x - x.max()).sum()) + x.max()
        rows[i] = x
    rows[-1, : V // 2] = -np.inf
    s = kernels.rows_sum(rows)
    s2, _, _ = kernels.heads_sweep(rows, np.zeros(n))
    bound = (kernels.CHUNK + V / kernels.CHUNK + 2) * U + kernels.EXP_REL_ERR
    for i in range(n):
        exact = _exact_sum(rows[i])
        assert abs(s[i] - exact) <= bound * exact + 1e-300, (i, s[i], exact)
        assert s2[i] == s[i]  # the same sum with and without the cut


def test_bad_entries_reach_the_checks():
    V = 300
    base = np.log(np.full(V, 1.0 / V))
    rows = np.tile(base, (6, 1))
    rows[1, 17] = np.nan
    rows[2, 250] = np.inf
    rows[3, 3] = 1e-9  # slightly above 0: the sum hardly moves, the row must still not pass
    rows[4, :] = -np.inf
    rows[5, 299] = 800.0  # past exp's range
    s = kernels.rows_sum(rows)
    assert abs(s[0] - 1.0) < 1e-13
    assert math.isnan(s[1]) and math.isnan(s[2]) and math.isnan(s[3]) and math.isnan(s[5])
    assert s[4] < 1e-300
    floors = np.zeros(6)  # a cut at 0 catches every entry > 0
    s2, flats, vals = kernels.heads_sweep(rows, floors)
    f = np.concatenate(flats)
    assert math.isnan(s2[1]) and not math.isfinite(s2[2])
    assert set((f // V).tolist()) == {2, 3, 5}  # NaN is never >= a floor; +inf, 1e-9 and 800 are


def _random_batch(rng, n, V):
    with np.errstate(divide="ignore"):  # a Dirichlet draw may underflow to 0
        rows = np.log(rng.dirichlet(np.full(V, rng.choice([0.05, 0.5, 5.0])), size=n))
    k = rng.integers(0, 4)
    if k == 1:  # exact ties and signed zeros
        rows[:, : V // 3] = rows[:, :1]
        if V >= 2:
            rows[0, :2] = [-0.0, 0.0]
    elif k == 2:
        rows[rng.random((n, V)) < 0.2] = -np.inf
    elif k == 3:
        rows[rng.integers(0, n), rng.integers(0, V)] = rng.choice([np.nan, np.inf, 0.5])
    return np.ascontiguousarray(rows)


@pytest.mark.parametrize("seed", range(40))
def test_cut_and_sums_match_numpy(seed):
    rng = np.random.default_rng(seed)
    n, V = int(rng.integers(1, 60)), int(rng.choice([1, 5, 64, 333, 1024, 2500]))
    rows = _random_batch(rng, n, V)
    kind = seed % 4  # whole rows, none (a cut at 0), a few entries per row, about half of each row (dense)
    srt = np.sort(rows, axis=1)
    floors = (np.full(n, -np.inf) if kind == 0 else np.zeros(n) if kind == 1
              else np.minimum(srt[:, max(0, V - int(rng.integers(1, 9)))], 0.0) if kind == 2
              else np.minimum(srt[:, V // 2], 0.0))
    floors = np.where(np.isnan(floors), -1.0, floors)  # a row holding NaN: floors are never NaN
    with np.errstate(all="ignore"):
        s_np, _, fl_np, va_np = sweep(rows, 8, Scratch(), floors)
        s_k, fl_k, va_k = kernels.heads_sweep(rows, floors, guess=int(rng.integers(1, 4)))  # grows its buffers
    f_np, v_np = np.concatenate(fl_np), np.concatenate(va_np)
    keep = v_np >= floors[f_np // V]  # numpy's sweep returns a superset: its exact cut
    f_k = np.concatenate(fl_k)
    assert np.array_equal(f_k, f_np[keep])
    assert np.array_equal(np.concatenate(va_k), v_np[keep])  # same floats, -0.0 included
    assert np.array_equal(np.signbit(np.concatenate(va_k)), np.signbit(v_np[keep]))
    pieces = [p for p in fl_k if p.size]
    for a, b in zip(pieces, pieces[1:]):  # pieces hold whole rows
        assert a[-1] // V < b[0] // V
    with np.errstate(all="ignore"):
        good = np.isfinite(s_np)
    assert np.array_equal(np.isnan(s_k[good]), np.zeros(good.sum(), bool))
    assert np.allclose(s_k[good], s_np[good], rtol=1e-12, atol=1e-300)
    assert np.all(~np.isfinite(s_k[~good]) | (np.nanmax(np.where(np.isnan(rows), -np.inf, rows), axis=1)[~good] > 0))


def test_backend_selection(monkeypatch):
    assert kernels.backend() == "numba"
    kernels.set_backend("numpy")
    assert kernels.backend() == "numpy"
    assert kernels.rows_sum(np.zeros((1, 1))) is None
    assert kernels.heads_sweep(np.zeros((1, 1)), np.zeros(1)) is None
    kernels.set_backend(None)
    monkeypatch.setenv(kernels.ENV, "numpy")
    assert kernels.backend() == "numpy"
    monkeypatch.setenv(kernels.ENV, "auto")
    assert kernels.backend() == "numba"
    with pytest.raises(ValueError, match="unknown kernel backend"):
        kernels.set_backend("cuda")


def test_bad_environment_value_is_refused(monkeypatch):
    kernels.set_backend(None)
    monkeypatch.setenv(kernels.ENV, "gpu")
    with pytest.raises(ValueError, match="ARENUM_KERNELS='gpu'"):
        kernels.backend()


@pytest.mark.parametrize("failure", [ImportError("No module named 'numba'"), RuntimeError("LLVM says no")])
def test_unavailable_kernels_fall_back_to_numpy(monkeypatch, failure):
    monkeypatch.setitem(kernels._state, "kernels", None)
    monkeypatch.setitem(kernels._state, "error", None)

    def broken():
        raise failure
    monkeypatch.setattr(kernels, "_build", broken)
    kernels.set_backend(None)
    if isinstance(failure, ImportError):
        assert kernels.backend() == "numpy"
    else:
        with pytest.warns(RuntimeWarning, match="LLVM says no"):
            assert kernels.backend() == "numpy"
    assert kernels.backend() == "numpy"  # decided once
    rows = np.log(np.full((3, 4), 0.25))
    o = StepOracle(lambda p: rows[p[0]], batch_next_logprobs=lambda ps: rows[: len(ps)], batch_size=8)
    h = o.fetch_heads([(0,), (1,), (2,)], np.full(3, -np.inf))  # the numpy sweep
    assert h.lens.tolist() == [4, 4, 4]
    with pytest.raises(KernelUnavailable, match="unavailable"):
        kernels.set_backend("numba")


def test_batches_the_kernels_do_not_take():
    assert not kernels.takes(np.zeros((2, 3), np.float32))
    assert not kernels.takes(np.zeros((3, 2)).T)
    assert not kernels.takes(np.zeros((2, 0)))
    assert kernels.takes(np.zeros((2, 3)))


def test_oracle_results_identical_on_both_backends():
    rng = np.random.default_rng(5)
    V, n = 700, 300
    rows = np.log(rng.dirichlet(np.full(V, 0.3), size=n))
    rows[::7] += 1e-11  # off by more than RENORM_TOL: renormalized
    rows[1::7] += 3e-13  # inside it: verbatim
    prefixes = [(i,) for i in range(n)]
    floors = np.sort(rows, axis=1)[:, -5] - 0.1
    out = {}
    for b in ("numba", "numpy"):
        kernels.set_backend(b)
        o = StepOracle(lambda p: rows[p[0]], batch_next_logprobs=lambda ps: rows[[p[0] for p in ps]], batch_size=64)
        h = o.fetch_heads(prefixes, floors)
        full = o.fetch_rows(prefixes[:50])
        out[b] = (h, full, o.stats.renormalized_rows)
    (h1, r1, n1), (h2, r2, n2) = out["numba"], out["numpy"]
    assert n1 == n2 > 0
    assert np.array_equal(h1.lens, h2.lens) and np.array_equal(h1.ids, h2.ids) and np.array_equal(h1.lps, h2.lps)
    for a, b in zip(r1, r2):
        assert np.array_equal(np.asarray(a[0]), np.asarray(b[0])) and np.array_equal(np.asarray(a[1]), np.asarray(b[1]))


def test_threads_share_the_compiled_sweep():
    rng = np.random.default_rng(9)
    rows = np.log(rng.dirichlet(np.full(900, 0.5), size=200))
    floors = np.sort(rows, axis=1)[:, -3]
    want = kernels.heads_sweep(rows, floors)
    errors = []

    def work():
        for _ in range(20):
            s, fl, va = kernels.heads_sweep(rows, floors)
            if not (np.array_equal(s, want[0]) and np.array_equal(np.concatenate(fl), np.concatenate(want[1]))):
                errors.append("differs")

    ts = [threading.Thread(target=work) for _ in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors


def test_env_forces_numpy_in_a_fresh_process():
    code = "from arenum.step import kernels; print(kernels.backend())"
    env = dict(os.environ, **{kernels.ENV: "numpy"})
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "numpy"


@pytest.mark.parametrize("seed", range(12))
def test_quantized_cumsum_is_numpys_bit_for_bit(seed):
    from arenum.beyond.draws import K_BITS, quantize_rows, quantized_cumsum

    rng = np.random.default_rng(seed)
    m, V = int(rng.integers(1, 40)), int(rng.choice([1, 2, 7, 300, 2001]))
    p = rng.dirichlet(np.full(V, float(rng.choice([0.01, 0.3, 5.0]))), size=m) * float(rng.choice([1.0, 1e-300, 7.5]))
    p[rng.random((m, V)) < 0.1] = 0.0
    p[:, 0] += 1e-300  # every row keeps a positive entry
    if V > 2:
        p[0, 1] = p[0, 2] = p[0].max() * 2  # tied largest widths: the first takes the excess
    want = np.cumsum(quantize_rows(p), axis=1)
    got = quantized_cumsum(p)
    assert np.array_equal(got, want)
    assert np.all(got[:, -1] == 2.0**K_BITS)  # rows of total 1e-300 included (no overflow)
    widths = np.diff(got, axis=1, prepend=0.0)
    assert np.all(widths >= 0) and np.all((widths > 0) | (p == 0))
    kernels.set_backend("numpy")
    assert np.array_equal(quantized_cumsum(p), want)


def test_quantized_cumsum_refuses_an_empty_row():
    from arenum.beyond.draws import quantized_cumsum

    with pytest.raises(ValueError, match="no entry of positive weight"):
        quantized_cumsum(np.array([[0.5, 0.5], [0.0, 0.0]]))


def test_draws_identical_on_both_backends():
    from arenum import AutoregressiveEnumerable
    from arenum.testing import RandomModel

    m = RandomModel(300, seed=3, peak=2.0, eos=0, eos_boost=20.0, form="dense")
    out = {}
    for b in ("numba", "numpy"):
        kernels.set_backend(b)
        ar = AutoregressiveEnumerable(m, batch_next_logprobs=lambda ps: np.stack([m.logprobs(p) for p in ps]),
                                      eos=0, max_len=5, batch_size=97)
        s = ar.monte_carlo(3000, head=False, seed=11).samples
        out[b] = (s.score, s.log_q, s.length, s.keys)
    for x, y in zip(out["numba"], out["numpy"]):
        assert np.array_equal(x, y)


def test_a_short_run_does_not_load_the_kernels_and_answers_the_same():
    """Under the default choice the first WARM_ENTRIES entries take the numpy path (the same values):
    a fresh process scoring a few strings never imports numba; past the warm-up the kernels load."""
    code = (
        "import sys, json, numpy as np\n"
        "from arenum.models import NGramModel\nfrom arenum.step import kernels\n"
        "m = NGramModel.fit(['password', 'dragon', 'monkey', 'letmein', 'abc123'] * 3, order=3)\n"
        "e = m.enumerable(max_len=12)\n"
        "a = [e.log_density(m.encode(w)) for w in ('dragon', 'passmonkey', 'mod')]\n"
        "loaded = [kernels._state['kernels'] is not None, 'numba' in sys.modules]\n"
        "kernels.WARM_ENTRIES = 1 << 12\n"  # a small warm-up, so that this small model passes it
        "t = e.threshold(3000); c = e.count(t)\n"  # enough rows to pass the warm-up
        "loaded += [kernels._state['kernels'] is not None]\n"
        "print(json.dumps({'a': [float(x).hex() for x in a], 'c': [int(c), float(t).hex()], 'loaded': loaded}))\n")
    env = {k: v for k, v in os.environ.items() if k != kernels.ENV}
    outs = {}
    for choice in ("auto", "numpy"):
        env[kernels.ENV] = choice
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
        outs[choice] = json.loads(out.stdout)
    assert outs["auto"]["loaded"] == [False, False, True]
    assert outs["numpy"]["loaded"] == [False, False, False]
    assert outs["auto"]["a"] == outs["numpy"]["a"] and outs["auto"]["c"] == outs["numpy"]["c"]
