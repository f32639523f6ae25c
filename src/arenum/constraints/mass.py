"""Masses under a constraint: the accepted mass, and masses conditional on acceptance.

A constrained enumerable's scores are the model's, so :meth:`~arenum.AutoregressiveEnumerable.mass_above`
is the *unconstrained* mass of the accepted sequences at or above a score: ``P(X accepted, s(X) >= t)``.
The *conditional* mass ``P(s(X) >= t | X accepted)`` divides it by the accepted mass
``Z = P(X accepted)`` (:func:`accepted_mass`): both are brackets, and the quotient's bracket is
``[lo / Z_hi, hi / Z_lo]``.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..results import MassBracket

__all__ = ["accepted_mass", "conditional_mass_above"]

_ROUND = 2.0 ** -50  # relative rounding allowance per step of a float64 sum of products


def _finite_state_mass(fs: Any, cap: int) -> float:
    """The mass of every sequence of at most ``cap`` tokens (eos included) ending in eos, by a
    forward sum over the states of finite-state tables (terminating)."""
    toks, lp, ns, end = fs.step_tables(True)
    p, pend = np.exp(lp), np.exp(end)
    S = lp.shape[0]
    ok = ns >= 0
    rows = np.repeat(np.arange(S), ok.sum(axis=1))
    dest, w = ns[ok], p[ok]
    v = np.zeros(S)
    v[int(fs.start)] = 1.0
    total = 0.0
    for _ in range(cap):
        total += float(v @ pend)
        v = np.bincount(dest, weights=v[rows] * w, minlength=S)
        if not v.any():
            break
    return total


def accepted_mass(ar: Any) -> MassBracket:
    """``Z``, the model's mass of the accepted sequences (of the whole support, when ``ar`` has no
    constraint). For a terminating finite-state model: a forward sum over the product states
    (exact to float rounding; cost: states x tokens x cap, no forward; not under ``branch_cap``). Otherwise
    ``ar.mass_above(-inf)``: exact when the whole support can be built, else the certified bracket
    that query gives."""
    fs = ar.finite_state_tables() if ar.terminating and ar.support.branch_cap is None else None  # not a sub-support's
    if fs is not None:
        z = _finite_state_mass(fs, ar.cap)
        tol = z * _ROUND * (ar.cap + fs.log_probs.shape[1])
        return MassBracket(max(0.0, z - tol), min(1.0, z + tol), True, "exact")
    return ar.mass_above(-math.inf)


def conditional_mass_above(ar: Any, min_log_prob: float, *, total: MassBracket | None = None) -> MassBracket:
    """``P(s(X) >= min_log_prob | X accepted)`` bracketed: :meth:`mass_above` divided by
    :func:`accepted_mass` (pass ``total`` to reuse it). Exact (to float rounding) when both are;
    otherwise ``method`` is the weaker of the two."""
    m = ar.mass_above(min_log_prob)
    z = accepted_mass(ar) if total is None else total
    if z.hi <= 0:
        raise ValueError("the constraint accepts no sequence of positive probability: the conditional mass is undefined")
    lo = m.lo / z.hi
    hi = min(1.0, m.hi / z.lo) if z.lo > 0 else 1.0
    exact = m.exact and z.exact
    method = "exact" if exact else (m.method if not m.exact else z.method)
    return MassBracket(min(lo, hi), hi, exact, method)
