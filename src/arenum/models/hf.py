"""Hugging Face causal-LM adapter: the callbacks :class:`arenum.AutoregressiveEnumerable` needs.

This is the only module of arenum that imports ``torch`` and ``transformers`` (install them with
the ``arenum[hf]`` extra).  ``import arenum`` never imports this module.

:class:`CausalLMOracle` wraps a causal language model and, optionally, its tokenizer.  The
enumerated sequences are continuations of a fixed *prompt*: the empty prefix ``()`` stands for the
prompt (or for the BOS token when there is no prompt), and a prefix ``(t1, ..., td)`` stands for
``prompt + [t1, ..., td]``.  Token ids are the model's own ids ``0 .. V-1`` where ``V`` is the
width of the model's output layer.

Usage (the path must be a local directory or an entry already in the local Hugging Face cache;
nothing is ever downloaded)::

    from arenum.models.hf import CausalLMOracle

    oracle = CausalLMOracle.from_pretrained("/models/distilgpt2", prompt="The password is")
    enum = oracle.enumerable(max_len=3)          # eos taken from the tokenizer / config
    enum.threshold(10**5)                         # log-prob of the 100000-th most likely text
    seq, logp = enum.unrank(0)                    # the most likely continuation
    oracle.decode(seq)

See ``docs/hf.md`` for the KV-reuse scheme, its memory bound, devices and dtypes, and costs.
"""
from __future__ import annotations

import inspect
import math
import os
import time
import warnings
from collections import OrderedDict
from dataclasses import asdict, dataclass
from typing import Any, Iterable, Iterator, Sequence

import numpy as np
import torch

try:  # transformers >= 4.36; 5.x is what arenum is tested with
    from transformers import DynamicCache
except ImportError:  # pragma: no cover - very old transformers
    DynamicCache = None  # type: ignore[assignment,misc]

__all__ = ["CausalLMOracle", "OracleStats"]

_DTYPE_NAMES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "float": torch.float32,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
    "half": torch.float16,
    "float64": torch.float64,
    "fp64": torch.float64,
    "double": torch.float64,
}

_MIB = 2**20


@dataclass
class OracleStats:
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


class _Block:
    """KV of the *own* tokens (prompt excluded) of a batch of prefixes of one length.

    ``kv[layer] = (keys, values)`` with shape ``[rows, heads, len, head_dim]``.
    """

    __slots__ = ("kv", "prefixes", "nbytes")

    def __init__(self, kv: list[tuple[torch.Tensor, torch.Tensor]], prefixes: list[tuple[int, ...]]):
        self.kv = kv
        self.prefixes = prefixes
        self.nbytes = sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in kv)


class _NoKV(Exception):
    """The model's cache is not a plain per-layer full-attention KV cache."""


def _resolve_device(device: Any, model: torch.nn.Module | None) -> torch.device:
    if device is None:
        if model is not None:
            try:
                return next(model.parameters()).device
            except StopIteration:
                pass
        return torch.device("cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise ValueError(f"invalid device {device!r}: {exc}") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {device!r} requested but torch.cuda.is_available() is False")
    return dev


def _resolve_dtype(dtype: Any, device: torch.device) -> torch.dtype | None:
    """``None`` keeps the model's dtype; ``"auto"`` is float32 on CPU, bf16 (else fp16) on CUDA."""
    if dtype is None:
        return None
    if isinstance(dtype, torch.dtype):
        if not dtype.is_floating_point:
            raise ValueError(f"dtype must be a floating-point torch dtype, got {dtype}")
        return dtype
    if isinstance(dtype, str):
        key = dtype.strip().lower().removeprefix("torch.")
        if key == "auto":
            if device.type == "cpu":
                return torch.float32
            if device.type == "cuda":
                return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
            return torch.float32
        if key in _DTYPE_NAMES:
            return _DTYPE_NAMES[key]
    raise ValueError(
        f"unknown dtype {dtype!r}; expected None (keep the model's), 'auto', a torch.dtype, or one "
        f"of {sorted(_DTYPE_NAMES)}"
    )


def _first_id(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, (list, tuple)):
        return int(value[0]) if len(value) else None
    return int(value)


