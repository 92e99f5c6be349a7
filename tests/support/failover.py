"""What the failover tests share: clients that write tasks as fast as a store
takes them, each write retried until acknowledged (as a client retries a
send), counted afterwards task by task to find the acknowledged ones the
failover lost; and a commit with the wake-up it should cause."""

from __future__ import annotations

import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from shared.errors import StoreError
from shared.events import to_state
from shared.store.wakeups import Waiter
from shared.task import new_task
from shared.transitions import transition


def a_task() -> dict[str, object]:
    message = {
        "role": "user",
        "messageId": uuid.uuid4().hex,
        "parts": [{"kind": "text", "text": "hi"}],
    }
    return dict(new_task(message))  # type: ignore[arg-type]


@dataclass
class Writers:
    store: Any
    count: int = 4
    stop: threading.Event = field(default_factory=threading.Event)
    acknowledged: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    threads: list[threading.Thread] = field(default_factory=list)

    def start(self) -> Writers:
        self.threads = [threading.Thread(target=self._run) for _ in range(self.count)]
        for thread in self.threads:
            thread.start()
        return self

    def close(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(30)

    def lost(self) -> list[str]:
        """The acknowledged tasks the store no longer has."""
        return [task_id for task_id in self.acknowledged if self.store.get(task_id) is None]

    def _run(self) -> None:
        while not self.stop.is_set():
            task = a_task()
            while not self.stop.is_set():
                try:
                    self.store.create(task)
                except StoreError as error:
                    with self.lock:
                        self.refused.append(error.reason or str(error))
                    time.sleep(0.05)
                    continue
                with self.lock:
                    self.acknowledged.append(str(task["id"]))
                break


def advance(store: Any, task_id: str, state: str) -> int:
    """Move the task to `state` as every writer does (`transition`: a first
    write on a promoted Redis master is stamped again, see
    docs/event-log.md); the new event's number."""
    outcome = transition(store, task_id, to_state(state))
    assert outcome.applied and outcome.record is not None
    return outcome.record.seq


def quiet(waiter: Waiter) -> None:
    """Let the wake-ups of an outage (every watcher told to re-read) pass."""
    while waiter.wait(0.5):
        pass
