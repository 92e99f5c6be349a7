"""The reaper: what beat (or the embedded server) runs every few seconds.

1. End the run of `working` tasks whose worker stopped heartbeating. A
   worker that dies (SIGKILL, OOM, lost host) cannot report anything; its
   task would stay `working` forever. The store's working index says when
   each running task last heartbeat; anything older than `stale_after` is
   released for another attempt while TOOLNEXUS_MAX_ATTEMPTS allows
   (`worker.engine.retries`), else failed.
2. Send again every task still `submitted` long after it was queued. Its
   message may be gone: a broker that lost its data, a worker that died
   between receiving and claiming it, a delivery rejected while the store
   was down, a web process killed between saving and publishing. The
   store's waiting index says when each was last sent; one range query
   finds them whatever the broker did. A copy of a message that was not
   lost after all finds the task claimed and does nothing. A task that
   merely waits in a long queue cannot be told from a lost one, so each
   re-send backs off (the next after the task has waited twice as long, up
   to a maximum) and a run sends a bounded batch, the longest waiting
   first: a backlog is not sent again in a storm.
3. Fail tasks left waiting for the peer (input-required, auth-required)
   longer than the input timeout, saying so in their status, so that a
   conversation nobody finishes does not keep its task forever.
4. Purge finished tasks past their time to live, on stores that do not
   expire them by themselves (Redis does), and forget the failures of tasks
   gone since (`shared.failures`).
5. Record the time of the run, so every front end can tell (`/readyz`)
   that the reaper still runs.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from shared.attempts import ONE_RUN, Attempts, run_of
from shared.errors import StoreError
from shared.failures import INPUT_TIMEOUT, WORKER_LOST, Failure, forget_gone
from shared.owners.turns import Turns
from shared.settings import Settings
from shared.store.contract import Store
from shared.task import INTERRUPTED_STATES, WORKING, Task, epoch, state_of
from shared.transitions import OnTerminal, transition
from worker.engine.failed_tasks import index_failed, indexes_of
from worker.engine.metrics import worker_metrics
from worker.engine.results import failed
from worker.engine.retries import SendLater, end_held_run, queue_again

log = logging.getLogger(__name__)

Clock = Callable[[], float]


@dataclass(frozen=True)
class Resending:
    """How the reaper re-sends waiting tasks: at most `batch` a run (None:
    all), each task's interval between re-sends growing up to `backoff_max`
    seconds (0: no back-off, every re-send one threshold after the last)."""

    batch: int | None = None
    backoff_max: float = 0.0

    @classmethod
    def of(cls, settings: Settings) -> Resending:
        return cls(settings.resend_batch, settings.resend_backoff_max)


def reap_stale(
    store: Store,
    now: float,
    stale_after: float,
    on_terminal: OnTerminal | None = None,
    *,
    attempts: Attempts = ONE_RUN,
    send_later: SendLater | None = None,
) -> list[str]:
    """End the run of every task still `working` whose last heartbeat is
    older than `now - stale_after`: release the task for its next attempt
    while `attempts` remain (queued again with `send_later`), else fail it;
    return the ids this call failed. A task released earlier that no
    delivery took (its message lost) is queued again, no attempt counted.

    On Redis this is one range query over the working index plus a read and
    a compare-and-set per stale task. A worker finishing at the same moment
    races on that compare-and-set: exactly one of the two writes is made.
    """
    reason = f"worker lost: no heartbeat for {stale_after:g} s"
    reaped = []
    unwritten: list[tuple[str, StoreError]] = []
    for task_id in store.stale(now - stale_after):
        try:
            if _end_stale(store, task_id, reason, on_terminal, attempts, send_later):
                reaped.append(task_id)
        except StoreError as error:
            # One task the store cannot write now (a row another session
            # still locks) must not keep every other stale task waiting.
            unwritten.append((task_id, error))
    if reaped:
        worker_metrics().reaped.inc(len(reaped))
        log.warning("reaper: failed %d stale task(s) (%s): %s", len(reaped), reason, reaped)
    if unwritten:
        ids = [task_id for task_id, _ in unwritten]
        log.warning(
            "reaper: could not fail %d stale task(s) %s (the next run retries): %s",
            len(ids),
            ids,
            unwritten[0][1],
        )
    return reaped


def _end_stale(
    store: Store,
    task_id: str,
    reason: str,
    on_terminal: OnTerminal | None,
    attempts: Attempts,
    send_later: SendLater | None,
) -> bool:
    """One stale task's run ended; True when it was failed."""
    record = store.read(task_id)
    if record is None:
        log.warning("reaper: stale entry %s has no readable task", task_id)
        return False
    # Only from `working`: a task that asked for input or finished after
    # it was listed is not the reaper's business.
    if state_of(record.task) != WORKING:
        return False
    run = run_of(record.task)
    if not run.held:
        queue_again(send_later, task_id, 0.0)
        store.heartbeat(task_id)  # not stale again before a delivery could take it
        return False
    ended = end_held_run(
        store,
        record,
        attempts,
        reason,
        cause=WORKER_LOST,
        send_later=send_later,
        on_terminal=on_terminal,
    )
    if ended.retry_in is not None:
        log.warning("reaper: task %s released for another attempt (%s)", task_id, reason)
        return False
    return ended.outcome.applied


