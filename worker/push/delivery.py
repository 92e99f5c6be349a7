"""Push delivery: a durable feed from each task's event log to its webhooks.

Nothing is delivered from a wake-up. For each (task, webhook) the push
store keeps a cursor (the last event the receiver answered 2xx to); a
delivery holds the pair's lease, reads the log after the cursor (through
`shared.store.follow`, so a trimmed start or a lost stretch becomes the Task
as it stands, never a silent gap), POSTs each event in order and moves the
cursor only after a 2xx. Beat's sweep (`sweep`) finds every pair whose
task has events past its cursor and whose lease is free (never taken, let
go, run out because its worker died, or parked until a retry is due),
books it and sends a delivery for it on the push queue. A delivery follows
its task for a while (TOOLNEXUS_PUSH_LINGER), unless the task is still
queued: then it sends what is there and leaves the rest to a later sweep.
So a lost message, a dead worker or a receiver that is down only delays an
event; it never drops one.

A booking is not a running delivery's lease: the first delivery to run
takes the pair over any booking, whoever's. Were the sweep to take the
pair's lease itself, a message that waited in the queue longer than the
lease (a worker starting up, or busy) would find the next sweep's lease
in its place and give up ("taken"), and so would every later one while
the wait stayed that long: nothing delivered at all.

Retries: a failed attempt parks the pair's lease until the next attempt
(exponential backoff with jitter, or the receiver's Retry-After on 429 and
503), and the sweep takes it up then; an event still failing after
TOOLNEXUS_PUSH_RETRY_FOR seconds is given up (logged, counted) and the
feed goes on with the next. A 4xx other than 408 and 429, a 3xx (redirects
are not followed) and an address the SSRF rules refuse are given up at once.
"""

from __future__ import annotations

import logging
import random
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from shared.codec import encode_bytes
from shared.dialects import stream_response
from shared.push.contract import Cursor, PushConfig, PushStore
from shared.push.http import Allowed, Answer, Refused, Webhook
from shared.push.signing import SIGNATURE_HEADER, Signer, signer
from shared.settings import Settings
from shared.store.contract import Record, Store
from shared.store.follow import follow
from shared.task import SUBMITTED, is_terminal, state_of
from worker.push.metrics import push_metrics

log = logging.getLogger(__name__)

EVENT_ID_HEADER = "X-A2A-Event-ID"
TOKEN_HEADER = "X-A2A-Notification-Token"
_RETRIED_4XX = frozenset({408, 429})
_RETRY_AFTER = frozenset({429, 503})

Send = Callable[[str, str, str], None]  # (task id, config id, lease holder)


class GaveUp(Exception):
    """Raised at the end of a delivery that gave an event up, so Flower shows it failed."""


@dataclass(frozen=True)
class Policy:
    retry_for: float
    backoff: float
    backoff_max: float
    connect_timeout: float
    read_timeout: float
    lease: float
    linger: float
    allowed: Allowed
    signer: Signer | None = None
    # How stale the stored cursor may be while deliveries succeed. Writing it
    # after every 2xx would cost a store round trip per event (a large share of
    # a delivery's time: docs/benchmark-figures.md has the profile); a worker
    # that dies re-POSTs at most this much, from the stored cursor on, in order
    # (at least once).
    cursor_every: float = 0.05

    @classmethod
    def of(cls, settings: Settings) -> Policy:
        return cls(
            retry_for=settings.push_retry_for,
            backoff=settings.push_backoff,
            backoff_max=settings.push_backoff_max,
            connect_timeout=settings.push_connect_timeout,
            read_timeout=settings.push_read_timeout,
            # Held across one whole attempt at least, so it never runs out mid-POST.
            lease=max(
                settings.push_lease, settings.push_connect_timeout + settings.push_read_timeout + 1
            ),
            linger=settings.push_linger,
            allowed=Allowed.parse(settings.push_allowed_hosts),
            signer=signer(settings),
        )

    @property
    def renew_after(self) -> float:
        one_post = self.connect_timeout + self.read_timeout + 1
        return min(self.lease / 3, self.lease - one_post)

    def delay(self, failures: int, retry_after: float | None) -> float:
        if retry_after is not None:
            # Honoured as asked; TOOLNEXUS_PUSH_RETRY_FOR still bounds the whole.
            return min(retry_after, self.retry_for)
        ceiling = min(self.backoff_max, self.backoff * 2 ** max(0, failures - 1))
        return random.uniform(ceiling / 2, ceiling)


