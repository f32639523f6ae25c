"""The forward store: a prefix tree kept in a directory, crash-safe and resumable.

A store holds everything the exact answers are built from (the tree's levels, their stored
tables, the steering histograms, the interned tokens), so a process that opens it answers every
query inside the built budget without a forward, and a deeper query extends it in place.

Layout of the directory::

    manifest.json      format and version, the settings and fingerprint it was built with, the
                       snapshot generation, every snapshot file with its size and CRC-32
    gen-K/*.npy        the snapshot: one plain ``.npy`` array per tree column (memory-mapped on
                       open, copy-on-write, so a store larger than RAM still answers)
    journal-K.bin      every commit since snapshot K, appended and fsynced one record at a time
    lock               held (``flock``) by the one process that writes

Crash safety: a commit of the tree (a fetched batch, an expanded level, a finished budget) is
written to the journal *before* it is applied in memory, as one record ``[magic, length, CRC-32,
payload]`` followed by ``fsync``; a process killed at any moment leaves at most the record in
flight torn, which the next writer cuts off (that batch's forwards are lost, nothing else). A
snapshot is written to a fresh ``gen-K`` folder, synced, and only then named by a new manifest
(written to a temp file, synced, renamed); the old generation is removed after. Replaying the journal
calls the tree's own ``_commit_*`` methods with the recorded arguments, so the rebuilt tree is the
same, array for array. No pickle: payloads are ``.npz`` bytes read with ``allow_pickle=False``.

Refusals, each a one-line :class:`StoreError` naming the file: a missing, truncated or corrupted
file (sizes and checksums), a journal record damaged before its end, a newer format version, a
store built with other settings or another model (the fingerprint), and a second writer (the lock).
"""
from __future__ import annotations

import gc
import hashlib
import io
import json
import os
import shutil
import struct
import weakref
import zlib
from typing import Any

import numpy as np

from .._io import atomic_write
from ..errors import StoreError
from ..step import StepOracle, decode_token, encode_token
from .tree import PrefixTree

__all__ = ["TreeStore", "describe_store", "root_fingerprint", "open_store", "STORE_VERSION"]

STORE_FORMAT = "arenum-store"
STORE_VERSION = 1
MANIFEST = "manifest.json"
LOCK = "lock"
_MAGIC = b"ARJ1"
_HDR = struct.Struct("<4sQI")  # magic, payload length, CRC-32 of the payload
_CHECKPOINT_MIN = 1 << 30
"""A build snapshots when its journal passes this and four times the snapshot (bounded replay,
amortized writes)."""


# ------------------------------------------------------------------------------------ tokens
def _encode_tokens(toks: list) -> list:
    """JSON forms of tokens (:func:`arenum.step.encode_token`); one that cannot be stored is a StoreError."""
    try:
        return [encode_token(t) for t in toks]
    except ValueError as e:
        raise StoreError(str(e)) from None


def root_fingerprint(oracle: StepOracle) -> str:
    """A hash of the model's root table: tokens and log-probs (one forward; the oracle memoizes the
    table, so a new tree reuses it)."""
    ids, lps = oracle.table(())
    toks = _encode_tokens(list(oracle.vocab.tokens(ids)))
    h = hashlib.sha256(json.dumps(toks).encode("utf-8"))
    h.update(np.ascontiguousarray(lps, np.float64).tobytes())
    return "root:" + h.hexdigest()


def open_store(path: Any, tree: PrefixTree, settings: Any, fingerprint: str | None,
               readonly: Any) -> "TreeStore | None":
    """The store of an enumerable (``None`` without a ``path``): its answer-deciding ``settings`` (an
    :class:`arenum.settings.Settings`) as the store's meta, ``fingerprint`` or the root table's hash
    (:func:`root_fingerprint`)."""
    if path is None:
        if readonly or fingerprint is not None:
            raise ValueError("store_readonly and fingerprint apply to a store: give store=PATH")
        return None
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"store must be a folder path, got {type(path).__name__}")
    if fingerprint is not None and not isinstance(fingerprint, str):
        raise TypeError(f"fingerprint must be a string, got {type(fingerprint).__name__}")
    fp = fingerprint if fingerprint is not None else root_fingerprint(tree.oracle)
    cfg = settings
    meta = {"max_len": cfg.max_len, "eos": None if cfg.eos is None else _encode_tokens([cfg.eos])[0], "cap": cfg.cap,
            "branch_cap": cfg.branch_cap, "norm_tol": cfg.norm_tol, "terminating": cfg.terminating}
    return TreeStore(path, tree, meta=meta, fingerprint=fp, readonly=bool(readonly))


