"""The tree's commit records: every kind in one table, and their bytes in a store's journal.

A :class:`~arenum.exact.tree.PrefixTree` changes only by commits, each one record of a kind below;
:meth:`PrefixTree.apply` applies a record (all or nothing), and a store's journal keeps them in
order, each with its sequence number (the tree's ``commits`` before it). The table is the schema:
what each kind holds, and how its scalars read back.

==========  ============================================================  =====================
kind        arrays                                                        scalars
==========  ============================================================  =====================
``fetch``   ``ns kid klp klen cut keeps eos_j``, ``eos_lp`` (terminating),   ``d`` int, ``widest`` int
            ``koff`` (each row's offset, where the model gave one)
``expand``  ``node j tok score cand made``                                ``d`` int
``built``   (none)                                                        ``T`` float, ``truncated`` bool
==========  ============================================================  =====================

Token ids travel in the narrowest type holding them (:func:`narrow_ids`). A fetch record whose
rows all have an offset (``koff``: the adapter's per-row log-sum-exp, a transformer's) that rebuilds
each log-prob bit for bit as ``float64(float32 value) - koff`` (:func:`f32_rows` checks every one)
carries ``klp`` as those float32 values, 4 bytes an entry, and is rebuilt on reading; any other keeps
``klp`` in float64. The tree itself ignores ``koff`` (a store keeps it for its snapshot). Bytes (:func:`encode_record`): a JSON header (the kind, the sequence number, the token mode of the
model, the tokens interned since the last record with the id of the first, so a token written twice
is interned once, and each array's dtype and shape) and the arrays' raw bytes; no archive, no pickle.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from ._arrays import Grow
from .levels import Level
from .._validate import LN2

__all__ = ["RecordKind", "RECORDS", "check_record", "encode_record", "decode_record", "HIST_BINS_PER_BIT",
           "HIST_LEN", "bin_of", "narrow_ids", "f32_rows", "from_f32_rows"]

HIST_BINS_PER_BIT = 64
"""The steering histograms' bins per bit of score."""
HIST_LEN = HIST_BINS_PER_BIT * 8192 + 1
_INT32_MIN, _INT32_MAX = int(np.iinfo(np.int32).min), int(np.iinfo(np.int32).max)


def narrow_ids(ids: np.ndarray) -> np.ndarray:
    """Token ids in the narrowest of uint16, int32 that holds them all (else as they are): what a
    fetch record carries (a 50,257-token vocabulary: 2 bytes an entry in the journal, not 8)."""
    if ids.size == 0:
        return ids.astype(np.uint16)
    lo, hi = int(ids.min()), int(ids.max())
    if 0 <= lo and hi <= 0xFFFF:
        return ids.astype(np.uint16)
    if _INT32_MIN <= lo and hi <= _INT32_MAX:
        return ids.astype(np.int32, copy=ids.dtype != np.int32)
    return ids


