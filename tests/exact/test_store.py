"""The forward store: reopen without forwards, extend in place, survive kills, refuse damage.

Kill-and-resume trials run a child process that builds a store and is SIGKILLed at a random
moment (seeded); the store is then reopened and every answer compared with a clean build, and
the forwards of the resumed build with what the store already held (no saved prefix scored again).
"""
from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from arenum import AutoregressiveEnumerable
from arenum import StoreError
from arenum.exact import describe_store
from arenum.exact.store import PROBES
from arenum.testing import RandomModel, brute_force

V, L = 5, 5


def _model(term: bool, seed: int = 3):
    return RandomModel(["a", "b", "c", "d", "e"], seed=seed, eos="a" if term else None, eos_boost=2.0)


def _open(m, term, path, **kw):
    return AutoregressiveEnumerable(m, max_len=L, eos="a" if term else None, batch_next_logprobs=m.batch,
                                    batch_size=8, store=path, **kw)


@pytest.mark.parametrize("term", [False, True])
def test_reopen_answers_without_forwards_and_extends_in_place(tmp_path, term):
    m = _model(term)
    bf = brute_force(m.table, fixed_len=None if term else L, eos="a" if term else None, cap=L)
    scores = [s for _, s in bf]
    path = tmp_path / "st"
    with _open(m, term, path) as ar:
        got = [ar.unrank(i) for i in range(0, 60, 7)]
        c = ar.count(scores[80])
        first = ar.stats["forwards"]
    assert got == [bf[i] for i in range(0, 60, 7)] and c == sum(1 for s in scores if s >= scores[80])
    ar2 = _open(m, term, path, fingerprint=None)
    opened = ar2.stats["forwards"]  # the root table and PROBES stored prefixes, to check the model is the same
    assert ar2.store.probed == PROBES and opened <= 1 + PROBES
    assert [ar2.unrank(i) for i in range(0, 60, 7)] == got
    assert ar2.count(scores[80]) == c
    assert ar2.stats["forwards"] == opened
    ar2._check()
    # deeper: extends the stored tree, scoring only new prefixes
    assert ar2.count(-math.inf) == len(bf)
    total = ar2.stats["forwards"] - opened + first
    clean = AutoregressiveEnumerable(m, max_len=L, eos="a" if term else None, batch_next_logprobs=m.batch, batch_size=8)
    clean.count(-math.inf)
    assert total == clean.stats["forwards"] == ar2.stats["store_forwards"]
    ar2.close()
    ar3 = _open(m, term, path, fingerprint=None)
    assert ar3.slice(0, len(bf)) == bf and ar3.stats["forwards"] <= 1 + PROBES
    ar3._check()
    ar3.close()


def test_given_fingerprint_opens_with_zero_forwards(tmp_path):
    m = _model(False)
    with _open(m, False, tmp_path / "s", fingerprint="my-model-v1") as ar:
        x = ar.threshold(100)
    ar2 = _open(m, False, tmp_path / "s", fingerprint="my-model-v1")
    assert ar2.threshold(100) == x and ar2.stats["forwards"] == 0
    ar2.close()
    with pytest.raises(StoreError, match="another model"):
        _open(m, False, tmp_path / "s", fingerprint="my-model-v2")


def test_foreign_model_settings_version_and_lock_are_refused(tmp_path):
    m = _model(False)
    p = tmp_path / "s"
    ar = _open(m, False, p)
    ar.count(-7.0)
    with pytest.raises(StoreError, match="another writer"):
        _open(m, False, p)
    ro = _open(m, False, p, store_readonly=True)  # readers are fine while a writer holds it
    assert ro.count(-7.0) == ar.count(-7.0)
    ar.close()
    with pytest.raises(StoreError, match="another model"):
        _open(_model(False, seed=4), False, p)
    with pytest.raises(StoreError, match="max_len"):
        AutoregressiveEnumerable(m, max_len=L + 1, batch_next_logprobs=m.batch, store=p)
    man = json.loads((p / "manifest.json").read_text())
    man["version"] = 99
    del man["crc32"]  # a newer format is judged before a checksum it may compute otherwise
    (p / "manifest.json").write_text(json.dumps(man))
    with pytest.raises(StoreError, match="newer") as e:
        _open(m, False, p)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("damage", ["truncate", "flip", "missing", "manifest", "journal_middle"])
