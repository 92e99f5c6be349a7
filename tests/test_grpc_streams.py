"""Many open gRPC streams in one gRPC process, without a thread each.

The real gRPC process (`python -m web.grpc_process`, on grpc.aio) on a
private Redis, with no worker: the tasks it accepts stay `submitted` until
this test moves them, writing to the same store as a worker would (its
events reach the process through Redis pub/sub). Also: the process imports no Flask.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from a2a.types import a2a_pb2, a2a_pb2_grpc

from shared.events import to_state
from shared.stores.redis.store import RedisStore, redis_store
from shared.task import COMPLETED, WORKING, text_message
from shared.transitions import transition
from tests.support.compose import ServiceProcess
from tests.support.grpc_process import grpc_process
from tests.support.polling import wait_for
from tests.support.redis_server import free_port
from web.grpc.aio import STREAM_THREADS

ROOT = Path(__file__).resolve().parent.parent
METADATA = (("a2a-version", "1.0"),)
# 1,000 in bench/grpc_load.py; a few hundred here, for the suite's time.
STREAMS = int(os.environ.get("TOOLNEXUS_TEST_STREAMS", "300"))
# The process's OS threads: grpcio's own, the unary calls' pool (grown by the
# sends that made the tasks), the streams' few: bounded, however many
# streams are open.
THREAD_BOUND = 64
STEPS = 3  # agent messages each task says before it completes
WORKING_STATE = a2a_pb2.TaskState.TASK_STATE_WORKING
COMPLETED_STATE = a2a_pb2.TaskState.TASK_STATE_COMPLETED


class GrpcProcess:
    def __init__(self, process: ServiceProcess, port: int, store: RedisStore) -> None:
        self.service = process
        self.address = f"127.0.0.1:{port}"
        self.store = store

    def threads(self) -> int:
        return len(os.listdir(f"/proc/{self.service.process.pid}/task"))


@pytest.fixture(scope="module")
def served(
    redis_server_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GrpcProcess]:
    store_url = f"{redis_server_url}/5"
    port = free_port()
    env = {
        "TOOLNEXUS_STORE": store_url,
        "TOOLNEXUS_BROKER_URL": f"{redis_server_url}/6",
        "TOOLNEXUS_QUEUE": "grpc-streams",
        "TOOLNEXUS_GRPC_PORT": str(port),
        "TOOLNEXUS_LOG_LEVEL": "WARNING",
        # every module this process ever imports, on its stderr (the log)
        "PYTHONPROFILEIMPORTTIME": "1",
    }
    log = tmp_path_factory.mktemp("grpc-streams") / "grpc.log"
    with grpc_process(env, log) as process:
        yield GrpcProcess(process, port, redis_store(store_url))


def send_request() -> a2a_pb2.SendMessageRequest:
    message = a2a_pb2.Message(
        role=a2a_pb2.Role.ROLE_USER,
        message_id=str(uuid.uuid4()),
        parts=[a2a_pb2.Part(text="hello")],
    )
    configuration = a2a_pb2.SendMessageConfiguration(return_immediately=True)
    return a2a_pb2.SendMessageRequest(message=message, configuration=configuration)


def event_id(response: a2a_pb2.StreamResponse) -> int:
    field = response.WhichOneof("payload")
    return int(getattr(response, field).metadata["toolnexus.eventId"])


def step(response: a2a_pb2.StreamResponse) -> tuple[int, str]:
    """A status update's state and its message's text."""
    update = response.status_update
    text = update.status.message.parts[0].text if update.status.message.parts else ""
    return update.status.state, text


def run_task(store: RedisStore, task_id: str) -> None:
    """What an agent would save: STEPS progress messages, then completed."""
    for index in range(STEPS):
        message = text_message("agent", f"step {index}")
        assert transition(store, task_id, to_state(WORKING, message)).applied
    assert transition(store, task_id, to_state(COMPLETED)).applied


async def open_streams(served: GrpcProcess, count: int) -> dict[str, Any]:
    async with grpc.aio.insecure_channel(served.address) as channel:
        stub = a2a_pb2_grpc.A2AServiceStub(channel)
        sending = asyncio.Semaphore(16)  # the unary calls' pool grows no further

        async def send() -> Any:
            async with sending:
                return await stub.SendMessage(send_request(), metadata=METADATA, timeout=60)

        sent = await asyncio.gather(*(send() for _ in range(count)))
        ids = [reply.task.id for reply in sent]
        idle_threads = served.threads()
        calls = [
            stub.SubscribeToTask(a2a_pb2.SubscribeToTaskRequest(id=i), metadata=METADATA)
            for i in ids
        ]
        firsts = await asyncio.gather(*(asyncio.wait_for(call.read(), 120) for call in calls))
        assert all(first.task.id == i for first, i in zip(firsts, ids, strict=True))
        open_threads = served.threads()  # every stream open, each waiting on its task

        loop = asyncio.get_running_loop()
        moved = [loop.run_in_executor(None, run_task, served.store, i) for i in ids]
        rests = await asyncio.gather(*(asyncio.wait_for(_rest(call), 120) for call in calls))
        await asyncio.gather(*moved)
    return {
        "idle": idle_threads,
        "open": open_threads,
        "streams": list(zip(firsts, rests, strict=True)),
    }


async def _rest(call: Any) -> list[a2a_pb2.StreamResponse]:
    responses = []
    while (response := await call.read()) is not grpc.aio.EOF:
        responses.append(response)
    return responses


def test_open_streams_hold_no_thread_each_and_see_their_events_in_order(
    served: GrpcProcess,
) -> None:
    found = asyncio.run(open_streams(served, STREAMS))
    assert found["open"] <= THREAD_BOUND, (found, STREAMS)
    # opening them started at most the streams' own few readers
    assert found["open"] <= found["idle"] + STREAM_THREADS + 4
    for first, rest in found["streams"]:
        ids = [event_id(first), *(event_id(response) for response in rest)]
        assert ids == list(range(ids[0], ids[0] + len(ids)))  # in order, none missed or repeated
        assert [step(response) for response in rest] == [
            *((WORKING_STATE, f"step {index}") for index in range(STEPS)),
            (COMPLETED_STATE, ""),
        ]


def test_a_stream_resumes_after_the_last_event_id_it_saw(served: GrpcProcess) -> None:
    with grpc.insecure_channel(served.address) as channel:
        stub = a2a_pb2_grpc.A2AServiceStub(channel)
        task = stub.SendMessage(send_request(), metadata=METADATA, timeout=30).task
        request = a2a_pb2.SubscribeToTaskRequest(id=task.id)
        first = stub.SubscribeToTask(request, metadata=METADATA, timeout=60)
        seen = next(first)
        assert seen.task.id == task.id
        first.cancel()  # the client goes away; the task moves on meanwhile
        message = text_message("agent", "while away")
        assert transition(served.store, task.id, to_state(WORKING, message)).applied
        resumed = stub.SubscribeToTask(
            request, metadata=[*METADATA, ("last-event-id", str(event_id(seen)))], timeout=60
        )
        missed = next(resumed)
        assert not missed.HasField("task")  # no snapshot: it has the task already
        assert (event_id(missed), step(missed)) == (
            event_id(seen) + 1,
            (WORKING_STATE, "while away"),
        )
        assert transition(served.store, task.id, to_state(COMPLETED)).applied
        rest = list(resumed)
    assert [step(response)[0] for response in rest] == [COMPLETED_STATE]
    assert event_id(rest[0]) == event_id(missed) + 1


def test_the_grpc_process_imports_no_flask(served: GrpcProcess) -> None:
    """After serving calls of every kind, no Flask module was ever imported
    (PYTHONPROFILEIMPORTTIME lists each import on the process's stderr)."""
    with grpc.insecure_channel(served.address) as channel:
        stub = a2a_pb2_grpc.A2AServiceStub(channel)
        task = stub.SendMessage(send_request(), metadata=METADATA, timeout=30).task
        stub.GetTask(a2a_pb2.GetTaskRequest(id=task.id), metadata=METADATA, timeout=30)
        stub.ListTasks(a2a_pb2.ListTasksRequest(page_size=5), metadata=METADATA, timeout=30)
        stub.CancelTask(a2a_pb2.CancelTaskRequest(id=task.id), metadata=METADATA, timeout=30)
    imported = wait_for(
        lambda: [line.rsplit("|", 1)[-1].strip() for line in served.service.output().splitlines()
                 if line.startswith("import time:")] or None,
        timeout=30,
    )  # fmt: skip
    assert "web.grpc.service" in imported and "grpc.aio" in imported  # the listing is whole
    assert [name for name in imported if name.split(".")[0] == "flask"] == []
