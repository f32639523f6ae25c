"""The finite-state protocol: a model whose next-token table depends on a finite state only.

A model implements it by a method ``finite_state(self) -> FiniteStateTables`` (computed once and
cached): a finite set of states ``0..S-1``, a start state (the empty continuation), and per state
its full step table and the state after each token.  The claim a model makes by implementing it:

    for every prefix ``x``, with ``s(x)`` the state reached from ``start`` along ``x``,
    ``next_logprobs(x)[tokens[j]] == log_probs[s(x), j]`` for every column ``j``, bit for bit.

So two prefixes in the same state have the same completions with the same scores (induction on
the completion's length: the first step is the same row, the next states are equal again), and
anything that depends only on the future of a prefix (how many completions score ``>= t``, their
mass) is a function of the state.  :func:`check_finite_state` tests the claim by brute force on
every prefix up to a depth; :class:`arenum.models.NGramModel` implements the protocol
(``docs/certified.md`` has its proof and a worked example).

The eos column: ``eos`` is the model's end-of-sequence id, or ``None`` (no ending: fixed-length
use only).  When ``eos`` is one of ``tokens`` (column ``eos_column``), ``eos_log_probs`` repeats
that column; a terminating support ends there (its ``next_state`` is not used), while a
fixed-length support treats ``eos`` as an ordinary token (its ``next_state`` is used and
``eos_log_probs`` ignored).  When ``eos`` is not among ``tokens``, ``eos_log_probs`` is the ending
column alone, and each row ``log_probs[s]`` together with ``eos_log_probs[s]`` is the distribution.

This module does not count anything (:mod:`arenum.beyond.certified` does) and never calls a model except
in :func:`check_finite_state`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from .._validate import exact_int
from ..support import Support

__all__ = ["FiniteStateTables", "FiniteStateCheck", "check_finite_state", "NORM_TOL"]

NORM_TOL = 1e-6  # accepted |sum p - 1| of a state's row


@dataclass(frozen=True)
class FiniteStateTables:
    """A finite-state model's states and step tables (see the module docstring for the contract).

    tokens: ``(V,)`` int64 token ids; column ``j`` of the tables below is token ``tokens[j]``.
    log_probs: ``(S, V)`` float64 natural-log probability of ``tokens[j]`` from state ``s``
        (``-inf``: impossible).
    eos_log_probs: ``(S,)`` float64 log-probability of ending (``eos``) from state ``s``; ``-inf``
        where impossible (all ``-inf`` when ``eos`` is None).
    next_state: ``(S, V)`` int32 state after emitting ``tokens[j]`` from ``s`` (``-1`` where
        impossible).
    start: the state of the empty continuation (after the prompt, if any).
    eos: the eos token id (``None``: no eos column, fixed-length use only).
    """

    tokens: np.ndarray
    log_probs: np.ndarray
    eos_log_probs: np.ndarray
    next_state: np.ndarray
    start: int
    eos: int | None

    @property
    def n_states(self) -> int:
        """S, the number of states."""
        return int(self.log_probs.shape[0])

    @property
    def eos_column(self) -> int | None:
        """Column ``j`` with ``tokens[j] == eos``, or None (no eos, or eos not among ``tokens``)."""
        if self.eos is None:
            return None
        hit = np.flatnonzero(self.tokens == self.eos)
        return int(hit[0]) if len(hit) else None

    @property
    def nbytes(self) -> int:
        """Bytes held by the arrays."""
        return int(self.tokens.nbytes + self.log_probs.nbytes + self.eos_log_probs.nbytes
                   + self.next_state.nbytes)

    def step_tables(self, terminating: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``(tokens, log_probs, next_state, end_log_probs)`` of the continuing steps of a support.

        Terminating: the eos column is removed from the continuing steps and ``end_log_probs`` is
        ``eos_log_probs``.  Fixed length: every column continues (eos included, as an ordinary
        token) and ``end_log_probs`` is all ``-inf``.
        """
        S = self.n_states
        if not terminating:
            return self.tokens, self.log_probs, self.next_state, np.full(S, -math.inf)
        if self.eos is None:
            raise ValueError("these finite-state tables have no eos: they serve a fixed-length support only")
        j = self.eos_column
        if j is None:
            return self.tokens, self.log_probs, self.next_state, self.eos_log_probs
        keep = np.arange(len(self.tokens)) != j
        return self.tokens[keep], self.log_probs[:, keep], self.next_state[:, keep], self.eos_log_probs

    def state_of(self, prefix: Sequence[int]) -> int:
        """The state reached from ``start`` along ``prefix`` (token ids); ``ValueError`` if a token
        is not a column or is impossible on the way."""
        col = {int(t): j for j, t in enumerate(self.tokens.tolist())}
        s = self.start
        for i, t in enumerate(prefix):
            j = col.get(int(t))
            if j is None:
                raise ValueError(f"token {t!r} at position {i} is not a column of the finite-state tables")
            s = int(self.next_state[s, j])
            if s < 0:
                raise ValueError(f"token {t!r} at position {i} is impossible after the prefix before it")
        return s

    def validate(self, *, norm_tol: float = NORM_TOL) -> "FiniteStateTables":
        """Check shapes, dtypes, finite-or-``-inf`` log-probs, normalized rows, ``next_state`` in
        range and ``-1`` exactly where impossible; ``ValueError``/``TypeError`` naming the field.
        Returns ``self``."""
        for name in ("tokens", "log_probs", "eos_log_probs", "next_state"):
            if not isinstance(getattr(self, name), np.ndarray):
                raise TypeError(f"FiniteStateTables.{name} must be a numpy array, got "
                                f"{type(getattr(self, name)).__name__}")
        tok, lp, elp, nxt = self.tokens, self.log_probs, self.eos_log_probs, self.next_state
        if tok.ndim != 1 or tok.dtype != np.int64:
            raise ValueError(f"tokens must be 1-D int64, got shape {tok.shape} dtype {tok.dtype}")
        V = len(tok)
        if len(np.unique(tok)) != V:
            raise ValueError("tokens has duplicate ids")
        if lp.ndim != 2 or lp.dtype != np.float64 or lp.shape[1] != V:
            raise ValueError(f"log_probs must be (S, {V}) float64, got shape {lp.shape} dtype {lp.dtype}")
        S = lp.shape[0]
        if S < 1:
            raise ValueError("finite-state tables need at least one state")
        if elp.shape != (S,) or elp.dtype != np.float64:
            raise ValueError(f"eos_log_probs must be ({S},) float64, got shape {elp.shape} dtype {elp.dtype}")
        if nxt.shape != (S, V) or nxt.dtype != np.int32:
            raise ValueError(f"next_state must be ({S}, {V}) int32, got shape {nxt.shape} dtype {nxt.dtype}")
        start = exact_int("start", self.start, minimum=0)
        if start >= S:
            raise ValueError(f"start must be a state in [0, {S}), got {self.start!r}")
        if self.eos is not None:
            exact_int("eos", self.eos)
        for name, a in (("log_probs", lp), ("eos_log_probs", elp)):
            if np.isnan(a).any() or (a > 0).any() or (a == math.inf).any():
                raise ValueError(f"{name} must be log-probabilities (<= 0, no NaN)")
        if self.eos is None and not (elp == -math.inf).all():
            raise ValueError("eos_log_probs must be all -inf when eos is None")
        j = self.eos_column
        if j is not None and not np.array_equal(elp, lp[:, j]):
            raise ValueError(f"eos_log_probs must repeat column {j} (the eos token) of log_probs")
        total = np.exp(lp).sum(axis=1) + (np.exp(elp) if j is None else 0.0)
        bad = np.flatnonzero(~(np.abs(total - 1.0) <= norm_tol))
        if len(bad):
            raise ValueError(f"the row of state {int(bad[0])} sums to {float(total[bad[0]])!r}, not 1 "
                             f"(tolerance {norm_tol})")
        if ((nxt < -1) | (nxt >= S)).any():
            raise ValueError(f"next_state must be in [-1, {S})")
        if (nxt[lp > -math.inf] < 0).any():
            raise ValueError("next_state is -1 for a token of positive probability")
        return self


