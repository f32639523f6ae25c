"""A finite-state model's ``rank`` builds the exact index only up to ``rank_exact_limit`` live prefixes
(issue 27 target 3, one guess number at a time): past them its certified DP answers, a bracket that
holds brute force; inside them, and wherever the index built so far reaches, the rank is exact. A
model without tables, and ``rank_exact_limit=None``, build as the caps allow."""
from __future__ import annotations

import itertools
import random
import subprocess
import sys

import numpy as np
import pytest

from arenum import AutoregressiveEnumerable
from arenum.models import NGramModel

CAP = 7


def _words(n: int, seed: int, alphabet: str = "abcd", longest: int = 6) -> list[str]:
    rng = random.Random(seed)
    return ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, longest))) for _ in range(n)]


def _scores(m: NGramModel) -> np.ndarray:
    toks = [t for t in range(m.vocab_size) if t != m.eos]
    return m.score_sequences([t + (m.eos,) for n in range(CAP) for t in itertools.product(toks, repeat=n)])


@pytest.mark.parametrize("seed", range(5))
def test_a_rank_past_the_limit_is_certified_and_holds_brute_force(seed):
    rng = random.Random(seed)
    m = NGramModel.fit(_words(50, seed), order=rng.choice([2, 3]), smoothing=rng.choice(["kn", "wb"]))
    sc = _scores(m)
    limit = rng.choice([15, 40, 120, 400])
    e, plain = m.enumerable(max_len=CAP), m.enumerable(max_len=CAP)
    assert e.rank_exact_limit == 100_000  # the default
    e.rank_exact_limit, plain.rank_exact_limit = limit, None
    words = _words(60, 100 + seed)
    methods = set()
    for w in rng.sample(words, len(words)):
        seq, s = m.encode(w), m.logprob(w)
        truth = int((sc > s).sum())
        got, want = e.rank(seq), plain.rank(seq)
        assert want.method == "exact" and want.rank == truth
        assert got.rank_lo <= truth <= got.rank_hi
        if got.method == "exact":
            assert got.exact and got.rank == truth and got.cumulative == want.cumulative
        else:
            assert got.method == "certified" and (not got.exact or got.rank_lo == got.rank_hi)
            assert got.cumulative_lo <= want.cumulative <= got.cumulative_hi
        assert e.stats["tree_prefixes"] <= limit  # the build stops at the limit
        methods.add(got.method)
        e._check()
    assert methods == {"exact", "certified"}
    # the caps of other queries are the enumerable's own: a count past the limit is built exactly
    deep = min(words, key=m.logprob)
    assert e.count(m.logprob(deep)).exact and e.rank(m.encode(deep)).method == "exact"


def test_limit_zero_builds_nothing_and_a_model_without_tables_ignores_it():
    m = NGramModel.fit(_words(50, 7), order=3, smoothing="kn")
    sc = _scores(m)
    e = m.enumerable(max_len=CAP)
    e.rank_exact_limit = 0
    seq = m.encode("abcab")
    r = e.rank(seq)
    assert r.method == "certified" and r.rank_lo <= int((sc > m.logprob("abcab")).sum()) <= r.rank_hi
    assert e.stats["forwards"] <= len(seq) and e.stats["tree_prefixes"] <= 1  # its own prefixes, scored
    plain = AutoregressiveEnumerable(m.next_logprobs, max_len=CAP, eos=m.eos)  # no finite-state tables
    plain.rank_exact_limit = 0
    assert plain.rank(seq).method == "exact" and plain.rank(seq).rank == int((sc > m.logprob("abcab")).sum())


@pytest.mark.parametrize("bad, err", [(-1, ValueError), (2.5, ValueError), (1e6, None), ("10", TypeError), (True, TypeError)])
def test_a_bad_limit_is_refused(bad, err):
    e = NGramModel.fit(["ab", "ba"], order=2).enumerable(max_len=4)
    if err is None:  # an integral float is read exactly
        e.rank_exact_limit = bad
        assert e.rank_exact_limit == int(bad) and type(e.rank_exact_limit) is int
        return
    with pytest.raises(err, match="rank_exact_limit"):
        e.rank_exact_limit = bad
    assert e.rank_exact_limit == 100_000


def test_cli_rank_exact_limit(tmp_path):
    import json

    m = NGramModel.fit(_words(50, 3), order=3, smoothing="kn")
    path = tmp_path / "m.npz"
    m.save(path)
    sc = _scores(m)
    word = min(_words(60, 9), key=m.logprob)
    base = [sys.executable, "-m", "arenum.cli", "rank", "-m", str(path), "--max-len", str(CAP), word, "--json"]
    for limit, method in (("0", "certified"), ("1e6", "exact")):
        out = subprocess.run(base + ["--rank-exact-limit", limit], capture_output=True, timeout=300)
        assert out.returncode == 0, out.stderr.decode()
        doc = json.loads(out.stdout)
        assert doc["method"] == method and doc["rank_lo"] <= int((sc > m.logprob(word)).sum()) <= doc["rank_hi"]
    out = subprocess.run(base + ["--rank-exact-limit", "-1"], capture_output=True, timeout=300)
    assert out.returncode == 2 and b"--rank-exact-limit must be >= 0" in out.stderr


