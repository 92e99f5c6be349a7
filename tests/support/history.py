"""Histories of operations against a fleet, and the checker of this service's model.

Every operation a recording client makes is an `Op`: who made it, what it
was, when it began and ended (monotonic seconds), whether it was answered,
and what it saw. Faults the nemesis injects are ops too (kind "fault"), so
a history reads as one timeline. After a run, `check` holds the whole
history against what the service promises (`docs/promises.md`):

- one task per messageId: every acknowledgement of a message names the
  same task (`doubled`);
- every acknowledged task is found afterwards (`lost`) and ended or waiting
  on input (`stuck`: the fleet is judged once every task ended, or once no
  task ended for a while), none failed because the broker could not take
  it (`failed-by-broker`: the task is saved, and beat's resend queues it),
  each submission (its message, the reply to its
  question) run at most as often as its attempts allow (`ran-too-often`:
  once with one attempt), and no more often than the attempts its task
  records, itself within the allowance (`attempts-miscounted`); none
  failed for a lost run while attempts remained (`failed-with-attempts-left`);
  no progress message published twice in one turn (`progress-repeated`: a
  later attempt passes over what the lost run published, and a run that
  lost its task writes nothing); a completed task's last
  submission ran, and its result is its own (`completed-without-a-run`,
  `wrong-result`); a reply is acknowledged as the task it answers
  (`reply-elsewhere`);
- a terminal state never changes: no read begun after a read that saw the
  task terminal sees another state (`terminal-changed`);
- each stream's event numbers strictly increase, jumping only where a Task
  is sent, and the stream ends as the task did (`stream-gap`,
  `stream-end`);
- every ListTasks walk answered in full lists each task acknowledged before
  the walk began exactly once (`list-skipped`, `list-doubled`);
- every webhook hears its task's end at least once (`webhook-unheard`),
  never another end (`webhook-wrong-end`), its events in order: each
  event's first delivery after the earlier events' (`webhook-reordered`;
  an event delivered again is a duplicate, which at least once allows and
  the summary counts); a webhook whose config was deleted need not hear
  the end, and once the delete is answered hears at most the one POST
  that was in flight (`webhook-after-delete`);
- an event number, once seen, always stands for the same change: streams
  and webhooks never show one task's number with two different states, as
  a store that handed a number out again after a crash would
  (`event-number-reused`).
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

TERMINAL = frozenset({"completed", "failed", "canceled", "rejected"})


@dataclass
class Op:
    process: str
    kind: str  # send, get, list, stream, unhook (a webhook config deleted), fault
    start: float
    end: float
    ok: bool
    value: dict[str, Any] = field(default_factory=dict)


class History:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.ops: list[Op] = []

    def record(self, process: str, kind: str, start: float, ok: bool, **value: Any) -> Op:
        op = Op(process, kind, start, time.monotonic(), ok, value)
        with self._lock:
            self.ops.append(op)
        return op

    def of(self, kind: str, *, ok: bool | None = True) -> list[Op]:
        with self._lock:
            return [op for op in self.ops if op.kind == kind and (ok is None or op.ok == ok)]

    def acknowledged(self) -> dict[str, str]:
        """task id -> the text of the message that created it."""
        return {op.value["task_id"]: op.value["text"] for op in self.of("send")}

    def replies(self) -> dict[str, str]:
        """task id -> the text of the reply sent to its question (acknowledged,
        or sent with every answer lost: it may have been applied)."""
        return {
            op.value["task_id"]: op.value["reply"]
            for op in self.of("send")
            if op.value.get("reply")
        }

    def dump(self, path: Path) -> None:
        with self._lock:
            lines = [json.dumps(asdict(op), sort_keys=True) for op in self.ops]
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def status_text(task: Mapping[str, Any]) -> str:
    """The text parts of a task's status message (A2A 0.3 or 1.0 shapes)."""
    message = task.get("status", {}).get("message") or {}
    parts = message.get("parts") or [] if isinstance(message, dict) else []
    return " ".join(str(part.get("text", "")) for part in parts if isinstance(part, dict))


