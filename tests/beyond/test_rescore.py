"""RescoredIndex against brute force: small random draft/target model pairs with a known gap.

Every model here is enumerated completely (a few hundred sequences at most), so the target's true
ranking and the true max gap are known exactly; each test is seeded and replayable.
"""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from arenum.exact.quantize import Quantizer
from arenum.beyond.rescore import RescoredIndex, RescoreResult


# ----------------------------------------------------------------------------- brute-force fixtures

def _log_softmax(x: np.ndarray) -> np.ndarray:
    m = x.max()
    return x - (m + np.log(np.exp(x - m).sum()))


class TinyModel:
    """A random autoregressive model over tokens ``0..V-1``, logits a seeded function of the prefix.

    ``eps > 0`` adds a per-step perturbation (``eps * N(0, 1)`` per logit, renormalized): the target of
    a draft with the same ``seed``. ``eos`` set: support is the sequences ending in ``eos`` (nowhere
    earlier) of length ``<= max_len``; else every length-``max_len`` sequence.
    """

    def __init__(self, V: int, seed: int, max_len: int, *, eos: int | None = None, eps: float = 0.0,
                 scale: float = 2.0, zero: bool = False) -> None:
        self.V, self.seed, self.max_len, self.eos, self.eps, self.scale = V, seed, max_len, eos, eps, scale
        self.zero = zero  # the target forbids token 0 after token 1 (support mismatch)
        self._memo: dict[tuple, np.ndarray] = {}

    def step(self, prefix: tuple) -> np.ndarray:
        if prefix not in self._memo:
            self._memo[prefix] = self._step(prefix)
        return self._memo[prefix]

    def _step(self, prefix: tuple) -> np.ndarray:
        logits = self.scale * np.random.default_rng([self.seed, len(prefix), *prefix]).standard_normal(self.V)
        if self.eps:
            logits = logits + self.eps * np.random.default_rng(
                [self.seed, 7919, len(prefix), *prefix]).standard_normal(self.V)
        lp = _log_softmax(logits)
        if self.zero and prefix and prefix[-1] == 1:
            lp[0] = -math.inf
        return lp

    def score(self, seq: tuple) -> float:
        s = 0.0
        for t in range(len(seq)):
            s += float(self.step(seq[:t])[seq[t]])
        return s

    def support(self) -> list[tuple]:
        if self.eos is None:
            return list(itertools.product(range(self.V), repeat=self.max_len))
        body = [t for t in range(self.V) if t != self.eos]
        return [p + (self.eos,) for n in range(self.max_len) for p in itertools.product(body, repeat=n)]


class BruteIndex:
    """Every support sequence sorted by descending draft score (ties by sequence): ``exact_order``."""

    exact_order = True

    def __init__(self, model: TinyModel, with_slice: bool = False) -> None:
        pairs = [(s, model.score(s)) for s in model.support()]
        self.items = sorted(pairs, key=lambda p: (-p[1], p[0]))
        self.unrank_calls = 0
        self.slice_calls = 0
        if with_slice:
            self.slice = self._slice

    def unrank(self, i: int):
        self.unrank_calls += 1
        if not 0 <= i < len(self.items):
            raise IndexError(i)
        return self.items[i]

    def _slice(self, start: int, k: int):
        self.slice_calls += 1
        if start > len(self.items):
            raise IndexError(start)
        return self.items[start:start + k]


class BucketIndex(BruteIndex):
    """Ordered by fine bucket only: inside a bucket the order is shuffled. Declares a quantizer."""

    exact_order = False

    def __init__(self, model: TinyModel, quantizer: Quantizer, seed: int) -> None:
        super().__init__(model)
        self.quantizer = quantizer
        rng = np.random.default_rng(seed)
        keyed = [(quantizer.fine_bucket(lp), rng.random(), (s, lp)) for s, lp in self.items]
        self.items = [p for _, _, p in sorted(keyed, key=lambda x: (x[0], x[1]))]


class UnorderedIndex(BruteIndex):
    """Declares no order at all."""

    exact_order = False


class CountingTarget:
    """A target callable that records every batch it is sent."""

    def __init__(self, model: TinyModel) -> None:
        self.model = model
        self.batches: list[list[tuple]] = []

    def __call__(self, seqs):
        self.batches.append(list(seqs))
        return np.array([self.model.score(s) for s in seqs])  # (n,) float64


class ScorerObject:
    """A target exposing ``score_sequences`` like an AutoregressiveEnumerable."""

    def __init__(self, model: TinyModel) -> None:
        self.model = model
        self.calls = 0

    def score_sequences(self, seqs):
        self.calls += 1
        return [self.model.score(s) for s in seqs]


def make_pair(seed: int, *, eps: float = 0.6, V: int = 3, max_len: int = 4, eos: int | None = None):
    """Draft, target, their index, the target's true descending scores and the true max gap."""
    draft = TinyModel(V, seed, max_len, eos=eos)
    target = TinyModel(V, seed, max_len, eos=eos, eps=eps)
    index = BruteIndex(draft)
    t_scores = {s: target.score(s) for s, _ in index.items}
    true_sorted = sorted(t_scores.values(), reverse=True)
    true_gap = max(abs(t_scores[s] - d) for s, d in index.items)
    return draft, target, index, t_scores, true_sorted, true_gap


