"""The fuzz suite's representative part against the server users run:
gunicorn with web.http.gunicorn_conf and its gevent worker (compose.yaml's web
command, run here as a local process by tests.support.compose), not the
Flask test client or Werkzeug's development server.

Framing (broken request lines, lying lengths and headers) is fuzzed against
the same deployment in tests/test_security_deployment.py. Here: bodies
(random JSON, envelopes with wrong types in every field, deep nesting,
bodies around the size limit, invalid bytes), headers (content types, the
A2A version as header or query), chunked and Content-Length framing, and the
streaming methods, whose replies are either a JSON-RPC error or an event
stream of valid JSON-RPC responses. Afterwards the front end still serves
and every stored task is whole and can still be fulfilled, exactly as the
in-process fuzz checks.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
import requests
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.task import SUBMITTED, WORKING, state_of
from tests.support.compose import LocalStack, local_stack
from tests.support.polling import wait_for
from tests.test_reliability_fuzz import (
    ANY_ID,
    CONTENT_TYPES,
    FUZZ,
    HTTP_BODIES,
    MAX_BODY,
    SEND_PATHS,
    STREAMING,
    VERSION,
    WRONG,
    Target,
    _mutated,
    check_store_whole,
    code_of,
    dialect_headers,
    encode,
    finish,
    http_post,
    make_target,
    request,
    user_message,
    valid_response,
)

pytestmark = pytest.mark.timeout(300)


class BrokerQueue:
    """What the front end queued, read from the broker: the `enqueued` that
    the in-process fuzz's recording dispatcher keeps, oldest first."""

    def __init__(self, broker_url: str, queue: str) -> None:
        self.client = redis.Redis.from_url(broker_url)
        self.queue = queue

    @property
    def enqueued(self) -> list[str]:
        messages = self.client.lrange(self.queue, 0, -1)
        return [json.loads(m)["headers"]["id"] for m in reversed(messages)]  # LPUSHed


