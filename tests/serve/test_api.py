"""The JSON API over real HTTP: answers equal the library's, the CLI's and brute force; bad input is a
4xx in one line; no request builds, writes or logs what it was sent."""
from __future__ import annotations

import asyncio
import concurrent.futures as cf
import io
import json
import logging
import math
import os
import subprocess
import sys
from contextlib import redirect_stdout

import httpx
import numpy as np
import pytest

from arenum.cli import main
from arenum.cli.demo import demo_model_path
from arenum.models.ngram import NGramModel
from arenum.testing import brute_force

from .conftest import DEMO_BUILD

LN2 = math.log(2.0)
IN_BUDGET = ["123456", "password", "dragon", "monkey", "qwerty", "abc123", "master"]
VOLATILE = {"forwards", "forwards_total", "seconds", "command", "model", "steps"}  # + the CLI's model header


def post(url: str, path: str, doc) -> httpx.Response:
    return httpx.post(url + path, json=doc, timeout=30)


def get(url: str, path: str) -> httpx.Response:
    return httpx.get(url + path, timeout=30)


def library(store: str, **kw):
    """The library's own enumerable over the same store (read-only, the same frozen cap)."""
    m = NGramModel.load(demo_model_path())
    probe = m.enumerable(store=store, store_readonly=True, **kw)
    held = probe.stats["tree_prefixes"]
    probe.close()
    return m, m.enumerable(store=store, store_readonly=True, max_prefixes=held, **kw)


def test_rank_equals_the_library_and_the_cli(demo_server, demo_store):
    r = post(demo_server.url, "/api/rank", {"strings": IN_BUDGET})
    assert r.status_code == 200
    got = r.json()
    m, enum = library(demo_store)
    for s, d in zip(IN_BUDGET, got):
        lib = enum.rank(m.encode(s))
        assert d["exact"] is True and lib.exact
        assert d["rank"] == lib.rank and d["guess_number"] == lib.rank + 1
        assert d["log_prob"] == lib.log_prob and d["cumulative"] == lib.cumulative
        steps = d["steps"]
        assert [st["token"] for st in steps] == d["tokens"] == list(m.encode(s))
        total = 0.0
        for st in steps:
            total += st["log_prob"]
        assert total == pytest.approx(lib.log_prob, abs=1e-9)
    enum.close()
    buf = io.StringIO()
    with redirect_stdout(buf):
        assert main(["rank", *IN_BUDGET, "-m", demo_model_path(), "--store", demo_store, "--json", "-q"]) == 0
    cli = [json.loads(line) for line in buf.getvalue().splitlines()]
    skip = VOLATILE | set(demo_server.service.m.info)
    for c, d in zip(cli, got):
        assert {k: v for k, v in c.items() if k not in skip} == {k: v for k, v in d.items() if k not in skip}
        assert set(d) - skip == set(c) - skip and "rank" in d and "method" in d


def test_positions_counts_and_masses_equal_the_library(demo_server, demo_store):
    m, enum = library(demo_store)
    url = demo_server.url
    for k in (1, 17, 1000, DEMO_BUILD):
        d = get(url, f"/api/threshold?k={k}").json()
        assert d["exact"] and d["log_prob"] == float(enum.threshold(k))
        assert d["tokens"] == list(enum.unrank(k - 1)[0])
    d = get(url, "/api/unrank?i=41").json()
    seq, lp = enum.unrank(41)
    assert d["tokens"] == list(seq) and d["log_prob"] == lp and d["sequence"] == m.decode(seq[:-1])
    assert d["method"] == "exact" and d["guess_number"] == 42
    page = get(url, "/api/slice?start=990&k=20").json()
    assert page["method"] == "exact" and [it["guess_number"] for it in page["items"]] == list(range(991, 1011))
    assert [it["tokens"] for it in page["items"]] == [list(s) for s, _ in enum.slice(990, 20)]
    assert [it["rank"] for it in page["items"]] == list(range(990, 1010))
    built = get(url, "/api/info").json()["built_bits"]
    for bits in (10.0, built - 0.25):
        c = get(url, f"/api/count?bits={bits}").json()
        assert c["exact"] and c["count"] == int(enum.count(-bits * LN2))
        ms = get(url, f"/api/mass?bits={bits}").json()
        lo, hi = enum.mass_above(-bits * LN2)
        assert (ms["mass_lo"], ms["mass_hi"]) == (lo, hi)
    curve = get(url, "/api/curve?points=12").json()
    assert curve["exact"][-1]["count"] >= DEMO_BUILD
    for p in curve["exact"]:
        assert p["count"] == int(enum.count(p["log_prob"])) and p["log_prob"] == float(enum.threshold(p["rank"]))
    kids = post(url, "/api/children", {"prefix": "pass", "k": 5}).json()
    toks, lps = enum.oracle.table(tuple(m.encode("pass", eos=False)))
    assert [c["token"] for c in kids["children"]] == toks[:5].tolist()
    assert [c["log_prob"] for c in kids["children"]] == lps[:5].tolist()
    assert kids["more"] == len(toks) - 5
    enum.close()