def test_cli_plot_exact_marks_are_exact_past_the_limit(tmp_path):
    """``--exact-marks`` ranks a mark exactly as far as ``--max-forwards`` allows: the rank's limit is
    lifted (a mark the limit would leave to the certified DP is exact)."""
    import json

    pytest.importorskip("matplotlib")
    m = NGramModel.fit(_words(50, 3), order=3, smoothing="kn")
    path = tmp_path / "m.npz"
    m.save(path)
    word = min(_words(60, 9), key=m.logprob)
    out = subprocess.run([sys.executable, "-m", "arenum.cli", "plot", "-m", str(path), "--max-len", str(CAP),
                          "--max-rank", "10", "--points", "4", "--mark", word, "--exact-marks", "--rank-exact-limit",
                          "0", "-o", str(tmp_path / "c.png"), "--json"], capture_output=True, timeout=300)
    assert out.returncode == 0, out.stderr.decode()
    mark = json.loads(out.stdout)["marks"][0]
    assert mark["exact"] and mark["rank"] == int((_scores(m) > m.logprob(word)).sum())


@pytest.mark.parametrize("seed", range(3))
def test_a_build_the_dp_proves_past_the_limit_is_not_tried(monkeypatch, seed):
    """After a deeper rank built the certified DP, a rank whose DP lower count already passes the
    limit is answered without starting the build (no deepening, only its own prefixes scored); one
    the DP does not rule out may build, and stops at the limit."""
    from arenum.exact.tree import PrefixTree

    rng = random.Random(seed)
    m = NGramModel.fit(_words(50, 30 + seed), order=3, smoothing="kn")
    sc = _scores(m)
    e = m.enumerable(max_len=CAP)
    e.rank_exact_limit, limit = 0, rng.choice([20, 60])
    words = _words(80, 60 + seed)
    assert e.rank(m.encode(min(words, key=m.logprob))).method == "certified"  # the DP, built to the deepest
    assert e.stats["tree_prefixes"] <= 1  # and no exact build yet: the tree knows nothing of the depths
    e.rank_exact_limit = limit
    cc = e.certified()
    tried = []
    real = PrefixTree.deepen
    monkeypatch.setattr(PrefixTree, "deepen", lambda self, *a, **k: (tried.append(1), real(self, *a, **k))[1])
    skipped = 0
    for w in rng.sample(words, len(words)):
        seq, s = m.encode(w), m.logprob(w)
        n, f = len(tried), e.stats["forwards"]
        proven = s < e.seek_index().tree.built and cc.counts_built(s) and cc.count_lower(s) > limit
        r = e.rank(seq)
        assert r.rank_lo <= int((sc > s).sum()) <= r.rank_hi
        if proven:
            skipped += 1
            assert r.method == "certified" and len(tried) == n and e.stats["forwards"] - f <= len(seq)
        assert e.stats["tree_prefixes"] <= limit
        e._check()
    assert skipped >= 5


def test_a_rank_under_its_limit_grows_no_prefix_dp():
    """Where a rank's limit binds before the caps, the caps' check (the certified prefix DP, grown to
    every deeper rank) is not asked: the limit bounds the build, and the count DP already built tells
    when to skip it. Where the caps bind first (no limit here), they decide as for any query."""
    m = NGramModel.fit(_words(40, 11), order=3, smoothing="kn")
    sc = _scores(m)
    words = [w for w in _words(300, 12) if len(w) <= 6]
    for limit, grown in ((10, False), (None, True)):
        e = m.enumerable(max_len=CAP, max_prefixes=40)
        e.rank_exact_limit = limit
        for w in ["ddddcc"] + words:  # the deep one first: its count DP built
            r = e.rank(m.encode(w))
            assert r.rank_lo <= int((sc > m.logprob(w)).sum()) <= r.rank_hi
            assert e.stats["tree_prefixes"] <= 40
        e._check()
        assert (e.certified()._prefixes is not None) == grown


@pytest.mark.parametrize("seed", range(3))
def test_a_fresh_rank_far_past_the_limit_builds_the_dp_first(seed):
    """On a fresh enumerable, a rank more than 10 bits past what the limit's sequences could reach
    (``e**-t > 1024 limit``) asks the certified DP first, which answers it: no exact build (only the
    sequence's own prefixes scored)."""
    import math

    m = NGramModel.fit(_words(50, 40 + seed), order=3, smoothing="kn")
    deep = min(_words(80, 70 + seed), key=m.logprob)
    s = m.logprob(deep)
    limit = int(math.exp(-s) / 2048)
    assert limit >= 5
    e = m.enumerable(max_len=CAP)
    e.rank_exact_limit = limit
    r = e.rank(m.encode(deep))
    assert r.method == "certified" and e.stats["forwards"] <= len(deep) + 1 and e.stats["tree_prefixes"] <= 1
    assert r.rank_lo <= int((_scores(m) > s).sum()) <= r.rank_hi
    e._check()
