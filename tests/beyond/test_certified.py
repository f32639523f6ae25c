"""The finite-state protocol and the certified DP, against brute force on small n-grams."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from arenum.step.finite_state import FiniteStateTables, check_finite_state
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
    with pytest.raises(ValueError, match="tokens must be 1-D int64 ids or the model's own tokens"):
        FiniteStateTables(fs.tokens.astype(np.float64), fs.log_probs, fs.eos_log_probs, fs.next_state, fs.start,
                          fs.eos).validate()
    with pytest.raises(TypeError, match="hashable"):
        FiniteStateTables([[t] for t in fs.tokens.tolist()], fs.log_probs, fs.eos_log_probs, fs.next_state,
                          fs.start, fs.eos).validate()
    as_list = FiniteStateTables(list(fs.tokens), fs.log_probs, fs.eos_log_probs, fs.next_state, fs.start, fs.eos)
    assert as_list.int_tokens and as_list.validate().tokens.dtype == np.int64  # a list of ints: ids


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


# ------------------------------------------------------------------------- the certified DP
from arenum import AutoregressiveEnumerable  # noqa: E402
from arenum.beyond.certified import CertifiedCounter  # noqa: E402


def _support_scores(m: NGramModel, support: Support) -> np.ndarray:
    """The engine's float64 score of every sequence of the support, by brute force."""
    V, eos = m.vocab_size, m.eos
    if support.is_terminating:
        seqs = [t + (eos,) for n in range(support.cap) for t in itertools.product(
            [x for x in range(V) if x != eos], repeat=n)]
    else:
        seqs = list(itertools.product(range(V), repeat=support.cap))
    return m.score_sequences(seqs)


