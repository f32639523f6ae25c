#!/usr/bin/env python
"""Benchmark arenum.models.hf: enum.threshold(R) on a distilGPT-2-shaped model with random weights.

Three ways of feeding the core the same model:

  (a) naive  - ``next_logprobs`` only: one forward over prompt+prefix per prefix (no batch callback)
  (b) padded - batched full-prefix forwards (``kv_reuse=False``; a call's prefixes all have one
               length, so the batches need no padding tokens, and no cache is used at all)
  (c) kv     - the level-wise KV engine (one token of compute per prefix whose parent is cached)

plus the bare model: the batched full-prefix forward of exactly the prefixes (c) scored, with no
log-softmax and no core, so the overhead of each path is visible.  Random GPT-2 weights give an
almost uniform next-token distribution (~15.6 bits), so the logits are scaled (``logit_scale``,
found by bisection) to make the next-token entropy about ``--target-bits`` (4 by default); the
entropy reached is measured and printed.

Nothing is downloaded.  Full run: ``python benchmarks/bench_hf.py`` (slow on a small CPU: a 6-layer,
768-wide model, R = 10**5, max_len 2 and 3).  Small run: ``--quick`` (R = 10**3, 2 layers).
If (a) would take too long it is measured at a smaller rank (``--naive-rank``) and its time at R
is extrapolated from its per-prefix cost and the number of prefixes (c) scored at R; such rows
are labelled ``extrapolated``.  Results: a table on stdout, JSON in benchmarks/results/hf.json.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import resource
import signal
import sys
import time
from pathlib import Path

import numpy as np
import torch
import transformers

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from arenum.models.hf import CausalLMOracle  # noqa: E402


def build_model(layers: int, seed: int, vocab: int, width: int, heads: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    cfg = transformers.GPT2Config(
        vocab_size=vocab, n_positions=64, n_embd=width, n_layer=layers, n_head=heads,
        bos_token_id=vocab - 1, eos_token_id=vocab - 1,
    )
    return transformers.GPT2LMHeadModel(cfg).eval()


def entropy_bits(logits: torch.Tensor, scale: float) -> np.ndarray:
    lp = torch.log_softmax(logits.double() * scale, -1)
    return (-(lp.exp() * lp).sum(-1) / math.log(2)).numpy()


def calibrate_scale(oracle: CausalLMOracle, target_bits: float, seed: int, n_ctx: int = 32) -> dict:
    """Bisection on logit_scale so the mean next-token entropy over sample contexts is target_bits."""
    rng = np.random.default_rng(seed)
    V = oracle.V
    contexts = [[]] + [list(rng.integers(0, V, size=int(rng.integers(1, 3)))) for _ in range(n_ctx - 1)]
    model = oracle.model
    rows = []
    with torch.inference_mode():
        for c in contexts:
            ids = torch.tensor([oracle.prompt_ids + [int(t) for t in c]], device=oracle.device)
            rows.append(model(ids, use_cache=False).logits[0, -1].float().cpu())
    logits = torch.stack(rows)
    lo, hi = 1e-3, 1e4
    for _ in range(80):
        mid = math.sqrt(lo * hi)
        if entropy_bits(logits, mid).mean() > target_bits:
            lo = mid
        else:
            hi = mid
    scale = math.sqrt(lo * hi)
    h = entropy_bits(logits, scale)
    return {
        "logit_scale": scale,
        "entropy_bits_mean": float(h.mean()),
        "entropy_bits_min": float(h.min()),
        "entropy_bits_max": float(h.max()),
        "entropy_bits_empty_prefix": float(h[0]),
        "entropy_bits_unscaled_mean": float(entropy_bits(logits, 1.0).mean()),
        "contexts": len(contexts),
    }


class Recorder:
    """Wraps an oracle's callbacks to count (and optionally keep) the prefixes the core asks for."""

    def __init__(self, oracle: CausalLMOracle, keep: bool = False):
        self.oracle = oracle
        self.keep = keep
        self.prefixes: list[tuple] = []
        self.n = 0

    def next_logprobs(self, prefix):
        self.n += 1
        if self.keep:
            self.prefixes.append(tuple(prefix))
        return self.oracle.next_logprobs(prefix)

    def batch_next_logprobs(self, prefixes):
        self.n += len(prefixes)
        if self.keep:
            self.prefixes.extend(tuple(p) for p in prefixes)
        return self.oracle.batch_next_logprobs(prefixes)

    def batch_next_heads(self, prefixes, floors):
        self.n += len(prefixes)
        if self.keep:
            self.prefixes.extend(tuple(p) for p in prefixes)
        return self.oracle.batch_next_heads(prefixes, floors)


