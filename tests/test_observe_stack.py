"""Monitoring against the real thing: compose's web (gunicorn, two processes),
worker (Celery, two pool processes), beat and Flower, run as local processes
on a private Redis (tests.support.compose), with JSON logs and worker and
beat metrics ports.

- Flower tells the truth: each A2A outcome becomes the Celery state the
  README promises, and a failure is neither redelivered nor run twice.
- One request id follows a task from the web request into the worker.
- /metrics adds up every gunicorn process and is read by prometheus_client's
  own parser; the worker and beat export fulfilments and reaps.
"""

from __future__ import annotations

import json
import os
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import requests
from prometheus_client.parser import text_string_to_metric_families

from shared.stores.redis.store import redis_store
from shared.task import (
    CANCELED,
    COMPLETED,
    FAILED,
    INPUT_REQUIRED,
    REJECTED,
    WORKING,
    new_task,
    text_message,
)
from tests.support.a2a import call, result, wait_ready, wait_state
from tests.support.agents import runs_of
from tests.support.compose import ROOT, LocalStack, local_stack
from tests.support.flower import flower_workers_alive
from tests.support.polling import wait_for
from tests.support.redis_server import free_port
from tests.support.shortcuts import with_status

FLOWER_LOGIN = ("admin", "secret")
LIVENESS = {
    "TOOLNEXUS_HEARTBEAT": "0.5",
    "TOOLNEXUS_STALE_AFTER": "2",
    "TOOLNEXUS_REAP_EVERY": "1",
    "TOOLNEXUS_CONCURRENCY": "2",
}
ENDED = frozenset({COMPLETED, FAILED, REJECTED, CANCELED, INPUT_REQUIRED})


class Observed:
    """The running stack, the file counting the agent's runs and the metrics ports."""

    def __init__(self, stack: LocalStack, runs: Path, worker_port: int, beat_port: int) -> None:
        self.stack = stack
        self.runs = runs
        self.metrics_ports = {"worker": worker_port, "beat": beat_port}
        self.worker_metrics = f"http://127.0.0.1:{worker_port}/metrics"
        self.beat_metrics = f"http://127.0.0.1:{beat_port}/metrics"
        self.broker = redis.Redis.from_url(stack.environments["worker"]["TOOLNEXUS_BROKER_URL"])

    @property
    def web(self) -> str:
        return self.stack.web_url

    def alive(self) -> None:
        for process in self.stack.processes.values():
            assert process.alive(), f"{process.name} exited:\n{process.output()[-3000:]}"

    def start(self, name: str) -> None:
        self.stack.start(
            name,
            PYTHONPATH=str(ROOT),
            SCRIPTED_RUNS=str(self.runs),
            TOOLNEXUS_RUN="tests.support.agents:scripted",
            TOOLNEXUS_LOG_FORMAT="json",
            WEB_CONCURRENCY="2",
            TOOLNEXUS_METRICS_PORT=str(self.metrics_ports.get(name, "")),
            **LIVENESS,
        )

    def send(self, text: str, request_id: str | None = None) -> tuple[str, requests.Response]:
        """A non-blocking message/send; the task id and the HTTP reply."""
        body = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "message/send",
            "params": {
                "message": {
                    "role": "user",
                    "messageId": str(uuid.uuid4()),
                    "parts": [{"kind": "text", "text": text}],
                },
                "configuration": {"blocking": False},
            },
        }
        headers = {"X-Request-ID": request_id} if request_id is not None else {}
        reply = requests.post(f"{self.web}/", json=body, headers=headers, timeout=10)
        task_id = str(reply.json()["result"]["id"])
        return task_id, reply

    def flower_task(self, task_id: str, state: str) -> dict[str, Any]:
        """Flower's record of `task_id` once it is in `state`."""

        def seen() -> dict[str, Any] | None:
            self.alive()
            try:
                reply = requests.get(
                    f"{self.stack.flower_url}/api/task/info/{task_id}", auth=FLOWER_LOGIN, timeout=5
                )
            except requests.ConnectionError:
                return None
            entry: dict[str, Any] = reply.json() if reply.status_code == 200 else {}
            return entry if entry.get("state") == state else None

        return wait_for(seen, timeout=40, what=f"flower to show {task_id} as {state}")

    def flower_ids(self, state: str) -> set[str]:
        reply = requests.get(
            f"{self.stack.flower_url}/api/tasks",
            params={"state": state},
            auth=FLOWER_LOGIN,
            timeout=5,
        )
        return set(reply.json())

    def undelivered(self, task_id: str) -> bool:
        """True once no copy of the task's message is queued or delivered unacknowledged."""
        queued = self.broker.lrange("toolnexus", 0, -1)
        unacked = self.broker.hvals("unacked")
        return not any(task_id.encode() in message for message in [*queued, *unacked])

    def log_entries(self, name: str) -> list[dict[str, Any]]:
        """The JSON log lines of one service."""
        entries = []
        for line in self.stack.processes[name].output().splitlines():
            if line.startswith("{"):
                entries.append(json.loads(line))
        return entries


