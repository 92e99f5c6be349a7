"""ListTasks on the file store at the cost of a page.

Each process keeps the ordered index the memory store keeps
(`shared.store.ordered`), fed by the shared log of positions
(`shared.stores.file.positions`): before each page it reads only the lines
appended since it last looked, so a page costs the page and the changes
since the last one, not the task count. The tasks of the page are then read
from their files, which stay the truth, and each is checked against the
position the index gave it: one that disagrees (its writer stopped between
announcing its position and writing the task; a task gone without its
line) is put right under its lock, with a new line every process reads,
and the page is read again.

The log is read whole when a process first lists, and again whenever it is
not the file last read (rewritten by a compaction, deleted, cut short); but
for a compaction's rewrite, the index is then checked against the
directory's task files by name, one listing of the directory: a task file
with no position (a directory from before the log, a log lost or cut
short) is read and placed, a position with no task file is dropped. After a
boot, a log that the fsync policy did not sync line by line may have lost
lines the task files kept: every task is then read once and checked. A
process compacts the log to one line per task when it has grown past
twice that and some slack.
"""

from __future__ import annotations

import heapq
import threading
from collections.abc import Callable
from typing import Final

from shared.store.listing import Listing, Query, StatusHistory, trimmed
from shared.store.ordered import OrderedIndex
from shared.stores.file.positions import Cursor, Position, PositionLog
from shared.task import Task

_TRIES: Final = 3
# Lines beyond twice the task count a log may hold before it is compacted.
_SLACK: Final = 10_000


class FileListing:
    def __init__(
        self,
        log: PositionLog,
        *,
        read: Callable[[str], Task | None],
        repair: Callable[[str], None],
        stored: Callable[[], set[str]],
        clock: Callable[[], float],
        recheck: Callable[[], bool],
    ) -> None:
        """`read`: a task as it stands (None: gone); `repair`: under the
        task's lock, read it again and log where it stands; `stored`: the
        ids of the directory's task files; `recheck`: whether the log may
        have lost lines its task files kept (checked when first read)."""
        self._log = log
        self._read = read
        self._repair = repair
        self._stored = stored
        self._clock = clock
        self._recheck = recheck
        self._lock = threading.Lock()
        self._order = OrderedIndex()
        self._positions: dict[str, Position] = {}  # every task's last line, expired ones too
        self._expiries: list[tuple[float, str]] = []  # a heap of (when, task id)
        # (status time, state) of each position a task had since this process began
        # following the log, for the window (`shared.store.listing.trimmed`)
        self._histories: dict[str, list[tuple[float, str]]] = {}
        self._cursor: Cursor | None = None
        self._lines = 0  # lines of the log read since its start

    def answer(self, query: Query, history: Callable[[str], StatusHistory]) -> Listing:
        """One page of `query`; `history` reads a task's status changes from
        its event log, for a task whose history this process has not seen
        back to the listing's moment."""
        for attempt in range(_TRIES):
            found, expected = self._positions_of_page(query, history)
            tasks = {task_id: self._read(task_id) for task_id in expected}
            wrong = [i for i, position in expected.items() if not position.agrees(tasks[i])]
            if not wrong or attempt == _TRIES - 1:
                break
            with self._lock:
                self._catch_up()
                # A task whose line moved on meanwhile is read again, not repaired.
                stuck = [i for i in wrong if self._positions.get(i) == expected[i]]
            for task_id in stuck:
                self._repair(task_id)
        shown = [task for task in tasks.values() if task is not None]
        return Listing(shown, found.total, found.last)

    def _positions_of_page(
        self, query: Query, history: Callable[[str], StatusHistory]
    ) -> tuple[Listing, dict[str, Position]]:
        """The page as the index has it (no tasks yet) and the position of
        each of its tasks, in the page's order."""
        asked: list[str] = []

        def then(task_id: str) -> StatusHistory:
            known = self._histories.get(task_id)
            return known if known and known[0][0] <= query.as_of else history(task_id)

        with self._lock:
            self._catch_up()
            found = self._order.answer(query, then, lambda ids: _noted(asked, ids))
            return found, {task_id: self._positions[task_id] for task_id in asked}

    # --- under the lock ------------------------------------------------------

    def _catch_up(self) -> None:
        """Read the lines appended since the last look (the whole log, and
        check it against the directory, when it is another file)."""
        for _ in range(_TRIES):
            first = self._cursor is None
            read = self._log.read(self._cursor)
            if read.restarted:
                self._clear()
            self._cursor = read.cursor
            now = self._clock()
            for position in read.positions:
                self._apply(position, now)
            self._lines += len(read.positions)
            if not read.restarted or (read.compacted and not first):
                break
            self._reconcile(check_all=first and self._recheck())
        self._expire()
        self._compact_if_due()

    def _clear(self) -> None:
        self._order = OrderedIndex()
        self._positions, self._histories, self._expiries, self._lines = {}, {}, [], 0

    def _apply(self, position: Position, now: float) -> None:
        task_id = position.task_id
        if position.changed is None:
            self._positions.pop(task_id, None)
            self._histories.pop(task_id, None)
            self._order.remove(task_id)
            return
        self._positions[task_id] = position
        _followed(self._histories.setdefault(task_id, []), position, now)
        if position.expires is not None:
            if position.expires <= now:
                self._order.remove(task_id)
                return
            heapq.heappush(self._expiries, (position.expires, task_id))
        self._order.place(
            task_id, position.owner, position.context, position.state, position.changed
        )

    def _expire(self) -> None:
        """Leave out the finished tasks past their time to live (the reaper
        removes their files, and a line saying so)."""
        now = self._clock()
        while self._expiries and self._expiries[0][0] <= now:
            when, task_id = heapq.heappop(self._expiries)
            position = self._positions.get(task_id)
            if position is not None and position.expires == when:
                self._order.remove(task_id)

    def _reconcile(self, *, check_all: bool) -> None:
        """Repair every task whose file and position do not match by name
        (with `check_all`, also every task whose file disagrees with its
        position); the repairs' lines are read by the next look."""
        on_disk = self._stored()
        placed = set(self._positions)
        for task_id in sorted(on_disk ^ placed):
            self._repair(task_id)
        if not check_all:
            return
        for task_id in sorted(on_disk & placed):
            if not self._positions[task_id].agrees(self._read(task_id)):
                self._repair(task_id)
        self._log.touch()

    def _compact_if_due(self) -> None:
        if self._cursor is None or self._lines <= 2 * len(self._positions) + _SLACK:
            return
        kept = sorted(self._positions.values(), key=lambda p: (p.changed or 0.0, p.task_id))
        cursor = self._log.replace(kept, self._cursor)
        if cursor is not None:  # (None: another process rewrote it; read it on the next look)
            self._cursor, self._lines = cursor, len(kept)


def _followed(history: list[tuple[float, str]], position: Position, now: float) -> None:
    """`history` with `position` as its latest change. A position earlier than
    those before it puts right a write that announced them and never
    happened, so they are dropped."""
    assert position.changed is not None
    change = (position.changed, position.state)
    while history and history[-1][0] > change[0]:
        history.pop()
    if not history or history[-1] != change:
        history.append(change)
        trimmed(history, now)


def _noted(asked: list[str], task_ids: list[str]) -> list[Task]:
    """The index's `read`: the page's ids noted, to be read once the lock is let go."""
    asked.extend(task_ids)
    return []
