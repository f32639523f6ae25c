"""The CUDA oracle answers as the CPU one does: exact enumeration of a tiny random-weight GPT-2 on both.

Run on a machine with a GPU: ``PYTHONPATH=src python scripts/check_cuda.py`` (or ``... cpu cuda:1``).
Both oracles use float32 weights; the script compares the top-k log-probs (max difference), the
sequences at each rank (near-ties may swap under the GPU's rounding), ``count``, ``threshold`` and a
``rank``, for a fixed-length and a terminating support, and exits non-zero when they differ by more
than 1e-4 nats or the rank moves. Results of the last run are in docs/hf.md.
"""
import sys
import time

import numpy as np
import torch
import transformers

from arenum.models.hf import CausalLMOracle

V, EOS = 24, 1
def tiny(seed=0, std=0.3):
    cfg = transformers.GPT2Config(vocab_size=V, n_positions=32, n_embd=32, n_layer=2, n_head=2, bos_token_id=0, eos_token_id=EOS)
    m = transformers.GPT2LMHeadModel(cfg)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for _, p in sorted(m.named_parameters()):
            if p.dim() > 1:
                p.copy_(torch.randn(p.shape, generator=g) * std)
    return m.eval()

DEVS = sys.argv[1:] or ("cpu", "cuda")
ok = True
for eos in (None, EOS):
    res = {}
    for dev in DEVS:
        o = CausalLMOracle(tiny(), prompt=[0, 5, 7], device=dev, dtype="float32")
        e = o.enumerable(max_len=3, eos=eos)
        t0 = time.perf_counter()
        K = 2000 if eos is None else 500
        top = e.top_k(K)
        res[dev] = (top, int(e.count(-6.0)), e.threshold(500), e.rank(top[377][0]), time.perf_counter() - t0)
    (tc, cc, thc, rc, sc), (tg, cg, thg, rg, sg) = (r for _, r in sorted(res.items(), key=lambda kv: DEVS.index(kv[0])))
    lc = np.array([lp for _, lp in tc]); lg = np.array([lp for _, lp in tg])
    dmax = float(np.abs(lc - lg).max())
    seq_same = sum(a[0] == b[0] for a, b in zip(tc, tg))
    print(f"eos={eos}: top {len(tc)} log-prob max diff {DEVS[0]}/{DEVS[-1]} {dmax:.2e}; same sequence at {seq_same}/{len(tc)} ranks; "
          f"count(-6) {cc} / {cg}; "
          f"threshold(500) {float(thc):.6f} / {float(thg):.6f}; rank(#378) {rc.rank} / {rg.rank}; s {sc:.2f} / {sg:.2f}")
    ok &= dmax < 1e-4 and rc.rank == rg.rank == 377
print("GPU CHECK", "PASSED" if ok else "FAILED")
sys.exit(0 if ok else 1)
