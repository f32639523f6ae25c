"""SeekIndex: the persistent, deepening exact index over one model.

It owns a :class:`~arenum.exact.tree.PrefixTree` and the :class:`~arenum.exact.index.ExactIndex` at the tree's
built threshold, and decides budgets:

- a query with a known score bound (``count(t)``, ``rank`` of a sequence) deepens straight to it;
- a query by position (``unrank(i)``, ``threshold(k)``) deepens in rounds chosen from the observed
  growth of the counts: the tree keeps, for every table it has seen, a histogram of the completion
  and prefix scores it contains, so the budget at which ``i + 1`` sequences are known is read off
  directly, and each round adds at most ~3% more forwards near the target (doubling while far away).
  Total forwards stay within a few percent of the minimum (the live prefixes at the answer's budget).

Every answer is exact; caps (``max_depth_bits``, ``max_prefixes``, ``max_sequences``) raise
:class:`BudgetExceeded` instead of answering approximately. The facade turns that into brackets.
"""
from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from typing import Iterator

import numpy as np

from .._guard import locked
from .._validate import CountMode, check_count_mode, exact_int, finite_float, LN2
from .index import ExactIndex
from .quantize import Quantizer
from ._arrays import seg_first_below
from .budget import BUDGET_HINT, position_beyond_message, position_floor
from .frontier import hist_cum
from ..errors import BudgetExceeded
from .tree import HIST_BINS_PER_BIT, PrefixTree

__all__ = ["SeekIndex", "BudgetExceeded", "Limits"]


@dataclass
class Limits:
    """Caps on an exact build. ``None`` means no cap.

    max_depth_bits: deepest budget ever built, in bits.
    max_prefixes: live prefixes (forwards) the tree may hold.
    max_sequences: complete sequences the index may hold.
    max_bytes: memory the tree, the index and the oracle's table cache may hold together, in bytes.
    """

    max_depth_bits: float = 4096.0
    max_prefixes: int | None = 20_000_000
    max_sequences: int | None = 300_000_000
    max_bytes: int | None = None


MIN_NODE_BYTES = 57
"""Fewest bytes the tree holds per node (its columns for a fixed-length tree; 65 when terminating)."""

INDEX_BYTES_PER_SEQUENCE = 16
"""Upper estimate of the exact index's memory per indexed sequence (``perm`` and its build)."""