@pytest.fixture(scope="module")
def observed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Observed]:
    folder = tmp_path_factory.mktemp("observe")
    overrides = {"FLOWER_BASIC_AUTH": ":".join(FLOWER_LOGIN), **LIVENESS}
    with local_stack(folder, overrides) as (_, stack):
        running = Observed(stack, folder / "runs.txt", free_port(), free_port())
        for name in ("web", "worker", "beat", "flower"):
            running.start(name)
        wait_ready(stack.web_url)
        # Events sent before Flower listens are gone: its tests start once it hears a worker.
        wait_for(
            lambda: any(flower_workers_alive(stack, FLOWER_LOGIN).values()),
            timeout=60,
            what="Flower to hear a worker's events",
        )
        yield running


def samples(text: str, name: str, **labels: str) -> float:
    """The value of one sample in a Prometheus exposition, parsed by prometheus_client."""
    found = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                found += sample.value
    return found


def scrape(url: str) -> str:
    reply = requests.get(url, timeout=5)
    assert reply.status_code == 200, reply.text
    assert reply.headers["Content-Type"].startswith("text/plain")
    return reply.text


# --- Flower tells the truth ------------------------------------------------------


def test_a_completed_task_is_a_success_in_flower(observed: Observed) -> None:
    task_id, _ = observed.send("hello flower")
    assert wait_state(observed.web, task_id)["status"]["state"] == COMPLETED
    assert observed.flower_task(task_id, "SUCCESS")["result"] == "'completed'"


def test_a_failed_task_is_a_failure_with_its_reason_run_once_and_not_redelivered(
    observed: Observed,
) -> None:
    text = f"fail: boom-{uuid.uuid4().hex[:8]}"
    task_id, _ = observed.send(text)
    assert wait_state(observed.web, task_id)["status"]["state"] == FAILED
    entry = observed.flower_task(task_id, "FAILURE")
    assert "TaskFailed" in entry["exception"] and text.split()[1] in entry["exception"]
    # Flower's Failed filter finds it.
    assert task_id in observed.flower_ids("FAILURE")
    # Acknowledged: no copy left to redeliver, and the function ran once.
    wait_for(lambda: observed.undelivered(task_id), what="the failed delivery to be acknowledged")
    assert len(runs_of(str(observed.runs), text)) == 1


def test_a_rejected_task_is_a_failure_saying_rejected(observed: Observed) -> None:
    task_id, _ = observed.send("reject: not for me")
    assert wait_state(observed.web, task_id)["status"]["state"] == REJECTED
    assert "rejected: not for me" in observed.flower_task(task_id, "FAILURE")["exception"]


def test_an_input_required_task_is_a_success_whose_result_says_so(observed: Observed) -> None:
    task_id, _ = observed.send("ask: who are you?")
    assert wait_state(observed.web, task_id, ENDED)["status"]["state"] == INPUT_REQUIRED
    assert observed.flower_task(task_id, "SUCCESS")["result"] == "'input-required'"


