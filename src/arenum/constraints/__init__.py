"""Constraints a user builds by name: password policies, regular expressions, blocklists.

Each builder returns an :class:`arenum.Constraint` (a deterministic automaton over the model's
tokens, :mod:`arenum.step.constraint`) to pass as ``constraint=`` to any enumerable; ``a & b``
intersects two. Every builder here reads a token's *text* character by character, so lengths are in
characters and a multi-character token must advance the automaton with its whole text:
:func:`token_text` gives the text function of a model whose tokens are not their own text (a PCFG's
token ids, a tokenizer's ids).

- :func:`policy` / :class:`Policy`: password policies by name (``basic8``, ``basic16``,
  ``2class12``, ``3class12``, ``comprehensive8``) or by parts (lengths in characters, classes);
- :class:`Regex`: a regular expression matched in full (compiled by ``interegular``);
- :class:`Blocklist`: every string except the listed ones;
- :func:`build`: the intersection of the above from plain options (the command line's flags);
- :func:`accepted_mass` / :func:`conditional_mass_above`: the accepted mass and masses conditional on
  acceptance.
"""
from __future__ import annotations

from typing import Any, Callable

from ..step import AllOf, Automaton, Constraint, TextConstraint, why_rejected
from .blocklist import Blocklist
from .mass import accepted_mass, conditional_mass_above
from .policy import CLASSES, PRESETS, Policy, char_class, policy
from .regex import Regex

__all__ = ["AllOf", "Automaton", "Blocklist", "CLASSES", "Constraint", "PRESETS", "Policy", "Regex",
           "TextConstraint", "accepted_mass", "build", "char_class", "conditional_mass_above", "policy",
           "token_text", "why_rejected"]


def token_text(model: Any) -> tuple[Callable[[Any], str] | None, int | None]:
    """``(text, longest)``: the text of one token of ``model`` and the most characters a token has
    (``None``: unknown), from the model's ``token_text()`` (an n-gram: its symbol of each id; a PCFG:
    a segment's string, nothing for a structure; a Hugging Face oracle: the tokenizer's decoding of
    one id); ``(None, None)`` for a model without one (each token is its own text). The adapters'
    ``enumerable(constraint=...)`` binds it by themselves (:func:`arenum.step.bind_text`)."""
    f = getattr(model, "token_text", None)
    return f() if callable(f) else (None, None)


def build(*, policy: str | None = None, min_chars: int | None = None, max_chars: int | None = None,
          classes: int | None = None, required: tuple[str, ...] = (), regex: str | None = None,
          blocklist: str | list[str] | None = None, text: Callable[[Any], str] | None = None,
          longest_token: int | None = None) -> Constraint | None:
    """The intersection of the constraints named by these options (``None`` when none is given):
    a preset ``policy`` name; a :class:`Policy` from ``min_chars``/``max_chars``/``classes``/
    ``required`` (lengths in characters); a ``regex`` matched in full; a ``blocklist`` (a file
    path, one word per line, or a list of words). ``text``/``longest_token``: see
    :func:`token_text`."""
    from .policy import policy as preset

    parts: list = []
    if policy is not None:
        parts.append(preset(policy, text=text))
    if min_chars is not None or max_chars is not None or classes is not None or required:
        parts.append(Policy(min_len=min_chars or 0, max_len=max_chars, min_classes=classes or 0,
                            required=required, text=text))
    if regex is not None:
        parts.append(Regex(regex, text=text))
    if blocklist is not None:
        if not isinstance(blocklist, (str, list, tuple)):
            raise TypeError(f"blocklist must be a file path or a list of words, got {type(blocklist).__name__} {blocklist!r}")
        parts.append(Blocklist.from_file(blocklist, text=text) if isinstance(blocklist, str)
                     else Blocklist(blocklist, text=text))
    for p in parts:
        p.longest_token = longest_token
    if not parts:
        return None
    return parts[0] if len(parts) == 1 else AllOf(*parts)
