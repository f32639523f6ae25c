"""Compiled kernels for dense rows (optional: ``pip install 'arenum[fast]'``, which adds numba): the
validation sweep of the step oracle, and the quantization of the Monte Carlo sampler.

One pass over each row of a float64 ``(n, V)`` batch computes ``s[i] = sum(exp(row i))`` (the
normalization check) and, for the heads, marks the entries ``>= floors[i]`` and writes their
positions and values (the head cut): the ``exp``, the sum, the comparison and the cut fused, the row
read once. The numpy path (:func:`arenum.step.dense.sweep`) does the same in several passes per block
and stays the reference: every caller falls back to it when numba is not installed, when
``ARENUM_KERNELS=numpy`` is set, for a batch the kernel does not take (not float64, rows wider
than :data:`MAX_V`), and, under the default choice, for the first :data:`WARM_ENTRIES` entries a
process passes (a short run never pays for loading numba).

**Precision.** The callers use ``s`` for one decision only: a row with ``|s - 1| <= 1e-13`` is
normalized to float64 precision and used verbatim (:mod:`arenum.step.tables`); any other row gets the
reference formula. So ``s`` needs a proven error bound, not numpy's exact values:

- ``exp`` is ``2**k * P(r)``, ``k = round(v / ln 2)``, ``r = v - k ln 2`` (two-part ``ln 2``), ``P``
  the degree-10 Chebyshev interpolant of ``exp`` on ``[-ln2/2, ln2/2]``: relative error at most
  :data:`EXP_REL_ERR` (``tests/step/test_kernels.py`` measures it on a dense grid). Entries below
  ``-708`` count as ``exp(-708)`` (``3.3e-308``; a row holds at most ``MAX_V`` of them: an absolute
  error under ``4e-302``).
- the sum adds each chunk of :data:`CHUNK` entries in any order (vectorized lanes), then the chunk
  sums in order: relative error at most ``(CHUNK + V / CHUNK) * 2**-53`` (non-negative terms), under
  ``2.5e-13`` for every ``V <= MAX_V``.

So a row the kernel clears has a true ``|sum - 1|`` under ``1e-13 + 2.5e-13 + 1e-14``, well inside
``RENORM_TOL`` (``1e-12``): exactly the rows the reference formula would leave verbatim, and
the heads, messages and values are the numpy path's bit for bit (tested).

**Quantization.** :func:`quantized_cum` is :func:`arenum.beyond.draws.quantize_rows` then ``cumsum``, in
one pass per row: the same products and ``ceil`` (no fast-math), and sums of integers below
``2**53``, which are exact in any order. Its results are numpy's bit for bit (tested), so the
draws do not depend on the backend.

**Bad entries.** A NaN makes ``s`` NaN (it goes through ``P``); ``+inf`` makes it ``inf`` or NaN. An
entry above 0 is not seen by ``s``: the heads cut catches it (floors are capped at 0, so it lands
in the head and the caller checks its row), and the full-row kernel counts such entries and sets
``s = NaN`` for their rows.
"""
from __future__ import annotations

import os
import threading
import warnings
from typing import Any, Callable

import numpy as np

from ..errors import KernelUnavailable

__all__ = ["CHUNK", "EXP_REL_ERR", "MAX_V", "allows_numba", "backend", "choice", "loaded", "preload", "set_backend",
           "heads_sweep", "rows_sum", "quantized_cum", "takes"]

CHUNK = 1024
"""Entries summed in any order (vector lanes) before the chunk sums are added in order."""
MAX_V = 1 << 20
"""Widest row the kernels take (the summation bound above holds up to here)."""
EXP_REL_ERR = 4e-15
"""Bound on the relative error of the kernel's ``exp`` (measured maximum about ``1.6e-15``)."""
ENV = "ARENUM_KERNELS"
"""``numpy`` forces the numpy path; ``auto`` (default) uses numba when it is installed."""

WARM_ENTRIES = 1 << 25
"""Under the default choice, batches go to the numpy path until the process has passed this many
entries through them (the same values: see above). Loading the kernels (numba's import and its
on-disk cache) costs 0.4-0.7 s of CPU, and saves a few nanoseconds an entry: on the shipped
password 4-gram (96 entries a row), ``threshold(1000)`` (7,421 forwards, 0.7M entries) took 0.62 s
of CPU on the numpy path and 0.98 s loading the kernels; ``threshold(10**5)`` (38M entries) 4.33
against 4.48 s; ``threshold(10**6)`` (385M entries) 30.6 against 28.7 s. So a run pays for the load
only past tens of millions of entries (about 350,000 rows of 96 entries, 670 rows of a 50,257-token
vocabulary); a short run (one string's score, the first lines of a stream) never loads numba. Past
it, or once loaded, the kernels are used."""

_lock = threading.Lock()
_state: dict[str, Any] = {"choice": None, "kernels": None, "error": None, "seen": 0}


