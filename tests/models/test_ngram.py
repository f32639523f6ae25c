"""NGramModel: normalization, agreement with a dict-based reference, callbacks, file round trip,
error paths, and enumeration against brute force."""
from __future__ import annotations

import itertools
import json
import math
import os
import re
import zipfile
from collections import defaultdict

import numpy as np
import pytest

from arenum.models import NGramModel
from arenum.models.ngram import fit as ngram_fit
from arenum.models.ngram import io as ngram_io
from arenum.models.ngram import tables as ngram_tables

CORPUS = ["abracadabra", "abc", "cab", "", "bad", "dab", "aaa", "cadabra", "ba"]
SMOOTHINGS = ["kn", "wb", "addk"]


# ------------------------------------------------------------------------ reference (plain dicts)
def _reference(corpus_ids, V, eos, order, smoothing, D=0.75, k=1.0):
    """Return f(ctx) -> list of V probabilities, computed from plain counts."""
    BOS = "BOS"
    n1 = order - 1
    raw = [defaultdict(int) for _ in range(order)]  # level L: (ctx tuple of len L, w) -> count
    for seq in corpus_ids:
        padded = [BOS] * n1 + list(seq) + [eos]
        for t in range(n1, len(padded)):
            w = padded[t]
            for L in range(order):
                raw[L][(tuple(padded[t - L : t]), w)] += 1
    adj = [dict(r) for r in raw]
    if smoothing == "kn":
        for L in range(n1):
            cont = defaultdict(int)
            for (c, w) in raw[L + 1]:
                cont[(c[1:], w)] += 1
            for (c, w) in raw[L]:
                adj[L][(c, w)] = raw[L][(c, w)] if (L >= 1 and c[0] == BOS) else cont[(c, w)]
    by_ctx = [defaultdict(dict) for _ in range(order)]
    for L in range(order):
        for (c, w), n in adj[L].items():
            by_ctx[L][c][w] = n

    def probs(ctx):
        ctx = tuple(ctx)[max(0, len(ctx) - n1) :] if n1 else ()
        full = tuple([BOS] * (n1 - len(ctx))) + tuple(ctx)
        if smoothing == "addk":
            counts = by_ctx[n1].get(full, {})
            tot = sum(counts.values())
            if not counts:
                return [1.0 / V] * V
            return [(counts.get(w, 0) + k) / (tot + k * V) for w in range(V)]
        p = [1.0 / V] * V
        for L in range(order):
            c = full[len(full) - L :] if L else ()
            counts = by_ctx[L].get(c)
            if not counts:
                break
            tot = sum(counts.values())
            types = len(counts)
            if smoothing == "kn":
                p = [max(counts.get(w, 0) - D, 0) / tot + D * types / tot * p[w] for w in range(V)]
            else:
                p = [(counts.get(w, 0) + types * p[w]) / (tot + types) for w in range(V)]
        return p

    return probs


def _contexts(model, rng, n_random=30):
    """Every corpus prefix, plus random (mostly unseen) contexts that may contain EOS."""
    out = set()
    for s in CORPUS:
        ids = model.encode(s, eos=False)
        for t in range(len(ids) + 1):
            out.add(ids[:t])
    for _ in range(n_random):
        L = int(rng.integers(0, 7))
        out.add(tuple(int(x) for x in rng.integers(0, model.vocab_size, size=L)))
    return sorted(out)


# --------------------------------------------------------------------------------- probabilities
@pytest.mark.parametrize("smoothing", SMOOTHINGS)
@pytest.mark.parametrize("order", [1, 2, 3, 5, 8])
def test_rows_normalized_and_match_reference(smoothing, order):
    model = NGramModel.fit(CORPUS, order=order, smoothing=smoothing, discount=0.6, k=0.5)
    ids = [model.encode(s, eos=False) for s in CORPUS]
    ref = _reference(ids, model.vocab_size, model.eos, order, smoothing, D=0.6, k=0.5)
    rng = np.random.default_rng(order)
    for ctx in _contexts(model, rng):
        lp = model.next_logprobs(ctx)
        assert lp.shape == (model.vocab_size,) and lp.dtype == np.float64
        assert np.all(np.isfinite(lp)) and np.all(lp < 0)
        assert abs(math.fsum(np.exp(lp)) - 1.0) < 1e-12
        np.testing.assert_allclose(np.exp(lp), ref(ctx), rtol=1e-12, atol=0)


