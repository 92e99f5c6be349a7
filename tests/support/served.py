"""The app served over real HTTP with an in-process worker running a real
example agent on threads (the embedded composition): each event a stream
sends is what a worker really saved."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

from shared import Settings
from shared.stores.memory.store import MemoryStore, memory_store
from tests.test_web_support import live_server
from web import create_app
from worker.engine.agent import load_agent
from worker.engine.inprocess import InProcessDispatcher

Serve = Callable[..., tuple[str, MemoryStore]]


@contextmanager
def serving_agents() -> Iterator[Serve]:
    """`serve(run, **settings)` starts one server; all stop when the block ends."""
    with ExitStack() as stops:

        def serve(run: str, **settings: Any) -> tuple[str, MemoryStore]:
            config = Settings(run=run, **settings)
            store = memory_store()
            dispatcher = InProcessDispatcher(store, load_agent(config), config, threads=4)
            stops.callback(dispatcher.close, timeout=5)
            url, _ = stops.enter_context(
                live_server(create_app(config, store=store, dispatcher=dispatcher))
            )
            return url, store

        yield serve
