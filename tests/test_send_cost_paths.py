"""The cheap paths of an embedded send say what the dear ones said: ids
as `uuid.uuid4()` makes them (never one twice, across threads and forks),
timestamps as `datetime` writes them, metrics as prometheus_client counts
them under its own locks, beats for every running task."""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections import Counter as Tally
from datetime import UTC, datetime

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client import metrics as prometheus_metrics
from prometheus_client import values as prometheus_values

from shared.entropy import RandomSlices
from shared.ops.metrics import RUN_BUCKETS, guard_with
from shared.task import new_id, now_iso
from tests.support.polling import wait_for
from tests.test_worker_heartbeat import BeatCounter
from worker.engine.heartbeat import heartbeating
from worker.engine.metrics import outcome_of, worker_metrics


def test_ids_are_lowercase_version_4_uuids() -> None:
    for _ in range(2000):
        made = new_id()
        parsed = uuid.UUID(made)
        assert parsed.version == 4
        assert parsed.variant == uuid.RFC_4122
        assert str(parsed) == made  # lowercase, dashes where str(UUID) puts them
        assert len(made) == 36


def test_ids_are_unique_and_every_free_digit_is_random() -> None:
    ids = [new_id() for _ in range(20000)]
    assert len(set(ids)) == len(ids)
    digits = [made.replace("-", "") for made in ids]
    for position in range(32):
        seen = {hexed[position] for hexed in digits}
        if position == 12:
            assert seen == {"4"}  # the version
        elif position == 16:
            assert seen == set("89ab")  # the variant's 10, then two random bits
        else:
            assert seen == set("0123456789abcdef"), position
    # The 122 random bits are evenly spread: each free digit's values near 1/16 each.
    counts = Tally(hexed[0] for hexed in digits)
    assert min(counts.values()) > len(ids) / 16 * 0.8


def test_threads_drawing_ids_at_once_never_share_one() -> None:
    made: list[list[str]] = [[] for _ in range(8)]
    start = threading.Barrier(len(made))

    def draw(into: list[str]) -> None:
        start.wait()
        into.extend(new_id() for _ in range(5000))

    threads = [threading.Thread(target=draw, args=(into,)) for into in made]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    everything = [made_id for into in made for made_id in into]
    assert len(set(everything)) == len(everything) == 40000


def test_a_forked_child_draws_none_of_its_parents_unread_bytes() -> None:
    slices = RandomSlices(16)
    slices.take()  # the block is read: what follows is kept in memory
    reading, writing = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child reports through the pipe
        os.write(writing, b"".join(slices.take() for _ in range(4)))
        os._exit(0)
    os.close(writing)
    _, status = os.waitpid(child, 0)
    childs = os.read(reading, 64)
    os.close(reading)
    assert status == 0 and len(childs) == 64
    parents = b"".join(slices.take() for _ in range(4))
    assert childs != parents
    assert not {childs[at : at + 16] for at in range(0, 64, 16)} & {
        parents[at : at + 16] for at in range(0, 64, 16)
    }


def test_timestamps_are_written_as_datetime_writes_them() -> None:
    for _ in range(2000):
        before = datetime.now(UTC)
        stamped = now_iso()
        after = datetime.now(UTC)
        assert len(stamped) == 27 and stamped.endswith("Z")
        assert stamped == datetime.fromisoformat(stamped).isoformat(
            timespec="microseconds"
        ).replace("+00:00", "Z")
        assert before <= datetime.fromisoformat(stamped) <= after
    # Across a second's edge, the second moves on with the clock.
    edge = time.time()
    while int(time.time()) == int(edge):
        time.sleep(0.001)
    assert datetime.fromisoformat(now_iso()).timestamp() >= int(edge) + 1


def _count(registry: CollectorRegistry) -> bytes:
    counter = Counter("toolnexus_test_fulfilments", "c", ["outcome"], registry=registry)
    histogram = Histogram(
        "toolnexus_test_seconds", "h", ["outcome"], buckets=RUN_BUCKETS, registry=registry
    )
    gauge = Gauge("toolnexus_test_running", "g", registry=registry)
    for n in range(50):
        outcome = ("completed", "failed", "unknown")[n % 3]
        counter.labels(outcome).inc()
        histogram.labels(outcome).observe(n / 7)
        gauge.inc()
        if n % 2:
            gauge.dec()
    # Every sample but the moments each series was made.
    lines = generate_latest(registry).splitlines()
    return b"\n".join(line for line in lines if b"_created" not in line)


def test_metrics_under_the_os_lock_expose_what_they_did_before() -> None:
    default_values, default_metrics = prometheus_values.Lock, prometheus_metrics.Lock  # type: ignore[attr-defined]
    before = _count(CollectorRegistry())
    native = threading.Lock  # this process is not patched: the OS's lock itself
    try:
        guard_with(lambda: _Tracked(native()))
        after = _count(CollectorRegistry())
    finally:
        guard_with(default_values)
        prometheus_metrics.Lock = default_metrics  # type: ignore[attr-defined]
    assert after == before
    assert _Tracked.made > 0  # the metrics made meanwhile took the lock given


class _Tracked:
    """A lock that counts how many were made."""

    made = 0

    def __init__(self, lock: threading.Lock) -> None:
        type(self).made += 1
        self._lock = lock

    def __enter__(self) -> bool:
        return self._lock.__enter__()

    def __exit__(self, *exc: object) -> None:
        self._lock.__exit__(*exc)  # type: ignore[arg-type]


def test_an_outcomes_children_are_its_labels() -> None:
    metrics = worker_metrics()
    counter, histogram = outcome_of("completed")
    assert counter is metrics.fulfilments.labels("completed")
    assert histogram is metrics.fulfilment_seconds.labels("completed")
    assert outcome_of("completed") == (counter, histogram)


def test_a_shorter_interval_wakes_a_thread_asleep_on_a_longer_one() -> None:
    store = BeatCounter()
    with heartbeating(store, "slow", 60):
        # The thread now sleeps until the slow task's beat, a minute away.
        wait_for(lambda: True, what="nothing")
        with heartbeating(store, "fast", 0.02):
            wait_for(lambda: store.beats["fast"] >= 3, timeout=10, what="the fast task's beats")
    assert store.beats["slow"] == 0


def test_a_task_ended_before_its_beat_is_never_beaten_and_others_go_on() -> None:
    store = BeatCounter()
    with heartbeating(store, "long", 0.02):
        for n in range(100):
            with heartbeating(store, f"short-{n}", 0.02):
                pass
        wait_for(lambda: store.beats["long"] >= 5, timeout=10, what="the long task's beats")
    assert not any(task.startswith("short-") for task in store.beats)
