"""OpenTelemetry (the `otel` extra, part of the test extra): one trace per task,
from the HTTP request through the Celery message to the agent call, caught
by an in-memory span exporter. A real front end, a real Celery worker
(a thread) on a private Redis, and the embedded in-process path."""

from __future__ import annotations

import importlib.util
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from celery.contrib.testing.worker import start_worker

from shared.broker.dispatch import CeleryDispatcher
from shared.settings import Settings
from shared.stores.memory.store import memory_store
from tests.support.polling import wait_for
from tests.support.redis_server import ci
from web import create_app
from worker.engine.agent import load_agent
from worker.engine.inprocess import InProcessDispatcher
from worker.runtime.app import create_celery

if importlib.util.find_spec("opentelemetry.sdk") is None:
    MESSAGE = "NO OTEL: pip install -e '.[otel]' to test tracing"
    if ci():
        pytest.fail(MESSAGE, pytrace=False)
    pytest.skip(MESSAGE, allow_module_level=True)

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

QUEUE = "toolnexus-tracing-test"


@pytest.fixture(scope="module")
def exporter() -> InMemorySpanExporter:
    """Spans of this process, kept in memory. The provider is set once per
    process (OpenTelemetry allows no second one), so it may be there already."""
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    kept = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(kept))
    return kept


def send(client: Any) -> str:
    message = {
        "role": "user",
        "messageId": str(uuid.uuid4()),
        "parts": [{"kind": "text", "text": "traced"}],
    }
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message}}
    return str(client.post("/", json=body).get_json()["result"]["id"])


def spans_of_task(exporter: InMemorySpanExporter, task_id: str) -> dict[str, ReadableSpan]:
    """The task's spans by name, once its agent span has ended."""

    def ended() -> dict[str, ReadableSpan] | None:
        finished = exporter.get_finished_spans()
        agents = [
            s
            for s in finished
            if s.name == "agent" and (s.attributes or {}).get("toolnexus.task_id") == task_id
        ]
        if not agents:
            return None
        trace_id = agents[0].context.trace_id
        return {s.name: s for s in finished if s.context.trace_id == trace_id}

    return wait_for(ended, timeout=20, what="the agent span")


def parent_of(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


@pytest.fixture
def through_celery(redis_url: str, exporter: InMemorySpanExporter) -> Iterator[Any]:
    settings = Settings(broker_url=redis_url, store=redis_url, queue=QUEUE)
    dispatcher = CeleryDispatcher(settings)
    web = create_app(settings, dispatcher=dispatcher)
    with start_worker(
        create_celery(settings),
        pool="threads",
        concurrency=2,
        perform_ping_check=False,
        loglevel="WARNING",
    ):
        yield web.test_client()
    dispatcher.close()


def test_one_trace_from_the_request_through_the_message_to_the_agent(
    through_celery: Any, exporter: InMemorySpanExporter
) -> None:
    exporter.clear()
    task_id = send(through_celery)
    spans = spans_of_task(exporter, task_id)
    request = spans["POST /"]
    publish = spans["publish toolnexus.fulfil"]
    process = spans["process toolnexus.fulfil"]
    agent = spans["agent"]
    assert request.kind == trace.SpanKind.SERVER and parent_of(request) is None
    assert parent_of(publish) == request.context.span_id
    assert parent_of(process) == publish.context.span_id  # carried in the message headers
    assert parent_of(agent) == process.context.span_id
    assert (publish.attributes or {})["messaging.message.id"] == task_id


def test_each_task_is_its_own_trace(through_celery: Any, exporter: InMemorySpanExporter) -> None:
    exporter.clear()
    first, second = send(through_celery), send(through_celery)
    traces = {
        next(iter(spans_of_task(exporter, task_id).values())).context.trace_id
        for task_id in (first, second)
    }
    assert len(traces) == 2


def test_the_embedded_worker_thread_continues_the_request_trace(
    exporter: InMemorySpanExporter,
) -> None:
    settings = Settings()
    store = memory_store()
    dispatcher = InProcessDispatcher(store, load_agent(settings), settings, threads=1)
    try:
        client = create_app(settings, store=store, dispatcher=dispatcher).test_client()
        exporter.clear()
        task_id = send(client)
        spans = spans_of_task(exporter, task_id)
        assert parent_of(spans["agent"]) == spans["POST /"].context.span_id
    finally:
        assert dispatcher.close(timeout=5)
