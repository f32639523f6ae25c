"""Every draw from the model: one level-wise ancestral sampler, and :class:`ARSampler` a view of it.

:func:`draw_samples` advances all live draws one token per level, in arrays: each draw holds an
index into its level's distinct prefixes (a Python tuple per distinct prefix, which the model's
callback needs, none per draw), a running score, proposal log-prob, length and 64-bit key. A
level's distinct prefixes are scored in one batched call per chunk (``oracle.fetch_rows``: full
rows, unsorted, not added to the forward cache unless asked). Each step's row is quantized to
exact integer widths and every draw picks its token by one row search (:mod:`arenum.beyond.draws`); the
drawn sequences are kept only when asked (``tokens=True``).

Without an exact head the draws are ancestral (``q = p`` quantized, ``|q - p|`` about ``V 2**-52`` per
step, recorded exactly); with the prefix tree built to ``head_T`` they follow the TAIL distribution
``p(x) 1{s(x) < head_T} / (1 - P_head)``: walking down the tree, the head mass below every live
prefix is known exactly (:func:`head_masses`, no forward), so each step samples its children in
proportion to ``p(child) - head mass below it``. ``log_q`` records each draw's exact proposal
log-probability; :mod:`arenum.beyond.estimate` turns a :class:`SampleSet` into estimates.

A model implementing the finite-state protocol is sampled without any model call: draws walk state
ids over precomputed cumulative widths (:func:`arenum.beyond.draws.walk_finite_state`; plain draws only).

A draw of a terminating model that reaches the depth cap without ``eos`` is outside the declared
support: it is kept and marked ``complete=False`` (never silently dropped or resampled).

This module does not estimate anything: :mod:`arenum.beyond.estimate` does.
"""
from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from .._validate import exact_int, INT64_MAX
from .draws import FiniteStateSampler, log_width, mix_keys, quantized_cumsum, row_search, uniform_ints, walk_finite_state
from ..errors import BudgetExceeded
from ..support import Support

if TYPE_CHECKING:
    from ..step import StepOracle
    from ..exact import PrefixTree

__all__ = ["ARSampler", "Draw", "SampleSet", "check_sample_bytes", "draw_samples", "draw_work_bytes", "head_masses"]

_ENTRY_CHUNK = 1 << 22  # table entries held at once while drawing one level (bounds memory for big V)
_KEEP_SUBTREE = 1e-9  # relative floor of a child's tail weight: keeps q > 0 on every tail sequence


@dataclass(frozen=True)
class SampleSet:
    """``n`` draws from the proposal ``q`` (``p`` quantized per step when ``head_T`` is ``+inf``).

    score: float64 ``(n,)`` exact left-to-right log-prob ``s(x_i)`` of each drawn path.
    log_q: float64 ``(n,)`` exact log-probability of the draw under the proposal (the product of
    each step's quantized probability, :mod:`arenum.beyond.draws`; within about ``V 2**-52`` per step of ``p``).
    complete: bool ``(n,)`` the draw is in the declared support (terminating: it ended in ``eos``).
    length: int32 ``(n,)`` tokens drawn. keys: uint64 ``(n,)`` a hash of each drawn sequence (equal
    sequences, equal keys; distinct ones collide only by chance, which can only undercount them).
    seqs: the drawn token-id tuples, or ``None`` when they were not asked for (``tokens=False``).
    head_T: the draws avoid every sequence with ``s >= head_T`` (``+inf``: plain ancestral draws).
    head_count, head_mass: the exact head the draws avoid (``0`` and ``0.0`` without one).
    forwards: model forwards the drawing cost. seed: the generator seed.
    """

    score: np.ndarray
    log_q: np.ndarray
    complete: np.ndarray
    seqs: list[tuple] | None
    head_T: float
    head_count: int
    head_mass: float
    forwards: int
    seed: int | None
    length: np.ndarray | None = None
    keys: np.ndarray | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def n(self) -> int:
        return int(self.score.shape[0])


SAMPLE_BYTES_PER_DRAW = 176
"""Upper estimate of one draw's memory at its peak, counted against ``max_bytes``: its arrays (29 bytes:
score, proposal, length, key, complete), the estimator's order and running sums (78), and the largest
query's temporaries on top of them (a threshold: 64); measured with tracemalloc, 171 bytes a draw
(``tests/beyond/test_sampling_memory.py`` holds peak RSS to it). Tokens are not kept."""


