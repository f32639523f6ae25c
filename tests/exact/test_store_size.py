"""What a store keeps on disk (format version 4, ``arenum.exact.snapshot``; issue 27 target 6).

A closed store keeps narrowed columns and derives the rest; when a forward costs less than the
bytes of a table it cuts the stored tables below the built budget. Either way a reopened store
answers inside the budget with no forward and bit-identical answers; a deeper query scores the cut
prefixes again (counted in ``forwards`` and ``refetches``) and still answers exactly. Every trial
is checked against brute force and ``_check()``.
"""
from __future__ import annotations

import json
import math
import time
import zlib

import numpy as np
import pytest

from arenum import AutoregressiveEnumerable, StoreError
from arenum.exact import snapshot as snapshot_mod
from arenum.exact.snapshot import DERIVED, pack_state, unpack_state
from arenum.exact.storefiles import manifest_crc
from arenum.testing import RandomModel, brute_force

L = 5


def _open(m, path, term, **kw):
    return AutoregressiveEnumerable(m, max_len=L, eos=0 if term else None, batch_next_logprobs=m.batch,
                                    batch_size=8, store=path, fingerprint="m", **kw)


def _recount(ar) -> dict[str, np.ndarray]:
    """The steering histograms recounted from the heads the tree stores (each entry once)."""
    from arenum.exact.records import HIST_BINS_PER_BIT, HIST_LEN

    def bin_of(x):  # the bin a fetch counts an entry of score x in: floor(-x / ln 2 * 64), capped
        return np.minimum(x / (-math.log(2) / HIST_BINS_PER_BIT), HIST_LEN - 1).astype(np.int64)

    tree = ar._tree
    out = {"h_comp": np.zeros(HIST_LEN, np.int64), "h_pref": np.zeros(HIST_LEN, np.int64)}
    for d, lev in enumerate(tree.levels):
        tlen, off = lev.tlen.astype(np.int64), lev.off.astype(np.int64)
        rep = np.repeat(np.arange(tlen.shape[0]), tlen)
        at = np.repeat(off, tlen) + np.arange(rep.shape[0]) - np.repeat(np.cumsum(tlen) - tlen, tlen)
        b = bin_of(lev.score[rep] + lev.pool_lp.v[at])
        eos = lev.pool_tok.v[at] == tree.eos_id if tree.eos_id is not None else np.zeros(b.shape[0], bool)
        leaf = d == tree.leaf_level
        np.add.at(out["h_comp"], b[eos | (tree.eos_id is None and leaf)], 1)
        if not leaf:
            np.add.at(out["h_pref"], b[~eos], 1)
    return out


def _hists_hold_the_stored_heads(ar) -> bool:
    got = _recount(ar)
    return all(np.array_equal(getattr(ar._tree, k), got[k]) for k in got)


def _du(p) -> int:
    return sum(f.stat().st_size for f in p.rglob("*") if f.is_file())