def test_addk_hand_values():
    # order 2, corpus "ab", "b": vocab a=0, b=1, </s>=2 (V=3).
    # After BOS: a 1, b 1 (total 2); after a: b 1; after b: </s> 2.
    m = NGramModel.fit(["ab", "b"], order=2, smoothing="addk", k=1)
    assert m.vocab == ["a", "b", "</s>"] and m.eos == 2
    p = lambda ctx, m=m: np.exp(m.next_logprobs(ctx))  # noqa: E731
    np.testing.assert_allclose(p(()), [2 / 5, 2 / 5, 1 / 5], rtol=1e-15)
    np.testing.assert_allclose(p((0,)), [1 / 4, 2 / 4, 1 / 4], rtol=1e-15)
    np.testing.assert_allclose(p((1,)), [1 / 5, 1 / 5, 3 / 5], rtol=1e-15)
    np.testing.assert_allclose(p((2,)), [1 / 3, 1 / 3, 1 / 3], rtol=1e-15)  # unseen: uniform
    m = NGramModel.fit(["ab", "b"], order=2, smoothing="addk", k=0.5)
    np.testing.assert_allclose(p((1,)), [1 / 5, 1 / 5, 3 / 5], rtol=1e-15)  # old model unchanged
    np.testing.assert_allclose(np.exp(m.next_logprobs((1,))), [0.5 / 3.5, 0.5 / 3.5, 2.5 / 3.5])
    # score of "ab</s>" = log(2/5 * 2/4 * 3/5)
    m1 = NGramModel.fit(["ab", "b"], order=2, smoothing="addk")
    assert m1.logprob("ab") == pytest.approx(math.log(2 / 5 * 2 / 4 * 3 / 5), rel=1e-14)


def test_kn_hand_values():
    # order 1 KN: P(w) = (c(w) - D)/N + D * types / N / V.  Corpus "aab": a 2, b 1, </s> 1; N = 4.
    m = NGramModel.fit(["aab"], order=1, smoothing="kn", discount=0.5)
    expected = [(2 - 0.5) / 4 + 0.5 * 3 / 4 / 3, (1 - 0.5) / 4 + 0.5 * 3 / 4 / 3]
    expected.append(1 - sum(expected))
    np.testing.assert_allclose(np.exp(m.next_logprobs(())), expected, rtol=1e-14)
    # Witten-Bell order 1: (c(w) + T/V) / (N + T) with T = 3 types.
    m = NGramModel.fit(["aab"], order=1, smoothing="wb")
    np.testing.assert_allclose(np.exp(m.next_logprobs(())), [3 / 7, 2 / 7, 2 / 7], rtol=1e-14)


@pytest.mark.parametrize("smoothing", ["kn", "wb"])
def test_seen_continuations_beat_unseen(smoothing):
    m = NGramModel.fit(["abab", "abba", "ab"] * 5 + ["c"], order=3, smoothing=smoothing)
    a, b, c = (m.encode(x, eos=False)[0] for x in "abc")
    lp = m.next_logprobs((a,))  # after "a" only "b" was seen
    assert lp[b] > max(lp[a], lp[c], lp[m.eos])
    lp = m.next_logprobs((a, b))  # after "ab": a, b, </s> seen, c not
    assert min(lp[a], lp[b], lp[m.eos]) > lp[c]
    lp = m.next_logprobs((c, c))  # unseen context: backs off, still a distribution
    assert abs(math.fsum(np.exp(lp)) - 1) < 1e-12


# ------------------------------------------------------------------------------------- callbacks
@pytest.mark.parametrize("smoothing", SMOOTHINGS)
def test_batch_all_positions_and_scores_agree_bitwise(smoothing):
    m = NGramModel.fit(CORPUS, order=4, smoothing=smoothing)
    rng = np.random.default_rng(7)
    seqs = [m.encode(s) for s in CORPUS] + [
        tuple(int(x) for x in rng.integers(0, m.vocab_size, size=int(rng.integers(0, 9))))
        for _ in range(20)
    ]
    # Reference rows from a fresh model with no cache, one call at a time.
    single = {}
    fresh = NGramModel.fit(CORPUS, order=4, smoothing=smoothing)
    for s in seqs:
        for t in range(len(s) + 1):
            single[s[:t]] = fresh.next_logprobs(s[:t])
            fresh.clear_cache()
    prefixes = sorted(single)
    batch = m.batch_next_logprobs(prefixes)  # computed together, cold cache
    assert batch.shape == (len(prefixes), m.vocab_size) and batch.dtype == np.float64
    for i, p in enumerate(prefixes):
        assert np.array_equal(batch[i], single[p]), p
        assert np.array_equal(m.next_logprobs(p), single[p])
    scores = m.score_sequences(seqs)
    assert scores.dtype == np.float64 and scores.shape == (len(seqs),)
    for s, sc in zip(seqs, scores):
        total = 0.0
        for t in range(len(s)):
            total += single[s[:t]][s[t]]
        assert sc == total  # bit-identical left-to-right sum
        apl = m.all_position_logprobs(s)
        assert apl.shape == (len(s), m.vocab_size)
        for d in range(len(s)):
            assert np.array_equal(apl[d], single[s[:d]])
    assert m.batch_next_logprobs([]).shape == (0, m.vocab_size)
    assert m.score_sequences([]).shape == (0,)
    assert m.score_sequences([()])[0] == 0.0


def test_returned_rows_are_fresh_copies():
    m = NGramModel.fit(CORPUS, order=3)
    a = m.next_logprobs((0,))
    a[:] = 0.0
    assert np.all(m.next_logprobs((0,)) < 0)
    b = m.batch_next_logprobs([(0,)])
    b[:] = 0.0
    assert np.all(m.next_logprobs((0,)) < 0)


