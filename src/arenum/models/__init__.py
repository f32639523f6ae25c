"""Model adapters: callbacks a user would otherwise write by hand.

- :class:`NGramModel` (``arenum.models.ngram``): an n-gram model fitted from text; numpy only.
- :class:`PCFGModel` (``arenum.models.pcfg``): a PCFG password model (structures and segments);
  numpy only.
- ``arenum.models.hf``: a Hugging Face causal-LM adapter (optional extra ``arenum[hf]``; torch and
  transformers are imported only when that module is imported).
"""
from __future__ import annotations

from typing import Any

__all__ = ["NGramModel", "PCFGModel"]


def __getattr__(name: str) -> Any:
    if name == "NGramModel":
        from .ngram import NGramModel

        return NGramModel
    if name == "PCFGModel":
        from .pcfg import PCFGModel

        return PCFGModel
    raise AttributeError(f"module 'arenum.models' has no attribute {name!r}")
