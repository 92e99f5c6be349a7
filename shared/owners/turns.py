"""Whose task runs next: fair turns over owners, and each owner's running cap.

Without turns every accepted task is published to the broker at once, and
workers take them in arrival order: one owner's flood puts every other
owner's next task behind all of it. With turns, a task is first *held* in
the store's turn book; only as many tasks are *in flight* (published, or
running) as the live workers have slots for, plus one message a worker
(`window`). Whenever room frees (a send, a delivery's end, a worker
starting, beat's sweep) the next tasks are taken:

- round-robin over the owners with held tasks, weighted (stride
  scheduling: each owner has a pass, the lowest goes next and moves on by
  1/weight; an owner that starts waiting again joins at the pass of the
  last one taken, so waiting earns no credit), so one owner's backlog
  delays another owner's task by about one task per worker slot;
- skipping an owner with `max_running` tasks in flight;
- within an owner, the highest message priority first, then arrival.

With fair share off (`TOOLNEXUS_FAIR_SHARE=false`) but a running cap set,
tasks are taken in arrival order, skipping capped owners.

Nothing is lost on a crash between two steps: a task taken but never
published, or whose message the broker lost, is still `submitted`, and
beat's resend finds it (it publishes a task in flight again, and holds one
that is neither held nor in flight); ids left in flight by a task that
finished without its delivery ending (a worker killed, a revoked message)
are released by beat's sweep, which checks each against the store. No live
worker registered (none started yet, or all gone): a window of `FLOOR`, so
the broker's queue shows work to an autoscaler that scales from zero, and
the metrics count held tasks as waiting.

The book is the store's (`Store.turn_book()`): memory, file and
PostgreSQL keep it with the algorithm of `shared.owners.book`
(`TurnState`), Redis in one script a step; each step is atomic against
every other process on that store.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Final

from shared.errors import BrokerError
from shared.mappings import is_mapping
from shared.ops.turn_metrics import count_repairs
from shared.owners.book import Entry, ReleaseOnCommit, TurnBook
from shared.owners.limits import LimitTable
from shared.settings import Settings
from shared.task import IN_FLIGHT, SUBMITTED, WORKING, state_of

log = logging.getLogger(__name__)

# Seconds a broker that took a message (or answered a check) is taken to be
# up: a held send is refused once the broker has been down this long, so a
# caller meets an outage within a quarter second, at the cost of at most
# four checks a second per process while sends are held.
BROKER_FRESH: Final = 0.25
# A message's priority (`metadata.priority`): higher runs first, within its owner.
PRIORITY_KEY: Final = "priority"
LOWEST, HIGHEST = -10, 10


def priority_of(message: Mapping[str, Any]) -> int:
    """The message's priority from its metadata, 0 when it names none; the
    params check refuses anything but a whole number in range."""
    metadata = message.get("metadata")
    if not is_mapping(metadata):
        return 0
    value = metadata.get(PRIORITY_KEY)
    if isinstance(value, int) and not isinstance(value, bool) and LOWEST <= value <= HIGHEST:
        return value
    return 0


def priority_problem(message: Mapping[str, Any]) -> str | None:
    """Why the message's priority is refused, or None."""
    metadata = message.get("metadata")
    if not is_mapping(metadata) or PRIORITY_KEY not in metadata:
        return None
    value = metadata[PRIORITY_KEY]
    if isinstance(value, int) and not isinstance(value, bool) and LOWEST <= value <= HIGHEST:
        return None
    return f"must be a whole number from {LOWEST} to {HIGHEST} (higher runs first)"