def _pct(x) -> str:
    return "" if x is None else f"{100 * x:.1f}%"


def core_stats(enum) -> dict | None:
    st = getattr(enum, "stats", None)
    if st is None:
        return None
    if callable(st):
        try:
            st = st()
        except TypeError:
            return None
    for attr in ("as_dict", "_asdict"):
        if hasattr(st, attr):
            return dict(getattr(st, attr)())
    if isinstance(st, dict):
        return dict(st)
    try:
        return dict(vars(st))
    except TypeError:
        return {"repr": repr(st)}


def as_float(x) -> float | None:
    for cand in (x, getattr(x, "logprob", None), getattr(x, "log_prob", None), getattr(x, "value", None)):
        try:
            return float(cand)
        except (TypeError, ValueError):
            continue
    return None


class _TimeUp(Exception):
    pass


def _alarm(signum, frame):
    raise _TimeUp()


def run_method(method: str, model, args, scale: float, max_len: int, rank: int, keep: bool = False,
               budget_s: float | None = None) -> dict:
    oracle = CausalLMOracle(
        model, prompt=None, bos_token_id=model.config.bos_token_id,
        eos=model.config.eos_token_id if args.eos else None, device=args.device, dtype=args.dtype,
        logit_scale=scale, kv_reuse=(method == "kv"), forward_batch_size=args.batch_size,
    )
    oracle.next_logprobs(())  # the prompt forward is not part of the timing
    oracle.reset_stats()
    rec = Recorder(oracle, keep=keep)
    # what oracle.enumerable(max_len=...) does: the deepest level scored is a parent of nothing
    oracle.kv_store_max_len = max(0, max_len - 2)
    from arenum import AutoregressiveEnumerable

    if method == "naive":  # next_logprobs only
        wiring = {}
    else:
        wiring = dict(
            batch_next_logprobs=rec.batch_next_logprobs, batch_size=args.batch_size,
            batch_score_sequences=oracle.score_sequences, all_position_logprobs=oracle.all_position_logprobs,
        )
        if not args.dense_rows:  # what oracle.enumerable() wires: heads cut where the model runs
            wiring["batch_next_heads"] = rec.batch_next_heads
    enum = AutoregressiveEnumerable(
        rec.next_logprobs, max_len=max_len, eos=oracle.eos if args.eos else None, **wiring
    )
    t0 = time.perf_counter()
    timed_out = False
    if budget_s:
        signal.signal(signal.SIGALRM, _alarm)
        signal.setitimer(signal.ITIMER_REAL, budget_s)
    try:
        thr = enum.threshold(rank)
    except _TimeUp:
        thr, timed_out = None, True
    finally:
        if budget_s:
            signal.setitimer(signal.ITIMER_REAL, 0)
    wall = time.perf_counter() - t0
    st = oracle.stats
    cs = core_stats(enum) if not timed_out else None
    return {
        "method": method,
        "max_len": max_len,
        "rank": rank,
        "wall_s": wall,
        "threshold": as_float(thr),
        "threshold_repr": repr(thr)[:200],
        "prefixes_scored": rec.n,
        "forward_calls": st.forward_calls,
        "tokens_computed": st.tokens_computed,
        "kv_hits": st.kv_hits,
        "kv_misses": st.kv_misses,
        "model_forward_s": st.forward_seconds,
        "oracle_callback_s": st.callback_seconds,
        "adapter_overhead_s": st.callback_seconds - st.forward_seconds,
        "core_s": wall - st.callback_seconds,
        "overhead_vs_model": (wall - st.forward_seconds) / st.forward_seconds if st.forward_seconds else None,
        "core_stats": cs,
        "timed_out": timed_out,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "extrapolated": False,
        "_prefixes": rec.prefixes if keep else None,
    }