def test_tiny_cache_gives_same_rows():
    m = NGramModel.fit(CORPUS, order=4)
    ref = NGramModel.fit(CORPUS, order=4)
    m.cache_size = 2
    prefixes = [m.encode(s, eos=False)[:t] for s in CORPUS for t in range(4)]
    got = m.batch_next_logprobs(prefixes)
    want = np.stack([ref.next_logprobs(p) for p in prefixes])
    assert np.array_equal(got, want)
    with pytest.raises(ValueError, match="cache_size must be >= 1, got 0"):
        m.cache_size = 0


def test_bad_prefix_token_ids():
    m = NGramModel.fit(CORPUS, order=3)
    V = m.vocab_size
    with pytest.raises(ValueError, match=rf"token id {V} in prefix .* outside \[0, {V}\)"):
        m.next_logprobs((0, V))
    with pytest.raises(ValueError, match=r"token id -1 in prefix"):
        m.batch_next_logprobs([(0,), (-1,)])
    with pytest.raises(ValueError, match=rf"token id {V + 3} at position 1"):
        m.score_sequences([(0, V + 3)])


def test_large_vocabulary_key_fallback_matches_fast_path(monkeypatch):
    rng = np.random.default_rng(3)
    corpus = [[int(x) for x in rng.integers(0, 40, size=int(rng.integers(0, 12)))] for _ in range(60)]
    fast = NGramModel.fit(corpus, order=4, smoothing="kn")
    monkeypatch.setattr(ngram_fit, "INT64_MAX", 0)  # force the level-by-level numbering
    slow = NGramModel.fit(corpus, order=4, smoothing="kn")
    for name in ("_ctx_keys", "_ptr", "_words", "_counts"):
        for a, b in zip(getattr(fast, name), getattr(slow, name)):
            assert np.array_equal(a, b), name


# ------------------------------------------------------------------------------ encode / decode
def test_encode_decode_round_trip():
    m = NGramModel.fit(CORPUS, order=3)
    for s in CORPUS + ["dcba", ""]:
        ids = m.encode(s)
        assert ids[-1] == m.eos and len(ids) == len(s) + 1
        assert all(isinstance(t, int) for t in ids)
        assert m.decode(ids) == s
        assert m.decode(m.encode(s, eos=False)) == s
    assert m.vocab[m.eos] == "</s>" and m.vocab_size == len(m.vocab) == 6
    with pytest.raises(ValueError, match=r"EOS \(id 5\) at position 1 is not at the end"):
        m.decode((0, m.eos, 1))
    with pytest.raises(ValueError, match=r"token id 9 at position 0 is outside \[0, 6\)"):
        m.decode((9,))
    with pytest.raises(TypeError, match="a character model encodes a str, got list"):
        m.encode(["a"])


def test_unknown_symbol_error_and_unk_mode():
    m = NGramModel.fit(CORPUS, order=3)
    assert m.unk is None
    with pytest.raises(ValueError, match=r"unknown symbol 'z' at position 2"):
        m.encode("abz")
    u = NGramModel.fit(CORPUS, order=3, unknown="unk")
    assert u.vocab_size == m.vocab_size + 1 and u.vocab[u.unk] == "<unk>" and u.unk != u.eos
    ids = u.encode("abz")
    assert ids == (0, 1, u.unk, u.eos)
    assert u.decode(ids) == "ab\ufffd"
    lp = u.next_logprobs(ids[:2])
    assert np.isfinite(lp[u.unk]) and lp[u.unk] < lp[0]
    assert np.isfinite(u.logprob("zzz"))
    # The same corpus symbols get the same ids with or without <unk>.
    assert u.vocab[: m.vocab_size] == m.vocab


def test_token_level_model():
    corpus = [
        [("the", 1), ("cat", 2)],
        [("the", 1), ("dog", 3), ("ran", 4)],
        [("a", 0), ("cat", 2), ("ran", 4)],
        [],
    ]
    m = NGramModel.fit(corpus, order=2, smoothing="wb")
    assert m.kind == "token" and m.vocab_size == 6 and m.vocab[m.eos] == "</s>"
    assert m.vocab[:5] == sorted({t for s in corpus for t in s})
    for s in corpus:
        ids = m.encode(s)
        assert m.decode(ids) == list(s)
    lp = m.next_logprobs(m.encode([("the", 1)], eos=False))
    cat, dog = m.encode([("cat", 2), ("dog", 3)], eos=False)
    # Both seen after "the"; "cat" is also the more frequent unigram.
    assert lp[cat] > lp[dog] > lp[m.encode([("a", 0)], eos=False)[0]]
    with pytest.raises(ValueError, match=r"unknown symbol \('fox', 9\) at position 1"):
        m.encode([("the", 1), ("fox", 9)])
    # Tokens that cannot be ordered keep first-appearance order.
    mixed = NGramModel.fit([[1, "x", None], ["x", 2.5]], order=2)
    assert mixed.vocab == [1, "x", None, 2.5, "</s>"]
    assert mixed.decode(mixed.encode([None, 1])) == [None, 1]