def test_a_task_canceled_while_running_is_revoked(observed: Observed) -> None:
    text = f"sleep 30 {uuid.uuid4().hex[:8]}"
    task_id, _ = observed.send(text)
    wait_state(observed.web, task_id, frozenset({WORKING}))
    assert result(observed.web, "tasks/cancel", {"id": task_id})["status"]["state"] == CANCELED
    observed.flower_task(task_id, "REVOKED")
    assert task_id not in observed.flower_ids("FAILURE") | observed.flower_ids("SUCCESS")
    wait_for(lambda: observed.undelivered(task_id), what="the revoked delivery to be acknowledged")
    assert len(runs_of(str(observed.runs), text)) == 1


def test_a_task_canceled_before_any_worker_took_it_is_revoked_and_never_runs(
    observed: Observed,
) -> None:
    # No worker hears the revoke: the delivery itself must find and report it.
    observed.stack.stop("worker")
    text = f"late {uuid.uuid4().hex[:8]}"
    task_id, _ = observed.send(text)
    assert result(observed.web, "tasks/cancel", {"id": task_id})["status"]["state"] == CANCELED
    observed.start("worker")
    observed.flower_task(task_id, "REVOKED")
    wait_for(lambda: observed.undelivered(task_id), what="the canceled delivery to be acknowledged")
    assert runs_of(str(observed.runs), text) == []
    assert call(observed.web, "tasks/get", {"id": task_id})["result"]["status"]["state"] == CANCELED


def test_a_task_whose_pool_process_died_ends_as_the_reapers_failure(observed: Observed) -> None:
    text = f"sleep 30 {uuid.uuid4().hex[:8]}"
    task_id, _ = observed.send(text)
    wait_state(observed.web, task_id, frozenset({WORKING}))
    (pid,) = wait_for(lambda: runs_of(str(observed.runs), text), what="the run to start")
    os.kill(pid, signal.SIGKILL)  # the pool process, not the worker: Celery requeues the message
    failed = wait_state(observed.web, task_id)
    assert failed["status"]["state"] == FAILED
    entry = observed.flower_task(task_id, "FAILURE")
    assert "worker lost" in entry["exception"]
    wait_for(lambda: observed.undelivered(task_id), what="the last delivery to be acknowledged")
    assert runs_of(str(observed.runs), text) == [pid]


# --- one request id from web to worker ---------------------------------------------


def test_the_request_id_is_echoed_and_logged_by_web_and_worker_with_the_task_id(
    observed: Observed,
) -> None:
    request_id = f"trace-{uuid.uuid4().hex}"
    task_id, reply = observed.send("hello correlation", request_id)
    assert reply.headers["X-Request-ID"] == request_id
    wait_state(observed.web, task_id)

    def worker_lines() -> list[dict[str, Any]]:
        return [
            entry
            for entry in observed.log_entries("worker")
            if entry.get("request_id") == request_id and entry.get("task_id") == task_id
        ]

    worker = wait_for(worker_lines, what="the worker's lines for the request")
    assert any(entry["logger"] == "worker.engine.observe" for entry in worker)
    assert any(entry.get("outcome") == COMPLETED for entry in worker)
    web = [e for e in observed.log_entries("web") if e.get("request_id") == request_id]
    assert len(web) == 1, web
    assert web[0]["task_id"] == task_id
    assert web[0]["method"] == "message/send" and web[0]["dialect"] == "a2a-0.3"
    assert web[0]["outcome"] == "ok" and web[0]["status"] == 200
    assert isinstance(web[0]["duration_ms"], float)


def test_an_unsafe_request_id_is_replaced_by_a_made_one(observed: Observed) -> None:
    _, reply = observed.send("hello", "bad id\twith spaces")
    echoed = reply.headers["X-Request-ID"]
    assert echoed != "bad id\twith spaces" and len(echoed) == 32 and echoed.isalnum()


def test_every_process_logs_one_start_up_line_and_web_logs_only_json(observed: Observed) -> None:
    for name in ("web", "worker", "beat"):
        lines = [e for e in observed.log_entries(name) if "starting: store" in e["message"]]
        assert lines, f"{name} logged no start-up line"
        for word in ("broker redis://", "queue toolnexus", "run tests.support.agents:scripted"):
            assert word in lines[-1]["message"], (name, lines[-1]["message"])
    web_lines = [line for line in observed.stack.processes["web"].output().splitlines() if line]
    assert web_lines and all(isinstance(json.loads(line), dict) for line in web_lines)


