"""The gRPC binding against the distributed deployment: `python -m
web.grpc_process` beside compose.yaml's gunicorn, Celery worker and beat on
a private Redis, running examples.agents:countdown, with bearer tokens.

- the official a2a-sdk 1.x client, which picks the card's GRPC interface:
  send, stream, get, list, cancel, subscribe, its typed errors;
- every error code, with its google.rpc.ErrorInfo, through the generated stub;
- metadata auth and owner isolation; resume by `last-event-id` metadata;
- the same scenario over gRPC and JSON-RPC gives the same stored tasks.
"""

from __future__ import annotations

import asyncio
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
import requests
from a2a.client import ClientCallContext, ClientConfig, ClientFactory
from a2a.client.card_resolver import A2ACardResolver
from a2a.client.transports.grpc import GrpcTransport
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    TaskNotCancelableError,
    TaskNotFoundError,
    TaskState,
    a2a_pb2,
    a2a_pb2_grpc,
)
from google.protobuf import json_format
from google.rpc import error_details_pb2, status_pb2

from shared.store.resolve import resolve_store
from tests.support.a2a import wait_ready
from tests.support.compose import LocalStack, local_stack, start_grpc
from tests.support.polling import wait_for
from tests.support.redis_server import free_port

ROOT = Path(__file__).resolve().parent.parent
ALICE, BOB = "tok-alice", "tok-bob"
COMPLETED = TaskState.TASK_STATE_COMPLETED
V10 = ("a2a-version", "1.0")


def as_alice(*more: tuple[str, str]) -> list[tuple[str, str]]:
    return [V10, ("authorization", f"Bearer {ALICE}"), *more]


class Deployment:
    def __init__(self, stack: LocalStack, grpc_address: str) -> None:
        self.stack = stack
        self.address = grpc_address
        self.channel = grpc.insecure_channel(grpc_address)
        self.stub = a2a_pb2_grpc.A2AServiceStub(self.channel)

    @property
    def web_url(self) -> str:
        return self.stack.web_url


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    port = free_port()
    settings = {
        "TOOLNEXUS_RUN": "examples.agents:countdown",
        "TOOLNEXUS_KEEPALIVE": "1",
        "TOOLNEXUS_API_TOKENS": f"alice:{ALICE},bob:{BOB}",
        "TOOLNEXUS_GRPC_URL": f"127.0.0.1:{port}",
        "TOOLNEXUS_GRPC_MAX_MESSAGE": "65536",
        # a killed worker's task is found and failed within seconds
        "TOOLNEXUS_HEARTBEAT": "0.3",
        "TOOLNEXUS_STALE_AFTER": "2",
        "TOOLNEXUS_REAP_EVERY": "0.5",
    }
    with local_stack(tmp_path_factory.mktemp("grpc"), settings) as (_, stack):
        stack.start("web", WEB_CONCURRENCY="1")
        stack.start("worker")
        stack.start("beat")
        process = start_grpc(stack, port)
        wait_ready(stack.web_url)
        found = Deployment(stack, f"127.0.0.1:{port}")
        grpc.channel_ready_future(found.channel).result(timeout=30)
        assert process.alive(), process.output()
        yield found
        found.channel.close()


def message(text: str, **fields: Any) -> Message:
    return Message(
        role=Role.ROLE_USER, message_id=str(uuid.uuid4()), parts=[Part(text=text)], **fields
    )


def state_of(event: StreamResponse) -> TaskState:
    if event.HasField("task"):
        return event.task.status.state
    if event.HasField("status_update"):
        return event.status_update.status.state
    return TaskState.TASK_STATE_UNSPECIFIED


def failure(call: Any) -> tuple[grpc.StatusCode, str | None]:
    """Run `call`; the status code and the ErrorInfo reason it failed with."""
    with pytest.raises(grpc.RpcError) as raised:
        result = call()
        if hasattr(result, "__iter__"):
            list(result)
    error: Any = raised.value
    reason = None
    for key, value in error.trailing_metadata() or ():
        if key == "grpc-status-details-bin":
            status = status_pb2.Status.FromString(value)
            assert status.code == error.code().value[0]
            for detail in status.details:
                if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
                    info = error_details_pb2.ErrorInfo()
                    detail.Unpack(info)
                    reason = info.reason
    return error.code(), reason


