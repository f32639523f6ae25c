"""Servers for the serve tests: real uvicorn servers on 127.0.0.1 at a free port, one per module,
stopped by the fixture. Models: the shipped password 4-gram (a store built to a few thousand
sequences) and a tiny n-gram whose whole support can be brute-forced."""
from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass
from typing import Any, Iterator

import pytest
import uvicorn

from arenum.cli.demo import demo_model_path
from arenum.models.ngram import NGramModel
from arenum.serve import Limits, ServeConfig, Service, create_app, prepare

DEMO_BUILD = 3000
TINY_WORDS = ["abc", "abca", "bca", "cab", "aab", "bbc", "cc", "a", "acb", "ba"] * 3 + ["cabc", "bb"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Running:
    """A server running in a thread: its base URL, its service and its config."""

    url: str
    service: Service
    cfg: ServeConfig
    server: Any
    thread: threading.Thread


def start(cfg: ServeConfig) -> Running:
    cfg, temporary = prepare(cfg)
    svc = Service.open(cfg, temporary=temporary)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(svc), host="127.0.0.1", port=port, access_log=False,
                                           log_level="warning", lifespan="off"))
    th = threading.Thread(target=server.run, daemon=True)
    th.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not th.is_alive():
            raise RuntimeError("the test server did not start")
        time.sleep(0.02)
    return Running(f"http://127.0.0.1:{port}", svc, cfg, server, th)


def stop(r: Running) -> None:
    r.server.should_exit = True
    r.thread.join(timeout=10)
    r.service.close()


@pytest.fixture(scope="module")
def demo_store(tmp_path_factory) -> str:
    """A store of the shipped password 4-gram, built to ``DEMO_BUILD`` sequences."""
    d = str(tmp_path_factory.mktemp("serve") / "pw4.store")
    prepare(ServeConfig(model=demo_model_path(), store=d, build=DEMO_BUILD))
    return d


@pytest.fixture(scope="module")
def demo_server(demo_store) -> Iterator[Running]:
    r = start(ServeConfig(model=demo_model_path(), store=demo_store, limits=Limits(max_batch=8, max_chars=40),
                          certify_bits=0))  # no certified DP: past the index, the plain bracket
    yield r
    stop(r)


@pytest.fixture(scope="module")
def tiny_model_path(tmp_path_factory) -> str:
    p = str(tmp_path_factory.mktemp("tiny") / "tiny.npz")
    NGramModel.fit(TINY_WORDS, order=2, smoothing="kn").save(p)
    return p


@pytest.fixture(scope="module")
def tiny_server(tiny_model_path) -> Iterator[Running]:
    """The tiny model with max_len 5 (its support is small enough to sort by brute force), a store of
    40 sequences, and the certified DP computed to 20 bits."""
    r = start(ServeConfig(model=tiny_model_path, store=None, build=40, max_len=5, certify_bits=20.0))
    yield r
    stop(r)


POLICY = "basic8"
POLICY_BUILD = 300


@pytest.fixture(scope="module")
def policy_store(tmp_path_factory) -> str:
    """A store of the password 4-gram under ``--policy basic8`` (at least 8 characters), built to
    ``POLICY_BUILD`` sequences."""
    d = str(tmp_path_factory.mktemp("serve-policy") / "pw4-basic8.store")
    prepare(ServeConfig(model=demo_model_path(), store=d, build=POLICY_BUILD, policy=POLICY))
    return d


@pytest.fixture(scope="module")
def policy_server(policy_store) -> Iterator[Running]:
    r = start(ServeConfig(model=demo_model_path(), store=policy_store, policy=POLICY, certify_bits=0))
    yield r
    stop(r)
