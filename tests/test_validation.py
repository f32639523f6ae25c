"""Every bad-input path: a clear builtin exception naming the parameter or the offending value."""
from __future__ import annotations

import math

import numpy as np
import pytest

from arenum import AutoregressiveEnumerable, Quantizer, autoregressive_count_index
from arenum.testing import RandomModel

LOG_HALF = math.log(0.5)


def coin(prefix):
    return [(0, LOG_HALF), (1, LOG_HALF)]


def make(fn, **kw):
    kw.setdefault("max_len", 2)
    return AutoregressiveEnumerable(fn, **kw)


@pytest.mark.parametrize(
    "kw, exc, match",
    [
        (dict(max_len=2.5), ValueError, "max_len must be an exact integer, got 2.5"),
        (dict(max_len=0), ValueError, "max_len must be >= 1, got 0"),
        (dict(max_len=True), TypeError, "max_len must be an integer, got bool"),
        (dict(max_len="3"), TypeError, "max_len must be an integer, got str"),
        (dict(max_len=None, eos=None), ValueError, "give max_len for a fixed-length model or eos"),
        (dict(eos=1, max_depth=0), ValueError, "max_depth must be >= 1, got 0"),
        (dict(eos=1, max_depth=3.5), ValueError, "max_depth must be an exact integer, got 3.5"),
        (dict(oversample=0), ValueError, "oversample must be >= 1, got 0"),
        (dict(oversample=2.5), ValueError, "oversample must be an exact integer, got 2.5"),
        (dict(bin_width_bits=0.0), ValueError, "bin_width_bits must be > 0"),
        (dict(bin_width_bits=float("nan")), ValueError, "bin_width_bits must be finite"),
        (dict(batch_size=0), ValueError, "batch_size must be >= 1, got 0"),
        (dict(batch_size=1.5), ValueError, "batch_size must be an exact integer, got 1.5"),
        (dict(branch_cap=0), ValueError, "branch_cap must be >= 1, got 0"),
        (dict(branch_cap=2.2), ValueError, "branch_cap must be an exact integer, got 2.2"),
        (dict(count_mode="fast"), ValueError, "count_mode must be one of"),
        (dict(batch_next_logprobs=3), TypeError, "batch_next_logprobs must be callable"),
        (dict(norm_tol=2.0), ValueError, "norm_tol must be in"),
    ],
)
def test_constructor_errors(kw, exc, match):
    with pytest.raises(exc, match=match):
        make(coin, **kw)


def test_exact_float_sizes_accepted():
    ar = make(coin, max_len=2.0, oversample=4.0, batch_size=8.0)
    assert ar.max_len == 2 and ar.oversample == 4 and ar.batch_size == 8
    with pytest.raises(TypeError, match="next_logprobs must be callable"):
        AutoregressiveEnumerable(None, max_len=2)


@pytest.mark.parametrize(
    "table, match",
    [
        ([(0, float("nan")), (1, 0.0)], r"log_prob is NaN for token 0"),
        ([(0, 0.5), (1, -2.0)], r"log_prob must be <= 0, got 0.5 for token 0"),
        ([(0, float("inf")), (1, -1.0)], r"log_prob must be <= 0, got inf"),
        ([(0, LOG_HALF), (0, LOG_HALF)], r"duplicate token 0"),
        ([(0, math.log(0.6)), (1, math.log(0.6))], r"probabilities sum to 1.2, not 1"),
        ([(0, -math.inf), (1, -math.inf)], r"no finite log_prob"),
        ([], r"empty step table"),
        ([(0,)], r"expected \(token, log_prob\) pairs"),
        ((np.array([0, 1]), np.array([LOG_HALF])), r"differ in length \(2 != 1\)"),
        ((np.array(["a", "a"], dtype=object), np.array([LOG_HALF, LOG_HALF])), r"duplicate token 'a'"),
    ],
)
def test_malformed_model_output(table, match):
    ar = make(lambda p: table)
    with pytest.raises(ValueError, match=match):
        ar.count(-1.0)
    with pytest.raises(ValueError, match=r"next_logprobs\(\(\)\)"):
        make(lambda p: table).unrank(0)


@pytest.mark.parametrize("value, match", [("-0.7", "is a str, not a number"), (b"-0.7", "is a bytes, not a number"),
                                          (None, "is not a number")])
@pytest.mark.parametrize("batch", [False, True])
def test_log_prob_not_a_number_is_refused(value, match, batch):
    """A string or bytes (which float() parses) or None (which numpy makes NaN) is a TypeError naming
    the value, its token and the prefix, in a single call or a batch, at any depth."""
    def model(p):
        return [(0, value if len(p) == 1 else LOG_HALF), (1, LOG_HALF)]

    batch_fn = (lambda ps: [model(p) for p in ps]) if batch else None
    ar = make(model, batch_next_logprobs=batch_fn, max_len=3)
    with pytest.raises(TypeError, match=r"next_logprobs\(\(\d,\)\): log_prob .* for token 0 " + match):
        ar.count(-math.inf)
    ar._check()


