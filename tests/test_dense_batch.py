"""Dense ``(n, V)`` batches from ``batch_next_logprobs``: validated and cut in blocks of rows."""
from __future__ import annotations

import math

import numpy as np
import pytest

import arenum.tables as tables_mod
import arenum.tree as tree_mod
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
