"""Every form `resolve_store` accepts, and the settings it is fed from."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from shared import ConfigError, Settings
from shared.store.adapter import Adapted
from shared.store.resolve import resolve_store
from shared.store.wiring import open_store
from shared.stores.file.store import FileStore
from shared.stores.memory.store import MemoryStore, memory_store
from shared.stores.redis.store import RedisStore
from shared.stores.sqlite.store import SqliteStore

# Targets for the "package.module:attr" form.
ROOT = Path(__file__).resolve().parent.parent
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


def test_sqlite_forms_name_a_relative_or_an_absolute_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    absolute = resolve_store(f"sqlite:///{tmp_path / 'tasks.db'}")  # sqlite:////tmp/...
    assert isinstance(absolute, SqliteStore) and absolute.path == tmp_path / "tasks.db"
    monkeypatch.chdir(tmp_path)
    relative = resolve_store("sqlite:///here.db")
    assert isinstance(relative, SqliteStore) and relative.path == Path("here.db")
    task = relative.save({"id": "t1", "status": {"state": "submitted"}})
    assert resolve_store(f"sqlite:///{tmp_path / 'here.db'}").get("t1") == task


@pytest.mark.parametrize(
    "spec",
    ["sqlite://", "sqlite:///", "sqlite:///:memory:", "sqlite:///dir/", "sqlite:///a.db?x=1"],
)
def test_a_sqlite_url_naming_no_shared_file_is_refused(spec: str) -> None:
    with pytest.raises(ValueError, match="sqlite"):
        resolve_store(spec)


def test_a_sqlite_database_in_a_missing_folder_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="must exist"):
        resolve_store(f"sqlite:///{tmp_path / 'nowhere' / 'tasks.db'}")


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
    resolved = open_store(Settings(), f"{__name__}:StoreClass")
    assert isinstance(resolved, Adapted) and isinstance(resolved.inner, StoreClass)


def test_a_whole_store_passes_straight_through_and_a_two_method_one_is_adapted() -> None:
    whole = memory_store()
    assert open_store(Settings(), whole) is whole
    mine = SimpleNamespace(get=lambda task_id: None, save=lambda task: task)
    adapted = open_store(Settings(), mine)
    assert isinstance(adapted, Adapted) and adapted.inner is mine


def test_any_other_object_is_used_as_it_is() -> None:
    # The seed's contract: anything else is used as-is; the adapter is the wiring's.
    mine = SimpleNamespace(get=lambda task_id: None, save=lambda task: task)
    assert resolve_store(mine) is mine
    assert isinstance(resolve_store(f"{__name__}:StoreClass"), StoreClass)


@pytest.mark.parametrize("spec", ["mysql://db/tasks", "file:", "", "memory:", "s3 bucket"])
def test_unknown_string_lists_the_accepted_forms(spec: str) -> None:
    with pytest.raises(ValueError, match=r"accepted: 'memory'.*file:<dir>.*redis://"):
        resolve_store(spec)


@pytest.mark.parametrize(
    "spec",
    [
        "postgresql://127.0.0.1/tasks",
        "postgres://u@db:5432/t",
        "postgresql://u:p@db1:5432,db2:5433,[::1]/t?target_session_attrs=read-write",
    ],
)
def test_postgres_urls_are_accepted_forms(spec: str) -> None:
    assert Settings.from_env({"TOOLNEXUS_STORE": spec}).store == spec
    for bad in ("postgresql://db:port/t", "postgresql://db1:5432,db2:port/t"):
        with pytest.raises(ConfigError, match=r"TOOLNEXUS_STORE=.*bad port"):
            Settings.from_env({"TOOLNEXUS_STORE": bad})


def _resolve_without(module: str, spec: str) -> str:
    """What resolving `spec` raises, as `Type: message`, in a fresh interpreter
    where importing `module` fails with ImportError (a None in sys.modules)."""
    code = (
        "import sys\n"
        f"sys.modules[{module!r}] = None\n"
        "from shared.store.resolve import resolve_store\n"
        "try:\n"
        f"    resolve_store({spec!r})\n"
        "except Exception as error:\n"
        "    print(f'{type(error).__name__}: {error}')\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    return result.stdout


@pytest.mark.parametrize(
    ("missing", "expected"),
    [
        # The extra's driver is not installed: the error names the extra to install.
        (
            "psycopg",
            r"ConfigError: TOOLNEXUS_STORE: the PostgreSQL store cannot be loaded"
            r" \(.*psycopg.*\); install toolnexus-serve\[postgres\]",
        ),
        # The store's package itself is absent from this installation.
        (
            "shared.stores.postgres",
            r"ConfigError: TOOLNEXUS_STORE: a postgresql:// store needs shared\.stores\.postgres,"
            r" which this installation does not have",
        ),
    ],
)
def test_a_postgres_url_without_the_postgres_store_is_a_config_error(
    missing: str, expected: str
) -> None:
    output = _resolve_without(missing, "postgresql://127.0.0.1/tasks")
    assert re.fullmatch(expected + "\n", output), output


def test_reading_the_settings_imports_no_store() -> None:
    # Every process reads its settings, a CLI too; only the one that opens
    # the store may pay for (or lack) its driver.
    code = (
        "import sys; from shared.settings import Settings;"
        " Settings.from_env({'TOOLNEXUS_STORE': 'postgresql://db/t'});"
        " Settings.from_env({'TOOLNEXUS_STORE': 'redis://r/0', 'TOOLNEXUS_FILE_FSYNC': 'no'});"
        " drivers = ('shared.stores', 'redis', 'psycopg');"
        " print(sorted(m for m in sys.modules if m.startswith(drivers)))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert result.stdout.strip() == "[]"


@pytest.mark.parametrize("module", ["shared.store.contract", "shared.store", "shared"])
def test_importing_the_store_contract_imports_no_store(module: str) -> None:
    # `shared` names the stores' constructors but imports each on first use.
    code = (
        f"import sys, {module};"
        " drivers = ('shared.stores', 'redis', 'psycopg');"
        " print(sorted(m for m in sys.modules if m.startswith(drivers)))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert result.stdout.strip() == "[]"


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
        ("TOOLNEXUS_STORE", "mysql://x", "unknown store spec"),
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
    packaged = "python:web.http.gunicorn_conf"  # what `toolnexus-serve web` runs gunicorn with
    result = subprocess.run(
        [sys.executable, "-m", "gunicorn", "-c", packaged, "web:create_app()"],
        env={**os.environ, variable: value},
        capture_output=True, text=True, timeout=60, cwd=root,
    )  # fmt: skip
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"toolnexus: {line}")


def test_the_public_card_lists_json_rpc_whatever_else_it_leaves_out() -> None:
    with pytest.raises(ConfigError, match="must list JSONRPC"):
        Settings.from_env({"TOOLNEXUS_CARD_BINDINGS": "HTTP+JSON,GRPC"})
    with pytest.raises(ConfigError, match="SOAP"):
        Settings.from_env({"TOOLNEXUS_CARD_BINDINGS": "JSONRPC,SOAP"})
    names = Settings.from_env({"TOOLNEXUS_CARD_BINDINGS": "jsonrpc, grpc"}).card_bindings
    assert names == ("JSONRPC", "GRPC")
