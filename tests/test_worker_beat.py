"""Beat reaps by itself: no worker has to be free, or even running."""

from __future__ import annotations

from pathlib import Path

from shared.stores.redis.store import redis_store
from shared.task import FAILED, WORKING, new_task, state_of, text_message
from tests.support.compose import LocalStack
from tests.support.polling import wait_for
from tests.support.shortcuts import with_status


def test_beat_fails_a_stale_task_with_no_worker_running(redis_url: str, tmp_path: Path) -> None:
    base = redis_url.rsplit("/", 1)[0]
    stack = LocalStack(
        base,
        tmp_path,
        {"TOOLNEXUS_HEARTBEAT": "0.2", "TOOLNEXUS_STALE_AFTER": "1", "TOOLNEXUS_REAP_EVERY": "0.5"},
    )
    store = redis_store(stack.store_url, clock=lambda: 0.0)  # heartbeat at the epoch: stale
    orphan = store.save(with_status(new_task(text_message("user", "orphan")), WORKING))
    # No worker runs: a reap sent as a message would never be executed.
    reader = redis_store(stack.store_url)
    beat = stack.start("beat")
    try:

        def reaped() -> bool:
            assert beat.alive(), beat.output()
            task = reader.get(orphan["id"])
            return task is not None and state_of(task) == FAILED

        wait_for(reaped, timeout=20, what="beat to reap the orphan")
        # Beat logs the reap after writing it: its line may come a moment later.
        wait_for(
            lambda: "reaper: failed 1 stale task" in beat.output(),
            timeout=20,
            what="beat's line about the reap",
        )
    finally:
        stack.close()
    failed = reader.get(orphan["id"])
    assert failed is not None
    assert "worker lost: no heartbeat for 1 s" in failed["status"]["message"]["parts"][0]["text"]
