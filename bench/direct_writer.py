"""The events of bench/streams.py's tasks written by one plain process, no
Celery worker: `--events-by direct`.

With Celery, two worker processes run every task's call for the whole run
(10,000 at `--streams 10000`), on the same two cores as the front end and
the clients; what they cost is then part of the delivery latency measured.
This writer takes that cost out, to measure the front end alone: it claims
each task the front end created (the store's waiting list), saves the
"ready" progress the streamer agent would, and after the go writes each
task's events at the same planned times, then completes it, through the
same store calls and state machine the worker's fulfilment uses
(`shared.transitions`, `worker.engine.results`). The tasks' Celery messages stay
in the broker's queue, unread.
"""

from __future__ import annotations

import heapq
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.agents import READY, Plan, stamp
from shared.store.contract import Record, Store
from shared.store.resolve import resolve_store
from shared.task import SUBMITTED, WORKING
from shared.transitions import claim, transition
from toolnexus import Done, Progress
from worker.engine.results import RunProgress, final_change

LOOK_EVERY = 0.05  # seconds between two looks for new tasks, and the clock's resolution


def run(store_url: str) -> None:
    """Write until terminated (the benchmark stops this process at its end)."""
    store = resolve_store(store_url)
    records: dict[str, Record] = {}
    plans: dict[str, Plan] = {}
    # (when, task id, event number), the number `plan.events` completing it:
    # after its last event, which is due at the same time.
    due: list[tuple[float, str, int]] = []
    going = False
    while True:
        for task_id in store.waiting(time.time() + 60):
            if task_id not in records:
                _take(store, task_id, records, plans)
        if not going and plans:
            start = next(iter(plans.values())).go_time()  # one go file for the run
            if start is not None:
                going = True
                for task_id, plan in plans.items():
                    for number in range(plan.events):
                        heapq.heappush(due, (plan.due(start, number), task_id, number))
                    last = plan.due(start, max(plan.events - 1, 0))
                    heapq.heappush(due, (last, task_id, plan.events))
        while due and due[0][0] <= time.time():
            _, task_id, number = heapq.heappop(due)
            change = (
                RunProgress().change(Progress(stamp(number)))
                if number < plans[task_id].events
                else final_change(Done("done"))
            )
            saved = transition(
                store, task_id, change, from_states={WORKING}, current=records[task_id]
            )
            if saved.record is not None:
                records[task_id] = saved.record
        time.sleep(LOOK_EVERY)


def _take(store: Store, task_id: str, records: dict[str, Record], plans: dict[str, Plan]) -> None:
    claimed = claim(store, task_id, to=WORKING, from_state=SUBMITTED)
    if claimed.record is None or not claimed.applied:
        return
    text = str(claimed.record.task["history"][-1]["parts"][0].get("text"))
    saved = transition(
        store,
        task_id,
        RunProgress().change(Progress(READY)),
        from_states={WORKING},
        current=claimed.record,
    )
    if saved.record is not None:
        records[task_id] = saved.record
        plans[task_id] = Plan.decode(text)


if __name__ == "__main__":
    run(sys.argv[1])
