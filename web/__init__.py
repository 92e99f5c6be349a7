"""The A2A front end: three bindings of A2A on one transport-free handler.

`web.core` is the handler (the methods, the call context, the method table
every binding reads); the bindings are JSON-RPC 2.0 (`web.jsonrpc`),
HTTP+JSON (`web.rest`) and gRPC (`web.grpc`), the first two on the HTTP
edge (`web.http`) beside Flask's routes (the agent card, health, the
console). `web.assembly` builds the parts every process serves on; the HTTP
process is `gunicorn -c python:web.http.gunicorn_conf 'web:create_app()'`
(`web.app`), the gRPC one `python -m web.grpc_process`. web never imports
worker: it enqueues by task name through a `shared.broker.dispatcher.Dispatcher`.

`create_app` is imported on first use, so that `web.http.gunicorn_conf` (gunicorn's
`-c python:web.http.gunicorn_conf`) can patch the standard library for gevent
before Flask, redis-py or kombu are imported.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from web.app import create_app

__all__ = ["create_app"]


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from web.app import create_app

        return create_app
    raise AttributeError(f"module 'web' has no attribute {name!r}")
