"""The declared support of an enumeration: which sequences exist, in one frozen record.

- fixed length (``fixed_len``): every sequence of exactly ``fixed_len`` tokens;
- terminating (``eos``): sequences that end in ``eos``, with ``eos`` nowhere earlier, of length
  ``1 .. cap``.

``constraint`` (optional) restricts either to the sequences a deterministic automaton over tokens
accepts (:mod:`arenum.step.constraint`; a terminating sequence's ``eos`` is not stepped, its state
before ``eos`` must accept).

``branch_cap`` (optional) keeps only the top ``branch_cap`` entries of every step table: the
enumerated *sub-support*; the rest is bounded, never silently dropped (see ``docs/core.md``).

This module does not score anything: it only answers structural questions.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

__all__ = ["Support", "advance", "constraint_live", "why_rejected", "why_zero"]


def constraint_live(c: Any, state: Any) -> bool:
    """Whether the constraint ``c`` can still reach acceptance from ``state`` (``c.live``; default ``True``)."""
    f = getattr(c, "live", None)
    return True if f is None else bool(f(state))


def advance(c: Any, state: Any, token: Any) -> Any:
    """``c.step(state, token)`` unless it rejects or leaves acceptance unreachable (then ``None``)."""
    nxt = c.step(state, token)
    if nxt is None or not constraint_live(c, nxt):
        return None
    return nxt


def why_rejected(c: Any, tokens: Sequence[Any]) -> str | None:
    """Why the constraint ``c`` rejects the token sequence ``tokens`` (``eos`` not included), in
    words; ``None`` when it accepts it."""
    q = c.start
    if not constraint_live(c, q):
        return f"the constraint {c.name} accepts nothing"
    for i, t in enumerate(tokens):
        q = advance(c, q, t)
        if q is None:
            return f"the constraint {c.name} rejects token {t!r} at position {i}"
    if not c.accepts(q):
        return f"the constraint {c.name} does not accept it"
    return None


@dataclass(frozen=True)
class Support:
    """A fixed-length or terminating support (exactly one of ``fixed_len`` / ``eos_id`` is set).

    fixed_len: sequence length of a fixed-length support, else ``None``.
    eos: the end-of-sequence token (as the model names it) of a terminating support, else ``None``.
    eos_id: the oracle's integer id of ``eos`` (``None`` for a fixed-length support).
    cap: the longest sequence (``fixed_len`` for a fixed-length support).
    branch_cap: entries of each step table that are enumerated (``None``: all).
    constraint: the automaton restricting the support (``None``: none), see the module docstring.
    """

    fixed_len: int | None
    eos: Any
    eos_id: int | None
    cap: int
    branch_cap: int | None = None
    constraint: Any = None

    def __post_init__(self) -> None:
        if (self.fixed_len is None) == (self.eos_id is None):
            raise ValueError("exactly one of fixed_len and eos_id must be given")
        if self.fixed_len is not None and self.cap != self.fixed_len:
            raise ValueError(f"a fixed-length support has cap == fixed_len, got {self.cap} != {self.fixed_len}")

    @classmethod
    def fixed(cls, length: int, *, branch_cap: int | None = None, constraint: Any = None) -> "Support":
        """Every sequence of exactly ``length`` tokens (that ``constraint`` accepts)."""
        return cls(length, None, None, length, branch_cap, constraint)

    @classmethod
    def terminating(cls, eos: Any, eos_id: int, cap: int, *, branch_cap: int | None = None,
                    constraint: Any = None) -> "Support":
        """Sequences ending in ``eos`` (id ``eos_id``), ``eos`` nowhere earlier, ``1 <= length <= cap``
        (that ``constraint`` accepts)."""
        return cls(None, eos, eos_id, cap, branch_cap, constraint)

    @property
    def is_terminating(self) -> bool:
        return self.fixed_len is None

    @property
    def leaf_level(self) -> int:
        """Length of the longest prefix that still makes sequences (``cap - 1``)."""
        return self.cap - 1

    def contains(self, sequence: Sequence[Any]) -> bool:
        """Structural membership of a token sequence: its length, and for a terminating support
        ``eos`` last and only last. Says nothing of the sequence's probability."""
        n = len(sequence)
        if self.fixed_len is not None:
            return n == self.fixed_len and self._rejected(sequence) is None
        if n < 1 or n > self.cap:
            return False
        eos = self.eos
        if sequence[-1] != eos:
            return False
        return eos not in sequence[:-1] and self._rejected(sequence[:-1]) is None

    def _rejected(self, tokens: Sequence[Any]) -> str | None:
        """Why the constraint rejects ``tokens`` (eos excluded), or ``None`` (also without one)."""
        return None if self.constraint is None else why_rejected(self.constraint, tokens)

    def why_outside(self, sequence: Sequence[Any]) -> str | None:
        """Why ``sequence`` is not in the support, in words (``None`` when it is): its length against
        the fixed length or the length cap, or where ``eos`` is missing or misplaced."""
        n = len(sequence)
        if self.fixed_len is not None:
            if n != self.fixed_len:
                return f"it has {n} tokens, the fixed length is {self.fixed_len}"
            return self._rejected(sequence)
        if n < 1:
            return f"it is empty (a terminating sequence ends in eos={self.eos!r})"
        if n > self.cap:
            return f"it has {n} tokens, {n - self.cap} past the length cap {self.cap} (eos included)"
        if sequence[-1] != self.eos:
            return f"it does not end in eos={self.eos!r} (append it: a terminating sequence ends in eos)"
        j = next((i for i, t in enumerate(sequence[:-1]) if t == self.eos), None)
        if j is not None:
            return f"eos={self.eos!r} appears at position {j}, before its end"
        return self._rejected(sequence[:-1])

    def is_complete_ids(self, ids: Sequence[int]) -> bool:
        """Whether an id sequence built step by step is a complete sequence of the support."""
        if self.fixed_len is not None:
            return len(ids) == self.fixed_len
        return len(ids) > 0 and ids[-1] == self.eos_id

    def can_extend(self, length: int) -> bool:
        """Whether a prefix of ``length`` tokens (not complete) may take another token."""
        return length < self.cap


def why_zero(seq: tuple, support: Support, tree: Any) -> str:
    """Why ``seq`` has probability 0, in words: outside the declared support, or the first of its
    tokens the model's table does not hold after the ones before it (``tree.steps``, where it has one)."""
    from ._validate import short_repr

    out = support.why_outside(seq)
    if out is not None:
        return f"is outside the declared support: {out}"
    steps = getattr(tree, "steps", None)
    k = len(steps(seq)) - 1 if steps is not None else -1
    if 0 <= k < len(seq):
        return (f"has probability 0 (its token {seq[k]!r} at position {k} is not in the model's table after "
                f"{short_repr(seq[:k])})")
    return "has probability 0"
