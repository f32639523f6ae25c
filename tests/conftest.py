"""Shared test helpers."""
from __future__ import annotations

import pytest


@pytest.fixture
def save_word_checkpoint():
    """``save(model, path)``: write ``model`` and a word-level tokenizer (``<s>``, ``</s>``, ``w0``,
    ``w1``, ... for ids 0, 1, 2, 3, ...) to ``path``, a local checkpoint ``from_pretrained`` reads."""

    def save(model, path) -> None:
        import tokenizers
        import transformers

        words = ["<s>", "</s>"] + [f"w{i}" for i in range(model.config.vocab_size - 2)]
        tk = tokenizers.Tokenizer(tokenizers.models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="w0"))
        tk.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
        tok = transformers.PreTrainedTokenizerFast(tokenizer_object=tk, bos_token="<s>", eos_token="</s>")
        model.save_pretrained(path)
        tok.save_pretrained(path)

    return save


@pytest.fixture
def store_closes(monkeypatch) -> list[bool]:
    """Every ``TreeStore.close`` of the test, in order: its ``cut`` (a finished build cuts the
    tables; an interrupted one keeps them)."""
    from arenum.exact import store as store_mod

    seen: list[bool] = []
    real = store_mod.TreeStore.close

    def close(self, cut=True):
        seen.append(cut)
        return real(self, cut)

    monkeypatch.setattr(store_mod.TreeStore, "close", close)
    return seen
