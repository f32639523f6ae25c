"""The vocabulary: the model's tokens <-> the int64 ids every table and tree holds.

Integer mode: the model's tokens are integers (``int``/numpy integers, not ``bool``) and each is its
own id. Object mode: any hashable token, interned in order of first sight (ids ``0, 1, ..``). The mode
is decided by the first token seen (``eos``, a table's first token, or integer/dense columns) and
never changes.

The JSON codec of tokens (:func:`encode_token`, :func:`decode_token`: ``str``, ``bytes`` or ``int``)
is how a store's manifest and journal and a shard plan write tokens.

This module calls no model and parses no table: :mod:`arenum.step.tables` maps a table's tokens
through :meth:`Vocab.ids`; the step oracle owns one ``Vocab``; the prefix tree, stores and shard
plans read it (``tree.vocab``).
"""
from __future__ import annotations

import base64
import numbers
from typing import Any, Iterable, Sequence

import numpy as np

from .._validate import INT64_MAX

__all__ = ["Vocab", "encode_token", "decode_token", "is_int_token"]

_INT64_MIN = -INT64_MAX - 1


def is_int_token(t: Any) -> bool:
    """Whether ``t`` is an integer token (``bool`` is not)."""
    return isinstance(t, numbers.Integral) and not isinstance(t, bool)


def encode_token(t: Any) -> list:
    """A JSON form of a token (``str``, ``bytes`` or ``int``); other tokens raise ``ValueError``."""
    if isinstance(t, bool):
        raise ValueError(f"store: token {t!r} cannot be stored (str, bytes or int tokens only)")
    if isinstance(t, str):
        return ["s", t]
    if isinstance(t, (int, np.integer)):
        return ["i", int(t)]
    if isinstance(t, bytes):
        return ["b", base64.b64encode(t).decode("ascii")]
    raise ValueError(f"store: token {t!r} cannot be stored (str, bytes or int tokens only)")


def decode_token(x: list) -> Any:
    """Inverse of :func:`encode_token`."""
    kind, v = x
    return v if kind == "s" else int(v) if kind == "i" else base64.b64decode(v)


class Vocab:
    """Token <-> id map of one model (module docstring). ``int_mode``: ``None`` until decided."""

    __slots__ = ("int_mode", "_tok2id", "_id2tok")

    def __init__(self) -> None:
        self.int_mode: bool | None = None
        self._tok2id: dict[Any, int] = {}
        self._id2tok: list[Any] = []

    def __len__(self) -> int:
        """Tokens interned (0 in integer mode)."""
        return len(self._id2tok)

    # ------------------------------------------------------------------ tokens -> ids
    def id(self, token: Any, *, intern: bool = True) -> int | None:
        """Integer id of ``token`` (``None`` if unknown and ``intern`` is False); decides the mode
        if undecided."""
        if self.int_mode is None:
            self.int_mode = is_int_token(token)
        if self.int_mode:
            if not is_int_token(token):
                raise TypeError(f"token {token!r} is not an integer, but this model's tokens are integers")
            t = int(token)
            if not _INT64_MIN <= t <= INT64_MAX:
                raise ValueError(f"token id {t} does not fit in int64 (integer ids must be in [-2**63, 2**63))")
            return t
        try:
            return self._tok2id[token]
        except KeyError:
            if not intern:
                return None
            i = len(self._id2tok)
            self._id2tok.append(token)  # first: an interrupt in between leaves an unused entry, no dangling id
            self._tok2id[token] = i
            return i
        except TypeError:
            raise TypeError(f"token {token!r} is not hashable") from None

    def ids(self, toks: list) -> np.ndarray:
        """int64 ids of a list of tokens (a table's), new tokens interned; the mode is decided by
        the first token if undecided. Same checks and errors as :meth:`id`, token by token."""
        if toks and self.int_mode is None:
            self.int_mode = is_int_token(toks[0])
        if self.int_mode:
            for t in toks:
                if type(t) is not int:  # rare: numpy integers, bools, others: checked one by one
                    return np.fromiter((self.id(t) for t in toks), np.int64, len(toks))
            try:
                return np.array(toks, np.int64)
            except OverflowError:
                return np.fromiter((self.id(t) for t in toks), np.int64, len(toks))
        get = self._tok2id.get
        try:
            out = [get(t) for t in toks]
        except TypeError:
            for t in toks:
                self.id(t)  # raises for the unhashable one
            raise  # pragma: no cover
        if None in out:
            out = [self.id(t) for t in toks]
        return np.array(out, np.int64)

    def int_tokens(self) -> bool:
        """Integer columns or tokens seen: integer mode if undecided; whether ids are the tokens."""
        if self.int_mode is None:
            self.int_mode = True
        return self.int_mode

    def ids_of(self, seq: Sequence[Any]) -> list[int | None]:
        """Ids of a user sequence; ``None`` for a token the model never produced (nothing interned)."""
        if self.int_mode is None:
            return [None] * len(seq)
        if self.int_mode:
            return [int(t) if is_int_token(t) else None for t in seq]
        out: list[int | None] = []
        for t in seq:
            try:
                out.append(self._tok2id.get(t))
            except TypeError:
                raise TypeError(f"token {t!r} is not hashable") from None
        return out

    # ------------------------------------------------------------------ ids -> tokens
    def token(self, tid: int) -> Any:
        """Inverse of :meth:`id`."""
        return int(tid) if self.int_mode else self._id2tok[int(tid)]

    def tokens(self, ids: Iterable[int]) -> tuple:
        """Token tuple for an iterable of ids."""
        if self.int_mode:
            return tuple(map(int, ids))
        return tuple(map(self._id2tok.__getitem__, map(int, ids)))

    # ------------------------------------------------------------------ state (stores, plans)
    def state(self) -> tuple[bool | None, list]:
        """``(int_mode, interned tokens in id order)`` (the list is empty in integer mode)."""
        return self.int_mode, list(self._id2tok)

    def since(self, start: int) -> list:
        """Interned tokens with ids ``>= start``."""
        return self._id2tok[start:]

    def restore(self, int_mode: bool | None, tokens: list) -> None:
        """Set the mode and the interned tokens (ids in order), as :meth:`state` gave them: the
        tokens interned so far (e.g. ``eos``) must be their first ones, the rest are appended. A
        decided mode must agree."""
        if int_mode is not None:
            if self.int_mode is not None and self.int_mode != int_mode:
                raise ValueError(f"token mode {'integer' if int_mode else 'object'} does not match this model's")
            self.int_mode = int_mode
        have = len(self._id2tok)
        if list(tokens[:have]) != self._id2tok:
            raise ValueError("interned tokens do not match this model's")
        self.append(list(tokens[have:]))

    def append(self, tokens: list) -> None:
        """Intern ``tokens`` as the next ids, in order (a store's journal replaying its records)."""
        for t in tokens:
            self._tok2id[t] = len(self._id2tok)
            self._id2tok.append(t)
