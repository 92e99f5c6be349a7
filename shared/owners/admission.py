"""Per-owner send limits: a rate with a burst, and a cap on unfinished tasks.

A front end admits each send before anything of it is saved or queued
(`web.core.tasks.Tasks.accept`):

- **rate** (`TOOLNEXUS_OWNER_RATE`, `TOOLNEXUS_OWNER_BURST`): every send,
  a follow-up or a retry of an accepted messageId included, takes one
  token from its owner's bucket (`OwnerLimits.bucket` tokens, refilled at
  `rate` a second, full at first); with none left it is refused, told the
  seconds until one is free;
- **max_active** (`TOOLNEXUS_OWNER_MAX_ACTIVE`): a send that would create a
  task reserves a slot for its id among the owner's unfinished tasks; at
  the cap the reserved ids are checked against the store (those whose task is
  finished, or gone a while, are dropped) and the reservation tried once
  more, else the send is refused, told to try again in `ACTIVE_RETRY`
  seconds. A follow-up makes no task and takes no slot; a reservation the
  send does not use (the message was a retry, the create was refused) is
  released.

The state lives in the store (`SendLimiter`, from `Store.send_limiter()`), so
every front end on it shares one bucket and one set per owner: Redis and
PostgreSQL by the database's own clock, one script or statement a step;
the file store under a lock file; memory in this process. `Admission`
holds the limit table and the limiter; `admission` builds it once, at
wiring, or None when no limit is set (nothing on the hot path then).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from typing import Final, Protocol

from shared.errors import ConfigError, OwnerLimitExceeded
from shared.owners.limits import LimitTable
from shared.settings import Settings

# The retry hint of a send refused at the active cap: when a task finishes
# is unknown, and a refused owner's store is checked again no sooner.
ACTIVE_RETRY: Final = 1.0
# A reserved id whose task cannot be read is kept this long (seconds): its
# send may still be saving it.
GRACE: Final = 30.0

# Whether a task is finished (True: terminal), or unfinished (False); None:
# no such task. The caller reads it from the store.
Finished = Callable[[str], bool | None]


class SendLimiter(Protocol):
    """What a store keeps of its owners' sends. Each method is one atomic
    step against every process on the store; owners are named by the
    caller's principal ("" when the deployment has no tokens)."""

    def take(self, owner: str, rate: float, size: int) -> float:
        """Take one token from `owner`'s bucket (`size` tokens, refilled at
        `rate` a second, full when first used), by the store's clock: 0.0
        when taken, else the seconds until one is free (nothing taken)."""

    def reserve(self, owner: str, task_id: str, cap: int) -> Mapping[str, float] | None:
        """Add `task_id` to `owner`'s active ids unless they number `cap`
        already: None when added (or there already); else the ids reserved,
        each with the seconds since it was reserved, and nothing added."""

    def release(self, owner: str, *task_ids: str) -> None:
        """Drop `task_ids` from `owner`'s active ids (ids not there are no error)."""

    def accepted(self, message_key: str) -> str | None:
        """The id of the task an accepted message made (its store key,
        `shared.store.contract.message_key`), while that task is kept; None
        when there is none."""


class Admission:
    """The owners' limits (`LimitTable`) over a store's `SendLimiter`."""

    def __init__(
        self, limits: LimitTable, limiter: SendLimiter, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.limits = limits
        self.limiter = limiter
        self._clock = clock
        # owner -> when this process last checked its reserved ids and freed
        # none: at the cap again within ACTIVE_RETRY, it is refused unread.
        self._checked: dict[str, float] = {}

    def take(self, owner: str) -> None:
        """One send's token from `owner`'s bucket; OwnerLimitExceeded when
        it is empty. No round trip for an owner without a rate."""
        limits = self.limits.of(owner)
        if limits.rate is None:
            return
        wait = self.limiter.take(owner, limits.rate, limits.bucket)
        if wait > 0:
            raise OwnerLimitExceeded(
                f"too many sends: this caller may send {_per_second(limits.rate)} a second"
                f" (bursts of {limits.bucket}); try again in {wait:.3g} s",
                limit="rate",
                retry_after=wait,
            )

    def reserve(self, owner: str, task_id: str, finished: Finished) -> bool:
        """A slot among `owner`'s unfinished tasks for `task_id`, the task a
        send is about to create: True when reserved (release it if no task
        is made), False when the owner has no cap. At the cap the reserved ids
        are checked with `finished` and the finished ones dropped, then the
        slot is tried once more; OwnerLimitExceeded when none is free."""
        cap = self.limits.of(owner).max_active
        if cap is None:
            return False
        reserved = self.limiter.reserve(owner, task_id, cap)
        if reserved is None:
            return True
        if self._dropped(owner, reserved, finished):
            reserved = self.limiter.reserve(owner, task_id, cap)
            if reserved is None:
                return True
        raise OwnerLimitExceeded(
            f"too many unfinished tasks: this caller may have {cap} at once;"
            " try again once one finishes",
            limit="max_active",
            retry_after=ACTIVE_RETRY,
        )

    def release(self, owner: str, task_id: str) -> None:
        """Give back a slot `reserve` took for a task that was not made."""
        self.limiter.release(owner, task_id)

    def accepted(self, message_key: str) -> str | None:
        """The task an accepted message made (see `SendLimiter.accepted`)."""
        return self.limiter.accepted(message_key)

    def _dropped(self, owner: str, reserved: Mapping[str, float], finished: Finished) -> bool:
        """Drop the reserved ids whose task is finished, or gone for longer than
        GRACE; whether any was. An owner whose check freed nothing is not
        read again for ACTIVE_RETRY seconds (its refusals cost no reads)."""
        now = self._clock()
        last = self._checked.get(owner)
        if last is not None and now - last < ACTIVE_RETRY:
            return False
        done = []
        for task_id, age in reserved.items():
            state = finished(task_id)
            if state or (state is None and age > GRACE):
                done.append(task_id)
        if not done:
            self._checked[owner] = now
            return False
        self._checked.pop(owner, None)
        self.limiter.release(owner, *done)
        return True


def admission(settings: Settings, limiter: SendLimiter | None) -> Admission | None:
    """The front end's admission: None when no owner's sends are limited;
    else on the store's limiter (None for a store without one), which a
    limit needs: ConfigError naming the settings otherwise."""
    table = LimitTable(settings)
    if not table.limits_sends:
        return None
    found = limiter
    if found is None:
        raise ConfigError(
            f"{', '.join(_named(settings))}: per-owner send limits need a store that keeps"
            " them (memory, file, Redis or PostgreSQL); this task store has only get and save:"
            " unset the limits or use a built-in store"
        )
    return Admission(table, found)


def _named(settings: Settings) -> list[str]:
    """The variables that set a send limit."""
    named = [
        variable
        for variable, value in (
            ("TOOLNEXUS_OWNER_RATE", settings.owner_rate),
            ("TOOLNEXUS_OWNER_MAX_ACTIVE", settings.owner_max_active),
        )
        if value is not None
    ]
    if settings.owner_limits:
        named.append("TOOLNEXUS_OWNER_LIMITS")
    return named


def _per_second(rate: float) -> str:
    return str(int(rate)) if math.isclose(rate, round(rate)) else f"{rate:g}"