def default_max_bytes() -> int:
    """Half of this machine's physical memory (4 GiB where it cannot be read)."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")) // 2
    except (AttributeError, OSError, ValueError):  # pragma: no cover - non-POSIX
        return 4 << 30


class SeekIndex:
    """Low-level: the budget steering under :meth:`arenum.AutoregressiveEnumerable.unrank`,
    ``slice``, ``count`` and ``threshold`` (which a user wants: they validate their arguments, flag
    caps and fall back past them). Exact, deepening random access over a model's support in
    descending score order; its query arguments are trusted (not validated again here).

    Same as ``sorted(support, key=score, reverse=True)`` materialized lazily: ``unrank(i)`` is its
    ``i``-th element, ``count(t)`` the number of elements with score ``>= t``. Ties: shorter first,
    then lexicographic by table positions. Cost: one forward per live prefix at the needed budget.
    """

    exact_order = True
    """Items come in exact descending score order (a rescoring index may use the last score as a bound)."""

    def __init__(self, tree: PrefixTree, *, quantizer: Quantizer, limits: Limits, count_mode: CountMode = "auto",
                 decode=None) -> None:
        self.tree = tree
        self._lock = tree.lock  # one lock per tree: one thread builds or deepens at a time
        self.quantizer = quantizer
        self.limits = limits
        self.count_mode = check_count_mode(count_mode)
        self._decode = decode if decode is not None else tree.oracle.tokens
        self._index: ExactIndex | None = None
        self._shallow: ExactIndex | None = None  # past a cap at the built threshold: a smaller index
        #: the last build a cap refused: ``(T, max_prefixes, max_bytes left, tree bytes, message)``
        #: (:meth:`_deepen`: a build at least as deep is refused at once while it still holds)
        self._refused: tuple[float, float, float, int, str] | None = None
        #: :meth:`freeze`: no build past the budget built then (a server's answers never depend on its requests)
        self.frozen = False
        self.builds = 0
        self.index_seconds = 0.0  # wall time spent building exact indexes

    # ------------------------------------------------------------------ properties
    @property
    def max_depth_bits(self) -> float:
        return self.limits.max_depth_bits

    @max_depth_bits.setter
    def max_depth_bits(self, v: float) -> None:
        self.limits.max_depth_bits = float(v)

    @property
    def depth_floor(self) -> float:
        """Lowest score (nats) an exact build may reach: ``-max_depth_bits * ln 2``."""
        return -self.limits.max_depth_bits * LN2

    @property
    def at_depth_floor(self) -> bool:
        """The tree is built down to :attr:`depth_floor`: no deeper exact build is possible."""
        return self.tree.built <= self.depth_floor

    @property
    def current(self) -> ExactIndex | None:
        """The last index built or being counted (its buckets maybe not built), without building
        anything; ``None`` before the first build. For reporting and for heads past a cap."""
        return self._index

    @property
    def indexed(self) -> int:
        """Sequences in :attr:`current` (0 before the first build)."""
        return self._index.N if self._index is not None else 0

    @property
    def memory_bytes(self) -> int:
        """Memory held by the tree and the index (:data:`INDEX_BYTES_PER_SEQUENCE` per indexed sequence)."""
        return self.tree.memory_bytes() + INDEX_BYTES_PER_SEQUENCE * self.indexed

    def surely_over_caps(self, sequences: int | float, per_prefix: int = 1, *, prefixes: int | float = 0) -> bool:
        """Whether an exact build holding ``sequences`` sequences (a certified lower count) surely
        passes a cap, with a margin of 2x: it fetches at least ``sequences / per_prefix`` prefixes
        (``per_prefix``: 1 for a terminating support, each sequence's body fetched; the widest
        table for a fixed length), or ``prefixes`` where that is more (a certified lower count of
        the prefixes themselves), each a node of at least ``MIN_NODE_BYTES`` bytes, and its index
        holds them all. Lets a caller that has the certified count skip a build that would only
        end in :class:`BudgetExceeded` (its time and memory)."""
        lim = self.limits
        prefixes = max(prefixes, sequences / max(1, per_prefix))
        return ((lim.max_sequences is not None and sequences > 2 * lim.max_sequences)
                or (lim.max_prefixes is not None and prefixes > 2 * lim.max_prefixes)
                or (lim.max_bytes is not None and prefixes * MIN_NODE_BYTES > 2 * lim.max_bytes))

    @property
    def built_bits(self) -> float:
        """Budget (bits) the index currently covers exactly; 0.0 before the first build."""
        T = self.tree.built
        return 0.0 if T == math.inf else -T / LN2

    @property
    @locked
    def truncated(self) -> bool:
        """The declared support was cut: the depth cap bound a prefix with budget left, or the
        build reached ``max_depth_bits`` while more sequences exist."""
        return self.tree.depth_truncated or self.more_below_floor

    @property
    @locked
    def more_below_floor(self) -> bool:
        """The build reached :attr:`depth_floor` while the support goes on below it: the order past
        the index is not in it (a support built whole, to ``-inf``, has nothing below)."""
        return -math.inf < self.tree.built <= self.depth_floor and self._more_beyond()

    def _more_beyond(self) -> bool:
        return self.tree.completions_beyond(self.limits.max_depth_bits)

    @property
    @locked
    def dropped_upper(self) -> int | float:
        """Certified bound on sequences within the built budget excluded by ``branch_cap``."""
        T = self.tree.built
        return 0 if T == math.inf else self.dropped_bound(T)

    @property
    @locked
    def size(self) -> int:
        """Sequences currently indexed (all with score ``>=`` the built threshold)."""
        return self.index().N

    # ------------------------------------------------------------------ building
    @locked
    def index(self) -> ExactIndex:
        """The exact index at the tree's built threshold (rebuilt only after a deepening)."""
        if self.tree.built == math.inf:
            self._deepen(0.0, -math.inf)  # root only (whole table kept): sequences of probability 1
        idx = self._items_at_built()
        if not idx.bucketed:
            t0 = time.perf_counter()
            idx.complete()
            self.index_seconds += time.perf_counter() - t0
            self.builds += 1
        return idx

    def _items_at_built(self) -> ExactIndex:
        """The index at the built threshold, its items found (its buckets maybe not built yet).

        Finding the items counts them: more than ``max_sequences`` raises before any bucket is
        built, and :meth:`ensure_count` decides from the count whether to build at all."""
        T = self.tree.built
        if self._index is None or self._index.T != T:
            t0 = time.perf_counter()
            self._index = self._make_index(T)
            self.index_seconds += time.perf_counter() - t0
        self._check_caps(self._index)
        return self._index

    def _make_index(self, T: float) -> ExactIndex:
        """A new index of the sequences with score ``>= T``, its items counted, buckets not built."""
        return ExactIndex(self.tree, T, buckets=False)

    def _check_caps(self, idx: ExactIndex) -> None:
        """Raise :class:`BudgetExceeded` when building ``idx``'s buckets would pass a cap."""
        lim = self.limits.max_sequences
        if lim is not None and idx.N > lim:
            raise BudgetExceeded(f"the index would hold {idx.N} sequences > max_sequences={lim}")
        mb = self.limits.max_bytes
        if mb is not None and not idx.bucketed:
            need = self.tree.memory_bytes() + INDEX_BYTES_PER_SEQUENCE * idx.N
            if need > mb:
                raise BudgetExceeded(
                    f"the index of {idx.N} sequences would bring memory to about {need:,} bytes "
                    f"> max_bytes={mb:,}")

    def _index_above(self, T: float) -> ExactIndex:
        """An index of every sequence with score ``>= T`` (``T >=`` the built threshold): the one at
        the built threshold when it is within the caps, else one at ``T`` itself.

        A deep query may have built the tree past what ``max_sequences`` (or ``max_bytes``) lets
        one index hold; shallower queries are still answered exactly from a smaller index."""
        try:
            return self.index()
        except BudgetExceeded:
            if not T > self.tree.built:
                raise
        sh = self._shallow
        if sh is None or sh.T > T or sh.T < self.tree.built:
            sh = None
            t0 = time.perf_counter()
            idx = self._make_index(T)
            self._check_caps(idx)
            idx.complete()
            self.index_seconds += time.perf_counter() - t0
            self.builds += 1
            self._shallow = sh = idx
        return sh

    def _index_holding(self, n: int) -> ExactIndex:
        """Past a cap at the built threshold: the shallowest index holding ``n`` sequences, found
        from the tree's completion histogram (exact above the built threshold)."""
        sh = self._shallow
        if sh is not None and sh.N >= n and sh.T >= self.tree.built:
            return sh
        over = self._index
        if over is None or over.T != self.tree.built or over.N < n:
            raise BudgetExceeded(f"position {n - 1} needs a deeper index than the caps allow")
        hist = self.tree.completions_hist
        b = self.tree.bits_for(hist, n)
        i = len(hist) if b is None else int(math.ceil(b * HIST_BINS_PER_BIT - 1e-9))
        while True:
            T = -i / HIST_BINS_PER_BIT * LN2
            if T <= self.tree.built:
                self._check_caps(over)  # raises: the built index holds too many
            idx = self._index_above(T)
            if idx.N >= n:
                return idx
            i += 1  # the histogram's float edge: one bin deeper

    def _deepen(self, T: float, keep: float | None, max_prefixes: int | None = None) -> None:
        """Deepen the tree to ``T`` within the caps (:class:`BudgetExceeded` past one); ``max_prefixes``:
        a tighter cap on the live prefixes for this build alone.

        A build refused by a cap in the tree is remembered: a later one at least as deep, under caps
        no looser and with the tree holding no fewer bytes, needs every node the refused one needed
        and is refused at once, saying so, before any forward or scan of the frontier (each such
        retry scanned millions of prefixes: 0.2-0.4 s a rank past the cap)."""
        lim = self.limits.max_prefixes
        if max_prefixes is not None:
            lim = max_prefixes if lim is None else min(lim, max_prefixes)
        bits = -T / LN2
        if self.frozen:
            raise BudgetExceeded(f"an exact answer at {bits:.3f} bits is past the frozen index "
                                 f"({-self.tree.built / LN2:.3f} bits built)")
        if lim is not None:
            known = self.tree.known_prefixes(bits)
            if known > lim:
                raise BudgetExceeded(f"an exact answer at {bits:.3f} bits needs at least {known} live prefixes "
                                     f"> max_prefixes={lim}; {BUDGET_HINT}")
        mb = self.limits.max_bytes  # the indexes held while the tree deepens take their share of it
        if mb is not None:
            held = [getattr(i, "held_bytes", lambda i=i: INDEX_BYTES_PER_SEQUENCE * i.N)()
                    for i in (self._index, self._shallow) if i is not None]  # a merged index: estimated
            mb = max(1, mb - sum(held))
        caps = (math.inf if lim is None else lim, math.inf if mb is None else mb)
        r = self._refused
        if r is not None and T <= r[0] and caps[0] <= r[1] and caps[1] <= r[2] and self.tree.memory_bytes() >= r[3]:
            raise BudgetExceeded(f"an exact answer at {bits:.3f} bits is past the caps, as one at "
                                 f"{-r[0] / LN2:.3f} bits was: {r[4]}")
        try:
            self.tree.deepen(T, keep, max_prefixes=lim, max_bytes=mb)
        except BudgetExceeded as e:
            self._refused = (T, *caps, self.tree.memory_bytes(), str(e))
            raise

    def freeze(self) -> None:
        """No deepening from now on, even one the prefixes held would allow without a forward: every
        answer past the budget built so far takes its capped path (a certified DP's bracket, an
        estimate, a bracket), the same whatever was asked before."""
        self.frozen = True

    @locked
    def ensure_bits(self, bits: float) -> ExactIndex:
        """Make the index exact down to ``bits`` of budget (score ``>= -bits * ln 2``)."""
        bits = finite_float("bits", bits)
        if bits > self.limits.max_depth_bits:
            raise BudgetExceeded(f"budget {bits:.3f} bits exceeds max_depth_bits={self.limits.max_depth_bits}")
        return self.ensure_score(-bits * LN2)

    @locked
    def ensure_score(self, t: float, max_prefixes: int | None = None) -> ExactIndex:
        """Make the index exact for every score ``>= t`` (nats; ``-inf``: the whole support).

        A score bound is what the caller asked for, so it is followed below ``max_depth_bits`` (which
        caps only the deepening of position queries); ``max_prefixes`` and ``max_sequences`` still
        apply (:class:`BudgetExceeded`), and ``max_prefixes`` given here tightens the first for this
        build alone (a rank that a certified DP can answer instead)."""
        if t < self.tree.built:
            self._deepen(t, t - self.tree.keep_margin_bits * LN2, max_prefixes)
        return self._index_above(t)

    @locked
    def ensure_count(self, n: int, *, fail_fast: bool = False, aim: int | None = None) -> ExactIndex:
        """Deepen until at least ``n`` sequences are indexed, or the support (within caps) is exhausted.

        Rounds: the budget where the completions already seen reach ``n`` is read off the tree's
        histogram (an over-estimate of the budget needed, since unseen prefixes only add
        completions) and the growth of the exact counts extrapolates it; rounds close in from
        below, halving the distance, or at most double the forwards while too few completions are
        known. The index is rebuilt only when the histogram says the built budget holds ``n``;
        when the histogram bin straddling the budget leaves that in doubt, the items are counted
        first (the index's first phase) and the buckets are built only if the count suffices.
        ``fail_fast``: raise :class:`BudgetExceeded` as soon as :func:`~arenum.exact.budget.position_floor`
        proves that ``n`` sequences need more than ``max_prefixes`` (else: build up to the cap).
        ``aim`` (``>= n``): any count from ``n`` on will do, and about ``aim`` is wanted (a stream that
        serves whatever the index holds): the rounds are planned for ``aim`` and go straight to its
        budget instead of closing in on it, so a stream asking for ``n = served + 1`` deepens in about
        one round a call; the budget is never past where the completions seen reach ``aim``.
        """
        tree = self.tree
        if self._index is not None and self._index.T == tree.built and self._index.N >= n:
            try:
                return self.index()
            except BudgetExceeded:
                return self._index_holding(n)
        while True:
            if tree.built == math.inf:
                self.index()
                continue
            if tree.built == -math.inf:  # the whole support is built
                return self.index()
            lim = self.limits.max_prefixes
            if fail_fast and lim is not None and tree.support.branch_cap is None:
                floor = position_floor(n, terminating=tree.support.is_terminating,
                                       known_prefixes=tree.known_prefixes)
                if floor > lim:
                    raise BudgetExceeded(position_beyond_message(n, floor, lim))
            cur = self.built_bits
            cum = hist_cum(tree, tree.completions_hist)  # the populated bins only (later ones repeat the last)
            at_built = int(cum[max(0, min(len(cum) - 1, int(round(cur * HIST_BINS_PER_BIT)) - 1))])
            floor_hit = tree.built <= self.depth_floor
            if at_built >= n or floor_hit or tree.support.branch_cap is not None:
                # count first: the bin straddling the budget may hold fewer than it seems, and
                # then the buckets would be built for nothing
                try:
                    if floor_hit or self._items_at_built().N >= n:
                        return self.index()
                except BudgetExceeded:
                    return self._index_holding(n)
            want_n = n if aim is None else max(n, aim)  # what the rounds are planned for
            b_lo = None if tree.support.branch_cap is not None else tree.bits_for(tree.completions_hist, want_n)
            if b_lo is not None and b_lo <= cur + 1e-9:
                b_lo = None  # the histogram overcounted (float edge): grow instead
            est = self._extrapolate(cum, want_n)
            step = 1.0 / HIST_BINS_PER_BIT
            if b_lo is None:
                # few completions seen: at most double the forwards (by the prefixes already
                # seen), grow the budget by at most a quarter, and never pass the extrapolation
                want = 2 * tree.fetched_nodes + tree.oracle.batch_size
                known_total = tree.known_prefixes(math.inf)
                b_cap = tree.bits_for(tree.prefixes_hist, min(want, known_total) - 1) if known_total > 1 else None
                if b_cap is not None and b_cap <= cur:
                    i0 = int(cur * HIST_BINS_PER_BIT) + 1
                    nxt = np.flatnonzero(tree.prefixes_hist[i0 : tree.hist_top])
                    b_cap = (i0 + int(nxt[0]) + 1) / HIST_BINS_PER_BIT if nxt.size else None
                b_next = b_cap if b_cap is not None else self.limits.max_depth_bits
                b_next = min(b_next, cur + max(1.0, 0.25 * cur), est + step)
            else:
                # the target lies in (cur, min(b_lo, est)]-ish: close in from below, halving the
                # distance while it is large (growth is not exactly exponential), so the last
                # round overshoots the needed budget by a small fraction of a bit at most
                target = min(b_lo, max(est, cur + step))
                gap = target - cur
                b_next = target if gap <= 0.125 or aim is not None else cur + 0.5 * gap
            b_next = max(b_next, cur + step)
            b_next = min(b_next, self.limits.max_depth_bits)
            margin = tree.keep_margin_bits
            head_bits = est + margin  # less certain than b_lo: one more margin
            if b_lo is not None:
                head_bits = min(head_bits, b_lo)
            keep_bits = max(head_bits, b_next) + margin
            del cum  # the histogram's 4 MiB cumulative sum is not held while the tree deepens (max_bytes)
            self._deepen(-b_next * LN2, -keep_bits * LN2)

    def _extrapolate(self, cum: np.ndarray, n: int) -> float:
        """Budget (bits) where ``n`` completions are expected, from the growth of the exact counts.

        Counts at budgets up to the built one are exact (every live prefix there is fetched); their
        growth over the last stretch of bits extrapolates to ``n``.
        """
        cur = self.built_bits
        i1 = int(round(cur * HIST_BINS_PER_BIT)) - 1
        if i1 < 1:
            return cur + max(2.0, cur)
        c1 = int(cum[min(i1, len(cum) - 1)])
        # the local growth over the last half bit: log-count is not linear in the budget
        i0 = max(0, i1 - HIST_BINS_PER_BIT // 2)
        c0 = int(cum[min(i0, len(cum) - 1)])
        if c1 < 64 or c0 < 8 or c1 <= c0:
            return cur + max(2.0, cur)
        rate = math.log2(c1 / c0) / ((i1 - i0) / HIST_BINS_PER_BIT)  # bits of count per bit of budget
        grow = math.log2(max(n, 2) / c1) if n < 2**1000 else math.log2(n) - math.log2(c1)  # n past a float
        return cur + grow / max(rate, 1e-3)

    # ------------------------------------------------------------------ queries
    def _seq(self, idx: ExactIndex, P: np.ndarray) -> list[tuple]:
        return [self._decode(s) for s in idx.sequences(np.asarray(P, np.int64))]

    @locked
    def unrank(self, i: int) -> tuple[tuple, float]:
        """``(sequence, log_prob)`` at 0-based position ``i >= 0`` of the exact descending order."""
        idx = self._holding(i)
        p, x = idx.item(i)
        return self._seq(idx, [p])[0], x

    def _holding(self, i: int, what: str | None = None) -> ExactIndex:
        """The index holding position ``i``; ``IndexError`` past the support (or ``max_depth_bits``),
        naming the position as ``what`` (default ``rank i``)."""
        idx = self.ensure_count(i + 1, fail_fast=True)
        if i >= idx.N:
            raise IndexError(self._exhausted_msg(what or f"rank {i}", idx.N))
        return idx

    def _exhausted_msg(self, what: str, n: int) -> str:
        if -math.inf < self.tree.built <= self.depth_floor and self._more_beyond():
            return (f"{what} is beyond the {n} sequences within max_depth_bits="
                    f"{self.limits.max_depth_bits:g}")
        sup = self.tree.support
        if n == 0 and sup.eos_id is not None and sup.constraint is None and not self.tree.completions_beyond(0.0):
            return (f"{what} is beyond the support (0 sequences: no table of a prefix shorter than max_len={sup.cap} "
                    f"gives eos={sup.eos!r} a positive probability)")
        return f"{what} is beyond the support ({n} sequences)"

    @locked
    def slice(self, start: int, k: int) -> list[tuple[tuple, float]]:
        """Items ``start .. start+k-1`` (fewer at the end of the support); ``start, k >= 0``."""
        if k == 0:
            return []
        idx = self.ensure_count(start + k, fail_fast=True)
        P, xs = idx.items(start, start + k)
        return list(zip(self._seq(idx, P), xs.tolist()))

    def iter_from(self, i: int = 0, *, chunk: int = 1024) -> Iterator[tuple[tuple, float]]:
        """Iterate the order from position ``i`` on, deepening as needed."""
        i = exact_int("i", i, minimum=0)
        while True:
            items = self.slice(i, chunk)
            if not items:
                return
            yield from items
            i += len(items)
            if len(items) < chunk:
                return

    @locked
    def count(self, min_log_prob: float) -> int:
        """Exact number of sequences with ``log_prob >= min_log_prob`` (a float, ``-inf`` allowed)."""
        if min_log_prob > 0:
            return 0
        return self.ensure_score(min_log_prob).count_ge(min_log_prob)

    @locked
    def ensure_mass(self, p: float) -> tuple[ExactIndex, bool]:
        """Deepen until the indexed sequences certainly hold probability mass ``>= p``.

        Returns ``(index, truncated)``: ``truncated`` is True when a cap (``max_depth_bits``,
        ``max_prefixes``, ``max_sequences``) stopped the deepening first. Rounds at least double the
        indexed sequences (by ``batch_size`` at least), so the forwards stay within a small factor
        of those of the smallest head holding ``p``.
        """
        while True:
            try:
                idx = self.index()
            except BudgetExceeded:  # the built budget already holds more than max_sequences
                if self._index is None:
                    raise
                return self._index, True
            tm = idx.total_mass()
            if tm.hi >= p:
                r = idx.nucleus(p)
                if r is not None and (tm.lo >= p or self.at_depth_floor):
                    return idx, False
            if self.at_depth_floor:
                return idx, True
            want = max(2 * idx.N, idx.N + self.tree.oracle.batch_size)
            cap = self.limits.max_sequences
            if cap is not None and idx.N < cap < want:  # not past the cap in one round: the head holding p
                want = cap  # may fit under it (a fresh index jumped past it, an earlier one did not)
            try:
                self.ensure_count(want)
            except BudgetExceeded:
                try:
                    return self.index(), True
                except BudgetExceeded:  # past max_sequences: the items counted, buckets not built
                    return self._index if self._index is not None else idx, True

    @locked
    def threshold(self, rank: int) -> float:
        """Log-prob of the ``rank``-th most probable sequence (1-based, ``rank >= 1``):
        ``count(threshold(k)) >= k``. Decodes no sequence. ``IndexError`` past the support, in the
        caller's 1-based ``k``."""
        idx = self._holding(rank - 1, f"k={rank} (1-based)")  # in the caller's k, not the 0-based position
        return idx.item(rank - 1)[1]

    @locked
    def rank_bracket(self, log_prob: float) -> tuple[int, int]:
        """``(lo, hi)`` with ``lo <= #{x : s(x) > log_prob} <= hi``; ``lo == hi`` when exact."""
        t = finite_float("log_prob", log_prob, allow_neg_inf=True)
        idx = self.ensure_score(t)
        c = idx.count_gt(t)
        if self.tree.support.branch_cap is None:
            return c, c
        return c, c + self.dropped_bound(t)

    @locked
    def _check(self) -> None:
        """Assert the invariants of the indexes held (for tests)."""
        for idx in (self._index, self._shallow):
            if idx is not None:
                assert idx.T >= self.tree.built, (idx.T, self.tree.built)
                idx._check()

    # ------------------------------------------------------------------ branch_cap bound
    @locked
    def dropped_bound(self, T: float) -> int | float:
        """Certified bound on sequences with score ``>= T`` excluded by ``branch_cap`` (tree built to T).

        A skipped completion counts 1; a skipped prefix ``q`` counts ``exp(s(q) - T)`` (its
        completions within the budget each have conditional probability ``>= exp(T - s(q))``).
        """
        return self._dropped(T)[0]

    @locked
    def dropped_mass(self, T: float) -> float:
        """Upper bound on the probability mass of sequences with score ``>= T`` excluded by ``branch_cap``."""
        return self._dropped(T)[1]

    def _dropped(self, T: float) -> tuple[int | float, float]:
        tree = self.tree
        cap = tree.support.branch_cap
        if cap is None or T == math.inf:
            return 0, 0.0
        ints = 0
        mass = 0.0
        floats: list[np.ndarray] = []
        for d in range(min(tree.n_levels, tree.leaf_level + 1)):
            lev = tree.view(d)
            if len(lev) == 0:
                continue
            sel = np.flatnonzero(lev.fetched & (lev.score >= T) & (lev.tlen > cap))
            if sel.size == 0:
                continue
            pool = lev.pool_lp
            off = lev.off[sel]
            s = lev.score[sel]
            lo = np.full(sel.shape[0], cap, np.int64)
            h = seg_first_below(pool, off, s, lo, lev.tlen[sel].astype(np.int64), T)
            cnt = h - cap
            tot = int(cnt.sum())
            if tot == 0:
                continue
            node = np.repeat(np.arange(sel.shape[0]), cnt)
            j = np.arange(tot) - np.repeat(np.cumsum(cnt) - cnt - cap, cnt)
            x = s[node] + pool[off[node] + j]
            mass += float(np.exp(x).sum())
            if tree.fixed_len is not None:
                if d == tree.leaf_level:
                    ints += tot
                    continue
                floats.append(x - T)
            else:
                is_eos = j == lev.eos_j[sel][node]
                ints += int(is_eos.sum())
                if d < tree.leaf_level:
                    floats.append((x - T)[~is_eos])
        mass *= 1 + 1e-12
        if not floats:
            return ints, mass
        y = np.concatenate(floats)
        if self.count_mode == "exact":
            return ints + sum(1 << int(math.ceil(v / LN2)) for v in y.tolist()), mass
        with np.errstate(over="ignore"):  # a count past float range: inf, still a bound
            # e**y with the slack of mass_count_bound: exp and the score sums round, and a prefix
            # holding 4 completions of mass e**T each must not floor 3.9999... to 3
            tot_f = float(np.floor(np.exp(y) * (1 + 1e-12)).sum()) + ints
        if self.count_mode == "auto" and tot_f < 2**53:
            return int(tot_f), mass
        return tot_f, mass
