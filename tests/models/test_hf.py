"""Tests of arenum.models.hf on a tiny randomly initialised GPT-2 (no downloads)."""
from __future__ import annotations

import itertools
import math
import subprocess
import sys

import numpy as np
import pytest

import torch
import transformers

from arenum.models.hf import CausalLMOracle  # noqa: E402

V = 24
BOS, EOS = 0, 1


def tiny_gpt2(vocab: int = V, seed: int = 0, std: float = 0.3, bos=BOS, eos=EOS):
    """A 2-layer GPT-2 with weights drawn from a seeded generator (std large enough for peaked dists)."""
    cfg = transformers.GPT2Config(
        vocab_size=vocab, n_positions=32, n_embd=32, n_layer=2, n_head=2, bos_token_id=bos, eos_token_id=eos
    )
    model = transformers.GPT2LMHeadModel(cfg)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            if p.dim() > 1:
                p.copy_(torch.randn(p.shape, generator=gen) * std)
    return model.eval()


class CharTokenizer:
    """Minimal tokenizer stand-in: one token per character of a fixed alphabet."""

    def __init__(self, alphabet: str, bos=BOS, eos=EOS):
        self.alphabet = alphabet
        self.bos_token_id = bos
        self.eos_token_id = eos
        self.offset = 2  # ids 0, 1 are BOS / EOS

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return [self.alphabet.index(c) + self.offset for c in text]

    def decode(self, ids) -> str:
        return "".join(self.alphabet[i - self.offset] if i >= self.offset else "" for i in ids)


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    """Tiny models: one intra-op thread is ~50x faster than two on a shared, loaded CPU."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def model():
    return tiny_gpt2()


def reference(model, context: list[int]) -> np.ndarray:
    """Plain full-sequence forward, no cache, float64 log-softmax of the last position."""
    with torch.no_grad():
        logits = model(torch.tensor([context]), use_cache=False).logits[0, -1]
    return torch.log_softmax(logits.double(), -1).numpy()


PROMPT = [5, 9, 2]


def all_prefixes(depth: int, vocab: int = V):
    return [tuple(p) for p in itertools.product(range(vocab), repeat=depth)]


# ---------------------------------------------------------------------------------------------
def test_kv_levelwise_matches_full_forward(model):
    o = CausalLMOracle(model, prompt=PROMPT)
    assert o.V == V
    levels = [[()], all_prefixes(1), all_prefixes(2)[::7], [p + (t,) for p in all_prefixes(2)[::7][:12] for t in range(V)]]
    for depth, prefixes in enumerate(levels):
        got = o.batch_next_logprobs(prefixes)
        assert got.shape == (len(prefixes), V) and got.dtype == np.float64
        want = np.stack([reference(model, PROMPT + list(p)) for p in prefixes])
        assert np.abs(got - want).max() < 1e-4, depth
    # level-wise calls after level 1: every prefix of depth >= 1 found its parent's KV
    assert o.stats.kv_misses == 0
    assert o.stats.kv_hits == sum(len(level) for level in levels)


def test_one_token_per_prefix_when_parent_cached(model):
    o = CausalLMOracle(model, prompt=PROMPT, forward_batch_size=64)
    o.batch_next_logprobs(all_prefixes(1))
    o.reset_stats()
    level2 = all_prefixes(2)[:100]
    o.batch_next_logprobs(level2)
    assert o.stats.tokens_computed == len(level2)
    assert o.stats.forward_calls == 2  # 100 rows in chunks of 64
    assert o.stats.forward_seconds <= o.stats.callback_seconds


def test_mixed_hits_misses_lengths_and_evictions(model):
    o = CausalLMOracle(model, prompt=PROMPT, forward_batch_size=5)
    o.batch_next_logprobs([(3,), (4,), (7,)])  # caches KV of three depth-1 prefixes
    batch = [(3, 1), (8, 2), (4, 4), (), (7, 0, 5), (11, 2), (3, 1, 1), (4,), (3, 9)]
    got = o.batch_next_logprobs(batch)
    want = np.stack([reference(model, PROMPT + list(p)) for p in batch])
    assert np.abs(got - want).max() < 1e-4
    assert o.stats.kv_misses > 0 and o.stats.kv_hits > 0
    # a tiny cache bound forces evictions; results stay exact and memory stays under the bound
    small = CausalLMOracle(model, prompt=PROMPT, forward_batch_size=4, kv_cache_bytes=3 * 4 * o.kv_bytes_per_token * 2)
    lv1 = all_prefixes(1)
    small.batch_next_logprobs(lv1)
    lv2 = [p + (t,) for p in lv1 for t in (0, 5)]
    got = small.batch_next_logprobs(lv2)
    want = np.stack([reference(model, PROMPT + list(p)) for p in lv2])
    assert np.abs(got - want).max() < 1e-4
    assert small.stats.kv_evictions > 0 and small.stats.kv_misses > 0
    assert small.kv_cache_used_bytes <= small.kv_cache_bytes


def test_kv_reuse_off_matches(model):
    on = CausalLMOracle(model, prompt=PROMPT)
    off = CausalLMOracle(model, prompt=PROMPT, kv_reuse=False)
    prefixes = [(), (1,), (2, 3), (4, 5, 6), (7, 8, 9)]
    assert np.abs(on.batch_next_logprobs(prefixes) - off.batch_next_logprobs(prefixes)).max() < 1e-4
    seqs = [(1,), (2, 3), (4, 5, 6), (6, 5, 4), ()]
    assert np.abs(on.score_sequences(seqs) - off.score_sequences(seqs)).max() < 1e-4
    assert np.abs(on.all_position_logprobs((4, 5, 6)) - off.all_position_logprobs((4, 5, 6))).max() < 1e-4
    assert off.stats.kv_hits == 1  # only the empty prefix


def test_score_sequences_equals_summed_next_logprobs(model):
    o = CausalLMOracle(model, prompt=PROMPT, forward_batch_size=7)
    rng = np.random.default_rng(1)
    seqs = [tuple(int(t) for t in rng.integers(0, V, size=L)) for L in (1, 2, 2, 3, 3, 3, 4, 5) for _ in range(4)]
    seqs.append(())
    got = o.score_sequences(seqs)
    assert got.shape == (len(seqs),) and got.dtype == np.float64
    for s, g in zip(seqs, got):
        want = 0.0
        for d in range(len(s)):
            want += reference(model, PROMPT + list(s[:d]))[s[d]]
        assert abs(g - want) < 1e-4
        assert abs(g - sum(o.next_logprobs(s[:d])[s[d]] for d in range(len(s)))) < 1e-4
    assert got[-1] == 0.0


def test_all_position_logprobs_rows(model):
    o = CausalLMOracle(model, prompt=PROMPT)
    seq = (4, 17, 0, 9)
    rows = o.all_position_logprobs(seq)
    assert rows.shape == (4, V)
    for d in range(4):
        assert np.abs(rows[d] - o.next_logprobs(seq[:d])).max() < 1e-4
    assert o.all_position_logprobs(()).shape == (0, V)
    assert abs(rows[np.arange(4), list(seq)].sum() - o.score_sequences([seq])[0]) < 1e-9


def test_prompt_conditioning(model):
    tok = CharTokenizer("abcdefghijklmnopqrstuv")
    a = CausalLMOracle(model, tok, prompt="abc")
    assert a.prompt_ids == [2, 3, 4]
    b = a.with_prompt("hello")
    c = CausalLMOracle(model, tok)  # no prompt: BOS
    assert c.prompt_ids == [BOS]
    for o in (a, b, c):
        for p in [(), (6,), (6, 7)]:
            assert np.abs(o.next_logprobs(p) - reference(model, o.prompt_ids + list(p))).max() < 1e-4
    assert np.abs(a.next_logprobs(()) - b.next_logprobs(())).max() > 1e-3
    assert np.abs(a.next_logprobs((6,)) - c.next_logprobs((6,))).max() > 1e-3
    assert a.decode((2, 3, 1)) == "ab"
    assert CausalLMOracle(model, prompt=[7]).decode((3, 4)) == "3 4"
    assert a.eos == EOS and CausalLMOracle(model, tok, eos=None).eos is None


def test_logit_scale_and_low_precision(model):
    o = CausalLMOracle(model, prompt=PROMPT, logit_scale=2.5)
    with torch.no_grad():
        logits = model(torch.tensor([PROMPT + [3]])).logits[0, -1].double()
    assert np.abs(o.next_logprobs((3,)) - torch.log_softmax(2.5 * logits, -1).numpy()).max() < 1e-4
    half = CausalLMOracle(tiny_gpt2(), prompt=PROMPT, dtype="bfloat16")
    assert half.dtype == torch.bfloat16
    rows = half.batch_next_logprobs([(1,), (2,)])
    assert rows.dtype == np.float64 and np.all(np.isfinite(rows))
    # log-softmax done in float64: rows normalise to float64 precision even with bf16 weights
    assert np.abs(np.exp(rows).sum(axis=1) - 1).max() < 1e-12
    ref = np.stack([reference(model, PROMPT + [t]) for t in (1, 2)])
    assert np.abs(rows - ref).max() < 0.5  # same model up to bf16 rounding


def test_invalid_inputs(model):
    no_special = tiny_gpt2(bos=None, eos=None)
    with pytest.raises(ValueError, match="no prompt and no BOS"):
        CausalLMOracle(no_special)
    with pytest.raises(ValueError, match="no prompt and no BOS"):
        CausalLMOracle(no_special, prompt=[])
    assert CausalLMOracle(no_special, prompt=[3]).eos is None  # fixed-length mode
    with pytest.raises(ValueError, match="unknown dtype"):
        CausalLMOracle(model, prompt=PROMPT, dtype="float13")
    with pytest.raises(ValueError, match="floating-point"):
        CausalLMOracle(model, prompt=PROMPT, dtype=torch.int32)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        CausalLMOracle(tiny_gpt2(bos=50256, eos=50256))  # GPT-2 default ids in a 24-token vocab
    with pytest.raises(ValueError, match="outside the vocabulary"):
        CausalLMOracle(model, prompt=[3, 99])
    with pytest.raises(ValueError, match="outside the vocabulary"):
        CausalLMOracle(model, prompt=PROMPT, eos=V)
    with pytest.raises(ValueError, match="needs a tokenizer"):
        CausalLMOracle(model, prompt="text")
    with pytest.raises(ValueError, match="logit_scale"):
        CausalLMOracle(model, prompt=PROMPT, logit_scale=0)
    with pytest.raises(ValueError, match="kv_cache_bytes"):
        CausalLMOracle(model, prompt=PROMPT, kv_cache_bytes=-1)
    with pytest.raises(TypeError, match="torch.nn.Module"):
        CausalLMOracle("gpt2")
    o = CausalLMOracle(model, prompt=PROMPT)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        o.next_logprobs((V,))
    with pytest.raises(ValueError, match="outside the vocabulary"):
        o.score_sequences([(1, -1)])
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="cuda"):
            CausalLMOracle(model, prompt=PROMPT, device="cuda")


def test_from_pretrained_local_only(tmp_path, model, save_word_checkpoint):
    save_word_checkpoint(model, tmp_path)
    o = CausalLMOracle.from_pretrained(tmp_path, prompt="w3 w7")
    assert o.prompt_ids == [5, 9] and o.eos == EOS and o.bos_token_id == BOS
    assert np.abs(o.next_logprobs((4,)) - reference(model, [5, 9, 4])).max() < 1e-4
    assert o.decode((5, 9)) == "w3 w7"
    with pytest.raises(FileNotFoundError, match="local") as err:
        CausalLMOracle.from_pretrained(tmp_path / "missing")
    assert "no such folder" in str(err.value) and "Repo id" not in str(err.value)  # no unrelated hub text
    with pytest.raises(FileNotFoundError, match="nothing is downloaded") as err:  # a name, not a path
        CausalLMOracle.from_pretrained("no-such-model-name-qa")
    assert "\n" not in str(err.value)  # transformers' own message is several lines: its first only


def test_encode_decode_match_the_support(model):
    """encode gives the sequence the support wants (EOS appended when terminating), decode strips it."""
    tok = CharTokenizer("abcdefghijklmnopqrstuv")
    o = CausalLMOracle(model, tok, prompt="abc")
    seq = o.encode("hello")
    assert seq[-1] == o.eos and o.decode(seq) == "hello"
    assert o.encode("hello", eos=False) == seq[:-1]
    # ranked: a shorter word, at the cap as "hello" was (rank 4,337, 15k forwards; "hello" is rank
    # 933,601 of this random model: 1.7M forwards, 35 s, for the same checks)
    seq = o.encode("hell")
    assert seq[-1] == o.eos and o.decode(seq) == "hell"
    e = o.enumerable(max_len=len(seq))
    r = e.rank(seq)  # accepted as is: in the terminating support
    assert r.log_prob == e.log_density(seq) > -math.inf
    with pytest.raises(ValueError, match="does not end in eos"):
        e.rank(seq[:-1])
    with pytest.raises(ValueError, match="no tokenizer"):
        CausalLMOracle(model, prompt=[7]).encode("ab")
    with pytest.raises(TypeError, match="str"):
        o.encode([1, 2])


def test_import_arenum_does_not_import_torch():
    code = "import sys, arenum, arenum.models; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_rotary_model_kv_matches_full_forward():
    """Positions stay exact through the KV path for a rotary-embedding model (tiny Llama)."""
    cfg = transformers.LlamaConfig(
        vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=32, bos_token_id=BOS, eos_token_id=EOS,
    )
    torch.manual_seed(0)
    llama = transformers.LlamaForCausalLM(cfg).eval()
    o = CausalLMOracle(llama, prompt=[4, 5])
    lv1 = all_prefixes(1)[:6]
    lv2 = [p + (t,) for p in lv1[:3] for t in range(0, V, 5)]
    lv3 = [p + (t,) for p in lv2[:4] for t in (2, 7)] + [(9, 9, 9)]
    for prefixes in ([()], lv1, lv2, lv3):
        got = o.batch_next_logprobs(prefixes)
        want = np.stack([reference(llama, [4, 5] + list(p)) for p in prefixes])
        assert np.abs(got - want).max() < 1e-4
    assert o.stats.kv_misses == 1  # only (9, 9, 9)
    seqs = [(1, 2, 3), (3, 2, 1)]
    assert np.allclose(o.score_sequences(seqs), [o.all_position_logprobs(s)[[0, 1, 2], list(s)].sum() for s in seqs])


class NoCacheLM(torch.nn.Module):
    """A model whose forward takes no KV cache (and has no get_output_embeddings)."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner
        self.config = inner.config

    def forward(self, input_ids, use_cache=False):
        return self.inner(input_ids=input_ids, use_cache=False)


