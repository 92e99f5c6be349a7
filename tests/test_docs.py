"""The README stays a newcomer's page; its links and the site's pages stay whole.

`mkdocs build --strict` (.ci/run) checks every link and anchor inside docs/;
this checks what the site cannot see: the README's own links into the
repository, and its length.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
README_MOST_LINES = 400
_LINK = re.compile(r"\]\(([^)#\s]+)(#[^)\s]*)?\)")


def test_the_readme_is_at_most_400_lines() -> None:
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= README_MOST_LINES, (
        f"README.md is {len(lines)} lines: move reference text into docs/"
    )


def test_every_relative_link_in_the_readme_names_a_file_of_the_repository() -> None:
    text = (ROOT / "README.md").read_text()
    targets = [m.group(1) for m in _LINK.finditer(text) if "://" not in m.group(1)]
    assert targets, "the README links to no page of docs/"
    missing = [target for target in targets if not (ROOT / target).exists()]
    assert missing == []


def test_every_page_the_readme_links_is_in_the_sites_nav() -> None:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    in_nav: set[str] = set()

    def walk(entries: object) -> None:
        if isinstance(entries, list):
            for entry in entries:
                walk(entry)
        elif isinstance(entries, dict):
            for value in entries.values():
                walk(value)
        elif isinstance(entries, str):
            in_nav.add(entries)

    walk(config["nav"])
    text = (ROOT / "README.md").read_text()
    linked = {m.group(1).removeprefix("docs/") for m in _LINK.finditer(text)}
    pages = {target for target in linked if target.endswith(".md")}
    assert pages, "the README links to no page of docs/"
    assert pages - in_nav == set()
