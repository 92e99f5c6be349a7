"""What the web tier tells an operator: a request id, one log line and the
metrics of every request, and `GET /metrics`.

`observe(app, authenticator)` installs it on the Flask routes; the
endpoints of the edge (`web.jsonrpc.endpoint`, `web.rest.binding`, outside
Flask) call the same steps themselves: `begin`, then what the method
answered (`outcome_of`), `finish`; an event stream passes its items through
`following(...)`, so it counts as open while it lasts and its line is
written when it closes, with its whole duration.

The request id is the caller's `X-Request-ID` when that is a safe token, or
a new one; it is echoed in the response, bound for the request's log lines
and sent to the workers in the Celery message (shared.broker.dispatch).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from itertools import chain
from typing import Any, Final, TypeVar

from flask import Flask, Response, g, request

from shared.broker.backlog import BacklogSource
from shared.broker.dispatcher import Dispatcher
from shared.codec import encode
from shared.mappings import is_mapping
from shared.ops.correlation import REQUEST_ID_HEADER, Binding, accepted_request_id, bind
from shared.ops.logs import fields
from shared.ops.metrics import METRICS_PATH, exposition
from shared.ops.tracing import trace_flask
from shared.owners.book import TurnBook
from web.auth.tokens import Authenticator
from web.core.errors import RequestError
from web.http.backlog_metrics import BacklogCollector
from web.http.metrics import latency_of, requests_counted, web_metrics
from web.http.wsgi import HttpRequest

log = logging.getLogger("web.requests")

T = TypeVar("T")
_OBSERVED: Final = "toolnexus_observed"
# Probes and scrapes come every few seconds: logged at DEBUG while they succeed.
QUIET_PATHS: Final = frozenset({"/healthz", "/readyz", METRICS_PATH})
_HTTP_METHODS: Final = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


@dataclass
class Observed:
    """One request as it goes: what is known of it so far."""

    request_id: str
    started: float
    binding: Binding
    http_method: str
    path: str
    route: str
    rpc_method: str = ""
    dialect: str = ""
    task_id: str = ""
    outcome: str = ""
    streaming: bool = False

    def label(self) -> str:
        """The metrics' `method`: the JSON-RPC method, or HTTP method and route."""
        if self.rpc_method:
            return self.rpc_method
        http_method = self.http_method if self.http_method in _HTTP_METHODS else "OTHER"
        return f"{http_method} {self.route}"


def observe(
    app: Flask,
    authenticator: Authenticator,
    backlog: BacklogSource | None = None,
    book: TurnBook | None = None,
    queue: str | None = None,
) -> None:
    """Request ids, logs, traces and metrics for every request; `/metrics`
    with the broker's `backlog` read at each scrape when given, counting the
    tasks the turn `book` holds for `queue`."""
    read_now = (BacklogCollector(backlog, book, queue),) if backlog is not None else ()
    trace_flask(app)
    app.before_request(_begin)
    app.after_request(_finish)
    app.teardown_request(_release)

    def metrics() -> Response:
        try:
            authenticator.principal(request.headers.get("Authorization"))
        except RequestError as error:
            reply = Response(
                encode({"error": {"code": 401, "message": str(error)}}),
                status=401,
                mimetype="application/json",
            )
            reply.headers["WWW-Authenticate"] = 'Bearer realm="toolnexus"'
            return reply
        body, content_type = exposition(*read_now)
        return Response(body, status=200, content_type=content_type)

    app.add_url_rule(METRICS_PATH, endpoint="metrics", view_func=metrics, methods=["GET"])


def following(observed: Observed, items: Iterator[T]) -> Iterator[T]:
    """A stream's items as they flow: they count as an open stream until
    they end, and the request's line is written then."""
    observed.streaming = True
    gauge = web_metrics().streams_open
    gauge.inc()
    events = 0
    observed.outcome = "ok"
    try:
        for item in items:
            if isinstance(item, tuple) and len(item) == 2 and is_mapping(item[1]):
                events += 1
                payload = item[1]
                if "jsonrpc" not in payload and "error" not in payload:
                    payload = {"result": payload}  # HTTP+JSON: a bare StreamResponse
                outcome, task_id = outcome_of(payload)
                observed.task_id = observed.task_id or task_id
                if outcome != "ok":
                    observed.outcome = outcome
            yield item
    finally:
        gauge.dec()
        _record(observed, 200, events=events)


