"""``arenum serve``: a local HTTP API and a web page (a password meter and a sequence explorer).

A :class:`Service` answers from a store opened read-only (many server processes share one built
tree), frozen at what the store holds, so no request can build past it; :func:`create_app` wraps it
in a Starlette application (JSON under ``/api``, the page at ``/``) that uvicorn serves. Needs the
``serve`` extra (``pip install 'arenum[serve]'``). See ``docs/serve.md``.
"""
from .service import Limits, RequestError, ServeConfig, Service, prepare

__all__ = ["Limits", "RequestError", "ServeConfig", "Service", "create_app", "prepare"]


def create_app(service: Service):  # noqa: ANN201 - a Starlette app; starlette is imported only here
    """The ASGI app over ``service`` (:func:`arenum.serve.app.create_app`)."""
    from .app import create_app as make

    return make(service)