def result_text(task: Mapping[str, Any]) -> str:
    """The text parts of a task's artifacts, joined (A2A 0.3 or 1.0 shapes)."""
    texts = [
        part.get("text", "")
        for artifact in task.get("artifacts") or []
        for part in artifact.get("parts") or []
        if isinstance(part, dict)
    ]
    return " ".join(t for t in texts if t)


# webhook path -> (event id, state, monotonic arrival) of each delivery it accepted
Deliveries = Mapping[str, list[tuple[int, str, float]]]


def check(
    history: History,
    final: Mapping[str, Mapping[str, Any] | None],
    runs: Counter[str],
    expected_result: Mapping[str, str],
    deliveries: Deliveries | None = None,
    attempts: int = 1,
) -> dict[str, list[str]]:
    """The anomalies of `history` by kind, each naming what shows it.

    `final`: each acknowledged task as read once every fault was healed and
    the fleet settled (None: not found); `runs`: how often the agent ran
    each message's text; `expected_result`: what each text's run answers;
    `deliveries`: what each webhook was sent and accepted, in arrival order;
    `attempts`: the fleet's TOOLNEXUS_MAX_ATTEMPTS."""
    found: dict[str, list[str]] = defaultdict(list)
    sends = history.of("send")
    by_message: dict[str, set[str]] = defaultdict(set)
    for op in sends:
        by_message[op.value["message_id"]].update(op.value["acks"])
    for message_id, task_ids in by_message.items():
        if len(task_ids) > 1:
            found["doubled"].append(f"message {message_id}: tasks {sorted(task_ids)}")

    for op in sends:
        if any(task_id != op.value["task_id"] for task_id in op.value.get("replied", [])):
            answered = f"reply to {op.value['task_id']}: {op.value['replied']}"
            found["reply-elsewhere"].append(answered)
    replies = history.replies()
    for task_id, text in history.acknowledged().items():
        task = final.get(task_id)
        if task is None:
            found["lost"].append(f"task {task_id} ({text})")
            continue
        state = state_of(task)
        if state not in TERMINAL and state != "input-required":
            found["stuck"].append(f"task {task_id} ({text}): {state}")
        if state == "failed" and "broker unavailable" in status_text(task):
            found["failed-by-broker"].append(f"task {task_id} ({text}): {status_text(task)[:80]}")
        submissions = [text, *([replies[task_id]] if task_id in replies else [])]
        for submitted in submissions:
            if runs[submitted] > attempts:
                found["ran-too-often"].append(
                    f"task {task_id} ({submitted}): {runs[submitted]} runs, {attempts} allowed"
                )
        last = submissions[-1]
        _attempts(task_id, task, runs[last], attempts, found)
        if state == "completed":
            if runs[last] == 0:
                found["completed-without-a-run"].append(f"task {task_id} ({last})")
            elif expected_result[last] not in result_text(task):
                found["wrong-result"].append(f"task {task_id} ({last}): {result_text(task)[:80]!r}")

    _terminal_changes(history, final, found)
    _streams(history, final, found)
    _walks(history, found)
    _webhooks(history, final, deliveries or {}, found)
    _numbers(history, deliveries or {}, found)
    return dict(found)


# The status message of a released run (worker.engine.retries), and of a
# failure that ended a lost run.
_RELEASED = re.compile(r"attempt (\d+) of (\d+) ended without an outcome")
_LOST = ("worker lost", "process running it was lost", "shut down before it finished")


def _last_turn(task: Mapping[str, Any]) -> list[str]:
    """The texts of the agent's messages since the last user message."""
    texts: list[str] = []
    for message in task.get("history") or []:
        if not isinstance(message, dict):
            continue
        if str(message.get("role", "")).lower() in ("user", "role_user"):
            texts = []
            continue
        parts = message.get("parts") or []
        texts.append(" ".join(str(p.get("text", "")) for p in parts if isinstance(p, dict)))
    return texts