class Turns:
    """Turn taking for one process: holds what is sent, publishes whatever
    has its turn, and makes room as deliveries end.

    `publish(task_id)` puts a task's message on the broker (raising when it
    cannot); a task taken but not published stays in flight for beat's
    resend. `check()` raises when the broker cannot take a message now: a
    send held for its turn is refused as one the broker refused when the
    broker has not been heard from within `BROKER_FRESH` seconds and does
    not answer (the front end's; a worker's turns need none).
    """

    def __init__(
        self,
        book: TurnBook,
        limits: LimitTable,
        publish: Callable[[str], None],
        *,
        fair: bool = True,
        check: Callable[[], None] | None = None,
    ) -> None:
        self.book = book
        self.limits = limits
        self.fair = fair
        self._publish = publish
        self._check = check
        self._broker_heard = 0.0  # monotonic: the broker last took a message or answered
        self._broker_refused: tuple[float, Exception] | None = None  # when, and why
        self._checking = threading.Lock()

    def entry(self, task: Mapping[str, Any]) -> Entry:
        owner = str(task.get("owner") or "")
        terms = self.limits.of(owner)
        history = task.get("history") or []
        latest = history[-1] if history else {}
        return Entry(
            task_id=str(task["id"]),
            owner=owner,
            priority=priority_of(latest) if is_mapping(latest) else 0,
            weight=terms.weight,
            max_running=terms.max_running,
        )

    def enqueue(self, task: Mapping[str, Any]) -> bool:
        """Hold a saved task and publish what has its turn; True when this
        task itself was published (raising if that publish failed)."""
        task_id = str(task["id"])
        taken = self.book.hold_and_take([self.entry(task)], self.fair)
        if self._publish_all(taken, own=task_id):
            return True
        if _replied(task) and task_id in self.book.held_among([task_id])[1]:
            # A reply that came before the delivery that asked for it ended:
            # the task is still in that delivery's flight, so the book did
            # not hold it again, and that delivery's end only releases it.
            # Published now, in the flight it already has; else it would
            # wait for beat's resend, a stale time later. One delivery claims it.
            self._publish_all([task_id], own=task_id)
            return True
        self._broker_answers()
        return False

    def _broker_answers(self) -> None:
        """Held, the task runs only once the broker takes messages: with the
        broker down the send is refused, as before turns, not left waiting.
        One check at a time: the sends held meanwhile take its answer, and
        a refusal stands for `BROKER_FRESH` seconds, so a busy front end
        asks the broker at most once every `BROKER_FRESH` seconds."""
        if self._check is None or time.monotonic() - self._broker_heard < BROKER_FRESH:
            return
        with self._checking:
            now = time.monotonic()
            if now - self._broker_heard < BROKER_FRESH:
                return
            refused = self._broker_refused
            if refused is not None and now - refused[0] < BROKER_FRESH:
                raise BrokerError(str(refused[1]))
            try:
                self._check()
            except Exception as error:
                self._broker_refused = (time.monotonic(), error)
                raise
            self._broker_refused = None
            self._broker_heard = time.monotonic()

    def ended(self, task_id: str) -> None:
        """A delivery of `task_id` ended with the task out of flight (run,
        or found finished): make room and publish what has its turn."""
        self._publish_all(self.book.release_and_take([task_id], self.fair))

    def delivered(self, task_id: str, state: str) -> None:
        """A delivery of `task_id` ended, leaving the task in `state` ("" when
        it is gone). Still `working` means another delivery runs it (a
        duplicate message), which makes room when it ends; otherwise the
        task is out of flight."""
        if state not in (WORKING, SUBMITTED):
            self.ended(task_id)

    def release_with_writes(self, release_on_commit: ReleaseOnCommit) -> None:
        """Where the store's book can (Redis: `release_on_commit`, one of the
        store's abilities), a write of this process that takes a task out of
        flight releases it in the same round trip, and what that step takes
        is published here; the `delivered` or `released` that follows then
        asks the book nothing more. (The PostgreSQL store's writes release
        in the same statement, and publish nothing: the step that follows
        takes what has room.)"""
        release_on_commit(self.fair, self._publish_all)

    def released(self, task_ids: list[str]) -> None:
        """Tasks finished without their delivery ending (reaped, canceled)."""
        if task_ids:
            self._publish_all(self.book.release_and_take(task_ids, self.fair))

    def feed(self) -> None:
        """Publish what has room now (a worker starting, beat's sweep)."""
        self._publish_all(self.book.release_and_take([], self.fair))

    def _publish_all(self, taken: list[str], own: str | None = None) -> bool:
        """Publish each taken task; after the broker refuses one the rest stay
        in flight unpublished, for beat's resend (they are still `submitted`).
        Raises the refusal when this process's own task is among them."""
        for index, task_id in enumerate(taken):
            try:
                self._publish(task_id)
                self._broker_heard = time.monotonic()
            except Exception as error:
                self._broker_heard = 0.0
                left = taken[index:]
                if own in left:
                    raise
                log.warning("turns: %d task(s) left for beat's resend: %s", len(left), error)
                return own in taken[:index]
        return own in taken

    def resend(self, task_id: str, read: Callable[[str], Mapping[str, Any] | None]) -> None:
        """Beat's resend of a task still `submitted`: a held one waits for its
        turn; one in flight is published again (its message may be lost);
        one in neither (lost between two steps, or saved before turns were
        on) is held."""
        held, flying = self.book.held_among([task_id])
        if task_id in held:
            return
        if task_id in flying:
            self._publish(task_id)
            return
        task = read(task_id)
        if task is not None:
            self.enqueue(task)

    def repair(self, read: Callable[[str], Mapping[str, Any] | None]) -> list[str]:
        """Beat's sweep: the book put right against the tasks and the workers.
        What is in flight but neither waiting nor running any more (ended,
        waiting for the peer, or gone) is released, the slots of workers whose
        registration lapsed are dropped, each repair counted; then what has
        room is published. The ids released."""
        gone = []
        for task_id in self.book.in_flight():
            task = read(task_id)
            if task is None or state_of(task) not in IN_FLIGHT:
                gone.append(task_id)
        lapsed = self.book.lapsed()
        count_repairs("flight", len(gone))
        count_repairs("slots", len(lapsed))
        if gone or lapsed:
            log.info(
                "turns: released %d task(s) no longer in flight %s; dropped the slots of %d"
                " worker(s) not seen for their registration's time %s",
                len(gone),
                gone[:10],
                len(lapsed),
                lapsed[:10],
            )
        self._publish_all(self.book.release_and_take(gone, self.fair))
        return gone