def test_damaged_store_is_refused_in_one_line_naming_the_file(tmp_path, damage):
    m = _model(True)
    p = tmp_path / "s"
    ar = _open(m, True, p)
    ar.count(-6.0)
    ar.close()
    ar = _open(m, True, p)
    ar.count(-9.0)  # leaves journal records after the snapshot
    del ar
    gen = json.loads((p / "manifest.json").read_text())["generation"]
    files = sorted((p / f"gen-{gen}").glob("*.npy"), key=lambda f: -f.stat().st_size)
    f = files[0]
    if damage == "truncate":
        f.write_bytes(f.read_bytes()[:-9])
        want = f.name
    elif damage == "flip":
        b = bytearray(f.read_bytes())
        b[-5] ^= 0xFF
        f.write_bytes(bytes(b))
        want = f.name
    elif damage == "missing":
        f.unlink()
        want = f.name
    elif damage == "manifest":
        (p / "manifest.json").write_text("{not json")
        want = "manifest.json"
    else:
        j = p / f"journal-{gen}.bin"
        b = bytearray(j.read_bytes())
        assert len(b) > 200
        b[60] ^= 0xFF  # inside the first record, with more records after it
        j.write_bytes(bytes(b))
        want = j.name
    with pytest.raises(StoreError) as e:
        _open(m, True, p)
    msg = str(e.value)
    assert want in msg and "\n" not in msg
    if damage != "journal_middle":  # `arenum info` refuses it too (it said the store was fine)
        with pytest.raises(StoreError) as e:
            describe_store(p)
        assert want in str(e.value) and "\n" not in str(e.value)


def test_a_store_without_its_manifest_is_refused_not_rebuilt(tmp_path):
    """The manifest deleted, the snapshot and journal left: refused, and nothing in the folder
    changed (it was taken for a new store and rebuilt from nothing, its prefixes lost)."""
    m = _model(True)
    p = tmp_path / "s"
    ar = _open(m, True, p)
    ar.count(-6.0)
    ar.close()
    (p / "manifest.json").unlink()
    before = sorted((q.relative_to(p), q.stat().st_size) for q in p.rglob("*"))
    with pytest.raises(StoreError, match="manifest.json is missing but the folder holds a store's files") as e:
        _open(m, True, p)
    assert "\n" not in str(e.value)
    assert sorted((q.relative_to(p), q.stat().st_size) for q in p.rglob("*")) == before
    q = tmp_path / "first"  # a first checkpoint cut before its manifest: gen-0 and an empty journal, a new store
    (q / "gen-0").mkdir(parents=True)
    (q / "journal-0.bin").write_bytes(b"")
    ar = _open(m, True, q)
    assert ar.count(-6.0) == _open(m, True, tmp_path / "clean").count(-6.0)


def test_a_journal_cut_at_any_byte_opens_exact(tmp_path):
    # a power cut during an append leaves the journal cut at some byte: it opens, keeps every whole
    # record before the cut, and answers exactly
    m = _model(False)
    p = tmp_path / "s"
    ar = _open(m, False, p)
    ar.count(-8.0)
    n_saved = ar.stats["store_forwards"]
    del ar
    gen = json.loads((p / "manifest.json").read_text())["generation"]
    j = p / f"journal-{gen}.bin"
    full = j.read_bytes()
    clean = AutoregressiveEnumerable(m, max_len=L, batch_next_logprobs=m.batch, batch_size=8)
    want_c, want_s = clean.count(-8.0), clean.slice(0, 50)
    rng = np.random.default_rng(5)
    torn = 0
    for cut in sorted(set(rng.integers(0, len(full), 25).tolist())):
        j.write_bytes(full[:cut])
        ar2 = _open(m, False, p, fingerprint=None)
        torn += ar2.store.torn
        assert 0 <= ar2.stats["store_forwards"] <= n_saved
        ar2._check()
        assert ar2.count(-8.0) == want_c and ar2.slice(0, 50) == want_s
        ar2._check()
        ar2.close()  # snapshots what it rebuilt: restore the cut journal for the next trial
        gen = json.loads((p / "manifest.json").read_text())["generation"]
        j = p / f"journal-{gen}.bin"
        # start the next trial from the same saved state
        import shutil
        shutil.rmtree(p)
        ar = _open(m, False, p)
        ar.count(-8.0)
        del ar
        gen = json.loads((p / "manifest.json").read_text())["generation"]
        j = p / f"journal-{gen}.bin"
        assert j.read_bytes() == full
    assert torn > 0


