"""PCFGModel: segmentation, fit, encode/decode, every query against brute force over strings,
certified brackets, the finite-state protocol, save/load and damaged files."""
from __future__ import annotations

import itertools
import math
import random
import zipfile
from fractions import Fraction

import numpy as np
import pytest

from arenum.models import NGramModel, PCFGModel
from arenum.models.pcfg import segments
from arenum.models.pcfg.grammar import parse_structure, structure_name, structure_of
from arenum.step.finite_state import check_finite_state
from arenum.support import Support
from arenum.testing import brute_force

ALPHA = ["ab", "ba", "a", "abc", "b", "xyz"]
DIGITS = ["1", "12", "7", "123", "00"]
SYMS = ["!", "@", "!!"]


def corpus(seed: int, n: int = 14) -> tuple[list[str], list[int]]:
    rng = random.Random(seed)
    lines, weights = [], []
    for _ in range(n):
        parts = []
        for _ in range(rng.randint(1, 3)):
            pool = rng.choice([ALPHA, DIGITS, SYMS])
            parts.append(rng.choice(pool))
        lines.append("".join(parts))
        weights.append(rng.randint(1, 4))
    return lines, weights


def all_strings(lines, weights):
    """Every string the PCFG of (lines, weights) produces, with its exact probability (fractions)."""
    segs = [segments(s) for s in lines]
    n = sum(weights)
    st_count: dict = {}
    grp: dict = {}
    for sg, w in zip(segs, weights):
        st = structure_of(sg)
        st_count[st] = st_count.get(st, 0) + w
        for k, run in sg:
            grp.setdefault((k, len(run)), {}).setdefault(run, 0)
            grp[(k, len(run))][run] += w
    out = {}
    for st, c in st_count.items():
        choices = [list(grp[g].items()) for g in st]
        for combo in itertools.product(*choices):
            p = Fraction(c, n)
            for g, (run, rc) in zip(st, combo):
                p *= Fraction(rc, sum(grp[g].values()))
            s = "".join(run for run, _ in combo)
            assert s not in out  # segmentation is one-to-one: one derivation per string
            out[s] = p
    return out


# ------------------------------------------------------------------------------ the grammar
def test_segments_and_structures():
    assert segments("Tr0ub4dor&3") == [("L", "Tr"), ("D", "0"), ("L", "ub"), ("D", "4"), ("L", "dor"),
                                        ("S", "&"), ("D", "3")]
    assert segments("") == [] and segments("é½9") == [("L", "é"), ("S", "½"), ("D", "9")]
    assert structure_name(structure_of(segments("pass word12!"))) == "L4S1L4D2S1"
    assert parse_structure("L4S1L4D2S1") == (("L", 4), ("S", 1), ("L", 4), ("D", 2), ("S", 1))
    for bad in ["L4L2", "L0", "X3", "L", "4", "L04"]:
        with pytest.raises(ValueError):
            parse_structure(bad)
    rng = random.Random(3)
    for _ in range(300):  # one-to-one: the segments of a concatenation of alternating runs are those runs
        s = "".join(rng.choice("aZ9!é ") for _ in range(rng.randint(0, 9)))
        sg = segments(s)
        assert "".join(r for _, r in sg) == s
        assert all(a[0] != b[0] for a, b in zip(sg, sg[1:]))


def test_fit_weights_equal_repetition_and_lowercase():
    lines, weights = corpus(1)
    a = PCFGModel.fit(lines, weights)
    b = PCFGModel.fit([s for s, w in zip(lines, weights) for _ in range(w)])
    assert a.fingerprint() == b.fingerprint() and a.n_sequences == sum(weights)
    low = PCFGModel.fit(["Pass12", "pass12", "ABC"], lowercase=True)
    assert low.lowercase and low.encode("PASS12") == low.encode("pass12")
    assert math.isclose(math.exp(low.logprob("PaSs12")), 2 / 3)
    with pytest.raises(ValueError, match="weights"):
        PCFGModel.fit(["a"], [0])
    with pytest.raises(TypeError, match="lines"):
        PCFGModel.fit("abc")
    with pytest.raises(TypeError, match="lines\\[1\\]"):
        PCFGModel.fit(["a", 3])
    with pytest.raises(TypeError, match="lowercase"):
        PCFGModel.fit(["a"], lowercase="yes")


