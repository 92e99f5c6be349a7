"""The Flask app factory: `gunicorn 'web:create_app()'`.

Routes: `POST /` (JSON-RPC, see `web.jsonrpc.binding`; the streaming methods answer
with Server-Sent Events), the agent card, `/healthz`, `/readyz` and `GET /`
(where to find the card and how to send a message). Every reply is JSON
(or an event stream), errors included: no HTML error page and no stack
trace ever reaches a peer.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Mapping
from email.utils import formatdate
from typing import Any, Final

from flask import Flask, Response, request
from werkzeug.exceptions import HTTPException, MethodNotAllowed
from werkzeug.wrappers import Response as BaseResponse

from shared.broker.dispatch import CeleryDispatcher
from shared.broker.dispatcher import Dispatcher
from shared.codec import encode_bytes
from shared.errors import StoreError, Unsupported
from shared.ops.event_metrics import event_metrics
from shared.push.signing import JWKS_PATH, signer
from shared.settings import Settings
from shared.store.contract import Store
from shared.store.wiring import load_hook, open_store
from web.auth.tokens import authenticator_for
from web.card.build import MAX_AGE, entity_tag, wanted_version
from web.card.skills import load_skills
from web.card.views import CardViews
from web.console.views import index_page, install_console, wants_html
from web.core.errors import (
    BROKER_UNAVAILABLE,
    STORE_UNAVAILABLE,
    InvalidRequest,
    RequestError,
    WireError,
    describe,
    error_body,
    status_body,
)
from web.core.tasks import Tasks
from web.http.browsers import browser_policy
from web.http.disconnects import HangupMonitor
from web.http.edge import RpcEndpoint, front, refused
from web.http.metrics import count_queued
from web.http.observe import observe
from web.jsonrpc.binding import wire_version
from web.rest.binding import RestEndpoint

log = logging.getLogger(__name__)

VERSION_HEADER = "A2A-Version"
CARD_PATH = "/.well-known/agent-card.json"
LEGACY_CARD_PATH = "/.well-known/agent.json"


def create_app(
    settings: Settings | None = None,
    *,
    store: Any = None,
    dispatcher: Dispatcher | None = None,
    card: Mapping[str, Any] | None = None,
    strict_hosts: bool = False,
) -> Flask:
    """`settings` default to the TOOLNEXUS_* environment; `store` to the one
    TOOLNEXUS_STORE names (a store object or a spec string is accepted);
    `dispatcher` to Celery on TOOLNEXUS_BROKER_URL; `card` overrides
    top-level agent-card fields, after those of TOOLNEXUS_CARD;
    `strict_hosts` refuses Host names that are not loopback or configured
    even without TOOLNEXUS_ALLOWED_HOSTS (see `web.http.browsers`)."""
    settings = settings if settings is not None else Settings.from_env()
    task_store = open_store(settings, store)
    dispatcher = (
        dispatcher if dispatcher is not None else CeleryDispatcher(settings, on_queued=count_queued)
    )
    skills = load_skills(settings.skills, settings.skill_names) if settings.skills else []
    authenticator = authenticator_for(settings)
    browsers = browser_policy(settings, strict_hosts=strict_hosts)
    tasks = Tasks(settings, task_store, dispatcher, load_hook(settings))
    cards = CardViews(
        settings,
        skills,
        browsers,
        authenticator.card_schemes(),
        streaming=True,  # every store can be followed (the adapter polls)
        push=tasks.push is not None,
        overrides={**(settings.card or {}), **(card or {})},
        extended_fields=settings.extended_card,
    )
    started = formatdate(time.time(), usegmt=True)

    app = Flask(__name__)
    app.extensions["toolnexus"] = tasks
    observe(app, authenticator)

    @app.before_request
    def screen() -> BaseResponse | None:
        try:
            return browsers.screen(request)
        except RequestError as error:
            return refused(error, request.headers.get(VERSION_HEADER))

    app.after_request(lambda response: browsers.with_cors(request, response))

    def agent_card() -> BaseResponse:
        try:
            asked = request.headers.get(VERSION_HEADER) or request.args.get(VERSION_HEADER)
            requested = wire_version(asked)
        except RequestError as error:
            return refused(error, None)
        version = wanted_version(requested, request.path == LEGACY_CARD_PATH, settings.card_compat)
        document, from_host = cards.public(request, version)
        tag = entity_tag(document)
        fresh = request.if_none_match.contains(tag)
        response = Response(status=304) if fresh else _json(document, 200)
        response.set_etag(tag)
        response.headers["Last-Modified"] = started
        response.headers["Cache-Control"] = f"public, max-age={MAX_AGE}"
        response.vary.add("A2A-Version")
        if from_host:
            response.vary.add("Host")
        return response

    for path in (CARD_PATH, LEGACY_CARD_PATH):
        app.add_url_rule(path, view_func=agent_card, endpoint=path, methods=["GET"])

    if settings.console:
        install_console(app, settings, task_store, authenticator.required)

    @app.get("/")
    def index() -> BaseResponse:
        if settings.console and wants_html(request):
            return index_page(settings, CARD_PATH)
        return _json(
            {
                "name": settings.name,
                "agentCard": CARD_PATH,
                "send": "POST / with a JSON-RPC 2.0 request, Content-Type: application/json",
                "httpJson": (
                    "or the HTTP+JSON routes (POST /message:send, GET /tasks/{id}, ...)"
                    " with A2A-Version: 1.0"
                ),
                "example": {
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "SendMessage",
                    "params": {
                        "message": {
                            "role": "user",
                            "messageId": "any-unique-id",
                            "parts": [{"kind": "text", "text": "hello"}],
                        }
                    },
                },
            },
            200,
        )

    push_signer = signer(settings) if tasks.push is not None else None
    if push_signer is not None:
        published = push_signer.jwks()

        @app.get(JWKS_PATH)
        def push_keys() -> Response:
            """The public keys that verify this agent's signed webhook POSTs."""
            return _json(published, 200)

    @app.get("/healthz")
    def healthz() -> Response:
        return _json({"status": "ok"}, 200)

    @app.get("/readyz")
    def readyz() -> Response:
        problems = _readiness(task_store, dispatcher, settings)
        if problems:
            return _json({"status": "unavailable", **problems}, 503)
        ready: dict[str, Any] = {"status": "ready", "store": "ok", "broker": "ok", "reaper": "ok"}
        if warning := _memory_warning(task_store, settings.redis_memory_warn):
            ready["warnings"] = {"store": warning}
        return _json(ready, 200)

    app.register_error_handler(HTTPException, _http_error)
    app.register_error_handler(Exception, _unexpected_error)
    hangups = HangupMonitor()
    extended = cards.extended if settings.extended_card is not None else None
    endpoint = RpcEndpoint(tasks, authenticator, browsers, settings.max_body, hangups, extended)
    rest = RestEndpoint(tasks, authenticator, browsers, settings.max_body, hangups, extended)
    app.wsgi_app = front(app.wsgi_app, endpoint, rest)  # type: ignore[method-assign, assignment]
    return app


