"""Speculative enumeration: order with a cheap DRAFT model, score with the expensive TARGET.

Building an index costs one forward per live prefix, which is prohibitive when the model is a large
transformer. The ordering work tolerates approximation; the scores must be the real model's. So a
cheap draft (an n-gram, a distilled student, a quantized twin) pays for the index, and the target is
touched only for the sequences a query returns: one batched teacher-forcing call for all of them.

Contract: every returned log-prob is the TARGET's exact score. The order is the draft's, repaired
locally by window reranking: ``top_k(k)`` / ``slice(start, k)`` pull the first
``start + k + rerank_window`` draft-ordered sequences, score them with the target in one batch and sort
them by target score. The answer is exact whenever no unpulled sequence out-scores the returned ones.
With ``assumed_gap = g`` (a global bound on ``target_lp - draft_lp``) that is proven, not hoped for:
every unpulled sequence has ``draft_lp <= bound`` hence ``target_lp <= bound + g``, so the result is
``certified`` when its last item scores ``>= bound + g``. Without ``g`` the certificate is ``None``
and the observed gap is reported as a diagnostic. See ``docs/rescore.md`` for the inequalities.

This module builds no index and runs no model itself: it reads a draft index through ``unrank`` (and
``slice`` when offered) and calls the target's batch scorer.

>>> class ListIndex:                      # a draft index in exact descending draft order
...     exact_order = True
...     def __init__(self, items): self.items = items
...     def unrank(self, i): return self.items[i]
>>> draft = ListIndex([(("a",), -0.5), (("b",), -1.0), (("c",), -2.5)])
>>> target = {("a",): -0.9, ("b",): -0.7, ("c",): -2.4}
>>> idx = RescoredIndex(draft, lambda seqs: [target[s] for s in seqs], rerank_window=1, assumed_gap=0.5)
>>> r = idx.top_k(1)                      # pulls a, b; c could still score up to -1.0 + 0.5
>>> r.items, r.certified, r.bound
([(('b',), -0.7)], False, -1.0)
>>> r = idx.top_k(1, certify=True)        # pulls c too: now nothing unpulled beats -2.5 + 0.5
>>> r["items"], r["certified"], r.bound, r.scored
([(('b',), -0.7)], True, -2.5, 1)
"""
from __future__ import annotations

import math
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, Literal

import numpy as np

from .._validate import exact_int, finite_float, optional_exact_int
from ..errors import BudgetExceeded

__all__ = ["RescoredIndex", "RescoreResult"]

Order = Literal["exact", "bucket"]

# Floating-point slack added to a bucket's upper edge: ``fine_bucket`` divides by ln 2 and the bucket
# width in floats, so a log-prob a few ulps above ``hi`` can still be filed in bucket ``fb``.
_EDGE_SLACK = 32 * sys.float_info.epsilon
# Tolerance for "a pulled sequence visibly breaks the assumed gap" (rounding in the two scores).
_GAP_TOL = 1e-9


