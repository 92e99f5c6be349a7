"""Fair turns across owners on a real fleet: one owner's flood does not
starve another.

Owner A sends 2,000 tasks at once; owner B then sends 20. Two workers (one
prefork slot each) run `scripted`, which logs each call's text as it starts
(`SCRIPTED_RUNS`), so the file is the order in which the fleet started the
tasks. With fair share (the default) every B task starts long before A's
backlog drains: after B has sent, the workers alternate between the two
owners, so A starts at most one task per B task, plus what was already in
flight when B's tasks arrived (the window: each worker's slots and one
message each). With fair share off the same run shows B behind A's whole
backlog: many times that many A tasks start and no B task does.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.support.a2a import send_request
from tests.support.agents import scripted_fleet
from tests.support.compose import LocalStack, local_stack
from tests.support.polling import wait_for

TOKENS = {"a": "tok-a-flood", "b": "tok-b-small"}
FLOOD, SMALL = 2_000, 20
WORKERS, SLOTS = 2, 1  # two worker processes, one prefork slot each
AGENT_SECONDS = 0.05
# In flight when B's tasks arrive, at most: every slot's task and one message a worker.
WINDOW = WORKERS * SLOTS + WORKERS
# A tasks that may start between B's send and B's last start with fair turns:
# one per B task (the owners alternate), what was in flight, and one turn of
# slack per worker for a B task that arrives just after a take.
FAIR_BOUND = SMALL + WINDOW + WORKERS


def _send(session: requests.Session, url: str, token: str, text: str) -> str:
    reply: dict[str, Any] = session.post(
        f"{url}/", json=send_request(text), headers={"Authorization": f"Bearer {token}"}, timeout=30
    ).json()
    assert "result" in reply, reply
    return str(reply["result"]["id"])


def _send_all(url: str, token: str, texts: list[str], threads: int) -> list[str]:
    sessions = [requests.Session() for _ in range(threads)]

    def one(index: int) -> str:
        return _send(sessions[index % threads], url, token, texts[index])

    with ThreadPoolExecutor(threads) as pool:
        return list(pool.map(one, range(len(texts))))


def _starts(runs: Path) -> list[str]:
    """The texts of the calls started so far, in the order they started."""
    if not runs.exists():
        return []
    lines = runs.read_text().splitlines()
    return [line.split()[2] for line in lines if line.startswith("sleep ")]


# The FIFO run is the control (a flood does starve the small owner without
# fair turns, so the fair run's bound can fail): opt-in, `-m slow`.
@pytest.fixture(params=[True, pytest.param(False, marks=pytest.mark.slow)], ids=["fair", "fifo"])
def fleet(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[LocalStack, Path, bool]]:
    fair: bool = request.param
    runs = tmp_path / "runs.log"
    settings = {
        **scripted_fleet(runs, stale_after=30),
        "TOOLNEXUS_CONCURRENCY": str(SLOTS),
        "TOOLNEXUS_API_TOKENS": ",".join(f"{who}:{token}" for who, token in TOKENS.items()),
        "TOOLNEXUS_FAIR_SHARE": "true" if fair else "false",
    }
    with local_stack(tmp_path, settings) as (_, stack):
        stack.start("web")
        for n in range(WORKERS):
            stack.start("worker", as_name=f"worker{n}", args=[f"--hostname=w{n}@%h"])
        wait_for(lambda: _answers(stack.web_url), timeout=60, what="web to answer")
        yield stack, runs, fair


def _answers(url: str) -> bool:
    try:
        return requests.get(f"{url}/healthz", timeout=2).status_code == 200
    except (requests.ConnectionError, requests.Timeout):
        return False


def test_a_small_owner_is_not_starved_by_a_flood(fleet: tuple[LocalStack, Path, bool]) -> None:
    stack, runs, fair = fleet
    # The workers are up (each logs its first call): a probe task of A's runs.
    _send(requests.Session(), stack.web_url, TOKENS["a"], f"sleep 0 probe-{uuid.uuid4().hex}")
    wait_for(lambda: _starts(runs) or None, timeout=60, what="a worker to run a task")

    flood = [f"sleep {AGENT_SECONDS} A-{n}" for n in range(FLOOD)]
    _send_all(stack.web_url, TOKENS["a"], flood, threads=8)
    small = [f"sleep {AGENT_SECONDS} B-{n}" for n in range(SMALL)]
    _send_all(stack.web_url, TOKENS["b"], small, threads=SMALL)
    # Counted once every B task is in: on a loaded machine B's sends take a
    # while, and A's tasks start meanwhile, before there is anything to share.
    started_before_b = sum(text.startswith("A-") for text in _starts(runs))

    if fair:
        order = wait_for(lambda: _all_b_started(runs), timeout=120, what="every B task to start")
        last_b = max(index for index, text in enumerate(order) if text.startswith("B-"))
        a_started = sum(text.startswith("A-") for text in order[: last_b + 1])
        between = a_started - started_before_b
        assert between <= FAIR_BOUND, (between, FAIR_BOUND)
        assert a_started < FLOOD  # A's backlog had not drained
    else:
        # Wait until far more A tasks than the fair bound started after B sent.
        enough = started_before_b + 4 * FAIR_BOUND
        order = wait_for(
            lambda: _a_started_at_least(runs, enough), timeout=120, what=f"{enough} A starts"
        )
        assert not [text for text in order if text.startswith("B-")]


def _all_b_started(runs: Path) -> list[str] | None:
    order = _starts(runs)
    return order if sum(text.startswith("B-") for text in order) == SMALL else None


def _a_started_at_least(runs: Path, count: int) -> list[str] | None:
    order = _starts(runs)
    return order if sum(text.startswith("A-") for text in order) >= count else None


def test_an_owners_running_cap_holds_across_the_fleet(tmp_path: Path) -> None:
    """TOOLNEXUS_OWNER_MAX_RUNNING=1 on two workers with two slots each: A's
    tasks never run two at once (their working -> completed spans, as the
    store stamped them, never overlap), while B's run beside them."""
    runs = tmp_path / "runs.log"
    settings = {
        **scripted_fleet(runs, stale_after=30),
        "TOOLNEXUS_CONCURRENCY": "2",
        "TOOLNEXUS_API_TOKENS": ",".join(f"{who}:{token}" for who, token in TOKENS.items()),
        "TOOLNEXUS_OWNER_MAX_RUNNING": "1",
    }
    with local_stack(tmp_path, settings) as (_, stack):
        stack.start("web")
        for n in range(WORKERS):
            stack.start("worker", as_name=f"worker{n}", args=[f"--hostname=w{n}@%h"])
        wait_for(lambda: _answers(stack.web_url), timeout=60, what="web to answer")
        store = stack.open_store()
        a_ids = _send_all(stack.web_url, TOKENS["a"], ["sleep 0.2 A"] * 6, threads=6)
        b_ids = _send_all(stack.web_url, TOKENS["b"], ["sleep 0.2 B"] * 3, threads=3)

        def spans(ids: list[str]) -> list[tuple[float, float]] | None:
            found = []
            for task_id in ids:
                task = store.get(task_id)
                if task is None or task["status"]["state"] != "completed":
                    return None
                found.append(_span(store, task_id))
            return sorted(found)

        a_spans = wait_for(lambda: spans(a_ids), timeout=90, what="A's tasks to complete")
        b_spans = wait_for(lambda: spans(b_ids), timeout=90, what="B's tasks to complete")
    for (_, ended), (began, _) in pairwise(a_spans):
        assert began >= ended, a_spans  # one A task at a time
    # B ran while A was running: its first task began before A's last one ended.
    assert b_spans[0][0] < a_spans[-1][1], (a_spans, b_spans)


def _span(store: Any, task_id: str) -> tuple[float, float]:
    """When the task began working and when it completed, as the store stamped them."""
    stamps: dict[str, float] = {}
    for _, event in store.events(task_id, 0):
        status = event.get("status") if event.get("kind") == "status-update" else None
        if status and status.get("state") in ("working", "completed"):
            stamps[status["state"]] = datetime.fromisoformat(
                status["timestamp"].replace("Z", "+00:00")
            ).timestamp()
    return stamps["working"], stamps["completed"]
