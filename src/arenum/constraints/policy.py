"""Password policies as constraints: a length in characters and character classes.

The four classes (the usual ones of password-policy studies): ``lower`` (a lowercase letter),
``upper`` (an uppercase letter), ``digit`` (an ASCII digit ``0-9``, as the PCFG's segments),
``symbol`` (anything else, space included). A :class:`Policy` counts characters, not tokens: a
token of several characters (a PCFG segment, a BPE piece) adds all of them.

Presets (:data:`PRESETS`, the policies of the password-guessing literature; comprehensive8 without
its dictionary check):

========================  ==================================================
``basic8``                at least 8 characters
``basic16``               at least 16 characters
``2class12``              at least 12 characters, at least 2 of the 4 classes
``3class12``              at least 12 characters, at least 3 of the 4 classes
``comprehensive8``        at least 8 characters, all 4 classes
========================  ==================================================
"""
from __future__ import annotations

from typing import Any, Callable, Iterable

from ..step import TextConstraint

__all__ = ["CLASSES", "PRESETS", "Policy", "policy", "char_class"]

CLASSES = ("lower", "upper", "digit", "symbol")
_DONE = 0b1111  # the class mask once the class rule is met (every class counted as seen)

PRESETS: dict[str, dict[str, Any]] = {
    "basic8": dict(min_len=8),
    "basic16": dict(min_len=16),
    "2class12": dict(min_len=12, min_classes=2),
    "3class12": dict(min_len=12, min_classes=3),
    "comprehensive8": dict(min_len=8, min_classes=4),
}


def char_class(ch: str) -> int:
    """The class of one character: 0 lower, 1 upper, 2 digit, 3 symbol (module docstring)."""
    if "0" <= ch <= "9":  # ASCII: '²' and '③' are symbols (str.isdigit would call them digits)
        return 2
    if ch.isalpha():
        if ch.islower():
            return 0
        if ch.isupper():
            return 1
    return 3


class Policy(TextConstraint):
    """Strings of ``min_len .. max_len`` characters holding at least ``min_classes`` of the four
    classes and every class in ``required`` (names from :data:`CLASSES`).

    States are ``(characters so far, capped, classes seen as a bit mask)``, the mask collapsed to one
    value once the class rule is met: at most ``(max(min_len, max_len) + 2) * 16`` states (``min_len
    + 1`` for a length-only policy), so the certified DP's product with a model stays small.
    ``text``: a token's text (default: the token itself); see :class:`arenum.TextConstraint`.

    >>> p = Policy(min_len=3, min_classes=2)
    >>> from arenum import why_rejected
    >>> why_rejected(p, "ab1") is None, why_rejected(p, "abc") is None
    (True, False)
    """

    def __init__(self, *, min_len: int = 0, max_len: int | None = None, min_classes: int = 0,
                 required: Iterable[str] = (), name: str | None = None,
                 text: Callable[[Any], str] | None = None) -> None:
        for k, v in (("min_len", min_len), ("min_classes", min_classes)):
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise ValueError(f"{k} must be an integer >= 0, got {v!r}")
        if max_len is not None and (not isinstance(max_len, int) or isinstance(max_len, bool) or max_len < 1):
            raise ValueError(f"max_len must be a positive integer or None, got {max_len!r}")
        if max_len is not None and max_len < min_len:
            raise ValueError(f"max_len={max_len} is below min_len={min_len}")
        if min_classes > 4:
            raise ValueError(f"min_classes must be in 0..4 (there are 4 classes), got {min_classes}")
        if isinstance(required, str) or not hasattr(required, "__iter__"):
            raise TypeError(f"required must be a list of class names from {CLASSES}, got {type(required).__name__} "
                            f"{required!r}" + (f" (write [{required!r}])" if isinstance(required, str) else ""))
        req = tuple(required)
        bad = [c for c in req if c not in CLASSES]
        if bad:
            raise ValueError(f"required classes must be among {CLASSES}, got {bad[0]!r}")
        self.min_len, self.max_len, self.min_classes = min_len, max_len, min_classes
        self.required = tuple(c for c in CLASSES if c in req)
        need = max(min_classes, len(self.required))  # a character of each class the rule needs
        if max_len is not None and max_len < need:
            raise ValueError(f"this policy accepts nothing: {need} character classes need {need} characters, "
                             f"max_len={max_len}")
        self._req = sum(1 << CLASSES.index(c) for c in self.required)
        self._sat = max_len + 1 if max_len is not None else min_len  # counts saturate past this
        self.text = self.checked_text(text)
        self.start = (0, _DONE if self._missing_classes(0) == 0 else 0)
        self.name = name or self._describe()

    def identity(self) -> str:
        """``name``, and the rules where the name does not spell them."""
        own = self._describe()
        return own if self.name == own else f"{self.name} [{own}]"

    def _describe(self) -> str:
        parts = [f"min_len={self.min_len}"] if self.min_len else []
        if self.max_len is not None:
            parts.append(f"max_len={self.max_len}")
        if self.min_classes:
            parts.append(f"classes>={self.min_classes}")
        if self.required:
            parts.append("required=" + "+".join(self.required))
        return "policy(" + ", ".join(parts) + ")"

    def step_char(self, state: Any, ch: str) -> Any:
        n, mask = state
        n += 1
        if self.max_len is not None and n > self.max_len:
            return None
        mask |= 1 << char_class(ch)
        if self._missing_classes(mask) == 0:
            mask = _DONE  # the class rule is met: one state, whatever the classes (a smaller product)
        return (min(n, self._sat), mask)

    def _missing_classes(self, mask: int) -> int:
        have = bin(mask).count("1")
        return max(self.min_classes - have, bin(self._req & ~mask).count("1"))

    def min_chars(self, state: Any) -> int:
        n, mask = state
        return max(self.min_len - n, self._missing_classes(mask), 0)

    def accepts(self, state: Any) -> bool:
        return self.min_chars(state) == 0

    def live(self, state: Any) -> bool:
        if self.max_len is None:
            return True
        return state[0] + self.min_chars(state) <= self.max_len


def policy(name: str, *, text: Callable[[Any], str] | None = None) -> Policy:
    """The preset policy ``name`` (one of :data:`PRESETS`)."""
    if not isinstance(name, str):
        raise TypeError(f"policy must be a preset name ({', '.join(PRESETS)}), got {type(name).__name__} {name!r}")
    if name not in PRESETS:
        raise ValueError(f"policy must be one of {', '.join(PRESETS)}, got {name!r}")
    return Policy(**PRESETS[name], name=name, text=text)
