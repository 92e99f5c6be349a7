"""A new task in a context whose earlier task is still busy: each policy
(`shared.contexts`) on each binding, sent with the official a2a-sdk client
to a real `toolnexus-serve` (HTTP, gRPC, its in-process workers).

The agent waits on a file per task (`tests.support.waiting_agents`) and
marks when each run started and ended, so an order is read from the marks,
never from sleeps.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
import requests
from a2a.client import A2ACardResolver, A2AClientError, ClientConfig, ClientFactory
from a2a.types import Message, Part, Role, SendMessageConfiguration, SendMessageRequest
from google.protobuf.struct_pb2 import Struct

from shared.contexts import FIELD, LOOK_AGAIN_MAX, LOOK_AGAIN_MIN, PARALLEL, QUEUE
from shared.dialects import V10, task_for
from shared.errors import ConfigError
from shared.events import to_state
from shared.settings import Settings
from shared.task import COMPLETED, SUBMITTED, WORKING, new_task, text_message
from shared.transitions import claim, transition
from tests.support.embedded import embedded_server
from tests.support.polling import wait_for
from tests.support.redis_server import free_port
from tests.support.store_kinds import Stores
from tests.support.waiting_agents import Gate
from tests.test_worker_process import Fleet
from web.core.same_context import marked
from worker.engine.agent import Agent
from worker.engine.fulfil import fulfil

BINDINGS = ("JSONRPC", "HTTP+JSON", "GRPC")


class Served:
    def __init__(self, url: str, folder: Path) -> None:
        self.url = url
        self.folder = folder

    def gate(self, *, open_now: bool = False) -> Gate:
        name = uuid.uuid4().hex
        marks = self.folder / "marks"
        marks.mkdir(exist_ok=True)
        gate = Gate(go=str(self.folder / f"{name}.go"), marks=str(marks))
        if open_now:
            Path(gate.go).touch()
        return gate

    def state(self, task_id: str) -> str:
        answer = requests.post(
            self.url,
            headers={"A2A-Version": "1.0"},
            json={"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": task_id}},
            timeout=10,
        ).json()
        return str(answer["result"]["status"]["state"])

    def reaches(self, task_id: str, state: str) -> None:
        wait_for(lambda: self.state(task_id) == state, timeout=30, what=f"{task_id} {state}")

    def mark(self, task_id: str, what: str) -> float | None:
        found = sorted((self.folder / "marks").glob(f"{task_id}.{what}*"))
        written = found[0].read_text() if found else ""
        return float(written) if written else None  # (made, not yet written)

    def started(self, task_id: str) -> float:
        return wait_for(lambda: self.mark(task_id, "started"), timeout=30, what=f"{task_id} run")


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    folder = tmp_path_factory.mktemp("same-context")
    grpc_port = free_port()
    env = {
        "TOOLNEXUS_RUN": "tests.support.waiting_agents:gated_blocking",
        "TOOLNEXUS_GRPC_URL": f"127.0.0.1:{grpc_port}",
        "TOOLNEXUS_GRPC_PORT": str(grpc_port),
        "TOOLNEXUS_CONCURRENCY": "16",
    }
    with embedded_server(folder, env) as (host, port):
        yield Served(f"http://{host}:{port}/", folder)
        for gate in folder.glob("*.go"):
            gate.touch()  # nothing left waiting when the server stops
        for stray in folder.iterdir():
            if stray.suffix == "" and stray.is_file():
                stray.unlink()


def send(served: Served, binding: str, context: str, gate: Gate, policy: str | None) -> str:
    """One message sent with the a2a-sdk over `binding`; the id of its task."""
    return asyncio.run(_send(served.url, binding, context, gate.encode(), policy))


async def _send(url: str, binding: str, context: str, text: str, policy: str | None) -> str:
    async with httpx.AsyncClient(timeout=30) as http:
        card = await A2ACardResolver(http, url).get_agent_card()
        config = ClientConfig(
            streaming=False,
            supported_protocol_bindings=[binding],
            httpx_client=http,
            grpc_channel_factory=grpc.aio.insecure_channel,
        )
        client = ClientFactory(config).create(card)
        metadata = Struct()
        if policy is not None:
            metadata.update({"toolnexus.sameContext": policy})
        message = Message(
            role=Role.ROLE_USER,
            message_id=str(uuid.uuid4()),
            context_id=context,
            parts=[Part(text=text)],
            metadata=metadata,
        )
        request = SendMessageRequest(
            message=message, configuration=SendMessageConfiguration(return_immediately=True)
        )
        try:
            answers = [answer async for answer in client.send_message(request)]
        finally:
            await client.close()
    return str(answers[-1].task.id)


def send_body(context: str, text: str, policy: str) -> dict[str, Any]:
    """A 1.0 JSON-RPC SendMessage into `context` asking for `policy`, answered at once."""
    message = {
        "role": "ROLE_USER",
        "messageId": uuid.uuid4().hex,
        "contextId": context,
        "parts": [{"text": text}],
        "metadata": {"toolnexus.sameContext": policy},
    }
    params = {"message": message, "configuration": {"returnImmediately": True}}
    return {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": params}


def refusal(served: Served, binding: str, context: str, policy: str) -> dict[str, Any]:
    """What the sdk raises for a refused send: its message and, over
    HTTP+JSON (where the sdk keeps only the status), the error body."""
    gate = served.gate(open_now=True)
    with pytest.raises(A2AClientError) as raised:
        send(served, binding, context, gate, policy)
    cause = raised.value.__cause__
    body = cause.response.json() if isinstance(cause, httpx.HTTPStatusError) else None
    code = cause.code() if isinstance(cause, grpc.aio.AioRpcError) else None
    return {"message": str(raised.value), "body": body, "code": code}


@pytest.mark.parametrize("binding", BINDINGS)
def test_parallel_runs_a_second_task_beside_the_first(served: Served, binding: str) -> None:
    context = f"parallel-{uuid.uuid4().hex}"
    first, second = served.gate(), served.gate()
    one = send(served, binding, context, first, None)
    two = send(served, binding, context, second, "parallel")
    # Both runs start while both gates are shut: they run at once.
    served.started(one)
    served.started(two)
    Path(first.go).touch()
    Path(second.go).touch()
    served.reaches(one, "TASK_STATE_COMPLETED")
    served.reaches(two, "TASK_STATE_COMPLETED")


@pytest.mark.parametrize("binding", BINDINGS)
def test_queue_runs_a_context_s_tasks_one_after_another_in_send_order(
    served: Served, binding: str
) -> None:
    context = f"queue-{uuid.uuid4().hex}"
    first = served.gate()
    one = send(served, binding, context, first, None)
    served.started(one)
    two = send(served, binding, context, served.gate(open_now=True), "queue")
    three = send(served, binding, context, served.gate(open_now=True), "queue")
    assert served.state(two) == served.state(three) == "TASK_STATE_SUBMITTED"
    Path(first.go).touch()
    for task_id in (one, two, three):
        served.reaches(task_id, "TASK_STATE_COMPLETED")
    ended_one, ended_two = served.mark(one, "done"), served.mark(two, "done")
    assert ended_one is not None and ended_two is not None
    assert served.started(two) >= ended_one
    assert served.started(three) >= ended_two


@pytest.mark.parametrize("binding", BINDINGS)
def test_reject_refuses_a_task_naming_the_busy_one(served: Served, binding: str) -> None:
    context = f"reject-{uuid.uuid4().hex}"
    first = served.gate()
    one = send(served, binding, context, first, None)
    refused = refusal(served, binding, context, "reject")
    assert one in refused["message"] or one in str(refused["body"])
    if binding == "JSONRPC":
        assert "-32039" in refused["message"]
    elif binding == "HTTP+JSON":
        error = refused["body"]["error"]
        assert error["code"] == 409 and error["status"] == "ABORTED"
        (info,) = [d for d in error["details"] if d["@type"].endswith("ErrorInfo")]
        assert info["reason"] == "CONTEXT_BUSY"
        assert info["metadata"] == {"busyTaskId": one, "contextId": context}
    else:
        assert refused["code"] == grpc.StatusCode.ABORTED
    # Once the first has finished, the context takes a new task again.
    Path(first.go).touch()
    served.reaches(one, "TASK_STATE_COMPLETED")
    later = send(served, binding, context, served.gate(open_now=True), "reject")
    served.reaches(later, "TASK_STATE_COMPLETED")


@pytest.mark.parametrize("binding", BINDINGS)
def test_interrupt_cancels_the_busy_task_and_runs(served: Served, binding: str) -> None:
    context = f"interrupt-{uuid.uuid4().hex}"
    first = served.gate()
    one = send(served, binding, context, first, None)
    served.started(one)
    two = send(served, binding, context, served.gate(open_now=True), "interrupt")
    served.reaches(one, "TASK_STATE_CANCELED")
    served.reaches(two, "TASK_STATE_COMPLETED")
    Path(first.go).touch()  # the canceled run's thread ends too


def test_a_policy_not_known_is_refused_naming_the_field(served: Served) -> None:
    answer = requests.post(
        served.url, headers={"A2A-Version": "1.0"}, json=send_body("c", "x", "later"), timeout=10
    ).json()
    assert answer["error"]["code"] == -32602
    assert "message.metadata.toolnexus.sameContext" in answer["error"]["message"]


def test_the_deployment_s_policy_applies_where_a_message_names_none(tmp_path: Path) -> None:
    env = {
        "TOOLNEXUS_RUN": "tests.support.waiting_agents:gated_blocking",
        "TOOLNEXUS_SAME_CONTEXT": "reject",
    }
    with embedded_server(tmp_path, env) as (host, port):
        served = Served(f"http://{host}:{port}/", tmp_path)
        first = served.gate()
        one = send(served, "JSONRPC", "c", first, None)
        refused = refusal(served, "JSONRPC", "c", "reject")
        assert "-32039" in refused["message"] and one in refused["message"]
        # A message's own choice wins over the deployment's.
        two = send(served, "JSONRPC", "c", served.gate(open_now=True), "parallel")
        served.reaches(two, "TASK_STATE_COMPLETED")
        Path(first.go).touch()
        served.reaches(one, "TASK_STATE_COMPLETED")


def test_a_same_context_setting_not_known_is_refused() -> None:
    with pytest.raises(ConfigError, match="TOOLNEXUS_SAME_CONTEXT"):
        Settings.from_env({"TOOLNEXUS_SAME_CONTEXT": "serial"})


# --- the worker's look at a queued task's context, on every store -----------


def test_a_queued_task_waits_for_its_context_on_every_store(
    store_kind: str, stores: Stores
) -> None:
    store = stores.open(store_kind)
    settings = Settings(heartbeat=0.05)
    agent = Agent(run=lambda text: f"ran {text}")

    def made(text: str, policy: str, context: str = "ctx", owner: str = "alice") -> str:
        task = marked(new_task(text_message("user", text), context, owner), policy)
        store.create(task)
        return task["id"]

    first = made("first", PARALLEL)
    assert claim(store, first, to=WORKING, from_state=SUBMITTED).applied
    second, third = made("second", QUEUE), made("third", QUEUE)
    # Another context, its own caller's or another's: not waited for.
    elsewhere = [made("other", QUEUE, context="other"), made("bob's", QUEUE, "bob", "bob")]
    looks: list[tuple[str, float]] = []

    def later(task_id: str, delay: float) -> None:
        looks.append((task_id, delay))

    assert fulfil(store, second, agent, settings, send_later=later) == SUBMITTED
    assert [task_id for task_id, _ in looks] == [second]
    assert LOOK_AGAIN_MIN <= looks[0][1] <= LOOK_AGAIN_MAX
    for task_id in elsewhere:
        assert fulfil(store, task_id, agent, settings, send_later=later) == COMPLETED

    assert transition(store, first, to_state(COMPLETED)).applied
    # The first has ended; the third still comes after the second.
    assert fulfil(store, third, agent, settings, send_later=later) == SUBMITTED
    assert fulfil(store, second, agent, settings, send_later=later) == COMPLETED
    assert fulfil(store, third, agent, settings, send_later=later) == COMPLETED
    assert [task_id for task_id, _ in looks] == [second, third]
    # Its policy is the service's own: no peer sees the field.
    stored = store.get(third)
    assert stored is not None and stored[FIELD] == QUEUE  # type: ignore[typeddict-item]
    assert FIELD not in task_for(V10, stored)


def test_of_racing_rejects_into_a_free_context_at_most_one_is_taken(
    tmp_path: Path, redis_url: str
) -> None:
    # On Redis, whose round trips let the sends interleave between the
    # first look and the task's save.
    env = {
        "TOOLNEXUS_RUN": "tests.support.waiting_agents:gated_blocking",
        "TOOLNEXUS_STORE": redis_url,
    }
    with embedded_server(tmp_path, env) as (host, port):
        _race(Served(f"http://{host}:{port}/", tmp_path))


def _race(served: Served) -> None:
    context = f"race-{uuid.uuid4().hex}"
    gate = served.gate()
    together = threading.Barrier(8)

    def one(_: int) -> str:
        body = send_body(context, gate.encode(), "reject")
        with requests.Session() as session:
            session.get(served.url + ".well-known/agent-card.json", timeout=10)  # connected
            together.wait(timeout=10)
            answer = session.post(
                served.url, headers={"A2A-Version": "1.0"}, json=body, timeout=10
            ).json()
        if "error" in answer:
            assert answer["error"]["code"] == -32039, answer
            return ""
        return str(answer["result"]["task"]["id"])

    with ThreadPoolExecutor(8) as pool:
        taken = [task_id for task_id in pool.map(one, range(8)) if task_id]
    Path(gate.go).touch()
    # The last saved sees every other: at most one runs (all may be refused).
    assert len(taken) <= 1, taken
    for task_id in taken:
        served.reaches(task_id, "TASK_STATE_COMPLETED")
    # The context is free again: a send is taken.
    later = send(served, "JSONRPC", context, served.gate(open_now=True), "reject")
    served.reaches(later, "TASK_STATE_COMPLETED")


def test_a_celery_worker_runs_a_queued_context_one_task_at_a_time(
    redis_url: str, tmp_path: Path
) -> None:
    fleet = Fleet(redis_url, tmp_path)
    try:
        fleet.worker("queue")  # two processes: room for the tasks to run at once
        ids = []
        for text, policy in (("1 one", PARALLEL), ("0.2 two", QUEUE), ("0.2 three", QUEUE)):
            task = marked(new_task(text_message("user", text), "ctx"), policy)
            fleet.store.create(task)  # as a front end saves a new task, into the listing
            fleet.dispatcher.enqueue(task["id"])
            ids.append(task["id"])
        for task_id in ids:
            fleet.wait(task_id, COMPLETED)

        def moment(task_id: str, state: str) -> str:
            return next(
                event["status"]["timestamp"]  # type: ignore[typeddict-item]
                for _, event in fleet.store.events(task_id, 0)
                if event["kind"] == "status-update" and event["status"]["state"] == state  # type: ignore[typeddict-item]
            )

        # Each queued task was claimed only after the one before it completed.
        for before, after in itertools.pairwise(ids):
            assert moment(after, WORKING) >= moment(before, COMPLETED)
    finally:
        fleet.close()