def _readiness(store: Store, dispatcher: Dispatcher, settings: Settings) -> dict[str, str]:
    problems: dict[str, str] = {}
    try:
        store.ping()
        try:
            last = store.last_beat()
        except Unsupported:
            pass  # a store that keeps no record of the reaper's runs: cannot tell
        else:
            if last is None:
                problems["reaper"] = "the reaper has not run yet: is beat running?"
            elif time.time() - last > settings.beat_overdue_after:
                problems["reaper"] = (
                    f"the reaper last ran {time.time() - last:.0f} s ago: is beat running?"
                )
    except StoreError as error:
        log.warning("readyz: store fault: %s", error)
        problems["store"] = (
            f"{STORE_UNAVAILABLE}: {error.reason}" if error.reason else STORE_UNAVAILABLE
        )
    except Exception as error:
        log.warning("readyz: store fault: %s", error)
        problems["store"] = STORE_UNAVAILABLE
    try:
        dispatcher.check()
    except Exception as error:
        log.warning("readyz: broker fault: %s", error)
        problems["broker"] = BROKER_UNAVAILABLE
    return problems


def _memory_warning(store: Store, share: float) -> str | None:
    """What to say when the store is near its memory limit: when full, Redis
    (noeviction) refuses every write, so new tasks and their events fail."""
    try:
        use = store.memory_use()
    except StoreError:
        return None  # the store check above already said whether it answers
    if use is None:
        return None
    used, limit = use
    event_metrics().store_memory.set(used / limit)
    if used < share * limit:
        return None
    log.warning("readyz: the task store uses %d of %d bytes", used, limit)
    return (
        f"Redis uses {used / limit:.0%} of its maxmemory ({used} of {limit} bytes): when full it"
        " refuses new tasks and events; shorten TOOLNEXUS_TASK_TTL or raise maxmemory"
    )


# Flask's own refusals (unknown paths, wrong verbs on its routes) in the
# HTTP+JSON error shape, so every route of the service answers alike.
_HTTP_REASONS: Final = {404: "ROUTE_NOT_FOUND", 405: "METHOD_NOT_ALLOWED"}
_HTTP_STATUS_NAMES: Final = {404: "NOT_FOUND"}


def _http_error(error: HTTPException) -> Response:
    status = error.code or 500
    if request.path == "/" and request.method == "POST":
        cause = InvalidRequest(error.description or error.name) if status < 500 else error
        return _json(error_body(describe(cause), None, typed_data=False), status)
    wire = WireError(
        -32600, error.name, _HTTP_REASONS.get(status, "INVALID_REQUEST"), rest_status=status
    )
    wire = dataclasses.replace(wire, status=_HTTP_STATUS_NAMES.get(status, "INVALID_ARGUMENT"))
    reply = _json(status_body(wire), status)
    if status == 405 and isinstance(error, MethodNotAllowed) and error.valid_methods:
        reply.headers["Allow"] = ", ".join(error.valid_methods)
    return reply


def _unexpected_error(error: Exception) -> Response:
    log.error("unhandled error on %s %s", request.method, request.path, exc_info=error)
    if request.path == "/" and request.method == "POST":
        return _json(error_body(describe(error), None, typed_data=False), 500)
    return _json(status_body(describe(error)), 500)


def _json(payload: Mapping[str, Any], status: int) -> Response:
    return Response(encode_bytes(payload), status=status, mimetype="application/json")
