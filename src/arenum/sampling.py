"""Every draw from the model: one level-wise ancestral sampler, and :class:`ARSampler` a view of it.

:func:`draw_samples` advances all unfinished draws one token per level and scores a level's distinct
prefixes in one batched pass (``oracle.fetch_heads``). Without an exact head the draws are ancestral
(``q = p``); with the prefix tree built to ``head_T`` they follow the TAIL distribution
``p(x) 1{s(x) < head_T} / (1 - P_head)``: walking down the tree, the head mass below every live
prefix is known exactly (:func:`head_masses`, no forward), so each step samples its children in
proportion to ``p(child) - head mass below it``. ``log_q`` records each draw's exact proposal
log-probability; :mod:`arenum.estimate` turns a :class:`SampleSet` into estimates.

A draw of a terminating model that reaches the depth cap without ``eos`` is outside the declared
support: it is kept and marked ``complete=False`` (never silently dropped or resampled).

This module does not estimate anything: :mod:`arenum.estimate` does.
"""
from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from ._validate import exact_int
from .results import BudgetExceeded
from .support import Support

if TYPE_CHECKING:
    from .oracle import StepOracle
    from .tree import PrefixTree

__all__ = ["ARSampler", "Draw", "SampleSet", "check_sample_bytes", "draw_samples", "head_masses"]

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


SAMPLE_BYTES_PER_DRAW = 200
"""Upper estimate of one draw's memory besides its tokens (arrays, tuple, list slot)."""
SAMPLE_BYTES_PER_TOKEN = 8
"""Upper estimate of a drawn token's memory in its tuple (a pointer to a shared token object)."""


def check_sample_bytes(n: int, cached: list[int], max_len: int, held: int, max_bytes: int | None) -> None:
    """Raise :class:`BudgetExceeded` if ``n`` more draws (of at most ``max_len`` tokens), with the
    ``cached`` draw sets and the ``held`` bytes, would pass ``max_bytes``."""
    if max_bytes is None:
        return
    per = SAMPLE_BYTES_PER_DRAW + SAMPLE_BYTES_PER_TOKEN * int(max_len)
    total = held + per * (sum(cached) + n)
    if total > max_bytes:
        raise BudgetExceeded(f"{n:,} Monte Carlo draws would bring memory to about {total:,} bytes > "
                             f"max_bytes={max_bytes:,}; draw fewer (estimate_samples) or raise max_bytes")


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
    support: Support,
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


@dataclass(frozen=True)
class Draw:
    """One ancestral draw: token ids, exact log-prob of the drawn path, and whether it is complete."""

    ids: tuple
    log_prob: float
    complete: bool


class ARSampler:
    """Draws sequences with probability ``p(x)``: a seeded view of :func:`draw_samples` (no head).

    Each :meth:`draw` is one level-wise draw; :meth:`sample_n` draws ``n`` at once (one batched
    model call per level). Tables come from the oracle, memoized: a prefix is scored once.
    """

    def __init__(self, oracle: "StepOracle", support: Support, *, seed: int | None = None,
                 lock: "threading.RLock | None" = None) -> None:
        self._oracle = oracle
        self._lock = lock if lock is not None else threading.RLock()
        self.support = support
        self.rng = np.random.default_rng(seed)

    def _draws(self, n: int) -> SampleSet:
        with self._lock:  # the oracle's memo is shared with the enumerable that made this sampler
            seed = int(self.rng.integers(0, 2**63 - 1))
            return draw_samples(self._oracle, n, self.support, seed=seed)

    def draw(self) -> Draw:
        """One draw as token ids (see :class:`Draw`)."""
        s = self._draws(1)
        return Draw(s.seqs[0], float(s.score[0]), bool(s.complete[0]))

    def sample(self) -> tuple[tuple, float]:
        """``(sequence, log_prob)`` of one draw; ``log_prob`` is ``-inf`` for an incomplete draw
        (it hit the depth cap without ``eos``, so it is outside the declared support)."""
        return self.sample_n(1)[0]

    def sample_n(self, n: int) -> list[tuple[tuple, float]]:
        """``n`` independent draws (see :meth:`sample`), drawn together."""
        n = exact_int("n", n, minimum=0)
        if n == 0:
            return []
        s = self._draws(n)
        tok = self._oracle.tokens
        return [(tok(q), float(x) if ok else -math.inf) for q, x, ok in zip(s.seqs, s.score, s.complete)]
