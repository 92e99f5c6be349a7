"""`toolnexus-serve tasks list|show|rerun`: failed tasks from the command line.

    toolnexus-serve tasks list --state failed [--owner NAME] [--json]
    toolnexus-serve tasks show ID [--json]
    toolnexus-serve tasks rerun ID... [--url URL]

`list` and `show` read the store TOOLNEXUS_STORE (or --store) names, as the
operator who holds its address: `list` groups the newest failed tasks by why
they failed (`shared.store.triage`), every owner's, or one owner's with
--owner; `show` prints one task, its owner and its failure's cause.

`rerun` asks the service itself, over HTTP, as an administrator: `POST
/console/api/rerun` with the token in TOOLNEXUS_TOKEN (a principal named in
TOOLNEXUS_ADMIN_TOKENS). A rerun is a send: the owner's send limits, the
context's policy, the turn book and the broker (or the embedded server's
workers) all take part, and that path is the front end's (`web.core`), which
no worker-side module may import. Reading the broker settings here and
publishing directly would be a second send path, and would miss the front
end's turn book and limits; the HTTP call is the one path there is.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.error
import urllib.request
from typing import Any, Final

from shared.codec import encode
from shared.errors import ConfigError, StoreError
from shared.failures import failure_of, reason_text
from shared.settings import Settings
from shared.store.contract import Store
from shared.store.triage import look
from shared.store.wiring import abilities_of, open_store
from shared.task import FAILED, Task, message_text, state_of
from worker.command import OneLineParser

TOKEN_VARIABLE: Final = "TOOLNEXUS_TOKEN"
RERUN_PATH: Final = "console/api/rerun"
_REASON: Final = 100  # characters of a failure's words on a list line


def parser(program: str = "toolnexus-serve tasks") -> argparse.ArgumentParser:
    """The actions and their options."""
    top = OneLineParser(prog=program, description="Failed tasks: list, show, run again.")
    actions = top.add_subparsers(dest="action", required=True, metavar="list|show|rerun")
    listing = actions.add_parser("list", help="the newest failed tasks, grouped by reason")
    listing.add_argument("--state", choices=[FAILED.value], default=FAILED.value)
    listing.add_argument("--owner", help="one owner's (default: every owner's)")
    listing.add_argument("--json", action="store_true", help="as JSON")
    show = actions.add_parser("show", help="one task as stored")
    show.add_argument("id")
    show.add_argument("--json", action="store_true", help="as JSON")
    rerun = actions.add_parser("rerun", help="run failed tasks again (asks the service)")
    rerun.add_argument("ids", nargs="+", metavar="ID")
    rerun.add_argument("--url", help="the service (default: TOOLNEXUS_URL, else host and port)")
    return top


def run(argv: list[str], program: str) -> int:
    try:
        asked = parser(program).parse_args(argv)
    except SystemExit as exit_:
        return int(exit_.code or 0)
    try:
        settings = Settings.from_env()
        if asked.action == "rerun":
            return _rerun(settings, asked.ids, asked.url, program)
        store = open_store(settings)
    except (ConfigError, ValueError) as error:
        print(f"{program}: {error}", file=sys.stderr)
        return 2
    try:
        if asked.action == "list":
            return _list(store, asked.owner, as_json=asked.json)
        return _show(store, asked.id, as_json=asked.json)
    except StoreError as error:
        print(f"{program}: the store: {error}", file=sys.stderr)
        return 1
    finally:
        store.close()


def _list(store: Store, owner: str | None, *, as_json: bool) -> int:
    found = look(store, owner or "", abilities_of(store).indexes if owner is None else None)
    if as_json:
        groups = [{"group": g.failure.group, "count": g.count, "ids": g.ids} for g in found.groups]
        print(encode({"window": found.window, "everyone": found.everyone, "groups": groups}))
        return 0
    whose = "every owner's" if found.everyone else f"{owner or '(anonymous)'}'s"
    if owner is None and not found.everyone:
        whose = "the anonymous owner's (this store keeps no index of failures)"
    print(f"the newest {found.window} of {whose} failed tasks, by reason")
    for group in found.groups:
        print(f"\n{group.failure.group}: {group.count}")
        for task in group.tasks:
            print("  " + _line(task))
        if group.count > len(group.tasks):
            print(f"  … and {group.count - len(group.tasks)} more")
    return 0


def _line(task: Task) -> str:
    words = " ".join(reason_text(task).split())
    if len(words) > _REASON:
        words = words[: _REASON - 1] + "…"
    owner = task.get("owner", "") or "(anonymous)"
    return f"{task['id']}  {task['status'].get('timestamp', '')}  {owner}  {words}"


def _show(store: Store, task_id: str, *, as_json: bool) -> int:
    task = store.get(task_id)
    if task is None:
        print(f"task {task_id} not found", file=sys.stderr)
        return 1
    if as_json:
        print(encode(task))
        return 0
    print(f"task     {task['id']}")
    print(f"state    {state_of(task)}  ({task['status'].get('timestamp', '')})")
    print(f"owner    {task.get('owner', '') or '(anonymous)'}")
    print(f"context  {task.get('contextId', '')}")
    if state_of(task) == FAILED:
        print(f"failure  {failure_of(task).group}")
    if words := reason_text(task):
        print(f"status   {words}")
    for message in task.get("history") or []:
        text = message_text(message)
        print(f"{message.get('role', '?'):>5}:  {text}")
    return 0


def _rerun(settings: Settings, ids: list[str], url: str | None, program: str) -> int:
    base = url or settings.url or _local(settings)
    token = os.environ.get(TOKEN_VARIABLE, "")
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(
        base.rstrip("/") + "/" + RERUN_PATH,
        data=encode({"ids": ids}).encode(),
        headers=headers,
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:
            answer: dict[str, Any] = json.load(reply)
    except urllib.error.HTTPError as error:
        print(f"{program}: {base}: HTTP {error.code}: {_said(error)}", file=sys.stderr)
        return 1
    except (urllib.error.URLError, OSError) as error:
        print(f"{program}: cannot reach {base}: {error}", file=sys.stderr)
        return 1
    refused = 0
    for task_id, one in answer.get("reruns", {}).items():
        if "taskId" in one:
            again = " (asked before: the same rerun)" if one.get("repeated") else ""
            print(f"{task_id} -> {one['taskId']}{again}")
        else:
            refused += 1
            print(f"{task_id}: {one.get('error', {}).get('message', 'refused')}", file=sys.stderr)
    return 1 if refused else 0


def _local(settings: Settings) -> str:
    host = "127.0.0.1" if settings.host in ("0.0.0.0", "::", "") else settings.host
    return f"http://{host}:{settings.port}/"


def _said(error: urllib.error.HTTPError) -> str:
    try:
        return str(json.load(error)["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return error.reason
