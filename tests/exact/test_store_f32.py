"""A transformer's heads kept as float32 values plus one float64 offset a row (store format version 4).

The adapter hands each row's log-sum-exp with its heads (``batch_next_heads``' fifth array); a fetch
record and a snapshot keep a head in 4 bytes an entry only where ``float64(float32 value) - offset``
gives back every log-prob bit for bit (checked entry by entry), and in float64 elsewhere. Reopened,
in this process or a fresh one, a store answers as the build in memory did, bit for bit, with no
forward.
"""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest

from arenum import AutoregressiveEnumerable, StoreError
from arenum.exact.records import decode_record, encode_record, f32_rows, from_f32_rows
from arenum.exact.snapshot import pack_state, unpack_state
from arenum.exact.storefiles import manifest_crc
from arenum.testing import RandomModel

from .test_store_size import _records


def _bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, np.float64).view(np.int64)


def _rows(rng, lens):
    """Rows as a causal LM's adapter makes them: float32 logits less their float64 log-sum-exp."""
    x = rng.normal(0, 4, int(lens.sum())).astype(np.float32)
    lse = np.array([np.logaddexp.reduce(r.astype(np.float64)) + rng.uniform(0, 3)
                    for r in np.split(x, np.cumsum(lens)[:-1])])
    return x.astype(np.float64) - np.repeat(lse, lens), lse


def test_f32_rows_finds_the_rows_their_offsets_rebuild_bit_for_bit():
    rng = np.random.default_rng(0)
    for trial in range(30):
        lens = rng.integers(0, 40, 12)
        lp, lse = _rows(rng, lens)
        off = lse.copy()
        wrong = rng.random(12) < 0.3
        off[wrong] += rng.choice([1e-9, 2.0 ** -30, 0.5], int(wrong.sum()))  # a wrong offset, or an ulp off
        nan = rng.random(12) < 0.2
        off[nan] = np.nan
        v, ok = f32_rows(lp, off, lens)
        assert v.dtype == np.float32
        assert (ok[lens == 0]).all() and not ok[nan & (lens > 0)].any()
        back = from_f32_rows(v, off, lens)
        rows = np.repeat(np.arange(12), lens)
        exact = _bits(back) == _bits(lp)
        for i in range(12):  # ok says exactly which rows come back bit for bit
            assert ok[i] == bool(exact[rows == i].all())
        assert ok[~wrong & ~nan].all()  # the adapter's own offsets always do


def test_pack_then_unpack_keeps_heads_with_offsets_in_float32_and_the_rest_in_float64():
    m = RandomModel(list(range(9)), seed=4)
    ar = AutoregressiveEnumerable(m, max_len=4, batch_next_logprobs=m.batch, batch_size=8)
    ar.count(-9.0)
    scalars, arrays = ar._tree.export_state()
    rng = np.random.default_rng(1)
    offsets, truth = [], []
    for d in range(int(scalars["n_levels"])):  # the same tree with adapter-made rows, offsets mixed
        tl = arrays[f"L{d}.tlen"].astype(np.int64)
        lp, lse = _rows(rng, tl)
        arrays[f"L{d}.pool_lp"] = lp
        arrays[f"L{d}.off"] = np.cumsum(tl) - tl
        o = lse.copy()
        o[rng.random(o.shape[0]) < 0.3] = np.nan  # no offset known (a table from a cache)
        bad = rng.random(o.shape[0]) < 0.2
        o[bad] += 1e-9  # a stale offset
        offsets.append(o)
        truth.append((tl, lp, np.where(bad, np.nan, o)))
    out, files, enc, _ = pack_state(scalars, arrays, eos_id=None, cut=None, offsets=offsets)
    got: list = []
    back = unpack_state(out, files, enc, eos_id=None, offsets=got)
    f32_entries = 0
    for d, (tl, lp, want_off) in enumerate(truth):
        assert np.array_equal(_bits(back[f"L{d}.pool_lp"]), _bits(lp))  # bit for bit
        kept = np.where(tl > 0, want_off, np.nan)
        assert np.array_equal(np.isnan(got[d]) | (tl == 0), np.isnan(kept) | (tl == 0))
        assert np.array_equal(got[d][~np.isnan(kept)], kept[~np.isnan(kept)])
        if enc.get(f"L{d}.pool_lp") == "f32off":
            assert files[f"L{d}.pool_lp"].dtype == np.float32
            assert files[f"L{d}.pool_lp"].shape[0] == int(tl[~np.isnan(kept)].sum())
            f32_entries += files[f"L{d}.pool_lp"].shape[0]
    assert f32_entries > 0


