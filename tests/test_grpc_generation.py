"""A2A 1.1's task generation, long-poll GetTask and ifGenerationMatch over
gRPC: the binding on both of this project's gRPC servers (grpc.aio's, what
the gRPC process serves, and grpcio's synchronous one, the embedded
server's), with the agent on in-process workers; the gRPC process itself
serving many long-polls without a thread each; and what a 1.0 caller reads,
unchanged byte for byte.

A 1.1 caller here is raw RPCs with the draft's messages (`web.grpc.draft11`)
and `a2a-version: 1.1`; a 1.0 caller, the SDK's compiled messages, or the
draft's fields sent anyway (as unknown fields reach a 1.0 server).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc
import pytest
from a2a.types import a2a_pb2
from google.protobuf import json_format
from google.protobuf.message import Message as ProtoMessage
from google.rpc import error_details_pb2, status_pb2

from shared import Settings
from shared.events import to_state
from shared.generation import generation_of
from shared.store.contract import Store
from shared.store.resolve import resolve_store
from shared.stores.redis.store import redis_store
from shared.task import COMPLETED, INPUT_REQUIRED, WORKING, agent_message, new_task, text_message
from shared.transitions import transition
from tests.support.agents import gate
from tests.support.compose import ServiceProcess
from tests.support.grpc_process import grpc_process as started_grpc_process
from tests.support.polling import wait_for
from tests.support.ports import free_port
from web.assembly import assemble
from web.grpc import draft11
from web.grpc.aio import STREAM_THREADS, AsyncA2AGrpcService
from web.grpc.server import aio_server, serve
from web.grpc_process import service_on
from worker.engine.agent import load_agent
from worker.engine.inprocess import InProcessDispatcher

ROOT = Path(__file__).resolve().parent.parent
SERVICE = draft11.SERVICE.full_name
V11 = (("a2a-version", "1.1"),)
V10 = (("a2a-version", "1.0"),)
SERVERS = ["aio", "sync"]
# A long-poll that never times out within a test: a call still waiting is a bug, and
# it shows as the call's own deadline (CALL_TIMEOUT) passing.
NEVER = 600.0
CALL_TIMEOUT = 30.0
# A change from a process of its own: an artifact, one mutation more.
WRITER = (
    "import sys; from shared.stores.redis.store import redis_store;"
    "from shared.events import artifact_update; from shared.transitions import transition;"
    "s = redis_store(sys.argv[1]);"
    "a = {'artifactId': 'a', 'parts': [{'kind': 'text', 'text': 'x'}]};"
    "assert transition(s, sys.argv[2], lambda t: [artifact_update(t, a)]).applied"
)


def draft(name: str) -> type[ProtoMessage]:
    return draft11.message_class(f"lf.a2a.v1.{name}")


def request(name: str, body: dict[str, Any]) -> ProtoMessage:
    """A request message of the draft's, from its ProtoJSON."""
    return json_format.ParseDict(body, draft(name)())


def message(text: str, **extra: Any) -> dict[str, Any]:
    return {"role": "ROLE_USER", "messageId": str(uuid.uuid4()), "parts": [{"text": text}]} | extra


class Peer:
    """Raw RPCs on one channel: requests of the draft's messages, replies
    read as the draft's (or left as bytes)."""

    def __init__(self, address: str) -> None:
        self.channel = grpc.insecure_channel(address)

    def close(self) -> None:
        self.channel.close()

    def _rpc(self, name: str, *, raw: bool = False) -> Any:
        method = draft11.SERVICE.methods_by_name[name]
        reply = draft11.message_class(method.output_type.full_name)
        make = self.channel.unary_stream if method.server_streaming else self.channel.unary_unary
        return make(
            f"/{SERVICE}/{name}",
            request_serializer=lambda message: message.SerializeToString(),
            response_deserializer=None if raw else reply.FromString,
        )

    def call(
        self,
        name: str,
        body: dict[str, Any],
        metadata: Any = V11,
        *,
        raw: bool = False,
    ) -> Any:
        sent = request(_request_of(name), body)
        return self._rpc(name, raw=raw)(sent, metadata=metadata, timeout=CALL_TIMEOUT)

    def later(self, name: str, body: dict[str, Any], metadata: Any = V11) -> Any:
        """The call as a future, answered whenever the server answers it."""
        sent = request(_request_of(name), body)
        return self._rpc(name).future(sent, metadata=metadata, timeout=CALL_TIMEOUT)

    def stream(
        self,
        name: str,
        body: dict[str, Any],
        metadata: Any = V11,
        *,
        raw: bool = False,
        last_event_id: str | None = None,
    ) -> list[Any]:
        more = () if last_event_id is None else (("last-event-id", last_event_id),)
        sent = request(_request_of(name), body)
        rpc = self._rpc(name, raw=raw)
        return list(rpc(sent, metadata=(*metadata, *more), timeout=CALL_TIMEOUT))