@dataclass(frozen=True)
class RescoreResult:
    """A query result, readable as attributes (``r.items``) and as the spec's dict (``r["items"]``).

    ``dict(r)`` gives a plain dict; ``r.keys()``, ``r.get(key)`` and ``key in r`` work too. (Not a
    ``dict`` subclass: ``dict.items`` would shadow the ``items`` field.)

    Fields
    ------
    items: ``[(seq, target_lp), ...]`` in descending TARGET score (ties by draft rank); every score is the
        target's exact score; target-impossible (``-inf``) sequences are left out.
    certified: ``True`` proven exact, ``False`` not proven, ``None`` when no ``assumed_gap`` was given.
    gap: observed ``max |target_lp - draft_lp|`` over the pulled sequences whose two scores are both
        finite (``0.0`` when there are none).
    bound: every unpulled draft sequence has ``draft_lp <= bound`` (``-inf`` when the draft is exhausted
        and not truncated, ``+inf`` when nothing was pulled, ``None`` when the draft index declares no order).
    scored: target scorings this call made (cached scores are reused, not counted).
    target_calls: target calls this call made.
    exhausted: the pulled head is the draft index's whole enumeration (it ran out).
    truncated: the draft index reports that its enumeration is not its model's whole support: it ran out
        while its ``truncated`` attribute is true (a depth cap), or its ``dropped_upper`` is positive
        (sequences skipped by a ``branch_cap``). Exhaustion then proves nothing; skipped sequences
        forbid a certificate.
    pulled: size of the reranked draft head.
    support_mismatch: pulled sequences with exactly one of the two scores ``-inf`` (left out of ``gap``).
    excess: observed ``max(target_lp - draft_lp)`` over the pulled sequences: the half of the gap the
        certificate relies on (``+inf`` if a draft-impossible sequence is target-possible, ``-inf`` when
        nothing was compared). ``certified`` is withheld when it exceeds ``assumed_gap``.
    """

    items: list[tuple[Any, float]]
    certified: bool | None
    gap: float
    bound: float | None
    scored: int
    target_calls: int
    exhausted: bool
    truncated: bool
    pulled: int
    support_mismatch: int
    excess: float

    def keys(self) -> list[str]:
        return [f.name for f in fields(self)]

    def __getitem__(self, key: str) -> Any:
        if key not in self.keys():
            raise KeyError(key)
        return getattr(self, key)

    def __contains__(self, key: object) -> bool:
        return key in self.keys()

    def get(self, key: str, default: Any = None) -> Any:
        return getattr(self, key) if key in self.keys() else default

    def __iter__(self) -> Any:  # the keys, as a dict's: dict(r), list(r)
        return iter(self.keys())

    def __len__(self) -> int:
        return len(self.keys())

    def values(self) -> list[Any]:
        return [getattr(self, k) for k in self.keys()]


