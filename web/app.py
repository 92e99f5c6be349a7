"""The HTTP process's app factory: `gunicorn 'web:create_app()'`.

On the parts `web.assembly` builds, two bindings of A2A served straight on
WSGI, `POST /` (JSON-RPC, `web.jsonrpc`) and the HTTP+JSON routes
(`web.rest`), whose streaming methods answer with Server-Sent Events; and
Flask's routes: the agent card, `/healthz`, `/readyz`, the webhook keys,
the console, and `GET /` (where to find the card and how to send a
message). The third binding, gRPC, is a process of its own
(`web.grpc_process`). Every reply is JSON (or an event stream), errors
included: no HTML error page and no stack trace ever reaches a peer.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Iterable, Mapping
from email.utils import formatdate
from typing import Any, Final

from flask import Flask, Response, request
from werkzeug.exceptions import HTTPException, MethodNotAllowed
from werkzeug.wrappers import Response as BaseResponse

from shared.broker.dispatcher import Dispatcher
from shared.broker.wiring import dispatcher_abilities
from shared.codec import encode_bytes
from shared.errors import StoreError, Unsupported
from shared.ops.event_metrics import event_metrics
from shared.push.signing import JWKS_PATH, signer
from shared.settings import Settings
from shared.store.contract import Store
from web.assembly import Assembly, assemble, front
from web.card.build import MAX_AGE, entity_tag, wanted_version
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
from web.core.versions import VERSION_HEADER, typed_errors, wire_version
from web.http.body import JSON
from web.http.disconnects import HANGUPS, HangupMonitor
from web.http.observe import observe
from web.jsonrpc.endpoint import RpcEndpoint
from web.rest.binding import RestEndpoint

log = logging.getLogger(__name__)

# Where `create_app` keeps its assembly in `app.extensions` (`assembly_of`).
ASSEMBLY: Final = "toolnexus.assembly"
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
    assembly = assemble(settings, store, dispatcher, card=card, strict_hosts=strict_hosts)
    tasks, authenticator, browsers = assembly.tasks, assembly.authenticator, assembly.browsers
    task_store, dispatcher = tasks.store, tasks.dispatcher
    cards = assembly.cards
    started = formatdate(time.time(), usegmt=True)

    app = Flask(__name__)
    app.extensions["toolnexus"] = tasks
    app.extensions[ASSEMBLY] = assembly
    book = tasks.turns.book if tasks.turns is not None else None
    abilities = dispatcher_abilities(dispatcher)
    observe(app, authenticator, abilities.backlog, book, settings.queue)
    # The part that takes the work, as /readyz names it: the fleet's broker, or
    # the embedded server's own worker threads (it has no broker).
    takes_work = WORKERS if abilities.in_process else BROKER

    @app.before_request
    def screen() -> BaseResponse | None:
        try:
            return browsers.screen(request)
        except RequestError as error:
            return _refused(error, request.headers.get(VERSION_HEADER))

    app.after_request(lambda response: browsers.with_cors(request, response))

    def agent_card() -> BaseResponse:
        try:
            asked = request.headers.get(VERSION_HEADER) or request.args.get(VERSION_HEADER)
            requested = wire_version(asked)
        except RequestError as error:
            return _refused(error, None)
        version = wanted_version(requested, request.path == LEGACY_CARD_PATH, settings.card_compat)
        document, from_host = cards.public(request, version)
        tag = entity_tag(document)
        fresh = request.if_none_match.contains(tag)
        response = Response(status=304) if fresh else _json(document, 200)
        response.set_etag(tag)
        response.headers["Last-Modified"] = started
        response.headers["Cache-Control"] = f"public, max-age={MAX_AGE}"
        response.vary.add(VERSION_HEADER)
        if from_host:
            response.vary.add("Host")
        return response

    for path in (CARD_PATH, LEGACY_CARD_PATH):
        app.add_url_rule(path, view_func=agent_card, endpoint=path, methods=["GET"])

    if settings.console:
        install_console(app, settings, task_store, authenticator, book, abilities.backlog)

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
    # The webhook key and the card key, each once (they may be the same key).
    keys = {key["kid"]: key for key in (push_signer.jwks()["keys"] if push_signer else [])}
    if cards.signer is not None:
        keys.setdefault(cards.signer.key.kid, cards.signer.key.jwk())
    if keys:
        published = {"keys": list(keys.values())}

        @app.get(JWKS_PATH)
        def public_keys() -> Response:
            """The public keys that verify this agent's signed webhook POSTs
            and its signed cards."""
            return _json(published, 200)

    @app.get("/healthz")
    def healthz() -> Response:
        return _json({"status": "ok"}, 200)

    @app.get("/readyz")
    def readyz() -> Response:
        problems, node = _readiness(task_store, dispatcher, takes_work, settings)
        where = {"node": node} if node is not None else {}
        if problems:
            return _json({"status": "unavailable", **problems, **where}, 503)
        ready: dict[str, Any] = {"status": "ready", "store": "ok", takes_work: "ok", "reaper": "ok"}
        ready.update(where)
        if warning := _memory_warning(task_store, settings.redis_memory_warn):
            ready["warnings"] = {"store": warning}
        return _json(ready, 200)

    app.register_error_handler(HTTPException, _http_error)
    app.register_error_handler(Exception, _unexpected_error)
    hangups = HangupMonitor()
    app.extensions[HANGUPS] = hangups  # ended on SIGTERM (`web.http.disconnects.end_streams`)
    extended = assembly.extended_card
    endpoint = RpcEndpoint(tasks, authenticator, browsers, settings.max_body, hangups, extended)
    rest = RestEndpoint(tasks, authenticator, browsers, settings.max_body, hangups, extended)
    app.wsgi_app = front(app.wsgi_app, endpoint, rest)  # type: ignore[method-assign, assignment]
    return app


def assembly_of(app: Flask) -> Assembly:
    """The parts `create_app` built `app` on (the embedded server serves its
    gRPC port on them too)."""
    assembly: Assembly = app.extensions[ASSEMBLY]
    return assembly


def _refused(error: RequestError, version: str | None) -> BaseResponse:
    """A refusal as a Flask route sends it (the browser screen, the card)."""
    wire = describe(error)
    body = encode_bytes(error_body(wire, None, typed_data=typed_errors(version)))
    return BaseResponse(body, status=wire.http_status, mimetype=JSON)


# The two parts that take the work /readyz may name, and what each says when it cannot.
BROKER: Final = "broker"
WORKERS: Final = "workers"
_CANNOT_TAKE_WORK: Final = {BROKER: BROKER_UNAVAILABLE, WORKERS: "in-process workers stopping"}


def _readiness(
    store: Store, dispatcher: Dispatcher, takes_work: str, settings: Settings
) -> tuple[dict[str, str], str | None]:
    """What is wrong, by part, and the store node that answered (None: the
    store has one node, or did not answer)."""
    problems: dict[str, str] = {}
    node = None
    try:
        node = store.ping()
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
        log.warning("readyz: %s fault: %s", takes_work, error)
        problems[takes_work] = _CANNOT_TAKE_WORK[takes_work]
    return problems, node


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
        reply.headers["Allow"] = _allowed(error.valid_methods, request.path)
    return reply


# Verbs served before Flask sees the request (`web.assembly.front`): Flask's
# own list of a path's verbs lacks them. `POST /` is the JSON-RPC endpoint.
_SERVED_BEFORE_FLASK: Final = {"/": ("POST",)}


def _allowed(flask_verbs: Iterable[str], path: str) -> str:
    """Every verb `path` serves, in one order (Flask keeps them in a set)."""
    return ", ".join(sorted({*flask_verbs, *_SERVED_BEFORE_FLASK.get(path, ())}))


def _unexpected_error(error: Exception) -> Response:
    log.error("unhandled error on %s %s", request.method, request.path, exc_info=error)
    if request.path == "/" and request.method == "POST":
        return _json(error_body(describe(error), None, typed_data=False), 500)
    return _json(status_body(describe(error)), 500)


def _json(payload: Mapping[str, Any], status: int) -> Response:
    return Response(encode_bytes(payload), status=status, mimetype="application/json")
