"""Wait for a condition with a deadline instead of sleeping a fixed time."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(
    probe: Callable[[], T | None],
    *,
    timeout: float = 10.0,
    interval: float = 0.01,
    what: str = "condition",
) -> T:
    """Call `probe` until it returns something truthy; return that, or fail."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)
        interval = min(interval * 1.5, 0.2)
