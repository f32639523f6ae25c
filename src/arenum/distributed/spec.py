"""Model specs: how each worker builds its own replica of the model.

A :class:`ModelSpec` is small and picklable (a path and keywords), so it travels to every worker,
which loads the model itself: an n-gram file written by ``arenum fit`` or a local Hugging Face
checkpoint (with prompt, dtype and device). Any zero-argument callable returning an
:class:`arenum.AutoregressiveEnumerable` works too (a *factory*); a spec is one, and also names the
model's fingerprint (so a worker's store knows it without a forward) and the GPUs it needs.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ModelSpec"]


@dataclass(frozen=True)
class ModelSpec:
    """A model every worker loads for itself.

    ``kind``: ``"ngram"`` (``path``: an n-gram ``.npz`` from ``arenum fit``; ``max_len``,
    ``terminating``) or ``"hf"`` (``path``: a local checkpoint folder; ``prompt``, ``dtype``,
    ``device``, ``max_len``, ``eos``). ``options``: further keywords for the enumerable (``batch_size``,
    ``max_prefixes``, ...). Build with :meth:`ngram` or :meth:`hf`.
    """

    kind: str
    path: str
    max_len: int | None = None
    terminating: bool = True
    eos: Any = "auto"
    prompt: Any = None
    dtype: Any = "auto"
    device: Any = None
    options: dict = field(default_factory=dict)

    @classmethod
    def ngram(cls, path: str | os.PathLike, *, max_len: int | None = None, terminating: bool = True,
              **options: Any) -> "ModelSpec":
        """An n-gram model file (see :meth:`arenum.models.ngram.NGramModel.enumerable`)."""
        return cls("ngram", os.fspath(path), max_len=max_len, terminating=terminating, options=dict(options))

    @classmethod
    def pcfg(cls, path: str | os.PathLike, *, max_len: int | None = None, **options: Any) -> "ModelSpec":
        """A PCFG model file (see :meth:`arenum.models.pcfg.PCFGModel.enumerable`)."""
        return cls("pcfg", os.fspath(path), max_len=max_len, options=dict(options))

    @classmethod
    def hf(cls, path: str | os.PathLike, *, prompt: Any = None, max_len: int | None = None, eos: Any = "auto",
           dtype: Any = "auto", device: Any = None, **options: Any) -> "ModelSpec":
        """A local Hugging Face causal LM (see :meth:`arenum.models.hf.CausalLMOracle.from_pretrained`)."""
        return cls("hf", os.fspath(path), max_len=max_len, eos=eos, prompt=prompt, dtype=dtype, device=device,
                   options=dict(options))

    def __post_init__(self) -> None:
        if self.kind not in ("ngram", "pcfg", "hf"):
            raise ValueError(f"ModelSpec kind must be 'ngram', 'pcfg' or 'hf', got {self.kind!r}")
        if not isinstance(self.path, str) or not self.path:
            raise ValueError(f"ModelSpec path must be a non-empty path, got {self.path!r}")

    @property
    def num_gpus(self) -> float:
        """GPUs each worker asks for: one when the spec names a CUDA device."""
        return 1.0 if self.kind == "hf" and str(self.device or "").startswith("cuda") else 0.0

    def __call__(self) -> tuple[Any, str]:
        """``(enumerable, fingerprint)``, loaded here (in a worker)."""
        if self.kind == "ngram":
            from ..models.ngram import NGramModel

            if not os.path.isfile(self.path):
                raise FileNotFoundError(f"n-gram model file {self.path!r} does not exist on this worker")
            model = NGramModel.load(self.path)
            ar = model.enumerable(max_len=self.max_len, terminating=self.terminating, **self.options)
            return ar, model.fingerprint()
        if self.kind == "pcfg":
            from ..models.pcfg import PCFGModel

            if not os.path.isfile(self.path):
                raise FileNotFoundError(f"PCFG model file {self.path!r} does not exist on this worker")
            model = PCFGModel.load(self.path)
            return model.enumerable(max_len=self.max_len, **self.options), model.fingerprint()
        from ..models.hf import CausalLMOracle

        if not os.path.isdir(self.path):
            raise FileNotFoundError(f"hf model folder {self.path!r} does not exist on this worker")
        oracle = CausalLMOracle.from_pretrained(self.path, prompt=self.prompt, dtype=self.dtype, device=self.device)
        ar = oracle.enumerable(max_len=self.max_len, eos=self.eos, **self.options)
        return ar, oracle.fingerprint()
