"""The Celery app: configuration, the fulfil task and the reaper on beat.

Reliability settings, chosen together (docs/workers.md explains each):

- late acks + reject on worker lost: a message is acknowledged only after
  the task ran, so a worker that dies mid-task gives it back to the broker;
- prefetch multiplier 1: a worker holds no more messages than it runs, so
  a dying worker strands nothing it had not started;
- soft limit = TOOLNEXUS_TIME_LIMIT (fails the task "timed out"), hard limit
  30 s later (kills the process; the reaper then fails the task);
- RabbitMQ (shared.broker.amqp) has no visibility timeout: it redelivers
  an unacknowledged message when the consumer's channel closes, so its
  consumer_timeout (30 min by default) must exceed the hard limit;
- Redis visibility_timeout > hard limit: a message is redelivered only when
  its worker cannot possibly still be running it; the redelivered copy finds
  the task terminal or `working` and does nothing (see worker.engine.fulfil);
- heartbeat < stale_after (Settings enforces it) < visibility_timeout: the
  reaper fails a dead worker's task before the broker would redeliver it;
- TOOLNEXUS_POOL picks the pool (worker.runtime.pools): in the I/O modes the
  worker itself keeps the time limit, which Celery's thread pool cannot.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any

from celery import Celery, bootsteps
from celery.exceptions import SoftTimeLimitExceeded
from kombu.entity import Queue

from shared.broker.amqp import CONFIRM_TIMEOUT, amqp_config, is_amqp
from shared.broker.backlog import SENT_AT, sent_at
from shared.broker.dispatch import CeleryDispatcher
from shared.broker.dispatcher import (
    FULFIL_TASK,
    PUSH_SWEEP_TASK,
    PUSH_TASK,
    REAP_TASK,
    is_resend,
    resend_id,
)
from shared.broker.redis import LOST_CONNECTIONS, broker_transport, celery_broker
from shared.errors import StoreError
from shared.ops.tracing import continuing, enable
from shared.owners.turns import SlotKeeper, Turns, turns_for
from shared.push.contract import PushStore
from shared.settings import Settings
from shared.store.contract import Store
from shared.store.wiring import abilities_of, open_store
from worker.engine.agent import Agent, agent_or_problem
from worker.engine.green_jobs import off_loop
from worker.engine.observe import observed_fulfil
from worker.engine.reaper import Resending, sweep
from worker.engine.retries import hand_back
from worker.push.delivery import GaveUp, Policy, deliver, push_feed
from worker.push.delivery import sweep as sweep_push
from worker.runtime.cancel import register_cancel
from worker.runtime.handback import handing_back, holder_of, lost_requests
from worker.runtime.outcome import TaskFailed, celery_result
from worker.runtime.pools import (
    celery_pool,
    concurrency,
    run_on_loop,
    store_connections,
    uses_io_pool,
)
from worker.runtime.presence import fleet_presence
from worker.runtime.signals import bind_deliveries

log = logging.getLogger(__name__)

# Beyond the hard time limit, so the broker never redelivers a running task.
VISIBILITY_MARGIN = 60.0
# Seconds between AMQP heartbeats: a connection that misses two is given up.
AMQP_HEARTBEAT = 10
# Store outages are retried with backoff capped well below visibility_timeout
# (a delayed retry message waits unacknowledged in the worker meanwhile).
STORE_RETRIES = 5
STORE_RETRY_BACKOFF_MAX = 30
STORE_RETRIED: dict[str, Any] = {
    "autoretry_for": (StoreError,),
    "max_retries": STORE_RETRIES,
    "retry_backoff": True,
    "retry_backoff_max": STORE_RETRY_BACKOFF_MAX,
}


def recheck_after(settings: Settings) -> float:
    """When the reaper has surely failed a task whose worker died just now."""
    return settings.stale_after + 2 * settings.reap_every


def visibility_timeout(settings: Settings) -> float:
    return settings.hard_time_limit + VISIBILITY_MARGIN


def celery_config(settings: Settings) -> dict[str, Any]:
    url, sentinel = celery_broker(settings.broker_url, settings.sentinel_password)
    transport_options = {
        "visibility_timeout": visibility_timeout(settings),
        **LOST_CONNECTIONS,
        **sentinel,
    }
    config: dict[str, Any] = {
        "broker_url": url,
        "broker_transport": broker_transport(settings.broker_url),
        "broker_connection_retry_on_startup": True,
        "broker_transport_options": transport_options,
        "task_default_queue": settings.queue,
        # A worker started without -Q consumes both; `-Q push` makes a
        # delivery-only worker, so a slow webhook never delays fulfilment.
        "task_queues": (Queue(settings.queue), Queue(settings.push_queue)),  # type: ignore[no-untyped-call]
        "task_routes": {PUSH_TASK: {"queue": settings.push_queue}},
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        # A task whose A2A outcome is failed raises (worker.runtime.outcome) so Flower
        # shows it failed; its message is still acknowledged, never redelivered.
        "task_acks_on_failure_or_timeout": True,
        # A lost broker connection must not abort running tasks: their
        # redelivered copies are no-ops, so letting them finish loses nothing.
        "worker_cancel_long_running_tasks_on_connection_loss": False,
        "worker_prefetch_multiplier": 1,
        "task_soft_time_limit": settings.time_limit,
        "task_time_limit": settings.hard_time_limit,
        "task_ignore_result": True,  # the task store is the source of truth
        "result_backend": None,
        "worker_send_task_events": True,
        "task_send_sent_event": True,
        "task_serializer": "json",
        "accept_content": ["json"],
        "beat_scheduler": "worker.runtime.beat:ReapingScheduler",
        # In TOOLNEXUS_STATE_DIR (made on start), not beat's working directory.
        "beat_schedule_filename": str(settings.beat_schedule),
        "beat_schedule": {
            "toolnexus-reap-stale": {
                "task": REAP_TASK,
                "schedule": settings.reap_every,
                # Run by beat itself (worker.runtime.beat); should another scheduler
                # send it instead, a backlog of reaps collapses to the next one.
                "options": {"queue": settings.queue, "expires": settings.reap_every},
            },
            "toolnexus-push-sweep": {
                "task": PUSH_SWEEP_TASK,
                "schedule": settings.push_sweep,
                "options": {"queue": settings.push_queue, "expires": settings.push_sweep},
            },
        },
    }
    if is_amqp(settings.broker_url):
        queues = (settings.queue, settings.push_queue)
        config.update(amqp_config(queues, settings.amqp_queue_type, {}))
        # A connection lost without a word is found by its missed heartbeats.
        config["broker_heartbeat"] = AMQP_HEARTBEAT
    config["worker_pool"] = celery_pool(settings)
    if (calls := concurrency(settings)) is not None:
        config["worker_concurrency"] = calls
    return config


class ProcessRuntime:
    """The store and agent of the current process, made on first use.

    Keyed by process id: a prefork child must not share its parent's Redis
    connections, so each process resolves its own after the fork.
    """

    def __init__(self, settings: Settings, store: Store | None = None) -> None:
        self._settings = settings
        self._given_store = store
        self._lock = threading.Lock()
        self._pid = -1
        self._store: Store | None = None
        self._agent: Agent | None = None
        self._turns: Turns | None = None
        self._turns_pid = -1

    def store(self) -> Store:
        if self._given_store is not None:
            return self._given_store
        store, _ = self._current()
        return store

    def agent(self) -> Agent:
        _, agent = self._current()
        return agent

    def turns(self) -> Turns | None:
        """This process's turn taking, publishing what has its turn as the
        front end does (None: off, or a store that keeps no turn book)."""
        store = self.store()
        with self._lock:
            if self._turns is None or self._turns_pid != os.getpid():
                can = abilities_of(store)
                self._turns = turns_for(
                    self._settings,
                    can.turn_book,
                    CeleryDispatcher(self._settings).enqueue,
                    release_on_commit=can.release_on_commit,
                )
                self._turns_pid = os.getpid()
            return self._turns

    def delivered(self, task_id: str, state: str) -> None:
        """Make room in the turn book after a delivery; beat's sweep does it
        should this fail."""
        try:
            if (turns := self.turns()) is not None:
                turns.delivered(task_id, state)
        except Exception as error:
            log.warning("task %s: could not make room after it: %s", task_id, error)

    def _current(self) -> tuple[Store, Agent]:
        with self._lock:
            if self._pid != os.getpid() or self._store is None or self._agent is None:
                settings = self._settings
                self._store = open_store(settings, connections=store_connections(settings))
                self._agent = agent_or_problem(self._settings)
                self._pid = os.getpid()
            return self._store, self._agent


def create_celery(settings: Settings, *, store: Store | None = None) -> Celery:
    """A Celery app for `settings`; `store` overrides TOOLNEXUS_STORE (tests)."""
    app = Celery("toolnexus", set_as_current=False)
    app.conf.update(celery_config(settings))
    runtime = ProcessRuntime(settings, store)
    io_pool = uses_io_pool(settings)
    bind_deliveries()
    register_cancel()
    enable("toolnexus-worker")

    # shared=False: each app keeps its own tasks (closures over its own
    # settings and store) instead of Celery registering them in every app.
    def hand_back_run(task_id: str, pid: int, reason: str) -> bool:
        ended = hand_back(
            runtime.store(),
            task_id,
            holder_of(pid),
            settings.attempts,
            reason,
            send_later=send_later,
            on_terminal=runtime.agent().on_task,
        )
        return ended is not None and ended.outcome.applied

    # With more than one attempt, a run this worker loses is handed back at once.
    retrying = settings.attempts.most > 1
    requests = {"Request": lost_requests(hand_back_run)} if retrying else {}

    @app.task(  # type: ignore[untyped-decorator]
        bind=True,
        name=FULFIL_TASK,
        shared=False,
        **STORE_RETRIED,
        **requests,
        throws=(TaskFailed,),  # an expected outcome: logged without a traceback
    )
    def fulfil_task(self: Any, task_id: str) -> str:
        store = runtime.store()
        with continuing(f"process {FULFIL_TASK}", self.request.get, {"toolnexus.task_id": task_id}):
            state = observed_fulfil(
                store,
                task_id,
                runtime.agent(),
                settings,
                timeout_errors=(SoftTimeLimitExceeded,),
                io_pool=io_pool,
                send_later=send_later,
                sent=_sent_at(self.request.get(SENT_AT)),
            )
            off_loop(runtime.delivered, task_id, state)
            return celery_result(
                task_id,
                state,
                read=lambda: off_loop(store.get, task_id),
                announce_revoked=lambda: self.send_event(
                    "task-revoked", terminated=False, signum=None, expired=False
                ),
                redelivered=redelivered(self.request),
                resent=is_resend(self.request.id, task_id),
                recheck=lambda: self.retry(countdown=recheck_after(settings)),
            )

    # An async agent's deliveries wait on the loop, holding no thread.
    run_on_loop(fulfil_task, lambda: io_pool and runtime.agent().is_async)

    def send_later(task_id: str, delay: float) -> None:
        # The reaper's resend and a task's next attempt: a Celery id of its
        # own, so that a copy never shares the running message's entry in a
        # worker (shared.broker.dispatcher).
        app.send_task(
            FULFIL_TASK,
            args=[task_id],
            task_id=resend_id(task_id),
            queue=settings.queue,
            headers=sent_at(),
            countdown=delay or None,
            confirm_timeout=CONFIRM_TIMEOUT,  # beat must not wait on RabbitMQ for ever
        )

    def send(task_id: str) -> None:
        send_later(task_id, 0.0)

    @app.task(name=REAP_TASK, shared=False)  # type: ignore[untyped-decorator]
    def reap_task() -> list[str]:
        store, hook = runtime.store(), runtime.agent().on_task
        return sweep(
            store,
            send,
            time.time(),
            settings.stale_after,
            hook,
            input_timeout=settings.input_timeout,
            turns=runtime.turns(),
            resending=Resending.of(settings),
            attempts=settings.attempts,
            send_later=send_later,
        )

    register_push(app, settings, runtime)
    app.steps["worker"].add(slot_keeping(settings, runtime))
    app.steps["worker"].add(fleet_presence(settings, runtime.store))
    if retrying:
        app.steps["worker"].add(handing_back(settings.drain_timeout, hand_back_run))
    return app


def _sent_at(header: object) -> float | None:
    """The message's SENT_AT header as a time (None: absent or not a number)."""
    return float(header) if isinstance(header, int | float) else None


