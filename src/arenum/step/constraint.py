"""Constraints on the support: a deterministic automaton over the model's tokens.

A :class:`Constraint` is a deterministic automaton read token by token:

- ``start``: the state of the empty prefix (any hashable value);
- ``step(state, token)``: the state after ``token``, or ``None`` when the token is rejected there;
- ``accepts(state)``: whether a sequence may end in ``state``;
- ``live(state)``: whether some continuation from ``state`` can still reach acceptance (default
  ``True``; an :class:`Automaton` precomputes it from its finite table). A step into a state that is
  not live is a rejection: the support is pruned at the first prefix that can no longer be accepted;
- ``min_tokens(state)``: a lower bound on the tokens still needed to reach acceptance (default 0;
  used to prune prefixes that cannot be accepted within the length cap);
- ``name``: a short identity, shown by every answer's caller; ``identity()`` (default ``name``) is
  what a store's manifest keeps: the builders add a digest of what defines them, so two automata
  both named ``"automaton"`` are told apart. A constraint of your own with no ``identity()`` of its
  own is known by its ``name``: give each a name of its own. A ``text`` function is not part of it
  (a model's own, bound by its ``enumerable()``, is covered by the model's fingerprint).

Composed with a model (``AutoregressiveEnumerable(..., constraint=c)``), the support is the model's
support restricted to the accepted sequences: a fixed-length sequence is accepted when its state
after the last token accepts; a terminating sequence ``x + (eos,)`` when its state after ``x``
accepts (``eos`` itself is never stepped). Scores are the model's own (the constraint never
renormalizes): ranks and counts are those of the accepted sequences, masses are masses under the
model (the *unconstrained* measure; divide by the accepted mass for the conditional one).

:class:`TextConstraint` steps a token's whole text character by character (``text(token)``, by
default the token itself as a string): a multi-character token (a PCFG segment, a BPE piece) is
accepted when its whole text advances the automaton. The builders in :mod:`arenum.constraints`
(password policies, regular expressions, blocklists) are text constraints.

This module calls no model: :mod:`arenum.step.constrained` composes a constraint with the step oracle.
"""
from __future__ import annotations

from collections import deque
from typing import Any, Callable, Hashable, Iterable, Mapping, Sequence

from ..support import advance, constraint_live as _live, why_rejected

__all__ = ["Constraint", "TextConstraint", "Automaton", "AllOf", "bind_text", "constraint_identity", "steps_to_accept",
           "why_rejected"]


class Constraint:
    """The automaton protocol (module docstring). Subclass it, or give any object with ``start``,
    ``step``, ``accepts`` and ``name`` (``live`` and ``min_tokens`` are optional)."""

    name: str = "constraint"
    start: Hashable = None

    def step(self, state: Any, token: Any) -> Any:
        """The state after ``token`` from ``state``; ``None``: rejected."""
        raise NotImplementedError

    def accepts(self, state: Any) -> bool:
        """Whether a sequence may end in ``state``."""
        raise NotImplementedError

    def live(self, state: Any) -> bool:
        """Whether acceptance is still reachable from ``state`` (default: always)."""
        return True

    def min_tokens(self, state: Any) -> int:
        """A lower bound on the tokens still needed from ``state`` to acceptance (default 0)."""
        return 0

    def identity(self) -> str:
        """What a store keeps to know this constraint again (module docstring): here ``name``."""
        return self.name

    def __and__(self, other: "Constraint") -> "AllOf":
        return AllOf(self, other)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"


def _min_tokens(c: Any, state: Any) -> int:
    f = getattr(c, "min_tokens", None)
    return 0 if f is None else int(f(state))


