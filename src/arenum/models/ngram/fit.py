"""Fitting an n-gram model: parameter checks, corpus encoding and the vectorized count tables.

:func:`fit_tables` does the work of :meth:`NGramModel.fit <arenum.models.ngram.NGramModel.fit>`;
:func:`check_params` is the one check of the model parameters, used by ``fit`` and by ``load``.
"""
from __future__ import annotations

import math
import numbers
from itertools import chain
from typing import Any, Hashable, Iterable, Sequence

import numpy as np

from ..._validate import exact_int, INT64_MAX

__all__ = ["KINDS", "MAX_ORDER", "SMOOTHINGS", "UNKNOWN_MODES", "check_params", "check_weights", "fit_tables",
           "parse_weighted_line"]

SMOOTHINGS = ("kn", "wb", "addk")
UNKNOWN_MODES = ("error", "unk")
KINDS = ("char", "token")
MAX_ORDER = 8


# ----------------------------------------------------------------------------------- validation
def _real(name: str, value: Any, *, lo: float, hi: float, lo_open: bool, hi_open: bool) -> float:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__} {value!r}")
    f = float(value)
    ok = math.isfinite(f) and (f > lo if lo_open else f >= lo) and (f < hi if hi_open else f <= hi)
    if not ok:
        lb = "(" if lo_open else "["
        rb = ")" if hi_open else "]"
        raise ValueError(f"{name} must be in {lb}{lo}, {hi}{rb}, got {value!r}")
    return f


def _choice(name: str, value: Any, allowed: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value not in allowed:
        listed = ", ".join(repr(a) for a in allowed)
        raise ValueError(f"{name} must be one of {listed}; got {value!r}")
    return value


def check_params(
    order: Any, smoothing: Any, discount: Any, k: Any, unknown: Any
) -> tuple[int, str, float, float, str]:
    """The model parameters, checked and normalized; ``TypeError``/``ValueError`` naming the bad one."""
    order = exact_int("order", order, minimum=1, maximum=MAX_ORDER)
    smoothing = _choice("smoothing", smoothing, SMOOTHINGS)
    discount = _real("discount", discount, lo=0.0, hi=1.0, lo_open=True, hi_open=False)
    k = _real("k", k, lo=0.0, hi=math.inf, lo_open=True, hi_open=True)
    unknown = _choice("unknown", unknown, UNKNOWN_MODES)
    return order, smoothing, discount, k, unknown


# ------------------------------------------------------------------------------------- fitting
def check_weights(weights: Any, n: int) -> np.ndarray:
    """``weights`` as an ``(n,)`` int64 array of counts ``>= 1``; ``TypeError``/``ValueError`` naming the
    first bad one. A weight of ``c`` counts its item as if it appeared ``c`` times in the corpus."""
    if isinstance(weights, (str, bytes)):
        raise TypeError(f"weights must be a sequence of integer counts, got {type(weights).__name__}")
    try:
        w = list(weights)
    except TypeError:
        raise TypeError(f"weights must be a sequence of integer counts, got {type(weights).__name__}") from None
    if len(w) != n:
        raise ValueError(f"weights has {len(w)} entries but the corpus has {n} items")
    out = np.empty(n, dtype=np.int64)
    for i, c in enumerate(w):
        c = exact_int(f"weights[{i}]", c, minimum=1)
        if c > 2**53:
            raise ValueError(f"weights[{i}] = {c} is more than 2**53; the counts would lose precision")
        out[i] = c
    if n and float(out.sum(dtype=np.float64)) > 2.0**53:
        raise ValueError("weights add up to more than 2**53; the counts would lose precision")
    return out


def parse_weighted_line(line: str) -> tuple[int, str] | None:
    """``(count, item)`` of a frequency-list line, or ``None`` when it is not one.

    Two forms: ``count<TAB>item`` (the item is everything after the first tab) and ``count item``
    with optional leading blanks, as ``uniq -c`` writes it (the item is everything after the one
    space that follows the count, so items may hold spaces). ``count`` is a decimal integer.

    >>> parse_weighted_line("12\tpass word"), parse_weighted_line("   7 123456"), parse_weighted_line("x 1")
    ((12, 'pass word'), (7, '123456'), None)
    """
    if "\t" in line:
        head, _, item = line.partition("\t")
        head = head.strip()
    else:
        stripped = line.lstrip(" ")
        head, sep, item = stripped.partition(" ")
        if not sep:
            return None
    if not head.isascii() or not head.isdigit():
        return None
    return int(head), item


def fit_tables(
    corpus: Iterable[str] | Iterable[Sequence[Hashable]], *, order: int, smoothing: str, unknown: str,
    weights: Iterable[int] | None = None,
) -> dict[str, Any]:
    """Encode ``corpus`` and count it: the keyword arguments of the model's constructor that
    depend on the corpus (``kind``, ``symbols``, ``n_sequences``, ``n_tokens`` and the tables).

    ``weights`` (optional, one integer count ``>= 1`` per item): the same tables as a corpus in which
    item ``i`` appears ``weights[i]`` times (a frequency list), computed without repeating it;
    ``n_sequences`` and ``n_tokens`` are then weighted totals. The parameters must already have been
    through :func:`check_params`.
    """
    if isinstance(corpus, (str, bytes)):
        raise TypeError(
            "corpus must be an iterable of sequences (e.g. a list of strings), not a single "
            f"{type(corpus).__name__}"
        )
    try:
        items = list(corpus)
    except TypeError:
        raise TypeError(
            f"corpus must be an iterable of strings or token sequences, got "
            f"{type(corpus).__name__}"
        ) from None
    if not items:
        raise ValueError("corpus is empty: need at least one sequence to fit")
    wts = None if weights is None else check_weights(weights, len(items))

    if isinstance(items[0], str):
        kind = "char"
        symbols, ids, lengths = _encode_char_corpus(items)
    else:
        kind = "token"
        symbols, ids, lengths = _encode_token_corpus(items)

    n_sym = len(symbols)
    V = n_sym + (2 if unknown == "unk" else 1)
    tables = _count(ids, lengths, order=order, V=V, eos=n_sym, smoothing=smoothing, weights=wts)
    return {
        "kind": kind,
        "symbols": symbols,
        "n_sequences": len(lengths) if wts is None else int(wts.sum()),
        "n_tokens": int(lengths.sum()) if wts is None else int((lengths * wts).sum()),
        **tables,
    }


def _encode_char_corpus(items: list) -> tuple[list, np.ndarray, np.ndarray]:
    for i, s in enumerate(items):
        if not isinstance(s, str):
            raise TypeError(
                f"corpus item {i} is {type(s).__name__}, but item 0 is a str: a character corpus "
                "must contain only strings"
            )
    lengths = np.fromiter(map(len, items), dtype=np.int64, count=len(items))
    text = "".join(items)
    cps = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype="<u4").astype(np.int64)
    if len(cps):
        present = np.flatnonzero(np.bincount(cps))
        lut = np.full(int(present[-1]) + 1, -1, dtype=np.int64)
        lut[present] = np.arange(len(present))
        ids = lut[cps]
        symbols = [chr(int(c)) for c in present]
    else:
        ids = np.zeros(0, dtype=np.int64)
        symbols = []
    return symbols, ids, lengths


