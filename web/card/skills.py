"""Skills for the agent card, read from `**/SKILL.md` files.

Each file starts with YAML front matter between `---` lines giving at least
`name` and `description` (and optionally `tags`). A file that cannot be
read or parsed is skipped with a log line: one bad skill never takes the
card down. The card lists skills, never the agent's raw tools.
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from shared.errors import ConfigError

log = logging.getLogger(__name__)

SKILL_FILE = "SKILL.md"
_FENCE = "---"


class MalformedSkill(ValueError):
    """A SKILL.md whose front matter is missing or incomplete."""


@dataclass(frozen=True)
class Skill:
    name: str
    description: str
    tags: tuple[str, ...] = ()
    id: str | None = None  # (a SKILL.md's id is its name)

    def card_entry(self) -> dict[str, Any]:
        return {
            "id": self.id or self.name,
            "name": self.name,
            "description": self.description,
            "tags": list(self.tags),
        }


def load_skills(directory: str | Path, names: Collection[str] = ()) -> list[Skill]:
    """Every well-formed skill under `directory`, sorted by name in code-point
    order; when `names` is given only those (names not found are ignored)."""
    root = Path(directory)
    if not root.is_dir():
        raise ConfigError(f"TOOLNEXUS_SKILLS={str(directory)!r}: not a directory")
    found: dict[str, Skill] = {}
    for path in sorted(root.rglob(SKILL_FILE)):
        try:
            skill = read_skill(path)
        except (OSError, UnicodeDecodeError, yaml.YAMLError, MalformedSkill) as error:
            log.warning("skipping skill %s: %s", path, error)
            continue
        if skill.name in found:
            log.warning("skipping skill %s: another file already defines %r", path, skill.name)
            continue
        found[skill.name] = skill
    chosen = [skill for skill in found.values() if not names or skill.name in names]
    return sorted(chosen, key=lambda skill: skill.name)


def read_skill(path: Path) -> Skill:
    front = front_matter(path.read_text(encoding="utf-8"))
    data = yaml.safe_load(front)
    if not isinstance(data, dict):
        raise MalformedSkill("front matter is not a YAML mapping")
    name, description = data.get("name"), data.get("description")
    if not isinstance(name, str) or not name.strip():
        raise MalformedSkill("front matter needs a non-empty string 'name'")
    if not isinstance(description, str):
        raise MalformedSkill("front matter needs a string 'description'")
    tags = data.get("tags") or []
    if isinstance(tags, str):
        tags = [tags]
    if not isinstance(tags, list) or not all(isinstance(tag, str) for tag in tags):
        raise MalformedSkill("'tags' must be a list of strings")
    return Skill(name.strip(), description.strip(), tuple(tags))


def front_matter(text: str) -> str:
    """The YAML between the opening `---` line and the next `---` line."""
    lines = text.removeprefix("\ufeff").splitlines()
    if not lines or lines[0].strip() != _FENCE:
        raise MalformedSkill("no YAML front matter (the file must start with '---')")
    for index, line in enumerate(lines[1:], start=1):
        if line.strip() == _FENCE:
            return "\n".join(lines[1:index])
    raise MalformedSkill("front matter is not closed by a '---' line")
