"""Constrained supports through the paths above the enumerable: a rescored draft index, and the
command line's distributed build (``--workers``) with a regular expression."""
from __future__ import annotations

import json
import math
import pickle
import random
import re

import pytest

from arenum import AutoregressiveEnumerable, Automaton, RescoredIndex, why_rejected
from arenum.testing import RandomModel, brute_force


def _automaton(vocab, seed: int, eos) -> Automaton:
    rng = random.Random(seed)
    tr = {q: {t: rng.randrange(3) for t in vocab if t != eos and rng.random() < 0.8} for q in range(3)}
    return Automaton(0, tr, {q for q in range(3) if rng.random() < 0.5} or {2}, name=f"rand{seed}")


@pytest.mark.parametrize("seed", range(4))
def test_rescoring_a_constrained_draft_gives_the_constrained_target_truth(seed):
    """A draft index under a constraint, rescored by the target under the same constraint, with the
    true gap: every certified top-k and slice is the target's brute-force order of the accepted
    sequences (each with the target's score)."""
    vocab, eos, cap = [0, 1, 2, 3], 3, 5
    c = _automaton(vocab, 100 + seed, eos)
    draft, target = RandomModel(vocab, seed=seed, eos=eos), RandomModel(vocab, seed=50 + seed, eos=eos, peak=1.3)
    d_enum = AutoregressiveEnumerable(draft, eos=eos, max_len=cap, constraint=c)
    t_enum = AutoregressiveEnumerable(target, eos=eos, max_len=cap, constraint=c)
    keep = lambda bf: [(q, s) for q, s in bf if why_rejected(c, q[:-1]) is None]  # noqa: E731
    d_bf = keep(brute_force(draft.table, eos=eos, cap=cap))
    t_bf = sorted(keep(brute_force(target.table, eos=eos, cap=cap)), key=lambda x: -x[1])
    assert len(t_bf) >= 8 and len(d_bf) == len(t_bf)
    t_of = dict(t_bf)
    gap = max(t_of[q] - s for q, s in d_bf)
    idx = RescoredIndex(d_enum.seek_index(), t_enum, rerank_window=2, assumed_gap=gap)
    for k in (1, 3, len(t_bf) // 2, len(t_bf)):
        r = idx.top_k(k, certify=True)
        assert r.certified is True
        assert [(tuple(q), s) for q, s in r.items] == t_bf[:k]
    r = idx.slice(2, 4, certify=True)
    assert r.certified and [(tuple(q), s) for q, s in r.items] == t_bf[2:6]
    # a gap too small is never certified wrongly: either certified and right, or not certified
    small = RescoredIndex(d_enum.seek_index(), t_enum, rerank_window=0, assumed_gap=max(0.0, gap / 4))
    r = small.top_k(3)
    assert r.certified is False or [(tuple(q), s) for q, s in r.items] == t_bf[:3]


def _tiny_hf(path, make) -> list[str]:
    model, tok, words = make(2)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return words


def _cli_json(capsys, *argv) -> list[dict]:
    from arenum.cli import main

    assert main([str(a) for a in argv]) == 0
    return [json.loads(ln) for ln in capsys.readouterr().out.splitlines() if ln.strip()]


def test_the_distributed_command_line_with_a_regex_answers_as_one_process(tmp_path, monkeypatch, capsys,
                                                                          tiny_word_gpt2):
    """``--workers 2 --regex`` on a transformer and on an n-gram file: the spec each worker gets is
    pickled and unpickled (as Ray sends it) and holds the constraint without the model's decoder (each
    worker binds its own tokens' text); workers run in this process (``backend="local"``). Counts,
    slices and ranks equal the single process's, and the count equals brute force over the tokens."""
    from arenum import distributed
    from arenum.distributed import enumerable as de

    specs = []

    class Local(de.DistributedEnumerable):
        def __init__(self, spec, *a, **kw):
            specs.append(spec)
            spec = pickle.loads(pickle.dumps(spec))  # what Ray does to reach a worker
            kw["backend"] = "local"
            super().__init__(spec, *a, **kw)

    monkeypatch.setattr(distributed, "DistributedEnumerable", Local)
    words = _tiny_hf(tmp_path / "hf", tiny_word_gpt2)
    pat = "(ab|c)+7+"
    M = ("-m", f"hf:{tmp_path / 'hf'}", "--prompt", "<s>", "--max-len", 4, "--regex", pat)
    one = _cli_json(capsys, "count", "--min-log-prob", -1000, *M, "--json")[0]
    many = _cli_json(capsys, "count", "--min-log-prob", -1000, *M, "--workers", 2, "--json")[0]
    assert specs and specs[-1].options["constraint"].text is None  # no tokenizer travels
    assert many["constraint"] == one["constraint"] == f"regex({pat})"
    assert many["count"] == one["count"]
    # brute force over the tokens: every accepted sequence of the plain support
    from arenum.models.hf import CausalLMOracle

    plain = CausalLMOracle.from_pretrained(str(tmp_path / "hf"), prompt="<s>").enumerable(max_len=4)
    every = [tuple(q) for q, _ in plain.slice(0, int(plain.count(-math.inf)))]
    want = [q for q in every if re.fullmatch(pat, "".join(words[t] for t in q[:-1]))]
    assert one["count"] == len(want) >= 3
    a = _cli_json(capsys, "slice", 0, len(want), *M, "--json")[0]["items"]
    b = _cli_json(capsys, "slice", 0, len(want), *M, "--workers", 2, "--json")[0]["items"]
    assert [d["tokens"] for d in a] == [d["tokens"] for d in b] == [list(q) for q in want]
    # an n-gram file: the same, with the policy flags too
    from arenum.models import NGramModel

    ng = NGramModel.fit(["ab12", "abc1", "ba21", "cab", "a1", "bb22", "c3", "abc12"], order=2)
    ng.save(tmp_path / "ng.npz")
    N = ("-m", tmp_path / "ng.npz", "--max-len", 7, "--regex", "[a-c]{2,3}[0-9]{2}", "--classes", 2)
    one = _cli_json(capsys, "top", 5, *N, "--json")[0]["items"]
    many = _cli_json(capsys, "top", 5, *N, "--workers", 2, "--json")[0]["items"]
    assert [d["sequence"] for d in many] == [d["sequence"] for d in one] and len(one) == 5
    r1 = _cli_json(capsys, "rank", "abc12", *N, "--json")[0]
    r2 = _cli_json(capsys, "rank", "abc12", *N, "--workers", 2, "--json")[0]
    assert r1["rank"] == r2["rank"] and r1["constraint"] == r2["constraint"]
