"""The forward store: a prefix tree kept in a directory, crash-safe and resumable.

A store holds everything the exact answers are built from (the tree's levels, their stored
tables, the steering histograms, the interned tokens), so a process that opens it answers every
query inside the built budget without a forward, and a deeper query extends it in place.

Layout of the directory::

    manifest.json      format and version, the settings and fingerprint it was built with, the
                       snapshot generation, every snapshot file with its size and CRC-32
    gen-K/*.npy        the snapshot (format 4, :mod:`arenum.exact.snapshot`): one plain ``.npy``
                       array per kept tree column, narrowed or coded as the manifest's ``encoding``
                       says; derived columns are rebuilt on open, the rest memory-mapped
                       copy-on-write where their type is the tree's own
    journal-K.bin      every commit since snapshot K, appended and fsynced one record at a time
    lock               held (``flock``) by the one process that writes

Crash safety: a commit of the tree (a fetched batch, an expanded level, a finished budget) is
written to the journal *before* it is applied in memory, as one record ``[magic, length, CRC-32 of
the payload, CRC-32 of the header, payload]`` followed by ``fsync``; a process killed at any moment
leaves at most the record in flight torn, which the next writer cuts off (that batch's forwards are
lost, nothing else). Each record carries its sequence number (the tree's commit count before it):
a commit that an exception stopped after its record was written is rolled back in memory and its
record cut from the journal, and if the cut itself fails, the next commit's record carries the same
number and supersedes it (replay applies the last record of each number), so the journal and the
tree agree whatever exception lands where. A snapshot is written to a fresh ``gen-K`` folder,
synced, and only then named by a new manifest (written to a temp file, synced, renamed; it carries
a CRC-32 of its own content); the old generation is removed after. Replaying the journal applies
the records through :meth:`PrefixTree.apply` (:mod:`arenum.exact.records`), so the rebuilt tree is
the same, array for array. No pickle: payloads are raw arrays behind a JSON header. ``close()`` cuts
tables below the budget when a forward costs less than their bytes (:func:`.snapshot.choose_pack`).

Identity: ``fingerprint=`` names the model (the adapters give a hash of their weights or counts).
Without it, the store holds a hash of the model's first-step table *and*, on every open, re-scores
``PROBES`` stored prefixes drawn at random and compares them with the stored tables (``PROBES``
forwards): a model whose tables differ from the stored ones at a fraction ``f`` of the stored
prefixes opens anyway with probability at most ``(1 - f) ** PROBES`` (a store of at most ``PROBES``
prefixes is checked whole). See ``docs/store.md`` for the table of guarantees.

Refusals, each a one-line :class:`StoreError` naming the file: a missing, truncated or corrupted
file (sizes and checksums, the manifest's included), a journal record damaged before its end or out
of sequence, another format version, a store built with other settings or another model (the
fingerprint, the probes), an unreadable folder, and a second writer (the lock).
"""
from __future__ import annotations

import errno
import gc
import hashlib
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
from ..step import StepOracle, decode_token
from .records import decode_record, encode_record
from .snapshot import choose_pack, note_offsets, unpack_state
from .storefiles import (JOURNAL_MAGIC, MANIFEST, STORE_FORMAT, STORE_VERSION, CrcWriter, check_file,
                         encode_tokens, fsync_dir, manifest_crc, orphans, read_manifest, read_record, short_pair)
from .tree import PrefixTree

__all__ = ["TreeStore", "root_fingerprint", "open_store", "PROBES", "cluster_workers"]

LOCK = "lock"
READONLY_HINT = "open with store_readonly=True to read"
"""The API's advice on a store it cannot open for writing (the command line words it its own way)."""
WRITER_HINT = "(a process, or an open enumerable in this one: close() it)"
"""Who may hold a store's lock, in the API's words."""
PROBES = 32
"""Stored prefixes re-scored on opening a store without ``fingerprint=`` (module docstring)."""
_CHECKPOINT_MIN = 1 << 30
"""A build snapshots when its journal passes this and four times the snapshot (bounded replay,
amortized writes)."""


def root_fingerprint(oracle: StepOracle) -> str:
    """A hash of the model's root table: tokens and log-probs (one forward; the oracle memoizes the
    table, so a new tree reuses it)."""
    ids, lps = oracle.table(())
    toks = encode_tokens(list(oracle.vocab.tokens(ids)))
    h = hashlib.sha256(json.dumps(toks).encode("utf-8"))
    h.update(np.ascontiguousarray(lps, np.float64).tobytes())
    return "root:" + h.hexdigest()


