"""A constraint composed with a model, at the step oracle: tables hold only the tokens that keep a
prefix acceptable.

:class:`ConstrainedOracle` is the step oracle of a constrained enumerable: every table it hands out
(tree heads, whole tables, sampling rows) is the model's table with the tokens removed that the
constraint (:mod:`arenum.step.constraint`) rejects after the prefix, or that lead to a state from
which acceptance is out of reach (not live, or more tokens needed than the length cap leaves), and,
for a terminating support, ``eos`` removed where the prefix's state does not accept. The model's own
rows are validated (normalization included) before anything is removed; the removed mass is never
redistributed: scores stay the model's. So every query above (the prefix tree, the index, the
samplers, stores, shards) runs unchanged on the accepted sequences, and two equal tables keep
their relative order (ties as in the model).

:class:`Composition` keeps the automaton's states interned (ids ``0..``), the state of every prefix
seen (a memo keyed by the prefix; past a bound only the last batch is kept, a tree level being the
next one's parents; a prefix whose parent is gone is walked from its longest remembered prefix), and a
transition array per state over the vocabulary's ids filled on first use, so that filtering a batch
of tables is array work. :func:`constrained_tables` builds the product of a finite-state model
and a constraint (states ``(model state, automaton state)``) for the certified DP and the sampler.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from .constraint import advance
from .finite_state import FiniteStateTables
from .oracle import StepOracle
from .tables import Heads

__all__ = ["Composition", "ConstrainedOracle", "constrained_tables", "constrain_finite_state", "make_oracle"]

_UNKNOWN, _REJECT = -2, -1
_MEMO_MAX = 1 << 19  # prefixes whose state is remembered at once (past it: the last batch's)


class Composition:
    """A constraint read over the oracle's token ids (module docstring).

    ``token(id)``: the model's token of an id (``token_id``/``token_ids``: the other way, interning
    new tokens); ``eos_id``: the terminating support's eos id (never
    stepped; kept only where the state accepts) or ``None`` (fixed length ``cap``: the last token
    must lead to an accepting state).
    """

    def __init__(self, constraint: Any, token: Callable[[int], Any], *, eos_id: int | None, cap: int,
                 token_id: Callable[[Any], int], token_ids: Callable[[list], np.ndarray]) -> None:
        self.constraint = constraint
        self._token = token
        self._id, self._ids = token_id, token_ids
        self.eos_id = eos_id
        self.cap = int(cap)
        self._states: list = []
        self._sid: dict = {}
        self._next: list[np.ndarray] = []
        self._acc: list[bool] = []
        self._need: list[int] = []
        self._memo: dict[tuple, int] = {}
        q = constraint.start
        live = getattr(constraint, "live", None)
        self.start = self._intern(q) if live is None or live(q) else _REJECT

    @property
    def n_states(self) -> int:
        return len(self._states)

    def accepting(self) -> np.ndarray:
        """Whether each interned state (by id) accepts."""
        return np.array(self._acc, bool)

    def _intern(self, q: Any) -> int:
        s = self._sid.get(q)
        if s is None:  # the constraint's own calls first: one that raises leaves nothing half-made
            acc = bool(self.constraint.accepts(q))
            f = getattr(self.constraint, "min_tokens", None)
            need = 0 if f is None else int(f(q))
            s = self._sid[q] = len(self._states)
            self._states.append(q)
            self._next.append(np.full(0, _UNKNOWN, np.int32))
            self._acc.append(acc)
            self._need.append(need)
        return s

    def next_sids(self, s: int, ids: np.ndarray) -> np.ndarray:
        """The state id after each token id from state ``s`` (``-1``: rejected or dead)."""
        row = self._next[s]
        if ids.size == 0:
            return np.zeros(0, np.int32)
        top = int(ids.max()) + 1
        if top > row.shape[0]:
            grown = np.full(max(top, 2 * row.shape[0]), _UNKNOWN, np.int32)
            grown[: row.shape[0]] = row
            row = self._next[s] = grown
        out = row[ids]
        miss = out == _UNKNOWN
        if miss.any():
            q, c, tok = self._states[s], self.constraint, self._token
            for t in np.unique(ids[miss]).tolist():
                r = advance(c, q, tok(t))
                row[t] = _REJECT if r is None else self._intern(r)
            out = row[ids]
        return out

    def state_of(self, prefix: tuple) -> int:
        """The state id after the model-token prefix ``prefix`` (``-1``: rejected on the way)."""
        memo = self._memo
        s = memo.get(prefix)
        if s is not None:
            return s
        if len(memo) > 2 * _MEMO_MAX:
            memo.clear()
        n = len(prefix)
        if n == 0:
            return self.start
        k = n - 1
        while k > 0 and prefix[:k] not in memo:
            k -= 1
        s = memo[prefix[:k]] if k > 0 else self.start
        from_id = self._id
        for j in range(k, n):
            if s >= 0:
                s = int(self.next_sids(s, np.array([from_id(prefix[j])], np.int64))[0])
            memo[prefix[: j + 1]] = s
        return s

    def states_of(self, prefixes: list[tuple]) -> np.ndarray:
        """:meth:`state_of` of many prefixes: one dict lookup for the parent of each (a tree level's
        parents were seen at the level before) and one transition lookup per parent state."""
        n = len(prefixes)
        out = np.empty(n, np.int64)
        memo = self._memo
        todo: list[int] = []
        par: list[int] = []
        last: list = []
        for i, p in enumerate(prefixes):
            s = memo.get(p)
            if s is not None:
                out[i] = s
                continue
            if not p:
                out[i] = self.start
                continue
            ps = memo.get(p[:-1])
            if ps is None:
                out[i] = self.state_of(p)
                continue
            todo.append(i)
            par.append(ps)
            last.append(p[-1])
        if todo:
            idx = np.array(todo, np.int64)
            pa = np.array(par, np.int64)
            ids = np.asarray(self._ids(last), np.int64)
            res = np.full(idx.shape[0], _REJECT, np.int64)
            for s in np.unique(pa).tolist():
                if s >= 0:
                    m = pa == s
                    res[m] = self.next_sids(s, ids[m])
            out[idx] = res
            for i, r in zip(todo, res.tolist()):
                memo[prefixes[i]] = r
        if len(memo) > _MEMO_MAX:  # keep this batch only: a tree level's prefixes are the next level's parents
            self._memo = {p: int(s) for p, s in zip(prefixes, out.tolist())}
        return out

    def keep(self, sids: np.ndarray, lengths: np.ndarray, ids: np.ndarray) -> np.ndarray:
        """Which table entries survive: entry ``e`` is token ``ids[e]`` after a prefix of
        ``lengths[e]`` tokens in state ``sids[e]``."""
        keep = np.zeros(ids.shape[0], bool)
        if ids.size == 0:
            return keep
        eos = self.eos_id
        groups = []
        for s in np.unique(sids).tolist():
            if s < 0:
                continue
            m = np.flatnonzero(sids == s)
            tid = ids[m]
            if eos is None:
                nxt = self.next_sids(s, tid)
            else:  # eos is not stepped: it ends the sequence, kept where the state accepts
                nxt = np.full(tid.shape, -1, np.int32)
                word = tid != eos
                nxt[word] = self.next_sids(s, tid[word])
            groups.append((s, m, tid, nxt))
        acc = self.accepting()  # once, after every state the batch reached is interned
        need = np.array(self._need, np.int64)
        for s, m, tid, nxt in groups:
            ok = nxt >= 0
            child = lengths[m] + 1
            safe = np.maximum(nxt, 0)
            if eos is None:
                ok &= child + need[safe] <= self.cap
                ok &= (child < self.cap) | acc[safe]
            else:
                ok &= child + need[safe] <= self.cap - 1
                is_eos = tid == eos
                ok[is_eos] = bool(acc[s])
            keep[m] = ok
        return keep


class ConstrainedOracle(StepOracle):
    """The step oracle of a constrained enumerable (module docstring): the same calls, counters and
    cache as :class:`~arenum.step.oracle.StepOracle` (the cache holds the model's whole tables), and
    every table it hands out filtered by :attr:`composition`."""

    def __init__(self, *args: Any, constraint: Any, cap: int, terminating: bool, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.composition = Composition(constraint, self.token, eos_id=self.eos_id if terminating else None, cap=cap,
                                       token_id=self.token_id, token_ids=self.vocab.ids)

    def _sids(self, prefixes: list[tuple]) -> tuple[np.ndarray, np.ndarray]:
        comp = self.composition
        sids = comp.states_of([p if isinstance(p, tuple) else tuple(p) for p in prefixes])
        lens = np.fromiter((len(p) for p in prefixes), np.int64, count=len(prefixes))
        return sids, lens

    def fetch_heads(self, prefixes: list[tuple], floors: np.ndarray) -> Heads:
        h = super().fetch_heads(prefixes, floors)
        n = len(prefixes)
        if n == 0:
            return h
        try:  # the constraint's own calls (a text function, a step) may raise: the rows are kept for the retry
            sids, plen = self._sids(prefixes)
            row = np.repeat(np.arange(n), h.lens)
            keep = self.composition.keep(sids[row], plen[row], h.ids)
        except BaseException:
            self.keep_heads(prefixes, floors, h)
            raise
        lens = np.bincount(row[keep], minlength=n).astype(np.int64)
        full = lens + (h.full - h.lens)  # what lies past a cut head is not known: counted as possibly kept
        return Heads(h.ids[keep], h.lps[keep], lens, full)

    def fetch_rows(self, prefixes: list[tuple], **kw: Any) -> tuple[np.ndarray, np.ndarray]:
        lps, ids = super().fetch_rows(prefixes, **kw)
        m, W = lps.shape
        sids, plen = self._sids(prefixes)
        full_ids = np.broadcast_to(ids, (m, W)) if ids.ndim == 1 else ids
        keep = self.composition.keep(np.repeat(sids, W), np.repeat(plen, W), full_ids.reshape(-1)).reshape(m, W)
        out = np.where(keep, lps, -np.inf)
        return out, ids

    def table(self, prefix: tuple) -> tuple[np.ndarray, np.ndarray]:
        ids, lps = super().table(prefix)
        sids, plen = self._sids([prefix])
        keep = self.composition.keep(np.full(ids.shape[0], sids[0]), np.full(ids.shape[0], plen[0]), ids)
        return ids[keep], lps[keep]


MAX_TRANSITIONS = 1 << 20
"""The most automaton transitions :func:`constrained_tables` computes (each a ``step`` call) before it
gives up: a regex, a policy or a blocklist of a thousand words stays below it; a constraint
whose states never repeat (a counter) reaches it in seconds, and the answers past a cap are then
brackets rather than a wait without end."""


def constrained_tables(fs: FiniteStateTables, constraint: Any, *, terminating: bool,
                       max_states: int = 4_000_000) -> FiniteStateTables | None:
    """The product of a finite-state model (tables in the model's own tokens) and a constraint, for
    a terminating support: states are the pairs ``(model state, automaton state)`` reachable from
    the start with positive probability and from which an accepted ending is reachable; a row keeps
    the model's log-probs of the tokens the constraint allows, ``eos`` only where the automaton
    accepts. Rows are not renormalized (scores stay the model's). ``None`` for a fixed-length support
    (acceptance at a fixed length is not a property of a state) or past ``max_states`` pairs; one
    state with no step and no end when the constraint accepts nothing the model can make.
    """
    if not terminating or fs.eos is None:
        return None
    toks, lp, ns, end = fs.step_tables(True)
    V = len(toks)
    tok_list = toks.tolist()
    pos = {t: j for j, t in enumerate(tok_list)}
    # the automaton over the tables' columns: the same transitions (interned states, rejections,
    # dead states) as the step oracle's, filled state by state
    comp = Composition(constraint, tok_list.__getitem__, eos_id=None, cap=max_states,
                       token_id=pos.__getitem__, token_ids=lambda ts: np.array([pos[t] for t in ts], np.int64))
    if comp.start < 0:  # the constraint accepts nothing at all
        return _no_state(fs)
    cols = np.arange(V, dtype=np.int64)
    rows: list[np.ndarray] = []
    while len(rows) < comp.n_states:
        rows.append(comp.next_sids(len(rows), cols).astype(np.int64))
        if comp.n_states * max(1, fs.n_states) > max_states * 64 or comp.n_states * V > MAX_TRANSITIONS:
            return None  # too large, or an automaton of unbounded states (a counter): no product
    nq = np.stack(rows)
    Q = comp.n_states
    acc = comp.accepting()
    # the product, breadth first over keys m * Q + q
    start = int(fs.start) * Q  # the automaton's start is its state 0
    seen = {start}
    order = [start]
    frontier = np.array([start], np.int64)
    while frontier.size:
        m, q = frontier // Q, frontier % Q
        nm, nqq = ns[m], nq[q]
        ok = (lp[m] > -np.inf) & (nm >= 0) & (nqq >= 0)
        nxt = np.unique((nm * Q + nqq)[ok])
        new = [int(k) for k in nxt.tolist() if k not in seen]
        seen.update(new)
        order.extend(new)
        if len(order) > max_states:
            return None
        frontier = np.array(new, np.int64)
    keys_arr = np.array(order, np.int64)
    P = keys_arr.shape[0]
    pm, pq = keys_arr // Q, keys_arr % Q
    sorter = np.argsort(keys_arr)
    nm, nqq = ns[pm], nq[pq]
    ok = (lp[pm] > -np.inf) & (nm >= 0) & (nqq >= 0)
    target = np.where(ok, nm * Q + np.maximum(nqq, 0), 0)
    pos = sorter[np.searchsorted(keys_arr, target, sorter=sorter)]
    nxt = np.where(ok, pos, -1)
    ends = np.where(acc[pq], end[pm], -np.inf)
    # keep only pairs from which an accepted ending has positive probability
    good = ends > -np.inf
    while True:
        reach = good | (((nxt >= 0) & good[np.maximum(nxt, 0)]).any(axis=1))
        if (reach == good).all():
            break
        good = reach
    if not good[0]:  # nothing accepted is reachable
        return _no_state(fs)
    ok &= good[np.maximum(nxt, 0)] & (nxt >= 0)
    keepers = np.flatnonzero(good)
    renum = np.full(P, -1, np.int64)
    renum[keepers] = np.arange(keepers.shape[0])
    new_lp = np.where(ok, lp[pm], -np.inf)[keepers]
    new_ns = np.where(ok, renum[np.maximum(nxt, 0)], -1)[keepers].astype(np.int32)
    new_end = ends[keepers]
    j = fs.eos_column
    if j is not None:  # the tables' own layout: the eos column back in its place
        new_lp = np.insert(new_lp, j, new_end, axis=1)
        new_ns = np.insert(new_ns, j, -1, axis=1)
        tokens = fs.tokens
    else:
        tokens = toks
    return FiniteStateTables(tokens, new_lp, new_end, new_ns, 0, fs.eos)


def _no_state(fs: FiniteStateTables) -> FiniteStateTables:
    """The product of a constraint that accepts nothing the model makes: one state with no step and
    no end (an empty support, which the certified DP counts as 0)."""
    V = fs.log_probs.shape[1]
    return FiniteStateTables(fs.tokens, np.full((1, V), -np.inf), np.full(1, -np.inf),
                             np.full((1, V), -1, np.int32), 0, fs.eos)


class _ProductTables(FiniteStateTables):
    """Product tables: rows hold only the allowed tokens, so they are not normalized; the model's
    own tables were validated before the product was built."""

    def validate(self, *, norm_tol: float = 1.0) -> "FiniteStateTables":
        return super().validate(norm_tol=1.0)


def make_oracle(next_logprobs: Any, constraint: Any, *, cap: int, terminating: bool, **kw: Any) -> StepOracle:
    """The step oracle of an enumerable: a :class:`ConstrainedOracle` under ``constraint``, else a
    plain :class:`~arenum.step.oracle.StepOracle` (``kw``: its keywords)."""
    if constraint is None:
        return StepOracle(next_logprobs, **kw)
    for attr in ("step", "accepts"):
        if not callable(getattr(constraint, attr, None)):
            raise TypeError(f"constraint must have step() and accepts() (arenum.Constraint), got "
                            f"{type(constraint).__name__} without {attr}()")
    if not hasattr(constraint, "start") or not isinstance(getattr(constraint, "name", None), str):
        raise TypeError(f"constraint must have a start state and a name (arenum.Constraint), got {constraint!r}")
    return ConstrainedOracle(next_logprobs, constraint=constraint, cap=cap, terminating=terminating, **kw)


def constrain_finite_state(finite_state: Any, constraint: Any, *, terminating: bool, norm_tol: float = 2e-2) -> Any:
    """The finite-state tables an enumerable under ``constraint`` hands its certified DP and sampler:
    a callable building the product (:func:`constrained_tables`) of the model's tables, or ``None``
    when there are none or no product serves (fixed length)."""
    if constraint is None or finite_state is None:
        return finite_state
    if not terminating:
        return None

    def product() -> FiniteStateTables | None:
        fs = finite_state if isinstance(finite_state, FiniteStateTables) else finite_state()
        if not isinstance(fs, FiniteStateTables):
            raise TypeError(f"finite_state() must return FiniteStateTables, got {type(fs).__name__}")
        fs.validate(norm_tol=norm_tol)
        out = constrained_tables(fs, constraint, terminating=True)
        if out is None:  # too large: no certified DP (the answers past a cap are brackets)
            return None
        return _ProductTables(out.tokens, out.log_probs, out.eos_log_probs, out.next_state, out.start, out.eos)

    return product
