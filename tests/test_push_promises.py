"""The push promises of docs/push.md that no other test holds, each against a
real receiver over HTTP (or real stores for the restart): which answers are
retried and how long a retry waits, giving up after TOOLNEXUS_PUSH_RETRY_FOR,
a read timeout retried, a config deleted mid-delivery sent nothing more,
RS256 signatures, the webhook's host resolved again at every connect (so a
name that turns private is refused), and webhook configs and cursors that
outlive the process that saved them."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat
from prometheus_client import REGISTRY

from shared import Settings
from shared.events import status_update
from shared.push import http as push_http
from shared.push.contract import Cursor, PushStore
from shared.push.http import Allowed, Refused, Webhook
from shared.push.signing import SIGNATURE_HEADER
from shared.store.contract import Commit
from shared.store.resolve import resolve_store
from shared.stores.memory.store import MemoryStore
from shared.task import WORKING, new_task
from tests.support.shortcuts import push_store
from tests.support.store_kinds import SHARED, Stores
from tests.support.webhook_receiver import Receiver
from worker.push.delivery import GaveUp, Policy, deliver

# Backoff far longer than any test: a pair parked by it stays parked.
SETTINGS = Settings(
    push_allowed_hosts=("127.0.0.1",),
    push_linger=0.0,
    push_backoff=100.0,
    push_backoff_max=100.0,
)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    receiver = Receiver().start()
    yield receiver
    receiver.stop()


def a_task(store: Any, receiver: Receiver, path: str) -> tuple[str, PushStore]:
    message = {"role": "user", "messageId": path, "parts": [{"kind": "text", "text": "x"}]}
    task = new_task(message, None, None)  # type: ignore[arg-type]
    store.create(task)
    store.commit(Commit(task, [status_update(task, WORKING)], 1, snapshot=False))
    push = push_store(store)
    assert push is not None
    push.put({"id": "c", "taskId": task["id"], "url": receiver.url(path), "version": "1.0"}, 10)
    return task["id"], push


def given_up(reason: str) -> float:
    sample = REGISTRY.get_sample_value("toolnexus_push_given_up_total", {"reason": reason})
    return sample or 0.0


def test_408_is_retried_after_the_backoff_and_503_after_its_retry_after(
    receiver: Receiver,
) -> None:
    store = MemoryStore()
    policy = Policy.of(SETTINGS)

    receiver.script("/408", (408, {}))
    task_id, push = a_task(store, receiver, "/408")
    assert deliver(store, push, task_id, "c", "first", policy) == "retrying"
    assert push.cursor(task_id, "c").failures == 1
    # Parked for the backoff (50-100 s here): no other delivery may take the pair.
    assert not push.lease(task_id, "c", "another", 30)

    receiver.script("/503", (503, {"Retry-After": "0"}))
    task_id, push = a_task(store, receiver, "/503")
    assert deliver(store, push, task_id, "c", "first", policy) == "retrying"
    # Parked for what the receiver asked (0 s), not the backoff: free at once,
    # and the next delivery sends the event again and succeeds.
    assert push.lease(task_id, "c", "second", 30)
    assert deliver(store, push, task_id, "c", "second", policy) == "delivered"
    assert [hit.status for hit in receiver.on("/503")] == [503, 200, 200]
    assert [hit.event_id for hit in receiver.on("/503")] == [1, 1, 2]


def test_a_receiver_that_never_answers_is_retried(receiver: Receiver) -> None:
    store = MemoryStore()
    policy = replace(Policy.of(SETTINGS), read_timeout=0.3)
    release = receiver.pause_first("/silent")
    task_id, push = a_task(store, receiver, "/silent")
    try:
        assert deliver(store, push, task_id, "c", "first", policy) == "retrying"
    finally:
        release.set()
    cursor = push.cursor(task_id, "c")
    assert (cursor.delivered, cursor.failures) == (0, 1)


def test_an_event_failing_past_retry_for_is_given_up_and_the_feed_goes_on(
    receiver: Receiver,
) -> None:
    store = MemoryStore()
    policy = replace(Policy.of(SETTINGS), retry_for=10.0)
    receiver.script("/down", (500, {}), (500, {}))
    task_id, push = a_task(store, receiver, "/down")
    # Failing since 11 s ago: past TOOLNEXUS_PUSH_RETRY_FOR for this event.
    push.set_cursor(task_id, "c", Cursor(delivered=0, failures=4, since=time.time() - 11))
    before = given_up("expired")
    with pytest.raises(GaveUp, match="1 event"):
        deliver(store, push, task_id, "c", "me", policy)
    assert given_up("expired") == before + 1
    # Event 1 given up; event 2, failing for the first time, is retried, not given up.
    cursor = push.cursor(task_id, "c")
    assert (cursor.delivered, cursor.given_up, cursor.failures) == (1, 1, 1)
    assert [hit.event_id for hit in receiver.on("/down")] == [1, 2]


def test_a_config_deleted_while_its_delivery_runs_is_sent_nothing_more(
    receiver: Receiver,
) -> None:
    store = MemoryStore()
    release = receiver.pause_first("/deleted")
    task_id, push = a_task(store, receiver, "/deleted")
    outcome: list[str] = []
    delivery = threading.Thread(
        target=lambda: outcome.append(deliver(store, push, task_id, "c", "me", Policy.of(SETTINGS)))
    )
    delivery.start()
    try:
        assert receiver.paused["/deleted"].wait(10), "the first event was never POSTed"
        assert push.delete(task_id, "c")  # while event 1's POST is in flight
    finally:
        release.set()
    delivery.join(10)
    assert outcome == ["deleted"]
    # The POST in flight arrives; event 2, which came after the delete, never does.
    assert [hit.event_id for hit in receiver.on("/deleted")] == [1]


def test_deliveries_signed_with_an_rsa_key_verify_as_rs256(
    tmp_path: Path, receiver: Receiver
) -> None:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()).decode()
    policy = Policy.of(replace(SETTINGS, push_signing_key=pem))
    assert policy.signer is not None
    store = MemoryStore()
    task_id, push = a_task(store, receiver, "/rsa")
    assert deliver(store, push, task_id, "c", "me", policy) == "delivered"
    keys = jwt.PyJWKSet.from_dict(policy.signer.jwks())
    hits = receiver.delivered("/rsa")
    assert len(hits) == 2
    for hit in hits:
        token = hit.headers[SIGNATURE_HEADER.lower()]
        header = jwt.get_unverified_header(token)
        assert header["alg"] == "RS256"
        claims = jwt.decode(
            token, keys[header["kid"]].key, algorithms=["RS256"], audience=receiver.url("/rsa")
        )
        assert claims["body_sha256"]


def test_the_webhook_host_is_resolved_again_at_every_connect(
    receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The DNS-rebinding defence: a name that resolved to an allowed address
    for one connection and to a private one for the next is refused then,
    not trusted from the first answer."""
    answers = iter(["127.0.0.1", "10.1.2.3"])
    asked: list[str] = []
    real = socket.getaddrinfo

    def rebinding(host: str, port: int, *args: Any, **kwargs: Any) -> Any:
        asked.append(host)
        return real(next(answers), port, *args, **kwargs)

    monkeypatch.setattr(push_http.socket, "getaddrinfo", rebinding)
    allowed = Allowed.parse(["127.0.0.1"])
    url = f"http://hooks.example:{receiver.port}/rebind"
    webhook = Webhook(url, allowed, 2.0, 2.0)
    assert webhook.post(b"{}", {"Content-Type": "application/json"}).status == 200
    webhook.close()  # the next POST connects again, as after the receiver hung up
    with pytest.raises(Refused, match=r"10\.1\.2\.3"):
        webhook.post(b"{}", {"Content-Type": "application/json"})
    assert asked == ["hooks.example", "hooks.example"]
    assert len(receiver.on("/rebind")) == 1


@pytest.fixture(params=SHARED)
def durable_spec(request: pytest.FixtureRequest, stores: Stores) -> str:
    return stores.url(request.param)


def test_webhook_configs_and_cursors_outlive_the_process_that_saved_them(
    durable_spec: str, receiver: Receiver
) -> None:
    """What a restarted front end or delivery worker finds: a new store on
    the same data (as a new process opens it) has the webhook and its
    cursor, and the next delivery goes on from the cursor."""
    first = resolve_store(durable_spec)
    task_id, push = a_task(first, receiver, "/after-restart")
    push.set_cursor(task_id, "c", Cursor(delivered=1))
    again = resolve_store(durable_spec)
    pushes = push_store(again)
    assert pushes is not None
    assert [config["url"] for config in pushes.configs(task_id)] == [receiver.url("/after-restart")]
    assert pushes.cursor(task_id, "c").delivered == 1
    delivery = threading.Thread(
        target=deliver, args=(again, pushes, task_id, "c", "me", Policy.of(SETTINGS))
    )
    delivery.start()
    delivery.join(30)
    assert [hit.event_id for hit in receiver.delivered("/after-restart")] == [2]
