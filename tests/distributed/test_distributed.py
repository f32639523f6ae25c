"""Distributed enumeration (``arenum.distributed``): the same answers as one process, for 1-3 workers.

In-process workers (``backend="local"``) check every query on brute-forceable models; a local Ray
instance (one per test session, see ``conftest.py``) checks the actors themselves: the n-gram and a
tiny random transformer, a worker killed mid-build, a worker that cannot load its model, a foreign
model refused by the store.
"""
from __future__ import annotations

import dataclasses
import math
import os
import signal
import threading
import time

import numpy as np
import pytest

from arenum import AutoregressiveEnumerable
from arenum import StoreError, WorkerError
from arenum.distributed import DistributedEnumerable, ModelSpec, ShardPlan, plan_shards
from arenum.exact import PROBES
from arenum.testing import EnumerableFactory, RandomModel, brute_force

CASES = [
    # (vocab, length, terminating, peak, ties, form)
    (3, 4, False, 0.3, False, "dense"),
    (2, 5, False, 1.0, False, "pairs"),
    (8, 3, False, 1.0, True, "pairs"),
    (4, 5, True, 1.0, False, "pairs"),
    (3, 5, True, 0.0, False, "dense"),  # flat: massive exact ties
    (6, 4, True, 2.0, True, "arrays"),
    (2, 4, False, 0.0, False, "pairs"),  # uniform: everything ties
    (5, 4, True, 4.0, False, "dense"),  # peaked: one first token holds most of the mass
    (7, 1, False, 1.0, False, "pairs"),  # one level: no cut, worker 0 holds everything
]


def _factory(case, seed=0):
    V, L, term, peak, ties, form = case
    return EnumerableFactory(V, seed=seed + V * 31 + L, peak=peak, ties=ties, eos=0 if term else None,
                             eos_boost=2.0, form=form, options={"max_len": L})


def _brute(fac, case):
    V, L, term, *_ = case
    m = fac.make_model()
    return brute_force(m.table, fixed_len=None if term else L, eos=m.eos, cap=L)


def _fields(r):
    """A result as comparable plain values (type, value and every annotation)."""
    if dataclasses.is_dataclass(r):
        return type(r).__name__, dataclasses.asdict(r)
    extra = {k: getattr(r, k) for k in ("exact", "method", "ci_lo", "ci_hi") if hasattr(r, k)}
    return type(r).__name__, r, extra


