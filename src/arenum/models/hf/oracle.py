"""The :class:`CausalLMOracle`: callbacks of :class:`arenum.AutoregressiveEnumerable` for a causal LM.

Loading lives in :mod:`.load`, the KV block store in :mod:`.kv`, the forwards in :mod:`.forward`;
this module normalizes their logits in float64 (with :mod:`.numerics`) and answers the callbacks.
"""
from __future__ import annotations

import math
import os
import time
from typing import Any, Iterable, Iterator, Sequence

import numpy as np
import torch

from ...step import bind_text
from .forward import CausalLMStats, ModelRunner
from .kv import KVStore
from .load import (check_settings, check_tokenizer, context_limit, encode_prompt, load_checkpoint, resolve_device,
                   resolve_dtype, resolve_special, token_ids, vocab_size_of)
from .numerics import HeadParts, LogSoftmax64, row_offsets

__all__ = ["CausalLMOracle"]

_MIB = 2**20


class CausalLMOracle:
    """Next-token log-probabilities of a causal LM, continuing a fixed prompt, with KV reuse.

    Parameters
    ----------
    model:
        A ``transformers`` causal LM (anything whose forward takes ``input_ids`` and returns
        ``.logits``); it is put in eval mode and, if ``device``/``dtype`` ask for it, moved and
        cast **in place**.
    tokenizer:
        Optional; needed only for a text ``prompt``, :meth:`decode`, and ``"auto"`` BOS/EOS ids.
        Any object with ``encode(text)`` / ``decode(ids)`` and ``bos_token_id`` /
        ``eos_token_id`` attributes works (one with an empty vocabulary is refused).
    prompt:
        Token ids or text (encoded with the tokenizer, ``add_special_tokens`` as given).
        ``None`` or empty: the prompt is ``[bos]``; if there is no BOS either, ``ValueError``.
        It must fit in the model's context (:attr:`max_positions`).
    bos_token_id, eos:
        ``"auto"`` takes them from the tokenizer, then from ``model.config``; ``None`` means
        none.  ``eos=None`` gives fixed-length enumeration (``max_len`` tokens, no stop token).
    device, dtype:
        ``device=None`` keeps the model where it is.  ``dtype="auto"`` is float32 on CPU and
        bfloat16 (float16 where bf16 is unsupported) on CUDA; ``None`` keeps the model's dtype.
        Whatever the weights' dtype, log-softmax is computed in float64 from the logits.
    logit_scale:
        Logits are multiplied by this before the log-softmax (``1/temperature``).
    kv_reuse:
        ``True`` (default): level-wise KV reuse (below).  ``False``: every prefix is scored by a
        plain forward over ``prompt + prefix`` with no cache at all (a baseline).
    kv_cache_bytes:
        Upper bound on the bytes of cached prefix KV (default 512 MiB).  Least recently used
        blocks are evicted first.  The prompt's own KV (one copy) is held outside this bound.
    forward_batch_size, max_forward_tokens:
        A single forward has at most ``forward_batch_size`` rows and at most
        ``max_forward_tokens`` context tokens (rows x (prompt + prefix length), at least one row).
    max_logits_bytes:
        Bound on the float64 logits a :meth:`score_sequences` / :meth:`all_position_logprobs`
        forward materialises (rows x positions x V x 8 bytes, at least one row).

    KV reuse and memory
    -------------------
    The prompt is run once; a prefix whose parent's KV is still stored costs a one-token forward
    (:mod:`arenum.models.hf.forward`), and :meth:`enumerable` sets :attr:`kv_store_max_len` so the
    deepest level the core scores is not stored.  The memory bound is in
    :mod:`arenum.models.hf.kv`; ``docs/hf.md`` has both in full.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        tokenizer: Any = None,
        *,
        prompt: str | Sequence[int] | None = None,
        bos_token_id: int | str | None = "auto",
        eos: int | str | None = "auto",
        device: Any = None,
        dtype: Any = "auto",
        logit_scale: float = 1.0,
        kv_reuse: bool = True,
        kv_cache_bytes: int = 512 * _MIB,
        forward_batch_size: int = 128,
        max_forward_tokens: int = 8192,
        max_logits_bytes: int = 256 * _MIB,
        add_special_tokens: bool = True,
    ) -> None:
        if not isinstance(model, torch.nn.Module):
            raise TypeError(f"model must be a torch.nn.Module (a transformers causal LM), got {type(model).__name__}")
        # everything is checked before the model is moved or cast in place
        if tokenizer is not None:
            check_tokenizer(tokenizer)
        check_settings(logit_scale, kv_cache_bytes, forward_batch_size=forward_batch_size,
                       max_forward_tokens=max_forward_tokens, max_logits_bytes=max_logits_bytes)
        self.device = resolve_device(device, model)
        tdtype = resolve_dtype(dtype, self.device)
        self.model = model
        self.tokenizer = tokenizer
        self.logit_scale = float(logit_scale)
        self.forward_batch_size = forward_batch_size
        self.max_forward_tokens = max_forward_tokens
        self.max_logits_bytes = max_logits_bytes
        self.vocab_size = vocab_size_of(model)
        config = getattr(model, "config", None)
        self.bos_token_id = resolve_special("bos", bos_token_id, tokenizer, config, self.vocab_size)
        self.eos = resolve_special("eos", eos, tokenizer, config, self.vocab_size)
        self._add_special_tokens = add_special_tokens
        self._kv = KVStore(kv_cache_bytes, self.device)
        self._run = ModelRunner(model, self.device, self.vocab_size, self._encode_prompt(prompt), self._kv, kv_reuse,
                                context_limit(model))
        if tdtype is not None:
            model.to(device=self.device, dtype=tdtype)
        else:
            model.to(device=self.device)
        model.eval()
        first = next(model.parameters(), None)
        self.dtype = first.dtype if first is not None else (tdtype or torch.float32)
        self.stats = CausalLMStats()
        self._prompt_logprobs: np.ndarray | None = None
        self._prompt_offset = math.nan  # the prompt row's offset (batch_next_heads)
        self._norm = LogSoftmax64()
        self._store_limit_set = False

    # ------------------------------------------------------------------ construction helpers
    @classmethod
    def from_pretrained(
        cls,
        path: str | os.PathLike,
        *,
        tokenizer: Any = "auto",
        device: Any = None,
        dtype: Any = "auto",
        model_kwargs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> "CausalLMOracle":
        """Load a model (and its tokenizer) from a local directory, ``local_files_only=True``.

        ``tokenizer="auto"`` loads the tokenizer from ``path`` when it has a usable one (else none:
        an empty tokenizer, as transformers builds for a model saved without tokenizer files, is
        none; BOS/EOS then come from the model config); ``None`` loads none; an object is used as
        given.  ``device=None`` means CPU here.  Other
        keyword arguments go to :class:`CausalLMOracle`.  Nothing is ever downloaded: a name that
        is neither a directory nor in the local Hugging Face cache raises.
        """
        dev = resolve_device(device, None)
        tdtype = resolve_dtype(dtype, dev)
        model, tok, why_none = load_checkpoint(path, tokenizer=tokenizer, dtype=tdtype, model_kwargs=model_kwargs)
        if tok is None and why_none and isinstance(kwargs.get("prompt"), str):
            raise ValueError(f"a text prompt needs a tokenizer; pass tokenizer=... or token ids ({why_none})")
        return cls(model, tok, device=dev, dtype=tdtype, **kwargs)

    def with_prompt(self, prompt: str | Sequence[int] | None) -> "CausalLMOracle":
        """A new oracle sharing model, tokenizer and settings, continuing another prompt."""
        new = object.__new__(CausalLMOracle)
        new.__dict__.update(self.__dict__)
        new.stats = CausalLMStats()
        new._prompt_logprobs = None
        new._prompt_offset = math.nan
        new._kv = self._kv.empty_copy()
        new._run = self._run.for_prompt(self._encode_prompt(prompt), new._kv)
        new._norm = LogSoftmax64()
        return new

    def _encode_prompt(self, prompt: str | Sequence[int] | None) -> list[int]:
        return encode_prompt(prompt, self.tokenizer, self.vocab_size, self.bos_token_id, self._add_special_tokens)

    # ------------------------------------------------------------------ public info
    @property
    def V(self) -> int:
        """Vocabulary size (width of the model's output layer)."""
        return self.vocab_size

    @property
    def max_positions(self) -> int | None:
        """The model's maximum context (``config.n_positions`` / ``max_position_embeddings`` ...), or ``None``.

        The prompt plus a prefix (or a scored sequence minus its last token) must fit in it;
        :meth:`enumerable` refuses a ``max_len`` that cannot.
        """
        return self._run.context[0] if self._run.context is not None else None

    @property
    def prompt_ids(self) -> list[int]:
        """Token ids of the prompt (``[bos]`` when none was given)."""
        return self._run.prompt_ids

    @property
    def kv_reuse(self) -> bool:
        """Whether prefixes are scored on cached KV (off for a model without a plain KV cache)."""
        return self._run.kv_reuse

    @kv_reuse.setter
    def kv_reuse(self, value: bool) -> None:
        self._run.kv_reuse = bool(value)

    @property
    def kv_store_max_len(self) -> int | None:
        """Prefixes longer than this are not kept in the KV store (``None``: no limit).

        :meth:`enumerable` sets it to ``max_len - 2`` (the longest prefix whose children the core
        may score), taking the largest over the enumerables built; set it back to ``None`` to store
        every prefix again."""
        return self._kv.max_len

    @kv_store_max_len.setter
    def kv_store_max_len(self, value: int | None) -> None:
        self._kv.max_len = value

    @property
    def kv_cache_bytes(self) -> int:
        """Upper bound on the bytes of cached prefix KV (the prompt's KV not counted)."""
        return self._kv.max_bytes

    @kv_cache_bytes.setter
    def kv_cache_bytes(self, value: int) -> None:
        self._kv.max_bytes = value

    @property
    def kv_bytes_per_token(self) -> int:
        """Bytes of KV one token occupies (all layers, keys and values); known after the first forward."""
        if self._kv.bytes_per_token is None and self.kv_reuse:
            self._prompt_state()
        return int(self._kv.bytes_per_token or 0)

    @property
    def kv_cache_used_bytes(self) -> int:
        return self._kv.used_bytes

    def reset_stats(self) -> None:
        self.stats = CausalLMStats()

    def clear_cache(self) -> None:
        """Drop every cached prefix KV (the prompt's is kept)."""
        self._kv.clear()

    def __repr__(self) -> str:
        return (
            f"CausalLMOracle({type(self.model).__name__}, V={self.vocab_size}, prompt_len={len(self.prompt_ids)}, "
            f"eos={self.eos}, device={self.device}, dtype={self.dtype}, kv_reuse={self.kv_reuse})"
        )

    # ------------------------------------------------------------------ forwards (see .forward)
    def _rows_per_forward(self, context_tokens: int, logits_positions: int = 1) -> int:
        rows = min(self.forward_batch_size, self.max_forward_tokens // max(1, context_tokens))
        if logits_positions > 0:
            rows = min(rows, self.max_logits_bytes // max(1, logits_positions * self.vocab_size * 8))
        return max(1, rows)

    def _prompt_state(self) -> np.ndarray:
        """Run the prompt once: cache its KV (if reusing) and its next-token log-probs."""
        if self._prompt_logprobs is not None:
            return self._prompt_logprobs
        with torch.inference_mode():
            logits = self._run.prompt_logits(self.stats)
            row = logits[0, -1]
            lp_t, lse = self._norm.rows_lse(row, self.logit_scale, self._host_math(row))
            lp = lp_t.cpu().numpy()
        if lp.shape != (self.vocab_size,):
            raise ValueError(f"model returned logits of width {lp.shape[-1]}, expected {self.vocab_size}")
        self._prompt_offset = float(row_offsets(np.reshape(lse, 1), row, self.logit_scale)[0])
        self._prompt_logprobs = lp
        return lp

    def _level_logits(self, keys: list[tuple[int, ...]]) -> Iterator[tuple[list[int], torch.Tensor | None]]:
        """``(rows, last-position logits)`` chunk by chunk (``None``: the empty prefix, the prompt's row)."""
        if not keys:
            return
        self._prompt_state()
        yield from self._run.level_logits(keys, self.stats, self._rows_per_forward)

    # ------------------------------------------------------------------ normalization (see .numerics)
    @staticmethod
    def _host_math(logits: torch.Tensor) -> bool:
        """Normalize in numpy (CPU tensors) rather than in torch on the model's device."""
        return logits.device.type == "cpu"

    def _logprobs(self, logits: torch.Tensor) -> torch.Tensor:
        """float64 log-softmax over the last axis (after ``logit_scale``), any leading shape."""
        return self._norm.rows(logits, self.logit_scale, self._host_math(logits))

    def _write_logprobs(self, dst: np.ndarray, rows: list[int], logits: torch.Tensor) -> None:
        """``dst[rows] = log_softmax(logit_scale * logits)`` in float64 (``dst`` a numpy array)."""
        self._norm.write(dst, rows, logits, self.logit_scale, self._host_math(logits))

    def _heads_of(self, logits: torch.Tensor, floors: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Entries with log-prob ``>= floors[r]`` of each row: ``(row, col, logp)``, row-major, and
        each row's offset (:func:`.numerics.row_offsets`)."""
        r, c, v, lse = self._norm.heads(logits, floors, self.logit_scale, self._host_math(logits))
        return r, c, v, row_offsets(lse, logits, self.logit_scale)

    # ------------------------------------------------------------------ callbacks
    def next_logprobs(self, prefix: Sequence[int]) -> np.ndarray:
        """Log-probabilities (float64, length V) of the next token after ``prompt + prefix``."""
        return self.batch_next_logprobs([prefix])[0]

    def batch_next_logprobs(self, prefixes: Sequence[Sequence[int]]) -> np.ndarray:
        """``(n, V)`` float64 next-token log-probs, one row per prefix (any mix of lengths)."""
        t_start = time.perf_counter()
        keys = self._keys(prefixes)
        out = np.empty((len(keys), self.vocab_size), dtype=np.float64)
        for rows, logits in self._level_logits(keys):
            if logits is None:
                out[rows] = self._prompt_logprobs
            else:
                self._write_logprobs(out, rows, logits)
        self.stats.callback_seconds += time.perf_counter() - t_start
        return out

    def batch_next_heads(
        self, prefixes: Sequence[Sequence[int]], floors: Sequence[float]
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Table heads: for each prefix, the tokens whose log-prob is ``>= floors[i]``.

        Returns ``(counts, tokens, log_probs, widths, offsets)`` (see ``docs/core.md``): ``counts[i]``
        entries per prefix, concatenated in prefix order with ascending token ids inside a row,
        float64 log-probs bit-identical to :meth:`batch_next_logprobs`, ``widths[i] = V``, and
        ``offsets[i]`` the row's float64 log-sum-exp, so that every log-prob of row ``i`` is
        ``float64(float32 logit) - offsets[i]`` (NaN when that does not hold: a ``logit_scale``
        other than 1, float64 logits); a store keeps such a row in 4 bytes an entry (``docs/store.md``).
        The rows are normalized and cut where the model runs, so only the heads are copied out;
        the core's prefix tree uses this instead of full rows (wired by :meth:`enumerable`).
        """
        t_start = time.perf_counter()
        keys = self._keys(prefixes)
        n = len(keys)
        try:
            fl = np.asarray(floors, dtype=np.float64).reshape(-1)
        except (TypeError, ValueError):
            raise ValueError(f"batch_next_heads: floors must be numbers, got {floors!r}") from None
        if fl.shape[0] != n:
            raise ValueError(f"batch_next_heads: {fl.shape[0]} floors for {n} prefixes")
        parts = HeadParts()
        offsets = np.full(n, math.nan)
        for rows, logits in self._level_logits(keys):
            ix = np.asarray(rows, dtype=np.int64)
            if logits is None:
                lp = self._prompt_logprobs
                assert lp is not None
                for i in ix.tolist():
                    parts.add_row(i, lp, fl[i])
                offsets[ix] = self._prompt_offset
            else:
                r, c, v, off = self._heads_of(logits, fl[ix])
                parts.add(ix[r], c, v)
                offsets[ix] = off
        counts, tokens, logps = parts.assemble(n)
        self.stats.callback_seconds += time.perf_counter() - t_start
        return counts, tokens, logps, np.full(n, self.vocab_size, np.int64), offsets

    @staticmethod
    def _keys(prefixes: Sequence[Sequence[int]]) -> list[tuple[int, ...]]:
        return [p if type(p) is tuple else token_ids(p, "a prefix") for p in prefixes]

    def _position_logprobs(self, seqs: list[tuple[int, ...]], L: int, targets_only: bool) -> np.ndarray:
        """For equal-length ``seqs`` (L >= 1): (n, L) target log-probs, or (n, L, V) full rows."""
        n = len(seqs)
        res = np.empty((n, L) if targets_only else (n, L, self.vocab_size), dtype=np.float64)
        prompt_lp = self._prompt_state()
        for s, first, logits in self._run.position_logits(seqs, L, self.stats, self._rows_per_forward):
            if logits is None:  # position 0: the prompt's cached row
                res[:, 0] = prompt_lp[[c[0] for c in seqs]] if targets_only else prompt_lp
                continue
            lp = self._logprobs(logits)
            m = lp.shape[0]
            if targets_only:
                tgt = self._run.tensor([c[first:] for c in seqs[s : s + m]]).unsqueeze(-1)
                res[s : s + m, first:] = lp.gather(-1, tgt).squeeze(-1).cpu().numpy()
            else:
                res[s : s + m, first:] = lp.cpu().numpy()
        return res

    def score_sequences(self, seqs: Iterable[Sequence[int]]) -> np.ndarray:
        """Teacher-forced total log-prob of each sequence after the prompt (float64, summed left to right).

        Sequences are grouped by length (no padding); a group of length L costs one forward of
        ``L - 1`` tokens per row on the broadcast prompt KV (``P + L - 1`` tokens without KV reuse).
        The empty sequence scores 0.
        """
        t_start = time.perf_counter()
        keys = [s if type(s) is tuple else token_ids(s, "a sequence") for s in seqs]
        out = np.zeros(len(keys), dtype=np.float64)
        by_len: dict[int, list[int]] = {}
        for i, s in enumerate(keys):
            by_len.setdefault(len(s), []).append(i)
        with torch.inference_mode():
            for L, idx in by_len.items():
                if L == 0:
                    continue
                lp = self._position_logprobs([keys[i] for i in idx], L, targets_only=True)
                total = lp[:, 0].copy()
                for j in range(1, L):
                    total += lp[:, j]
                out[idx] = total
        self.stats.callback_seconds += time.perf_counter() - t_start
        return out

    def all_position_logprobs(self, seq: Sequence[int]) -> np.ndarray:
        """``(len(seq), V)`` float64: row d is the next-token distribution after ``prompt + seq[:d]``."""
        t_start = time.perf_counter()
        key = token_ids(seq, "the sequence")
        if not key:
            return np.empty((0, self.vocab_size), dtype=np.float64)
        with torch.inference_mode():
            res = self._position_logprobs([key], len(key), targets_only=False)[0]
        self.stats.callback_seconds += time.perf_counter() - t_start
        return res

    def encode(self, text: str, *, eos: bool = True) -> tuple[int, ...]:
        """Token ids of ``text`` as a continuation of the prompt (no special tokens added), with
        :attr:`eos` appended when ``eos`` (the sequence a terminating support wants: pass it to
        ``rank``/``log_density`` as is). ``eos=False`` for a fixed-length support.

        ``ValueError`` without a tokenizer, or when ``eos`` is asked for and the oracle has none.
        """
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        if self.tokenizer is None:
            raise ValueError("this oracle has no tokenizer, so text cannot be encoded (pass token ids instead)")
        if eos and self.eos is None:
            raise ValueError("eos=True but this oracle has no eos token (pass eos=False for a fixed-length support)")
        try:
            ids = list(self.tokenizer.encode(text, add_special_tokens=False))
        except TypeError:
            ids = list(self.tokenizer.encode(text))
        return tuple(int(t) for t in ids) + ((int(self.eos),) if eos else ())

    def decode(self, seq: Sequence[int], *, strip_eos: bool = True) -> str:
        """Text of ``seq`` (without the prompt) via the tokenizer; without one, the ids joined by
        spaces. A trailing :attr:`eos` is dropped unless ``strip_eos=False`` (the inverse of
        :meth:`encode`)."""
        ids = list(token_ids(seq, "the sequence to decode"))
        if strip_eos and ids and self.eos is not None and ids[-1] == self.eos:
            ids.pop()
        bad = [t for t in ids if not 0 <= t < self.vocab_size]
        if bad:
            raise ValueError(f"token ids {bad[:5]} are outside the vocabulary 0..{self.vocab_size - 1}")
        if self.tokenizer is None:
            return " ".join(map(str, ids))
        return self.tokenizer.decode(ids)

    # ------------------------------------------------------------------ core wiring
    def enumerable(self, *, max_len: int | None = None, eos: int | str | None = "auto", **kwargs: Any) -> Any:
        """An :class:`arenum.AutoregressiveEnumerable` over continuations of the prompt.

        ``eos="auto"`` uses this oracle's ``eos`` (tokenizer / config / constructor); ``None``
        is fixed-length mode (exactly ``max_len`` tokens).  Other keyword arguments go to the core
        constructor and override the callbacks wired here (e.g. ``batch_next_logprobs=None``).
        ``ValueError`` if the prompt plus ``max_len - 1`` tokens (or ``max_depth - 1`` when given
        without ``max_len``) is past :attr:`max_positions`; a terminating enumeration with neither
        raises at the first prefix that would not fit.
        """
        from ... import AutoregressiveEnumerable

        if isinstance(eos, str):
            if eos != "auto":
                raise ValueError(f"eos must be 'auto', None or a token id, got {eos!r}")
            eos_id = self.eos
        elif eos is None:
            eos_id = None
        else:
            if isinstance(eos, (bool, np.bool_)) or not isinstance(eos, (int, np.integer)):
                raise ValueError(f"eos must be 'auto', None or a token id, got {eos!r}")
            if not 0 <= int(eos) < self.vocab_size:
                raise ValueError(f"eos token id {eos!r} is outside the vocabulary 0..{self.vocab_size - 1}")
            eos_id = int(eos)
        # The core scores prefixes of length <= max_len - 1 (fixed length, and terminating with a
        # max_len cap); a prefix's KV only serves its children, so keep only lengths <= max_len - 2.
        valid = isinstance(max_len, (int, np.integer)) and not isinstance(max_len, bool) and max_len >= 1
        P = len(self.prompt_ids)
        if valid:  # the longest sequence's last token is only predicted: P + max_len - 1 positions
            self._run.check_positions(P + int(max_len) - 1, f"max_len={max_len}")
        elif max_len is None and eos_id is not None:  # capped at max_depth; the default is checked lazily
            depth = kwargs.get("max_depth")
            if isinstance(depth, (int, np.integer)) and not isinstance(depth, bool) and depth >= 1:
                self._run.check_positions(P + int(depth) - 1, f"max_depth={depth} (no max_len)")
        longest = max(0, int(max_len) - 2) if valid else None
        if max_len is None:
            self.kv_store_max_len = None
        elif longest is not None and (not self._store_limit_set or self.kv_store_max_len is not None):
            self.kv_store_max_len = max(longest, self.kv_store_max_len or 0)
        self._store_limit_set = True
        wiring: dict[str, Any] = {
            "batch_next_logprobs": self.batch_next_logprobs,
            "batch_score_sequences": self.score_sequences,
            "all_position_logprobs": self.all_position_logprobs,
            "batch_next_heads": self.batch_next_heads,
        }
        wiring.update(kwargs)
        if wiring.get("store") is not None and wiring.get("fingerprint") is None:
            wiring["fingerprint"] = self.fingerprint()
        if wiring.get("constraint") is not None:  # a regex or policy reads each token's decoded text
            wiring["constraint"] = bind_text(wiring["constraint"], *self.token_text())
        return AutoregressiveEnumerable(self.next_logprobs, max_len=max_len, eos=eos_id, **wiring)

    def token_text(self) -> tuple[Any, None]:
        """``(text, None)``: the tokenizer's decoding of one token id, for constraints that read text
        (:class:`arenum.TextConstraint`: a token is accepted when its whole text advances the
        automaton); ``(None, None)`` without a tokenizer."""
        return (None if self.tokenizer is None else _DecodeOne(self.tokenizer)), None

    def fingerprint(self) -> str:
        """A hash of what decides this oracle's tables, without a forward: the model's configuration
        (less where it was loaded from), every parameter's and buffer's name, dtype, shape, first
        values, a strided sample and the sum of its raw bits (exact integers: any edited value shows,
        whatever order the device sums in), the prompt ids, dtype, device type and logit scale.
        Identifies the model to a forward store (``enumerable(store=...)``)."""
        import hashlib
        import json

        h = hashlib.sha256()
        cfg = getattr(self.model, "config", None)
        conf = cfg.to_dict() if hasattr(cfg, "to_dict") else {}
        for k in ("_name_or_path", "transformers_version", "_commit_hash", "torch_dtype", "dtype"):
            conf.pop(k, None)
        head = [json.dumps(conf, sort_keys=True, default=repr), list(self.prompt_ids), str(self.dtype),
                torch.device(self.device).type, self.logit_scale]
        h.update(repr(head).encode("utf-8"))
        with torch.no_grad():
            for kind, items in (("p", self.model.named_parameters()), ("b", self.model.named_buffers())):
                for name, p in items:
                    h.update(f"{kind}:{name}{tuple(p.shape)}{p.dtype}".encode())
                    h.update(_tensor_digest(p.detach()))
        return "hf:" + h.hexdigest()


_BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _tensor_digest(t: Any) -> bytes:
    """A tensor's first 64 values, a strided sample of about 4,096 more and the integer sum of its
    raw bits (modulo 2**64): the same bytes on every run of one device, for the same values."""
    flat = t.reshape(-1)
    n = flat.shape[0]
    if n == 0:
        return b""
    step = max(1, n // 4096)
    out = [flat[:64].to("cpu", torch.float64).numpy().tobytes(), flat[::step].to("cpu", torch.float64).numpy().tobytes()]
    raw = flat.contiguous()
    if raw.is_floating_point() or raw.is_complex():
        raw = raw.view(_BITS[raw.element_size()]) if raw.element_size() in _BITS else raw.to(torch.float64).view(torch.int64)
    total = 0
    for a in range(0, n, 1 << 24):  # chunks: no whole-tensor int64 copy
        total += int(raw[a:a + (1 << 24)].to(torch.int64).sum().item())
    out.append((total % (1 << 64)).to_bytes(8, "little"))
    return b"".join(out)


class _DecodeOne:
    """The text of one token id (picklable, for workers): ``tokenizer.decode([id])``."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer

    def __call__(self, t: Any) -> str:
        return self.tokenizer.decode([int(t)])
