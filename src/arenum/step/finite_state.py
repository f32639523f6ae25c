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

Tokens: the tables' ``tokens`` are the model's own tokens, as its ``next_logprobs`` names them:
integer ids (an int64 array) or any hashable tokens (one-character strings, words, ...: a list,
tuple or object array), and ``eos`` likewise (``'\0'``, ``"</s>"``, ...).  The enumerable maps them
to its own integer ids once (:meth:`FiniteStateTables.with_ids`), so a model wrapped with its own
tokens needs no id table of its own (``docs/certified.md`` has an example).

The eos column: ``eos`` is the model's end-of-sequence token, or ``None`` (no ending: fixed-length
use only).  When ``eos`` is one of ``tokens`` (column ``eos_column``), ``eos_log_probs`` repeats
that column; a terminating support ends there (its ``next_state`` is not used and may be ``-1``),
while a fixed-length support treats ``eos`` as an ordinary token (its ``next_state`` is then
needed: ``step_tables`` refuses ``-1`` there).  When ``eos`` is not among ``tokens``, ``eos_log_probs`` is the ending
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

    tokens: ``(V,)`` the model's tokens: int64 ids, or any distinct hashable tokens (a list, tuple or
        object array: stored as a 1-D object array); column ``j`` of the tables below is ``tokens[j]``.
    log_probs: ``(S, V)`` float64 natural-log probability of ``tokens[j]`` from state ``s``
        (``-inf``: impossible).
    eos_log_probs: ``(S,)`` float64 log-probability of ending (``eos``) from state ``s``; ``-inf``
        where impossible (all ``-inf`` when ``eos`` is None).
    next_state: ``(S, V)`` int32 state after emitting ``tokens[j]`` from ``s`` (``-1`` where
        impossible; the eos column may be ``-1`` everywhere: ending needs no next state).
    start: the state of the empty continuation (after the prompt, if any).
    eos: the eos token, as ``tokens`` names it (``None``: no eos column, fixed-length use only).
    """

    tokens: np.ndarray
    log_probs: np.ndarray
    eos_log_probs: np.ndarray
    next_state: np.ndarray
    start: int
    eos: Any

    def __post_init__(self) -> None:
        tok = self.tokens
        if isinstance(tok, (list, tuple)) and tok and all(_is_int(t) for t in tok):
            object.__setattr__(self, "tokens", np.asarray(tok, dtype=np.int64))  # integer ids
        elif isinstance(tok, (list, tuple)) or (isinstance(tok, np.ndarray) and tok.dtype.kind in "OUS"):
            arr = np.empty(len(tok), dtype=object)  # the model's own tokens, kept as given
            for j, t in enumerate(tok):
                arr[j] = t.item() if isinstance(tok, np.ndarray) and tok.dtype.kind in "US" else t
            object.__setattr__(self, "tokens", arr)

    @property
    def int_tokens(self) -> bool:
        """Whether ``tokens`` are integer ids (else the model's own hashable tokens)."""
        return self.tokens.dtype != object

    @property
    def n_states(self) -> int:
        """S, the number of states."""
        return int(self.log_probs.shape[0])

    @property
    def eos_column(self) -> int | None:
        """Column ``j`` with ``tokens[j] == eos``, or None (no eos, or eos not among ``tokens``)."""
        if self.eos is None:
            return None
        if self.int_tokens:
            if not _is_int(self.eos):
                return None
            hit = np.flatnonzero(self.tokens == int(self.eos))
            return int(hit[0]) if len(hit) else None
        want = _key(self.eos, False)
        for j, t in enumerate(self.tokens.tolist()):
            if _key(t, False) == want:
                return j
        return None

    def with_ids(self, token_id: Callable[[Any], int]) -> "FiniteStateTables":
        """The same tables with every token (and ``eos``) replaced by ``token_id(token)``, an int64 id.

        The enumerable calls it with its oracle's mapping, so a model may give its tables in its own
        tokens; the public mapping for other uses is any injective function, e.g.
        ``{t: i for i, t in enumerate(tables.tokens)}.__getitem__``.  ``ValueError`` if two tokens
        get one id.
        """
        ids = np.fromiter((int(token_id(t)) for t in self.tokens.tolist()), dtype=np.int64, count=len(self.tokens))
        if len(np.unique(ids)) != len(ids):
            raise ValueError("token_id maps two tokens of the finite-state tables to one id")
        eos = None if self.eos is None else int(token_id(self.eos))
        return FiniteStateTables(ids, self.log_probs, self.eos_log_probs, self.next_state, self.start, eos)

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
            j = self.eos_column
            if j is not None:
                dead = np.flatnonzero((self.next_state[:, j] < 0) & (self.log_probs[:, j] > -math.inf))
                if len(dead):
                    raise ValueError(f"the eos column has no next state (state {int(dead[0])}): these "
                                     "finite-state tables serve a terminating support only")
            return self.tokens, self.log_probs, self.next_state, np.full(S, -math.inf)
        if self.eos is None:
            raise ValueError("these finite-state tables have no eos: they serve a fixed-length support only")
        j = self.eos_column
        if j is None:
            return self.tokens, self.log_probs, self.next_state, self.eos_log_probs
        keep = np.arange(len(self.tokens)) != j
        return self.tokens[keep], self.log_probs[:, keep], self.next_state[:, keep], self.eos_log_probs

    def state_of(self, prefix: Sequence[int]) -> int:
        """The state reached from ``start`` along ``prefix`` (the tables' tokens); ``ValueError`` if a
        token is not a column or is impossible on the way."""
        col = _columns(self)
        s = self.start
        for i, t in enumerate(prefix):
            j = col.get(_key(t, self.int_tokens))
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
        if tok.ndim != 1 or tok.dtype not in (np.int64, object):
            raise ValueError(f"tokens must be 1-D int64 ids or the model's own tokens, got shape {tok.shape} "
                             f"dtype {tok.dtype}")
        V = len(tok)
        if self.int_tokens:
            if len(np.unique(tok)) != V:
                raise ValueError("tokens has duplicate ids")
        else:
            try:
                n_distinct = len(_columns(self))
            except TypeError as exc:
                raise TypeError(f"tokens must be hashable: {exc}") from None
            if n_distinct != V:
                raise ValueError("tokens has duplicate tokens")
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
        if self.eos is not None and self.int_tokens:
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
        need = lp > -math.inf
        if j is not None:
            need[:, j] = False  # ending needs no next state (a fixed-length use checks it in step_tables)
        if (nxt[need] < 0).any():
            raise ValueError("next_state is -1 for a token of positive probability")
        return self


def _is_int(t: Any) -> bool:
    return isinstance(t, (int, np.integer)) and not isinstance(t, (bool, np.bool_))


def _key(t: Any, int_tokens: bool) -> Any:
    """A token as the column map keys it: ints for integer tables, the token itself (with its type,
    so that ``1`` and ``True`` or ``1.0`` stay apart) otherwise."""
    if isinstance(t, np.generic):
        t = t.item()
    if int_tokens:
        return int(t) if _is_int(t) else ("not an id", t)
    return (type(t), t)


def _columns(tables: "FiniteStateTables") -> dict:
    """``{token key: column}`` of the tables."""
    it = tables.int_tokens
    return {_key(t, it): j for j, t in enumerate(tables.tokens.tolist())}


@dataclass(frozen=True)
class FiniteStateCheck:
    """What :func:`check_finite_state` verified: prefixes compared, states they reached, depth."""

    prefixes: int
    states_seen: int
    depth: int


def _row(out: Any, col: dict, n_cols: int, int_tokens: bool, prefix: tuple) -> np.ndarray:
    """A model's raw ``next_logprobs`` output as a float64 row over the tables' columns (``col``:
    token key -> column); a possible token that is no column raises ``ValueError``."""
    row = np.full(n_cols, -math.inf)
    if isinstance(out, np.ndarray) and out.ndim == 1 and out.dtype.kind == "f":
        pairs: Any = enumerate(out.tolist())  # a dense row: the token is the index
    elif isinstance(out, tuple) and len(out) == 2 and all(isinstance(a, np.ndarray) for a in out):
        pairs = zip(out[0].tolist(), np.asarray(out[1], dtype=np.float64).tolist())
    elif isinstance(out, dict):
        pairs = out.items()
    else:
        pairs = out
    for t, lp in pairs:
        j = col.get(_key(t, int_tokens))
        if j is None:
            if float(lp) > -math.inf:
                raise ValueError(f"finite-state tables disagree with the model after prefix {prefix!r}: token "
                                 f"{t!r} has log-prob {float(lp)!r} from the model and no column in the tables")
            continue
        row[j] = float(lp)
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
    ``next_logprobs`` returns a dense float array (integer tokens), a ``(tokens, log_probs)`` pair,
    a ``{token: log_prob}`` dict or ``[(token, log_prob), ...]``, in the tables' own tokens (ids or
    the model's hashable tokens; ``support`` is then e.g. ``Support.terminating("\\0", 0, cap)``: only
    its kind and cap are read).  Raises ``ValueError`` naming the first prefix whose row or state
    differs.  Impossible tokens (``-inf`` on both sides) agree, without a floating-point warning.
    """
    tables.validate()
    max_prefixes = exact_int("max_prefixes", max_prefixes, minimum=1)
    d = support.leaf_level if depth is None else exact_int("depth", depth, minimum=0)
    d = min(d, support.leaf_level)
    toks, lp, nxt, end = tables.step_tables(support.is_terminating)
    it = tables.int_tokens
    col = _columns(tables)
    n_cols = len(tables.tokens)
    extra_eos = tables.eos is not None and tables.eos_column is None
    if extra_eos:  # the ending column, outside the table's tokens
        col[_key(tables.eos, it)] = n_cols
        n_cols += 1
    toks = toks.tolist()
    seen: set[int] = set()
    level: list[tuple[tuple, int]] = [((), tables.start)]
    n = 0
    for length in range(d + 1):
        nxt_level: list[tuple[tuple, int]] = []
        for prefix, s in level:
            if n >= max_prefixes:
                return FiniteStateCheck(n, len(seen), length)
            row = _row(next_logprobs(prefix), col, n_cols, it, prefix)
            want = np.full(n_cols, -math.inf)
            want[: len(tables.tokens)] = tables.log_probs[s]
            if extra_eos:
                want[-1] = tables.eos_log_probs[s]
            with np.errstate(invalid="ignore"):  # -inf - -inf: both impossible, equal already
                same = (row == want) | (np.abs(row - want) <= atol)
            if not same.all():
                j = int(np.flatnonzero(~same)[0])
                t = tables.eos if j == len(tables.tokens) else tables.tokens[j]
                t = int(t) if it else t
                raise ValueError(f"finite-state tables disagree with the model after prefix {prefix!r}: "
                                 f"token {t!r} has log-prob {row[j]!r} from the model, {want[j]!r} from "
                                 f"state {s}")
            n += 1
            seen.add(s)
            if length < d:
                for j in np.flatnonzero(lp[s] > -math.inf).tolist():
                    nxt_level.append((prefix + (int(toks[j]) if it else toks[j],), int(nxt[s, j])))
        level = nxt_level
    return FiniteStateCheck(n, len(seen), d)
