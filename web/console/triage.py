"""The console's failed view: failed tasks grouped by why they failed, and
running them again.

- `GET /console/failed`: the page (`failed.html`); its script asks the two
  calls below with the token the user signed in with.
- `GET /console/api/failed`: the caller's newest failed tasks grouped
  (`shared.store.triage`); an administrator's cover every owner.
- `POST /console/api/rerun` with `{"ids": [...]}`: each task run again as a
  new task (`web.core.rerun`); the answer says, per id, the new task or the
  API's error for that id.

The caller is named as the API names it (`web.auth.tokens`), and a refusal
is the API's own (401 with its challenge). A caller sees and reruns only
their own failed tasks; a principal in TOOLNEXUS_ADMIN_TOKENS sees every
owner's and reruns any. A POST from another site's page is refused before
it gets here (`web.http.browsers`), and the body must be JSON.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Any, Final

from flask import Blueprint, request
from werkzeug.wrappers import Response

from shared.codec import decode, encode_bytes
from shared.errors import StoreError, ToolnexusError
from shared.failures import failure_of, reason_text
from shared.quoting import truncated
from shared.store.triage import Group, Look, look
from shared.store.wiring import abilities_of
from shared.task import Task
from web.auth.tokens import Authenticator, administrators
from web.core.errors import InvalidParams, RequestError, describe, status_body
from web.core.rerun import rerun
from web.core.tasks import Tasks
from web.http.edge import challenge

FAILED_PATH: Final = "/api/failed"
RERUN_PATH: Final = "/api/rerun"
JSON: Final = "application/json"
# At most this many ids in one rerun: a whole group of the view's window.
MOST_RERUNS: Final = 500
_REASON: Final = 300  # characters of a failure's words shown


class Triage:
    """The failed view's two calls, for one service."""

    def __init__(self, tasks: Tasks, authenticator: Authenticator, admins: Collection[str]) -> None:
        self._tasks = tasks
        self._authenticator = authenticator
        self._admins = administrators(authenticator, admins)
        self._indexes = abilities_of(tasks.store).indexes

    def failed(self, authorization: str | None) -> dict[str, Any]:
        caller = self._authenticator.principal(authorization)
        admin = caller in self._admins
        found = look(self._tasks.store, caller, self._indexes if admin else None)
        return shown(found, admin=admin)

    def rerun(self, authorization: str | None, body: bytes) -> dict[str, Any]:
        caller = self._authenticator.principal(authorization)
        ids = _ids(body)
        admin = caller in self._admins
        results: dict[str, Any] = {}
        for task_id in ids:
            try:
                again = rerun(self._tasks, task_id, caller, admin=admin)
            except (ToolnexusError, RequestError) as error:
                wire = describe(error)
                results[task_id] = {"error": {"code": wire.rest_status, "message": wire.message}}
            else:
                new = again.task
                results[task_id] = {"taskId": new["id"], "repeated": again.repeated}
        return {"reruns": results}


def shown(found: Look, *, admin: bool) -> dict[str, Any]:
    """A look as the page gets it."""
    return {
        "admin": admin,
        "everyone": found.everyone,
        "window": found.window,
        "total": found.total,
        "groups": [_group(group, admin=admin) for group in found.groups],
    }


def _group(group: Group, *, admin: bool) -> dict[str, Any]:
    return {
        "group": group.failure.group,
        "cause": group.failure.cause,
        "type": group.failure.type,
        "count": group.count,
        "ids": group.ids,
        "tasks": [_task(task, admin=admin) for task in group.tasks],
    }


def _task(task: Task, *, admin: bool) -> dict[str, Any]:
    shown_task = {
        "id": task["id"],
        "contextId": task.get("contextId", ""),
        "failedAt": task["status"].get("timestamp", ""),
        "reason": truncated(reason_text(task), _REASON),
        "group": failure_of(task).group,
    }
    if admin:
        shown_task["owner"] = task.get("owner", "")
    return shown_task


def _ids(body: bytes) -> list[str]:
    try:
        asked = decode(body)
    except ValueError:
        raise InvalidParams('the body is not JSON: send {"ids": [task ids]}') from None
    ids = asked.get("ids") if isinstance(asked, Mapping) else None
    if not isinstance(ids, list) or not ids or not all(isinstance(i, str) for i in ids):
        raise InvalidParams('send {"ids": [task ids]}: a list of one or more task ids')
    if len(ids) > MOST_RERUNS:
        raise InvalidParams(f"at most {MOST_RERUNS} task ids in one rerun")
    return list(dict.fromkeys(ids))


def install_triage(console: Blueprint, triage: Triage) -> None:
    """The view's two calls on the console's blueprint (its page is the
    console's own: `views.py`)."""

    @console.get(FAILED_PATH)
    def failed() -> Response:
        return _reply(lambda: triage.failed(request.headers.get("Authorization")))

    @console.post(RERUN_PATH)
    def rerun_tasks() -> Response:
        if request.mimetype != JSON:
            error = InvalidParams("send the ids as application/json")
            return _reply(lambda: _raise(error))
        body = request.get_data()
        return _reply(lambda: triage.rerun(request.headers.get("Authorization"), body))


def _raise(error: Exception) -> dict[str, Any]:
    raise error


def _reply(answer: Callable[[], dict[str, Any]]) -> Response:
    """An answer as JSON; a refusal in the HTTP+JSON error shape, as the
    API's routes give it."""
    headers = [("Cache-Control", "no-store")]
    try:
        return Response(encode_bytes(answer()), 200, headers, mimetype=JSON)
    except (RequestError, StoreError, ToolnexusError) as error:
        wire = describe(error)
        headers.extend(challenge(wire.rest_status))
        return Response(encode_bytes(status_body(wire)), wire.rest_status, headers, mimetype=JSON)
