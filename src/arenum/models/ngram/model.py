""":class:`NGramModel`: the row caches, the callbacks, encode/decode, save/load.

The count tables and the row arithmetic (``tables.py``), fitting (``fit.py``) and the file format
(``io.py``) live beside this module; ``docs/ngram.md`` has the formulas and the file format.

Token ids are ``0..V-1``: the corpus symbols first (sorted when they are mutually orderable, else in
order of first appearance), then the end-of-sequence token ``eos``, then ``unk`` when the model
was fitted with ``unknown="unk"``.  The start-of-sequence padding symbol ``BOS`` only ever appears
in contexts; it has the internal id ``V`` and is never predicted.
"""
from __future__ import annotations

import hashlib
import json
import os
from typing import Any, Hashable, Iterable, Sequence

import numpy as np

from ..._validate import exact_int
from ...step import bind_text
from .cache import RowCache
from .fit import check_params, fit_tables
from .io import load_model, save_model
from .states import ngram_finite_state
from .tables import CountTables

__all__ = ["NGramModel"]


def _lower(item: Any) -> Any:
    """A string lowercased, or a token sequence with its string tokens lowercased."""
    if isinstance(item, str):
        return item.lower()
    return [t.lower() if isinstance(t, str) else t for t in item]


def _lowercased(corpus: Any) -> Any:
    if isinstance(corpus, (str, bytes)):
        return corpus  # fit_tables refuses it, with its message
    try:
        return [_lower(x) if isinstance(x, str) or not isinstance(x, (bytes, bytearray)) else x for x in corpus]
    except TypeError:
        return corpus  # not iterable (or an item is not): fit_tables says so


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

    #: the declared cost of one forward (a table lookup; about 3 us measured in batches on a 2-core
    #: machine), which a store weighs against bytes at close(): what it keeps does not vary with load
    forward_seconds = 5e-6

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
        lowercase: bool = False,
    ) -> None:
        self._lowercase = bool(lowercase)
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
        self._tables = CountTables(
            order=order, V=self._V, smoothing=smoothing, discount=discount, k=k,
            ctx_keys=ctx_keys, ptr=ptr, words=words, counts=counts,
        )
        t = self._tables
        self._ctx_keys, self._ptr, self._words, self._counts = t.ctx_keys, t.ptr, t.words, t.counts
        self.n_sequences = int(n_sequences)
        self.n_tokens = int(n_tokens)
        if cache_size is None:
            cache_size = int(min(1 << 16, max(256, (1 << 27) // (8 * self._V))))
        self._cache = RowCache(self._tables, cache_size)
        self._fingerprint: str | None = None
        self._finite_state = None

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
    def lowercase(self) -> bool:
        """Whether the corpus was lowercased at fit (:meth:`encode` then lowercases its input too)."""
        return self._lowercase

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
        """Maximum number of cached distribution rows in each of the two caches (the recently used kept)."""
        return self._cache.maxsize

    @cache_size.setter
    def cache_size(self, value: int) -> None:
        value = exact_int("cache_size", value, minimum=1)
        self._cache.maxsize = value

    def clear_cache(self) -> None:
        """Drop the cached distributions (they are recomputed identically on demand)."""
        self._cache.clear()

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
        weights: Iterable[int] | None = None,
        lowercase: bool = False,
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
            weights: optional integer counts ``>= 1``, one per item (a frequency list): the same
                model as the corpus with item ``i`` repeated ``weights[i]`` times, without repeating it.
            lowercase: lowercase every string item (character model) or string token (token model)
                first; the model remembers it (and its file stores it), and :meth:`encode` lowercases
                what it is given the same way, so ``"Tr0ub4dor&3"`` is scored as ``"tr0ub4dor&3"``.
        """
        order, smoothing, discount, k, unknown = check_params(order, smoothing, discount, k, unknown)
        if not isinstance(lowercase, (bool, np.bool_)):
            raise TypeError(f"lowercase must be a bool, got {type(lowercase).__name__} {lowercase!r}")
        if lowercase:
            corpus = _lowercased(corpus)
        fitted = fit_tables(corpus, order=order, smoothing=smoothing, unknown=unknown, weights=weights)
        return cls(order=order, smoothing=smoothing, discount=discount, k=k, unknown=unknown,
                   lowercase=bool(lowercase), **fitted)

    # ---------------------------------------------------------------------- encode / decode
    def encode(self, text_or_tokens: str | Iterable[Hashable], *, eos: bool = True) -> tuple:
        """Token ids of a string (character model) or token sequence, EOS appended if ``eos``.

        A symbol that is not in the vocabulary raises ``ValueError`` (naming the symbol and its
        position) when the model was fitted with ``unknown="error"``, and maps to ``unk`` when
        it was fitted with ``unknown="unk"``.  A model fitted with ``lowercase=True`` lowercases the
        string (the string tokens) first.
        """
        if self._kind == "char" and not isinstance(text_or_tokens, str):
            raise TypeError(
                f"a character model encodes a str, got {type(text_or_tokens).__name__}"
            )
        if self._lowercase:
            text_or_tokens = _lower(text_or_tokens)
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
        row = self._cache.get(ctx)
        if row is None:
            row = self._cache.rows([ctx])[0]
        return row.copy()

    def batch_next_logprobs(self, prefixes: Sequence[Sequence[int]]) -> np.ndarray:
        """``next_logprobs`` of each prefix, stacked: shape ``(len(prefixes), V)``."""
        n1 = self._order - 1
        # The last order-1 ids (a shorter prefix whole): ``p[-n1:]``, except that ``p[-0:]`` is all of p.
        ctxs = [tuple(p)[-n1:] for p in prefixes] if n1 else [()] * len(prefixes)
        if not ctxs:
            return np.zeros((0, self._V), dtype=np.float64)
        # One concatenation of the 1-D rows: a quarter of np.stack's per-row cost.
        return np.concatenate(self._cache.rows(ctxs)).reshape(len(ctxs), self._V)

    def all_position_logprobs(self, seq: Sequence[int]) -> np.ndarray:
        """Shape ``(len(seq), V)``; row d is ``next_logprobs(seq[:d])``."""
        seq = tuple(seq)
        n1 = self._order - 1
        ctxs = [seq[max(0, d - n1) : d] for d in range(len(seq))]
        rows = self._cache.rows(ctxs)
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
        rows = self._cache.rows(ctxs)
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

    def finite_state(self) -> Any:
        """The model's :class:`arenum.step.finite_state.FiniteStateTables` (computed once, cached).

        A state is the longest suffix of the BOS-padded context observed in training (reachable
        states only); its row is bit-identical to :meth:`next_logprobs` of every prefix in it, for
        every smoothing (``docs/certified.md`` has the proof). Memory: ``12 * S * V`` bytes.
        """
        if self._finite_state is None:
            self._finite_state = ngram_finite_state(self._tables, eos=self._eos)
        return self._finite_state

    def token_text(self) -> tuple[Any, int]:
        """``(text, longest)``: the text of each token id (its symbol: a character, or a word of a
        token model; ``""`` for eos) and the most characters a token has, for constraints that read
        text (:class:`arenum.TextConstraint`)."""
        texts = [str(s) for s in self.vocab]
        texts[self._eos] = ""
        if self._unk is not None:
            texts[self._unk] = self.UNK_CHAR if self._kind == "char" else self.UNK_SYMBOL
        return texts.__getitem__, max(1, max(len(s) for s in texts))

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
        from ... import AutoregressiveEnumerable

        if kwargs.get("store") is not None and kwargs.get("fingerprint") is None:
            kwargs["fingerprint"] = self.fingerprint()
        if kwargs.get("constraint") is not None:  # a policy or regex reads the symbols, not the ids
            kwargs["constraint"] = bind_text(kwargs["constraint"], *self.token_text())
        return AutoregressiveEnumerable(
            self.next_logprobs,
            max_len=max_len,
            eos=eos,
            batch_next_logprobs=self.batch_next_logprobs,
            batch_score_sequences=self.score_sequences,
            all_position_logprobs=self.all_position_logprobs,
            **{"finite_state": self.finite_state, **kwargs},
        )

    def fingerprint(self) -> str:
        """A hash of everything that decides this model's log-probabilities (settings, symbols,
        count tables): two models with the same fingerprint give the same tables. Identifies the
        model to a forward store (``enumerable(store=...)``) without a forward."""
        if self._fingerprint is None:
            h = hashlib.sha256()
            head = [self._kind, self._order, self._smoothing, self._discount, self._k, self._unknown,
                    [s if isinstance(s, str) else repr(s) for s in self._symbols]]
            if self._lowercase:  # only then: the fingerprints of other models are unchanged
                head.append("lowercase")
            h.update(json.dumps(head).encode("utf-8"))
            for group in (self._ctx_keys, self._ptr, self._words, self._counts):
                for a in (group if isinstance(group, (list, tuple)) else [group]):
                    a = np.ascontiguousarray(a)
                    h.update(f"{a.dtype.str}{a.shape}".encode())
                    h.update(a.tobytes())
            self._fingerprint = "ngram:" + h.hexdigest()
        return self._fingerprint

    # -------------------------------------------------------------------------- save / load
    def save(self, path: str | os.PathLike) -> None:
        """Write the model to ``path`` (a numpy ``.npz`` archive; no pickle).

        The write is atomic: a temp file in the same folder, fsynced, then renamed over ``path``.
        If it fails (or is interrupted) a previous file at ``path`` is left intact.
        """
        save_model(path, kind=self._kind, order=self._order, smoothing=self._smoothing,
                   discount=self._discount, k=self._k, unknown=self._unknown,
                   symbols=self._symbols, n_sequences=self.n_sequences, n_tokens=self.n_tokens,
                   lowercase=self._lowercase, ctx_keys=self._ctx_keys, ptr=self._ptr, words=self._words, counts=self._counts)

    @classmethod
    def load(cls, path: str | os.PathLike) -> "NGramModel":
        """Read a model written by :meth:`save`; it gives the same log-probabilities bit for bit.

        The file is checked before use (``docs/ngram.md`` lists the checks): any problem with its
        content raises a one-line ``ValueError`` naming the file; a file that cannot be opened
        raises ``OSError``.
        """
        model = cls(**load_model(path))
        problem = model._tables.sample_problem()
        if problem:
            raise ValueError(f"{os.fspath(path)!r} is not a valid arenum n-gram model file: {problem}")
        return model
