"""Input validation shared by every public entry point: builtin exceptions carrying the bad value.

Also the package's shared constants, each defined here once: :data:`LN2` (nats per bit),
:data:`INT64_MAX` (the largest int64, the bound token ids and stored counts are checked against) and
:func:`short_repr` (a value as error messages name it).
"""
from __future__ import annotations

import math
import numbers
from typing import Any, Literal, get_args

__all__ = ["exact_int", "optional_exact_int", "finite_float", "probability", "LN2", "INT64_MAX", "short_repr"]

LN2 = math.log(2.0)
"""Nats per bit: ``bits = -log_prob / LN2``."""
INT64_MAX = 2**63 - 1
"""The largest int64."""


def short_repr(x: Any, n: int = 60) -> str:
    """``repr(x)``, cut to ``n`` characters (for messages naming a prefix or a sequence)."""
    r = repr(x)
    return r if len(r) <= n else r[: n - 3] + "..."


def exact_int(name: str, value: Any, *, minimum: int | None = None, maximum: int | None = None) -> int:
    """Return ``value`` as an ``int`` if it is an exact integer (``2`` or ``2.0``), else raise.

    ``bool`` is refused (``TypeError``); ``2.5`` and non-finite floats are refused (``ValueError``);
    values outside ``[minimum, maximum]`` raise ``ValueError`` naming ``name`` and the value.

    >>> exact_int("k", 3.0)
    3
    >>> exact_int("k", 2.5)
    Traceback (most recent call last):
    ...
    ValueError: k must be an exact integer, got 2.5
    """
    if isinstance(value, bool):
        raise TypeError(f"{name} must be an integer, got bool {value!r}")
    if isinstance(value, numbers.Integral):
        out = int(value)
    elif isinstance(value, numbers.Real):
        f = float(value)
        if not math.isfinite(f) or f != math.floor(f):
            raise ValueError(f"{name} must be an exact integer, got {value!r}")
        out = int(f)
    else:
        raise TypeError(f"{name} must be an integer, got {type(value).__name__} {value!r}")
    if minimum is not None and out < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value!r}")
    if maximum is not None and out > maximum:
        raise ValueError(f"{name} must be <= {maximum}, got {value!r}")
    return out


def optional_exact_int(name: str, value: Any, *, minimum: int | None = None) -> int | None:
    """:func:`exact_int`, but ``None`` passes through."""
    return None if value is None else exact_int(name, value, minimum=minimum)


def finite_float(name: str, value: Any, *, allow_neg_inf: bool = False) -> float:
    """Return ``value`` as a finite ``float`` (``-inf`` too when allowed), else raise."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__} {value!r}")
    f = float(value)
    if math.isnan(f) or f == math.inf or (f == -math.inf and not allow_neg_inf):
        raise ValueError(f"{name} must be finite, got {value!r}")
    return f


def probability(name: str, value: Any) -> float:
    """Return ``value`` as a ``float`` in ``(0, 1]``, else raise (``TypeError``/``ValueError``)."""
    p = finite_float(name, value)
    if not 0 < p <= 1:
        raise ValueError(f"{name} must be in (0, 1], got {value!r}")
    return p


CountMode = Literal["auto", "exact", "float"]
"""Arithmetic of bounds that can exceed int64 (``branch_cap``'s skipped counts): ``"auto"`` (int64,
float64 past ``2**53``), ``"exact"`` (Python integers) or ``"float"`` (float64). Indexed counts are
always exact integers."""
COUNT_MODES: tuple[str, ...] = get_args(CountMode)


def check_count_mode(count_mode: Any) -> str:
    """``count_mode`` if it is one of :data:`COUNT_MODES`, else ``ValueError``."""
    if not isinstance(count_mode, str) or count_mode not in COUNT_MODES:
        raise ValueError(f"count_mode must be one of {COUNT_MODES}, got {count_mode!r}")
    return count_mode
