""":class:`PCFGModel`: a PCFG password model (Weir et al. 2009 structures) as an autoregressive model.

A password is its structure and its segments (``grammar.py``); ``P(password) = P(structure) x
prod_i P(segment_i | its class and length)``, each a relative frequency of the training list.  As an
autoregressive model over *segment tokens*: the first token is the structure, then one token per
segment (drawn from the strings seen for that class and length), then ``eos``; every row is a sparse
``(tokens, log_probs)`` pair, so that a large vocabulary costs nothing per step.  Because the
segmentation is one-to-one, a string has exactly one token sequence, with the same probability, and
guess numbers over token sequences are guess numbers over strings (``docs/pcfg.md`` has the proof).

Token ids: ``0 .. n_structures-1`` the structures (most frequent first), then the segment strings
by group (groups in class order L, D, S then length; strings most frequent first, ties by string),
then ``eos`` (the last id).
"""
from __future__ import annotations

import hashlib
import json
import math
import os
from typing import Any, Iterable, Sequence

import numpy as np

from ...step import FiniteStateTables, bind_text
from .grammar import CLASSES, count_corpus, parse_structure, segments, structure_name, structure_of
from .io import load_pcfg, save_pcfg

__all__ = ["PCFGModel"]


def _log_freq(counts: np.ndarray) -> np.ndarray:
    """``log(count / total)`` per entry, float64 (read-only)."""
    out = np.log(counts.astype(np.float64)) - math.log(float(counts.sum()))
    out.setflags(write=False)
    return out


def _frozen(a: np.ndarray) -> np.ndarray:
    a.setflags(write=False)
    return a


