"""Per-owner send limits (`shared.owners.admission`), from settings to the wire.

First in one process: the variables and the overrides file as settings read
them (a bad one stops start-up naming it), the admission's own rules (an
owner without a limit costs no round trip; at the cap finished ids are
dropped, gone ones only after a grace, and an owner refused is not read
again at once), what a send does on the memory store (follow-ups take a
token but no slot, a retry of an accepted message is neither refused nor
counted twice, a refused send saves and queues nothing, a slot a create
never used is given back), the refusal's form on each binding, and a user's
two-method store refused at start-up when a limit is set.

Then on the fleet as compose deploys it: two gunicorn front ends sharing a
private Redis, or PostgreSQL, store, and the gRPC process: a burst across
both front ends is allowed once, then refused with a hint after which a
send succeeds; nothing of a refused send reaches the store or the broker;
owners do not share a limit and an override gives one more; the active cap
holds across both front ends and frees a slot once a worker finishes a
task. Last, the embedded server's synchronous gRPC port refuses the same way
and frees a slot when its in-process worker finishes.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
import redis
import requests
from a2a.client import ClientCallContext, ClientConfig, ClientFactory
from a2a.client.card_resolver import A2ACardResolver
from a2a.client.errors import A2AClientError
from a2a.types import Message, Part, Role, SendMessageRequest, a2a_pb2, a2a_pb2_grpc
from google.protobuf import duration_pb2
from google.rpc import error_details_pb2, status_pb2

from shared.errors import ConfigError, OwnerLimitExceeded
from shared.events import to_state
from shared.owners.admission import ACTIVE_RETRY, GRACE, Admission, admission
from shared.owners.limits import LimitTable, OwnerLimits
from shared.settings import Settings
from shared.store.contract import Store
from shared.stores.memory.store import memory_store
from shared.task import COMPLETED, INPUT_REQUIRED, WORKING
from shared.transitions import transition
from tests.support.compose import Backends, LocalStack, local_stack, start_grpc
from tests.support.embedded import ROOT, embedded_server
from tests.support.polling import wait_for
from tests.support.ports import free_port
from tests.test_store_adapter import DictStore
from tests.test_web_support import PlayingDispatcher
from web import create_app
from web.assembly import assemble
from web.core.handler import parse
from web.core.method_table import SEND
from web.core.tasks import Tasks

RETRY_INFO = "type.googleapis.com/google.rpc.RetryInfo"
ERROR_INFO = "type.googleapis.com/google.rpc.ErrorInfo"


class FakeClock:
    def __init__(self, now: float = 1_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


# --- settings ------------------------------------------------------------------


def test_the_limits_are_off_by_default_and_cost_nothing() -> None:
    settings = Settings.from_env({})
    assert (settings.owner_rate, settings.owner_burst, settings.owner_max_active) == (None,) * 3
    assert settings.owner_limits == ()
    assert admission(settings, None) is None  # needs no limiter
    tasks = assemble(settings, memory_store(), PlayingDispatcher(memory_store())).tasks
    assert tasks.limits is None  # nothing on a send's way


def test_the_variables_are_read_and_zero_turns_a_limit_off() -> None:
    env = {
        "TOOLNEXUS_OWNER_RATE": "2.5",
        "TOOLNEXUS_OWNER_BURST": "5",
        "TOOLNEXUS_OWNER_MAX_ACTIVE": "7",
    }
    settings = Settings.from_env(env)
    assert (settings.owner_rate, settings.owner_burst, settings.owner_max_active) == (2.5, 5, 7)
    limits = LimitTable(settings).of("anyone")
    assert (limits.rate, limits.bucket, limits.max_active) == (2.5, 5, 7)
    off = Settings.from_env({name: "0" for name in env})
    assert (off.owner_rate, off.owner_burst, off.owner_max_active) == (None,) * 3
    # Without a burst the bucket holds a second's worth of sends, at least one.
    assert LimitTable(Settings(owner_rate=2.5)).of("x").bucket == 3
    assert LimitTable(Settings(owner_rate=0.2)).of("x").bucket == 1


@pytest.mark.parametrize(
    ("variable", "value", "says"),
    [
        ("TOOLNEXUS_OWNER_RATE", "-1", "positive number"),
        ("TOOLNEXUS_OWNER_RATE", "inf", "positive number"),
        ("TOOLNEXUS_OWNER_RATE", "often", "could not convert"),
        ("TOOLNEXUS_OWNER_BURST", "1.5", "invalid literal"),
        ("TOOLNEXUS_OWNER_MAX_ACTIVE", "-2", "at least 1"),
    ],
)
def test_a_bad_limit_stops_start_up_naming_its_variable(
    variable: str, value: str, says: str
) -> None:
    with pytest.raises(ConfigError, match=says) as raised:
        Settings.from_env({variable: value})
    assert str(raised.value).startswith(f"{variable}={value!r}: ")


def test_per_owner_overrides_come_from_a_json_or_yaml_file(tmp_path: Path) -> None:
    overrides = {"alice": {"rate": 20, "max_active": 4}, "bob": {"rate": 0}, "": {"burst": 9}}
    as_json = tmp_path / "limits.json"
    as_json.write_text(json.dumps(overrides))
    as_yaml = tmp_path / "limits.yaml"
    as_yaml.write_text("alice: {rate: 20, max_active: 4}\nbob:\n  rate: 0\n'':\n  burst: 9\n")
    for path in (as_json, as_yaml):
        env = {
            "TOOLNEXUS_OWNER_RATE": "1",
            "TOOLNEXUS_OWNER_BURST": "2",
            "TOOLNEXUS_OWNER_LIMITS": str(path),
        }
        table = LimitTable(Settings.from_env(env))
        assert table.of("alice") == OwnerLimits(rate=20, burst=2, max_active=4)
        assert table.of("bob").rate is None  # 0: off for that owner
        assert table.of("").bucket == 9  # the anonymous caller of a service without tokens
        assert table.of("carol") == table.default == OwnerLimits(rate=1, burst=2)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("", "must map owners to their limits"),
        ("[1, 2]", "must map owners to their limits"),
        ("alice: 3", "the entry for 'alice' must map limits to numbers"),
        ("alice: {speed: 1}", "'alice': unknown limit 'speed'"),
        ("alice: {burst: 1.5}", "'alice': burst must be a whole number"),
        ("alice: {rate: -1}", "'alice': rate must be a number of at least 0"),
        ("{alice: [", "is not JSON or YAML"),
    ],
)
def test_a_bad_overrides_file_stops_start_up_naming_the_variable(
    tmp_path: Path, text: str, says: str
) -> None:
    path = tmp_path / "limits.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=r"^TOOLNEXUS_OWNER_LIMITS=") as raised:
        Settings.from_env({"TOOLNEXUS_OWNER_LIMITS": str(path)})
    assert says in str(raised.value)
    with pytest.raises(ConfigError, match=r"^TOOLNEXUS_OWNER_LIMITS=.*cannot read"):
        Settings.from_env({"TOOLNEXUS_OWNER_LIMITS": str(tmp_path / "missing.yaml")})


# --- the admission's own rules -------------------------------------------------


class CountingLimiter:
    """A memory store's limiter, counting what is asked of it."""

    def __init__(self, clock: FakeClock) -> None:
        self.inner = memory_store(clock).send_limiter()
        self.calls: list[str] = []

    def take(self, owner: str, rate: float, size: int) -> float:
        self.calls.append("take")
        return self.inner.take(owner, rate, size)

    def reserve(self, owner: str, task_id: str, cap: int) -> Any:
        self.calls.append("reserve")
        return self.inner.reserve(owner, task_id, cap)

    def release(self, owner: str, *task_ids: str) -> None:
        self.calls.append("release")
        self.inner.release(owner, *task_ids)

    def accepted(self, message_key: str) -> str | None:
        return self.inner.accepted(message_key)


