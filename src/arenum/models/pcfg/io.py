"""The PCFG model file: a numpy ``.npz`` archive of a JSON header and two count arrays, no pickle.

Entries: ``meta`` (a 0-d string array holding JSON: ``format`` ``"arenum.pcfg"``, ``version``,
``lowercase``, ``n_sequences``, ``structures`` (names such as ``"L8D2"``) and ``strings`` (the segment
strings)), ``structure_counts`` and ``string_counts`` (int64, one per name / string).  ``load`` checks
everything a fitted model satisfies (``docs/pcfg.md``) and refuses a damaged or foreign file with a
one-line ``ValueError`` naming the file.
"""
from __future__ import annotations

import io
import json
import os
import zipfile
from typing import Any

import numpy as np

from ..._io import atomic_write, read_archive
from ..ngram.io import INFLATE_FLOOR_BYTES, MAX_INFLATE_RATIO, MAX_UNCOMPRESSED_BYTES
from .grammar import parse_structure, segments, structure_of

__all__ = ["FORMAT", "FORMAT_VERSION", "file_format", "load_pcfg", "save_pcfg"]

FORMAT = "arenum.pcfg"
FORMAT_VERSION = 1
_ENTRIES = {"meta.npy", "structure_counts.npy", "string_counts.npy"}


def save_pcfg(path: str | os.PathLike, *, structures: list[str], structure_counts: np.ndarray, strings: list[str],
              string_counts: np.ndarray, lowercase: bool, n_sequences: int) -> None:
    """Write a model atomically (a temp file beside ``path``, fsynced, renamed over it)."""
    meta = {"format": FORMAT, "version": FORMAT_VERSION, "lowercase": bool(lowercase),
            "n_sequences": int(n_sequences), "structures": list(structures), "strings": list(strings)}
    arrays = {"meta": np.array(json.dumps(meta)), "structure_counts": np.asarray(structure_counts, np.int64),
              "string_counts": np.asarray(string_counts, np.int64)}

    def write(tmp: str) -> None:
        with open(tmp, "wb") as fh:
            np.savez_compressed(fh, **arrays)

    atomic_write(path, write, suffix=".npz.tmp")


class _Invalid(ValueError):
    pass


def _read_meta(zf: zipfile.ZipFile) -> dict:
    a = np.load(io.BytesIO(zf.read("meta.npy")), allow_pickle=False)
    if a.dtype.kind != "U" or a.shape != ():
        raise _Invalid(f"entry 'meta' must be a 0-d string array, got {a.ndim}-d {a.dtype}")
    meta = json.loads(str(a[()]))
    if not isinstance(meta, dict):
        raise _Invalid("entry 'meta' is not a JSON object")
    return meta


def file_format(path: str | os.PathLike) -> str | None:
    """The ``format`` tag of an arenum ``.npz`` model file (``"arenum.pcfg"``, ``"arenum.ngram"``), or
    ``None`` when it has none that can be read (the model's own ``load`` then says why)."""
    try:
        with zipfile.ZipFile(path) as zf:
            info = zf.getinfo("meta.npy")
            if info.file_size > 64 << 20:
                return None
            fmt = _read_meta(zf).get("format")
            return fmt if isinstance(fmt, str) else None
    except Exception:  # noqa: BLE001 -- any unreadable file: no tag
        return None


def load_pcfg(path: str | os.PathLike) -> dict[str, Any]:
    """Read and check a file written by :func:`save_pcfg`: the model constructor's keyword arguments."""
    return read_archive(path, _read, "PCFG model", _Invalid,
                        lambda name, exc: f"{name} is not a valid arenum PCFG model file: {exc}")