class PCFGModel:
    """A PCFG password model over segment tokens; build one with :meth:`fit` or :meth:`load`.

    >>> m = PCFGModel.fit(["pass123", "word123", "pass1", "abc!"])
    >>> m.structures
    ['L4D3', 'L3S1', 'L4D1']
    >>> m.encode("word1")                       # structure L4D1, then 'word', '1', then eos
    (2, 5, 6, 9)
    >>> m.decode((2, 5, 6, 9))
    'word1'
    >>> round(math.exp(m.logprob("word1")), 6)  # P(L4D1) P('word' | L4) P('1' | D1) = 1/4 * 1/3 * 1
    0.083333
    """

    #: the declared cost of one forward (a table lookup; about 3 us measured in batches on a 2-core
    #: machine), which a store weighs against bytes at close(): what it keeps does not vary with load
    forward_seconds = 5e-6

    EOS_SYMBOL = "</s>"

    # The constructor is internal: use fit() or load().
    def __init__(self, *, structures: Sequence[str], structure_counts: Sequence[int], strings: Sequence[str],
                 string_counts: Sequence[int], lowercase: bool, n_sequences: int) -> None:
        sc = np.asarray(structure_counts, dtype=np.int64)
        order = sorted(range(len(structures)), key=lambda i: (-int(sc[i]), structures[i]))
        self._names = [structures[i] for i in order]
        self._structs = [parse_structure(n) for n in self._names]
        self._struct_counts = _frozen(sc[order].copy())
        gc = np.asarray(string_counts, dtype=np.int64)
        by_group: dict[tuple[str, int], list[tuple[int, str]]] = {}
        for s, c in zip(strings, gc.tolist()):
            segs = segments(s)
            by_group.setdefault(structure_of(segs)[0], []).append((-int(c), s))
        self._group_keys = sorted(by_group, key=lambda g: (CLASSES.index(g[0]), g[1]))
        n_s = len(self._names)
        self._strings: list[str] = []
        counts: list[int] = []
        self._group_range: dict[tuple[str, int], tuple[int, int]] = {}
        for g in self._group_keys:
            lo = n_s + len(self._strings)
            for negc, s in sorted(by_group[g]):
                self._strings.append(s)
                counts.append(-negc)
            self._group_range[g] = (lo, n_s + len(self._strings))
        self._string_counts = _frozen(np.asarray(counts, dtype=np.int64))
        self._lowercase = bool(lowercase)
        self.n_sequences = int(n_sequences)
        self._V = n_s + len(self._strings) + 1
        self._eos = self._V - 1
        # rows: the structures', each group's, the end's; and every id's log-prob within its row
        self._struct_row = (_frozen(np.arange(n_s, dtype=np.int64)), _log_freq(self._struct_counts))
        lp_of = np.zeros(self._V, dtype=np.float64)
        lp_of[:n_s] = self._struct_row[1]
        self._group_rows: dict[tuple[str, int], tuple[np.ndarray, np.ndarray]] = {}
        for g, (lo, hi) in self._group_range.items():
            lps = _log_freq(self._string_counts[lo - n_s: hi - n_s])
            self._group_rows[g] = (_frozen(np.arange(lo, hi, dtype=np.int64)), lps)
            lp_of[lo:hi] = lps
        self._lp_of = _frozen(lp_of)  # the eos entry is 0.0: log 1
        self._end_row = (_frozen(np.array([self._eos], dtype=np.int64)), _frozen(np.zeros(1)))
        self._struct_id = {n: i for i, n in enumerate(self._names)}
        self._string_id = {s: n_s + i for i, s in enumerate(self._strings)}
        self._group_of_id = np.full(self._V, -1, dtype=np.int64)  # index into _group_keys
        for gi, g in enumerate(self._group_keys):
            lo, hi = self._group_range[g]
            self._group_of_id[lo:hi] = gi
        self._gi = {g: i for i, g in enumerate(self._group_keys)}
        self._struct_groups = [np.array([self._gi[g] for g in st], dtype=np.int64) for st in self._structs]
        self._fingerprint: str | None = None
        self._finite_state: FiniteStateTables | None = None

    # ------------------------------------------------------------------------------ properties
    @property
    def lowercase(self) -> bool:
        """Whether the training list was lowercased (``encode`` then lowercases its input too)."""
        return self._lowercase

    @property
    def structures(self) -> list[str]:
        """Structure names (``"L8D2"``) by token id: most frequent first, ties by name."""
        return list(self._names)

    @property
    def vocab_size(self) -> int:
        """V: structures + segment strings + eos."""
        return self._V

    @property
    def eos(self) -> int:
        """Token id of the end (the last id)."""
        return self._eos

    @property
    def max_len(self) -> int:
        """The longest token sequence: the most segments of a structure, plus the structure and eos."""
        return max(len(st) for st in self._structs) + 2

    @property
    def groups(self) -> dict[str, int]:
        """Number of distinct strings per group (``"L4"`` -> n), in token-id order."""
        return {f"{k}{n}": hi - lo for (k, n), (lo, hi) in self._group_range.items()}

    @property
    def vocab(self) -> list[str]:
        """Symbol of each token id: ``"<L8D2>"`` for a structure, the string for a segment, ``"</s>"``."""
        return [f"<{n}>" for n in self._names] + list(self._strings) + [self.EOS_SYMBOL]

    def __repr__(self) -> str:
        return (f"PCFGModel(structures={len(self._names)}, segment_strings={len(self._strings)}, "
                f"n_sequences={self.n_sequences}, lowercase={self._lowercase})")

    # ------------------------------------------------------------------------------------- fit
    @classmethod
    def fit(cls, lines: Iterable[str], weights: Iterable[int] | None = None, lowercase: bool = False) -> "PCFGModel":
        """Fit the relative frequencies of structures and segment strings to ``lines``.

        Args:
            lines: an iterable of passwords (``str``); an empty string is the empty password (the
                structure ``""``, no segments); nothing is stripped or skipped.
            weights: optional integer counts ``>= 1``, one per line (a frequency list): the same model
                as ``lines`` with line ``i`` repeated ``weights[i]`` times.
            lowercase: lowercase every line first (and every string ``encode`` is given later).

        Cost: one pass over the lines; memory: one entry per distinct structure and segment string.
        """
        if not isinstance(lowercase, (bool, np.bool_)):
            raise TypeError(f"lowercase must be a bool, got {type(lowercase).__name__} {lowercase!r}")
        c = count_corpus(lines, weights, bool(lowercase))
        strings = [s for g in c.groups.values() for s in g]
        string_counts = [n for g in c.groups.values() for n in g.values()]
        names = [structure_name(st) for st in c.structures]
        return cls(structures=names, structure_counts=list(c.structures.values()), strings=strings,
                   string_counts=string_counts, lowercase=bool(lowercase), n_sequences=c.n_sequences)

    # ---------------------------------------------------------------------- encode / decode
    def encode(self, password: str, *, eos: bool = True) -> tuple[int, ...]:
        """The token ids of ``password`` (lowercased first if the model was fitted with
        ``lowercase=True``): its structure, its segments, then ``eos`` if ``eos``.

        ``ValueError`` when the model gives the password probability 0: its structure or one of its
        segments was never seen in training (the message names which).
        """
        if not isinstance(password, str):
            raise TypeError(f"a PCFG encodes a str, got {type(password).__name__}")
        s = password.lower() if self._lowercase else password
        segs = segments(s)
        name = structure_name(structure_of(segs))
        sid = self._struct_id.get(name)
        if sid is None:
            raise ValueError(f"the structure {name or '(empty)'!r} of {password!r} was never seen in training: "
                             "the model gives it probability 0")
        out = [sid]
        pos = 0
        for k, run in segs:
            tid = self._string_id.get(run)
            if tid is None:
                raise ValueError(f"the segment {run!r} ({k}{len(run)}) at position {pos} of {password!r} was never "
                                 "seen in training: the model gives it probability 0")
            out.append(tid)
            pos += len(run)
        if eos:
            out.append(self._eos)
        return tuple(out)

    def decode(self, seq: Iterable[int]) -> str:
        """Inverse of :meth:`encode`: the password of a token sequence (a trailing ``eos`` is dropped).
        ``ValueError`` for a sequence the model cannot produce (naming the first wrong token)."""
        if isinstance(seq, (str, bytes)):
            raise TypeError(f"decode takes token ids (encode gives them), got a {type(seq).__name__}: {seq[:40]!r}")
        ids = list(seq)
        for j, t in enumerate(ids):
            if isinstance(t, bool) or not isinstance(t, (int, np.integer)):
                raise TypeError(f"token {t!r} at position {j} is not an integer token id")
        ids = [int(t) for t in ids]
        if ids and ids[-1] == self._eos:
            ids.pop()
        self._check_prefix(tuple(ids), complete=True)
        return "".join(self._strings[t - len(self._names)] for t in ids[1:])

    def _check_prefix(self, prefix: tuple, *, complete: bool = False) -> int:
        """The structure id of a producible ``prefix`` (``-1`` for the empty prefix); ``ValueError``
        naming the first token that no sequence of the model has there."""
        if not prefix:
            if complete:
                raise ValueError("an empty token sequence is no password (the first token is the structure)")
            return -1
        n_s = len(self._names)
        try:
            sid = int(prefix[0])
        except (TypeError, ValueError):
            raise ValueError(f"token {prefix[0]!r} at position 0 is not a token id") from None
        if not 0 <= sid < n_s:
            raise ValueError(f"token {sid} at position 0 is not a structure id (structures are 0..{n_s - 1})")
        groups = self._struct_groups[sid]
        if len(prefix) - 1 > len(groups) or (complete and len(prefix) - 1 != len(groups)):
            raise ValueError(f"structure {self._names[sid]!r} has {len(groups)} segments, the sequence "
                             f"{len(prefix) - 1}")
        for i in range(1, len(prefix)):
            t = prefix[i]
            ok = isinstance(t, (int, np.integer)) and 0 <= t < self._V and self._group_of_id[t] == groups[i - 1]
            if not ok:
                k, n = self._group_keys[int(groups[i - 1])]
                raise ValueError(f"token {t!r} at position {i} is not a {k}{n} segment of structure "
                                 f"{self._names[sid]!r}")
        return sid

    # ----------------------------------------------------------------------------- callbacks
    def next_logprobs(self, prefix: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        """The sparse row after ``prefix``: ``(token ids, log-probs)``, read-only, most probable first.

        After nothing: the structures; after a structure and ``i`` segments: the strings of its
        ``i``-th segment's group; after all its segments: ``eos`` (log-prob 0).  ``ValueError`` for a
        prefix the model cannot produce (one that holds ``eos`` included).
        """
        prefix = tuple(prefix)
        sid = self._check_prefix(prefix)
        if sid < 0:
            return self._struct_row
        st = self._structs[sid]
        k = len(prefix) - 1
        return self._group_rows[st[k]] if k < len(st) else self._end_row

    def batch_next_logprobs(self, prefixes: Sequence[Sequence[int]]) -> list[tuple[np.ndarray, np.ndarray]]:
        """:meth:`next_logprobs` of each prefix (a list of sparse rows)."""
        return [self.next_logprobs(p) for p in prefixes]

    def score_sequences(self, seqs: Sequence[Sequence[int]]) -> np.ndarray:
        """Total log-probability of each token sequence (a complete one or a prefix): the left-to-right
        float64 sum of its tokens' row entries, bit-identical to summing :meth:`next_logprobs` values;
        ``-inf`` for a sequence the model cannot produce."""
        out = np.empty(len(seqs), dtype=np.float64)
        lp_of = self._lp_of
        for j, s in enumerate(seqs):
            s = tuple(s)
            body = s[:-1] if s and s[-1] == self._eos and len(s) > 1 else s
            try:
                sid = self._check_prefix(body)
            except ValueError:
                out[j] = -math.inf
                continue
            if len(body) < len(s) and len(body) - 1 != len(self._structs[sid]):
                out[j] = -math.inf  # ends before its structure is complete
                continue
            total = 0.0
            for t in s:
                total += float(lp_of[t])
            out[j] = total
        return out

    def logprob(self, password: str) -> float:
        """Natural-log probability of ``password`` (``ValueError`` when it is 0: see :meth:`encode`)."""
        return float(self.score_sequences([self.encode(password)])[0])

    def finite_state(self) -> FiniteStateTables:
        """The model's :class:`~arenum.step.finite_state.FiniteStateTables` (computed once, cached).

        A state is the part of the structure still to emit: ``start`` (no structure yet), then one
        state per distinct suffix of a structure (``(structure, position)`` with equal remaining
        segments merged: their futures are the same), the empty suffix emitting only ``eos``.  Rows are
        the very arrays :meth:`next_logprobs` returns, so ``check_finite_state`` holds bit for bit.
        Memory: ``12 S V`` bytes (dense tables).
        """
        if self._finite_state is None:
            suffixes = sorted({st[i:] for st in self._structs for i in range(len(st) + 1)},
                              key=lambda x: (len(x), structure_name(x)))
            state = {sf: 1 + i for i, sf in enumerate(suffixes)}
            S, V = 1 + len(suffixes), self._V
            lp = np.full((S, V), -math.inf)
            nxt = np.full((S, V), -1, dtype=np.int32)
            ids, lps = self._struct_row
            lp[0, ids] = lps
            nxt[0, ids] = [state[st] for st in self._structs]
            for sf, s in state.items():
                if not sf:
                    lp[s, self._eos] = 0.0
                    continue
                ids, lps = self._group_rows[sf[0]]
                lp[s, ids] = lps
                nxt[s, ids] = state[sf[1:]]
            self._finite_state = FiniteStateTables(np.arange(V, dtype=np.int64), lp, lp[:, self._eos].copy(),
                                                   nxt, 0, self._eos)
        return self._finite_state

    def token_text(self) -> tuple[Any, int]:
        """``(text, longest)``: the text of each token id (``""`` for a structure and for eos, the
        string of a segment) and the most characters a token has, for constraints that read text."""
        n = len(self._names)
        texts = [""] * n + list(self._strings) + [""]
        return texts.__getitem__, max(1, max((len(s) for s in texts), default=1))

    def enumerable(self, *, max_len: int | None = None, **kwargs: Any):
        """An :class:`arenum.AutoregressiveEnumerable` over the model's token sequences (terminating at
        ``eos``); ``max_len`` defaults to :attr:`max_len` (every password the model can produce).
        Other keyword arguments go to the constructor (``store=`` gets this model's fingerprint)."""
        from ... import AutoregressiveEnumerable

        if kwargs.get("store") is not None and kwargs.get("fingerprint") is None:
            kwargs["fingerprint"] = self.fingerprint()
        if kwargs.get("constraint") is not None:  # a policy or regex reads the segments' text
            kwargs["constraint"] = bind_text(kwargs["constraint"], *self.token_text())
        return AutoregressiveEnumerable(
            self.next_logprobs, max_len=self.max_len if max_len is None else max_len, eos=self._eos,
            batch_next_logprobs=self.batch_next_logprobs, batch_score_sequences=self.score_sequences,
            **{"finite_state": self.finite_state, **kwargs},
        )

    def fingerprint(self) -> str:
        """A hash of everything that decides the model's log-probabilities (lowercasing, structures,
        strings, counts): identifies it to a forward store without a forward."""
        if self._fingerprint is None:
            h = hashlib.sha256()
            h.update(json.dumps([self._lowercase, self._names, self._strings]).encode("utf-8", "surrogatepass"))
            for a in (self._struct_counts, self._string_counts):
                h.update(a.tobytes())
            self._fingerprint = "pcfg:" + h.hexdigest()
        return self._fingerprint

    # -------------------------------------------------------------------------- save / load
    def save(self, path: str | os.PathLike) -> None:
        """Write the model to ``path`` (``.npz``: a JSON header and two count arrays; no pickle),
        atomically: a failed or interrupted write leaves a previous file at ``path`` intact."""
        save_pcfg(path, structures=self._names, structure_counts=self._struct_counts, strings=self._strings,
                  string_counts=self._string_counts, lowercase=self._lowercase, n_sequences=self.n_sequences)

    @classmethod
    def load(cls, path: str | os.PathLike) -> "PCFGModel":
        """Read a model written by :meth:`save` (the same log-probabilities bit for bit). A damaged or
        foreign file raises a one-line ``ValueError`` naming the file; an unreadable one ``OSError``."""
        return cls(**load_pcfg(path))
