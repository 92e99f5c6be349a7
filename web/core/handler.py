"""The request handler every binding calls: a method's params checked
(`parse`), then the method run (`run`), with no wire format but the
dialect's.

A binding turns its request into the params a JSON-RPC call of the method
carries (camelCase names, either spelling accepted), names the method by
its kind (`web.core.method_table`) and describes the call (`Call`: who
asks, in which dialect); every check, idempotency, owner scoping and error
is then the same on JSON-RPC, HTTP+JSON and gRPC. A method answers with a
result in its dialect's shapes, or with a `Stream` of results (the
streaming methods). Everything that can be refused is refused before a
stream starts, as a plain error.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from functools import partial
from typing import Any, Final

from shared.dialects import V03, V10, V11, message_for, task_for, webhook_for
from shared.errors import ToolnexusError
from web.core import params as check
from web.core.call import Call, Dialect
from web.core.errors import ExtendedCardNotConfigured, TaskError
from web.core.listing import list_tasks
from web.core.method_table import (
    CANCEL,
    CARD,
    GET,
    LIST,
    PUSH_DELETE,
    PUSH_GET,
    PUSH_LIST,
    PUSH_SET,
    SEND,
    STREAM,
    SUBSCRIBE,
)
from web.core.streaming import Stream, send_stream, subscription
from web.core.tasks import Sent, with_history


def parse(kind: str, params: object) -> Any:
    """A method's params, checked (either spelling of each name), ready to run."""
    parser, _ = _METHODS[kind]
    return parser(check.camel_case(params))


def run(kind: str, call: Call, parsed: Any) -> Any:
    """Run a method on params from `parse`: its result, or a Stream."""
    _, runner = _METHODS[kind]
    return runner(call, parsed)


# --- the methods ---------------------------------------------------------------


def _send(call: Call, request: check.SendParams) -> Any:
    request = _in_version(call, request)
    blocking = call.dialect.blocking if request.blocking is None else request.blocking
    with _about_follow_up(request):
        sent = call.tasks.send(request, call.owner, blocking=blocking)
    return _sent_result(call.dialect, sent, request.history_length)


def _sent_result(dialect: Dialect, sent: Sent, history_length: int | None) -> Any:
    if sent.reply is not None:
        message = message_for(dialect.version, sent.reply)
        return {"message": message} if dialect.wraps_send else message
    task = task_for(dialect.version, with_history(sent.task, history_length))
    return {"task": task} if dialect.wraps_send else task


def _in_version(call: Call, request: check.SendParams) -> check.SendParams:
    """The send as its dialect means it: its webhook's shape, and (1.1 only)
    its `ifGenerationMatch`."""
    if request.if_generation_match is not None and call.dialect.version != V11:
        request = dataclasses.replace(request, if_generation_match=None)
    if request.webhook is None or request.version == call.dialect.version:
        return request
    return dataclasses.replace(request, version=call.dialect.version)


def _stream(call: Call, request: check.SendParams) -> Stream:
    request = _in_version(call, request)
    with _about_follow_up(request):
        return send_stream(call.tasks, request, call.owner, call.wire, call.resume_after)


def _get(call: Call, query: check.TaskQuery) -> Any:
    if query.current_generation is not None and call.dialect.version != V11:
        query = dataclasses.replace(query, current_generation=None)  # a 1.1 field
    with _AboutTask(query.task_id):
        task = call.tasks.get(query, call.owner)
    return task_for(call.dialect.version, with_history(task, query.history_length))


def _cancel(call: Call, task_id: str) -> Any:
    with _AboutTask(task_id):
        return task_for(call.dialect.version, call.tasks.cancel(task_id, call.owner))


def _list(call: Call, query: check.ListQuery) -> Any:
    page = list_tasks(call.tasks.store, query, call.owner)
    shown = partial(task_for, call.dialect.version)
    return {
        "tasks": [shown(task) for task in page.tasks],
        "nextPageToken": page.next_page_token,
        "pageSize": page.page_size,
        "totalSize": page.total_size,
    }


def _subscribe(call: Call, task_id: str) -> Stream:
    with _AboutTask(task_id):
        return subscription(call.tasks, task_id, call.owner, call.wire, call.resume_after)


def _push_set(call: Call, request: check.PushConfigParams) -> Any:
    with _AboutTask(request.task_id):
        config = call.tasks.set_webhook(
            request.task_id, request.webhook, call.owner, call.dialect.version
        )
    return webhook_for(call.dialect.version, config)


def _push_get(call: Call, query: check.PushConfigQuery) -> Any:
    with _AboutTask(query.task_id):
        config = call.tasks.webhook(query.task_id, query.config_id, call.owner)
    return webhook_for(call.dialect.version, config)


def _push_list(call: Call, query: check.PushConfigQuery) -> Any:
    with _AboutTask(query.task_id):
        configs = call.tasks.webhooks(query.task_id, call.owner)
    if call.dialect.version == V03:
        return [webhook_for(V03, config) for config in configs]
    after = [config for config in configs if config["id"] > query.page_token]
    page = after[: query.page_size]
    more = len(after) > len(page)
    return {
        "configs": [webhook_for(V10, config) for config in page],
        "nextPageToken": page[-1]["id"] if more else "",
    }


def _push_delete(call: Call, query: check.PushConfigQuery) -> Any:
    with _AboutTask(query.task_id):
        call.tasks.delete_webhook(query.task_id, query.config_id, call.owner)
    return None if call.dialect.version == V03 else {}


def _card(call: Call, params: object) -> Any:
    if call.extended_card is None:
        raise ExtendedCardNotConfigured("this agent has no extended agent card")
    return call.extended_card(call.dialect.version)


def _unchecked(params: object) -> object:
    return params


# Each method kind: what checks its params, and what runs it on them.
_METHODS: Final[Mapping[str, tuple[Callable[[Any], Any], Callable[[Call, Any], Any]]]] = {
    SEND: (check.send_params, _send),
    STREAM: (check.send_params, _stream),
    GET: (check.task_query, _get),
    CANCEL: (check.task_id, _cancel),
    LIST: (check.list_query, _list),
    SUBSCRIBE: (check.task_id, _subscribe),
    PUSH_SET: (check.push_config_params, _push_set),
    PUSH_GET: (check.push_config_query, _push_get),
    PUSH_LIST: (check.push_config_query, _push_list),
    PUSH_DELETE: (check.push_config_query, _push_delete),
    CARD: (_unchecked, _card),
}


class _AboutTask:
    """Errors inside name the task they concern (1.0's ErrorInfo metadata).

    A class, not a `@contextmanager` generator: GetTask enters one on every
    call, and a generator costs several times as much to set up and close."""

    __slots__ = ("_task_id",)

    def __init__(self, task_id: str) -> None:
        self._task_id = task_id

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: object, error: BaseException | None, trace: object) -> None:
        if isinstance(error, ToolnexusError) and not isinstance(error, TaskError):
            raise TaskError(error, self._task_id) from error


def _about_follow_up(request: check.SendParams) -> AbstractContextManager[None]:
    """A follow-up's errors name the task it continues, as Get's and Cancel's do."""
    return _AboutTask(request.task_id) if request.task_id is not None else nullcontext()
