"""The A2A front end: a Flask app serving the agent card and JSON-RPC.

`gunicorn 'web:create_app()'` serves it. web never imports worker: it
enqueues by task name through a `shared.dispatch.Dispatcher`.
"""

from web.app import create_app

__all__ = ["create_app"]
