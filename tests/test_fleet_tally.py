"""The fleet dashboard's parts, in process: the tally every worker adds to
(`shared.ops.fleet_tally`), the front end's window of samples and the
rates and percentiles read from it (`web.console.fleet_window`), and what
each caller is shown of it (`web.console.fleet`)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from shared import Settings, memory_store
from shared.broker.backlog import Backlog
from shared.errors import StoreError
from shared.ops.fleet_tally import BUCKETS, LAPSE, NAME, Tally, WorkerPresence, read_tally
from shared.owners.book import OwnerCount
from shared.store.wiring import abilities_of
from shared.stores.memory.documents import MemoryDocuments
from web.auth.tokens import authenticator_for
from web.console.fleet import FleetData
from web.console.fleet_window import FleetSource, FleetWindow, Sample, percentile, rates

TOKENS = "alice:alice-token,bob:bob-token,root:root-token"


class Clock:
    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def sample(
    at: float,
    outcomes: dict[str, int] | None = None,
    latency: list[int] | None = None,
    **parts: Any,
) -> Sample:
    return Sample(
        time=at,
        outcomes=outcomes,
        latency=None if latency is None else tuple(latency),
        depth=parts.get("depth"),
        oldest_age=parts.get("oldest_age"),
        owners=parts.get("owners"),
        workers=parts.get("workers"),
    )


def buckets(**counts: int) -> list[int]:
    """Counts per latency bucket, by bucket upper bound written b0_1 for 0.1."""
    found = [0] * (len(BUCKETS) + 1)
    for name, count in counts.items():
        bound = float(name[1:].replace("_", "."))
        found[BUCKETS.index(bound)] = count
    return found


def test_each_process_adds_its_counts_to_the_one_document() -> None:
    documents = MemoryDocuments()
    first, second = Tally(), Tally()
    first.count(documents, "completed", 0.02)
    first.count(documents, "completed", 0.7)
    first.count(documents, "failed", None)  # no send time: counted, not timed
    second.count(documents, "completed", 400.0)
    first.flush()
    second.flush()
    tally = read_tally(documents)
    assert tally.outcomes == {"completed": 3, "failed": 1}
    expected = buckets(b0_025=1, b1_0=1)
    expected[-1] = 1  # longer than the last bound
    assert list(tally.latency) == expected
    # A flush with nothing new writes nothing; the totals only grow.
    version = documents.document(NAME).version
    first.flush()
    assert documents.document(NAME).version == version
    second.count(documents, "failed", 0.001)
    second.flush()
    assert read_tally(documents).outcomes == {"completed": 3, "failed": 2}


def test_counts_the_store_cannot_take_are_kept_for_the_next_write() -> None:
    class Down(MemoryDocuments):
        down = True

        def document(self, name: str) -> Any:
            if self.down:
                raise StoreError("task store unavailable: down")
            return super().document(name)

    documents = Down()
    tally = Tally()
    tally.count(documents, "completed", 0.2)
    tally.flush()
    documents.down = False
    tally.count(documents, "completed", 0.2)
    tally.flush()
    assert read_tally(documents).outcomes == {"completed": 2}


def test_a_worker_is_live_while_it_says_so_and_gone_when_it_stops_or_lapses() -> None:
    clock = Clock()
    documents = MemoryDocuments(clock)
    presence = WorkerPresence(documents, "worker-1@host", 4).start()
    lapsing = WorkerPresence(documents, "worker-2@host", 2).start()
    deadline = time.monotonic() + 5
    while len(read_tally(documents).workers) < 2:
        assert time.monotonic() < deadline, "the workers never wrote their slots"
        time.sleep(0.01)
    tally = read_tally(documents)
    assert {name: seen.slots for name, seen in tally.workers.items()} == {
        "worker-1@host": 4,
        "worker-2@host": 2,
    }
    presence.stop()
    assert set(read_tally(documents).workers) == {"worker-2@host"}
    lapsing._stop.set()  # dies without a word: no removal
    lapsing._thread.join()
    clock.now += LAPSE + 1
    assert read_tally(documents).workers == {}


def test_rates_and_percentiles_come_from_two_samples_in_a_row() -> None:
    before = sample(100.0, {"completed": 10, "failed": 4}, buckets(b0_1=10))
    after = sample(110.0, {"completed": 60, "failed": 4, "canceled": 5}, buckets(b0_1=60, b1_0=5))
    assert rates(before, after) == {"canceled": 0.5, "completed": 5.0, "failed": 0.0}
    # 50 runs in (0.05, 0.1], 5 in (0.5, 1]: the median inside the first, p99 inside the second.
    p50 = percentile(before, after, 0.5)
    p99 = percentile(before, after, 0.99)
    assert p50 is not None and 0.05 < p50 <= 0.1
    assert p99 is not None and 0.5 < p99 <= 1.0
    assert percentile(after, after, 0.5) is None  # nothing ended between them
    assert rates(None, after) is None and percentile(None, after, 0.5) is None
    # A tally begun again (a store emptied) shows no growth, not a negative rate.
    again = sample(120.0, {"completed": 1}, buckets(b0_1=1))
    assert rates(after, again) == {"completed": 0.0}
    assert percentile(after, again, 0.5) is None


class Source(FleetSource):
    """Samples handed in by the test, at the times it says."""

    def __init__(self) -> None:
        super().__init__(None, None, None, "toolnexus")
        self.next: list[Sample] = []

    def sample(self) -> Sample:
        return self.next.pop(0)


def test_the_window_keeps_the_last_hour_and_pairs_each_sample_with_the_one_before() -> None:
    source = Source()
    window = FleetWindow(source, interval=3600.0, window=60.0)
    now = time.time()
    source.next = [sample(now - 100)]
    (first,) = window.since(0)
    assert first[0] is None and first[1].time == now - 100
    source.next = [sample(now - 30)]  # the newest is stale: a request samples
    pairs = window.since(0)
    # The first fell out of the 60 s window when the second came.
    assert [(b and b.time, a.time) for b, a in pairs] == [(None, now - 30)]
    source.next = [sample(now)]
    pairs = window.since(now - 30)
    assert [(b and b.time, a.time) for b, a in pairs] == [(now - 30, now)]
    # Asked again at once: the newest is fresh, nothing is sampled.
    assert [a.time for _, a in window.since(now - 1)] == [now]


def test_a_caller_sees_the_fleet_and_its_own_counts_and_an_admin_sees_every_owner() -> None:
    settings = Settings(api_tokens=tuple(TOKENS.split(",")), admin_tokens=("root",))
    source = Source()
    window = FleetWindow(source, interval=3600.0)
    data = FleetData(authenticator_for(settings), window, settings.admin_tokens)
    owners = {"alice": OwnerCount(3, 1), "bob": OwnerCount(0, 2)}
    now = time.time()
    source.next = [sample(now - 10, {"completed": 1}, buckets(b0_1=1), owners=owners)]
    window.since(0)
    source.next = [
        sample(now, {"completed": 21}, buckets(b0_1=21), owners=owners, workers={"w@h": 4})
    ]
    window.since(0)  # the newest is fresh now: the answers below sample nothing
    answer = data.answer("Bearer alice-token", None)
    assert answer["admin"] is False and "workerSlots" not in answer
    newest = answer["points"][-1]
    assert newest["held"] == {"alice": 3} and newest["inFlight"] == {"alice": 1}
    assert newest["rates"] == {"completed": 2.0}
    assert answer["points"][0]["workers"] is None  # the tally could not say then
    assert newest["workers"] == 1 and newest["slots"] == 4
    assert data.answer("Bearer bob-token", None)["points"][-1]["held"] == {"bob": 0}
    admin = data.answer("Bearer root-token", None)
    assert admin["admin"] is True and admin["workerSlots"] == {"w@h": 4}
    assert admin["points"][-1]["held"] == {"alice": 3, "bob": 0}
    body, status, headers = data.reply(None, None)
    assert status == 401 and ("WWW-Authenticate", 'Bearer realm="toolnexus"') in headers
    assert "alice" not in body.decode()
    body, status, _ = data.reply("Bearer alice-token", "not a number")
    assert status == 200 and len(json.loads(body)["points"]) == 2


def test_a_sample_reads_the_queue_with_the_held_tasks_as_metrics_does() -> None:
    class Backlogs:
        def backlog(self) -> list[Backlog]:
            return [Backlog("toolnexus", 4, 2.0), Backlog("push", 9, 1.0)]

    store = memory_store()
    book = store.turn_book()
    assert book is not None
    documents = abilities_of(store).documents
    assert documents is not None
    taken = sample_of(FleetSource(Backlogs(), book, documents, "toolnexus"))
    assert taken.depth == 4 and taken.oldest_age == 2.0
    assert taken.outcomes == {} and taken.workers == {}
    unknown = sample_of(FleetSource(None, None, None, "toolnexus"))
    assert (unknown.depth, unknown.owners, unknown.outcomes, unknown.workers) == (None,) * 4


def sample_of(source: FleetSource) -> Sample:
    return source.sample()


def test_the_bundled_chart_library_is_the_pinned_one_with_its_licence() -> None:
    """The page's uPlot is the version web/console/vendor/ pins (its package.json
    and lock), copied by `npm run bundle`, with its licence beside it."""
    console = Path(__file__).resolve().parent.parent / "web" / "console"
    pinned = json.loads((console / "vendor" / "package.json").read_text())["dependencies"]["uplot"]
    lock = json.loads((console / "vendor" / "package-lock.json").read_text())
    assert lock["packages"]["node_modules/uplot"]["version"] == pinned
    bundled = (console / "static" / "uPlot.iife.min.js").read_text()
    assert bundled.startswith(f"/*! https://github.com/leeoniya/uPlot (v{pinned}) */")
    assert "innerHTML" not in bundled  # nothing a Trusted Types policy would refuse
    licence = (console / "static" / "uPlot.LICENSE.txt").read_text()
    assert licence.startswith("The MIT License") and "Leon Sorokin" in licence
