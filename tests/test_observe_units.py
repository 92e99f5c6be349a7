"""The monitoring pieces one by one: request ids, the log formats, masked
URLs, what Celery is told for each A2A outcome, /metrics behind the bearer
tokens, and the embedded server's logs and metrics (one real process)."""

from __future__ import annotations

import io
import json
import logging
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from celery.exceptions import Ignore
from prometheus_client.parser import text_string_to_metric_families

from shared.broker.dispatcher import is_resend, resend_id
from shared.errors import StoreError
from shared.ops.correlation import accepted_request_id, correlated
from shared.ops.logs import CorrelationFilter, JsonFormatter, TextFormatter, fields
from shared.ops.startup import masked, startup_line
from shared.settings import Settings
from shared.stores.memory.store import memory_store
from shared.task import (
    AUTH_REQUIRED,
    CANCELED,
    COMPLETED,
    FAILED,
    INPUT_REQUIRED,
    REJECTED,
    SUBMITTED,
    WORKING,
    Task,
    agent_message,
    new_task,
    text_message,
)
from tests.support.polling import wait_for
from tests.support.redis_server import free_port
from tests.support.shortcuts import with_status
from tests.test_web_support import NoBroker
from web import create_app
from worker.runtime.outcome import TaskFailed, celery_result

ROOT = Path(__file__).resolve().parent.parent

# --- request ids --------------------------------------------------------------------


@pytest.mark.parametrize("given", ["abc", "req-1.2_3:4/5+6=7@8", "A" * 128])
def test_a_safe_request_id_is_kept(given: str) -> None:
    assert accepted_request_id(given) == given


@pytest.mark.parametrize(
    "given", [None, "", "A" * 129, "has space", "new\nline", '"quoted"', "-leading", "é"]
)
def test_an_unsafe_or_missing_request_id_is_replaced(given: str | None) -> None:
    made = accepted_request_id(given)
    assert made != given and len(made) == 32 and int(made, 16) >= 0


# --- log formats ----------------------------------------------------------------------


def format_one(formatter: logging.Formatter, emit: Any) -> str:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(formatter)
    handler.addFilter(CorrelationFilter())
    logger = logging.getLogger(f"test.observe.{uuid.uuid4().hex}")
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    emit(logger)
    return stream.getvalue()


def test_json_lines_carry_the_bound_ids_the_fields_and_the_trace_on_one_line() -> None:
    def emit(logger: logging.Logger) -> None:
        with correlated(request="req-7", task="task-9"):
            try:
                raise ValueError("bad\nthing")
            except ValueError:
                logger.exception("it broke: %s", "here", extra=fields(outcome="failed", n=None))

    output = format_one(JsonFormatter(), emit)
    assert output.count("\n") == 1
    entry = json.loads(output)
    assert entry["message"] == "it broke: here" and entry["level"] == "ERROR"
    assert entry["request_id"] == "req-7" and entry["task_id"] == "task-9"
    assert entry["outcome"] == "failed" and "n" not in entry
    assert "ValueError: bad\nthing" in entry["exception"]


def test_text_lines_name_the_ids_once() -> None:
    def emit(logger: logging.Logger) -> None:
        with correlated(request="req-7", task="task-9"):
            logger.info("task task-9: completed")
        logger.info("outside")

    first, second = format_one(TextFormatter(), emit).splitlines()
    assert first.endswith("task task-9: completed request_id=req-7")
    assert second.endswith("outside")


# --- start-up lines never show a secret -------------------------------------------------


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://:s3cret@redis:6379/1", "redis://:***@redis:6379/1"),
        ("rediss://user:s3cret@host/0", "rediss://user:***@host/0"),
        ("redis://host:6379/0?password=s3cret&db=2", "redis://host:6379/0?password=***&db=2"),
        ("redis://host:6379/0", "redis://host:6379/0"),
        ("file:./tasks", "file:./tasks"),
        ("memory", "memory"),
        ("mystore:make_store", "mystore:make_store"),
    ],
)
def test_passwords_in_urls_are_masked(url: str, shown: str) -> None:
    assert masked(url) == shown


def test_the_start_up_line_names_what_matters_and_no_secret() -> None:
    settings = Settings(
        store="redis://:s3cret@redis:6379/1",
        broker_url="redis://:s3cret@redis:6379/0",
        api_tokens=("alice:tok-s3cret",),
        queue="jobs",
        run="examples.agents:echo",
    )
    line = startup_line("worker", settings, {"node": "w1@host"})
    assert "s3cret" not in line
    for part in ("store redis://:***@redis:6379/1", "queue jobs", "run examples.agents:echo"):
        assert part in line
    assert line.endswith("node w1@host")


# --- what Celery (Flower) is told -----------------------------------------------------


def task_in(state: str, reason: str = "") -> Task:
    task = new_task(text_message("user", "hi"))
    return with_status(task, state, message=agent_message(reason) if reason else None)


@pytest.mark.parametrize("state", [COMPLETED, INPUT_REQUIRED, AUTH_REQUIRED])
def test_finished_and_waiting_outcomes_are_a_success_naming_the_state(state: str) -> None:
    assert celery_result("t1", state, lambda: None, pytest.fail) == state


@pytest.mark.parametrize("state", [FAILED, REJECTED])
def test_failed_and_rejected_outcomes_raise_with_the_tasks_reason(state: str) -> None:
    with pytest.raises(TaskFailed, match=f"^{state}: RuntimeError: boom$"):
        celery_result("t1", state, lambda: task_in(state, "RuntimeError: boom"), pytest.fail)


def test_a_failure_whose_reason_cannot_be_read_still_fails() -> None:
    def unreadable() -> Task:
        raise StoreError("down")

    with pytest.raises(TaskFailed, match=r"^failed$"):
        celery_result("t1", FAILED, unreadable, pytest.fail)


