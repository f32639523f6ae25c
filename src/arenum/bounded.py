"""Bounded-error inference: certified brackets for a TRUE model from a model known within ``eps`` nats.

A model run in bf16 or int8 gives step log-probs that differ from the true model's. When every step
is within ``eps`` nats (``|log p_model(t | q) - log p_true(t | q)| <= eps`` for every prefix ``q`` and
token ``t``), a sequence of ``n`` tokens has ``|s_model(x) - s_true(x)| <= n * eps <= D`` with
``D = cap * eps`` (``cap`` the longest sequence of the support). Every answer about the true model
then follows from answers about the declared model at shifted scores:

- ``count_true(t)``: ``count(t + D) <= count_true(t) <= count(t - D)``;
- ``threshold_true(k)``: within ``[threshold(k) - D, threshold(k) + D]`` (an order statistic moves at
  most as far as every value does);
- ``mass_true(t)``: ``e^{-D} mass(t + D) <= mass_true(t) <= min(1, e^{D} mass(t - D))``;
- ``rank_true(x)``: ``#{s > s(x) + 2D} <= rank_true(x) <= #{s > s(x) - 2D} - 1``, and the cumulative
  mass likewise, with ``x``'s own true mass ``>= e^{s(x) - D}``.

:class:`BoundedAnswers` is the answers stage with these brackets (``method='logprob_error'``,
``exact=False``; the point value the bracket's middle (:func:`arenum.results.point_value`), the
declared model's answer in ``extra['model_value']``, ``ci_lo``/``ci_hi`` or
``*_lo``/``*_hi`` the certified bracket for the true model; over a Monte Carlo estimate, allowed by
``exact_limit``, the method reads ``'<estimator>+logprob_error'`` and the ends are its confidence
interval, widened). Each bracket costs the declared model's
answers at the shifted scores (a deeper budget by ``D`` nats).

- ``nucleus_true(p)``: every head's true mass is within ``e^{+-D}`` of its declared mass, so
  ``nucleus(p e^{-D}) <= nucleus_true(p) <= nucleus(p e^{D})`` (the upper end unknown, ``None``,
  when ``p e^{D}`` passes what the declared support holds), never ``exact`` unless both ends meet.

The sequences of ``unrank``/``slice``/``top_k`` are the declared model's order: the facade flags
them ``exact=False``, ``method='logprob_error'``.
"""
from __future__ import annotations

import math

import numpy as np

from .answers import Answers
from .results import CountBracket, CountDPTopPResult, CountResult, DensityRankResult, MassBracket, ThresholdResult

__all__ = ["BoundedAnswers"]


def _gt(a: float) -> float:
    """The smallest float above ``a``: ``count(_gt(a))`` counts scores ``> a``."""
    return float(np.nextafter(a, math.inf))


def _method(inner: str) -> str:
    """``'logprob_error'`` over a certified answer; ``'<estimator>+logprob_error'`` over an estimate
    (whose ends are then a confidence interval, widened)."""
    return "logprob_error" if inner in ("exact", "bracket") else f"{inner}+logprob_error"


class BoundedAnswers(Answers):
    """:class:`~arenum.answers.Answers` of a model declared within ``eps`` nats per step of the true
    one; ``steps`` is the longest sequence (``D = steps * eps``). Brackets as the module docstring."""

    def __init__(self, seek, support, beyond=None, *, estimates: bool = False, eps: float, steps: int) -> None:
        super().__init__(seek, support, beyond, estimates=estimates, certified=False)
        self.eps, self.steps = float(eps), int(steps)
        self.delta = self.eps * self.steps

    def _extra(self, value) -> dict:
        return {"logprob_error": self.eps, "steps": self.steps, "delta": self.delta, "model_value": value}

    def _count_at(self, t: float, end: str):
        if t > 0:
            return 0
        c = super().count(t)
        return getattr(c, end)

    def count(self, t: float) -> CountResult:
        mid = super().count(t)
        D = self.delta
        lo = self._count_at(t + D, "ci_lo")
        hi = self._count_at(t - D, "ci_hi")
        return CountResult(int(mid), exact=False, method=_method(mid.method), ci_lo=lo, ci_hi=hi,
                           confidence=mid.confidence, extra=self._extra(int(mid)))

    def count_bracket(self, t: float) -> CountBracket:
        D = self.delta
        lo = super().count_bracket(t + D).lo if t + D <= 0 else 0
        return CountBracket(lo, super().count_bracket(t - D).hi, method="logprob_error")

    def count_or_bracket(self, t: float) -> CountBracket:
        return self.count_bracket(t)

    def threshold(self, k: int) -> ThresholdResult:
        x = super().threshold(k)
        D = self.delta
        return ThresholdResult(float(x), exact=False, method=_method(x.method), ci_lo=x.ci_lo - D,
                               ci_hi=min(0.0, x.ci_hi + D), confidence=x.confidence, extra=self._extra(float(x)))

    def mass_above(self, t: float) -> MassBracket:
        D = self.delta
        if t > 0:
            return MassBracket(0.0, 0.0)
        lo = math.exp(-D) * super().mass_above(t + D).lo if t + D <= 0 else 0.0
        hi = min(1.0, math.exp(D) * super().mass_above(t - D).hi)
        return MassBracket(lo, hi, exact=False, method="logprob_error")

    def rank(self, s: float) -> DensityRankResult:
        r = super().rank(s)
        D = self.delta
        if D == 0:
            return r
        lo = self._count_at(_gt(s + 2 * D), "ci_lo")
        hi = max(lo, self._count_at(_gt(s - 2 * D), "ci_hi") - 1)
        m_lo = super().mass_above(s + 2 * D).lo if s + 2 * D <= 0 else 0.0
        c_lo = math.exp(-D) * (m_lo + math.exp(s))  # x itself is not above s + 2D
        c_hi = min(1.0, math.exp(D) * super().mass_above(s - 2 * D).hi)
        return DensityRankResult(
            rank=r.rank, cumulative=r.cumulative, log_prob=s, exact=False, method=_method(r.method),
            rank_lo=lo, rank_hi=hi, cumulative_lo=min(1.0, c_lo), cumulative_hi=c_hi, truncated=r.truncated,
            extra=self._extra(r.rank), confidence=r.confidence,  # an estimate's ends: their level (each end
            rank_stderr=r.rank_stderr, cumulative_stderr=r.cumulative_stderr,  # from one side of a 95% interval)
        )

    def nucleus_size(self, p: float) -> CountDPTopPResult:
        """The true model's nucleus bracketed by the declared one's at ``p e^{-D}`` and ``p e^{D}``
        (module docstring); ``mass_lo``/``mass_hi`` bracket the true mass of any head between the ends."""
        D = self.delta
        if D == 0:
            return super().nucleus_size(p)
        lo = super().nucleus_size(p * math.exp(-D))
        hi = super().nucleus_size(p * math.exp(D)) if p * math.exp(D) <= 1.0 else None
        size_hi = hi.size_hi if hi is not None and hi.reachable is not False else None
        reachable = False if lo.reachable is False else (True if size_hi is not None else None)
        return CountDPTopPResult(size=lo.size_lo, size_lo=lo.size_lo, size_hi=size_hi,
                                 mass_lo=math.exp(-D) * lo.mass_lo, mass_hi=min(1.0, math.exp(D) * (hi or lo).mass_hi),
                                 threshold=lo.threshold, p=p, truncated=lo.truncated or (hi is not None and hi.truncated),
                                 exact=size_hi == lo.size_lo and not lo.truncated, reachable=reachable,
                                 method="logprob_error")