def set_backend(name: str | None) -> None:
    """Choose for this process: ``"numba"``, the compiled kernels (raises :class:`KernelUnavailable`,
    an ``ImportError``, when they cannot be used), ``"numpy"``, or ``None`` for the default
    (``$ARENUM_KERNELS``, else numba when installed). Both give the same results bit for bit."""
    if name not in (None, "numba", "numpy", "auto"):
        raise ValueError(f"unknown kernel backend {name!r}: use 'numba', 'numpy' or None")
    if name == "numba":
        _compiled()  # raises when numba is missing
    _state["choice"] = None if name == "auto" else name


def backend() -> str:
    """``"numba"`` when the compiled kernels are in use, else ``"numpy"``."""
    return "numba" if _active() is not None else "numpy"


def choice() -> str:
    """The backend asked for, loading nothing: ``"numba"``, ``"numpy"`` or ``"auto"`` (numba when
    installed), from :func:`set_backend`, else ``$ARENUM_KERNELS``."""
    c = _state["choice"]
    if c is None:
        c = os.environ.get(ENV, "auto").strip().lower() or "auto"
        if c not in ("auto", "numba", "numpy"):
            raise ValueError(f"{ENV}={os.environ[ENV]!r}: use 'numba', 'numpy' or 'auto'")
    return c


def loaded() -> bool:
    """Whether the compiled dense kernels are loaded in this process (numba warm: another compiled
    kernel then loads in milliseconds, not the first load's second or more)."""
    return _state["kernels"] is not None


def _active() -> dict[str, Callable] | None:
    c = choice()
    if c == "numpy":
        return None
    try:
        return _compiled()
    except KernelUnavailable:
        if c == "numba":
            raise
        return None


def allows_numba() -> bool:
    """Whether compiled code may be used (the choice, else ``$ARENUM_KERNELS``, is not ``numpy``, the
    kernels have not failed, numba is installed), without loading these kernels: for other compiled
    code (the certified DP's sweep), which does not need them."""
    if choice() == "numpy" or _state["error"] is not None:
        return False
    if _state["kernels"] is not None:
        return True
    import importlib.util

    return importlib.util.find_spec("numba") is not None


def preload() -> bool:
    """Load the compiled kernels now where they may be used (:func:`allows_numba`), the backend left
    as chosen: their code (about 100 MB: numba, LLVM) is then the process's before a memory baseline
    is read (the memory benchmarks and tests), not counted halfway through a query. Whether it loaded."""
    if not allows_numba():
        return False
    prev = _state["choice"]
    try:
        set_backend("numba")
    except KernelUnavailable:  # numba present but its compile failed: the numpy kernels stay
        return False
    finally:
        _state["choice"] = prev
    return True


def _active_for(arr: np.ndarray) -> dict[str, Callable] | None:
    """:func:`_active` for a batch of ``arr.size`` entries, with the warm-up of :data:`WARM_ENTRIES`
    (only under the default choice while the kernels are not loaded yet)."""
    if (_state["kernels"] is None and _state["choice"] is None and _state["error"] is None
            and os.environ.get(ENV, "auto").strip().lower() != "numba"):
        _state["seen"] += int(arr.size)  # under the GIL; an approximate count is enough
        if _state["seen"] <= WARM_ENTRIES:
            return None
    return _active()


def _compiled() -> dict[str, Callable]:
    k = _state["kernels"]
    if k is not None:
        return k
    with _lock:
        if _state["kernels"] is None:
            if _state["error"] is not None:
                raise KernelUnavailable(_state["error"])
            try:
                _state["kernels"] = _build()
            except Exception as e:  # noqa: BLE001  (any failure: numba missing, too old, not compiling)
                _state["error"] = f"the compiled kernels are unavailable: {type(e).__name__}: {e}"
                if not isinstance(e, ImportError):
                    warnings.warn(_state["error"] + " (using numpy)", RuntimeWarning, stacklevel=3)
                raise KernelUnavailable(_state["error"]) from e
        return _state["kernels"]


def _build() -> dict[str, Callable]:
    """Import (compile, or load from numba's cache) and run each kernel once on a tiny batch."""
    from . import _numba_kernels as nk

    arr = np.log(np.full((2, 3), 1.0 / 3.0))
    s, counts = np.empty(2), np.zeros(2, np.int64)
    pos, vals = np.empty(7, np.int64), np.empty(7)
    if nk.heads(arr, np.full(2, -np.inf), s, np.zeros(8, np.uint8), pos, vals, counts, 0) != (2, 0) or counts[1] != -3:
        raise RuntimeError("the heads kernel failed its self-check")
    nk.rows(arr, s)
    if not abs(s[0] - 1.0) < 1e-13:
        raise RuntimeError("the row-sum kernel failed its self-check")
    out = np.empty(1)
    nk.exp_values(np.zeros(1), out)
    cum = np.empty((1, 2))
    nk.quantized_cum(np.array([[1.0, 3.0]]), np.array([4.0]), 8.0, cum)
    if cum.tolist() != [[2.0, 8.0]]:
        raise RuntimeError("the quantization kernel failed its self-check")
    return {"heads": nk.heads, "rows": nk.rows, "exp": nk.exp_values, "quantized_cum": nk.quantized_cum}


