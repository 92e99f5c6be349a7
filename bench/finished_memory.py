"""What the front end's memory of finished tasks costs, and what it saves.

    python3 bench/finished_memory.py [--tasks 2000] [--text 20]

Runs the app in this process on a private Redis (the store), with the echo
agent in in-process workers so every task really finishes; sends `tasks`
blocking SendMessage calls of `text` characters each, then GetTask of each
twice: the first reads Redis and keeps the task, the second is answered
from memory. Prints the Python memory the kept tasks take per task (as
tracemalloc counts what the memory's own code allocated) beside their JSON size (what
TOOLNEXUS_FINISHED_CACHE_MB counts), how many such tasks the default budget
holds, and the app's CPU time per GetTask both ways.
"""

from __future__ import annotations

import argparse
import sys
import time
import tracemalloc
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from shared import Settings
from shared.stores.redis.store import redis_store
from tests.support.redis_server import RedisServer
from web import create_app
from web.core import finished as finished_module
from web.core.finished import FinishedTasks
from worker.engine.agent import load_agent
from worker.engine.inprocess import InProcessDispatcher


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=2000)
    parser.add_argument("--text", type=int, default=20, help="characters per message")
    args = parser.parse_args()
    server = RedisServer().start()
    try:
        measure(server.url, args.tasks, args.text)
    finally:
        server.close()


def measure(url: str, count: int, size: int) -> None:
    settings = Settings(run="examples.agents:echo")
    store = redis_store(f"{url}/1")
    dispatcher = InProcessDispatcher(store, load_agent(settings), settings, threads=2)
    app = create_app(settings, store=store, dispatcher=dispatcher)
    http = app.test_client()
    headers = {"A2A-Version": "1.0"}

    def call(method: str, params: dict[str, Any]) -> Any:
        body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
        reply: Any = http.post("/", json=body, headers=headers).json
        assert "result" in reply, reply
        return reply["result"]

    ids = []
    for n in range(count):
        message = {
            "role": "ROLE_USER",
            "messageId": uuid.uuid4().hex,
            "parts": [{"text": f"{n:06d}".ljust(size, "x")}],
        }
        task = call("SendMessage", {"message": message})["task"]
        assert task["status"]["state"] == "TASK_STATE_COMPLETED", task
        ids.append(task["id"])
    tasks = app.extensions["toolnexus"]  # the app's Tasks, where the memory lives
    assert tasks.finished is not None and len(tasks.finished) == count
    budget = settings.finished_cache_mb * 2**20
    # Empty again: the first GetTask of each task reads Redis and keeps it;
    # once with allocations traced (for the memory), once timed (tracing
    # slows every allocation), then a timed pass answered from memory.
    kept = tasks.finished = FinishedTasks(budget, settings.task_ttl)
    tracemalloc.start(8)
    for task_id in ids:
        call("GetTask", {"id": task_id})
    # What is still allocated from inside the memory's own code (each task's
    # JSON, its entry), whatever else the requests left behind.
    mine = tracemalloc.Filter(True, finished_module.__file__, all_frames=True)
    snapshot = tracemalloc.take_snapshot().filter_traces([mine])
    allocated = sum(stat.size for stat in snapshot.statistics("filename")) / count
    tracemalloc.stop()
    kept = tasks.finished = FinishedTasks(budget, settings.task_ttl)
    from_redis = cpu_per_call(call, ids)
    from_memory = cpu_per_call(call, ids)
    json_size = kept.size / count
    print(f"{count} finished echo tasks, messages of {size} characters")
    print(
        f"  kept per task: {allocated:,.0f} bytes of Python objects, {json_size:,.0f} bytes as JSON"
    )
    print(
        f"  the default {settings.finished_cache_mb} MiB budget holds {budget // json_size:,.0f}"
        f" such tasks: about {budget // json_size * allocated / 2**20:,.0f} MiB of Python memory"
    )
    print(
        f"  app CPU per GetTask: {from_redis * 1e6:,.0f} us reading Redis,"
        f" {from_memory * 1e6:,.0f} us from memory"
    )
    dispatcher.close(timeout=5)
    store.close()


def cpu_per_call(call: Any, ids: list[str]) -> float:
    """This process's CPU seconds per GetTask, over one GetTask of each id."""
    started = time.process_time()
    for task_id in ids:
        call("GetTask", {"id": task_id})
    return (time.process_time() - started) / len(ids)


if __name__ == "__main__":
    main()
