"""The envelope index: approximate count, threshold and unrank at depths the exact tree cannot reach.

Model. ``n_paths`` paths are sampled from the model (a terminating model's paths skip ``eos``, so all
of them reach every depth); at depth ``d`` the step tables at the ``n_paths`` sampled contexts are
pooled into one averaged step distribution (each entry weighs ``1 / n_paths``): ``C_d`` for the
steps that continue, ``E_d`` for ``eos``. The envelope treats steps as independent across depths,
so the distribution of total scores is a convolution: ``P_0 = delta_0``, ``P_{d+1} = P_d * C_d``,
and the total is ``P_L`` (fixed length ``L``) or ``sum_d P_d * E_d`` (terminating).

Arithmetic. A distribution is a list of atoms (value in nats, weight). While the atoms are few they
are kept EXACT, added left to right exactly as a sequence's score is and merged only when equal as
floats; past ``MAX_PAIRS`` pairwise sums the envelope switches to a grid of ``GRID_PER_BUCKET``
cells per fine bucket of :attr:`quantizer` (values rounded to the grid; the rounding errors of ``L``
steps add like a random walk, about ``sqrt(L / 12)`` cells). Atoms below the budget
(``-budget_bits * ln 2``) are dropped; the budget grows on demand.

Guarantees. For a model whose step tables do not depend on the prefix, with exact atoms, ``count``
and ``threshold`` equal the exact index's (same floats), and ``unrank`` returns, for the ranks of
each fine bucket, exactly the sequences of that bucket (in walk order within it). For any other
model they are ESTIMATES without an interval (``method='envelope'``): the error depends on how much
the steps depend on the prefix; ``docs/estimates.md`` reports measured errors against the exact
index and against Monte Carlo.

Unrank. A rank maps to a fine bucket ``B`` and an offset inside it; the walk then goes down the
REAL model (one forward per step, memoized): at prefix ``q`` every table entry ``j`` gets the
envelope's count of completions of ``q j`` landing in ``B`` (a terminal entry counts 1 if its exact
score is in ``B``), the offset picks the entry, and is rescaled to the next level's counts. Returned
sequences are real, with exact log-probs; distinct ranks give distinct sequences wherever the counts
along the walk agree with the estimate (always, for prefix-independent models; offsets are floats,
so ranks closer than ``2**-53`` of a bucket's count may collide). Where the estimate promised
completions that the real model lacks, the walk takes the entry whose range is nearest to ``B``, so
the result can fall outside ``B``: the envelope guarantees only bucket order, and only as far as its
counts are right. It is therefore not known to be COMPLETE: a sequence it misplaces may never be
returned. It sets ``exact_order = False`` and ``dropped_upper = inf``, so a
:class:`arenum.RescoredIndex` built on it orders by it but never certifies.

Cost: at most ``n_paths`` forwards per depth to build (the first depth costs one), ``O(L)`` forwards
per ``unrank``, none per ``count``/``threshold``.

This module gives no confidence intervals: :mod:`arenum.estimate` does.
"""
from __future__ import annotations

import math
import threading
from typing import TYPE_CHECKING

import numpy as np

from ._guard import locked
from ._validate import exact_int, finite_float
from .quantize import LN2, Quantizer
from .results import CountResult, ThresholdResult
from .support import Support

if TYPE_CHECKING:
    from .oracle import StepOracle

__all__ = ["AREnvelopeIndex", "MAX_PAIRS", "GRID_PER_BUCKET"]

MAX_PAIRS = 1 << 21
"""Largest exact convolution (pairs of atoms); beyond it the envelope works on the grid."""
GRID_PER_BUCKET = 8
"""Grid cells per fine bucket once the atoms are no longer exact."""
_MAX_BUDGET_BITS = 4096.0


