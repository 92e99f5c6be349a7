"""Placeholder: the langgraph adapter is being written (recognizes nothing yet)."""

from __future__ import annotations

from collections.abc import Callable

from toolnexus.frameworks.facts import Facts


def recognizes(obj: object) -> bool:
    return False


def run_function(obj: object) -> Callable[..., object]:
    raise NotImplementedError


def facts(obj: object) -> Facts:
    return Facts()