# ---------------------------------------------------------------------------------- save / load
@pytest.mark.parametrize("smoothing", SMOOTHINGS)
def test_save_load_round_trip_bitwise(tmp_path, smoothing):
    m = NGramModel.fit(CORPUS, order=4, smoothing=smoothing, discount=0.3, k=0.25, unknown="unk")
    path = tmp_path / "model.npz"
    m.save(path)
    r = NGramModel.load(path)
    assert (r.order, r.smoothing, r.discount, r.k, r.unknown, r.kind) == (4, smoothing, 0.3, 0.25, "unk", "char")
    assert r.vocab == m.vocab and r.eos == m.eos and r.unk == m.unk
    assert (r.n_sequences, r.n_tokens) == (m.n_sequences, m.n_tokens)
    rng = np.random.default_rng(0)
    prefixes = _contexts(m, rng, n_random=50)
    a, b = m.batch_next_logprobs(prefixes), r.batch_next_logprobs(prefixes)
    assert np.array_equal(a.view(np.int64), b.view(np.int64))
    seqs = [m.encode(s) for s in CORPUS]
    assert np.array_equal(m.score_sequences(seqs), r.score_sequences(seqs))
    # The file is a plain npz readable without pickle.
    with np.load(path, allow_pickle=False) as z:
        assert "meta" in z.files and all(z[f].dtype != object for f in z.files)


def test_save_load_token_model(tmp_path):
    corpus = [[1, 2, 3], [("t", 1), b"x", True], ["w", 2.5, None, frozenset({1})]]
    m = NGramModel.fit(corpus, order=3, smoothing="kn")
    m.save(tmp_path / "tok.npz")
    r = NGramModel.load(tmp_path / "tok.npz")
    assert r.vocab == m.vocab and [type(x) for x in r.vocab] == [type(x) for x in m.vocab]
    for s in corpus:
        assert r.encode(s) == m.encode(s)
        assert np.array_equal(r.all_position_logprobs(r.encode(s)), m.all_position_logprobs(m.encode(s)))
    bad = NGramModel.fit([[object()]], order=1)
    with pytest.raises(TypeError, match="cannot save a token of type object"):
        bad.save(tmp_path / "bad.npz")


def test_load_rejects_foreign_files(tmp_path):
    np.savez(tmp_path / "other.npz", x=np.arange(3))
    with pytest.raises(ValueError, match="is not an arenum n-gram model file"):
        NGramModel.load(tmp_path / "other.npz")


# ------------------------------------------------------------------------- load: damaged files
def _saved(tmp_path, order=4, corpus=CORPUS):
    m = NGramModel.fit(corpus, order=order, smoothing="kn")
    path = tmp_path / "good.npz"
    m.save(path)
    return m, path


def _rewrite(path, out, *, meta=None, drop_meta=(), arrays=None, drop=()):
    """Copy the npz at ``path`` to ``out`` with meta fields and arrays replaced or dropped."""
    with np.load(path, allow_pickle=False) as z:
        entries = {n: z[n] for n in z.files}
    m = json.loads(str(entries["meta"][()]))
    m.update(meta or {})
    for key in drop_meta:
        del m[key]
    entries["meta"] = np.array(json.dumps(m))
    for name, fn in (arrays or {}).items():
        entries[name] = fn(entries)
    for name in drop:
        del entries[name]
    np.savez_compressed(out, **entries)
    return out


def _refused(path, match):
    """load(path) raises a one-line ValueError that names the file and matches ``match``."""
    with pytest.raises(ValueError) as info:
        NGramModel.load(path)
    msg = str(info.value)
    assert "\n" not in msg and repr(str(path)) in msg, msg
    assert re.search(match, msg), msg
    return msg


def _swap01(a):
    a = a.copy()
    a[[0, 1]] = a[[1, 0]]
    return a


def _set(name, i, value):
    def edit(e):
        a = e[name].copy()
        a[i] = value
        return a
    return edit


