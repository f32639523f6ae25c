"""arenum: count, rank and randomly access the sequences of any autoregressive model, exactly.

>>> import math, arenum
>>> ar = arenum.AutoregressiveEnumerable(lambda p: [(0, math.log(0.9)), (1, math.log(0.1))], max_len=2)
>>> ar.count(math.log(0.09)), ar.unrank(1)[0], round(ar.unrank(1)[1], 6)
(3, (0, 1), -2.407946)

The public names, grouped by what their answers guarantee.

Exact
-----
AutoregressiveEnumerable    the facade: ``count``, ``threshold``, ``unrank``, ``slice``, ``top_k``, ``rank``,
                            ``cumulative``, ``mass_above``, ``nucleus_size``, ``seek``, ``seek_mass``,
                            ``log_density``; each result says when a cap made it less than exact
count_budget_index          the exact :class:`SeekIndex` covering ``2**budget_bits`` sequences
SeekIndex                   low-level: the exact index and its budget steering under the facade
CountIndex                  low-level: counts by fine score bucket (``quantized_count_index``)
CountHistogram              low-level: the histogram a :class:`CountIndex` is built from
autoregressive_count_index  low-level: the completions of a prefix, by fine bucket
Quantizer                   the fine score buckets of a :class:`CountIndex` (never an answer's resolution)
Limits                      the caps on an exact build

Certified (``lo <= true <= hi``, stated by ``method``)
------------------------------------------------------
``count_bracket``, ``mass_above``, ``rank`` past a cap or under ``branch_cap`` (``method='bracket'``);
``certified()`` and the automatic regime of a finite-state model (``method='certified'``);
``logprob_error=`` brackets for a true model known within ``eps`` nats (``method='logprob_error'``).
RescoredIndex               a target model's order from a draft's index, with a certificate

Estimate (``exact=False``, an interval where one is known)
----------------------------------------------------------
MonteCarloEstimator         ``monte_carlo()`` and the automatic regime past ``exact_limit``
AREnvelopeIndex             ``envelope_index()``: per-depth step envelopes (``method='envelope'``)
LatticeEnvelopeIndex        ``envelope_index(cluster_fn=...)``: per (depth, cluster) envelopes

Constraints (restrict the support; every query above answers on the accepted sequences)
-----------------------------------------------------------------------------------------
Constraint                  the automaton protocol (``start``, ``step``, ``accepts``, ``live``); ``constraint=``
TextConstraint              a constraint over characters, stepping each token's whole text
Automaton                   an explicit finite automaton over tokens (live states precomputed)
AllOf                       the intersection of constraints (also ``a & b``)
why_rejected                why a constraint rejects a token sequence, in words
arenum.constraints          password policies (``policy('basic8')``), ``Regex``, ``Blocklist``, ``build``

Records (what queries return)
-----------------------------
CountResult                 an ``int`` with ``exact``, ``method``, ``ci_lo``/``ci_hi``
ThresholdResult             a ``float`` with ``exact``, ``method``, ``ci_lo``/``ci_hi``
DensityRankResult           ``rank`` and ``cumulative`` with their brackets or intervals
CountDPTopPResult           ``nucleus_size``: ``size`` in ``[size_lo, size_hi]``
SequenceResult              a ``(sequence, log_prob)`` tuple with ``exact``, ``method``, ``rank``
SequenceList                a list of them, flagged
SeekResult                  ``seek_mass``: the sequence where the cumulative mass reaches a target
CountBracket                ``lo <= count <= hi``
MassBracket                 ``lo <= mass <= hi``
RankBracket                 ``lo <= rank <= hi``
OracleStats                 forwards, model calls and seconds (``stats``)

Errors
------
BudgetExceeded              an exact answer needs more than a cap allows (a ``RuntimeError``)
StoreError                  a store folder that cannot be opened as asked (a ``ValueError``)
WorkerError                 a distributed worker failed outside the model's errors (a ``RuntimeError``)
KernelUnavailable           the compiled kernels were asked for and cannot run (an ``ImportError``)

Adapters (sub-packages)
-----------------------
arenum.models.ngram         ``NGramModel``: an n-gram fitted from text, with ``.enumerable()``
arenum.models.hf            ``CausalLMOracle``: a Hugging Face causal LM (extra ``arenum[hf]``)
arenum.distributed          ``DistributedEnumerable``: one enumeration over many workers (extra ``arenum[ray]``)
arenum.testing              ``RandomModel`` and ``brute_force``: check any small model yourself
"""
from .errors import BudgetExceeded, KernelUnavailable, StoreError, WorkerError
from .exact import CountHistogram, CountIndex, autoregressive_count_index, Quantizer, Limits, SeekIndex
from .enumerable import AutoregressiveEnumerable, count_budget_index
from .beyond import MonteCarloEstimator
from .step import AllOf, Automaton, Constraint, OracleStats, TextConstraint, why_rejected
from .results import (
    CountBracket, CountDPTopPResult, CountResult, DensityRankResult, MassBracket, RankBracket,
    SeekResult, SequenceList, SequenceResult, ThresholdResult,
)

__version__ = "0.1.0"

__all__ = [
    # exact
    "AutoregressiveEnumerable", "count_budget_index", "SeekIndex", "CountIndex", "CountHistogram",
    "autoregressive_count_index", "Quantizer", "Limits",
    # certified
    "RescoredIndex",
    # estimate
    "MonteCarloEstimator", "AREnvelopeIndex", "LatticeEnvelopeIndex",
    # constraints
    "Constraint", "TextConstraint", "Automaton", "AllOf", "why_rejected",
    # records
    "CountResult", "ThresholdResult", "DensityRankResult", "CountDPTopPResult", "SequenceResult", "SequenceList",
    "SeekResult", "CountBracket", "MassBracket", "RankBracket", "OracleStats",
    # errors
    "BudgetExceeded", "StoreError", "WorkerError", "KernelUnavailable",
]


def __getattr__(name: str):
    if name == "RescoredIndex":
        from .beyond import RescoredIndex

        return RescoredIndex
    if name == "AREnvelopeIndex":
        from .beyond import AREnvelopeIndex

        return AREnvelopeIndex
    if name == "LatticeEnvelopeIndex":
        from .beyond import LatticeEnvelopeIndex

        return LatticeEnvelopeIndex
    raise AttributeError(f"module 'arenum' has no attribute {name!r}")
