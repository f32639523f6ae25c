"""Certified DP tables kept in a store's folder, so that a later process answers a deep rank at once.

One file per certified counter, ``certified-<id>.bin`` in the store's folder (``store=PATH``), beside
the tree's own files and independent of their format: ``id`` names the finite-state tables (a
SHA-256 of their arrays), the support, the grid and this format, so a file can only ever be read
by a counter that would compute the same values. Layout::

    MAGIC (8 bytes) | SHA-256 of the payload (32 bytes) | payload: an .npz of the counter's
    state (each DP's start-state row, the min-plus DPs; read with allow_pickle=False) and its id

Written atomically (a temp file, fsync, rename: :func:`arenum._io.atomic_write`) each time a DP
grows; read once, when the counter is made. A damaged file (magic, checksum, unreadable payload) or
a foreign one (another id inside) is not used: one line on stderr (a ``RuntimeWarning``), the DP is
rebuilt from the tables and the file rewritten. No forward is ever needed: the tables are the model.

What is kept is the start state's row of each DP (``8 (K + 1)`` bytes, a few dozen KB), not the
sweep's working buffer: a query deeper than the kept cells rebuilds that DP from cell 0.
"""
from __future__ import annotations

import hashlib
import io
import os
import warnings

import numpy as np

from .._io import atomic_write
from .certified import CertifiedCounter

__all__ = ["FORMAT", "identity", "path_for", "load", "save"]

MAGIC = b"ARNCERT\x01"
FORMAT = 1
"""Version of this file format (part of every id: another version is another file)."""


def identity(cc: CertifiedCounter) -> str:
    """SHA-256 (hex) of what decides the counter's values: its tables, support, grid and this format."""
    t, sup = cc.tables, cc.support
    h = hashlib.sha256(f"arenum-certified|{FORMAT}|{cc.delta!r}|{cc.cap}|{cc.terminating}|{sup.fixed_len}|"
                       f"{sup.eos_id}|{t.start}|{t.eos_column}|{type(cc).__name__}".encode())
    for a in (t.log_probs, t.next_state, t.eos_log_probs):
        a = np.ascontiguousarray(a)
        h.update(f"{a.dtype.str}{a.shape}".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def path_for(folder: str, ident: str) -> str:
    """The file of the counter with id ``ident`` in ``folder``."""
    return os.path.join(folder, f"certified-{ident[:24]}.bin")


def save(cc: CertifiedCounter, folder: str, ident: str) -> int:
    """Write the counter's state to its file, atomically; the bytes written."""
    buf = io.BytesIO()
    np.savez(buf, id=np.frombuffer(ident.encode(), np.uint8), **cc.state())
    payload = buf.getvalue()

    def write(tmp: str) -> None:
        with open(tmp, "wb") as f:
            f.write(MAGIC + hashlib.sha256(payload).digest() + payload)
    return atomic_write(path_for(folder, ident), write)


def load(cc: CertifiedCounter, folder: str, ident: str) -> bool:
    """Restore the counter from its file when there is one that is whole and its own: ``True``; no
    file: ``False``; a damaged or foreign file: one ``RuntimeWarning`` line, ``False`` (rebuilt)."""
    path = path_for(folder, ident)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return False
    except OSError as e:
        return _ignored(path, f"cannot be read ({e.strerror or e})")
    if data[:8] != MAGIC:
        return _ignored(path, "is not a certified-tables file (bad magic)")
    payload = data[40:]
    if hashlib.sha256(payload).digest() != data[8:40]:
        return _ignored(path, "is damaged (checksum mismatch)")
    try:
        with np.load(io.BytesIO(payload), allow_pickle=False) as z:
            state = {k: z[k] for k in z.files}
    except Exception as e:  # noqa: BLE001 - any unreadable payload is one line
        return _ignored(path, f"cannot be read ({type(e).__name__})")
    if bytes(state.pop("id", np.zeros(0, np.uint8))).decode(errors="replace") != ident:
        return _ignored(path, "was made for other tables, support or grid")
    try:
        cc.restore(state)
    except (KeyError, ValueError, IndexError) as e:
        return _ignored(path, f"does not hold a counter's state ({type(e).__name__}: {e})")
    return True


def _ignored(path: str, why: str) -> bool:
    warnings.warn(f"certified tables {path} {why}: ignored, rebuilt from the model", RuntimeWarning, stacklevel=4)
    return False
