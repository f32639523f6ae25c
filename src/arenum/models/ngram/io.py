"""The n-gram model file: a numpy ``.npz`` archive of plain arrays, no pickle.

:func:`save_model` writes one and :func:`load_model` reads one back, checked, as the keyword
arguments of the model's constructor.  Token symbols are stored in a tagged JSON form
(:func:`_tag`) that gives back equal tokens of the same types.  ``docs/ngram.md`` describes the
format and what ``load`` checks.

Everything wrong with a file's content is a one-line ``ValueError`` that names the file; a file
that cannot be opened is the ``OSError`` of ``open``.
"""
from __future__ import annotations

import json
import math
import numbers
import os
import zipfile
from typing import Any, BinaryIO

import numpy as np

from ..._io import atomic_write, read_archive
from ..._validate import exact_int, INT64_MAX
from .fit import KINDS, check_params

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "INFLATE_FLOOR_BYTES",
    "MAX_INFLATE_RATIO",
    "MAX_UNCOMPRESSED_BYTES",
    "TABLES",
    "load_model",
    "save_model",
]

FORMAT = "arenum.ngram"
FORMAT_VERSION = 2  # 2: meta has "lowercase"; version 1 files (no such field) are read as lowercase false
_READS = (1, 2)
#: Names of the per-level arrays; the archive holds ``f"{name}_{L}"`` for L = 0 .. order-1.
TABLES = ("ctx_keys", "ptr", "words", "counts")
#: ``load`` refuses an archive whose entries would inflate to more than this many times the
#: file's size (saved models inflate about 1-11x) ...
MAX_INFLATE_RATIO = 50
#: ... unless they inflate to at most this many bytes in all ...
INFLATE_FLOOR_BYTES = 64 << 20
#: ... and refuses any archive whose entries would inflate to more than this many bytes.
MAX_UNCOMPRESSED_BYTES = 4 << 30
_META_FIELDS = ("kind", "order", "smoothing", "discount", "k", "unknown", "symbols",
                "n_sequences", "n_tokens")


# ------------------------------------------------------------------------ token (de)serializing
def _tag(tok: Any) -> Any:
    """JSON form of a token, with its type kept so that the load gives back an equal token."""
    if isinstance(tok, (bool, np.bool_)):
        return ["b", bool(tok)]
    if isinstance(tok, str):
        return ["s", str(tok)]
    if isinstance(tok, numbers.Integral):
        return ["i", int(tok)]
    if isinstance(tok, numbers.Real):
        return ["f", float(tok)]
    if tok is None:
        return ["n"]
    if isinstance(tok, bytes):
        return ["y", tok.hex()]
    if isinstance(tok, tuple):
        return ["t", [_tag(t) for t in tok]]
    if isinstance(tok, frozenset):
        return ["z", [_tag(t) for t in tok]]
    raise TypeError(
        f"cannot save a token of type {type(tok).__name__} ({tok!r}); supported token types are "
        "str, int, float, bool, None, bytes, and tuples/frozensets of those"
    )


def _untag(obj: Any) -> Any:
    """Inverse of :func:`_tag`; ``ValueError`` for anything :func:`_tag` does not write."""
    kind = obj[0] if isinstance(obj, list) and obj and isinstance(obj[0], str) else None
    n = len(obj) if kind else 0
    if kind == "n" and n == 1:
        return None
    if n != 2:
        raise ValueError(f"{obj!r:.80} is not a tagged token")
    val = obj[1]
    if kind == "s" and isinstance(val, str):
        return val
    if kind == "i" and isinstance(val, int) and not isinstance(val, bool):
        return val
    if kind == "b" and isinstance(val, bool):
        return val
    if kind == "f" and isinstance(val, (int, float)) and not isinstance(val, bool):
        return float(val)
    if kind == "y" and isinstance(val, str):
        return bytes.fromhex(val)
    if kind == "t" and isinstance(val, list):
        return tuple(_untag(t) for t in val)
    if kind == "z" and isinstance(val, list):
        return frozenset(_untag(t) for t in val)
    raise ValueError(f"{obj!r:.80} is not a tagged token")


