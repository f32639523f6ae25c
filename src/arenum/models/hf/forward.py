"""The forwards of :class:`~arenum.models.hf.CausalLMOracle`: what the model is run on, and how.

:class:`ModelRunner` runs the prompt once (keeping its KV in the :class:`~.kv.KVStore`, or falling
back to plain forwards for a model whose cache is not a plain full-attention one), scores prefixes
grouped by length (a one-token forward on a stored parent's KV where there is one, else all the
prefix's tokens on the broadcast prompt KV; no padding is ever needed), and runs teacher-forced
sequences.  It yields raw logits; the oracle normalizes them (``.numerics``).
"""
from __future__ import annotations

import inspect
import time
import warnings
from dataclasses import asdict, dataclass
from typing import Any, Callable, Iterator, NoReturn, Sequence

import numpy as np
import torch

from .kv import KV, DynamicCache, KVStore, NoKVCache, kv_layers, new_cache, plain_cache_layers

__all__ = ["CausalLMStats", "ModelRunner"]

RowsPerForward = Callable[..., int]  # (context_tokens, logits_positions=1) -> rows of one forward


@dataclass
class CausalLMStats:
    """Work counters of a :class:`CausalLMOracle` (reset with :meth:`CausalLMOracle.reset_stats`).

    - ``forward_calls``: number of calls of the model's forward (prompt included).
    - ``rows``: batch rows summed over forwards.
    - ``tokens_computed``: input (query) tokens summed over forwards, i.e. rows x new tokens; the
      cached past tokens a forward attends to are not counted.
    - ``kv_hits``: prefixes scored with a one-token forward on their parent's cached KV (the empty
      prefix, served from the prompt's cached logits with no forward, counts as a hit too).
    - ``kv_misses``: prefixes that needed a forward over all their tokens.
    - ``kv_evictions``: cached KV blocks dropped to stay under ``kv_cache_bytes``.
    - ``forward_seconds``: wall seconds inside the bare ``model(...)`` call (CUDA synchronised).
    - ``callback_seconds``: wall seconds inside the public callbacks; the difference to
      ``forward_seconds`` is this adapter's overhead (gathers, log-softmax, copies to numpy).
    """

    forward_calls: int = 0
    rows: int = 0
    tokens_computed: int = 0
    kv_hits: int = 0
    kv_misses: int = 0
    kv_evictions: int = 0
    forward_seconds: float = 0.0
    callback_seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class ModelRunner:
    """Forwards of ``model`` continuing ``prompt_ids``, counted in the ``stats`` passed to each call.

    ``kv_reuse`` turns off (with a warning) when the model takes no cache or its cache is not a plain
    full-attention one.  ``rows_per_forward(context_tokens, logits_positions)`` bounds a forward.
    ``context`` is the model's ``(maximum positions, config attribute)`` or ``None``: a prompt,
    prefix or sequence that needs more positions raises ``ValueError`` before any forward.
    """

    def __init__(self, model: torch.nn.Module, device: torch.device, vocab_size: int, prompt_ids: list[int],
                 store: KVStore, kv_reuse: bool, context: tuple[int, str] | None) -> None:
        self.model = model
        self.device = device
        self.vocab_size = vocab_size
        self.context = context
        self.prompt_ids = prompt_ids
        self.check_prompt()
        self.store = store
        params = inspect.signature(model.forward).parameters
        if "cache" in params:
            self.cache_kw: str | None = "cache"
        elif "past_key_values" in params:
            self.cache_kw = "past_key_values"
        else:
            self.cache_kw = None
        self.has_logits_to_keep = "logits_to_keep" in params
        self.kv_reuse = bool(kv_reuse)
        if self.kv_reuse and (self.cache_kw is None or DynamicCache is None):
            warnings.warn("model forward takes no KV cache; KV reuse disabled", RuntimeWarning, stacklevel=3)
            self.kv_reuse = False

    def for_prompt(self, prompt_ids: list[int], store: KVStore) -> "ModelRunner":
        """A runner of the same model and settings for another prompt and store."""
        new = object.__new__(ModelRunner)
        new.__dict__.update(self.__dict__)
        new.prompt_ids = prompt_ids
        new.check_prompt()
        new.store = store
        return new

    def check_prompt(self) -> None:
        """Raise ``ValueError`` if the prompt alone is longer than the model's maximum context."""
        P = len(self.prompt_ids)
        if self.context is not None and P > self.context[0]:
            lim, src = self.context
            raise ValueError(f"the prompt is {P} tokens, longer than the model's maximum context of {lim} "
                             f"positions ({src})")

    def check_positions(self, needed: int, what: str) -> None:
        """Raise ``ValueError`` naming ``what`` if ``needed`` positions exceed the model's maximum context."""
        if self.context is not None and needed > self.context[0]:
            lim, src = self.context
            P = len(self.prompt_ids)
            raise ValueError(f"{what} after the {P}-token prompt needs {needed} positions, past the model's "
                             f"maximum context of {lim} ({src}); continuations of at most {lim - P + 1} "
                             f"tokens fit (max_len <= {lim - P + 1})")

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def tensor(self, rows: list[Sequence[int]]) -> torch.Tensor:
        """Token-id rows as a ``long`` tensor on the device; ``ValueError`` for non-integers or ids outside 0..V-1."""
        try:
            t = torch.tensor(rows)
        except (TypeError, ValueError, RuntimeError, OverflowError):  # str, None, ints past int64
            self.refuse_ids(rows)
        if t.numel() and (t.dtype.is_floating_point or t.dtype.is_complex or t.dtype == torch.bool):
            self.refuse_ids(rows)
        t = t.long()
        if t.numel() and (int(t.min()) < 0 or int(t.max()) >= self.vocab_size):
            bad = t[(t < 0) | (t >= self.vocab_size)][:5].tolist()
            raise ValueError(f"token ids {bad} are outside the vocabulary 0..{self.vocab_size - 1}")
        return t.to(self.device)

    def check_ids(self, rows: list[tuple[int, ...]]) -> None:
        """``ValueError`` unless the equal-length ``rows`` hold integer ids in 0..V-1."""
        try:
            a = np.array(rows)
        except (TypeError, ValueError, OverflowError):
            a = None
        if a is None or a.dtype.kind not in "iu" or (a.size and (a.min() < 0 or a.max() >= self.vocab_size)):
            self.refuse_ids(rows)

    def refuse_ids(self, rows: list[Sequence[Any]]) -> NoReturn:
        """Raise ``ValueError`` naming the entries of ``rows`` that are not token ids in 0..V-1."""
        for row in rows:
            for t in row:
                if isinstance(t, (bool, np.bool_)) or not isinstance(t, (int, np.integer)):
                    raise ValueError(f"token ids must be integers, got {t!r} in {tuple(row)!r}")
        bad = [int(t) for row in rows for t in row if not 0 <= t < self.vocab_size]
        raise ValueError(f"token ids {bad[:5]} are outside the vocabulary 0..{self.vocab_size - 1}")

    def forward(self, ids: torch.Tensor, stats: CausalLMStats, past: KV | None = None, keep: int = 0,
                use_cache: bool = False) -> tuple[torch.Tensor, Any]:
        """Run the model; return (logits of the last ``keep`` positions (all if 0), cache or None)."""
        kwargs: dict[str, Any] = {"use_cache": use_cache}
        cache = None
        if use_cache:
            cache = new_cache(past)
            kwargs[self.cache_kw] = cache  # type: ignore[index]
        if keep and self.has_logits_to_keep:
            kwargs["logits_to_keep"] = keep
        self.sync()
        t0 = time.perf_counter()
        out = self.model(input_ids=ids, **kwargs)
        self.sync()
        stats.forward_seconds += time.perf_counter() - t0
        stats.forward_calls += 1
        stats.rows += int(ids.shape[0])
        stats.tokens_computed += int(ids.numel())
        logits = out.logits
        if keep and logits.shape[1] != keep:
            logits = logits[:, -keep:, :]
        if use_cache:
            returned = None
            for name in ("cache", "past_key_values"):
                try:
                    returned = getattr(out, name, None)
                except (AttributeError, KeyError):
                    returned = None
                if returned is not None:
                    break
            cache = returned if returned is not None else cache
        return logits, cache

    def prompt_logits(self, stats: CausalLMStats) -> torch.Tensor:
        """Run the prompt (keeping its KV when reusing KV); its logits at the last position, ``[1, 1, V]``."""
        ids = self.tensor([self.prompt_ids])
        if not self.kv_reuse:
            return self.forward(ids, stats, keep=1, use_cache=False)[0]
        try:
            if not plain_cache_layers(getattr(self.model, "config", None)):
                raise NoKVCache("the model's config asks for non-full-attention cache layers")
            logits, cache = self.forward(ids, stats, keep=1, use_cache=True)
            kv = kv_layers(cache)
            if any(k.shape[-2] != len(self.prompt_ids) for k, _ in kv):
                raise NoKVCache("cache length differs from prompt length")
        except (NoKVCache, TypeError, AttributeError, NotImplementedError) as exc:
            warnings.warn(
                f"model cache is not a plain full-attention KV cache ({exc}); KV reuse disabled",
                RuntimeWarning,
                stacklevel=4,
            )
            self.kv_reuse = False
            return self.forward(ids, stats, keep=1, use_cache=False)[0]
        self.store.set_prompt(kv)
        return logits

    def level_logits(self, keys: list[tuple[int, ...]], stats: CausalLMStats,
                     rows_per_forward: RowsPerForward) -> Iterator[tuple[list[int], torch.Tensor | None]]:
        """Run the forwards for ``keys``; yield ``(rows, last-position logits)`` chunk by chunk.

        ``logits`` is ``None`` for rows of the empty prefix (their log-probs are the prompt's,
        cached; the prompt has been run). Prefixes are grouped by length (no padding); a prefix
        whose parent's KV is stored costs a one-token forward, others run all their tokens on the
        broadcast prompt KV.
        """
        by_len: dict[int, list[int]] = {}
        for i, p in enumerate(keys):
            by_len.setdefault(len(p), []).append(i)
        P = len(self.prompt_ids)
        store, index = self.store, self.store.index
        with torch.inference_mode():
            for d, idx in by_len.items():
                if d == 0:
                    stats.kv_hits += len(idx)
                    yield idx, None
                    continue
                self.check_positions(P + d, f"a prefix of {d} tokens")
                step = rows_per_forward(P + d)
                if not self.kv_reuse:
                    for s in range(0, len(idx), step):
                        chunk = idx[s : s + step]
                        ids = self.tensor([self.prompt_ids + list(keys[i]) for i in chunk])
                        logits, _ = self.forward(ids, stats, keep=1)
                        stats.kv_misses += len(chunk)
                        yield chunk, logits[:, -1]
                    continue
                hits = [i for i in idx if d == 1 or keys[i][:-1] in index]
                hit_set = set(hits)
                misses = [i for i in idx if i not in hit_set] if len(hits) < len(idx) else []
                for s in range(0, len(hits), step):
                    chunk = hits[s : s + step]
                    # re-check: storing earlier chunks of this call may have evicted a parent
                    if d > 1 and any(keys[i][:-1] not in index for i in chunk):
                        misses.extend(i for i in chunk if keys[i][:-1] not in index)
                        chunk = [i for i in chunk if keys[i][:-1] in index]
                        if not chunk:
                            continue
                    chunk_keys = [keys[i] for i in chunk]
                    past = store.gather([p[:-1] for p in chunk_keys])
                    ids = self.tensor([[p[-1]] for p in chunk_keys])
                    logits, cache = self.forward(ids, stats, past=past, keep=1, use_cache=True)
                    del past
                    stats.kv_evictions += store.put(chunk_keys, cache, P)
                    stats.kv_hits += len(chunk)
                    yield chunk, logits[:, -1]
                for s in range(0, len(misses), step):
                    chunk = misses[s : s + step]
                    chunk_keys = [keys[i] for i in chunk]
                    ids = self.tensor(chunk_keys)
                    logits, cache = self.forward(ids, stats, past=store.broadcast_prompt(len(chunk)), keep=1,
                                                 use_cache=True)
                    stats.kv_evictions += store.put(chunk_keys, cache, P)
                    stats.kv_misses += len(chunk)
                    yield chunk, logits[:, -1]

    def position_logits(self, seqs: list[tuple[int, ...]], L: int, stats: CausalLMStats,
                        rows_per_forward: RowsPerForward) -> Iterator[tuple[int, int, torch.Tensor | None]]:
        """Teacher forcing of equal-length ``seqs`` (L >= 1, the prompt has been run).

        Yields ``(row, first, logits)``: ``logits[j, q]`` predicts position ``first + q`` of
        ``seqs[row + j]``.  With KV reuse, position 0 is the prompt's cached row (yielded once as
        ``(0, 0, None)``) and positions 1.. come from ``seq[:-1]`` on the broadcast prompt KV.
        """
        n = len(seqs)
        P = len(self.prompt_ids)
        self.check_positions(P + L - 1, f"scoring a sequence of {L} tokens")
        self.check_ids(seqs)  # position 0 reads the prompt's row without a tensor
        if self.kv_reuse:
            yield 0, 0, None
            if L == 1:
                return
            step = rows_per_forward(P + L - 1, L - 1)
            for s in range(0, n, step):
                chunk = seqs[s : s + step]
                ids = self.tensor([c[:-1] for c in chunk])
                logits, _ = self.forward(ids, stats, past=self.store.broadcast_prompt(len(chunk)), use_cache=True)
                yield s, 1, logits
            return
        step = rows_per_forward(P + L - 1, L)
        for s in range(0, n, step):
            chunk = seqs[s : s + step]
            ids = self.tensor([self.prompt_ids + list(c[:-1]) for c in chunk])
            logits, _ = self.forward(ids, stats, keep=L)
            yield s, 0, logits
