"""The ASGI application of ``arenum serve``: the JSON API under ``/api`` and the page at ``/``.

Starlette routes, behind a plain ASGI front that answers the hot route, ``POST /api/rank``, itself
(the same checks, batching, JSON and headers, without request and response objects). Every query runs
on one worker thread, first in first out (never on the event loop), through one
:class:`~arenum.serve.service.Service`; concurrent rank requests go to it as one batch. Strings a user types (passwords) travel only in POST bodies,
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
from starlette.requests import ClientDisconnect, Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.middleware import Middleware
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from ..cli.common import jsonable
from .service import RequestError, ServeConfig, Service, describe_error

__all__ = ["create_app", "app_from_env", "STATIC", "ENV_CONFIG", "MAX_BODY"]

STATIC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "static")
ENV_CONFIG = "ARENUM_SERVE_CONFIG"
MAX_BODY = 64 * 1024
CSP = "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'"


def _scalar(x: Any) -> Any:
    """The JSON encoder's hook for what it cannot write: a numpy scalar as its Python value."""
    item = getattr(x, "item", None)
    if item is None or isinstance(x, (list, dict)):
        raise TypeError(f"{type(x).__name__} is not JSON serializable")
    return item()


# one encoder, made once (json.dumps with options builds a new one a call): the C encoder, compact
_ENCODER = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"), default=_scalar)


def json_bytes(doc: Any, *, safe: bool = False) -> bytes:
    """``doc`` as UTF-8 JSON, encoded once. Non-finite floats are written ``null`` as the command line
    writes them: a walk over ``doc`` makes that so first, unless ``safe`` (the caller's records hold
    finite floats already: the service's rank records, :func:`~arenum.serve.service.json_safe`)."""
    return _ENCODER.encode(doc if safe else jsonable(doc)).encode("utf-8")


class _JSON(JSONResponse):
    def render(self, content: Any) -> bytes:
        return json_bytes(content)


def _error(status: int, message: str) -> Response:
    return _JSON({"error": message}, status_code=status)


def _check_size(size: bytes | str | None) -> None:
    if size is not None and (not size.isdigit() or int(size) > MAX_BODY):
        raise RequestError(f"request body is larger than {MAX_BODY:,} bytes", 413)


def _parse(raw: bytes) -> dict:
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise RequestError("the request body must be a JSON object") from None
    except RecursionError:  # a few KB of nested brackets
        raise RequestError("the request body is nested too deeply") from None
    if not isinstance(doc, dict):
        raise RequestError("the request body must be a JSON object")
    return doc


async def _raw(request: Request) -> bytes:
    _check_size(request.headers.get("content-length"))
    raw = b""
    async for chunk in request.stream():
        raw += chunk
        if len(raw) > MAX_BODY:
            raise RequestError(f"request body is larger than {MAX_BODY:,} bytes", 413)
    return raw


async def _body(request: Request) -> dict:
    return _parse(await _raw(request))


async def _asgi_body(scope: dict, receive: Any) -> bytes:
    """The request body from the ASGI messages, at most ``MAX_BODY`` bytes (else a 413)."""
    for name, value in scope["headers"]:
        if name == b"content-length":
            _check_size(value)
    msg = await receive()
    raw = msg.get("body", b"")
    while msg.get("more_body", False):
        if len(raw) > MAX_BODY:
            break
        msg = await receive()
        raw += msg.get("body", b"")
    if len(raw) > MAX_BODY:
        raise RequestError(f"request body is larger than {MAX_BODY:,} bytes", 413)
    return raw


def _rank_args(body: dict) -> tuple[Any, bool]:
    """``(strings, steps)`` of a rank request's JSON body, else a :class:`RequestError`."""
    extra = sorted(set(body) - {"strings", "steps"})
    if extra:
        raise RequestError(f"unknown field {extra[0]!r} (rank takes strings, steps)")
    if "strings" not in body:
        raise RequestError("rank needs {\"strings\": [...]}")
    steps = body.get("steps", True)
    if not isinstance(steps, bool):
        raise RequestError(f"steps must be true or false, got {steps!r}")
    return body["strings"], steps


def _query(request: Request, *names: str) -> dict:
    q = request.query_params
    unknown = sorted(set(q.keys()) - set(names))
    if unknown:
        raise RequestError(f"unknown parameter {unknown[0]!r} (this route takes {', '.join(names) or 'none'})")
    twice = sorted(n for n in names if len(q.getlist(n)) > 1)
    if twice:
        raise RequestError(f"parameter {twice[0]!r} is given more than once")
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