# ----------------------------------------------------------------------------------- save / load
def save_model(path: str | os.PathLike, *, kind: str, order: int, smoothing: str, discount: float,
               k: float, unknown: str, symbols: list, n_sequences: int, n_tokens: int,
               lowercase: bool = False, **tables: list[np.ndarray]) -> None:
    """Write a model's parameters, symbols and count tables to ``path``, atomically.

    The archive goes to a temp file beside ``path``, is fsynced and renamed over ``path``: if
    anything fails, ``path`` keeps its previous content and no temp file is left.
    """
    if kind == "char":
        syms: list = list(symbols)
    else:
        syms = [_tag(s) for s in symbols]
    meta = {
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "kind": kind,
        "order": order,
        "smoothing": smoothing,
        "discount": discount,
        "k": k,
        "unknown": unknown,
        "symbols": syms,
        "n_sequences": n_sequences,
        "n_tokens": n_tokens,
        "lowercase": bool(lowercase),
    }
    arrays: dict[str, np.ndarray] = {"meta": np.array(json.dumps(meta))}
    for L in range(order):
        for name in TABLES:
            arrays[f"{name}_{L}"] = tables[name][L]

    def write(tmp: str) -> None:
        with open(tmp, "wb") as fh:  # a file object: savez would append ".npz" to a name
            np.savez_compressed(fh, **arrays)

    atomic_write(path, write, suffix=".npz.tmp")


class _Invalid(ValueError):
    """A problem with the file's content; the message goes after the file's name."""


def _bad(what: str) -> _Invalid:
    return _Invalid(f"is not a valid arenum n-gram model file: {what}")


def load_model(path: str | os.PathLike) -> dict[str, Any]:
    """Read and check a file written by :func:`save_model`: the constructor's keyword arguments.

    The caller should still check a sample of rows (the model's ``load`` does).
    """
    return read_archive(path, _read, "n-gram model", _Invalid, lambda name, exc: f"{name} {exc}")


def _read(fh: BinaryIO, size: int) -> dict[str, Any]:
    try:
        zf = zipfile.ZipFile(fh)
    except zipfile.BadZipFile:
        fh.seek(0)
        if fh.read(4) == b"PK\x03\x04":
            raise _bad("damaged or truncated zip archive") from None
        raise _Invalid("is not an arenum n-gram model file (not a .npz archive)") from None
    with zf:
        infos = zf.infolist()
        total = sum(i.file_size for i in infos)
        limit = min(MAX_UNCOMPRESSED_BYTES, max(INFLATE_FLOOR_BYTES, MAX_INFLATE_RATIO * size))
        if total > limit:
            raise _Invalid(
                f"is refused: its entries would inflate to {total:,} bytes, more than the "
                f"{limit:,} allowed for a {size:,}-byte file (at most {MAX_INFLATE_RATIO}x its "
                f"size above {INFLATE_FLOOR_BYTES:,} bytes, and {MAX_UNCOMPRESSED_BYTES:,} bytes "
                "in all)"
            )
        members = {i.filename: i for i in infos}
        if len(members) != len(infos):
            raise _bad("an entry appears twice")
        if "meta.npy" not in members:
            raise _Invalid("is not an arenum n-gram model file (no 'meta' entry)")
        meta = _meta(_array(zf, members["meta.npy"], "meta"))
        fields = _fields(meta)
        order = fields["order"]
        names = [f"{t}_{L}" for t in TABLES for L in range(order)]
        for n in names:
            if f"{n}.npy" not in members:
                raise _bad(f"entry {n!r} is missing (an order-{order} model has {n!r})")
        extra = sorted(set(members) - {f"{n}.npy" for n in names} - {"meta.npy"})
        if extra:
            raise _bad(f"unexpected entry {extra[0]!r} for an order-{order} model")
        tables = {
            t: [_int_array(zf, members[f"{t}_{L}.npy"], f"{t}_{L}") for L in range(order)]
            for t in TABLES
        }
    V = len(fields["symbols"]) + (2 if fields["unknown"] == "unk" else 1)
    _check_tables(tables, order, V, fields["n_tokens"] + fields["n_sequences"])
    return {**fields, **tables}