async def sdk_session(deployment: Deployment) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    alice = ClientCallContext(service_parameters={"authorization": f"Bearer {ALICE}"})
    async with httpx.AsyncClient(timeout=30) as http:
        card = await A2ACardResolver(http, deployment.web_url).get_agent_card()
        config = ClientConfig(
            streaming=True,
            supported_protocol_bindings=["GRPC"],
            grpc_channel_factory=grpc.aio.insecure_channel,
        )
        client = ClientFactory(config).create(card)
        seen["transport"] = type(client._transport)
        streamed = [
            e
            async for e in client.send_message(
                SendMessageRequest(message=message("2")), context=alice
            )
        ]
        seen["stream"] = [state_of(event) for event in streamed]
        task_id = streamed[0].task.id
        got = await client.get_task(GetTaskRequest(id=task_id, history_length=1), context=alice)
        seen["get"] = (got.id == task_id, got.status.state, len(got.history))
        listed = await client.list_tasks(ListTasksRequest(page_size=50), context=alice)
        seen["listed"] = task_id in [task.id for task in listed.tasks]
        with pytest.raises(TaskNotCancelableError):
            await client.cancel_task(CancelTaskRequest(id=task_id), context=alice)
        with pytest.raises(TaskNotFoundError):
            await client.get_task(GetTaskRequest(id="no-such-task"), context=alice)

        polling = ClientConfig(
            streaming=False,
            polling=True,
            supported_protocol_bindings=["GRPC"],
            grpc_channel_factory=grpc.aio.insecure_channel,
        )
        poller = ClientFactory(polling).create(card)
        running = [
            e
            async for e in poller.send_message(
                SendMessageRequest(message=message("0.5 8")), context=alice
            )
        ]
        canceled = await client.cancel_task(CancelTaskRequest(id=running[0].task.id), context=alice)
        seen["cancel"] = canceled.status.state

        live = [
            e
            async for e in poller.send_message(
                SendMessageRequest(message=message("0.3 4")), context=alice
            )
        ]
        followed = [
            e
            async for e in client.subscribe(
                SubscribeToTaskRequest(id=live[0].task.id), context=alice
            )
        ]
        seen["subscribe"] = (followed[0].HasField("task"), state_of(followed[-1]))
        await client.close()
        await poller.close()
    return seen


def test_the_official_python_client_over_grpc(deployment: Deployment) -> None:
    seen = asyncio.run(sdk_session(deployment))
    assert seen["transport"] is GrpcTransport  # the card's GRPC interface, chosen
    assert seen["stream"][0] == TaskState.TASK_STATE_SUBMITTED
    assert seen["stream"][-1] == COMPLETED
    assert seen["get"] == (True, COMPLETED, 1)
    assert seen["listed"] is True
    assert seen["cancel"] == TaskState.TASK_STATE_CANCELED
    assert seen["subscribe"] == (True, COMPLETED)


def test_the_card_declares_the_grpc_interface(deployment: Deployment) -> None:
    card = requests.get(f"{deployment.web_url}/.well-known/agent-card.json", timeout=10).json()
    grpc_interfaces = [i for i in card["supportedInterfaces"] if i["protocolBinding"] == "GRPC"]
    assert grpc_interfaces == [
        {"url": deployment.address, "protocolBinding": "GRPC", "protocolVersion": version}
        for version in ("1.0", "1.1")  # the 1.1 draft's after every 1.0 interface
    ]


def completed_task(deployment: Deployment, text: str = "1") -> a2a_pb2.Task:
    reply = deployment.stub.SendMessage(
        SendMessageRequest(message=message(text)), metadata=as_alice(), timeout=30
    )
    assert reply.task.status.state == COMPLETED
    return reply.task


