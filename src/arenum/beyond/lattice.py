"""The Markov-refined envelope: per-depth step tables conditioned on a cluster of the last token.

:class:`LatticeEnvelopeIndex` keeps one pooled step table per (depth ``d``, cluster ``c`` of the last
token), each entry remembering the cluster of its own token, and composes them by a lattice DP over
clusters (see :mod:`arenum.beyond.envelope`, whose query surface it shares). It is EXACT (counts, thresholds,
masses, ranks, and ``unrank`` in the exact index's order) for any model whose next-token table depends
only on (depth, cluster of the last token), and interpolates between the mean-field envelope (one
cluster) and the last-token Markov model (one cluster per token).

Contexts. At depth 0 the one context is the empty prefix. Every entry of a depth-``d`` table leads to
the cluster of its token, so every cluster reachable at depth ``d + 1`` gets contexts: up to
``n_paths`` of the prefixes ``p + (t,)`` (``p`` a context of depth ``d``) that lead to it, drawn
without replacement in proportion to their probability (Gumbel top-k, seeded); with
``calibration_sequences`` (checked as for the mean-field envelope), the prefixes of those real
sequences come first. A cluster's pooled table averages its contexts' tables.

Clusters: ``cluster_fn(token) -> hashable`` (any tokens), or ``n_clusters`` (integer tokens:
``token % n_clusters``; other tokens: their interned id ``% n_clusters``), or neither: every token is
its own cluster (the last-token Markov envelope). Fixed-length and terminating supports.

Cost: at most ``n_paths`` forwards per (depth, cluster) to build, one batched pass per depth; ``O(L)``
forwards per ``unrank``.

This module does not sample paths to the end or give confidence intervals.
"""
from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from .._validate import exact_int, finite_float, optional_exact_int
from .envelope import AREnvelopeIndex, EnvelopeBase
from .ranks import calibration_ids
from ..exact import Quantizer
from ..support import Support

if TYPE_CHECKING:
    from ..step import StepOracle

__all__ = ["LatticeEnvelopeIndex", "make_envelope"]

_START = -1