def _encode_token_corpus(items: list) -> tuple[list, np.ndarray, np.ndarray]:
    seqs = []
    for i, s in enumerate(items):
        if isinstance(s, str):
            raise TypeError(
                f"corpus item {i} is a str, but item 0 is not: a corpus is either all strings "
                "(character model) or all token sequences (token model)"
            )
        try:
            seqs.append(s if isinstance(s, (list, tuple)) else list(s))
        except TypeError:
            raise TypeError(
                f"corpus item {i} ({type(s).__name__}) is neither a str nor a sequence of tokens"
            ) from None
    lengths = np.fromiter(map(len, seqs), dtype=np.int64, count=len(seqs))
    first: dict = {}
    for i, s in enumerate(seqs):
        for t in s:
            try:
                if t not in first:
                    first[t] = len(first)
            except TypeError:
                raise TypeError(f"corpus item {i} contains an unhashable token {t!r}") from None
    try:
        symbols = sorted(first)
    except TypeError:  # not mutually orderable: keep first-appearance order
        symbols = list(first)
    table = {s: i for i, s in enumerate(symbols)}
    total = int(lengths.sum())
    ids = np.fromiter(map(table.__getitem__, chain.from_iterable(seqs)), np.int64, count=total)
    return symbols, ids, lengths