def _replied(task: Mapping[str, Any]) -> bool:
    """Whether the task has had a message after its first: a follow-up, the
    only send that can find its task still in flight."""
    return len(task.get("history") or []) > 1


def takes_turns(settings: Settings) -> bool:
    """Whether settings ask for turns: fair share, or a running cap."""
    return settings.fair_share or LimitTable(settings).caps_running


def turns_for(
    settings: Settings,
    book: TurnBook | None,
    publish: Callable[[str], None],
    check: Callable[[], None] | None = None,
    *,
    release_on_commit: ReleaseOnCommit | None = None,
) -> Turns | None:
    """Turn taking as settings ask for it, on the store's book; None when
    they ask for none or the store keeps no book (a user's store: tasks then
    go to the broker in arrival order). The process's writes release their
    tasks where the book can (`release_on_commit`, from the store's
    abilities): a task that ends any way leaves flight in the write that
    ends it."""
    if book is None or not takes_turns(settings):
        return None
    turns = Turns(book, LimitTable(settings), publish, fair=settings.fair_share, check=check)
    if release_on_commit is not None:
        turns.release_with_writes(release_on_commit)
    return turns


# Seconds between a worker's tries to register its slots while the store fails.
RETRY: Final = 0.5


class SlotKeeper:
    """Keeps one worker's slots registered in the turn book while it runs
    (every `every` seconds, each registration good for `ttl`), and publishes
    what has room once it first counts; gone from the book when stopped, or
    by expiry when the worker dies."""

    def __init__(self, turns: Turns, worker: str, slots: int, every: float, ttl: float) -> None:
        self._turns = turns
        self._worker = worker
        self._slots = slots
        self._every = every
        self._ttl = ttl
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="toolnexus-slots", daemon=True)

    def start(self) -> SlotKeeper:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=self._every + 1)
        try:
            self._turns.book.unregister(self._worker)
        except Exception as error:  # it expires by itself
            log.warning("turns: could not unregister %s: %s", self._worker, error)

    def _loop(self) -> None:
        fed = failing = False
        while not self._stop.is_set():
            try:
                self._turns.book.register(self._worker, self._slots, self._ttl)
                if failing:
                    log.info("turns: %s's slots registered again", self._worker)
                    failing = False
                if not fed:
                    # Once the slots count (at start, and after an outage in
                    # which they may have lapsed): publish what has room.
                    self._turns.feed()
                    fed = True
            except Exception as error:  # the store or broker down: tried again soon
                # Said once an outage, not at every round of it.
                level = logging.DEBUG if failing else logging.WARNING
                log.log(level, "turns: could not register %s's slots: %s", self._worker, error)
                failing = True
                fed = False
            # While failing, tried again within a second of the store's return.
            self._stop.wait(min(self._every, RETRY) if failing or not fed else self._every)
