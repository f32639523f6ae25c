"""``arenum serve``: the HTTP API and the page (:mod:`arenum.serve`) on uvicorn, from a read-only store."""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import sys
from typing import Any, Callable

from .common import CLIError, Output, add_constraint_args

__all__ = ["add_serve_parser", "cmd_serve", "DEFAULT_CERTIFY_BITS", "supervise", "reuse_port_supported",
           "listen_socket", "url_of"]

# the certified DP to 64 bits covers most human-chosen passwords (a string past it gets the plain
# bracket, where the command line would sweep deeper); for the password 4-gram it takes about 17 s of
# CPU at start-up and 1.4 GB per process here (docs/serve.md); models without finite-state tables skip it
DEFAULT_CERTIFY_BITS = 64.0

EXAMPLES = [
    "arenum serve pw4.npz --store pw4.store --build 1e6   # build, then serve at http://127.0.0.1:8000",
    "arenum serve pw4.npz --store pw4.store --workers 4   # 4 processes share the built store",
    "arenum serve pw4.npz --store pw4.store --certify-bits 80   # certified brackets to 80 bits",
    "arenum serve pw4.npz --store pw4.store --certify-bits 0    # no certified DP: quick start, small memory",
]


def add_serve_parser(add: Callable[..., argparse.ArgumentParser], int_type: Callable, float_type: Callable,
                     eos_type: Callable) -> argparse.ArgumentParser:
    """The ``serve`` subcommand's options (``add`` makes a subparser from a name, parents and help)."""
    c = add("serve", [], "serve a JSON API and a web page (password meter, sequence explorer) from a read-only store")
    c.add_argument("model", metavar="MODEL", help="n-gram file written by 'arenum fit', or hf:<local dir>")
    g = c.add_argument_group("the store")
    g.add_argument("--store", metavar="DIR", help="the store to answer from, opened read-only (default: a temporary "
                   "store built to --build sequences and removed at exit)")
    g.add_argument("--build", type=int_type("--build", 1), metavar="N",
                   help="first extend the store to the N most likely sequences (default without --store: 100,000)")
    g.add_argument("--max-forwards", type=int_type("--max-forwards", 1), default=5_000_000, metavar="N",
                   help="cap on the forwards of --build (default 5,000,000)")
    g.add_argument("--max-len", type=int_type("--max-len", 1), metavar="N",
                   help="terminating: at most N tokens, EOS included; with --eos none: exactly N tokens")
    g.add_argument("--eos", type=eos_type, default="auto", metavar="auto|none|ID", help="as for the other commands")
    g.add_argument("--prompt", metavar="TEXT", help="hf models: the text every sequence continues")
    g.add_argument("--certify-bits", type=float_type("--certify-bits", 0.0), default=DEFAULT_CERTIFY_BITS,
                   metavar="B", help="finite-state models: compute the certified DP down to B bits at start-up, so "
                   f"that ranks past the built index get its bracket (default {DEFAULT_CERTIFY_BITS:g}; 0: none, the "
                   "plain bracket)")
    g.add_argument("--certify-resolution", type=float_type("--certify-resolution", 0.0, lo_open=True), metavar="R",
                   help="grid cell of that DP in bits (default the library's 1/32; 0.25 is 8x faster, wider)")
    add_constraint_args(c)  # the same flags as rank/count/...: answers under the constraint
    s = c.add_argument_group("the server")
    s.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    s.add_argument("--port", type=int_type("--port", 0), default=8000, help="port (default 8000; 0: any free one)")
    s.add_argument("--workers", type=int_type("--workers", 1), default=1, metavar="N",
                   help="server processes, each opening the store read-only (default 1)")
    s.add_argument("--max-batch", type=int_type("--max-batch", 1), default=100, metavar="N",
                   help="strings per rank request (default 100)")
    s.add_argument("--max-chars", type=int_type("--max-chars", 1), default=64, metavar="N",
                   help="characters per string (default 64)")
    s.add_argument("-q", "--quiet", action="store_true", help="no start-up lines on stderr")
    c.set_defaults(run=cmd_serve, json=False)
    return c


