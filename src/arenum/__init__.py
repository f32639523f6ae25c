"""arenum: count, rank and randomly access the sequences of any autoregressive model, exactly.

>>> import math, arenum
>>> ar = arenum.AutoregressiveEnumerable(lambda p: [(0, math.log(0.9)), (1, math.log(0.1))], max_len=2)
>>> ar.count(math.log(0.09)), ar.unrank(1)[0], round(ar.unrank(1)[1], 6)
(3, (0, 1), -2.407946)
"""
from .exact import CountHistogram, CountIndex, autoregressive_count_index, Quantizer, Limits, SeekIndex
from .enumerable import AutoregressiveEnumerable, count_budget_index
from .beyond import MonteCarloEstimator
from .step import OracleStats
from .results import (
    BudgetExceeded, CountBracket, CountDPTopPResult, CountResult, DensityRankResult, MassBracket, RankBracket,
    SeekResult, SequenceList, SequenceResult, ThresholdResult,
)

__version__ = "0.1.0"

__all__ = [
    "AutoregressiveEnumerable",
    "BudgetExceeded",
    "CountBracket",
    "CountDPTopPResult",
    "CountHistogram",
    "CountIndex",
    "CountResult",
    "DensityRankResult",
    "Limits",
    "MassBracket",
    "MonteCarloEstimator",
    "RankBracket",
    "OracleStats",
    "Quantizer",
    "SeekIndex",
    "SeekResult",
    "SequenceList",
    "SequenceResult",
    "ThresholdResult",
    "RescoredIndex",
    "AREnvelopeIndex",
    "LatticeEnvelopeIndex",
    "autoregressive_count_index",
    "count_budget_index",
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
