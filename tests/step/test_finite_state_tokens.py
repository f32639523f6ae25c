"""The finite-state protocol in the model's own tokens (one-character strings, eos '\\0'), an eos
column without a next state, and no floating-point warning for impossible tokens."""
from __future__ import annotations

import itertools
import math
import warnings

import numpy as np
import pytest

from arenum import AutoregressiveEnumerable
from arenum.step.finite_state import FiniteStateTables, check_finite_state
from arenum.support import Support

EOS = "\0"
# a bigram over one-character strings: P(next | previous), "^" is the start
BIGRAM = {
    "^": {"a": 0.5, "b": 0.3, "c": 0.2},
    "a": {"a": 0.1, "b": 0.4, "c": 0.2, EOS: 0.3},
    "b": {"a": 0.6, EOS: 0.4},            # c impossible after b
    "c": {"b": 0.25, "c": 0.25, EOS: 0.5},  # a impossible after c
}
CAP = 6


def next_logprobs(prefix: tuple) -> list:
    """The external model: log-probs keyed by the model's own tokens."""
    last = prefix[-1] if prefix else "^"
    return [(t, math.log(p)) for t, p in BIGRAM[last].items()]


def tables(eos_in_columns: bool = True, eos_next: int = -1) -> FiniteStateTables:
    states = ["^", "a", "b", "c"]
    cols = ["a", "b", "c"] + ([EOS] if eos_in_columns else [])
    lp = np.full((len(states), len(cols)), -math.inf)
    nxt = np.full((len(states), len(cols)), -1, dtype=np.int32)
    end = np.full(len(states), -math.inf)
    for s, ctx in enumerate(states):
        for j, t in enumerate(cols):
            p = BIGRAM[ctx].get(t)
            if p is not None:
                lp[s, j] = math.log(p)
                nxt[s, j] = states.index(t) if t != EOS else eos_next
        if EOS in BIGRAM[ctx]:
            end[s] = math.log(BIGRAM[ctx][EOS])
    return FiniteStateTables(cols, lp, end, nxt, 0, EOS)


def brute_force() -> list[tuple[tuple, float]]:
    out = []
    for n in range(0, CAP):
        for body in itertools.product("abc", repeat=n):
            seq, total, ok = body + (EOS,), 0.0, True
            for i, t in enumerate(seq):
                lp = dict(next_logprobs(seq[:i])).get(t)
                if lp is None:
                    ok = False
                    break
                total += lp
            if ok:
                out.append((seq, total))
    return out


@pytest.mark.parametrize("eos_in_columns", [True, False])
def test_own_tokens_validate_and_check_without_warning(eos_in_columns):
    fs = tables(eos_in_columns).validate()
    assert not fs.int_tokens and fs.tokens.dtype == object
    assert fs.eos_column == (3 if eos_in_columns else None)
    assert fs.state_of(("a", "b")) == 2
    with pytest.raises(ValueError, match="impossible"):
        fs.state_of(("b", "c"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the -inf - -inf of impossible tokens warned before
        r = check_finite_state(fs, next_logprobs, Support.terminating(EOS, 0, CAP))
    assert r.states_seen == 4 and r.prefixes > 20


def test_check_names_a_wrong_row_in_own_tokens():
    fs = tables()
    lp = fs.log_probs.copy()
    lp[1, [0, 1]] = lp[1, [1, 0]]  # swap a and b after "a"
    bad = FiniteStateTables(list(fs.tokens), lp, fs.eos_log_probs, fs.next_state, 0, EOS)
    with pytest.raises(ValueError, match=r"after prefix \('a',\): token 'a'"):
        check_finite_state(bad, next_logprobs, Support.terminating(EOS, 0, CAP))

    def with_z(prefix):  # a model that can also say 'z', which the tables do not have
        return next_logprobs(prefix) + [("z", -700.0)]

    with pytest.raises(ValueError, match="token 'z' has log-prob -700.0 from the model and no column"):
        check_finite_state(fs, with_z, Support.terminating(EOS, 0, CAP))


def test_eos_column_needs_no_next_state():
    fs = tables(True, eos_next=-1).validate()  # -1 in the eos column is accepted
    fs.step_tables(True)
    with pytest.raises(ValueError, match="eos column has no next state.*terminating support only"):
        fs.step_tables(False)
    # an integer-id version of the same tables
    ids = fs.with_ids({"a": 0, "b": 1, "c": 2, EOS: 3}.__getitem__).validate()
    assert ids.int_tokens and ids.eos == 3 and ids.tokens.tolist() == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="two tokens"):
        fs.with_ids(lambda t: 0)


@pytest.mark.parametrize("eos_in_columns", [True, False])
def test_enumerable_with_own_tokens_exact_certified_and_draws(eos_in_columns):
    truth = brute_force()
    scores = sorted((s for _, s in truth), reverse=True)
    enum = AutoregressiveEnumerable(next_logprobs, eos=EOS, max_len=CAP, finite_state=tables(eos_in_columns))
    cc = enum.certified()
    assert cc is not None
    for t in [-0.5, -1.5, -3.0, -5.0, -8.0, -30.0]:
        true = sum(1 for s in scores if s >= t)
        b = cc.count_bracket(t)
        assert b.lo <= true <= b.hi, (t, b, true)
        assert enum.count(t) == true
    for k in [1, 5, len(scores)]:
        lo, hi = cc.threshold_bracket(k)
        assert lo <= scores[k - 1] <= hi
    seq = enum.unrank(3)[0]
    assert seq[-1] == EOS and all(isinstance(t, str) for t in seq)
    # plain draws walk the tables by state (no model call) in the model's tokens
    mc = enum.monte_carlo(500, seed=1, head=False)
    assert mc.samples.extra.get("sampler") == "finite_state"
    est = mc.count(-3.0)
    assert est.ci_lo <= sum(1 for s in scores if s >= -3.0) <= est.ci_hi or not math.isfinite(est.ci_hi)


def test_enumerable_with_mismatched_eos_says_so():
    fs = tables(eos_in_columns=False)
    other = FiniteStateTables(list(fs.tokens), fs.log_probs, fs.eos_log_probs, fs.next_state, 0, "$")
    enum = AutoregressiveEnumerable(next_logprobs, eos=EOS, max_len=CAP, finite_state=other)
    with pytest.raises(ValueError, match=r"eos='\$'.*eos='\\x00'"):
        enum.certified()