class _Dist:
    """Atoms: ``v`` float64 values (nats) in DESCENDING order, ``w`` float64 weights; ``exact`` False
    once values were rounded to the grid."""

    __slots__ = ("v", "w", "exact")

    def __init__(self, v: np.ndarray, w: np.ndarray, exact: bool) -> None:
        self.v, self.w, self.exact = v, w, exact

    @staticmethod
    def point() -> "_Dist":
        return _Dist(np.zeros(1), np.ones(1), True)

    @staticmethod
    def empty() -> "_Dist":
        return _Dist(np.zeros(0), np.zeros(0), True)

    @staticmethod
    def of(v: np.ndarray, w: np.ndarray, exact: bool = True) -> "_Dist":
        """Merge equal values (float equality), sort descending, drop zero weights."""
        if v.size == 0:
            return _Dist(np.zeros(0), np.zeros(0), exact)
        u, inv = np.unique(-v, return_inverse=True)
        ww = np.bincount(inv.reshape(-1), weights=w, minlength=u.size)
        keep = ww > 0
        return _Dist(-u[keep], ww[keep], exact)

    def __len__(self) -> int:
        return int(self.v.size)

    def prune(self, floor: float) -> "_Dist":
        k = int(np.searchsorted(-self.v, -floor, side="right"))
        return self if k == self.v.size else _Dist(self.v[:k], self.w[:k], self.exact)

    def total(self) -> float:
        return float(self.w.sum())

    def count_ge(self, t: float) -> float:
        k = int(np.searchsorted(-self.v, -t, side="right"))
        return float(self.w[:k].sum())

    def cum(self) -> np.ndarray:
        return np.cumsum(self.w)

    def count_in(self, lo: np.ndarray, hi: np.ndarray, cum: np.ndarray) -> np.ndarray:
        """Per query: total weight of atoms with ``lo < v <= hi``."""
        neg = -self.v  # ascending
        a = np.searchsorted(neg, -hi, side="left")  # first atom with v <= hi
        b = np.searchsorted(neg, -lo, side="left")  # first atom with v <= lo
        c = np.concatenate(([0.0], cum))
        return c[b] - c[a]


def _plus(a: _Dist, b: _Dist) -> _Dist:
    """Mixture (sum of measures)."""
    if len(a) == 0:
        return b
    if len(b) == 0:
        return a
    exact = a.exact and b.exact
    if not exact:
        return _Dist.of(np.concatenate([a.v, b.v]), np.concatenate([a.w, b.w]), False)
    return _Dist.of(np.concatenate([a.v, b.v]), np.concatenate([a.w, b.w]), True)


def _conv(a: _Dist, b: _Dist, floor: float, g_nats: float) -> _Dist:
    """Distribution of ``x + y`` (``x`` from ``a`` added LEFT of ``y`` from ``b``), pruned at ``floor``."""
    if len(a) == 0 or len(b) == 0:
        return _Dist.empty()
    a = a.prune(floor)
    b = b.prune(floor)
    if len(a) == 0 or len(b) == 0:
        return _Dist.empty()
    if a.exact and b.exact and len(a) * len(b) <= MAX_PAIRS:
        # only pairs that can stay above the floor: for each a-atom, the b-head above floor - x
        v = (a.v[:, None] + b.v[None, :]).reshape(-1)
        w = (a.w[:, None] * b.w[None, :]).reshape(-1)
        keep = v >= floor
        return _Dist.of(v[keep], w[keep], True)
    ka, ha = _to_grid(a, g_nats)
    kb, hb = _to_grid(b, g_nats)
    kmax = int(math.floor(-floor / g_nats + 0.5))
    h = np.convolve(ha, hb)
    k0 = ka + kb
    n = max(0, min(h.size, kmax - k0 + 1))
    h = h[:n]
    nz = np.flatnonzero(h > 0)
    return _Dist(-(k0 + nz) * g_nats, h[nz], False)


def _to_grid(d: _Dist, g_nats: float) -> tuple[int, np.ndarray]:
    """``(k0, h)``: weights on grid cells ``k0, k0+1, ...`` (cell ``k`` is the value ``-k g``)."""
    k = np.rint(-d.v / g_nats).astype(np.int64)
    k0 = int(k.min())
    h = np.bincount(k - k0, weights=d.w)
    return k0, h


