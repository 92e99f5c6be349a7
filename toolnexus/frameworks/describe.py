"""Print what the agent `module:attribute` says about itself, as JSON.

    python -m toolnexus.frameworks.describe examples.frameworks.pydantic_ai_agent:agent

A front end runs this in a child process to fill its card (name,
description, skills) without importing the agent itself.
"""

from __future__ import annotations

import importlib
import json
import sys

from toolnexus.frameworks import facts_of
from toolnexus.frameworks.facts import Facts, Skill


def describe(reference: str) -> Facts:
    """The facts of the agent `reference` names: a framework agent's own; a
    plain callable's docstring and name."""
    module_name, _, attribute = reference.partition(":")
    target: object = importlib.import_module(module_name)
    for name in attribute.split("."):
        target = getattr(target, name)
    known = facts_of(target)
    if known is not None:
        return known
    name = getattr(target, "__name__", attribute)
    summary = (getattr(target, "__doc__", None) or "").strip().split("\n\n", 1)[0]
    summary = " ".join(summary.split())
    return Facts(
        description=summary or None,
        skills=(Skill(name, name.replace("_", " "), summary or name),),
    )


def main(arguments: list[str]) -> int:
    if len(arguments) != 1:
        print("usage: python -m toolnexus.frameworks.describe module:attribute", file=sys.stderr)
        return 2
    print(json.dumps(describe(arguments[0]).as_json()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
