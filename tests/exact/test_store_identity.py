"""The store never answers for another model or a replayed commit (issue 26, items 1, 2, 4, 6, 9).

Each test is seeded and runs many trials; stores are reopened after each, ``_check()`` called, and
every answer compared with brute force.
"""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from arenum import AutoregressiveEnumerable
from arenum import StoreError
from arenum.exact.store import PROBES, TreeStore
from arenum.testing import RandomModel, brute_force

V, L = 5, 5
VOCAB = ["a", "b", "c", "d", "e"]


def _open(m, path, term=True, **kw):
    return AutoregressiveEnumerable(m, max_len=L, eos="a" if term else None, batch_next_logprobs=m.batch,
                                    batch_size=8, store=path, **kw)


def _bf(m, term=True):
    return brute_force(m.table, fixed_len=None if term else L, eos="a" if term else None, cap=L)


class SameRoot(RandomModel):
    """Model ``seed`` everywhere but at the root, where it gives model ``root_seed``'s first step."""

    def __init__(self, *a, root_seed: int, **kw) -> None:
        super().__init__(*a, **kw)
        self._root = RandomModel(*a, **{**kw, "seed": root_seed})

    def logprobs(self, prefix: tuple) -> np.ndarray:
        return self._root.logprobs(prefix) if not prefix else super().logprobs(prefix)