def _read(fh: Any, size: int) -> dict[str, Any]:
    if fh.read(4) != b"PK\x03\x04":
        raise _Invalid("not a .npz archive")
    fh.seek(0)
    with zipfile.ZipFile(fh) as zf:
        infos = zf.infolist()
        total = sum(i.file_size for i in infos)
        limit = min(MAX_UNCOMPRESSED_BYTES, max(INFLATE_FLOOR_BYTES, MAX_INFLATE_RATIO * size))
        if total > limit:
            raise _Invalid(f"its entries would inflate to {total:,} bytes, more than the {limit:,} allowed")
        names = {i.filename for i in infos}
        if "meta.npy" not in names:
            raise _Invalid("no 'meta' entry")
        meta = _read_meta(zf)
        if meta.get("format") != FORMAT:
            what = "an n-gram model file (NGramModel.load reads it)" if meta.get("format") == "arenum.ngram" \
                else f"a file of format {meta.get('format')!r:.40}"
            raise _Invalid(f"it is {what}")
        if meta.get("version") != FORMAT_VERSION:
            raise _Invalid(f"unsupported version {meta.get('version')!r:.20} (this arenum reads {FORMAT_VERSION})")
        if names != _ENTRIES:
            raise _Invalid(f"its entries are {sorted(names)}, not {sorted(_ENTRIES)}")
        sc = np.load(io.BytesIO(zf.read("structure_counts.npy")), allow_pickle=False)
        gc = np.load(io.BytesIO(zf.read("string_counts.npy")), allow_pickle=False)
    return _check(meta, sc, gc)


def _counts(label: str, a: np.ndarray, n: int) -> np.ndarray:
    if a.dtype.kind not in "iu" or a.shape != (n,):
        raise _Invalid(f"{label} must be {n} integers, got shape {a.shape} dtype {a.dtype}")
    if n and (int(a.min()) < 1 or int(a.max()) > 2**53):
        raise _Invalid(f"{label} must be counts in [1, 2**53]")
    return a.astype(np.int64)


def _check(meta: dict, sc: np.ndarray, gc: np.ndarray) -> dict[str, Any]:
    """Everything a fitted model satisfies: names parse, strings are single segments, counts add up."""
    for key, kind in (("lowercase", bool), ("n_sequences", int), ("structures", list), ("strings", list)):
        if not isinstance(meta.get(key), kind) or (kind is int and isinstance(meta.get(key), bool)):
            raise _Invalid(f"meta field {key!r} must be a {kind.__name__}")
    structures, strings, n = meta["structures"], meta["strings"], meta["n_sequences"]
    if not structures:
        raise _Invalid("no structures")
    parsed = []
    for i, s in enumerate(structures):
        try:
            parsed.append(parse_structure(s))
        except ValueError as exc:
            raise _Invalid(f"structure {i}: {exc}") from None
    if len(set(structures)) != len(structures):
        raise _Invalid("a structure appears twice")
    sc = _counts("structure_counts", sc, len(structures))
    gc = _counts("string_counts", gc, len(strings))
    if int(sc.sum()) != n:
        raise _Invalid(f"the structure counts add up to {int(sc.sum()):,}, not n_sequences = {n:,}")
    need: dict[tuple[str, int], int] = {}
    for st, c in zip(parsed, sc.tolist()):
        for g in st:
            need[g] = need.get(g, 0) + c
    have: dict[tuple[str, int], int] = {}
    for i, (s, c) in enumerate(zip(strings, gc.tolist())):
        segs = segments(s) if isinstance(s, str) else []
        if len(segs) != 1:
            raise _Invalid(f"string {i} ({s!r:.40}) is not one segment (a non-empty run of one class)")
        g = structure_of(segs)[0]
        have[g] = have.get(g, 0) + c
    if len(set(strings)) != len(strings):
        raise _Invalid("a segment string appears twice")
    for g in sorted(set(need) | set(have)):
        if need.get(g, 0) != have.get(g, 0):
            raise _Invalid(f"the {g[0]}{g[1]} strings count {have.get(g, 0):,} segments, the structures "
                           f"{need.get(g, 0):,}")
    return {"structures": structures, "structure_counts": sc, "strings": strings, "string_counts": gc,
            "lowercase": meta["lowercase"], "n_sequences": n}