def test_encode_decode_and_probability_zero():
    m = PCFGModel.fit(["pass123", "word123", "pass1", "abc!"])
    for s in ["pass123", "word1", "abc!", "word123"]:
        assert m.decode(m.encode(s)) == s
    with pytest.raises(ValueError, match=r"segment 'Pass' \(L4\) at position 0 .* probability 0"):
        m.encode("Pass1")
    with pytest.raises(ValueError, match=r"structure 'D3' of '123' was never seen.*probability 0"):
        m.encode("123")
    with pytest.raises(ValueError, match="not a L4 segment"):
        m.decode((0, 7, 7, m.eos))
    with pytest.raises(ValueError, match="has 2 segments, the sequence 1"):
        m.decode((0, 4, m.eos))
    with pytest.raises(ValueError):
        m.next_logprobs((0, 4, 7, m.eos))  # nothing follows eos
    assert m.score_sequences([(0, 4, m.eos), (0, 7, 7, m.eos)]).tolist() == [-math.inf, -math.inf]


# ------------------------------------------------------------------------------ brute force
@pytest.mark.parametrize("seed", range(6))
def test_every_query_against_brute_force_over_strings(seed):
    lines, weights = corpus(seed)
    m = PCFGModel.fit(lines, weights)
    truth = all_strings(lines, weights)
    # the token model's probabilities are the PCFG's, string by string
    scores = {s: float(m.score_sequences([m.encode(s)])[0]) for s in truth}
    for s, p in truth.items():
        assert math.isclose(math.exp(scores[s]), float(p), rel_tol=1e-12)
    assert math.isclose(sum(math.exp(v) for v in scores.values()), 1.0, rel_tol=1e-12)
    # every token sequence of the model decodes to a distinct string, with the same score
    bf = brute_force(lambda p: tuple(a.tolist() for a in m.next_logprobs(p)), eos=m.eos, cap=m.max_len)
    assert sorted(m.decode(q) for q, _ in bf) == sorted(truth)
    assert all(scores[m.decode(q)] == v for q, v in bf)
    # ranks over strings == ranks over token sequences
    str_scores = sorted(scores.values(), reverse=True)
    e = m.enumerable()
    for s, v in scores.items():
        r = e.rank(m.encode(s))
        assert int(r.rank) == sum(1 for x in str_scores if x > v)
    # count, threshold, unrank, slice, mass_above
    for t in sorted(set(str_scores))[:: max(1, len(str_scores) // 12)] + [0.0, -1e9]:
        assert e.count(t) == sum(1 for x in str_scores if x >= t)
        mb = e.mass_above(t)
        true_mass = sum(float(p) for s, p in truth.items() if scores[s] >= t)
        assert mb.lower <= true_mass * (1 + 1e-12) and true_mass * (1 - 1e-12) <= mb.upper
    for k in range(1, len(str_scores) + 1, max(1, len(str_scores) // 10)):
        assert float(e.threshold(k)) == str_scores[k - 1]
    got = e.slice(0, len(bf) + 5)
    assert [q for q, _ in got] == [q for q, _ in bf]  # the library's order, ties included
    for i in range(0, len(bf), max(1, len(bf) // 10)):
        q, v = e.unrank(i)
        assert q == bf[i][0] and v == bf[i][1]
    # certified brackets at any depth hold the truth
    cc = e.certified()
    for t in [-0.5, -2.0, -4.0, -7.0, -12.0]:
        b = cc.count_bracket(t)
        assert b.lo <= sum(1 for x in str_scores if x >= t) <= b.hi
        mb = cc.mass_bracket(t)
        true_mass = sum(math.exp(x) for x in str_scores if x >= t)
        assert mb.lower <= true_mass + 1e-12 and true_mass - 1e-12 <= mb.upper
    for k in [1, 3, len(str_scores)]:
        lo, hi = cc.threshold_bracket(k)
        assert lo <= str_scores[k - 1] <= hi


def test_equal_probabilities_can_score_apart_as_the_docs_say():
    """docs/pcfg.md, "Ties": two strings of probability exactly 1/7 score an ulp apart, and the rank
    of one counts the other (ranks are those of the scores)."""
    m = PCFGModel.fit(["pass123", "word123", "pass1", "abc!", "dragon", "drag0n", "Ab1!"])
    a, b = m.logprob("pass123"), m.logprob("dragon")
    assert (a, b) == (-1.9459101490553135, -1.9459101490553132)
    assert Fraction(2, 7) * Fraction(1, 2) == Fraction(1, 7)  # pass123: L4D3 2/7, pass 1/2, 123 1; dragon: L6 1/7
    e = m.enumerable()
    assert e.rank(m.encode("pass123")).rank == sum(1 for _, v in e.slice(0, int(e.count(-math.inf))) if v > a) >= 1
    assert math.isclose(math.exp(a), 1 / 7, rel_tol=1e-15) and math.isclose(math.exp(b), 1 / 7, rel_tol=1e-15)


@pytest.mark.parametrize("seed", range(4))
def test_finite_state_protocol(seed):
    lines, weights = corpus(seed + 10, n=25)
    m = PCFGModel.fit(lines, weights)
    fs = m.finite_state().validate()
    r = check_finite_state(fs, m.next_logprobs, Support.terminating(m.eos, m.eos, m.max_len))
    assert r.states_seen == fs.n_states  # every state reachable
    assert fs.n_states <= 1 + sum(len(parse_structure(s)) + 1 for s in m.structures)
    # plain draws walk the tables (no model call) and produce strings of the model
    e = m.enumerable()
    mc = e.monte_carlo(200, seed=seed, head=False)
    assert mc.samples.extra.get("sampler") == "finite_state" and mc.samples.forwards == 0
    d = e.sampler(seed=seed).sample_n(5)
    assert len(d) == 5
    for seq, lp in d:
        assert m.score_sequences([seq])[0] == lp and m.decode(seq) in set(m.decode(q) for q, _ in e.slice(0, 10**6))


def test_store_answers_match(tmp_path):
    lines, weights = corpus(5, n=20)
    m = PCFGModel.fit(lines, weights)
    e = m.enumerable(store=str(tmp_path / "s"))
    want = [e.count(-6.0), e.unrank(5)]
    e.close()
    e2 = m.enumerable(store=str(tmp_path / "s"))
    assert [e2.count(-6.0), e2.unrank(5)] == want
    assert e2.stats["forwards"] == 0
    e2.close()


# ------------------------------------------------------------------------------ save / load
def test_save_load_round_trip_and_damaged_files(tmp_path):
    lines, weights = corpus(2)
    m = PCFGModel.fit(lines, weights, lowercase=True)
    p = tmp_path / "m.npz"
    m.save(p)
    m2 = PCFGModel.load(p)
    assert m2.fingerprint() == m.fingerprint() and m2.lowercase
    assert m2.structures == m.structures and m2.vocab == m.vocab
    for q in [(), (0,), (1,)]:
        a, b = m.next_logprobs(q), m2.next_logprobs(q)
        assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])

    def refused(path, match):
        with pytest.raises(ValueError, match=match) as exc:
            PCFGModel.load(path)
        assert "\n" not in str(exc.value) and str(path) in str(exc.value)

    data = p.read_bytes()
    (tmp_path / "trunc.npz").write_bytes(data[: len(data) // 2])
    refused(tmp_path / "trunc.npz", "not a valid arenum PCFG model file")
    (tmp_path / "junk.npz").write_bytes(b"hello world" * 10)
    refused(tmp_path / "junk.npz", "not a .npz archive")
    NGramModel.fit(["abc"], order=2).save(tmp_path / "ng.npz")
    refused(tmp_path / "ng.npz", "n-gram model file")
    rng = random.Random(0)
    for trial in range(20):  # flipped bytes: refused in one line, or (a flip the zip CRC misses) the same model
        b = bytearray(data)
        b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
        (tmp_path / "flip.npz").write_bytes(bytes(b))
        try:
            assert PCFGModel.load(tmp_path / "flip.npz").fingerprint() == m.fingerprint()
        except ValueError as exc:
            assert "\n" not in str(exc)

    def rewrite(meta_edit=None, sc=None):
        import io
        import json
        with zipfile.ZipFile(p) as zf:
            meta = json.loads(str(np.load(io.BytesIO(zf.read("meta.npy")))[()]))
            arrays = {k[:-4]: np.load(io.BytesIO(zf.read(k))) for k in zf.namelist() if k != "meta.npy"}
        if meta_edit:
            meta_edit(meta)
        if sc is not None:
            arrays["structure_counts"] = sc
        q = tmp_path / "edit.npz"
        np.savez(q, meta=np.array(json.dumps(meta)), **arrays)
        return q

    refused(rewrite(lambda d: d.update(version=9)), "unsupported version 9")
    refused(rewrite(lambda d: d.update(format="other")), "format 'other'")
    refused(rewrite(lambda d: d["structures"].__setitem__(0, "L2L3")), "neighbouring")
    refused(rewrite(lambda d: d.update(n_sequences=d["n_sequences"] + 1)), "add up to")
    refused(rewrite(lambda d: d["strings"].__setitem__(0, d["strings"][0] + "9")), "not one segment")
    sc = PCFGModel.load(p)._struct_counts.copy()
    refused(rewrite(sc=np.asarray([0] + [1] * (len(sc) - 1))), "counts in")


def test_certified_brackets_with_merged_steps_hold_the_truth():
    """Groups of many strings: the certified DP merges a state's steps that share a next state and a
    cell (weights); brackets still hold the exact counts and masses, listed by brute force."""
    rng = random.Random(7)
    letters = ["".join(rng.choice("abcdefgh") for _ in range(3)) for _ in range(300)]
    lines, weights = [], []
    for i in range(400):
        w = rng.choice(letters)
        lines.append(w + str(rng.randint(0, 99)).zfill(2) if i % 3 else w)
        weights.append(rng.randint(1, 30))
    m = PCFGModel.fit(lines, weights)
    truth = all_strings(lines, weights)
    scores = sorted((float(m.score_sequences([m.encode(s)])[0]) for s in truth), reverse=True)
    e = m.enumerable()
    cc = e.certified()
    assert cc._edges[True].weight is not None  # the merged form was used
    assert cc._edges[True].nxt.shape[1] * 4 <= m.vocab_size
    for t in [-3.0, -6.0, -9.0, -12.0, -15.0, -40.0]:
        true = sum(1 for x in scores if x >= t)
        b = cc.count_bracket(t)
        assert b.lo <= true <= b.hi, (t, b, true)
        mb = cc.mass_bracket(t)
        mass = math.fsum(math.exp(x) for x in scores if x >= t)
        assert mb.lower <= mass * (1 + 1e-12) and mass * (1 - 1e-12) <= mb.upper
        assert e.count(t) == true
    for k in [1, 10, 1000, len(scores)]:
        lo, hi = cc.threshold_bracket(k)
        assert lo <= scores[k - 1] <= hi


def test_failed_save_leaves_the_previous_file(tmp_path, monkeypatch):
    import arenum.models.pcfg.io as pio

    m1 = PCFGModel.fit(["abc1", "abc2"])
    m2 = PCFGModel.fit(["xyz!", "q"])
    p = tmp_path / "m.npz"
    m1.save(p)
    real = np.savez_compressed
    for trial in range(5):
        def savez_then_fail(file, **arrays):  # writes part of an archive, then fails
            real(file, **{k: v for i, (k, v) in enumerate(arrays.items()) if i <= trial % 2})
            raise (KeyboardInterrupt if trial % 2 else OSError)("disk gone")

        monkeypatch.setattr(pio.np, "savez_compressed", savez_then_fail)
        with pytest.raises((OSError, KeyboardInterrupt)):
            m2.save(p)
        monkeypatch.setattr(pio.np, "savez_compressed", real)
        assert PCFGModel.load(p).fingerprint() == m1.fingerprint()
        assert sorted(x.name for x in tmp_path.iterdir()) == ["m.npz"]  # no temp file left


def test_distributed_spec_same_answers(tmp_path):
    from arenum.distributed import DistributedEnumerable, ModelSpec

    lines, weights = corpus(3, n=20)
    m = PCFGModel.fit(lines, weights)
    p = tmp_path / "m.npz"
    m.save(p)
    one = m.enumerable()
    with DistributedEnumerable(ModelSpec.pcfg(p), 3, backend="local") as dist:
        for t in [-2.0, -5.0, -9.0]:
            assert dist.count(t) == one.count(t)
        q = m.encode(m.decode(one.unrank(4)[0]))
        assert int(dist.rank(q).rank) == int(one.rank(q).rank)
        assert [s for s, _ in dist.slice(0, 6)] == [s for s, _ in one.slice(0, 6)]
