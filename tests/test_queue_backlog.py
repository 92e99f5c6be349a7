"""The signals an autoscaler scales on, read from real brokers and workers.

The front end's `/metrics` reports each queue's depth and (on Redis) how
long its oldest message has waited, as the broker has them at the scrape:
tasks sent while no worker runs are counted, their age grows, and both
drain once a worker starts; the worker reports its capacity and the calls
it runs. With the broker unreachable the scrape still answers and says the
backlog is unknown. The embedded server counts its own in-process queue.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
import requests
from prometheus_client.parser import text_string_to_metric_families

from shared import Settings
from shared.broker.backlog import SENT_AT, redis_backlog
from shared.broker.dispatch import CeleryDispatcher
from shared.stores.memory.store import memory_store
from tests.support.a2a import send_text, wait_state
from tests.support.agents import gate
from tests.support.compose import Backends, LocalStack, local_stack
from tests.support.matrix import Combination
from tests.support.polling import wait_for
from tests.support.ports import free_port
from tests.support.served import serving_agents
from tests.test_web_support import live_server
from web import create_app

pytestmark = pytest.mark.matrix(ci=True)


Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def samples(url: str) -> Samples:
    """Every sample of a scrape, by name and labels, parsed as Prometheus parses it."""
    reply = requests.get(f"{url}/metrics", timeout=10)
    assert reply.status_code == 200, reply.text
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(reply.text)
        for sample in family.samples
    }


def of(found: Samples, name: str, **labels: str) -> float | None:
    return found.get((name, tuple(sorted(labels.items()))))


@pytest.fixture
def stack(tmp_path: Path, backends: Backends) -> Iterator[LocalStack]:
    with local_stack(tmp_path, {}, backends=backends) as (_, started):
        started.start("web")
        wait_for(lambda: _answers(started.web_url), timeout=60, what="web to answer")
        yield started


def _answers(url: str) -> bool:
    try:
        return requests.get(f"{url}/healthz", timeout=2).status_code == 200
    except (requests.ConnectionError, requests.Timeout):
        return False


def test_tasks_waiting_for_a_worker_are_counted_and_drain_once_one_runs(
    stack: LocalStack, combination: Combination
) -> None:
    web = stack.environments["web"]
    queue = web.get("TOOLNEXUS_QUEUE") or Settings().queue
    push_queue = web.get("TOOLNEXUS_PUSH_QUEUE") or Settings().push_queue
    on_redis = combination.broker == "redis"
    began = time.time()
    sent = [send_text(stack.web_url, f"waiting {n}")["id"] for n in range(5)]
    first_sent_by = time.time()

    scraped_from = time.time()
    found = samples(stack.web_url)
    scraped_by = time.time()
    assert of(found, "toolnexus_queue_backlog_up") == 1
    assert of(found, "toolnexus_queue_depth", queue=queue) == 5
    assert of(found, "toolnexus_queue_depth", queue=push_queue) == 0
    # Of the five, with no worker's slots registered, one is on the broker and
    # four wait in the turn book for their turn: the depth counts both.
    assert of(found, "toolnexus_tasks_held") == 4
    assert of(found, "toolnexus_tasks_in_flight") == 1
    assert of(found, "toolnexus_turn_slots") == 0
    age = of(found, "toolnexus_queue_oldest_age_seconds", queue=queue)
    if on_redis:
        # The oldest message is the first task's: sent between `began` and
        # `first_sent_by`, and aged when the scrape was answered, between
        # `scraped_from` and `scraped_by`: bounds a slow machine only widens
        # (0.05 s for the sent time's rounding in the message).
        assert age is not None
        assert scraped_from - first_sent_by - 0.05 <= age <= scraped_by - began + 0.05
        time.sleep(0.3)  # the age is a clock's reading: it must move with it
        later = of(samples(stack.web_url), "toolnexus_queue_oldest_age_seconds", queue=queue)
        assert later is not None and later >= age + 0.25
    else:
        # RabbitMQ shows no message without delivering it; with no worker's
        # slots registered, one task is on the broker and four wait in the
        # turn book (shared.owners.turns), whose age is known: the age of one
        # sent after `began`.
        assert age is not None and 0 <= age <= time.time() - began + 0.05

    metrics_port = free_port()
    stack.start("worker", TOOLNEXUS_METRICS_PORT=str(metrics_port))
    for task_id in sent:
        assert wait_state(stack.web_url, task_id, timeout=60)["status"]["state"] == "completed"
    drained = samples(stack.web_url)
    assert of(drained, "toolnexus_queue_depth", queue=queue) == 0
    assert of(drained, "toolnexus_tasks_held") == 0
    slots = of(drained, "toolnexus_turn_slots")
    assert slots is not None and slots >= 1  # the worker's, while it runs
    assert of(drained, "toolnexus_queue_oldest_age_seconds", queue=queue) == 0

    worker = wait_for(
        lambda: _scraped(f"http://127.0.0.1:{metrics_port}"), timeout=30, what="worker metrics"
    )
    concurrency = stack.environments["worker"].get("TOOLNEXUS_CONCURRENCY")
    capacity = of(worker, "toolnexus_worker_capacity")
    assert capacity is not None and capacity >= 1
    if concurrency:
        assert capacity == int(concurrency)
    assert of(worker, "toolnexus_tasks_running") == 0  # every call has ended


def _scraped(url: str) -> Samples | None:
    try:
        found = samples(url)
    except requests.ConnectionError:
        return None
    return found if of(found, "toolnexus_worker_capacity") is not None else None


def test_with_the_broker_unreachable_the_scrape_answers_and_says_the_backlog_is_unknown() -> None:
    closed = free_port()  # nothing listens there
    settings = Settings(broker_url=f"redis://127.0.0.1:{closed}/0")
    dispatcher = CeleryDispatcher(settings)
    try:
        app = create_app(settings, store=memory_store(), dispatcher=dispatcher)
        with live_server(app) as (url, _):
            found = samples(url)
    finally:
        dispatcher.close()
    assert of(found, "toolnexus_queue_backlog_up") == 0
    assert not [key for key in found if key[0] == "toolnexus_queue_depth"]


def test_the_embedded_server_counts_its_own_queue_and_running_calls() -> None:
    entered, opened = gate("backlog")
    with serving_agents() as serve:
        url, _ = serve("tests.support.agents:gated", queue="embedded-queue")
        try:
            sent = [send_text(url, f"backlog {n}")["id"] for n in range(6)]
            # Four threads (tests.support.served): four calls run, two wait.
            found = wait_for(
                lambda: _settled(url, running=4, waiting=2), timeout=30, what="4 running, 2 queued"
            )
            assert of(found, "toolnexus_worker_capacity") == 4
            age = of(found, "toolnexus_queue_oldest_age_seconds", queue="embedded-queue")
            assert age is not None and age > 0
        finally:
            opened.set()
        for task_id in sent:
            assert wait_state(url, task_id)["status"]["state"] == "completed"
        drained = wait_for(lambda: _settled(url, running=0, waiting=0), timeout=30, what="drained")
        assert of(drained, "toolnexus_queue_oldest_age_seconds", queue="embedded-queue") == 0
    assert entered.is_set()


def _settled(url: str, *, running: int, waiting: int) -> Samples | None:
    found = samples(url)
    now = (
        of(found, "toolnexus_tasks_running"),
        of(found, "toolnexus_queue_depth", queue="embedded-queue"),
    )
    return found if now == (running, waiting) else None


def test_a_redis_queue_counts_every_priority_and_dates_only_the_services_messages(
    redis_url: str,
) -> None:
    client = redis.Redis.from_url(redis_url)
    dated = json.dumps({"headers": {SENT_AT: time.time() - 5}, "body": ""})
    undated = json.dumps({"headers": {}, "body": ""})
    client.lpush("mixed", undated)  # the oldest: its age is unknown
    client.lpush("mixed", dated)
    client.lpush("mixed\x06\x163", dated)  # kombu's list for priority 3
    client.lpush("dated", dated)
    client.lpush("dated", undated)  # newer than the dated one: not what is read
    found = {
        backlog.queue: backlog for backlog in redis_backlog(client, ["mixed", "dated", "none"])
    }
    assert (found["mixed"].depth, found["mixed"].oldest_age) == (3, None)
    age = found["dated"].oldest_age
    assert found["dated"].depth == 2 and age is not None and 5 <= age < 60
    assert (found["none"].depth, found["none"].oldest_age) == (0, None)
