"""What a store's snapshot keeps of a prefix tree (format version 4), and how the tree is read back.

A snapshot keeps what is dear to recompute and not what is cheap:

- **Derived, not written**: a node's token and score (its parent's table entry: ``tok`` is the
  entry's id, ``score`` the parent's score plus the entry's log-prob, the same float64 sum the tree
  made), ``off`` (the heads are written back to back in node order), and the ``eos`` position and
  log-prob of each head (found in the head itself).
- **Narrowed**: every integer column in the smallest signed type that holds its values (token ids
  in an unsigned 8- or 16-bit type where that is narrower: a 50,257-token vocabulary in 2 bytes), the
  ``floor`` column as codes into its distinct values when it has few, and the log-probs of the
  heads as float32 when every value survives the round trip exactly (a model computing in float32
  and widening); otherwise float64. What is read back equals what was written, bit for bit.
  A head whose model gave its row's offset (a transformer's log-sum-exp: ``offsets``) is written
  as its float32 values plus that one float64 (encoding ``f32off``) where :func:`.records.f32_rows`
  finds every entry rebuilt bit for bit; the other heads of the level stay float64.
- **Cut** (:func:`pack_state` with ``cut``): each stored head keeps only its entries with
  ``score + lp >= cut`` (and every entry already turned into a child node); its ``floor`` says so,
  so a deeper query scores that prefix again (a forward, counted as one) where the whole table
  would have answered. :class:`~arenum.exact.store.TreeStore` cuts when a forward costs less than
  keeping the bytes it saves (``docs/store.md``); answers inside the built budget need no entry
  below it, so opening stays free of forwards.

:func:`pack_state` turns :meth:`PrefixTree.export_state` into the files to write and their
encodings; :func:`unpack_state` turns the files read back into what :meth:`PrefixTree.import_state`
takes (``ValueError`` if they do not describe a tree).
"""
from __future__ import annotations

import math

import numpy as np

from .levels import COLUMNS
from .records import bin_of, f32_rows, from_f32_rows, narrow_ids
from .._validate import LN2

__all__ = ["pack_state", "unpack_state", "choose_pack", "measure_cut", "note_offsets", "DERIVED", "SECONDS_PER_BYTE"]

DERIVED = ("tok", "score", "off", "eos_j", "eos_lp")
"""Level columns a version-3 or 4 snapshot does not write (module docstring)."""
SECONDS_PER_BYTE = 3e-8
"""What a byte of a stored table costs to keep: written to the journal, then to a snapshot with its
checksum (measured: ``close()`` wrote 320 MB in 7.1 s, 22 ns a byte), and read back on open (4 ns). ``close()`` cuts the stored tables below the built budget
when scoring a prefix again costs less than keeping the bytes the cut saves (:mod:`.snapshot`)."""
_INTS = (np.int8, np.int16, np.int32, np.int64)
_DICT_MAX = 255  # a float column with at most this many distinct values is written as uint8 codes
_CHUNK = 1 << 16  # nodes per pass when cutting heads (keeps temporaries small)


def _narrow(a: np.ndarray) -> np.ndarray:
    """``a`` (integers) in the smallest signed type holding every value."""
    if a.size == 0:
        return a.astype(np.int8)
    lo, hi = int(a.min()), int(a.max())
    for t in _INTS:
        info = np.iinfo(t)
        if info.min <= lo and hi <= info.max:
            return a if a.dtype == t else a.astype(t)
    return a


def _narrow_ids(a: np.ndarray) -> np.ndarray:
    """Token ids (never negative) in the smallest type holding them: the journal's rule
    (:func:`~.records.narrow_ids`), and one byte (uint8) where every id fits in one."""
    if a.size == 0:
        return a.astype(np.int8)
    out = narrow_ids(a)
    return a.astype(np.uint8) if out.dtype == np.uint16 and int(a.max()) <= 0xFF else out


