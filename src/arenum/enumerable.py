"""``AutoregressiveEnumerable``: an autoregressive model as a countable, rankable, unrankable object.

A sequence's score is ``s(x) = sum_t log p(x_t | x_<t)``, summed left to right in float64.
Support: fixed-length (``max_len``: every length-``max_len`` sequence) or terminating (``eos``:
sequences that end in ``eos``, ``eos`` nowhere earlier, length ``<= max_len`` if given, else
``<= max_depth``). Order: descending score; ties shorter first, then lexicographically by table
positions (each step table sorted by descending log-prob, ties in the model's order).

Every query is EXACT (stronger than a quantized index): ``count``, ``threshold``, ``unrank``,
``slice``, ``rank``, ``cumulative``, ``mass_above`` and ``nucleus_size``. Where a cap prevents
exactness (``branch_cap``, the depth cap, ``max_prefixes``/``max_sequences``) the result is a
certified bracket that says so. Cost: one forward per live prefix at the budget the answer needs
(a prefix is live at a budget of ``B`` bits when its own bits are ``<= B``), never per rank.

Data flow: model -> :mod:`arenum.step.oracle` -> :mod:`arenum.exact.tree` -> :mod:`arenum.exact.index` ->
:mod:`arenum.exact.seek` -> this facade.
"""
from __future__ import annotations

import math
from typing import Any, Callable, Iterable, Iterator, Sequence

import numpy as np

from ._guard import locked
from ._validate import CountMode, exact_int, finite_float, optional_exact_int
from .answers import Answers
from .bounded import BoundedAnswers
from .exact import (
    best_first, CountIndex, build_count_index, Quantizer, INDEX_BYTES_PER_SEQUENCE, Limits, SeekIndex, TreeStore,
    open_store, PrefixTree,
)
from .beyond import (
    BeyondExact, DEFAULT_RESOLUTION_BITS, CertifiedCounter, MonteCarloEstimator, FiniteStateSampler, ARSampler,
)

from .step import FiniteStateTables, NORM_TOL, StepOracle
from .results import (
    CountBracket, CountDPTopPResult, CountResult, DensityRankResult, MassBracket, SeekResult, SequenceList,
    SequenceResult, ThresholdResult,
)
from .settings import Settings
from .support import Support

__all__ = ["AutoregressiveEnumerable", "count_budget_index"]


