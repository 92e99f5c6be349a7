"""The fulfilment core, shared by the Celery task and the in-process worker.

One delivery of a task id does this:

1. Claim it: compare-and-set `submitted` -> `working`. Only the delivery
   whose write wins runs the function. A task that is unknown, terminal
   (canceled before it started, finished by an earlier delivery), already
   `working` (a duplicate or redelivered message) or waiting for the peer is
   left alone. The rule is "the function runs once per submission": a
   continuation puts the task back in `submitted`, and the next claim runs
   it once more.
2. Run the function (see `worker.engine.calling`), heartbeating. Each item a
   generator yields is saved as it comes, as a change from `working`: if the
   task was canceled or reaped meanwhile, the save loses and the generator
   is closed, so the function stops at its next yield.
3. Save the result as a change *from `working`*, so it loses to a cancel or
   a reaper that made the task terminal meanwhile.

In an I/O mode (`io_pool=True`, TOOLNEXUS_POOL=threads|asyncio) the call is an
I/O call (`worker.engine.io_calls`): its coroutines run on the process's
event loop, and its time limit and a cancel stop it there.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from contextlib import ExitStack
from functools import partial

from shared.attempts import asking, first_claim, holds, process_name, run_of, taken, takes_now
from shared.backoff import Backoff
from shared.contexts import look_again_after, waits_for_context
from shared.conversation import conversation
from shared.errors import StoreError
from shared.events import Change, Event, identity, status_update
from shared.failures import (
    AGENT_UNAVAILABLE,
    BAD_RESULT,
    EXCEPTION,
    RETRIES_USED,
    TIMED_OUT,
    Failure,
)
from shared.settings import Settings
from shared.store.busy import ahead_of
from shared.store.contract import Outcome, Record, Store
from shared.task import SUBMITTED, WORKING, Task, is_terminal, state_of
from shared.transitions import claim, notify, transition
from toolnexus import Ask, Checkpoint, NeedAuth, Retry
from worker.engine.agent import Agent
from worker.engine.calling import RunAsync, call, run_async
from worker.engine.failed_tasks import index_failed
from worker.engine.green_jobs import off_loop
from worker.engine.heartbeat import heartbeating
from worker.engine.io_calls import CallStopped, running_io_call, watching
from worker.engine.results import RunProgress, UnsupportedResult, failed, final_change, with_run
from worker.engine.retries import SendLater, end_without_outcome, queue_again

log = logging.getLogger(__name__)

# Final results that wait for the peer: the run of the answer goes on from
# the turn's last checkpoint.
QUESTIONS = (Ask, NeedAuth)


def fulfil(
    store: Store,
    task_id: str,
    agent: Agent,
    settings: Settings,
    *,
    timeout_errors: tuple[type[BaseException], ...] = (),
    on_run: Callable[[], object] | None = None,
    io_pool: bool = False,
    run_async: RunAsync = run_async,
    send_later: SendLater | None = None,
) -> str:
    """Run one delivery of `task_id`; return the task's state afterwards ("" if unknown).

    `timeout_errors` are the exceptions that mean "out of time" (Celery's
    SoftTimeLimitExceeded); they fail the task saying it timed out.
    `on_run()` is called just before the function runs, if this delivery runs it.
    `io_pool`: one of many I/O calls in this process (`worker.engine.io_calls`).
    `run_async`: how async agent code runs (the embedded server's one loop,
    `worker.engine.green_loop`); an I/O call runs on its pool's loop instead.
    `send_later(id, delay)`: how a task released for another attempt is
    queued again, and a waiting task's next look at its context (None: the
    reaper finds it).
    """
    with ExitStack() as stack:
        # An I/O call watches its task from before the claim, so that a
        # cancel saved right after the claim still reaches it.
        # (Store round trips go off the loop in a green job: `off_loop`.)
        watch = off_loop(stack.enter_context, watching(store, task_id)) if io_pool else None
        # The claim reads the task itself: no separate load, one round trip
        # fewer (and on a store that claims in one step, no separate read either).
        claimed = off_loop(_claim, store, task_id, send_later)
        if claimed.record is None:
            log.warning("task %s: not in the store, nothing to run", task_id)
            return ""
        if not claimed.applied:
            state = state_of(claimed.record.task)
            if state != SUBMITTED:  # (a submitted one waits for its context)
                log.info("task %s: is %s, not submitted; not running it", task_id, state)
            return state
        stack.enter_context(heartbeating(store, task_id, settings.heartbeat))
        run = run_async
        if io_pool:
            call = stack.enter_context(
                running_io_call(store, claimed.record, agent, settings, watch)
            )
            run = call.run_async
        saved = _run(
            store, agent, claimed.record, settings, timeout_errors, on_run, run, send_later
        )
    final = state_of(saved.task) if saved.task else ""
    if not saved.applied:
        log.info("task %s: became %s while running; result discarded", task_id, final)
    return final


def _context_busy(store: Store, task: Task, send_later: SendLater | None) -> bool:
    """Whether a task that waits for its context (`shared.contexts`) must
    wait still: a busy task of it came first. It is then left `submitted`
    and looked at again a little later; each look tells the reaper it was
    just sent."""
    ahead = next(ahead_of(store, task), None)
    if ahead is None:
        return False
    delay = look_again_after(task, time.time())
    log.debug(
        "task %s: waits for task %s of its context (%s); looks again in %.1f s",
        task["id"],
        ahead["id"],
        state_of(ahead),
        delay,
    )
    if send_later is not None:
        send_later(task["id"], delay)
        store.resent(task["id"])
    return True


def _claim(store: Store, task_id: str, send_later: SendLater | None) -> Outcome:
    """Claim a `submitted` task (one that waits for its context once that
    is free), or take one released for another attempt."""
    holder = process_name()
    claimed = claim(store, task_id, to=WORKING, from_state=SUBMITTED, run=first_claim(holder))
    if claimed.applied or claimed.record is None:
        return claimed
    task = claimed.record.task
    if state_of(task) == SUBMITTED and waits_for_context(task):
        if _context_busy(store, task, send_later):
            return claimed
        return claim(
            store, task_id, to=WORKING, from_state=SUBMITTED, run=first_claim(holder), waiting=True
        )
    if state_of(task) != WORKING:
        return claimed
    if not takes_now(time.time())(claimed.record.task):
        return claimed
    return transition(
        store, task_id, partial(_taken, holder), from_states={WORKING}, when=takes_now(time.time())
    )


def _taken(holder: str, task: Task) -> list[Event]:
    event = status_update(task, WORKING)
    event["run"] = taken(holder)
    return [event]


def _run(
    store: Store,
    agent: Agent,
    claimed: Record,
    settings: Settings,
    timeout_errors: tuple[type[BaseException], ...],
    on_run: Callable[[], object] | None,
    run: RunAsync,
    send_later: SendLater | None,
) -> Outcome:
    """Drive the function, saving each yielded item, then its result."""
    epoch = run_of(claimed.task).epoch
    if agent.run is None:
        return _save(
            store,
            claimed,
            failed(agent.problem, Failure(AGENT_UNAVAILABLE)),
            agent,
            settings,
            epoch,
        )
    task_id = claimed.task["id"]
    counting = settings.attempts.most > 1  # else no later attempt reads the counts
    progress = RunProgress(run_of(claimed.task), counting=counting)
    # What a question this run ends with saves for the run of its answer:
    # the turn's last checkpoint (one attempt saves none while it runs).
    turn = run_of(claimed.task).checkpoint
    last_checkpoint = turn["value"] if turn is not None else None
    record, produced = claimed, False
    if on_run is not None:
        on_run()
    earlier = off_loop(conversation, store, claimed.task) if "conversation" in agent.inputs else []
    outputs = call(agent, claimed.task, run, earlier)
    try:
        while True:
            try:
                item = next(outputs)
            except StopIteration as stop:
                finish = final_change(stop.value, after_output=produced)
                if isinstance(stop.value, QUESTIONS):
                    finish = with_run(finish, asking(last_checkpoint))
                break
            if isinstance(item, Checkpoint):
                change = progress.checkpoint(item)  # (checks it is JSON)
                last_checkpoint = item.value
                if not counting:
                    continue  # one attempt: no later attempt resumes from it
            elif progress.already_published():
                produced = True
                continue
            else:
                change = progress.change(item)
            saved = _save(store, record, change, agent, settings, epoch)
            if not saved.applied or saved.record is None:
                return saved  # canceled, reaped or released meanwhile: stop the function here
            record, produced = saved.record, True
    except Retry as retry:
        ended = off_loop(
            end_without_outcome,
            store,
            task_id,
            settings.attempts,
            f"the agent asked to retry: {retry.reason}",
            cause=RETRIES_USED,
            epoch=epoch,
            asked=retry.after,
            current=record,
            on_terminal=agent.on_task,
        )
        if ended.retry_in is not None:
            queue_again(send_later, task_id, ended.retry_in)
        return ended.outcome
    except timeout_errors:
        finish = failed(f"timed out after {settings.time_limit:g} s", Failure(TIMED_OUT))
    except CallStopped as stopped:  # its time limit or a cancel (worker.engine.io_calls)
        finish = failed(str(stopped), Failure(TIMED_OUT))
    except UnsupportedResult as error:
        finish = failed(str(error), Failure(BAD_RESULT))
    except Exception as error:
        log.exception("task %s: fulfilment function raised", task_id)
        kind = type(error).__name__
        finish = failed(f"{kind}: {error}" if str(error) else kind, Failure(EXCEPTION, kind))
    finally:
        outputs.close()
    return _save(store, record, finish, agent, settings, epoch)


def _save(
    store: Store, running: Record, change: Change, agent: Agent, settings: Settings, epoch: int
) -> Outcome:
    """`_save_retrying`, off the loop in a green job (its retries sleep, and
    the user's hook runs on a terminal save)."""
    outcome = off_loop(_save_retrying, store, running, change, agent, settings, epoch)
    return index_failed(store, outcome)


def _save_retrying(
    store: Store,
    running: Record,
    change: Change,
    agent: Agent,
    settings: Settings,
    epoch: int,
) -> Outcome:
    """Save a change as a transition from `working` while this run (claimed
    at `epoch`) holds the task, retrying through a short store outage: the
    function has run, so its output is worth waiting for.
    Heartbeats go on meanwhile; after `stale_after` the reaper would fail the
    task anyway, so that is how long this tries before giving up."""
    deadline = time.monotonic() + settings.stale_after
    backoff = Backoff(initial=0.05, cap=2.0)
    known: Record | None = running  # heartbeats do not change the stored task
    tried = False
    while True:
        try:
            # A write whose reply was lost may have landed: not written twice.
            if tried and (landed := _landed(store, running, change, agent)) is not None:
                return landed
            tried = True
            return transition(
                store,
                running.task["id"],
                change,
                from_states={WORKING},
                current=known,
                on_terminal=agent.on_task,
                when=holds(epoch),
            )
        except StoreError as error:
            delay = backoff.next()
            if time.monotonic() + delay > deadline:
                raise
            log.warning("task %s: cannot save yet, retrying: %s", running.task["id"], error)
            time.sleep(delay)
            known = None


def _landed(store: Store, running: Record, change: Change, agent: Agent) -> Outcome | None:
    """The task as it stands, when the events logged right after `running`
    are `change`'s own (a write that landed though its caller heard an
    error); else None. The on_task hook runs if that write ended the task."""
    task_id = running.task["id"]
    record = store.read(task_id)
    if record is None or record.seq <= running.seq:
        return None
    ours = list(change(running.task))
    logged = [event for _, event in store.events(task_id, running.seq, len(ours))]
    if [identity(event) for event in logged] != [identity(event) for event in ours]:
        return None
    log.info("task %s: its save had landed though the store answered with an error", task_id)
    if agent.on_task is not None and is_terminal(state_of(record.task)):
        notify(agent.on_task, record.task)
    return Outcome(True, record)