@pytest.mark.parametrize(
    "meta, drop_meta, match",
    [
        ({"discount": 5.0}, (), r"discount must be in \(0.0, 1.0\], got 5.0"),
        ({"discount": 0}, (), r"discount must be in"),
        ({"k": -1}, (), r"k must be in \(0.0, inf\), got -1"),
        ({"order": 9}, (), r"order must be <= 8, got 9"),
        ({"order": "4"}, (), r"order must be an integer, got str '4'"),
        ({"smoothing": "gt"}, (), r"smoothing must be one of 'kn', 'wb', 'addk'; got 'gt'"),
        ({"unknown": "ignore"}, (), r"unknown must be one of 'error', 'unk'; got 'ignore'"),
        ({"kind": "bytes"}, (), r"kind must be one of 'char', 'token'; got 'bytes'"),
        ({"n_sequences": 0}, (), r"n_sequences must be >= 1, got 0"),
        ({"n_tokens": 1.5}, (), r"n_tokens must be an exact integer"),
        ({}, ("k",), r"meta has no 'k' field"),
        ({"symbols": "abcdr"}, (), r"symbols must be a list"),
        ({"symbols": ["a", "b", "c", "d"]}, (), r"token id outside \[0, 5\)"),  # one fewer than V-1
        ({"symbols": ["b", "a", "c", "d", "r"]}, (), r"not in increasing order"),
        ({"symbols": ["ab", "b", "c", "d", "r"]}, (), r"symbol 0 of a character model is 'ab'"),
        ({"version": 3}, (), r"unsupported n-gram file version 3 \(this arenum reads versions 1, 2\)"),
        ({"lowercase": "no"}, (), r"meta field 'lowercase' must be true or false, got 'no'"),
        ({"format": "other"}, (), r"is not an arenum n-gram model file"),
        ({"n_tokens": 1}, (), r"top-level counts add up to 44, but n_tokens \+ n_sequences = 10"),
    ],
)
def test_load_refuses_bad_meta(tmp_path, meta, drop_meta, match):
    _, good = _saved(tmp_path)
    _refused(_rewrite(good, tmp_path / "bad.npz", meta=meta, drop_meta=drop_meta), match)


@pytest.mark.parametrize(
    "arrays, drop, match",
    [
        # An unsorted level used to load and silently give another model.
        ({"ctx_keys_2": lambda e: _swap01(e["ctx_keys_2"])}, (), r"ctx_keys_2 is not strictly increasing \(entry 1: 0 after 1\)"),
        ({"ctx_keys_1": _set("ctx_keys_1", -1, 7)}, (), r"ctx_keys_1 holds a key outside \[0, 7\)"),
        ({"ctx_keys_3": _set("ctx_keys_3", 0, -1)}, (), r"ctx_keys_3 holds a key outside"),
        ({"ctx_keys_0": lambda e: np.array([3])}, (), r"ctx_keys_0 must be empty"),
        ({"ctx_keys_2": lambda e: e["ctx_keys_2"][:0]}, (), r"ctx_keys_2 is empty"),
        ({"ptr_1": _set("ptr_1", 1, 9)}, (), r"ptr_1 must rise strictly from 0 to len\(words_1\)"),
        ({"ptr_2": _set("ptr_2", -1, 1000)}, (), r"ptr_2 must rise strictly"),
        ({"ptr_3": lambda e: e["ptr_3"][:-1]}, (), r"ptr_3 has \d+ entries; \d+ contexts need \d+"),
        ({"words_1": _set("words_1", 0, 6)}, (), r"words_1 holds a token id outside \[0, 6\)"),
        ({"words_0": _set("words_0", 2, -3)}, (), r"words_0 holds a token id outside"),
        ({"words_2": lambda e: _swap01(e["words_2"])}, (), r"words_2 is not strictly increasing within a context"),
        ({"counts_2": _set("counts_2", 0, 0)}, (), r"counts_2 holds a count <= 0 \(0\)"),
        ({"counts_1": _set("counts_1", 3, -2)}, (), r"counts_1 holds a count <= 0"),
        ({"counts_3": _set("counts_3", 0, 2)}, (), r"top-level counts add up to 45"),
        ({"counts_0": lambda e: e["counts_0"][:-1]}, (), r"counts_0 has 5 entries, words_0 has 6"),
        ({"counts_0": lambda e: np.full(6, 2**61)}, (), r"counts_0 add up to more than 2\*\*62"),
        ({"words_1": lambda e: e["words_1"].astype(np.float64)}, (), r"words_1 must be a 1-d integer array, got 1-d float64"),
        ({"counts_0": lambda e: e["counts_0"].astype(bool)}, (), r"counts_0 must be a 1-d integer array, got 1-d bool"),
        ({"words_3": lambda e: e["words_3"].reshape(-1, 1)}, (), r"words_3 must be a 1-d integer array, got 2-d int64"),
        ({"counts_1": lambda e: e["counts_1"].astype(object)}, (), r"entry 'counts_1' holds Python objects"),
        ({"meta": lambda e: np.array(5)}, (), r"entry 'meta' must be a 0-d string array"),
        ({"meta": lambda e: np.array("{not json")}, (), r"entry 'meta' is not JSON"),
        ({}, ("words_3",), r"entry 'words_3' is missing"),
        ({"extra": lambda e: np.arange(3)}, (), r"unexpected entry 'extra.npy' for an order-4 model"),
    ],
)
def test_load_refuses_bad_tables(tmp_path, arrays, drop, match):
    _, good = _saved(tmp_path)
    _refused(_rewrite(good, tmp_path / "bad.npz", arrays=arrays, drop=drop), match)


def test_load_accepts_other_integer_dtypes(tmp_path):
    m, good = _saved(tmp_path)
    cast = {f"{t}_{L}": (lambda e, n=f"{t}_{L}": e[n].astype(">u4"))
            for t in ("words", "counts") for L in range(4)}
    r = NGramModel.load(_rewrite(good, tmp_path / "u4.npz", arrays=cast))
    prefixes = _contexts(m, np.random.default_rng(1))
    assert np.array_equal(m.batch_next_logprobs(prefixes), r.batch_next_logprobs(prefixes))