def headers(
    config: PushConfig, event_id: int, body: bytes, sign: Signer | None = None
) -> dict[str, str]:
    found = {"Content-Type": "application/json", EVENT_ID_HEADER: str(event_id)}
    if sign is not None:
        found[SIGNATURE_HEADER] = sign.sign(config["url"], body)
    if "token" in config:
        found[TOKEN_HEADER] = config["token"]
    if "authentication" in config:
        auth = config["authentication"]
        found["Authorization"] = f"{auth['scheme']} {auth['credentials']}".rstrip()
    return found


def sweep(store: Store, push: PushStore, send: Send, lease: float) -> int:
    """Hand every (task, webhook) with events past its cursor and a free lease
    to a delivery; forget the push state of tasks that are gone, and stop
    sweeping tasks that are finished and delivered. The number handed out."""
    handed = 0
    for task_id in push.pushing():
        record = store.read(task_id)
        if record is None:
            push.forget(task_id)  # the task expired: its webhooks go with it
            continue
        behind = False
        configs = push.configs(task_id)
        for config in configs:
            if push.cursor(task_id, config["id"]).delivered >= record.seq:
                continue
            behind = True
            holder = uuid.uuid4().hex
            if push.book(task_id, config["id"], holder, lease):
                send(task_id, config["id"], holder)
                handed += 1
        if not behind and is_terminal(state_of(record.task)):
            push.done(task_id, [config["id"] for config in configs])
    return handed


def deliver(
    store: Store, push: PushStore, task_id: str, config_id: str, holder: str, policy: Policy
) -> str:
    """One delivery run for (task, webhook), as `holder`: POST what is past
    the cursor, in order, until caught up and the task quiet for
    `policy.linger` s, a failure parks it, or the lease is lost. It runs
    unless another delivery is running for the pair: a booking, its own or
    a later sweep's for a later message, gives way to it."""
    if not push.lease(task_id, config_id, holder, policy.lease):
        return "taken"
    renewed = time.monotonic()
    config = push.config(task_id, config_id)
    if config is None:
        push.release(task_id, config_id, holder)
        return "deleted"
    cursor = stored = push.cursor(task_id, config_id)
    written = time.monotonic()
    webhook = Webhook(config["url"], policy.allowed, policy.connect_timeout, policy.read_timeout)
    gave_up = cursor.given_up
    try:
        # Follows for `linger` s at most; what comes later, the next sweep hands
        # on. A task still in the queue is not waited for: a delivery holds a
        # worker slot, and lingering deliveries of queued tasks could take
        # every slot from the fulfilment that would start them.
        deadline = time.monotonic() + (0.0 if _queued(store, task_id) else policy.linger)
        idle = max(0.5, min(policy.linger, policy.lease / 3))
        for item in follow(
            store, task_id, cursor.delivered, deadline=deadline, idle=idle, reader="push"
        ):
            # Renewed once a third of the lease has gone (not on every event: on
            # Redis that is a round trip), and always while what is left of it
            # would not outlast one more POST, so it never runs out mid-POST.
            if time.monotonic() - renewed > policy.renew_after:
                if not push.lease(task_id, config_id, holder, policy.lease):
                    return "lost"  # another delivery has it now (this one stalled past it)
                renewed = time.monotonic()
            if item is not None:
                # The config is read again before each POST: once a delete is
                # answered, nothing more is sent for it (but a POST in flight).
                if push.config(task_id, config_id) is None:
                    push.release(task_id, config_id, holder)
                    return "deleted"
                seq, body = (item.seq, item.task) if isinstance(item, Record) else item
                payload = encode_bytes(stream_response(config.get("version", "1.0"), body))
                cursor, parked = _attempt(webhook, config, seq, payload, cursor, policy)
                if parked is not None:
                    push.set_cursor(task_id, config_id, cursor)
                    push.lease(task_id, config_id, holder, parked)  # the sweep takes it up then
                    if cursor.given_up > gave_up:
                        # An event given up earlier in this run is reported even
                        # though a later one waits for a retry.
                        raise _gave_up(task_id, config_id, cursor.given_up - gave_up)
                    return "retrying"
            # A give-up is stored at once; plain progress at most every cursor_every s
            # (and on a quiet tick), so a fast feed does not pay a write per event.
            if cursor != stored and (
                item is None
                or cursor.given_up != stored.given_up
                or time.monotonic() - written >= policy.cursor_every
            ):
                push.set_cursor(task_id, config_id, cursor)
                stored, written = cursor, time.monotonic()
        if cursor != stored:
            push.set_cursor(task_id, config_id, cursor)
        push.release(task_id, config_id, holder)
    finally:
        webhook.close()
    if cursor.given_up > gave_up:
        raise _gave_up(task_id, config_id, cursor.given_up - gave_up)
    return "delivered"


