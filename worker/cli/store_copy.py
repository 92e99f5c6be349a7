"""`toolnexus-serve db copy TARGET`: every task of the configured store into another.

How a deployment moves to another store (file to Redis, Redis to
PostgreSQL): stop the front ends and workers, copy, point TOOLNEXUS_STORE
at the target, start again. Each task is written whole with the target's
`save`, so it arrives as one snapshot: its event log starts again there (a
client resuming a stream from an old event id gets the Task, as after any
gap), and the target's own indexes take it in by its state. A task not at
rest is copied as it stands and said so: beat sends a `submitted` one again
and fails a `working` one whose worker is gone, as after any restart.

Never overwritten: a task the target already holds is left alone, and
counted as the same or as different (then the exit code is 1), so a copy
can be run again after an interruption. Not copied: messageId records
(a retried send after the move makes a new task), context ownership
records and push configs.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field

from shared.errors import ConfigError
from shared.settings import Settings
from shared.store.contract import Store
from shared.store.wiring import open_store
from shared.task import is_at_rest, state_of

USAGE = "copy TARGET: TARGET is a store spec (file:<dir>, redis://..., postgresql://...)"


@dataclass
class Copied:
    copied: int = 0
    same: int = 0
    different: list[str] = field(default_factory=list)
    not_at_rest: dict[str, int] = field(default_factory=dict)


def copy_tasks(source: Store, target: Store, progress: Callable[[int], None] = print) -> Copied:
    """Every task of `source` saved into `target` unless it is there already."""
    result = Copied()
    for n, (task_id, task) in enumerate(sorted(source.all().items()), start=1):
        existing = target.get(task_id)
        if existing is None:
            target.save(task)
            result.copied += 1
            state = state_of(task)
            if not is_at_rest(state):
                result.not_at_rest[state] = result.not_at_rest.get(state, 0) + 1
        elif existing == task:
            result.same += 1
        else:
            result.different.append(task_id)
        if n % 1000 == 0:
            progress(n)
    return result


def run(argv: list[str], program: str) -> int:
    if len(argv) != 1 or argv[0] in ("", "memory"):
        print(
            f"{program} {USAGE} (a memory store lives and dies with its process)", file=sys.stderr
        )
        return 2
    try:
        settings = Settings.from_env()
        if settings.store in (None, "memory"):
            raise ConfigError("TOOLNEXUS_STORE is the memory store: there is nothing to copy")
        source = open_store(settings)
        target = open_store(settings, argv[0])
    except (ConfigError, ValueError) as error:
        print(f"{program}: {error}", file=sys.stderr)
        return 2
    try:
        result = copy_tasks(source, target, lambda n: print(f"{n} tasks read", flush=True))
    finally:
        source.close()
        target.close()
    waiting = ", ".join(f"{count} {state}" for state, count in sorted(result.not_at_rest.items()))
    print(
        f"copied {result.copied}, already there and the same {result.same},"
        f" already there and different {len(result.different)}"
        + (f"; copied while not at rest: {waiting} (beat takes them up)" if waiting else "")
    )
    for task_id in result.different[:20]:
        print(f"  left as the target holds it: {task_id}")
    return 1 if result.different else 0