def test_model_without_cache_falls_back(model):
    with pytest.warns(RuntimeWarning, match="KV reuse disabled"):
        o = CausalLMOracle(NoCacheLM(model), prompt=PROMPT)
    assert not o.kv_reuse and o.V == V
    prefixes = [(), (3,), (3, 4)]
    want = np.stack([reference(model, PROMPT + list(p)) for p in prefixes])
    assert np.abs(o.batch_next_logprobs(prefixes) - want).max() < 1e-4


# ------------------------------------------------------------------ the core, against brute force
def _core():
    try:
        import arenum

        return arenum.AutoregressiveEnumerable
    except AttributeError:
        raise AssertionError("arenum.AutoregressiveEnumerable is missing") from None


def _brute_force(oracle, max_len, eos=None):
    """Every support sequence scored by teacher forcing, sorted by descending score."""
    V = oracle.V
    if eos is None:
        support = [tuple(s) for s in itertools.product(range(V), repeat=max_len)]
    else:
        letters = [t for t in range(V) if t != eos]
        support = [b + (eos,) for n in range(max_len) for b in itertools.product(letters, repeat=n)]
    scores = oracle.score_sequences(support)
    order = np.argsort(-scores, kind="stable")
    return [support[i] for i in order], scores[order]


def _gap_thresholds(scores, n=8, min_gap=1e-3):
    """Thresholds in the middle of wide gaps between consecutive brute-force scores."""
    gaps = [i for i in range(len(scores) - 1) if scores[i] - scores[i + 1] > min_gap]
    pick = gaps[:: max(1, len(gaps) // n)]
    return [(i + 1, (scores[i] + scores[i + 1]) / 2) for i in pick]


@pytest.mark.parametrize("vocab, max_len, eos", [(V, 2, None), (12, 3, None), (12, 3, EOS)])
def test_enumerable_agrees_with_brute_force(vocab, max_len, eos):
    _core()
    model = tiny_gpt2(vocab=vocab, seed=1)
    oracle = CausalLMOracle(model, prompt=[3, 4], forward_batch_size=16)
    enum = oracle.enumerable(max_len=max_len, eos=eos, batch_size=32)
    seqs, scores = _brute_force(oracle, max_len, eos)
    n = len(seqs)
    assert n == (vocab**max_len if eos is None else sum((vocab - 1) ** k for k in range(max_len)))
    # counts at thresholds in the middle of gaps: float differences cannot move a sequence across
    for k, t in _gap_thresholds(scores):
        assert enum.count(t) == k
    assert enum.count(scores[-1] - 1.0) == n
    assert enum.count(scores[0] + 1.0) == 0
    # unrank / threshold / rank: the core's own numbers agree with each other exactly, and with
    # teacher-forced brute force to float rounding (KV path vs plain forward)
    check = sorted({*range(10), *range(0, n, max(1, n // 25)), n - 1})
    for i in check:
        seq, lp = enum.unrank(i)
        assert abs(lp - scores[i]) < 1e-4
        assert abs(oracle.score_sequences([seq])[0] - lp) < 1e-4
        assert math.isclose(enum.threshold(i + 1), lp, rel_tol=1e-9, abs_tol=1e-12)
        if min(abs(scores[i] - scores[j]) for j in (i - 1, i + 1) if 0 <= j < n) > 1e-3:
            assert seq == seqs[i]
            assert enum.rank(seq).rank == i
    # the top k as a set, for k at a wide gap (near-ties may swap order within it, never across it)
    k = next(k for k, _ in _gap_thresholds(scores, n=len(scores)) if k >= 40)
    assert sorted(seq for seq, _ in enum.slice(0, k)) == sorted(seqs[:k])
    assert enum.stats["forwards"] > 0
    assert oracle.stats.kv_hits > 0


def test_enumerable_wiring_and_eos_override(model):
    _core()
    tok = CharTokenizer("abcdefghijklmnopqrstuv")
    o = CausalLMOracle(model, tok, prompt="ab")
    assert o.enumerable(max_len=2).eos == EOS
    assert o.enumerable(max_len=2, eos=None).eos is None
    with pytest.raises(ValueError, match="outside the vocabulary"):
        o.enumerable(max_len=2, eos=V)
    enum = o.enumerable(max_len=2, eos=None, batch_next_logprobs=None)
    seq, lp = enum.unrank(0)
    assert abs(lp - o.score_sequences([seq])[0]) < 1e-4
    assert isinstance(o.decode(seq), str)


def test_parents_gathered_from_several_blocks(model):
    """One forward whose parents sit in different cached blocks (and in non-consecutive rows)."""
    o = CausalLMOracle(model, prompt=PROMPT, forward_batch_size=3)
    o.batch_next_logprobs(all_prefixes(1))  # blocks of 3 depth-1 prefixes
    lv2 = [(0, 1), (5, 2), (6, 3), (2, 4), (23, 5), (1, 6), (4, 4)]
    got = o.batch_next_logprobs(lv2)
    lv3 = [(6, 3, 1), (0, 1, 2), (4, 4, 9), (23, 5, 0)]
    got3 = o.batch_next_logprobs(lv3)
    for prefixes, rows in ((lv2, got), (lv3, got3)):
        want = np.stack([reference(model, PROMPT + list(p)) for p in prefixes])
        assert np.abs(rows - want).max() < 1e-4
    assert o.stats.kv_misses == 0


def test_enumerable_limits_kv_store_to_useful_prefixes(model):
    _core()
    o = CausalLMOracle(model, prompt=PROMPT)
    o.enumerable(max_len=3, eos=None)
    assert o.kv_store_max_len == 1  # depth-2 prefixes are the deepest scored: their KV serves nobody
    o.batch_next_logprobs(all_prefixes(1))
    used = o.kv_cache_used_bytes
    assert used > 0
    lv2 = all_prefixes(2)[:50]
    got = o.batch_next_logprobs(lv2)
    assert o.kv_cache_used_bytes == used and o.stats.kv_misses == 0
    assert np.abs(got - np.stack([reference(model, PROMPT + list(p)) for p in lv2])).max() < 1e-4
    o.enumerable(max_len=5, eos=None)
    assert o.kv_store_max_len == 3
    o.enumerable(max_len=2, eos=None)
    assert o.kv_store_max_len == 3  # the largest over the enumerables built
    o.enumerable(max_len=None, eos=EOS)
    assert o.kv_store_max_len is None


@pytest.mark.parametrize("scale, kv_reuse, dtype, device_math", [
    (1.0, True, None, False), (2.7, True, None, False), (0.6, False, None, False), (2.7, True, "bfloat16", False),
    (2.7, True, None, True), (1.0, False, "bfloat16", True), (1.0, True, "float64", False),
])
def test_heads_bit_identical_to_dense_rows(scale, kv_reuse, dtype, device_math):
    """batch_next_heads = the entries of batch_next_logprobs' rows at or above each floor, bit for bit.

    ``device_math`` runs the torch normalization a GPU uses (here on CPU tensors)."""
    def fresh():
        o = CausalLMOracle(tiny_gpt2(seed=4), prompt=PROMPT, logit_scale=scale, kv_reuse=kv_reuse,
                           dtype=dtype, forward_batch_size=5)
        if device_math:
            o._host_math = lambda logits: False
        return o

    rng = np.random.default_rng(0)
    calls = [all_prefixes(1)[:9] + [()], [(1, 2), (3,), (7, 7), (0, 5), (), (2, 2, 2)], all_prefixes(2)[:30]]
    dense_o, heads_o = fresh(), fresh()
    for prefixes in calls:
        rows = dense_o.batch_next_logprobs(prefixes)
        floors = rng.uniform(-6.0, -0.5, len(prefixes))
        floors[0] = -math.inf
        floors[-1] = 0.0
        counts, toks, lps, widths, offsets = heads_o.batch_next_heads(prefixes, floors)
        assert (widths == V).all() and counts.sum() == toks.shape[0] == lps.shape[0]
        off = np.concatenate([[0], np.cumsum(counts)])
        for i, (row, f) in enumerate(zip(rows, floors)):
            want = np.flatnonzero(row >= f)
            assert np.array_equal(toks[off[i] : off[i + 1]], want)
            assert np.array_equal(lps[off[i] : off[i + 1]], row[want])  # bit-identical
            # the row's offset: every log-prob is float64(float32 value) - offset, bit for bit (a
            # store keeps the row so); NaN where that cannot hold (a logit scale, float64 logits)
            if scale != 1.0 or dtype == "float64":
                assert math.isnan(offsets[i])
            else:
                v = (row + offsets[i]).astype(np.float32)
                assert np.array_equal((v.astype(np.float64) - offsets[i]).view(np.int64), row.view(np.int64))
        assert np.abs(np.log(np.exp(rows).sum(axis=1))).max() < 1e-12  # normalized to float64 precision
    assert dense_o.stats.as_dict() | {"forward_seconds": 0, "callback_seconds": 0} == \
        heads_o.stats.as_dict() | {"forward_seconds": 0, "callback_seconds": 0}


def test_enumerable_fills_tree_through_heads(model):
    """oracle.enumerable() never asks for full rows while building; answers equal the dense wiring's."""
    _core()
    o = CausalLMOracle(model, prompt=PROMPT, forward_batch_size=16)
    dense_calls = []
    real = o.batch_next_logprobs
    o.batch_next_logprobs = lambda ps: (dense_calls.append(len(ps)), real(ps))[1]
    enum = o.enumerable(max_len=3, eos=None, batch_size=64)
    t = enum.threshold(3000)
    assert not dense_calls
    o2 = CausalLMOracle(model, prompt=PROMPT, forward_batch_size=16)
    enum2 = o2.enumerable(max_len=3, eos=None, batch_size=64, batch_next_heads=None)
    assert enum2.threshold(3000) == t
    assert [enum.unrank(i) for i in range(0, 3000, 97)] == [enum2.unrank(i) for i in range(0, 3000, 97)]
    assert enum.stats["forwards"] == enum2.stats["forwards"]


def test_stats_class_is_causal_lm_stats(model):
    """The adapter's counters are CausalLMStats; the core's OracleStats name is not reused here."""
    import arenum.models.hf as hf

    o = CausalLMOracle(model, prompt=PROMPT)
    assert isinstance(o.stats, hf.CausalLMStats)
    o.next_logprobs((3,))
    assert o.stats.forward_calls == 2
    o.reset_stats()
    assert isinstance(o.stats, hf.CausalLMStats) and o.stats.forward_calls == 0
    assert "OracleStats" not in hf.__all__ and not hasattr(hf, "OracleStats")


# ------------------------------------------------------------------ the model's maximum context
def test_context_length_checked_at_construction_and_queries(model):
    """Positions past config.n_positions (32 here) raise a ValueError naming the lengths, never torch's IndexError."""
    o = CausalLMOracle(model, prompt=PROMPT)
    assert o.max_positions == 32
    with pytest.raises(ValueError, match=r"prompt is 33 tokens, longer than the model's maximum context of 32 "
                                         r"positions \(config.n_positions\)"):
        CausalLMOracle(model, prompt=[3] * 33)
    with pytest.raises(ValueError, match="prompt is 40 tokens"):
        o.with_prompt([3] * 40)
    full = CausalLMOracle(model, prompt=[3] * 32)  # the prompt alone fills the context: its own row works
    assert np.abs(full.next_logprobs(()) - reference(model, [3] * 32)).max() < 1e-4
    with pytest.raises(ValueError, match="prefix of 1 tokens after the 32-token prompt needs 33 positions"):
        full.next_logprobs((1,))
    # prompt + prefix: 3 + 29 = 32 positions fit, 3 + 30 do not (either path, dense rows or heads)
    p29, p30 = tuple(t % V for t in range(29)), tuple(t % V for t in range(30))
    assert np.abs(o.next_logprobs(p29) - reference(model, PROMPT + list(p29))).max() < 1e-4
    msg = r"a prefix of 30 tokens after the 3-token prompt needs 33 positions, past the model's maximum context of " \
          r"32 \(config.n_positions\); continuations of at most 30 tokens fit"
    with pytest.raises(ValueError, match=msg):
        o.next_logprobs(p30)
    with pytest.raises(ValueError, match=msg):
        o.batch_next_heads([(), (1,), p30], [-1.0, -1.0, -1.0])
    # a scored sequence's last token is only predicted: 3 + 30 - 1 = 32 positions fit, 31 tokens do not
    for kv_reuse in (True, False):
        s = CausalLMOracle(model, prompt=PROMPT, kv_reuse=kv_reuse)
        assert np.isfinite(s.score_sequences([p30])[0])
        assert s.all_position_logprobs(p30).shape == (30, V)
        with pytest.raises(ValueError, match="scoring a sequence of 31 tokens after the 3-token prompt needs 33"):
            s.score_sequences([(1, 2), p30 + (5,)])
        with pytest.raises(ValueError, match="scoring a sequence of 31 tokens"):
            s.all_position_logprobs(p30 + (5,))


def test_context_length_checked_by_enumerable(model):
    _core()
    o = CausalLMOracle(model, prompt=PROMPT)
    assert o.enumerable(max_len=30, eos=None).max_len == 30  # 3 + 30 - 1 = 32 positions
    with pytest.raises(ValueError, match=r"max_len=31 after the 3-token prompt needs 33 positions, past the "
                                         r"model's maximum context of 32 \(config.n_positions\)"):
        o.enumerable(max_len=31, eos=None)
    with pytest.raises(ValueError, match="max_len=31"):
        o.enumerable(max_len=31)
    with pytest.raises(ValueError, match=r"max_depth=40 \(no max_len\) after the 3-token prompt needs 42"):
        o.enumerable(max_depth=40)
    assert o.enumerable(max_depth=30).cap == 30
    # terminating, no max_len, default max_depth: refused at the first prefix that does not fit
    cfg = transformers.GPT2Config(vocab_size=V, n_positions=6, n_embd=32, n_layer=2, n_head=2, bos_token_id=BOS,
                                  eos_token_id=EOS)
    short = CausalLMOracle(transformers.GPT2LMHeadModel(cfg).eval(), prompt=PROMPT)
    enum = short.enumerable(batch_size=64)
    assert enum.count(-8.0) >= 0  # shallow queries work
    with pytest.raises(ValueError, match="a prefix of 4 tokens after the 3-token prompt needs 7 positions, past the "
                                         "model's maximum context of 6"):
        enum.threshold(50_000)  # more than the 12720 sequences of at most 3 tokens + EOS


def test_context_length_from_max_position_embeddings():
    cfg = transformers.LlamaConfig(
        vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=8, bos_token_id=BOS, eos_token_id=EOS,
    )
    o = CausalLMOracle(transformers.LlamaForCausalLM(cfg).eval(), prompt=[4, 5])
    assert o.max_positions == 8
    with pytest.raises(ValueError, match=r"max_len=8 .* maximum context of 8 \(config.max_position_embeddings\)"):
        o.enumerable(max_len=8)
    assert o.enumerable(max_len=7).max_len == 7


# ------------------------------------------------------------------ checkpoints saved without tokenizer files
def save_model_only(path, bos=2, eos=3):
    """A tiny GPT-2 saved with model.save_pretrained only (no tokenizer files); BOS/EOS ids not 0."""
    m = tiny_gpt2(seed=5, bos=bos, eos=eos)
    m.save_pretrained(path)
    return m


def test_checkpoint_without_tokenizer_files(tmp_path):
    m = save_model_only(tmp_path)
    # transformers builds an empty tokenizer for such a folder: it must not be used
    empty = transformers.AutoTokenizer.from_pretrained(tmp_path, local_files_only=True)
    assert empty.encode("The password is") == []
    with pytest.raises(ValueError, match=r"a text prompt needs a tokenizer.*unusable \(its vocabulary is empty\)"):
        CausalLMOracle.from_pretrained(tmp_path, prompt="The password is")
    o = CausalLMOracle.from_pretrained(tmp_path, prompt=[5, 9])  # token ids work; specials from the config
    assert o.tokenizer is None and o.eos == 3 and o.bos_token_id == 2
    assert o.decode((4, 7)) == "4 7"
    assert np.abs(o.next_logprobs((4,)) - reference(m, [5, 9, 4])).max() < 1e-4
    assert CausalLMOracle.from_pretrained(tmp_path).prompt_ids == [2]  # no prompt: the config's BOS
    # the empty tokenizer passed explicitly is refused, naming why
    with pytest.raises(ValueError, match="tokenizer is unusable: its vocabulary is empty"):
        CausalLMOracle(m, empty, prompt=[5])
    with pytest.raises(ValueError, match="its vocabulary is empty"):
        CausalLMOracle.from_pretrained(tmp_path, tokenizer=empty, prompt=[5])


def test_checkpoint_with_damaged_tokenizer_file(tmp_path):
    save_model_only(tmp_path)
    (tmp_path / "tokenizer.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(ValueError, match=r"a text prompt needs a tokenizer.*no tokenizer could be loaded"):
        CausalLMOracle.from_pretrained(tmp_path, prompt="hello")
    assert CausalLMOracle.from_pretrained(tmp_path, prompt=[5]).eos == 3


# ------------------------------------------------------------------ user errors: named ValueError / TypeError / OSError
def test_bad_devices_and_dtypes_refused_before_the_model_moves():
    m = tiny_gpt2()
    before = next(m.parameters())
    with pytest.raises(ValueError, match="device 'meta' holds no data"):
        CausalLMOracle(m, prompt=PROMPT, device="meta")  # was accepted: the model moved to meta, no numbers left
    with pytest.raises(ValueError, match=r"dtype must be a floating-point torch dtype a model runs in \(float32"):
        CausalLMOracle(m, prompt=PROMPT, dtype=torch.float8_e4m3fn)
    with pytest.raises(ValueError, match="cuda:99"):
        CausalLMOracle(m, prompt=PROMPT, device="cuda:99")
    if not torch.xpu.is_available():
        with pytest.raises(ValueError, match="device 'xpu' is not available"):  # was AssertionError
            CausalLMOracle(m, prompt=PROMPT, device="xpu")
    if not torch.backends.mps.is_available():
        with pytest.raises(ValueError, match="device 'mps' is not available"):  # was RuntimeError
            CausalLMOracle(m, prompt=PROMPT, device="mps")
    # a refused construction leaves the model where and as it was (it used to be cast first)
    for bad in ({"prompt": [3, V]}, {"prompt": PROMPT, "logit_scale": 0}, {"prompt": "text"}):
        with pytest.raises(ValueError):
            CausalLMOracle(m, dtype="bfloat16", **bad)
    p = next(m.parameters())
    assert p.dtype == torch.float32 and p.device == before.device
    with torch.device("meta"):
        on_meta = transformers.GPT2LMHeadModel(m.config)
    with pytest.raises(ValueError, match="weights are on the 'meta' device"):
        CausalLMOracle(on_meta, prompt=PROMPT)


def test_bad_token_ids_and_settings(model):
    o = CausalLMOracle(model, prompt=PROMPT)
    with pytest.raises(ValueError, match="token ids of the prompt must be integers, got 1.5"):
        CausalLMOracle(model, prompt=[1.5, 2])  # was silently token 1
    with pytest.raises(ValueError, match="got True"):
        CausalLMOracle(model, prompt=[True, 3])
    for prefix in ((1.5,), [1.5], ("a",), (None,), (np.float64(2.0),)):
        with pytest.raises(ValueError, match="must be integers"):  # (1.5,) was token 1; others raw torch errors
            o.next_logprobs(prefix)
    with pytest.raises(ValueError, match=r"token ids \[1180591620717411303424\] are outside the vocabulary"):
        o.next_logprobs((2**70,))  # was torch's 'Overflow when unpacking long long'
    with pytest.raises(TypeError, match="a prefix must be a sequence of token ids, got int 5"):
        o.next_logprobs(5)
    assert np.array_equal(o.next_logprobs(np.array([3, 4])), o.next_logprobs((3, 4)))  # numpy ints are ids
    for kv_reuse in (True, False):
        s = CausalLMOracle(model, prompt=PROMPT, kv_reuse=kv_reuse)
        with pytest.raises(ValueError, match=r"token ids \[-1\] are outside the vocabulary"):
            s.score_sequences([(-1,)])  # was the score of token V - 1
        with pytest.raises(ValueError, match=rf"token ids \[{V}\] are outside the vocabulary"):
            s.score_sequences([(2, 3), (V,)])  # was numpy's IndexError
        with pytest.raises(ValueError, match="must be integers, got 1.5"):
            s.score_sequences([(1.5, 2)])
        with pytest.raises(ValueError, match=rf"token ids \[{V}\] are outside the vocabulary"):
            s.all_position_logprobs((V,))  # was a row, silently
    with pytest.raises(ValueError, match=rf"token ids \[{V}\] are outside the vocabulary"):
        o.decode((3, V))
    with pytest.raises(ValueError, match="must be integers"):
        o.decode(("a",))
    with pytest.raises(ValueError, match="eos must be 'auto', None or a token id, got 1.5"):
        o.enumerable(max_len=2, eos=1.5)  # was token 1
    with pytest.raises(ValueError, match="floors must be numbers"):
        o.batch_next_heads([(1,)], ["x"])
    with pytest.raises(ValueError, match="forward_batch_size must be a positive int, got True"):
        CausalLMOracle(model, prompt=PROMPT, forward_batch_size=True)
    with pytest.raises(ValueError, match="logit_scale"):
        CausalLMOracle(model, prompt=PROMPT, logit_scale=True)
    with pytest.raises(TypeError, match=r"tokenizer must have encode\(\) and decode\(\) methods, got int"):
        CausalLMOracle(model, 5, prompt=PROMPT)

    class Mute(CharTokenizer):
        def encode(self, text, add_special_tokens=True):
            return []

    with pytest.raises(ValueError, match="encodes the prompt 'ab' to no token ids"):  # was [bos], silently
        CausalLMOracle(model, Mute("ab"), prompt="ab")


def test_damaged_checkpoint_folders(tmp_path, model):
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="has no config.json"):
        CausalLMOracle.from_pretrained(tmp_path / "empty")
    model.save_pretrained(tmp_path / "cut")
    weights = tmp_path / "cut" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    with pytest.raises(ValueError, match="cannot load the checkpoint at .*SafetensorError"):
        CausalLMOracle.from_pretrained(tmp_path / "cut", prompt=PROMPT)  # was safetensors' own exception
    model.save_pretrained(tmp_path / "shape")
    cfg = (tmp_path / "shape" / "config.json").read_text().replace('"n_embd": 32', '"n_embd": 16')
    (tmp_path / "shape" / "config.json").write_text(cfg)
    with pytest.raises(ValueError, match="cannot load the checkpoint at .*RuntimeError"):
        CausalLMOracle.from_pretrained(tmp_path / "shape", prompt=PROMPT)  # was a RuntimeError


def test_tokenizer_with_special_tokens_added_past_its_base_vocabulary(tmp_path):
    """Special tokens are often added tokens (id >= vocab_size, < len(tokenizer)): such a tokenizer is usable."""
    import tokenizers

    words = [f"w{i}" for i in range(20)]
    tk = tokenizers.Tokenizer(tokenizers.models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="w0"))
    tk.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
    tok = transformers.PreTrainedTokenizerFast(tokenizer_object=tk, bos_token="<s>", eos_token="</s>")
    assert tok.vocab_size == 20 and len(tok) == 22 and tok.eos_token_id == 21
    tiny_gpt2(bos=20, eos=21).save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    o = CausalLMOracle.from_pretrained(tmp_path, prompt="w3 w7")
    assert o.tokenizer is not None and o.prompt_ids == [3, 7] and o.eos == 21 and o.bos_token_id == 20
    assert o.decode((5, 9)) == "w5 w9"


def test_a_store_refuses_a_model_that_differs_past_its_first_values_or_in_its_config(tmp_path):
    """The store's fingerprint saw each parameter's first 64 values and no configuration: a model
    edited past them, or with another layer-norm epsilon, answered from the other's store, labelled
    exact, with no forward. Now both are refused in one line; the same model (another copy, another
    path) opens the store with no forward."""
    from arenum import StoreError
    from arenum.models.hf import CausalLMOracle

    def oracle(edit=None):
        m = tiny_gpt2()
        if edit is not None:
            edit(m)
        return CausalLMOracle(m, prompt=[BOS], eos=EOS, dtype=torch.float64)

    st = tmp_path / "st"
    ar = oracle().enumerable(max_len=3, store=st)
    want = ar.slice(0, 30)
    ar.close()

    def tail(m):
        with torch.no_grad():
            m.transformer.h[1].mlp.c_fc.weight[-1, -1] *= -3  # far past the first 64 values

    def eps(m):
        for mod in m.modules():
            if isinstance(mod, torch.nn.LayerNorm):
                mod.eps = 1.0
        m.config.layer_norm_epsilon = 1.0

    for edit in (tail, eps):
        o = oracle(edit)
        assert o.enumerable(max_len=3).slice(0, 30) != want  # another model indeed
        with pytest.raises(StoreError, match="another model") as e:
            o.enumerable(max_len=3, store=st)
        assert "\n" not in str(e.value)
    m = tiny_gpt2()
    m.config._name_or_path = "/another/path/to/the/same/checkpoint"
    again = CausalLMOracle(m, prompt=[BOS], eos=EOS, dtype=torch.float64).enumerable(max_len=3, store=st)
    assert again.slice(0, 30) == want and again.stats["forwards"] == 0
    again.close()
