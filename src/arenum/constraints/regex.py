"""A regular expression as a constraint: the strings it matches in full, compiled to a finite
automaton by the ``interegular`` library (the ``constraints`` extra), read character by character
over each token's text (:class:`arenum.TextConstraint`)."""
from __future__ import annotations

import re
from typing import Any, Callable

from ..step import TextConstraint, steps_to_accept

__all__ = ["Regex"]


class Regex(TextConstraint):
    """Sequences whose text ``pattern`` matches in full (Python ``re.fullmatch`` semantics of the
    constructs ``interegular`` supports; anchors and look-arounds are refused by it), except that
    ``\\w``, ``\\d``, ``\\s`` and their negations are ASCII classes, as under ``re.ASCII`` (``\\w`` does not
    match ``é``, ``\\d`` not ``٣``): write other characters out, e.g. ``[\\wé]``.

    Live states and each state's fewest characters to a match are precomputed, so a prefix is
    pruned as soon as no completion can match.

    >>> r = Regex(r"[a-z]+[0-9]{2}")
    >>> from arenum import why_rejected
    >>> why_rejected(r, "abc12") is None, why_rejected(r, "abc1") is None, why_rejected(r, "1") is None
    (True, False, False)
    """

    def __init__(self, pattern: str, *, text: Callable[[Any], str] | None = None, name: str | None = None) -> None:
        if not isinstance(pattern, str):
            raise TypeError(f"pattern must be a string, got {type(pattern).__name__}")
        try:
            import interegular
        except ImportError:  # pragma: no cover - the extra is part of the test environment
            raise ImportError("a regular-expression constraint needs the interegular package: "
                              "pip install 'arenum[constraints]'") from None
        try:
            re.compile(pattern)
        except re.error as exc:  # Python's parser names the reason and the position
            raise ValueError(f"pattern {pattern!r} cannot be compiled: {exc}") from None
        try:
            fsm = interegular.parse_pattern(pattern).to_fsm()
        except interegular.Unsupported as exc:
            raise ValueError(f"pattern {pattern!r} cannot be compiled: unsupported construct {exc} (a pattern "
                             "always matches the whole text; anchors and look-arounds are not supported)") from None
        except Exception as exc:
            raise ValueError(f"pattern {pattern!r} cannot be compiled: {str(exc) or type(exc).__name__}") from None
        self.pattern = pattern
        self.name = name or f"regex({pattern})"
        self.text = text
        self._alphabet = fsm.alphabet
        self._map = {q: dict(row) for q, row in fsm.map.items()}
        self._finals = frozenset(fsm.finals)
        self.start = fsm.initial
        self._dist = steps_to_accept(self._map, self._finals)

    def __getstate__(self) -> dict:
        d = dict(self.__dict__)
        d.pop("_alphabet")
        return d

    def __setstate__(self, d: dict) -> None:
        import interegular

        self.__dict__.update(d)
        self._alphabet = interegular.parse_pattern(self.pattern).to_fsm().alphabet

    def step_char(self, state: Any, ch: str) -> Any:
        return self._map.get(state, {}).get(self._alphabet[ch])

    def accepts(self, state: Any) -> bool:
        return state in self._finals

    def live(self, state: Any) -> bool:
        return state in self._dist

    def min_chars(self, state: Any) -> int:
        return self._dist.get(state, 0)