def test_a_rate_refuses_with_the_wait_and_an_owner_without_one_costs_no_round_trip() -> None:
    settings = Settings(owner_rate=0.5, owner_burst=2, owner_limits=(("free", (("rate", 0.0),)),))
    clock = FakeClock()
    limiter = CountingLimiter(clock)
    limits = Admission(LimitTable(settings), limiter, clock)
    limits.take("alice")
    limits.take("alice")
    with pytest.raises(OwnerLimitExceeded) as raised:
        limits.take("alice")
    assert raised.value.limit == "rate" and raised.value.retry_after == pytest.approx(2.0)
    clock.now += 2.0
    limits.take("alice")
    asked = len(limiter.calls)
    for _ in range(5):
        limits.take("free")
        assert limits.reserve("free", f"t-{uuid.uuid4()}", lambda _: False) is False
    assert len(limiter.calls) == asked


def test_at_the_cap_finished_ids_are_dropped_and_gone_ones_only_after_a_grace() -> None:
    clock = FakeClock()
    limiter = CountingLimiter(clock)
    limits = Admission(LimitTable(Settings(owner_max_active=2)), limiter, clock)
    states: dict[str, bool | None] = {"t1": True, "t2": False}  # t3 is not saved yet
    read: list[str] = []

    def finished(task_id: str) -> bool | None:
        read.append(task_id)
        return states.get(task_id)

    assert limits.reserve("alice", "t1", finished) and limits.reserve("alice", "t2", finished)
    assert limits.reserve("alice", "t3", finished)  # t1 finished: dropped
    assert sorted(read) == ["t1", "t2"]
    read.clear()
    with pytest.raises(OwnerLimitExceeded) as raised:
        limits.reserve("alice", "t4", finished)  # t2 running, t3 still being saved
    assert raised.value.limit == "max_active" and raised.value.retry_after == ACTIVE_RETRY
    assert sorted(read) == ["t2", "t3"]
    read.clear()
    with pytest.raises(OwnerLimitExceeded):
        limits.reserve("alice", "t4", finished)  # refused again at once: nothing read
    assert read == []
    clock.now += GRACE + 1  # t3 never came: gone
    assert limits.reserve("alice", "t4", finished)
    assert sorted(limiter.inner.reserve("alice", "probe", 2) or {}) == ["t2", "t4"]


