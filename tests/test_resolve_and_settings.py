"""Every form `resolve_store` accepts, and the settings it is fed from."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from shared import ConfigError, Settings
from shared.resolve import resolve_store
from shared.stores.file import FileStore
from shared.stores.memory import MemoryStore, memory_store
from shared.stores.redis.store import RedisStore

# Targets for the "package.module:attr" form.
ready_store = memory_store()


class StoreClass:
    def get(self, task_id: str) -> Any:
        return None

    def save(self, task: Any) -> Any:
        return task


def store_factory() -> MemoryStore:
    return memory_store()


not_a_store = 42


@pytest.mark.parametrize("spec", [None, "memory"])
def test_memory_forms(spec: str | None) -> None:
    first, second = resolve_store(spec), resolve_store(spec)
    assert isinstance(first, MemoryStore)
    assert first is not second  # each call is a fresh store


def test_file_form(tmp_path: Path) -> None:
    store = resolve_store(f"file:{tmp_path / 'tasks'}")
    assert isinstance(store, FileStore)
    assert store.directory == tmp_path / "tasks"


@pytest.mark.parametrize(
    "url", ["redis://localhost:6379/0", "rediss://cache.example:6380/2", "unix:///tmp/redis.sock"]
)
def test_redis_forms_build_without_connecting(url: str) -> None:
    assert isinstance(resolve_store(url), RedisStore)


def test_reference_to_a_store_object() -> None:
    assert resolve_store(f"{__name__}:ready_store") is ready_store


def test_reference_to_a_factory_is_called() -> None:
    assert isinstance(resolve_store(f"{__name__}:store_factory"), MemoryStore)


def failing_factory() -> Any:
    raise RuntimeError("database unreachable")


def test_a_factory_that_raises_is_a_one_line_configuration_error() -> None:
    with pytest.raises(ConfigError, match=r"TOOLNEXUS_STORE: .* raised RuntimeError: database"):
        resolve_store(f"{__name__}:failing_factory")


def test_reference_to_a_store_class_is_instantiated() -> None:
    assert isinstance(resolve_store(f"{__name__}:StoreClass"), StoreClass)


def test_any_object_passes_straight_through() -> None:
    mine = SimpleNamespace(get=lambda task_id: None, save=lambda task: task)
    assert resolve_store(mine) is mine


@pytest.mark.parametrize("spec", ["postgres://db/tasks", "file:", "", "memory:", "s3 bucket"])
def test_unknown_string_lists_the_accepted_forms(spec: str) -> None:
    with pytest.raises(ValueError, match=r"accepted: 'memory'.*file:<dir>.*redis://"):
        resolve_store(spec)


def test_reference_that_does_not_import() -> None:
    with pytest.raises(ConfigError, match="cannot import module 'no_such_module_x'"):
        resolve_store("no_such_module_x:store")
    with pytest.raises(ConfigError, match="has no attribute 'missing'"):
        resolve_store(f"{__name__}:missing")
    with pytest.raises(ConfigError, match="not a task store"):
        resolve_store(f"{__name__}:not_a_store")


# --- settings ----------------------------------------------------------------


def test_defaults_without_environment() -> None:
    settings = Settings.from_env({})
    assert settings.store == "memory"
    assert settings.broker_url == "redis://localhost:6379/0"
    assert settings.run == "examples.agents:echo"
    card = (settings.name, settings.description, settings.version)
    assert card == ("toolnexus-agent", "", "0.1.0")
    assert settings.api_tokens == ()
    assert settings.on_task is None and settings.skills is None
    assert settings.heartbeat < settings.stale_after


def test_values_are_parsed() -> None:
    settings = Settings.from_env(
        {
            "TOOLNEXUS_STORE": "file:/data/tasks",
            "TOOLNEXUS_API_TOKENS": " a, b ,,c ",
            "TOOLNEXUS_STALE_AFTER": "90",
            "TOOLNEXUS_HEARTBEAT": "2.5",
            "TOOLNEXUS_PORT": "9000",
            "TOOLNEXUS_ON_TASK": "examples.agents:echo",
            "TOOLNEXUS_TASK_TTL": "",
        }
    )
    assert settings.store == "file:/data/tasks"
    assert settings.api_tokens == ("a", "b", "c")
    assert (settings.stale_after, settings.heartbeat, settings.port) == (90.0, 2.5, 9000)
    assert settings.on_task == "examples.agents:echo"
    assert settings.task_ttl is None


@pytest.mark.parametrize(
    ("variable", "value", "said"),
    [
        ("TOOLNEXUS_STORE", "postgres://x", "unknown store spec"),
        ("TOOLNEXUS_HEARTBEAT", "soon", "could not convert"),
        ("TOOLNEXUS_REAP_EVERY", "-1", "positive number of seconds"),
        ("TOOLNEXUS_STALE_AFTER", "nan", "positive number of seconds"),
        ("TOOLNEXUS_PORT", "http", "invalid literal"),
        ("TOOLNEXUS_MAX_BODY", "0", "at least 1"),
        ("TOOLNEXUS_RUN", "just_a_name", "package.module:function"),
    ],
)
def test_a_bad_value_names_its_variable(variable: str, value: str, said: str) -> None:
    with pytest.raises(ConfigError) as caught:
        Settings.from_env({variable: value})
    message = str(caught.value)
    assert message.startswith(f"{variable}={value!r}: ")
    assert said in message
    assert "\n" not in message


def test_heartbeat_must_be_shorter_than_the_stale_threshold() -> None:
    with pytest.raises(ConfigError, match=r"TOOLNEXUS_HEARTBEAT .* TOOLNEXUS_STALE_AFTER"):
        Settings.from_env({"TOOLNEXUS_HEARTBEAT": "30", "TOOLNEXUS_STALE_AFTER": "30"})


def test_every_variable_is_documented_on_the_configuration_page() -> None:
    page = (Path(__file__).parent.parent / "docs" / "configuration.md").read_text()
    missing = [name for name in Settings.variables() if f"`{name}`" not in page]
    assert missing == []


def test_settings_are_read_from_the_process_environment() -> None:
    code = "from shared import Settings; print(Settings.from_env().name)"
    env = {"TOOLNEXUS_NAME": "from-env", "PATH": "/usr/bin:/bin"}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True,
        cwd=Path(__file__).parent.parent,
    )  # fmt: skip
    assert out.stdout.strip() == "from-env"


@pytest.mark.parametrize(
    ("variable", "value", "line"),
    [
        ("TOOLNEXUS_STALE_AFTER", "soon", "TOOLNEXUS_STALE_AFTER='soon': could not convert"),
        ("TOOLNEXUS_STORE", "no_such_module_x:store", "TOOLNEXUS_STORE: cannot import module"),
        ("TOOLNEXUS_SKILLS", "/no/such/dir", "TOOLNEXUS_SKILLS='/no/such/dir': not a directory"),
        ("TOOLNEXUS_ON_TASK", "no_such_module_x:hook", "TOOLNEXUS_ON_TASK: cannot import module"),
    ],
)
def test_gunicorn_stops_with_one_line_on_a_bad_setting(
    variable: str, value: str, line: str
) -> None:
    root = Path(__file__).parent.parent
    result = subprocess.run(
        [sys.executable, "-m", "gunicorn", "web:create_app()"],
        env={**os.environ, variable: value},
        capture_output=True, text=True, timeout=60, cwd=root,
    )  # fmt: skip
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"toolnexus: {line}")
