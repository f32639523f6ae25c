"""Exact index of the complete sequences with score ``>= T``, built from a prefix tree.

Complete sequences are never stored as nodes: in fixed-length mode they are the heads of the
leaf-level tables, in terminating mode the ``eos`` entries of every prefix's table. Each is the pair
(prefix node, table position) with exact score ``score[node] + lp``.

Layout (``N`` items): flat positions name the items (blocks by level, then node id, then table
position; see ``_Block``), and an item's score is recomputed from the tree when needed, never
stored. Items are grouped by a coarse bucket of the exact score: a fine uniform grid mapped to
about equal-count buckets by a monotone lookup table. ``perm`` int32/int64 ``(N,)`` holds the flat
positions in segments (a few hundred thousand items each, in flat order), each segment grouped by
bucket: ``seg_start`` int64 ``(segments+1,)`` their starts in ``perm``, ``seg_cum`` int32
``(segments, nb+1)`` each one's bucket starts; ``cum`` int64 ``(nb+1,)`` the global bucket starts. A
query finds its bucket from ``cum``, gathers it from every segment and sorts that one bucket
exactly, once (cached). Buckets are a monotone function of the exact score, so the order is exact
everywhere.

Order: descending score; ties by length (shorter first), then lexicographically by the table
positions along the sequence (tables are sorted by descending log-prob, stably).

This module does not deepen the tree: ``arenum.exact.seek.SeekIndex`` decides budgets.
"""
from __future__ import annotations

import bisect
import math

import numpy as np

from ._arrays import page_empty, seg_first_below
from .exactsum import GroupedSum, PrefixSums, exact_sum, float_units, to_float, values
from ..results import MassBracket
from .tree import PrefixTree

__all__ = ["ExactIndex", "mass_bracket"]

_U = 2.0**-53


_CHUNK = 1 << 16
"""Base step (items) of the build passes: a step's temporaries stay in cache."""
_ONE_SHOT = 1 << 16
"""Indexes with at most this many items are built in one shot (all scores at once, the lookup
table from all of them). Larger ones are built in cache-sized chunks: large temporaries cost more
in first touches of fresh memory than they save."""
_NODE_STEP = 1 << 16
"""Nodes examined at a time when finding the items."""
_SEGMENT = 1 << 18
"""Items sorted by bucket together in the chunked build (a segment of ``perm``): at least this
many, and more when that would make more than ``_MAX_SEGMENTS`` segments (up to 8x)."""
_MAX_SEGMENTS = 256
_SAMPLE = 16
"""The chunked build's lookup table comes from every ``_SAMPLE``-th chunk of items."""
_LOWEST = -float(np.finfo(np.float64).max)  # ``x >= max(T, _LOWEST)`` never admits a -inf score


def _positions(p: int | np.ndarray, n: int) -> np.ndarray:
    """Flat positions of a chunk: ``p`` itself, or the ``n`` consecutive ones from the int ``p``."""
    return np.arange(p, p + n) if isinstance(p, int) else p


class _Block:
    """The items of one tree level.

    Fixed length (``fixed``): table heads. Node ``nodes[r]`` owns the flat positions
    ``start + offsets[r] .. start + offsets[r+1] - 1``; the item at position ``start + i`` scores
    ``s[r] + pool_lp[shift[r] + i]``. Terminating: ``eos`` entries, at most one per level node, at
    flat position ``start + node id`` (positions of nodes without an item are unused); the item
    scores ``score + eos_lp`` of its node. ``span``: flat positions the block covers.
    """

    __slots__ = ("level", "start", "span", "fixed", "nodes", "offsets", "s", "shift")

    def __init__(self, level: int, start: int, span: int, fixed: bool, nodes: np.ndarray | None = None,
                 offsets: np.ndarray | None = None, s: np.ndarray | None = None,
                 shift: np.ndarray | None = None) -> None:
        self.level, self.start, self.span, self.fixed = level, start, span, fixed
        self.nodes, self.offsets, self.s, self.shift = nodes, offsets, s, shift


