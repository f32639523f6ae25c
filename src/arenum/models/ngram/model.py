""":class:`NGramModel`: context lookup, distribution rows, the callbacks, encode/decode.

Fitting (``fit.py``) and the file format (``io.py``) live beside this module; ``docs/ngram.md``
has the formulas and the file format.

Token ids are ``0..V-1``: the corpus symbols first (sorted when they are mutually orderable, else in
order of first appearance), then the end-of-sequence token ``eos``, then ``unk`` when the model
was fitted with ``unknown="unk"``.  The start-of-sequence padding symbol ``BOS`` only ever appears
in contexts; it has the internal id ``V`` and is never predicted.
"""
from __future__ import annotations

import os
from collections import OrderedDict
from typing import Any, Hashable, Iterable, Sequence

import numpy as np

from ..._validate import exact_int
from .fit import check_params, fit_tables
from .io import load_model, save_model

_INT64_MAX = 2**63 - 1

__all__ = ["NGramModel"]


# ------------------------------------------------------------------------------------ LRU cache
class _LRU:
    __slots__ = ("_d", "maxsize")

    def __init__(self, maxsize: int) -> None:
        self._d: OrderedDict = OrderedDict()
        self.maxsize = maxsize

    def get(self, key: Any) -> Any:
        d = self._d
        val = d.get(key)
        if val is not None:
            d.move_to_end(key)
        return val

    def put(self, key: Any, val: Any) -> None:
        d = self._d
        d[key] = val
        d.move_to_end(key)
        if len(d) > self.maxsize:
            d.popitem(last=False)

    def clear(self) -> None:
        self._d.clear()

    def __len__(self) -> int:
        return len(self._d)


def _ranges(ptr: np.ndarray, c: np.ndarray) -> tuple[np.ndarray | None, Any]:
    """Row number and position of every entry of the CSR rows ``c`` of ``ptr``, concatenated.

    For a single row: ``None`` and a slice, which copy nothing (see :func:`_scatter_add`).
    """
    if len(c) == 1:
        i = int(c[0])
        return None, slice(int(ptr[i]), int(ptr[i + 1]))
    lo, hi = ptr[c], ptr[c + 1]
    lengths = hi - lo
    total = int(lengths.sum())
    starts = np.cumsum(lengths) - lengths
    pos = np.repeat(lo - starts, lengths) + np.arange(total, dtype=np.int64)
    return np.repeat(np.arange(len(c)), lengths), pos


def _scatter_add(Q: np.ndarray, rr: np.ndarray | None, cols: np.ndarray, vals: np.ndarray) -> None:
    """``Q[rr, cols] += vals`` (no repeated (row, col) pair); ``rr=None``: Q's only row."""
    if rr is None:
        Q[0][cols] += vals  # 1-D fancy indexing: a few times cheaper than the 2-D form
    else:
        Q[rr, cols] += vals