def check_sample_bytes(n: int, cached: list[int], held: int, max_bytes: int | None) -> None:
    """Raise :class:`BudgetExceeded` if ``n`` more draws, with the ``cached`` draw sets and the
    ``held`` bytes, would pass ``max_bytes``."""
    if max_bytes is None:
        return
    total = held + SAMPLE_BYTES_PER_DRAW * (sum(cached) + n)
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
    tokens: bool = False,
    remember: bool = False,
    finite_state: FiniteStateSampler | None = None,
    max_bytes: int | None = None,
    progress: Callable[[dict], None] | None = None,
) -> SampleSet:
    """Draw ``n`` sequences level by level: every live draw advances one token per level, and a
    level's distinct prefixes are scored in one batched call per chunk (``oracle.fetch_rows``).

    Without ``tree`` (or with ``head_T = +inf``) the draws are ancestral. With the tree built to
    ``head_T``, they follow the tail distribution ``p(x) 1{s(x) < head_T} / (1 - P_head)`` (module
    docstring). Each step's table is quantized to exact integer widths (:mod:`arenum.beyond.draws`);
    ``log_q`` records each draw's exact proposal log-probability. ``tokens``: keep the drawn
    sequences (``seqs``); otherwise only scores, ``log_q``, lengths and 64-bit keys are kept.
    ``remember``: add the scored tables to the oracle's cache (off: draws visit each prefix about
    once). ``finite_state``: walk these tables by state ids instead (no model call; plain draws only).
    ``max_bytes``: the memory the drawing may use; the draws are made in batches whose working
    memory (:func:`draw_work_bytes` a draw) fits it, one generator running through them (one batch,
    the draws of an unbounded call, while they fit); ``BudgetExceeded`` if the kept arrays alone
    (``SAMPLE_BYTES_PER_DRAW`` a draw) do not. ``progress``: called after every level of every batch
    with ``{"phase": "monte carlo", "draws": n, "draws_done": ended so far, "level": d, "levels": L}``.
    """
    n = exact_int("n", n, minimum=1)
    fixed_len, cap = support.fixed_len, support.cap
    rng = np.random.default_rng(seed)
    use_head = tree is not None and head_T < math.inf
    L = fixed_len if fixed_len is not None else cap
    first = [0]  # the first draw of the batch being drawn

    def tick(d: int, live: int, size: int = n, rows: tuple[int, int] | None = None) -> None:
        if progress is not None:  # rows: (done, todo) of the level's distinct prefixes, while it is scored
            progress({"phase": "monte carlo", "draws": n, "draws_done": first[0] + size - live, "level": d + 1,
                      "levels": L, **({"rows_done": rows[0], "rows_todo": rows[1]} if rows else {})})

    if finite_state is not None and not use_head:
        score, log_q, complete, length, keys, toks = walk_finite_state(finite_state, n, L, fixed_len, rng, tokens,
                                                                       tick=tick)
        seqs = None
        if toks is not None:
            seqs = [tuple(row[:k].tolist()) for row, k in zip(toks, length.tolist())]
        return SampleSet(score=score, log_q=log_q, complete=complete, seqs=seqs, head_T=math.inf, head_count=0,
                         head_mass=0.0, forwards=0, seed=seed, length=length, keys=keys,
                         extra={"sampler": "finite_state"})
    f0 = oracle.stats.forwards + oracle.stats.refetches
    H = head_masses(tree, head_T) if use_head else None
    batch = n
    if max_bytes is not None:
        room = max_bytes - SAMPLE_BYTES_PER_DRAW * n
        if room <= 0:
            raise BudgetExceeded(f"{n:,} Monte Carlo draws keep about {SAMPLE_BYTES_PER_DRAW * n:,} bytes > "
                                 f"max_bytes={max_bytes:,}; draw fewer or raise max_bytes")
        batch = max(1, min(n, room // draw_work_bytes(L, tokens)))
    out = _Drawn(n, tokens)
    for a in range(0, n, batch):
        first[0] = a
        _draw_levels(oracle, support, rng, out, a, min(n, a + batch), tree if use_head else None, H, head_T,
                     remember, lambda d, live, rows=None, size=min(n, a + batch) - a: tick(d, live, size, rows))
    head_mass = float(H[0][0]) if use_head and H and H[0].size else 0.0
    return SampleSet(
        score=out.score, log_q=out.log_q, complete=out.complete, seqs=out.seqs,
        head_T=head_T if use_head else math.inf, head_count=int(head_count) if use_head else 0,
        head_mass=head_mass, forwards=oracle.stats.forwards + oracle.stats.refetches - f0, seed=seed,
        length=out.length, keys=out.keys,
        extra={"sampler": "levels", **({"batches": -(-n // batch)} if batch < n else {})},
    )


def draw_work_bytes(L: int, tokens: bool) -> int:
    """Upper estimate of one live draw's working memory while drawing sequences of up to ``L`` steps:
    its prefix tuple and token objects (``72 + 40 L``), its index arrays and the temporaries of a
    level (``160``), and with ``tokens`` the kept sequence again."""
    return 160 + (72 + 40 * L) * (2 if tokens else 1)


class _Drawn:
    """The arrays the draws fill (``SAMPLE_BYTES_PER_DRAW`` a draw, and the sequences if kept)."""

    def __init__(self, n: int, tokens: bool) -> None:
        self.score, self.log_q = np.zeros(n), np.zeros(n)
        self.complete = np.zeros(n, np.bool_)
        self.length = np.zeros(n, np.int32)
        self.keys = np.zeros(n, np.uint64)
        self.seqs: list[tuple] | None = [()] * n if tokens else None


def _draw_levels(oracle: "StepOracle", support: Support, rng: np.random.Generator, out: _Drawn, lo: int, hi: int,
                 tree: "PrefixTree | None", H: list | None, head_T: float, remember: bool,
                 tick: Callable[..., None] | None = None) -> None:
    """Draws ``lo..hi-1`` of ``out``, level by level (see :func:`draw_samples`); ``tick(level, live
    draws)`` after each, ``tick(level, live draws, (rows done, rows))`` after each chunk of rows."""
    fixed_len, eos_id, cap = support.fixed_len, support.eos_id, support.cap
    L = fixed_len if fixed_len is not None else cap
    use_head = tree is not None
    convert = not oracle.int_mode  # the callback takes the model's tokens; ids are kept here
    # current level: distinct prefixes (id tuples), each live draw's prefix, each prefix's tree node
    prefixes: list[tuple] = [()]
    pid = np.zeros(hi - lo, np.int64)
    node_of = np.array([0 if use_head else -1], np.int64)
    alive = np.arange(lo, hi, dtype=np.int64)
    v_seen = [256]  # widest table seen: sizes the chunks of rows scored at once
    for d in range(L):
        if alive.size == 0:
            break
        terminal_level = fixed_len is not None and d == fixed_len - 1
        chunk_tick = None if tick is None else (lambda done, m, d=d, live=int(alive.size): tick(d, live, (done, m)))
        tok, lp, lq, nxt_node = _draw_step(oracle, rng, prefixes, pid, node_of, d, v_seen, tree, H, head_T,
                                           terminal_level, convert, remember, eos_id, chunk_tick)
        who = alive
        out.score[who] += lp
        out.log_q[who] += lq
        out.keys[who] = mix_keys(out.keys[who], tok)
        out.length[who] = d + 1
        dead = lp == -math.inf  # a dead end (a constrained prefix that no token can extend): incomplete
        ended = (tok == eos_id) & ~dead if eos_id is not None else np.zeros(who.size, np.bool_)
        out.complete[who[ended]] = True
        if terminal_level:
            ended[:] = True
            out.complete[who[~dead]] = True
        ended |= dead
        last = d == L - 1  # depth cap reached: the remaining draws are incomplete
        up, ut, inv = _pairs(pid, tok, len(prefixes))
        if out.seqs is not None:
            fin = np.flatnonzero(ended | last)
            for i, (p_, t_) in zip(fin.tolist(), zip(up[inv[fin]].tolist(), ut[inv[fin]].tolist())):
                out.seqs[int(who[i])] = prefixes[p_] if dead[i] else prefixes[p_] + (t_,)
        if tick is not None:
            tick(d, 0 if last else int(alive.size - np.count_nonzero(ended)))
        if last:
            break
        new_node = np.full(up.shape[0], -1, np.int64)
        new_node[inv] = nxt_node
        keep = ~ended
        alive = alive[keep]
        # renumber the prefixes the live draws hold (ended draws' prefixes are dropped)
        live_p, pid = np.unique(inv[keep], return_inverse=True)
        pid = pid.reshape(-1).astype(np.int64)
        prefixes = [prefixes[p_] + (t_,) for p_, t_ in zip(up[live_p].tolist(), ut[live_p].tolist())]
        node_of = new_node[live_p]


def _pairs(pid: np.ndarray, tok: np.ndarray, m: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The next level's distinct prefixes: distinct (prefix id, token) pairs ``(up, ut)`` and each
    draw's pair ``inv`` (as one int64 key when the product fits)."""
    tmin = int(tok.min())
    span = int(tok.max()) - tmin + 1
    if m * span < 2**62:
        upair, inv = np.unique(pid * span + (tok - tmin), return_inverse=True)
        up, ut = np.divmod(upair, span)
        ut += tmin
    else:
        pairs, inv = np.unique(np.stack([pid, tok], axis=1), axis=0, return_inverse=True)
        up, ut = pairs[:, 0], pairs[:, 1]
    return up, ut, inv.reshape(-1)


def _draw_step(oracle: "StepOracle", rng: np.random.Generator, prefixes: list[tuple], pid: np.ndarray,
               node_of: np.ndarray, d: int, v_seen: list, tree: "PrefixTree | None", H: list | None, head_T: float,
               terminal_level: bool, convert: bool, remember: bool, eos_id: int | None,
               chunk_tick: Callable[[int, int], None] | None = None,
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One level: score the distinct ``prefixes`` (in chunks of rows) and draw each live draw's next
    token. Returns per live draw: token id, its log-prob, its proposal log-prob, its tree node."""
    m = len(prefixes)
    na = pid.shape[0]
    tok = np.empty(na, np.int64)
    lp = np.empty(na)
    lq = np.empty(na)
    nxt_node = np.full(na, -1, np.int64)
    step = max(1, _ENTRY_CHUNK // v_seen[0])
    if m > step:  # several chunks of rows: group the draws by prefix
        order = np.argsort(pid, kind="stable")
        spid = pid[order]
        bounds = np.searchsorted(spid, np.arange(m + 1))
    else:
        order = spid = bounds = None
    a = 0
    while a < m:
        b = min(m, a + step)
        chunk = prefixes[a:b]
        nodes = node_of[a:b]
        use = tree is not None and (nodes >= 0).any()
        known = _whole_tables(tree, d, nodes) if use else None
        lps, ids = oracle.fetch_rows([oracle.tokens(p) for p in chunk] if convert else chunk, remember=remember,
                                     known=known)
        k, W = lps.shape
        v_seen[0] = max(v_seen[0], W)
        with np.errstate(under="ignore"):
            w = np.exp(lps)  # conditional probabilities, row by row (0 where no entry)
        child = _tail_weights(tree, H, head_T, d, nodes, lps, ids, w, eos_id, terminal_level) if use else None
        dead = ~(w > 0).any(axis=1)
        if dead.any():  # a dead end under a constraint: a dummy width, drawn with log-prob -inf (incomplete)
            w[dead, 0] = 1.0
        cum = quantized_cumsum(w).reshape(-1)  # running integer widths, row by row
        if order is None:
            idx = slice(None)
            base = pid * W
        else:
            c0, c1 = bounds[a], bounds[b]
            idx = order[c0:c1]  # positions in `alive` of the draws in rows a..b
            base = (spid[c0:c1] - a) * W
        g = base + row_search(cum, base, W, uniform_ints(rng, base.shape[0]))
        tok[idx] = ids.reshape(-1)[g] if ids.ndim == 2 else ids[g - base]
        lp[idx] = lps.reshape(-1)[g]
        wg = cum[g]
        inner = g > base
        wg[inner] -= cum[g[inner] - 1]  # the drawn entry's own width (exact integers)
        lq[idx] = log_width(wg)
        if child is not None:
            nxt_node[idx] = child.reshape(-1)[g]
        a = b
        if chunk_tick is not None and b < m:  # several chunks: a long level says where it is
            chunk_tick(b, m)
    return tok, lp, lq, nxt_node


def _whole_tables(tree: "PrefixTree", d: int, nodes: np.ndarray) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Row index -> ``(ids, lps)`` for the rows whose prefix is a tree node holding its whole table
    (no forward is paid twice for a prefix the tree already scored)."""
    lev = tree.view(d)
    out: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for r in np.flatnonzero(nodes >= 0).tolist():
        nd = int(nodes[r])
        if lev.fetched[nd] and lev.floor[nd] == -math.inf:
            o, t = int(lev.off[nd]), int(lev.tlen[nd])
            out[r] = (lev.pool_tok[o : o + t].astype(np.int64), lev.pool_lp[o : o + t])
    return out


def _tail_weights(tree, H, T, d, nodes, lps, ids, w, eos_id, terminal_level) -> np.ndarray:
    """Replace, in place, the weights ``w`` ``(k, W)`` of rows whose prefix is a live tree node by
    their unnormalized tail weights; return each entry's child tree node (``-1``: none or below T).

    For a row at node ``u`` and entry ``j``: ``p(u j) - head mass below u j`` (0 for a complete head
    sequence, floored at ``_KEEP_SUBTREE * p(u j)`` for a prefix so that q stays > 0 on every tail
    sequence), divided by ``p(u)``. Rows outside the tree keep ``p(j | u)``. The tree numbers a
    node's children by table position (descending log-prob, ties in the model's order), so each
    tree row is sorted here (:func:`arenum.step.tables.sort_table`'s order).
    """
    child = np.full(w.shape, -1, np.int64)
    lev = tree.view(d)
    nxt = tree.view(d + 1) if d + 1 < len(H) and tree.level_size(d + 1) else None
    for r in np.flatnonzero(nodes >= 0).tolist():  # rows in the tree are the distinct live prefixes of one level: few
        u = int(nodes[r])
        s_u = float(lev.score[u])
        if s_u < T:
            continue
        fin = np.flatnonzero(lps[r] > -math.inf)
        pos = fin[np.argsort(-lps[r][fin], kind="stable")]  # table order -> column
        row_ids = ids[r][pos] if ids.ndim == 2 else ids[pos]
        x = s_u + lps[r][pos]
        pu = math.exp(s_u)
        pj = np.exp(x)
        hj = np.zeros(pos.shape[0])
        term = row_ids == eos_id if eos_id is not None else np.full(pos.shape[0], terminal_level)
        in_head = term & (x >= T)
        if nxt is not None:
            cn = tree.child_nodes(d + 1, u, np.arange(pos.shape[0], dtype=np.int64))
            hit = (cn >= 0) & ~term
            c = cn[hit]
            live_c = nxt.score[c] >= T
            cc = np.full(pos.shape[0], -1, np.int64)
            cc[np.flatnonzero(hit)[live_c]] = c[live_c]
            has = cc >= 0
            hj[has] = H[d + 1][cc[has]]
            child[r, pos] = cc
        ww = np.maximum(pj - hj, _KEEP_SUBTREE * pj)
        ww[in_head] = 0.0
        if not (ww > 0).any():  # every completion is in the head: draw from p (lands in the head)
            ww = pj
        w[r] = 0.0
        w[r, pos] = ww / pu
    return child


@dataclass(frozen=True)
class Draw:
    """One ancestral draw: token ids, exact log-prob of the drawn path, and whether it is complete."""

    ids: tuple
    log_prob: float
    complete: bool


class ARSampler:
    """Draws sequences with probability ``p(x)``: a seeded view of :func:`draw_samples` (no head).

    Each :meth:`draw` is one level-wise draw; :meth:`sample_n` draws ``n`` at once (one batched
    model call per level). Tables come from the oracle, memoized: a prefix is scored once. With
    ``finite_state`` (a callable returning the model's :class:`~arenum.beyond.draws.FiniteStateSampler`, or
    None) the draws walk state ids: no model call.
    """

    def __init__(self, oracle: "StepOracle", support: Support, *, seed: int | None = None,
                 lock: "threading.RLock | None" = None,
                 finite_state: "Callable[[], FiniteStateSampler | None] | None" = None) -> None:
        self._oracle = oracle
        self._lock = lock if lock is not None else threading.RLock()
        self.support = support
        self.rng = np.random.default_rng(seed)
        self._fs = finite_state

    def _draws(self, n: int) -> SampleSet:
        with self._lock:  # the oracle's memo is shared with the enumerable that made this sampler
            seed = int(self.rng.integers(0, INT64_MAX))
            fs = self._fs() if self._fs is not None else None  # built at the first draw, cached by its owner
            return draw_samples(self._oracle, n, self.support, seed=seed, tokens=True, remember=True,
                                finite_state=fs)

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
