"""The finite-state tables of a fitted n-gram model (:class:`arenum.step.finite_state.FiniteStateTables`).

A prefix's state is the longest suffix of its BOS-padded context (its last ``order - 1`` tokens,
BOS on the left when shorter) that was observed as a context in training: the ``(depth, id)``
that :meth:`CountTables.walk` finds and the row cache is keyed by.  Why that is a state (the
next-token row and the next state depend on it alone) is proved in ``docs/certified.md``:

- the row: :meth:`CountTables.rows` reads only the context ids of the suffixes of lengths
  ``0..depth`` of the context, all suffixes of the deepest one (add-k: the top level, or uniform);
- the next state: observed contexts are closed under dropping their most recent token (a context
  ``u`` observed before ``w`` makes ``u[:-1]`` observed before ``u[-1]``), so the longest observed
  suffix of ``context + w`` is ``v + w`` with ``v`` an observed suffix of ``context``, hence a
  suffix of the state: the next state is the longest observed suffix of ``state + w``.

Only the states reachable from the start (the all-BOS context) are kept.  Cost: one vectorized
suffix walk over every (state, token) pair, ``O(S V (order - 1) log C)``; memory ``12 S V`` bytes.
"""
from __future__ import annotations

import math

import numpy as np

from ...step import FiniteStateTables
from .tables import CountTables

__all__ = ["ngram_finite_state"]


def _context_tokens(t: CountTables) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every observed context: its level (C,), its id at its level (C,), and its tokens (C, n1)
    from the most recent back (column j: token j+1 back; columns past its level: -1)."""
    n1 = t.order - 1
    levels, ids, toks = [np.zeros(1, np.int64)], [np.zeros(1, np.int64)], [np.full((1, max(n1, 1)), -1, np.int64)]
    for L in range(1, n1 + 1):
        keys = t.ctx_keys[L]
        X = np.full((len(keys), max(n1, 1)), -1, dtype=np.int64)
        cur = np.arange(len(keys), dtype=np.int64)
        for lev in range(L, 0, -1):  # key = parent id * B + token lev back
            k = t.ctx_keys[lev][cur]
            X[:, lev - 1] = k % t.B
            cur = k // t.B
        levels.append(np.full(len(keys), L, np.int64))
        ids.append(np.arange(len(keys), dtype=np.int64))
        toks.append(X)
    return np.concatenate(levels), np.concatenate(ids), np.concatenate(toks)


def _walk_after(t: CountTables, X: np.ndarray, level: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Longest observed suffix of ``context + w`` for contexts ``X`` (C, n1) of levels ``level``:
    its depth and its id, for every (context, token) pair, shape (C, len(w)) each."""
    n1 = t.order - 1
    C, W = len(X), len(w)
    depth = np.zeros((C, W), dtype=np.int64)
    cid = np.zeros((C, W), dtype=np.int64)
    pos = np.zeros((C, W), dtype=np.int64)
    alive = np.ones((C, W), dtype=bool)
    for L in range(1, n1 + 1):
        keys = np.append(t.ctx_keys[L], np.iinfo(np.int64).max)  # a sentinel above every key
        tok = np.broadcast_to(w[None, :], (C, W)) if L == 1 else np.broadcast_to(X[:, L - 2][:, None], (C, W))
        q = pos * t.B + tok
        p = keys.searchsorted(q)
        hit = alive & (keys[p] == q)
        if L >= 2:  # the suffix of length L uses the context's token L-1 back: it must exist
            hit &= (level >= L - 1)[:, None]
        if not hit.any():
            break
        depth[hit] = L
        cid[hit] = p[hit]
        pos = np.where(hit, p, 0)
        alive = hit
    return depth, cid


def ngram_finite_state(t: CountTables, *, eos: int) -> FiniteStateTables:
    """The reachable states of the model of ``t`` and their tables (see the module docstring)."""
    n1 = t.order - 1
    V, B = t.V, t.B
    level, ids, X = _context_tokens(t)
    # global number of (level, id): offsets per level
    sizes = [1] + [len(t.ctx_keys[L]) for L in range(1, n1 + 1)]
    offset = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    w = np.arange(V, dtype=np.int64)
    nxt_all = np.empty((len(level), V), dtype=np.int64)  # (C, V) global id of the next state
    step = max(1, (1 << 20) // max(V, 1))
    for a in range(0, len(level), step):
        d, c = _walk_after(t, X[a : a + step], level[a : a + step], w)
        nxt_all[a : a + step] = offset[d] + c
    # start: the deepest observed suffix of the all-BOS context (walk pads an empty prefix with BOS)
    sd, sp = t.walk([()])
    start_all = int(offset[sd[0]] + sp[0, sd[0]])
    # reachable states from the start, breadth first
    Ctot = len(level)
    reach = np.zeros(Ctot, dtype=bool)
    reach[start_all] = True
    frontier = np.array([start_all], np.int64)
    while len(frontier):
        cand = np.unique(nxt_all[frontier].ravel())
        cand = cand[~reach[cand]]
        reach[cand] = True
        frontier = cand
    keep = np.flatnonzero(reach)
    renum = np.full(Ctot, -1, dtype=np.int64)
    renum[keep] = np.arange(len(keep))
    if len(keep) >= 2**31 - 1:
        raise ValueError(f"{len(keep)} states do not fit int32 next_state")
    # rows: path of suffix ids of each kept state at every level <= its depth
    kd = level[keep]
    path = np.zeros((len(keep), t.order), dtype=np.int64)
    path[np.arange(len(keep)), kd] = ids[keep]
    for L in range(n1, 1, -1):
        m = kd >= L
        path[m, L - 1] = t.ctx_keys[L][path[m, L]] // B
    rows = t.rows(kd, path)
    log_probs = np.stack(rows) if rows else np.zeros((0, V))
    log_probs = np.ascontiguousarray(log_probs, dtype=np.float64)
    next_state = renum[nxt_all[keep]].astype(np.int32)
    next_state[log_probs == -math.inf] = -1
    return FiniteStateTables(
        tokens=np.arange(V, dtype=np.int64),
        log_probs=log_probs,
        eos_log_probs=log_probs[:, eos].copy(),
        next_state=next_state,
        start=int(renum[start_all]),
        eos=int(eos),
    )
