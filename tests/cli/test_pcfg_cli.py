"""The command line with PCFG models (``fit --kind pcfg``, every query loading the file) and
``--lowercase`` / ``--unknown unk`` on a lowercase list, checked against brute force over strings."""
from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

from arenum import cli
from arenum.models import PCFGModel
from arenum.testing import brute_force

LN2 = math.log(2.0)
LINES = {"pass123": 3, "word123": 1, "pass1": 2, "abc!": 2, "dragon": 4, "drag0n": 1, "ab!1": 1, "1234": 2}
LOWER = ["troubador", "tr0ub4dor&3", "password1", "dragon", "abc123", "letmein"]


def main(capsys, *argv, status=0):
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert code == status, err
    if status == 2:
        assert err.startswith("arenum: error: ") and err.count("\n") == 1 and out == ""
        return err
    return out if status == 0 else out + err


def jmain(capsys, *argv):
    return json.loads(main(capsys, *argv, "--json"))


@pytest.fixture()
def files(tmp_path):
    weighted = tmp_path / "counts.txt"
    weighted.write_bytes("".join(f"{c}\t{s}\n" for s, c in LINES.items()).encode("latin-1") + b"x\n")
    lower = tmp_path / "lower.txt"
    lower.write_text("\n".join(LOWER) + "\n")
    mixed = tmp_path / "mixed.txt"
    mixed.write_text("\n".join(["Troubador", "TR0UB4DOR&3", "password1", "Dragon"]) + "\n")
    return tmp_path, weighted, lower, mixed


def truth() -> dict[str, float]:
    """Every string of the PCFG with its score, by brute force over the model's rows."""
    m = PCFGModel.fit(list(LINES), list(LINES.values()))
    rows = lambda p: tuple(a.tolist() for a in m.next_logprobs(p))
    return {m.decode(q): lp for q, lp in brute_force(rows, eos=m.eos, cap=m.max_len)}


def test_fit_pcfg_and_every_query(capsys, files):
    d, weighted, _, _ = files
    model = d / "pcfg.npz"
    doc = jmain(capsys, "fit", weighted, "-o", model, "--kind", "pcfg", "--weighted", "--encoding", "latin-1")
    assert doc["kind"] == "pcfg" and doc["n_sequences"] == sum(LINES.values()) and doc["skipped"]["malformed"] == 1
    t = truth()
    scores = sorted(t.values(), reverse=True)
    for bits in [1.5, 3.0, 5.0, 8.0]:
        c = jmain(capsys, "count", "--bits", bits, "-m", model)
        assert c["count"] == sum(1 for v in scores if v >= -bits * LN2) and c["exact"]
        mass = jmain(capsys, "mass", "--bits", bits, "-m", model)
        true_mass = sum(math.exp(v) for v in scores if v >= -bits * LN2)
        assert mass["mass_lo"] <= true_mass * (1 + 1e-12) and true_mass * (1 - 1e-12) <= mass["mass_hi"]
    for k in [1, 4, len(scores)]:
        r = jmain(capsys, "threshold", k, "-m", model)
        assert r["log_prob"] == scores[k - 1] and t[r["sequence"]] == scores[k - 1]
    got = jmain(capsys, "slice", 0, len(scores), "-m", model)
    seqs = [x["sequence"] for x in got["items"]]
    assert sorted(seqs) == sorted(t) and [t[s] for s in seqs] == scores
    out = main(capsys, "guesses", model)
    assert out.splitlines() == seqs  # raw candidates, strings in exact order
    for s in ["pass123", "dragon", "word1", "drag1"]:
        r = jmain(capsys, "rank", s, "-m", model)
        assert r["rank"] == sum(1 for v in scores if v > t[s]) and r["exact"]
    err = main(capsys, "rank", "Pass1", "-m", model, status=1)
    assert "probability 0" in err
    nuc = jmain(capsys, "nucleus", 0.5, "-m", model)
    acc, n = 0.0, 0
    while acc < 0.5:
        acc += math.exp(scores[n])
        n += 1
    assert nuc["size"] == n
    test = d / "test.txt"
    test.write_text("dragon\npass1\nzzz\n")
    ev = jmain(capsys, "eval", model, test)["models"][0]
    assert ev["unrankable"] == 1 and ev["lines"] == 3 and ev["decades"][0]["exact"]


