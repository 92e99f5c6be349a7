"""The A2A front end: a Flask app serving the agent card and JSON-RPC.

`gunicorn 'web:create_app()'` serves it. web never imports worker: it
enqueues by task name through a `shared.broker.dispatcher.Dispatcher`.

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
