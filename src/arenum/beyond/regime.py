"""What one enumerable holds past the exact budget: its Monte Carlo draws, envelopes, certified DPs.

:class:`BeyondExact` is an object that :class:`arenum.answers.Answers` holds and calls (and the
facade, for the public ``monte_carlo``, ``envelope_index``, ``certified`` and
``finite_state_tables``). It is given the step oracle, the support, the prefix tree, the validated
settings and the build lock, never the facade; its arguments are trusted (the facade validates them
once) and its callers hold the lock. It caches per enumerable: the draw sets by their arguments, the
envelope indexes, the certified counters by resolution and the finite-state sampler.
"""
from __future__ import annotations

import math
import warnings
from typing import TYPE_CHECKING, Any, Callable, Sequence

from .certified import DEFAULT_RESOLUTION_BITS, CertifiedCounter
from .draws import FiniteStateSampler
from .estimate import ExactHead, MonteCarloEstimator
from ..exact import PrefixTree
from .._validate import optional_exact_int
from ..settings import Settings
from ..step import FiniteStateTables, StepOracle
from ..support import Support
from .sampling import SAMPLE_BYTES_PER_DRAW, check_sample_bytes, draw_samples

if TYPE_CHECKING:  # pragma: no cover
    from .envelope import AREnvelopeIndex
    from .lattice import LatticeEnvelopeIndex

__all__ = ["BeyondExact"]

RANK_EXACT_LIMIT = 100_000
"""Default :attr:`BeyondExact.rank_exact_limit`: a rank of a finite-state model builds the exact index
while it holds at most this many live prefixes; past them its certified DP answers."""

FiniteState = "FiniteStateTables | Callable[[], FiniteStateTables] | None"