def test_a_canceled_outcome_is_announced_revoked_and_ignored() -> None:
    announced: list[bool] = []
    with pytest.raises(Ignore):
        celery_result("t1", CANCELED, pytest.fail, lambda: announced.append(True))
    assert announced == [True]


def test_a_task_missing_from_the_store_is_a_failure_saying_why() -> None:
    with pytest.raises(TaskFailed, match="not in the task store"):
        celery_result("t1", "", pytest.fail, pytest.fail)


@pytest.mark.parametrize("state", [WORKING, SUBMITTED])
def test_a_delivery_that_found_the_task_taken_reports_nothing(state: str) -> None:
    with pytest.raises(Ignore):
        celery_result("t1", state, pytest.fail, pytest.fail)


@pytest.mark.parametrize("state", [WORKING, SUBMITTED])
def test_a_resend_that_found_the_task_taken_ends_saying_so(state: str) -> None:
    # Under an id of its own it is its own entry in Flower: not STARTED for good.
    result = celery_result("t1", state, pytest.fail, pytest.fail, resent=True)
    assert result == f"{state}: another message of the task runs it"


def test_a_resend_redelivered_to_a_task_left_working_looks_again() -> None:
    class Recheck(Exception):
        pass

    def recheck() -> None:
        raise Recheck

    with pytest.raises(Recheck):
        celery_result(
            "t1", WORKING, pytest.fail, pytest.fail, redelivered=True, resent=True, recheck=recheck
        )


def test_only_the_reapers_resend_ids_are_resends() -> None:
    assert is_resend(resend_id("t1"), "t1")
    assert not is_resend("t1", "t1")
    assert not is_resend(resend_id("t2"), "t1")


# --- /metrics behind the bearer tokens ---------------------------------------------------


def test_metrics_need_a_token_when_tokens_are_configured() -> None:
    settings = Settings(api_tokens=("scraper:tok-1",))
    client = create_app(settings, store=memory_store(), dispatcher=NoBroker()).test_client()
    refused = client.get("/metrics")
    assert refused.status_code == 401 and "Bearer" in refused.headers["WWW-Authenticate"]
    assert client.get("/metrics", headers={"Authorization": "Bearer nope"}).status_code == 401
    allowed = client.get("/metrics", headers={"Authorization": "Bearer tok-1"})
    assert allowed.status_code == 200
    names = {family.name for family in text_string_to_metric_families(allowed.text)}
    assert "toolnexus_requests" in names


def test_requests_refused_before_the_method_is_known_count_by_their_error() -> None:
    settings = Settings(api_tokens=("tok-1",))
    client = create_app(settings, store=memory_store(), dispatcher=NoBroker()).test_client()
    refused = [
        client.post(
            "/", data=b"{}", headers={"Content-Type": "text/plain", "Authorization": "Bearer tok-1"}
        ),
        client.post("/", json={}),  # no token
    ]
    assert [reply.get_json()["error"]["code"] for reply in refused] == [-32005, -32000]
    assert all(reply.headers["X-Request-ID"] for reply in refused)
    metrics = client.get("/metrics", headers={"Authorization": "Bearer tok-1"})
    counted = {
        sample.labels["outcome"]
        for family in text_string_to_metric_families(metrics.get_data(as_text=True))
        for sample in family.samples
        if sample.name == "toolnexus_requests_total" and sample.labels["method"] == "POST /"
    }
    assert {"-32005", "-32000"} <= counted


# --- the embedded server: one process, same lines, same metrics ---------------------------


@pytest.fixture
def embedded(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    port, log = free_port(), tmp_path / "serve.log"
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "TOOLNEXUS_LOG_FORMAT": "json"}
    with log.open("wb") as output:
        process = subprocess.Popen(
            [sys.executable, "-m", "worker.embedded", "--port", str(port)],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=output,
        )
    url = f"http://127.0.0.1:{port}"

    def up() -> bool:
        assert process.poll() is None, log.read_text()
        try:
            return requests.get(f"{url}/healthz", timeout=1).status_code == 200
        except (requests.ConnectionError, requests.Timeout):
            return False

    try:
        wait_for(up, timeout=90, what="toolnexus-serve to answer")
        yield url, log
    finally:
        process.terminate()
        process.wait(20)


def test_embedded_mode_logs_and_counts_a_task_from_request_to_run(
    embedded: tuple[str, Path],
) -> None:
    url, log = embedded
    message = {"role": "user", "messageId": "m1", "parts": [{"kind": "text", "text": "hi"}]}
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message}}
    reply = requests.post(f"{url}/", json=body, headers={"X-Request-ID": "emb-1"}, timeout=10)
    assert reply.headers["X-Request-ID"] == "emb-1"
    task_id = reply.json()["result"]["id"]

    def entries() -> list[dict[str, Any]]:
        return [json.loads(line) for line in log.read_text().splitlines() if line]

    def run_logged() -> list[dict[str, Any]]:
        return [e for e in entries() if e["logger"] == "worker.engine.observe" and e.get("task_id")]

    ran = wait_for(run_logged, what="the run's log line")
    assert ran[0]["request_id"] == "emb-1" and ran[0]["task_id"] == task_id
    assert ran[0]["outcome"] == COMPLETED
    startup = [e for e in entries() if "starting: store memory" in e["message"]]
    assert len(startup) == 1 and "run examples.agents:echo" in startup[0]["message"]
    metrics = requests.get(f"{url}/metrics", timeout=5).text
    values = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(metrics)
        for sample in family.samples
    }
    assert values[("toolnexus_fulfilments_total", (("outcome", COMPLETED),))] == 1
    assert values[("toolnexus_tasks_queued_total", ())] == 1
