"""The storage of one prefix-tree level: typed columns and stored table heads, and a read-only view.

Columns (shape ``(n_d,)`` each; meanings in :mod:`arenum.exact.tree`): ``parent`` int64, ``child`` int32,
``tok`` int64, ``score`` float64, ``fetched`` bool, ``off`` int64, ``tlen`` int32, ``floor`` float64,
``made`` int32, ``eos_j`` int32, and for a terminating tree ``eos_lp`` float64; the pool of stored
heads ``pool_lp`` float64 and ``pool_tok`` int32 (widened to int64 when an id needs it).

Only :class:`arenum.exact.tree.PrefixTree` writes a level; everyone else reads a :class:`LevelView`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ._arrays import Grow

__all__ = ["Level", "LevelView", "read_only", "COLUMNS"]

_COLS = {
    "parent": np.int64,
    "child": np.int32,
    "tok": np.int64,
    "score": np.float64,
    "fetched": np.bool_,
    "off": np.int64,
    "tlen": np.int32,
    "floor": np.float64,
    "made": np.int32,
    "eos_j": np.int32,
}
COLUMNS = _COLS
"""Every level's columns and their dtypes (``eos_lp`` float64 besides, in a terminating tree)."""


@dataclass(frozen=True, slots=True)
class LevelView:
    """Read-only columns of one tree level, shape ``(n_d,)`` each (meanings: module docstring).

    ``eos_lp`` is ``None`` for a fixed-length tree. ``pool_lp`` / ``pool_tok`` hold the level's
    stored heads back to back (node ``i``'s head is ``pool[off[i] : off[i] + tlen[i]]``). The arrays
    are views: hold them only while the tree is not deepened.
    """

    depth: int
    parent: np.ndarray
    child: np.ndarray
    tok: np.ndarray
    score: np.ndarray
    fetched: np.ndarray
    off: np.ndarray
    tlen: np.ndarray
    floor: np.ndarray
    made: np.ndarray
    eos_j: np.ndarray
    eos_lp: np.ndarray | None
    pool_lp: np.ndarray
    pool_tok: np.ndarray

    def __len__(self) -> int:
        return self.score.shape[0]


def read_only(a: np.ndarray) -> np.ndarray:
    v = a.view()
    v.flags.writeable = False
    return v


class Level:
    """Arrays of one tree level (see module docstring). Only :class:`PrefixTree` writes them."""

    def __init__(self, depth: int, eos: bool = False) -> None:
        self.depth = depth
        self.cols = {k: Grow(t) for k, t in _COLS.items()}
        if eos:
            self.cols["eos_lp"] = Grow(np.float64)
        self.pool_tok = Grow(np.int32)  # widened to int64 if a token id needs it
        self.pool_lp = Grow(np.float64)
        self._view: LevelView | None = None  # cached until the level grows (see view())

    def __len__(self) -> int:
        return self.cols["score"].n

    def arrays(self) -> dict[str, np.ndarray]:
        """Every column and the pool (views of the values held), by name."""
        out = {k: g.v for k, g in self.cols.items()}
        out["pool_tok"], out["pool_lp"] = self.pool_tok.v, self.pool_lp.v
        return out

    @classmethod
    def from_arrays(cls, depth: int, eos: bool, arrays: dict[str, np.ndarray]) -> "Level":
        """A level holding ``arrays`` (as :meth:`arrays` names them), each used in place."""
        lev = cls(depth, eos)
        names = set(lev.cols) | {"pool_tok", "pool_lp"}
        if set(arrays) != names:
            raise ValueError(f"level {depth}: columns {sorted(arrays)} != {sorted(names)}")
        n = arrays["score"].shape[0]
        for k, a in arrays.items():
            want = lev.cols[k].a.dtype if k in lev.cols else (np.float64 if k == "pool_lp" else None)
            if a.ndim != 1 or (want is not None and a.dtype != want) or (k in lev.cols and a.shape[0] != n):
                raise ValueError(f"level {depth}: column {k} has dtype {a.dtype} and shape {a.shape}")
        if arrays["pool_tok"].dtype not in (np.int32, np.int64) or arrays["pool_tok"].shape != arrays["pool_lp"].shape:
            raise ValueError(f"level {depth}: pool_tok does not match pool_lp")
        for k in lev.cols:
            lev.cols[k] = Grow.wrap(arrays[k])
        lev.pool_tok, lev.pool_lp = Grow.wrap(arrays["pool_tok"]), Grow.wrap(arrays["pool_lp"])
        return lev

    def drop_view(self) -> None:
        """Forget the cached view before the arrays grow (a held view would stop them growing in place)."""
        self._view = None

    # explicit columns (views of the first len(self) entries)
    parent = property(lambda self: self.cols["parent"].v)
    child = property(lambda self: self.cols["child"].v)
    tok = property(lambda self: self.cols["tok"].v)
    score = property(lambda self: self.cols["score"].v)
    fetched = property(lambda self: self.cols["fetched"].v)
    off = property(lambda self: self.cols["off"].v)
    tlen = property(lambda self: self.cols["tlen"].v)
    floor = property(lambda self: self.cols["floor"].v)
    made = property(lambda self: self.cols["made"].v)
    eos_j = property(lambda self: self.cols["eos_j"].v)
    eos_lp = property(lambda self: self.cols["eos_lp"].v)

    def view(self) -> LevelView:
        """The level's columns, read-only; cached while the level's sizes do not change (in-place
        writes of the tree are seen through it, growth drops it)."""
        v = self._view
        if v is not None and len(v) == len(self) and v.pool_lp.shape[0] == self.pool_lp.n and (
                v.pool_tok.shape[0] == self.pool_tok.n and v.pool_tok.dtype == self.pool_tok.a.dtype):
            return v
        c = self.cols
        v = self._view = LevelView(
            self.depth, *(read_only(c[k].v) for k in _COLS),
            read_only(c["eos_lp"].v) if "eos_lp" in c else None, read_only(self.pool_lp.v), read_only(self.pool_tok.v),
        )
        return v

    def append(self, parent: np.ndarray, child: np.ndarray, tok: np.ndarray, score: np.ndarray) -> None:
        self._view = None
        m = score.shape[0]
        c = self.cols
        c["parent"].extend(parent)
        c["child"].extend(child)
        c["tok"].extend(tok)
        c["score"].extend(score)
        c["fetched"].extend(np.zeros(m, np.bool_))
        c["off"].extend(np.zeros(m, np.int64))
        c["tlen"].extend(np.zeros(m, np.int32))
        c["floor"].extend(np.full(m, math.inf))
        c["made"].extend(np.zeros(m, np.int32))
        c["eos_j"].extend(np.full(m, -1, np.int32))
        if "eos_lp" in c:
            c["eos_lp"].extend(np.full(m, -math.inf))

    @property
    def nbytes(self) -> int:
        return sum(g.nbytes for g in self.cols.values()) + self.pool_tok.nbytes + self.pool_lp.nbytes

    @property
    def used_bytes(self) -> int:
        return sum(g.used_bytes for g in self.cols.values()) + self.pool_tok.used_bytes + self.pool_lp.used_bytes
