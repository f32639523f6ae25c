"""Hugging Face causal-LM adapter: the callbacks :class:`arenum.AutoregressiveEnumerable` needs.

This is the only package of arenum that imports ``torch`` and ``transformers`` (install them with
the ``arenum[hf]`` extra).  ``import arenum`` never imports it.

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

Modules: ``oracle`` (the class: callbacks and float64 normalization), ``load`` (devices, dtypes,
checkpoints, tokenizers, special tokens, prompts), ``forward`` (what the model is run on),
``kv`` (the KV block store), ``numerics`` (float64 log-softmax and table heads).  See
``docs/hf.md`` for the KV-reuse scheme, its memory bound, devices and dtypes, and costs.
"""
from __future__ import annotations

from .forward import CausalLMStats
from .oracle import CausalLMOracle

__all__ = ["CausalLMOracle", "CausalLMStats"]