def _same_answers(one, dist, bf, rng):
    n = len(bf)
    assert dist.slice(0, n + 3) == one.slice(0, n + 3) == bf
    for i in sorted(set(rng.integers(0, n, size=min(n, 25)).tolist()) | {0, n - 1}):
        assert dist.unrank(i) == one.unrank(i) == bf[i]
        assert _fields(dist.seek(i)) == _fields(one.seek(i))
    with pytest.raises(IndexError):
        dist.unrank(n)
    for a in (0, n // 3, n - 2):
        assert dist.slice(a, 5) == bf[a:a + 5]
    for k in sorted({1, 2, n // 2, n}):
        assert _fields(dist.threshold(k)) == _fields(one.threshold(k))
    assert dist.top_k(7) == one.top_k(7)
    for seq, s in bf[:: max(1, n // 15)] + [bf[-1]]:
        assert dist.log_density(seq) == s
        assert _fields(dist.rank(seq)) == _fields(one.rank(seq))
        assert _fields(dist.count(s)) == _fields(one.count(s))
        assert _fields(dist.count_bracket(s)) == _fields(one.count_bracket(s))
        assert _fields(dist.mass_above(s)) == _fields(one.mass_above(s))
    for t in (0.0, -1e-9, -math.inf):
        assert _fields(dist.count(t)) == _fields(one.count(t))
        assert _fields(dist.mass_above(t)) == _fields(one.mass_above(t))
    for p in (1e-6, 0.1, 0.5, 0.9, 0.999, 1.0):
        assert _fields(dist.nucleus_size(p)) == _fields(one.nucleus_size(p)), p
        assert _fields(dist.seek_mass(p)) == _fields(one.seek_mass(p)), p
    dist._check()


@pytest.mark.parametrize("workers", [1, 2, 3])
@pytest.mark.parametrize("case", CASES, ids=lambda c: "V%d-L%d-%s-p%s%s-%s" % (
    c[0], c[1], "term" if c[2] else "fix", c[3], "-ties" if c[4] else "", c[5]))
def test_every_answer_is_the_single_process_answer(case, workers):
    fac = _factory(case)
    bf = _brute(fac, case)
    one = fac()
    with DistributedEnumerable(fac, workers, backend="local") as dist:
        _same_answers(one, dist, bf, np.random.default_rng(workers))
        st = dist.stats
        assert st["workers"] == workers and len(st["workers_forwards"]) == workers
        assert sum(st["workers_forwards"]) == st["forwards"]


@pytest.mark.parametrize("order", ["shallow-first", "deep-first"])
def test_deepening_queries_in_any_order_stay_exact(order):
    case = (6, 5, True, 1.5, False, "dense")
    fac = _factory(case, seed=5)
    bf = _brute(fac, case)
    one = fac()
    ks = [3, 40, 400, len(bf)]
    if order == "deep-first":
        ks = ks[::-1]
    with DistributedEnumerable(fac, 3, backend="local") as dist:
        for k in ks:
            assert dist.threshold(k) == one.threshold(k) == bf[k - 1][1]
            assert dist.unrank(k - 1) == bf[k - 1]
            dist._check()


def test_the_plan_balances_a_peaked_model_by_splitting_its_heavy_first_token():
    case = (5, 4, True, 6.0, False, "dense")
    fac = _factory(case, seed=1)
    ar = fac()
    root_ids, root_lps = ar.oracle.table(())
    assert math.exp(float(np.max(root_lps))) > 0.7  # one first token holds most of the mass

    def table(p):
        ids, lps = ar.oracle.table(p)
        order = np.argsort(-lps, kind="stable")
        return list(ar.oracle.tokens(ids[order])), lps[order]

    plan = plan_shards(2, table, eos=0, leaf_level=ar.support.leaf_level)
    assert max(len(u) for u in plan.units) >= 2  # the heavy first token was split
    eos_root = math.exp(float(root_lps[list(ar.oracle.tokens(root_ids)).index(0)]))
    assert max(plan.mass) / sum(plan.mass) <= 0.5 + 1 / (4 * 2) + eos_root
    # ownership is a partition: every support sequence has exactly one owner
    bf = _brute(fac, case)
    owners = [plan.owner(s) for s, _ in bf]
    assert all(o in (0, 1) for o in owners)
    assert ShardPlan.from_json(plan.to_json()).digest() == plan.digest()


def test_bad_arguments_are_refused():
    fac = _factory(CASES[0])
    with pytest.raises(TypeError, match="model must be"):
        DistributedEnumerable(42, 2, backend="local")
    with pytest.raises(ValueError, match="backend"):
        DistributedEnumerable(fac, 2, backend="threads")
    with pytest.raises(ValueError, match="workers"):
        DistributedEnumerable(fac, 0, backend="local")
    with DistributedEnumerable(fac, 2, backend="local") as dist:
        with pytest.raises(NotImplementedError):
            dist.envelope_index()
        with pytest.raises(NotImplementedError):
            dist.sampler()
        with pytest.raises(IndexError):
            dist.unrank(10**6)
        with pytest.raises(ValueError):
            dist.rank((9, 9, 9, 9))  # a token outside the model: probability 0
        assert dist.log_density((9, 9, 9, 9)) == -math.inf
    capped = EnumerableFactory(3, seed=1, options={"max_len": 3, "branch_cap": 2})
    with pytest.raises(ValueError, match="branch_cap"):
        DistributedEnumerable(capped, 2, backend="local")


def test_a_store_reopens_without_forwards_and_refuses_another_model(tmp_path):
    case = (6, 4, True, 1.0, False, "dense")
    fac = _factory(case)
    bf = _brute(fac, case)
    with DistributedEnumerable(fac, 2, backend="local", store=tmp_path / "s") as dist:
        assert dist.slice(0, len(bf)) == bf
    with DistributedEnumerable(fac, 2, backend="local", store=tmp_path / "s") as dist:
        assert dist.slice(0, len(bf)) == bf
        # the root table of each worker's fingerprint, and the probes (no fingerprint= was given)
        assert dist.stats["forwards"] <= 2 * (1 + PROBES + PROBES * 4)
    with pytest.raises(StoreError, match="workers"):
        DistributedEnumerable(fac, 3, backend="local", store=tmp_path / "s")
    other = _factory(case, seed=99)
    with pytest.raises(StoreError):
        DistributedEnumerable(other, 2, backend="local", store=tmp_path / "s")


def test_a_cluster_store_opened_by_one_process_is_refused_in_one_line(tmp_path):
    """A two-worker store folder given to a single-process enumerable (the Python API, as the CLI
    without --workers) is refused, naming workers=2; nothing is built inside it."""
    case = (6, 4, True, 1.0, False, "dense")
    fac = _factory(case)
    with DistributedEnumerable(fac, 2, backend="local", store=tmp_path / "s") as dist:
        dist.slice(0, 10)
    before = sorted(os.listdir(tmp_path / "s"))
    for readonly in (False, True):
        with pytest.raises(StoreError) as err:
            AutoregressiveEnumerable(fac.make_model(), eos=0, max_len=4, store=tmp_path / "s",
                                     store_readonly=readonly)
        msg = str(err.value)
        assert "2-worker cluster" in msg and "workers=2" in msg and "\n" not in msg
    assert sorted(os.listdir(tmp_path / "s")) == before  # no manifest, no lock, no journal at the root
    # a worker's own folder holds its part only: refused too, naming its parent and workers=2
    for readonly in (False, True):  # (before: "another model (ngram:02177df8b2 != ngram:02177df8b2)")
        with pytest.raises(StoreError, match="worker 1's part of a 2-worker .* parent folder with workers=2$") as err:
            AutoregressiveEnumerable(fac.make_model(), eos=0, max_len=4, store=tmp_path / "s" / "worker-1",
                                     store_readonly=readonly)
        assert "another model" not in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(StoreError, match="another model .*parent folder with workers=2$"):  # and by another model
        AutoregressiveEnumerable(_factory(case, seed=9).make_model(), eos=0, max_len=4,
                                 store=tmp_path / "s" / "worker-0", store_readonly=True)


def test_an_error_closing_the_workers_does_not_hide_the_one_that_left_the_block(monkeypatch):
    from arenum.distributed import backend

    fac = _factory(CASES[0])

    def failing_close(self, cut_tables=True):
        raise RuntimeError("worker 1 could not start")

    with pytest.raises(KeyError) as e:
        with DistributedEnumerable(fac, 2, backend="local") as dist:
            monkeypatch.setattr(backend.LocalBackend, "close", failing_close)
            dist.count(-2.0)
            raise KeyError("the block's own error")
    assert "could not start" in " ".join(getattr(e.value, "__notes__", []))
    monkeypatch.undo()
    with pytest.raises(RuntimeError, match="could not start"):  # alone, it is raised
        with DistributedEnumerable(fac, 2, backend="local"):
            monkeypatch.setattr(backend.LocalBackend, "close", failing_close)


def test_with_closes_the_workers_stores_keeping_their_tables_when_its_block_raised(tmp_path, store_closes):
    """An interrupted build (a ``with`` block that raised, the command line's Ctrl-C) keeps every
    table in each worker's store, as one process does: resumed, it scores no saved prefix again (a
    finished build may cut an n-gram's tables to the budget built)."""
    seen = store_closes
    fac = _factory(CASES[3])
    with DistributedEnumerable(fac, 2, backend="local", store=tmp_path / "a") as dist:
        dist.count(-4.0)
    assert seen == [True, True]
    with pytest.raises(KeyboardInterrupt):
        with DistributedEnumerable(fac, 2, backend="local", store=tmp_path / "b") as dist:
            dist.count(-4.0)
            raise KeyboardInterrupt
    assert seen[2:] == [False, False]
    dist = DistributedEnumerable(fac, 2, backend="local", store=tmp_path / "c")
    dist.count(-4.0)
    dist.close(cut_tables=False)
    assert seen[4:] == [False, False]
    with DistributedEnumerable(fac, 2, backend="local", store=tmp_path / "b") as again:  # resumed: nothing built again
        assert again.count(-4.0) == AutoregressiveEnumerable(fac.make_model(), eos=0, max_len=5).count(-4.0)
        assert again.stats["rounds"] == 0 and again.stats["refetches"] == 0 and min(again.stats["workers_restored"]) > 0


def test_a_damaged_cluster_file_or_a_one_process_store_is_refused_in_one_line(tmp_path):
    """``cluster.json`` damaged (workers 1 on a 2-worker plan opened 1 worker and listed 21 of 40
    sequences; others raised TypeError, KeyError, IndexError, a bare JSONDecodeError) and a
    single-process store given to the workers (it was rebuilt beside, as a cluster's) are refused."""
    import json

    fac = _factory(CASES[3])
    with DistributedEnumerable(fac, 2, backend="local", store=tmp_path / "s") as dist:
        want = dist.slice(0, 10**6)
    path = tmp_path / "s" / "cluster.json"
    orig = json.loads(path.read_text())
    for bad in ({**orig, "workers": 1}, {**orig, "workers": True}, [1, 2], {**orig, "plan": "{}"},
                {**orig, "plan": "not json"}, {**orig, "workers": 0}, {**orig, "workers": 3}, {"plan": orig["plan"]}):
        path.write_text(json.dumps(bad))
        with pytest.raises(StoreError, match="not a readable cluster file") as e:
            DistributedEnumerable(fac, None, backend="local", store=tmp_path / "s")
        assert "\n" not in str(e.value)
    path.write_text(json.dumps(orig))
    with DistributedEnumerable(fac, None, backend="local", store=tmp_path / "s") as dist:
        assert dist.slice(0, 10**6) == want and dist.stats["rounds"] == 0
    one = AutoregressiveEnumerable(fac.make_model(), eos=0, max_len=5, store=tmp_path / "one")
    one.count(-3.0)
    one.close()
    before = sorted(os.listdir(tmp_path / "one"))
    with pytest.raises(StoreError, match="single-process store") as e:
        DistributedEnumerable(fac, 2, backend="local", store=tmp_path / "one")
    assert "\n" not in str(e.value) and sorted(os.listdir(tmp_path / "one")) == before


@pytest.mark.parametrize("workers", [2, 3, 4])
def test_the_workers_score_no_prefix_the_plan_scored(workers):
    """The plan's interior tables travel with it: with a fingerprint given, a build across workers
    scores each prefix once, the single process's forwards (the interior prefixes were scored by
    the plan and again by every worker below them: 75 forwards where one process pays 31)."""
    import collections

    calls: collections.Counter = collections.Counter()

    def fac():
        m = RandomModel(3, seed=5, peak=0.5, eos=0, eos_boost=1.5)

        def f(p):
            calls[tuple(p)] += 1
            return m(p)
        return AutoregressiveEnumerable(f, max_len=5, eos=0)

    one = fac()
    want = one.slice(0, 200)
    n_one = sum(calls.values())
    calls.clear()
    with DistributedEnumerable(fac, workers, backend="local", fingerprint="x") as dist:
        assert dist.plan.tables and dist.slice(0, 200) == want
        assert max(calls.values()) == 1 and sum(calls.values()) == n_one == dist.stats["forwards"]
    from arenum.distributed import ShardPlan

    old = ShardPlan.from_json(dist.plan.to_json(log_probs=False))  # a plan saved without its tables' log-probs
    assert not old.lps and old.digest() == dist.plan.digest() == ShardPlan.from_json(dist.plan.to_json()).digest()


class _SameRootFactory:
    """Worker ``k`` gets model ``seeds[k % 2]`` past the first step, all the same first step (the
    local backend calls the factory once per worker, in order)."""

    def __init__(self, case, seeds):
        self.case, self.seeds, self.calls = case, seeds, 0

    def __call__(self):
        from arenum import AutoregressiveEnumerable

        V, L, term, peak, ties, form = self.case
        seed = self.seeds[self.calls % 2]
        self.calls += 1
        root = RandomModel(V, seed=self.seeds[0], peak=peak, eos=0 if term else None, eos_boost=2.0)
        m = RandomModel(V, seed=seed, peak=peak, eos=0 if term else None, eos_boost=2.0)
        m.logprobs = lambda prefix, _m=RandomModel.logprobs: _m(root if not prefix else m, prefix)
        return AutoregressiveEnumerable(m, eos=m.eos, max_len=L)


@pytest.mark.parametrize("case", [CASES[0], CASES[3], CASES[5]])
def test_workers_with_different_models_of_the_same_first_step_are_refused(case):
    # (issue 26 item 3: before, the answers mixed the two models)
    for trial in range(6):
        fac = _SameRootFactory(case, (trial, 100 + trial))
        with pytest.raises(ValueError, match="another model") as e:
            DistributedEnumerable(fac, 2, backend="local")
        assert "\n" not in str(e.value)
        same = _SameRootFactory(case, (trial, trial))  # the same model everywhere: accepted, exact
        V, L, term = case[:3]
        bf = brute_force(RandomModel(V, seed=trial, peak=case[3], eos=0 if term else None, eos_boost=2.0).table,
                         fixed_len=None if term else L, eos=0 if term else None, cap=L)
        with DistributedEnumerable(same, 2, backend="local") as dist:
            assert dist.count(-math.inf) == len(bf) and dist.slice(0, len(bf)) == bf


class _Alternating:
    """Worker ``k`` gets ``factories[k % 2]()`` (the local backend calls once per worker, in order)."""

    def __init__(self, *factories):
        self.factories, self.calls = factories, 0

    def __call__(self):
        self.calls += 1
        return self.factories[(self.calls - 1) % 2]()


@pytest.mark.parametrize("case", [CASES[0], CASES[3], CASES[5]])
def test_workers_with_another_first_step_or_other_settings_are_refused(case):
    """The first row of docs/distributed.md's guarantees: workers whose first steps differ (their root
    fingerprints), or whose settings differ, are refused in one line naming what differs, whether or
    not a store is given."""
    for trial in range(4):
        a = _factory(case, seed=trial)
        other_root = _factory(case, seed=trial + 40)
        assert a.make_model().table(()) != other_root.make_model().table(())
        other_len = EnumerableFactory(a.vocab, options={"max_len": case[1] + 1}, **a.model)
        for other, what in ((other_root, "fingerprint"), (other_len, "max_len")):
            with pytest.raises(ValueError, match=f"worker 1 loaded another model or settings .*{what}") as e:
                DistributedEnumerable(_Alternating(a, other), 2, backend="local")
            assert "\n" not in str(e.value)


@pytest.mark.parametrize("vocab", [[b"a", b"bb", b"\xff", b"<eos>"], ["a", "b", "c", "<eos>"]])
def test_bytes_and_string_tokens_split_and_reopen(tmp_path, vocab):
    fac = EnumerableFactory(vocab, seed=5, peak=1.0, eos=vocab[-1], eos_boost=2.0, options={"max_len": 4})
    m = fac.make_model()
    bf = brute_force(m.table, eos=m.eos, cap=4)
    for _ in range(2):  # built, then reopened from the store (the plan read back from cluster.json)
        with DistributedEnumerable(fac, 3, backend="local", store=tmp_path / "s") as dist:
            assert dist.slice(0, len(bf)) == bf
            assert all(isinstance(t, type(vocab[0])) for u in dist.plan.units for t in u)


# ---------------------------------------------------------------------------------------- Ray
@pytest.fixture(scope="session")
def ray_session():
    ray = pytest.importorskip("ray") if os.environ.get("CI") is None else __import__("ray")
    if not ray.is_initialized():
        ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield ray
    ray.shutdown()


def _ngram_file(tmp_path):
    from arenum.models.ngram import NGramModel

    words = ["password", "passw0rd", "dragon", "monkey", "letmein", "shadow", "master", "qwerty", "abc123",
             "sunshine", "princess", "football", "baseball", "welcome", "admin", "login"] * 3
    path = str(tmp_path / "m.npz")
    NGramModel.fit(words, order=3).save(path)
    return path


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_ray_workers_answer_as_one_process_on_an_ngram(ray_session, tmp_path, workers):
    path = _ngram_file(tmp_path)
    spec = ModelSpec.ngram(path, max_len=6, batch_size=64)
    one = spec()[0]
    with DistributedEnumerable(spec, workers) as dist:
        assert dist.backend.kind == "ray" and len(set(dist.backend.pids())) == workers
        for k in (1, 10, 300, 2000):
            assert dist.threshold(k) == one.threshold(k)
        assert dist.slice(0, 300) == one.slice(0, 300)
        assert dist.slice(1500, 50) == one.slice(1500, 50)
        seq = one.unrank(777)[0]
        assert _fields(dist.rank(seq)) == _fields(one.rank(seq))
        assert _fields(dist.nucleus_size(0.2)) == _fields(one.nucleus_size(0.2))
        t = one.threshold(2000)
        assert _fields(dist.mass_above(t)) == _fields(one.mass_above(t))
        dist._check()


def test_more_workers_than_the_clusters_cpus_share_them_and_what_it_cannot_hold_is_refused(ray_session, tmp_path):
    """Six workers on the four-CPU session share its CPUs (each actor asked for one CPU, and Ray kept
    the fifth pending for ever, without a word); what no sharing can hold is a one-line error."""
    from arenum.distributed.backend import placeable

    res = {"CPU": 4.0}
    assert placeable(2, None, 0.0, res) == 1.0 and placeable(6, None, 0.0, res) == 4.0 / 6
    for n, cpus, gpus, why in ((65, None, 0.0, "at most 16 a CPU"), (5, 1.0, 0.0, "need 5 CPUs"),
                               (2, None, 1.0, "need 2 GPUs")):
        with pytest.raises(ValueError, match=why) as e:
            placeable(n, cpus, gpus, res)
        assert "\n" not in str(e.value)
    path = _ngram_file(tmp_path)
    spec = ModelSpec.ngram(path, max_len=5, batch_size=64)
    one = spec()[0]
    with DistributedEnumerable(spec, 6) as dist:
        assert len(set(dist.backend.pids())) == 6 and dist.slice(0, 200) == one.slice(0, 200)
    with pytest.raises(ValueError, match="need 10 CPUs"):
        DistributedEnumerable(spec, 5, num_cpus_per_worker=2)


def test_ray_workers_answer_as_one_process_on_a_tiny_transformer(ray_session, tmp_path):
    torch = pytest.importorskip("torch") if os.environ.get("CI") is None else __import__("torch")
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    cfg = GPT2Config(vocab_size=12, n_positions=16, n_embd=16, n_layer=1, n_head=2, eos_token_id=11,
                     bos_token_id=11)
    GPT2LMHeadModel(cfg).save_pretrained(tmp_path / "gpt")
    # batched float kernels round a row differently with the batch around it and the thread count
    # (in one process too: docs/distributed.md), so both sides score one prefix a call, on one thread
    spec = ModelSpec.hf(tmp_path / "gpt", prompt=[11], max_len=3, eos=None, batch_size=1)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        one = spec()[0]
        one.slice(0, 12**3)
    finally:
        torch.set_num_threads(threads)
    with DistributedEnumerable(spec, 2) as dist:
        n = 12**3
        for i in (0, 1, 100, 777, n - 1):
            assert dist.unrank(i) == one.unrank(i)
        assert dist.slice(500, 40) == one.slice(500, 40)
        seq = one.unrank(333)[0]
        assert _fields(dist.rank(seq)) == _fields(one.rank(seq))
        dist._check()


def test_a_worker_that_cannot_load_the_model_fails_construction_with_its_own_message(ray_session, tmp_path):
    bad = tmp_path / "not-a-model.npz"
    bad.write_bytes(b"hello")
    with pytest.raises((WorkerError, Exception), match="not-a-model|zip|npz|not a"):
        DistributedEnumerable(ModelSpec.ngram(bad, max_len=4), 2)
    with pytest.raises(FileNotFoundError, match="a worker could not start: .*missing.npz.* does not exist"):
        DistributedEnumerable(ModelSpec.ngram(tmp_path / "missing.npz", max_len=4), 2)


def test_workers_the_cluster_cancelled_before_they_ran_are_started_again(ray_session, tmp_path, monkeypatch):
    from arenum.distributed import backend as be

    spec = ModelSpec.ngram(_ngram_file(tmp_path), max_len=6, batch_size=64)
    real, calls, fails, seen = be.RayBackend._get, [], [1], []
    never_ran = WorkerError("a worker could not start or died: The actor never ran - it was cancelled "
                            "before it started running")

    def flaky(self, ref):  # the first ``fails`` results asked for (the start's pings) never ran
        if len(calls) < fails[0]:
            calls.append(1)
            seen.append(list(self.actors))
            raise never_ran
        return real(self, ref)

    monkeypatch.setattr(be.RayBackend, "_get", flaky)
    with DistributedEnumerable(spec, 2) as dist:  # worker 0 cancelled once: it alone is started again
        assert dist.threshold(10) == spec()[0].threshold(10)
        first = seen[0]
        assert dist.backend.actors[0] is not first[0] and dist.backend.actors[1] is first[1]
    calls.clear()
    fails[0] = 10 ** 9  # a cluster that never runs them: its error, after that many rounds of pings
    with pytest.raises(WorkerError, match="never ran"):
        DistributedEnumerable(spec, 2)
    assert len(calls) == 2 * be._START_TRIES


def test_a_start_error_that_never_ran_reads_as_such(ray_session):
    import ray.exceptions as rex

    from arenum.distributed import backend as be

    ctx = rex.ActorDiedErrorContext(never_started=True, actor_id=b"\x01" * 16)
    err = be._start_error(rex.ActorDiedError(ctx))
    assert isinstance(err, WorkerError) and be._NEVER_RAN in str(err)


def test_a_worker_killed_mid_build_is_restarted_and_resumes_from_its_store(ray_session, tmp_path):
    fac = EnumerableFactory(40, seed=7, peak=1.0, form="dense", batched=True,
                            options={"max_len": 4, "batch_size": 32})
    one = fac()
    k = 150_000
    want = one.threshold(k)
    def journal_bytes(root, j):  # what worker j's store has committed so far
        d = root / f"worker-{j}"
        return sum(f.stat().st_size for f in d.glob("journal-*.bin")) if d.exists() else 0

    with DistributedEnumerable(fac, 2, backend="local", store=tmp_path / "clean") as clean:
        assert clean.threshold(k) == want
        minimum = clean.stats["workers_store_forwards"]  # what each worker's part costs, each prefix once
        full = [journal_bytes(tmp_path / "clean", j) for j in range(2)]
    assert min(full) > 0
    rng = np.random.default_rng(0)
    resumed = 0
    for trial in range(2):
        with DistributedEnumerable(fac, 2, store=tmp_path / f"s{trial}") as dist:
            pids = dist.backend.pids()
            out: dict = {}

            def run():
                try:
                    out["t"] = dist.threshold(k)
                except BaseException as exc:  # pragma: no cover - reported below
                    out["err"] = exc

            th = threading.Thread(target=run)
            th.start()
            # the kill lands mid-build, wherever the machine's speed puts it: once the victim's store
            # holds a random share of its part (a wall-clock delay let a fast machine finish first)
            victim = int(rng.integers(0, 2))
            share = float(rng.uniform(0.1, 0.8))
            while journal_bytes(tmp_path / f"s{trial}", victim) < share * full[victim]:
                assert th.is_alive(), "the query ended before the kill"
                time.sleep(0.002)
            os.kill(pids[victim], signal.SIGKILL)
            th.join(timeout=300)
            assert not th.is_alive()
            assert "err" not in out, out.get("err")
            assert out["t"] == want  # the query in flight completed, exactly
            assert dist.backend.pids()[victim] != pids[victim]  # restarted
            st = dist.stats
            # the restarted worker paid exactly: its root fingerprint, the stored prefixes its store
            # re-scored on opening (PROBES, or all of a smaller store, less a probed root: memoized),
            # and the prefixes its store did not hold (the batch in flight at the kill and after), once
            paid, probes = st["workers_forwards"][victim], st["workers_probe_forwards"][victim]
            lacked = st["workers_store_forwards"][victim] - st["workers_restored"][victim]
            assert paid == 1 + probes + lacked and 0 <= probes <= PROBES, (paid, probes, lacked)
            # and no prefix was committed twice: both lives together paid the minimum, once
            assert st["workers_store_forwards"] == minimum, (st["workers_store_forwards"], minimum)
            resumed += st["workers_restored"][victim] > 0
            assert dist.threshold(k // 2) == one.threshold(k // 2)
            dist._check()
    assert resumed >= 1


def test_monte_carlo_gives_the_same_estimate_for_any_number_of_workers(monkeypatch):
    import arenum.distributed.enumerable as de

    case = (6, 5, True, 1.0, False, "dense")
    fac = _factory(case, seed=3)
    one = fac()
    t = float(one.threshold(50))
    # up to one chunk of draws: the single process's estimate
    with DistributedEnumerable(fac, 2, backend="local") as dist:
        a, b = dist.monte_carlo(300, seed=5), one.monte_carlo(300, seed=5, head=False)
        assert _fields(a.count(t)) == _fields(b.count(t))
        assert np.array_equal(a.samples.score, b.samples.score)
        with pytest.raises(ValueError, match="head"):
            dist.monte_carlo(300, seed=5, head=True)
    monkeypatch.setattr(de, "DRAW_CHUNK", 250)
    got = []
    for w in (1, 2, 3):
        with DistributedEnumerable(fac, w, backend="local") as dist:
            est = dist.monte_carlo(900, seed=11)
            assert est.samples.n == 900
            got.append((_fields(est.count(t)), _fields(est.rank(t)), est.samples.score.tobytes()))
    assert got[0] == got[1] == got[2]


def test_cli_workers_give_the_single_process_answers(ray_session, tmp_path):
    import json
    import subprocess
    import sys

    path = _ngram_file(tmp_path)

    def cli(*args, code=0):
        p = subprocess.run([sys.executable, "-m", "arenum.cli", *map(str, args)], capture_output=True, timeout=300)
        assert p.returncode == code, p.stderr.decode()
        if code:
            return p.stderr.decode()
        docs = [json.loads(ln) for ln in p.stdout.decode().splitlines() if ln.strip()]
        return docs[0] if len(docs) == 1 else docs

    M = ("-m", path, "--max-len", 6)
    W = ("--workers", 2, "--ray-address", "auto")
    doc = cli("build", *M, "--budget", 3000, "--store", tmp_path / "s", *W, "--json")
    assert doc["forwards"] > 0 and doc["indexed_sequences"] >= 3000
    for k in (1, 77, 3000):
        one = cli("threshold", k, *M, "--json")
        got = cli("threshold", k, *M, *W, "--store", tmp_path / "s", "--json")
        assert got["log_prob"] == one["log_prob"] and got["sequence"] == one["sequence"]
    one = cli("rank", "admin", "login", *M, "--json")
    got = cli("rank", "admin", "login", *M, *W, "--store", tmp_path / "s", "--json")
    strip = lambda ds: [{k: v for k, v in d.items() if k not in ("forwards", "forwards_total", "seconds", "workers")} for d in ds]  # noqa: E731
    assert len(one) == 2 and strip(got) == strip(one)
    info = cli("info", tmp_path / "s", "--json")
    assert info["workers"] == 2 and len(info["stores"]) == 2
    assert sum(w["forwards"] for w in info["stores"]) >= doc["forwards"] - 2  # all but the plan's
    err = cli("threshold", 5, *M, "--ray-address", "auto", code=2)
    assert "--ray-address needs --workers" in err
    # the cluster's store opened without --workers: refused in one line, nothing built inside it
    before = sorted(os.listdir(tmp_path / "s"))
    err = cli("threshold", 100, *M, "--store", tmp_path / "s", code=2)
    assert "2-worker cluster" in err and "--workers 2" in err and err.count("\n") == 1
    assert sorted(os.listdir(tmp_path / "s")) == before
    p = subprocess.run([sys.executable, "-m", "arenum.cli", "threshold", "5", *map(str, M), *map(str, W)],
                       capture_output=True, timeout=300)
    assert p.returncode == 0 and b"Ray workers started in" in p.stderr  # the start-up, said apart
    # a worker's store refused: one line on stderr, and nothing on stdout (Ray printed 164 lines of
    # "Task ShardWorker.ping failed ... will be retried" tracebacks there, the stream a cracker reads)
    p = subprocess.run([sys.executable, "-m", "arenum.cli", "threshold", "5", "-m", path, "--max-len", "5",
                        "--store", str(tmp_path / "s"), *map(str, W), "-q"], capture_output=True, timeout=300)
    assert p.returncode == 2 and p.stdout == b"" and p.stderr.decode().count("\n") == 1, p.stderr.decode()


def test_cli_workers_build_interrupted_by_ctrl_c_exits_as_interrupted_and_resumes(ray_session, tmp_path):
    """Ctrl-C in a ``--workers`` build: exit 130, "interrupted" (it was a TypeError from closing the
    workers, exit 2), the workers' stores closed keeping their tables; the run again finishes the
    build from them, one forward per prefix over what was saved, with one process's threshold."""
    import glob
    import json
    import subprocess
    import sys

    path, st = _ngram_file(tmp_path), str(tmp_path / "st")
    args = ["build", "-m", path, "--budget", "1e5", "--store", st, "--workers", "2", "--ray-address", "auto", "-q"]
    env = {k: v for k, v in os.environ.items() if k != "ARENUM_DEBUG"}
    proc = subprocess.Popen([sys.executable, "-m", "arenum.cli", *args], env=env, stderr=subprocess.PIPE)
    deadline = time.time() + 120
    while time.time() < deadline and not any(os.path.getsize(j) >= 1 << 19 for j in glob.glob(st + "/worker-*/journal-*.bin")):
        time.sleep(0.01)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 130 and "interrupted" in err.decode() and "Error" not in err.decode(), err.decode()
    p = subprocess.run([sys.executable, "-m", "arenum.cli", *args, "--json"], env=env, capture_output=True, timeout=300)
    assert p.returncode == 0, p.stderr.decode()
    r = json.loads(p.stdout)
    assert r["resumed"] and r["forwards_before"] > 0
    one = subprocess.run([sys.executable, "-m", "arenum.cli", "threshold", "100000", "-m", path, "--json", "-q"],
                         capture_output=True, timeout=300)
    assert r["threshold_log_prob"] == json.loads(one.stdout)["log_prob"]


class _Flaky:
    """A model that raises on a seeded share of its calls once armed (a worker's failure mid-build)."""

    armed = False

    def __init__(self, inner, rate, seed):
        self.inner, self.rate, self.rng = inner, rate, np.random.default_rng(seed)

    def __call__(self, prefix):
        if _Flaky.armed and self.rng.random() < self.rate:
            raise RuntimeError("flaky model")
        return self.inner(prefix)


def test_failures_mid_build_leave_every_worker_exact_and_the_next_query_resumes():
    case = (5, 5, True, 1.0, False, "dense")
    fac = _factory(case, seed=4)
    bf = _brute(fac, case)
    one = fac()
    seeds = iter(range(1000))

    def flaky():
        return AutoregressiveEnumerable(_Flaky(fac.make_model(), 0.02, next(seeds)), max_len=5, eos=0, batch_size=8)

    with DistributedEnumerable(flaky, 3, backend="local") as dist:
        _Flaky.armed = True
        try:
            _run_flaky(dist, bf, one)
        finally:
            _Flaky.armed = False
        assert dist.slice(0, len(bf)) == bf


def _run_flaky(dist, bf, one):
    rng = np.random.default_rng(1)
    failures = 0
    for k in sorted(rng.integers(1, len(bf), size=12).tolist()) + [len(bf)]:
        for _ in range(200):
            try:
                got = dist.threshold(k)
                break
            except RuntimeError as exc:
                assert "flaky" in str(exc)
                failures += 1
                dist._check()
        assert got == one.threshold(k) == bf[k - 1][1]
        assert dist.unrank(k - 1) == bf[k - 1]
    assert failures > 0
    dist._check()


def test_threads_racing_on_one_distributed_enumerable_get_exact_answers():
    case = (6, 4, True, 1.0, True, "arrays")
    fac = _factory(case, seed=8)
    bf = _brute(fac, case)
    errors = []
    with DistributedEnumerable(fac, 2, backend="local") as dist:
        def work(seed):
            rng = np.random.default_rng(seed)
            try:
                for _ in range(15):
                    i = int(rng.integers(0, len(bf)))
                    assert dist.unrank(i) == bf[i]
                    assert dist.count(bf[i][1]) == sum(1 for _, s in bf if s >= bf[i][1])
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        dist._check()


def test_workers_carry_similar_work_on_a_peaked_model():
    fac = EnumerableFactory(20, seed=3, peak=8.0, eos=0, eos_boost=1.0, form="dense", batched=True,
                            options={"max_len": 6})
    one = fac()
    ids, lps = one.oracle.table(())
    assert math.exp(float(lps.max())) > 0.9  # one first token holds most of the mass
    with DistributedEnumerable(fac, 2, backend="local") as dist:
        assert dist.threshold(20_000) == one.threshold(20_000)
        st = dist.stats
        assert st["plan"]["depth"] >= 2  # the heavy first token was split
        assert st["balance"] < 1.3, st["workers_forwards"]


def test_a_cuda_spec_asks_ray_for_one_gpu_per_worker():
    assert ModelSpec.hf("/models/gpt2", device="cuda:0").num_gpus == 1.0
    assert ModelSpec.hf("/models/gpt2").num_gpus == 0.0
    assert ModelSpec.ngram("m.npz").num_gpus == 0.0
    with pytest.raises(ValueError, match="kind"):
        ModelSpec("onnx", "m.onnx")


def test_progress_is_reported_once_a_round():
    fac = _factory((6, 5, True, 1.5, False, "dense"), seed=5)
    seen = []
    with DistributedEnumerable(fac, 2, backend="local", progress=seen.append) as dist:
        dist.threshold(300)
    assert seen and all(d["workers"] == 2 for d in seen)
    assert [d["round"] for d in seen] == list(range(1, len(seen) + 1))
    assert 0 < seen[-1]["forwards"] <= dist.stats["forwards"]


def test_a_foreign_model_spec_is_refused_by_the_workers_store(ray_session, tmp_path):
    from arenum.models.ngram import NGramModel

    path = _ngram_file(tmp_path)
    other = str(tmp_path / "other.npz")
    NGramModel.fit(["zebra", "yak", "xylophone"] * 4, order=2).save(other)
    with DistributedEnumerable(ModelSpec.ngram(path, max_len=5), 2, store=tmp_path / "s") as dist:
        t = dist.threshold(100)
    with pytest.raises(StoreError, match="built with|another model"):  # one line, naming what differs
        DistributedEnumerable(ModelSpec.ngram(other, max_len=5), 2, store=tmp_path / "s")
    with pytest.raises(StoreError):  # other settings of the same model
        DistributedEnumerable(ModelSpec.ngram(path, max_len=4), 2, store=tmp_path / "s")
    with DistributedEnumerable(ModelSpec.ngram(path, max_len=5), 2, store=tmp_path / "s") as dist:
        assert dist.threshold(100) == t and dist.stats["forwards"] == 0  # reopened: nothing paid again