def test_every_error_code_with_its_error_info(deployment: Deployment) -> None:
    stub = deployment.stub
    done = completed_task(deployment)
    empty = SendMessageRequest(message=Message(role=Role.ROLE_USER, message_id="m-empty"))
    png = message("x")
    png.parts[0].CopyFrom(Part(raw=b"\x89PNG", media_type="image/png"))
    calls = {
        "missing task": lambda: stub.GetTask(GetTaskRequest(id="nope"), metadata=as_alice()),
        "no parts": lambda: stub.SendMessage(empty, metadata=as_alice()),
        "bad id": lambda: stub.GetTask(GetTaskRequest(id="a/../b"), metadata=as_alice()),
        "media type": lambda: stub.SendMessage(
            SendMessageRequest(message=png), metadata=as_alice()
        ),
        "tenant": lambda: stub.GetTask(
            GetTaskRequest(id=done.id, tenant="t1"), metadata=as_alice()
        ),
        "not cancelable": lambda: stub.CancelTask(
            CancelTaskRequest(id=done.id), metadata=as_alice()
        ),
        "push": lambda: stub.GetTaskPushNotificationConfig(
            a2a_pb2.GetTaskPushNotificationConfigRequest(task_id=done.id, id="c"),
            metadata=as_alice(),
        ),
        "finished subscribe": lambda: stub.SubscribeToTask(
            SubscribeToTaskRequest(id=done.id), metadata=as_alice()
        ),
        "no extended card": lambda: stub.GetExtendedAgentCard(
            a2a_pb2.GetExtendedAgentCardRequest(), metadata=as_alice()
        ),
        "version 0.3": lambda: stub.GetTask(
            GetTaskRequest(id=done.id),
            metadata=[("a2a-version", "0.3"), ("authorization", f"Bearer {ALICE}")],
        ),
        "no version": lambda: stub.GetTask(
            GetTaskRequest(id=done.id), metadata=[("authorization", f"Bearer {ALICE}")]
        ),
        "version 9": lambda: stub.GetTask(
            GetTaskRequest(id=done.id),
            metadata=[("a2a-version", "9.1"), ("authorization", f"Bearer {ALICE}")],
        ),
        "no token": lambda: stub.GetTask(GetTaskRequest(id=done.id), metadata=[V10]),
        "bad token": lambda: stub.GetTask(
            GetTaskRequest(id=done.id), metadata=[V10, ("authorization", "Bearer wrong")]
        ),
        "bad resume": lambda: stub.SubscribeToTask(
            SubscribeToTaskRequest(id=done.id), metadata=as_alice(("last-event-id", "-3"))
        ),
    }
    seen = {name: failure(call) for name, call in calls.items()}
    invalid, precondition = grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.FAILED_PRECONDITION
    assert seen == {
        "missing task": (grpc.StatusCode.NOT_FOUND, "TASK_NOT_FOUND"),
        "no parts": (invalid, "INVALID_PARAMS"),
        "bad id": (invalid, "INVALID_PARAMS"),
        "media type": (invalid, "CONTENT_TYPE_NOT_SUPPORTED"),
        "tenant": (invalid, "INVALID_PARAMS"),
        "not cancelable": (precondition, "TASK_NOT_CANCELABLE"),
        "push": (grpc.StatusCode.NOT_FOUND, "TASK_NOT_FOUND"),  # no config "c" (spec: -32001)
        "finished subscribe": (precondition, "UNSUPPORTED_OPERATION"),
        "no extended card": (precondition, "EXTENDED_AGENT_CARD_NOT_CONFIGURED"),
        "version 0.3": (precondition, "VERSION_NOT_SUPPORTED"),
        "no version": (precondition, "VERSION_NOT_SUPPORTED"),
        "version 9": (precondition, "VERSION_NOT_SUPPORTED"),
        "no token": (grpc.StatusCode.UNAUTHENTICATED, "UNAUTHENTICATED"),
        "bad token": (grpc.StatusCode.UNAUTHENTICATED, "UNAUTHENTICATED"),
        "bad resume": (invalid, "INVALID_REQUEST"),
    }


