"""GetTask and a SendMessage that returns at once in the gRPC process
(`python -m web.grpc_process`, on grpc.aio) while its Redis is down and once it
is back, on a private redis-server: each call is refused UNAVAILABLE (a GetTask
"task store unavailable", with its ErrorInfo: STORE_UNAVAILABLE, naming the
task), whichever way the process answers it (on the event loop, or on the pool
once a slow answer sent calls there: see `web.grpc.aio.OnLoop`); the process
keeps serving, answers the same task the same once Redis is back, and takes
sends again.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from a2a.types import a2a_pb2, a2a_pb2_grpc
from google.rpc import error_details_pb2, status_pb2

from tests.support.grpc_process import grpc_process, process_env
from tests.support.ports import free_port
from tests.support.redis_server import RedisServer
from web.grpc.wire import DETAILS_KEY


@pytest.fixture
def lasting() -> Iterator[RedisServer]:
    """A redis-server whose tasks outlive a restart."""
    found = RedisServer(appendonly=True).start()
    try:
        yield found
    finally:
        found.close()


def _reason(details: bytes) -> tuple[str, str, str]:
    status = status_pb2.Status.FromString(details)
    info = error_details_pb2.ErrorInfo()
    status.details[0].Unpack(info)
    return info.reason, info.domain, info.metadata["taskId"]


def test_the_grpc_process_refuses_get_task_while_redis_is_down_and_serves_after(
    lasting: RedisServer, tmp_path: Path
) -> None:
    redis_server = lasting
    port = free_port()
    env = {
        **process_env(redis_server.url, port, f"grpc-reads-{uuid.uuid4().hex[:8]}"),
        "TOOLNEXUS_FINISHED_CACHE_MB": "0",
    }
    metadata = (("a2a-version", "1.0"),)
    with (
        grpc_process(env, tmp_path / "grpc.log") as process,
        grpc.insecure_channel(f"127.0.0.1:{port}") as channel,
    ):
        stub = a2a_pb2_grpc.A2AServiceStub(channel)
        message = a2a_pb2.Message(
            role=a2a_pb2.Role.ROLE_USER,
            message_id=str(uuid.uuid4()),
            parts=[a2a_pb2.Part(text="hi")],
        )
        configuration = a2a_pb2.SendMessageConfiguration(return_immediately=True)
        sent = stub.SendMessage(
            a2a_pb2.SendMessageRequest(message=message, configuration=configuration),
            metadata=metadata,
            timeout=30,
        )
        get = a2a_pb2.GetTaskRequest(id=sent.task.id)
        before = stub.GetTask(get, metadata=metadata, timeout=30)
        redis_server.stop()
        for _ in range(5):  # on the loop, then on the pool (OnLoop's cool-off)
            with pytest.raises(grpc.RpcError) as raised:
                stub.GetTask(get, metadata=metadata, timeout=30)
            error: Any = raised.value
            assert error.code() == grpc.StatusCode.UNAVAILABLE
            assert error.details() == "task store unavailable"
            trailer = dict(error.trailing_metadata())[DETAILS_KEY]
            assert _reason(trailer) == ("STORE_UNAVAILABLE", "toolnexus-serve", sent.task.id)
        for _ in range(5):  # a send that returns at once: on the loop as well
            fresh = a2a_pb2.Message()
            fresh.CopyFrom(message)
            fresh.message_id = str(uuid.uuid4())
            with pytest.raises(grpc.RpcError) as raised:
                stub.SendMessage(
                    a2a_pb2.SendMessageRequest(message=fresh, configuration=configuration),
                    metadata=metadata,
                    timeout=30,
                )
            error = raised.value
            assert error.code() == grpc.StatusCode.UNAVAILABLE, error.details()
            assert "unavailable" in error.details()
        redis_server.start()
        after = stub.GetTask(get, metadata=metadata, timeout=30)
        assert after == before
        message.message_id = str(uuid.uuid4())
        again = stub.SendMessage(
            a2a_pb2.SendMessageRequest(message=message, configuration=configuration),
            metadata=metadata,
            timeout=30,
        )
        assert stub.GetTask(a2a_pb2.GetTaskRequest(id=again.task.id), metadata=metadata).id
        assert process.alive(), process.output()
