"""Stage 1, the model boundary: the only code that calls the user's model.

:class:`StepOracle` calls the model (one prefix, a batch of prefixes, or every position of a
sequence), maps tokens to ids (``vocab``), parses each raw step table once (``tables``, ``dense`` and the compiled sweep of
``kernels``), validates it, sorts it by descending log-prob, memoizes it by prefix and counts
forwards. ``finite_state`` is the protocol of models whose next-token table depends on a finite
state only (n-grams), which the certified brackets and the fast sampler read.

Everything above this stage sees clean numpy arrays: sorted token ids and float64 log-probs.
It knows nothing of prefix trees, budgets or answers.

Exports (the names other stages use): :class:`StepOracle`, :class:`OracleStats`, :class:`Heads`,
:class:`FiniteStateTables`, the JSON token codec of :mod:`~arenum.step.vocab` (``encode_token``,
``decode_token``; the oracle's ``vocab`` maps tokens <-> ids), ``NORM_TOL``, the constraint protocol (:class:`Constraint`, :class:`TextConstraint`, :class:`Automaton`,
:class:`AllOf`, ``why_rejected``, ``constraint_identity``: what a store keeps) and its composition with the oracle (``make_oracle``: a
:class:`~arenum.step.constrained.ConstrainedOracle`; ``constrain_finite_state``: the product tables) and the module :mod:`~arenum.step.kernels`.
"""
from . import kernels
from .constraint import (AllOf, Automaton, Constraint, TextConstraint, bind_text, constraint_identity, steps_to_accept,
                         why_rejected)
from .constrained import constrain_finite_state, make_oracle
from .finite_state import FiniteStateTables
from .oracle import OracleStats, StepOracle
from .tables import NORM_TOL, Heads
from .vocab import decode_token, encode_token

__all__ = ["AllOf", "Automaton", "Constraint", "FiniteStateTables", "Heads", "NORM_TOL", "OracleStats", "StepOracle",
           "TextConstraint", "bind_text", "constrain_finite_state", "constraint_identity", "decode_token", "encode_token", "kernels", "make_oracle",
           "steps_to_accept", "why_rejected"]
