"""When this machine last booted: what a power cut is told apart by.

A process that crashes loses nothing the kernel already holds; only the
machine going down loses writes that had not reached the disk. So a
database last written before the current boot, with transactions not
synced as they commit, is the one kind that may have lost its last ones,
and the SQLite store numbers each task's events on from a new base then
(a new lineage, see `shared.stores.sqlite.store`).
"""

from __future__ import annotations

import logging
from pathlib import Path

log = logging.getLogger(__name__)

PROC_STAT = Path("/proc/stat")


def booted_at(stat: Path = PROC_STAT) -> float:
    """The wall-clock time (seconds) this machine booted, from Linux's
    `btime`; 0.0 where it cannot be read (then no power cut is noticed)."""
    try:
        text = stat.read_text()
    except OSError:
        log.info("boot time unknown (%s unreadable): no power cut will be noticed", stat)
        return 0.0
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name == "btime" and value.strip().isdigit():
            return float(value)
    log.info("boot time unknown (no btime in %s): no power cut will be noticed", stat)
    return 0.0