class RescoredIndex:
    """Draft-ordered, target-scored enumeration with window reranking.

    Parameters
    ----------
    draft_index:
        Any object with ``unrank(i) -> (sequence, draft_log_prob)`` in the draft's order, ``IndexError``
        past its end. When it also has ``slice(start, k) -> [(sequence, draft_log_prob), ...]`` that is
        used to pull many at once. Its declared order decides what can be certified: ``exact_order = True``
        (exact descending draft score), else a ``quantizer`` (order guaranteed between fine buckets
        only), else nothing (results are never certified). An index whose ``truncated`` is true when it
        runs out (a depth cap) is not taken as complete; one with ``dropped_upper > 0`` (a
        ``branch_cap`` skipped sequences of unknown rank) never certifies.
    target:
        The expensive model: an object with ``score_sequences(seqs) -> log_probs`` (an
        ``AutoregressiveEnumerable``) or a bare callable ``seqs -> log_probs``. Called once per batch;
        it must return exactly one real score per sequence (``-inf`` allowed, NaN and ``+inf`` not).
    rerank_window:
        Extra draft candidates pulled past ``start + k`` and reranked by target score. An exact
        integer ``>= 0``.
    assumed_gap:
        Optional global bound ``g`` (nats) with ``|target_lp - draft_lp| <= g`` for every sequence.
        When given, results carry a sound ``certified`` verdict; otherwise ``certified`` is ``None``.
        Only the upper half, ``target_lp <= draft_lp + g``, is used (a target far BELOW the draft
        somewhere harms no certificate), and it is checked on every pulled sequence.

    Target scores are cached by sequence, so paging through a ranking, re-asking a query, growing a
    window, an ``unrank`` of a rank already scored, or a draft index that gives one sequence at
    several ranks (an estimated order: it is listed once) never scores a sequence twice. Counters:
    ``target_calls`` and ``target_sequences`` (cumulative over the index's life; a call that fails is
    not counted). One lock: threads may share an index. A draft index that refuses to go deeper
    (``BudgetExceeded``, a cap) ends the pull there: the query answers from the head it has (not
    certified past it), or raises when even ``start + k`` cannot be pulled.
    """

    def __init__(self, draft_index: Any, target: Any, *, rerank_window: int = 64,
                 assumed_gap: float | None = None) -> None:
        if not callable(getattr(draft_index, "unrank", None)):
            raise TypeError(f"draft_index must have an unrank(i) method, got {type(draft_index).__name__}")
        scorer = getattr(target, "score_sequences", None)
        if callable(scorer):
            self._score_fn: Callable[[list], Any] = scorer
        elif callable(target):
            self._score_fn = target
        else:
            raise TypeError("target must have score_sequences(seqs) or be a callable seqs -> log_probs, "
                            f"got {type(target).__name__}")
        why = _other_supports(getattr(draft_index, "support", None) or
                              getattr(getattr(draft_index, "tree", None), "support", None), getattr(target, "support", None))
        if why is not None:
            raise ValueError(f"draft_index and target enumerate other supports: {why}; the draft never pulls what "
                             "only the target has, so no answer could be certified")
        self.draft_index = draft_index
        self.target = target
        self.rerank_window = exact_int("rerank_window", rerank_window, minimum=0)
        if assumed_gap is None:
            self.assumed_gap: float | None = None
        else:
            g = finite_float("assumed_gap", assumed_gap)
            if g < 0:
                raise ValueError(f"assumed_gap must be >= 0, got {assumed_gap!r}")
            self.assumed_gap = g
        self.order: Order | None = _declared_order(draft_index)
        self.target_calls = 0
        self.target_sequences = 0
        # The pulled draft head, ranks 0 .. len(_seqs) - 1; _tlp covers its scored prefix.
        self._seqs: list[Any] = []
        self._dlp: list[float] = []
        self._tlp: list[float] = []
        self._draft_exhausted = False  # the draft index ran out (IndexError / short slice)
        self._draft_truncated = False  # ... while reporting its enumeration cut short
        self._draft_capped: BudgetExceeded | None = None  # the draft index refused to go deeper (a cap)
        self._known: dict[Any, float] = {}  # target scores by sequence (hashable form)
        self._lock = threading.RLock()
        self._use_slice = callable(getattr(draft_index, "slice", None))

    def __repr__(self) -> str:
        return (f"RescoredIndex(order={self.order!r}, rerank_window={self.rerank_window}, "
                f"assumed_gap={self.assumed_gap!r}, pulled={len(self._seqs)}, "
                f"target_calls={self.target_calls}, target_sequences={self.target_sequences})")

    # ------------------------------------------------------------------ queries

    def top_k(self, k: int, *, certify: bool = False, max_target: int | None = None) -> RescoreResult:
        """The ``k`` best sequences by TARGET score among the ``k + rerank_window`` draft head.

        Same as ``sorted(head, key=target_lp, reverse=True)[:k]`` for the pulled head; equal to the
        target's true top-k scores whenever ``certified`` is ``True``. Costs at most one target call
        (``k + rerank_window`` sequences, fewer when cached).

        ``certify=True`` (needs ``assumed_gap``) grows the window, doubling the extra pull, until the
        certificate holds, the draft is exhausted, the certificate cannot hold any more (the gap
        assumption is seen broken, the draft reports skipped sequences), or ``max_target``
        new target scorings would be exceeded: one batched target call per step, scoring only newly
        pulled sequences. ``max_target`` caps the target scorings of this call (the first pull is
        clipped to it; it must cover ``k``).
        """
        k = exact_int("k", k, minimum=0)
        return self._query(0, k, certify, max_target)

    def slice(self, start: int, k: int, *, certify: bool = False,
              max_target: int | None = None) -> RescoreResult:
        """Target-reranked ``[start, start + k)`` slice of the pulled ``start + k + rerank_window`` head.

        Same as ``sorted(head, key=target_lp, reverse=True)[start:start + k]``. Order within the pulled
        set is target-exact; the certificate covers whether an unpulled sequence could belong in (or
        before) the slice: it holds when the slice's last item scores ``>= bound + assumed_gap``.
        ``certify`` and ``max_target`` as in :meth:`top_k`.
        """
        start = exact_int("start", start, minimum=0)
        k = exact_int("k", k, minimum=0)
        return self._query(start, k, certify, max_target)

    def unrank(self, i: int) -> tuple[Any, float]:
        """The draft's rank-``i`` sequence with the TARGET's exact log-probability.

        Same as ``(draft_index.unrank(i)[0], target_lp(that sequence))``: the rank coordinate is the
        draft's (no reranking), the cheap random-access primitive. One target call of one sequence,
        none when the draft head already holds rank ``i``. ``IndexError`` past the draft's end.
        """
        return self.unrank_many([i])[0]

    def unrank_many(self, indices: Sequence[int]) -> list[tuple[Any, float]]:
        """:meth:`unrank` for many draft ranks, scoring all the uncached ones in ONE target call."""
        if not hasattr(indices, "__iter__"):
            raise TypeError(f"indices must be a sequence of ranks, got {type(indices).__name__} {indices!r}")
        with self._lock:
            return self._unrank_many(indices)

    def _unrank_many(self, indices: Sequence[int]) -> list[tuple[Any, float]]:
        ranks = []
        for i in indices:
            r = exact_int("i", i)
            if r < 0:
                raise IndexError(f"rank i must be >= 0, got {i!r}")
            ranks.append(r)
        out: list[tuple[Any, float] | None] = [None] * len(ranks)
        todo: list[int] = []
        seqs: list[Any] = []
        for j, r in enumerate(ranks):
            if r < len(self._tlp):
                out[j] = (self._seqs[r], self._tlp[r])
            else:
                seq = self._seqs[r] if r < len(self._seqs) else _as_pair(self.draft_index.unrank(r), r)[0]
                todo.append(j)
                seqs.append(seq)
        if seqs:
            scores = self._score(seqs)
            for j, seq, s in zip(todo, seqs, scores):
                out[j] = (seq, s)
        return out  # type: ignore[return-value]

    # ------------------------------------------------------------------ machinery

    def _query(self, start: int, k: int, certify: bool, max_target: Any) -> RescoreResult:
        with self._lock:
            return self._query_locked(start, k, certify, max_target)

    def _query_locked(self, start: int, k: int, certify: bool, max_target: Any) -> RescoreResult:
        if not isinstance(certify, bool):
            raise TypeError(f"certify must be a bool, got {type(certify).__name__} {certify!r}")
        max_target = optional_exact_int("max_target", max_target, minimum=0)
        if certify:
            if self.assumed_gap is None:
                raise ValueError("certify=True needs assumed_gap (a bound on |target_lp - draft_lp|), "
                                 "got assumed_gap=None")
            if self.order is None:
                raise ValueError("certify=True needs a draft index that declares exact_order = True or a "
                                 f"quantizer; {type(self.draft_index).__name__} declares neither")
        calls0, seqs0 = self.target_calls, self.target_sequences

        def budget_cap(n: int) -> int:
            # Largest pull <= n whose new target scorings fit max_target (scored so far this call counts).
            if max_target is None:
                return n
            left = max_target - (self.target_sequences - seqs0)
            return min(n, len(self._tlp) + max(left, 0))

        extra = self.rerank_window
        need = start + k
        reachable = min(need, len(self._seqs)) if self._draft_exhausted else need
        if max_target is not None and reachable - len(self._tlp) > max_target:
            raise ValueError(f"max_target={max_target} cannot cover the {need} sequences start + k needs "
                             f"({len(self._tlp)} already scored)")
        n = budget_cap(need + extra)
        while True:
            n = self._ensure_scored(n)
            if n < need and self._draft_capped is not None and not self._draft_exhausted:
                raise BudgetExceeded(f"the draft index cannot give ranks up to {need}: {self._draft_capped}")
            verdict = self._verdict(start, k, n)
            if not certify or verdict["certified"] is not False or verdict["exhausted"] \
                    or verdict["_hopeless"] or self._draft_capped is not None:
                break
            extra = max(2 * extra, 1)
            nxt = budget_cap(need + extra)
            if nxt <= n:  # max_target spent
                break
            n = nxt
        verdict.pop("_hopeless")
        verdict["scored"] = self.target_sequences - seqs0
        verdict["target_calls"] = self.target_calls - calls0
        return RescoreResult(**verdict)

    def _ensure_scored(self, n: int) -> int:
        """Pull the draft head to ``n`` (or its end) and target-score it; return the head size used."""
        self._pull(n)
        n = min(n, len(self._seqs))
        if n > len(self._tlp):
            self._tlp.extend(self._score(self._seqs[len(self._tlp):n]))
        return n

    def _pull(self, n: int) -> None:
        try:
            self._pull_to(n)
        except BudgetExceeded as e:  # a cap of the draft index: what was pulled stays, nothing deeper
            self._draft_capped = e

    def _pull_to(self, n: int) -> None:
        while len(self._seqs) < n and not self._draft_exhausted:
            have = len(self._seqs)
            want = n - have
            if self._use_slice:
                try:
                    got = self.draft_index.slice(have, want)
                except (IndexError, BudgetExceeded):
                    got = None  # the end or a cap falls inside the request: finish one at a time
                if isinstance(got, (Mapping, RescoreResult)):  # a reranked result, not a draft-order list
                    self._use_slice = False
                    continue
                if got is not None:
                    pairs = [_as_pair(p, have + j) for j, p in enumerate(got)]
                    if len(pairs) > want:
                        raise ValueError(f"draft_index.slice({have}, {want}) returned {len(pairs)} items")
                    self._append(pairs)
                    if len(pairs) < want:
                        self._end_reached()
                    continue
            pairs = []
            try:
                for r in range(have, n):
                    pairs.append(_as_pair(self.draft_index.unrank(r), r))
            except IndexError:
                self._end_reached()
            finally:  # a cap (or an interrupt) keeps the ranks pulled before it
                self._append(pairs)

    def _end_reached(self) -> None:
        self._draft_exhausted = True
        self._draft_truncated = bool(getattr(self.draft_index, "truncated", False))

    def _append(self, pairs: list[tuple[Any, float]]) -> None:
        n0 = len(self._seqs)
        try:
            self._seqs.extend(seq for seq, _ in pairs)
            self._dlp.extend(lp for _, lp in pairs)
        except BaseException:  # Ctrl-C between the two: the lists stay of one length
            del self._seqs[n0:], self._dlp[n0:]
            raise

    def _score(self, seqs: list[Any]) -> list[float]:
        """The target's scores of ``seqs``: the known ones from the cache, the others (each distinct one
        once) in one target call, validated: exactly one real, non-NaN, non-``+inf`` score each."""
        keys = [_key(q) for q in seqs]
        at: dict[Any, int] = {}  # a distinct unknown sequence -> its place in the call
        call: list[Any] = []
        where: list[int] = []  # each sequence's place in the call (-1: known)
        for q, key in zip(seqs, keys):
            if key is not None and key in self._known:
                where.append(-1)
            elif key is not None and key in at:
                where.append(at[key])
            else:
                if key is not None:
                    at[key] = len(call)
                where.append(len(call))
                call.append(q)
        got = self._call(call) if call else []
        for key, j in at.items():
            self._known[key] = got[j]
        return [self._known[key] if j < 0 else got[j] for key, j in zip(keys, where)]

    def _call(self, seqs: list[Any]) -> list[float]:
        raw = self._score_fn(list(seqs))
        try:
            arr = np.asarray(raw, dtype=np.float64)  # (n,) float64
        except (TypeError, ValueError) as exc:
            raise ValueError(f"target must return one real score per sequence, got {raw!r:.200}") from exc
        if arr.ndim != 1 or arr.shape[0] != len(seqs):
            raise ValueError(f"target returned {arr.size if arr.ndim else 'a scalar'} score(s) of shape "
                             f"{arr.shape} for {len(seqs)} sequences; expected exactly one per sequence")
        bad = np.isnan(arr) | (arr == np.inf)
        if bad.any():
            j = int(np.argmax(bad))
            raise ValueError(f"target returned {arr[j]!r} for sequence {seqs[j]!r}; "
                             "scores must be real log-probs (-inf allowed)")
        self.target_calls += 1
        self.target_sequences += len(seqs)
        return arr.tolist()

    def _bound(self, n: int, complete: bool) -> float | None:
        """Every unpulled draft sequence (ranks >= n) has ``draft_lp <= bound``."""
        if self.order is None:
            return None
        if complete:
            return -math.inf
        if n == 0:
            return math.inf
        last = self._dlp[n - 1]
        if self.order == "exact" or last == -math.inf:
            return last
        q = self.draft_index.quantizer
        hi = float(q.bucket_log_prob_bounds(q.fine_bucket(last))[1])
        return hi + _EDGE_SLACK * abs(hi)

    def _verdict(self, start: int, k: int, n: int) -> dict[str, Any]:
        d = np.asarray(self._dlp[:n], dtype=np.float64)  # (n,) draft scores of the head
        t = np.asarray(self._tlp[:n], dtype=np.float64)  # (n,) target scores of the head
        exhausted = self._draft_exhausted and n == len(self._seqs)
        fd, ft = d > -math.inf, t > -math.inf
        # Ranked: target-positive pulled sequences by descending target score, ties by draft rank.
        pos = np.flatnonzero(ft)
        ranked = pos[np.argsort(-t[pos], kind="stable")].tolist()
        seen: set = set()  # a sequence the draft gave at several ranks (an estimated order) is listed once
        once = []
        for r in ranked:
            key = _key(self._seqs[r])
            if key is None or key not in seen:
                seen.add(key)
                once.append(r)
        items = [(self._seqs[r], float(t[r])) for r in once[start:start + k]]
        both = fd & ft
        diff = t[both] - d[both]
        gap = float(np.max(np.abs(diff))) if diff.size else 0.0
        # up: max(target_lp - draft_lp), the half of the gap the proof uses; a target-positive,
        # draft-impossible sequence makes it +inf.
        up = math.inf if (ft & ~fd).any() else (float(diff.max()) if diff.size else -math.inf)
        mismatch = int(np.count_nonzero(fd != ft))
        dropped = getattr(self.draft_index, "dropped_upper", 0) or 0
        truncated = (exhausted and self._draft_truncated) or dropped > 0
        complete = exhausted and not truncated
        bound = self._bound(n, complete)
        g = self.assumed_gap
        gap_broken = g is not None and up > g + _GAP_TOL * (1.0 + g)
        certified: bool | None
        if g is None:
            certified = None
        elif self.order is None or gap_broken or dropped > 0:
            certified = False
        elif k == 0 or complete:
            certified = True
        else:
            last = items[-1][1] if len(items) == k else -math.inf
            certified = bool(last >= bound + g)  # type: ignore[operator]
        return {"items": items, "certified": certified, "gap": gap, "bound": bound, "excess": up,
                "exhausted": exhausted, "truncated": truncated, "pulled": n, "support_mismatch": mismatch,
                "_hopeless": gap_broken or dropped > 0}