SEEDS = range(60)


# ----------------------------------------------------------------------------- soundness

@pytest.mark.parametrize("seed", SEEDS)
def test_certified_is_never_wrong(seed):
    rng = np.random.default_rng(1000 + seed)
    eos = 2 if seed % 2 else None
    _, target, index, t_scores, true_sorted, true_gap = make_pair(
        seed, eps=float(rng.uniform(0.1, 1.5)), eos=eos, max_len=4 if eos is None else 5)
    n = len(index.items)
    true_up = max(t_scores[s] - d for s, d in index.items)  # the half of the gap the proof uses
    for trial in range(8):
        g = max(true_up, 0.0) if trial >= 6 else true_gap * float(rng.choice([1.0, 1.0, 1.2, 2.0]))
        W = int(rng.integers(0, n // 2 + 1))
        k = int(rng.integers(0, 12))
        start = int(rng.integers(0, 8)) if trial % 2 else 0
        idx = RescoredIndex(index, CountingTarget(target), rerank_window=W, assumed_gap=g)
        res = idx.slice(start, k) if start else idx.top_k(k)
        assert all(lp == t_scores[s] for s, lp in res.items)  # target-exact scores, always
        scores = [lp for _, lp in res.items]
        assert scores == sorted(scores, reverse=True)
        if res.certified:
            assert scores == true_sorted[start:start + k]
        # the certificate's own inequality, restated
        bound = index.items[min(start + k + W, n) - 1][1] if start + k + W < n else -math.inf
        assert res.bound == bound
        if k and not res.exhausted:
            last = scores[-1] if len(scores) == k else -math.inf
            assert res.certified == (last >= bound + g)


@pytest.mark.parametrize("seed", range(20))
def test_large_window_equals_true_top_k(seed):
    _, target, index, t_scores, true_sorted, true_gap = make_pair(seed, eps=0.8)
    k = 10
    idx = RescoredIndex(index, CountingTarget(target), rerank_window=len(index.items), assumed_gap=true_gap)
    res = idx.top_k(k)
    assert [lp for _, lp in res.items] == true_sorted[:k]
    assert res.certified is True and res.exhausted is True and res.bound == -math.inf
    assert res.target_calls == 1 and res.scored == len(index.items)


@pytest.mark.parametrize("seed", range(10))
def test_without_assumed_gap_certificate_is_none(seed):
    _, target, index, t_scores, true_sorted, _ = make_pair(seed)
    res = RescoredIndex(index, CountingTarget(target), rerank_window=5).top_k(4)
    assert res.certified is None
    assert res["certified"] is None
    assert len(res.items) == 4


@pytest.mark.parametrize("seed", range(10))
def test_gap_diagnostic_is_max_over_pulled(seed):
    _, target, index, t_scores, _, _ = make_pair(seed, eps=1.0)
    W, k = 7, 5
    res = RescoredIndex(index, CountingTarget(target), rerank_window=W).top_k(k)
    pulled = index.items[:k + W]
    assert res.pulled == k + W
    assert res.gap == max(abs(t_scores[s] - d) for s, d in pulled)
    assert res.gap > 0


def test_broken_gap_assumption_is_not_certified():
    # assumed_gap = 0 but the target differs: a pulled sequence out-scores its draft score.
    _, target, index, t_scores, _, true_gap = make_pair(3, eps=1.0)
    res = RescoredIndex(index, CountingTarget(target), rerank_window=len(index.items),
                        assumed_gap=0.0).top_k(3)
    assert res.exhausted is True and res.gap == pytest.approx(true_gap)
    assert res.certified is False


def test_only_the_upper_half_of_the_gap_is_used():
    # The target is the draft shifted DOWN by 5 nats everywhere: |t - d| = 5, but t <= d + 0.
    _, _, index, _, _, _ = make_pair(4)
    d_of = dict(index.items)
    res = RescoredIndex(index, lambda seqs: [d_of[s] - 5.0 for s in seqs], rerank_window=len(index.items),
                        assumed_gap=0.0).top_k(5)
    assert res.gap == pytest.approx(5.0) and res.excess == pytest.approx(-5.0)
    assert res.exhausted and res.certified is True  # the pulled data do not refute t <= d + 0
    assert [s for s, _ in res.items] == [s for s, _ in index.items[:5]]
    # not exhausted: an unpulled u could still have t(u) = d(u) > d(x_5) - 5, so no certificate
    res = RescoredIndex(index, lambda seqs: [d_of[s] - 5.0 for s in seqs], rerank_window=3,
                        assumed_gap=0.0).top_k(5)
    assert res.certified is False
    # shifted UP by 0.5: the pulled sequences themselves refute assumed_gap=0.4
    res = RescoredIndex(index, lambda seqs: [d_of[s] + 0.5 for s in seqs], rerank_window=len(index.items),
                        assumed_gap=0.4).top_k(5)
    assert res.excess == pytest.approx(0.5) and res.exhausted and res.certified is False


def test_draft_impossible_target_possible_breaks_the_assumption():
    class WithImpossible(BruteIndex):
        def __init__(self, model):
            super().__init__(model)
            self.items = self.items + [((9, 9, 9, 9), -math.inf)]

    draft, target, _, t_scores, _, true_gap = make_pair(6)
    index = WithImpossible(draft)
    scores = dict(t_scores)
    scores[(9, 9, 9, 9)] = -1.0
    res = RescoredIndex(index, lambda seqs: [scores[s] for s in seqs], rerank_window=len(index.items),
                        assumed_gap=true_gap).top_k(len(index.items))
    assert res.support_mismatch == 1 and res.excess == math.inf and res.certified is False
    assert ((9, 9, 9, 9), -1.0) in res.items


def test_identical_models_certify_with_zero_gap():
    draft, _, index, _, _, _ = make_pair(5)
    idx = RescoredIndex(index, CountingTarget(draft), rerank_window=0, assumed_gap=0.0)
    res = idx.top_k(6)
    assert res.certified is True and res.gap == 0.0
    assert res.items == index.items[:6]


# ----------------------------------------------------------------------------- certify growth

@pytest.mark.parametrize("seed", range(25))
def test_certify_growth_reaches_certificate(seed):
    _, target, index, t_scores, true_sorted, true_gap = make_pair(seed, eps=0.5)
    tgt = CountingTarget(target)
    k = 5
    idx = RescoredIndex(index, tgt, rerank_window=2, assumed_gap=true_gap)
    res = idx.top_k(k, certify=True)
    assert res.certified is True
    assert [lp for _, lp in res.items] == true_sorted[:k]
    # one batched call per growth step, each scoring only newly pulled sequences
    assert res.target_calls == len(tgt.batches) == idx.target_calls
    sent = [s for b in tgt.batches for s in b]
    assert len(sent) == len(set(sent)) == res.scored == res.pulled == idx.target_sequences
    assert sent == [s for s, _ in index.items[:res.pulled]]
    assert len(tgt.batches[0]) == k + 2


@pytest.mark.parametrize("seed", range(25))
def test_certify_growth_slice(seed):
    _, target, index, t_scores, true_sorted, true_gap = make_pair(seed, eps=0.5)
    res = RescoredIndex(index, CountingTarget(target), rerank_window=0,
                        assumed_gap=true_gap).slice(4, 3, certify=True)
    assert res.certified is True
    assert [lp for _, lp in res.items] == true_sorted[4:7]


def test_certify_growth_doubles_the_extra_pull():
    _, target, index, _, _, true_gap = make_pair(11, eps=1.5, V=4, max_len=4)
    tgt = CountingTarget(target)
    res = RescoredIndex(index, tgt, rerank_window=3, assumed_gap=true_gap).top_k(4, certify=True)
    sizes = [len(b) for b in tgt.batches]
    assert len(sizes) >= 3
    expected, extra, pulled = [], 3, 0
    while pulled < res.pulled:
        nxt = min(4 + extra, len(index.items))
        expected.append(nxt - pulled)
        pulled, extra = nxt, 2 * extra
    assert sizes == expected


@pytest.mark.parametrize("seed", range(15))
def test_certify_respects_max_target(seed):
    _, target, index, _, _, true_gap = make_pair(seed, eps=1.2, V=4)
    for max_target in (5, 9, 20, 33):
        tgt = CountingTarget(target)
        res = RescoredIndex(index, tgt, rerank_window=1, assumed_gap=true_gap).top_k(
            5, certify=True, max_target=max_target)
        assert res.scored <= max_target
        assert sum(len(b) for b in tgt.batches) == res.scored
        if not res.certified:
            assert res.scored == max_target  # stopped because the budget ran out


def test_max_target_must_cover_k():
    _, target, index, _, _, true_gap = make_pair(1)
    idx = RescoredIndex(index, CountingTarget(target), assumed_gap=true_gap)
    with pytest.raises(ValueError, match="max_target=3 cannot cover"):
        idx.top_k(4, max_target=3)
    with pytest.raises(ValueError, match="max_target must be >= 0"):
        idx.top_k(4, max_target=-1)
    with pytest.raises(TypeError, match="max_target must be an integer"):
        idx.top_k(4, max_target=True)


def test_max_target_clips_plain_query():
    _, target, index, _, _, _ = make_pair(2)
    res = RescoredIndex(index, CountingTarget(target), rerank_window=50).top_k(3, max_target=10)
    assert res.scored == 10 and res.pulled == 10


def test_certify_needs_assumed_gap_and_order():
    _, target, index, _, _, _ = make_pair(1)
    with pytest.raises(ValueError, match="certify=True needs assumed_gap"):
        RescoredIndex(index, CountingTarget(target)).top_k(3, certify=True)
    with pytest.raises(ValueError, match="declares neither"):
        RescoredIndex(UnorderedIndex(TinyModel(3, 1, 3)), CountingTarget(target),
                      assumed_gap=1.0).slice(0, 3, certify=True)
    with pytest.raises(TypeError, match="certify must be a bool"):
        RescoredIndex(index, CountingTarget(target), assumed_gap=1.0).top_k(3, certify=1)


# ----------------------------------------------------------------------------- bound rules

@pytest.mark.parametrize("seed", range(30))
def test_quantizer_index_uses_bucket_edge(seed):
    rng = np.random.default_rng(seed)
    q = Quantizer(bin_width_bits=1.0, oversample=int(rng.choice([1, 2, 4])))
    draft = TinyModel(3, seed, 4)
    target = TinyModel(3, seed, 4, eps=0.4)
    index = BucketIndex(draft, q, seed)
    t_sorted = sorted((target.score(s) for s, _ in index.items), reverse=True)
    true_gap = max(abs(target.score(s) - d) for s, d in index.items)
    k, W = 4, int(rng.integers(0, 20))
    res = RescoredIndex(index, CountingTarget(target), rerank_window=W, assumed_gap=true_gap).top_k(k)
    last_lp = index.items[k + W - 1][1]
    hi = q.bucket_log_prob_bounds(q.fine_bucket(last_lp))[1]
    assert res.bound == pytest.approx(hi, rel=1e-12, abs=0) and res.bound >= hi >= last_lp
    # the bound really holds for every unpulled sequence, and the certificate is sound
    assert all(lp <= res.bound for _, lp in index.items[k + W:])
    if res.certified:
        assert [lp for _, lp in res.items] == t_sorted[:k]
    grown = RescoredIndex(index, CountingTarget(target), rerank_window=W,
                          assumed_gap=true_gap).top_k(k, certify=True)
    assert grown.certified is True and [lp for _, lp in grown.items] == t_sorted[:k]


def test_quantizer_bound_is_looser_than_last_score():
    # Within a bucket the order is arbitrary, so the last pulled score is NOT a valid bound.
    q = Quantizer(bin_width_bits=4.0, oversample=1)
    index = BucketIndex(TinyModel(3, 0, 4), q, 0)
    for n in range(1, len(index.items)):
        if max(lp for _, lp in index.items[n:]) > index.items[n - 1][1]:
            break
    else:
        pytest.fail("fixture has no intra-bucket inversion")
    res = RescoredIndex(index, CountingTarget(TinyModel(3, 0, 4)), rerank_window=n - 1,
                        assumed_gap=0.0).top_k(1)
    assert res.pulled == n
    assert res.bound > index.items[n - 1][1]
    assert all(lp <= res.bound for _, lp in index.items[n:])


def test_unordered_index_never_certifies():
    draft, target, _, _, _, true_gap = make_pair(4)
    index = UnorderedIndex(draft)
    res = RescoredIndex(index, CountingTarget(target), rerank_window=len(index.items),
                        assumed_gap=true_gap).top_k(3)
    assert res.exhausted is True and res.certified is False and res.bound is None
    res = RescoredIndex(index, CountingTarget(target)).top_k(3)
    assert res.certified is None and res.bound is None


class TruncatedIndex(BruteIndex):
    """Stops at a draft-score floor (like a depth-bits cap) and says so: ``truncated = True``."""

    def __init__(self, model: TinyModel, keep: int) -> None:
        super().__init__(model)
        self.full = list(self.items)
        self.items = self.items[:keep]
        self.truncated = True


@pytest.mark.parametrize("seed", range(20))
def test_truncated_index_is_not_complete(seed):
    draft = TinyModel(3, seed, 4)
    target = TinyModel(3, seed, 4, eps=0.5)
    index = TruncatedIndex(draft, keep=20)
    true_sorted = sorted((target.score(s) for s, _ in index.full), reverse=True)
    true_gap = max(abs(target.score(s) - d) for s, d in index.full)
    res = RescoredIndex(index, CountingTarget(target), rerank_window=100, assumed_gap=true_gap).top_k(5)
    assert res.exhausted is True and res.truncated is True and res.pulled == 20
    assert res.bound == index.items[-1][1]  # not -inf: sequences below the cap exist
    assert res.certified == ([lp for _, lp in res.items][-1] >= res.bound + true_gap)
    if res.certified:
        assert [lp for _, lp in res.items] == true_sorted[:5]


def test_dropped_sequences_forbid_certificate():
    draft, target, index, _, _, true_gap = make_pair(2)
    index.dropped_upper = 3  # a branch_cap skipped up to 3 sequences of unknown rank
    tgt = CountingTarget(target)
    res = RescoredIndex(index, tgt, rerank_window=len(index.items), assumed_gap=true_gap).top_k(3)
    assert res.exhausted and res.truncated and res.certified is False and res.bound == index.items[-1][1]
    res = RescoredIndex(index, tgt, rerank_window=2, assumed_gap=true_gap).top_k(3, certify=True)
    assert res.certified is False and res.target_calls == 1  # hopeless: no growth


def test_empty_draft_is_vacuously_complete():
    class Empty:
        exact_order = True

        def unrank(self, i):
            raise IndexError(i)

    calls = []
    res = RescoredIndex(Empty(), lambda s: calls.append(s) or [], assumed_gap=1.0).top_k(5)
    assert res.items == [] and res.exhausted is True and res.certified is True
    assert res.bound == -math.inf and res.scored == 0 and res.target_calls == 0 and calls == []
    res = RescoredIndex(Empty(), lambda s: []).slice(3, 2)
    assert res.items == [] and res.certified is None and res.exhausted is True


def test_k_zero():
    _, target, index, _, _, _ = make_pair(0)
    res = RescoredIndex(index, CountingTarget(target), rerank_window=0, assumed_gap=0.5).top_k(0)
    assert res.items == [] and res.certified is True and res.pulled == 0 and res.bound == math.inf


def test_exhausted_short_result():
    # fewer sequences than k: everything is returned, complete
    draft = TinyModel(2, 0, 2)
    target = TinyModel(2, 0, 2, eps=0.5)
    index = BruteIndex(draft)
    res = RescoredIndex(index, CountingTarget(target), rerank_window=0, assumed_gap=0.0 + 10).top_k(10)
    assert len(res.items) == 4 and res.exhausted and res.certified is True


def test_target_impossible_sequences_are_dropped():
    draft = TinyModel(3, 8, 3)
    target = TinyModel(3, 8, 3, eps=0.3, zero=True)
    index = BruteIndex(draft)
    t = {s: target.score(s) for s, _ in index.items}
    finite = sorted((v for v in t.values() if v > -math.inf), reverse=True)
    res = RescoredIndex(index, CountingTarget(target), rerank_window=len(index.items)).top_k(len(index.items))
    assert [lp for _, lp in res.items] == finite
    assert res.support_mismatch == sum(v == -math.inf for v in t.values()) > 0
    assert res.gap == max(abs(t[s] - d) for s, d in index.items if t[s] > -math.inf)


# ----------------------------------------------------------------------------- mechanics

def test_result_reads_as_dict_and_attributes():
    _, target, index, _, _, _ = make_pair(0)
    res = RescoredIndex(index, CountingTarget(target), rerank_window=3, assumed_gap=1.0).top_k(2)
    assert isinstance(res, RescoreResult)
    assert res["items"] is res.items and res["gap"] == res.gap and res["certified"] is res.certified
    d = dict(res)
    assert set(d) >= {"items", "certified", "gap", "bound", "scored", "exhausted", "target_calls"}
    assert "items" in res and res.get("nope") is None
    with pytest.raises(KeyError):
        res["nope"]


def test_slice_method_of_draft_is_used():
    _, target, index, _, _, true_gap = make_pair(6)
    sliced = BruteIndex(TinyModel(3, 6, 4), with_slice=True)
    a = RescoredIndex(index, CountingTarget(target), rerank_window=4, assumed_gap=true_gap).slice(2, 5)
    b = RescoredIndex(sliced, CountingTarget(target), rerank_window=4, assumed_gap=true_gap).slice(2, 5)
    assert a.items == b.items and a.certified == b.certified and a.bound == b.bound
    assert sliced.slice_calls == 1 and sliced.unrank_calls == 0
    # past the end: short list / IndexError means exhausted
    c = RescoredIndex(sliced, CountingTarget(target), rerank_window=1000).top_k(3)
    assert c.exhausted and c.pulled == len(sliced.items)


def test_target_object_score_sequences_is_used():
    _, target, index, t_scores, _, _ = make_pair(7)
    obj = ScorerObject(target)
    idx = RescoredIndex(index, obj, rerank_window=6)
    res = idx.top_k(3)
    assert obj.calls == 1 and res.target_calls == 1
    assert all(lp == t_scores[s] for s, lp in res.items)


def test_cache_and_counters():
    _, target, index, _, _, _ = make_pair(9)
    tgt = CountingTarget(target)
    idx = RescoredIndex(index, tgt, rerank_window=4)
    r1 = idx.top_k(5)
    r2 = idx.top_k(5)
    assert r1.items == r2.items and r2.scored == 0 and r2.target_calls == 0
    r3 = idx.slice(5, 5)  # pages on: only the 5 new sequences are scored
    assert r3.scored == 5 and idx.target_calls == 2 and idx.target_sequences == 14
    assert len(tgt.batches) == 2


def test_unrank_uses_draft_rank_and_target_score():
    _, target, index, t_scores, _, _ = make_pair(10)
    tgt = CountingTarget(target)
    idx = RescoredIndex(index, tgt, rerank_window=0)
    for i in (0, 3, len(index.items) - 1):
        seq, lp = idx.unrank(i)
        assert seq == index.items[i][0] and lp == t_scores[seq]
    assert idx.target_calls == 3
    idx.top_k(2)
    idx.unrank(1)  # cached by the head
    assert idx.target_calls == 4
    out = idx.unrank_many([5, 0, 6, 1.0])
    assert [s for s, _ in out] == [index.items[i][0] for i in (5, 0, 6, 1)]
    assert idx.target_calls == 5 and len(tgt.batches[-1]) == 2
    with pytest.raises(IndexError):
        idx.unrank(len(index.items))
    with pytest.raises(IndexError, match="must be >= 0"):
        idx.unrank(-1)
    with pytest.raises(TypeError, match="bool"):
        idx.unrank(True)
    with pytest.raises(ValueError, match="exact integer"):
        idx.unrank(1.5)


# ----------------------------------------------------------------------------- validation

@pytest.fixture
def idx():
    _, target, index, _, _, _ = make_pair(0)
    return RescoredIndex(index, CountingTarget(target), rerank_window=2, assumed_gap=1.0)


def test_validation_k_and_start(idx):
    with pytest.raises(TypeError, match="k must be an integer, got bool"):
        idx.top_k(True)
    with pytest.raises(ValueError, match="k must be an exact integer, got 2.5"):
        idx.top_k(2.5)
    with pytest.raises(ValueError, match="k must be >= 0"):
        idx.top_k(-1)
    with pytest.raises(TypeError, match="k must be an integer"):
        idx.top_k("3")
    assert len(idx.top_k(2.0).items) == 2
    with pytest.raises(TypeError, match="start must be an integer, got bool"):
        idx.slice(False, 2)
    with pytest.raises(ValueError, match="start must be an exact integer"):
        idx.slice(0.5, 2)
    with pytest.raises(ValueError, match="start must be >= 0"):
        idx.slice(-2, 2)
    with pytest.raises(ValueError, match="k must be >= 0"):
        idx.slice(0, -2)
    assert idx.slice(1.0, 2.0).items == idx.top_k(3).items[1:3]


def test_validation_constructor():
    _, target, index, _, _, _ = make_pair(0)
    tgt = CountingTarget(target)
    with pytest.raises(TypeError, match="rerank_window must be an integer, got bool"):
        RescoredIndex(index, tgt, rerank_window=True)
    with pytest.raises(ValueError, match="rerank_window must be an exact integer"):
        RescoredIndex(index, tgt, rerank_window=2.5)
    with pytest.raises(ValueError, match="rerank_window must be >= 0"):
        RescoredIndex(index, tgt, rerank_window=-1)
    assert RescoredIndex(index, tgt, rerank_window=2.0).rerank_window == 2
    for bad in (math.nan, math.inf, -math.inf):
        with pytest.raises(ValueError, match="assumed_gap must be finite"):
            RescoredIndex(index, tgt, assumed_gap=bad)
    with pytest.raises(ValueError, match="assumed_gap must be >= 0"):
        RescoredIndex(index, tgt, assumed_gap=-0.1)
    with pytest.raises(TypeError, match="assumed_gap must be a real number"):
        RescoredIndex(index, tgt, assumed_gap="1")
    with pytest.raises(TypeError, match="assumed_gap must be a real number"):
        RescoredIndex(index, tgt, assumed_gap=True)
    with pytest.raises(TypeError, match="draft_index must have an unrank"):
        RescoredIndex(object(), tgt)
    with pytest.raises(TypeError, match="target must have score_sequences"):
        RescoredIndex(index, 42)


@pytest.mark.parametrize("bad, msg", [
    (lambda seqs: [0.0] * (len(seqs) - 1), "expected exactly one per sequence"),
    (lambda seqs: [0.0] * (len(seqs) + 1), "expected exactly one per sequence"),
    (lambda seqs: np.zeros((len(seqs), 1)), "expected exactly one per sequence"),
    (lambda seqs: 0.0, "expected exactly one per sequence"),
    (lambda seqs: [math.nan] * len(seqs), "scores must be real log-probs"),
    (lambda seqs: [math.inf] * len(seqs), "scores must be real log-probs"),
    (lambda seqs: ["x"] * len(seqs), "one real score per sequence"),
])
def test_target_cardinality_and_values_validated(bad, msg):
    _, _, index, _, _, _ = make_pair(0)
    idx = RescoredIndex(index, bad, rerank_window=2)
    with pytest.raises(ValueError, match=msg):
        idx.top_k(3)
    # a failed query leaves the index consistent: nothing was cached as scored
    assert idx._tlp == [] and len(idx._seqs) == 5


def test_failed_target_then_success():
    _, target, index, t_scores, _, _ = make_pair(0)
    state = {"fail": True}

    def flaky(seqs):
        if state["fail"]:
            state["fail"] = False
            raise RuntimeError("device busy")
        return [t_scores[s] for s in seqs]

    idx = RescoredIndex(index, flaky, rerank_window=2)
    with pytest.raises(RuntimeError):
        idx.top_k(3)
    res = idx.top_k(3)
    assert all(lp == t_scores[s] for s, lp in res.items) and res.pulled == 5


def test_draft_entries_validated():
    class BadDraft:
        exact_order = True

        def __init__(self, item):
            self.item = item

        def unrank(self, i):
            return self.item

    with pytest.raises(ValueError, match="must be a \\(sequence, log_prob\\) pair"):
        RescoredIndex(BadDraft((1, 2, 3)), lambda s: [0.0] * len(s)).top_k(1)
    with pytest.raises(ValueError, match="must be a real log-prob"):
        RescoredIndex(BadDraft(((1,), math.nan)), lambda s: [0.0] * len(s)).top_k(1)


# ----------------------------------------------------------------------------- n-gram draft and target

CORPUS = "the cat sat on the mat the cat ate the rat".split()
NGRAM_MAX_LEN = 5  # tokens, eos included: 1 + 10 + ... + 10**4 = 11111 sequences over 10 letters


@pytest.fixture(scope="module")
def ngrams():
    import arenum.models.ngram as ngram
    draft = ngram.NGramModel.fit(CORPUS, order=2)
    target = ngram.NGramModel.fit(CORPUS, order=4)
    assert draft.vocab == target.vocab
    body = [t for t in range(draft.vocab_size) if t != draft.eos]
    support = [p + (draft.eos,) for n in range(NGRAM_MAX_LEN) for p in itertools.product(body, repeat=n)]
    d = draft.score_sequences(support)  # (N,) float64
    t = target.score_sequences(support)  # (N,) float64
    true_gap = float(np.max(np.abs(t - d)))
    return draft, target, support, d, t, true_gap


class ArrayIndex:
    """Brute-force draft index over given support and scores, exact descending order, with ``slice``."""

    exact_order = True

    def __init__(self, support, scores):
        order = sorted(range(len(support)), key=lambda i: (-scores[i], support[i]))
        self.items = [(support[i], float(scores[i])) for i in order]

    def unrank(self, i):
        if not 0 <= i < len(self.items):
            raise IndexError(i)
        return self.items[i]

    def slice(self, start, k):
        return self.items[start:start + k]


@pytest.mark.parametrize("k", [1, 10, 40])
def test_ngram_order2_draft_order4_target(ngrams, k):
    draft, target, support, d, t, true_gap = ngrams
    true_sorted = sorted(t.tolist(), reverse=True)
    index = ArrayIndex(support, d)
    idx = RescoredIndex(index, target, rerank_window=16, assumed_gap=true_gap)
    plain = idx.top_k(k)
    assert plain.target_calls == 1 and plain.scored == k + 16
    t_of = dict(zip(support, t.tolist()))
    assert all(lp == t_of[s] for s, lp in plain.items)
    if plain.certified:
        assert [lp for _, lp in plain.items] == true_sorted[:k]
    grown = idx.top_k(k, certify=True)
    assert grown.certified is True
    assert [lp for _, lp in grown.items] == true_sorted[:k]
    assert grown.scored < len(support)  # the certificate came before exhausting the draft
    assert idx.target_sequences == grown.pulled  # the growth re-scored nothing


def _core():
    try:
        from arenum import AutoregressiveEnumerable  # noqa: F401
    except ImportError:
        raise AssertionError("arenum.AutoregressiveEnumerable is missing") from None


def _pairs(items):
    return [(tuple(s), float(lp)) for s, lp in items]


@pytest.mark.parametrize("k", [1, 10, 40])
def test_ngram_seek_index_draft_matches_exact_target_top_k(ngrams, k):
    _core()
    draft, target, support, d, t, true_gap = ngrams
    draft_index = draft.enumerable(max_len=NGRAM_MAX_LEN).seek_index()
    assert draft_index.exact_order is True
    target_enum = target.enumerable(max_len=NGRAM_MAX_LEN)
    exact = _pairs(target_enum.top_k(k))
    assert [lp for _, lp in exact] == pytest.approx(sorted(t.tolist(), reverse=True)[:k], rel=0, abs=1e-12)

    idx = RescoredIndex(draft_index, target_enum, rerank_window=16, assumed_gap=true_gap)
    res = idx.top_k(k, certify=True)
    assert res.certified is True
    assert [lp for _, lp in res.items] == pytest.approx([lp for _, lp in exact], rel=0, abs=1e-12)
    assert res.target_calls == idx.target_calls and res.scored == idx.target_sequences < len(support)
    # draft-rank random access scored by the target
    seq, lp = idx.unrank(3)
    assert seq == tuple(draft_index.unrank(3)[0])
    assert lp == pytest.approx(float(target.score_sequences([seq])[0]), abs=1e-12)
    # no gap assumed: a window covering the whole support reproduces the exact top-k, uncertified
    wide = RescoredIndex(draft_index, target_enum, rerank_window=len(support)).top_k(k)
    assert wide.certified is None and wide.exhausted
    assert [lp for _, lp in wide.items] == pytest.approx([lp for _, lp in exact], rel=0, abs=1e-12)


def test_ngram_seek_index_slice_certified(ngrams):
    _core()
    draft, target, support, d, t, true_gap = ngrams
    draft_index = draft.enumerable(max_len=NGRAM_MAX_LEN).seek_index()
    idx = RescoredIndex(draft_index, target.enumerable(max_len=NGRAM_MAX_LEN), rerank_window=8,
                        assumed_gap=true_gap)
    res = idx.slice(20, 10, certify=True)
    assert res.certified is True
    assert [lp for _, lp in res.items] == pytest.approx(sorted(t.tolist(), reverse=True)[20:30], abs=1e-12)


# ----------------------------------------------------------------------------- what the QA found (one fix each)

def test_no_sequence_is_scored_twice_and_none_is_listed_twice():
    """unrank of a rank, twice, and unrank_many with a rank repeated scored the sequence again, and a
    later top_k again (QA: 10 scorings for 6 sequences); a draft giving one sequence at several ranks
    (an estimated order, as an envelope index) had it listed twice and sent twice in one call."""
    _, target, index, t_scores, _, _ = make_pair(11)
    tgt = CountingTarget(target)
    idx = RescoredIndex(index, tgt, rerank_window=0)
    idx.unrank(3), idx.unrank(3), idx.unrank_many([5, 5]), idx.top_k(6)
    sent = [s for b in tgt.batches for s in b]
    assert len(sent) == len(set(sent)) == idx.target_sequences == 6

    class Repeating:  # no declared order: an estimate, never certified
        def __init__(self, items):
            self.items = items

        def unrank(self, i):
            return self.items[i]

    items = index.items[:4]
    rep = Repeating([items[0], items[1], items[1], items[2], items[0], items[3]])
    tgt = CountingTarget(target)
    res = RescoredIndex(rep, tgt, rerank_window=2).top_k(4)
    assert len({s for s, _ in res.items}) == len(res.items) == 4
    assert [len(b) for b in tgt.batches] == [4] and res.scored == 4
    assert all(lp == t_scores[s] for s, lp in res.items)


def test_a_draft_index_cap_keeps_the_answer():
    """A draft index refusing to go deeper (BudgetExceeded, its max_sequences) while certify grows the
    window, or under a window past it, raised and lost the target calls paid (QA): the query answers
    from the head pulled, not certified past it; only start + k past the cap raises."""
    from arenum import AutoregressiveEnumerable, BudgetExceeded
    from arenum.testing import RandomModel

    draft = AutoregressiveEnumerable(RandomModel(3, seed=3), max_len=5, max_sequences=40)
    target = AutoregressiveEnumerable(RandomModel(3, seed=3, peak=1.3), max_len=5)
    r = RescoredIndex(draft.seek_index(), target, rerank_window=8, assumed_gap=2.0).top_k(5, certify=True)
    assert r.certified is False and r.pulled == 40 and len(r.items) == 5
    idx = RescoredIndex(draft.seek_index(), target, rerank_window=40)
    r = idx.top_k(5)
    assert r.pulled == 40 and [lp for _, lp in r.items] == sorted(target.score_sequences(
        [s for s, _ in draft.slice(0, 40)]).tolist(), reverse=True)[:5]
    with pytest.raises(BudgetExceeded, match="cannot give ranks up to 45"):
        idx.slice(40, 5)


def test_threads_share_an_index_and_failed_calls_are_not_counted():
    """Two threads on one index attached scores to the wrong sequences (QA); a target call that failed
    was counted in target_calls and target_sequences; dict(r) and list(r) read the fields."""
    import threading
    import time

    _, target, index, t_scores, _, _ = make_pair(12)

    def slow(seqs):
        time.sleep(0.01)
        return [t_scores[s] for s in seqs]

    idx = RescoredIndex(index, slow, rerank_window=3)
    ths = [threading.Thread(target=idx.slice, args=(j * 4, 4)) for j in range(6)]
    [t.start() for t in ths]
    [t.join() for t in ths]
    assert all(lp == t_scores[s] for s, lp in idx.top_k(30).items)
    state = {"n": 0}

    def flaky(seqs):
        state["n"] += 1
        if state["n"] <= 2:
            raise RuntimeError("busy")
        return [t_scores[s] for s in seqs]

    idx = RescoredIndex(index, flaky, rerank_window=2)
    for _ in range(2):
        with pytest.raises(RuntimeError):
            idx.top_k(3)
    r = idx.top_k(3)
    assert idx.target_calls == 1 and idx.target_sequences == r.scored == 5
    assert list(r) == r.keys() and dict(r)["items"] == r.items and len(r) == len(r.keys())


def test_a_target_support_the_draft_cannot_reach_is_refused():
    """A draft and a target enumerating other supports (another length, fixed length against eos,
    another eos, a longer cap for the target) answered an empty head labelled certified (QA): refused
    in one line; a draft reaching further than the target is allowed."""
    from arenum import AutoregressiveEnumerable
    from arenum.testing import RandomModel

    def enum(eos=None, max_len=3):
        return AutoregressiveEnumerable(RandomModel(3, seed=1, eos=eos), max_len=max_len, eos=eos)

    for d, t, why in [(enum(), enum(max_len=2), "fixed length 3, the target's fixed length 2"),
                      (enum(), enum(eos=2), "fixed length 3, the target's eos=2"),
                      (enum(eos=2), enum(eos=2, max_len=4), "reach 4 tokens, the draft's 3")]:
        with pytest.raises(ValueError, match="other supports: .*" + why) as e:
            RescoredIndex(d.seek_index(), t, assumed_gap=1.0)
        assert "\n" not in str(e.value)
    r = RescoredIndex(enum(eos=2, max_len=4).seek_index(), enum(eos=2), assumed_gap=5.0).top_k(3, certify=True)
    assert [lp for _, lp in r.items] == [lp for _, lp in enum(eos=2).top_k(3)]
