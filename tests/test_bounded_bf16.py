"""A real reduced-precision model: a tiny random GPT-2 run in bfloat16 (log-softmax in bf16, so its
rows are off by ~1e-3) against the same weights in float64 as the TRUE model. The bf16 rows are
accepted and counted; with ``logprob_error`` set to the measured per-step error, every bracket
contains the float64 model's exact answer."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from arenum import AutoregressiveEnumerable  # noqa: E402

V, L, BOS = 8, 3, 0


def _model():
    cfg = transformers.GPT2Config(vocab_size=V, n_positions=8, n_embd=16, n_layer=1, n_head=2)
    m = transformers.GPT2LMHeadModel(cfg)
    gen = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for _, p in sorted(m.named_parameters()):
            if p.dim() > 1:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.4)
    return m.eval()


def _callback(model, dtype):
    model = model.to(dtype)

    def next_logprobs(prefix):
        with torch.no_grad():
            ids = torch.tensor([[BOS, *prefix]])
            logits = model(ids).logits[0, -1]
            return torch.log_softmax(logits, -1).to(torch.float64).numpy()  # softmax in the model's dtype
    return next_logprobs


def test_bf16_model_declared_within_eps_brackets_the_float64_model():
    base = _model()
    true_cb = _callback(_model(), torch.float64)
    bf_cb = _callback(base, torch.bfloat16)
    prefixes = [p for n in range(L) for p in itertools.product(range(V), repeat=n)]
    sums = [abs(math.expm1(np.logaddexp.reduce(bf_cb(p)))) for p in prefixes]
    assert max(sums) > 1e-3  # beyond the old 1e-3 tolerance: refused before, accepted now
    # the bf16 model's per-step error after renormalization, measured over every prefix
    eps = max(float(np.max(np.abs((bf_cb(p) - np.logaddexp.reduce(bf_cb(p))) - true_cb(p)))) for p in prefixes)
    assert 0 < eps < 0.1
    true = AutoregressiveEnumerable(true_cb, max_len=L)
    ar = AutoregressiveEnumerable(bf_cb, max_len=L, logprob_error=eps)
    n = V**L
    for k in (1, 10, 100, n):
        th = ar.threshold(k)
        assert th.ci_lo <= true.threshold(k) <= th.ci_hi
    for t in (-3.0, -5.0, -6.5):
        c = ar.count(t)
        assert c.ci_lo <= true.count(t) <= c.ci_hi
        m, tm = ar.mass_above(t), true.mass_above(t)
        assert m.lo <= tm.lo and tm.hi <= m.hi
    for i in (0, 50, 400):
        seq = true.unrank(i)[0]
        r = ar.rank(seq)
        assert r.rank_lo <= true.rank(seq).rank <= r.rank_hi
    assert ar.stats["renormalized_rows"] > 0
