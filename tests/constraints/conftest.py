"""Shared fixtures of the constraint tests."""
from __future__ import annotations

import pytest

WORDS = ["<s>", "</s>", "ab", "c", "7", "77", "!"]


@pytest.fixture
def tiny_word_gpt2():
    """``make(seed) -> (model, tokenizer, words)``: a one-layer GPT-2 with random weights over a
    word-level tokenizer of :data:`WORDS` (bos 0, eos 1), built from a config (no download)."""
    import tokenizers
    import torch
    import transformers

    def make(seed: int):
        tk = tokenizers.Tokenizer(tokenizers.models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="c"))
        tk.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
        tok = transformers.PreTrainedTokenizerFast(tokenizer_object=tk, bos_token="<s>", eos_token="</s>")
        torch.manual_seed(seed)
        cfg = transformers.GPT2Config(vocab_size=len(WORDS), n_positions=16, n_embd=16, n_layer=1, n_head=2,
                                      bos_token_id=0, eos_token_id=1)
        return transformers.GPT2LMHeadModel(cfg).eval(), tok, list(WORDS)

    return make
