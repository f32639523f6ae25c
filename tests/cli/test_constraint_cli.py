"""The constraint flags on the command line: the same answers as the Python API under the same
constraint (itself checked against brute force in tests/constraints), the constraint named in
the output, one-line errors."""
from __future__ import annotations

import json
import math

import pytest

from arenum.cli import main
from arenum.constraints import Policy, Regex, build
from arenum.models import NGramModel

CORPUS = ["abc1", "ab12", "a1!", "Bca", "cab9", "abc", "b!", "ca1", "aAb", "bb", "c1c", "abca", "bac", "ab"]


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    d = tmp_path_factory.mktemp("ccli")
    m = NGramModel.fit(CORPUS, order=2)
    path = d / "m.npz"
    m.save(path)
    return m, str(path), d


def cli(capsys, *args):
    code = main([str(a) for a in args])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("flags, make", [
    (["--min-length", "3", "--classes", "2"], lambda: Policy(min_len=3, min_classes=2)),
    (["--regex", "[a-c]+[0-9]"], lambda: Regex("[a-c]+[0-9]")),
    (["--max-length", "3", "--require", "digit"], lambda: Policy(max_len=3, required=["digit"])),
])
def test_count_threshold_unrank_slice_rank_match_the_api(capsys, model, flags, make):
    m, path, _ = model
    ar = m.enumerable(max_len=6, constraint=make())
    n = int(ar.count(-13.0))
    code, out, _ = cli(capsys, "count", "-m", path, "--max-len", 6, "--min-log-prob", -13.0, "--json", *flags)
    doc = json.loads(out)
    assert code == 0 and doc["count"] == n and doc["constraint"] == ar.constraint.name
    code, out, _ = cli(capsys, "count", "-m", path, "--max-len", 6, "--min-log-prob", -13.0, *flags)
    assert out.splitlines()[0] == f"constraint: {ar.constraint.name} (only the sequences it accepts are counted)"
    seqs = [(m.decode(q), s) for q, s in ar.slice(0, 4)]
    code, out, _ = cli(capsys, "slice", "-m", path, "--max-len", 6, 0, 4, "--json", *flags)
    got = json.loads(out)
    assert [x["sequence"] for x in got["items"]] == [s for s, _ in seqs]
    code, out, _ = cli(capsys, "threshold", "-m", path, "--max-len", 6, 2, "--json", *flags)
    assert json.loads(out)["log_prob"] == pytest.approx(float(ar.threshold(2)), abs=1e-12)
    code, out, _ = cli(capsys, "unrank", "-m", path, "--max-len", 6, 1, "--json", *flags)
    assert json.loads(out)["sequence"] == seqs[1][0]
    code, out, _ = cli(capsys, "rank", "-m", path, "--max-len", 6, seqs[2][0], "--json", *flags)
    assert json.loads(out.splitlines()[0])["rank"] == ar.rank(m.encode(seqs[2][0])).rank
    code, out, err = cli(capsys, "guesses", path, "--max-len", 6, "--count", 4, *flags)
    assert out.splitlines() == [s for s, _ in seqs]
    assert f"constraint {ar.constraint.name}" in err
    code, out, err = cli(capsys, "slice", "-m", path, "--max-len", 6, 0, 4, "--jsonl", *flags)
    lines = [json.loads(x) for x in out.splitlines()]  # every stdout line is JSON (a pipe to jq)
    assert code == 0 and [x["sequence"] for x in lines] == [s for s, _ in seqs]
    assert all(x["constraint"] == ar.constraint.name for x in lines)
    assert f"under the constraint {ar.constraint.name}" in err


def test_policy_blocklist_and_errors(capsys, model, tmp_path):
    m, path, _ = model
    block = tmp_path / "block.txt"
    block.write_text("abc1\nab12\n")
    c = build(policy="basic8", blocklist=str(block))
    assert c.name.startswith("basic8 & blocklist(block.txt")
    code, out, err = cli(capsys, "rank", "-m", path, "abc1", "--policy", "basic8")
    assert code != 0 and "outside the support" in err and "basic8" in err
    code, out, err = cli(capsys, "count", "-m", path, "--bits", 10, "--regex", "a(")
    assert code == 2 and err.startswith("arenum: error: constraint: pattern 'a(' cannot be compiled")
    code, out, err = cli(capsys, "count", "-m", path, "--bits", 10, "--blocklist", str(tmp_path / "nope"))
    assert code == 2 and "--blocklist" in err
    code, out, err = cli(capsys, "count", "-m", path, "--bits", 10, "--min-length", 5, "--max-length", 3)
    assert code == 2 and "--max-length 3 is below --min-length 5" in err
    for flag, value, why in [("--classes", 5, "--classes must be in 0..4, got 5"), ("--classes", "x", "must be an integer"),
                             ("--min-length", -3, "--min-length must be >= 0, got -3"),
                             ("--max-length", 0, "--max-length must be >= 1, got 0")]:
        with pytest.raises(SystemExit) as e:  # a traceback before
            cli(capsys, "count", "-m", path, "--bits", 10, flag, value)
        err = capsys.readouterr().err
        assert e.value.code == 2 and why in err and len(err.strip().splitlines()) == 1, err
    # blocklisted strings are gone, every other rank drops by the listed ones above it
    plain = m.enumerable(max_len=5)
    under = m.enumerable(max_len=5, constraint=build(blocklist=str(block)))
    for w in ("abc", "ca1", "bb"):
        above = sum(1 for b in ("abc1", "ab12") if plain.log_density(m.encode(b)) > plain.log_density(m.encode(w)))
        assert under.rank(m.encode(w)).rank == plain.rank(m.encode(w)).rank - above


def test_eval_under_a_policy(capsys, model, tmp_path):
    m, path, _ = model
    test = tmp_path / "test.txt"
    test.write_text("abc1\nab\ncab9\n")
    code, out, err = cli(capsys, "eval", path, str(test), "--max-len", 6, "--min-length", 4, "--json")
    doc = json.loads(out)
    assert code == 0 and doc["constraint"] == "policy(min_len=4)"
    assert "outside the support" in json.dumps(doc)