def _declared_order(index: Any) -> Order | None:
    if getattr(index, "exact_order", False) is True:
        return "exact"
    q = getattr(index, "quantizer", None)
    if q is not None and callable(getattr(q, "fine_bucket", None)) \
            and callable(getattr(q, "bucket_log_prob_bounds", None)):
        return "bucket"
    return None


def _as_pair(item: Any, rank: int) -> tuple[Any, float]:
    """``(sequence, draft_lp)`` from a draft index entry; the log-prob must be a real, non-NaN number."""
    try:
        seq, lp = item
    except (TypeError, ValueError):
        raise ValueError(f"draft_index entry at rank {rank} must be a (sequence, log_prob) pair, "
                         f"got {item!r:.200}") from None
    try:
        f = float(lp)
    except (TypeError, ValueError):
        raise ValueError(f"draft_index log_prob at rank {rank} must be a real number, got {lp!r}") from None
    if math.isnan(f) or f == math.inf:
        raise ValueError(f"draft_index log_prob at rank {rank} must be a real log-prob, got {lp!r}")
    return seq, f


def _key(seq: Any) -> Any:
    """A hashable form of ``seq`` for the score cache (a list as a tuple); ``None`` when there is none."""
    key = tuple(seq) if isinstance(seq, list) else seq
    try:
        hash(key)
    except TypeError:
        return None
    return key


def _other_supports(draft: Any, target: Any) -> str | None:
    """Why the target's support is not within the draft's, where both declare one (``fixed_len``,
    ``eos``, ``cap``: an enumerable's :class:`~arenum.support.Support`); ``None`` when it is, or unknown."""
    if not all(hasattr(x, a) for x in (draft, target) for a in ("fixed_len", "eos", "cap")):
        return None
    if draft.fixed_len != target.fixed_len:
        kind = lambda x: f"fixed length {x.fixed_len}" if x.fixed_len is not None else f"eos={x.eos!r}"  # noqa: E731
        return f"the draft's sequences have {kind(draft)}, the target's {kind(target)}"
    if draft.fixed_len is None and draft.eos != target.eos:
        return f"the draft ends in eos={draft.eos!r}, the target in eos={target.eos!r}"
    if target.cap > draft.cap:
        return f"the target's sequences reach {target.cap} tokens, the draft's {draft.cap}"
    return None
