"""Monte Carlo estimates of counts, ranks, masses and thresholds, with confidence intervals.

Exact answers cost one forward per live prefix; beyond an affordable budget this module answers
from ancestral samples instead, always as an ESTIMATE with a standard error, an interval at a stated
confidence, and the method named.

Estimators (``n`` draws ``x_i ~ q``, ``q = p`` without a head):

- ``count(t) = #{x : s(x) >= t}``: importance sampling, ``(1/n) sum_i 1{s(x_i) >= t} / q(x_i)``;
- ``rank(s0) = #{x : s(x) > s0}``: the same with a strict inequality;
- ``mass_above(t)`` and ``cumulative(s0) = P(s >= s0)``: ``(1/n) sum_i 1{...} p(x_i) / q(x_i)``;
- ``threshold(k)``: the largest sampled score whose count estimate reaches ``k`` (inverting the
  count estimate), with the interval obtained by inverting the count's interval band.

All are unbiased for ``n`` fixed (``threshold`` only consistent). A draw of a terminating model that
reaches the depth cap without ``eos`` is outside the declared support: it contributes 0 but stays in
``n`` (dropping it would bias every estimate upward).

Combining with an exact head. When the exact index is built down to ``T`` (every sequence with
``s >= T`` counted exactly, ``N_T`` of them holding mass ``P_T``), the draws are taken from the TAIL
distribution ``q(x) = p(x) 1{s(x) < T} / (1 - P_T)`` instead of ``p``: walking down the tree, the
head mass below every live prefix is known exactly, so each step samples its children in proportion
to ``p(child) - head mass below it`` (no forward is spent for this). Then
``count(t) = N_T + (1/n) sum_i 1{t <= s(x_i) < T} / q(x_i)``. Its variance is
``(1/n) [(1 - P_T) sum_{t <= s < T} 1/p(x) - N_tail^2]`` against ``(1/n) [sum_{s >= t} 1/p(x) - N^2]``
for plain sampling: about a factor ``1 - P_T`` for counts, and ``(1 - P_T)^2`` or better for masses.
(Simply adding ``N_T`` to a plain estimate restricted to ``s < T`` can INCREASE the variance: the head
and tail parts of a plain weight are negatively correlated. That is why the head changes the draws.)

Intervals. Importance weights are heavy-tailed, so a normal interval ``m +- z se`` under-covers when
few draws land near ``t``. Counts use a log-normal interval ``[m / f, m f]``, ``f = exp(z se / m)``
(the delta method on ``log m``), which is asymmetric the way the error is; masses use Wilson's score
interval on the hit proportion. Both are then intersected with certified bounds: a count is at least
the head count plus the distinct sampled sequences in the region, and at most what the mass allows
(each counted sequence has probability ``>= e^t``). ``docs/estimates.md`` gives measured coverage.

Cost: drawing ``n`` samples of length ``L`` costs at most ``n L`` forwards, fewer because draws
sharing a prefix share its forward; all draws advance one level per batched model call
(``batch_next_logprobs``), so a transformer adapter reuses its KV cache level to level.

This module does not decide when to estimate: :class:`arenum.AutoregressiveEnumerable` does (its
``exact_limit``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import TYPE_CHECKING, Any

import numpy as np

from ._validate import exact_int, finite_float
from .results import CountResult, DensityRankResult, Estimate, ThresholdResult

if TYPE_CHECKING:
    from .index import ExactIndex
    from .oracle import StepOracle
    from .support import Support
    from .tree import PrefixTree

__all__ = ["SampleSet", "MonteCarloEstimator", "draw_samples", "head_masses", "INTERVALS"]

INTERVALS = ("bernstein", "log", "normal")
"""Interval shapes for counts: ``"bernstein"`` (default: log-normal lower end, empirical-Bernstein
upper end), ``"log"`` (log-normal both ends) or ``"normal"``."""

_ENTRY_CHUNK = 1 << 22  # table entries held at once while drawing one level (bounds memory for big V)
_KEEP_SUBTREE = 1e-9  # relative floor of a child's tail weight: keeps q > 0 on every tail sequence


@dataclass(frozen=True)
class SampleSet:
    """``n`` draws from the proposal ``q`` (``p`` itself when ``head_T`` is ``+inf``).

    score: float64 ``(n,)`` exact left-to-right log-prob ``s(x_i)`` of each drawn path.
    log_q: float64 ``(n,)`` log-probability of the draw under the proposal (``== score`` when ``q = p``).
    complete: bool ``(n,)`` the draw is in the declared support (terminating: it ended in ``eos``).
    seqs: the drawn token-id tuples.
    head_T: the draws avoid every sequence with ``s >= head_T`` (``+inf``: plain ancestral draws).
    head_count, head_mass: the exact head the draws avoid (``0`` and ``0.0`` without one).
    forwards: model forwards the drawing cost. seed: the generator seed.
    """

    score: np.ndarray
    log_q: np.ndarray
    complete: np.ndarray
    seqs: list[tuple]
    head_T: float
    head_count: int
    head_mass: float
    forwards: int
    seed: int | None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def n(self) -> int:
        return int(self.score.shape[0])


# --------------------------------------------------------------------------------------- head masses
def head_masses(tree: "PrefixTree", T: float) -> list[np.ndarray]:
    """Per tree level, float64 ``(n_d,)``: the probability mass of the complete sequences with
    ``s >= T`` below each node (the node's own completions included). Zero for nodes below ``T``.

    Requires the tree built to ``T`` (``tree.built <= T``). Costs no forward.
    """
    if tree.built > T:
        raise ValueError(f"the tree is built to {tree.built}, not down to {T}")
    L = min(tree.n_levels, tree.leaf_level + 1)
    H: list[np.ndarray] = [np.zeros(tree.level_size(d)) for d in range(L)]
    for d in range(L - 1, -1, -1):
        lev = tree.view(d)
        n = len(lev)
        if n == 0:
            continue
        live = np.flatnonzero(lev.fetched & (lev.score >= T))
        own = np.zeros(n)
        if live.size:
            s = lev.score[live]
            pool = lev.pool_lp
            if tree.fixed_len is not None:
                if d == tree.leaf_level:
                    tl = lev.tlen[live].astype(np.int64)
                    rep = np.repeat(np.arange(live.size), tl)
                    starts = np.cumsum(tl) - tl
                    gidx = np.arange(int(tl.sum()), dtype=np.int64) + np.repeat(lev.off[live] - starts, tl)
                    x = s[rep] + pool[gidx]
                    ok = x >= T
                    own[live] = np.bincount(rep[ok], weights=np.exp(x[ok]), minlength=live.size)
            else:
                ej = lev.eos_j[live]
                has = ej >= 0
                x = np.full(live.size, -math.inf)
                x[has] = s[has] + pool[lev.off[live][has] + ej[has]]
                ok = x >= T
                own[live[ok]] = np.exp(x[ok])
        if d + 1 < L and tree.level_size(d + 1):
            own += np.bincount(tree.view(d + 1).parent, weights=H[d + 1], minlength=n)
        H[d] = own
    return H


# --------------------------------------------------------------------------------------- drawing
def draw_samples(
    oracle: "StepOracle",
    n: int,
    support: "Support",
    *,
    seed: int | None = 0,
    tree: "PrefixTree | None" = None,
    head_T: float = math.inf,
    head_count: int = 0,
) -> SampleSet:
    """Draw ``n`` sequences level by level: every unfinished draw advances one token per level, and a
    level's distinct prefixes are scored in one batched pass (``oracle.fetch_heads``).

    Without ``tree`` (or with ``head_T = +inf``) the draws are ancestral (``q = p``). With the tree
    built to ``head_T``, they follow the tail distribution ``p(x) 1{s(x) < head_T} / (1 - P_head)``
    (module docstring); ``log_q`` records each draw's exact proposal log-probability.
    """
    n = exact_int("n", n, minimum=1)
    fixed_len, eos_id, cap = support.fixed_len, support.eos_id, support.cap
    rng = np.random.default_rng(seed)
    f0 = oracle.stats.forwards + oracle.stats.refetches
    use_head = tree is not None and head_T < math.inf
    H = head_masses(tree, head_T) if use_head else None
    L = fixed_len if fixed_len is not None else cap
    score = np.zeros(n)
    log_q = np.zeros(n)
    complete = np.zeros(n, np.bool_)
    seqs: list[tuple] = [()] * n
    # current level: distinct prefixes, each sample's prefix id, each prefix's tree node (-1: none)
    prefixes: list[tuple] = [()]
    uid = np.zeros(n, np.int64)
    node_of = np.array([0 if use_head else -1], np.int64)
    alive = np.arange(n, dtype=np.int64)
    v_seen = 256  # widest table seen: sizes the chunks of rows scored at once
    for d in range(L):
        if alive.size == 0:
            break
        m = len(prefixes)
        u = rng.random(alive.size)
        tok = np.empty(alive.size, np.int64)
        lp = np.empty(alive.size)
        lq = np.empty(alive.size)
        nxt_node = np.full(alive.size, -1, np.int64)
        terminal_level = fixed_len is not None and d == fixed_len - 1
        order = np.argsort(uid[alive], kind="stable")
        su = uid[alive][order]
        bounds = np.searchsorted(su, np.arange(m + 1))
        a = 0
        while a < m:
            b = min(m, a + max(1, _ENTRY_CHUNK // v_seen))
            heads = oracle.fetch_heads([oracle.tokens(p) for p in prefixes[a:b]], np.full(b - a, -np.inf))
            lens = heads.lens
            off = np.concatenate(([0], np.cumsum(lens)))
            nodes = node_of[a:b]
            w = np.exp(heads.lps)  # conditional probabilities, row by row
            child = np.full(w.shape[0], -1, np.int64)
            if use_head and (nodes >= 0).any():
                w, child = _tail_weights(tree, H, head_T, d, nodes, heads, off, w, eos_id, terminal_level)
            cw = _seg_cumsum(w, off, lens)  # row-local running sums, exact per row
            tot = cw[off[1:] - 1]
            # samples whose prefix is in rows a..b
            s0, s1 = bounds[a], bounds[b]
            idx = order[s0:s1]  # positions in `alive`
            r = su[s0:s1] - a
            j = _seg_search(cw, off[r], off[r + 1], u[idx] * tot[r])
            # never pick a zero-weight entry (float edge of the search)
            zero = w[j] <= 0
            if zero.any():
                for k in np.flatnonzero(zero):
                    seg = w[off[r[k]] : off[r[k] + 1]]
                    j[k] = off[r[k]] + int(np.flatnonzero(seg > 0)[-1])
            tok[idx] = heads.ids[j]
            lp[idx] = heads.lps[j]
            lq[idx] = np.log(w[j]) - np.log(tot[r])
            nxt_node[idx] = child[j]
            v_seen = max(v_seen, int(lens.max()))
            a = b
        score[alive] = score[alive] + lp
        log_q[alive] = log_q[alive] + lq
        # new prefixes: (old prefix id, token) pairs
        pair = np.stack([uid[alive], tok], axis=1)
        upair, inv = np.unique(pair, axis=0, return_inverse=True)
        inv = inv.reshape(-1)
        new_prefixes = [prefixes[int(p)] + (int(t),) for p, t in upair]
        new_node = np.full(upair.shape[0], -1, np.int64)
        new_node[inv] = nxt_node
        ended = np.zeros(alive.size, np.bool_)
        if eos_id is not None:
            ended = tok == eos_id
        if terminal_level:
            ended[:] = True
        for k in np.flatnonzero(ended):
            seqs[int(alive[k])] = new_prefixes[int(inv[k])]
        if eos_id is not None:
            complete[alive[tok == eos_id]] = True
        elif terminal_level:
            complete[alive] = True
        if d == L - 1:  # depth cap reached: remaining draws are incomplete
            for k in np.flatnonzero(~ended):
                seqs[int(alive[k])] = new_prefixes[int(inv[k])]
            break
        keep = ~ended
        alive = alive[keep]
        uid[alive] = inv[keep]
        prefixes = new_prefixes
        node_of = new_node
    if not use_head:
        log_q = score.copy()
    head_mass = float(H[0][0]) if use_head and H and H[0].size else 0.0
    return SampleSet(
        score=score, log_q=log_q, complete=complete, seqs=seqs,
        head_T=head_T if use_head else math.inf, head_count=int(head_count) if use_head else 0,
        head_mass=head_mass, forwards=oracle.stats.forwards + oracle.stats.refetches - f0, seed=seed,
    )


def _tail_weights(tree, H, T, d, nodes, heads, off, p_cond, eos_id, terminal_level):
    """Unnormalized tail weights of every table entry of rows whose prefix is a live tree node.

    For a row at node ``u`` and entry ``j``: ``p(u j) - head mass below u j`` (0 for a complete head
    sequence, floored at ``_KEEP_SUBTREE * p(u j)`` for a prefix so that q stays > 0 on every tail
    sequence), divided by ``p(u)``. Rows outside the tree keep ``p(j | u)``. Also returns, per entry,
    the child's tree node (``-1`` if none or below ``T``).
    """
    w = p_cond.copy()
    child = np.full(w.shape[0], -1, np.int64)
    rows = np.flatnonzero(nodes >= 0)
    lev = tree.view(d)
    nxt = tree.view(d + 1) if d + 1 < len(H) and tree.level_size(d + 1) else None
    for r in rows:  # rows in the tree are the distinct live prefixes of one level: few
        a, b = off[r], off[r + 1]
        if b == a:
            continue
        u = int(nodes[r])
        s_u = float(lev.score[u])
        if s_u < T:
            continue
        x = s_u + heads.lps[a:b]
        pu = math.exp(s_u)
        pj = np.exp(x)
        hj = np.zeros(b - a)
        if eos_id is not None:
            term = heads.ids[a:b] == eos_id
        else:
            term = np.full(b - a, terminal_level)
        in_head = term & (x >= T)
        if nxt is not None:
            cn = tree.child_nodes(d + 1, u, np.arange(b - a, dtype=np.int64))
            hit = (cn >= 0) & ~term
            c = cn[hit]
            live_c = nxt.score[c] >= T
            cc = np.full(b - a, -1, np.int64)
            cc[np.flatnonzero(hit)[live_c]] = c[live_c]
            has = cc >= 0
            hj[has] = H[d + 1][cc[has]]
            child[a:b] = cc
        ww = np.maximum(pj - hj, _KEEP_SUBTREE * pj)
        ww[in_head] = 0.0
        if not (ww > 0).any():  # every completion is in the head: draw from p (lands in the head)
            ww = pj
        w[a:b] = ww / pu
    return w, child


def _seg_cumsum(w: np.ndarray, off: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """Running sums restarted at every row (rows ``w[off[i]:off[i+1]]``), each exact to its row."""
    if lens.size and (lens == lens[0]).all():
        return np.cumsum(w.reshape(lens.size, int(lens[0])), axis=1).reshape(-1)
    out = np.empty_like(w)
    for a, b in zip(off[:-1].tolist(), off[1:].tolist()):
        np.cumsum(w[a:b], out=out[a:b])
    return out


def _seg_search(cum: np.ndarray, lo: np.ndarray, hi: np.ndarray, target: np.ndarray) -> np.ndarray:
    """Per query ``i``: the first ``k`` in ``[lo[i], hi[i])`` with ``cum[k] > target[i]`` (the last
    position if none): inverse-CDF sampling within one row, by a vectorized binary search."""
    lo = lo.astype(np.int64).copy()
    hi = (hi - 1).astype(np.int64)
    while True:
        act = lo < hi
        if not act.any():
            return lo
        mid = (lo + hi) // 2
        go_right = act & (cum[mid] <= target)
        lo = np.where(go_right, mid + 1, lo)
        hi = np.where(act & ~go_right, mid, hi)


# --------------------------------------------------------------------------------------- intervals
def _z(confidence: float) -> float:
    return NormalDist().inv_cdf(0.5 + confidence / 2.0)


def _mean_se(w: np.ndarray, n: int) -> tuple[float, float]:
    m = float(w.sum()) / n
    if n < 2:
        return m, math.inf
    var = (float((w * w).sum()) - n * m * m) / (n - 1)
    return m, math.sqrt(max(var, 0.0) / n)


def _count_interval(m: float, se: float, z: float, kind: str, n: int, R: float,
                    alpha: float) -> tuple[float, float]:
    """Interval for the mean of ``n`` weights in ``[0, R]`` with mean ``m`` and standard error ``se``."""
    if kind == "normal":
        return max(0.0, m - z * se), m + z * se
    if m > 0:
        f = math.exp(min(700.0, z * se / m))
        lo, hi = m / f, m * f
    else:
        lo = hi = 0.0
    if kind == "bernstein":
        hi = max(hi, _bernstein_hi(m, se, n, R, alpha / 2))
    return lo, hi


def _bernstein_hi(m: float, se: float, n: int, R: float, delta: float) -> float:
    """Maurer-Pontil empirical Bernstein upper bound on the mean of i.i.d. weights in ``[0, R]``:
    ``m + sqrt(2 V ln(2/delta) / n) + 7 R ln(2/delta) / (3 (n - 1))`` holds with probability
    ``>= 1 - delta`` whatever their distribution (``V = n se^2`` the sample variance)."""
    if n < 2 or not math.isfinite(R):
        return math.inf
    lg = math.log(2.0 / delta)
    return m + math.sqrt(2.0 * se * se * lg) + 7.0 * R * lg / (3.0 * (n - 1))


def _wilson(k: int, n: int, z: float) -> tuple[float, float]:
    if n == 0:
        return 0.0, 1.0
    ph = k / n
    den = 1.0 + z * z / n
    c = (ph + z * z / (2 * n)) / den
    h = z * math.sqrt(ph * (1 - ph) / n + z * z / (4 * n * n)) / den
    return max(0.0, c - h), min(1.0, c + h)


@dataclass(frozen=True)
class ExactHead:
    """The exact part of a combined estimate: every sequence with ``s >= T`` is in ``index``."""

    T: float
    index: "ExactIndex"

    @property
    def count(self) -> int:
        return self.index.N

    @property
    def mass(self) -> float:
        return self.index.total_mass().mid


class MonteCarloEstimator:
    """Estimates from one :class:`SampleSet`, reused by every query (module docstring).

    ``confidence``: level of every interval (default 0.95). ``interval``: ``"log"`` (default) or
    ``"normal"`` for counts (masses always use Wilson's interval). ``head``: the exact head the draws
    avoid (required when the samples were drawn against one); a deeper head may be passed per query.
    """

    def __init__(self, samples: SampleSet, *, confidence: float = 0.95, interval: str = "bernstein",
                 head: ExactHead | None = None) -> None:
        c = finite_float("confidence", confidence)
        if not 0 < c < 1:
            raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
        if interval not in INTERVALS:
            raise ValueError(f"interval must be one of {INTERVALS}, got {interval!r}")
        if samples.head_T < math.inf and (head is None or head.T > samples.head_T):
            raise ValueError("samples drawn against an exact head need that head (or a deeper one)")
        self.samples = samples
        self.confidence = c
        self.interval = interval
        self.head = head
        self._z = _z(c)
        s = samples
        ok = s.complete
        self._w = np.where(ok, np.exp(-s.log_q), 0.0)  # 1/q(x): weight of one sequence in a count
        self._r = np.where(ok, np.exp(s.score - s.log_q), 0.0)  # p/q: weight in a mass
        order = np.argsort(-np.where(ok, s.score, -math.inf), kind="stable")
        self._order = order[ok[order]]  # complete draws by descending score
        self._sorted = s.score[self._order]

    @property
    def method(self) -> str:
        return "monte_carlo" if self.samples.head_T == math.inf else "monte_carlo+exact_head"

    @property
    def n(self) -> int:
        return self.samples.n

    def _head(self, head: ExactHead | None) -> ExactHead | None:
        h = head if head is not None else self.head
        if self.samples.head_T < math.inf:
            if h is None or h.T > self.samples.head_T:
                raise ValueError("these samples avoid an exact head: pass it (or a deeper one)")
            return h
        return None  # plain draws are never combined with a head (that can raise the variance)

    def _region(self, lo: float, strict: bool, hi: float) -> np.ndarray:
        s = self.samples.score
        above = s > lo if strict else s >= lo
        return self.samples.complete & above & (s < hi)

    def _extra(self, head: ExactHead | None, hits: int) -> dict[str, Any]:
        return {"hits": hits, "interval": self.interval, "head_count": head.count if head else 0,
                "head_bits": (-head.T / math.log(2.0)) if head else 0.0,
                "head_mass": head.mass if head else 0.0, "seed": self.samples.seed}

    def _wmax(self, t: float, h: ExactHead | None) -> float:
        """Largest possible count weight ``1/q(x)`` in the region ``s(x) >= t``: ``e^{-t}`` for plain
        draws, ``(1 - P_head) e^{-t}`` for tail draws (``q >= p / (1 - P_head)`` on the tail)."""
        if t == -math.inf or -t >= 700:
            return math.inf
        f = 1.0 if self.samples.head_T == math.inf else max(0.0, 1.0 - self.samples.head_mass) * (1 + 1e-9)
        return math.exp(-t) * f

    def _distinct(self, sel: np.ndarray) -> int:
        return len({self.samples.seqs[i] for i in np.flatnonzero(sel)})

    # ------------------------------------------------------------------ counts
    def count(self, min_log_prob: float, *, head: ExactHead | None = None) -> CountResult:
        """Estimate of ``#{x : s(x) >= min_log_prob}`` (exact if the head covers it)."""
        t = finite_float("min_log_prob", min_log_prob, allow_neg_inf=True)
        return self._count(t, strict=False, head=head)

    def _count(self, t: float, *, strict: bool, head: ExactHead | None) -> CountResult:
        h = self._head(head)
        if h is not None and (t > h.T or (not strict and t == h.T)):
            c = h.index.count_gt(t) if strict else h.index.count_ge(t)
            return CountResult(c)
        top = h.T if h is not None else math.inf
        sel = self._region(t, strict, top)
        n = self.n
        m, se = _mean_se(self._w[sel], n)
        hits = int(sel.sum())
        base = h.count if h is not None else 0
        lo, hi = _count_interval(m, se, self._z, self.interval, n, self._wmax(t, h), 1 - self.confidence)
        # certified lower end: the distinct sampled sequences in the region are real (the point
        # value is held to it too, so it never falls outside its own interval)
        distinct = float(self._distinct(sel))
        lo = max(lo, distinct)
        m = max(m, distinct)
        # upper end from the mass: each counted sequence has p >= e^t; the region's mass is at most
        # the Wilson upper end of its sampled mass (a probabilistic bound, used only to cap)
        if hits == 0:
            # nothing sampled in the region: each counted sequence has p >= e^t, and the region's
            # mass is at most the Wilson upper end of zero hits (scaled by the mean p/q)
            rbar = float(self._r.sum()) / n
            mass_hi = _wilson(0, n, self._z)[1] * max(rbar, 1e-300)
            hi = mass_hi * math.exp(-t) if t > -math.inf and -t < 700 else math.inf
        est = base + m
        return CountResult(
            float(est), exact=False, method=self.method, estimate=float(est), stderr=se,
            ci_lo=base + lo, ci_hi=base + max(hi, lo), confidence=self.confidence, samples=n,
            forwards=self.samples.forwards, extra=self._extra(h, hits),
        )

    # ------------------------------------------------------------------ masses
    def mass_above(self, min_log_prob: float, *, head: ExactHead | None = None) -> Estimate:
        """Estimate of ``P(s(Y) >= min_log_prob)`` (Wilson interval on the hits)."""
        t = finite_float("min_log_prob", min_log_prob, allow_neg_inf=True)
        return self._mass(t, head=head)

    def _mass(self, t: float, *, head: ExactHead | None) -> Estimate:
        h = self._head(head)
        n = self.n
        if h is not None and t >= h.T:
            mb = h.index.mass_ge(t)
            return Estimate(mb.mid, 0.0, mb.lo, mb.hi, self.confidence, "exact", 0, 0)
        top = h.T if h is not None else math.inf
        sel = self._region(t, False, top)
        hits = int(sel.sum())
        m, se = _mean_se(self._r[sel], n)
        base = h.mass if h is not None else 0.0
        # the ratio p/q is constant (1 - P_head) on the tail up to float floors: Wilson on the hits
        c = float(np.median(self._r[self.samples.complete])) if self.samples.complete.any() else 1.0
        lo, hi = _wilson(hits, n, self._z)
        return Estimate(base + m, se, min(1.0, base + c * lo), min(1.0, base + c * hi), self.confidence,
                        self.method, n, hits, self.samples.forwards, self._extra(h, hits))

    # ------------------------------------------------------------------ ranks
    def rank(self, log_prob: float, *, head: ExactHead | None = None) -> DensityRankResult:
        """Estimate of the rank ``#{x : s(x) > log_prob}`` and of ``P(s(Y) >= log_prob)`` of a
        sequence whose exact log-probability is ``log_prob``."""
        s0 = finite_float("log_prob", log_prob)
        c = self._count(s0, strict=True, head=head)
        mres = self._mass(s0, head=head)
        # rank < (1 - p0) / p0: every sequence ranked before has probability > p0
        cap = _mass_bound(s0) - 1
        hi = min(float(c.ci_hi), float(cap))
        exact = c.exact
        return DensityRankResult(
            rank=int(c) if exact else c.estimate, cumulative=mres.value, log_prob=s0, exact=exact,
            method="exact" if exact else self.method, rank_lo=c.ci_lo, rank_hi=c.ci_hi if exact else hi,
            cumulative_lo=mres.lo, cumulative_hi=mres.hi, rank_stderr=c.stderr,
            cumulative_stderr=mres.stderr, confidence=None if exact else self.confidence,
            extra={**c.extra, "samples": self.n, "forwards": self.samples.forwards},
        )

    cumulative = rank

    # ------------------------------------------------------------------ thresholds
    def threshold(self, rank: int, *, head: ExactHead | None = None) -> ThresholdResult:
        """Estimate of the log-prob of the ``rank``-th most probable sequence (1-based).

        The point value is the largest sampled score whose count estimate reaches ``rank``; the
        interval inverts the count interval: ``ci_hi`` is the largest sampled score whose interval's
        upper end reaches ``rank``, ``ci_lo`` the largest whose lower end does (``-inf`` if none).
        """
        k = exact_int("rank", rank, minimum=1)
        h = self._head(head)
        if h is not None and k <= h.count:
            _, x = h.index.item(k - 1)
            return ThresholdResult(x)
        base = h.count if h is not None else 0
        top = h.T if h is not None else math.inf
        sc = self._sorted
        ords = self._order[sc < top]
        sc = sc[sc < top]
        n = self.n
        w = self._w[ords]
        cw = np.cumsum(w)
        cw2 = np.cumsum(w * w)
        # counts at each sampled score (ties: the last of a run counts all of them)
        m = cw / n
        var = np.maximum(cw2 - n * m * m, 0.0) / max(n - 1, 1)
        se = np.sqrt(var / n)
        need = k - base
        extra = self._extra(h, int(sc.shape[0]))
        if sc.shape[0] == 0:
            return ThresholdResult(-math.inf, exact=False, method=self.method, estimate=-math.inf,
                                   ci_lo=-math.inf, ci_hi=top, confidence=self.confidence, samples=n,
                                   forwards=self.samples.forwards, extra=extra)
        if self.interval == "normal":
            lo = np.maximum(m - self._z * se, 0.0)
            hi = m + self._z * se
        else:
            f = np.exp(np.minimum(700.0, self._z * se / np.maximum(m, 1e-300)))
            lo, hi = m / f, m * f
            if self.interval == "bernstein":
                lg = math.log(4.0 / (1 - self.confidence))
                R = np.array([self._wmax(float(x), h) for x in sc])
                hi = np.maximum(hi, m + np.sqrt(2.0 * se * se * lg) + 7.0 * R * lg / (3.0 * max(n - 1, 1)))
        last_of_run = np.r_[sc[1:] != sc[:-1], True]

        def first_reach(arr: np.ndarray) -> float:
            ok = np.flatnonzero((arr >= need) & last_of_run)
            return float(sc[ok[0]]) if ok.size else -math.inf

        point = first_reach(m)
        if point == -math.inf:
            point = float(sc[-1])  # the estimate never reaches k: the lowest sampled score
        t_hi = first_reach(hi)
        t_hi = float(sc[0]) if t_hi == -math.inf and hi[-1] >= need else (t_hi if t_hi > -math.inf else point)
        t_lo = first_reach(lo)
        lo_t, hi_t = min(t_lo, point), max(t_hi, point)
        # a standard error read off the interval (half-width over z); nan when it is unbounded
        se_t = (hi_t - lo_t) / (2 * self._z) if lo_t > -math.inf else float("nan")
        return ThresholdResult(point, exact=False, method=self.method, estimate=point,
                               stderr=se_t, ci_lo=lo_t, ci_hi=hi_t,
                               confidence=self.confidence, samples=n, forwards=self.samples.forwards,
                               extra=extra)


def _mass_bound(t: float) -> int | float:
    if -t < 700:
        return int(math.floor(math.exp(-t) * (1 + 1e-12))) + 1
    return math.inf