# --- sends on the memory store --------------------------------------------------


@dataclass
class InProcess:
    store: Store
    dispatcher: PlayingDispatcher
    tasks: Tasks

    def send(self, owner: str, text: str = "hi", **message: Any) -> Any:
        body = {
            "role": "user",
            "kind": "message",
            "messageId": message.pop("messageId", str(uuid.uuid4())),
            "parts": [{"kind": "text", "text": text}],
            **message,
        }
        return self.tasks.accept(parse(SEND, {"message": body}), owner)

    def reserved(self, owner: str) -> list[str]:
        return reserved(self.store, owner)


def in_process(**limits: Any) -> InProcess:
    store = memory_store()
    dispatcher = PlayingDispatcher(store, auto=False)
    # Published in arrival order (no fair turns): what is queued is what was accepted.
    settings = Settings(fair_share=False, **limits)
    return InProcess(store, dispatcher, assemble(settings, store, dispatcher).tasks)


def test_a_follow_up_takes_a_token_but_no_slot() -> None:
    served = in_process(owner_max_active=1)
    first = served.send("alice").task["id"]
    transition(served.store, first, to_state(WORKING))
    transition(served.store, first, to_state(INPUT_REQUIRED))
    followed = served.send("alice", "more", taskId=first)  # at the cap, yet no new task
    assert followed.task["id"] == first and served.dispatcher.enqueued == [first, first]
    with pytest.raises(OwnerLimitExceeded, match="unfinished tasks"):
        served.send("alice")
    assert served.reserved("alice") == [first]

    rated = in_process(owner_rate=0.001, owner_burst=2)
    task_id = rated.send("alice").task["id"]
    transition(rated.store, task_id, to_state(WORKING))
    transition(rated.store, task_id, to_state(INPUT_REQUIRED))
    rated.send("alice", "more", taskId=task_id)
    with pytest.raises(OwnerLimitExceeded) as raised:
        rated.send("alice", "again", taskId=task_id)
    assert raised.value.limit == "rate"


def test_a_retry_of_an_accepted_message_is_neither_refused_nor_counted_twice() -> None:
    served = in_process(owner_max_active=2)
    first = served.send("alice", messageId="m-1").task["id"]
    again = served.send("alice", messageId="m-1")  # below the cap
    assert again.repeated and again.task["id"] == first
    assert served.reserved("alice") == [first]
    second = served.send("alice", messageId="m-2").task["id"]
    again = served.send("alice", messageId="m-1")  # at the cap
    assert again.repeated and again.task["id"] == first
    assert served.reserved("alice") == sorted([first, second])
    assert served.dispatcher.enqueued == [first, second]
    # A message id the caller moved on from (canceled) starts a new task: it
    # counts (in the slot its canceled task no longer holds).
    served.tasks.cancel(first, "alice")
    time.sleep(ACTIVE_RETRY)  # the check at the retry found nothing finished: not again at once
    renewed = served.send("alice", messageId="m-1")
    assert not renewed.repeated and renewed.task["id"] != first
    assert served.reserved("alice") == sorted([second, renewed.task["id"]])
    with pytest.raises(OwnerLimitExceeded):
        served.send("alice", messageId="m-3")


