"""What the agent TOOLNEXUS_RUN names says about itself, for the card, read
without importing it into the front end.

A front end never holds the agent's code (its imports, its framework, its
model clients). A plain function says what it does in its source: its name
and docstring are read from the module's syntax tree. Anything else (a
framework's agent object, built when its module runs) is described by a
child process that imports it (`python -m toolnexus.frameworks.describe`):
its name, instructions and tools. What cannot be read leaves the card's
settings as they are, and is logged.
"""

from __future__ import annotations

import ast
import importlib.util
import inspect
import json
import logging
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from shared.loading import is_reference

log = logging.getLogger(__name__)

# How long describing a framework's agent in a child process may take.
DESCRIBE_TIMEOUT: Final = 60.0


@dataclass(frozen=True)
class SkillFacts:
    id: str
    name: str
    description: str
    tags: tuple[str, ...] = ()


@dataclass(frozen=True)
class AgentFacts:
    """The card fields the agent supplies (None or empty where it has none)."""

    name: str | None = None
    description: str | None = None
    skills: tuple[SkillFacts, ...] = ()


def facts_for(reference: str | None) -> AgentFacts:
    """What the agent `reference` (`module:attribute`) says about itself."""
    if reference is None or not is_reference(reference):
        return AgentFacts()
    module_name, _, attribute = reference.partition(":")
    source = _source(module_name)
    if source is not None and "." not in attribute:
        function = _function_in(source, attribute)
        if function is not None:
            return _function_facts(function)
    return _described_by_child(reference)


def _source(module_name: str) -> str | None:
    try:
        spec = importlib.util.find_spec(module_name)
    except (ImportError, ValueError):
        return None
    if spec is None or spec.origin is None or not spec.origin.endswith(".py"):
        return None
    try:
        return Path(spec.origin).read_text(encoding="utf-8")
    except OSError:
        return None


def _function_in(source: str, name: str) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == name:
            return node
    return None


def _function_facts(function: ast.FunctionDef | ast.AsyncFunctionDef) -> AgentFacts:
    """A plain function's description and one skill: its docstring's first
    paragraph, under its name."""
    docstring = ast.get_docstring(function) or ""
    summary = inspect.cleandoc(docstring).split("\n\n", 1)[0].replace("\n", " ").strip()
    skill = SkillFacts(function.name, function.name.replace("_", " "), summary or function.name)
    return AgentFacts(description=summary or None, skills=(skill,))


def _described_by_child(reference: str) -> AgentFacts:
    command = [sys.executable, "-m", "toolnexus.frameworks.describe", reference]
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=DESCRIBE_TIMEOUT, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        log.warning("the card cannot describe %s: %s", reference, error)
        return AgentFacts()
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        log.warning("the card cannot describe %s: %s", reference, last)
        return AgentFacts()
    try:
        return from_json(json.loads(done.stdout))
    except (ValueError, TypeError, KeyError) as error:
        log.warning("the card cannot describe %s: %s", reference, error)
        return AgentFacts()


def from_json(data: Mapping[str, Any]) -> AgentFacts:
    """Facts from the JSON the describing child prints."""
    name, description = data.get("name"), data.get("description")
    return AgentFacts(
        name=name if isinstance(name, str) and name.strip() else None,
        description=description if isinstance(description, str) and description.strip() else None,
        skills=tuple(
            SkillFacts(
                str(skill["id"]),
                str(skill["name"]),
                str(skill.get("description") or skill["name"]),
                tuple(str(tag) for tag in skill.get("tags") or ()),
            )
            for skill in data.get("skills") or ()
        ),
    )
