"""The README stays a newcomer's page; its links and the site's pages stay whole.

`mkdocs build --strict` (.ci/run) checks every link and anchor inside docs/;
this checks what the site cannot see: the README's own links into the
repository, and its length.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

import yaml

ROOT = Path(__file__).resolve().parent.parent
README_MOST_LINES = 400
_LINK = re.compile(r"\]\(([^)#\s]+)(#[^)\s]*)?\)")


def test_the_readme_is_at_most_400_lines() -> None:
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= README_MOST_LINES, (
        f"README.md is {len(lines)} lines: move reference text into docs/"
    )


def test_ci_installs_the_extras_the_readmes_test_command_installs() -> None:
    """The README's second command must pass on a fresh machine as written,
    so CI, which runs that command's pytest, installs just what it does."""
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    told = re.search(r"^pip install -e '(\.\[[\w,]+\])' && python3 -m pytest", readme, re.M)
    assert told is not None, "the README's test command is not where it was"
    installed = re.findall(r"pip install .*-e '(\.\[[\w,]+\])'", ci)
    assert installed == [told.group(1)]
    assert re.search(r"^python3 -m pytest$", ci, re.M), "CI runs the README's pytest, exactly"


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


def _recorder() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_record", ROOT / "bench" / "record.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_recorded_benchmark_run_replaces_its_own_block_in_its_own_section() -> None:
    record = _recorder()
    page = (ROOT / "docs" / "benchmark-figures.md").read_text()
    first = record.block_for("stores", ["--quick"], "ratio 0.5x", "abc1234", "2026-12-01 10:00 UTC")
    second = record.block_for("stores", [], "ratio 0.7x", "def5678", "2026-12-02 10:00 UTC")

    once = record.with_recording(page, "stores", first)
    twice = record.with_recording(once, "stores", second)

    assert "ratio 0.5x" in once and "`python3 bench/stores.py --quick`" in once
    assert "ratio 0.5x" not in twice and twice.count("<!-- recorded: stores -->") == 1
    # In the Stores section, before the next one; the rest of the page unchanged.
    stores, streams = twice.index("## Stores"), twice.index("## Streams")
    assert stores < twice.index("ratio 0.7x") < streams
    assert twice.startswith(page[: page.index("## Stores")])
    assert twice.endswith(page[page.index("## Streams") :])