@pytest.mark.parametrize("term", [False, True])
@pytest.mark.parametrize("keep", [False, True, None])
def test_a_reopened_store_answers_bit_identically_with_no_forward_and_deepens_exactly(tmp_path, term, keep):
    rng = np.random.default_rng(7 + term)
    for trial in range(4):
        m = RandomModel(list(range(7)), seed=int(rng.integers(1 << 30)), eos=0 if term else None, eos_boost=1.5)
        bf = brute_force(m.table, fixed_len=None if term else L, eos=0 if term else None, cap=L)
        T = bf[int(rng.integers(20, 200))][1]
        p = tmp_path / f"s{trial}{keep}"
        ar = _open(m, p, term)
        n = ar.count(T)
        want = ar.slice(0, n)
        ar.store.keep_tables = keep
        ar.close()
        cut = ar.store.cut
        assert keep is None or cut == (keep is False)
        ar2 = _open(m, p, term)
        assert ar2.stats["forwards"] == 0
        ar2._check()
        # the steering histograms count what is stored: a cut takes its entries out, so that a prefix
        # scored again counts them once (they were counted twice: a cap one process met was refused)
        assert _hists_hold_the_stored_heads(ar2)
        assert ar2.count(T) == n and ar2.slice(0, n) == want == bf[:n]
        assert [ar2.rank(s).rank for s, _ in want[::7]] == list(range(0, n, 7))
        assert ar2.stats["forwards"] == 0
        # deeper: every answer exact; a cut store scores its cut prefixes again, and says so
        assert ar2.count(-math.inf) == len(bf) and ar2.slice(0, len(bf)) == bf
        ar2._check()
        assert _hists_hold_the_stored_heads(ar2) and ar2._tree.known_prefixes(99.0) == ar2._tree.n_nodes
        clean = AutoregressiveEnumerable(m, max_len=L, eos=0 if term else None, batch_next_logprobs=m.batch,
                                         batch_size=8)
        clean.count(-math.inf)
        assert _hists_hold_the_stored_heads(clean)
        extra = ar2.stats["forwards"] - (clean.stats["forwards"] - ar.stats["forwards"])
        assert extra == ar2.stats["refetches"]
        assert (extra > 0) == cut
        ar2.store.keep_tables = keep
        ar2.close()
        ar3 = _open(m, p, term)
        assert ar3.slice(0, len(bf)) == bf and ar3.stats["forwards"] == 0
        ar3._check()
        ar3.close()


def test_pack_then_unpack_gives_back_every_column_and_head(tmp_path):
    m = RandomModel(list(range(9)), seed=4, eos=0, eos_boost=1.5)
    ar = AutoregressiveEnumerable(m, max_len=L, eos=0, batch_next_logprobs=m.batch, batch_size=8, keep_margin_bits=0.5)
    ar.count(-9.0)
    ar.count(-12.0)  # deeper: some heads fetched again (superseded heads stay in the pool)
    tree = ar._tree
    scalars, arrays = tree.export_state()
    out, files, enc, info = pack_state(scalars, arrays, eos_id=tree.eos_id, cut=None)
    assert info["cut_nodes"] == 0 and not any(f"{k}" in name for name in files for k in (".tok", ".score", ".off"))
    back = unpack_state(out, files, enc, eos_id=tree.eos_id)
    for d in range(tree.n_levels):
        v = tree.view(d)
        for k in ("parent", "child", "tok", "score", "fetched", "tlen", "floor", "made", "eos_j", "eos_lp"):
            a, b = back[f"L{d}.{k}"], getattr(v, k)
            assert a.dtype == b.dtype and np.array_equal(a, b), (d, k)
        for i in np.flatnonzero(v.fetched):
            o, t, o2 = int(v.off[i]), int(v.tlen[i]), int(back[f"L{d}.off"][i])
            assert np.array_equal(back[f"L{d}.pool_lp"][o2 : o2 + t], v.pool_lp[o : o + t])
            assert np.array_equal(back[f"L{d}.pool_tok"][o2 : o2 + t], v.pool_tok[o : o + t])
    assert out["used_bytes"] <= scalars["used_bytes"] and set(DERIVED) >= {"tok", "score", "off"}


def test_narrowed_and_coded_columns_read_back_bit_for_bit(tmp_path):
    m = RandomModel(list(range(6)), seed=11, ties=True)  # few distinct log-probs: coded as uint8
    p = tmp_path / "s"
    with AutoregressiveEnumerable(m, max_len=L, store=p, fingerprint="f") as ar:
        n = ar.count(-math.inf)
        want = ar.slice(0, n)
    man = json.loads((p / "manifest.json").read_text())
    g = p / f"gen-{man['generation']}"
    assert man["encoding"].get("L3.pool_lp") == "dict" and np.load(g / "L3.pool_lp.npy").dtype == np.uint8
    assert np.load(g / "L3.pool_tok.npy").dtype == np.uint8 and np.load(g / "L4.parent.npy").dtype == np.int16
    assert not any((g / f"L3.{k}.npy").exists() for k in DERIVED)
    ar2 = AutoregressiveEnumerable(m, max_len=L, store=p, fingerprint="f")
    assert ar2.slice(0, n) == want and ar2.stats["forwards"] == 0
    ar2._check()
    ar2.close()