def _floats(name: str, a: np.ndarray, files: dict, enc: dict) -> None:
    """Write float64 column ``a``: codes into its distinct values, float32, or as it is."""
    if a.size > _DICT_MAX and np.unique(a[:: max(1, a.size // 4096)]).size <= _DICT_MAX:  # a sample first
        vals = np.unique(a)  # -inf, inf and finite values; no NaN in a tree
        if vals.size <= _DICT_MAX and not np.isnan(vals).any():
            files[name] = np.searchsorted(vals, a).astype(np.uint8)
            files[name + "~values"] = vals
            enc[name] = "dict"
            return
    f32 = a.astype(np.float32)
    if np.array_equal(f32.astype(np.float64), a):
        files[name], enc[name] = f32, "f32"
    else:
        files[name] = a


def measure_cut(scalars: dict, arrays: dict[str, np.ndarray], cut: float,
                offsets: list | None = None) -> tuple[list, dict]:
    """What cutting at ``cut`` keeps (:func:`pack_state`), without packing anything: per level the
    kept entries per node and the new floors, and ``cut_nodes``, ``dropped_entries`` and
    ``dropped_bytes`` (each dropped entry at the width its level's column is written in when
    uncut: the decision's estimate, see :func:`choose_pack`)."""
    per, info = [], {"cut_nodes": 0, "dropped_entries": 0, "dropped_bytes": 0}
    for d in range(int(scalars["n_levels"])):
        p = f"L{d}."
        score, off, tlen = arrays[p + "score"], arrays[p + "off"].astype(np.int64), arrays[p + "tlen"].astype(np.int64)
        floor = np.array(arrays[p + "floor"], np.float64)
        made = arrays[p + "made"].astype(np.int64)
        pool_lp = arrays[p + "pool_lp"]
        keep = tlen.copy()
        for a in range(0, score.shape[0], _CHUNK):
            sl = slice(a, a + _CHUNK)
            keep[sl], floor[sl] = _cut(pool_lp, score[sl], off[sl], tlen[sl], made[sl], floor[sl], cut)
        per.append((keep, floor))
        dropped = int(tlen.sum() - keep.sum())
        info["cut_nodes"] += int((keep < tlen).sum())
        info["dropped_entries"] += dropped
        if dropped:
            f32 = bool((tlen > 0).any()) and bool(np.isfinite(_level_offsets(offsets, d, tlen.shape[0])[tlen > 0]).all())
            info["dropped_bytes"] += dropped * _entry_bytes(pool_lp, arrays[p + "pool_tok"], f32)
    return per, info


def _entry_bytes(pool_lp: np.ndarray, pool_tok: np.ndarray, f32: bool = False) -> int:
    """Bytes of one entry as a level's whole pool would be written (:func:`_floats`, :func:`_narrow`;
    ``f32``: every head has its row's offset, float32 values assumed exact)."""
    f32 = f32 or np.array_equal(pool_lp.astype(np.float32).astype(np.float64), pool_lp)
    return (4 if f32 else 8) + _narrow_ids(np.array([pool_tok.min(), pool_tok.max()])).itemsize


def note_offsets(offsets: list, kind: str, rec: dict) -> None:
    """Keep a fetch record's row offsets (``koff``; other kinds: nothing) in ``offsets`` (per level, one float64 a node, NaN
    where none is known) for the next snapshot. A stale one (a commit rolled back, a prefix fetched
    again) costs bytes, never a value: :func:`pack_state` checks every head it writes with one."""
    koff = rec.get("koff") if kind == "fetch" else None
    if koff is None or not rec["ns"].size:
        return
    d, ns = int(rec["d"]), rec["ns"]
    while len(offsets) <= d:
        offsets.append(np.full(0, np.nan))
    have = offsets[d].shape[0]
    if have <= int(ns.max()):
        grown = np.full(max(int(ns.max()) + 1, 2 * have), np.nan)
        grown[:have] = offsets[d]
        offsets[d] = grown
    offsets[d][ns] = koff


def _level_offsets(offsets: list | None, d: int, m: int) -> np.ndarray:
    """The offsets of level ``d``'s ``m`` nodes (NaN where none is known)."""
    out = np.full(m, np.nan)
    if offsets is not None and d < len(offsets) and offsets[d] is not None:
        a = offsets[d][:m]
        out[: a.shape[0]] = a
    return out


def _pool_with_offsets(p: str, lp: np.ndarray, keep: np.ndarray, lo: np.ndarray, files: dict, enc: dict) -> bool:
    """Write level ``p``'s pool as float32 values plus each head's offset where that rebuilds it bit
    for bit (``f32off``): ``pool_lp`` float32 (those heads' entries), ``pool_lp~f64`` float64 (the
    other heads' entries), ``pool_lp~off`` (one float64 per non-empty head, NaN: in ``~f64``).
    False (nothing written) when no head qualifies."""
    nz = keep > 0
    if not np.isfinite(lo[nz]).any():
        return False
    v, ok = f32_rows(lp, lo, keep)
    ok &= nz
    if not ok.any():
        return False
    mask = np.repeat(ok, keep)
    if 4 * int(mask.sum()) + 8 * (int((~mask).sum()) + int(nz.sum())) >= 8 * lp.shape[0]:
        return False  # short heads: an offset a head costs more than the 4 bytes an entry saves
    files[p + "pool_lp"] = v[mask]
    files[p + "pool_lp~f64"] = lp[~mask]
    files[p + "pool_lp~off"] = np.where(ok, lo, np.nan)[nz]
    enc[p + "pool_lp"] = "f32off"
    return True


def pack_state(scalars: dict, arrays: dict[str, np.ndarray], *, eos_id: int | None,
               cut: float | None, measured: list | None = None, offsets: list | None = None,
               leaf_level: int | None = None) -> tuple[dict, dict[str, np.ndarray], dict[str, str], dict]:
    """``(scalars, files, encodings, cut)`` of a tree's exported state (module docstring); ``cut`` says
    how many nodes had entries cut (``cut_nodes``), and the entries and bytes cut. ``cut``: keep
    only head entries with ``score + lp >= cut`` (per node at most the score of its last made child,
    so every child keeps its entry); ``None`` keeps every stored entry. ``measured``: the per-level
    cut :func:`measure_cut` already computed for this ``cut`` (not computed again). Heads superseded
    by a later fetch of their prefix are dropped either way. ``offsets``: per level, each node's row
    offset where known (a store's, from the fetch records' ``koff``; NaN elsewhere). The steering
    histograms count the stored entries: a cut takes its entries out of them (``leaf_level``, the
    tree's, says where every entry is a completion), so that a prefix scored again after the cut
    counts them once, as a tree that never stored them would."""
    n = int(scalars["n_levels"])
    files: dict[str, np.ndarray] = {}
    enc: dict[str, str] = {}
    entries = 0
    used = 0
    info = {"cut_nodes": 0, "dropped_entries": 0, "dropped_bytes": 0}
    hists = {k: np.array(arrays[k], np.int64) for k in ("h_comp", "h_pref")}
    if cut is not None and measured is None:
        measured = measure_cut(scalars, arrays, cut, offsets)[0]
    for d in range(n):
        p = f"L{d}."
        score, off, tlen = arrays[p + "score"], arrays[p + "off"].astype(np.int64), arrays[p + "tlen"].astype(np.int64)
        made = arrays[p + "made"].astype(np.int64)
        pool_lp, pool_tok = arrays[p + "pool_lp"], arrays[p + "pool_tok"]
        if cut is not None:
            keep, floor = measured[d]
            if (keep < tlen).any():
                _uncount(hists, score, off, tlen, keep, pool_lp, pool_tok, eos_id, d == leaf_level)
        else:
            keep, floor = tlen, np.asarray(arrays[p + "floor"], np.float64)
        total = int(keep.sum())
        dropped = int(tlen.sum()) - total
        idx = np.repeat(off - (np.cumsum(keep) - keep), keep) + np.arange(total, dtype=np.int64)
        lp, tok = pool_lp[idx], pool_tok[idx]
        entries += total
        files[p + "parent"] = _narrow(arrays[p + "parent"])
        files[p + "child"] = _narrow(arrays[p + "child"])
        files[p + "fetched"] = np.asarray(arrays[p + "fetched"], np.bool_)
        files[p + "tlen"] = _narrow(keep)
        files[p + "made"] = _narrow(made)
        _floats(p + "floor", floor, files, enc)
        files[p + "pool_tok"] = _narrow_ids(tok)
        if not _pool_with_offsets(p, lp, keep, _level_offsets(offsets, d, keep.shape[0]), files, enc):
            _floats(p + "pool_lp", lp, files, enc)
        info["cut_nodes"] += int((keep < tlen).sum())
        info["dropped_entries"] += dropped
        info["dropped_bytes"] += dropped * ((4 if enc.get(p + "pool_lp") in ("f32", "f32off") else 8)
                                            + files[p + "pool_tok"].itemsize)
        tok_bytes = 4 if tok.size == 0 or (np.iinfo(np.int32).min <= int(tok.min()) and int(tok.max()) <= np.iinfo(np.int32).max) else 8
        node_bytes = sum(np.dtype(t).itemsize for t in COLUMNS.values()) + (8 if eos_id is not None else 0)
        used += score.shape[0] * node_bytes + total * (8 + tok_bytes)
    for k, h in hists.items():
        files[k] = _narrow(h[: int(np.flatnonzero(h)[-1]) + 1] if h.any() else h[:0])
    out = dict(scalars)
    out["pool_entries"], out["used_bytes"] = entries, used
    return out, files, enc, info


def _uncount(hists: dict[str, np.ndarray], score: np.ndarray, off: np.ndarray, tlen: np.ndarray, keep: np.ndarray,
             pool_lp: np.ndarray, pool_tok: np.ndarray, eos_id: int | None, is_leaf: bool) -> None:
    """Take a level's cut entries (each head's past ``keep``) out of the steering histograms, in the
    bins the fetch put them in (:func:`arenum.exact.records.bin_of`)."""
    m = tlen.shape[0]
    rep = np.repeat(np.arange(m), tlen)
    pos = np.arange(rep.shape[0], dtype=np.int64) - np.repeat(np.cumsum(tlen) - tlen, tlen)
    gone = pos >= keep[rep]
    at = off[rep[gone]] + pos[gone]
    b = bin_of(score[rep[gone]] + pool_lp[at])
    if eos_id is None:  # as records._bin_counts counts them: every leaf entry a completion
        parts = {"h_comp" if is_leaf else "h_pref": b}
    else:  # eos entries completions; the others next-level prefixes, none at the leaf level
        eos = pool_tok[at] == eos_id
        parts = {"h_comp": b[eos]} if is_leaf else {"h_comp": b[eos], "h_pref": b[~eos]}
    for k, bins in parts.items():
        if bins.size:
            h = hists[k]
            if int(bins.max()) >= h.shape[0]:
                raise ValueError(f"a cut entry lies past {k}'s last bin")
            h -= np.bincount(bins, minlength=h.shape[0])
            if (h < 0).any():
                raise ValueError(f"{k} would count fewer entries than the tree stores")


def _cut(pool_lp: np.ndarray, s: np.ndarray, off: np.ndarray, tlen: np.ndarray, made: np.ndarray,
         floor: np.ndarray, cut: float) -> tuple[np.ndarray, np.ndarray]:
    """Per node: how many head entries to keep, and the new floor (module docstring)."""
    m = s.shape[0]
    total = int(tlen.sum())
    if total == 0:
        return tlen, floor
    rep = np.repeat(np.arange(m), tlen)
    pos = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(tlen) - tlen, tlen)
    x = s[rep] + pool_lp[off[rep] + pos]  # each entry's score, as the tree computes it
    k = np.full(m, cut)
    hm = made > 0
    if hm.any():  # never below a made child's score: its entry stays
        last = np.cumsum(tlen)[hm] - tlen[hm] + made[hm] - 1
        k[hm] = np.minimum(cut, x[last])
    keep = np.bincount(rep[x >= k[rep]], minlength=m).astype(np.int64)
    cutme = keep < tlen
    new_floor = floor.copy()
    new_floor[cutme] = np.maximum(floor[cutme], k[cutme])
    return keep, new_floor


def unpack_state(scalars: dict, files: dict[str, np.ndarray], enc: dict[str, str], *,
                 eos_id: int | None, offsets: list | None = None) -> dict[str, np.ndarray]:
    """The arrays :meth:`PrefixTree.import_state` takes, from a version-3 or 4 snapshot's files
    (``ValueError`` if they do not describe a tree); ``offsets`` (a list) is set to each level's row
    offsets (NaN where none was kept)."""
    n = int(scalars["n_levels"])
    if offsets is not None:
        offsets.clear()
    out: dict[str, np.ndarray] = {}
    for k in ("h_comp", "h_pref"):
        out[k] = _int(files, enc, k, np.int64)
    prev: dict[str, np.ndarray] | None = None
    for d in range(n):
        p = f"L{d}."
        c = {k: _int(files, enc, p + k, COLUMNS[k]) for k in ("parent", "child", "tlen", "made")}
        c["fetched"] = np.asarray(files[p + "fetched"])
        if c["fetched"].dtype != np.bool_:
            raise ValueError(f"{p}fetched has dtype {c['fetched'].dtype}")
        c["floor"] = _float(files, enc, p + "floor")
        if enc.get(p + "pool_lp") == "f32off":
            lp, lo = _pool_from_offsets(files, p, c["tlen"])
        else:
            lp, lo = _float(files, enc, p + "pool_lp"), np.full(c["tlen"].shape[0], np.nan)
        if offsets is not None:
            offsets.append(lo)
        tok = files[p + "pool_tok"]
        if tok.dtype.kind not in "iu" or tok.shape != lp.shape or p + "pool_tok" in enc or (tok.dtype.kind == "u" and tok.dtype.itemsize > 2):
            raise ValueError(f"{p}pool_tok does not match {p}pool_lp")
        small = tok.size == 0 or (np.iinfo(np.int32).min <= int(tok.min()) and int(tok.max()) <= np.iinfo(np.int32).max)
        tok = tok.astype(np.int32 if small else np.int64, copy=tok.dtype.itemsize > 4 or not small)
        m = c["parent"].shape[0]
        if any(c[k].shape != (m,) for k in c):
            raise ValueError(f"level {d}: columns of different lengths")
        tl = c["tlen"].astype(np.int64)
        if (tl < 0).any() or int(tl.sum()) != lp.shape[0] or (c["made"] < 0).any() or (c["made"] > tl).any():
            raise ValueError(f"level {d}: heads do not match the pool")
        off = np.cumsum(tl) - tl
        c["off"] = off
        if d == 0:
            if m != 1:
                raise ValueError("level 0 holds one node")
            c["tok"], c["score"] = np.full(1, -1, np.int64), np.zeros(1)
        else:
            assert prev is not None
            par, ch = c["parent"], c["child"]
            if m and ((par < 0).any() or (par >= prev["score"].shape[0]).any() or (ch < 0).any()
                      or (ch >= prev["made"][par]).any()):
                raise ValueError(f"level {d}: a node's parent entry is not in the stored tree")
            pidx = prev["off"][par] + ch
            c["tok"] = prev["pool_tok"][pidx].astype(np.int64)
            c["score"] = prev["score"][par] + prev["pool_lp"][pidx]  # the tree's own sum
        ej = np.full(m, -1, np.int32)
        if eos_id is not None:
            hit = np.flatnonzero(tok == eos_id)
            if hit.size:
                r = np.searchsorted(off, hit, side="right") - 1
                ej[r] = (hit - off[r]).astype(np.int32)
            elp = np.full(m, -math.inf)
            has = ej >= 0
            elp[has] = lp[off[has] + ej[has]]
            c["eos_lp"] = elp
        c["eos_j"] = ej
        c["pool_lp"], c["pool_tok"] = lp, tok
        for k, a in c.items():
            out[p + k] = a
        prev = c
    return out


def _pool_from_offsets(files: dict, p: str, tlen: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Level ``p``'s pool and per-node offsets from an ``f32off`` encoding (:func:`_pool_with_offsets`)."""
    v, raw, ro = files[p + "pool_lp"], files[p + "pool_lp~f64"], files[p + "pool_lp~off"]
    tl = tlen.astype(np.int64)
    nz = np.flatnonzero(tl > 0)
    if v.dtype != np.float32 or raw.dtype != np.float64 or ro.dtype != np.float64 or ro.shape != nz.shape \
            or v.ndim != 1 or raw.ndim != 1 or (tl < 0).any():
        raise ValueError(f"{p}pool_lp's float32 values do not match their offsets")
    lo = np.full(tl.shape[0], np.nan)
    lo[nz] = ro
    ok = np.isfinite(lo)
    mask = np.repeat(ok, tl)
    if int(mask.sum()) != v.shape[0] or mask.shape[0] - v.shape[0] != raw.shape[0]:
        raise ValueError(f"{p}pool_lp's float32 values do not match their heads")
    lp = np.empty(mask.shape[0])
    lp[mask] = from_f32_rows(v, lo[ok], tl[ok])
    lp[~mask] = raw
    return lp, lo


def _int(files: dict, enc: dict, name: str, dtype: type) -> np.ndarray:
    a = files[name]
    if a.dtype.kind not in "iu" or a.ndim != 1 or name in enc:
        raise ValueError(f"{name} has dtype {a.dtype} and shape {a.shape}")
    return a.astype(dtype, copy=a.dtype != np.dtype(dtype))


def _float(files: dict, enc: dict, name: str) -> np.ndarray:
    a = files[name]
    how = enc.get(name)
    if how == "dict":
        vals = files[name + "~values"]
        if a.dtype != np.uint8 or vals.dtype != np.float64 or (a.size and int(a.max()) >= vals.shape[0]):
            raise ValueError(f"{name} has codes outside its values")
        return vals[a]
    if how == "f32":
        if a.dtype != np.float32:
            raise ValueError(f"{name} has dtype {a.dtype}, not float32")
        return a.astype(np.float64)
    if how is not None or a.dtype != np.float64 or a.ndim != 1:
        raise ValueError(f"{name} has dtype {a.dtype} (encoding {how})")
    return a


def choose_pack(tree, cost: tuple[float, int] | None, keep_tables: bool | None,
                offsets: list | None = None) -> tuple[dict, dict, dict, bool]:
    """``(scalars, files, encodings, cut)``: the snapshot of ``tree``, its tables cut below the built
    budget less the tree's margin when ``keep_tables`` is False or, None, when scoring the cut
    prefixes again (``cost``: measured model seconds and forwards) costs less than the bytes cut
    (:data:`SECONDS_PER_BYTE`; the bytes cut as :func:`measure_cut` estimates them, before anything is
    packed). ``cost=None``: never cut (a snapshot taken mid-build). The snapshot is packed once.
    ``offsets``: each level's row offsets (:func:`pack_state`)."""
    scalars, arrays = tree.export_state()
    eos = tree.eos_id
    at = tree.built - tree.keep_margin_bits * LN2
    if cost is not None and keep_tables is not True and math.isfinite(at):
        per, info = measure_cut(scalars, arrays, at, offsets)  # the cut alone: the snapshot is packed once
        nodes, saved = info["cut_nodes"], info["dropped_bytes"]
        sec, fw = cost
        if nodes and (keep_tables is False or (fw and nodes * sec / fw < saved * SECONDS_PER_BYTE)):
            return pack_state(scalars, arrays, eos_id=eos, cut=at, measured=per, offsets=offsets,
                              leaf_level=tree.leaf_level)[:3] + (True,)
    return pack_state(scalars, arrays, eos_id=eos, cut=None, offsets=offsets)[:3] + (False,)
