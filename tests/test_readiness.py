"""/readyz tells the truth about the whole pipeline: the store, the broker,
and the reaper that beat runs (a stopped beat used to be invisible until
tasks piled up in `working`)."""

from __future__ import annotations

import shutil
from pathlib import Path

import requests

from shared import Settings
from shared.stores.file.store import file_store
from tests.support.a2a import readyz, wait_ready
from tests.support.compose import local_stack
from tests.support.polling import wait_for
from tests.test_web_support import PlayingDispatcher, live_server
from web import create_app


def test_ready_only_while_beat_runs(tmp_path: Path) -> None:
    settings = {"TOOLNEXUS_REAP_EVERY": "0.5", "TOOLNEXUS_HEARTBEAT": "0.5"}
    with local_stack(tmp_path, settings) as (_, stack):
        stack.start("web", WEB_CONCURRENCY="1")
        # Wait until the front end answers at all (0 is "nothing answered"),
        # then it must say 503: no reaper has run yet.
        first = wait_for(lambda: readyz(stack.web_url, timeout=5), timeout=60, what="web up")
        assert first == 503
        body = requests.get(f"{stack.web_url}/readyz", timeout=5).json()
        assert body["reaper"] == "the reaper has not run yet: is beat running?"
        stack.start("beat")
        wait_ready(stack.web_url)
        stack.stop("beat")
        # Three missed runs of the reaper (1.5 s) and the front end says so.
        wait_for(lambda: readyz(stack.web_url) == 503, timeout=60, what="503 once beat stopped")
        body = requests.get(f"{stack.web_url}/readyz", timeout=5).json()
        assert body["reaper"].startswith("the reaper last ran") and "beat" in body["reaper"]
        stack.start("beat")
        wait_ready(stack.web_url)


def test_not_ready_when_the_task_directory_is_gone(tmp_path: Path) -> None:
    directory = tmp_path / "tasks"
    store = file_store(directory)
    store.record_beat()
    app = create_app(Settings(), store=store, dispatcher=PlayingDispatcher(store))
    with live_server(app) as (url, _):
        assert readyz(url) == 200
        shutil.rmtree(directory)
        reply = requests.get(f"{url}/readyz", timeout=5)
        assert reply.status_code == 503
        assert reply.json()["store"].startswith("task store unavailable: the task directory")
        assert requests.get(f"{url}/healthz", timeout=5).status_code == 200