def config_of(args: argparse.Namespace) -> Any:
    """The :class:`~arenum.serve.ServeConfig` of the parsed options."""
    from ..serve import Limits, ServeConfig

    if args.port > 65535:
        raise CLIError(f"--port must be <= 65535, got {args.port}")
    return ServeConfig(model=args.model, store=args.store, build=args.build, max_len=args.max_len, eos=args.eos,
                       prompt=args.prompt, max_forwards=args.max_forwards, certify_bits=args.certify_bits,
                       certify_resolution=args.certify_resolution,
                       limits=Limits(max_batch=args.max_batch, max_chars=args.max_chars),
                       policy=args.policy, min_length=args.min_length, max_length=args.max_length,
                       classes=args.classes, require=list(args.require or []), regex=args.regex,
                       blocklist=os.path.abspath(args.blocklist) if args.blocklist else None)


def cmd_serve(args: argparse.Namespace) -> Output:
    try:
        import uvicorn

        from ..serve import Service, create_app, prepare
        from ..serve.app import ENV_CONFIG
    except ImportError as exc:
        raise CLIError(f"arenum serve needs the serve extra (pip install 'arenum[serve]'): {exc}") from None
    say = (lambda s: None) if args.quiet else (lambda s: sys.stderr.write(f"arenum: {s}\n"))
    old_term = _term_as_interrupt()  # before the build: a SIGTERM there removes a temporary store too
    try:
        cfg, temporary = prepare(config_of(args), say)
    except BaseException:
        if old_term is not None:
            signal.signal(signal.SIGTERM, old_term)
        raise
    common = dict(host=args.host, port=args.port, access_log=False, log_level="warning", server_header=False,
                  proxy_headers=False)  # no proxy in front: no X-Forwarded-* parsing on every request
    try:
        if args.workers == 1:
            sock = listen_socket(args.host, args.port, reuse_port=False)  # a port in use: said before the DP
            if cfg.certify_bits:
                say(f"computing the certified DP to {cfg.certify_bits:g} bits for ranks past the index, if the model "
                    "has finite-state tables (--certify-bits; 0 skips it)")
            try:
                svc = Service.open(cfg, temporary=temporary)
            except BaseException:
                sock.close()
                raise
            try:
                info = svc.info()
                cert = (f", certified brackets to {info['certified_bits']:g} bits ({info['warm_seconds']:.1f} s)"
                        if info["certified_bits"] else "")
                held = ("the whole support" if info["built_bits"] == float("inf")
                        else f"to {info['built_bits']:.1f} bits")
                say(f"serving {info['model']} at {url_of(sock)} ({info['indexed_sequences']:,} "
                    f"sequences held exactly, {held}{cert}; Ctrl-C stops)")
                try:  # as uvicorn.run: the server re-raises the SIGINT it stopped on once it has shut down
                    uvicorn.Server(uvicorn.Config(create_app(svc), **common)).run(sockets=[sock])
                except KeyboardInterrupt:
                    pass
                finally:
                    sock.close()
            finally:
                svc.close()
        else:
            os.environ[ENV_CONFIG] = json.dumps(cfg.as_json())

            def announce(url: str) -> None:
                say(f"serving {cfg.model} at {url} from {args.workers} processes "
                    f"(each opens {cfg.store} read-only; Ctrl-C stops)")

            if reuse_port_supported():
                supervise(args.workers, args.host, args.port, common, announce)
            else:  # one listening socket shared by the processes (uvicorn's supervisor)
                announce(f"http://{args.host}:{args.port}/")
                uvicorn.run("arenum.serve.app:app_from_env", factory=True, workers=args.workers, **common)
    finally:
        if old_term is not None:
            signal.signal(signal.SIGTERM, old_term)
        if temporary:
            shutil.rmtree(cfg.store, ignore_errors=True)
    return Output(None, [])