def _gave_up(task_id: str, config_id: str, events: int) -> GaveUp:
    return GaveUp(f"task {task_id}: webhook {config_id}: {events} event(s) given up")


def _queued(store: Store, task_id: str) -> bool:
    """Whether the task waits for a worker to start it."""
    record = store.read(task_id)
    return record is not None and state_of(record.task) == SUBMITTED


def _attempt(
    webhook: Webhook, config: PushConfig, seq: int, payload: bytes, cursor: Cursor, policy: Policy
) -> tuple[Cursor, float | None]:
    """POST one event: the cursor after it, and how long to park if it is to be retried."""
    metrics = push_metrics()
    where = f"task {config['taskId']}: webhook {config['id']}: event {seq}"
    started = time.monotonic()
    answer: Answer | None = None
    try:
        answer = webhook.post(payload, headers(config, seq, payload, policy.signer))
    except Refused as error:
        log.warning("%s: not sent: %s", where, error)
        return _given_up(cursor, seq, "refused"), None
    except OSError as error:
        problem = f"no answer ({type(error).__name__}: {error})"
    except Exception as error:  # http.client's protocol errors
        problem = f"no valid answer ({type(error).__name__})"
    metrics.post_seconds.observe(time.monotonic() - started)
    if answer is not None:
        if 200 <= answer.status < 300:
            metrics.delivered.inc()
            return Cursor(delivered=seq, given_up=cursor.given_up), None
        problem = f"answered {answer.status}"
        if answer.status < 400:
            log.warning("%s: %s: redirects are not followed; given up", where, problem)
            return _given_up(cursor, seq, "redirect"), None
        if answer.status < 500 and answer.status not in _RETRIED_4XX:
            log.warning("%s: %s: not retried; given up", where, problem)
            return _given_up(cursor, seq, "rejected"), None
    now = time.time()
    since = cursor.since or now
    if now - since >= policy.retry_for:
        log.warning(
            "%s: %s; failing for %.0f s (TOOLNEXUS_PUSH_RETRY_FOR): given up",
            where,
            problem,
            now - since,
        )
        return _given_up(cursor, seq, "expired"), None
    failures = cursor.failures + 1
    retry_after = (
        answer.retry_after if answer is not None and answer.status in _RETRY_AFTER else None
    )
    delay = policy.delay(failures, retry_after)
    log.info("%s: %s; attempt %d failed, retrying in %.2f s", where, problem, failures, delay)
    metrics.retries.inc()
    return Cursor(cursor.delivered, failures, since, cursor.given_up), delay


def _given_up(cursor: Cursor, seq: int, reason: str) -> Cursor:
    push_metrics().given_up.labels(reason).inc()
    return Cursor(delivered=seq, given_up=cursor.given_up + 1)


class PushThread:
    """Embedded mode's push delivery: the sweep on a thread, each delivery on
    a small pool; the same feed, cursors and leases as with Celery."""

    def __init__(
        self, store: Store, push: PushStore, settings: Settings, *, threads: int = 4
    ) -> None:
        self._store, self._push = store, push
        self._policy = Policy.of(settings)
        self._every = settings.push_sweep
        self._stopping = threading.Event()
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="toolnexus-push")
        self._thread = threading.Thread(target=self._run, name="toolnexus-push-sweep", daemon=True)

    def start(self) -> PushThread:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join()
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _run(self) -> None:
        while not self._stopping.wait(self._every):
            try:
                sweep(self._store, self._push, self._send, self._policy.lease)
            except Exception:
                log.exception("push sweep failed; it runs again in %g s", self._every)

    def _send(self, task_id: str, config_id: str, holder: str) -> None:
        self._pool.submit(self._deliver, task_id, config_id, holder)

    def _deliver(self, task_id: str, config_id: str, holder: str) -> None:
        try:
            deliver(self._store, self._push, task_id, config_id, holder, self._policy)
        except GaveUp as error:
            log.info("%s", error)
        except Exception:
            log.exception("task %s: webhook %s: delivery failed", task_id, config_id)


def push_feed(store: Store, settings: Settings) -> tuple[Store, PushStore] | None:
    """The store and its push state, when push is on and the store keeps both."""
    push = store.push_store(settings.task_ttl) if settings.push else None
    if push is None:
        return None
    return store, push


def push_thread(store: Store, settings: Settings) -> PushThread | None:
    """Started when `push_feed` has something to deliver from; else None."""
    feed = push_feed(store, settings)
    return PushThread(*feed, settings).start() if feed is not None else None