def attempts_made(task: Mapping[str, Any]) -> int:
    """The attempts the task's last turn records: one more than its releases."""
    return 1 + sum(1 for text in _last_turn(task) if _RELEASED.match(text))


def _attempts(
    task_id: str, task: Mapping[str, Any], ran: int, attempts: int, found: dict[str, list[str]]
) -> None:
    """What the task records of its last turn's attempts against how often
    the agent ran it, and against the allowance."""
    said = _last_turn(task)
    made = attempts_made(task)
    if made > attempts or ran > made:
        found["attempts-miscounted"].append(
            f"task {task_id}: {made} attempt(s) recorded, {ran} run(s), {attempts} allowed"
        )
    status = status_text(task)
    if (
        attempts > 1
        and state_of(task) == "failed"
        and any(lost in status for lost in _LOST)
        and "no attempts left" not in status
    ):
        found["failed-with-attempts-left"].append(f"task {task_id}: {status[:100]}")
    steps = [text for text in said if text.startswith("step ")]
    repeated = sorted({text for text in steps if steps.count(text) > 1})
    if repeated:
        found["progress-repeated"].append(f"task {task_id}: {repeated} published more than once")


def hooked(history: History) -> dict[str, str]:
    """webhook path -> the task it was asked for (its config, deleted or not)."""
    return {
        op.value["hook"]: op.value["task_id"] for op in history.of("send") if op.value.get("hook")
    }


def pushed_state(body: Any) -> str:
    """The task state a push body reports (A2A 0.3 or 1.0 shapes); "" if none."""
    if not isinstance(body, dict):
        return ""
    for key in ("statusUpdate", "task"):
        if isinstance(body.get(key), dict):
            return pushed_state(body[key])
    return state_of(body) if isinstance(body.get("status"), dict) else ""


def _webhooks(
    history: History,
    final: Mapping[str, Mapping[str, Any] | None],
    deliveries: Deliveries,
    found: dict[str, list[str]],
) -> None:
    deleted = {op.value["hook"]: op.end for op in history.of("unhook")}
    for hook, task_id in hooked(history).items():
        hits = deliveries.get(hook, [])
        if hook in deleted:
            after = [(n, state) for n, state, at in hits if at > deleted[hook]]
            if len(after) > 1:
                found["webhook-after-delete"].append(
                    f"{hook} (task {task_id}): {after} after the config was deleted"
                )
        task = final.get(task_id)
        if task is None or state_of(task) not in TERMINAL:
            continue
        end = state_of(task)
        ids = [event_id for event_id, _, _ in hits]
        # At least once: an event sent again is a duplicate (the receiver
        # drops it by its id); a new event older than one already sent is
        # out of order.
        firsts = list(dict.fromkeys(ids))
        if any(later < earlier for earlier, later in pairwise(firsts)):
            found["webhook-reordered"].append(f"{hook} (task {task_id}): event ids {ids}")
        ends = {state for _, state, _ in hits if state in TERMINAL}
        if end not in ends and hook not in deleted:
            found["webhook-unheard"].append(f"{hook} (task {task_id}, {end}): {hits[-3:]}")
        if ends - {end}:
            found["webhook-wrong-end"].append(f"{hook} (task {task_id}, {end}): {sorted(ends)}")


def state_of(task: Mapping[str, Any]) -> str:
    """The task's state in 0.3's words ("completed"), whichever version answered."""
    state = str(task.get("status", {}).get("state", ""))
    return state.removeprefix("TASK_STATE_").lower().replace("_", "-")