def test_a_refused_send_saves_and_queues_nothing() -> None:
    served = in_process(owner_rate=0.001, owner_burst=1, owner_max_active=5)
    served.send("alice")
    before, queued = served.store.all(), list(served.dispatcher.enqueued)
    with pytest.raises(OwnerLimitExceeded):
        served.send("alice")
    assert served.store.all() == before and served.dispatcher.enqueued == queued
    assert len(served.reserved("alice")) == 1  # the refused send reserved nothing


def test_a_slot_a_create_never_used_is_given_back() -> None:
    served = in_process(owner_max_active=1)
    served.send("alice", contextId="ctx-alice")
    with pytest.raises(Exception, match="belongs to another caller"):
        served.send("bob", contextId="ctx-alice")
    assert served.reserved("bob") == []
    served.send("bob")


PACKAGED = "python:web.http.gunicorn_conf"  # what `toolnexus-serve web` runs gunicorn with


def test_a_two_method_store_with_a_limit_stops_start_up_naming_it() -> None:
    with pytest.raises(ConfigError, match="TOOLNEXUS_OWNER_MAX_ACTIVE: per-owner send limits"):
        create_app(
            Settings(owner_max_active=3),
            store=DictStore(),
            dispatcher=PlayingDispatcher(DictStore()),
        )
    create_app(
        Settings(), store=DictStore(), dispatcher=PlayingDispatcher(DictStore())
    )  # no limit: fine
    result = subprocess.run(
        [sys.executable, "-m", "gunicorn", "-c", PACKAGED, "web:create_app()"],
        env={
            **os.environ,
            "TOOLNEXUS_STORE": "tests.test_store_adapter:DictStore",
            "TOOLNEXUS_OWNER_RATE": "5",
            "TOOLNEXUS_PORT": str(free_port()),
        },
        capture_output=True, text=True, timeout=60, cwd=ROOT,
    )  # fmt: skip
    assert result.returncode == 2
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("toolnexus: TOOLNEXUS_OWNER_RATE: per-owner send limits need"), last


# --- the refusal on each binding, in process -------------------------------------


@pytest.fixture
def refusing() -> Iterator[Any]:
    """A front end whose every caller has one send, then waits 2.5 s for the next."""
    store = memory_store()
    settings = Settings(owner_rate=0.4, owner_burst=1)
    app = create_app(settings, store=store, dispatcher=PlayingDispatcher(store, auto=False))
    client = app.test_client()
    yield client


def rpc_send(client: Any, headers: dict[str, str], method: str = "SendMessage") -> Any:
    legacy = method.startswith("message/") or "A2A-Version" not in headers
    part = {"kind": "text", "text": "hi"} if legacy else {"text": "hi"}
    role = "user" if legacy else "ROLE_USER"
    message = {"role": role, "messageId": str(uuid.uuid4()), "parts": [part]}
    if legacy:
        message["kind"] = "message"
    body = {"jsonrpc": "2.0", "id": 7, "method": method, "params": {"message": message}}
    return client.post("/", json=body, headers=headers)


def test_json_rpc_refuses_with_data_retry_after_in_every_dialect(refusing: Any) -> None:
    assert "result" in rpc_send(refusing, {}).get_json()  # the caller's one token
    for headers, method in (
        ({}, "SendMessage"),  # toolnexus' own dialect
        ({"A2A-Version": "0.3"}, "message/send"),
        ({"A2A-Version": "0.3"}, "message/stream"),  # a stream of that one error
    ):
        reply = rpc_send(refusing, headers, method)
        assert reply.status_code == 200
        error = _json_rpc_error(reply)
        assert error["code"] == -32029, error
        assert error["data"]["limit"] == "rate"
        retry = error["data"]["retryAfter"]
        assert isinstance(retry, float) and 0 < retry <= 2.5
    reply = rpc_send(refusing, {"A2A-Version": "1.0"})
    error = reply.get_json()["error"]
    assert error["code"] == -32029
    info, delay = error["data"]
    assert info["@type"] == ERROR_INFO and info["reason"] == "OWNER_LIMIT_EXCEEDED"
    assert info["domain"] == "toolnexus-serve" and info["metadata"]["limit"] == "rate"
    assert 0 < float(info["metadata"]["retryAfter"]) <= 2.5
    assert delay["@type"] == RETRY_INFO and delay["retryDelay"].endswith("s")
    assert 0 < float(delay["retryDelay"][:-1]) <= 2.5
    streamed = rpc_send(refusing, {"A2A-Version": "1.0"}, "SendStreamingMessage")
    assert streamed.get_json()["error"]["code"] == -32029  # refused before any stream opens