def test_the_cut_follows_the_measured_cost_of_a_forward(tmp_path, monkeypatch):
    m = RandomModel(list(range(8)), seed=5)
    for per_byte, cut in ((1.0, True), (0.0, False)):  # a byte dearer than any forward, then free
        monkeypatch.setattr(snapshot_mod, "SECONDS_PER_BYTE", per_byte)
        p = tmp_path / f"s{per_byte}"
        with AutoregressiveEnumerable(m, max_len=L, store=p, fingerprint="m") as ar:
            ar.count(-8.0)
        assert ar.store.cut == cut
        man = json.loads((p / "manifest.json").read_text())
        assert man["cost"][1] == ar.stats["forwards"] > 0 and man["cost"][0] > 0
    monkeypatch.setattr(snapshot_mod, "SECONDS_PER_BYTE", 1.0)
    assert _du(tmp_path / "s1.0") < _du(tmp_path / "s0.0")


class _Declared(RandomModel):
    """A model that declares its cost of a forward, and whose callback takes ``sleep`` seconds."""

    def __init__(self, *a, declared: float, sleep: float, **kw):
        super().__init__(*a, **kw)
        self.forward_seconds, self.sleep = declared, sleep

    def batch(self, prefixes):
        time.sleep(self.sleep)
        return super().batch(prefixes)


@pytest.mark.parametrize("declared, sleep, cut", [(1e-9, 0.01, True), (1.0, 0.0, False)])
def test_a_declared_forward_cost_decides_the_cut_whatever_the_machine_load(tmp_path, declared, sleep, cut):
    """What a store keeps must not depend on how loaded the machine was: a declared cost wins over
    the measured one (a cheap model slowed by load still cuts; a dear one that ran fast keeps)."""
    m = _Declared(list(range(8)), seed=5, declared=declared, sleep=sleep)
    with _open(m, tmp_path / "s", False) as ar:
        ar.count(-8.0)
        truth = brute_force(m.table, fixed_len=L)
    assert ar.store.cut == cut
    with _open(m, tmp_path / "s", False) as again:
        assert int(again.count(-8.0)) == sum(1 for _, sc in truth if sc >= -8.0)
        assert again.stats["forwards"] == 0
        again._check()


def test_the_model_adapters_declare_their_cost_of_a_forward():
    from arenum.models import NGramModel

    e = NGramModel.fit(["abc", "abd", "bcd"], order=2).enumerable(max_len=4)
    assert e._tree.oracle.declared_forward_seconds == NGramModel.forward_seconds > 0
    plain = AutoregressiveEnumerable(RandomModel(list(range(4)), seed=1), max_len=2)
    assert plain._tree.oracle.declared_forward_seconds is None


def test_a_version_2_store_is_read_and_written_again_as_version_4(tmp_path):
    m = RandomModel(list(range(6)), seed=2, eos=0, eos_boost=1.5)
    bf = brute_force(m.table, eos=0, cap=L)
    p = tmp_path / "s"
    ar = _open(m, p, True)
    n = ar.count(bf[150][1])
    want = ar.slice(0, n)
    ar.store.keep_tables = True
    ar.close()
    # rewrite the snapshot as version 2 wrote it: every column as the tree holds it
    man = json.loads((p / "manifest.json").read_text())
    g = p / f"gen-{man['generation']}"
    for f in g.glob("*.npy"):
        f.unlink()
    scalars, arrays = ar._tree.export_state()
    files = {}
    for name, a in arrays.items():
        np.save(g / f"{name}.npy", np.ascontiguousarray(a), allow_pickle=False)
        b = (g / f"{name}.npy").read_bytes()
        files[name] = {"bytes": len(b), "crc32": zlib.crc32(b), "dtype": a.dtype.str, "shape": list(a.shape)}
    man.update(version=2, files=files, tree=scalars)
    del man["encoding"], man["cost"]
    man["crc32"] = manifest_crc(man)
    (p / "manifest.json").write_text(json.dumps(man))
    ar2 = _open(m, p, True)
    assert ar2.slice(0, n) == want and ar2.stats["forwards"] == 0
    ar2._check()
    ar2.count(bf[300][1])
    ar2.close()
    assert json.loads((p / "manifest.json").read_text())["version"] == 4
    ar3 = _open(m, p, True)
    assert ar3.slice(0, 301) == bf[:301]
    ar3.close()
    man = json.loads((p / "manifest.json").read_text())
    man["version"] = 1
    man["crc32"] = manifest_crc(man)
    (p / "manifest.json").write_text(json.dumps(man))
    with pytest.raises(StoreError, match="version 1, older") as e:
        _open(m, p, True)
    assert "\n" not in str(e.value)