def test_push_configs_over_grpc_run_the_same_methods(deployment: Deployment) -> None:
    """Create, get, list and delete a webhook over gRPC; another principal
    sees none of it (push delivery itself: tests/test_push_delivery.py)."""
    stub, done = deployment.stub, completed_task(deployment)
    config = a2a_pb2.TaskPushNotificationConfig(
        task_id=done.id, id="hook-1", url="http://127.0.0.1:9/hook", token="tok"
    )
    created = stub.CreateTaskPushNotificationConfig(config, metadata=as_alice())
    assert (created.task_id, created.id, created.url) == (done.id, "hook-1", config.url)
    query = a2a_pb2.GetTaskPushNotificationConfigRequest(task_id=done.id, id="hook-1")
    assert stub.GetTaskPushNotificationConfig(query, metadata=as_alice()).url == config.url
    listing = a2a_pb2.ListTaskPushNotificationConfigsRequest(task_id=done.id)
    listed = stub.ListTaskPushNotificationConfigs(listing, metadata=as_alice())
    assert [c.id for c in listed.configs] == ["hook-1"]
    assert failure(
        lambda: stub.ListTaskPushNotificationConfigs(
            listing, metadata=[V10, ("authorization", f"Bearer {BOB}")]
        )
    ) == (
        grpc.StatusCode.NOT_FOUND,
        "TASK_NOT_FOUND",
    )
    gone = a2a_pb2.DeleteTaskPushNotificationConfigRequest(task_id=done.id, id="hook-1")
    stub.DeleteTaskPushNotificationConfig(gone, metadata=as_alice())
    stub.DeleteTaskPushNotificationConfig(gone, metadata=as_alice())  # idempotent
    assert list(stub.ListTaskPushNotificationConfigs(listing, metadata=as_alice()).configs) == []


def test_grpc_own_refusals(deployment: Deployment) -> None:
    """What gRPC itself refuses: an RPC the service does not have, a message
    over TOOLNEXUS_GRPC_MAX_MESSAGE."""
    unknown = deployment.channel.unary_unary("/lf.a2a.v1.A2AService/NoSuchMethod")
    assert failure(lambda: unknown(b"", metadata=as_alice())) == (
        grpc.StatusCode.UNIMPLEMENTED,
        None,
    )
    huge = SendMessageRequest(message=message("x" * 100_000))
    assert failure(lambda: deployment.stub.SendMessage(huge, metadata=as_alice())) == (
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        None,
    )


def test_owner_isolation_by_metadata(deployment: Deployment) -> None:
    stub = deployment.stub
    task = completed_task(deployment)
    as_bob = [V10, ("authorization", f"Bearer {BOB}")]
    assert failure(lambda: stub.GetTask(GetTaskRequest(id=task.id), metadata=as_bob)) == (
        grpc.StatusCode.NOT_FOUND,
        "TASK_NOT_FOUND",
    )
    assert failure(lambda: stub.CancelTask(CancelTaskRequest(id=task.id), metadata=as_bob))[1] == (
        "TASK_NOT_FOUND"
    )
    listed = stub.ListTasks(ListTasksRequest(page_size=100), metadata=as_bob)
    assert task.id not in [t.id for t in listed.tasks]
    mine = stub.ListTasks(ListTasksRequest(page_size=100), metadata=as_alice())
    assert task.id in [t.id for t in mine.tasks]


def test_a_stream_resumes_after_an_event_id_given_in_metadata(deployment: Deployment) -> None:
    stub = deployment.stub
    first = stub.SendStreamingMessage(
        SendMessageRequest(message=message("0.3 4")), metadata=as_alice(), timeout=30
    )
    seen = []
    for response in first:
        seen.append(response)
        if len(seen) == 3:
            first.cancel()  # the client goes away mid-task
            break
    task_id = seen[0].task.id
    ids = [int(event_id(response)) for response in seen]
    assert ids == sorted(ids) and len(set(ids)) == 3
    rest = list(
        stub.SubscribeToTask(
            SubscribeToTaskRequest(id=task_id),
            metadata=as_alice(("last-event-id", str(ids[-1]))),
            timeout=30,
        )
    )
    assert not rest[0].HasField("task")  # no snapshot: it has the task already
    assert int(event_id(rest[0])) == ids[-1] + 1
    assert state_of(rest[-1]) == COMPLETED
    stored = stub.GetTask(GetTaskRequest(id=task_id), metadata=as_alice())
    artifact_events = [r for r in [*seen, *rest] if r.HasField("artifact_update")]
    chunks = [p.text for r in artifact_events for p in r.artifact_update.artifact.parts]
    assert "".join(chunks) == "".join(p.text for p in stored.artifacts[0].parts)