def _request_of(name: str) -> str:
    return str(draft11.SERVICE.methods_by_name[name].input_type.name)


class AioServer:
    """grpc.aio's server of the binding, on an event loop of its own thread."""

    def __init__(self, settings: Settings, service: Any) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.servicer = AsyncA2AGrpcService(service)

        async def start() -> tuple[Any, int]:
            server, port = aio_server(settings, self.servicer)
            await server.start()
            return server, port

        self.server, self.port = asyncio.run_coroutine_threadsafe(start(), self.loop).result(30)

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.server.stop(1), self.loop).result(30)
        self.servicer.close()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(30)
        self.loop.close()


@contextmanager
def serving(
    kind: str, store: Store, run: str = "examples.agents:echo", **settings: Any
) -> Iterator[Peer]:
    """The binding on `kind`'s server, on `store`, with `run` on in-process
    workers; a peer connected to it."""
    config = Settings(run=run, grpc_port=free_port(), **settings)
    dispatcher = InProcessDispatcher(store, load_agent(config), config, threads=2)
    service = service_on(assemble(config, store, dispatcher))
    stop: Callable[[], None]
    if kind == "sync":
        running = serve(config, service)
        port, stop = running.port, lambda: running.stop(1)
    else:
        aio = AioServer(config, service)
        port, stop = aio.port, aio.stop
    peer = Peer(f"127.0.0.1:{port}")
    try:
        grpc.channel_ready_future(peer.channel).result(timeout=30)
        yield peer
    finally:
        peer.close()
        stop()
        dispatcher.close(timeout=5)


def payload(response: Any) -> Any:
    return getattr(response, response.WhichOneof("payload"))


def event_id(response: Any) -> str:
    return str(payload(response).metadata["toolnexus.eventId"])


def generations(responses: list[Any]) -> list[int]:
    """The generation each status or artifact update of a stream carries."""
    return [
        payload(response).generation
        for response in responses
        if response.WhichOneof("payload") in ("status_update", "artifact_update")
    ]


def refusal(call: Callable[[], Any]) -> tuple[grpc.StatusCode, str, Any]:
    """Run `call`: the code, the message and the ErrorInfo it is refused with."""
    with pytest.raises(grpc.RpcError) as raised:
        call()
    error: Any = raised.value
    info = error_details_pb2.ErrorInfo()
    for key, value in error.trailing_metadata() or ():
        if key == "grpc-status-details-bin":
            status = status_pb2.Status.FromString(value)
            assert status.code == error.code().value[0]
            assert status.details[0].Unpack(info)
    return error.code(), error.details(), info


def working_task(store: Store) -> str:
    """A task at generation 2 (submitted, then working) that nothing runs."""
    task_id = store.create(new_task(text_message("user", "go"))).task["id"]
    assert transition(store, task_id, to_state(WORKING)).applied
    return task_id