def test_a_damaged_encoding_is_refused_in_one_line(tmp_path):
    m = RandomModel(list(range(6)), seed=3)
    p = tmp_path / "s"
    with AutoregressiveEnumerable(m, max_len=L, store=p, fingerprint="m") as ar:
        ar.count(-7.0)
    man = json.loads((p / "manifest.json").read_text())
    for bad in ({"L1.parent": "f32"}, {"L1.pool_lp": "dict"}, {"L2.pool_lp": "nope"}, {"L1.pool_lp": "f32off"}):
        m2 = dict(man, encoding={**man["encoding"], **bad})
        m2["crc32"] = manifest_crc(m2)
        (p / "manifest.json").write_text(json.dumps(m2))
        with pytest.raises(StoreError, match="manifest.json") as e:
            AutoregressiveEnumerable(m, max_len=L, store=p, fingerprint="m")
        assert "\n" not in str(e.value)


@pytest.mark.parametrize("per_byte, cut", [(1.0, True), (0.0, False)])
def test_close_packs_the_snapshot_once_whether_it_cuts_or_not(tmp_path, monkeypatch, per_byte, cut):
    """``close()`` measures the cut alone (each level's heads once), then packs the snapshot once:
    the one it writes, cut or not."""
    m = RandomModel(list(range(8)), seed=5)
    monkeypatch.setattr(snapshot_mod, "SECONDS_PER_BYTE", per_byte)
    calls = {"pack": 0, "cut": 0}
    real_pack, real_cut = snapshot_mod.pack_state, snapshot_mod._cut

    def pack(*a, **kw):
        calls["pack"] += 1
        return real_pack(*a, **kw)

    def cutf(*a, **kw):
        calls["cut"] += 1
        return real_cut(*a, **kw)

    p = tmp_path / "s"
    with _open(m, p, False) as ar:
        ar.count(-8.0)
        want = ar.slice(0, 30)
        levels = ar._tree.n_levels
        monkeypatch.setattr(snapshot_mod, "pack_state", pack)
        monkeypatch.setattr(snapshot_mod, "_cut", cutf)
    assert ar.store.cut == cut
    assert calls == {"pack": 1, "cut": levels}  # one chunk a level here: the cut computed once
    monkeypatch.undo()
    ar2 = _open(m, p, False)
    assert ar2.slice(0, 30) == want and ar2.stats["forwards"] == 0
    ar2._check()
    ar2.close()


def _records(p):
    """The decoded records of a store's journal."""
    from arenum.exact.records import decode_record
    from arenum.exact.storefiles import JOURNAL_HEADER as H

    man = json.loads((p / "manifest.json").read_text())
    data = (p / f"journal-{man['generation']}.bin").read_bytes()
    pos, out = 0, []
    while pos < len(data):
        n = H.unpack_from(data, pos)[1]
        out.append(decode_record(data[pos + H.size : pos + H.size + n]))
        pos += H.size + n
    return out


