"""The push state (`shared.push.contract.PushStore`), written once over a
store's small documents (`shared.documents`) and scored indexes
(`shared.indexes`): every store keeps its webhooks the same way.

- `push:<digest of the task id>` holds the task's configs and delivery
  cursors, `{"configs": {id: config}, "cursors": {id: cursor}}`, and once
  the task is done, `forget_at`: the store's time when the document goes
  (every later write keeps that time), and `done`: the task finished and
  delivered to every config it has (a config put later clears it).
- `push-lease:<digest of the task and config ids>` is a pair's lease,
  `{"holder": ...}`, living as long as the lease: one that runs out is
  simply not there any more, by the store's clock.
- The index `pushing` holds the tasks still swept, scored by when a config
  last came. A task enters it before its config is written, so a
  crash between the two leaves a task swept with nothing to send (the sweep
  then lets it go), never a config that is not swept.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection, Mapping
from typing import Any, Final, cast

from shared.documents import Documents, step
from shared.indexes import Indexes
from shared.keys import digest
from shared.push.contract import BOOKED, Cursor, PushConfig, TooManyConfigs, gives_way

PUSHING: Final = "pushing"


class DocumentPush:
    def __init__(
        self,
        documents: Documents,
        indexes: Indexes,
        ttl: float | None = None,
        upgrade: Callable[[DocumentPush], object] | None = None,
    ) -> None:
        """`ttl`: how long a finished task's push state is kept (None: for
        good). `upgrade`: the store's take-over of push state an earlier
        version kept its own way, run before the first call it lets through
        (again at the next call where the store was down)."""
        self._documents = documents
        self._indexes = indexes
        self._ttl = ttl
        self._upgrade = upgrade
        self._upgrading = threading.Lock()

    def _ready(self) -> None:
        if self._upgrade is not None:
            with self._upgrading:
                if self._upgrade is not None:
                    self._upgrade(self)
                    self._upgrade = None

    def put(self, config: PushConfig, cap: int) -> None:
        self._ready()
        task_id = config["taskId"]

        def change(state: Any, now: float) -> tuple[Any, float | None, None]:
            configs, cursors = _parts(state)
            if config["id"] not in configs and len(configs) >= cap:
                raise TooManyConfigs(f"task {task_id} already has {cap} push configs")
            return (
                {"configs": {**configs, config["id"]: dict(config)}, "cursors": cursors},
                None,
                None,
            )

        # In the index before the config is written (a crash between leaves a
        # task swept with nothing to send), and again after it: a `done` that
        # took the task out in between would otherwise leave this config unswept.
        self._indexes.add(PUSHING, task_id, time.time())
        step(self._documents, _name(task_id), change)
        self._indexes.add(PUSHING, task_id, time.time())

    def config(self, task_id: str, config_id: str) -> PushConfig | None:
        self._ready()
        found = _parts(self._read(task_id))[0].get(config_id)
        return cast(PushConfig, found) if found is not None else None

    def configs(self, task_id: str) -> list[PushConfig]:
        self._ready()
        configs = _parts(self._read(task_id))[0]
        return [cast(PushConfig, configs[key]) for key in sorted(configs)]

    def delete(self, task_id: str, config_id: str) -> bool:
        self._ready()

        def change(state: Any, now: float) -> tuple[Any, float | None, bool]:
            configs, cursors = _parts(state)
            if config_id not in configs:
                return state, None, False
            left = {key: value for key, value in configs.items() if key != config_id}
            marks = {key: value for key, value in cursors.items() if key != config_id}
            return _kept(state, left, marks, now)

        return step(self._documents, _name(task_id), change)

    def cursor(self, task_id: str, config_id: str) -> Cursor:
        self._ready()
        found = _parts(self._read(task_id))[1].get(config_id)
        return Cursor(**found) if isinstance(found, dict) else Cursor()

    def set_cursor(self, task_id: str, config_id: str, cursor: Cursor) -> None:
        self._ready()
        mark = {
            "delivered": cursor.delivered,
            "failures": cursor.failures,
            "since": cursor.since,
            "given_up": cursor.given_up,
        }

        def change(state: Any, now: float) -> tuple[Any, float | None, bool]:
            configs, cursors = _parts(state)
            if config_id not in configs:  # deleted meanwhile: nothing to keep a cursor for
                return state, None, False
            return _kept(state, configs, {**cursors, config_id: mark}, now)

        step(self._documents, _name(task_id), change)

    def book(self, task_id: str, config_id: str, holder: str, seconds: float) -> bool:
        self._ready()

        def change(lease: Any, now: float) -> tuple[Any, float | None, bool]:
            if lease is not None:
                return lease, None, False
            return {"holder": BOOKED + holder}, seconds, True

        return step(self._documents, _lease(task_id, config_id), change)

    def lease(self, task_id: str, config_id: str, holder: str, seconds: float) -> bool:
        self._ready()

        def change(lease: Any, now: float) -> tuple[Any, float | None, bool]:
            if isinstance(lease, dict) and not gives_way(str(lease.get("holder")), holder):
                return lease, None, False
            return {"holder": holder}, seconds, True

        return step(self._documents, _lease(task_id, config_id), change)

    def release(self, task_id: str, config_id: str, holder: str) -> None:
        self._ready()

        def change(lease: Any, now: float) -> tuple[Any, float | None, None]:
            if isinstance(lease, dict) and lease.get("holder") == holder:
                return None, None, None
            return lease, None, None

        step(self._documents, _lease(task_id, config_id), change)

    def pushing(self) -> list[str]:
        self._ready()
        return sorted(member for member, _ in self._indexes.range(PUSHING))

    def done(self, task_id: str, checked: Collection[str] | None = None) -> bool:
        self._ready()
        ttl = self._ttl

        def change(state: Any, now: float) -> tuple[Any, float | None, bool]:
            if not isinstance(state, dict):
                return state, None, True  # nothing kept: nothing to deliver
            if checked is not None and not set(_parts(state)[0]) <= set(checked):
                return state, None, False  # a config came after the sweep looked
            if state.get("done"):
                return state, None, True
            written = {**state, "done": True}
            if ttl is None:
                return written, None, True
            return {**written, "forget_at": now + ttl}, ttl, True

        if not step(self._documents, _name(task_id), change):
            return False
        self._indexes.remove(PUSHING, task_id)
        # A put that wrote its config after this step cleared `done`: swept again.
        again = self._read(task_id)
        if isinstance(again, dict) and not again.get("done"):
            self._indexes.add(PUSHING, task_id, time.time())
            return False
        return True

    def forget(self, task_id: str) -> None:
        self._ready()
        self._indexes.remove(PUSHING, task_id)
        step(self._documents, _name(task_id), lambda state, now: (None, None, None))

    def take_over(
        self,
        task_id: str,
        configs: Mapping[str, Any],
        cursors: Mapping[str, Any],
        *,
        pushing: bool,
        forget_in: float | None,
    ) -> None:
        """A task's push state as an earlier version kept it (its configs,
        its cursors as JSON objects, whether it was swept, how long it had
        left once done), written the way this one keeps it; a task whose
        state is here already keeps it. For a store's upgrade."""

        def change(state: Any, now: float) -> tuple[Any, float | None, None]:
            if state is not None:
                return state, None, None
            written: dict[str, Any] = {"configs": dict(configs), "cursors": dict(cursors)}
            if forget_in is None:
                return written, None, None
            return {**written, "forget_at": now + forget_in}, max(0.001, forget_in), None

        if pushing:
            self._indexes.add(PUSHING, task_id, time.time())
        step(self._documents, _name(task_id), change)

    def _read(self, task_id: str) -> Any:
        return self._documents.document(_name(task_id)).value


def _parts(state: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """The configs and cursors of a task's document (empty where it is not there)."""
    if not isinstance(state, dict):
        return {}, {}
    return dict(state.get("configs") or {}), dict(state.get("cursors") or {})


def _kept(
    state: Any, configs: dict[str, Any], cursors: dict[str, Any], now: float
) -> tuple[Any, float | None, bool]:
    """The document with new configs and cursors, keeping the time it goes
    (a finished task's push state goes when it was to, whatever is written
    after)."""
    kept = state if isinstance(state, dict) else {}
    written: dict[str, Any] = {"configs": configs, "cursors": cursors}
    if kept.get("done"):
        written["done"] = True
    forget_at = kept.get("forget_at")
    if forget_at is None:
        return written, None, True
    return {**written, "forget_at": forget_at}, max(0.001, float(forget_at) - now), True


def _name(task_id: str) -> str:
    return f"push:{digest('push', task_id)}"


def _lease(task_id: str, config_id: str) -> str:
    return f"push-lease:{digest('push-lease', task_id, config_id)}"