@pytest.mark.parametrize("kind", SERVERS)
def test_a_1_1_caller_sees_the_generation_through_a_whole_life(kind: str) -> None:
    with serving(kind, resolve_store("memory"), "tests.support.agents:rich") as peer:
        streamed = peer.stream("SendStreamingMessage", {"message": message("go")})
        first = streamed[0].task
        assert first.generation == 1
        seen = generations(streamed[1:])
        # status working, progress, three chunks, input-required: one each
        assert seen == list(range(2, 2 + len(seen))) and len(seen) >= 6
        got = peer.call("GetTask", {"id": first.id})
        assert got.generation == seen[-1]
        assert got.status.state == a2a_pb2.TaskState.TASK_STATE_INPUT_REQUIRED

        # A follow-up that expects another generation is refused, and writes nothing.
        stale = {"message": message("again", taskId=first.id)}
        code, said, info = refusal(
            lambda: peer.call("SendMessage", {**stale, "configuration": {"ifGenerationMatch": 1}})
        )
        assert code == grpc.StatusCode.ABORTED
        assert said == f"Task generation mismatch: expected 1 but current generation is {seen[-1]}"
        assert info.reason == "TASK_GENERATION_MISMATCH"
        assert dict(info.metadata) == {
            "taskId": first.id,
            "expectedGeneration": "1",
            "currentGeneration": str(seen[-1]),
        }
        assert peer.call("GetTask", {"id": first.id}).generation == seen[-1]

        # A stream resumed from the middle carries the same numbers again.
        resumed = peer.stream(
            "SubscribeToTask", {"id": first.id}, last_event_id=event_id(streamed[3])
        )
        assert generations(resumed) == seen[3:]

        # The follow-up that expects the task as it stands goes through, and
        # the rest of the life runs on from there.
        answer = {"message": message("again", taskId=first.id)}
        config = {"ifGenerationMatch": got.generation, "returnImmediately": True}
        assert peer.call("SendMessage", {**answer, "configuration": config}).HasField("task")
        rest = peer.stream(
            "SubscribeToTask", {"id": first.id}, last_event_id=event_id(streamed[-1])
        )
        later = generations(rest)
        # submitted, working, a chunk, completed
        assert later == list(range(seen[-1] + 1, seen[-1] + 5))
        final = peer.call("GetTask", {"id": first.id})
        assert final.status.state == a2a_pb2.TaskState.TASK_STATE_COMPLETED
        assert final.generation == later[-1]

        # Cancel is one mutation more: submitted 1, working 2, canceled 3.
        name = f"grpc-cancel-{time.time_ns()}"
        sent = {"message": message(f"wait {name}"), "configuration": {"returnImmediately": True}}
        waiting_id = peer.call("SendMessage", sent).task.id
        try:
            # a long-poll until the worker's claim moves it on: no sleep, no change missed
            working = peer.call("GetTask", {"id": waiting_id, "currentGeneration": 1})
            assert (working.generation, working.status.state) == (
                2,
                a2a_pb2.TaskState.TASK_STATE_WORKING,
            )
            assert peer.call("CancelTask", {"id": waiting_id}).generation == 3
            assert peer.call("GetTask", {"id": waiting_id}).generation == 3
        finally:
            gate(name)[1].set()


@pytest.mark.parametrize("kind", SERVERS)
def test_a_1_0_caller_reads_the_same_bytes_as_before_generations(kind: str) -> None:
    """The task as a 1.0 caller reads it, byte for byte, is what the same task
    kept without a generation reads as; a 1.1 caller's differs by the field
    alone (a generation of 0, unknown, is no field at all on the wire)."""
    store = resolve_store("memory")
    with serving(kind, store, finished_cache_mb=0) as peer:
        sent = peer.call("SendMessage", {"message": message("hi")}, V10).task
        assert sent.status.state == a2a_pb2.TaskState.TASK_STATE_COMPLETED
        assert sent.generation == 0  # not on the 1.0 wire

        def raw(metadata: Any) -> tuple[bytes, bytes]:
            got = peer.call("GetTask", {"id": sent.id}, metadata, raw=True)
            listed = peer.call("ListTasks", {"pageSize": 10}, metadata, raw=True)
            return got, listed

        before = raw(V10)
        newer = raw(V11)
        assert a2a_pb2.Task.FromString(before[0]).id == sent.id
        assert draft("Task").FromString(newer[0]).generation >= 3
        assert newer != before
        kept = store.get(sent.id)
        assert kept is not None and generation_of(kept) >= 3
        store.save({key: value for key, value in kept.items() if key != "generation"})
        assert raw(V10) == before
        assert raw(V11) == before  # the field was the only difference

        # A 1.0 stream carries no generation; a 1.1 stream of the same agent does.
        older = peer.stream("SendStreamingMessage", {"message": message("yo")}, V10, raw=True)
        read = [draft("StreamResponse").FromString(each) for each in older]
        assert read and all(payload(each).generation == 0 for each in read)
        assert [a2a_pb2.StreamResponse.FromString(each).SerializeToString() for each in older] == (
            older
        )
        newest = peer.stream("SendStreamingMessage", {"message": message("yo")})
        assert all(generation > 0 for generation in generations(newest)) and generations(newest)


