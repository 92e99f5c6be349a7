"""The agent card and the SKILL.md loader."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from a2a.client.card_resolver import parse_agent_card

from shared import Settings, memory_store
from shared.errors import ConfigError
from tests.test_web_support import PlayingDispatcher
from web import create_app
from web.card.skills import load_skills

EXAMPLES = Path(__file__).parent.parent / "examples" / "skills"
CARD_PATHS = ("/.well-known/agent-card.json", "/.well-known/agent.json")


def card_for(
    settings: Settings,
    path: str = CARD_PATHS[0],
    headers: dict[str, str] | None = None,
    **app_args: Any,
) -> dict[str, Any]:
    store = memory_store()
    app = create_app(settings, store=store, dispatcher=PlayingDispatcher(store), **app_args)
    response = app.test_client().get(path, base_url="http://agent.test:8080", headers=headers)
    assert (response.status_code, response.mimetype) == (200, "application/json")
    card: dict[str, Any] = response.get_json()
    return card


ECHO = "The default agent: plain text in, plain text out."
V03_FIELDS = {"protocolVersion", "url", "preferredTransport", "security"}


def test_the_default_card_is_the_1_0_card_with_the_0_3_fields() -> None:
    card = card_for(Settings())
    assert card["name"] == "toolnexus-agent"
    # the default agent's docstring, read from its source (tests/test_card_from_agent.py)
    assert card["description"] == ECHO
    assert card["version"] == "0.1.0"
    assert card["capabilities"] == {"streaming": True, "pushNotifications": True}
    assert card["defaultInputModes"] == ["text/plain", "application/json"]
    assert card["defaultOutputModes"] == ["text/plain", "application/json"]
    assert card["supportedInterfaces"] == [
        *(
            {"url": "http://agent.test:8080/", "protocolBinding": "JSONRPC", "protocolVersion": v}
            for v in ("1.0", "0.3")
        ),
        {"url": "http://agent.test:8080", "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"},
        # the A2A 1.1 draft's, last: clients that pick the first they speak pick 1.0
        {"url": "http://agent.test:8080/", "protocolBinding": "JSONRPC", "protocolVersion": "1.1"},
        {"url": "http://agent.test:8080", "protocolBinding": "HTTP+JSON", "protocolVersion": "1.1"},
    ]
    assert card["skills"] == [{"id": "echo", "name": "echo", "description": ECHO, "tags": ["echo"]}]
    # where the toolnexus client and 0.3 clients post
    assert card["url"] == "http://agent.test:8080/"
    assert card["preferredTransport"] == "JSONRPC"
    assert card["protocolVersion"] == "0.3.0"
    assert "provider" not in card
    assert "securitySchemes" not in card and "security" not in card


@pytest.mark.parametrize(
    ("path", "headers", "settings"),
    [
        (CARD_PATHS[0], {}, Settings()),
        (CARD_PATHS[0], {"A2A-Version": "0.3"}, Settings()),
        (CARD_PATHS[0] + "?A2A-Version=0.3", {}, Settings()),  # as POST / takes it too
        (CARD_PATHS[1], {}, Settings()),
        (CARD_PATHS[0], {}, Settings(card_compat="0.3")),
        (CARD_PATHS[1], {}, Settings(card_compat="1.0")),  # the 0.2-era path is 0.3's
    ],
)
def test_0_3_readers_get_the_0_3_fields_too(
    path: str, headers: dict[str, str], settings: Settings
) -> None:
    store = memory_store()
    app = create_app(settings, store=store, dispatcher=PlayingDispatcher(store))
    response = app.test_client().get(path, base_url="http://agent.test:8080", headers=headers)
    card = response.get_json()
    assert card["protocolVersion"] == "0.3.0"
    assert card["url"] == "http://agent.test:8080/"
    assert card["preferredTransport"] == "JSONRPC"
    assert card["supportedInterfaces"][1]["protocolVersion"] == "0.3"
    # and the official SDK still reads it as the same card
    parsed = parse_agent_card(card)
    assert parsed.name == "toolnexus-agent"
    assert parsed.capabilities.streaming
    assert [(i.protocol_binding, i.protocol_version) for i in parsed.supported_interfaces] == [
        ("JSONRPC", "1.0"),
        ("JSONRPC", "0.3"),
        ("HTTP+JSON", "1.0"),
        ("JSONRPC", "1.1"),
        ("HTTP+JSON", "1.1"),
    ]


@pytest.mark.parametrize(
    ("headers", "settings"),
    [({"A2A-Version": "1.0"}, Settings()), ({}, Settings(card_compat="1.0"))],
    ids=["asked-for-1.0", "TOOLNEXUS_CARD_COMPAT=1.0"],
)
def test_the_1_0_card_alone_for_readers_that_refuse_unknown_fields(
    headers: dict[str, str], settings: Settings
) -> None:
    store = memory_store()
    app = create_app(settings, store=store, dispatcher=PlayingDispatcher(store))
    card = app.test_client().get(CARD_PATHS[0], headers=headers).get_json()
    assert not V03_FIELDS & card.keys()
    assert card["supportedInterfaces"][0]["protocolVersion"] == "1.0"


def test_the_official_sdks_default_card_also_carries_the_0_3_fields() -> None:
    """The choice above is the SDK's: its card endpoint serves the 1.0 card
    with the 0.3 fields merged in, from the same `supportedInterfaces`."""
    from a2a.server.request_handlers.response_helpers import agent_card_to_dict

    ours = card_for(Settings())
    served = agent_card_to_dict(
        parse_agent_card(card_for(Settings(), headers={"A2A-Version": "1.0"}))
    )
    for name in ("url", "preferredTransport", "supportedInterfaces"):
        assert served[name] == ours[name], name
    # The SDK copies the interface's "0.3"; the 0.3 schema's own example is "0.3.0".
    assert served["protocolVersion"] == "0.3" and ours["protocolVersion"] == "0.3.0"


def test_the_card_with_security_reads_in_both_forms() -> None:
    card = card_for(Settings(api_tokens=("t",)))
    assert card["security"] == [{"bearer": []}]
    assert card["securitySchemes"]["bearer"]["type"] == "http"
    assert card["securitySchemes"]["bearer"]["httpAuthSecurityScheme"]["scheme"] == "bearer"
    parsed = parse_agent_card(card)
    assert parsed.security_schemes["bearer"].http_auth_security_scheme.scheme == "bearer"
    assert list(parsed.security_requirements[0].schemes) == ["bearer"]


def test_the_card_can_be_cached_and_revalidated() -> None:
    store = memory_store()
    client = create_app(Settings(), store=store, dispatcher=PlayingDispatcher(store)).test_client()
    first = client.get(CARD_PATHS[0])
    assert "max-age=" in first.headers["Cache-Control"]
    assert first.headers["Last-Modified"]
    tag = first.headers["ETag"]
    again = client.get(CARD_PATHS[0], headers={"If-None-Match": tag})
    assert (again.status_code, again.data) == (304, b"")
    assert again.headers["ETag"] == tag
    other = client.get(CARD_PATHS[0], headers={"If-None-Match": '"stale"'})
    assert other.status_code == 200 and other.get_json()["name"] == "toolnexus-agent"
    strict = client.get(CARD_PATHS[0], headers={"A2A-Version": "1.0"})
    assert strict.headers["ETag"] != tag  # a different document, a different tag
    assert "A2A-Version" in first.headers["Vary"]


def test_card_fields_are_configurable() -> None:
    settings = Settings(
        name="weather",
        description="Forecasts.",
        version="2.1.0",
        url="https://agents.example.com/weather",
        provider_organization="Example Org",
        provider_url="https://example.com",
    )
    card = card_for(settings, card={"defaultOutputModes": ["text", "application/json"]})
    assert (card["name"], card["description"], card["version"]) == (
        "weather",
        "Forecasts.",
        "2.1.0",
    )
    assert card["supportedInterfaces"][0]["url"] == "https://agents.example.com/weather/"
    assert card["provider"] == {"organization": "Example Org", "url": "https://example.com"}
    assert card["defaultOutputModes"] == ["text", "application/json"]


def test_any_card_field_is_configurable_from_the_environment(tmp_path: Path) -> None:
    inline = Settings.from_env(
        {"TOOLNEXUS_CARD": '{"documentationUrl": "https://docs.example.com", "version": "9"}'}
    )
    card = card_for(inline)
    assert card["documentationUrl"] == "https://docs.example.com"
    assert card["version"] == "9"
    assert card["name"] == "toolnexus-agent"

    path = tmp_path / "card.json"
    path.write_text('{"capabilities": {"streaming": false, "pushNotifications": false, "x": 1}}')
    from_file = card_for(Settings.from_env({"TOOLNEXUS_CARD": f"@{path}"}))
    assert from_file["capabilities"]["x"] == 1
    # The factory's own overrides come last.
    both = card_for(inline, card={"version": "10"})
    assert (both["version"], both["documentationUrl"]) == ("10", "https://docs.example.com")


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ("[1, 2]", "must be a JSON object"),
        ("{oops", "Expecting property name"),
        ("@/no/such", "cannot read"),
    ],
)
def test_a_bad_card_setting_names_the_variable(value: str, said: str) -> None:
    with pytest.raises(ConfigError, match=r"^TOOLNEXUS_CARD=") as caught:
        Settings.from_env({"TOOLNEXUS_CARD": value})
    assert said in str(caught.value)


def test_the_official_sdk_reads_the_card_with_every_interface() -> None:
    card = parse_agent_card(card_for(Settings(skills=str(EXAMPLES), api_tokens=("t",))))
    assert [(i.protocol_binding, i.protocol_version) for i in card.supported_interfaces] == [
        ("JSONRPC", "1.0"),
        ("JSONRPC", "0.3"),
        ("HTTP+JSON", "1.0"),
        ("JSONRPC", "1.1"),
        ("HTTP+JSON", "1.1"),
    ]
    assert card.skills[0].name == "hello-world"
    assert "bearer" in card.security_schemes
    assert card.security_schemes["bearer"].http_auth_security_scheme.scheme == "bearer"


def test_with_grpc_the_card_lists_it_under_1_0_and_last_under_the_1_1_draft() -> None:
    card = card_for(Settings(grpc_url="grpc.agent.test:50051"))
    listed = [(i["protocolBinding"], i["protocolVersion"]) for i in card["supportedInterfaces"]]
    assert listed == [
        ("JSONRPC", "1.0"),
        ("JSONRPC", "0.3"),
        ("HTTP+JSON", "1.0"),
        ("GRPC", "1.0"),
        ("JSONRPC", "1.1"),
        ("HTTP+JSON", "1.1"),
        ("GRPC", "1.1"),
    ]
    grpc_urls = {i["url"] for i in card["supportedInterfaces"] if i["protocolBinding"] == "GRPC"}
    assert grpc_urls == {"grpc.agent.test:50051"}
    parsed = parse_agent_card(card)  # the official SDK reads every entry
    assert [(i.protocol_binding, i.protocol_version) for i in parsed.supported_interfaces] == listed


def test_shipped_example_skill() -> None:
    card = card_for(Settings(skills=str(EXAMPLES)))
    assert card["skills"] == [
        {
            "id": "hello-world",
            "name": "hello-world",
            "description": "Greets the caller and echoes back what they said.",
            "tags": ["example", "greeting"],
        }
    ]


def write_skill(root: Path, folder: str, text: str) -> Path:
    path = root / folder / "SKILL.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def skill_text(name: str, description: str = "does things", extra: str = "") -> str:
    return f"---\nname: {name}\ndescription: {description}\n{extra}---\n\n# {name}\n"


def test_skills_sorted_by_code_point_and_found_at_any_depth(tmp_path: Path) -> None:
    write_skill(tmp_path, "b", skill_text("beta"))
    write_skill(tmp_path, "deep/er/still", skill_text("Zeta"))
    write_skill(tmp_path, "a", skill_text("alpha", extra="tags: [x, y]\n"))
    write_skill(tmp_path, "u", skill_text("Ünicode"))
    skills = load_skills(tmp_path)
    assert [skill.name for skill in skills] == ["Zeta", "alpha", "beta", "Ünicode"]
    assert skills[1].card_entry() == {
        "id": "alpha",
        "name": "alpha",
        "description": "does things",
        "tags": ["x", "y"],
    }
    assert skills[0].card_entry()["tags"] == []


def test_skill_name_filter_ignores_unknown_names(tmp_path: Path) -> None:
    for name in ("one", "two", "three"):
        write_skill(tmp_path, name, skill_text(name))
    chosen = load_skills(tmp_path, ("three", "one", "nobody"))
    assert [skill.name for skill in chosen] == ["one", "three"]
    card = card_for(Settings(skills=str(tmp_path), skill_names=("two", "ghost")))
    assert [skill["name"] for skill in card["skills"]] == ["two"]


MALFORMED = {
    "no-front-matter": "# just markdown\nname: x\n",
    "unclosed": "---\nname: x\ndescription: y\n",
    "bad-yaml": "---\nname: [unclosed\ndescription: y\n---\n",
    "not-a-mapping": "---\n- a\n- b\n---\n",
    "no-name": "---\ndescription: y\n---\n",
    "empty-name": "---\nname: ''\ndescription: y\n---\n",
    "number-name": "---\nname: 5\ndescription: y\n---\n",
    "no-description": "---\nname: nodesc\n---\n",
    "bad-tags": "---\nname: badtags\ndescription: y\ntags: {a: 1}\n---\n",
    "empty": "",
}


def test_malformed_skill_files_are_skipped_with_a_log_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    for folder, text in MALFORMED.items():
        write_skill(tmp_path, folder, text)
    (tmp_path / "binary").mkdir()
    (tmp_path / "binary" / "SKILL.md").write_bytes(b"---\nname: \xff\xfe\n---\n")
    write_skill(tmp_path, "good", skill_text("good"))
    with caplog.at_level(logging.WARNING, logger="web.card.skills"):
        skills = load_skills(tmp_path)
    assert [skill.name for skill in skills] == ["good"]
    skipped = [record for record in caplog.records if "skipping skill" in record.getMessage()]
    assert len(skipped) == len(MALFORMED) + 1
    card = card_for(Settings(skills=str(tmp_path)))
    assert [skill["name"] for skill in card["skills"]] == ["good"]


def test_duplicate_names_keep_the_first_file(tmp_path: Path) -> None:
    write_skill(tmp_path, "a", skill_text("same", "first"))
    write_skill(tmp_path, "b", skill_text("same", "second"))
    assert [skill.description for skill in load_skills(tmp_path)] == ["first"]


def test_a_skills_path_that_is_not_a_directory_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="TOOLNEXUS_SKILLS"):
        load_skills(tmp_path / "missing")


def test_the_card_says_no_push_when_it_is_turned_off() -> None:
    card = card_for(Settings(push=False))
    assert card["capabilities"] == {"streaming": True, "pushNotifications": False}