def test_checkpoints_during_a_build_keep_it_exact(tmp_path):
    m = _model(True)
    p = tmp_path / "s"
    ar = _open(m, True, p)
    ar.store.checkpoint_bytes = 0  # snapshot whenever the journal outgrows the snapshot
    n = ar.count(-math.inf)
    assert ar.store.generation >= 1  # snapshots taken during the build
    want = ar.slice(0, n)
    del ar
    ar2 = _open(m, True, p)
    assert ar2.slice(0, n) == want and ar2.stats["forwards"] <= 1 + PROBES  # the root and the probes
    ar2._check()
    ar2.close()


def test_tokens_that_cannot_be_stored_are_refused():
    m = RandomModel([(1,), (2,), (3,)], seed=1)
    with pytest.raises(StoreError, match="cannot be stored"):
        AutoregressiveEnumerable(m, max_len=3, store=os.path.join(os.environ.get("TMPDIR", "/tmp"), "arenum-st-tok"))


_CHILD = textwrap.dedent("""
    import sys, time, math
    from arenum import AutoregressiveEnumerable
    from arenum.testing import RandomModel
    path, term = sys.argv[1], sys.argv[2] == "1"
    m = RandomModel(list(range(6)), seed=9, eos=0 if term else None, eos_boost=2.0)
    def batch(ps):
        time.sleep(0.002)
        return m.batch(ps)
    ar = AutoregressiveEnumerable(m, max_len=6, eos=0 if term else None, batch_next_logprobs=batch, batch_size=4,
                                  store=path, fingerprint="m9")
    print("ready", flush=True)
    ar.count(-math.inf)
    ar.close()
    print("done", flush=True)
""")


@pytest.mark.parametrize("term", [False, True])
def test_killed_builds_resume_exactly_without_scoring_a_saved_prefix_again(tmp_path, term):
    m = RandomModel(list(range(6)), seed=9, eos=0 if term else None, eos_boost=2.0)
    clean = AutoregressiveEnumerable(m, max_len=6, eos=0 if term else None, batch_next_logprobs=m.batch, batch_size=4)
    n_all = clean.count(-math.inf)
    want = clean.slice(0, n_all)
    need = clean.stats["forwards"]
    script = tmp_path / "child.py"
    script.write_text(_CHILD)
    rng = np.random.default_rng(12345 + term)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    for trial in range(6):
        path = tmp_path / f"s{trial}"
        for kill in range(3):  # killed three times, at random moments
            proc = subprocess.Popen([sys.executable, str(script), str(path), "1" if term else "0"],
                                    stdout=subprocess.PIPE, env=env)
            assert proc.stdout.readline().strip() == b"ready"
            time.sleep(float(rng.uniform(0.0, 0.6)))
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        calls: list[tuple] = []

        def batch(ps):
            calls.extend(ps)
            return m.batch(ps)

        ar = AutoregressiveEnumerable(m, max_len=6, eos=0 if term else None, batch_next_logprobs=batch, batch_size=4,
                                      store=path, fingerprint="m9")
        ar._check()
        saved = ar.stats["store_forwards"]
        assert ar.count(-math.inf) == n_all
        assert ar.slice(0, n_all) == want
        # every prefix scored once over all the processes: the resumed build paid exactly the rest
        assert ar.stats["forwards"] == need - saved == len(set(calls)) == len(calls)
        ar._check()
        ar.close()


def test_adapters_identify_their_model_without_a_forward(tmp_path):
    from arenum.models.ngram import NGramModel

    words = ["password", "letmein", "dragon", "monkey", "pass", "word"] * 3
    m = NGramModel.fit(words, order=3)
    with m.enumerable(max_len=7, store=tmp_path / "ng") as ar:
        x = ar.threshold(200)
    ar2 = NGramModel.fit(words, order=3).enumerable(max_len=7, store=tmp_path / "ng")
    assert ar2.threshold(200) == x and ar2.stats["forwards"] == 0
    ar2.close()
    with pytest.raises(StoreError, match="another model"):
        NGramModel.fit(words[:-1], order=3).enumerable(max_len=7, store=tmp_path / "ng")


