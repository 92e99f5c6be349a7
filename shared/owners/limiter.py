"""The send limiter (`shared.owners.admission.SendLimiter`), written once over
a store's small documents (`shared.documents`): every store keeps
its owners' limits the same way.

Each owner has two documents, named by the owner's digest:
`owner-bucket:<digest>` ({"tokens", "at"}: what was left after its last
take, and when; gone once it would be full again, which is the same) and
`owner-active:<digest>` ({task id: when reserved}; gone when empty). Times
are the store's clock, so front ends whose clocks disagree share one bucket.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from shared.documents import Documents, step
from shared.keys import digest

# A bucket holding this much less than a whole token holds one (float error).
EPSILON: Final = 1e-9
# A bucket is kept this long past the moment it is full again (clock skew, rounding).
SPARE: Final = 1.0


class DocumentLimiter:
    def __init__(self, documents: Documents, accepted: Callable[[str], str | None]) -> None:
        """`accepted`: the store's answer for a message key (the task that
        message made, while that task is kept)."""
        self._documents = documents
        self._accepted = accepted

    def take(self, owner: str, rate: float, size: int) -> float:
        def change(bucket: Any, now: float) -> tuple[Any, float | None, float]:
            full = float(size)
            tokens, then = full, now
            if isinstance(bucket, dict):
                tokens, then = float(bucket["tokens"]), float(bucket["at"])
            tokens = min(full, tokens + max(0.0, now - then) * rate)
            if tokens < 1 - EPSILON:
                return bucket, None, (1 - tokens) / rate
            left = max(0.0, tokens - 1)
            return {"tokens": left, "at": max(then, now)}, (full - left) / rate + SPARE, 0.0

        return step(self._documents, _name("owner-bucket", owner), change)

    def reserve(self, owner: str, task_id: str, cap: int) -> Mapping[str, float] | None:
        def change(active: Any, now: float) -> tuple[Any, float | None, Mapping[str, float] | None]:
            reserved: dict[str, float] = active if isinstance(active, dict) else {}
            if task_id in reserved:
                return active, None, None
            if len(reserved) < cap:
                return {**reserved, task_id: now}, None, None
            return active, None, {other: now - float(since) for other, since in reserved.items()}

        return step(self._documents, _name("owner-active", owner), change)

    def release(self, owner: str, *task_ids: str) -> None:
        def change(active: Any, now: float) -> tuple[Any, float | None, None]:
            if not isinstance(active, dict) or not any(i in active for i in task_ids):
                return active, None, None
            left = {kept: since for kept, since in active.items() if kept not in task_ids}
            return left or None, None, None

        if task_ids:
            step(self._documents, _name("owner-active", owner), change)

    def accepted(self, message_key: str) -> str | None:
        return self._accepted(message_key)


def _name(kind: str, owner: str) -> str:
    return f"{kind}:{digest('owner', owner)}"