@pytest.mark.parametrize("shift, kid_dtype, snap_dtype", [(0, np.uint16, np.uint8), (40_000, np.uint16, np.uint16),
                                                        (70_000, np.int32, np.int32)])
def test_token_ids_are_written_in_the_narrowest_type_and_read_back_bit_for_bit(shift, kid_dtype, snap_dtype):
    """A fetch record carries token ids as uint16 (ids up to 65,535) or int32; the snapshot writes
    them in the narrowest type (uint8 where one byte holds them) and reads every column back."""
    from arenum.exact.records import narrow_ids

    m = RandomModel(list(range(9)), seed=4)
    ar = AutoregressiveEnumerable(m, max_len=L, batch_next_logprobs=m.batch, batch_size=8)
    ar.count(-9.0)
    tree = ar._tree
    scalars, arrays = tree.export_state()
    for d in range(tree.n_levels):  # the same tree over token ids moved up by ``shift``
        arrays[f"L{d}.pool_tok"] = arrays[f"L{d}.pool_tok"].astype(np.int64) + shift
    assert narrow_ids(arrays["L1.pool_tok"]).dtype == kid_dtype
    assert np.array_equal(narrow_ids(arrays["L1.pool_tok"]), arrays["L1.pool_tok"])
    out, files, enc, _ = pack_state(scalars, arrays, eos_id=None, cut=None)
    assert files["L1.pool_tok"].dtype == snap_dtype
    back = unpack_state(out, files, enc, eos_id=None)
    for d in range(tree.n_levels):
        v = tree.view(d)
        assert np.array_equal(back[f"L{d}.tok"], v.tok + (shift if d else 0))
        assert np.array_equal(back[f"L{d}.score"], v.score)
        for i in np.flatnonzero(v.fetched):
            o, t, o2 = int(v.off[i]), int(v.tlen[i]), int(back[f"L{d}.off"][i])
            assert np.array_equal(back[f"L{d}.pool_tok"][o2 : o2 + t], v.pool_tok[o : o + t] + shift)
            assert np.array_equal(back[f"L{d}.pool_lp"][o2 : o2 + t], v.pool_lp[o : o + t])


def test_a_transformers_answers_are_the_same_from_its_narrowed_store(tmp_path):
    """A GPT-2-shaped model (random weights, a 50,257-token vocabulary, one step: a whole table): the
    journal carries its token ids in 2 bytes, the snapshot too; reopened from either, its answers
    equal the in-memory build's bit for bit, with no forward."""
    import torch
    import transformers

    from arenum.models.hf import CausalLMOracle

    torch.manual_seed(0)
    cfg = transformers.GPT2Config(vocab_size=50257, n_positions=8, n_embd=8, n_layer=1, n_head=2,
                                  bos_token_id=0, eos_token_id=1)
    model = transformers.GPT2LMHeadModel(cfg).eval()
    o = CausalLMOracle(model, None, prompt=[0])
    mem = o.enumerable(max_len=1, eos=None)
    t = mem.threshold(3000)
    want = mem.slice(0, int(mem.count(t)))
    p = tmp_path / "s"
    ar = o.enumerable(max_len=1, eos=None, store=p, fingerprint="gpt2-test")
    assert ar.threshold(3000) == t
    kids = [r[1]["kid"] for r in _records(p) if r[0] == "fetch"]
    assert kids and all(k.dtype == np.uint16 for k in kids) and max(int(k.max()) for k in kids) > 32767
    del ar
    for close in (False, True):  # from the journal, then from the snapshot
        ar2 = o.enumerable(max_len=1, eos=None, store=p, fingerprint="gpt2-test")
        assert ar2.threshold(3000) == t and ar2.slice(0, len(want)) == want and ar2.stats["forwards"] == 0
        ar2._check()
        ar2.store.keep_tables = True
        ar2.close()
    g = p / f"gen-{json.loads((p / 'manifest.json').read_text())['generation']}"
    assert np.load(g / "L0.pool_tok.npy").dtype == np.uint16