class BeyondExact:
    """The state of one enumerable past the exact budget (see the module docstring).

    ``oracle`` and ``tree`` may be ``None`` (a coordinator that holds neither: it has no
    finite-state tables, draws elsewhere and builds no envelope).
    """

    def __init__(self, oracle: StepOracle | None, support: Support, tree: PrefixTree | None, settings: Settings, *,
                 finite_state: Any = None, lock: Any = None) -> None:
        if finite_state is not None and not (callable(finite_state) or isinstance(finite_state, FiniteStateTables)):
            raise TypeError(f"finite_state must be FiniteStateTables, a callable or None, got {type(finite_state).__name__}")
        self.oracle, self.support, self.tree, self.settings, self.lock = oracle, support, tree, settings, lock
        self._finite_state, self._finite_state_ok = finite_state, False
        self.resolution_bits = DEFAULT_RESOLUTION_BITS
        """Grid cell (bits) of the certified brackets the automatic regime gives past a cap."""
        self._rank_exact_limit: int | None = RANK_EXACT_LIMIT
        self._mc: dict[tuple, MonteCarloEstimator] = {}
        self._certified: dict[float, CertifiedCounter] = {}
        self._fs_sampler: FiniteStateSampler | None = None
        self._envelopes: dict[tuple, Any] = {}
        self._room: int | None = None  # bytes the next draws may use (check_room), None: no budget
        self.keep_in: tuple[str, bool] | None = None  # (folder, readonly): where the certified tables are kept

    # ------------------------------------------------------------------ Monte Carlo
    def cached_estimator(self, key: tuple) -> MonteCarloEstimator | None:
        """The estimator drawn before for ``key = (n, seed, head, interval)``, else ``None``."""
        return self._mc.get(key)

    def check_room(self, n: int, held_bytes: int) -> None:
        """Raise :class:`BudgetExceeded` before any forward if ``n`` more draws, with the draw sets
        cached, ``held_bytes`` (the tree and the index) and the oracle's table cache, would pass
        ``max_bytes``."""
        held = held_bytes + self.oracle.cache_bytes
        check_sample_bytes(n, [k[0] for k in self._mc], held, self.settings.max_bytes)
        mb = self.settings.max_bytes
        self._room = None if mb is None else mb - held - SAMPLE_BYTES_PER_DRAW * sum(k[0] for k in self._mc)

    def draw(self, key: tuple, head: ExactHead | None) -> MonteCarloEstimator:
        """The estimator for ``key = (n, seed, head wanted, interval)``, drawn once and cached: ``n``
        draws that avoid ``head`` (every estimate adds its exact part), plain ancestral draws when
        ``head`` is ``None``. Cost: at most ``n`` forwards per level, one batched call per level."""
        est = self._mc.get(key)
        if est is not None:
            return est
        n, seed, _, interval = key
        L = self.support.fixed_len if self.support.fixed_len is not None else self.support.cap
        self._tree_progress({"phase": "monte carlo", "draws": n, "draws_done": 0, "level": 0, "levels": L})
        samples = draw_samples(
            self.oracle, n, self.support, seed=seed,
            tree=self.tree if head is not None else None, head_T=head.T if head is not None else math.inf,
            head_count=head.count if head is not None else 0,
            finite_state=self.state_sampler() if head is None else None,
            max_bytes=self._room,  # the drawing's working memory too: batches that fit (draw_samples)
            progress=self._tree_progress,
        )
        est = self._mc[key] = MonteCarloEstimator(samples, confidence=self.settings.confidence, interval=interval,
                                                  head=head)
        return est

    def default_key(self) -> tuple:
        """The automatic regime's draws: ``(estimate_samples, estimate_seed, head, 'bernstein')``."""
        return (self.settings.estimate_samples, self.settings.estimate_seed, True, "bernstein")

    # ------------------------------------------------------------------ envelopes
    def envelope_index(self, *, n_paths: Any, seed: Any, budget_bits: Any,
                       calibration_sequences: Sequence[Sequence[Any]] | None, cluster_fn: Callable[[Any], Any] | None,
                       n_clusters: Any) -> "AREnvelopeIndex | LatticeEnvelopeIndex":
        """The envelope index for these arguments (checked by :func:`~arenum.beyond.lattice.make_envelope`),
        cached per arguments and deepened to ``budget_bits``."""
        from .lattice import make_envelope

        return make_envelope(self.oracle, self.support, self.settings.quantizer, self._envelopes, lock=self.lock,
                             n_paths=n_paths, seed=seed, budget_bits=budget_bits,
                             calibration_sequences=calibration_sequences, cluster_fn=cluster_fn,
                             n_clusters=n_clusters)

    # ------------------------------------------------------------------ finite-state models
    @property
    def rank_exact_limit(self) -> int | None:
        """Live prefixes a ``rank`` of a finite-state model may build to answer exactly (``None``: as
        many as the caps allow); past them its certified DP answers (default :data:`RANK_EXACT_LIMIT`)."""
        return self._rank_exact_limit

    @rank_exact_limit.setter
    def rank_exact_limit(self, value: Any) -> None:
        self._rank_exact_limit = optional_exact_int("rank_exact_limit", value, minimum=0)

    def rank_limit(self) -> int | None:
        """The cap on the live prefixes of a rank's exact build: :attr:`rank_exact_limit` for a model
        whose certified DP can answer instead (finite-state tables, no ``branch_cap``), else ``None``."""
        if self._finite_state is None or self.support.branch_cap is not None:
            return None
        return self._rank_exact_limit

    def certified(self, resolution_bits: float | None = None) -> CertifiedCounter | None:
        """The :class:`~arenum.beyond.certified.CertifiedCounter` of a finite-state model, built lazily
        and cached per resolution (default :attr:`resolution_bits`); ``None`` without tables or under
        ``branch_cap`` (it counts the whole support)."""
        r = self.resolution_bits if resolution_bits is None else resolution_bits
        if self._finite_state is not None and r not in self._certified and self.support.branch_cap is None:
            self.certified_note("building its tables")  # each step before its first block of cells: a line
        fs = self.finite_state_tables()
        if fs is None or self.support.branch_cap is not None:
            return None
        if self.support.eos_id is not None and fs.eos != self.support.eos_id:
            raise ValueError(f"finite_state tables end with eos={self.oracle.token(fs.eos) if fs.eos is not None else None!r}, "
                             f"the enumerable with eos={self.settings.eos!r}")
        cc = self._certified.get(r)
        if cc is None:
            cc = CertifiedCounter(fs, self.support, resolution_bits=r)  # numba: at its first DP (said then)
            cc.progress = self._tree_progress
            if self.keep_in is not None:
                self._keep(cc, *self.keep_in)
            self._certified[r] = cc
        return cc

    def _keep(self, cc: CertifiedCounter, folder: str, readonly: bool) -> None:
        """Restore ``cc`` from its file in the store's folder, and (unless ``readonly``) rewrite the file
        each time a DP grows (:mod:`arenum.beyond.certstore`); a file that cannot be written is one
        ``RuntimeWarning`` line, the answers stand."""
        from . import certstore

        ident = certstore.identity(cc)
        certstore.load(cc, folder, ident)
        if readonly:
            return

        def save() -> None:
            try:
                certstore.save(cc, folder, ident)
            except OSError as e:
                warnings.warn(f"certified tables not kept in {folder}: {e.strerror or e}", RuntimeWarning, stacklevel=2)
        cc.on_grow = save

    def certified_note(self, what: str) -> None:
        """A progress report of the certified DP before its first block of cells (which can come
        seconds later: the tables, the compiled kernels' load, the min-plus DP of the length cap)."""
        self._tree_progress({"phase": "certified", "dp": what, "cells_done": 0, "cells_todo": 0})

    def _tree_progress(self, d: dict) -> None:
        """The progress of a step past the exact budget (the certified DP, Monte Carlo draws), passed
        to the tree's ``progress`` callback (the facade's :attr:`progress`) with the forwards so far."""
        fn = self.tree.progress if self.tree is not None else None
        if fn is not None:
            fn({**d, "forwards": self.oracle.stats.forwards, "prefixes": self.tree.fetched_nodes})

    def finite_state_tables(self) -> FiniteStateTables | None:
        """The model's finite-state tables (a callable is called once), validated, with the model's
        tokens mapped to this enumerable's ids (:meth:`FiniteStateTables.with_ids`); else ``None``."""
        fs = self._finite_state
        if fs is None or self._finite_state_ok:
            return fs
        if not isinstance(fs, FiniteStateTables):
            fs = fs()
            if fs is None and getattr(self.oracle, "composition", None) is not None:  # a product too large: none
                self._finite_state = None
                return None
            if not isinstance(fs, FiniteStateTables):
                raise TypeError(f"finite_state() must return FiniteStateTables, got {type(fs).__name__}")
        fs.validate(norm_tol=self.settings.norm_tol)
        if self.oracle.int_mode is None:  # nothing decided the token kind yet: the tables do
            self.oracle.int_mode = fs.int_tokens
        if not (fs.int_tokens and self.oracle.int_mode):  # integer ids are the oracle's ids already
            fs = fs.with_ids(self.oracle.token_id)
        self._finite_state = fs
        self._finite_state_ok = True
        return fs

    def state_sampler(self) -> FiniteStateSampler | None:
        """Cumulative step tables by state for plain draws (built once), when the model gave
        finite-state tables that fit this support (``docs/estimates.md``); else ``None``."""
        if self._fs_sampler is None:
            fs = self.finite_state_tables()
            term = self.support.eos_id is not None
            if fs is None or (term and fs.eos != self.support.eos_id):
                return None
            self._fs_sampler = FiniteStateSampler.build(fs, term, self.support.eos_id)
        return self._fs_sampler
