"""The comparisons of ``arenum eval`` (``arenum.report.compare``): labels, the min-auto curve against
brute-forced ranks of small n-grams, reference curves from CSV, SVG/PDF output and the percent axis."""
from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest

from arenum import cli
from arenum.models import NGramModel
from arenum.report import draw_guessing_curves, guessing_curve, min_auto, read_reference_csv, reference_curve

MAX_LEN = 5
WORDS = ["".join(t) for n in (2, 3) for t in itertools.product("abcd", repeat=n)]
TEST = ["abcd", "dcba", "aaaa", "abca", "ddd", "bad", "cab", "ab", "dd", "bad", "cbad", "e1", "abcdab"]


def _train() -> list[str]:
    rng = np.random.default_rng(0)
    return [w for w in WORDS for _ in range(int(rng.integers(1, 4)))]


def _models() -> list[NGramModel]:
    return [NGramModel.fit(_train(), order=k) for k in (2, 3, 4)]


def _true_ranks(model: NGramModel) -> dict[str, float]:
    """Brute force: every string of the support (lengths 0 .. MAX_LEN - 1 before EOS), its rank."""
    strings = ["".join(t) for n in range(MAX_LEN) for t in itertools.product("abcd", repeat=n)]
    s = np.array([model.logprob(x) for x in strings])
    out = {}
    for line in TEST:
        if set(line) <= set("abcd") and len(line) < MAX_LEN:
            out[line] = float((s > model.logprob(line)).sum())
        else:
            out[line] = math.inf  # unknown character or past the length cap: never guessed
    return out


def _curves(models, cap):
    out = []
    for k, m in enumerate(models):
        e = m.enumerable(max_len=MAX_LEN, max_prefixes=cap)
        seqs = [m.encode(x) if set(x) <= set("abcd") and len(x) < MAX_LEN else None for x in TEST]
        out.append(guessing_curve(e, seqs, labels=TEST, name=f"m{k}", samples=300, seed=1))
    return out


@pytest.mark.parametrize("cap", [None, 12, 40])
def test_min_auto_is_each_lines_smallest_brute_forced_guess_number(cap):
    models = _models()
    truth = [_true_ranks(m) for m in models]
    curves = _curves(models, cap)
    ma = min_auto(curves)
    assert ma.kind == "min_auto" and ma.n == len(TEST) and ma.labels() == TEST
    for j, it in enumerate(ma.line_items()):
        want = min(t[TEST[j]] for t in truth)
        if math.isinf(want):
            assert it.method == "unrankable" and it.exact
            continue
        assert it.cert_lo <= want <= it.cert_hi  # the combined bracket holds the true minimum
        assert it.rank_lo <= it.rank <= it.rank_hi
        # the ends are the minima of the curves' ends
        ends = [c.line_items()[j] for c in curves]
        assert it.cert_lo == min(e.cert_lo for e in ends) and it.cert_hi == min(e.cert_hi for e in ends)
        if it.exact:
            assert it.rank == want
        elif it.rank_lo < it.rank_hi:
            assert it.rank_lo < it.rank < it.rank_hi  # never a bound as the point
    if cap is None:
        assert all(it.exact for it in ma.items)
    for g in (1, 2, 5, 10, 30, 100, 300, 1000):
        want = sum(1 for line in TEST if min(t[line] for t in truth) + 1 <= g) / len(TEST)
        p = ma.at(g)
        assert p.lo - 1e-12 <= want <= p.hi + 1e-12
        if p.exact:
            assert p.fraction == pytest.approx(want)
            assert p.fraction >= max((c.at(g).fraction for c in curves if c.at(g).exact), default=0.0) - 1e-12
    if cap is not None:
        assert not all(it.exact for c in curves for it in c.items)  # the cap forced brackets somewhere


def test_min_auto_refuses_curves_of_other_lines():
    models = _models()[:1]
    a = _curves(models, None)[0]
    ref, _ = reference_curve({"abcd": 3}, TEST[:-1], "ref")
    with pytest.raises(ValueError, match="same test lines"):
        min_auto([a, ref])


