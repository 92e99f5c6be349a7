"""The card's name, description and skills: the settings where they are
set, else what the agent says about itself (`shared.agent_facts`), else a
description and a skill made from the name, so that no card lacks the
fields A2A 1.0 requires."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from shared.agent_facts import AgentFacts
from shared.settings import DEFAULT_NAME, Settings
from web.card.skills import Skill, load_skills


@dataclass(frozen=True)
class AgentCard:
    """`fields`: the card's top-level name and description; `skills`: its skills."""

    fields: Mapping[str, Any]
    skills: Sequence[Skill]


def card_from_agent(settings: Settings, facts: AgentFacts) -> AgentCard:
    name = settings.name if settings.name != DEFAULT_NAME else facts.name or DEFAULT_NAME
    description = (
        settings.description
        or facts.description
        or f"{name}: an agent served over A2A by toolnexus-serve"
    )
    skills: Sequence[Skill] = (
        load_skills(settings.skills, settings.skill_names) if settings.skills else []
    )
    if not skills:
        skills = [
            Skill(skill.name, skill.description, skill.tags or _words(skill.id), id=skill.id)
            for skill in facts.skills
        ]
    if not skills:
        skills = [Skill(name, description, _words(name))]
    return AgentCard({"name": name, "description": description}, skills)


def _words(name: str) -> tuple[str, ...]:
    """Tags (A2A 1.0 requires at least one) from a name's words."""
    return tuple(re.findall(r"[A-Za-z0-9]+", name.lower())) or ("agent",)