# ------------------------------------------------------------------ item 1: a commit replayed twice
def test_an_exception_after_the_journal_write_then_a_retry_replays_each_commit_once(tmp_path, monkeypatch):
    """An exception (not SIGINT) between a commit's journal record and its in-memory commit, then a
    retry: the journal held the record twice and reopening counted sequences twice."""
    real = TreeStore._append
    stores = []
    for trial in range(12):
        m = RandomModel(VOCAB, seed=trial, eos="a", eos_boost=2.0)
        bf = _bf(m)
        rng = np.random.default_rng(trial)

        def flaky(self, kind, rec, seq, _rng=rng):
            real(self, kind, rec, seq)
            if _rng.random() < 0.3:
                raise MemoryError("injected after the journal write")

        p = tmp_path / f"s{trial}"
        ar = _open(m, p)
        monkeypatch.setattr(TreeStore, "_append", flaky)
        fails = 0
        while True:
            try:
                n = ar.count(-math.inf)
                break
            except MemoryError:
                fails += 1
                ar._check()
        monkeypatch.setattr(TreeStore, "_append", real)
        assert fails and n == len(bf) and ar.slice(0, n) == bf
        del ar  # killed: no close(), the journal is all there is
        ar2 = _open(m, p)
        ar2._check()
        assert ar2.count(-math.inf) == len(bf) and ar2.slice(0, len(bf)) == bf
        assert [ar2.unrank(i) for i in range(0, len(bf), 37)] == bf[::37]
        ar2.close()
        stores.append((str(p), trial))
    # and in a fresh process, as the issue reopened them (before: unrank(363) gave another sequence's score)
    r = subprocess.run([sys.executable, "-c", _REOPEN_REPLAYED, json.dumps(stores)], capture_output=True, text=True,
                       env={**os.environ}, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads(r.stdout.strip().splitlines()[-1]) == []


_REOPEN_REPLAYED = textwrap.dedent("""
    import json, math, sys
    from arenum import AutoregressiveEnumerable
    from arenum.testing import RandomModel, brute_force
    bad = []
    for path, seed in json.loads(sys.argv[1]):
        m = RandomModel(["a", "b", "c", "d", "e"], seed=seed, eos="a", eos_boost=2.0)
        bf = brute_force(m.table, eos="a", cap=5)
        ar = AutoregressiveEnumerable(m, max_len=5, eos="a", batch_next_logprobs=m.batch, store=path,
                                      store_readonly=True)
        ar._check()
        if ar.count(-math.inf) != len(bf) or [ar.unrank(i) for i in range(len(bf))] != bf:
            bad.append(path)
    print(json.dumps(bad))
""")


def test_superseded_records_are_skipped_and_a_gap_in_sequence_is_refused(tmp_path):
    m = RandomModel(VOCAB, seed=5, eos="a", eos_boost=2.0)
    bf = _bf(m)
    p = tmp_path / "s"
    ar = _open(m, p)
    assert ar.count(-math.inf) == len(bf)
    jpath = p / f"journal-{ar.store.generation}.bin"
    del ar
    data = jpath.read_bytes()
    from arenum.exact.storefiles import JOURNAL_HEADER as _HDR

    recs, pos = [], 0
    while pos < len(data):
        length = _HDR.unpack_from(data, pos)[1]
        recs.append(data[pos : pos + _HDR.size + length])
        pos += _HDR.size + length
    assert len(recs) > 3
    # a record written twice (same sequence number): the later one wins, nothing counted twice
    jpath.write_bytes(b"".join(recs[:2] + [recs[2], recs[2]] + recs[3:]))
    ar = _open(m, p, store_readonly=True)
    assert ar.slice(0, len(bf)) == bf
    ar._check()
    # a record missing in the middle: refused in one line
    jpath.write_bytes(b"".join(recs[:2] + recs[3:]))
    with pytest.raises(StoreError, match="out of sequence") as e:
        _open(m, p)
    assert "\n" not in str(e.value)


# ------------------------------------------------------------------ item 2: another model, same first step
@pytest.mark.parametrize("term", [True, False])
def test_a_model_with_the_same_first_step_is_refused(tmp_path, term):
    for trial in range(8):
        a = RandomModel(VOCAB, seed=10 + trial, eos="a" if term else None, eos_boost=2.0)
        b = SameRoot(VOCAB, seed=50 + trial, root_seed=10 + trial, eos="a" if term else None, eos_boost=2.0)
        assert a.table(()) == b.table(())
        p = tmp_path / f"s{trial}{term}"
        with _open(a, p, term) as ar:
            ar.count(-9.0 - trial)
        with pytest.raises(StoreError, match="another model") as e:
            _open(b, p, term)
        assert "\n" not in str(e.value)
        ar = _open(a, p, term)  # the model that built it opens it, having re-scored PROBES prefixes
        assert ar.store.probed == min(PROBES, ar.stats["tree_prefixes"])
        ar.close()


def test_a_model_differing_at_one_stored_prefix_is_caught_when_the_store_is_small(tmp_path):
    # at most PROBES stored prefixes: every one is re-scored, so any difference is caught
    a = RandomModel(VOCAB, seed=1, eos="a", eos_boost=3.0)

    class OneOff(RandomModel):
        def logprobs(self, prefix):
            lp = super().logprobs(prefix)
            return lp[::-1].copy() if prefix == target else lp

    p = tmp_path / "s"
    with _open(a, p) as ar:
        ar.count(-3.5)
        n = ar.stats["tree_prefixes"]
        v = ar._tree.view(1)
        target = tuple(ar.oracle.tokens(ar._tree.token_paths(1, np.flatnonzero(v.fetched)[:1])[0]))
    assert 1 < n <= PROBES
    with pytest.raises(StoreError, match="another model"):
        _open(OneOff(VOCAB, seed=1, eos="a", eos_boost=3.0), p)


# ------------------------------------------------------------------ item 4: the manifest is checksummed
def test_every_damaged_manifest_value_is_refused_in_one_line(tmp_path):
    m = RandomModel(VOCAB, seed=2, eos="a", eos_boost=2.0)
    p = tmp_path / "s"
    with _open(m, p) as ar:
        ar.count(-8.0)
    good = (p / "manifest.json").read_text()
    man = json.loads(good)
    rng = np.random.default_rng(0)

    def paths(x, pre=()):
        if isinstance(x, dict):
            for k, v in x.items():
                yield from paths(v, pre + (k,))
        elif isinstance(x, list) and x and len(x) < 8:
            for i, v in enumerate(x):
                yield from paths(v, pre + (i,))
        else:
            yield pre

    every = [q for q in paths(man) if q and q[0] != "crc32"]
    assert any(q == ("tree", "built") for q in every)
    for trial in range(60):
        q = every[trial % len(every)]
        d = json.loads(good)
        box = d
        for k in q[:-1]:
            box = box[k]
        v = box[q[-1]]
        if rng.random() < 0.2:
            del box[q[-1]]  # a key gone
        elif isinstance(v, bool) or v is None:
            box[q[-1]] = 1
        elif isinstance(v, (int, float)):
            box[q[-1]] = v + 1 + int(rng.integers(0, 5))
        elif isinstance(v, str):
            box[q[-1]] = v[:-1] + ("0" if v[-1:] != "0" else "1")
        else:
            box[q[-1]] = [v]
        (p / "manifest.json").write_text(json.dumps(d, indent=1))
        with pytest.raises(StoreError) as e:
            _open(m, p)
        assert "manifest.json" in str(e.value) and "\n" not in str(e.value), (q, str(e.value))
    (p / "manifest.json").write_text(good)
    ar = _open(m, p)
    ar._check()
    ar.close()


# ------------------------------------------------------------------ item 6: integer tokens, killed before close()
_KILLED = textwrap.dedent("""
    import os, sys
    from arenum import AutoregressiveEnumerable
    from arenum.testing import RandomModel
    m = RandomModel(5, seed=int(sys.argv[2]))
    ar = AutoregressiveEnumerable(m, max_len=4, batch_next_logprobs=m.batch, batch_size=8, store=sys.argv[1],
                                  fingerprint="int-model-" + sys.argv[2])
    ar.count(float(sys.argv[3]))
    os._exit(0)  # killed: no close(), no snapshot since the first
""")


def test_an_integer_token_store_killed_before_close_reopens_and_resumes(tmp_path):
    for trial in range(4):
        m = RandomModel(5, seed=trial)
        bf = brute_force(m.table, fixed_len=4)
        p = tmp_path / f"s{trial}"
        r = subprocess.run([sys.executable, "-c", _KILLED, str(p), str(trial), str(-4.0 - trial)],
                           capture_output=True, text=True, env={**os.environ}, timeout=120)
        assert r.returncode == 0, r.stderr
        ar = AutoregressiveEnumerable(m, max_len=4, batch_next_logprobs=m.batch, batch_size=8, store=p,
                                      fingerprint=f"int-model-{trial}")
        ar._check()
        assert ar.stats["forwards"] == 0
        k = sum(1 for _, s in bf if s >= -4.0 - trial)
        assert ar.slice(0, k) == bf[:k] and [ar.unrank(i) for i in range(k)] == bf[:k]
        assert [tuple(x) for x in ar.top_k(3)] == bf[:3]
        assert ar.count(-math.inf) == len(bf) and ar.slice(0, len(bf)) == bf  # the build resumes
        ar.close()


# ------------------------------------------------------------------ item 7: close() saves only a tree that passes its check
def test_close_never_saves_a_tree_that_fails_its_own_check(tmp_path):
    """A tree damaged in memory (a stored log-prob changed: a bug, or memory gone bad) is not written
    by ``close()``: one line, and the store keeps its last snapshot and journal, which reopen exact."""
    for trial in range(6):
        m = RandomModel(VOCAB, seed=20 + trial, eos="a", eos_boost=2.0)
        bf = _bf(m)
        p = tmp_path / f"s{trial}"
        ar = _open(m, p)
        n = ar.count(-6.0 - trial)
        lev = ar._tree.levels[1 + trial % 2]
        assert ar.store._journal_bytes > 0 and len(lev.pool_lp.v) > 1
        lev.pool_lp.v[len(lev.pool_lp.v) // 2] += 0.5  # damaged in memory, after its record was journaled
        with pytest.raises(StoreError, match="fails its check") as e:
            ar.close()
        assert "\n" not in str(e.value)
        del ar
        ar = _open(m, p)
        ar._check()
        assert ar.store.probed == min(PROBES, ar.stats["tree_prefixes"])
        assert ar.stats["forwards"] == 1 + ar.store.probe_forwards  # its root and the probes: nothing lost
        assert ar.count(-6.0 - trial) == n and ar.count(-math.inf) == len(bf) and ar.slice(0, len(bf)) == bf
        ar.close()


# ------------------------------------------------------------------ item 9: smaller refusals
def test_an_empty_store_path_and_an_unreadable_folder_are_refused_in_one_line(tmp_path, monkeypatch):
    import arenum.exact.store as store_mod

    m = RandomModel(VOCAB, seed=2, eos="a", eos_boost=2.0)
    with pytest.raises(ValueError, match="store"):
        _open(m, "")
    assert not list(tmp_path.iterdir())
    p = tmp_path / "s"
    with _open(m, p) as ar:
        ar.count(-5.0)
    # a folder this process may not read (as root every folder reads, so the check is made to fail)
    monkeypatch.setattr(store_mod.os, "access", lambda path, mode: os.path.abspath(path) != str(p))
    for kw in ({}, {"store_readonly": True}):
        with pytest.raises(StoreError, match="permission denied") as e:
            _open(m, p, **kw)
        assert "\n" not in str(e.value)