class CountingDispatcher:
    """A Dispatcher that counts the submissions it queues (`toolnexus_tasks_queued`),
    for dispatchers that do not count themselves (the embedded one)."""

    def __init__(self, inner: Dispatcher) -> None:
        self.inner = inner  # whose abilities it has (`dispatcher_abilities`)

    def enqueue(self, task_id: str) -> None:
        self.inner.enqueue(task_id)
        web_metrics().tasks_queued.inc()

    def revoke(self, task_id: str) -> None:
        self.inner.revoke(task_id)

    def check(self) -> None:
        self.inner.check()


def outcome_of(payload: Mapping[str, Any]) -> tuple[str, str]:
    """("ok" or the JSON-RPC error code, the task id the reply names or "")."""
    error = payload.get("error")
    if is_mapping(error):
        return str(error.get("code", "error")), _task_in_error(error.get("data"))
    return "ok", _task_in_result(payload.get("result"))


def _task_in_result(result: object) -> str:
    if not is_mapping(result):
        return ""
    # 1.0 wraps what it returns: {"task": …}, {"message": …}, {"statusUpdate": …}, …
    # The result itself first: a task (GetTask, CancelTask) answers there,
    # and its values need no looking at.
    for shape in chain((result,), (value for value in result.values() if is_mapping(value))):
        if isinstance(shape.get("taskId"), str):
            return str(shape["taskId"])
        if isinstance(shape.get("id"), str) and "status" in shape:
            return str(shape["id"])
    return ""


def _task_in_error(data: object) -> str:
    """0.3: `{"taskId": …}`; 1.0: a list of details, `metadata.taskId` in one."""
    details = data if isinstance(data, list) else [data]
    for detail in details:
        if not is_mapping(detail):
            continue
        for holder in (detail, detail.get("metadata")):
            if is_mapping(holder) and isinstance(holder.get("taskId"), str):
                return str(holder["taskId"])
    return ""


def begin(request: HttpRequest, route: str) -> Observed:
    """A request arrives: its id (the caller's, if safe), bound to its log lines."""
    request_id = accepted_request_id(request.headers.get(REQUEST_ID_HEADER))
    return Observed(
        request_id,
        time.monotonic(),
        bind(request=request_id),
        http_method=request.method,
        path=request.path,
        route=route,
    )


def finish(observed: Observed, status: int) -> None:
    """The response goes out: unless it is a stream (which `following`
    records when it ends), the request is recorded."""
    if not observed.streaming:
        _record(observed, status)


def _begin() -> None:
    rule = request.url_rule.rule if request.url_rule is not None else "unmatched"
    setattr(g, _OBSERVED, begin(request, rule))


def _finish(response: Response) -> Response:
    observed: Observed | None = g.get(_OBSERVED)
    if observed is not None:
        response.headers[REQUEST_ID_HEADER] = observed.request_id
        if not observed.outcome and response.mimetype == "application/json":
            # Refused before it ran: a JSON-RPC error code is still the outcome.
            payload = response.get_json(silent=True)
            if isinstance(payload, Mapping) and "jsonrpc" in payload:
                observed.outcome = outcome_of(payload)[0]
        finish(observed, response.status_code)
    return response


def _release(error: BaseException | None) -> None:
    observed: Observed | None = g.get(_OBSERVED)
    if observed is not None:
        observed.binding.release()


def _record(observed: Observed, status: int, *, events: int | None = None) -> None:
    elapsed = time.monotonic() - observed.started
    method = observed.label()
    outcome = observed.outcome or str(status)
    requests_counted(method, outcome).inc()
    latency_of(method).observe(elapsed)
    level = logging.DEBUG if observed.path in QUIET_PATHS and status < 400 else logging.INFO
    if log.isEnabledFor(level):
        _log_line(observed, level, outcome, status, elapsed, events)


def _log_line(
    observed: Observed, level: int, outcome: str, status: int, elapsed: float, events: int | None
) -> None:
    words = [observed.http_method, observed.path]
    if observed.rpc_method:
        words += [observed.rpc_method, f"dialect={observed.dialect}"]
    if observed.task_id:
        words.append(f"task_id={observed.task_id}")
    if events is not None:
        words.append(f"events={events}")
    words += [f"outcome={outcome}", f"status={status}", f"duration_ms={elapsed * 1000:.1f}"]
    extra = {
        "request_id": observed.request_id,
        **fields(
            http_method=observed.http_method,
            path=observed.path,
            method=observed.rpc_method or None,
            dialect=observed.dialect or None,
            task_id=observed.task_id or None,
            events=events,
            outcome=outcome,
            status=status,
            duration_ms=round(elapsed * 1000, 1),
        ),
    }
    # makeRecord + handle is log.log without the caller lookup (a walk up the
    # stack on every request); the line's origin is this function either way.
    log.handle(log.makeRecord(log.name, level, __file__, 0, " ".join(words), (), None, extra=extra))