def end_unanswered(
    store: Store, now: float, timeout: float, on_terminal: OnTerminal | None = None
) -> list[str]:
    """Fail every task waiting for the peer since before `now - timeout`; the
    ids this call failed. Through the state machine, from those states only:
    an answer that lands at the same moment wins or loses cleanly."""
    reason = f"no answer from the peer for {timeout:g} s (TOOLNEXUS_INPUT_TIMEOUT): gave up waiting"
    change = failed(reason, Failure(INPUT_TIMEOUT))
    ended = []
    for task_id in store.interrupted(now - timeout):
        outcome = transition(
            store, task_id, change, from_states=INTERRUPTED_STATES, on_terminal=on_terminal
        )
        if index_failed(store, outcome).applied:
            ended.append(task_id)
    if ended:
        worker_metrics().unanswered.inc(len(ended))
        log.info("reaper: failed %d task(s) left waiting for input: %s", len(ended), ended)
    return ended


def resend_waiting(
    store: Store,
    send: Callable[[str], None],
    now: float,
    older_than: float,
    resending: Resending = Resending(),
) -> list[str]:
    """Send again the tasks `submitted` and last sent before `now -
    older_than`, the longest waiting first, `resending.batch` at most. Each
    is then not due again until it has waited as long again as it had since
    it was submitted (so the intervals double), `resending.backoff_max`
    seconds at most, and `older_than` at least."""
    due = store.waiting(now - older_than)
    resent = due[: resending.batch]
    for task_id in resent:
        send(task_id)
        later = 0.0
        if resending.backoff_max > older_than:  # else no task is due later than one threshold
            later = _backoff(store.get(task_id), now, older_than, resending.backoff_max)
        store.resent(task_id, after=later)
    if resent:
        worker_metrics().resent.inc(len(resent))
        log.info("reaper: sent %d waiting task(s) again: %s", len(resent), resent)
    if len(due) > len(resent):
        log.warning(
            "reaper: %d more waiting task(s) left for the next runs", len(due) - len(resent)
        )
    return resent


def _backoff(task: Task | None, now: float, older_than: float, longest: float) -> float:
    """How long after `older_than` a task re-sent `now` is due again: its
    next interval is as long as it has waited since it was submitted, at
    most `longest`."""
    if task is None or "timestamp" not in task["status"]:
        return 0.0
    waited = now - epoch(task["status"]["timestamp"])
    return max(0.0, min(waited, longest) - older_than)  # an unreadable stamp waited `longest`


def turns_send(turns: Turns, store: Store) -> Callable[[str], None]:
    """A resend through the turn book: a held task keeps waiting for its turn."""

    def send(task_id: str) -> None:
        turns.resend(task_id, store.get)

    return send


def sweep(
    store: Store,
    send: Callable[[str], None],
    now: float,
    stale_after: float,
    on_terminal: OnTerminal | None = None,
    *,
    input_timeout: float | None = None,
    turns: Turns | None = None,
    resending: Resending = Resending(),
    attempts: Attempts = ONE_RUN,
    send_later: SendLater | None = None,
) -> list[str]:
    """One run of the reaper: reap (releasing a task for another attempt
    while `attempts` remain, queued with `send_later`), resend (as
    `resending` says), end what waited too long for input (`input_timeout`,
    None: never), purge, and record that it ran.
    With `turns`, a resend goes through the turn book, and the book is put
    right against the tasks and the workers (`Turns.repair`)."""
    reaped = reap_stale(
        store, now, stale_after, on_terminal, attempts=attempts, send_later=send_later
    )
    if input_timeout:
        end_unanswered(store, now, input_timeout, on_terminal)
    if turns is not None:
        send = turns_send(turns, store)
    try:
        resend_waiting(store, send, now, stale_after, resending)
        if turns is not None:
            turns.repair(store.get)
    except StoreError:
        raise
    except Exception as error:  # the broker: /readyz says so; the reaper itself ran
        log.warning("reaper: could not send waiting tasks again (next run retries): %s", error)
    if purged := store.purge_expired():
        log.info("reaper: purged %d finished task(s) past their time to live", purged)
    if (indexes := indexes_of(store)) is not None:
        forget_gone(indexes, store.get)  # the index of failures, of tasks gone since
    store.record_beat()
    return reaped


class ReaperThread:
    """Runs `sweep` at once and then every `every` seconds in a daemon thread
    (embedded mode; under Celery, beat runs the same function instead)."""

    def __init__(
        self,
        store: Store,
        send: Callable[[str], None],
        *,
        every: float,
        stale_after: float,
        on_terminal: OnTerminal | None = None,
        clock: Clock,
        input_timeout: float | None = None,
        turns: Turns | None = None,
        resending: Resending = Resending(),
        attempts: Attempts = ONE_RUN,
        send_later: SendLater | None = None,
    ) -> None:
        self._attempts = attempts
        self._send_later = send_later
        self._input_timeout = input_timeout
        self._resending = resending
        self._turns = turns
        self._store = store
        self._send = send
        self._every = every
        self._stale_after = stale_after
        self._on_terminal = on_terminal
        self._clock = clock
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="toolnexus-reaper", daemon=True)

    def start(self) -> ReaperThread:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _loop(self) -> None:
        while True:
            try:
                sweep(
                    self._store,
                    self._send,
                    self._clock(),
                    self._stale_after,
                    self._on_terminal,
                    input_timeout=self._input_timeout,
                    turns=self._turns,
                    resending=self._resending,
                    attempts=self._attempts,
                    send_later=self._send_later,
                )
            except StoreError as error:
                log.warning("reaper: store unavailable, will retry: %s", error)
            except Exception:
                log.exception("reaper: unexpected error, will retry")
            if self._stop.wait(self._every):
                return
