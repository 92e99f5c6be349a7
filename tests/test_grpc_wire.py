"""The gRPC binding's conversions (web/grpc_wire.py), in process."""

from __future__ import annotations

import grpc
import pytest
from a2a.types import a2a_pb2
from google.rpc import error_details_pb2, status_pb2

from shared.errors import ConfigError, TaskNotFound
from shared.settings import Settings
from web.errors import InvalidParams, describe, status_body
from web.grpc_wire import message_of, params_of, rich_status


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
