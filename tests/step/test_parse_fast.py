"""The fast dense-row parser (one sweep, compiled or numpy; packed-key sorts) against a plain reference.

Every answer bit must match a straightforward implementation written here: which rows are
renormalized and by what, which entries make a head, their order (ties in column order), the
floats, and the first error. Seeded random batches cover rows normalized to float64 precision,
slightly off, far off within the tolerance, off beyond it, NaN / +inf / > 0 / all -inf rows,
rows within ``RENORM_TOL`` (left verbatim), exact ties and near-ties (values differing only in
their last bits, which the packed sort keys cannot tell apart and must send to the stable sort).
"""
from __future__ import annotations

import math

import numpy as np
import pytest

import arenum.step.dense as dense_mod
import arenum.step.tables as tables_mod
from arenum.step import kernels
from arenum.step.vocab import Vocab
from arenum.step.oracle import StepOracle

RENORM_TOL = tables_mod.RENORM_TOL


@pytest.fixture(autouse=True, params=["numba", "numpy"])
def sweep_backend(request):
    """Every test here runs on the compiled sweep (numba, which the tests require) and on numpy's."""
    kernels.set_backend(request.param)
    yield request.param
    kernels.set_backend(None)


# ---------------------------------------------------------------- the reference, written plainly
def _ref_rows(arr, norm_tol):
    """``("bad", i)`` / ``("off", i)`` for the first bad row, else the normalized rows."""
    arr = np.array(arr, np.float64)
    n = arr.shape[0]
    lse = np.zeros(n)
    for i in range(n):  # NaN, > 0 and empty rows first (first such row), then sums off 1
        row = arr[i]
        if np.isnan(row).any() or (row > 0).any() or not (row > -math.inf).any():
            return ("bad", i)
    for i in range(n):
        row = arr[i]
        m = row.max()
        lse[i] = m + math.log(float(np.exp(row - m).sum()))
    for i in range(n):
        if abs(math.expm1(lse[i])) > norm_tol:
            return ("off", i)
    for i in range(n):
        if abs(lse[i]) > RENORM_TOL:
            arr[i] = arr[i] - lse[i]
    return arr


def _ref_heads(arr, floors, norm_tol):
    rows = _ref_rows(arr, norm_tol)
    if isinstance(rows, tuple):
        return rows
    out_r, out_c, out_lp = [], [], []
    for i, row in enumerate(rows):
        cols = np.flatnonzero(row >= floors[i])
        o = np.argsort(-row[cols], kind="stable")
        out_r += [i] * len(cols)
        out_c += cols[o].tolist()
        out_lp += row[cols[o]].tolist()
    return np.array(out_r, np.int64), np.array(out_c, np.int64), np.array(out_lp, np.float64)


def _ps(norm_tol):
    return tables_mod.Parser(Vocab(), norm_tol)


def _run(fn):
    try:
        return fn()
    except ValueError as e:
        return ("error", str(e))


def _got_heads(arr, floors, norm_tol):
    pre = [(i,) for i in range(arr.shape[0])]
    return _run(lambda: tables_mod.parse_dense_heads(arr, pre, floors, _ps(norm_tol)))


def _got_rows(arr, norm_tol):
    pre = [(i,) for i in range(arr.shape[0])]
    return _run(lambda: tables_mod.parse_dense_batch(arr, pre, _ps(norm_tol))[0].copy())


def _same(ref, got):
    """Bit-identical results, or the same error for the same row."""
    if isinstance(ref, tuple) and isinstance(ref[0], str):
        kind, i = ref
        assert isinstance(got, tuple) and got[0] == "error", got
        assert f"next_logprobs(({i},))" in got[1], (ref, got)
        assert ("probabilities sum to" in got[1]) == (kind == "off"), (ref, got)
        return
    assert not (isinstance(got, tuple) and got and isinstance(got[0], str)), got
    if isinstance(ref, np.ndarray):
        assert got.dtype == ref.dtype and np.array_equal(got.view(np.int64), ref.view(np.int64))
        return
    for a, b in zip(ref, got):
        assert a.dtype == b.dtype and a.shape == b.shape
        assert np.array_equal(a.view(np.int64), b.view(np.int64))  # bits, so -0.0 != 0.0


