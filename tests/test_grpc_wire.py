"""The gRPC binding's conversions (web/grpc/wire.py), in process."""

from __future__ import annotations

import grpc
import pytest
from a2a.types import a2a_pb2, a2a_pb2_grpc
from google.rpc import error_details_pb2, status_pb2

from shared.errors import ConfigError, TaskNotFound
from shared.settings import Settings
from shared.stores.memory.store import memory_store
from tests.support.redis_server import free_port
from web.auth.tokens import authenticator_for
from web.core.errors import InvalidParams, describe, status_body
from web.core.tasks import Tasks
from web.grpc.server import serve
from web.grpc.service import A2AGrpcService
from web.grpc.wire import message_of, params_of, rich_status


def task(text: str) -> dict[str, object]:
    return {
        "id": "t1",
        "contextId": "c1",
        "status": {"state": "TASK_STATE_COMPLETED", "timestamp": "2026-12-01T10:00:00Z"},
        "artifacts": [{"artifactId": "a", "parts": [{"text": text}]}],
    }


def test_a_result_converts_the_same_whether_remembered_or_not() -> None:
    first = message_of(task("hello"), a2a_pb2.Task)
    again = message_of(task("hello"), a2a_pb2.Task)
    assert first == again and first is not again
    again.artifacts[0].parts[0].text = "changed by a caller"
    assert message_of(task("hello"), a2a_pb2.Task).artifacts[0].parts[0].text == "hello"
    large = message_of(task("x" * 20_000), a2a_pb2.Task)  # past the remembered size
    assert large.artifacts[0].parts[0].text == "x" * 20_000
    assert first.status.state == a2a_pb2.TaskState.TASK_STATE_COMPLETED


def test_a_request_becomes_json_rpc_params() -> None:
    request = a2a_pb2.GetTaskRequest(id="t1", history_length=2)
    assert params_of(request) == {"id": "t1", "historyLength": 2}


def test_an_error_is_a_status_with_error_info_and_the_bad_field() -> None:
    wire = describe(InvalidParams("bad", field="message.parts"))
    code, message, details = rich_status(status_body(wire)["error"])
    status = status_pb2.Status.FromString(details)
    assert (code, message, status.code) == (grpc.StatusCode.INVALID_ARGUMENT, "bad", 3)
    info, bad = error_details_pb2.ErrorInfo(), error_details_pb2.BadRequest()
    assert status.details[0].Unpack(info) and status.details[1].Unpack(bad)
    assert (info.reason, info.domain) == ("INVALID_PARAMS", "a2a-protocol.org")
    assert bad.field_violations[0].field == "message.parts"
    named = rich_status(status_body(describe(TaskNotFound("gone"), task_id="t9"))["error"])
    found = error_details_pb2.ErrorInfo()
    status_pb2.Status.FromString(named[2]).details[0].Unpack(found)
    assert (named[0], found.metadata["taskId"]) == (grpc.StatusCode.NOT_FOUND, "t9")


def test_tls_needs_both_the_certificate_and_the_key() -> None:
    with pytest.raises(ConfigError, match="TOOLNEXUS_GRPC_TLS_CERT and TOOLNEXUS_GRPC_TLS_KEY"):
        Settings.from_env({"TOOLNEXUS_GRPC_TLS_CERT": "-----BEGIN CERTIFICATE-----"})


def test_the_binding_serves_methods_a_launcher_already_holds() -> None:
    """`serve` adds the gRPC binding to a process that has its own Tasks (the
    embedded launcher's): here on the memory store, with a dispatcher that
    records what it was asked to queue."""
    queued: list[str] = []

    class Recording:
        def enqueue(self, task_id: str) -> None:
            queued.append(task_id)

        def revoke(self, task_id: str) -> None:
            pass

        def check(self) -> None:
            pass

    settings = Settings(store="memory", grpc_port=free_port())
    tasks = Tasks(settings, memory_store(), Recording())
    running = serve(settings, A2AGrpcService(tasks, authenticator_for(settings), None))
    try:
        with grpc.insecure_channel(f"127.0.0.1:{running.port}") as channel:
            stub = a2a_pb2_grpc.A2AServiceStub(channel)
            metadata = [("a2a-version", "1.0")]
            message = a2a_pb2.Message(
                role=a2a_pb2.Role.ROLE_USER, message_id="m1", parts=[a2a_pb2.Part(text="hi")]
            )
            configuration = a2a_pb2.SendMessageConfiguration(return_immediately=True)
            request = a2a_pb2.SendMessageRequest(message=message, configuration=configuration)
            sent = stub.SendMessage(request, metadata=metadata, timeout=10).task
            got = stub.GetTask(a2a_pb2.GetTaskRequest(id=sent.id), metadata=metadata, timeout=10)
    finally:
        running.stop(1)
    assert queued == [sent.id] and got.id == sent.id
    assert got.status.state == a2a_pb2.TaskState.TASK_STATE_SUBMITTED


def test_the_old_name_of_the_calls_setting_is_refused_naming_the_new_one() -> None:
    with pytest.raises(ConfigError, match="TOOLNEXUS_GRPC_THREADS is now TOOLNEXUS_GRPC_CALLS"):
        Settings.from_env({"TOOLNEXUS_GRPC_THREADS": "256"})
    assert Settings.from_env({"TOOLNEXUS_GRPC_CALLS": "64"}).grpc_calls == 64
