"""Stage 3, past the exact budget: certified brackets, Monte Carlo estimates, envelopes, rescoring.

``regime`` chooses how a query that the exact tree cannot afford is answered; ``certified`` is the
DP over a finite-state model's states and a fine score grid (certified brackets at any depth);
``sampling``, ``draws`` and ``estimate`` are the Monte Carlo estimator with its intervals;
``envelope``, ``atoms`` and ``lattice`` the envelope indexes; ``rescore`` speculative enumeration
(a draft's index, a target's scores, a certificate).

Nothing here claims exactness it does not have: each result names its method and carries its
bracket or interval. This stage reads the exact stage's index and the step oracle, never the
facade.

Exports: the names the facade, the report and the other packages use (below).
"""
from .certified import CertifiedCounter
from .draws import FiniteStateSampler
from .envelope import AREnvelopeIndex
from .estimate import INTERVALS, ExactHead, Interval, MonteCarloEstimator, mass_count_bound
from .lattice import LatticeEnvelopeIndex
from .regime import BeyondExact
from .rescore import RescoredIndex
from .sampling import ARSampler, SampleSet, draw_samples

__all__ = [
    "AREnvelopeIndex", "ARSampler", "BeyondExact", "CertifiedCounter", "ExactHead",
    "FiniteStateSampler", "INTERVALS", "Interval", "LatticeEnvelopeIndex", "MonteCarloEstimator", "RescoredIndex",
    "SampleSet", "draw_samples", "mass_count_bound",
]