def _term_as_interrupt() -> Any:
    """SIGTERM handled as Ctrl-C while serving (the old handler returned; ``None`` off the main
    thread): uvicorn stops on it and re-raises it once shut down, which the default handler would end
    the process on before the temporary store is removed."""
    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    try:
        return signal.signal(signal.SIGTERM, interrupt)
    except ValueError:  # not the main thread
        return None


# ---------------------------------------------------------------- --workers N: one socket each (SO_REUSEPORT)
def reuse_port_supported() -> bool:
    """Whether the kernel spreads new connections over sockets bound to one port (Linux SO_REUSEPORT)."""
    return sys.platform.startswith("linux") and hasattr(socket, "SO_REUSEPORT")


def _bind(host: str, port: int, reuse_port: bool = True) -> socket.socket:
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
    except BaseException:
        sock.close()
        raise
    return sock


def listen_socket(host: str, port: int, reuse_port: bool = True) -> socket.socket:
    """A socket bound to ``host:port`` (``port`` 0: one the system picks), or a one-line
    :class:`CLIError` saying why it cannot be."""
    try:
        return _bind(host, port, reuse_port)
    except OSError as exc:
        raise CLIError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None


def url_of(sock: socket.socket) -> str:
    """The address a bound socket serves, with the port it really got."""
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}/" if ":" in host else f"http://{host}:{port}/"


def _serve_process(host: str, port: int, common: dict, ready: Any) -> None:
    """One server process: its own listening socket on the shared port (SO_REUSEPORT), the app of
    ``$ARENUM_SERVE_CONFIG`` (:func:`arenum.serve.app.app_from_env`) on uvicorn; sets ``ready`` once
    it listens."""
    import uvicorn

    class Server(uvicorn.Server):
        async def startup(self, sockets: Any = None) -> None:
            await super().startup(sockets)
            if not self.should_exit:
                ready.set()

    sock = _bind(host, port)
    Server(uvicorn.Config("arenum.serve.app:app_from_env", factory=True, **common)).run(sockets=[sock])


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def supervise(n: int, host: str, port: int, common: dict, announce: Any = None) -> None:
    """Run ``n`` server processes, each with its own listening socket on ``host:port`` (SO_REUSEPORT:
    the kernel spreads new connections evenly over the processes, where one shared socket lets
    whichever process wakes first take a burst of them). A process that exits once it served is
    restarted; one that exits before it listens (it could not start) stops them all with a one-line
    error. SIGINT or SIGTERM stops them (each finishes its requests), then returns."""
    import multiprocessing as mp
    from multiprocessing.connection import wait

    holder = listen_socket(host, port)  # holds the port (bound, never listening: it takes no connection)
    port = holder.getsockname()[1]
    if announce is not None:
        announce(url_of(holder))  # the port the processes share (the system's pick for --port 0)
    ctx = mp.get_context("spawn")
    procs: list[tuple[Any, Any]] = []

    def spawn() -> tuple[Any, Any]:
        ready = ctx.Event()
        p = ctx.Process(target=_serve_process, args=(host, port, common, ready), name="arenum-serve")
        p.start()
        return p, ready

    old = {sig: signal.signal(sig, _interrupt) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        procs = [spawn() for _ in range(n)]
        while True:
            wait([p.sentinel for p, _ in procs])
            for j, (p, ready) in enumerate(procs):
                if p.exitcode is not None:
                    if not ready.is_set():
                        raise CLIError(f"a server process exited with status {p.exitcode} before it listened")
                    procs[j] = spawn()
    except KeyboardInterrupt:
        pass
    finally:
        for p, _ in procs:
            if p.is_alive():
                os.kill(p.pid, signal.SIGTERM)
        for p, _ in procs:
            p.join(60)
            if p.is_alive():
                p.kill()
                p.join()
        holder.close()
        for sig, handler in old.items():
            signal.signal(sig, handler)