def test_load_refuses_bad_token_symbols(tmp_path):
    m = NGramModel.fit([[1, 2], ["x", (3, None)]], order=2)
    good = tmp_path / "tok.npz"
    m.save(good)
    syms = json.loads(str(np.load(good)["meta"][()]))["symbols"]
    _refused(_rewrite(good, tmp_path / "b1.npz", meta={"symbols": [["q", 1]] + syms[1:]}),
             r"symbol 0: \['q', 1\] is not a tagged token")
    _refused(_rewrite(good, tmp_path / "b2.npz", meta={"symbols": [["i", "1"]] + syms[1:]}),
             r"symbol 0: .* is not a tagged token")
    _refused(_rewrite(good, tmp_path / "b3.npz", meta={"symbols": [syms[1]] + syms[1:]}),
             r"two symbols are equal")
    _refused(_rewrite(good, tmp_path / "b4.npz", meta={"symbols": [["y", "zz"]] + syms[1:]}),
             r"symbol 0: non-hexadecimal")


def test_load_checks_a_sample_of_rows(tmp_path, monkeypatch):
    _, good = _saved(tmp_path)
    rows = ngram_tables.CountTables.rows
    monkeypatch.setattr(ngram_tables.CountTables, "rows", lambda self, d, p: [r + 0.01 for r in rows(self, d, p)])
    _refused(good, r"the distribution after a level-0 context is not normalized")


def test_load_damaged_and_foreign_files(tmp_path):
    m, good = _saved(tmp_path)
    data = good.read_bytes()
    (tmp_path / "text.npz").write_text("hello\n")
    _refused(tmp_path / "text.npz", r"is not an arenum n-gram model file \(not a .npz archive\)")
    (tmp_path / "empty.npz").write_bytes(b"")
    _refused(tmp_path / "empty.npz", r"not a .npz archive")
    for n in (10, len(data) // 3, len(data) // 2, len(data) - 30, len(data) - 1):
        (tmp_path / "cut.npz").write_bytes(data[:n])
        _refused(tmp_path / "cut.npz", r"damaged or truncated zip archive|not a .npz archive")
    with pytest.raises(FileNotFoundError, match="missing.npz"):
        NGramModel.load(tmp_path / "missing.npz")
    # One flipped byte anywhere: a clear ValueError, or (a byte zip ignores) the same model.
    prefixes = _contexts(m, np.random.default_rng(2))
    want = m.batch_next_logprobs(prefixes)
    outcomes = set()
    for i in np.linspace(0, len(data) - 1, 150).astype(int).tolist():
        flipped = bytearray(data)
        flipped[i] ^= 0x5A
        (tmp_path / "flip.npz").write_bytes(bytes(flipped))
        try:
            r = NGramModel.load(tmp_path / "flip.npz")
        except ValueError as exc:
            assert repr(str(tmp_path / "flip.npz")) in str(exc) and "\n" not in str(exc), exc
            outcomes.add("refused")
        else:
            assert np.array_equal(r.batch_next_logprobs(prefixes), want), i
            outcomes.add("same")
    assert "refused" in outcomes


def test_load_refuses_archives_that_inflate_hugely(tmp_path, monkeypatch):
    _, good = _saved(tmp_path)
    # With the default limits: a 72 MB entry of zeros compresses to ~70 kB (1000x).
    bomb = tmp_path / "bomb.npz"
    with zipfile.ZipFile(good) as src, zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            dst.writestr(info.filename, src.read(info))
        dst.writestr("words_9.npy", bytes(72_000_000))
    assert os.path.getsize(bomb) < 200_000
    msg = _refused(bomb, r"is refused: its entries would inflate to 72,0\d\d,\d{3} bytes, more than")
    assert "50x" in msg
    # The absolute cap applies whatever the ratio.
    monkeypatch.setattr(ngram_io, "MAX_UNCOMPRESSED_BYTES", 1000)
    _refused(good, r"would inflate to [\d,]+ bytes, more than the 1,000 allowed")


# ------------------------------------------------------------------------------- atomic save
@pytest.mark.parametrize("exc", [RuntimeError("disk full"), KeyboardInterrupt()])
def test_failed_save_keeps_the_previous_file(tmp_path, monkeypatch, exc):
    old, path = _saved(tmp_path)
    before = path.read_bytes()
    real = np.savez_compressed

    def savez_then_fail(file, **arrays):  # writes part of an archive, then fails
        real(file, **dict(list(arrays.items())[:3]))
        file.flush()
        assert os.path.getsize(file.name) > 0
        raise exc

    monkeypatch.setattr(np, "savez_compressed", savez_then_fail)
    new = NGramModel.fit(["xyz"], order=2)
    with pytest.raises(type(exc)):
        new.save(path)
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["good.npz"]  # no temp file left
    assert NGramModel.load(path).vocab == old.vocab
    with pytest.raises(type(exc)):
        new.save(tmp_path / "fresh.npz")
    assert os.listdir(tmp_path) == ["good.npz"]


def test_save_is_synced_then_renamed(tmp_path, monkeypatch):
    _, path = _saved(tmp_path)
    events = []
    real_fsync, real_replace = os.fsync, os.replace
    proc = os.path.isdir("/proc/self/fd")

    def fsync(fd):
        events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}") if proc else fd))
        real_fsync(fd)

    def replace(src, dst):
        events.append(("replace", src, dst))
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    m = NGramModel.fit(["xyz"], order=2)
    m.save(path)
    kinds = [e[0] for e in events]
    assert kinds[:2] == ["fsync", "replace"], events
    tmp = events[1][1]
    assert os.path.dirname(tmp) == str(tmp_path) and os.path.basename(tmp).startswith(".arenum-")
    if proc:
        assert events[0][1] == tmp and events[2] == ("fsync", str(tmp_path))  # file, then folder
    assert events[1][2] == str(path)
    assert os.listdir(tmp_path) == ["good.npz"]
    assert NGramModel.load(path).vocab == m.vocab


