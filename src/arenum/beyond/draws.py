"""Exact discrete draws in arrays: integer step weights, a row search, and the finite-state walker.

Every Monte Carlo draw of :mod:`arenum.beyond.sampling` picks its next token through the same three steps:

- :func:`quantize_rows`: each row of nonnegative weights becomes integer widths summing to exactly
  ``2**K_BITS``; the proposal probability of entry ``j`` is then ``w_j / 2**K_BITS`` EXACTLY
  (:func:`log_width`), every entry of positive weight keeps a width ``>= 1`` (so every sequence
  of positive probability can be drawn), and the widths differ from the weights by at most one unit
  (the rounding excess is taken from the row's largest entry);
- uniform integers in ``[0, 2**K_BITS)`` from the generator's 53-bit floats (exactly uniform);
- :func:`row_search`: per draw, the first column whose cumulative width exceeds its integer, by a
  vectorized binary search inside its own row (``ceil(log2 V)`` gathers; no global search over
  every row, whose cache misses cost microseconds per draw).

The draws' probabilities are the quantized ones, recorded exactly, so importance weights
``p(x) / q(x)`` stay exact; ``q`` differs from ``p`` by about ``2**-52`` per entry in absolute
terms (a few ``V 2**-52`` for the entry that takes the remainder).
:func:`walk_finite_state` advances draws over a model's
:class:`~arenum.step.finite_state.FiniteStateTables` by state ids alone (no prefix, no model call).
:func:`mix_keys` keeps a 64-bit hash per draw for counting distinct sequences (two distinct
sequences can only collide, which undercounts: a lower bound stays a lower bound).

This module does not call models and does not estimate: :mod:`arenum.beyond.sampling` and
:mod:`arenum.beyond.estimate` do.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..step import kernels, FiniteStateTables

__all__ = ["K_BITS", "quantize_rows", "quantized_cumsum", "log_width", "row_search", "scan_search", "guide_tables", "guide_search", "uniform_ints", "mix_keys",
           "FiniteStateSampler", "walk_finite_state"]

K_BITS = 52
"""Integer widths of one step sum to ``2**K_BITS`` (exactly representable in float64)."""
_ONE = float(2**K_BITS)  # widths, their sums and the draws' integers are integers below 2**53: exact in float64
_LOG_ONE = K_BITS * math.log(2.0)
_MIX = np.uint64(0x9E3779B97F4A7C15)


def quantize_rows(p: np.ndarray) -> np.ndarray:
    """Integer widths ``(m, V)`` (float64 holding integers) of nonnegative weight rows ``p``
    ``(m, V)`` (any positive scale per row), each row summing to exactly ``2**K_BITS``: the proposal
    probability of entry ``j`` is ``w_j / 2**K_BITS`` exactly (:func:`log_width`).

    Widths are rounded up (zero weights get width 0, positive ones width ``>= 1``); the excess
    (at most about ``V``) is taken from the largest entry of the row. A row of zero total weight is
    refused (``ValueError``); a row whose total is below ``2**52 / DBL_MAX`` (about ``2.5e-256``)
    is scaled by its shares ``p / total`` (``2**52 / total`` would overflow).

    >>> w = quantize_rows(np.array([[0.5, 0.25, 0.25, 0.0], [1e-30, 1.0, 0.0, 0.0]]))
    >>> [int(x) for x in w.sum(axis=1)] == [2**52, 2**52], [int(x) for x in w[1]]
    (True, [1, 4503599627370495, 0, 0])
    """
    return _widths(p, _totals(p))


def _totals(p: np.ndarray) -> np.ndarray:
    tot = p.sum(axis=1)
    if not (tot > 0).all():
        raise ValueError("a step has no entry of positive weight")
    return tot


def _widths(p: np.ndarray, tot: np.ndarray) -> np.ndarray:
    """:func:`quantize_rows` of rows whose totals ``tot`` are known."""
    with np.errstate(over="ignore", invalid="ignore"):
        sc = _ONE / tot
        w = p * sc[:, None]
    tiny = np.flatnonzero(sc == math.inf)  # a total below 2**52 / DBL_MAX: scale the shares instead
    if tiny.size:
        w[tiny] = (p[tiny] / tot[tiny, None]) * _ONE
    np.ceil(w, out=w)
    top = np.argmax(w, axis=1)
    w[np.arange(w.shape[0]), top] -= w.sum(axis=1) - _ONE
    return w


def quantized_cumsum(p: np.ndarray) -> np.ndarray:
    """``np.cumsum(quantize_rows(p), axis=1)``: each row's running sums of its integer widths (the
    last one ``2**K_BITS``), what :func:`row_search` searches; the width of column ``j`` is
    ``cum[j] - cum[j - 1]`` (exact: integers below ``2**53``). One fused pass per row when the
    compiled kernels are in use (:mod:`arenum.step.kernels`), the same floats bit for bit.

    >>> [int(x) for x in quantized_cumsum(np.array([[0.5, 0.25, 0.25, 0.0]]))[0]] == [2**51, 3 * 2**50, 2**52, 2**52]
    True
    """
    tot = _totals(p)
    cum = kernels.quantized_cum(p, tot, _ONE)
    if cum is None:
        cum = np.cumsum(_widths(p, tot), axis=1)
    return cum


def log_width(w: np.ndarray) -> np.ndarray:
    """The exact log-probability ``log(w / 2**K_BITS)`` of entries of integer width ``w`` (float64;
    ``-inf`` for width 0)."""
    with np.errstate(divide="ignore"):
        return np.log(w) - _LOG_ONE


def uniform_ints(rng: np.random.Generator, n: int) -> np.ndarray:
    """``n`` independent integers uniform on ``[0, 2**K_BITS)``, as float64: ``random()`` is
    ``k 2**-53`` with ``k`` uniform on ``[0, 2**53)``, so ``floor(random() 2**52)`` is ``k >> 1``
    exactly."""
    x = rng.random(n)
    x *= _ONE
    return np.floor(x, out=x)


def row_search(cum: np.ndarray, base: np.ndarray, width: int, key: np.ndarray) -> np.ndarray:
    """Per draw ``i``: the first ``j`` in ``[0, width)`` with ``cum[base[i] + j] > key[i]``.

    ``cum`` is flat, nondecreasing within each row ``cum[base : base + width]``, and its last entry
    exceeds every key of the row (widths sum to ``2**K_BITS > key``). Vectorized binary search,
    ``ceil(log2(width))`` gathers.
    """
    lo = np.zeros(key.shape[0], np.int64)
    hi = np.full(key.shape[0], width - 1, np.int64)
    for _ in range(max(0, int(width - 1).bit_length())):
        mid = lo + hi
        mid >>= 1
        right = cum[base + mid] <= key
        lo = np.where(right, mid + 1, lo)
        hi = np.where(right, hi, mid)
    return lo


def mix_keys(keys: np.ndarray, tok: np.ndarray) -> np.ndarray:
    """Extend 64-bit sequence hashes by one token each (wrapping arithmetic)."""
    return keys * _MIX + (tok.astype(np.uint64) + np.uint64(1))


def scan_search(cum: np.ndarray, base: np.ndarray, width: int, key: np.ndarray, scans: int = 4) -> np.ndarray:
    """:func:`row_search` for rows sorted by descending width: the first ``scans`` columns are
    tested one after the other on the draws still searching (most draws stop at the first few
    columns of a peaked row), the rest by binary search."""
    j = np.empty(key.shape[0], np.int64)
    act = np.arange(key.shape[0])
    b, k = base, key
    for c in range(min(scans, width - 1)):
        hit = cum[b + c] > k
        j[act[hit]] = c
        miss = ~hit
        act, b, k = act[miss], b[miss], k[miss]
        if act.size == 0:
            return j
    c0 = min(scans, width - 1)
    j[act] = c0 + row_search(cum, b + c0, width - c0, k)
    return j


def guide_tables(cum: np.ndarray) -> tuple[np.ndarray, int]:
    """Guide tables of row-wise cumulative widths ``cum`` ``(S, C)``: ``(guide, g)`` with ``guide``
    ``(S, 2**g)`` int32, ``2**g >= C``, and ``guide[s, u]`` the first column whose cumulative width
    exceeds ``u 2**(K_BITS - g)`` (the answer for the smallest integer of bucket ``u``; indexed
    search, Chen and Asau 1974)."""
    S, C = cum.shape
    g = max(1, int(C - 1).bit_length())
    G = 1 << g
    q = np.ceil(cum / 2.0 ** (K_BITS - g))  # column j answers no bucket below q_j: #{j: q_j <= u}
    rows = np.repeat(np.arange(S, dtype=np.int64), C)
    idx = q.reshape(-1).astype(np.int64)
    keep = idx < G
    counts = np.bincount(rows[keep] * (G + 1) + idx[keep], minlength=S * (G + 1)).reshape(S, G + 1)
    return np.cumsum(counts, axis=1)[:, :G].astype(np.int32), g


def guide_search(cum: np.ndarray, guide: np.ndarray, g: int, state: np.ndarray, C: int, key: np.ndarray) -> np.ndarray:
    """:func:`row_search` through guide tables (:func:`guide_tables`): start at the guide of the
    key's bucket, then step right while the cumulative width does not exceed the key (about one
    step on average when ``2**g >= C``)."""
    j = guide[(state << g) + np.floor(key / 2.0 ** (K_BITS - g)).astype(np.int64)].astype(np.int64)
    base = state * C
    act = np.flatnonzero(cum[base + j] <= key)
    while act.size:
        j[act] += 1
        act = act[cum[base[act] + j[act]] <= key[act]]
    return j


@dataclass(frozen=True)
class FiniteStateSampler:
    """Per-state integer cumulative widths of a finite-state model's steps (built once).

    Each state's columns are sorted by descending probability; draws find their column through
    guide tables (:func:`guide_search`). cum: ``(S, C)`` float64 row-wise cumulative integer widths
    (each row ends at ``2**K_BITS``); log_q: ``(S, C)`` float64 exact proposal log-probabilities; lp: ``(S, C)``
    float64 the model's log-probs; tok: ``(S, C)`` int64 tokens; nxt: ``(S, C)`` int32 next
    states; ends: ``(S, C)`` bool, the column ends the draw (the eos column of a terminating
    support); start: the start state; guide, g: :func:`guide_tables`.
    """

    cum: np.ndarray
    log_q: np.ndarray
    lp: np.ndarray
    tok: np.ndarray
    nxt: np.ndarray
    ends: np.ndarray
    start: int
    guide: np.ndarray
    g: int

    @classmethod
    def build(cls, fs: FiniteStateTables, terminating: bool, eos_id: int | None) -> "FiniteStateSampler":
        """From the protocol's tables; a terminating support appends the ending column (token
        ``eos_id``) to the continuing ones."""
        tokens, lps, nxt, end = fs.step_tables(terminating)
        tokens = np.asarray(tokens, np.int64)
        ends = np.zeros(tokens.shape[0], np.bool_)
        if terminating:
            tokens = np.append(tokens, np.int64(eos_id))
            lps = np.concatenate((lps, end[:, None]), axis=1)
            nxt = np.concatenate((nxt, np.full((nxt.shape[0], 1), -1, nxt.dtype)), axis=1)
            ends = np.append(ends, True)
        perm = np.argsort(-lps, axis=1, kind="stable")
        lps = np.take_along_axis(lps, perm, axis=1)
        w = quantize_rows(np.exp(lps))
        nxt = np.take_along_axis(nxt, perm, axis=1).astype(np.int32)
        cum = np.cumsum(w, axis=1)
        return cls(cum, log_width(w), lps, tokens[perm], nxt, ends[perm], int(fs.start), *guide_tables(cum))

    @property
    def nbytes(self) -> int:
        return int(self.cum.nbytes + self.log_q.nbytes + self.lp.nbytes + self.nxt.nbytes + self.tok.nbytes
                   + self.ends.nbytes + self.guide.nbytes)


def walk_finite_state(smp: FiniteStateSampler, n: int, max_steps: int, fixed_len: int | None,
                      rng: np.random.Generator, tokens: bool = False,
                      tick: Callable[[int, int], None] | None = None,
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
    """``n`` draws walked by state ids: ``(score, log_q, complete, length, keys, toks)``; ``tick(step,
    live draws)`` after every step (progress).

    Every live draw advances one token per step: one integer each, one row search in its state's
    cumulative widths, then gathers (token, log-prob, exact proposal log-prob, next state). A draw
    ends on an ending column (complete) or at ``fixed_len`` tokens (complete), or stops incomplete
    at ``max_steps`` tokens (terminating support). ``toks`` ``(n, max_steps)`` int64 padded with -1
    only when ``tokens`` is true.
    """
    S, C = smp.cum.shape
    cum, lq_t, lp_t, nxt_t = smp.cum.reshape(-1), smp.log_q.reshape(-1), smp.lp.reshape(-1), smp.nxt.reshape(-1)
    tok_t, end_t = smp.tok.reshape(-1), smp.ends.reshape(-1)
    score = np.zeros(n)
    log_q = np.zeros(n)
    complete = np.zeros(n, np.bool_)
    length = np.zeros(n, np.int32)
    keys = np.zeros(n, np.uint64)
    toks = np.full((n, max_steps), -1, np.int64) if tokens else None
    alive = np.arange(n, dtype=np.int64)
    state = np.full(n, smp.start, np.int64)
    sc, lq, ky = score, log_q, keys  # the live draws' running values, compacted as draws end
    for d in range(max_steps):
        if alive.size == 0:
            break
        base = state * C
        g = base + guide_search(cum, smp.guide.reshape(-1), smp.g, state, C, uniform_ints(rng, alive.size))
        sc = sc + lp_t[g]
        lq = lq + lq_t[g]
        t = tok_t[g]
        ky = mix_keys(ky, t)
        if toks is not None:
            toks[alive, d] = t
        ended = end_t[g]
        if fixed_len is not None and d == fixed_len - 1:
            ended = np.ones(alive.size, np.bool_)
        last = d == max_steps - 1
        if ended.any() or last:
            out = np.flatnonzero(ended) if not last else np.arange(alive.size)
            who = alive[out]
            score[who], log_q[who], keys[who], length[who] = sc[out], lq[out], ky[out], d + 1
            complete[who] = ended[out]
            keep = ~ended
            alive, sc, lq, ky, g = alive[keep], sc[keep], lq[keep], ky[keep], g[keep]
        state = nxt_t[g].astype(np.int64)
        if tick is not None:
            tick(d, 0 if last else int(alive.size))
    return score, log_q, complete, length, keys, toks
