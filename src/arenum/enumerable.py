"""``AutoregressiveEnumerable``: an autoregressive model as a countable, rankable, unrankable object.

A sequence's score is ``s(x) = sum_t log p(x_t | x_<t)``, summed left to right in float64.
Support: fixed-length (``max_len``: every length-``max_len`` sequence) or terminating (``eos``:
sequences that end in ``eos``, ``eos`` nowhere earlier, length ``<= max_len`` if given, else
``<= max_depth``). Order: descending score; ties shorter first, then lexicographically by table
positions (each step table sorted by descending log-prob, ties in the model's order).

Every query is EXACT; where a cap prevents it the result is a certified bracket (or, if allowed,
an estimate) that says so. Cost: one forward per live prefix at the budget the answer needs.

One query's path: this facade (validates each argument and takes the build lock, once) ->
:class:`~arenum.answers.Answers` (decides the regime; holds the
:class:`~arenum.beyond.regime.BeyondExact`: draws, envelopes, certified DPs) ->
:class:`~arenum.exact.seek.SeekIndex` (the budget) -> :class:`~arenum.exact.tree.PrefixTree` ->
:class:`~arenum.step.oracle.StepOracle` -> the model's callback.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Sequence

import numpy as np

from ._guard import locked
from ._validate import CountMode, exact_int, finite_float, optional_exact_int, probability, short_repr
from .answers import Answers
from .bounded import BoundedAnswers
from .exact import best_first, listing, CountIndex, build_count_index, Quantizer, Limits, SeekIndex, TreeStore, open_store, PrefixTree
from .beyond import (BeyondExact, CertifiedCounter, ExactHead, INTERVALS, Interval, MonteCarloEstimator,
                     FiniteStateSampler, ARSampler)
from .step import FiniteStateTables, NORM_TOL, StepOracle, constrain_finite_state, constraint_identity, make_oracle
from .results import (CountBracket, CountDPTopPResult, CountResult, DensityRankResult, MassBracket, SeekResult,
                      SequenceList, SequenceResult, ThresholdResult)
from .settings import Settings
from .support import Support, why_zero

if TYPE_CHECKING:  # pragma: no cover
    from .beyond import AREnvelopeIndex, LatticeEnvelopeIndex

__all__ = ["AutoregressiveEnumerable", "count_budget_index"]


def _setting(name: str) -> property:
    """A read-only attribute read from :attr:`AutoregressiveEnumerable.settings` (its one source)."""
    return property(lambda self: getattr(self.settings, name), doc=f"``settings.{name}`` (read-only).")


class AutoregressiveEnumerable:
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

    Keyword-only: ``norm_tol`` (accepted ``|sum p - 1|``, default ``2e-2``; accepted rows are
    renormalized, counted in ``stats["renormalized_rows"]``); ``logprob_error`` (``eps``: the step
    log-probs are within ``eps`` nats of a TRUE model's, e.g. a bf16 run; every count, threshold, rank
    and mass becomes a certified bracket for the true model, ``method='logprob_error'``, see
    :mod:`arenum.bounded`); ``keep_margin_bits`` (stored table heads reach this many bits below a
    build's budget; at least 6 for tables wider than 1,024 entries); ``max_prefixes`` / ``max_sequences`` (caps on an exact build; beyond them answers
    become brackets or raise :class:`BudgetExceeded`); ``max_bytes`` (one memory budget in bytes for the
    tree, the index and the memoized full tables, which take at most a quarter; ``"auto"``: half the
    physical memory, ``None``: none; past it the same brackets or :class:`BudgetExceeded` naming it;
    ``stats["memory_bytes"]`` says what is held); ``table_bytes`` (the part of it in which whole
    next-token tables are kept, so no prefix is scored twice while they fit: tables up to 1024 entries,
    or wider when a forward (the model's own time, timed on rounds that asked for heads) costs more
    than sorting one; past it only heads are kept and each re-score
    doubles a head's depth; ``"auto"``: ``min(2 GiB, max_bytes / 4)``, ``None``: no limit); ``store``
    (a folder keeping the tree on disk: reopening answers without forwards, a crash loses at most the
    batch in flight; ``fingerprint`` identifies the model, by default a hash of its root table;
    ``store_readonly`` opens without the writer's lock; ``docs/store.md``); ``progress`` (called with a
    dict of counters after every chunk of forwards, every block of a certified DP (``phase="certified"``)
    and every level of Monte Carlo draws (``phase="monte carlo"``); settable later); ``batch_next_heads``
    (``(prefixes, floors) -> (counts, tokens, log_probs, widths)``: only the entries with ``log_prob >=
    floors[i]`` of each normalized table, cut where the model runs; the tree is then filled through it,
    so full rows never cross to numpy; :class:`arenum.models.hf.CausalLMOracle` provides one).

    Beyond the exact budget: ``exact_limit`` caps the live prefixes (forwards) an exact answer may
    hold; a ``rank``, ``count``, ``threshold`` or ``cumulative`` that needs more is a Monte Carlo
    ESTIMATE (``exact=False``, ``method`` naming the estimator, an interval at ``confidence``); the
    first deepens the exact head as far as ``exact_limit`` allows, then draws ``estimate_samples``
    sequences beyond it (seed ``estimate_seed``) once, for every later estimate (:meth:`monte_carlo`,
    ``docs/estimates.md``). ``None`` (default): no estimates. ``finite_state``: the model's
    :class:`arenum.step.finite_state.FiniteStateTables` (or a callable returning them) for certified
    brackets past the exact budget (``docs/certified.md``); ``NGramModel.enumerable()`` passes its own.
    ``constraint``: an :class:`arenum.Constraint` (automaton over tokens): the support is what it accepts,
    scores stay the model's, every query answers on it (``docs/constraints.md``).

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
        constraint: Any = None,
    ) -> None:
        if not callable(next_logprobs):
            raise TypeError(f"next_logprobs must be callable, got {type(next_logprobs).__name__}")
        cfg = Settings.validate(
            max_len=max_len, eos=eos, max_depth=max_depth, bin_width_bits=bin_width_bits, oversample=oversample,
            batch_size=batch_size, count_mode=count_mode, branch_cap=branch_cap, norm_tol=norm_tol,
            keep_margin_bits=keep_margin_bits, max_prefixes=max_prefixes, max_sequences=max_sequences,
            max_bytes=max_bytes, table_bytes=table_bytes, exact_limit=exact_limit, estimate_samples=estimate_samples,
            estimate_seed=estimate_seed, confidence=confidence, logprob_error=logprob_error,
            constraint=None if constraint is None else constraint_identity(constraint),
        )
        self._take_settings(cfg)
        self.constraint = constraint  # the arenum.Constraint restricting the support (None: none)
        self._oracle = make_oracle(
            next_logprobs, constraint, cap=cfg.cap, terminating=cfg.terminating,
            batch_next_logprobs=batch_next_logprobs,
            batch_size=cfg.batch_size,
            batch_score_sequences=batch_score_sequences,
            all_position_logprobs=all_position_logprobs,
            batch_next_heads=batch_next_heads,
            eos=eos,
            norm_tol=cfg.norm_tol,
        )
        self.support = (
            Support.terminating(eos, self._oracle.eos_id, cfg.cap, branch_cap=cfg.branch_cap, constraint=constraint)
            if cfg.terminating else Support.fixed(cfg.cap, branch_cap=cfg.branch_cap, constraint=constraint))
        finite_state = constrain_finite_state(finite_state, constraint, terminating=cfg.terminating, norm_tol=cfg.norm_tol)
        self._tree = PrefixTree(self._oracle, self.support, keep_margin_bits=cfg.keep_margin_bits,
                                table_bytes=cfg.table_bytes)
        self._lock = self._tree.lock
        if cfg.max_bytes is not None:  # memoized full tables may take a quarter of the budget
            self._oracle.cache_max_bytes = cfg.max_bytes // 4
        self.progress = progress
        self._beyond = BeyondExact(self._oracle, self.support, self._tree, cfg, finite_state=finite_state,
                                   lock=self._lock)
        self.store: TreeStore | None = open_store(store, self._tree, self.settings, fingerprint, store_readonly)
        """The :class:`~arenum.exact.store.TreeStore` keeping the tree on disk (``None``: memory only)."""
        self._beyond.keep_in = None if self.store is None else (self.store.path, self.store.readonly)

    def _take_settings(self, cfg: Settings) -> None:
        """Hold the validated settings (every public setting attribute reads them) and fresh caps;
        no index and no answers yet."""
        self.settings = cfg
        """The validated :class:`~arenum.settings.Settings`: the one source of every setting."""
        self._limits = cfg.limits()
        self._seek: SeekIndex | None = None
        self._answers_cache: Answers | None = None

    # the settings as read-only attributes, each read from ``settings``
    max_len, max_depth, eos, cap, terminating = map(_setting, ("max_len", "max_depth", "eos", "cap", "terminating"))
    batch_size, branch_cap, count_mode, quantizer = map(_setting, ("batch_size", "branch_cap", "count_mode", "quantizer"))
    exact_limit, confidence, estimate_samples, estimate_seed, logprob_error = map(
        _setting, ("exact_limit", "confidence", "estimate_samples", "estimate_seed", "logprob_error"))
    bin_width_bits = property(lambda self: self.settings.quantizer.bin_width_bits, doc="The quantizer's bin width.")
    oversample = property(lambda self: self.settings.quantizer.oversample, doc="The quantizer's oversampling.")

    # ------------------------------------------------------------------ the store
    @locked
    def close(self, *, cut_tables: bool = True) -> None:
        """Snapshot the store (if any) and release its lock (optional: every commit is in its journal).
        ``cut_tables=False`` (``with`` when its block raised) keeps every table, for an interrupted build
        a later run resumes; else a cheap model's are cut to the budget built (``docs/store.md``)."""
        if self.store is not None:
            self.store.close(cut=cut_tables)

    def __enter__(self) -> "AutoregressiveEnumerable":
        return self

    def __exit__(self, et: Any, ev: Any, tb: Any) -> None:
        self.close(cut_tables=et is None)

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
        d, t, seek = self._oracle.stats.as_dict(), self._tree, self._seek_at()
        d.update(tree_prefixes=t.fetched_nodes, tree_nodes=t.n_nodes, tree_bytes=t.nbytes,
                 table_cache_bytes=self._oracle.cache_bytes, built_bits=seek.built_bits, index_builds=seek.builds,
                 index_seconds=seek.index_seconds, indexed_sequences=seek.indexed, memory_bytes=seek.memory_bytes,
                 max_bytes=self.settings.max_bytes, table_bytes=self.settings.table_bytes)
        if self.store is not None:
            d.update(store_forwards=self.store.forwards, store_replayed=self.store.replayed)
        return d

    def _decode(self, ids: Iterable[int]) -> tuple:
        return self._oracle.tokens(ids)

    def _as_tuple(self, sequence: Any, name: str = "sequence") -> tuple:
        if isinstance(sequence, (str, bytes)) and not self._str_tokens():
            raise TypeError(f"{name} must be a sequence of tokens; got a {type(sequence).__name__} (encode it first)")
        try:
            return tuple(sequence)
        except TypeError:
            raise TypeError(f"{name} must be a sequence of tokens, got {type(sequence).__name__}") from None

    def _str_tokens(self) -> bool:
        return self._oracle.int_mode is False

    def _canonical(self, sequence: Any) -> tuple[tuple, float]:
        seq = self._as_tuple(sequence)
        if not self.support.contains(seq):
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
        if not self.support.contains(seq):
            return -math.inf
        o = self._oracle
        if o.has_scorer and not all(o.cached(seq[:t]) for t in range(len(seq) - 1, -1, -1)):  # longest first
            return float(o.score_sequences([seq])[0])
        return self._tree.score(seq)

    @locked
    def score_sequences(self, sequences: Iterable[Sequence[Any]]) -> np.ndarray:
        """Same as ``[log_density(x) for x in sequences]`` as a float64 array ``(n,)``. Exact.

        With ``batch_score_sequences``: ONE call for all in-support sequences (cardinality checked).
        Otherwise the memoized per-prefix walk."""
        seqs = [self._as_tuple(s, "sequences[i]") for s in sequences]
        out = np.full(len(seqs), -math.inf)
        ok = [i for i, s in enumerate(seqs) if self.support.contains(s)]
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
        """Cache the table at every prefix of ``sequence`` from one ``all_position_logprobs`` call; the number
        of newly cached prefixes (0 without it). Validated (one entry per position, every row) before caching."""
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
        :meth:`unrank`). Reads :meth:`slice` in chunks of 64 items doubling up to 65,536: the forwards
        and memory of the items read so far; best-first past a cap (:func:`arenum.exact.listing`)."""
        rest = lambda: ((self._decode(ids), s) for ids, s in best_first(self._table_of_ids, self.support))  # noqa: E731
        return listing(self.slice, lambda: self.seek_index().more_below_floor, rest)

    def _table_of_ids(self, prefix_ids: tuple) -> tuple[np.ndarray, np.ndarray]:
        with self._lock:
            return self._oracle.table(self._decode(prefix_ids))

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
        return self._items(0, k)

    def sampler(self, seed: int | None = None) -> ARSampler:
        """An ancestral sampler (``sample()``, ``sample_n(n)``, ``draw()``), seeded for replay."""
        seed = optional_exact_int("seed", seed, minimum=0)
        return ARSampler(self._oracle, self.support, seed=seed, lock=self._lock,
                         finite_state=self._beyond.state_sampler)

    # ------------------------------------------------------------------ indexes
    @locked
    def seek_index(self, *, max_depth_bits: float = 4096.0) -> SeekIndex:
        """The persistent exact :class:`SeekIndex` (built lazily, deepened in place). A larger
        ``max_depth_bits`` than before raises the ceiling in place; a smaller one is a no-op."""
        mdb = finite_float("max_depth_bits", max_depth_bits)
        if mdb <= 0:
            raise ValueError(f"max_depth_bits must be > 0, got {max_depth_bits!r}")
        return self._seek_at(mdb)

    def _seek_at(self, max_depth_bits: float = 4096.0) -> SeekIndex:
        """:meth:`seek_index` for a valid ``max_depth_bits``, the caller holding the lock."""
        if self._seek is None:
            self._limits.max_depth_bits = max_depth_bits
            self._seek = self._new_seek()
        elif max_depth_bits > self._seek.max_depth_bits:
            self._seek.max_depth_bits = max_depth_bits
        return self._seek

    def _new_seek(self) -> SeekIndex:
        return SeekIndex(self._tree, quantizer=self.quantizer, limits=self._limits, count_mode=self.count_mode,
                         decode=self._decode)

    @property
    @locked
    def answers(self) -> Answers:
        """The answers stage over :meth:`seek_index`: exact, else certified bracket, else estimate
        (estimates only with ``exact_limit``); see :class:`~arenum.answers.Answers`."""
        return self._answers()

    def _answers(self) -> Answers:
        """:attr:`answers`, made at the first query (the caller holds the lock)."""
        if self._answers_cache is None:
            seek, cfg = self._seek_at(), self.settings
            estimates = cfg.exact_limit is not None
            self._answers_cache = (
                Answers(seek, self.support, self._beyond, estimates=estimates) if not cfg.logprob_error
                else BoundedAnswers(seek, self.support, self._beyond, estimates=estimates, eps=cfg.logprob_error,
                                    steps=cfg.cap))
        return self._answers_cache

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
        ci, truncated = build_count_index(self._seek_at(), quantizer, mfb, self.count_mode, self._decode)
        ci.truncated = truncated
        return ci

    # ------------------------------------------------------------------ counting
    @locked
    def count(self, min_log_prob: float) -> CountResult:
        """Same as ``sum(1 for x in support if score(x) >= min_log_prob)``, counted, not listed.

        Exact. Cost: one forward per live prefix at that budget. Returns a
        :class:`~arenum.results.CountResult`: an ``int`` with ``.exact``, ``.method``, ``.ci_lo``/``.ci_hi``
        and, for an estimate, ``.stderr``, ``.confidence`` and ``.estimate`` (the unrounded value). With
        ``branch_cap`` this counts the capped sub-support (``method='bracket'``, ``ci_hi`` adds what the
        cap skipped). Past a cap: the certified DP's bracket for a finite-state model
        (``method='certified'``), else a Monte Carlo estimate when ``exact_limit`` is set, else
        :class:`BudgetExceeded`.
        """
        return self._answers().count(finite_float("min_log_prob", min_log_prob, allow_neg_inf=True))

    @locked
    def count_bracket(self, min_log_prob: float) -> CountBracket:
        """Same as ``count(min_log_prob)`` as a certified bracket: ``lo <= #{x : s(x) >= t} <= hi``.

        Never raises for a cap; cost as :meth:`count`. ``lo`` counts the kept sub-support exactly; ``hi`` adds the bound on what ``branch_cap``
        skipped. Past a resource cap, a finite-state model's bracket is the certified DP's
        (``method='certified'``, ``docs/certified.md``); otherwise ``lo`` is the count at the deepest
        budget built and ``hi`` the mass bound ``exp(-min_log_prob)`` (each such sequence has
        probability ``>= exp(min_log_prob)``), ``method='bracket'``.
        """
        return self._answers().count_bracket(finite_float("min_log_prob", min_log_prob, allow_neg_inf=True))

    @locked
    def unrank(self, i: int) -> tuple[tuple, float]:
        """Same as ``sorted(support, key=score, reverse=True)[i]`` (0-based): ``(sequence, log_prob)``.

        Ties: shorter first, then table positions, so ``rank(unrank(i)) == i`` whenever there are no ties. Exact. Cost: one forward
        per live prefix at the budget of the ``i``-th score. ``IndexError`` past the support. With
        ``branch_cap`` the position is in the capped sub-support, flagged: a
        :class:`~arenum.results.SequenceResult` with ``exact=False``, ``method='sub_support'`` (as
        ``slice`` and ``top_k`` return a :class:`~arenum.results.SequenceList`).
        """
        return self._position(exact_int("i", i))

    def _position(self, i: int) -> tuple[tuple, float]:
        """:meth:`unrank` of a valid ``i``, the caller holding the lock."""
        if i < 0:
            raise IndexError(f"i must be >= 0, got {i}")
        self._seek_at()
        seq, lp = self._answers().unrank(i)
        if self.branch_cap is not None or self.logprob_error:
            return SequenceResult(seq, lp, exact=False, method="sub_support" if self.branch_cap else "logprob_error")
        return seq, lp

    @locked
    def slice(self, start: int, k: int) -> list[tuple[tuple, float]]:
        """Same as ``sorted(support, key=score, reverse=True)[start : start + k]``.

        Exact; fewer items at the end of the support. Cost: one forward per live prefix at the budget
        of the last item's score.
        """
        return self._items(exact_int("start", start, minimum=0), exact_int("k", k, minimum=0))

    def _items(self, start: int, k: int) -> list[tuple[tuple, float]]:
        """:meth:`slice` of valid arguments, the caller holding the lock."""
        items = self._seek_at().slice(start, k)
        if self.branch_cap is not None or self.logprob_error:
            return SequenceList(items, exact=False, method="sub_support" if self.branch_cap else "logprob_error")
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
        return self._answers().threshold(exact_int("rank", rank, minimum=1))

    @locked
    def mass_above(self, min_log_prob: float) -> MassBracket:
        """Same as ``sum(exp(score(x)) for x in support if score(x) >= min_log_prob)``, bracketed.

        Cost as :meth:`count`. Exact up to float rounding (``lower <= mass <= upper``, relative width ~ ``n * 2**-53``).
        With ``branch_cap`` the upper end adds the skipped mass; past a resource cap the certified DP's
        bracket for a finite-state model, else ``[mass built, 1]``.
        """
        return self._answers().mass_above(finite_float("min_log_prob", min_log_prob, allow_neg_inf=True))

    # ------------------------------------------------------------------ ranks
    @locked
    def rank(self, sequence: Sequence[Any]) -> DensityRankResult:
        """Same as ``sum(1 for x in support if score(x) > score(sequence))`` (the rank, 0-based), with the
        cumulative mass ``P(score(X) >= score(sequence))``.

        Exact when the budget ``-log_density(sequence)`` bits is affordable: one forward per live prefix at that budget
        (a finite-state model: up to :attr:`rank_exact_limit` of them). Past a cap: a finite-state model's certified
        DP's bracket (``method='certified'``, ``docs/certified.md``; ``cumulative`` computed when read); else a Monte
        Carlo estimate when ``exact_limit`` is set (``method`` names the estimator, the brackets are intervals at
        ``confidence``), else a certified bracket (``method='bracket'``). ``ValueError`` at probability 0."""
        seq, s = self._canonical(sequence)
        if s == -math.inf:
            raise ValueError(f"sequence {short_repr(seq)} {why_zero(seq, self.support, self._tree)}; its rank is undefined")
        return self._answers().rank(s)

    @locked
    def ranks(self, sequences: Iterable[Sequence[Any]], *, deepen: bool = False) -> list[DensityRankResult]:
        """:meth:`rank` of many sequences, scored in one call. ``deepen=False``: no exact build: exact where the
        index built so far reaches, past it a finite-state model's certified brackets from one DP (made once to
        the deepest: ``CertifiedCounter.prepare_ranks``), else as :meth:`rank`; ``deepen=True``: each as :meth:`rank`."""
        if not hasattr(sequences, "__iter__"):
            raise TypeError(f"sequences must be an iterable of sequences, got {type(sequences).__name__}")
        seqs = [self._as_tuple(s, "sequences[i]") for s in sequences]
        sc = self.score_sequences(seqs)
        for i in np.flatnonzero(sc == -math.inf)[:1]:
            self.rank(seqs[i])  # raises its ValueError
        return self._answers().ranks(sc.tolist(), deepen=deepen)

    def cumulative(self, sequence: Sequence[Any]) -> DensityRankResult:
        """Same as ``sum(exp(score(x)) for x in support if score(x) >= score(sequence))``: the record of
        :meth:`rank`, read ``.cumulative``. Guarantee and cost as :meth:`rank`."""
        return self.rank(sequence)

    # ------------------------------------------------------------------ estimates
    @locked
    def nucleus_size(self, p: float) -> CountDPTopPResult:
        """Same as ``min(k for k in range(1, n + 1) if sum(exp(s) for s in sorted_scores[:k]) >= p)``. Not listed:
        one forward per live prefix at the budget of that head. Exact up to float rounding of the masses (``size_lo
        <= size <= size_hi``, usually equal). Deepens until the built mass reaches ``p``; past a cap: ``truncated``."""
        return self._answers().nucleus_size(probability("p", p))

    @locked
    def seek(self, i: int) -> SequenceResult:
        """Same as ``sorted(support, key=score, reverse=True)[i]``: :meth:`unrank` as a record with ``.value`` (the
        sequence), ``.rank`` (``i``) and ``.log_prob``. Exact, cost as :meth:`unrank`; ``IndexError`` past the
        support. The mass query is :meth:`seek_mass`."""
        i = exact_int("i", i)
        r = self._position(i)
        return SequenceResult(r[0], r[1], exact=getattr(r, "exact", True), method=getattr(r, "method", "exact"),
                              rank=i)

    @locked
    def seek_mass(self, target: float) -> SeekResult:
        """Same as ``unrank(nucleus_size(target).size - 1)`` with its masses: the sequence at which the descending
        cumulative mass first reaches ``target``. Cost as :meth:`nucleus_size`; ``rank`` is
        ``nucleus_size(target).size_lo - 1`` (``size - 1`` when exact); exact up to float rounding."""
        r = self._answers().nucleus_size(probability("target", target))
        if r.truncated:  # the sequence lies past what was built: its rank at least size_lo - 1, its score unknown
            return SeekResult(rank=max(0, r.size_lo - 1), sequence=None, log_prob=None, target=r.p,
                              mass_lo=r.mass_lo, mass_hi=r.mass_hi, exact=False, truncated=True)
        pos = self._position(r.size_lo - 1)  # the shortest head that may hold target (exact: the one); not
        seq, lp = pos                        # exact under branch_cap or logprob_error: the sub-support's
        return SeekResult(rank=r.size_lo - 1, sequence=seq, log_prob=lp, target=r.p, mass_lo=r.mass_lo,
                          mass_hi=r.mass_hi, exact=r.exact and getattr(pos, "exact", True))

    # ------------------------------------------------------------------ past the exact budget
    @locked
    def monte_carlo(self, n: int | None = None, *, seed: int | None = -1, head: bool = True,
                    interval: Interval = "bernstein") -> MonteCarloEstimator:
        """A :class:`~arenum.beyond.estimate.MonteCarloEstimator` over ``n`` draws (default
        ``estimate_samples``, seed ``estimate_seed``), drawn once and cached per arguments.

        ``head=True``: the draws avoid the exact index built so far (none if nothing is built), and
        every estimate adds that head's exact part (pass the current head with :meth:`exact_head`).
        ``head=False``: plain ancestral draws. Cost: at most ``n`` forwards per level of the draws, one
        batched call per level. Estimates only: ``.count(t)``, ``.rank(log_prob)``, ``.mass_above(t)``,
        ``.threshold(k)``.
        """
        n = self.estimate_samples if n is None else exact_int("n", n, minimum=2)
        seed = self.estimate_seed if seed == -1 else optional_exact_int("seed", seed, minimum=0)
        if interval not in INTERVALS:
            raise ValueError(f"interval must be one of {INTERVALS}, got {interval!r}")
        return self._answers().monte_carlo((n, seed, bool(head), interval))

    @locked
    def envelope_index(self, *, n_paths: int = 64, seed: int | None = 0, budget_bits: float = 64.0,
                       calibration_sequences: Sequence[Sequence[Any]] | None = None,
                       cluster_fn: Callable[[Any], Any] | None = None,
                       n_clusters: int | None = None) -> "AREnvelopeIndex | LatticeEnvelopeIndex":
        """Approximate count / threshold / rank / unrank beyond the exact tree's reach, from per-depth
        step tables pooled over ``n_paths`` sampled contexts (or the prefixes of ``calibration_sequences``):
        an :class:`~arenum.beyond.envelope.AREnvelopeIndex`; with ``cluster_fn`` or ``n_clusters``, per
        (depth, cluster of the last token): a :class:`~arenum.beyond.lattice.LatticeEnvelopeIndex`.

        ESTIMATES (``method='envelope'``, no interval), exact for models whose step table depends only
        on the depth (the lattice: and the last token's cluster); ``unrank`` returns real sequences with
        exact log-probs. Cost: at most ``n_paths`` forwards per depth (per cluster) to build, one per
        step per ``unrank``. Cached per arguments; a larger ``budget_bits`` deepens the cached one.
        """
        return self._beyond.envelope_index(n_paths=n_paths, seed=seed, budget_bits=budget_bits,
                                           calibration_sequences=calibration_sequences, cluster_fn=cluster_fn,
                                           n_clusters=n_clusters)

    @locked
    def exact_head(self) -> ExactHead | None:
        """The exact index built so far as an :class:`~arenum.beyond.estimate.ExactHead` (every sequence with
        score ``>= T`` counted exactly); ``None`` when nothing is built or with ``branch_cap`` (whose
        index is a sub-support, not a head of the support)."""
        return self._answers().exact_head()

    @locked
    def certified(self, resolution_bits: float | None = None) -> CertifiedCounter | None:
        """The :class:`~arenum.beyond.certified.CertifiedCounter` of a finite-state model (``finite_state=``),
        built lazily and cached per resolution (default :attr:`certified_resolution_bits`); ``None``
        without tables or with ``branch_cap``."""
        return self._beyond.certified(resolution_bits)

    certified_resolution_bits = property(
        lambda self: self._beyond.resolution_bits, lambda self, bits: setattr(self._beyond, "resolution_bits", bits),
        doc="Grid cell (bits) of the certified brackets the automatic regime gives past a cap (settable).")
    rank_exact_limit = property(lambda self: self._beyond.rank_exact_limit, lambda self, n: setattr(
        self._beyond, "rank_exact_limit", n), doc="Live prefixes a :meth:`rank` of a finite-state model builds to be "
        "exact, default 100,000 (settable; ``None``: up to the caps); past them its certified DP answers.")

    @locked
    def finite_state_tables(self) -> FiniteStateTables | None:
        """The model's finite-state tables (``finite_state=``; a callable is called once), validated; else None."""
        return self._beyond.finite_state_tables()

    @locked
    def finite_state_sampler(self) -> FiniteStateSampler | None:
        """The sampler plain draws use for a finite-state model (cumulative step tables by state),
        ``None`` for other models: what :meth:`monte_carlo` draws with under ``head=False``."""
        return self._beyond.state_sampler()

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
