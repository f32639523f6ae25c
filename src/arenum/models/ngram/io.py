"""The n-gram model file: a numpy ``.npz`` archive of plain arrays, no pickle.

:func:`save_model` writes one and :func:`load_model` reads one back, giving the keyword arguments
of the model's constructor.  Token symbols are stored in a tagged JSON form (:func:`_tag`) that
gives back equal tokens of the same types.  ``docs/ngram.md`` describes the format.
"""
from __future__ import annotations

import json
import numbers
import os
from typing import Any

import numpy as np

from .fit import check_params

__all__ = ["FORMAT", "FORMAT_VERSION", "TABLES", "load_model", "save_model"]

FORMAT = "arenum.ngram"
FORMAT_VERSION = 1
#: Names of the per-level arrays; the archive holds ``f"{name}_{L}"`` for L = 0 .. order-1.
TABLES = ("ctx_keys", "ptr", "words", "counts")


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
    kind = obj[0]
    if kind == "s":
        return obj[1]
    if kind == "i":
        return int(obj[1])
    if kind == "b":
        return bool(obj[1])
    if kind == "f":
        return float(obj[1])
    if kind == "n":
        return None
    if kind == "y":
        return bytes.fromhex(obj[1])
    if kind == "t":
        return tuple(_untag(t) for t in obj[1])
    if kind == "z":
        return frozenset(_untag(t) for t in obj[1])
    raise ValueError(f"unknown token tag {kind!r} in model file")


# ----------------------------------------------------------------------------------- save / load
def save_model(path: str | os.PathLike, *, kind: str, order: int, smoothing: str, discount: float,
               k: float, unknown: str, symbols: list, n_sequences: int, n_tokens: int,
               **tables: list[np.ndarray]) -> None:
    """Write a model's parameters, symbols and count tables to ``path``."""
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
    }
    arrays: dict[str, np.ndarray] = {"meta": np.array(json.dumps(meta))}
    for L in range(order):
        for name in TABLES:
            arrays[f"{name}_{L}"] = tables[name][L]
    with open(path, "wb") as fh:
        np.savez_compressed(fh, **arrays)


def load_model(path: str | os.PathLike) -> dict[str, Any]:
    """Read a file written by :func:`save_model`: the keyword arguments of the model's constructor."""
    with np.load(path, allow_pickle=False) as z:
        if "meta" not in z.files:
            raise ValueError(f"{os.fspath(path)!r} is not an arenum n-gram model file")
        meta = json.loads(str(z["meta"][()]))
        if meta.get("format") != FORMAT:
            raise ValueError(f"{os.fspath(path)!r} is not an arenum n-gram model file")
        if meta.get("version") != FORMAT_VERSION:
            raise ValueError(
                f"unsupported n-gram file version {meta.get('version')!r} "
                f"(this arenum reads version {FORMAT_VERSION})"
            )
        order, smoothing, discount, k, unknown = check_params(
            meta["order"], meta["smoothing"], meta["discount"], meta["k"], meta["unknown"]
        )
        tables = {
            name: [np.asarray(z[f"{name}_{L}"]) for L in range(order)] for name in TABLES
        }
    kind = meta["kind"]
    symbols = list(meta["symbols"]) if kind == "char" else [_untag(s) for s in meta["symbols"]]
    return {
        "order": order,
        "smoothing": smoothing,
        "discount": discount,
        "k": k,
        "unknown": unknown,
        "kind": kind,
        "symbols": symbols,
        "n_sequences": meta["n_sequences"],
        "n_tokens": meta["n_tokens"],
        **tables,
    }
