"""The count tables of a fitted model and the arithmetic on them: suffix lookup and rows.

:class:`CountTables` holds, per context length L = 0 .. order-1, the CSR tables ``fit`` counts
(``ctx_keys``, ``ptr``, ``words``, ``counts``; ``docs/ngram.md`` describes them) and the
per-level weights derived from them.  :meth:`CountTables.walk` finds each context's longest
observed suffix and :meth:`CountTables.rows` builds the log-prob rows, for one context or a batch
alike.  The model (``model.py``) adds the caches and the callbacks.
"""
from __future__ import annotations

from typing import Any

import numpy as np
from ..._validate import INT64_MAX

__all__ = ["CountTables"]



def _ranges(ptr: np.ndarray, c: np.ndarray) -> tuple[np.ndarray | None, Any]:
    """Row number and position of every entry of the CSR rows ``c`` of ``ptr``, concatenated.

    For a single row: ``None`` and a slice, which copy nothing (see :func:`_scatter_add`).
    """
    if len(c) == 1:
        i = int(c[0])
        return None, slice(int(ptr[i]), int(ptr[i + 1]))
    lo, hi = ptr[c], ptr[c + 1]
    lengths = hi - lo
    total = int(lengths.sum())
    starts = np.cumsum(lengths) - lengths
    pos = np.repeat(lo - starts, lengths) + np.arange(total, dtype=np.int64)
    return np.repeat(np.arange(len(c)), lengths), pos


def _scatter_add(Q: np.ndarray, rr: np.ndarray | None, cols: np.ndarray, vals: np.ndarray) -> None:
    """``Q[rr, cols] += vals`` (no repeated (row, col) pair); ``rr=None``: Q's only row."""
    if rr is None:
        Q[0][cols] += vals  # 1-D fancy indexing: a few times cheaper than the 2-D form
    else:
        Q[rr, cols] += vals


def _finish(P: np.ndarray) -> list[np.ndarray]:
    """Normalize each row of P in place; return the read-only log rows."""
    P /= P.sum(axis=1, keepdims=True)
    with np.errstate(divide="ignore"):
        logP = np.log(P)
    rows = list(logP)
    for r in rows:
        r.flags.writeable = False
    return rows


