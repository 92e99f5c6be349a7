"""Every task a store holds, not only the ids a client was handed, must come
to rest: a task saved whose reply was lost (a crash between the save and the
answer) is exactly the one a client never hears of, and the one beat's
resend exists for."""

from __future__ import annotations

import uuid

from shared.store.contract import Store
from shared.task import TERMINAL_STATES, Message, Task, new_task, state_of
from tests.support.polling import wait_for


def unfinished(store: Store) -> dict[str, str]:
    """Each task in the store that is not terminal, with its state."""
    states = {task_id: state_of(task) for task_id, task in store.all().items()}
    return {task_id: state for task_id, state in states.items() if state not in TERMINAL_STATES}


def wait_all_finished(store: Store, timeout: float = 90) -> dict[str, Task]:
    """Wait until every task the store holds is terminal; return them all.
    On the deadline, fail naming (some of) the tasks still not finished."""
    try:
        wait_for(lambda: not unfinished(store), timeout=timeout, what="every stored task to end")
    except AssertionError as error:
        left = unfinished(store)
        sample = dict(list(left.items())[:10])
        raise AssertionError(f"{error}: {len(left)} left, e.g. {sample}") from None
    return store.all()


def saved_without_reply(store: Store, text: str) -> str:
    """Save a new `submitted` task the way the front end does, but never queue
    it nor answer anyone: the front end's state when it dies (or Redis does)
    between saving a task and publishing its message. Returns its id."""
    message: Message = {
        "kind": "message",
        "role": "user",
        "messageId": str(uuid.uuid4()),
        "parts": [{"kind": "text", "text": text}],
    }
    task = new_task(message)
    store.create(task)
    return task["id"]
