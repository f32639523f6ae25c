"""Seeded random models and brute-force enumeration, for checking exactness.

``RandomModel`` gives every prefix its own step table (a hash of the seed and the prefix), flat or
peaked, with optional exact ties; ``brute_force`` lists its whole support in the library's order.
Used by the test-suite; handy for checking any model small enough to list.
"""
from __future__ import annotations

import math
import zlib
from typing import Any, Callable, Sequence

import numpy as np

__all__ = ["RandomModel", "brute_force", "library_order_key"]


class RandomModel:
    """A deterministic random autoregressive model over ``vocab`` (ints or any hashable tokens).

    peak: logit scale (0 = uniform, 3 = very peaked). ties: draw probabilities from a few powers of
    two so that many sequences tie exactly. eos: a token of ``vocab`` used as end-of-sequence
    (terminating); ``eos_boost`` raises its probability so sequences stay short.
    """

    def __init__(self, vocab: Sequence[Any] | int, *, seed: int = 0, peak: float = 1.0, ties: bool = False,
                 eos: Any = None, eos_boost: float = 1.0, form: str = "pairs") -> None:
        self.vocab = list(range(vocab)) if isinstance(vocab, int) else list(vocab)
        self.V = len(self.vocab)
        self.seed = seed
        self.peak = peak
        self.ties = ties
        self.eos = eos
        self.eos_boost = eos_boost
        self.form = form
        self.calls = 0

    def logprobs(self, prefix: tuple) -> np.ndarray:
        key = zlib.crc32(repr((self.seed, tuple(prefix))).encode())
        rng = np.random.default_rng(key)
        if self.ties:
            k = rng.integers(0, 3, size=self.V)
            w = 2.0 ** (-k.astype(float))
        else:
            w = np.exp(self.peak * rng.standard_normal(self.V))
        if self.eos is not None:
            w[self.vocab.index(self.eos)] *= self.eos_boost
        lp = np.log(w) - np.log(w.sum())
        if self.ties:
            # exact powers of two only where they normalize exactly; otherwise plain log-softmax
            total = w.sum()
            if total == 2.0 ** round(math.log2(total)):
                lp = np.log2(w / total) * math.log(2.0)
        return lp

    def __call__(self, prefix: tuple) -> Any:
        self.calls += 1
        lp = self.logprobs(prefix)
        if self.form == "dense":
            return lp
        if self.form == "arrays":
            toks = np.array(self.vocab) if all(isinstance(t, int) for t in self.vocab) else np.array(self.vocab, dtype=object)
            return toks, lp
        return list(zip(self.vocab, lp.tolist()))

    def batch(self, prefixes: list[tuple]) -> list[Any]:
        return [self(p) for p in prefixes]

    def table(self, prefix: tuple) -> tuple[list, list[float]]:
        """Sorted table: tokens and log-probs by descending log-prob, ties in vocabulary order."""
        lp = self.logprobs(prefix)
        order = np.argsort(-lp, kind="stable")
        return [self.vocab[i] for i in order], [float(lp[i]) for i in order]


def library_order_key(score: float, positions: tuple) -> tuple:
    """The library's order: descending score, then length, then table positions."""
    return (-score, len(positions), positions)


def brute_force(model: Callable[[tuple], tuple[list, list[float]]], *, fixed_len: int | None = None,
                eos: Any = None, cap: int | None = None) -> list[tuple[tuple, float]]:
    """Every support sequence with its score, in the library's order.

    ``model(prefix) -> (tokens, log_probs)`` sorted by descending log-prob (e.g. ``RandomModel.table``).
    Scores are left-to-right float64 sums; ``-inf`` entries are not in the support.
    """
    out: list[tuple[tuple, float, tuple]] = []
    stack: list[tuple[tuple, float, tuple]] = [((), 0.0, ())]
    n = fixed_len if fixed_len is not None else cap
    assert n is not None
    while stack:
        seq, s, pos = stack.pop()
        toks, lps = model(seq)
        for j, (t, v) in enumerate(zip(toks, lps)):
            if v == -math.inf:
                continue
            ns, nseq, npos = s + v, seq + (t,), pos + (j,)
            if fixed_len is not None:
                if len(nseq) == fixed_len:
                    out.append((nseq, ns, npos))
                else:
                    stack.append((nseq, ns, npos))
            else:
                if t == eos:
                    out.append((nseq, ns, npos))
                elif len(nseq) < n:
                    stack.append((nseq, ns, npos))
    out.sort(key=lambda r: library_order_key(r[1], r[2]))
    return [(q, s) for q, s, _ in out]


class EnumerableFactory:
    """A picklable zero-argument factory of ``AutoregressiveEnumerable(RandomModel(...), ...)``, for
    workers that build their own replica (``arenum.distributed``): ``model`` keywords go to
    :class:`RandomModel` (plus ``vocab``), ``options`` to the enumerable (``max_len``, ``eos``, ...)."""

    def __init__(self, vocab: Sequence[Any] | int, *, options: dict | None = None, batched: bool = False,
                 **model: Any) -> None:
        self.vocab, self.model, self.options, self.batched = vocab, model, dict(options or {}), batched

    def make_model(self) -> RandomModel:
        return RandomModel(self.vocab, **self.model)

    def __call__(self) -> Any:
        from .enumerable import AutoregressiveEnumerable

        m = self.make_model()
        extra = {"batch_next_logprobs": m.batch} if self.batched else {}
        return AutoregressiveEnumerable(m, **{"eos": m.eos, **extra, **self.options})
