"""What the A2A methods do, on stored-shape tasks; no wire format here.

Creating a task is the store's `create` (idempotent by messageId); every
later change (continue, cancel, failing a task that could not be queued) is
a `shared.transitions.transition`, so it obeys the one state machine and
never overwrites a terminal state a worker wrote first.

Every task belongs to the caller that created it (`owner`; "" when the
service runs without auth). Another caller is told the task does not exist.
Once a task is saved, any error on the way out names it (`TaskError`), so
the peer can ask GetTask instead of sending again.

With per-owner send limits a send is admitted before anything of it is
saved (`web.core.send_limits`); with fair turns a saved task waits in the
store's turn book until its owner's turn (`shared.owners.turns`).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass

from shared.broker.dispatcher import Dispatcher
from shared.broker.outbox import outbox_for
from shared.broker.wiring import dispatcher_abilities
from shared.contexts import INTERRUPT, PARALLEL, REJECT
from shared.errors import (
    ContextTaken,
    InvalidTransition,
    StoreError,
    TaskNotCancelable,
    TaskNotFound,
)
from shared.events import Event, message_added, status_update, to_state
from shared.generation import UNKNOWN, counts, generation_of
from shared.owners.admission import Admission
from shared.owners.turns import turns_for
from shared.push.contract import PushConfig, PushStore, TooManyConfigs
from shared.quoting import shown
from shared.settings import Settings
from shared.store.contract import Created, Record, Store, message_key
from shared.store.follow import follow
from shared.store.wiring import CreateHeld, abilities_of
from shared.task import (
    CANCELED,
    INTERRUPTED_STATES,
    REJECTED,
    SUBMITTED,
    Message,
    Task,
    agent_message,
    is_terminal,
    new_task,
    state_of,
)
from shared.transitions import OnTerminal, transition
from web.core.errors import (
    ContentTypeNotSupported,
    InvalidParams,
    PushNotSupported,
    TaskError,
    TaskGenerationMismatch,
)
from web.core.finished import FinishedTasks
from web.core.media import accepts
from web.core.params import SendParams, TaskQuery, WebhookParams
from web.core.read_ahead import read_task
from web.core.retries import is_latest, moved_on
from web.core.same_context import marked, policy_of, refusal, refuse_if_busy, to_interrupt
from web.core.send_limits import SendLimits

log = logging.getLogger(__name__)

# Seconds a front-end process makes no outbox message after the store
# neither queued nor kept one (its turn book holding too many tasks): a
# flood of held sends then makes one message a second that is thrown away.
OUTBOX_PAUSE = 1.0


@dataclass(frozen=True)
class Sent:
    """What a send produced: the task as it stands, the number of its last
    event (where a stream of it starts), and the agent's direct reply if it
    answered with a message instead of a task result."""

    task: Task
    seq: int
    reply: Message | None = None
    repeated: bool = False  # an earlier send of the same message made the task


def owns(task: Task, owner: str) -> bool:
    return task.get("owner", "") == owner


def owned(task: Task | None, task_id: str, owner: str) -> Task:
    """`task` if `owner` created it; otherwise it does not exist for them."""
    if task is None or not owns(task, owner):
        raise TaskNotFound(f"task {task_id} not found")
    return task


class Tasks:
    def __init__(
        self,
        settings: Settings,
        store: Store,
        dispatcher: Dispatcher,
        hook: OnTerminal | None = None,
        *,
        admission: Admission | None = None,
    ) -> None:
        """`admission`: the owners' send limits (`shared.owners.admission`),
        None when none is set."""
        self.store = store
        self.dispatcher = dispatcher
        self.blocking_timeout = settings.blocking_timeout
        self.long_poll_timeout = settings.long_poll_timeout
        self.keepalive = settings.keepalive
        self.input_modes = settings.input_modes
        self.idempotent = settings.idempotent_sends
        self.same_context = settings.same_context
        self._hook = hook
        self.push: PushStore | None = store.push_store(settings.task_ttl) if settings.push else None
        self.max_webhooks = settings.push_max_configs
        budget = settings.finished_cache_mb * 2**20
        self.finished = FinishedTasks(budget, settings.task_ttl) if budget else None
        self.limits = SendLimits(admission, store, self.finished) if admission else None
        # What the store and the dispatcher can do, read once (the wiring's).
        can, broker = abilities_of(store), dispatcher_abilities(dispatcher)
        # Fair turns over owners: a send is held in the store's turn book and
        # published when its turn comes (shared.owners.turns).
        self.turns = turns_for(
            settings,
            can.turn_book if broker.takes_turns else None,
            dispatcher.enqueue,
            dispatcher.check,
            release_on_commit=can.release_on_commit,
        )
        # A store that saves a task and holds it in its own turn book in one
        # step (Redis: one round trip for both), when the turns are on that book.
        held = can.create_held if self.turns is not None else None
        self._create_held: CreateHeld | None = held
        # A broker that is a database of that store's own Redis server: the
        # send's message goes with that step, and is queued by whichever step
        # takes the task (`shared.broker.outbox`).
        self._outbox = (
            outbox_for(can.redis_server, broker.outbox, broker.redis_server, self._pause_outbox)
            if held
            else None
        )
        self._outbox_resumes = 0.0  # monotonic: while the store keeps no message

    def send(self, params: SendParams, owner: str, *, blocking: bool) -> Sent:
        # The bound counts from the request, not from the end of saving and
        # queueing it, which a flood of sends can stretch.
        deadline = time.monotonic() + self.blocking_timeout
        sent = self.accept(params, owner)
        if not blocking:
            return sent
        try:
            return self._wait_for_outcome(sent, deadline)
        except StoreError as error:
            raise TaskError(error, sent.task["id"]) from error

    def accept(self, params: SendParams, owner: str) -> Sent:
        """Save the message as a new task or a follow-up and queue it; a
        message already accepted (same caller, same messageId) is not
        accepted again: its task is returned as it stands."""
        for index, media_type in enumerate(params.media_types):
            if not accepts(self.input_modes, media_type):
                raise ContentTypeNotSupported(
                    f"message.parts[{index}] is {shown(media_type)}; this agent accepts"
                    f" {', '.join(self.input_modes)}"
                )
        if self.limits is not None:
            self.limits.take(owner)  # the owner's rate: before anything is saved
        if params.task_id is None:
            policy = policy_of(params.message, self.same_context)
            if params.context_id is None:
                policy = PARALLEL  # a new context: nothing in it to wait for
            if policy == REJECT:
                refuse_if_busy(self.store, owner, params.context_id)
            sent, fresh = self._create(params, owner, policy)
            if fresh and policy in (REJECT, INTERRUPT):
                self._settle_context(sent.task, policy, owner)
        else:
            sent, fresh = self._resume(params, owner)
        if fresh:
            self._enqueue(sent.task)
        return sent

    def _settle_context(self, task: Task, policy: str, owner: str) -> None:
        """After a fresh task is saved into a context that may be busy:
        `reject` ends it if a busy task came first; `interrupt` cancels the
        busy ones (the new task waits for them to stop, `shared.contexts`)."""
        try:
            if policy == REJECT:
                if (error := refusal(self.store, task)) is not None:
                    transition(
                        self.store,
                        task["id"],
                        to_state(REJECTED, agent_message(str(error))),
                        on_terminal=self._hook,
                    )
                    self._out_of_turn(task["id"])
                    raise error
                return
            for busy in to_interrupt(self.store, task):
                # One that ended meanwhile left the context free of itself.
                with contextlib.suppress(TaskNotCancelable):
                    self.cancel(busy["id"], owner)
        except StoreError as error:
            raise TaskError(error, task["id"]) from error

    def get(self, query: TaskQuery, owner: str) -> Task:
        """The task as it stands; a finished one this process has read before
        comes from its memory (`web.core.finished`), checked as any other.
        With `current_generation` (A2A 1.1's long-poll), once its generation
        is past that, or `long_poll_timeout` seconds on."""
        finished = self.finished
        task = finished.get(query.task_id) if finished is not None else None
        if task is None:
            if query.current_generation is not None:
                return self._long_poll(query, owner)
            task = read_task(query.task_id, self.store.get)
            if finished is not None and task is not None:
                finished.keep(task)
        return owned(task, query.task_id, owner)

    def keeps(self, task_id: str) -> bool:
        """Whether `get` answers for the task from this process's memory."""
        return self.finished is not None and self.finished.holds(task_id)

    def _long_poll(self, query: TaskQuery, owner: str) -> Task:
        """A long-poll GetTask: it waits until the task's generation passes
        `current_generation` (answers at once when it already has, when it
        keeps none, or when it stopped for good), on the store's watch: the
        change may come from any process."""
        assert query.current_generation is not None
        deadline = time.monotonic() + self.long_poll_timeout
        record = self.store.read(query.task_id)
        task = owned(record.task if record is not None else None, query.task_id, owner)
        if record is None or not _behind(task, query.current_generation):
            return task
        for _ in self._until_past(query.task_id, query.current_generation, record.seq, deadline):
            pass
        return owned(self.store.get(query.task_id), query.task_id, owner)

    def long_poll_steps(
        self, query: TaskQuery, owner: str, deadline: float, nudge: Callable[[], object]
    ) -> Generator[None, None, None]:
        """A long-poll's wait alone, for an event loop to drive: it never
        blocks, but yields None where it would wait, and `nudge` is called
        (from the waking thread) when it may go on (as a stream's follower,
        `shared.store.follow.follow`). It ends once the task's generation is
        past `current_generation`, at once when `_long_poll` would answer at once
        (or the task is not the caller's), or at `deadline`; the answer is
        then GetTask's plain read."""
        assert query.current_generation is not None
        finished = self.finished
        if finished is not None and finished.get(query.task_id) is not None:
            return  # finished: it never changes again
        record = self.store.read(query.task_id)
        if record is None or not owns(record.task, owner):
            return
        if _behind(record.task, query.current_generation):
            yield from self._until_past(
                query.task_id, query.current_generation, record.seq, deadline, nudge
            )

    def _until_past(
        self,
        task_id: str,
        current: int,
        after: int,
        deadline: float,
        nudge: Callable[[], object] | None = None,
    ) -> Generator[None, None, None]:
        """The task's events after `after`, followed until one (or the task as
        it stands, after a gap) carries a generation past `current` or an
        unknown one, or until `deadline`; None where a nudged follower waits."""
        quiet = deadline - time.monotonic() + 1  # no idle ticks: nobody to keep alive
        following = follow(
            self.store, task_id, after, deadline=deadline, idle=quiet, reader="wait", nudge=nudge
        )
        try:
            for item in following:
                if item is None:
                    if nudge is not None:
                        yield None
                    continue
                now = item.task if isinstance(item, Record) else item[1]
                if not counts(now) and not isinstance(item, Record):
                    continue
                if generation_of(now) > current or generation_of(now) == UNKNOWN:
                    return
        finally:
            close: Callable[[], object] = getattr(following, "close", lambda: None)
            close()  # its watch ends now, not when the follower is collected

    def cancel(self, task_id: str, owner: str) -> Task:
        owned(self.store.get(task_id), task_id, owner)
        outcome = transition(self.store, task_id, to_state(CANCELED), on_terminal=self._hook)
        if outcome.task is None:
            raise TaskNotFound(f"task {task_id} not found")
        if not outcome.applied:
            raise TaskNotCancelable(
                f"task {task_id} is {state_of(outcome.task)}; it can no longer be canceled"
            )
        try:
            self.dispatcher.revoke(task_id)
        except Exception:  # the stored `canceled` already wins over a late worker
            log.warning("could not revoke task %s", task_id, exc_info=True)
        self._out_of_turn(task_id)
        return outcome.task

    def _out_of_turn(self, task_id: str) -> None:
        """A finished task leaves the turn book (if it waited there, its turn
        goes to the next); beat's sweep does it should this fail."""
        if self.turns is None:
            return
        try:
            self.turns.released([task_id])
        except Exception:
            log.warning("task %s: could not leave the turn book", task_id, exc_info=True)

    # --- push notification configs ----------------------------------------------

    def set_webhook(
        self, task_id: str, webhook: WebhookParams, owner: str, version: str
    ) -> PushConfig:
        push = self._push()
        owned(self.store.get(task_id), task_id, owner)
        return self._put_webhook(push, task_id, webhook, version)

    def webhook(self, task_id: str, config_id: str | None, owner: str) -> PushConfig:
        push = self._push()
        owned(self.store.get(task_id), task_id, owner)
        found = push.config(task_id, config_id or task_id)
        if found is None:
            raise TaskNotFound(f"task {task_id} has no push notification config {config_id}")
        return found

    def webhooks(self, task_id: str, owner: str) -> list[PushConfig]:
        push = self._push()
        owned(self.store.get(task_id), task_id, owner)
        return push.configs(task_id)

    def delete_webhook(self, task_id: str, config_id: str | None, owner: str) -> None:
        """Idempotent: deleting a config that is gone is no error."""
        push = self._push()
        owned(self.store.get(task_id), task_id, owner)
        push.delete(task_id, config_id or task_id)

    def _push(self) -> PushStore:
        if self.push is None:
            raise PushNotSupported("push notifications are not supported by this agent")
        return self.push

    def _put_webhook(
        self, push: PushStore, task_id: str, webhook: WebhookParams, version: str
    ) -> PushConfig:
        config: PushConfig = {
            "id": webhook.config_id or task_id,
            "taskId": task_id,
            "url": webhook.url,
            "version": version,
        }
        if webhook.token is not None:
            config["token"] = webhook.token
        if webhook.scheme is not None:
            config["authentication"] = {
                "scheme": webhook.scheme,
                "credentials": webhook.credentials or "",
            }
        try:
            push.put(config, self.max_webhooks)
        except TooManyConfigs as error:
            raise InvalidParams(str(error), field="id") from None
        return config

    def _create(self, params: SendParams, owner: str, policy: str) -> tuple[Sent, bool]:
        task = marked(new_task(params.message, params.context_id, owner or None), policy)
        push = self._push() if params.webhook is not None else None  # refused before anything
        key = message_key(owner, params.message["messageId"]) if self.idempotent else None
        limits = self.limits
        reserved = limits is not None and limits.reserve(owner, task["id"], key, params.message)
        try:
            created = self._first_create(task, key, held=push is None)
        except ContextTaken as error:
            if reserved and limits is not None:
                limits.unreserve(owner, task["id"])
            raise InvalidParams(str(error), field="message.contextId") from None
        if not created.created and moved_on(created.task, params.message):
            # The caller continued or canceled the task this message id made:
            # it cannot be a retry of a lost reply (that caller never knew the
            # task), so it is a new message that reuses the id.
            created = self.store.create(task, key, supersedes=created.task["id"])
        if reserved and limits is not None and not created.created:
            limits.unreserve(owner, task["id"])  # a retry: its task holds its slot
        if push is not None and params.webhook is not None:
            # Saved once the task exists (a retry's goes with the task it made)
            # and before it is queued: the feed starts at the task's first
            # event, so none passes unseen, and the sweep, which forgets the
            # webhooks of a task it cannot find, never sees one without its task.
            self._put_webhook(push, created.task["id"], params.webhook, params.version)
        if created.created:
            return Sent(created.task, 1), True
        return self._as_it_stands(created.task["id"]), False

    def _first_create(self, task: Task, key: str | None, *, held: bool) -> Created:
        """The store's create; with `held`, the task held in the turn book by
        the same step where the store can (its `Turns.enqueue` then finds
        it held, and what the step took). Not with a webhook: that is saved
        after the task and before the task is queued."""
        if held and self._create_held is not None and self.turns is not None:
            entry = self.turns.entry(task)
            outbox = None
            if self._outbox is not None and time.monotonic() >= self._outbox_resumes:
                outbox = self._outbox(task["id"])
            return self._create_held(task, key, entry, self.turns.fair, outbox)
        return self.store.create(task, key)

    def _pause_outbox(self) -> None:
        self._outbox_resumes = time.monotonic() + OUTBOX_PAUSE

    def _resume(self, params: SendParams, owner: str) -> tuple[Sent, bool]:
        assert params.task_id is not None
        task_id = params.task_id
        task = owned(self.store.get(task_id), task_id, owner)
        if params.context_id and params.context_id != task.get("contextId"):
            raise InvalidParams(
                f"message.contextId does not match task {task_id}'s context",
                field="message.contextId",
            )

        def resume(current: Task) -> list[Event]:
            if self.idempotent and is_latest(current, params.message):
                return []  # this very message was applied already
            # Checked on the task the write is computed from: the store's
            # compare-and-append refuses the write if another came between.
            _require_generation(current, params.if_generation_match)
            return [
                message_added(current, params.message),
                status_update(current, SUBMITTED),
            ]

        outcome = transition(self.store, task_id, resume, from_states=INTERRUPTED_STATES)
        if outcome.record is None:
            raise TaskNotFound(f"task {task_id} not found")
        if outcome.applied:
            return Sent(outcome.record.task, outcome.record.seq), True
        if self.idempotent and is_latest(outcome.record.task, params.message):
            return self._as_it_stands(task_id), False
        _require_generation(outcome.record.task, params.if_generation_match)
        raise InvalidTransition(
            f"task {task_id} is {state_of(outcome.record.task)}:"
            " only a task waiting for input accepts a follow-up message"
        )

    def _as_it_stands(self, task_id: str) -> Sent:
        """An earlier message's task, followed from the event after its creation
        (a blocking send then waits for it, and sees a direct reply too)."""
        record = self.store.read(task_id)
        if record is None:
            raise TaskNotFound(f"task {task_id} not found")
        return Sent(record.task, 1, repeated=True)

    def _enqueue(self, task: Task) -> None:
        """Queue fulfilment. If that fails (the broker down or restarting, a
        publish cut short by the request's own end) the task stays
        `submitted`, saved with its place in the waiting index (or held in
        the turn book), and is queued once the broker takes messages again:
        by beat's resend, or by the turn it waits for. The peer hears that
        the broker is unavailable, with the task's id: the task is its
        message's, and runs; a retry of the same message answers it."""
        try:
            if not self._in_turn(task):
                self.dispatcher.enqueue(task["id"])
        except Exception as error:
            log.warning("task %s: not queued now, left for beat's resend: %s", task["id"], error)
            raise TaskError(error, task["id"]) from error

    def _in_turn(self, task: Task) -> bool:
        """Whether the task went through the turn book (held, or published in
        its turn). With the book out of reach (its store failing, or a lock
        whose holder stalled) the task goes to the broker at once instead,
        out of turn, rather than failing or waiting for beat's resend."""
        if self.turns is None:
            return False
        try:
            self.turns.enqueue(task)
        except StoreError as error:
            log.warning(
                "task %s: queued out of turn, the turn book is out of reach: %s", task["id"], error
            )
            return False
        return True

    def _wait_for_outcome(self, sent: Sent, deadline: float) -> Sent:
        """Wait until the task is terminal or waits for the peer, or until
        `deadline`; then return it as it stands (and a direct reply, if any)."""
        task_id = sent.task["id"]
        reply: Message | None = None
        seq = sent.seq
        quiet = deadline - time.monotonic() + 1  # no idle ticks: nobody to keep alive
        following = follow(
            self.store, task_id, sent.seq, deadline=deadline, idle=quiet, reader="wait"
        )
        for item in following:
            if item is None or isinstance(item, Record):
                continue  # the task as it stands after a gap: read again below
            seq, event = item
            if event["kind"] == "message" and event.get("role") == "agent":
                reply = event
        record = self.store.read(task_id)
        if record is None:
            raise TaskNotFound(f"task {task_id} not found")
        done = is_terminal(state_of(record.task))
        if done and self.finished is not None:
            self.finished.keep(record.task)  # the caller's GetTask after it, likely
        return Sent(record.task, max(seq, record.seq), reply if done else None)


def _behind(task: Task, current: int) -> bool:
    """A long-poll waits: the task keeps a generation, not yet past
    `current`, and may still change."""
    generation = generation_of(task)
    return generation != UNKNOWN and generation <= current and not is_terminal(state_of(task))


def _require_generation(task: Task, expected: int | None) -> None:
    if expected is not None and generation_of(task) != expected:
        raise TaskGenerationMismatch(task["id"], expected, generation_of(task))


def with_history(task: Task, history_length: int | None) -> Task:
    """historyLength: None keeps all, 0 drops the field, N keeps the last N."""
    if history_length is None or "history" not in task:
        return task
    if history_length == 0:
        return {key: value for key, value in task.items() if key != "history"}  # type: ignore[return-value]
    return {**task, "history": task["history"][-history_length:]}