def open_store(path: Any, tree: PrefixTree, settings: Any, fingerprint: str | None,
               readonly: Any, *, probe: bool | None = None) -> "TreeStore | None":
    """The store of an enumerable (``None`` without a ``path``): the settings that decide answers
    (:meth:`arenum.settings.Settings.store_checked`) as the store's meta, ``fingerprint`` or the root
    table's hash (:func:`root_fingerprint`), in which case stored prefixes are re-scored on open
    (``probe``, default: when no fingerprint is given)."""
    if path is None:
        if readonly or fingerprint is not None:
            raise ValueError("store_readonly and fingerprint apply to a store: give store=PATH")
        return None
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"store must be a folder path, got {type(path).__name__}")
    if os.fspath(path) in ("", b""):
        raise ValueError("store must name a folder, got '' (use store='.' for the working directory)")
    if fingerprint is not None and not isinstance(fingerprint, str):
        raise TypeError(f"fingerprint must be a string, got {type(fingerprint).__name__}")
    fp = fingerprint if fingerprint is not None else root_fingerprint(tree.oracle)
    meta = {k: _plain(v) for k, v in settings.store_checked().items()}
    return TreeStore(path, tree, meta=meta, fingerprint=fp, readonly=bool(readonly),
                     probe=fingerprint is None if probe is None else probe)


def cluster_workers(path: Any) -> int:
    """How many workers' stores the folder ``path`` holds (``cluster.json`` and ``worker-K``
    folders, written by :class:`arenum.distributed.DistributedEnumerable`); 0 for a single-process
    store, an empty or missing folder. Such a folder is refused as a single-process store
    (:class:`TreeStore`): building one inside it would re-pay every forward, unseen by the cluster."""
    if path is None or not os.path.isdir(path):
        return 0
    n = 0
    while os.path.isdir(os.path.join(path, f"worker-{n}")):
        n += 1
    if n == 0 and os.path.exists(os.path.join(path, "cluster.json")):
        try:
            with open(os.path.join(path, "cluster.json"), encoding="utf-8") as f:
                n = int(json.load(f)["workers"])
        except (OSError, ValueError, KeyError, TypeError):
            n = 1  # a cluster file, whatever it says: not a single-process store
    return n


def _plain(v: Any) -> Any:
    """A setting as JSON: numbers and flags as they are, anything else (a token: ``eos``) encoded."""
    if v is None or isinstance(v, (bool, np.bool_)):
        return None if v is None else bool(v)
    if isinstance(v, (int, np.integer)):
        return int(v)
    if isinstance(v, (float, np.floating)):
        return float(v)
    return encode_tokens([v])[0]


