"""Dense ``(n, V)`` batches from ``batch_next_logprobs``: validated and cut in blocks of rows."""
from __future__ import annotations

import math

import numpy as np
import pytest

import arenum.step.tables as tables_mod
import arenum.exact.tree as tree_mod
from arenum.step.vocab import Vocab
from arenum import AutoregressiveEnumerable
from arenum.testing import RandomModel, brute_force


def _stacked(m: RandomModel, dtype=np.float64):
    def batch(prefixes):
        return np.stack([m.logprobs(p) for p in prefixes]).astype(dtype)

    return batch


@pytest.mark.parametrize("block", [1, 7, 1 << 16])
@pytest.mark.parametrize("term", [False, True])
@pytest.mark.parametrize("ties", [False, True])
def test_dense_batches_in_blocks_match_brute_force(monkeypatch, block, term, ties):
    """Blocks of one row, of a fraction of a row (``block < V``) and of whole batches."""
    monkeypatch.setattr(tables_mod, "_BLOCK_ENTRIES", block)
    if block == 1:
        monkeypatch.setattr(tree_mod, "_FETCH_ENTRIES", 8)  # and the tree fetches a few prefixes a round
    V, L = (6, 4) if term else (9, 3)
    eos = 0 if term else None
    m = RandomModel(V, seed=5 + V, peak=1.4, ties=ties, eos=eos, eos_boost=2.0)
    bf = brute_force(m.table, fixed_len=None if term else L, eos=eos, cap=L)
    ar = AutoregressiveEnumerable(m, max_len=L, eos=eos, batch_next_logprobs=_stacked(m), batch_size=5)
    for k in (1, 10, len(bf) // 3):  # deepening in rounds: later rounds see cached and new prefixes
        assert ar.threshold(k) == bf[k - 1][1]
    assert ar.slice(0, len(bf) + 2) == bf
    n = len(bf)
    for i in range(0, n, 5):
        seq, s = bf[i]
        assert ar.rank(seq).rank == sum(1 for _, x in bf if x > s)
    ar._check()


def test_reduced_precision_rows_are_renormalized_in_blocks(monkeypatch):
    """float32 rows (off from 1 by rounding) are converted and renormalized: the same answers as
    the exact float64 rows up to that renormalization."""
    monkeypatch.setattr(tables_mod, "_BLOCK_ENTRIES", 16)
    m = RandomModel(7, seed=2, peak=1.0)
    f32 = AutoregressiveEnumerable(m, max_len=3, batch_next_logprobs=_stacked(m, np.float32), batch_size=6)
    f64 = AutoregressiveEnumerable(m, max_len=3, batch_next_logprobs=_stacked(m), batch_size=6)
    a, b = f32.slice(0, 343), f64.slice(0, 343)
    assert len(a) == len(b) == 343
    assert max(abs(x - y) for (_, x), (_, y) in zip(a, b)) < 1e-5
    assert math.fsum(math.exp(s) for _, s in a) == pytest.approx(1.0, abs=1e-12)


@pytest.mark.parametrize("bad, match", [(float("nan"), "log_prob is NaN"), (0.25, "log_prob must be <= 0")])
def test_bad_row_in_a_later_block_names_its_prefix(monkeypatch, bad, match):
    monkeypatch.setattr(tables_mod, "_BLOCK_ENTRIES", 8)
    m = RandomModel(4, seed=1, peak=1.0)
    target = (3,)

    def batch(prefixes):
        arr = np.stack([m.logprobs(p) for p in prefixes])
        for i, p in enumerate(prefixes):
            if p == target:
                arr[i, 2] = bad
        return arr

    ar = AutoregressiveEnumerable(m, max_len=2, batch_next_logprobs=batch, batch_size=64)
    with pytest.raises(ValueError, match=match) as e:
        ar.slice(0, 16)
    assert "(3,)" in str(e.value)
    before = ar.stats["forwards"]
    with pytest.raises(ValueError, match=match):  # nothing half-stored: it fails the same way again
        ar.slice(0, 16)
    assert ar.stats["forwards"] >= before


# ---------------------------------------------------------------- the fused dense path vs the reference
def _reference_heads(arr, floors, norm_tol=1e-3):
    """The two-step path, written plainly: max, reference log-sum, checks, renormalize, cut, sort."""
    arr = np.asarray(arr, np.float64)
    out_r, out_c, out_lp = [], [], []
    with np.errstate(all="ignore"):
        m = arr.max(axis=1)
        lse = m + np.log(np.exp(arr - m[:, None]).sum(axis=1))
    for i, row in enumerate(arr):
        if not m[i] <= 0 or m[i] == -math.inf:
            return ("bad", i)
    for i in range(arr.shape[0]):
        if abs(math.expm1(lse[i])) > norm_tol:
            return ("off", i)
    for i, row in enumerate(arr):
        if abs(lse[i]) > tables_mod.RENORM_TOL:
            row = row - lse[i]
        cols = np.flatnonzero(row >= floors[i])
        o = np.argsort(-row[cols], kind="stable")
        out_r += [i] * len(cols)
        out_c += cols[o].tolist()
        out_lp += row[cols[o]].tolist()
    return np.array(out_r, np.int64), np.array(out_c, np.int64), np.array(out_lp)


def _fused(arr, floors, prefixes=None, norm_tol=1e-3):
    prefixes = prefixes or [(i,) for i in range(arr.shape[0])]
    return tables_mod.parse_dense_heads(arr, prefixes, floors, tables_mod.Parser(Vocab(), norm_tol))


@pytest.mark.parametrize("block", [1, 5, 1 << 16])
@pytest.mark.parametrize("seed", range(6))
def test_fused_dense_heads_bit_identical_to_reference(monkeypatch, block, seed):
    """Rows normalized to float64 precision, slightly off (renormalized), float32, with -inf entries
    and ties: the fused sweep returns exactly the entries, order and floats of the plain path."""
    monkeypatch.setattr(tables_mod, "_BLOCK_ENTRIES", block)
    rng = np.random.default_rng(seed)
    n, V = 23, 17
    x = rng.gamma(0.3, size=(n, V)) + 1e-300
    x /= x.sum(axis=1, keepdims=True)
    lp = np.log(x)
    lp[3, :5] = -np.inf
    lp[3] -= np.log(np.exp(lp[3]).sum())
    lp[4, 2] = lp[4, 7] = lp[4, 9]  # ties
    lp[4] -= np.log(np.exp(lp[4]).sum())
    lp[5] += 3e-11  # off by more than RENORM_TOL: renormalized
    lp[6] -= 4e-4  # far off, within the tolerance: renormalized
    floors = np.sort(lp, axis=1)[np.arange(n), rng.integers(6, V, size=n)]
    floors[7] = -np.inf
    floors[8] = 0.5  # above every entry: an empty head
    for arr in (lp, lp.astype(np.float32)):
        ref = _reference_heads(arr, floors)
        got = _fused(arr, floors)
        for a, b in zip(ref, got):
            assert a.dtype == b.dtype and np.array_equal(a, b)


@pytest.mark.parametrize("what, value, match", [
    ("nan", float("nan"), "log_prob is NaN for token 2"),
    ("pos", 1e-15, "log_prob must be <= 0, got 1e-15 for token 2"),
    ("inf", float("inf"), "log_prob must be <= 0, got inf for token 2"),
    ("none", None, "no finite log_prob"),
    ("off", 0.01, "probabilities sum to"),
])
def test_fused_dense_heads_errors_name_the_first_bad_row(what, value, match):
    """The same message as the single-row parser; NaN, > 0 and empty rows come before a sum off 1."""
    rng = np.random.default_rng(1)
    x = rng.dirichlet(np.ones(6), size=8)
    lp = np.log(x)
    lp[1] += 0.01  # off 1 (a later-priority error), in an earlier row
    lp[1] -= np.log(np.exp(lp[1]).sum()) if what != "off" else 0.0
    r = 5
    if what == "none":
        lp[r] = -np.inf
    elif what == "off":
        r = 1
    else:
        lp[r, 2] = value
    floors = np.full(8, -3.0)  # the bad entry may be above or below the floor: both are caught
    for fl in (floors, np.full(8, -np.inf), np.full(8, -0.0)):
        with pytest.raises(ValueError, match=match) as e:
            _fused(lp, fl, prefixes=[("p", i) for i in range(8)])
        assert f"('p', {r})" in str(e.value)


def test_dense_heads_and_full_rows_agree_on_rows_within_the_renormalization_tolerance():
    # a slow-path batch (norm_tol below the fast check) whose rows are off by less than RENORM_TOL:
    # the heads path must leave them verbatim, as the full-rows path does
    import numpy as np

    from arenum.step.oracle import StepOracle

    rng = np.random.default_rng(0)
    w = rng.random((6, 50))
    rows = np.log(w / w.sum(axis=1, keepdims=True)) + 3e-13  # |log sum p| ~ 3e-13 < 1e-12
    o = StepOracle(lambda p: rows[0], batch_next_logprobs=lambda ps: rows[: len(ps)], norm_tol=1e-12)
    prefixes = [(i,) for i in range(6)]
    heads = o.fetch_heads(prefixes, np.full(6, -np.inf))
    full, ids = o.fetch_rows(prefixes)
    for i, got in enumerate(np.split(heads.lps, np.cumsum(heads.lens)[:-1])):
        assert np.array_equal(np.sort(got), np.sort(full[i][np.isfinite(full[i])]))


@pytest.mark.parametrize("kernels", ["numpy", None])
def test_a_dense_row_with_masked_tokens_is_whole_and_never_scored_again(monkeypatch, kernels):
    """A dense batch row whose masked tokens are ``-inf`` holds only its finite entries: once its head
    holds them all, it is whole, and deeper queries score no prefix again (it was taken as cut at
    every depth: 553 forwards, 298 re-scores, a prefix called 4 times, where rows one by one cost 255)."""
    if kernels:
        monkeypatch.setenv("ARENUM_KERNELS", kernels)
    rng = np.random.default_rng(3)
    calls: list = []
    masked = {}

    def row(p):
        if p not in masked:
            r = np.log(rng.dirichlet(np.ones(4)))
            r[rng.choice(4, size=int(rng.integers(1, 3)), replace=False)] = -math.inf  # one or two masked
            r -= np.logaddexp.reduce(r[r > -math.inf])
            masked[p] = r
        return masked[p]

    def batch(prefixes):
        calls.extend(prefixes)
        return np.stack([row(p) for p in prefixes])

    ar = AutoregressiveEnumerable(lambda p: (calls.append(p), row(p))[1], max_len=6, batch_next_logprobs=batch)
    for t in (-2.0, -3.0, -4.0, -6.0, -math.inf):
        ar.count(t)
    ar._check()
    assert ar.stats["refetches"] == 0 and ar.stats["forwards"] == len(calls) == len(set(calls))
    def table(p):
        r = row(p)
        o = np.argsort(-r, kind="stable")  # descending, ties in column order
        return o.tolist(), r[o].tolist()

    bf = brute_force(table, fixed_len=6)
    assert ar.slice(0, len(bf) + 1) == bf
