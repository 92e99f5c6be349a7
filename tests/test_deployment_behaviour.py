"""What every broker and store must do alike, on each combination the
deployment matrix selects (tests/support/matrix.py; in CI Redis and
RabbitMQ brokers): compose's web, worker and beat commands on them.

- A cancel of a running task reaches the worker that runs it (Celery's
  revoke, a broadcast on the broker) and the agent is stopped; the task
  stays canceled.
- A task saved but never queued (the front end died between the save and
  the publish) is sent again by beat and completes.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from shared.task import CANCELED, COMPLETED, WORKING
from tests.support.a2a import get_task, result, send_text, wait_ready, wait_state
from tests.support.compose import Backends, LocalStack, local_stack
from tests.support.polling import wait_for
from tests.support.settled import saved_without_reply

pytestmark = pytest.mark.matrix(ci=True)

SETTINGS = {
    "TOOLNEXUS_RUN": "examples.agents:slow",
    "TOOLNEXUS_CONCURRENCY": "2",
    "TOOLNEXUS_HEARTBEAT": "0.3",
    "TOOLNEXUS_STALE_AFTER": "2",
    "TOOLNEXUS_REAP_EVERY": "0.5",
}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, backends: Backends) -> Iterator[LocalStack]:
    folder: Path = tmp_path_factory.mktemp("behaviour")
    with local_stack(folder, SETTINGS, backends=backends) as (_, stack):
        stack.start("web", WEB_CONCURRENCY="1")
        stack.start("worker")
        stack.start("beat")
        wait_ready(stack.web_url)
        # Sent before the worker consumes, a task waits past the stale
        # threshold and beat sends it again: a second message with the same
        # id, which once finished (a no-op) hides the running one from
        # Celery's revoke (its requests table is keyed by task id).
        worker = stack.processes["worker"]
        wait_for(lambda: " ready." in worker.output(), timeout=60, what="the worker ready")
        yield stack


def test_a_cancel_stops_the_agent_on_its_worker(stack: LocalStack) -> None:
    task_id = send_text(stack.web_url, "60 to be canceled")["id"]
    wait_state(stack.web_url, task_id, frozenset({WORKING}))
    canceled = result(stack.web_url, "tasks/cancel", {"id": task_id})
    assert canceled["status"]["state"] == CANCELED
    # The revoke reached the worker, which ended the agent's process.
    worker = stack.processes["worker"]
    wait_for(
        lambda: f"task {task_id} canceled: terminated" in worker.output(),
        timeout=30,
        what="the worker to terminate the canceled task",
    )
    # The pool slot is free again: a new task runs to the end, and the
    # canceled one stays canceled.
    follow_up = send_text(stack.web_url, "0.1 after the cancel")["id"]
    assert wait_state(stack.web_url, follow_up)["status"]["state"] == COMPLETED
    assert get_task(stack.web_url, task_id)["status"]["state"] == CANCELED


def test_a_task_saved_but_never_queued_is_sent_again_by_beat(stack: LocalStack) -> None:
    store = stack.open_store()
    task_id = saved_without_reply(store, "0.1 saved, never queued")
    done = wait_state(stack.web_url, task_id, timeout=60)
    assert done["status"]["state"] == COMPLETED
    # Completed because beat sent it (nothing else knew of it).
    resends = [line for line in stack.processes["beat"].output().splitlines() if "again" in line]
    assert any(task_id in line for line in resends), resends