# ----------------------------------------------------------------------------------- bad params
@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        ({"order": 0}, ValueError, "order must be >= 1, got 0"),
        ({"order": 9}, ValueError, "order must be <= 8, got 9"),
        ({"order": 2.5}, ValueError, "order must be an exact integer, got 2.5"),
        ({"order": True}, TypeError, "order must be an integer, got bool True"),
        ({"order": "3"}, TypeError, "order must be an integer, got str '3'"),
        ({"smoothing": "good-turing"}, ValueError,
         r"smoothing must be one of 'kn', 'wb', 'addk'; got 'good-turing'"),
        ({"smoothing": None}, ValueError, "smoothing must be one of .*; got None"),
        ({"discount": 0}, ValueError, r"discount must be in \(0.0, 1.0\], got 0"),
        ({"discount": 1.5}, ValueError, r"discount must be in \(0.0, 1.0\], got 1.5"),
        ({"discount": True}, TypeError, "discount must be a real number, got bool True"),
        ({"k": 0.0}, ValueError, r"k must be in \(0.0, inf\), got 0.0"),
        ({"k": float("nan")}, ValueError, r"k must be in \(0.0, inf\), got nan"),
        ({"unknown": "ignore"}, ValueError, "unknown must be one of 'error', 'unk'; got 'ignore'"),
    ],
)
def test_bad_parameters(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        NGramModel.fit(CORPUS, **kwargs)


def test_integral_float_order_accepted():
    assert NGramModel.fit(CORPUS, order=2.0).order == 2
    assert NGramModel.fit(CORPUS, order=np.int64(3)).order == 3


def test_bad_corpora():
    with pytest.raises(ValueError, match="corpus is empty"):
        NGramModel.fit([])
    with pytest.raises(ValueError, match="corpus is empty"):
        NGramModel.fit(iter(()))
    with pytest.raises(TypeError, match="not a single str"):
        NGramModel.fit("abc")
    with pytest.raises(TypeError, match="corpus item 1 is list, but item 0 is a str"):
        NGramModel.fit(["ab", ["a"]])
    with pytest.raises(TypeError, match="corpus item 1 is a str, but item 0 is not"):
        NGramModel.fit([["a"], "ab"])
    with pytest.raises(TypeError, match="corpus item 0 contains an unhashable token"):
        NGramModel.fit([[["a"]]])
    with pytest.raises(TypeError, match="corpus must be an iterable"):
        NGramModel.fit(5)


def test_only_empty_lines():
    m = NGramModel.fit(["", ""], order=3)
    assert m.vocab == ["</s>"] and m.next_logprobs(()).tolist() == [0.0]


def test_empty_and_whitespace_items_are_sequences():
    # fit reads no lines and skips nothing: "" is an EOS-only sequence, "  " two spaces.
    m = NGramModel.fit(["ab", "", "  "], order=2)
    assert (m.n_sequences, m.n_tokens) == (3, 4) and m.vocab == [" ", "a", "b", "</s>"]
    assert m.encode("  ") == (0, 0, m.eos)
    without_empty = NGramModel.fit(["ab", "  "], order=2)
    assert m.logprob("") > without_empty.logprob("")  # the empty item counted BOS -> EOS
    tok = NGramModel.fit([["a", " "], [], [" "]], order=2)
    assert (tok.n_sequences, tok.n_tokens) == (3, 3) and tok.vocab == [" ", "a", "</s>"]


def test_enumerable_requires_max_len_when_fixed_length():
    m = NGramModel.fit(CORPUS, order=2)
    with pytest.raises(ValueError, match="max_len is required when terminating=False"):
        m.enumerable(terminating=False)


# ------------------------------------------------------------------ enumeration vs brute force
def _brute_force(model, terminating, max_len):
    V, eos = model.vocab_size, model.eos
    if terminating:
        letters = [t for t in range(V) if t != eos]
        support = [
            tuple(body) + (eos,)
            for n in range(max_len)
            for body in itertools.product(letters, repeat=n)
        ]
    else:
        support = list(itertools.product(range(V), repeat=max_len))
    scores = model.score_sequences(support)
    order = sorted(range(len(support)), key=lambda i: -scores[i])
    return [support[i] for i in order], [float(scores[i]) for i in order]


@pytest.mark.parametrize("terminating, max_len", [(True, 4), (False, 3)])
def test_enumerable_agrees_with_brute_force(terminating, max_len):
    model = NGramModel.fit(["ab", "abc", "ca", "b", "aab", "cab", "ab"], order=2, smoothing="kn")
    assert model.vocab_size == 4
    enum = model.enumerable(max_len=max_len, terminating=terminating)
    seqs, scores = _brute_force(model, terminating, max_len)
    n = len(seqs)
    assert n == (40 if terminating else 64)
    for s in sorted(set(scores))[::3] + [scores[0], scores[-1]]:
        assert enum.count(s) == sum(1 for x in scores if x >= s)
    for i in range(n):
        seq, lp = enum.unrank(i)
        seq = tuple(seq)
        assert lp == scores[i]
        assert model.score_sequences([seq])[0] == scores[i]
        assert enum.threshold(i + 1) == scores[i]
        assert enum.rank(seq).rank == sum(1 for x in scores if x > scores[i])
    assert sorted(tuple(enum.unrank(i)[0]) for i in range(n)) == sorted(seqs)
    with pytest.raises(IndexError):
        enum.unrank(n)



# ---------------------------------------------------------------------------- lowercase
def test_lowercase_fit_encode_and_file(tmp_path):
    corpus = ["troubador", "tr0ub4dor&3", "Password1", "dragon"]
    plain = NGramModel.fit(corpus, order=3)
    with pytest.raises(ValueError, match="unknown symbol 'T' at position 0"):
        NGramModel.fit([c.lower() for c in corpus], order=3).encode("Tr0ub4dor&3")
    low = NGramModel.fit(corpus, order=3, lowercase=True)
    assert low.lowercase and not plain.lowercase
    assert "P" not in low.vocab and "P" in plain.vocab
    assert low.encode("Tr0ub4dor&3") == low.encode("tr0ub4dor&3")
    assert low.logprob("TR0UB4DOR&3") == low.logprob("tr0ub4dor&3")
    same = NGramModel.fit([c.lower() for c in corpus], order=3)
    assert same.logprob("tr0ub4dor&3") == low.logprob("Tr0ub4dor&3")
    assert same.fingerprint() != low.fingerprint()  # the same tables, another encode
    tok = NGramModel.fit([["Hello", "World", 3]], order=2, lowercase=True)
    assert tok.vocab[:3] == [3, "hello", "world"] or set(tok.vocab[:3]) == {3, "hello", "world"}
    assert tok.encode(["HELLO", "world", 3]) == tok.encode(["hello", "World", 3])
    with pytest.raises(TypeError, match="lowercase must be a bool"):
        NGramModel.fit(corpus, lowercase=1)
    low.save(tmp_path / "low.npz")
    back = NGramModel.load(tmp_path / "low.npz")
    assert back.lowercase and back.fingerprint() == low.fingerprint()
    # a version-1 file (before the field existed) reads as not lowercased
    plain.save(tmp_path / "plain.npz")
    v1 = _rewrite(tmp_path / "plain.npz", tmp_path / "v1.npz", meta={"version": 1}, drop_meta=("lowercase",))
    old = NGramModel.load(v1)
    assert not old.lowercase and old.fingerprint() == plain.fingerprint()
    _refused(_rewrite(tmp_path / "plain.npz", tmp_path / "v2.npz", drop_meta=("lowercase",)),
             "meta field 'lowercase' must be true or false, got None")


@pytest.mark.parametrize("maxsize", [1, 2, 3, 8, 33])
def test_the_row_cache_is_bounded_and_keeps_what_was_just_used(maxsize):
    from arenum.models.ngram.cache import _Recent

    rng = np.random.default_rng(maxsize)
    c = _Recent(maxsize)
    last_used: dict[int, int] = {}  # key -> the operation that last put or hit it
    for op in range(3000):
        k = int(rng.integers(0, 3 * maxsize + 2))
        if rng.random() < 0.5:
            c.put(k, ("v", k))
            last_used[k] = op
        else:
            keys = [k, int(rng.integers(0, 3 * maxsize + 2))]
            vals, miss = c.get_many(keys) if rng.random() < 0.5 else ([c.get(x) for x in keys], None)
            for i, (x, v) in enumerate(zip(keys, vals)):
                assert v is None or v == ("v", x)  # never another key's value
                # a key used fewer than maxsize // 2 operations ago is still there (2 keys an op here)
                if x in last_used and op - last_used[x] < max(1, maxsize // 2) // 2:
                    assert v == ("v", x), (op, x, last_used[x])
                if v is not None:
                    last_used[x] = op
            if miss is not None:
                assert miss == [i for i, v in enumerate(vals) if v is None]
        assert len(c) <= maxsize
