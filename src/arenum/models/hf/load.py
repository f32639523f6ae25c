"""Loading for :class:`~arenum.models.hf.CausalLMOracle`: devices and dtypes, local checkpoints,
special tokens (BOS / EOS), the vocabulary size and prompt encoding.

Everything here runs once, when an oracle is built; nothing is on the scoring path.
"""
from __future__ import annotations

import math
import operator
import os
from typing import Any, Sequence

import numpy as np
import torch

__all__ = [
    "DTYPE_NAMES",
    "check_settings",
    "check_tokenizer",
    "context_limit",
    "encode_prompt",
    "load_checkpoint",
    "resolve_device",
    "resolve_dtype",
    "resolve_special",
    "token_ids",
    "tokenizer_problem",
    "vocab_size_of",
]

DTYPE_NAMES: dict[str, torch.dtype] = {
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
RUNNABLE_DTYPES = (torch.float32, torch.bfloat16, torch.float16, torch.float64)


def resolve_device(device: Any, model: torch.nn.Module | None) -> torch.device:
    """``None`` keeps the model's device (CPU without a model); else a checked ``torch.device``.

    ``ValueError`` for a name torch does not know, a device this machine or torch build lacks, and
    ``meta`` (or a model whose weights are on it): it holds no numbers to run.
    """
    first = next(model.parameters(), None) if model is not None else None
    if first is not None and first.is_meta:
        raise ValueError("the model's weights are on the 'meta' device (not loaded); load real weights first")
    if device is None:
        return first.device if first is not None else torch.device("cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise ValueError(f"invalid device {device!r}: {exc}") from None
    if dev.type == "meta":
        raise ValueError(f"device {device!r} holds no data; use 'cpu' or 'cuda'")
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device {device!r} requested but torch.cuda.is_available() is False")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ValueError(f"device {device!r}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    elif dev.type != "cpu":
        try:
            torch.empty(0, device=dev)
        except Exception as exc:  # noqa: BLE001 - RuntimeError, AssertionError, ... from a missing backend
            raise ValueError(f"device {device!r} is not available: {_first_line(exc)}") from None
    return dev


def resolve_dtype(dtype: Any, device: torch.device) -> torch.dtype | None:
    """``None`` keeps the model's dtype; ``"auto"`` is float32 on CPU, bf16 (else fp16) on CUDA."""
    if dtype is None:
        return None
    if isinstance(dtype, torch.dtype):
        if dtype not in RUNNABLE_DTYPES:
            names = ", ".join(str(d).removeprefix("torch.") for d in RUNNABLE_DTYPES)
            raise ValueError(f"dtype must be a floating-point torch dtype a model runs in ({names}), got {dtype}")
        return dtype
    if isinstance(dtype, str):
        key = dtype.strip().lower().removeprefix("torch.")
        if key == "auto":
            if device.type == "cpu":
                return torch.float32
            if device.type == "cuda":
                return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
            return torch.float32
        if key in DTYPE_NAMES:
            return DTYPE_NAMES[key]
    raise ValueError(
        f"unknown dtype {dtype!r}; expected None (keep the model's), 'auto', a torch.dtype, or one "
        f"of {sorted(DTYPE_NAMES)}"
    )


def load_checkpoint(
    path: str | os.PathLike, *, tokenizer: Any, dtype: torch.dtype | None, model_kwargs: dict[str, Any] | None
) -> tuple[torch.nn.Module, Any, str | None]:
    """``(model, tokenizer, why_none)`` from a local checkpoint, ``local_files_only=True`` (nothing is downloaded).

    ``tokenizer="auto"`` loads the checkpoint's tokenizer when it has a usable one; else the
    tokenizer is ``None`` and ``why_none`` says why (no tokenizer files, or an empty or unusable
    tokenizer, which transformers may build for a model saved without tokenizer files).  Anything
    else is returned as given.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = os.fspath(path)
    if os.path.isdir(path) and not os.path.isfile(os.path.join(path, "config.json")):
        raise FileNotFoundError(f"no local causal-LM checkpoint at {path!r}: the folder has no config.json")
    looks_like_path = os.sep in path or path.startswith((".", "~")) or (os.altsep or os.sep) in path
    if looks_like_path and not os.path.exists(path):
        raise FileNotFoundError(f"no local causal-LM checkpoint at {path!r}: no such folder "
                                "(nothing is downloaded; give a folder saved with save_pretrained)")
    mk = dict(model_kwargs or {})
    if dtype is not None:
        mk.setdefault("dtype", dtype)
    try:
        model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True, **mk)
    except OSError as exc:
        raise FileNotFoundError(
            f"no local causal-LM checkpoint at {path!r} (local_files_only=True; nothing is downloaded): {_first_line(exc)}"
        ) from exc
    except (TypeError, ImportError):  # a bad model_kwargs entry, a missing package: named as they are
        raise
    except Exception as exc:  # noqa: BLE001 - damaged weights (SafetensorError), shape mismatches, bad config
        raise ValueError(
            f"cannot load the checkpoint at {path!r}: {type(exc).__name__}: {_first_line(exc)}"
        ) from exc
    why = None
    if isinstance(tokenizer, str) and tokenizer == "auto":
        try:
            tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
        except Exception as exc:  # noqa: BLE001 - missing or damaged tokenizer files: no tokenizer
            tokenizer, why = None, f"no tokenizer could be loaded from {path!r}: {_first_line(exc)}"
        else:
            problem = tokenizer_problem(tokenizer)
            if problem is not None:
                why = f"the tokenizer loaded from {path!r} is unusable ({problem}); saved without tokenizer files?"
                tokenizer = None
    return model, tokenizer, why


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _tokenizer_sizes(tokenizer: Any) -> list[int]:
    """``len(tokenizer)`` (added tokens included) and ``tokenizer.vocab_size`` (base), where they exist."""
    sizes = []
    for get in (lambda: len(tokenizer), lambda: tokenizer.vocab_size):
        try:
            n = get()
        except Exception:  # noqa: BLE001 - not every tokenizer-like object has both
            continue
        if isinstance(n, (int, np.integer)) and not isinstance(n, bool):
            sizes.append(int(n))
    return sizes


def check_tokenizer(tokenizer: Any) -> None:
    """``TypeError`` for an object without ``encode``/``decode``, ``ValueError`` for an empty vocabulary."""
    if not (callable(getattr(tokenizer, "encode", None)) and callable(getattr(tokenizer, "decode", None))):
        raise TypeError(f"tokenizer must have encode() and decode() methods, got {type(tokenizer).__name__}")
    if 0 in _tokenizer_sizes(tokenizer):
        raise ValueError("tokenizer is unusable: its vocabulary is empty; pass a working tokenizer, or none "
                         "and a token-id prompt")


def tokenizer_problem(tokenizer: Any) -> str | None:
    """Why a tokenizer loaded from a checkpoint cannot serve, or ``None``.

    No ``encode``/``decode``, an empty vocabulary, text that encodes to no ids, or BOS/EOS ids
    outside its own vocabulary.
    """
    if not (callable(getattr(tokenizer, "encode", None)) and callable(getattr(tokenizer, "decode", None))):
        return f"a {type(tokenizer).__name__} has no encode() / decode() methods"
    sizes = _tokenizer_sizes(tokenizer)
    if 0 in sizes:
        return "its vocabulary is empty"
    try:
        try:
            ids = tokenizer.encode("hello world", add_special_tokens=False)
        except TypeError:
            ids = tokenizer.encode("hello world")
    except Exception as exc:  # noqa: BLE001 - a tokenizer that cannot encode text is unusable
        return f"encode() fails: {_first_line(exc)}"
    if not len(ids):
        return "it encodes 'hello world' to no token ids"
    size = max(sizes) if sizes else None  # special tokens are often added tokens past vocab_size
    for attr in ("bos_token_id", "eos_token_id"):
        try:
            tid = first_id(getattr(tokenizer, attr, None))
        except (TypeError, ValueError):
            return f"its {attr} is not an id"
        if tid is not None and size is not None and not 0 <= tid < size:
            return f"its {attr} {tid} is outside its vocabulary of {size}"
    return None


def vocab_size_of(model: torch.nn.Module) -> int:
    """Width of the model's output layer (else ``config.vocab_size``)."""
    out = None
    get_out = getattr(model, "get_output_embeddings", None)
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
    config = getattr(model, "config", None)
    if config is not None:
        text = config.get_text_config() if hasattr(config, "get_text_config") else config
        if getattr(text, "vocab_size", None):
            return int(text.vocab_size)
    raise ValueError("cannot tell the model's vocabulary size (no output embeddings, no config.vocab_size)")


_CONTEXT_ATTRS = ("n_positions", "max_position_embeddings", "n_ctx", "max_seq_len", "max_sequence_length",
                  "seq_length")


def context_limit(model: torch.nn.Module) -> tuple[int, str] | None:
    """``(positions, source)``: the model's maximum context from its config, or ``None`` if it has none.

    ``source`` names the attribute (``"config.n_positions"``, ``"config.max_position_embeddings"``,
    ...).  Positions past it are outside the position table (``IndexError`` inside torch) or past
    what the model was trained on.
    """
    config = getattr(model, "config", None)
    if config is None:
        return None
    try:
        text = config.get_text_config() if hasattr(config, "get_text_config") else config
    except Exception:  # noqa: BLE001 - an odd config: read the top level
        text = config
    for attr in _CONTEXT_ATTRS:
        value = getattr(text, attr, None)
        if isinstance(value, (int, np.integer)) and not isinstance(value, bool) and value > 0:
            return int(value), f"config.{attr}"
    return None


def first_id(value: Any) -> int | None:
    """A special-token attribute as one id (the first of a list), or ``None``."""
    if value is None:
        return None
    if isinstance(value, (list, tuple)):
        return int(value[0]) if len(value) else None
    return int(value)


def resolve_special(which: str, value: Any, tokenizer: Any, config: Any, vocab_size: int) -> int | None:
    """The ``bos`` / ``eos`` id: ``"auto"`` takes the tokenizer's, then the config's; checked against V."""
    attr = f"{which}_token_id"
    if isinstance(value, str):
        if value != "auto":
            raise ValueError(f"{which} must be 'auto', None or a token id, got {value!r}")
        source, tid = None, None
        if tokenizer is not None and first_id(getattr(tokenizer, attr, None)) is not None:
            source, tid = "tokenizer", first_id(getattr(tokenizer, attr))
        elif config is not None and first_id(getattr(config, attr, None)) is not None:
            source, tid = "model.config", first_id(getattr(config, attr))
        if tid is None:
            return None
        if not 0 <= tid < vocab_size:
            raise ValueError(
                f"{attr} {tid} (from {source}) is outside the vocabulary 0..{vocab_size - 1}; "
                f"pass {'bos_token_id' if which == 'bos' else 'eos'}=<id> or None"
            )
        return tid
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{which} must be 'auto', None or an int token id, got {value!r}")
    if not 0 <= int(value) < vocab_size:
        raise ValueError(f"{which} token id {value} is outside the vocabulary 0..{vocab_size - 1}")
    return int(value)


def check_settings(logit_scale: Any, kv_cache_bytes: Any, **positive: Any) -> None:
    """``ValueError`` unless ``logit_scale`` is finite and > 0, ``kv_cache_bytes`` an int >= 0 and
    every ``positive`` an int >= 1 (bools are not ints here)."""
    if isinstance(logit_scale, bool) or not (
        isinstance(logit_scale, (int, float)) and math.isfinite(logit_scale) and logit_scale > 0
    ):
        raise ValueError(f"logit_scale must be a finite positive number, got {logit_scale!r}")
    for name, val in positive.items():
        if isinstance(val, bool) or not isinstance(val, int) or val < 1:
            raise ValueError(f"{name} must be a positive int, got {val!r}")
    if isinstance(kv_cache_bytes, bool) or not isinstance(kv_cache_bytes, int) or kv_cache_bytes < 0:
        raise ValueError(f"kv_cache_bytes must be a non-negative int, got {kv_cache_bytes!r}")


def token_ids(seq: Any, what: str) -> tuple[int, ...]:
    """``seq`` as a tuple of ints: ``TypeError`` if it is no sequence, ``ValueError`` for a non-integer entry.

    Integers of any kind (``int``, numpy, 0-d integer tensors) pass; floats, bools, strings and
    ``None`` do not (``int(1.5)`` would silently be token 1).
    """
    if isinstance(seq, (str, bytes)) or not hasattr(seq, "__iter__"):
        raise TypeError(f"{what} must be a sequence of token ids, got {type(seq).__name__} {seq!r}")
    out = []
    for t in seq:
        try:
            if isinstance(t, (bool, np.bool_)):
                raise TypeError
            out.append(operator.index(t))
        except TypeError:
            raise ValueError(f"token ids of {what} must be integers, got {t!r} in {seq!r}") from None
    return tuple(out)


def encode_prompt(
    prompt: str | Sequence[int] | None, tokenizer: Any, vocab_size: int, bos_token_id: int | None,
    add_special_tokens: bool,
) -> list[int]:
    """The prompt's token ids: text through the tokenizer, ids checked against V, ``[bos]`` if empty."""
    if isinstance(prompt, str):
        if tokenizer is None:
            raise ValueError("a text prompt needs a tokenizer; pass tokenizer=... or token ids")
        try:
            ids = tokenizer.encode(prompt, add_special_tokens=add_special_tokens)
        except TypeError:
            ids = tokenizer.encode(prompt)
        ids = list(token_ids(ids, "the tokenizer's encoding of the prompt"))
        if prompt.strip() and not ids:
            raise ValueError(f"the tokenizer encodes the prompt {prompt!r} to no token ids")
    elif prompt is None:
        ids = []
    else:
        try:
            ids = list(token_ids(prompt, "the prompt"))
        except TypeError:
            raise ValueError(f"prompt must be text, token ids or None, got {prompt!r}") from None
    bad = [t for t in ids if not 0 <= t < vocab_size]
    if bad:
        raise ValueError(f"prompt token ids {bad[:5]} are outside the vocabulary 0..{vocab_size - 1}")
    if not ids:
        if bos_token_id is None:
            raise ValueError(
                "no prompt and no BOS token: the empty prefix has no context to condition on; "
                "give a prompt (text or token ids) or bos_token_id=<id>"
            )
        ids = [bos_token_id]
    return ids
