"""The user's code a worker runs: the fulfilment function and the on_task hook."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

from shared.errors import ConfigError
from shared.loading import load_object
from shared.settings import Settings
from shared.store.wiring import load_hook
from shared.transitions import OnTerminal
from toolnexus.frameworks import adapt

RunFunction = Callable[..., object]
# What a function may ask for, by parameter name.
INPUTS = frozenset({"text", "message", "task", "attempt", "checkpoint", "conversation"})

NO_FUNCTION = "no fulfilment function configured: set TOOLNEXUS_RUN=package.module:function"


@dataclass(frozen=True)
class Agent:
    """A loaded fulfilment function, or the reason there is none.

    A worker that cannot load its function still takes tasks and fails
    each with `problem`, so a peer hears why instead of waiting forever.
    """

    run: RunFunction | None
    on_task: OnTerminal | None = None
    problem: str = ""

    @property
    def wants_task(self) -> bool:
        """True when `run` declares a `task` parameter (it then gets the stored task)."""
        return "task" in self.inputs

    @cached_property
    def is_async(self) -> bool:
        """True when `run` is an `async def` or an async generator function:
        its calls wait on an event loop, not on a thread."""
        if self.run is None:
            return False
        # A callable object counts by its class's `__call__`.
        candidates = (self.run, type(self.run).__call__)
        return any(
            inspect.iscoroutinefunction(each) or inspect.isasyncgenfunction(each)
            for each in candidates
        )

    @cached_property
    def inputs(self) -> frozenset[str]:
        """Which of `text`, `message`, `task`, `attempt`, `checkpoint` and
        `conversation` the function declares by name.

        A function that declares none of them (e.g. `def run(prompt)`) gets
        the text as its one positional argument, as it always has."""
        if self.run is None:
            return frozenset()
        try:
            parameters = inspect.signature(self.run).parameters
        except (TypeError, ValueError):
            return frozenset()
        return frozenset(INPUTS & parameters.keys())


def load_agent(settings: Settings) -> Agent:
    """Import TOOLNEXUS_RUN (a function, or a framework's agent:
    `toolnexus.frameworks`) and TOOLNEXUS_ON_TASK; ConfigError names the bad one."""
    if settings.run is None:
        return Agent(run=None, on_task=load_hook(settings), problem=NO_FUNCTION)
    run = load_object(settings.run, "TOOLNEXUS_RUN")
    # A framework's agent object runs through its adapter, as a plain
    # async generator function would.
    run = adapt(run) or run
    if not callable(run):
        raise ConfigError(f"TOOLNEXUS_RUN: {settings.run!r} is not callable")
    return Agent(run=run, on_task=load_hook(settings))


def agent_or_problem(settings: Settings) -> Agent:
    """`load_agent`, but a configuration problem becomes an agent that fails tasks."""
    try:
        return load_agent(settings)
    except ConfigError as error:
        return Agent(run=None, problem=f"no fulfilment function: {error}")