def _json_rpc_error(reply: Any) -> dict[str, Any]:
    """The error of a JSON reply, or of a 0.3 stream of that one error."""
    if reply.mimetype == "text/event-stream":
        data = [
            line[5:]
            for line in reply.get_data(as_text=True).splitlines()
            if line.startswith("data:")
        ]
        assert len(data) == 1, data
        found: dict[str, Any] = json.loads(data[0])["error"]
        return found
    error: dict[str, Any] = reply.get_json()["error"]
    return error


def test_http_json_refuses_429_with_retry_after(refusing: Any) -> None:
    body: dict[str, Any] = {
        "message": {"role": "ROLE_USER", "messageId": "r-1", "parts": [{"text": "hi"}]},
        "configuration": {"returnImmediately": True},
    }
    headers = {"A2A-Version": "1.0"}
    assert refusing.post("/message:send", json=body, headers=headers).status_code == 200
    body["message"]["messageId"] = "r-2"
    reply = refusing.post("/message:send", json=body, headers=headers)
    assert reply.status_code == 429
    assert reply.headers["Retry-After"] in ("1", "2", "3")  # whole seconds, rounded up
    error = reply.get_json()["error"]
    assert (error["code"], error["status"]) == (429, "RESOURCE_EXHAUSTED")
    assert [detail["@type"] for detail in error["details"]] == [ERROR_INFO, RETRY_INFO]
    streamed = refusing.post("/message:stream", json=body, headers=headers)
    assert streamed.status_code == 429 and "Retry-After" in streamed.headers


# --- the fleet: two front ends on one store ------------------------------------

RATE = 1.0  # every owner's, but where overridden
BURST = 3
OVERRIDES = """
generous: {burst: 6}
capped: {rate: 0, max_active: 2}
wire: {rate: 0.2, burst: 1}
"""
OWNERS = ("burst", "saved", "alone", "other", "generous", "capped", "wire")


@dataclass
class Fleet:
    kind: str
    stack: LocalStack
    urls: list[str]
    store: Store
    broker: redis.Redis
    queue: str
    grpc_address: str | None

    def depth(self) -> int:
        """Messages waiting in the fulfil queue (kombu's priority lists too)."""
        names = [self.queue, *(f"{self.queue}\x06\x16{step}" for step in (3, 6, 9))]
        return sum(int(self.broker.llen(name)) for name in names)

    def owned(self, owner: str) -> int:
        return sum(task.get("owner") == owner for task in self.store.all().values())


def serving(url: str) -> bool:
    try:
        return requests.get(f"{url}/healthz", timeout=5).status_code == 200
    except (requests.ConnectionError, requests.Timeout):
        return False


def token(owner: str) -> str:
    return f"tok-{owner}"