def test_a_fetch_record_carries_float32_values_only_where_its_offsets_rebuild_them():
    rng = np.random.default_rng(2)
    lens = np.array([5, 0, 7, 3])
    lp, lse = _rows(rng, lens)
    rec = {"d": 1, "ns": np.arange(4), "kid": np.arange(15, dtype=np.uint16), "klp": lp, "klen": lens,
           "cut": np.zeros(4, bool), "keeps": np.full(4, -5.0), "eos_j": np.full(4, -1, np.int32), "eos_lp": None,
           "widest": 7, "koff": lse}
    for koff, f32, want in ((lse, True, np.float32), (lse, False, np.float64), (lse + 1e-9, True, np.float64),
                            (None, True, np.float64)):
        r = dict(rec, koff=koff)
        raw = encode_record("fetch", r, 3, True, [], 0, f32)
        head = json.loads(raw[4 : 4 + int.from_bytes(raw[:4], "little")])
        assert dict((f[0], f[1]) for f in head["fields"] if len(f) > 2)["klp"] == np.dtype(want).str
        kind, back, seq, *_ = decode_record(raw)
        assert kind == "fetch" and seq == 3 and np.array_equal(_bits(back["klp"]), _bits(lp))
    # float32 values whose offsets are missing: refused, never read as log-probs
    r = dict(rec, klp=lp.astype(np.float32), koff=None)
    with pytest.raises(ValueError, match="lack their row offsets"):
        decode_record(encode_record("fetch", r, 3, True, [], 0, False))


CHILD = r"""
import json, sys
from arenum import AutoregressiveEnumerable

def no_model(prefix):  # the store answers alone: any forward is a failure
    raise AssertionError(f"a forward on {prefix!r}")

ar = AutoregressiveEnumerable(no_model, max_len=2, eos=None, store=sys.argv[1], fingerprint="gpt2-f32")
t = ar.threshold(int(sys.argv[2]))
print(json.dumps({"t": repr(t), "slice": repr(ar.slice(0, int(sys.argv[3]))), "forwards": ar.stats["forwards"]}))
"""


def _gpt2():
    import torch
    import transformers

    from arenum.models.hf import CausalLMOracle

    torch.manual_seed(0)
    cfg = transformers.GPT2Config(vocab_size=50257, n_positions=8, n_embd=8, n_layer=1, n_head=2,
                                  bos_token_id=0, eos_token_id=1)
    model = transformers.GPT2LMHeadModel(cfg).eval()
    with torch.no_grad():
        model.transformer.wte.weight.mul_(1000.0)  # peaked tables: a few dozen forwards reach N = 50
    return CausalLMOracle(model, None, prompt=[0])