class CountTables:
    """Count tables and the per-level weights; see the module docstring.

    All arrays are int64 except the float64 weights.  Attributes: ``order``, ``V`` (token ids),
    ``B = V + 1`` (radix of context keys: tokens plus BOS, whose id is ``V``), ``smoothing``,
    ``k``, and the per-level lists ``ctx_keys``, ``ptr``, ``words``, ``counts``.
    """

    def __init__(
        self,
        *,
        order: int,
        V: int,
        smoothing: str,
        discount: float,
        k: float,
        ctx_keys: list[np.ndarray],
        ptr: list[np.ndarray],
        words: list[np.ndarray],
        counts: list[np.ndarray],
    ) -> None:
        self.order = order
        self.V = V
        self.B = V + 1
        self.smoothing = smoothing
        self.k = k
        # Context keys with a sentinel above every key appended, so that a lookup's position is
        # always a valid index; ctx_keys are views without it.
        self._keys_s = [np.append(np.asarray(a, dtype=np.int64), INT64_MAX) for a in ctx_keys]
        self.ctx_keys = [a[:-1] for a in self._keys_s]
        self.ptr = [np.ascontiguousarray(a, dtype=np.int64) for a in ptr]
        self.words = [np.ascontiguousarray(a, dtype=np.int64) for a in words]
        self.counts = [np.ascontiguousarray(a, dtype=np.int64) for a in counts]
        # What every row computation needs from a level, computed once for all its contexts with
        # the float64 operations a row would do: KN/WB the back-off weight of each context
        # (_gamma) and the discounted term of each (context, next token) entry (_vals); add-k
        # the denominator A(c) + kV of each top-level context (_denom).
        self._gamma: list[np.ndarray] = []
        self._vals: list[np.ndarray] = []
        self._denom = np.zeros(0)
        for L, (p, c) in enumerate(zip(self.ptr, self.counts)):
            n_next = np.diff(p)  # T(c): entries per context
            tot = (np.add.reduceat(c, p[:-1]) if len(c) else np.zeros(0, np.int64)).astype(np.float64)
            if smoothing == "addk":
                if L == order - 1:
                    self._denom = tot + k * V
                continue
            types = n_next.astype(np.float64)
            cnt = c.astype(np.float64)
            if smoothing == "kn":
                self._gamma.append(discount * types / tot)
                self._vals.append((cnt - discount) / np.repeat(tot, n_next))
            else:
                denom = tot + types
                self._gamma.append(types / denom)
                self._vals.append(cnt / np.repeat(denom, n_next))

    def walk(self, ctxs: list[tuple]) -> tuple[np.ndarray, np.ndarray]:
        """Deepest observed suffix of each context: depth (R,) and context ids per level (R, n).

        ``path[r, L]`` is the id of context r's level-L suffix for ``L <= depth[r]``; the entries
        past ``depth[r]`` are meaningless.
        """
        n1 = self.order - 1
        R = len(ctxs)
        V = self.V
        X = np.empty((R, max(n1, 1)), dtype=np.int64)  # column j: token j+1 back
        X.fill(V)  # BOS
        n_tok = 0
        try:
            for r, c in enumerate(ctxs):
                if c:
                    X[r, : len(c)] = c[::-1]
                    n_tok += len(c)
            # All ids are in [0, V) iff the cells >= V as unsigned (negatives included) are
            # exactly the BOS padding.
            bad = int(np.count_nonzero(X.view(np.uint64) >= V)) != X.size - n_tok
        except (OverflowError, TypeError, ValueError):  # not convertible to int64
            bad = True
        if bad:
            for c in ctxs:
                for t in c:
                    if not (isinstance(t, (int, np.integer)) and 0 <= t < V):
                        t = int(t) if isinstance(t, (int, np.integer)) else repr(t)
                        raise ValueError(f"token id {t} in prefix {c!r} is outside [0, {V})")
        path = np.zeros((R, self.order), dtype=np.int64)
        match = np.zeros((R, max(n1, 1)), dtype=bool)  # match[r, L-1]: level-L key found
        B = self.B
        pos = path[:, 0]  # level-0 context id of every row: 0
        for L in range(1, n1 + 1):
            keys = self._keys_s[L]
            q = pos * B
            q += X[:, L - 1]
            pos = keys.searchsorted(q)  # <= len(keys) - 1: the sentinel is above every q
            m = match[:, L - 1]
            np.equal(keys[pos], q, out=m)
            if not np.count_nonzero(m):
                break
            path[:, L] = pos
        # A row's depth is its number of leading matches (a later match after a miss is chance).
        depth = np.add.reduce(np.logical_and.accumulate(match, axis=1), axis=1, dtype=np.int64)
        return depth, path

    def rows(self, depth: np.ndarray, path: np.ndarray) -> list[np.ndarray]:
        """Log-prob rows for resolved contexts; each row depends on its own context only.

        The rows are processed deepest first, so that the rows that reach level L are the first
        ``n_L``: every level updates a leading slice of ``P`` in place.
        """
        R = len(depth)
        V = self.V
        if R > 1:
            perm = np.argsort(-depth, kind="stable")
            depth, path = depth[perm], path[perm]
        # reach[L]: the number of rows whose context is observed at level L (depth >= L).
        reach = np.add.accumulate(np.bincount(depth, minlength=self.order)[::-1])[::-1].tolist()
        P = np.empty((R, V), dtype=np.float64)
        P.fill(1.0 / V)
        if self.smoothing == "addk":
            top = self.order - 1
            n = reach[top]
            if n:
                c = path[:n, top]
                rr, idx = _ranges(self.ptr[top], c)
                Q = P[:n]
                Q.fill(self.k)
                _scatter_add(Q, rr, self.words[top][idx], self.counts[top][idx])
                Q /= self._denom[c][:, None]
        else:
            for L in range(self.order):
                n = reach[L]
                if not n:
                    break
                c = path[:n, L]
                rr, idx = _ranges(self.ptr[L], c)
                Q = P[:n]
                Q *= self._gamma[L][c][:, None]
                _scatter_add(Q, rr, self.words[L][idx], self._vals[L][idx])
        rows = _finish(P)
        if R == 1:
            return rows
        out: list = [None] * R
        for i, r in zip(perm.tolist(), rows):
            out[i] = r
        return out

    def sample_problem(self) -> str | None:
        """Why the rows of up to 8 contexts per level are not distributions, or None if they are."""
        depths, paths = [], []
        for L in range(self.order):
            C = 1 if L == 0 else len(self.ctx_keys[L])
            ids = np.unique(np.linspace(0, C - 1, num=min(C, 8)).astype(np.int64))
            path = np.zeros((len(ids), self.order), dtype=np.int64)
            path[:, L] = ids
            for up in range(L, 1, -1):  # parent of a level-`up` context: key // B
                path[:, up - 1] = self.ctx_keys[up][path[:, up]] // self.B
            depths.append(np.full(len(ids), L, dtype=np.int64))
            paths.append(path)
        depth = np.concatenate(depths)
        rows = np.stack(self.rows(depth, np.concatenate(paths)))
        total = np.exp(rows).sum(axis=1)
        bad = ~np.isfinite(rows).all(axis=1) | ~(np.abs(total - 1.0) <= 1e-9)
        if not bad.any():
            return None
        i = int(np.argmax(bad))
        return (f"the distribution after a level-{int(depth[i])} context is not normalized "
                f"(sums to {total[i]!r})")