# --- metrics -------------------------------------------------------------------------------


def test_web_metrics_add_up_every_gunicorn_process(observed: Observed) -> None:
    marker = f"metrics-{uuid.uuid4().hex[:8]}"
    sent = 0

    def served_by_two_processes() -> bool:
        nonlocal sent
        reply = requests.post(  # a fresh connection each time, so either process may answer
            f"{observed.web}/",
            json={"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "no-such"}},
            headers={"X-Request-ID": f"{marker}-{sent}", "Connection": "close"},
            timeout=10,
        )
        assert reply.json()["error"]["code"] == -32001
        sent += 1
        pids = {
            entry["process"]
            for entry in observed.log_entries("web")
            if str(entry.get("request_id", "")).startswith(marker)
        }
        return len(pids) >= 2

    wait_for(served_by_two_processes, timeout=60, what="both gunicorn processes to answer")
    # Each scrape may be answered by either process; each sees every process's count.
    for _ in range(4):
        text = scrape(f"{observed.web}/metrics")
        count = samples(text, "toolnexus_requests_total", method="GetTask", outcome="-32001")
        assert count == sent
        latency = samples(text, "toolnexus_request_duration_seconds_count", method="GetTask")
        assert latency == sent


def test_open_streams_are_counted_while_open(observed: Observed) -> None:
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "message/stream",
        "params": {
            "message": {
                "role": "user",
                "messageId": str(uuid.uuid4()),
                "parts": [{"kind": "text", "text": "sleep 2 streamed"}],
            }
        },
    }
    metrics = f"{observed.web}/metrics"
    with requests.post(f"{observed.web}/", json=body, stream=True, timeout=30) as stream:
        assert stream.headers["Content-Type"].startswith("text/event-stream")
        received = stream.iter_lines()
        next(received)  # ": stream open"
        # Counted from the stream's first step, which the server takes just
        # after sending that line: awaited while the stream (2 s) is open.
        wait_for(
            lambda: samples(scrape(metrics), "toolnexus_streams_open") == 1,
            timeout=30,
            what="the open stream to be counted",
        )
        lines = [line for line in received if line.startswith(b"data:")]
    assert json.loads(lines[-1][5:])["result"]["status"]["state"] == COMPLETED
    wait_for(
        lambda: samples(scrape(metrics), "toolnexus_streams_open") == 0,
        what="the stream to count as closed",
    )


def test_the_worker_exports_fulfilments_by_outcome_across_its_pool(observed: Observed) -> None:
    before = scrape(observed.worker_metrics)
    ids = [observed.send(f"count {n}")[0] for n in range(6)]
    failing, _ = observed.send("fail: counted")
    for task_id in ids:
        wait_state(observed.web, task_id)
    wait_state(observed.web, failing)

    def delta(text: str, name: str, outcome: str) -> float:
        return samples(text, name, outcome=outcome) - samples(before, name, outcome=outcome)

    def counted() -> str | None:
        text = scrape(observed.worker_metrics)
        return text if delta(text, "toolnexus_fulfilments_total", FAILED) == 1 else None

    after = wait_for(counted, what="the worker to count the failure")
    assert delta(after, "toolnexus_fulfilments_total", COMPLETED) == len(ids)
    assert delta(after, "toolnexus_fulfilment_duration_seconds_count", COMPLETED) == len(ids)


def test_beat_exports_the_tasks_it_reaped(observed: Observed) -> None:
    before = samples(scrape(observed.beat_metrics), "toolnexus_reaped_total")
    # A task a dead worker left `working`: its last heartbeat is at time 0.
    store = redis_store(observed.stack.store_url, clock=lambda: 0.0)
    orphan = store.save(with_status(new_task(text_message("user", "orphan")), WORKING))
    assert wait_state(observed.web, orphan["id"])["status"]["state"] == FAILED
    wait_for(
        lambda: samples(scrape(observed.beat_metrics), "toolnexus_reaped_total") == before + 1,
        what="beat to count the reaped task",
    )
