"""The serving processes' garbage-collection schedule (shared.ops.collector):
what survived is frozen out of the automatic collections, and reclaimed
once a thaw comes; the roles run it, and say so in their logs."""

from __future__ import annotations

import gc
import threading
import weakref
from collections.abc import Iterator
from pathlib import Path

import pytest

from shared.ops.collector import NAME, Collector, start_collector
from shared.settings import Settings
from tests.support.a2a import wait_ready
from tests.support.compose import local_stack, start_grpc
from tests.support.polling import wait_for
from tests.support.redis_server import free_port


class Cyclic:
    """An object in a reference cycle: only a collection frees it."""

    def __init__(self) -> None:
        self.me = self


@pytest.fixture(autouse=True)
def thawed_after() -> Iterator[None]:
    yield
    gc.unfreeze()  # the rest of this pytest process collects as usual


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def a_dropped_cycle() -> weakref.ref[Cyclic]:
    return weakref.ref(Cyclic())


def test_a_cycle_that_survived_a_freeze_waits_for_the_thaw() -> None:
    clock = Clock()
    collector = Collector(freeze_every=1.0, thaw_every=60.0, clock=clock)
    cycle = Cyclic()
    dead = weakref.ref(cycle)
    collector.tick()  # frozen while alive
    assert gc.get_freeze_count() > 0
    del cycle
    gc.collect()  # a full collection, as the automatic ones: frozen objects are not scanned
    assert dead() is not None
    clock.now = 59.0
    collector.tick()
    assert dead() is not None, "thawed before thaw_every"
    clock.now = 60.0
    collector.tick()
    assert dead() is None, "the thaw's collection did not free the cycle"
    assert gc.get_freeze_count() > 0, "frozen again after the thaw"


def test_a_cycle_dropped_before_the_freeze_is_collected_as_ever() -> None:
    collector = Collector(freeze_every=1.0, thaw_every=None)
    collector.tick()
    dead = a_dropped_cycle()
    gc.collect()
    assert dead() is None


def test_never_thawed_keeps_frozen_garbage() -> None:
    clock = Clock()
    collector = Collector(freeze_every=1.0, thaw_every=None, clock=clock)
    cycle = Cyclic()
    dead = weakref.ref(cycle)
    collector.tick()
    del cycle
    clock.now = 1e9
    collector.tick()
    gc.collect()
    assert dead() is not None


def test_the_thaw_reports_what_it_found() -> None:
    collector = Collector(freeze_every=1.0, thaw_every=None)
    cycles = [Cyclic() for _ in range(100)]
    collector.tick()
    del cycles
    assert collector.thaw() >= 100


def test_a_running_schedule_freezes_and_stop_thaws() -> None:
    collector = Collector(freeze_every=0.01, thaw_every=None).start()
    try:
        wait_for(lambda: gc.get_freeze_count() > 0, timeout=10, what="a freeze")
    finally:
        collector.stop()
    assert gc.get_freeze_count() == 0
    assert not any(t.name == NAME and t.is_alive() for t in threading.enumerate())


def test_zero_turns_it_off() -> None:
    settings = Settings.from_env({"TOOLNEXUS_GC_FREEZE_EVERY": "0", "TOOLNEXUS_GC_THAW_EVERY": "0"})
    assert (settings.gc_freeze_every, settings.gc_thaw_every) == (None, None)
    assert start_collector(settings.gc_freeze_every, settings.gc_thaw_every) is None
    defaults = Settings.from_env({})
    assert (defaults.gc_freeze_every, defaults.gc_thaw_every) == (1.0, 600.0)


def test_the_front_end_grpc_and_worker_processes_keep_the_schedule(tmp_path: Path) -> None:
    settings = {"TOOLNEXUS_GC_FREEZE_EVERY": "0.1", "TOOLNEXUS_GC_THAW_EVERY": "0.5"}
    with local_stack(tmp_path) as (_, stack):
        stack.start("web", WEB_CONCURRENCY="1", **settings)
        stack.start("worker", TOOLNEXUS_CONCURRENCY="1", **settings)
        stack.start("beat")
        start_grpc(stack, free_port(), **settings)
        wait_ready(stack.web_url)

        def thawed(name: str) -> bool:
            return "gc: thawed" in stack.processes[name].output()

        wait_for(lambda: thawed("web"), timeout=60, what="a thaw in the front end's log")
        wait_for(lambda: thawed("worker"), timeout=60, what="a thaw in the worker's log")
        wait_for(lambda: thawed("grpc"), timeout=60, what="a thaw in the gRPC process's log")