def test_an_eos_the_model_never_gives_is_named():
    """A terminating model whose tables never give eos a positive probability has an empty support:
    a query past it says why (it said only "0 sequences")."""
    ar = make(lambda p: [(0, LOG_HALF), (1, LOG_HALF)], eos=2, max_len=3)
    assert ar.count(-math.inf) == 0
    for f in (lambda: ar.threshold(1), lambda: ar.unrank(0)):
        with pytest.raises(IndexError, match=r"0 sequences: no table of a prefix shorter than max_len=3 gives eos=2 "
                                             r"a positive probability"):
            f()
    late = make(lambda p: [(0, LOG_HALF), (2, LOG_HALF)] if len(p) == 2 else [(0, LOG_HALF), (1, LOG_HALF)],
                eos=2, max_len=3)
    assert late.count(-math.inf) == 4
    with pytest.raises(IndexError, match=r"beyond the support \(4 sequences\)$"):
        late.unrank(4)


def test_non_iterable_output():
    with pytest.raises(TypeError, match="must return"):
        make(lambda p: 3.0).unrank(0)


def test_neg_inf_entries_dropped_and_renormalized():
    # float32 precision row: renormalized; -inf token never appears
    def model(p):
        return [(0, float(np.float32(math.log(0.7)))), (1, float(np.float32(math.log(0.3)))), (2, -math.inf)]

    ar = make(model)
    assert ar.count(-math.inf) == 4
    total = sum(math.exp(s) for _, s in ar.slice(0, 4))
    assert abs(total - 1.0) < 1e-14
    assert ar.log_density((2, 0)) == -math.inf


def test_batch_cardinality_checked_and_nothing_cached():
    m = RandomModel(3, seed=1)
    bad = lambda ps: [m(p) for p in ps][:-1]  # noqa: E731
    ar = make(m, batch_next_logprobs=bad, max_len=3)
    with pytest.raises(ValueError, match="returned 0 results for a batch of 1 prefixes"):
        ar.unrank(0)
    assert ar.stats["forwards"] == 0
    long = lambda ps: [m(p) for p in ps] + [m(())]  # noqa: E731
    with pytest.raises(ValueError, match="returned 2 results for a batch of 1"):
        make(m, batch_next_logprobs=long).unrank(0)


def test_scorer_and_harvest_cardinality():
    m = RandomModel(3, seed=1)
    ar = make(m, max_len=2, batch_score_sequences=lambda seqs: [-1.0] * (len(seqs) + 1))
    with pytest.raises(ValueError, match="returned 3 scores for 2 sequences"):
        ar.score_sequences([(0, 1), (1, 1)])
    ar = make(m, max_len=2, all_position_logprobs=lambda seq: [m(seq[:d]) for d in range(len(seq))][:-1])
    with pytest.raises(ValueError, match="returned 1 results for a sequence of length 2"):
        ar.harvest((0, 1))
    assert ar.stats["harvested_positions"] == 0
    ar = make(m, max_len=2, batch_score_sequences=lambda seqs: [0.5] * len(seqs))
    with pytest.raises(ValueError, match="must be <= 0"):
        ar.score_sequences([(0, 1)])


@pytest.mark.parametrize("bad, exc", [(2.5, ValueError), (True, TypeError), ("1", TypeError)])
def test_query_argument_errors(bad, exc):
    ar = make(coin)
    with pytest.raises(exc):
        ar.unrank(bad)
    with pytest.raises(exc):
        ar.threshold(bad)
    with pytest.raises(exc):
        ar.slice(bad, 2)
    with pytest.raises(exc):
        ar.top_k(bad)


def test_out_of_range_and_domain_errors():
    ar = make(coin)
    with pytest.raises(IndexError, match="beyond the support \\(4 sequences\\)"):
        ar.unrank(4)
    with pytest.raises(IndexError):
        ar.unrank(-1)
    with pytest.raises(ValueError, match="rank must be >= 1, got 0"):
        ar.threshold(0)
    with pytest.raises(ValueError, match="min_log_prob must be finite"):
        ar.count(float("nan"))
    with pytest.raises(ValueError, match=r"p must be in \(0, 1\]"):
        ar.nucleus_size(1.5)
    with pytest.raises(ValueError, match="outside the declared support"):
        ar.rank((0, 1, 1))
    with pytest.raises(TypeError, match="sequence must be a sequence of tokens; got a str"):
        ar.rank("ab")
    assert ar.top_k(0) == [] and ar.top_k(-3) == []
    assert ar.count(0.5) == 0