# ----------------------------------------------------------------------------------------- model
class NGramModel:
    """An interpolated n-gram model over characters or hashable tokens.

    Build one with :meth:`fit` (or :meth:`load`).  Every context, seen or not, gives a proper
    distribution over all ``vocab_size`` token ids, ``eos`` included.  The callbacks take and
    return token ids; :meth:`encode` and :meth:`decode` convert from and to symbols.

    Character model: the corpus is an iterable of ``str`` and each character is a token.
    Token model: the corpus is an iterable of sequences of hashable tokens (words, ints, ...).

    >>> m = NGramModel.fit(["abc", "abd", "bc"], order=2)
    >>> m.vocab, m.eos
    (['a', 'b', 'c', 'd', '</s>'], 4)
    >>> m.encode("abd")
    (0, 1, 3, 4)
    >>> m.decode((0, 1, 3, 4))
    'abd'
    >>> lp = m.next_logprobs((0,))  # after "a": dense log-probs over all 5 ids
    >>> int(lp.argmax()), round(float(np.exp(lp).sum()), 12)
    (1, 1.0)
    """

    EOS_SYMBOL = "</s>"
    UNK_SYMBOL = "<unk>"
    #: ``decode`` of a character model writes this character for the ``unk`` id.
    UNK_CHAR = "\ufffd"

    # The constructor is internal: use fit() or load().
    def __init__(
        self,
        *,
        order: int,
        smoothing: str,
        discount: float,
        k: float,
        unknown: str,
        kind: str,
        symbols: list,
        ctx_keys: list[np.ndarray],
        ptr: list[np.ndarray],
        words: list[np.ndarray],
        counts: list[np.ndarray],
        n_sequences: int,
        n_tokens: int,
        cache_size: int | None = None,
    ) -> None:
        self._order = order
        self._smoothing = smoothing
        self._discount = discount
        self._k = k
        self._unknown = unknown
        self._kind = kind
        self._symbols = list(symbols)
        self._sym_to_id = {s: i for i, s in enumerate(self._symbols)}
        n_sym = len(self._symbols)
        self._eos = n_sym
        self._unk = n_sym + 1 if unknown == "unk" else None
        self._V = n_sym + (2 if unknown == "unk" else 1)
        self._B = self._V + 1  # radix of context keys (tokens plus BOS)
        self._bos = self._V
        # Context keys with a sentinel above every key appended, so that a lookup's position is
        # always a valid index; _ctx_keys are views without it.
        self._keys_s = [np.append(np.asarray(a, dtype=np.int64), _INT64_MAX) for a in ctx_keys]
        self._ctx_keys = [a[:-1] for a in self._keys_s]
        self._ptr = [np.ascontiguousarray(a, dtype=np.int64) for a in ptr]
        self._words = [np.ascontiguousarray(a, dtype=np.int64) for a in words]
        self._counts = [np.ascontiguousarray(a, dtype=np.int64) for a in counts]
        # What every row computation needs from a level, computed once for all its contexts with
        # the float64 operations a row would do: KN/WB the back-off weight of each context
        # (_gamma) and the discounted term of each (context, next token) entry (_vals); add-k
        # the denominator A(c) + kV of each top-level context (_denom).
        self._gamma: list[np.ndarray] = []
        self._vals: list[np.ndarray] = []
        self._denom = np.zeros(0)
        D = self._discount
        for L, (p, c) in enumerate(zip(self._ptr, self._counts)):
            types = np.diff(p)
            tot = (np.add.reduceat(c, p[:-1]) if len(c) else np.zeros(0, np.int64)).astype(np.float64)
            if smoothing == "addk":
                if L == order - 1:
                    self._denom = tot + self._k * self._V
                continue
            types = types.astype(np.float64)
            cnt = c.astype(np.float64)
            if smoothing == "kn":
                self._gamma.append(D * types / tot)
                self._vals.append((cnt - D) / np.repeat(tot, np.diff(p)))
            else:
                denom = tot + types
                self._gamma.append(types / denom)
                self._vals.append(cnt / np.repeat(denom, np.diff(p)))
        self.n_sequences = int(n_sequences)
        self.n_tokens = int(n_tokens)
        if cache_size is None:
            cache_size = int(min(1 << 16, max(256, (1 << 27) // (8 * self._V))))
        self._row_cache = _LRU(cache_size)  # (depth, ctx id) -> read-only log-prob row
        self._ctx_cache = _LRU(cache_size)  # last order-1 token ids -> same row object

    # ------------------------------------------------------------------------------ properties
    @property
    def order(self) -> int:
        """n: each token is predicted from the ``order - 1`` tokens before it."""
        return self._order

    @property
    def smoothing(self) -> str:
        """``"kn"``, ``"wb"`` or ``"addk"``."""
        return self._smoothing

    @property
    def discount(self) -> float:
        """Kneser-Ney absolute discount D."""
        return self._discount

    @property
    def k(self) -> float:
        """Add-k pseudo-count."""
        return self._k

    @property
    def unknown(self) -> str:
        """``"error"`` or ``"unk"``: what :meth:`encode` does with a symbol not in the vocabulary."""
        return self._unknown

    @property
    def kind(self) -> str:
        """``"char"`` (fitted on strings) or ``"token"`` (fitted on token sequences)."""
        return self._kind

    @property
    def vocab(self) -> list:
        """Symbol of each token id; ``vocab[eos]`` is ``"</s>"`` and ``vocab[unk]`` ``"<unk>"``."""
        out = list(self._symbols) + [self.EOS_SYMBOL]
        if self._unk is not None:
            out.append(self.UNK_SYMBOL)
        return out

    @property
    def vocab_size(self) -> int:
        """V, the number of token ids (corpus symbols + EOS [+ UNK])."""
        return self._V

    @property
    def eos(self) -> int:
        """Token id of the end-of-sequence symbol."""
        return self._eos

    @property
    def unk(self) -> int | None:
        """Token id of the unknown symbol, or None when fitted with ``unknown="error"``."""
        return self._unk

    @property
    def num_contexts(self) -> list[int]:
        """Number of distinct observed contexts of length 0, 1, ..., order-1."""
        return [1] + [len(k) for k in self._ctx_keys[1:]]

    @property
    def cache_size(self) -> int:
        """Maximum number of cached distribution rows (LRU)."""
        return self._row_cache.maxsize

    @cache_size.setter
    def cache_size(self, value: int) -> None:
        value = exact_int("cache_size", value, minimum=1)
        self._row_cache.maxsize = value
        self._ctx_cache.maxsize = value
        self.clear_cache()

    def clear_cache(self) -> None:
        """Drop the cached distributions (they are recomputed identically on demand)."""
        self._row_cache.clear()
        self._ctx_cache.clear()

    def __repr__(self) -> str:
        return (
            f"NGramModel(kind={self._kind!r}, order={self._order}, smoothing={self._smoothing!r}, "
            f"vocab_size={self._V}, n_sequences={self.n_sequences})"
        )

    # ------------------------------------------------------------------------------------- fit
    @classmethod
    def fit(
        cls,
        corpus: Iterable[str] | Iterable[Sequence[Hashable]],
        order: int = 4,
        smoothing: str = "kn",
        *,
        discount: float = 0.75,
        k: float = 1.0,
        unknown: str = "error",
    ) -> "NGramModel":
        """Fit a model to ``corpus``.

        Args:
            corpus: an iterable of strings (character model) or of token sequences (token
                model; tokens must be hashable).  Each item is one sequence; EOS is appended.
                Nothing is skipped or stripped: an empty item ``""``/``[]`` is a sequence of no
                tokens (it counts one EOS after BOS), and a whitespace-only string such as
                ``"  "`` is a sequence of space characters.  Filter the items first to drop them.
            order: n, an integer in [1, 8].
            smoothing: ``"kn"`` (interpolated Kneser-Ney), ``"wb"`` (interpolated Witten-Bell)
                or ``"addk"`` (add-k on the full context).
            discount: Kneser-Ney discount D, in (0, 1].
            k: add-k pseudo-count, > 0.
            unknown: ``"error"`` (``encode`` raises on unseen symbols) or ``"unk"`` (reserve an
                ``unk`` id that receives smoothed probability mass).
        """
        order, smoothing, discount, k, unknown = check_params(order, smoothing, discount, k, unknown)
        fitted = fit_tables(corpus, order=order, smoothing=smoothing, unknown=unknown)
        return cls(order=order, smoothing=smoothing, discount=discount, k=k, unknown=unknown, **fitted)

    # ---------------------------------------------------------------------- encode / decode
    def encode(self, text_or_tokens: str | Iterable[Hashable], *, eos: bool = True) -> tuple:
        """Token ids of a string (character model) or token sequence, EOS appended if ``eos``.

        A symbol that is not in the vocabulary raises ``ValueError`` (naming the symbol and its
        position) when the model was fitted with ``unknown="error"``, and maps to ``unk`` when
        it was fitted with ``unknown="unk"``.
        """
        if self._kind == "char" and not isinstance(text_or_tokens, str):
            raise TypeError(
                f"a character model encodes a str, got {type(text_or_tokens).__name__}"
            )
        table = self._sym_to_id
        unk = self._unk
        out = []
        append = out.append
        for i, sym in enumerate(text_or_tokens):
            try:
                tid = table.get(sym)
            except TypeError:
                raise TypeError(f"unhashable symbol {sym!r} at position {i}") from None
            if tid is None:
                if unk is None:
                    raise ValueError(
                        f"unknown symbol {sym!r} at position {i}: it is not in the model's "
                        "vocabulary (fit with unknown='unk' to map unseen symbols to <unk>)"
                    )
                tid = unk
            append(tid)
        if eos:
            append(self._eos)
        return tuple(out)

    def decode(self, seq: Iterable[int]) -> str | list:
        """Inverse of :meth:`encode`.

        A trailing EOS is dropped; an EOS anywhere else raises ``ValueError``.  A character model
        returns a ``str`` (``unk`` is written as U+FFFD); a token model returns the ``list`` of
        its symbols (``unk`` is written as ``"<unk>"``).
        """
        ids = [int(t) for t in seq]
        if ids and ids[-1] == self._eos:
            ids.pop()
        syms = self._symbols
        n_sym = len(syms)
        out = []
        for i, t in enumerate(ids):
            if 0 <= t < n_sym:
                out.append(syms[t])
            elif t == self._unk:
                out.append(self.UNK_CHAR if self._kind == "char" else self.UNK_SYMBOL)
            elif t == self._eos:
                raise ValueError(f"EOS (id {t}) at position {i} is not at the end of the sequence")
            else:
                raise ValueError(f"token id {t} at position {i} is outside [0, {self._V})")
        return "".join(out) if self._kind == "char" else out

    # ----------------------------------------------------------------------------- callbacks
    def next_logprobs(self, prefix: Sequence[int]) -> np.ndarray:
        """Log-probabilities (float64, length V) of the next token after ``prefix`` (no BOS)."""
        n1 = self._order - 1
        prefix = tuple(prefix)
        ctx = prefix[len(prefix) - n1 :] if len(prefix) > n1 else prefix
        row = self._ctx_cache.get(ctx)
        if row is None:
            row = self._rows([ctx])[0]
        return row.copy()

    def batch_next_logprobs(self, prefixes: Sequence[Sequence[int]]) -> np.ndarray:
        """``next_logprobs`` of each prefix, stacked: shape ``(len(prefixes), V)``."""
        n1 = self._order - 1
        ctxs = []
        for p in prefixes:
            p = tuple(p)
            ctxs.append(p[len(p) - n1 :] if len(p) > n1 else p)
        rows = self._rows(ctxs)
        if not rows:
            return np.zeros((0, self._V), dtype=np.float64)
        return np.stack(rows)

    def all_position_logprobs(self, seq: Sequence[int]) -> np.ndarray:
        """Shape ``(len(seq), V)``; row d is ``next_logprobs(seq[:d])``."""
        seq = tuple(seq)
        n1 = self._order - 1
        ctxs = [seq[max(0, d - n1) : d] for d in range(len(seq))]
        rows = self._rows(ctxs)
        if not rows:
            return np.zeros((0, self._V), dtype=np.float64)
        return np.stack(rows)

    def score_sequences(self, seqs: Sequence[Sequence[int]]) -> np.ndarray:
        """Total log-probability of each sequence (float64).

        The total is the left-to-right float64 sum, starting from 0.0, of
        ``next_logprobs(seq[:t])[seq[t]]``: bit-identical to summing those values one by one.
        """
        n1 = self._order - 1
        V = self._V
        seqs = [tuple(s) for s in seqs]
        ctxs = []
        for s in seqs:
            for t, tok in enumerate(s):
                if not (isinstance(tok, (int, np.integer)) and 0 <= tok < V):
                    raise ValueError(f"token id {tok!r} at position {t} is outside [0, {V})")
                ctxs.append(s[max(0, t - n1) : t])
        rows = self._rows(ctxs)
        out = np.empty(len(seqs), dtype=np.float64)
        i = 0
        for j, s in enumerate(seqs):
            total = 0.0
            for tok in s:
                total += float(rows[i][tok])
                i += 1
            out[j] = total
        return out

    def logprob(self, text_or_tokens: str | Iterable[Hashable], *, eos: bool = True) -> float:
        """Natural-log probability of a string or token sequence (EOS included if ``eos``)."""
        return float(self.score_sequences([self.encode(text_or_tokens, eos=eos)])[0])

    def enumerable(self, *, max_len: int | None = None, terminating: bool = True, **kwargs: Any):
        """An :class:`arenum.AutoregressiveEnumerable` over this model's sequences.

        ``terminating=True``: sequences end with EOS (``eos=self.eos``), at most ``max_len``
        tokens long EOS included (``max_len=None`` leaves the bound to the engine).
        ``terminating=False``: all sequences of exactly ``max_len`` tokens (required); EOS is
        then an ordinary token id.  Other keyword arguments go to the constructor.
        """
        if terminating:
            eos = self._eos
        else:
            if max_len is None:
                raise ValueError("max_len is required when terminating=False (fixed length)")
            eos = None
        from arenum import AutoregressiveEnumerable

        return AutoregressiveEnumerable(
            self.next_logprobs,
            max_len=max_len,
            eos=eos,
            batch_next_logprobs=self.batch_next_logprobs,
            batch_score_sequences=self.score_sequences,
            all_position_logprobs=self.all_position_logprobs,
            **kwargs,
        )

    # -------------------------------------------------------------------------- save / load
    def save(self, path: str | os.PathLike) -> None:
        """Write the model to ``path`` (a numpy ``.npz`` archive; no pickle).

        The write is atomic: a temp file in the same folder, fsynced, then renamed over ``path``.
        If it fails (or is interrupted) a previous file at ``path`` is left intact.
        """
        save_model(
            path,
            kind=self._kind,
            order=self._order,
            smoothing=self._smoothing,
            discount=self._discount,
            k=self._k,
            unknown=self._unknown,
            symbols=self._symbols,
            n_sequences=self.n_sequences,
            n_tokens=self.n_tokens,
            ctx_keys=self._ctx_keys,
            ptr=self._ptr,
            words=self._words,
            counts=self._counts,
        )

    @classmethod
    def load(cls, path: str | os.PathLike) -> "NGramModel":
        """Read a model written by :meth:`save`; it gives the same log-probabilities bit for bit.

        The file is checked before use (``docs/ngram.md`` lists the checks): any problem with its
        content raises a one-line ``ValueError`` naming the file; a file that cannot be opened
        raises ``OSError``.
        """
        model = cls(**load_model(path))
        model._check_sample_rows(os.fspath(path))
        return model

    # ----------------------------------------------------------------------------- internals
    def _check_sample_rows(self, name: str) -> None:
        """Raise ``ValueError`` unless the rows of up to 8 contexts per level are distributions."""
        depths, paths = [], []
        for L in range(self._order):
            C = 1 if L == 0 else len(self._ctx_keys[L])
            ids = np.unique(np.linspace(0, C - 1, num=min(C, 8)).astype(np.int64))
            path = np.zeros((len(ids), self._order), dtype=np.int64)
            path[:, L] = ids
            for up in range(L, 1, -1):  # parent of a level-`up` context: key // B
                path[:, up - 1] = self._ctx_keys[up][path[:, up]] // self._B
            depths.append(np.full(len(ids), L, dtype=np.int64))
            paths.append(path)
        depth = np.concatenate(depths)
        rows = np.stack(self._compute(depth, np.concatenate(paths)))
        total = np.exp(rows).sum(axis=1)
        bad = ~np.isfinite(rows).all(axis=1) | ~(np.abs(total - 1.0) <= 1e-9)
        if bad.any():
            i = int(np.argmax(bad))
            raise ValueError(
                f"{name!r} is not a valid arenum n-gram model file: the distribution after a "
                f"level-{int(depth[i])} context is not normalized (sums to {total[i]!r})"
            )

    def _rows(self, ctxs: list[tuple]) -> list[np.ndarray]:
        """Read-only log-prob rows for contexts (each at most order-1 most recent token ids)."""
        cache = self._ctx_cache
        rows: list = [cache.get(c) for c in ctxs]
        miss = [i for i, r in enumerate(rows) if r is None]
        if not miss:
            return rows
        # Distinct missing contexts, resolved together.
        uniq: dict[tuple, int] = {}
        for i in miss:
            uniq.setdefault(ctxs[i], len(uniq))
        ukeys = list(uniq)
        depth, path = self._walk(ukeys)
        # Rows are cached per deepest matched context (depth, id): many contexts share one.
        row_cache = self._row_cache
        R = len(ukeys)
        rkeys = list(zip(depth.tolist(), path[np.arange(R), depth].tolist()))
        found: list = [row_cache.get(key) for key in rkeys]
        todo: dict[tuple[int, int], int] = {}  # uncached (depth, id) -> first row that has it
        for j, r in enumerate(found):
            if r is None:
                todo.setdefault(rkeys[j], j)
        if todo:
            if len(todo) == R:
                new = self._compute(depth, path)
            else:
                sel = np.fromiter(todo.values(), dtype=np.int64, count=len(todo))
                new = self._compute(depth[sel], path[sel])
            fresh = dict(zip(todo, new))
            for key, r in fresh.items():
                row_cache.put(key, r)
            found = [fresh[key] if r is None else r for key, r in zip(rkeys, found)]
        for c, r in zip(ukeys, found):
            cache.put(c, r)
        for i in miss:
            rows[i] = found[uniq[ctxs[i]]]
        return rows

    @staticmethod
    def _finish(P: np.ndarray) -> list[np.ndarray]:
        P /= P.sum(axis=1, keepdims=True)
        with np.errstate(divide="ignore"):
            logP = np.log(P)
        rows = list(logP)
        for r in rows:
            r.flags.writeable = False
        return rows

    def _walk(self, ctxs: list[tuple]) -> tuple[np.ndarray, np.ndarray]:
        """Deepest observed suffix of each context: depth (R,) and context ids per level (R, n).

        ``path[r, L]`` is the id of context r's level-L suffix for ``L <= depth[r]``; the entries
        past ``depth[r]`` are meaningless.
        """
        n1 = self._order - 1
        R = len(ctxs)
        V = self._V
        X = np.empty((R, max(n1, 1)), dtype=np.int64)  # column j: token j+1 back
        X.fill(V)  # BOS
        n_tok = 0
        try:
            for r, c in enumerate(ctxs):
                if c:
                    X[r, : len(c)] = c[::-1]
                    n_tok += len(c)
            # All ids are in [0, V) iff the cells >= V as unsigned (negatives included) are
            # exactly the BOS padding.
            bad = int(np.count_nonzero(X.view(np.uint64) >= V)) != X.size - n_tok
        except (OverflowError, TypeError, ValueError):  # not convertible to int64
            bad = True
        if bad:
            for c in ctxs:
                for t in c:
                    if not (isinstance(t, (int, np.integer)) and 0 <= t < V):
                        t = int(t) if isinstance(t, (int, np.integer)) else repr(t)
                        raise ValueError(f"token id {t} in prefix {c!r} is outside [0, {V})")
        path = np.zeros((R, self._order), dtype=np.int64)
        match = np.zeros((R, max(n1, 1)), dtype=bool)  # match[r, L-1]: level-L key found
        B = self._B
        pos = path[:, 0]  # level-0 context id of every row: 0
        for L in range(1, n1 + 1):
            keys = self._keys_s[L]
            q = pos * B
            q += X[:, L - 1]
            pos = keys.searchsorted(q)  # <= len(keys) - 1: the sentinel is above every q
            m = match[:, L - 1]
            np.equal(keys[pos], q, out=m)
            if not np.count_nonzero(m):
                break
            path[:, L] = pos
        # A row's depth is its number of leading matches (a later match after a miss is chance).
        depth = np.add.reduce(np.logical_and.accumulate(match, axis=1), axis=1, dtype=np.int64)
        return depth, path

    def _compute(self, depth: np.ndarray, path: np.ndarray) -> list[np.ndarray]:
        """Log-prob rows for resolved contexts; each row depends on its own context only.

        The rows are processed deepest first, so that the rows that reach level L are the first
        ``n_L``: every level updates a leading slice of ``P`` in place.
        """
        R = len(depth)
        V = self._V
        if R > 1:
            perm = np.argsort(-depth, kind="stable")
            depth, path = depth[perm], path[perm]
        # reach[L]: the number of rows whose context is observed at level L (depth >= L).
        reach = np.add.accumulate(np.bincount(depth, minlength=self._order)[::-1])[::-1].tolist()
        P = np.empty((R, V), dtype=np.float64)
        P.fill(1.0 / V)
        if self._smoothing == "addk":
            top = self._order - 1
            n = reach[top]
            if n:
                c = path[:n, top]
                rr, idx = _ranges(self._ptr[top], c)
                Q = P[:n]
                Q.fill(self._k)
                _scatter_add(Q, rr, self._words[top][idx], self._counts[top][idx])
                Q /= self._denom[c][:, None]
        else:
            for L in range(self._order):
                n = reach[L]
                if not n:
                    break
                c = path[:n, L]
                rr, idx = _ranges(self._ptr[L], c)
                Q = P[:n]
                Q *= self._gamma[L][c][:, None]
                _scatter_add(Q, rr, self._words[L][idx], self._vals[L][idx])
        rows = self._finish(P)
        if R == 1:
            return rows
        out: list = [None] * R
        for i, r in zip(perm.tolist(), rows):
            out[i] = r
        return out