# ------------------------------------------------------------------------------------ the store
class TreeStore:
    """A :class:`~arenum.exact.tree.PrefixTree` kept in the directory ``path`` (module docstring).

    Opening an existing store loads the snapshot (memory-mapped) and replays the journal into
    ``tree`` (which must be fresh); a new store starts with a snapshot of ``tree``. ``meta`` (the
    settings that decide answers) and ``fingerprint`` (the model's identity) must equal the stored
    ones; ``probe``: also re-score :data:`PROBES` stored prefixes drawn at random and compare them
    with the stored tables (module docstring). ``readonly``: no lock, nothing written (a deeper
    query deepens in memory only).
    """

    def __init__(self, path: str | os.PathLike, tree: PrefixTree, *, meta: dict, fingerprint: str,
                 readonly: bool = False, checkpoint_bytes: int = _CHECKPOINT_MIN, probe: bool = False) -> None:
        self.path = path = os.path.abspath(os.fspath(path))
        self.tree = tree
        self.meta = json.loads(json.dumps(meta))  # as it reads back
        self.fingerprint = str(fingerprint)
        self.readonly = bool(readonly)
        self.checkpoint_bytes = int(checkpoint_bytes)
        self._lock_fd: int | None = None
        self._lock_io: Any = None  # the lock's file object: its C-level dealloc closes it if __del__ is cut short
        self._jfd: int | None = None
        self.generation = 0
        self.forwards = 0  # forwards the store holds, all processes together
        self.replayed = 0  # journal records replayed on open
        self.torn = 0  # torn records cut off on open
        self._snapshot_bytes = 0
        self._journal_bytes = 0
        self._ntok = 0
        self._probe = bool(probe)
        self._last: tuple[int, int, int, int] | None = None  # (seq, start, tokens, forwards) of the last record
        self.probed = 0  # stored prefixes re-scored on open
        self.probe_forwards = 0  # the forwards they cost (a probed root is memoized: none)
        self._detached: tuple | None = None  # after a failed write: what the store was (_detach)
        self.keep_tables: bool | None = None  # close(): keep tables whole (None: by cost); cut: the last snapshot did
        self.cut, self._cost = False, (0.0, 0)  # _cost: (model seconds, forwards) of the processes before this one
        self._version, self._offsets = STORE_VERSION, []  # the manifest's version; row offsets (note_offsets)
        self._stats0 = (tree.oracle.stats.model_seconds, tree.oracle.stats.forwards)
        if os.path.isdir(path) and not os.access(path, os.R_OK | os.X_OK):
            raise StoreError(f"store {path}: permission denied (the folder cannot be read)")
        if n := cluster_workers(path):
            raise StoreError(f"store {path} holds a {n}-worker cluster's stores (worker-0 .. worker-{n - 1}): open "
                             f"it with workers={n} (DistributedEnumerable(..., {n}, store=...), on the command line "
                             f"--workers {n}), or give another folder")
        exists = os.path.exists(os.path.join(path, MANIFEST))
        if readonly and not exists:
            raise StoreError(f"store {path}: no {MANIFEST} (a read-only store must exist)")
        if not exists and (left := orphans(path)):
            raise StoreError(f"store {path}: {MANIFEST} is missing but the folder holds a store's files ({left}): "
                             f"damaged; restore the manifest, or give another folder (nothing was changed)")
        if not readonly:
            try:
                os.makedirs(path, exist_ok=True)
            except OSError as e:
                raise StoreError(f"store {path}: the folder cannot be made ({e.strerror or e})") from None
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

        try:
            fd = os.open(os.path.join(self.path, LOCK), os.O_RDWR | os.O_CREAT, 0o666)
        except OSError as e:
            why = "permission denied" if e.errno in (errno.EACCES, errno.EPERM) else (e.strerror or str(e))
            raise StoreError(f"store {self.path}: {LOCK} cannot be opened ({why}); {READONLY_HINT}") from None
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:  # maybe a dropped enumerable of this process not yet collected
                gc.collect()
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise StoreError(f"store {self.path}: {LOCK} is held by another writer {WRITER_HINT}; "
                             f"{READONLY_HINT}") from None
        try:
            self._lock_io = open(fd, "r+b", buffering=0)  # owns fd: released when dropped, whatever runs or not
        except BaseException:
            os.close(fd)
            raise
        self._lock_fd = fd

    def _release(self) -> None:
        jfd, self._jfd = self._jfd, None
        if jfd is not None:
            os.close(jfd)
        lio, self._lock_io, self._lock_fd = self._lock_io, None, None
        if lio is not None:
            lio.close()  # closing releases the flock

    def __del__(self) -> None:
        try:
            self._release()  # an enumerable dropped without close(): the journal already holds everything
        except Exception:  # pragma: no cover - interpreter shutdown
            pass
        # an exception landing here (a signal handler) is ignored; the lock's file object's dealloc closes it

    def close(self, cut: bool = True) -> None:
        """Write a snapshot if the journal holds anything, then release the lock (idempotent). A tree
        that fails its own check is never saved: the store keeps its last snapshot and journal. Its
        tables are cut below the budget when a forward costs less than their bytes (:mod:`.snapshot`),
        unless ``cut`` is False (a build interrupted before its end: the build resumed needs them)."""
        tree = self.tree
        try:
            if not self.readonly and self._jfd is not None and self._journal_bytes:
                tree.recover()
                try:
                    tree._check()
                except AssertionError as e:  # pragma: no cover - a bug: keep what is on disk
                    raise StoreError(f"store {self.path}: the tree fails its check ({e}); not saved, the store "
                                     "keeps its last snapshot and journal") from None
                self.checkpoint(final=cut)
        finally:
            if isinstance(tree.journal, _Journal) and tree.journal.store() is self:
                tree.journal = None
            self._release()

    # ------------------------------------------------------------------ open
    def _open_existing(self) -> None:
        for attempt in range(3):  # a reader may race a writer's checkpoint: read the new manifest
            m = read_manifest(self.path)
            try:
                self._load(m)
                return
            except FileNotFoundError as e:
                if not self.readonly or attempt == 2:
                    raise StoreError(f"store {self.path}: {os.path.relpath(e.filename, self.path)} is missing") from None
            except (KeyError, TypeError, AttributeError) as e:
                raise StoreError(f"store {self.path}: {MANIFEST} does not describe a store "
                                 f"({e.__class__.__name__}: {e})") from None

    def _load(self, m: dict) -> None:
        path = self.path
        if m["meta"] != self.meta:
            keys = list(self.meta) + sorted(set(m["meta"]) - set(self.meta))  # the caller's order: main settings first
            k = next(k for k in keys if m["meta"].get(k) != self.meta.get(k))
            if k == "constraint":  # a store answers for the support it was built on, and no other
                a, b = ("no constraint" if c is None else f"the constraint {decode_token(c)!r}"
                        for c in (m["meta"].get(k), self.meta.get(k)))
                raise StoreError(f"store {path} was built under {a}; this enumerable has {b}")
            raise StoreError(f"store {path} was built with {k}={m['meta'].get(k)!r}, this enumerable has "
                             f"{k}={self.meta.get(k)!r}")
        if m["fingerprint"] != self.fingerprint:
            stored, (a, b) = str(m["fingerprint"]), short_pair(str(m["fingerprint"]), self.fingerprint)
            j, w = stored.rsplit("|worker:", 1)[1].partition("/")[::2] if "|worker:" in stored else ("", "")
            if w and stored.split("|plan:")[0] == self.fingerprint:  # this model's store, one worker's part of it
                raise StoreError(f"store {path} is worker {j}'s part of a {w}-worker distributed store (this model's, "
                                 f"split by its plan): open its parent folder with workers={w}")
            hint = f"; it is one worker's part of a distributed store: open its parent folder with workers={w}"
            raise StoreError(f"store {path} was built with another model (fingerprint {a} != {b})"
                             f"{hint if w and '|worker:' not in self.fingerprint else ''}")
        gen = int(m["generation"])
        gdir = os.path.join(path, f"gen-{gen}")
        arrays: dict[str, np.ndarray] = {}
        for name, info in m["files"].items():
            fp = os.path.join(gdir, name + ".npy")
            rel = os.path.relpath(fp, path)
            size = check_file(path, fp, info)  # FileNotFoundError: missing
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
            if m["version"] >= 3:  # narrowed, derived columns (arenum.exact.snapshot); version 2: as they are
                arrays = unpack_state(m["tree"], arrays, m["encoding"], eos_id=tree.eos_id, offsets=self._offsets)
                self._cost = (float(m["cost"][0]), int(m["cost"][1]))
            tree.import_state(m["tree"], arrays)
        except (ValueError, KeyError, TypeError, IndexError) as e:
            raise StoreError(f"store {path}: {MANIFEST} does not describe a valid tree ({e})") from None
        self.generation, self._version = gen, int(m["version"])
        self.forwards = int(m["forwards"])
        self._snapshot_bytes = sum(int(f["bytes"]) for f in m["files"].values())
        self._replay(os.path.join(path, f"journal-{gen}.bin"))
        self._ntok = len(tree.vocab)
        if self._probe:
            self._check_probes()

    def _replay(self, jpath: str) -> None:
        """Apply the journal's records to the tree one at a time, as they are read (memory: the record
        applied and the next one, read ahead to see whether it supersedes it). A torn last record is
        cut off (not read-only); a record damaged before the end, unreadable or out of sequence is
        refused in one line (:class:`StoreError`; the tree, half replayed, is then dropped with the
        store that failed to open)."""
        rel = os.path.relpath(jpath, self.path)
        try:
            f = open(jpath, "rb")
        except FileNotFoundError:
            if self.readonly:
                return
            raise StoreError(f"store {self.path}: {rel} is missing") from None
        tree = self.tree
        stats = tree.oracle.stats
        refetches = stats.refetches
        with f:
            n = os.fstat(f.fileno()).st_size
            pos = 0
            prev = tree.commits
            pending: tuple | None = None  # (start, decoded record) read, not yet applied
            while True:
                got = read_record(f, pos, n, f"store {self.path}: {rel}")
                if got is None:
                    break
                payload, end = got
                try:
                    dec = (pos,) + decode_record(payload)
                except (ValueError, KeyError, TypeError) as e:
                    raise StoreError(f"store {self.path}: {rel} record at byte {pos} cannot be read ({e})") from None
                del payload, got
                if pending is not None:
                    prev = self._apply_replayed(pending, prev, superseded=dec[3] == pending[3], rel=rel)
                pending, pos = dec, end
            if pending is not None:
                self._apply_replayed(pending, prev, superseded=False, rel=rel)
                pending = None
        stats.refetches = refetches  # replayed commits are not this process's forwards
        if pos < n:
            self.torn += 1
            if not self.readonly:
                with open(jpath, "r+b") as f:
                    f.truncate(pos)
                    f.flush()
                    os.fsync(f.fileno())
        self._journal_bytes = pos

    def _apply_replayed(self, dec: tuple, prev: int, *, superseded: bool, rel: str) -> int:
        """Apply one decoded journal record (``superseded``: the next record has its number, so only
        its tokens are taken: module docstring); returns the sequence number expected next."""
        start, kind, rec, seq, int_mode, toks, tok0 = dec
        tree = self.tree
        if seq != prev:
            raise StoreError(f"store {self.path}: {rel} record at byte {start} is out of sequence "
                             f"({seq} after {prev})")
        try:
            vocab = tree.vocab
            if int_mode is not None and vocab.int_mode is None:  # decided after the snapshot
                vocab.restore(int_mode, vocab.state()[1])
            toks = [decode_token(t) for t in toks]
            have = len(vocab)
            if tok0 > have or vocab.since(tok0) != toks[: have - tok0]:
                raise ValueError(f"its tokens start at id {tok0}, the store holds {have}")
            vocab.append(toks[have - tok0 :])
            if superseded:
                return seq  # its commit did not complete in memory (module docstring)
            tree.apply(kind, rec, seq)
        except (ValueError, KeyError, TypeError, IndexError) as e:
            raise StoreError(f"store {self.path}: {rel} record at byte {start} cannot be applied ({e})") from None
        if kind == "fetch":
            self.forwards += int(rec["ns"].shape[0])
        note_offsets(self._offsets, kind, rec)
        self.replayed += 1
        return seq + 1

    def _check_probes(self) -> None:
        """Re-score up to :data:`PROBES` stored prefixes drawn at random and compare their stored heads
        (``StoreError`` naming the first that differs): the identity check of a store opened without
        ``fingerprint=`` (module docstring). Their forwards: ``probe_forwards``."""
        tree = self.tree
        st, f0 = tree.oracle.stats, tree.oracle.stats.forwards
        try:
            self._rescore_probes(tree)
        finally:
            self.probe_forwards += st.forwards - f0

    def _rescore_probes(self, tree: PrefixTree) -> None:
        sizes = [int(tree.view(d).fetched.sum()) for d in range(tree.n_levels)]
        total = sum(sizes)
        rng = np.random.default_rng()
        pick = np.sort(rng.choice(total, size=min(PROBES, total), replace=False)) if total else np.zeros(0, np.int64)
        bounds, o, pre = np.cumsum(sizes), tree.oracle, tree.vocab.tokens(tree.prefix)
        for d in range(tree.n_levels):
            lo = bounds[d] - sizes[d]
            mine = pick[(pick >= lo) & (pick < bounds[d])] - lo
            if mine.size == 0:
                continue
            v = tree.view(d)
            nodes = np.flatnonzero(v.fetched)[mine]
            paths = tree.token_paths(d, nodes)
            prefixes = [pre + tree.vocab.tokens(r) for r in paths]
            h = o.fetch_heads(prefixes, np.full(len(prefixes), -np.inf))
            offs = np.cumsum(h.lens) - h.lens
            for i, node in enumerate(nodes.tolist()):
                ids = h.ids[offs[i] : offs[i] + h.lens[i]]
                lps = h.lps[offs[i] : offs[i] + h.lens[i]]
                keep = v.score[node] + lps >= v.floor[node] if v.floor[node] > -np.inf else np.ones(lps.shape[0], bool)
                a, b = int(v.off[node]), int(v.off[node] + v.tlen[node])
                fresh = sorted(zip(lps[keep].tolist(), ids[keep].tolist()))
                stored = sorted(zip(v.pool_lp[a:b].tolist(), v.pool_tok[a:b].tolist()))
                self.probed += 1
                if fresh != stored:
                    raise StoreError(f"store {self.path} was built with another model: the stored table at a prefix "
                                     f"of length {d} differs from this model's (fingerprint {self.fingerprint[:21]} "
                                     "matches; give fingerprint= to name a model)")

    # ------------------------------------------------------------------ write
    def _open_journal(self) -> None:
        if self._jfd is not None:
            os.close(self._jfd)
            self._jfd = None
        jpath = os.path.join(self.path, f"journal-{self.generation}.bin")
        self._jfd = os.open(jpath, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o666)
        fsync_dir(self.path)

    def _append(self, kind: str, rec: dict, seq: int) -> None:
        """Journal commit ``seq`` (called by the tree before it applies it); fsynced before returning.
        A failed write (``OSError``: a full disk) leaves no partial record and releases the lock, so
        an enumerable kept alive by the error's traceback (a notebook) does not hold the store; the
        next commit takes it again if the store is as it was (:meth:`_reattach`)."""
        try:
            if self._detached is not None:
                self._reattach()
            self._write(kind, rec, seq)
        except OSError:
            self._detach()
            raise

    def _detach(self) -> None:
        """Release the lock and the journal after a failed write, remembering what the store was."""
        if self._lock_fd is None:
            return
        try:
            if self._jfd is not None:
                os.ftruncate(self._jfd, self._journal_bytes)  # complete, applied records only
            st = os.stat(os.path.join(self.path, f"journal-{self.generation}.bin"))
            if st.st_size != self._journal_bytes:
                raise OSError("the journal's end is unknown")
            self._detached = (self.generation, st.st_ino, st.st_size, st.st_mtime_ns)
        except OSError:  # the journal's end is unknown: the next commit refuses (reopen the store)
            self._detached = (self.generation, -1, -1, -1)
        self._release()

    def _reattach(self) -> None:
        """Take the lock and the journal again after :meth:`_detach`, if no other writer changed the
        store meanwhile (``StoreError`` otherwise: the tree in memory no longer matches it)."""
        self._take_lock()
        try:
            jpath = os.path.join(self.path, f"journal-{self.generation}.bin")
            try:
                st = os.stat(jpath)
                now = (int(read_manifest(self.path)["generation"]), st.st_ino, st.st_size, st.st_mtime_ns)
            except (OSError, StoreError, KeyError, TypeError, ValueError):
                now = None
            if now != self._detached:
                raise StoreError(f"store {self.path} changed after a failed write released its lock (another "
                                 "writer, or the journal's end could not be restored); open it again")
            self._open_journal()
        except BaseException:
            self._release()
            raise
        self._detached = None

    def _write(self, kind: str, rec: dict, seq: int) -> None:
        if self._journal_bytes > max(self.checkpoint_bytes, 4 * self._snapshot_bytes):
            self.checkpoint()  # everything journaled so far is applied: snapshot it, start afresh
        vocab = self.tree.vocab
        new = vocab.since(self._ntok)
        payload = encode_record(kind, rec, seq, vocab.int_mode, encode_tokens(new), self._ntok, self._version >= 4)
        hdr = struct.pack("<4sQI", JOURNAL_MAGIC, len(payload), zlib.crc32(payload))
        buf = hdr + struct.pack("<I", zlib.crc32(hdr)) + payload
        fd = self._jfd
        if fd is None:
            raise StoreError(f"store {self.path} is closed")
        start = os.lseek(fd, 0, os.SEEK_END)  # the file's end, whatever an exception left uncounted
        if start > self._journal_bytes and (self._last is None or self._last[0] != seq):
            os.ftruncate(fd, self._journal_bytes)  # a partial record a failed cut left: not ours to follow
            start = self._journal_bytes
        last = self._last
        if last is not None and last[0] == seq:  # it supersedes a record whose commit did not complete
            first, ntok, fwd = last[1], last[2], last[3]
        else:
            first, ntok, fwd = start, self._ntok, self.forwards
        self._last = (seq, first, ntok, fwd)  # before the write: rollback(seq) cuts whatever of it is there
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
        self.forwards = fwd + (int(rec["ns"].shape[0]) if kind == "fetch" else 0)
        note_offsets(self._offsets, kind, rec)

    def rollback(self, seq: int) -> None:
        """Cut commit ``seq``'s records from the journal if they are the last (its commit was rolled
        back in memory); if the cut fails, the next record of ``seq`` supersedes them on replay."""
        last = self._last
        if last is None or last[0] != seq or self._jfd is None:
            return
        _, start, ntok, fwd = last
        try:
            os.ftruncate(self._jfd, start)
            os.fsync(self._jfd)
        except OSError:
            return
        self._journal_bytes, self._ntok, self.forwards = start, ntok, fwd
        self._last = None

    def cost(self) -> tuple[float, int]:
        """``(model seconds, forwards)`` of all who built this store (seconds: the declared cost if any)."""
        st, per = self.tree.oracle.stats, self.tree.oracle.declared_forward_seconds
        fw = self._cost[1] + st.forwards - self._stats0[1]
        return (per * fw if per is not None else self._cost[0] + st.model_seconds - self._stats0[0], fw)

    def checkpoint(self, final: bool = False) -> None:
        """Write the tree as snapshot generation ``K + 1`` and start its empty journal (atomic: the
        new manifest names only complete, synced files; the old generation is removed after).
        ``final`` (``close()``): the tables may be cut (:func:`.choose_pack`; not in memory)."""
        if self.readonly:
            raise StoreError(f"store {self.path} is open read-only")
        tree = self.tree
        old = self.generation if os.path.exists(os.path.join(self.path, MANIFEST)) else None
        gen = 0 if old is None else old + 1
        gdir = os.path.join(self.path, f"gen-{gen}")
        if os.path.exists(gdir):
            shutil.rmtree(gdir)  # a checkpoint that died before its manifest
        os.makedirs(gdir)
        scalars, arrays, enc, self.cut = choose_pack(tree, self.cost() if final else None, self.keep_tables, self._offsets)
        files = {}
        for name, a in arrays.items():
            fp = os.path.join(gdir, name + ".npy")
            a = np.ascontiguousarray(a)
            with open(fp, "wb") as f:
                w = CrcWriter(f)
                np.save(w, a, allow_pickle=False)  # through the wrapper: the checksum of what is written
                f.flush()
                os.fsync(f.fileno())
            files[name] = {"bytes": w.n, "crc32": w.crc, "dtype": a.dtype.str, "shape": list(a.shape)}
        fsync_dir(gdir)
        jpath = os.path.join(self.path, f"journal-{gen}.bin")
        with open(jpath, "wb") as f:
            os.fsync(f.fileno())
        int_mode, toks = tree.vocab.state()
        manifest = {"format": STORE_FORMAT, "version": STORE_VERSION, "generation": gen, "meta": self.meta,
                    "fingerprint": self.fingerprint, "tree": scalars, "files": files,
                    "tokens": [int_mode, encode_tokens(toks)], "forwards": self.forwards, "encoding": enc,
                    "cost": list(self.cost())}
        manifest["crc32"] = manifest_crc(manifest)
        text = json.dumps(manifest, indent=1)

        def write(p: str) -> None:
            with open(p, "w", encoding="utf-8") as f:
                f.write(text)

        atomic_write(os.path.join(self.path, MANIFEST), write)
        # the new generation is committed; the old one goes
        jfd, self._jfd = self._jfd, None
        if jfd is not None:
            os.close(jfd)
        self.generation, self._version = gen, STORE_VERSION
        self._snapshot_bytes = sum(f["bytes"] for f in files.values())
        self._journal_bytes = 0
        self._ntok = len(toks)
        self._last = None
        if old is not None and old != gen:
            shutil.rmtree(os.path.join(self.path, f"gen-{old}"), ignore_errors=True)
            try:
                os.unlink(os.path.join(self.path, f"journal-{old}.bin"))
            except FileNotFoundError:
                pass
        if not self.readonly and self._lock_fd is not None:
            self._open_journal()


class _Journal:
    """The tree's journal callback, holding its store weakly (no cycle keeps a dropped store's lock)."""

    __slots__ = ("store",)

    def __init__(self, store: TreeStore) -> None:
        self.store = weakref.ref(store)

    def __call__(self, kind: str, rec: dict, seq: int) -> None:
        st = self.store()
        if st is not None:
            st._append(kind, rec, seq)

    def rollback(self, seq: int) -> None:
        st = self.store()
        if st is not None:
            st.rollback(seq)

