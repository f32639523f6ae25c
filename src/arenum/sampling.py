"""Ancestral sampling from the model, through the oracle's memoized tables.

A draw of a terminating model that reaches the depth cap without ``eos`` is outside the declared
support; :meth:`ARSampler.sample` reports it with ``complete=False`` and ``log_prob`` of the
truncated path, so an estimator can account for it (never silently dropped or resampled).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from .support import Support

__all__ = ["ARSampler", "Draw"]


@dataclass(frozen=True)
class Draw:
    """One ancestral draw: token ids, exact log-prob of the drawn path, and whether it is complete."""

    ids: tuple
    log_prob: float
    complete: bool


class ARSampler:
    """Draws sequences with probability ``p(x)`` (one table lookup per step, memoized)."""

    def __init__(
        self,
        table: Callable[[tuple], tuple[np.ndarray, np.ndarray]],
        support: Support,
        *,
        decode: Callable[[tuple], tuple],
        seed: int | None = None,
    ) -> None:
        self._table = table
        self.support = support
        self.fixed_len = support.fixed_len
        self.eos_id = support.eos_id
        self.cap = support.cap
        self._decode = decode
        self.rng = np.random.default_rng(seed)

    def draw(self) -> Draw:
        """One draw as token ids (see :class:`Draw`)."""
        seq: tuple = ()
        lp = 0.0
        n = self.fixed_len if self.fixed_len is not None else self.cap
        for _ in range(n):
            ids, lps = self._table(seq)
            p = np.exp(lps)
            j = int(np.searchsorted(np.cumsum(p), self.rng.random() * p.sum(), side="right"))
            j = min(j, ids.shape[0] - 1)
            seq = seq + (int(ids[j]),)
            lp = lp + float(lps[j])
            if self.eos_id is not None and seq[-1] == self.eos_id:
                return Draw(seq, lp, True)
        return Draw(seq, lp, self.fixed_len is not None)

    def sample(self) -> tuple[tuple, float]:
        """``(sequence, log_prob)`` of one draw; ``log_prob`` is ``-inf`` for an incomplete draw
        (it hit the depth cap without ``eos``, so it is outside the declared support)."""
        d = self.draw()
        return self._decode(d.ids), (d.log_prob if d.complete else float("-inf"))

    def sample_n(self, n: int) -> list[tuple[tuple, float]]:
        """``n`` independent draws (see :meth:`sample`)."""
        return [self.sample() for _ in range(int(n))]