class LatticeEnvelopeIndex(EnvelopeBase):
    """Per-(depth, last-token cluster) envelope (module docstring); same queries as
    :class:`~arenum.beyond.envelope.AREnvelopeIndex`: ``count``, ``threshold``, ``mass_above``,
    ``rank_bracket``, ``unrank``/``seek``, ``slice``, ``size``/``total``, ``ensure_bits``.

    Built by ``enumerable.envelope_index(cluster_fn=..., n_clusters=..., n_paths=64, seed=0)`` or
    ``LatticeEnvelopeIndex(enumerable, n_clusters=8)`` (sharing its forward cache).
    Exact for models whose table depends only on (depth, cluster of the last token); estimates
    (``method='envelope'``) otherwise.
    """

    def __init__(self, oracle: "StepOracle | Any", support: Support | None = None, quantizer: Quantizer | None = None, *,
                 cluster_fn: Callable[[Any], Any] | None = None, n_clusters: int | None = None,
                 n_paths: int = 64, seed: int | None = 0, budget_bits: float = 64.0,
                 lock: "threading.RLock | None" = None,
                 calibration_sequences: "Sequence[Sequence[Any]] | None" = None) -> None:
        b = finite_float("budget_bits", budget_bits)
        if b <= 0:
            raise ValueError(f"budget_bits must be > 0, got {budget_bits!r}")
        if cluster_fn is not None and n_clusters is not None:
            raise ValueError("give cluster_fn or n_clusters, not both")
        if cluster_fn is not None and not callable(cluster_fn):
            raise TypeError(f"cluster_fn must be callable, got {type(cluster_fn).__name__}")
        self.n_clusters = optional_exact_int("n_clusters", n_clusters, minimum=1)
        self.cluster_fn = cluster_fn
        self._setup(oracle, support, quantizer, n_paths, seed, lock)
        self._keys: dict[Any, int] = {}
        self._of_id: dict[int, int] = {}
        self._reps: dict[int, list[tuple[tuple, float]]] = {_START: [((), 0.0)]}
        self._calib: list[tuple] = []
        if calibration_sequences is not None:
            self._calib = calibration_ids(self._oracle, self.support, calibration_sequences)
        self._build(b)

    def _next_states(self, ids: np.ndarray) -> np.ndarray:
        ids = np.asarray(ids, dtype=np.int64)
        if self.n_clusters is not None:
            return ids % self.n_clusters
        if self.cluster_fn is None:
            return ids.copy()
        out = np.empty(ids.size, np.int64)
        for k, i in enumerate(ids.tolist()):
            c = self._of_id.get(i)
            if c is None:
                key = self.cluster_fn(self._oracle.token(i))
                try:
                    c = self._keys.setdefault(key, len(self._keys))
                except TypeError:
                    raise TypeError(f"cluster_fn must return a hashable value, got {type(key).__name__}") from None
                self._of_id[i] = c
            out[k] = c
        return out

    @property
    def clusters_seen(self) -> int:
        """Distinct clusters among the tokens met so far."""
        return len({c for tabs in self._tabs for c in tabs} - {_START})

    def _sample_depth(self, d: int) -> None:
        """Pool depth ``d``'s tables per cluster (one batched pass over all contexts), then draw the
        contexts of depth ``d + 1`` for every cluster the tables lead to."""
        reps = self._reps
        prefixes = sorted({p for lst in reps.values() for p, _ in lst})
        pos = {p: i for i, p in enumerate(prefixes)}
        tabs = self._fetch(prefixes)
        self._set_depth(d, {c: self._pool([tabs[pos[p]] for p, _ in lst], len(lst)) for c, lst in reps.items()})
        if d + 1 >= self._depth_limit():
            self._reps = {}
            return
        par, tok, lw = [], [], []
        flat = [(p, w) for lst in reps.values() for p, w in lst]
        for r, (p, w) in enumerate(flat):
            ids, lps = tabs[pos[p]]
            if self.eos_id is not None:
                keep = ids != self.eos_id
                ids, lps = ids[keep], lps[keep]
            par.append(np.full(ids.size, r))
            tok.append(ids)
            lw.append(w + lps)
        par_a, tok_a, lw_a = np.concatenate(par), np.concatenate(tok), np.concatenate(lw)
        st = self._next_states(tok_a)
        key = lw_a + self._rng.gumbel(size=lw_a.size)  # weighted draws without replacement
        nxt: dict[int, list[tuple[tuple, float]]] = {}
        for q in self._calib:  # contexts from real sequences come first
            if len(q) > d + 1:
                c = int(self._next_states(np.array([q[d]]))[0])
                lst = nxt.setdefault(c, [])
                if len(lst) < self.n_paths and all(q[: d + 1] != p for p, _ in lst):
                    lst.append((q[: d + 1], 0.0))
        for c in np.unique(st).tolist():
            m = np.flatnonzero(st == c)
            have = nxt.setdefault(c, [])
            seen = {p for p, _ in have}
            for j in m[np.argsort(-key[m], kind="stable")].tolist():
                if len(have) >= self.n_paths:
                    break
                p = flat[par_a[j]][0] + (int(tok_a[j]),)
                if p not in seen:
                    have.append((p, float(lw_a[j])))
        self._reps = nxt

    def __repr__(self) -> str:
        k = self.n_clusters if self.n_clusters is not None else ("fn" if self.cluster_fn else "token")
        return (f"LatticeEnvelopeIndex(clusters={k}, n_paths={self.n_paths}, budget_bits={self.budget_bits:g}, "
                f"size~{self.size():.4g}, exact_atoms={self.exact_atoms})")



def make_envelope(oracle: Any, support: Support, quantizer: Quantizer, cache: dict, *, lock: Any, n_paths: Any,
                  seed: Any, budget_bits: Any, calibration_sequences: Any, cluster_fn: Any,
                  n_clusters: Any) -> "AREnvelopeIndex | LatticeEnvelopeIndex":
    """The envelope of :meth:`arenum.AutoregressiveEnumerable.envelope_index`: arguments checked,
    cached in ``cache`` per arguments, deepened to ``budget_bits``."""
    n_paths = exact_int("n_paths", n_paths, minimum=1)
    seed = optional_exact_int("seed", seed, minimum=0)
    b = finite_float("budget_bits", budget_bits)
    if b <= 0:
        raise ValueError(f"budget_bits must be > 0, got {budget_bits!r}")
    cal = None if calibration_sequences is None else tuple(tuple(x) for x in calibration_sequences)
    key = ("envelope", n_paths, seed, cal, cluster_fn, n_clusters)
    env = cache.get(key)
    if env is None:
        kw = dict(n_paths=n_paths, seed=seed, budget_bits=b, lock=lock)
        if cluster_fn is None and n_clusters is None:
            env = AREnvelopeIndex(oracle, support, quantizer, calibration_sequences=cal, **kw)
        else:
            env = LatticeEnvelopeIndex(oracle, support, quantizer, cluster_fn=cluster_fn,
                                       n_clusters=n_clusters, calibration_sequences=cal, **kw)
        cache[key] = env
    env.ensure_bits(b)
    return env