def redelivered(request: Any) -> bool:
    """Whether the broker delivered this message before: the delivery that
    had it ended without acknowledging it (a pool process lost, a worker
    killed or cut off)."""
    return bool((request.delivery_info or {}).get("redelivered"))


def slot_keeping(settings: Settings, runtime: ProcessRuntime) -> type[bootsteps.StartStopStep]:
    """A worker bootstep that keeps the worker's slots in the turn book
    while it consumes (every worker, the programs' and tests' alike)."""

    class SlotKeeping(bootsteps.StartStopStep):  # type: ignore[misc]
        requires = ("celery.worker.components:Pool",)

        def __init__(self, worker: Any, **kwargs: Any) -> None:
            super().__init__(worker, **kwargs)
            self.keeper: SlotKeeper | None = None

        def start(self, worker: Any) -> None:
            # A delivery-only worker (`-Q push`) takes no fulfilment: its slots
            # would widen the window for work nobody there runs.
            consuming = getattr(worker.app.amqp.queues, "consume_from", None)
            if consuming and settings.queue not in consuming:
                return
            turns = runtime.turns()
            if turns is None:
                return
            slots = int(getattr(worker, "concurrency", 1) or 1)
            self.keeper = SlotKeeper(
                turns,
                str(worker.hostname),
                slots,
                every=settings.heartbeat,
                ttl=settings.stale_after,
            ).start()

        def stop(self, worker: Any) -> None:
            if self.keeper is not None:
                self.keeper.stop()
                self.keeper = None

    return SlotKeeping


