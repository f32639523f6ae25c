"""The files of a forward store: its token codec, checksummed writes and its manifest.

- :func:`encode_tokens`: the JSON forms of tokens (:mod:`arenum.step`'s codec), as a :class:`StoreError`
  when one cannot be stored.
- :func:`crc_file`, :class:`CrcWriter`, :func:`fsync_dir`: what every file write of a store uses.
- :func:`read_manifest`: the manifest, refused in one line (:class:`StoreError`) if it is missing,
  unreadable, damaged (its CRC-32 covers every key), of another format version or incomplete;
  :func:`manifest_crc` computes that CRC-32. :func:`describe_store`: a store's figures, read from it.

The layout and the guarantees are :mod:`arenum.exact.store`'s.
"""
from __future__ import annotations

import json
import os
import struct
import zlib
from typing import Any

import numpy as np

from ..errors import StoreError
from ..step import encode_token

__all__ = ["StoreError", "encode_tokens", "crc_file", "CrcWriter", "fsync_dir", "manifest_crc",
           "read_manifest", "describe_store", "STORE_FORMAT", "STORE_VERSION", "MANIFEST", "JOURNAL_MAGIC",
           "JOURNAL_HEADER", "read_record", "short_pair", "orphans", "check_file"]

STORE_FORMAT = "arenum-store"
STORE_VERSION = 4
"""Version 4: a transformer's heads as float32 values plus one float64 offset a row, in the snapshot
(encoding ``f32off``) and the journal's fetch records (:mod:`.records`); version 3: snapshots
narrowed, derived columns left out, tables cut by cost (:mod:`.snapshot`); versions 2 (every column
as the tree holds it) and 3 are still read, and written again as 4 by the next snapshot."""
READ_VERSIONS = (2, 3, 4)
MANIFEST = "manifest.json"
JOURNAL_MAGIC = b"ARJ2"
JOURNAL_HEADER = struct.Struct("<4sQII")
"""A journal record's header: magic, payload length, CRC-32 of the payload, CRC-32 of the 16 bytes before."""


def encode_tokens(toks: list) -> list:
    """JSON forms of tokens (:func:`arenum.step.encode_token`); one that cannot be stored is a StoreError."""
    try:
        return [encode_token(t) for t in toks]
    except ValueError as e:
        raise StoreError(str(e)) from None


def crc_file(path: str) -> int:
    crc = 0
    with open(path, "rb") as f:
        while True:
            b = f.read(1 << 22)
            if not b:
                return crc
            crc = zlib.crc32(b, crc)


class CrcWriter:
    """A write-only file wrapper keeping the CRC-32 and size of what passes through it."""

    def __init__(self, f: Any) -> None:
        self.f, self.crc, self.n = f, 0, 0

    def write(self, b: Any) -> int:
        mv = memoryview(b).cast("B")
        self.crc = zlib.crc32(mv, self.crc)
        self.n += mv.nbytes
        return self.f.write(mv)