@pytest.fixture(scope="module", params=["redis", "postgresql"])
def fleet(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Fleet]:
    kind: str = request.param
    folder = tmp_path_factory.mktemp(f"owner-limits-{kind}")
    limits = folder / "limits.yaml"
    limits.write_text(OVERRIDES)
    grpc_port = free_port()
    settings = {
        "TOOLNEXUS_API_TOKENS": ",".join(f"{owner}:{token(owner)}" for owner in OWNERS),
        "TOOLNEXUS_OWNER_RATE": str(RATE),
        "TOOLNEXUS_OWNER_BURST": str(BURST),
        "TOOLNEXUS_OWNER_MAX_ACTIVE": "50",
        "TOOLNEXUS_OWNER_LIMITS": str(limits),
        # Published in arrival order: what is queued is what was accepted.
        "TOOLNEXUS_FAIR_SHARE": "false",
        "TOOLNEXUS_GRPC_URL": f"127.0.0.1:{grpc_port}",
    }
    backends = Backends()
    if kind == "postgresql":
        url = request.getfixturevalue("postgres_store_url")
        backends = Backends(store_kind="postgresql", store_url=url)
    with local_stack(folder, settings, backends=backends) as (_, stack):
        second = free_port()
        stack.start("web", WEB_CONCURRENCY="1")
        stack.start(
            "web",
            as_name="web-b",
            WEB_CONCURRENCY="1",
            GUNICORN_CMD_ARGS=f"--bind=127.0.0.1:{second}",
        )
        grpc_address = None
        if kind == "redis":  # one gRPC process is enough: the binding is the same on any store
            start_grpc(stack, grpc_port)
            grpc_address = f"127.0.0.1:{grpc_port}"
        urls = [stack.web_url, f"http://127.0.0.1:{second}"]
        for url in urls:
            wait_for(lambda url=url: serving(url), timeout=60, what=f"{url} to answer")
        web = stack.environments["web"]
        broker = redis.Redis.from_url(web["TOOLNEXUS_BROKER_URL"])
        found = Fleet(
            kind,
            stack,
            urls,
            stack.open_store(),
            broker,
            web.get("TOOLNEXUS_QUEUE") or Settings().queue,
            grpc_address,
        )
        if grpc_address is not None:
            grpc.channel_ready_future(grpc.insecure_channel(grpc_address)).result(timeout=60)
        yield found
        broker.close()


def send(url: str, owner: str, message_id: str | None = None, version: str = "1.0") -> Any:
    """A non-blocking send as `owner`: the JSON-RPC reply."""
    message = {
        "role": "ROLE_USER",
        "messageId": message_id or str(uuid.uuid4()),
        "parts": [{"text": "hi"}],
    }
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendMessage",
        "params": {"message": message, "configuration": {"returnImmediately": True}},
    }
    headers = {"Authorization": f"Bearer {token(owner)}", "A2A-Version": version}
    return requests.post(f"{url}/", json=body, headers=headers, timeout=30).json()


def retry_delay(error: dict[str, Any]) -> float:
    (delay,) = [detail for detail in error["data"] if detail["@type"] == RETRY_INFO]
    return float(delay["retryDelay"].removesuffix("s"))


def burst(fleet: Fleet, owner: str, most: int) -> tuple[int, float, dict[str, Any]]:
    """Sends as `owner`, alternating between the front ends, until one is
    refused: how many were accepted, in how long, and the refusal."""
    started = time.monotonic()
    for accepted in range(most + 1):
        reply = send(fleet.urls[accepted % 2], owner)
        if "error" in reply:
            return accepted, time.monotonic() - started, reply["error"]
        assert reply["result"]["task"]["status"]["state"] == "TASK_STATE_SUBMITTED"
    raise AssertionError(f"{most + 1} sends of {owner} accepted")


def test_a_burst_across_both_front_ends_is_allowed_once_then_refused_with_a_hint(
    fleet: Fleet,
) -> None:
    accepted, took, error = burst(fleet, "burst", 10)
    # One bucket for both front ends: each of its own would have let six through.
    assert BURST <= accepted <= BURST + took * RATE, (accepted, took)
    assert error["code"] == -32029 and "too many sends" in error["message"]
    wait = retry_delay(error)
    assert 0 < wait <= 1 / RATE
    time.sleep(wait)
    assert "result" in send(fleet.urls[1], "burst")
    assert "error" in send(fleet.urls[0], "burst")


def test_nothing_of_a_refused_send_is_saved_or_queued(fleet: Fleet) -> None:
    depth, owned = fleet.depth(), fleet.owned("saved")
    accepted, _, _ = burst(fleet, "saved", 10)
    assert fleet.depth() == depth + accepted and fleet.owned("saved") == owned + accepted
    depth, owned = fleet.depth(), fleet.owned("saved")
    for url in fleet.urls:
        assert send(url, "saved")["error"]["code"] == -32029
        body = {"message": {"role": "ROLE_USER", "messageId": "s", "parts": [{"text": "hi"}]}}
        headers = {"Authorization": f"Bearer {token('saved')}", "A2A-Version": "1.0"}
        rest = requests.post(f"{url}/message:send", json=body, headers=headers, timeout=30)
        assert rest.status_code == 429, rest.text
    assert fleet.depth() == depth and fleet.owned("saved") == owned