def test_reference_csv_is_parsed_and_its_curve_counts_the_test_lines(tmp_path):
    f = tmp_path / "ref.csv"
    f.write_text("Password,Guess_Number\nabcd,3\ndcba,1\nbad,\nnot-a-test-line,5\n\"a,b\",7\ncab,inf\nab,1e3\n",
                 encoding="utf-8")
    g = read_reference_csv(f)
    assert g == {"abcd": 3.0, "dcba": 1.0, "bad": math.inf, "not-a-test-line": 5.0, "a,b": 7.0, "cab": math.inf,
                 "ab": 1000.0}
    cur, ignored = reference_curve(g, TEST, "ref")
    assert ignored == 2 and cur.kind == "reference" and cur.n == len(TEST)
    for k in (1, 3, 999, 1000, 10**6):
        want = sum(1 for line in TEST if g.get(line, math.inf) <= k) / len(TEST)
        p = cur.at(k)
        assert p.exact and p.fraction == pytest.approx(want)
    assert cur.unrankable == len(TEST) - 3
    # no header: the first two columns
    f2 = tmp_path / "plain.csv"
    f2.write_text("abcd,3\ndcba,1\n", encoding="utf-8")
    assert read_reference_csv(f2) == {"abcd": 3.0, "dcba": 1.0}


@pytest.mark.parametrize("text, why", [
    ("", "no rows"),
    ("who,what\nabcd,3\n", "names no password column"),
    ("password,guess_number\nabcd,three\n", "row 2: guess number 'three' is not a number"),
    ("password,guess_number\nabcd,0\n", "below 1"),
    ("password,guess_number\nabcd,3\nabcd,4\n", "listed twice"),
    ("password,guess_number\nabcd\n", "row 2 has 1 column"),
])
def test_a_bad_reference_file_is_refused_in_one_line(tmp_path, text, why):
    f = tmp_path / "bad.csv"
    f.write_text(text, encoding="utf-8")
    with pytest.raises(ValueError, match=why) as err:
        read_reference_csv(f)
    assert "\n" not in str(err.value) and str(f) in str(err.value)
    f.write_bytes(b"password,guess_number\ncaf\xe9,3\n")
    with pytest.raises(ValueError, match="not UTF-8"):
        read_reference_csv(f)


def test_the_plot_has_a_percent_axis_and_explains_the_exact_marks():
    curves = _curves(_models(), 12)
    fig = draw_guessing_curves(curves + [min_auto(curves)], max_guesses=1e4)
    ax = fig.axes[0]
    assert "%" in ax.get_ylabel()
    assert ax.yaxis.get_major_formatter()(0.5, 0) == "50%"
    labels = ax.get_legend_handles_labels()[1]
    assert any("exact up to" in lb and "dotted" in lb for lb in labels)
    assert any(lb.startswith("min-auto") for lb in labels)