def test_transformer_store_reopens_without_forwards_and_refuses_another_prompt(tmp_path):
    import torch
    import transformers

    from arenum.models.hf import CausalLMOracle

    def tiny_gpt2(seed):
        cfg = transformers.GPT2Config(vocab_size=12, n_positions=16, n_embd=16, n_layer=1, n_head=2,
                                      bos_token_id=0, eos_token_id=1)
        model = transformers.GPT2LMHeadModel(cfg)
        gen = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for _, p in sorted(model.named_parameters()):
                if p.dim() > 1:
                    p.copy_(torch.randn(p.shape, generator=gen) * 0.3)
        return model.eval()

    model = tiny_gpt2(seed=1)
    o = CausalLMOracle(model, None, prompt=[1, 2])
    with o.enumerable(max_len=3, store=tmp_path / "hf") as ar:
        got = ar.slice(0, 40)
    o2 = CausalLMOracle(tiny_gpt2(seed=1), None, prompt=[1, 2])
    ar2 = o2.enumerable(max_len=3, store=tmp_path / "hf")
    assert ar2.slice(0, 40) == got and ar2.stats["forwards"] == 0
    ar2.close()
    with pytest.raises(StoreError, match="another model"):
        CausalLMOracle(tiny_gpt2(seed=1), None, prompt=[1, 3]).enumerable(max_len=3, store=tmp_path / "hf")
    with pytest.raises(StoreError, match="another model"):
        CausalLMOracle(tiny_gpt2(seed=2), None, prompt=[1, 2]).enumerable(max_len=3, store=tmp_path / "hf")