def test_owners_do_not_share_a_limit_and_an_override_gives_one_more(fleet: Fleet) -> None:
    accepted, _, _ = burst(fleet, "alone", 10)
    assert accepted >= BURST
    assert "result" in send(fleet.urls[0], "other")  # alone's bucket is empty, not other's
    accepted, took, _ = burst(fleet, "generous", 20)
    assert 6 <= accepted <= 6 + took * RATE, (accepted, took)


def test_every_binding_refuses_with_the_retry_hint(fleet: Fleet) -> None:
    assert "result" in send(fleet.urls[0], "wire")  # its one token (0.2 a second)
    legacy = send(fleet.urls[1], "wire", version="")  # toolnexus' own dialect
    assert legacy["error"]["code"] == -32029
    assert 0 < legacy["error"]["data"]["retryAfter"] <= 5
    typed = send(fleet.urls[0], "wire")["error"]
    assert typed["code"] == -32029 and 0 < retry_delay(typed) <= 5
    body = {"message": {"role": "ROLE_USER", "messageId": "w", "parts": [{"text": "hi"}]}}
    headers = {"Authorization": f"Bearer {token('wire')}", "A2A-Version": "1.0"}
    rest = requests.post(f"{fleet.urls[1]}/message:send", json=body, headers=headers, timeout=30)
    assert rest.status_code == 429 and 1 <= int(rest.headers["Retry-After"]) <= 5
    assert rest.json()["error"]["status"] == "RESOURCE_EXHAUSTED"
    if fleet.grpc_address is None:
        return
    with grpc.insecure_channel(fleet.grpc_address) as channel:
        stub = a2a_pb2_grpc.A2AServiceStub(channel)
        request = a2a_pb2.SendMessageRequest(message=proto_message())
        metadata = [("a2a-version", "1.0"), ("authorization", f"Bearer {token('wire')}")]
        with pytest.raises(grpc.RpcError) as raised:
            stub.SendMessage(request, metadata=metadata, timeout=30)
    code, delay = refusal(raised.value)
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED and 0 < delay <= 5
    sdk = asyncio.run(sdk_refusal(fleet))
    assert sdk[0] == grpc.StatusCode.RESOURCE_EXHAUSTED and 0 < sdk[1] <= 5


def proto_message(text: str = "hi") -> a2a_pb2.Message:
    return a2a_pb2.Message(
        role=a2a_pb2.Role.ROLE_USER, message_id=str(uuid.uuid4()), parts=[a2a_pb2.Part(text=text)]
    )


def refusal(error: Any) -> tuple[grpc.StatusCode, float]:
    """A gRPC error's code and the RetryInfo delay in its status details."""
    delays = []
    for key, value in error.trailing_metadata() or ():
        if key == "grpc-status-details-bin":
            status = status_pb2.Status.FromString(value)
            assert status.code == error.code().value[0]
            for detail in status.details:
                if detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
                    info = error_details_pb2.RetryInfo()
                    detail.Unpack(info)
                    delay: duration_pb2.Duration = info.retry_delay
                    delays.append(delay.ToTimedelta().total_seconds())
    assert len(delays) == 1, delays
    return error.code(), delays[0]


async def sdk_refusal(fleet: Fleet) -> tuple[grpc.StatusCode, float]:
    """The official client over gRPC, refused: the status it raises from."""
    context = ClientCallContext(service_parameters={"authorization": f"Bearer {token('wire')}"})
    async with httpx.AsyncClient(timeout=30) as http:
        card = await A2ACardResolver(http, fleet.urls[0]).get_agent_card()
    config = ClientConfig(
        streaming=False,
        supported_protocol_bindings=["GRPC"],
        grpc_channel_factory=grpc.aio.insecure_channel,
    )
    client = ClientFactory(config).create(card)
    message = Message(role=Role.ROLE_USER, message_id=str(uuid.uuid4()), parts=[Part(text="hi")])
    try:
        with pytest.raises(A2AClientError, match="RESOURCE_EXHAUSTED") as raised:
            async for _ in client.send_message(
                SendMessageRequest(message=message), context=context
            ):
                pass
    finally:
        await client.close()
    cause = raised.value.__cause__
    assert isinstance(cause, grpc.aio.AioRpcError)
    return refusal(cause)