def event_id(response: StreamResponse) -> str:
    field = response.WhichOneof("payload")
    return str(getattr(response, field).metadata["toolnexus.eventId"])


def jsonrpc(url: str, method: str, params: dict[str, Any]) -> dict[str, Any]:
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    headers = {"A2A-Version": "1.0", "Authorization": f"Bearer {ALICE}"}
    reply: dict[str, Any] = requests.post(url + "/", json=body, headers=headers, timeout=30).json()
    return reply


def test_the_same_scenario_over_grpc_and_json_rpc_stores_the_same_tasks(
    deployment: Deployment,
) -> None:
    """Send and wait, then cancel a running one once it works, then ask for a missing task: the
    stored tasks match field for field (ids and times aside), and so do the
    errors' reasons."""
    stub = deployment.stub
    store = resolve_store(deployment.stack.store_url)

    def via_grpc() -> tuple[str, str, str | None]:
        done = stub.SendMessage(
            SendMessageRequest(message=message("2", context_id="ctx-g")), metadata=as_alice()
        ).task.id
        running = stub.SendMessage(
            SendMessageRequest(
                message=message("2 8"),
                configuration=a2a_pb2.SendMessageConfiguration(return_immediately=True),
            ),
            metadata=as_alice(),
        ).task.id
        working(store, running)
        stub.CancelTask(CancelTaskRequest(id=running), metadata=as_alice())
        missing = failure(lambda: stub.GetTask(GetTaskRequest(id="gone"), metadata=as_alice()))
        return done, running, missing[1]

    def via_jsonrpc() -> tuple[str, str, str | None]:
        url = deployment.web_url

        def sent(msg: Message, **configuration: Any) -> str:
            params = {"message": json_format.MessageToDict(msg)}
            if configuration:
                params["configuration"] = configuration
            return str(jsonrpc(url, "SendMessage", params)["result"]["task"]["id"])

        done = sent(message("2", context_id="ctx-j"))
        running = sent(message("2 8"), returnImmediately=True)
        working(store, running)
        jsonrpc(url, "CancelTask", {"id": running})
        error = jsonrpc(url, "GetTask", {"id": "gone"})["error"]
        return done, running, error["data"][0]["reason"]

    grpc_ids, rpc_ids = via_grpc(), via_jsonrpc()
    assert grpc_ids[2] == rpc_ids[2] == "TASK_NOT_FOUND"
    for g_id, j_id in zip(grpc_ids[:2], rpc_ids[:2], strict=True):
        wait_for(lambda g=g_id, j=j_id: settled(store, g) and settled(store, j), timeout=30)
        assert comparable(store.get(g_id)) == comparable(store.get(j_id))


def working(store: Any, task_id: str) -> None:
    """Wait for the agent's first word (its progress note), so both runs
    cancel at the same point: two seconds before its first chunk."""

    def spoke() -> bool:
        task = store.get(task_id) or {}
        return any(m.get("role") == "agent" for m in task.get("history", []))

    wait_for(spoke, timeout=30)


def settled(store: Any, task_id: str) -> bool:
    task = store.get(task_id)
    return task is not None and task["status"]["state"] in ("completed", "canceled")


def comparable(task: Any) -> Any:
    """A stored task without what differs between any two runs."""
    # (the holder of a run names the worker process that claimed it)
    varying = {"id", "contextId", "messageId", "timestamp", "taskId", "artifactId", "holder"}

    def strip(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k not in varying}
        if isinstance(value, list):
            return [strip(item) for item in value]
        return value

    return strip(task)