def test_off_support_and_past_the_support_messages_say_why():
    """A sequence off the support says why (no eos at the end / N tokens past the length cap), and
    ``threshold(k)`` past the support speaks of the caller's 1-based ``k``."""
    from arenum.testing import RandomModel

    ar = AutoregressiveEnumerable(RandomModel(3, seed=1, eos=0), eos=0, max_len=3)
    with pytest.raises(ValueError, match="outside the declared support: it does not end in eos=0"):
        ar.rank((1, 2))
    with pytest.raises(ValueError, match="it has 5 tokens, 2 past the length cap 3"):
        ar.rank((1, 2, 1, 2, 0))
    n = ar.count(-math.inf)
    with pytest.raises(IndexError, match=rf"^k={n + 1} \(1-based\) is beyond the support \({n} sequences\)$"):
        ar.threshold(n + 1)


def test_zero_probability_rank():
    ar = make(lambda p: [(0, 0.0), (1, -math.inf)])
    with pytest.raises(ValueError, match="has probability 0"):
        ar.rank((0, 1))


def test_mixed_token_types_rejected():
    calls = []

    def model(p):
        calls.append(p)
        return [(0, LOG_HALF), ("x", LOG_HALF)] if p else [(0, LOG_HALF), (1, LOG_HALF)]

    with pytest.raises(TypeError, match="is not an integer"):
        make(model).count(-5.0)


def test_count_index_errors():
    q = Quantizer(1.0, 4)
    with pytest.raises(ValueError, match="depth must be >= 1"):
        autoregressive_count_index(coin, (), 0, q, 8)
    with pytest.raises(ValueError, match="max_fine_bucket must be an exact integer"):
        autoregressive_count_index(coin, (), 2, q, 1.5)
    with pytest.raises(TypeError, match="quantizer must be a Quantizer"):
        make(coin).quantized_count_index("q", 3)
    with pytest.raises(ValueError, match="log_prob must be finite and <= 0"):
        q.fine_bucket(0.5)


@pytest.mark.parametrize("kernels", ["numpy", None])
def test_a_bad_token_deep_in_the_tree_and_an_empty_dense_batch_name_their_prefix(monkeypatch, kernels):
    """A token of the wrong kind at a deep prefix named no prefix (the vocabulary's own message); a
    dense batch of 0 columns was numpy's "zero-size array to reduction operation"."""
    if kernels:
        monkeypatch.setenv("ARENUM_KERNELS", kernels)
    for bad in (1.0, "a", 2**70):
        ar = AutoregressiveEnumerable(lambda p, bad=bad: [(0, LOG_HALF), (bad if p == (0, 1) else 1, LOG_HALF)], max_len=3)
        with pytest.raises((TypeError, ValueError), match=r"^next_logprobs\(\(0, 1\)\): .*token") as e:
            ar.count(-math.inf)
        assert "\n" not in str(e.value)
        ar._check()
    ar = AutoregressiveEnumerable(coin, max_len=2, batch_next_logprobs=lambda ps: np.zeros((len(ps), 0)))
    with pytest.raises(ValueError, match=r"^next_logprobs\(\(\)\): empty step table"):
        ar.count(-math.inf)


def test_a_rank_of_probability_0_names_the_token_the_model_does_not_hold():
    """'has probability 0' said nothing of which token (a transformer's out-of-vocabulary id, a typo)."""
    ar = make(coin, max_len=3)
    for seq, k in (((9, 1, 0), 0), ((0, 1, 7), 2)):
        with pytest.raises(ValueError, match=rf"has probability 0 \(its token {seq[k]} at position {k} is not in the "
                                             rf"model's table after \({', '.join(map(str, seq[:k]))}"):
            ar.rank(seq)
    ar._check()


def test_ranks_of_not_an_iterable_names_the_parameter():
    ar = make(lambda p: [(0, LOG_HALF), (1, LOG_HALF)], max_len=2)
    for bad in (None, 5):
        with pytest.raises(TypeError, match="sequences must be an iterable of sequences, got"):
            ar.ranks(bad)


def test_unrank_past_a_capped_finite_support_is_an_index_error():
    """Past a cap, unrank of a position the certified count shows beyond the whole support raised
    BudgetExceeded where threshold said IndexError (QA); a position inside still says the cap."""
    from arenum import BudgetExceeded
    from arenum.models import NGramModel

    m = NGramModel.fit(["ab", "ba", "abc", "c", "cab"] * 3, order=2)
    e = m.enumerable(max_len=3, max_prefixes=3)
    n = sum(1 for k in range(3) for _ in range(len(m.vocab) ** k))  # at most every string of < 3 letters
    for i in (10**30, n):
        with pytest.raises(IndexError, match=rf"i={i} is beyond the support \(at most \d+ sequences\)"):
            e.unrank(i)
    with pytest.raises(BudgetExceeded, match="max_prefixes=3"):
        e.unrank(5)
    e._check()