def test_fit_pcfg_refuses_ngram_options(capsys, files):
    d, weighted, _, _ = files
    err = main(capsys, "fit", weighted, "-o", d / "x.npz", "--kind", "pcfg", "--order", 3, status=2)
    assert "--order applies to --kind ngram only" in err
    assert not (d / "x.npz").exists()
    (d / "bad.npz").write_bytes(b"PK\x03\x04" + b"\0" * 50)
    err = main(capsys, "top", 3, "-m", d / "bad.npz", status=2)
    assert "not a valid arenum n-gram model file" in err


def test_damaged_pcfg_file_one_line(capsys, files):
    d, weighted, _, _ = files
    model = d / "pcfg.npz"
    main(capsys, "fit", weighted, "-o", model, "--kind", "pcfg", "--weighted", "--encoding", "latin-1")
    m = PCFGModel.load(model)
    import numpy as np
    import zipfile, io
    with zipfile.ZipFile(model) as zf:
        meta = json.loads(str(np.load(io.BytesIO(zf.read("meta.npy")))[()]))
        sc = np.load(io.BytesIO(zf.read("structure_counts.npy")))
        gc = np.load(io.BytesIO(zf.read("string_counts.npy")))
    meta["n_sequences"] += 5
    np.savez(d / "edited.npz", meta=np.array(json.dumps(meta)), structure_counts=sc, string_counts=gc)
    err = main(capsys, "count", "--bits", 3, "-m", d / "edited.npz", status=2)
    assert "not a valid arenum PCFG model file" in err and "add up to" in err
    assert m.n_sequences == sum(LINES.values())


@pytest.mark.parametrize("kind", ["ngram", "pcfg"])
def test_lowercase_and_unknown_unk(capsys, files, kind):
    d, _, lower, mixed = files
    model = d / f"{kind}.npz"
    main(capsys, "fit", lower, "-o", model, "--kind", kind)
    err = main(capsys, "rank", "Tr0ub4dor&3", "-m", model, status=1)
    assert ("unknown symbol 'T'" in err and "--lowercase" in err) if kind == "ngram" else "probability 0" in err
    low = jmain(capsys, "rank", "Tr0ub4dor&3", "-m", model, "--lowercase")
    same = jmain(capsys, "rank", "tr0ub4dor&3", "-m", model)
    assert low["rank"] == same["rank"] and low["log_prob"] == same["log_prob"]
    # fitted with --lowercase: stored in the file, queries lowercase without being told
    stored = d / f"{kind}-low.npz"
    doc = jmain(capsys, "fit", mixed, "-o", stored, "--kind", kind, "--lowercase")
    assert doc["lowercase"] is True
    a = jmain(capsys, "rank", "Tr0ub4dor&3", "-m", stored)
    b = jmain(capsys, "rank", "tr0ub4dor&3", "-m", stored)
    assert a["rank"] == b["rank"] and a["log_prob"] == b["log_prob"] and math.isfinite(a["log_prob"])
    if kind == "ngram":  # the other way: reserve <unk> for the unseen capitals
        unk = d / "unk.npz"
        main(capsys, "fit", lower, "-o", unk, "--unknown", "unk")
        r = jmain(capsys, "rank", "Tr0ub4dor&3", "-m", unk, "--rank-exact-limit", "5e6")  # exact, not the DP's
        assert math.isfinite(r["log_prob"]) and r["exact"]


def test_subprocess_fit_pcfg_and_rank(files):
    d, weighted, _, _ = files
    model = d / "p.npz"
    run = lambda *a: subprocess.run([sys.executable, "-m", "arenum.cli", *map(str, a)], capture_output=True,
                                    timeout=120)
    p = run("fit", weighted, "-o", model, "--kind", "pcfg", "--weighted", "--encoding", "latin-1")
    assert p.returncode == 0, p.stderr
    p = run("rank", "dragon", "-m", model)
    assert p.returncode == 0 and b"exact" in p.stdout, p.stderr
