"""The Flask app factory: `gunicorn 'web:create_app()'`.

Routes: `POST /` (JSON-RPC, see `web.rpc`), the agent card, `/healthz`
and `/readyz`. Every reply is JSON, errors included: no HTML error page
and no stack trace ever reaches a peer.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

from flask import Flask, Response, request
from werkzeug.exceptions import HTTPException, RequestEntityTooLarge

from shared.dispatch import Dispatcher
from shared.resolve import resolve_store
from shared.settings import Settings
from shared.store import TaskStore
from web.auth import require_token
from web.card import build_card
from web.dispatch import CeleryDispatcher
from web.errors import (
    BROKER_UNAVAILABLE,
    STORE_UNAVAILABLE,
    BodyTooLarge,
    InvalidRequest,
    RequestError,
    describe,
    error_body,
)
from web.methods import Tasks
from web.rpc import handle
from web.skills import load_skills

log = logging.getLogger(__name__)

VERSION_HEADER = "A2A-Version"
CARD_PATHS = ("/.well-known/agent-card.json", "/.well-known/agent.json")
_READINESS_PROBE_ID = "readyz-probe"


def create_app(
    settings: Settings | None = None,
    *,
    store: Any = None,
    dispatcher: Dispatcher | None = None,
    card: Mapping[str, Any] | None = None,
) -> Flask:
    """`settings` default to the TOOLNEXUS_* environment; `store` to the one
    TOOLNEXUS_STORE names (a store object or a spec string is accepted);
    `dispatcher` to Celery on TOOLNEXUS_BROKER_URL; `card` overrides
    top-level agent-card fields, after those of TOOLNEXUS_CARD."""
    settings = settings if settings is not None else Settings.from_env()
    spec = settings.store if store is None else store
    store = resolve_store(spec, terminal_ttl=settings.task_ttl)
    dispatcher = dispatcher if dispatcher is not None else CeleryDispatcher(settings)
    skills = load_skills(settings.skills, settings.skill_names) if settings.skills else []
    tasks = Tasks(settings, store, dispatcher)

    app = Flask(__name__)
    # One byte over: Werkzeug cuts a chunked body at this length without a
    # word, so `_body` must see the extra byte to refuse it as too large.
    app.config["MAX_CONTENT_LENGTH"] = settings.max_body + 1
    app.extensions["toolnexus"] = tasks

    @app.post("/")
    def rpc() -> Response:
        version = request.headers.get(VERSION_HEADER) or request.args.get(VERSION_HEADER)
        try:
            require_token(request.headers.get("Authorization"), settings.api_tokens)
            body = _body(settings.max_body)
        except RequestError as error:
            wire = describe(error)
            typed = (version or "").strip().startswith("1.")
            reply = _json(error_body(wire, None, typed_data=typed), wire.http_status)
            if wire.http_status == 401:
                reply.headers["WWW-Authenticate"] = 'Bearer realm="toolnexus"'
            return reply
        payload, status = handle(body, version, tasks)
        return _json(payload, status)

    card_overrides = {**(settings.card or {}), **(card or {})}

    def agent_card() -> Response:
        return _json(build_card(settings, skills, request.host_url, card_overrides), 200)

    for path in CARD_PATHS:
        app.add_url_rule(path, view_func=agent_card, endpoint=path, methods=["GET"])

    @app.get("/healthz")
    def healthz() -> Response:
        return _json({"status": "ok"}, 200)

    @app.get("/readyz")
    def readyz() -> Response:
        problems = _readiness(store, dispatcher)
        if problems:
            return _json({"status": "unavailable", **problems}, 503)
        return _json({"status": "ready", "store": "ok", "broker": "ok"}, 200)

    app.register_error_handler(HTTPException, _http_error)
    app.register_error_handler(Exception, _unexpected_error)
    return app


def _body(limit: int) -> bytes:
    try:
        body: bytes | None = request.get_data(cache=False)
    except RequestEntityTooLarge:
        body = None
    if body is None or len(body) > limit:
        raise BodyTooLarge(f"request body too large: the limit is {limit} bytes")
    return body


def _readiness(store: TaskStore, dispatcher: Dispatcher) -> dict[str, str]:
    problems: dict[str, str] = {}
    try:
        ping = getattr(store, "ping", None)
        if callable(ping):
            ping()
        else:
            store.get(_READINESS_PROBE_ID)
    except Exception as error:
        log.warning("readyz: store fault: %s", error)
        problems["store"] = STORE_UNAVAILABLE
    try:
        dispatcher.check()
    except Exception as error:
        log.warning("readyz: broker fault: %s", error)
        problems["broker"] = BROKER_UNAVAILABLE
    return problems


def _http_error(error: HTTPException) -> Response:
    status = error.code or 500
    if request.path == "/" and request.method == "POST":
        cause = InvalidRequest(error.description or error.name) if status < 500 else error
        return _json(error_body(describe(cause), None, typed_data=False), status)
    return _json({"error": {"code": status, "message": error.name}}, status)


def _unexpected_error(error: Exception) -> Response:
    log.error("unhandled error on %s %s", request.method, request.path, exc_info=error)
    if request.path == "/" and request.method == "POST":
        return _json(error_body(describe(error), None, typed_data=False), 500)
    return _json({"error": {"code": 500, "message": "internal error"}}, 500)


def _json(payload: Mapping[str, Any], status: int) -> Response:
    text = json.dumps(payload, separators=(",", ":"))
    return Response(text, status=status, mimetype="application/json")
