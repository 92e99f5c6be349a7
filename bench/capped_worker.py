"""bench/waiting.py's `asyncio-64` run: the worker with the store's connection
pool kept at its default (64) instead of sized from the concurrency.

    celery -A bench.capped_worker worker

worker.runtime.app takes `store_connections` from worker.runtime.pools when first
imported, so it is replaced before the app is made.
"""

from __future__ import annotations

from typing import Any

import worker
import worker.runtime.pools
from shared.settings import Settings


def _default_pool(settings: Settings) -> int | None:
    return None  # the store's own default, shared.store.spec.POOL_SIZE


worker.runtime.pools.store_connections = _default_pool
app: Any = worker.app
