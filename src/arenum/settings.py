"""The enumerable's settings: every constructor argument validated once, in one frozen record.

:meth:`Settings.validate` checks each argument at the boundary (a ``TypeError``/``ValueError``
naming the parameter and the value) and derives the support's length cap and the caps on an exact
build (:class:`~arenum.exact.seek.Limits`). Nothing here calls the model.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ._validate import check_count_mode, exact_int, finite_float, optional_exact_int
from .exact import Quantizer, Limits, default_max_bytes, DEFAULT_TABLE_BYTES

__all__ = ["Settings"]

@dataclass(frozen=True)
class Settings:
    """Validated settings of an :class:`~arenum.AutoregressiveEnumerable` (see its docstring)."""

    max_len: int | None
    eos: Any
    max_depth: int
    cap: int
    batch_size: int
    branch_cap: int | None
    count_mode: str
    quantizer: Quantizer
    norm_tol: float
    keep_margin_bits: float
    max_prefixes: int | None
    max_sequences: int | None
    max_bytes: int | None
    table_bytes: int | None
    exact_limit: int | None
    estimate_samples: int
    estimate_seed: int | None
    confidence: float
    logprob_error: float = 0.0
    constraint: str | None = None

    STORE_CHECKED = ("max_len", "eos", "cap", "branch_cap", "norm_tol", "terminating")
    """The settings that decide what a stored tree holds: a store opened with others is refused."""

    @property
    def terminating(self) -> bool:
        return self.eos is not None

    def store_checked(self) -> dict[str, Any]:
        """``{name: value}`` of :attr:`STORE_CHECKED` (a store's meta), and the ``constraint``'s name
        when there is one (a store built under one constraint is refused under another or none)."""
        out = {k: getattr(self, k) for k in self.STORE_CHECKED}
        if self.constraint is not None:
            out["constraint"] = self.constraint
        return out

    def limits(self) -> Limits:
        """Fresh caps on an exact build: ``exact_limit`` also caps the live prefixes."""
        mp = self.max_prefixes
        if self.exact_limit is not None:
            mp = self.exact_limit if mp is None else min(mp, self.exact_limit)
        return Limits(max_depth_bits=4096.0, max_prefixes=mp, max_sequences=self.max_sequences,
                      max_bytes=self.max_bytes)

    @classmethod
    def validate(
        cls, *, max_len: Any, eos: Any, max_depth: Any, bin_width_bits: Any, oversample: Any, batch_size: Any,
        count_mode: Any, branch_cap: Any, norm_tol: Any, keep_margin_bits: Any, max_prefixes: Any,
        max_sequences: Any, max_bytes: Any, exact_limit: Any, table_bytes: Any, estimate_samples: Any,
        estimate_seed: Any, confidence: Any, logprob_error: Any = None, constraint: str | None = None,
    ) -> "Settings":
        """Check every argument (errors name the parameter and the value) and derive the cap."""
        max_len = optional_exact_int("max_len", max_len, minimum=1)
        max_depth = exact_int("max_depth", max_depth, minimum=1)
        batch_size = exact_int("batch_size", batch_size, minimum=1)
        branch_cap = optional_exact_int("branch_cap", branch_cap, minimum=1)
        count_mode = check_count_mode(count_mode)
        quantizer = Quantizer(bin_width_bits, oversample)
        tol = finite_float("norm_tol", norm_tol)
        if not 0 < tol < 1:
            raise ValueError(f"norm_tol must be in (0, 1), got {norm_tol!r}")
        margin = finite_float("keep_margin_bits", keep_margin_bits)
        if margin < 0:
            raise ValueError(f"keep_margin_bits must be >= 0, got {keep_margin_bits!r}")
        max_prefixes = optional_exact_int("max_prefixes", max_prefixes, minimum=1)
        max_sequences = optional_exact_int("max_sequences", max_sequences, minimum=1)
        if isinstance(max_bytes, str):
            if max_bytes != "auto":
                raise ValueError(f"max_bytes must be 'auto', None or a number of bytes, got {max_bytes!r}")
            max_bytes = default_max_bytes()
        max_bytes = optional_exact_int("max_bytes", max_bytes, minimum=1)
        if isinstance(table_bytes, str):
            if table_bytes != "auto":
                raise ValueError(f"table_bytes must be 'auto', None or a number of bytes, got {table_bytes!r}")
            table_bytes = DEFAULT_TABLE_BYTES if max_bytes is None else min(DEFAULT_TABLE_BYTES, max_bytes // 4)
        table_bytes = optional_exact_int("table_bytes", table_bytes, minimum=0)
        exact_limit = optional_exact_int("exact_limit", exact_limit, minimum=1)
        estimate_samples = exact_int("estimate_samples", estimate_samples, minimum=2)
        estimate_seed = optional_exact_int("estimate_seed", estimate_seed, minimum=0)
        conf = finite_float("confidence", confidence)
        if not 0 < conf < 1:
            raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
        eps = 0.0 if logprob_error is None else finite_float("logprob_error", logprob_error)
        if eps < 0:
            raise ValueError(f"logprob_error must be >= 0 (nats per step), got {logprob_error!r}")
        if isinstance(eos, (float, np.floating, complex)) or isinstance(eos, bool):
            raise TypeError(f"eos must be a token the model returns (an integer id or a hashable token), "
                            f"got {type(eos).__name__} {eos!r}")
        if eos is None and max_len is None:
            raise ValueError("give max_len for a fixed-length model or eos for a terminating one (both are None)")
        if eos is None:
            cap = max_len
        else:
            cap = max_len if max_len is not None else max_depth
        return cls(
            max_len=max_len, eos=eos, max_depth=max_depth, cap=cap, batch_size=batch_size, branch_cap=branch_cap,
            count_mode=count_mode, quantizer=quantizer, norm_tol=tol, keep_margin_bits=margin,
            max_prefixes=max_prefixes, max_sequences=max_sequences, max_bytes=max_bytes, table_bytes=table_bytes,
            exact_limit=exact_limit, estimate_samples=estimate_samples, estimate_seed=estimate_seed, confidence=conf,
            logprob_error=eps, constraint=constraint,
        )
