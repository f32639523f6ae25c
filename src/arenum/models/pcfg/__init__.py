"""A PCFG password model (Weir et al. 2009 structures) as an autoregressive model over segment tokens.

:class:`PCFGModel` is fitted from passwords with :meth:`PCFGModel.fit` (weighted lists, optional
lowercasing) and exposes the callbacks :class:`arenum.AutoregressiveEnumerable` accepts (sparse
``next_logprobs`` rows, ``batch_next_logprobs``, ``score_sequences``), the finite-state protocol
(``finite_state``: certified brackets at any depth), ``encode``/``decode`` to and from strings, and a
pickle-free ``save``/``load``.  ``docs/pcfg.md`` has the model, the proof that guess numbers over its
token sequences are guess numbers over strings, and a comparison with the 4-gram.

Modules: ``grammar`` (character classes, segmentation, structures, counting), ``model`` (the class),
``io`` (the ``.npz`` file: save, load, checks).
"""
from __future__ import annotations

from .grammar import char_class, segments
from .io import file_format
from .model import PCFGModel

__all__ = ["PCFGModel", "char_class", "file_format", "segments"]
