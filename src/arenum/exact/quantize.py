"""Quantization of scores into fine buckets of bits, and count histograms over those buckets.

A *fine bucket* is a half-open interval of information ``[fb * w, (fb + 1) * w)`` bits, with
``w = bin_width_bits / oversample``; a sequence is filed under the bucket of its EXACT total bits
``-log_prob / ln 2``, never under a sum of per-step buckets. Quantization only tunes speed and memory;
exact answers never depend on it.

This module does not enumerate anything: see ``arenum.exact.count_index`` for the tree-recursive count
index built on these pieces.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from .._validate import exact_int, finite_float, LN2


__all__ = ["Quantizer", "logit_error_bucket_slack"]


@dataclass(frozen=True)
class Quantizer:
    """Maps log-probabilities (nats) to fine buckets of ``fine_width_bits`` bits.

    ``fine_bucket(lp) == floor((-lp / ln 2) / fine_width_bits)``; bucket ``fb`` covers log-probs in
    ``(lo, hi]`` with ``hi = -fb * fine_width_bits * ln 2`` and ``lo = -(fb + 1) * fine_width_bits * ln 2``
    (see :meth:`bucket_log_prob_bounds`). A more probable sequence never lands in a larger bucket.

    >>> q = Quantizer(bin_width_bits=1.0, oversample=4)
    >>> q.fine_width_bits
    0.25
    >>> q.fine_bucket(-math.log(2.0) * 1.3)
    5
    """

    bin_width_bits: float = 1.0
    oversample: int = 8

    def __post_init__(self) -> None:
        bw = finite_float("bin_width_bits", self.bin_width_bits)
        if bw <= 0:
            raise ValueError(f"bin_width_bits must be > 0, got {self.bin_width_bits!r}")
        object.__setattr__(self, "bin_width_bits", bw)
        object.__setattr__(self, "oversample", exact_int("oversample", self.oversample, minimum=1))

    @property
    def fine_width_bits(self) -> float:
        """Width of one fine bucket in bits."""
        return self.bin_width_bits / self.oversample

    def fine_per_bit(self) -> float:
        """Fine buckets per bit, ``oversample / bin_width_bits`` (the seed system's name).

        >>> Quantizer(1.0, 8).fine_per_bit()
        8.0
        """
        return self.oversample / self.bin_width_bits

    def fine_bucket(self, log_prob: float) -> int:
        """Fine bucket of a log-probability (nats, ``<= 0``); ``-inf`` raises ``ValueError``."""
        lp = float(log_prob)
        if math.isnan(lp) or lp == -math.inf or lp > 0:
            raise ValueError(f"log_prob must be finite and <= 0, got {log_prob!r}")
        return int(math.floor((-lp / LN2) / self.fine_width_bits))

    def bucket_bits(self, fb: int) -> tuple[float, float]:
        """``(lo_bits, hi_bits)``: bucket ``fb`` holds information in ``[lo_bits, hi_bits)``."""
        w = self.fine_width_bits
        return fb * w, (fb + 1) * w

    def bucket_log_prob_bounds(self, fb: int) -> tuple[float, float]:
        """``(lo, hi)`` log-probs (nats): every member ``lp`` of bucket ``fb`` has ``lo < lp <= hi``."""
        lo_bits, hi_bits = self.bucket_bits(fb)
        return -hi_bits * LN2, -lo_bits * LN2


def logit_error_bucket_slack(eps_nats: float, steps: int, quantizer: Quantizer) -> int:
    """Fine buckets a sequence's bucket can move when each of ``steps`` step log-probs is off by at most
    ``eps_nats``: ``ceil(steps * eps_nats / ln 2 / fine_width_bits)`` (the seed system's helper).

    A score moved by ``delta`` nats moves ``floor(bits / w)`` by at most ``ceil(delta / ln 2 / w)``.
    ``eps_nats`` bounds the error of the LOG-PROBS; an error ``e`` on the logits moves the log-softmax
    by at most ``2 e`` (pass ``2 * e``).

    >>> logit_error_bucket_slack(0.01, 10, Quantizer(1.0, 8))
    2
    """
    eps = finite_float("eps_nats", eps_nats)
    if eps < 0:
        raise ValueError(f"eps_nats must be >= 0, got {eps_nats!r}")
    n = exact_int("steps", steps, minimum=0)
    if not isinstance(quantizer, Quantizer):
        raise TypeError(f"quantizer must be a Quantizer, got {type(quantizer).__name__}")
    return int(math.ceil(n * eps / LN2 / quantizer.fine_width_bits))
