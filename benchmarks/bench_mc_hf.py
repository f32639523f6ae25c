"""Monte Carlo draws from a transformer: arenum's level-wise draws against the bare model's generation.

Model: a GPT-2 with random weights (``--layers`` 2, ``--width`` 256, ``--vocab`` 2000; weights scaled
so next-token distributions are peaked, as in ``tests/models/test_hf.py``), on the CPU in float32 by
default; ``--device cuda --dtype bfloat16`` runs both paths on a GPU in bf16.

- ``arenum``: ``CausalLMOracle(model).enumerable(max_len=L, eos=None).monte_carlo(n, head=False)``:
  every level's distinct prefixes in one ``batch_next_logprobs`` call per chunk; the oracle runs
  one token of compute per prefix whose parent's KV is stored (``docs/hf.md``), so a level costs
  one batched one-token forward over the level's distinct prefixes.
- ``bare``: the same number of rows per level (the distinct prefixes arenum's draws had, read off
  its counters), generation-style: a ``DynamicCache``, each level one batched forward of one token
  per row with the rows' past gathered by parent (``index_select``), ``log_softmax`` and
  ``torch.multinomial``. No validation, no bookkeeping: the floor for these tokens.

Reported: wall seconds of each (the best of ``--repeat`` alternated runs, one torch thread: the
machine is shared), their ratio, and arenum's model seconds (inside the callback).
Run: ``python benchmarks/bench_mc_hf.py`` (``--n 2000 --L 8 --device cpu --dtype float32``). Writes
``benchmarks/results/mc_hf.json``.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
import torch
import transformers

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from arenum.models.hf import CausalLMOracle  # noqa: E402


def build(layers: int, width: int, vocab: int, std: float, seed: int = 0) -> torch.nn.Module:
    cfg = transformers.GPT2Config(vocab_size=vocab, n_positions=64, n_embd=width, n_layer=layers, n_head=4,
                                  bos_token_id=vocab - 1, eos_token_id=vocab - 1)
    model = transformers.GPT2LMHeadModel(cfg)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for _, p in sorted(model.named_parameters()):
            if p.dim() > 1:
                p.copy_(torch.randn(p.shape, generator=gen) * std)
    return model.eval()


@torch.no_grad()
def bare_generation(model: torch.nn.Module, rows_per_level: list[int], bos: int, seed: int = 0) -> float:
    """Generation-style draws with ``rows_per_level[d]`` rows at level ``d`` (parents chosen at random),
    on the model's device and in its dtype (the clock stops after the device has finished)."""
    from transformers import DynamicCache

    import inspect

    kw = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"

    def returned(out):  # the cache the forward returns, under either name
        c = getattr(out, "cache", None) if kw == "cache" else None
        return c if c is not None else out.past_key_values

    dev = next(model.parameters()).device
    gen = torch.Generator().manual_seed(seed)
    dgen = torch.Generator(device=dev).manual_seed(seed)
    _sync(dev)
    t0 = time.perf_counter()
    out = model(input_ids=torch.tensor([[bos]], device=dev), use_cache=True, **{kw: DynamicCache()})
    cache = returned(out)
    logits = out.logits[:, -1]
    for m in rows_per_level:
        parent = torch.randint(0, logits.shape[0], (m,), generator=gen).to(dev)
        lp = torch.log_softmax(logits.double()[parent], -1)
        tok = torch.multinomial(lp.exp(), 1, generator=dgen)
        for layer in cache.layers:
            layer.keys = layer.keys.index_select(0, parent)
            layer.values = layer.values.index_select(0, parent)
        out = model(input_ids=tok, use_cache=True, **{kw: cache})
        cache = returned(out)
        logits = out.logits[:, -1]
    _sync(dev)
    return time.perf_counter() - t0


def _sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--L", type=int, default=8)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--vocab", type=int, default=2000)
    ap.add_argument("--std", type=float, default=0.15)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (1: stable timings on a shared machine)")
    ap.add_argument("--device", default="cpu", help="cpu or cuda (both paths run there)")
    ap.add_argument("--dtype", default="float32", help="float32 or bfloat16 (the weights of both paths)")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results", "mc_hf.json"))
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16}.get(a.dtype)
    if dtype is None:
        ap.error(f"--dtype {a.dtype!r}: use float32 or bfloat16")
    model = build(a.layers, a.width, a.vocab, a.std).to(device=a.device, dtype=dtype)
    arenum_runs, bare_runs = [], []
    for _ in range(a.repeat):  # alternated, best of each: the machine is shared
        oracle = CausalLMOracle(model, eos=None, kv_cache_bytes=1 << 30, forward_batch_size=4096,
                                device=a.device, dtype=dtype)
        enum = oracle.enumerable(max_len=a.L, eos=None, batch_size=4096)
        t0 = time.perf_counter()
        est = enum.monte_carlo(a.n, head=False, seed=0)
        arenum_runs.append((time.perf_counter() - t0, dict(enum.stats)))
        # rows per level: the distinct prefixes arenum's draws scored at each level
        from arenum.beyond.sampling import draw_samples

        s = draw_samples(enum._oracle, a.n, enum.support, seed=0, tokens=True)  # the same draws, with tokens
        per_level = [1] + [len({q[:d] for q in s.seqs}) for d in range(1, a.L)]
        bare_runs.append(bare_generation(model, per_level[1:], a.vocab - 1))
    arenum_s, st = min(arenum_runs, key=lambda x: x[0])
    bare_s = min(bare_runs)
    fwd = est.samples.forwards
    row = {"n": a.n, "L": a.L, "forwards": fwd, "rows_per_level": per_level, "arenum_s": arenum_s,
           "model_s": st["model_seconds"], "parse_s": st["parse_seconds"], "bare_s": bare_s,
           "ratio": arenum_s / bare_s, "torch_threads": torch.get_num_threads(), "machine": platform.platform(),
           "device": a.device, "dtype": a.dtype}
    print(f"{a.n} draws of {a.L} tokens, GPT-2 {a.layers}x{a.width}, V={a.vocab}, {a.device} {a.dtype}")
    print(f"rows per level: {per_level}")
    print(f"{'path':<10} {'seconds':>9}")
    print(f"{'arenum':<10} {arenum_s:>9.3f}  (model callback {st['model_seconds']:.3f}, parse {st['parse_seconds']:.3f})")
    print(f"{'bare':<10} {bare_s:>9.3f}")
    print(f"arenum / bare: {arenum_s / bare_s:.2f}")
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(row, f, indent=2)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