def _kv_list(cache: Any) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per-layer ``(keys, values)`` of a full-attention cache, else raise :class:`_NoKV`."""
    layers = getattr(cache, "layers", None)
    if layers is not None:
        out = []
        for layer in layers:
            if getattr(layer, "is_sliding", False) or not hasattr(layer, "keys"):
                raise _NoKV(type(layer).__name__)
            if type(layer).__name__ != "DynamicLayer":
                raise _NoKV(type(layer).__name__)
            out.append((layer.keys, layer.values))
        if not out:
            raise _NoKV("empty cache")
        return out
    if isinstance(cache, (tuple, list)) and cache and isinstance(cache[0], (tuple, list)):
        return [(kv[0], kv[1]) for kv in cache]
    raise _NoKV(type(cache).__name__)


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
        ``eos_token_id`` attributes works.
    prompt:
        Token ids or text (encoded with the tokenizer, ``add_special_tokens`` as given).
        ``None`` or empty: the prompt is ``[bos]``; if there is no BOS either, ``ValueError``.
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
    The prompt is run once; its KV and next-token log-probs are kept.  After a batch of prefixes
    of length ``d`` is scored, the KV of their own ``d`` tokens is kept in a block keyed by
    prefix.  A later prefix whose parent ``prefix[:-1]`` is still cached costs ONE token of
    compute: the parents' KV rows are gathered, the prompt's KV is broadcast in front, and a
    one-token forward is run.  Otherwise the prefix's ``d`` tokens are run on top of the broadcast
    prompt KV.  A call's prefixes are grouped by length, so no padding is ever used.
    :meth:`enumerable` sets :attr:`kv_store_max_len` so the deepest level the core scores (whose
    KV no child needs) is not stored and cannot evict its parents.

    Peak memory beyond the weights is about ``kv_cache_bytes`` + ``3 x max_forward_tokens x
    kv_bytes_per_token`` (gathered past, the model's concatenated cache, the kept copy) + the
    model's activations for at most ``max_forward_tokens`` query tokens + ``2 x
    forward_batch_size x V x 8`` bytes of float64 logits + the ``n x V x 8``-byte result of
    :meth:`batch_next_logprobs` (:meth:`batch_next_heads`, which the core's tree uses, returns
    only the heads: 16 bytes per entry).  ``kv_bytes_per_token = 2 x layers x kv_heads x head_dim x
    dtype_bytes`` (36 KiB for distilGPT-2 in float32); :attr:`kv_bytes_per_token` reports it.
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
        self.device = _resolve_device(device, model)
        tdtype = _resolve_dtype(dtype, self.device)
        if tdtype is not None:
            model.to(device=self.device, dtype=tdtype)
        else:
            model.to(device=self.device)
        model.eval()
        self.model = model
        self.tokenizer = tokenizer
        try:
            self.dtype = next(model.parameters()).dtype
        except StopIteration:
            self.dtype = tdtype or torch.float32

        if not (isinstance(logit_scale, (int, float)) and math.isfinite(logit_scale) and logit_scale > 0):
            raise ValueError(f"logit_scale must be a finite positive number, got {logit_scale!r}")
        self.logit_scale = float(logit_scale)
        for name, val in (("forward_batch_size", forward_batch_size), ("max_forward_tokens", max_forward_tokens),
                          ("max_logits_bytes", max_logits_bytes)):
            if not isinstance(val, int) or val < 1:
                raise ValueError(f"{name} must be a positive int, got {val!r}")
        if not isinstance(kv_cache_bytes, int) or kv_cache_bytes < 0:
            raise ValueError(f"kv_cache_bytes must be a non-negative int, got {kv_cache_bytes!r}")
        self.forward_batch_size = forward_batch_size
        self.max_forward_tokens = max_forward_tokens
        self.max_logits_bytes = max_logits_bytes
        self.kv_cache_bytes = kv_cache_bytes

        self.vocab_size = self._infer_vocab_size()
        config = getattr(model, "config", None)

        # ---- BOS / EOS -----------------------------------------------------------------------
        self.bos_token_id = self._resolve_special("bos", bos_token_id, config)
        self.eos = self._resolve_special("eos", eos, config)

        # ---- prompt --------------------------------------------------------------------------
        self._add_special_tokens = add_special_tokens
        self.prompt_ids = self._encode_prompt(prompt)

        # ---- forward signature ---------------------------------------------------------------
        params = inspect.signature(model.forward).parameters
        if "cache" in params:
            self._cache_kw: str | None = "cache"
        elif "past_key_values" in params:
            self._cache_kw = "past_key_values"
        else:
            self._cache_kw = None
        self._has_logits_to_keep = "logits_to_keep" in params
        self.kv_reuse = bool(kv_reuse)
        if self.kv_reuse and (self._cache_kw is None or DynamicCache is None):
            warnings.warn("model forward takes no KV cache; KV reuse disabled", RuntimeWarning, stacklevel=2)
            self.kv_reuse = False

        self.stats = OracleStats()
        self._prompt_kv: list[tuple[torch.Tensor, torch.Tensor]] | None = None
        self._prompt_logprobs: np.ndarray | None = None
        self._blocks: OrderedDict[int, _Block] = OrderedDict()
        self._index: dict[tuple[int, ...], tuple[int, int]] = {}
        self._kv_bytes_used = 0
        self._next_block = 0
        self._kv_bytes_per_token: int | None = None
        self._work: np.ndarray | None = None  # float64 work buffer of the CPU normalization
        self.kv_store_max_len: int | None = None
        """Prefixes longer than this are not kept in the KV store (``None``: no limit).

        :meth:`enumerable` sets it to ``max_len - 2`` (the longest prefix whose children the core
        may score), taking the largest over the enumerables built; set it back to ``None`` to store
        every prefix again."""
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

        ``tokenizer="auto"`` loads the tokenizer from ``path`` when it has one (else none);
        ``None`` loads none; an object is used as given.  ``device=None`` means CPU here.  Other
        keyword arguments go to :class:`CausalLMOracle`.  Nothing is ever downloaded: a name that
        is neither a directory nor in the local Hugging Face cache raises.
        """
        from transformers import AutoModelForCausalLM, AutoTokenizer

        path = os.fspath(path)
        dev = _resolve_device(device, None)
        tdtype = _resolve_dtype(dtype, dev)
        mk = dict(model_kwargs or {})
        if tdtype is not None:
            mk.setdefault("dtype", tdtype)
        try:
            model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True, **mk)
        except OSError as exc:
            raise FileNotFoundError(
                f"no local causal-LM checkpoint at {path!r} (local_files_only=True; nothing is downloaded): {exc}"
            ) from exc
        if isinstance(tokenizer, str) and tokenizer == "auto":
            try:
                tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
            except (OSError, ValueError, TypeError, KeyError):
                tokenizer = None
        return cls(model, tokenizer, device=dev, dtype=tdtype, **kwargs)

    def with_prompt(self, prompt: str | Sequence[int] | None) -> "CausalLMOracle":
        """A new oracle sharing model, tokenizer and settings, continuing another prompt."""
        new = object.__new__(CausalLMOracle)
        new.__dict__.update(self.__dict__)
        new.prompt_ids = self._encode_prompt(prompt)
        new.stats = OracleStats()
        new._prompt_kv = None
        new._prompt_logprobs = None
        new._blocks = OrderedDict()
        new._index = {}
        new._kv_bytes_used = 0
        new._next_block = 0
        new._work = None
        return new

    def _infer_vocab_size(self) -> int:
        out = None
        get_out = getattr(self.model, "get_output_embeddings", None)
        if callable(get_out):
            try:
                out = get_out()
            except (NotImplementedError, AttributeError):
                out = None
        if out is not None:
            n = getattr(out, "out_features", None)
            if n is None and getattr(out, "weight", None) is not None:
                n = out.weight.shape[0]
            if n:
                return int(n)
        config = getattr(self.model, "config", None)
        if config is not None:
            text = config.get_text_config() if hasattr(config, "get_text_config") else config
            if getattr(text, "vocab_size", None):
                return int(text.vocab_size)
        raise ValueError("cannot tell the model's vocabulary size (no output embeddings, no config.vocab_size)")

    def _resolve_special(self, which: str, value: Any, config: Any) -> int | None:
        attr = f"{which}_token_id"
        if isinstance(value, str):
            if value != "auto":
                raise ValueError(f"{which} must be 'auto', None or a token id, got {value!r}")
            source, tid = None, None
            if self.tokenizer is not None and _first_id(getattr(self.tokenizer, attr, None)) is not None:
                source, tid = "tokenizer", _first_id(getattr(self.tokenizer, attr))
            elif config is not None and _first_id(getattr(config, attr, None)) is not None:
                source, tid = "model.config", _first_id(getattr(config, attr))
            if tid is None:
                return None
            if not 0 <= tid < self.vocab_size:
                raise ValueError(
                    f"{attr} {tid} (from {source}) is outside the vocabulary 0..{self.vocab_size - 1}; "
                    f"pass {'bos_token_id' if which == 'bos' else 'eos'}=<id> or None"
                )
            return tid
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise ValueError(f"{which} must be 'auto', None or an int token id, got {value!r}")
        if not 0 <= int(value) < self.vocab_size:
            raise ValueError(f"{which} token id {value} is outside the vocabulary 0..{self.vocab_size - 1}")
        return int(value)

    def _encode_prompt(self, prompt: str | Sequence[int] | None) -> list[int]:
        if isinstance(prompt, str):
            if self.tokenizer is None:
                raise ValueError("a text prompt needs a tokenizer; pass tokenizer=... or token ids")
            try:
                ids = self.tokenizer.encode(prompt, add_special_tokens=self._add_special_tokens)
            except TypeError:
                ids = self.tokenizer.encode(prompt)
            ids = [int(t) for t in ids]
        elif prompt is None:
            ids = []
        else:
            try:
                ids = [int(t) for t in prompt]
            except (TypeError, ValueError):
                raise ValueError(f"prompt must be text, token ids or None, got {prompt!r}") from None
        bad = [t for t in ids if not 0 <= t < self.vocab_size]
        if bad:
            raise ValueError(f"prompt token ids {bad[:5]} are outside the vocabulary 0..{self.vocab_size - 1}")
        if not ids:
            if self.bos_token_id is None:
                raise ValueError(
                    "no prompt and no BOS token: the empty prefix has no context to condition on; "
                    "give a prompt (text or token ids) or bos_token_id=<id>"
                )
            ids = [self.bos_token_id]
        return ids

    # ------------------------------------------------------------------ public info
    @property
    def V(self) -> int:
        """Vocabulary size (width of the model's output layer)."""
        return self.vocab_size

    @property
    def kv_bytes_per_token(self) -> int:
        """Bytes of KV one token occupies (all layers, keys and values); known after the first forward."""
        if self._kv_bytes_per_token is None and self.kv_reuse:
            self._prompt_state()
        return int(self._kv_bytes_per_token or 0)

    @property
    def kv_cache_used_bytes(self) -> int:
        return self._kv_bytes_used

    def reset_stats(self) -> None:
        self.stats = OracleStats()

    def clear_cache(self) -> None:
        """Drop every cached prefix KV (the prompt's is kept)."""
        self._blocks.clear()
        self._index.clear()
        self._kv_bytes_used = 0

    def __repr__(self) -> str:
        return (
            f"CausalLMOracle({type(self.model).__name__}, V={self.vocab_size}, prompt_len={len(self.prompt_ids)}, "
            f"eos={self.eos}, device={self.device}, dtype={self.dtype}, kv_reuse={self.kv_reuse})"
        )

    # ------------------------------------------------------------------ model plumbing
    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def _new_cache(self, past: list[tuple[torch.Tensor, torch.Tensor]] | None) -> Any:
        cache = DynamicCache()
        if past is not None:
            for i, (k, v) in enumerate(past):
                cache.update(k, v, i)
        return cache

    def _forward(
        self,
        ids: torch.Tensor,
        past: list[tuple[torch.Tensor, torch.Tensor]] | None = None,
        keep: int = 0,
        use_cache: bool = False,
    ) -> tuple[torch.Tensor, Any]:
        """Run the model; return (logits of the last ``keep`` positions (all if 0), cache or None)."""
        kwargs: dict[str, Any] = {"use_cache": use_cache}
        cache = None
        if use_cache:
            cache = self._new_cache(past)
            kwargs[self._cache_kw] = cache  # type: ignore[index]
        if keep and self._has_logits_to_keep:
            kwargs["logits_to_keep"] = keep
        self._sync()
        t0 = time.perf_counter()
        out = self.model(input_ids=ids, **kwargs)
        self._sync()
        st = self.stats
        st.forward_seconds += time.perf_counter() - t0
        st.forward_calls += 1
        st.rows += int(ids.shape[0])
        st.tokens_computed += int(ids.numel())
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

    # ------------------------------------------------------------------ normalization
    # Every path (dense rows, table heads, the prompt row, teacher forcing) computes a log-prob as
    # ``float64(logit) * logit_scale - lse`` with ``lse`` the float64 log-sum-exp of the scaled row,
    # so the same logits give bit-identical numbers whichever callback asked for them.
    _CPU_ROWS = 8  # rows normalized per pass on CPU (keeps the float64 work buffer in cache)

    def _scaled64(self, x: np.ndarray, out: np.ndarray) -> np.ndarray:
        """``out = float64(x) * logit_scale`` (CPU)."""
        if self.logit_scale != 1.0:
            np.multiply(x, self.logit_scale, out=out, dtype=np.float64)
        else:
            np.copyto(out, x, casting="safe")
        return out

    def _lse_cpu(self, x: np.ndarray) -> np.ndarray:
        """float64 log-sum-exp of each scaled row of ``x`` (2-D, CPU), in cache-sized passes."""
        m, V = x.shape
        lse = np.empty(m, np.float64)
        step = self._CPU_ROWS
        buf = self._work_buffer(min(m, step) * V).reshape(-1, V)
        # max(float64(x) * s) == float64(max(x)) * s for s > 0 (rounding is monotone): max in float32
        mxs = x.max(axis=1).astype(np.float64)
        if self.logit_scale != 1.0:
            mxs *= self.logit_scale
        for a in range(0, m, step):
            w = buf[: min(step, m - a)]
            self._scaled64(x[a : a + step], w)
            mx = mxs[a : a + step]
            np.subtract(w, mx[:, None], out=w)
            np.exp(w, out=w)
            lse[a : a + step] = mx + np.log(w.sum(axis=1))
        return lse

    def _work_buffer(self, n: int) -> np.ndarray:
        buf = self._work
        if buf is None or buf.shape[0] < n:
            buf = self._work = np.empty(n, np.float64)
        return buf[:n]

    @staticmethod
    def _as_numpy(logits: torch.Tensor) -> np.ndarray:
        if logits.dtype not in (torch.float32, torch.float64):
            logits = logits.to(torch.float32)  # bf16/fp16 -> float32 is exact
        return logits.detach().numpy()

    @staticmethod
    def _host_math(logits: torch.Tensor) -> bool:
        """Normalize in numpy (CPU tensors) rather than in torch on the model's device."""
        return logits.device.type == "cpu"

    def _logprobs(self, logits: torch.Tensor) -> torch.Tensor:
        """float64 log-softmax over the last axis (after ``logit_scale``), any leading shape."""
        shape = logits.shape
        V = shape[-1]
        if self._host_math(logits):
            x = self._as_numpy(logits.reshape(-1, V))
            out = np.empty(x.shape, np.float64)
            self._write_rows_cpu(out, x)
            return torch.from_numpy(out).reshape(shape)
        x64 = logits.to(torch.float64)
        if self.logit_scale != 1.0:
            x64 = x64 * self.logit_scale
        return x64.sub_(torch.logsumexp(x64, dim=-1, keepdim=True))

    def _write_rows_cpu(self, dst: np.ndarray, x: np.ndarray) -> None:
        """``dst = float64(x) * logit_scale - lse`` row by row (``dst`` float64, same shape)."""
        lse = self._lse_cpu(x)
        self._scaled64(x, dst)
        dst -= lse[:, None]

    def _write_logprobs(self, dst: np.ndarray, rows: list[int], logits: torch.Tensor) -> None:
        """``dst[rows] = log_softmax(logit_scale * logits)`` in float64 (``dst`` a numpy array)."""
        if self._host_math(logits):
            x = self._as_numpy(logits)
            if all(b - a == 1 for a, b in zip(rows, rows[1:])):
                self._write_rows_cpu(dst[rows[0] : rows[-1] + 1], x)
            else:
                tmp = np.empty(x.shape, np.float64)
                self._write_rows_cpu(tmp, x)
                dst[rows] = tmp
        else:
            dst[rows] = self._logprobs(logits).cpu().numpy()

    def _heads_of(self, logits: torch.Tensor, floors: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Entries with log-prob ``>= floors[r]`` of each row: ``(row, col, logp)``, row-major.

        The same numbers as :meth:`_logprobs`; only the selected entries leave the device.
        """
        if self._host_math(logits):
            x = self._as_numpy(logits)
            lse = self._lse_cpu(x)
            # candidates by a float32 compare a hair below the threshold, then the exact test
            with np.errstate(invalid="ignore", over="ignore"):
                thr = (floors + lse) / self.logit_scale
                cut = (thr - 1e-6 * (1.0 + np.abs(thr))).astype(x.dtype)
            cut[np.isnan(thr)] = -np.inf
            flat = np.flatnonzero(x >= cut[:, None])
            r, c = np.divmod(flat, x.shape[1])
            vals = x.reshape(-1)[flat].astype(np.float64)
            if self.logit_scale != 1.0:
                vals *= self.logit_scale
            vals -= lse[r]
            ok = vals >= floors[r]
            return r[ok], c[ok], vals[ok]
        lp = self._logprobs(logits)
        f = torch.as_tensor(floors, dtype=torch.float64, device=lp.device)
        r, c = torch.nonzero(lp >= f[:, None], as_tuple=True)
        return r.cpu().numpy(), c.cpu().numpy(), lp[r, c].cpu().numpy()

    def _tensor(self, rows: list[Sequence[int]]) -> torch.Tensor:
        t = torch.tensor(rows, dtype=torch.long)
        if t.numel() and (int(t.min()) < 0 or int(t.max()) >= self.vocab_size):
            bad = t[(t < 0) | (t >= self.vocab_size)][:5].tolist()
            raise ValueError(f"token ids {bad} are outside the vocabulary 0..{self.vocab_size - 1}")
        return t.to(self.device)

    def _rows_per_forward(self, context_tokens: int, logits_positions: int = 1) -> int:
        rows = min(self.forward_batch_size, self.max_forward_tokens // max(1, context_tokens))
        if logits_positions > 0:
            rows = min(rows, self.max_logits_bytes // max(1, logits_positions * self.vocab_size * 8))
        return max(1, rows)

    def _prompt_state(self) -> np.ndarray:
        """Run the prompt once: cache its KV (if reusing) and its next-token log-probs."""
        if self._prompt_logprobs is not None:
            return self._prompt_logprobs
        ids = self._tensor([self.prompt_ids])
        with torch.inference_mode():
            if self.kv_reuse:
                try:
                    if not self._plain_cache_layers():
                        raise _NoKV("the model's config asks for non-full-attention cache layers")
                    logits, cache = self._forward(ids, keep=1, use_cache=True)
                    kv = _kv_list(cache)
                    if any(k.shape[-2] != len(self.prompt_ids) for k, _ in kv):
                        raise _NoKV("cache length differs from prompt length")
                except (_NoKV, TypeError, AttributeError, NotImplementedError) as exc:
                    warnings.warn(
                        f"model cache is not a plain full-attention KV cache ({exc}); KV reuse disabled",
                        RuntimeWarning,
                        stacklevel=3,
                    )
                    self.kv_reuse = False
                    kv = None
                if kv is None:
                    logits, _ = self._forward(ids, keep=1, use_cache=False)
                else:
                    self._prompt_kv = [(k.clone(), v.clone()) for k, v in kv]
                    self._kv_bytes_per_token = sum(
                        (k[0, :, :1].numel() * k.element_size() + v[0, :, :1].numel() * v.element_size())
                        for k, v in kv
                    )
            else:
                logits, _ = self._forward(ids, keep=1, use_cache=False)
            lp = self._logprobs(logits[0, -1]).cpu().numpy()
        if lp.shape != (self.vocab_size,):
            raise ValueError(f"model returned logits of width {lp.shape[-1]}, expected {self.vocab_size}")
        self._prompt_logprobs = lp
        return lp

    def _plain_cache_layers(self) -> bool:
        """False when the config asks for cache layers other than full-attention DynamicLayers."""
        config = getattr(self.model, "config", None)
        if config is None:
            return True
        try:
            probe = DynamicCache(config=config)
        except Exception:  # noqa: BLE001 - cannot tell; the prompt forward decides
            return True
        return all(type(layer).__name__ == "DynamicLayer" for layer in getattr(probe, "layers", []) or [])

    def _broadcast_prompt(self, rows: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        assert self._prompt_kv is not None
        return [(k.expand(rows, -1, -1, -1), v.expand(rows, -1, -1, -1)) for k, v in self._prompt_kv]

    # ------------------------------------------------------------------ KV block store
    def _store(self, prefixes: list[tuple[int, ...]], cache: Any) -> None:
        if self.kv_cache_bytes <= 0:
            return
        if self.kv_store_max_len is not None and len(prefixes[0]) > self.kv_store_max_len:
            return  # no child of these prefixes will be scored
        P = len(self.prompt_ids)
        kv = [(k[:, :, P:, :].clone(), v[:, :, P:, :].clone()) for k, v in _kv_list(cache)]
        block = _Block(kv, prefixes)
        if block.nbytes > self.kv_cache_bytes:
            return
        bid = self._next_block
        self._next_block += 1
        self._blocks[bid] = block
        self._kv_bytes_used += block.nbytes
        for row, p in enumerate(prefixes):
            self._index[p] = (bid, row)
        while self._kv_bytes_used > self.kv_cache_bytes:
            old_id, old = self._blocks.popitem(last=False)
            self._kv_bytes_used -= old.nbytes
            self.stats.kv_evictions += 1
            for p in old.prefixes:
                where = self._index.get(p)
                if where is not None and where[0] == old_id:
                    del self._index[p]

    def _gather_parents(self, parents: list[tuple[int, ...]]) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Past KV (prompt broadcast + parents' own tokens) for one-token forwards."""
        m = len(parents)
        prompt = self._broadcast_prompt(m)
        if len(parents[0]) == 0:
            return prompt
        runs: list[tuple[int, list[int]]] = []
        for p in parents:
            bid, row = self._index[p]
            if runs and runs[-1][0] == bid:
                runs[-1][1].append(row)
            else:
                runs.append((bid, [row]))
        idx = []
        for bid, rows in runs:
            self._blocks.move_to_end(bid)
            idx.append(torch.tensor(rows, dtype=torch.long, device=self.device))
        past = []
        for layer, (pk, pv) in enumerate(prompt):
            ks = [self._blocks[bid].kv[layer][0].index_select(0, ix) for (bid, _), ix in zip(runs, idx)]
            vs = [self._blocks[bid].kv[layer][1].index_select(0, ix) for (bid, _), ix in zip(runs, idx)]
            gk = ks[0] if len(ks) == 1 else torch.cat(ks, dim=0)
            gv = vs[0] if len(vs) == 1 else torch.cat(vs, dim=0)
            past.append((torch.cat([pk, gk], dim=2), torch.cat([pv, gv], dim=2)))
        return past

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
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Table heads: for each prefix, the tokens whose log-prob is ``>= floors[i]``.

        Returns ``(counts, tokens, log_probs, widths)`` (see ``docs/core.md``): ``counts[i]``
        entries per prefix, concatenated in prefix order with ascending token ids inside a row,
        float64 log-probs bit-identical to :meth:`batch_next_logprobs`, and ``widths[i] = V``.
        The rows are normalized and cut where the model runs, so only the heads are copied out;
        the core's prefix tree uses this instead of full rows (wired by :meth:`enumerable`).
        """
        t_start = time.perf_counter()
        keys = self._keys(prefixes)
        n = len(keys)
        fl = np.asarray(floors, dtype=np.float64).reshape(-1)
        if fl.shape[0] != n:
            raise ValueError(f"batch_next_heads: {fl.shape[0]} floors for {n} prefixes")
        parts_r: list[np.ndarray] = []
        parts_c: list[np.ndarray] = []
        parts_v: list[np.ndarray] = []
        for rows, logits in self._level_logits(keys):
            ix = np.asarray(rows, dtype=np.int64)
            if logits is None:
                lp = self._prompt_logprobs
                assert lp is not None
                for i in ix.tolist():
                    c = np.flatnonzero(lp >= fl[i])
                    parts_r.append(np.full(c.shape[0], i, np.int64))
                    parts_c.append(c)
                    parts_v.append(lp[c])
            else:
                r, c, v = self._heads_of(logits, fl[ix])
                parts_r.append(ix[r])
                parts_c.append(c)
                parts_v.append(v)
        if parts_r:
            r = np.concatenate(parts_r)
            order = np.argsort(r, kind="stable")  # prefix order; columns stay ascending in a row
            tokens = np.concatenate(parts_c).astype(np.int64, copy=False)[order]
            logps = np.concatenate(parts_v)[order]
            counts = np.bincount(r, minlength=n).astype(np.int64)
        else:
            tokens, logps, counts = np.zeros(0, np.int64), np.zeros(0), np.zeros(n, np.int64)
        self.stats.callback_seconds += time.perf_counter() - t_start
        return counts, tokens, logps, np.full(n, self.vocab_size, np.int64)

    @staticmethod
    def _keys(prefixes: Sequence[Sequence[int]]) -> list[tuple[int, ...]]:
        return [p if type(p) is tuple else tuple(int(t) for t in p) for p in prefixes]

    def _level_logits(self, keys: list[tuple[int, ...]]) -> Iterator[tuple[list[int], torch.Tensor | None]]:
        """Run the forwards for ``keys``; yield ``(rows, last-position logits)`` chunk by chunk.

        ``logits`` is ``None`` for rows of the empty prefix (their log-probs are the prompt's,
        cached). Prefixes are grouped by length (no padding); a prefix whose parent's KV is cached
        costs a one-token forward, others run all their tokens on the broadcast prompt KV.
        """
        if not keys:
            return
        self._prompt_state()
        by_len: dict[int, list[int]] = {}
        for i, p in enumerate(keys):
            by_len.setdefault(len(p), []).append(i)
        P = len(self.prompt_ids)
        with torch.inference_mode():
            for d, idx in by_len.items():
                if d == 0:
                    self.stats.kv_hits += len(idx)
                    yield idx, None
                    continue
                step = self._rows_per_forward(P + d)
                if not self.kv_reuse:
                    for s in range(0, len(idx), step):
                        chunk = idx[s : s + step]
                        ids = self._tensor([self.prompt_ids + list(keys[i]) for i in chunk])
                        logits, _ = self._forward(ids, keep=1)
                        self.stats.kv_misses += len(chunk)
                        yield chunk, logits[:, -1]
                    continue
                hits = [i for i in idx if d == 1 or keys[i][:-1] in self._index]
                hit_set = set(hits)
                misses = [i for i in idx if i not in hit_set] if len(hits) < len(idx) else []
                for s in range(0, len(hits), step):
                    chunk = hits[s : s + step]
                    # re-check: storing earlier chunks of this call may have evicted a parent
                    if d > 1 and any(keys[i][:-1] not in self._index for i in chunk):
                        misses.extend(i for i in chunk if keys[i][:-1] not in self._index)
                        chunk = [i for i in chunk if keys[i][:-1] in self._index]
                        if not chunk:
                            continue
                    chunk_keys = [keys[i] for i in chunk]
                    past = self._gather_parents([p[:-1] for p in chunk_keys])
                    ids = self._tensor([[p[-1]] for p in chunk_keys])
                    logits, cache = self._forward(ids, past=past, keep=1, use_cache=True)
                    del past
                    self._store(chunk_keys, cache)
                    self.stats.kv_hits += len(chunk)
                    yield chunk, logits[:, -1]
                for s in range(0, len(misses), step):
                    chunk = misses[s : s + step]
                    chunk_keys = [keys[i] for i in chunk]
                    ids = self._tensor(chunk_keys)
                    logits, cache = self._forward(ids, past=self._broadcast_prompt(len(chunk)), keep=1, use_cache=True)
                    self._store(chunk_keys, cache)
                    self.stats.kv_misses += len(chunk)
                    yield chunk, logits[:, -1]

    def _position_logprobs(self, seqs: list[tuple[int, ...]], L: int, targets_only: bool) -> np.ndarray:
        """For equal-length ``seqs`` (L >= 1): (n, L) target log-probs, or (n, L, V) full rows."""
        n = len(seqs)
        V = self.vocab_size
        P = len(self.prompt_ids)
        res = np.empty((n, L) if targets_only else (n, L, V), dtype=np.float64)
        prompt_lp = self._prompt_state()
        if self.kv_reuse:
            # row 0 comes from the prompt's cached logits; positions 1.. from seq[:-1] on the prompt KV
            if targets_only:
                res[:, 0] = prompt_lp[[s[0] for s in seqs]]
            else:
                res[:, 0] = prompt_lp
            if L == 1:
                return res
            step = self._rows_per_forward(P + L - 1, L - 1)
            for s in range(0, n, step):
                chunk = seqs[s : s + step]
                ids = self._tensor([c[:-1] for c in chunk])
                logits, _ = self._forward(ids, past=self._broadcast_prompt(len(chunk)), use_cache=True)
                lp = self._logprobs(logits)
                if targets_only:
                    tgt = self._tensor([c[1:] for c in chunk]).unsqueeze(-1)
                    res[s : s + len(chunk), 1:] = lp.gather(-1, tgt).squeeze(-1).cpu().numpy()
                else:
                    res[s : s + len(chunk), 1:] = lp.cpu().numpy()
            return res
        step = self._rows_per_forward(P + L - 1, L)
        for s in range(0, n, step):
            chunk = seqs[s : s + step]
            ids = self._tensor([self.prompt_ids + list(c[:-1]) for c in chunk])
            logits, _ = self._forward(ids, keep=L)
            lp = self._logprobs(logits)
            if targets_only:
                tgt = self._tensor([list(c) for c in chunk]).unsqueeze(-1)
                res[s : s + len(chunk)] = lp.gather(-1, tgt).squeeze(-1).cpu().numpy()
            else:
                res[s : s + len(chunk)] = lp.cpu().numpy()
        return res

    def score_sequences(self, seqs: Iterable[Sequence[int]]) -> np.ndarray:
        """Teacher-forced total log-prob of each sequence after the prompt (float64, summed left to right).

        Sequences are grouped by length (no padding); a group of length L costs one forward of
        ``L - 1`` tokens per row on the broadcast prompt KV (``P + L - 1`` tokens without KV reuse).
        The empty sequence scores 0.
        """
        t_start = time.perf_counter()
        keys = [s if type(s) is tuple else tuple(int(t) for t in s) for s in seqs]
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
        key = tuple(int(t) for t in seq)
        if not key:
            return np.empty((0, self.vocab_size), dtype=np.float64)
        with torch.inference_mode():
            res = self._position_logprobs([key], len(key), targets_only=False)[0]
        self.stats.callback_seconds += time.perf_counter() - t_start
        return res

    def decode(self, seq: Sequence[int]) -> str:
        """Text of ``seq`` (without the prompt) via the tokenizer; without one, the ids joined by spaces."""
        ids = [int(t) for t in seq]
        if self.tokenizer is None:
            return " ".join(map(str, ids))
        return self.tokenizer.decode(ids)

    # ------------------------------------------------------------------ core wiring
    def enumerable(self, *, max_len: int | None = None, eos: int | str | None = "auto", **kwargs: Any) -> Any:
        """An :class:`arenum.AutoregressiveEnumerable` over continuations of the prompt.

        ``eos="auto"`` uses this oracle's ``eos`` (tokenizer / config / constructor); ``None``
        is fixed-length mode (exactly ``max_len`` tokens).  Other keyword arguments go to the core
        constructor and override the callbacks wired here (e.g. ``batch_next_logprobs=None``).
        """
        from arenum import AutoregressiveEnumerable

        if isinstance(eos, str):
            if eos != "auto":
                raise ValueError(f"eos must be 'auto', None or a token id, got {eos!r}")
            eos_id = self.eos
        elif eos is None:
            eos_id = None
        else:
            if isinstance(eos, bool) or not 0 <= int(eos) < self.vocab_size:
                raise ValueError(f"eos token id {eos!r} is outside the vocabulary 0..{self.vocab_size - 1}")
            eos_id = int(eos)
        # The core scores prefixes of length <= max_len - 1 (fixed length, and terminating with a
        # max_len cap); a prefix's KV only serves its children, so keep only lengths <= max_len - 2.
        valid = isinstance(max_len, (int, np.integer)) and not isinstance(max_len, bool) and max_len >= 1
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
        return AutoregressiveEnumerable(self.next_logprobs, max_len=max_len, eos=eos_id, **wiring)