def _eval(capsys, *argv) -> tuple[int, str, str]:
    rc = cli.main(["eval", *map(str, argv)])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_cli_labels_min_auto_reference_and_svg_pdf(tmp_path, capsys):
    paths = []
    for k, m in enumerate(_models()[:2]):
        paths.append(tmp_path / f"order{k + 2}.npz")
        m.save(paths[-1])
    test = tmp_path / "test.txt"
    test.write_text("\n".join(TEST) + "\n", encoding="utf-8")
    ref = tmp_path / "other.csv"
    ref.write_text("password,guess_number\nabcd,2\nzzz,9\n", encoding="utf-8")
    base = [paths[0], test, paths[1], "--max-len", MAX_LEN, "--max-forwards", 30, "--max-guesses", 1e4, "-q"]
    rc, out, err = _eval(capsys, *base, "--label", "bigram", "--label", "trigram", "--min-auto",
                         "--reference", f"{ref}:PCFG", "--csv", tmp_path / "c.csv", "-o", tmp_path / "c.svg")
    assert rc == 0, err
    head = next(ln for ln in out.splitlines() if ln.strip().startswith("guesses"))
    assert head.split() == ["guesses", "bigram", "trigram", "PCFG", "min-auto"]
    assert "PCFG: guess numbers from" in out and "1 of its passwords are not test lines (ignored)" in out
    assert "min of the lower ends and the min of the upper ends" in out
    rows = (tmp_path / "c.csv").read_text().splitlines()
    assert {r.split(",")[0] for r in rows[1:]} == {"bigram", "trigram", "PCFG", "min-auto"}
    svg = (tmp_path / "c.svg").read_bytes()
    assert len(svg) > 1000 and b"<svg" in svg[:2000]
    rc, out, err = _eval(capsys, *base, "-o", tmp_path / "c.pdf", "--json")
    assert rc == 0, err
    pdf = (tmp_path / "c.pdf").read_bytes()
    assert pdf.startswith(b"%PDF") and len(pdf) > 1000
    doc = json.loads(out)
    assert [m["model"] for m in doc["models"]] == ["order2", "order3"]  # the file stems by default
    assert [m["file"] for m in doc["models"]] == [str(p) for p in paths]
    # refusals, each one line before any model work
    for extra, why in ((["--label", "one"], "--label given 1 time(s) for 2 model(s)"),
                       (["-o", tmp_path / "c.jpg"], ".png, .svg or .pdf"),
                       (["--reference", tmp_path / "missing.csv"], "no such file"),
                       (["--reference", test], "names no password column")):
        rc, out, err = _eval(capsys, *base, *extra)
        assert rc == 2 and why in err and err.count("\n") == 1, err


def test_eval_interrupted_closes_its_store_keeping_every_table(tmp_path, capsys, monkeypatch, store_closes):
    """Ctrl-C in ``eval --store`` closed the store as a finished run does, cutting its tables, so the
    run again scored the saved prefixes a second time: it keeps them now, as every other command."""
    import arenum.report as report
    seen = store_closes
    path = tmp_path / "m.npz"
    _models()[1].save(path)
    test = tmp_path / "test.txt"
    test.write_text("\n".join(TEST) + "\n", encoding="utf-8")
    base = [path, test, "--max-len", MAX_LEN, "--max-forwards", 300, "--store", tmp_path / "st", "-q"]
    rc, _, err = _eval(capsys, *base)
    assert rc == 0, err
    real_curve = report.guessing_curve

    def interrupted(enum, *a, **kw):
        enum.count(-6.0)  # some work, then Ctrl-C
        raise KeyboardInterrupt

    monkeypatch.setattr(report, "guessing_curve", interrupted)
    rc, _, err = _eval(capsys, *base)
    assert rc == 130 and "interrupted" in err
    assert seen == [True, False]
    monkeypatch.setattr(report, "guessing_curve", real_curve)


def test_eval_refuses_a_bad_later_model_before_ranking_the_first(tmp_path, capsys, monkeypatch):
    """A missing or foreign second model was found only after the first had ranked every line
    (minutes at 3,000 lines): the models are checked first, each then loaded in its turn."""
    import arenum.report as report

    ranked = []
    monkeypatch.setattr(report, "guessing_curve", lambda *a, **k: ranked.append(1))
    path = tmp_path / "m.npz"
    _models()[0].save(path)
    test = tmp_path / "test.txt"
    test.write_text("\n".join(TEST) + "\n", encoding="utf-8")
    (tmp_path / "notes.txt").write_text("not a model\n", encoding="utf-8")
    for bad, why in ((tmp_path / "nosuch.npz", "does not exist"), (tmp_path / "notes.txt", "not an arenum"),
                     ("hf:" + str(tmp_path / "nofolder"), "does not exist")):
        rc, out, err = _eval(capsys, path, test, bad, "--max-len", MAX_LEN, "-q")
        assert rc == 2 and why in err and err.count("\n") == 1 and not ranked