class AutoregressiveEnumerable(BeyondExact):
    """An autoregressive ``next_logprobs(prefix)`` model as a count-/rank-/unrank-able object.

    Parameters follow the library's contract:

    next_logprobs: ``next_logprobs(prefix) -> [(token, log_prob), ...]`` (or a ``(tokens, log_probs)``
        numpy pair, or a dense 1-D log-prob array indexed by token id).
    max_len: fixed-length sequence length; with ``eos``, a hard length cap. Exact positive integer.
    eos: end-of-sequence token; makes the model terminating.
    max_depth: length cap for a terminating model without ``max_len``. Exact positive integer.
    bin_width_bits, oversample: resolution of :meth:`quantized_count_index` buckets and the
        :attr:`quantizer` handed to rescoring; they never change an answer of this class.
    batch_next_logprobs: ``[prefix, ...] -> [result, ...]`` (or a 2-D array); the tree is filled
        level by level in ``batch_size`` chunks through it.
    batch_size: prefixes per batched forward. Exact positive integer.
    count_mode: ``'auto'`` | ``'exact'`` | ``'float'``, arithmetic of bounds that can exceed int64
        (``branch_cap``'s ``dropped_upper``); indexed counts are always exact integers.
    branch_cap: keep only the top ``branch_cap`` tokens of every table (the sub-support); queries
        count that sub-support exactly, and brackets add the certified bound on what was skipped.
    batch_score_sequences: teacher-forcing scorer ``[sequence, ...] -> log_probs``.
    all_position_logprobs: ``sequence -> [result at seq[:d] for d in range(len(seq))]``.

    Keyword-only extras: ``norm_tol`` (accepted ``|sum p - 1|``, default ``2e-2``; accepted rows
    are renormalized, counted in ``stats["renormalized_rows"]``), ``logprob_error`` (``eps``: the
    model's step log-probs are within ``eps`` nats of a TRUE model's, e.g. a bf16 run; every count,
    threshold, rank and mass becomes a certified bracket for the true model, ``method='logprob_error'``,
    see :mod:`arenum.bounded`), ``keep_margin_bits`` (stored table
    heads reach this many bits below a build's budget), ``max_prefixes`` / ``max_sequences`` (caps on
    an exact build; beyond them answers become brackets or raise :class:`BudgetExceeded`),
    ``max_bytes`` (one memory budget in bytes for the tree, the index and the memoized full tables,
    which take at most a quarter of it; ``"auto"``: half the machine's physical memory, ``None``: no
    budget; past it, the same brackets or :class:`BudgetExceeded` naming it; ``stats["memory_bytes"]``
    says what is held), ``table_bytes`` (the part of that memory in which the tree keeps whole
    next-token tables, so that no prefix is ever scored twice while they fit: tables up to 1024
    entries, or wider ones when the model's forward costs more than sorting its table; past it only
    heads are kept and each re-score of a prefix doubles how deep its head reaches; ``"auto"``:
    ``min(2 GiB, max_bytes / 4)``, ``None``: no limit), ``store`` (a folder keeping the tree on disk:
    reopening answers without forwards, deeper queries extend it, a crash loses at most the batch
    in flight; ``fingerprint`` identifies the model, by default a hash of its root table, one
    forward; ``store_readonly`` opens without the writer's lock; see ``docs/store.md``),
    ``progress`` (called with a dict of counters after every chunk of forwards, e.g. to draw a bar;
    also settable later as :attr:`progress`), ``batch_next_heads`` (an adapter that can cut rows
    where the model runs: ``(prefixes, floors) -> (counts, tokens, log_probs, widths)``, only the
    entries with ``log_prob >= floors[i]`` of each normalized table; the prefix tree is then filled
    through it instead of ``batch_next_logprobs``, so full rows never cross to numpy. See
    ``docs/core.md``; :class:`arenum.models.hf.CausalLMOracle` provides one).

    Beyond the exact budget (keyword-only): ``exact_limit`` caps the live prefixes (forwards) an exact
    answer may hold; a ``rank``, ``count``, ``threshold`` or ``cumulative`` query that needs more is
    answered by a Monte Carlo ESTIMATE instead (``exact=False``, ``method`` naming the estimator, a
    confidence interval at ``confidence``). ``None`` (default): no estimates; past ``max_prefixes`` /
    ``max_sequences`` answers are certified brackets or :class:`BudgetExceeded`, as without it. The
    first estimate deepens the exact head as far as ``exact_limit`` allows, then draws
    ``estimate_samples`` sequences from the tail beyond it (seeded by ``estimate_seed``), once; every
    later estimate reuses them. See :meth:`monte_carlo` and ``docs/estimates.md``.
    ``finite_state``: the model's :class:`arenum.step.finite_state.FiniteStateTables` (or a callable
    returning them, called when first needed) for certified brackets past the exact budget
    (``docs/certified.md``); ``NGramModel.enumerable()`` passes its own.

    >>> import math
    >>> def model(prefix):  # two tokens, p(0) = 0.75
    ...     return [(0, math.log(0.75)), (1, math.log(0.25))]
    >>> ar = AutoregressiveEnumerable(model, max_len=3)
    >>> ar.unrank(0)[0], ar.count(math.log(0.75**2 * 0.25)), ar.rank((1, 1, 1)).rank
    ((0, 0, 0), 4, 7)
    """

    def __init__(
        self,
        next_logprobs: Callable[[tuple], Any],
        max_len: int | None = None,
        eos: Any = None,
        max_depth: int = 1024,
        bin_width_bits: float = 1.0,
        oversample: int = 8,
        batch_next_logprobs: Callable[[list[tuple]], list[Any]] | None = None,
        batch_size: int = 256,
        count_mode: CountMode = "auto",
        branch_cap: int | None = None,
        batch_score_sequences: Callable[[list[tuple]], Any] | None = None,
        all_position_logprobs: Callable[[tuple], list[Any]] | None = None,
        *,
        norm_tol: float = NORM_TOL,
        keep_margin_bits: float = 1.0,
        max_prefixes: int | None = Limits.max_prefixes,
        max_sequences: int | None = Limits.max_sequences,
        max_bytes: int | str | None = "auto",
        table_bytes: int | str | None = "auto",
        store: Any = None,
        fingerprint: str | None = None,
        store_readonly: bool = False,
        progress: Callable[[dict], None] | None = None,
        batch_next_heads: Callable[[list[tuple], Any], Any] | None = None,
        exact_limit: int | None = None,
        estimate_samples: int = 10_000,
        estimate_seed: int | None = 0,
        confidence: float = 0.95,
        logprob_error: float | None = None,
        finite_state: FiniteStateTables | Callable[[], FiniteStateTables] | None = None,
    ) -> None:
        if not callable(next_logprobs):
            raise TypeError(f"next_logprobs must be callable, got {type(next_logprobs).__name__}")
        cfg = Settings.validate(
            max_len=max_len, eos=eos, max_depth=max_depth, bin_width_bits=bin_width_bits, oversample=oversample,
            batch_size=batch_size, count_mode=count_mode, branch_cap=branch_cap, norm_tol=norm_tol,
            keep_margin_bits=keep_margin_bits, max_prefixes=max_prefixes, max_sequences=max_sequences,
            max_bytes=max_bytes, table_bytes=table_bytes, exact_limit=exact_limit, estimate_samples=estimate_samples,
            estimate_seed=estimate_seed, confidence=confidence, logprob_error=logprob_error,
        )
        self._take_settings(cfg)
        self._oracle = StepOracle(
            next_logprobs,
            batch_next_logprobs=batch_next_logprobs,
            batch_size=self.batch_size,
            batch_score_sequences=batch_score_sequences,
            all_position_logprobs=all_position_logprobs,
            batch_next_heads=batch_next_heads,
            eos=eos,
            norm_tol=cfg.norm_tol,
        )
        self.support = (
            Support.terminating(eos, self._oracle.eos_id, self.cap, branch_cap=self.branch_cap)
            if self.terminating else Support.fixed(self.cap, branch_cap=self.branch_cap)
        )
        self._tree = PrefixTree(self._oracle, self.support, keep_margin_bits=cfg.keep_margin_bits,
                                table_bytes=cfg.table_bytes)
        self._lock = self._tree.lock
        if cfg.max_bytes is not None:  # memoized full tables may take a quarter of the budget
            self._oracle.cache_max_bytes = cfg.max_bytes // 4
        self.progress = progress
        self._seek: SeekIndex | None = None
        self._answers_obj: Answers | None = None
        if finite_state is not None and not (callable(finite_state) or isinstance(finite_state, FiniteStateTables)):
            raise TypeError(f"finite_state must be FiniteStateTables, a callable or None, got {type(finite_state).__name__}")
        self._finite_state, self._finite_state_ok = finite_state, False
        self._certified: dict[float, CertifiedCounter] = {}
        #: grid cell (bits) of the certified brackets the automatic regime gives past a cap
        self.certified_resolution_bits = DEFAULT_RESOLUTION_BITS
        self.store: TreeStore | None = open_store(store, self._tree, self.settings, fingerprint, store_readonly)
        """The :class:`~arenum.exact.store.TreeStore` keeping the tree on disk (``None``: memory only)."""

    def _take_settings(self, cfg: Settings) -> None:
        """The public attributes of the spec, read from the validated settings, and empty caches."""
        self.settings = cfg
        self.max_len, self.max_depth, self.eos, self.cap = cfg.max_len, cfg.max_depth, cfg.eos, cfg.cap
        self.terminating = cfg.terminating
        self.batch_size, self.branch_cap, self.count_mode = cfg.batch_size, cfg.branch_cap, cfg.count_mode
        self.quantizer = cfg.quantizer
        self.bin_width_bits, self.oversample = cfg.quantizer.bin_width_bits, cfg.quantizer.oversample
        self.exact_limit, self.confidence = cfg.exact_limit, cfg.confidence
        self.estimate_samples, self.estimate_seed = cfg.estimate_samples, cfg.estimate_seed
        self.logprob_error = cfg.logprob_error
        self._limits = cfg.limits()
        self._mc: dict[tuple, MonteCarloEstimator] = {}
        self._fs_sampler: FiniteStateSampler | None = None
        self._envelopes: dict[tuple, Any] = {}

    # ------------------------------------------------------------------ the store
    @locked
    def close(self) -> None:
        """Snapshot the store (if any) and release its lock. Optional: every commit is already in the
        store's journal, so a process that exits without closing loses nothing."""
        if self.store is not None:
            self.store.close()

    def __enter__(self) -> "AutoregressiveEnumerable":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ------------------------------------------------------------------ plumbing
    @property
    def oracle(self) -> StepOracle:
        """The validated, memoized step oracle over the model (every query's forwards go through it)."""
        return self._oracle

    @property
    def progress(self) -> Callable[[dict], None] | None:
        """Callback receiving ``{"prefixes", "forwards", "level", "level_done", "level_todo",
        "keep_bits"}`` after every chunk of forwards during a build (``None``: silent)."""
        return self._tree.progress

    @progress.setter
    def progress(self, fn: Callable[[dict], None] | None) -> None:
        if fn is not None and not callable(fn):
            raise TypeError(f"progress must be callable or None, got {type(fn).__name__}")
        self._tree.progress = fn

    @property
    @locked
    def stats(self) -> dict[str, Any]:
        """Counters: forwards (prefixes scored), model calls, refetches, live prefixes held by the
        tree, index builds, model/parse seconds, and memory held by the tree (bytes)."""
        d = self._oracle.stats.as_dict()
        d["tree_prefixes"] = self._tree.fetched_nodes
        d["tree_nodes"] = self._tree.n_nodes
        d["tree_bytes"] = self._tree.nbytes
        d["table_cache_bytes"] = self._oracle.cache_bytes
        seek = self.seek_index()
        d["built_bits"] = seek.built_bits
        d["index_builds"] = seek.builds
        d["index_seconds"] = seek.index_seconds
        d["indexed_sequences"] = seek.indexed
        d["memory_bytes"] = self._tree.memory_bytes() + INDEX_BYTES_PER_SEQUENCE * seek.indexed
        d["max_bytes"] = self.settings.max_bytes
        d["table_bytes"] = self.settings.table_bytes
        if self.store is not None:
            d["store_forwards"] = self.store.forwards
            d["store_replayed"] = self.store.replayed
        return d

    @property
    def _fixed_len(self) -> int | None:
        return None if self.terminating else self.max_len

    def _decode(self, ids: Iterable[int]) -> tuple:
        return self._oracle.tokens(ids)

    @locked
    def _table_ids(self, prefix_ids: tuple) -> tuple[np.ndarray, np.ndarray]:
        return self._oracle.table(self._decode(prefix_ids))

    def _in_declared_support(self, sequence: Sequence[Any]) -> bool:
        """Structural support check: length, and for a terminating model ``eos`` last and only last."""
        return self.support.contains(sequence)

    def _as_tuple(self, sequence: Any, name: str = "sequence") -> tuple:
        if isinstance(sequence, (str, bytes)) and not self._str_tokens():
            raise TypeError(
                f"{name} must be a sequence of tokens; got a {type(sequence).__name__} (encode it first)"
            )
        try:
            return tuple(sequence)
        except TypeError:
            raise TypeError(f"{name} must be a sequence of tokens, got {type(sequence).__name__}") from None

    def _str_tokens(self) -> bool:
        return self._oracle.int_mode is False

    def _canonical(self, sequence: Any) -> tuple[tuple, float]:
        seq = self._as_tuple(sequence)
        if not self._in_declared_support(seq):
            return seq, -math.inf
        return seq, self._tree.score(seq)

    # ------------------------------------------------------------------ scores
    @locked
    def log_density(self, sequence: Sequence[Any]) -> float:
        """Same as ``sum(log p(x_t | x_<t))`` left to right in float64; ``-inf`` off the declared support.

        Exact. Uses one teacher-forcing forward (``batch_score_sequences``) when some prefix of the sequence
        is not cached, else the cached tables; without a scorer, one forward per uncached prefix.
        """
        seq = self._as_tuple(sequence)
        if not self._in_declared_support(seq):
            return -math.inf
        o = self._oracle
        if o.has_scorer and not all(o.cached(seq[:t]) for t in range(len(seq))):
            return float(o.score_sequences([seq])[0])
        return self._tree.score(seq)

    @locked
    def score_sequences(self, sequences: Iterable[Sequence[Any]]) -> np.ndarray:
        """Same as ``[log_density(x) for x in sequences]`` as a float64 array ``(n,)``. Exact.

        With ``batch_score_sequences``: ONE call for all in-support sequences (cardinality checked).
        Otherwise the memoized per-prefix walk. Returns a float64 array ``(n,)``.
        """
        seqs = [self._as_tuple(s, "sequences[i]") for s in sequences]
        out = np.full(len(seqs), -math.inf)
        ok = [i for i, s in enumerate(seqs) if self._in_declared_support(s)]
        if not ok:
            return out
        if self._oracle.has_scorer:
            out[ok] = self._oracle.score_sequences([seqs[i] for i in ok])
        else:
            for i in ok:
                out[i] = self._tree.score(seqs[i])
        return out

    @locked
    def harvest(self, sequence: Sequence[Any]) -> int:
        """Cache the table at every prefix of ``sequence`` from one ``all_position_logprobs`` call.

        A no-op (returns 0) without it; returns the number of newly cached prefixes. The result is
        validated (one entry per position, every row) before anything is cached.
        """
        return self._oracle.harvest(self._as_tuple(sequence))

    @locked
    def structural_fine_bucket(self, sequence: Sequence[Any], quantizer: Quantizer) -> int:
        """Same as ``quantizer.fine_bucket(log_density(sequence))``: the fine bucket of the EXACT total
        bits. Costs what :meth:`log_density` costs; ``ValueError`` for a sequence of probability 0."""
        _, s = self._canonical(sequence)
        if s == -math.inf:
            raise ValueError(f"sequence {tuple(sequence)!r} has probability 0 under the model")
        return quantizer.fine_bucket(s)

    # ------------------------------------------------------------------ listing
    def enumerator(self) -> Iterator[tuple[tuple, float]]:
        """Same as ``iter(sorted(support, key=score, reverse=True))``, lazily. Exact (ties as in
        :meth:`unrank`). Cost: one forward per prefix popped (best-first listing)."""
        for ids, s in best_first(self._table_ids, self.support):
            yield self._decode(ids), s

    @locked
    def top_k(self, k: int) -> list[tuple[tuple, float]]:
        """Same as ``sorted(support, key=score, reverse=True)[:k]`` (the library's tie rule).

        Exact; ``k <= 0`` returns ``[]``. Read off the exact index (``slice(0, k)``), so every cap
        applies and the forwards are those of the live prefixes at the ``k``-th score, shared with
        every other query; :meth:`enumerator` lists lazily instead.
        """
        k = exact_int("k", k)
        if k <= 0:
            return []
        items = self.seek_index().slice(0, k)
        if self.branch_cap is not None:
            return SequenceList(items, exact=False, method="sub_support")
        return items

    def sampler(self, seed: int | None = None) -> ARSampler:
        """An ancestral sampler (``sample()``, ``sample_n(n)``, ``draw()``), seeded for replay."""
        seed = optional_exact_int("seed", seed, minimum=0)
        return ARSampler(self._oracle, self.support, seed=seed, lock=self._lock, finite_state=self._state_sampler)

    # ------------------------------------------------------------------ indexes
    @locked
    def seek_index(self, *, max_depth_bits: float = 4096.0) -> SeekIndex:
        """The persistent exact :class:`SeekIndex` (built lazily, deepened in place).

        A larger ``max_depth_bits`` than before raises the ceiling in place; a smaller one is a no-op.
        """
        mdb = finite_float("max_depth_bits", max_depth_bits)
        if mdb <= 0:
            raise ValueError(f"max_depth_bits must be > 0, got {max_depth_bits!r}")
        if self._seek is None:
            self._limits.max_depth_bits = mdb
            self._seek = SeekIndex(
                self._tree, quantizer=self.quantizer, limits=self._limits, count_mode=self.count_mode,
                decode=self._decode,
            )
        elif mdb > self._seek.max_depth_bits:
            self._seek.max_depth_bits = mdb
        return self._seek

    @property
    def answers(self) -> Answers:
        """The answers stage over :meth:`seek_index`: exact, else certified bracket, else estimate
        (estimates only with ``exact_limit``); see :class:`~arenum.answers.Answers`."""
        seek = self.seek_index()
        ans = self._answers_obj
        if ans is None or ans.seek is not seek:
            est = self._estimator_and_head if self.exact_limit is not None else None
            ans = self._answers_obj = Answers(seek, self.support, est, self.certified) if not self.logprob_error \
                else BoundedAnswers(seek, self.support, est, eps=self.logprob_error, steps=self.cap)
        return ans

    @locked
    def budget_index(self, budget_bits: float, max_depth_bits: float = 4096.0) -> SeekIndex:
        """The seek index, deepened to cover at least ``2**budget_bits`` sequences (or the support)."""
        b = finite_float("budget_bits", budget_bits)
        if b < 0:
            raise ValueError(f"budget_bits must be >= 0, got {budget_bits!r}")
        seek = self.seek_index(max_depth_bits=max_depth_bits)
        seek.ensure_count(int(math.ceil(2.0**b)))
        return seek

    @locked
    def quantized_count_index(self, quantizer: Quantizer, max_fine_bucket: int) -> CountIndex:
        """Count index over the support, by fine bucket of exact total bits, down to ``max_fine_bucket``.

        Shares the tree (and every forward) with the other queries. ``.truncated`` is True when
        sequences exist beyond the bucket bound.
        """
        if not isinstance(quantizer, Quantizer):
            raise TypeError(f"quantizer must be a Quantizer, got {type(quantizer).__name__}")
        mfb = exact_int("max_fine_bucket", max_fine_bucket, minimum=0)
        ci, truncated = build_count_index(self.seek_index(), quantizer, mfb, self.count_mode, self._decode)
        ci.truncated = truncated
        return ci

    # ------------------------------------------------------------------ counting
    @locked
    def count(self, min_log_prob: float) -> CountResult:
        """Same as ``sum(1 for x in support if score(x) >= min_log_prob)``, counted, not listed.

        Exact. Cost: one forward per live
        prefix at that budget. Returns a :class:`~arenum.results.CountResult`: an ``int`` with
        ``.exact``, ``.method``, ``.ci_lo``/``.ci_hi`` and, for an estimate, ``.stderr``,
        ``.confidence`` and ``.estimate`` (the unrounded value). With ``branch_cap`` this counts the
        capped sub-support (``method='bracket'``, ``ci_hi`` adds what the cap skipped; see
        :meth:`count_bracket`). Past a cap: the certified DP's bracket for a finite-state model
        (``method='certified'``), else a Monte Carlo estimate when ``exact_limit`` is set, else
        :class:`BudgetExceeded`.
        """
        return self.answers.count(finite_float("min_log_prob", min_log_prob, allow_neg_inf=True))

    @locked
    def count_bracket(self, min_log_prob: float) -> CountBracket:
        """Same as ``count(min_log_prob)`` as a certified bracket: ``lo <= #{x : s(x) >= t} <= hi``.

        Never raises for a cap; cost as :meth:`count`.

        ``lo`` counts the kept sub-support exactly; ``hi`` adds the bound on what ``branch_cap``
        skipped. Past a resource cap, ``lo`` is the count at the deepest budget built and ``hi`` the
        mass bound ``exp(-min_log_prob)`` (each such sequence has probability ``>= exp(min_log_prob)``).
        """
        return self.answers.count_bracket(finite_float("min_log_prob", min_log_prob, allow_neg_inf=True))

    @locked
    def unrank(self, i: int) -> tuple[tuple, float]:
        """Same as ``sorted(support, key=score, reverse=True)[i]`` (0-based): ``(sequence, log_prob)``.

        Ties: shorter first, then table positions, so ``rank(unrank(i)) == i`` whenever there are no ties. Exact. Cost: one forward
        per live prefix at the budget of the ``i``-th score. ``IndexError`` past the support. With
        ``branch_cap`` the position is in the capped sub-support, flagged: a
        :class:`~arenum.results.SequenceResult` with ``exact=False``, ``method='sub_support'`` (as
        ``slice`` and ``top_k`` return a :class:`~arenum.results.SequenceList`).
        """
        i = exact_int("i", i)
        if i < 0:
            raise IndexError(f"i must be >= 0, got {i}")
        seq, lp = self.seek_index().unrank(i)
        if self.branch_cap is not None or self.logprob_error:
            return SequenceResult(seq, lp, exact=False, method="sub_support" if self.branch_cap else "logprob_error")
        return seq, lp

    @locked
    def slice(self, start: int, k: int) -> list[tuple[tuple, float]]:
        """Same as ``sorted(support, key=score, reverse=True)[start : start + k]``.

        Exact; fewer items at the end of the support. Cost: one forward per live prefix at the budget
        of the last item's score.
        """
        items = self.seek_index().slice(start, k)
        if self.branch_cap is not None:
            return SequenceList(items, exact=False, method="sub_support")
        return items

    @locked
    def threshold(self, rank: int) -> ThresholdResult:
        """Same as ``sorted(scores, reverse=True)[rank - 1]``: the top-``rank`` boundary (1-based).

        Exact, cost as ``unrank(rank - 1)``: ``count(threshold(k)) >= k`` and ``count`` of any larger value is ``< k``. Returns a
        :class:`~arenum.results.ThresholdResult` (a ``float`` with ``.exact``, ``.method``,
        ``.ci_lo``/``.ci_hi``). With ``branch_cap`` it is the sub-support's threshold, a lower bound
        (``method='bracket'``). Past a cap: the certified bracket of a finite-state model, else a Monte
        Carlo estimate when ``exact_limit`` is set (the count estimate inverted), else :class:`BudgetExceeded`.
        """
        return self.answers.threshold(exact_int("rank", rank, minimum=1))

    @locked
    def mass_above(self, min_log_prob: float) -> MassBracket:
        """Same as ``sum(exp(score(x)) for x in support if score(x) >= min_log_prob)``, bracketed.

        Cost as :meth:`count`. Exact up to float rounding (``lower <= mass <= upper``, relative width ~ ``n * 2**-53``).
        With ``branch_cap`` the upper end adds the skipped mass; past a resource cap the certified DP's
        bracket for a finite-state model, else ``[mass built, 1]``.
        """
        return self.answers.mass_above(finite_float("min_log_prob", min_log_prob, allow_neg_inf=True))

    # ------------------------------------------------------------------ ranks
    @locked
    def rank(self, sequence: Sequence[Any]) -> DensityRankResult:
        """Same as ``sum(1 for x in support if score(x) > score(sequence))`` (the rank, 0-based), with the
        cumulative mass ``P(score(X) >= score(sequence))``.

        Exact when the budget ``-log_density(sequence)`` bits is affordable: one forward per live
        prefix at that budget. Past a resource cap: for a finite-state model the certified DP's
        bracket (``method='certified'``, ``docs/certified.md``); else a Monte Carlo estimate when ``exact_limit`` is
        set (``method`` names the estimator; ``rank_lo``/``rank_hi`` and ``cumulative_lo``/
        ``cumulative_hi`` are intervals at ``confidence``), else a certified bracket
        (``method='bracket'``).
        ``ValueError`` if the sequence has probability 0 under the model.
        """
        seq, s = self._canonical(sequence)
        if s == -math.inf:
            why = "is outside the declared support" if not self._in_declared_support(seq) else "has probability 0"
            raise ValueError(f"sequence {_short(seq)} {why}; its rank is undefined")
        return self.answers.rank(s)

    def cumulative(self, sequence: Sequence[Any]) -> DensityRankResult:
        """Same as ``sum(exp(score(x)) for x in support if score(x) >= score(sequence))``: the record of
        :meth:`rank`, read ``.cumulative``. Guarantee and cost as :meth:`rank`."""
        return self.rank(sequence)

    # ------------------------------------------------------------------ estimates
    @locked
    def nucleus_size(self, p: float) -> CountDPTopPResult:
        """Same as ``min(k for k in range(1, n + 1) if sum(exp(s) for s in sorted_scores[:k]) >= p)``.

        Not listed: one forward per live prefix at the budget of that head. Exact up to float rounding of the masses (``size_lo <= size <= size_hi``, usually equal).
        Deepens until the built mass reaches ``p``; past a cap the result says ``truncated``.
        """
        p = finite_float("p", p)
        if not 0 < p <= 1:
            raise ValueError(f"p must be in (0, 1], got {p!r}")
        return self.answers.nucleus_size(p)

    @locked
    def seek(self, i: int) -> SequenceResult:
        """Same as ``sorted(support, key=score, reverse=True)[i]``: :meth:`unrank` as a record with
        ``.value`` (the sequence), ``.rank`` (``i``) and ``.log_prob``, the seed system's rank lookup.

        Exact, cost as :meth:`unrank`; ``IndexError`` past the support. The mass query is :meth:`seek_mass`.
        """
        i = exact_int("i", i)
        r = self.unrank(i)
        return SequenceResult(r[0], r[1], exact=getattr(r, "exact", True), method=getattr(r, "method", "exact"),
                              rank=i)

    @locked
    def seek_mass(self, target: float) -> SeekResult:
        """Same as ``unrank(nucleus_size(target).size - 1)`` with its masses: the sequence at which the
        descending cumulative mass first reaches ``target``.

        Cost as :meth:`nucleus_size`; ``rank`` is ``nucleus_size(target).size - 1``; exact up to float rounding.
        """
        r = self.nucleus_size(target)
        if r.truncated:
            return SeekResult(rank=r.size_lo, sequence=None, log_prob=r.threshold, target=r.p,
                              mass_lo=r.mass_lo, mass_hi=r.mass_hi, exact=False, truncated=True)
        seq, lp = self.unrank(r.size - 1)
        return SeekResult(rank=r.size - 1, sequence=seq, log_prob=lp, target=r.p, mass_lo=r.mass_lo,
                          mass_hi=r.mass_hi, exact=r.exact)

    @locked
    def _check(self) -> None:
        """Assert the invariants of the tree and index (for tests)."""
        self._tree._check()
        if self._seek is not None:
            self._seek._check()


def count_budget_index(enumerable: AutoregressiveEnumerable, budget_bits: float,
                       max_depth_bits: float = 4096.0) -> SeekIndex:
    """The exact :class:`SeekIndex` of ``enumerable`` covering at least ``2**budget_bits`` sequences."""
    if not isinstance(enumerable, AutoregressiveEnumerable):
        raise TypeError(f"enumerable must be an AutoregressiveEnumerable, got {type(enumerable).__name__}")
    return enumerable.budget_index(budget_bits, max_depth_bits)


def _short(x: Any, n: int = 60) -> str:
    r = repr(x)
    return r if len(r) <= n else r[: n - 3] + "..."
