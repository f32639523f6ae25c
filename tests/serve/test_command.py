"""``arenum serve`` as a user starts it (a subprocess on 127.0.0.1 at a free port), one process and
``--workers 2``; it answers as the library does and stops on Ctrl-C with status 0."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import httpx
import pytest

from arenum.cli import main
from arenum.models.ngram import NGramModel

from .conftest import free_port


def serve(args: list[str]) -> tuple[subprocess.Popen, str]:
    port = free_port()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    p = subprocess.Popen([sys.executable, "-m", "arenum.cli", "serve", *args, "--port", str(port)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:  # bounded wait for the server to answer
        if p.poll() is not None:
            raise AssertionError(f"arenum serve exited {p.returncode}: {p.stderr.read().decode()}")
        try:
            if httpx.get(url + "/api/info", timeout=2).status_code == 200:
                return p, url
        except httpx.TransportError:
            time.sleep(0.1)
    p.kill()
    raise AssertionError("arenum serve did not answer in 90 s")


def stop(p: subprocess.Popen, sig: int = signal.SIGINT) -> tuple[int, str]:
    p.send_signal(sig)
    try:
        _, err = p.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        p.kill()
        _, err = p.communicate()
        raise AssertionError("arenum serve did not stop on SIGINT")
    return p.returncode, err.decode()


@pytest.fixture(scope="module")
def model_path(tmp_path_factory) -> str:
    p = str(tmp_path_factory.mktemp("cmd") / "m.npz")
    NGramModel.fit(["password", "dragon", "monkey", "letmein", "dragon1", "passw0rd"] * 20, order=3).save(p)
    return p


def test_a_temporary_store_answers_and_is_removed(model_path, tmp_path):
    import tempfile

    before = {d for d in os.listdir(tempfile.gettempdir()) if d.startswith("arenum-serve-")}
    p, url = serve([model_path, "--build", "200", "--max-len", "10"])
    try:
        got = httpx.post(url + "/api/rank", json={"strings": ["dragon", "monkey"]}).json()
        m = NGramModel.load(model_path)
        e = m.enumerable(max_len=10)
        assert [d["rank"] for d in got] == [e.rank(m.encode(s)).rank for s in ("dragon", "monkey")]
        assert httpx.get(url + "/").headers["content-security-policy"].startswith("default-src 'self'")
    finally:
        code, err = stop(p)
    assert code == 0, err
    assert "serving" in err and "dragon" not in err  # start-up lines only, no typed string
    after = {d for d in os.listdir(tempfile.gettempdir()) if d.startswith("arenum-serve-")}
    assert after <= before


def test_sigterm_stops_it_as_ctrl_c_does_and_removes_the_temporary_store(model_path):
    import tempfile

    before = {d for d in os.listdir(tempfile.gettempdir()) if d.startswith("arenum-serve-")}
    p, url = serve([model_path, "--build", "100", "--max-len", "10", "--certify-bits", "0"])
    assert {d for d in os.listdir(tempfile.gettempdir()) if d.startswith("arenum-serve-")} - before
    code, err = stop(p, signal.SIGTERM)  # a service manager's stop: uvicorn re-raised it, which killed the process
    assert code == 0, err
    assert {d for d in os.listdir(tempfile.gettempdir()) if d.startswith("arenum-serve-")} <= before


def test_sigterm_during_the_build_removes_the_temporary_store(tmp_path):
    """SIGTERM while the temporary store is being built (its handler was set only once built: the
    store, 250 MB for the QA, stayed behind): the process stops as on Ctrl-C and removes it."""
    from arenum.cli.demo import demo_model_path

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "TMPDIR": str(tmp_path)}
    p = subprocess.Popen([sys.executable, "-m", "arenum.cli", "serve", demo_model_path(), "--build", "3000000",
                          "--port", str(free_port())], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not any(d.startswith("arenum-serve-") and os.listdir(tmp_path / d)
                                                  for d in os.listdir(tmp_path)):
        time.sleep(0.05)
    time.sleep(0.5)  # into the build
    code, err = stop(p, signal.SIGTERM)
    assert "serving" not in err, err  # stopped while building
    assert code == 130, err
    assert not [d for d in os.listdir(tmp_path) if d.startswith("arenum-serve-")]


def test_two_worker_processes_share_one_read_only_store(model_path, tmp_path):
    store = str(tmp_path / "m.store")
    assert main(["build", "-m", model_path, "--max-len", "10", "--budget", "300", "--store", store, "-q"]) == 0
    p, url = serve([model_path, "--store", store, "--max-len", "10", "--workers", "2", "-q"])
    try:
        m = NGramModel.load(model_path)
        e = m.enumerable(max_len=10)
        want = [e.unrank(i)[1] for i in range(0, 300, 7)]
        for _ in range(3):  # new connections: the kernel spreads them over both processes
            with httpx.Client() as c:
                got = [c.get(f"{url}/api/unrank?i={i}").json()["log_prob"] for i in range(0, 300, 7)]
            assert got == want
        port = int(url.rsplit(":", 1)[1])
        deadline = time.monotonic() + 60
        while _listening(port) < 2 and time.monotonic() < deadline:  # bounded: the second may start later
            time.sleep(0.1)
        assert _listening(port) == 2  # SO_REUSEPORT: a listening socket per process, the kernel spreads connections
    finally:
        code, err = stop(p)
    assert code == 0, err
    assert _listening(port) == 0  # both processes stopped


def _listening(port: int) -> int:
    """How many sockets listen on 127.0.0.1:``port`` (``/proc/net/tcp``: state 0A is LISTEN)."""
    with open("/proc/net/tcp") as f:
        rows = [line.split() for line in f.readlines()[1:]]
    return sum(1 for r in rows if r[1] == f"0100007F:{port:04X}" and r[3] == "0A")


def test_workers_on_a_port_in_use_is_a_one_line_error(model_path, tmp_path, capsys):
    import socket

    store = str(tmp_path / "m.store")
    assert main(["build", "-m", model_path, "--max-len", "10", "--budget", "50", "--store", store, "-q"]) == 0
    with socket.socket() as s:  # an ordinary listener (no SO_REUSEPORT) holds the port
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        assert main(["serve", model_path, "--store", store, "--max-len", "10", "--workers", "2", "--port", str(port),
                     "-q"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"cannot listen on 127.0.0.1:{port}" in err


def test_bad_options_are_one_line_errors(model_path, tmp_path, capsys):
    assert main(["serve", model_path, "--store", str(tmp_path / "none")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "does not exist: pass --build N" in err
    with pytest.raises(SystemExit):
        main(["serve", model_path, "--port", "-1"])
    assert main(["serve", model_path, "--port", "70000", "--build", "5"]) == 2
    assert "--port must be <= 65535" in capsys.readouterr().err
    assert main(["serve", model_path, "--build", "5", "--max-len", "10", "--regex", "["]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "constraint: pattern '['" in err


def test_readers_answer_the_same_while_serve_build_extends_the_store(model_path, tmp_path):
    """A running read-only server (one process) and a second ``arenum serve --build`` process that
    extends the same store, then serves it: while the writer builds, concurrent clients of the reader
    get exactly the reader's answers from before, without an error; in-budget answers equal the
    library's, deeper ones bracket the library's exact rank; after the build the new server answers
    those exactly, equal to the library."""
    import concurrent.futures as cf

    store = str(tmp_path / "m.store")
    assert main(["build", "-m", model_path, "--max-len", "10", "--budget", "300", "--store", store, "-q"]) == 0
    m = NGramModel.load(model_path)
    lib = m.enumerable(max_len=10)
    eos = lib.oracle.eos_id

    def text(i: int) -> str:
        seq = lib.unrank(i)[0]
        return m.decode(seq[:-1] if seq[-1] == eos else seq)

    inb = [text(i) for i in range(0, 290, 29)]
    deep = [text(i) for i in (700, 2500, 7000)]
    truth = {s: lib.rank(m.encode(s)) for s in inb + deep}
    reader, url = serve([model_path, "--store", store, "--max-len", "10", "-q"])
    writer = None
    try:
        def ask(job):
            kind, v = job
            if kind == "rank":
                r = httpx.post(url + "/api/rank", json={"strings": v, "steps": False}, timeout=60)
            else:
                r = httpx.get(f"{url}/api/slice?start={v}&k=20", timeout=60)
            assert r.status_code == 200, r.text
            return r.json()

        jobs = [("rank", inb), ("rank", deep), ("rank", inb[:3] + deep[:1]), ("slice", 0), ("slice", 250)]
        before = [ask(j) for j in jobs]
        for d in before[0]:
            assert d["exact"] and d["rank"] == truth[d["string"]].rank
        for d in before[1]:
            assert not d["exact"] and d["rank_lo"] <= truth[d["string"]].rank <= d["rank_hi"]

        def same(got, want):
            if isinstance(want, list):
                return [{**d, "seconds": 0, "forwards_total": 0} for d in got] == \
                    [{**d, "seconds": 0, "forwards_total": 0} for d in want]
            return got == want

        port = free_port()
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
        writer = subprocess.Popen([sys.executable, "-m", "arenum.cli", "serve", model_path, "--store", store,
                                   "--max-len", "10", "--build", "10000", "--certify-bits", "0", "--port", str(port),
                                   "-q"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        url2, rounds, up = f"http://127.0.0.1:{port}", 0, False
        with cf.ThreadPoolExecutor(8) as ex:
            deadline = time.monotonic() + 120
            while not up and time.monotonic() < deadline:  # bounded: the build takes a few seconds
                assert writer.poll() is None, writer.stderr.read().decode()
                for want, got in zip(before * 2, ex.map(ask, jobs * 2)):
                    assert same(got, want)
                rounds += 1
                try:
                    up = httpx.get(url2 + "/api/info", timeout=2).status_code == 200
                except httpx.TransportError:
                    pass
        assert up and rounds > 1
        assert all(same(ask(j), b) for j, b in zip(jobs, before))  # the reader keeps the tree it opened
        info = httpx.get(url2 + "/api/info").json()
        assert info["indexed_sequences"] >= 10000
        after = httpx.post(url2 + "/api/rank", json={"strings": inb + deep, "steps": False}).json()
        for d in after:
            t = truth[d["string"]]
            assert d["exact"] and d["rank"] == t.rank and d["log_prob"] == t.log_prob
    finally:
        code, err = stop(reader)
        if writer is not None:
            wcode, werr = stop(writer)
            assert wcode == 0, werr
    assert code == 0, err


@pytest.mark.parametrize("workers", [1, 2])
def test_port_0_prints_the_port_the_system_gave(model_path, tmp_path, workers):
    import re

    store = str(tmp_path / "m.store")
    assert main(["build", "-m", model_path, "--max-len", "10", "--budget", "50", "--store", store, "-q"]) == 0
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    p = subprocess.Popen([sys.executable, "-m", "arenum.cli", "serve", model_path, "--store", store, "--max-len", "10",
                          "--certify-bits", "0", "--workers", str(workers), "--port", "0"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        line = ""
        while "serving" not in line:  # bounded: the process exits or prints it
            line = p.stderr.readline().decode()
            assert line, f"arenum serve exited {p.wait()} before saying where it serves"
        url = re.search(r"at (http://127\.0\.0\.1:(\d+)/)", line)
        assert url and int(url.group(2)) > 0, line
        deadline = time.monotonic() + 90
        while True:
            try:
                assert httpx.get(url.group(1) + "api/info", timeout=2).status_code == 200
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "the printed address never answered"
                time.sleep(0.1)
    finally:
        code, err = stop(p)
    assert code == 0, err