def _files(store: str) -> dict:
    return {f: (os.stat(os.path.join(store, f)).st_size, os.stat(os.path.join(store, f)).st_mtime_ns)
            for f in sorted(os.listdir(store))}


def test_past_the_index_a_certified_bracket_and_no_forward_beyond_the_strings(demo_server, demo_store):
    url = demo_server.url
    files = _files(demo_store)
    before = get(url, "/api/info").json()
    deep = ["correcthorse", "zzzzqqqq", "iloveyou2"]
    got = post(url, "/api/rank", {"strings": deep, "steps": False}).json()
    for d in got:
        assert d["exact"] is False and d["method"] == "bracket"
        assert d["rank_lo"] <= d["rank_hi"] and d["rank_lo"] >= DEMO_BUILD - 1
        assert d["rank_hi"] <= math.exp(-d["log_prob"]) * (1 + 1e-9)  # each better sequence has p > p(x)
    assert get(url, "/api/count?bits=60").json()["guarantee"] == "bracket"
    r = get(url, f"/api/unrank?i={10 * DEMO_BUILD}")
    assert r.status_code == 422 and "past the built index" in r.json()["error"]
    assert get(url, f"/api/threshold?k={10 * DEMO_BUILD}").status_code == 422
    after = get(url, "/api/info").json()
    assert after["prefixes"] == before["prefixes"] and after["indexed_sequences"] == before["indexed_sequences"]
    # the only model work: scoring the strings' own prefixes (at most one forward per character + 1)
    assert after["forwards_since_start"] - before["forwards_since_start"] <= sum(len(s) + 1 for s in deep)
    assert _files(demo_store) == files  # the server wrote nothing to the store
    demo_server.service.check()


@pytest.mark.parametrize("method,path,doc,status,words", [
    ("post", "/api/rank", {"strings": ["Password"]}, 400, "unknown symbol 'P'"),
    ("post", "/api/rank", {"strings": ["a" * 41]}, 400, "past the limit of 40"),
    ("post", "/api/rank", {"strings": ["abc"] * 9}, 400, "batch limit of 8"),
    ("post", "/api/rank", {"strings": [""]}, 400, "is empty"),
    ("post", "/api/rank", {"strings": "abc"}, 400, "must be a list"),
    ("post", "/api/rank", {"strings": [3]}, 400, "must be a string"),
    ("post", "/api/rank", {"string": ["abc"]}, 400, "unknown field 'string'"),
    ("post", "/api/rank", {"strings": ["abc"], "steps": "yes"}, 400, "steps must be true or false"),
    ("get", "/api/unrank?i=-3", None, 400, "i must be >= 0"),
    ("get", "/api/unrank?i=2.5", None, 400, "i must be an integer"),
    ("get", "/api/unrank?i=1e3", None, 400, "i must be an integer"),
    ("get", "/api/unrank?i=99999999999999999999999", None, 400, "i must be <="),
    ("get", "/api/unrank", None, 400, "missing parameter 'i'"),
    ("get", "/api/threshold?k=0", None, 400, "k must be >= 1"),
    ("get", "/api/slice?start=0&k=101", None, 400, "k must be <= 100"),
    ("get", "/api/count?bits=nan", None, 400, "bits must be finite"),
    ("get", "/api/count?bits=3&min_log_prob=-2", None, 400, "exactly one of"),
    ("get", "/api/count?bitz=3", None, 400, "unknown parameter 'bitz'"),
    ("get", "/api/curve?points=1", None, 400, "points must be >= 2"),
    ("post", "/api/children", {"prefix": "pas€"}, 400, "unknown symbol '€'"),
    ("get", "/api/rank", None, 405, "GET is not allowed"),
    ("get", "/api/unrank?i=%EF%BC%91", None, 400, "i must be an integer"),  # a full-width 1: read as 1 before
    ("get", "/api/unrank?i=%C2%B2", None, 400, "i must be an integer"),  # a superscript 2: a raw int() message
    ("get", "/api/unrank?i=" + "9" * 5000, None, 400, "i must be an integer"),  # not Python's digit limit
    ("get", "/api/unrank?i=1&i=2", None, 400, "'i' is given more than once"),
    ("get", "/api/count?bits=%D9%A1", None, 400, "bits must be a number"),  # an Arabic-Indic 1
    ("get", "/api/count?bits=1_0", None, 400, "bits must be a number"),  # float() reads 1_0 as 10
    ("post", "/api/rank?password=secret", {"strings": ["abc"]}, 400, "unknown parameter 'password'"),
    ("post", "/api/children?k=3", {"prefix": "pa"}, 400, "unknown parameter 'k'"),
    ("get", "/api/nothing", None, 404, "no such route"),
])
def test_bad_input_is_a_4xx_in_one_line(demo_server, method, path, doc, status, words):
    r = post(demo_server.url, path, doc) if method == "post" else get(demo_server.url, path)
    assert r.status_code == status, r.text
    msg = r.json()["error"]
    assert words in msg and "\n" not in msg and "Traceback" not in msg


