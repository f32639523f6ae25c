"""The password researcher's workflow end to end (issue 16): fit on real-looking data (weighted,
latin-1, dirty lines), rank a batch with bad strings in it, stream guesses, evaluate a test set, and
the caps on ``top``. Every answer is checked against brute force on a tiny model; nothing is
downloaded (the word lists are written here).
"""
from __future__ import annotations

import itertools
import json
import math
import os
import subprocess
import sys
import time

import numpy as np
import pytest

from arenum import BudgetExceeded
from arenum.report.curves import GuessCurve, guessing_curve
from arenum.models import NGramModel
from arenum.models.ngram.fit import parse_weighted_line

CORPUS = ["abc", "ab", "a", "bca", "cab", "abc", "b", "ca", "aab", "bb", "cc", "abca", "bac", "ab"]
PNG_SIG = b"\x89PNG\r\n\x1a\n"


def run(*args, stdin: str | bytes | None = None, **kw):
    data = stdin.encode() if isinstance(stdin, str) else stdin
    env = {k: v for k, v in os.environ.items() if k != "ARENUM_DEBUG"}
    return subprocess.run([sys.executable, "-m", "arenum.cli", *map(str, args)], input=data, capture_output=True,
                          env=env, timeout=120, **kw)


def ok(*args, **kw) -> str:
    p = run(*args, **kw)
    assert p.returncode == 0, p.stderr.decode()
    assert p.stderr == b"", p.stderr.decode()
    return p.stdout.decode()


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    d = tmp_path_factory.mktemp("wf")
    (d / "corpus.txt").write_text("\n".join(CORPUS) + "\n", encoding="utf-8")
    out = d / "m.npz"
    ok("fit", d / "corpus.txt", "-o", out, "--order", "3")
    return out


def brute(model: NGramModel, max_len: int = 4) -> list[tuple[str, float]]:
    """Every string of the ``--max-len`` support (EOS included), most probable first."""
    strings = ["".join(t) for n in range(max_len) for t in itertools.product("abc", repeat=n)]
    return sorted(((s, model.logprob(s)) for s in strings), key=lambda x: -x[1])


# ------------------------------------------------------------------ 2. caps apply to top / top_k
def test_top_k_obeys_max_prefixes_at_once():
    m = NGramModel.fit(CORPUS, order=3)
    e = m.enumerable(max_prefixes=50)
    t0 = time.perf_counter()
    with pytest.raises(BudgetExceeded, match="max_prefixes=50"):
        e.top_k(10**12)
    assert time.perf_counter() - t0 < 30 and e.stats["forwards"] <= 200  # refused early: no long build first
    assert e.top_k(3) == m.enumerable().slice(0, 3)  # small K still answers, through the same index


def test_cli_top_obeys_max_forwards(model_path):
    t0 = time.perf_counter()
    p = run("top", "1000000000000", "-m", model_path, "--max-forwards", "1000")
    assert p.returncode == 2 and b"--max-forwards 1,000" in p.stderr and p.stdout == b""
    assert time.perf_counter() - t0 < 30


# ------------------------------------------------------------------ 4. one bad string does not abort a batch
def test_rank_batch_with_bad_strings(model_path):
    model = NGramModel.load(model_path)
    bf = brute(model, 4)
    p = run("rank", "-", "-m", model_path, "--max-len", "4", "--json", stdin="abc\nxyz\n\n   \nabcabc\ncab\n\t\n")
    assert p.returncode == 1  # some failed
    recs = [json.loads(ln) for ln in p.stdout.decode().splitlines()]
    assert [r["string"] for r in recs] == ["abc", "xyz", "abcabc", "cab"]  # blank lines skipped
    assert "unknown symbol 'x'" in recs[1]["error"] and "past the length cap 4" in recs[2]["error"]
    for r in (recs[0], recs[3]):
        assert "error" not in r and r["exact"]
        assert r["rank"] == sum(1 for _, s in bf if s > model.logprob(r["string"]))
    err = p.stderr.decode().splitlines()
    assert len(err) == 2 and all(ln.startswith("arenum: error: ") for ln in err)
    text = run("rank", "abc", "zz", "-m", model_path)
    assert text.returncode == 1 and "'zz'" in text.stdout.decode() and "error" in text.stdout.decode()
    assert "1 of 2 strings failed" in text.stdout.decode()
    only_bad = run("rank", "zz", "-m", model_path)
    assert only_bad.returncode == 1 and only_bad.stdout == b"" and b"cannot encode 'zz'" in only_bad.stderr


def test_rank_file_skips_blank_lines(tmp_path, model_path):
    (tmp_path / "t.txt").write_text("abc\n\n  \n\t\ncab\n", encoding="utf-8")
    recs = [json.loads(ln) for ln in ok("rank", "--file", tmp_path / "t.txt", "-m", model_path, "--json").splitlines()]
    assert [r["string"] for r in recs] == ["abc", "cab"]
    (tmp_path / "blank.txt").write_text("\n \n", encoding="utf-8")
    p = run("rank", "--file", tmp_path / "blank.txt", "-m", model_path)
    assert p.returncode == 2 and b"at least one string" in p.stderr