class AREnvelopeIndex:
    """Approximate count / threshold / unrank of an :class:`~arenum.AutoregressiveEnumerable` from
    per-depth averaged step distributions (module docstring). Built by
    ``enumerable.envelope_index(n_paths=64, seed=0, budget_bits=64.0)``.

    ``count(t)`` ~ ``sum(1 for x in support if score(x) >= t)``, ``threshold(k)`` ~ the ``k``-th
    largest score, ``unrank(i)`` ~ ``sorted(support, key=score, reverse=True)[i]`` up to bucket order:
    ESTIMATES (``method='envelope'``), exact for prefix-independent models. Cost: at most ``n_paths``
    forwards per depth to build, ``O(L)`` per ``unrank``.
    """

    exact_order = False
    """Only bucket order (and only as far as the estimate is right): see the module docstring."""
    dropped_upper = math.inf
    """The envelope may never return some sequences (it is not known to be complete)."""

    def __init__(self, oracle: "StepOracle", support: Support, quantizer: Quantizer, *, n_paths: int = 64,
                 seed: int | None = 0, budget_bits: float = 64.0, lock: "threading.RLock | None" = None) -> None:
        self._lock = lock if lock is not None else threading.RLock()
        self.n_paths = exact_int("n_paths", n_paths, minimum=1)
        b = finite_float("budget_bits", budget_bits)
        if b <= 0:
            raise ValueError(f"budget_bits must be > 0, got {budget_bits!r}")
        self._oracle = oracle
        self.quantizer: Quantizer = quantizer
        self.seed = seed
        self._rng = np.random.default_rng(seed)
        self.support = support
        self.fixed_len = support.fixed_len
        self.eos_id = support.eos_id
        self.cap = support.cap
        self.g_nats = self.quantizer.fine_width_bits / GRID_PER_BUCKET * LN2
        # sampled contexts: distinct prefixes (id tuples) of the current depth and each path's prefix
        self._paths: list[tuple] = [()] * self.n_paths
        self._C: list[_Dist] = []  # per depth: continuing steps (all steps for fixed length)
        self._E: list[_Dist] = []  # per depth: eos steps (terminating)
        self._full = True  # every sampled table had the same size at its depth and no -inf entries
        self._sizes: list[set[int]] = []
        self.forwards = 0
        self.budget_bits = 0.0
        self._build(b)

    # ------------------------------------------------------------------ building
    @property
    def floor(self) -> float:
        """Lowest score (nats) the envelope's distributions hold: ``-budget_bits * ln 2``."""
        return -self.budget_bits * LN2 - 1e-9

    def _extend(self) -> None:
        """Sample one more depth of contexts (one batched pass over the distinct prefixes)."""
        o = self._oracle
        f0 = o.stats.forwards
        uniq = sorted(set(self._paths))
        pos = {p: i for i, p in enumerate(uniq)}
        heads = o.fetch_heads([o.tokens(p) for p in uniq], np.full(len(uniq), -np.inf))
        off = np.concatenate(([0], np.cumsum(heads.lens)))
        self.forwards += o.stats.forwards - f0
        cv: list[np.ndarray] = []
        ev: list[float] = []
        sizes = set()
        new_paths = []
        for p in self._paths:
            r = pos[p]
            ids = heads.ids[off[r] : off[r + 1]]
            lps = heads.lps[off[r] : off[r + 1]]
            sizes.add(int(heads.lens[r]))
            if self.eos_id is not None:
                e = ids == self.eos_id
                if e.any():
                    ev.append(float(lps[e][0]))
                ids, lps = ids[~e], lps[~e]
            cv.append(lps)
            if ids.size:  # continue the path with a non-eos token, drawn in proportion to p
                pr = np.exp(lps)
                j = int(np.searchsorted(np.cumsum(pr), self._rng.random() * pr.sum(), side="right"))
                new_paths.append(p + (int(ids[min(j, ids.size - 1)]),))
            else:
                new_paths.append(p)
        self._sizes.append(sizes)
        if len(sizes) > 1:
            self._full = False
        wt = 1.0 / self.n_paths
        allv = np.concatenate(cv) if cv else np.zeros(0)
        self._C.append(_Dist.of(allv, np.full(allv.size, wt)))
        self._E.append(_Dist.of(np.array(ev), np.full(len(ev), wt)))
        self._paths = new_paths

    def _depth_limit(self) -> int:
        return self.fixed_len if self.fixed_len is not None else self.cap

    @locked
    def _build(self, budget_bits: float) -> None:
        """(Re)compute the totals and suffix distributions for ``budget_bits``, sampling more depths
        of contexts only where a prefix within the budget can reach them."""
        self.budget_bits = min(float(budget_bits), _MAX_BUDGET_BITS)
        floor = self.floor
        g = self.g_nats
        Dmax = self._depth_limit()
        P = _Dist.point()
        total = _Dist.empty()
        self._depth = 0
        for d in range(Dmax):
            if d >= len(self._C):
                self._extend()
            last = d == Dmax - 1
            if self.fixed_len is not None:
                P = _conv(P, self._C[d], floor, g)
                if last:
                    total = P
            else:
                total = _plus(total, _conv(P, self._E[d], floor, g))
                P = _conv(P, self._C[d], floor, g) if not last else _Dist.empty()
            self._depth = d + 1
            if len(P) == 0:
                break
        self.total = total
        self.pruned = self._pruned_any()
        # suffix distributions for the walk: S[d] = completions from depth d on
        D = self._depth
        S: list[_Dist] = [_Dist.empty()] * (D + 1)
        S[D] = _Dist.point() if self.fixed_len is not None else _Dist.empty()
        for d in range(D - 1, -1, -1):
            cont = _conv(self._C[d], S[d + 1], floor, g) if (self.fixed_len is not None or d + 1 < Dmax) else _Dist.empty()
            S[d] = cont if self.fixed_len is not None else _plus(self._E[d], cont)
        self._S = S
        self._Scum = [s.cum() for s in S]
        q = self.quantizer
        w = q.fine_width_bits
        fb = np.floor((-total.v / LN2) / w).astype(np.int64) if len(total) else np.zeros(0, np.int64)
        self._fb0 = int(fb.min()) if fb.size else 0
        counts = np.bincount(fb - self._fb0, weights=total.w) if fb.size else np.zeros(0)
        self._bucket_cum = np.cumsum(counts)

    def _pruned_any(self) -> bool:
        """Whether the envelope's support goes on below the budget (from the per-depth minima)."""
        Dmax = self._depth_limit()
        if self._depth < Dmax:
            return True
        lo = 0.0
        low = 0.0
        for d in range(Dmax):
            C, E = self._C[d], self._E[d]
            if self.fixed_len is not None:
                lo += float(C.v[-1]) if len(C) else 0.0
                low = lo
            else:
                if len(E):
                    low = min(low, lo + float(E.v[-1]))
                if len(C):
                    lo += float(C.v[-1])
        return low < self.floor

    def _ensure_budget(self, bits: float) -> None:
        if bits > self.budget_bits:
            if self.budget_bits >= _MAX_BUDGET_BITS:
                raise ValueError(f"the envelope's budget cannot exceed {_MAX_BUDGET_BITS} bits")
            self._build(max(bits, self.budget_bits * 1.5))

    def _ensure_rank(self, i: int) -> None:
        while (self._bucket_cum.size == 0 or self._bucket_cum[-1] < i + 0.5) and self.pruned \
                and self.budget_bits < _MAX_BUDGET_BITS:
            self._build(min(_MAX_BUDGET_BITS, max(self.budget_bits * 1.5, self.budget_bits + 8.0)))

    # ------------------------------------------------------------------ queries
    @property
    def exact_atoms(self) -> bool:
        """The totals are exact sums of the pooled step values (no grid rounding happened)."""
        return self.total.exact

    def size(self) -> float:
        """Envelope count of the sequences within the current budget."""
        return float(self._bucket_cum[-1]) if self._bucket_cum.size else 0.0

    def _result_count(self, c: float, t: float) -> CountResult:
        hi = math.exp(-t) if t > -math.inf and -t < 700 else math.inf
        return CountResult(c, exact=False, method="envelope", estimate=c, ci_lo=0, ci_hi=hi,
                           forwards=self.forwards,
                           extra={"n_paths": self.n_paths, "budget_bits": self.budget_bits,
                                  "exact_atoms": self.exact_atoms, "interval": "none (certified mass bound)"})

    @locked
    def count(self, min_log_prob: float) -> CountResult:
        """Envelope estimate of ``#{x : s(x) >= min_log_prob}`` (no forward beyond building).

        ``ci_lo``/``ci_hi`` are only the certified ``[0, e^{-t}]``: the envelope has no interval."""
        t = finite_float("min_log_prob", min_log_prob)
        if t > 0:
            return self._result_count(0.0, t)
        self._ensure_budget(-t / LN2)
        return self._result_count(self.total.count_ge(t), t)

    @locked
    def threshold(self, rank: int) -> ThresholdResult:
        """Envelope estimate of the log-prob of the ``rank``-th most probable sequence (1-based)."""
        k = exact_int("rank", rank, minimum=1)
        self._ensure_rank(k - 1)
        cum = self.total.cum()
        j = int(np.searchsorted(cum, k - 0.5, side="left"))  # first atom whose cumulative count reaches k
        if j >= cum.size:
            if not self.pruned:
                raise IndexError(f"rank {k} is beyond the envelope's support ({self.size():.6g} sequences)")
            j = cum.size - 1
        x = float(self.total.v[j])
        return ThresholdResult(x, exact=False, method="envelope", estimate=x, ci_lo=-math.inf, ci_hi=0.0,
                               forwards=self.forwards, extra={"n_paths": self.n_paths,
                                                              "exact_atoms": self.exact_atoms})

    def bucket_of_rank(self, i: int) -> tuple[int, float]:
        """``(fine bucket, offset)`` of rank ``i`` under the envelope's counts; the offset is the centre
        ``i + 0.5`` of the rank's unit interval, measured from the bucket's start."""
        i = exact_int("i", i, minimum=0)
        self._ensure_rank(i)
        cum = self._bucket_cum
        if cum.size == 0 or i + 0.5 > cum[-1]:
            if not self.pruned and self._full:
                raise IndexError(f"rank {i} is beyond the support ({self.size():.6g} sequences)")
            b = int(cum.size - 1)
            return self._fb0 + b, float(i + 0.5 - (cum[b - 1] if b else 0.0))
        b = int(np.searchsorted(cum, i + 0.5, side="left"))
        return self._fb0 + b, float(i + 0.5 - (cum[b - 1] if b > 0 else 0.0))

    @locked
    def unrank(self, i: int) -> tuple[tuple, float]:
        """A real sequence for rank ``i`` and its exact log-prob: in the rank's fine bucket wherever the
        envelope's counts are right (module docstring). Cost: one forward per step (memoized)."""
        fb, o = self.bucket_of_rank(i)
        lo, hi = self.quantizer.bucket_log_prob_bounds(fb)
        return self._walk(lo, hi, o, self._bucket_count(fb))

    @locked
    def slice(self, start: int, k: int) -> list[tuple[tuple, float]]:
        """``[unrank(i) for i in range(start, start + k)]`` (stopping at the end of the support)."""
        start = exact_int("start", start, minimum=0)
        k = exact_int("k", k, minimum=0)
        out = []
        for i in range(start, start + k):
            try:
                out.append(self.unrank(i))
            except IndexError:
                break
        return out

    def _bucket_count(self, fb: int) -> float:
        b = fb - self._fb0
        cum = self._bucket_cum
        return float(cum[b] - (cum[b - 1] if b > 0 else 0.0))

    def _walk(self, lo: float, hi: float, o: float, expected: float) -> tuple[tuple, float]:
        o_ids: list[int] = []
        s = 0.0
        oracle = self._oracle
        Dmax = self._depth_limit()
        S, Scum = self._S, self._Scum
        for d in range(Dmax):
            ids, lps = oracle.table(oracle.tokens(o_ids))
            x = s + lps
            if self.eos_id is not None:
                term = ids == self.eos_id
            else:
                term = np.full(ids.size, d == Dmax - 1)
            c = np.zeros(ids.size)
            c[term] = ((x[term] > lo) & (x[term] <= hi)).astype(float)
            nt = ~term
            if d + 1 < len(S) and nt.any():
                c[nt] = S[d + 1].count_in(lo - x[nt], hi - x[nt], Scum[d + 1])
            tot = float(c.sum())
            if tot <= 0:
                j = self._nearest(x, term, d, lo, hi)
                o = 0.0
            else:
                o = o * tot / expected if expected > 0 else 0.0
                cum = np.cumsum(c)
                j = int(np.searchsorted(cum, o, side="right"))
                if j >= c.size:  # o beyond the counts (overflow rank): last entry with a count
                    j = int(np.flatnonzero(c > 0)[-1])
                    o = c[j] * (1 - 1e-12)
                else:
                    o = o - (cum[j - 1] if j else 0.0)
                expected = float(c[j])
            o_ids.append(int(ids[j]))
            s = s + float(lps[j])
            if term[j]:
                break
        return oracle.tokens(o_ids), s

    def _nearest(self, x: np.ndarray, term: np.ndarray, d: int, lo: float, hi: float) -> int:
        """Entry whose reachable range ``[x + min S, x + max S]`` is nearest to the bucket ``(lo, hi]``."""
        S = self._S[d + 1] if d + 1 < len(self._S) else _Dist.empty()
        if len(S):
            top = np.where(term, x, x + S.v[0])
            bot = np.where(term, x, x + S.v[-1])
        else:
            top = bot = np.where(term, x, -np.inf)
        dist = np.maximum(0.0, np.maximum(lo - top, bot - hi))
        return int(np.argmin(dist))

    def _check(self) -> None:
        """Assert internal invariants (for tests)."""
        for D in [self.total, *self._S]:
            assert (np.diff(D.v) < 0).all() and (D.w > 0).all()
        assert (np.diff(self._bucket_cum) >= -1e-9).all()

    def __repr__(self) -> str:
        return (f"AREnvelopeIndex(n_paths={self.n_paths}, budget_bits={self.budget_bits:g}, "
                f"size~{self.size():.4g}, exact_atoms={self.exact_atoms})")
