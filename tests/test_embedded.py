"""`toolnexus-serve`: the whole service in one process, over real HTTP."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from shared.stores.file.store import file_store
from shared.task import new_id, new_task, state_of, text_message
from tests.support.agents import runs_of
from tests.support.polling import wait_for
from tests.support.redis_server import free_port
from tests.support.shortcuts import with_status
from worker.embedded import main, parse_args, pool_note, settings_from

ROOT = Path(__file__).resolve().parent.parent


def command() -> list[str]:
    script = shutil.which("toolnexus-serve")
    return [script] if script else [sys.executable, "-m", "worker.embedded"]


class Served:
    def __init__(self, process: subprocess.Popen[str], url: str) -> None:
        self.process = process
        self.url = url

    def rpc(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
        reply = requests.post(self.url, json=body, timeout=10)
        assert reply.status_code == 200, reply.text
        payload = reply.json()
        assert "result" in payload, payload
        return dict(payload["result"])

    def send(self, text: str, **extra: Any) -> dict[str, Any]:
        parts = [{"kind": "text", "text": text}]
        message = {
            "kind": "message",
            "role": "user",
            "messageId": new_id(),
            "parts": parts,
            **extra,
        }
        return self.rpc("SendMessage", {"message": message})

    def wait_state(self, task_id: str, state: str) -> dict[str, Any]:
        def probe() -> dict[str, Any] | None:
            task = self.rpc("GetTask", {"id": task_id})
            return task if state_of(task) == state else None

        return wait_for(probe, timeout=15, what=f"task {task_id} {state}")

    def stop(self, signum: int) -> tuple[int, str]:
        self.process.send_signal(signum)
        _, stderr = self.process.communicate(timeout=20)
        return self.process.returncode, stderr


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[..., Served]]:
    started: list[subprocess.Popen[str]] = []

    def start(*args: str, **env: str) -> Served:
        port = free_port()
        clean = {k: v for k, v in os.environ.items() if not k.startswith("TOOLNEXUS_")}
        process = subprocess.Popen(
            [*command(), "--port", str(port), *args],
            cwd=tmp_path,
            env={**clean, **env, "PYTHONPATH": str(ROOT)},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        started.append(process)
        host = args[args.index("--host") + 1] if "--host" in args else "127.0.0.1"
        served = Served(process, f"http://{host}:{port}/")

        def healthy() -> bool:
            assert process.poll() is None, process.communicate()[1]
            try:
                return requests.get(served.url + "healthz", timeout=1).status_code == 200
            except (requests.ConnectionError, requests.Timeout):
                return False  # not listening yet, or still starting on a busy machine

        wait_for(healthy, timeout=90, what="toolnexus-serve to answer")
        return served

    yield start
    for process in started:
        if process.poll() is None:
            process.kill()
            process.communicate(timeout=10)


def test_serves_a_task_end_to_end_and_stops_on_ctrl_c(serve: Callable[..., Served]) -> None:
    served = serve()

    sent = served.send("hello")
    assert state_of(sent) == "submitted"  # at once, before the work is done
    task = served.wait_state(sent["id"], "completed")

    assert task["artifacts"][0]["parts"][0]["text"] == "ran: hello"
    returncode, stderr = served.stop(signal.SIGINT)
    assert returncode == 0, stderr
    assert "toolnexus-serve: stopped" in stderr
    assert "Traceback" not in stderr


def test_readyz_names_the_in_process_workers_not_a_broker(serve: Callable[..., Served]) -> None:
    ready = requests.get(serve().url + "readyz", timeout=10)
    assert ready.status_code == 200
    assert ready.json() == {"status": "ready", "store": "ok", "workers": "ok", "reaper": "ok"}


def test_file_store_input_required_then_continue_and_sigterm(
    serve: Callable[..., Served], tmp_path: Path
) -> None:
    served = serve("--store", "file:./tasks", "--run", "examples.agents:ask_back")

    sent = served.send("hi")
    waiting = served.wait_state(sent["id"], "input-required")
    assert waiting["status"]["message"]["parts"][0]["text"] == "What is your name?"
    served.send("Ada", taskId=sent["id"], contextId=sent["contextId"])
    task = served.wait_state(sent["id"], "completed")

    assert task["artifacts"][0]["parts"][0]["text"] == "Hello, Ada!"
    assert (tmp_path / "tasks" / f"{sent['id']}.json").exists()  # durable, relative to cwd
    returncode, stderr = served.stop(signal.SIGTERM)
    assert returncode == 0, stderr


def test_cancel_of_a_running_task_stays_canceled(serve: Callable[..., Served]) -> None:
    served = serve("--run", "examples.agents:slow", TOOLNEXUS_CONCURRENCY="1")
    sent = served.send("1 sleepy")
    served.wait_state(sent["id"], "working")

    canceled = served.rpc("CancelTask", {"id": sent["id"]})
    assert state_of(canceled) == "canceled"
    # One worker thread: once the next task is done, the canceled run has
    # ended too (a thread cannot be stopped) and tried to save its result.
    after = served.send("0.01 next")
    served.wait_state(after["id"], "completed")

    assert state_of(served.rpc("GetTask", {"id": sent["id"]})) == "canceled"
    assert served.stop(signal.SIGINT)[0] == 0


def test_a_restart_reaps_what_was_running_and_runs_what_was_queued(
    serve: Callable[..., Served], tmp_path: Path
) -> None:
    """What a file store holds after a crash: a task that was running (its
    heartbeat an hour old) and one accepted but never started."""
    store = file_store(tmp_path / "tasks", clock=lambda: time.time() - 3600)
    orphan = with_status(new_task(text_message("user", "x")), "working")
    store.save(orphan)
    queued = store.save(new_task(text_message("user", "still wanted")))

    served = serve(
        "--store",
        "file:./tasks",
        TOOLNEXUS_HEARTBEAT="0.1",
        TOOLNEXUS_STALE_AFTER="1",
        TOOLNEXUS_REAP_EVERY="0.2",
    )
    reaped = served.wait_state(orphan["id"], "failed")
    done = served.wait_state(queued["id"], "completed")

    assert reaped["status"]["message"]["parts"][0]["text"] == "worker lost: no heartbeat for 1 s"
    assert done["artifacts"][0]["parts"][0]["text"] == "ran: still wanted"
    assert served.stop(signal.SIGINT)[0] == 0


def test_a_port_in_use_stops_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]

        assert main(["--port", str(port)]) == 2

    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    said = f"port {port} on 127.0.0.1 is in use (another toolnexus-serve?)"
    assert lines[0] == f"toolnexus-serve: {said}"


@pytest.mark.parametrize(
    ("args", "variable"),
    [
        (["--store", "bogus"], "TOOLNEXUS_STORE"),
        (["--run", "examples.agents:nope"], "TOOLNEXUS_RUN"),
        (["--port", "http"], "TOOLNEXUS_PORT"),
    ],
)
def test_a_bad_option_stops_with_one_line_naming_the_variable(
    args: list[str], variable: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(args) == 2

    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("toolnexus-serve: ")
    assert variable in lines[0]


def test_host_and_skills_options_take_effect(serve: Callable[..., Served]) -> None:
    served = serve("--host", "127.0.0.2", "--skills", str(ROOT / "examples" / "skills"))

    card = requests.get(served.url + ".well-known/agent-card.json", timeout=5).json()
    assert card["supportedInterfaces"][0]["url"] == served.url
    assert [skill["id"] for skill in card["skills"]] == ["hello-world"]
    with pytest.raises(requests.ConnectionError):
        requests.get(served.url.replace("127.0.0.2", "127.0.0.1") + "healthz", timeout=2)
    assert served.stop(signal.SIGTERM)[0] == 0


def test_options_override_their_variables_and_the_rest_come_from_the_environment() -> None:
    env = {"TOOLNEXUS_PORT": "9000", "TOOLNEXUS_STORE": "file:/x", "TOOLNEXUS_NAME": "named"}
    options = ["--port", "9100", "--run", "examples.agents:fail", "--host", "0.0.0.0"]

    settings = settings_from(parse_args([*options, "--skills", "/skills"]), env)

    assert (settings.port, settings.run) == (9100, "examples.agents:fail")
    assert (settings.host, settings.skills) == ("0.0.0.0", "/skills")
    assert settings.store == "file:/x"
    assert settings.name == "named"
    assert settings_from(parse_args([]), {}).port == 8080


def test_idle_connections_are_closed_after_the_idle_timeout(serve: Callable[..., Served]) -> None:
    served = serve(TOOLNEXUS_IDLE_TIMEOUT="0.5")
    host, port = served.url.removeprefix("http://").rstrip("/").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as idle:
        assert idle.recv(1) == b""  # closed by the server, not by this 10 s timeout
    with socket.create_connection((host, int(port)), timeout=10) as slow:
        slow.sendall(b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # and then nothing more
        received = b""
        while chunk := slow.recv(65536):  # until the server closes it
            received += chunk
        assert b"Traceback" not in received
    assert served.stop(signal.SIGTERM)[0] == 0


def test_shutdown_drains_the_queue_without_running_it(
    serve: Callable[..., Served], tmp_path: Path
) -> None:
    # One worker thread, taken by a running task; five more queued behind it.
    # On SIGTERM the running one gets its grace, the queued ones are never
    # run and stay `submitted` in the file store, and the next start runs them.
    runs = str(tmp_path / "runs")
    env = {
        "TOOLNEXUS_RUN": "tests.support.agents:scripted",
        "TOOLNEXUS_CONCURRENCY": "1",
        "SCRIPTED_RUNS": runs,
    }
    served = serve("--store", "file:./tasks", **env)
    running = served.send("sleep 2 holding the only thread")
    wait_for(lambda: runs_of(runs, "sleep 2 holding the only thread"), what="the first to run")
    queued = [served.send(f"queued-{n}")["id"] for n in range(5)]

    code, stderr = served.stop(signal.SIGTERM)

    assert code == 0, stderr
    store = file_store(tmp_path / "tasks")
    assert state_of(store.get(running["id"])) == "completed"  # finished within its grace
    for n, task_id in enumerate(queued):
        assert runs_of(runs, f"queued-{n}") == []
        assert state_of(store.get(task_id)) == "submitted"
    again = serve("--store", "file:./tasks", **env)
    for n, task_id in enumerate(queued):
        assert again.wait_state(task_id, "completed")["artifacts"][0]["parts"][0]["text"] == (
            f"ran: queued-{n}"
        )
    assert again.stop(signal.SIGINT)[0] == 0


def test_a_pool_setting_is_said_to_have_no_effect_here(serve: Callable[..., Served]) -> None:
    served = serve(TOOLNEXUS_POOL="asyncio", TOOLNEXUS_CONCURRENCY="7")
    task = served.wait_state(served.send("hello")["id"], "completed")
    assert task["artifacts"][0]["parts"][0]["text"] == "ran: hello"
    returncode, stderr = served.stop(signal.SIGTERM)
    assert returncode == 0, stderr
    (line,) = [line for line in stderr.splitlines() if "TOOLNEXUS_POOL" in line]
    assert "TOOLNEXUS_POOL=asyncio has no effect in the embedded server" in line
    assert "one of its 7 in-process workers" in line
    assert "WARNING" in line


def test_no_pool_note_without_the_setting() -> None:
    assert pool_note({"TOOLNEXUS_CONCURRENCY": "7"}, 7) is None