def _unique_weighted(key: np.ndarray, wt: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """Sorted distinct ``key`` values and, per value, the sum of ``wt`` (int64, exact) or the count."""
    if wt is None:
        return np.unique(key, return_counts=True)
    order = np.argsort(key, kind="stable")
    ks = key[order]
    if len(ks) == 0:
        return ks, np.zeros(0, dtype=np.int64)
    starts = np.flatnonzero(np.r_[True, ks[1:] != ks[:-1]])
    return ks[starts], np.add.reduceat(wt[order], starts)


def _count(
    ids: np.ndarray, lengths: np.ndarray, *, order: int, V: int, eos: int, smoothing: str,
    weights: np.ndarray | None = None,
) -> dict[str, list[np.ndarray]]:
    """Count tables for every level (context length 0..order-1), fully vectorized; ``weights``: the
    count of each line ((n_lines,) int64), or ``None`` for one each."""
    n1 = order - 1
    B = V + 1
    bos = V
    n_lines = len(lengths)
    # One flat int array: for each line, order-1 BOS, its tokens, EOS.
    span = lengths + order  # n1 pads + tokens + EOS
    line_start = np.cumsum(span) - span
    sym_start = np.cumsum(lengths) - lengths
    flat = np.full(int(span.sum()), bos, dtype=np.int64 if B > 2**31 - 1 else np.int32)
    tok_pos = np.repeat(line_start + n1 - sym_start, lengths) + np.arange(len(ids), dtype=np.int64)
    flat[tok_pos] = ids
    eos_pos = line_start + n1 + lengths
    flat[eos_pos] = eos
    tgt = np.concatenate([tok_pos, eos_pos])
    w = flat[tgt].astype(np.int64)
    # (len(tgt),) int64: the weight of the line of each prediction (tokens first, then the EOS)
    wt = None if weights is None else np.concatenate([np.repeat(weights, lengths), weights])
    del tok_pos, eos_pos

    # Context ids per level: the level-L context extends its level-(L-1) parent by the token L
    # back, with key_L = parent_id * B + token; ids index the sorted unique keys, so
    # parent(id) = key // B and the context's oldest token = key % B.
    ctx_keys: list[np.ndarray] = [np.zeros(0, dtype=np.int64)]
    if B**n1 * V <= INT64_MAX:
        # One mixed-radix key per prediction, most recent token most significant, next token
        # least.  Sorted distinct keys list the n-grams lexicographically by (token 1 back,
        # token 2 back, ..., next token), so every level's contexts are contiguous runs, their
        # keys come out sorted, and no further sort is needed to number them.
        key = np.zeros(len(tgt), dtype=np.int64)
        for j in range(1, n1 + 1):
            key *= B
            key += flat[tgt - j]
        key *= V
        key += w
        del flat, tgt, w
        uk, raw = _unique_weighted(key, wt)  # (U,) int64 each
        del key, wt
        w_top = uk % V
        rest = uk // V
        X = np.empty((len(uk), n1), dtype=np.int64)  # X[:, j]: context token j+1 back
        for j in range(n1 - 1, -1, -1):
            X[:, j] = rest % B
            rest //= B
        del uk, rest
        cid = np.zeros(len(raw), dtype=np.int64)
        change = np.zeros(len(raw), dtype=bool)
        change[0] = True
        for L in range(1, n1 + 1):
            x = X[:, L - 1]
            change[1:] |= x[1:] != x[:-1]
            ctx_keys.append((cid * B + x)[change])
            cid = np.cumsum(change) - 1
        g = cid * V + w_top  # strictly increasing: (context id, next token) order
    else:
        # Large vocabulary: the full key would overflow, so number the contexts level by level.
        cid = np.zeros(len(tgt), dtype=np.int64)
        for j in range(1, n1 + 1):
            keys, cid = np.unique(cid * B + flat[tgt - j], return_inverse=True)
            cid = cid.reshape(-1)
            ctx_keys.append(keys)
        g, raw = _unique_weighted(cid * V + w, wt)
        del flat, tgt, w, cid, wt
    raw = raw.astype(np.int64)

    ptr: list = [None] * order
    words: list = [None] * order
    counts: list = [None] * order
    for L in range(n1, -1, -1):
        ctx = g // V
        wl = g % V
        C = 1 if L == 0 else len(ctx_keys[L])
        p = np.zeros(C + 1, dtype=np.int64)
        np.cumsum(np.bincount(ctx, minlength=C), out=p[1:])
        ptr[L] = p
        words[L] = wl
        if smoothing == "kn" and L < n1:
            # Kneser-Ney: continuation counts N1+(. c w), except for contexts that start with
            # BOS (nothing but BOS can precede them), which keep raw counts.
            use = cont
            if L >= 1:
                starts_bos = (ctx_keys[L][ctx] % B) == bos
                use = np.where(starts_bos, raw, cont)
            counts[L] = use.astype(np.int64)
        else:
            counts[L] = raw
        if L == 0:
            break
        # Lower level: map each n-gram (c, w) to (parent(c), w) and aggregate.
        parent = ctx_keys[L][ctx] // B
        g, inv = np.unique(parent * V + wl, return_inverse=True)
        inv = inv.reshape(-1)
        raw = np.bincount(inv, weights=raw, minlength=len(g)).astype(np.int64)
        cont = np.bincount(inv, minlength=len(g)).astype(np.int64)
    return {"ctx_keys": ctx_keys, "ptr": ptr, "words": words, "counts": counts}
