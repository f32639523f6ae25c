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
    constructs ``interegular`` supports; anchors and look-arounds are refused), except that
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
        fixed = _for_interegular(pattern)
        try:
            fsm = interegular.parse_pattern(fixed).to_fsm()
        except interegular.Unsupported as exc:
            raise ValueError(f"pattern {pattern!r} cannot be compiled: unsupported construct {exc} (a pattern "
                             "always matches the whole text; anchors and look-arounds are not supported)") from None
        except Exception as exc:
            raise ValueError(f"pattern {pattern!r} cannot be compiled: {str(exc) or type(exc).__name__}") from None
        self.pattern = pattern
        self.name = name or f"regex({pattern})"
        self.text = self.checked_text(text)
        self._alphabet = fsm.alphabet
        self._map = {q: dict(row) for q, row in fsm.map.items()}
        self._finals = frozenset(fsm.finals)
        self.start = fsm.initial
        self._dist = steps_to_accept(self._map, self._finals)

    def identity(self) -> str:
        """``name``, and the pattern where the name does not spell it."""
        own = f"regex({self.pattern})"
        return own if self.name == own else f"{self.name} [{own}]"

    def __getstate__(self) -> dict:
        d = dict(self.__dict__)
        d.pop("_alphabet")
        return d

    def __setstate__(self, d: dict) -> None:
        import interegular

        self.__dict__.update(d)
        self._alphabet = interegular.parse_pattern(_for_interegular(self.pattern)).to_fsm().alphabet

    def step_char(self, state: Any, ch: str) -> Any:
        return self._map.get(state, {}).get(self._alphabet[ch])

    def accepts(self, state: Any) -> bool:
        return state in self._finals

    def live(self, state: Any) -> bool:
        return state in self._dist

    def min_chars(self, state: Any) -> int:
        return self._dist.get(state, 0)


def _for_interegular(pattern: str) -> str:
    """``pattern`` as ``interegular`` reads it the way Python does: look-arounds refused (found in
    Python's own parse tree; ``interegular`` compiles some to another language), and a character
    class's leading ``]`` (a literal to Python, the class's end to ``interegular``) escaped, the
    rewrite checked to give Python's parse tree unchanged."""
    import re._parser as sre  # Python's own parser (3.11+)

    tree = sre.parse(pattern)
    if _has(tree, (sre.ASSERT, sre.ASSERT_NOT)):
        raise ValueError(f"pattern {pattern!r} cannot be compiled: look-arounds ((?=...), (?!...), (?<=...), (?<!...)) "
                         "are not supported (a pattern always matches the whole text)")
    out, i, n = [], 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "\\":
            out.append(pattern[i:i + 2])
            i += 2
        elif c == "[":  # a class: its first ']' (after an optional '^') is a literal, then up to its end
            j = i + 1 + (pattern[i + 1:i + 2] == "^")
            out.append(pattern[i:j])
            if pattern[j:j + 1] == "]":
                out.append("\\]")
                j += 1
            while j < n and pattern[j] != "]":
                out.append(pattern[j:j + 2] if pattern[j] == "\\" else pattern[j])
                j += 2 if pattern[j] == "\\" else 1
            i = j
        else:
            out.append(c)
            i += 1
    fixed = "".join(out)
    if fixed != pattern and repr(sre.parse(fixed).data) != repr(tree.data):  # pragma: no cover - a safeguard
        raise ValueError(f"pattern {pattern!r} cannot be compiled: its character classes could not be read as Python reads them")
    return fixed


def _has(tree: Any, ops: tuple) -> bool:
    """Whether Python's parse ``tree`` (a ``SubPattern`` or any nesting of them) holds one of ``ops``."""
    if isinstance(tree, (list, tuple)) or hasattr(tree, "data"):
        items = tree.data if hasattr(tree, "data") else tree
        for item in items:
            if isinstance(item, tuple) and len(item) == 2 and item[0] in ops:
                return True
            if isinstance(item, (list, tuple)) or hasattr(item, "data"):
                if _has(item, ops):
                    return True
    return False
