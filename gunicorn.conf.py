"""Kept for `gunicorn -c gunicorn.conf.py 'web:create_app()'` run from a checkout.

The settings live in the package, `web/http/gunicorn_conf.py`, so they work from
any directory: `toolnexus-serve web`, or `gunicorn -c python:web.http.gunicorn_conf`.
"""

from web.http.gunicorn_conf import *  # noqa: F403