def register_push(app: Celery, settings: Settings, runtime: ProcessRuntime) -> None:
    """The delivery task (on the push queue) and beat's sweep for it."""
    policy = Policy.of(settings)

    def pushing() -> tuple[Store, PushStore] | None:
        return push_feed(runtime.store(), settings)

    @app.task(  # type: ignore[untyped-decorator]
        name=PUSH_TASK,
        shared=False,
        **STORE_RETRIED,
        throws=(GaveUp,),  # logged without a traceback; Flower shows it failed
    )
    def push_task(task_id: str, config_id: str, holder: str) -> str:
        found = pushing()
        if found is None:
            return "push notifications are off"
        store, push = found
        return deliver(store, push, task_id, config_id, holder, policy)

    def send(task_id: str, config_id: str, holder: str) -> None:
        app.send_task(
            PUSH_TASK,
            args=[task_id, config_id, holder],
            queue=settings.push_queue,
            headers=sent_at(),
            confirm_timeout=CONFIRM_TIMEOUT,  # beat must not wait on RabbitMQ for ever
        )

    @app.task(name=PUSH_SWEEP_TASK, shared=False)  # type: ignore[untyped-decorator]
    def push_sweep_task() -> int:
        found = pushing()
        if found is None:
            return 0
        store, push = found
        return sweep_push(store, push, send, policy.lease)