@dataclass(frozen=True)
class FiniteStateCheck:
    """What :func:`check_finite_state` verified: prefixes compared, states they reached, depth."""

    prefixes: int
    states_seen: int
    depth: int


def _dense_row(out: Any, V_ids: int) -> np.ndarray:
    """A model's raw ``next_logprobs`` output as a dense float64 row over ids ``0..V_ids-1``."""
    if isinstance(out, tuple) and len(out) == 2 and all(isinstance(a, np.ndarray) for a in out):
        row = np.full(V_ids, -math.inf)
        row[np.asarray(out[0], dtype=np.int64)] = np.asarray(out[1], dtype=np.float64)
        return row
    if isinstance(out, np.ndarray) and out.ndim == 1 and out.dtype.kind == "f":
        row = np.full(V_ids, -math.inf)
        row[: len(out)] = out
        return row
    row = np.full(V_ids, -math.inf)
    for t, lp in out:
        row[int(t)] = float(lp)
    return row


def check_finite_state(
    tables: FiniteStateTables,
    next_logprobs: Callable[[tuple], Any],
    support: Support,
    *,
    depth: int | None = None,
    max_prefixes: int = 100_000,
    atol: float = 0.0,
) -> FiniteStateCheck:
    """Brute-force check of the protocol: on every prefix of ``support`` up to ``depth`` tokens
    (breadth first, at most ``max_prefixes`` of them), the model's row equals its state's row.

    Same as ``all(row(next_logprobs(x)) == log_probs[state_of(x)] for x in prefixes)``, compared to
    ``atol`` (``0.0``: bit for bit).  Passing it up to depth ``d`` proves that prefixes of length
    ``<= d`` in one state have the same completions with the same scores up to length ``d + 1``.
    Prefixes of a terminating support never contain ``eos``; only possible tokens are followed.
    ``next_logprobs`` returns a dense float array, a ``(tokens, log_probs)`` pair or
    ``[(token, log_prob), ...]`` with integer tokens.  Raises ``ValueError`` naming the first prefix
    whose row or state differs.
    """
    tables.validate()
    max_prefixes = exact_int("max_prefixes", max_prefixes, minimum=1)
    d = support.leaf_level if depth is None else exact_int("depth", depth, minimum=0)
    d = min(d, support.leaf_level)
    toks, lp, nxt, end = tables.step_tables(support.is_terminating)
    V_ids = int(max(tables.tokens.max(), tables.eos if tables.eos is not None else 0)) + 1
    full_cols = tables.tokens
    seen: set[int] = set()
    level: list[tuple[tuple, int]] = [((), tables.start)]
    n = 0
    for length in range(d + 1):
        nxt_level: list[tuple[tuple, int]] = []
        for prefix, s in level:
            if n >= max_prefixes:
                return FiniteStateCheck(n, len(seen), length)
            row = _dense_row(next_logprobs(prefix), V_ids)
            want = np.full(V_ids, -math.inf)
            want[full_cols] = tables.log_probs[s]
            if tables.eos is not None and tables.eos_column is None:
                want[tables.eos] = tables.eos_log_probs[s]
            same = (row == want) | (np.abs(row - want) <= atol)
            if not same.all():
                j = int(np.flatnonzero(~same)[0])
                raise ValueError(f"finite-state tables disagree with the model after prefix {prefix!r}: "
                                 f"token {j} has log-prob {row[j]!r} from the model, {want[j]!r} from "
                                 f"state {s}")
            n += 1
            seen.add(s)
            if length < d:
                for j in np.flatnonzero(lp[s] > -math.inf).tolist():
                    nxt_level.append((prefix + (int(toks[j]),), int(nxt[s, j])))
        level = nxt_level
    return FiniteStateCheck(n, len(seen), d)
