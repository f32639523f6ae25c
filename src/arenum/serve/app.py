"""The ASGI application of ``arenum serve``: the JSON API under ``/api`` and the page at ``/``.

Starlette routes; every query runs on one worker thread, first in first out (never on the event
loop), through one :class:`~arenum.serve.service.Service`. Strings a user types (passwords) travel only in POST bodies,
never in URLs, and nothing here logs a request. Errors are JSON ``{"error": "one line"}`` with a 4xx
status (400 bad input, 404 no such route, 405 wrong method, 413 body too large, 422 past the server's
caps); anything unexpected is a 500 that names only the exception's type.
"""
from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any, AsyncIterator, Callable

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.middleware import Middleware
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from ..cli.common import dumps
from .service import RequestError, ServeConfig, Service, describe_error

__all__ = ["create_app", "app_from_env", "STATIC", "ENV_CONFIG", "MAX_BODY"]

STATIC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "static")
ENV_CONFIG = "ARENUM_SERVE_CONFIG"
MAX_BODY = 64 * 1024
CSP = "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'"


class _JSON(JSONResponse):
    def render(self, content: Any) -> bytes:
        try:  # the C encoder, when every value is a plain finite JSON value (most answers)
            return json.dumps(content, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode("utf-8")
        except (TypeError, ValueError):  # a numpy scalar or a non-finite float: as the command line writes it
            return dumps(content).encode("utf-8")  # non-finite floats as null, numpy scalars as numbers


def _error(status: int, message: str) -> Response:
    return _JSON({"error": message}, status_code=status)


async def _body(request: Request) -> dict:
    size = request.headers.get("content-length")
    if size is not None and (not size.isdigit() or int(size) > MAX_BODY):
        raise RequestError(f"request body is larger than {MAX_BODY:,} bytes", 413)
    raw = b""
    async for chunk in request.stream():
        raw += chunk
        if len(raw) > MAX_BODY:
            raise RequestError(f"request body is larger than {MAX_BODY:,} bytes", 413)
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise RequestError("the request body must be a JSON object") from None
    if not isinstance(doc, dict):
        raise RequestError("the request body must be a JSON object")
    return doc


def _query(request: Request, *names: str) -> dict:
    q = request.query_params
    unknown = sorted(set(q.keys()) - set(names))
    if unknown:
        raise RequestError(f"unknown parameter {unknown[0]!r} (this route takes {', '.join(names) or 'none'})")
    return {n: q[n] for n in names if n in q}


class _Headers:
    """Pure ASGI middleware: every response says the page loads nothing from elsewhere (CSP) and that
    answers (which hold typed passwords) stay out of caches."""

    HEADERS = [(b"content-security-policy", CSP.encode()), (b"cache-control", b"no-store"),
               (b"x-content-type-options", b"nosniff")]

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with(message: dict) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": list(message.get("headers", [])) + self.HEADERS}
            await send(message)

        await self.app(scope, receive, send_with)


def create_app(service: Service, *, close_at_exit: bool = False) -> Starlette:
    """The Starlette app answering from ``service`` (see ``docs/serve.md`` for the routes); with
    ``close_at_exit`` the app's lifespan closes the service when the server stops."""

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            pool.shutdown(wait=True)
            if close_at_exit:
                service.close()

    # one worker thread, first in first out: the service answers one query at a time anyway, and a
    # queue (unlike threads contending for its lock) keeps the slowest wait near the queue's length
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="arenum-serve")

    async def run(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Response:
        try:
            loop = asyncio.get_running_loop()
            return _JSON(await loop.run_in_executor(pool, functools.partial(fn, *args, **kwargs)))
        except Exception as exc:  # one line, no traceback, nothing the client sent echoed to a log
            status, msg = describe_error(exc)
            return _error(status, msg)

    async def guarded(request: Request, handler: Callable[[Request], Any]) -> Response:
        try:
            return await handler(request)
        except RequestError as exc:
            return _error(exc.status, str(exc))

    async def info(request: Request) -> Response:
        return await guarded(request, lambda r: run(service.info) if not _query(r) else None)

    # rank requests that arrive while a query runs wait here and go to the worker thread together:
    # one hop, one lock take and one scoring call for the lot (at most max_batch strings, the most
    # one request may send, so no batch holds the lock longer than one bounded query)
    pending: list[tuple[Any, bool, asyncio.Future]] = []
    drainer: list[asyncio.Task] = []

    def size(strings: Any) -> int:
        return len(strings) if isinstance(strings, list) else 1

    async def drain() -> None:
        loop = asyncio.get_running_loop()
        batch: list[tuple[Any, bool, asyncio.Future]] = []
        try:
            while pending:
                take, n = 1, size(pending[0][0])
                while take < len(pending) and n + size(pending[take][0]) <= service.limits.max_batch:
                    n += size(pending[take][0])
                    take += 1
                batch = pending[:take]
                del pending[:take]
                try:
                    results = await loop.run_in_executor(pool, service.rank_many, [(s, st) for s, st, _ in batch])
                except Exception as exc:  # noqa: BLE001 - every request of the batch answers this error
                    results = [exc] * len(batch)
                for (_, _, fut), res in zip(batch, results):
                    if not fut.done():  # a client that went away cancelled its own future
                        fut.set_result(res)
        finally:
            for _, _, fut in batch + pending:  # left undone only when the drain was cancelled (the server stops)
                if not fut.done():
                    fut.cancel()
            del pending[:]
            drainer.clear()

    async def ranked(strings: Any, steps: bool) -> Response:
        fut = asyncio.get_running_loop().create_future()
        pending.append((strings, steps, fut))
        if not drainer:
            drainer.append(asyncio.ensure_future(drain()))
        res = await fut
        if isinstance(res, BaseException):
            status, msg = describe_error(res)
            return _error(status, msg)
        return _JSON(res)

    async def rank(request: Request) -> Response:
        async def h(r: Request) -> Response:
            body = await _body(r)
            extra = sorted(set(body) - {"strings", "steps"})
            if extra:
                raise RequestError(f"unknown field {extra[0]!r} (rank takes strings, steps)")
            if "strings" not in body:
                raise RequestError("rank needs {\"strings\": [...]}")
            steps = body.get("steps", True)
            if not isinstance(steps, bool):
                raise RequestError(f"steps must be true or false, got {steps!r}")
            return await ranked(body["strings"], steps)
        return await guarded(request, h)

    async def children(request: Request) -> Response:
        async def h(r: Request) -> Response:
            body = await _body(r)
            extra = sorted(set(body) - {"prefix", "k"})
            if extra:
                raise RequestError(f"unknown field {extra[0]!r} (children takes prefix, k)")
            return await run(service.children, body.get("prefix", ""), body.get("k"))
        return await guarded(request, h)

    def getter(fn: Callable[..., Any], *names: str, required: tuple = ()) -> Callable:
        async def endpoint(request: Request) -> Response:
            async def h(r: Request) -> Response:
                kw = _query(r, *names)
                for n in required:
                    if n not in kw:
                        raise RequestError(f"missing parameter {n!r}")
                return await run(fn, **kw)
            return await guarded(request, h)
        return endpoint

    async def index(request: Request) -> Response:
        return FileResponse(os.path.join(STATIC, "index.html"), media_type="text/html")

    async def not_found(request: Request, exc: HTTPException) -> Response:
        msg = {404: f"no such route: {request.url.path}", 405: f"{request.method} is not allowed on {request.url.path}"}
        return _error(exc.status_code, msg.get(exc.status_code, str(exc.detail)))

    async def server_error(request: Request, exc: Exception) -> Response:
        return _error(500, f"internal error: {type(exc).__name__}")

    routes = [
        Route("/", index),
        Route("/api/info", info),
        Route("/api/rank", rank, methods=["POST"]),
        Route("/api/children", children, methods=["POST"]),
        Route("/api/threshold", getter(service.threshold, "k", required=("k",))),
        Route("/api/unrank", getter(service.unrank, "i", required=("i",))),
        Route("/api/slice", getter(service.slice, "start", "k", required=("start", "k"))),
        Route("/api/count", getter(service.count, "min_log_prob", "bits")),
        Route("/api/mass", getter(service.mass, "min_log_prob", "bits")),
        Route("/api/curve", getter(service.curve, "points")),
        Mount("/static", app=StaticFiles(directory=STATIC)),
    ]
    app = Starlette(routes=routes, exception_handlers={HTTPException: not_found, 500: server_error},
                    middleware=[Middleware(_Headers)], lifespan=lifespan)
    app.state.service = service
    return app


def app_from_env() -> Starlette:
    """The app of one server process (``uvicorn --factory``): the service named by the JSON config in
    ``$ARENUM_SERVE_CONFIG``, so that ``--workers N`` processes each open the same store read-only."""
    cfg = ServeConfig.from_json(json.loads(os.environ[ENV_CONFIG]))
    svc = Service.open(cfg)  # the parent built (and will remove) any temporary store
    return create_app(svc, close_at_exit=True)
