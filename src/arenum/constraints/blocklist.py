"""A blocklist as a constraint: every string except the listed ones.

The automaton is a trie of the listed strings (by characters of the tokens' text): a sequence is
rejected exactly when its whole text is a listed string, so a blocklisted password is removed from
the support and every other sequence keeps its rank minus the listed strings that outrank it.
"""
from __future__ import annotations

import hashlib
from typing import Any, Callable, Iterable

from ..step import TextConstraint

__all__ = ["Blocklist"]

_OFF = -1  # the text has left the trie: no listed string starts with it


class Blocklist(TextConstraint):
    """Sequences whose text is none of ``words`` (exact, case-sensitive strings).

    >>> b = Blocklist(["123456", "password"])
    >>> from arenum import why_rejected
    >>> why_rejected(b, "password") is None, why_rejected(b, "password1") is None
    (False, True)
    """

    def __init__(self, words: Iterable[str], *, text: Callable[[Any], str] | None = None,
                 name: str | None = None) -> None:
        if isinstance(words, (str, bytes)):  # one string would block its characters, one by one
            raise TypeError(f"words must be a list of strings, got one {type(words).__name__}: {str(words)[:40]!r}")
        if not hasattr(words, "__iter__"):
            raise TypeError(f"words must be a list of strings, got {type(words).__name__} {words!r}")
        children: list[dict[str, int]] = [{}]
        final: set[int] = set()
        h = hashlib.sha256()
        n = 0
        for w in sorted(set(words)):
            if not isinstance(w, str):
                raise TypeError(f"blocklist words must be strings, got {type(w).__name__} {w!r}")
            node = 0
            for ch in w:
                nxt = children[node].get(ch)
                if nxt is None:
                    nxt = children[node][ch] = len(children)
                    children.append({})
                node = nxt
            final.add(node)
            h.update(w.encode("utf-8", "surrogatepass") + b"\0")
            n += 1
        self._children, self._final = children, frozenset(final)
        self.size = n
        self.start = 0
        self.text = self.checked_text(text)
        self._own = f"blocklist({n} words, sha256 {h.hexdigest()[:12]})"
        self.name = name or self._own

    def identity(self) -> str:
        """``name``, and the words' count and digest where the name does not spell them."""
        return self._own if self.name == self._own else f"{self.name} [{self._own}]"

    @classmethod
    def from_file(cls, path: str, *, text: Callable[[Any], str] | None = None,
                  encoding: str = "utf-8") -> "Blocklist":
        """One word per line (a trailing newline or carriage return is not part of the word; empty
        lines are skipped), in ``encoding``: a byte that is not refuses the file in one line (a word
        with it kept as a stray byte could never match the model's text)."""
        import os

        with open(path, "rb") as f:
            data = f.read()
        try:
            words = data.decode(encoding).split("\n")
        except UnicodeDecodeError as e:
            line = data[: e.start].count(b"\n") + 1
            raise ValueError(f"blocklist {path!r} is not {encoding} text (line {line}, byte {e.start}): "
                             "convert it, or give its encoding") from None
        words = [w.rstrip("\r") for w in words]

        b = cls([w for w in words if w], text=text)
        b.name = f"blocklist({os.path.basename(path)}: {b.name[len('blocklist('):]}"
        return b

    def step_char(self, state: Any, ch: str) -> Any:
        if state == _OFF:
            return _OFF
        return self._children[state].get(ch, _OFF)

    def accepts(self, state: Any) -> bool:
        return state not in self._final
