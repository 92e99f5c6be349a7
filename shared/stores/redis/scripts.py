"""The Redis store's server-side scripts: each write is one atomic step.

A task is a hash (`doc`: the JSON snapshot; `seq`: its last event's
number; `base`: the event the snapshot includes; `state`, `st` (its
status time, seconds since the epoch) and `ts` (where that status is filed
for listings: `st`, or just after the latest listing moment, `listed`,
when `st` is not after it; see `lua/listed.lua`); `o` and `c`: digests of its owner
and context; `cj`: its contextId as JSON; `mkey`: the message key that
created it), a tail string (the
events since the snapshot, one JSON per line), a stream (the event log,
entry ids `0-<seq>`), a list of its status changes (`hist`: "ts|state",
for listings that hold still, see `shared.store.listing`) and its entries in the
indexes: the time indexes of working and waiting tasks, and the listing
indexes of its owner (all, per context, per state) scored by status time.
The scripts compare `seq` and never decode a task, so a change costs the
same for a tiny task and a huge one.

Event numbers are never reused, even by a Redis that lost its last writes
(AOF `everysec`: about a second; a restore from an older snapshot: more).
The hash records (`run`) which run of redis-server last wrote it; the first
write by another run cannot know whether numbers after `seq` were handed
out and lost, so it numbers on from the server's clock in microseconds
(above any number the lost writes could have used: no task gets an event
per microsecond), a new lineage. A reader holding a number from before
finds the numbers jump and reads the task instead (`shared.store.follow`).
Asking for the run (INFO) costs more than the rest of a write, so it is
asked only when LASTSAVE (set at start, and by each snapshot) differs from
the one the task's last write saw (`ls`), or that write (`lw`, microseconds)
came within a second of it, too close to tell a run from the one before.

The scripts are the `.lua` files beside this module (package data, so a
wheel carries them), loaded by name. Each documents its KEYS and ARGV in
its header; `--#include <name>` pastes another file in its place (the
clock helpers, the append that COMMIT and CLAIM share) and `$WINDOW` is
the listing window in seconds.
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources
from typing import Final

from shared.store.listing import WINDOW

_INCLUDE = re.compile(r"^[ \t]*--#include (\w+)[ \t]*$", re.M)


@cache
def load(name: str) -> str:
    """The script `lua/<name>.lua`, its includes pasted in and `$WINDOW` set."""
    text = resources.files(__package__).joinpath("lua", f"{name}.lua").read_text("utf-8")
    text = _INCLUDE.sub(lambda found: load(found.group(1)), text)
    return text.replace("$WINDOW", str(WINDOW))


CREATE: Final = load("create")
# CREATE and a step of the turn book (lua/turns.lua) in one: a send's one round trip.
CREATE_HELD: Final = load("create_held")
# COMMIT and a step of the turn book releasing the task: a delivery's last write.
COMMIT_RELEASED: Final = load("commit_released")
COMMIT: Final = load("commit")
CLAIM: Final = load("claim")
READ: Final = load("read")
FORGET_EXPIRED: Final = load("forget_expired")
