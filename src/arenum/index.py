"""Exact index of the complete sequences with score ``>= T``, built from a prefix tree.

Complete sequences are never stored as nodes: in fixed-length mode they are the heads of the
leaf-level tables, in terminating mode the ``eos`` entries of every prefix's table. Each is the pair
(prefix node, table position) with exact score ``score[node] + lp``.

Layout (``N`` items): ``x`` float64 ``(N,)`` scores in canonical flat order (blocks by level, then
node id, then table position); ``perm`` int32/int64 ``(N,)`` flat positions grouped by a coarse
bucket of the exact score (a fine uniform grid mapped to about equal-count buckets by a monotone
lookup table, then a stable radix sort on a 16-bit key, O(N)); ``cum`` int64 ``(nb+1,)`` bucket
starts. A query finds its bucket from ``cum`` and sorts that one bucket exactly, once (cached).
Buckets are a monotone function of the exact score, so the order is exact everywhere.

Order: descending score; ties by length (shorter first), then lexicographically by the table
positions along the sequence (tables are sorted by descending log-prob, stably).

This module does not deepen the tree: ``arenum.seek.SeekIndex`` decides budgets.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .tree import PrefixTree, seg_first_below

__all__ = ["ExactIndex", "MassBracket"]

_U = 2.0**-53


@dataclass(frozen=True)
class MassBracket:
    """A certified bracket ``lo <= mass <= hi`` on a probability mass (float rounding only)."""

    lo: float
    hi: float

    def __iter__(self):
        return iter((self.lo, self.hi))

    @property
    def mid(self) -> float:
        return 0.5 * (self.lo + self.hi)


class _Block:
    __slots__ = ("level", "nodes", "offsets", "start", "fixed")

    def __init__(self, level: int, nodes: np.ndarray, offsets: np.ndarray, start: int, fixed: bool):
        self.level = level
        self.nodes = nodes  # node ids with at least one item
        self.offsets = offsets  # (len(nodes)+1,) item offsets within the block
        self.start = start  # flat position of the block's first item
        self.fixed = fixed  # items are table heads (fixed) or single eos entries


class ExactIndex:
    """Every complete sequence with ``score >= T`` in exact descending order (module docstring)."""

    def __init__(self, tree: PrefixTree, T: float) -> None:
        if T < tree.built:
            raise ValueError(f"tree is built to {tree.built}, cannot index down to {T}")
        self.tree = tree
        self.T = T
        blocks: list[_Block] = []
        xs: list[np.ndarray] = []
        spare: tuple[np.ndarray, np.ndarray] | None = None
        pos = 0
        cap = tree.branch_cap
        if tree.fixed_len is not None:
            d = tree.leaf_level
            lev = tree.levels[d] if d < len(tree.levels) else None
            if lev is not None and len(lev):
                sel = np.flatnonzero(lev.fetched & (lev.score >= T))
                pool = lev.pool_lp.v
                off = lev.off[sel]
                s = lev.score[sel]
                hi = lev.tlen[sel].astype(np.int64)
                if cap is not None:
                    hi = np.minimum(hi, cap)
                h = seg_first_below(pool, off, s, np.zeros_like(hi), hi, T)
                nz = h > 0
                sel, off, s, h = sel[nz], off[nz], s[nz], h[nz]
                offsets = np.zeros(sel.shape[0] + 1, np.int64)
                np.cumsum(h, out=offsets[1:])
                total = int(offsets[-1])
                gidx = np.repeat(off - offsets[:-1], h)
                buf = np.arange(total, dtype=np.int64)
                gidx += buf
                x = np.take(pool, gidx, out=buf.view(np.float64))  # reuse: fresh pages cost here
                rep = np.repeat(s, h)
                x += rep  # score[node] + lp, the same float addition as the tree's
                spare = (gidx, rep)  # free now: the bucket pass writes into them
                blocks.append(_Block(d, sel, offsets, 0, True))
                xs.append(x)
                pos = total
        else:
            for d, lev in enumerate(tree.levels[: tree.leaf_level + 1]):
                if len(lev) == 0:
                    continue
                ej = lev.eos_j
                ok = lev.fetched & (ej >= 0) & (lev.score >= T)
                if cap is not None:
                    ok &= ej < cap
                sel = np.flatnonzero(ok)
                if sel.size == 0:
                    continue
                x = lev.score[sel] + lev.pool_lp.v[lev.off[sel] + ej[sel]]
                keep = x >= T
                sel, x = sel[keep], x[keep]
                if sel.size == 0:
                    continue
                offsets = np.arange(sel.shape[0] + 1, dtype=np.int64)
                blocks.append(_Block(d, sel, offsets, pos, False))
                xs.append(x)
                pos += sel.shape[0]
        self.blocks = blocks
        self.block_starts = np.array([b.start for b in blocks], np.int64)
        x = xs[0] if len(xs) == 1 else (np.concatenate(xs) if xs else np.zeros(0))
        self.x = x
        self.N = int(x.shape[0])
        self._bucket_cache: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._mass_cum: np.ndarray | None = None
        self._build_buckets(spare if len(xs) == 1 else None)

    # ------------------------------------------------------------------ buckets
    def _build_buckets(self, spare: tuple[np.ndarray, np.ndarray] | None = None) -> None:
        """Group the items by bucket: a fine uniform grid of the exact score (monotone), mapped to
        ``nb`` coarse buckets of about equal counts by a monotone lookup table, then a stable radix
        sort on the 16-bit bucket ids. Equal-count buckets keep every first-touch sort small."""
        N = self.N
        x = self.x
        self.top = float(x.max()) if N else 0.0
        if N == 0:
            self.nb, self.nf, self.fscale = 1, 1, 0.0
            self.lut = np.zeros(1, np.uint16)
            self.perm = np.zeros(0, np.int64)
            self.cum = np.zeros(2, np.int64)
            return
        top = self.top
        lo = self.T if math.isfinite(self.T) else float(x.min())
        rng = top - lo
        nb = int(min(65536, max(1, N // 64)))
        nf = int(min(1 << 22, max(nb, 16 * nb)))
        self.nb, self.nf = nb, nf
        self.fscale = (nf / rng) * (1 - 1e-12) if rng > 0 else 0.0
        if spare is not None and spare[0].shape[0] == N:  # two free (N,) 8-byte buffers
            f = np.subtract(top, x, out=spare[1])
            f *= self.fscale
            fine = spare[0].view(np.int32)[:N]
            np.copyto(fine, f, casting="unsafe")
        else:
            fine = self._fine_of_array(x)
        hist = np.bincount(fine, minlength=nf)
        before = np.zeros(nf, np.int64)
        np.cumsum(hist[:-1], out=before[1:])
        self.lut = np.minimum(before * nb // N, nb - 1).astype(np.uint16)
        b = self.lut[fine]
        del fine
        self.perm = np.argsort(b, kind="stable")
        if N >= 1 << 26:  # halve the largest array of a big index
            self.perm = self.perm.astype(np.int32)
        counts = np.bincount(self.lut, weights=hist, minlength=nb).astype(np.int64)
        self.cum = np.zeros(nb + 1, np.int64)
        np.cumsum(counts, out=self.cum[1:])

    def _fine_of_array(self, x: np.ndarray) -> np.ndarray:
        # 0 <= top - x <= top - lo, and fscale carries a 1e-12 relative margin, so f < nf
        f = np.subtract(self.top, x)
        f *= self.fscale
        return f.astype(np.int32)

    def _bucket_of_array(self, x: np.ndarray) -> np.ndarray:
        return self.lut[self._fine_of_array(x)]

    def _bucket_of(self, t: float) -> int:
        """Bucket of score ``t`` (may be out of range: <0 above everything, >= nb below)."""
        if t > self.top:
            return -1
        v = (self.top - t) * self.fscale
        if not v < self.nf:
            return self.nb - 1 if t >= self.T else self.nb
        return int(self.lut[int(v)])

    def _sorted_bucket(self, b: int) -> tuple[np.ndarray, np.ndarray]:
        """(flat positions, scores) of bucket ``b`` in exact order; computed once."""
        hit = self._bucket_cache.get(b)
        if hit is not None:
            return hit
        P = self.perm[self.cum[b] : self.cum[b + 1]].astype(np.int64)
        xb = self.x[P]
        order = np.argsort(-xb, kind="stable")
        P, xb = P[order], xb[order]
        if P.shape[0] > 1 and (xb[1:] == xb[:-1]).any():
            P, xb = self._break_ties(P, xb)
        self._bucket_cache[b] = (P, xb)
        return P, xb

    def _break_ties(self, P: np.ndarray, xb: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        lvl, node, j = self.locate(P)
        depth = lvl + 1  # length of the sequence (tokens, eos included)
        maxd = int(depth.max())
        keys = np.full((P.shape[0], maxd), -1, np.int64)
        for d in np.unique(lvl):
            rows = np.flatnonzero(lvl == d)
            if d > 0:
                keys[rows, :d] = self.tree.child_paths(int(d), node[rows])
            keys[rows, d] = j[rows]
        cols = [keys[:, c] for c in range(maxd - 1, -1, -1)]
        order = np.lexsort(cols + [depth, -xb])
        return P[order], xb[order]

    # ------------------------------------------------------------------ identity
    def locate(self, P: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(level, node, table position) of flat positions ``P``."""
        P = np.asarray(P, np.int64)
        bi = np.searchsorted(self.block_starts, P, side="right") - 1
        lvl = np.empty(P.shape[0], np.int64)
        node = np.empty(P.shape[0], np.int64)
        j = np.empty(P.shape[0], np.int64)
        for k in np.unique(bi):
            rows = np.flatnonzero(bi == k)
            blk = self.blocks[int(k)]
            rel = P[rows] - blk.start
            r = np.searchsorted(blk.offsets, rel, side="right") - 1
            lvl[rows] = blk.level
            node[rows] = blk.nodes[r]
            if blk.fixed:
                j[rows] = rel - blk.offsets[r]
            else:
                j[rows] = self.tree.levels[blk.level].eos_j[blk.nodes[r]]
        return lvl, node, j

    def sequences(self, P: np.ndarray) -> list[tuple]:
        """Token-id tuples of the items at flat positions ``P`` (eos included)."""
        lvl, node, j = self.locate(P)
        out: list[tuple] = [()] * P.shape[0]
        for d in np.unique(lvl):
            rows = np.flatnonzero(lvl == d)
            d = int(d)
            lev = self.tree.levels[d]
            paths = self.tree.token_paths(d, node[rows])
            last = lev.pool_tok.v[lev.off[node[rows]] + j[rows]]
            full = np.concatenate([paths, last[:, None]], axis=1).tolist()
            for r, t in zip(rows.tolist(), full):
                out[r] = tuple(t)
        return out

    # ------------------------------------------------------------------ queries
    def count_ge(self, t: float) -> int:
        """Items with score ``>= t`` (requires ``t >= T`` for a complete answer)."""
        return self._count(t, "right")

    def count_gt(self, t: float) -> int:
        """Items with score ``> t``."""
        return self._count(t, "left")

    def _count(self, t: float, side: str) -> int:
        b = self._bucket_of(t)
        if b < 0:
            return 0
        if b >= self.nb:
            return self.N
        _, xb = self._sorted_bucket(b)
        return int(self.cum[b]) + int(np.searchsorted(-xb, -t, side=side))

    def item(self, i: int) -> tuple[int, float]:
        """(flat position, score) of the ``i``-th item in order (0-based)."""
        if not 0 <= i < self.N:
            raise IndexError(f"index {i} out of range for {self.N} indexed sequences")
        b = int(np.searchsorted(self.cum, i, side="right")) - 1
        P, xb = self._sorted_bucket(b)
        k = i - int(self.cum[b])
        return int(P[k]), float(xb[k])

    def items(self, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
        """(flat positions, scores) of items ``start..stop-1`` in order."""
        stop = min(stop, self.N)
        if start >= stop:
            return np.zeros(0, np.int64), np.zeros(0)
        ps, xs = [], []
        i = start
        while i < stop:
            b = int(np.searchsorted(self.cum, i, side="right")) - 1
            P, xb = self._sorted_bucket(b)
            a = i - int(self.cum[b])
            e = min(P.shape[0], a + (stop - i))
            ps.append(P[a:e])
            xs.append(xb[a:e])
            i += e - a
        return np.concatenate(ps), np.concatenate(xs)

    # ------------------------------------------------------------------ mass
    def _masses(self) -> np.ndarray:
        if self._mass_cum is None:
            b = self._bucket_of_array(self.x) if self.N else np.zeros(0, np.uint16)
            m = np.bincount(b, weights=np.exp(self.x), minlength=self.nb)
            self._mass_cum = np.concatenate(([0.0], np.cumsum(m)))
        return self._mass_cum

    def mass_ge(self, t: float) -> MassBracket:
        """Bracket on ``sum(exp(score))`` over items with score ``>= t`` (float rounding only)."""
        b = self._bucket_of(t)
        mc = self._masses()
        if b < 0:
            return MassBracket(0.0, 0.0)
        if b >= self.nb:
            m, n = float(mc[-1]), self.N
        else:
            _, xb = self._sorted_bucket(b)
            k = int(np.searchsorted(-xb, -t, side="right"))
            m = float(mc[b]) + float(np.exp(xb[:k]).sum())
            n = int(self.cum[b]) + k
        return _bracket(m, n)

    def total_mass(self) -> MassBracket:
        return _bracket(float(self._masses()[-1]), self.N)

    def nucleus(self, p: float) -> tuple[int, int] | None:
        """``(k_lo, k_hi)``: the smallest ``k`` whose top-``k`` mass is ``>= p`` lies in it.

        ``None`` if even all items may hold less than ``p``.
        """
        mc = self._masses()
        n = max(self.N, 1)
        e = (n + 8) * _U
        # k_lo: smallest k whose mass upper bound reaches p; k_hi: whose lower bound does
        out = []
        for target in (p / (1 + e), p / (1 - e)):
            if target > mc[-1]:
                out.append(None)
                continue
            b = int(np.searchsorted(mc, target, side="left")) - 1
            b = max(b, 0)
            _, xb = self._sorted_bucket(b)
            c = mc[b] + np.cumsum(np.exp(xb))
            k = int(np.searchsorted(c, target, side="left"))
            out.append(int(self.cum[b]) + min(k, xb.shape[0] - 1) + 1)
        if out[0] is None:
            return None
        return out[0], (out[1] if out[1] is not None else self.N)

    def _check(self) -> None:
        """Assert the index's invariants (for tests)."""
        assert self.perm.shape[0] == self.N and self.cum[-1] == self.N
        assert (self.x >= self.T).all()
        seen = np.zeros(self.N, bool)
        prev = math.inf
        for b in range(self.nb):
            P, xb = self._sorted_bucket(b)
            seen[P] = True
            if xb.size:
                assert xb[0] <= prev
                assert (np.diff(xb) <= 0).all()
                prev = xb[-1]
        assert seen.all()


def _bracket(m: float, n: int) -> MassBracket:
    e = (n + 8) * _U * m
    return MassBracket(max(0.0, m - e), m + e)
