"""The history checker finds each anomaly it names, and nothing in a clean history.

A checker that cannot fail proves nothing: each case below breaks one
promise of a small, clean history (one message, its stream, a listing, a
webhook) the way a faulty fleet would, and the checker must name exactly
that kind.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.support.history import History, Op, check

TEXT = "sleep 0.1 send-0-0"
RESULT = "ran: send-0-0"


@dataclass
class Case:
    history: History = field(default_factory=History)
    final: dict[str, dict[str, Any] | None] = field(default_factory=dict)
    runs: Counter[str] = field(default_factory=Counter)
    deliveries: dict[str, list[tuple[int, str, float]]] = field(default_factory=dict)
    attempts: int = 1

    def add(self, kind: str, start: float, end: float, ok: bool = True, **value: Any) -> Op:
        op = Op("client", kind, start, end, ok, value)
        self.history.ops.append(op)
        return op

    def anomalies(self) -> set[str]:
        texts = [*self.history.acknowledged().values(), *self.history.replies().values()]
        expected = {text: "ran: " + text.split(" ", 2)[2] for text in texts}
        return set(
            check(self.history, self.final, self.runs, expected, self.deliveries, self.attempts)
        )


def task(state: str, result: str = RESULT) -> dict[str, Any]:
    return {
        "id": "t1",
        "status": {"state": state},
        "artifacts": [{"parts": [{"kind": "text", "text": result}]}],
    }


def send(message_id: str = "m1", task_id: str = "t1", **value: Any) -> dict[str, Any]:
    return {
        "message_id": message_id,
        "text": TEXT,
        "task_id": task_id,
        "acks": [task_id],
        "hook": "/hook/1",
        **value,
    }


def clean() -> Case:
    case = Case()
    case.add("send", 0.0, 1.0, **send())
    case.add("get", 2.0, 2.1, task_id="t1", state="working")
    case.add("get", 5.0, 5.1, task_id="t1", state="completed")
    events = [(1, "task", "submitted"), (2, "status-update", "working")]
    case.add("stream", 0.0, 4.0, task_id="t1", events=[*events, (3, "status-update", "completed")])
    case.add("list", 3.0, 3.5, ids=["t1", "t0"])
    case.final["t1"] = task("completed")
    case.runs[TEXT] = 1
    case.deliveries["/hook/1"] = [(1, "submitted", 1.5), (2, "working", 2.0), (3, "completed", 4.0)]
    return case


def test_a_clean_history_has_no_anomaly() -> None:
    assert clean().anomalies() == set()


def _doubled(case: Case) -> None:
    case.add("send", 6.0, 7.0, **send(task_id="t2", hook=None))
    case.final["t2"] = task("completed")


def _reply_elsewhere(case: Case) -> None:
    case.history.ops[0].value["replied"] = ["t9"]


def _ran_too_often(case: Case) -> None:
    case.runs[TEXT] = 2


def _attempts_miscounted(case: Case) -> None:
    case.attempts = 3
    case.runs[TEXT] = 2  # ran twice, yet the task records one attempt


def _failed_with_attempts_left(case: Case) -> None:
    case.attempts = 3
    failed = task("failed")
    failed["status"]["message"] = {
        "role": "agent",
        "parts": [{"kind": "text", "text": "worker lost: no heartbeat for 3 s"}],
    }
    case.final.update(t1=failed)


def _progress_repeated(case: Case) -> None:
    done = case.final["t1"]
    assert done is not None
    said = [{"role": "agent", "parts": [{"kind": "text", "text": "step 1 of 4"}]}] * 2
    done["history"] = [{"role": "user", "parts": [{"kind": "text", "text": TEXT}]}, *said]


def _without_a_run(case: Case) -> None:
    case.runs[TEXT] = 0


def _terminal_changed(case: Case) -> None:
    case.add("get", 6.0, 6.1, task_id="t1", state="working")


def _stream_gap(case: Case) -> None:
    case.history.ops[3].value["events"][2] = (4, "status-update", "completed")


def _stream_end(case: Case) -> None:
    case.history.ops[3].value["events"].pop()


def _list_doubled(case: Case) -> None:
    case.history.ops[4].value["ids"].append("t1")


def _webhook_reordered(case: Case) -> None:
    hits = case.deliveries["/hook/1"]
    hits[0], hits[1] = hits[1], hits[0]


def _webhook_after_delete(case: Case) -> None:
    case.add("unhook", 1.2, 1.4, hook="/hook/1", task_id="t1")


def _failed_by_broker(case: Case) -> None:
    failed = task("failed")
    failed["status"]["message"] = {
        "role": "agent",
        "parts": [{"kind": "text", "text": "broker unavailable: the task could not be queued"}],
    }
    case.final.update(t1=failed)


def _event_number_reused(case: Case) -> None:
    case.deliveries["/hook/1"][1] = (2, "input-required", 2.0)


BREAKS: dict[str, Callable[[Case], None]] = {
    "doubled": _doubled,
    "reply-elsewhere": _reply_elsewhere,
    "lost": lambda case: case.final.update(t1=None),
    "stuck": lambda case: case.final.update(t1=task("working")),
    "failed-by-broker": _failed_by_broker,
    "ran-too-often": _ran_too_often,
    "attempts-miscounted": _attempts_miscounted,
    "failed-with-attempts-left": _failed_with_attempts_left,
    "progress-repeated": _progress_repeated,
    "completed-without-a-run": _without_a_run,
    "wrong-result": lambda case: case.final.update(t1=task("completed", "ran: another")),
    "terminal-changed": _terminal_changed,
    "stream-gap": _stream_gap,
    "stream-end": _stream_end,
    "list-skipped": lambda case: case.history.ops[4].value.update(ids=["t0"]),
    "list-doubled": _list_doubled,
    "webhook-unheard": lambda case: case.deliveries["/hook/1"].pop(),
    "webhook-wrong-end": lambda case: case.deliveries["/hook/1"].append((4, "failed", 4.5)),
    "webhook-reordered": _webhook_reordered,
    "webhook-after-delete": _webhook_after_delete,
    "event-number-reused": _event_number_reused,
}

# A break may show as a second kind too (a task read as working after it
# completed is also stuck), never as a kind unrelated to it.
ALSO = {
    "stuck": {"stream-end", "terminal-changed"},
    # a task seen completed, then failed: its stream, reads and webhook disagree too
    "failed-by-broker": {"stream-end", "terminal-changed", "webhook-unheard", "webhook-wrong-end"},
    "failed-with-attempts-left": {
        "stream-end",
        "terminal-changed",
        "webhook-unheard",
        "webhook-wrong-end",
    },
    # one attempt allowed, two runs: the task records one too
    "ran-too-often": {"attempts-miscounted"},
}


@pytest.mark.parametrize("kind", sorted(BREAKS))
def test_each_broken_promise_is_found_by_its_name(kind: str) -> None:
    case = clean()
    BREAKS[kind](case)
    found = case.anomalies()
    assert kind in found, found
    assert found == {kind, *ALSO.get(kind, ())}, found


def test_a_deleted_webhook_need_not_hear_the_end_and_may_get_the_post_in_flight() -> None:
    case = clean()
    case.add("unhook", 2.5, 3.0, hook="/hook/1", task_id="t1")
    case.deliveries["/hook/1"] = [(1, "submitted", 1.5), (2, "working", 3.2)]
    assert case.anomalies() == set()


def test_a_webhook_delivery_sent_again_is_a_duplicate_not_an_anomaly() -> None:
    case = clean()
    case.deliveries["/hook/1"].insert(2, (2, "working", 2.5))
    assert case.anomalies() == set()
