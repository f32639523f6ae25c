"""The command-line transcripts in README.md and docs/*.md are real output (``scripts/transcripts.py``).

The script reruns every ``$ arenum ...`` line of every transcript in a scratch folder holding the
files the docs use, and ``--check`` fails where the docs and the real output differ beyond timings.
"""
from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "transcripts.py"


def _module():
    spec = importlib.util.spec_from_file_location("transcripts", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_normalize_ignores_timings_only():
    t = _module()
    a = 'cost       275,947 forwards (1.23 s)\n{"seconds": 0.51, "count": 7}\nETA 3 min 5 s, done in 2.0 s'
    b = 'cost       275,947 forwards (9.9 s)\n{"seconds": 12.0, "count": 7}\nETA 2 s, done in 41.5 s'
    assert t.normalize(a) == t.normalize(b)
    assert t.normalize(a) != t.normalize(a.replace("275,947", "275,948"))  # a count is not a timing
    assert t.normalize(a) != t.normalize(a.replace('"count": 7', '"count": 8'))


def test_transcripts_are_found_and_commands_parsed():
    t = _module()
    found = [(p, b) for p in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))] for *_, b in t.transcripts(p)]
    assert len(found) >= 20
    assert all(t.commands(b) for _, b in found)


def test_docs_transcripts_match_real_output():
    """Every transcript, rerun: the docs say what the command prints (timings aside)."""
    p = subprocess.run([sys.executable, str(SCRIPT), "--check"], capture_output=True, text=True, timeout=3000,
                       cwd=ROOT)
    assert p.returncode == 0, p.stdout[-6000:] + p.stderr[-2000:]


def test_the_fork_server_runs_commands_as_the_script_would(tmp_path):
    """``arenum`` through the fork server prints, fails and pipes as ``python -m arenum.cli`` does."""
    t = _module()
    (tmp_path / "notes.txt").write_text("not a model\n", encoding="utf-8")
    cmds = ["arenum --version", "echo $?", "arenum top 3 -m notes.txt", "echo $?",
            "printf 'a\\n' | arenum rank - -m notes.txt | head -1", "arenum nucleus 1.5 -m notes.txt"]
    outs = {}
    try:
        for sub in (True, False):
            with t.Server(tmp_path, sub) as server:
                t.SHELL["line"] = server.shell
                outs[sub] = t.run(cmds, tmp_path)
    finally:
        t.SHELL["line"] = None
    assert outs[False] == outs[True]
    assert outs[True][0].startswith("arenum ") and outs[True][1] == "0" and outs[True][3] == "2"
    assert "arenum: error:" in outs[True][2] and "arenum: error:" in outs[True][5]