def f32_rows(lp: np.ndarray, off: np.ndarray, lens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(values, ok)``: ``float32(lp + off)`` of every entry (rows of ``lens`` entries, ``off`` one
    float64 per row) and, per row, whether :func:`from_f32_rows` rebuilds each of its log-probs bit for
    bit from them (checked here, entry by entry; a NaN offset never does; an empty row does)."""
    lp = np.ascontiguousarray(lp, np.float64)
    o = np.repeat(np.asarray(off, np.float64), lens)
    with np.errstate(invalid="ignore", over="ignore"):
        v = (lp + o).astype(np.float32)
        back = v.astype(np.float64)
        back -= o  # exactly what from_f32_rows computes
    bad = back.view(np.int64) != lp.view(np.int64)
    ok = np.ones(lens.shape[0], np.bool_)
    if bad.any():
        ok[np.repeat(np.arange(lens.shape[0]), lens)[bad]] = False
    return v, ok


def from_f32_rows(v: np.ndarray, off: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """float64 log-probs ``float64(v) - off`` (``off`` one per row of ``lens`` entries): the inverse of
    :func:`f32_rows` for the rows it found exact."""
    out = v.astype(np.float64)
    out -= np.repeat(np.asarray(off, np.float64), lens)
    return out


@dataclass(frozen=True)
class RecordKind:
    """One kind of commit: its array fields, its scalar fields (name -> type), the optional ones, and
    ``apply(tree, **record, undo=list)``, which changes the tree after ``undo`` learns how to take
    each change back (everything else is computed first)."""

    arrays: tuple[str, ...]
    scalars: dict[str, type]
    apply: Callable[..., None]
    optional: tuple[str, ...] = ()

    @property
    def fields(self) -> tuple[str, ...]:
        return self.arrays + tuple(self.scalars)


def check_record(kind: str, rec: dict) -> RecordKind:
    """The kind's schema, after checking ``rec`` holds exactly its fields (``ValueError`` otherwise)."""
    spec = RECORDS.get(kind)
    if spec is None:
        raise ValueError(f"unknown record kind {kind!r}")
    need = set(spec.fields) - set(spec.optional)
    have = {k for k, v in rec.items() if v is not None}
    if not need <= have or not have <= set(spec.fields):
        raise ValueError(f"a {kind} record holds {sorted(have)}, not the fields {sorted(spec.fields)}")
    return spec


def encode_record(kind: str, rec: dict, seq: int, int_mode: bool | None, toks: list, tok0: int,
                  f32: bool = True) -> bytes:
    """The bytes of one record (``toks``: JSON forms of the tokens interned since the last one, the
    first with id ``tok0``): a JSON header (kind, numbers, tokens, and each array's dtype, shape and
    size), its length in 4 bytes before it, then the arrays' bytes. No archive, no pickle. ``f32``:
    a fetch record's log-probs as float32 values where their offsets rebuild them (module docstring;
    a store of format version 4)."""
    check_record(kind, rec)
    spec = RECORDS[kind]
    if f32 and kind == "fetch" and rec.get("koff") is not None and rec["klp"].size:
        v32, ok = f32_rows(rec["klp"], rec["koff"], rec["klen"])
        if ok.all():  # every row rebuilt bit for bit: 4 bytes an entry
            rec = {**rec, "klp": v32}
    fields, blobs = [], []
    for k, v in rec.items():
        if v is None:
            continue
        if k in spec.scalars:
            fields.append([k, spec.scalars[k](v)])
            continue
        a = np.ascontiguousarray(v)
        fields.append([k, a.dtype.str, list(a.shape), a.nbytes])
        blobs.append(a.tobytes())
    head = json.dumps({"kind": kind, "seq": int(seq), "tok0": int(tok0), "mode": int_mode, "tokens": toks,
                       "fields": fields}, separators=(",", ":")).encode("utf-8")
    return len(head).to_bytes(4, "little") + head + b"".join(blobs)


def decode_record(payload: bytes) -> tuple[str, dict, int, bool | None, list, int]:
    """``(kind, record, seq, int_mode, token JSON forms, first token id)`` of :func:`encode_record`'s
    bytes (``ValueError`` if they do not hold a record of a known kind with its fields)."""
    n = int.from_bytes(payload[:4], "little")
    try:
        head = json.loads(payload[4 : 4 + n].decode("utf-8"))
        kind, seq, tok0, mode, toks, fields = (head[k] for k in ("kind", "seq", "tok0", "mode", "tokens", "fields"))
    except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as e:
        raise ValueError(f"the record's header is not readable ({e.__class__.__name__})") from None
    spec = RECORDS.get(kind)
    if spec is None:
        raise ValueError(f"unknown record kind {kind!r}")
    rec: dict[str, Any] = {k: None for k in spec.optional}
    pos = 4 + n
    for f in fields:
        if f[0] in spec.scalars:
            rec[f[0]] = spec.scalars[f[0]](f[1])
            continue
        name, dt, shape, nbytes = f
        dtype = np.dtype(dt)
        if dtype.hasobject or nbytes != dtype.itemsize * int(np.prod(shape, dtype=np.int64)):
            raise ValueError(f"field {name} has dtype {dt} and {nbytes} bytes for shape {shape}")
        rec[name] = np.frombuffer(payload, dtype, count=nbytes // dtype.itemsize, offset=pos).reshape(shape).copy()
        pos += nbytes
    if pos != len(payload):
        raise ValueError(f"the record holds {len(payload) - pos} bytes past its fields")
    check_record(kind, rec)
    if kind == "fetch" and rec["klp"].dtype != np.float64:  # float32 values and each row's offset
        koff, klen = rec.get("koff"), rec["klen"]
        if (rec["klp"].dtype != np.float32 or koff is None or koff.dtype != np.float64 or klen.ndim != 1
                or koff.shape != klen.shape or klen.dtype.kind not in "iu" or int(klen.sum()) != rec["klp"].shape[0]):
            raise ValueError("a fetch record's float32 log-probs lack their row offsets")
        rec["klp"] = from_f32_rows(rec["klp"], koff, klen)
    return kind, rec, int(seq), None if mode is None else bool(mode), list(toks), int(tok0)


# ------------------------------------------------------------------------------------ applying
def apply_fetch(tree: Any, d: int, ns: np.ndarray, kid: np.ndarray, klp: np.ndarray, klen: np.ndarray,
                  cut: np.ndarray, keeps: np.ndarray, eos_j: np.ndarray, eos_lp: np.ndarray | None,
                  widest: int, undo: list, kx: np.ndarray | None = None, koff: np.ndarray | None = None) -> None:
    """Store the fetched heads of nodes ``ns`` of level ``d`` (a journal replays exactly this;
    ``kx``, each entry's score, is derived when not given; a given one is the caller's temporary,
    overwritten here; ``koff`` is a store's, not the tree's). Everything is computed first, then each
    change is made after ``undo`` learns how to take it back."""
    lev = tree.levels[d]
    is_leaf = d == tree.leaf_level
    eos = tree.eos_id
    m = ns.shape[0]
    if ns.shape != eos_j.shape or ns.shape != keeps.shape or klen.sum() != klp.shape[0] != kid.shape[0]:
        raise ValueError("a fetch record's columns do not match")
    refetch = lev.fetched[ns].copy()
    old_floor = np.where(refetch, lev.floor[ns], math.inf)  # entries below it are new
    if kx is None:
        kx = np.repeat(lev.score[ns], klen)
        kx += klp  # s + lp, the score of each entry
    widen = lev.pool_tok.a.dtype != np.int64 and kid.size > 0 and not (
        _INT32_MIN <= kid.min() <= kid.max() <= _INT32_MAX)
    offs = lev.pool_lp.n + (np.cumsum(klen) - klen)
    # steering histograms over the stored entries not stored before
    if refetch.any():
        fresh = kx < np.repeat(old_floor, klen)
        fx, fid = kx[fresh], kid[fresh]
    else:
        fx, fid = kx, kid
    adds = _bin_counts(tree, fx, fid, eos, is_leaf)
    c = lev.cols
    names = ["off", "tlen", "floor", "eos_j", "fetched"] + (["eos_lp"] if eos is not None else [])
    olds = {k: c[k].a[ns].copy() for k in names}
    n_lp, n_tok = lev.pool_lp.n, lev.pool_tok.n
    tok_a = lev.pool_tok.a if widen else None  # (held only then: a held array cannot be remapped)

    def back() -> None:
        lev.drop_view()
        for k in names:
            c[k].a[ns] = olds[k]
        lev.pool_lp.truncate(n_lp)
        if tok_a is not None and lev.pool_tok.a is not tok_a:  # widened
            lev.pool_tok = _restore(tok_a, n_tok)
        lev.pool_tok.truncate(n_tok)
    undo.append(back)
    spans = [(h, (lo, h[lo : lo + n.shape[0]].copy())) for h, lo, n, _ in adds]
    undo.append(lambda: [_put(h, sp) for h, sp in spans])
    # the changes
    lev.drop_view()
    if widen:
        tree._used_bytes += lev.pool_tok.n * 4  # int32 -> int64
        lev.pool_tok.widen(np.int64)
    tree._widest = widest
    for h, lo, n, top in adds:
        h[lo : lo + n.shape[0]] += n
        tree.hist_top = max(tree.hist_top, top)  # bins from hist_top on stay zero (arenum.exact.frontier.hist_cum)
    lev.pool_lp.extend(klp)
    lev.pool_tok.extend(kid)
    tree._used_bytes += klp.shape[0] * (8 + lev.pool_tok.a.itemsize)
    tree._pool_entries += klp.shape[0]
    c["off"].a[ns] = offs
    c["tlen"].a[ns] = klen
    c["floor"].a[ns] = np.where(cut, keeps, -math.inf)
    c["eos_j"].a[ns] = eos_j
    if eos is not None:
        c["eos_lp"].a[ns] = eos_lp
    c["fetched"].a[ns] = True
    nref = int(refetch.sum())
    tree.oracle.stats.refetches += nref
    tree.fetched_nodes += m - nref


def apply_expand(tree: Any, d: int, node: np.ndarray, j: np.ndarray, tok: np.ndarray, score: np.ndarray,
                   cand: np.ndarray, made: np.ndarray, undo: list) -> None:
    """Append the children ``node``/``j`` of level ``d`` and advance ``made`` (journaled)."""
    if not node.shape == j.shape == tok.shape == score.shape or cand.shape != made.shape:
        raise ValueError("an expand record's columns do not match")
    lev = tree.levels[d]
    old_made = lev.cols["made"].a[cand].copy()
    kid = tree.levels[d + 1] if d + 1 < len(tree.levels) else None
    n_kid = len(kid) if kid is not None else 0

    def back() -> None:
        lev.cols["made"].a[cand] = old_made
        if kid is not None:
            kid.drop_view()
            for g in kid.cols.values():
                g.truncate(n_kid)
    undo.append(back)
    if kid is None:
        tree.levels.append(Level(d + 1, tree.eos_id is not None))
    tree.levels[d + 1].append(node, j, tok, score)
    tree._used_bytes += node.shape[0] * tree._node_bytes
    lev.cols["made"].a[cand] = made


def apply_built(tree: Any, T: float, truncated: bool, undo: list) -> None:
    """The tree is complete for threshold ``T`` (journaled)."""
    tree.depth_truncated, tree.built = truncated, T


RECORDS: dict[str, RecordKind] = {
    "fetch": RecordKind(("ns", "kid", "klp", "klen", "cut", "keeps", "eos_j", "eos_lp", "koff"),
                        {"d": int, "widest": int}, apply_fetch, optional=("eos_lp", "koff")),
    "expand": RecordKind(("node", "j", "tok", "score", "cand", "made"), {"d": int}, apply_expand),
    "built": RecordKind((), {"T": float, "truncated": bool}, apply_built),
}
"""The commit kinds of a prefix tree (module docstring)."""


def _bin_counts(tree: Any, fx: np.ndarray, fid: np.ndarray, eos: int | None, is_leaf: bool
                ) -> list[tuple[np.ndarray, int, np.ndarray, int]]:
    """What a fetch adds to the steering histograms: ``(hist, lo, counts, top)`` for each histogram
    it changes, ``hist[lo + i] += counts[i]``, ``top`` one past its last bin added to. An entry of
    score ``x`` (``<= 0``) lands in bin ``min(int(-x / LN2 * HIST_BINS_PER_BIT), HIST_LEN - 1)``;
    completions (``eos`` entries, every entry at the leaf level of a fixed-length tree) count in
    ``h_comp``, other entries in ``h_pref`` (none at the leaf level). ``fx`` is overwritten (a
    temporary: a fresh array each round would cost more in first touches than the arithmetic)."""
    if fx.shape[0] == 0:
        return []
    ib = bin_of(fx, out=fx)
    lo, hi = int(ib.min()), int(ib.max())
    ib -= lo
    w = hi - lo + 1
    if eos is None:
        return [(tree.h_comp if is_leaf else tree.h_pref, lo, c, lo + _last(c)) for c in [np.bincount(ib, minlength=w)]]
    is_eos = fid == eos
    ce = np.bincount(ib[is_eos], minlength=w)
    out = [(tree.h_comp, lo, ce, lo + _last(ce))] if ce.any() else []
    if not is_leaf:
        cp = np.bincount(ib, minlength=w)
        cp -= ce
        if cp.any():
            out.append((tree.h_pref, lo, cp, lo + _last(cp)))
    return out


def bin_of(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """The steering histograms' bin of entries of scores ``x`` (``<= 0``): ``min(floor(-x / LN2 *
    HIST_BINS_PER_BIT), HIST_LEN - 1)``. ``out``: a float64 temporary to compute in (``x`` itself may be)."""
    b = np.divide(x, -LN2 / HIST_BINS_PER_BIT, out=out)  # == -x / LN2 * 64 exactly: scaling by 2**6 is exact
    np.minimum(b, HIST_LEN - 1, out=b)
    return b.astype(np.int64)  # b >= 0: the floor


def _last(c: np.ndarray) -> int:
    """One past the last nonzero entry of ``c`` (some entry is nonzero)."""
    return int(np.flatnonzero(c)[-1]) + 1


def _put(hist: np.ndarray, span: tuple[int, np.ndarray]) -> None:
    lo, vals = span
    hist[lo : lo + vals.shape[0]] = vals


def _restore(a: np.ndarray, n: int) -> Grow:
    g = Grow.wrap(a)
    g.n = n
    return g
