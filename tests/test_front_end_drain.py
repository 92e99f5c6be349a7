"""A front end SIGTERMed with streams open: the path `docker compose down`, a
rolling deploy and a Kubernetes node drain take.

Two front ends (compose.yaml's own command: gunicorn with gevent workers)
share one Redis with an I/O worker running `examples.agents:countdown`. A
hundred SendStreamingMessage streams are open on front end A when it is
SIGTERMed: A ends every stream at once (each client reads the end of its
stream, not a cut connection) and exits while the tasks still run, though
its graceful timeout is longer than they are; each client resumes on front
end B with SubscribeToTask and the Last-Event-ID it saw, and what it read
from both adds up to every event of its task, once each and in order, to
`completed`. The embedded server ends its streams the same way, and a
stream opened while a process ends its streams ends after its first event.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import requests

from shared.settings import Settings
from shared.stores.memory.store import memory_store
from shared.task import TERMINAL_STATES, state_of
from tests.support.compose import LocalStack, local_stack
from tests.support.embedded import ROOT, command
from tests.support.polling import wait_for
from tests.support.ports import free_port
from tests.support.sse import Event, Stream
from tests.test_web_support import live_server
from web import create_app
from web.http.disconnects import end_streams
from worker.engine.agent import load_agent
from worker.engine.inprocess import InProcessDispatcher

pytestmark = [pytest.mark.timeout(180)]

STREAMS = 100
# Twenty-five steps of 0.4 s: each task outlives front end A's drain by seconds.
TEXT = "0.4 25"
SETTINGS = {"TOOLNEXUS_RUN": "examples.agents:countdown"}
# Far beyond the drain, far below the graceful timeout A is given (65 s).
EXIT_DEADLINE = 20.0
COMPLETED = "TASK_STATE_COMPLETED"


def user(text: str) -> dict[str, Any]:
    return {"role": "ROLE_USER", "messageId": str(uuid.uuid4()), "parts": [{"text": text}]}


def task_id_of(event: Event) -> str:
    result = event.data["result"]
    return str(result["task"]["id"] if "task" in result else next(iter(result.values()))["taskId"])


def final_state(event: Event) -> str | None:
    """The state a terminal status update ends its task in (None for any other event)."""
    update = event.data.get("result", {}).get("statusUpdate")
    state = update["status"]["state"] if update else None
    return state if state in (COMPLETED, "TASK_STATE_FAILED", "TASK_STATE_CANCELED") else None


@dataclass
class Client:
    """One streaming client: a send stream on one front end and, when that
    stream ends before its task does, a resumed one on the other."""

    first: threading.Event = field(default_factory=threading.Event)
    seen: list[Event] = field(default_factory=list)  # the first stream's, then the resumed one's
    from_first: int = 0  # how many of `seen` the first stream carried
    comments: list[str] = field(default_factory=list)  # the first stream's comment lines
    error: Exception | None = None

    def run(self, url: str, resume_at: str | None) -> None:
        try:
            stream = Stream(url, "SendStreamingMessage", {"message": user(TEXT)})
            for event in stream:
                self.seen.append(event)
                self.first.set()
            self.from_first, self.comments = len(self.seen), stream.comment_lines
            if resume_at is None or not self.seen or final_state(self.seen[-1]):
                return
            params = {"id": task_id_of(self.seen[0])}
            last = self.seen[-1].id
            self.seen.extend(Stream(resume_at, "SubscribeToTask", params, last_event_id=last))
        except Exception as error:  # the stream was cut, or the resume failed
            self.error = error
        finally:
            self.first.set()


def started(
    count: int, url: str, resume_at: str | None
) -> tuple[list[Client], list[threading.Thread]]:
    """`count` clients streaming from `url`, once each has its first event."""
    clients = [Client() for _ in range(count)]
    threads = [
        threading.Thread(target=client.run, args=(url, resume_at), daemon=True)
        for client in clients
    ]
    for thread in threads:
        thread.start()
    wait_for(
        lambda: all(client.first.is_set() for client in clients),
        timeout=90,
        what="every stream's first event",
    )
    assert [client.error for client in clients if client.error] == []
    assert all(client.seen for client in clients), "a stream ended without an event"
    return clients, threads


def ended(threads: list[threading.Thread]) -> None:
    for thread in threads:
        thread.join(60)
    assert not any(thread.is_alive() for thread in threads), "a client is still reading"


def healthy(url: str) -> bool:
    try:
        return requests.get(f"{url}/healthz", timeout=2).status_code == 200
    except requests.RequestException:
        return False


def closing_line(client: Client) -> str:
    return f": closing: resume from {client.seen[client.from_first - 1].id} elsewhere"


@pytest.fixture
def front_ends(tmp_path: Path) -> Iterator[tuple[LocalStack, str, str]]:
    with local_stack(tmp_path, SETTINGS) as (_, stack):
        second = free_port()
        # Graceful timeout 65 s: longer than any task here, so A exiting
        # while they run is the drain's doing, not the timeout's.
        stack.start("web", WEB_CONCURRENCY="1", TOOLNEXUS_BLOCKING_TIMEOUT="60")
        stack.start(
            "web",
            as_name="web-b",
            WEB_CONCURRENCY="1",
            GUNICORN_CMD_ARGS=f"--bind=127.0.0.1:{second}",
        )
        stack.start("worker", TOOLNEXUS_POOL="asyncio", TOOLNEXUS_CONCURRENCY=str(STREAMS))
        urls = stack.web_url, f"http://127.0.0.1:{second}"
        for url in urls:
            wait_for(lambda url=url: healthy(url), timeout=60, what=f"{url} to answer")
        yield stack, *urls


def test_a_sigtermed_front_end_ends_its_streams_and_every_client_resumes_elsewhere(
    front_ends: tuple[LocalStack, str, str],
) -> None:
    stack, url_a, url_b = front_ends
    clients, threads = started(STREAMS, url_a, resume_at=url_b)
    task_ids = [task_id_of(client.seen[0]) for client in clients]
    web_a = stack.processes["web"].process

    os.kill(web_a.pid, signal.SIGTERM)
    try:
        code = web_a.wait(EXIT_DEADLINE)
    except subprocess.TimeoutExpired:
        pytest.fail(f"front end A still runs {EXIT_DEADLINE:g} s after SIGTERM")
    store = stack.open_store()
    running = [
        task_id for task_id in task_ids if state_of(store.get(task_id)) not in TERMINAL_STATES
    ]

    assert code == 0
    # A did not wait for its streams' tasks to end (its graceful timeout would have let it).
    assert running, "every task had ended by the time front end A exited"
    assert "graceful timeout" not in stack.processes["web"].output()
    ended(threads)
    assert [client.error for client in clients if client.error] == []
    for client in clients:
        ids = [event.id for event in client.seen]
        assert ids == list(range(1, len(ids) + 1)), ids  # nothing missed, nothing repeated
        assert final_state(client.seen[-1]) == COMPLETED
        assert {task_id_of(event) for event in client.seen} == {task_id_of(client.seen[0])}
    cut = [client for client in clients if client.from_first < len(client.seen)]
    assert len(cut) >= len(running)  # a stream of each task still running was ended, and resumed
    assert all(client.comments[-1] == closing_line(client) for client in cut)


def test_the_embedded_server_ends_its_streams_at_once_on_sigterm(tmp_path: Path) -> None:
    port = free_port()
    clean = {k: v for k, v in os.environ.items() if not k.startswith("TOOLNEXUS_")}
    served = subprocess.Popen(
        [*command(), "--port", str(port), "--run", "examples.agents:countdown", "--grace", "0"],
        cwd=tmp_path,
        env={**clean, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: healthy(url), timeout=90, what="toolnexus-serve to answer")
        clients, threads = started(5, url, resume_at=None)

        served.send_signal(signal.SIGTERM)
        try:
            _, stderr = served.communicate(timeout=EXIT_DEADLINE)
        except subprocess.TimeoutExpired:
            pytest.fail(f"toolnexus-serve still runs {EXIT_DEADLINE:g} s after SIGTERM")
    finally:
        if served.poll() is None:
            served.kill()
            served.communicate(timeout=10)

    assert served.returncode == 0, stderr
    assert "Traceback" not in stderr
    ended(threads)
    assert [client.error for client in clients if client.error] == []
    for client in clients:
        assert final_state(client.seen[-1]) is None  # its task was still running
        assert client.comments[-1] == closing_line(client)


def test_a_stream_opened_while_the_process_ends_its_streams_ends_after_its_first_event() -> None:
    settings = Settings(run="examples.agents:countdown")
    store = memory_store()
    dispatcher = InProcessDispatcher(store, load_agent(settings), settings, threads=2)
    app = create_app(settings, store=store, dispatcher=dispatcher)
    try:
        with live_server(app) as (url, _):
            (client,), threads = started(1, url, resume_at=None)
            end_streams(app)
            ended(threads)
            assert client.error is None
            assert final_state(client.seen[-1]) is None
            assert client.comments[-1] == closing_line(client)

            later = Stream(url, "SubscribeToTask", {"id": task_id_of(client.seen[0])})
            (snapshot,) = list(later)
            assert "task" in snapshot.data["result"]
            assert later.comment_lines[-1] == f": closing: resume from {snapshot.id} elsewhere"
    finally:
        dispatcher.close(timeout=0)