def test_fit_skips_whitespace_only_lines(tmp_path):
    (tmp_path / "c.txt").write_text("abc\n   \n\t\nab\n\n", encoding="utf-8")
    doc = json.loads(ok("fit", tmp_path / "c.txt", "-o", tmp_path / "m.npz", "--order", "2", "--json"))
    assert doc["n_sequences"] == 2 and doc["skipped"]["blank"] == 3
    m = NGramModel.load(tmp_path / "m.npz")
    assert " " not in m.vocab and m.logprob("abc") == NGramModel.fit(["abc", "ab"], order=2).logprob("abc")


# ------------------------------------------------------------------ 7. real training data
def test_weighted_fit_equals_repeated_corpus():
    items, w = ["abc", "ab", "a b", "bca", "", "xyz"], [3, 1, 2, 5, 1, 2]
    rep = [s for s, c in zip(items, w) for _ in range(c)]
    for smoothing in ("kn", "wb", "addk"):
        for order in (1, 2, 4):
            a = NGramModel.fit(items, order=order, smoothing=smoothing, weights=w)
            b = NGramModel.fit(rep, order=order, smoothing=smoothing)
            assert (a.n_sequences, a.n_tokens) == (b.n_sequences, b.n_tokens) == (14, 38)
            for s in ("abc", "", "xyz", "cba", "a b", "zz"):
                assert a.logprob(s) == b.logprob(s)
    tok = NGramModel.fit([["x", "y"], ["y"]], order=2, weights=[2, 1])
    assert tok.logprob(["x", "y"]) == NGramModel.fit([["x", "y"], ["x", "y"], ["y"]], order=2).logprob(["x", "y"])


@pytest.mark.parametrize("weights,exc,words", [
    ([1, 2], ValueError, "weights has 2 entries"),
    ([1, 0, 1], ValueError, r"weights\[1\] must be >= 1"),
    ([1, 1.5, 1], ValueError, r"weights\[1\] must be an exact integer"),
    ([1, True, 1], TypeError, r"weights\[1\]"),
    ("abc", TypeError, "weights must be a sequence"),
])
def test_weighted_fit_bad_weights(weights, exc, words):
    with pytest.raises(exc, match=words):
        NGramModel.fit(["a", "b", "c"], order=2, weights=weights)


def test_parse_weighted_line():
    assert parse_weighted_line("12\tpass word") == (12, "pass word")
    assert parse_weighted_line("     7 123456") == (7, "123456")
    assert parse_weighted_line("3  lead") == (3, " lead")
    assert parse_weighted_line("password") is None and parse_weighted_line("x\t1") is None


def test_fit_weighted_latin1_file_with_dirty_lines(tmp_path):
    data = ("3\tcaf\xe9\n" "  2 abc\n" "5 a b\n" "garbage\n" "0\tzero\n" "4\t   \n" "   \n").encode("latin-1")
    (tmp_path / "w.txt").write_bytes(data)
    p = run("fit", tmp_path / "w.txt", "-o", tmp_path / "m.npz", "--weighted")  # not UTF-8
    assert p.returncode == 2 and b"not UTF-8" in p.stderr and b"--encoding latin-1" in p.stderr
    doc = json.loads(ok("fit", tmp_path / "w.txt", "-o", tmp_path / "m.npz", "--weighted", "--encoding", "latin-1",
                        "--json", "--order", "2"))
    assert doc["n_sequences"] == 10 and doc["lines_used"] == 3
    assert doc["skipped"] == {"undecodable": 0, "blank": 2, "malformed": 1, "zero_count": 1}
    m = NGramModel.load(tmp_path / "m.npz")
    ref = NGramModel.fit(["café", "abc", "a b"], order=2, weights=[3, 2, 5])
    assert "é" in m.vocab and m.logprob("café") == ref.logprob("café")
    text = ok("fit", tmp_path / "w.txt", "-o", tmp_path / "m2.npz", "--weighted", "--errors", "skip")
    assert "1 undecodable" in text and "2 blank" in text and "1 count 0" in text
    assert "é" not in NGramModel.load(tmp_path / "m2.npz").vocab
    doc = json.loads(ok("fit", tmp_path / "w.txt", "-o", tmp_path / "m3.npz", "--weighted", "--errors", "replace",
                        "--json"))
    assert doc["replaced"] == 1 and "\ufffd" in NGramModel.load(tmp_path / "m3.npz").vocab


# ------------------------------------------------------------------ 8. the guess stream
def test_guesses_stream_in_exact_order(model_path):
    model = NGramModel.load(model_path)
    bf = brute(model, 4)
    out = ok("guesses", model_path, "--max-len", "4")
    assert out.split("\n")[:-1] == [s for s, _ in bf]  # raw, one per line, every one, exact order
    out = ok("guesses", "-m", model_path, "--max-len", "4", "--start", "5", "--count", "7")
    assert out.split("\n")[:-1] == [s for s, _ in bf[5:12]]
    p = run("guesses", model_path, "-m", model_path)
    assert p.returncode == 2 and b"give the model once" in p.stderr