class _Batcher:
    """Rank requests that arrive while a batch runs wait here and go to the worker thread together:
    one hop, one lock take and one scoring call for the lot (at most ``max_batch`` strings, the most
    one request may send, so no batch holds the service's lock longer than one bounded query). The
    worker thread also encodes each request's answer (JSON bytes), so the event loop only moves bytes."""

    def __init__(self, service: Service, pool: ThreadPoolExecutor) -> None:
        self.service = service
        self.pool = pool
        self.pending: list[tuple[Any, bool, asyncio.Future]] = []
        self.drainer: asyncio.Task | None = None

    def _answer(self, requests: list[tuple[Any, bool]]) -> list[tuple[int, bytes]]:
        """On the worker thread: ``(status, JSON body)`` of each request of a batch."""
        out = []
        for res in self.service.rank_many(requests):
            try:
                if isinstance(res, BaseException):
                    raise res
                out.append((200, json_bytes(res, safe=True)))
            except Exception as exc:  # noqa: BLE001 - this request's answer is its error, in one line
                status, msg = describe_error(exc)
                out.append((status, json_bytes({"error": msg})))
        return out

    async def _drain(self) -> None:
        loop = asyncio.get_running_loop()
        pending, limit = self.pending, self.service.limits.max_batch
        batch: list[tuple[Any, bool, asyncio.Future]] = []
        try:
            while pending:
                take, n = 1, _size(pending[0][0])
                while take < len(pending) and n + _size(pending[take][0]) <= limit:
                    n += _size(pending[take][0])
                    take += 1
                batch = pending[:take]
                del pending[:take]
                try:
                    results = await loop.run_in_executor(self.pool, self._answer, [(s, st) for s, st, _ in batch])
                except Exception as exc:  # noqa: BLE001 - every request of the batch answers this error
                    status, msg = describe_error(exc)
                    results = [(status, json_bytes({"error": msg}))] * len(batch)
                for (_, _, fut), res in zip(batch, results):
                    if not fut.done():  # a client that went away cancelled its own future
                        fut.set_result(res)
                batch = []
        finally:
            for _, _, fut in batch + pending:  # left undone only when the drain was cancelled (the server stops)
                if not fut.done():
                    fut.cancel()
            del pending[:]
            self.drainer = None

    async def rank(self, raw: bytes) -> tuple[int, bytes]:
        """``(status, JSON body)`` of one ``POST /api/rank`` request's raw body."""
        try:
            strings, steps = _rank_args(_parse(raw))
        except RequestError as exc:
            return exc.status, json_bytes({"error": str(exc)})
        fut = asyncio.get_running_loop().create_future()
        self.pending.append((strings, steps, fut))
        if self.drainer is None:
            self.drainer = asyncio.ensure_future(self._drain())
        return await fut


def _size(strings: Any) -> int:
    return len(strings) if isinstance(strings, list) else 1


class _Front:
    """The outer ASGI app: ``POST /api/rank`` (the hot route) answered here, in plain ASGI (no request
    or response objects, the headers made once), everything else passed to the Starlette app. Both
    answer alike: the same parsing, batching, JSON and headers."""

    JSON_HEADERS = [(b"content-type", b"application/json")] + _Headers.HEADERS

    def __init__(self, app: Starlette, batcher: _Batcher) -> None:
        self.app = app
        self.batcher = batcher
        self.state = app.state
        self.routes = app.routes

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"] != "/api/rank" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        try:
            if scope.get("query_string"):  # as the other routes: an unknown parameter is a 400
                name = scope["query_string"].decode("latin-1").split("&")[0].split("=")[0]
                raise RequestError(f"unknown parameter {name!r} (this route takes none: its fields go in the body)")
            status, body = await self.batcher.rank(await _asgi_body(scope, receive))
        except RequestError as exc:
            status, body = exc.status, json_bytes({"error": str(exc)})
        except Exception as exc:  # noqa: BLE001 - one line, no traceback, nothing the client sent echoed
            status, body = 500, json_bytes({"error": f"internal error: {type(exc).__name__}"})
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-length", b"%d" % len(body)), *self.JSON_HEADERS]})
        await send({"type": "http.response.body", "body": body})


def create_app(service: Service, *, close_at_exit: bool = False) -> _Front:
    """The ASGI app answering from ``service`` (see ``docs/serve.md`` for the routes): Starlette's
    routes behind :class:`_Front`, which answers ``POST /api/rank`` itself; with ``close_at_exit``
    the app's lifespan closes the service when the server stops."""

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
    batcher = _Batcher(service, pool)

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
        except ClientDisconnect:  # gone before its body was read: nothing to answer, nothing to log
            return _error(400, "the client went away before its request was read")

    async def info(request: Request) -> Response:
        return await guarded(request, lambda r: run(service.info) if not _query(r) else None)

    async def rank(request: Request) -> Response:  # reached only past the front (which answers POST itself)
        async def h(r: Request) -> Response:
            _query(r)
            status, body = await batcher.rank(await _raw(r))
            return Response(body, status_code=status, media_type="application/json")
        return await guarded(request, h)

    async def children(request: Request) -> Response:
        async def h(r: Request) -> Response:
            _query(r)  # no query parameters: the fields go in the body
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
    return _Front(app, batcher)


def app_from_env() -> _Front:
    """The app of one server process (``uvicorn --factory``): the service named by the JSON config in
    ``$ARENUM_SERVE_CONFIG``, so that ``--workers N`` processes each open the same store read-only."""
    cfg = ServeConfig.from_json(json.loads(os.environ[ENV_CONFIG]))
    svc = Service.open(cfg)  # the parent built (and will remove) any temporary store
    return create_app(svc, close_at_exit=True)
