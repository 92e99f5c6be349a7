"""OpenTelemetry traces, on when the `otel` extra is installed; else nothing at all.

One trace per submission: the HTTP request (the maintained Flask
instrumentation), a `publish toolnexus.fulfil` span whose context travels in
the Celery message headers (W3C `traceparent`), the worker's `fulfil` span
continuing it, and the `agent` span around the function. The embedded server
hands the context to its worker thread instead of a message.

The Celery instrumentation package is not used for the message: its publish
hooks look the task up in the *current* app's registry, which a send by
name from the front end (or from beat) does not find, and the span it
opened would then never end.

Tracing is on when the spans have somewhere to go: OTLP over HTTP when
OTEL_EXPORTER_OTLP_ENDPOINT (or ..._TRACES_ENDPOINT) is set, the rest of
the standard OTEL_* variables applying; or a tracer provider the
application set up first (`opentelemetry-instrument`, a test), kept as is.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any, Final

log = logging.getLogger(__name__)

try:
    from opentelemetry import context as otel_context
    from opentelemetry import propagate, trace
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    AVAILABLE = True
except ImportError:  # the `otel` extra is not installed
    AVAILABLE = False

TRACER_NAME: Final = "toolnexus"
# Probes and scrapes would be most of the traces and say nothing.
UNTRACED_PATHS: Final = "healthz,readyz,metrics"
# The W3C trace-context headers, as the Celery message carries them.
TRACE_HEADERS: Final = ("traceparent", "tracestate")
_OTLP_VARIABLES: Final = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")

_enabled = False
# What a request runs in while tracing is off: one for all (it holds nothing).
_UNTRACED: Final[AbstractContextManager[object]] = nullcontext()


def enable(service: str) -> bool:
    """Trace this process when the extra is installed and the spans have
    somewhere to go: a tracer provider the application set up, or an OTLP
    endpoint (then a provider is made here, named `service` unless
    OTEL_SERVICE_NAME says otherwise). Spans that go nowhere cost every
    request for nothing, so otherwise this is off."""
    global _enabled
    if _enabled or not AVAILABLE:
        return _enabled
    if isinstance(trace.get_tracer_provider(), TracerProvider):
        _enabled = True  # set up by the application (opentelemetry-instrument, a test)
        return True
    # The OTel SDK reads its own OTEL_* variables; only whether to export is asked here.
    if not any(os.environ.get(name) for name in _OTLP_VARIABLES):
        return False
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    resource = Resource.create()
    if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
        resource = resource.merge(Resource({"service.name": service}))
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    _enabled = True
    return True


def trace_flask(app: Any, service: str = "toolnexus-web") -> None:
    """A server span for each HTTP request to `app`."""
    if enable(service):
        # Imported here: the Flask instrumentation imports Flask, which the
        # gRPC process (tracing its calls through `serving`) never loads.
        from opentelemetry.instrumentation.flask import FlaskInstrumentor

        FlaskInstrumentor().instrument_app(app, excluded_urls=UNTRACED_PATHS)  # type: ignore[no-untyped-call]


def serving(
    method: str, path: str, headers: Iterable[tuple[str, str]]
) -> AbstractContextManager[object]:
    """A server span for one request handled outside Flask (the JSON-RPC
    endpoint), continuing a trace the caller's headers may carry."""
    if not _enabled:
        return _UNTRACED
    parent = propagate.extract({key.lower(): value for key, value in headers})
    tracer = trace.get_tracer(TRACER_NAME)
    attributes = {"http.request.method": method, "url.path": path}
    return tracer.start_as_current_span(
        f"{method} {path}", context=parent, kind=trace.SpanKind.SERVER, attributes=attributes
    )


@contextmanager
def publishing(task_name: str, task_id: str) -> Iterator[dict[str, str]]:
    """A producer span around sending `task_id`; yields the headers that carry it."""
    if not _enabled:
        yield {}
        return
    tracer = trace.get_tracer(TRACER_NAME)
    attributes = {"messaging.system": "celery", "messaging.message.id": task_id}
    with tracer.start_as_current_span(
        f"publish {task_name}", kind=trace.SpanKind.PRODUCER, attributes=attributes
    ):
        carrier: dict[str, str] = {}
        propagate.inject(carrier)
        yield carrier


def continuing(
    name: str, headers: Callable[[str], object], attributes: Mapping[str, str]
) -> AbstractContextManager[object]:
    """A consumer span continuing the trace whose headers `headers(name)` returns."""
    if not _enabled:
        return _UNTRACED
    carrier = {key: str(value) for key in TRACE_HEADERS if (value := headers(key))}
    parent = propagate.extract(carrier)
    tracer = trace.get_tracer(TRACER_NAME)
    return tracer.start_as_current_span(
        name, context=parent, kind=trace.SpanKind.CONSUMER, attributes=dict(attributes)
    )


def span(name: str, attributes: Mapping[str, str]) -> AbstractContextManager[object]:
    """A span inside the current one (the agent call)."""
    if not _enabled:
        return _UNTRACED
    return trace.get_tracer(TRACER_NAME).start_as_current_span(name, attributes=dict(attributes))


def current_context() -> object:
    """The trace context here, to hand to another thread (None when off)."""
    return otel_context.get_current() if _enabled else None


def within(handed: object) -> AbstractContextManager[object]:
    """Run the block in a context `current_context()` returned on another thread."""
    if not _enabled or handed is None:
        return _UNTRACED
    return _attached(handed)


@contextmanager
def _attached(handed: object) -> Iterator[None]:
    token = otel_context.attach(handed)  # type: ignore[arg-type]
    try:
        yield
    finally:
        otel_context.detach(token)