def takes(arr: np.ndarray) -> bool:
    """Whether the kernels take this batch (C-contiguous float64, ``0 < V <= MAX_V``)."""
    return arr.dtype == np.float64 and arr.flags.c_contiguous and arr.ndim == 2 and 0 < arr.shape[1] <= MAX_V


def heads_sweep(arr: np.ndarray, floors: np.ndarray, guess: int = 64
                ) -> tuple[np.ndarray, list[np.ndarray], list[np.ndarray]] | None:
    """The compiled :func:`arenum.step.dense.sweep` with per-row floors: ``(s, flats, vals)`` (flat
    positions and values of exactly the entries ``>= floors[row]``, row-major, in pieces of about
    16k entries at row boundaries), or ``None`` when the numpy path must do it (no numba, or
    ``not takes(arr)``). ``guess``: entries expected per row (the buffers start at that)."""
    k = _active_for(arr)
    if k is None or not takes(arr):
        return None
    n, V = arr.shape
    s = np.empty(n)
    counts = np.zeros(n, np.int64)
    mask = np.zeros(-(-V // 8) * 8, np.uint8)  # padded to whole words, the padding stays 0
    fl = np.ascontiguousarray(floors, dtype=np.float64)
    flats: list[np.ndarray] = []
    lps: list[np.ndarray] = []
    cap = max(1024, min(n * V, n * guess)) + 1
    i = 0
    while i < n:  # a full buffer is kept as it is and the next rows go to a new, larger one: no copies
        pos, vals = np.empty(cap, np.int64), np.empty(cap)
        j, m = k["heads"](arr, fl, s, mask, pos, vals, counts, i)
        _pieces(arr, i, j, pos[:m], vals[:m], counts, flats, lps)
        i = j
        cap = min((n - i) * V, 2 * cap) + 1
    if not flats:
        flats.append(np.zeros(0, np.int64))
        lps.append(np.zeros(0))
    return s, flats, lps


_PIECE = 16384  # entries per piece, about: the sort works a piece at a time, in cache


def _pieces(arr: np.ndarray, a: int, b: int, pos: np.ndarray, vals: np.ndarray, counts: np.ndarray,
            flats: list, lps: list) -> None:
    """Append rows ``a..b-1`` in pieces of whole rows, in row order: the written rows from
    ``pos``/``vals`` (each piece closed at the row that reaches a multiple of ``_PIECE`` entries),
    the rows kept whole (``counts == -V``) as views of ``arr`` with their positions as a range."""
    V = arr.shape[1]
    whole = counts[a:b] < 0
    if not whole.any():
        runs = [(a, b, False)]
    else:
        edges = np.flatnonzero(np.diff(whole.view(np.int8))) + 1
        starts = [0, *edges.tolist()]
        ends = [*edges.tolist(), b - a]
        runs = [(a + x, a + y, bool(whole[x])) for x, y in zip(starts, ends)]
    off = 0
    for r0, r1, w in runs:
        if w:
            step = max(1, 4 * _PIECE // V)  # as the numpy sweep's blocks: a whole-row piece is sorted alone
            for x in range(r0, r1, step):
                y = min(r1, x + step)
                flats.append(np.arange(x * V, y * V, dtype=np.int64))
                lps.append(arr[x:y].reshape(-1))
            continue
        c = counts[r0:r1]
        m = int(c.sum())
        p, v = pos[off : off + m], vals[off : off + m]
        off += m
        if m <= _PIECE:
            if m:
                flats.append(p)
                lps.append(v)
            continue
        ends_ = np.cumsum(c)
        bounds = np.unique(np.concatenate(([0], ends_[np.searchsorted(ends_, np.arange(_PIECE, m, _PIECE))], [m])))
        bounds = bounds.tolist()
        flats.extend(p[x:y] for x, y in zip(bounds, bounds[1:]))
        lps.extend(v[x:y] for x, y in zip(bounds, bounds[1:]))


def rows_sum(arr: np.ndarray) -> np.ndarray | None:
    """``s[i] = sum(exp(row i))``, NaN for a row holding an entry ``> 0`` (or NaN or ``+inf``); or
    ``None`` when the numpy path must do it."""
    k = _active_for(arr)
    if k is None or not takes(arr):
        return None
    s = np.empty(arr.shape[0])
    k["rows"](arr, s)
    return s


def quantized_cum(p: np.ndarray, tot: np.ndarray, one: float) -> np.ndarray | None:
    """``np.cumsum(quantize_rows(p), axis=1)`` of :mod:`arenum.beyond.draws` in one fused pass per row, bit
    for bit (``tot = p.sum(axis=1)``, all ``> 0``, computed by the caller); ``None`` when the numpy
    path must do it."""
    k = _active_for(p)
    if k is None or not takes(p):
        return None
    cum = np.empty(p.shape)
    k["quantized_cum"](p, np.ascontiguousarray(tot, dtype=np.float64), float(one), cum)
    return cum


def kernel_exp(x: np.ndarray) -> np.ndarray:
    """The kernels' ``exp`` of a float64 vector (for tests); raises ``ImportError`` without numba."""
    out = np.empty(x.shape[0])
    _compiled()["exp"](np.ascontiguousarray(x, dtype=np.float64), out)
    return out