def fsync_dir(path: str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without folder handles
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(fd)


def manifest_crc(m: dict) -> int:
    """CRC-32 of a manifest's content (every key but ``crc32``, in a canonical form)."""
    body = {k: v for k, v in m.items() if k != "crc32"}
    return zlib.crc32(json.dumps(body, sort_keys=True, separators=(",", ":")).encode("utf-8"))


def read_manifest(path: str) -> dict:
    mpath = os.path.join(path, MANIFEST)
    try:
        with open(mpath, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        if not os.path.isdir(path):
            raise StoreError(f"store {path}: no such folder") from None
        if not os.access(path, os.R_OK | os.X_OK):
            raise StoreError(f"store {path}: permission denied (the folder cannot be read)") from None
        raise StoreError(f"store {path}: no {MANIFEST} (not a store, or never completed)") from None
    except PermissionError:
        raise StoreError(f"store {path}: permission denied reading {MANIFEST}") from None
    except OSError as e:
        raise StoreError(f"store {path}: {MANIFEST} cannot be read ({e.strerror or e})") from None
    try:
        m = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise StoreError(f"store {path}: {MANIFEST} is damaged ({e.__class__.__name__})") from None
    if not isinstance(m, dict) or m.get("format") != STORE_FORMAT:
        raise StoreError(f"store {path}: {MANIFEST} is not an arenum store manifest")
    if "crc32" in m and m["crc32"] != manifest_crc(m):
        raise StoreError(f"store {path}: {MANIFEST} is damaged (checksum mismatch)")
    v = m.get("version")
    if not isinstance(v, int):
        raise StoreError(f"store {path}: {MANIFEST} has no format version")
    if v > STORE_VERSION:
        raise StoreError(f"store {path}: {MANIFEST} says format version {v}, newer than this arenum reads "
                         f"({STORE_VERSION}); upgrade arenum")
    if v not in READ_VERSIONS:
        raise StoreError(f"store {path}: {MANIFEST} says format version {v}, older than this arenum reads "
                         f"({', '.join(map(str, READ_VERSIONS))}); build the store again")
    if "crc32" not in m:
        raise StoreError(f"store {path}: {MANIFEST} is damaged (no checksum)")
    for k in ("generation", "files", "tree", "meta", "fingerprint", "tokens", "forwards") + (("encoding", "cost") if v >= 3 else ()):
        if k not in m:
            raise StoreError(f"store {path}: {MANIFEST} lacks {k!r}")
    return m


def read_record(f: Any, pos: int, n: int, where: str) -> tuple[bytes, int] | None:
    """The payload of the journal record at byte ``pos`` of the open file ``f`` (``n`` bytes long,
    read from ``pos`` on) and the byte where it ends; ``None`` at the end or at a torn last record
    (a torn header, a payload past the end, or a bad checksum of the last record); a
    :class:`StoreError` (``where``, then what) if a record is damaged before the end."""
    hs = JOURNAL_HEADER.size
    if n - pos < hs:
        return None  # the end, or a torn header at the end
    hdr = f.read(hs)
    if len(hdr) < hs:
        return None
    magic, length, crc, hcrc = JOURNAL_HEADER.unpack(hdr)
    if magic != JOURNAL_MAGIC or zlib.crc32(hdr[: hs - 4]) != hcrc:
        raise StoreError(f"{where} is damaged at byte {pos} (bad record header)")
    end = pos + hs + length
    if end > n:
        return None  # torn at the end
    payload = f.read(length)
    if len(payload) < length:
        return None
    if zlib.crc32(payload) != crc:
        if end == n:
            return None  # the last record, torn
        raise StoreError(f"{where} is damaged at byte {pos} (checksum mismatch)")
    return payload, end


def describe_store(path: str | os.PathLike) -> dict:
    """What a store holds, from its manifest and journal, without opening the tree (for ``arenum info``);
    its snapshot files checked first (presence, size, checksum): a damaged store is refused in one line."""
    path = os.fspath(path)
    m = read_manifest(path)
    try:
        _check_files(path, m)
        return _describe(path, m)
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise StoreError(f"store {path}: {MANIFEST} does not describe a store ({e.__class__.__name__}: {e})") from None


def check_file(path: str, fp: str, info: dict) -> int:
    """The size of snapshot file ``fp`` of the store at ``path``, checked against its manifest entry
    ``info`` (size, checksum): a :class:`StoreError` naming it otherwise (``FileNotFoundError`` when it
    is missing, which the caller words: a reader may race a writer's checkpoint)."""
    rel = os.path.relpath(fp, path)
    size = os.path.getsize(fp)
    if size != int(info["bytes"]):
        raise StoreError(f"store {path}: {rel} is truncated or damaged ({size} bytes, {info['bytes']} expected)")
    if crc_file(fp) != int(info["crc32"]):
        raise StoreError(f"store {path}: {rel} is damaged (checksum mismatch)")
    return size


def _check_files(path: str, m: dict) -> None:
    """Every snapshot file the manifest names is there, of its size and checksum (what opening the
    store checks first; the journal's records are checked as they are read)."""
    gdir = os.path.join(path, f"gen-{int(m['generation'])}")
    for name, info in m["files"].items():
        fp = os.path.join(gdir, name + ".npy")
        try:
            check_file(path, fp, info)
        except FileNotFoundError:
            raise StoreError(f"store {path}: {os.path.relpath(fp, path)} is missing") from None


def _describe(path: str, m: dict) -> dict:
    jpath = os.path.join(path, f"journal-{m['generation']}.bin")
    jbytes = os.path.getsize(jpath) if os.path.exists(jpath) else 0
    snap = sum(int(f["bytes"]) for f in m["files"].values())
    t = m["tree"]
    return {"path": path, "version": m["version"], "meta": m["meta"], "fingerprint": m["fingerprint"],
            "generation": m["generation"], "snapshot_bytes": snap, "journal_bytes": jbytes,
            "built_bits": 0.0 if float.fromhex(t["built"]) == float("inf") else -float.fromhex(t["built"]) / np.log(2),
            "prefixes": int(t["fetched_nodes"]), "levels": int(t["n_levels"]), "forwards": int(m["forwards"]),
            "note": "snapshot figures; the journal adds what was built since"}


def short_pair(a: str, b: str) -> tuple[str, str]:
    """Two different fingerprints, cut to show where they differ."""
    i = next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    if i < 12:
        return a[:16], b[:16]
    return a[:8] + "..." + a[i - 4 : i + 16], b[:8] + "..." + b[i - 4 : i + 16]


def orphans(path: str) -> str:
    """The store files in a folder without a manifest that a first checkpoint interrupted before its
    manifest cannot explain (it leaves at most ``gen-0`` and an empty ``journal-0.bin``): a later
    generation, or a journal holding records. ``''`` when there are none."""
    try:
        names = os.listdir(path)
    except OSError:
        return ""
    left = sorted(n for n in names if (n.startswith("gen-") and n != "gen-0")
                  or (n.startswith("journal-") and n.endswith(".bin")
                      and (n != "journal-0.bin" or os.path.getsize(os.path.join(path, n)) > 0)))
    return ", ".join(left[:3]) + (", ..." if len(left) > 3 else "")