def _array(zf: zipfile.ZipFile, info: zipfile.ZipInfo, label: str) -> np.ndarray:
    """One ``.npy`` entry, read only after its header agrees with the entry's size."""
    with zf.open(info) as f:
        try:
            version = np.lib.format.read_magic(f)
            if version == (1, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
            elif version == (2, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
            else:
                raise ValueError(f"unsupported .npy format version {version}")
        except ValueError as exc:
            raise _bad(f"entry {label!r} is not a .npy array ({str(exc).splitlines()[0]})") from None
        if dtype.hasobject:
            raise _bad(f"entry {label!r} holds Python objects")
        nbytes = math.prod(shape) * dtype.itemsize
        if f.tell() + nbytes != info.file_size:
            raise _bad(
                f"entry {label!r}: its header announces {nbytes:,} bytes of data, "
                f"the entry holds {info.file_size - f.tell():,}"
            )
        data = f.read(nbytes)
    if len(data) != nbytes:
        raise _bad(f"entry {label!r} is truncated")
    return np.frombuffer(data, dtype=dtype).reshape(shape, order="F" if fortran else "C")


def _int_array(zf: zipfile.ZipFile, info: zipfile.ZipInfo, label: str) -> np.ndarray:
    a = _array(zf, info, label)
    if a.dtype.kind not in "iu" or a.ndim != 1:
        raise _bad(f"{label} must be a 1-d integer array, got {a.ndim}-d {a.dtype}")
    if a.dtype.kind == "u" and a.dtype.itemsize == 8 and len(a) and int(a.max()) > INT64_MAX:
        raise _bad(f"{label} holds a value above 2**63-1")
    return np.array(a, dtype=np.int64)


def _meta(a: np.ndarray) -> dict:
    if a.dtype.kind != "U" or a.shape != ():
        raise _bad(f"entry 'meta' must be a 0-d string array, got {a.ndim}-d {a.dtype}")
    try:
        meta = json.loads(str(a[()]))
    except ValueError as exc:  # JSONDecodeError
        raise _bad(f"entry 'meta' is not JSON ({exc})") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise _Invalid(f"is not an arenum n-gram model file (meta format is not {FORMAT!r})")
    if meta.get("version") not in _READS or isinstance(meta.get("version"), bool):
        raise _Invalid(
            f"has unsupported n-gram file version {meta.get('version')!r} "
            f"(this arenum reads versions {', '.join(map(str, _READS))})"
        )
    return meta


def _fields(meta: dict) -> dict[str, Any]:
    """The model's parameters and symbols from ``meta``, checked as ``fit`` checks them."""
    for key in _META_FIELDS:
        if key not in meta:
            raise _bad(f"meta has no {key!r} field")
    kind = meta["kind"]
    if kind not in KINDS:
        raise _bad(f"kind must be one of 'char', 'token'; got {kind!r}")
    try:
        order, smoothing, discount, k, unknown = check_params(
            meta["order"], meta["smoothing"], meta["discount"], meta["k"], meta["unknown"]
        )
        n_sequences = exact_int("n_sequences", meta["n_sequences"], minimum=1)
        n_tokens = exact_int("n_tokens", meta["n_tokens"], minimum=0)
    except (TypeError, ValueError) as exc:
        raise _bad(str(exc)) from None
    raw = meta["symbols"]
    if not isinstance(raw, list):
        raise _bad(f"symbols must be a list, got {type(raw).__name__}")
    if kind == "char":
        for i, s in enumerate(raw):
            if not (isinstance(s, str) and len(s) == 1):
                raise _bad(f"symbol {i} of a character model is {s!r:.40}, not one character")
            if i and s <= raw[i - 1]:
                raise _bad(f"the symbols of a character model are not in increasing order "
                           f"(symbol {i} {s!r} after {raw[i - 1]!r})")
        symbols = list(raw)
    else:
        symbols = []
        for i, s in enumerate(raw):
            try:
                symbols.append(_untag(s))
            except (ValueError, RecursionError) as exc:
                raise _bad(f"symbol {i}: {str(exc)[:120]}") from None
        if len(set(symbols)) != len(symbols):
            raise _bad("two symbols are equal")
    lowercase = meta.get("lowercase", False) if meta["version"] == 1 else meta.get("lowercase")
    if not isinstance(lowercase, bool):
        raise _bad(f"meta field 'lowercase' must be true or false, got {lowercase!r:.40}")
    return {"kind": kind, "order": order, "smoothing": smoothing, "discount": discount, "k": k,
            "unknown": unknown, "symbols": symbols, "n_sequences": n_sequences,
            "n_tokens": n_tokens, "lowercase": lowercase}


def _check_tables(tables: dict[str, list[np.ndarray]], order: int, V: int, n_pred: int) -> None:
    """The invariants of the count tables that ``fit`` writes (see docs/ngram.md)."""
    B = V + 1
    n_prev = 1  # number of contexts one level down (level 0: the empty context)
    for L in range(order):
        keys, p, w, c = (tables[t][L] for t in TABLES)
        if L == 0:
            if len(keys):
                raise _bad(f"ctx_keys_0 must be empty, has {len(keys)} entries")
            C = 1
        else:
            C = len(keys)
            if not C:
                raise _bad(f"ctx_keys_{L} is empty (every level has the start-of-sequence context)")
            if (keys[0] < 0 or int(keys[-1]) >= n_prev * B):
                raise _bad(f"ctx_keys_{L} holds a key outside [0, {n_prev * B}) "
                           f"({n_prev} contexts at level {L - 1}, V = {V})")
            up = keys[1:] > keys[:-1]
            if not up.all():
                i = int(np.argmin(up))
                raise _bad(f"ctx_keys_{L} is not strictly increasing "
                           f"(entry {i + 1}: {keys[i + 1]} after {keys[i]})")
        if len(p) != C + 1:
            raise _bad(f"ptr_{L} has {len(p)} entries; {C} contexts need {C + 1}")
        if p[0] != 0 or p[-1] != len(w) or not (p[1:] > p[:-1]).all():
            raise _bad(f"ptr_{L} must rise strictly from 0 to len(words_{L}) = {len(w)} "
                       "(every context has a next token)")
        if len(c) != len(w):
            raise _bad(f"counts_{L} has {len(c)} entries, words_{L} has {len(w)}")
        if w.min() < 0 or w.max() >= V:
            raise _bad(f"words_{L} holds a token id outside [0, {V})")
        step = np.diff(w)
        step[p[1:-1] - 1] = 1  # the first token of a context may be below the previous one
        if not (step > 0).all():
            raise _bad(f"words_{L} is not strictly increasing within a context")
        if c.min() <= 0:
            raise _bad(f"counts_{L} holds a count <= 0 ({int(c.min())})")
        if c.sum(dtype=np.float64) >= 2.0**62:
            raise _bad(f"counts_{L} add up to more than 2**62")
        n_prev = C
    total = int(tables["counts"][order - 1].sum())
    if total != n_pred:
        raise _bad(f"the top-level counts add up to {total:,}, but n_tokens + n_sequences = "
                   f"{n_pred:,} (one prediction per token and one EOS per sequence)")