def bare_forward_seconds(model, oracle_prompt: list[int], prefixes: list[tuple], batch: int, device) -> tuple[float, int]:
    """Batched full-prefix forwards of ``prefixes`` (grouped by length), last-position logits only."""
    by_len: dict[int, list[tuple]] = {}
    for p in prefixes:
        by_len.setdefault(len(p), []).append(p)
    total, tokens = 0.0, 0
    with torch.inference_mode():
        for L, group in sorted(by_len.items()):
            for s in range(0, len(group), batch):
                ids = torch.tensor([oracle_prompt + list(p) for p in group[s : s + batch]], device=device)
                if device.type == "cuda":
                    torch.cuda.synchronize()
                t0 = time.perf_counter()
                model(ids, use_cache=False, logits_to_keep=1)
                if device.type == "cuda":
                    torch.cuda.synchronize()
                total += time.perf_counter() - t0
                tokens += ids.numel()
    return total, tokens


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="R=10**3, 2 layers (a small smoke run)")
    ap.add_argument("--rank", type=int, default=None, help="R in enum.threshold(R) (default 10**5; 10**3 with --quick)")
    ap.add_argument("--layers", type=int, default=None, help="GPT-2 layers (default 6; 2 with --quick)")
    ap.add_argument("--width", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--max-len", type=int, nargs="+", default=[2, 3])
    ap.add_argument("--methods", nargs="+", default=["naive", "padded", "kv"], choices=["naive", "padded", "kv"])
    ap.add_argument("--naive-rank", type=int, default=None,
                    help="measure (a) at this smaller rank and extrapolate to R (default: R with --quick, else 10**3)")
    ap.add_argument("--target-bits", type=float, default=4.0)
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--device", default="cpu", help="cpu or cuda")
    ap.add_argument("--dtype", default="auto", help="auto (fp32 on CPU, bf16 on CUDA), float32, bfloat16, float16")
    ap.add_argument("--eos", action="store_true", help="enumerate with the EOS token (default: fixed length)")
    ap.add_argument("--dense-rows", action="store_true",
                    help="feed the tree full (n, V) rows (batch_next_logprobs) instead of device-cut heads")
    ap.add_argument("--threads", type=int, default=None, help="torch.set_num_threads")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--budget-s", type=float, default=None,
                    help="abandon one timed threshold() after this many seconds (row marked timed_out)")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "hf.json"))
    args = ap.parse_args(argv)

    rank = args.rank or (10**3 if args.quick else 10**5)
    layers = args.layers or (2 if args.quick else 6)
    naive_rank = args.naive_rank or (rank if args.quick else min(rank, 10**3))
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        ap.error("--device cuda requested but CUDA is not available")
    try:
        import arenum

        arenum.AutoregressiveEnumerable  # noqa: B018
    except AttributeError:
        print("arenum.AutoregressiveEnumerable is not available yet; nothing to benchmark", file=sys.stderr)
        return 2

    t0 = time.perf_counter()
    model = build_model(layers, args.seed, args.vocab, args.width, args.heads)
    probe = CausalLMOracle(model, bos_token_id=model.config.bos_token_id, eos=None, device=args.device, dtype=args.dtype)
    model = probe.model
    device = probe.device
    print(f"model: GPT-2 random weights, {layers} layers, width {args.width}, vocab {args.vocab}, "
          f"{sum(p.numel() for p in model.parameters()) / 1e6:.1f}M params, {device}, {probe.dtype}, "
          f"torch threads {torch.get_num_threads()} (built in {time.perf_counter() - t0:.1f}s)")
    cal = calibrate_scale(probe, args.target_bits, args.seed)
    scale = cal["logit_scale"]
    print(f"logit_scale {scale:.4g}: next-token entropy {cal['entropy_bits_mean']:.2f} bits mean over "
          f"{cal['contexts']} contexts (min {cal['entropy_bits_min']:.2f}, max {cal['entropy_bits_max']:.2f}, "
          f"empty prefix {cal['entropy_bits_empty_prefix']:.2f}; unscaled {cal['entropy_bits_unscaled_mean']:.2f})")

    # warm-up (allocator, kernels, first-touch pages), not timed
    run_method("kv", model, args, scale, min(args.max_len), 10)

    results = []
    for L in args.max_len:
        kv_row = None
        for method in ["kv", "padded", "naive"]:
            if method not in args.methods:
                continue
            r_rank = naive_rank if method == "naive" else rank
            row = run_method(method, model, args, scale, L, r_rank, keep=(method == "kv"), budget_s=args.budget_s)
            if method == "kv" and not row["timed_out"]:
                kv_row = row
                prefixes = row.pop("_prefixes")
                bare, bare_tokens = bare_forward_seconds(model, probe.prompt_ids, prefixes, args.batch_size, device)
                row["bare_full_prefix_forward_s"] = bare
                row["bare_full_prefix_tokens"] = bare_tokens
            else:
                row.pop("_prefixes")
            if method == "naive" and r_rank != rank and kv_row is not None and not row["timed_out"]:
                measured_n = max(1, row["prefixes_scored"])
                factor = kv_row["prefixes_scored"] / measured_n
                row["measured"] = {k: row[k] for k in ("rank", "wall_s", "prefixes_scored", "model_forward_s",
                                                       "adapter_overhead_s", "core_s", "forward_calls",
                                                       "tokens_computed", "threshold")}
                row.update(rank=rank, extrapolated=True, threshold=None, prefixes_scored=kv_row["prefixes_scored"])
                for k in ("wall_s", "model_forward_s", "adapter_overhead_s", "core_s"):
                    row[k] = row["measured"][k] * factor
                for k in ("forward_calls", "tokens_computed"):
                    row[k] = round(row["measured"][k] * factor)
            results.append(row)
            tag = " (extrapolated)" if row["extrapolated"] else ""
            print(f"  max_len {L} {method:7s} done in {row.get('measured', row)['wall_s']:.1f}s{tag}", flush=True)

    # ---- table ----------------------------------------------------------------------------
    head = (f"{'max_len':>7} {'method':<7} {'rank':>7} {'wall s':>8} {'model s':>8} {'adapter s':>9} "
            f"{'core s':>8} {'overhead':>8} {'prefixes':>8} {'forwards':>8} {'tokens':>8} {'kv hit/miss':>12} {'threshold':>11}")
    print()
    print(head)
    print("-" * len(head))
    for r in results:
        thr = "" if r["threshold"] is None else f"{r['threshold']:.5f}"
        hm = f"{r['kv_hits']}/{r['kv_misses']}" if r["method"] == "kv" else ""
        note = "  extrapolated" if r["extrapolated"] else ("  TIMED OUT" if r["timed_out"] else "")
        print(f"{r['max_len']:>7} {r['method']:<7} {r['rank']:>7} {r['wall_s']:>8.2f} {r['model_forward_s']:>8.2f} "
              f"{r['adapter_overhead_s']:>9.2f} {r['core_s']:>8.2f} {_pct(r.get('overhead_vs_model')):>8} "
              f"{r['prefixes_scored']:>8} "
              f"{r['forward_calls']:>8} {r['tokens_computed']:>8} {hm:>12} {thr:>11}" + note)
        if r["method"] == "kv" and "bare_full_prefix_forward_s" in r:
            print(f"{'':>7} {'bare':<7} {'':>7} {r['bare_full_prefix_forward_s']:>8.2f} {'':>8} {'':>9} {'':>8} {'':>8} "
                  f"{r['prefixes_scored']:>8} {'':>8} {r['bare_full_prefix_tokens']:>8}"
                  "   <- batched full-prefix forwards of the same prefixes, no core")
    for L in args.max_len:
        thrs = {r["method"]: r["threshold"] for r in results if r["max_len"] == L and r["threshold"] is not None
                and r["rank"] == rank}
        if len(thrs) > 1:
            spread = max(thrs.values()) - min(thrs.values())
            print(f"max_len {L}: thresholds agree across {sorted(thrs)} to {spread:.2e} nats")
    print("model s: bare model forward; adapter s: rest of the oracle callbacks (log-softmax, gathers, copies);\n"
          "core s: wall - callbacks (the core's parsing, tree and index); overhead: (wall - model s) / model s.\n"
          "'naive' extrapolated rows scale the\n"
          "measured per-prefix cost to the number of prefixes 'kv' scored at the full rank.")

    out = {
        "benchmark": "bench_hf",
        "argv": sys.argv[1:],
        "model": {"arch": "GPT2LMHeadModel", "layers": layers, "width": args.width, "heads": args.heads,
                  "vocab": args.vocab, "weights": f"random, torch.manual_seed({args.seed})"},
        "device": str(device),
        "dtype": str(probe.dtype),
        "torch_threads": torch.get_num_threads(),
        "rank": rank,
        "naive_rank": naive_rank,
        "batch_size": args.batch_size,
        "eos": bool(args.eos),
        "tree_fed_by": "full rows (batch_next_logprobs)" if args.dense_rows else "device-cut heads (batch_next_heads)",
        "calibration": cal,
        "versions": {"python": platform.python_version(), "torch": torch.__version__,
                     "transformers": transformers.__version__, "numpy": np.__version__},
        "cpu_count": os.cpu_count(),
        "results": results,
    }
    path = Path(args.out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=2, default=str))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