def _terminal_changes(
    history: History, final: Mapping[str, Mapping[str, Any] | None], found: dict[str, list[str]]
) -> None:
    reads: dict[str, list[tuple[float, float, str]]] = defaultdict(list)
    for op in history.of("get"):
        reads[op.value["task_id"]].append((op.start, op.end, op.value["state"]))
    for task_id, task in final.items():
        if task is not None:
            reads[task_id].append((float("inf"), float("inf"), state_of(task)))
    for task_id, seen in reads.items():
        ended = [(end, state) for _, end, state in seen if state in TERMINAL]
        if not ended:
            continue
        first_end, terminal = min(ended)
        later = {state for start, _, state in seen if start > first_end and state != terminal}
        if later:
            found["terminal-changed"].append(
                f"task {task_id}: {terminal}, then {sorted(later)} in a later read"
            )


def _streams(
    history: History, final: Mapping[str, Mapping[str, Any] | None], found: dict[str, list[str]]
) -> None:
    for op in history.of("stream"):
        events: list[tuple[int, str, str]] = [(n, k, s) for n, k, s in op.value["events"]]
        for (before, _, _), (after, kind, _) in pairwise(events):
            if after <= before or (after != before + 1 and kind != "task"):
                found["stream-gap"].append(
                    f"stream of {op.value['task_id']}: event {before} then {after} ({kind})"
                )
        task = final.get(op.value["task_id"])
        if task is not None and events and events[-1][2] != state_of(task):
            found["stream-end"].append(
                f"stream of {op.value['task_id']} ended {events[-1][2]}, the task {state_of(task)}"
            )


def _walks(history: History, found: dict[str, list[str]]) -> None:
    acked = sorted((op.end, op.value["task_id"]) for op in history.of("send"))
    for op in history.of("list"):
        seen: list[str] = op.value["ids"]
        twice = [task_id for task_id, n in Counter(seen).items() if n > 1]
        if twice:
            found["list-doubled"].append(f"walk at {op.start:.2f}: {twice[:5]}")
        before = {task_id for end, task_id in acked if end < op.start}
        missing = before - set(seen)
        if missing:
            found["list-skipped"].append(
                f"walk at {op.start:.2f} ({len(seen)} listed): {sorted(missing)[:5]}"
            )


def _numbers(history: History, deliveries: Deliveries, found: dict[str, list[str]]) -> None:
    seen: dict[tuple[str, int], set[str]] = defaultdict(set)
    for op in history.of("stream", ok=None):
        for number, kind, state in op.value["events"]:
            if kind in ("task", "status-update") and op.value["task_id"]:
                seen[(op.value["task_id"], number)].add(state)
    for hook, task_id in hooked(history).items():
        for number, state, _ in deliveries.get(hook, []):
            if state and number >= 0:
                seen[(task_id, number)].add(state)
    for (task_id, number), states in sorted(seen.items()):
        if len(states) > 1:
            found["event-number-reused"].append(f"task {task_id} event {number}: {sorted(states)}")


def duplicates(deliveries: Deliveries) -> int:
    """Deliveries of an event its webhook had already been sent."""
    return sum(len(hits) - len({hit[0] for hit in hits}) for hits in deliveries.values())


def summary(
    history: History, anomalies: Mapping[str, Iterable[str]], deliveries: Deliveries | None = None
) -> str:
    """One line: operations by kind and outcome, webhooks, replies, faults, anomalies."""
    kinds = Counter(f"{op.kind}{'' if op.ok else ' (unanswered)'}" for op in history.ops)
    faults = Counter(op.value.get("fault", "?") for op in history.of("fault"))
    counted = {kind: len(list(items)) for kind, items in anomalies.items()}
    return (
        f"operations {dict(sorted(kinds.items()))}; webhooks {len(hooked(history))}"
        f" (deliveries sent again {duplicates(deliveries or {})});"
        f" replies {len(history.replies())};"
        f" faults {dict(sorted(faults.items()))}; anomalies {counted or 0}"
    )