def test_shutdown_lets_open_streams_finish_and_takes_no_new_calls(
    deployment: Deployment,
) -> None:
    """SIGTERM: the stream open on a running task still ends with the task's
    terminal event; a call after it is refused; the process then exits."""
    port = free_port()
    process = start_grpc(deployment.stack, port, "grpc-drained", TOOLNEXUS_GRPC_GRACE="60")
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        grpc.channel_ready_future(channel).result(timeout=30)
        stub = a2a_pb2_grpc.A2AServiceStub(channel)
        stream = stub.SendStreamingMessage(
            SendMessageRequest(message=message("0.5 6")), metadata=as_alice(), timeout=60
        )
        first = next(stream)
        assert first.HasField("task")
        process.process.send_signal(signal.SIGTERM)
        wait_for(lambda: "stopping" in process.output(), timeout=30)
        rest = list(stream)
        assert state_of(rest[-1]) == COMPLETED
    with grpc.insecure_channel(f"127.0.0.1:{port}") as late:
        code, _ = failure(
            lambda: a2a_pb2_grpc.A2AServiceStub(late).GetTask(
                GetTaskRequest(id=first.task.id), metadata=as_alice(), timeout=5
            )
        )
    assert code == grpc.StatusCode.UNAVAILABLE
    assert process.process.wait(30) == 0


def test_the_grpc_process_logs_and_counts_each_call(deployment: Deployment) -> None:
    port, metrics_port = free_port(), free_port()
    process = start_grpc(
        deployment.stack, port, "grpc-metrics", TOOLNEXUS_METRICS_PORT=str(metrics_port)
    )
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        grpc.channel_ready_future(channel).result(timeout=30)
        stub = a2a_pb2_grpc.A2AServiceStub(channel)
        failure(lambda: stub.GetTask(GetTaskRequest(id="counted"), metadata=as_alice()))
    wait_for(lambda: "grpc GetTask outcome=NOT_FOUND" in process.output(), timeout=30)

    def counted() -> str | None:
        try:
            text = requests.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).text
        except requests.ConnectionError:
            return None
        return text if 'method="GetTask",outcome="NOT_FOUND"' in text else None

    assert 'toolnexus_requests_total{method="GetTask",outcome="NOT_FOUND"} 1.0' in wait_for(
        counted, timeout=30
    )


def test_a_stream_outlives_its_worker_and_the_next_worker_serves_on(
    deployment: Deployment,
) -> None:
    """The worker running a streamed task is killed: the gRPC stream ends with
    the reaper's `failed` (not a hang); a new worker takes the next task, and
    a stream on it runs to the end."""
    stub, stack = deployment.stub, deployment.stack
    stream = stub.SendStreamingMessage(
        SendMessageRequest(message=message("1 30")), metadata=as_alice(), timeout=60
    )
    seen = [next(stream)]
    while not seen[-1].HasField("artifact_update"):
        seen.append(next(stream))  # the worker is running it
    stack.processes["worker"].kill()
    seen.extend(stream)
    last = seen[-1].status_update.status
    assert last.state == TaskState.TASK_STATE_FAILED
    assert "worker lost" in last.message.parts[0].text
    stack.start("worker")
    after = list(
        stub.SendStreamingMessage(
            SendMessageRequest(message=message("0.1 2")), metadata=as_alice(), timeout=60
        )
    )
    assert state_of(after[-1]) == COMPLETED