def test_the_active_cap_holds_across_front_ends_and_frees_once_a_task_finishes(
    fleet: Fleet,
) -> None:
    first = send(fleet.urls[0], "capped", "c-1")["result"]["task"]["id"]
    second = send(fleet.urls[1], "capped", "c-2")["result"]["task"]["id"]
    refused = send(fleet.urls[0], "capped")["error"]
    assert refused["code"] == -32029 and "unfinished tasks" in refused["message"]
    assert retry_delay(refused) == ACTIVE_RETRY
    assert send(fleet.urls[1], "capped")["error"]["code"] == -32029
    # A retry of an accepted message makes no task: not refused, not counted.
    assert send(fleet.urls[1], "capped", "c-1")["result"]["task"]["id"] == first
    assert reserved(fleet.store, "capped") == sorted([first, second])

    fleet.stack.start("worker")  # the default agent answers at once
    try:
        for task_id in (first, second):
            wait_for(
                lambda task_id=task_id: _state(fleet.store, task_id) == COMPLETED,
                timeout=60,
                what=f"task {task_id} to complete",
            )
        time.sleep(ACTIVE_RETRY)  # a refused owner's tasks are read again no sooner
        third = send(fleet.urls[0], "capped")["result"]["task"]["id"]
        # The finished ids were dropped as the send found the cap full.
        assert reserved(fleet.store, "capped") == [third]
    finally:
        fleet.stack.stop("worker")


def reserved(store: Store, owner: str) -> list[str]:
    """The reserved ids: those holding the owner's slots, read from the store's limiter (a
    probe no cap admits, given back if it was)."""
    limiter = store.send_limiter()
    assert limiter is not None
    found = limiter.reserve(owner, "probe", 1)
    if found is None:
        limiter.release(owner, "probe")
        return []
    return sorted(found)


def _state(store: Store, task_id: str) -> str | None:
    task = store.get(task_id)
    return task["status"]["state"] if task is not None else None


# --- the embedded server: its synchronous gRPC port, its in-process workers ----


def test_the_embedded_grpc_port_refuses_and_frees_a_slot_when_its_worker_finishes(
    tmp_path: Path,
) -> None:
    grpc_port = free_port()
    limits = tmp_path / "limits.yaml"
    limits.write_text("rated: {rate: 0.1, burst: 1, max_active: 0}\n")
    env = {
        "TOOLNEXUS_RUN": "examples.agents:slow",
        "TOOLNEXUS_GRPC_URL": f"127.0.0.1:{grpc_port}",
        "TOOLNEXUS_GRPC_PORT": str(grpc_port),
        "TOOLNEXUS_API_TOKENS": "active:tok-active,rated:tok-rated",
        "TOOLNEXUS_OWNER_MAX_ACTIVE": "1",
        "TOOLNEXUS_OWNER_LIMITS": str(limits),
    }
    with embedded_server(tmp_path, env), grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
        stub = a2a_pb2_grpc.A2AServiceStub(channel)

        def as_(owner: str) -> list[tuple[str, str]]:
            return [("a2a-version", "1.0"), ("authorization", f"Bearer tok-{owner}")]

        def sent(owner: str, text: str = "0 hi") -> a2a_pb2.SendMessageResponse:
            configuration = a2a_pb2.SendMessageConfiguration(return_immediately=True)
            request = a2a_pb2.SendMessageRequest(
                message=proto_message(text), configuration=configuration
            )
            return stub.SendMessage(request, metadata=as_(owner), timeout=30)

        sent("rated")
        with pytest.raises(grpc.RpcError) as raised:
            sent("rated")
        code, delay = refusal(raised.value)
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED and 9 < delay <= 10

        running = sent("active", "1 zzz").task.id  # a second
        with pytest.raises(grpc.RpcError) as raised:
            sent("active")
        assert refusal(raised.value) == (grpc.StatusCode.RESOURCE_EXHAUSTED, ACTIVE_RETRY)

        def done() -> bool:
            task = stub.GetTask(a2a_pb2.GetTaskRequest(id=running), metadata=as_("active"))
            return bool(task.status.state == a2a_pb2.TaskState.TASK_STATE_COMPLETED)

        wait_for(done, timeout=30, what="the slow task to complete")
        time.sleep(ACTIVE_RETRY)
        assert sent("active").task.id != running