@pytest.mark.parametrize("kind", SERVERS)
def test_a_long_poll_answers_at_once_when_it_need_not_wait(kind: str) -> None:
    store = resolve_store("memory")
    with serving(kind, store, long_poll_timeout=NEVER) as peer:
        task_id = working_task(store)
        # Past the generation asked about: at once (a wait would outlast the call's deadline).
        behind = peer.call("GetTask", {"id": task_id, "currentGeneration": 1, "historyLength": 0})
        assert behind.generation == 2 and len(behind.history) == 0
        assert peer.call("GetTask", {"id": task_id, "currentGeneration": 0}).generation == 2
        # A 1.0 caller's unknown field is ignored, as it always was.
        older = peer.call("GetTask", {"id": task_id, "currentGeneration": 99}, V10)
        assert (older.id, older.generation) == (task_id, 0)
        # A finished task never changes: even 99 is answered at once.
        assert transition(store, task_id, to_state(COMPLETED)).applied
        assert peer.call("GetTask", {"id": task_id, "currentGeneration": 99}).generation == 3
        # Refusals are GetTask's own.
        code, _, info = refusal(
            lambda: peer.call("GetTask", {"id": "none", "currentGeneration": 1})
        )
        assert (code, info.reason) == (grpc.StatusCode.NOT_FOUND, "TASK_NOT_FOUND")
        code, _, info = refusal(
            lambda: peer.call("GetTask", {"id": task_id, "currentGeneration": -1})
        )
        assert (code, info.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_PARAMS")


def _all_calls_taken(peer: Peer, task_id: str) -> bool:
    """Every call the server takes is in flight (TOOLNEXUS_GRPC_CALLS of them):
    one more is refused."""
    try:
        peer.call("GetTask", {"id": task_id})
    except grpc.RpcError as error:
        if error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED:
            return True
        raise
    return False


def _changed_elsewhere(redis_url: str, task_id: str) -> None:
    subprocess.run([sys.executable, "-c", WRITER, redis_url, task_id], check=True, timeout=60)


@pytest.mark.parametrize("kind", SERVERS)
def test_a_long_poll_waits_until_another_process_changes_the_task(
    kind: str, redis_url: str
) -> None:
    store = redis_store(redis_url)
    task_id = working_task(store)
    with serving(kind, store, long_poll_timeout=0.5) as peer:
        # Nothing changes: the wait ends at TOOLNEXUS_LONG_POLL_TIMEOUT with the task as it stands.
        assert peer.call("GetTask", {"id": task_id, "currentGeneration": 2}).generation == 2
    with serving(kind, store, long_poll_timeout=NEVER, grpc_calls=1) as peer:
        poll = peer.later("GetTask", {"id": task_id, "currentGeneration": 2})
        wait_for(lambda: _all_calls_taken(peer, task_id), timeout=30, what="the long-poll to wait")
        assert not poll.done()
        _changed_elsewhere(redis_url, task_id)
        answered = poll.result(CALL_TIMEOUT)
        assert answered.generation == 3
        assert [part.text for part in answered.artifacts[0].parts] == ["x"]
        # Its call ended: the one call the server takes is free again.
        wait_for(lambda: not _all_calls_taken(peer, task_id), timeout=30, what="the call to end")


@pytest.mark.parametrize("kind", SERVERS)
def test_a_follow_up_expecting_another_generation_is_aborted(kind: str, redis_url: str) -> None:
    store = redis_store(redis_url)
    task_id = working_task(store)
    assert transition(store, task_id, to_state(INPUT_REQUIRED, agent_message("?"))).applied
    with serving(kind, store) as peer:
        body = {
            "message": message("a", taskId=task_id),
            "configuration": {"ifGenerationMatch": 2, "returnImmediately": True},
        }
        sends: list[Callable[[], Any]] = [
            lambda: peer.call("SendMessage", body),
            lambda: peer.stream("SendStreamingMessage", body),  # refused before it streams
        ]
        for send in sends:
            code, said, info = refusal(send)
            assert code == grpc.StatusCode.ABORTED
            assert said == "Task generation mismatch: expected 2 but current generation is 3"
            assert (info.reason, info.domain) == ("TASK_GENERATION_MISMATCH", "a2a-protocol.org")
            assert dict(info.metadata) == {
                "taskId": task_id,
                "expectedGeneration": "2",
                "currentGeneration": "3",
            }
        assert generation_of(store.get(task_id) or {}) == 3  # nothing was written
        # A 1.0 caller's field is ignored: the follow-up is taken.
        taken = peer.call("SendMessage", body, V10).task
        assert taken.id == task_id and taken.generation == 0
        assert generation_of(store.get(task_id) or {}) > 3


# --- the gRPC process ------------------------------------------------------------

LONG_POLLS = 64  # long-polls waiting at once in the gRPC process


@pytest.fixture
def grpc_process(redis_url: str, tmp_path: Path) -> Iterator[tuple[ServiceProcess, str]]:
    """`python -m web.grpc_process` on the test's Redis, no worker, taking
    LONG_POLLS calls at once."""
    port = free_port()
    env = {
        "TOOLNEXUS_STORE": redis_url,
        "TOOLNEXUS_BROKER_URL": redis_url,
        "TOOLNEXUS_QUEUE": f"grpc-generation-{uuid.uuid4().hex[:8]}",
        "TOOLNEXUS_GRPC_PORT": str(port),
        "TOOLNEXUS_GRPC_CALLS": str(LONG_POLLS),
        "TOOLNEXUS_LONG_POLL_TIMEOUT": str(NEVER),
        "TOOLNEXUS_LOG_LEVEL": "WARNING",
    }
    log = tmp_path / "grpc.log"
    with started_grpc_process(env, log) as process:
        yield process, f"127.0.0.1:{port}"


def threads_of(process: ServiceProcess) -> int:
    return len(os.listdir(f"/proc/{process.process.pid}/task"))


def test_the_grpc_process_serves_long_polls_without_a_thread_each(
    grpc_process: tuple[ServiceProcess, str], redis_url: str
) -> None:
    process, address = grpc_process
    store = redis_store(redis_url)
    task_id = working_task(store)
    peer = Peer(address)
    try:
        assert peer.call("GetTask", {"id": task_id}).generation == 2
        idle = threads_of(process)
        polls = [
            peer.later("GetTask", {"id": task_id, "currentGeneration": 2})
            for _ in range(LONG_POLLS)
        ]
        wait_for(
            lambda: _all_calls_taken(peer, task_id), timeout=60, what="every long-poll waiting"
        )
        waiting = threads_of(process)
        # the streams' few step readers at most, not one thread per long-poll
        assert waiting <= idle + STREAM_THREADS + 4, (idle, waiting)
        assert not any(call.done() for call in polls)

        # A caller that goes away ends its long-poll: its call's place is free again.
        polls.pop().cancel()
        wait_for(
            lambda: not _all_calls_taken(peer, task_id), timeout=30, what="the long-poll to end"
        )

        _changed_elsewhere(redis_url, task_id)
        answers = [call.result(CALL_TIMEOUT) for call in polls]
        assert {answer.generation for answer in answers} == {3}
        assert all(answer.artifacts[0].parts[0].text == "x" for answer in answers)
    finally:
        peer.close()
    assert process.alive(), process.output()[-3000:]