@pytest.fixture(params=[False])
def gunicorn(
    tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[tuple[Target, tuple[str, int], LocalStack]]:
    """compose.yaml's web command on a file store (so the test reads what it
    wrote) and a private Redis broker. No worker unless the test asks for
    one (a send stream holds its first event until the agent's first output,
    so streams need one); without one every task stays queued."""
    with_worker = bool(request.param)
    directory = tmp_path / "store"
    overrides = {
        "TOOLNEXUS_MAX_BODY": str(MAX_BODY),
        "TOOLNEXUS_BLOCKING_TIMEOUT": "0.001",
        "TOOLNEXUS_KEEPALIVE": "600",  # a stream with nothing to say stays silent
        # Every send straight to the broker, where `BrokerQueue` reads it: with
        # fair turns and no worker's slots, all but one would wait in the book.
        "TOOLNEXUS_FAIR_SHARE": "false",
    }
    with local_stack(tmp_path, overrides) as (_, stack):
        stack.start("web", WEB_CONCURRENCY="1", TOOLNEXUS_STORE=f"file:{directory}")
        wait_for(lambda: healthy(stack), timeout=60, what=f"gunicorn\n{stack.processes['web']}")
        target = make_target(directory, "over gunicorn (gevent)")
        env = stack.environments["web"]
        target.dispatcher = BrokerQueue(env["TOOLNEXUS_BROKER_URL"], queue_of(env))  # type: ignore[assignment]
        if with_worker:
            stack.start("worker", TOOLNEXUS_STORE=f"file:{directory}")
        yield target, ("127.0.0.1", stack.web_port), stack
        assert stack.processes["web"].alive(), stack.processes["web"].output()[-3000:]


def queue_of(env: dict[str, str]) -> str:
    return env.get("TOOLNEXUS_QUEUE", "toolnexus")


def healthy(stack: LocalStack) -> bool:
    try:
        return requests.get(f"{stack.web_url}/healthz", timeout=2).status_code == 200
    except requests.RequestException:
        return False


def test_bodies_and_headers_over_gunicorn(
    gunicorn: tuple[Target, tuple[str, int], LocalStack],
) -> None:
    target, address, _ = gunicorn

    @settings(FUZZ, max_examples=200)
    @given(
        body=HTTP_BODIES,
        content_type=st.sampled_from(CONTENT_TYPES),
        version=VERSION,
        in_query=st.booleans(),
        chunked=st.booleans(),
    )
    def storm(
        body: bytes, content_type: str, version: str | None, in_query: bool, chunked: bool
    ) -> None:
        headers = dialect_headers(version, in_query=in_query)
        headers["Content-Type"] = content_type
        target.post = lambda data, sent: http_post(address, data, sent, chunked=chunked)
        status, reply = target.reply(body, headers, request_id=ANY_ID)
        assert status == (413 if len(body) > MAX_BODY else 200)
        mimetype = content_type.split(";")[0].strip()
        if status == 200 and mimetype != "application/json" and not mimetype.endswith("+json"):
            assert code_of(reply) == -32005, reply

    storm()
    finish(target)
    target.tally.report()


STREAM_BODIES = st.one_of(
    st.builds(
        lambda method, version: (
            encode(request(method, {"id": "no-such-task"})),
            version,
        ),
        st.sampled_from(sorted(STREAMING)),
        VERSION,
    ),
    st.builds(
        lambda method, value, path, version: (
            encode(_mutated(request(method, {"message": user_message()}), path, value)),
            version,
        ),
        st.sampled_from(["SendStreamingMessage", "message/stream"]),
        WRONG,
        st.sampled_from(SEND_PATHS),
        VERSION,
    ),
)


def check_stream_reply(status: int, mimetype: str, data: bytes) -> None:
    """A JSON-RPC error, or an event stream each of whose events is a valid
    JSON-RPC response (never HTML, never a 5xx)."""
    assert status < 500, (status, data[:300])
    if mimetype.startswith("text/event-stream"):
        events = [line[5:].strip() for line in data.split(b"\n") if line.startswith(b"data:")]
        assert events, data[:300]
        for event in events:
            valid_response(event, ANY_ID)
    else:
        assert mimetype.startswith("application/json"), (status, mimetype, data[:300])
        assert "error" in valid_response(data, ANY_ID)


@pytest.mark.parametrize("gunicorn", [True], indirect=True)
def test_streaming_methods_over_gunicorn(
    gunicorn: tuple[Target, tuple[str, int], LocalStack],
) -> None:
    target, address, stack = gunicorn
    target.post = lambda data, sent: http_post(address, data, sent, chunked=False)

    @settings(FUZZ, max_examples=40)
    @given(case=STREAM_BODIES, chunked=st.booleans(), hang_up=st.booleans())
    def storm(case: tuple[bytes, str | None], chunked: bool, hang_up: bool) -> None:
        body, version = case
        headers = {**dialect_headers(version), "Accept": "text/event-stream"}
        status, mimetype, data = http_post(
            address, body, headers, chunked=chunked, first_event=True, hang_up=hang_up
        )
        target.tally.sent += 1
        if not hang_up:  # one that hangs up at once hears nothing
            check_stream_reply(status, mimetype, data)

    storm()
    # Still serving, and every stored task whole.
    send = request("SendMessage", {"message": user_message("after the streams")}, request_id=1)
    _, reply = target.reply(encode(send), request_id=1)
    assert reply["result"]["history"][0]["parts"][0]["text"] == "after the streams"
    target.dispatcher = NothingQueued()  # type: ignore[assignment]

    # Nothing accepted is lost: every saved task was queued, and the worker
    # takes each out of `submitted`. No beat runs here, so a task saved and
    # never queued would stay `submitted` (nothing resends it).
    def left_submitted() -> list[str]:
        return [i for i, task in target.store.all().items() if state_of(task) == SUBMITTED]

    try:
        wait_for(lambda: not left_submitted(), timeout=90, what="every task to leave submitted")
    except AssertionError:
        raise AssertionError(
            f"saved, never run: {left_submitted()}\n"
            + "\n".join(f"--- {name}\n{p.output()[-6000:]}" for name, p in stack.processes.items())
        ) from None

    # The worker may still be writing the streamed tasks (a temporary file
    # before its rename is no half-written task): check once it holds none.
    def worker_idle() -> bool:
        working = any(state_of(task) == WORKING for task in target.store.all().values())
        writing = any(name.endswith(".tmp") for name in os.listdir(target.store.directory))
        return not working and not writing

    wait_for(worker_idle, timeout=120, what="the worker to be done with every streamed task")
    check_store_whole(target)
    target.tally.report()


class NothingQueued:
    """With a worker running the queue empties: nothing to count there."""

    def __init__(self) -> None:
        self.enqueued: list[str] = []