def test_guesses_head_returns_at_once_and_quietly(tmp_path):
    """A big support streamed into a reader that stops after 3 lines: it returns at once, status 0,
    nothing on stderr (the reader going away is not an error)."""
    (tmp_path / "c.txt").write_text("\n".join(["password", "dragon", "monkey", "123456", "qwerty"]) + "\n")
    ok("fit", tmp_path / "c.txt", "-o", tmp_path / "m.npz", "--order", "2")
    t0 = time.perf_counter()
    p = subprocess.Popen([sys.executable, "-m", "arenum.cli", "guesses", str(tmp_path / "m.npz")],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    lines = [p.stdout.readline() for _ in range(3)]
    p.stdout.close()
    rc = p.wait(timeout=60)
    assert time.perf_counter() - t0 < 30 and all(ln.endswith(b"\n") for ln in lines)
    assert rc == 0 and p.stderr.read() == b""
    p.stderr.close()


def test_guess_chunks_deepen_once_each_in_exact_order():
    """The stream over a real exact index (random models, fixed length and terminating, with and
    without ties): the lines are the brute-force order, from rank 0 and from ``start`` for ``count``;
    after the first chunk each chunk costs one deepening round (what the round made is served, not
    closed in on), and the index is never built far past the chunk planned (what is held stays
    within what was yielded and a quarter more)."""
    from arenum import AutoregressiveEnumerable
    from arenum.cli import stream
    from arenum.cli.load import Loaded
    from arenum.testing import RandomModel, brute_force

    for seed, term, ties in ((0, False, False), (1, True, False), (2, False, True), (3, True, True)):
        m = RandomModel(["a", "b", "c", "d", "e", "f"], seed=seed, ties=ties, eos="a" if term else None,
                        eos_boost=2.0)
        bf = brute_force(m.table, fixed_len=None if term else 5, eos="a" if term else None, cap=5)
        ar = AutoregressiveEnumerable(m, max_len=5, eos="a" if term else None, batch_next_logprobs=m.batch)
        tree, rounds = ar._tree, []
        deepen = tree.deepen
        tree.deepen = lambda *a, **k: (rounds.append(1), deepen(*a, **k))[1]
        got: list = []
        per_chunk, over = [], 0.0
        for items in stream.chunks(Loaded("t", ar, None, None), 0, None, lambda: len(got)):
            plan = len(got) + stream.chunk_size(len(got))
            per_chunk.append(len(rounds))
            rounds.clear()
            over = max(over, ar.seek_index().indexed / plan)
            got += items
        assert got == bf, (seed, term, ties)
        assert len(per_chunk) > 5 and max(per_chunk[1:]) <= 1, per_chunk  # one round a chunk after the first
        assert over <= 1.25, over
        ar._check()
        ar2 = AutoregressiveEnumerable(m, max_len=5, eos="a" if term else None, batch_next_logprobs=m.batch)
        part = [x for items in stream.chunks(Loaded("t", ar2, None, None), 700, 1500) for x in items]
        assert part == bf[700:2200]


def test_guesses_under_a_cap_smaller_than_the_first_chunk_still_stream():
    """A cap that the first chunk of 256 lines passes made ``guesses`` write nothing where ``top 10``
    answered (QA); the stream now closes in on the lines the cap allows, in brute-force order, and
    stops saying how far it got."""
    from arenum import AutoregressiveEnumerable
    from arenum.cli import stream
    from arenum.cli.common import CLIError
    from arenum.cli.load import Loaded
    from arenum.testing import RandomModel, brute_force

    m = RandomModel(["a", "b", "c", "d"], seed=6, eos="a", eos_boost=2.0)
    bf = brute_force(m.table, eos="a", cap=5)
    got: list = []
    with pytest.raises(CLIError, match=r"stopped at rank ([0-9,]+) after") as err:
        enum = AutoregressiveEnumerable(m, max_len=5, eos="a", max_prefixes=40)
        for items in stream.chunks(Loaded("t", enum, None, None), 0, None, lambda: len(got)):
            got += items
    assert 0 < len(got) < 256 and got == bf[: len(got)] and f"rank {len(got):,} " in str(err.value)


def test_guess_chunks_under_a_cap_get_as_far_as_slice():
    """Where the round planned for a chunk passes ``max_prefixes`` (``--max-forwards``), the stream
    closes in on one line at a time instead, so it stops about where ``slice`` itself would: its lines
    are the brute-force order, and the error names the rank reached."""
    from arenum import AutoregressiveEnumerable
    from arenum.cli import stream
    from arenum.cli.common import CLIError
    from arenum.cli.load import Loaded
    from arenum.testing import RandomModel, brute_force

    for term, cap in ((False, 1100), (True, 600)):
        m = RandomModel(["a", "b", "c", "d", "e", "f"], seed=5, eos="a" if term else None, eos_boost=2.0)
        bf = brute_force(m.table, fixed_len=None if term else 5, eos="a" if term else None, cap=5)

        def fresh():
            return AutoregressiveEnumerable(m, max_len=5, eos="a" if term else None, batch_next_logprobs=m.batch,
                                            max_prefixes=cap)

        lo, hi = 0, len(bf)  # the most lines one slice of a fresh enumerable reaches under the cap
        while lo < hi:
            mid = (lo + hi + 1) // 2
            try:
                fresh().slice(0, mid)
                lo = mid
            except BudgetExceeded:
                hi = mid - 1
        assert 256 < lo < len(bf), lo
        got: list = []
        with pytest.raises(CLIError, match=r"stopped at rank ([0-9,]+) after") as err:
            for items in stream.chunks(Loaded("t", fresh(), None, None), 0, None, lambda: len(got)):
                got += items
        assert got == bf[: len(got)] and f"rank {len(got):,} " in str(err.value)
        assert len(got) >= 0.9 * lo, (len(got), lo)


def test_slice_jsonl(model_path):
    model = NGramModel.load(model_path)
    bf = brute(model, 4)
    recs = [json.loads(ln) for ln in ok("slice", "2", "5", "-m", model_path, "--max-len", "4", "--jsonl").splitlines()]
    assert [(r["rank"], r["sequence"]) for r in recs] == [(2 + j, s) for j, (s, _) in enumerate(bf[2:7])]
    assert all(r["exact"] and r["command"] == "slice" for r in recs)
    assert [r["log_prob"] for r in recs] == pytest.approx([lp for _, lp in bf[2:7]], abs=1e-12)


# ------------------------------------------------------------------ 6. the guessing curve of a test set
def _test_set():
    return ["abc", "ab", "abc", "cab", "ccc", "zz", "a", "bbb", "cba"]


def test_guessing_curve_exact_against_brute_force():
    model = NGramModel.fit(CORPUS, order=3)
    e = model.enumerable(max_len=4)
    bf = brute(model, 4)
    rank = {s: sum(1 for _, x in bf if x > lp) for s, lp in bf}
    test = _test_set()
    seqs = [model.encode(s) if set(s) <= set("abc") else None for s in test]
    cur = guessing_curve(e, seqs, labels=test, name="m")
    assert isinstance(cur, GuessCurve) and cur.n == len(test) and cur.unrankable == 1 and len(cur.items) == 8
    for g in (1, 2, 3, 5, 10, 20, 39, 40, 1e6):
        want = sum(1 for s in test if s in rank and rank[s] + 1 <= g) / len(test)
        p = cur.at(g)
        assert p.exact and p.fraction == p.lo == p.hi == pytest.approx(want, abs=1e-15), g
    assert [p.guesses for p in cur.decades(1000)] == [1, 10, 100, 1000]
    assert math.isinf(cur.exact_until())
    doc = cur.as_dict(100)
    assert doc["lines"] == 9 and doc["unrankable"] == 1 and "error" in doc["items"][4]
    assert json.dumps(doc, allow_nan=True)


def test_an_unrankable_line_says_why():
    """A test line past the length cap was reported as "probability 0 under the model" (QA)."""
    model = NGramModel.fit(CORPUS, order=3)
    cur = guessing_curve(model.enumerable(max_len=4), [model.encode("abcabc"), model.encode("ab")], labels=["l", "s"])
    long, short = cur.items
    assert long.method == "unrankable" and "it has 7 tokens, 3 past the length cap 4" in long.error
    assert short.method != "unrankable"


def test_curve_points_stay_in_their_bands_past_the_cap():
    """Callback models (no finite-state tables: Monte Carlo bands, fractional ends) past a small cap,
    seeded trials: at every plotted count the point lies strictly inside a band of width, within
    [0, 1], the curve never falls, and exact_until is the last count at which the fraction is exact
    (QA: a point at 112% outside its band, a curve going down; exact_until one past the last exact)."""
    import random

    from arenum import AutoregressiveEnumerable
    from arenum.testing import RandomModel, brute_force

    bad = 0
    for seed in range(60):
        rng = random.Random(seed)
        V, L = rng.randint(2, 4), rng.randint(2, 5)
        rm = RandomModel(V, seed=seed, ties=rng.random() < 0.3)
        tr = brute_force(rm.table, eos=V - 1, cap=L)
        enum = AutoregressiveEnumerable(rm, max_len=L, max_prefixes=rng.choice([1, 2, 4, 10]), eos=V - 1)
        seqs = [rng.choice(tr)[0] for _ in range(rng.randint(1, 20))]
        cur = guessing_curve(enum, seqs, samples=rng.choice([100, 1000]), seed=seed)
        last = 0.0
        for p in cur.points(100, 8):
            assert 0.0 <= p.lo <= p.fraction <= p.hi <= 1.0, (seed, p)
            if p.hi > p.lo:
                assert p.lo < p.fraction < p.hi, (seed, p)
            assert p.fraction >= last - 1e-12, (seed, p, last)
            last = p.fraction
        eu = cur.exact_until()
        if math.isfinite(eu):
            bad += 1
            assert eu == 0 or cur.at(eu).exact, (seed, eu)
            assert not cur.at(eu + 1).exact, (seed, eu)
    assert bad > 10  # the trials reach past the cap


def test_guessing_curve_past_the_cap_is_flagged_and_bounded():
    model = NGramModel.fit(CORPUS, order=3)
    full = model.enumerable(max_len=6)
    capped = model.enumerable(max_len=6, max_prefixes=30)
    strings = ["".join(t) for n in range(6) for t in itertools.product("abc", repeat=n)]
    scores = {s: model.logprob(s) for s in strings}
    rank = {s: sum(1 for x in scores.values() if x > lp) for s, lp in scores.items()}
    test = ["abc", "ab", "ccccc", "bacba", "cabca", "a"]
    seqs = [model.encode(s) for s in test]
    exact = guessing_curve(full, seqs, labels=test)
    cur = guessing_curve(capped, seqs, labels=test, samples=2000, seed=1)
    assert any(not it.exact for it in cur.items) and any(it.exact for it in cur.items)
    for it in cur.items:
        true = rank[it.label]
        assert it.cert_lo <= true <= it.cert_hi  # certified
        assert it.rank_lo <= it.rank <= it.rank_hi and it.cert_lo <= it.rank_lo and it.rank_hi <= it.cert_hi
        if not it.exact:
            assert it.method != "exact"
    assert cur.exact_until() < math.inf
    for g in np.logspace(0, 4, 30):
        p, q = cur.at(g), exact.at(g)
        if p.exact:
            assert p.fraction == q.fraction
        assert p.lo <= p.fraction <= p.hi
        assert p.lo <= q.fraction <= p.hi  # the truth inside the band
        if p.hi > p.lo:  # the point strictly inside a band of width, the band named
            assert p.lo < p.fraction < p.hi and p.point_method == "expected_fraction"
            assert p.band in ("certified", "monte_carlo 95%", "certified + monte_carlo 95%") or "monte_carlo" in p.band
    for it in cur.items:
        if it.rank_lo < it.rank_hi:
            assert it.rank_lo < it.rank < it.rank_hi


def test_cli_eval_two_models(tmp_path, model_path):
    (tmp_path / "test.txt").write_text("\n".join(_test_set()) + "\n\n", encoding="utf-8")
    ok("fit", tmp_path / "test.txt", "-o", tmp_path / "m2.npz", "--order", "2")
    png, csv_path = tmp_path / "curve.png", tmp_path / "curve.csv"
    doc = json.loads(ok("eval", model_path, tmp_path / "test.txt", tmp_path / "m2.npz", "--max-len", "4",
                        "-o", png, "--csv", csv_path, "--max-guesses", "1000", "--json"))
    assert doc["lines"] == 9 and doc["blank_skipped"] == 1 and len(doc["models"]) == 2
    model = NGramModel.load(model_path)
    bf = brute(model, 4)
    rank = {s: sum(1 for _, x in bf if x > lp) for s, lp in bf}
    d0 = doc["models"][0]
    assert d0["unrankable"] == 1 and [p["guesses"] for p in d0["decades"]] == [1, 10, 100, 1000]
    for p in d0["decades"]:
        assert p["exact"] and p["fraction"] == sum(1 for s in _test_set() if s in rank and rank[s] < p["guesses"]) / 9
    assert png.read_bytes()[:8] == PNG_SIG and png.stat().st_size > 5000
    rows = csv_path.read_text().splitlines()
    assert rows[0] == "model,guesses,fraction,lo,hi,exact,band,point_method" and len(rows) > 40
    text = ok("eval", model_path, tmp_path / "test.txt", "--max-len", "4", "--max-guesses", "100")
    assert "guesses" in text and "100" in text and "unrankable" in text
    p = run("eval", model_path)
    assert p.returncode == 2 and b"the following arguments are required: TEST" in p.stderr
    # a store holds one model's tree: with two models it is refused, with one it is used and closed
    p = run("eval", model_path, tmp_path / "test.txt", tmp_path / "m2.npz", "--store", tmp_path / "st")
    assert p.returncode == 2 and b"--store" in p.stderr
    one = ok("eval", model_path, tmp_path / "test.txt", "--max-len", "4", "--store", tmp_path / "st", "--json")
    again = ok("eval", model_path, tmp_path / "test.txt", "--max-len", "4", "--store", tmp_path / "st", "--json")
    assert json.loads(one)["models"][0]["decades"] == json.loads(again)["models"][0]["decades"]


def test_cli_eval_releases_each_model_before_the_next(tmp_path, model_path, monkeypatch, capsys):
    """eval ranks with one model at a time: when a model is loaded, every model before it (its
    enumerable, tree and tables) is gone; on a terminal each model gets a line (start, done)."""
    import weakref

    from arenum.cli import evalcmd, main

    (tmp_path / "test.txt").write_text("\n".join(_test_set()) + "\n", encoding="utf-8")
    ok("fit", tmp_path / "test.txt", "-o", tmp_path / "m2.npz", "--order", "2")
    alive: list = []
    real = evalcmd.load_model

    def load(ns):
        assert all(w() is None for w in alive), "a model before this one is still held"
        m = real(ns)
        alive.append(weakref.ref(m.enum))
        return m

    class Bar:
        def __call__(self, d):
            pass

        def close(self):
            pass

    monkeypatch.setattr(evalcmd, "load_model", load)
    monkeypatch.setattr(evalcmd, "make_progress", lambda quiet: None if quiet else Bar())
    args = ["eval", str(model_path), str(tmp_path / "test.txt"), str(tmp_path / "m2.npz"), str(model_path),
            "--max-len", "4", "--max-forwards", "30"]
    assert main(args) == 0
    err = capsys.readouterr().err
    assert len(alive) == 3 and all(f"eval: model {k}/3" in err for k in (1, 2, 3)) and err.count("done,") == 3
    assert main(args + ["-q"]) == 0 and capsys.readouterr().err == ""


# ------------------------------------------------------------------ 10. version and help
def test_version_and_help_examples():
    out = ok("--version")
    assert out.startswith("arenum ")
    for cmd in ("fit", "rank", "guesses", "eval", "threshold", "slice"):
        h = ok(cmd, "--help")
        assert "examples:" in h and f"arenum {cmd}" in h, cmd
    h = ok("threshold", "--help")
    assert "1-based position" in h


def test_progress_shows_target_budget_and_eta():
    import io

    from arenum import cli

    class Tty(io.StringIO):
        def isatty(self):
            return True

    s = Tty()
    bar = cli.common._LineBar(s, delay=0.0)
    d = {"forwards": 1000, "prefixes": 1000, "level": 3, "level_done": 5, "level_todo": 10, "keep_bits": 22.5,
         "target_bits": 20.5, "known_prefixes": 50_000}
    bar(d)
    time.sleep(0.35)
    bar({**d, "forwards": 11_000, "prefixes": 11_000})
    out = s.getvalue()
    assert "target budget 20.5 bits" in out and ">= 50,000 prefixes" in out and "ETA " in out
    bar.close()
    # the tree reports the budget it is heading for
    m = NGramModel.fit(CORPUS * 50, order=3)
    seen = []
    e = m.enumerable(max_len=8, progress=seen.append)
    e.count(-12.0)
    assert seen and all(x["target_bits"] == pytest.approx(12.0 / math.log(2)) for x in seen)
    assert all(x["known_prefixes"] >= 1 for x in seen)


# ------------------------------------------------------------------ 3. position queries provably past the cap fail early
@pytest.mark.parametrize("term", [False, True])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_position_floor_is_a_lower_bound(term, seed):
    """Whatever the tree has seen, position_floor(n) never exceeds the forwards n positions really need."""
    from arenum import AutoregressiveEnumerable
    from arenum.exact.budget import position_floor
    from arenum.testing import RandomModel

    m = RandomModel(5, seed=seed, eos=0 if term else None, eos_boost=1.5)
    L = 6
    probe = AutoregressiveEnumerable(m, max_len=L, eos=0 if term else None)
    total = len(probe.slice(0, 10**9))
    full_forwards = probe.stats["forwards"]
    for n in (2, 10, 50, 300, total, total + 1, 10**6):
        fresh = AutoregressiveEnumerable(m, max_len=L, eos=0 if term else None)
        fresh.slice(0, n)
        need = fresh.stats["forwards"]
        tree = probe.seek_index().tree  # everything seen: the strongest the bound gets
        floor = position_floor(n, terminating=term, known_prefixes=tree.known_prefixes)
        assert floor <= need <= full_forwards, (n, floor, need)


def test_position_query_past_the_cap_fails_early_naming_the_fix():
    from arenum import AutoregressiveEnumerable
    from arenum.testing import RandomModel

    m = RandomModel(12, seed=4, eos=0, eos_boost=1.0)
    e = AutoregressiveEnumerable(m, max_len=8, eos=0, max_prefixes=2000)
    with pytest.raises(BudgetExceeded) as ex:
        e.unrank(10**20)
    msg = str(ex.value)
    assert "max_prefixes=2,000" in msg and "exact_limit" in msg and "--max-forwards" in msg
    assert e.stats["forwards"] <= 2000
    # the same query with an estimate allowed answers
    est = AutoregressiveEnumerable(m, max_len=8, eos=0, max_prefixes=2000, exact_limit=2000, estimate_samples=500)
    r = est.threshold(10**6)
    assert not r.exact and r.method != "exact"


def test_cli_budget_errors_name_the_cap_and_only_the_options_that_apply(model_path):
    for args in (["threshold", "1e30"], ["threshold", "1e4"], ["unrank", "99999999999999999999"],
                 ["unrank", "100000"], ["count", "--bits", "40"]):
        p = run(*args, "-m", model_path, "--max-forwards", "20", "--max-len", "12")
        err = p.stderr.decode()
        if args[1] in ("1e30", "99999999999999999999"):  # 3 letters and at most 12 tokens: fewer sequences
            assert p.returncode == 2 and "beyond the support" in err, err  # the certified count says so
            continue
        if args[0] in ("count", "threshold"):
            assert p.returncode == 0  # an n-gram's count and threshold are certified brackets past the cap
            continue
        # unrank gives no estimate: the cap that stopped it, and no --exact-limit advice
        assert p.returncode == 2 and "--max-forwards 20: raise it" in err and "--exact-limit" not in err, err
        assert "max_prefixes (command line" not in err  # the API hint is not repeated on the command line


# ------------------------------------------------------------------ 9. plot: marks
def test_plot_labels_never_overprint(tmp_path):
    from arenum.report import plot

    m = NGramModel.fit(CORPUS, order=2)
    e = m.enumerable(max_len=6)
    ex = plot.exact_curve(e, 200, 12)
    marks = []
    for s in ["ab", "abc", "ba", "bc", "ca", "cab", "a", "b", "c"]:  # close together: labels would collide
        r = e.rank(m.encode(s))
        marks.append(plot.Mark(s, r.log_prob, r.rank_lo, r.rank_hi, r.cumulative_lo, r.cumulative_hi))
    from matplotlib.text import Text

    fig = plot.draw_curves(ex, None, marks)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    for axis in fig.axes:
        boxes = [Text.get_window_extent(t, renderer) for t in axis.texts]
        assert len(boxes) == len(marks)
        for i, j in itertools.combinations(range(len(boxes)), 2):
            assert not boxes[i].overlaps(boxes[j]), (axis.get_title(), axis.texts[i].get_text(), axis.texts[j].get_text())
    plot.save_png(fig, tmp_path / "marks.png")


def test_plot_deep_mark_is_estimated_not_built(tmp_path, model_path):
    pytest.importorskip("matplotlib")
    common = ("-m", model_path, "--max-len", "10", "--max-rank", "30", "--points", "6", "--samples", "800")
    plain = json.loads(ok("plot", *common, "-o", tmp_path / "a.png", "--json"))
    deep = json.loads(ok("plot", *common, "-o", tmp_path / "b.png", "--mark", "ccccccccc", "--mark", "ab", "--json"))
    mk = {d["string"]: d for d in deep["marks"]}
    assert mk["ab"]["exact"] and not mk["ccccccccc"]["exact"] and mk["ccccccccc"]["confidence"] == 0.95
    assert deep["forwards_total"] <= plain["forwards_total"] + 9 * 800  # the draws only, no deeper exact build
    assert any("estimated" in n for n in deep["notes"])
    assert all(p["mass"] is not None and p["mass_lo"] <= p["mass"] <= p["mass_hi"] for p in deep["estimated"])
    exact = json.loads(ok("plot", *common, "-o", tmp_path / "c.png", "--mark", "ccccc", "--exact-marks", "--json"))
    assert exact["marks"][0]["exact"] and any("deepened the exact build" in n for n in exact["notes"])


def test_guessing_curve_with_exact_limit_estimates_keeps_certified_ends():
    model = NGramModel.fit(CORPUS, order=3)
    strings = ["".join(t) for n in range(6) for t in itertools.product("abc", repeat=n)]
    scores = {s: model.logprob(s) for s in strings}
    rank = {s: sum(1 for x in scores.values() if x > lp) for s, lp in scores.items()}
    # without its finite-state tables (which would certify every rank), the estimate path
    e = model.enumerable(max_len=6, exact_limit=30, estimate_samples=2000, finite_state=None)
    test = ["abc", "ab", "ccccc", "bacba", "cabca", "a"]
    cur = guessing_curve(e, [model.encode(s) for s in test], labels=test)
    assert any(it.method.startswith("monte_carlo") for it in cur.items)
    for it in cur.items:
        assert it.cert_lo <= rank[it.label] <= it.cert_hi
        assert it.cert_lo <= it.rank_lo <= it.rank <= it.rank_hi <= it.cert_hi
    for g in (1, 3, 10, 30):
        p = cur.at(g)
        truth = sum(1 for s in test if rank[s] + 1 <= g) / len(test)
        if p.exact:
            assert p.fraction == truth


def test_guesses_in_latin1(tmp_path):
    (tmp_path / "c.txt").write_bytes("caf\xe9\nab\n\u0101b\n".encode("utf-8"))
    ok("fit", tmp_path / "c.txt", "-o", tmp_path / "m.npz", "--order", "2")
    model = NGramModel.load(tmp_path / "m.npz")
    want = [model.decode(s) for s, _ in model.enumerable(max_len=4).slice(0, 10**6)]
    p = run("guesses", tmp_path / "m.npz", "--max-len", "4", "--encoding", "latin-1")
    assert p.returncode == 0
    got = p.stdout.split(b"\n")[:-1]
    keep = [s for s in want if "\u0101" not in s]
    assert got == [s.encode("latin-1") for s in keep] and b"\xe9" in got and len(keep) < len(want)
    assert p.stderr.decode() == f"arenum: note: {len(want) - len(keep):,} candidates left out: not encodable in latin-1\n"


# ------------------------------------------------------------------ 11. set-up
def test_make_refuses_old_python_before_anything(tmp_path):
    """``make demo`` with a Python older than 3.11 stops at the check: no venv, nothing downloaded."""
    import shutil

    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    shutil.copy(os.path.join(root, "Makefile"), tmp_path / "Makefile")
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import sys\nsys.version_info = (3, 10, 4, 'final', 0)\n")
    fake = tmp_path / "python3.10"
    fake.write_text(f"#!/bin/sh\nPYTHONPATH={site} exec {sys.executable} \"$@\"\n")
    fake.chmod(0o755)
    for target in ("demo", "test"):
        p = subprocess.run(["make", "-C", str(tmp_path), target, f"PY={fake}"], capture_output=True, timeout=60)
        err = p.stderr.decode()
        assert p.returncode != 0 and "arenum needs Python >= 3.11" in err and "is 3.10" in err, err
        assert not (tmp_path / ".venv").exists()
    ok_ = subprocess.run(["make", "-C", str(tmp_path), "check-python", f"PY={sys.executable}"], capture_output=True)
    assert ok_.returncode == 0
    # the demo's extra holds only what the demo needs: no torch, no transformers
    text = open(os.path.join(root, "pyproject.toml")).read()
    demo = next(ln for ln in text.splitlines() if ln.startswith("demo = "))
    assert "torch" not in demo and "transformers" not in demo and "matplotlib" in demo


def test_guess_chunks_are_paced_by_the_reader(model_path, tmp_path):
    """Each chunk after the first is a quarter of what the reader has taken (within 256 .. 262,144; past
    16,384 lines taken, 32 times its square root), so
    a reader that stops after N lines has cost the build of at most about 1.25 N positions; the order is the
    exact order whatever the pacing. The pipe's unread bytes say what was taken; a reader that has
    gone is noticed before the next build."""
    import os

    from arenum.cli import stream
    from arenum.cli.load import Loaded

    class Enum:
        def __init__(self):
            self.reads = []

        def slice(self, i, n):
            self.reads.append((i, n))
            return [((j,), -float(j)) for j in range(i, min(i + n, 5000))]

    e = Enum()
    m = Loaded.__new__(Loaded)
    m.enum = e
    taken = [0]
    got = []
    for items in stream.chunks(m, 0, None, lambda: taken[0]):
        got += items
        taken[0] = len(got) // 2  # a slow reader: half of what was written
    assert [s for s, _ in got] == [(j,) for j in range(5000)]
    sizes = [n for _, n in e.reads]
    assert sizes[0] == 256 and all(
        n == min(max(t // 4, 256), 1 << 18) for n, t in zip(sizes[1:], [sum(sizes[: k + 1]) // 2 for k in range(len(sizes))]))
    # past 16,384 lines taken, the share planned ahead shrinks (32 sqrt(taken)): 10,119 at 10^5, 32,000 at 10^6
    assert [stream.chunk_size(t) for t in (100, 16_384, 100_000, 10**6, 10**9)] == [256, 4096, 10_119, 32_000, 1 << 18]
    # a real pipe: what is unread is not taken; a closed reader raises BrokenPipeError
    r, w = os.pipe()
    try:
        out = os.fdopen(w, "wb", buffering=0)
        rd = stream.Reader(out)
        out.write(b"ab\n" * 100)
        rd.wrote(100, 300)
        assert rd.taken(wait=0.01) == 0
        os.read(r, 150)
        assert rd.taken(wait=0.01) == 50
        os.read(r, 150)
        assert rd.taken(wait=0.01) == 100
        out.write(b"cd\n" * 10)
        rd.wrote(10, 30)
        os.close(r)
        r = None
        with pytest.raises(BrokenPipeError):
            rd.taken(wait=0.01)
        # a reader that read everything and then went away (head -N with its N-th line in the last
        # chunk) is noticed too, before the next chunk is built
        r2, w2 = os.pipe()
        with os.fdopen(w2, "wb", buffering=0) as out2:
            rd2 = stream.Reader(out2)
            out2.write(b"ef\n" * 10)
            rd2.wrote(10, 30)
            assert os.read(r2, 30) == b"ef\n" * 10 and rd2.taken(wait=0.01) == 10
            os.close(r2)
            with pytest.raises(BrokenPipeError):
                rd2.taken(wait=0.01)
    finally:
        if r is not None:
            os.close(r)
        out.close()
    with open(tmp_path / "f.txt", "wb") as fh:
        assert stream.Reader(fh).taken() == 0  # a file: all taken


def test_a_curve_band_resting_on_an_estimate_is_not_called_certified():
    """An estimate's interval wholly above g places its line there by the estimate alone: the band
    at g says so (it said 'certified' with a zero-width band while the certified one was [0.5, 1])."""
    from arenum.report.curves import GuessCurve, RankedItem

    mc = RankedItem("a", 1, -5.0, rank=50.0, rank_lo=40.0, rank_hi=60.0, cert_lo=0.0, cert_hi=1000.0,
                    method="monte_carlo", exact=False, band="monte_carlo 95%")
    ex = RankedItem("b", 1, -1.0, rank=0.0, rank_lo=0.0, rank_hi=0.0, cert_lo=0.0, cert_hi=0.0,
                    method="exact", exact=True)
    gone = RankedItem("c", 1, -math.inf, rank=math.inf, rank_lo=math.inf, rank_hi=math.inf, cert_lo=math.inf,
                      cert_hi=math.inf, method="unrankable", exact=True, error="unknown symbol")
    c = GuessCurve("m", [mc, ex, gone])
    p = c.at(10)  # the estimate says rank 40..60: not within 10 guesses; certified, it may be
    assert (p.lo, p.hi, p.exact) == (1 / 3, 1 / 3, False) and p.band == "monte_carlo 95%"
    assert c.at(2000).exact and c.at(2000).band == "exact"  # past every certified end
    q = c.at(50)
    assert "monte_carlo 95%" in q.band and q.lo < q.fraction < q.hi
    assert c.exact_lines == 1 and c.unrankable == 1  # the unrankable line is not 'ranked exactly'
    cert = RankedItem("d", 1, -5.0, rank=31.0, rank_lo=0.0, rank_hi=1000.0, cert_lo=0.0, cert_hi=1000.0,
                      method="certified", exact=False, band="certified")
    assert GuessCurve("m", [cert, ex]).at(10).band == "certified"