def _batch(rng, n, V, kind):
    """A float64 ``(n, V)`` batch of one kind of row (a few other rows mixed in)."""
    x = rng.gamma(rng.choice([0.05, 0.3, 1.0]), size=(n, V)) + 1e-300
    x /= x.sum(axis=1, keepdims=True)
    lp = np.log(x)
    lp -= np.log(np.exp(lp).sum(axis=1, keepdims=True))  # normalized to float64 precision
    r = int(rng.integers(0, n))
    if kind == "ties":  # bf16-like rounding: many exact ties
        lp = np.round(lp * 8) / 8
        lp[:, 1] = lp[:, 4]
        lp -= np.log(np.exp(lp).sum(axis=1, keepdims=True))
    elif kind == "near_ties":  # values one or a few ulps apart: the packed keys cannot order them
        lp[:, 1::2] = lp[:, 0:-1:2] if V % 2 else lp[:, 0::2]
        lp[:, 1::2] = np.nextafter(lp[:, 1::2], rng.choice([-np.inf, 0.0], size=lp[:, 1::2].shape))
        lp[:, 3] = np.nextafter(np.nextafter(lp[:, 2], 0.0), 0.0)
    elif kind == "within_renorm_tol":
        lp[r] += 3e-13
        lp[(r + 1) % n] -= 4e-13
    elif kind == "slightly_off":
        lp[r] += 3e-11
        lp[(r + 2) % n] -= 5e-12
    elif kind == "far_off_within":
        lp[r] -= 4e-4
    elif kind == "far_off_beyond":
        lp[r] += 0.5
    elif kind == "nan":
        lp[r, int(rng.integers(0, V))] = np.nan
    elif kind == "posinf":
        lp[r, int(rng.integers(0, V))] = np.inf
    elif kind == "positive":
        lp[r, int(rng.integers(0, V))] = 1e-15
    elif kind == "empty":
        lp[r] = -np.inf
    elif kind == "neginf":
        lp[r, : V // 2] = -np.inf
        lp[r] -= np.log(np.exp(lp[r]).sum())
    return lp


KINDS = ["normalized", "ties", "near_ties", "within_renorm_tol", "slightly_off", "far_off_within",
         "far_off_beyond", "nan", "posinf", "positive", "empty", "neginf"]


def _floors(rng, lp):
    n, V = lp.shape
    with np.errstate(invalid="ignore"):
        srt = -np.sort(-np.nan_to_num(lp, nan=0.0, posinf=0.0), axis=1)
    fl = srt[np.arange(n), rng.integers(0, V, size=n)]
    fl[rng.random(n) < 0.2] = -np.inf  # whole rows
    fl[rng.random(n) < 0.1] = 0.25  # above every entry: empty heads
    return fl


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("seed", range(3))
def test_dense_heads_and_rows_bit_identical_to_the_plain_reference(kind, seed):
    rng = np.random.default_rng(100 * seed + KINDS.index(kind))
    for n, V in ((37, 11), (9, 300), (3, 2000)):
        lp = _batch(rng, n, V, kind)
        fl = _floors(rng, lp)
        for norm_tol in (2e-2, 1e-12):  # the fast check, and the reference for every row
            _same(_ref_heads(lp, fl, norm_tol), _got_heads(lp, fl, norm_tol))
            _same(_ref_rows(lp, norm_tol), _got_rows(lp, norm_tol))


@pytest.mark.parametrize("kind", ["normalized", "ties", "near_ties", "within_renorm_tol", "slightly_off"])
def test_small_blocks_sort_chunks_and_the_pairwise_sum_give_the_same_bits(monkeypatch, kind):
    """One row per block, tiny cut and sort chunks (rows sorted alone and in padded groups), and the
    ``np.sum`` path of wide rows (``DOT_MAX_V`` forced to 0): the same results."""
    rng = np.random.default_rng(7)
    lp = _batch(rng, 29, 40, kind)
    fl = _floors(rng, lp)
    ref = _ref_heads(lp, fl, 2e-2)
    _same(ref, _got_heads(lp, fl, 2e-2))
    monkeypatch.setattr(tables_mod, "_BLOCK_ENTRIES", 1)
    monkeypatch.setattr(dense_mod, "_SORT_ENTRIES", 16)
    monkeypatch.setattr(dense_mod, "_CUT_ENTRIES", 50)  # the candidates cut a few blocks at a time
    _same(ref, _got_heads(lp, fl, 2e-2))
    monkeypatch.setattr(dense_mod, "DOT_MAX_V", 0)
    _same(ref, _got_heads(lp, fl, 2e-2))
    _same(_ref_rows(lp, 2e-2), _got_rows(lp, 2e-2))


def test_fetch_heads_of_the_oracle_equals_the_reference_across_chunks():
    rng = np.random.default_rng(3)
    lp = _batch(rng, 50, 64, "ties")
    fl = np.maximum(_floors(rng, lp), np.finfo(np.float64).min)  # as fetch_heads takes them
    r, c, v = _ref_heads(lp, fl, 2e-2)
    o = StepOracle(lambda p: lp[p[0]], batch_next_logprobs=lambda ps: lp[[p[0] for p in ps]], batch_size=16)
    h = o.fetch_heads([(i,) for i in range(50)], fl)
    assert np.array_equal(h.lens, np.bincount(r, minlength=50))
    assert np.array_equal(h.ids, c) and np.array_equal(h.lps.view(np.int64), v.view(np.int64))


# ---------------------------------------------------------------- the sorts
def _stable(v):
    return np.argsort(-v, kind="stable")


@pytest.mark.parametrize("seed", range(8))
def test_sort_table_equals_the_stable_sort(seed):
    rng = np.random.default_rng(seed)
    N = int(rng.integers(0, 3000))
    v = -rng.exponential(3, N)
    if seed % 4 == 1:
        v = np.round(v, 1)  # exact ties
    elif seed % 4 == 2 and N > 4:  # near-ties: 1 to 3 ulps apart
        v[1::2] = v[0 : N - 1 : 2] if N % 2 else v[0::2]
        v[1::2] = np.nextafter(v[1::2], 0.0)
        v[3] = np.nextafter(np.nextafter(v[2], 0.0), 0.0)
    elif seed % 4 == 3 and N > 6:
        v[:3] = [-0.0, 0.0, -np.inf]
        v[5] = -np.inf
    ids = rng.permutation(N).astype(np.int64)
    got_ids, got_v = tables_mod.sort_table(ids, v)
    o = _stable(v)
    assert np.array_equal(got_ids, ids[o]) and np.array_equal(got_v.view(np.int64), v[o].view(np.int64))


def test_sort_keys_refuse_positive_values_and_fall_back():
    v = np.array([-1.0, 1e-17, -0.5, 1e-17, 0.0])  # renormalization may round an entry above 0
    assert np.array_equal(dense_mod.desc_sort_row(v), _stable(v))
    lens = np.array([2, 3])
    assert np.array_equal(dense_mod.desc_order(v, lens), np.lexsort((-v, np.repeat([0, 1], lens))))


@pytest.mark.parametrize("seed", range(6))
def test_desc_order_equals_lexsort_with_wide_rows_ties_and_near_ties(monkeypatch, seed):
    rng = np.random.default_rng(seed)
    if seed % 2:
        monkeypatch.setattr(dense_mod, "_SORT_ENTRIES", 64)  # wide rows alone, narrow ones in groups
    lens = rng.integers(0, 200 if seed < 3 else 5, size=int(rng.integers(1, 60)))
    row = np.repeat(np.arange(lens.shape[0]), lens)
    v = -np.round(rng.exponential(3, row.shape[0]), 2)
    near = rng.random(row.shape[0]) < 0.3
    v[near] = np.nextafter(v[near], -np.inf)
    assert np.array_equal(dense_mod.desc_order(v, lens), np.lexsort((-v, row)))
    assert np.array_equal(tables_mod.head_order(row, v, lens), np.lexsort((-v, row)))
    p = rng.permutation(row.shape[0])  # rows not grouped: grouped first
    assert np.array_equal(tables_mod.head_order(row[p], v[p], lens), np.lexsort((-v[p], row[p])))


def test_the_dot_bound_keeps_cleared_rows_inside_the_renormalization_tolerance():
    """The fast check clears ``|s - 1| <= 1e-13``; with BLAS sums of up to ``DOT_MAX_V`` terms the
    exact sum is within ``1e-13 + (V - 1) 2**-53`` (plus exp's few ulps) of 1, inside ``RENORM_TOL``."""
    V = dense_mod.DOT_MAX_V
    assert tables_mod._CLEAR + (V - 1) * 2.0**-53 * (1 + 1e-12) + 8 * 2.0**-53 < RENORM_TOL / 1.5


@pytest.mark.parametrize("block", [1, 40, 1 << 16])
def test_runs_of_whole_rows_then_narrow_heads_then_whole_again(monkeypatch, block):
    """Blocks whose every entry passes (counted, then taken as a range), then a narrow block, then
    whole rows holding -inf entries (a finite floor drops them; a -inf floor keeps them)."""
    monkeypatch.setattr(tables_mod, "_BLOCK_ENTRIES", block)
    rng = np.random.default_rng(11)
    lp = _batch(rng, 24, 20, "normalized")
    lp[16:, :3] = -np.inf
    lp[16:] -= np.log(np.exp(lp[16:]).sum(axis=1, keepdims=True))
    fl = np.full(24, -np.inf)
    fl[8:16] = np.sort(lp[8:16], axis=1)[:, -3]  # three entries each
    fl[20:] = np.finfo(np.float64).min
    _same(_ref_heads(lp, fl, 2e-2), _got_heads(lp, fl, 2e-2))
