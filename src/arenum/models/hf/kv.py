"""The KV block store of :class:`~arenum.models.hf.CausalLMOracle`, and conversion of cache objects.

The prompt is run once and its KV kept (one copy, outside the byte bound).  After a batch of
prefixes of length ``d`` is scored, the KV of their own ``d`` tokens is kept in one
:class:`Block` keyed by prefix.  A later prefix whose parent ``prefix[:-1]`` is still stored costs
one token of compute: :meth:`KVStore.gather` returns the parents' KV rows behind the broadcast
prompt KV, ready for a one-token forward.  Blocks are evicted least recently used first (serving
as a parent refreshes a block) to keep their bytes under ``max_bytes``.

Peak memory of an oracle beyond the weights is about ``kv_cache_bytes`` + ``3 x max_forward_tokens
x kv_bytes_per_token`` (gathered past, the model's concatenated cache, the kept copy) + the model's
activations for at most ``max_forward_tokens`` query tokens + ``2 x forward_batch_size x V x 8``
bytes of float64 logits + the ``n x V x 8``-byte result of ``batch_next_logprobs``
(``batch_next_heads``, which the core's tree uses, returns only the heads: 16 bytes per entry).
``kv_bytes_per_token = 2 x layers x kv_heads x head_dim x dtype_bytes`` (36 KiB for distilGPT-2 in
float32); ``CausalLMOracle.kv_bytes_per_token`` reports it.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Any

import torch

try:  # transformers >= 4.36; 5.x is what arenum is tested with
    from transformers import DynamicCache
except ImportError:  # pragma: no cover - very old transformers
    DynamicCache = None  # type: ignore[assignment,misc]

__all__ = ["Block", "DynamicCache", "KVStore", "NoKVCache", "kv_layers", "new_cache", "plain_cache_layers"]

KV = list[tuple[torch.Tensor, torch.Tensor]]


class NoKVCache(Exception):
    """The model's cache is not a plain per-layer full-attention KV cache."""


def kv_layers(cache: Any) -> KV:
    """Per-layer ``(keys, values)`` of a full-attention cache, else raise :class:`NoKVCache`."""
    layers = getattr(cache, "layers", None)
    if layers is not None:
        out = []
        for layer in layers:
            if getattr(layer, "is_sliding", False) or not hasattr(layer, "keys"):
                raise NoKVCache(type(layer).__name__)
            if type(layer).__name__ != "DynamicLayer":
                raise NoKVCache(type(layer).__name__)
            out.append((layer.keys, layer.values))
        if not out:
            raise NoKVCache("empty cache")
        return out
    if isinstance(cache, (tuple, list)) and cache and isinstance(cache[0], (tuple, list)):
        return [(kv[0], kv[1]) for kv in cache]
    raise NoKVCache(type(cache).__name__)


def new_cache(past: KV | None) -> Any:
    """A ``DynamicCache`` holding ``past`` (empty for ``None``)."""
    cache = DynamicCache()
    if past is not None:
        for i, (k, v) in enumerate(past):
            cache.update(k, v, i)
    return cache


def plain_cache_layers(config: Any) -> bool:
    """False when ``config`` asks for cache layers other than full-attention DynamicLayers."""
    if config is None:
        return True
    try:
        probe = DynamicCache(config=config)
    except Exception:  # noqa: BLE001 - cannot tell; the prompt forward decides
        return True
    return all(type(layer).__name__ == "DynamicLayer" for layer in getattr(probe, "layers", []) or [])


class Block:
    """KV of the *own* tokens (prompt excluded) of a batch of prefixes of one length.

    ``kv[layer] = (keys, values)`` with shape ``[rows, heads, len, head_dim]``.
    """

    __slots__ = ("kv", "prefixes", "nbytes")

    def __init__(self, kv: KV, prefixes: list[tuple[int, ...]]):
        self.kv = kv
        self.prefixes = prefixes
        self.nbytes = sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in kv)


