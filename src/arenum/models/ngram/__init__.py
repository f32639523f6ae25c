"""Smoothed n-gram model over characters or arbitrary hashable tokens, numpy only.

:class:`NGramModel` is fitted from a corpus with :meth:`NGramModel.fit` and exposes the callbacks
:class:`arenum.AutoregressiveEnumerable` accepts (``next_logprobs``, ``batch_next_logprobs``,
``score_sequences``, ``all_position_logprobs``), plus ``encode``/``decode`` and a pickle-free
``save``/``load``.  See ``docs/ngram.md`` for the formulas and the file format.

Modules: ``model`` (the class: callbacks, encode/decode, save/load), ``cache`` (the LRU caches of
rows), ``tables`` (the count tables, suffix lookup and row arithmetic), ``fit`` (parameter checks,
corpus encoding, counting), ``io`` (the ``.npz`` file: save, load, validation).
"""
from __future__ import annotations

from .model import NGramModel

__all__ = ["NGramModel"]
