"""A Hugging Face causal LM behind the server (a tiny GPT-2 with random weights, saved locally):
answers equal the library's, the per-step log-probs sum to the score, deep strings get a bracket."""
from __future__ import annotations

import math

import pytest

from arenum.serve import ServeConfig, Service, prepare


@pytest.fixture
def hf_service(tmp_path, save_word_checkpoint):
    import torch
    import transformers

    path = tmp_path / "hf"
    cfg = transformers.GPT2Config(vocab_size=16, n_positions=16, n_embd=16, n_layer=1, n_head=2, bos_token_id=0,
                                  eos_token_id=1)
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(cfg).eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0.0, 0.3)
    save_word_checkpoint(model, path)
    c, tmp = prepare(ServeConfig(model=f"hf:{path}", build=60, max_len=4, prompt="w3 w7"))
    svc = Service.open(c, temporary=tmp)
    yield svc, path
    svc.close()


def test_an_hf_model_is_served_as_the_library_answers(hf_service):
    from arenum.models.hf import CausalLMOracle

    svc, path = hf_service
    enum = CausalLMOracle.from_pretrained(path, prompt="w3 w7").enumerable(max_len=4)
    recs = svc.rank(["w4 w5", "w2", "w9 w9 w9"])
    for rec, ids in zip(recs, [(6, 7, 1), (4, 1), (11, 11, 11, 1)]):
        assert rec["tokens"] == list(ids)
        ref = enum.rank(ids)
        if rec["exact"]:
            assert rec["rank"] == ref.rank
        else:
            assert rec["method"] == "bracket" and rec["rank_lo"] <= ref.rank <= rec["rank_hi"]
        total = math.fsum(st["log_prob"] for st in rec["steps"])
        assert total == pytest.approx(rec["log_prob"], abs=1e-5)
    assert any(r["exact"] for r in recs)
    page = svc.slice(0, 5)
    assert [it["tokens"] for it in page["items"]] == [list(s) for s, _ in enum.slice(0, 5)]
    kids = svc.children("w4")
    assert sum(k["probability"] for k in kids["children"]) == pytest.approx(1.0, abs=1e-4)
    assert kids["children"][0]["log_prob"] >= kids["children"][-1]["log_prob"]
    svc.check()
