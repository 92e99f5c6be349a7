"""Agents written with a framework, served as they are.

`TOOLNEXUS_RUN=module:agent` may name a Pydantic AI `Agent`, a compiled
LangGraph graph, a Google ADK agent or an OpenAI Agents SDK `Agent`: `adapt`
recognizes it by type and gives back a plain async generator function that
yields `toolnexus` values (`toolnexus.frameworks.outputs`), so the rest of the
service runs it as it runs any agent function.

A framework is recognized only when its package is already imported (the
agent's own module imported it to build the agent): nothing here imports a
framework that is not installed, and a plain function costs one dictionary
lookup per framework.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from toolnexus.frameworks import adk, langgraph, openai_agents, pydantic_ai
from toolnexus.frameworks.facts import Facts, Skill


class Adapter(Protocol):
    """What each adapter module defines."""

    def recognizes(self, obj: object) -> bool: ...

    def run_function(self, obj: Any) -> Callable[..., object]: ...

    def facts(self, obj: Any) -> Facts: ...


ADAPTERS: tuple[Adapter, ...] = (pydantic_ai, langgraph, adk, openai_agents)


def adapter_of(obj: object) -> Adapter | None:
    """The adapter module for a framework's agent; None for anything else."""
    for adapter in ADAPTERS:
        if adapter.recognizes(obj):
            return adapter
    return None


def adapt(obj: object) -> Callable[..., object] | None:
    """The agent function that runs a framework's agent; None when `obj` is no
    framework's agent (it is then called as it is)."""
    adapter = adapter_of(obj)
    return None if adapter is None else adapter.run_function(obj)


def facts_of(obj: object) -> Facts | None:
    """The card fields a framework's agent supplies; None for anything else."""
    adapter = adapter_of(obj)
    return None if adapter is None else adapter.facts(obj)


__all__ = ["ADAPTERS", "Facts", "Skill", "adapt", "adapter_of", "facts_of"]
