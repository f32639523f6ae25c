"""The finite-state protocol and the certified DP, against brute force on small n-grams."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from arenum.finite_state import FiniteStateTables, check_finite_state
from arenum.models import NGramModel
from arenum.support import Support

CORPUS = ["abc", "abd", "bc", "cab", "", "aab", "dcba", "bb"]
SMOOTHINGS = ["kn", "wb", "addk"]


def _fit(order: int, smoothing: str, unknown: str = "error", corpus=CORPUS) -> NGramModel:
    return NGramModel.fit(corpus, order=order, smoothing=smoothing, unknown=unknown)


def _prefixes(V: int, depth: int, eos: int | None):
    toks = [t for t in range(V) if t != eos]
    for n in range(depth + 1):
        yield from itertools.product(toks, repeat=n)


def _future(m: NGramModel, prefix: tuple, horizon: int, eos: int | None) -> list[float]:
    """Scores of every continuation of ``prefix`` of ``horizon`` tokens (or ending in eos before)."""
    out = []
    for n in range(1, horizon + 1):
        for tail in itertools.product(range(m.vocab_size), repeat=n):
            if eos in tail[:-1] or (n < horizon and tail[-1] != eos):
                continue
            total = 0.0
            seq = prefix
            for t in tail:
                total += float(m.next_logprobs(seq)[t])
                seq = seq + (t,)
            out.append(total)
    return out


# ------------------------------------------------------------------------------- protocol
@pytest.mark.parametrize("smoothing", SMOOTHINGS)
@pytest.mark.parametrize("order", [1, 2, 3, 4])
@pytest.mark.parametrize("unknown", ["error", "unk"])
def test_ngram_tables_reproduce_every_row(order, smoothing, unknown):
    m = _fit(order, smoothing, unknown)
    fs = m.finite_state().validate()
    assert fs.eos == m.eos and fs.eos_column == m.eos
    assert fs.log_probs.shape == (fs.n_states, m.vocab_size)
    # terminating prefixes (no eos inside) and fixed-length prefixes (eos an ordinary token)
    r = check_finite_state(fs, m.next_logprobs, Support.terminating(m.eos, m.eos, 6))
    assert r.prefixes == sum((m.vocab_size - 1) ** n for n in range(6))
    r = check_finite_state(fs, m.next_logprobs, Support.fixed(5))
    assert r.prefixes == sum(m.vocab_size ** n for n in range(5))
    assert r.states_seen == fs.n_states  # only reachable states are kept


@pytest.mark.parametrize("smoothing", SMOOTHINGS)
def test_same_state_same_future_brute_force(smoothing):
    """Prefixes in one state have the same completions with the same scores (by enumeration)."""
    m = _fit(3, smoothing)
    fs = m.finite_state()
    by_state: dict[int, list] = {}
    for p in _prefixes(m.vocab_size, 3, m.eos):
        by_state.setdefault(fs.state_of(p), []).append(p)
    merged = 0
    for s, ps in by_state.items():
        ref = _future(m, ps[0], 2, m.eos)
        for p in ps[1:4]:
            assert _future(m, p, 2, m.eos) == ref, (s, ps[0], p)
            merged += 1
    assert merged > 0  # states do merge prefixes


def test_token_model_tables():
    m = NGramModel.fit([[1, 2, 3], [2, 3], [3, 1, 1, 2]], order=3, smoothing="wb")
    fs = m.finite_state()
    check_finite_state(fs, m.next_logprobs, Support.terminating(m.eos, m.eos, 5))


def test_check_catches_a_wrong_table():
    m = _fit(3, "kn")
    fs = m.finite_state()
    bad_next = fs.next_state.copy()
    bad_next[fs.start, 0] = fs.start  # after "a", claim we are back at the start
    bad = FiniteStateTables(fs.tokens, fs.log_probs, fs.eos_log_probs, bad_next, fs.start, fs.eos)
    with pytest.raises(ValueError, match="disagree"):
        check_finite_state(bad, m.next_logprobs, Support.terminating(m.eos, m.eos, 4))


def test_validate_errors():
    m = _fit(2, "kn")
    fs = m.finite_state()
    lp = fs.log_probs.copy()
    lp[0, 0] += 0.5
    with pytest.raises(ValueError, match="sums to"):
        FiniteStateTables(fs.tokens, lp, lp[:, fs.eos].copy(), fs.next_state, fs.start, fs.eos).validate()
    with pytest.raises(ValueError, match="next_state must be"):
        FiniteStateTables(fs.tokens, fs.log_probs, fs.eos_log_probs, fs.next_state.astype(np.int64),
                          fs.start, fs.eos).validate()
    with pytest.raises(ValueError, match="start"):
        FiniteStateTables(fs.tokens, fs.log_probs, fs.eos_log_probs, fs.next_state, 10**6, fs.eos).validate()
    with pytest.raises(ValueError, match="repeat column"):
        FiniteStateTables(fs.tokens, fs.log_probs, fs.eos_log_probs * 0.5, fs.next_state, fs.start,
                          fs.eos).validate()
    with pytest.raises(TypeError):
        FiniteStateTables(list(fs.tokens), fs.log_probs, fs.eos_log_probs, fs.next_state, fs.start,
                          fs.eos).validate()


def test_facade_exposes_tables_lazily():
    m = _fit(3, "kn")
    calls = []

    def make():
        calls.append(1)
        return m.finite_state()

    from arenum import AutoregressiveEnumerable

    e = AutoregressiveEnumerable(m.next_logprobs, max_len=4, eos=m.eos, finite_state=make)
    assert calls == []
    assert e.finite_state_tables() is m.finite_state() and e.finite_state_tables() is m.finite_state()
    assert calls == [1]
    assert m.enumerable(max_len=4).finite_state_tables() is m.finite_state()
    assert AutoregressiveEnumerable(m.next_logprobs, max_len=4).finite_state_tables() is None
    with pytest.raises(TypeError, match="finite_state"):
        AutoregressiveEnumerable(m.next_logprobs, max_len=4, finite_state=3)
