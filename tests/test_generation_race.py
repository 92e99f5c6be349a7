"""ifGenerationMatch under a race: two follow-ups expecting the same
generation, sent at once to two front ends (each with its own connections
to the same Redis or PostgreSQL), many times: each time exactly one is
taken and the other is refused with -32010 naming the generation the
winner left. The suite runs 200 trials a store; the 1,000-trial runs are
`slow` (docs/test-suite.md)."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from typing import Any

import pytest
import requests

from shared import Settings
from shared.events import to_state
from shared.store.resolve import resolve_store
from shared.task import INPUT_REQUIRED, WORKING, agent_message, new_task, text_message
from shared.transitions import transition
from tests.support.store_kinds import SHARED, Stores
from tests.test_web_support import NoBroker, live_server
from web import create_app


@pytest.mark.parametrize("trials", [200, pytest.param(1_000, marks=pytest.mark.slow)])
@pytest.mark.parametrize("store_kind", SHARED)  # two front ends on one store
def test_one_of_two_racing_follow_ups_wins_each_time(
    store_kind: str, trials: int, stores: Stores
) -> None:
    url = stores.url(store_kind)
    with ExitStack() as stack:
        fronts = []
        for _ in range(2):
            app = create_app(Settings(), store=resolve_store(url), dispatcher=NoBroker())
            base, _ = stack.enter_context(live_server(app))
            fronts.append(base)
        writer = resolve_store(url)
        sessions = [requests.Session(), requests.Session()]
        pool = stack.enter_context(ThreadPoolExecutor(2))
        tally = {"taken": 0, "refused": 0}
        for trial in range(trials):
            task_id = writer.create(new_task(text_message("user", "go"))).task["id"]
            assert transition(writer, task_id, to_state(WORKING)).applied
            asked = to_state(INPUT_REQUIRED, agent_message("?"))
            assert transition(writer, task_id, asked).applied  # generation 3
            start = threading.Barrier(2)

            def follow_up(
                side: int, task_id: str = task_id, start: Any = start, trial: int = trial
            ) -> Any:
                message = {
                    "role": "ROLE_USER",
                    "messageId": f"m-{trial}-{side}",
                    "taskId": task_id,
                    "parts": [{"text": f"answer {side}"}],
                }
                configuration = {"ifGenerationMatch": "3", "returnImmediately": True}
                body = {
                    "jsonrpc": "2.0",
                    "id": side,
                    "method": "SendMessage",
                    "params": {"message": message, "configuration": configuration},
                }
                start.wait(10)
                sent = sessions[side].post(
                    f"{fronts[side]}/", json=body, headers={"A2A-Version": "1.1"}, timeout=30
                )
                return sent.json()

            replies = list(pool.map(follow_up, (0, 1)))
            taken = [reply for reply in replies if "result" in reply]
            refused = [reply for reply in replies if "error" in reply]
            assert len(taken) == 1 and len(refused) == 1, replies
            assert taken[0]["result"]["task"]["generation"] == "4"
            error = refused[0]["error"]
            assert error["code"] == -32010, error
            assert error["data"][0]["metadata"]["currentGeneration"] == "4"
            kept = writer.get(task_id)
            assert kept is not None and kept["generation"] == 4
            # Exactly the winner's answer is in the history.
            answers = [m for m in kept.get("history", []) if m.get("role") == "user"][1:]
            assert [m["messageId"] for m in answers] == [f"m-{trial}-{taken[0]['id']}"]
            tally["taken"] += 1
            tally["refused"] += 1
        assert tally == {"taken": trials, "refused": trials}