def test_a_full_disk_mid_build_commits_nothing_and_the_build_resumes(tmp_path, monkeypatch):
    import errno

    import arenum.exact.store as store_mod

    m = _model(True)
    clean = AutoregressiveEnumerable(m, max_len=L, eos="a", batch_next_logprobs=m.batch, batch_size=8)
    n = clean.count(-math.inf)
    want = clean.slice(0, n)
    real_write = os.write
    rng = np.random.default_rng(3)

    def flaky(fd, buf):
        if rng.random() < 0.3:
            real_write(fd, bytes(buf)[: len(buf) // 2])  # a partial write, then the error
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, buf)

    p = tmp_path / "s"
    ar = _open(m, True, p)
    monkeypatch.setattr(store_mod.os, "write", flaky)
    failures = 0
    while True:
        try:
            got = ar.count(-math.inf)
            break
        except OSError:
            failures += 1
            ar._check()
    monkeypatch.setattr(store_mod.os, "write", real_write)
    assert failures > 0 and got == n and ar.slice(0, n) == want
    del ar
    ar2 = _open(m, True, p)
    ar2._check()
    assert ar2.slice(0, n) == want and ar2.stats["forwards"] <= 1 + PROBES  # the root and the probes
    # forwards lost to failed writes were paid again, but every saved prefix once
    assert ar2.stats["store_forwards"] == clean.stats["forwards"]
    ar2.close()


def _reopen_in_a_fresh_process(path, n):
    """Open the store at ``path`` as a writer in a new process; its count of everything and its slice."""
    code = textwrap.dedent(f"""
        import json, math
        from arenum import AutoregressiveEnumerable
        from arenum.testing import RandomModel
        m = RandomModel(["a", "b", "c", "d", "e"], seed=3, eos="a", eos_boost=2.0)
        ar = AutoregressiveEnumerable(m, max_len={L}, eos="a", batch_next_logprobs=m.batch, batch_size=8,
                                      store={str(path)!r})
        ar._check()
        print(json.dumps([ar.count(-math.inf), ar.slice(0, {n})]))
        ar.close()
        """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-800:]
    c, got = json.loads(r.stdout)
    return c, [(list(s), x) for s, x in got]


def test_after_a_full_disk_a_dropped_enumerable_releases_the_lock(tmp_path, monkeypatch):
    """A failed journal write releases the lock: an enumerable kept alive by the error (a traceback
    kept, as a notebook keeps the last one) and dropped does not hold the store; one still in use
    takes the lock again at its next commit, or refuses if another writer changed the store."""
    import errno
    import gc
    import weakref

    import arenum.exact.store as store_mod

    m = _model(True)
    clean = AutoregressiveEnumerable(m, max_len=L, eos="a", batch_next_logprobs=m.batch, batch_size=8)
    n = clean.count(-math.inf)
    want = [(list(s), x) for s, x in clean.slice(0, n)]
    real_write, real_trunc = os.write, os.ftruncate
    kept = []  # the errors, tracebacks and all: they hold every frame of the failed query
    for trial in range(6):
        rng = np.random.default_rng(trial)
        p = tmp_path / f"s{trial}"
        ar = _open(m, True, p)
        ar.count(clean.threshold(int(rng.integers(1, 40))))  # something committed first
        ok_writes = int(rng.integers(0, 4))
        bad_trunc = trial % 3 == 2  # the cut of the partial record fails too

        def full(fd, buf):
            nonlocal ok_writes
            if ok_writes > 0:
                ok_writes -= 1
                return real_write(fd, buf)
            real_write(fd, bytes(buf)[: len(buf) // 3])
            raise OSError(errno.ENOSPC, "No space left on device")

        def trunc(fd, size):
            if bad_trunc:
                raise OSError(errno.EIO, "I/O error")
            return real_trunc(fd, size)

        monkeypatch.setattr(store_mod.os, "write", full)
        monkeypatch.setattr(store_mod.os, "ftruncate", trunc)
        try:
            ar.count(-math.inf)
            raise AssertionError("the full disk raised nothing")
        except OSError as e:
            kept.append(e)
        monkeypatch.setattr(store_mod.os, "write", real_write)
        monkeypatch.setattr(store_mod.os, "ftruncate", real_trunc)
        ar._check()
        if trial % 2:  # still in use: the next commit takes the lock again (or refuses: the journal's end unknown)
            try:
                assert ar.count(-math.inf) == n and ar.slice(0, n) == clean.slice(0, n)
                assert not bad_trunc
            except StoreError as e:
                assert bad_trunc and "open it again" in str(e)
            ar._check()
            kept.pop()  # it holds the lock again, like any enumerable in use, until closed or dropped
        w = weakref.ref(ar.store)
        del ar
        gc.collect()
        assert w() is None or w()._lock_fd is None
        assert _reopen_in_a_fresh_process(p, n) == (n, want)  # a fresh process opens it, exact
        ar2 = _open(m, True, p)  # and this one
        ar2._check()
        assert ar2.count(-math.inf) == n and [(list(s), x) for s, x in ar2.slice(0, n)] == want
        ar2.close()
    # another writer while the first had released the lock: the first refuses at its next commit
    p = tmp_path / "other"
    ar = _open(m, True, p)
    ar.count(clean.threshold(5))
    monkeypatch.setattr(store_mod.os, "write", lambda fd, buf: (_ for _ in ()).throw(OSError(errno.ENOSPC, "full")))
    with pytest.raises(OSError):
        ar.count(-math.inf)
    monkeypatch.setattr(store_mod.os, "write", real_write)
    other = _open(m, True, p)
    other.count(clean.threshold(60))
    other.close()
    with pytest.raises(StoreError, match="changed after a failed write"):
        ar.count(-math.inf)
    ar._check()
    assert ar.count(clean.threshold(5)) == 5  # queries inside what it holds still answer
    ar.close()
    assert _reopen_in_a_fresh_process(p, n) == (n, want)


def test_a_store_whose_cleanup_is_cut_short_by_an_exception_still_releases_the_lock(tmp_path):
    """An exception landing inside the store's ``__del__`` (a signal handler raising as the garbage
    collector runs it) is ignored by Python, and the cleanup it cut short does not run: the lock is
    held by a file object that the store drops all the same, so the lock is released anyway."""
    import gc

    import arenum.exact.store as store_mod

    class Cut(BaseException):
        pass

    codes = {store_mod.TreeStore.__del__.__code__, store_mod.TreeStore._release.__code__}
    m = _model(True)
    n = len(brute_force(m.table, eos="a", cap=L))
    ignored = []
    old_hook = sys.unraisablehook
    sys.unraisablehook = lambda u: ignored.append(u.exc_type)
    try:
        for k in range(1, 9):  # the k-th line run inside __del__ and _release raises
            p = tmp_path / f"s{k}"
            ar = _open(m, True, p)
            ar.count(-4.0)
            seen = [0]

            def trace(frame, event, arg):
                if frame.f_code in codes and event in ("call", "line"):
                    seen[0] += 1
                    if seen[0] == k:
                        raise Cut(k)
                return trace if frame.f_code in codes else None

            sys.settrace(trace)
            try:
                del ar
                gc.collect()
            finally:
                sys.settrace(None)
            gc.collect()
            ar2 = _open(m, True, p)  # the lock is free in this process
            ar2._check()
            assert ar2.count(-math.inf) == n
            ar2.close()
    finally:
        sys.unraisablehook = old_hook
    assert Cut in ignored  # the exception did land inside the cleanup
    assert _reopen_in_a_fresh_process(tmp_path / "s1", n)[0] == n


# ------------------------------------------------------------------ the command line
def _cli(*args, timeout=120):
    env = {k: v for k, v in os.environ.items() if k != "ARENUM_DEBUG"}
    return subprocess.run([sys.executable, "-m", "arenum.cli", *map(str, args)], capture_output=True, env=env,
                          timeout=timeout)


@pytest.fixture(scope="module")
def pw_model(tmp_path_factory):
    from arenum.models.ngram import NGramModel

    d = tmp_path_factory.mktemp("cli-store")
    words = ["password", "letmein", "dragon", "monkey", "pass", "word", "shadow", "master", "abc123"] * 2
    NGramModel.fit(words, order=3).save(d / "pw.npz")
    return d / "pw.npz"


def test_cli_build_is_resumable_and_queries_answer_from_the_store(tmp_path, pw_model):
    st = tmp_path / "st"
    p = _cli("build", "-m", pw_model, "--budget", "2e4", "--store", st, "--json", "-q")
    assert p.returncode == 0, p.stderr.decode()
    first = json.loads(p.stdout)
    assert first["forwards"] > 0 and not first["resumed"]
    p = _cli("build", "-m", pw_model, "--budget", "2e4", "--store", st, "--json", "-q")
    again = json.loads(p.stdout)
    assert again["forwards"] == 0 and again["resumed"] and again["threshold_log_prob"] == first["threshold_log_prob"]
    p = _cli("rank", "dragon", "shadow", "-m", pw_model, "--store", st, "--json", "-q")
    assert p.returncode == 0
    rows = [json.loads(x) for x in p.stdout.decode().splitlines()]
    plain = [json.loads(x) for x in _cli("rank", "dragon", "shadow", "-m", pw_model, "--json", "-q").stdout.decode().splitlines()]
    assert [r["rank"] for r in rows] == [r["rank"] for r in plain]
    assert all(r["forwards"] == 0 for r in rows)
    info = _cli("info", st)
    assert info.returncode == 0 and "ngram:" in info.stdout.decode() and "prefixes" in info.stdout.decode()
    assert json.loads(_cli("info", st, "--json").stdout)["forwards"] == first["forwards"]
    bad = _cli("count", "-m", pw_model, "--bits", "5", "--max-len", "6", "--store", st)
    err = bad.stderr.decode()
    assert bad.returncode == 2 and "max_len" in err and err.count("\n") == 1
    assert _cli("info", tmp_path).returncode == 2  # not a store: one line


def test_cli_build_killed_then_rerun_resumes(tmp_path, pw_model):
    st = tmp_path / "st"
    clean = json.loads(_cli("build", "-m", pw_model, "--budget", "1e5", "--store", tmp_path / "clean", "--json",
                            "-q").stdout)
    env = {k: v for k, v in os.environ.items() if k != "ARENUM_DEBUG"}
    proc = subprocess.Popen([sys.executable, "-m", "arenum.cli", "build", "-m", str(pw_model), "--budget", "1e5",
                             "--store", str(st), "-q"], env=env)
    # killed once its journal holds 16 MiB of commits (about a tenth of this build's; before: 0.5 s after
    # the manifest, of a build 3x this one's): mid-build whatever the machine's speed
    deadline = time.time() + 60
    while time.time() < deadline and not any(j.stat().st_size >= 16 << 20 for j in st.glob("journal-*.bin")):
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    p = _cli("build", "-m", pw_model, "--budget", "1e5", "--store", st, "--json", "-q")
    assert p.returncode == 0, p.stderr.decode()
    r = json.loads(p.stdout)
    assert r["resumed"] and 0 < r["forwards_before"] < r["store_forwards"]  # killed mid-build, its commits kept
    assert r["threshold_log_prob"] == clean["threshold_log_prob"]
    assert r["forwards_before"] + r["forwards"] == r["store_forwards"]
    assert r["store_forwards"] <= clean["forwards"] * 1.01 + 1024


def test_threads_building_one_store_leave_it_exact(tmp_path):
    import threading

    m = _model(True)
    bf = brute_force(m.table, fixed_len=None, eos="a", cap=L)
    scores = [s for _, s in bf]
    p = tmp_path / "s"
    ar = _open(m, True, p)
    wrong: list[str] = []

    def work(tid: int) -> None:
        rng = np.random.default_rng(tid)
        for _ in range(15):
            i = int(rng.integers(0, len(bf)))
            if rng.random() < 0.5:
                if ar.unrank(i) != bf[i]:
                    wrong.append(f"unrank({i})")
            elif ar.count(scores[i]) != sum(1 for s in scores if s >= scores[i]):
                wrong.append(f"count({scores[i]})")

    ts = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not wrong, wrong[:5]
    ar._check()
    saved = ar.stats["store_forwards"]
    del ar
    ar2 = _open(m, True, p)
    ar2._check()
    assert ar2.stats["store_forwards"] == saved
    assert ar2.slice(0, 200) == bf[:200] and ar2.stats["forwards"] <= 1 + PROBES  # the root and the probes
    ar2.close()


def test_replay_applies_each_record_as_it_is_read_and_refuses_damage_in_one_line(tmp_path, monkeypatch):
    """Opening reads the journal a record at a time: record ``i`` is applied before record ``i + 2``
    is read or decoded (memory bounded by two records, not by the journal), with the same answers;
    a record damaged before the end is refused in one line, a torn last one cut off."""
    from arenum.exact import store as store_mod
    from arenum.exact.tree import PrefixTree

    m = _model(True)
    p = tmp_path / "s"
    ar = _open(m, True, p, fingerprint="m")
    ar.count(-9.0)
    want = ar.slice(0, 40)
    del ar  # no snapshot: everything is in the journal
    j = p / f"journal-{json.loads((p / 'manifest.json').read_text())['generation']}.bin"
    full = j.read_bytes()
    events: list[tuple[str, int]] = []
    real_decode, real_apply = store_mod.decode_record, PrefixTree.apply

    def decode(payload):
        out = real_decode(payload)
        events.append(("read", out[2]))
        return out

    def apply(self, kind, rec, seq):
        events.append(("apply", seq))
        return real_apply(self, kind, rec, seq)

    monkeypatch.setattr(store_mod, "decode_record", decode)
    monkeypatch.setattr(PrefixTree, "apply", apply)
    ar2 = _open(m, True, p, fingerprint="m")
    reads = [i for i, (e, _) in enumerate(events) if e == "read"]
    applies = [i for i, (e, _) in enumerate(events) if e == "apply"]
    assert len(reads) == len(applies) == ar2.store.replayed > 5
    assert all(applies[i] < reads[i + 2] for i in range(len(reads) - 2))  # never three records held
    assert ar2.stats["forwards"] == 0 and ar2.slice(0, 40) == want
    ar2._check()
    del ar2
    # the last record torn at a random byte: cut off, the rest applied; one damaged earlier: refused
    rng = np.random.default_rng(11)
    last = max(i for i in range(len(full)) if full[i : i + 4] == b"ARJ2")
    for trial in range(6):
        j.write_bytes(full[: int(rng.integers(last + 1, len(full)))])
        ar3 = _open(m, True, p, fingerprint="m")
        assert ar3.store.torn == 1 and ar3.store.replayed == len(reads) - 1
        ar3._check()
        assert ar3.slice(0, 40) == want
        del ar3
        bad = bytearray(full)
        bad[int(rng.integers(20, last))] ^= 0xFF
        j.write_bytes(bytes(bad))
        with pytest.raises(StoreError, match="journal-") as e:
            _open(m, True, p, fingerprint="m")
        assert "\n" not in str(e.value) and ("damaged" in str(e.value) or "cannot be" in str(e.value))


def test_cli_build_interrupted_by_ctrl_c_resumes_without_scoring_a_saved_prefix_again(tmp_path, pw_model):
    """Ctrl-C mid-build: the store is closed keeping every table (a finished build cuts an n-gram's to
    the budget built), so the run again pays only the rest: over both runs, one forward per prefix
    (it re-scored 99.7% of the saved prefixes before)."""
    st = tmp_path / "st"
    clean = json.loads(_cli("build", "-m", pw_model, "--budget", "1e5", "--store", tmp_path / "clean", "--json",
                            "-q").stdout)
    env = {k: v for k, v in os.environ.items() if k != "ARENUM_DEBUG"}
    proc = subprocess.Popen([sys.executable, "-m", "arenum.cli", "build", "-m", str(pw_model), "--budget", "1e5",
                             "--store", str(st), "-q"], env=env, stderr=subprocess.PIPE)
    deadline = time.time() + 60
    while time.time() < deadline and not any(j.stat().st_size >= 16 << 20 for j in st.glob("journal-*.bin")):
        time.sleep(0.01)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130 and "interrupted" in err.decode()
    p = _cli("build", "-m", pw_model, "--budget", "1e5", "--store", st, "--json", "-q")
    assert p.returncode == 0, p.stderr.decode()
    r = json.loads(p.stdout)
    assert r["resumed"] and 0 < r["forwards_before"] < clean["forwards"]
    assert r["threshold_log_prob"] == clean["threshold_log_prob"]
    # every prefix of the tree scored once over both runs (the resumed run may deepen a little further)
    assert r["forwards_before"] + r["forwards"] == r["prefixes"] == r["store_forwards"]


def test_with_closes_keeping_the_tables_when_its_block_raised(tmp_path, store_closes):
    seen = store_closes
    m = _model(True)
    with _open(m, True, tmp_path / "a") as ar:
        ar.count(-6.0)
    with pytest.raises(KeyboardInterrupt):
        with _open(m, True, tmp_path / "b") as ar:
            ar.count(-6.0)
            raise KeyboardInterrupt
    assert seen[:2] == [True, False]


def test_cli_readonly_reads_a_store_beside_the_command_that_holds_it(tmp_path, pw_model):
    """The command line had no read-only open (only serve read without writing): a query beside a
    build was refused. ``--readonly`` reads it without its lock and writes nothing; deeper queries
    deepen in memory only."""
    from arenum.models.ngram import NGramModel

    st = tmp_path / "st"
    assert _cli("build", "-m", pw_model, "--budget", "3000", "--store", st, "-q").returncode == 0
    files = {f.name: f.stat().st_size for f in st.iterdir()}
    one = json.loads(_cli("threshold", 1000, "-m", pw_model, "--json", "-q").stdout)
    held = NGramModel.load(pw_model).enumerable(store=st)  # holds the lock, as a build would
    try:
        p = _cli("threshold", 1000, "-m", pw_model, "--store", st, "--json", "-q")
        assert p.returncode == 2 and "pass --readonly" in p.stderr.decode()
        got = json.loads(_cli("threshold", 1000, "-m", pw_model, "--store", st, "--readonly", "--json", "-q").stdout)
        assert got["log_prob"] == one["log_prob"] and got["forwards"] == 0
        deep = json.loads(_cli("threshold", 20000, "-m", pw_model, "--store", st, "--readonly", "--json", "-q").stdout)
        assert deep["forwards"] > 0
    finally:
        held.close(cut_tables=False)
    assert {f.name: f.stat().st_size for f in st.iterdir()} == files  # written by nobody but the holder (nothing)
    for args, why in ((("threshold", 5, "-m", pw_model, "--readonly"), "applies to --store"),
                      (("build", "-m", pw_model, "--budget", 10, "--store", st, "--readonly"), "build writes its store")):
        p = _cli(*args)
        assert p.returncode == 2 and why in p.stderr.decode() and p.stderr.decode().count("\n") == 1
