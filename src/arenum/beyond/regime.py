"""The facade's answers beyond the exact budget: Monte Carlo, the envelope family, certified DPs.

:class:`BeyondExact` is a mixin of :class:`arenum.AutoregressiveEnumerable` (it uses the facade's
oracle, tree, support, settings and lock); it holds no state of its own.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Callable, Sequence

from .._guard import locked
from .._validate import exact_int, optional_exact_int
from .certified import CertifiedCounter
from .draws import FiniteStateSampler
from .estimate import INTERVALS, ExactHead, Interval, MonteCarloEstimator
from ..step import FiniteStateTables
from .sampling import check_sample_bytes, draw_samples

if TYPE_CHECKING:  # pragma: no cover
    from .envelope import AREnvelopeIndex
    from .lattice import LatticeEnvelopeIndex

__all__ = ["BeyondExact"]


class BeyondExact:
    """Estimates and certified brackets of the facade (see the module docstring)."""

    @locked
    def monte_carlo(self, n: int | None = None, *, seed: int | None = -1, head: bool = True,
                    interval: Interval = "bernstein") -> MonteCarloEstimator:
        """A :class:`~arenum.beyond.estimate.MonteCarloEstimator` over ``n`` draws (default
        ``estimate_samples``, seed ``estimate_seed``), drawn once and cached per arguments.

        ``head=True``: the draws avoid the exact index built so far (none if nothing is built), and
        every estimate adds that head's exact part (lower variance; pass the current head with
        :meth:`exact_head`). ``head=False``: plain ancestral draws. Cost: at most ``n`` forwards per
        level of the draws (draws sharing a prefix share its forward), one batched call per level.
        Estimates only: ``.count(t)``, ``.rank(log_prob)``, ``.mass_above(t)``, ``.threshold(k)``.
        """
        n = self.estimate_samples if n is None else exact_int("n", n, minimum=2)
        seed = self.estimate_seed if seed == -1 else optional_exact_int("seed", seed, minimum=0)
        if interval not in INTERVALS:
            raise ValueError(f"interval must be one of {INTERVALS}, got {interval!r}")
        key = (n, seed, bool(head), interval)
        est = self._mc.get(key)
        if est is not None:
            return est
        check_sample_bytes(n, [k[0] for k in self._mc], self.stats["memory_bytes"] + self._oracle.cache_bytes,
                           self.settings.max_bytes)
        h = self.exact_head() if head else None
        samples = draw_samples(
            self._oracle, n, self.support, seed=seed,
            tree=self._tree if h is not None else None, head_T=h.T if h is not None else math.inf,
            head_count=h.count if h is not None else 0,
            finite_state=self._state_sampler() if h is None else None,
        )
        est = MonteCarloEstimator(samples, confidence=self.confidence, interval=interval, head=h)
        self._mc[key] = est
        return est

    @locked
    def envelope_index(self, *, n_paths: int = 64, seed: int | None = 0, budget_bits: float = 64.0,
                       calibration_sequences: Sequence[Sequence[Any]] | None = None,
                       cluster_fn: Callable[[Any], Any] | None = None,
                       n_clusters: int | None = None) -> "AREnvelopeIndex | LatticeEnvelopeIndex":
        """Approximate count / threshold / rank / unrank beyond the exact tree's reach, from per-depth
        step tables pooled over ``n_paths`` sampled contexts (or the prefixes of
        ``calibration_sequences``): an :class:`~arenum.beyond.envelope.AREnvelopeIndex`; with ``cluster_fn``
        or ``n_clusters``, per (depth, cluster of the last token): a
        :class:`~arenum.beyond.lattice.LatticeEnvelopeIndex`.

        ESTIMATES (``method='envelope'``, no interval), exact for models whose step table depends only
        on the depth (the lattice: and the last token's cluster); ``unrank`` returns real sequences with
        exact log-probs. Cost: at most ``n_paths`` forwards per depth (per cluster) to build, one per
        step per ``unrank``. Cached per arguments; a larger ``budget_bits`` deepens the cached one.
        """
        from .lattice import make_envelope

        return make_envelope(self._oracle, self.support, self.quantizer, self._envelopes, lock=self._lock,
                             n_paths=n_paths, seed=seed, budget_bits=budget_bits,
                             calibration_sequences=calibration_sequences, cluster_fn=cluster_fn,
                             n_clusters=n_clusters)

    @locked
    def exact_head(self) -> ExactHead | None:
        """The exact index built so far as an :class:`~arenum.beyond.estimate.ExactHead` (every sequence with
        score ``>= T`` counted exactly); ``None`` when nothing is built or with ``branch_cap`` (whose
        index is a sub-support, not a head of the support)."""
        return self.answers.exact_head()

    def _estimator_and_head(self) -> tuple[MonteCarloEstimator, ExactHead | None]:
        """The default estimator for the automatic regime: the exact head is first deepened as far as
        the caps allow (its forwards also serve later exact answers), then tail draws are made once."""
        key = (self.estimate_samples, self.estimate_seed, True, "bernstein")
        if key not in self._mc:
            self.answers.deepen_head()
        est = self.monte_carlo()
        return est, (self.exact_head() if est.head is not None else None)

    @locked
    def certified(self, resolution_bits: float | None = None) -> CertifiedCounter | None:
        """The :class:`~arenum.beyond.certified.CertifiedCounter` of a finite-state model (``finite_state=``), built
        lazily and cached per resolution (default :attr:`certified_resolution_bits`); None without tables."""
        fs = self.finite_state_tables()
        if fs is None or self.branch_cap is not None:
            return None
        if self.terminating and fs.eos != self.support.eos_id:
            raise ValueError(f"finite_state tables end with eos={self._oracle.token(fs.eos) if fs.eos is not None else None!r}, "
                             f"the enumerable with eos={self.eos!r}")
        r = self.certified_resolution_bits if resolution_bits is None else resolution_bits
        cc = self._certified.get(r)
        if cc is None:
            cc = self._certified[r] = CertifiedCounter(fs, self.support, resolution_bits=r)
        return cc

    @locked
    def finite_state_tables(self) -> FiniteStateTables | None:
        """The model's finite-state tables (``finite_state=``; a callable is called once), validated, with
        the model's tokens mapped to this enumerable's ids (:meth:`FiniteStateTables.with_ids`); else None."""
        fs = self._finite_state
        if fs is None or self._finite_state_ok:
            return fs
        if not isinstance(fs, FiniteStateTables):
            fs = fs()
            if not isinstance(fs, FiniteStateTables):
                raise TypeError(f"finite_state() must return FiniteStateTables, got {type(fs).__name__}")
        fs.validate(norm_tol=self.settings.norm_tol)
        if self._oracle.int_mode is None:  # nothing decided the token kind yet: the tables do
            self._oracle.int_mode = fs.int_tokens
        if not (fs.int_tokens and self._oracle.int_mode):  # integer ids are the oracle's ids already
            fs = fs.with_ids(self._oracle.token_id)
        self._finite_state = fs
        self._finite_state_ok = True
        return fs

    def finite_state_sampler(self) -> FiniteStateSampler | None:
        """The sampler plain draws use for a finite-state model (cumulative step tables by state),
        ``None`` for other models: what :meth:`monte_carlo` passes to ``draw_samples`` with ``head=False``."""
        return self._state_sampler()

    @locked
    def _state_sampler(self) -> FiniteStateSampler | None:
        """Cumulative step tables by state for plain draws (built once), when the model gave
        finite-state tables that fit this support (``docs/estimates.md``)."""
        if self._fs_sampler is None:
            fs = self.finite_state_tables()
            term = self.support.eos_id is not None
            if fs is None or (term and fs.eos != self.support.eos_id):
                return None
            self._fs_sampler = FiniteStateSampler.build(fs, term, self.support.eos_id)
        return self._fs_sampler