class ExactIndex:
    """Low-level: every complete sequence with ``score >= T`` in exact descending order (module
    docstring), as :meth:`arenum.AutoregressiveEnumerable.slice` lists them, caps and all.

    Scores are not stored: they are recomputed from the tree (the same float addition) wherever
    needed, so the index itself holds one permutation entry per sequence.
    """

    def __init__(self, tree: PrefixTree, T: float, *, buckets: bool = True) -> None:
        """``buckets=False`` stops once the items are found (``N`` known): :meth:`complete` then
        builds the rest, so a caller can count first and build only what it will use."""
        self._top, self._bottom, self.N = self._items(tree, T)
        self.block_starts = np.array([b.start for b in self.blocks], np.int64)
        self.span = sum(b.span for b in self.blocks)
        self._bucket_cache: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._mass_cum: list[int] | None = None
        self._mass_shift = 0
        self._prefix_cache: dict[int, PrefixSums] = {}
        self.bucketed = False
        if buckets:
            self.complete()

    def held_bytes(self) -> int:
        """Bytes of the arrays this index holds (its blocks, permutation, bucket tables and caches)."""
        arrs = [getattr(b, k) for b in self.blocks for k in ("nodes", "offsets", "s", "shift")]
        arrs += [getattr(self, k, None) for k in ("perm", "seg_cum", "seg_start", "cum", "lut", "block_starts")]
        arrs += [a for pair in self._bucket_cache.values() for a in pair]
        return sum(a.nbytes for a in arrs if isinstance(a, np.ndarray))

    @property
    def top_score(self) -> float:
        """The highest item score (``-inf`` without items)."""
        return self._top if self.N else -math.inf

    def complete(self) -> "ExactIndex":
        """Build the buckets (once); returns the index."""
        if not self.bucketed:
            self._build_buckets()
            self.bucketed = True
        return self

    # ------------------------------------------------------------------ items
    def _items(self, tree: PrefixTree, T: float) -> tuple[float, float, int]:
        """Find the items (blocks); return the highest and lowest item score and their number."""
        if T < tree.built:
            raise ValueError(f"tree is built to {tree.built}, cannot index down to {T}")
        self.tree = tree
        self.T = T
        self._Tx = max(T, _LOWEST)  # the item test, float for float: x >= _Tx
        self.blocks: list[_Block] = []
        return self._head_blocks() if tree.fixed_len is not None else self._eos_blocks()

    def _head_blocks(self) -> tuple[float, float, int]:
        """Fixed length: the items are the heads ``s + lp >= T`` of the leaf-level tables.

        Returns the highest and the lowest item score (``T`` if finite), and the number of items.
        Runs over the level ``_NODE_STEP`` nodes at a time (temporaries in cache, their memory
        reused); the block's arrays are written once, into fresh maps."""
        tree, T = self.tree, self._Tx
        d = tree.leaf_level
        lev = tree.view(d) if d < tree.n_levels else None
        n = len(lev) if lev is not None else 0
        if n == 0:
            return -math.inf, math.inf, 0
        pool = lev.pool_lp
        cap = tree.support.branch_cap
        nodes, s_out, shift = page_empty(n, np.int64), page_empty(n, np.float64), page_empty(n, np.int64)
        offsets = page_empty(n + 1, np.int64)
        offsets[0] = 0
        k = total = 0
        top, bottom = -math.inf, math.inf
        for a in range(0, n, _NODE_STEP):
            b = min(n, a + _NODE_STEP)
            sel = np.flatnonzero(lev.fetched[a:b] & (lev.score[a:b] >= T))
            if sel.size == 0:
                continue
            sel += a
            off = lev.off[sel]
            s = lev.score[sel]
            hi = lev.tlen[sel].astype(np.int64)
            if cap is not None:
                np.minimum(hi, cap, out=hi)
            h = seg_first_below(pool, off, s, np.zeros_like(hi), hi, T)
            nz = h > 0
            sel, off, s, h = sel[nz], off[nz], s[nz], h[nz]
            m = sel.shape[0]
            if m == 0:
                continue
            nodes[k : k + m] = sel
            s_out[k : k + m] = s
            c = np.cumsum(h)
            c += total
            offsets[k + 1 : k + m + 1] = c
            shift[k : k + m] = off
            shift[k : k + m] -= offsets[k : k + m]
            # heads are sorted: a node's first item is its highest, its last its lowest
            top = max(top, float((s + pool[off]).max()))
            if self.T == -math.inf:
                bottom = min(bottom, float((s + pool[off + h - 1]).min()))
            k += m
            total = int(c[-1])
        if k == 0:
            return -math.inf, math.inf, 0
        self.blocks.append(_Block(d, 0, total, True, nodes[:k], offsets[: k + 1], s_out[:k], shift[:k]))
        return top, (bottom if self.T == -math.inf else self.T), total

    def _eos_blocks(self) -> tuple[float, float, int]:
        """Terminating: the items are the ``eos`` entries with ``score + eos_lp >= T``.

        Returns the highest and the lowest item score (``T`` if finite), and the number of items."""
        tree = self.tree
        pos = n_items = 0
        top, bottom = -math.inf, math.inf
        for d in range(min(tree.n_levels, tree.leaf_level + 1)):
            lev = tree.view(d)
            n = len(lev)
            if n == 0:
                continue
            blk = _Block(d, pos, n, False)
            if self.T == -math.inf or tree.support.branch_cap is not None:
                for _, xc in self._eos_chunks(blk, 4 * _CHUNK):
                    top = max(top, float(xc.max()))
                    bottom = min(bottom, float(xc.min()))
                    n_items += xc.shape[0]
            else:  # every item is >= T, every other score below it: the highest score is the top item
                step = 4 * _CHUNK
                for a in range(0, n, step):
                    xc = lev.score[a : a + step] + lev.eos_lp[a : a + step]
                    top = max(top, float(xc.max()))
                    n_items += int(np.count_nonzero(xc >= self._Tx))
            self.blocks.append(blk)
            pos += n
        return top, (bottom if self.T == -math.inf else self.T), n_items

    def _eos_chunks(self, blk: _Block, step: int, sample: int = 1):
        lev = self.tree.view(blk.level)
        score, elp = lev.score, lev.eos_lp
        cap = self.tree.support.branch_cap
        for a in range(0, blk.span, step * sample):
            b = min(blk.span, a + step)
            xc = score[a:b] + elp[a:b]  # the same float addition as the tree's
            ok = xc >= self._Tx
            if cap is not None:
                ok &= lev.eos_j[a:b] < cap
            k = np.flatnonzero(ok)
            if k.size:
                yield k + (blk.start + a), xc[k]

    def _chunks(self, step: int, sample: int = 1):
        """``(positions, scores)`` of every item, in flat order, about ``step`` items at a time
        (only every ``sample``-th chunk if ``sample > 1``).

        ``positions`` is an int (the first of a run of consecutive flat positions) or an array."""
        for blk in self.blocks:
            if not blk.fixed:
                yield from self._eos_chunks(blk, step, sample)
                continue
            pool = self.tree.view(blk.level).pool_lp
            offsets, s, shift = blk.offsets, blk.s, blk.shift
            cuts = np.unique(np.append(np.searchsorted(offsets, np.arange(0, blk.span, step)), s.shape[0]))
            width = int(np.diff(offsets[cuts]).max()) if cuts.shape[0] > 1 else 0
            ramp = np.arange(width, dtype=np.int64)
            for a, b in zip(cuts[:-1:sample].tolist(), cuts[1::sample].tolist()):
                i0, i1 = int(offsets[a]), int(offsets[b])
                cnt = np.diff(offsets[a : b + 1])
                gidx = np.repeat(shift[a:b], cnt)
                gidx += ramp[: i1 - i0]
                gidx += i0
                xc = pool[gidx]
                xc += np.repeat(s[a:b], cnt)  # lp + score[node], the same float addition as the tree's
                yield blk.start + i0, xc

    def _all_items(self) -> tuple[int | np.ndarray, np.ndarray]:
        """``(positions, scores)`` of every item at once, in flat order; ``positions`` is an int
        (the first of consecutive flat positions, as in :meth:`_chunks`) or an array."""
        parts = list(self._chunks(max(self.N, 1)))
        if len(parts) == 1:
            return parts[0]
        ps = [_positions(p, xc.shape[0]) for p, xc in parts]
        return np.concatenate([np.zeros(0, np.int64)] + ps), np.concatenate([np.zeros(0)] + [xc for _, xc in parts])

    def _scores(self, P: np.ndarray) -> np.ndarray:
        """Scores of the items at flat positions ``P`` (int64)."""
        x = np.empty(P.shape[0])
        bi = np.searchsorted(self.block_starts, P, side="right") - 1
        for k in np.unique(bi).tolist():
            rows = np.flatnonzero(bi == k)
            blk = self.blocks[k]
            lev = self.tree.view(blk.level)
            rel = P[rows] - blk.start
            if blk.fixed:
                r = np.searchsorted(blk.offsets, rel, side="right") - 1
                x[rows] = lev.pool_lp[blk.shift[r] + rel] + blk.s[r]
            else:
                x[rows] = lev.score[rel] + lev.eos_lp[rel]
        return x

    # ------------------------------------------------------------------ buckets
    def _build_buckets(self) -> None:
        """Group the items by bucket: a fine uniform grid of the exact score (monotone), mapped to
        ``nb`` coarse buckets of about equal counts by a monotone lookup table (``lut``).

        Small indexes (``N <= _ONE_SHOT``) take the table from the exact fine-cell histogram and
        sort all bucket ids at once. Larger ones take it from a sample of the items (every
        ``_SAMPLE``-th chunk: the table only balances the buckets, it cannot make the order
        wrong), then one pass computes each chunk's bucket ids and sorts them a segment at a time
        (stable radix sort of 16-bit ids, a few hundred thousand items per segment). ``perm`` holds
        the segments one after the other, each grouped by bucket; ``seg_cum[k]`` is segment
        ``k``'s bucket starts. Nothing item-sized but ``perm`` is written, and nothing is
        scattered: every temporary is cache-sized and its memory reused.
        """
        N = self.N
        self.top = self._top if N else 0.0
        pdt = np.int32 if self.span < 1 << 31 else np.int64  # perm's dtype
        if N == 0:
            self.nb, self.nf, self.fscale = 1, 1, 0.0
            self.lut = np.zeros(1, np.uint16)
            self._set_segments(np.zeros(0, pdt), np.zeros((1, 2), np.int32), [0, 0])
            return
        rng = self._top - self._bottom
        nb = int(min(65536, max(1, N // 64)))
        nf = int(min(1 << 22, max(nb, 16 * nb)))
        self.nb, self.nf = nb, nf
        f = nf / float(rng) * (1 - 1e-12) if rng > 0 else 0.0  # a subnormal range overflows to inf: then one
        self.fscale = f if f < math.inf else 0.0  # fine cell, as for equal scores (exact order within a bucket)
        if N <= _ONE_SHOT:
            pos, x = self._all_items()
            f = self._fine_of_array(x)
            del x
            self._set_lut(np.bincount(f, minlength=nf))
            ids = self.lut[f]
            del f
            perm = np.empty(N, pdt)
            seg_cum = np.zeros((1, nb + 1), np.int32)
            self._sort_segment(ids, pos, perm, seg_cum[0])
            self._set_segments(perm, seg_cum, [0, N])
            return
        # the sample: about 1/_SAMPLE of the items, in at least 64 chunks spread over all of them
        step = max(64, min(_CHUNK, N // (64 * _SAMPLE)))
        fs = [self._fine_of_array(xc) for _, xc in self._chunks(step, sample=_SAMPLE)]
        self._set_lut(np.bincount(np.concatenate(fs), minlength=nf))
        del fs
        seg = min(max(_SEGMENT, -(-N // _MAX_SEGMENTS)), 8 * _SEGMENT)
        perm = page_empty(N, pdt)
        seg_cum = np.zeros((N // seg + 1, nb + 1), np.int32)  # segments hold >= seg items, but the last
        seg_start = [0]
        buf = np.empty(2 * seg, np.uint16)
        runs: list = []
        m = 0
        for pos, xc in self._chunks(min(_CHUNK, seg)):
            n = xc.shape[0]
            if m + n > buf.shape[0]:  # a chunk ends at a node's end: it can be longer than asked
                buf = np.concatenate([buf[:m], np.empty(m + n, np.uint16)])
            np.take(self.lut, self._fine_of_array(xc), out=buf[m : m + n])
            runs.append((pos, n))
            m += n
            if m >= seg:
                self._flush(buf[:m], runs, perm, seg_cum, seg_start)
                runs, m = [], 0
        if m:
            self._flush(buf[:m], runs, perm, seg_cum, seg_start)
        self._set_segments(perm, seg_cum[: len(seg_start) - 1], seg_start)

    def _flush(self, ids: np.ndarray, runs: list, perm: np.ndarray, seg_cum: np.ndarray, seg_start: list) -> None:
        """Sort one segment (the bucket ids ``ids`` of the items named by ``runs``) into ``perm``."""
        a = seg_start[-1]
        if all(isinstance(p, int) for p, _ in runs) and all(
            p + n == q for (p, n), (q, _) in zip(runs[:-1], runs[1:])
        ):
            pos: int | np.ndarray = runs[0][0]  # consecutive flat positions
        else:
            pos = np.concatenate([_positions(p, n) for p, n in runs])
        self._sort_segment(ids, pos, perm[a : a + ids.shape[0]], seg_cum[len(seg_start) - 1])
        seg_start.append(a + ids.shape[0])

    def _sort_segment(self, ids: np.ndarray, pos: int | np.ndarray, out: np.ndarray, cum: np.ndarray) -> None:
        """Write the positions ``pos`` (an int: consecutive from it) grouped by bucket ``ids``
        (stable) into ``out``, and the bucket starts into ``cum`` (``nb + 1``, zeros on entry)."""
        o = np.argsort(ids, kind="stable")  # radix sort on 16-bit keys
        if isinstance(pos, int):
            np.add(o, pos, out=out, casting="unsafe")
        else:
            np.take(pos, o, out=out)
        np.cumsum(np.bincount(ids, minlength=self.nb), out=cum[1:])

    def _set_segments(self, perm: np.ndarray, seg_cum: np.ndarray, seg_start: list) -> None:
        self.perm = perm
        self.seg_cum = seg_cum
        self.seg_start = np.array(seg_start, np.int64)
        self.cum = seg_cum.sum(axis=0, dtype=np.int64)

    def _set_lut(self, hist: np.ndarray) -> None:
        """The monotone lookup table from a fine-cell histogram (of all items or of a sample):
        buckets of about equal counts."""
        before = np.zeros(self.nf, np.int64)
        np.cumsum(hist[:-1], out=before[1:])
        tot = max(int(before[-1] + hist[-1]), 1)
        self.lut = np.minimum(before * self.nb // tot, self.nb - 1).astype(np.uint16)

    def _bucket_positions(self, b: int) -> np.ndarray:
        """Flat positions of the items of bucket ``b`` (ascending), gathered from every segment."""
        a = self.seg_start[:-1] + self.seg_cum[:, b]
        n = self.seg_cum[:, b + 1] - self.seg_cum[:, b]
        k = np.flatnonzero(n)
        a, n = a[k], n[k]
        if a.shape[0] == 0:
            return np.zeros(0, np.int64)
        if a.shape[0] == 1:  # one run: a slice
            return self.perm[int(a[0]) : int(a[0] + n[0])].astype(np.int64)
        first = np.cumsum(n) - n
        g = np.repeat(a - first, n)
        g += np.arange(g.shape[0])
        return self.perm[g].astype(np.int64)

    def _fine_of_array(self, x: np.ndarray) -> np.ndarray:
        # 0 <= top - x <= top - lo, and fscale carries a 1e-12 relative margin, so f < nf
        f = np.subtract(self.top, x)
        f *= self.fscale
        return f.astype(np.intp)

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
        P = self._bucket_positions(b)
        xb = self._scores(P)
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
            lvl[rows] = blk.level
            if blk.fixed:
                r = np.searchsorted(blk.offsets, rel, side="right") - 1
                node[rows] = blk.nodes[r]
                j[rows] = rel - blk.offsets[r]
            else:
                node[rows] = rel
                j[rows] = self.tree.view(blk.level).eos_j[rel]
        return lvl, node, j

    def sequences(self, P: np.ndarray) -> list[tuple]:
        """Token-id tuples of the items at flat positions ``P`` (eos included)."""
        lvl, node, j = self.locate(P)
        out: list[tuple] = [()] * P.shape[0]
        for d in np.unique(lvl):
            rows = np.flatnonzero(lvl == d)
            d = int(d)
            lev = self.tree.view(d)
            paths = self.tree.token_paths(d, node[rows])
            last = lev.pool_tok[lev.off[node[rows]] + j[rows]]
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
    # Masses are exact: an item's value is ``fl(exp(score))`` (``exactsum.values``), a mass is the
    # exact sum of those values as an int of units ``2**-SCALE`` (``exactsum``), rounded once. So
    # they do not depend on summation order or bucket layout, and shards' units add exactly.
    def _mass_units(self) -> list[int]:
        """Exact cumulative units before each bucket (``nb + 1`` ints, in units of
        ``2**_mass_shift``); computed once."""
        if self._mass_cum is None:
            self._mass_cum = self._bucket_units()
        return self._mass_cum

    def _bucket_units(self) -> list[int]:
        b = np.arange(self.nb)
        f0, f1 = np.searchsorted(self.lut, b, side="left"), np.searchsorted(self.lut, b, side="right")
        x_hi, x_lo = np.full(self.nb, self.top), np.full(self.nb, self._bottom)
        if self.fscale > 0:  # each bucket's score range, from its fine cells (a hint: see GroupedSum)
            x_hi, x_lo = np.minimum(self.top - f0 / self.fscale, x_hi), np.maximum(self.top - f1 / self.fscale, x_lo)
        acc = GroupedSum.for_ranges(values(x_lo), values(x_hi), np.diff(self.cum))
        for _, xc in self._chunks(4 * _CHUNK):
            acc.add(values(xc), self._bucket_of_array(xc))
        self._mass_shift = z = acc.trailing  # kept in units of 2**z: smaller ints, same values
        return [0] + np.cumsum(acc.units(z)).tolist()

    def _prefix(self, b: int) -> PrefixSums:
        """Exact prefix sums of bucket ``b``'s values in order; computed once."""
        ps = self._prefix_cache.get(b)
        if ps is None:
            ps = self._prefix_cache[b] = PrefixSums(values(self._sorted_bucket(b)[1]))
        return ps

    def _mass_side(self, t: float, side: str) -> tuple[int, int]:
        """(exact units, count) of the items with score ``>= t`` (``side='right'``) or ``> t``."""
        b = self._bucket_of(t)
        if b < 0:
            return 0, 0
        mc = self._mass_units()
        if b >= self.nb:
            return mc[-1] << self._mass_shift, self.N
        _, xb = self._sorted_bucket(b)
        k = int(np.searchsorted(-xb, -t, side=side))
        return (mc[b] << self._mass_shift) + self._prefix(b).units(k), int(self.cum[b]) + k

    def mass_ge_units(self, t: float) -> int:
        """``sum(fl(exp(s)) for s in scores if s >= t) * 2**SCALE``, exactly (an int; see
        :mod:`arenum.exact.exactsum`): adds exactly across indexes of disjoint items."""
        return self._mass_side(t, "right")[0]

    def mass_gt_units(self, t: float) -> int:
        """As :meth:`mass_ge_units` over the items with score ``> t``."""
        return self._mass_side(t, "left")[0]

    def total_mass_units(self) -> int:
        """Exact units of all items; also before the buckets are built (one pass over them)."""
        if not self.bucketed:
            return sum(exact_sum(values(xc)) for _, xc in self._chunks(4 * _CHUNK))
        return self._mass_units()[-1] << self._mass_shift

    def mass_ge(self, t: float) -> MassBracket:
        """Bracket on ``sum(exp(score))`` over items with score ``>= t`` (float rounding only): the
        exact sum of the items' ``fl(exp(score))``, correctly rounded, widened by the bracket of
        ``exp``'s own rounding."""
        S, n = self._mass_side(t, "right")
        return mass_bracket(to_float(S), n)

    def total_mass(self) -> MassBracket:
        """Bracket on the mass of all items; also before the buckets are built (one pass over them)."""
        return mass_bracket(to_float(self.total_mass_units()), self.N)

    def nucleus(self, p: float) -> tuple[int, int | None] | None:
        """``(k_lo, k_hi)``: the smallest ``k`` whose top-``k`` mass is ``>= p`` lies in it.

        Defined exactly: for each target ``p / (1 + e)`` and ``p / (1 - e)`` (``e`` the bracket's
        relative rounding), the smallest ``k`` whose EXACT sum of the top-``k`` items'
        ``fl(exp(score))`` is ``>= target``. Found by score, not by position: the level ``s*`` with
        ``S(> s*) < target <= S(>= s*)``, then ``k = count(> s*) + ceil((target - S(> s*)) / v)``
        with ``v = fl(exp(s*))``: tied items have one value, so the top-``k`` sums, hence ``k``, do
        not depend on the order of ties, and a merge of shards' exact sums reproduces it (the bucket
        from the exact cumulative units, then :meth:`~arenum.exact.exactsum.PrefixSums.reaching` in it).
        ``None`` if even all items may hold less than ``p``; ``k_hi`` ``None`` if they may hold less than
        ``p / (1 - e)`` (the caller knows whether more lie beyond them)."""
        mc = self._mass_units()
        z = self._mass_shift
        n = max(self.N, 1)
        e = (n + 8) * _U
        out: list[int | None] = []
        for target in (p / (1 + e), p / (1 - e)):
            tu = float_units(target)
            tz = -((-tu) >> z)  # ceil(tu / 2**z): mc[j] >= tz iff mc[j] << z >= tu
            if tz > mc[-1]:
                out.append(None)
            elif tu <= 0:
                out.append(min(1, self.N))
            else:
                b = bisect.bisect_left(mc, tz) - 1  # (mc[b] << z) < tu <= (mc[b + 1] << z)
                out.append(int(self.cum[b]) + self._prefix(b).reaching(tu - (mc[b] << z)))
        if out[0] is None:
            return None
        return out[0], out[1]

    def _check(self) -> None:
        """Assert the index's invariants (for tests). An index whose buckets are not built yet (its
        items only counted, or its build interrupted) is checked for its items alone."""
        if not self.bucketed:
            pos, x = self._all_items()
            assert _positions(pos, x.shape[0]).shape[0] == self.N and (x >= self.T).all()
            return
        assert self.perm.shape[0] == self.N and self.cum[-1] == self.N
        assert self.seg_start[0] == 0 and self.seg_start[-1] == self.N
        assert np.array_equal(self.seg_cum[:, -1], np.diff(self.seg_start)) and (np.diff(self.seg_cum, axis=1) >= 0).all()
        pos, x = self._all_items()
        pos = _positions(pos, x.shape[0])
        assert pos.shape[0] == self.N and (x >= self.T).all()
        assert np.array_equal(self._scores(pos), x)
        seen = []
        prev = math.inf
        for b in range(self.nb):
            P, xb = self._sorted_bucket(b)
            seen.append(P)
            if xb.size:
                assert xb[0] <= prev
                assert (np.diff(xb) <= 0).all()
                prev = xb[-1]
        assert np.array_equal(np.sort(np.concatenate(seen)), pos)


def mass_bracket(m: float, n: int) -> MassBracket:
    """The bracket of a mass ``m`` summed over ``n`` items (float rounding of their values)."""
    e = (n + 8) * _U * m
    return MassBracket(max(0.0, m - e), m + e)