def self_signed(folder: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and its key, as PEM files."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = folder / "grpc.crt", folder / "grpc.key"
    cert_file.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_file, key_file


def test_the_grpc_port_speaks_tls_when_given_a_certificate(
    deployment: Deployment, tmp_path: Path
) -> None:
    cert, key = self_signed(tmp_path)
    port = free_port()
    start_grpc(
        deployment.stack,
        port,
        "grpc-tls",
        TOOLNEXUS_GRPC_TLS_CERT=f"@{cert}",
        TOOLNEXUS_GRPC_TLS_KEY=f"@{key}",
    )
    credentials = grpc.ssl_channel_credentials(root_certificates=cert.read_bytes())
    with grpc.secure_channel(f"127.0.0.1:{port}", credentials) as channel:
        grpc.channel_ready_future(channel).result(timeout=30)
        task = completed_task(deployment)
        stub = a2a_pb2_grpc.A2AServiceStub(channel)
        assert stub.GetTask(GetTaskRequest(id=task.id), metadata=as_alice()).id == task.id
    with grpc.insecure_channel(f"127.0.0.1:{port}") as plain:
        code, _ = failure(
            lambda: a2a_pb2_grpc.A2AServiceStub(plain).GetTask(
                GetTaskRequest(id=task.id), metadata=as_alice(), timeout=5
            )
        )
    assert code == grpc.StatusCode.UNAVAILABLE  # no plaintext on a TLS port


def outcome(call: Any) -> grpc.StatusCode:
    try:
        result = call()
        if not isinstance(result, bytes):
            list(result)
    except grpc.RpcError as error:
        code: grpc.StatusCode = error.code()
        return code
    return grpc.StatusCode.OK


def test_hostile_bytes_get_an_error_and_the_process_keeps_serving(
    deployment: Deployment,
) -> None:
    """Bytes that are no request message, truncated messages, deep data: each
    call fails with INVALID_ARGUMENT (INVALID_REQUEST when protobuf cannot
    read the bytes, where grpcio itself would answer INTERNAL or UNKNOWN;
    INVALID_PARAMS when the methods refuse what they hold), and the process
    answers the next call."""
    valid = SendMessageRequest(message=message("hello")).SerializeToString()
    hostile = [b"\xff" * 7, b"\x0a\xff\xff\xff\xff\x0f", valid[: len(valid) // 2], b"\x12" * 300]
    deep: dict[str, Any] = {"leaf": 1}
    for _ in range(34):  # past MAX_VALUE_DEPTH (32), within protobuf's own limit
        deep = {"next": deep}
    deep_send = SendMessageRequest(message=message("x"))
    json_format.ParseDict({"data": deep}, deep_send.message.parts.add().data)
    codes = set()
    for name in ("SendMessage", "GetTask", "ListTasks", "CancelTask", "SubscribeToTask"):
        streaming = name in ("SubscribeToTask",)
        path = f"/lf.a2a.v1.A2AService/{name}"
        method = (
            deployment.channel.unary_stream(path)
            if streaming
            else deployment.channel.unary_unary(path)
        )
        for body in hostile:
            codes.add(outcome(lambda m=method, b=body: m(b, metadata=as_alice(), timeout=10)))
    # Protobuf skips what it does not know, so some of these read as (empty)
    # requests and are answered; none reaches an unhandled error.
    assert grpc.StatusCode.INVALID_ARGUMENT in codes
    assert codes <= {
        grpc.StatusCode.OK,
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.NOT_FOUND,
    }
    undecodable = deployment.channel.unary_unary("/lf.a2a.v1.A2AService/GetTask")
    assert failure(lambda: undecodable(b"\xff" * 7, metadata=as_alice(), timeout=10)) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "INVALID_REQUEST",
    )

    # protobuf's own depth limit (an undecodable request) comes before the
    # methods' (INVALID_PARAMS); either way nothing is stored
    def stored() -> int:
        listed = deployment.stub.ListTasks(ListTasksRequest(page_size=1), metadata=as_alice())
        return int(listed.total_size)

    before = stored()
    deep_code = failure(lambda: deployment.stub.SendMessage(deep_send, metadata=as_alice()))[0]
    assert deep_code == grpc.StatusCode.INVALID_ARGUMENT
    assert stored() == before
    assert completed_task(deployment).status.state == COMPLETED


def test_the_extended_card_over_grpc_when_configured(deployment: Deployment) -> None:
    port = free_port()
    start_grpc(
        deployment.stack,
        port,
        "grpc-extended",
        TOOLNEXUS_EXTENDED_CARD='{"description": "for signed-in callers"}',
    )
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        grpc.channel_ready_future(channel).result(timeout=30)
        stub = a2a_pb2_grpc.A2AServiceStub(channel)
        request = a2a_pb2.GetExtendedAgentCardRequest()
        card = stub.GetExtendedAgentCard(request, metadata=as_alice())
        assert card.description == "for signed-in callers"
        assert card.capabilities.extended_agent_card
        bindings = [i.protocol_binding for i in card.supported_interfaces]
        assert "GRPC" in bindings and "JSONRPC" in bindings
        no_token = failure(lambda: stub.GetExtendedAgentCard(request, metadata=[V10]))
        assert no_token == (grpc.StatusCode.UNAUTHENTICATED, "UNAUTHENTICATED")