# ------------------------------------------------------------------------------------ files
def _crc_file(path: str) -> int:
    crc = 0
    with open(path, "rb") as f:
        while True:
            b = f.read(1 << 22)
            if not b:
                return crc
            crc = zlib.crc32(b, crc)


class _CrcWriter:
    """A write-only file wrapper keeping the CRC-32 and size of what passes through it."""

    def __init__(self, f: Any) -> None:
        self.f, self.crc, self.n = f, 0, 0

    def write(self, b: Any) -> int:
        mv = memoryview(b).cast("B")
        self.crc = zlib.crc32(mv, self.crc)
        self.n += mv.nbytes
        return self.f.write(mv)


def _fsync_dir(path: str) -> None:
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


def _read_manifest(path: str) -> dict:
    mpath = os.path.join(path, MANIFEST)
    try:
        with open(mpath, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        raise StoreError(f"store {path}: no {MANIFEST} (not a store, or never completed)") from None
    try:
        m = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise StoreError(f"store {path}: {MANIFEST} is damaged ({e.__class__.__name__})") from None
    if not isinstance(m, dict) or m.get("format") != STORE_FORMAT:
        raise StoreError(f"store {path}: {MANIFEST} is not an arenum store manifest")
    v = m.get("version")
    if not isinstance(v, int):
        raise StoreError(f"store {path}: {MANIFEST} has no format version")
    if v > STORE_VERSION:
        raise StoreError(f"store {path}: format version {v} is newer than this arenum reads ({STORE_VERSION}); "
                         "upgrade arenum")
    for k in ("generation", "files", "tree", "meta", "fingerprint", "tokens", "forwards"):
        if k not in m:
            raise StoreError(f"store {path}: {MANIFEST} lacks {k!r}")
    return m


def describe_store(path: str | os.PathLike) -> dict:
    """What a store holds, from its manifest and journal, without opening the tree (for ``arenum info``)."""
    path = os.fspath(path)
    m = _read_manifest(path)
    jpath = os.path.join(path, f"journal-{m['generation']}.bin")
    jbytes = os.path.getsize(jpath) if os.path.exists(jpath) else 0
    snap = sum(int(f["bytes"]) for f in m["files"].values())
    t = m["tree"]
    return {"path": path, "version": m["version"], "meta": m["meta"], "fingerprint": m["fingerprint"],
            "generation": m["generation"], "snapshot_bytes": snap, "journal_bytes": jbytes,
            "built_bits": 0.0 if float.fromhex(t["built"]) == float("inf") else -float.fromhex(t["built"]) / np.log(2),
            "prefixes": int(t["fetched_nodes"]), "levels": int(t["n_levels"]), "forwards": int(m["forwards"]),
            "note": "snapshot figures; the journal adds what was built since"}


# ------------------------------------------------------------------------------------ the store
class TreeStore:
    """A :class:`~arenum.exact.tree.PrefixTree` kept in the directory ``path`` (module docstring).

    Opening an existing store loads the snapshot (memory-mapped) and replays the journal into
    ``tree`` (which must be fresh); a new store starts with a snapshot of ``tree``. ``meta`` (the
    settings that decide answers) and ``fingerprint`` (the model's identity) must equal the stored
    ones. ``readonly``: no lock, nothing written (a deeper query deepens in memory only).
    """

    def __init__(self, path: str | os.PathLike, tree: PrefixTree, *, meta: dict, fingerprint: str,
                 readonly: bool = False, checkpoint_bytes: int = _CHECKPOINT_MIN) -> None:
        self.path = path = os.path.abspath(os.fspath(path))
        self.tree = tree
        self.meta = json.loads(json.dumps(meta))  # as it reads back
        self.fingerprint = str(fingerprint)
        self.readonly = bool(readonly)
        self.checkpoint_bytes = int(checkpoint_bytes)
        self._lock_fd: int | None = None
        self._jfd: int | None = None
        self.generation = 0
        self.forwards = 0  # forwards the store holds, all processes together
        self.replayed = 0  # journal records replayed on open
        self.torn = 0  # torn records cut off on open
        self._snapshot_bytes = 0
        self._journal_bytes = 0
        self._ntok = 0
        exists = os.path.exists(os.path.join(path, MANIFEST))
        if readonly and not exists:
            raise StoreError(f"store {path}: no {MANIFEST} (a read-only store must exist)")
        if not readonly:
            os.makedirs(path, exist_ok=True)
            self._take_lock()
        try:
            if exists:
                self._open_existing()
            else:
                self._ntok = len(tree.vocab)
                self.checkpoint()
            if not readonly:
                self._open_journal()
                tree.journal = _Journal(self)
        except BaseException:
            self._release()
            raise

    # ------------------------------------------------------------------ lock
    def _take_lock(self) -> None:
        import fcntl

        fd = os.open(os.path.join(self.path, LOCK), os.O_RDWR | os.O_CREAT, 0o666)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:  # maybe a dropped enumerable of this process not yet collected
                gc.collect()
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise StoreError(f"store {self.path}: {LOCK} is held by another writer (a process, or an open "
                             "enumerable in this one: close() it); open with store_readonly=True to read") from None
        self._lock_fd = fd

    def _release(self) -> None:
        if self._jfd is not None:
            os.close(self._jfd)
            self._jfd = None
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # closing releases the flock
            self._lock_fd = None

    def __del__(self) -> None:
        try:
            self._release()  # an enumerable dropped without close(): the journal already holds everything
        except Exception:  # pragma: no cover - interpreter shutdown
            pass

    def close(self) -> None:
        """Write a snapshot if the journal holds anything, then release the lock (idempotent)."""
        if isinstance(self.tree.journal, _Journal) and self.tree.journal.store() is self:
            self.tree.journal = None
        try:
            if not self.readonly and self._jfd is not None and self._journal_bytes:
                self.checkpoint()
        finally:
            self._release()

    # ------------------------------------------------------------------ open
    def _open_existing(self) -> None:
        for attempt in range(3):  # a reader may race a writer's checkpoint: read the new manifest
            m = _read_manifest(self.path)
            try:
                self._load(m)
                return
            except FileNotFoundError as e:
                if not self.readonly or attempt == 2:
                    raise StoreError(f"store {self.path}: {os.path.relpath(e.filename, self.path)} is missing") from None

    def _load(self, m: dict) -> None:
        path = self.path
        if m["meta"] != self.meta:
            keys = list(self.meta) + sorted(set(m["meta"]) - set(self.meta))  # the caller's order: main settings first
            k = next(k for k in keys if m["meta"].get(k) != self.meta.get(k))
            raise StoreError(f"store {path} was built with {k}={m['meta'].get(k)!r}, this enumerable has "
                             f"{k}={self.meta.get(k)!r}")
        if m["fingerprint"] != self.fingerprint:
            raise StoreError(f"store {path} was built with another model (fingerprint {m['fingerprint'][:16]} != "
                             f"{self.fingerprint[:16]})")
        gen = int(m["generation"])
        gdir = os.path.join(path, f"gen-{gen}")
        arrays: dict[str, np.ndarray] = {}
        for name, info in m["files"].items():
            fp = os.path.join(gdir, name + ".npy")
            rel = os.path.relpath(fp, path)
            size = os.path.getsize(fp)  # FileNotFoundError: missing
            if size != int(info["bytes"]):
                raise StoreError(f"store {path}: {rel} is truncated or damaged ({size} bytes, {info['bytes']} expected)")
            if _crc_file(fp) != int(info["crc32"]):
                raise StoreError(f"store {path}: {rel} is damaged (checksum mismatch)")
            try:
                a = np.load(fp, mmap_mode="c" if size > (1 << 16) else None, allow_pickle=False)
            except (ValueError, OSError) as e:
                raise StoreError(f"store {path}: {rel} is not a readable array ({e})") from None
            if a.dtype.str != info["dtype"] or list(a.shape) != info["shape"]:
                raise StoreError(f"store {path}: {rel} has dtype {a.dtype.str} shape {list(a.shape)}, "
                                 f"the manifest says {info['dtype']} {info['shape']}")
            arrays[name] = a
        tree = self.tree
        int_mode, toks = m["tokens"]
        try:
            tree.vocab.restore(int_mode, [decode_token(t) for t in toks])
            tree.import_state(m["tree"], arrays)
        except (ValueError, KeyError, TypeError) as e:
            raise StoreError(f"store {path}: {MANIFEST} does not describe a valid tree ({e})") from None
        self.generation = gen
        self.forwards = int(m["forwards"])
        self._snapshot_bytes = sum(int(f["bytes"]) for f in m["files"].values())
        self._replay(os.path.join(path, f"journal-{gen}.bin"))
        self._ntok = len(tree.vocab)

    def _replay(self, jpath: str) -> None:
        rel = os.path.relpath(jpath, self.path)
        try:
            with open(jpath, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            if self.readonly:
                return
            raise StoreError(f"store {self.path}: {rel} is missing") from None
        pos = 0
        n = len(data)
        tree = self.tree
        stats = tree.oracle.stats
        refetches = stats.refetches
        while pos < n:
            if n - pos < _HDR.size:
                break  # a torn header at the end
            magic, length, crc = _HDR.unpack_from(data, pos)
            end = pos + _HDR.size + length
            if magic != _MAGIC:
                raise StoreError(f"store {self.path}: {rel} is damaged at byte {pos} (bad record header)")
            if end > n:
                break  # torn at the end
            payload = data[pos + _HDR.size : end]
            if zlib.crc32(payload) != crc:
                if end == n:
                    break  # the last record, torn
                raise StoreError(f"store {self.path}: {rel} is damaged at byte {pos} (checksum mismatch)")
            try:
                kind, rec, toks = _decode(payload)
                tree.vocab.append(toks)
                getattr(tree, f"_commit_{kind}")(**rec)
            except (ValueError, KeyError, TypeError, IndexError, AttributeError) as e:
                raise StoreError(f"store {self.path}: {rel} record at byte {pos} cannot be applied ({e})") from None
            if kind == "fetch":
                self.forwards += int(rec["ns"].shape[0])
            self.replayed += 1
            pos = end
        stats.refetches = refetches  # replayed commits are not this process's forwards
        if pos < n:
            self.torn += 1
            if not self.readonly:
                with open(jpath, "r+b") as f:
                    f.truncate(pos)
                    f.flush()
                    os.fsync(f.fileno())
        self._journal_bytes = pos

    # ------------------------------------------------------------------ write
    def _open_journal(self) -> None:
        if self._jfd is not None:
            os.close(self._jfd)
        jpath = os.path.join(self.path, f"journal-{self.generation}.bin")
        self._jfd = os.open(jpath, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o666)
        _fsync_dir(self.path)

    def _append(self, kind: str, rec: dict) -> None:
        """Journal one commit (called by the tree before it applies it); fsynced before returning."""
        if self._journal_bytes > max(self.checkpoint_bytes, 4 * self._snapshot_bytes):
            self.checkpoint()  # everything journaled so far is applied: snapshot it, start afresh
        new = self.tree.vocab.since(self._ntok)
        payload = _encode(kind, rec, _encode_tokens(new))
        buf = _HDR.pack(_MAGIC, len(payload), zlib.crc32(payload)) + payload
        fd = self._jfd
        assert fd is not None
        start = self._journal_bytes
        try:
            os.write(fd, buf)
            os.fsync(fd)
        except BaseException:
            try:  # leave no partial record behind a failed write (the commit is not applied)
                os.ftruncate(fd, start)
            except OSError:
                pass
            raise
        self._journal_bytes = start + len(buf)
        self._ntok += len(new)
        if kind == "fetch":
            self.forwards += int(rec["ns"].shape[0])

    def checkpoint(self) -> None:
        """Write the tree as snapshot generation ``K + 1`` and start its empty journal (atomic: the
        new manifest names only complete, synced files; the old generation is removed after)."""
        if self.readonly:
            raise StoreError(f"store {self.path} is open read-only")
        tree = self.tree
        old = self.generation if os.path.exists(os.path.join(self.path, MANIFEST)) else None
        gen = 0 if old is None else old + 1
        gdir = os.path.join(self.path, f"gen-{gen}")
        if os.path.exists(gdir):
            shutil.rmtree(gdir)  # a checkpoint that died before its manifest
        os.makedirs(gdir)
        scalars, arrays = tree.export_state()
        files = {}
        for name, a in arrays.items():
            fp = os.path.join(gdir, name + ".npy")
            a = np.ascontiguousarray(a)
            with open(fp, "wb") as f:
                w = _CrcWriter(f)
                np.save(w, a, allow_pickle=False)  # through the wrapper: the checksum of what is written
                f.flush()
                os.fsync(f.fileno())
            files[name] = {"bytes": w.n, "crc32": w.crc, "dtype": a.dtype.str, "shape": list(a.shape)}
        _fsync_dir(gdir)
        jpath = os.path.join(self.path, f"journal-{gen}.bin")
        with open(jpath, "wb") as f:
            os.fsync(f.fileno())
        int_mode, toks = tree.vocab.state()
        manifest = {"format": STORE_FORMAT, "version": STORE_VERSION, "generation": gen, "meta": self.meta,
                    "fingerprint": self.fingerprint, "tree": scalars, "files": files,
                    "tokens": [int_mode, _encode_tokens(toks)], "forwards": self.forwards}
        text = json.dumps(manifest, indent=1)
        def write(p: str) -> None:
            with open(p, "w", encoding="utf-8") as f:
                f.write(text)

        atomic_write(os.path.join(self.path, MANIFEST), write)
        # the new generation is committed; the old one goes
        if self._jfd is not None:
            os.close(self._jfd)
            self._jfd = None
        if old is not None and old != gen:
            shutil.rmtree(os.path.join(self.path, f"gen-{old}"), ignore_errors=True)
            try:
                os.unlink(os.path.join(self.path, f"journal-{old}.bin"))
            except FileNotFoundError:
                pass
        self.generation = gen
        self._snapshot_bytes = sum(f["bytes"] for f in files.values())
        self._journal_bytes = 0
        self._ntok = len(toks)
        if not self.readonly and self._lock_fd is not None:
            self._open_journal()


class _Journal:
    """The tree's journal callback, holding its store weakly (no cycle keeps a dropped store's lock)."""

    __slots__ = ("store",)

    def __init__(self, store: TreeStore) -> None:
        self.store = weakref.ref(store)

    def __call__(self, kind: str, rec: dict) -> None:
        st = self.store()
        if st is not None:
            st._append(kind, rec)


# ------------------------------------------------------------------------------------ records
def _encode(kind: str, rec: dict, toks: list) -> bytes:
    arrays = {"kind": np.array(kind)}
    for k, v in rec.items():
        if v is None:
            continue
        arrays["r." + k] = np.asarray(v)
    if toks:
        arrays["tokens"] = np.frombuffer(json.dumps(toks).encode("utf-8"), np.uint8)
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


_SCALARS = {"d": int, "widest": int, "T": float, "truncated": bool}


def _decode(payload: bytes) -> tuple[str, dict, list]:
    with np.load(io.BytesIO(payload), allow_pickle=False) as z:
        kind = str(z["kind"])
        if kind not in ("fetch", "expand", "built"):
            raise ValueError(f"unknown record kind {kind!r}")
        rec: dict[str, Any] = {}
        for k in z.files:
            if k.startswith("r."):
                name = k[2:]
                v = z[k]
                rec[name] = _SCALARS[name](v) if name in _SCALARS else v
        toks = [decode_token(t) for t in json.loads(bytes(z["tokens"]).decode("utf-8"))] if "tokens" in z.files else []
    if kind == "fetch":
        rec.setdefault("eos_lp", None)
    return kind, rec, toks