class TextConstraint(Constraint):
    """A constraint over characters, stepping each token's whole text: ``step(state, token)`` folds
    :meth:`step_char` over ``text(token)`` (default ``str(token)``; for a tokenizer's ids, pass its
    decoder of one id). A token whose text is empty leaves the state as it is.

    Subclasses define ``start``, :meth:`step_char`, :meth:`accepts` and optionally :meth:`live` and
    :meth:`min_chars` (a lower bound on the characters still needed); ``min_tokens`` is then
    ``ceil(min_chars / longest token)`` when ``longest_token`` (characters) is known, else 0.
    """

    text: Callable[[Any], str] | None = None
    longest_token: int | None = None

    def step_char(self, state: Any, ch: str) -> Any:
        raise NotImplementedError

    @staticmethod
    def checked_text(text: Any) -> Callable[[Any], str] | None:
        """``text`` if it is ``None`` or callable; else ``TypeError`` (found at once, not at a query)."""
        if text is not None and not callable(text):
            raise TypeError(f"text must be a function of a token (or None), got {type(text).__name__} {text!r}")
        return text

    def min_chars(self, state: Any) -> int:
        return 0

    def token_text(self, token: Any) -> str:
        """The text of one token (``text(token)``, default the token itself as a string)."""
        f = self.text
        if f is not None:
            return f(token)
        return token if isinstance(token, str) else str(token)

    def step(self, state: Any, token: Any) -> Any:
        for ch in self.token_text(token):
            state = self.step_char(state, ch)
            if state is None or not self.live(state):
                return None
        return state

    def min_tokens(self, state: Any) -> int:
        n = self.longest_token
        if not n:
            return 0
        return -(-self.min_chars(state) // n)

    def with_text(self, text: Callable[[Any], str] | None, longest_token: int | None = None) -> "TextConstraint":
        """A copy reading each token's text through ``text`` (e.g. a tokenizer's decoder of one id);
        ``longest_token``: the most characters a token has (sharpens the length pruning)."""
        import copy

        out = copy.copy(self)
        out.text, out.longest_token = text, longest_token
        return out


def steps_to_accept(transitions: Mapping[Hashable, Mapping[Any, Hashable]],
                    accepting: Iterable[Hashable]) -> dict[Hashable, int]:
    """``{state: fewest steps to an accepting state}`` of a finite automaton (``transitions[q][token]
    = r``), by a breadth-first search backwards from ``accepting``; a state absent from it cannot
    reach acceptance (it is dead).

    >>> steps_to_accept({0: {"a": 1}, 1: {"b": 2}, 3: {"a": 3}}, [2])
    {2: 0, 1: 1, 0: 2}
    """
    back: dict[Hashable, set] = {}
    for q, row in transitions.items():
        for r in row.values():
            back.setdefault(r, set()).add(q)
    dist = {q: 0 for q in accepting}
    todo = deque(dist)
    while todo:
        r = todo.popleft()
        for q in back.get(r, ()):
            if q not in dist:
                dist[q] = dist[r] + 1
                todo.append(q)
    return dist


class Automaton(Constraint):
    """An explicit finite automaton over tokens: ``transitions[state][token] -> state`` (a missing
    entry rejects), ``accepting`` states. Live states and each state's fewest tokens to acceptance
    are precomputed (one backward search), so the support is pruned at the first dead prefix.

    >>> a = Automaton(0, {0: {"a": 1}, 1: {"b": 0}}, accepting={0}, name="(ab)*")
    >>> a.step(0, "a"), a.step(0, "b"), a.accepts(0), a.min_tokens(1)
    (1, None, True, 1)
    """

    def __init__(self, start: Hashable, transitions: Mapping[Hashable, Mapping[Any, Hashable]],
                 accepting: Iterable[Hashable], *, name: str = "automaton") -> None:
        if not isinstance(name, str) or not name:
            raise TypeError(f"name must be a non-empty string, got {name!r}")
        if not isinstance(transitions, Mapping) or not all(isinstance(r, Mapping) for r in transitions.values()):
            raise TypeError(f"transitions must be a mapping state -> {{token: next state}}, got {short(transitions)}")
        if not hasattr(accepting, "__iter__") or isinstance(accepting, str):
            raise TypeError(f"accepting must be a collection of states, got {short(accepting)}")
        self.start = start
        self.name = name
        self.transitions = {q: dict(row) for q, row in transitions.items()}
        self.accepting = frozenset(accepting)
        self._dist = steps_to_accept(self.transitions, self.accepting)

    def identity(self) -> str:
        """``name`` and a digest of the start, the transitions and the accepting states."""
        rows = sorted((repr(q), sorted((repr(t), repr(r)) for t, r in row.items())) for q, row in self.transitions.items())
        return f"{self.name} [{sha(repr((repr(self.start), rows, sorted(map(repr, self.accepting)))))}]"

    def step(self, state: Any, token: Any) -> Any:
        return self.transitions.get(state, {}).get(token)

    def accepts(self, state: Any) -> bool:
        return state in self.accepting

    def live(self, state: Any) -> bool:
        return state in self._dist

    def min_tokens(self, state: Any) -> int:
        return self._dist.get(state, 0)


class AllOf(Constraint):
    """The intersection of constraints: a sequence is accepted when every one accepts it (states
    are tuples of the parts' states). Also written ``a & b``."""

    def __init__(self, *parts: Any) -> None:
        flat: list = []
        for p in parts:
            flat.extend(p.parts if isinstance(p, AllOf) else [p])
        if not flat:
            raise ValueError("AllOf needs at least one constraint")
        for p in flat:
            for attr in ("step", "accepts"):
                if not callable(getattr(p, attr, None)):
                    raise TypeError(f"constraint {p!r} has no {attr}() method")
        self.parts = tuple(flat)
        self.start = tuple(p.start for p in flat)
        self.name = " & ".join(str(getattr(p, "name", type(p).__name__)) for p in flat)

    def identity(self) -> str:
        return " & ".join(constraint_identity(p) for p in self.parts)

    def step(self, state: Any, token: Any) -> Any:
        out = []
        for p, q in zip(self.parts, state):
            r = p.step(q, token)
            if r is None:
                return None
            out.append(r)
        return tuple(out)

    def accepts(self, state: Any) -> bool:
        return all(p.accepts(q) for p, q in zip(self.parts, state))

    def live(self, state: Any) -> bool:
        return all(_live(p, q) for p, q in zip(self.parts, state))

    def min_tokens(self, state: Any) -> int:
        return max(_min_tokens(p, q) for p, q in zip(self.parts, state))


def constraint_identity(c: Any) -> str:
    """``c.identity()`` where ``c`` has one, else its ``name`` (module docstring); ``TypeError`` for a
    class given where an instance is meant."""
    if isinstance(c, type):
        raise TypeError(f"constraint must be a constraint object, got the class {c.__name__}: make one, e.g. "
                        f"{c.__name__}(...)")
    f = getattr(c, "identity", None)
    return str(f()) if callable(f) else str(getattr(c, "name", type(c).__name__))


def short(x: Any) -> str:
    """``x``'s type and a short repr, for a message."""
    r = repr(x)
    return f"{type(x).__name__} {r if len(r) <= 60 else r[:57] + '...'}"


def sha(text: str) -> str:
    """``sha256`` and the first 16 hex digits of ``text``'s digest."""
    import hashlib

    return "sha256 " + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def bind_text(constraint: Any, text: Callable[[Any], str] | None, longest_token: int | None = None) -> Any:
    """``constraint`` with every :class:`TextConstraint` in it that has no ``text`` of its own reading
    tokens through ``text`` (a model's symbol of each token id): what an adapter's ``enumerable()``
    does, so that ``NGramModel.enumerable(constraint=policy("basic8"))`` counts characters, not the
    digits of token ids. Other constraints are returned as they are."""
    if text is None or constraint is None:
        return constraint
    if isinstance(constraint, AllOf):
        parts = [bind_text(p, text, longest_token) for p in constraint.parts]
        if all(a is b for a, b in zip(parts, constraint.parts)):
            return constraint
        out = AllOf(*parts)
        out.name = constraint.name
        return out
    if isinstance(constraint, TextConstraint) and constraint.text is None:
        return constraint.with_text(text, longest_token or constraint.longest_token)
    return constraint
