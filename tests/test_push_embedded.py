"""Push in embedded mode (toolnexus-serve, memory store): the official
a2a-sdk client registers a webhook (1.0 and the 0.3 compat transport), the
in-process deliverer POSTs every event to a real receiver, in order."""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import jwt
import pytest
from a2a.client import ClientConfig, ClientFactory
from a2a.client.card_resolver import A2ACardResolver
from a2a.types import (
    AuthenticationInfo,
    GetTaskPushNotificationConfigRequest,
    GetTaskRequest,
    ListTaskPushNotificationConfigsRequest,
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    TaskPushNotificationConfig,
    TaskState,
)
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat

from shared.push.signing import JWKS_PATH
from tests.support.embedded import embedded_server
from tests.support.polling import wait_for
from tests.support.webhook_receiver import Receiver

ENV = {
    "TOOLNEXUS_RUN": "examples.agents:echo",
    "TOOLNEXUS_PUSH_ALLOWED_HOSTS": "127.0.0.1",
    "TOOLNEXUS_PUSH_SWEEP": "0.2",
}


@pytest.fixture
def served(tmp_path: Path) -> Iterator[str]:
    with embedded_server(tmp_path, ENV) as (host, port):
        yield f"http://{host}:{port}"


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    receiver = Receiver().start()
    yield receiver
    receiver.stop()


async def sdk_registers(base_url: str, hook: str, *, legacy: bool) -> str:
    async with httpx.AsyncClient(timeout=10) as http:
        card = await A2ACardResolver(http, base_url).get_agent_card()
        assert card.capabilities.push_notifications
        if legacy:
            kept = [i for i in card.supported_interfaces if i.protocol_version == "0.3"]
            del card.supported_interfaces[:]
            card.supported_interfaces.extend(kept)
        client = ClientFactory(
            ClientConfig(streaming=False, polling=True, httpx_client=http)
        ).create(card)
        message = Message(role=Role.ROLE_USER, message_id=f"m-{legacy}", parts=[Part(text="hi")])
        # No webhook with the send: one added right after still gets every event.
        request = SendMessageRequest(
            message=message, configuration=SendMessageConfiguration(return_immediately=True)
        )
        task_id = ""
        async for event in client.send_message(request):
            task_id = event.task.id
        config = TaskPushNotificationConfig(
            task_id=task_id,
            id="sdk",
            url=hook,
            token="sdk-token",
            authentication=AuthenticationInfo(scheme="Bearer", credentials="sdk-secret"),
        )
        made = await client.create_task_push_notification_config(config)
        assert (made.id, made.url) == ("sdk", hook)
        got = await client.get_task_push_notification_config(
            GetTaskPushNotificationConfigRequest(task_id=task_id, id="sdk")
        )
        assert got.url == hook
        listed = await client.list_task_push_notification_configs(
            ListTaskPushNotificationConfigsRequest(task_id=task_id)
        )
        assert [c.id for c in listed.configs] == ["sdk"]
        deadline = time.monotonic() + 10
        task = await client.get_task(GetTaskRequest(id=task_id))
        while task.status.state != TaskState.TASK_STATE_COMPLETED:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)
            task = await client.get_task(GetTaskRequest(id=task_id))
        await client.close()
        return task_id


@pytest.mark.parametrize("legacy", [False, True], ids=["a2a-1.0", "a2a-0.3-compat"])
def test_the_sdk_registers_a_webhook_and_every_event_arrives(
    served: str, receiver: Receiver, legacy: bool
) -> None:
    asyncio.run(sdk_registers(served, receiver.url("/sdk"), legacy=legacy))

    def finished() -> bool:
        return any(_final(hit.body) for hit in receiver.delivered("/sdk"))

    wait_for(finished, timeout=30, what="the final event at the receiver")
    hits = receiver.delivered("/sdk")
    ids = [hit.event_id for hit in hits]
    assert ids == list(range(1, ids[-1] + 1)), ids  # every event, in order, from the first
    for hit in hits:
        assert hit.headers["authorization"] == "Bearer sdk-secret"
        assert hit.headers["x-a2a-notification-token"] == "sdk-token"


def test_signed_deliveries_verify_against_the_published_jwks(
    tmp_path: Path, receiver: Receiver
) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    pem = key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())
    (tmp_path / "push-key.pem").write_bytes(pem)
    env = {**ENV, "TOOLNEXUS_PUSH_SIGNING_KEY": f"@{tmp_path / 'push-key.pem'}"}
    hook = receiver.url("/signed")
    with embedded_server(tmp_path, env) as (host, port):
        base = f"http://{host}:{port}"
        message = {"role": "ROLE_USER", "messageId": "signed-1", "parts": [{"text": "hi"}]}
        params = {
            "message": message,
            "configuration": {
                "returnImmediately": True,
                "taskPushNotificationConfig": {"url": hook},
            },
        }
        body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": params}
        reply = httpx.post(base, json=body, headers={"A2A-Version": "1.0"}, timeout=10).json()
        assert "result" in reply, reply
        wait_for(
            lambda: any(_final(hit.body) for hit in receiver.delivered("/signed")),
            timeout=30,
            what="the final signed event",
        )
        keys = jwt.PyJWKSet.from_dict(httpx.get(f"{base}{JWKS_PATH}", timeout=10).json())
    seen = set()
    for hit in receiver.delivered("/signed"):
        token = hit.headers["x-a2a-signature"]
        kid = jwt.get_unverified_header(token)["kid"]
        claims = jwt.decode(token, keys[kid].key, algorithms=["ES256"], audience=hook)
        assert claims["iss"] == "toolnexus-agent"
        assert claims["body_sha256"] == hashlib.sha256(hit.raw).hexdigest()
        assert claims["exp"] > claims["iat"]
        seen.add(claims["jti"])
    assert len(seen) == len(receiver.delivered("/signed")) > 1  # one jti per POST


def _final(body: dict[str, object]) -> bool:
    """A completed status, in either generation's StreamResponse shape."""
    text = str(body)
    return "TASK_STATE_COMPLETED" in text or "'state': 'completed'" in text


@pytest.mark.parametrize("version", ["1.1", "1.0"])
def test_a_webhook_gets_the_generation_only_when_a_1_1_caller_set_it(
    served: str, receiver: Receiver, version: str
) -> None:
    """A webhook speaks the version of the call that set it: 1.1's updates
    carry their generation, one more each; 1.0's carry none, as before."""
    message = {"role": "ROLE_USER", "messageId": f"m-{version}", "parts": [{"text": "hi"}]}
    configuration = {
        "returnImmediately": True,
        "taskPushNotificationConfig": {"url": receiver.url(f"/v{version}")},
    }
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendMessage",
        "params": {"message": message, "configuration": configuration},
    }
    sent = httpx.post(f"{served}/", json=body, headers={"A2A-Version": version}, timeout=10)
    assert "task" in sent.json()["result"]

    def finished() -> bool:
        return any(_final(hit.body) for hit in receiver.delivered(f"/v{version}"))

    wait_for(finished, timeout=30, what="the final event at the receiver")
    updates = [
        update
        for hit in receiver.delivered(f"/v{version}")
        for kind, update in hit.body.items()
        if kind in ("statusUpdate", "artifactUpdate")
    ]
    assert updates
    if version == "1.0":
        assert all(b"generation" not in hit.raw for hit in receiver.delivered("/v1.0"))
        return
    generations = [int(update["generation"]) for update in updates]
    assert generations == list(range(generations[0], generations[0] + len(generations)))
