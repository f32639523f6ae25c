"""The PCFG's grammar: character classes, segmentation, structures, and the weighted counts ``fit`` makes.

A password is split into maximal runs of one character class (Weir et al. 2009): letters ``L``
(``str.isalpha``), digits ``D`` (the ASCII digits ``0-9``) and symbols ``S`` (every other character).
Each run is a *segment*; the password's *structure* is the list of its segments' ``(class, length)``,
written ``"L8D2"``.  Segmentation is a function of the string, and two neighbouring segments never
share a class, so the string is the concatenation of its segments and nothing else splits it the same
way: the map string -> (structure, segments) is one-to-one (``docs/pcfg.md``).
"""
from __future__ import annotations

import re
from typing import Any, Iterable, Sequence

import numpy as np

from ..ngram.fit import check_weights

__all__ = ["CLASSES", "char_class", "segments", "structure_of", "structure_name", "parse_structure",
           "Counts", "count_corpus"]

CLASSES = ("L", "D", "S")
_DIGITS = frozenset("0123456789")
_NAME = re.compile(r"([LDS])([1-9][0-9]*)")


def char_class(c: str) -> str:
    """``"L"`` for a letter (``c.isalpha()``), ``"D"`` for an ASCII digit, ``"S"`` for anything else."""
    if c in _DIGITS:
        return "D"
    return "L" if c.isalpha() else "S"


def segments(s: str) -> list[tuple[str, str]]:
    """The maximal runs of one class: ``[(class, run), ...]``, concatenating back to ``s``.

    >>> segments("Tr0ub4dor&3")
    [('L', 'Tr'), ('D', '0'), ('L', 'ub'), ('D', '4'), ('L', 'dor'), ('S', '&'), ('D', '3')]
    """
    out: list[tuple[str, str]] = []
    start = 0
    prev = None
    for i, c in enumerate(s):
        k = char_class(c)
        if k != prev:
            if prev is not None:
                out.append((prev, s[start:i]))
            prev, start = k, i
    if prev is not None:
        out.append((prev, s[start:]))
    return out


def structure_of(segs: Sequence[tuple[str, str]]) -> tuple[tuple[str, int], ...]:
    """The structure of a segmentation: ``((class, length), ...)``."""
    return tuple((k, len(run)) for k, run in segs)


def structure_name(struct: Sequence[tuple[str, int]]) -> str:
    """``"L8D2"`` for ``(("L", 8), ("D", 2))``; ``""`` for the empty password's structure."""
    return "".join(f"{k}{n}" for k, n in struct)


def parse_structure(name: str) -> tuple[tuple[str, int], ...]:
    """Inverse of :func:`structure_name`; ``ValueError`` unless it is a structure a segmentation makes
    (classes in ``LDS``, lengths ``>= 1``, no two neighbours of one class)."""
    if not isinstance(name, str):
        raise ValueError(f"a structure name must be a str, got {type(name).__name__}")
    parts = _NAME.findall(name)
    if structure_name([(k, int(n)) for k, n in parts]) != name:
        raise ValueError(f"{name!r:.60} is not a structure name like 'L8D2'")
    struct = tuple((k, int(n)) for k, n in parts)
    for a, b in zip(struct, struct[1:]):
        if a[0] == b[0]:
            raise ValueError(f"structure {name!r:.60} has two neighbouring {a[0]} segments (runs are maximal)")
    return struct


class Counts:
    """Weighted counts of a corpus: structures and, per ``(class, length)`` group, segment strings.

    structures: ``{structure: count}``; groups: ``{(class, length): {string: count}}``;
    n_sequences: the weighted number of passwords.
    """

    def __init__(self) -> None:
        self.structures: dict[tuple, int] = {}
        self.groups: dict[tuple[str, int], dict[str, int]] = {}
        self.n_sequences = 0

    def add(self, s: str, w: int) -> None:
        segs = segments(s)
        st = structure_of(segs)
        self.structures[st] = self.structures.get(st, 0) + w
        for k, run in segs:
            g = self.groups.setdefault((k, len(run)), {})
            g[run] = g.get(run, 0) + w
        self.n_sequences += w


def count_corpus(lines: Iterable[str], weights: Iterable[int] | None, lowercase: bool) -> Counts:
    """Count ``lines`` (one password each, lowercased first with ``lowercase``), item ``i`` counting
    ``weights[i]`` times (a frequency list; :func:`arenum.models.ngram.fit.check_weights` checks them)."""
    if isinstance(lines, (str, bytes)):
        raise TypeError(f"lines must be an iterable of strings (e.g. a list), not a single {type(lines).__name__}")
    try:
        items: list[Any] = list(lines)
    except TypeError:
        raise TypeError(f"lines must be an iterable of strings, got {type(lines).__name__}") from None
    if not items:
        raise ValueError("lines is empty: need at least one password to fit")
    for i, s in enumerate(items):
        if not isinstance(s, str):
            raise TypeError(f"lines[{i}] is {type(s).__name__}, not a str: a PCFG is fitted on strings")
    w = np.ones(len(items), dtype=np.int64) if weights is None else check_weights(weights, len(items))
    counts = Counts()
    for s, c in zip(items, w.tolist()):
        counts.add(s.lower() if lowercase else s, int(c))
    return counts