def test_bodies_that_are_not_json_or_too_large(demo_server):
    url = demo_server.url
    r = httpx.post(url + "/api/rank", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 400 and "JSON object" in r.json()["error"]
    r = httpx.post(url + "/api/rank", content=b"[1, 2]")
    assert r.status_code == 400
    r = httpx.post(url + "/api/rank", content=b"x" * (65 * 1024))
    assert r.status_code == 413 and "larger than" in r.json()["error"]
    for path, key in (("/api/rank", "strings"), ("/api/children", "prefix")):  # 10 KB of nesting: was a 500
        r = httpx.post(url + path, content=('{"%s": ' % key + "[" * 5000 + "]" * 5000 + "}").encode())
        assert r.status_code == 400 and "nested too deeply" in r.json()["error"], r.text
    for q in ("bits=1e308", "min_log_prob=-1e308"):  # a threshold past any DP: a bracket (was a 500)
        for route in ("count", "mass"):
            r = get(url, f"/api/{route}?{q}")
            assert r.status_code == 200 and r.json()["exact"] is False, r.text
    assert get(url, "/api/info").status_code == 200  # still serving


def test_unknown_symbols_and_impossible_strings_per_string(demo_server):
    # a string the support cannot hold (past a length cap) gets its own error, the others their answers
    r = post(demo_server.url, "/api/rank", {"strings": ["dragon", "monkey"]})
    assert [d.get("error") for d in r.json()] == [None, None]


def test_concurrent_clients_get_the_sequential_answers(demo_server):
    url = demo_server.url
    jobs = [("rank", s) for s in IN_BUDGET + ["correcthorse"]] + [("unrank", i) for i in (0, 5, 77, 2999)] \
        + [("slice", i) for i in (0, 100)]

    def ask(job):
        kind, v = job
        if kind == "rank":
            return post(url, "/api/rank", {"strings": [v], "steps": False}).json()[0]["rank"]
        if kind == "unrank":
            return get(url, f"/api/unrank?i={v}").json()["tokens"]
        return [it["tokens"] for it in get(url, f"/api/slice?start={v}&k=10").json()["items"]]

    want = [ask(j) for j in jobs]
    with cf.ThreadPoolExecutor(16) as ex:
        for _ in range(3):
            assert list(ex.map(ask, jobs * 2)) == want * 2
    demo_server.service.check()


def test_concurrent_rank_requests_batched_keep_their_own_answers_and_errors(demo_server):
    """Rank requests arriving together share one trip to the worker thread (a micro-batch): each still
    gets its own records, and a bad request its own 4xx, whatever it was batched with."""
    url = demo_server.url
    good = [IN_BUDGET[j:j + 3] for j in range(len(IN_BUDGET) - 2)]
    bad = [(["pas€"], 400, "unknown symbol"), (["x" * 41], 400, "past the limit"),
           (["a"] * 9, 400, "batch limit"), ([], 400, "strings is empty")]
    want = [[d["rank"] for d in post(url, "/api/rank", {"strings": g, "steps": False}).json()] for g in good]
    svc = demo_server.service
    direct = svc.rank_many([(good[0], False), (["pas€"], False), (good[1], True)])
    assert isinstance(direct[1], ValueError) and "unknown symbol" in str(direct[1])
    assert [d["rank"] for d in direct[0]] == want[0] and [d["rank"] for d in direct[2]] == want[1]
    assert "steps" in direct[2][0] and "steps" not in direct[0][0]
    rng = np.random.default_rng(7)

    async def storm():
        jobs = [("good", j) for j in range(len(good))] * 6 + [("bad", j) for j in range(len(bad))] * 3
        order = rng.permutation(len(jobs))
        async with httpx.AsyncClient(timeout=60) as c:
            async def one(job):
                kind, j = job
                body = good[j] if kind == "good" else bad[j][0]
                return job, await c.post(url + "/api/rank", json={"strings": body, "steps": False})
            return await asyncio.gather(*(one(jobs[i]) for i in order))

    for _ in range(3):
        for (kind, j), r in asyncio.run(storm()):
            if kind == "good":
                assert r.status_code == 200 and [d["rank"] for d in r.json()] == want[j]
            else:
                assert r.status_code == bad[j][1] and bad[j][2] in r.json()["error"], r.text
    svc.check()


def test_answers_hold_while_another_process_extends_the_store(demo_server, demo_store):
    url = demo_server.url
    want = post(url, "/api/rank", {"strings": IN_BUDGET, "steps": False}).json()
    manifest = os.path.join(demo_store, "manifest.json")
    gen_before = json.load(open(manifest))["generation"]
    proc = subprocess.Popen([sys.executable, "-m", "arenum.cli", "build", "-m", demo_model_path(), "--budget",
                             str(4 * DEMO_BUILD), "--store", demo_store, "-q"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    rounds = 0
    while proc.poll() is None and rounds < 400:  # bounded: a build of 12,000 takes a few seconds
        got = post(url, "/api/rank", {"strings": IN_BUDGET, "steps": False}).json()
        assert [d["rank"] for d in got] == [d["rank"] for d in want]
        rounds += 1
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err.decode()
    assert json.load(open(manifest))["generation"] > gen_before  # the writer snapshotted beside the reader
    got = post(url, "/api/rank", {"strings": IN_BUDGET, "steps": False}).json()
    assert got == [{**d, "seconds": g["seconds"], "forwards_total": g["forwards_total"]} for d, g in zip(want, got)]
    assert rounds > 0


def test_typed_strings_are_never_logged(demo_server, caplog, capfd):
    secret = "sunshine"
    with caplog.at_level(logging.DEBUG):
        assert post(demo_server.url, "/api/rank", {"strings": [secret]}).status_code == 200
        assert post(demo_server.url, "/api/rank", {"strings": [secret + "Q"]}).status_code == 400
    out, err = capfd.readouterr()
    assert secret not in out + err
    assert all(secret not in r.getMessage() for r in caplog.records)


def _tiny_truth(path: str, max_len: int):
    m = NGramModel.load(path)

    def table(prefix):
        lp = np.asarray(m.next_logprobs(prefix), dtype=np.float64)
        order = np.argsort(-lp, kind="stable")
        return [int(t) for t in order], [float(lp[t]) for t in order]

    return m, brute_force(table, eos=m.eos, cap=max_len)


def test_every_regime_holds_the_brute_force_truth(tiny_server, tiny_model_path):
    """Tiny model, whole support sorted by brute force: exact answers equal the truth, certified and
    plain brackets hold it."""
    m, truth = _tiny_truth(tiny_model_path, 5)
    scores = np.array([s for _, s in truth])
    url = tiny_server.url
    info = get(url, "/api/info").json()
    assert info["certified_bits"] == 20.0 and info["indexed_sequences"] >= 40
    by_word = {m.decode(q[:-1]): sc for q, sc in truth if len(q) > 1}
    words = sorted(by_word)
    methods = set()
    for j in range(0, len(words), 8):
        batch = words[j:j + 8]
        for s, d in zip(batch, post(url, "/api/rank", {"strings": batch, "steps": False}).json()):
            assert d["log_prob"] == by_word[s]
            true_rank = int((scores > d["log_prob"]).sum())
            methods.add(d["method"])
            if d["exact"]:
                assert d["rank"] == true_rank, s
            else:
                assert d["rank_lo"] <= true_rank <= d["rank_hi"], (s, d)
                assert d["rank_lo"] < d["rank_hi"]
    assert {"exact", "certified"} <= methods
    for bits in (3.0, 9.0, 15.0, 19.0):
        d = get(url, f"/api/count?bits={bits}").json()
        true = int((scores >= -bits * LN2).sum())
        assert d["count_lo"] <= true <= d["count_hi"]
        assert d["exact"] == (d["count_lo"] == d["count_hi"])
        if d["exact"]:
            assert d["count"] == true
    for k in (1, 7, 40):
        d = get(url, f"/api/threshold?k={k}").json()
        assert d["exact"] and d["log_prob"] == truth[k - 1][1]
    tiny_server.service.check()


def test_under_a_policy_answers_equal_the_librarys_and_the_clis(policy_server, policy_store):
    """``--policy basic8``: every answer counts only the passwords of at least 8 characters, equal to
    the library's enumerable under the same constraint and to ``arenum rank --policy basic8 --json``;
    each answer names the constraint; a string the policy refuses gets its own one-line error."""
    from arenum.constraints import build

    from .conftest import POLICY, POLICY_BUILD

    url = policy_server.url
    info = get(url, "/api/info").json()
    assert info["constraint"] == POLICY and info["indexed_sequences"] >= POLICY_BUILD
    m = NGramModel.load(demo_model_path())
    c = build(policy=POLICY)
    e = m.enumerable(store=policy_store, store_readonly=True, constraint=c)
    page = get(url, "/api/slice?start=0&k=40").json()
    assert page["constraint"] == POLICY
    texts = [it["sequence"] for it in page["items"]]
    assert all(len(t) >= 8 for t in texts)
    assert [it["log_prob"] for it in page["items"]] == [e.unrank(i)[1] for i in range(40)]
    strings = texts[::7] + ["password1", "dragon"]
    got = post(url, "/api/rank", {"strings": strings, "steps": False}).json()
    assert "constraint basic8" in got[-1]["error"] and "\n" not in got[-1]["error"]
    for s, d in zip(strings[:-1], got[:-1]):
        lib = e.rank(m.encode(s))
        assert d["constraint"] == POLICY and d["rank"] == lib.rank and d["exact"] == lib.exact
        assert d["method"] == lib.method and d["log_prob"] == lib.log_prob
    pw1 = next(d for d in got if d["string"] == "password1")
    free = NGramModel.load(demo_model_path()).enumerable()
    assert pw1["rank"] < free.rank(m.encode("password1")).rank  # the shorter passwords ahead of it do not count
    cnt = get(url, "/api/count?bits=17").json()
    want = e.count_bracket(-17 * LN2)
    assert cnt["constraint"] == POLICY and (cnt["count_lo"], cnt["count_hi"]) == (want.lo, want.hi)
    e.close()
    buf = io.StringIO()
    with redirect_stdout(buf):
        assert main(["rank", *strings[:-1], "-m", demo_model_path(), "--store", policy_store, "--policy", POLICY,
                     "--json", "-q"]) == 0
    cli = [json.loads(line) for line in buf.getvalue().splitlines()]
    skip = VOLATILE | set(policy_server.service.m.info)
    for cl, d in zip(cli, got):
        assert {k: v for k, v in cl.items() if k not in skip} == {k: v for k, v in d.items() if k not in skip}


def test_the_front_and_the_starlette_route_answer_rank_alike(demo_server):
    """``POST /api/rank`` is answered by the plain ASGI front; the Starlette route behind it (which a
    request reaches only past the front) gives the same status, body and headers."""
    app = demo_server.server.config.app
    bodies = [b'{"strings": ["dragon", "monkey"], "steps": true}', b'{"strings": ["pas\\u20ac"]}', b"{not json",
              b'{"strings": ["abc"], "steps": "yes"}', json.dumps({"strings": ["abc"] * 9}).encode()]

    async def ask(target, body):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=target), base_url="http://t") as c:
            return await c.post("/api/rank", content=body, headers={"content-type": "application/json"})

    async def both():
        return [(await ask(app, b), await ask(app.app, b)) for b in bodies]

    for front, inner in asyncio.run(both()):
        assert front.status_code == inner.status_code
        a, b = front.json(), inner.json()
        if isinstance(a, list):
            a = [{k: v for k, v in d.items() if k not in VOLATILE - {"steps"}} for d in a]
            b = [{k: v for k, v in d.items() if k not in VOLATILE - {"steps"}} for d in b]
        assert a == b
        for h in ("content-type", "content-security-policy", "cache-control", "x-content-type-options",
                  "content-length"):
            assert h in front.headers and (h == "content-length" or front.headers[h] == inner.headers[h])
    over = httpx.post(demo_server.url + "/api/rank", content=b'{"strings": ["' + b"a" * (70 * 1024) + b'"]}')
    assert over.status_code == 413 and over.headers["cache-control"] == "no-store"


def test_json_is_encoded_once_with_non_finite_floats_as_null_and_numpy_scalars_as_numbers():
    from arenum.serve.app import json_bytes
    from arenum.serve.service import json_safe

    doc = {"a": math.inf, "b": [np.int64(3), np.float64(-math.inf), 1.5], "c": {"d": math.nan}, "e": "Infinity"}
    assert json.loads(json_bytes(doc)) == {"a": None, "b": [3, None, 1.5], "c": {"d": None}, "e": "Infinity"}
    rec = json_safe({"rank_hi": math.inf, "bits": 3.0, "n": 2, "s": "NaN", "x": None, "t": [1, 2]})
    assert rec == {"rank_hi": None, "bits": 3.0, "n": 2, "s": "NaN", "x": None, "t": [1, 2]}
    assert json_bytes(rec, safe=True) == b'{"rank_hi":null,"bits":3.0,"n":2,"s":"NaN","x":null,"t":[1,2]}'
    with pytest.raises(ValueError):  # safe=True trusts the caller: a non-finite float is refused, never written
        json_bytes({"x": math.inf}, safe=True)


def test_one_certify_default_for_the_library_and_the_command_line():
    from arenum.cli import build_parser
    from arenum.serve import ServeConfig
    from arenum.serve.service import DEFAULT_CERTIFY_BITS

    args = build_parser().parse_args(["serve", demo_model_path()])
    assert ServeConfig(model="m").certify_bits == args.certify_bits == DEFAULT_CERTIFY_BITS == 64.0


def test_a_build_larger_than_the_support_holds_all_of_it(tiny_model_path):
    """The default --build 100000 on a small support stopped the server at start-up (out of range);
    now it holds the whole support, and a rank past it is past the support, not past the index."""
    from arenum.serve.service import ServeConfig

    from .conftest import start, stop

    r = start(ServeConfig(model=tiny_model_path, store=None, build=100_000, max_len=3, certify_bits=0.0))
    try:
        n = r.service.indexed
        e = NGramModel.load(tiny_model_path).enumerable(max_len=3)
        assert n == int(e.count(-math.inf))
        last = get(r.url, f"/api/unrank?i={n - 1}").json()
        assert last["exact"] and last["tokens"] == list(e.unrank(n - 1)[0])
        past = get(r.url, f"/api/unrank?i={n}")
        assert past.status_code == 422 and "past the end of the support" in past.json()["error"]
    finally:
        stop(r)


def test_answers_do_not_depend_on_the_strings_asked_before(tiny_model_path, tmp_path):
    """A string ranked past the index let the tree deepen in memory (no forward: the prefixes held
    sufficed), so later counts, masses and ranks changed with what other clients had sent (QA: a
    count's lower end 30 -> 33), and two server processes could answer one request differently. The
    served index is frozen: the same answers before and after, and in a second process's service."""
    import itertools

    from arenum.serve import ServeConfig, Service, prepare

    cfg, _ = prepare(ServeConfig(model=tiny_model_path, store=str(tmp_path / "st"), build=30, max_len=5,
                                 certify_bits=0))
    one, two = Service.open(cfg), Service.open(cfg)
    try:
        def answers(svc):  # less the time taken and the forwards the scoring of each string paid
            got = [svc.count(bits=b) for b in (6.0, 10.0, 40.0)] + [svc.mass(bits=b) for b in (6.0, 40.0)] + \
                svc.rank(["cccc", "abcab", "ba"], steps=False)
            return [{k: v for k, v in d.items() if k not in ("seconds", "forwards", "forwards_total")} for d in got]

        before = answers(one)
        words = ["".join(p) for n in range(1, 5) for p in itertools.product("abc", repeat=n)]
        for j in range(0, len(words), 16):
            one.rank(words[j:j + 16], steps=False)
        assert answers(one) == before == answers(two)
        one.check()
    finally:
        one.close()
        two.close()


def test_children_at_the_last_place_offer_only_the_end(tiny_server):
    """At max_len - 1 tokens only the end can follow (QA: every letter was listed with its
    probability, and choosing one was then refused)."""
    kids = post(tiny_server.url, "/api/children", {"prefix": "abca"}).json()
    assert [c["end"] for c in kids["children"]] == [True] and kids["more"] == 0
    assert len(post(tiny_server.url, "/api/children", {"prefix": "abc"}).json()["children"]) > 1