def _check_all(cc: CertifiedCounter, sc: np.ndarray, n_t: int = 60) -> list[float]:
    """Every bracket of ``cc`` against the brute-force scores ``sc``; returns count widths (bits)."""
    srt = np.sort(sc)[::-1]
    uniq = np.unique(sc)
    ts = np.concatenate([np.quantile(sc, np.linspace(0, 1, n_t)), uniq[:: max(1, len(uniq) // n_t)],
                         [0.0, 1.0, -1e-9, float(sc.min()) - 5, -math.inf]])
    widths = []
    for t in ts:
        true = int((sc >= t).sum())
        b = cc.count_bracket(float(t))
        assert b.lo <= true <= b.hi, (t, b, true)
        mass = float(np.exp(sc[sc >= t]).sum())
        mb = cc.mass_bracket(float(t))
        assert mb.lo <= mass * (1 + 1e-12) and mass <= mb.hi * (1 + 1e-12), (t, mb, mass)
        if true:
            widths.append(math.log2(max(b.hi, 1) / max(b.lo, 1)) if b.lo else math.inf)
    for s in sc[:: max(1, len(sc) // 80)]:
        rank = int((sc > s).sum())
        r = cc.rank_bracket(float(s))
        assert r.lo <= rank <= r.hi, (s, r, rank)
    for k in sorted({1, 2, 3, 7, 20, len(sc) // 3, len(sc) // 2, len(sc)}):
        lo, hi = cc.threshold_bracket(k)
        assert lo <= srt[k - 1] <= hi, (k, lo, srt[k - 1], hi)
    return widths


@pytest.mark.parametrize("smoothing", SMOOTHINGS)
@pytest.mark.parametrize("order", [1, 2, 3])
def test_brackets_contain_brute_force_terminating(order, smoothing):
    m = _fit(order, smoothing)
    sup = Support.terminating(m.eos, m.eos, 5)
    sc = _support_scores(m, sup)
    for res in (0.5, 1 / 16):
        _check_all(CertifiedCounter(m.finite_state(), sup, resolution_bits=res), sc)


@pytest.mark.parametrize("smoothing", SMOOTHINGS)
@pytest.mark.parametrize("order", [2, 4])
def test_brackets_contain_brute_force_fixed(order, smoothing):
    m = _fit(order, smoothing, unknown="unk")  # unk: one more token, never observed in a context
    sup = Support.fixed(4)
    sc = _support_scores(m, sup)
    _check_all(CertifiedCounter(m.finite_state(), sup, resolution_bits=1 / 8), sc)


def test_brackets_token_model_and_long_cap():
    """A token model, and a terminating cap too long to bind (the unbounded sweep answers)."""
    m = NGramModel.fit([[1, 2], [2, 1, 1], [1]], order=2, smoothing="wb")
    sc = _support_scores(m, Support.terminating(m.eos, m.eos, 7))
    cc = CertifiedCounter(m.finite_state(), Support.terminating(m.eos, m.eos, 7), resolution_bits=1 / 16)
    _check_all(cc, sc)
    big = CertifiedCounter(m.finite_state(), Support.terminating(m.eos, m.eos, 400), resolution_bits=1 / 16)
    b = big.count_bracket(-6.0)
    short = int((sc >= -6.0).sum())  # sequences of length <= 7; none longer fits -6 nats here
    assert b.lo <= short <= b.hi
    assert any(k[2] is None for k in big._sweeps)  # the unbounded sweep was used


def test_brackets_narrow_as_the_grid_refines():
    m = _fit(3, "kn")
    sup = Support.terminating(m.eos, m.eos, 5)
    sc = _support_scores(m, sup)
    ts = np.quantile(sc, np.linspace(0.05, 1, 40))
    prev = None
    totals = []
    for res in (1.0, 1 / 4, 1 / 16, 1 / 64):
        cc = CertifiedCounter(m.finite_state(), sup, resolution_bits=res)
        bs = [cc.count_bracket(float(t)) for t in ts]
        if prev is not None:  # nested power-of-two grids: never wider
            for b, p in zip(bs, prev):
                assert b.lo >= p.lo and b.hi <= p.hi
        totals.append(sum(math.log2(b.hi / max(b.lo, 1)) for b in bs))
        prev = bs
    assert totals[-1] < 0.25 * totals[0]
    assert totals[-1] / len(ts) < 0.2  # a fifth of a bit on average at 1/64 bit


def _iid_tables(p: list[float]) -> FiniteStateTables:
    lp = np.log(np.array([p]))
    return FiniteStateTables(np.arange(len(p), dtype=np.int64), lp, np.full(1, -math.inf),
                             np.zeros((1, len(p)), dtype=np.int32), 0, None)


def test_counts_past_2_64_exact_integers():
    """i.i.d. tokens (one state): counts of ~2**70 against exact binomial sums (Python integers)."""
    L = 70
    p = [0.75, 0.25]
    cc = CertifiedCounter(_iid_tables(p), Support.fixed(L), resolution_bits=1 / 16)
    la, lb = math.log(p[0]), math.log(p[1])
    for k in range(0, L + 1, 7):  # thresholds halfway between score levels: no float ties
        t = (L - k) * la + k * lb + 0.5 * (la - lb) if k < L else L * lb - 1.0
        t = min(t, L * la)
        true = sum(math.comb(L, j) for j in range(L + 1) if (L - j) * la + j * lb >= t)
        b = cc.count_bracket(t)
        assert b.lo <= true <= b.hi, (k, b, true)
        m = cc.mass_bracket(t)
        tm = sum(math.comb(L, j) * p[0] ** (L - j) * p[1] ** j for j in range(L + 1) if (L - j) * la + j * lb >= t)
        assert m.lo <= tm * (1 + 1e-9) and tm <= m.hi * (1 + 1e-9)
    b = cc.count_bracket(L * lb - 1.0)
    assert b.lo <= 2**L <= b.hi and b.hi / b.lo < 1 + 1e-10  # all 2**70: float slack only


def test_uniform_fixed_length_all_or_nothing():
    cc = CertifiedCounter(_iid_tables([0.25] * 4), Support.fixed(40), resolution_bits=1 / 8)
    t = 40 * math.log(0.25)  # every sequence's score, up to float rounding
    b = cc.count_bracket(t - 3.0)
    assert b.lo <= 4**40 <= b.hi and b.hi / b.lo < 1 + 1e-10
    assert tuple(cc.count_bracket(t + 1.0)) == (0, 0)
    r = cc.rank_bracket(t)
    assert r.lo == 0 and r.hi >= 4**40 - 1


def test_certified_counter_errors():
    m = _fit(2, "kn")
    fs = m.finite_state()
    sup = Support.terminating(m.eos, m.eos, 4)
    with pytest.raises(TypeError, match="tables"):
        CertifiedCounter(object(), sup)
    with pytest.raises(TypeError, match="support"):
        CertifiedCounter(fs, 4)
    with pytest.raises(ValueError, match="resolution_bits"):
        CertifiedCounter(fs, sup, resolution_bits=0.0)
    with pytest.raises(ValueError, match="max_bits"):
        CertifiedCounter(fs, sup, max_bits=-1)
    with pytest.raises(ValueError, match="branch_cap"):
        CertifiedCounter(fs, Support.terminating(m.eos, m.eos, 4, branch_cap=2))
    with pytest.raises(ValueError, match="fixed-length"):
        CertifiedCounter(_iid_tables([0.5, 0.5]), Support.terminating(0, 0, 4))
    cc = CertifiedCounter(fs, sup)
    with pytest.raises(ValueError, match="k must be"):
        cc.threshold_bracket(0)
    with pytest.raises(ValueError, match="s must be finite"):
        cc.rank_bracket(math.nan)


# -------------------------------------------------------------------- the automatic regime
def test_a_certified_single_value_says_certified_and_is_the_truth():
    """Past the cap, a certified bracket whose ends meet is ``exact`` (both ends bound the truth) but
    keeps ``method='certified'``: the exact index did not answer it. Wider ones are never exact."""
    m = _fit(3, "kn")
    sup = Support.terminating(m.eos, m.eos, 6)
    sc = _support_scores(m, sup)
    e = m.enumerable(max_len=6, max_prefixes=1)  # every query past the root is past the cap
    cc = CertifiedCounter(m.finite_state(), sup)
    seen = {True: 0, False: 0}
    for t in [sc.max() / 2, sc.max() * 0.999, *np.quantile(sc, [0.999, 0.9, 0.5]).tolist()]:
        c, mb, r = e.count(t), e.mass_above(t), e.answers.rank(t)
        mass = float(np.exp(sc[sc >= t]).sum())
        for x, lo, hi, truth in ((c, c.ci_lo, c.ci_hi, int((sc >= t).sum())), (mb, mb.lo, mb.hi, mass),
                                 (r, r.rank_lo, r.rank_hi, int((sc > t).sum()))):
            assert x.method == "certified" and lo <= truth * (1 + 1e-12) and truth <= hi * (1 + 1e-12)
            if x.exact:
                assert lo == hi and (lo == truth or x is mb)  # a mass: float sums, within rounding of it
            seen[x.exact] += 1
        assert c.exact == (c.ci_lo == c.ci_hi) and mb.exact == (mb.lo == mb.hi)
        assert r.exact == (r.rank_lo == r.rank_hi and r.cumulative_lo == r.cumulative_hi)
        d = cc.mass_bracket(t)
        assert d.method == "certified" and d.exact == (d.lo == d.hi)
    assert seen[True] >= 3 and seen[False] >= 6  # both kinds met


def test_answers_exact_where_the_budget_reaches_certified_past_it():
    m = _fit(3, "kn")
    sup_scores = _support_scores(m, Support.terminating(m.eos, m.eos, 6))
    full = m.enumerable(max_len=6)
    capped = m.enumerable(max_len=6, max_prefixes=30)
    seqs = [m.encode(w) for w in ["abc", "dcba", "bb", "ddddd", "a"]]
    for seq in seqs:
        r = full.rank(seq)
        assert r.exact and r.method == "exact"
        c = capped.rank(seq)
        assert c.rank_lo <= r.rank <= c.rank_hi
        if c.exact:  # exact past the cap only as the exact index's answer or a certified single value
            assert c.rank == r.rank and c.rank_lo == c.rank_hi
        else:
            assert c.method == "certified"
            assert c.cumulative_lo <= r.cumulative * (1 + 1e-12) and r.cumulative <= c.cumulative_hi * (1 + 1e-12)
    assert capped.rank(m.encode("ddddd")).method == "certified"
    # a threshold in the exact head stays exact; a deep one is certified and holds the truth
    assert capped.count(-1.0).exact
    deep = float(np.quantile(sup_scores, 0.5))
    c = capped.count(deep)
    assert c.method == "certified" and c.ci_lo <= int((sup_scores >= deep).sum()) <= c.ci_hi
    b = capped.count_bracket(deep)
    assert (b.lo, b.hi) == (c.ci_lo, c.ci_hi)
    t = capped.threshold(200)
    truth = float(np.sort(sup_scores)[::-1][199])
    assert t.method == "certified" and t.ci_lo <= truth <= t.ci_hi
    mb = capped.mass_above(deep)
    tm = float(np.exp(sup_scores[sup_scores >= deep]).sum())
    assert mb.lo <= tm * (1 + 1e-12) and tm <= mb.hi * (1 + 1e-12)


def test_certified_preferred_to_monte_carlo_and_absent_without_tables():
    m = _fit(3, "kn")
    e = m.enumerable(max_len=6, exact_limit=30, estimate_samples=200)
    r = e.rank(m.encode("ddddd"))
    assert r.method == "certified" and r.confidence is None
    plain = AutoregressiveEnumerable(m.next_logprobs, max_len=6, eos=m.eos, exact_limit=30, estimate_samples=200)
    assert plain.certified() is None
    assert plain.rank(m.encode("ddddd")).method != "certified"
    assert m.enumerable(max_len=6, branch_cap=2).certified() is None
    other = AutoregressiveEnumerable(m.next_logprobs, max_len=6, eos=0, finite_state=m.finite_state())
    with pytest.raises(ValueError, match="eos"):
        other.certified()
    assert e.certified() is e.certified() and e.certified(1 / 4).resolution_bits > e.certified().resolution_bits


def test_cli_rank_prints_the_certified_bracket(tmp_path):
    import json
    import subprocess
    import sys

    m = _fit(3, "kn")
    path = tmp_path / "m.npz"
    m.save(path)
    args = [sys.executable, "-m", "arenum.cli", "rank", "--model", str(path), "--max-len", "6",
            "--max-forwards", "30", "ddddd"]
    out = subprocess.run(args, capture_output=True, timeout=120)
    assert out.returncode == 0, out.stderr.decode()
    text = out.stdout.decode()
    assert "certified" in text and "~ " in text and "[" in text
    doc = json.loads(subprocess.run(args + ["--json"], capture_output=True, timeout=120).stdout)
    sc = _support_scores(m, Support.terminating(m.eos, m.eos, 6))
    true = int((sc > m.logprob("ddddd")).sum())
    assert doc["method"] == "certified" and doc["rank_lo"] <= true <= doc["rank_hi"]


def test_sliding_buffer_gives_the_same_floats(monkeypatch):
    """The unbounded sweep keeps only the last ``span`` cells of every state: same values as whole."""
    from arenum.beyond import certified, sweep

    m = NGramModel.fit(["ab", "abc", "b", "ca", "aab"], order=3, smoothing="kn")
    sup = Support.terminating(m.eos, m.eos, 1024)
    monkeypatch.setattr(certified, "_compiled_sweep", lambda progress=None: None)  # the numpy sweep's buffer
    monkeypatch.setattr(sweep.Sweep, "GROW", 10**6)
    whole = CertifiedCounter(m.finite_state(), sup, resolution_bits=1 / 64)
    ts = (-3.0, -12.0, -40.0, -25.0, -60.0)
    want = [(whole.count_bracket(t), whole.mass_bracket(t)) for t in ts]
    assert all(s.o == 0 for s in whole._sweeps.values())
    monkeypatch.setattr(sweep.Sweep, "GROW", 0)
    slid = CertifiedCounter(m.finite_state(), sup, resolution_bits=1 / 64)
    assert [(slid.count_bracket(t), slid.mass_bracket(t)) for t in ts] == want
    sw = [s for k, s in slid._sweeps.items() if k[2] is None][0]
    assert sw.o > 0 and sw.N.shape[1] < sw.K  # it slid, and holds fewer cells than it built


def test_per_length_mode_is_warned_with_its_cost(monkeypatch):
    """A likely self-loop makes a max_len-token path cheap: the bracket is counted length by length
    (cap sweeps). Past LEVELS_WARN_WORK added cell updates the first such sweep warns with the cost;
    below it (this tiny model as it is) it stays quiet. The bracket holds the truth either way."""
    import warnings

    import arenum.beyond.certified as cmod

    lp = np.log(np.array([[0.02, 0.98]]))  # token 0 ends, token 1 loops
    tabs = FiniteStateTables(np.arange(2, dtype=np.int64), lp, lp[:, 0].copy(),
                             np.zeros((1, 2), dtype=np.int32), 0, 0)
    sup = Support.terminating(0, 0, 30)
    true = sum(1 for n in range(30) if n * math.log(0.98) + math.log(0.02) >= -40.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        b = CertifiedCounter(tabs, sup, resolution_bits=1 / 128).count_bracket(-40.0)
    assert b.lo <= true <= b.hi
    monkeypatch.setattr(cmod, "LEVELS_WARN_WORK", 1000)  # this tiny model's work stands for a large one
    with pytest.warns(RuntimeWarning, match="counted length by length: 30 sweeps"):
        b = CertifiedCounter(tabs, sup, resolution_bits=1 / 128).count_bracket(-40.0)
    assert b.lo <= true <= b.hi


def test_a_long_terminating_cap_keeps_the_upper_end_in_one_pass():
    """A likely self-loop under a cap past UPPER_LEVELS_MAX_CAP: the upper end comes from the one-pass
    sweep (completions of any length: a superset), never cap sweeps, and no warning; the lower end's
    min-plus check is skipped when every step costs a cell or more. The bracket holds the truth."""
    import warnings

    import arenum.beyond.certified as cmod

    lp = np.log(np.array([[0.02, 0.98]]))  # token 0 ends, token 1 loops
    tabs = FiniteStateTables(np.arange(2, dtype=np.int64), lp, lp[:, 0].copy(),
                             np.zeros((1, 2), dtype=np.int32), 0, 0)
    cap = cmod.UPPER_LEVELS_MAX_CAP + 36
    for t in (-1.0, -5.0, -40.0):
        true = sum(1 for n in range(cap) if n * math.log(0.98) + math.log(0.02) >= t)
        cc = CertifiedCounter(tabs, Support.terminating(0, 0, cap), resolution_bits=1 / 128)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            b = cc.count_bracket(t)
        assert b.lo <= true <= b.hi
        assert "hi_count_unbounded" in cc.stats["cells"] and "hi_count_levels" not in cc.stats["cells"]
        if t == -1.0:  # cap steps of at least 6 cells each lie past 256 cells: no min-plus walk
            assert cc.stats["cells"].keys() == {"lo_count_unbounded", "hi_count_unbounded"}
            assert cc._minplus[True][1] == 0
    # a cap of at most UPPER_LEVELS_MAX_CAP keeps the tighter per-length upper end
    cc = CertifiedCounter(tabs, Support.terminating(0, 0, 30), resolution_bits=1 / 128)
    b = cc.count_bracket(-40.0)
    assert "hi_count_levels" in cc.stats["cells"]
    assert b.lo <= sum(1 for n in range(30) if n * math.log(0.98) + math.log(0.02) >= -40.0) <= b.hi


@pytest.mark.parametrize("jit", ["numba", "numpy"])
def test_a_coarser_grid_reads_smaller_blocks_with_the_same_brackets(monkeypatch, jit):
    """The block a bulk step of the one-pass sweep reads at once is about one nat of cells (64 at the
    default grid, 8 at least): a coarser grid keeps its likely steps out of the cell-by-cell pass; the
    per-length sweep reads 64-cell blocks of the same tables. The count and rank
    brackets equal those of the 64-cell block (counts below 2**53: the same integers; past it, and
    the masses, float sums in another order: to 1e-12) and hold brute force, for the one-pass sweep
    (a long cap) and the per-length one (a binding cap)."""
    from arenum.beyond import certified

    if jit == "numpy":
        monkeypatch.setattr(certified, "_compiled_sweep", lambda progress=None: None)
    want = {1 / 128: 64, 1 / 32: 64, 1 / 16: 32, 1 / 8: 16, 1 / 4: 8, 1.0: 8}
    m = _fit(3, "kn")
    assert CertifiedCounter(m.finite_state(), Support.terminating(m.eos, m.eos, 5)).block == 64  # the default grid
    big = False
    for cap in (5, 300):
        sup = Support.terminating(m.eos, m.eos, cap)
        sc = _support_scores(m, Support.terminating(m.eos, m.eos, 5))
        ts = [float(t) for t in np.quantile(sc, np.linspace(0.02, 1, 25))] + [-30.0, -55.0]
        for res, block in want.items():
            cc = CertifiedCounter(m.finite_state(), sup, resolution_bits=res)
            assert cc.block == block, res
            wide = CertifiedCounter(m.finite_state(), sup, resolution_bits=res)
            wide.block = wide._edges.B = 64
            for t in ts:  # past 2**53 (t = -55, cap 300) and for masses: float sums of the same terms in
                for a, b in ((cc.count_bracket(t), wide.count_bracket(t)), (cc.rank_bracket(t), wide.rank_bracket(t)),
                             (cc.mass_bracket(t), wide.mass_bracket(t))):  # another order, each end certified
                    if isinstance(a.hi, int) and a.hi < 2**53:
                        assert (a.lo, a.hi) == (b.lo, b.hi), (res, t)
                    else:
                        assert a.lo == pytest.approx(b.lo, rel=1e-12, abs=1e-300) and a.hi == pytest.approx(b.hi, rel=1e-12)
                big |= cc.count_bracket(t).hi >= 2**53
            for key, sw in cc._sweeps.items():  # the one-pass sweep reads the small block, the per-length 64
                B = block if key[2] is None else 64
                assert sw.B == B and np.array_equal(sw.e.bulk, sw.e.possible & (sw.e.cost >= B)), (res, key)
                assert sw.e.for_block(block) is cc._edges[key[0]]  # one set of tables, split per block
                assert sw.e.prob is cc._edges[key[0]].prob  # the probabilities (mass DPs) made once
            assert all(sw.B == 64 for sw in wide._sweeps.values())
            if cap == 5:
                _check_all(cc, sc, n_t=20)
    assert big  # some counts past 2**53


def test_a_cycle_of_steps_rounded_to_zero_cells_is_counted_length_by_length():
    """A step of probability close to 1 (p(a|a) ~ 0.995) rounds down to 0 cells in the upper DP: the
    cycle it makes raised ValueError from every certified query, at default settings too (QA); the
    DP now counts such a rounding length by length, and the brackets hold brute force."""
    import itertools
    import warnings

    from arenum.models import NGramModel

    m = NGramModel.fit(["a" * 200] * 5 + ["b"], order=2, smoothing="wb")
    for terminating in (True, False):
        e = m.enumerable(max_len=3, max_prefixes=1, terminating=terminating)
        if terminating:
            seqs = [tuple(p) + (m.eos,) for n in range(3) for p in itertools.product(range(m.vocab_size - 1), repeat=n)]
        else:
            seqs = list(itertools.product(range(m.vocab_size), repeat=3))
        scores = m.score_sequences(seqs)
        for t in sorted(set(scores.tolist()))[::2] + [-60.0, -1.0]:
            b = e.count_bracket(t)
            true = int((scores >= t).sum())
            assert b.lo <= true <= b.hi, (terminating, t, b, true)
            mb = e.mass_above(t)
            assert mb.lo <= float(np.exp(scores[scores >= t]).sum()) * (1 + 1e-12) and \
                mb.hi >= float(np.exp(scores[scores >= t]).sum()) * (1 - 1e-12)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # counted length by length: the warning states the cost
        c = m.enumerable().count(-60.0)
    d = c.as_dict()
    assert d["method"] == "certified" and not d["exact"] and 0 < d["ci_lo"] <= d["ci_hi"]
