"""What an agent says about itself, for its card: a name, a description, skills."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Skill:
    """One skill on the card: what the agent can be asked to do (a tool of a
    framework's agent, or a plain function itself)."""

    id: str
    name: str
    description: str
    tags: tuple[str, ...] = ()


@dataclass(frozen=True)
class Facts:
    """The card fields an agent supplies where it has them (None or empty:
    it has none, and the card keeps its settings' values)."""

    name: str | None = None
    description: str | None = None
    skills: tuple[Skill, ...] = ()

    def as_json(self) -> dict[str, object]:
        """A JSON-ready form, the one a front end reads from its child process."""
        return {
            "name": self.name,
            "description": self.description,
            "skills": [
                {"id": s.id, "name": s.name, "description": s.description, "tags": list(s.tags)}
                for s in self.skills
            ],
        }