def test_a_transformers_store_keeps_float32_heads_and_answers_bit_for_bit_in_a_fresh_process(tmp_path):
    o = _gpt2()
    N = 50
    mem = o.enumerable(max_len=2, eos=None)
    t = mem.threshold(N)
    n = int(mem.count(t))
    want = mem.slice(0, n)
    p = tmp_path / "s"
    ar = o.enumerable(max_len=2, eos=None, store=p, fingerprint="gpt2-f32")
    assert ar.threshold(N) == t and ar.stats["forwards"] == mem.stats["forwards"]
    recs = [r[1] for r in _records(p) if r[0] == "fetch"]
    assert recs and all(r["koff"] is not None and np.isfinite(r["koff"]).all() for r in recs)
    jbytes = os.path.getsize(p / "journal-0.bin")
    entries = sum(int(r["klen"].sum()) for r in recs)
    assert jbytes < 6.5 * entries  # 4 bytes a log-prob and 2 a token id, not 8 + 2
    del ar
    for close in (False, True):  # from the journal, then from the snapshot
        ar2 = o.enumerable(max_len=2, eos=None, store=p, fingerprint="gpt2-f32")
        assert ar2.threshold(N) == t and ar2.slice(0, n) == want and ar2.stats["forwards"] == 0
        ar2._check()
        ar2.store.keep_tables = True
        ar2.close()
    man = json.loads((p / "manifest.json").read_text())
    assert man["version"] == 4 and man["encoding"]["L0.pool_lp"] == "f32off"
    g = p / f"gen-{man['generation']}"
    assert np.load(g / "L0.pool_lp.npy").dtype == np.float32 and np.load(g / "L0.pool_lp~f64.npy").size == 0
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    out = subprocess.run([sys.executable, "-c", CHILD, str(p), str(N), str(n)], capture_output=True, text=True,
                         env=env, check=True).stdout
    got = json.loads(out.strip().splitlines()[-1])
    assert got == {"t": repr(t), "slice": repr(want), "forwards": 0}  # floats by repr: bit for bit
    # a damaged offsets file is refused in one line
    f = g / "L0.pool_lp~off.npy"
    b = bytearray(f.read_bytes())
    b[-3] ^= 0xFF
    f.write_bytes(bytes(b))
    with pytest.raises(StoreError, match="damaged") as e:
        o.enumerable(max_len=2, eos=None, store=p, fingerprint="gpt2-f32")
    assert "\n" not in str(e.value)


def test_a_version_3_store_is_read_and_its_journal_stays_float64_until_written_as_version_4(tmp_path):
    o = _gpt2()
    p = tmp_path / "s"
    with o.enumerable(max_len=2, eos=None, store=p, fingerprint="g") as ar:
        ar.threshold(10)
    man = json.loads((p / "manifest.json").read_text())
    g = p / f"gen-{man['generation']}"
    # rewrite the snapshot's level-0 pool as version 3 wrote it (float64), and say version 3
    lp = unpack_state(man["tree"], {k[: -len(".npy")]: np.load(g / k) for k in os.listdir(g)}, man["encoding"],
                      eos_id=None)["L0.pool_lp"]
    import zlib
    for k in ("L0.pool_lp~f64", "L0.pool_lp~off"):
        (g / f"{k}.npy").unlink()
        del man["files"][k]
    np.save(g / "L0.pool_lp.npy", lp, allow_pickle=False)
    b = (g / "L0.pool_lp.npy").read_bytes()
    man["files"]["L0.pool_lp"] = {"bytes": len(b), "crc32": zlib.crc32(b), "dtype": lp.dtype.str, "shape": [lp.shape[0]]}
    del man["encoding"]["L0.pool_lp"]
    man["version"] = 3
    man["crc32"] = manifest_crc(man)
    (p / "manifest.json").write_text(json.dumps(man))
    mem = o.enumerable(max_len=2, eos=None)
    ar = o.enumerable(max_len=2, eos=None, store=p, fingerprint="g")
    assert ar.threshold(10) == mem.threshold(10) and ar.stats["forwards"] == 0
    assert ar.threshold(50) == mem.threshold(50) and ar.stats["forwards"] > 0
    recs = [r[1] for r in _records(p) if r[0] == "fetch"]
    assert recs and all(r["koff"] is not None for r in recs)  # journaled as version 3 reads them
    raw = (p / f"journal-{man['generation']}.bin").read_bytes()
    assert b'"klp","<f8"' in raw and b'"klp","<f4"' not in raw
    ar._check()
    held = ar.slice(0, 50)  # what the store holds, as scored when its prefixes were fetched
    ar.store.keep_tables = True
    ar.close()
    man = json.loads((p / "manifest.json").read_text())
    # the root: float64 when its offset was never kept, f32off when the deeper query fetched it again
    assert man["version"] == 4 and man["encoding"].get("L0.pool_lp", "f32off") == "f32off"
    assert man["encoding"]["L1.pool_lp"] == "f32off"
    ar = o.enumerable(max_len=2, eos=None, store=p, fingerprint="g")
    assert ar.slice(0, 50) == held and ar.stats["forwards"] == 0  # written as version 4 and read back bit for bit
    ar.close()