class KVStore:
    """The prompt's KV and the blocks of prefix KV, LRU-bounded by ``max_bytes``.

    ``index`` maps a stored prefix to ``(block id, row)``; ``used_bytes`` is the blocks' total
    (the prompt's KV is not counted).  Prefixes longer than ``max_len`` are not stored.
    """

    def __init__(self, max_bytes: int, device: torch.device) -> None:
        self.max_bytes = max_bytes
        self.max_len: int | None = None  # prefixes longer than this are not stored (None: no limit)
        self.device = device
        self.prompt: KV | None = None
        self.bytes_per_token: int | None = None
        self.blocks: OrderedDict[int, Block] = OrderedDict()
        self.index: dict[tuple[int, ...], tuple[int, int]] = {}
        self.used_bytes = 0
        self.next_block = 0

    def empty_copy(self) -> KVStore:
        """A store with the same bounds and bytes per token, holding nothing (for another prompt)."""
        new = KVStore(self.max_bytes, self.device)
        new.max_len = self.max_len
        new.bytes_per_token = self.bytes_per_token
        return new

    def set_prompt(self, kv: KV) -> None:
        """Keep a copy of the prompt's KV and note the bytes one token takes."""
        self.prompt = [(k.clone(), v.clone()) for k, v in kv]
        self.bytes_per_token = sum(
            (k[0, :, :1].numel() * k.element_size() + v[0, :, :1].numel() * v.element_size()) for k, v in kv
        )

    def broadcast_prompt(self, rows: int) -> KV:
        """The prompt's KV expanded (not copied) to ``rows`` batch rows."""
        assert self.prompt is not None
        return [(k.expand(rows, -1, -1, -1), v.expand(rows, -1, -1, -1)) for k, v in self.prompt]

    def clear(self) -> None:
        """Drop every block (the prompt's KV is kept)."""
        self.blocks.clear()
        self.index.clear()
        self.used_bytes = 0

    def put(self, prefixes: list[tuple[int, ...]], cache: Any, prompt_len: int) -> int:
        """Store the own-token KV of ``prefixes`` (rows of ``cache``); return the blocks evicted."""
        if self.max_bytes <= 0:
            return 0
        if self.max_len is not None and len(prefixes[0]) > self.max_len:
            return 0  # no child of these prefixes will be scored
        P = prompt_len
        kv = [(k[:, :, P:, :].clone(), v[:, :, P:, :].clone()) for k, v in kv_layers(cache)]
        block = Block(kv, prefixes)
        if block.nbytes > self.max_bytes:
            return 0
        bid = self.next_block
        self.next_block += 1
        self.blocks[bid] = block
        self.used_bytes += block.nbytes
        for row, p in enumerate(prefixes):
            self.index[p] = (bid, row)
        evicted = 0
        while self.used_bytes > self.max_bytes:
            old_id, old = self.blocks.popitem(last=False)
            self.used_bytes -= old.nbytes
            evicted += 1
            for p in old.prefixes:
                where = self.index.get(p)
                if where is not None and where[0] == old_id:
                    del self.index[p]
        return evicted

    def gather(self, parents: list[tuple[int, ...]]) -> KV:
        """Past KV (prompt broadcast + parents' own tokens) for one-token forwards; parents stored."""
        m = len(parents)
        prompt = self.broadcast_prompt(m)
        if len(parents[0]) == 0:
            return prompt
        runs: list[tuple[int, list[int]]] = []
        for p in parents:
            bid, row = self.index[p]
            if runs and runs[-1][0] == bid:
                runs[-1][1].append(row)
            else:
                runs.append((bid, [row]))
        idx = []
        for bid, rows in runs:
            self.blocks.move_to_end(bid)
            idx.append(torch.tensor(rows, dtype=torch.long, device=self.device))
        past = []
        for layer, (pk, pv) in enumerate(prompt):
            ks = [self.blocks[bid].kv[layer][0].index_select(0, ix) for (bid, _), ix in zip(runs, idx)]
            vs = [self.blocks[bid].kv[layer][1].index_select(0, ix) for (bid, _), ix in zip(runs, idx)]
            gk = ks[0] if len(ks) == 1 else torch.cat(ks, dim=0)
            gv = vs[0] if len(vs) == 1 else torch.cat(vs, dim=0)
            past.append((torch.cat([pk, gk], dim=2), torch.cat([pv, gv], dim=2)))
        return past
