"""The card's name, description and skills from the agent itself, read
without importing it into the front end; the settings still win; and the
official a2a-sdk finds every field A2A 1.0 requires."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest
from a2a.client.card_resolver import parse_agent_card
from a2a.utils.proto_utils import warn_on_missing_required_fields

from shared.agent_facts import AgentFacts, facts_for
from shared.settings import Settings
from shared.stores.memory.store import memory_store
from tests.test_web_support import PlayingDispatcher
from web import create_app


def card_for(settings: Settings) -> dict[str, Any]:
    store = memory_store()
    app = create_app(settings, store=store, dispatcher=PlayingDispatcher(store))
    response = app.test_client().get(
        "/.well-known/agent-card.json", base_url="http://agent.test:8080"
    )
    assert response.status_code == 200
    card: dict[str, Any] = response.get_json()
    return card


def compliant(card: dict[str, Any]) -> bool:
    """What a2a-sdk checks of every card it reads (it logs, never raises)."""
    return warn_on_missing_required_fields(parse_agent_card(card), "AgentCard")


@pytest.fixture
def module_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def test_a_plain_functions_docstring_is_read_from_its_source_not_by_importing_it(
    module_dir: Path,
) -> None:
    (module_dir / "never_imported.py").write_text(
        'raise RuntimeError("a front end must not import the agent")\n\n\n'
        "def summarize(text):\n"
        '    """Summarizes a text in three lines.\n\n'
        '    More detail the card leaves out.\n    """\n'
    )
    facts = facts_for("never_imported:summarize")
    assert "never_imported" not in sys.modules
    assert facts.description == "Summarizes a text in three lines."
    assert [(s.id, s.name, s.description) for s in facts.skills] == [
        ("summarize", "summarize", "Summarizes a text in three lines.")
    ]


def test_an_object_the_source_does_not_define_as_a_function_is_described_by_a_child(
    module_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (module_dir / "made_at_import.py").write_text(
        "def _make():\n"
        "    def ask_me(text):\n"
        '        """Answers questions about the weather."""\n'
        "    return ask_me\n\n\n"
        "agent = _make()\n"
    )
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join([str(module_dir), os.environ.get("PYTHONPATH", "")])
    )
    facts = facts_for("made_at_import:agent")
    assert "made_at_import" not in sys.modules
    assert facts.description == "Answers questions about the weather."
    assert [s.id for s in facts.skills] == ["ask_me"]


def test_an_agent_that_cannot_be_described_leaves_the_settings_card(module_dir: Path) -> None:
    (module_dir / "broken_agent.py").write_text("agent = 1 / 0\n")
    assert facts_for("broken_agent:agent") == AgentFacts()
    assert facts_for(None) == AgentFacts()


def test_the_default_card_has_what_a2a_1_0_requires() -> None:
    card = card_for(Settings())
    assert card["description"] and card["skills"]
    assert compliant(card)


def test_with_no_agent_the_card_still_has_a_description_and_a_skill() -> None:
    card = card_for(Settings(run=None))
    assert card["description"] == "toolnexus-agent: an agent served over A2A by toolnexus-serve"
    assert [s["id"] for s in card["skills"]] == ["toolnexus-agent"]
    assert compliant(card)


def test_the_settings_win_over_what_the_agent_says() -> None:
    skills = Path(__file__).resolve().parent.parent / "examples" / "skills"
    card = card_for(
        Settings(
            run="examples.agents:report",
            name="reporter",
            description="Writes reports.",
            skills=str(skills),
        )
    )
    assert (card["name"], card["description"]) == ("reporter", "Writes reports.")
    assert "report" not in [s["id"] for s in card["skills"]]
    assert card["skills"]


def test_a_functions_card_names_its_skill_after_it() -> None:
    card = card_for(Settings(run="examples.agents:report"))
    assert card["name"] == "toolnexus-agent"
    assert card["description"] == "Artifacts with file and data parts."
    assert [s["id"] for s in card["skills"]] == ["report"]


def test_a_framework_agents_card_is_its_name_instructions_and_tools() -> None:
    card = card_for(Settings(run="examples.frameworks.adk_agent:agent"))
    assert card["name"] == "concierge"
    assert card["description"] == "Tells the weather and books things once you approve."
    assert [(s["id"], s["description"]) for s in card["skills"]] == [
        ("get_weather", "Tells the weather in a city."),
        ("ask_for_approval", "Asks the user to approve a request before it is carried out."),
    ]
    assert compliant(card)
